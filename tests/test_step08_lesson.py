"""Step 08's lesson: the exercises' solutions (a hand-written Cos backward through a 1,000-deep chain, a loop over
variables), checked against torch and worked-out maths."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step08, pytest.mark.torch]
step = load_step(8)


@pytest.mark.parametrize("start, depth", [(1.0, 1000), (-0.4, 3), (2.5, 50)])
def test_a_cos_chain_backpropagates_to_torchs_gradient(start, depth):
    x = y = step.Variable(np.array(start))
    t = ty = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    for _ in range(depth):
        y, ty = step.Cos()(y), torch.cos(ty)
    y.grad = np.array(1.0)
    y.backward()
    ty.backward()
    np.testing.assert_allclose(x.grad, t.grad.item(), rtol=1e-10)


def test_the_cos_chain_shrinks_like_sin_of_the_fixed_point_to_the_depth():
    # the iterates settle at the fixed point c = cos c, each factor |-sin c| ~ 0.674
    c = 0.7390851332151607
    assert abs(np.cos(c) - c) < 1e-15
    grads = []
    for depth in (600, 601):
        x = y = step.Variable(np.array(1.0))
        for _ in range(depth):
            y = step.Cos()(y)
        y.grad = np.array(1.0)
        y.backward()
        grads.append(x.grad)
    ratio = grads[1] / grads[0]
    np.testing.assert_allclose(ratio, -np.sin(c), rtol=1e-12)


@pytest.mark.parametrize("ops", [["Sin"], ["Square", "Exp", "Square"], ["Sin"] * 3000])
def test_backward_variables_gives_torchs_gradient(ops):
    x = y = step.Variable(np.array([0.3, -0.8]))
    t = ty = torch.tensor([0.3, -0.8], dtype=torch.float64, requires_grad=True)
    for name in ops:
        y = getattr(step, name)()(y)
        ty = {"Square": torch.square, "Exp": torch.exp, "Sin": torch.sin}[name](ty)
    y.grad = np.ones_like(y.data)
    step.backward_variables(y)
    ty.sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-11)


def test_backward_variables_on_a_leaf_leaves_it_alone():
    x = step.Variable(np.array(2.0))
    x.grad = np.array(1.0)
    step.backward_variables(x)
    assert x.grad == 1.0  # torch would set a leaf's gradient to one too
