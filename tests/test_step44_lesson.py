"""Step 44's lesson: the exercises' solutions (the k that minimises k + N/k; balanced segments and a
checkpoint_bounds that runs them), checked against brute force over every k, PyTorch's checkpoint on a twin
chain (gradients, functions rerun, distinct activations saved) and counts worked out here."""
import functools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from reference import assert_close_to_torch
from steploader import load_step
from test_step44 import sine_calls
from tinypytorch import Variable

pytestmark = [pytest.mark.step44, pytest.mark.torch]
step = load_step(44)


def f(depth, k):
    """k + N/k, exactly."""
    return k + Fraction(depth, k)


def best_k(depth):
    """The k in 1..N with the smallest k + N/k, the smallest such k on a tie: by trying them all."""
    return min(range(1, depth + 1), key=lambda k: (f(depth, k), k))


def torch_run(modules, bounds):
    """Run torch modules in segments `bounds`, all but the last under torch's (non-reentrant) checkpoint."""
    def segment(start, end):
        return lambda h: functools.reduce(lambda h, m: m(h), modules[start:end], h)

    def run(x):
        for start, end in bounds[:-1]:
            x = torch_checkpoint.checkpoint(segment(start, end), x, use_reentrant=False)
        return segment(*bounds[-1])(x)
    return run


def torch_activations(modules, run):
    """(count, bytes) of the distinct non-parameter storages that torch's outer pack hook sees in a forward pass
    of sum(run(x)^2), x (the page's batch) needing no gradient: what the chain keeps for backward."""
    parameters = {p.untyped_storage().data_ptr() for m in modules for p in m.parameters()}
    storages = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in parameters:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run(torch.tensor(step.BATCH_DATA))
        loss = (y * y).sum()
    loss.backward()
    return len(storages), sum(storages.values())


def chunks(depth, k):
    """PyTorch's checkpoint_sequential segments: k - 1 chunks of N // k, the last with the rest."""
    size = depth // k
    return [(s * size, (s + 1) * size) for s in range(k - 1)] + [((k - 1) * size, depth)]


# ----- exercise 1: optimal_k -----------------------------------------------------------------------------------

def test_optimal_k_is_the_k_with_the_fewest_k_plus_n_over_k_of_all_k():
    for depth in range(1, 301):
        assert step.optimal_k(depth) == best_k(depth), depth


@pytest.mark.parametrize("k", [1, 2, 3, 7, 11])
def test_optimal_k_takes_the_smaller_k_on_a_tie(k):
    depth = k * (k + 1)  # f(k) = k + (k + 1) = (k + 1) + k = f(k + 1)
    assert f(depth, k) == f(depth, k + 1) < f(depth, k + 2)
    assert step.optimal_k(depth) == k


@pytest.mark.parametrize("depth", [4, 9, 12, 25, 30])
def test_at_optimal_k_the_chain_keeps_f_of_k_activations_as_torchs_chain_does(depth):
    k = step.optimal_k(depth)
    assert k == best_k(depth) and depth % k == 0  # squares and k(k + 1): segments of N / k exactly
    kept = k + depth // k  # each segment's input, then the last segment's N / k outputs
    _, _, held = step.run_chain(step.make_chain(depth), k)
    assert held == kept == f(depth, k)
    modules = step.torch_chain(step.make_chain(depth))
    count, nbytes = torch_activations(modules, lambda x: torch_checkpoint.checkpoint_sequential(
        modules, k, x, use_reentrant=False))
    assert (count, nbytes) == (kept, kept * step.BATCH_DATA.nbytes)


def test_the_page_finds_k_5_and_10_activations_for_25_layers():
    assert step.k25 == math.isqrt(25) == 5
    assert step.kept25 == 5 + 25 // 5


# ----- exercise 2: balanced segments ---------------------------------------------------------------------------

