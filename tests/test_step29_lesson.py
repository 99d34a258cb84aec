"""Step 29's lesson: the exercises' solutions (a Flip Function with its backward written by hand, mT), checked
against torch.flip and torch's x.mT, first and second derivatives."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step29, pytest.mark.torch]
step = load_step(29)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 3, 4)])
def test_flip_values_and_grads_equal_torch_flip(shape):
    rng = np.random.default_rng(1)
    data, w = rng.normal(size=shape), rng.normal(size=shape)
    x = Variable(data.copy())
    y = step.Flip()(x)
    (tinypytorch.sin(y) * w).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    yt = torch.flip(t, (-1,))
    (torch.sin(yt) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)


def test_flips_backward_can_be_differentiated_again_as_torchs():
    data, w = np.array([0.3, -1.2, 0.8]), np.array([1.0, 2.0, 3.0])
    x = Variable(data.copy())
    (step.Flip()(x) ** 3 * w).sum().backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    (gx * gx).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    (gt,) = torch.autograd.grad((torch.flip(t, (-1,)) ** 3 * torch.tensor(w)).sum(), t, create_graph=True)
    (gt * gt).sum().backward()
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)


def test_mT_values_and_grads_equal_torchs_mT():
    data = np.random.default_rng(2).normal(size=(4, 2, 3))
    w = np.random.default_rng(3).normal(size=(4, 3, 2))
    x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    y, yt = step.mT(x), t.mT
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())
