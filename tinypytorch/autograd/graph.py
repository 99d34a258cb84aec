"""What a function keeps for its backward pass (steps 35-38), as PyTorch's `torch.autograd.graph`.

    SavedTensor          one tensor kept by `Function.save_for_backward` (PyTorch's SavedVariable)
    saved_tensors_hooks  a context: pack every tensor saved inside it, unpack it in backward (step 38)
    save_on_cpu          hooks that keep saved GPU arrays in host memory (step 38)

A saved tensor is freed after the backward pass that used it, unless the pass was
asked to `retain_graph`; unpacking it afterwards raises PyTorch's "backward through
the graph a second time" error. Before it hands a tensor to backward, it checks that
nothing changed the tensor in place since it was saved (step 36).
"""
import weakref

from tinypytorch import cuda, forward_ad_state, grad_mode
from tinypytorch.grad_mode import SavedTensorsHooks, no_grad, set_backward_on_arrays
from tinypytorch.core import Function, Variable
# increment_version is here too, as in PyTorch (torch.autograd.graph.increment_version)
from tinypytorch.views import VersionCounter, increment_version, share_version_counter  # noqa: F401

# The class of every node of the graph, as PyTorch's torch.autograd.graph.Node: core's Function, which
# both computes an operation and records it (DeZero's design). tinypytorch.autograd.Function is another
# thing: PyTorch's way of writing a custom operation, with a ctx (step 49).
Node = Function

BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they have "
    "already been freed). Saved intermediate values of the graph are freed when you call .backward() or "
    "autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


# step 58: PyTorch 2.13's words
INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use it "
    "in autograd, or use `tinypytorch.no_grad()` instead of `tinypytorch.inference_mode()`."
)


def _describe(data):
    """'float64 array of shape (3,)': what a message says of an array (PyTorch: [torch.DoubleTensor [3]])."""
    return f"{data.dtype} array of shape {tuple(data.shape)}"


# ----- step 38: saved-tensor hooks ---------------------------------------------------------------

def saved_tensors_hooks(pack_hook, unpack_hook):
    """Inside this context every tensor a function saves for backward goes through `pack_hook`.

    `pack_hook(variable)` runs once, when the tensor is saved, under no_grad; whatever it returns
    is kept instead of the tensor. `unpack_hook(packed)` runs each time backward needs the
    tensor and must return an array or a Variable with the saved tensor's values. Hooks act
    when tensors are saved, not when backward runs; with nested contexts the innermost wins.
    """
    if not callable(pack_hook) or not callable(unpack_hook):
        raise TypeError("saved_tensors_hooks: pack_hook and unpack_hook must be callable")
    return grad_mode.saved_tensors_hooks_entered(pack_hook, unpack_hook)  # a mode of this thread, kept there


def current_hooks():
    """The innermost (pack_hook, unpack_hook) pair of this thread, or None outside every saved_tensors_hooks context."""
    return grad_mode.current_saved_tensors_hooks()


def save_on_cpu(pin_memory=False, device_type="cuda"):
    """Hooks that move each saved GPU (CuPy) array to host memory and back when backward needs it.

    The device memory of a saved tensor is released while the tensor waits for backward
    (PyTorch's `torch.autograd.graph.save_on_cpu`). With `pin_memory` the host copy is in
    page-locked memory, which copies back to the device faster. NumPy arrays pass through
    unchanged (the array, not its Variable: a saved output must not keep its creator alive).
    """
    if device_type != "cuda":
        raise ValueError(f"save_on_cpu: device_type must be 'cuda', got {device_type!r}")

    def pack(x):
        where = cuda.device_of(x.data)
        if where == cuda.CPU:
            return None, x.data
        if pin_memory:
            host = cuda.cupyx.empty_pinned(x.data.shape, x.data.dtype)  # a NumPy array in page-locked memory
            x.data.get(out=host)
            return where, host
        return where, cuda.as_numpy(x.data)  # a copy in host memory

    def unpack(packed):
        where, value = packed
        return value if where is None else cuda.to_device(value, where, "save_on_cpu")

    return saved_tensors_hooks(pack, unpack)


# ----- step 35: a saved tensor ---------------------------------------------------------------------

