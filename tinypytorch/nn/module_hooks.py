"""Hooks on a Module (step 53): PyTorch's forward pre-hooks, forward hooks and full backward hooks.

A module's hooks live in four dicts on the module, {handle id: entry}, made at the first
registration, and `Module.__call__` hands its call to `call` here, which runs them in PyTorch's
order:

    forward pre-hooks (may replace the input)  ->  inputs wrapped  ->  forward
    ->  forward hooks (may replace the output)  ->  outputs wrapped

The full backward hooks are built as PyTorch builds them (torch.utils.hooks.BackwardHook): the
module's inputs and then its outputs pass through an identity Function, `BackwardHookFunction`.
In backward the node around the outputs is reached first: it keeps grad_output and runs the
backward pre-hooks. The node around the inputs is reached once the module's own backward is done:
it runs the backward hooks with (grad_input, grad_output). When no input requires grad there is
no node around the inputs, so the hooks run at the outputs' node with grad_input all None.
"""
import warnings

from tinypytorch import dtypes
from tinypytorch.autograd.function import Function
from tinypytorch.autograd.hooks import RemovableHandle
from tinypytorch.core import Variable
from tinypytorch.grad_mode import is_grad_enabled

KINDS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def register(module, kind, entry, prepend=False):  # step 53
    """Keep `entry` in the module's dict of hooks of this kind (first, with prepend); a handle that removes it."""
    hooks = module.__dict__.setdefault(kind, {})  # the dict itself: Module.__setattr__ would ask what it is
    handle = RemovableHandle(hooks)
    hooks[handle.id] = entry
    if prepend:  # the same dict object, reordered: the handle holds it
        others = [(key, value) for key, value in hooks.items() if key != handle.id]
        hooks.clear()
        hooks[handle.id] = entry
        hooks.update(others)
    return handle


def _entries(module, kind):
    return list(module.__dict__.get(kind, {}).items())  # a copy: a hook may remove itself


def call(module, args, kwargs):  # step 53
    """module(*args, **kwargs) with its hooks, in PyTorch's order; without hooks, just forward."""
    own = module.__dict__
    if not (own.get("_forward_pre_hooks") or own.get("_forward_hooks") or own.get("_backward_pre_hooks")
            or own.get("_backward_hooks")):
        return module.forward(*args, **kwargs)  # the common case, kept cheap
    hooks = {kind: _entries(module, kind) for kind in KINDS}
    called, result = set(), None
    try:
        args, kwargs = _run_forward_pre_hooks(module, hooks["_forward_pre_hooks"], args, kwargs)
        backward_hook = None
        if hooks["_backward_pre_hooks"] or hooks["_backward_hooks"]:  # the lists as now: PyTorch's too
            backward_hook = BackwardHook(module, [h for _, h in hooks["_backward_hooks"]],
                                         [h for _, h in hooks["_backward_pre_hooks"]])
            args = backward_hook.setup_input_hook(args)
        result = module.forward(*args, **kwargs)
        result = _run_forward_hooks(module, hooks["_forward_hooks"], args, kwargs, result, called)
        if backward_hook is not None:
            result = backward_hook.setup_output_hook(result)
        return result
    except Exception:
        _run_always_called(module, hooks["_forward_hooks"], args, kwargs, result, called)
        raise


def _run_forward_pre_hooks(module, entries, args, kwargs):
    for _, (hook, with_kwargs) in entries:
        if with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple "
                                       f"of (new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)  # one input: wrapped, as PyTorch
    return args, kwargs


def _run_forward_hooks(module, entries, args, kwargs, result, called):
    for key, (hook, with_kwargs, always_call) in entries:
        if always_call:
            called.add(key)
        replaced = hook(module, args, kwargs, result) if with_kwargs else hook(module, args, result)
        if replaced is not None:
            result = replaced
    return result


def _run_always_called(module, entries, args, kwargs, result, called):
    """forward raised: the always_call forward hooks not yet run run now; their own errors become warnings."""
    for key, (hook, with_kwargs, always_call) in entries:
        if always_call and key not in called:
            try:
                hook(module, args, kwargs, result) if with_kwargs else hook(module, args, result)
            except Exception as e:
                warnings.warn("module forward hook with ``always_call=True`` raised an exception "
                              f"that was silenced as another error was raised in forward: {e}", stacklevel=3)


