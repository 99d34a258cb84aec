"""Step 72: reverse mode from forward mode (tinypytorch.linear_transpose): linearize's jvp_fn traced into a
program of linear primitives and run backwards through their transpose rules. Checked against torch.func.vjp
over functions and shapes (broadcasting, reductions with keepdim, matmul with the tangent on either side and
batched, indexing, cat and stack, casts, pytrees), the dot-product test <u, J t> = <J^T u, t> for every
primitive and for whole functions, transposing twice, each line's rule run once, and the errors for what is not
linear. Every expected value is torch's, or the defining identity of a transpose on random vectors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch as tp
from tinypytorch import linear_transpose as lt
from tinypytorch.core import Function
from tinypytorch.func import linearize
from tinypytorch.linear_transpose import LinearTracer, linear_transpose, vjp_by_transpose
from tinypytorch.utils.pytree import tree_flatten, tree_unflatten

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402
from torch.utils import _pytree as torch_pytree  # noqa: E402

pytestmark = [pytest.mark.step72, pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node")]

RNG = np.random.default_rng(72)
A, B, C = RNG.normal(size=(3, 4)), RNG.normal(size=(4, 5)), RNG.normal(size=(2, 3, 4))
F = {tp: tp.nn.functional, torch: torch.nn.functional}


def vjps(f, arrays, rng, dtype=np.float64, rtol=1e-12):
    """(our J^T u, torch's) for one random cotangent u: vjp_by_transpose and torch.func.vjp of f(framework, ...)."""
    arrays = [np.asarray(a, dtype=dtype) for a in arrays]
    out, vjp_fn = vjp_by_transpose(lambda *xs: f(tp, *xs), *[tp.tensor(a) for a in arrays])
    torch_out, torch_vjp = tfunc.vjp(lambda *xs: f(torch, *xs), *[torch.tensor(a) for a in arrays])
    leaves, spec = tree_flatten(out)
    torch_leaves, torch_spec = torch_pytree.tree_flatten(torch_out)
    for ours, theirs in zip(leaves, torch_leaves):  # the outputs too
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=rtol, atol=rtol)
    us = [rng.normal(size=tuple(leaf.shape)).astype(leaf.data.dtype) for leaf in leaves]
    ours = vjp_fn(tree_unflatten([tp.tensor(u) for u in us], spec))
    theirs = torch_vjp(torch_pytree.tree_unflatten([torch.tensor(u) for u in us], torch_spec))
    assert isinstance(ours, tuple) and len(ours) == len(theirs)
    for g, a in zip(ours, arrays):
        assert tuple(g.shape) == a.shape and g.data.dtype == a.dtype
    return [g.data for g in ours], [g.numpy() for g in theirs]


