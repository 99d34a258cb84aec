"""Convolution and pooling over images (step 55): PyTorch's unfold, fold, conv2d, conv_transpose2d, max_pool2d,
avg_pool2d, adaptive_avg_pool2d and adaptive_max_pool2d, with torch.nn.functional's names and signatures.

Each of them looks at a batch of images (N, C, H, W) through windows: kh x kw positions, `dilation` apart, moved
`stride` at a time over the image with `padding` around it; or, for adaptive pooling, as many windows as the output
asks for, spread evenly over the image. `Windows` says where each position of each window falls in the padded image,
as one flat index; every operation gathers by that index, and its backward scatters back:

    unfold (im2col)   each window's values as a column: (N, C, H, W) -> (N, C*kh*kw, L), for L windows
    fold (col2im)     the columns added back into the image, positions shared by windows summed: unfold's adjoint.
                      Each is the other's backward, so derivatives of every order exist
    conv2d            unfold, one matrix product with the weight as a matrix (out_channels, C/groups*kh*kw), and a
                      reshape (plus the bias): its gradients of every order are those of the three operations
    conv_transpose2d  conv2d's gradient with respect to its input: the weight's transpose times each pixel's
                      channels, a column per pixel, folded into the larger image
    max pooling       each window's largest value; its gradient goes to that one position (GetItemGrad, whose
                      backward gathers: double backward works too)
    average pooling   each window's sum over its divisor; its gradient is the output's gradient over the divisor,
                      folded back

Forward works on NumPy and CuPy arrays alike: the index is made on the host (a few integers per window position)
and copied to the data's device. The checks and the error messages are PyTorch's.
"""
import math
import numbers

import numpy as np

from tinypytorch import dtypes
from tinypytorch.autocast_state import autocast_composite
from tinypytorch.core import Function, array_of, as_variable, astype, formulas_on_arrays
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import GetItemGrad, broadcast_to, matmul, reshape, transpose

# ----- where the windows fall ------------------------------------------------------------------------------------


class _Axis:
    """The windows along one spatial axis of length `size`: position a of window i falls at `positions[i, a]` of
    the axis padded with `before` cells in front and `after` behind. An average counts the padding up to
    `counted_end` (the padding asked for; not ceil_mode's extra cells behind it, nor adaptive pooling's filler)."""

    def __init__(self, size, positions, before, after, counted_end):
        self.size, self.positions, self.before, self.after = size, positions, before, after
        self.counted_end = counted_end

    @classmethod
    def sliding(cls, size, kernel, stride, dilation, before, after, out):
        """`out` windows of `kernel` positions `dilation` apart, the next one `stride` further on."""
        positions = np.arange(out)[:, None] * stride + np.arange(kernel)[None, :] * dilation
        # ceil_mode's last window may reach past the padding: cells of their own, filled as padding, never counted
        beyond = int(positions.max()) + 1 - (before + size + after) if out else 0
        return cls(size, positions, before, after + max(beyond, 0), before + size + after)

    @classmethod
    def adaptive(cls, size, out):
        """PyTorch's adaptive windows: window i covers [floor(i size / out), ceil((i + 1) size / out)). They differ
        in length by at most one; a shorter one is filled up with a filler cell behind the image."""
        i = np.arange(out)
        starts, ends = (i * size) // out, -((-(i + 1) * size) // out)
        kernel = int((ends - starts).max()) if out else 1
        positions = starts[:, None] + np.arange(kernel)[None, :]
        filler = positions >= ends[:, None]
        positions[filler] = size
        return cls(size, positions, 0, int(filler.any()), size)

    @property
    def padded(self):
        return self.before + self.size + self.after

    def real(self):
        """Whether each position is in the image, not in the padding."""
        return (self.positions >= self.before) & (self.positions < self.before + self.size)

    def counts(self, count_include_pad):
        """How many of each window's positions an average divides by."""
        counted = self.positions < self.counted_end if count_include_pad else self.real()
        return counted.sum(axis=1)


