"""Step 26: the Taylor-series sin and gradient descent on Rosenbrock, against torch and maths."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import get_dot_graph
from reference import floats

pytestmark = [pytest.mark.step26, pytest.mark.torch]
step = load_step(26)

thresholds = st.sampled_from([1e-1, 1e-4, 1e-8, 1e-12, 1e-16])


def taylor_terms(x_max, threshold):
    """How many terms my_sin sums: up to the first with |x|^(2i+1) / (2i+1)! < threshold."""
    i = 0
    while x_max ** (2 * i + 1) / math.factorial(2 * i + 1) >= threshold:
        i += 1
    return i + 1


def sin_and_cos_polynomials(x, n):
    """The first n terms of the Taylor series of sin, and their derivative: n terms of cos's series."""
    value = sum((-1) ** i / math.factorial(2 * i + 1) * x ** (2 * i + 1) for i in range(n))
    derivative = sum((-1) ** i / math.factorial(2 * i) * x ** (2 * i) for i in range(n))
    return value, derivative


@given(x=floats(-5.0, 5.0), threshold=thresholds)
def test_my_sin_value_and_grad_equal_torch(x, threshold):
    v = Variable(np.array(x))
    y = step.my_sin(v, threshold)
    y.backward()
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = step.my_sin(t, threshold)
    yt.backward()
    # Near a zero of sin (or cos) the series cancels: terms as large as sinh|x| (cosh|x|) add up to a small value,
    # so a last-bit difference between NumPy's pow and torch's grows to about eps * cosh|x| in the sum
    bound = 16 * np.finfo(np.float64).eps * np.cosh(x)
    np.testing.assert_allclose([y.data, v.grad], [yt.item(), t.grad.item()], rtol=1e-12, atol=bound)


@given(x=floats(-5.0, 5.0), threshold=thresholds)
def test_my_sin_is_the_truncated_series_and_its_grad_the_truncated_cos_series(x, threshold):
    n = taylor_terms(abs(x), threshold)
    value, derivative = sin_and_cos_polynomials(x, n)
    v = Variable(np.array(x))
    y = step.my_sin(v, threshold)
    y.backward()
    # the terms reach 5^5/5! ~ 26 before cancelling, so allow rounding at that scale
    np.testing.assert_allclose([y.data, v.grad], [value, derivative], rtol=1e-12, atol=1e-14)
    assert get_dot_graph(y).count("shape=box") == 3 * n - 1  # Pow, Mul per term; an Add joins each new term


