"""Step 29: element-wise functions on arrays, reshape, transpose and permute, against PyTorch (float64)."""
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import tinypytorch
import tinypytorch.functions as F
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import numerical_diff
from reference import floats

pytestmark = [pytest.mark.step29, pytest.mark.torch]
step = load_step(29)

values = floats(-2.0, 2.0)
shapes = array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)


def weighted_grads(f, data, weights_seed=0):
    """Grads of sum(f(x) * w) for random fixed w, in tinypytorch and in torch."""
    x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    y, yt = f(tinypytorch, x), f(torch, t)
    w = np.random.default_rng(weights_seed).uniform(-1.0, 1.0, tuple(yt.shape))
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    return y, yt, x, t


def assert_moved_exactly_as_in_torch(f, data):
    """f moves elements and multiplies them by a constant: its shape, values and the gradients of the
    weighted sum must equal torch's exactly."""
    y, yt, x, t = weighted_grads(f, data)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(x.grad, t.grad.numpy())


@st.composite
def reshapes(draw):
    """An array and a new shape with as many elements: its dims shuffled, 1s inserted, maybe one -1."""
    shape = draw(shapes)
    dims = draw(st.permutations(list(shape)))
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    if dims and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return draw(arrays(np.float64, shape, elements=values)), tuple(dims)


@st.composite
def permutations(draw):
    """An array and a permutation of its axes, some given as negative numbers."""
    data = draw(arrays(np.float64, shapes, elements=values))
    perm = draw(st.permutations(list(range(data.ndim))))
    perm = [a - data.ndim if draw(st.booleans()) else a for a in perm]
    return data, tuple(perm)


# ----- element-wise functions on arrays -------------------------------------------------

@given(arrays(np.float64, shapes, elements=values))
def test_element_wise_expressions_have_torchs_grads_for_any_shape(data):
    f = lambda m, x: m.tanh(x) * m.sin(x) - m.exp(x * 0.5) / (2 + m.cos(x)) + x**3  # noqa: E731
    y, yt, x, t = weighted_grads(f, data)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    assert x.grad.shape == data.shape
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


@given(arrays(np.float64, array_shapes(min_dims=1, max_dims=3), elements=values))
def test_backward_of_an_array_is_the_gradient_of_its_sum(data):
    x = Variable(data.copy())
    (tinypytorch.sin(x) * x).sum().backward()  # seeded with ones
    t = torch.tensor(data, requires_grad=True)
    (torch.sin(t) * t).sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


# ----- reshape ----------------------------------------------------------------------------

@given(reshapes())
def test_reshape_values_and_grads_equal_torch(case):
    data, shape = case
    assert_moved_exactly_as_in_torch(lambda m, v: v.reshape(shape) * 1.5, data)


@given(reshapes())
def test_reshape_function_and_method_forms_agree(case):
    data, shape = case
    x = Variable(data)
    expected = data.reshape(shape)
    for y in (tinypytorch.reshape(x, shape), x.reshape(shape), x.reshape(*shape), x.reshape(list(shape))):
        np.testing.assert_array_equal(y.data, expected)
        assert y.shape == expected.shape


def test_reshape_accepts_a_single_int():
    x = Variable(np.arange(6.0).reshape(2, 3))
    assert x.reshape(6).shape == (6,) and tinypytorch.reshape(x, 6).shape == (6,)


def test_reshape_to_the_same_shape_is_a_new_view_as_in_pytorch():
    t = torch.ones(2, 3, requires_grad=True)
    x = Variable(np.ones((2, 3)))
    for y, ty in [(x.reshape(2, 3), t.reshape(2, 3)), (tinypytorch.reshape(x, (2, 3)), torch.reshape(t, (2, 3)))]:
        assert (y is x, y.is_leaf, y._base is x) == (ty is t, ty.is_leaf, ty._base is t)
        assert y.grad_fn.name() == type(ty.grad_fn).__name__


