"""PyTorch names that tutorials use, against torch: the factories empty, empty_like, randint and the tensor methods
new_tensor, new_empty, new_zeros, new_ones, new_full; the default device (set_default_device, get_default_device);
stack, cross (and linalg.cross), einsum, svd, unique, scatter and Tensor.scatter_ (tinypytorch.structure,
tinypytorch.linear_algebra). Values, dtypes, shapes and gradients (torch's, or a numerical one); bad input where
torch refuses it, with its exception type. The table's tests (tests/operations.py) run stack, cross, einsum and
scatter through third derivatives, every backend, float32, forward mode and saved tensors as well."""
import threading
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from reference import assert_close_to_torch, assert_refused_as_torch, torch_leaf
from tinypytorch import Variable, autograd, cuda
from tinypytorch import linear_algebra as LA
from tinypytorch import structure as ST
from tinypytorch.autograd.gradcheck import gradcheck

pytestmark = pytest.mark.torch

RNG = np.random.default_rng(29)


@pytest.fixture(autouse=True)
def _cpu_default_device():
    """Every test starts and ends with the CPU as the factories' default device, so that no other test sees a
    device one of these set."""
    cuda.set_default_device(None)
    yield
    cuda.set_default_device(None)


def torch_dtype(dtype):
    return getattr(torch, str(dtype).removeprefix("torch."))


def leaves(*arrays):
    """(package Variables, torch tensors), float64 leaves that require grad, holding copies of the arrays."""
    return [Variable(a.copy()) for a in arrays], [torch_leaf(a) for a in arrays]


def assert_value_and_gradients_equal_torch(ours_fn, torch_fn, *arrays, seed=0):
    """ours_fn (on Variables) and torch_fn (on tensors) of the same float64 arrays: same shape, dtype and values,
    and the same gradients of sum(w * y), w fixed random weights."""
    xs, ts = leaves(*arrays)
    y, yt = ours_fn(*xs), torch_fn(*ts)
    assert y.shape == tuple(yt.shape) and str(y.dtype) == str(yt.dtype)
    assert_close_to_torch(y.data, yt.detach().numpy(), "value")
    w = np.random.default_rng(seed).uniform(-1, 1, y.shape)
    gs = autograd.grad((y * Variable(w, requires_grad=False)).sum(), xs, allow_unused=True)
    gts = torch.autograd.grad((yt * torch.tensor(w)).sum(), ts, allow_unused=True)
    for i, (g, gt) in enumerate(zip(gs, gts)):
        if gt is None:
            assert g is None or not np.any(g.data), i
        else:
            assert g.shape == tuple(gt.shape)
            assert_close_to_torch(g.data, gt.numpy(), f"gradient {i}")