@given(a=arrays(np.float64, st.integers(1, 5), elements=floats(-3.0, 3.0)), threshold=thresholds)
def test_my_sin_on_an_array_sums_until_every_element_has_converged(a, threshold):
    n = taylor_terms(float(np.abs(a).max()), threshold)
    value, derivative = sin_and_cos_polynomials(a, n)
    v = Variable(a.copy())
    y = step.my_sin(v, threshold)
    y.sum().backward()
    np.testing.assert_allclose(y.data, value, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(v.grad, derivative, rtol=1e-12, atol=1e-14)
    assert y.shape == a.shape


def test_my_sin_error_at_pi_over_4_is_about_the_first_omitted_term():
    x = math.pi / 4
    for threshold in (1e-1, 1e-4, 1e-8):
        n = taylor_terms(x, threshold)
        v = Variable(np.array(x))
        y = step.my_sin(v, threshold)
        y.backward()
        next_sin, next_cos = x ** (2 * n + 1) / math.factorial(2 * n + 1), x ** (2 * n) / math.factorial(2 * n)
        assert 0.9 * next_sin < abs(y.data - math.sin(x)) < next_sin  # alternating series: below the next term
        assert 0.9 * next_cos < abs(v.grad.data - math.cos(x)) < next_cos


@pytest.mark.parametrize("x", [10.0, 20.0, 30.0, 40.0])
def test_my_sin_rounding_error_for_large_x_is_of_the_size_of_the_largest_term(x):
    """The step's table: with n terms whose largest is L, the error is below n L eps and, for these x,
    above L eps / 100 (rounding, not truncation: the threshold is 1e-20). Its exact value differs
    between CPUs, which round NumPy's power function differently in the last bit."""
    n = taylor_terms(x, 1e-20)
    largest = max(x ** (2 * i + 1) / math.factorial(2 * i + 1) for i in range(n))
    y = step.my_sin(Variable(np.array(x)), threshold=1e-20)
    assert (get_dot_graph(y).count("shape=box") + 1) // 3 == n  # the step counts terms from the graph
    eps = np.finfo(np.float64).eps
    assert 0.01 * largest * eps < abs(y.data - math.sin(x)) <= n * largest * eps


@given(a=arrays(np.float64, st.integers(0, 2).map(lambda d: (3,) * d), elements=floats(-10.0, 10.0)))
def test_exact_sin_and_cos_values_and_grads_equal_torch(a):
    for ours, theirs in [(tinypytorch.sin, torch.sin), (tinypytorch.cos, torch.cos)]:
        x, t = Variable(a.copy()), torch.tensor(a, requires_grad=True)
        y, yt = ours(x), theirs(t)
        y.sum().backward()
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_exact_sin_is_one_function_and_its_grad_is_cos():
    x = Variable(np.linspace(-4.0, 4.0, 9))
    y = tinypytorch.sin(x)
    y.sum().backward()
    assert get_dot_graph(y).count("shape=box") == 1
    np.testing.assert_array_equal(x.grad, np.cos(x.data))


# ----- Rosenbrock and gradient descent --------------------------------------------------------

@given(a=floats(-2.0, 2.0), b=floats(-1.0, 3.0))
def test_rosenbrock_gradient_equals_torch_and_the_formula(a, b):
    x0, x1 = Variable(np.array(a)), Variable(np.array(b))
    step.rosenbrock(x0, x1).backward()
    t0, t1 = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    step.rosenbrock(t0, t1).backward()
    np.testing.assert_allclose([x0.grad, x1.grad], [t0.grad.item(), t1.grad.item()], rtol=1e-12, atol=1e-12)
    formula = [-400 * a * (b - a * a) - 2 * (1 - a), 200 * (b - a * a)]
    np.testing.assert_allclose([x0.grad, x1.grad], formula, rtol=1e-10, atol=1e-10)


@given(a=floats(-0.8, 0.8), b=floats(-0.5, 1.5), lr=st.sampled_from([0.0005, 0.001]))
def test_gradient_descent_iterates_equal_torch_from_random_starts(a, b, lr):
    path = step.gradient_descent((a, b), lr=lr, tolerance=0.0, max_iterations=50)
    assert path.shape == (51, 2)
    np.testing.assert_allclose(path, step.torch_descent((a, b), lr, 50), rtol=1e-12, atol=1e-15)


def test_the_steps_descent_equals_torch_for_1000_iterations_and_stops_near_the_minimum():
    path = step.path
    np.testing.assert_allclose(path[:1001], step.torch_descent((0.0, 2.0), 0.001, 1000), rtol=1e-12)
    np.testing.assert_array_equal(path[1], [0.002, 1.6])  # (0, 2) - 0.001 * (-2, 400)

    def grad_norm(p):
        a, b = p
        return math.hypot(-400 * a * (b - a * a) - 2 * (1 - a), 200 * (b - a * a))

    assert grad_norm(path[-1]) < 1e-3 <= grad_norm(path[-2])  # stopped at the first point that qualifies
    assert math.hypot(path[-1, 0] - 1, path[-1, 1] - 1) < 0.003
    assert 10_000 <= len(path) - 1 <= 50_000


def test_gradient_descent_stops_after_max_iterations():
    path = step.gradient_descent((0.0, 2.0), max_iterations=7)
    assert path.shape == (8, 2)
    np.testing.assert_allclose(path, step.torch_descent((0.0, 2.0), 0.001, 7), rtol=1e-12)


def test_the_hessian_in_the_step_is_torchs_at_the_minimum():
    point = torch.tensor([1.0, 1.0], dtype=torch.float64)
    hessian = torch.autograd.functional.hessian(lambda p: step.rosenbrock(p[0], p[1]), point)
    np.testing.assert_array_equal(step.hessian, hessian.numpy())
