import numpy as np
import pytest
import torch
from hypothesis import given

from reference import float_arrays, floats, torch_grad
from steploader import load_step

pytestmark = [pytest.mark.step14, pytest.mark.torch]
step = load_step(14)

values = float_arrays(-3, 3, max_side=4)


GRAPHS = {
    "x + x": (lambda v: step.add(v, v), lambda t: t + t),
    "(x + x) + x": (lambda v: step.add(step.add(v, v), v), lambda t: (t + t) + t),
    "x**2 + x": (lambda v: step.add(step.square(v), v), lambda t: t**2 + t),
    "x**2 + exp(x)": (lambda v: step.add(step.square(v), step.exp(v)), lambda t: t**2 + torch.exp(t)),
}


@pytest.mark.parametrize("name", GRAPHS)
@given(value=values)
def test_a_reused_leaf_gets_the_sum_of_its_paths_like_torch(name, value):
    ours, theirs = GRAPHS[name]
    x = step.Variable(value)
    ours(x).backward()
    np.testing.assert_allclose(x.grad, torch_grad(theirs, value), rtol=1e-12)


def test_the_steps_examples_give_2_and_3():
    x = step.Variable(np.array(3.0))
    step.add(x, x).backward()
    assert x.grad == 2.0
    x = step.Variable(np.array(3.0))
    step.add(step.add(x, x), x).backward()
    assert x.grad == 3.0


def test_accumulation_leaves_the_upstream_gradients_intact():
    x = step.Variable(np.array([1.0, 2.0]))
    t = step.add(x, x)
    y = step.add(t, x)
    y.backward()
    np.testing.assert_array_equal(y.grad, [1.0, 1.0])  # the seed, untouched
    np.testing.assert_array_equal(t.grad, [1.0, 1.0])  # dy/dt = 1
    np.testing.assert_array_equal(x.grad, [3.0, 3.0])


def test_overwriting_keeps_only_one_path():
    x = step.Variable(np.array(3.0))
    step.backward_with(step.add(x, x), step.overwrite)
    assert x.grad == 1.0  # one of the two paths, each of slope 1


def test_adding_in_place_corrupts_the_upstream_gradient_and_then_the_leaf():
    x = step.Variable(np.array(3.0))
    y = step.add(x, x)
    step.backward_with(y, step.add_in_place)
    assert x.grad is y.grad and y.grad == 2.0  # the seed 1 was written into

    x = step.Variable(np.array(3.0))
    step.backward_with(step.add(step.add(x, x), x), step.add_in_place)
    # x.grad aliases the seed g; g += g (the inner Add's gy is g too) twice: 1 -> 2 -> 4
    assert x.grad == 4.0


@given(values)
def test_two_backward_calls_accumulate_like_torch(value):
    x = step.Variable(value)
    y = step.add(x, x)
    y.backward()
    y.backward()
    np.testing.assert_array_equal(x.grad, torch_grad(lambda t: t + t, value, calls=2))


@given(values)
def test_a_second_graph_on_the_same_leaf_accumulates_like_torch(value):
    x = step.Variable(value)
    step.add(x, x).backward()
    step.add(step.square(x), x).backward()
    xt = torch.tensor(value, requires_grad=True)
    (xt + xt).backward(torch.ones_like(xt))
    (xt**2 + xt).backward(torch.ones_like(xt))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


def test_cleargrad_starts_the_accumulation_afresh():
    x = step.Variable(np.array(3.0))
    y = step.add(x, x)
    y.backward()
    y.backward()
    x.cleargrad()
    y.backward()
    assert x.grad == 2.0


@given(floats(-3, 3).filter(lambda v: v == 0 or abs(v) > 1e-90))  # x^3 must not underflow
def test_known_limitation_a_kept_intermediate_gradient_is_counted_again(value):
    x = step.Variable(np.array(value))
    y = step.square(step.square(x))
    y.backward()
    y.backward()
    # 1st pass: 4x^3 and a.grad = 2a = 2x^2; 2nd pass: a.grad = 4x^2, adds 2x * 4x^2 = 8x^3
    np.testing.assert_allclose(x.grad, 12 * value**3, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(torch_grad(lambda t: (t**2) ** 2, np.array(value), calls=2), 8 * value**3, rtol=1e-12)


def test_grads_are_ndarrays():
    x = step.Variable(np.array(2.0))
    step.add(step.square(x), x).backward()
    assert type(x.grad) is np.ndarray
