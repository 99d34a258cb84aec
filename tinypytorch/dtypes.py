"""PyTorch's dtype rules (step 59), in one place every operation asks: the default dtype, type promotion, casting.

NumPy and PyTorch agree on what one dtype holds, and part ways on three rules, where the package follows PyTorch:

- The default floating point dtype is float32 (`get_default_dtype`, `set_default_dtype`): Python floats, integer
  inputs to floating operations (`exp`, `sqrt`, `/`) and the parameters of `nn` modules are made in it. NumPy's
  is float64.
- Promotion goes by category first (bool < integer < floating < complex), and among operands by rank: a tensor
  with dimensions outranks a 0-d tensor, which outranks a Python number. A lower rank changes the result only if
  its category is higher: float32 times a 0-d float64 tensor stays float32, an int64 tensor times 0.5 is float32.
  NumPy promotes by value of dtype alone (its Python numbers are "weak", 0-d arrays are not).
- An in-place operation may not cast its result down a category: an int tensor cannot take `add_(1.5)`.

A dtype is PyTorch's kind of object (`dtype` below): one per dtype, so `x.dtype is tinypytorch.float32`, printed
as PyTorch prints it, `torch.float32`. It holds NumPy's dtype, which NumPy reads through `__numpy_dtype__` (NumPy
2.4) or `dtype` (older NumPy, CuPy), and equals it: `x.dtype == np.float32` holds too. Only the public names
(`x.dtype`, `get_default_dtype`, `promote_types`, `result_type`, the factories' dtypes) give these objects; inside,
the package works with its arrays' NumPy dtypes (`x.data.dtype`), which NumPy reads fastest.
"""
import functools
import numbers

import numpy as np


class dtype:  # noqa: N801 (PyTorch's name: torch.dtype)
    """PyTorch's `torch.dtype`: `tinypytorch.float32` is the one object for float32 data."""

    __slots__ = ("dtype",)  # NumPy's dtype: NumPy and CuPy accept any object with one as a dtype

    def __new__(cls, *args, **kwargs):  # as torch.dtype: the objects are made once, below
        raise TypeError("cannot create 'tinypytorch.dtype' instances")

    @property
    def __numpy_dtype__(self):  # NumPy 2.4's protocol: read before `dtype`, and without the __getattr__ below
        return self.dtype

    def __repr__(self):
        return f"torch.{self.dtype.name}"  # torch.float32, torch.int64, torch.bool: PyTorch's words

    def __eq__(self, other):
        if type(other) is dtype:
            return self is other
        if other is None:  # np.dtype(None) is float64
            return False
        try:
            return self.dtype == np.dtype(other)
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):  # as NumPy's, so one dict answers for both
        return hash(self.dtype)

    def __reduce__(self):  # copy, deepcopy and pickle give the same object back
        return as_torch, (self.dtype.str,)

    def __getattr__(self, name):  # kind, itemsize, name, char, type: NumPy's, for code that asks them of either
        if name.startswith("_") or name == "dtype":  # protocols NumPy, copy and pickle probe for: none
            raise AttributeError(name)
        return getattr(self.dtype, name)

    @property
    def is_floating_point(self):
        return self.dtype.kind == "f"

    @property
    def is_complex(self):
        return self.dtype.kind == "c"

    @property
    def is_signed(self):
        return self.dtype.kind in "ifc"


_DTYPE = dtype  # (the class, where a parameter is named dtype)


def _made(numpy_dtype):
    made = object.__new__(dtype)
    made.dtype = np.dtype(numpy_dtype)
    return made


# PyTorch's dtypes the package holds, each one object; NumPy's dtype -> the object
AS_TORCH = {np.dtype(t): _made(t) for t in (np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16,
                                            np.int32, np.int64, np.float16, np.float32, np.float64, np.complex64,
                                            np.complex128)}


def as_torch(numpy_dtype):
    """The dtype object of `numpy_dtype` (a NumPy dtype, type or name, or a dtype object); a dtype PyTorch lacks
    stays NumPy's."""
    numpy_dtype = np.dtype(numpy_dtype)
    return AS_TORCH.get(numpy_dtype, numpy_dtype)


FLOATING = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_default = np.dtype(np.float32)

# A dtype's category: bool < integers < floating point < complex (kind codes: b, u/i, f, c)
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
DIM, ZERO, WRAPPED = 0, 1, 2  # an operand's rank: a tensor with dimensions, a 0-d tensor, a Python number


