"""Step 05's lesson: the exercises' solutions (a reverse sweep by hand for e^((e^x)^2), forward mode for the
page's chain) against PyTorch's reverse and forward modes, a central difference and the closed form."""
import numpy as np
import pytest
import torch
from hypothesis import given

from reference import float_arrays, floats
from steploader import load_step

pytestmark = [pytest.mark.step05, pytest.mark.torch]
step = load_step(5)


@given(floats(-2.0, 1.0))
def test_reverse_sweep_of_exp_square_exp_equals_torch(value):
    t = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    tb = torch.exp(t)
    tc = torch.square(tb)
    tb.retain_grad()
    tc.retain_grad()
    torch.exp(tc).backward()
    np.testing.assert_allclose(step.backward_exp_square_exp(np.array(value)),
                               [tc.grad.item(), tb.grad.item(), t.grad.item()], rtol=1e-13)


@pytest.mark.parametrize("value", [-1.0, 0.1, 0.8])
def test_reverse_sweep_of_exp_square_exp_is_the_closed_form_and_the_central_difference(value):
    # y = exp(e^(2x)): dy/dx = 2 e^(2x) y
    y = lambda v: np.exp(np.exp(2 * v))  # noqa: E731
    _, _, g_x = step.backward_exp_square_exp(np.array(value))
    np.testing.assert_allclose(g_x, 2 * np.exp(2 * value) * y(value), rtol=1e-14)
    h = 1e-5
    np.testing.assert_allclose(g_x, (y(value + h) - y(value - h)) / (2 * h), rtol=1e-8)


@given(float_arrays(-2.0, 2.0))
def test_forward_mode_equals_torch_func_jvp_for_every_intermediate(array):
    def chain(t):
        ta = torch.square(t)
        tb = torch.exp(ta)
        return ta, tb, torch.square(tb)

    t = torch.tensor(array)
    _, tangents = torch.func.jvp(chain, (t,), (torch.ones_like(t),))
    for mine, theirs in zip(step.forward_mode(array), tangents):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-14, atol=0)


@given(float_arrays(-2.0, 2.0))
def test_forward_and_reverse_mode_give_the_same_dy_dx(array):
    _, _, g_x = step.backward_by_hand(array, array ** 2, np.exp(array ** 2))
    np.testing.assert_allclose(step.forward_mode(array)[2], g_x, rtol=1e-14, atol=0)
