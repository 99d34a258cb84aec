"""Differentiable functions that are not Python operators.

Each is a `Function` subclass plus a lower-case function that users call.
`forward` works on arrays: `xp` is the array module of the data (NumPy or
CuPy), so the same code runs on the CPU and the GPU. `backward` works on
Variables (step 27), so that a gradient can itself be differentiated.
"""
import builtins
import numbers

import numpy as np

from tinypytorch import cuda, random
from tinypytorch.core import Function, Variable, array_of, as_variable, formulas_on_arrays
from tinypytorch.cuda import get_array_module


# ----- element-wise functions ------------------------------------------------------------

class Square(Function):  # step 02 (backward: step 06)
    def forward(self, x):
        self.save_for_backward(x)  # step 35: d(x^2)/dx = 2x needs x
        return x ** 2

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 2 * x * gy


class Exp(Function):  # step 03 (backward: step 06)
    def forward(self, x):
        xp = get_array_module(x)
        y = xp.exp(x)
        self.save_for_backward(y)  # step 35: d exp(x)/dx = exp(x), the output itself (step 27)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy * y


class Sin(Function):  # step 26
    def forward(self, x):
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d sin(x)/dx = cos(x) needs x
        return xp.sin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * cos(x)


class Cos(Function):  # step 26
    def forward(self, x):
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d cos(x)/dx = -sin(x) needs x
        return xp.cos(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * -sin(x)


class Tanh(Function):  # step 27
    def forward(self, x):
        xp = get_array_module(x)
        y = xp.tanh(x)
        self.save_for_backward(y)  # step 35: d tanh(x)/dx = 1 - tanh(x)^2 needs only the output
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy * (1 - y * y)


class Log(Function):  # step 39
    def forward(self, x):
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d log(x)/dx = 1/x needs x
        return xp.log(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy / x


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def sin(x):
    return Sin()(x)


def cos(x):
    return Cos()(x)


def tanh(x):
    return Tanh()(x)


def log(x):
    """The natural logarithm, element-wise (nan below 0, -inf at 0, as in NumPy and PyTorch)."""
    return Log()(x)


class Cast(Function):  # step 43: a change of dtype; its gradient goes back to the input's dtype
    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def forward(self, x):
        self.x_dtype = x.dtype
        return x.astype(self.dtype)

    def backward(self, gy):
        return astype(gy, self.x_dtype)


def astype(x, dtype):
    """`x` as `dtype` (NumPy's astype, PyTorch's x.to(dtype)); differentiable, and x itself if nothing changes."""
    x = as_variable(x, "astype")
    if x.dtype == np.dtype(dtype):
        return x
    return Cast(dtype)(x)


class ToDevice(Function):  # step 48: a move between devices; its gradient goes back to the input's device
    def __init__(self, where):
        self.where = where

    def forward(self, x):
        self.source = cuda.device_of(x)
        return cuda.to_device(x, self.where)

    def backward(self, gy):
        return to(gy, self.source)


def to(x, device=None, dtype=None):
    """`x` on `device` ("cpu", "cuda", "cuda:0") and/or as `dtype`, differentiably; x itself if nothing changes."""
    x = as_variable(x, "to")
    if device is not None and not cuda.is_on(x.data, device):
        x = ToDevice(cuda.device(device))(x)
    return x if dtype is None else astype(x, dtype)


# ----- shapes: reshape, permute, sum, broadcasting (steps 29-30) -------------------------

def _as_shape(op, shape):
    """`shape` (an int or a sequence of ints) as a tuple of Python ints."""
    if isinstance(shape, numbers.Integral):
        shape = (shape,)  # step 29: reshape(x, 6) means (6,), as in NumPy
    shape = tuple(shape)
    if not all(isinstance(n, numbers.Integral) for n in shape):
        raise TypeError(f"{op}: a shape is a tuple of ints, got {shape!r}")
    return tuple(int(n) for n in shape)


class Reshape(Function):  # step 29
    is_view = True  # step 37: NumPy returns a view when it can

    def __init__(self, shape):
        self.shape = _as_shape("reshape", shape)

    def view_fn(self):
        shape = self.shape
        return lambda t: reshape(t, shape)

    def forward(self, x):
        self.x_shape = x.shape
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape {x.shape} of size {x.size} into {self.shape}") from None

    def backward(self, gy):
        return reshape(gy, self.x_shape)


def reshape(x, shape):
    """`x` with its elements rearranged into `shape` (one entry may be -1: inferred), in row-major order."""
    x = as_variable(x, "reshape")
    if _as_shape("reshape", shape) == x.shape:
        return x  # nothing to do, and nothing to record
    return Reshape(shape)(x)


def _dim(op, dim, ndim):
    """`dim` (negative: counted from the end) as an index in range(ndim), checked as PyTorch checks it."""
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"{op}: a dim must be an int, got {dim!r}")
    n = builtins.max(ndim, 1)  # PyTorch lets a 0-d tensor answer to dim 0 and -1 (builtins: this module has its own max)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dim {dim} is out of range for a variable with {ndim} dimension(s) "
                         f"(expected to be in range of [{-n}, {n - 1}])")
    return int(dim) % n