class Windows:  # step 55
    """Where every position of every window falls, for images of size (H, W): the kernel's kh*kw positions of each of
    the L = oh*ow windows, as a flat index into the padded image. Host arrays (NumPy), copied to a device on use."""

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
        self.size = (rows.size, cols.size)
        self.kernel = (rows.positions.shape[1], cols.positions.shape[1])
        self.out = (rows.positions.shape[0], cols.positions.shape[0])
        self.positions = self.kernel[0] * self.kernel[1]  # K, per window
        self.blocks = self.out[0] * self.out[1]  # L, the number of windows

    def _combine(self, row_values, col_values, combine):
        """A (K, L) array: combine(row_values[i, a], col_values[j, b]) at [a*kw + b, i*ow + j]."""
        rows = row_values.T[:, None, :, None]
        cols = col_values.T[None, :, None, :]
        return combine(rows, cols).reshape(self.positions, self.blocks)

    def index(self, xp):
        """The flat position in the padded (H', W') image of every window position: (K, L) ints on xp's device."""
        width = self.cols.padded
        return xp.asarray(self._combine(self.rows.positions, self.cols.positions, lambda r, c: r * width + c))

    def real(self, xp):
        """Whether each window position is in the image (not padding nor filler): (K, L) bools."""
        return xp.asarray(self._combine(self.rows.real(), self.cols.real(), np.logical_and))

    def not_before(self, xp):
        """Whether each window position is not in the padding before the image (PyTorch's start of a window): (K, L)
        bools."""
        return xp.asarray(self._combine(self.rows.positions >= self.rows.before,
                                        self.cols.positions >= self.cols.before, np.logical_and))

    def source(self, xp):
        """The flat position in the unpadded (H, W) image of every window position (PyTorch's max indices)."""
        width = self.cols.size
        return xp.asarray(self._combine(self.rows.positions - self.rows.before, self.cols.positions - self.cols.before,
                                        lambda r, c: r * width + c))

    def divisors(self, count_include_pad):
        """Each window's divisor for an average: (L,) ints, the counted rows times the counted columns."""
        return np.outer(self.rows.counts(count_include_pad), self.cols.counts(count_include_pad)).reshape(-1)

    def pad(self, x, value):
        """x (N, C, H, W) inside the padded image, the padding filled with `value`; x itself if there is none."""
        rows, cols = self.rows, self.cols
        if rows.before == rows.after == cols.before == cols.after == 0:
            return x
        xp = get_array_module(x)
        padded = xp.full(x.shape[:2] + (rows.padded, cols.padded), value, dtype=x.dtype)
        padded[:, :, rows.before:rows.before + rows.size, cols.before:cols.before + cols.size] = x
        return padded

    def crop(self, padded):
        """The image inside a padded one (its own memory, not a view that would keep the padding alive)."""
        rows, cols = self.rows, self.cols
        if rows.before == rows.after == cols.before == cols.after == 0:
            return padded
        return padded[:, :, rows.before:rows.before + rows.size, cols.before:cols.before + cols.size].copy()

    def gather(self, x, value):
        """Every window's values: (N, C, K, L) from x (N, C, H, W), padding cells holding `value`."""
        xp = get_array_module(x)
        n, c = x.shape[:2]
        padded = self.pad(x, value)
        return padded.reshape(n, c, self.rows.padded * self.cols.padded)[:, :, self.index(xp)]


# ----- the operations ---------------------------------------------------------------------------------------------

class Unfold(Function):  # step 55
    """PyTorch's im2col: every window's values as a column, (N, C, H, W) -> (N, C*kh*kw, L), channel by channel,
    then row by row within the kernel. Linear in x; its backward is Fold."""

    torch_name = "Im2ColBackward0"

    def __init__(self, windows):
        self.windows = windows

    def forward(self, x):
        n, c = x.shape[:2]
        w = self.windows
        return w.gather(x, 0).reshape(n, c * w.positions, w.blocks)

    def backward(self, gy):
        return Fold(self.windows)(gy)

    jvp = Function.jvp_by_forward  # step 64


class Fold(Function):  # step 55
    """PyTorch's col2im: columns (N, C*kh*kw, L) added back into images (N, C, H, W), where windows overlap the
    values summed; Unfold's adjoint. Linear; its backward is Unfold."""

    torch_name = "Col2ImBackward0"

    def __init__(self, windows):
        self.windows = windows

    def forward(self, cols):
        w, xp = self.windows, get_array_module(cols)
        n, c = cols.shape[0], cols.shape[1] // w.positions
        padded = xp.zeros((n, c, w.rows.padded * w.cols.padded), dtype=cols.dtype)
        # padded[..., index] += cols would add once per distinct position: add.at adds every window's share
        xp.add.at(padded, (slice(None), slice(None), w.index(xp)), cols.reshape(n, c, w.positions, w.blocks))
        return w.crop(padded.reshape(n, c, w.rows.padded, w.cols.padded))

    def backward(self, gy):
        return Unfold(self.windows)(gy)

    jvp = Function.jvp_by_forward  # step 64


