"""Step 12's lesson: the exercises' solutions (hand-written backwards of Mul, Sub and the two-output SinCos),
checked against torch."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step12, pytest.mark.torch]
step = load_step(12)
RNG = np.random.default_rng(12)
SHAPES = [(), (3,), (2, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_mul_backward_gives_torchs_gradients_for_both_inputs(shape):
    a, b = RNG.standard_normal(shape), RNG.standard_normal(shape)
    x, y = step.Variable(a), step.Variable(b)
    step.exp(step.mul(x, y)).backward()  # Mul's gy is not one
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    torch.exp(at * bt).sum().backward()
    np.testing.assert_allclose(x.grad, at.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(y.grad, bt.grad.numpy(), rtol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
def test_sub_backward_gives_torchs_gradients_for_both_inputs(shape):
    a, b = RNG.standard_normal(shape), RNG.standard_normal(shape)
    x, y = step.Variable(a), step.Variable(b)
    z = step.square(step.sub(x, y))
    z.backward()
    at, bt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    zt = torch.square(at - bt)
    zt.sum().backward()
    np.testing.assert_array_equal(z.data, zt.detach().numpy())
    np.testing.assert_allclose(x.grad, at.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(y.grad, bt.grad.numpy(), rtol=1e-15)


@pytest.mark.parametrize("shape", SHAPES)
def test_sincos_backward_combines_both_outputs_gradients_as_torch_does(shape):
    a = RNG.uniform(-3, 3, shape)
    x = step.Variable(a)
    s, c = step.SinCos()(x)
    step.square(step.add(s, c)).backward()  # both outputs' gradients (not ones) arrive together, from Add
    t = torch.tensor(a, requires_grad=True)
    torch.square(torch.sin(t) + torch.cos(t)).sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_sin_plus_cos_has_derivative_cos_minus_sin():
    x = step.Variable(np.array(0.5))
    step.add(*step.SinCos()(x)).backward()
    np.testing.assert_allclose(x.grad, np.cos(0.5) - np.sin(0.5), rtol=1e-15)


def test_sincos_outputs_on_separate_paths_meet_the_loops_order_a_limitation_step_16_lifts():
    # the list is a stack: SinCos may run before the gradient of its other output has arrived
    s, c = step.SinCos()(step.Variable(np.array(0.5)))
    with pytest.raises(TypeError, match="NoneType"):
        step.add(step.square(s), step.exp(c)).backward()