def assert_refused_like_torch(ours, theirs):
    """Both raise; the package raises torch's exception type (its words may name the operation otherwise)."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)):
        ours()


# ----- empty, empty_like ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs", [
    ((2, 3), {}), (((2, 3),), {}), (([2, 3],), {}), ((), {"size": (4,)}), ((0, 2), {}), ((), {"size": ()}),
    ((2,), {"dtype": "int64"}), ((3,), {"dtype": "float64", "requires_grad": True}), ((2, 2), {"dtype": "bool"}),
])
def test_empty_has_torchs_shape_dtype_device_and_requires_grad_and_is_writable(args, kwargs):
    dtype = kwargs.get("dtype")
    ours = tinypytorch.empty(*args, **{**kwargs, "dtype": None if dtype is None else getattr(tinypytorch, dtype)})
    theirs = torch.empty(*args, **{**kwargs, "dtype": None if dtype is None else getattr(torch, dtype)})
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype)
    assert ours.requires_grad == theirs.requires_grad and ours.is_leaf
    assert str(ours.device) == str(theirs.device) == "cpu"
    np.testing.assert_array_equal(ours.data, np.zeros(ours.shape))  # the package's choice, as its docstring says
    with torch.no_grad():
        theirs.fill_(1)
    with tinypytorch.no_grad():
        ours[...] = 1
    np.testing.assert_array_equal(ours.data, theirs.detach().numpy())


@pytest.mark.parametrize("kwargs", [{}, {"dtype": "float64"}, {"requires_grad": True}, {"dtype": "int32"}])
@pytest.mark.parametrize("source", [np.arange(6.0).reshape(2, 3).astype(np.float32), np.arange(4), np.array(True)])
def test_empty_like_follows_the_source_unless_told(source, kwargs):
    if kwargs.get("requires_grad") and source.dtype.kind != "f":
        assert_refused_as_torch(lambda fw, _: fw.empty_like(fw.tensor(source), **kwargs), (tinypytorch, None),
                                (torch, None))
        return
    dtype = kwargs.get("dtype")
    ours = tinypytorch.empty_like(tinypytorch.tensor(source), **{**kwargs, "dtype": dtype and getattr(tinypytorch,
                                                                                                       dtype)})
    theirs = torch.empty_like(torch.tensor(source), **{**kwargs, "dtype": dtype and getattr(torch, dtype)})
    assert (ours.shape, str(ours.dtype), ours.requires_grad) == (tuple(theirs.shape), str(theirs.dtype),
                                                                 theirs.requires_grad)


@pytest.mark.parametrize("make", [
    lambda fw, _: fw.empty(),
    lambda fw, _: fw.empty(2, dtype=fw.int64, requires_grad=True),
    lambda fw, _: fw.empty(2.0),
    lambda fw, _: fw.empty_like(np.zeros(2)),
])
def test_empty_refuses_what_torch_refuses(make):
    assert_refused_like_torch(lambda: make(tinypytorch, None), lambda: make(torch, None))


def test_empty_of_a_negative_size_is_refused():
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1)
    with pytest.raises(ValueError, match="non-negative"):  # the package's rule for shapes (ARCHITECTURE: bad input)
        tinypytorch.empty(-1)


# ----- new_tensor, new_empty, new_zeros, new_ones, new_full ------------------------------------------------------

SOURCES = {"float64": np.array([1.5, -2.5]), "float16": np.array([1.5, 2.0], np.float16), "int64": np.array([1, 2]),
           "uint8": np.array([1, 2], np.uint8), "bool": np.array([True, False])}
NEW = {
    "new_zeros(2, 3)": lambda x, m: x.new_zeros(2, 3),
    "new_zeros((2, 3))": lambda x, m: x.new_zeros((2, 3)),
    "new_zeros(size=(2,))": lambda x, m: x.new_zeros(size=(2,)),
    "new_ones(3)": lambda x, m: x.new_ones(3),
    "new_ones([2, 2], dtype=int32)": lambda x, m: x.new_ones([2, 2], dtype=m.int32),
    "new_empty(2, 2)": lambda x, m: x.new_empty(2, 2),
    "new_empty((0,))": lambda x, m: x.new_empty((0,)),
    "new_full((2,), 1.7)": lambda x, m: x.new_full((2,), 1.7),
    "new_full([2, 1], 3)": lambda x, m: x.new_full([2, 1], 3),
    "new_full((2,), True)": lambda x, m: x.new_full((2,), True),
    "new_full((2,), 2.5, dtype=float32)": lambda x, m: x.new_full((2,), 2.5, dtype=m.float32),
    "new_tensor([1, 2])": lambda x, m: x.new_tensor([1, 2]),
    "new_tensor([1.7, -0.2])": lambda x, m: x.new_tensor([1.7, -0.2]),
    "new_tensor(3)": lambda x, m: x.new_tensor(3),
    "new_tensor(float32 array)": lambda x, m: x.new_tensor(np.array([0.1, 7.9], np.float32)),
    "new_tensor([[1.5]], dtype=float64)": lambda x, m: x.new_tensor([[1.5]], dtype=m.float64),
}


@pytest.mark.parametrize("name", list(NEW))
@pytest.mark.parametrize("source", list(SOURCES))
def test_new_factories_take_the_sources_dtype_and_device_as_torchs(source, name):
    x, t = tinypytorch.tensor(SOURCES[source]), torch.tensor(SOURCES[source])
    try:
        theirs = NEW[name](t, torch)
    except RuntimeError as error:  # a value the dtype cannot hold: the package's ValueError, as tinypytorch.tensor's
        assert "without overflow" in str(error)
        with pytest.raises(ValueError, match="without overflow"):
            NEW[name](x, tinypytorch)
        return
    ours = NEW[name](x, tinypytorch)
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype), (ours.dtype, theirs.dtype)
    assert str(ours.device) == str(theirs.device) and not ours.requires_grad and not theirs.requires_grad
    if not name.startswith("new_empty"):  # (new_empty's values are unspecified: zeros here)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_new_factories_require_grad_when_asked_and_only_for_floating_dtypes():
    for m, source in ((tinypytorch, tinypytorch.tensor([1.0, 2.0])), (torch, torch.tensor([1.0, 2.0]))):
        for y in (source.new_zeros(2, requires_grad=True), source.new_ones(2, requires_grad=True),
                  source.new_full((2,), 3.0, requires_grad=True), source.new_empty(2, requires_grad=True),
                  source.new_tensor([1.0], requires_grad=True)):
            assert y.requires_grad and y.is_leaf, m
    assert_refused_as_torch(lambda fw, _: fw.tensor([1, 2]).new_zeros(2, requires_grad=True), (tinypytorch, None),
                            (torch, None))


def test_new_tensor_of_a_tensor_copies_it_with_torchs_warning():
    x, source = tinypytorch.tensor([1.0, 2.0], dtype=tinypytorch.float64), tinypytorch.tensor([3, 4])
    with pytest.warns(UserWarning, match="sourceTensor.detach"):
        torch.tensor([1.0]).new_tensor(torch.tensor([3, 4]))
    with pytest.warns(UserWarning, match="sourceTensor.detach"):
        y = x.new_tensor(source)
    assert y.dtype == tinypytorch.float64 and not np.shares_memory(y.data, source.data)
    np.testing.assert_array_equal(y.data, [3.0, 4.0])


@pytest.mark.parametrize("make", [
    lambda fw, x: x.new_full(2, 1.0),  # new_full's size is a tuple, never varargs
    lambda fw, x: x.new_zeros(),
    lambda fw, x: x.new_tensor([1 + 2j]),
])
def test_new_factories_refuse_what_torch_refuses(make):
    assert_refused_like_torch(lambda: make(tinypytorch, tinypytorch.tensor([1.5])),
                              lambda: make(torch, torch.tensor([1.5])))


@pytest.mark.parametrize("make", [lambda fw: fw.tensor([1], dtype=fw.uint8).new_tensor([300]),
                                  lambda fw: fw.tensor([1], dtype=fw.uint8).new_full((2,), 300)])
def test_new_factories_refuse_a_value_their_dtype_cannot_hold_as_the_packages_factories_do(make):
    with pytest.raises(RuntimeError, match="without overflow"):
        make(torch)
    with pytest.raises(ValueError, match="without overflow"):  # tinypytorch.tensor's and full's exception type
        make(tinypytorch)


# ----- randint ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs", [
    ((10, (3,)), {}), ((3, 10, (2, 2)), {}), ((), {"low": 3, "high": 10, "size": (4,)}),
    ((), {"high": 10, "size": [5]}), ((5, ()), {}), ((0, 5, (0,)), {}), ((-4, 4, (50,)), {"dtype": "int8"}),
    ((0, 2, (20,)), {"dtype": "bool"}), ((0, 256, (20,)), {"dtype": "uint8"}), ((0, 10, (6,)), {"dtype": "float32"}),
    ((-2**63, 2**63 - 1, (6,)), {}), ((0, 10, (3,)), {"dtype": "float64", "requires_grad": True}),
    ((np.int64(7), (3,)), {}),
])
def test_randint_has_torchs_dtype_shape_and_range(args, kwargs):
    dtype = kwargs.get("dtype")
    ours = tinypytorch.randint(*args, **{**kwargs, "dtype": dtype and getattr(tinypytorch, dtype)})
    theirs = torch.randint(*args, **{**kwargs, "dtype": dtype and getattr(torch, dtype)})
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype)
    assert ours.requires_grad == theirs.requires_grad and str(ours.device) == "cpu"
    named = dict(zip(("low", "high", "size") if len(args) == 3 else ("high", "size"), args), **kwargs)
    low, high = int(named.get("low", 0)), int(named["high"])
    values = ours.data.astype(object if ours.data.dtype == np.int64 else np.float64)
    assert all(low <= v < high for v in values.ravel()), values
    assert np.array_equal(values, np.floor(values.astype(np.float64)).astype(values.dtype)) or values.dtype == object


def test_randint_draws_every_value_of_a_small_range_about_equally_often():
    counts = np.bincount(tinypytorch.randint(2, 7, (50_000,)).data - 2, minlength=5)
    assert counts.size == 5 and np.all(np.abs(counts / 50_000 - 0.2) < 0.01), counts


def test_randint_is_reproducible_under_manual_seed_and_moves_the_generator_on():
    tinypytorch.manual_seed(3)
    first, second = tinypytorch.randint(100, (8,)), tinypytorch.randint(100, (8,))
    tinypytorch.manual_seed(3)
    np.testing.assert_array_equal(tinypytorch.randint(100, (8,)).data, first.data)
    np.testing.assert_array_equal(tinypytorch.randint(100, (8,)).data, second.data)
    assert not np.array_equal(first.data, second.data)


def test_randint_draws_from_a_numpy_generator_when_given_one_and_refuses_other_generators():
    a = tinypytorch.randint(0, 50, (6,), generator=np.random.Generator(np.random.PCG64(5)))
    b = tinypytorch.randint(0, 50, (6,), generator=np.random.Generator(np.random.PCG64(5)))
    np.testing.assert_array_equal(a.data, b.data)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        tinypytorch.randint(0, 5, (2,), generator=torch.Generator())


@pytest.mark.parametrize("make", [
    lambda fw: fw.randint(10, 3),
    lambda fw: fw.randint(0, 10, 2, 3),
    lambda fw: fw.randint(5),
    lambda fw: fw.randint(0.5, 5.5, (3,)),
    lambda fw: fw.randint(True, (3,)),
    lambda fw: fw.randint(0, 5, (3,), requires_grad=True),
])
def test_randint_refuses_what_torch_refuses(make):
    assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))


@pytest.mark.parametrize("make", [
    lambda fw: fw.randint(5, 5, (3,)),
    lambda fw: fw.randint(6, 5, (3,)),
    lambda fw: fw.randint(0, 3, (3,), dtype=fw.bool),
    lambda fw: fw.randint(0, 300, (3,), dtype=fw.uint8),
    lambda fw: fw.randint(-1, 5, (3,), dtype=fw.uint8),
    lambda fw: fw.randint(-129, 5, (3,), dtype=fw.int8),
    lambda fw: fw.randint(0, 70000, (3,), dtype=fw.float16),
])
def test_randint_bounds_are_checked_against_the_dtype_in_torchs_words(make):
    assert_refused_as_torch(lambda fw, _: make(fw), (tinypytorch, None), (torch, None))


def test_randint_warns_as_torch_where_a_float_dtype_cannot_hold_every_integer_of_the_range():
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]"):
        torch.randint(0, 2**25, (3,), dtype=torch.float32)
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]"):
        tinypytorch.randint(0, 2**25, (3,), dtype=tinypytorch.float32)


# ----- set_default_device, get_default_device --------------------------------------------------------------------

def test_the_default_device_is_the_cpu_and_setting_the_cpu_or_none_keeps_it():
    assert repr(tinypytorch.get_default_device()) == repr(torch.get_default_device()) == "device(type='cpu')"
    for where in ("cpu", tinypytorch.device("cpu"), None):
        tinypytorch.set_default_device(where)
        assert tinypytorch.get_default_device() == "cpu"
        assert str(tinypytorch.zeros(2).device) == "cpu"


def test_a_device_string_torch_does_not_know_is_refused_as_torch_refuses_it():
    assert_refused_like_torch(lambda: tinypytorch.set_default_device("tpu"), lambda: torch.set_default_device("tpu"))
    assert tinypytorch.get_default_device() == "cpu"


@pytest.mark.skipif(cuda.GPU, reason="checks the error of a machine without a usable GPU")
def test_without_a_gpu_the_cuda_default_is_accepted_and_each_factory_then_raises_the_packages_clear_error():
    tinypytorch.set_default_device("cuda")  # accepted, as torch accepts it
    for make in (lambda: tinypytorch.zeros(2), lambda: tinypytorch.tensor([1.0]), lambda: tinypytorch.rand(2),
                 lambda: tinypytorch.randint(3, (2,)), lambda: tinypytorch.empty(2), lambda: tinypytorch.arange(3),
                 lambda: tinypytorch.full((2,), 1.0), tinypytorch.get_default_device):
        with pytest.raises(RuntimeError, match="CuPy"):
            make()
    # *_like, new_* and from_numpy keep their source's device, as torch's do
    x = tinypytorch.from_numpy(np.ones(2))
    for y in (x, tinypytorch.zeros_like(x), tinypytorch.empty_like(x), x.new_zeros(3), x.new_tensor([1.0])):
        assert str(y.device) == "cpu"
    assert str(tinypytorch.zeros(2, device="cpu").device) == "cpu"  # an explicit device wins


def test_the_default_device_is_per_thread_as_torchs():
    tinypytorch.set_default_device("cuda")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(str(tinypytorch.get_default_device())))
    thread.start()
    thread.join()
    assert seen == ["cpu"]


def test_factories_make_tensors_on_the_default_device(xp):
    """On the CuPy stand-in (and CuPy on a GPU): with the default device cuda, every factory's tensor is a device
    array unless device= says otherwise, and get_default_device names the device with its index."""
    if xp is np:
        pytest.skip("the default device is the CPU here")
    tinypytorch.set_default_device("cuda")
    assert repr(tinypytorch.get_default_device()) == "device(type='cuda', index=0)"
    made = [tinypytorch.zeros(2), tinypytorch.ones(2, 3), tinypytorch.full((2,), 1.5), tinypytorch.eye(2),
            tinypytorch.arange(3), tinypytorch.linspace(0, 1, 3), tinypytorch.rand(2), tinypytorch.randn(2),
            tinypytorch.randint(5, (3,)), tinypytorch.empty(2), tinypytorch.tensor([1.0, 2.0])]
    for y in made:
        assert cuda.get_array_module(y.data) is xp and str(y.device) == "cuda:0"
    assert cuda.get_array_module(tinypytorch.zeros(2, device="cpu").data) is np
    assert cuda.get_array_module(tinypytorch.from_numpy(np.ones(2)).data) is np
    tinypytorch.set_default_device("cpu")
    assert cuda.get_array_module(tinypytorch.zeros(2).data) is np


# ----- stack -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_stack_values_and_gradients_equal_torchs_along_every_dim(dim):
    a, b, c = (RNG.standard_normal((2, 3)) for _ in range(3))
    assert_value_and_gradients_equal_torch(lambda *xs: tinypytorch.stack(xs, dim), lambda *ts: torch.stack(ts, dim),
                                           a, b, c)


def test_stack_of_0d_tensors_and_of_a_tuple_and_a_list():
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.stack((a, b)), lambda a, b: torch.stack((a, b)),
                                           np.array(1.5), np.array(-2.0))
    assert_value_and_gradients_equal_torch(lambda a: tinypytorch.stack([a], dim=-1), lambda a: torch.stack([a], -1),
                                           RNG.standard_normal(4))


@pytest.mark.parametrize("dtypes_", [("float32", "float64"), ("int64", "float32"), ("bool", "int8"),
                                     ("int8", "int64", "float16"), ("float16", "float32", "float16")])
def test_stack_promotes_as_torch_and_each_gradient_comes_back_in_its_inputs_dtype(dtypes_):
    arrays = [np.array([1.0, 0.0]) for _ in dtypes_]
    xs = [tinypytorch.tensor(a, dtype=getattr(tinypytorch, d)) for a, d in zip(arrays, dtypes_)]
    ts = [torch.tensor(a, dtype=getattr(torch, d)) for a, d in zip(arrays, dtypes_)]
    y, yt = tinypytorch.stack(xs), torch.stack(ts)
    assert str(y.dtype) == str(yt.dtype)
    np.testing.assert_array_equal(y.data, yt.numpy())
    floating = [x for x in xs if x.dtype.is_floating_point]
    for x in floating:
        x.requires_grad_()
    if floating:
        tinypytorch.stack(xs).sum().backward()
        assert all(x.grad.dtype == x.dtype for x in floating)


@pytest.mark.parametrize("make", [
    lambda fw: fw.stack([]),
    lambda fw: fw.stack([fw.ones(2, 3), fw.ones(3, 2)]),
    lambda fw: fw.stack([fw.ones(1), fw.ones(())]),
])
def test_stack_refuses_what_torch_refuses_in_torchs_words(make):
    assert_refused_as_torch(lambda fw, _: make(fw), (tinypytorch, None), (torch, None))


@pytest.mark.parametrize("make", [
    lambda fw: fw.stack(fw.ones(2, 3)),
    lambda fw: fw.stack(t for t in [fw.ones(2)]),
    lambda fw: fw.stack([1.0, 2.0]),
    lambda fw: fw.stack([fw.ones(2)], dim="x"),
    lambda fw: fw.stack([fw.ones(2, 3)], dim=3),
    lambda fw: fw.stack([fw.ones(2, 3)], dim=-4),
])
def test_stack_refuses_bad_arguments_with_torchs_exception_type(make):
    assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))


# ----- cross, linalg.cross ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes, dim", [(((3,), (3,)), 0), (((4, 3), (4, 3)), 1), (((3, 4), (3, 4)), 0),
                                         (((1, 3), (5, 3)), -1), (((2, 1, 3), (1, 4, 3)), 2),
                                         (((2, 3, 5), (2, 3, 1)), 1)])
def test_cross_values_and_gradients_equal_torchs(shapes, dim):
    arrays = [RNG.standard_normal(s) for s in shapes]
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.cross(a, b, dim=dim),
                                           lambda a, b: torch.cross(a, b, dim=dim), *arrays)
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.linalg.cross(a, b, dim=dim),
                                           lambda a, b: torch.linalg.cross(a, b, dim=dim), *arrays)


def test_crosss_second_derivatives_equal_torchs():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    xs, ts = leaves(a, b)
    g = autograd.grad((tinypytorch.cross(*xs, dim=1) ** 2).sum(), xs, create_graph=True)
    gt = torch.autograd.grad((torch.cross(*ts, dim=1) ** 2).sum(), ts, create_graph=True)
    hs = autograd.grad((g[0] * g[1]).sum(), xs)
    hts = torch.autograd.grad((gt[0] * gt[1]).sum(), ts)
    for h, ht in zip(hs, hts):
        assert_close_to_torch(h.data, ht.numpy())


def test_cross_without_dim_takes_the_first_dim_of_size_3_and_warns_once_as_torch(monkeypatch):
    a, b = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    monkeypatch.setattr(LA, "_warned_default_dim", [False])
    with pytest.warns(UserWarning, match="Using torch.cross without specifying the dim arg is deprecated"):
        y = tinypytorch.cross(tinypytorch.tensor(a), tinypytorch.tensor(b))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once a process, as torch's TORCH_WARN_ONCE
        tinypytorch.cross(tinypytorch.tensor(a), tinypytorch.tensor(b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's warning came earlier in this process, or comes now, once)
        yt = torch.cross(torch.tensor(a), torch.tensor(b))
    assert_close_to_torch(y.data, yt.numpy())
    for shapes in (((4, 3), (4, 3)), ((3, 4), (3, 4)), ((1, 3), (4, 3))):
        arrays = [RNG.standard_normal(s) for s in shapes]
        assert_value_and_gradients_equal_torch(tinypytorch.cross, torch.cross, *arrays)


def test_cross_of_integers_stays_integer_and_tensor_cross_is_the_method():
    a, b = np.array([1, 2, 3]), np.array([4, 5, 6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the default dim's warning, once a process: tested above)
        y, yt = tinypytorch.tensor(a).cross(tinypytorch.tensor(b)), torch.tensor(a).cross(torch.tensor(b))
    assert str(y.dtype) == str(yt.dtype) == "torch.int64"
    np.testing.assert_array_equal(y.data, yt.numpy())


@pytest.mark.parametrize("make", [
    lambda fw: fw.cross(fw.ones(2, 4), fw.ones(2, 4)),
    lambda fw: fw.cross(fw.ones(4, 3), fw.ones(4, 3), dim=0),
    lambda fw: fw.cross(fw.ones(3), fw.ones(3, dtype=fw.float64)),
    lambda fw: fw.cross(fw.tensor([True, False, True]), fw.tensor([True, True, False])),
    lambda fw: fw.cross(fw.ones(3), fw.ones(2, 3)),
    lambda fw: fw.cross(fw.ones(3), 2.0),
    lambda fw: fw.linalg.cross(fw.ones(3, 4), fw.ones(3, 4)),
    lambda fw: fw.linalg.cross(fw.ones(3), fw.ones(3, dtype=fw.float64)),
])
def test_cross_refuses_what_torch_refuses_in_torchs_words(make):
    assert_refused_as_torch(lambda fw, _: make(fw), (tinypytorch, None), (torch, None))


@pytest.mark.parametrize("make", [
    lambda fw: fw.cross(fw.ones(3), fw.ones(3), dim=2),
    lambda fw: fw.cross(fw.ones(2, 3), fw.ones(4, 3), dim=1),
])
def test_cross_refuses_bad_dims_and_shapes_with_torchs_exception_type(make):
    assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))


# ----- einsum ----------------------------------------------------------------------------------------------------

EQUATIONS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("Naf,Mbf->NMab", [(2, 3, 4), (5, 6, 4)]), ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]), ("ij->ji", [(2, 3)]), ("ij->", [(3, 4)]), ("ij->j", [(3, 4)]), ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]), ("...ij->...ji", [(2, 5, 2, 3)]), ("...ii->...i", [(2, 3, 3)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ij,ij->ij", [(1, 3), (2, 3)]), ("iij->j", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]), ("ijk,ikj->", [(2, 3, 3), (2, 3, 3)]), ("ba", [(2, 3)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("Ab,bA", [(2, 3), (3, 2)]), (" i j , j k -> i k ", [(2, 3), (3, 4)]), ("ij,kl->", [(2, 3), (4, 5)]),
    ("i,i,i->i", [(3,), (3,), (3,)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("ij,jk->ik", [(2, 0), (0, 3)]), ("ij,jk->ik", [(0, 3), (3, 2)]),
    (",->", [(), ()]), ("i,->i", [(3,), ()]), ("ij,j->i", [(3, 4), (1,)]),
]


@pytest.mark.parametrize("equation, shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_values_and_gradients_equal_torchs(equation, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    assert_value_and_gradients_equal_torch(lambda *xs: tinypytorch.einsum(equation, *xs),
                                           lambda *ts: torch.einsum(equation, *ts), *arrays)


@pytest.mark.parametrize("equation, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("ii", [(3, 3)]),
                                              ("bn,anm,bm->ba", [(2, 3), (4, 3, 2), (2, 2)])])
def test_einsums_second_derivatives_equal_torchs_and_a_numerical_gradient(equation, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    xs, ts = leaves(*arrays)
    g = autograd.grad((tinypytorch.einsum(equation, *xs) ** 2).sum(), xs, create_graph=True)
    gt = torch.autograd.grad((torch.einsum(equation, *ts) ** 2).sum(), ts, create_graph=True)
    hs = autograd.grad(sum((gi * gi).sum() for gi in g), xs)
    hts = torch.autograd.grad(sum((gi * gi).sum() for gi in gt), ts)
    for h, ht in zip(hs, hts):
        assert_close_to_torch(h.data, ht.numpy())
    assert gradcheck(lambda *v: tinypytorch.einsum(equation, *v), tuple(Variable(a.copy()) for a in arrays))


def test_einsum_takes_its_operands_as_one_list_and_the_sublist_format():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 4))
    for ours, theirs in [(lambda x, y: tinypytorch.einsum("ij,jk->ik", [x, y]),
                          lambda x, y: torch.einsum("ij,jk->ik", [x, y])),
                         (lambda x, y: tinypytorch.einsum("ij,jk->ik", (x, y)),
                          lambda x, y: torch.einsum("ij,jk->ik", (x, y))),
                         (lambda x, y: tinypytorch.einsum(x, [0, 1], y, [1, 2], [0, 2]),
                          lambda x, y: torch.einsum(x, [0, 1], y, [1, 2], [0, 2])),
                         (lambda x, y: tinypytorch.einsum(x, [Ellipsis, 30], y, [30, 40]),
                          lambda x, y: torch.einsum(x, [Ellipsis, 30], y, [30, 40]))]:
        assert_value_and_gradients_equal_torch(ours, theirs, a, b)


@pytest.mark.parametrize("dtypes_, equation", [
    (("float32", "float32"), "ij,jk->ik"), (("int64", "int64"), "ij,jk->ik"), (("float16", "float16"), "ij,jk->ik"),
    (("float32", "float64"), "ij,ij->ij"), (("int64", "float32"), "ij,ij->ij"), (("bool", "bool"), "ij,ij->ij"),
    (("bool",), "ij->j"), (("int32",), "ii"), (("float32",), "ij->ji"),
])
def test_einsum_gives_torchs_dtype(dtypes_, equation):
    arrays = [np.arange(4).reshape(2, 2) % 3 for _ in dtypes_]
    ours = tinypytorch.einsum(equation, *[tinypytorch.tensor(a, dtype=getattr(tinypytorch, d))
                                          for a, d in zip(arrays, dtypes_)])
    theirs = torch.einsum(equation, *[torch.tensor(a, dtype=getattr(torch, d)) for a, d in zip(arrays, dtypes_)])
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(ours.data.astype(np.float64), theirs.double().numpy(), rtol=1e-3)


@pytest.mark.parametrize("equation, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->ji", [(2, 3)]),
                                              ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,ij->", [(2, 3), (2, 3)]),
                                              ("i,j->ij", [(2,), (3,)]), ("bij,bjk,bkl->bil", [(2, 2, 3), (2, 3, 4),
                                                                                               (2, 4, 2)])])
def test_einsum_under_cpu_autocast_gives_torchs_dtype(equation, shapes):
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    with tinypytorch.autocast("cpu", dtype=tinypytorch.float16):
        ours = tinypytorch.einsum(equation, *[Variable(a) for a in arrays])
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = torch.einsum(equation, *[torch.tensor(a, requires_grad=True) for a in arrays])
    assert str(ours.dtype) == str(theirs.dtype)


@pytest.mark.parametrize("make", [
    lambda fw, A: fw.einsum("ij,jk->ik", A, A),
    lambda fw, A: fw.einsum("ij,jk->ik", A),
    lambda fw, A: fw.einsum("ijk,jk->ik", A, A),
    lambda fw, A: fw.einsum("ij->k", A),
    lambda fw, A: fw.einsum("ij->ii", A),
    lambda fw, A: fw.einsum("i1->i", A),
    lambda fw, A: fw.einsum("ij->j->i", A),
    lambda fw, A: fw.einsum("......", A),
    lambda fw, A: fw.einsum("i.j", A),
    lambda fw, A: fw.einsum("ij,jk->ik", A, A.T.double()),
    lambda fw, A: fw.einsum("ij,jk->ik", A > 0, A.T > 0),
    lambda fw, A: fw.einsum("ij->ij"),
    lambda fw, A: fw.einsum("i,i->", A[0], 2.0),
    lambda fw, A: fw.einsum("i->", fw.tensor(2.0)),
    lambda fw, A: fw.einsum("ij,ij->ij", A, A, A),
    lambda fw, A: fw.einsum("ii->i", A),
    lambda fw, A: fw.einsum(A, [0, 60]),
    lambda fw, A: fw.einsum("...ij,...ij->...", fw.ones(2, 2, 3), fw.ones(3, 2, 3)),
])
def test_einsum_refuses_what_torch_refuses_in_torchs_words(make):
    A = np.arange(6.0).reshape(2, 3)
    assert_refused_as_torch(lambda fw, _: make(fw, fw.tensor(A, dtype=fw.float32)), (tinypytorch, None),
                            (torch, None))


# ----- svd -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3), (2, 4, 3), (2, 1, 3, 5), (1, 1), (5, 1)])
@pytest.mark.parametrize("some", [True, False])
def test_svd_has_torchs_shapes_and_singular_values_and_reconstructs_the_matrix(shape, some):
    a = RNG.standard_normal(shape)
    U, S, V = tinypytorch.svd(tinypytorch.tensor(a), some=some)
    Ut, St, Vt = torch.svd(torch.tensor(a), some=some)
    assert (U.shape, S.shape, V.shape) == (tuple(Ut.shape), tuple(St.shape), tuple(Vt.shape))
    assert_close_to_torch(S.data, St.numpy())
    k = S.shape[-1]
    rebuilt = (U.data[..., :, :k] * S.data[..., None, :]) @ np.swapaxes(V.data[..., :, :k], -1, -2)  # V, not V^T
    assert_close_to_torch(rebuilt, a)
    for Q in (U.data, V.data):  # orthonormal columns, and for some=False orthogonal matrices
        assert_close_to_torch(np.swapaxes(Q, -1, -2) @ Q, np.broadcast_to(np.eye(Q.shape[-1]), Q.shape[:-2] +
                                                                          (Q.shape[-1],) * 2))


def test_svd_returns_torchs_named_tuple_and_v_not_vh():
    a = RNG.standard_normal((4, 3))
    result, theirs = tinypytorch.svd(tinypytorch.tensor(a)), torch.svd(torch.tensor(a))
    assert type(result).__name__ == type(theirs).__name__ == "svd" and len(result) == len(theirs) == 3
    for ours, field in zip(result, ("U", "S", "V")):
        assert getattr(result, field) is ours and getattr(theirs, field).shape == ours.shape
    assert result.V.grad_fn is None
    x = Variable(a.copy())
    U, S, V = tinypytorch.svd(x)
    assert (U.grad_fn.name(), S.grad_fn.name(), V.grad_fn.name()) == ("LinalgSvdBackward0", "LinalgSvdBackward0",
                                                                      "TransposeBackward0")
    np.testing.assert_allclose(a @ V.data, U.data * S.data, atol=1e-12)  # A V = U S: V's columns, not rows


def _svd_losses(m):
    """Losses of U, S, V that do not depend on the signs LAPACK chose for the singular vectors."""
    return {
        "S": lambda a: m.svd(a)[1].sum(),
        "S weighted": lambda a: (m.svd(a)[1] * m.tensor([3.0, -1.0, 0.5], dtype=a.dtype)).sum(),
        "U U^T": lambda a: (lambda U: ((U @ U.T) * m.tensor(np.arange(16.0).reshape(4, 4) / 7, dtype=a.dtype)).sum())
        (m.svd(a)[0]),
        "V V^T": lambda a: (lambda V: ((V @ V.T) ** 2 * m.tensor(np.arange(9.0).reshape(3, 3), dtype=a.dtype)).sum())
        (m.svd(a)[2]),
        "U S V^T": lambda a: (lambda r: ((r.U * r.S) @ r.V.T * m.tensor(np.arange(12.0).reshape(4, 3),
                                                                          dtype=a.dtype)).sum())(m.svd(a)),
        "U diag(S^2) U^T": lambda a: (lambda r: (((r.U * r.S ** 2) @ r.U.T)[0]).sum())(m.svd(a)),
        "outer products": lambda a: (lambda r: (r.U[:, 0:1] * r.V[:, 0:1].T * r.U[:, 1:2].sum() * r.V[:, 1:2].sum())
                                     .sum())(m.svd(a)),
    }


@pytest.mark.parametrize("name", list(_svd_losses(torch)))
@pytest.mark.parametrize("transpose", [False, True], ids=["tall", "wide"])
def test_svd_gradients_of_sign_invariant_losses_equal_torchs(name, transpose):
    a = RNG.standard_normal((4, 3))
    if transpose and name in ("U U^T", "V V^T", "U S V^T"):  # the weights fit the tall shapes
        pytest.skip("the loss is written for a 4 x 3 matrix")
    a = a.T.copy() if transpose else a
    assert_value_and_gradients_equal_torch(lambda x: _svd_losses(tinypytorch)[name](x).reshape(1),
                                           lambda t: _svd_losses(torch)[name](t).reshape(1), a)


@pytest.mark.parametrize("some", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3), (2, 3, 2)])
def test_svd_gradients_equal_a_numerical_gradient_and_second_derivatives_equal_torchs(shape, some):
    a = RNG.standard_normal(shape)

    def loss(m, x):
        U, S, V = m.svd(x, some=some)
        k = S.shape[-1]
        return (S ** 3).sum() + ((U[..., :k] * S[..., None, :]) @ V[..., :k].transpose(-2, -1)).sum() \
            + (U[..., :k] @ U[..., :k].transpose(-2, -1)).sum() * 0.5

    assert gradcheck(lambda x: loss(tinypytorch, x), (Variable(a.copy()),))
    x, t = Variable(a.copy()), torch_leaf(a)
    (g,), (gt,) = autograd.grad(loss(tinypytorch, x), [x], create_graph=True), \
        torch.autograd.grad(loss(torch, t), [t], create_graph=True)
    assert_close_to_torch(g.data, gt.detach().numpy())
    (h,), (ht,) = autograd.grad((g ** 2).sum(), [x]), torch.autograd.grad((gt ** 2).sum(), [t])
    assert_close_to_torch(h.data, ht.numpy())


def test_svd_of_repeated_singular_values_gives_torchs_gradient_of_s_and_non_finite_ones_of_u():
    x, t = Variable(np.eye(3)), torch_leaf(np.eye(3))
    (g,), (gt,) = autograd.grad(tinypytorch.svd(x)[1].sum(), [x]), torch.autograd.grad(torch.svd(t)[1].sum(), [t])
    np.testing.assert_allclose(g.data, gt.numpy())
    with np.errstate(divide="ignore", invalid="ignore"):
        (g,) = autograd.grad((lambda r: (r.U * r.U).sum())(tinypytorch.svd(x)), [x])
    (gt,) = torch.autograd.grad((lambda r: (r.U * r.U).sum())(torch.svd(t)), [t])
    assert not np.all(np.isfinite(gt.numpy())) and not np.all(np.isfinite(g.data))


def test_svd_without_uv_gives_torchs_zero_u_and_v_and_a_differentiable_s():
    a = RNG.standard_normal((4, 3))
    x, t = Variable(a.copy()), torch_leaf(a)
    U, S, V = tinypytorch.svd(x, compute_uv=False)
    Ut, St, Vt = torch.svd(t, compute_uv=False)
    for ours, theirs in ((U, Ut), (V, Vt)):
        assert ours.shape == tuple(theirs.shape) and not np.any(ours.data) and not ours.requires_grad
    (g,), (gt,) = autograd.grad((S * S).sum(), [x]), torch.autograd.grad((St * St).sum(), [t])
    assert_close_to_torch(g.data, gt.numpy())


def test_svd_of_float32_stays_float32_and_tensor_svd_is_the_method():
    a = RNG.standard_normal((3, 2)).astype(np.float32)
    x, t = Variable(a.copy()), torch.tensor(a, requires_grad=True)
    S, St = x.svd()[1], t.svd()[1]
    assert str(S.dtype) == str(St.dtype) == "torch.float32"
    np.testing.assert_allclose(S.data, St.detach().numpy(), rtol=1e-5)
    S.sum().backward()
    St.sum().backward()
    assert x.grad.dtype == tinypytorch.float32
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_svd_of_an_empty_matrix_has_torchs_shapes():
    U, S, V = tinypytorch.svd(tinypytorch.zeros(0, 3))
    Ut, St, Vt = torch.svd(torch.zeros(0, 3))
    assert (U.shape, S.shape, V.shape) == (tuple(Ut.shape), tuple(St.shape), tuple(Vt.shape))


@pytest.mark.parametrize("make", [
    lambda fw: fw.svd(fw.ones(3)),
    lambda fw: fw.svd(fw.tensor([[1, 2], [3, 4]])),
    lambda fw: fw.svd(fw.ones(2, 2, dtype=fw.float16)),
    lambda fw: fw.svd(fw.tensor([[float("nan"), 1.0], [1.0, 1.0]])),
    lambda fw: fw.svd(2.0),
])
def test_svd_refuses_what_torch_refuses_in_torchs_words(make):
    with pytest.raises(Exception) as expected:
        make(torch)
    with pytest.raises(Exception) as raised:
        make(tinypytorch)
    assert str(raised.value) == str(expected.value)
    assert type(raised.value).__name__ == type(expected.value).__name__.lstrip("_")  # torch's LinAlgError is _C's
    assert isinstance(raised.value, RuntimeError) == isinstance(expected.value, RuntimeError)


def test_svds_linalg_error_is_torch_linalgs_and_a_runtime_error():
    assert issubclass(tinypytorch.linalg.LinAlgError, RuntimeError) and issubclass(torch.linalg.LinAlgError,
                                                                                   RuntimeError)


# ----- unique ----------------------------------------------------------------------------------------------------

UNIQUE_INPUTS = {
    "floats": np.array([3.0, 1.0, 2.0, 3.0, 1.0]), "a matrix of ints": np.array([[1, 2], [1, 2], [0, 5]]),
    "a 0-d tensor": np.array(5), "empty": np.zeros(0), "NaNs": np.array([np.nan, 1.0, np.nan]),
    "bools": np.array([True, False, True]), "zeros of both signs": np.array([0.0, -0.0, 1.0]),
    "int8": np.array([-3, 7, -3], np.int8), "3-d": RNG.integers(0, 3, (2, 3, 4)),
}


@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["values", "inverse", "counts", "both"])
@pytest.mark.parametrize("name", list(UNIQUE_INPUTS))
def test_unique_equals_torchs(name, flags):
    data = UNIQUE_INPUTS[name]
    ours = tinypytorch.unique(tinypytorch.tensor(data), return_inverse=flags[0], return_counts=flags[1])
    theirs = torch.unique(torch.tensor(data), return_inverse=flags[0], return_counts=flags[1])
    ours, theirs = (ours, theirs) if isinstance(theirs, tuple) else ((ours,), (theirs,))
    assert len(ours) == len(theirs)
    for y, yt in zip(ours, theirs):
        assert y.shape == tuple(yt.shape) and str(y.dtype) == str(yt.dtype)
        np.testing.assert_array_equal(y.data, yt.numpy())


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
@pytest.mark.parametrize("data", [np.array([[3, 1], [2, 3], [3, 1]]), RNG.integers(0, 2, (4, 3, 3)),
                                  np.array([[1.0, np.nan], [1.0, np.nan]]), np.zeros((0, 3)), np.array([5, 5, 2])],
                         ids=["rows", "3-d", "NaN rows", "empty", "1-d"])
def test_unique_along_a_dim_equals_torchs(data, dim):
    make = lambda fw: fw.unique(fw.tensor(data), dim=dim, return_inverse=True, return_counts=True)  # noqa: E731
    try:
        theirs = make(torch)
    except Exception:
        assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))
        return
    for y, yt in zip(make(tinypytorch), theirs):
        assert y.shape == tuple(yt.shape) and str(y.dtype) == str(yt.dtype)
        np.testing.assert_array_equal(y.data, yt.numpy())


def test_unique_sorts_whatever_sorted_says_as_torchs_cpu_unique_and_takes_torchs_positional_arguments():
    data = np.array([3, 1, 2, 3, 1])
    for args in ((False,), (False, True), (True, True, True)):
        for y, yt in zip(tinypytorch.unique(tinypytorch.tensor(data), *args), torch.unique(torch.tensor(data), *args)):
            np.testing.assert_array_equal(y.data, yt.numpy())
    y, yt = tinypytorch.tensor(data).unique(return_counts=True), torch.tensor(data).unique(return_counts=True)
    np.testing.assert_array_equal(y[1].data, yt[1].numpy())


def test_unique_has_no_derivative_as_in_torch():
    x, t = tinypytorch.tensor([3.0, 1.0, 3.0], requires_grad=True), torch.tensor([3.0, 1.0, 3.0], requires_grad=True)
    for dim in (None, 0):
        y, yt = tinypytorch.unique(x, dim=dim, return_inverse=True), torch.unique(t, dim=dim, return_inverse=True)
        assert y[0].requires_grad and yt[0].requires_grad
        assert y[0].grad_fn.name() == type(yt[0].grad_fn).__name__
        assert not y[1].requires_grad and y[1].grad_fn is None and yt[1].grad_fn is None
        assert_refused_as_torch(lambda fw, _: (fw.unique(x if fw is tinypytorch else t, dim=dim).sum()
                                               + (x if fw is tinypytorch else t).sum()).backward(),
                                (tinypytorch, None), (torch, None))
    with tinypytorch.no_grad():
        assert not tinypytorch.unique(x).requires_grad


@pytest.mark.parametrize("make", [
    lambda fw: fw.unique(fw.tensor([1, 2]), dim=1),
    lambda fw: fw.unique(fw.tensor(3), dim=0),
    lambda fw: fw.unique(fw.zeros(0, 3), dim=1),
    lambda fw: fw.unique([1, 2]),
])
def test_unique_refuses_what_torch_refuses(make):
    assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))


# ----- scatter, scatter_ -----------------------------------------------------------------------------------------

INDEX = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])


@pytest.mark.parametrize("dim, self_shape, index, src_shape", [
    (0, (3, 4), INDEX, (2, 4)), (1, (2, 5), np.array([[4, 0, 2], [1, 3, 0]]), (2, 3)), (-1, (4,), np.array([3, 1]),
                                                                                      (2,)),
    (0, (3, 4), np.zeros((0, 4), np.int64), (0, 4)), (1, (3, 4), np.array([[2], [0], [3]]), (3, 1)),
])
def test_scatter_values_and_gradients_equal_torchs(dim, self_shape, index, src_shape):
    x, src = RNG.standard_normal(self_shape), RNG.standard_normal(src_shape)
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.scatter(a, dim, tinypytorch.tensor(index), b),
                                           lambda a, b: torch.scatter(a, dim, torch.tensor(index), b), x, src)
    assert_value_and_gradients_equal_torch(lambda a: a.scatter(dim, tinypytorch.tensor(index), 2.5),
                                           lambda a: a.scatter(dim, torch.tensor(index), 2.5), x)
    assert_value_and_gradients_equal_torch(lambda a: tinypytorch.scatter(a, dim, tinypytorch.tensor(index), value=-1),
                                           lambda a: torch.scatter(a, dim, torch.tensor(index), value=-1), x)


def test_scatter_where_an_index_repeats_sends_the_gradient_to_every_source_as_torch():
    # which of the repeated writes wins is unspecified in torch; both send src's gradient back by gathering
    x, src = RNG.standard_normal(3), RNG.standard_normal(2)
    xs, ts = leaves(x, src)
    w = np.array([1.0, 2.0, 3.0])
    gs = autograd.grad((tinypytorch.scatter(xs[0], 0, tinypytorch.tensor([1, 1]), xs[1]) * w).sum(), xs)
    gts = torch.autograd.grad((torch.scatter(ts[0], 0, torch.tensor([1, 1]), ts[1]) * torch.tensor(w)).sum(), ts)
    for g, gt in zip(gs, gts):
        np.testing.assert_array_equal(g.data, gt.numpy())


def test_the_census_tutorials_one_hot_label_and_torchs():
    for y in (3, 0, 9):
        ours = tinypytorch.zeros(10, dtype=tinypytorch.float).scatter_(0, tinypytorch.tensor(y), value=1)
        theirs = torch.zeros(10, dtype=torch.float).scatter_(0, torch.tensor(y), value=1)
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_scatter_in_place_counts_a_version_changes_views_and_refuses_a_leaf_that_requires_grad():
    x = tinypytorch.zeros(2, 3)
    row = x[1]
    version = x._version
    assert x.scatter_(1, tinypytorch.tensor([[2], [0]]), tinypytorch.ones(2, 1)) is x
    assert x._version == version + 1 and row._version == x._version
    np.testing.assert_array_equal(row.data, [1.0, 0.0, 0.0])
    assert_refused_like_torch(
        lambda: tinypytorch.zeros(3, requires_grad=True).scatter_(0, tinypytorch.tensor([1]), 2.0),
        lambda: torch.zeros(3, requires_grad=True).scatter_(0, torch.tensor([1]), 2.0))
    with tinypytorch.no_grad():  # outside the graph, as torch allows
        leaf = tinypytorch.zeros(3, requires_grad=True)
        leaf.scatter_(0, tinypytorch.tensor([1]), 2.0)
    np.testing.assert_array_equal(leaf.data, [0.0, 2.0, 0.0])


def test_scatter_in_place_of_a_non_leaf_and_of_a_view_records_torchs_gradients():
    x, src = RNG.standard_normal((3, 4)), RNG.standard_normal((1, 4))

    def program(m, a, b):
        y = a * 2.0
        y.scatter_(0, m.tensor([[2, 0, 1, 2]]), b)
        z = a * 1.0
        z[1].scatter_(0, m.tensor([3, 0]), b[0, :2] * 3.0)  # a view: its base follows
        return y * a + z

    assert_value_and_gradients_equal_torch(lambda a, b: program(tinypytorch, a, b),
                                           lambda a, b: program(torch, a, b), x, src)
    y, t = tinypytorch.zeros(3), torch.zeros(3)
    s, st = tinypytorch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    assert y.scatter_(0, tinypytorch.tensor([1]), s).grad_fn.name() == type(
        t.scatter_(0, torch.tensor([1]), st).grad_fn).__name__ == "ScatterBackward0"


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_with_reduce_combines_as_torch_warns_once_for_a_tensor_src_and_has_no_derivative(reduce, monkeypatch):
    x, src, index = RNG.standard_normal(4), RNG.standard_normal(3), np.array([1, 1, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch warns once a process: earlier, or now)
        theirs = torch.tensor(x).scatter_(0, torch.tensor(index), torch.tensor(src), reduce=reduce)
    monkeypatch.setattr(ST, "_warned_reduce", [False])
    with pytest.warns(UserWarning, match="The reduce argument of torch.scatter with Tensor src is deprecated"):
        ours = tinypytorch.tensor(x).scatter_(0, tinypytorch.tensor(index), tinypytorch.tensor(src), reduce=reduce)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and once only, as torch's
        tinypytorch.tensor(x).scatter_(0, tinypytorch.tensor(index), tinypytorch.tensor(src), reduce=reduce)
    assert_close_to_torch(ours.data, theirs.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a number is not deprecated
        ours = tinypytorch.tensor(x).scatter(0, tinypytorch.tensor(index), 2.0, reduce=reduce)
        theirs = torch.tensor(x).scatter(0, torch.tensor(index), 2.0, reduce=reduce)
    assert_close_to_torch(ours.data, theirs.numpy())
    a, t = tinypytorch.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, yt = a.scatter(0, tinypytorch.tensor(index), 2.0, reduce=reduce), t.scatter(0, torch.tensor(index), 2.0,
                                                                                    reduce=reduce)
    assert y.grad_fn.name() == type(yt.grad_fn).__name__ == "NotImplemented"
    assert_refused_as_torch(lambda fw, _: (y if fw is tinypytorch else yt).sum().backward(), (tinypytorch, None),
                            (torch, None))


def test_scatter_casts_a_number_to_selfs_dtype_as_torch():
    for data, value in (([0, 0, 0], 2.7), ([0.0, 0.0, 0.0], 2), ([False, False, False], True)):
        ours = tinypytorch.tensor(data).scatter(0, tinypytorch.tensor([1]), value)
        theirs = torch.tensor(data).scatter(0, torch.tensor([1]), value)
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


@pytest.mark.parametrize("make", [
    lambda fw: fw.zeros(3).scatter_(0, fw.tensor([0.0]), 1.0),
    lambda fw: fw.zeros(3).scatter_(0, fw.tensor([5]), 1.0),
    lambda fw: fw.zeros(3).scatter_(0, fw.tensor([-1]), 1.0),
    lambda fw: fw.zeros(3, 3).scatter_(0, fw.tensor([[0, 1, 2]]), fw.ones(1, 2)),
    lambda fw: fw.zeros(3, 3).scatter_(0, fw.tensor([0, 1, 2]), 1.0),
    lambda fw: fw.zeros(3, 3).scatter_(0, fw.tensor([[0, 1, 2, 1]]), 1.0),
    lambda fw: fw.zeros(3).scatter_(0, fw.tensor([0]), fw.ones(1, dtype=fw.float64)),
    lambda fw: fw.scatter(fw.zeros(3), 0, fw.tensor([0]), fw.ones(1, dtype=fw.float64)),
    lambda fw: fw.zeros(3).scatter(0, fw.tensor([1]), fw.ones(1), reduce="mean"),
    lambda fw: fw.zeros(3).scatter(0, fw.tensor([1]), 1.0, reduce="mean"),
    lambda fw: torch_style_src_bigger_than_index_gradient(fw),
])
def test_scatter_refuses_what_torch_refuses_in_torchs_words(make):
    assert_refused_as_torch(lambda fw, _: make(fw), (tinypytorch, None), (torch, None))


def torch_style_src_bigger_than_index_gradient(fw):
    """src larger than index: torch's backward gives src a gradient of index's shape, and its engine refuses it."""
    x, src = fw.zeros(3, 3, requires_grad=True), fw.ones(2, 4, requires_grad=True)
    return fw.autograd.grad(fw.scatter(x * 1.0, 0, fw.tensor([[0, 1, 2]]), src).sum(), [src])


@pytest.mark.parametrize("make", [
    lambda fw: fw.zeros(3).scatter_(1, fw.tensor([1]), 2.0),
    lambda fw: fw.zeros(3).scatter(0, fw.tensor([1]), [2.0]),
    lambda fw: fw.zeros(3).scatter(0, fw.tensor([1]), value=fw.tensor([2.0])),
    lambda fw: fw.zeros(3).scatter(0, [1], 2.0),
])
def test_scatter_refuses_bad_arguments_with_torchs_exception_type(make):
    assert_refused_like_torch(lambda: make(tinypytorch), lambda: make(torch))


def test_scatter_of_a_0d_tensor_and_a_0d_index_as_torch():
    for x_data, index in ((1.0, 0), (1.0, [0])):
        ours = tinypytorch.tensor(x_data).scatter(0, tinypytorch.tensor(index), 2.0)
        theirs = torch.tensor(x_data).scatter(0, torch.tensor(index), 2.0)
        assert ours.shape == tuple(theirs.shape) and ours.item() == theirs.item()
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.scatter(a, 0, tinypytorch.tensor(0), b),
                                           lambda a, b: torch.scatter(a, 0, torch.tensor(0), b), np.array(1.5),
                                           np.array(-2.0))


def test_scatter_on_the_device_equals_the_cpus(xp):
    x, src = RNG.standard_normal((3, 4)), RNG.standard_normal((2, 4))
    a, b = Variable(xp.asarray(x)), Variable(xp.asarray(src))
    y = tinypytorch.scatter(a, 0, Variable(xp.asarray(INDEX), requires_grad=False), b)
    (y * y).sum().backward()
    xs, ts = leaves(x, src)
    yt = torch.scatter(ts[0], 0, torch.tensor(INDEX), ts[1])
    (yt * yt).sum().backward()
    assert cuda.get_array_module(y.data) is xp
    assert_close_to_torch(cuda.as_numpy(y.data), yt.detach().numpy())
    for v, t in zip((a, b), ts):
        assert_close_to_torch(cuda.as_numpy(v.grad.data), t.grad.numpy())


def test_unique_on_the_device_equals_torchs(xp):
    data = np.array([[3, 1], [2, 3], [3, 1]])
    for dim in (None, 0):
        ours = tinypytorch.unique(Variable(xp.asarray(data), requires_grad=False), dim=dim, return_inverse=True,
                                  return_counts=True)
        for y, yt in zip(ours, torch.unique(torch.tensor(data), dim=dim, return_inverse=True, return_counts=True)):
            assert cuda.get_array_module(y.data) is xp
            np.testing.assert_array_equal(cuda.as_numpy(y.data), yt.numpy())


# ----- out= ------------------------------------------------------------------------------------------------------

def test_out_writes_into_the_given_tensor_counts_a_version_and_returns_it():
    a, b = tinypytorch.ones(2, 3), tinypytorch.zeros(2, 3)
    for make, expected_shape in ((lambda out: tinypytorch.stack([a, b], out=out), (2, 2, 3)),
                                 (lambda out: tinypytorch.cross(a, b, dim=1, out=out), (2, 3)),
                                 (lambda out: tinypytorch.scatter(a, 0, tinypytorch.tensor([[1, 0, 1]]), 5.0, out=out),
                                  (2, 3)),
                                 (lambda out: tinypytorch.randint(0, 5, expected_shape, out=out), (2, 3))):
        out = tinypytorch.empty(expected_shape)
        version = out._version
        assert make(out) is out and out._version == version + 1
    out = tinypytorch.empty(2, 2, 3, dtype=tinypytorch.float64)
    np.testing.assert_array_equal(tinypytorch.stack([a, b], out=out).data, torch.stack([torch.ones(2, 3),
                                                                                        torch.zeros(2, 3)]).numpy())
    assert out.dtype == tinypytorch.float64  # stack casts into out's dtype where torch casts
    drawn = tinypytorch.randint(0, 5, (4,), out=tinypytorch.empty(4, dtype=tinypytorch.int32))
    assert drawn.dtype == tinypytorch.int32 and drawn.shape == (4,)


def test_out_of_another_shape_is_resized_with_torchs_warning_and_an_empty_one_silently():
    a = tinypytorch.ones(2, 3)
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch.stack([torch.ones(2, 3)], out=torch.empty(5))
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        out = tinypytorch.stack([a], out=tinypytorch.empty(5))
    assert out.shape == (1, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tinypytorch.stack([a], out=tinypytorch.empty(0)).shape == (1, 2, 3)
        assert tinypytorch.empty(4, out=tinypytorch.empty(2)).shape == (4,)  # a factory resizes silently
        U, S, V = tinypytorch.svd(a, out=(tinypytorch.empty(0), tinypytorch.empty(0), tinypytorch.empty(0)))
    Ut, St, Vt = torch.svd(torch.ones(2, 3))
    assert (U.shape, S.shape, V.shape) == (tuple(Ut.shape), tuple(St.shape), tuple(Vt.shape))


@pytest.mark.parametrize("make", [
    lambda fw: fw.stack([fw.ones(2, requires_grad=True)], out=fw.empty(1, 2)),
    lambda fw: fw.stack([fw.ones(2)], out=fw.empty(1, 2, requires_grad=True)),
    lambda fw: fw.stack([fw.ones(2)], out=fw.empty(1, 2, dtype=fw.int64)),
    lambda fw: fw.cross(fw.ones(3), fw.ones(3), dim=0, out=fw.empty(3, dtype=fw.float64)),
    lambda fw: fw.scatter(fw.zeros(3), 0, fw.tensor([1]), 2.0, out=fw.empty(3, dtype=fw.float64)),
    lambda fw: fw.scatter(fw.zeros(3, requires_grad=True), 0, fw.tensor([1]), 2.0, out=fw.empty(3)),
    lambda fw: fw.svd(fw.ones(3, 2), out=(fw.empty(3, 2, dtype=fw.float64), fw.empty(2), fw.empty(2, 2))),
    lambda fw: fw.randint(5, (2,), dtype=fw.int64, out=fw.empty(2)),
    lambda fw: fw.empty(2, dtype=fw.int64, out=fw.empty(3, dtype=fw.float64)),
    lambda fw: fw.empty(2, out=fw.empty(2, requires_grad=True)),
])
def test_out_refuses_what_torch_refuses(make):
    with pytest.raises(Exception) as expected:
        make(torch)
    with pytest.raises(type(expected.value)) as raised:
        make(tinypytorch)
    words = str(expected.value).replace("torch.cat()", "stack()")  # (torch's stack names the cat it calls)
    assert str(raised.value) == words


def test_out_is_allowed_for_inputs_that_require_grad_under_no_grad_as_in_torch():
    with tinypytorch.no_grad():
        out = tinypytorch.stack([tinypytorch.ones(2, requires_grad=True)], out=tinypytorch.empty(1, 2))
    assert not out.requires_grad


# ----- hypothesis: random shapes and dims ------------------------------------------------------------------------

@given(data=st.data())
def test_stack_and_scatter_of_random_shapes_equal_torchs(data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    dim = data.draw(st.integers(-ndim, ndim - 1))
    count = data.draw(st.integers(1, 3))
    arrays = [RNG.standard_normal(shape) for _ in range(count)]
    assert_value_and_gradients_equal_torch(lambda *xs: tinypytorch.stack(xs, dim), lambda *ts: torch.stack(ts, dim),
                                           *arrays)
    n = shape[dim]
    index_shape = tuple(data.draw(st.integers(1, m)) for m in shape)
    # a permutation along dim for each position of the others: no position written twice
    keys = RNG.random(shape).argsort(axis=dim)
    index = np.take(keys, np.arange(index_shape[dim]), axis=dim)[tuple(slice(0, m) for m in index_shape)]
    assert index.max() < n
    src = RNG.standard_normal(index_shape)
    assert_value_and_gradients_equal_torch(lambda a, b: tinypytorch.scatter(a, dim, tinypytorch.tensor(index), b),
                                           lambda a, b: torch.scatter(a, dim, torch.tensor(index), b), arrays[0], src)


def test_torch_functional_holds_the_same_functions_as_torch():
    import torch.functional

    import tinypytorch.functional
    for name in tinypytorch.functional.__all__:
        assert getattr(torch.functional, name) is getattr(torch, name)
        assert getattr(tinypytorch.functional, name) is getattr(tinypytorch, name)
