"""Making Variables the way PyTorch makes tensors: `tensor`, `zeros`, `ones`, `full`, `eye`, `arange`, `linspace`,
`rand`, `randn`, `randint`, `empty`, the `*_like` forms, `from_numpy`, and the tensor methods `new_tensor`, `new_zeros`,
`new_ones`, `new_full`, `new_empty`, with PyTorch's signatures and defaults.

    x = tinypytorch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)   # float32, as torch.tensor
    w = tinypytorch.randn(3, 2, dtype=tinypytorch.float64)

As in PyTorch, floating point data is the default dtype (float32; `set_default_dtype` changes it), Python integers int64
and bools bool; a made tensor does not require grad unless asked (a `Variable` made directly
does, step 33). dtypes are PyTorch's objects (`tinypytorch.float32` prints `torch.float32`) holding NumPy's.
`device` is "cpu" (the default) or "cuda" (CuPy, when a GPU is usable); `set_default_device` changes the default.
"""
import builtins  # this module's `float` and `bool` are dtypes, as torch.float and torch.bool
import math
import numbers
import warnings

import numpy as np

from tinypytorch import cuda, dtypes, layout, outputs, random
from tinypytorch.core import Variable
from tinypytorch.grad_mode import is_grad_enabled
from tinypytorch.views import increment_version

# PyTorch's dtype names, each one dtype object (step 59)
float16 = half = dtypes.as_torch(np.float16)
float32 = float = dtypes.as_torch(np.float32)  # noqa: A001 (PyTorch's name: torch.float is float32)
float64 = double = dtypes.as_torch(np.float64)
uint8 = dtypes.as_torch(np.uint8)
int8 = dtypes.as_torch(np.int8)
int16 = short = dtypes.as_torch(np.int16)
int32 = dtypes.as_torch(np.int32)
int64 = long = dtypes.as_torch(np.int64)
complex64 = cfloat = dtypes.as_torch(np.complex64)
complex128 = cdouble = dtypes.as_torch(np.complex128)
bool = dtypes.as_torch(np.bool_)  # noqa: A001 (PyTorch's name)

_KINDS = "biufc"  # bool, integers, floating point, complex: what a tensor holds
_SEQUENCES = (list, tuple, range)
REQUIRES_FLOAT = "Only Tensors of floating point and complex dtype can require gradients"


# ----- tensor: data of any nesting, with PyTorch's dtype inference ------------------------------------------

def tensor(data, *, dtype=None, device=None, requires_grad=False):
    """A new Variable holding a copy of `data` (PyTorch's `torch.tensor`).

    data: a number, a (nested) list or tuple of numbers, a NumPy scalar or array, or a Variable
    (copied and detached, with PyTorch's warning). Without `dtype`, as PyTorch infers it: an
    array keeps its dtype, a NumPy scalar too; Python floats give float32, ints int64, bools
    bool, complex numbers complex64, and a list the promotion of its elements' dtypes.
    """
    if isinstance(data, Variable):
        warnings.warn("To copy construct from a Variable, it is recommended to use x.detach().clone() or "
                      "x.detach().clone().requires_grad_(True), rather than tinypytorch.tensor(x).",
                      UserWarning, stacklevel=2)
    return _finish(tensor_data(data, dtype, "tensor"), device, requires_grad, "tensor")


def tensor_data(data, dtype=None, op="tensor"):
    """A new array of `data` with the dtype `torch.tensor` would give it (or `dtype`); `op` names the caller.

    Python data is checked as PyTorch checks it: a ragged list, an integer that overflows its
    dtype or a complex number made real raise; an array is cast as it is.
    """
    if isinstance(data, Variable):
        data = data.data
    dtype = _dtype(op, dtype)
    if isinstance(data, cuda.array_types):
        source_dtype = _array_dtype(data, op)
        with np.errstate(over="ignore", invalid="ignore"):
            return data.astype(source_dtype if dtype is None else dtype)  # astype copies
    flat = []
    shape = _shape(data)
    inferred = _gather(data, shape, 0, flat, op)
    try:  # at full precision first: one rounding, to the dtype asked for
        source = np.array(flat, dtype=_widest(inferred)).reshape(shape)
    except OverflowError:
        raise ValueError(f"{op}: Overflow when unpacking long: a Python int beyond int64") from None
    return _checked_cast(source, inferred if dtype is None else dtype, op)


