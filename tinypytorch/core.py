"""The core of tinypytorch: `Variable`, `Function` and the arithmetic operators.

The framework of steps 01-22 gathered in one module, grown by later steps (each piece
names the step that introduced it, so a reader can go back to where it is explained).

It is the package's floor. The switches it asks (grad mode and the others) live in
tinypytorch.grad_mode; version counters and views' records in tinypytorch.views; the
methods that are operations of the floors above (x.reshape, x.sum, x.add_, x.to) in
tinypytorch.tensor_methods, which wires them onto Variable. Of the floors above it
imports only the autograd kernel, which makes Variables in turn: see the end of the module.
"""
import copy
import functools
import itertools
import numbers
import weakref

import numpy as np

from tinypytorch import batching_state, cuda, dtypes, forward_ad_state, grad_mode, layout, modes, views
from tinypytorch.grad_mode import BackwardMode, Config, InferenceMode, no_grad  # every mode lives there (step 18's too)
from tinypytorch.size import Size
from tinypytorch.views import VersionCounter, increment_version, share_version_counter  # noqa: F401 (steps 36-37)


def formulas_on_arrays(*functions):
    """Mark Function classes whose backward is one formula for bare arrays and Variables alike (BackwardMode).

    Each module of operations lists its own, once, at its end. A class that is not listed, such as one a
    user writes, keeps getting Variables: a formula that uses what only a Variable has never meets an array.
    """
    for function in functions:
        function.formula_on_arrays = True


def array_of(x):
    """The array of a Variable, or `x` itself: what a formula reads when it needs the values as a constant."""
    return x.data if isinstance(x, Variable) else x


# step 58: PyTorch's words; an inference tensor counts no in-place changes, which makes it cheaper
INFERENCE_NO_VERSION = "Inference tensors do not track version counter."

_AS_TORCH = dtypes.AS_TORCH  # step 59: NumPy's dtype -> PyTorch's dtype object

# PyTorch's words: an integer gradient would be truncated (0.5 -> 0), so integers cannot require one
_ONLY_FLOATING = "Only Tensors of floating point and complex dtype can require gradients"


def _cannot_require_grad(dtype):
    """Why a variable of `dtype` cannot require grad: PyTorch's words for integers; for complex numbers, the
    package's own (PyTorch differentiates them with a conjugate convention that the formulas here do not follow)."""
    if dtype.kind == "c":
        return ("complex variables cannot require grad in tinypytorch: PyTorch's gradients of complex functions "
                "(conjugate Wirtinger derivatives) are not implemented")
    return _ONLY_FLOATING


def _comparison(op):
    """The method of an element-wise comparison operator: x <op> other by `compare` (defined below)."""
    def method(self, other):
        return compare(op, self, other)

    return method


def _not_an_array(data):
    message = f"Variable data must be an ndarray (numpy or cupy) or None, got {type(data).__name__}"
    if isinstance(data, Variable):  # PyTorch's idiom `p.data -= lr * p.grad` put a tensor where the array goes
        message += (": in tinypytorch `x.data` is the array inside a Variable, not a tensor, so `x.data = tensor` "
                    "and `x.data -= tensor` store a Variable there; write `with torch.no_grad(): x -= ...` (see "
                    "'tinypytorch for PyTorch users', deliberate differences)")
    return message


