"""Step 70: per-sample gradients, vmap(grad(f)) over a function of the parameters written with functional_call,
against torch.func's vmap(grad) and against torch's loop of one backward pass per sample (float64, the same
weights); the per-sample copy of a shared argument; grad_and_value, vjp and argnums under vmap; an ensemble's
per-sample gradients (vmap over stacked models of vmap over samples). stack_module_state itself:
tests/test_stack_module_state.py."""
import numpy as np
import pytest

import tinypytorch as tp
from tinypytorch import Variable, func, nn
from tinypytorch.nn import functional as F

torch = pytest.importorskip("torch")
import torch.func as tfunc  # noqa: E402

pytestmark = [pytest.mark.step70, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]

RNG = np.random.default_rng(69)
N = 7
X = RNG.standard_normal((N, 5))
LABELS = RNG.integers(0, 3, N)
TARGETS = RNG.standard_normal((N, 3))


def networks(fw):
    return fw.nn.Sequential(fw.nn.Linear(5, 6), fw.nn.Tanh(), fw.nn.Linear(6, 4), fw.nn.ReLU(), fw.nn.Linear(4, 3))


def pair():
    """The network in both frameworks, with torch's float64 weights copied into ours."""
    torch.manual_seed(0)
    theirs = networks(torch).double()
    ours = networks(tp)
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def cross_entropy(fw, model, params, x, y):
    out = fw.func.functional_call(model, params, (x.unsqueeze(0),))
    return fw.nn.functional.cross_entropy(out, y.unsqueeze(0))


def mse(fw, model, params, x, y):
    return ((fw.func.functional_call(model, params, (x,)) - y) ** 2).mean()


def assert_close(ours, theirs, rtol=1e-10):
    np.testing.assert_allclose(np.asarray(ours.data), theirs.detach().numpy(), rtol=rtol, atol=1e-13)


def loop_of_backward_passes(model, loss, x, y):
    """torch's per-sample gradients the plain way: one backward pass per sample."""
    grads = {k: [] for k, _ in model.named_parameters()}
    for i in range(len(x)):
        model.zero_grad()
        loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            grads[k].append(p.grad.clone())
    return {k: torch.stack(g) for k, g in grads.items()}


@pytest.mark.parametrize("loss, data", [(cross_entropy, LABELS), (mse, TARGETS)], ids=["cross_entropy", "mse"])
def test_per_sample_gradients_equal_torch_func_and_torchs_loop(loss, data):
    ours, theirs = pair()
    params = {k: p.detach() for k, p in ours.named_parameters()}
    grads = func.vmap(func.grad(lambda p, x, y: loss(tp, ours, p, x, y)), in_dims=(None, 0, 0))(
        params, Variable(X), Variable(data))
    t_params = {k: p.detach() for k, p in theirs.named_parameters()}
    t_grads = tfunc.vmap(tfunc.grad(lambda p, x, y: loss(torch, theirs, p, x, y)), in_dims=(None, 0, 0))(
        t_params, torch.tensor(X), torch.tensor(data))
    if loss is cross_entropy:
        loop = loop_of_backward_passes(theirs, torch.nn.functional.cross_entropy, torch.tensor(X), torch.tensor(data))
    else:
        loop = loop_of_backward_passes(theirs, lambda out, y: ((out - y) ** 2).mean(), torch.tensor(X),
                                       torch.tensor(data))
    assert list(grads) == list(t_grads)
    for k in t_grads:
        assert grads[k].shape == (N,) + tuple(params[k].shape)
        assert_close(grads[k], t_grads[k])
        assert_close(grads[k], loop[k])


def test_the_per_sample_gradients_add_up_to_the_batch_gradient_and_are_not_it():
    """The shared parameters get a gradient per sample; their sum is the gradient of the summed loss, which is
    what a leaf shared by every sample would have got (torch's loss, summed over the batch)."""
    ours, theirs = pair()
    params = {k: p.detach() for k, p in ours.named_parameters()}
    grads = func.vmap(func.grad(lambda p, x, y: cross_entropy(tp, ours, p, x, y)), in_dims=(None, 0, 0))(
        params, Variable(X), Variable(LABELS))
    torch.nn.functional.cross_entropy(theirs(torch.tensor(X)), torch.tensor(LABELS), reduction="sum").backward()
    for k, p in theirs.named_parameters():
        assert_close(grads[k].sum(dim=0), p.grad)
        assert not np.allclose(grads[k].data[0], grads[k].data[1])


def test_a_per_sample_copy_of_a_shared_argument_by_hand():
    """The mechanism: the shared w broadcast to a leaf of N rows; one backward pass from the N losses, seeded with
    ones, gives row i the gradient of loss i, 2 (x_i . w - t_i) x_i, as vmap(grad) and torch.func."""
    w, t = RNG.standard_normal(5), RNG.standard_normal(N)
    expected = 2 * (X @ w - t)[:, None] * X  # worked out by hand
    copies = Variable(np.broadcast_to(w, (N, 5)), requires_grad=True)
    (((copies * Variable(X)).sum(dim=1) - Variable(t)) ** 2).backward(tp.ones(N))
    np.testing.assert_allclose(copies.grad.data, expected, rtol=1e-12)
    ours = func.vmap(func.grad(lambda w, x, t: (tp.matmul(x, w) - t) ** 2), in_dims=(None, 0, 0))(
        Variable(w), Variable(X), Variable(t))
    theirs = tfunc.vmap(tfunc.grad(lambda w, x, t: (x @ w - t) ** 2), in_dims=(None, 0, 0))(
        torch.tensor(w), torch.tensor(X), torch.tensor(t))
    np.testing.assert_allclose(ours.data, expected, rtol=1e-12)
    assert_close(ours, theirs)


