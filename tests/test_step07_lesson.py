"""Step 07's lesson: the exercises' solutions (a hand-written Sin backward, the walk from an output to its leaf),
checked against torch."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step07, pytest.mark.torch]
step = load_step(7)


@pytest.mark.parametrize("value", [-2.0, -0.3, 0.0, 0.5, 1.7])
def test_sin_backward_gives_torchs_gradient_through_a_chain(value):
    x = step.Variable(np.array([value, value / 2]))
    y = step.Square()(step.Sin()(step.Exp()(x)))  # gy into Sin is not one: a forgotten gy would show
    y.grad = np.ones_like(y.data)
    y.backward()
    t = torch.tensor([value, value / 2], dtype=torch.float64, requires_grad=True)
    torch.square(torch.sin(torch.exp(t))).sum().backward()
    np.testing.assert_allclose(y.data, torch.square(torch.sin(torch.exp(t))).detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-13)


TORCH_NAMES = {"PowBackward0": "Square", "ExpBackward0": "Exp", "SinBackward0": "Sin"}


@pytest.mark.parametrize("ops", [["Square"], ["Square", "Exp", "Square"], ["Exp", "Sin", "Sin", "Square"]])
def test_path_lists_torchs_grad_fn_chain(ops):
    x = step.Variable(np.array(0.3))
    t = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y, ty = x, t
    for name in ops:  # applied first to last
        y = getattr(step, name)()(y)
        ty = {"Square": torch.square, "Exp": torch.exp, "Sin": torch.sin}[name](ty)
    node, expected = ty.grad_fn, []
    while node is not None and type(node).__name__ != "AccumulateGrad":
        expected.append(TORCH_NAMES[type(node).__name__])
        node = node.next_functions[0][0]
    assert step.path(y) == expected == ops[::-1]


def test_path_of_a_leaf_is_empty():
    assert step.path(step.Variable(np.array(1.0))) == []
