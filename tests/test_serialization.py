"""tinypytorch.save / tinypytorch.load against torch.save / torch.load(weights_only=True), torch 2.13.

Every structure is saved by both libraries (ours as built, torch's twin made of torch tensors) and what comes back
is compared: container types, key order, leaf types, dtypes, shapes, bytes and requires_grad. Then what the
structure cannot describe (a Module, a set, any object): pickled, loaded by weights_only=True exactly where torch's
weights-only load allows it and by weights_only=False always; what no file can do when loaded with weights_only
(run code), what load refuses to read, what save refuses to write, and a training checkpoint that continues
training exactly as the run that was never saved.
"""
import collections
import io
import json
import pickle
import re
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import tinypytorch
from reference import floats
from tinypytorch import Parameter, Variable, cuda, nn, optim

pytestmark = [pytest.mark.step52, pytest.mark.torch]


@pytest.fixture(autouse=True)
def _leave_the_framework_stream_as_found():
    """The checkpoint tests seed and draw; the tests after them find the default generator where it was."""
    with tinypytorch.random.fork_rng():
        yield


# ----- the two libraries side by side ---------------------------------------------------------------------------

def round_trip(obj, **load_options):
    buffer = io.BytesIO()
    tinypytorch.save(obj, buffer)
    buffer.seek(0)
    return tinypytorch.load(buffer, **load_options)


def torch_round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def as_torch(obj, made=None):
    """The same structure made of torch objects: Variables, arrays and NumPy scalars become tensors (one tensor for
    one Variable or array, however often it appears)."""
    made = {} if made is None else made
    if isinstance(obj, dict):
        return type(obj)((key, as_torch(value, made)) for key, value in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_torch(value, made) for value in obj)
    if isinstance(obj, tinypytorch.dtype):
        return getattr(torch, obj.dtype.name)
    if not isinstance(obj, (Variable, np.ndarray, np.generic)):
        return obj
    if id(obj) not in made:
        made[id(obj)] = obj, tensor_of(obj)  # obj kept alive, so that its id is not reused
    return made[id(obj)][1]


def tensor_of(obj):
    if not isinstance(obj, Variable):
        return torch.from_numpy(np.array(obj))
    tensor = torch.from_numpy(np.array(cuda.as_numpy(obj.data)))
    if isinstance(obj, Parameter):
        return torch.nn.Parameter(tensor, requires_grad=obj.requires_grad)
    return tensor.requires_grad_(obj.requires_grad)


def describe(obj):
    """What a loaded structure is, in terms both libraries share: containers with their types and keys in order;
    tensors (and arrays) by dtype, shape, bytes, requires_grad and whether they are Parameters; other leaves by
    type and repr (so that nan equals nan and -0.0 differs from 0.0)."""
    if isinstance(obj, dict):
        return type(obj).__name__, [(type(key).__name__, key, describe(value)) for key, value in obj.items()]
    if isinstance(obj, (list, tuple)):
        return type(obj).__name__, [describe(value) for value in obj]
    if isinstance(obj, torch.Tensor):
        array = obj.detach().numpy()
        return ("tensor", str(obj.dtype), array.shape, array.tobytes(), obj.requires_grad,
                isinstance(obj, torch.nn.Parameter))
    if isinstance(obj, (Variable, np.ndarray, np.generic)):
        array = np.asarray(cuda.as_numpy(obj.data if isinstance(obj, Variable) else obj))
        return ("tensor", str(tinypytorch.dtypes.as_torch(array.dtype)), array.shape, array.tobytes(),
                getattr(obj, "requires_grad", False),
                isinstance(obj, Parameter))
    return type(obj).__name__, repr(obj)


def leaf_types(obj):
    """The type of every leaf, in order: ours must come back as saved (a NumPy scalar as a 0-d array)."""
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in leaf_types(value)]
    if isinstance(obj, (list, tuple)):
        return [t for value in obj for t in leaf_types(value)]
    return [np.ndarray if isinstance(obj, np.generic) else type(obj)]


def check_like_torch(obj):
    """obj round-trips through our files as through torch's, and every leaf keeps its type."""
    loaded = round_trip(obj)
    assert describe(loaded) == describe(torch_round_trip(as_torch(obj)))
    assert describe(loaded) == describe(obj)
    assert leaf_types(loaded) == leaf_types(obj)
    return loaded


# ----- what save keeps ------------------------------------------------------------------------------------------

