"""Step 69: vmap, a batching rule per operation (tinypytorch.batched, batching_state, batching_rules, batching),
checked against torch.func.vmap: what the function sees of a batched value, the door in Function.__call__, the
three rules the page shows (element-wise with its rank padding, reductions with their dims shifted, matmul with
its vectors), in_dims and out_dims, nesting, randomness, PyTorch's errors, and gradients through a vmap.
tests/test_vmap.py runs every row of the operation table through vmap."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch as tp
from tinypytorch import batching_state
from tinypytorch.batched import BatchedVariable, levels_of
from tinypytorch.func import vmap

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402

pytestmark = [pytest.mark.step69, pytest.mark.torch]

rng = np.random.default_rng(68)


def both(call, *arrays):
    """call(vmap, framework, *tensors) in both frameworks."""
    return (call(vmap, tp, *[tp.tensor(a) for a in arrays]),
            call(tfunc.vmap, torch, *[torch.tensor(a) for a in arrays]))


def assert_same(ours, theirs, rtol=1e-12):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(np.asarray(ours.data), theirs.detach().numpy(), rtol=rtol, atol=1e-12)


def error_of(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 (its type and words are compared)
        return type(error), str(error)
    return None, None


# ----- what the function sees ---------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, in_dim", [((4, 3), 0), ((3, 4), 1), ((2, 4, 5), 1), ((2, 3, 4), -1), ((4,), 0)])
def test_the_function_sees_one_samples_shape_as_in_torch(shape, in_dim):
    seen = {}

    def look(name):
        def f(x):
            seen[name] = (tuple(x.shape), x.ndim, x.dim(), tuple(x.size()), x.numel(),
                          len(x) if x.ndim else None, str(x.dtype))
            return x * 2
        return f

    a = rng.normal(size=shape)
    vmap(look("ours"), in_dims=in_dim)(tp.tensor(a))
    tfunc.vmap(look("torch"), in_dims=in_dim)(torch.tensor(a))
    assert seen["ours"] == seen["torch"]


def test_a_batched_variable_is_its_physical_value_without_dim_0():
    physical = tp.tensor(np.zeros((5, 2, 3)))
    b = BatchedVariable(physical, 1)
    assert tuple(b.shape) == (2, 3) and b.ndim == 2 and b.size(1) == 3 and len(b) == 2 and b.numel() == 6
    assert b.physical is physical and b.level == 1


# ----- the door -----------------------------------------------------------------------------------------------

def test_no_rule_runs_while_no_vmap_is_open_and_every_batched_operation_runs_one(monkeypatch):
    calls = []
    original = batching_state.run_rule

    def counting(function, inputs):
        calls.append(type(function).__name__)
        return original(function, inputs)

    monkeypatch.setattr(batching_state, "run_rule", counting)
    x = tp.tensor(rng.normal(size=(4, 3)))
    ((x * 2).sum(0) @ tp.tensor(np.ones(3))).exp()
    assert calls == [] and batching_state.open_vmap_levels == 0
    vmap(lambda a: (a * 2).sum() + 1.0)(x)
    assert calls == ["Mul", "Sum", "Add"]
    assert batching_state.open_vmap_levels == 0 and batching_state.levels == []  # closed again


def test_an_operation_on_unbatched_values_inside_vmap_runs_as_outside():
    w = tp.tensor(np.ones(3))
    inside = {}

    def f(a):
        inside["w"] = w * 2  # no batched input: no rule, a plain Variable
        return a + inside["w"]

    vmap(f)(tp.tensor(np.zeros((4, 3))))
    assert not isinstance(inside["w"], BatchedVariable) and tuple(inside["w"].shape) == (3,)


# ----- element-wise: rank padding -------------------------------------------------------------------------------

@st.composite
def broadcastable(draw):
    """Two logical shapes that broadcast, a batch size, and which operands are batched (at least one)."""
    ndim = draw(st.integers(0, 3))
    base = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    shapes = []
    for _ in range(2):
        drop = draw(st.integers(0, ndim))
        shapes.append(tuple(1 if draw(st.booleans()) else n for n in base[drop:]))
    which = draw(st.sampled_from([(0, None), (None, 0), (0, 0)]))
    return shapes, draw(st.integers(1, 3)), which


@settings(max_examples=60, deadline=None)
@given(broadcastable(), st.sampled_from(["add", "mul", "sub", "div", "pow", "maximum"]))
def test_element_wise_operations_of_any_ranks_batched_as_torch(case, op):
    (s0, s1), size, which = case
    arrays = [rng.uniform(0.5, 2.0, (size,) + s if d == 0 else s) for s, d in zip((s0, s1), which)]
    call = {"add": lambda fw, x, y: x + y, "mul": lambda fw, x, y: x * y, "sub": lambda fw, x, y: x - y,
            "div": lambda fw, x, y: x / y, "pow": lambda fw, x, y: x ** y,
            "maximum": lambda fw, x, y: fw.maximum(x, y)}[op]
    ours, theirs = both(lambda vm, fw, x, y: vm(lambda a, b: call(fw, a, b), in_dims=which)(x, y), *arrays)
    assert_same(ours, theirs)


def test_a_batched_operand_of_lower_rank_is_padded_after_its_batch_dim():
    """The page's case: physical (4, 3) and an unbatched (2, 1) do not broadcast; padded, (4, 1, 3) does."""
    seen = {}

    def f(x, y):
        z = x + y
        seen["physical"] = tuple(z.physical.shape)
        return z

    a, b = rng.normal(size=(4, 3)), rng.normal(size=(2, 1))
    with pytest.raises(ValueError):
        np.add(a, b)
    ours, theirs = both(lambda vm, fw, x, y: vm(f if fw is tp else lambda p, q: p + q, in_dims=(0, None))(x, y),
                        a, b)
    assert_same(ours, theirs)
    assert seen["physical"] == (4, 2, 3)


