"""Step 59: PyTorch's dtype rules (tinypytorch.dtypes) against torch's own: the default dtype, promote_types,
can_cast and result_type over every dtype and rank, the dtypes every operation of the table gives its operands of
mixed kinds, floating operations of integers, the refusals (matrix products, in-place casts down a category), the
nn modules' parameters and Module.to, and each case the issue of silent dtype differences listed."""
import copy
import itertools
import pickle

import numpy as np
import pytest
import torch

import tinypytorch as tp
from operations import OPERATIONS, operands
from tinypytorch import dtypes, nn

pytestmark = [pytest.mark.step59, pytest.mark.torch]

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
         "complex128"]
NUMBERS = [True, 3, 2.5, 1 + 2j]


def torch_dtype(name):
    return getattr(torch, str(np.dtype(name)))


def tensor(fw, name, rank):
    """A tensor of dtype `name`: a vector ("dim") or a 0-d one ("zero")."""
    shape = (2,) if rank == "dim" else ()
    return fw.ones(shape, dtype=getattr(fw, str(np.dtype(name))))


# ----- the lattice and the ranks, in full --------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", list(itertools.product(NAMES, NAMES)))
def test_promote_types_and_can_cast_are_torchs(a, b):
    assert str(tp.promote_types(a, b)) == str(torch.promote_types(torch_dtype(a), torch_dtype(b)))
    assert tp.can_cast(a, b) == torch.can_cast(torch_dtype(a), torch_dtype(b))


# complex32, which NumPy lacks: torch gives it for float16 meeting a complex number or a complex 0-d tensor
COMPLEX32 = {("float16", "complex64"), ("float16", "complex128")}


@pytest.mark.parametrize("left", list(itertools.product(NAMES, ["dim", "zero"])), ids=str)
def test_result_type_of_every_pair_of_dtype_and_rank_is_torchs(left):
    for right in list(itertools.product(NAMES, ["dim", "zero"])) + NUMBERS:
        ours_right = tensor(tp, *right) if isinstance(right, tuple) else right
        theirs_right = tensor(torch, *right) if isinstance(right, tuple) else right
        theirs = str(torch.result_type(tensor(torch, *left), theirs_right))
        if theirs == "torch.complex32":
            assert str(tp.result_type(tensor(tp, *left), ours_right)) == "torch.complex64"  # the nearest NumPy has
            continue
        assert str(tp.result_type(tensor(tp, *left), ours_right)) == theirs, (left, right)
        assert str(tp.result_type(ours_right, tensor(tp, *left))) == theirs, (right, left)


def test_two_python_numbers_give_the_default_dtypes_and_set_default_dtype_moves_them():
    for default in (tp.float32, tp.float64, tp.float16):
        tp.set_default_dtype(default)
        torch.set_default_dtype(getattr(torch, np.dtype(default).name))
        try:
            assert str(tp.tensor([1.5]).dtype) == str(torch.tensor([1.5]).dtype)
            assert str(tp.result_type(tp.tensor([1, 2]), 0.5)) == str(torch.result_type(torch.tensor([1, 2]), 0.5))
            assert str(nn.Linear(2, 3).weight.dtype) == str(torch.nn.Linear(2, 3).weight.dtype)
            assert str(tp.exp(tp.tensor([1, 2])).dtype) == str(torch.exp(torch.tensor([1, 2])).dtype)
        finally:
            torch.set_default_dtype(torch.float32)
    with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
        tp.set_default_dtype(tp.int64)
    with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
        torch.set_default_dtype(torch.int64)


# ----- every operation of the table on operands of mixed dtypes ------------------------------------------------------

MIXED = [("float32", "float64"), ("float64", "float32"), ("float16", "float32"), ("float32", "float16")]
# not element-wise: stack (shapes must be equal; its promotion is tested in tests/test_tutorial_names_structure.py),
# and cross, einsum's matrix product and scatter, which refuse two dtypes as torch does (tested there too)
STRUCTURAL = ("stack", "cross", "einsum", "scatter")


def _mixed_rows():
    rows = []
    for operation in OPERATIONS:
        if len(operation.shapes) == 2 and operation.name not in ("matmul", "linear, no bias", "concatenate",
                                                                  "concatenate cubed", "mean_squared_error") \
                and not operation.name.startswith(STRUCTURAL):
            rows += [(operation, dtypes_) for dtypes_ in MIXED]
    return rows