class Variable:
    """A box around an array that remembers the function that created it."""

    # step 21: ndarray <op> Variable must call our reflected operator, not ndarray's
    __array_priority__ = 200

    def __init__(self, data, name=None, requires_grad=None):
        # step 09: refuse anything that is not an array, early and by name
        if data is not None and not isinstance(data, cuda.array_types):
            raise TypeError(_not_an_array(data))
        self.data = data
        self.name = name  # step 19: shown by repr and in drawings
        self.grad = None  # step 06; a Variable since step 27, so gradients can be differentiated
        self.creator = None  # step 07: the Function that produced this variable
        self.generation = 0  # step 16: 1 + the creator's generation
        # step 33: a variable the user makes requires grad unless told otherwise (torch.tensor's
        # default is False); constants made inside operations and results of no_grad do not.
        # Checked here rather than through the property's setter, which is slower: every
        # operation makes a Variable, and a new one has no creator for the setter to check.
        if requires_grad is None:  # the tutorial's default: True, for the dtypes that can have a gradient
            requires_grad = data is not None and data.dtype.kind == "f"
        elif requires_grad is True:
            if data is not None and data.dtype.kind != "f":
                raise RuntimeError(_cannot_require_grad(data.dtype))
        elif requires_grad is not False:
            raise TypeError(f"requires_grad must be a bool, got {type(requires_grad).__name__}")
        self._requires_grad = requires_grad
        self._backward_hooks = None  # step 34: {handle id: hook}, made by the first register_hook (PyTorch's name)
        self._retains_grad = False  # step 34: retain_grad() was called on this non-leaf
        # step 36: shared with views of the same data; step 58: an inference tensor has none (PyTorch's)
        self.version_counter = None if grad_mode.open_inference_blocks and InferenceMode.enabled else VersionCounter()

    # Rarely set, so class-level defaults rather than one more attribute on every Variable:
    output_nr = 0  # step 35: which output of its creator this variable is (PyTorch's name)
    wrapped_number = False  # step 35: a Python number that Function.__call__ wrapped (PyTorch's wrapped number)
    grad_leaf = None  # step 38: the leaf whose gradient this (unpacked, saved) variable's gradient is
    _constant = None  # step 35: what drawings show of this variable as a constant input (a ConstantInput)
    view_record = None  # step 37: for a view (reshape, transpose, basic indexing), its views.View record
    _strided = False  # no step: True if the array may be laid out otherwise than in C order (tinypytorch.layout)
    _post_accumulate_grad_hooks = None  # {handle id: hook}: called with the leaf once .grad is updated (PyTorch's)

    @property
    def _version(self):
        """How many in-place changes this variable's data has seen (step 36; PyTorch's `_version`)."""
        if self.version_counter is None:  # step 58
            raise RuntimeError(INFERENCE_NO_VERSION)
        return self.version_counter.value

    def is_inference(self):
        """Whether this is an inference tensor (step 58): made in inference mode, or a view of one. As in
        PyTorch, that is a tensor without a version counter."""
        return self.version_counter is None

    @property
    def _base(self):
        """For a view, the variable whose memory it shares; else None (step 37; PyTorch's `_base`)."""
        return None if self.view_record is None else self.view_record.base

    # step 48: devices, PyTorch's names
    @property
    def device(self):
        """Where the data lives: device(type='cpu'), or device(type='cuda', index=0) for a CuPy array."""
        return cuda.device_of(self.data)

    # step 19: a Variable answers the questions one asks of an array
    @property
    def shape(self):
        return Size(self.data.shape)  # PyTorch's torch.Size: a tuple that prints as torch.Size([2, 3])

    @property
    def ndim(self):
        return self.data.ndim

    def size(self, dim=None):
        """The shape, or the length of dimension `dim` (PyTorch's `Tensor.size`; NumPy's `size` is `numel()`).

        Step 19 made `size` NumPy's element count; the package follows PyTorch here.
        """
        if dim is None:
            return Size(self.data.shape)
        return self.data.shape[dim]

    def numel(self):
        """The number of elements (NumPy's `size`)."""
        return self.data.size

    def dim(self):
        """The number of dimensions (`ndim`), as PyTorch's `Tensor.dim()`."""
        return self.data.ndim

    def is_floating_point(self):
        return self.data.dtype.kind == "f"

    @property
    def dtype(self):
        dtype = self.data.dtype  # step 59: PyTorch's dtype object, torch.float32 (the package reads the array's)
        return _AS_TORCH.get(dtype, dtype)

    def __len__(self):
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d Variable")
        return len(self.data)

    def __array__(self, dtype=None, copy=None):
        # step 27: grads are Variables; np.asarray(x.grad) and assert_allclose(x.grad, ...) still work.
        # NumPy data only: a GPU array must be copied to the host explicitly (cuda.as_numpy).
        if copy is False:
            raise ValueError("Variable.__array__: a copy-free conversion is not supported")
        return np.array(self.data, dtype=dtype, copy=copy)

    def __format__(self, spec):
        # step 27: f"{x.grad:.4f}" formats a 0-d Variable like a number, as torch does for 0-d tensors
        if spec and self.data is not None and self.data.ndim == 0:
            return format(self.data.item(), spec)
        return super().__format__(spec)

    def item(self):
        """The value of a one-element Variable as a Python number (PyTorch's `Tensor.item`)."""
        if self.data.size != 1:
            raise RuntimeError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar")
        return self.data.item()

    def tolist(self):
        """The values as (nested) Python lists of numbers, as PyTorch's `Tensor.tolist`."""
        return cuda.as_numpy(self.data).tolist()

    def numpy(self):
        """The NumPy array itself (shared memory, as PyTorch's `Tensor.numpy`); refused where PyTorch refuses."""
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if not isinstance(self.data, np.ndarray):
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        return self.data

    def __bool__(self):
        # PyTorch's rule: only a one-element variable has a truth value
        if self.data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.data)

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.data.dtype.kind not in "iub" or self.data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return self.data.item()

    def __float__(self):
        if self.data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")  # PyTorch's words
        return float(self.data.item())

    def __repr__(self):
        # step 19: fixed precision and no address, so printed output is the same on every run
        if self.data is None:
            return "variable(None)"
        text = np.array2string(cuda.as_numpy(self.data), precision=4, floatmode="fixed", separator=", ",
                               prefix="variable(")
        name = "" if self.name is None else f", name={self.name!r}"
        # as PyTorch prints a tensor: a dtype other than those a literal implies, then the node that made it, or
        # that a leaf requires grad
        if not dtypes.implied(self.data.dtype):
            name += f", dtype={self.dtype}"
        if self.creator is not None:
            node = f", grad_fn=<{self.creator.name()}>"
        else:
            node = ", requires_grad=True" if self._requires_grad else ""
        return f"variable({text}{name}{node})"

    # steps 20-22: operators. A reflected method (`2 + x` arrives as x.__radd__(2)) records x first, as
    # PyTorch's does (its node for 2 * x lists x's edge, then the number's): + and * commute, so the values
    # are the same either way. An array on the left (PyTorch refuses one) keeps the written order.
    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self) if isinstance(other, cuda.array_types) else add(self, other)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self) if isinstance(other, cuda.array_types) else mul(self, other)

    def __neg__(self):
        return neg(self)

    def __sub__(self, other):
        return sub(self, other)

    def __rsub__(self, other):
        return rsub(self, other)

    def __truediv__(self, other):
        return div(self, other)

    def __rtruediv__(self, other):
        return rdiv(self, other)

    def __pow__(self, c):
        return pow(self, c)

    def __pos__(self):
        return self

    # Comparisons are element-wise, as in NumPy and PyTorch: a bool Variable that requires no grad.
    # (Identity stays `is`; a Variable still hashes by identity, so it can key a dict.)
    __eq__, __ne__ = _comparison("equal"), _comparison("not_equal")
    __lt__, __le__ = _comparison("less"), _comparison("less_equal")
    __gt__, __ge__ = _comparison("greater"), _comparison("greater_equal")
    __hash__ = object.__hash__

    # ----- tensor methods ------------------------------------------------------------------
    # The methods that are operations of the floors above (x.reshape, x.sum, x.add_, x.to, ...)
    # are defined in tinypytorch.tensor_methods and wired onto Variable once, as the package is
    # imported: this module imports none of those floors. The two below are this module's own.

    def pow(self, exponent):
        return pow(self, exponent)

    def clone(self):
        """A copy with its own memory, differentiable (PyTorch's CloneBackward0)."""
        return Clone()(self)

    def __deepcopy__(self, memo):  # step 52
        """A leaf with its own copy of the data and the gradient, without the hooks (PyTorch's deepcopy): a copied
        model's parameters do not call the original's hooks (an optimizer's step in backward, say)."""
        if self.creator is not None:  # PyTorch's refusal and words
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        copied = object.__new__(type(self))
        memo[id(self)] = copied
        for name, value in vars(self).items():  # a Parameter's own attributes too
            setattr(copied, name, copy.deepcopy(value, memo))
        copied.data = None if self.data is None else _copy_broadcast(self.data)
        copied._backward_hooks = copied._post_accumulate_grad_hooks = copied._constant = copied.view_record = None
        copied.version_counter = VersionCounter()
        return copied

    def set_creator(self, func, output_nr=0):
        self.creator = func
        self.generation = func.generation + 1  # step 16: one more than the function that made it
        self.output_nr = output_nr  # step 35: the gradient of output i goes to slot i of func

    def cleargrad(self):
        self.grad = None  # step 13: start a new computation from zero

    def backward(self, gradient=None, retain_graph=None, create_graph=False, *, retain_grad=False):
        """Add the derivative of this variable with respect to each leaf into the leaf's `.grad`.

        gradient: d(loss)/d(self), shaped like self. Without it the seed is 1, for a variable of one
            element only: for more, PyTorch and the package refuse to guess (step 29).
        retain_graph: keep the tensors the functions saved for backward, so that the graph
            can be backpropagated again (step 35). Defaults to create_graph, as in PyTorch.
        create_graph: record the backward pass as a graph of its own, so that the
            gradients can be differentiated again (step 27).
        retain_grad: keep the gradient of every variable, not only of the leaves (step 18).
        """
        if not self.requires_grad:  # step 33: nothing behind it to differentiate, and no leaf to fill
            raise RuntimeError("backward: element 0 of variables does not require grad and does not have a grad_fn")
        seed = engine.seed(self, gradient, "backward")
        retain_graph = create_graph if retain_graph is None else retain_graph  # step 35: PyTorch's default
        engine.run_backward([self], [seed], retain_graph, create_graph, retain_grad=retain_grad)

    # step 33: PyTorch's vocabulary for the graph
    @property
    def requires_grad(self):
        """Whether gradients flow to this variable: operations on it record the graph."""
        if self.view_record is not None:  # step 37: a view whose base changed in place is brought up to date
            views.read_view(self)
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        if not isinstance(value, bool):
            raise TypeError(f"requires_grad must be a bool, got {type(value).__name__}")
        if not value and self.creator is not None:
            raise RuntimeError("requires_grad: you can only change requires_grad flags of leaf variables; "
                               "use var.detach() for a variable that does not require grad")
        if value and self.data is not None and self.data.dtype.kind != "f":
            raise RuntimeError(_cannot_require_grad(self.data.dtype))
        if value and self.version_counter is None and not InferenceMode.enabled:  # step 58: it could not be saved
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
        self._requires_grad = value

    def requires_grad_(self, requires_grad=True):
        """Set `requires_grad` in place and return the variable, as PyTorch's method does."""
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self):
        """True for a variable no recorded operation created: the user's, a constant, a no_grad result."""
        if self.view_record is not None:  # step 37 (as requires_grad)
            views.read_view(self)
        return self.creator is None

    @property
    def grad_fn(self):
        """PyTorch's name for `creator`: the Function that made this variable, or None."""
        if self.view_record is not None:  # step 37 (as requires_grad)
            views.read_view(self)
        return self.creator

    def detach(self):
        """A new leaf that shares this variable's data (and its version counter, step 36) and does not require grad."""
        detached = Variable(self.data, requires_grad=False)
        share_version_counter(detached, self.version_counter)
        detached._strided = self._strided  # no step: (tinypytorch.layout)
        return detached

    # step 34: hooks on the gradient
    def register_hook(self, hook):
        """Call `hook(grad)` each time a backward pass has this variable's complete gradient.

        The hook may return None (it only looks) or a gradient of the same shape, which
        replaces the gradient from then on. For a leaf the hooks run before the gradient
        is added into `.grad`. Hooks run in the order they were registered. Returns a
        handle whose `remove()` unregisters the hook.
        """
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a variable that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"register_hook: a hook must be callable, got {type(hook).__name__}")
        if self._backward_hooks is None:
            self._backward_hooks = {}
            if self.creator is not None:  # step 35: the hooks outlive the variable, as PyTorch's do
                self.creator.keep_output_hooks(self.output_nr, self._backward_hooks)
        handle = hooks.RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        return handle

    def register_post_accumulate_grad_hook(self, hook):
        """Call `hook(self)` each time a backward pass has added this leaf's gradient into `.grad` (PyTorch's).

        What an optimizer that steps inside backward uses: the hook may update the leaf and let its
        gradient go (`.grad = None`) at once. Returns a handle whose `remove()` unregisters the hook.
        """
        if self.creator is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._post_accumulate_grad_hooks is None:
            self._post_accumulate_grad_hooks = {}
        handle = hooks.RemovableHandle(self._post_accumulate_grad_hooks)
        self._post_accumulate_grad_hooks[handle.id] = hook
        return handle

    def retain_grad(self):
        """Keep this variable's gradient in `.grad` after each backward pass, as leaves do.

        PyTorch implements it as a hook that runs after all the others; here the
        engine checks `retains_grad` after running the hooks, to the same effect.
        """
        if not self.requires_grad:
            raise RuntimeError("retain_grad: can't retain_grad on a variable that has requires_grad=False")
        if self.creator is not None:  # a leaf keeps its gradient anyway
            self._retains_grad = True

    @property
    def retains_grad(self):
        """True for a non-leaf whose retain_grad() was called."""
        return self._retains_grad


