"""Step 64's lesson: the dual numbers and the exercises' solutions, checked against torch (its forward mode and its
gradients) and against derivatives worked out by hand."""
import math

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwAD

from steploader import load_step
from tinypytorch import Variable, autograd

pytestmark = [pytest.mark.step64, pytest.mark.torch]
step = load_step(64)


def test_dual_numbers_give_the_derivative():
    y = step.Dual(2.0, 1.0) * step.sin(step.Dual(2.0, 1.0))
    assert y.tangent == pytest.approx(math.sin(2.0) + 2.0 * math.cos(2.0), rel=1e-15)
    b = step.exp(step.Dual(0.5, 1.0) * step.Dual(0.5, 1.0))
    assert (b * b).tangent == pytest.approx(2 * math.exp(0.5), rel=1e-15)  # step 05's 4x e^(2x^2) at 0.5


def test_directional_derivative_equals_torch():
    x = torch.tensor(step.x0, requires_grad=True)
    (torch.tanh(x) * x).sum().backward()
    assert step.directional == pytest.approx(float(x.grad @ torch.tensor(step.v)), rel=1e-12)
    with tfwAD.dual_level():
        d = tfwAD.make_dual(torch.tensor(step.x0), torch.tensor(step.v))
        assert step.directional == pytest.approx(tfwAD.unpack_dual((torch.tanh(d) * d).sum()).tangent.item(),
                                                 rel=1e-12)


def test_jacobian_by_columns_equals_torch():
    ours = step.jacobian_by_columns(step.f, Variable(np.array([1.0, 2.0])))
    theirs = torch.autograd.functional.jacobian(
        lambda x: torch.stack([x[0] * x[1], torch.sin(x[0]), x[1] ** 2]), torch.tensor([1.0, 2.0], dtype=torch.float64))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-14)
    np.testing.assert_allclose(ours, [[2.0, 1.0], [math.cos(1.0), 0.0], [0.0, 4.0]], rtol=1e-14)  # by hand


def test_softplus_jvp_equals_torch():
    x = np.linspace(-2, 2, 5)
    t = np.random.default_rng(0).standard_normal(5)
    from tinypytorch.autograd import forward_ad as fwAD
    with fwAD.dual_level():
        ours = fwAD.unpack_dual(step.SoftPlus.apply(fwAD.make_dual(Variable(x), t))).tangent.data
    with tfwAD.dual_level():
        theirs = tfwAD.unpack_dual(torch.nn.functional.softplus(tfwAD.make_dual(torch.tensor(x), torch.tensor(t))))
    np.testing.assert_allclose(ours, theirs.tangent.numpy(), rtol=1e-12)
    assert autograd.gradcheck(step.SoftPlus.apply, (Variable(x),), check_forward_ad=True)
