"""Step 09's lesson: the exercises' solutions (a hand-written tanh backward, a friendlier constructor, PyTorch's
rule for the implicit seed), checked against torch."""
import numpy as np
import pytest
import torch

from reference import assert_close_to_torch
from steploader import load_step

pytestmark = [pytest.mark.step09, pytest.mark.torch]
step = load_step(9)


# not deep in saturation, where 1 - y**2 cancels and the libraries' last-bit differences in tanh grow
@pytest.mark.parametrize("values", [[-1.0, 0.0, 2.0], [0.3], [[-1.2, 0.5], [1.5, -0.1]]])
def test_tanh_backward_gives_torchs_gradient_under_another_function(values):
    x = step.Variable(np.array(values))
    y = step.exp(step.tanh(step.square(x)))  # tanh's gy is not one
    y.backward()
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    ty = torch.exp(torch.tanh(torch.square(t)))
    ty.sum().backward()
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-14)
    assert_close_to_torch(x.grad, t.grad.numpy())  # 1 - tanh(4)^2 = 0.0013 makes tanh's last ulp 750 times larger


@pytest.mark.parametrize("value", [3, -2.5, [1, 2.5], [[1, 2], [3, 4]], True, np.float32(0.1)])
def test_variable_makes_what_torch_tensor_makes_in_float64(value):
    ours = step.variable(value).data
    theirs = torch.tensor(value, dtype=torch.float64).numpy()
    assert isinstance(ours, np.ndarray) and ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("value", ["1.0", "abc"])
def test_variable_refuses_strings_as_torch_tensor_does(value):
    with pytest.raises(TypeError):
        torch.tensor(value, dtype=torch.float64)
    with pytest.raises(TypeError):
        step.variable(value)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (2,), (2, 3)])
def test_backward_like_torch_seeds_only_one_element_outputs(shape):
    array = np.full(shape, 0.7)
    x = step.Variable(array)
    t = torch.tensor(array, requires_grad=True)
    ty = torch.square(t)
    y = step.square(x)
    if array.size == 1:
        step.backward_like_torch(y)
        ty.backward()
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-15)
    else:
        with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs") as ours:
            step.backward_like_torch(y)
        with pytest.raises(RuntimeError) as theirs:
            ty.backward()
        assert str(ours.value) in str(theirs.value)