def _copy_broadcast(a):
    """A copy of array a, broadcast where a is (a stride of 0), as PyTorch's deepcopy copies a tensor's memory and
    keeps its strides: the copy of an expanded tensor refuses in-place changes as the tensor does."""
    if not (isinstance(a, np.ndarray) and a.size and any(s == 0 and n > 1 for s, n in zip(a.strides, a.shape))):
        return a.copy()
    compact = a[tuple(slice(0, 1) if s == 0 else slice(None) for s in a.strides)].copy()
    strides = [0 if s == 0 else c for s, c in zip(a.strides, compact.strides)]
    return np.lib.stride_tricks.as_strided(compact, a.shape, strides)


# step 21: the numbers an operation accepts as operands (bool is an int)
scalar_types = (int, float, complex, np.number)
_NUMBERS = (*scalar_types, np.bool_)  # what as_array makes a 0-d array of (NumPy's bool is no np.number)


def compare(op, x, other):
    """x <op> other element-wise (op: "equal", "less", ...): a bool Variable that requires no grad, as PyTorch's.

    Both sides in their promoted dtype first, as PyTorch compares: float32 0.1 equals a 0-d float64 0.1.
    """
    if not isinstance(other, (Variable, *cuda.array_types, *scalar_types, np.bool_)):
        return NotImplemented  # e.g. x == None: Python then compares identities, as for a torch tensor
    if batching_state.open_vmap_levels and batching_state.any_batched(None, (x, other)):  # step 69: per sample
        return batching_state.compare(op, x, other)
    dtype = dtypes.result_type(x, other)  # step 59: both sides in PyTorch's promoted dtype
    strided = x._strided or getattr(other, "_strided", False)  # no step: (tinypytorch.layout)
    other = other.data if isinstance(other, Variable) else other
    xp = cuda.get_array_module(x.data)
    if not isinstance(other, cuda.array_types):
        other = xp.asarray(other, dtype=dtype)
    y = Variable(xp.asarray(getattr(xp, op)(dtypes.cast(x.data, dtype), dtypes.cast(other, dtype))),
                 requires_grad=False)
    if strided:  # no step: laid out as PyTorch's result (tinypytorch.layout)
        y.data = layout.follow_inputs(y.data, (x.data, other))
        layout.mark([y])
    return y


def as_array(x, xp=np):
    """A Python or NumPy number becomes a 0-d array of module `xp`; anything else is returned as is (step 09)."""
    if isinstance(x, _NUMBERS):
        return xp.array(x)
    return x


def as_variable(obj, op="as_variable", xp=np, like=None):
    """Return `obj` as a Variable; `op` names the operation in the error message (step 21).

    A Python number meeting an array (`like`) takes the dtype of their result (PyTorch's result_type, which
    speaks for the number's rank), so that a formula running on arrays keeps the dtype: float32 data times 2.0
    stays float32, and an int64 array times 0.5 gives the default float32, where NumPy gives float64.
    """
    if isinstance(obj, Variable):
        return obj
    if BackwardMode.arrays and isinstance(obj, (*cuda.array_types, np.number)):  # speed: in a formula running on
        return obj  # arrays (BackwardMode), what it calls (reshape, sum_to, ...) keeps arrays as they are
    # step 33: a number or an array inside an expression is a constant: no gradient flows to it
    if isinstance(obj, cuda.array_types):
        return Variable(obj, requires_grad=False)
    if isinstance(obj, (int, float, complex)) and like is not None:
        like = like.data if isinstance(like, Variable) else like  # its array's dtype: NumPy's
        number = Variable(xp.asarray(obj, dtype=dtypes.wrapped_dtype(like.dtype, type(obj))), requires_grad=False)
    elif isinstance(obj, scalar_types):
        number = Variable(as_array(obj, xp), requires_grad=False)
    else:
        raise TypeError(f"{op}: unsupported operand type {type(obj).__name__}")
    number.wrapped_number = True  # step 35: saved as a number, not a tensor, as PyTorch does
    return number


# step 33: every recorded Function gets the next number (PyTorch's sequence_nr)
_sequence_numbers = itertools.count()


def gradient_edge(x):
    """Where the gradient of `x` goes (step 35): (its creator, which output x is), or (x, 0) for a leaf.

    PyTorch gives each leaf that requires grad a node of its own (AccumulateGrad), whose only
    work is to add the gradient into `.grad`; here the leaf Variable plays that part. A
    variable that needs no gradient (a constant) has no edge: (None, 0).
    """
    if x.creator is not None:
        return x.creator, x.output_nr
    if not x._requires_grad:  # (the attribute behind the property: every recorded input passes here)
        return None, 0
    return (x if x.grad_leaf is None else x.grad_leaf), 0