def trained(opt_class, **options):
    """A small model and its optimizer after two steps, so that the optimizer has state. The framework's random
    stream is left as found: this also runs while pytest collects."""
    with tinypytorch.random.fork_rng():
        tinypytorch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    optimizer = opt_class(model.parameters(), lr=0.1, **options)
    x = tinypytorch.from_numpy(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    for _ in range(2):
        optimizer.zero_grad()
        (model(x) ** 2).mean().backward()
        optimizer.step()
    return model, optimizer


DTYPE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
               "complex128"]


def structures():
    model, adam = trained(optim.Adam, amsgrad=True)
    _, sgd = trained(optim.SGD, momentum=0.9)
    w = Variable(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    return {
        "a tensor that requires grad": w,
        "a tensor that does not": Variable(np.arange(3), requires_grad=False),
        "a Parameter": Parameter(np.ones(2, np.float32)),
        "a Parameter that does not require grad": Parameter(np.ones(2, np.float32), requires_grad=False),
        "a NumPy array": np.arange(4, dtype=np.int16),
        "NumPy scalars": [np.float32(1.5), np.int64(-3), np.bool_(True), np.float64(0.1), np.uint8(7)],
        "Python leaves": [0, -2**70, 1.5, -0.0, float("nan"), float("inf"), True, False, None, "", "ünïcode"],
        "a model's state dict": model.state_dict(),
        "the Parameters themselves": model.state_dict(keep_vars=True),
        "Adam's state dict (amsgrad)": adam.state_dict(),
        "SGD's state dict (momentum)": sgd.state_dict(),
        "a checkpoint": {"epoch": 3, "model": model.state_dict(), "optimizer": adam.state_dict(), "loss": 0.25},
        "int and str keys apart": {1: "one", "1": "the string one", -7: [], "": {}},
        "lists and tuples": [(), [], (1, [2, (w, None)]), [np.zeros((0, 3))]],
        "NumPy's keyword names as keys": {"file": w, "allow_pickle": np.ones(2), "fix_imports": 1, "args": (2,),
                                          "kwds": {"file": 3}, "arr_0": np.zeros(1), "mmap_mode": "r"},
        "this module's entry names as keys": {"structure": np.ones(1), "data/0": np.zeros(2), "data/1": 1.0},
        "an OrderedDict in a dict": {"b": collections.OrderedDict([("z", 1), ("a", 2)]), "a": 0},
        "dtypes": {"dtype": tinypytorch.float16, "all": [getattr(tinypytorch, name) for name in DTYPE_NAMES]},
    }


@pytest.mark.parametrize("name", list(structures()))
def test_every_structure_comes_back_as_from_torch_load(name):
    check_like_torch(structures()[name])


def test_a_dtype_comes_back_as_the_one_object_as_from_torch_load():
    dtypes_ = [getattr(tinypytorch, name) for name in DTYPE_NAMES]
    assert all(a is b for a, b in zip(round_trip(dtypes_), dtypes_))
    assert all(a is getattr(torch, name) for a, name in zip(torch_round_trip(as_torch(dtypes_)), DTYPE_NAMES))


DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_,
          np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_and_bytes_are_kept_exactly(dtype):
    values = np.array([[0, 1, 2], [3, 100, 0.5]]).astype(dtype)
    values = np.asfortranarray(values)[:, ::2]  # a view that is not contiguous
    obj = {"tensor": Variable(values, requires_grad=False), "array": values, "scalar": values[0, 0]}
    loaded = check_like_torch(obj)
    assert loaded["tensor"].dtype == loaded["array"].dtype == loaded["scalar"].dtype == np.dtype(dtype)


def test_a_numpy_scalar_comes_back_as_a_0d_array_of_its_dtype_as_a_0d_tensor_from_torch():
    loaded = round_trip([np.float32(1.5), np.int8(-2)])
    assert [(type(a), a.shape, a.dtype) for a in loaded] == [(np.ndarray, (), np.float32), (np.ndarray, (), np.int8)]
    theirs = torch_round_trip([torch.tensor(1.5, dtype=torch.float32), torch.tensor(-2, dtype=torch.int8)])
    assert [(t.shape, t.dtype) for t in theirs] == [((), torch.float32), ((), torch.int8)]
    buffer = io.BytesIO()
    torch.save(np.float32(1.5), buffer)  # torch's own weights-only loader refuses a NumPy scalar
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(buffer, weights_only=True)


def test_requires_grad_comes_back_as_saved_on_a_new_leaf_as_from_torch():
    x = Variable(np.arange(3.0), requires_grad=True)
    (x * x).sum().backward()
    y = x * 2  # not a leaf
    x_t = torch.arange(3.0, dtype=torch.float64, requires_grad=True)
    (x_t * x_t).sum().backward()
    ours, theirs = round_trip([x, y]), torch_round_trip([x_t, x_t * 2])
    for a, t in zip(ours, theirs):
        assert (a.requires_grad, a.is_leaf, a.grad, a.creator) == (t.requires_grad, t.is_leaf, t.grad, t.grad_fn)
        assert (a.requires_grad, a.is_leaf, a.grad) == (True, True, None)
    assert ours[0] is not x and not np.shares_memory(ours[0].data, x.data)


def test_a_tensor_saved_twice_comes_back_as_one_object_as_from_torch():
    x, a = Variable(np.ones(2)), np.zeros(3)
    ours = round_trip({"x": x, "again": [x, a], "a": a})
    theirs = torch_round_trip(as_torch({"x": x, "again": [x, x]}))
    assert theirs["x"] is theirs["again"][0]
    assert ours["x"] is ours["again"][0] and ours["a"] is ours["again"][1] and ours["x"] is not ours["a"]
    assert round_trip([np.True_, np.True_])[0] is not round_trip([np.True_, np.True_])[1]  # scalars: one array each


def test_a_container_saved_twice_comes_back_as_one_object_as_from_torch():
    inner, inner_t = {"w": Variable(np.ones(2))}, {"w": torch.ones(2)}
    ours, theirs = round_trip([inner, (inner, [inner])]), torch_round_trip([inner_t, (inner_t, [inner_t])])
    assert ours[0] is ours[1][0] is ours[1][1][0]
    assert theirs[0] is theirs[1][0] is theirs[1][1][0]


def test_deep_nesting_comes_back_as_from_torch():
    obj = [Variable(np.ones(1))]
    for depth in range(100):
        obj = {f"level {depth}": obj} if depth % 2 else (obj, depth)
    check_like_torch(obj)


def test_nesting_deeper_than_torch_loads_comes_back():
    obj = leaf = np.arange(3)
    for depth in range(5000):  # torch.load(weights_only=True) stops near 500 levels with a RecursionError
        obj = [obj] if depth % 2 else {"k": obj}
    loaded = round_trip(obj)
    for depth in reversed(range(5000)):
        assert type(loaded) is (list if depth % 2 else dict) and len(loaded) == 1
        loaded = loaded[0] if depth % 2 else loaded["k"]
    np.testing.assert_array_equal(loaded, leaf)


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]))
    kind = np.dtype(dtype).kind
    elements = floats(width=np.dtype(dtype).itemsize * 8) if kind == "f" else None
    values = draw(arrays(dtype, array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), elements=elements))
    form = draw(st.sampled_from(["Variable", "Parameter", "ndarray", "scalar"]))
    requires_grad = kind == "f" and draw(st.booleans())
    if form == "ndarray":
        return values
    if form == "scalar":
        return values.reshape(-1)[0] if values.size else dtype(0)
    return (Variable if form == "Variable" else Parameter)(values, requires_grad=requires_grad)