@given(depth=st.integers(1, 300), data=st.data())
def test_balanced_bounds_cover_the_chain_in_k_segments_whose_sizes_differ_by_at_most_one_longer_first(depth, data):
    k = data.draw(st.integers(1, depth))
    bounds = step.balanced_bounds(depth, k)
    assert len(bounds) == k
    assert bounds[0][0] == 0 and bounds[-1][1] == depth
    assert all(end == start for (_, end), (start, _) in zip(bounds, bounds[1:]))  # contiguous
    sizes = [end - start for start, end in bounds]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("depth, k, expected", [
    (6, 3, [(0, 2), (2, 4), (4, 6)]),
    (7, 3, [(0, 3), (3, 5), (5, 7)]),
    (5, 1, [(0, 5)]),
    (4, 4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
])
def test_balanced_bounds_examples(depth, k, expected):
    assert step.balanced_bounds(depth, k) == expected


def test_balanced_bounds_of_128_in_11_are_7_segments_of_12_then_4_of_11():
    # 128 = 11 * 11 + 7: the 7 left over go one each to the first 7 segments
    assert [end - start for start, end in step.balanced_bounds(128, 11)] == [12] * 7 + [11] * 4


@pytest.mark.parametrize("depth, k", [(1, 1), (5, 1), (5, 5), (7, 3), (8, 3), (10, 4)])
def test_checkpoint_bounds_reruns_every_segment_but_the_last_as_torchs_checkpoint_sequential(depth, k):
    def ours(bounds):
        def run(functions):
            x = Variable(np.array([0.5, 2.0]))
            step.checkpoint_bounds(functions, bounds, x).sum().backward()
        return run

    def torchs(functions):
        x = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
        torch_checkpoint.checkpoint_sequential(functions, k, x, use_reentrant=False).sum().backward()

    # on PyTorch's chunks, the functions run as often as in torch's checkpoint_sequential
    assert sine_calls(tinypytorch, depth, ours(chunks(depth, k))) == sine_calls(torch, depth, torchs)
    # on balanced segments: twice in each checkpointed segment, once in the last
    bounds = step.balanced_bounds(depth, k)
    last = bounds[-1][0]
    assert sine_calls(tinypytorch, depth, ours(bounds)) == [2] * last + [1] * (depth - last)


@pytest.mark.parametrize("k", range(1, 8))
def test_checkpoint_bounds_gives_the_plain_runs_gradients_and_torchs(k):
    layers = step.make_chain(7, seed=k)
    params = [p for layer in layers for p in layer.params()]

    def grads(bounds):
        for p in params:
            p.cleargrad()
        x = Variable(step.BATCH_DATA.copy())
        y = step.checkpoint_bounds(layers, bounds, x)
        (y * y).sum().backward()
        return [y.data, x.grad.data] + [p.grad.data for p in params]

    ours, plain = grads(step.balanced_bounds(7, k)), grads([(0, 7)])
    for g, g_plain in zip(ours, plain, strict=True):
        np.testing.assert_array_equal(g, g_plain)  # the recomputation repeats the same float64 operations
    modules = step.torch_chain(layers)
    x_t = torch.tensor(step.BATCH_DATA, requires_grad=True)
    y_t = torch_run(modules, [(0, 7)])(x_t)
    (y_t * y_t).sum().backward()
    theirs = [y_t.detach().numpy(), x_t.grad.numpy()] + [p.grad.numpy() for m in modules for p in m.parameters()]
    for g, g_t in zip(ours, theirs, strict=True):
        assert_close_to_torch(g, g_t)


@pytest.mark.parametrize("depth, k", [(128, 11), (10, 3), (12, 5), (16, 4), (7, 7), (5, 1)])
def test_balanced_segments_keep_k_activations_and_the_shortest_segments_outputs_as_torch_counts(depth, k):
    # the first k - 1 segments keep their input, the plain last one its input and its outputs: it is the shortest,
    # N // k long
    kept = k + depth // k
    bounds = step.balanced_bounds(depth, k)
    layers = step.make_chain(depth)
    _, _, held = step.run_chain(layers, bounds, sequential=step.checkpoint_bounds)
    assert held == kept
    modules = step.torch_chain(layers)
    assert torch_activations(modules, torch_run(modules, bounds)) == (kept, kept * step.BATCH_DATA.nbytes)
    # PyTorch's chunks put the remainder in the last segment: k + N - (k - 1)(N // k), never fewer
    assert kept <= k + depth - (k - 1) * (depth // k)


def test_the_page_finds_22_activations_for_128_layers_in_11_balanced_segments():
    assert step.kept_balanced == 11 + 128 // 11 == 22
    assert step.kept_balanced < 11 + 128 - 10 * (128 // 11)  # 29 in PyTorch's chunks
