"""The backward pass (step 33): count the gradients each node will receive, run it when all have arrived.

Steps 16 and 23 ran the functions in order of decreasing generation, so that a variable
had received all its gradient before its creator passed the gradient on. PyTorch's
engine does not order the graph at all. A first walk counts, for every node, how many
gradients will flow into it; the backward pass then runs a node the moment the last one
has arrived. Gradients wait in buffers that belong to the pass, not in `.grad`.

From step 35 on the graph is made of edges, not of the variables: each function knows,
for each input, the node the input's gradient goes to (`Function.edges`). A node is a
Function, which receives one gradient per output, or a leaf Variable, which receives
one. So the buffers are kept per node, and the intermediate variables need not exist
any more: only the functions and what they saved.
"""
import functools
import heapq
import itertools
import threading

from tinypytorch import batching_state, cuda, dtypes, forward_ad_state
from tinypytorch.autograd import anomaly
from tinypytorch.core import (
    Clone, Function, Variable, array_of, as_array, as_variable, astype, gradient_edge, increment_version,
)
from tinypytorch.grad_mode import Config, is_inference_mode_enabled, set_backward_on_arrays, using_config
from tinypytorch.views import INFERENCE_INPLACE
from tinypytorch.cuda import get_array_module


class _RunningPasses(threading.local):
    """The backward passes running now in this thread, innermost last (a backward may run one inside it, step 42)."""

    def __init__(self):
        self.stack = []


_running = _RunningPasses()


def innermost_pass():
    """The innermost backward pass running now in this thread (a GraphTask), or None.

    The floors above reach it through `autograd.gradients.current_pass`, their one door (steps 42-46).
    """
    stack = _running.stack
    return stack[-1] if stack else None


def node_of(x):
    """The node that receives the gradient of `x` (step 33): its creator, or, for a leaf, `x` itself."""
    return gradient_edge(x)[0]


def count_dependencies(roots):
    """For every node that the variables `roots` depend on: how many gradients it will receive (step 33).

    A root's node receives one (its seed). A function sends one gradient along each edge to a
    node, so x * x sends two to x. An input that needs no gradient (a constant) has no edge:
    nothing flows to it.
    """
    dependencies = {}
    todo = []

    def one_more(node):
        if node not in dependencies:  # met for the first time: walk on through its edges
            dependencies[node] = 0
            if isinstance(node, Function):
                todo.append(node)
        dependencies[node] += 1

    for root in roots:
        one_more(node_of(root))
    while todo:  # step 08: a loop, not recursion, so the graph may be of any depth
        for node, _ in todo.pop().edges:
            if node is not None:
                one_more(node)
    return dependencies


def functions_leading_to(target_edges, roots):
    """The functions behind the variables `roots` through which a gradient can reach one of `target_edges`.

    `autograd.grad` runs only these. A function leads to a target if one of its edges is a
    target or goes to a function that leads to one, so each function is decided after the
    functions its edges go to: a depth-first walk with an explicit stack.
    """
    leads = {}
    stack = [root.creator for root in roots if root.creator is not None]
    while stack:
        f = stack[-1]
        if f in leads:  # decided already, through another path
            stack.pop()
            continue
        undecided = [node for node, _ in f.edges if isinstance(node, Function) and node not in leads]
        if undecided:
            stack.extend(undecided)  # come back to f once they are decided
            continue
        stack.pop()
        leads[f] = any(edge in target_edges or leads.get(edge[0], False) for edge in f.edges)
    return {f for f, lead in leads.items() if lead}


def seed(y, gradient, op):
    """The gradient that starts a backward pass at `y`: `gradient`, or 1 for a one-element y (step 09).

    Steps 09-22 seeded ones of any shape; PyTorch refuses to guess the gradient of a non-scalar,
    since ones is a choice (the gradient of y.sum()), and so does the package from step 23 on.
    """
    if gradient is None:
        if y.data.size != 1:
            raise RuntimeError(f"{op}: grad can be implicitly created only for scalar outputs")
        return Variable(get_array_module(y.data).ones_like(y.data), requires_grad=False)
    gradient = as_variable(gradient, op)
    if gradient.shape != y.shape:
        raise ValueError(f"{op}: gradient of shape {tuple(gradient.shape)} for a variable of shape {tuple(y.shape)}")
    return gradient


