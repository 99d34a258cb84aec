"""Step 56's lesson: the exercises' solutions (clipping by hand, accumulating unequal micro-batches, clipping once
rather than per micro-batch), checked against torch doing the same."""
import math

import numpy as np
import pytest
import torch
import torch.nn.utils as TU

import tinypytorch
from steploader import load_step

pytestmark = [pytest.mark.step56, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
step = load_step(56)


def torch_params(grads):
    params = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(np.array(g, dtype=np.float64))
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clipping_by_hand_gives_torchs_norm_and_gradients(norm_type, max_norm):
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=(3, 4)), rng.normal(size=5), rng.normal(size=(2, 1, 2))]
    clipped, total = step.clip_by_hand(grads, max_norm, norm_type)
    params = torch_params(grads)
    total_t = TU.clip_grad_norm_(params, max_norm, norm_type)
    np.testing.assert_allclose(total, total_t.item(), rtol=1e-12)
    for c, p in zip(clipped, params, strict=True):
        np.testing.assert_allclose(c, p.grad.numpy(), rtol=1e-12, atol=0)


def torch_twin():
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    twin.load_state_dict({k: torch.from_numpy(v.data.copy()) for k, v in step.model.state_dict().items()})
    return twin


def torch_full_batch(twin, max_norm=None):
    twin.zero_grad()
    torch.nn.functional.mse_loss(twin(torch.from_numpy(step.x)), torch.from_numpy(step.t)).backward()
    if max_norm is not None:
        TU.clip_grad_norm_(twin.parameters(), max_norm)
    return [p.grad.numpy().copy() for p in twin.parameters()]


@pytest.mark.parametrize("sizes", [[7, 4, 1], [5, 5, 2], [1] * 12, [12], [3, 9]])
def test_accumulating_unequal_micro_batches_gives_torchs_full_batch(sizes):
    expected = torch_full_batch(torch_twin())
    for got, want in zip(step.accumulate(step.model, step.x, step.t, sizes), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_dividing_by_k_is_what_torch_gets_wrong_too():
    """The counterexample the solution fixes: torch with each mean loss / k differs from its full batch."""
    twin, cuts = torch_twin(), [5, 10]
    expected = torch_full_batch(twin)
    twin.zero_grad()
    for xb, tb in zip(np.split(step.x, cuts), np.split(step.t, cuts)):
        (torch.nn.functional.mse_loss(twin(torch.from_numpy(xb)), torch.from_numpy(tb)) / 3).backward()
    assert max(np.abs(p.grad.numpy() - e).max() for p, e in zip(twin.parameters(), expected)) > 1e-3


def test_clipping_once_equals_torchs_clipped_full_batch_and_per_micro_batch_does_not():
    even = list(zip(np.split(step.x, 4), np.split(step.t, 4)))
    once = step.clip_by_hand(step.run(step.model, even, 4)[0], 0.02)[0]
    expected = torch_full_batch(torch_twin(), max_norm=0.02)
    for got, want in zip(once, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-15)
    twin = torch_twin()  # torch clipping after every micro-batch: the same wrong answer as the solution's
    twin.zero_grad()
    for xb, tb in even:
        (torch.nn.functional.mse_loss(twin(torch.from_numpy(xb)), torch.from_numpy(tb)) / 4).backward()
        TU.clip_grad_norm_(twin.parameters(), 0.02)
    each = step.clip_each(step.model, even, 4, 0.02)
    for got, want in zip(each, twin.parameters(), strict=True):
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-10, atol=1e-15)
    assert max(np.abs(a - b).max() for a, b in zip(each, once)) > 1e-3
