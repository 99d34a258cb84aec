"""Selective activation checkpointing (step 63), as PyTorch's `create_selective_checkpoint_contexts`.

    policy = functools.partial(create_selective_checkpoint_contexts, [MatMul, LinearFunction])
    y = checkpoint(f, x, use_reentrant=False, context_fn=policy)

Plain checkpointing (step 43) keeps nothing of a region and runs all of it again in backward.
Here a policy decides per operation: `policy_fn(ctx, op, *args)` is asked after each operation
of the first run (op: the package's Function class, PyTorch's OpOverload such as aten.mm.default;
args: its inputs) and answers a CheckpointPolicy (or a bool: True is MUST_SAVE, False
PREFER_RECOMPUTE). The first run keeps the outputs of the operations to save, per operation and
in the order they ran; the recomputation takes them back, in the same order, instead of running
those operations, and runs the others again.

The two contexts share that storage: checkpoint enters the first around the first run and the
second around each recomputation. While one is open, selective checkpointing is the lowest entry of the mode
stack (tinypytorch.modes, step 68): every operation comes to `_dispatch` here; the innermost open context of
the thread handles it, and is set aside while it does (as a PyTorch dispatch mode is inside its
own handler), so the operation, or the policy's own operations, then run as usual.
"""
import enum
import functools
import threading
from collections import defaultdict

from tinypytorch import modes as mode_stack
from tinypytorch.autograd.graph import share_version_counter
from tinypytorch.core import Function


class CheckpointPolicy(enum.Enum):  # step 63
    """Whether the first run keeps an operation's output (SAVE) or backward computes it again (RECOMPUTE).

    MUST_* and PREFER_* act alike here, as in PyTorch without torch.compile (which may override a
    PREFER_*). The CPU_OFFLOAD members are PyTorch's too; outside torch.compile PyTorch recomputes
    such an operation, and so does this.
    """
    MUST_SAVE = 0
    PREFER_SAVE = 1
    MUST_RECOMPUTE = 2
    PREFER_RECOMPUTE = 3
    MUST_CPU_OFFLOAD = 4
    PREFER_CPU_OFFLOAD = 5


_SAVE = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)


class SelectiveCheckpointContext:  # step 63
    """What the policy function is told: whether this is a recomputation (as in PyTorch 2.13 the policy is
    asked only during the first run, so always False) and the operation's output."""

    def __init__(self, *, is_recompute, op_output=None):
        self.is_recompute = is_recompute
        self.op_output = op_output


BACKWARD_TWICE = ("Trying to backward an extra time. You are only allowed to backward once on any region "
                  "computed under selective activation checkpoint.")
MUTATED = "Tensor cached during selective activation checkpoint has been mutated"
MISMATCH = ("This can happen if the operations in the checkpointed region are nondeterministic or depend on "
            "global state that changed between forward and backward.")
_RECOMPUTE, _CONSUMED = object(), object()  # storage entries besides a kept output


def _as_policy(answer):
    """The policy function's answer as a CheckpointPolicy: a bool is PyTorch's older form of it."""
    if isinstance(answer, bool):
        return CheckpointPolicy.MUST_SAVE if answer else CheckpointPolicy.PREFER_RECOMPUTE
    if not isinstance(answer, CheckpointPolicy):  # PyTorch would recompute silently: refused here
        raise TypeError(f"selective checkpoint: policy_fn must return a CheckpointPolicy or a bool, "
                        f"got {type(answer).__name__}: {answer!r}")
    return answer


# ----- sending each operation of a region to the region's context -----------------------------------

_local = threading.local()  # .modes: the contexts this thread has open, innermost last


def _modes():
    if not hasattr(_local, "modes"):
        _local.modes = []
    return _local.modes


def _dispatch(op, inputs, below):  # step 68: selective checkpointing's entry of the mode stack
    """While a context is open: this thread's innermost context runs the operation."""
    modes = _modes()
    if not modes:  # another thread's region: run as usual
        return below(inputs)
    mode = modes.pop()  # set aside while it handles: what it runs then runs as usual
    try:
        return mode.handle(op, inputs, below)
    finally:
        modes.append(mode)


mode_stack.register("selective checkpoint", _dispatch)


def _run(op, inputs, below, forward=None):
    """`op(*inputs)` as any operation runs (the rest of the mode stack, `below`), with `forward` (if given)
    standing in for op.forward."""
    if forward is not None:
        op.forward = forward
    try:
        return below(inputs)
    finally:
        vars(op).pop("forward", None)


def _listed(outputs):
    """What `op(*inputs)` returned, as a list: one Variable, or a list of several."""
    return outputs if isinstance(outputs, list) else [outputs]


class _Mode:
    """Entering sends this thread's operations to `handle`; PyTorch's TorchDispatchMode, for Functions."""

    def __init__(self, storage):
        self.storage = storage  # op -> {index of the call: kept output, _RECOMPUTE or _CONSUMED}
        self.calls = defaultdict(int)  # op -> calls so far in this run

    def __enter__(self):
        _modes().append(self)
        mode_stack.opened("selective checkpoint")
        return self

    def __exit__(self, *exc):
        _modes().remove(self)
        mode_stack.closed("selective checkpoint")

    def next_index(self, op):
        index = self.calls[type(op)]
        self.calls[type(op)] += 1
        return index


# ----- the first run: keep what the policy says ------------------------------------------------------

class _Kept:
    """One kept call: its outputs, what its forward set on the Function, and the outputs' version counters."""

    def __init__(self, record, outputs):
        self.ys, self.single = record["ys"], record["single"]
        self.state, self.to_save = record["state"], record["to_save"]
        self.versions = [(y.version_counter, y._version) for y in outputs if y.version_counter is not None]

    def arrays(self):
        return list(self.ys) + [v for kind, v in self.to_save if kind == "kept"]


