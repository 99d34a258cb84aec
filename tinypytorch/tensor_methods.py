"""Variable's tensor methods that are operations of the floors above core (steps 29-31, 36, 48, 50).

core defines what every Variable is: its data, its place in the graph, its gradient, the
arithmetic operators. The methods that call tinypytorch.functions, inplace or classification
(`x.reshape(2, 3)`, `x.sum(dim=0)`, `x.add_(y)`, `x.to("cuda")`, `x.softmax(1)`) are defined
here, in TensorMethods, and `wire_tensor_methods()` puts them on Variable once, as the package
is imported (DeZero wires its operators the same way, in one function). So core imports none
of those modules, and for a user `x.reshape` is a method like any other.
"""
import numbers

import numpy as np

from tinypytorch import classification as C
from tinypytorch import comparisons, core, dtypes
from tinypytorch import cuda, inplace
from tinypytorch import factories, linear_algebra, structure
from tinypytorch import functions as F
from tinypytorch.core import Variable, check_sub
from tinypytorch.grad_mode import no_grad


class TensorMethods:
    """Methods for Variable, wired onto it by wire_tensor_methods (never instantiated)."""

    # shapes (step 29)
    def reshape(self, *shape):
        """`x.reshape(2, 3)` or `x.reshape((2, 3))`, as in NumPy and PyTorch (step 29)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return F.reshape(self, shape)

    def transpose(self, dim0, dim1):
        """Swap dimensions dim0 and dim1, as PyTorch's `x.transpose(dim0, dim1)` does (step 29)."""
        return F.transpose(self, dim0, dim1)

    def permute(self, *dims):
        """`x.permute(2, 0, 1)` or `x.permute((2, 0, 1))`: dim i of the result is dim dims[i] of x (step 29)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = dims[0]
        return F.permute(self, dims)

    @property
    def T(self):
        """All dims reversed, as NumPy's `.T` (step 29); for a matrix, its transpose."""
        return F.permute(self, tuple(reversed(range(self.ndim))))

    def view(self, *shape):
        """reshape that never copies: PyTorch's error where the data cannot be viewed with the new shape."""
        y = self.reshape(*shape)
        if y.data.size and not cuda.get_array_module(y.data).may_share_memory(y.data, self.data):
            raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                               "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
        return y

    def flatten(self, start_dim=0, end_dim=-1):
        return F.flatten(self, start_dim, end_dim)

    # reductions (steps 30, 50)
    def sum(self, *args, **kwargs):
        """`x.sum()`, `x.sum(dim, keepdim)` as PyTorch, or `x.sum(axis=..., keepdims=...)` as NumPy (step 30)."""
        return F.sum(self, *args, **kwargs)

    def mean(self, *args, **kwargs):
        return F.mean(self, *args, **kwargs)  # step 50

    def max(self, *args, **kwargs):
        """The largest value; `x.max(dim)` the (values, indices) pair of PyTorch; `x.max(axis=...)` NumPy's amax."""
        return F.max(self, *args, **kwargs)  # step 50

    # indexing and matrices (step 31)
    def __getitem__(self, key):
        return F.get_item(self, key)

    def __matmul__(self, other):
        return F.matmul(self, other)

    def __rmatmul__(self, other):
        return F.matmul(other, self)  # step 31: ndarray @ Variable

    matmul = __matmul__

    def mm(self, other):
        if self.ndim != 2:
            raise RuntimeError("self must be a matrix")
        if getattr(other, "ndim", 0) != 2:
            raise RuntimeError("mat2 must be a matrix")
        return F.matmul(self, other)

    def __abs__(self):
        return F.abs(self)

    # step 59: powers, floor division and remainder with PyTorch's promotion; a tensor exponent too
    __pow__ = pow = F.pow  # (the function itself: x ** y is F.pow(x, y))

    def __rpow__(self, base):
        return F.pow(base, self)  # `2 ** x`

    def __floordiv__(self, other):
        return F.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return F.floor_divide(other, self)

    def __mod__(self, other):
        return F.remainder(self, other)

    def __rmod__(self, other):
        return F.remainder(other, self)

    floor_divide, remainder = __floordiv__, __mod__

    def all(self, dim=None, keepdim=False):
        """Whether every element (over `dim`) is true (nonzero): a bool Variable, as PyTorch's `x.all()`."""
        return comparisons.all(self, dim, keepdim)

    def any(self, dim=None, keepdim=False):
        """Whether some element (over `dim`) is true (nonzero): a bool Variable, as PyTorch's `x.any()`."""
        return comparisons.any(self, dim, keepdim)

    def where(self, condition, other):
        """PyTorch's `x.where(condition, y)`: torch.where(condition, x, y)."""
        return F.where(condition, self, other)

    def clamp(self, min=None, max=None):  # noqa: A002 (PyTorch's names)
        return F.clamp(self, min, max)

    clip = clamp

    # in-place operations (step 36), PyTorch's names (tinypytorch.inplace says how they work)
    def add_(self, other):
        return inplace.apply("add_", self, other)

    def sub_(self, other):
        check_sub(self, other)  # step 59: before apply makes a Python bool a number of x's dtype
        return inplace.apply("sub_", self, other)

    def mul_(self, other):
        return inplace.apply("mul_", self, other)

    def div_(self, other):
        return inplace.apply("div_", self, other)

    def zero_(self):
        return inplace.zero_(self)

    def copy_(self, other, non_blocking=False):  # PyTorch's keyword is other= (its documentation says src)
        """Copy other's values into this variable in place (broadcasting other), differentiably as PyTorch's;
        non_blocking changes nothing here (a NumPy or CuPy copy is done when it returns)."""
        return inplace.set_item("copy_", self, Ellipsis, other)

    # PyTorch's augmented assignments are its in-place operations: `p -= lr * p.grad` changes p itself.
    # (Without them Python would rebind p to a new variable that is no longer the parameter.)
    __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_

    def __setitem__(self, key, value):
        """`x[key] = value` in place, as PyTorch's (recorded as an in-place operation when x or value requires grad)."""
        inplace.set_item("setitem", self, key, value)

    # devices (step 48) and dtypes, PyTorch's names
    def to(self, *args, device=None, dtype=None):
        """This variable on `device` and/or as `dtype` (`x.to("cuda")`, `x.to(np.float32)`), differentiably.

        The variable itself if nothing changes, as in PyTorch; else a copy whose gradient goes back
        to this variable's device and dtype.
        """
        for arg in args:  # PyTorch's positional forms: to(device), to(dtype), to(device, dtype)
            if isinstance(arg, (str, cuda.device)):
                device = arg
            else:
                dtype = arg
        return F.to(self, device, dtype)

    def cuda(self):
        """This variable on the GPU (PyTorch's `Tensor.cuda`)."""
        return F.to(self, "cuda")

    def cpu(self):
        """This variable in host memory, as a NumPy array (PyTorch's `Tensor.cpu`)."""
        return F.to(self, "cpu")

    def float(self):
        return F.to(self, dtype=np.float32)

    def double(self):
        return F.to(self, dtype=np.float64)

    def half(self):
        return F.to(self, dtype=np.float16)

    # An integer or bool copy has no gradient (PyTorch's result requires none): made without a graph
    def long(self):
        with no_grad():
            return F.to(self, dtype=np.int64)

    def int(self):
        with no_grad():
            return F.to(self, dtype=np.int32)

    def bool(self):
        with no_grad():
            return F.to(self, dtype=np.bool_)

    # classification (step 50)
    def softmax(self, dim):
        return C.softmax(self, dim=dim)

    def log_softmax(self, dim):
        return C.log_softmax(self, dim=dim)

    # more of PyTorch's methods (no step)
    def mul(self, other):
        return core.mul(self, other)

    def view_as(self, other):
        """`x.view(other.size())`, as PyTorch's: no copy, PyTorch's error where the data cannot be viewed so."""
        if not isinstance(other, Variable):
            kind = type(other)
            kind = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
            raise TypeError(f"view_as(): argument 'other' (position 1) must be Tensor, not {kind}")
        return self.view(other.shape)

    def movedim(self, source, destination):
        return F.movedim(self, source, destination)

    def is_contiguous(self):
        """PyTorch's: whether the elements lie in memory in C order without gaps (dimensions of length 1 aside),
        which `view` of any shape needs (tinypytorch.layout says how results are laid out)."""
        return bool(self.data.flags.c_contiguous)

    def contiguous(self):
        """PyTorch's: x itself if it is contiguous, else a copy that is (a CloneBackward0 node in the graph)."""
        return self if self.data.flags.c_contiguous else core.Clone(contiguous=True)(self)

    moveaxis = movedim

    def type(self, dtype=None, non_blocking=False):
        """PyTorch's `x.type()`: the legacy name of x's type, 'torch.FloatTensor' (on a GPU 'torch.cuda.FloatTensor');
        `x.type(dtype)` or `x.type('torch.DoubleTensor')`: x as that type, x itself if it has it already."""
        if dtype is None:
            return dtypes.tensor_type(self)
        device = None
        if isinstance(dtype, str):
            dtype, device = dtypes.from_tensor_type(dtype)
        if np.dtype(dtype).kind in "fc":
            return F.to(self, device, dtype)
        with no_grad():  # an integer or bool copy has no gradient (as long() and bool())
            return F.to(self, device, dtype)

    def sin_(self):
        return inplace.sin_(self)

    def unsqueeze_(self, dim):
        return inplace.unsqueeze_(self, dim)

    def bitwise_xor_(self, other):
        return comparisons.bitwise_xor_(self, other)

    def __xor__(self, other):
        if not isinstance(other, (Variable, *cuda.array_types, numbers.Number, np.bool_)):
            return NotImplemented  # Python's TypeError, as for a torch tensor
        return comparisons.bitwise_xor(self, other)

    def __rxor__(self, other):
        if not isinstance(other, (Variable, *cuda.array_types, numbers.Number, np.bool_)):
            return NotImplemented
        return comparisons.bitwise_xor(other, self)

    __ixor__ = bitwise_xor_  # in place, as PyTorch's `^=`