# ----- reductions: the dims shifted ---------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3, (0, 2), (-1, 0), None])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "logsumexp", "std"])
def test_reductions_over_the_samples_dims_as_torch(op, dim, keepdim):
    if dim is None and (keepdim or op in ("amax", "logsumexp")):
        dim = (0, 1, 2)  # (torch's sum(None, keepdim) and logsumexp need dims named)
    call = lambda vm, fw, x: vm(lambda a: getattr(fw, op)(a, dim, keepdim=keepdim) if dim is not None  # noqa: E731
                                else getattr(a, op)())(x)
    assert_same(*both(call, rng.normal(size=(4, 2, 3, 5))))


@pytest.mark.parametrize("dim", [0, -1, 1])
def test_softmax_along_the_samples_dim_as_torch(dim):
    assert_same(*both(lambda vm, fw, x: vm(lambda a: fw.softmax(a, dim))(x), rng.normal(size=(3, 4, 5))))


# ----- matmul: vectors made matrices --------------------------------------------------------------------------

SHAPES = {1: (3,), 2: (3, 3), 3: (2, 3, 3)}


@pytest.mark.parametrize("nx", [1, 2, 3])
@pytest.mark.parametrize("nw", [1, 2, 3])
@pytest.mark.parametrize("which", [(0, None), (None, 0), (0, 0), (1, -1)])
def test_matmul_of_every_rank_batched_as_torch(nx, nw, which):
    if which == (1, -1) and (nx == 1 or nw == 1):
        which = (0, -1) if nw > 1 else (0, 0)
    arrays = []
    for n, d in zip((nx, nw), which):
        a = rng.normal(size=(4,) + SHAPES[n]) if d is not None else rng.normal(size=SHAPES[n])
        arrays.append(np.moveaxis(a, 0, d) if d is not None else a)
    assert_same(*both(lambda vm, fw, x, w: vm(lambda a, b: a @ b, in_dims=which)(x, w), *arrays))


# ----- in_dims, out_dims ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("in_dims, out_dims", [(0, 0), (1, 0), (-1, 1), ((2, None), -1), ((1, None), (0, 1))])
def test_in_dims_and_out_dims_as_torch(in_dims, out_dims):
    x, w = rng.normal(size=(4, 4, 4)), rng.normal(size=(4, 4))

    def f(a, b):
        return (a @ b, (a * b).sum(0)) if isinstance(out_dims, tuple) else a @ b + b.sum()

    ours, theirs = both(lambda vm, fw, p, q: vm(f, in_dims=in_dims, out_dims=out_dims)(p, q), x, w)
    for o, t in zip(ours, theirs) if isinstance(out_dims, tuple) else [(ours, theirs)]:
        assert_same(o, t)


# ----- nesting ---------------------------------------------------------------------------------------------------

def test_nested_values_are_wrappers_of_the_inner_level_around_the_outer_one():
    seen = {}

    def f(p, q):
        d = p - q
        seen.update(levels=levels_of(d), p=levels_of(p), q=levels_of(q), array=tuple(d.physical.physical.shape),
                    middle=tuple(d.physical.shape))
        return (d * d).sum().sqrt()

    P, Q = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    out = vmap(vmap(f, in_dims=(None, 0)), in_dims=(0, None))(tp.tensor(P), tp.tensor(Q))
    assert seen == dict(levels=[2, 1], p=[1], q=[2], array=(4, 5, 3), middle=(5, 3))
    np.testing.assert_allclose(out.data, torch.cdist(torch.tensor(P), torch.tensor(Q)).numpy(), rtol=1e-12)


def test_three_nested_vmaps_with_other_in_dims_as_torch():
    def call(vm, fw, x, y):
        inner = vm(lambda a, b: (a * b).sum() + fw.exp(a).mean(), in_dims=(0, None))
        return vm(vm(inner, in_dims=(1, 0)), in_dims=(0, None))(x, y)
    assert_same(*both(call, rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(4, 5))))


# ----- randomness ------------------------------------------------------------------------------------------------

def test_randomness_error_is_the_default_with_torchs_words():
    ours, theirs = [error_of(lambda: vm(lambda a: fw.nn.functional.dropout(a, 0.5))(fw.ones(4, 6)))
                    for vm, fw in ((vmap, tp), (tfunc.vmap, torch))]
    assert ours == theirs and ours[0] is RuntimeError


