"""Step 71: Jacobians in one batched pass. The page's claims on other functions and shapes than the page's: vmap of
one vjp_fn over the identity runs the backward pass once, with the whole basis as its cotangent, where step 65's
loop runs it once per row; jacrev and hessian run the function once and its backward once, jacfwd runs the
function once per differentiated input, each run carrying all of that input's tangents; linearize runs the function
once (torch.func.linearize twice) and jvp_fn never runs it, replaying the kept jvps once per call (once per sample
under vmap). And the results: jacrev, jacfwd, hessian and linearize against torch.func's, float64 to 1e-10, shapes
and dtypes equal (float32 to its own precision), on several inputs, pytrees, argnums and a network's parameters."""
import warnings

import numpy as np
import pytest

import tinypytorch as tp
from tinypytorch import func
from tinypytorch.utils.pytree import tree_flatten
from steploader import load_step

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402
import torch.utils._pytree as tpytree  # noqa: E402

pytestmark = [pytest.mark.step71, pytest.mark.torch, pytest.mark.usefixtures("float64_default"),
              pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:Attempted to insert a get_attr Node:UserWarning")]

RNG = np.random.default_rng(710)
step = load_step(71)  # its counting() wraps Tanh's backward and jvp


class Runs:
    """A function of either framework (`fw`: tp or torch) that counts how many times its Python body ran."""

    def __init__(self, body):
        self.body, self.count = body, 0

    def __call__(self, *args):
        self.count += 1
        return self.body(*args)


def assert_same(ours, theirs, rtol=1e-10):
    """Two results of the same pytree structure: every leaf's shape, dtype and values."""
    ours, theirs = tree_flatten(ours)[0], tpytree.tree_flatten(theirs)[0]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape)
        assert str(a.dtype).removeprefix("torch.") == str(b.dtype).removeprefix("torch."), (a.dtype, b.dtype)
        np.testing.assert_allclose(np.asarray(a.data), b.detach().numpy(), rtol=rtol, atol=1e-13)


def tanh_map(fw, W):
    return lambda x: fw.tanh(fw.matmul(fw.tensor(W), x) if fw is tp else torch.tensor(W) @ x)


@pytest.mark.parametrize(("m", "n"), [(1, 5), (3, 7), (9, 2), (12, 12)])
def test_vmap_of_one_vjp_fn_is_one_backward_pass_and_the_loop_is_m(m, n):
    W, x = RNG.standard_normal((m, n)), RNG.standard_normal(n)
    _, vjp_fn = func.vjp(tanh_map(tp, W), tp.tensor(x))
    with step.counting() as loop:
        rows = [vjp_fn(tp.eye(m)[i])[0] for i in range(m)]
    with step.counting() as batched:
        (J,) = func.vmap(vjp_fn)(tp.eye(m))
    assert loop.backward == [(m,)] * m
    assert batched.backward == [(m, m)]  # the identity, the whole basis, as one cotangent
    expected = tfunc.jacrev(tanh_map(torch, W))(torch.tensor(x))
    assert_same(J, expected)
    assert_same(tp.stack(rows), expected)


def test_a_matrix_output_gets_its_basis_of_matrices_as_one_cotangent():
    def f(fw, x):  # R^4 -> R^(2 x 3)
        return fw.tanh(x[:2].reshape(2, 1) * x[1:].reshape(1, 3))
    x = RNG.standard_normal(4)
    _, vjp_fn = func.vjp(lambda a: f(tp, a), tp.tensor(x))
    with step.counting() as seen:
        (J,) = func.vmap(vjp_fn)(tp.tensor(np.eye(6).reshape(6, 2, 3)))  # the 6 unit matrices
    assert seen.backward == [(6, 2, 3)]
    assert_same(J.reshape(2, 3, 4), tfunc.jacrev(lambda a: f(torch, a))(torch.tensor(x)))