class AccumulateGrad:
    """A leaf's node as PyTorch's `next_functions` shows it: the gradient arriving here is added into `.grad`.

    Here the leaf Variable itself receives its gradient (gradient_edge); this object only names that node.
    """

    __slots__ = ("variable",)
    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad>"


def _saved_tensor(function, index):
    """PyTorch's grad_fn._saved_<name>: what forward saved at `index`, unpacked (its hooks run, as PyTorch's)."""
    saved = function._saved[index] if function._saved else None
    return saved.unpack(function) if isinstance(saved, graph.SavedTensor) else saved


class ConstantInput:
    """What a function keeps of an input that needs no gradient, for drawings (step 25): not its array (step 35)."""

    __slots__ = ("name", "shape", "dtype", "value")

    def __init__(self, x):
        data = x.data  # (read once: the shape and dtype properties would each cost a call)
        self.name, self.shape, self.dtype = x.name, data.shape, data.dtype
        self.value = data.item() if data.ndim == 0 else None  # a number of the formula, such as the 14 in 14 * x


def constant_input(x):
    """The ConstantInput of constant `x`, made once, so that a constant used twice is drawn once."""
    if x._constant is None:
        x._constant = ConstantInput(x)
    return x._constant


class Function:
    """Base class of every operation: subclasses define `forward` on arrays and `backward` on Variables.

    From step 35 on, a recorded function keeps three things for the backward pass: `edges`,
    where each input's gradient goes; the tensors `forward` saved with `save_for_backward`;
    and weak references to its outputs. It keeps no reference to its inputs.
    """

    _to_save = ()  # step 35: what forward passed to save_for_backward, until __call__ keeps it
    _saved = ()  # step 35: the SavedTensors themselves
    output_hooks = None  # step 35: {output index: the hooks of that output variable}
    constants = None  # step 35: {input index: ConstantInput} for the inputs that need no gradient
    is_view = False  # step 37: True for functions whose output may share its input's memory
    promotes = False  # step 59: element-wise operations of several inputs compute in PyTorch's result_type
    # speed: True if backward is one formula that runs on Variables (recording, for create_graph) and on bare
    # arrays alike, so that the engine hands it arrays when no graph of the backward pass is wanted (BackwardMode)
    formula_on_arrays = False
    # False: when no gradient arrives at any output, the engine passes None on without calling backward (PyTorch's
    # nodes return undefined gradients then); a node that must run all the same (a custom Function's) says True
    runs_without_gradients = False
    # no step: how PyTorch lays out the result where NumPy would lay it out otherwise (tinypytorch.layout):
    # "inputs" (element-wise, copies and casts), "contiguous" (reductions, softmax), None (as NumPy gives it)
    result_layout = None

    def __call__(self, *inputs):
        if modes.open_modes:  # step 68: some mode is open: the operation goes down the mode stack to the door
            return modes.dispatch(self, inputs, self.run_plain)
        return self.run_plain(inputs)

    def run_plain(self, inputs):
        """The operation itself, past every mode: the inputs as Variables, forward on their arrays, the outputs."""
        # (Loops rather than generators or comprehensions: every operation pays for this method, and most
        # have one or two inputs.)
        for x in inputs:
            if not isinstance(x, Variable):  # most calls get Variables only
                if BackwardMode.arrays:  # speed: in a formula running on arrays, arrays in and out: a Variable
                    return self.on_arrays([array_of(x) for x in inputs])  # there is a constant (BackwardMode)
                inputs = self.coerce(inputs)
                break
        # step 33: record the graph only when it will be used: when backprop is on (step 18) and a gradient
        # can flow to some input. Only then do the outputs require grad. (A loop, and `_requires_grad`, the
        # attribute behind the property: every operation pays for this.)
        requires_grad = False
        strided = False  # no step: whether some input is laid out otherwise than in C order (tinypytorch.layout)
        for x in inputs:
            if x.view_record is not None:
                views.refresh_view(x)  # step 37: if its base was changed in place since, a view's graph is redone
            if x._requires_grad:  # step 33: a gradient can flow to this input
                requires_grad = True
            if x._strided:  # no step
                strided = True
        requires_grad = requires_grad and Config.enable_backprop  # step 33: and only while backprop is on
        if len(inputs) > 1 and cuda.cupy is not None:  # step 48: one device per operation, as in PyTorch
            cuda.check_same_device(self.op_name(), [x.data for x in inputs])
        # step 59: PyTorch's type promotion, not NumPy's (two inputs of one dtype, the common case, need no rule)
        if self.promotes and inputs[0].data.dtype is not inputs[-1].data.dtype:
            inputs = self.promoted(inputs)
        # step 35: forward saves only what the gradients of these inputs need
        self.needs_input_grad = tuple([x._requires_grad for x in inputs]) if requires_grad else (False,) * len(inputs)
        ys = self.forward(*[x.data for x in inputs])  # step 11: any number of inputs and outputs
        if strided and self.result_layout is not None:  # no step: the result laid out as PyTorch's, not NumPy's
            ys = self.laid_out(ys, inputs)
        # as_array: a 0-d result may come back a scalar (step 09)
        if type(ys) is tuple:
            outputs = [Variable(as_array(y), requires_grad=False) for y in ys]
        else:
            ys = (ys,)
            outputs = [Variable(as_array(ys[0]), requires_grad=False)]
        if requires_grad:  # step 33: the outputs require grad (set here: the constructor would check the dtype again)
            for output in outputs:
                output._requires_grad = output.data.dtype.kind == "f"  # an integer output has no gradient
        if self.is_view:
            if requires_grad and inputs[0].version_counter is None:  # step 58: a view of an inference tensor is one
                requires_grad = outputs[0]._requires_grad = False  # too, outside the graph, as in PyTorch
            views.track_view(self, inputs[0], outputs[0])  # step 37: the output may share the input's memory
            strided = True  # no step: a view may be laid out otherwise than in C order
        if strided:  # no step: the outputs that are not laid out in C order are marked so (tinypytorch.layout)
            layout.mark(outputs)
        if requires_grad:  # step 35: one method keeps what the graph needs, only where a gradient can flow
            self.record(inputs, ys, outputs)
        self._to_save = ()  # step 35: record has packed what forward saved; hold it no longer
        return outputs if len(outputs) > 1 else outputs[0]

    def variables(self, inputs):  # step 68
        """The inputs as Variables, for a mode that reads them; None inside a formula running on bare arrays,
        which the plain door runs on arrays past every mode (BackwardMode)."""
        for x in inputs:
            if not isinstance(x, Variable):
                return None if BackwardMode.arrays else self.coerce(inputs)
        return inputs

    def laid_out(self, ys, inputs):  # no step
        """forward's result laid out as PyTorch lays out this operation's (by result_layout); what forward saved
        follows it."""
        if type(ys) is tuple:
            return tuple([self.laid_out(y, inputs) for y in ys])
        relaid = layout.lay_out(self.result_layout, ys, self.layout_operands(inputs))
        if relaid is not ys:
            self._to_save = tuple([relaid if a is ys else a for a in self._to_save])
        return relaid

    def layout_operands(self, inputs):  # no step
        """The arrays whose layout decides the result's, in PyTorch's order of the operands."""
        return [x.data for x in inputs]

    def push_tangents(self, inputs, ys, outputs):  # step 64
        """The outputs' tangents from the inputs' by the operation's `jvp`, when some input has one (a missing
        one is a zero tangent). Called by the forward-AD mode (step 68) after the operation has run."""
        tangents = [forward_ad_state.tangent_of(x) for x in inputs]
        if all(t is None for t in tangents):
            return
        self.primals, self.results = [x.data for x in inputs], ys  # what the rules read, for this call only
        try:
            out = self.jvp(*tangents)
        finally:
            del self.primals, self.results
        tangent_dtype = functools.reduce(dtypes.promote, [t.dtype for t in tangents if t is not None])
        for output, t in zip(outputs, out if type(out) is tuple else (out,)):
            if t is not None and output.data.dtype.kind == "f":  # an integer output has no tangent
                xp = cuda.get_array_module(output.data)  # the tangent as its output: its shape, and its dtype
                dtype = self.tangent_dtype(output.data.dtype, tangent_dtype)
                forward_ad_state.set_tangent(output, xp.broadcast_to(t, output.shape).astype(dtype))
        if forward_ad_state.tape is not None:  # step 71: linearize keeps this jvp, to replay it (tinypytorch.func)
            forward_ad_state.tape.append((functools.partial(self.replay_jvp, [x.data for x in inputs], ys), tangents,
                                          [forward_ad_state.tangent_of(output) for output in outputs]))
        if self._saved:  # step 65: forward over reverse, saved outputs keep their tangents for the backward pass
            graph.keep_output_tangents(self._saved, outputs)

    def replay_jvp(self, primals, results, tangents):  # step 71: linearize (tinypytorch.func)
        """This call's `jvp` again, at the primal inputs and outputs it saw then, on other tangents (arrays or
        None): the outputs' tangents, a tuple, as `jvp` gives them (not yet broadcast or cast)."""
        self.primals, self.results = primals, results
        try:
            out = self.jvp(*tangents)
        finally:
            del self.primals, self.results
        return out if type(out) is tuple else (out,)

    @staticmethod
    def tangent_dtype(output_dtype, tangent_dtype):
        """An output's tangent's dtype: its own promoted with the inputs' tangents', as PyTorch's formulas give it (a
        float64 tangent of a float32 primal stays float64); a cast (Cast) casts the tangent too."""
        return dtypes.promote(output_dtype, tangent_dtype)

    def jvp(self, *tangents):  # step 64
        """Forward mode: the outputs' tangents, J t, from one tangent (array or None: zero) per input; the
        primal inputs and outputs are in self.primals and self.results. Each operation defines its own."""
        raise NotImplementedError(f"Trying to use forward AD with {self.op_name()} that does not support it "
                                  "because it has not been implemented yet.")

    def jvp_by_forward(self, *tangents):  # step 64
        """The jvp of an operation linear in its inputs (reshape, sum, getitem, ...): the operation itself on the
        tangents (a missing one: zeros)."""
        xp = cuda.get_array_module(*self.primals)
        return self.forward(*[xp.zeros_like(x) if t is None else t for x, t in zip(self.primals, tangents)])

    def on_arrays(self, arrays):
        """The operation on bare arrays, inside a backward formula that runs on arrays: no Variable, no graph."""
        self.needs_input_grad = (False,) * len(arrays)
        if self.promotes:  # step 59: a Python number stays a number (NumPy gives it the array's dtype)
            # A NumPy scalar here is what NumPy's arithmetic made of 0-d arrays (gy * x of 0-d gives np.float64), a
            # 0-d tensor in PyTorch: it keeps its dtype, where result_type would read it as a Python number
            dtype = dtypes.result_type(*[np.asarray(a) if isinstance(a, np.generic) else a for a in arrays])
            arrays = [dtypes.cast(a, dtype) for a in arrays]
        return self.forward(*arrays)

    def promoted(self, inputs):  # step 59
        """The inputs in their result_type, for an operation that promotes. An input of another dtype is replaced
        by a stand-in: its array cast, its gradient sent where the input's goes (cast back there by the engine),
        its version counter shared, so that what forward saves still sees an in-place change of the input, and
        its tangent cast (step 64)."""
        dtype = dtypes.result_type(*inputs)
        promoted = []
        for x in inputs:
            if x.data.dtype != dtype:
                stand_in = Variable(x.data.astype(dtype), requires_grad=x.requires_grad)
                if x._strided:  # no step: cast as PyTorch's `to` casts, into x's layout (tinypytorch.layout)
                    stand_in.data = layout.preserve_format(stand_in.data, x.data)
                    layout.mark([stand_in])
                views.share_version_counter(stand_in, x.version_counter)
                if x.creator is not None:
                    stand_in.set_creator(x.creator, x.output_nr)
                elif x.requires_grad:
                    stand_in.grad_leaf = x.grad_leaf or x  # a leaf's gradient goes to the leaf (as step 38's)
                stand_in.wrapped_number = x.wrapped_number
                tangent = forward_ad_state.tangent_of(x) if forward_ad_state.open_dual_levels else None
                if tangent is not None:  # step 64: forward mode reads the stand-in's tangent, cast with it
                    forward_ad_state.set_tangent(stand_in, tangent.astype(dtype))
                    if forward_ad_state.tape is not None:  # step 71: linearize replays the cast (tinypytorch.func)
                        forward_ad_state.tape.append((tuple, [tangent], [forward_ad_state.tangent_of(stand_in)]))
                x = stand_in
            promoted.append(x)
        return promoted

    def op_name(self):
        """The operation's name in error messages: Mul -> mul, LinearFunction -> linear."""
        return type(self).__name__.lower().removesuffix("function")

    # step 59: PyTorch's name of the function and of its inputs, for an operation whose PyTorch function refuses a
    # number where a tensor goes (torch.exp(2.0) raises TypeError), where DeZero's functions take one (step 21)
    tensor_arguments = None  # e.g. ("maximum", "input", "other")

    def coerce(self, inputs):
        """The inputs as Variables (step 21): a number or an array is a constant.

        A number goes to the device (NumPy or CuPy) of the other inputs, since CuPy will not mix
        with NumPy arrays (step 23).
        """
        if self.tensor_arguments is not None:  # step 59
            name, *arguments = self.tensor_arguments
            for position, (x, argument) in enumerate(zip(inputs, arguments), 1):
                if isinstance(x, _NUMBERS):
                    kind = type(x).__name__ if type(x).__module__ == "builtins" else f"numpy.{type(x).__name__}"
                    raise TypeError(f"{name}(): argument '{argument}' (position {position}) must be Tensor, not {kind}")
        like = None  # the first tensor among the inputs: a number takes its device and, with it, its dtype
        for x in inputs:
            if isinstance(x, Variable) or isinstance(x, cuda.array_types):
                like = x
                break
        xp = np if like is None else cuda.get_array_module(like)
        try:
            return tuple([x if isinstance(x, Variable) else as_variable(x, "", xp, like) for x in inputs])
        except TypeError as error:  # as_variable's refusal names the operation only now: its name costs a call
            if not str(error).startswith(": "):
                raise
            raise TypeError(f"{self.op_name()}{error}") from None

    def record(self, inputs, ys, outputs):  # step 35
        """What the graph keeps of this call: where each input's gradient goes, what the gradients must look
        like, weak references to the outputs, and the tensors forward saved; not the inputs themselves."""
        self.generation = max([x.generation for x in inputs])  # step 16 (step 23's backward loops order by it)
        self.sequence_nr = next(_sequence_numbers)  # step 33: creation order, for the ready queue
        self.edges = tuple([gradient_edge(x) for x in inputs])
        if not all(self.needs_input_grad):  # for drawings, what the constants were (step 25)
            self.constants = {i: constant_input(x) for i, x in enumerate(inputs) if not x._requires_grad}
        self.output_meta = tuple([(y.data.shape, y.data.dtype) for y in outputs])  # what gradients must be
        for i, output in enumerate(outputs):  # output.set_creator(self, i), without a call per output
            output.creator, output.generation, output.output_nr = self, self.generation + 1, i
        self.outputs = [weakref.ref(output) for output in outputs]  # step 17: no reference cycle
        if self._to_save:
            self._saved = graph.save(self, self._to_save, inputs, ys, outputs)
        if grad_mode.is_anomaly_enabled():
            anomaly.record_creation(self)  # step 39: where it was made, for a NaN's report

    torch_name = None  # PyTorch's name for this node where it is not the class name + "Backward0"
    saved_names = ()  # PyTorch's names of what forward saves, in order: grad_fn._saved_self, _saved_result, ...

    def __init_subclass__(cls, **kwargs):
        # a property per name of saved_names, made with the class (a __getattr__ would slow every attribute read)
        super().__init_subclass__(**kwargs)
        for index, name in enumerate(cls.__dict__.get("saved_names", ())):
            setattr(cls, "_saved_" + name, property(functools.partial(_saved_tensor, index=index)))

    def name(self):
        """PyTorch's name for this node, as a variable's grad_fn shows it: MulBackward0, SumBackward0, ..."""
        return self.torch_name or type(self).__name__ + "Backward0"

    def __repr__(self):
        return f"<{self.name()}>"

    # The inputs that PyTorch's node for the same call takes as a number (a Scalar argument), not as a tensor: the
    # 1 of `1 - x` (rsub), the 2 of `2 ** x`, the divisor of `x % 2`. Here they are constant inputs (drawn, as
    # step 25 draws every number), but PyTorch's node has no edge for them, so next_functions lists none.
    scalar_inputs = ()

    @property
    def next_functions(self):
        """Where each input's gradient goes, as PyTorch shows it: (node, output index); a leaf's node is an
        AccumulateGrad, a constant's (None, 0); an input in scalar_inputs is not listed."""
        return tuple([(AccumulateGrad(node), 0) if isinstance(node, Variable) else (node, nr)
                      for i, (node, nr) in enumerate(self.edges) if i not in self.scalar_inputs])

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *gys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")

    # ----- step 35: saved tensors ---------------------------------------------------------

    def save_for_backward(self, *xs):
        """Called in `forward`: keep these arrays (inputs, outputs or others) for `backward`.

        None may stand for a tensor that is not needed. Nothing is kept when the graph is
        not recorded; see tinypytorch.autograd.graph for what keeping means.
        """
        self._to_save = xs

    @property
    def saved(self):
        """What backward will unpack, as kept (step 35): SavedTensor records, or None and numbers as saved."""
        return self._saved

    @property
    def saved_tensors(self):
        """The tensors forward saved, as Variables, in the order saved (None where None was saved)."""
        if BackwardMode.arrays:  # speed: arrays for a formula running on arrays (a saved number: its array)
            return tuple([s.unpack_array(self) if isinstance(s, graph.SavedTensor) else array_of(s)
                          for s in self._saved])
        return tuple([s.unpack(self) if isinstance(s, graph.SavedTensor) else s for s in self._saved])

    def release_saved(self):
        """Free the saved tensors (step 35); a later unpack raises "backward through the graph a second time"."""
        for s in self._saved:
            if isinstance(s, graph.SavedTensor):
                s.release()

    def keep_output_hooks(self, output_nr, hooks):
        """Keep the hook dict of output `output_nr`, so the hooks run even if the variable is gone (step 35)."""
        if self.output_hooks is None:
            self.output_hooks = {}
        self.output_hooks[output_nr] = hooks


