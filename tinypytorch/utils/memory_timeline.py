"""Memory over time (step 67): what one training step holds, event by event, seen through public hooks only.

    MemoryTimeline   a context: inside it every tensor saved for backward (or saved again by a recomputation),
                     unpacked, every gradient met or accumulated and every array of theirs freed is an event
    held_over_time   the events as (time, bytes held) for a plot
    memory_viz       the events as the dict PyTorch's memory visualiser reads (its trace part only; see there)

What it sees: a saved_tensors_hooks pair (saved, recomputed when `recomputation.is_recomputing()`,
unpacked), a hook on each saved activation (its gradient) and on each parameter (accumulated), and a
weakref finalizer on every array it met (freed). An array counts once, by the block of memory it views;
a leaf (a parameter, the batch, the target) is memory that existed before the step and counts 0.
What it does not see: arrays no hook meets (a Function's temporaries, the loss): `trace=True` records
NumPy's own count from tracemalloc beside each event, to compare.
"""
import dataclasses
import tracemalloc
import weakref

import numpy as np

from tinypytorch import recomputation
from tinypytorch.autograd.graph import saved_tensors_hooks


@dataclasses.dataclass(frozen=True)
class Event:  # step 67
    seq: int  # its place in the step: 0, 1, 2, ...
    kind: str  # saved, recomputed, unpacked, gradient, accumulated, freed, or a mark the caller made
    name: str  # the shape and dtype of the array, or the mark's label
    bytes: int  # what it adds to the bytes held (negative: freed; 0: memory already held, or a leaf's)
    held: int  # bytes held after it
    block: int = 0  # the memory block it is about, numbered 1, 2, ... as they are met (0: none)
    traced: int = None  # with trace=True: NumPy's bytes held (tracemalloc) at that moment, above the start


def numpy_traced():
    """Bytes of NumPy array data that tracemalloc traces now (NumPy reports to a tracemalloc domain of its own)."""
    snapshot = tracemalloc.take_snapshot()
    return sum(t.size for t in snapshot.traces if t.domain == np.lib.tracemalloc_domain)


def _block(array):
    """The array that owns the memory `array` views (its base-most ndarray): what a free returns."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


class MemoryTimeline:  # step 67
    """Record one training step's memory: `with MemoryTimeline(model.params()) as timeline: ...`.

    params: the parameters, whose accumulated gradients are events too. trace: measure NumPy's bytes
    with tracemalloc at every event (slow; for checks). `timeline.mark(label)` adds an event of your own.
    """

    def __init__(self, params=(), trace=False):
        self.params, self.trace = list(params), trace
        self.events, self.held, self.peak = [], 0, 0
        self._blocks, self._count = {}, 0  # id(block) -> (its number, its finalizer) while alive: counted once
        self._hooked = weakref.WeakValueDictionary()  # id(variable) -> variable whose gradient is watched
        self._handles = []

    def record(self, kind, name, nbytes=0, block=0):
        self.held += nbytes
        self.peak = max(self.peak, self.held)
        traced = numpy_traced() - self._base if self.trace else None
        self.events.append(Event(len(self.events), kind, name, nbytes, self.held, block, traced))

    def mark(self, label):
        """An event of your own (0 bytes): where forward ends, say."""
        self.record("mark", label)

    def _meet(self, kind, array, new=True):
        """An event for `array`; its bytes count if its block is new (and `new`), and its free is watched."""
        block = _block(array)
        counted = new and id(block) not in self._blocks
        if counted:
            self._count += 1
            self._blocks[id(block)] = (self._count, weakref.finalize(
                block, self._freed, id(block), block.nbytes, _name(array)))
        number = self._blocks[id(block)][0] if id(block) in self._blocks else 0
        self.record(kind, _name(array), block.nbytes if counted else 0, number)

    def _freed(self, key, nbytes, name):
        number, _ = self._blocks.pop(key)
        self.record("freed", name, -nbytes, number)

    def _pack(self, v):
        kind = "recomputed" if recomputation.is_recomputing() else "saved"
        self._meet(kind, v.data, new=v.creator is not None)
        if v.requires_grad and v.creator is not None and self._hooked.get(id(v)) is not v:
            self._hooked[id(v)] = v  # its gradient: met once, however often it is saved
            self._handles.append(v.register_hook(lambda g: self._meet("gradient", g.data)))
        return v.data

    def _unpack(self, data):
        if self._active:  # a graph saved inside may be run backward after the block: nothing is recorded then
            self.record("unpacked", _name(data))
        return data

    def __enter__(self):
        self._started = self.trace and not tracemalloc.is_tracing()
        if self._started:
            tracemalloc.start()  # traced from here: arrays made before are not part of the count
        self._base = numpy_traced() if self.trace else 0
        for p in self.params:
            self._handles.append(p.register_post_accumulate_grad_hook(lambda p: self._meet("accumulated", p.grad.data)))
        self._hooks, self._active = saved_tensors_hooks(self._pack, self._unpack), True
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._active = False
        for handle in self._handles:
            handle.remove()
        for _, finalizer in list(self._blocks.values()):
            finalizer.detach()  # what outlives the step is no longer followed
        if self._started:
            tracemalloc.stop()
        return False


def _name(array):
    return f"{'x'.join(map(str, array.shape)) or 'scalar'} {array.dtype}"


def held_over_time(events):  # step 67
    """(times, bytes held): the sequence numbers and the bytes held after each event, a step line to plot."""
    return np.array([e.seq for e in events]), np.array([e.held for e in events])


def memory_viz(events):  # step 67
    """The events as the snapshot dict PyTorch's memory visualiser reads (torch.cuda.memory._snapshot()'s form).

    Only its trace is filled: "device_traces" for one device, an "alloc" for each event that added bytes
    and a "free_completed" for each that freed them, "time_us" the event's number, "addr" the block's
    number (not an address). "segments" stays empty: a CUDA caching allocator's
    reserved segments and blocks have no counterpart in NumPy's malloc; the visualiser's timeline of
    active memory reads the trace alone. Save it with pickle (the visualiser's file) or json.
    """
    actions = {1: "alloc", -1: "free_completed"}
    trace = [_viz_entry(actions[np.sign(e.bytes)], e) for e in events if e.bytes != 0]
    return {"segments": [], "device_traces": [trace]}


def _viz_entry(action, event):
    frame = {"name": f"{event.kind} {event.name}", "filename": "tinypytorch", "line": event.seq}
    return {"action": action, "addr": event.block, "size": abs(event.bytes), "stream": 0, "time_us": event.seq,
            "frames": [frame]}
