"""PyTorch names that PyTorch programs use and no step builds: comparisons and logic (eq, ..., equal, allclose, all,
any, bitwise_xor and ^), asin, ceil, floor, prod, var, std, sin_, x.mul, x.unsqueeze_, x.view_as, movedim, x.type(),
out= of add, sub, mul, div, matmul, rand and randn, and cat(dim=). Each runs on both frameworks: values, dtypes and
gradients are torch's (float64 unless a dtype is the point), and bad input raises torch's exception type, with
torch's words where the package keeps them. Every expected value comes from torch."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import tinypytorch as tp
from reference import assert_close_to_torch, floats
from tinypytorch import Variable

pytestmark = [pytest.mark.torch]

# Elements drawn often from a few values, so that ties, zeros and equal elements occur
ELEMENTS = floats(-3.0, 3.0) | st.sampled_from([-1.0, 0.0, 1.0, 2.0])
SHAPES = array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)


def pair(array, dtype=None, requires_grad=False):
    """The same values in both frameworks: a tinypytorch tensor and a torch one."""
    array = np.asarray(array)
    if dtype is not None:
        array = array.astype(dtype)
    return tp.tensor(array, requires_grad=requires_grad), torch.tensor(array, requires_grad=requires_grad)


def assert_same(ours, theirs, what=""):
    """Equal values (NaN where torch's are), the same shape and the same dtype."""
    assert isinstance(ours, Variable), what
    assert str(ours.dtype) == str(theirs.dtype), (what, ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape), what
    expected = theirs.detach().numpy()
    if expected.dtype.kind == "f":
        assert_close_to_torch(ours.data, expected, what)
    else:
        np.testing.assert_array_equal(ours.data, expected, err_msg=what)


def raises_as_torch(ours, theirs, same_words=True):
    """Both raise, the package with torch's exception type and words: the same (same_words True), the same or the
    same after the package's "op: " (same_words "after the op"), or its own (False)."""
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(type(expected.value)) as raised:
        ours()
    if same_words is True:
        assert str(raised.value) == str(expected.value)
    elif same_words:
        assert str(expected.value) in (str(raised.value), str(raised.value).split(": ", 1)[-1])
    return raised.value


def grads(fn, array, seed=0):
    """fn's value and gradient of sum(w * fn(x)) at `array` (float64), in both frameworks."""
    x, t = pair(np.asarray(array, dtype=np.float64), requires_grad=True)
    y, yt = fn(tp, x), fn(torch, t)
    w = np.random.default_rng(seed).uniform(-1.0, 1.0, tuple(yt.shape))
    (y * tp.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    return (y, yt), (x.grad, t.grad)


def assert_grads_equal_torch(fn, array, seed=0):
    (y, yt), (g, gt) = grads(fn, array, seed)
    assert_same(y, yt, "value")
    assert str(g.dtype) == str(gt.dtype)
    assert_close_to_torch(g.data, gt.numpy(), "gradient")


# ----- comparisons: eq, ne, lt, le, gt, ge ----------------------------------------------------------------------------

COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
OPERANDS = {  # name: (x, other) in numpy, other may be a Python number
    "same shape": (np.array([[1.0, 2.0, np.nan], [0.1, -1.0, 3.0]]), np.array([[1.0, 2.5, np.nan], [0.1, -2.0, 3.0]])),
    "broadcast": (np.array([[1.0, 2.0, 3.0]]), np.array([[2.0], [1.0]])),
    "an int": (np.array([1.0, 2.0, 3.0]), 2),
    "a float": (np.array([1, 2, 3]), 2.5),
    "a bool": (np.array([0, 1, 2]), True),
    "float32 and float64 0.1": (np.array([0.1, 0.2], dtype=np.float32), np.array(0.1)),
    "int and float": (np.array([1, 2, 3]), np.array([1.0, 2.5, 3.0], dtype=np.float32)),
    "bools": (np.array([True, False]), np.array([True, True])),
}


def operands(name):
    x, other = OPERANDS[name]
    ours, theirs = pair(x)
    if isinstance(other, np.ndarray):
        return (ours, theirs), pair(other)
    return (ours, theirs), (other, other)


@pytest.mark.parametrize("name", COMPARISONS)
@pytest.mark.parametrize("case", list(OPERANDS))
def test_comparisons_as_functions_and_methods_equal_torchs(name, case):
    (x, t), (other, other_t) = operands(case)
    expected = getattr(torch, name)(t, other_t)
    for ours in (getattr(tp, name)(x, other), getattr(x, name)(other)):
        assert_same(ours, expected, f"{name}, {case}")
        assert not ours.requires_grad


@pytest.mark.parametrize("name", COMPARISONS)
def test_a_comparison_of_tensors_that_require_grad_gives_a_bool_tensor_without_gradient(name):
    x, t = pair([1.0, 2.0, 3.0], requires_grad=True)
    ours, theirs = getattr(tp, name)(x, 2.0), getattr(torch, name)(t, 2.0)
    assert_same(ours, theirs)
    assert not ours.requires_grad and not theirs.requires_grad and ours.grad_fn is None


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_write_into_out_as_torchs(name):
    for out_dtype in ("bool", "float32", "int64"):
        (x, t), (other, other_t) = operands("broadcast")
        out, out_t = pair(np.zeros(0), getattr(np, out_dtype))
        assert getattr(tp, name)(x, other, out=out) is out
        assert getattr(torch, name)(t, other_t, out=out_t) is out_t
        assert_same(out, out_t, f"{name} into {out_dtype}")


@pytest.mark.parametrize("ours, theirs", [
    (lambda m: m.eq(2, m.tensor([1.0])), "a number first"),
    (lambda m: m.eq(m.tensor([1.0]), "a"), "a string"),
    (lambda m: m.lt(m.tensor([1.0]), None), "None"),
])
def test_comparisons_refuse_what_is_not_a_tensor_or_a_number_with_a_type_error(ours, theirs):
    raises_as_torch(lambda: ours(tp), lambda: ours(torch), same_words=False)


@pytest.mark.parametrize("name", ["lt", "le", "gt", "ge"])
def test_ordering_complex_numbers_is_refused_as_torch_refuses_it(name):
    x, t = pair(np.array([1 + 2j, 3 - 1j], dtype=np.complex64))
    raises_as_torch(lambda: getattr(tp, name)(x, 1.0), lambda: getattr(torch, name)(t, 1.0))
    assert_same(tp.eq(x, x), torch.eq(t, t))  # eq and ne compare them


def test_comparisons_of_shapes_that_do_not_broadcast_name_the_operation():
    with pytest.raises(RuntimeError):
        torch.eq(torch.ones(2), torch.ones(3))
    with pytest.raises(ValueError, match=r"^eq: shapes \(2,\) and \(3,\) do not broadcast$"):  # the package's type
        tp.eq(tp.ones(2), tp.ones(3))


# ----- equal and allclose: Python bools -------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [
    ([1.0, 2.0], [1.0, 2.0]), ([1.0, 2.0], [1.0, 2.5]), ([1.0, np.nan], [1.0, np.nan]), ([1.0, 2.0], [[1.0, 2.0]]),
    ([1.0, 2.0], np.array([1, 2])), (np.float32([0.1]), np.float64([0.1])), ([True], np.array([1])),
    (np.zeros((0, 2)), np.zeros((0, 2))), (np.zeros((0, 2)), np.zeros((2, 0))),
])
def test_equal_is_torchs_python_bool(a, b):
    (x, t), (y, u) = pair(a), pair(b)
    assert tp.equal(x, y) is torch.equal(t, u)
    assert x.equal(y) is t.equal(u)