def push_tangents_mode(function, inputs, below):  # step 64: forward AD's entry of the mode stack (step 68)
    """Under a dual level, the operation runs below, then its jvp pushes the tangents forward with the values.
    Inference mode pushes none, as in PyTorch."""
    xs = function.variables(inputs)
    if xs is None or (grad_mode.open_inference_blocks and InferenceMode.enabled):
        return below(inputs)
    if function.promotes and xs[0].data.dtype is not xs[-1].data.dtype:  # step 59: the jvp reads the promoted
        xs = function.promoted(xs)  # inputs, and their stand-ins carry the cast tangents
    result = below(xs)
    outputs = result if type(result) is list else [result]
    function.push_tangents(xs, tuple([y.data for y in outputs]), outputs)
    return result


modes.register("forward AD", push_tangents_mode)


# ----- arithmetic (steps 11-22; broadcasting: step 30; saved tensors: step 35) -----------
# Binary operations broadcast like NumPy. An input that was broadcast was used by several
# output elements, so its gradient is the sum of theirs: sum_to folds it back to its shape.
# Backward methods use Variable operations (step 27), so gradients can be differentiated.
# Each forward saves what its backward needs and nothing else (step 35): the shapes of the
# inputs as plain tuples, and the arrays themselves only where a gradient formula uses them.

