"""tinypytorch.func.linearize against torch.func.linearize and torch.func.jvp: the output, J t for several
tangents of one recording, pytrees of primals and outputs, a small MLP through functional_call, vmap of jvp_fn
(the Jacobian by columns), func's Python code run once, and torch's errors for tangents of the wrong structure,
shape or dtype. Every expected value is torch's, from the same functions on the same numbers."""
import numpy as np
import pytest
import torch

import tinypytorch as tp
from tinypytorch import Variable, func, nn
from tinypytorch.batching import vmap

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node")]

RNG = np.random.default_rng(71)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4, 2))


def ours(a):
    return Variable(np.array(a), requires_grad=False)


def theirs(a):
    return torch.tensor(np.array(a))


def close(mine, expected, rtol=1e-12):
    np.testing.assert_allclose(mine.data, expected.detach().numpy(), rtol=rtol, atol=1e-13)


class Square(tp.autograd.Function):
    """x * x with its own jvp: linearize keeps the call and replays the user's jvp (the input kept on ctx)."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * x

    @staticmethod
    def backward(ctx, g):
        return 2 * ctx.x * g

    @staticmethod
    def jvp(ctx, t):
        return 2 * ctx.x * t


# each case: (our function, torch's, the primals' shapes); the same computation in both frameworks
CASES = {
    "elementwise": (lambda x: tp.sin(x) * tp.exp(x) + x ** 3 / (1 + x * x),
                    lambda x: x.sin() * x.exp() + x ** 3 / (1 + x * x), [(3, 4)]),
    "matmul": (lambda x, w: tp.tanh(tp.matmul(x, w)), lambda x, w: torch.tanh(x @ w), [(3, 4), (4, 2)]),
    "reductions": (lambda x: (x.sum(axis=0) * x.mean(axis=1).sum() + (x * x).sum(axis=1, keepdims=True).sum(axis=0)),
                   lambda x: x.sum(0) * x.mean(1).sum() + (x * x).sum(1, keepdim=True).sum(0), [(3, 4)]),
    "reshape_transpose": (lambda x: tp.exp(x.reshape(4, 3).T) * x, lambda x: x.reshape(4, 3).T.exp() * x, [(3, 4)]),
    "constant_factor": (lambda x: x * ours(A) + tp.matmul(x, ours(B)).sum(),
                        lambda x: x * theirs(A) + (x @ theirs(B)).sum(), [(3, 4)]),
    "softmax_relu": (lambda x: tp.nn.functional.softmax(x, dim=1) * tp.relu(x),
                     lambda x: torch.softmax(x, 1) * torch.relu(x), [(3, 4)]),
    "vmap_inside": (lambda x: func.vmap(lambda r: (r * r).sum() * r)(x),
                    lambda x: torch.vmap(lambda r: (r * r).sum() * r)(x), [(3, 4)]),
    "custom_function_with_jvp": (lambda x: tp.sin(Square.apply(x)), lambda x: (x * x).sin(), [(3, 4)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_output_and_jvp_fn_equal_torch_for_several_tangents(name):
    f, g, shapes = CASES[name]
    primals = [RNG.standard_normal(s) for s in shapes]
    out, jvp_fn = func.linearize(f, *map(ours, primals))
    t_out, t_jvp_fn = torch.func.linearize(g, *map(theirs, primals))
    close(out, t_out)
    for _ in range(3):  # one recording, several tangents
        tangents = [RNG.standard_normal(s) for s in shapes]
        mine = jvp_fn(*map(ours, tangents))
        close(mine, t_jvp_fn(*map(theirs, tangents)))
        close(mine, torch.func.jvp(g, tuple(map(theirs, primals)), tuple(map(theirs, tangents)))[1])


def test_func_runs_once_and_jvp_fn_does_not_run_it():
    calls = []

    def f(x):
        calls.append(1)
        return tp.sin(x) * x

    x, t1, t2 = (RNG.standard_normal(5) for _ in range(3))
    _, jvp_fn = func.linearize(f, ours(x))
    assert len(calls) == 1
    for t in (t1, t2, t1):
        close(jvp_fn(ours(t)), torch.func.jvp(lambda a: a.sin() * a, (theirs(x),), (theirs(t),))[1])
    vmap(jvp_fn)(ours(np.eye(5)))
    assert len(calls) == 1  # three calls of jvp_fn and a vmap of it: func's Python code never ran again


def test_jvp_fn_keeps_the_linearization_made_at_the_call():
    """What func read when linearize ran is what jvp_fn uses, in both frameworks (neither re-runs func)."""
    scale = {"now": 2.0}
    x, t = RNG.standard_normal(4), RNG.standard_normal(4)
    _, jvp_fn = func.linearize(lambda a: tp.sin(a) * scale["now"], ours(x))
    _, t_jvp_fn = torch.func.linearize(lambda a: a.sin() * scale["now"], theirs(x))
    scale["now"] = 5.0
    close(jvp_fn(ours(t)), t_jvp_fn(theirs(t)))
    close(jvp_fn(ours(t)), theirs(np.cos(x) * 2.0 * t))


def test_pytrees_of_primals_and_outputs():
    def f(pair, d):
        x, y = pair
        return {"prod": x * d["w"], "mixed": [tp.matmul(x, y), (y * y).sum()]}

    def g(pair, d):
        x, y = pair
        return {"prod": x * d["w"], "mixed": [x @ y, (y * y).sum()]}

    primals = ((A, B), {"w": RNG.standard_normal((3, 4))})
    to = (lambda conv: lambda p: ((conv(p[0][0]), conv(p[0][1])), {"w": conv(p[1]["w"])}))
    out, jvp_fn = func.linearize(f, *to(ours)(primals))
    t_out, t_jvp_fn = torch.func.linearize(g, *to(theirs)(primals))
    assert sorted(out) == sorted(t_out) and len(out["mixed"]) == 2
    close(out["prod"], t_out["prod"])
    close(out["mixed"][0], t_out["mixed"][0])
    close(out["mixed"][1], t_out["mixed"][1])
    for _ in range(2):
        tangents = ((RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))), {"w": RNG.standard_normal((3, 4))})
        mine, expected = jvp_fn(*to(ours)(tangents)), t_jvp_fn(*to(theirs)(tangents))
        assert isinstance(mine, dict) and isinstance(mine["mixed"], list)
        close(mine["prod"], expected["prod"])
        close(mine["mixed"][0], expected["mixed"][0])
        close(mine["mixed"][1], expected["mixed"][1])


@pytest.mark.usefixtures("float64_default")
def test_a_small_mlp_linearized_in_its_parameters_with_functional_call():
    model_t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    model.load_state_dict({k: tp.from_numpy(v.detach().numpy().copy()) for k, v in model_t.state_dict().items()})
    x = RNG.standard_normal((5, 3))
    params = {k: v.detach().numpy().copy() for k, v in model_t.named_parameters()}
    out, jvp_fn = func.linearize(lambda p: func.functional_call(model, p, (ours(x),)),
                                 {k: ours(v) for k, v in params.items()})
    t_out, t_jvp_fn = torch.func.linearize(lambda p: torch.func.functional_call(model_t, p, (theirs(x),)),
                                           {k: theirs(v) for k, v in params.items()})
    close(out, t_out)
    for _ in range(3):
        tangents = {k: RNG.standard_normal(v.shape) for k, v in params.items()}
        close(jvp_fn({k: ours(v) for k, v in tangents.items()}), t_jvp_fn({k: theirs(v) for k, v in tangents.items()}))


def test_vmap_of_jvp_fn_gives_the_jacobian_by_columns():
    f, g, _ = CASES["matmul"]
    x, w = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    _, jvp_fn = func.linearize(f, ours(x), ours(w))
    _, t_jvp_fn = torch.func.linearize(g, theirs(x), theirs(w))
    basis = np.eye(12).reshape(12, 3, 4)
    zeros = np.zeros((12, 4, 2))
    columns = vmap(jvp_fn)(ours(basis), ours(zeros))
    close(columns, torch.vmap(t_jvp_fn)(theirs(basis), theirs(zeros)))
    jacobian = torch.func.jacfwd(g)(theirs(x), theirs(w))  # (3, 2) + (3, 4)
    close(columns, jacobian.reshape(6, 12).T.reshape(12, 3, 2))
    # a tangent shared by the whole batch (in_dims None) and a batched one
    shared = RNG.standard_normal((3, 4))
    both = vmap(jvp_fn, in_dims=(None, 0))(ours(shared), ours(np.eye(8).reshape(8, 4, 2)))
    close(both, torch.vmap(t_jvp_fn, in_dims=(None, 0))(theirs(shared), theirs(np.eye(8).reshape(8, 4, 2))))


def test_an_output_that_does_not_depend_on_the_primals_and_a_non_tensor_output():
    c = RNG.standard_normal((2, 2))
    x, t = RNG.standard_normal((2, 2)), RNG.standard_normal((2, 2))
    out, jvp_fn = func.linearize(lambda a: (a * 2.0, ours(c) * 3.0, 7), ours(x))
    t_out, t_jvp_fn = torch.func.linearize(lambda a: (a * 2.0, theirs(c) * 3.0, 7), theirs(x))
    mine, expected = jvp_fn(ours(t)), t_jvp_fn(theirs(t))
    close(mine[0], expected[0])
    close(mine[1], expected[1])  # zeros, as torch's
    assert mine[2] == expected[2] == 7 and out[2] == t_out[2] == 7


def test_a_promoted_float32_primal_has_a_float64_tangent_as_in_torch():
    x, t, c = (RNG.standard_normal(4) for _ in range(3))
    _, jvp_fn = func.linearize(lambda a: tp.sin(a * ours(c)), ours(x.astype(np.float32)))
    _, t_jvp_fn = torch.func.linearize(lambda a: (a * theirs(c)).sin(), theirs(x.astype(np.float32)))
    mine, expected = jvp_fn(ours(t.astype(np.float32))), t_jvp_fn(theirs(t.astype(np.float32)))
    assert str(mine.dtype) == str(expected.dtype) == "torch.float64"
    close(mine, expected, rtol=1e-6)


def test_the_output_keeps_its_graph_to_primals_that_require_grad():
    x = RNG.standard_normal(3)
    mine, theirs_x = Variable(x.copy(), requires_grad=True), torch.tensor(x, requires_grad=True)
    out, _ = func.linearize(lambda a: (tp.sin(a) * a).sum(), mine)
    t_out, _ = torch.func.linearize(lambda a: (a.sin() * a).sum(), theirs_x)
    out.backward()
    t_out.backward()
    close(mine.grad, theirs_x.grad)


def error_of(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def bad_tangents():
    """Tangents that do not fit the primals (x (3, 3), y (3, 3)), as (ours, torch's) calls' arguments."""
    one, other = np.ones((3, 3)), np.ones((2, 3))
    return {
        "too_few": ((one,), None),
        "too_many": ((one, one, one), None),
        "a_list": (([one, one],), None),
        "shape": ((one, other), None),
        "dtype": ((one, one.astype(np.float32)), None),
        "integer": ((one, one.astype(np.int64)), None),
        "not_a_tensor": ((one, 3.0), None),
    }


@pytest.mark.parametrize("case", list(bad_tangents()))
def test_tangents_that_do_not_fit_raise_torch_errors(case):
    args, _ = bad_tangents()[case]
    x, y = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    _, jvp_fn = func.linearize(lambda a, b: tp.sin(a) * b, ours(x), ours(y))
    _, t_jvp_fn = torch.func.linearize(lambda a, b: a.sin() * b, theirs(x), theirs(y))
    wrap = (lambda conv: lambda v: [conv(u) for u in v] if isinstance(v, list) else v if isinstance(v, float)
            else conv(v))
    assert error_of(lambda: jvp_fn(*map(wrap(ours), args))) == error_of(lambda: t_jvp_fn(*map(wrap(theirs), args)))


def test_primals_that_cannot_be_linearized_raise_torch_errors():
    x = RNG.standard_normal(3)
    assert (error_of(lambda: func.linearize(lambda a, s: a * s, ours(x), 3.0))
            == error_of(lambda: torch.func.linearize(lambda a, s: a * s, theirs(x), 3.0)))
    assert (error_of(lambda: func.linearize(lambda a: a * 2, ours(np.arange(3))))
            == error_of(lambda: torch.func.linearize(lambda a: a * 2, theirs(np.arange(3)))))


def test_what_is_not_offered_is_refused_clearly():
    x = RNG.standard_normal(3)
    _, jvp_fn = func.linearize(tp.sin, ours(x))
    with pytest.raises(NotImplementedError, match="reverse mode over jvp_fn"):
        func.grad(lambda t: jvp_fn(t).sum())(ours(x))
    with pytest.raises(NotImplementedError, match="forward mode over jvp_fn"):
        func.jvp(jvp_fn, (ours(x),), (ours(x),))
    with pytest.raises(NotImplementedError, match="inside forward mode"):
        func.jvp(lambda a: func.linearize(tp.sin, a)[0], (ours(x),), (ours(x),))
    with pytest.raises(NotImplementedError, match="inside a reverse transform"):
        func.grad(lambda a: func.linearize(tp.sin, a)[0].sum())(ours(x))
    with pytest.raises(NotImplementedError, match="inside vmap"):
        vmap(lambda a: func.linearize(tp.sin, a)[0])(ours(np.ones((2, 3))))
