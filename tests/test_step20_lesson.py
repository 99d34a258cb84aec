"""Step 20's lesson: the picture's graph, and the exercises' solutions (Horner's rule with * and +, MulAdd)
against PyTorch and the derivative worked out by hand."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step20, pytest.mark.torch]
step = load_step(20)
moderate = floats(-3, 3)


def test_the_picture_shows_a_mul_feeding_an_add():
    a, b, c = (step.Variable(np.array(v)) for v in (3.0, 2.0, 1.0))
    y = a * b + c
    add, ab = y.creator, y.creator.inputs[0]
    assert type(add).__name__ == "Add" and type(ab.creator).__name__ == "Mul"
    assert ab.creator.inputs[0] is a and ab.creator.inputs[1] is b and add.inputs[1] is c


@given(st.lists(moderate, min_size=1, max_size=6), moderate)
def test_horner_gives_torchs_value_and_grads(coefficients, value):
    cs = [step.Variable(np.array(c)) for c in coefficients]
    x = step.Variable(np.array(value))
    p = step.horner(cs, x)
    if len(cs) == 1:
        assert p is cs[0]  # a constant polynomial builds no graph
        return
    p.backward()
    cts = [torch.tensor(c, dtype=torch.float64, requires_grad=True) for c in coefficients]
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    pt = sum(c * xt**k for k, c in enumerate(cts))
    pt.backward()
    np.testing.assert_allclose(p.data, pt.item(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-12, atol=1e-12)
    for k, (c, ct) in enumerate(zip(cs, cts)):
        np.testing.assert_allclose(c.grad, value**k, rtol=1e-12)  # dp/dc_k = x^k
        np.testing.assert_allclose(c.grad, ct.grad.item(), rtol=1e-12)


def test_horner_derivative_worked_out():
    cs = [step.Variable(np.array(v)) for v in (1.0, -2.0, 0.5, 3.0)]
    x = step.Variable(np.array(2.0))
    step.horner(cs, x).backward()
    assert x.grad == 9 * 2.0**2 + 2.0 - 2  # p'(x) = 9x^2 + x - 2


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_muladd_equals_torch_addcmul_and_the_two_operators(shape):
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(shape) for _ in range(3)]
    fused = [step.Variable(v) for v in values]
    y = step.MulAdd()(*fused)
    y.backward()
    plain = [step.Variable(v) for v in values]
    (plain[0] * plain[1] + plain[2]).backward()
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    yt = torch.addcmul(ts[2], ts[0], ts[1])
    yt.sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    for ours, other, theirs in zip(fused, plain, ts):
        np.testing.assert_array_equal(ours.grad, other.grad)
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-15)