@pytest.mark.parametrize("operation, dtypes_", _mixed_rows(), ids=lambda v: getattr(v, "name", str(v)))
@pytest.mark.parametrize("zero_d", [False, True], ids=["both dimensioned", "the second 0-d"])
def test_element_wise_operations_of_two_dtypes_give_torchs_dtype_and_values(operation, dtypes_, zero_d):
    values = operands(operation)
    if zero_d:
        values[1] = values[1].reshape(-1)[:1].reshape(())
    ours = operation.ours(*[tp.tensor(v, dtype=getattr(tp, d)) for v, d in zip(values, dtypes_)])
    theirs = operation.theirs(*[torch.tensor(v, dtype=torch_dtype(d)) for v, d in zip(values, dtypes_)])
    assert str(ours.dtype) == str(theirs.dtype), operation.name
    tolerance = 1e-3 if "float16" in dtypes_ else 1e-6
    np.testing.assert_allclose(ours.data.astype(np.float64), theirs.double().numpy(), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name, ours, theirs", [
    ("exp", tp.exp, torch.exp), ("log", tp.log, torch.log), ("sin", tp.sin, torch.sin), ("cos", tp.cos, torch.cos),
    ("tanh", tp.tanh, torch.tanh), ("sqrt", tp.sqrt, torch.sqrt), ("sigmoid", tp.sigmoid, torch.sigmoid),
    ("logsumexp", lambda x: tp.logsumexp(x, 0), lambda t: torch.logsumexp(t, 0)),
    ("true division", lambda x: x / x, lambda t: t / t), ("** 2.5", lambda x: x ** 2.5, lambda t: t ** 2.5),
    ("* 0.5", lambda x: x * 0.5, lambda t: t * 0.5), ("2.0 ** x", lambda x: 2.0 ** x, lambda t: 2.0 ** t),
    ("clamp(min=0.5)", lambda x: tp.clamp(x, min=0.5), lambda t: torch.clamp(t, min=0.5)),
    ("sum", lambda x: x.sum(), lambda t: t.sum()), ("abs", tp.abs, torch.abs), ("square", tp.square, torch.square),
    ("** 2", lambda x: x ** 2, lambda t: t ** 2), ("// 2", lambda x: x // 2, lambda t: t // 2),
    ("% 2", lambda x: x % 2, lambda t: t % 2), ("2 ** x", lambda x: 2 ** x, lambda t: 2 ** t),
])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64"])
def test_operations_of_integers_and_bools_give_torchs_dtype_and_values(name, ours, theirs, dtype):
    values = np.array([1, 2, 3]).astype(dtype)
    try:
        expected = theirs(torch.from_numpy(values))
    except (RuntimeError, NotImplementedError) as error:  # torch refuses some (a bool's abs): so must the package
        with pytest.raises(type(error)):
            ours(tp.from_numpy(values))
        return
    result = ours(tp.from_numpy(values))
    assert str(result.dtype) == str(expected.dtype), (name, dtype)
    np.testing.assert_allclose(result.data, expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int64", "float32", "float64"])
def test_sum_with_a_dtype_casts_first_as_torch(dtype):
    values = np.array([1, 2, 2 ** 40], dtype=np.int64)
    for ours_input, theirs_input in [(tp.from_numpy(values), torch.from_numpy(values)),
                                     (tp.tensor([0.1, 0.2]), torch.tensor([0.1, 0.2]))]:
        ours, theirs = ours_input.sum(dtype=getattr(tp, dtype)), theirs_input.sum(dtype=torch_dtype(dtype))
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_sum_with_a_dtype_sends_the_gradient_back_in_the_inputs_dtype():
    x, t = tp.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    x.sum(dtype=tp.float64).backward()
    t.sum(dtype=torch.float64).backward()
    assert x.grad.dtype == tp.float32 and t.grad.dtype == torch.float32
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())


def test_comparisons_happen_in_the_promoted_dtype():
    for fw in (tp, torch):
        assert bool((fw.tensor([0.1]) == fw.tensor(0.1, dtype=fw.float64)).all())  # 0.1 rounded to float32 first
        assert not bool((fw.tensor([0.1], dtype=fw.float64) == fw.tensor([0.1])).all())  # two vectors: float64


