"""Step 21's lesson: the methods the picture says Python calls, and the exercises' solutions
(__array_ufunc__ = None, a Scale function keeping its constant) against PyTorch."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step21, pytest.mark.torch]
step = load_step(21)


def test_the_picture_float_and_ndarray_step_aside_and_the_reflected_methods_run():
    x = step.Variable(np.array(2.0))
    assert (3.0).__mul__(x) is NotImplemented
    assert np.array(2.0).__add__(x) is NotImplemented  # the priority: NumPy steps aside
    assert np.array(2.0).__add__(step.VariableWithoutPriority(np.array(2.0))) is not NotImplemented
    y = 3.0 * x
    assert type(y.creator).__name__ == "Mul" and y.creator.inputs[0].data == 3.0 and y.creator.inputs[1] is x


@pytest.mark.parametrize("left", [np.array([1.0, 2.0]), np.array(2.0)])
def test_array_ufunc_none_gives_one_variable_with_torchs_value_and_grad(left):
    x = step.VariableUfuncNone(np.array([10.0, 20.0]))
    y = left * x + left
    assert isinstance(y, step.Variable)
    y.backward()
    xt = torch.tensor([10.0, 20.0], dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(left) * xt + torch.tensor(left)
    yt.sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


def test_array_ufunc_none_makes_numpys_ufuncs_refuse_the_operand():
    x = step.VariableUfuncNone(np.array([10.0, 20.0]))
    with pytest.raises(TypeError):
        np.add(np.array([1.0, 2.0]), x)  # a ufunc called directly has no Variable method to fall back on


@pytest.mark.parametrize("c", [3.0, -0.5, 2])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_scale_equals_torchs_constant_times_x_with_one_input(c, shape):
    value = np.random.default_rng(2).standard_normal(shape)
    x = step.Variable(value)
    y = step.Scale(c)(x)
    assert len(y.creator.inputs) == 1
    y.backward()
    xt = torch.tensor(value, requires_grad=True)
    yt = c * xt
    yt.sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
