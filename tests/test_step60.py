"""Step 60: float16 through the package against torch 2.13 (CPU, float16): the operations a small network uses keep
float16 forward and backward (no promotion by Python numbers), and round as torch does where the order of
roundings is the package's choice: the mean squared error's forward (a float32 sum, not an overflowing float16 one)
and backward (2/N times the difference, then times the incoming gradient), a sum along the rows (float32
accumulation, where NumPy would add float16 in float16) and a linear layer with a bias (one rounding, as torch's
addmm). Matrix products themselves are compared to one float16 step: torch adds the products in another order."""
import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch.core import sum_array

pytestmark = [pytest.mark.step60, pytest.mark.torch]
h = np.float16


def steps_apart(ours, theirs):
    gap = np.spacing(np.maximum(np.abs(ours), np.abs(theirs)).astype(h)).astype(np.float32)
    return np.abs(np.asarray(ours, np.float32) - np.asarray(theirs, np.float32)) / gap


OPS = {
    "add": (lambda a: a + 1.5, lambda a: a + 1.5), "rsub": (lambda a: 1.5 - a, lambda a: 1.5 - a),
    "mul": (lambda a: a * 0.25, lambda a: a * 0.25), "div": (lambda a: a / 4.0, lambda a: a / 4.0),
    "pow": (lambda a: a ** 2, lambda a: a ** 2), "neg": (lambda a: -a, lambda a: -a),
    "relu": (lambda a: nn.ReLU()(a), lambda a: torch.relu(a)), "tanh": (lambda a: a.tanh(), lambda a: a.tanh()),
    "sum": (lambda a: a.sum(), lambda a: a.sum()), "sum0": (lambda a: a.sum(dim=0), lambda a: a.sum(dim=0)),
    "mean": (lambda a: a.mean(), lambda a: a.mean()), "mean0": (lambda a: a.mean(dim=0), lambda a: a.mean(dim=0)),
    "exp": (lambda a: a.exp(), lambda a: a.exp()), "sigmoid": (lambda a: a.sigmoid(), lambda a: a.sigmoid()),
}


STEPS = {"tanh": 8, "sigmoid": 8}  # backward 1 - y^2 and y(1 - y) cancel in float16: up to 7 steps measured


@pytest.mark.parametrize("name", OPS)
def test_each_operation_keeps_float16_forward_and_backward_as_torch(name):
    ours_op, torch_op = OPS[name]
    x = np.random.default_rng(0).normal(size=(64, 3)).astype(h)
    a, t = Variable(x.copy()), torch.tensor(x, requires_grad=True)
    y, yt = ours_op(a), torch_op(t)
    assert y.dtype == np.float16 and yt.dtype == torch.float16
    y.sum().backward() if y.ndim else y.backward()
    (yt.sum() if yt.ndim else yt).backward()
    assert a.grad.dtype == np.float16
    if name in ("tanh", "sigmoid"):  # composed of float16 steps here, rounded once in torch
        assert steps_apart(y.data, yt.detach().numpy()).max() <= STEPS[name]
        assert steps_apart(a.grad.data, t.grad.numpy()).max() <= STEPS[name]
        return
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(a.grad.data, t.grad.numpy())


def test_a_float16_sum_along_the_rows_adds_in_float32_as_torchs():
    x = (np.random.default_rng(1).normal(size=(2048, 16)) * 1e-3).astype(h)
    assert not np.array_equal(x.sum(axis=0), torch.from_numpy(x).sum(0).numpy())  # NumPy alone: float16 sums
    np.testing.assert_array_equal(sum_array(x, 0, False), torch.from_numpy(x).sum(0).numpy())
    np.testing.assert_array_equal(tinypytorch.sum(Variable(x), dim=0).data, torch.from_numpy(x).sum(0).numpy())
    ones = np.full((6000, 1), 0.001, dtype=h)  # the stalled running sum: float16 stops at 4, torch does not
    assert float(sum_array(ones, 0, False)[0]) == torch.from_numpy(ones).sum(0).item() == pytest.approx(6.0, rel=1e-3)


