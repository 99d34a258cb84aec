"""Step 18's lesson: what the page measures and draws, the demos moved here from the page (a seed kept would be
stale), and the exercises' solutions (backward_keeping, enable_grad) against PyTorch."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step18, pytest.mark.torch]
step = load_step(18)


def test_the_measured_figures_are_whole_arrays_of_8_mb():
    assert round(step.bytes_held_after_backward(True) / 1e6) == 9 * 8  # leaf, seven intermediates, the seed
    assert round(step.bytes_held_after_backward(False) / 1e6) == 8  # the leaf's gradient
    held, peak = step.forward_memory()
    assert round(held / 1e6) == round(peak / 1e6) == 8 * 8
    with step.no_grad():
        held, peak = step.forward_memory()
    assert round(held / 1e6) == 8 and round(peak / 1e6) == 16


def test_a_seed_kept_on_y_would_be_stale_when_y_is_reused():
    # y = 2x, y.backward(), then z = 3y, z.backward(): x.grad = 2 + 6 = 8, as torch; a seed left on y would
    # add 1 to the 3 flowing back from z and give 2 + 2 * 4 = 10
    xt = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    yt = xt + xt
    yt.backward(retain_graph=True)
    (yt + yt + yt).backward()
    for keep_seed, expected in [(False, xt.grad.item()), (True, 10.0)]:
        x = step.Variable(np.array(1.0))
        y = step.add(x, x)
        y.backward()
        assert y.grad is None
        if keep_seed:
            y.grad = np.ones_like(y.data)
        step.add(step.add(y, y), y).backward()
        assert x.grad == expected
    assert xt.grad.item() == 8.0


@given(floats(-3, 3), floats(-3, 3))
def test_backward_keeping_keeps_t_as_torchs_retain_grad_does(u, v):
    x0, x1 = step.Variable(np.array(u)), step.Variable(np.array(v))
    t = step.square(step.add(x0, x1))
    y = step.add(x0, t)
    step.backward_keeping(y, keep=[t])
    x0t = torch.tensor(u, dtype=torch.float64, requires_grad=True)
    x1t = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    tt = (x0t + x1t) ** 2
    tt.retain_grad()
    yt = x0t + tt
    yt.backward()
    np.testing.assert_allclose(t.grad, tt.grad.item(), rtol=1e-12)
    np.testing.assert_allclose([x0.grad, x1.grad], [x0t.grad.item(), x1t.grad.item()], rtol=1e-12, atol=1e-300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert yt.grad is None
    assert y.grad is None  # not in keep: dropped, as torch drops yt's


def test_backward_keeping_nothing_is_the_default():
    x0, x1, t, y = step.graph()
    step.backward_keeping(y, keep=[])
    assert (y.grad, t.grad, float(x0.grad), float(x1.grad)) == (None, None, 2.0, 1.0)


@given(floats(-5, 5))
def test_enable_grad_inside_no_grad_records_as_torch_does(value):
    x = step.Variable(np.array(value))
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    with step.no_grad(), torch.no_grad():
        off, off_t = step.square(x), xt**2
        with step.enable_grad(), torch.enable_grad():
            on, on_t = step.square(x), xt**2
        assert not step.Config.enable_backprop
    assert off.creator is None and off_t.grad_fn is None
    on.backward()
    on_t.backward()
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-12, atol=1e-300)
    assert step.Config.enable_backprop
