"""Differentiable functions that are not Python operators.

Each is a `Function` subclass plus a lower-case function that users call.
`forward` works on arrays: `xp` is the array module of the data (NumPy or
CuPy), so the same code runs on the CPU and the GPU. `backward` works on
Variables (step 27), so that a gradient can itself be differentiated.
"""
import builtins
import collections
import math
import numbers
import warnings

import numpy as np

from tinypytorch import batching_state, cuda, dtypes, forward_ad_state, random
from tinypytorch.core import (
    Function, Neg, Pow, Variable, _Binary, array_of, as_variable, formulas_on_arrays, sum_array, sum_tangents,
)
# broadcasting and casting live in core, whose arithmetic needs them; they are functions of this module too
from tinypytorch.core import (  # noqa: F401
    BroadcastTo, Cast, SumTo, as_shape, astype, broadcast_to, sum_to, sum_to_array,
)
from tinypytorch.cuda import get_array_module


# ----- element-wise functions ------------------------------------------------------------

class Square(Function):  # step 02 (backward: step 06)
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        self.save_for_backward(x)  # step 35: d(x^2)/dx = 2x needs x
        if x.dtype.kind == "b":  # step 59: as PyTorch's x ** 2, a bool squared is an int64
            x = x.astype(np.int64)
        return x ** 2

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 2 * x * gy

    def jvp(self, t):  # step 64: d(x^2) = 2x dx
        return 2 * self.primals[0] * t


