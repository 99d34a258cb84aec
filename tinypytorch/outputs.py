"""PyTorch's out= arguments (no step): an operation that writes its result into a tensor it is given.

`torch.add(a, b, out=r)` computes a + b, writes it into r and returns r. As in PyTorch:

- r keeps its dtype: the result is cast into it as an in-place operation casts, never down a category (an integer r
  refuses a float result, in PyTorch's words); a matrix product wants r of its own dtype;
- r takes the result's shape: an r of another shape is resized, with PyTorch's warning unless r had no elements;
- r counts one more version, and an r that shares memory with an input laid out otherwise is refused;
- autograd records nothing: with grad mode on, neither an input nor r may require grad (PyTorch's refusal).

The package resizes only a tensor that owns its memory; where r is a view of another's (PyTorch would write into
the shared memory, or refuse), it raises.
"""
import numbers
import warnings

from tinypytorch import core, cuda, dtypes, functions, inplace
from tinypytorch.core import Variable
from tinypytorch.grad_mode import is_grad_enabled


def check_out(op, out, *inputs):
    """Refuse out= before computing, as PyTorch does: not a tensor, or a call autograd would have to record."""
    if not isinstance(out, Variable):
        raise TypeError(f"{op}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and any(isinstance(x, Variable) and x.requires_grad for x in (*inputs, out)):
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic differentiation, but "
                           "one of the arguments requires grad.")


def write(op, out, result, inputs=()):
    """Write array `result` into Variable `out`, resized to its shape if need be (checked by check_out); returns out.
    `inputs` are the operation's operands: one that shares memory with out, laid out otherwise, is refused."""
    if cuda.cupy is not None:  # one device per operation, as in PyTorch
        cuda.check_same_device(op, [out.data, result])
    dtypes.check_in_place(op, result.dtype, out.data.dtype)
    if tuple(out.shape) != tuple(result.shape):
        _resize(op, out, result.shape)
    inplace.check_writable(op, out)  # an inference tensor outside inference mode, a broadcast out (PyTorch's words)
    for x in inputs:
        if isinstance(x, Variable):
            inplace.check_no_partial_overlap(inplace._layout(out.data), inplace._layout(x.data), out.data.itemsize)
    inplace.write(op, out, result)
    return out


def _resize(op, out, shape):
    if out.data.size:  # PyTorch's warning (an empty out is resized without one)
        warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, which "
                      f"does not match the required output shape {list(shape)}. This behavior is deprecated, and in a "
                      "future PyTorch release outputs will not be resized unless they have zero elements. You can "
                      "explicitly reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
                      UserWarning, stacklevel=4)
    if getattr(out, "storage_fixed", False):  # from_numpy's: resizing would leave the caller's array behind
        raise RuntimeError("Trying to resize storage that is not resizable")
    if out.view_record is not None or out.data.base is not None:
        raise RuntimeError(f"{op}: out= of shape {tuple(out.shape)} would have to be resized to {tuple(shape)}, but it "
                           "shares its memory with another tensor (a view): the package resizes only a tensor that "
                           "owns its memory. Pass an out of the result's shape, or an empty one")
    out.data = cuda.get_array_module(out.data).empty(shape, dtype=out.data.dtype)


def _check_alpha(op, x0, x1, alpha):
    """PyTorch's checks of add's and sub's alpha, for the dtype the result will have."""
    if not isinstance(alpha, numbers.Number):
        raise TypeError(f"{op}(): argument 'alpha' must be Number, not {type(alpha).__name__}")
    kind = dtypes.result_type(x0, x1).kind
    if isinstance(alpha, bool) and kind != "b":
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if kind in "biu" and not isinstance(alpha, numbers.Integral):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def add(input, other, *, alpha=1, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.add: input + alpha * other, written into `out` if given."""
    if out is not None:
        check_out("add", out, input, other)
    if type(alpha) is not int or alpha != 1:  # (1.0 and True too: PyTorch checks their types)
        _check_alpha("add", input, other, alpha)
        other = core.mul(other, alpha)
    y = core.add(input, other)
    return y if out is None else write("add", out, y.data, (input, other))


def sub(input, other, *, alpha=1, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.sub: input - alpha * other, written into `out` if given."""
    if out is not None:
        check_out("sub", out, input, other)
    if type(alpha) is not int or alpha != 1:
        _check_alpha("sub", input, other, alpha)
        core.check_sub(input, other)  # (before the product hides a bool operand)
        other = core.mul(other, alpha)
    y = core.sub(input, other)
    return y if out is None else write("sub", out, y.data, (input, other))


def mul(input, other, *, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.mul: input * other, written into `out` if given."""
    if out is not None:
        check_out("mul", out, input, other)
    y = core.mul(input, other)
    return y if out is None else write("mul", out, y.data, (input, other))


def div(input, other, *, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.div (true division): input / other, written into `out` if given."""
    if out is not None:
        check_out("div", out, input, other)
    y = core.div(input, other)
    return y if out is None else write("div", out, y.data, (input, other))


def matmul(input, other, *, out=None):  # noqa: A002 (PyTorch's names)
    """PyTorch's torch.matmul (tinypytorch.functions.matmul), written into `out` if given: an out of the product's
    dtype, as PyTorch wants it."""
    if out is None:
        return functions.matmul(input, other)
    check_out("matmul", out, input, other)
    y = functions.matmul(input, other)
    if out.data.dtype != y.data.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {dtypes._C_NAMES.get(y.data.dtype.name)}, but got "
                           f"{dtypes._C_NAMES.get(out.data.dtype.name, out.data.dtype.name)} instead")
    return write("matmul", out, y.data, (input, other))


def factory_dtype(op, out, dtype, kernel):
    """The dtype a random factory called with out= draws in: out's, or `dtype` if it is out's (PyTorch refuses
    another); refused as PyTorch refuses when out requires grad in grad mode, or is not floating (`kernel`: the
    name PyTorch's refusal gives)."""
    check_out(f"aten::{op}", out)
    if dtype is not None and dtypes.as_torch(dtype) != out.dtype:
        raise RuntimeError(f"dtype {dtypes.torch_name(dtype)} does not match dtype of out parameter "
                           f"({dtypes.torch_name(out.data.dtype)})")
    if out.data.dtype.kind != "f":
        raise NotImplementedError(f'"{kernel}" not implemented for \'{dtypes.torch_name(out.data.dtype)}\'')
    return out.data.dtype


def fill(op, out, made, requires_grad):
    """Write a factory's Variable `made` into out (checked by factory_dtype); requires_grad=True makes out require
    grad, as PyTorch's does."""
    write(op, out, made.data)
    if requires_grad:
        out.requires_grad_()
    return out
