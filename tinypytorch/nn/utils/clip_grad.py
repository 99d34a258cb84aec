"""Gradient clipping, as PyTorch's torch.nn.utils.clip_grad (stage 5).

One bad batch can give a gradient so large that a single step throws the weights far away.
`clip_grad_norm_` treats every gradient together as one long vector: if its norm exceeds
max_norm, every gradient is scaled by the same factor, so the step keeps its direction and
only its length is cut. `clip_grad_value_` clamps each element instead (the direction changes).

Everything runs under no_grad, on the gradients' arrays, and changes `.grad` in place (each
gradient's version moves on), as PyTorch's do. `foreach` is accepted for PyTorch's signature:
PyTorch's fused path computes the same numbers, and the package has one path.
"""
import types
import warnings

import numpy as np

from tinypytorch import inplace
from tinypytorch.core import Variable
from tinypytorch.cuda import as_numpy, get_array_module
from tinypytorch.grad_mode import no_grad

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


def _as_list(parameters):
    return [parameters] if isinstance(parameters, Variable) else list(parameters)


def _vector_norm(xp, a, p):
    """torch.linalg.vector_norm(a, p) of an array: the p-norm of its elements as one vector."""
    a = xp.abs(a)
    if p == np.inf:
        return a.max() if a.size else xp.asarray(0.0, dtype=a.dtype)
    if p == -np.inf:
        return a.min() if a.size else xp.asarray(np.inf, dtype=a.dtype)
    if p == 0:
        return (a != 0).sum().astype(a.dtype)
    if p == 1:
        return a.sum()
    if p == 2:
        return xp.sqrt((a * a).sum())
    return (a**p).sum() ** (1.0 / p)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The p-norm of the norms of `tensors` (a Variable or an iterable): their norm as if concatenated; 0-d."""
    tensors, norm_type = _as_list(tensors), float(norm_type)
    if not tensors:
        return Variable(np.array(0.0, dtype=np.float32), requires_grad=False)  # PyTorch's torch.tensor(0.0)
    xp = get_array_module(tensors[0].data)
    norms = xp.stack([xp.asarray(_vector_norm(get_array_module(t.data), t.data, norm_type)) for t in tensors])
    total = _vector_norm(xp, norms, norm_type)
    if error_if_nonfinite and not np.isfinite(as_numpy(total)):  # (a sync with the device, as in PyTorch)
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return Variable(xp.asarray(total), requires_grad=False)


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale every `.grad` in place by min(max_norm / (total_norm + 1e-6), 1), given the total norm already computed."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    total = total_norm.data if isinstance(total_norm, Variable) else total_norm
    # the 1e-6 keeps the division finite for a zero norm; multiplying by a coefficient clamped to 1, rather than
    # testing total > max_norm, needs no answer from the device (PyTorch's reason), and leaves small norms as they are
    clip_coef = get_array_module(total).minimum(float(max_norm) / (total + 1e-6), 1.0)
    with no_grad(), np.errstate(invalid="ignore"):  # 0 * inf is nan by request (error_if_nonfinite=False), silently
        for g in grads:
            inplace.write("clip_grad_norm_", g, g.data * get_array_module(g.data).asarray(clip_coef))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients of `parameters` so that their total `norm_type`-norm is at most max_norm.

    Gradients that are None are skipped. Returns the total norm before clipping (a 0-d Variable).
    """
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = _as_list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.", stacklevel=2)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every element of every `.grad` in place to [-clip_value, clip_value]; returns None, as PyTorch's."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                xp = get_array_module(p.grad.data)
                # minimum(maximum(.)) rather than clip: PyTorch's clamp for clip_value < 0 (every element -> max)
                inplace.write("clip_grad_value_", p.grad, xp.minimum(xp.maximum(p.grad.data, -clip_value), clip_value))