def _shape(data):
    """The shape torch.tensor reads off nested data: the length at each depth, following first elements."""
    shape = []
    while isinstance(data, _SEQUENCES):
        shape.append(len(data))
        if not data:
            break
        data = data[0]
    if isinstance(data, np.ndarray):
        shape.extend(data.shape)
    return tuple(shape)


def _gather(data, shape, depth, flat, op):
    """Append the numbers of `data` (at `depth` of `shape`) to `flat`; return their promoted dtype."""
    if isinstance(data, np.ndarray) and data.ndim > 0:
        if data.shape != shape[depth:]:
            raise ValueError(f"{op}: expected an array of shape {shape[depth:]} at dim {depth} (got {tuple(data.shape)})")
        flat.extend(data.ravel().tolist())
        return _array_dtype(data, op)
    if depth == len(shape):
        if isinstance(data, _SEQUENCES):
            raise TypeError(f"{op}: expected a number at dim {depth} (got a {type(data).__name__})")
        dtype, number = _number(data, op)
        flat.append(number)
        return dtype
    if not isinstance(data, _SEQUENCES):
        raise TypeError(f"{op}: not a sequence at dim {depth} (got {type(data).__name__})")
    if len(data) != shape[depth]:
        raise ValueError(f"{op}: expected sequence of length {shape[depth]} at dim {depth} (got {len(data)})")
    dtype = None
    for item in data:
        item_dtype = _gather(item, shape, depth + 1, flat, op)
        dtype = item_dtype if dtype is None else dtypes.promote(dtype, item_dtype)
    return dtypes.default() if dtype is None else dtype  # an empty list is float32, as in PyTorch


def _number(value, op):
    """(the dtype torch.tensor gives one number, the number in Python): NumPy scalars keep theirs."""
    if isinstance(value, Variable):  # PyTorch reads a one-element tensor in a list as a number
        if value.data.size != 1:
            raise ValueError(f"{op}: only one element tensors can be converted to Python scalars")
        value = cuda.as_numpy(value.data).reshape(())
    if isinstance(value, (np.ndarray, np.generic)):  # a 0-d array or a NumPy scalar
        return _array_dtype(value, op), value.item()
    return _python_dtype(value, op), value


def _python_dtype(value, op):
    """The dtype PyTorch gives a Python number: bool, int64, the default float (float32) or complex (complex64)."""
    if not isinstance(value, (numbers.Complex, np.bool_)):
        raise TypeError(f"{op}: could not infer dtype of {type(value).__name__}")
    return dtypes.number_dtype(value)


def _array_dtype(array, op):
    """An array's dtype, refused unless a tensor can hold it (not strings, objects, dates)."""
    if array.dtype.kind not in _KINDS:
        raise TypeError(f"{op}: can't convert an array of dtype {array.dtype}: the supported kinds are bool, "
                        "integers, floating point and complex")
    return array.dtype


def _widest(dtype):
    """The dtype of `dtype`'s category that holds any Python number of it exactly enough to round once."""
    return np.dtype({"b": np.bool_, "u": np.int64, "i": np.int64, "f": np.float64, "c": np.complex128}[dtype.kind])


def _checked_cast(source, dtype, op):
    """Python numbers (as `source`) cast to `dtype`, refused where PyTorch refuses them."""
    if source.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(f"{op}: can't convert complex to {dtype}")
    if dtype.kind in "iu" and source.dtype.kind in "iuf" and source.size:
        info = np.iinfo(dtype)
        # PyTorch lets -1 wrap to 255 in uint8, an integer only: -1.0 (and -0.2) it refuses
        low = -info.max if dtype.kind == "u" and source.dtype.kind in "iu" else info.min
        if not np.all((source >= low) & (source <= info.max)):  # NaN fails too
            raise ValueError(f"{op}: value cannot be converted to type {dtype} without overflow")
    with np.errstate(over="ignore", invalid="ignore"):  # a float beyond float32's range becomes inf, as in PyTorch
        return source.astype(dtype)


# ----- what every factory checks ---------------------------------------------------------------------------------

def _dtype(op, dtype, default=None):
    """`dtype` as a NumPy dtype a tensor can hold; `default` (a dtype, or None) when it is None."""
    if dtype is None:
        return None if default is None else np.dtype(default)
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{op}: dtype must be a dtype such as tinypytorch.float32, got {dtype!r}") from None
    if result.kind not in _KINDS:
        raise TypeError(f"{op}: dtype {result} is not a dtype a tensor holds (bool, integers, floating point, complex)")
    return result


