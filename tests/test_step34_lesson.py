"""Step 34's lesson: the drawing's numbers and the exercises' solutions (a gradient reversal, a hook that clips a
gradient's norm), checked against PyTorch and worked-out maths."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step34, pytest.mark.torch]
step = load_step(34)


def test_the_hook_in_the_drawing_sees_five_and_x_gets_ten():
    seen = []
    x = Variable(np.array(1.0))
    a = x * 2.0
    a.register_hook(lambda grad: seen.append(grad.item()))
    (a * a + a).backward()
    assert seen == [5.0] and x.grad.item() == 10.0  # dy/da = 2a + 1 = 5, times da/dx = 2


@pytest.mark.parametrize("values", [[0.0, 1.0, 2.0], [-3.0, 0.5]])
def test_reverse_gradient_negates_torchs_gradient_and_keeps_the_value(values):
    x = Variable(np.array(values))
    y = step.reverse_gradient(x)
    np.testing.assert_array_equal(y.data, x.data)
    tinypytorch.sin(y).sum().backward()
    xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    torch.sin(xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, -xt.grad.numpy(), rtol=1e-15)  # -cos x


@pytest.mark.parametrize("values, max_norm", [([0.5, -2.0, 3.0], 1.0), ([0.1, 0.2], 5.0), ([1.0, 1.0], 2.0)])
def test_clip_norm_hook_equals_torchs_clip_grad_norm(values, max_norm):
    p = Variable(np.array(values))
    p.register_hook(step.clip_norm_hook(max_norm))
    (p * p * p).sum().backward()
    pt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    (pt * pt * pt).sum().backward()
    norm = pt.grad.norm().item()
    expected = pt.grad.numpy() * (max_norm / norm if norm > max_norm else 1.0)
    np.testing.assert_allclose(p.grad.data, expected, rtol=1e-14)
    assert np.linalg.norm(p.grad.data) <= max_norm * (1 + 1e-14) or norm <= max_norm
