"""Operations that arrange elements: `stack`, `scatter` (and `Tensor.scatter_`), `unique`, as PyTorch's.

    y = tinypytorch.stack([a, b], dim=1)                       # a new dimension, a and b along it
    one_hot = tinypytorch.zeros(10).scatter_(0, tinypytorch.tensor(3), value=1)
    values, counts = tinypytorch.unique(labels, return_counts=True)

stack and scatter are differentiable as PyTorch's: stack's gradient is its output's slices, scatter's is the
output's gradient with the overwritten elements zeroed (for `self`) and picked at `index` (for `src`). unique
has no derivative in PyTorch: its values require grad when the input does, and a backward pass through them
raises PyTorch's NotImplementedError, as scatter with `reduce=` raises its RuntimeError.
"""
import builtins
import numbers
import warnings

import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch.core import Function, Variable, as_variable, astype, formulas_on_arrays
from tinypytorch.factories import check_out, write_out
from tinypytorch.functions import _along
from tinypytorch.grad_mode import is_grad_enabled, no_grad
from tinypytorch.inplace import alias, check_writable, record, refuse_tangents, write
from tinypytorch.views import refresh_view


def _variables(op, tensors, argument="tensors"):
    """A sequence of Variables, refused as PyTorch refuses what is not one (a single tensor, a generator, numbers)."""
    if not isinstance(tensors, (tuple, list)):
        raise TypeError(f"{op}(): argument '{argument}' (position 1) must be tuple of Tensors, not "
                        f"{type(tensors).__name__}")
    for i, x in enumerate(tensors):
        if not isinstance(x, (Variable, *cuda.array_types)):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}")
    return [as_variable(x, op) for x in tensors]


def wrap_dim(op, dim, ndim):
    """`dim` (negative: from the end) as an index in range(ndim), refused in PyTorch's words; a 0-d tensor
    answers to dims 0 and -1, as in PyTorch."""
    n = builtins.max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _int_argument(op, name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}(): argument '{name}' must be int, not {type(value).__name__}")
    return int(value)


# ----- stack -----------------------------------------------------------------------------------------------

class Stack(Function):
    """Tensors of one shape joined along a new dimension `dim` (PyTorch's StackBackward0): each input's gradient
    is its slice of the output's gradient, a view."""

    def __init__(self, dim):
        self.dim = dim

    def forward(self, *xs):
        self.count = len(xs)
        return cuda.get_array_module(*xs).stack(xs, axis=self.dim)

    def backward(self, gy):
        before = (slice(None),) * self.dim
        return tuple(gy[before + (i,)] for i in range(self.count))

    jvp = Function.jvp_by_forward


def stack(tensors, dim=0, *, out=None):
    """Join a sequence of Variables of one shape along a new dimension `dim` (PyTorch's `torch.stack`; a negative
    dim counts from the end of the result's dims). Inputs of several dtypes are promoted to their result_type, as
    PyTorch's; the gradient goes back to each in its own dtype."""
    xs = _variables("stack", tensors)
    dim = _int_argument("stack", "dim", dim)
    if not xs:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, x in enumerate(xs[1:], 1):
        if x.shape != xs[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(xs[0].shape)} at entry 0 "
                               f"and {list(x.shape)} at entry {i}")
    dim = wrap_dim("stack", dim, xs[0].ndim + 1)
    dtype = dtypes.result_type(*xs) if any(x.data.dtype != xs[0].data.dtype for x in xs) else None
    if out is not None:
        check_out("stack", out, xs)
    if dtype is not None:  # a Cast node each, so that each gradient comes back in its input's dtype
        xs = [x if x.data.dtype == dtype else astype(x, dtype) for x in xs]
    y = Stack(dim)(*xs)
    return y if out is None else write_out("stack", y.data, out)


# ----- scatter ---------------------------------------------------------------------------------------------

_REDUCTIONS = ("add", "multiply")
_warned_reduce = [False]  # the deprecation of reduce= with a tensor src: PyTorch warns once a process


