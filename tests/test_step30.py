"""Step 30: sum, broadcast_to, sum_to and broadcasting in + - * /, against PyTorch (float64)."""
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, mutually_broadcastable_shapes

import tinypytorch
import tinypytorch.functions as F
from reference import compare_weighted_sum, floats
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import numerical_diff

pytestmark = [pytest.mark.step30, pytest.mark.torch]
step = load_step(30)

shapes = array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)
OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


@st.composite
def sums(draw):
    """An array, an axis argument (None, an int or a tuple, possibly negative) and keepdims."""
    data = draw(arrays(np.float64, shapes, elements=floats(-2.0, 2.0)))
    ndim = data.ndim
    if ndim == 0:
        return data, None, draw(st.booleans())
    axis_ints = st.integers(-ndim, ndim - 1)
    axis = draw(st.one_of(
        st.none(),
        axis_ints,
        st.lists(axis_ints, min_size=1, max_size=ndim, unique_by=lambda a: a % ndim).map(tuple),
    ))
    return data, axis, draw(st.booleans())


@st.composite
def broadcasts(draw):
    """A shape and a larger shape it broadcasts to: leading axes dropped, some lengths set to 1."""
    target = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    kept = draw(st.integers(0, len(target)))
    small = [1 if draw(st.booleans()) else n for n in target[len(target) - kept:]]
    return tuple(small), target


# ----- sum ----------------------------------------------------------------------------------

@given(sums())
def test_sum_values_and_grads_equal_torch(case):
    data, axis, keepdims = case
    compare_weighted_sum(lambda x: x.sum(axis=axis, keepdims=keepdims), lambda t: t.sum(dim=axis, keepdim=keepdims),
                         data)


@given(sums())
def test_sum_function_and_method_agree_with_numpy(case):
    data, axis, keepdims = case
    x = Variable(data)
    expected = np.sum(data, axis=axis, keepdims=keepdims)
    for y in (x.sum(axis, keepdims), F.sum(x, axis=axis, keepdims=keepdims), tinypytorch.sum(x, axis, keepdims)):
        assert y.shape == expected.shape
        np.testing.assert_allclose(y.data, expected, rtol=1e-15)


def test_sum_over_the_last_axis_of_a_square_matrix_copies_the_gradient_along_rows():
    # the silent failure the step warns about: broadcasting (3,) to (3, 3) would fill columns
    x, t = Variable(np.zeros((3, 3))), torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    g = np.array([1.0, 2.0, 3.0])
    (x.sum(axis=1) * g).sum().backward()
    (t.sum(dim=1) * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(x.grad, t.grad.numpy())
    np.testing.assert_array_equal(x.grad, [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 3.0, 3.0]])