class Exp(Function):  # step 03 (backward: step 06)
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("result",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: an integer or bool input gives the default float, as PyTorch's
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        y = xp.exp(x)
        self.save_for_backward(y)  # step 35: d exp(x)/dx = exp(x), the output itself (step 27)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy * y

    def jvp(self, t):  # step 64: d exp(x) = exp(x) dx
        return self.results[0] * t


class Sin(Function):  # step 26
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("self",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d sin(x)/dx = cos(x) needs x
        return xp.sin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * cos(x)

    def jvp(self, t):  # step 64: d sin(x) = cos(x) dx
        return get_array_module(t).cos(self.primals[0]) * t


class Cos(Function):  # step 26
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("self",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d cos(x)/dx = -sin(x) needs x
        return xp.cos(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * -sin(x)

    def jvp(self, t):  # step 64: d cos(x) = -sin(x) dx
        return -get_array_module(t).sin(self.primals[0]) * t


class Tanh(Function):  # step 27
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("result",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        y = xp.tanh(x)
        self.save_for_backward(y)  # step 35: d tanh(x)/dx = 1 - tanh(x)^2 needs only the output
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy * (1 - y * y)

    def jvp(self, t):  # step 64
        y = self.results[0]
        return (1 - y * y) * t


class Log(Function):  # step 39
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("self",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        self.save_for_backward(x)  # step 35: d log(x)/dx = 1/x needs x
        return xp.log(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy / x

    def jvp(self, t):  # step 64
        return t / self.primals[0]


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


# The element-wise functions below are the PyTorch surface: what PyTorch's tensor methods need.

class Abs(Function):
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        if x.dtype.kind == "b":  # step 59: PyTorch's refusal
            raise NotImplementedError('"abs_cpu" not implemented for \'Bool\'')
        self.save_for_backward(x)  # d|x|/dx = sign(x) needs x
        return get_array_module(x).abs(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        x = array_of(x)
        return gy * _sign(x)  # a constant; a product, as PyTorch's (an infinite gy at 0 gives NaN)

    def jvp(self, t):  # step 64: sign(0) = 0, as in backward
        return _sign(self.primals[0]) * t


def _sign(x):
    """PyTorch's sign of a real x: 1, -1, or 0 at 0 (no gradient at the kink) and at NaN (NumPy's sign: NaN)."""
    return (x > 0).astype(x.dtype) - (x < 0)


def _mask(condition):
    """A comparison of arrays as a bool array, for `where` in a backward formula (0-d: NumPy gives a bool scalar)."""
    return get_array_module(condition).asarray(condition)


class Sqrt(Function):
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("result",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        y = get_array_module(x).sqrt(x)
        self.save_for_backward(y)  # d sqrt(x)/dx = 1 / (2 sqrt(x)) needs only the output (PyTorch saves it too)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy / (2 * y)

    def jvp(self, t):  # step 64
        return t / (2 * self.results[0])


class Clamp(Function):
    """x limited to [low, high] (either bound may be None: no limit on that side)."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def __init__(self, low, high):
        self.low, self.high = low, high

    def forward(self, x):
        xp = get_array_module(x)
        self.save_for_backward(x)  # which elements lie within the bounds (PyTorch saves x too)
        x = dtypes.cast(x, dtypes.result_type(x, *[b for b in (self.low, self.high) if b is not None]))  # step 59
        y = x if self.low is None else xp.maximum(x, self.low)
        return y if self.high is None else xp.minimum(y, self.high)  # low > high: every element is high, as PyTorch

    def backward(self, gy):
        (x,) = self.saved_tensors
        x = array_of(x)
        low = -math.inf if self.low is None else self.low
        high = math.inf if self.high is None else self.high
        # slope 1 within the bounds, the bounds themselves included, as in PyTorch (not at NaN); a selection,
        # as PyTorch's: an infinite gy outside gives 0 (a product by a 0/1 mask would give inf * 0 = NaN)
        return where(_mask((x >= low) & (x <= high)), gy, 0.0)

    def jvp(self, t):  # step 64: slope 1 within the bounds (included), as in backward
        x = self.primals[0]
        low = -math.inf if self.low is None else self.low
        high = math.inf if self.high is None else self.high
        return get_array_module(t).where((x >= low) & (x <= high), t, 0)


def abs(x):  # noqa: A001 (PyTorch's name)
    return Abs()(x)


def sqrt(x):
    return Sqrt()(x)


def clamp(x, min=None, max=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's clamp: each element limited to [min, max], numbers; at least one of them given."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    for bound in (min, max):
        if bound is not None and (not isinstance(bound, numbers.Real) or isinstance(bound, bool)):
            raise TypeError(f"clamp: min and max must be numbers, got {type(bound).__name__}")
    return Clamp(min, max)(x)


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

class Reshape(Function):  # step 29
    is_view = True  # step 37: NumPy returns a view when it can

    def __init__(self, shape):
        self.shape = as_shape("reshape", shape)

    def view_fn(self):  # step 36: how a view of the result is remade from its base
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

    jvp = Function.jvp_by_forward  # step 64


def reshape(x, shape):
    """`x` with its elements rearranged into `shape` (one entry may be -1: inferred), in row-major order."""
    x = as_variable(x, "reshape")
    return Reshape(shape)(x)  # a view even where nothing moves, as PyTorch's: a new variable, not x itself


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
    problem = f"{op}: dims {dims} are not a permutation of the dimensions of shape {tuple(shape)}"
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

    def view_fn(self):  # step 36: how a view of the result is remade from its base
        perm = self.perm
        return lambda t: _apply_permutation(t, perm)

    def forward(self, x):
        return x.transpose(self.perm)  # NumPy's ndarray.transpose(axes) is a permutation: PyTorch's permute

    def backward(self, gy):
        # Dimension i of x became dimension perm.index(i) of y; putting each back undoes the permutation.
        inverse = tuple(self.perm.index(i) for i in range(len(self.perm)))
        return permute(gy, inverse)

    jvp = Function.jvp_by_forward  # step 64


def _apply_permutation(x, perm, torch_name=None):
    return _named(Transpose(perm), torch_name)(x)  # a view even where nothing moves (as reshape)


def permute(x, dims):
    """PyTorch's `permute`: dimension i of the result is dimension dims[i] of `x` (negative dims count from the end)."""
    x = as_variable(x, "permute")
    return _apply_permutation(x, _permutation("permute", dims, x.shape), "PermuteBackward0")


def transpose(x, dim0, dim1):
    """PyTorch's `transpose`: `x` with dimensions dim0 and dim1 swapped (negative dims count from the end)."""
    x = as_variable(x, "transpose")
    dim0, dim1 = _dim("transpose", dim0, x.ndim), _dim("transpose", dim1, x.ndim)
    perm = list(range(x.ndim))
    if x.ndim:  # a 0-d variable has no dimension to swap: dim0 = dim1 = 0, and nothing moves
        perm[dim0], perm[dim1] = dim1, dim0
    return _apply_permutation(x, tuple(perm))


def t(x):
    """PyTorch's `t`: a matrix transposed; a variable of fewer dimensions as it is (a view)."""
    x = as_variable(x, "t")
    if x.ndim > 2:
        raise ValueError(f"t: expects a variable with <= 2 dimensions, but it has {x.ndim} (use permute)")
    return _apply_permutation(x, tuple(reversed(range(x.ndim))), "TBackward0")


def _named(function, torch_name):
    """`function`, recorded under PyTorch's name for this use of it (Function.name) where its class serves
    several of PyTorch's nodes: Reshape is view, unsqueeze and squeeze; Transpose is transpose, permute and t."""
    if torch_name is not None:
        function.torch_name = torch_name
    return function


# Views with PyTorch's names, each a reshape: they share the input's memory, as reshape's result does.

class Unsqueeze(Reshape):
    """A reshape that adds a dimension of length 1 at `dim`, laid out as PyTorch lays it out: its stride is the
    next one's times its length (NumPy's reshape may choose another; which in-place changes PyTorch refuses as
    overlapping depends on it, inplace.check_no_partial_overlap)."""

    torch_name = "UnsqueezeBackward0"

    def __init__(self, shape, dim):
        super().__init__(shape)
        self.dim = dim

    def forward(self, x):
        y = super().forward(x)
        if isinstance(y, np.ndarray):
            dim, strides = self.dim, x.strides
            stride = x.shape[dim] * strides[dim] if dim < x.ndim else x.itemsize
            y = np.lib.stride_tricks.as_strided(x, y.shape, strides[:dim] + (stride,) + strides[dim:])
        return y


def unsqueeze(x, dim):
    """PyTorch's `unsqueeze`: `x` with a new dimension of length 1 at `dim` (from -x.ndim - 1 to x.ndim)."""
    x = as_variable(x, "unsqueeze")
    dim = _dim("unsqueeze", dim, x.ndim + 1)
    return Unsqueeze(x.shape[:dim] + (1,) + x.shape[dim:], dim)(x)


def squeeze(x, dim=None):
    """PyTorch's `squeeze`: `x` without its dimensions of length 1; with `dim` (an int or a tuple of ints),
    without those of them that have length 1."""
    x = as_variable(x, "squeeze")
    if dim is None:
        dims, torch_name = range(x.ndim), "SqueezeBackward0"
    elif isinstance(dim, (tuple, list)):
        dims, torch_name = [_dim("squeeze", d, x.ndim) for d in dim], "SqueezeBackward2"
    else:
        dims, torch_name = [_dim("squeeze", dim, x.ndim)], "SqueezeBackward1"
    shape = tuple(n for i, n in enumerate(x.shape) if n != 1 or i not in dims)
    return _named(Reshape(shape), torch_name)(x)  # a view even where nothing is removed (as reshape)


def flatten(x, start_dim=0, end_dim=-1):
    """PyTorch's `flatten`: dimensions start_dim to end_dim (both included) made one; a 0-d variable becomes 1-d."""
    x = as_variable(x, "flatten")
    start, end = _dim("flatten", start_dim, x.ndim), _dim("flatten", end_dim, x.ndim)
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} cannot come after end_dim {end_dim}")
    if start == end and x.ndim:
        return x  # nothing to flatten: x itself, as PyTorch's flatten (a 0-d x becomes 1-d, a view)
    return reshape(x, x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


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


# PyTorch spells a reduction's arguments dim= and keepdim=, NumPy axis= and keepdims= (steps 30 and 50 use NumPy's).
# The reductions take both: PyTorch's dims are checked by PyTorch's rules here, NumPy's axes by NumPy's.

def _dims(op, dim, ndim):
    """PyTorch's `dim` (an int or a tuple of ints, negative counting from the end) as a sorted tuple of
    non-negative ints; None for every dim, as PyTorch reads an empty tuple. A 0-d variable has dims 0 and -1."""
    if isinstance(dim, int) and not isinstance(dim, bool):  # the common case, one dim
        return (_dim(op, dim, ndim),) if ndim else ()
    dims = (dim,) if isinstance(dim, numbers.Integral) else dim
    if not isinstance(dims, (tuple, list)):
        raise TypeError(f"{op}: dim must be an int or a tuple of ints, got {dim!r}")
    if not dims:
        return None
    normalized = sorted(_dim(op, d, ndim) for d in dims)
    for i in range(1, len(normalized)):
        if normalized[i] == normalized[i - 1]:
            raise ValueError(f"{op}: dim {normalized[i]} appears multiple times in the list of dims {dim!r}")
    return tuple(normalized) if ndim else ()  # a 0-d variable's dim names no axis of its array


def _spelling(op, dim, keepdim, axis, keepdims):
    """(dim, keepdim) given as PyTorch spells them or as NumPy does; both names of one argument is an error."""
    if axis is not None:
        if dim is not None:
            raise TypeError(f"{op}: got both dim and axis, two names of one argument (PyTorch's and NumPy's)")
        dim = axis
    if keepdims is not None:
        if keepdim:
            raise TypeError(f"{op}: got both keepdim and keepdims, two names of one argument (PyTorch's and NumPy's)")
        keepdim = keepdims
    return dim, keepdim


def _reduction(op, x, dim, keepdim, axis, keepdims):
    """(axes, keepdims) for a reduction of x: a sorted tuple of axes, or None for all of them."""
    if axis is None and keepdims is None:  # the common call (PyTorch's spelling, or none): the cheapest path
        return (None if dim is None else _dims(op, dim, _ndim(x))), keepdim
    numpy_spelling = axis is not None
    dim, keepdim = _spelling(op, dim, keepdim, axis, keepdims)
    if dim is None:
        return None, keepdim
    return (_normalize_axis if numpy_spelling else _dims)(op, dim, _ndim(x)), keepdim


def _shape(x):
    """The shape of a Variable, an array, a number or a list."""
    return x.shape if isinstance(x, (Variable, *cuda.array_types)) else np.shape(x)


def _ndim(x):
    """The number of dimensions of a Variable or an array (on either device), or of a number or a list."""
    return x.ndim if isinstance(x, (Variable, *cuda.array_types)) else np.ndim(x)


def _over(axes):
    """The axes of a reduction, as an error names them: "over axis 0", "over axes (0, 1)", "" for every axis."""
    if axes is None:
        return ""
    axes = (axes,) if isinstance(axes, numbers.Integral) else tuple(axes)
    return f" over axis {axes[0]}" if len(axes) == 1 else f" over axes {axes}"


class Sum(Function):  # step 30
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis=None, keepdims=False, dtype=None):
        self.axis, self.keepdims = axis, keepdims
        self.dtype = dtype  # step 59: sum(dtype=), the input cast first

    def forward(self, x):
        self.x_shape = x.shape
        self.axes = _normalize_axis("sum", self.axis, x.ndim)
        # step 59: sum(dtype=) casts first; PyTorch sums bools and small integers as int64 (NumPy: by platform)
        if self.dtype is not None or x.dtype.kind in "bu" or x.dtype == np.int8 or x.dtype == np.int16:
            x = dtypes.cast(x, np.dtype(np.int64) if self.dtype is None else self.dtype)
        return sum_array(x, self.axes, self.keepdims)

    def backward(self, gy):
        # Put back the summed axes as length-1 axes, then copy the gradient along them:
        # every element of x contributed to its sum with derivative 1.
        if not self.keepdims:
            kept = tuple(1 if i in self.axes else n for i, n in enumerate(self.x_shape))
            gy = reshape(gy, kept)
        return broadcast_to(gy, self.x_shape)

    jvp = Function.jvp_by_forward  # step 64


def sum(x, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):  # noqa: A001 (PyTorch's, NumPy's)
    """PyTorch's sum(x, dim=None, keepdim=False, dtype=None): over every dim by default, in `dtype` if given;
    NumPy's axis=, keepdims= too."""
    return Sum(*_reduction("sum", x, dim, keepdim, axis, keepdims), _dtype_argument("sum", dtype))(x)


def _dtype_argument(op, dtype):  # step 59
    """A `dtype=` argument as a NumPy dtype (None stays None)."""
    if dtype is None:
        return None
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}(): argument 'dtype' must be a dtype such as tinypytorch.float64, got {dtype!r}") from None


class Mean(Function):  # step 50
    """The average over `axis`: the sum divided by the number of elements summed (PyTorch's mean)."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        if x.dtype.kind not in "fc":  # step 59: a mean of integers is no integer; PyTorch asks for a floating dtype
            raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                               f"complex dtype. Got: {dtypes.torch_name(x.dtype)}")
        self.x_shape = x.shape
        self.axes = _normalize_axis("mean", self.axis, x.ndim)
        self.count = int(np.prod([x.shape[a] for a in self.axes]))
        if self.count == 0:  # the mean of nothing is NaN, as PyTorch's (NumPy's too, with a warning)
            return get_array_module(x).full_like(x.sum(axis=self.axes, keepdims=self.keepdims), np.nan)
        return x.mean(axis=self.axes, keepdims=self.keepdims)

    def backward(self, gy):
        # each element contributed 1/count of itself to its mean
        return broadcast_to(_keep_axes(gy, self.axes, self.x_shape, self.keepdims), self.x_shape) / self.count

    jvp = Function.jvp_by_forward  # step 64


def mean(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's mean(x, dim=None, keepdim=False); NumPy's axis=, keepdims= too."""
    return Mean(*_reduction("mean", x, dim, keepdim, axis, keepdims))(x)


def _kept_shape(axes, x_shape):
    """The shape of a reduction of x over `axes` with keepdims: those axes of length 1."""
    return tuple(1 if i in axes else n for i, n in enumerate(x_shape))


def _keep_axes(y, axes, x_shape, keepdims):
    """Variable `y`, reduced over `axes` of x, with those axes back as length 1, ready to broadcast to x."""
    return y if keepdims else reshape(y, _kept_shape(axes, x_shape))


class Max(Function):  # step 50
    """The largest elements over `axis` (PyTorch's amax, and its max(x) of every element).

    The derivative is 1 at the maximum and 0 elsewhere. Where several elements tie for the
    maximum, the gradient is shared equally between them, as PyTorch's amax shares it.
    (PyTorch's max(x, dim) gives it to one of them: TakeAlongDim.)
    """
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    reduce, extreme = "max", "maximum"  # Min: the same with min
    evenly = False  # True for PyTorch's max(x) of every element, whose derivatives are not amax's (see backward)

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        self.x_shape = x.shape
        self.axes = _normalize_axis(self.reduce, self.axis, x.ndim)
        if any(x.shape[a] == 0 for a in self.axes):
            raise ValueError(f"{self.reduce}: the {self.extreme}{_over(self.axis)} of an empty variable "
                             f"of shape {tuple(x.shape)}")
        y = getattr(x, self.reduce)(axis=self.axes, keepdims=self.keepdims)  # x.max(...), or x.min(...)
        self.save_for_backward(x, y)  # which elements are the maximum (PyTorch saves input and result too)
        return y

    def backward(self, gy):
        x, y = self.saved_tensors
        if self.evenly:  # PyTorch's max(x) selects (on its CPU): gy / (number of ties) at each maximum, or at each
            # NaN where the maximum is NaN; 0 elsewhere, even where gy is infinite
            x, y, xp = array_of(x), array_of(y), get_array_module(x)
            winners = _mask(xp.isnan(x) if xp.isnan(y) else x == y)
            # (divided after the selection: NumPy makes a 0-d gy / n a number, which `where` takes for a Python one)
            return where(winners, gy, 0.0) / int(winners.sum())
        # amax multiplies, as PyTorch's: an infinite gy gives NaN off the maximum, and a NaN maximum NaN everywhere
        winners = (array_of(x) == array_of(y).reshape(_kept_shape(self.axes, self.x_shape))).astype(array_of(gy).dtype)
        share = winners / winners.sum(axis=self.axes, keepdims=True)  # a constant: 0 or 1/(number of ties)
        return broadcast_to(_keep_axes(gy, self.axes, self.x_shape, self.keepdims), self.x_shape) * share

    def jvp(self, t):  # step 64: the tangents of the tied maxima, averaged, as backward shares the gradient
        x, y = self.primals[0], self.results[0]
        winners = x == y.reshape(_kept_shape(self.axes, self.x_shape))
        kept = self.keepdims
        # PyTorch's amax selects (an infinite tangent off the maximum is left out), its max(x) multiplies (NaN)
        t = t * winners if self.evenly else get_array_module(t).where(winners, t, 0)
        return t.sum(axis=self.axes, keepdims=kept) / winners.sum(axis=self.axes, keepdims=kept)


class Min(Max):
    """The smallest elements over `axis` (PyTorch's amin, and its min(x)): Max's formula, with min."""

    reduce, extreme = "min", "minimum"


class TakeAlongDim(Function):
    """x's elements at `indices` along dim `dim`: one for each position of the other dims (NumPy's take_along_axis).

    The values of PyTorch's max(x, dim) and min(x, dim) are those at argmax(x, dim) and argmin(x, dim),
    so the gradient goes to those elements only: among ties, all of it to the first.
    """

    def __init__(self, dim, keepdim):
        self.dim, self.keepdim = dim, keepdim

    def forward(self, x, indices):
        self.x_shape = x.shape
        self.save_for_backward(indices)  # where each value came from (PyTorch keeps the indices too)
        return x[_along(indices, self.dim, self.keepdim, x.shape)].reshape(indices.shape)  # without keepdim: as indices

    def backward(self, gy):
        (indices,) = self.saved_tensors
        key = _along(array_of(indices), self.dim, self.keepdim, self.x_shape)
        gy = reshape(gy, _kept_shape((self.dim,), self.x_shape))  # the index's shape
        return GetItemGrad(key, self.x_shape)(gy), None  # each value's gradient to the element it came from

    def jvp(self, t, t_indices):  # step 64: the tangent at the same indices
        return self.forward(t, self.primals[1])


def _along(indices, dim, keepdim, shape):
    """The index of an array of `shape` that picks, along `dim`, the element `indices` names at each position
    of the other dims: indices there, and along each other dim its positions (0, 1, ...), broadcast."""
    xp = get_array_module(indices)
    if not keepdim and shape:
        indices = xp.expand_dims(indices, dim)
    return tuple(indices if i == dim else xp.arange(n).reshape([n if j == i else 1 for j in range(len(shape))])
                 for i, n in enumerate(shape))


# PyTorch's max(x, dim) and min(x, dim) return a named tuple (torch.return_types.max): (values, indices)
class return_types:  # noqa: N801 (PyTorch's name)
    max = collections.namedtuple("max", ["values", "indices"])
    min = collections.namedtuple("min", ["values", "indices"])


def _arg(op, reduce, x, dim, keepdim):
    """The indices of the largest (reduce "max") or smallest ("min") elements of Variable x along one dim (None: of
    x flattened), the first among ties, as int64 (PyTorch's index type). `op` names the caller in errors."""
    data = x.data
    refuse_empty_extreme(op, data.shape, dim)
    indices = getattr(data, "arg" + reduce)(axis=dim, keepdims=keepdim)
    return get_array_module(data).asarray(indices, dtype=np.int64)  # NumPy's flattened argmax is a scalar


def refuse_empty_extreme(op, shape, dim):
    """PyTorch's refusal of a maximum or minimum over nothing (op: "max", "amax", "argmax", ...): over a dim of
    length 0, an IndexError naming the dim as given; of every element of an empty tensor, a RuntimeError (argmax
    and argmin: an IndexError)."""
    if dim is None:
        if 0 in shape:
            message = f"{op}(): Expected reduction dim to be specified for input.numel() == 0."
            if op.startswith("arg"):
                raise IndexError(message)
            raise RuntimeError(message + " Specify the reduction dim with the 'dim' argument.")
        return
    for d in (dim if isinstance(dim, (tuple, list)) else (dim,)):
        if shape and shape[d] == 0:  # (a 0-d tensor takes dim 0 or -1, and is never empty)
            raise IndexError(f"{op}(): Expected reduction dim {d} to have non-zero size.")


def _extreme(op, cls, x, dim, keepdim, axis, keepdims):
    """PyTorch's max (op "max", cls Max) or min (op "min", cls Min); see max."""
    if axis is not None or keepdims is not None:  # NumPy's spelling (step 50): the values only
        return cls(*_reduction(op, x, dim, keepdim, axis, keepdims))(x)
    if dim is None:
        if keepdim:
            raise TypeError(f"{op}: keepdim=True needs a dim")
        refuse_empty_extreme(op, _shape(x), None)
        extreme = cls()
        extreme.evenly = True  # PyTorch's derivatives of max(x), not amax's
        return _named(extreme, f"{cls.__name__}Backward1")(x)  # PyTorch's node for the extreme of every element
    x = as_variable(x, op)
    dim = _dim(op, dim, x.ndim)
    indices = Variable(_arg(op, op, x, dim, keepdim), requires_grad=False)
    values = _named(TakeAlongDim(dim, keepdim), f"{cls.__name__}Backward0")(x, indices)
    return getattr(return_types, op)(values, indices)


def max(x, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001 (PyTorch's and NumPy's name)
    """PyTorch's max: max(x) is the largest element; max(x, dim, keepdim=False) the named tuple (values, indices)
    of the largest along one dim, the gradient going to each index (the first among ties).

    NumPy's spelling, max(x, axis=..., keepdims=...) as step 50 uses it, gives the values only: amax.
    """
    return _extreme("max", Max, x, dim, keepdim, axis, keepdims)


def min(x, dim=None, keepdim=False, *, axis=None, keepdims=None):  # noqa: A001 (PyTorch's and NumPy's name)
    """PyTorch's min, as max: min(x), or min(x, dim) the named tuple (values, indices); min(x, axis=...) amin."""
    return _extreme("min", Min, x, dim, keepdim, axis, keepdims)


def amax(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's amax: the largest elements over `dim` (every dim by default); ties share the gradient equally."""
    reduction = _reduction("amax", x, dim, keepdim, axis, keepdims)
    if axis is None:  # (NumPy's spelling gets NumPy's kind of refusal: Max's ValueError)
        refuse_empty_extreme("amax", _shape(x), dim)
    return Max(*reduction)(x)


def amin(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's amin: the smallest elements over `dim` (every dim by default); ties share the gradient equally."""
    reduction = _reduction("amin", x, dim, keepdim, axis, keepdims)
    if axis is None:
        refuse_empty_extreme("amin", _shape(x), dim)
    return Min(*reduction)(x)


def argmax(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's argmax: the index of the largest element along one dim (of x flattened if dim is None), the
    first among ties; an int64 Variable, outside the graph (an index has no gradient)."""
    return _arg_variable("argmax", x, dim, keepdim, axis, keepdims)


def argmin(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's argmin: as argmax, for the smallest element."""
    return _arg_variable("argmin", x, dim, keepdim, axis, keepdims)


def _arg_variable(op, x, dim, keepdim, axis, keepdims):
    x = as_variable(x, op)
    dim, keepdim = _spelling(op, dim, keepdim, axis, keepdims)
    dim = None if dim is None else _dim(op, dim, x.ndim)
    return Variable(_arg(op, op[3:], x, dim, keepdim), requires_grad=False)


class LogSumExp(Function):  # step 50
    """log(sum(exp(x))) over `axis`, computed as m + log(sum(exp(x - m))) with m the maximum: no overflow."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis=None, keepdims=False):
        self.axis, self.keepdims = axis, keepdims

    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        xp = get_array_module(x)
        self.x_shape = x.shape
        self.axes = _normalize_axis("logsumexp", self.axis, x.ndim)
        if any(x.shape[a] == 0 for a in self.axes):  # no step: the log of an empty sum, -inf, as PyTorch's
            y = xp.full_like(x.sum(axis=self.axes, keepdims=self.keepdims), -np.inf)
            self.save_for_backward(x, y)
            return y
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

    def jvp(self, t):  # step 64: d logsumexp(x) = sum(softmax(x) dx)
        x, y = self.primals[0], self.results[0]
        softmax = get_array_module(x).exp(x - y.reshape(_kept_shape(self.axes, self.x_shape)))
        return (softmax * t).sum(axis=self.axes, keepdims=self.keepdims)


def logsumexp(x, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """PyTorch's logsumexp(x, dim, keepdim=False), here over every dim by default; NumPy's axis=, keepdims= too."""
    return LogSumExp(*_reduction("logsumexp", x, dim, keepdim, axis, keepdims))(x)


class Norm(Function):
    """The 1-norm, sum |x|, or the 2-norm, sqrt(sum x^2), over `axis` (PyTorch's vector norm)."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, p, axis, keepdims):
        self.p, self.axis, self.keepdims = p, axis, keepdims

    def forward(self, x):
        if x.dtype.kind not in "fc":  # step 59: PyTorch's refusal
            raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as input. "
                               f"Got {dtypes.torch_name(x.dtype)}")
        if x.dtype == np.float16:  # no step: computed in float32 and rounded once, as PyTorch's (its opmath type)
            y = self.forward(x.astype(np.float32)).astype(np.float16)
            self.save_for_backward(*((x,) if self.p == 1 else (x, y)))
            return y
        xp = get_array_module(x)
        self.x_shape = x.shape
        self.axes = _normalize_axis("norm", self.axis, x.ndim)
        if self.p == 1:
            self.save_for_backward(x)  # the gradient is sign(x)
            return xp.abs(x).sum(axis=self.axes, keepdims=self.keepdims)
        if math.prod(x.shape[a] for a in self.axes) == 1:  # the norm of one element is |x|, even where x * x
            y = xp.abs(x).sum(axis=self.axes, keepdims=self.keepdims)  # underflows to 0 (as PyTorch's)
        else:
            y = xp.sqrt((x * x).sum(axis=self.axes, keepdims=self.keepdims))
        self.save_for_backward(x, y)  # the gradient is x / y (PyTorch saves both too)
        return y

    def backward(self, gy):
        gy = _keep_axes(gy, self.axes, self.x_shape, self.keepdims)
        if self.p == 1:
            (x,) = self.saved_tensors
            x = array_of(x)
            return get_array_module(x).sign(x) * broadcast_to(gy, self.x_shape)  # sign(0) = 0, as PyTorch
        x, y = self.saved_tensors
        y = _keep_axes(y, self.axes, self.x_shape, self.keepdims)
        # where the norm is 0, x is 0 too: dividing by 1 there gives PyTorch's gradient, 0
        return x * broadcast_to(gy / (y + (array_of(y) == 0)), self.x_shape)

    def jvp(self, t):  # step 64: d|x|_1 = sum(sign(x) dx); d|x|_2 = sum(x dx) / |x|_2 (0 where the norm is 0)
        x, y = self.primals[0], self.results[0]
        if self.p == 1:
            return (get_array_module(x).sign(x) * t).sum(axis=self.axes, keepdims=self.keepdims)
        return (x * t).sum(axis=self.axes, keepdims=self.keepdims) / (y + (y == 0))


def norm(x, p="fro", dim=None, keepdim=False):
    """PyTorch's norm for p = 1, 2 or "fro" (the 2-norm of the elements): over every dim by default."""
    if p not in (1, 2, "fro"):
        raise ValueError(f"norm: p={p!r} is not supported; p is 1, 2 or 'fro'")
    if p == "fro" and isinstance(dim, (tuple, list)) and len(dim) > 2:  # PyTorch's Frobenius norm is of matrices
        raise ValueError(f"norm: p='fro' takes at most 2 dims, got {dim!r} (p=2 takes any number)")
    axes, keepdim = _reduction("norm", x, dim, keepdim, None, None)
    return Norm(1 if p == 1 else 2, axes, keepdim)(x)


def expand(x, *sizes):
    """PyTorch's `expand`: x broadcast to `sizes` (ints, or one tuple), -1 keeping a dimension's length; as
    broadcast_to, it copies nothing."""
    x = as_variable(x, "expand")
    sizes = as_shape("expand", sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes)
    lead = len(sizes) - x.ndim  # new dimensions go in front, as broadcasting puts them
    if lead < 0:
        raise ValueError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to "
                         f"the number of dimensions of the variable ({x.ndim})")
    if -1 in sizes[:lead]:
        raise ValueError(f"expand: -1 is not allowed in a new leading dimension (sizes {sizes})")
    shape = sizes[:lead] + tuple(n if s == -1 else s for s, n in zip(sizes[lead:], x.shape))
    for i, (s, n) in enumerate(zip(shape[lead:], x.shape)):
        if n != 1 and s != n:
            raise ValueError(f"expand: the expanded size {s} must match the existing size {n} at non-singleton "
                             f"dimension {lead + i}; target sizes {sizes}, shape {tuple(x.shape)}")
    return _named(BroadcastTo(shape), "ExpandBackward0")(x)  # a view even of the same shape, as PyTorch's


# ----- matrices and indexing (step 31) ---------------------------------------------------

def _check_matmul(x_shape, w_shape, dtypes_=()):
    # step 31: fail here, naming the operation and both shapes, not inside NumPy. A vector is one row on the left
    # and one column on the right (PyTorch's rule)
    if len(x_shape) == 0 or len(w_shape) == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {len(x_shape)}D and "
                           f"{len(w_shape)}D")
    w_dim = builtins.max(len(w_shape) - 2, 0)
    if x_shape[-1] != w_shape[w_dim]:
        raise ValueError(f"matmul: shapes {x_shape} and {w_shape} are not aligned: "
                         f"{x_shape[-1]} (dim {len(x_shape) - 1}) != {w_shape[w_dim]} (dim {w_dim})")
    try:  # a stack of matrices: the leading (batch) dimensions broadcast
        np.broadcast_shapes(x_shape[:-2], w_shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions {x_shape[:-2]} and {w_shape[:-2]} do not broadcast") from None
    if dtypes_ and all(d == np.bool_ for d in dtypes_):  # NumPy multiplies bools (and, or); PyTorch cannot
        raise NotImplementedError(f"\"{'addmm_impl_cpu_' if len(x_shape) == len(w_shape) == 2 else 'bmm'}\" not "
                                  "implemented for 'Bool'")


class MatMul(Function):  # step 31
    def forward(self, x, W):
        _check_matmul(x.shape, W.shape, (x.dtype, W.dtype))
        dtypes.check_same_dtype(x.dtype, W.dtype)  # step 59: no promotion in a matrix product, as PyTorch's
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

    def jvp(self, t0, t1):  # step 64: d(x W) = dx W + x dW
        x, W = self.primals
        return sum_tangents(None if t0 is None else t0 @ W, None if t1 is None else x @ t1)


def matmul(x, W):
    """The matrix product `x @ W` of two matrices, or of two stacks of matrices (batch dimensions broadcast).
    A vector is a matrix of one row on the left and of one column on the right, that dimension dropped from the
    result, as in PyTorch: vector @ vector is their dot product, matrix @ vector a vector."""
    if isinstance(x, numbers.Number) or isinstance(W, numbers.Number):
        return MatMul()(x, W)  # which refuses a number with PyTorch's TypeError
    x, W = as_variable(x, "matmul"), as_variable(W, "matmul")
    if x.ndim == W.ndim == 1 and x.dtype != W.dtype:  # PyTorch's dot checks the dtypes before the sizes
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {dtypes.torch_name(x.dtype)} "
                           f"and {dtypes.torch_name(W.dtype)}")
    _check_matmul(tuple(x.shape), tuple(W.shape))
    if x.ndim >= 2 and W.ndim >= 2:
        return MatMul()(x, W)
    y = MatMul()(reshape(x, (1, *x.shape)) if x.ndim == 1 else x, reshape(W, (*W.shape, 1)) if W.ndim == 1 else W)
    rows, columns = (y.shape[-2],) if x.ndim > 1 else (), (y.shape[-1],) if W.ndim > 1 else ()
    return reshape(y, (*y.shape[:-2], *rows, *columns))


class LinearFunction(Function):  # step 31: y = x W^T + b as one node of the graph
    # Its inputs in the order of PyTorch's node for the same call, addmm(b, x, W^T): (b, x, W), or (x, W) without a
    # bias (mm), so that next_functions lists the bias, the input, then the weight, as PyTorch's does
    def forward(self, *inputs):
        b, x, W = inputs if len(inputs) == 3 else (None, *inputs)
        if W.ndim != 2:
            raise ValueError(f"linear: weight must be 2-D, got shape {tuple(W.shape)}")
        if x.shape[-1] != W.shape[1]:
            raise ValueError(f"linear: input of shape {tuple(x.shape)} does not fit weight of shape {tuple(W.shape)}: "
                             f"in_features {x.shape[-1]} != {W.shape[1]}")
        if b is not None and b.shape != (W.shape[0],):
            raise ValueError(f"linear: bias of shape {tuple(b.shape)} does not match out_features {W.shape[0]}")
        dtypes.check_same_dtype(x.dtype, W.dtype)  # step 59: no promotion in a matrix product, as PyTorch's
        if b is not None and b.dtype != x.dtype:  # step 59
            raise RuntimeError(f"self and mat2 must have the same dtype, but got {dtypes.torch_name(b.dtype)} and "
                               f"{dtypes.torch_name(x.dtype)}")
        self.bias_shape = None if b is None else b.shape
        # step 35: dL/dx needs W and dL/dW needs x: keep each only if the other input needs a gradient
        needs_x, needs_W = self.needs_input_grad[-2:]
        self.save_for_backward(x if needs_W else None, W if needs_x else None)
        if b is not None and x.dtype == W.dtype == b.dtype == np.float16:
            # step 60: PyTorch's addmm adds the bias before it rounds to float16, once; rounding twice
            # changes a quarter of the outputs by a step
            return (x.astype(np.float32) @ W.T.astype(np.float32) + b).astype(np.float16)
        y = x @ W.T
        return y if b is None else y + b

    def backward(self, gy):
        x, W = self.saved_tensors
        needs_x, needs_W = self.needs_input_grad[-2:]
        gx = matmul(gy, W) if needs_x else None  # y = x W^T, so dL/dx = dL/dy W
        gW = matmul(gy.T, x) if needs_W else None  # and dL/dW = (dL/dy)^T x
        if self.bias_shape is None:
            return gx, gW
        return sum_to(gy, self.bias_shape), gx, gW  # b was broadcast over the rows

    def jvp(self, *tangents):  # step 64: d(x W^T + b) = dx W^T + x dW^T + db
        tb, tx, tW = tangents if len(tangents) == 3 else (None, *tangents)
        x, W = self.primals[-2:]
        t = sum_tangents(None if tx is None else tx @ W.T, None if tW is None else x @ tW.T)
        return sum_tangents(t, tb)


def linear(x, W, b=None):
    """PyTorch's `nn.functional.linear`: x W^T + b, with W of shape (out_features, in_features) and x of shape
    (*, in_features): one sample, a batch, or batches of batches, flattened to rows and back as PyTorch does."""
    x = as_variable(x, "linear")
    if x.ndim == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are 0D and {np.ndim(W)}D")
    if x.ndim == 2 or np.ndim(W) != 2 or x.shape[-1] != W.shape[1]:
        return LinearFunction()(x, W) if b is None else LinearFunction()(b, x, W)  # or its error, naming x's shape
    rows = reshape(x, (-1, x.shape[-1]))
    y = LinearFunction()(rows, W) if b is None else LinearFunction()(b, rows, W)
    return reshape(y, (*x.shape[:-1], W.shape[0]))


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

    def view_fn(self):  # step 37: basic indexing makes a view, remade from its base by this function
        key = self.key
        return lambda t: get_item(t, key)

    def forward(self, x):
        self.x_shape = x.shape
        try:
            y = x[self.key]
        except IndexError as error:
            raise IndexError(f"getitem: {error} (key {self.key!r}, shape {tuple(x.shape)})") from None
        # step 37: a view of one element
        if not isinstance(y, type(x)):  # x[1, 2] is a number: x[1, 2, ...] is the same element, as a 0-d view
            y = x[(self.key if isinstance(self.key, tuple) else (self.key,)) + (Ellipsis,)]
        self.save_for_backward(*_index_arrays(self.key, get_array_module(x)))  # step 35: as PyTorch does
        return y

    def backward(self, gy):
        arrays = [array_of(index) for index in self.saved_tensors]
        return GetItemGrad(_with_index_arrays(self.key, arrays), self.x_shape)(gy)

    jvp = Function.jvp_by_forward  # step 64


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

    jvp = Function.jvp_by_forward  # step 64


def get_item(x, key):
    """`x[key]` for any NumPy index (ints, slices, lists, arrays, None, ...); `Variable.__getitem__` calls it."""
    return GetItem(key)(x)


class Concatenate(Function):  # step 45: PyTorch's torch.cat
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

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

    jvp = Function.jvp_by_forward  # step 64


def concatenate(xs, dim=None, *, axis=None):
    """Join a sequence of Variables (or arrays) along an existing dim, as torch.cat(tensors, dim=0) and NumPy's
    concatenate(arrays, axis=0) (either name); in their promoted dtype, as PyTorch's cat (NumPy's promotion differs)."""
    if isinstance(xs, (Variable, *cuda.array_types)):  # tuple() would split it into its rows
        raise TypeError("concatenate: expected a sequence of Variables or arrays, got a single "
                        f"{type(xs).__name__}")
    xs = tuple(xs)
    if not xs:
        raise ValueError("concatenate: need at least one variable to concatenate")
    if axis is not None:
        if dim is not None:
            raise TypeError("concatenate: got both dim and axis, two names of one argument (PyTorch's and NumPy's)")
        dim, name = axis, "axis"
    else:
        dim, name = (0 if dim is None else dim), "dim"
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"concatenate: {name} must be an int, got {dim!r}")
    # Function.__call__ promotes where the first and the last input differ in dtype (Concatenate.promotes); here,
    # where one between them does
    if len(xs) > 2:
        first = array_of(xs[0]).dtype
        if any(getattr(array_of(x), "dtype", first) != first for x in xs[1:-1]):
            dtype = dtypes.result_type(*xs)
            xs = tuple(astype(x, dtype) for x in xs)
    return Concatenate(int(dim))(*xs)


# ----- activations and a loss (step 32) ----------------------------------------------------

class Sigmoid(Function):  # step 32
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("result",)
    def forward(self, x):
        if x.dtype.kind in "biu":  # step 59: integers compute in the default float
            x = dtypes.as_floating(x)
        if x.dtype == np.float16:  # no step: computed in float32 and rounded once, as PyTorch's (its opmath type)
            y = self.forward(x.astype(np.float32)).astype(np.float16)
            self.save_for_backward(y)
            return y
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

    def jvp(self, t):  # step 64
        y = self.results[0]
        return y * (1 - y) * t


class ReLU(Function):  # step 32
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        if x.dtype.kind == "b":  # step 59: PyTorch's refusal and words
            raise RuntimeError("Boolean inputs not supported for relu")
        xp = get_array_module(x)
        y = xp.maximum(x, 0)
        self.save_for_backward(y)  # step 35: y > 0 exactly where x > 0, so the output will do (as PyTorch)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        # slope 0 where x <= 0 (at x = 0 too), else 1 (at NaN too), as in PyTorch; a selection, as PyTorch's:
        # an infinite gy where x <= 0 gives 0 (a product by a 0/1 mask would give inf * 0 = NaN)
        return where(_mask(array_of(y) <= 0), 0.0, gy)

    def jvp(self, t):  # step 64: as in backward (a selection, as PyTorch's)
        return get_array_module(t).where(self.results[0] <= 0, 0, t)


class MeanSquaredError(Function):  # step 32
    def forward(self, x0, x1):
        if x0.shape != x1.shape:
            raise ValueError(f"mean_squared_error: shapes {tuple(x0.shape)} and {tuple(x1.shape)} differ")
        self.save_for_backward(x0, x1)  # step 35: both gradients need x0 - x1 (PyTorch keeps both too)
        diff = x0 - x1
        # step 60: mean, not sum / size: in float16 the sum overflows long before the mean does;
        # NumPy's mean adds float16 in float32, as PyTorch does, and rounds once
        return (diff * diff).mean()

    def backward(self, gy):
        x0, x1 = self.saved_tensors
        # d/dx0 of mean((x0 - x1)^2); step 60: in PyTorch's order, which float16 rounds at each product
        gx0 = (2.0 / array_of(x0).size) * (x0 - x1) * gy
        return gx0, -gx0

    def jvp(self, t0, t1):  # step 64: d mean((x0 - x1)^2) = mean(2 (x0 - x1) (dx0 - dx1))
        x0, x1 = self.primals
        return (2.0 * (x0 - x1) * sum_tangents(t0, None if t1 is None else -t1)).mean()


class Dropout(Function):  # step 41
    """Zero each element with probability p, scale the rest by 1/(1-p): the expected value is unchanged."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def __init__(self, p):
        self.p = p

    def forward(self, x):
        xp = get_array_module(x)
        # from the package's generators, so checkpointing can replay the mask; on a GPU drawn on
        # the device itself (step 48), not on the host and copied
        keep = random.uniform(x.shape, xp) >= self.p
        self.scale = 0.0 if self.p == 1 else 1.0 / (1.0 - self.p)
        self.save_for_backward(keep)  # PyTorch saves the mask too
        if forward_ad_state.open_dual_levels:  # step 64: the jvp, run after the call (and replayed by linearize),
            self.keep = keep  # reads the same mask
        return x * keep.astype(x.dtype) * x.dtype.type(self.scale)

    def backward(self, gy):
        (keep,) = self.saved_tensors
        return gy * array_of(keep).astype(gy.dtype) * self.scale

    def jvp(self, t):  # step 64: the same mask on the tangent
        return t * self.keep * self.scale


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


# ----- element-wise operations of two tensors, PyTorch's (promoted as +, -, *, / are: core._Binary) ----------------

class PowTensor(_Binary):  # step 59
    """x0 ** x1 where the exponent (or the base, `2 ** x`) is a tensor: PyTorch's pow(Tensor, Tensor)."""

    torch_name = "PowBackward1"  # PyTorch's: PowBackward2 for a number base (set by pow)

    def forward(self, x0, x1):
        self.keep_shapes("pow", x0, x1)
        if x0.dtype.kind == "b":  # a bool result: PyTorch has no kernel (a bool tensor ** a Python bool is Pow's)
            raise NotImplementedError('"pow" not implemented for \'Bool\'')
        y = _integer_pow(x0, x1) if x0.dtype.kind in "iu" else x0 ** x1
        self.save_for_backward(x0, x1, y)
        return y

    def backward(self, gy):
        x0, x1, y = self.saved_tensors
        xp = get_array_module(array_of(y))
        gx0 = None
        if self.needs_input_grad[0]:  # x1 x0^(x1 - 1); 0 where x1 = 0, as PyTorch masks it (its higher derivatives too)
            # (asarray: a comparison of 0-d arrays is a NumPy bool, and where wants an array)
            gx0 = where(xp.asarray(array_of(x1) == 0), 0.0, gy * x1 * x0 ** (x1 - 1))
        gx1 = None
        if self.needs_input_grad[1]:  # y log(x0); 0 where x0 = 0 and x1 >= 0 (log(0) = -inf there), as PyTorch
            zero = xp.asarray((array_of(x0) == 0) & (array_of(x1) >= 0))
            base = x0 if self.needs_input_grad[0] else array_of(x0)  # a number base (2 ** x): in its own dtype
            gx1 = gy * where(zero, 0.0, y * log(where(zero, 1.0, base)))
        return self.sum_to_inputs(gx0, gx1)

    def jvp(self, t0, t1):
        x0, x1 = self.primals
        y, xp = self.results[0], get_array_module(self.results[0])
        d0 = None if t0 is None else x1 * x0 ** (x1 - 1) * t0
        d1 = None if t1 is None else xp.where((x0 == 0) & (x1 >= 0), 0.0, y * xp.log(xp.where(x0 == 0, 1.0, x0))) * t1
        return sum_tangents(d0, d1)


def _refuse_two_numbers(op, x0, x1):  # step 59
    """PyTorch's refusal of pow and remainder of two numbers, which take a number for one operand only (torch.add
    and floor_divide take two: Function.tensor_arguments)."""
    if not isinstance(x0, (Variable, *cuda.array_types)) and not isinstance(x1, (Variable, *cuda.array_types)):
        raise TypeError(f"{op}() received an invalid combination of arguments - got ({type(x0).__name__}, "
                        f"{type(x1).__name__}), but expected a Tensor for one of them")


def _integer_pow(x0, x1):  # step 59
    """x0 ** x1 for integers, as PyTorch computes it for a tensor exponent: a negative power is 1 / x0 ** -x1
    rounded toward zero, so 1 for a base of 1, -1 or 1 for -1 (odd or even powers) and 0 for any other base, 0
    included. NumPy refuses negative integer powers (and PyTorch too for a number exponent: Pow)."""
    xp = get_array_module(x0)
    negative = x1 < 0
    if not negative.any():
        return x0 ** x1
    y = x0 ** xp.maximum(x1, 0)
    inverse = xp.where(x0 == 1, 1, xp.where(x0 == -1, 1 - 2 * (x1 % 2), 0))  # (x1 % 2 is 0 or 1, as Python's)
    return xp.where(negative, inverse, y).astype(y.dtype, copy=False)


def pow(x, exponent):  # noqa: A001 (PyTorch's name); step 59
    """x ** exponent, PyTorch's torch.pow: the exponent a number (core's Pow, step 22) or a tensor (PowTensor);
    `pow(2, x)` too."""
    if type(exponent) in (int, float) and isinstance(x, Variable):  # speed: x ** 2, the common case
        return Pow(exponent)(x)
    for operand in (x, exponent):
        if not isinstance(operand, (Variable, *cuda.array_types, numbers.Real)):
            raise TypeError(f"pow: the exponent must be a number or a tensor, got {type(operand).__name__}")
    _refuse_two_numbers("pow", x, exponent)
    if not isinstance(x, (Variable, *cuda.array_types)):
        op = PowTensor()
        op.torch_name, op.scalar_inputs = "PowBackward2", (0,)  # PyTorch's node lists no edge for a number base
        return op(x, exponent)
    if isinstance(exponent, (Variable, *cuda.array_types)):
        return PowTensor()(x, exponent)
    return Pow(exponent)(x)


class Where(Function):  # step 59
    """where(condition, x0, x1): x0's element where the condition holds, else x1's (PyTorch's torch.where)."""

    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    promotes = True

    def __init__(self, condition):
        self.condition = condition

    def forward(self, x0, x1):
        xp = get_array_module(x0, x1)
        # (a number inside a formula that runs on arrays has no shape)
        self.shapes = (getattr(x0, "shape", ()), getattr(x1, "shape", ()))
        self.save_for_backward(self.condition)  # what PyTorch saves too
        return xp.where(self.condition, x0, x1)

    def layout_operands(self, inputs):  # no step: PyTorch's where lays out its result after the condition first
        return [self.condition] + [x.data for x in inputs]

    def backward(self, gy):
        condition = array_of(self.saved_tensors[0])
        # a 0 of its own, not 0 * gy: an infinite gy gives 0 on the other side, as in PyTorch (inf * 0 is NaN)
        gx0 = sum_to(where(condition, gy, 0.0), self.shapes[0]) if self.needs_input_grad[0] else None
        gx1 = sum_to(where(condition, 0.0, gy), self.shapes[1]) if self.needs_input_grad[1] else None
        return gx0, gx1

    def jvp(self, t0, t1):
        xp = get_array_module(self.results[0])
        return xp.where(self.condition, 0.0 if t0 is None else t0, 0.0 if t1 is None else t1)


def where(condition, x0, x1):  # step 59
    """PyTorch's torch.where(condition, input, other): input's element where `condition` (a bool tensor or array)
    holds, else other's; numbers as either side. Differentiable in input and other."""
    if batching_state.open_vmap_levels and isinstance(condition, batching_state.batched_type):  # step 69
        return Where(condition)(x0, x1)  # a batched condition: where's batching rule takes it (vmap)
    condition = array_of(condition)
    if not isinstance(condition, cuda.array_types) or condition.dtype != np.bool_:
        raise TypeError(f"where: expected a bool condition, got {getattr(condition, 'dtype', type(condition).__name__)}")
    return Where(condition)(x0, x1)


class Maximum(_Binary):  # step 59
    """The element-wise maximum of two tensors (PyTorch's maximum); where they tie, each gets half the gradient."""

    pick = "maximum"

    def forward(self, x0, x1):
        self.keep_shapes(self.pick, x0, x1)
        self.save_for_backward(x0, x1)
        return getattr(get_array_module(x0), self.pick)(x0, x1)

    def backward(self, gy):
        # PyTorch's rule: half of gy to each where the two tie, all of it to each but where it loses (so to both
        # where one is NaN); selections, as PyTorch's: an infinite gy gives 0 to the loser (a product: NaN)
        x0, x1 = [array_of(v) for v in self.saved_tensors]
        loses0, loses1 = _mask(x0 < x1), _mask(x0 > x1)
        if self.pick == "minimum":
            loses0, loses1 = loses1, loses0
        g = where(_mask(x0 == x1), gy * 0.5, gy)
        return self.sum_to_inputs(where(loses0, 0.0, g) if self.needs_input_grad[0] else None,
                                  where(loses1, 0.0, g) if self.needs_input_grad[1] else None)

    def jvp(self, t0, t1):
        x0, x1 = self.primals
        wins = (x0 > x1) if self.pick == "maximum" else (x0 < x1)
        tie = (x0 == x1) * 0.5
        return sum_tangents(None if t0 is None else (wins + tie) * t0,
                            None if t1 is None else ((1 - wins) * (x0 != x1) + tie) * t1)


class Minimum(Maximum):  # step 59
    pick = "minimum"


def maximum(x0, x1):  # step 59
    return Maximum()(x0, x1)


def minimum(x0, x1):  # step 59
    return Minimum()(x0, x1)


class FloorDivide(_Binary):  # step 59
    """x0 // x1, rounded toward minus infinity (PyTorch's floor_divide): no derivative, PyTorch's error if asked."""

    torch_name = "NotImplemented"  # PyTorch's node for an operation without a derivative

    def forward(self, x0, x1):
        self.keep_shapes("floor_divide", x0, x1)
        if x0.dtype.kind == "b":  # a bool result: PyTorch has no kernel (NumPy computes in int8)
            raise NotImplementedError('"div_floor_cpu" not implemented for \'Bool\'')
        if x0.dtype.kind in "iu" and (x1 == 0).any():
            raise RuntimeError("ZeroDivisionError")  # PyTorch's words for an integer division by zero
        return x0 // x1

    def backward(self, gy):
        raise RuntimeError("derivative for aten::floor_divide is not implemented")


class Remainder(_Binary):  # step 59
    """x0 % x1 with the sign of x1, as Python's and PyTorch's remainder: d/dx0 = 1, d/dx1 = -(x0 // x1), the
    floor division (not floor(x0 / x1): 1 // -inf is -1, where floor(1 / -inf) is -0.0)."""

    torch_name = "RemainderBackward1"  # PyTorch's, for two tensors

    def forward(self, x0, x1):
        self.keep_shapes("remainder", x0, x1)
        if x0.dtype.kind == "b":  # a bool result: PyTorch has no kernel (NumPy computes in int8)
            raise NotImplementedError('"remainder_cpu" not implemented for \'Bool\'')
        if x0.dtype.kind in "iu" and (x1 == 0).any():
            raise RuntimeError("ZeroDivisionError")
        self.save_for_backward(x0 if self.needs_input_grad[1] else None, x1 if self.needs_input_grad[1] else None)
        return x0 % x1

    def backward(self, gy):
        gx1 = None
        if self.needs_input_grad[1]:
            x0, x1 = [array_of(v) for v in self.saved_tensors]
            gx1 = -gy * get_array_module(x0).floor_divide(x0, x1).astype(array_of(gy).dtype)
        return self.sum_to_inputs(gy if self.needs_input_grad[0] else None, gx1)

    def jvp(self, t0, t1):
        x0, x1 = self.primals
        return sum_tangents(t0, None if t1 is None else -get_array_module(x0).floor_divide(x0, x1) * t1)


def floor_divide(x0, x1):  # step 59
    return FloorDivide()(x0, x1)


def remainder(x0, x1):  # step 59
    _refuse_two_numbers("remainder", x0, x1)
    op = Remainder()
    if not isinstance(x1, (Variable, *cuda.array_types)):  # PyTorch's node for a number divisor lists no edge
        op.torch_name, op.scalar_inputs = "RemainderBackward0", (1,)  # for the number
    return op(x0, x1)


# speed: every operation here has one backward formula for arrays and Variables (grad_mode.BackwardMode), but ToDevice,
# whose gradient goes back to another device
formulas_on_arrays(Square, Exp, Sin, Cos, Tanh, Log, Abs, Sqrt, Clamp, Reshape, Transpose, Sum, Mean, Max, Min,
                   TakeAlongDim, LogSumExp, Norm, MatMul, LinearFunction, GetItem, GetItemGrad,
                   Concatenate, Sigmoid, ReLU, MeanSquaredError, Dropout, PowTensor, Where, Maximum, Remainder)


# PyTorch's functions of tensors refuse a number for a tensor (torch.exp(2.0): TypeError), where DeZero's take one
# (step 21): Function.coerce refuses it for these, in PyTorch's words. (torch.add(1, 2), torch.where(c, 1, 2) and the
# operators take numbers; pow and remainder take a number for one operand, and refuse two as torch does.)
for _function, _name in ((Neg, "neg"), (Square, "square"), (Exp, "exp"), (Sin, "sin"), (Cos, "cos"), (Tanh, "tanh"),
                         (Log, "log"), (Abs, "abs"), (Sqrt, "sqrt"), (Clamp, "clamp"), (Sum, "sum"), (Mean, "mean"),
                         (Max, "max"), (Min, "min"), (LogSumExp, "logsumexp"), (Norm, "norm"), (Sigmoid, "sigmoid"),
                         (ReLU, "relu")):
    _function.tensor_arguments = (_name, "input")
MatMul.tensor_arguments, Maximum.tensor_arguments = ("matmul", "input", "other"), ("maximum", "input", "other")
Minimum.tensor_arguments = ("minimum", "input", "other")


# ----- PyTorch's names for the nodes (Function.name) ---------------------------------------------------------------
# Where PyTorch's name for the node it records for the same call is not the class name + "Backward0".

def _reduction_node(f):
    """PyTorch records a reduction of every element and one over some dims as two nodes: SumBackward0, SumBackward1."""
    return f"{type(f).__name__}Backward{0 if f.axis is None else 1}"


def _indexing_node(key):
    """PyTorch's kind of node for x[key]: Index for advanced indexing, else that of the last index that does
    something (PyTorch records one node for each): Select for an int, Slice for a slice, Unsqueeze for None."""
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, (list, *cuda.array_types)) for k in parts):
        return "Index"
    for k in reversed(parts):
        if k is None:
            return "Unsqueeze"
        if isinstance(k, numbers.Integral):
            return "Select"
        if isinstance(k, slice) and k != slice(None):
            return "Slice"
    return "Slice"


Square.torch_name = "PowBackward0"  # PyTorch computes square(x) as x ** 2
Cast.torch_name = ToDevice.torch_name = "ToCopyBackward0"  # x.to(dtype), x.to(device)
Clamp.torch_name = "ClampBackward1"  # PyTorch's node for bounds that are numbers
Reshape.torch_name = "ViewBackward0"  # reshape of contiguous data is a view; flatten too
BroadcastTo.torch_name = "ExpandBackward0"
SumTo.torch_name = "SumBackward1"  # PyTorch's sum_to is a sum over dims, keepdim=True
Sum.torch_name = Mean.torch_name = property(_reduction_node)
Max.torch_name, Min.torch_name = "AmaxBackward0", "AminBackward0"  # max(x) and min(x): MaxBackward1, MinBackward1
LogSumExp.torch_name = "LogsumexpBackward0"
Norm.torch_name = "LinalgVectorNormBackward0"
MatMul.torch_name = "MmBackward0"  # of two matrices; a stack of matrices PyTorch records as views around bmm
LinearFunction.torch_name = property(lambda f: "MmBackward0" if f.bias_shape is None else "AddmmBackward0")
GetItem.torch_name = property(lambda f: _indexing_node(f.key) + "Backward0")
# its backward, when recorded: that of advanced indexing, or of the basic index (SliceBackwardBackward0, ...)
GetItemGrad.torch_name = property(lambda f: "IndexPutImplBackward0" if _indexing_node(f.key) == "Index"
                                  else _indexing_node(f.key) + "BackwardBackward0")
Concatenate.torch_name = "CatBackward0"
ReLU.torch_name = "ReluBackward0"
MeanSquaredError.torch_name = "MseLossBackward0"
Dropout.torch_name = "MulBackward0"  # on the CPU PyTorch multiplies by the scaled mask (NativeDropout on a GPU)


# ----- more of PyTorch's surface (no step): asin, ceil, floor, prod, var, std, movedim ------------------------------

class Asin(Function):
    """arcsin, element-wise (PyTorch's asin): nan outside [-1, 1], d asin(x)/dx = 1 / sqrt(1 - x^2)."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        if x.dtype.kind in "biu":  # integers compute in the default float, as PyTorch's
            x = dtypes.as_floating(x)
        self.save_for_backward(x)  # the derivative needs x (PyTorch saves it too)
        with np.errstate(invalid="ignore"):  # nan outside [-1, 1], without NumPy's warning (PyTorch gives none)
            return get_array_module(x).arcsin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        with np.errstate(divide="ignore"):  # PyTorch's grad * (1 - x^2).rsqrt(): inf at -1 and 1, without a warning
            return gy * (1 - x * x) ** -0.5

    def jvp(self, t):
        x = self.primals[0]
        with np.errstate(divide="ignore"):
            return t * (1 - x * x) ** -0.5


class _Rounding(Function):
    """ceil or floor: a step function, so the derivative is zero everywhere (at the steps too, as PyTorch's)."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    rounding = None  # the array module's function: "ceil" or "floor"

    def forward(self, x):
        if x.dtype.kind == "b":  # PyTorch's refusal and words
            raise NotImplementedError(f'"{self.rounding}_vml_cpu" not implemented for \'Bool\'')
        if x.dtype.kind in "iu":  # an integer is its own ceiling and floor: a copy of its dtype, as PyTorch's
            return x.copy()
        return getattr(get_array_module(x), self.rounding)(x)

    def backward(self, gy):
        # zeros of their own, as PyTorch's zeros_like(grad): not gy * 0, which is NaN where gy is infinite
        gy = array_of(gy)
        return get_array_module(gy).zeros_like(gy)

    def jvp(self, t):
        return get_array_module(t).zeros_like(t)


class Ceil(_Rounding):
    rounding = "ceil"


class Floor(_Rounding):
    rounding = "floor"


def asin(x):
    return Asin()(x)


def ceil(x):
    return Ceil()(x)


def floor(x):
    return Floor()(x)


class Prod(Function):
    """The product of every element, or along one dim `axis` (PyTorch's prod).

    The derivative with respect to an element is the product of the others. Where no element is zero that is y / x,
    as PyTorch computes it; where one is, y / x is 0 / 0, and PyTorch multiplies the products of the elements before
    and after it instead (_products_of_the_others), which this does too.
    """
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis=None, keepdims=False, dtype=None):
        self.axis, self.keepdims, self.dtype = axis, keepdims, dtype

    def forward(self, x):
        # prod(dtype=) casts first; bools and integers multiply in int64, as PyTorch's (and as sum does)
        if self.dtype is not None or x.dtype.kind in "biu":
            x = dtypes.cast(x, np.dtype(np.int64) if self.dtype is None else self.dtype)
        self.x_shape = x.shape
        axis = None if x.ndim == 0 else self.axis  # a 0-d x has dims 0 and -1, which name no axis of its array
        if x.dtype == np.float16:  # in float32, rounded once, as float16 sums are (sum_array)
            y = x.prod(axis=axis, keepdims=self.keepdims, dtype=np.float32).astype(np.float16)
        else:
            y = x.prod(axis=axis, keepdims=self.keepdims)
        self.save_for_backward(x, y)  # PyTorch saves input and result too
        return y

    def backward(self, gy):
        x, y = self.saved_tensors
        if not self.x_shape:
            return gy
        if self.axis is not None and not self.keepdims:  # the reduced dim back, as length 1
            kept = _kept_shape((self.axis,), self.x_shape)
            gy, y = reshape(gy, kept), reshape(y, kept)
        if not (array_of(x) == 0).any():  # (PyTorch's test: any zero anywhere takes the other formula everywhere)
            return gy * (y / x)
        if isinstance(x, Variable):  # create_graph: the other formula, recorded
            return gy * _recorded_products_of_the_others(x, self.axis)
        return gy * _products_of_the_others(x, self.axis)

    def jvp(self, t):  # PyTorch's: the sum of the products of the others times the tangents
        x, y = self.primals[0], self.results[0]
        if x.ndim == 0:
            return t
        axis = self.axis
        if axis is not None and not self.keepdims:
            y = get_array_module(y).expand_dims(y, axis)
        others = _products_of_the_others(x, axis) if (x == 0).any() else y / x
        return (others * t).sum(axis=axis, keepdims=self.keepdims)


def _products_of_the_others(x, axis):
    """For each element of array x, the product of the other elements of its slice along `axis` (of all of x if
    None): the products before it times those after it, cumulative products from either end, as PyTorch's
    prod_safe_zeros_backward computes them (no division, so zeros are no trouble)."""
    xp, shape = get_array_module(x), x.shape
    if axis is None:
        x, axis = x.reshape(-1), 0
    n, before = x.shape[axis], (slice(None),) * axis
    ones = xp.ones_like(x[before + (slice(0, 1),)])
    left = xp.cumprod(xp.concatenate([ones, x[before + (slice(0, n - 1),)]], axis), axis)
    right = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(x[before + (slice(1, n),)], axis)], axis), axis), axis)
    return (left * right).reshape(shape)


def _recorded_products_of_the_others(x, axis):
    """_products_of_the_others of Variable x, recorded, so that it can be differentiated again: each element's as
    the product of its slice without it (n products of n - 1 elements, where PyTorch records cumulative products)."""
    shape = x.shape
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    before = (slice(None),) * axis
    others = [prod(concatenate([x[before + (slice(0, i),)], x[before + (slice(i + 1, None),)]], axis), axis, True)
              for i in range(x.shape[axis])]
    return reshape(concatenate(others, axis), shape)


def prod(x, dim=None, keepdim=False, *, dtype=None):
    """PyTorch's prod(input, *, dtype=None) and prod(input, dim, keepdim=False, *, dtype=None): the product of every
    element, or along one dim (an int: PyTorch's prod takes no tuple), in `dtype` if given."""
    dtype = _dtype_argument("prod", dtype)
    if dim is None:
        if keepdim:  # PyTorch has no prod(input, keepdim=) without a dim
            raise TypeError("prod(): keepdim=True needs a dim")
        return Prod(None, False, dtype)(x)
    return Prod(_dim("prod", dim, _ndim(x)), keepdim, dtype)(x)


class Var(Function):
    """The variance over `axis` (PyTorch's var): sum(|x - mean|^2) / (n - correction), n the number of elements
    reduced. Backward is PyTorch's formula, 2 / (n - correction) * gy * (x - mean), its edges included."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    op = "var"

    def __init__(self, axis, correction, keepdims, named=None):
        self.axis, self.correction, self.keepdims = axis, correction, keepdims
        self.named = named  # the dims as the call named them: None if none were; () for dim=[] (see var_backward)

    def variance(self, x):
        """The variance of array x, in x's (real) dtype."""
        if x.dtype.kind not in "fc":  # PyTorch's refusal and words
            raise RuntimeError("std and var only support floating point and complex dtypes")
        self.x_shape = x.shape
        self.axes = _normalize_axis(self.op, self.axis, x.ndim)
        n = math.prod(x.shape[a] for a in self.axes)
        self.dof = n - self.correction
        if self.dof <= 0:  # PyTorch's warning; then inf (or nan where every element equals the mean), as PyTorch's
            warnings.warn(f"{self.op}(): degrees of freedom is <= 0. Correction should be strictly less than the "
                          "reduction factor (input numel divided by output numel).", UserWarning, stacklevel=5)
        work = x.astype(np.float32) if x.dtype == np.float16 else x  # float16 in float32, as PyTorch's
        d = work - work.sum(axis=self.axes, keepdims=True) / builtins.max(n, 1)
        squares = d.real * d.real + d.imag * d.imag if d.dtype.kind == "c" else d * d
        with np.errstate(divide="ignore", invalid="ignore"):
            return squares.sum(axis=self.axes, keepdims=self.keepdims) / builtins.max(self.dof, 0)

    def forward(self, x):
        self.save_for_backward(x)  # (PyTorch saves x too)
        return self.variance(x).astype(x.real.dtype, copy=False)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return self.var_backward(gy, x)

    def var_backward(self, gy, x):
        """PyTorch's var_backward: with dims named, n is the number of elements over those dims, and dim=[] (which
        reduces every dim) counts 1, so that PyTorch's gradient there is infinite; it is followed."""
        xa = array_of(x)
        if xa.size == 0:
            return get_array_module(xa).zeros_like(xa)
        gy = _keep_axes(gy, self.axes, self.x_shape, self.keepdims)
        if self.named is None or not self.x_shape:
            if self.dof <= 0:  # inf, or nan where x is its mean (inf * 0), as PyTorch's
                return gy * get_array_module(xa).where(xa == xa.mean(), np.nan, np.inf).astype(xa.dtype)
            return (2.0 / self.dof) * gy * (x - Mean(None, True)(x))
        dof = math.prod(self.x_shape[a] for a in self.named) - self.correction
        scale = 2.0 / dof if dof else math.inf  # (PyTorch divides in floating point: 2 / 0 is inf)
        return scale * gy * (x - Mean(self.named or None, True)(x))

    def jvp(self, t):  # d var = 2 / (n - correction) * sum((x - mean) dx)
        x = self.primals[0]
        centred = x - x.mean(axis=self.axes, keepdims=True)
        return (2.0 / self.dof if self.dof > 0 else math.inf) * (centred * t).sum(axis=self.axes,
                                                                                   keepdims=self.keepdims)


class Std(Var):
    """The standard deviation, sqrt(var) (PyTorch's std); its gradient is var's times gy / (2 std), 0 where std is 0."""

    op = "std"

    def forward(self, x):
        y = get_array_module(x).sqrt(self.variance(x)).astype(x.real.dtype, copy=False)
        self.save_for_backward(x, y)  # (PyTorch saves both too)
        return y

    def backward(self, gy):
        x, y = self.saved_tensors
        zero = _mask(array_of(y) == 0)
        # PyTorch's (grad / (2 std)).masked_fill_(std == 0, 0); dividing by 1 where std is 0 keeps NumPy quiet
        return self.var_backward(where(zero, 0.0, gy / (y * 2 + zero)), x)

    def jvp(self, t):
        y = self.results[0]
        zero = y == 0
        return get_array_module(y).where(zero, 0, super().jvp(t) / (2 * y + zero))


def _variance_arguments(op, x, dim, unbiased, keepdim, correction):
    """(axes, correction, keepdim, named) from PyTorch's three signatures: (input, dim, unbiased=True, keepdim=False),
    (input, dim=None, *, correction=1, keepdim=False) and (input, unbiased=True)."""
    if isinstance(dim, bool):  # var(x, False): the third signature
        if unbiased is not None:
            raise TypeError(f"{op}() received an invalid combination of arguments: unbiased given twice")
        dim, unbiased = None, dim
    if unbiased is not None:
        if correction is not None:  # PyTorch's signatures take one or the other
            raise TypeError(f"{op}() received an invalid combination of arguments: unbiased and correction, two "
                            "ways of saying one thing")
        if not isinstance(unbiased, (bool, np.bool_)):
            raise TypeError(f"{op}(): argument 'unbiased' must be bool, not {type(unbiased).__name__}")
        correction = 1 if unbiased else 0
    elif correction is None:
        correction = 1
    elif not isinstance(correction, numbers.Real):
        raise TypeError(f"{op}(): argument 'correction' must be Number, not {type(correction).__name__}")
    if dim is None:
        return None, correction, keepdim, None
    axes = _dims(op, dim, _ndim(x))  # None for dim=[]: every dim, as PyTorch reads it
    return axes, correction, keepdim, (() if axes is None else axes)


def var(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """PyTorch's var: the variance over `dim` (every dim by default), divided by n - correction (1 by default;
    unbiased=False is correction=0)."""
    return Var(*_variance_arguments("var", x, dim, unbiased, keepdim, correction))(x)


def std(x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """PyTorch's std: the square root of var, with var's arguments."""
    return Std(*_variance_arguments("std", x, dim, unbiased, keepdim, correction))(x)


def movedim(x, source, destination):
    """PyTorch's movedim (and moveaxis): x's dims `source` (an int or a sequence of ints) moved to the places
    `destination`, the others kept in their order; a view (PyTorch records it as a permute)."""
    x = as_variable(x, "movedim")
    given = {}
    for name, dims in (("source", source), ("destination", destination)):
        dims = [dims] if isinstance(dims, numbers.Integral) else dims
        if not isinstance(dims, (tuple, list)) or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                                         for d in dims):
            raise TypeError(f"movedim(): {name} must be an int or a tuple of ints, got {dims!r}")
        given[name] = [int(d) for d in dims]
    if len(given["source"]) != len(given["destination"]):  # PyTorch's words
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({given['source']} dims) should "
                           f"contain the same number of dims as destination ({given['destination']} dims)")
    moved = {}
    for name, dims in given.items():
        moved[name] = [_dim("movedim", d, x.ndim) for d in dims]  # (a 0-d x has dims 0 and -1, and nothing to move)
        if len(set(moved[name])) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({dims})")
    perm = [None] * x.ndim  # dim i of the result is dim perm[i] of x
    for s, d in zip(moved["source"], moved["destination"]):
        if x.ndim:
            perm[d] = s
    rest = iter(i for i in range(x.ndim) if i not in moved["source"])
    return _apply_permutation(x, tuple(next(rest) if p is None else p for p in perm), "PermuteBackward0")


formulas_on_arrays(Asin, Ceil, Floor, Prod, Var, Std)  # speed
for _function, _name in ((Asin, "asin"), (Ceil, "ceil"), (Floor, "floor"), (Prod, "prod"), (Var, "var"), (Std, "std")):
    _function.tensor_arguments = (_name, "input")
Prod.torch_name = property(_reduction_node)  # ProdBackward0 of every element, ProdBackward1 along a dim
Concatenate.promotes = True  # cat computes in its inputs' promoted dtype, as PyTorch's (NumPy's promotion differs)