class MaxPool2d(Function):  # step 55
    """Each window's largest value, and where it is: (values, indices), the indices flat positions in each (H, W)
    image (PyTorch's max_pool2d_with_indices). Among equal values the first of the window (row by row) wins, and a NaN
    wins over every number, the last NaN over the others: the order of PyTorch's CPU kernel, so the gradient goes
    to the element PyTorch sends it to. The backward scatters the gradient there (GetItemGrad), and its backward
    gathers: derivatives of every order."""

    torch_name = "MaxPool2DWithIndicesBackward0"

    def __init__(self, windows):
        self.windows = windows

    def forward(self, x):
        w, xp = self.windows, get_array_module(x)
        n, c = x.shape[:2]
        lowest = -math.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        patches = w.gather(x, lowest)  # (N, C, K, L); padding never wins, not even over -inf (& real below)
        y = patches.max(axis=2)
        real = w.real(xp)
        first = (patches == y[:, :, None, :]) & real
        first = first.argmax(axis=2)
        self.empty = None
        empty = ~real.any(axis=0)  # no step: a window wholly in the padding (dilation lets one fit) has no winner
        if empty.any():  # no step: PyTorch's index, its first position not before the image, and no gradient
            self.empty = empty
            first = xp.where(empty, w.not_before(xp).argmax(axis=0), first)
        if x.dtype.kind == "f":
            nan = xp.isnan(y)
            if nan.any():  # PyTorch's loop takes every NaN it meets: the last one stays
                last = w.positions - 1 - xp.isnan(patches)[:, :, ::-1].argmax(axis=2)
                first = xp.where(nan, last, first)
        indices = w.source(xp).reshape(-1)[first * w.blocks + xp.arange(w.blocks)].astype(np.int64)
        indices = indices.reshape((n, c) + w.out)
        self.x_shape = x.shape
        self.save_for_backward(indices)  # where each gradient goes (PyTorch saves the indices too)
        return y.reshape((n, c) + w.out), indices

    def _key(self, indices):
        """The index of x, seen as (N, C, H*W), of each window's winner: its sample, its channel, its position."""
        n, c = self.x_shape[:2]
        xp = get_array_module(indices)
        return (xp.arange(n)[:, None, None], xp.arange(c)[None, :, None],
                indices.reshape(n, c, self.windows.blocks))

    def backward(self, gy, gy_indices=None):
        (indices,) = self.saved_tensors
        n, c, h, w = self.x_shape
        gy = reshape(gy, (n, c, self.windows.blocks))
        if self.empty is not None:  # no step: a window of padding alone sends its gradient nowhere, as PyTorch's
            gy = gy * (~self.empty).astype(gy.dtype)
            indices = self._in_image(indices)
        g = GetItemGrad(self._key(array_of(indices)), (n, c, h * w))(gy)
        return reshape(g, self.x_shape)

    def jvp(self, t):  # step 64: the tangent of each window's winner
        n, c, h, w = self.x_shape
        indices = self.results[1]
        if self.empty is not None:  # no step: a window of padding alone has no winner, so no tangent
            found = t.reshape(n, c, h * w)[self._key(self._in_image(indices))] * ~self.empty
            return found.reshape(indices.shape), None
        return t.reshape(n, c, h * w)[self._key(indices)].reshape(indices.shape), None

    def _in_image(self, indices):
        """The indices with those of windows of padding alone (PyTorch's, past the image) put at 0: their gradient
        is zero, but must be sent somewhere in the image."""
        indices = array_of(indices)
        xp = get_array_module(indices)
        return xp.where(self.empty, 0, indices.reshape(indices.shape[:2] + (-1,))).reshape(indices.shape)


