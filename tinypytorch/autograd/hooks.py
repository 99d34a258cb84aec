"""Hooks on a Variable's gradient (step 34): the handle that `Variable.register_hook` returns.

A hook is a function `hook(grad)` that the backward pass calls with a variable's
gradient once the gradient is complete, that is, once every function that used the
variable has contributed. It may look at the gradient (and return None) or return a
new gradient, which replaces it from then on. The engine runs them (engine.call_hooks).
"""
import itertools


class RemovableHandle:
    """What `register_hook` returns; `handle.remove()` unregisters the hook (PyTorch's RemovableHandle)."""

    _ids = itertools.count()

    def __init__(self, hooks):
        self.hooks = hooks  # the dict of the variable's hooks, not the variable: a handle keeps nothing alive
        self.id = next(self._ids)

    def remove(self):
        self.hooks.pop(self.id, None)  # removing twice does nothing, as in PyTorch
