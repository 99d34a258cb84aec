"""Comparisons and logic (no step): PyTorch's eq, ne, lt, le, gt, ge, equal, allclose, all, any and bitwise_xor.

Their results are bools or integers, which have no gradient: they compute on the arrays and make Variables that
require none, as the comparison operators do (core.compare), whatever their inputs require. Each takes PyTorch's
arguments, out= included (tinypytorch.outputs), and refuses what PyTorch refuses with its exception type.
"""
import builtins  # this module's `all` and `any` are PyTorch's
import numbers

import numpy as np

from tinypytorch import batching_state, cuda, dtypes, inplace, outputs
from tinypytorch.core import Variable, _check_broadcast, compare
from tinypytorch.functions import _dims

_NUMBERS = (numbers.Number, np.bool_)


def _got(*arguments):
    """PyTorch's names of the arguments' types in an error: Tensor, int, numpy.ndarray."""
    def name(x):
        kind = type(x)
        if isinstance(x, Variable):
            return "Tensor"
        return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"
    return ", ".join(name(x) for x in arguments)


def _array(x):
    return x.data if isinstance(x, Variable) else x


def _writable_out(op, out):
    """An out= of an operation without a gradient: a tensor (autograd has nothing to refuse)."""
    if not isinstance(out, Variable):
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {_got(out)}")


def _comparison(op, numpy_name, symbol):
    def comparison(input, other, *, out=None):  # noqa: A002 (PyTorch's names)
        if not isinstance(input, Variable) or not isinstance(other, (Variable, *cuda.array_types, *_NUMBERS)):
            raise TypeError(f"{op}() received an invalid combination of arguments - got ({_got(input, other)}), but "
                            "expected (Tensor input, Tensor other) or (Tensor input, Number other)")
        if hasattr(other, "shape"):  # before NumPy's own error, naming the operation
            _check_broadcast(op, input.data, _array(other))
        if op not in ("eq", "ne"):  # NumPy orders complex numbers (by real part first); PyTorch refuses
            dtype = dtypes.result_type(input, other)
            if dtype.kind == "c":
                raise NotImplementedError(f'"{op}_cpu" not implemented for \'{dtypes.torch_name(dtype)}\'')
        y = compare(numpy_name, input, other)
        if out is None:
            return y
        _writable_out(op, out)
        return outputs.write(op, out, y.data, (input, other))

    comparison.__name__ = comparison.__qualname__ = op
    comparison.__doc__ = (f"PyTorch's torch.{op}(input, other, *, out=None): input {symbol} other, element-wise, both "
                          "in their promoted dtype; a bool tensor without gradient.")
    return comparison


eq = _comparison("eq", "equal", "==")
ne = _comparison("ne", "not_equal", "!=")
lt = _comparison("lt", "less", "<")
le = _comparison("le", "less_equal", "<=")
gt = _comparison("gt", "greater", ">")
ge = _comparison("ge", "greater_equal", ">=")


def _tensors(op, **arguments):
    """Refuse an argument that is not a tensor, in PyTorch's words (position counted from 1)."""
    for position, (name, x) in enumerate(arguments.items(), 1):
        if not isinstance(x, Variable):
            raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not {_got(x)}")


def equal(input, other):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.equal: True if both have one shape and equal elements (compared in their promoted dtype, so
    an int64 1 equals a float32 1.0; NaN equals nothing); a Python bool."""
    _tensors("equal", input=input, other=other)
    if input.shape != other.shape:
        return False
    return builtins.bool(compare("equal", input, other).data.all())


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.allclose: whether |input - other| <= atol + rtol |other| element-wise (broadcast), NaN close to
    NaN only with equal_nan; a Python bool. Both of one dtype, as PyTorch wants them."""
    _tensors("allclose", input=input, other=other)
    for name, tolerance in (("rtol", rtol), ("atol", atol)):
        if not isinstance(tolerance, numbers.Real):
            raise TypeError(f"allclose(): argument '{name}' must be float, not {_got(tolerance)}")
        if tolerance < 0:
            raise RuntimeError(f"{name} must be greater than or equal to zero, but got {tolerance}")
    if input.data.dtype != other.data.dtype:
        raise RuntimeError(f"{dtypes.torch_name(input.data.dtype)} did not match {dtypes.torch_name(other.data.dtype)}")
    _check_broadcast("allclose", input.data, other.data)
    return builtins.bool(_isclose(input.data, other.data, rtol, atol, equal_nan).all())


def _isclose(a, b, rtol, atol, equal_nan):
    """PyTorch's isclose, step by step: equal, or NaN and NaN (equal_nan), or a finite difference within the
    tolerance; bools and integers compared in the default float where the tolerance scales them."""
    xp = cuda.get_array_module(a)
    close = a == b
    if equal_nan and a.dtype.kind in "fc":
        close |= xp.isnan(a) & xp.isnan(b)
    if rtol == 0 and atol == 0:  # the inequality is then an equality
        return close
    if a.dtype.kind == "b":
        a, b = a.astype(dtypes.default()), b.astype(dtypes.default())
    scaled = b if b.dtype.kind in "fc" else b.astype(dtypes.default())  # rtol * other: the default float for integers
    allowed = atol + xp.abs(rtol * scaled)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is nan, and not close: no warning, as PyTorch's
        actual = xp.abs(a - b)
        return close | (xp.isfinite(actual) & (actual <= allowed))


