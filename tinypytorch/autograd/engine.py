"""The backward pass (step 33): count the gradients each node will receive, run it when all have arrived.

Steps 16 and 23 ran the functions in order of decreasing generation, so that a variable
had received all its gradient before its creator passed the gradient on. PyTorch's
engine does not order the graph at all. A first walk counts, for every node, how many
gradients will flow into it; the backward pass then runs a node the moment the last one
has arrived. Gradients wait in buffers that belong to the pass, not in `.grad`.
"""
import heapq

from tinypytorch.autograd.hooks import call_hooks
from tinypytorch.core import Variable, as_variable
from tinypytorch.cuda import get_array_module


def node_of(x):
    """Where the gradient of `x` goes: to the Function that created `x`, or, for a leaf, to `x` itself.

    PyTorch gives each leaf that requires grad a node of its own (AccumulateGrad), whose
    only work is to add the gradient into `.grad`. Here the leaf plays that part.
    """
    return x if x.creator is None else x.creator


def count_dependencies(roots):
    """For every node that `roots` depend on: how many gradients it will receive (step 33).

    A root receives one (its seed). A function's input that requires grad receives one
    from that function, and two from x * x, where it is both inputs. An input that does
    not require grad (a constant) receives none: nothing flows to it.
    """
    dependencies = {}
    todo = []

    def one_more(x):
        node = node_of(x)
        if node not in dependencies:  # met for the first time: walk on through its inputs
            dependencies[node] = 0
            if x.creator is not None:
                todo.append(x.creator)
        dependencies[node] += 1

    for root in roots:
        one_more(root)
    while todo:  # step 08: a loop, not recursion, so the graph may be of any depth
        for x in todo.pop().inputs:
            if x.requires_grad:
                one_more(x)
    return dependencies


def functions_leading_to(targets, roots):
    """The functions behind `roots` through which a gradient can reach a variable in `targets`.

    `autograd.grad` runs only these. A function leads to a target if one of its inputs is
    a target or is made by a function that leads to one, so each function is decided after
    the creators of its inputs: a depth-first walk with an explicit stack.
    """
    leads = {}
    stack = [root.creator for root in roots if root.creator is not None]
    while stack:
        f = stack[-1]
        if f in leads:  # decided already, through another path
            stack.pop()
            continue
        inputs = [x for x in f.inputs if x.requires_grad]
        undecided = [x.creator for x in inputs if x.creator is not None and x.creator not in leads]
        if undecided:
            stack.extend(undecided)  # come back to f once they are decided
            continue
        stack.pop()
        leads[f] = any(x in targets or leads.get(x.creator, False) for x in inputs)
    return {f for f, lead in leads.items() if lead}


def seed(y, gradient, op):
    """The gradient that starts a backward pass at `y`: `gradient`, or ones shaped like y (step 09)."""
    if gradient is None:
        return Variable(get_array_module(y.data).ones_like(y.data), requires_grad=False)
    gradient = as_variable(gradient, op)
    if gradient.shape != y.shape:
        raise ValueError(f"{op}: gradient of shape {gradient.shape} for a variable of shape {y.shape}")
    return gradient


def call_backward(f, gys):
    """`f.backward` on the gradients of f's outputs, checked: one gradient per input, shaped like it."""
    gxs = f.backward(*gys)
    if not isinstance(gxs, tuple):
        gxs = (gxs,)
    name = type(f).__name__
    if len(gxs) != len(f.inputs):
        raise RuntimeError(f"{name}.backward returned {len(gxs)} gradient(s) for {len(f.inputs)} input(s)")
    checked = []
    for i, (x, gx) in enumerate(zip(f.inputs, gxs)):
        if x.requires_grad:  # a constant's gradient is thrown away; it may be anything, even None
            gx = as_variable(gx, f"{name}.backward")
            if gx.shape != x.shape:
                raise ValueError(f"{name}.backward returned a gradient of shape {gx.shape} "
                                 f"for input {i} of shape {x.shape}")
        checked.append(gx)
    return checked


def execute(roots, seeds, retain_grad=False, inputs=None):
    """Backpropagate `seeds`, one gradient per root, through the graph behind `roots` (step 33).

    With `inputs=None` (`Variable.backward`) every leaf that requires grad adds its gradient
    into `.grad`; with `retain_grad=True` every other variable keeps its gradient too
    (step 18). With `inputs` (`autograd.grad`) only the functions leading to them run, no
    leaf's `.grad` changes, and the result is {input: gradient} for the inputs reached.
    Either way a variable's hooks run once its gradient is complete (step 34).
    Whether the pass records a graph of its own is the caller's choice (step 27).
    """
    dependencies = count_dependencies(roots)
    capture = inputs is not None
    targets = set(inputs) if capture else set()
    leading = functions_leading_to(targets, roots) if capture else None
    grads = {}  # the gradient each variable has received so far in this pass
    ready = []  # functions whose every gradient has arrived, as a heap: the newest runs first
    captured = {}

    def wanted(x):  # does this pass send a gradient to x?
        if not x.requires_grad:
            return False
        return not capture or x in targets or (x.creator is not None and x.creator in leading)

    def receive(x, gx):
        grads[x] = gx if x not in grads else grads[x] + gx  # step 14: contributions add up
        node = node_of(x)
        dependencies[node] -= 1
        if dependencies[node] == 0:  # that was the last one
            if x.creator is None:
                finish(x)  # a leaf: nothing more to run
            else:
                heapq.heappush(ready, (-node.sequence_nr, node))

    def finish(x):  # x's gradient is complete: hooks, then keep it or hand it back
        gx = call_hooks(x, grads.pop(x))  # step 34
        if x in targets:
            captured[x] = gx
        if x.retains_grad or (not capture and (x.creator is None or retain_grad)):
            x.grad = gx if x.grad is None else x.grad + gx  # step 14: .grad adds up over passes
        return gx

    for root, gy in zip(roots, seeds, strict=True):
        receive(root, gy)
    while ready:
        f = heapq.heappop(ready)[1]
        outputs = [ref() for ref in f.outputs]  # step 17: weak references
        # an output that received nothing (unused, or no longer alive) gets None
        gys = [finish(y) if y in grads else None for y in outputs]
        if capture and f not in leading:
            continue  # reached only to hand back the gradient of a target it created
        for x, gx in zip(f.inputs, call_backward(f, gys)):
            if wanted(x):
                receive(x, gx)
    return captured
