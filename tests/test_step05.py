import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import array_shapes, arrays

from reference import floats, square_exp_square, torch_square_exp_square_grads
from steploader import load_step

pytestmark = [pytest.mark.step05, pytest.mark.torch]
step = load_step(5)

# the same multiplications as torch's backward formulas; only e^a may differ in the last bit
RTOL = 1e-14


@given(arrays(np.float64, array_shapes(min_dims=0, max_dims=3), elements=floats(-3.0, 3.0)))
def test_backward_by_hand_equals_torch_for_every_intermediate(array):
    a = array ** 2  # the forward values the sweep needs, computed here independently
    b = np.exp(a)
    ours = step.backward_by_hand(array, a, b)
    for mine, theirs in zip(ours, torch_square_exp_square_grads(array)):
        np.testing.assert_allclose(mine, theirs, rtol=RTOL, atol=0)


def test_the_worked_example_at_one_half():
    g_b, g_a, g_x = torch_square_exp_square_grads(np.array(0.5))
    np.testing.assert_allclose([step.g_b, step.g_a, step.g_x], [g_b, g_a, g_x], rtol=RTOL, atol=0)
    # by hand: g_b = 2b = 2e^(1/4), g_a = e^(1/4) g_b = 2e^(1/2), g_x = 2x g_a = g_a
    np.testing.assert_allclose([step.g_b, step.g_a, step.g_x], [2 * np.e ** 0.25, 2 * np.e ** 0.5, 2 * np.e ** 0.5],
                               rtol=RTOL)


def test_forward_mode_order_gives_the_same_derivative():
    _, _, g_x = torch_square_exp_square_grads(np.array(0.5))
    np.testing.assert_allclose(step.dy_dx, g_x, rtol=RTOL, atol=0)


def test_the_worked_examples_forward_values_equal_torch():
    # the module's x, a, b were last set by the check cell's array example; recompute at 0.5
    _, a, b, y = square_exp_square(step, np.array(0.5))
    t = torch.tensor(0.5, dtype=torch.float64)
    np.testing.assert_allclose([a.data, b.data, y.data],
                               [torch.square(t), torch.exp(torch.square(t)), torch.square(torch.exp(torch.square(t)))],
                               rtol=RTOL, atol=0)


@given(floats(-1.0, 1.0))
def test_backprop_agrees_with_the_central_difference(value):
    # independent of torch: the central difference with eps=1e-5 is within ~1e-8 of f' on
    # [-1, 1] (|f'''| <= 112 e^2 ~ 830, so h^2/6 |f'''| <= 1.4e-8; rounding ~1e-10)
    x = np.array(value)
    _, _, g_x = step.backward_by_hand(x, x ** 2, np.exp(x ** 2))
    numerical = step.numerical_diff(step.f, step.Variable(x), eps=1e-5)
    assert abs(g_x - numerical) <= 2e-8
