"""Step 56: nn.BatchNorm1d as a Module (printout, parameter and state-dict names, values after training batches,
outputs and gradients, load_state_dict), gradient clipping's bad inputs, and gradient accumulation, against
torch 2.13 (float64)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.utils as TU

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch import layers
from tinypytorch.nn import utils

pytestmark = [pytest.mark.step56, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
KEYS = ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]


def batches(n, shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(loc=i, scale=1 + i, size=shape) for i in range(n)]


def train_both(ours, theirs, xs):
    """The batches through both in training mode; the last outputs."""
    for x in xs:
        y, y_t = ours(Variable(x)), theirs(torch.from_numpy(x))
    return y, y_t


@pytest.mark.parametrize("args", [(4,), (3, 1e-3, 0.3), (2, 1e-05, None)])
def test_printout_names_and_initial_state_are_torchs(args):
    ours, theirs = nn.BatchNorm1d(*args), torch.nn.BatchNorm1d(*args).double()
    assert repr(ours) == repr(theirs)
    assert repr(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))) == repr(
        torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    state, state_t = ours.state_dict(), theirs.state_dict()
    assert list(state) == list(state_t) == KEYS
    for key in KEYS:
        np.testing.assert_array_equal(state[key].data, state_t[key].numpy())
        assert state[key].data.dtype == state_t[key].numpy().dtype
    assert state["num_batches_tracked"].shape == () and state["num_batches_tracked"].data.dtype == np.int64
    assert isinstance(ours, nn.Module) and isinstance(ours, layers.BatchNorm1d)


@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
def test_state_after_training_batches_outputs_and_gradients_equal_torchs(momentum):
    ours, theirs = nn.BatchNorm1d(3, momentum=momentum), torch.nn.BatchNorm1d(3, momentum=momentum).double()
    rng = np.random.default_rng(1)
    w, b = rng.normal(size=3), rng.normal(size=3)
    ours.load_state_dict({"weight": tinypytorch.from_numpy(w), "bias": tinypytorch.from_numpy(b)}, strict=False)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(w))
        theirs.bias.copy_(torch.from_numpy(b))
    xs = batches(4, (5, 3))
    y, y_t = train_both(ours, theirs, xs)
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    state, state_t = ours.state_dict(), theirs.state_dict()
    for key in KEYS:
        np.testing.assert_allclose(state[key].data, state_t[key].numpy(), rtol=1e-12, atol=0, err_msg=key)
    assert int(state["num_batches_tracked"].data) == 4
    weights = np.random.default_rng(2).normal(size=(5, 3))
    (y * Variable(weights)).sum().backward()
    (y_t * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.data, theirs.weight.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.bias.grad.data, theirs.bias.grad.numpy(), rtol=1e-12, atol=1e-13)
    ours.eval(), theirs.eval()
    x = np.random.default_rng(3).normal(size=(1, 3))  # a batch of one is fine when evaluating
    np.testing.assert_allclose(ours(Variable(x)).data, theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)


def test_input_gradient_equals_torchs():
    ours, theirs = nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4).double()
    x = np.random.default_rng(4).normal(size=(6, 4))
    v, t = Variable(x), torch.from_numpy(x).requires_grad_()
    weights = np.random.default_rng(5).normal(size=(6, 4))
    (ours(v) * Variable(weights)).sum().backward()
    (theirs(t) * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(v.grad.data, t.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_load_state_dict_round_trip_with_torch():
    theirs = torch.nn.BatchNorm1d(3).double()
    train_both(nn.BatchNorm1d(3), theirs, batches(3, (4, 3)))
    ours = nn.BatchNorm1d(3)
    assert repr(ours.load_state_dict({k: tinypytorch.from_numpy(v.numpy()) for k, v in theirs.state_dict().items()})) == (
        "<All keys matched successfully>")
    assert int(ours.num_batches_tracked) == 3 and ours.num_batches_tracked.dtype == np.int64
    back = torch.nn.BatchNorm1d(3).double()
    back.load_state_dict({k: torch.from_numpy(np.array(v.data)) for k, v in ours.state_dict().items()})
    for key in KEYS:
        assert torch.equal(back.state_dict()[key], theirs.state_dict()[key]), key
    ours.train(), theirs.train()  # training goes on alike: momentum None would read num_batches_tracked
    y, y_t = train_both(ours, theirs, batches(2, (4, 3), seed=9))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ours.running_var, theirs.running_var.numpy(), rtol=1e-12)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 5


def test_load_state_dict_checks_the_shape_and_a_missing_counter():
    ours = nn.BatchNorm1d(3)
    state = {k: tinypytorch.from_numpy(v.numpy()) for k, v in torch.nn.BatchNorm1d(3).double().state_dict().items()}
    del state["num_batches_tracked"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "num_batches_tracked"'):
        ours.load_state_dict(state)
    state = {k: tinypytorch.from_numpy(v.numpy()) for k, v in torch.nn.BatchNorm1d(4).double().state_dict().items()}
    with pytest.raises(RuntimeError, match="size mismatch for running_mean"):
        ours.load_state_dict(state)


def test_a_batch_of_one_in_training_raises_torchs_error():
    x = np.ones((1, 4))
    theirs_module, ours_module = torch.nn.BatchNorm1d(4).double(), nn.BatchNorm1d(4)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training") as theirs:
        theirs_module(torch.from_numpy(x))
    with pytest.raises(ValueError) as ours:
        ours_module(Variable(x))
    assert str(ours.value) == str(theirs.value)
    # torch counts the batch before it checks it
    assert int(ours_module.num_batches_tracked) == int(theirs_module.num_batches_tracked) == 1


def test_affine_false_track_running_stats_false_and_bias_false_have_torchs_state():
    """(Their values against torch's: tests/test_batchnorm.py.)"""
    for kwargs in [dict(affine=False), dict(track_running_stats=False), dict(bias=False),
                   dict(affine=False, track_running_stats=False)]:
        ours, theirs = nn.BatchNorm1d(3, **kwargs), torch.nn.BatchNorm1d(3, **kwargs).double()
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert repr(ours) == repr(theirs)


def test_the_layer_of_step_45_keeps_its_plain_counter():
    layer = layers.BatchNorm1d(3)
    layer(Variable(np.random.default_rng(0).normal(size=(4, 3))))
    assert layer.num_batches_tracked == 1 and isinstance(layer.num_batches_tracked, int)
    assert "num_batches_tracked" not in layers.buffer_names(layer)


# Clipping: bad inputs, torch's meaning


def grads_pair(values):
    p = Variable(np.zeros(len(values)))
    p.grad = Variable(np.array(values, dtype=np.float64), requires_grad=False)
    t = torch.zeros(len(values), dtype=torch.float64, requires_grad=True)
    t.grad = torch.tensor(values, dtype=torch.float64)
    return p, t


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf])
def test_a_nonfinite_norm_raises_torchs_error_or_spreads_nan_as_torch(bad, norm_type):
    p, t = grads_pair([bad, 4.0, 0.5])
    with pytest.raises(RuntimeError) as theirs:
        TU.clip_grad_norm_([t], 1.0, norm_type, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as ours:
        utils.clip_grad_norm_([p], 1.0, norm_type, error_if_nonfinite=True)
    assert str(ours.value) == str(theirs.value)
    np.testing.assert_array_equal(p.grad.data, t.grad.numpy())  # nothing clipped before the error
    total, total_t = utils.clip_grad_norm_([p], 1.0, norm_type), TU.clip_grad_norm_([t], 1.0, norm_type)
    np.testing.assert_array_equal(total.data, total_t.numpy())
    np.testing.assert_array_equal(p.grad.data, t.grad.numpy())  # NaN (or 0 where the norm is inf), as torch
    assert np.isnan(p.grad.data).any()


@pytest.mark.parametrize("max_norm", [-1.0, -10.0, 0.0])
def test_a_negative_or_zero_max_norm_is_no_error_as_in_torch(max_norm):
    p, t = grads_pair([3.0, 4.0])
    total, total_t = utils.clip_grad_norm_(p, max_norm), TU.clip_grad_norm_(t, max_norm)
    assert float(total.data) == float(total_t) == 5.0
    np.testing.assert_allclose(p.grad.data, t.grad.numpy(), rtol=1e-12, atol=0)
    if max_norm < 0:  # the coefficient is negative: the gradient turns round, in both
        assert (p.grad.data < 0).all()


def test_a_parameter_without_grad_is_skipped_as_torch():
    (p, t), (q, u) = grads_pair([3.0, 4.0]), grads_pair([12.0])
    q.grad, u.grad = None, None
    total, total_t = utils.clip_grad_norm_([q, p], 1.0), TU.clip_grad_norm_([u, t], 1.0)
    np.testing.assert_allclose(total.data, total_t.numpy(), rtol=1e-12)
    assert q.grad is None and u.grad is None
    np.testing.assert_allclose(p.grad.data, t.grad.numpy(), rtol=1e-12)
    assert float(utils.clip_grad_norm_([q], 1.0).data) == float(TU.clip_grad_norm_([u], 1.0)) == 0.0


# Accumulation


def mlp(framework):
    return framework.Sequential(framework.Linear(3, 4), framework.Tanh(), framework.Linear(4, 2))


def test_accumulated_gradients_equal_the_full_batch_and_torchs():
    tinypytorch.manual_seed(0)
    ours, theirs = mlp(nn), mlp(torch.nn).double()
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    x, t = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
    torch.nn.MSELoss()(theirs(torch.from_numpy(x)), torch.from_numpy(t)).backward()
    full_t = [p.grad.clone() for p in theirs.parameters()]
    theirs.zero_grad()
    k = 4
    for xb, tb in zip(np.split(x, k), np.split(t, k)):
        (nn.MSELoss()(ours(Variable(xb)), Variable(tb)) / k).backward()
        (torch.nn.MSELoss()(theirs(torch.from_numpy(xb)), torch.from_numpy(tb)) / k).backward()
    for p, p_t, g in zip(ours.parameters(), theirs.parameters(), full_t):
        np.testing.assert_allclose(p.grad.data, g.numpy(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, atol=1e-15)