def gradient_variable(g):
    """A gradient as a Variable (None stays None): what hooks, `.grad` and formulas on Variables are given."""
    if g is None or isinstance(g, Variable):
        return g
    return Variable(as_array(g), requires_grad=False)


def call_backward(f, gys):
    """`f.backward` on the gradients of f's outputs, checked: one gradient per input, shaped like it.

    The gradients flow as bare arrays where they can: a formula that allows it (`formula_on_arrays`)
    runs on arrays when this pass records no graph of its own (create_graph=False), and makes no
    Variable at all; with create_graph, or for a formula written on Variables, they are Variables.
    A gradient of another floating dtype than its input is cast to the input's, as PyTorch's engine
    does: a float32 input gets a float32 gradient even where float64 met it (step 43).
    """
    # step 65: under a dual level the formulas get Variables, whose tangents go forward through them
    on_arrays = f.formula_on_arrays and not Config.enable_backprop and not forward_ad_state.open_dual_levels
    if batching_state.open_vmap_levels:  # step 69: Variables, which meet batched gradients by the batching rules
        on_arrays = False
    if on_arrays:  # speed: the formula on bare arrays (grad_mode.BackwardMode)
        previous = set_backward_on_arrays(True)
        try:
            gxs = f.backward(*[gy.data if isinstance(gy, Variable) else gy for gy in gys])
        finally:
            set_backward_on_arrays(previous)
    else:
        gxs = f.backward(*[gradient_variable(gy) for gy in gys])
    if not isinstance(gxs, tuple):
        gxs = (gxs,)
    name = type(f).__name__
    if len(gxs) != len(f.edges):
        raise RuntimeError(f"{name}.backward returned {len(gxs)} gradient(s) for {len(f.edges)} input(s)")
    return [checked_gradient(f, i, gx, on_arrays) for i, gx in enumerate(gxs)]


def checked_gradient(f, i, gx, on_arrays=False):
    """The gradient `gx` that f's backward gives its input i, shaped and typed like the input: an array if the
    formula ran on arrays, else a Variable."""
    node, nr = f.edges[i]
    # a constant's gradient is thrown away, so it may be anything; None means "no gradient" (as zero, PyTorch)
    if node is None or gx is None:
        return gx
    if on_arrays:
        if not isinstance(gx, cuda.array_types):  # a formula on arrays may still give a Variable (one it made
            gx = as_array(array_of(gx))  # as a constant), or a number: NumPy's 0-d arithmetic gives numbers
        data = gx
    else:
        if not isinstance(gx, Variable):  # (the test first: a call saved for the usual Variable)
            gx = as_variable(gx, f"{type(f).__name__}.backward")
        data = gx.data
        if batching_state.open_vmap_levels and isinstance(gx, batching_state.batched_type):  # step 69: a batched
            data = gx  # gradient has no array of its own; its logical shape and dtype are checked
    # (every gradient passes here: the arrays' shape and dtype, not the Variable's properties)
    shape, dtype = node.output_meta[nr] if isinstance(node, Function) else (node.data.shape, node.data.dtype)
    if data.shape != shape:
        raise ValueError(f"{type(f).__name__}.backward returned a gradient of shape {tuple(data.shape)} "
                         f"for input {i} of shape {shape}")
    if data.dtype != dtype:
        gx = data.astype(dtype) if on_arrays else astype(gx, dtype)
    return gx


