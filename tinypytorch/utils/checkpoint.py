"""Gradient checkpointing (steps 42-45), as PyTorch's `torch.utils.checkpoint`.

    y = checkpoint(f, x, use_reentrant=False)     # f's intermediates are not kept: recomputed in backward
    y = checkpoint_sequential([f1, f2, f3, f4], 2, x, use_reentrant=False)

A checkpointed function keeps only its inputs for the backward pass. When backward needs
what it would have saved, the function runs again, drawing the same random numbers as the
first time (the RNG state is saved and restored, in a fork_rng so that the stream outside
is untouched). Two ways to do that, as in PyTorch:

- reentrant (step 42): the whole function is one Function node; its forward runs under
  no_grad, and its backward recomputes with the graph recorded and runs a backward pass of
  its own, inside the outer one, through `autograd.backward` (PyTorch's calls
  `torch.autograd.backward`). It cannot serve autograd.grad.
- non-reentrant (step 43): the function runs normally, under saved-tensor hooks that keep
  a placeholder instead of each saved tensor; the first unpack in a backward pass
  recomputes the function (stopping as soon as every needed tensor is back), and checks
  that it saved what the first run saved.
"""
import contextlib
import functools
import numbers
import warnings
import weakref

from tinypytorch import autograd, cuda
from tinypytorch.amp.autocast_mode import keep_autocast
from tinypytorch.recomputation import replaying, rng_state
from tinypytorch.autograd.gradients import current_pass
from tinypytorch.autograd.graph import SavedTensor, saved_tensors_hooks
from tinypytorch.core import Function, Variable, as_variable
from tinypytorch.grad_mode import enable_grad, is_grad_enabled, no_grad
from tinypytorch.utils.selective_checkpoint import (  # noqa: F401  (step 63: PyTorch's names, here as there)
    CheckpointPolicy, SelectiveCheckpointContext, create_selective_checkpoint_contexts,
)


