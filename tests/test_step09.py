import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step09, pytest.mark.torch]
step = load_step(9)

RTOL = 1e-14  # same multiplications as torch; only exp may differ in the last bit
OPS = {"square": (step.square, torch.square), "exp": (step.exp, torch.exp)}
float_arrays = arrays(np.float64, array_shapes(min_dims=0, max_dims=3), elements=floats(-1.5, 1.5))


def composite(x):
    return step.square(step.exp(step.square(x)))


@given(float_arrays)
def test_implicit_seed_gives_torchs_gradient(array):
    x = step.Variable(array)
    y = composite(x)
    y.backward()
    t = torch.tensor(array, requires_grad=True)
    ty = torch.square(torch.exp(torch.square(t)))
    if ty.ndim == 0:
        ty.backward()  # torch seeds implicitly only for one-element outputs
    else:
        ty.backward(torch.ones_like(ty))
    np.testing.assert_array_equal(y.grad, np.ones_like(array))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=RTOL, atol=0)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=RTOL, atol=0)


@given(float_arrays, floats(-10.0, 10.0))
def test_an_explicit_seed_is_respected(array, seed):
    x = step.Variable(array)
    y = composite(x)
    y.grad = np.full_like(array, seed)
    y.backward()
    t = torch.tensor(array, requires_grad=True)
    torch.square(torch.exp(torch.square(t))).backward(torch.full_like(t, seed))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=RTOL, atol=0)


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), floats(-1.0, 1.0))
def test_every_output_of_a_zero_dim_chain_is_an_ndarray_and_equals_torch(names, value):
    x = step.Variable(np.array(value))
    t = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    y, ty = x, t
    for name in names:
        ours, theirs = OPS[name]
        y, ty = ours(y), theirs(ty)
        assert type(y.data) is np.ndarray and y.data.ndim == 0
    y.backward()
    ty.backward()
    # the largest exp argument, exp(exp(1)) ~ 15, amplifies an ulp-level difference ~15 times
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-13, atol=0)


def test_the_steps_example_at_one_half():
    x = step.Variable(np.array(0.5))
    y = composite(x)
    y.backward()
    assert type(y.data) is np.ndarray
    np.testing.assert_allclose(y.data, np.e ** 0.5, rtol=RTOL)  # e^(2x^2)
    np.testing.assert_allclose(x.grad, 2 * np.e ** 0.5, rtol=RTOL)  # 4x e^(2x^2)


@pytest.mark.parametrize("bad, name", [(1.0, "float"), (1, "int"), ([1.0, 2.0], "list"), ((1.0,), "tuple"),
                                       ("1.0", "str"), (np.float64(1.0), "float64"), (torch.ones(2), "Tensor")])
def test_variable_rejects_non_arrays_naming_the_type(bad, name):
    with pytest.raises(TypeError, match=f"numpy.ndarray \\(or None\\), got {name}$"):
        step.Variable(bad)


def test_variable_accepts_none_and_arrays_of_any_dimension():
    assert step.Variable(None).data is None
    for array in (np.array(1.0), np.array([1.0]), np.ones((2, 3))):
        assert step.Variable(array).data is array


@pytest.mark.parametrize("scalar", [4.0, 4, np.float64(4.0), np.float32(4.0), np.int64(4), True])
def test_as_array_turns_scalars_into_zero_dim_arrays(scalar):
    converted = step.as_array(scalar)
    assert type(converted) is np.ndarray and converted.ndim == 0
    assert converted == scalar and converted.dtype == np.asarray(scalar).dtype


@pytest.mark.parametrize("array", [np.array(4.0), np.array([4.0]), np.ones((2, 2))])
def test_as_array_passes_arrays_through_untouched(array):
    assert step.as_array(array) is array


def test_numpy_returns_scalars_for_zero_dim_arrays_the_reason_for_as_array():
    assert not isinstance(np.array(1.0) ** 2, np.ndarray)
    assert not isinstance(np.exp(np.array(1.0)), np.ndarray)
    assert isinstance(np.array([1.0]) ** 2, np.ndarray)


def test_square_and_exp_make_a_new_function_object_per_call():
    x = step.Variable(np.array(2.0))
    y1, y2, y3 = step.square(x), step.square(x), step.exp(x)
    assert type(y1.creator) is step.Square and type(y3.creator) is step.Exp
    assert y1.creator is not y2.creator


def test_numerical_diff_on_a_zero_dim_variable_meets_the_type_check():
    # the known limitation the step describes: x.data - eps is a NumPy scalar
    with pytest.raises(TypeError, match="got float64"):
        step.numerical_diff(step.square, step.Variable(np.array(0.5)))
    np.testing.assert_allclose(step.numerical_diff(step.square, step.Variable(np.array([0.5]))), [1.0], rtol=1e-10)
