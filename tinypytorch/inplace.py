"""In-place operations and views (steps 36-37): add_, sub_, mul_, div_ and zero_, as PyTorch's.

An in-place operation writes into the variable's own array and adds one to its version
counter, which every view of the same data shares. Where a gradient can flow, the
operation is recorded like its out-of-place twin, and the variable takes the result's
place in the graph: later operations see the new value, and the gradient goes back
through the operation to the old one.

Three cases need more than that, each as in PyTorch:
- a leaf that requires grad may not be changed in place (outside no_grad): its `.grad`
  would be the gradient of a value it no longer holds;
- a view (reshape, transpose, basic indexing) changed in place changes its base too, so
  the base's place in the graph moves as well (`ViewScatter`, PyTorch's CopySlices);
- another view of the same base then no longer matches the graph that made it, so its
  graph is made again from the base the next time it is used (`refresh_view`).

The records a view keeps, and version counters, live in tinypytorch.views: every operation asks them.
"""
import math
import numbers

import numpy as np

from tinypytorch import batching_state, cuda, dtypes, forward_ad_state, layout
from tinypytorch.core import (
    Function, Variable, add, as_variable, astype, div, expanded_strides, formulas_on_arrays, mul, sub, sum_to,
)
from tinypytorch.functions import array_of, where
from tinypytorch.functions import _dim, sin, unsqueeze  # (for sin_ and unsqueeze_)
from tinypytorch import views
from tinypytorch.grad_mode import is_grad_enabled, is_inference_mode_enabled, no_grad
from tinypytorch.views import (
    INFERENCE_INPLACE, VIEW_FROM_INFERENCE_INPLACE, increment_version, refresh_view, share_version_counter, take_place,
)

OPERATIONS = {"add_": add, "sub_": sub, "mul_": mul, "div_": div}


def refuse_tangents(op, *variables):  # step 64
    """In-place operations have no tangent rules yet: where a tangent is involved, refuse rather than drop it
    (x.mul_(dual) would otherwise leave x with no tangent, a derivative of 0)."""
    if forward_ad_state.open_dual_levels and any(forward_ad_state.tangent_of(v) is not None for v in variables):
        raise NotImplementedError(f"Trying to use forward AD with {op} that does not support it because it has "
                                  "not been implemented yet.")


_KEEP = object()  # check_writable's default: what is written is x's whole array


def check_writable(op, x, other=None, written=_KEEP):
    """Refuse what would write into a leaf that requires grad, into a broadcast view, into a view an operation
    handed back (its backward would be lost), or into an inference tensor outside inference mode (whose readers'
    graphs could not see the change: it counts no versions); and an operand `other` that overlaps x in part.
    `written`: the array written, if not x's (x[key]'s), or None where one value is written (zero_, which PyTorch
    lets fill a broadcast view)."""
    views.check_returned_view_writable(x)  # step 49
    if x.version_counter is None and not is_inference_mode_enabled():  # step 58
        raise RuntimeError(INFERENCE_INPLACE)
    if x.view_record is not None and x.view_record.in_inference and x.requires_grad and is_grad_enabled():
        raise RuntimeError(VIEW_FROM_INFERENCE_INPLACE)  # step 58: no graph says what the view was made from
    if is_grad_enabled() and x.requires_grad:
        if x.creator is None and x.view_record is None:
            raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an in-place operation.")
        if x._base is not None and x._base.creator is None and x._base.requires_grad:  # step 37: a view of such a leaf, too
            raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
    written = x.data if written is _KEEP else written
    if written is not None and _overlaps_itself(written):
        raise RuntimeError(f"{op}: {INTERNAL_OVERLAP}")
    if isinstance(other, Variable):
        check_no_partial_overlap(_layout(x.data), _layout(other.data), x.data.itemsize)


