"""How the memory benchmarks measure, the same way in both frameworks: what is saved for backward, what is held.

- Saved for backward: every tensor a forward pass saves goes through a pack hook that counts its
  bytes and keeps its memory as it is (tinypytorch: tests/memory.py's counting_saved, the tests' hook
  too; torch.autograd.graph.saved_tensors_hooks). A tensor saved twice counts twice.
- tinypytorch's memory, with `tracemalloc`: NumPy reports every array's data to it under a domain
  of its own, so the bytes of arrays held are exact (tests/memory.py's numpy_bytes); the peak counts
  every traced allocation.
- PyTorch's memory, from its profiler (`torch.profiler.profile(profile_memory=True)`): every
  allocation and free of its CPU allocator, in order; their running sum is the memory held.

Either way the pass runs with the garbage collector off (what the graph frees, it frees by reference
counting alone), and each parameter's gradient can be let go as soon as it is complete, as an
optimizer stepping inside backward would, so that the peak is what the activations take.
"""
import contextlib
import dataclasses
import json
import pathlib
import tempfile
import tracemalloc

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from from_tests import counting_saved, numpy_bytes
from timing import collector_off


# ----- saved for backward ------------------------------------------------------------------------

@dataclasses.dataclass
class Saved:
    bytes: int  # what the pack hook counted, summed over every saved tensor
    count: int  # how many tensors the pack hook saw
    activations: int  # bytes of the distinct memory blocks saved that are neither parameters nor inputs


def numpy_block(a):
    """(address, bytes) of the memory an array lives in: its base-most array's, so views match their base."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.__array_interface__["data"][0], a.nbytes


def torch_block(t):
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def _saved(packed, blocks, existing):
    """Saved from the bytes the hook counted (one entry a saved tensor), the memory blocks saved, and the blocks of
    the parameters and inputs."""
    return Saved(sum(packed), len(packed), sum(size for _, size in set(blocks) - existing))


def count_saved_tinypytorch(forward, model, inputs):
    """Run forward() (with a counting pack hook) and backward once: what tinypytorch saved.

    forward: () -> a loss of `model` (a Layer); inputs: the arrays it reads that existed before
    (the batch, the target), which are, with the parameters, no new memory.
    """
    with counting_saved() as (packed, arrays):
        loss = forward()
    blocks = [numpy_block(a) for a in arrays.values()]  # all saved but the parameters, existing memory anyway
    arrays.clear()  # before backward: held here, they would outlive it
    loss.backward()
    model.cleargrads()
    existing = {numpy_block(a) for a in [p.data for p in model.params()] + list(inputs)}
    return _saved(packed, blocks, existing)


def count_saved_torch(forward, module, inputs):
    """The same in PyTorch: forward() -> a loss of `module` (an nn.Module); inputs: NumPy arrays it reads."""
    packed, blocks = [], []

    def pack(t):
        packed.append(t.nelement() * t.element_size())
        blocks.append(torch_block(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    loss.backward()
    module.zero_grad(set_to_none=True)
    existing = {torch_block(t) for t in [*module.parameters(), *map(torch.from_numpy, inputs)]}
    return _saved(packed, blocks, existing)


# ----- memory held and peak ----------------------------------------------------------------------


@dataclasses.dataclass
class Memory:
    """Bytes, relative to the moment before the forward pass."""
    peak: int  # the most held at any moment of forward + backward
    after_forward: int
    output: int  # the loss's own memory
    after_backward: int  # the loss still referenced
    gradients: int  # the parameters' .grad
    after_drop: int  # the loss deleted
    overhead: int = 0  # tinypytorch: Python objects (not arrays) held after forward: the graph's nodes


@contextlib.contextmanager
def gradients_dropped(params):
    """Each of `params`' gradients let go as soon as it is complete (its .grad then holds no memory).

    PyTorch's way, the same in both frameworks: a post-accumulate-grad hook sets `.grad` to None,
    as an optimizer that steps inside backward would free it.
    """
    handles = [p.register_post_accumulate_grad_hook(drop_grad) for p in params]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _traced_pass(forward):
    """forward() and its loss's backward under tracemalloc: {what: bytes} above what was held before."""
    tracemalloc.start()
    try:
        base_all, base_arrays = tracemalloc.get_traced_memory()[0], numpy_bytes()
        tracemalloc.reset_peak()
        loss = forward()
        all_after_forward, peak_forward = tracemalloc.get_traced_memory()
        after_forward = numpy_bytes() - base_arrays
        output = loss.data.nbytes
        tracemalloc.reset_peak()  # the snapshot just taken is no part of the peak
        loss.backward()
        peak = max(peak_forward, tracemalloc.get_traced_memory()[1]) - base_all
        after_backward = numpy_bytes() - base_arrays
        del loss
        after_drop = numpy_bytes() - base_arrays
    finally:
        tracemalloc.stop()
    return {"peak": peak, "after_forward": after_forward, "output": output, "after_backward": after_backward,
            "after_drop": after_drop, "overhead": all_after_forward - base_all - after_forward}


