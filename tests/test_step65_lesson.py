"""Step 65's lesson: the page's Jacobians (its loops by columns and by rows), Hessians and the exercises' solutions,
checked against torch.func and torch.autograd.functional and against derivatives worked out by hand; the passes its
loops make, counted against n and 1 + m."""
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
    x = torch.tensor([0.3, 1.1, -0.7, 2.0], dtype=torch.float64)  # the page's Hessian input
    H_sin = tfunc.hessian(lambda a: a.sin().sum())(x).numpy()
    np.testing.assert_allclose(step.H.data, H_sin, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(step.H_rows.data, H_sin, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("shape_in, shape_out", [((3,), (2,)), ((2, 2), (3, 1)), ((4,), ()), ((1,), (5,))])
def test_page_loops_equal_torch_func_for_several_shapes(shape_in, shape_out):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((int(np.prod(shape_out)), int(np.prod(shape_in))))
    x = rng.standard_normal(shape_in)

    def f(a):
        return step.tp.sin(step.tp.matmul(step.const(A), a.reshape(-1, 1))).reshape(shape_out)

    def t_f(a):
        return (torch.tensor(A) @ a.reshape(-1, 1)).sin().reshape(shape_out)
    for ours, name in ((step.jacfwd_by_columns, "jacfwd"), (step.jacrev_by_rows, "jacrev")):
        J = getattr(tfunc, name)(t_f)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(ours(f)(step.const(x)).data, J, rtol=1e-12, atol=1e-15)


def test_pass_counts_are_n_forward_passes_and_one_plus_m_backward_ones():
    for n in step.sizes:
        assert step.passes["by columns", n] == n
        assert step.passes["by rows", n] == 1 + 512 // n


def test_the_package_jacobians_make_one_batched_pass():
    assert step.batched == {"jacfwd": 1, "jacrev": 2}  # one pass through tanh; jacrev's backward one more


def test_exercise_1_curve_jacobian_is_minus_sin_cos_2t():
    t = 0.4
    expected = np.array([-np.sin(t), np.cos(t), 2 * t])  # d/dt (cos t, sin t, t²), by hand
    np.testing.assert_allclose(step.J_curve_fwd.data.ravel(), expected, rtol=1e-12)
    np.testing.assert_allclose(step.J_curve_rev.data.ravel(), expected, rtol=1e-12)


def test_exercise_1_passes_one_column_against_three_rows():
    """Cos runs once per pass: its forward in a forward-mode pass, its backward in a backward pass (sin's backward
    calls cos's forward as well, so only the first forward of jacrev_by_rows is its recorded pass)."""
    Cos = step.tp.functions.Cos
    calls, forward, backward = [], Cos.forward, Cos.backward

    def counted(method, kind):
        def wrapper(self, *a):
            calls.append(kind)
            return method(self, *a)
        return wrapper
    Cos.forward, Cos.backward = counted(forward, "forward"), counted(backward, "backward")
    try:
        step.jacfwd_by_columns(step.curve)(step.t0)
        assert calls == ["forward"]  # one input: one column
        calls.clear()
        step.jacrev_by_rows(step.curve)(step.t0)
        assert calls[0] == "forward" and calls.count("backward") == 3  # three outputs: recorded forward, 3 rows
    finally:
        Cos.forward, Cos.backward = forward, backward


def test_exercise_2_newton_step_equals_torchs_hvp_and_the_formula():
    x = torch.tensor([2.0, 2.0], dtype=torch.float64)
    _, h = TF.hvp(lambda a: (a ** 4 / 4 - a).sum(), x, torch.ones(2, dtype=torch.float64))
    np.testing.assert_allclose(step.diagonal, h.numpy(), rtol=1e-12)
    np.testing.assert_allclose(step.xq.data - step.gradient / step.diagonal, 2 - 7 / 12, rtol=1e-12)


def test_exercise_3_hvp_equals_torch_hessian_times_v():
    H = tfunc.hessian(step.t_mlp_loss)(torch.tensor(step.w1.data)).numpy()
    np.testing.assert_allclose(step.product, H @ step.v6.data, rtol=1e-10, atol=1e-14)