CASES = {
    "sin(x) y + x / y": (lambda fw, a, c: fw.sin(a) * c + a / c, (A, A * A + 1)),
    "tanh layer": (lambda fw, w, c, a: fw.tanh(w @ a + c), (B.T, B[0], A[0])),
    "exp, log, sqrt, pow": (lambda fw, a: fw.exp(a) * fw.log(a * a + 1) + (a * a + 1).sqrt() ** 1.5, (A,)),
    "broadcast (3, 4, 1) with (5,)": (lambda fw, a, c: a.reshape(3, 4, 1) * c + fw.exp(a).reshape(3, 4, 1),
                                      (A, B[0])),
    "broadcast (3, 1) with (4,)": (lambda fw, a, c: (a * c).sin() - c / (a * a + 1), (A[:, :1], A[0])),
    "a scalar with a matrix": (lambda fw, s, a: s * a + (s * s).exp() * a.sum(), (np.array(0.7), A)),
    "sum, keepdim, mean": (lambda fw, a: a.sum(1, keepdim=True) * a.mean(0) + (a * a).sum(), (A,)),
    "sum over two dims": (lambda fw, c: c.sum((0, 2)) * c.sum((1,), keepdim=True).sum(-1), (C,)),
    "softmax, log_softmax, logsumexp": (lambda fw, a: fw.softmax(a, 1) * fw.logsumexp(a, 0).sum()
                                        + F[fw].log_softmax(a, 0), (A,)),
    "x @ W, W @ x": (lambda fw, a, w: (a @ w).tanh() @ w.t() + (a @ a.t()).sin() @ a, (A, B)),
    "batched @ matrix": (lambda fw, c, w: (c @ w).sum(0) * (c[0] @ w), (C, B)),
    "matrix @ batched": (lambda fw, w, c: (w.t() @ c.transpose(1, 2)).tanh(), (B, C)),
    "vector @ matrix, matrix @ vector": (lambda fw, a, w: (a[0] @ w) * (w.t() @ a[1]).sum(), (A, B)),
    "vector @ vector": (lambda fw, a: (a[0] @ a[1]) * a[2], (A,)),
    "linear": (lambda fw, a, w, c: F[fw].linear(a, w, c).tanh(), (A, B.T, B[0])),
    "indexing, slices": (lambda fw, a: a[1:, ::2] * a[0, -1] + a[-1, 1:3], (A,)),
    "indexing, an index array": (lambda fw, a: a[[0, 2, 1, 2]].sum(0, keepdim=True)[:, :2] * a[2, [3, 3]], (A,)),
    "reshape, permute, transpose": (lambda fw, c: c.reshape(4, 3, 2).permute(2, 0, 1).exp() * c.sum()
                                    + c.transpose(0, 2).sum(), (C,)),
    "unsqueeze, expand, squeeze": (lambda fw, a: a.unsqueeze(0).expand(2, 3, 4).sin() * a.sum(0).squeeze(), (A,)),
    "cat, stack": (lambda fw, a, c: fw.cat([a, c * 2]).exp() + fw.cat([fw.stack([a, c], 1).sin().sum(1)] * 2),
                   (A, A[::-1].copy())),
    "relu, where, amax": (lambda fw, a: fw.relu(a) * fw.where(a > 0, a, a * 2) + a.amax(1, keepdim=True), (A,)),
    "maximum, clamp, abs": (lambda fw, a, c: fw.maximum(a, c) * a.clamp(-0.5, 0.5) + a.abs(), (A, A.T[::-1].T.copy())),
    "sigmoid, std, var, prod": (lambda fw, a: fw.sigmoid(a) * a.std() + a.var(1).sum() * a.prod(0), (A,)),
    "cross_entropy": (lambda fw, a: F[fw].cross_entropy(a, fw.tensor(np.array([0, 3, 1]))), (A,)),
    "mse_loss": (lambda fw, a, c: F[fw].mse_loss(a, c), (A, A + 1)),
    "a tuple out": (lambda fw, a: (a.sum(0), (a * a).prod(1)), (A,)),
    "a dict out": (lambda fw, a, c: {"p": a * c, "q": (a - c).sum()}, (A, A.T.copy().T + 1)),
    "an input not used": (lambda fw, a, c: a * 2, (A, B)),
    "the identity": (lambda fw, a: a, (A,)),
    "an output that depends on no input": (lambda fw, a: (a.sin(), fw.ones(2, dtype=fw.float64)), (A,)),
}


@pytest.mark.parametrize("name", CASES)
def test_the_transposed_jvp_is_torch_vjp(name):
    f, arrays = CASES[name]
    ours, theirs = vjps(f, arrays, np.random.default_rng(len(name)))
    for g, h in zip(ours, theirs):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)


def test_float32_inside_and_float32_primals():
    """A cast inside (float64 -> float32 -> float64) and float32 primals: torch's, to float32's rounding."""
    rng = np.random.default_rng(3)
    ours, theirs = vjps(lambda fw, a: a.to(fw.float32).sin().double() * a, (A,), rng, rtol=1e-6)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-6)
    ours, theirs = vjps(lambda fw, a, c: (a @ c).tanh(), (A, B), rng, dtype=np.float32, rtol=1e-5)
    for g, h in zip(ours, theirs):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, h, rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_broadcasting_shapes_and_reductions_with_keepdim_against_torch(data):
    """Two operands of broadcasting shapes, then a sum over random dims, with and without keepdim."""
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    other = [data.draw(st.sampled_from([1, n])) for n in shape][data.draw(st.integers(0, len(shape) - 1)):]
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdim = data.draw(st.booleans())
    rng = np.random.default_rng(len(shape) * 10 + len(other))
    a, c = rng.normal(size=shape), rng.uniform(1, 2, size=other)

    def f(fw, a, c):
        return ((fw.sin(a) * c + a / c).sum(dims, keepdim=keepdim) * c.sum()).exp()
    ours, theirs = vjps(f, (a, c), rng)
    for g, h in zip(ours, theirs):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sin(x) y + x / y", "tanh layer", "broadcast (3, 1) with (4,)", "sum over two dims",
                                  "x @ W, W @ x", "batched @ matrix", "indexing, an index array", "cat, stack",
                                  "a tuple out", "a dict out"])