def _size(op, size):
    """A shape from either of PyTorch's spellings, zeros(2, 3) and zeros((2, 3))."""
    if not size:
        raise TypeError(f'{op}() missing 1 required positional arguments: "size"')
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    for i, n in enumerate(size):
        if not isinstance(n, numbers.Integral) or isinstance(n, (builtins.bool, np.bool_)):
            raise TypeError(f"{op}(): argument 'size' must be tuple of ints, but found element of type "
                            f"{type(n).__name__} at pos {i}")
        if n < 0:
            raise ValueError(f"{op}: Dimension size must be non-negative, got size {tuple(size)}")
    return tuple(int(n) for n in size)


def _module(op, device):
    """The array module that makes arrays on `device`: NumPy for the CPU, CuPy for a GPU (RuntimeError without one).
    No device is the default device (set_default_device), which is the CPU unless set."""
    if device is None:
        device = cuda.DEFAULT.device  # (None: the CPU, the usual case)
    if device is None or cuda.device(device).type == "cpu":
        return np
    if not cuda.GPU:
        raise RuntimeError(f"{op}: cannot make a tensor on {cuda.device(device)}: {cuda.why_unavailable()}")
    return cuda.cupy


def _finish(array, device, requires_grad, op):
    """The made array as a Variable on `device`; only floating point and complex ones may require grad."""
    if requires_grad is True and array.dtype.kind not in "fc":
        raise RuntimeError(REQUIRES_FLOAT)
    if isinstance(array, np.generic):  # NumPy's arithmetic on a 0-d array gives a scalar
        array = np.asarray(array)
    if device is None:
        device = cuda.DEFAULT.device  # the default device (set_default_device); None: the CPU
    if device is not None:
        _module(op, device)  # a clear error when there is no GPU
        array = cuda.to_device(array, device, op)
    made = Variable(array, requires_grad=requires_grad)
    layout.mark([made])  # a NumPy array handed in keeps its layout, as in PyTorch (tinypytorch.layout)
    return made


def _float_dtype(op, dtype):
    """The dtype of a random factory: floating point only (PyTorch has no random integers from rand)."""
    result = _dtype(op, dtype, dtypes.default())
    if result.kind != "f":
        raise TypeError(f"{op}: dtype must be a floating point dtype, got {result}")
    return result


# ----- filled, identity and ranges -------------------------------------------------------------------------------

def zeros(*size, dtype=None, device=None, requires_grad=False):
    """A Variable of zeros of shape `size` (PyTorch's `torch.zeros`): `zeros(2, 3)` or `zeros((2, 3))`, float32."""
    shape, dtype = _size("zeros", size), _dtype("zeros", dtype, dtypes.default())
    return _finish(_module("zeros", device).zeros(shape, dtype=dtype), device, requires_grad, "zeros")


def ones(*size, dtype=None, device=None, requires_grad=False):
    """A Variable of ones of shape `size` (PyTorch's `torch.ones`): `ones(2, 3)` or `ones((2, 3))`, float32."""
    shape, dtype = _size("ones", size), _dtype("ones", dtype, dtypes.default())
    return _finish(_module("ones", device).ones(shape, dtype=dtype), device, requires_grad, "ones")


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """A Variable of shape `size` (a tuple or list) filled with `fill_value` (PyTorch's `torch.full`).

    The dtype follows the value as in PyTorch: bool, int64 for an integer, float32 for a float,
    complex64 for a complex number.
    """
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"full(): argument 'size' must be tuple of ints, not {type(size).__name__}")
    shape = _size("full", (size,))
    dtype = _dtype("full", dtype, _fill_dtype("full", fill_value))
    value = _checked_cast(np.array(_python(fill_value)), dtype, "full")
    return _finish(_module("full", device).full(shape, value.item(), dtype=dtype), device, requires_grad, "full")


def _fill_dtype(op, value):
    """The dtype PyTorch gives a fill value: a Python number's, also for a NumPy scalar (PyTorch's Scalar).

    PyTorch reads a NumPy bool as a float, and a NumPy complex as a float without its imaginary part:
    the first is followed, the second refused."""
    if not isinstance(value, (numbers.Number, np.bool_)):
        raise TypeError(f"{op}(): argument 'fill_value' must be Number, not {type(value).__name__}")
    if isinstance(value, np.bool_):
        return dtypes.default()
    if isinstance(value, np.complexfloating):
        raise TypeError(f"{op}: a NumPy complex fill_value loses its imaginary part in PyTorch; pass complex(value)")
    return _python_dtype(value, op)


