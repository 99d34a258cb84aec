"""Step 50's lesson: the exercises' solutions (cross-entropy with label smoothing, binary cross-entropy with
logits), checked against PyTorch's own and against the formula written out here."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from steploader import load_step
from tinypytorch import Variable
from reference import floats

pytestmark = [pytest.mark.step50, pytest.mark.torch]
step = load_step(50)


@given(data=st.data(), epsilon=st.sampled_from([0.0, 0.1, 0.3, 1.0]))
def test_smoothed_cross_entropy_equals_torchs_label_smoothing(data, epsilon):
    n, classes = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 5))
    values = data.draw(arrays(np.float64, (n, classes), elements=floats(-100, 100)))
    target = np.array(data.draw(st.lists(st.integers(0, classes - 1), min_size=n, max_size=n)))
    x, xt = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    loss = step.smoothed_cross_entropy(x, target, epsilon)
    loss_t = torch.nn.functional.cross_entropy(xt, torch.tensor(target), label_smoothing=epsilon)
    loss.backward()
    loss_t.backward()
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_without_smoothing_it_is_the_plain_cross_entropy():
    values, target = np.array([[2.0, 0.0, -1.0]]), np.array([1])
    loss = step.smoothed_cross_entropy(Variable(values), target, 0.0)
    np.testing.assert_allclose(loss.data, np.log(np.exp(values).sum()) - 0.0, rtol=1e-15)  # -log s_1, x_1 = 0


@given(z=arrays(np.float64, st.integers(1, 6), elements=floats(-900, 900)), seed=st.integers(0, 50))
def test_bce_with_logits_equals_torchs_and_stays_finite(z, seed):
    y = np.random.default_rng(seed).integers(0, 2, z.shape).astype(np.float64)
    zv, zt = Variable(z.copy()), torch.tensor(z, requires_grad=True)
    loss = step.bce_with_logits(zv, y)
    loss_t = torch.nn.functional.binary_cross_entropy_with_logits(zt, torch.tensor(y))
    loss.backward()
    loss_t.backward()
    assert np.isfinite(loss.data)
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12, atol=1e-12)
    # sigma(z) - y cancels for large z: an absolute error of a few ulps of 1 remains
    np.testing.assert_allclose(zv.grad.data, zt.grad.numpy(), rtol=1e-9, atol=1e-14)


def test_bce_with_logits_equals_the_textbook_formula_where_that_does_not_overflow():
    z, y = np.array([0.5, -2.0, 3.0, 0.0]), np.array([1.0, 0.0, 1.0, 0.0])
    sigma = 1 / (1 + np.exp(-z))
    expected = np.mean(-y * np.log(sigma) - (1 - y) * np.log(1 - sigma))
    zv = Variable(z)
    step.bce_with_logits(zv, y).backward()
    np.testing.assert_allclose(zv.data, z)
    np.testing.assert_allclose(step.bce_with_logits(Variable(z), y).data, expected, rtol=1e-14)
    np.testing.assert_allclose(zv.grad.data, (sigma - y) / len(z), rtol=1e-14)  # worked out: (sigma - y) / n