# ----- refusals, with PyTorch's messages ------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda fw: fw.ones(2, 2, dtype=fw.float16) @ fw.ones(2, 2),
    lambda fw: fw.ones(2, 2) @ fw.ones(2, 2, dtype=fw.float64),
    lambda fw: fw.ones(2, 3) @ fw.ones(3, 2, dtype=fw.int64),
    lambda fw: fw.nn.functional.linear(fw.ones(2, 2), fw.ones(2, 2, dtype=fw.float64)),
    lambda fw: fw.nn.functional.linear(fw.ones(2, 2), fw.ones(2, 2), fw.ones(2, dtype=fw.float64)),
    lambda fw: fw.tensor([1, 2]).add_(1.5),
    lambda fw: fw.tensor([1, 2]).mul_(fw.tensor([0.5])),
    lambda fw: fw.tensor([True]).add_(1),
    lambda fw: fw.tensor([1, 2]).mean(),
    lambda fw: fw.tensor([1, 2]) ** -1,
    lambda fw: fw.tensor([1, 2]).norm(),
    lambda fw: fw.tensor([5]) // fw.tensor([0]),
], ids=["f16 @ f32", "f32 @ f64", "f32 @ int64", "linear f32 f64", "linear bias f64", "int add_ 1.5",
        "int mul_ float", "bool add_ 1", "mean of ints", "int ** -1", "norm of ints", "int // 0"])
def test_refused_as_torch_refuses_in_its_words(call):
    with pytest.raises(RuntimeError) as theirs:
        call(torch)
    with pytest.raises(RuntimeError) as ours:
        call(tp)
    assert str(ours.value) == str(theirs.value)


def test_softmax_of_integers_is_refused_as_torchs():
    with pytest.raises(NotImplementedError) as theirs:
        torch.softmax(torch.tensor([1, 2]), 0)
    with pytest.raises(NotImplementedError) as ours:
        tp.softmax(tp.tensor([1, 2]), 0)
    assert str(ours.value) == str(theirs.value)


def test_floor_division_has_no_derivative_in_either_framework():
    for fw in (tp, torch):
        x = fw.tensor([1.5, -2.5], requires_grad=True)
        y = x // 1.0
        assert y.requires_grad and y.dtype == x.dtype
        with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
            y.sum().backward()


def test_an_in_place_result_of_a_wider_dtype_is_cast_into_the_variable_as_torchs():
    for fw in (tp, torch):
        x = fw.tensor([1.0, 2.0])
        x.add_(fw.tensor([1.0], dtype=fw.float64))
        assert x.dtype == fw.float32
        y = fw.tensor([1.0, 2.0], requires_grad=True) * 1.0
        y.mul_(fw.tensor([0.5], dtype=fw.float64))
        assert y.dtype == fw.float32
        y.sum().backward()


# ----- modules: the default dtype, dtype=, Module.to -----------------------------------------------------------------

@pytest.mark.parametrize("build", [lambda n, **kw: n.Linear(3, 2, **kw), lambda n, **kw: n.LayerNorm(3, **kw),
                                   lambda n, **kw: n.BatchNorm1d(3, **kw)], ids=["Linear", "LayerNorm", "BatchNorm1d"])
def test_modules_are_made_in_the_default_dtype_or_dtype_and_cast_by_to_as_torchs(build):
    for kwargs in ({}, {"dtype": "float64"}):  # (the package's buffers are arrays: their dtypes are NumPy's)
        ours = build(nn, **{k: getattr(tp, v) for k, v in kwargs.items()})
        theirs = build(torch.nn, **{k: getattr(torch, v) for k, v in kwargs.items()})
        assert [str(p.dtype) for p in ours.parameters()] == [str(p.dtype) for p in theirs.parameters()]
        assert [str(dtypes.as_torch(b.dtype)) for b in ours.buffers()] == [str(b.dtype) for b in theirs.buffers()]
    for cast in (lambda m, fw: m.double(), lambda m, fw: m.half(), lambda m, fw: m.to(fw.float64),
                 lambda m, fw: m.to(dtype=fw.float16), lambda m, fw: m.float()):
        ours, theirs = build(nn), build(torch.nn)
        weight = ours.weight
        assert cast(ours, tp) is ours
        cast(theirs, torch)
        assert ours.weight is weight  # the same Parameter, as an optimizer holds it
        assert [str(p.dtype) for p in ours.parameters()] == [str(p.dtype) for p in theirs.parameters()]
        assert [str(dtypes.as_torch(b.dtype)) for b in ours.buffers()] == [str(b.dtype) for b in theirs.buffers()]


def test_a_float32_input_through_a_module_stays_float32_and_autocast_casts_the_nn_model():
    model, twin = nn.Sequential(nn.Linear(4, 3), nn.Tanh()), torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    assert model(tp.ones(2, 4)).dtype == tp.float32
    with tp.autocast("cpu", dtype=tp.float16):
        ours = model(tp.ones(2, 4))
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = twin(torch.ones(2, 4))
    assert str(ours.dtype) == str(theirs.dtype) == "torch.float16"


