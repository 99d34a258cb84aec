"""Step 24: sphere, Matyas and Goldstein-Price, differentiated by the package, against torch and maths."""
import collections

import numpy as np
import pytest
import torch
from hypothesis import given

import tinypytorch
from reference import floats, torch_value_and_grads
from steploader import load_step
from tinypytorch import Variable, no_grad
from tinypytorch.utils import gradient_check

pytestmark = [pytest.mark.step24, pytest.mark.torch]
step = load_step(24)

coordinate = floats(-2.0, 2.0)
FUNCTIONS = [step.sphere, step.matyas, step.goldstein_price]


def value_and_grad(f, a, b):
    x, y = Variable(np.array(a)), Variable(np.array(b))
    z = f(x, y)
    z.backward()
    return np.array([z.data, x.grad.data, y.grad.data])  # gradients are Variables (step 27)


def torch_value_and_grad(f, a, b):
    value, grads = torch_value_and_grads(f, a, b)
    return np.array([value, *grads])


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
@given(a=coordinate, b=coordinate)
def test_value_and_gradient_equal_torch(f, a, b):
    expected = torch_value_and_grad(f, a, b)
    # near a stationary point a partial derivative cancels to ~0; allow rounding at the scale of the rest
    np.testing.assert_allclose(value_and_grad(f, a, b), expected, rtol=1e-10, atol=1e-13 * np.abs(expected).max())


@given(a=coordinate, b=coordinate)
def test_sphere_and_matyas_gradients_equal_the_formulas(a, b):
    np.testing.assert_allclose(value_and_grad(step.sphere, a, b), [a * a + b * b, 2 * a, 2 * b], rtol=1e-15)
    expected = [0.26 * (a * a + b * b) - 0.48 * a * b, 0.52 * a - 0.48 * b, 0.52 * b - 0.48 * a]
    np.testing.assert_allclose(value_and_grad(step.matyas, a, b), expected, rtol=1e-12, atol=1e-15)


def test_goldstein_price_at_1_1_is_1876_with_gradient_minus_5376_8064():
    # f = A B with A = 1 + u^2 p, B = 30 + v^2 q (the step's hand computation, redone here)
    x = y = 1.0
    u, p = x + y + 1, 19 - 14 * x + 3 * x**2 - 14 * y + 6 * x * y + 3 * y**2
    v, q = 2 * x - 3 * y, 18 - 32 * x + 12 * x**2 + 48 * y - 36 * x * y + 27 * y**2
    A, B = 1 + u**2 * p, 30 + v**2 * q
    A_x = A_y = 2 * u * p + u**2 * (-14 + 6 * x + 6 * y)
    B_x = 4 * v * q + v**2 * (-32 + 24 * x - 36 * y)
    B_y = -6 * v * q + v**2 * (48 - 36 * x + 54 * y)
    expected = [A * B, A_x * B + A * B_x, A_y * B + A * B_y]
    assert expected == [1876.0, -5376.0, 8064.0]
    np.testing.assert_array_equal(value_and_grad(step.goldstein_price, 1.0, 1.0), expected)
    np.testing.assert_array_equal(torch_value_and_grad(step.goldstein_price, 1.0, 1.0), expected)


def test_goldstein_price_has_its_global_minimum_3_at_0_minus_1_with_zero_gradient():
    np.testing.assert_array_equal(value_and_grad(step.goldstein_price, 0.0, -1.0), [3.0, 0.0, 0.0])


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
@given(a=coordinate, b=coordinate)
def test_backward_passes_the_numerical_gradient_check(f, a, b):
    # Central differences err by about eps^2 |f'''| / 6. Goldstein-Price's third derivatives are large
    # next to its value and gradient (measured: error up to 2e-6 of max(|f|, |grad f|)), so near a
    # stationary point the tolerance must be relative to that scale, not to the partial derivative.
    scale = max(1.0, np.abs(torch_value_and_grad(f, a, b)).max())
    y = Variable(np.array(b))
    assert gradient_check(lambda x: f(x, y), np.array(a), rtol=1e-5, atol=1e-5 * scale)
    x = Variable(np.array(a))
    assert gradient_check(lambda y: f(x, y), np.array(b), rtol=1e-5, atol=1e-5 * scale)


def matyas_by_calls(x, y):
    """Matyas as it had to be written before step 20's operators (the page's demo, moved here)."""
    return tinypytorch.sub(tinypytorch.mul(0.26, tinypytorch.add(tinypytorch.pow(x, 2), tinypytorch.pow(y, 2))),
                           tinypytorch.mul(0.48, tinypytorch.mul(x, y)))


def test_matyas_written_with_function_calls_is_bit_for_bit_the_same():
    for a, b in [(1.0, 1.0), (0.3, -1.7), (-2.0, 0.25)]:
        x, y = Variable(np.array(a)), Variable(np.array(b))
        matyas_by_calls(x, y).backward()
        np.testing.assert_array_equal([x.grad.data, y.grad.data], value_and_grad(step.matyas, a, b)[1:])


def test_goldstein_price_graph_has_one_function_per_operator_of_the_formula():
    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
    counts = collections.Counter(type(f).__name__ for f in step.functions_in_graph(step.goldstein_price(x, y)))
    # counted by hand in the formula: first factor 6 +, 2 -, 7 *, 3 **; second 4 +, 3 -, 9 *, 3 **; one * between
    assert counts == {"Add": 10, "Sub": 5, "Mul": 17, "Pow": 6}


def test_the_functions_evaluate_on_grids_element_by_element():
    grid = np.linspace(-2.0, 2.0, 7)
    gx, gy = np.meshgrid(grid, grid)
    for f in FUNCTIONS:
        with no_grad():
            values = f(Variable(gx), Variable(gy)).data
        expected = [[f(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)).item()
                     for a, b in zip(row_x, row_y)] for row_x, row_y in zip(gx, gy)]
        np.testing.assert_allclose(values, expected, rtol=1e-13)
