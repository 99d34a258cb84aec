"""`autograd.grad` (step 33): gradients of outputs with respect to chosen inputs, returned, not stored.

Also `autograd.backward`, and `current_pass`: the one door into the engine for the floors above
that run a backward pass inside a running one (checkpointing, reversible blocks); and `queue_callback`,
a call at the end of the running pass (DistributedDataParallel waits there for its all-reduces).
"""
from collections.abc import Iterable

from tinypytorch import cuda
from tinypytorch.autograd import engine
from tinypytorch.core import Variable


def _variables(value, what):
    """A Variable or an iterable of Variables (a list, or a generator such as Layer.params()), as a tuple."""
    if isinstance(value, Variable):
        values = (value,)
    elif isinstance(value, Iterable) and not isinstance(value, (str, *cuda.array_types)):
        values = tuple(value)
    else:
        values = None
    if values is None or not all(isinstance(v, Variable) for v in values):
        raise TypeError(f"grad: {what} must be a Variable or a sequence of Variables, got {type(value).__name__}")
    return values


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=False):
    """The gradients of `outputs` with respect to `inputs`, as a tuple; no leaf's `.grad` changes (step 33).

    outputs, inputs: a Variable or a sequence of Variables. With several outputs the
        gradients of all of them are added up, as if their sum were differentiated.
    grad_outputs: d(loss)/d(output) for each output; None means ones (step 09).
    retain_graph: keep the saved tensors for another pass (step 35); defaults to create_graph.
    create_graph: record the computation of the gradients, so that they can be
        differentiated again (step 27).
    allow_unused: an input the outputs do not depend on gets None instead of an error.
    """
    outputs, inputs = _variables(outputs, "outputs"), _variables(inputs, "inputs")
    if not inputs:
        raise ValueError("grad: inputs is empty; there is nothing to differentiate with respect to")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    else:
        grad_outputs = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [grad_outputs]
        if len(grad_outputs) != len(outputs):
            raise ValueError(f"grad: {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for i, y in enumerate(outputs):
        if not y.requires_grad:
            raise RuntimeError(f"grad: element {i} of outputs does not require grad and does not have a grad_fn")
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            raise RuntimeError(f"grad: the differentiated Variable at index {i} does not require grad")
    seeds = [engine.seed(y, g, "grad") for y, g in zip(outputs, grad_outputs)]
    retain_graph = create_graph if retain_graph is None else retain_graph  # step 35: PyTorch's default
    captured = engine.run_backward(outputs, seeds, retain_graph, create_graph, inputs=inputs)
    for i, x in enumerate(inputs):
        if x not in captured and not allow_unused:
            raise RuntimeError(f"grad: the differentiated Variable at index {i} appears to not have been used "
                               "in the graph. Set allow_unused=True if this is the desired behavior.")
    return tuple(captured.get(x) for x in inputs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False):
    """Add the gradients of `tensors` into the leaves' `.grad` (PyTorch's `torch.autograd.backward`).

    One pass for all of them, as if their sum (each weighted by its grad_tensor) were differentiated;
    `y.backward(g)` is `backward([y], [g])`. A grad_tensor may be None for a one-element tensor.
    """
    tensors = _variables(tensors, "tensors")
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    elif not isinstance(grad_tensors, (list, tuple)):
        grad_tensors = [grad_tensors]
    if len(grad_tensors) != len(tensors):
        raise RuntimeError(f"backward: got {len(grad_tensors)} grad_tensors for {len(tensors)} tensors")
    for i, y in enumerate(tensors):
        if not y.requires_grad:
            raise RuntimeError(f"backward: element {i} of tensors does not require grad and does not have a grad_fn")
    seeds = [engine.seed(y, g, "backward") for y, g in zip(tensors, grad_tensors)]
    retain_graph = create_graph if retain_graph is None else retain_graph
    engine.run_backward(list(tensors), seeds, retain_graph, create_graph)


def current_pass():
    """The backward pass running now in this thread (the innermost, when one runs inside another), or None.

    The one door into the engine for the floors above that run a backward pass inside a running
    one: checkpointing (`tinypytorch.utils.checkpoint`, steps 42-43) and reversible blocks
    (`tinypytorch.reversible`, steps 46-47). They start their own passes with `backward` and
    `grad`, as PyTorch's checkpoint starts its with `torch.autograd.backward`; what those cannot
    tell them is the pass running around them. Of the pass returned they use:

        id                  tells passes apart: a non-reentrant checkpoint recomputes once per pass (step 43)
        capture             True in a pass of `grad`, which a reentrant checkpoint cannot serve (step 42)
        send(f, i, g)       f's backward hands input i's gradient g on now, before it returns (step 46)
        gathering()         a block in which the passes started leave the leaves' hooks to this one, since
                            their gradients go on to it through f's edges (step 46)

    (PyTorch answers the first two from its C++ engine: `torch._C._current_graph_task_id()`,
    `torch.autograd._is_checkpoint_valid()`.)
    """
    return engine.innermost_pass()


def queue_callback(callback):
    """Call `callback()` once the backward pass running now has finished: after its last function, its last
    hook, its last gradient added into `.grad` (PyTorch's `Variable._execution_engine.queue_callback`).

    What DistributedDataParallel needs: its hooks start a gradient's all-reduce as the gradient becomes
    ready, and at the end of the pass something must wait for them all and write the averages into `.grad`.
    """
    task = engine.innermost_pass()
    if task is None:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")  # PyTorch's words
    task.queue_callback(callback)
