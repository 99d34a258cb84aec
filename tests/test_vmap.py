"""vmap (tinypytorch.batching, tinypytorch.batching_rules) against torch.func.vmap: every operation of the table batched,
vmap's arguments and errors, nesting, randomness, in-place operations, and vmap with the autograd transforms
(per-sample gradients, vmap of a vjp_fn, jacrev, jacfwd, hessian)."""
import sys
import warnings

import numpy as np
import pytest

import tinypytorch as tp
from operations import OPERATIONS, operands
from tinypytorch import Variable, func
from tinypytorch.func import vmap

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402

pytestmark = [pytest.mark.torch]

BATCH = 3

# Rows whose expression cannot be batched as written, and what it raises (torch batches them all but dropout)
DATA_OF_A_SAMPLE = "accessing `data` under vmap transform is not allowed"  # the row reads a.data (a sample's array)
NOT_BATCHED = {
    ("where", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("max dim 1, values", 0): (RuntimeError, DATA_OF_A_SAMPLE),  # max(x, dim) computes argmax on the array
    ("min dim 0 keepdim, values cubed", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("x at argmax dim 1", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("x at argmin dim 0 keepdim", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("prod, a zero", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("prod dim 0, a zero", 0): (RuntimeError, DATA_OF_A_SAMPLE),
    ("layer_norm", 1): (NotImplementedError, "layer_norm with a batched weight or bias"),
    ("layer_norm", 2): (NotImplementedError, "layer_norm with a batched weight or bias"),
    ("scatter", 0): (NotImplementedError, "no batching rule for scatter"),
    ("scatter", 1): (NotImplementedError, "no batching rule for scatter"),
    ("scatter value cubed", 0): (NotImplementedError, "no batching rule for scatter"),
}
RANDOM = {"dropout", "dropout cubed"}

CASES = [(op, i) for op in OPERATIONS for i in range(len(op.shapes))]


def batched_operands(op, which, in_dim):
    """The row's operands, operand `which` given a batch of BATCH along dim in_dim."""
    arrays = operands(op)
    low, high = op.domain
    batch = np.random.default_rng(1).uniform(low, high, (BATCH,) + op.shapes[which])
    arrays[which] = np.moveaxis(batch, 0, in_dim)
    return arrays, tuple(in_dim if i == which else None for i in range(len(arrays)))


def torch_error(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except Exception as error:  # noqa: BLE001 (any error: its type and words are compared)
            return type(error), str(error)
    raise AssertionError("torch raised nothing")


def assert_same_error(call, t_call):
    kind, message = torch_error(t_call)
    with pytest.raises(kind) as info:
        call()
    assert str(info.value) == message


def assert_matches(ours, theirs, atol=1e-12):
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_allclose(np.asarray(ours.data), theirs.detach().numpy(), rtol=1e-10, atol=atol)


@pytest.mark.parametrize("in_dim", [0, -1])
@pytest.mark.parametrize("op, which", CASES, ids=[f"{op.name}-{i}" for op, i in CASES])
def test_every_operation_of_the_table_batched_as_torch_batches_it(op, which, in_dim):
    arrays, dims = batched_operands(op, which, in_dim)
    call = lambda: vmap(op.ours, in_dims=dims)(*[Variable(a) for a in arrays])  # noqa: E731
    t_call = lambda: tfunc.vmap(op.theirs, in_dims=dims)(*[torch.tensor(a) for a in arrays])  # noqa: E731
    if op.name in RANDOM:  # the package draws its mask (torch's twin is a fixed one): refused in randomness="error"
        with pytest.raises(RuntimeError, match="randomness error mode"):
            call()
        return
    if op.name in ("mul_ of a view", "x[0] = w of a non-leaf") and which == 1:
        return assert_same_error(call, t_call)  # a batched value written into an unbatched tensor in place
    if (op.name, which) in NOT_BATCHED:
        kind, words = NOT_BATCHED[(op.name, which)]
        with pytest.raises(kind, match=words.replace("`", ".")):
            call()
        return
    assert_matches(call(), t_call())


def test_the_rows_not_batched_are_rows_of_the_table():
    names = {(op.name, i) for op, i in CASES}
    assert set(NOT_BATCHED) <= names and RANDOM <= {op.name for op in OPERATIONS}


# ----- vmap's arguments ---------------------------------------------------------------------------------------

X = np.arange(6.0).reshape(3, 2) / 7.0
W = np.linspace(-1.0, 1.0, 8).reshape(2, 4)


def both(call):
    """call(vmap, framework, to_tensor) in both frameworks."""
    ours = call(vmap, tp, lambda a: Variable(np.asarray(a)))
    theirs = call(tfunc.vmap, torch, lambda a: torch.tensor(np.asarray(a)))
    return ours, theirs


CALLS = {
    "in_dims 1": lambda vm, fw, T: vm(lambda a: fw.sin(a) * 2.0, in_dims=1)(T(X)),
    "in_dims -1": lambda vm, fw, T: vm(lambda a: a.sum(0), in_dims=(-1,))(T(X)),
    "in_dims None for a shared argument": lambda vm, fw, T: vm(lambda a, w: a @ w, in_dims=(0, None))(T(X), T(W)),
    "out_dims 1": lambda vm, fw, T: vm(lambda a, w: a @ w, in_dims=(0, None), out_dims=1)(T(X), T(W)),
    "out_dims -1": lambda vm, fw, T: vm(lambda a: a[:, None] * a, out_dims=-1)(T(X)),
    "an unbatched output is repeated": lambda vm, fw, T: vm(lambda a, w: w * 2.0, in_dims=(0, None))(T(X), T(W)),
    "out_dims None for an unbatched output": lambda vm, fw, T:
        vm(lambda a, w: (a * 2.0, w.sum()), in_dims=(0, None), out_dims=(0, None))(T(X), T(W))[1],
    "a dict argument": lambda vm, fw, T: vm(lambda d: d["a"] * d["b"], in_dims=({"a": 0, "b": None},))(
        {"a": T(X), "b": T(X[0])}),
    "a tuple output": lambda vm, fw, T: vm(lambda a: (a, a.sum()))(T(X))[1],
    "a keyword argument is not batched": lambda vm, fw, T: vm(lambda a, b=None: a * b)(T(X), b=T(X[0])),
    "nested: an outer product": lambda vm, fw, T: vm(vm(lambda a, b: a * b, in_dims=(None, 0)), in_dims=(0, None))(
        T(X[:, 0]), T(W[0])),
    "nested: matrix rows": lambda vm, fw, T: vm(vm(lambda a, w: (a * w).sum(), in_dims=(None, 1)),
                                                in_dims=(0, None))(T(X), T(W)),
    "nested: out_dims 1 of both": lambda vm, fw, T: vm(vm(lambda a: a.sum(), out_dims=0), out_dims=1)(T(W)),
    "nested: in_dims 1 inside": lambda vm, fw, T: vm(vm(lambda a: fw.exp(a), in_dims=1), in_dims=1)(
        T(X.reshape(3, 2, 1))),
    "matmul: a batched vector and a shared matrix": lambda vm, fw, T: vm(lambda v, m: m @ v, in_dims=(0, None))(
        T(X), T(W.T)),
    "matmul: two batched vectors": lambda vm, fw, T: vm(lambda u, v: u @ v)(T(X), T(X[::-1].copy())),
    "matmul: a shared vector, batched matrices": lambda vm, fw, T: vm(lambda v, m: v @ m, in_dims=(None, 0))(
        T(X[0]), T(np.stack([W, -W, 2 * W]))),
    "linear with a batched weight": lambda vm, fw, T: vm(fw.nn.functional.linear, in_dims=(None, 0, 0))(
        T(X[0]), T(np.stack([W.T, -W.T, W.T * 2])), T(X[:, :1].repeat(4, 1))),
    "reshape of a sample": lambda vm, fw, T: vm(lambda a: a.reshape(2, 1) * a.reshape(1, 2))(T(X)),
    "an empty batch": lambda vm, fw, T: vm(lambda a: a * 2.0)(T(np.ones((0, 2)))),
}


@pytest.mark.parametrize("case", CALLS)
def test_vmap_arguments_as_torch(case):
    ours, theirs = both(CALLS[case])
    assert_matches(ours, theirs)


ERRORS = {
    "item": lambda vm, fw, T: vm(lambda a: a.item())(T(X)),
    "int": lambda vm, fw, T: vm(lambda a: int(a.sum()))(T(X)),
    "control flow": lambda vm, fw, T: vm(lambda a: a if a.sum() > 0 else -a)(T(X)),
    "numpy": lambda vm, fw, T: vm(lambda a: a.numpy())(T(X)),
    "data": lambda vm, fw, T: vm(lambda a: a.data * 2)(T(X)),
    "sizes differ": lambda vm, fw, T: vm(lambda a, b: a + b)(T(X), T(W)),
    "a number with in_dim 0": lambda vm, fw, T: vm(lambda a: a)(2.0),
    "in_dims None": lambda vm, fw, T: vm(lambda a: a, in_dims=None)(T(X)),
    "in_dims a list": lambda vm, fw, T: vm(lambda a, b: a, in_dims=[0, 0])(T(X), T(X)),
    "in_dims of the wrong structure": lambda vm, fw, T: vm(lambda a, b: a, in_dims=(0,))(T(X), T(X)),
    "in_dims not an int": lambda vm, fw, T: vm(lambda a: a, in_dims=(0.5,))(T(X)),
    "in_dims out of range": lambda vm, fw, T: vm(lambda a: a, in_dims=(3,))(T(X)),
    "out_dims None for a batched output": lambda vm, fw, T: vm(lambda a: a, out_dims=None)(T(X)),
    "out_dims out of range": lambda vm, fw, T: vm(lambda a: a, out_dims=5)(T(X)),
    "out_dims of the wrong structure": lambda vm, fw, T: vm(lambda a: (a, a), out_dims=(0,))(T(X)),
    "a number returned": lambda vm, fw, T: vm(lambda a: 2.0)(T(X)),
    "randomness unknown": lambda vm, fw, T: vm(lambda a: a, randomness="x")(T(X)),
    "randomness error: rand": lambda vm, fw, T: vm(lambda a: a + fw.rand(2, dtype=fw.float64))(T(X)),
    "randomness error: dropout": lambda vm, fw, T: vm(lambda a: fw.nn.functional.dropout(a, 0.5))(T(X)),
    "chunk_size 0": lambda vm, fw, T: vm(lambda a: a, chunk_size=0)(T(X)),
    "add_ of a batched value into a shared one": lambda vm, fw, T: vm(lambda a, b: b.add_(a), in_dims=(0, None))(
        T(X), T(np.ones(2))),
    "a batched value written into a shared one": lambda vm, fw, T: vm(lambda a, b: b.__setitem__(0, a.sum()),
                                                                       in_dims=(0, None))(T(X), T(np.ones(2))),
}


@pytest.mark.parametrize("case", ERRORS)
def test_what_torch_refuses_is_refused_in_its_words(case):
    assert_same_error(lambda: ERRORS[case](vmap, tp, lambda a: Variable(np.asarray(a))),
                      lambda: ERRORS[case](tfunc.vmap, torch, lambda a: torch.tensor(np.asarray(a))))


def test_an_operation_without_a_rule_is_named():
    with pytest.raises(NotImplementedError, match="no batching rule for scatter"):
        vmap(lambda a: tp.scatter(a, 0, Variable(np.array([1, 0])), 1.5))(Variable(X))


# ----- randomness ---------------------------------------------------------------------------------------------

def test_randomness_same_gives_every_sample_the_same_mask_and_different_not():
    x = Variable(np.ones((4, 50)))
    same = np.asarray(vmap(lambda a: tp.nn.functional.dropout(a, 0.5), randomness="same")(x).data)
    different = np.asarray(vmap(lambda a: tp.nn.functional.dropout(a, 0.5), randomness="different")(x).data)
    assert (same == same[0]).all() and set(np.unique(same)) == {0.0, 2.0}
    assert not (different == different[0]).all() and set(np.unique(different)) == {0.0, 2.0}
    shared = np.asarray(vmap(lambda a: a * tp.rand(50, dtype=tp.float64), randomness="same")(x).data)
    assert (shared == shared[0]).all()


def test_a_random_factory_under_randomness_different_is_refused_not_repeated():
    with pytest.raises(NotImplementedError, match="randomness='different'"):
        vmap(lambda a: a + tp.rand(2, dtype=tp.float64), randomness="different")(Variable(X))


# ----- in-place operations ------------------------------------------------------------------------------------

IN_PLACE = {
    "add_ of a shared value": lambda fw, a, b: a.clone().add_(b),
    "mul_ of a batched value": lambda fw, a, b: a.clone().mul_(a),
    "zero_": lambda fw, a, b: a.clone().zero_() + a,
    "setitem of a batched value": lambda fw, a, b: _set(a.clone(), 0, a.sum()),
    "setitem of a shared value": lambda fw, a, b: _set(a.clone(), slice(None), b),
    "copy_": lambda fw, a, b: a.clone().copy_(b * 3.0),
    "sin_": lambda fw, a, b: a.clone().sin_(),
    "mul_ of a view": lambda fw, a, b: _view_mul(a, b),
}


def _set(x, key, value):
    x[key] = value
    return x


def _view_mul(x, w):
    base = x[None, :] * 1.0
    row = base[0]
    row.mul_(w)
    return base


@pytest.mark.parametrize("case", IN_PLACE)
def test_in_place_operations_on_batched_values_as_torch(case):
    a, b = X, np.array([0.5, -2.0])
    ours = vmap(lambda p, q: IN_PLACE[case](tp, p, q), in_dims=(0, None))(Variable(a), Variable(b))
    theirs = tfunc.vmap(lambda p, q: IN_PLACE[case](torch, p, q), in_dims=(0, None))(torch.tensor(a), torch.tensor(b))
    assert_matches(ours, theirs)


# ----- autograd and vmap ------------------------------------------------------------------------------------------

def _models():
    """A small classifier in both frameworks, with the same float32 parameters."""
    tp.manual_seed(0)
    ours = tp.nn.Sequential(tp.nn.Linear(4, 6), tp.nn.ReLU(), tp.nn.Linear(6, 3))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    with torch.no_grad():
        for p, q in zip(ours.parameters(), theirs.parameters()):
            q.copy_(torch.tensor(np.asarray(p.data)))
    return ours, theirs


DATA = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
TARGETS = np.array([0, 2, 1, 2, 0])


def test_per_sample_gradients_of_a_model_as_torch_func_and_as_one_backward_pass_per_sample():
    ours, theirs = _models()

    def loss(fw, model, params, x, y):
        out = (func if fw is tp else tfunc).functional_call(model, params, (x.unsqueeze(0),))
        return fw.nn.functional.cross_entropy(out, y.unsqueeze(0))

    params = {k: v.detach() for k, v in ours.named_parameters()}
    grads = vmap(func.grad(lambda p, x, y: loss(tp, ours, p, x, y)), in_dims=(None, 0, 0))(
        params, Variable(DATA), Variable(TARGETS))
    t_params = {k: v.detach() for k, v in theirs.named_parameters()}
    t_grads = tfunc.vmap(tfunc.grad(lambda p, x, y: loss(torch, theirs, p, x, y)), in_dims=(None, 0, 0))(
        t_params, torch.tensor(DATA), torch.tensor(TARGETS))
    for name in params:
        assert_matches(grads[name], t_grads[name], atol=1e-6)
        for i in range(len(DATA)):  # the loop: one backward pass per sample
            ours.zero_grad()
            tp.nn.functional.cross_entropy(ours(Variable(DATA[i:i + 1])), TARGETS[i:i + 1]).backward()
            np.testing.assert_allclose(np.asarray(grads[name].data[i]), np.asarray(dict(ours.named_parameters())[
                name].grad.data), rtol=1e-5, atol=1e-6)


def f_ours(x):
    return tp.sin(x) * (x * x).sum()


def f_theirs(x):
    return torch.sin(x) * (x * x).sum()


XS = np.random.default_rng(4).standard_normal((2, 3))


def test_vmap_of_a_vjp_fn_made_outside_vmap_as_torch():
    _, vjp_fn = func.vjp(f_ours, Variable(XS[0]))
    _, t_vjp_fn = tfunc.vjp(f_theirs, torch.tensor(XS[0]))
    units = np.eye(3)
    assert_matches(vmap(vjp_fn)(Variable(units))[0], tfunc.vmap(t_vjp_fn)(torch.tensor(units))[0])


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_jacobians_and_hessians_as_torch_func_and_batched(transform):
    scalar = transform == "hessian"
    f, g = (lambda x: f_ours(x).sum(), lambda x: f_theirs(x).sum()) if scalar else (f_ours, f_theirs)
    ours, theirs = getattr(func, transform), getattr(tfunc, transform)
    assert_matches(ours(f)(Variable(XS[0])), theirs(g)(torch.tensor(XS[0])))
    assert_matches(vmap(ours(f))(Variable(XS)), tfunc.vmap(theirs(g))(torch.tensor(XS)))


def test_vmap_of_jvp_as_torch():
    tangents = np.eye(3)
    ours = vmap(lambda t: func.jvp(f_ours, (Variable(XS[0]),), (t,))[1])(Variable(tangents))
    theirs = tfunc.vmap(lambda t: tfunc.jvp(f_theirs, (torch.tensor(XS[0]),), (t,))[1])(torch.tensor(tangents))
    assert_matches(ours, theirs)


ALL_ANY = {
    "x.all()": lambda m: lambda x: x.all(),
    "x.any(dim=0)": lambda m: lambda x: x.any(dim=0),
    "(x > 0).all(dim=-1, keepdim=True)": lambda m: lambda x: (x > 0).all(dim=-1, keepdim=True),
    "any(x, dim=())": lambda m: lambda x: m.any(x, dim=()),  # every dim of a sample under vmap (eager: none)
    "x.all(dim=(0, 1))": lambda m: lambda x: x.all(dim=(0, 1)),
    "x[0, 0].all(dim=0)": lambda m: lambda x: x[0, 0].all(dim=0),
}


@pytest.mark.parametrize("in_dims", [0, 1])
@pytest.mark.parametrize("name", list(ALL_ANY))
def test_all_and_any_of_each_sample_as_torch(name, in_dims):
    a = np.array([[[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]], [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]])
    ours = vmap(ALL_ANY[name](tp), in_dims=in_dims)(tp.from_numpy(a))
    theirs = tfunc.vmap(ALL_ANY[name](torch), in_dims=in_dims)(torch.from_numpy(a))
    assert_matches(ours, theirs)


def test_requires_grad_method_is_refused_inside_vmap_as_torch():
    def f(m):
        return lambda x: x.requires_grad_(False)
    errors = []
    for fw, transform in ((tp, vmap), (torch, tfunc.vmap)):
        with pytest.raises(RuntimeError) as caught:
            transform(f(fw))(fw.ones(3, 2))
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_batch_norm_inside_vmap_is_refused_clearly():
    bn = tp.nn.BatchNorm1d(3).eval()
    for f, a in ((lambda w: func.functional_call(bn, {"weight": w}, (tp.ones(4, 3),)), tp.ones(2, 3)),
                 (lambda x: bn(x), tp.ones(2, 4, 3))):
        with pytest.raises(NotImplementedError, match="vmap: batch_norm"):
            vmap(f)(a)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