def run_backward(roots, seeds, retain_graph, create_graph, retain_grad=False, inputs=None):
    """Backpropagate `seeds`, one gradient per root, through the graph behind `roots` (step 33).

    `Variable.backward` and `autograd.grad` both start a pass here. With `inputs=None` every leaf
    that requires grad adds its gradient into `.grad`; with `inputs` (autograd.grad) the result is
    {input: gradient} and no `.grad` changes. create_graph: the pass records a graph of its own,
    so that the gradients can be differentiated again (step 27). retain_graph: the functions keep
    their saved tensors (step 35).
    """
    task = GraphTask(roots, retain_graph, retain_grad, inputs)
    with using_config("enable_backprop", create_graph):
        return task.run(roots, seeds)


def owned_copy(g):
    """Gradient g with an array of its own, in g's place in its graph: `.grad` reads as the gradient's graph did.

    (PyTorch records a copy node there when create_graph; sharing g's creator spares the drawings of
    step 27 a node that computes nothing.)
    """
    if g.creator is None and g.requires_grad:
        return Clone()(g)
    copy = Variable(g.data.copy(), requires_grad=g.creator is not None)
    if g.creator is not None:
        copy.set_creator(g.creator, g.output_nr)
    if forward_ad_state.open_dual_levels:  # step 65: a gradient computed under a dual level keeps its tangent
        forward_ad_state.set_tangent(copy, forward_ad_state.tangent_of(g))
    return copy


def looked_only(result):  # step 53
    """A post-accumulate-grad hook only looks at `.grad` (or changes it in place): what it returns must be None,
    or PyTorch's error (step 53)."""
    if result is None:
        return
    if not isinstance(result, Variable):
        raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
    raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def accumulate_grad(x, gx):
    """Add gradient gx into leaf x's `.grad`, as PyTorch's AccumulateGrad does (step 14: .grad adds up over passes).

    `.grad` must own its array: the gradient arriving here may be shared (x + y hands both the same
    array), be the caller's own seed, or be a read-only broadcast view, so the first one is copied.
    Later ones are added in place, so `g = x.grad` sees the next pass's sum too; unless this pass
    records a graph (create_graph), whose sum must be a new, differentiable variable.
    """
    if x.grad is None:
        x.grad = owned_copy(gx)
    elif Config.enable_backprop:
        x.grad = x.grad + gx
    else:
        if x.grad.is_inference() and not is_inference_mode_enabled():  # a .grad made by a pass in inference mode
            raise RuntimeError(INFERENCE_INPLACE)
        x.grad.data += gx.data
        increment_version(x.grad)


def call_hooks(hooks, grad, shape):
    """Run `hooks` (a variable's {id: hook}, or None) on its complete gradient, in the order registered (step 34).

    A hook that returns something other than None replaces the gradient: later hooks see
    the new one, and so does everything after them. The replacement must have the
    gradient's shape, dtype and device, as PyTorch checks.
    """
    if not hooks:
        return grad
    for hook in list(hooks.values()):  # a copy: a hook may remove itself (or another)
        result = hook(grad)
        if result is not None:
            name = getattr(hook, "__name__", type(hook).__name__)
            result = as_variable(result, f"hook {name!r}")
            if result.shape != shape:
                raise RuntimeError(f"hook {name!r} has changed the size of value")
            if result.dtype != grad.dtype or result.device != grad.device:  # step 59
                raise RuntimeError(f"hook {name!r} has changed the type of value (was {dtypes.tensor_type(grad)} got "
                                   f"{dtypes.tensor_type(result)})")
            grad = result
    return grad