@pytest.mark.parametrize(("m", "n"), [(2, 9), (8, 3)])
def test_jacrev_and_hessian_run_the_function_once_and_its_backward_once(m, n):
    W, x = RNG.standard_normal((m, n)), RNG.standard_normal(n)
    ours, theirs = Runs(tanh_map(tp, W)), Runs(tanh_map(torch, W))
    with step.counting() as seen:
        J = func.jacrev(ours)(tp.tensor(x))
    assert ours.count == 1 and seen.backward == [(m, m)]
    assert_same(J, tfunc.jacrev(theirs)(torch.tensor(x)))
    assert theirs.count == 1  # torch's too
    ours.count = theirs.count = 0
    with step.counting() as seen:
        H = func.hessian(lambda a: ours(a).sum())(tp.tensor(x))
    assert ours.count == 1 and len(seen.backward) == 1 and seen.jvp == [(n, m)]  # n tangents in one pass
    assert_same(H, tfunc.hessian(lambda a: theirs(a).sum())(torch.tensor(x)))
    assert theirs.count == 1


def test_jacfwd_runs_the_function_once_per_input_with_all_its_tangents():
    A, b = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    ours = Runs(lambda a, v: tp.tanh(tp.matmul(a, v)))
    theirs = Runs(lambda a, v: torch.tanh(a @ v))
    with step.counting() as seen:
        J = func.jacfwd(ours, argnums=(0, 1))(tp.tensor(A), tp.tensor(b))
    assert ours.count == 2 and seen.jvp == [(12, 3), (4, 3)]  # A's 12 tangents in one pass, b's 4 in another
    assert_same(J, tfunc.jacfwd(theirs, argnums=(0, 1))(torch.tensor(A), torch.tensor(b)))
    assert theirs.count == 1  # torch.func.jacfwd batches both inputs' tangents into one run


def test_linearize_runs_the_function_once_and_torchs_twice():
    W, x = RNG.standard_normal((5, 3)), RNG.standard_normal(3)
    ours, theirs = Runs(tanh_map(tp, W)), Runs(tanh_map(torch, W))
    with step.counting() as seen:
        y, jvp_fn = func.linearize(ours, tp.tensor(x))
    t_y, t_jvp_fn = tfunc.linearize(theirs, torch.tensor(x))
    assert (ours.count, theirs.count) == (1, 2)
    assert seen.jvp == [(5,)]  # the one recording pass, on zero tangents
    assert_same(y, t_y)
    tangents = RNG.standard_normal((4, 3))
    with step.counting() as seen:
        for v in tangents:
            assert_same(jvp_fn(tp.tensor(v)), t_jvp_fn(torch.tensor(v)))
    assert ours.count == 1 and (seen.backward, seen.jvp) == ([], [(5,)] * 4)  # a replay per call, no run of f
    with step.counting() as seen:
        columns = func.vmap(jvp_fn)(tp.tensor(tangents))
    assert seen.jvp == [(5,)] * 4  # under vmap: one replay per sample
    assert_same(columns, tfunc.vmap(t_jvp_fn)(torch.tensor(tangents)))
    assert_same(func.vmap(jvp_fn)(tp.eye(3)).T, tfunc.jacfwd(theirs)(torch.tensor(x)))


# functions written once for both frameworks (fw: tp or torch), with their arguments
def several_inputs(fw, a, b, c):
    return {"first": fw.sin(a) * b.sum(), "pair": (a @ c, fw.exp(c) * b[0])}


def scalar_of_three(fw, a, b, c):
    return (fw.tanh(a[:3]) * b).sum() * (c ** 2).sum() + (a * a * a).sum()


ARGS = (RNG.standard_normal(4), RNG.standard_normal(3), RNG.standard_normal((4, 2)))


def both(fn, args=ARGS, dtype=np.float64):
    ours = tuple(tp.tensor(a.astype(dtype)) for a in args)
    theirs = tuple(torch.tensor(a.astype(dtype)) for a in args)
    return (lambda *a: fn(tp, *a)), (lambda *a: fn(torch, *a)), ours, theirs


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, 2, (0, 1), (2, 0, 1), -1])
def test_jacobians_of_several_inputs_and_a_pytree_output_equal_torch_func(name, argnums):
    f, t_f, ours, theirs = both(several_inputs)
    # argnums=-1 is the last argument; torch 2.13's jacfwd gives zeros for it (its jacrev counts from the end)
    reference = tfunc.jacrev if argnums == -1 else getattr(tfunc, name)
    assert_same(getattr(func, name)(f, argnums)(*ours), reference(t_f, argnums)(*theirs))