def test_module_apply_and_requires_grad_as_torchs():
    for fw in (tp, torch):
        model = fw.nn.Sequential(fw.nn.Linear(2, 2), fw.nn.Sequential(fw.nn.Linear(2, 1)))
        seen = []
        assert model.apply(lambda m: seen.append(type(m).__name__)) is model
        assert seen == ["Linear", "Linear", "Sequential", "Sequential"]
        assert model.requires_grad_(False) is model
        assert not any(p.requires_grad for p in model.parameters())


def test_load_state_dict_copies_into_the_parameters_own_dtype_and_refuses_arrays():
    for fw in (tp, torch):
        model = fw.nn.Linear(3, 2)
        model.load_state_dict({"weight": fw.ones(2, 3, dtype=fw.float64), "bias": fw.zeros(2, dtype=fw.float64)})
        assert model.weight.dtype == fw.float32 and float(model.weight.detach().sum()) == 6.0
    for fw in (tp, torch):
        with pytest.raises(RuntimeError, match="expected torch.Tensor or Tensor-like object from checkpoint but "
                                               "received <class 'numpy.ndarray'>"):
            fw.nn.Linear(3, 2).load_state_dict({"weight": np.ones((2, 3)), "bias": np.ones(2)})


# ----- the silent differences reported, each now torch's ----------------------------------------------------------------

@pytest.mark.parametrize("case", [
    lambda fw: fw.ones(3) * fw.tensor(2.0, dtype=fw.float64),
    lambda fw: fw.ones(3) + fw.tensor([1, 2, 3]),
    lambda fw: fw.tensor([1, 2]) * 0.5,
    lambda fw: fw.exp(fw.tensor([1, 2])),
    lambda fw: fw.sqrt(fw.tensor([1, 4])),
    lambda fw: fw.sigmoid(fw.tensor([1, 2])),
    lambda fw: fw.tensor([3, 4]) / fw.tensor([2, 2]),
    lambda fw: fw.ones(3, dtype=fw.float16) + fw.tensor(1.0),
    lambda fw: fw.tensor(2.0, dtype=fw.float16) * 2.5,
    lambda fw: 2 ** fw.tensor([1, 2]),
    lambda fw: fw.tensor([1.0, 2.0]) ** fw.tensor([2, 3]),
    lambda fw: fw.tensor([5, -7]) // 2,
    lambda fw: fw.tensor([5.0, -7.0]) % 3,
    lambda fw: fw.where(fw.tensor([True, False]), fw.ones(2), fw.zeros(2, dtype=fw.float64)),
    lambda fw: fw.maximum(fw.ones(2), fw.tensor([0, 2])),
    lambda fw: fw.tensor([1, 2]).sum(dtype=fw.float64),
    lambda fw: fw.amp.GradScaler("cpu").scale(fw.tensor([1, 2])),
], ids=["f32 * 0-d f64", "f32 + int64", "int * 0.5", "exp int", "sqrt int", "sigmoid int", "int / int",
        "f16 + 0-d f32", "0-d f16 * 2.5", "2 ** int", "f32 ** int tensor", "int // 2", "f32 % 3", "where", "maximum",
        "sum dtype", "GradScaler.scale of ints"])
def test_each_reported_case_gives_torchs_dtype_and_values(case):
    ours, theirs = case(tp), case(torch)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-6)


def test_a_hook_that_changes_the_dtype_is_refused_in_torchs_words():
    for fw in (tp, torch):
        x = fw.ones(3, dtype=fw.float64, requires_grad=True)
        x.register_hook(lambda g: g.float())
        with pytest.raises(RuntimeError, match=r"has changed the type of value \(was torch.DoubleTensor got "
                                               r"torch.FloatTensor\)"):
            (x * 2).sum().backward()


def test_the_check_covers_every_dtype_the_factories_name():
    assert {str(np.dtype(getattr(tp, name))) for name in ("uint8", "int8", "int16", "short", "int32", "int64", "long",
                                                          "bool", "half", "float", "double")} <= set(NAMES)
    assert dtypes.torch_name(np.float32) == "Float" and dtypes.torch_name(np.int64) == "Long"


ALIASES = ["float16", "half", "float32", "float", "float64", "double", "uint8", "int8", "int16", "short", "int32",
           "int64", "long", "bool", "complex64", "cfloat", "complex128", "cdouble"]