def _check_broadcast(op, x0, x1):
    # step 30 (step 22 required equal shapes): fail here, naming the operation, not inside NumPy
    if x0.shape == x1.shape:  # the common case, and cheaper to test than to broadcast
        return
    try:
        np.broadcast_shapes(x0.shape, x1.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {tuple(x0.shape)} and {tuple(x1.shape)} do not broadcast") from None


class _Binary(Function):
    """A binary operation that broadcasts: forward keeps the input shapes when they differ (step 30), and computes
    in the inputs' promoted dtype."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    shapes = None  # (shape of x0, shape of x1), only when broadcasting made them differ
    promotes = True  # step 59

    def keep_shapes(self, op, x0, x1):
        _check_broadcast(op, x0, x1)
        if x0.shape != x1.shape:
            self.shapes = (x0.shape, x1.shape)

    def sum_to_inputs(self, gx0, gx1):
        """Sum each gradient back to the shape of its input (step 30); None (no gradient wanted) stays None."""
        if self.shapes is not None:
            gx0 = None if gx0 is None else sum_to(gx0, self.shapes[0])
            gx1 = None if gx1 is None else sum_to(gx1, self.shapes[1])
        return gx0, gx1


def sum_tangents(t0, t1):  # step 64
    """The sum of two tangents, None standing for zero (Function.push_tangents broadcasts it to the output)."""
    return t0 if t1 is None else t1 if t0 is None else t0 + t1


class Add(_Binary):  # step 11
    def forward(self, x0, x1):
        self.keep_shapes("add", x0, x1)
        return x0 + x1

    def backward(self, gy):
        return self.sum_to_inputs(gy, gy)  # step 12: dy/dx0 = dy/dx1 = 1

    def jvp(self, t0, t1):  # step 64: d(x0 + x1) = dx0 + dx1
        return sum_tangents(t0, t1)


class Mul(_Binary):  # step 20
    saved_names = ("self", "other")
    def forward(self, x0, x1):
        self.keep_shapes("mul", x0, x1)
        # d(x0 x1)/dx0 = x1 and d(x0 x1)/dx1 = x0: keep each only if the other input needs a gradient
        needs = self.needs_input_grad
        self.save_for_backward(x0 if needs[1] else None, x1 if needs[0] else None)
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.saved_tensors
        # A constant (such as the 14 in 14 * x) gets no gradient: the engine would throw it
        # away (step 33), so skip the product, as PyTorch does (needs_input_grad).
        gx0 = gy * x1 if self.needs_input_grad[0] else None
        gx1 = gy * x0 if self.needs_input_grad[1] else None
        return self.sum_to_inputs(gx0, gx1)

    def jvp(self, t0, t1):  # step 64: d(x0 x1) = dx0 x1 + x0 dx1
        x0, x1 = self.primals
        return sum_tangents(None if t0 is None else t0 * x1, None if t1 is None else x0 * t1)


class Neg(Function):  # step 22
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        if x.dtype.kind == "b":  # step 59: PyTorch's refusal and words (NumPy's is a TypeError)
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                               "invert a mask, use the `~` or `logical_not()` operator instead.")
        return -x

    def backward(self, gy):
        return -gy

    def jvp(self, t):  # step 64
        return -t


class Sub(_Binary):  # step 22
    def forward(self, x0, x1):
        self.keep_shapes("sub", x0, x1)
        return x0 - x1

    def backward(self, gy):
        return self.sum_to_inputs(gy, -gy if self.needs_input_grad[1] else None)  # as in Mul: none for a constant

    def jvp(self, t0, t1):  # step 64
        return sum_tangents(t0, None if t1 is None else -t1)


class Div(_Binary):  # step 22
    saved_names = ("self", "other")
    def forward(self, x0, x1):
        self.keep_shapes("div", x0, x1)
        # d(x0/x1)/dx0 = 1/x1 needs x1; d(x0/x1)/dx1 = -x0/x1^2 needs both (PyTorch keeps the same)
        needs = self.needs_input_grad
        self.save_for_backward(x0 if needs[1] else None, x1)
        if x0.dtype.kind in "biu":  # step 59: true division of integers (and bools) gives the default float
            x0, x1 = dtypes.as_floating(x0), dtypes.as_floating(x1)
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.saved_tensors
        gx0 = gy / x1 if self.needs_input_grad[0] else None  # as in Mul: none for a constant
        gx1 = -gy * (x0 / x1 / x1) if self.needs_input_grad[1] else None  # -x0/x1^2 in PyTorch's order
        return self.sum_to_inputs(gx0, gx1)

    def jvp(self, t0, t1):  # step 64: d(x0/x1) = dx0/x1 - (x0/x1) dx1/x1
        x0, x1 = self.primals
        return sum_tangents(None if t0 is None else t0 / x1, None if t1 is None else -self.results[0] * t1 / x1)


class Reciprocal(Function):
    """1 / x, PyTorch's reciprocal; `number / x` is x.reciprocal() * number, as in PyTorch (rdiv)."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        y = 1 / dtypes.as_floating(x)  # step 59: integers and bools give the default float
        self.save_for_backward(y)  # d(1/x)/dx = -1/x^2 = -y^2: the output, not x (PyTorch saves it too)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return -gy * (y * y)

    def jvp(self, t):  # step 64
        return -t * (self.results[0] * self.results[0])


class Pow(Function):  # step 22
    """x ** c for a constant number c (an exponent that is a Variable needs log, not here yet)."""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)
    saved_names = ("self",)

    @property
    def _saved_exponent(self):  # PyTorch's PowBackward0 shows its exponent, a number, beside _saved_self
        return self.c

    def __init__(self, c):
        if not isinstance(c, numbers.Real):
            raise TypeError(f"pow: the exponent must be a constant number, got {type(c).__name__}")
        self.c = c

    def forward(self, x):
        self.save_for_backward(x)  # d(x^c)/dx = c x^(c-1) needs x
        if x.dtype.kind not in "fc":  # step 59: integers and bools, PyTorch's result dtype (int ** 2.5 is float32)
            if isinstance(self.c, numbers.Integral) and self.c < 0:  # bools too, as PyTorch
                raise RuntimeError("Integers to negative integer powers are not allowed.")
            dtype = dtypes.result_type(x, self.c)
            if dtype.kind == "b":  # a bool tensor ** a Python bool stays bool, as PyTorch's (NumPy's is int8)
                return (x.astype(np.int8) ** self.c).astype(np.bool_)
            x = dtypes.cast(x, dtype)
        return x ** self.c

    def backward(self, gy):
        (x,) = self.saved_tensors
        c = self.c
        if c == 0:  # x**0 is constant; the formula would give 0 * 0**-1 = nan at x = 0, and gy * 0 NaN where gy is
            gy = array_of(gy)  # infinite: zeros, as PyTorch's (a constant)
            return cuda.get_array_module(gy).zeros_like(gy)
        if c == 2 and not Config.enable_backprop:  # speed: x ** 1 would copy x, a pass over the array for
            return c * x * gy  # nothing; but with create_graph it keeps x ** 1 in the graph, as PyTorch does
        return c * x ** (c - 1) * gy

    def jvp(self, t):  # step 64: d(x^c) = c x^(c-1) dx
        (x,) = self.primals
        return t * 0.0 if self.c == 0 else self.c * x ** (self.c - 1) * t