def test_the_dot_product_test_on_random_vectors(name):
    """<u, J t> = <J^T u, t>: linearize's jvp_fn and its transpose, for random t and u."""
    f, arrays = CASES[name]
    rng = np.random.default_rng(len(name) + 1)
    primals = [tp.tensor(a) for a in arrays]
    out, jvp_fn = linearize(lambda *xs: f(tp, *xs), *primals)
    vjp_fn = linear_transpose(jvp_fn, *primals)
    leaves, spec = tree_flatten(out)
    for _ in range(3):
        ts = [tp.tensor(rng.normal(size=np.shape(a))) for a in arrays]
        us = [tp.tensor(rng.normal(size=tuple(leaf.shape))) for leaf in leaves]
        left = sum((u.data * jt.data).sum() for u, jt in zip(us, tree_flatten(jvp_fn(*ts))[0]))
        right = sum((g.data * t.data).sum() for g, t in zip(vjp_fn(tree_unflatten(us, spec)), ts))
        assert abs(left - right) <= 1e-12 * max(1.0, abs(left))


def primitive_cases():
    """(name, f on one tracer or array, the input's shape): one linear function per primitive, and the ways
    NumPy reaches them."""
    rng = np.random.default_rng(0)
    c34, c4, m45 = rng.normal(size=(3, 4)), rng.normal(size=4) + 3, rng.normal(size=(4, 5))
    mask = rng.normal(size=(3, 4)) > 0
    index = np.array([2, 0, 2])
    return {
        "mul": (lambda t: t * c34, (3, 4)),
        "mul, broadcast": (lambda t: c34 * t, (4,)),
        "div": (lambda t: t / c4, (3, 4)),
        "neg, sub": (lambda t: -t - t * 2.0, (3, 4)),
        "add": (lambda t: t + t[::-1], (3, 4)),
        "sum": (lambda t: t.sum(axis=1), (3, 4)),
        "sum, keepdims": (lambda t: t.sum(axis=(0,), keepdims=True), (3, 4)),
        "np.sum, mean": (lambda t: np.sum(t, axis=0) + t.mean(axis=0), (3, 4)),
        "broadcast_to": (lambda t: np.broadcast_to(t, (2, 3, 4)), (3, 1)),
        "reshape": (lambda t: t.reshape(2, -1), (3, 4)),
        "transpose, T, swapaxes, moveaxis": (lambda t: t.T + np.swapaxes(t, 0, 1) + np.moveaxis(t, 0, -1), (3, 4)),
        "moveaxis, three dims": (lambda t: np.moveaxis(t, 0, -1) - np.moveaxis(t, [0, 1], [2, 0]), (2, 3, 4)),
        "t @ c": (lambda t: t @ m45, (3, 4)),
        "c @ t": (lambda t: m45.T @ t, (4, 3)),
        "vector @ c": (lambda t: t @ m45, (4,)),
        "c @ vector": (lambda t: m45 @ t, (5,)),
        "where with a zero branch": (lambda t: np.where(mask, t, 0) + np.where(mask, 0.0, 2 * t), (3, 4)),
        "where of two tangents": (lambda t: np.where(mask, t, -t), (3, 4)),
        "getitem": (lambda t: t[1:, ::2], (3, 4)),
        "getitem, an index array": (lambda t: t[index], (3, 4)),
        "getitem, a number": (lambda t: t[1, 2] * c4, (3, 4)),
        "expand_dims, squeeze": (lambda t: np.squeeze(np.expand_dims(t, 1), 1) * c34, (3, 4)),
        "concatenate, stack": (lambda t: np.concatenate([t, np.zeros((2, 4)), t]) + np.stack([t, t]).sum(0)[0],
                               (3, 4)),
        "astype float32": (lambda t: t.astype(np.float32), (3, 4)),
        "add a zero constant": (lambda t: t + np.zeros((2, 3, 4)), (3, 4)),
    }