def test_the_bias_gradient_sums_the_rows_in_float32():
    x, b = np.ones((3000, 4), dtype=h), np.zeros(4, dtype=h)
    ours = Variable(b.copy())
    (Variable(x) + ours).sum().backward()
    bt = torch.tensor(b, requires_grad=True)
    (torch.from_numpy(x) + bt).sum().backward()
    np.testing.assert_array_equal(ours.grad.data, bt.grad.numpy())
    assert ours.grad.data[0] == 3000


@pytest.mark.parametrize("size", [(512, 8), (300, 7)])
def test_mse_loss_in_float16_equals_torchs_forward_and_backward(size):
    rng = np.random.default_rng(2)
    x, target = (8 * rng.normal(size=size)).astype(h), rng.normal(size=size).astype(h)
    for weight in (1.0, 2.0**-12, 0.37):
        a, t = Variable(x.copy()), torch.tensor(x, requires_grad=True)
        loss = nn.MSELoss()(a, Variable(target))
        loss_t = torch.nn.functional.mse_loss(t, torch.from_numpy(target))
        assert np.isfinite(loss.item()) and loss.dtype == np.float16
        assert loss.item() == loss_t.item()
        (loss * weight).backward()
        (loss_t * weight).backward()
        if weight != 0.37:  # a Python number float16 cannot hold: NumPy rounds it first, torch does not
            np.testing.assert_array_equal(a.grad.data, t.grad.numpy())


def test_linear_with_bias_rounds_once_as_torchs_addmm():
    rng = np.random.default_rng(3)
    x, W, b = (rng.normal(size=(512, 32)).astype(h), (0.2 * rng.normal(size=(64, 32))).astype(h),
               (0.2 * rng.normal(size=64)).astype(h))
    ours = tinypytorch.functions.linear(Variable(x), Variable(W), Variable(b)).data
    theirs = torch.nn.functional.linear(*map(torch.from_numpy, (x, W, b))).numpy()
    assert ours.dtype == np.float16
    assert np.mean(ours == theirs) > 0.99 and steps_apart(ours, theirs).max() <= 1
    twice = x @ W.T + b  # the old way, two roundings, differs from torch in about a quarter of the outputs
    assert np.mean(twice != theirs) > 0.1


def test_float64_and_float32_paths_are_unchanged():
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64):
        x, W, b = (rng.normal(size=(5, 3)).astype(dtype), rng.normal(size=(4, 3)).astype(dtype),
                   rng.normal(size=4).astype(dtype))
        y = tinypytorch.functions.linear(Variable(x), Variable(W), Variable(b))
        assert y.dtype == dtype
        np.testing.assert_array_equal(y.data, x @ W.T + b)
        np.testing.assert_array_equal(sum_array(x, 0, True), x.sum(axis=0, keepdims=True))


def test_a_network_in_float16_keeps_float16_and_matches_torch():
    rng = np.random.default_rng(5)
    x, target = rng.normal(size=(64, 8)).astype(h), rng.normal(size=(64, 2)).astype(h)
    tinypytorch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    for p in model.parameters():
        p.data = p.data.astype(h)
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).half()
    twin.load_state_dict({k: torch.from_numpy(v.data) for k, v in model.state_dict().items()})
    (nn.MSELoss()(model(Variable(x)), Variable(target)) * 2.0**-4).backward()
    (torch.nn.functional.mse_loss(twin(torch.from_numpy(x)), torch.from_numpy(target)) * 2.0**-4).backward()
    for (name, p), pt in zip(model.named_parameters(), twin.parameters()):
        assert p.grad.dtype == np.float16, name
        assert steps_apart(p.grad.data, pt.grad.numpy()).max() <= 2, name
