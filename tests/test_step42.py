"""Step 42: reentrant checkpointing (CheckpointFunction): what it saves, the nested backward, dropout inside a
checkpoint (bitwise equal gradients, the random stream after backward), its limits, against torch."""
import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from reference import assert_close_to_torch
from steploader import load_step
from tinypytorch import Variable, autograd, no_grad, random
from tinypytorch import functions as F
from tinypytorch.layers import MLP, Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint
from twins import torch_twin

pytestmark = [pytest.mark.step42, pytest.mark.torch]

NO_INPUT_GRAD = "None of the inputs have requires_grad=True. Gradients will be None"
seeds = st.integers(0, 2**63 - 1)


def pcg64(seed):
    """A fresh PCG64 generator: the reference for the default generator's stream after manual_seed(seed)."""
    return np.random.Generator(np.random.PCG64(seed))


def torch_checkpoint(function, *args, **kwargs):
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=True, **kwargs)


def torch_dropout_with(x, keep, p):
    """torch's CPU dropout formula, input * (noise / (1 - p)), with the noise (the kept mask) given."""
    return x * (torch.from_numpy(keep.astype(np.float64)).to(x.dtype) / (1.0 - p))


# ----- reentrant checkpointing ---------------------------------------------------------------------------

class Chain(Layer):
    """`depth` blocks Linear(width, width), tanh, dropout(p); counts its calls."""

    def __init__(self, width, depth, p, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.linears = []
        for k in range(depth):
            setattr(self, f"l{k}", Linear(width, width, rng=rng))
            self.linears.append(getattr(self, f"l{k}"))
        self.p, self.calls = p, 0

    def forward(self, x):
        self.calls += 1
        for linear in self.linears:
            x = F.dropout(tinypytorch.tanh(linear(x)), self.p, self.training)
        return x


def torch_chain(chain, x, masks):
    """chain's computation in torch with the given masks, one per block."""
    for linear, keep in zip(chain.linears, masks, strict=True):
        h = torch.tanh(torch.nn.functional.linear(x, torch.from_numpy(linear.weight.data),
                                                  torch.from_numpy(linear.bias.data)))
        x = torch_dropout_with(h, keep, chain.p)
    return x


def torch_chain_grads(chain, batch, masks, gradient=None):
    """Gradients of sum(y^2) (or of y seeded with `gradient`) for x and every weight and bias, in chain's order."""
    x = torch.tensor(batch, requires_grad=True)
    params = [torch.tensor(p.data, requires_grad=True) for p in chain.params()]
    h = x
    for k, keep in enumerate(masks):
        h = torch_dropout_with(torch.tanh(torch.nn.functional.linear(h, params[2 * k], params[2 * k + 1])), keep,
                               chain.p)
    if gradient is None:
        loss = (h * h).sum()
        loss.backward()
    else:
        h.backward(gradient)
    return h.detach().numpy(), [x.grad.numpy()] + [p.grad.numpy() for p in params]


def one_step(chain, batch, seed, run):
    """From manual_seed(seed): y = run(x), sum(y^2).backward(); the gradients (x first) and the next draw."""
    chain.cleargrads()
    tinypytorch.manual_seed(seed)
    x = Variable(batch.copy())
    y = run(x)
    (y * y).sum().backward()
    return [x.grad.data] + [p.grad.data for p in chain.params()], random.default_generator().random()


def draws(seed, shape, count):
    """The first `count` masks' uniform draws of shape `shape` from PCG64(seed), and the draw after them."""
    generator = pcg64(seed)
    uniforms = [generator.random(shape) for _ in range(count)]
    return uniforms, generator.random()


networks = st.tuples(seeds, st.integers(1, 4), st.integers(2, 6), st.integers(1, 4), st.sampled_from([0.2, 0.5]))


@given(networks)
def test_checkpoint_with_dropout_gives_the_plain_gradients_bitwise_and_the_same_stream_after(network):
    seed, depth, width, rows, p = network
    chain = Chain(width, depth, p, seed=seed % 1000)
    batch = np.random.default_rng(seed % 997).standard_normal((rows, width))
    plain, plain_next = one_step(chain, batch, seed, chain)
    assert chain.calls == 1
    ours, ours_next = one_step(chain, batch, seed, lambda x: checkpoint(chain, x))
    assert chain.calls == 3  # the checkpointed run called it twice: forward and recomputation
    for g, g_plain in zip(ours, plain, strict=True):
        np.testing.assert_array_equal(g, g_plain)
    uniforms, expected_next = draws(seed, (rows, width), depth)
    assert ours_next == plain_next == expected_next
    _, grads_t = torch_chain_grads(chain, batch, [u >= p for u in uniforms])
    for g, g_t in zip(ours, grads_t, strict=True):
        assert_close_to_torch(g, g_t)


@given(networks)
def test_without_preserving_the_state_backward_differentiates_the_recomputations_masks(network):
    seed, depth, width, rows, p = network
    chain = Chain(width, depth, p, seed=seed % 1000)
    batch = np.random.default_rng(seed % 997).standard_normal((rows, width))
    ours, ours_next = one_step(chain, batch, seed, lambda x: checkpoint(chain, x, preserve_rng_state=False))
    uniforms, expected_next = draws(seed, (rows, width), 2 * depth)
    first = [u >= p for u in uniforms[:depth]]  # forward: the output and the loss's gradient 2y come from these
    second = [u >= p for u in uniforms[depth:]]  # the recomputation draws these, and backward goes through them
    y_first, _ = torch_chain_grads(chain, batch, first)
    _, grads_t = torch_chain_grads(chain, batch, second, gradient=torch.from_numpy(2 * y_first))
    for g, g_t in zip(ours, grads_t, strict=True):
        assert_close_to_torch(g, g_t)
    assert ours_next == expected_next  # the stream moved on by the recomputation's draws


def test_the_rng_experiment_gives_the_same_verdicts_in_both_frameworks():
    chain = Chain(16, 6, 0.3)
    batch = np.random.default_rng(3).standard_normal((8, 16))
    plain, plain_next = one_step(chain, batch, 0, chain)
    kept, kept_next = one_step(chain, batch, 0, lambda x: checkpoint(chain, x))
    lost, lost_next = one_step(chain, batch, 0, lambda x: checkpoint(chain, x, preserve_rng_state=False))

    twin = torch.nn.Sequential(*[m for linear in chain.linears
                                 for m in (torch.nn.Linear(16, 16, dtype=torch.float64), torch.nn.Tanh(),
                                           torch.nn.Dropout(0.3))])
    with torch.no_grad():
        for p, p_t in zip(chain.params(), twin.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data))

    def torch_step(run):
        twin.zero_grad()
        torch.manual_seed(0)
        x = torch.tensor(batch, requires_grad=True)
        y = run(x)
        (y * y).sum().backward()
        return [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in twin.parameters()], torch.rand(1).item()

    plain_t, plain_t_next = torch_step(twin)
    kept_t, kept_t_next = torch_step(lambda x: torch_checkpoint(twin, x))
    lost_t, lost_t_next = torch_step(lambda x: torch_checkpoint(twin, x, preserve_rng_state=False))

    def verdict(grads, following, reference, reference_next):
        return all(np.array_equal(g, r) for g, r in zip(grads, reference)), following == reference_next

    assert verdict(kept, kept_next, plain, plain_next) == verdict(kept_t, kept_t_next, plain_t, plain_t_next) \
        == (True, True)
    assert verdict(lost, lost_next, plain, plain_next) == verdict(lost_t, lost_t_next, plain_t, plain_t_next) \
        == (False, False)
    assert max(np.abs(g - r).max() for g, r in zip(lost, plain)) > 0.1


