"""A strict stand-in for CuPy: device arrays on a machine without a GPU.

The suite's `xp` fixture (tests/conftest.py) installs this module as the package's device
backend (`cuda.use_backend`), so every code path that runs on a GPU also runs in CI. The
arrays hold NumPy arrays inside, but behave as CuPy's do wherever NumPy is lenient, so
that code which would fail on a GPU fails here too:

- no implicit conversion to NumPy (`np.asarray(a)` raises, as CuPy's `__array__` does),
  and NumPy functions refuse them (no `__array_ufunc__`/`__array_function__` dispatch);
- no NumPy array in an operation with a device array, nor as a value written into one
  ("Unsupported type <class 'numpy.ndarray'>", CuPy's message); Python and NumPy scalars
  are welcome;
- a 0-d result is a 0-d device array, never a NumPy scalar;
- none of NumPy's ndarray-only attributes: `flags` has CuPy's three fields and no
  `writeable`; only the module functions listed in `FUNCTIONS` (all of them CuPy's) exist.

It also keeps CuPy's memory pool's account (`get_default_memory_pool().used_bytes()`: the
bytes of live arrays that own their memory) and calls memory hooks on each allocation, so
that code which measures device memory runs too.
"""
import builtins
import contextlib
import functools
import operator
import sys
import types
import weakref

import numpy as np

SCALARS = (bool, int, float, complex, np.generic)


def _unsupported(x):
    return TypeError(f"Unsupported type {type(x)}")


def _unwrap(x):
    """The NumPy array inside a device array; a scalar as is; anything else is refused as CuPy refuses it."""
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, SCALARS) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    raise _unsupported(x)


def _wrap(r):
    """A NumPy result as a device array (a NumPy scalar as a 0-d one, as CuPy returns)."""
    if isinstance(r, np.ndarray):
        return ndarray(r)
    if isinstance(r, np.generic):
        return ndarray(np.asarray(r))
    if isinstance(r, tuple):
        return tuple(_wrap(v) for v in r)
    if isinstance(r, list):
        return [_wrap(v) for v in r]
    return r


def _key(key):
    """An index: device arrays inside it unwrapped (NumPy index arrays are accepted, as by CuPy)."""
    if isinstance(key, tuple):
        return tuple(_key(k) for k in key)
    return key._a if isinstance(key, ndarray) else key


# ----- the memory pool: bytes of the live arrays that own their memory ------------------------------

class MemoryPool:
    def __init__(self):
        self._used = 0
        self._owners = set()  # ids of the NumPy arrays counted

    def used_bytes(self):
        return self._used

    def total_bytes(self):
        return self._used

    def free_all_blocks(self):
        pass

    def _track(self, a):
        if a.base is not None or id(a) in self._owners:
            return  # a view (its base is counted) or counted already
        self._owners.add(id(a))
        self._used += a.nbytes
        weakref.finalize(a, self._release, id(a), a.nbytes)
        for hook in list(_hooks):
            hook.malloc_postprocess(device_id=0, size=a.nbytes, mem_size=a.nbytes, mem_ptr=0, pmem_id=0)

    def _release(self, key, nbytes):
        self._owners.discard(key)
        self._used -= nbytes


_pool = MemoryPool()
_hooks = []


def get_default_memory_pool():
    return _pool


def get_default_pinned_memory_pool():
    return MemoryPool()


