"""Step 72's lesson: the exercises' solutions (the transpose of cumsum, the transpose of the transpose, the
Jacobian by rows from the transposed function), checked against torch, and the page's own check (its functions
against torch.func.vjp, the dot-product test) and its count of the rules the backward pass runs."""
import numpy as np
import pytest
import torch
import torch.func as tfunc

import tinypytorch as tp
from steploader import load_step
from tinypytorch.func import linearize
from tinypytorch.linear_transpose import backward_pass, linear_transpose

pytestmark = [pytest.mark.step72, pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node")]
step = load_step(72)


@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_the_transpose_of_cumsum_is_torch_vjp_of_cumsum(n):
    rng = np.random.default_rng(n)
    u = rng.normal(size=n)
    _, vjp_fn = tfunc.vjp(lambda a: torch.cumsum(a, 0), torch.tensor(rng.normal(size=n)))
    np.testing.assert_allclose(step.cumsum_transpose(u), vjp_fn(torch.tensor(u))[0].numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sin(x) y + x / y", "tanh layer", "softmax, logsumexp", "indexing", "cat, stack"])
def test_transposing_twice_gives_torch_jvp(name):
    f, arrays = step.CHECKS[name]
    rng = np.random.default_rng(len(name))
    primals = [tp.tensor(a) for a in arrays]
    out, jvp_fn = linearize(lambda *xs: f(tp, *xs), *primals)
    twice = linear_transpose(linear_transpose(jvp_fn, *primals), out)
    ts = [rng.normal(size=np.shape(a)) for a in arrays]
    (ours,) = twice(tuple(tp.tensor(t) for t in ts))
    _, theirs = tfunc.jvp(lambda *xs: f(torch, *xs), tuple(torch.tensor(a) for a in arrays),
                          tuple(torch.tensor(t) for t in ts))
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_the_pages_transpose_of_the_transpose_equals_torch_jvp():
    _, theirs = tfunc.jvp(lambda a, b: a.sin() * b + a / b, (torch.tensor(step.x.data), torch.tensor(step.y.data)),
                          tuple(torch.tensor(a.data) for a in step.t))
    np.testing.assert_allclose(step.jt.data, theirs.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_jacobian_by_rows_equals_torch_jacrev(seed):
    rng = np.random.default_rng(seed)
    W, b, v = rng.normal(size=(5, 3)), rng.normal(size=5), rng.normal(size=3)
    _, vjp_fn = step.vjp_by_transpose(lambda W, b, v: tp.tanh(W @ v + b), tp.tensor(W), tp.tensor(b), tp.tensor(v))
    rows = [np.stack([vjp_fn(tp.tensor(e))[k].data for e in np.eye(5)]) for k in range(3)]
    theirs = tfunc.jacrev(lambda W, b, v: torch.tanh(W @ v + b), argnums=(0, 1, 2))(
        torch.tensor(W), torch.tensor(b), torch.tensor(v))
    for ours, jac in zip(rows, theirs):
        np.testing.assert_allclose(ours, jac.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(step.rows, step.torch_rows.numpy(), rtol=1e-12, atol=1e-12)


def test_the_pages_check_compared_every_function_with_torch():
    assert len(step.errors) >= 15
    assert max(step.errors.values()) < 1e-12 and max(step.gaps.values()) < 1e-12


def test_the_pages_comparison_is_not_blind():
    """`both` gives our and torch's vjp: a function that differs from torch's gives a different answer."""
    ours, theirs = step.both(lambda fw, a: fw.sin(a) if fw is tp else a.cos(), (step.A,))
    assert np.abs(ours[0] - theirs[0]).max() > 1e-3
    assert step.dot_product_gap(lambda fw, a: fw.sin(a) * a, (step.A,)) < 1e-12


def test_the_backward_pass_of_the_pages_programs_runs_each_line_once():
    for vjp_fn in (step.vjp_fn, step.layer_vjp):
        program, visited = vjp_fn.program, []
        backward_pass(program, [np.ones(y.shape) for y in program.outputs], visited)
        assert len(visited) == len(program.equations) == len({id(e) for e in visited})
    assert len(step.program.equations) == 9 and len(step.transposed.equations) == 8


def test_the_pages_program_reads_the_constants_it_names():
    constants = step.constants
    np.testing.assert_array_equal(constants[0], np.cos(step.x.data))
    np.testing.assert_array_equal(constants[1], step.y.data)
    np.testing.assert_array_equal(constants[2], np.sin(step.x.data))