class AvgPool2d(Function):  # step 55
    """Each window's sum divided by its divisor, one per window (PyTorch's avg_pool2d, and adaptive_avg_pool2d).
    Linear; the backward spreads each output's gradient over its window's positions, divided likewise (Fold)."""

    torch_name = "AvgPool2DBackward0"

    def __init__(self, windows, divisors):
        self.windows, self.divisors = windows, divisors  # divisors: (L,), host ints

    def forward(self, x):
        w, xp = self.windows, get_array_module(x)
        n, c = x.shape[:2]
        self.x_shape = x.shape
        patches = w.gather(x, 0)
        if x.dtype.kind in "iu":  # C's integer division, toward zero, as PyTorch's kernel divides
            total = patches.astype(np.int64).sum(axis=2)
            d = xp.asarray(self.divisors.astype(np.int64))
            y = ((xp.abs(total) // xp.abs(d)) * (xp.sign(total) * xp.sign(d))).astype(x.dtype)
        else:  # float16 added up in float32 and rounded once, as PyTorch's CPU kernel does
            acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
            y = (patches.astype(acc, copy=False).sum(axis=2) / xp.asarray(self.divisors, dtype=acc))
            y = y.astype(x.dtype, copy=False)
        return y.reshape((n, c) + w.out)

    def backward(self, gy):
        w = self.windows
        n, c = self.x_shape[:2]
        xp = get_array_module(gy)
        share = reshape(gy, (n, c, 1, w.blocks)) / xp.asarray(self.divisors, dtype=array_of(gy).dtype)
        return Fold(w)(reshape(broadcast_to(share, (n, c, w.positions, w.blocks)), (n, c * w.positions, w.blocks)))

    jvp = Function.jvp_by_forward  # step 64


formulas_on_arrays(Unfold, Fold, MaxPool2d, AvgPool2d)


# ----- arguments, checked as PyTorch checks them ------------------------------------------------------------------

def _ints(op, name, value):
    """`value` (an int, or a tuple or list of ints) as a tuple of Python ints; a float is refused as PyTorch's
    argument parser refuses it."""
    values = (value,) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, not {type(value).__name__}")
    for v in values:
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"{op}(): argument '{name}' must be tuple of ints, but found element of type "
                            f"{type(v).__name__}")
    return tuple(int(v) for v in values)


def _pair(op, name, value, wrong_length):
    """(height, width) from an int or a sequence of one or two ints; `wrong_length(values)` is the error for others."""
    values = _ints(op, name, value)
    if len(values) == 1:
        return values * 2
    if len(values) != 2:
        raise wrong_length(values)
    return values


def _unfold_pair(op, name, value):  # unfold and fold take one int or exactly two
    values = _ints(op, name, value)
    if isinstance(value, numbers.Integral):
        return values * 2
    if len(values) != 2:
        raise RuntimeError(f"It is expected {name} equals to 2, but got size {len(values)}")
    return values


def _pool_pair(op, name, value):
    def wrong_length(values):
        if name == "stride":
            return RuntimeError(f"{op}: stride must either be omitted, a single int, or a tuple of two ints")
        if name == "dilation":
            return RuntimeError(f"{op}: dilation must be either a single int, or a tuple of two ints")
        return RuntimeError(f"{op}: {name} must either be a single int, or a tuple of two ints")
    return _pair(op, name, value, wrong_length)


def _conv_pair(name, value, op="conv2d"):
    def wrong_length(values):
        return RuntimeError(f"expected {name} to be a single integer value or a list of 2 values to match the "
                            f"convolution dimensions, but got {name}={list(values)}")
    return _pair(op, name, value, wrong_length)


def _size(shape):
    """A shape as PyTorch's messages print it: [2, 3, 5, 6]."""
    return "[" + ", ".join(str(n) for n in shape) + "]"


# PyTorch's C++ names of the dtypes, in its messages about two inputs' types
_C_TYPES = {"float64": "double", "float32": "float", "float16": "c10::Half", "int64": "long int", "int32": "int",
            "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}


def _not_for(op, x, kinds):
    """PyTorch's refusal of a dtype its kernel is not written for."""
    if x.dtype.kind not in kinds:
        raise NotImplementedError(f'"{op}" not implemented for \'{dtypes.torch_name(x.dtype)}\'')


def _batched(x):
    """A batch of images (N, C, H, W): x itself, or an unbatched image (C, H, W) as a batch of one; and whether to
    take the batch dimension away again."""
    return (x, False) if x.ndim == 4 else (reshape(x, (1,) + x.shape), True)


def _unbatched(y, was_unbatched):
    return reshape(y, y.shape[1:]) if was_unbatched else y


# ----- unfold and fold --------------------------------------------------------------------------------------------

def _unfold_arguments(kernel_size, dilation, padding, stride):
    kernel = _unfold_pair("im2col", "kernel_size", kernel_size)
    dilation = _unfold_pair("im2col", "dilation", dilation)
    padding = _unfold_pair("im2col", "padding", padding)
    stride = _unfold_pair("im2col", "stride", stride)
    if min(kernel) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: {kernel[0]} "
                           f"kernel_width: {kernel[1]}")
    if min(stride) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: {stride[0]} "
                           f"stride_width: {stride[1]}")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dilation[0]} "
                           f"dilation_width: {dilation[1]}")
    if min(padding) < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {padding[0]} "
                           f"pad_width: {padding[1]}")
    return kernel, dilation, padding, stride


def _blocks(size, kernel, dilation, padding, stride):
    """How many windows fit along one axis (PyTorch's count for unfold, fold and conv2d; may be < 1)."""
    return (size + 2 * padding - (dilation * (kernel - 1) + 1)) // stride + 1


