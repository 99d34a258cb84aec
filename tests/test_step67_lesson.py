"""Step 67's lesson: the exercises' solutions (the plain step's peak event, the sawtooth's teeth), checked against
counts worked out by hand and torch's pack hook."""
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step67, pytest.mark.torch]
step = load_step(67)


def test_peak_event_is_the_first_weight_gradient():
    """By hand: forward holds N activations; backward's first Linear accumulates a WIDTH x WIDTH gradient on top."""
    event = step.peak_event
    assert event.kind == "accumulated" and event.bytes == step.WIDTH * step.WIDTH * 8
    assert event.held == step.N * step.ACT + step.WIDTH * step.WIDTH * 8


def test_teeth_are_the_checkpointed_segments():
    for k in (2, 4, 8):
        assert step.teeth(k) == k - 1  # every segment but the last runs again


def test_forward_saves_as_torch():
    """The plain step saves what torch's pack hook sees for the same MLP: as many tensors."""
    seen = []
    twin = step.torch_twin(step.mlp())
    x = torch.tensor(step.X, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        torch.nn.functional.mse_loss(twin(x), torch.from_numpy(step.TARGET))
    assert step.saved_counts(step.TIMELINES["plain"])[0] == len(seen)