# PyTorch's words for a written-to tensor whose elements share memory (a broadcast view), and for an operand that
# shares memory with the written tensor, laid out otherwise
INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
                    "location. Please clone() the tensor before performing the operation.")
PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                   "single memory location. Please clone() the tensor before performing the operation.")


def check_no_partial_overlap(out, src, itemsize):
    """Refuse a source that shares memory with the written-to array without being laid out as it is (a.add_(a[0]),
    a[1:].copy_(a[:2])): the result would depend on the order of the writes. As PyTorch, look only where both fill
    a block of memory each element once (dense); where one does not, PyTorch cannot tell, and computes.
    out and src are layouts, (address, shape, strides) in bytes; the same layout (a.add_(a)) is fine."""
    sizes = [math.prod(shape) * itemsize for _, shape, _ in (out, src)]
    if not all(sizes) or not (layout.is_dense(*out[1:], itemsize) and layout.is_dense(*src[1:], itemsize)):
        return
    (out_begin, src_begin), (out_end, src_end) = (out[0], src[0]), (out[0] + sizes[0], src[0] + sizes[1])
    if (out_begin, out_end, out[2]) != (src_begin, src_end, src[2]) and out_begin < src_end and src_begin < out_end:
        raise RuntimeError(PARTIAL_OVERLAP)


def _layout(a):
    """Array a's layout: the address of its first element, its shape and its strides in bytes."""
    return cuda.address(a), tuple(a.shape), tuple(a.strides)


def _overlaps_itself(a):
    """Whether several elements of array `a` are one memory location: a stride of 0 along a dimension of size > 1.

    That is what broadcast_to makes. (NumPy's broadcast_to also marks such arrays read-only, but CuPy has no
    such flag, and BroadcastTo's are writable, as a part of one may be written: the strides tell, step 48.)
    """
    return a.size > 0 and any(stride == 0 and n > 1 for stride, n in zip(a.strides, a.shape))


def write(op, x, new):
    """Copy array `new` into x's array, as an in-place operation of PyTorch's would; one version more."""
    if new.shape != x.shape:
        raise RuntimeError(f"{op}: output with shape {tuple(x.shape)} doesn't match the broadcast shape {new.shape}")
    cuda.get_array_module(x.data).copyto(x.data, new, casting="unsafe")  # x keeps its dtype, as PyTorch's copy_
    increment_version(x)


def alias(x, data=None):
    """A Variable standing for x's current value in the graph (same edge), on `data` (x's array by default)."""
    a = Variable(x.data if data is None else data, requires_grad=x.requires_grad)
    if data is None:
        share_version_counter(a, x.version_counter)
    if x.creator is not None:
        a.set_creator(x.creator, x.output_nr)
    return a


def apply(op, x, other):
    """x <op>= other in place (op: 'add_', 'sub_', 'mul_' or 'div_'); returns x."""
    if batching_state.open_vmap_levels and batching_state.any_batched(None, (x, other)):  # step 69: vmap
        return batching_state.in_place(lambda p, o: apply(op, p, o), x, [other], name=op)
    check_writable(op, x, other)
    other = as_variable(other, op, cuda.get_array_module(x.data), like=x.data)
    refuse_tangents(op, x, other)  # step 64
    recording = is_grad_enabled() and (x.requires_grad or other.requires_grad)
    if not recording:
        new = OPERATIONS[op](Variable(x.data, requires_grad=False), other).data
        dtypes.check_in_place(op, new.dtype, x.data.dtype)  # step 59: never down a category, PyTorch's rule and words
        write(op, x, new)
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    # The old value, if the gradient of `other` needs it (mul_, div_), is copied first, as PyTorch
    # does: writing into x's array would otherwise change the tensor the function saved.
    needs_old = op in ("mul_", "div_") and other.requires_grad
    y = OPERATIONS[op](alias(x, x.data.copy() if needs_old else None), other)
    dtypes.check_in_place(op, y.data.dtype, x.data.dtype)  # step 59
    if y.data.dtype != x.data.dtype:  # step 59: a float32 x stays float32
        y = astype(y, x.data.dtype)
    return record(op, x, y)