def _permutation(op, dims, shape):
    """`dims` as a tuple of non-negative ints that permutes range(len(shape)), or an error naming what is wrong."""
    dims, ndim = ((dims,) if isinstance(dims, numbers.Integral) else tuple(dims)), len(shape)
    problem = f"{op}: dims {dims} are not a permutation of the dimensions of shape {shape}"
    if len(dims) != ndim:
        raise ValueError(f"{problem}: need {ndim} dims, got {len(dims)}")
    perm = tuple(_dim(op, d, ndim) for d in dims)
    for i, d in enumerate(perm):
        if d in perm[:i]:
            raise ValueError(f"{problem}: dim {dims[i]} is repeated")
    return perm


class Transpose(Function):  # step 29: the one node of permute, transpose and .T
    is_view = True  # step 37: the result shares the input's memory

    def __init__(self, perm):
        self.perm = perm  # dimension i of y is dimension perm[i] of x

    def view_fn(self):
        perm = self.perm
        return lambda t: _apply_permutation(t, perm)

    def forward(self, x):
        return x.transpose(self.perm)  # NumPy's ndarray.transpose(axes) is a permutation: PyTorch's permute

    def backward(self, gy):
        # Dimension i of x became dimension perm.index(i) of y; putting each back undoes the permutation.
        inverse = tuple(self.perm.index(i) for i in range(len(self.perm)))
        return permute(gy, inverse)


def _apply_permutation(x, perm):
    if perm == tuple(range(x.ndim)):
        return x  # nothing moves, and nothing is recorded (as reshape to the same shape)
    return Transpose(perm)(x)


def permute(x, dims):
    """PyTorch's `permute`: dimension i of the result is dimension dims[i] of `x` (negative dims count from the end)."""
    x = as_variable(x, "permute")
    return _apply_permutation(x, _permutation("permute", dims, x.shape))


def transpose(x, dim0, dim1):
    """PyTorch's `transpose`: `x` with dimensions dim0 and dim1 swapped (negative dims count from the end)."""
    x = as_variable(x, "transpose")
    dim0, dim1 = _dim("transpose", dim0, x.ndim), _dim("transpose", dim1, x.ndim)
    perm = list(range(x.ndim))
    if x.ndim:  # a 0-d variable has no dimension to swap: dim0 = dim1 = 0, and nothing moves
        perm[dim0], perm[dim1] = dim1, dim0
    return _apply_permutation(x, tuple(perm))