class SavedTensor:
    """One tensor saved for backward; `unpack` gives it back as a Variable.

    A saved input is kept as the Variable itself. A saved output is kept as its array
    only: the output's Variable refers to this function as its creator, so keeping the
    Variable would make a reference cycle (function -> saved output -> function) that only
    the garbage collector could free (step 17). On unpack a Variable is made around the
    array with this function as its creator again. With saved-tensor hooks (step 38) only
    what the pack hook returned is kept, with what is needed to rebuild the Variable.
    """

    __slots__ = ("variable", "data", "packed", "unpack_hook", "version", "counter", "leaf", "creator",
                 "output_nr", "requires_grad", "data_ref", "variable_ref", "freed", "is_output", "tangent")

    def __init__(self, variable, function, is_output):
        self.variable = self.data = self.packed = self.unpack_hook = self.leaf = self.creator = None
        self.data_ref = self.variable_ref = None  # step 38: what a hooked tensor keeps for its checks
        self.freed = False
        self.counter = variable.version_counter  # step 36: shared with every view of the same data
        if self.counter is None:  # step 58: an inference tensor's in-place changes could not be detected
            raise RuntimeError(INFERENCE_SAVED)
        self.version = self.counter.value  # step 36: the version it must still have when unpacked
        self.output_nr = variable.output_nr
        self.requires_grad = variable._requires_grad
        hooks = SavedTensorsHooks.stack  # current_hooks(), without the call: every saved tensor asks
        if hooks:
            self._pack(variable, function, is_output, *hooks[-1])
        elif is_output:
            self.data = variable.data  # the array, not the Variable: no cycle through the creator
        else:
            self.variable = variable  # an input (or a leaf): its creator is another function

    def _pack(self, variable, function, is_output, pack_hook, unpack_hook):
        """Step 38: keep what pack_hook returns, and what rebuilds the Variable around it on unpack."""
        if variable.creator is None:
            self.leaf = variable  # kept alive by the graph anyway: its gradient goes there
        elif not is_output:
            self.creator = variable.creator  # an output refers back to `function`, rebuilt on unpack
            self.variable_ref = weakref.ref(variable)  # for the error message: what made it *now*
        self.data_ref = _weak(variable.data)
        with no_grad():  # as in PyTorch: packing is not part of the computation
            self.packed = pack_hook(variable)
        if self.counter.value != self.version:
            raise RuntimeError(
                "A saved tensor pack hook is modifying its input in place. Tensors provided as input to pack "
                "hook cannot be modified by in-place operations as this can lead to unexpected side-effects. "
                "Please open an issue if you need to perform in-place operations on the input to a pack hook.")
        self.unpack_hook = unpack_hook

    def unpack(self, function):
        """The saved tensor as a Variable for `function.backward`, checked (steps 35-38)."""
        if self.freed:
            raise RuntimeError(BACKWARD_TWICE)
        if self.unpack_hook is not None:  # step 38: packed by a saved_tensors_hooks pack hook
            return self._unpack_hooked(function)
        if self.counter.value != self.version:  # step 36: changed in place since it was saved
            raise RuntimeError(self._modified_message(function, self.data if self.variable is None
                                                      else self.variable.data))
        if self.variable is not None:
            return self.variable
        return self._rebuild(self.data, function)

    def unpack_array(self, function):
        """`unpack` for a formula running on bare arrays (grad_mode.BackwardMode): the array, after the same checks."""
        if self.freed or self.unpack_hook is not None:
            previous = set_backward_on_arrays(False)  # the unpack hook is the user's code: it gets and gives Variables
            try:
                return self.unpack(function).data
            finally:
                set_backward_on_arrays(previous)
        if self.counter.value != self.version:  # step 36
            return self.unpack(function)  # (which raises, naming what changed)
        return self.data if self.variable is None else self.variable.data

    def _unpack_hooked(self, function):
        unpacked = self.unpack_hook(self.packed)
        data = unpacked.data if isinstance(unpacked, Variable) else unpacked
        if not isinstance(data, cuda.array_types):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Variable or an array "
                            f"but got result of type {type(data).__name__}")
        # Step 38: PyTorch skips the version check when hooks are set, and an identity hook then gives
        # a silently wrong gradient. Here the check runs whenever the unpacked array still shares
        # memory with the array that was saved, and that array's version moved.
        original = None if self.data_ref is None else self.data_ref()
        is_original = original is not None and cuda.get_array_module(data).may_share_memory(data, original)
        if is_original and self.counter.value != self.version:
            raise RuntimeError(self._modified_message(function, data) + " (the saved tensor was packed by a "
                               "saved_tensors_hooks pack hook that kept the array itself)")
        # What the hook returned counts its own in-place changes unless it is the saved array, as in
        # PyTorch: a later change of the original must not fail a graph built on a copy (create_graph)
        if is_original:
            counter = self.counter
        else:
            counter = unpacked.version_counter if isinstance(unpacked, Variable) else VersionCounter()
        return self._rebuild(data, function, counter)

    def _rebuild(self, data, function, counter=None):
        """A Variable around `data` that sends its gradient where the saved Variable's went.

        It counts its in-place changes with `counter`: the saved tensor's unless told otherwise."""
        v = Variable(data, requires_grad=self.requires_grad)
        share_version_counter(v, self.counter if counter is None else counter)
        if self.leaf is not None:
            v.grad_leaf = self.leaf  # step 38: a leaf's saved tensor, unpacked: its gradient goes to the leaf
        elif self.creator is not None:
            v.set_creator(self.creator, self.output_nr)
        elif self.requires_grad:  # an output of `function` itself (step 35)
            v.set_creator(function, self.output_nr)
        # step 65: forward over reverse, the tangent the tensor had when saved, for a backward under a dual level
        if forward_ad_state.open_dual_levels and getattr(self, "tangent", None) is not None:
            forward_ad_state.set_tangent(v, self.tangent)
        return v

    def _modified_message(self, function, data):
        variable = self.variable if self.variable is not None else self.variable_ref and self.variable_ref()
        if variable is not None:  # a saved input: named by what made it now, as PyTorch does
            creator, output_nr = variable.creator, variable.output_nr
        else:  # a saved output of `function`, or a tensor packed by a hook
            creator, output_nr = (None if self.leaf is not None else self.creator or function), self.output_nr
        made_by = "a leaf" if creator is None else f"output {output_nr} of {type(creator).__name__}"
        return (f"one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"[{_describe(data)}], which is {made_by}, is at version {self.counter.value}; expected version "
                f"{self.version} instead. Hint: enable anomaly detection to find the operation that failed to "
                "compute its gradient, with tinypytorch.autograd.set_detect_anomaly(True).")

    def release(self):
        """Free the tensor (step 35): the backward pass that needed it is over."""
        self.variable = self.data = self.packed = self.unpack_hook = None  # the hooks may hold much (step 43)
        self.freed = True

    def nbytes(self):
        """Bytes of the saved array (0 once freed or when packed by hooks): the measure of steps 35-38."""
        data = self.data if self.variable is None else self.variable.data
        return 0 if data is None else data.nbytes