@pytest.mark.parametrize("randomness", ["same", "different"])
def test_dropout_masks_per_sample_or_shared_as_torch_draws_them(randomness):
    """torch's masks are its own random numbers: what must agree is whether the rows share one mask."""
    for vm, fw in ((vmap, tp), (tfunc.vmap, torch)):
        fw.manual_seed(0)
        out = vm(lambda a: fw.nn.functional.dropout(a, 0.5), randomness=randomness)(fw.ones(8, 64))
        rows = np.asarray(out.data if fw is tp else out.numpy())
        assert set(np.unique(rows)) == {0.0, 2.0}
        assert (rows == rows[0]).all() == (randomness == "same"), fw.__name__


# ----- what cannot be batched --------------------------------------------------------------------------------

ERRORS = {
    "item": lambda vm, fw, x, s: vm(lambda a: a.sum().item())(x),
    "float": lambda vm, fw, x, s: vm(lambda a: float(a.sum()))(x),
    "if": lambda vm, fw, x, s: vm(lambda a: a * 2 if a.sum() > 0 else a)(x),
    "while": lambda vm, fw, x, s: vm(lambda a: [a for _ in iter(lambda: bool(a.max() > 9), True)][0])(x),
    "add_ into a shared tensor": lambda vm, fw, x, s: vm(lambda a, t: t.add_(a), in_dims=(0, None))(x, s),
    "mul_ into a shared tensor": lambda vm, fw, x, s: vm(lambda a, t: t.mul_(a), in_dims=(0, None))(x, s),
    "setitem into a shared tensor": lambda vm, fw, x, s: vm(lambda a, t: t.__setitem__(1, a[0]), in_dims=(0, None))(
        x, s),
}


@pytest.mark.parametrize("case", ERRORS)
def test_what_cannot_be_batched_raises_torchs_error(case):
    x, s = rng.normal(size=(4, 3)), np.ones(3)
    ours = error_of(lambda: ERRORS[case](vmap, tp, tp.tensor(x), tp.tensor(s)))
    theirs = error_of(lambda: ERRORS[case](tfunc.vmap, torch, torch.tensor(x), torch.tensor(s)))
    assert ours == theirs and ours[0] is not None


def test_in_place_into_a_batched_tensor_is_allowed_as_in_torch():
    def call(vm, fw, x, s):
        def f(a, t):
            b = a.clone()
            b.add_(t)
            b[0] = a.sum()
            return b
        return vm(f, in_dims=(0, None))(x, s)
    assert_same(*both(call, rng.normal(size=(4, 3)), np.arange(3.0)))


# ----- gradients through vmap ----------------------------------------------------------------------------------

def test_gradients_through_a_vmap_as_torch():
    """The graph is recorded on the physical values: backward of a vmapped function's output reaches the inputs."""
    x, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    grads = []
    for vm, fw in ((vmap, tp), (tfunc.vmap, torch)):
        a, b = fw.tensor(x, requires_grad=True), fw.tensor(w, requires_grad=True)
        y = vm(lambda p, q: fw.tanh(p @ q).sum() * p.norm(), in_dims=(0, None))(a, b)
        (y * fw.tensor([1.0, -2.0, 0.5, 3.0], dtype=fw.float64)).sum().backward()
        grads.append((np.asarray(a.grad.data if fw is tp else a.grad.numpy()),
                      np.asarray(b.grad.data if fw is tp else b.grad.numpy())))
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


# ----- layout: view and contiguous read one sample's strides ----------------------------------------------------

@pytest.mark.parametrize("in_dim", [0, 1, 2])
def test_view_contiguous_and_is_contiguous_of_a_sample_as_torch(in_dim):
    """A batched value's layout is one sample's: view without a copy where torch views, its error where torch
    raises; is_contiguous and contiguous as torch's (they read the sample's strides, not a whole batch's)."""
    x = np.arange(24.0).reshape(2, 3, 4)
    for f in (lambda fw, s: s.view(-1), lambda fw, s: s.t().contiguous().view(-1) * 2,
              lambda fw, s: fw.tensor([s.is_contiguous(), s.t().is_contiguous(), s.contiguous().is_contiguous()])):
        ours = error_of(lambda: vmap(lambda s: f(tp, s), in_dims=in_dim)(tp.tensor(x)))
        theirs = error_of(lambda: tfunc.vmap(lambda s: f(torch, s), in_dims=in_dim)(torch.tensor(x)))
        assert ours == theirs
        if ours[0] is None:
            assert_same(*both(lambda vm, fw, a: vm(lambda s: f(fw, s), in_dims=in_dim)(a), x))


def test_view_of_a_sample_inside_nested_vmaps_as_torch():
    call = lambda vm, fw, a: vm(vm(lambda s: s.view(2, 1) * s.view(1, 2)), in_dims=1)(a)  # noqa: E731
    assert_same(*both(call, rng.normal(size=(3, 4, 2))))
