"""Step 28's lesson: the exercises' solutions (a Hessian-vector product, Newton with a curvature check), checked
against torch.autograd.functional.hvp and the same method written with torch.autograd.grad."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step28, pytest.mark.torch]
step = load_step(28)


@pytest.mark.parametrize("point, v", [((1.0, 1.0), (1.0, 2.0)), ((-0.5, 2.0), (0.3, -1.5)), ((0.0, 2.0), (1, 0))])
def test_hvp_equals_torchs(point, v):
    _, expected = torch.autograd.functional.hvp(lambda u: step.rosenbrock(u[0], u[1]),
                                                torch.tensor(point, dtype=torch.float64),
                                                torch.tensor(v, dtype=torch.float64))
    np.testing.assert_allclose(step.hvp(step.rosenbrock, point, v), expected.numpy(), rtol=1e-12, atol=1e-12)


def torch_safe_newton(f, x0, iterations, lr):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    iterates = [x0]
    for _ in range(iterations):
        (g,) = torch.autograd.grad(f(x), x, create_graph=True)
        (h,) = torch.autograd.grad(g, x)
        with torch.no_grad():
            x -= g / h if h > 0 else lr * g
        iterates.append(x.item())
    return iterates


@pytest.mark.parametrize("x0", [0.4, -0.3, 2.0, 0.1])
def test_safe_newton_equals_torch_and_ends_at_a_minimum(x0):
    ours = step.safe_newton(step.f, x0, 20, 0.1)
    np.testing.assert_allclose(ours, torch_safe_newton(step.f, x0, 20, 0.1), rtol=1e-12, atol=1e-15)
    assert abs(abs(ours[-1]) - 1) < 1e-12  # the minima of x**4 - 2x**2 are at +-1, the maximum at 0