LEAVES = (st.none() | st.booleans() | st.integers() | floats() | st.text(max_size=5) | tensors())
STRUCTURES = st.recursive(LEAVES, lambda children: (
    st.lists(children, max_size=3)
    | st.lists(children, max_size=3).map(tuple)
    | st.dictionaries(st.integers() | st.text(max_size=5), children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3).map(collections.OrderedDict)), max_leaves=12)


@given(STRUCTURES)
def test_any_structure_comes_back_as_from_torch_load(obj):
    check_like_torch(obj)


@given(st.dictionaries(st.text(max_size=8), tensors(), min_size=1, max_size=4).map(collections.OrderedDict))
def test_any_state_dict_of_tensors_comes_back_as_from_torch_load(state):
    check_like_torch(state)


# ----- f: a path under exactly its name, or a binary file object -----------------------------------------------

@pytest.mark.parametrize("as_path", [str, lambda p: p], ids=["str", "pathlib.Path"])
def test_a_path_is_written_under_exactly_its_name(tmp_path, as_path):
    obj = {"w": Variable(np.ones(2, np.float32))}
    tinypytorch.save(obj, as_path(tmp_path / "weights.pt"))
    assert [p.name for p in tmp_path.iterdir()] == ["weights.pt"]  # np.savez would have written weights.pt.npz
    assert describe(tinypytorch.load(as_path(tmp_path / "weights.pt"))) == describe(obj)
    with open(tmp_path / "weights.pt", "rb") as file:
        assert describe(tinypytorch.load(file)) == describe(obj)