def test_parameters_that_require_grad_give_the_same_per_sample_gradients_as_torch():
    """torch.func accepts the model's own parameters (not detached): the per-sample leaves are views of them."""
    ours, theirs = pair()
    grads = func.vmap(func.grad(lambda p, x, y: cross_entropy(tp, ours, p, x, y)), in_dims=(None, 0, 0))(
        dict(ours.named_parameters()), Variable(X), Variable(LABELS))
    t_grads = tfunc.vmap(tfunc.grad(lambda p, x, y: cross_entropy(torch, theirs, p, x, y)), in_dims=(None, 0, 0))(
        dict(theirs.named_parameters()), torch.tensor(X), torch.tensor(LABELS))
    for k in t_grads:
        assert_close(grads[k], t_grads[k])
    assert all(p.grad is None for p in ours.parameters())


def test_grad_and_value_has_aux_and_argnums_under_vmap_as_torch():
    ours, theirs = pair()

    def f(fw, model):
        def loss(p, x, y):
            value = cross_entropy(fw, model, p, x, y)
            return value, value * 2
        return loss
    params = {k: p.detach() for k, p in ours.named_parameters()}
    t_params = {k: p.detach() for k, p in theirs.named_parameters()}
    args, t_args = (params, Variable(X), Variable(LABELS)), (t_params, torch.tensor(X), torch.tensor(LABELS))
    (g, (v, aux)) = func.vmap(func.grad_and_value(f(tp, ours), argnums=(0, 1), has_aux=True), in_dims=(None, 0, 0))(
        *args)
    (tg, (tv, taux)) = tfunc.vmap(tfunc.grad_and_value(f(torch, theirs), argnums=(0, 1), has_aux=True),
                                  in_dims=(None, 0, 0))(*t_args)
    for k in t_params:
        assert_close(g[0][k], tg[0][k])
    assert_close(g[1], tg[1])  # each sample's gradient with respect to its input
    assert_close(v, tv)
    assert_close(aux, taux)


def test_vjp_under_vmap_gives_per_sample_products_as_torch():
    ours, theirs = pair()
    u = RNG.standard_normal((N, 3))

    def product(fw, model):
        def run(p, x, u):
            _, vjp_fn = fw.func.vjp(lambda q: fw.func.functional_call(model, q, (x,)), p)
            return vjp_fn(u)[0]
        return run
    params = {k: p.detach() for k, p in ours.named_parameters()}
    t_params = {k: p.detach() for k, p in theirs.named_parameters()}
    got = func.vmap(product(tp, ours), in_dims=(None, 0, 0))(params, Variable(X), Variable(u))
    expected = tfunc.vmap(product(torch, theirs), in_dims=(None, 0, 0))(t_params, torch.tensor(X), torch.tensor(u))
    for k in t_params:
        assert_close(got[k], expected[k])


def test_per_sample_gradients_of_every_model_of_an_ensemble_as_torch():
    count = 3
    torch.manual_seed(1)
    t_models = [networks(torch).double() for _ in range(count)]
    models = [networks(tp) for _ in range(count)]
    for o, t in zip(models, t_models):
        o.load_state_dict({k: tp.from_numpy(v.detach().numpy().copy()) for k, v in t.state_dict().items()})
    params, _ = func.stack_module_state(models)
    t_params, _ = tfunc.stack_module_state(t_models)
    got = func.vmap(func.vmap(func.grad(lambda p, x, y: cross_entropy(tp, models[0], p, x, y)), in_dims=(None, 0, 0)),
                    in_dims=(0, None, None))(params, Variable(X), Variable(LABELS))
    expected = tfunc.vmap(tfunc.vmap(tfunc.grad(lambda p, x, y: cross_entropy(torch, t_models[0], p, x, y)),
                                     in_dims=(None, 0, 0)), in_dims=(0, None, None))(
        t_params, torch.tensor(X), torch.tensor(LABELS))
    for k in t_params:
        assert got[k].shape == (count, N) + tuple(t_models[0].get_parameter(k).shape)
        assert_close(got[k], expected[k])


def test_float32_per_sample_gradients_as_torch_to_float32_rounding():
    tp.set_default_dtype(tp.float32)
    torch.manual_seed(2)
    theirs = networks(torch)
    ours = networks(tp)
    ours.load_state_dict({k: tp.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    x = X.astype(np.float32)
    grads = func.vmap(func.grad(lambda p, x, y: cross_entropy(tp, ours, p, x, y)), in_dims=(None, 0, 0))(
        {k: p.detach() for k, p in ours.named_parameters()}, Variable(x), Variable(LABELS))
    t_grads = tfunc.vmap(tfunc.grad(lambda p, x, y: cross_entropy(torch, theirs, p, x, y)), in_dims=(None, 0, 0))(
        {k: p.detach() for k, p in theirs.named_parameters()}, torch.tensor(x), torch.tensor(LABELS))
    for k in t_grads:
        assert grads[k].dtype == tp.float32
        assert_close(grads[k], t_grads[k], rtol=1e-4)
