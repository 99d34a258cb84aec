import numpy as np
import pytest
import torch
from hypothesis import given

from reference import float_arrays, floats, torch_value_and_grads
from steploader import load_step

pytestmark = [pytest.mark.step04, pytest.mark.torch]
step = load_step(4)

U = 2.0 ** -53  # unit roundoff of float64


def composite(x):
    return step.Square()(step.Exp()(step.Square()(x)))


def composite_torch(t):
    return torch.square(torch.exp(torch.square(t)))


def third_derivative_of_composite(x):
    # f(x) = e^(2x^2): f' = 4x f, f'' = (4 + 16x^2) f, f''' = (48x + 64x^3) f
    return (48 * x + 64 * x ** 3) * np.exp(2 * x ** 2)


@given(float_arrays(-2.0, 2.0))
def test_central_difference_of_exp_is_exp_times_sinh_h_over_h(array):
    # In exact arithmetic (e^(x+h) - e^(x-h)) / 2h = e^x sinh(h)/h, so only rounding is
    # left: about u (|f| + |x f'|) / h relative to f' = f, at most ~3 * 1.1e-12 here.
    # A forward difference would be off by h/2 = 5e-5 relative and fail.
    h = 1e-4
    _, (grad,) = torch_value_and_grads(torch.exp, array)
    numerical = step.numerical_diff(step.Exp(), step.Variable(array))
    np.testing.assert_allclose(numerical, grad * np.sinh(h) / h, rtol=1e-10, atol=0)


@given(float_arrays(-100.0, 100.0))
def test_central_difference_of_square_is_exact_up_to_rounding(array):
    # ((x+h)^2 - (x-h)^2) / 2h = 2x exactly. Rounding x +- h, the squares, the subtraction
    # and the division adds at most about 3u (x^2 + h^2)/h + 4u|x|; we allow twice that.
    h = 1e-4
    _, (grad,) = torch_value_and_grads(torch.square, array)
    numerical = step.numerical_diff(step.Square(), step.Variable(array), eps=h)
    bound = 6 * U * (array ** 2 + h ** 2) / h + 8 * U * np.abs(array)
    assert np.all(np.abs(numerical - grad) <= bound)


@given(floats(-1.0, 1.0))
def test_composite_error_is_within_the_taylor_bound(value):
    # error <= max|f'''| h^2/6 over [x-h, x+h] + rounding; |f'''| grows with |x|, so its
    # maximum is at |x| + h. Evaluating f rounds about 7 times; 20 u (|f| + |x f'|)/h covers it.
    h = 1e-4
    f, (grad,) = torch_value_and_grads(composite_torch, np.array(value))
    truncation = abs(third_derivative_of_composite(abs(value) + h)) * h ** 2 / 6
    rounding = 20 * U * (abs(f) + abs(value * grad)) / h
    numerical = step.numerical_diff(composite, step.Variable(np.array(value)), eps=h)
    assert abs(numerical - grad) <= truncation + rounding


@pytest.mark.parametrize("value", [-1.0, -0.5, -0.1, 0.1, 0.3, 0.5, 1.0])
def test_composite_error_is_h_squared_over_6_times_f_third(value):
    # With h = 1e-3 the truncation error dominates rounding by a factor of about 1e5, and the
    # next Taylor term is ~h^2/20 * f^(5)/f''' ~ 1e-5 relative: the leading term must match to 0.1%.
    h = 1e-3
    _, (grad,) = torch_value_and_grads(composite_torch, np.array(value))
    error = step.numerical_diff(composite, step.Variable(np.array(value)), eps=h) - grad
    np.testing.assert_allclose(error, third_derivative_of_composite(value) * h ** 2 / 6, rtol=1e-3)


def test_numerical_diff_does_not_modify_its_input():
    array = np.array([0.5, -1.0])
    x = step.Variable(array)
    step.numerical_diff(composite, x)
    assert x.data is array
    np.testing.assert_array_equal(array, [0.5, -1.0])


def test_the_table_follows_the_exact_truncation_formulas_of_x_to_the_4():
    # For f = x^4 at x = 1/2: forward error 6x^2 h + 4x h^2 + h^3, central error 4x h^2,
    # plus rounding of about u R / h with R = |f| + |x f'| = 0.3125 (allow 4x).
    x, h_values = 0.5, step.h_values
    big = h_values >= 1e-4
    rounding = 4 * U * 0.3125 / h_values[big]
    h = h_values[big]
    assert np.all(np.abs(step.forward_errors[big] - (6 * x ** 2 * h + 4 * x * h ** 2 + h ** 3)) <= rounding)
    assert np.all(np.abs(step.central_errors[big] - 4 * x * h ** 2) <= rounding)


def test_the_table_shows_rounding_taking_over_for_tiny_h():
    best = np.argmin(step.central_errors)
    assert 1e-7 <= step.h_values[best] <= 1e-5  # near h* = (3uR/f''')^(1/3) ~ 2e-6
    assert step.central_errors[-1] > 1e5 * step.central_errors[best]  # h = 1e-12


def test_the_checks_choice_of_h():
    # the step claims: eps = 1e-4 misses the 1e-8 target (error ~8.8e-8), eps = 1e-5 meets it
    _, (grad,) = torch_value_and_grads(composite_torch, np.array(0.5))
    x = step.Variable(np.array(0.5))
    assert abs(step.numerical_diff(composite, x) - grad) > 1e-8
    assert abs(step.numerical_diff(composite, x, eps=1e-5) - grad) < 1e-9


@given(float_arrays(-10.0, 10.0))
def test_square_and_exp_are_unchanged_from_step_03(array):
    np.testing.assert_array_equal(step.Square()(step.Variable(array)).data, torch.square(torch.tensor(array)).numpy())
    np.testing.assert_allclose(step.Exp()(step.Variable(array)).data, torch.exp(torch.tensor(array)).numpy(),
                               rtol=1e-14, atol=0)


def test_the_table_is_reproducible_bit_for_bit():
    # the step's claim: x^4 via square(square(x)) on a one-element array uses only correctly
    # rounded operations, so the table equals plain IEEE multiplication of Python floats
    def fourth(v):
        return (v * v) * (v * v)

    x = 0.5
    forward = [abs((fourth(x + h) - fourth(x)) / h - 0.5) for h in step.h_values]
    central = [abs((fourth(x + h) - fourth(x - h)) / (2 * h) - 0.5) for h in step.h_values]
    np.testing.assert_array_equal(step.forward_errors, forward)
    np.testing.assert_array_equal(step.central_errors, central)
