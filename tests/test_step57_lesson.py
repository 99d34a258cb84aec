"""Step 57's lesson: the exercises' solutions (a frozen first layer, predictions from a no_grad generator, no_grad
entered in a worker thread), checked against torch doing the same."""
import numpy as np
import pytest
import torch

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step57, pytest.mark.torch]
step = load_step(57)


def twins():
    ours = tp.nn.Sequential(tp.nn.Linear(2, 3), tp.nn.Tanh(), tp.nn.Linear(3, 1)).double()
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).double()
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_freezing_the_first_layer_leaves_torchs_gradients_on_the_last():
    ours, theirs = twins()
    x = [[0.5, -1.0], [2.0, 0.25]]
    names = step.trained_names(ours, tp.tensor(x, dtype=tp.float64))
    for p in theirs[0].parameters():
        p.requires_grad_(False)
    theirs(torch.tensor(x, dtype=torch.float64)).sum().backward()
    assert names == [n for n, p in theirs.named_parameters() if p.grad is not None] == ["2.weight", "2.bias"]
    for (name, p), p_t in zip(ours.named_parameters(), theirs.parameters()):
        assert (p.grad is None) == (p_t.grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12)


def test_predictions_record_nothing_and_the_caller_between_records_as_torch():
    ours, theirs = twins()

    @torch.no_grad()
    def torch_predictions(model, batches):
        for batch in batches:
            yield model(batch)

    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 2)) for _ in range(3)]
    got = step.predictions(ours, [tp.tensor(b) for b in batches])
    expected = torch_predictions(theirs, [torch.from_numpy(b) for b in batches])
    for out, out_t, batch in zip(got, expected, batches):
        assert out.requires_grad is out_t.requires_grad is False
        between, between_t = ours(tp.tensor(batch)), theirs(torch.from_numpy(batch))
        assert between.requires_grad is between_t.requires_grad is True
        np.testing.assert_allclose(out.data, out_t.numpy(), rtol=1e-12)


def test_no_grad_in_the_worker_records_nothing_and_in_the_main_thread_is_not_enough_as_in_torch():
    ours, theirs = twins()
    x = np.array([[1.0, 2.0], [-0.5, 3.0]])
    inside = step.evaluate_in_thread(ours, tp.tensor(x))
    inside_t = step.evaluate_in_thread(theirs, torch.from_numpy(x), fw=torch)  # the solution, run on torch
    assert inside.requires_grad is inside_t.requires_grad is False
    outside = step.evaluate_from_outside(ours, tp.tensor(x))
    outside_t = step.evaluate_from_outside(theirs, torch.from_numpy(x), fw=torch)
    assert outside.requires_grad is outside_t.requires_grad is True
    np.testing.assert_allclose(inside.data, inside_t.numpy(), rtol=1e-12)