def _sliding_windows(size, kernel, stride, dilation, pads, out):
    """The Windows of a sliding kernel over images of `size`, `pads` ((top, bottom), (left, right))."""
    return Windows(*[_Axis.sliding(size[i], kernel[i], stride[i], dilation[i], *pads[i], out[i]) for i in (0, 1)])


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # step 55  # noqa: A002 (PyTorch's names)
    """PyTorch's F.unfold (im2col): the values of every kh x kw window of a batch of images (N, C, H, W), each
    window a column: (N, C*kh*kw, L), L the number of windows; an image (C, H, W) gives (C*kh*kw, L)."""
    x = as_variable(input, "unfold")
    if x.ndim < 3:  # PyTorch's type: its unfold reaches for a dimension the input does not have
        raise IndexError(f"Dimension out of range: unfold expects a 3D or 4D (batch mode) input, but got: "
                         f"{_size(x.shape)}")
    if x.ndim > 4 or 0 in x.shape[-3:]:
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                           f"dimensions for input, but got: {_size(x.shape)}")
    kernel, dilation, padding, stride = _unfold_arguments(kernel_size, dilation, padding, stride)
    _not_for("im2col_out_cpu", x, "fb")
    size = tuple(x.shape[-2:])
    out = tuple(_blocks(size[i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1))
    if min(out) < 1:
        raise RuntimeError(f"Given input with spatial size {size}, kernel_size={kernel}, dilation={dilation}, "
                           f"padding={padding}, calculated shape of the array of sliding blocks as {out}, but its "
                           "components must be at least one.")
    x, unbatched = _batched(x)
    windows = _sliding_windows(size, kernel, stride, dilation, [(p, p) for p in padding], out)
    return _unbatched(Unfold(windows)(x), unbatched)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # step 55  # noqa: A002
    """PyTorch's F.fold (col2im): columns (N, C*kh*kw, L), one per window, added back into images (N, C, H, W) of
    `output_size` (H, W), the values of overlapping windows summed; (C*kh*kw, L) gives (C, H, W). fold(unfold(x))
    is x times the number of windows that cover each element."""
    x = as_variable(input, "fold")
    size = _unfold_pair("col2im", "output_size", output_size)
    kernel, dilation, padding, stride = _unfold_arguments(kernel_size, dilation, padding, stride)
    if x.ndim not in (2, 3) or 0 in x.shape[-2:]:
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {_size(x.shape)}")
    _not_for("col2im_out_cpu", x, "fb")
    if x.shape[-2] % (kernel[0] * kernel[1]):
        raise RuntimeError("Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[-2]} and kernel_size={kernel}.")
    out = tuple(_blocks(size[i], kernel[i], dilation[i], padding[i], stride[i]) for i in (0, 1))
    if out[0] * out[1] != x.shape[-1] or min(out) < 1:
        raise RuntimeError(f"Given output_size={size}, kernel_size={kernel}, dilation={dilation}, padding={padding}, "
                           f"stride={stride}, expected size of input's dimension 2 to match the calculated number of "
                           f"sliding blocks {out[0]} * {out[1]} = {out[0] * out[1]}, but got "
                           f"input.size(2)={x.shape[-1]}.")
    unbatched = x.ndim == 2
    if unbatched:
        x = reshape(x, (1,) + x.shape)
    windows = _sliding_windows(size, kernel, stride, dilation, [(p, p) for p in padding], out)
    return _unbatched(Fold(windows)(x), unbatched)


# ----- conv2d -----------------------------------------------------------------------------------------------------

def _conv_padding(padding, stride, dilation, kernel):
    """((top, bottom), (left, right)) for conv2d's `padding`: ints, "valid" (none) or "same" (the output as large as
    the input: d (k - 1) cells in all, the odd one behind, as PyTorch pads)."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if max(stride) > 1:
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in total)
    padding = _conv_pair("padding", padding)
    if min(padding) < 0:
        raise RuntimeError("negative padding is not supported")
    return tuple((p, p) for p in padding)


def _check_ranks(op, x, weight, layout):
    """The input's and the weight's ranks, in PyTorch's words (conv2d and conv_transpose2d)."""
    if x.ndim not in (3, 4):
        raise RuntimeError(f"Expected 3D (unbatched) or 4D (batched) input to {op}, but got input of size: "
                           f"{_size(x.shape)}")
    if weight.ndim != 4:
        raise RuntimeError(f"{op}: expected a 4-D weight ({layout}, kH, kW), but got weight of size "
                           f"{_size(weight.shape)}")


def _check_groups(op, groups):
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool):
        raise TypeError(f"{op}(): argument 'groups' must be int, not {type(groups).__name__}")