def test_nested_checkpoints_with_dropout_give_the_plain_gradients_bitwise():
    def inner(x):
        return F.dropout(tinypytorch.tanh(x * 1.5), 0.4)

    def outer(x):
        return checkpoint(inner, inner(x)) * 2.0

    results = []
    for run in (lambda x: inner(inner(x)) * 2.0, outer, lambda x: checkpoint(outer, x)):
        tinypytorch.manual_seed(1)
        x = Variable(np.linspace(-1.0, 1.0, 12))
        y = run(x)
        (y * y).sum().backward()
        results.append((x.grad.data, random.default_generator().random()))
    for grad, following in results[1:]:
        np.testing.assert_array_equal(grad, results[0][0])
        assert following == results[0][1]


@given(seeds, st.sampled_from([(3, 4, 1), (3, 5, 5, 2), (2, 3, 3, 3, 1)]), st.integers(1, 4))
def test_gradients_equal_torch_utils_checkpoint_on_a_twin_network(seed, sizes, rows):
    model = MLP(sizes, activation=F.tanh, rng=np.random.default_rng(seed))
    twin = torch_twin(model, torch.nn.Tanh)
    batch = np.random.default_rng(seed + 1).standard_normal((rows, sizes[0]))

    def rest(layers, activation):
        def run(h):
            for layer in layers[1:-1]:
                h = activation(layer(h))
            return layers[-1](h)
        return run

    # the data needs no gradient; the first layer runs plainly, the rest is checkpointed
    x = Variable(batch, requires_grad=False)
    y = checkpoint(rest(model.layers, tinypytorch.tanh), tinypytorch.tanh(model.layers[0](x)))
    loss = (y * y).sum()
    loss.backward()
    modules = list(twin)
    x_t = torch.tensor(batch)
    y_t = torch_checkpoint(lambda h: twin[2:](h), torch.tanh(modules[0](x_t)))
    loss_t = (y_t * y_t).sum()
    loss_t.backward()
    assert_close_to_torch(loss.data, loss_t.item())
    for p, p_t in zip(model.params(), twin.parameters(), strict=True):
        assert_close_to_torch(p.grad.data, p_t.grad.numpy())