def zero_(x):
    """Fill x with zeros in place; recorded, the gradient through it is zero (PyTorch's zero_)."""
    if batching_state.open_vmap_levels and batching_state.any_batched(None, (x,)):  # step 69: vmap
        return batching_state.in_place(zero_, x, [])
    check_writable("zero_", x, written=None)
    refuse_tangents("zero_", x)  # step 64
    if not (is_grad_enabled() and x.requires_grad):
        write("zero_", x, cuda.get_array_module(x.data).zeros_like(x.data))
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    return record("zero_", x, Zero()(alias(x)))


def record(op, x, y):
    """Write y (the recorded out-of-place result) into x, and give x y's place in the graph; a view moves its base."""
    write(op, x, y.data)
    if x.view_record is None:
        take_place(x, y)
    else:
        rebase_view(x, y)
    return x


def set_item(op, x, key, value):
    """x[key] = value in place (`__setitem__`; `copy_` is key `...`); returns x.

    Recorded as its out-of-place twin SetItem when a gradient can flow, as PyTorch records
    CopySlices or IndexPutBackward0.
    """
    if batching_state.open_vmap_levels and batching_state.any_batched(None, (x, value)):  # step 69: vmap
        physical_key = batching_state.batched_key(key)
        return batching_state.in_place(lambda p, v: set_item(op, p, physical_key, v), x, [value], key)
    slot = _slot(x.data, key)  # a wrong index first, as PyTorch slices before it writes
    if slot is not None and op == "setitem" and _overlaps_itself(x.data) and not _overlaps_itself(slot):
        # a part of a broadcast view that repeats nothing (e = b.expand(2, 3); e[0] = v) is written through the
        # view x[key], as PyTorch writes it: writing all of x would write b's elements twice
        set_item(op, x[key], Ellipsis, value)
        return x
    overlaps = isinstance(value, Variable)  # (a number shares no memory)
    value = as_variable(value, op, cuda.get_array_module(x.data), like=x.data)
    written = x.data if slot is None else slot
    copies = op == "copy_" or slot is not None and (value.shape == slot.shape or value.ndim)  # else: a fill (0-d)
    source = _layout(value.data) if op == "copy_" else _source_layout(slot, value.data) if copies else None
    itself = overlaps and copies and source == _layout(written)  # a copy onto itself: PyTorch's copy_ checks nothing
    check_writable(op, x, written=None if itself else written)
    if op == "copy_":  # (in PyTorch's order)
        if overlaps:
            check_no_partial_overlap(_layout(x.data), _layout(value.data), x.data.itemsize)
        _check_copy_shape(x.shape, value.shape)
    elif slot is not None:
        if overlaps and copies:  # (a 0-d value that fills the slot is read first: nothing to compare)
            check_no_partial_overlap(_layout(slot), source, x.data.itemsize)
        if value.ndim > slot.ndim:  # x[0] = tensor([5.0]): PyTorch drops the value's leading 1s
            value = value.reshape(value.shape[next((i for i, n in enumerate(value.shape) if n != 1), value.ndim):])
    refuse_tangents(op, x, value)  # step 64
    # an integer x takes the values of a value that requires grad, and no gradient (PyTorch's)
    if not (is_grad_enabled() and (x.requires_grad or (value.requires_grad and x.dtype.kind in "fc"))):
        xp = cuda.get_array_module(x.data)
        write(op, x, _assigned(xp, x.data, key, value.data))
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    return record(op, x, SetItem(key)(alias(x), value))


