"""Layer normalization, as PyTorch's `torch.nn.functional.layer_norm`: one node of the graph, with its own backward.

Over the last dims (`normalized_shape`), each slice of x is centred and scaled to unit variance,

    x_hat = (x - mean) / sqrt(var + eps),    y = x_hat * weight + bias,

with the biased variance (divided by N, the number of elements normalized), as PyTorch computes it.
Composed of a dozen small operations, the graph would keep a dozen saved arrays; as one Function it
keeps what PyTorch's keeps (x, the mean and rstd of each slice, weight and bias) and writes the gradient
as one formula:

    dL/dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)),    g = dL/dy * weight,  rstd = 1/sqrt(var + eps)

With create_graph the formula recomputes x_hat from x with the package's own operations, so that its
gradient is differentiable again (the statistics depend on x too); otherwise it uses the saved ones.
float16 is computed in float32 and rounded once, forward and backward, as PyTorch's kernels do.
"""
import numbers

import numpy as np

from tinypytorch.core import Function, Variable, as_variable, astype, formulas_on_arrays, sum_tangents
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import sum, sum_to  # noqa: A004 (the package's sum)


def _in_float32(a):
    """A float16 array or Variable in float32 (PyTorch's arithmetic type for half), anything else as it is: ten
    float16 ulps separate layer_norm's gradient computed in float16 from the one computed in float32."""
    if a is None or a.dtype != np.float16:
        return a
    return astype(a, np.float32) if isinstance(a, Variable) else a.astype(np.float32)


def _normalized(x, axes, count, eps):
    """x_hat and rstd of x (an array or a Variable) over `axes`, each slice holding `count` elements."""
    centred = x - sum(x, axis=axes, keepdims=True) / count
    rstd = (sum(centred * centred, axis=axes, keepdims=True) / count + eps) ** -0.5
    return centred * rstd, rstd


class NativeLayerNorm(Function):  # stage 5: PyTorch's node is NativeLayerNormBackward0
    """Inputs (x, weight, bias), (x, weight), (x, bias) or (x,), as `has_weight` and `has_bias` say."""

    def __init__(self, normalized_shape, eps, has_weight, has_bias):
        self.normalized_shape, self.eps = normalized_shape, eps
        self.has_weight, self.has_bias = has_weight, has_bias

    def op_name(self):
        return "layer_norm"

    def forward(self, x, *affine):
        xp = get_array_module(x)
        saved, dtype = (x, *affine), x.dtype
        x, affine = _in_float32(x), [_in_float32(a) for a in affine]
        self.axes = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        self.count = _product(self.normalized_shape)
        mean = x.mean(axis=self.axes, keepdims=True)
        centred = x - mean
        rstd = 1.0 / xp.sqrt((centred * centred).mean(axis=self.axes, keepdims=True) + self.eps)
        self.save_for_backward(saved[0], mean, rstd, *saved[1:])  # PyTorch's node keeps these, whatever needs a grad
        y = centred * rstd
        if self.has_weight:
            y = y * affine[0]
        return (y + affine[-1] if self.has_bias else y).astype(dtype, copy=False)

    def backward(self, gy):  # the gradients in float32 for float16; the engine rounds each to its input's dtype
        gy = _in_float32(gy)
        x, mean, rstd, *affine = (_in_float32(a) for a in self.saved_tensors)
        weight = affine[0] if self.has_weight else None
        grads = [None] * len(self.needs_input_grad)
        if isinstance(x, Variable):  # create_graph: the statistics are functions of x, recomputed differentiably
            x_hat, rstd = _normalized(x, self.axes, self.count, self.eps)
        else:  # arrays (BackwardMode): the saved statistics serve
            x_hat = (x - mean) * rstd
        if self.needs_input_grad[0]:
            g = gy * weight if self.has_weight else gy
            mean_g = sum(g, axis=self.axes, keepdims=True) / self.count
            mean_g_x_hat = sum(g * x_hat, axis=self.axes, keepdims=True) / self.count
            grads[0] = rstd * (g - mean_g - x_hat * mean_g_x_hat)
        if self.has_weight and self.needs_input_grad[1]:
            grads[1] = sum_to(gy * x_hat, self.normalized_shape)  # weight was broadcast over the leading dims
        if self.has_bias and self.needs_input_grad[-1]:
            grads[-1] = sum_to(gy, self.normalized_shape)
        return tuple(grads)

    def jvp(self, t, *t_affine):  # step 64: d x_hat = rstd (dx - mean(dx) - x_hat mean(x_hat dx)); y = x_hat w + b
        x, affine = _in_float32(self.primals[0]), [_in_float32(a) for a in self.primals[1:]]
        t, t_affine = _in_float32(t), [_in_float32(a) for a in t_affine]
        mean = x.mean(axis=self.axes, keepdims=True)
        rstd = 1.0 / get_array_module(x).sqrt(((x - mean) ** 2).mean(axis=self.axes, keepdims=True) + self.eps)
        x_hat = (x - mean) * rstd
        dx_hat = None if t is None else rstd * (t - t.mean(axis=self.axes, keepdims=True)
                                                - x_hat * (x_hat * t).mean(axis=self.axes, keepdims=True))
        if self.has_weight:
            dx_hat = sum_tangents(None if dx_hat is None else dx_hat * affine[0],
                                  None if t_affine[0] is None else x_hat * t_affine[0])
        t = sum_tangents(dx_hat, t_affine[-1]) if self.has_bias else dx_hat
        return None if t is None else t.astype(self.primals[0].dtype, copy=False)