def _normalize_axis(op, axis, ndim):
    """`axis` (None, an int or a tuple of ints, possibly negative) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, numbers.Integral) else axis
    if not isinstance(axes, (tuple, list)) or not all(isinstance(a, numbers.Integral) for a in axes):
        raise TypeError(f"{op}: axis must be an int or a tuple of ints, got {axis!r}")
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"{op}: axis {a} is out of range for a variable with {ndim} dimension(s)")
    axes = tuple(sorted(int(a) % ndim for a in axes))
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return axes


class Sum(Function):  # step 30
    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.x_shape = x.shape
        self.axes = _normalize_axis("sum", self.axis, x.ndim)
        return x.sum(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        # Put back the summed axes as length-1 axes, then copy the gradient along them:
        # every element of x contributed to its sum with derivative 1.
        if not self.keepdims:
            kept = tuple(1 if i in self.axes else n for i, n in enumerate(self.x_shape))
            gy = reshape(gy, kept)
        return broadcast_to(gy, self.x_shape)


def sum(x, axis=None, keepdims=False):  # noqa: A001 (PyTorch's and NumPy's name)
    return Sum(axis, keepdims)(x)


class Mean(Function):  # step 50
    """The average over `axis`: the sum divided by the number of elements summed (PyTorch's mean)."""

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.x_shape = x.shape
        self.axes = _normalize_axis("mean", self.axis, x.ndim)
        self.count = int(np.prod([x.shape[a] for a in self.axes]))
        if self.count == 0:
            raise ValueError(f"mean: the mean over axis {self.axis!r} of an empty variable of shape {x.shape}")
        return x.mean(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        # each element contributed 1/count of itself to its mean
        return broadcast_to(_keep_axes(gy, self.axes, self.x_shape, self.keepdims), self.x_shape) / self.count


def mean(x, axis=None, keepdims=False):
    return Mean(axis, keepdims)(x)


def _kept_shape(axes, x_shape):
    """The shape of a reduction of x over `axes` with keepdims: those axes of length 1."""
    return tuple(1 if i in axes else n for i, n in enumerate(x_shape))


def _keep_axes(y, axes, x_shape, keepdims):
    """Variable `y`, reduced over `axes` of x, with those axes back as length 1, ready to broadcast to x."""
    return y if keepdims else reshape(y, _kept_shape(axes, x_shape))


class Max(Function):  # step 50
    """The largest element over `axis` (PyTorch's amax; torch.max(x, dim) also returns the indices).

    The derivative is 1 at the maximum and 0 elsewhere. Where several elements tie for the
    maximum, the gradient is shared equally between them, as PyTorch's amax shares it.
    """

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.x_shape = x.shape
        self.axes = _normalize_axis("max", self.axis, x.ndim)
        if any(x.shape[a] == 0 for a in self.axes) or (x.size == 0 and self.axis is None):
            raise ValueError(f"max: the maximum over axis {self.axis!r} of an empty variable of shape {x.shape}")
        y = x.max(axis=self.axes, keepdims=self.keepdims)
        self.save_for_backward(x, y)  # which elements are the maximum (PyTorch saves input and result too)
        return y

    def backward(self, gy):
        x, y = self.saved_tensors
        winners = (array_of(x) == array_of(y).reshape(_kept_shape(self.axes, self.x_shape))).astype(gy.dtype)
        share = winners / winners.sum(axis=self.axes, keepdims=True)  # a constant: 0 or 1/(number of ties)
        return broadcast_to(_keep_axes(gy, self.axes, self.x_shape, self.keepdims), self.x_shape) * share


def max(x, axis=None, keepdims=False):  # noqa: A001 (PyTorch's and NumPy's name)
    return Max(axis, keepdims)(x)


class LogSumExp(Function):  # step 50
    """log(sum(exp(x))) over `axis`, computed as m + log(sum(exp(x - m))) with m the maximum: no overflow."""

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        xp = get_array_module(x)
        self.x_shape = x.shape
        self.axes = _normalize_axis("logsumexp", self.axis, x.ndim)
        m = x.max(axis=self.axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)  # a row of -inf has logsumexp -inf, not NaN
        y = xp.log(xp.exp(x - m).sum(axis=self.axes, keepdims=True)) + m
        if not self.keepdims:
            y = y.reshape([n for i, n in enumerate(x.shape) if i not in self.axes])
        self.save_for_backward(x, y)  # PyTorch saves both too: the gradient is exp(x - y), the softmax
        return y

    def backward(self, gy):
        x, y = self.saved_tensors  # y as an output: the second derivative goes through it
        gy, y = [_keep_axes(v, self.axes, self.x_shape, self.keepdims) for v in (gy, y)]
        return broadcast_to(gy, self.x_shape) * exp(x - y)


def logsumexp(x, axis=None, keepdims=False):
    return LogSumExp(axis, keepdims)(x)


class BroadcastTo(Function):  # step 30
    def __init__(self, shape):
        self.shape = _as_shape("broadcast_to", shape)

    def forward(self, x):
        self.x_shape = x.shape
        xp = get_array_module(x)
        try:
            return xp.broadcast_to(x, self.shape)
        except ValueError:
            raise ValueError(f"broadcast_to: cannot broadcast shape {x.shape} to {self.shape}") from None

    def backward(self, gy):
        return sum_to(gy, self.x_shape)


def broadcast_to(x, shape):
    x = as_variable(x, "broadcast_to")
    if _as_shape("broadcast_to", shape) == x.shape:
        return x
    return BroadcastTo(shape)(x)


def sum_to_array(x, shape):
    """Sum array `x` down to `shape`, undoing a NumPy broadcast from `shape` to `x.shape` (step 30).

    Broadcasting prepends axes and stretches axes of length 1, so summing undoes it:
    first over the prepended leading axes, then over the stretched ones, keeping them.
    """
    lead = x.ndim - len(shape)
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    return x.sum(axis=tuple(range(lead)) + stretched, keepdims=True).reshape(shape)


class SumTo(Function):  # step 30
    def __init__(self, shape):
        self.shape = _as_shape("sum_to", shape)

    def forward(self, x):
        self.x_shape = x.shape
        try:  # shape arithmetic only, so NumPy serves for CuPy arrays too
            if np.broadcast_shapes(self.shape, x.shape) != x.shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"sum_to: shape {x.shape} is not a broadcast of {self.shape}") from None
        return sum_to_array(x, self.shape)

    def backward(self, gy):
        return broadcast_to(gy, self.x_shape)


def sum_to(x, shape):
    x = as_variable(x, "sum_to")
    if _as_shape("sum_to", shape) == x.shape:
        return x
    return SumTo(shape)(x)


# ----- matrices and indexing (step 31) ---------------------------------------------------

def _check_matmul(x_shape, w_shape):
    # step 31: fail here, naming the operation and both shapes, not inside NumPy
    if len(x_shape) < 2 or len(w_shape) < 2:
        raise ValueError(f"matmul: both operands need at least 2 dimensions, got shapes {x_shape} and {w_shape}")
    if x_shape[-1] != w_shape[-2]:
        raise ValueError(f"matmul: shapes {x_shape} and {w_shape} are not aligned: "
                         f"{x_shape[-1]} (dim {len(x_shape) - 1}) != {w_shape[-2]} (dim {len(w_shape) - 2})")
    try:  # a stack of matrices: the leading (batch) dimensions broadcast
        np.broadcast_shapes(x_shape[:-2], w_shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions {x_shape[:-2]} and {w_shape[:-2]} do not broadcast") from None


class MatMul(Function):  # step 31
    def forward(self, x, W):
        _check_matmul(x.shape, W.shape)
        self.shapes = (x.shape, W.shape)
        # step 35: dL/dx needs W and dL/dW needs x: keep each only if the other input needs a gradient
        self.save_for_backward(x if self.needs_input_grad[1] else None, W if self.needs_input_grad[0] else None)
        return x @ W

    def backward(self, gy):
        x, W = self.saved_tensors
        # dL/dx = dL/dy W^T and dL/dW = x^T dL/dy. transpose(., -2, -1) swaps the last two dims: the
        # transpose of every matrix in a stack; an operand broadcast over the batch sums its gradients (step 30)
        gx = sum_to(matmul(gy, transpose(W, -2, -1)), self.shapes[0]) if self.needs_input_grad[0] else None
        gW = sum_to(matmul(transpose(x, -2, -1), gy), self.shapes[1]) if self.needs_input_grad[1] else None
        return gx, gW


def matmul(x, W):
    """The matrix product `x @ W` of two matrices, or of two stacks of matrices (batch dimensions broadcast)."""
    return MatMul()(x, W)


class LinearFunction(Function):  # step 31: y = x W^T + b as one node of the graph
    def forward(self, x, W, b=None):
        if x.ndim != 2 or W.ndim != 2:
            raise ValueError(f"linear: input and weight must be 2-D, got shapes {x.shape} and {W.shape}")
        if x.shape[1] != W.shape[1]:
            raise ValueError(f"linear: input of shape {x.shape} does not fit weight of shape {W.shape}: "
                             f"in_features {x.shape[1]} != {W.shape[1]}")
        if b is not None and b.shape != (W.shape[0],):
            raise ValueError(f"linear: bias of shape {b.shape} does not match out_features {W.shape[0]}")
        self.bias_shape = None if b is None else b.shape
        # step 35: dL/dx needs W and dL/dW needs x: keep each only if the other input needs a gradient
        self.save_for_backward(x if self.needs_input_grad[1] else None, W if self.needs_input_grad[0] else None)
        y = x @ W.T
        return y if b is None else y + b

    def backward(self, gy):
        x, W = self.saved_tensors
        gx = matmul(gy, W) if self.needs_input_grad[0] else None  # y = x W^T, so dL/dx = dL/dy W
        gW = matmul(gy.T, x) if self.needs_input_grad[1] else None  # and dL/dW = (dL/dy)^T x
        if self.bias_shape is None:
            return gx, gW
        return gx, gW, sum_to(gy, self.bias_shape)  # b was broadcast over the rows


def linear(x, W, b=None):
    """PyTorch's `nn.functional.linear`: x W^T + b, with W of shape (out_features, in_features)."""
    return LinearFunction()(x, W) if b is None else LinearFunction()(x, W, b)


def _index_arrays(key, xp):
    """The arrays (and lists, as arrays) in an index: advanced indexing. PyTorch saves them for backward."""
    parts = key if isinstance(key, tuple) else (key,)
    return tuple(xp.asarray(k) for k in parts if isinstance(k, (list, *cuda.array_types)))


def _with_index_arrays(key, arrays):
    """`key` with its arrays and lists replaced, in order, by `arrays` (the inverse of _index_arrays)."""
    arrays = iter(arrays)
    parts = tuple(next(arrays) if isinstance(k, (list, *cuda.array_types)) else k
                  for k in (key if isinstance(key, tuple) else (key,)))
    return parts if isinstance(key, tuple) else parts[0]


class GetItem(Function):  # step 31
    is_view = True  # step 37: basic indexing (ints, slices, None) gives a view; advanced indexing a copy

    def __init__(self, key):
        self.key = key

    def view_fn(self):
        key = self.key
        return lambda t: get_item(t, key)

    def forward(self, x):
        self.x_shape = x.shape
        try:
            y = x[self.key]
        except IndexError as error:
            raise IndexError(f"getitem: {error} (key {self.key!r}, shape {x.shape})") from None
        if not isinstance(y, type(x)):  # x[1, 2] is a number: x[1, 2, ...] is the same element, as a 0-d view
            y = x[(self.key if isinstance(self.key, tuple) else (self.key,)) + (Ellipsis,)]
        self.save_for_backward(*_index_arrays(self.key, get_array_module(x)))  # step 35: as PyTorch does
        return y

    def backward(self, gy):
        arrays = [array_of(index) for index in self.saved_tensors]
        return GetItemGrad(_with_index_arrays(self.key, arrays), self.x_shape)(gy)


class GetItemGrad(Function):  # step 31: the gradient of x[key], itself differentiable
    def __init__(self, key, shape):
        self.key, self.shape = key, shape

    def forward(self, gy):
        xp = get_array_module(gy)
        gx = xp.zeros(self.shape, dtype=gy.dtype)
        # gx[key] += gy would add once per distinct position; add.at adds once per
        # occurrence, so x[[0, 0, 1]] sends two gradients to x[0]
        xp.add.at(gx, self.key, gy)
        return gx

    def backward(self, ggx):
        return get_item(ggx, self.key)


def get_item(x, key):
    """`x[key]` for any NumPy index (ints, slices, lists, arrays, None, ...); `Variable.__getitem__` calls it."""
    return GetItem(key)(x)


class Concatenate(Function):  # step 45: PyTorch's torch.cat
    def __init__(self, axis):
        self.axis = axis

    def forward(self, *xs):
        ndim = xs[0].ndim
        if not -ndim <= self.axis < builtins.max(ndim, 1) or ndim == 0:
            raise ValueError(f"concatenate: axis {self.axis} is out of range for {ndim}-d inputs")
        axis = self.axis % ndim
        for x in xs[1:]:
            if x.ndim != ndim or x.shape[:axis] + x.shape[axis + 1:] != xs[0].shape[:axis] + xs[0].shape[axis + 1:]:
                raise ValueError(f"concatenate: shapes {xs[0].shape} and {x.shape} differ outside axis {self.axis}")
        self.bounds = np.cumsum([0] + [x.shape[axis] for x in xs])
        self.axis = axis
        return get_array_module(*xs).concatenate(xs, axis=axis)

    def backward(self, gy):
        # each input gets its own slice of the gradient along the axis (a view, differentiable: step 31)
        before = (slice(None),) * self.axis
        return tuple(gy[before + (slice(int(a), int(b)),)] for a, b in zip(self.bounds[:-1], self.bounds[1:]))


def concatenate(xs, axis=0):
    """Join a sequence of Variables (or arrays) along an existing axis, as NumPy's concatenate and torch.cat."""
    if isinstance(xs, (Variable, *cuda.array_types)):  # tuple() would split it into its rows
        raise TypeError("concatenate: expected a sequence of Variables or arrays, got a single "
                        f"{type(xs).__name__}")
    xs = tuple(xs)
    if not xs:
        raise ValueError("concatenate: need at least one variable to concatenate")
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"concatenate: axis must be an int, got {axis!r}")
    return Concatenate(int(axis))(*xs)


# ----- activations and a loss (step 32) ----------------------------------------------------

class Sigmoid(Function):  # step 32
    def forward(self, x):
        xp = get_array_module(x)
        # 1 / (1 + exp(-x)) overflows (with a warning) for x < -709. With z = exp(-|x|) <= 1
        # nothing overflows, and sigmoid(x) = z / (1 + z) keeps every digit for x < 0.
        z = xp.exp(-xp.abs(x))
        y = xp.where(x >= 0, 1 / (1 + z), z / (1 + z))
        self.save_for_backward(y)  # step 35: d sigmoid(x)/dx = sigmoid(x) (1 - sigmoid(x)) needs the output
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy * y * (1 - y)


class ReLU(Function):  # step 32
    def forward(self, x):
        xp = get_array_module(x)
        y = xp.maximum(x, 0)
        self.save_for_backward(y)  # step 35: y > 0 exactly where x > 0, so the output will do (as PyTorch)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        # slope 1 where x > 0, else 0 (at x = 0 too, as in PyTorch); an array: a constant
        return gy * (array_of(y) > 0).astype(gy.dtype)


class MeanSquaredError(Function):  # step 32
    def forward(self, x0, x1):
        if x0.shape != x1.shape:
            raise ValueError(f"mean_squared_error: shapes {x0.shape} and {x1.shape} differ")
        self.save_for_backward(x0, x1)  # step 35: both gradients need x0 - x1 (PyTorch keeps both too)
        diff = x0 - x1
        return (diff * diff).sum() / diff.size

    def backward(self, gy):
        x0, x1 = self.saved_tensors
        gx0 = gy * (x0 - x1) * (2.0 / x0.size)  # d/dx0 of mean((x0 - x1)^2)
        return gx0, -gx0


class Dropout(Function):  # step 41
    """Zero each element with probability p, scale the rest by 1/(1-p): the expected value is unchanged."""

    def __init__(self, p):
        self.p = p

    def forward(self, x):
        xp = get_array_module(x)
        # from the package's generators, so checkpointing can replay the mask; on a GPU drawn on
        # the device itself (step 48), not on the host and copied
        keep = random.uniform(x.shape, xp) >= self.p
        self.scale = 0.0 if self.p == 1 else 1.0 / (1.0 - self.p)
        self.save_for_backward(keep)  # PyTorch saves the mask too
        return x * keep.astype(x.dtype) * x.dtype.type(self.scale)

    def backward(self, gy):
        (keep,) = self.saved_tensors
        return gy * array_of(keep).astype(gy.dtype) * self.scale


def dropout(x, p=0.5, training=True):
    """PyTorch's `nn.functional.dropout`: in training, each element is zeroed with probability p and the others
    are divided by 1 - p; outside training, x itself."""
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, but got {p!r}")
    if not training or p == 0.0:
        return as_variable(x, "dropout")
    return Dropout(p)(x)


def sigmoid(x):
    return Sigmoid()(x)


def relu(x):
    return ReLU()(x)


def mean_squared_error(x0, x1):
    """mean((x0 - x1)^2) over all elements (PyTorch's `nn.functional.mse_loss`)."""
    return MeanSquaredError()(x0, x1)


# speed: every operation here has one backward formula for arrays and Variables (core.BackwardMode), but ToDevice,
# whose gradient goes back to another device
formulas_on_arrays(Square, Exp, Sin, Cos, Tanh, Log, Cast, Reshape, Transpose, Sum, Mean, Max, LogSumExp, BroadcastTo,
                   SumTo, MatMul, LinearFunction, GetItem, GetItemGrad, Concatenate, Sigmoid, ReLU, MeanSquaredError,
                   Dropout)