def _check_conv(x, weight, bias, groups):
    _check_ranks("conv2d", x, weight, "out_channels, in_channels / groups")
    _check_groups("conv2d", groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if x.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({dtypes.tensor_type(x)}) and weight type ({dtypes.tensor_type(weight)}) "
                           "should be the same")
    if bias is not None and bias.dtype != x.dtype:
        raise RuntimeError(f"Input type ({_C_TYPES.get(x.dtype.name, x.dtype.name)}) and bias type "
                           f"({_C_TYPES.get(bias.dtype.name, bias.dtype.name)}) should be the same")
    _not_for("slow_conv2d_cpu", x, "fiuc")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # step 55  # noqa: A002
    """PyTorch's F.conv2d: y[n, o] = b[o] + sum over the input channels of its group and the kernel's positions of
    w[o, c, a, b'] x[n, c, i s + a d, j s + b' d], for images x (N, C, H, W) (or one, (C, H, W)) and a weight
    (out_channels, C / groups, kh, kw); `padding` an int, a pair, "valid" or "same".

    Built as a matrix product over unfolded patches: the columns of unfold(x) are the windows, the rows of the
    weight as a matrix (out_channels, C / groups * kh * kw) the filters, so y = W @ unfold(x), reshaped to images.
    With groups, each group of channels is a product of its own (a batch of G products). Its gradients, of every
    order, are those of unfold (whose backward is fold), the matrix product and the reshape."""
    x, weight = as_variable(input, "conv2d"), as_variable(weight, "conv2d")
    bias = None if bias is None else as_variable(bias, "conv2d")
    x, weight, *rest = autocast_composite("conv2d", x, weight, *([] if bias is None else [bias]))  # one operation
    bias = rest[0] if rest else None
    _check_conv(x, weight, bias, groups)
    stride, dilation = _conv_pair("stride", stride), _conv_pair("dilation", dilation)
    kernel = weight.shape[2:]
    pads = _conv_padding(padding, stride, dilation, kernel)
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    x, unbatched = _batched(x)
    out_channels = weight.shape[0]
    if out_channels % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{_size(weight.shape)}] instead")
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {_size(weight.shape)}, expected input"
                           f"{_size(x.shape)} to have {weight.shape[1] * groups} channels, but got {x.shape[1]} "
                           "channels instead")
    if bias is not None and bias.shape != (out_channels,):
        raise RuntimeError(f"Given weight of size {_size(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {_size(bias.shape)} instead")
    size = x.shape[2:]
    padded = tuple(size[i] + sum(pads[i]) for i in (0, 1))
    span = tuple(dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1))
    if padded[0] < span[0] or padded[1] < span[1]:
        raise RuntimeError(f"Calculated padded input size per channel: ({padded[0]} x {padded[1]}). Kernel size: "
                           f"({span[0]} x {span[1]}). Kernel size can't be greater than actual input size")
    out = tuple((padded[i] - span[i]) // stride[i] + 1 for i in (0, 1))
    windows = _sliding_windows(size, kernel, stride, dilation, pads, out)
    return _unbatched(_convolve(x, weight, bias, windows, groups), unbatched)


def _convolve(x, weight, bias, windows, groups):  # step 55
    """conv2d of images x (N, C, H, W), its arguments checked: y = W @ unfold(x), reshaped to images, plus the bias."""
    n, out_channels = x.shape[0], weight.shape[0]
    columns = Unfold(windows)(x)  # (N, C*kh*kw, L): a column per window
    if groups == 1:
        y = matmul(reshape(weight, (out_channels, -1)), columns)  # (O, C*kh*kw) @ (N, C*kh*kw, L) = (N, O, L)
    else:  # (G, O/G, C/G*kh*kw) @ (N, G, C/G*kh*kw, L) = (N, G, O/G, L)
        columns = reshape(columns, (n, groups, columns.shape[1] // groups, windows.blocks))
        y = matmul(reshape(weight, (groups, out_channels // groups, -1)), columns)
    y = reshape(y, (n, out_channels) + windows.out)
    if bias is not None:
        y = y + reshape(bias, (out_channels, 1, 1))
    return y


# ----- conv_transpose2d -------------------------------------------------------------------------------------------

def _transposed_arguments(x, weight, bias, stride, padding, output_padding, groups, dilation):
    """conv_transpose2d's arguments checked as PyTorch checks them: (stride, padding, dilation, output size)."""
    op = "conv_transpose2d"
    stride, padding = _conv_pair("stride", stride, op), _conv_pair("padding", padding, op)
    output_padding, dilation = _conv_pair("output_padding", output_padding, op), _conv_pair("dilation", dilation, op)
    _check_groups(op, groups)
    _check_ranks(op, x, weight, "in_channels, out_channels / groups")
    if x.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({dtypes.tensor_type(x)}) and weight type ({dtypes.tensor_type(weight)}) "
                           "should be the same")
    if x.dtype.kind not in "fc" and x.dtype != np.int64:
        raise NotImplementedError(f'"slow_conv_transpose2d_out_cpu" not implemented for '
                                  f"'{dtypes.torch_name(x.dtype)}'")
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(padding) < 0:
        raise RuntimeError("negative padding is not supported")
    if min(output_padding) < 0:
        raise RuntimeError("negative output_padding is not supported")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: {dilation[0]}, "
                           f"dilation_width: {dilation[1]}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[0] == 0:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least 1 at dimension 0, but got weight "
                           f"of size {_size(weight.shape)} instead")
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{_size(weight.shape)}] instead")
    channels = x.shape[-3]
    if channels != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {_size(weight.shape)}, expected input"
                           f"{_size(x.shape)} to have {weight.shape[0]} channels, but got {channels} channels instead")
    out_channels = weight.shape[1] * groups
    if bias is not None and bias.shape != (out_channels,):
        raise RuntimeError(f"Given transposed=1, weight of size {_size(weight.shape)}, expected bias to be "
                           f"1-dimensional with {out_channels} elements, but got bias of size {_size(bias.shape)} "
                           "instead")
    if any(o >= s and o >= d for o, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                           f"output_padding_height: {output_padding[0]} output_padding_width: {output_padding[1]} "
                           f"stride_height: {stride[0]} stride_width: {stride[1]} dilation_height: {dilation[0]} "
                           f"dilation_width: {dilation[1]}")
    size, kernel = x.shape[-2:], weight.shape[2:]
    out = tuple((size[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1
                for i in (0, 1))
    if min(out) < 1:
        raise RuntimeError(f"Given input size per channel: ({size[0]} x {size[1]}). Calculated output size per "
                           f"channel: ({out[0]} x {out[1]}). Output size is too small")
    return stride, padding, dilation, out


def _transposed_bias(x, bias):
    """The bias in the output's dtype. PyTorch's CPU kernel adds it in place: another dtype is cast (a float32 bias of
    float64 images), unless the output could not hold it (a float bias of integer images), or the images are float32,
    whose kernel wants the bias in their dtype."""
    if bias is None or bias.dtype == x.dtype:
        return bias
    if x.dtype == np.float32:
        raise RuntimeError(f"Input type ({dtypes.tensor_type(x)}) and bias type ({dtypes.tensor_type(bias)}) should "
                           "be the same or input should be a MKLDNN tensor and bias is a dense tensor")
    dtypes.check_in_place("conv_transpose2d", dtypes.promote_types(x.dtype, bias.dtype), x.dtype)
    return astype(bias, x.dtype)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # step 55  # noqa: A002
                     dilation=1):
    """PyTorch's F.conv_transpose2d: the gradient of conv2d with respect to its input, as an operation. Images x
    (N, C_in, H, W) (or one, (C_in, H, W)) and a weight (C_in, C_out / groups, kh, kw), conv2d's weight for a
    convolution from C_out channels to C_in, give images (N, C_out, H', W'), H' = (H - 1) stride - 2 padding +
    dilation (kh - 1) + output_padding + 1: the size whose conv2d (with the same stride, padding and dilation) is
    H x W, output_padding choosing among the sizes that a stride > 1 makes equal.

    Built as conv2d's backward is: each position of x becomes a column W^T x[:, :, i, j] of C_out*kh*kw values, and
    fold adds the columns into the image, where windows overlap summed. Its gradient with respect to x is conv2d."""
    x, weight = as_variable(input, "conv_transpose2d"), as_variable(weight, "conv_transpose2d")
    bias = None if bias is None else as_variable(bias, "conv_transpose2d")
    x, weight, *rest = autocast_composite("conv_transpose2d", x, weight, *([] if bias is None else [bias]))
    bias = rest[0] if rest else None
    stride, padding, dilation, out = _transposed_arguments(x, weight, bias, stride, padding, output_padding, groups,
                                                           dilation)
    bias = _transposed_bias(x, bias)
    x, unbatched = _batched(x)
    windows = _sliding_windows(out, weight.shape[2:], stride, dilation, [(p, p) for p in padding], x.shape[2:])
    return _unbatched(_convolve_transposed(x, weight, bias, windows, groups), unbatched)


def _convolve_transposed(x, weight, bias, windows, groups):  # step 55
    """conv_transpose2d of images x (N, C_in, H, W), its arguments checked: fold(W^T @ x), plus the bias."""
    n, in_channels = x.shape[:2]
    out_channels = weight.shape[1] * groups
    w = reshape(weight, (groups, in_channels // groups, -1))  # (G, C_in/G, C_out/G*kh*kw)
    rows = reshape(x, (n, groups, in_channels // groups, windows.blocks))  # each of the L = H*W positions a column
    columns = matmul(transpose(w, 1, 2), rows)  # (G, C_out/G*kh*kw, C_in/G) @ (N, G, C_in/G, L): (N, G, ., L)
    y = Fold(windows)(reshape(columns, (n, out_channels * windows.positions, windows.blocks)))  # (N, C_out, H', W')
    if bias is not None:
        y = y + reshape(bias, (out_channels, 1, 1))
    return y


# ----- pooling ----------------------------------------------------------------------------------------------------

def _pool_input(op, x):
    x = as_variable(x, op)
    if x.ndim < 3 and op == "avg_pool2d":  # PyTorch's type: its avg_pool2d reaches for a dimension the input lacks
        raise IndexError(f"Dimension out of range: avg_pool2d expects a 3D or 4D (batch mode) input, but got: "
                         f"{_size(x.shape)}")
    if x.ndim not in (3, 4) or 0 in x.shape[-3:]:
        if op == "max_pool2d" and x.ndim not in (3, 4):
            raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but "
                           f"got:{_size(x.shape)}")
    return x


def _pool_windows(op, x, kernel_size, stride, padding, dilation, ceil_mode):
    """The Windows of max_pool2d or avg_pool2d over x (N, C, H, W) or (C, H, W), checked in PyTorch's order."""
    kernel = _pool_pair(op, "kernel_size", kernel_size)
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) else \
        _pool_pair(op, "stride", stride)
    padding, dilation = _pool_pair(op, "padding", padding), _pool_pair(op, "dilation", dilation)
    for p, k, d in zip(padding, kernel, dilation):
        if p < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
    if 0 in stride:
        raise RuntimeError("stride should not be zero")
    if min(kernel) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kernel[0]} kW: {kernel[1]}")
    if min(stride) < 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {stride[0]} dW: {stride[1]}")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dilation[0]} "
                           f"dilationW: {dilation[1]}")
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got padW = {padding[1]}, "
                           f"padH = {padding[0]}, kW = {kernel[1]}, kH = {kernel[0]}")
    size = x.shape[-2:]
    out = []
    for n, k, s, p, d in zip(size, kernel, stride, padding, dilation):
        count = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (count - 1) * s >= n + p:
            count -= 1  # PyTorch's rule: the last window starts inside the image or the padding in front of it
        out.append(count)
    if min(out) < 1:
        c = x.shape[-3]
        raise RuntimeError(f"Given input size: ({c}x{size[0]}x{size[1]}). Calculated output size: "
                           f"({c}x{out[0]}x{out[1]}). Output size is too small")
    return _sliding_windows(size, kernel, stride, dilation, [(p, p) for p in padding], out)


def _max_pool(op, x, windows, return_indices, torch_name):
    x, unbatched = _batched(x)
    function = MaxPool2d(windows)
    if torch_name is not None:
        function.torch_name = torch_name
    y, indices = function(x)
    y = _unbatched(y, unbatched)
    if not return_indices:
        return y
    return y, _unbatched(indices, unbatched)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # step 55  # noqa: A002
               return_indices=False):
    """PyTorch's F.max_pool2d: the largest value of each kh x kw window (positions `dilation` apart, the padding
    -inf), and with return_indices its flat position in the (H, W) image. The gradient goes to that one element:
    among ties the first of the window, row by row, as PyTorch's. stride defaults to kernel_size; ceil_mode counts
    a last, partial window, unless it would start in the padding behind the image."""
    x = _pool_input("max_pool2d", input)
    _not_for("max_pool2d", x, "fiu")
    windows = _pool_windows("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    return _max_pool("max_pool2d", x, windows, return_indices, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,  # step 55  # noqa: A002
               count_include_pad=True, divisor_override=None):
    """PyTorch's F.avg_pool2d: the average of each kh x kw window, the padding zeros. The divisor is the window's
    size within the padded image (count_include_pad=True), or within the image itself (False), or
    `divisor_override`; ceil_mode's partial last window is divided by what of it lies within the padded image."""
    x = _pool_input("avg_pool2d", input)
    _not_for("avg_pool2d", x, "fiu")
    windows = _pool_windows("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is None:
        divisors = windows.divisors(count_include_pad)
    else:
        if not isinstance(divisor_override, numbers.Integral) or isinstance(divisor_override, bool):
            raise TypeError(f"avg_pool2d(): argument 'divisor_override' must be int, not "
                            f"{type(divisor_override).__name__}")
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
        divisors = np.full(windows.blocks, int(divisor_override))
    x, unbatched = _batched(x)
    return _unbatched(AvgPool2d(windows, divisors)(x), unbatched)


def _adaptive_windows(op, x, output_size):
    if isinstance(output_size, numbers.Integral) or output_size is None:
        output_size = (output_size, output_size)
    if len(output_size) != 2:
        if op == "adaptive_max_pool2d":
            raise RuntimeError("adaptive_max_pool2d(): internal error: output_size.size() must be 2")
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    size = x.shape[-2:]
    out = tuple(n if o is None else o for o, n in zip(output_size, size))
    for o in out:
        if not isinstance(o, numbers.Integral) or isinstance(o, bool):
            raise TypeError(f"{op}(): argument 'output_size' must be tuple of ints, but found element of type "
                            f"{type(o).__name__}")
    if min(out) < 0:
        if op == "adaptive_max_pool2d":
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(out)}: "
                               f"{_size(x.shape[:-2] + out)}")
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but "
                           f"received {{{out[0]}, {out[1]}}}")
    return Windows(_Axis.adaptive(size[0], int(out[0])), _Axis.adaptive(size[1], int(out[1])))