def _reduce(op, input, dim, keepdim, out):
    """all or any (op) of input over `dim`: every dim when None, none for an empty tuple (PyTorch's)."""
    if not isinstance(input, Variable):
        raise TypeError(f"{op}() received an invalid combination of arguments - got ({_got(input)}), but expected "
                        "(Tensor input, tuple of ints dim = None, bool keepdim = False)")
    if batching_state.open_vmap_levels and isinstance(input, batching_state.batched_type):  # step 69: vmap
        return _reduce_batched(op, input, dim, keepdim, out)
    data = input.data
    if isinstance(dim, (tuple, list)) and not dim:
        axes = ()  # PyTorch's all(x, dim=()) reduces no dim (where its sum reduces every one)
    else:
        axes = None if dim is None else _dims(op, dim, data.ndim)
    xp = cuda.get_array_module(data)
    y = xp.asarray(getattr(xp, op)(data, axis=axes, keepdims=keepdim))
    if data.dtype == np.uint8:  # PyTorch keeps uint8 (its bools of old); every other dtype gives bool
        y = y.astype(np.uint8)
    if out is None:
        return Variable(y, requires_grad=False)
    _writable_out(op, out)
    if out.data.dtype not in (np.bool_, np.uint8):
        raise RuntimeError(f"{op} only supports bool tensor for result, got: {dtypes.torch_name(out.data.dtype)}")
    return outputs.write(op, out, y.astype(out.data.dtype))


def _reduce_batched(op, input, dim, keepdim, out):  # step 69
    """all or any of each sample of a batched input (vmap): the same dims of the physical value, one further."""
    if out is not None:
        raise RuntimeError(f"{op}: out= is not supported inside vmap in tinypytorch")
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):  # every dim of the sample; an empty tuple
        axes = tuple(range(input.ndim))  # too, as PyTorch's batching rule reads it (where eager all reduces none)
    else:
        axes = _dims(op, dim, input.ndim)
    physical = _reduce(op, input.physical, tuple(a + 1 for a in axes) or (), keepdim, None)
    return type(input)(physical, input.level)


def all(input, dim=None, keepdim=False, *, out=None):  # noqa: A001,A002 (PyTorch's names)
    """PyTorch's torch.all: whether every element (over `dim`: an int or a tuple of ints) is true, i.e. nonzero
    (NaN too); bool, or uint8 for uint8 input, as PyTorch's."""
    return _reduce("all", input, dim, keepdim, out)


def any(input, dim=None, keepdim=False, *, out=None):  # noqa: A001,A002 (PyTorch's names)
    """PyTorch's torch.any: whether some element (over `dim`) is true; as all."""
    return _reduce("any", input, dim, keepdim, out)


def bitwise_xor(input, other, *, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.bitwise_xor (the `^` operator): for bools and integers, in their promoted dtype; a number for
    one operand (wrapped into the dtype, as PyTorch does: uint8 ^ -1 flips every bit)."""
    operands = (input, other)
    is_tensor = [isinstance(x, (Variable, *cuda.array_types)) for x in operands]
    if not builtins.any(is_tensor) or not builtins.all(isinstance(x, (Variable, *cuda.array_types, *_NUMBERS))
                                                      for x in operands):
        raise TypeError(f"bitwise_xor() received an invalid combination of arguments - got ({_got(input, other)}), "
                        "but expected (Tensor input, Tensor other), (Number self, Tensor other) or (Tensor input, "
                        "Number other)")
    if builtins.all(is_tensor):
        _check_broadcast("bitwise_xor", _array(input), _array(other))
    dtype = dtypes.result_type(input, other)
    if dtype.kind not in "biu":  # PyTorch's refusal and words
        raise NotImplementedError(f'"bitwise_xor_cpu" not implemented for \'{dtypes.torch_name(dtype)}\'')
    xp = cuda.get_array_module(*[_array(x) for x, tensor in zip(operands, is_tensor) if tensor])
    a, b = [_array(x).astype(dtype, copy=False) if tensor else np.array(x).astype(dtype)[()]
            for x, tensor in zip(operands, is_tensor)]
    y = Variable(xp.asarray(xp.bitwise_xor(a, b)), requires_grad=False)
    if out is None:
        return y
    _writable_out("bitwise_xor", out)
    return outputs.write("bitwise_xor", out, y.data, operands)


def bitwise_xor_(x, other):
    """x ^= other in place (PyTorch's bitwise_xor_, and the `^=` operator): x keeps its dtype and shape."""
    inplace.check_writable("bitwise_xor_", x, other)
    y = bitwise_xor(x, other)
    dtypes.check_in_place("bitwise_xor_", y.data.dtype, x.data.dtype)
    inplace.write("bitwise_xor_", x, y.data)
    return x
