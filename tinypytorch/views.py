"""Version counters and views (steps 36-37): what a variable knows about the memory it shares.

An in-place change adds one to the data's version counter, which every variable sharing that
memory shares (views, detached copies, saved tensors), so a graph that saved the old value
can refuse it (step 36). A view (reshape, transpose, basic indexing) also remembers its
base and how it was made from it, so that its graph can follow the base's changes (step 37).

Inference tensors (step 58) have neither: no counter (`version_counter` is None) and no view's record.

Every recorded operation asks these records (Function.__call__ in core), and so do the
in-place operations (tinypytorch.inplace): they live here, below both, and import neither.
"""
from tinypytorch import cuda
from tinypytorch.grad_mode import enable_grad, is_grad_enabled, is_inference_mode_enabled


# step 58: PyTorch's words, its missing spaces included: an inference tensor, which counts no versions, may be
# changed in place only inside inference mode (by an in-place operation, or by the engine adding into `.grad`)
INFERENCE_INPLACE = ("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to "
                     "get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for "
                     "more details.")


class VersionCounter:
    """How many times the data of a variable was changed in place (step 36).

    Views of the same data (reshape, transpose, basic indexing, detach) share one counter,
    so a change through any of them shows in all.
    """

    __slots__ = ("value",)

    def __init__(self):
        self.value = 0


def share_version_counter(y, counter):
    """y's data is memory that `counter` already counts (a view's base, a detached copy's original, a saved
    tensor's): one counter then counts the changes made through any of them (step 36)."""
    y.version_counter = counter


def increment_version(x):
    """Count one more in-place change of x's data (PyTorch's `torch.autograd.graph.increment_version`).

    In-place operations call it (step 36); so does code that writes into `x.data` itself, such as
    RevCol's clamp of alpha (step 47), so that a graph that saved the old value refuses to use it.
    """
    if x.version_counter is None:  # step 58: an inference tensor counts nothing (PyTorch's: nothing to do)
        return
    x.version_counter.value += 1


# step 58: PyTorch's words for a view of a normal tensor made in inference mode, whose graph no one recorded
VIEW_FROM_INFERENCE = "A view was created in inference mode and "
VIEW_FROM_INFERENCE_CLARIFY = (
    ". Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by moving "
    "both the view and the inplace either both inside the inference_mode block (if you don't want the inplace to be "
    "tracked) or both outside (if you want the inplace to be tracked).")
VIEW_FROM_INFERENCE_INPLACE = VIEW_FROM_INFERENCE + "is being modified inplace in normal mode" + VIEW_FROM_INFERENCE_CLARIFY
VIEW_FROM_INFERENCE_STALE = (VIEW_FROM_INFERENCE + "its base or another view of its base has been modified inplace in "
                             "normal mode" + VIEW_FROM_INFERENCE_CLARIFY)


class View:
    """What a view remembers (step 37): its base, how it is made from the base, and the base's version then;
    and whether it was made in inference mode (step 58), when nothing recorded how. A view that an operation
    made by handing back its input (a custom Function's `return x`, a module's hook node) has no `fn`: what
    made it is the operation (`made_by`, "Output 0 of Id"), whose own backward must not be replaced."""

    __slots__ = ("base", "fn", "version", "in_inference", "made_by")

    def __init__(self, base, fn, version):
        self.base, self.fn, self.version = base, fn, version
        self.in_inference = False
        self.made_by = None


def track_view(f, x, y):
    """Output y of view function f shares x's memory: share x's version counter and remember how y was made.

    y's base is x's base if x is itself a view, and y's view function then applies x's first.
    """
    if not is_view_of(y.data, x.data):
        return  # a copy after all (NumPy's reshape of a non-contiguous array, advanced indexing)
    if x.version_counter is None:  # step 58: a view of an inference tensor is one too, and keeps no record
        share_version_counter(y, None)
        return
    share_version_counter(y, x.version_counter)
    own = f.view_fn()
    if x.view_record is None:
        y.view_record = View(x, own, x._version)
    else:
        parent = x.view_record.fn
        y.view_record = View(x.view_record.base, lambda t: own(parent(t)), x._version)
    # step 58: as in PyTorch, a view of a normal tensor made in inference mode is a normal tensor that requires
    # grad as its base does, without a graph; what may be done with it later is checked (check_writable, refresh_view)
    if is_inference_mode_enabled():
        y.view_record.in_inference = True
        y._requires_grad = x._requires_grad