def _python(value):
    return value.item() if isinstance(value, np.generic) else value


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False):
    """The n x m identity matrix (m = n by default), float32 (PyTorch's `torch.eye`)."""
    for name, k in (("n", n), ("m", n if m is None else m)):
        if not isinstance(k, numbers.Integral) or isinstance(k, (builtins.bool, np.bool_)):
            raise TypeError(f"eye(): argument '{name}' must be int, not {type(k).__name__}")
        if k < 0:
            raise ValueError(f"eye: {name} must be greater or equal to 0, got {k}")
    dtype = _dtype("eye", dtype, dtypes.default())
    array = _module("eye", device).eye(int(n), None if m is None else int(m), dtype=dtype)
    return _finish(array, device, requires_grad, "eye")


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    """start, start + step, ... up to `end` excluded (PyTorch's `torch.arange`; `arange(n)` is 0 ... n - 1).

    int64 when start, end and step are integers, float32 if any is a float, as in PyTorch. The
    count is ceil((end - start) / step) and element i is start + i step, computed in float64.
    """
    if end is None:
        start, end = 0, start
    for name, value in (("start", start), ("end", end), ("step", step)):
        if not isinstance(value, (numbers.Real, np.bool_)):
            raise TypeError(f"arange(): argument '{name}' must be Number, not {type(value).__name__}")
    integral = all(isinstance(v, (numbers.Integral, np.bool_)) for v in (start, end, step))
    dtype = _dtype("arange", dtype, np.int64 if integral else dtypes.default())
    if dtype.kind == "b":
        raise TypeError("arange: dtype bool is not supported")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"arange: unsupported range: {start} -> {end}")
    if dtype.kind in "iu":  # PyTorch casts the bounds to the integer dtype first
        start, end, step = int(start), int(end), int(step)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise ValueError("arange: upper bound and lower bound inconsistent with step sign")
    xp = _module("arange", device)
    if dtype.kind in "iu":
        count = -((start - end) // step)  # ceil((end - start) / step), exactly
        array = (start + step * xp.arange(count, dtype=np.int64)).astype(dtype)
    else:
        count = math.ceil((builtins.float(end) - start) / step)
        array = (start + step * xp.arange(count, dtype=np.float64)).astype(dtype)
    return _finish(array, device, requires_grad, "arange")


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False):
    """`steps` evenly spaced numbers from start to end, both included (PyTorch's `torch.linspace`), float32.

    PyTorch's formula, in the dtype itself: the first half counts up from start, the second
    down from end, so both ends are exact.
    """
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, (numbers.Number, np.bool_)):
            raise TypeError(f"linspace(): argument '{name}' must be Number, not {type(value).__name__}")
    if not isinstance(steps, numbers.Integral) or isinstance(steps, (builtins.bool, np.bool_)):
        raise TypeError(f"linspace(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise ValueError("linspace: number of steps must be non-negative")
    is_complex = any(isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real) for v in (start, end))
    dtype = _dtype("linspace", dtype, dtypes.default_complex() if is_complex else dtypes.default())
    xp = _module("linspace", device)
    return _finish(_spaced(xp, start, end, int(steps), dtype), device, requires_grad, "linspace")