class _Flags:
    """CuPy's flags: three fields, no `writeable`."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, a):
        self.c_contiguous = a.flags.c_contiguous
        self.f_contiguous = a.flags.f_contiguous
        self.owndata = a.flags.owndata


class Device:
    """cupy.cuda.Device: a device id, usable as a context manager."""

    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)
        if self.id != 0:
            raise RuntimeError(f"CUDARuntimeError: cudaErrorInvalidDevice: invalid device ordinal ({self.id})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    def synchronize(self):
        pass  # host arrays: no queued work to wait for


class MemoryHook:
    """cupy.cuda.MemoryHook: `with hook:` calls its malloc_postprocess at each allocation."""

    name = "MemoryHook"

    def __enter__(self):
        if builtins.any(hook.name == self.name for hook in _hooks):
            raise KeyError(f"hook {self.name} already exists")  # CuPy's: hooks are kept by name
        _hooks.append(self)
        return self

    def __exit__(self, *exc):
        _hooks.remove(self)
        return False

    def malloc_postprocess(self, **kwargs):
        pass


# ----- the array -----------------------------------------------------------------------------------

def _binary(name, reflected=False):
    op = getattr(operator, name)

    def method(self, other):
        if not isinstance(other, (ndarray, np.ndarray, *SCALARS)):
            return NotImplemented  # a Variable (higher __array_priority__): its reflected method runs
        other = _unwrap(other)
        return _wrap(op(other, self._a) if reflected else op(self._a, other))

    return method


def _inplace(name):
    op = getattr(operator, name)

    def method(self, other):
        op(self._a, _unwrap(other))
        return self

    return method


class ndarray:  # noqa: N801 (CuPy's name)
    __array_priority__ = 100  # CuPy's; a Variable's (200) is higher
    __array_ufunc__ = None  # NumPy's functions and operators refuse a device array
    __hash__ = None

    def __init__(self, a):
        self._a = a
        _pool._track(a)

    # no implicit conversion to NumPy (CuPy's message)
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                        "NumPy array explicitly.")

    def __array_function__(self, func, types_, args, kwargs):
        raise TypeError(f"Implicit conversion to a NumPy array is not allowed (numpy.{func.__name__} was called on a "
                        "device array)")

    def get(self, stream=None, order="C", out=None):
        """A copy in host memory (NumPy), into `out` if given."""
        if out is not None:
            np.copyto(out, self._a)
            return out
        return self._a.copy(order=order)

    def set(self, arr):
        self._a[...] = arr

    # attributes CuPy has
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    data = property(lambda self: types.SimpleNamespace(ptr=self._a.ctypes.data))  # CuPy's MemoryPointer: its address
    flags = property(lambda self: _Flags(self._a))
    device = property(lambda self: Device(0))
    T = property(lambda self: ndarray(self._a.T))
    real = property(lambda self: _wrap(self._a.real))
    imag = property(lambda self: _wrap(self._a.imag))

    @property
    def base(self):
        return None if self._a.base is None else _Base(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(row) for row in self._a)

    def __format__(self, spec):
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    def __getitem__(self, key):
        r = self._a[_key(key)]
        if isinstance(r, np.generic):  # CuPy gives an element as a 0-d view, not a copied scalar
            r = self._a[(_key(key) if isinstance(key, tuple) else (_key(key),)) + (Ellipsis,)]
        return _wrap(r)

    def __setitem__(self, key, value):
        self._a[_key(key)] = _unwrap(value)

    # unary operators on a 0-d array give NumPy scalars; CuPy gives 0-d device arrays (_wrap)
    def __neg__(self):
        return _wrap(-self._a)

    def __pos__(self):
        return _wrap(+self._a)

    def __abs__(self):
        return _wrap(builtins.abs(self._a))

    def __invert__(self):
        return _wrap(~self._a)

    __add__, __radd__, __iadd__ = _binary("add"), _binary("add", True), _inplace("iadd")
    __sub__, __rsub__, __isub__ = _binary("sub"), _binary("sub", True), _inplace("isub")
    __mul__, __rmul__, __imul__ = _binary("mul"), _binary("mul", True), _inplace("imul")
    __truediv__, __rtruediv__, __itruediv__ = _binary("truediv"), _binary("truediv", True), _inplace("itruediv")
    __floordiv__, __rfloordiv__ = _binary("floordiv"), _binary("floordiv", True)
    __mod__, __rmod__ = _binary("mod"), _binary("mod", True)
    __pow__, __rpow__, __ipow__ = _binary("pow"), _binary("pow", True), _inplace("ipow")
    __matmul__, __rmatmul__ = _binary("matmul"), _binary("matmul", True)
    __and__, __rand__, __iand__ = _binary("and_"), _binary("and_", True), _inplace("iand")
    __or__, __ror__, __ior__ = _binary("or_"), _binary("or_", True), _inplace("ior")
    __xor__, __rxor__, __ixor__ = _binary("xor"), _binary("xor", True), _inplace("ixor")
    __lshift__, __rshift__ = _binary("lshift"), _binary("rshift")
    __eq__, __ne__ = _binary("eq"), _binary("ne")
    __lt__, __le__, __gt__, __ge__ = _binary("lt"), _binary("le"), _binary("gt"), _binary("ge")

    def item(self):
        return self._a.item()

    def tolist(self):
        return self._a.tolist()

    def copy(self, order="C"):
        return ndarray(self._a.copy(order=order))

    def astype(self, dtype, order="K", casting=None, subok=None, copy=True):
        r = self._a.astype(dtype, order=order, copy=copy)
        return self if r is self._a else ndarray(r)

    def view(self, dtype=None):
        return ndarray(self._a.view() if dtype is None else self._a.view(dtype))

    def reshape(self, *shape, order="C"):
        return ndarray(self._a.reshape(*shape, order=order))

    def fill(self, value):
        self._a.fill(_unwrap(value))


def _conversion(convert):
    """A conversion to a Python object (bool, float, ..., str), as the NumPy array inside gives it (CuPy's, with a sync)."""
    def method(self):
        return convert(self._a)

    return method


for _name, _convert in (("__bool__", bool), ("__float__", float), ("__int__", int), ("__complex__", complex),
                        ("__repr__", repr), ("__str__", str)):
    setattr(ndarray, _name, _conversion(_convert))


def _method(name):
    def method(self, *args, **kwargs):
        return _wrap(getattr(self._a, name)(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

    method.__name__ = name
    return method


for _name in ("transpose", "swapaxes", "ravel", "flatten", "squeeze", "sum", "mean", "var", "std", "max", "min",
              "argmax", "argmin", "prod", "cumsum", "all", "any", "clip", "dot", "nonzero", "repeat", "take"):
    setattr(ndarray, _name, _method(_name))


class _Base(ndarray):
    """`a.base` of a view: the array it views, without counting its memory a second time."""

    def __init__(self, a):
        self._a = a.base


# ----- the module's functions (they shadow builtins such as sum, any and abs, as CuPy's do: builtins.X above) ------------------------------------------------------------------------

class ufunc:  # noqa: N801
    """A NumPy ufunc that takes device arrays and scalars only, with `at` (CuPy has add.at and friends)."""

    def __init__(self, f):
        self._f = f
        self.__name__ = f.__name__

    def __call__(self, *args, out=None, **kwargs):
        if out is not None:
            self._f(*_unwrap(args), out=_unwrap(out), **kwargs)
            return out
        return _wrap(self._f(*_unwrap(args), **kwargs))

    def at(self, a, indices, b=None):
        if b is None:
            self._f.at(_unwrap(a), _key(indices))
        else:
            self._f.at(_unwrap(a), _key(indices), _unwrap(b))

    def reduce(self, a, *args, **kwargs):
        return _wrap(self._f.reduce(_unwrap(a), *args, **kwargs))


def _function(f):
    """A NumPy function that takes device arrays and scalars only, and returns device arrays."""

    @functools.wraps(f)
    def function(*args, **kwargs):
        return _wrap(f(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))

    return function


def _creation(f):
    """A function that makes a new array: NumPy input is welcome (a copy to the device)."""

    @functools.wraps(f)
    def function(*args, **kwargs):
        args = tuple(a._a if isinstance(a, ndarray) else a for a in args)
        return _wrap(f(*args, **kwargs))

    return function


def asarray(a, dtype=None, order=None):
    """A device array: `a` itself if it is one already (of that dtype), else a copy from the host."""
    if isinstance(a, ndarray):
        return a if dtype is None or a.dtype == np.dtype(dtype) else a.astype(dtype)
    if hasattr(a, "__array__") and not isinstance(a, (np.ndarray, np.generic)):
        raise TypeError(f"Unsupported type {type(a)}")  # a Variable, say: CuPy would not unwrap it either
    return ndarray(np.array(a, dtype=dtype, order=order if order else "K", copy=True))


def array(a, dtype=None, copy=True, order="K", ndmin=0):
    if isinstance(a, ndarray):
        return ndarray(np.array(a._a, dtype=dtype, copy=True, order=order, ndmin=ndmin))
    return asarray(np.array(a, dtype=dtype, order=order, ndmin=ndmin))


def asnumpy(a, stream=None, order="C", out=None):
    """A host copy of a device array; other input as NumPy gives it."""
    if isinstance(a, ndarray):
        return a.get(out=out)
    return np.asarray(a, order=order)


def copyto(dst, src, casting="same_kind", where=None):
    if not isinstance(dst, ndarray):
        raise _unsupported(dst)
    np.copyto(dst._a, _unwrap(src), casting=casting, where=True if where is None else _unwrap(where))


def may_share_memory(a, b, max_work=None):
    return np.may_share_memory(_unwrap(a), _unwrap(b))


def shares_memory(a, b, max_work=None):
    return np.shares_memory(_unwrap(a), _unwrap(b))


def get_array_module(*args):
    """This module if any argument is a device array, else NumPy (cupy.get_array_module)."""
    return sys.modules[__name__] if builtins.any(isinstance(a, ndarray) for a in args) else np


def is_available():
    return True


UFUNCS = ["add", "subtract", "multiply", "divide", "true_divide", "power", "negative", "exp", "log", "log1p", "expm1",
          "sin", "cos", "tan", "tanh", "sqrt", "square", "abs", "absolute", "sign", "maximum", "minimum", "isnan",
          "isinf", "isfinite", "greater", "greater_equal", "less", "less_equal", "equal", "not_equal", "logical_and",
          "logical_or", "logical_not", "floor", "ceil", "bitwise_and", "bitwise_or", "bitwise_xor", "right_shift",
          "left_shift", "reciprocal", "fmax", "fmin", "arctan", "arcsin", "arccos", "sinh", "cosh", "floor_divide"]
FUNCTIONS = ["sum", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "cumsum", "all",
             "any", "allclose", "isclose", "array_equal", "where", "clip", "dot", "matmul", "tensordot", "einsum",
             "reshape", "transpose", "swapaxes", "moveaxis", "expand_dims", "squeeze", "broadcast_to", "concatenate",
             "stack", "split", "zeros_like", "ones_like", "empty_like", "full_like", "outer", "tril", "triu", "diag",
             "ravel", "count_nonzero", "nonzero", "atleast_1d", "logsumexp", "take", "repeat", "tile", "flip", "sort",
             "argsort", "diff", "pad", "sqrt", "result_type", "iscomplexobj"]
FUNCTIONS.append("cumprod")  # (prod's gradient where an element is zero)
CREATION = ["zeros", "ones", "empty", "full", "arange", "linspace", "eye", "identity"]

for _name in UFUNCS:
    setattr(sys.modules[__name__], _name, ufunc(getattr(np, _name)))
for _name in FUNCTIONS:
    if hasattr(np, _name):
        setattr(sys.modules[__name__], _name, _function(getattr(np, _name)))
for _name in CREATION:
    setattr(sys.modules[__name__], _name, _creation(getattr(np, _name)))
result_type = np.result_type  # on dtypes and scalars only, as CuPy's
for _name in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64", "bool_",
              "complex64", "complex128", "dtype", "pi", "e", "inf", "nan", "newaxis", "generic", "number", "floating",
              "integer", "iinfo", "finfo", "ndindex"):
    setattr(sys.modules[__name__], _name, getattr(np, _name))

# cupy.lib.stride_tricks.as_strided: a view with given strides, as CuPy's (the package's layouts use it)
lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=_function(np.lib.stride_tricks.as_strided)))

# cupy.cuda: devices, memory hooks, the runtime's device count
cuda = types.SimpleNamespace(
    Device=Device, MemoryHook=MemoryHook, MemoryPool=MemoryPool, get_device_id=lambda: 0,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
    memory_hook=types.SimpleNamespace(get_memory_hooks=lambda: {hook.name: hook for hook in _hooks}),
    is_available=is_available,
)

# cupyx: page-locked host arrays are NumPy arrays (as in CuPy)
cupyx = types.SimpleNamespace(empty_pinned=lambda shape, dtype=np.float64, order="C": np.empty(shape, dtype, order),
                              zeros_pinned=lambda shape, dtype=np.float64, order="C": np.zeros(shape, dtype, order))


@contextlib.contextmanager
def installed():
    """The package's device backend is this stand-in inside the block (tinypytorch.cuda.use_backend)."""
    from tinypytorch import cuda as backend

    previous = backend.use_backend(sys.modules[__name__], cupyx)
    try:
        yield sys.modules[__name__]
    finally:
        backend.use_backend(*previous)
