"""The memory layout of a new result: PyTorch's rules, not NumPy's.

NumPy and PyTorch both lay a new result out after its inputs, each by its own rule, and the two differ where an
input is not laid out in C order: an expanded input (strides of 0), a transposed or sliced one, two inputs laid
out differently. The layout shows in what may follow: `view(-1)` works or raises, `reshape` views or copies (and
so shares a version counter or not), an in-place change refuses an overlap or not. So the package lays such
results out as PyTorch does:

- an element-wise result ("inputs", `follow_inputs`): PyTorch's TensorIterator sorts the dimensions by the
  inputs' strides, the first input deciding where it can and a broadcast dimension (stride 0) deciding nothing,
  and makes the result dense in that order;
- a copy or a cast ("preserve", `preserve_format`): the input's own strides where it is dense, else dense in its
  order;
- a reduction or a softmax ("contiguous"): C order, whatever the input's.

Only an input that is not laid out in C order can make the two libraries differ, and nearly every array is: a
Variable whose array may not be is marked `_strided` (`mark`: views, and results of such inputs), and only an
operation with a marked input asks this module (Function.__call__).
"""
from tinypytorch import cuda


def lay_out(rule, y, arrays):
    """Result y of an operation on `arrays` laid out by PyTorch's `rule`: "inputs", "preserve" or "contiguous"."""
    if rule == "inputs":
        return follow_inputs(y, arrays)
    if rule == "preserve":
        return preserve_format(y, arrays[0])
    return _relaid(y, list(range(y.ndim))[::-1])  # C order, with PyTorch's strides for dimensions of length 1


def preserve_format(y, a):
    """y, a copy or a cast of array a, laid out as PyTorch's clone and `to` lay out theirs (torch.preserve_format):
    a's very strides where a is dense, else dense in a's order of the dimensions."""
    if is_dense(a.shape, a.strides, a.itemsize):
        return _with_strides(y, _element_strides(a))
    return _relaid(y, _iteration_order(y.shape, [a]))


def follow_inputs(y, arrays):
    """Element-wise result y laid out as PyTorch lays out the result of `arrays`."""
    if all(a.shape == y.shape for a in arrays):  # PyTorch's fast paths, for operands of the result's shape:
        if all(a.flags.c_contiguous for a in arrays):
            return _relaid(y, list(range(y.ndim))[::-1])  # all contiguous: C order
        if y.ndim == 4 and all(_channels_last(a) for a in arrays):
            return _with_strides(y, _channels_last_strides(y.shape))  # all channels-last (NHWC in memory)
        strides, first = [_element_strides(a) for a in arrays], arrays[0]
        if strides.count(strides[0]) == len(strides) and is_dense(first.shape, first.strides, first.itemsize):
            return _with_strides(y, strides[0])  # all dense with the same strides: those strides
    elif all(a.flags.c_contiguous for a in arrays) and 1 not in y.shape:
        return y  # C order: (no dimension of length 1 whose stride could reorder the others)
    return _relaid(y, _iteration_order(y.shape, arrays))


def _channels_last_strides(shape):
    n, c, h, w = [max(d, 1) for d in shape]
    return (h * w * c, 1, w * c, c)


def _channels_last(a):
    """PyTorch's is_contiguous(memory_format=torch.channels_last), for a 4-d array: NHWC in memory, the dimensions
    of length 1 aside."""
    expected = a.itemsize
    for d in (1, 3, 2, 0):
        if a.shape[d] != 1:
            if a.strides[d] != expected:
                return False
            expected *= a.shape[d]
    return True


def mark(variables):
    """Mark the variables whose arrays are not laid out as a new C-ordered array would be."""
    for v in variables:
        v._strided = not _plain(v.data)


def _plain(a):
    """Whether array a has the strides of a new array of its shape in C order (those of its dimensions of length 1
    too: PyTorch's order of the dimensions can depend on them)."""
    if not a.flags.c_contiguous:
        return False
    if 1 not in a.shape:
        return True
    stride, natural = a.itemsize, []
    for n in reversed(a.shape):
        natural.append(stride)
        stride *= n
    return a.strides == tuple(reversed(natural))


def is_dense(shape, strides, itemsize):
    """PyTorch's is_non_overlapping_and_dense: in some order of the dimensions (of length 2 or more), contiguous."""
    expected = itemsize
    for stride, n in sorted((stride, n) for n, stride in zip(shape, strides) if n > 1):
        if stride != expected:
            return False
        expected *= n
    return True


def _element_strides(a):
    return tuple([stride // a.itemsize for stride in a.strides])


def _with_strides(y, strides):
    """y, or a copy of it, with these strides (in elements) over memory of its own: those of a dense array."""
    if _element_strides(y) == strides:
        return y
    xp = cuda.get_array_module(y)
    out = xp.lib.stride_tricks.as_strided(xp.empty(y.size, dtype=y.dtype), y.shape,
                                          [stride * y.itemsize for stride in strides])
    out[...] = y
    return out


def _iteration_order(shape, arrays):
    """PyTorch's TensorIterator order of the dimensions, the fastest-varying first (its reorder_dimensions): an
    insertion sort in which, for two dimensions, the first operand whose strides there are both non-zero and
    differ decides (equal strides: the shorter dimension goes first), and a pair no operand decides stays."""
    strides = [_broadcast_strides(a, shape) for a in arrays]

    def should_swap(d0, d1):
        for s in strides:
            if s[d0] == 0 or s[d1] == 0:
                continue
            if s[d0] != s[d1]:
                return 1 if s[d0] > s[d1] else -1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    order = list(range(len(shape)))[::-1]
    for i in range(1, len(shape)):
        moving = i
        for before in range(i - 1, -1, -1):
            comparison = should_swap(order[before], order[moving])
            if comparison > 0:
                order[before], order[moving] = order[moving], order[before]
                moving = before
            elif comparison < 0:
                break
    return order


def _broadcast_strides(a, shape):
    """a's strides (in bytes) broadcast to shape: 0 where a is broadcast (a missing dimension, or one of length 1
    that the result stretches)."""
    offset = len(shape) - a.ndim
    return [0] * offset + [0 if n == 1 and shape[offset + i] != 1 else stride
                           for i, (n, stride) in enumerate(zip(a.shape, a.strides))]


def _relaid(y, order):
    """y, or a copy of it, dense in `order` (the fastest-varying dimension first), with PyTorch's strides."""
    strides, stride = [0] * y.ndim, 1
    for d in order:
        strides[d] = stride
        stride *= max(y.shape[d], 1)
    return _with_strides(y, tuple(strides))