class Scatter(Function):
    """self with the elements at `index` along `dim` replaced by src's (or by `value`): PyTorch's scatter.

    Backward (PyTorch's formulas): self's gradient is the output's with the replaced elements zeroed, itself a
    scatter of the value 0; src's is the output's gradient at `index` (a gather), an index whose shape src must
    have, as PyTorch's engine demands. With `reduce` ("add", "multiply") there is no derivative, as in PyTorch.
    """

    def __init__(self, dim, index, value=None, reduce=None):
        self.dim, self.index, self.value, self.reduce = dim, index, value, reduce

    def forward(self, x, src=None):
        xp = cuda.get_array_module(x)
        out = x.copy()
        index = self.index
        scalar = x.ndim == 0  # PyTorch reads a 0-d self, index and src as of one element
        if scalar:
            out = out.reshape(1)
        if index.ndim == 0:
            index = index.reshape(1)
        key = _along(index, self.dim, True, index.shape)
        if src is None:
            values = self.value
        else:
            self.src_shape = src.shape
            values = src.reshape(1) if src.ndim == 0 else src
            values = values[tuple(slice(0, n) for n in index.shape)]
        if self.reduce is None:
            out[key] = values
        else:
            getattr(xp, self.reduce).at(out, key, values)
        self.save_for_backward(self.index)  # PyTorch's backward keeps the index, and nothing else
        return out.reshape(()) if scalar else out

    def backward(self, gy):
        if self.reduce is not None:  # PyTorch's words: scatter with reduce has no derivative
            raise RuntimeError("derivative for aten::scatter is not implemented")
        (index,) = self.saved_tensors
        index = index.data if isinstance(index, Variable) else index
        gx = Scatter(self.dim, index, 0.0)(gy) if self.needs_input_grad[0] else None
        if len(self.needs_input_grad) == 1:
            return gx
        gsrc = None
        if self.needs_input_grad[1]:
            gsrc = _gather(gy, self.dim, index)
            if gsrc.shape != self.src_shape:
                raise RuntimeError(f"Function ScatterBackward0 returned an invalid gradient at index 1 - got "
                                   f"{list(gsrc.shape)} but expected shape compatible with {list(self.src_shape)}")
        return gx, gsrc

    def jvp(self, t, t_src=None):
        """Linear in (self, src): the same scatter of the tangents, the value's place a zero tangent."""
        xp = cuda.get_array_module(*self.primals)
        if self.reduce is not None:
            return super().jvp(t, t_src)
        t = xp.zeros_like(self.primals[0]) if t is None else t
        if len(self.primals) == 1:
            return Scatter(self.dim, self.index, 0.0).forward(t)
        t_src = xp.zeros_like(self.primals[1]) if t_src is None else t_src
        return Scatter(self.dim, self.index).forward(t, t_src)


def _gather(g, dim, index):
    """g's elements at `index` along `dim` (PyTorch's gather), as an index of g: differentiable (GetItem) for a
    Variable, plain indexing for an array."""
    shape = g.shape
    if len(shape) == 0:  # a 0-d self: one element, as of shape (1,)
        return g.reshape(1)[index.reshape(-1)].reshape(index.shape)
    key = _along(index.reshape(1) if index.ndim == 0 else index, dim, True, index.shape or (1,))
    picked = g[key]
    return picked.reshape(index.shape) if index.ndim == 0 else picked


def _torch_scatter_name(f):
    if f.reduce is not None:
        return "NotImplemented"
    return "ScatterBackward0" if f.value is None else "ScatterBackward1"


Scatter.torch_name = property(_torch_scatter_name)


def _scatter_arguments(op, x, dim, index, src, value, reduce):
    """The checked arguments of scatter and scatter_: (dim as a non-negative int, index as an array, src as a
    Variable or None, value as a number of x's dtype or None), refused as PyTorch refuses them."""
    if not isinstance(x, Variable):
        raise TypeError(f"{op}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    dim = _int_argument(op, "dim", dim)
    if isinstance(index, cuda.array_types):
        index = Variable(index, requires_grad=False)
    if not isinstance(index, Variable):
        raise TypeError(f"{op}(): argument 'index' (position 2) must be Tensor, not {type(index).__name__}")
    if src is not None and value is not None:
        raise TypeError(f"{op}() got both src and value: pass one (a tensor as src, a number as value)")
    if src is not None and not isinstance(src, (Variable, *cuda.array_types)):
        if not isinstance(src, (numbers.Number, np.bool_)):
            raise TypeError(f"{op}(): argument 'src' (position 3) must be Tensor or a number, not "
                            f"{type(src).__name__}")
        src, value = None, src  # scatter(dim, index, 2.0): the value form, positionally
    if value is not None:
        if isinstance(value, Variable):  # a 0-d tensor is read as a number, as PyTorch's Scalar
            if value.ndim != 0:
                raise TypeError(f"{op}(): argument 'value' must be Number, not Tensor")
            value = value.item()
        if not isinstance(value, (numbers.Number, np.bool_)):
            raise TypeError(f"{op}(): argument 'value' must be Number, not {type(value).__name__}")
    elif src is None:
        raise TypeError(f"{op}() missing 1 required argument: 'src' or 'value'")
    if reduce is not None and reduce not in _REDUCTIONS:
        raise RuntimeError("reduce argument must be either add or multiply.")
    if src is not None:
        src = as_variable(src, op)
        if src.data.dtype != x.data.dtype:
            raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
        if reduce is not None and not _warned_reduce[0]:  # once a process, as PyTorch's TORCH_WARN_ONCE
            _warned_reduce[0] = True
            warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in "
                          "a future PyTorch release. Use torch.scatter_reduce instead for more reduction options.",
                          UserWarning, stacklevel=3)
    index_array = index.data
    if index_array.dtype not in (np.int64, np.int32):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    ndim = builtins.max(x.ndim, 1)  # PyTorch reads a 0-d tensor as one of one element here
    if builtins.max(index_array.ndim, 1) != ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    dim = wrap_dim(op, dim, x.ndim)
    _check_scatter_shapes(x, dim, index_array, src)
    _check_scatter_bounds(x, dim, index_array)
    if value is not None:  # cast to x's dtype as PyTorch casts a Scalar (2.7 into an int64 x is 2)
        value = x.data.dtype.type(value)
    return dim, index_array, src, value