def test_the_file_is_an_npz_archive_that_numpy_reads_without_pickle(tmp_path):
    tinypytorch.save({"epoch": 3, "w": Variable(np.arange(3.0))}, tmp_path / "c.pt")
    with np.load(tmp_path / "c.pt", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["data/0", "structure"]
        np.testing.assert_array_equal(archive["data/0"], np.arange(3.0))
        structure = json.loads(archive["structure"].tobytes())
    assert structure == {"format": "tinypytorch.save", "version": 1, "nodes": [  # items first, the root last
        3, {"type": "Variable", "data": 0, "device": "cpu", "requires_grad": True},
        {"type": "dict", "items": [["epoch", 0], ["w", 1]]}]}


# ----- load's options -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{}, {"weights_only": True}, {"weights_only": False}, {"weights_only": None},
                                     {"map_location": None}, {"map_location": "cpu"},
                                     {"map_location": tinypytorch.device("cpu")}, {"mmap": False}, {"mmap": None}],
                         ids=repr)
def test_load_takes_torchs_options(options):
    obj = structures()["a checkpoint"]
    assert describe(round_trip(obj, **options)) == describe(obj)


@pytest.mark.parametrize("map_location", ["meta", "mps", "cuda:x", torch.device("cpu"), {"cpu": "mps"}],
                         ids=["meta", "mps", "cuda:x", "torch.device", "a dict to a device it does not have"])
def test_load_refuses_the_map_locations_it_does_not_have(map_location):
    with pytest.raises(ValueError, match="load: map_location must be None, 'cpu', 'cuda', 'cuda:<index>', a "
                                         "tinypytorch.device, a dict of these or a function, got"):
        round_trip(np.ones(1), map_location=map_location)


@pytest.mark.parametrize("map_location", [{"cuda:0": "cpu"}, {"cpu": "cpu"}, {}, lambda storage, where: storage,
                                          lambda storage, where: None],
                         ids=["dict from cuda", "dict from cpu", "empty dict", "function", "function giving None"])
def test_load_takes_torchs_dict_and_function_forms_of_map_location(map_location):
    obj = {"w": Variable(np.arange(3.0)), "a": np.ones(2, np.int16), "s": {1}}  # the set: a pickled file too
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0, dtype=torch.float64, requires_grad=True), "a": torch.ones(2, dtype=torch.int16),
                "s": {1}}, buffer)
    buffer.seek(0)
    theirs = torch.load(buffer, map_location=map_location)
    for part in (obj, {"w": obj["w"], "a": obj["a"]}):  # pickled, then described without pickle
        ours = round_trip(part, map_location=map_location)
        assert describe(ours) == describe({key: theirs[key] for key in part})


def test_a_map_location_function_gets_each_array_and_its_saved_device_and_places_it():
    seen = []

    def where(array, location):
        seen.append((type(array), location))
        return Variable(array * 2)  # whatever it returns, placed: here doubled, to see that it is used

    loaded = round_trip({"w": Variable(np.arange(3.0))}, map_location=where)
    assert seen == [(np.ndarray, "cpu")]
    np.testing.assert_array_equal(loaded["w"].data, np.arange(3.0) * 2)
    with pytest.raises(TypeError, match="load: map_location returned a str; it must return the array"):
        round_trip(np.ones(1), map_location=lambda array, location: "cpu")


def test_load_refuses_mmap_and_a_weights_only_that_is_not_a_bool():
    with pytest.raises(ValueError, match="load: mmap=True is not supported"):
        round_trip(np.ones(1), mmap=True)
    with pytest.raises(TypeError, match="load: weights_only must be a bool, got str"):
        round_trip(np.ones(1), weights_only="yes")


@pytest.mark.parametrize("extra", [{}, {"s": {1}}], ids=["described", "pickled"])
def test_arrays_come_back_on_the_device_they_were_saved_from(xp, extra):
    x = Variable(xp.asarray(np.arange(3.0)), requires_grad=True)
    a = xp.asarray(np.arange(4))
    loaded = round_trip({"x": x, "a": a, **extra})
    assert type(loaded["x"].data) is type(x.data) and type(loaded["a"]) is type(a)
    assert cuda.device_of(loaded["x"].data) == cuda.device_of(x.data) and loaded["x"].requires_grad
    for to_cpu in ("cpu", {str(cuda.device_of(x.data)): "cpu"}):
        on_cpu = round_trip({"x": x, "a": a, **extra}, map_location=to_cpu)
        assert type(on_cpu["x"].data) is np.ndarray and type(on_cpu["a"]) is np.ndarray
        np.testing.assert_array_equal(on_cpu["x"].data, np.arange(3.0))
        np.testing.assert_array_equal(on_cpu["a"], np.arange(4))
    if cuda.is_available():
        on_gpu = round_trip({"x": Variable(np.arange(3.0)), **extra}, map_location=tinypytorch.device("cuda"))
        assert cuda.is_on(on_gpu["x"].data, "cuda")
        np.testing.assert_array_equal(cuda.as_numpy(on_gpu["x"].data), np.arange(3.0))


