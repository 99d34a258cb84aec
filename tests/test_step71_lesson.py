"""Step 71's lesson: the page's Jacobians, Hessian and linearize, its counts, and the exercises' solutions, checked
against torch.func on the page's own map and inputs (float64), and against formulas worked out by hand."""
import numpy as np
import pytest
import torch
import torch.func as tfunc

from steploader import load_step

pytestmark = [pytest.mark.step71, pytest.mark.torch,  # torch 2.13's own warnings, as on the page:
              pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node:UserWarning")]
step = load_step(71)


def close(ours, theirs, rtol=1e-10):
    np.testing.assert_allclose(np.asarray(ours.data), theirs.detach().numpy(), rtol=rtol, atol=1e-14)


def t_f(a):
    return torch.tanh(torch.tensor(step.W.data) @ a)


def tx():
    return torch.tensor(step.x.data)


def test_the_pages_jacobians_equal_torch_func():
    expected = tfunc.jacrev(t_f)(tx())
    assert tuple(step.J.shape) == tuple(expected.shape) == (6, 4)
    for J in (step.J, step.J_loop, step.J_rev, step.J_fwd, step.J_cols):
        close(J, expected)
    close(step.J_lin.T, tfunc.jacfwd(t_f)(tx()))


def test_the_pages_counts_one_backward_pass_against_six():
    assert step.recorded.body == 1 and not step.recorded.backward
    assert step.loop.backward == [(6,)] * 6 and step.loop.body == 0
    assert step.batched.backward == [(6, 6)] and step.batched.body == 0
    assert (step.rows.body, step.rows.backward) == (1, [(6, 6)])
    assert (step.columns_loop.body, step.columns_loop.jvp) == (4, [(6,)] * 4)
    assert (step.columns.body, step.columns.jvp) == (1, [(4, 6)])
    assert step.second.body == 1 and len(step.second.backward) == 1 and step.second.jvp == [(4, 6)]


def test_the_pages_hessian_equals_torch_func_and_the_formula():
    expected = tfunc.hessian(lambda a: t_f(a).sum())(tx())
    close(step.H, expected)
    W, x = step.W.data, step.x.data
    t = np.tanh(W @ x)
    np.testing.assert_allclose(expected.numpy(), W.T @ np.diag(-2 * t * (1 - t ** 2)) @ W, rtol=1e-12, atol=1e-14)


def test_the_pages_linearize_equals_torchs_and_counts_its_runs():
    y, jvp_fn = tfunc.linearize(t_f, tx())
    close(step.y_lin, y)
    assert step.made.body == 1 and step.torch_runs == 2
    for answer, v in zip(step.answers, step.vs):
        close(answer, jvp_fn(torch.tensor(v)))
    assert step.replays.body == 0 and step.replays.jvp == [(6,)] * 3
    assert step.by_vmap.jvp == [(6,)] * 4  # under vmap: a replay per sample


def test_exercise_1_both_blocks_by_one_vmap():
    def t_h(a, b):
        return torch.sin(a) @ b

    expected = tfunc.jacrev(t_h, argnums=(0, 1))(torch.tensor(step.a0.data), torch.tensor(step.b0.data))
    for mine, theirs in zip(step.blocks, expected):
        close(mine, theirs)


def test_exercise_2_jacfwd_in_one_line():
    close(step.columns_first.T, tfunc.jacfwd(t_f)(tx()))
    assert step.mine.jvp == [(4, 6)]  # the four columns in one forward-mode pass


def test_exercise_3_many_hessian_vector_products():
    def t_g(a):
        return t_f(a).sum()

    V = torch.tensor(step.V.data)
    expected = tfunc.vmap(lambda v: tfunc.jvp(tfunc.grad(t_g), (tx(),), (v,))[1])(V)
    close(step.products, expected)
    close(step.products, V @ tfunc.hessian(t_g)(tx()))


def test_the_pages_crossover_counts_n_and_m_for_the_loops_and_one_batched():
    sizes = step.sizes
    assert step.passes["loop by columns"] == sizes  # one jvp per input
    assert step.passes["loop by rows"] == [512 // n for n in sizes]  # one backward pass per output
    assert step.passes["jacfwd"] == step.passes["jacrev"] == [1] * len(sizes)
