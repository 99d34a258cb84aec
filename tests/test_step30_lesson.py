"""Step 30's lesson: the exercises' solutions (a broadcast Function whose backward is written by hand, row
centring), checked against torch.broadcast_to and the same centring in torch, first and second derivatives."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step30, pytest.mark.torch]
step = load_step(30)


@pytest.mark.parametrize("shape, target", [((2, 1), (4, 2, 3)), ((3,), (2, 3)), ((), (2, 3)), ((1, 3, 1), (2, 4, 3, 5)),
                                           ((2, 3), (2, 3))])
def test_my_broadcast_to_values_and_grads_equal_torch(shape, target):
    rng = np.random.default_rng(0)
    data, w = rng.normal(size=shape), rng.normal(size=target)
    x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    y, yt = step.MyBroadcastTo(target)(x), torch.broadcast_to(t, target)
    (tinypytorch.sin(y) * w).sum().backward()
    (torch.sin(yt) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    assert x.grad.shape == shape
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_my_broadcast_tos_backward_can_be_differentiated_again():
    data, w = np.array([[0.3], [-0.7]]), np.arange(6.0).reshape(2, 3)
    x = Variable(data.copy())
    (step.MyBroadcastTo((2, 3))(x) ** 3 * w).sum().backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    (gx * gx).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    (gt,) = torch.autograd.grad((torch.broadcast_to(t, (2, 3)) ** 3 * torch.tensor(w)).sum(), t, create_graph=True)
    (gt * gt).sum().backward()
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("shape", [(2, 3), (4, 5)])
def test_center_values_and_grads_equal_torch_and_grad_rows_sum_to_zero(shape):
    rng = np.random.default_rng(1)
    data, w = rng.normal(size=shape), rng.normal(size=shape)
    x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    y, yt = step.center(x), t - t.mean(dim=1, keepdim=True)
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(x.grad.data.sum(axis=1), 0.0, atol=1e-12)  # d/dx of a centred sum: w - mean(w)