@pytest.mark.parametrize("argnums", [0, 1, (0, 2), (1, 2, 0)])
def test_hessian_of_several_inputs_equals_torch_func(argnums):
    f, t_f, ours, theirs = both(scalar_of_three)
    assert_same(func.hessian(f, argnums)(*ours), tfunc.hessian(t_f, argnums)(*theirs))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
def test_has_aux_and_nested_reverse_equal_torch_func(name):
    f, t_f, ours, theirs = both(lambda fw, a, b, c: ((a * b[:1]).cos(), (c * 2).sum()))
    assert_same(getattr(func, name)(f, has_aux=True)(*ours), getattr(tfunc, name)(t_f, has_aux=True)(*theirs))
    g, t_g, ours, theirs = both(lambda fw, a, b, c: (fw.sin(a) * a.sum()).sum())
    assert_same(func.jacrev(func.jacrev(g))(*ours), tfunc.jacrev(tfunc.jacrev(t_g))(*theirs))


@pytest.mark.parametrize("name", ["jacrev", "jacfwd"])
def test_float32_jacobians_equal_torch_func_to_float32_precision(name):
    f, t_f, ours, theirs = both(several_inputs, dtype=np.float32)
    assert_same(getattr(func, name)(f, (0, 2))(*ours), getattr(tfunc, name)(t_f, (0, 2))(*theirs), rtol=1e-5)


def network_pair():
    """A small network in both frameworks (two hidden layers, ReLU and Sigmoid), torch's float64 weights in ours."""
    def build(fw):
        return fw.nn.Sequential(fw.nn.Linear(3, 4), fw.nn.ReLU(), fw.nn.Linear(4, 3), fw.nn.Sigmoid(),
                                fw.nn.Linear(3, 2))
    torch.manual_seed(71)
    theirs = build(torch).double()
    ours = build(tp)
    ours.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_a_network_as_a_function_of_its_parameters_equals_torch_func():
    net, t_net = network_pair()
    params = {k: p.detach() for k, p in net.named_parameters()}
    t_params = {k: p.detach() for k, p in t_net.named_parameters()}
    X, T = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))

    def outputs(p, x):
        return func.functional_call(net, p, (x,))

    def t_outputs(p, x):
        return tfunc.functional_call(t_net, p, (x,))

    def loss(p, x):
        return ((outputs(p, x) - tp.tensor(T)) ** 2).mean()

    def t_loss(p, x):
        return ((t_outputs(p, x) - torch.tensor(T)) ** 2).mean()
    x, tx = tp.tensor(X), torch.tensor(X)
    for name in ("jacrev", "jacfwd"):
        for argnums in (0, 1, (0, 1)):
            assert_same(getattr(func, name)(outputs, argnums)(params, x),
                        getattr(tfunc, name)(t_outputs, argnums)(t_params, tx))
    assert_same(func.hessian(loss)(params, x), tfunc.hessian(t_loss)(t_params, tx))
    assert_same(func.hessian(loss, (0, 1))(params, x), tfunc.hessian(t_loss, (0, 1))(t_params, tx))
    y, jvp_fn = func.linearize(outputs, params, x)
    t_y, t_jvp_fn = tfunc.linearize(t_outputs, t_params, tx)
    assert_same(y, t_y)
    v = {k: RNG.standard_normal(p.shape) for k, p in params.items()}
    vx = RNG.standard_normal(X.shape)
    assert_same(jvp_fn({k: tp.tensor(a) for k, a in v.items()}, tp.tensor(vx)),
                t_jvp_fn({k: torch.tensor(a) for k, a in v.items()}, torch.tensor(vx)))


def test_linearize_of_several_inputs_and_a_pytree_output_equals_torch_func():
    f, t_f, ours, theirs = both(several_inputs)
    y, jvp_fn = func.linearize(f, *ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t_y, t_jvp_fn = tfunc.linearize(t_f, *theirs)
    assert_same(y, t_y)
    tangents = [RNG.standard_normal((3,) + a.shape) for a in ARGS]  # three tangents for each input, vmapped
    assert_same(func.vmap(jvp_fn)(*[tp.tensor(t) for t in tangents]),
                tfunc.vmap(t_jvp_fn)(*[torch.tensor(t) for t in tangents]))