def test_the_node_has_one_edge_per_input_and_the_parameters_get_their_gradients_from_the_inner_pass():
    chain = Chain(3, 2, 0.0)
    x = Variable(np.random.default_rng(0).standard_normal((2, 3)), name="x")
    y = checkpoint(chain, x)
    assert type(y.creator).__name__ == "CheckpointFunction"
    assert [node is x for node, _ in y.creator.edges] == [True]
    assert all(p.grad is None for p in chain.params())
    (y * y).sum().backward()
    _, grads_t = torch_chain_grads(chain, x.data, [np.ones((2, 3), bool)] * 2)
    for g, g_t in zip([x.grad.data] + [p.grad.data for p in chain.params()], grads_t, strict=True):
        assert_close_to_torch(g, g_t)


def test_tuple_outputs_come_back_as_a_tuple_with_torchs_gradients():
    a0, b0 = np.array([0.3, -0.7, 1.1]), np.array([1.3, 0.4, -0.2])

    def f(m):
        return lambda a, b: (a * b, m.sin(a) + b)

    for used in ([0, 1], [0], [1]):
        a, b = Variable(a0.copy()), Variable(b0.copy())
        outputs = checkpoint(f(tinypytorch), a, b)
        a_t, b_t = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
        outputs_t = torch_checkpoint(f(torch), a_t, b_t)
        assert isinstance(outputs, tuple) and isinstance(outputs_t, tuple) and len(outputs) == len(outputs_t) == 2
        sum((outputs[i] * (i + 2.0)).sum() for i in used).backward()
        sum((outputs_t[i] * (i + 2.0)).sum() for i in used).backward()
        assert_close_to_torch(a.grad.data, a_t.grad.numpy())
        assert_close_to_torch(b.grad.data, b_t.grad.numpy())


def test_a_one_element_tuple_stays_a_tuple_like_torch():
    a = Variable(np.array([0.5, 1.5]))
    outputs = checkpoint(lambda v: (v * 2.0,), a)
    outputs_t = torch_checkpoint(lambda v: (v * 2.0,), torch.tensor([0.5, 1.5], requires_grad=True))
    assert isinstance(outputs, tuple) and isinstance(outputs_t, tuple) and len(outputs) == len(outputs_t) == 1
    outputs[0].sum().backward()
    np.testing.assert_array_equal(a.grad.data, [2.0, 2.0])


def test_an_input_that_needs_no_gradient_gets_none_like_torch():
    a0, c0 = np.array([0.3, 0.7]), np.array([1.3, -0.7])
    a, c = Variable(a0), Variable(c0, requires_grad=False)
    checkpoint(lambda u, v: u * v, a, c).sum().backward()
    a_t, c_t = torch.tensor(a0, requires_grad=True), torch.tensor(c0)
    torch_checkpoint(lambda u, v: u * v, a_t, c_t).sum().backward()
    assert c.grad is None and c_t.grad is None
    np.testing.assert_array_equal(a.grad.data, a_t.grad.numpy())


def test_an_input_the_function_does_not_use_gets_no_gradient_like_torch():
    a, b = Variable(np.array([1.0, 2.0])), Variable(np.array([3.0, 4.0]))
    checkpoint(lambda u, v: u * 2.0, a, b).sum().backward()
    a_t, b_t = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, 4.0], requires_grad=True)
    torch_checkpoint(lambda u, v: u * 2.0, a_t, b_t).sum().backward()
    assert b_t.grad is None and b.grad is None
    np.testing.assert_array_equal(a.grad.data, a_t.grad.numpy())