def _adaptive_input(op, x, output_size):
    x = as_variable(x, op)
    if isinstance(output_size, (tuple, list)) and x.ndim <= len(output_size):  # PyTorch's type and words
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    if x.ndim not in (3, 4):
        raise RuntimeError(f"{op}(): Expected 3D or 4D tensor, but got{':' if op == 'adaptive_max_pool2d' else ''} "
                           f"{_size(x.shape)}")
    for dim in range(x.ndim - 2, x.ndim):
        if x.shape[dim] == 0:
            raise RuntimeError(f"{op}(): Expected input to have non-zero size for non-batch dimensions, but input has "
                               f"sizes {_size(x.shape)} with dimension {dim} being empty")
    _not_for(op, x, "f")
    return x


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """PyTorch's F.adaptive_avg_pool2d: images (N, C, H, W) averaged down to `output_size` (oh, ow) (an int for
    both; None keeps that side), window i of a side covering [floor(i H / oh), ceil((i + 1) H / oh))."""
    x = _adaptive_input("adaptive_avg_pool2d", input, output_size)
    windows = _adaptive_windows("adaptive_avg_pool2d", x, output_size)
    x, unbatched = _batched(x)
    function = AvgPool2d(windows, windows.divisors(False))
    function.torch_name = "AdaptiveAvgPool2DBackward0"
    return _unbatched(function(x), unbatched)


def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    """PyTorch's F.adaptive_max_pool2d: the largest value of each of adaptive_avg_pool2d's windows (and with
    return_indices its flat position in the (H, W) image); the gradient goes to it, the first among ties."""
    x = _adaptive_input("adaptive_max_pool2d", input, output_size)
    windows = _adaptive_windows("adaptive_max_pool2d", x, output_size)
    return _max_pool("adaptive_max_pool2d", x, windows, return_indices, "AdaptiveMaxPool2DBackward0")
