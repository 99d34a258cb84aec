import numpy as np
import pytest
import torch
from hypothesis import given

from reference import floats, same_shape_arrays, torch_value_and_grads
from steploader import load_step

pytestmark = [pytest.mark.step12, pytest.mark.torch]
step = load_step(12)

pairs = same_shape_arrays(2, floats(-5, 5))


@given(pairs)
def test_grads_of_a_sum_equal_torch(pair):
    a, b = pair
    x, y = step.Variable(a), step.Variable(b)
    z = step.add(x, y)
    z.backward()
    _, (ga, gb) = torch_value_and_grads(torch.add, a, b)
    np.testing.assert_array_equal(x.grad, ga)
    np.testing.assert_array_equal(y.grad, gb)
    assert x.grad.shape == a.shape and y.grad.shape == b.shape


@given(pairs)
def test_grads_through_a_sum_inside_a_chain_equal_torch(pair):
    a, b = pair
    for ours, theirs in [(step.exp, torch.exp), (step.square, torch.square)]:
        x, y = step.Variable(a), step.Variable(b)
        ours(step.add(x, y)).backward()
        _, (ga, gb) = torch_value_and_grads(lambda s, t, theirs=theirs: theirs(s + t), a, b)
        np.testing.assert_allclose(x.grad, ga, rtol=1e-12)
        np.testing.assert_allclose(y.grad, gb, rtol=1e-12)


def test_the_steps_scalar_examples():
    x, y = step.Variable(np.array(2.0)), step.Variable(np.array(3.0))
    z = step.add(x, y)
    z.backward()
    assert z.data == 5.0 and x.grad == 1.0 and y.grad == 1.0

    x, y = step.Variable(np.array(0.5)), step.Variable(np.array(-0.25))
    step.exp(step.add(x, y)).backward()
    np.testing.assert_allclose([x.grad, y.grad], [np.exp(0.25)] * 2, rtol=1e-15)  # d/dx e^(x+y) = e^(x+y)
    assert type(x.grad) is np.ndarray and type(y.grad) is np.ndarray  # not np.float64


def test_add_backward_returns_one_gradient_per_input():
    f = step.Add()
    f(step.Variable(np.array(1.0)), step.Variable(np.array(2.0)))
    gy = np.array(3.0)
    gxs = f.backward(gy)
    assert isinstance(gxs, tuple) and len(gxs) == 2
    assert gxs[0] == 3.0 and gxs[1] == 3.0


def test_add_function_records_add_as_creator():
    x, y = step.Variable(np.array(1.0)), step.Variable(np.array(2.0))
    z = step.add(x, y)
    assert isinstance(z.creator, step.Add) and z.creator.inputs == (x, y)


def test_a_backward_with_a_missing_gradient_is_an_error_not_a_silent_none():
    x, y = step.Variable(np.array(1.0)), step.Variable(np.array(2.0))
    with pytest.raises(ValueError, match="shorter"):
        step.AddMissingAGradient()(x, y).backward()