class Clone(Function):
    """A copy with memory of its own (`x.clone()`); the gradient passes through unchanged."""
    result_layout = "preserve"  # no step: laid out as its input, as PyTorch's (tinypytorch.layout)

    def __init__(self, contiguous=False):
        if contiguous:  # no step: x.contiguous()'s copy, in C order
            self.result_layout = "contiguous"

    def forward(self, x):
        return x.copy()

    def backward(self, gy):
        return gy

    jvp = Function.jvp_by_forward  # step 64: a copy of the tangent


def add(x0, x1):
    return Add()(x0, x1)


def mul(x0, x1):
    return Mul()(x0, x1)


def neg(x):
    return Neg()(x)


def check_sub(x0, x1):  # step 59
    """PyTorch's refusal of a subtraction with a bool operand, a tensor or a Python bool (NumPy computes 1 - mask,
    or refuses two bools with a TypeError). Asked of the operands as given: promotion would hide a Python bool."""
    bool0 = isinstance(x0, (bool, np.bool_)) or getattr(x0, "dtype", None) == np.bool_
    bool1 = isinstance(x1, (bool, np.bool_)) or getattr(x1, "dtype", None) == np.bool_
    if bool0 and bool1:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                           "`logical_xor()` operator instead.")
    if bool0 or bool1:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")


def sub(x0, x1):
    check_sub(x0, x1)  # step 59
    return Sub()(x0, x1)


class Rsub(_Binary):
    """x1 - x0, PyTorch's rsub of two tensors (RsubBackward0): its node lists x0's edge, then x1's."""

    def forward(self, x0, x1):
        self.keep_shapes("rsub", x0, x1)
        return x1 - x0

    def backward(self, gy):
        return self.sum_to_inputs(-gy if self.needs_input_grad[0] else None, gy)

    def jvp(self, t0, t1):
        return sum_tangents(None if t0 is None else -t0, t1)


