"""Step 04's lesson: the exercises' solutions (numerical_gradient of Prod, Sin's central difference) against
PyTorch's autograd and the truncation error worked out by Taylor."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import array_shapes, arrays

from reference import floats
from steploader import load_step

pytestmark = [pytest.mark.step04, pytest.mark.torch]
step = load_step(4)


# Factors of magnitude 0 or at least 1e-3: the product of 16 stays far from underflow (1e-48). Torch's backward
# divides the product by each factor, so once it underflows, prod([1e-200, 1e-200, 0.5]) gets the gradient 0.
factors = floats(-2.0, 2.0).filter(lambda v: v == 0 or abs(v) >= 1e-3)


@given(arrays(np.float64, array_shapes(min_dims=1, max_dims=2, max_side=4), elements=factors))
def test_numerical_gradient_of_prod_is_torchs(array):
    t = torch.tensor(array, requires_grad=True)
    torch.prod(t).backward()
    # prod is linear in each element: the central difference is exact up to rounding
    np.testing.assert_allclose(step.numerical_gradient(step.Prod(), step.Variable(array)), t.grad.numpy(),
                               rtol=0, atol=1e-8)


def test_numerical_gradient_moves_one_element_at_a_time_where_numerical_diff_cannot():
    x = step.Variable(np.array([0.5, 2.0, 3.0]))
    np.testing.assert_allclose(step.numerical_gradient(step.Prod(), x), [6.0, 1.5, 1.0], atol=1e-9)  # prod / x_i
    assert not np.allclose(step.numerical_diff(step.Prod(), x), [6.0, 1.5, 1.0])  # all moved at once
    np.testing.assert_array_equal(x.data, [0.5, 2.0, 3.0])


@given(floats(-3.0, 3.0))
def test_sin_central_difference_error_is_h_squared_over_6_cos(value):
    # sin''' = -cos: numerical - exact = -h^2/6 cos x (next term h^4/120), plus rounding ~ u/h
    t = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    torch.sin(t).backward()
    h = 1e-3
    error = step.numerical_diff(step.Sin(), step.Variable(np.array(value)), eps=h) - t.grad.item()
    assert abs(error + h ** 2 / 6 * np.cos(value)) <= h ** 4 / 120 + 1e-12


def test_only_the_smaller_eps_keeps_sin_within_1e_9():
    t = torch.linspace(-3.0, 3.0, 7, dtype=torch.float64, requires_grad=True)
    torch.sin(t).sum().backward()
    x = step.Variable(t.detach().numpy())
    assert np.max(np.abs(step.numerical_diff(step.Sin(), x, 1e-4) - t.grad.numpy())) > 1e-9  # 1e-8/6 at x = 0
    assert np.max(np.abs(step.numerical_diff(step.Sin(), x, 1e-5) - t.grad.numpy())) < 1e-9