class BackwardHookFunction(Function):  # step 53
    """The identity, as one node for all the tensors it is given: where a module's backward hooks run.

    `side` (a BackwardHook's `on_input` or `on_output`, whichever side of the module this node stands
    on) is passed along by apply, no tensor; backward hands it the node's gradients. (PyTorch's
    BackwardHookFunction, private as in torch.nn.modules._functions: no operation of the package.)
    """

    @staticmethod
    def forward(ctx, side, *args):
        ctx.side = side
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.side(grads))


class BackwardHook:  # step 53
    """One call's backward hooks: wraps the inputs and outputs, keeps grad_output until grad_input arrives."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module, self.user_hooks, self.user_pre_hooks = module, user_hooks, user_pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = -1
        self.input_index = self.output_index = None  # positions of the tensors; None if none requires grad

    def _wrap(self, side, args):
        """args with every Variable passed through one BackwardHookFunction; and the Variables' positions."""
        index = [i for i, a in enumerate(args) if isinstance(a, Variable)]
        if not (any(args[i].requires_grad for i in index) and is_grad_enabled()):
            return args, None
        wrapped = BackwardHookFunction.apply(side, *[args[i] for i in index])
        args = list(args)
        for i, value in zip(index, wrapped):
            args[i] = value
        return tuple(args), index

    def setup_input_hook(self, args):
        args, self.input_index = self._wrap(self.on_input, args)
        self.n_inputs = len(args)
        return args

    def setup_output_hook(self, result):
        single = not isinstance(result, tuple)
        result, self.output_index = self._wrap(self.on_output, (result,) if single else result)
        self.n_outputs = len(result)
        return result[0] if single else result

    def on_output(self, grads):
        """The outputs' node: grad_output kept, the pre-hooks run; the hooks too if no input requires grad."""
        self.grad_outputs = _spread(self.output_index, grads, self.n_outputs)
        for hook in self.user_pre_hooks:
            replaced = hook(self.module, self.grad_outputs)
            if replaced is not None:
                if len(replaced) != len(self.grad_outputs):
                    raise RuntimeError("Backward pre hook returned an invalid number of grad_output, "
                                       f"got {len(replaced)}, but expected {len(self.grad_outputs)}")
                self.grad_outputs = _same_sizes(self.grad_outputs, replaced)
        grad_outputs = self.grad_outputs
        if self.input_index is None:
            self._hooks_without_input_grads()
        return [grad_outputs[i] for i in self.output_index]

    def _hooks_without_input_grads(self):
        warnings.warn("Full backward hook is firing when gradients are computed with respect to module outputs "
                      "since no inputs require gradients. See https://docs.pytorch.org/docs/main/generated/"
                      "torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more details.",
                      stacklevel=2)  # PyTorch's words
        grad_inputs = (None,) * self.n_inputs
        for hook in self.user_hooks:
            result = hook(self.module, grad_inputs, self.grad_outputs)
            if result is not None and not (isinstance(result, tuple) and all(g is None for g in result)):
                raise RuntimeError("Backward hook for Modules where no input requires "
                                   "gradient should always return None or None for all gradients.")
        self.grad_outputs = None

    def on_input(self, grads):
        """The inputs' node: the hooks run with (grad_input, grad_output); each may replace grad_input."""
        if self.grad_outputs is None:  # the gradient reached the inputs without passing the outputs
            return grads
        grad_inputs = _spread(self.input_index, grads, self.n_inputs)
        for hook in self.user_hooks:
            replaced = hook(self.module, grad_inputs, self.grad_outputs)
            if replaced is None:
                continue
            if len(replaced) != len(grad_inputs):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(replaced)}, but expected {len(grad_inputs)}")
            grad_inputs = _same_sizes(grad_inputs, replaced)
        self.grad_outputs = None
        return [grad_inputs[i] for i in self.input_index]


def _spread(index, values, size):
    """One entry per argument: the gradients at the tensors' positions, None elsewhere (PyTorch's _pack_with_none)."""
    spread = [None] * size
    for i, value in zip(index, values):
        spread[i] = value
    return tuple(spread)


def _same_sizes(old, new):
    """A hook's replacement gradients, refused (PyTorch's message) if one changes a gradient's shape or dtype."""
    for before, after in zip(old, new):
        if before is None or after is None:
            continue
        if tuple(after.shape) != tuple(before.shape):
            raise RuntimeError("hook 'hook' has changed the size of value")
        if after.dtype != before.dtype:
            raise RuntimeError(f"hook 'hook' has changed the type of value (was {dtypes.tensor_type(before)} got "
                               f"{dtypes.tensor_type(after)})")
    return tuple(new)