def _spaced(xp, start, end, steps, dtype):
    """linspace's values: integer dtypes compute in float64 from the truncated ends, as PyTorch does."""
    if dtype.kind in "biu":
        work = np.dtype(np.float64)
        start, end = (_checked_cast(np.array(v), dtype, "linspace").item() for v in (_python(start), _python(end)))
    else:
        work = dtype
    if steps == 1:
        return xp.full((1,), start, dtype=work).astype(dtype)
    a, b = work.type(start), work.type(end)
    step = (b - a) / work.type(max(steps - 1, 1))
    i = xp.arange(steps).astype(work)
    with np.errstate(over="ignore", invalid="ignore"):
        values = xp.where(xp.arange(steps) < steps // 2, a + step * i, b - step * (work.type(steps - 1) - i))
        return values.astype(dtype)


# ----- random: from the framework's generator --------------------------------------------------------------------

def rand(*size, out=None, dtype=None, device=None, requires_grad=False):
    """Uniform numbers in [0, 1) of shape `size`, float32 (PyTorch's `torch.rand`); with out=, written into it.

    Drawn from the framework's generator (`tinypytorch.random.default_generator()` on the CPU,
    the device's generator on a GPU), so `tinypytorch.manual_seed` fixes them. They are not the
    numbers `torch.rand` draws after `torch.manual_seed` with the same seed: the generators differ.
    """
    if out is not None:  # in out's dtype and on its device (tinypytorch.outputs)
        dtype = outputs.factory_dtype("rand", out, dtype, "check_uniform_bounds")
        return outputs.fill("rand", out, rand(*size, dtype=dtype, device=out.device), requires_grad)
    shape, dtype = _size("rand", size), _float_dtype("rand", dtype)
    xp = _module("rand", device)
    return _finish(_below_one(xp, random.uniform(shape, xp), dtype), device, requires_grad, "rand")


def _below_one(xp, u, dtype):
    """float64 uniforms in [0, 1) as `dtype`, still below 1: rounded down to the dtype's grid, not to nearest.

    Rounding 1 - 2^-53 to float32 to nearest gives 1.0, which [0, 1) excludes.
    """
    if dtype == np.float64:
        return u
    grid = 2.0 ** (np.finfo(dtype).nmant + 1)  # 2^24 for float32, as PyTorch's CPU generator uses 24 bits
    return (xp.floor(u * grid) / grid).astype(dtype)


def randn(*size, out=None, dtype=None, device=None, requires_grad=False):
    """Standard normal numbers of shape `size`, float32 (PyTorch's `torch.randn`); with out=, written into it.

    Drawn from the framework's generator, so `tinypytorch.manual_seed` fixes them; they differ
    from torch.randn's for the same seed, since the generators differ.
    """
    if out is not None:  # as rand's
        dtype = outputs.factory_dtype("randn", out, dtype, "normal_kernel_cpu")
        return outputs.fill("randn", out, randn(*size, dtype=dtype, device=out.device), requires_grad)
    shape, dtype = _size("randn", size), _float_dtype("randn", dtype)
    xp = _module("randn", device)
    return _finish(_normal(xp, shape).astype(dtype), device, requires_grad, "randn")


def _normal(xp, shape):
    """Standard normal float64 numbers: NumPy's on the CPU; Box-Muller from the device's uniforms on a GPU."""
    if xp is np:
        return np.asarray(random.default_generator().standard_normal(shape))
    u1, u2 = random.uniform(shape, xp), random.uniform(shape, xp)
    return xp.sqrt(-2.0 * xp.log1p(-u1)) * xp.cos(2.0 * np.pi * u2)  # 1 - u1 > 0: the log is finite


def randint(*args, low=None, high=None, size=None, generator=None, out=None, dtype=None, device=None,
            requires_grad=False):
    """Integers drawn uniformly from [low, high) (low 0 unless given) in shape `size`, int64 unless `dtype` says
    otherwise (PyTorch's `torch.randint`): `randint(high, size)` or `randint(low, high, size)`, `size` a tuple.

    Drawn as `rand` draws: from the framework's generator on the CPU (NumPy's exact integers) and from the
    device's generator on a GPU, so `tinypytorch.manual_seed` fixes them; they are not torch's numbers for the
    same seed. `generator`, if given, is a NumPy Generator (the package has no torch.Generator): the draws come
    from it, on the CPU, then move to `device`. The bounds are checked against `dtype` as PyTorch checks them.
    """
    low, high, size = _randint_arguments(args, low, high, size)
    shape = _size("randint", (size,))
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError("randint(): argument 'generator' must be a numpy.random.Generator (tinypytorch draws from "
                        f"NumPy's generators), not {type(generator).__name__}")
    if out is not None:
        check_factory_out("randint", out, dtype)
        dtype = out.data.dtype
    dtype = _dtype("randint", dtype, np.int64)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    _check_random_bounds(low, high - 1, dtype)
    xp = _module("randint", device if out is None else out.device)
    if generator is not None:
        drawn = xp.asarray(generator.integers(low, high, size=shape, dtype=np.int64, endpoint=False))
    elif xp is np:
        drawn = random.default_generator().integers(low, high, size=shape, dtype=np.int64, endpoint=False)
    else:  # the device's uniforms, scaled: floor(u (high - low)) < high - low, unless u (high - low) rounds up
        span = high - low
        drawn = low + xp.minimum(xp.floor(random.uniform(shape, xp) * span), builtins.float(span - 1)).astype(np.int64)
    drawn = xp.asarray(drawn).astype(dtype)
    if out is not None:
        return write_out("randint", drawn, out, warn_resize=False)
    return _finish(drawn, device, requires_grad, "randint")


def _randint_arguments(args, low, high, size):
    """(low, high, size) from PyTorch's two forms, randint(high, size) and randint(low, high, size), positional or
    by keyword; the bounds as ints (a bool is refused, as PyTorch refuses it)."""
    names = ("low", "high", "size") if len(args) == 3 or (len(args) == 2 and size is not None) \
        or (len(args) == 1 and size is not None and high is not None) else ("high", "size")
    given = dict(low=low, high=high, size=size)
    for name, value in zip(names, args):
        if given[name] is not None:
            raise TypeError(f"randint() got multiple values for argument '{name}'")
        given[name] = value
    if len(args) > 3 or given["high"] is None or given["size"] is None:
        raise TypeError(f"randint() received an invalid combination of arguments - got {len(args)} positional "
                        "argument(s), but expected one of: (int high, tuple of ints size, *, ...) or (int low, "
                        "int high, tuple of ints size, *, ...)")
    bounds = []
    for position, name in enumerate(("low", "high")):
        value = 0 if given[name] is None else given[name]
        if isinstance(value, (builtins.bool, np.bool_)) or not hasattr(value, "__index__") \
                or isinstance(value, Variable) and value.data.dtype.kind not in "iu":
            raise TypeError(f"randint(): argument '{name}' (position {position + (len(names) == 3)}) must be int, "
                            f"not {type(value).__name__}")
        bounds.append(int(value.__index__()))
    if not isinstance(given["size"], (tuple, list)):
        raise TypeError(f"randint(): argument 'size' (position {len(names)}) must be tuple of ints, not "
                        f"{type(given['size']).__name__}")
    return bounds[0], bounds[1], tuple(given["size"])


def _check_random_bounds(low, last, dtype):
    """PyTorch's check of randint's bounds against the dtype (low and high - 1 must be values of it, C++'s names in
    the message); for floating dtypes, its warning where the integers are beyond those the dtype holds exactly."""
    name = dtypes._C_NAMES.get(dtype.name, dtype.name)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype) if dtype.kind in "iu" else None
    number = builtins.float if dtype.kind == "f" else int  # Python numbers: compared exactly, without NumPy's casts
    lowest, highest = (0, 1) if dtype.kind == "b" else (number(info.min), number(info.max))
    for what, value in (("from", low), ("to - 1", last)):
        if not lowest <= value <= highest:
            raise RuntimeError(f"{what} is out of bounds for {name}")
    if dtype.kind == "f":
        digits = info.nmant + 1
        for what, value in (("from", low), ("to - 1", last)):
            if not -(2 ** digits) <= value <= 2 ** digits:
                warnings.warn(f"{what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision limitations "
                              f"{name} can support discrete uniform distribution only within this range. This "
                              "warning will become an error in version 1.7 release, please fix the code in advance",
                              UserWarning, stacklevel=3)