def test_a_gpu_file_on_a_machine_without_a_gpu_names_the_fix(xp):
    if xp is np:
        pytest.skip("needs arrays saved from a device")
    buffer = io.BytesIO()
    tinypytorch.save({"x": Variable(xp.asarray(np.arange(3.0)))}, buffer)
    previous = cuda.use_backend(None)  # now a machine without a GPU
    try:
        buffer.seek(0)
        with pytest.raises(RuntimeError, match="load: cannot place the arrays of the file on cuda:0: .*pass "
                                               "map_location='cpu'"):
            tinypytorch.load(buffer)
        buffer.seek(0)
        np.testing.assert_array_equal(tinypytorch.load(buffer, map_location="cpu")["x"].data, np.arange(3.0))
        buffer.seek(0)
        with pytest.raises(RuntimeError, match="load: cannot place the arrays of the file on cuda: "):
            tinypytorch.load(buffer, map_location="cuda")
    finally:
        cuda.use_backend(*previous)


# ----- what the structure cannot describe: pickled, loaded under torch's weights-only rule -----------------------

def a_function():
    pass


class Thing:
    def __init__(self):
        self.value = 3

    def __eq__(self, other):
        return type(other) is Thing and other.value == self.value


def a_cycle():
    loop = [1]
    loop.append({"back": loop})
    return loop


def cycle_shape(obj):
    return obj[0], list(obj[1]), obj[1]["back"] is obj


MODEL, SGD = trained(optim.SGD, momentum=0.9)


def torch_twins():
    """torch's Sequential with MODEL's weights, and an SGD on its parameters."""
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    twin.load_state_dict({key: torch.from_numpy(value.data.copy()) for key, value in MODEL.state_dict().items()})
    return twin, torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)


def same_module(loaded, saved):
    return type(loaded) is type(saved) and describe(loaded.state_dict()) == describe(saved.state_dict())


# name: (ours, torch's twin, how to compare what ours gives back with weights_only=False)
PICKLED = {
    "a Module": (MODEL, torch_twins()[0], same_module),
    "an optimizer": (SGD, torch_twins()[1],
                     lambda a, b: type(a) is type(b) and describe(a.state_dict()) == describe(b.state_dict())),
    "a Module in a dict": ({"model": MODEL}, {"model": torch_twins()[0]}, lambda a, b: same_module(a["model"],
                                                                                                  b["model"])),
    "a function": (a_function, a_function, lambda a, b: a is b),
    "a NumPy dtype": (np.dtype(np.float32), np.dtype(np.float32), lambda a, b: a == b),
    "a builtin in a list": ({"a": [1, len]}, {"a": [1, len]}, lambda a, b: a == b),
    "an object": (Thing(), Thing(), lambda a, b: a == b),
    "a set": ({1, 2}, {1, 2}, lambda a, b: a == b),
    "a frozenset": (frozenset([1]), frozenset([1]), lambda a, b: a == b),
    "a defaultdict": (collections.defaultdict(list, a=[1]), collections.defaultdict(list, a=[1]),
                      lambda a, b: a == b and a.default_factory is list),
    "a masked array": (np.ma.masked_array([1.0, 2.0], mask=[0, 1]), np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
                       lambda a, b: type(a) is type(b) and a.mask.tolist() == b.mask.tolist()),
    "tuple keys": ({(1, 2): 3}, {(1, 2): 3}, lambda a, b: a == b),
    "bool keys": ({"a": {True: 3}}, {"a": {True: 3}}, lambda a, b: a == b and type(next(iter(a["a"]))) is bool),
    "float keys": ({"a": {1.5: 3}}, {"a": {1.5: 3}}, lambda a, b: a == b),
    "an array of strings": (np.array(["text"]), np.array(["text"]), lambda a, b: a.tolist() == b.tolist()),
    "an array of objects": ([np.array([None])], [np.array([None])], lambda a, b: a[0].tolist() == [None]),
    "a container that holds itself": (a_cycle(), a_cycle(), lambda a, b: cycle_shape(a) == cycle_shape(b)),
    "bytes, a complex number, a Counter": ([b"ab", 1 + 2j, collections.Counter("aab")],
                                           [b"ab", 1 + 2j, collections.Counter("aab")], lambda a, b: a == b),
    "a set beside tensors": ({"w": Variable(np.ones(2)), "s": {3}}, {"w": torch.ones(2, dtype=torch.float64,
                                                                                     requires_grad=True), "s": {3}},
                             lambda a, b: describe(a["w"]) == describe(b["w"]) and a["s"] == b["s"]),
    "a device, a Size, a dtype in a set's company": ([tinypytorch.device("cpu"), tinypytorch.Size([2, 3]),
                                                      tinypytorch.float16, {1}],
                                                     [torch.device("cpu"), torch.Size([2, 3]), torch.float16, {1}],
                                                     lambda a, b: a[0] == b[0] and a[1] == b[1] and a[2] is b[2]),
}


