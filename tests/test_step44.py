"""Step 44: checkpoint_sequential and the sqrt(N) schedule (chunks as PyTorch's, dropout's masks redrawn the same,
bad arguments), and the memory it keeps: k + N/k activations, counted, measured and compared with torch's."""
import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from memory import counting_saved, tracing_numpy
from reference import assert_close_to_torch
from tinypytorch import Variable, recomputation
from tinypytorch import functions as F
from tinypytorch.layers import Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint_sequential

pytestmark = [pytest.mark.step44, pytest.mark.torch]


WIDTH, BATCH = 8, 5
ACTIVATION = BATCH * WIDTH * 8  # bytes of one (BATCH, WIDTH) float64 array


def torch_checkpoint_sequential(functions, segments, x, use_reentrant):
    with warnings.catch_warnings():  # torch warns that None of the inputs requires grad, as we do: tested below
        warnings.simplefilter("ignore", UserWarning)
        return torch.utils.checkpoint.checkpoint_sequential(functions, segments, x, use_reentrant=use_reentrant)


# ----- a chain of Linear + tanh layers and its torch twin -------------------------------------------------

class LinearTanh(Layer):
    def __init__(self, width, rng):
        super().__init__()
        self.linear = Linear(width, width, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def make_chain(depth, seed=0, width=WIDTH):
    rng = np.random.default_rng(seed)
    return [LinearTanh(width, rng) for _ in range(depth)]


def copied(module, parameters):
    with torch.no_grad():
        for p_t, p in zip(module.parameters(), parameters, strict=True):
            p_t.copy_(torch.from_numpy(p.data))
    return module


def torch_chain(layers):
    return [torch.nn.Sequential(copied(torch.nn.Linear(*layer.linear.weight.shape[::-1], dtype=torch.float64),
                                       layer.linear.params()), torch.nn.Tanh()) for layer in layers]


def chain_params(layers):
    return [p for layer in layers for p in layer.params()]


def chain_grads(layers, x0, segments, use_reentrant, x_requires_grad=True):
    """(loss, input gradient, parameter gradients) of sum(y^2) through checkpoint_sequential."""
    for p in chain_params(layers):
        p.cleargrad()
    x = Variable(x0.copy(), requires_grad=x_requires_grad)
    y = checkpoint_sequential(layers, segments, x, use_reentrant=use_reentrant)
    loss = (y * y).sum()
    loss.backward()
    return loss.data, None if x.grad is None else x.grad.data, [p.grad.data for p in chain_params(layers)]


def torch_chain_grads(modules, x0, segments, use_reentrant):
    x = torch.tensor(x0, requires_grad=True)
    y = torch_checkpoint_sequential(modules, segments, x, use_reentrant)
    loss = (y * y).sum()
    loss.backward()
    return loss.item(), x.grad.numpy(), [p.grad.numpy() for m in modules for p in m.parameters()]


def batch(seed=1, width=WIDTH):
    return np.random.default_rng(seed).standard_normal((BATCH, width))


# ----- checkpoint_sequential ---------------------------------------------------------------------------------

@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("depth", [1, 2, 5, 7])
def test_every_segment_count_gives_exactly_the_plain_runs_gradients(depth, use_reentrant):
    layers, x0 = make_chain(depth), batch()
    x_t = torch.tensor(x0, requires_grad=True)  # the plain run, in torch, as the reference
    y_t = x_t
    for m in torch_chain(layers):
        y_t = m(y_t)
    (y_t * y_t).sum().backward()
    plain = chain_grads(layers, x0, 1, use_reentrant)
    assert_close_to_torch(plain[1], x_t.grad.numpy())
    for segments in range(2, depth + 1):
        loss, gx, grads = chain_grads(layers, x0, segments, use_reentrant)
        # the recomputation repeats the same float64 operations on the same arrays: bitwise equal
        np.testing.assert_array_equal(loss, plain[0])
        np.testing.assert_array_equal(gx, plain[1])
        for g, g_plain in zip(grads, plain[2], strict=True):
            np.testing.assert_array_equal(g, g_plain)


@given(depth=st.integers(1, 6), data=st.data(), seed=st.integers(0, 2**16), use_reentrant=st.booleans())
def test_gradients_equal_torchs_checkpoint_sequential_on_a_twin_chain(depth, data, seed, use_reentrant):
    segments = data.draw(st.integers(1, depth))
    layers, x0 = make_chain(depth, seed), batch(seed + 1)
    loss, gx, grads = chain_grads(layers, x0, segments, use_reentrant)
    loss_t, gx_t, grads_t = torch_chain_grads(torch_chain(layers), x0, segments, use_reentrant)
    assert_close_to_torch(loss, loss_t)
    assert_close_to_torch(gx, gx_t)
    for g, g_t in zip(grads, grads_t, strict=True):
        assert_close_to_torch(g, g_t)


def sine_calls(m, depth, run):
    """How many times each of `depth` sine functions (m.sin, m tinypytorch or torch) ran in run(functions)."""
    counts = [0] * depth

    def sine(i):
        def f(x):
            counts[i] += 1
            return m.sin(x)
        return f

    run([sine(i) for i in range(depth)])
    return counts


def call_counts(m, depth, segments, use_reentrant):
    """How many times each of `depth` sine functions ran in a forward and backward pass through m's
    checkpoint_sequential."""
    def run(functions):
        if m is torch:
            x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
            torch_checkpoint_sequential(functions, segments, x, use_reentrant).sum().backward()
        else:
            x = Variable(np.array([0.5, 2.0]))
            checkpoint_sequential(functions, segments, x, use_reentrant=use_reentrant).sum().backward()

    return sine_calls(m, depth, run)


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("depth", range(1, 9))
def test_the_checkpointed_functions_are_torchs_chunks_of_len_over_segments_all_but_the_last(depth, use_reentrant):
    for segments in range(1, depth + 1):
        ours = call_counts(tinypytorch, depth, segments, use_reentrant)
        theirs = call_counts(torch, depth, segments, use_reentrant)
        size = depth // segments  # PyTorch's rule: chunks of len // segments, the last (with the rest) plain
        expected = [2 if i < size * (segments - 1) else 1 for i in range(depth)]
        assert ours == theirs == expected, (segments, ours, theirs)


def dropout_chain_grads(layers, segments, use_reentrant, preserve_rng_state):
    """Gradients through Linear + tanh + dropout(0.3) layers, seeded, and the next number the generator draws."""
    functions = [lambda x, layer=layer: F.dropout(layer(x), 0.3) for layer in layers]
    for p in chain_params(layers):
        p.cleargrad()
    tinypytorch.manual_seed(0)
    x = Variable(batch())
    y = checkpoint_sequential(functions, segments, x, use_reentrant=use_reentrant,
                              preserve_rng_state=preserve_rng_state)
    (y * y).sum().backward()
    return [x.grad.data] + [p.grad.data for p in chain_params(layers)], tinypytorch.random.default_generator().random()


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_dropout_draws_the_same_masks_when_recomputed_and_the_stream_goes_on_as_after_a_plain_run(use_reentrant):
    layers = make_chain(6)
    plain, next_plain = dropout_chain_grads(layers, 1, use_reentrant, True)
    for segments in (2, 3, 6):
        grads, next_draw = dropout_chain_grads(layers, segments, use_reentrant, True)
        for g, g_plain in zip(grads, plain, strict=True):
            np.testing.assert_array_equal(g, g_plain)
        assert next_draw == next_plain
        grads, next_draw = dropout_chain_grads(layers, segments, use_reentrant, False)
        assert any(not np.array_equal(g, g_plain) for g, g_plain in zip(grads, plain))  # other masks: other grads
        assert next_draw != next_plain


def test_the_remainder_runs_plainly_in_the_last_chunk():
    log = []

    def logged(i):
        def f(x):
            log.append((i, recomputation.is_recomputing()))
            return tinypytorch.sin(x)
        return f

    y = checkpoint_sequential([logged(i) for i in range(7)], 3, Variable(np.array([0.5, 2.0])), use_reentrant=False)
    y.sum().backward()
    forward, recomputed = log[:7], log[7:]
    assert forward == [(i, False) for i in range(7)]
    assert recomputed == [(2, True), (3, True), (0, True), (1, True)]  # backward meets the later chunk first
    assert not recomputation.is_recomputing()


def test_checkpoint_sequential_takes_any_iterable_of_callables_like_torchs_sequential():
    layers, x0 = make_chain(4), batch()
    as_list = chain_grads(layers, x0, 2, False)
    y = checkpoint_sequential(iter(layers), 2, Variable(x0.copy()), use_reentrant=False)
    np.testing.assert_array_equal((y * y).sum().data, as_list[0])


def test_reentrant_with_an_input_that_needs_no_gradient_warns_and_leaves_parameters_without_gradients_like_torch():
    layers = make_chain(4)
    x = Variable(batch(), requires_grad=False)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        y = checkpoint_sequential(layers, 2, x, use_reentrant=True)
    (y * y).sum().backward()
    first_half = chain_params(layers[:2])
    assert all(p.grad is None for p in first_half) and all(p.grad is not None for p in chain_params(layers[2:]))
    modules = torch_chain(layers)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        y_t = torch.utils.checkpoint.checkpoint_sequential(modules, 2, torch.tensor(batch()), use_reentrant=True)
    (y_t * y_t).sum().backward()
    assert all(p.grad is None for m in modules[:2] for p in m.parameters())
    # without reentrancy both give every parameter its gradient
    _, _, grads = chain_grads(layers, batch(), 2, False, x_requires_grad=False)
    assert all(g is not None for g in grads)


@pytest.mark.parametrize("segments", [0, -1, 4, 10])
def test_segments_outside_1_to_the_number_of_functions_raise_value_error(segments):
    with pytest.raises(ValueError, match=r"^checkpoint_sequential: segments must be between 1 and the number of "
                                         rf"functions \(3\), got {segments}$"):
        checkpoint_sequential(make_chain(3), segments, Variable(batch()), use_reentrant=False)
    modules, x = torch_chain(make_chain(3)), torch.tensor(batch(), requires_grad=True)
    if segments >= 0:  # torch fails too, with a message about range (chunks of 0) or a division by zero
        with pytest.raises((ValueError, ZeroDivisionError)):
            torch.utils.checkpoint.checkpoint_sequential(modules, segments, x, use_reentrant=False)
    else:  # and a negative count runs every function plainly, without a word
        y = torch.utils.checkpoint.checkpoint_sequential(modules, segments, x, use_reentrant=False)
        assert isinstance(y.grad_fn, torch.autograd.graph.Node) and "Tanh" in y.grad_fn.name()


@pytest.mark.parametrize("segments, name", [(1.0, "1.0"), (True, "True"), ("2", "'2'"), (None, "None")])
def test_segments_that_are_not_an_int_raise_type_error(segments, name):
    with pytest.raises(TypeError, match=f"^checkpoint_sequential: segments must be an int, got {name}$"):
        checkpoint_sequential(make_chain(3), segments, Variable(batch()))


def test_an_empty_list_of_functions_raises():
    with pytest.raises(ValueError, match=r"number of functions \(0\), got 1"):
        checkpoint_sequential([], 1, Variable(batch()))


# ----- memory: k + N/k ---------------------------------------------------------------------------------------

def saved(layers, segments, use_reentrant=False, x_requires_grad=False):
    """(bytes packed, distinct non-parameter arrays saved) in a forward pass, seen by an outer pack hook."""
    x = Variable(batch(), requires_grad=x_requires_grad)
    with counting_saved() as (packed, arrays):
        y = checkpoint_sequential(layers, segments, x, use_reentrant=use_reentrant)
        loss = (y * y).sum()
    for a in arrays.values():
        assert a.shape == (BATCH, WIDTH)
    count = len(arrays)
    arrays.clear()
    loss.backward()
    return sum(packed), count


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("depth", range(1, 13))
def test_saved_activations_are_each_segments_input_plus_the_last_segments_outputs(depth, use_reentrant):
    layers = make_chain(depth)
    for k in range(1, depth + 1):
        last = depth - (k - 1) * (depth // k)  # the last chunk: its share and the remainder
        expected = (k - 1) + 1 + last  # the inputs of the checkpointed chunks, then the last chunk's input and outputs
        _, count = saved(layers, k, use_reentrant, x_requires_grad=use_reentrant)
        assert count == expected, (k, count, expected)
        if depth % k == 0:
            assert count == k + depth // k


def test_sqrt_n_segments_keep_2_sqrt_n_activations_and_the_two_ends_n_plus_1():
    for depth in (4, 9, 16, 25, 36):
        layers = make_chain(depth)
        root = math.isqrt(depth)
        assert saved(layers, root)[1] == 2 * root
        assert saved(layers, 1)[1] == saved(layers, depth)[1] == depth + 1
        assert min(saved(layers, k)[1] for k in range(1, depth + 1)) == 2 * root


def torch_saved_bytes(modules, segments, use_reentrant, x_requires_grad):
    packed = []
    x = torch.tensor(batch(), requires_grad=x_requires_grad)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.nelement() * t.element_size()) or t,
                                                  lambda t: t):
        y = torch_checkpoint_sequential(modules, segments, x, use_reentrant)
        loss = (y * y).sum()
    loss.backward()
    return sum(packed)


