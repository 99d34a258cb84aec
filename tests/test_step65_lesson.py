"""Step 65's lesson: the page's Jacobians, Hessians and the exercises' solutions, checked against torch.func and
torch.autograd.functional and against derivatives worked out by hand."""
import numpy as np
import pytest
import torch
import torch.autograd.functional as TF
import torch.func as tfunc

from steploader import load_step

pytestmark = [pytest.mark.step65, pytest.mark.torch]
step = load_step(65)


def test_page_jacobian_and_hessians_equal_torch():
    J = tfunc.jacrev(lambda a: torch.tanh(torch.tensor(step.W) @ a))(torch.tensor([0.5, -1.0], dtype=torch.float64))
    np.testing.assert_allclose(step.J_fwd.data, J.numpy(), rtol=1e-10)
    np.testing.assert_allclose(step.J_rev.data, J.numpy(), rtol=1e-10)
    H = tfunc.hessian(step.t_mlp_loss)(torch.tensor(step.w1.data))
    np.testing.assert_allclose(step.H_mlp.data, H.numpy(), rtol=1e-10, atol=1e-14)


def test_pass_counts_are_n_forward_passes_and_one_plus_m_backward_ones():
    for n in step.sizes:
        assert step.passes["jacfwd", n] == n
        assert step.passes["jacrev", n] == 1 + 512 // n


def test_exercise_1_curve_jacobian_is_minus_sin_cos_2t():
    t = 0.4
    expected = np.array([-np.sin(t), np.cos(t), 2 * t])  # d/dt (cos t, sin t, t²), by hand
    np.testing.assert_allclose(step.func.jacfwd(step.curve)(step.t0).data.ravel(), expected, rtol=1e-12)
    np.testing.assert_allclose(step.func.jacrev(step.curve)(step.t0).data.ravel(), expected, rtol=1e-12)


def test_exercise_2_newton_step_equals_torchs_hvp_and_the_formula():
    x = torch.tensor([2.0, 2.0], dtype=torch.float64)
    _, h = TF.hvp(lambda a: (a ** 4 / 4 - a).sum(), x, torch.ones(2, dtype=torch.float64))
    np.testing.assert_allclose(step.diagonal, h.numpy(), rtol=1e-12)
    np.testing.assert_allclose(step.xq.data - step.gradient / step.diagonal, 2 - 7 / 12, rtol=1e-12)


def test_exercise_3_hvp_equals_torch_hessian_times_v():
    H = tfunc.hessian(step.t_mlp_loss)(torch.tensor(step.w1.data)).numpy()
    np.testing.assert_allclose(step.product, H @ step.v6.data, rtol=1e-10, atol=1e-14)