def get_default_dtype():
    """The dtype of Python floats and of new floating point tensors and parameters (PyTorch's; float32), as a dtype
    object (torch.get_default_dtype)."""
    return AS_TORCH[_default]


def default():
    """The default dtype as NumPy's, for the package's own arrays."""
    return _default


def set_default_dtype(dtype):
    """Make `dtype` (float16, float32 or float64) the default floating point dtype, as `torch.set_default_dtype`."""
    global _default
    wrapped_dtype.cache_clear()  # its answers depend on the default
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"set_default_dtype: expected a dtype such as tinypytorch.float64, got {dtype!r}") from None
    if dtype not in FLOATING:
        raise TypeError("only floating-point types are supported as the default type")
    _default = dtype


def default_complex():
    """The complex dtype that goes with the default: complex64 for float32 (and float16), complex128 for float64."""
    return np.dtype(np.complex128) if _default == np.float64 else np.dtype(np.complex64)


def implied(dtype):
    """Whether a tensor's printout leaves its dtype out, as PyTorch's does: the dtypes a literal gets (the default
    float, its complex, int64, bool)."""
    return dtype == _default or dtype == default_complex() or dtype.kind == "b" or dtype == np.int64


def category(dtype):
    return _CATEGORY[dtype.kind]


def is_floating(dtype):
    return dtype.kind == "f"


def promote_types(a, b):
    """torch.promote_types, as a dtype object: see promote."""
    return as_torch(promote(a, b))


def promote(a, b):
    """PyTorch's promote_types on NumPy's dtypes: the smallest dtype both fit in; across categories the higher one's,
    so int64 with float32 is float32 (NumPy: float64) and complex widens to a float's precision."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
    if ca == cb or {ca, cb} == {2, 3}:
        return np.promote_types(a, b)
    return a if ca > cb else b


def can_cast(from_, to):
    """torch.can_cast: whether an in-place result of dtype `from_` may be written into `to` (never down a category:
    complex to real, floating to integer, anything but bool to bool)."""
    from_, to = np.dtype(from_), np.dtype(to)
    return not ((from_.kind == "c" and to.kind != "c") or (from_.kind == "f" and to.kind in "biu")
                or (from_.kind != "b" and to.kind == "b"))


def number_dtype(value):
    """The dtype PyTorch gives a Python number on its own: bool, int64, the default float, the default complex."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    if isinstance(value, numbers.Integral):
        return np.dtype(np.int64)
    if isinstance(value, numbers.Real):
        return _default
    return default_complex()


@functools.cache  # speed: constants such as the 14 in 14 * x meet an array at nearly every operation of a formula
def wrapped_dtype(dtype, kind):
    """The dtype a Python number of type `kind` takes when it meets a tensor of `dtype`: their result_type, so that
    a formula running on bare arrays keeps the tensor's dtype (float32 times 2.0 stays float32)."""
    return promote_ranks(((np.dtype(dtype), DIM), (number_dtype(kind(0)), WRAPPED)), _default)


def _operand(x):
    """(dtype, rank) of an operand: a Variable, an array, or a Python or NumPy number (a wrapped number)."""
    if isinstance(x, (numbers.Number, np.bool_)):  # NumPy's scalars too, as PyTorch reads them
        return number_dtype(x), WRAPPED
    if getattr(x, "wrapped_number", False):  # a Variable the package made of a Python number
        return _WRAPPED_AS[x.data.dtype.kind](), WRAPPED
    if hasattr(x, "creator"):  # a Variable (this floor does not import core): its array
        x = x.data
    return x.dtype, (ZERO if x.ndim == 0 else DIM)


_WRAPPED_AS = {"b": lambda: np.dtype(np.bool_), "u": lambda: np.dtype(np.int64), "i": lambda: np.dtype(np.int64),
               "f": default, "c": default_complex}


def result_type(*operands):
    """The dtype an element-wise operation on these operands computes in and returns (torch.result_type), as
    NumPy's: each operand described by its dtype and rank, then promote_ranks."""
    if len(operands) == 2:  # speed: the common case, both operands of one dtype (whatever their ranks)
        da = getattr(operands[0], "dtype", None)
        if da is not None and da is getattr(operands[1], "dtype", None):
            return da.dtype if type(da) is _DTYPE else da  # two Variables: their dtype object holds NumPy's
    return promote_ranks(tuple(_operand(x) for x in operands), _default)