# ----- empty: a Variable whose values do not matter ----------------------------------------------------------

def empty(*sizes, size=None, out=None, dtype=None, device=None, requires_grad=False):
    """A Variable of shape `size` whose values are unspecified (PyTorch's `torch.empty`): `empty(2, 3)` or
    `empty((2, 3))`, float32. The package fills it with zeros (NumPy's empty would hand out old memory, and a
    program that reads it should not depend on it either way). With `out`, `out` itself, resized to `size`."""
    shape = _size("empty", _new_size("empty", sizes, size))
    if out is not None:
        check_factory_out("empty", out, dtype)
        if tuple(out.shape) == shape:
            return out  # torch leaves its values as they are
        return write_out("empty", cuda.get_array_module(out.data).zeros(shape, out.data.dtype), out, warn_resize=False)
    dtype = _dtype("empty", dtype, dtypes.default())
    return _finish(_module("empty", device).zeros(shape, dtype=dtype), device, requires_grad, "empty")


# ----- out=: a result written into a given Variable ----------------------------------------------------------

OUT_OF_AUTOGRAD = "{}(): functions with out=... arguments don't support automatic differentiation, but one of the " \
                  "arguments requires grad."


def check_out(op, out, inputs=()):
    """Refuse `out` (a Variable) where PyTorch refuses it before computing: not a Variable, or a gradient that could
    flow through an input or into out itself (an out= result is outside the graph)."""
    if not isinstance(out, Variable):
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (out.requires_grad or any(getattr(x, "requires_grad", False) for x in inputs)):
        raise RuntimeError(OUT_OF_AUTOGRAD.format(op))


