"""Step 66: peak_memory (tinypytorch.utils.memory), checked against array sizes done in the open and against
PyTorch's profiler on the same training step; the memory techniques' gradients on the capstone's network against
torch's twins."""
import gc
import json
import math
import pathlib
import tempfile
import tracemalloc

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import tinypytorch as tp
from tinypytorch import nn
from tinypytorch.utils.checkpoint import checkpoint_sequential
from tinypytorch.utils.memory import peak_memory

pytestmark = pytest.mark.step66
MB = 10**6


def test_peak_counts_an_array_held_and_returns_the_result():
    peak, result = peak_memory(lambda: np.ones(MB))  # 8 MB of float64
    assert result.nbytes == 8 * MB
    assert 8 * MB <= peak < 8 * MB + 64 * 1024


def test_peak_counts_what_was_freed_before_the_end():
    def work():
        a = np.ones(MB)  # 8 MB, freed at once
        del a
        b = np.ones(MB // 2)  # 4 MB, freed at the end
        return b.sum()
    peak, total = peak_memory(work)
    assert total == MB // 2
    assert 8 * MB <= peak < 8 * MB + 64 * 1024  # the first array's moment, not the sum of both


def test_what_was_held_before_is_not_counted():
    held = np.ones(MB)  # noqa: F841 (held through the measurement)
    peak, _ = peak_memory(lambda: np.ones(10))
    assert peak < 64 * 1024


def test_collector_and_tracing_left_as_they_were():
    assert gc.isenabled() and not tracemalloc.is_tracing()
    collector_during = []
    peak_memory(lambda: collector_during.append(gc.isenabled()))
    assert collector_during == [False]  # reference counting alone frees, as a training step does
    assert gc.isenabled() and not tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        peak_memory(lambda: None)
        assert tracemalloc.is_tracing()  # the caller's tracing is kept on
    finally:
        tracemalloc.stop()
    with pytest.raises(ZeroDivisionError):
        peak_memory(lambda: 1 / 0)
    assert gc.isenabled() and not tracemalloc.is_tracing()


def mlp(n, ws):
    layers = []
    for W, b in ws:
        layer = n.Linear(W.shape[1], W.shape[0]).double() if n is torch.nn else n.Linear(W.shape[1], W.shape[0])
        if n is torch.nn:
            with torch.no_grad():
                layer.weight.copy_(torch.from_numpy(W)), layer.bias.copy_(torch.from_numpy(b))
        else:
            layer.weight.data, layer.bias.data = W.copy(), b.copy()
        layers += [layer, n.Tanh()]
    return n.Sequential(*layers)


def weights(depth, width, seed=63):
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, (width, width)) / math.sqrt(width), rng.uniform(-1, 1, width) / math.sqrt(width))
            for _ in range(depth)]


def torch_peak(work):
    """The most bytes torch's CPU allocator held at once during work(), from its profiler's memory events."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    held = peak = 0
    for e in sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                    key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0))):
        held += e["args"]["Bytes"]
        peak = max(peak, held)
    return peak


@pytest.mark.torch
@pytest.mark.parametrize("segments", [None, 3])
def test_peak_of_a_training_step_is_torchs_within_a_fifth(segments):
    """Large arrays, few of them: the graph's Python objects are small beside them, and both frameworks hold the
    same activations (torch's profiler sees its allocator only; tracemalloc sees the arrays and Python's objects)."""
    torch.set_num_threads(1)
    ws, x = weights(9, 256), np.random.default_rng(0).standard_normal((1024, 256))
    ours, twin = mlp(nn, ws), mlp(torch.nn, ws)

    def step_ours():
        out = ours(tp.Variable(x)) if segments is None else checkpoint_sequential(ours, segments, tp.Variable(x),
                                                                                 use_reentrant=False)
        (out * out).sum().backward()

    def step_torch():
        out = twin(torch.from_numpy(x)) if segments is None else torch.utils.checkpoint.checkpoint_sequential(
            twin, segments, torch.from_numpy(x), use_reentrant=False)
        (out * out).sum().backward()
    step_ours(), step_torch()  # the gradients exist: the step measured is a second one
    gc.collect()
    theirs = torch_peak(step_torch)
    ours_peak, _ = peak_memory(step_ours)
    assert 0.8 < ours_peak / theirs < 1.2, (ours_peak, theirs)
    for p, q in zip(ours.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.data, q.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_checkpointing_lowers_the_peak_by_about_the_activations_it_drops():
    ws, x = weights(16, 256), np.random.default_rng(1).standard_normal((512, 256))
    model = mlp(nn, ws)

    def step(segments):
        def work():
            out = model(tp.Variable(x)) if segments is None else checkpoint_sequential(
                model, segments, tp.Variable(x), use_reentrant=False)
            (out * out).sum().backward()
            model.zero_grad()
        return work
    plain, _ = peak_memory(step(None))
    checkpointed, _ = peak_memory(step(4))
    activation = 512 * 256 * 8  # one 512 x 256 float64 array: tanh's output, the next Linear's input
    # plain keeps 16 activations; 4 segments keep 3 segment inputs, the last segment's 4 and, in backward, one
    # recomputed segment's 4: about 5 fewer
    assert 4 * activation < plain - checkpointed < 6 * activation
