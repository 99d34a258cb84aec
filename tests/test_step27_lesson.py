"""Step 27's lesson: the exercises' solutions (a mixed second derivative, Taylor coefficients from repeated
backward passes), checked against torch.autograd.grad and the maths."""
import math

import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step

pytestmark = [pytest.mark.step27, pytest.mark.torch]
step = load_step(27)


@pytest.mark.parametrize("x0, y0", [(1.5, -0.5), (-2.0, 3.0), (0.3, 0.7)])
def test_mixed_derivative_equals_torch_and_6xy2(x0, y0):
    x, y = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x0, y0))
    (gx,) = torch.autograd.grad(x**2 * y**3, x, create_graph=True)
    (gxy,) = torch.autograd.grad(gx, y)
    assert step.mixed_derivative(x0, y0) == pytest.approx(gxy.item(), rel=1e-12)
    assert step.mixed_derivative(x0, y0) == pytest.approx(6 * x0 * y0**2, rel=1e-12)


def test_taylor_coefficients_of_tanh_and_sin_are_the_series():
    np.testing.assert_allclose(step.taylor_coefficients(tinypytorch.tanh, 6), [0, 1, 0, -1 / 3, 0, 2 / 15],
                               atol=1e-14)
    expected = [0 if k % 2 == 0 else (-1) ** (k // 2) / math.factorial(k) for k in range(7)]
    np.testing.assert_allclose(step.taylor_coefficients(tinypytorch.sin, 7), expected, atol=1e-14)
