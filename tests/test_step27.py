"""Step 27: higher-order derivatives with backward(create_graph=True), against torch and closed forms."""
import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import floats, torch_derivatives
from steploader import load_step
from tinypytorch import Config, Variable, no_grad

pytestmark = [pytest.mark.step27, pytest.mark.torch]
step = load_step(27)

point = floats(-2.0, 2.0)
CASES = {
    "sin": (tinypytorch.sin, torch.sin),
    "tanh": (tinypytorch.tanh, torch.tanh),
    "exp": (tinypytorch.exp, torch.exp),
    "x**4": (lambda x: x**4, lambda x: x**4),
    "x**3 - 2x/(x+3)": (lambda x: x**3 - 2 * x / (x + 3), lambda x: x**3 - 2 * x / (x + 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@given(x0=point)
def test_first_three_derivatives_equal_torch_autograd_grad_with_create_graph(name, x0):
    ours, theirs = CASES[name]
    np.testing.assert_allclose(step.derivatives(ours, x0, 3), torch_derivatives(theirs, x0, 3), rtol=1e-12, atol=1e-13)


@given(x0=point)
def test_derivatives_equal_the_closed_forms(x0):
    np.testing.assert_allclose(step.derivatives(tinypytorch.sin, x0, 4),
                               [np.sin(x0), np.cos(x0), -np.sin(x0), -np.cos(x0), np.sin(x0)], rtol=1e-13, atol=1e-15)
    t = np.tanh(x0)
    np.testing.assert_allclose(step.derivatives(tinypytorch.tanh, x0, 3),
                               [t, 1 - t**2, -2 * t * (1 - t**2), -2 * (1 - t**2) * (1 - 3 * t**2)],
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(step.derivatives(lambda x: x**4, x0, 5),
                               [x0**4, 4 * x0**3, 12 * x0**2, 24 * x0, 24.0, 0.0], rtol=1e-14, atol=0)


def test_the_steps_x4_example_at_1_5():
    assert step.derivatives(lambda x: x**4, 1.5, 5) == [5.0625, 13.5, 27.0, 36.0, 24.0, 0.0]  # exact in binary


def test_without_create_graph_the_gradient_has_no_creator_and_with_it_one():
    x = Variable(np.array(1.0))
    tinypytorch.sin(x).backward()
    assert x.grad.creator is None and not x.grad.requires_grad
    x = Variable(np.array(1.0))
    tinypytorch.sin(x).backward(create_graph=True)
    assert type(x.grad.creator).__name__ == "Mul" and x.grad.requires_grad


@pytest.mark.parametrize("outer", [True, False])
def test_backward_restores_enable_backprop_whatever_create_graph_was(outer):
    x = Variable(np.array(1.0))
    y = tinypytorch.tanh(x)
    with tinypytorch.using_config("enable_backprop", outer):
        for create_graph in (False, True):
            y.backward(create_graph=create_graph, retain_graph=True)
            assert Config.enable_backprop is outer
    assert Config.enable_backprop is True


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True")
def test_create_graph_records_even_under_no_grad_as_torch_does():
    # torch runs the backward pass in grad mode = create_graph, whatever the mode outside
    x = Variable(np.array(0.5))
    y = tinypytorch.sin(x)
    with no_grad():
        y.backward(create_graph=True)
    assert x.grad.creator is not None
    xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    yt = torch.sin(xt)
    with torch.no_grad():
        yt.backward(create_graph=True)
    assert xt.grad.grad_fn is not None


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True")
@given(x0=point)
def test_without_cleargrad_the_second_pass_adds_the_second_derivative_to_the_first(x0):
    x = Variable(np.array(x0))
    tinypytorch.sin(x).backward(create_graph=True)
    x.grad.backward()
    np.testing.assert_allclose(x.grad, np.cos(x0) - np.sin(x0), rtol=1e-13, atol=1e-15)
    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    torch.sin(xt).backward(create_graph=True)
    xt.grad.backward()  # torch accumulates the same way
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-13, atol=1e-15)


@given(arrays(np.float64, st.sampled_from([(3,), (2, 3)]), elements=point))
def test_derivatives_of_an_array_are_element_wise_and_equal_torch(a):
    x = Variable(a.copy())
    g = tinypytorch.tanh(x) * x
    ours = []
    for _ in range(3):
        x.cleargrad()
        g.sum().backward(create_graph=True)
        g = x.grad
        ours.append(g.data)
    xt = torch.tensor(a, requires_grad=True)
    gt = torch.tanh(xt) * xt
    for expected in ours:
        (gt,) = torch.autograd.grad(gt, xt, torch.ones_like(gt), create_graph=True)
        np.testing.assert_allclose(expected, gt.detach().numpy(), rtol=1e-12, atol=1e-13)


@given(x0=point, y0=point)
def test_mixed_second_derivatives_of_two_variables_equal_torch_and_the_formula(x0, y0):
    # f = x^2 y^3 + sin(x y): the Hessian's off-diagonal d2f/dxdy = 6 x y^2 + cos(xy) - xy sin(xy)
    def f(m, x, y):
        return x**2 * y**3 + m.sin(x * y)

    x, y = Variable(np.array(x0)), Variable(np.array(y0))
    f(tinypytorch, x, y).backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    y.cleargrad()
    gx.backward()
    expected = 6 * x0 * y0**2 + np.cos(x0 * y0) - x0 * y0 * np.sin(x0 * y0)
    np.testing.assert_allclose(y.grad, expected, rtol=1e-12, atol=1e-13)
    xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x0, y0))
    (gxt,) = torch.autograd.grad(f(torch, xt, yt), xt, create_graph=True)
    (gxyt, gxxt) = torch.autograd.grad(gxt, [yt, xt])
    np.testing.assert_allclose([y.grad.item(), x.grad.item()], [gxyt.item(), gxxt.item()], rtol=1e-12, atol=1e-13)


@given(a=arrays(np.float64, (3,), elements=point), w=arrays(np.float64, (2, 3), elements=point))
def test_second_derivatives_through_broadcasting_equal_torch(a, w):
    x = Variable(a.copy())
    ((x * Variable(w)) ** 3 + x).sum().backward(create_graph=True)  # x is broadcast to (2, 3)
    gx = x.grad
    x.cleargrad()
    (gx * gx).sum().backward()
    xt, wt = torch.tensor(a, requires_grad=True), torch.tensor(w)
    (gxt,) = torch.autograd.grad(((xt * wt) ** 3 + xt).sum(), xt, create_graph=True)
    (ggt,) = torch.autograd.grad((gxt * gxt).sum(), xt)
    np.testing.assert_allclose(gx.data, gxt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad, ggt.numpy(), rtol=1e-11, atol=1e-11)


def test_the_graph_of_tanhs_first_derivative_has_four_functions():
    # gx = seed * (1 - t * t) with t = tanh(x): Tanh, Mul (t * t), Sub, Mul (by the seed)
    x = Variable(np.array(1.0))
    tinypytorch.tanh(x).backward(create_graph=True)
    names = sorted(type(f).__name__ for f in step.functions_in_graph(x.grad))
    assert names == ["Mul", "Mul", "Sub", "Tanh"]


def test_the_picture_of_the_second_derivative_is_drawable():
    from tinypytorch.utils import get_dot_graph

    x = Variable(np.array(1.0), name="x")
    tinypytorch.tanh(x).backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    gx.backward(create_graph=True)
    text = get_dot_graph(x.grad)
    assert text.count("Tanh") == 1 and text.count("label=\"x\"") == 1


def test_create_graph_makes_a_reference_cycle_through_x_grad_and_cleargrad_breaks_it():
    gc.collect()
    gc.disable()  # only reference counting may free
    try:
        x = Variable(np.array(1.0))
        tinypytorch.sin(x).backward(create_graph=True)
        alive = weakref.ref(x)
        del x
        assert alive() is not None  # x -> x.grad -> Mul -> Cos -> x
        x = Variable(np.array(1.0))
        tinypytorch.sin(x).backward(create_graph=True)
        x.cleargrad()
        alive = weakref.ref(x)
        del x
        assert alive() is None
    finally:
        gc.enable()
        gc.collect()