@pytest.mark.parametrize("name", list(primitive_cases()))
def test_every_primitive_passes_the_dot_product_test_and_transposes_back(name):
    """For each primitive: the program run on t equals the function on arrays; <u, A t> = <A^T u, t>; and the
    transpose of the transpose is the program again (its values on t)."""
    f, shape = primitive_cases()[name]
    rng = np.random.default_rng(len(name))
    program = lt.trace(lambda ts: [f(ts[0])], [(shape, np.float64)])
    assert all(isinstance(v, LinearTracer) for v in program.outputs)
    (y,) = program.outputs
    t = rng.normal(size=shape)
    (at,) = program(t)
    np.testing.assert_array_equal(at, f(t))
    u = rng.normal(size=y.shape).astype(y.dtype)
    (atu,) = lt.backward_pass(program, [u])
    assert atu.shape == shape and atu.dtype == np.float64
    tol = 1e-6 if y.dtype == np.float32 else 1e-12
    assert abs((u * at).sum() - (atu * t).sum()) <= tol * max(1.0, abs((u * at).sum()))
    transposed = lt.trace(lambda us: lt.backward_pass(program, us), [(y.shape, y.dtype)])
    twice = lt.trace(lambda ts: lt.backward_pass(transposed, ts), [(shape, np.float64)])
    np.testing.assert_allclose(twice(t)[0], at, rtol=1e-12, atol=1e-12)


def test_the_backward_pass_runs_each_line_once_and_skips_lines_no_output_needs():
    f, arrays = CASES["x @ W, W @ x"]
    primals = [tp.tensor(a) for a in arrays]
    _, vjp_fn = vjp_by_transpose(lambda *xs: f(tp, *xs), *primals)
    program, visited = vjp_fn.program, []
    lt.backward_pass(program, [np.ones(program.outputs[0].shape)], visited)
    assert len(visited) == len(program.equations) == len({id(e) for e in visited})
    assert visited == program.equations[::-1]  # in reverse order
    # a line whose result no output uses: its rule does not run
    dead = lt.trace(lambda ts: [ts[0] * 2.0, ts[0] * 3.0][:1], [((3,), np.float64)])
    visited = []
    lt.backward_pass(dead, [np.ones(3)], visited)
    assert len(dead.equations) == 2 and len(visited) == 1


def test_the_program_prints_as_lines():
    x, y = tp.tensor(A[0]), tp.tensor(A[1] ** 2 + 1)
    _, jvp_fn = linearize(lambda a, b: tp.sin(a) * b, x, y)
    text = str(lt.trace(jvp_fn.on_arrays, [(x.shape, x.dtype), (y.shape, y.dtype)]))
    assert text.splitlines()[0] == "in  t0: float64[4], t1: float64[4]"
    assert "t2 = t0 * c0" in text and "t4 = t1 * c2" in text and "t5 = t3 + t4" in text
    assert "out t5" in text and "c0: float64[4]" in text


# ----- what is not linear, and what has no rule --------------------------------------------------------------

def traced(f, shape=(3,)):
    return lt.trace(lambda ts: [f(ts[0])], [(shape, np.float64)])


@pytest.mark.parametrize("f, words", [
    (lambda t: t * t, "a tangent times a tangent"),
    (lambda t: np.exp(t), "numpy.exp of a tangent"),
    (lambda t: t + 1.0, "non-zero constant"),
    (lambda t: 1.0 - t, "non-zero constant"),
    (lambda t: 2.0 / t, "a division by a tangent"),
    (lambda t: t ** 2, "a tangent to a power"),
    (lambda t: t if t else -t, "bool() of a tangent"),
    (lambda t: t > 0, "a comparison of a tangent"),
    (lambda t: np.greater(t, 0), "numpy.greater of a tangent"),
    (lambda t: np.where(t, 1.0, 0.0), "where's condition"),
    (lambda t: np.where(np.array([True, False, True]), t, 1.0), "non-zero constant branch"),
    (lambda t: t @ t, "a tangent @ a tangent"),
    (lambda t: np.asarray(t), "reading a tangent's values"),
    (lambda t: t.astype(np.int64), "a cast of a tangent to int64"),
    (lambda t: np.concatenate([t, np.ones(2)]), "non-zero constant"),
])
def test_what_is_not_linear_is_refused_with_the_operation_named(f, words):
    with pytest.raises(RuntimeError, match="is not linear in the tangent") as error:
        traced(f)
    assert words in str(error.value)


