"""Hooks on a Variable's gradient (step 34): `Variable.register_hook` and what runs them.

A hook is a function `hook(grad)` that the backward pass calls with a variable's
gradient once the gradient is complete, that is, once every function that used the
variable has contributed. It may look at the gradient (and return None) or return a
new gradient, which replaces it from then on.
"""
import itertools

from tinypytorch.core import as_variable


class RemovableHandle:
    """What `register_hook` returns; `handle.remove()` unregisters the hook (PyTorch's RemovableHandle)."""

    _ids = itertools.count()

    def __init__(self, hooks):
        self.hooks = hooks  # the dict of the variable's hooks, not the variable: a handle keeps nothing alive
        self.id = next(self._ids)

    def remove(self):
        self.hooks.pop(self.id, None)  # removing twice does nothing, as in PyTorch


def call_hooks(hooks, grad, shape):
    """Run `hooks` (a variable's {id: hook}, or None) on its complete gradient, in the order registered (step 34).

    A hook that returns something other than None replaces the gradient: later hooks see
    the new one, and so does everything after them. The replacement must have the
    variable's shape.
    """
    if not hooks:
        return grad
    for hook in list(hooks.values()):  # a copy: a hook may remove itself (or another)
        result = hook(grad)
        if result is not None:
            name = getattr(hook, "__name__", type(hook).__name__)
            result = as_variable(result, f"hook {name!r}")
            if result.shape != shape:
                raise ValueError(f"hook {name!r} returned a gradient of shape {result.shape} "
                                 f"for a variable of shape {shape}")
            grad = result
    return grad
