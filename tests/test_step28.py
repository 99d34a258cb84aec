"""Step 28: Newton's method with autodiff second derivatives, Hessians, and double backprop."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from reference import floats

pytestmark = [pytest.mark.step28, pytest.mark.torch]
step = load_step(28)


# away from x = +-1/sqrt(3), where f'' = 0 and a step is arbitrarily long
start = st.one_of(floats(0.7, 3.0), floats(-3.0, -0.7), floats(-0.45, 0.45))


@given(x0=start)
def test_newton_iterates_equal_torch(x0):
    np.testing.assert_allclose(step.newton(step.f, x0, 6), step.torch_newton(step.f, x0, 6), rtol=1e-10, atol=1e-14)


@given(x0=start)
def test_one_newton_step_is_x_minus_f_prime_over_f_second(x0):
    expected = x0 - (4 * x0**3 - 4 * x0) / (12 * x0**2 - 4)
    np.testing.assert_allclose(step.newton(step.f, x0, 1)[1], expected, rtol=1e-13, atol=1e-15)


def test_newton_from_2_converges_quadratically_to_1_in_seven_iterations():
    iterates = step.newton(step.f, 2.0, 7)
    errors = [abs(x - 1) for x in iterates]
    assert errors[-1] == 0.0 and errors[-2] > 0.0
    for before, after in zip(errors[3:6], errors[4:7]):  # near 1: e_(k+1) = f'''(1) / (2 f''(1)) e_k^2 = 1.5 e_k^2
        assert after == pytest.approx(1.5 * before**2, rel=0.07)


def test_newton_from_0_4_converges_to_the_maximum_at_0():
    iterates = step.newton(step.f, 0.4, 5)
    assert iterates[-1] == 0.0 and 12 * 0.4**2 - 4 < 0


@given(x0=floats(-2.0, 2.0))
def test_gradient_descent_iterates_follow_the_update_rule(x0):
    x = x0
    expected = [x]
    for _ in range(5):
        x = x - 0.01 * (4 * x**3 - 4 * x)
        expected.append(x)
    np.testing.assert_allclose(step.gradient_descent(step.f, x0, 5), expected, rtol=1e-13, atol=1e-15)


def test_the_tables_iteration_counts():
    # gradient descent contracts the error by about 1 - 0.01 * f''(1) = 0.92 per step near x = 1
    x, count = 2.0, 0
    while abs(x - 1) >= 1e-6:
        x, count = x - 0.01 * (4 * x**3 - 4 * x), count + 1
    assert step.iterations_to(step.gradient_descent(step.f, 2.0, 300), 1e-6) == count
    assert step.iterations_to(step.newton(step.f, 2.0, 7), 1e-6) == 6


point = floats(-2.0, 2.0)


@given(a=point, b=point)
def test_rosenbrock_gradient_and_hessian_equal_the_formulas_and_torch(a, b):
    gradient, hessian = step.gradient_and_hessian(step.rosenbrock, (a, b))
    expected_gradient = [-400 * a * (b - a**2) - 2 * (1 - a), 200 * (b - a**2)]
    expected_hessian = [[1200 * a**2 - 400 * b + 2, -400 * a], [-400 * a, 200.0]]
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(hessian, expected_hessian, rtol=1e-12, atol=1e-11)
    t = torch.tensor([a, b], dtype=torch.float64)
    torch_hessian = torch.autograd.functional.hessian(lambda v: step.rosenbrock(v[0], v[1]), t)
    np.testing.assert_allclose(hessian, torch_hessian.numpy(), rtol=1e-12, atol=1e-11)


def test_newton_on_rosenbrock_reaches_1_1_exactly_in_six_iterations_like_torch():
    ours, theirs = np.array([0.0, 2.0]), torch.tensor([0.0, 2.0], dtype=torch.float64)
    for _ in range(6):
        gradient, hessian = step.gradient_and_hessian(step.rosenbrock, ours)
        ours = ours - np.linalg.solve(hessian, gradient)
        xt = theirs.clone().requires_grad_()
        (gt,) = torch.autograd.grad(step.rosenbrock(xt[0], xt[1]), xt)
        ht = torch.autograd.functional.hessian(lambda v: step.rosenbrock(v[0], v[1]), theirs)
        theirs = theirs - torch.linalg.solve(ht, gt)
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-15)
    assert ours.tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(step.newton_path[-1], [1.0, 1.0])


@given(a=point, b=point, v=arrays(np.float64, (2,), elements=point))
def test_hessian_vector_product_takes_one_extra_backward_pass(a, b, v):
    # the prose's claim: H v is the gradient of (grad f) . v
    x0, x1 = Variable(np.array(a)), Variable(np.array(b))
    step.rosenbrock(x0, x1).backward(create_graph=True)
    g0, g1 = x0.grad, x1.grad
    x0.cleargrad()
    x1.cleargrad()
    (g0 * v[0] + g1 * v[1]).backward()
    _, hessian = step.gradient_and_hessian(step.rosenbrock, (a, b))
    np.testing.assert_allclose([x0.grad.item(), x1.grad.item()], hessian @ v, rtol=1e-10, atol=1e-9)
    t = torch.tensor([a, b], dtype=torch.float64)
    _, hvp = torch.autograd.functional.hvp(lambda u: step.rosenbrock(u[0], u[1]), t, torch.tensor(v))
    np.testing.assert_allclose([x0.grad.item(), x1.grad.item()], hvp.numpy(), rtol=1e-10, atol=1e-9)


def test_double_backprop_example_is_100_at_2():
    assert step.x.grad.item() == 100.0 == 24 * 2.0**2 + 2 * 2.0
    assert step.z.item() == 68.0  # g^3 + y = 4^3 + 4


@given(x0=floats(-3.0, 3.0))
def test_double_backprop_gradient_is_24x2_plus_2x_and_equals_torch(x0):
    x = Variable(np.array(x0))
    y = x**2
    y.backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    (gx**3 + y).backward()
    np.testing.assert_allclose(x.grad, 24 * x0**2 + 2 * x0, rtol=1e-13, atol=1e-15)
    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    yt = xt**2
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (gt**3 + yt).backward()
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-13, atol=1e-15)


@given(w=arrays(np.float64, (2, 3), elements=point), a=arrays(np.float64, (3,), elements=point))
def test_a_gradient_penalty_on_arrays_equals_torch(w, a):
    # loss = sum(tanh(w * x)) + sum((d/dx sum(tanh(w * x)))^2), differentiated with respect to w and x
    x, wv = Variable(a.copy()), Variable(w.copy())
    out = tinypytorch.tanh(wv * x).sum()
    out.backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    wv.cleargrad()
    (out + (gx * gx).sum()).backward()
    xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    out_t = torch.tanh(wt * xt).sum()
    (gxt,) = torch.autograd.grad(out_t, xt, create_graph=True)
    (out_t + (gxt * gxt).sum()).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(wv.grad, wt.grad.numpy(), rtol=1e-11, atol=1e-12)