def _shape(a):
    return tuple(a.shape) if a.ndim else (1,)


def _check_scatter_shapes(x, dim, index, src):
    """PyTorch's: index no larger than self apart from `dim`, and no larger than src anywhere."""
    index_shape, self_shape = _shape(index), _shape(x)
    if index.size == 0:
        return
    too_big = any(n > m for d, (n, m) in enumerate(zip(index_shape, self_shape)) if d != dim)
    if src is not None:
        src_shape = _shape(src)
        if too_big or any(n > m for n, m in zip(index_shape, src_shape)):
            raise RuntimeError(f"Expected index {list(index_shape)} to be no larger than self {list(self_shape)} "
                               f"apart from dimension {dim} and to be no larger size than src {list(src_shape)}")
    elif too_big:
        raise RuntimeError(f"Expected index {list(index_shape)} to be no larger than self {list(self_shape)} apart "
                           f"from dimension {dim}")


def _check_scatter_bounds(x, dim, index):
    """Every index within [0, size) of dim (PyTorch's words; a negative index is refused, not counted from the end)."""
    if index.size == 0:
        return
    size = _shape(x)[dim]
    wrong = (index < 0) | (index >= size)
    if bool(wrong.any()):
        first = int(index[wrong].reshape(-1)[0])
        raise RuntimeError(f"index {first} is out of bounds for dimension {dim} with size {size}")


def scatter(input, dim, index, src=None, *, value=None, reduce=None, out=None):  # noqa: A002 (PyTorch's name)
    """A copy of `input` with the elements at `index` along `dim` replaced by src's (PyTorch's `torch.scatter`):
    out[i][index[i][j]] = src[i][j] for dim 1, and so on. `src` a Variable of input's dtype, or a number (also as
    `value=`), cast to input's dtype. With `reduce` ("add" or "multiply") the elements are combined instead (no
    derivative, as in PyTorch). Where index repeats a position, which write wins is unspecified in PyTorch; here the
    last. Differentiable with respect to input and src."""
    dim, index, src, value = _scatter_arguments("scatter", input, dim, index, src, value, reduce)
    inputs = (input,) if src is None else (input, src)
    if out is not None:
        check_out("scatter", out, inputs)
    y = Scatter(dim, index, value, reduce)(*inputs)
    return y if out is None else write_out("scatter", y.data, out, exact_dtype=True)


def scatter_(input, dim, index, src=None, *, value=None, reduce=None):  # noqa: A002
    """`x.scatter_(dim, index, src)` (or `value=`): scatter in place (PyTorch's `Tensor.scatter_`); returns x.

    An in-place operation of the package's (tinypytorch.inplace): refused on a leaf that requires grad, counted
    by x's version counter, and recorded as the out-of-place scatter where a gradient can flow."""
    x = input
    dim, index, src, value = _scatter_arguments("scatter_", x, dim, index, src, value, reduce)
    check_writable("scatter_", x, src)
    refuse_tangents("scatter_", x, *(() if src is None else (src,)))
    f = Scatter(dim, index, value, reduce)
    srcs = () if src is None else (src,)
    if not (is_grad_enabled() and (x.requires_grad or (src is not None and src.requires_grad))):
        with no_grad():
            write("scatter_", x, f(Variable(x.data, requires_grad=False), *srcs).data)
        return x
    if x.view_record is not None:  # a view whose base changed is made again first
        refresh_view(x)
    return record("scatter_", x, f(alias(x), *srcs))