def _weak(array):
    try:
        return weakref.ref(array)
    except TypeError:  # a type without weak references: no check, as in PyTorch
        return None


def _owner(value, inputs, raw_outputs, outputs):
    """(the input or output Variable whose array `value` is, whether it is an output), or (None, False).

    Loops rather than next(generator): this runs for every saved tensor, and for one or two
    inputs a loop is about twice as quick."""
    for x in inputs:
        if x.data is value:
            return x, False
    for y, output in zip(raw_outputs, outputs):
        if y is value:
            return output, True
    return None, False


def keep_output_tangents(saved, outputs):
    """Forward over reverse: each saved output keeps the tangent its jvp gave it (Function.push_tangents)."""
    for s in saved:
        if isinstance(s, SavedTensor) and getattr(s, "is_output", False):
            s.tangent = forward_ad_state.tangent_of(outputs[s.output_nr])


def save(function, values, inputs, raw_outputs, outputs):
    """SavedTensors for the values `function.forward` passed to save_for_backward (step 35).

    Forward works on arrays, so it saves arrays; each is matched, by identity, to the input
    or output Variable it belongs to. A Python number wrapped by `Function.__call__` is kept
    as it is, without hooks (PyTorch keeps such a number as a number); another array
    (a mask, say) becomes a constant Variable. None stays None.
    """
    saved = []
    for value in values:
        if value is None:
            saved.append(None)
            continue
        variable, is_output = _owner(value, inputs, raw_outputs, outputs)
        if variable is None:
            if isinstance(value, Variable):
                variable = value
            elif isinstance(value, cuda.array_types):
                variable = Variable(value, requires_grad=False)
            else:
                raise TypeError(f"{type(function).__name__}.save_for_backward: expected arrays or Variables, "
                                f"got {type(value).__name__}")
        saved.append(variable if variable.wrapped_number else SavedTensor(variable, function, is_output))
    if forward_ad_state.open_dual_levels:  # step 65: forward over reverse, the tangents they have now
        keep_tangents(saved, values, inputs, raw_outputs, outputs)
    return tuple(saved)


def keep_tangents(saved, values, inputs, raw_outputs, outputs):  # step 65
    """Each saved tensor keeps the tangent its Variable has now (a saved output's comes once its jvp has run:
    keep_output_tangents)."""
    for s, value in zip(saved, values):
        if isinstance(s, SavedTensor):
            variable, s.is_output = _owner(value, inputs, raw_outputs, outputs)
            s.tangent = None if variable is None else forward_ad_state.tangent_of(variable)


__all__ = ["SavedTensor", "saved_tensors_hooks", "save_on_cpu", "current_hooks", "increment_version", "BACKWARD_TWICE"]