def torch_allows(obj):
    """Whether torch.load with weights_only=True (its default) gives back what torch.save wrote of obj."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer)
    except pickle.UnpicklingError:
        return False
    return True


@pytest.mark.parametrize("name", list(PICKLED))
def test_what_the_structure_cannot_describe_is_pickled_and_loaded_under_torchs_weights_only_rule(name):
    ours, theirs, same = PICKLED[name]
    buffer = io.BytesIO()
    tinypytorch.save(ours, buffer)
    with np.load(io.BytesIO(buffer.getvalue()), allow_pickle=False) as archive:
        assert "pickle" in archive.files
    if torch_allows(theirs):
        buffer.seek(0)
        assert same(tinypytorch.load(buffer), ours)
    else:
        buffer.seek(0)
        with pytest.raises(pickle.UnpicklingError, match="Weights only load failed. .* re-running `tinypytorch.load` "
                                                         "with `weights_only` set to `False` will likely succeed"):
            tinypytorch.load(buffer)
    buffer.seek(0)
    assert same(tinypytorch.load(buffer, weights_only=False), ours)


def test_the_refusal_names_the_global_as_torchs_does():
    for obj, name in ((MODEL, "tinypytorch.nn.modules.Sequential"), (frozenset([1]), "frozenset"),
                      (a_function, f"{__name__}.a_function")):
        buffer = io.BytesIO()
        tinypytorch.save(obj, buffer)
        buffer.seek(0)
        with pytest.raises(pickle.UnpicklingError, match=f"Unsupported global: GLOBAL {re.escape(name)} was not an "
                                                         "allowed global by default"):
            tinypytorch.load(buffer)


def test_a_pickled_file_keeps_its_arrays_as_entries_that_numpy_reads_without_pickle(tmp_path):
    tinypytorch.save({"w": Variable(np.arange(3.0)), "s": {1}}, tmp_path / "c.pt")
    with np.load(tmp_path / "c.pt", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["data/0", "pickle", "structure"]
        np.testing.assert_array_equal(archive["data/0"], np.arange(3.0))
        assert json.loads(archive["structure"].tobytes()) == {"format": "tinypytorch.save", "version": 1,
                                                              "pickle": "pickle"}


def test_save_refuses_what_pickle_refuses_as_torch_does_and_writes_nothing(tmp_path):
    unpicklable = {"f": lambda: 1}  # a local object: pickle's AttributeError
    with pytest.raises((pickle.PicklingError, AttributeError)) as theirs:
        torch.save(unpicklable, io.BytesIO())
    with pytest.raises(type(theirs.value), match="Can't pickle local object"):
        tinypytorch.save(unpicklable, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("obj", [Variable(None), {"s": {1}, "v": [Variable(None)]}], ids=["described", "pickled"])
def test_save_refuses_a_variable_without_data_and_writes_nothing(tmp_path, obj):
    with pytest.raises(ValueError, match="save: obj.* is a Variable without data"):
        tinypytorch.save(obj, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


def test_save_and_load_refuse_what_is_not_a_path_or_a_binary_file(tmp_path):
    with pytest.raises(TypeError, match=r"save: f must be a path or a file object opened in binary mode \('wb'\), "
                                        "got int"):
        tinypytorch.save({}, 3)
    with open(tmp_path / "t.txt", "w") as text, pytest.raises(TypeError, match="save: f must be a path or a file "
                                                                               "object opened in binary mode"):
        tinypytorch.save({}, text)
    with pytest.raises(TypeError, match=r"load: f must be a path or a file object opened in binary mode \('rb'\), "
                                        "got list"):
        tinypytorch.load([])


# ----- files that save did not write: refused with what they are, never unpickled ------------------------------

def written(tmp_path, write):
    path = tmp_path / "file"
    with open(path, "wb") as file:
        write(file)
    return path


def npz(**entries):
    return lambda file: np.savez(file, **entries)


def zip_of_text(file):
    with zipfile.ZipFile(file, "w") as archive:
        archive.writestr("notes.txt", "hello")


def structure_bytes(structure):
    return np.frombuffer(json.dumps(structure).encode(), dtype=np.uint8)


GOOD = {"format": "tinypytorch.save", "version": 1, "nodes": [{"type": "ndarray", "data": 0, "device": "cpu"}]}
PICKLED_STRUCTURE = {"format": "tinypytorch.save", "version": 1, "pickle": "pickle"}


def naming(pid):
    """The bytes of a pickle of {"w": <persistent id pid>}, as an array: an archive's pickle entry."""
    marker, buffer = object(), io.BytesIO()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return pid if obj is marker else None

    Pickler(buffer, 2).dump({"w": marker})
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)
NOT_OURS = {
    "empty": (lambda file: None, "load: 'FILE' is empty, not a file that tinypytorch.save wrote"),
    "text": (lambda file: file.write(b"epoch,loss\n3,0.25\n"), "is neither a zip archive nor a NumPy file"),
    "npy": (lambda file: np.save(file, np.arange(3)), r"is a NumPy \.npy file \(one array, for numpy.load\)"),
    "pickle": (lambda file: pickle.dump({"w": 1}, file), r"is pickled data \(torch.save's legacy format"),
    "torch zip": (lambda file: torch.save({"w": torch.ones(2)}, file),
                  r"was written by torch.save \(a zip archive around a pickle\), which load never unpickles"),
    "torch legacy": (lambda file: torch.save({"w": torch.ones(2)}, file, _use_new_zipfile_serialization=False),
                     "is pickled data"),
    "plain npz": (npz(w=np.ones(2)), "is a zip archive without the entry 'structure', not a file that "
                                     "tinypytorch.save wrote"),
    "zip of text": (lambda file: zip_of_text(file), "a zip archive without the entry 'structure'"),
    "not JSON": (npz(structure=np.frombuffer(b"{oops", np.uint8)), "the entry 'structure' of 'FILE' is not a "
                                                                   "structure that tinypytorch.save wrote"),
    "other JSON": (npz(structure=structure_bytes({"format": "other"})), "is not a structure that tinypytorch"),
    "floats": (npz(structure=np.ones(3)), "is not a structure that tinypytorch"),
    "newer": (npz(structure=structure_bytes({**GOOD, "version": 2})),
              "load: 'FILE' has version 2 of the format; this tinypytorch reads version 1"),
    "missing array": (npz(structure=structure_bytes(GOOD)), "load: 'FILE' is damaged: its structure does not match "
                                                             "its arrays"),
    "unknown type": (npz(structure=structure_bytes({**GOOD, "nodes": [{"type": "set", "items": []}]})),
                     "is damaged: its structure does not match its arrays"),
    "a later item": (npz(structure=structure_bytes({**GOOD, "nodes": [{"type": "list", "items": [0]}]})),
                     "is damaged: its structure does not match its arrays"),
    "no nodes": (npz(structure=structure_bytes({**GOOD, "nodes": []})), "is damaged"),
    "a dtype no tensor holds": (npz(structure=structure_bytes({**GOOD, "nodes": [{"type": "dtype",
                                                                                  "name": "object"}]})),
                                "is damaged: its structure does not match its arrays"),
    "truncated": (lambda file: file.write(b"PK\x03\x04" + b"\x00" * 20), r"is a damaged zip archive"),
    "no pickle where one is named": (npz(structure=structure_bytes(PICKLED_STRUCTURE)),
                                     "load: 'FILE' is damaged: its structure names no pickle that save wrote"),
    "a pickle of floats": (npz(structure=structure_bytes(PICKLED_STRUCTURE), pickle=np.ones(3)),
                           "is damaged: its structure names no pickle"),
    "a pickle that names a missing array": (
        npz(structure=structure_bytes(PICKLED_STRUCTURE), pickle=naming(("array", "Variable", 5, "cpu", False))),
        "load: 'FILE' is damaged: its pickle does not match its arrays"),
    "a pickle that names something else": (npz(structure=structure_bytes(PICKLED_STRUCTURE),
                                               pickle=naming(("module", "os"))), "its pickle does not match"),
    "text that starts as a zip's name": (lambda file: file.write(b"PKG-INFO\n"), "is neither a zip archive"),
}


