"""Step 49's lesson: the exercises' solutions (a clipped straight-through sign, softmax as a custom Function,
a Hypot that computes only the gradients asked for), checked against torch and against maths worked out here."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference import floats, torch_function_of_x
from steploader import load_step
from tinypytorch import Variable, autograd

pytestmark = [pytest.mark.step49, pytest.mark.torch]
step = load_step(49)


TorchSign = torch_function_of_x("TorchSign", torch.sign, lambda x, grad: grad * (x.abs() <= 1.0))


@given(arrays(np.float64, st.integers(1, 8), elements=floats(-3, 3)), st.integers(0, 100))
def test_sign_gives_sign_forward_and_passes_the_gradient_only_where_x_is_within_1_as_the_torch_twin(values, seed):
    w = np.random.default_rng(seed).uniform(-1, 1, values.shape)
    x, xt = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = step.Sign.apply(x), TorchSign.apply(xt)
    np.testing.assert_array_equal(y.data, np.sign(values))
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    np.testing.assert_array_equal(x.grad.data, np.where(np.abs(values) <= 1.0, w, 0.0))  # worked out: w or 0


@given(arrays(np.float64, st.integers(1, 6), elements=floats(-30, 30)), st.integers(0, 100))
def test_custom_softmax_values_and_gradients_equal_torch_softmax(values, seed):
    w = np.random.default_rng(seed).uniform(-1, 1, values.shape)
    x, xt = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = step.CustomSoftmax.apply(x), torch.softmax(xt, 0)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-15)
    (g,) = autograd.grad((y * y * w).sum(), [x], create_graph=True)
    (gt,) = torch.autograd.grad((yt * yt * torch.tensor(w)).sum(), [xt], create_graph=True)
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-10, atol=1e-14)
    (gg,) = autograd.grad((g * g).sum(), [x])
    (ggt,) = torch.autograd.grad((gt * gt).sum(), [xt])
    np.testing.assert_allclose(gg.data, ggt.numpy(), rtol=1e-9, atol=1e-13)


def test_custom_softmax_passes_gradcheck_and_gradgradcheck_and_is_finite_for_large_scores():
    x = Variable(np.array([1.0, -0.5, 2.0, 0.0]))
    assert autograd.gradcheck(step.CustomSoftmax.apply, x)
    assert autograd.gradgradcheck(step.CustomSoftmax.apply, x)
    big = step.CustomSoftmax.apply(Variable(np.array([1000.0, 0.0, -1000.0])))
    np.testing.assert_array_equal(big.data, [1.0, 0.0, 0.0])
    assert step.CustomSoftmax.apply(Variable(np.array([1.0, 2.0]))).creator is not None


@pytest.mark.parametrize("x_grad, y_grad", [(True, False), (False, True), (True, True)])
def test_hypot_computes_only_the_gradients_asked_for_and_they_equal_torchs(x_grad, y_grad):
    xs, ys = np.array([3.0, 5.0, -8.0]), np.array([4.0, 12.0, 6.0])
    x, y = Variable(xs.copy(), requires_grad=x_grad), Variable(ys.copy(), requires_grad=y_grad)
    r = step.Hypot.apply(x, y)
    np.testing.assert_array_equal(r.data, [5.0, 13.0, 10.0])  # Pythagorean triples: exact
    r.sum().backward()
    assert r.creator.ctx.computed == [name for name, need in zip("xy", (x_grad, y_grad)) if need]
    xt, yt = torch.tensor(xs, requires_grad=x_grad), torch.tensor(ys, requires_grad=y_grad)
    torch.hypot(xt, yt).sum().backward()
    for ours, theirs, asked in ((x, xt, x_grad), (y, yt, y_grad)):
        if asked:
            np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), rtol=1e-15)
        else:
            assert ours.grad is None and theirs.grad is None


def test_the_page_computed_only_xs_gradient():
    assert step.r.creator.ctx.computed == ["x"]
    np.testing.assert_allclose(step.x.grad.data, [3 / 5, 5 / 13], rtol=1e-15)