def check_factory_out(op, out, dtype):
    """A factory's out=: its dtype is out's, and a dtype given must be that one (PyTorch's words)."""
    if not isinstance(out, Variable):
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and out.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if dtype is not None and _dtype(op, dtype) != out.data.dtype:
        raise RuntimeError(f"dtype {dtypes.torch_name(_dtype(op, dtype))} does not match dtype of out parameter "
                           f"({dtypes.torch_name(out.data.dtype)})")


def write_out(op, result, out, exact_dtype=False, warn_resize=True):
    """`result` (an array) written into Variable `out`, which is returned: PyTorch's out= after the computation.

    The dtype: out's must be result's (`exact_dtype`, as cross, scatter, svd require), or one result casts to without
    going down a category (stack's rule). A shape other than result's is resized (out's array replaced), with
    PyTorch's deprecation warning when out held elements (`warn_resize`; factories resize silently). The change
    counts as an in-place one (out's version counter).
    """
    if exact_dtype and result.dtype != out.data.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtypes._C_NAMES.get(result.dtype.name)}, but got "
                           f"{dtypes._C_NAMES.get(out.data.dtype.name)} instead")
    if not exact_dtype and not dtypes.can_cast(result.dtype, out.data.dtype):
        raise TypeError(f"{op}(): input types can't be cast to the desired output type "
                        f"{dtypes.torch_name(out.data.dtype)}")
    cuda.check_same_device(op, [result, out.data])
    xp = cuda.get_array_module(out.data)
    if tuple(out.shape) != tuple(result.shape):
        if warn_resize and out.data.size:
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}. This behavior is "
                          "deprecated, and in a future PyTorch release outputs will not be resized unless they have "
                          "zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
                          "elements with t.resize_(0).", UserWarning, stacklevel=3)
        out.data = xp.empty(result.shape, dtype=out.data.dtype)
    xp.copyto(out.data, result, casting="unsafe")
    increment_version(out)
    return out


# ----- new_*: factories of a Variable's dtype and device (PyTorch's tensor methods) ----------------------------

def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """`x.new_tensor(data)`: `tensor(data)` in x's dtype and on x's device unless given (PyTorch's
    `Tensor.new_tensor`): the data is cast to that dtype (x.new_tensor([1.7]) of an int64 x holds 1)."""
    if isinstance(data, Variable):
        warnings.warn("To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
                      "sourceTensor.detach().clone().requires_grad_(True), rather than "
                      "tensor.new_tensor(sourceTensor).", UserWarning, stacklevel=2)
    dtype = self.data.dtype if dtype is None else dtype
    return _finish(tensor_data(data, dtype, "new_tensor"), self.device if device is None else device, requires_grad,
                   "new_tensor")


def _new_size(op, sizes, size):
    """The shape of a new_* call: `x.new_zeros(2, 3)`, `x.new_zeros((2, 3))` or `x.new_zeros(size=(2, 3))`."""
    if size is not None:
        if sizes:
            raise TypeError(f"{op}() got multiple values for argument 'size'")
        sizes = (size,)
    return sizes


def new_empty(self, *sizes, size=None, dtype=None, device=None, requires_grad=False):
    """`x.new_empty(size)`: `empty(size)` of x's dtype and device unless given (PyTorch's `Tensor.new_empty`)."""
    return empty(*_new_size("new_empty", sizes, size), dtype=self.data.dtype if dtype is None else dtype,
                 device=self.device if device is None else device, requires_grad=requires_grad)


def new_zeros(self, *sizes, size=None, dtype=None, device=None, requires_grad=False):
    """`x.new_zeros(size)`: zeros of x's dtype and device unless given (PyTorch's `Tensor.new_zeros`)."""
    return zeros(*_new_size("new_zeros", sizes, size), dtype=self.data.dtype if dtype is None else dtype,
                 device=self.device if device is None else device, requires_grad=requires_grad)