def test_an_output_that_is_a_nonzero_constant_is_refused():
    with pytest.raises(RuntimeError, match="non-zero constant"):
        lt.trace(lambda ts: [ts[0] * 2.0, np.ones(3)], [((3,), np.float64)])


@pytest.mark.parametrize("f, name", [(lambda t: np.cumsum(t), "numpy.cumsum"), (lambda t: np.flip(t), "numpy.flip"),
                                     (lambda t: np.add.reduce(t), "numpy.add.reduce")])
def test_a_numpy_function_without_a_primitive_is_refused_by_name(f, name):
    with pytest.raises(NotImplementedError, match=f"{name} on a tangent has no transpose rule"):
        traced(f)


def test_a_nonlinear_jvp_rule_is_refused_where_linearize_accepts_it():
    class WrongSquare(Function):
        def forward(self, x):
            return x * x

        def jvp(self, t):
            return 2 * self.primals[0] * t * t

    x = tp.tensor(A[0])
    linearize(lambda a: WrongSquare()(a), x)  # forward mode runs it
    with pytest.raises(RuntimeError, match="a tangent times a tangent is not linear"):
        vjp_by_transpose(lambda a: WrongSquare()(a), x)


def test_a_custom_autograd_function_jvp_on_tensors_cannot_be_traced():
    class Cube(tp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = x
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            return 3 * ctx.x * ctx.x * g

        @staticmethod
        def jvp(ctx, t):
            return 3 * ctx.x * ctx.x * t

    with pytest.raises(NotImplementedError, match="custom autograd.Function's jvp works on tensors"):
        vjp_by_transpose(Cube.apply, tp.tensor(A[0]))


def test_misuse_of_linear_transpose():
    x = tp.tensor(A[0])
    with pytest.raises(TypeError, match="expected the jvp_fn of tinypytorch.func.linearize"):
        linear_transpose(lambda t: t * 2, x)
    _, vjp_fn = vjp_by_transpose(lambda a: a.sin(), x)
    with pytest.raises(RuntimeError, match=r"a cotangent of shape \(3,\) for an output of shape \(4,\)"):
        vjp_fn(tp.tensor(A[0, :3]))
    with pytest.raises(RuntimeError, match="expected cotangents of the structure of the output"):
        vjp_fn((x,))
    _, jvp_fn = linearize(lambda a: a.sin(), x)
    for wrong in [(tp.tensor(A[1, :3]),), (tp.tensor(A[0].astype(np.float32)),), (x, x), ((x,),)]:
        with pytest.raises(RuntimeError, match="are not shaped as linear_fn's inputs"):
            linear_transpose(jvp_fn, *wrong)
    with pytest.raises(TypeError, match="expected the primals to be tensors, got ndarray"):
        linear_transpose(jvp_fn, A[0])


def test_the_function_linearize_returns_carries_what_linear_transpose_reads():
    x, y = tp.tensor(A[0]), tp.tensor(A[:2].astype(np.float32))
    out, jvp_fn = linearize(lambda a, b: {"s": (a * b).sum(), "p": b.exp()}, x, y)
    assert jvp_fn.in_types == [((4,), np.dtype(np.float64)), ((2, 4), np.dtype(np.float32))]
    assert jvp_fn.in_spec == tree_flatten((x, y))[1] and jvp_fn.out_spec == tree_flatten(out)[1]
    ts = [RNG.normal(size=(4,)), RNG.normal(size=(2, 4)).astype(np.float32)]
    on_arrays = jvp_fn.on_arrays(ts)
    through_tensors = tree_flatten(jvp_fn(*[tp.tensor(t) for t in ts]))[0]
    for a, b in zip(on_arrays, through_tensors):
        np.testing.assert_array_equal(a, b.data)
    vjp_fn = linear_transpose(jvp_fn, x, y)
    assert vjp_fn.in_spec == tree_flatten((out,))[1] and vjp_fn.out_spec == jvp_fn.in_spec  # called as vjp_fn(u)
    assert vjp_fn.in_types == [((), np.dtype(np.float64)), ((2, 4), np.dtype(np.float32))]


def test_a_tensor_on_the_device_is_refused_clearly(xp):
    x = tp.Variable(xp.asarray(A[0]))
    if xp is np:
        vjp_by_transpose(lambda a: a.sin(), x)
        return
    with pytest.raises(NotImplementedError, match="tensors on the CPU only"):
        vjp_by_transpose(lambda a: a.sin(), x)