@pytest.mark.parametrize("name", list(NOT_OURS))
@pytest.mark.parametrize("weights_only", [True, False])
def test_load_refuses_a_file_that_save_did_not_write_and_says_what_it_is(tmp_path, name, weights_only):
    write, message = NOT_OURS[name]
    path = written(tmp_path, write)
    with pytest.raises(RuntimeError, match=message.replace("FILE", re.escape(str(path)))):
        tinypytorch.load(path, weights_only=weights_only)


UNPICKLED = []


def record(what):
    UNPICKLED.append(what)
    return what


class Sentinel:
    """Whoever unpickles it calls record: the proof that a loader ran code from a file."""

    def __reduce__(self):
        return record, ("code ran",)


def test_the_sentinel_would_be_seen_if_unpickled():
    UNPICKLED.clear()
    pickle.loads(pickle.dumps(Sentinel()))
    assert UNPICKLED == ["code ran"]
    UNPICKLED.clear()


HOSTILE = {
    "an object array where an array is described": (
        npz(structure=structure_bytes(GOOD), **{"data/0": np.array([Sentinel()], dtype=object)}),
        "the entry 'data/0' of 'FILE' cannot be read without unpickling"),
    "an object array as the structure": (
        npz(structure=np.array([Sentinel()], dtype=object)),
        "the entry 'structure' of 'FILE' cannot be read without unpickling"),
    "a pickle": (lambda file: pickle.dump({"w": Sentinel()}, file), "is pickled data"),
    "torch.save's zip file": (lambda file: torch.save({"w": Sentinel()}, file), "was written by torch.save"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("weights_only", [True, False])
def test_a_file_cannot_run_code_when_loaded(tmp_path, name, weights_only):
    UNPICKLED.clear()
    write, message = HOSTILE[name]
    path = written(tmp_path, write)
    with pytest.raises(RuntimeError, match=message.replace("FILE", re.escape(str(path)))):
        tinypytorch.load(path, weights_only=weights_only)
    assert UNPICKLED == []


def test_a_pickle_in_our_archive_runs_no_code_with_weights_only_and_runs_it_without_as_torchs(tmp_path):
    UNPICKLED.clear()
    hostile = np.frombuffer(pickle.dumps({"w": Sentinel()}, protocol=2), dtype=np.uint8)
    path = written(tmp_path, npz(structure=structure_bytes(PICKLED_STRUCTURE), pickle=hostile))
    with pytest.raises(pickle.UnpicklingError, match=r"Unsupported global: GLOBAL \S*record was not an allowed"):
        tinypytorch.load(path)
    assert UNPICKLED == []
    tinypytorch.load(path, weights_only=False)  # as torch.load(weights_only=False): for a trusted file only
    assert UNPICKLED == ["code ran"]
    UNPICKLED.clear()
    torch.save({"w": Sentinel()}, tmp_path / "theirs.pt")
    with pytest.raises(pickle.UnpicklingError):
        torch.load(tmp_path / "theirs.pt")
    assert UNPICKLED == []
    torch.load(tmp_path / "theirs.pt", weights_only=False)
    assert UNPICKLED == ["code ran"]
    UNPICKLED.clear()


# ----- a training checkpoint --------------------------------------------------------------------------------------

OPTIMIZERS = {"SGD momentum": (optim.SGD, {"momentum": 0.9}),
              "SGD nesterov, weight decay": (optim.SGD, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
              "Adam": (optim.Adam, {}), "Adam amsgrad": (optim.Adam, {"amsgrad": True}), "AdamW": (optim.AdamW, {})}
BATCHES = np.random.default_rng(1).standard_normal((7, 5, 3)).astype(np.float32)


def train(model, optimizer, batches):
    for batch in batches:
        optimizer.zero_grad()
        loss = ((model(tinypytorch.from_numpy(batch)) - 1) ** 2).mean()
        loss.backward()
        optimizer.step()
    return float(loss.data)


def fresh(opt_class, options, seed):
    tinypytorch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    return model, opt_class(model.parameters(), lr=0.05, **options)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_checkpoint_continues_training_exactly_as_the_run_that_was_never_saved(tmp_path, name):
    opt_class, options = OPTIMIZERS[name]
    model, optimizer = fresh(opt_class, options, seed=0)
    loss = train(model, optimizer, BATCHES[:3])
    tinypytorch.save({"epoch": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "loss": loss},
                     tmp_path / "checkpoint.pt")
    train(model, optimizer, BATCHES[3:])  # the run that was never saved

    resumed, resumed_optimizer = fresh(opt_class, options, seed=1)  # other weights until the checkpoint loads
    checkpoint = tinypytorch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert (checkpoint["epoch"], checkpoint["loss"]) == (3, loss)
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    train(resumed, resumed_optimizer, BATCHES[3:])

    for p, q in zip(model.parameters(), resumed.parameters()):
        np.testing.assert_array_equal(q.data, p.data)
        assert q.dtype == p.dtype
    assert describe(resumed_optimizer.state_dict()) == describe(optimizer.state_dict())