@pytest.mark.parametrize("use_reentrant, x_requires_grad", [(False, False), (False, True), (True, True)])
@pytest.mark.parametrize("depth", [1, 3, 8, 12])
def test_the_bytes_packed_equal_torchs_through_the_same_hooks(depth, use_reentrant, x_requires_grad):
    layers = make_chain(depth)
    modules = torch_chain(layers)
    for k in sorted({1, 2, 3, depth} & set(range(1, depth + 1))):
        ours, _ = saved(layers, k, use_reentrant, x_requires_grad)
        assert ours == torch_saved_bytes(modules, k, use_reentrant, x_requires_grad), (k, use_reentrant)


def held_over_time(layers, segments):
    """Bytes of NumPy arrays held (parameter gradients aside), sampled after each layer call and from a gradient
    hook on each layer output; and the number of layer calls."""
    params, samples, calls = chain_params(layers), [], [0]

    def sample():
        grads = sum(p.grad.data.nbytes for p in params if p.grad is not None)
        samples.append(held_now() - grads)

    def traced(layer):
        def f(x):
            calls[0] += 1
            y = layer(x)
            sample()
            if y.requires_grad:
                y.register_hook(lambda g: sample())
            return y
        return f

    x0 = batch()  # made before the measurement, as the model
    for p in params:
        p.cleargrad()  # gradients left by an earlier pass were allocated before the measurement
    with tracing_numpy() as held_now:
        x = Variable(x0, requires_grad=False)
        y = checkpoint_sequential([traced(layer) for layer in layers], segments, x, use_reentrant=False)
        loss = (y * y).sum()
        del y
        after_forward = held_now()
        loss.backward()
    for p in params:
        p.cleargrad()
    return samples, after_forward, calls[0]


@pytest.mark.parametrize("depth, k", [(9, 3), (16, 4), (16, 2), (12, 4)])
def test_measured_memory_follows_the_count_and_sqrt_n_holds_less_than_plain(depth, k):
    layers = make_chain(depth)
    kept = {segments: saved(layers, segments)[1] for segments in (1, k)}
    peaks = {}
    for segments in (1, k):
        samples, after_forward, calls = held_over_time(layers, segments)
        # held after forward: the saved activations but the batch, which was there before, and the loss (8 bytes)
        assert after_forward == (kept[segments] - 1) * ACTIVATION + 8
        # the peak: those, and at most three arrays of gradient and the loss and its seed
        assert (kept[segments] - 1) * ACTIVATION <= max(samples) <= (kept[segments] + 2) * ACTIVATION + 16
        assert calls == depth + (segments - 1) * (depth // segments)  # each checkpointed layer runs twice
        peaks[segments] = max(samples)
    assert peaks[k] < peaks[1]