class GraphTask:
    """One backward pass (PyTorch's GraphTask): what it counts, where its gradients wait, what it hands back.

    A first walk counts how many gradients each node will receive (`dependencies`); a node
    runs once its count reaches zero, the newest function first (`ready`, a heap on the
    creation order). Gradients wait in `buffers`, which belong to the pass, not in `.grad`.
    A pass that captures (autograd.grad) runs only the functions leading to its inputs.

    The floors above that run a pass inside a running one (checkpointing, reversible blocks) reach
    the running pass through `autograd.gradients.current_pass()` and use only its `id`, `capture`,
    `send` and `gathering`.
    """

    _ids = itertools.count()
    __slots__ = ("id", "capture", "retain_graph", "retain_grad", "leaf_hooks", "dependencies", "targets", "leading",
                 "buffers", "ready", "captured", "sent", "gathers", "callbacks")

    def __init__(self, roots, retain_graph, retain_grad=False, inputs=None):
        self.id = next(self._ids)  # step 42: tells nested passes apart
        self.capture = inputs is not None
        self.retain_graph, self.retain_grad = retain_graph, retain_grad
        # step 46: a pass started inside one that gathers leaves the leaves' hooks to that one
        self.leaf_hooks = not (_running.stack and _running.stack[-1].gathers)
        self.gathers = False
        self.dependencies = count_dependencies(roots)
        self.targets = {gradient_edge(x): x for x in inputs} if self.capture else {}  # where each input's arrives
        self.leading = functions_leading_to(self.targets, roots) if self.capture else None
        self.buffers = {}  # node -> the gradients it has received so far, one per output
        self.ready = []  # functions whose every gradient has arrived
        self.captured = {}  # input -> its gradient (autograd.grad)
        self.sent = {}  # function -> the inputs whose gradients its backward sent early (step 46)
        self.callbacks = []  # run once the pass has finished (queue_callback: DDP waits for its all-reduces there)

    def run(self, roots, seeds):
        _running.stack.append(self)
        try:
            for root, gy in zip(roots, seeds, strict=True):
                self.receive(*gradient_edge(root), gy)
            ready, run_function = self.ready, self.run_function  # (read once: the loop runs every function)
            while ready:
                run_function(heapq.heappop(ready)[1])
            self.run_callbacks()
        finally:
            _running.stack.pop()
        return self.captured

    def queue_callback(self, callback):
        """Call `callback()` when this pass has run its last function and hook (PyTorch's final callbacks)."""
        self.callbacks.append(callback)

    def run_callbacks(self):
        """The queued callbacks, in order; one may queue another, which runs too. The pass is still the
        running one meanwhile, as in PyTorch."""
        while self.callbacks:
            self.callbacks.pop(0)()

    def run_function(self, f):
        """f has all its gradients: its outputs' gradients finished (their hooks: step 34), its backward, its inputs'
        gradients sent on."""
        finish_output = self.finish_output
        gys = [finish_output(f, nr, gy) for nr, gy in enumerate(self.buffers.pop(f))]
        if self.capture and f not in self.leading:
            return  # reached only to hand back the gradient of a target it created
        if gys[0] is None and not f.runs_without_gradients and all(gy is None for gy in gys):  # step 40: no
            self.pass_no_gradient(f)  # gradient arrived (gradcheck's check_undefined_grad asks for this case)
            return
        call = call_backward
        if anomaly.enabled():  # step 39: the backward runs under anomaly mode's checks
            call = functools.partial(anomaly.checked_backward, call_backward=call_backward)
        gxs = call(f, gys)
        if not self.retain_graph:
            f.release_saved()  # step 35: this pass was the last to need them
        early = self.sent.pop(f, ()) if self.sent else ()  # step 46: gradients already sent during backward
        capture, receive = self.capture, self.receive  # (read once: every edge of every function passes here)
        for i, (edge, gx) in enumerate(zip(f.edges, gxs)):
            if i in early:  # step 46: sent already
                continue
            if edge[0] is not None and (not capture or self.wanted(edge)):
                receive(*edge, gx)

    def pass_no_gradient(self, f):
        """No gradient arrived at any output of f (a backward returned None for them): none leaves it, and its
        backward, which may not expect None, does not run; as PyTorch's nodes return undefined gradients for
        undefined ones. (A custom Function's node runs all the same: it hands its backward zeros, step 49.)"""
        if not self.retain_graph:
            f.release_saved()
        for edge in f.edges:
            if self.wanted(edge):
                self.receive(*edge, None)

    def wanted(self, edge):
        """Does this pass send a gradient along `edge`?"""
        return edge[0] is not None and (not self.capture or edge in self.targets or edge[0] in self.leading)

    def receive(self, node, nr, g):
        """Gradient g (None: nothing to add, one dependency fewer all the same) arrives at output nr of node."""
        buffers = self.buffers
        buffer = buffers.get(node)
        if buffer is None:
            buffer = buffers[node] = [None] * (len(node.outputs) if isinstance(node, Function) else 1)
        if g is not None:
            buffer[nr] = g if buffer[nr] is None else buffer[nr] + g  # step 14: contributions add up
        dependencies = self.dependencies
        dependencies[node] -= 1
        if dependencies[node] == 0:  # that was the last one
            if isinstance(node, Function):
                heapq.heappush(self.ready, (-node.sequence_nr, node))
            else:
                self.finish_leaf(node, buffers.pop(node)[0])  # a leaf: nothing more to run

    def finish_leaf(self, x, gx):
        """x's gradient is complete: its hooks, then into `.grad`, or handed back."""
        if gx is None or not x.requires_grad:  # nothing arrived; or switched off after x was used (step 33)
            return
        gx = gradient_variable(gx)  # speed: the buffers hold arrays where formulas ran on arrays
        if self.leaf_hooks and x._backward_hooks:
            gx = call_hooks(x._backward_hooks, gx, x.data.shape)  # step 34: a hook may replace the gradient
        if (x, 0) in self.targets:
            self.captured[x] = gx
        # step 58: a view made in inference mode has no way to its base, nor a .grad of its own (PyTorch's)
        if x.view_record is not None and x.view_record.in_inference:
            return
        if not self.capture:
            accumulate_grad(x, gx)
            if x._post_accumulate_grad_hooks:
                for hook in list(x._post_accumulate_grad_hooks.values()):  # a copy: a hook may remove itself
                    looked_only(hook(x))

    def finish_output(self, f, nr, gy):
        """The gradient of f's output nr is complete: its hooks, kept or handed back; None if nothing arrived."""
        if gy is None:
            return None
        hooks = f.output_hooks and f.output_hooks.get(nr)
        if hooks:  # step 34; kept by f (step 35)
            gy = call_hooks(hooks, gradient_variable(gy), f.output_meta[nr][0])
        target = self.targets.get((f, nr))
        if target is not None:
            gy = self.captured[target] = gradient_variable(gy)
        y = f.outputs[nr]()  # step 17: a weak reference; the variable may be gone (step 35)
        # (y.creator is not f once y was changed in place: this gradient is then its old value's, step 36;
        # _retains_grad, the attribute behind the property: every output of every pass is asked)
        if y is not None and y.creator is f and (y._retains_grad or (self.retain_grad and not self.capture)):
            gy = gradient_variable(gy)
            y.grad = owned_copy(gy) if y.grad is None else y.grad + gy  # a copy: gy goes on to other nodes
        return gy

    def send(self, f, i, gx):
        """f's backward hands input i's gradient on before it returns (step 46: a reversible stack's parameters)."""
        self.sent.setdefault(f, set()).add(i)
        if self.wanted(f.edges[i]):
            self.receive(*f.edges[i], checked_gradient(f, i, gx))

    def gathering(self):
        """A block in which the passes started gather gradients for this pass (step 46).

        A reversible stack's backward runs a pass for each block; the gradients it finds go on to
        this pass through the stack's edges, where the leaves' hooks run once, on the complete
        gradient. So the passes started inside the block do not run the leaves' hooks.
        """
        return _Gathering(self)


class _Gathering:
    """The block `GraphTask.gathering` returns: `task.gathers` is True inside."""

    def __init__(self, task):
        self.task = task

    def __enter__(self):
        self.before, self.task.gathers = self.task.gathers, True

    def __exit__(self, *exc_info):
        self.task.gathers = self.before