def test_equal_refuses_a_number_with_torchs_words():
    raises_as_torch(lambda: tp.equal(tp.tensor([1.0]), 1.0), lambda: torch.equal(torch.tensor([1.0]), 1.0))


@pytest.mark.parametrize("a, b, options", [
    ([1.0, 2.0], [1.0, 2.0 + 1e-6], {}), ([1.0, 2.0], [1.0, 2.0 + 1e-3], {}),
    ([1.0, 2.0], [1.0, 2.0 + 1e-3], {"rtol": 1e-3}), ([1.0, np.nan], [1.0, np.nan], {}),
    ([1.0, np.nan], [1.0, np.nan], {"equal_nan": True}), ([np.inf], [np.inf], {}), ([np.inf], [-np.inf], {}),
    ([1.0], [1.0 + 1e-12], {"rtol": 0, "atol": 0}), ([1.0, 2.0], [1.0], {}),
    (np.array([1]), np.array([2]), {"atol": 1}), (np.array([100]), np.array([110]), {"rtol": 0.1, "atol": 0}),
    (np.array([True]), np.array([False]), {"atol": 1}), (np.array([True]), np.array([True]), {}),
    (np.float32([1.0, 2.0]), np.float32([1.00001, 2.0]), {}),
])
def test_allclose_is_torchs_python_bool(a, b, options):
    (x, t), (y, u) = pair(a), pair(b)
    assert tp.allclose(x, y, **options) is torch.allclose(t, u, **options)
    assert x.allclose(y, **options) is t.allclose(u, **options)


@given(arrays(np.float64, SHAPES, elements=ELEMENTS | st.just(np.nan)), st.data())
def test_allclose_of_random_arrays_is_torchs(a, data):
    b = a + data.draw(arrays(np.float64, a.shape, elements=st.sampled_from([0.0, 1e-9, -1e-7, 1e-5, 0.1])))
    rtol, atol = data.draw(st.sampled_from([0.0, 1e-8, 1e-5])), data.draw(st.sampled_from([0.0, 1e-8, 1e-6]))
    equal_nan = data.draw(st.booleans())
    (x, t), (y, u) = pair(a), pair(b)
    assert tp.allclose(x, y, rtol, atol, equal_nan) is torch.allclose(t, u, rtol, atol, equal_nan)


@pytest.mark.parametrize("call", [
    lambda m: m.allclose(m.tensor([1.0]), m.tensor([1.0], dtype=m.float64)),  # Float did not match Double
    lambda m: m.allclose(m.tensor([1]), m.tensor([1.0])),
    lambda m: m.allclose(m.tensor([1.0]), m.tensor([1.0]), rtol=-1),
    lambda m: m.allclose(m.tensor([1.0]), m.tensor([1.0]), atol=-0.5),
    lambda m: m.allclose(m.tensor([1.0]), 1.0),
    lambda m: m.allclose(m.tensor([1.0]), m.tensor([1.0]), atol="a"),
])
def test_allclose_refuses_as_torch_with_its_words(call):
    raises_as_torch(lambda: call(tp), lambda: call(torch))


# ----- all and any ----------------------------------------------------------------------------------------------------

ALL_ANY_ARRAYS = {
    "bool": np.array([[True, False, True], [True, True, True]]),
    "float with a NaN": np.array([[1.0, 0.0, np.nan], [2.0, 3.0, -1.0]]),
    "uint8": np.array([[0, 3, 1], [2, 2, 0]], dtype=np.uint8),
    "int64": np.array([[0, 0, 0], [5, 0, 1]]),
    "0-d": np.array(2.5),
    "empty": np.zeros((0, 3)),
}


@pytest.mark.parametrize("name", ["all", "any"])
@pytest.mark.parametrize("case", list(ALL_ANY_ARRAYS))
def test_all_and_any_over_every_dim_spelling_equal_torchs(name, case):
    x, t = pair(ALL_ANY_ARRAYS[case])
    n = max(x.ndim, 1)
    spellings = [{}, {"keepdim": True}] + [{"dim": d} for d in range(-n, n)] + [{"dim": 0, "keepdim": True}]
    if x.ndim:
        spellings += [{"dim": tuple(range(x.ndim))}, {"dim": (-1,), "keepdim": True}, {"dim": ()}]
    for kwargs in spellings:
        expected = getattr(torch, name)(t, **kwargs)
        assert_same(getattr(tp, name)(x, **kwargs), expected, f"{name} {case} {kwargs}")
        assert_same(getattr(x, name)(**kwargs), expected, f"x.{name} {case} {kwargs}")
    assert_same(getattr(tp, name)(x, 0, True), getattr(torch, name)(t, 0, True))  # positional, as torch's


@given(arrays(np.float64, SHAPES, elements=st.sampled_from([0.0, 1.0, -2.0, np.nan])), st.data())
def test_all_and_any_of_random_arrays_equal_torchs(a, data):
    x, t = pair(a)
    n = max(a.ndim, 1)
    dim = data.draw(st.none() | st.integers(-n, n - 1) | st.lists(st.integers(0, n - 1), unique=True).map(tuple))
    if isinstance(dim, tuple) and not a.ndim:
        dim = None
    keepdim = data.draw(st.booleans())
    for name in ("all", "any"):
        assert_same(getattr(tp, name)(x, dim, keepdim), getattr(torch, name)(t, dim, keepdim), f"{name} {dim}")


def test_all_and_any_of_a_tensor_that_requires_grad_have_no_gradient():
    x, t = pair([1.0, 0.0], requires_grad=True)
    for name in ("all", "any"):
        ours, theirs = getattr(tp, name)(x), getattr(torch, name)(t)
        assert_same(ours, theirs)
        assert not ours.requires_grad and not theirs.requires_grad


@pytest.mark.parametrize("call, same_words", [
    (lambda m: m.all(m.tensor([[0, 3]]), 2), False),  # IndexError, in the package's words
    (lambda m: m.any(m.tensor([[0, 3]]), -3), False),
    (lambda m: m.all(m.ones(2), out=m.zeros(0)), True),  # all only supports bool tensor for result, got: Float
])
def test_all_and_any_refuse_as_torch(call, same_words):
    raises_as_torch(lambda: call(tp), lambda: call(torch), same_words)


def test_all_and_any_refuse_a_number_or_a_float_dim_with_a_type_error():
    for call in (lambda m: m.all(True), lambda m: m.any(m.ones(2), dim=0.5)):
        raises_as_torch(lambda: call(tp), lambda: call(torch), same_words=False)


def test_all_and_any_write_into_out_as_torch():
    x, t = pair([[1.0, 0.0], [2.0, 3.0]])
    for name in ("all", "any"):
        out, out_t = pair(np.zeros(0, dtype=bool))
        assert getattr(tp, name)(x, 1, out=out) is out
        getattr(torch, name)(t, 1, out=out_t)
        assert_same(out, out_t)


# ----- bitwise_xor and ^ ----------------------------------------------------------------------------------------------

