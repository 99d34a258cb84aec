"""Custom functions written PyTorch's way (step 49): `torch.autograd.Function` with a `ctx`.

    class Quantize(Function):
        @staticmethod
        def forward(ctx, x, bits):
            ...
        @staticmethod
        def backward(ctx, grad):
            return grad, None

    y = Quantize.apply(x, 8)

Since step 11 an operation of this package has been a subclass of `tinypytorch.Function` whose
instance is the graph's node: `forward` works on arrays and `backward` on Variables. PyTorch
separates the two roles. The user's class only holds two static methods, and `apply` makes
the node (named after the class, `QuantizeBackward`), hands both methods a context object
(`ctx`) to carry what backward needs, and checks what backward returns. Underneath, the node
is an ordinary `tinypytorch.Function`, so saved tensors, hooks, version counters, anomaly mode
and higher-order gradients work as for the package's own operations.
"""
import functools

import numpy as np

from tinypytorch import cuda, forward_ad_state, views
from tinypytorch.autograd.graph import Node  # core's Function: the graph's node class, not this module's Function
from tinypytorch.core import Variable, sum_to
from tinypytorch.grad_mode import is_grad_enabled, no_grad


class FunctionCtx:
    """What `forward` and `backward` share (PyTorch's ctx): saved tensors, flags, and any attribute set on it."""

    def __init__(self, node, needs_input_grad):
        self._node = node
        self.needs_input_grad = needs_input_grad  # one flag per argument of forward, False for a non-Variable
        self.materialize_grads = True
        self.non_differentiable = ()

    def save_for_backward(self, *tensors):
        """Keep these Variables (inputs, outputs, or None) for backward, with the version checks of step 36."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Variable):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} "
                                f"is of type {type(t).__name__}")
        self._node.save_for_backward(*[None if t is None else t.data for t in tensors])

    @property
    def saved_tensors(self):
        return self._node.saved_tensors

    def mark_non_differentiable(self, *outputs):
        """These outputs will not require grad; backward still receives a gradient for each (zeros)."""
        self.non_differentiable = outputs

    def set_materialize_grads(self, value):
        """True (the default): an output that received no gradient passes zeros to backward; False: None."""
        self.materialize_grads = bool(value)


class Function:
    """Base class of a custom function: static `forward(ctx, *args)` and `backward(ctx, *grads)`, run by `apply`."""

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @staticmethod
    def jvp(ctx, *grad_inputs):  # step 64
        """Forward mode: the outputs' tangents from one tangent per argument of forward (None for a non-Variable)."""
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it with "
                                  "forward mode AD.")

    @classmethod
    def apply(cls, *args):
        """Run forward on `args` (Variables, and anything else passed through) and record one node for backward."""
        node = _node_class(cls)(args)
        variables = [a for a in args if isinstance(a, Variable)]
        outputs = node(*variables)
        single = isinstance(outputs, Variable)
        outputs = [outputs] if single else list(outputs)
        # an input handed back as it is (`return x`) makes an output that is a view of it (PyTorch's rule)
        views.track_returned_inputs(node, variables, [y.data for y in outputs], outputs)
        for i, y in enumerate(outputs):
            if any(y.data is marked.data for marked in node.ctx.non_differentiable):
                outputs[i] = y.detach()  # cut from the node (its gradient is zero), the same memory and versions
        return outputs[0] if single and not node.tuple_output else tuple(outputs)


@functools.cache
def _node_class(cls):
    """The node class of `cls`: named as PyTorch names it (Quantize -> QuantizeBackward)."""
    return type(f"{cls.__name__}Backward", (CustomNode,), {"user_class": cls, "__module__": cls.__module__})


