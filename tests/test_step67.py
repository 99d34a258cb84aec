"""Step 67's memory timeline: events from public hooks, checked against tracemalloc (NumPy's own count of its
arrays), against torch's pack hooks, and against counts worked out by hand."""
import gc
import tracemalloc

import numpy as np
import pytest
import torch
import torch.cuda._memory_viz as memory_viz_reader

import tinypytorch as tp
from tinypytorch import Variable
from tinypytorch.layers import MLP
from tinypytorch.utils import memory_timeline as mt
from tinypytorch.utils.checkpoint import checkpoint_sequential

pytestmark = [pytest.mark.step67, pytest.mark.torch]
DEPTH, WIDTH, BATCH = 4, 8, 3
ACT = BATCH * WIDTH * 8


def data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((BATCH, WIDTH)), rng.standard_normal((BATCH, WIDTH))


def mlp():
    return MLP((WIDTH,) * (DEPTH + 1), activation=tp.tanh, rng=np.random.default_rng(0))


def run(segments=None, trace=False):
    """One step of the MLP under a timeline (plain, or checkpoint_sequential reentrant); (timeline, model)."""
    model, (x, t) = mlp(), data()
    functions = [(lambda layer: lambda h: tp.tanh(layer(h)))(layer) for layer in model.layers[:-1]] + \
        [model.layers[-1]]
    gc.collect()
    gc.disable()
    try:
        with mt.MemoryTimeline(model.params(), trace=trace) as timeline:
            xv = Variable(x, requires_grad=True)
            y = model(xv) if segments is None else checkpoint_sequential(functions, segments, xv)
            loss = tp.mean_squared_error(y, Variable(t))
            timeline.mark("forward done")
            loss.backward()
            timeline.mark("backward done")
            del loss, y, xv
            model.cleargrads()
            timeline.mark("end")
    finally:
        gc.enable()
    return timeline, model


def at(timeline, name):
    return next(e for e in timeline.events if e.name == name)


def test_saved_as_torch_pack_hook_sees():
    timeline, model = run()
    x, t = data()
    seen = []
    layers = [torch.tensor(layer.weight.data, requires_grad=True) for layer in model.layers]
    biases = [torch.tensor(layer.bias.data, requires_grad=True) for layer in model.layers]
    with torch.autograd.graph.saved_tensors_hooks(lambda v: seen.append(v) or v, lambda v: v):
        h = torch.tensor(x, requires_grad=True)
        for i, (w, b) in enumerate(zip(layers, biases)):
            h = torch.nn.functional.linear(h, w, b)
            h = torch.tanh(h) if i < DEPTH - 1 else h
        torch.nn.functional.mse_loss(h, torch.from_numpy(t))
    forward = [e for e in timeline.events[:at(timeline, "forward done").seq] if e.kind == "saved"]
    assert len(forward) == len(seen)
    # new memory: each layer's output (DEPTH arrays), by hand
    assert sum(e.bytes for e in forward) == DEPTH * ACT == at(timeline, "forward done").held


def test_held_agrees_with_tracemalloc_at_the_marks():
    timeline, _ = run(trace=True)
    forward, end = at(timeline, "forward done"), at(timeline, "end")
    assert forward.traced - forward.held == 8  # the loss, which no hook meets
    assert end.held == 0 and end.traced == 0  # everything met was freed, as NumPy's count says
    assert all(e.traced >= e.held for e in timeline.events)  # what is counted is there


def test_trace_starts_and_stops_tracemalloc():
    assert not tracemalloc.is_tracing()
    run(trace=True)
    assert not tracemalloc.is_tracing()


def test_every_allocation_freed_once():
    timeline, _ = run(segments=2)
    added = {e.block: e.bytes for e in timeline.events if e.bytes > 0}
    freed = {e.block: -e.bytes for e in timeline.events if e.kind == "freed"}
    assert added == freed and timeline.events[-1].held == 0
    assert timeline.peak == max(e.held for e in timeline.events)


def test_recomputed_events_under_checkpoint():
    """Two segments of two layers: the first is recomputed in backward; its two tanh outputs are new memory."""
    timeline, _ = run(segments=2)
    recomputed = [e for e in timeline.events if e.kind == "recomputed"]
    assert recomputed and all(e.seq > at(timeline, "forward done").seq for e in recomputed)
    assert sum(e.bytes for e in recomputed) == 2 * ACT
    plain, _ = run()
    assert not any(e.kind == "recomputed" for e in plain.events)


def test_gradients_and_accumulated():
    timeline, model = run()
    accumulated = [e for e in timeline.events if e.kind == "accumulated"]
    assert sum(e.bytes for e in accumulated) == sum(p.data.nbytes for p in model.params())
    assert sum(e.kind == "gradient" for e in timeline.events) == DEPTH  # each layer's output gradient, once


def test_hooks_removed_after_exit():
    model, (x, t) = mlp(), data()
    with mt.MemoryTimeline(model.params()) as timeline:
        loss = tp.mean_squared_error(model(Variable(x)), Variable(t))
    count = len(timeline.events)
    loss.backward()
    assert len(timeline.events) == count


def test_held_over_time():
    timeline, _ = run()
    t, held = mt.held_over_time(timeline.events)
    assert list(t) == list(range(len(timeline.events))) and held.max() == timeline.peak


def test_memory_viz_read_by_torch():
    timeline, _ = run(segments=2)
    snapshot = mt.memory_viz(timeline.events)
    trace = snapshot["device_traces"][0]
    assert sum(e["size"] for e in trace if e["action"] == "alloc") == \
        sum(e["size"] for e in trace if e["action"] == "free_completed")
    text = memory_viz_reader.trace(snapshot)  # torch's own reader of the trace
    assert "alloc" in text or "=" in text