# ----- unique ----------------------------------------------------------------------------------------------

class Unique(Function):
    """The distinct values of x (or slices along `dim`), sorted, with the inverse indices and the counts.

    No derivative, as in PyTorch: the values require grad when x does, and backward through them raises."""

    def __init__(self, dim):
        self.dim = dim

    @property
    def torch_name(self):
        return "Unique2Backward0" if self.dim is None else "UniqueDimBackward0"

    def forward(self, x):
        values, *self.indices = _unique(x) if self.dim is None else _unique_dim(x, self.dim)
        return values  # the inverse and the counts are integers outside the graph, as PyTorch's (no grad_fn)

    def backward(self, *gys):
        raise NotImplementedError(f"the derivative for '{'_unique2' if self.dim is None else 'unique_dim'}' is not "
                                  "implemented.")


def _stable_argsort(xp, a):
    """The order that sorts a, ties in their order: NumPy's stable sort; CuPy's sort is stable (and takes no kind)."""
    return xp.argsort(a, kind="stable") if xp is np else xp.argsort(a)


def _groups(xp, different):
    """From `different` (True where a sorted element starts a new group, the first excluded): each element's group
    and each group's count."""
    starts = xp.concatenate([xp.ones(1, dtype=bool), different])
    group = xp.cumsum(starts) - 1
    first = xp.nonzero(starts)[0]
    counts = xp.diff(xp.concatenate([first, xp.asarray([starts.size], dtype=first.dtype)]))
    return starts, group.astype(np.int64), counts.astype(np.int64)


def _unique(x):
    """Unique elements of x flattened: (values, inverse of x's shape, counts). NaNs are all distinct, as in PyTorch
    (NumPy's unique would merge them)."""
    xp = cuda.get_array_module(x)
    flat = x.reshape(-1)
    if flat.size == 0:
        return flat.copy(), xp.zeros(x.shape, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    order = _stable_argsort(xp, flat)
    ordered = flat[order]
    starts, group, counts = _groups(xp, ordered[1:] != ordered[:-1])
    inverse = xp.empty(flat.size, dtype=np.int64)
    inverse[order] = group
    return ordered[starts], inverse.reshape(x.shape), counts


def _unique_dim(x, dim):
    """Unique slices of x along `dim`, in lexicographic order: (values, inverse of length x.shape[dim], counts)."""
    xp = cuda.get_array_module(x)
    moved = xp.moveaxis(x, dim, 0)
    n = moved.shape[0]
    rows = moved.reshape(n, int(np.prod(moved.shape[1:])))
    order = xp.arange(n)
    for column in reversed(range(rows.shape[1])):  # stable sorts, the last key first: lexicographic order
        order = order[_stable_argsort(xp, rows[order, column])]
    ordered = rows[order]
    if n == 0:
        return x.copy(), xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=np.int64)
    starts, group, counts = _groups(xp, (ordered[1:] != ordered[:-1]).any(axis=1))
    inverse = xp.empty(n, dtype=np.int64)
    inverse[order] = group
    values = moved[order][starts]
    return xp.moveaxis(values, 0, dim), inverse, counts


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct elements of `input` (PyTorch's `torch.unique`), in ascending order; with `dim`, the distinct
    slices along dim, in lexicographic order. With return_inverse, also where each element (slice) of input went
    (int64, input's shape, or input.shape[dim]); with return_counts, how many times each value appears (int64).

    The values are sorted whatever `sorted` says, as PyTorch's CPU unique sorts them. NaNs are all distinct, as in
    PyTorch. No derivative: the values require grad when input does, and backward through them raises PyTorch's
    NotImplementedError."""
    x = input
    if not isinstance(x, Variable):
        raise TypeError(f"unique(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    if dim is not None:
        dim = _int_argument("unique", "dim", dim)
        if x.ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        dim = wrap_dim("unique", dim, x.ndim)
        if any(n == 0 for d, n in enumerate(x.shape) if d != dim):
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    f = Unique(dim)
    values = f(x)
    inverse, counts = (Variable(a, requires_grad=False) for a in f.indices)
    del f.indices  # (the graph keeps f: it need not keep these)
    if not (return_inverse or return_counts):
        return values
    return (values,) + ((inverse,) if return_inverse else ()) + ((counts,) if return_counts else ())


formulas_on_arrays(Stack, Scatter)  # speed: their backward runs on arrays too (grad_mode.BackwardMode)