@functools.cache  # speed: the answer depends on the dtypes and ranks only (the default dtype keys it too)
def promote_ranks(described, default):
    """The result dtype of operands described as (dtype, rank) pairs: each rank (dimensioned tensors, 0-d
    tensors, Python numbers) is promoted on its own; then a lower rank counts only where its category is
    higher than the ranks above it (_combine)."""
    best = [None, None, None]  # one dtype per rank: DIM, ZERO, WRAPPED
    for dtype, rank in described:
        best[rank] = dtype if best[rank] is None else promote(best[rank], dtype)
    return _combine(best[DIM], _combine(best[ZERO], best[WRAPPED]))


def _combine(higher, lower):
    """PyTorch's combine_categories: the higher rank's dtype, unless the lower rank's category is higher (a float
    number meeting an integer tensor); then the higher category's dtype, a complex one at a float's precision."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if _CATEGORY[lower.kind] <= _CATEGORY[higher.kind]:
        return higher
    if lower.kind == "c" and higher.kind == "f":  # complex128 meeting a float32 tensor: complex64
        return promote(higher, np.complex64)
    return promote(higher, lower)


def torch_result_type(tensor, other):
    """torch.result_type(tensor, other): result_type as a dtype object."""
    return as_torch(result_type(tensor, other))


def floating(dtype):
    """The dtype a floating operation (exp, sqrt, true division) gives for inputs of `dtype`: the default dtype
    for bool and integers, as PyTorch's; floating and complex dtypes stay."""
    return _default if dtype.kind in "biu" else dtype


def as_floating(array):
    """`array` itself if floating or complex, else (bool, integers) a copy in the default dtype."""
    return array if array.dtype.kind in "fc" else array.astype(_default)


def cast(array, dtype):
    """`array` in `dtype`: itself when it has it already (no copy). A Python number stays as it is: NumPy and CuPy
    give it the array's dtype (a number inside a formula that runs on arrays, BackwardMode)."""
    if not hasattr(array, "dtype") or array.dtype == dtype:
        return array
    return array.astype(dtype)


# PyTorch's names of the dtypes in its messages ("result type Float can't be cast to ... Long")
_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
          "float16": "Half", "float32": "Float", "float64": "Double", "complex64": "ComplexFloat",
          "complex128": "ComplexDouble"}


_NAMES.update(uint16="UInt16", uint32="UInt32", uint64="UInt64")  # (no step: PyTorch's other unsigned integers)


# ... and the C++ names its matrix products use ("expected m1 and m2 to have the same dtype, but got: float != double")
_C_NAMES = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short int", "int32": "int",
            "int64": "long int", "float16": "c10::Half", "float32": "float", "float64": "double",
            "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}


def check_same_dtype(a, b):
    """A matrix product's refusal of operands of two dtypes (PyTorch promotes element-wise operations, not these)."""
    if a != b:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_C_NAMES.get(a.name, a.name)} != "
                           f"{_C_NAMES.get(b.name, b.name)}")


def torch_name(dtype):
    """PyTorch's name of `dtype` in messages: Float, Double, Half, Long, Int, Bool, ..."""
    dtype = np.dtype(dtype)
    return _NAMES.get(dtype.name, dtype.name)


def tensor_type(x):
    """PyTorch's legacy name of a tensor's type, as its hook errors give it: torch.DoubleTensor, torch.cuda.FloatTensor."""
    where = "cuda." if x.device.type == "cuda" else ""
    return f"torch.{where}{torch_name(x.dtype)}Tensor"


def from_tensor_type(name):
    """(dtype, device type) of a legacy name of a tensor's type (no step): 'torch.DoubleTensor' is (float64, 'cpu'),
    'torch.cuda.FloatTensor' (float32, 'cuda'), as PyTorch's Tensor.type(str) reads them."""
    for device, prefix in (("cuda", "torch.cuda."), ("cpu", "torch.")):
        if name.startswith(prefix) and name.endswith("Tensor"):
            kind = name[len(prefix):-len("Tensor")]
            for numpy_name, torch_name_ in _NAMES.items():
                if torch_name_ == kind:
                    return np.dtype(numpy_name), device
    raise ValueError(f"invalid type: '{name}'")


def check_in_place(op, result, target):
    """Refuse an in-place result of dtype `result` that `target`'s dtype cannot take, in PyTorch's words."""
    if result != target and not can_cast(result, target):
        raise RuntimeError(f"result type {torch_name(result)} can't be cast to the desired output type "
                           f"{torch_name(target)}")


__all__ = ["dtype", "get_default_dtype", "set_default_dtype", "promote_types", "can_cast", "result_type"]