# PyTorch's tensor methods that are nothing but a call of the function of the same name in tinypytorch.functions
FORWARDED = ("min", "amax", "amin", "argmax", "argmin", "logsumexp", "norm", "exp", "log", "sin", "cos", "tanh",
             "maximum", "minimum",
             "sigmoid", "relu", "abs", "sqrt", "square", "unsqueeze", "squeeze", "expand", "t")


# PyTorch's tensor methods that are functions of other modules taking the tensor first: factories of x's dtype and
# device (x.new_zeros), and x's structure and linear algebra (x.scatter_, x.unique, x.cross, x.svd)
def _other_modules():
    names = {factories: ("new_tensor", "new_empty", "new_zeros", "new_ones", "new_full"),
             structure: ("scatter", "scatter_", "unique"), linear_algebra: ("cross", "svd")}
    return {name: getattr(module, name) for module, names_ in names.items() for name in names_}


def _forwarding(function, module="functions"):
    def method(self, *args, **kwargs):
        return function(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = function.__name__
    method.__doc__ = f"`x.{function.__name__}(...)` is `tinypytorch.{module}.{function.__name__}(x, ...)`."
    return method


# more of them, each a call of the function of the same name (no step)
FORWARDED += ("asin", "ceil", "floor", "prod", "var", "std")
FORWARDED_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose", "bitwise_xor")


def wire_tensor_methods():
    """Give Variable the methods of TensorMethods and of FORWARDED, once (the package's face calls it)."""
    for name, method in vars(TensorMethods).items():
        if not name.startswith("__") or name in _OPERATORS:
            setattr(Variable, name, method)
    for name in FORWARDED:
        setattr(Variable, name, _forwarding(getattr(F, name)))
    for name, function in _other_modules().items():
        setattr(Variable, name, function)
    for name in FORWARDED_COMPARISONS:
        setattr(Variable, name, _forwarding(getattr(comparisons, name), "comparisons"))


_OPERATORS = ("__getitem__", "__setitem__", "__matmul__", "__rmatmul__", "__abs__", "__pow__", "__rpow__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__",
              "__iadd__", "__isub__", "__imul__", "__itruediv__")
_OPERATORS += ("__xor__", "__rxor__", "__ixor__")  # (no step)