def test_reshape_gradient_keeps_row_major_order():
    # the step's example: y = reshape(x, (6,)), L = sum(w * y), so x.grad = w laid out as x
    x = Variable(np.arange(6.0).reshape(2, 3))
    w = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    (x.reshape(6) * w).sum().backward()
    np.testing.assert_array_equal(x.grad, [[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])


@pytest.mark.parametrize("shape, new, message", [
    ((2, 3), (4,), "reshape: cannot reshape (2, 3) of size 6 into (4,)"),
    ((2, 3), (4, -1), "reshape: cannot reshape (2, 3) of size 6 into (4, -1)"),
    ((), (2,), "reshape: cannot reshape () of size 1 into (2,)"),
    ((6,), (-1, -1), "reshape: cannot reshape (6,) of size 6 into (-1, -1)"),
])
def test_reshape_to_another_size_raises_value_error_naming_both_shapes(shape, new, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        Variable(np.zeros(shape)).reshape(new)


@pytest.mark.parametrize("new", [(2.0, 3.0), ("2", 3), (None,)])
def test_reshape_to_a_shape_that_is_not_ints_raises_type_error(new):
    with pytest.raises(TypeError, match="^reshape: a shape is a tuple of ints, got"):
        Variable(np.zeros((2, 3))).reshape(new)


# ----- transpose and permute ------------------------------------------------------------------

@st.composite
def swaps(draw):
    """An array (0-d included) and two dims to swap, each in [-n, n - 1] (n = max(ndim, 1), as in torch)."""
    data = draw(arrays(np.float64, shapes, elements=values))
    n = max(data.ndim, 1)
    return data, draw(st.integers(-n, n - 1)), draw(st.integers(-n, n - 1))


@given(swaps())
def test_transpose_values_and_grads_equal_torch(case):
    data, dim0, dim1 = case
    assert_moved_exactly_as_in_torch(lambda m, v: v.transpose(dim0, dim1) * 2.0, data)


@given(swaps())
def test_transpose_function_and_method_forms_agree_with_numpys_swapaxes(case):
    data, dim0, dim1 = case
    x = Variable(data)
    expected = np.swapaxes(data, dim0, dim1) if data.ndim else data
    for y in (x.transpose(dim0, dim1), tinypytorch.transpose(x, dim0, dim1), F.transpose(data, dim0, dim1)):
        assert y.shape == expected.shape
        np.testing.assert_array_equal(y.data, expected)


@given(permutations())
def test_permute_values_and_grads_equal_torch(case):
    data, perm = case
    assert_moved_exactly_as_in_torch(lambda m, v: v.permute(perm) * 2.0, data)


@given(permutations())
def test_permute_function_and_method_forms_agree_with_torch(case):
    data, perm = case
    x = Variable(data)
    expected = torch.tensor(data).permute(perm).numpy()
    for y in (x.permute(*perm), x.permute(perm), x.permute(list(perm)), F.permute(x, perm)):
        np.testing.assert_array_equal(y.data, expected)


@given(arrays(np.float64, shapes, elements=values))
def test_T_reverses_the_dims_like_numpys_T_and_sends_back_the_transposed_gradient(data):
    x = Variable(data.copy())
    np.testing.assert_array_equal(x.T.data, data.T)
    w = np.random.default_rng(4).uniform(-1.0, 1.0, data.T.shape)
    (x.T * w).sum().backward()
    np.testing.assert_array_equal(x.grad, w.T)  # numpy's .T of a reversed array puts each entry back


def test_transpose_permute_and_T_record_one_transpose_node():
    x = Variable(np.zeros((2, 3, 4)))
    for y in (x.transpose(0, 2), x.permute(1, 2, 0), x.T):
        assert type(y.creator) is F.Transpose and y.creator.edges == ((x, 0),)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's, for .T of fewer than 2 dimensions
@pytest.mark.parametrize("shape, moves", [
    ((2, 3), lambda x: x.transpose(1, 1)), ((2, 3), lambda x: x.transpose(-1, 1)),
    ((2, 3), lambda x: x.permute(0, -1)), ((4,), lambda x: x.T), ((4,), lambda x: x.transpose(0, -1)),
    ((), lambda x: x.T), ((), lambda x: x.transpose(0, -1)), ((), lambda x: x.permute(())), ((4,), lambda x: x.t()),
])
def test_a_permutation_that_moves_nothing_is_a_new_view_as_in_pytorch(shape, moves):
    x, t = Variable(np.zeros(shape)), torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    y, ty = moves(x), moves(t)
    assert (y is x, y.is_leaf, y._base is x, y._version) == (ty is t, ty.is_leaf, ty._base is t, ty._version)
    assert y.grad_fn.name() == type(ty.grad_fn).__name__


def test_transpose_of_a_matrix_by_0_1_is_the_transpose_as_in_torch_not_numpys_identity():
    data = np.arange(6.0).reshape(2, 3)
    y = Variable(data).transpose(0, 1)
    np.testing.assert_array_equal(y.data, torch.tensor(data).transpose(0, 1).numpy())
    assert y.shape == (3, 2) and data.transpose(0, 1).shape == (2, 3)


def test_transpose_gradient_of_the_steps_example_is_w_transposed():
    x = Variable(np.arange(6.0).reshape(2, 3))
    w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    (F.transpose(x, 0, 1) * w).sum().backward()
    np.testing.assert_array_equal(x.grad, w.T)


@pytest.mark.parametrize("shape, dims", [((2, 3), (0, 2)), ((2, 3), (-3, 0)), ((4,), (1, 0)), ((), (0, 1)),
                                         ((), (-2, 0)), ((2, 3, 4), (1, -4))])
def test_transpose_with_a_dim_out_of_range_raises_index_error_like_torch(shape, dims):
    with pytest.raises(IndexError) as torch_error:
        torch.zeros(shape).transpose(*dims)
    # torch says "Dimension out of range (expected to be in range of [-2, 1], but got 2)"
    expected_range = re.search(r"expected to be in range of \[-?\d+, -?\d+\]", str(torch_error.value)).group()
    bad = next(d for d in dims if not -max(len(shape), 1) <= d < max(len(shape), 1))
    message = f"transpose: dim {bad} is out of range for a variable with {len(shape)} dimension(s) ({expected_range})"
    with pytest.raises(IndexError, match="^" + re.escape(message) + "$"):
        Variable(np.zeros(shape)).transpose(*dims)


@pytest.mark.parametrize("dims", [(0, 2), (-3, 0), (5, 1)])
def test_permute_with_a_dim_out_of_range_raises_index_error_like_torch(dims):
    with pytest.raises(IndexError):
        torch.zeros(2, 3).permute(*dims)
    with pytest.raises(IndexError, match=r"^permute: dim (2|-3|5) is out of range for a variable with 2 dimension"):
        Variable(np.zeros((2, 3))).permute(*dims)


@pytest.mark.parametrize("dims, problem", [((0, 0), "dim 0 is repeated"), ((1, -1), "dim -1 is repeated"),
                                           ((1, 0, 2), "need 2 dims, got 3"), ((0,), "need 2 dims, got 1"),
                                           ((), "need 2 dims, got 0")])
def test_permute_with_dims_that_are_not_a_permutation_raises_value_error(dims, problem):
    with pytest.raises(RuntimeError):  # torch refuses them too (a RuntimeError there)
        torch.zeros(2, 3).permute(dims)
    message = f"permute: dims {dims} are not a permutation of the dimensions of shape (2, 3): {problem}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        Variable(np.zeros((2, 3))).permute(dims)


@pytest.mark.parametrize("call", [lambda x: x.transpose(1.0, 0), lambda x: x.transpose(0, True),
                                  lambda x: x.transpose("0", 1), lambda x: x.permute(1.0, 0.0)])
def test_dims_that_are_not_ints_raise_type_error(call):
    with pytest.raises(TypeError, match=r"^(transpose|permute): a dim must be an int, got"):
        call(Variable(np.zeros((2, 3))))
    with pytest.raises(TypeError):
        call(torch.zeros(2, 3))


# ----- composites, accumulation and higher derivatives -------------------------------------

def test_a_variable_used_through_reshape_and_transpose_accumulates_both_paths():
    data = np.arange(1.0, 7.0).reshape(2, 3)
    x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    w = np.arange(6.0) - 2.5
    ((x.reshape(6) + x.T.reshape(6)) * w * x.reshape(6)).sum().backward()
    ((t.reshape(6) + t.T.reshape(6)) * torch.tensor(w) * t.reshape(6)).sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14)


def test_composite_gradient_matches_the_numerical_gradient():
    data = np.random.default_rng(1).uniform(-1.0, 1.0, (2, 3, 2))
    w = np.random.default_rng(2).uniform(-1.0, 1.0, (3, 4))

    def f(v):
        return tinypytorch.sin(v.permute(1, 0, 2).transpose(0, 2).reshape(3, 4)) * w

    x = Variable(data.copy())
    f(x).sum().backward()
    np.testing.assert_allclose(x.grad, numerical_diff(f, data), rtol=1e-7, atol=1e-9)


@given(permutations())
def test_second_derivative_through_transpose_and_reshape_equals_torch(case):
    data, perm = case
    w = np.random.default_rng(3).uniform(-1.0, 1.0, data.size)

    def f(m, v):
        return m.tanh(v.permute(perm).transpose(0, -1).reshape(-1)) ** 2 * (w if m is tinypytorch else torch.tensor(w))

    x = Variable(data.copy())
    f(tinypytorch, x).sum().backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    (gx * gx).sum().backward()  # d/dx of sum(grad^2): needs the second derivative
    t = torch.tensor(data, requires_grad=True)
    (gt,) = torch.autograd.grad(f(torch, t).sum(), t, create_graph=True)
    (gt * gt).sum().backward()
    np.testing.assert_allclose(gx.data, gt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-10, atol=1e-13)


# ----- the step's own examples -----------------------------------------------------------

@pytest.mark.parametrize("name", list(step.cases))
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_steps_check_cases_equal_torch_on_random_inputs(name, shape, seed):
    data = np.random.default_rng(seed).uniform(-2.0, 2.0, shape)
    y, yt, x, t = weighted_grads(step.cases[name], data, weights_seed=seed)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_the_steps_inverse_permutation_example():
    x = Variable(np.arange(24.0).reshape(2, 3, 4))
    y = x.permute(1, 2, 0)
    inverse = (2, 0, 1)  # worked out in the step: dim 0 of x is dim 2 of y, 1 -> 0, 2 -> 1
    assert y.shape == (3, 4, 2)
    np.testing.assert_array_equal(y.permute(inverse).data, x.data)