class CustomNode(Node):
    """The graph node of one call of a custom Function: runs the user's forward and backward, checks the result."""

    user_class = None
    runs_without_gradients = True  # as PyTorch's, the user's backward runs even when no output got a gradient


    def __init__(self, args):
        self.args = args
        self.tuple_output = False

    def op_name(self):
        return self.user_class.__name__

    def forward(self, *arrays):
        """The user's forward, under no_grad, on the original arguments; its outputs' arrays for the node."""
        flags = iter(self.needs_input_grad)  # set by Function.__call__ for the Variable arguments
        self.ctx = FunctionCtx(self, tuple([next(flags) if isinstance(a, Variable) else False for a in self.args]))
        with no_grad(), forward_ad_state.paused():  # (the pause: step 64; the outputs' tangents come from jvp)
            outputs = self.user_class.forward(self.ctx, *self.args)
        self.tuple_output = isinstance(outputs, tuple)
        outputs = outputs if self.tuple_output else (outputs,)
        for i, y in enumerate(outputs):
            if not isinstance(y, Variable):
                raise TypeError(f"{self.op_name()}.forward must return Variables, but output {i} "
                                f"is of type {type(y).__name__}")
        return tuple([y.data for y in outputs])

    def backward(self, *grads):
        """The user's backward on one gradient per output; its result checked and mapped to the Variable inputs."""
        if self.ctx.materialize_grads:
            grads = [self.zeros(nr) if g is None else g for nr, g in enumerate(grads)]
        results = self.user_class.backward(self.ctx, *grads)
        results = results if isinstance(results, tuple) else (results,)
        name = type(self).__name__
        if len(results) > len(self.args) and all(g is None for g in results[len(self.args):]):
            results = results[:len(self.args)]  # extra Nones are allowed, as in PyTorch
        if len(results) != len(self.args):
            raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                               f"(expected {len(self.args)}, got {len(results)})")
        gradients = [self.checked(i, arg, g) for i, (arg, g) in enumerate(zip(self.args, results))]
        return tuple([g for arg, g in zip(self.args, gradients) if isinstance(arg, Variable)])  # one per node input

    def jvp(self, *tangents):  # step 64
        """The user's jvp on one tangent per argument of forward: a Variable's (zeros if it has none), None for
        the rest; one tangent per output back, as arrays."""
        tangents = iter(tangents)
        grad_inputs = [None if not isinstance(a, Variable) else self.tangent_variable(a, next(tangents))
                       for a in self.args]
        with no_grad(), forward_ad_state.paused():
            results = self.user_class.jvp(self.ctx, *grad_inputs)
        results = results if isinstance(results, tuple) else (results,)
        return tuple([r.data if isinstance(r, Variable) else r for r in results])

    @staticmethod
    def tangent_variable(arg, tangent):
        xp = cuda.get_array_module(arg.data)
        return Variable(xp.zeros_like(arg.data) if tangent is None else tangent, requires_grad=False)

    def checked(self, i, arg, g):
        """The gradient `g` returned for argument i, summed to its shape where it was broadcast (as PyTorch)."""
        name = type(self).__name__
        if not isinstance(arg, Variable):
            if g is not None:
                raise RuntimeError(f"function {name} returned a gradient different than None at position "
                                   f"{i + 1}, but the corresponding forward input was not a Variable")
            return None
        if g is None:
            return None
        if isinstance(g, Variable) and g.creator is None and g.requires_grad and not any(g is a for a in self.args):
            g = Variable(g.data, requires_grad=False)  # made in backward: a constant, as a new tensor in PyTorch
        if not isinstance(g, (Variable, *cuda.array_types)):
            raise TypeError(f"function {name} returned a gradient of type {type(g).__name__} at index {i}: "
                            "expected a Variable, an array or None")
        if tuple(g.shape) != arg.shape:
            if not _expandable(arg.shape, tuple(g.shape)):
                raise RuntimeError(f"Function {name} returned an invalid gradient at index {i} - got "
                                   f"{list(g.shape)} but expected shape compatible with {list(arg.shape)}")
            g = sum_to(g, arg.shape)
        return g

    def zeros(self, nr):
        """A gradient of zeros for output `nr`, which received none (PyTorch materializes it)."""
        shape, dtype = self.output_meta[nr]
        return Variable(cuda.get_array_module(*[a.data for a in self.args if isinstance(a, Variable)])
                        .zeros(shape, dtype), requires_grad=False)


def _expandable(shape, target):
    """Can an array of `shape` be broadcast to `target`?"""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


class DelayedError(Node):
    """Passes a gradient through unchanged; differentiating through it raises (PyTorch's DelayedError)."""
    def forward(self, x):
        return x

    def backward(self, gy):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


def once_differentiable(backward):
    """Decorate a custom backward that computes on arrays or cannot be differentiated again.

    It runs under no_grad. When a graph of the backward pass is being recorded (create_graph)
    its results are wrapped in a node that raises if a second backward reaches it, instead of
    a second derivative that would silently be zero.
    """
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            results = backward(ctx, *grads)
        if not is_grad_enabled() or not any(isinstance(g, Variable) and g.requires_grad for g in grads):
            return results
        single = not isinstance(results, tuple)
        results = (results,) if single else results
        # each result goes through a node whose backward raises; its input is a fresh leaf, so the node is recorded
        wrapped = tuple([g if g is None else DelayedError()(Variable(g.data if isinstance(g, Variable) else g))
                         for g in results])
        return wrapped[0] if single else wrapped

    return wrapper
