"""Step 06's lesson: the backprop-ninja exercises (Sin and Tanh with a hand-written backward, and the gradients
of (sin x)^2 and tanh(e^x) computed call by call) against PyTorch's autograd and a central difference."""
import numpy as np
import pytest
import torch
from hypothesis import given

from reference import float_arrays
from steploader import load_step

pytestmark = [pytest.mark.step06, pytest.mark.torch]
step = load_step(6)


@pytest.mark.parametrize("name, fn", [("Sin", torch.sin), ("Tanh", torch.tanh)])
@given(pair=float_arrays(-3.0, 3.0).flatmap(lambda a: float_arrays(-2.0, 2.0, min_dims=a.ndim, max_dims=a.ndim)
                                              .filter(lambda g: g.shape == a.shape).map(lambda g: (a, g))))
def test_the_hand_written_backward_equals_torch_for_any_incoming_gradient(name, fn, pair):
    array, gy = pair
    f = getattr(step, name)()
    y = f(step.Variable(array))
    t = torch.tensor(array, requires_grad=True)
    yt = fn(t)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-14, atol=1e-300)
    yt.backward(torch.tensor(gy))
    np.testing.assert_allclose(f.backward(gy), t.grad.numpy(), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", ["Sin", "Tanh"])
@pytest.mark.parametrize("value", [-2.0, -0.4, 0.0, 0.7, 1.9])
def test_the_hand_written_backward_equals_the_central_difference(name, value):
    f = getattr(step, name)()
    f(step.Variable(np.array(value)))
    numerical = step.numerical_diff(getattr(step, name)(), step.Variable(np.array(value)), eps=1e-5)
    np.testing.assert_allclose(f.backward(np.array(1.0)), numerical, rtol=0, atol=1e-9)


def test_exercise_1_gradients_of_sin_squared_by_hand_equal_torch():
    values = [0.3, 1.0, 2.5]
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    ts = torch.sin(t)
    ts.retain_grad()
    torch.square(ts).sum().backward()
    S, Q = step.Sin(), step.Square()
    x = step.Variable(np.array(values))
    y = Q(S(x))
    g_x = S.backward(Q.backward(np.ones_like(y.data)))
    np.testing.assert_allclose(g_x, t.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(g_x, np.sin(2 * np.array(values)), rtol=1e-14)  # 2 sin x cos x = sin 2x


def test_exercise_2_gradients_of_tanh_exp_by_hand_equal_torch():
    values = [-1.0, 0.0, 0.5]
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    te = torch.exp(t)
    te.retain_grad()
    torch.tanh(te).sum().backward()
    E, T = step.Exp(), step.Tanh()
    y = T(E(step.Variable(np.array(values))))
    g_e = T.backward(np.ones_like(y.data))
    np.testing.assert_allclose(g_e, te.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(E.backward(g_e), t.grad.numpy(), rtol=1e-13)
    # the page's own solution computed the same
    np.testing.assert_allclose(step.e.grad, te.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(step.x.grad, t.grad.numpy(), rtol=1e-13)