def _slot(data, key):
    """data[key] as an array sharing data's memory for an index of ints, slices, None and `...`; None for another
    index (arrays: a copy). An index that does not fit raises IndexError, as PyTorch's."""
    parts = key if isinstance(key, tuple) else (key,)
    if not all(k is None or k is Ellipsis or isinstance(k, slice) or isinstance(k, numbers.Integral)
               and not isinstance(k, bool) for k in parts):
        return None
    try:
        slot = data[key]
        return slot if isinstance(slot, cuda.array_types) else data[parts + (Ellipsis,)]  # an element: 0-d
    except IndexError as error:
        raise IndexError(f"setitem: {error} (key {key!r}, shape {tuple(data.shape)})") from None


def _check_copy_shape(shape, src_shape):
    """copy_ broadcasts its source to the destination's shape, never the other way (PyTorch's words)."""
    try:
        broadcast = np.broadcast_shapes(shape, src_shape)
    except ValueError:
        raise ValueError(f"copy_: the source's shape {tuple(src_shape)} does not broadcast to {tuple(shape)}") from None
    if broadcast != tuple(shape):
        raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(broadcast)}")


def _source_layout(slot, value):
    """What PyTorch's x[key] = value reads, laid out: value, or value without its leading 1s expanded to the slot."""
    if value.shape == slot.shape:
        return _layout(value)
    address, shape, strides = _layout(value)
    lead = next((i for i, n in enumerate(shape) if n != 1), len(shape))
    return address, tuple(slot.shape), expanded_strides(shape[lead:], strides[lead:], slot.shape)


def _assigned(xp, data, key, value):
    """A copy of `data` with `data[key] = value`, with the dtype rules of an in-place write."""
    out = data.copy()
    try:
        out[key] = value
    except ValueError as error:
        raise ValueError(f"setitem: {error}") from None
    return out


class SetItem(Function):
    """x with x[key] replaced by value (broadcast): the out-of-place twin of `x[key] = value`.

    Backward: x's gradient with the overwritten part zeroed; value's gradient is that part, summed
    back to value's shape where it was broadcast.
    """

    torch_name = "CopySlices"

    def __init__(self, key):
        self.key = key

    def forward(self, x, value):
        xp = cuda.get_array_module(x)
        self.value_shape = value.shape
        if self.needs_input_grad[0]:  # which elements of x survive: where x's gradient goes
            self.kept = xp.ones(x.shape, dtype=bool)
            self.kept[self.key] = False
        return _assigned(xp, x, self.key, value)

    def backward(self, gy):
        # a selection, as PyTorch's: an infinite gy gives 0 where x was overwritten (gy * mask: inf * 0 = NaN)
        gx = where(self.kept, gy, 0.0) if self.needs_input_grad[0] else None
        gv = None
        if self.needs_input_grad[1]:
            gv = gy[self.key]
            if gv.shape != self.value_shape:  # value was broadcast over the assigned elements
                gv = sum_to(gv, self.value_shape)
        return gx, gv


class Zero(Function):
    """zeros shaped like x; the gradient with respect to x is zero."""

    def forward(self, x):
        return cuda.get_array_module(x).zeros_like(x)

    def backward(self, gy):
        # zeros of its own, as PyTorch's zeros_like(grad): not gy * 0, which is NaN where gy is inf
        return cuda.get_array_module(array_of(gy)).zeros_like(array_of(gy))


# ----- views ----------------------------------------------------------------------------------