def new_ones(self, *sizes, size=None, dtype=None, device=None, requires_grad=False):
    """`x.new_ones(size)`: ones of x's dtype and device unless given (PyTorch's `Tensor.new_ones`)."""
    return ones(*_new_size("new_ones", sizes, size), dtype=self.data.dtype if dtype is None else dtype,
                device=self.device if device is None else device, requires_grad=requires_grad)


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    """`x.new_full(size, fill_value)`: `fill_value` in x's dtype and on x's device unless given, whatever the
    value's own type (PyTorch's `Tensor.new_full`: an int64 x's new_full((2,), 1.7) holds 1)."""
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"new_full(): argument 'size' (position 1) must be tuple of ints, not {type(size).__name__}")
    return full(size, fill_value, dtype=self.data.dtype if dtype is None else dtype,
                device=self.device if device is None else device, requires_grad=requires_grad)


# ----- *_like: the shape, dtype and device of another Variable -----------------------------------------------------

def _like(op, input, dtype, device):
    if not isinstance(input, Variable):
        raise TypeError(f"{op}(): argument 'input' must be a Variable, not {type(input).__name__}")
    return input.shape, (input.data.dtype if dtype is None else dtype), (input.device if device is None else device)


def _laid_out_like(made, input):  # noqa: A002
    """made, laid out as `input` is (PyTorch's *_like keep the input's layout: torch.preserve_format)."""
    if input._strided and made.data.shape == input.data.shape:
        made.data = layout.preserve_format(made.data, input.data)
        layout.mark([made])
    return made


def zeros_like(input, *, dtype=None, device=None, requires_grad=False):  # noqa: A002 (PyTorch's name)
    """Zeros of `input`'s shape, dtype and device unless given (PyTorch's `torch.zeros_like`)."""
    shape, dtype, device = _like("zeros_like", input, dtype, device)
    return _laid_out_like(zeros(shape, dtype=dtype, device=device, requires_grad=requires_grad), input)


def ones_like(input, *, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """Ones of `input`'s shape, dtype and device unless given (PyTorch's `torch.ones_like`)."""
    shape, dtype, device = _like("ones_like", input, dtype, device)
    return _laid_out_like(ones(shape, dtype=dtype, device=device, requires_grad=requires_grad), input)


def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """`fill_value` in `input`'s shape, dtype and device unless given (PyTorch's `torch.full_like`)."""
    shape, dtype, device = _like("full_like", input, dtype, device)
    return _laid_out_like(full(shape, fill_value, dtype=dtype, device=device, requires_grad=requires_grad), input)


def rand_like(input, *, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """`rand` in `input`'s shape, dtype and device unless given (PyTorch's `torch.rand_like`)."""
    shape, dtype, device = _like("rand_like", input, dtype, device)
    return _laid_out_like(rand(shape, dtype=dtype, device=device, requires_grad=requires_grad), input)


def randn_like(input, *, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """`randn` in `input`'s shape, dtype and device unless given (PyTorch's `torch.randn_like`)."""
    shape, dtype, device = _like("randn_like", input, dtype, device)
    return _laid_out_like(randn(shape, dtype=dtype, device=device, requires_grad=requires_grad), input)


def empty_like(input, *, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """A Variable of `input`'s shape, dtype and device unless given (PyTorch's `torch.empty_like`); zeros here (see
    `empty`)."""
    shape, dtype, device = _like("empty_like", input, dtype, device)
    return _laid_out_like(empty(shape, dtype=dtype, device=device, requires_grad=requires_grad), input)


def from_numpy(array):
    """A Variable that shares `array`'s memory (PyTorch's `torch.from_numpy`): a change to one shows in the other."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(array).__name__})")
    _array_dtype(array, "from_numpy")
    shared = Variable(array, requires_grad=False)
    shared.storage_fixed = True  # no step: its memory is the caller's array, which out= may not resize (outputs.py)
    layout.mark([shared])  # its layout is the caller's array's (tinypytorch.layout)
    return shared


__all__ = [
    "tensor", "zeros", "ones", "full", "eye", "arange", "linspace", "rand", "randn",
    "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "from_numpy",
    "empty", "empty_like", "randint", "new_tensor", "new_empty", "new_zeros", "new_ones", "new_full",
    "float16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool", "half", "float", "double",
    "short", "long", "complex64", "complex128", "cfloat", "cdouble",
]
