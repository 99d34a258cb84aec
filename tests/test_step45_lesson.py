"""Step 45's lesson: the exercises' solutions (a minimal dense layer on a concatenation; the running mean after one
update, which a checkpointed BatchNorm1d keeps and PyTorch's overshoots), checked against torch.cat and
torch.nn.BatchNorm1d, and against the update worked out here."""
import numpy as np
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from hypothesis import given
from hypothesis import strategies as st

from reference import assert_close_to_torch
from steploader import load_step
from tinypytorch import Parameter, Variable
from tinypytorch.layers import BatchNorm1d
from tinypytorch.utils.checkpoint import checkpoint

pytestmark = [pytest.mark.step45, pytest.mark.torch]
step = load_step(45)


# ----- exercise 1: a minimal dense layer -----------------------------------------------------------------------

def dense_case(widths, out_features, rows, seed, weighted=True):
    """Inputs of the given widths, a weight W and the loss's weights w (ones for a plain sum)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((rows, width)) for width in widths]
    weight = rng.standard_normal((out_features, sum(widths)))
    w = rng.standard_normal((rows, out_features)) if weighted else np.ones((rows, out_features))
    return arrays, weight, w


def dense_pass(arrays, weight, w):
    """Values and gradients (each input, the weight) of sum(w * dense_features(features, W)), ours and torch's."""
    features, W = [Variable(a.copy()) for a in arrays], Parameter(weight.copy())
    y = step.dense_features(features, W)
    (y * w).sum().backward()
    ours = [y.data] + [x.grad.data for x in features] + [W.grad.data]
    features_t = [torch.tensor(a, requires_grad=True) for a in arrays]
    W_t = torch.tensor(weight, requires_grad=True)
    y_t = torch.relu(torch.cat(features_t, 1) @ W_t.T)
    (y_t * torch.from_numpy(w)).sum().backward()
    theirs = [y_t.detach().numpy()] + [x.grad.numpy() for x in features_t] + [W_t.grad.numpy()]
    return ours, theirs


@pytest.mark.parametrize("seed", [8, 0, 1])
def test_dense_features_on_the_blocks_input_and_two_outputs_gives_torch_cats_gradients_of_the_sum(seed):
    widths = [step.IN_FEATURES, step.GROWTH, step.GROWTH]
    ours, theirs = dense_pass(*dense_case(widths, step.GROWTH, step.BATCH, seed, weighted=False))
    assert [g.shape for g in ours[1:4]] == [(step.BATCH, width) for width in widths]
    assert 0 < np.count_nonzero(ours[0]) < ours[0].size  # the relu cuts some outputs and keeps others
    for g, g_t in zip(ours, theirs, strict=True):
        assert_close_to_torch(g, g_t)


@given(widths=st.lists(st.integers(1, 5), min_size=1, max_size=4), out_features=st.integers(1, 4),
       rows=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_dense_features_values_and_gradients_equal_torchs(widths, out_features, rows, seed):
    ours, theirs = dense_pass(*dense_case(widths, out_features, rows, seed))
    for g, g_t in zip(ours, theirs, strict=True):
        assert_close_to_torch(g, g_t)


@pytest.mark.parametrize("widths", [[2, 3, 1], [4], [1, 1, 1, 1]])
def test_each_inputs_gradient_is_its_slice_of_the_concatenations(widths):
    # d/dx sum(w * relu(x W^T)) = (w * [x W^T > 0]) W, cut into the inputs' columns
    arrays, weight, w = dense_case(widths, 4, 5, seed=3)
    ours, _ = dense_pass(arrays, weight, w)
    x = np.concatenate(arrays, axis=1)
    g = (w * (x @ weight.T > 0)) @ weight
    for got, expected in zip(ours[1:-1], np.split(g, np.cumsum(widths)[:-1], axis=1), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    # and W's: sum over rows of (w * [x W^T > 0])^T x
    np.testing.assert_allclose(ours[-1], (w * (x @ weight.T > 0)).T @ x, rtol=1e-12, atol=1e-14)


# ----- exercise 2: one update of the running mean --------------------------------------------------------------

def torch_norm(start, momentum):
    norm = torch.nn.BatchNorm1d(start.size, momentum=momentum, dtype=torch.float64)
    with torch.no_grad():
        norm.running_mean.copy_(torch.from_numpy(start))
    return norm


def batch(seed, features=4):
    return np.random.default_rng(seed).normal([3.0, -1.0, 0.5, 2.0][:features], 2.0, (6, features))


@pytest.mark.parametrize("momentum", [0.1, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_update_is_torchs_running_mean_after_one_plain_batch(momentum, seed):
    start, x0 = np.random.default_rng(seed + 10).standard_normal(4), batch(seed)
    norm_t = torch_norm(start, momentum)
    norm_t(torch.tensor(x0))
    np.testing.assert_allclose(step.one_update(start, x0, momentum), norm_t.running_mean.numpy(), rtol=1e-13,
                               atol=1e-15)
    # r + m (mean - r): the running mean moves the fraction m of the way to the batch's mean
    np.testing.assert_allclose(step.one_update(start, x0, momentum), start + momentum * (x0.mean(axis=0) - start),
                               rtol=1e-13, atol=1e-15)


def test_one_update_uses_momentum_0_1_by_default_as_batchnorm():
    start, x0 = np.ones(4), batch(2)
    norm = BatchNorm1d(4)
    norm.running_mean[...] = start
    norm(Variable(x0))
    np.testing.assert_allclose(step.one_update(start, x0), norm.running_mean, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_checkpointed_our_running_mean_is_one_update_and_torchs_two(momentum, use_reentrant):
    x0, start = batch(3), np.ones(4)  # from 1, not 0: one update and two differ in every feature
    norm = BatchNorm1d(4, momentum=momentum)
    norm.running_mean[...] = start
    checkpoint(norm, Variable(x0.copy()), use_reentrant=use_reentrant).sum().backward()
    norm_t = torch_norm(start, momentum)
    torch_checkpoint.checkpoint(norm_t, torch.tensor(x0, requires_grad=True), use_reentrant=use_reentrant) \
        .sum().backward()
    once = step.one_update(start, x0, momentum)
    twice = step.one_update(once, x0, momentum)
    assert np.all(np.abs(twice - once) > 1e-3)
    np.testing.assert_allclose(norm.running_mean, once, rtol=1e-13)
    np.testing.assert_allclose(norm_t.running_mean.numpy(), twice, rtol=1e-13)
    # two updates towards the same mean: the fraction 1 - (1 - m)^2 of the way
    mean = x0.mean(axis=0)
    np.testing.assert_allclose(twice, start + (1 - (1 - momentum) ** 2) * (mean - start), rtol=1e-13)
    assert norm.num_batches_tracked == 1 and norm_t.num_batches_tracked.item() == 2


def test_the_pages_norms_moved_once_and_twice_from_1_towards_the_blocks_input():
    mean = step.BLOCK_INPUT.mean(axis=0)
    np.testing.assert_allclose(step.norm.running_mean, 0.9 + 0.1 * mean, rtol=1e-13)
    np.testing.assert_allclose(step.norm_t.running_mean.numpy(), 0.81 + 0.19 * mean, rtol=1e-13)
    np.testing.assert_allclose(step.once, 0.9 + 0.1 * mean, rtol=1e-13)