def noop_context_fn():  # step 63: checkpoint's default context_fn, PyTorch's
    """No context around the first run, none around the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


class CheckpointError(RuntimeError):
    """A recomputation did not save what the first run saved (PyTorch's CheckpointError)."""


def _split_arguments(args):
    """The tensors among `args` (Variables, arrays) and a way to put them back among the other arguments.

    As PyTorch's checkpoint: only tensors are saved (and become inputs of the graph); anything
    else (a number of rows, None, a flag) is passed to the function as it is.
    """
    positions = [i for i, a in enumerate(args) if isinstance(a, (Variable, *cuda.array_types))]

    def merge(tensors):
        merged = list(args)
        for i, t in zip(positions, tensors):
            merged[i] = t
        return merged

    return [as_variable(args[i], "checkpoint") for i in positions], merge


def _as_outputs(result, name):
    outputs = result if isinstance(result, tuple) else (result,)
    for y in outputs:
        if not isinstance(y, Variable):
            raise TypeError(f"checkpoint: {name} must return a Variable or a tuple of Variables, "
                            f"got {type(y).__name__}")
    return outputs


# ----- step 42: reentrant ---------------------------------------------------------------------------

class CheckpointFunction(Function):
    """The checkpointed function as one node: forward without a graph, backward by recomputing."""

    def __init__(self, function, preserve_rng_state, merge):
        self.function, self.preserve_rng_state, self.merge = function, preserve_rng_state, merge
        self.tuple_output = False

    def forward(self, *xs):
        self.rng_state = rng_state(self.preserve_rng_state)
        self.requires = self.needs_input_grad
        self.save_for_backward(*xs)  # the inputs: all the function keeps
        with no_grad():
            result = self.function(*self.merge([Variable(x, requires_grad=False) for x in xs]))
        outputs = _as_outputs(result, "the checkpointed function")
        self.tuple_output = isinstance(result, tuple)
        return tuple(y.data for y in outputs)

    def backward(self, *gys):
        current = current_pass()
        if current is not None and current.capture:
            raise RuntimeError("When use_reentrant=True, tinypytorch.utils.checkpoint is incompatible with "
                               "autograd.grad(). To resolve this error, you can either set use_reentrant=False, "
                               "or call .backward().")
        # fresh leaves holding the saved inputs: the recomputed graph starts at them
        inputs = [Variable(x.data, requires_grad=r) for x, r in zip(self.saved_tensors, self.requires)]
        with replaying(self.rng_state), enable_grad():
            outputs = _as_outputs(self.function(*self.merge(inputs)), "the checkpointed function")
        pairs = [(y, gy) for y, gy in zip(outputs, gys) if y.requires_grad and gy is not None]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        # a backward pass inside this one, started as PyTorch's checkpoint starts it: the function's
        # parameters get their .grad here, the fresh leaves theirs, which go on to the outer pass
        autograd.backward([y for y, _ in pairs], [gy for _, gy in pairs])
        return tuple(x.grad for x in inputs)


def _checkpoint_reentrant(function, args, preserve_rng_state):
    tensors, merge = _split_arguments(args)
    if not any(x.requires_grad for x in tensors) and is_grad_enabled():
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", UserWarning, stacklevel=3)
    f = CheckpointFunction(function, preserve_rng_state, merge)
    outputs = f(*tensors)  # a Variable, or a list of them for several outputs
    if f.tuple_output:
        return tuple(outputs) if isinstance(outputs, list) else (outputs,)
    return outputs


# ----- step 43: non-reentrant, on saved-tensor hooks --------------------------------------------------

class _StopRecomputation(Exception):
    """Raised by the recomputation's pack hook once every needed tensor is back (early stop)."""


class _Holder:
    """What the checkpoint's pack hook keeps instead of a tensor: its recomputed value, per backward pass."""

    def __init__(self):
        self.values = {}  # backward pass id -> the recomputed Variable (None once unpacked)


class _Frame:
    """One checkpointed call: how to recompute it, and what its first run saved (placeholders and metadata)."""

    def __init__(self, function, tensors, merge, rng_state, early_stop, determinism_check):
        self.function, self.merge, self.rng_state, self.early_stop = function, merge, rng_state, early_stop
        self.check = determinism_check == "default"
        # the inputs, saved as tensors so that changing one in place is caught (and nested checkpoints work)
        self.inputs = [SavedTensor(x, None, is_output=False) for x in tensors]
        self.holders = []  # weak references: a holder dies when its SavedTensor is freed after backward
        self.metadata = []
        self.recomputed = {}  # backward pass id -> the metadata of each tensor the recomputation saved

    def pack(self, x):
        holder = _Holder()
        self.holders.append(weakref.ref(holder))
        self.metadata.append(_metadata(x))
        return holder

    def unpack(self, holder):
        current = current_pass()
        pass_id = current.id if current is not None else object()  # outside backward: a pass of its own
        if pass_id not in self.recomputed:
            self.recompute(pass_id)
        value = holder.values.get(pass_id)
        if value is None:
            raise CheckpointError("tinypytorch.utils.checkpoint: Unpack is being triggered for a tensor that was "
                                  "already unpacked once. If you are calling saved_tensors in backward, make sure "
                                  "to do so only once.")
        holder.values[pass_id] = None  # recomputed tensors live until used, even with retain_graph
        return value

    def recompute(self, pass_id):
        self.recomputed[pass_id] = []
        args = self.merge([saved.unpack(None) for saved in self.inputs])
        try:
            with replaying(self.rng_state), enable_grad(), \
                    saved_tensors_hooks(lambda x: self.repack(x, pass_id), lambda x: x):
                self.function(*args)
        except _StopRecomputation:
            pass
        self.check_recomputation(self.recomputed[pass_id])

    def check_recomputation(self, recomputed):
        """PyTorch's checks, after the recomputation: as many tensors as the first run saved, then their metadata."""
        if len(recomputed) != len(self.holders):
            raise CheckpointError("tinypytorch.utils.checkpoint: A different number of tensors was saved during "
                                  "the original forward and recomputation.\n"
                                  f"Number of tensors saved during forward: {len(self.holders)}\n"
                                  f"Number of tensors saved during recomputation: {len(recomputed)}.")
        different = [(k, saved, again) for k, (saved, again) in enumerate(zip(self.metadata, recomputed))
                     if self.check and saved != again and self.holders[k]() is not None]
        if different:
            raise CheckpointError("tinypytorch.utils.checkpoint: Recomputed values for the following tensors have "
                                  "different metadata than during the forward pass.\n" +
                                  "".join(f"tensor at position {k}:\nsaved metadata: {saved}\n"
                                          f"recomputed metadata: {again}\n" for k, saved, again in different))

    def repack(self, x, pass_id):
        """The pack hook during recomputation: the k-th saved tensor fills the k-th placeholder."""
        recomputed = self.recomputed[pass_id]
        k = len(recomputed)
        if k >= len(self.holders):
            raise CheckpointError("tinypytorch.utils.checkpoint: trying to save more tensors during recomputation "
                                  "than during the original forward pass.")
        recomputed.append(_metadata(x))
        x = x.detach()  # the values only: the recomputed graph is not needed, and would make a cycle
        holder = self.holders[k]()
        if holder is not None:  # freed already (a partial backward): nothing to fill
            holder.values[pass_id] = x
        if self.early_stop and len(recomputed) == len(self.holders):
            raise _StopRecomputation  # every tensor backward may need is back: the rest need not run
        return x


def _metadata(x):
    """What must not change between the first run and the recomputation: shape, dtype, device."""
    return {"shape": tuple(x.shape), "dtype": x.dtype, "device": str(cuda.device_of(x.data))}  # dtype: torch.float64


def _checkpoint_hooks(function, args, kwargs, preserve_rng_state, early_stop, determinism_check):
    if kwargs:  # keyword arguments go to the function, the first time and when it runs again
        function = functools.partial(function, **kwargs)
    tensors, merge = _split_arguments(args)
    if not is_grad_enabled():  # nothing will be recorded: just run it
        return function(*merge(tensors))
    frame = _Frame(function, tensors, merge, rng_state(preserve_rng_state), early_stop, determinism_check)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        result = function(*merge(tensors))
    _as_outputs(result, "the checkpointed function")
    return result


def _in_contexts(function, context_fn):  # step 63
    """`function` inside context_fn's contexts: the first when it runs first (if grad mode records anything:
    PyTorch's enters none otherwise), the second each time it runs again, for backward."""
    forward_context, recompute_context = context_fn()
    runs = []

    @functools.wraps(function)
    def run(*args, **kwargs):
        if not runs and not is_grad_enabled():
            return function(*args, **kwargs)
        context = recompute_context if runs else forward_context
        runs.append(True)
        with context:
            return function(*args, **kwargs)
    return run


# ----- the public functions -------------------------------------------------------------------------

def checkpoint(function, *args, use_reentrant=True, context_fn=noop_context_fn, preserve_rng_state=True,
               early_stop=True, determinism_check="default", **kwargs):
    """`function(*args)`, keeping only `args` for backward and recomputing the rest when backward needs it.

    use_reentrant: True (step 42) or False (step 43, PyTorch's recommendation).
    preserve_rng_state: restore the random state for the recomputation, so dropout draws the
        same masks (and leave the outer random stream as it was).
    early_stop, determinism_check ("default" or "none"): for use_reentrant=False, as in PyTorch.
    kwargs: keyword arguments for `function`; only with use_reentrant=False, as in PyTorch.
    context_fn: for use_reentrant=False, a pair of contexts, around the first run and each recomputation
        (step 63: `create_selective_checkpoint_contexts`).
    """
    if not callable(function):
        raise TypeError(f"checkpoint: function must be callable, got {type(function).__name__}")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check should be one of ['default', 'none'], "
                         f"but got {determinism_check!r}")
    function = keep_autocast(function)  # step 61: the recomputation casts as the first run did
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if context_fn is not noop_context_fn:  # step 63
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        return _checkpoint_reentrant(function, args, preserve_rng_state)
    if context_fn is not noop_context_fn:  # step 63
        function = _in_contexts(function, context_fn)
    return _checkpoint_hooks(function, args, kwargs, preserve_rng_state, early_stop, determinism_check)


def checkpoint_sequential(functions, segments, input, use_reentrant=True, preserve_rng_state=True):  # noqa: A002
    """Run `functions` one after another on `input`, in `segments` chunks, all but the last checkpointed.

    As PyTorch's: each chunk has len(functions) // segments functions, and the last chunk (with
    the remainder) runs plainly, since its outputs are needed at once by backward anyway.
    """
    functions = list(functions)
    if not isinstance(segments, numbers.Integral) or isinstance(segments, bool):
        raise TypeError(f"checkpoint_sequential: segments must be an int, got {segments!r}")
    if not 1 <= segments <= len(functions):
        raise ValueError(f"checkpoint_sequential: segments must be between 1 and the number of functions "
                         f"({len(functions)}), got {segments}")

    def run(start, end):
        def chunk(x):
            for f in functions[start:end]:
                x = f(x)
            return x
        return chunk

    size = len(functions) // segments
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,  # noqa: A001
                           preserve_rng_state=preserve_rng_state)
    return run(end, len(functions))(input)