def test_retain_graph_recomputes_again_and_doubles_the_gradients_then_a_third_pass_raises_like_torch():
    x0 = np.array([0.3, 0.7])
    for m, make, run in [(tinypytorch, lambda: Variable(x0.copy()), checkpoint),
                         (torch, lambda: torch.tensor(x0, requires_grad=True), torch_checkpoint)]:
        calls = []

        def f(v, m=m, calls=calls):
            calls.append(1)
            return m.sin(v)

        x = make()
        y = run(f, x).sum()
        y.backward(retain_graph=True)
        y.backward()
        grad = x.grad.data if m is tinypytorch else x.grad.numpy()
        np.testing.assert_allclose(grad, 2 * np.cos(x0), rtol=1e-15)
        assert len(calls) == 3
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            y.backward()


def test_changing_the_checkpoints_input_in_place_is_caught_like_torch():
    for m, make, run in [(tinypytorch, lambda: Variable(np.array([0.3, 0.7])), checkpoint),
                         (torch, lambda: torch.tensor([0.3, 0.7], dtype=torch.float64, requires_grad=True),
                          torch_checkpoint)]:
        b = make() * 1.0
        y = run(m.sin, b).sum()
        b.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_under_no_grad_it_runs_once_and_records_nothing_like_torch():
    chain = Chain(3, 2, 0.0)
    x = Variable(np.ones((2, 3)))
    with no_grad():
        y = checkpoint(chain, x)
    assert chain.calls == 1 and not y.requires_grad and y.creator is None
    calls = []
    x_t = torch.ones(2, 3, requires_grad=True)
    with torch.no_grad():
        y_t = torch_checkpoint(lambda v: calls.append(1) or v * 2.0, x_t)
    assert calls == [1] and not y_t.requires_grad


# ----- the limits of the reentrant form ---------------------------------------------------------------

def test_no_input_requiring_grad_warns_and_the_parameters_get_nothing_like_torch():
    chain = Chain(3, 2, 0.0)
    twin = torch.nn.Sequential(*[m for linear in chain.linears
                                 for m in (torch.nn.Linear(3, 3, dtype=torch.float64), torch.nn.Tanh())])
    data = np.random.default_rng(0).standard_normal((2, 3))
    with pytest.warns(UserWarning, match=NO_INPUT_GRAD):
        y = checkpoint(chain, Variable(data, requires_grad=False))
    with pytest.warns(UserWarning, match=NO_INPUT_GRAD):
        y_t = torch_checkpoint(twin, torch.tensor(data))
    assert not y.requires_grad and not y_t.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        (y * y).sum().backward()
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        (y_t * y_t).sum().backward()
    assert all(p.grad is None for p in chain.params()) and all(p.grad is None for p in twin.parameters())


def test_an_input_that_requires_grad_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checkpoint(tinypytorch.sin, Variable(np.ones(2)))


def test_autograd_grad_through_a_reentrant_checkpoint_raises_like_torch():
    x = Variable(np.array([0.3, 0.7]))
    y = checkpoint(tinypytorch.sin, x).sum()
    with pytest.raises(RuntimeError, match=r"When use_reentrant=True, tinypytorch.utils.checkpoint is incompatible "
                                           r"with autograd.grad\(\).*use_reentrant=False"):
        autograd.grad(y, x)
    x_t = torch.tensor([0.3, 0.7], requires_grad=True)
    y_t = torch_checkpoint(torch.sin, x_t).sum()
    with pytest.raises(RuntimeError, match="When use_reentrant=True, torch.utils.checkpoint is incompatible"):
        torch.autograd.grad(y_t, x_t)


def test_after_a_checkpointed_backward_autograd_grad_of_a_plain_graph_works():
    x = Variable(np.array([0.3, 0.7]))
    checkpoint(tinypytorch.sin, x).sum().backward()
    with pytest.raises(RuntimeError, match="incompatible with autograd.grad"):
        autograd.grad(checkpoint(tinypytorch.sin, x).sum(), x)
    (g,) = autograd.grad(tinypytorch.sin(x).sum(), x)  # the failed pass left nothing behind
    np.testing.assert_allclose(g.data, np.cos([0.3, 0.7]), rtol=1e-15)
    np.testing.assert_allclose(x.grad.data, np.cos([0.3, 0.7]), rtol=1e-15)


def test_a_recomputation_whose_outputs_need_no_gradient_raises_like_torch():
    x = Variable(np.array([0.3, 0.7]))
    y = checkpoint(lambda v: Variable(np.ones(2), requires_grad=False) * 2.0, x)
    x_t = torch.tensor([0.3, 0.7], requires_grad=True)
    y_t = torch_checkpoint(lambda v: torch.ones(2, dtype=torch.float64) * 2.0, x_t)
    message = r"none of output has requires_grad=True, this checkpoint\(\) is not necessary"
    with pytest.raises(RuntimeError, match=message):
        y.sum().backward()
    with pytest.raises(RuntimeError, match=message):
        y_t.sum().backward()