def _product(shape):
    n = 1
    for side in shape:
        n *= side
    return n


def _shape_text(shape):
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _check_layer_norm(x, normalized_shape, weight, bias):
    """Refuse, as PyTorch does, a normalized_shape that is not the trailing dims of x, or affine parameters of
    another shape; PyTorch's words, its RuntimeError a ValueError here (the package's type for wrong shapes)."""
    if not isinstance(normalized_shape, (tuple, list)) or not all(
            isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in normalized_shape):
        raise TypeError(f"layer_norm: normalized_shape must be a tuple or list of ints, got {normalized_shape!r}")
    shape = tuple(int(n) for n in normalized_shape)
    if not shape:
        raise ValueError("layer_norm: expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                         "least one element, but got normalized_shape = []")
    if x.ndim < len(shape) or x.shape[x.ndim - len(shape):] != shape:
        raise ValueError(f"layer_norm: given normalized_shape={_shape_text(shape)}, expected input with shape "
                         f"[*, {_shape_text(shape)[1:-1]}], but got input of size{_shape_text(x.shape)}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != shape:
            raise ValueError(f"layer_norm: expected {name} to be of same shape as normalized_shape, but got {name} "
                             f"of shape {_shape_text(p.shape)} and normalized_shape = {_shape_text(shape)}")
    return shape


def _check_dtypes(x, affine):
    """PyTorch's CPU rule: the parameters have the input's dtype, or the input is float16 and they are float32."""
    if any(p.dtype != x.dtype for p in affine):
        if any(p.dtype != np.float32 for p in affine):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
        if x.dtype != np.float16:
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002 (PyTorch's names)
    """PyTorch's `layer_norm`: normalize over the trailing dims `normalized_shape`, then scale and shift."""
    x = as_variable(input, "layer_norm")
    weight = None if weight is None else as_variable(weight, "layer_norm")
    bias = None if bias is None else as_variable(bias, "layer_norm")
    shape = _check_layer_norm(x, normalized_shape, weight, bias)
    affine = [p for p in (weight, bias) if p is not None]
    _check_dtypes(x, affine)
    return NativeLayerNorm(shape, float(eps), weight is not None, bias is not None)(x, *affine)


formulas_on_arrays(NativeLayerNorm)  # speed: its backward runs on arrays too (grad_mode.BackwardMode)