class ViewScatter(Function):
    """The base after its view was changed in place: base elsewhere, the view's new values inside it.

    PyTorch's CopySlices. Backward: the base's gradient with the view's part zeroed (those
    old values were overwritten), and the view's part of the gradient to the new values.
    """

    def __init__(self, view_fn):
        self.view_fn = view_fn

    def forward(self, base, value):
        xp = cuda.get_array_module(base)
        self.mask = xp.ones_like(base)
        out = base.copy()
        with no_grad():  # the view function, used on arrays: which elements of the base are the view's
            view = self.view_fn(Variable(self.mask, requires_grad=False)).data
            view[...] = 0
            self.view_fn(Variable(out, requires_grad=False)).data[...] = value
        # zero_ of a broadcast view (PyTorch lets zero_ fill one), a part of a broadcast base (e.detach()[0] = v)
        self.broadcast = _overlaps_itself(base) or (_overlaps_itself(view) and self.needs_input_grad[0])
        return out

    def backward(self, gy):
        if self.broadcast:  # PyTorch's CopySlices writes the gradients into the base's, or the view's, elements:
            raise RuntimeError(INTERNAL_OVERLAP)  # refused where several are one
        # a selection, as PyTorch's: an infinite gy gives 0 where the view was (gy * mask: inf * 0 = NaN)
        return where(self.mask.astype(bool), gy, 0.0), self.view_fn(gy)


def rebase_view(v, y):
    """View v was changed in place to y's value: move its base, then v, to their new places in the graph."""
    base, fn = v.view_record.base, v.view_record.fn
    new_base = ViewScatter(fn)(alias(base), y)
    take_place(base, new_base)
    take_place(v, fn(base))


formulas_on_arrays(Zero, ViewScatter, SetItem)  # speed: their backward runs on arrays too (grad_mode.BackwardMode)


# ----- more of PyTorch's in-place operations (no step) -----------------------------------------

def unary_(op, x, function):
    """x <- function(x) in place (op "sin_": function sin); returns x. Recorded as function itself when a gradient can
    flow, on a copy of the old value, which function's backward reads and the write overwrites (as PyTorch saves
    the original for sin_)."""
    if batching_state.open_vmap_levels and batching_state.any_batched(None, (x,)):  # step 69: vmap
        return batching_state.in_place(lambda p: unary_(op, p, function), x, [])
    check_writable(op, x)
    refuse_tangents(op, x)  # step 64
    if not (is_grad_enabled() and x.requires_grad):
        new = function(Variable(x.data, requires_grad=False)).data
        dtypes.check_in_place(op, new.dtype, x.data.dtype)  # an integer x refuses a float result, in PyTorch's words
        write(op, x, new)
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    return record(op, x, function(alias(x, x.data.copy())))


def sin_(x):
    """PyTorch's sin_ (torch.sin_ and x.sin_()): x <- sin(x) in place."""
    if not isinstance(x, Variable):  # PyTorch's refusal and words
        raise TypeError(f"sin_(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    return unary_("sin_", x, sin)


def unsqueeze_(x, dim):
    """PyTorch's x.unsqueeze_(dim): x itself gets a new dimension of length 1 at `dim` (its memory unchanged), and
    one more version, as PyTorch counts. Recorded as unsqueeze when a gradient can flow: x takes its place in the
    graph; a view keeps remaking itself from its base, unsqueezed.

    A view of x made before cannot be remade from x's new shape: using one afterwards raises a RuntimeError that
    says so (PyTorch keeps each view's own strides; the package remakes views from their base, step 37)."""
    dim = _dim("unsqueeze_", dim, x.ndim + 1)
    check_writable("unsqueeze_", x, written=None)  # a leaf that requires grad, an inference tensor (PyTorch's words)
    refuse_tangents("unsqueeze_", x)  # step 64
    recording = is_grad_enabled() and x.requires_grad
    if recording and x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    y = unsqueeze(alias(x) if recording else Variable(x.data, requires_grad=False), dim)
    if recording:
        y.creator.torch_name = "UnsqueezeBackward1"  # PyTorch's node for unsqueeze_
    x.data = y.data  # the same memory, laid out as PyTorch's unsqueeze lays it
    increment_version(x)
    x.shape_changed_at = x._version  # views of x made before cannot be remade from x now (views.refresh_view)
    record_ = x.view_record
    if record_ is not None and record_.fn is not None:  # the view is now its base's view, unsqueezed
        made = record_.fn
        record_.fn = lambda t: unsqueeze(made(t), dim)
    if recording:
        take_place(x, y)
    return x