XOR_CASES = [
    (np.array([1, 2, 3]), 5), (np.array([True, False, True]), np.array([True, True, False])),
    (np.array([True, False, True]), np.array([1, 2, 3])), (np.array([1, 2, 3], dtype=np.int32), np.array([1, 2, 3])),
    (np.array([1, 2, 3], dtype=np.int32), 5), (np.array([True, False]), True), (np.array([True, False]), 1),
    (np.array([1, 2, 3], dtype=np.uint8), -1), (np.array([1, 2, 3], dtype=np.uint8), 300),
    (np.array([1, 2, 3]), np.array(7, dtype=np.int8)), (np.array([1, 2, 3], dtype=np.int8), np.array(7)),
    (np.array([[1], [2]]), np.array([3, 4, 5])), (5, np.array([1, 2, 3])), (True, np.array([True, False])),
]


def xor_operands(a, b):
    wrap = [pair(v) if isinstance(v, np.ndarray) else (v, v) for v in (a, b)]
    return (wrap[0][0], wrap[1][0]), (wrap[0][1], wrap[1][1])


@pytest.mark.parametrize("a, b", XOR_CASES)
def test_bitwise_xor_and_the_operator_equal_torchs(a, b):
    (x, y), (t, u) = xor_operands(a, b)
    expected = torch.bitwise_xor(t, u)
    assert_same(tp.bitwise_xor(x, y), expected)
    assert_same(x ^ y, t ^ u)
    if isinstance(x, Variable):
        assert_same(x.bitwise_xor(y), expected)


def test_bitwise_xor_in_place_keeps_the_tensor_and_counts_a_version_as_torch():
    x, t = pair([1, 2, 6])
    alias, alias_t = x, t
    x ^= 3
    t ^= 3
    assert x is alias and t is alias_t
    assert_same(x, t)
    assert x._version == t._version == 1
    assert x.bitwise_xor_(tp.tensor([1, 1, 1])) is x
    t.bitwise_xor_(torch.tensor([1, 1, 1]))
    assert_same(x, t)


@pytest.mark.parametrize("call, same_words", [
    (lambda m: m.bitwise_xor(m.tensor([1]), 1.5), True),  # "bitwise_xor_cpu" not implemented for 'Float'
    (lambda m: m.bitwise_xor(m.tensor([1.0]), m.tensor([1.0])), True),
    (lambda m: m.tensor([1]) ^ m.tensor([1.0]), True),
    (lambda m: m.tensor([True, False]).bitwise_xor_(2), True),  # result type Long can't be cast to ... Bool
    (lambda m: m.tensor([1, 2]).bitwise_xor_(m.tensor([[1], [2]])), False),  # output with shape [2] doesn't ...
])
def test_bitwise_xor_refuses_what_torch_refuses(call, same_words):
    raises_as_torch(lambda: call(tp), lambda: call(torch), same_words)


def test_bitwise_xor_of_two_numbers_or_a_string_is_a_type_error():
    for call in (lambda m: m.bitwise_xor(2, 3), lambda m: m.bitwise_xor(m.tensor([1]), "a"),
                 lambda m: m.tensor([1]) ^ "a"):
        raises_as_torch(lambda: call(tp), lambda: call(torch), same_words=False)


# ----- asin, ceil, floor ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["asin", "ceil", "floor"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64", "uint8"])
def test_asin_ceil_floor_give_torchs_values_and_dtypes(name, dtype):
    values = np.array([-1.5, -1.0, -0.5, 0.0, 0.3, 1.0, 2.0]) if dtype.startswith("float") else np.array([0, 1, 2])
    x, t = pair(values, getattr(np, dtype))
    assert_same(getattr(tp, name)(x), getattr(torch, name)(t), f"{name} {dtype}")
    assert_same(getattr(x, name)(), getattr(t, name)(), f"x.{name} {dtype}")


@pytest.mark.parametrize("name", ["ceil", "floor"])
def test_ceil_and_floor_refuse_bools_and_numbers_as_torch(name):
    raises_as_torch(lambda: getattr(tp, name)(tp.tensor([True])), lambda: getattr(torch, name)(torch.tensor([True])))
    raises_as_torch(lambda: getattr(tp, name)(2.0), lambda: getattr(torch, name)(2.0))


@pytest.mark.parametrize("name", ["asin", "ceil", "floor"])
@given(a=arrays(np.float64, SHAPES, elements=floats(-1.0, 1.0) | st.sampled_from([-1.0, 0.0, 0.5, 1.0])))
def test_asin_ceil_floor_gradients_equal_torchs(name, a):
    # asin's derivative is infinite at -1 and 1; ceil's and floor's is 0 everywhere, at the steps too
    assert_grads_equal_torch(lambda m, x: getattr(m, name)(x), a)


def test_asin_ceil_floor_record_torchs_nodes():
    x, t = pair([0.5], requires_grad=True)
    for name in ("asin", "ceil", "floor"):
        assert getattr(tp, name)(x).grad_fn.name() == type(getattr(torch, name)(t).grad_fn).__name__


# ----- prod -----------------------------------------------------------------------------------------------------------

PROD_CALLS = {
    "every element": lambda m, x: m.prod(x),
    "dim 1": lambda m, x: m.prod(x, 1),
    "dim -1 keepdim": lambda m, x: m.prod(x, dim=-1, keepdim=True),
    "dim 0": lambda m, x: x.prod(0),
    "method": lambda m, x: x.prod(),
    "dtype float32 then cubed": lambda m, x: m.prod(x, 1, dtype=m.float32).double() ** 3,
}
PROD_ARRAYS = {
    "no zero": [[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]],
    "one zero": [[1.5, 0.0, 3.0], [0.5, 4.0, -1.0]],
    "a zero in each row": [[1.5, 0.0, 3.0], [0.0, 4.0, -1.0]],
    "two zeros in a row": [[0.0, 0.0, 3.0], [0.5, 4.0, -1.0]],
    "zeros only": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
}


@pytest.mark.parametrize("call", list(PROD_CALLS))
@pytest.mark.parametrize("case", list(PROD_ARRAYS))
def test_prod_values_and_gradients_equal_torchs_zeros_included(call, case):
    assert_grads_equal_torch(PROD_CALLS[call], PROD_ARRAYS[case])


@pytest.mark.parametrize("case", list(PROD_ARRAYS))
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_prod_second_derivatives_equal_torchs_zeros_included(case, dim):
    x, t = pair(np.array(PROD_ARRAYS[case]), requires_grad=True)
    w = np.random.default_rng(1).uniform(-1.0, 1.0, (2, 3))

    def second(m, v, autograd):
        y = m.prod(v) if dim is None else m.prod(v, dim)
        (g,) = autograd.grad(y.sum(), v, create_graph=True)
        (gg,) = autograd.grad((g * g * m.tensor(w)).sum(), v, allow_unused=True)
        return g, gg

    (g, gg), (gt, ggt) = second(tp, x, tp.autograd), second(torch, t, torch.autograd)
    assert_close_to_torch(g.data, gt.detach().numpy(), "first")
    assert_close_to_torch(gg.data, ggt.numpy(), "second")


