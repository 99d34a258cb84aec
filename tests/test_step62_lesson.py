"""Step 62's lesson: the exercises' solutions (the scale's trajectory by hand, the largest safe float16 scale),
checked against torch.amp.GradScaler("cpu") and float16 arithmetic done in the open."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step62, pytest.mark.torch]
step = load_step(62)


def torch_trajectory(found_infs, init, interval):
    """The scale after each update of torch's scaler, fed a gradient that is inf where found_infs says."""
    p = torch.zeros(1, requires_grad=True)
    opt, scaler = torch.optim.SGD([p], lr=0.0), torch.amp.GradScaler("cpu", init_scale=init, growth_interval=interval)
    out = []
    for found in found_infs:
        scaler.scale(p.sum()).backward()
        if found:
            p.grad.fill_(float("inf"))
        scaler.step(opt)
        scaler.update()
        out.append(scaler.get_scale())
        opt.zero_grad()
    return out


@pytest.mark.parametrize("seed,init,interval", [(0, 2.0**16, 3), (1, 4.0, 1), (2, 1024.0, 5)])
def test_trajectory_by_hand_equals_torchs(seed, init, interval):
    found_infs = list(np.random.default_rng(seed).random(30) < 0.3)
    assert step.trajectory(found_infs, init, interval) == torch_trajectory(found_infs, init, interval)


@pytest.mark.parametrize("max_grad", [0.3, 1.0, 7e-5, 1234.5, 65504.0])
def test_safe_scale_is_the_largest_power_of_two_that_stays_finite(max_grad):
    scale = step.safe_scale(max_grad)
    assert np.log2(scale) == int(np.log2(scale))
    assert np.isfinite(np.float16(max_grad * scale))
    assert np.float16(max_grad * scale * 2) > 65504 or np.isinf(np.float16(max_grad * scale * 2))
