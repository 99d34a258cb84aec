"""Step 22's lesson: the picture's backward curves, and the exercises' solutions (Div's backward by hand,
RPow for a constant base) against PyTorch and a numerical gradient."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step22, pytest.mark.torch]
step = load_step(22)
away_from_zero = floats(0.2, 5.0) | floats(-5.0, -0.2)


@pytest.mark.parametrize("case", range(4))
def test_the_pictures_backward_curves_equal_the_formulas_and_torch(case):
    title, f, formula, (low, high) = step.cases[case]
    values = np.linspace(low, high, 50)
    x = step.Variable(values)
    f(x).backward()
    xt = torch.tensor(values, requires_grad=True)
    f(xt).sum().backward()
    np.testing.assert_allclose(x.grad, formula(values), rtol=1e-12)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


@given(st.integers(1, 4).flatmap(lambda n: st.tuples(arrays(np.float64, n, elements=away_from_zero),
                                                      arrays(np.float64, n, elements=away_from_zero))))
def test_div_by_hand_equals_torch(pair):
    v0, v1 = pair
    x0, x1 = step.Variable(v0), step.Variable(v1)
    y = step.DivByHand()(x0, x1)
    y.backward()
    t0, t1 = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    (t0 / t1).sum().backward()
    np.testing.assert_array_equal(y.data, v0 / v1)
    np.testing.assert_allclose(x0.grad, t0.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x1.grad, t1.grad.numpy(), rtol=1e-12)


def test_div_by_hand_on_a_shared_input_accumulates_like_torch():
    x = step.Variable(np.array(3.0))
    step.DivByHand()(x, x).backward()  # x / x = 1: the two contributions cancel
    xt = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    (xt / xt).backward()
    np.testing.assert_allclose(x.grad, xt.grad.item(), atol=1e-15)


@pytest.mark.parametrize("c", [2.0, 0.5, np.e, 10.0])
@pytest.mark.parametrize("values", [[0.0, 1.0, 3.0], [-1.5, 0.25]])
def test_rpow_equals_torch_pow_with_a_constant_base_and_a_numerical_gradient(c, values):
    v = np.array(values)
    x = step.Variable(v)
    y = step.rpow(c, x)
    y.backward()
    xt = torch.tensor(v, requires_grad=True)
    yt = torch.pow(c, xt)
    yt.sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-13)
    eps = 1e-6
    np.testing.assert_allclose(x.grad, (c ** (v + eps) - c ** (v - eps)) / (2 * eps), rtol=1e-7)


def test_the_variable_still_has_no_rpow():
    with pytest.raises(TypeError):
        2.0 ** step.Variable(np.array(1.0))