@given(arrays(np.float64, SHAPES, elements=floats(-2.0, 2.0) | st.sampled_from([0.0, 0.0, 1.0, -1.0])), st.data())
def test_prod_of_random_arrays_with_zeros_equals_torchs(a, data):
    dim = data.draw(st.none() | st.integers(-max(a.ndim, 1), max(a.ndim, 1) - 1))
    keepdim = dim is not None and data.draw(st.booleans())
    assert_grads_equal_torch(lambda m, x: m.prod(x) if dim is None else m.prod(x, dim, keepdim), a)


@pytest.mark.parametrize("values, dtype", [
    ([1, 2, 3], "int64"), ([1, 2, 3], "int32"), ([2, 3], "uint8"), ([2, 3], "int8"), ([True, True], "bool"),
    ([1.5, 2.0], "float16"), ([1.5, 2.0], "float32"),
])
def test_prod_of_integers_and_bools_is_int64_and_of_floats_their_dtype_as_torchs(values, dtype):
    x, t = pair(np.array([values]), getattr(np, dtype))
    for kwargs in ({}, {"dim": 1}, {"dim": 1, "keepdim": True}):
        assert_same(tp.prod(x, **kwargs), torch.prod(t, **kwargs), f"{dtype} {kwargs}")
    for dtype_ in (tp.float32, tp.int64, tp.float64):
        assert_same(tp.prod(x, dtype=dtype_), torch.prod(t, dtype=getattr(torch, str(dtype_)[6:])))


def test_prod_of_0d_and_empty_tensors_equals_torchs():
    for values, kwargs in ((np.array(3.0), {}), (np.array(3.0), {"dim": 0}), (np.array(3.0), {"dim": -1}),
                           (np.zeros((0, 3)), {"dim": 0}), (np.zeros((0, 3)), {"dim": 1}), (np.zeros((0, 3)), {})):
        x, t = pair(values)
        assert_same(tp.prod(x, **kwargs), torch.prod(t, **kwargs), f"{values.shape} {kwargs}")


def test_prod_records_torchs_nodes_and_saves_what_torch_saves():
    x, t = pair(np.ones((2, 3)), requires_grad=True)
    assert tp.prod(x).grad_fn.name() == type(torch.prod(t).grad_fn).__name__ == "ProdBackward0"
    assert tp.prod(x, 1).grad_fn.name() == type(torch.prod(t, 1).grad_fn).__name__ == "ProdBackward1"


def test_prod_refuses_as_torch():
    raises_as_torch(lambda: tp.prod(tp.ones(2, 3), 2), lambda: torch.prod(torch.ones(2, 3), 2), same_words=False)
    for call in (lambda m: m.prod(m.ones(2, 3), dim=(0, 1)), lambda m: m.prod(m.ones(2, 3), keepdim=True),
                 lambda m: m.prod(2.0)):
        raises_as_torch(lambda: call(tp), lambda: call(torch), same_words=False)


# ----- var and std ----------------------------------------------------------------------------------------------------

VARIANCE_CALLS = {  # torch's three signatures, positional and keyword
    "every dim": lambda f, x: f(x),
    "unbiased=False positional": lambda f, x: f(x, False),
    "unbiased=True positional": lambda f, x: f(x, True),
    "dim": lambda f, x: f(x, 1),
    "dim, unbiased, keepdim positional": lambda f, x: f(x, 1, False, True),
    "dim=, unbiased=False": lambda f, x: f(x, dim=0, unbiased=False),
    "dim=, correction=0": lambda f, x: f(x, dim=1, correction=0),
    "dims, correction 0.5, keepdim": lambda f, x: f(x, dim=(0, 1), correction=0.5, keepdim=True),
    "negative correction": lambda f, x: f(x, correction=-1),
    "dim None, unbiased positional": lambda f, x: f(x, None, True),
    "dim list": lambda f, x: f(x, [-1]),
}


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("call", list(VARIANCE_CALLS))
def test_var_and_std_in_each_of_torchs_signatures_equal_torchs_values_and_gradients(name, call):
    a = [[1.0, 2.0, 4.0], [0.0, 4.0, 5.5]]
    assert_grads_equal_torch(lambda m, x: VARIANCE_CALLS[call](getattr(m, name), x), a)

    def method(x, *args, **kwargs):  # x.var(...), x.std(...)
        return getattr(x, name)(*args, **kwargs)

    assert_grads_equal_torch(lambda m, x: VARIANCE_CALLS[call](method, x), a)


# Quarters: a slice of equal elements then has its mean exactly in both frameworks, and std 0 (whose gradient is 0 by
# PyTorch's rule); with other values the mean of equal elements is rounded, and a std of rounding noise has a gradient
# of noise, in each framework its own.
QUARTERS = st.integers(-12, 12).map(lambda k: k / 4)


@pytest.mark.parametrize("name", ["var", "std"])
@given(a=arrays(np.float64, SHAPES, elements=QUARTERS), data=st.data())
def test_var_and_std_of_random_arrays_equal_torchs(name, a, data):
    n = max(a.ndim, 1)
    dim = data.draw(st.none() | st.integers(-n, n - 1) | st.lists(st.integers(0, n - 1), min_size=1, unique=True)
                    .map(tuple))
    if isinstance(dim, tuple) and not a.ndim:
        dim = 0
    correction = data.draw(st.sampled_from([0, 1, 0.5]))
    keepdim = data.draw(st.booleans())
    with warnings.catch_warnings():  # (degrees of freedom <= 0: the warning is tested below)
        warnings.simplefilter("ignore")
        assert_grads_equal_torch(lambda m, x: getattr(m, name)(x, dim, correction=correction, keepdim=keepdim), a)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("values, kwargs", [
    ([1.0], {}),  # one element, correction 1: nan, and a nan gradient
    ([3.0, 3.0], {"correction": 2}),  # nan (0 / 0)
    ([1.0, 2.0], {"correction": 2}),  # inf
    ([[1.0, 2.0]], {"dim": 1, "correction": 2}),  # along a dim: inf, and PyTorch's infinite gradient
    ([[1.0, 1.0]], {"dim": 1, "correction": 2}),
    ([[1.0, 2.0], [3.0, 5.0]], {"dim": 0, "correction": 3}),  # dof < 0: inf, and PyTorch's finite gradient
    (3.0, {}), (3.0, {"dim": 0}), (3.0, {"dim": 0, "correction": 0}),  # a 0-d tensor
    ([[1.0, 2.0, 4.0], [0.0, 4.0, 5.0]], {"dim": []}),  # every dim, and PyTorch's infinite gradient (n counts 1)
    ([[1.0, 2.0, 4.0], [0.0, 4.0, 5.0]], {"dim": (), "keepdim": True}),
    ([[1.0, 1.0], [1.0, 2.0]], {"dim": 1}),  # std 0 in a row: gradient 0 there
])
def test_var_and_std_at_their_edges_equal_torchs_with_its_warning(name, values, kwargs):
    def fn(m, x):
        return getattr(m, name)(x, **kwargs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_grads_equal_torch(fn, values)
    words = [str(w.message) for w in caught if "degrees of freedom" in str(w.message)]
    theirs = {w.split(" (Triggered internally")[0] for w in words if "(Triggered internally" in w}
    assert {w for w in words if "(Triggered internally" not in w} == theirs  # torch's warning, where torch warns


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_keep_a_floating_dtype_as_torch(name, dtype):
    x, t = pair(np.linspace(0.0, 100.0, 1000), getattr(np, dtype))
    ours, theirs = getattr(tp, name)(x), getattr(torch, name)(t)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(ours.data.astype(np.float64), theirs.double().numpy(), rtol=1e-3 if dtype ==
                               "float16" else 1e-6)


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_refuse_as_torch(name):
    for values in ([1, 2], [True, False]):  # std and var only support floating point and complex dtypes
        raises_as_torch(lambda: getattr(tp, name)(tp.tensor(values)), lambda: getattr(torch, name)(
            torch.tensor(values)))
    x, t = pair(np.ones((2, 3)))
    raises_as_torch(lambda: getattr(tp, name)(x, 2), lambda: getattr(torch, name)(t, 2), same_words=False)
    for call in (lambda f, v: f(v, 1, unbiased=False, correction=0), lambda f, v: f(v, unbiased=1),
                 lambda f, v: f(v, correction="a"), lambda f, v: f(v, dim=1.5), lambda f, v: f(2.0)):
        raises_as_torch(lambda: call(getattr(tp, name), x), lambda: call(getattr(torch, name), t), same_words=False)


def test_var_and_std_record_torchs_nodes():
    x, t = pair(np.ones((2, 3)), requires_grad=True)
    for name in ("var", "std"):
        for kwargs in ({}, {"dim": 1}):
            assert getattr(tp, name)(x, **kwargs).grad_fn.name() == \
                type(getattr(torch, name)(t, **kwargs).grad_fn).__name__


# ----- in place: sin_ and unsqueeze_ ----------------------------------------------------------------------------------

def test_sin_in_place_keeps_the_tensor_counts_a_version_and_differentiates_as_torch():
    for m in (tp, torch):
        x = m.tensor([0.5, -1.0, 2.0], dtype=m.float64, requires_grad=True)
        y = x * 2.0
        version = y._version
        assert y.sin_() is y and m.sin_(y) is y
        assert y._version == version + 2
        assert type(y.grad_fn).__name__ == "SinBackward0" or y.grad_fn.name() == "SinBackward0"
        (y * m.tensor([1.0, 2.0, 3.0], dtype=m.float64)).sum().backward()
        if m is tp:
            ours = (y, x.grad)
        else:
            assert_same(ours[0], y)
            assert_close_to_torch(ours[1].data, x.grad.numpy())


def test_sin_in_place_of_a_view_moves_its_base_as_torch():
    results = []
    for m in (tp, torch):
        w = m.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=m.float64, requires_grad=True)
        base = w * 1.5
        row = base[0]
        row.sin_()
        (base * m.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=m.float64)).sum().backward()
        results.append((base.detach().numpy() if m is torch else base.data, w.grad.numpy() if m is torch else
                        w.grad.data))
    for ours, theirs in zip(*results):
        assert_close_to_torch(ours, theirs)