def _recording_forward(op, record, *xs):
    """op's own forward, noting what it returned and what it set on op (saved tensors included)."""
    before = dict(vars(op))
    ys = type(op).forward(op, *xs)
    record["single"] = type(ys) is not tuple
    record["ys"] = (ys,) if record["single"] else ys
    changed = {k: v for k, v in vars(op).items() if k not in before or before[k] is not v}
    record["to_save"] = [_where(v, xs, record["ys"]) for v in changed.pop("_to_save", ())]
    record["state"] = changed
    return ys


def _where(value, xs, ys):
    """Where a saved array comes from, so a replay can save the same: an input, an output, or kept with them."""
    for kind, arrays in (("input", xs), ("output", ys)):
        for i, a in enumerate(arrays):
            if value is a:
                return kind, i
    return ("none", None) if value is None else ("kept", value)


class _CachingMode(_Mode):  # step 63: PyTorch's _CachingTorchDispatchMode
    def __init__(self, policy_fn, storage):
        super().__init__(storage)
        self.policy_fn = policy_fn

    def handle(self, op, inputs, below):
        index, record = self.next_index(op), {}
        result = _run(op, inputs, below, functools.partial(_recording_forward, op, record))
        outputs = _listed(result)
        ctx = SelectiveCheckpointContext(is_recompute=False, op_output=outputs[0] if len(outputs) == 1 else outputs)
        policy = _as_policy(self.policy_fn(ctx, type(op), *inputs))
        self.storage[type(op)][index] = _Kept(record, outputs) if policy in _SAVE else _RECOMPUTE
        return result


# ----- a recomputation: take back what was kept, in the same order -----------------------------------

def _replaying_forward(op, kept, *xs):
    """Stands in for op's forward: sets what the first run's forward set, saves the same, returns the kept outputs."""
    vars(op).update(kept.state)
    where = {"input": xs, "output": kept.ys}
    op.save_for_backward(*[v if kind == "kept" else None if kind == "none" else where[kind][v]
                           for kind, v in kept.to_save])
    return kept.ys[0] if kept.single else kept.ys


class _CachedMode(_Mode):  # step 63: PyTorch's _CachedTorchDispatchMode
    def __init__(self, storage, allow_cache_entry_mutation):
        super().__init__(storage)
        self.allow_mutation = allow_cache_entry_mutation

    def __enter__(self):
        self.calls.clear()  # each recomputation counts from the first call again
        return super().__enter__()

    def handle(self, op, inputs, below):
        entry = self.take(op)
        if entry is _RECOMPUTE:
            return _run(op, inputs, below)
        result = _run(op, inputs, below, functools.partial(_replaying_forward, op, entry))
        for y, (counter, _) in zip(_listed(result), entry.versions):
            share_version_counter(y, counter)  # the same data as the first run's output, as PyTorch's detach
        return result

    def take(self, op):
        """The storage entry of this call; a kept one is checked and marked used, so a second backward fails."""
        name, index, entries = type(op).__name__, self.next_index(op), self.storage.get(type(op))
        if entries is None:
            raise RuntimeError(f"{name} encountered during backward but not found in storage. {MISMATCH}")
        entry = entries.get(index)
        if entry is None:
            raise RuntimeError(f"{name} invocation index {index} encountered during backward but not found in "
                               f"storage. {MISMATCH}")
        if entry is _CONSUMED:
            raise RuntimeError(BACKWARD_TWICE)
        if entry is not _RECOMPUTE:
            if not self.allow_mutation and any(c.value != v for c, v in entry.versions):
                raise RuntimeError(MUTATED)
            entries[index] = _CONSUMED  # let go of the kept arrays: used once
        return entry


# ----- the public function ---------------------------------------------------------------------------

def _policy_from_list(ops):
    """A list of operations means MUST_SAVE for them and PREFER_RECOMPUTE for every other one."""
    for op in ops:
        if not (isinstance(op, type) and issubclass(op, Function)):
            raise ValueError(f"Expected op in `op_list` to be a Function class (an operation such as "
                             f"tinypytorch.functions.MatMul) but got: {op!r} of type {type(op).__name__}.")
    ops = tuple(ops)

    def policy_fn(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    return policy_fn


def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False):  # step 63
    """The (first run, recomputation) pair of contexts for `checkpoint(..., context_fn=...)`, sharing one storage.

    policy_fn_or_list: `policy_fn(ctx, op, *args, **kwargs)` returning a CheckpointPolicy (or a bool),
        or a list of Function classes to save.
    allow_cache_entry_mutation: do not refuse a kept output changed in place before backward.
    """
    if isinstance(policy_fn_or_list, list):
        policy_fn = _policy_from_list(policy_fn_or_list)
    elif callable(policy_fn_or_list):
        policy_fn = policy_fn_or_list
    else:
        raise TypeError("policy_fn_or_list must be either a function or a list of ops.")
    storage = defaultdict(dict)
    return _CachingMode(policy_fn, storage), _CachedMode(storage, allow_cache_entry_mutation)


def kept_bytes(context, besides=()):
    """Bytes of the distinct arrays a context pair's storage keeps now (either context of the pair), not counting
    the Variables `besides` (a region's output, say, held anyway): for measuring."""
    kept = {id(a): a for entries in context.storage.values() for entry in entries.values()
            if isinstance(entry, _Kept) for a in entry.arrays()}
    for v in besides:
        kept.pop(id(v.data), None)
    return sum(a.nbytes for a in kept.values())


__all__ = ["CheckpointPolicy", "SelectiveCheckpointContext", "create_selective_checkpoint_contexts", "kept_bytes",
           "BACKWARD_TWICE", "MUTATED"]