def test_sum_of_the_steps_examples_copies_the_weights():
    x = Variable(np.arange(6.0).reshape(2, 3))
    x.sum(axis=1).backward(gradient=Variable(np.array([1.0, 2.0])))
    np.testing.assert_array_equal(x.grad, [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    x.cleargrad()
    (x.sum(axis=0) * np.array([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(x.grad, [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])


@pytest.mark.parametrize("axis, message", [
    (2, "sum: axis 2 is out of range for a variable with 2 dimension(s)"),
    (-3, "sum: axis -3 is out of range for a variable with 2 dimension(s)"),
    ((0, 5), "sum: axis 5 is out of range for a variable with 2 dimension(s)"),
    ((0, -2), "sum: repeated axis in (0, -2)"),
])
def test_sum_over_a_bad_axis_raises_value_error_naming_op_axis_and_ndim(axis, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        Variable(np.zeros((2, 3))).sum(axis=axis)


def test_sum_over_an_axis_of_a_0d_variable_raises_value_error():
    with pytest.raises(ValueError, match=re.escape("sum: axis 0 is out of range for a variable with 0 dimension(s)")):
        Variable(np.array(1.0)).sum(axis=0)


@pytest.mark.parametrize("axis", [1.0, "0", (0, 1.0), [None]])
def test_sum_with_an_axis_that_is_not_an_int_raises_type_error(axis):
    with pytest.raises(TypeError, match="^sum: axis must be an int or a tuple of ints, got"):
        Variable(np.zeros((2, 3))).sum(axis=axis)


def test_sum_accepts_numpy_integer_axes():
    x = Variable(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(x.sum(axis=np.int64(1)).data, [3.0, 12.0])


# ----- broadcast_to and sum_to -----------------------------------------------------------

@given(broadcasts(), st.integers(0, 2**32 - 1))
def test_broadcast_to_values_and_grads_equal_torch(case, seed):
    small, target = case
    data = np.random.default_rng(seed).uniform(-1.0, 1.0, small)
    compare_weighted_sum(lambda x: F.broadcast_to(x, target), lambda t: torch.broadcast_to(t, target), data, seed=seed)


@given(broadcasts(), st.integers(0, 2**32 - 1))
def test_sum_to_values_and_grads_equal_torch_sum_to_size(case, seed):
    small, target = case
    data = np.random.default_rng(seed).uniform(-1.0, 1.0, target)
    compare_weighted_sum(lambda x: F.sum_to(x, small), lambda t: t.sum_to_size(small), data, seed=seed)


@given(broadcasts(), st.integers(0, 2**32 - 1))
def test_sum_to_array_undoes_a_broadcast_like_summing_its_copies(case, seed):
    small, target = case
    big = np.random.default_rng(seed).uniform(-1.0, 1.0, target)
    # sum each copy's contribution by brute force: index of big -> index of the element it copies
    expected = np.zeros(small)
    lead = len(target) - len(small)
    for index in np.ndindex(target):
        source = tuple(0 if n == 1 else i for i, n in zip(index[lead:], small))
        expected[source] += big[index]
    np.testing.assert_allclose(F.sum_to_array(big, small), expected, rtol=1e-12, atol=1e-14)


def test_sum_to_array_worked_example_of_the_step():
    g = np.arange(24.0).reshape(4, 2, 3)
    # shape (2, 1) under (4, 2, 3): axis 0 was prepended, axis 2 stretched
    np.testing.assert_array_equal(F.sum_to_array(g, (2, 1)), [[sum(g[:, 0, :].ravel())], [sum(g[:, 1, :].ravel())]])


def test_broadcast_to_and_sum_to_of_the_same_shape_return_the_variable():
    x = Variable(np.ones((2, 3)))
    assert F.broadcast_to(x, (2, 3)) is x and F.sum_to(x, (2, 3)) is x


@pytest.mark.parametrize("shape, target", [((2, 3), (3,)), ((2, 3), (3, 3)), ((3,), (3, 2)), ((2,), ())])
def test_broadcast_to_an_incompatible_shape_raises_value_error_naming_both(shape, target):
    message = f"broadcast_to: cannot broadcast shape {shape} to {target}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        F.broadcast_to(Variable(np.zeros(shape)), target)


@pytest.mark.parametrize("shape, target", [((2, 3), (2,)), ((2, 3), (4, 2, 3)), ((3,), (2,))])
def test_sum_to_a_shape_that_was_not_broadcast_raises_value_error(shape, target):
    message = f"sum_to: shape {shape} is not a broadcast of {target}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        F.sum_to(Variable(np.zeros(shape)), target)


# ----- broadcasting in + - * / ------------------------------------------------------------

@pytest.mark.parametrize("op", OPERATORS)
@given(pair=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3), seed=st.integers(0, 2**32 - 1))
def test_binary_operators_broadcast_with_torchs_values_and_grads(op, pair, seed):
    rng = np.random.default_rng(seed)
    a, b = (np.asarray(rng.uniform(0.5, 2.0, s) * rng.choice([-1.0, 1.0], s)) for s in pair.input_shapes)
    compare_weighted_sum(OPERATORS[op], OPERATORS[op], a, b, seed=seed, rtol=1e-11)


@given(pair=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
def test_broadcasting_with_an_ndarray_or_a_number_operand(pair):
    shape0, shape1 = pair.input_shapes
    a, b = np.full(shape0, 1.5), np.full(shape1, 0.5)
    x = Variable(a.copy())
    y = b / x - x * b + 2.0
    y.sum().backward()
    t = torch.tensor(a, requires_grad=True)
    (torch.tensor(b) / t - t * torch.tensor(b) + 2.0).sum().backward()
    assert x.grad.shape == shape0
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("op, name", [("+", "add"), ("-", "sub"), ("*", "mul"), ("/", "div")])
@pytest.mark.parametrize("shape0, shape1", [((2,), (3,)), ((2, 3), (3, 2)), ((4, 3), (2, 1, 2))])
def test_operators_on_shapes_that_do_not_broadcast_raise_value_error_naming_both(op, name, shape0, shape1):
    message = f"{name}: shapes {shape0} and {shape1} do not broadcast"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        OPERATORS[op](Variable(np.ones(shape0)), Variable(np.ones(shape1)))


def test_a_bias_gradient_is_the_column_sum_and_keeps_the_bias_shape():
    for b_shape in [(3,), (1, 3)]:
        x, b = Variable(np.zeros((4, 3))), Variable(np.zeros(b_shape))
        w = np.arange(12.0).reshape(4, 3)
        ((x + b) * w).sum().backward()
        assert b.grad.shape == b_shape
        np.testing.assert_array_equal(np.asarray(b.grad).ravel(), [18.0, 22.0, 26.0])


def test_broadcast_composite_matches_the_numerical_gradient():
    rng = np.random.default_rng(5)
    b, c = rng.uniform(0.5, 1.5, (3, 1)), rng.uniform(0.5, 1.5, (4,))

    def f(x):
        return tinypytorch.tanh((x * b + c) / (x + 2.0)).sum(axis=0, keepdims=True) * x

    data = rng.uniform(-1.0, 1.0, (1, 4))
    x = Variable(data.copy())
    f(x).sum().backward()
    np.testing.assert_allclose(x.grad, numerical_diff(f, data), rtol=1e-7, atol=1e-9)


@given(pair=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3), seed=st.integers(0, 2**32 - 1))
def test_second_derivatives_through_broadcasting_equal_torch(pair, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(0.5, 1.5, s) for s in pair.input_shapes)
    x, y = Variable(a.copy()), Variable(b.copy())
    ((x * y + x / y) ** 3).sum(axis=None).backward(create_graph=True)
    gx, gy = x.grad, y.grad
    x.cleargrad()
    y.cleargrad()
    (gx.sum() * gy.sum()).backward()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    gtx, gty = torch.autograd.grad(((tx * ty + tx / ty) ** 3).sum(), (tx, ty), create_graph=True)
    (gtx.sum() * gty.sum()).backward()
    for ours, theirs in [(gx, gtx), (gy, gty), (x.grad, tx.grad), (y.grad, ty.grad)]:
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10)


# ----- the step's own examples -----------------------------------------------------------

@pytest.mark.parametrize("shapes_", step.pairs, ids=str)
@pytest.mark.parametrize("op", step.operators)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_steps_shape_pairs_equal_torch_on_random_inputs(shapes_, op, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(0.5, 2.0, s) for s in shapes_)
    compare_weighted_sum(step.operators[op], OPERATORS[op], a, b, seed=seed)


def test_the_steps_second_derivative_example_equals_the_formula():
    xd, bd = np.array([[0.5, 1.0], [1.5, -2.0], [0.0, 0.25]]), np.array([1.0, -1.0])
    x, b = Variable(xd), Variable(bd.copy())
    ((x + b) ** 3).sum().backward(create_graph=True)
    gb = b.grad
    b.cleargrad()
    gb.sum().backward()
    np.testing.assert_allclose(gb.data, (3 * (xd + bd) ** 2).sum(axis=0), rtol=1e-15)
    np.testing.assert_allclose(b.grad, (6 * (xd + bd)).sum(axis=0), rtol=1e-15)