@pytest.mark.parametrize("call, same_words", [
    (lambda m: m.tensor([1.0, 2.0], requires_grad=True).sin_(), "after the op"),  # a leaf that requires grad
    (lambda m: m.sin_(m.tensor([1.0, 2.0], requires_grad=True)), "after the op"),
    (lambda m: m.tensor([1, 2]).sin_(), True),  # result type Float can't be cast to the desired output type Long
    (lambda m: m.zeros(1).expand(3).sin_(), "after the op"),  # more than one element of the written-to tensor ...
    (lambda m: m.sin_(2.0), True),  # sin_(): argument 'input' (position 1) must be Tensor, not float
])
def test_sin_in_place_refuses_as_torch(call, same_words):
    raises_as_torch(lambda: call(tp), lambda: call(torch), same_words)


def test_sin_in_place_refuses_a_leaf_that_requires_grad_but_not_under_no_grad():
    for m in (tp, torch):
        x = m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            x.sin_()
        with m.no_grad():
            x.sin_()
        assert x.requires_grad and x.is_leaf and x._version == 1
    np.testing.assert_allclose(x.detach().numpy(), np.sin([1.0, 2.0]))


def test_unsqueeze_in_place_changes_the_shape_of_the_tensor_itself_as_torch():
    for dim in (0, 1, -1, -2):
        x, t = pair([1.0, 2.0])
        assert x.unsqueeze_(dim) is x and t.unsqueeze_(dim) is t
        assert_same(x, t)
        assert x._version == t._version == 1
    x, t = pair(np.arange(6.0).reshape(2, 3))
    view, view_t = x.view(6), t.view(6)
    x.unsqueeze_(0)
    t.unsqueeze_(0)
    assert_same(x, t)
    assert_same(view, view_t)  # a view made before keeps its shape
    x += 1
    t += 1
    assert_same(view, view_t)  # and its memory


def test_unsqueeze_in_place_of_a_non_leaf_is_recorded_as_torch():
    results = []
    for m in (tp, torch):
        x = m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True)
        y = x * 2
        y.unsqueeze_(1)
        name = y.grad_fn.name() if m is tp else type(y.grad_fn).__name__
        (y * m.tensor([[1.0], [3.0]], dtype=m.float64)).sum().backward()
        results.append((tuple(y.shape), name, y._version, np.array(x.grad.tolist())))
    assert results[0][:3] == results[1][:3]
    assert results[1][:2] == ((2, 1), "UnsqueezeBackward1")
    np.testing.assert_array_equal(results[0][3], results[1][3])


def test_unsqueeze_in_place_of_a_view_keeps_it_a_view_of_its_base_as_torch():
    results = []
    for m in (tp, torch):
        w = m.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=m.float64, requires_grad=True)
        base = w * 1.0
        row = base[0]
        row.unsqueeze_(0)
        row.mul_(3.0)  # through the reshaped view: its base changes too
        (base * m.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=m.float64)).sum().backward()
        results.append((tuple(row.shape), np.array(base.tolist()), np.array(w.grad.tolist())))
    assert results[0][0] == results[1][0]
    for ours, theirs in zip(results[0][1:], results[1][1:]):
        np.testing.assert_array_equal(ours, theirs)


