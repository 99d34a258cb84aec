"""Step 46: RevNet's additive coupling and ReversibleSequential: gradients against the plain run and torch (with
dropout), the random stream, one saved tensor whatever the depth, memory flat in depth, inverse drift, the pitfalls
(backward twice, a tensor saved by the layer before, BatchNorm statistics) and bad input."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch
from memory import tracing_numpy
from reference import assert_close_to_torch
from steploader import load_step
from tinypytorch import Variable, autograd, no_grad, random
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Layer, Linear
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential, ReversibleSequentialFunction
from tinypytorch.utils.checkpoint import checkpoint

pytestmark = [pytest.mark.step46, pytest.mark.torch]
step = load_step(46)  # its halves f and g, and its PyTorch twins (the check cell's), the tests' too

WIDTH, BATCH = 8, 5


def make_stack(depth, width=WIDTH, p=0.0, seed=0, dtype=np.float64, half=None):
    """The step's stack, with LinearTanh halves (dropout p) or another kind of half."""
    half = half or step.LinearTanh
    rng = np.random.default_rng(seed)
    extra = (p,) if half is step.LinearTanh else ()
    net = ReversibleSequential(*[AdditiveCoupling(half(width // 2, rng, *extra), half(width // 2, rng, *extra))
                                 for _ in range(depth)])
    for param in net.params():
        param.data = param.data.astype(dtype)
    return net


def data(seed=1, width=WIDTH, batch=BATCH):
    return np.random.default_rng(seed).standard_normal((batch, width))


def grads_of(net, x0, weights, reversible, seed=0):
    """(output, [x.grad] + parameter grads, next draw of the generator) of sum(y * weights), from manual_seed."""
    tinypytorch.manual_seed(seed)
    net.cleargrads()
    x = Variable(x0.copy())
    y = net(x) if reversible else step.run_plainly(net, x)
    (y * weights.astype(y.dtype)).sum().backward()
    return y.data, [x.grad.data] + [p.grad.data for p in net.params()], random.default_generator().random()


def recorded_masks(net, x0, seed=0):
    """The dropout masks a plain run from manual_seed(seed) draws: the boolean tensors Dropout saves."""
    masks = []
    tinypytorch.manual_seed(seed)
    with saved_tensors_hooks(lambda v: masks.append(v.data) if v.dtype == bool else None, lambda _: None):
        step.run_plainly(net, Variable(x0))
    return masks


# ----- the torch twin: the same network written plainly (and the algorithm as a torch.autograd.Function) ----

def torch_coupling_blocks(net, masks=()):
    """The step's TorchCoupling of each block of `net` (its weights), dropping where `masks` say, in order."""
    masks = list(masks)  # one list for all blocks: each FixedMask takes the next mask in the order they were drawn
    return torch.nn.ModuleList([step.TorchCoupling(block, masks) for block in net.blocks])


def torch_grads(blocks, x0, weights, port=False, retain_twice=False):
    x = torch.tensor(x0, requires_grad=True)
    if port:
        y = step.TorchReversible.apply(x, blocks, *blocks.parameters())
    else:
        y = x
        for block in blocks:
            y = block(y)
    loss = (y * torch.from_numpy(weights)).sum()
    loss.backward(retain_graph=retain_twice)
    if retain_twice:
        loss.backward()
    return y.detach().numpy(), [x.grad.numpy()] + [p.grad.numpy() for p in blocks.parameters()]


def relative_difference(ours, reference):
    largest = max(np.abs(r.astype(np.float64)).max() for r in reference)
    return max(np.abs(a.astype(np.float64) - r).max() for a, r in zip(ours, reference, strict=True)) / largest


# ----- the coupling and its inverse ------------------------------------------------------------------------------

def test_the_coupling_computes_revnets_equations_and_its_inverse_undoes_them():
    block = make_stack(1).blocks[0]
    x0 = data()
    x1, x2 = x0[:, :4], x0[:, 4:]
    f = lambda h: np.tanh(h @ block.f.linear.weight.data.T + block.f.linear.bias.data)  # noqa: E731
    g = lambda h: np.tanh(h @ block.g.linear.weight.data.T + block.g.linear.bias.data)  # noqa: E731
    y1 = x1 + f(x2)
    expected = np.concatenate([y1, x2 + g(y1)], axis=1)
    y = block(Variable(x0))
    np.testing.assert_allclose(y.data, expected, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(block.inverse(y).data, x0, rtol=0, atol=1e-14)


@pytest.mark.parametrize("depth", [1, 10, 50, 100])
def test_inverse_round_trip_float64_within_1e_12_up_to_100_blocks(depth):
    net, x0 = make_stack(depth, width=32), data(width=32, batch=16)
    with no_grad():
        y = step.run_plainly(net, Variable(x0))
        for block in reversed(net.blocks):
            y = block.inverse(y)
    assert np.abs(y.data - x0).max() / np.abs(x0).max() <= 1e-12


@pytest.mark.parametrize("depth", [1, 5, 10])
def test_inverse_round_trip_float32_within_1e_5_up_to_10_blocks(depth):
    net, x0 = make_stack(depth, width=32, dtype=np.float32), data(width=32, batch=16).astype(np.float32)
    with no_grad():
        y = step.run_plainly(net, Variable(x0))
        for block in reversed(net.blocks):
            y = block.inverse(y)
    assert y.dtype == np.float32
    assert np.abs(y.data - x0).max() / np.abs(x0).max() <= 1e-5


def drift(depth, dtype):
    net, x0 = make_stack(depth, width=32, dtype=dtype), data(width=32, batch=16).astype(dtype)
    w = data(seed=2, width=32, batch=16)
    with no_grad():
        y = step.run_plainly(net, Variable(x0))
        for block in reversed(net.blocks):
            y = block.inverse(y)
    reconstruction = np.abs(y.data - x0).max() / np.abs(x0).max()
    _, rev, _ = grads_of(net, x0, w, True)
    _, plain, _ = grads_of(net, x0, w, False)
    return reconstruction, relative_difference(rev, plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reconstruction_and_gradient_errors_grow_with_depth(dtype):
    # 1, 16 and 256 blocks: the error grows by far more than any CPU's rounding differences (a factor ~3)
    errors = [drift(depth, dtype) for depth in (1, 16, 256)]
    for kind in (0, 1):
        assert errors[0][kind] < errors[1][kind] < errors[2][kind]
    assert errors[2][1] > 100 * errors[0][1]
    eps = np.finfo(dtype).eps
    assert errors[0][1] < 10 * eps  # one block: a few roundings


def test_float32_gradient_error_within_1e_2_at_256_blocks_and_beyond_it_at_1024():
    assert drift(256, np.float32)[1] < 1e-2
    assert drift(1024, np.float32)[1] > 1e-2


# ----- gradients: the plain run, torch, autograd.grad --------------------------------------------------------------

@pytest.mark.parametrize("p", [0.0, 0.3])
def test_gradients_equal_the_plain_run_and_the_random_stream_continues_the_same(p):
    net, x0, w = make_stack(6, p=p), data(), data(seed=2)
    y_rev, rev, next_rev = grads_of(net, x0, w, True)
    y_plain, plain, next_plain = grads_of(net, x0, w, False)
    np.testing.assert_array_equal(y_rev, y_plain)  # the same operations on the same arrays
    assert relative_difference(rev, plain) < 1e-14
    assert next_rev == next_plain


@settings(max_examples=15, deadline=None)
@given(depth=st.integers(1, 5), seed=st.integers(0, 2**16), p=st.sampled_from([0.0, 0.2, 0.5]),
       width=st.sampled_from([2, 6, 10]))
def test_gradients_with_dropout_equal_torchs_plain_network(depth, seed, p, width):
    net, x0, w = make_stack(depth, width=width, p=p, seed=seed), data(seed + 1, width), data(seed + 2, width)
    y, ours, _ = grads_of(net, x0, w, True, seed=seed)
    y_t, theirs = torch_grads(torch_coupling_blocks(net, recorded_masks(net, x0, seed)), x0, w)
    assert_close_to_torch(y, y_t)
    for g, g_t in zip(ours, theirs, strict=True):
        assert_close_to_torch(g, g_t)


def test_gradients_equal_a_torch_autograd_function_port_of_the_algorithm():
    net, x0, w = make_stack(6), data(), data(seed=2)
    _, ours, _ = grads_of(net, x0, w, True)
    _, theirs = torch_grads(torch_coupling_blocks(net), x0, w, port=True)
    _, plain = torch_grads(torch_coupling_blocks(net), x0, w)
    for g, g_t, g_plain in zip(ours, theirs, plain, strict=True):
        assert_close_to_torch(g, g_t)
        assert_close_to_torch(g, g_plain)


def test_without_replaying_the_masks_the_inverse_is_wrong():
    block, x0 = make_stack(1, p=0.5).blocks[0], data()
    tinypytorch.manual_seed(0)
    states = []
    y = block.forward(Variable(x0), states)
    assert np.abs(block.inverse(y, replay=states).data - x0).max() < 1e-14
    assert np.abs(block.inverse(y).data - x0).max() > 0.1


def test_autograd_grad_with_respect_to_a_weight_equals_torch_and_leaves_grad_alone():
    net, x0, w = make_stack(3), data(), data(seed=2)
    weight = net.blocks[1].g.linear.weight
    loss = (net(Variable(x0)) * w).sum()
    (g,) = autograd.grad(loss, [weight])
    blocks = torch_coupling_blocks(net)
    torch_grads(blocks, x0, w)
    assert_close_to_torch(g.data, blocks[1].g[0].weight.grad.numpy())
    assert all(p.grad is None for p in net.params())


def test_a_hook_on_a_weight_runs_once_per_backward_as_in_torch():
    """The inner pass inside backward must not run the weights' hooks: they run in the outer pass, once."""
    net, x0, w = make_stack(3), data(), data(seed=2)
    blocks = torch_coupling_blocks(net)
    calls = []
    for param in net.params():
        param.register_hook(lambda g: calls.append(1) or g * 2.0)
    for param in (p for block in blocks for p in block.parameters()):
        param.register_hook(lambda g: g * 2.0)
    _, ours, _ = grads_of(net, x0, w, reversible=True)
    torch_grads(blocks, x0, w)
    assert len(calls) == len(list(net.params()))
    for g, p in zip(ours[1:], (p for block in blocks for p in block.parameters()), strict=True):
        assert_close_to_torch(g, p.grad.numpy())


def test_each_blocks_gradients_go_on_as_soon_as_the_block_is_done():
    """Backward walks the blocks from the last: their weights' hooks must fire in that order, each as its block
    is done, not all when the stack's backward returns (which would hold every block's gradients at once)."""
    net, x0, w = make_stack(4), data(), data(seed=2)
    fired = []
    for k, block in enumerate(net.blocks):
        for param in block.params():
            param.register_hook(lambda g, k=k: fired.append(k) or g)
    grads_of(net, x0, w, reversible=True)
    per_block = len(list(net.blocks[0].params()))
    assert fired == [k for k in (3, 2, 1, 0) for _ in range(per_block)]


def test_the_stack_is_one_reversible_function_node_and_without_grad_runs_the_blocks():
    net, x0 = make_stack(3), data()
    assert isinstance(net(Variable(x0)).creator, ReversibleSequentialFunction)
    with no_grad():
        y = net(Variable(x0))
    assert y.creator is None
    np.testing.assert_array_equal(y.data, step.run_plainly(net, Variable(x0)).data)


# ----- what is saved, and memory -----------------------------------------------------------------------------------

def saved_by(run):
    packed = []
    with saved_tensors_hooks(lambda v: packed.append(v.data.nbytes) or v.data, lambda data: data):
        run()
    return len(packed), sum(packed)


@pytest.mark.parametrize("depth", [1, 2, 8, 32])
def test_the_stack_saves_one_tensor_its_output_whatever_the_depth(depth):
    net, x0 = make_stack(depth), data()
    assert saved_by(lambda: net(Variable(x0))) == (1, x0.nbytes)
    # the plain run: each block saves the input and weight of two linear layers and two tanh outputs
    assert saved_by(lambda: step.run_plainly(net, Variable(x0)))[0] == 6 * depth


def memory(depth, reversible, batch=2048, width=8):
    """(NumPy bytes held after forward, largest sample during backward), sampled at each g output's gradient."""
    net, x0 = make_stack(depth, width=width), data(batch=batch, width=width)
    samples = []

    class Probe(Layer):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            y = self.layer(x)
            if y.requires_grad and reversible:
                y.register_hook(lambda g: samples.append(held_now()))
            return y

    for block in net.blocks:
        block.g = Probe(block.g)
    with tracing_numpy() as held_now:
        x = Variable(x0, requires_grad=False)
        y = net(x) if reversible else step.run_plainly(net, x)
        loss = (y * y).sum()
        del y
        held = held_now()
        loss.backward()
    return held, max(samples, default=held)


def test_reversible_memory_is_flat_in_depth_and_plain_memory_linear():
    activation = 2048 * 8 * 8
    held_4, peak_4 = memory(4, True)
    held_64, peak_64 = memory(64, True)
    assert held_4 == held_64 < 2 * activation  # the output (and the loss's scalar)
    assert peak_64 <= 1.1 * peak_4  # only the parameters' gradients grow: 320 bytes a block
    plain_4, _ = memory(4, False)
    plain_64, _ = memory(64, False)
    assert plain_64 - plain_4 == pytest.approx(60 * 2.5 * activation, rel=0.01)  # 2.5 activations a block
    assert plain_64 > 20 * peak_64


# ----- pitfalls ----------------------------------------------------------------------------------------------------

def test_backward_twice_raises_like_torch_and_retain_graph_doubles_the_gradients_like_torch():
    net, x0, w = make_stack(3), data(), data(seed=2)
    loss = (net(Variable(x0)) * w).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    blocks = torch_coupling_blocks(net)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y = step.TorchReversible.apply(torch.tensor(x0, requires_grad=True), blocks, *blocks.parameters())
        loss_t = (y * torch.from_numpy(w)).sum()
        loss_t.backward()
        loss_t.backward()
    net.cleargrads()
    x = Variable(x0.copy())
    loss = (net(x) * w).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    _, theirs = torch_grads(torch_coupling_blocks(net), x0, w, retain_twice=True)
    for g, g_t in zip([x.grad.data] + [p.grad.data for p in net.params()], theirs, strict=True):
        assert_close_to_torch(g, g_t)


def test_a_tensor_saved_by_the_layer_before_and_a_residual_around_the_stack_give_torchs_gradients():
    # MemCNN #70 and #39: the wrapper freed its input, which tanh (before it) and the residual still needed
    net, x0, w = make_stack(3), data(), data(seed=2)
    linear = Linear(WIDTH, WIDTH, rng=np.random.default_rng(5))
    x = Variable(x0.copy())
    h = tinypytorch.tanh(linear(x))
    ((h + net(h)) * w).sum().backward()
    blocks = torch_coupling_blocks(net)
    linear_t = torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
    with torch.no_grad():
        linear_t.weight.copy_(torch.from_numpy(linear.weight.data))
        linear_t.bias.copy_(torch.from_numpy(linear.bias.data))
    x_t = torch.tensor(x0, requires_grad=True)
    h_t = torch.tanh(linear_t(x_t))
    y_t = h_t
    for block in blocks:
        y_t = block(y_t)
    ((h_t + y_t) * torch.from_numpy(w)).sum().backward()
    assert_close_to_torch(x.grad.data, x_t.grad.numpy())
    assert_close_to_torch(linear.weight.grad.data, linear_t.weight.grad.numpy())
    for p, p_t in zip(net.params(), blocks.parameters(), strict=True):
        assert_close_to_torch(p.grad.data, p_t.grad.numpy())


def test_batchnorm_statistics_are_updated_once_as_by_one_plain_forward_in_torch():
    net, x0, w = make_stack(3, half=step.NormTanh), data(), data(seed=2)
    _, ours, _ = grads_of(net, x0, w, True)
    for port, count in [(False, 1), (True, 3)]:  # the naive torch port updates in forward, inverse and recompute
        blocks = torch_coupling_blocks(net)
        _, theirs = torch_grads(blocks, x0, w, port=port)
        for g, g_t in zip(ours, theirs, strict=True):
            assert_close_to_torch(g, g_t)
        for block, twin in zip(net.blocks, blocks):
            for half, half_t in [(block.f, twin.f), (block.g, twin.g)]:
                assert half.norm.num_batches_tracked == 1
                assert half_t[1].num_batches_tracked.item() == count
                if not port:
                    assert_close_to_torch(half.norm.running_mean, half_t[1].running_mean.numpy())
                    assert_close_to_torch(half.norm.running_var, half_t[1].running_var.numpy())


# ----- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["f", "g"])
def test_f_or_g_changing_the_shape_of_a_half_is_refused(which):
    rng = np.random.default_rng(0)
    halves = {"f": step.LinearTanh(4, rng), "g": step.LinearTanh(4, rng), which: Linear(4, 3, rng=rng)}
    block = AdditiveCoupling(halves["f"], halves["g"])
    for run in (lambda x: block(x), lambda x: ReversibleSequential(block)(x), lambda x: block.inverse(x)):
        with pytest.raises(ValueError, match=f"{which} changed the shape of its input from \\(2, 4\\) to \\(2, 3\\)"):
            run(Variable(np.ones((2, 8))))


@pytest.mark.parametrize("features", [1, 7, 9])
def test_an_odd_number_of_features_is_refused(features):
    rng = np.random.default_rng(0)
    block = AdditiveCoupling(step.LinearTanh(4, rng), step.LinearTanh(4, rng))
    with pytest.raises(ValueError, match=f"{features} features cannot be split into two halves"):
        ReversibleSequential(block)(Variable(np.ones((2, features))))
    with pytest.raises(ValueError, match="cannot be split"):
        block.inverse(Variable(np.ones((2, features))))


def test_a_block_without_inverse_and_an_empty_stack_are_refused():
    rng = np.random.default_rng(0)
    coupling = AdditiveCoupling(step.LinearTanh(4, rng), step.LinearTanh(4, rng))
    with pytest.raises(TypeError, match="block 1 \\(Linear\\) is not invertible"):
        ReversibleSequential(coupling, Linear(8, 8, rng=rng))
    with pytest.raises(ValueError, match="at least one block"):
        ReversibleSequential()
    with pytest.raises(TypeError, match="f must be callable"):
        AdditiveCoupling(3, step.LinearTanh(4, rng))


HIDDEN = (r"^ReversibleSequential: block 0 \(AdditiveCoupling\) uses a Variable that requires grad but is not among "
          r"its parameters, so backward could not give it a gradient; make f and g Layers")


def hiding_coupling(seed=3):
    """A coupling whose f and g are plain functions closing over Linears: params() cannot list their weights."""
    rng = np.random.default_rng(seed)
    linear_f, linear_g = Linear(WIDTH // 2, WIDTH // 2, rng=rng), Linear(WIDTH // 2, WIDTH // 2, rng=rng)
    block = AdditiveCoupling(lambda h: tinypytorch.tanh(linear_f(h)), lambda h: tinypytorch.tanh(linear_g(h)))
    return block, [linear_f.weight, linear_f.bias, linear_g.weight, linear_g.bias]


@pytest.mark.parametrize("run", ["plain", "checkpoint, reentrant", "checkpoint, non-reentrant"])
def test_functions_closing_over_layers_train_plainly_and_under_checkpoint(run):
    block, weights = hiding_coupling()
    assert list(block.params()) == []
    x = Variable(data())
    y = block(x) if run == "plain" else checkpoint(block, x, use_reentrant=run.endswith(", reentrant"))
    (y * data(2)).sum().backward()
    assert all(w.grad is not None and np.abs(w.grad.data).max() > 0 for w in weights)


def test_the_reversible_stack_refuses_functions_closing_over_layers_rather_than_leave_their_weights_without_grad():
    block, weights = hiding_coupling()
    y = ReversibleSequential(block)(Variable(data()))
    assert isinstance(y.creator, ReversibleSequentialFunction)
    with pytest.raises(RuntimeError, match=HIDDEN):
        (y * data(2)).sum().backward()
    assert all(w.grad is None for w in weights)
    # an input that needs no gradient and no parameters: no node, the blocks run plainly and the weights train
    y = ReversibleSequential(block)(Variable(data(), requires_grad=False))
    assert y.creator is not None and not isinstance(y.creator, ReversibleSequentialFunction)
    (y * data(2)).sum().backward()
    assert all(w.grad is not None for w in weights)


@pytest.mark.parametrize("hidden", ["a Parameter", "a Variable computed outside the block"])
def test_a_layer_half_beside_a_hidden_variable_is_refused_too(hidden):
    rng = np.random.default_rng(4)
    scale = tinypytorch.Parameter(rng.standard_normal(WIDTH // 2))
    used = scale if hidden == "a Parameter" else scale * 2.0
    f = step.LinearTanh(WIDTH // 2, rng)
    block = AdditiveCoupling(lambda h: f(h) * used, step.LinearTanh(WIDTH // 2, rng))
    net = ReversibleSequential(block)
    assert len(list(net.params())) == 2  # g's weight and bias: f hides its Linear and `scale`
    with pytest.raises(RuntimeError, match=HIDDEN):
        (net(Variable(data())) * data(2)).sum().backward()


def test_a_pass_started_while_the_running_pass_gathers_leaves_the_leaves_hooks_to_it():
    """The door's `gathering()` (what the stack's inner passes run in): a pass started inside it runs no leaf's
    hooks, since its gradients go on to the running pass, where they run once; after it, they run as usual."""
    from tinypytorch.autograd.gradients import current_pass
    w = Variable(np.array(2.0))
    fired = []
    w.register_hook(lambda g: fired.append(float(g.data)) or g)

    class Gathers(tinypytorch.Function):
        def forward(self, x):
            return x

        def backward(self, gy):
            with tinypytorch.enable_grad():  # (backward runs without recording, step 27)
                inside, after = w * 3.0, w * 5.0
            with current_pass().gathering():
                (g_inside,) = autograd.grad(inside, [w])
            assert fired == []
            (g_after,) = autograd.grad(after, [w])
            assert fired == [5.0] and current_pass().gathers is False
            return gy * (g_inside + g_after).data

    Gathers()(Variable(np.array(1.0))).backward()
    assert fired == [5.0]