# ----- bad input ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("function, name", [("net", "str"), (None, "NoneType"), (3, "int")])
def test_checkpoint_refuses_what_cannot_be_called_like_torch(function, name):
    with pytest.raises(TypeError, match=f"checkpoint: function must be callable, got {name}"):
        checkpoint(function, Variable(np.ones(2)))
    with pytest.raises(TypeError):
        torch_checkpoint(function, torch.ones(2, requires_grad=True))


def test_checkpoint_refuses_a_function_that_does_not_return_variables():
    with pytest.raises(TypeError, match="checkpoint: the checkpointed function must return a Variable or a tuple "
                                        "of Variables, got float"):
        checkpoint(lambda v: 3.0, Variable(np.ones(2)))


# ----- the step's figures ------------------------------------------------------------------------------

def test_the_steps_saved_bytes_are_what_the_blocks_save():
    step = load_step(42)
    depth, rows, width = 4, 32, 64
    activation, mask = rows * width * 8, rows * width  # float64, and a boolean mask
    net = step.Net(width=width, depth=depth, p=0.2)
    batch = np.random.default_rng(1).standard_normal((rows, width))
    recomputed = depth * (activation + mask) + (depth - 1) * activation  # the last block's output is not re-saved
    expected = {
        "plain": (depth * (2 * activation + mask), 0),
        "one": (activation, recomputed),
        "per block": (depth * activation, recomputed),
    }
    runs = {"plain": net, "one": lambda x: checkpoint(net, x), "per block": step.every_block(net)}
    for name, run in runs.items():
        tinypytorch.manual_seed(0)
        assert step.saved_bytes(run, net, batch) == expected[name], name


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_arguments_that_are_not_tensors_reach_the_function_as_they_are_like_torch(use_reentrant):
    a, a_t = Variable(np.array([1.0, 2.0, 3.0])), torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    checkpoint(lambda x, n, flag: x[:n] * (2.0 if flag is None else 1.0), a, 2, None,
               use_reentrant=use_reentrant).sum().backward()
    torch.utils.checkpoint.checkpoint(lambda x, n, flag: x[:n] * (2.0 if flag is None else 1.0), a_t, 2, None,
                                      use_reentrant=use_reentrant).sum().backward()
    np.testing.assert_array_equal(a.grad.data, a_t.grad.numpy())  # [2, 2, 0]


# ----- the door: the running pass, as the floors above see it ------------------------------------------

class _Watches(tinypytorch.Function):
    """y = 2x, whose backward notes the running pass, and runs one pass of its own inside it."""

    def __init__(self, seen):
        self.seen = seen

    def forward(self, x):
        return 2 * x

    def backward(self, gy):
        from tinypytorch.autograd.gradients import current_pass
        outer = current_pass()
        leaf = Variable(np.array(3.0))
        inner = []
        with tinypytorch.enable_grad():  # (backward runs without recording, step 27)
            y = F.sin(leaf)
        y.register_hook(lambda g: inner.append(current_pass()) or g)
        autograd.backward(y)
        self.seen.append((outer, inner[0], current_pass()))
        return 2 * gy


@pytest.mark.parametrize("how", ["backward", "grad"])
def test_current_pass_is_the_running_pass_innermost_first_and_says_whether_it_captures(how):
    """The door checkpointing reads (tinypytorch.autograd.gradients.current_pass): None outside backward; inside,
    the running pass, the inner one while a pass runs inside it, the outer one again after; `capture` tells a pass
    of autograd.grad (which a reentrant checkpoint refuses) from one of backward()."""
    from tinypytorch.autograd.gradients import current_pass
    assert current_pass() is None
    seen = []
    x = Variable(np.array(1.5))
    y = _Watches(seen)(x)
    if how == "backward":
        y.backward()
    else:
        autograd.grad(y, x)
    ((outer, inner, after),) = seen
    assert outer is not None and after is outer and inner is not outer and inner.id != outer.id
    assert outer.capture is (how == "grad") and inner.capture is False
    assert current_pass() is None


def test_checkpoint_starts_its_inner_pass_through_autograd_backward(monkeypatch):
    """As PyTorch's CheckpointFunction.backward calls torch.autograd.backward: the public function, not the engine."""
    calls = []
    original = autograd.backward
    monkeypatch.setattr(autograd, "backward", lambda *a, **k: calls.append(len(a[0])) or original(*a, **k))
    net = MLP([3, 3])
    x = Variable(np.ones((2, 3)))
    (checkpoint(net, x) ** 2).sum().backward()
    assert calls == [1]
    assert x.grad is not None and all(p.grad is not None for p in net.params())
