"""Step 13's lesson: the order the picture numbers, the gradients left on the variables, and the exercises'
solutions (Cube, clear_graph) against PyTorch."""
import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step13, pytest.mark.torch]
step = load_step(13)


def test_the_picture_numbers_add_then_the_square_of_y_then_that_of_x():
    x, y = step.Variable(np.array(2.0)), step.Variable(np.array(3.0))
    sx, sy = step.square(x), step.square(y)
    z = step.add(sx, sy)
    ran = step.backward_order(z)
    assert [f is g for f, g in zip(ran, [z.creator, sy.creator, sx.creator], strict=True)] == [True] * 3
    assert x.grad == 4.0 and y.grad == 6.0  # backward_order ran the real pass
    assert "backward" not in vars(z.creator)  # and took its wrappers away


def test_every_variable_keeps_its_gradient_after_the_pass():
    x = step.Variable(np.array(2.0))
    a = step.square(x)
    y = step.square(a)
    y.backward()
    assert (y.grad, a.grad, x.grad) == (1.0, 2 * 4.0, 4 * 2.0**3)


@given(floats(-10, 10), floats(-10, 10))
def test_cube_plus_square_grads_equal_torch(u, v):
    x, y = step.Variable(np.array(u)), step.Variable(np.array(v))
    step.add(step.cube(x), step.square(y)).backward()
    xt = torch.tensor(u, dtype=torch.float64, requires_grad=True)
    yt = torch.tensor(v, dtype=torch.float64, requires_grad=True)
    (xt**3 + yt**2).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(y.grad, yt.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_cube_on_arrays_equals_torch():
    values = np.array([-1.5, 0.0, 2.0, 0.25])
    x = step.Variable(values)
    step.cube(x).backward()
    xt = torch.tensor(values, requires_grad=True)
    (xt**3).sum().backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


@given(floats(-10, 10))
def test_clear_graph_clears_every_variable_and_the_second_question_matches_torch(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    y = step.square(a)
    y.backward()
    step.clear_graph(y)
    assert x.grad is None and a.grad is None and y.grad is None
    a.backward()  # cleared, a second pass from a = x**2 leaves exactly da/dx = 2x: nothing of the first pass
    np.testing.assert_allclose(x.grad, 2 * np.asarray(value), rtol=1e-15)