def rsub(x0, x1):
    """x1 - x0 (PyTorch's torch.rsub); `2 - x` arrives here as rsub(x, 2)."""
    check_sub(x1, x0)  # step 59
    if isinstance(x1, scalar_types):  # step 22: computed as 2 - x, a Sub whose number is drawn where the formula
        op = Sub()  # writes it; PyTorch's node (RsubBackward1) takes the number as a Scalar and lists x alone
        op.torch_name, op.scalar_inputs = "RsubBackward1", (0,)
        return op(x1, x0)
    if not isinstance(x1, Variable):  # an array, or what sub refuses by name (`[1] - x`)
        return Sub()(x1, x0)
    return Rsub()(x0, x1)


def div(x0, x1):
    return Div()(x0, x1)


def rdiv(x0, x1):
    """x1 / x0, as PyTorch's reflected division computes it: x0.reciprocal() * x1 (`2 / x` arrives here as
    rdiv(x, 2)), which saves no x (x may change in place before backward) and has the same derivatives."""
    if not isinstance(x1, (*scalar_types, Variable)):  # an array in written order; what div refuses by name
        return Div()(x1, x0)
    return mul(Reciprocal()(x0), x1)


def pow(x, c):  # noqa: A001 (the name PyTorch and DeZero use)
    return Pow(c)(x)


formulas_on_arrays(_Binary, Neg, Reciprocal, Pow, Clone)  # speed: Add, Mul, Sub, Rsub and Div through _Binary

# ----- broadcasting and casting (steps 30, 43) -------------------------------------------
# Here rather than in tinypytorch.functions: the arithmetic above sums its gradients back to the
# inputs' shapes (sum_to), and the engine casts a gradient to its input's dtype (astype).

def as_shape(op, shape):
    """`shape` (an int or a sequence of ints) as a tuple of Python ints."""
    if isinstance(shape, numbers.Integral):
        shape = (shape,)  # step 29: reshape(x, 6) means (6,), as in NumPy
    shape = tuple(shape)
    if not all(isinstance(n, numbers.Integral) for n in shape):
        raise TypeError(f"{op}: a shape is a tuple of ints, got {shape!r}")
    return tuple(int(n) for n in shape)


class BroadcastTo(Function):  # step 30
    is_view = True  # step 37: the result is x's memory, read along the new dimensions again and again

    def __init__(self, shape):
        self.shape = as_shape("broadcast_to", shape)

    def view_fn(self):  # step 37: how a view of the result is remade from its base
        shape = self.shape
        return lambda t: BroadcastTo(shape)(t)

    def forward(self, x):
        self.x_shape = x.shape
        xp = cuda.get_array_module(x)
        try:
            y = xp.broadcast_to(x, self.shape)
        except ValueError:
            raise ValueError(f"broadcast_to: cannot broadcast shape {tuple(x.shape)} to {tuple(self.shape)}") from None
        if isinstance(y, np.ndarray):  # NumPy's is read-only; PyTorch writes through a part that repeats nothing
            y = np.lib.stride_tricks.as_strided(x, y.shape, expanded_strides(x.shape, x.strides, y.shape))  # (e[0])
        return y

    def backward(self, gy):
        return sum_to(gy, self.x_shape)

    jvp = Function.jvp_by_forward  # step 64


def expanded_strides(shape, strides, target):
    """The strides of an array broadcast from `shape` to `target`, as PyTorch's expand lays it out: a stretched
    dimension has stride 0, one kept its own, a new one of length 1 the next one's stride times its length (NumPy
    gives 0 to every dimension of length 1; which tensors PyTorch sees laid out alike depends on them)."""
    out = []
    for i in range(1, len(target) + 1):
        kept = len(shape) - i >= 0
        stride = strides[-i] if kept else (target[-i + 1] * out[0] if out else 0)
        out.insert(0, 0 if (shape[-i] if kept else 1) != target[-i] else stride)
    return tuple(out)


def broadcast_to(x, shape):
    x = as_variable(x, "broadcast_to")
    if as_shape("broadcast_to", shape) == x.shape:
        return x
    return BroadcastTo(shape)(x)


def sum_to_array(x, shape):
    """Sum array `x` down to `shape`, undoing a NumPy broadcast from `shape` to `x.shape` (step 30).

    Broadcasting prepends axes and stretches axes of length 1, so summing undoes it:
    first over the prepended leading axes, then over the stretched ones, keeping them.
    """
    lead = x.ndim - len(shape)
    stretched = tuple(lead + i for i, n in enumerate(shape) if n == 1 and x.shape[lead + i] != 1)
    return sum_array(x, tuple(range(lead)) + stretched, True).reshape(shape)


def sum_array(x, axis, keepdims):  # step 60
    """x.sum(axis); float16 added in float32 and rounded once, as PyTorch does. NumPy adds float16
    in float16 along any axis but the last, and such a running sum stalls (0.001s stop at 4)."""
    if x.dtype == np.float16:
        return x.sum(axis=axis, keepdims=keepdims, dtype=np.float32).astype(np.float16)
    return x.sum(axis=axis, keepdims=keepdims)


class SumTo(Function):  # step 30
    def __init__(self, shape):
        self.shape = as_shape("sum_to", shape)

    def forward(self, x):
        self.x_shape = x.shape
        try:  # shape arithmetic only, so NumPy serves for CuPy arrays too
            if np.broadcast_shapes(self.shape, x.shape) != x.shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"sum_to: shape {tuple(x.shape)} is not a broadcast of {tuple(self.shape)}") from None
        return sum_to_array(x, self.shape)

    def backward(self, gy):
        return broadcast_to(gy, self.x_shape)

    jvp = Function.jvp_by_forward  # step 64


def sum_to(x, shape):
    x = as_variable(x, "sum_to")
    if as_shape("sum_to", shape) == x.shape:
        return x
    return SumTo(shape)(x)


class Cast(Function):  # step 43: a change of dtype; its gradient goes back to the input's dtype
    result_layout = "preserve"  # no step: laid out as its input, as PyTorch's (tinypytorch.layout)

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    @staticmethod
    def tangent_dtype(output_dtype, tangent_dtype):
        return output_dtype  # a cast's tangent is cast too (PyTorch's to(dtype))

    def forward(self, x):
        self.x_dtype = x.dtype
        return x.astype(self.dtype)

    def backward(self, gy):
        return astype(gy, self.x_dtype)

    jvp = Function.jvp_by_forward  # step 64: the tangent cast too


def astype(x, dtype):
    """`x` as `dtype` (NumPy's astype, PyTorch's x.to(dtype)); differentiable, and x itself if nothing changes."""
    x = as_variable(x, "astype")
    if array_of(x).dtype == np.dtype(dtype):  # (x is an array in a formula on arrays)
        return x
    return Cast(dtype)(x)


formulas_on_arrays(BroadcastTo, SumTo, Cast)  # speed

# The autograd kernel, imported last: Variable.backward, register_hook and Function.record call
# it. The engine and saved tensors (graph) make Variables, so they import this module in turn:
# core, engine and graph are the package's one import circle, and why these imports come after
# the classes they use. (anomaly and hooks, the other two, import nothing of core.)
from tinypytorch.autograd import anomaly, engine, graph, hooks  # noqa: E402