@pytest.mark.parametrize("name", ALIASES)
def test_a_dtype_is_one_object_printed_and_described_as_torchs(name):
    ours, theirs = getattr(tp, name), getattr(torch, name)
    assert isinstance(ours, tp.dtype) and isinstance(theirs, torch.dtype)
    assert str(ours) == repr(ours) == str(theirs) == repr(theirs)
    assert (ours.is_floating_point, ours.is_complex, ours.is_signed, ours.itemsize) == \
        (theirs.is_floating_point, theirs.is_complex, theirs.is_signed, theirs.itemsize)
    # one object per dtype, as torch's: a tensor's dtype, the factories' names, copies and pickles are it
    assert tp.ones(2, dtype=ours).dtype is ours and torch.ones(2, dtype=theirs).dtype is theirs
    for fw, dtype in ((tp, ours), (torch, theirs)):
        assert copy.deepcopy(dtype) is dtype and pickle.loads(pickle.dumps(dtype)) is dtype
        assert copy.deepcopy({"dtype": dtype})["dtype"] is dtype  # a state dict that holds one
    assert ours != None and ours != "not a dtype"  # noqa: E711 (the comparison is what is checked)
    assert (theirs != None) and (theirs != "not a dtype")  # noqa: E711
    for fw in (tp, torch):
        with pytest.raises(TypeError, match=f"cannot create '{fw.__name__}.dtype' instances"):
            fw.dtype()


def test_a_dtype_also_equals_numpys_and_numpy_takes_it():
    """Where the package differs: its dtypes hold NumPy's, equal them and hash as them (x.dtype == np.float32
    keeps working, and one dict answers for both), and NumPy takes them wherever a dtype goes."""
    x = tp.ones(2, dtype=tp.float32)
    assert x.dtype == np.float32 and x.dtype == np.dtype(np.float32) and np.dtype(np.float32) == x.dtype
    assert x.dtype != np.float64 and x.dtype != tp.float64
    assert {np.dtype(np.float32): 1}[x.dtype] == 1 and {tp.float32: 1}[x.data.dtype] == 1
    assert np.dtype(tp.int16) is np.dtype(np.int16) and tp.int16.dtype is np.dtype(np.int16)
    assert np.zeros(2, dtype=tp.float16).dtype == np.float16 and x.data.astype(tp.int32).dtype == np.int32
    assert (tp.float32.kind, tp.float32.name, tp.float32.type) == ("f", "float32", np.float32)
    assert str(tp.get_default_dtype()) == str(torch.get_default_dtype()) and tp.get_default_dtype() is tp.float32


def test_dtype_objects_work_on_every_backend(xp):
    """The factories, casts, promotion, in-place casts and Module.to take the dtype objects on the device too (the
    strict stand-in refuses what CuPy refuses), and the arrays hold NumPy's dtypes."""
    device = "cpu" if xp is np else "cuda"
    x = tp.ones(3, dtype=tp.float16, device=device, requires_grad=True)
    y = x + tp.full((3,), 2.0, dtype=tp.float32, device=device)
    assert (x.dtype, y.dtype, x.double().dtype, x.to(tp.int32).dtype) == (tp.float16, tp.float32, tp.float64, tp.int32)
    assert x.data.dtype is np.dtype(np.float16) and isinstance(x.data, xp.ndarray)
    z = tp.zeros_like(y, dtype=tp.int64)
    z += 2
    assert z.dtype is tp.int64 and tp.zeros_like(x).dtype is tp.float16
    assert tp.arange(3, device=device).dtype is tp.int64
    y.sum().backward()
    assert x.grad.dtype is tp.float16 and x.grad.data.dtype is np.dtype(np.float16)
    layer = nn.Linear(2, 2).to(device).to(tp.float64)
    assert layer.weight.dtype is tp.float64 and isinstance(layer.weight.data, xp.ndarray)
    assert layer(tp.ones(1, 2, dtype=tp.float64, device=device)).dtype is tp.float64


def test_a_promoted_input_saved_for_backward_still_sees_its_in_place_change_as_torch():
    """float32 x times a float64 vector: x is promoted for the product, and the cast copy saved for y's gradient
    shares x's version counter, so a change of x after the forward is refused, as torch refuses it."""
    for fw in (tp, torch):
        x = fw.ones(3, requires_grad=True) * 1.0
        y = fw.ones(3, dtype=fw.float64, requires_grad=True)
        z = (x * y).sum()
        x.mul_(2.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()


def test_mixed_dtype_gradients_come_back_in_each_inputs_dtype_with_torchs_values():
    x_values, y_values = np.array([0.5, -1.0, 2.0]), np.array([0.1, 0.2, 0.3])
    grads = {}
    for fw in (tp, torch):
        x = fw.tensor(x_values, dtype=fw.float32, requires_grad=True)
        y = fw.tensor(y_values, dtype=fw.float64, requires_grad=True)
        (fw.exp(x * y) / (x + y)).sum().backward()
        grads[fw] = (x.grad, y.grad)
    for ours, theirs in zip(grads[tp], grads[torch]):
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)
