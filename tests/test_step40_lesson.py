"""Step 40's lesson: the exercises' solutions (Cube, CubeOnArrays, Norm) and the page's picture, against torch."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch.autograd.functional import jacobian

import tinypytorch
from reference import floats, torch_function_of_x
from steploader import load_step
from tinypytorch import Variable, autograd
from tinypytorch.autograd import gradcheck, gradgradcheck
from tinypytorch.autograd.gradcheck import numerical_jacobian

pytestmark = [pytest.mark.step40, pytest.mark.torch]
step = load_step(40)

away_from_zero = arrays(np.float64, st.integers(1, 4), elements=floats(0.2, 2.0)).map(
    lambda a: a * np.where(np.arange(a.size) % 2, -1.0, 1.0))


# ----- exercise 1: a hand-written cube that passes gradgradcheck ------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(away_from_zero)
def test_cube_passes_gradcheck_and_gradgradcheck_as_torchs_x_cubed_does(values):
    x = Variable(values.copy())
    torch.manual_seed(0)
    assert torch.autograd.gradgradcheck(lambda t: t ** 3, torch.tensor(values, requires_grad=True)) is True
    assert gradcheck(lambda v: step.Cube()(v), x) is True
    assert gradgradcheck(lambda v: step.Cube()(v), x) is True
    y = step.Cube()(Variable(values.copy()))
    np.testing.assert_allclose(y.data, values ** 3, rtol=1e-15)


@settings(max_examples=15, deadline=None)
@given(away_from_zero)
def test_cube_on_arrays_passes_gradcheck_and_fails_gradgradcheck_as_torchs_detached_cube(values):
    CubeDetachedTorch = torch_function_of_x("CubeDetachedTorch", lambda x: x ** 3,
                                            lambda x, gy: (3 * x * x * gy).detach())
    t = torch.tensor(values, requires_grad=True)
    torch.manual_seed(0)
    assert torch.autograd.gradcheck(CubeDetachedTorch.apply, t) is True
    assert torch.autograd.gradgradcheck(CubeDetachedTorch.apply, t, raise_exception=False) is False
    x = Variable(values.copy())
    assert gradcheck(lambda v: step.CubeOnArrays()(v), x) is True
    assert gradgradcheck(lambda v: step.CubeOnArrays()(v), x, raise_exception=False) is False


@settings(max_examples=15, deadline=None)
@given(arrays(np.float64, st.integers(1, 4), elements=floats(-3.0, 3.0)))
def test_second_derivative_is_8x_for_cube_and_2x_for_cube_on_arrays(values):
    t = torch.tensor(values, requires_grad=True)
    (g,) = torch.autograd.grad((t ** 3).sum(), t, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum() + (t * t).sum(), t)
    np.testing.assert_allclose(gg.numpy(), 8 * values, rtol=1e-12)  # torch agrees with 6x + 2x
    np.testing.assert_allclose(step.second_derivative(step.Cube, values), gg.numpy(), rtol=1e-12, atol=1e-300)
    # the cut graph: only the 2x of sum(x^2) survives, silently
    np.testing.assert_allclose(step.second_derivative(step.CubeOnArrays, values), 2 * values, rtol=1e-12)


# ----- exercise 2: Norm ----------------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(arrays(np.float64, st.integers(1, 5), elements=floats(-3.0, 3.0)).filter(
    lambda a: np.linalg.norm(a) > 0.1))
def test_norm_equals_torchs_in_value_gradient_and_second_derivative(values):
    x = Variable(values.copy())
    y = step.norm(x)
    (g,) = autograd.grad(y, x, create_graph=True)
    w = np.linspace(-1.0, 1.0, values.size)
    (gg,) = autograd.grad((g * Variable(w, requires_grad=False)).sum(), x)
    t = torch.tensor(values, requires_grad=True)
    yt = torch.linalg.vector_norm(t)
    (gt,) = torch.autograd.grad(yt, t, create_graph=True)
    (ggt,) = torch.autograd.grad((gt * torch.tensor(w)).sum(), t)
    np.testing.assert_allclose(y.data, yt.item(), rtol=1e-12)
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gg.data, ggt.numpy(), rtol=1e-10, atol=1e-12)
    assert gradcheck(step.norm, Variable(values.copy())) is True
    assert gradgradcheck(step.norm, Variable(values.copy())) is True


# ----- the picture: the Jacobian both ways ---------------------------------------------------------------------

def test_the_pictured_jacobian_is_torchs_and_the_numerical_one():
    W, x = torch.tensor(step.W4.data), torch.tensor(step.x4.data)
    expected = jacobian(lambda v: torch.tanh(W @ v), x).reshape(3, 4).numpy()  # J[j, i] = d y_j / d x_i
    np.testing.assert_allclose(step.J, expected, rtol=1e-12, atol=1e-15)
    numerical = numerical_jacobian(step.tanh_Wx, (step.W4, step.x4), 1e-6)[(1, 0)].T
    np.testing.assert_allclose(numerical, expected, rtol=1e-6, atol=1e-8)


def test_gradgradchecks_v_seeded_in_tinypytorch_drawn_from_the_global_generator_in_torch():
    # the page: PyTorch's gradgradcheck draws v from the global generator (its state moves on), tinypytorch's
    # from its own np.random.default_rng(seed) (no global state moves, and an explicit v of that draw agrees)
    t = torch.tensor([0.5, -1.0, 1.5], dtype=torch.float64, requires_grad=True)
    before = torch.get_rng_state()
    torch.autograd.gradgradcheck(torch.sin, t)
    assert not torch.equal(before, torch.get_rng_state())
    numpy_before, ours_before = np.random.get_state()[1].copy(), tinypytorch.get_rng_state()
    x = Variable(np.array([0.5, -1.0, 1.5]))
    assert gradgradcheck(lambda v: step.Sin()(v), x) is True
    np.testing.assert_array_equal(np.random.get_state()[1], numpy_before)
    np.testing.assert_array_equal(np.asarray(tinypytorch.get_rng_state(), dtype=object),
                                  np.asarray(ours_before, dtype=object))
    v = Variable(np.random.default_rng(0).standard_normal(3))
    assert gradgradcheck(lambda v: step.SinOnArrays()(v), x, v, raise_exception=False) is False
