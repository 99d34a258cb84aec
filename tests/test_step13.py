import numpy as np
import pytest
import torch
from hypothesis import given

from reference import floats, same_shape_arrays
from steploader import load_step

pytestmark = [pytest.mark.step13, pytest.mark.torch]
step = load_step(13)

pairs = same_shape_arrays(2, floats(-100, 100))


@given(pairs)
def test_grads_of_a_sum_of_squares_equal_torch(pair):
    a, b = pair
    x, y = step.Variable(a), step.Variable(b)
    z = step.add(step.square(x), step.square(y))
    z.backward()
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    zt = xt**2 + yt**2
    zt.backward(torch.ones_like(zt))
    np.testing.assert_allclose(z.data, zt.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad, yt.grad.numpy(), rtol=1e-12)


def test_the_steps_example_gives_2x_and_2y():
    x, y = step.Variable(np.array(2.0)), step.Variable(np.array(3.0))
    step.add(step.square(x), step.square(y)).backward()
    assert x.grad == 4.0 and y.grad == 6.0


def test_square_keeps_its_one_input_one_output_signature():
    f = step.Square()
    x = step.Variable(np.array(3.0))
    y = f(x)
    assert isinstance(y, step.Variable) and f.inputs == (x,) and f.outputs == [y]
    assert f.backward(np.array(1.0)) == 6.0  # one gradient, not a tuple: 2x


def test_grads_of_0d_variables_are_ndarrays_not_numpy_scalars():
    x, y = step.Variable(np.array(2.0)), step.Variable(np.array(3.0))
    step.add(step.square(x), step.square(y)).backward()
    assert type(x.grad) is np.ndarray and type(y.grad) is np.ndarray


def test_cleargrad_forgets_the_gradient():
    x = step.Variable(np.array(2.0))
    step.square(x).backward()
    assert x.grad is not None
    x.cleargrad()
    assert x.grad is None


@given(floats(-10, 10))
def test_a_stale_seed_answers_the_first_question_again(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    step.square(a).backward()
    a.backward()  # a.grad still holds dy/da = 2a: the seed is wrong
    np.testing.assert_allclose(x.grad, 4 * value**3, rtol=1e-12, atol=1e-12)  # dy/dx of y = x^4, not da/dx


@given(floats(-10, 10))
def test_after_cleargrad_the_second_question_matches_torch(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    step.square(a).backward()
    a.cleargrad()
    x.cleargrad()
    a.backward()

    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    at = xt**2
    (at**2).backward(retain_graph=True)
    xt.grad = None
    at.backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