def test_a_view_made_before_unsqueeze_in_place_is_refused_where_torch_keeps_its_strides():
    # torch's view keeps its own strides and its gradient reaches the base; the package remakes a view from its base
    # (step 37), which has another shape now: it says so instead of remaking a wrong view
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v = y[1:]
    y.unsqueeze_(0)
    (v * torch.tensor([10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 10.0, 100.0]
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    v = y[1:]
    y.unsqueeze_(0)
    with pytest.raises(RuntimeError, match=r"a view of a tensor whose shape has since changed in place \(unsqueeze_\)"):
        (v * tp.tensor([10.0, 100.0])).sum().backward()
    w = y[0, 1:]  # a view made after the change is remade from the new shape
    (w * tp.tensor([10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 10.0, 100.0]


def test_unsqueeze_in_place_refuses_as_torch():
    raises_as_torch(lambda: tp.tensor([1.0], requires_grad=True).unsqueeze_(0),
                    lambda: torch.tensor([1.0], requires_grad=True).unsqueeze_(0), same_words=False)
    raises_as_torch(lambda: tp.tensor([1.0]).unsqueeze_(3), lambda: torch.tensor([1.0]).unsqueeze_(3),
                    same_words=False)  # IndexError
    for m in (tp, torch):  # under no_grad a leaf may change its shape, and stays a leaf
        x = m.tensor([1.0, 2.0], requires_grad=True)
        with m.no_grad():
            x.unsqueeze_(0)
        assert tuple(x.shape) == (1, 2) and x.requires_grad and x.is_leaf


# ----- methods: mul, view_as, movedim, type ---------------------------------------------------------------------------

@pytest.mark.parametrize("other", [2.5, 3, np.array([1.0, -2.0, 0.5])])
def test_the_mul_method_equals_torchs(other):
    def fn(m, x):
        return x.mul(m.tensor(other) if isinstance(other, np.ndarray) else other)
    assert_grads_equal_torch(fn, [1.0, 2.0, 3.0])
    x, t = pair([1, 2, 3])
    assert_same(x.mul(2.5), t.mul(2.5))
    assert_same(x.mul(other=2), t.mul(other=2))


def test_view_as_shares_memory_and_refuses_as_torch():
    x, t = pair(np.arange(6.0))
    v, vt = x.view_as(tp.zeros(2, 3, dtype=tp.int64)), t.view_as(torch.zeros(2, 3, dtype=torch.int64))
    assert_same(v, vt)
    v[0, 0] = 9.0
    vt[0, 0] = 9.0
    assert_same(x, t)
    with pytest.raises(RuntimeError, match=r"shape '\[4\]' is invalid for input of size 6"):
        t.view_as(torch.zeros(4))
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(6,\) of size 6 into \(4,\)"):  # (the package's
        x.view_as(tp.zeros(4))  # type for shapes, as its view's)
    raises_as_torch(lambda: tp.zeros(2, 3).t().view_as(x), lambda: torch.zeros(2, 3).t().view_as(t))
    for other in (np.zeros((2, 3)), (2, 3)):
        raises_as_torch(lambda: x.view_as(other), lambda: t.view_as(other))
    assert_grads_equal_torch(lambda m, a: a.view_as(m.zeros(3, 2)) ** 2, np.arange(6.0) - 2)


MOVES = [(0, 2), (2, 0), (-1, 0), ((0, 1), (2, 0)), ([0, 1], [2, 0]), ((0, 1, 2), (2, 0, 1)), ((), ()), (1, 1),
         ((0, -1), (-1, 0))]


@pytest.mark.parametrize("source, destination", MOVES)
def test_movedim_is_a_view_with_torchs_layout_and_gradient(source, destination):
    x, t = pair(np.arange(24.0).reshape(2, 3, 4))
    for ours, theirs in ((tp.movedim(x, source, destination), torch.movedim(t, source, destination)),
                         (x.movedim(source, destination), t.movedim(source, destination)),
                         (tp.moveaxis(x, source, destination), torch.moveaxis(t, source, destination)),
                         (x.moveaxis(source=source, destination=destination), t.moveaxis(source, destination))):
        assert_same(ours, theirs)
        assert np.shares_memory(ours.data, x.data) and ours._base is x
    assert_grads_equal_torch(lambda m, a: m.movedim(a, source, destination) ** 3, np.arange(24.0).reshape(2, 3, 4) / 7)
    x, t = pair(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert tp.movedim(x, 0, 1).grad_fn.name() == type(torch.movedim(t, 0, 1).grad_fn).__name__


def test_movedim_of_a_0d_tensor_equals_torchs():
    x, t = pair(1.5)
    for source, destination in ((0, 0), (0, -1), ((), ())):
        assert_same(tp.movedim(x, source, destination), torch.movedim(t, source, destination))


@pytest.mark.parametrize("source, destination, words", [
    ((0, 1), (2,), True), ((0, 0), (1, 2), True), ((0, 1), (2, 2), True), ((0, -3), (1, 2), True),
    (3, 0, False), (0, -4, False), (0.5, 1, False),
])
def test_movedim_refuses_as_torch(source, destination, words):
    raises_as_torch(lambda: tp.movedim(tp.zeros(2, 3, 4), source, destination),
                    lambda: torch.movedim(torch.zeros(2, 3, 4), source, destination), same_words=words)


TYPE_DTYPES = ["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool", "complex64",
               "complex128"]


@pytest.mark.parametrize("dtype", TYPE_DTYPES)
def test_type_without_an_argument_is_torchs_legacy_name(dtype):
    x, t = pair(np.zeros(2), getattr(np, dtype) if dtype != "bool" else np.bool_)
    assert x.type() == t.type()


@pytest.mark.parametrize("target", ["float64", "int64", "torch.DoubleTensor", "torch.IntTensor", "torch.FloatTensor",
                                    "torch.BoolTensor", "torch.HalfTensor"])
def test_type_with_a_dtype_or_a_name_casts_as_torch(target):
    x, t = pair([0.5, -1.5, 2.0], requires_grad=True)
    ours = x.type(target if target.startswith("torch.") else getattr(tp, target))
    theirs = t.type(target if target.startswith("torch.") else getattr(torch, target))
    assert_same(ours, theirs)
    assert ours.requires_grad == theirs.requires_grad
    assert (ours.grad_fn is None) == (theirs.grad_fn is None)
    assert x.type(tp.float64) is x and t.type(torch.float64) is t
    assert x.type(dtype=tp.float64).dtype == tp.float64


def test_type_refuses_a_name_torch_does_not_know():
    for name in ("float64", "torch.Float", "DoubleTensor"):
        raises_as_torch(lambda: tp.zeros(2).type(name), lambda: torch.zeros(2).type(name))


def test_type_gives_the_gradient_back_through_a_floating_cast():
    assert_grads_equal_torch(lambda m, x: x.type(m.float32).type("torch.DoubleTensor") ** 2, [0.5, 1.25])


# ----- out= -----------------------------------------------------------------------------------------------------------

def test_the_census_tutorials_out_calls_run_as_in_torch():
    """The calls as the tutorial writes them, `import tinypytorch as torch`: out= written and returned."""
    results = []
    for m in (tp, torch):
        m.manual_seed(0)
        a, b = m.tensor([[1.0, 2.0], [3.0, 4.0]]), m.tensor([[0.5, -1.0], [2.0, 0.0]])
        c, r, z = m.zeros(0), m.zeros(2, 2), m.zeros(2, 2)
        assert m.rand(2, 2, out=c) is c
        assert tuple(c.shape) == (2, 2) and str(c.dtype) == "torch.float32"
        assert all(0 <= v < 1 for row in c.tolist() for v in row)
        assert m.add(a, a, out=r) is r and m.mul(a, a, out=z) is z and m.matmul(a, b, out=c) is c
        results.append([np.array(v.tolist()) for v in (r, z, c)])
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)


OUT_CALLS = {
    "add": (lambda m, a, b, **kw: m.add(a, b, **kw)),
    "add, alpha": (lambda m, a, b, **kw: m.add(a, b, alpha=2.5, **kw)),
    "sub": (lambda m, a, b, **kw: m.sub(a, b, **kw)),
    "sub, alpha": (lambda m, a, b, **kw: m.sub(a, b, alpha=-3, **kw)),
    "mul": (lambda m, a, b, **kw: m.mul(a, b, **kw)),
    "div": (lambda m, a, b, **kw: m.div(a, b, **kw)),
    "matmul": (lambda m, a, b, **kw: m.matmul(a, b.T if b.ndim == 2 else b, **kw)),
    "eq": (lambda m, a, b, **kw: m.eq(a, b, **kw)),
}


@pytest.mark.parametrize("name", list(OUT_CALLS))
@pytest.mark.parametrize("out_shape", [(0,), (2, 3), (5,)])
def test_out_is_written_resized_and_returned_as_torch(name, out_shape):
    call = OUT_CALLS[name]
    a, b = np.arange(6.0).reshape(2, 3) - 2, np.arange(6.0).reshape(2, 3) / 4 + 1
    (x, t), (y, u) = pair(a), pair(b)
    expected_shape = tuple(call(torch, t, u).shape)
    out_dtype = np.bool_ if name == "eq" else np.float64
    out, out_t = pair(np.zeros(out_shape), out_dtype)
    with warnings.catch_warnings(record=True) as caught_t:
        warnings.simplefilter("always")
        returned_t = call(torch, t, u, out=out_t)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = call(tp, x, y, out=out)
    assert returned is out and returned_t is out_t
    assert_same(out, out_t)
    assert tuple(out.shape) == expected_shape
    resized = [str(w.message).split(" (Triggered")[0] for w in caught_t if "resized" in str(w.message)]
    assert [str(w.message) for w in caught if "resized" in str(w.message)] == resized
    assert bool(resized) == (out_shape not in ((0,), expected_shape))
    assert out._version == out_t._version


@pytest.mark.parametrize("out_dtype", ["float64", "float16", "complex64"])
def test_out_keeps_its_dtype_where_the_result_casts_into_it_as_torch(out_dtype):
    (x, t), (y, u) = pair(np.float32([1.5, 2.0])), pair(np.float32([0.25, 3.0]))
    for name in ("add", "mul", "div", "sub"):
        out, out_t = pair(np.zeros(2), getattr(np, out_dtype))
        getattr(tp, name)(x, y, out=out)
        getattr(torch, name)(t, u, out=out_t)
        assert_same(out, out_t, name)


@pytest.mark.parametrize("call", [
    lambda m: m.add(m.ones(2), m.ones(2), out=m.zeros(2, dtype=m.int64)),  # result type Float can't be cast ...
    lambda m: m.mul(m.tensor([1, 2]), m.tensor([1, 2]), out=m.zeros(2, dtype=m.bool)),
    lambda m: m.add(m.ones(2, requires_grad=True), m.ones(2), out=m.zeros(2)),  # functions with out=... arguments
    lambda m: m.mul(m.ones(2), m.ones(2), out=m.zeros(2, requires_grad=True)),
    lambda m: m.matmul(m.ones(2, 3, requires_grad=True), m.ones(3, 4), out=m.zeros(0)),
    lambda m: m.matmul(m.ones(2, 3), m.ones(3, 4), out=m.zeros(2, 4, dtype=m.float64)),  # Expected out tensor to ...
    lambda m: m.add(m.ones(2), m.ones(2), out=m.zeros(1).expand(2)),  # more than one element of the written-to ...
    lambda m: m.add(m.tensor([1]), 2, alpha=0.5),  # For integral input tensors, argument alpha must not be a ...
    lambda m: m.add(m.ones(1), m.ones(1), alpha=True),  # Boolean alpha only supported for Boolean results.
    lambda m: m.rand(2, 2, out=m.zeros(2, 2, requires_grad=True)),  # aten::rand(): functions with out=...
    lambda m: m.rand(2, 2, out=m.zeros(2, 2), dtype=m.float64),  # dtype Double does not match dtype of out ...
    lambda m: m.rand(2, 2, out=m.zeros(2, 2, dtype=m.int64)),  # "check_uniform_bounds" not implemented for 'Long'
    lambda m: m.randn(2, out=m.zeros(2, dtype=m.int64)),  # "normal_kernel_cpu" not implemented for 'Long'
])
def test_out_refuses_as_torch_with_its_words(call):
    raises_as_torch(lambda: call(tp), lambda: call(torch), "after the op")


def test_out_from_numpy_is_written_in_place_and_never_resized_as_torch():
    for m in (tp, torch):
        shared = np.zeros(3, dtype=np.float32)
        m.add(m.ones(3), m.ones(3), out=m.from_numpy(shared))
        assert shared.tolist() == [2.0, 2.0, 2.0]  # the caller's array holds the result
    raises_as_torch(lambda: tp.add(tp.ones(3), tp.ones(3), out=tp.from_numpy(np.zeros(2, dtype=np.float32))),
                    lambda: torch.add(torch.ones(3), torch.ones(3), out=torch.from_numpy(np.zeros(2, dtype=np.float32))))


def test_out_that_overlaps_an_input_in_part_is_refused_and_out_that_is_an_input_is_fine_as_in_torch():
    for m in (tp, torch):
        x = m.tensor([1.0, 2.0, 3.0])
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer"):
            m.add(x[:2], x[:2], out=x[1:])
        assert m.add(x, x, out=x) is x
        assert x.tolist() == [2.0, 4.0, 6.0]


def test_out_into_an_inference_tensor_outside_inference_mode_is_refused_as_torch():
    with tp.inference_mode():
        out = tp.zeros(2)
    with torch.inference_mode():
        out_t = torch.zeros(2)
    raises_as_torch(lambda: tp.add(tp.ones(2), tp.ones(2), out=out), lambda: torch.add(torch.ones(2), torch.ones(2),
                                                                                         out=out_t))


def test_out_under_no_grad_may_require_grad_as_in_torch():
    for m in (tp, torch):
        a, out = m.ones(2, requires_grad=True), m.zeros(2, requires_grad=True)
        with m.no_grad():
            assert m.add(a, a, out=out) is out
        assert out.tolist() == [2.0, 2.0] and out.requires_grad and out.is_leaf


def test_rand_and_randn_with_out_draw_in_outs_dtype_and_may_make_it_require_grad_as_torch():
    for m in (tp, torch):
        c = m.zeros(5, dtype=m.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (resized: tested above)
            assert m.rand(2, 2, out=c) is c
        assert tuple(c.shape) == (2, 2) and str(c.dtype) == "torch.float64" and c._version == 1
        d = m.zeros(3)
        assert m.randn(3, out=d, requires_grad=True) is d and d.requires_grad and str(d.dtype) == "torch.float32"
        assert m.rand(2, out=m.zeros(0, dtype=m.float64), dtype=m.float64).dtype == m.float64
    tp.manual_seed(3)
    drawn = tp.rand(2, 2).data
    tp.manual_seed(3)
    np.testing.assert_array_equal(tp.rand(2, 2, out=tp.zeros(0)).data, drawn)  # the same numbers as without out


def test_a_view_that_out_would_resize_is_refused_by_the_package():
    base = tp.zeros(4)
    with pytest.raises(RuntimeError, match=r"add: out= of shape \(1,\) would have to be resized to \(2,\), but it "
                                           r"shares its memory"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tp.add(tp.ones(2), tp.ones(2), out=base[:1])
    assert tp.add(tp.ones(2), tp.ones(2), out=base[1:3]) is not None  # a view of the right shape is written
    assert base.tolist() == [0.0, 2.0, 2.0, 0.0]


@given(arrays(np.float64, SHAPES, elements=ELEMENTS), st.data())
def test_add_and_sub_with_alpha_equal_torchs_values_and_gradients(a, data):
    b = data.draw(arrays(np.float64, a.shape, elements=ELEMENTS))
    alpha = data.draw(st.sampled_from([1, 2, -0.5, 0, 1.0]))
    for name in ("add", "sub"):
        x, t = pair(a, requires_grad=True)
        y, u = pair(b, requires_grad=True)
        ours, theirs = getattr(tp, name)(x, y, alpha=alpha), getattr(torch, name)(t, u, alpha=alpha)
        assert_same(ours, theirs, name)
        ours.sum().backward()
        theirs.sum().backward()
        assert_close_to_torch(y.grad.data, u.grad.numpy())
        assert_close_to_torch(x.grad.data, t.grad.numpy())


# ----- cat(dim=) ------------------------------------------------------------------------------------------------------

def test_cat_takes_pytorchs_dim_and_numpys_axis_and_promotes_as_torch():
    (x, t), (y, u) = pair(np.ones((2, 3))), pair(np.zeros((2, 2)))
    for ours, theirs in ((tp.cat([x, y], dim=1), torch.cat([t, u], dim=1)), (tp.cat([x, y], 1), torch.cat([t, u], 1)),
                         (tp.cat([x, y], axis=-1), torch.cat([t, u], axis=-1)),
                         (tp.cat((x, x)), torch.cat((t, t)))):
        assert_same(ours, theirs)
    for a, b in (("int64", "float32"), ("float32", "float64"), ("bool", "int32"), ("uint8", "int8")):
        (x, t), (y, u) = pair(np.ones((1, 2)), getattr(np, a if a != "bool" else "bool_")), pair(
            np.ones((2, 2)), getattr(np, b))
        assert_same(tp.cat([x, y]), torch.cat([t, u]), f"{a} with {b}")
    (x, t), (y, u), (z, v) = pair(np.ones((1, 2)), np.float32), pair(np.ones((1, 2)), np.int64), pair(np.ones((1, 2)),
                                                                                                  np.float32)
    assert_same(tp.cat([x, y, z]), torch.cat([t, u, v]), "a middle input of another dtype")  # float32, not float64
    with pytest.raises(TypeError, match="concatenate: got both dim and axis"):
        tp.cat([x, y], dim=0, axis=0)
    with pytest.raises(TypeError):
        torch.cat([t, u], dim=0, axis=0)


def test_cat_of_mixed_dtypes_sends_each_input_its_gradient_in_its_dtype():
    def fn(m, a):
        return m.cat([a.float(), a * 2], dim=0) ** 2
    (y, yt), (g, gt) = grads(fn, [[0.5, -1.0]])
    assert_same(y, yt)
    assert_close_to_torch(g.data, gt.numpy())


# ----- on each backend ------------------------------------------------------------------------------------------------

BACKEND_CASES = {  # name: fn(m, v) of a float64 (2, 3) tensor v that requires grad, differentiable where torch's is
    "eq": lambda m, v: m.eq(v, 1.5), "ge method": lambda m, v: v.ge(0), "all dim 1": lambda m, v: m.all(v, 1),
    "any keepdim": lambda m, v: m.any(v, 0, keepdim=True), "asin": lambda m, v: m.asin(v / 4),
    "ceil times v": lambda m, v: m.ceil(v) * v, "floor times v": lambda m, v: m.floor(v) * v,
    "prod, a zero": lambda m, v: m.prod(v), "prod dim 1": lambda m, v: m.prod(v, 1),
    "var dim 1": lambda m, v: m.var(v, 1), "std": lambda m, v: m.std(v, correction=0),
    "movedim": lambda m, v: m.movedim(v, 0, 1) ** 2, "cat, promoted": lambda m, v: m.cat([v, v.float()], dim=1),
    "bitwise_xor": lambda m, v: m.bitwise_xor(v.long(), 6) ^ v.bool().long(),
    "sin_ of a non-leaf": lambda m, v: (v * 1.0).sin_(),
    "unsqueeze_ of a non-leaf": lambda m, v: (v * 2.0).unsqueeze_(0),
    "mul method": lambda m, v: v.mul(v),
}


@pytest.mark.parametrize("name", list(BACKEND_CASES))
def test_the_names_on_each_backend_give_torchs_values_and_gradients_there(name, xp):
    """On NumPy, the strict stand-in for CuPy (so the GPU paths run in CI) and CuPy on a GPU: torch's values and
    gradients (computed on the CPU), the results on the backend they were computed on."""
    a = np.array([[1.5, 0.0, -2.0], [0.5, 3.0, 1.0]])
    x, t = Variable(xp.asarray(a)), torch.tensor(a, requires_grad=True)
    y, yt = BACKEND_CASES[name](tp, x), BACKEND_CASES[name](torch, t)
    assert tp.cuda.get_array_module(y.data) is xp
    assert str(y.dtype) == str(yt.dtype)
    assert_close_to_torch(tp.cuda.as_numpy(y.data), yt.detach().numpy(), name)
    if yt.requires_grad:
        w = np.random.default_rng(0).uniform(-1.0, 1.0, tuple(yt.shape))
        (y * Variable(xp.asarray(w), requires_grad=False)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        assert tp.cuda.get_array_module(x.grad.data) is xp
        assert_close_to_torch(tp.cuda.as_numpy(x.grad.data), t.grad.numpy(), name)


def test_out_and_the_python_bools_on_each_backend(xp):
    a = np.array([[1.5, 0.0], [0.5, 3.0]])
    x, out = Variable(xp.asarray(a), requires_grad=False), Variable(xp.zeros(0), requires_grad=False)
    t = torch.tensor(a)
    assert tp.matmul(x, x, out=out) is out and tp.cuda.get_array_module(out.data) is xp
    assert_close_to_torch(tp.cuda.as_numpy(out.data), (t @ t).numpy())
    assert tp.add(x, x, alpha=2, out=out) is out
    assert_close_to_torch(tp.cuda.as_numpy(out.data), torch.add(t, t, alpha=2).numpy())
    assert tp.allclose(x, x * (1 + 1e-9)) is True and tp.equal(x, x) is True and tp.equal(x, x * 2) is False
    assert x.type() == ("torch.DoubleTensor" if xp is np else "torch.cuda.DoubleTensor")
    on_the_cpu = x.type("torch.FloatTensor")  # a CPU type: moved to the CPU, as PyTorch's
    assert isinstance(on_the_cpu.data, np.ndarray) and on_the_cpu.dtype == tp.float32
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer"):
        tp.add(x[0], x[0], out=x.reshape(4)[1:3])


# ----- the names, exported --------------------------------------------------------------------------------------------

def test_the_names_are_exported_at_pytorchs_places():
    for name in ("allclose", "all", "any", "equal", "eq", "ne", "lt", "le", "gt", "ge", "asin", "ceil", "floor",
                 "bitwise_xor", "prod", "std", "var", "sin_", "movedim", "moveaxis", "add", "sub", "mul", "div",
                 "matmul", "rand", "randn", "cat"):
        assert callable(getattr(tp, name)) and name in tp.__all__, name
    for method in ("equal", "eq", "ne", "lt", "le", "gt", "ge", "allclose", "all", "any", "bitwise_xor",
                   "bitwise_xor_", "asin", "ceil", "floor", "prod", "std", "var", "sin_", "mul", "unsqueeze_",
                   "view_as", "movedim", "moveaxis", "type", "__xor__", "__rxor__", "__ixor__"):
        assert hasattr(tp.Tensor, method) and hasattr(torch.Tensor, method), method
