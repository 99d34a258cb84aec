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
from tinypytorch import cuda, dtypes, forward_ad_state
from tinypytorch.core import Function, Variable, add, as_variable, astype, div, formulas_on_arrays, mul, sub, sum_to
from tinypytorch.functions import array_of, where
from tinypytorch import views
from tinypytorch.grad_mode import is_grad_enabled, is_inference_mode_enabled, no_grad
from tinypytorch.views import (
    INFERENCE_INPLACE, VIEW_FROM_INFERENCE_INPLACE, increment_version, refresh_view, share_version_counter, take_place,
)

OPERATIONS = {"add_": add, "sub_": sub, "mul_": mul, "div_": div}


def refuse_tangents(op, *variables):  # step 62
    """In-place operations have no tangent rules yet: where a tangent is involved, refuse rather than drop it
    (x.mul_(dual) would otherwise leave x with no tangent, a derivative of 0)."""
    if forward_ad_state.open_dual_levels and any(forward_ad_state.tangent_of(v) is not None for v in variables):
        raise NotImplementedError(f"Trying to use forward AD with {op} that does not support it because it has "
                                  "not been implemented yet.")


def check_writable(op, x):
    """Refuse what would write into a leaf that requires grad, into a broadcast view, into a view an operation
    handed back (its backward would be lost), or into an inference tensor outside inference mode (whose readers'
    graphs could not see the change: it counts no versions)."""
    views.check_returned_view_writable(x)  # step 49
    if x.version_counter is None and not is_inference_mode_enabled():  # step 56
        raise RuntimeError(INFERENCE_INPLACE)
    if x.view_record is not None and x.view_record.in_inference and x.requires_grad and is_grad_enabled():
        raise RuntimeError(VIEW_FROM_INFERENCE_INPLACE)  # step 56: no graph says what the view was made from
    if is_grad_enabled() and x.requires_grad:
        if x.creator is None and x.view_record is None:
            raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an in-place operation.")
        if x._base is not None and x._base.creator is None and x._base.requires_grad:  # step 37: a view of such a leaf, too
            raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
    if _overlaps_itself(x.data):
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the written-to variable refers "
                           "to a single memory location (a broadcast view); copy it before changing it in place")


def _overlaps_itself(a):
    """Whether several elements of array `a` are one memory location: a stride of 0 along a dimension of size > 1.

    That is what broadcast_to makes. (NumPy also marks such arrays read-only, but CuPy has no
    such flag: the strides are what both share, step 48.)
    """
    return any(stride == 0 and n > 1 for stride, n in zip(a.strides, a.shape))


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
    check_writable(op, x)
    other = as_variable(other, op, cuda.get_array_module(x.data), like=x.data)
    refuse_tangents(op, x, other)  # step 62
    recording = is_grad_enabled() and (x.requires_grad or other.requires_grad)
    if not recording:
        new = OPERATIONS[op](Variable(x.data, requires_grad=False), other).data
        dtypes.check_in_place(op, new.dtype, x.dtype)  # step 57: never down a category, PyTorch's rule and words
        write(op, x, new)
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    # The old value, if the gradient of `other` needs it (mul_, div_), is copied first, as PyTorch
    # does: writing into x's array would otherwise change the tensor the function saved.
    needs_old = op in ("mul_", "div_") and other.requires_grad
    y = OPERATIONS[op](alias(x, x.data.copy() if needs_old else None), other)
    dtypes.check_in_place(op, y.dtype, x.dtype)  # step 57
    if y.dtype != x.dtype:  # step 57: a float32 x stays float32
        y = astype(y, x.dtype)
    return record(op, x, y)


def zero_(x):
    """Fill x with zeros in place; recorded, the gradient through it is zero (PyTorch's zero_)."""
    check_writable("zero_", x)
    refuse_tangents("zero_", x)  # step 62
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
    check_writable(op, x)
    value = as_variable(value, op, cuda.get_array_module(x.data), like=x.data)
    refuse_tangents(op, x, value)  # step 62
    if not (is_grad_enabled() and (x.requires_grad or value.requires_grad)):
        xp = cuda.get_array_module(x.data)
        write(op, x, _assigned(xp, x.data, key, value.data))
        return x
    if x.view_record is not None:  # step 37: a view whose base changed is made again first
        refresh_view(x)
    return record(op, x, SetItem(key)(alias(x), value))


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
            self.view_fn(Variable(self.mask, requires_grad=False)).data[...] = 0
            self.view_fn(Variable(out, requires_grad=False)).data[...] = value
        return out

    def backward(self, gy):
        # a selection, as PyTorch's: an infinite gy gives 0 where the view was (gy * mask: inf * 0 = NaN)
        return where(self.mask.astype(bool), gy, 0.0), self.view_fn(gy)


def rebase_view(v, y):
    """View v was changed in place to y's value: move its base, then v, to their new places in the graph."""
    base, fn = v.view_record.base, v.view_record.fn
    new_base = ViewScatter(fn)(alias(base), y)
    take_place(base, new_base)
    take_place(v, fn(base))


formulas_on_arrays(Zero, ViewScatter, SetItem)  # speed: their backward runs on arrays too (grad_mode.BackwardMode)