def is_view_of(y, x):
    """Whether array y is a view of x's memory. An empty view shares no bytes with it (x[..., 1:] of a last
    dimension of size 1), but is a view all the same, as in PyTorch: the array that owns the memory tells."""
    if cuda.get_array_module(y).may_share_memory(y, x):
        return True
    return y.size == 0 and _owner(y) is _owner(x)


def _owner(a):
    """What owns a's memory (NumPy's and CuPy's `base`, followed to its end)."""
    while getattr(a, "base", None) is not None:
        a = a.base
    return a


# PyTorch's words for a view its operation handed back (an input returned as it is), used after a change in place
RETURNED_INPUT = (" This view was created inside a custom Function (or because an input was returned as-is) and the "
                  "autograd logic to handle view+inplace would override the custom backward associated with the custom "
                  "Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by cloning "
                  "the output of the custom Function.")


def track_returned_inputs(f, inputs, arrays, outputs):  # step 49
    """An output of f whose array is an input's very array, handed back, is a view of that input (PyTorch's rule):
    it shares its version counter, and its graph cannot be made again if the input changes in place (f's backward
    would be lost)."""
    for nr, y in enumerate(arrays):
        for x in inputs:
            if y is x.data:
                output = outputs[nr]
                share_version_counter(output, x.version_counter)
                if x.version_counter is not None:  # (a view of an inference tensor is one too: no record, step 58)
                    output.view_record = View(x if x.view_record is None else x.view_record.base, None, x._version)
                    output.view_record.made_by = f"Output {nr} of {type(f).__name__.removesuffix('Backward')}"
                break


def check_returned_view_writable(x):  # step 49
    """An in-place change of a view its operation handed back is refused, as PyTorch refuses it."""
    view = x.view_record
    if view is not None and view.made_by is not None and is_grad_enabled() and x.requires_grad:
        raise RuntimeError(f"{view.made_by} is a view and is being modified inplace." + RETURNED_INPUT)


def refresh_view(v):
    """If v's base changed in place since v's graph was made, make v's graph again from the base."""
    view = v.view_record
    if view.made_by is not None:  # step 49: an input handed back; its operation's backward cannot be made again
        if view.version != v._version and (view.base._requires_grad or v._requires_grad) and is_grad_enabled():
            raise RuntimeError(f"{view.made_by} is a view and its base or another view of its base has been "
                               "modified inplace." + RETURNED_INPUT)
        return
    if view.in_inference:  # step 58: its graph was never recorded, so it cannot be made again
        if view.version != v._version and v.requires_grad and is_grad_enabled():
            raise RuntimeError(VIEW_FROM_INFERENCE_STALE)
        return
    if view.version != v._version and (view.base._requires_grad or v._requires_grad):
        changed = getattr(view.base, "shape_changed_at", None)  # no step: unsqueeze_ changed the base's shape
        if changed is not None and view.version < changed:  # no step
            raise RuntimeError("a view of a tensor whose shape has since changed in place (unsqueeze_) cannot be "
                               "remade from it in tinypytorch; make the view again after the change, or clone it "
                               "before")
        with enable_grad():
            fresh = view.fn(view.base)
        take_place(v, fresh)


def read_view(v):
    """Reading a view's requires_grad, is_leaf or grad_fn brings it up to date first, as reading grad_fn does in
    PyTorch: after an in-place change of its base (or of another view of it) that made the base require grad, the
    view requires grad too, and an in-place change through it is recorded. (A view an operation handed back, or one
    made in inference mode, cannot be made again: the operation that uses it says so, step 49 and step 58.)"""
    view = v.view_record
    if view.fn is not None and not view.in_inference and not is_inference_mode_enabled():
        refresh_view(v)


def take_place(x, y):
    """x takes y's place in the graph: y's creator now made x (x keeps its own array).

    The hooks registered so far stay with the old value (its creator keeps them, step 35); a hook
    registered from now on goes to the new one, as in PyTorch.
    """
    f = y.creator
    x.set_creator(f, y.output_nr)
    x.requires_grad = True
    x._backward_hooks = None
    f.outputs[y.output_nr] = type(f.outputs[0])(x)  # a weak reference to x instead of y
    if x.view_record is not None:  # step 37: a view's graph now matches its base's version
        x.view_record.version = x._version