def measure_tinypytorch(forward, model, drop_gradients=False, gradients_out=None):
    """tinypytorch's memory during one forward() (-> a loss of `model`, a Layer) + backward, with tracemalloc.

    drop_gradients: each gradient is let go as soon as it is complete, so that the peak is what
    the activations take (gradients then reports 0). gradients_out: a list, given the gradients'
    arrays (kept) before they are cleared.
    """
    dropping = gradients_dropped(model.params()) if drop_gradients else contextlib.nullcontext()
    with dropping, collector_off():
        measured = _traced_pass(forward)
    gradients = 0 if drop_gradients else sum(p.grad.data.nbytes for p in model.params() if p.grad is not None)
    if gradients_out is not None:
        gradients_out.extend(p.grad.data for p in model.params())
    model.cleargrads()
    return Memory(gradients=gradients, **measured)


MARKS = ("bench_memory: forward", "bench_memory: backward")


def drop_grad(p):
    """PyTorch's way to let a gradient go once complete: a post-accumulate-grad hook that sets .grad to None."""
    p.grad = None


@contextlib.contextmanager
def torch_gradients_dropped(module, drop=True):
    """With `drop`, each of `module`'s parameters' gradients let go once accumulated into .grad."""
    handles = [p.register_post_accumulate_grad_hook(drop_grad) for p in module.parameters()] if drop else []
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _profiled_pass(forward):
    """forward() and its loss's backward under PyTorch's profiler: (the trace's events, the loss's own bytes)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function(MARKS[0]):
            loss = forward()
        output = loss.untyped_storage().nbytes()
        with record_function(MARKS[1]):
            loss.backward()
        del loss
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text())["traceEvents"], output


def _held_from_events(events):
    """(peak, held after forward, held after backward, held at the end) from the profiler's CPU allocation events."""
    ends = {e["name"]: e["ts"] + e["dur"] for e in events if e.get("name") in MARKS and "dur" in e}
    allocations = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                         key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    held, peak, after = 0, 0, {}
    for e in allocations:
        for mark in MARKS:
            if mark not in after and e["ts"] > ends[mark]:
                after[mark] = held
        held += e["args"]["Bytes"]
        if e["ts"] <= ends[MARKS[1]]:
            peak = max(peak, held)
    return peak, after.get(MARKS[0], held), after.get(MARKS[1], held), held


def measure_torch(forward, twin, drop_gradients=False, gradients_out=None):
    """PyTorch's memory during one forward() (-> a loss of `twin`, an nn.Module) + backward, from its profiler.

    drop_gradients, gradients_out: as in measure_tinypytorch.
    """
    with torch_gradients_dropped(twin, drop_gradients), collector_off():
        events, output = _profiled_pass(forward)
    gradients = sum(p.grad.nelement() * p.grad.element_size() for p in twin.parameters() if p.grad is not None)
    if gradients_out is not None:
        gradients_out.extend(p.grad.numpy() for p in twin.parameters())
    twin.zero_grad(set_to_none=True)
    peak, after_forward, after_backward, after_drop = _held_from_events(events)
    return Memory(peak, after_forward, output, after_backward, gradients, after_drop)
