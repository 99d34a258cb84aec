"""Step 24's lesson: the picture's descent directions, and the exercises' solutions (Rosenbrock, a gradient
over a grid) against PyTorch and maths."""
import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from tinypytorch import Variable
from reference import floats

pytestmark = [pytest.mark.step24, pytest.mark.torch]
step = load_step(24)
coordinate = floats(-2.0, 2.0)


def test_the_pictures_arrows_point_down_the_hill():
    for f in (step.sphere, step.matyas, step.goldstein_price):
        x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
        f(x, y).backward()
        g = np.array([x.grad.item(), y.grad.item()])
        small = -1e-4 * g / np.hypot(*g)  # a short step along the arrow lowers f
        assert f(Variable(np.array(1.0 + small[0])), Variable(np.array(1.0 + small[1]))).data < f(
            Variable(np.array(1.0)), Variable(np.array(1.0))).data


@given(coordinate, coordinate)
def test_rosenbrock_gradient_equals_the_hand_formula_and_torch(a, b):
    x, y = Variable(np.array(a)), Variable(np.array(b))
    z = step.rosenbrock(x, y)
    z.backward()
    expected = [-400 * a * (b - a * a) - 2 * (1 - a), 200 * (b - a * a)]
    np.testing.assert_allclose([x.grad.item(), y.grad.item()], expected, rtol=1e-12, atol=1e-12)
    xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    step.rosenbrock(xt, yt).backward()
    np.testing.assert_allclose([x.grad.item(), y.grad.item()], [xt.grad.item(), yt.grad.item()], rtol=1e-12,
                               atol=1e-12)
    assert z.data == pytest.approx(100 * (b - a * a) ** 2 + (1 - a) ** 2, rel=1e-12, abs=1e-12)


def test_rosenbrock_at_the_pages_point_and_at_its_minimum():
    x, y = Variable(np.array(0.0)), Variable(np.array(2.0))
    step.rosenbrock(x, y).backward()
    assert (x.grad.item(), y.grad.item()) == (-2.0, 400.0)
    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
    z = step.rosenbrock(x, y)
    z.backward()
    assert z.data == 0.0 and (x.grad.item(), y.grad.item()) == (0.0, 0.0)


@pytest.mark.parametrize("f", ["sphere", "matyas", "goldstein_price"])
def test_one_backward_over_a_grid_gives_every_points_gradient_like_torch(f):
    f = getattr(step, f)
    gx, gy = np.meshgrid(np.linspace(-2.0, 2.0, 7), np.linspace(-1.5, 1.5, 6))
    x, y = Variable(gx), Variable(gy)
    f(x, y).backward(np.ones_like(gx))
    for i, j in np.ndindex(gx.shape):  # point by point, 0-d, as torch
        xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (gx[i, j], gy[i, j]))
        f(xt, yt).backward()
        np.testing.assert_allclose([x.grad.data[i, j], y.grad.data[i, j]], [xt.grad.item(), yt.grad.item()],
                                   rtol=1e-12, atol=1e-12)


def test_the_pages_grid_solution_equals_the_formula():
    np.testing.assert_allclose(step.x.grad.data, 0.52 * step.gx - 0.48 * step.gy, rtol=1e-12, atol=1e-15)
