"""Step 31's lesson: the exercises' solutions (a matrix product's backward written by hand, an embedding's
gradient with a loop), checked against PyTorch."""
import numpy as np
import pytest
import torch

from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step31, pytest.mark.torch]
step = load_step(31)


@pytest.mark.parametrize("shapes", [((4, 3), (3, 2)), ((1, 5), (5, 1)), ((6, 2), (2, 7))])
def test_my_matmul_backward_equals_torchs(shapes):
    rng = np.random.default_rng(sum(map(sum, shapes)))
    x, W = rng.uniform(-1, 1, shapes[0]), rng.uniform(-1, 1, shapes[1])
    g = rng.uniform(-1, 1, (shapes[0][0], shapes[1][1]))
    xv, Wv = Variable(x), Variable(W)
    y = step.MyMatMul()(xv, Wv)
    (y * g).sum().backward()
    xt, Wt = torch.tensor(x, requires_grad=True), torch.tensor(W, requires_grad=True)
    yt = xt @ Wt
    (yt * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(xv.grad.data, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(Wv.grad.data, Wt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_the_shapes_pick_the_two_products():
    # the same check made to fail: x^T g in place of g W^T has the wrong shape for x
    rng = np.random.default_rng(0)
    x, W, g = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 2)), rng.uniform(-1, 1, (4, 2))
    assert (g @ W.T).shape == x.shape and (x.T @ g).shape == W.shape
    assert (x.T @ g).shape != x.shape


@pytest.mark.parametrize("ids", [[3, 0, 3, 3], [0, 1, 2, 3, 4], [2, 2]])
def test_embedding_grad_equals_torchs_embedding(ids):
    rng = np.random.default_rng(len(ids))
    table, g = rng.uniform(-1, 1, (5, 3)), rng.uniform(-1, 1, (len(ids), 3))
    E = torch.tensor(table, requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(ids), E) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(step.embedding_grad(ids, g, 5), E.grad.numpy(), rtol=1e-15, atol=0)
    ours = Variable(table)
    (ours[ids] * g).sum().backward()
    np.testing.assert_allclose(ours.grad.data, E.grad.numpy(), rtol=1e-15, atol=0)
