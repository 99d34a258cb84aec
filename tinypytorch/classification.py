"""From scores to class probabilities and a loss (step 50): softmax, log_softmax, cross_entropy, nll_loss, accuracy.

A classifier ends in one score (a logit) per class. Softmax turns a row of scores into
probabilities, exp(x_i) / sum_j exp(x_j); cross-entropy is the negative log-probability of the
right class. Computed naively, both overflow: exp(1000) is inf. Each is computed here, as in
PyTorch, after subtracting the row's maximum, and the loss from `log_softmax` directly, never
as the log of a softmax that may have rounded to 0.
"""
import numbers

import numpy as np

from tinypytorch import batching_state, cuda, dtypes
from tinypytorch.autocast_state import autocast_composite
from tinypytorch.core import Function, Variable, array_of, as_variable, astype, formulas_on_arrays
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import GetItemGrad, _dim, _ndim, _normalize_axis, exp, sum  # noqa: A004 (the package's sum)


def _floating(op, x):  # step 59
    """Refuse an integer or bool input, as PyTorch's softmax kernels do (they exist for floating dtypes only)."""
    if x.dtype.kind not in "fc":
        raise NotImplementedError(f'"{op}_lastdim_kernel_impl" not implemented for \'{dtypes.torch_name(x.dtype)}\'')


def _axis(op, axis, ndim):
    """One axis (an int), as a non-negative int; None, a 0-d x's one element (_one_dim), stays None."""
    if axis is None:
        return None
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    return _normalize_axis(op, axis, ndim)[0]


class Softmax(Function):  # step 50
    """s = exp(x - max) / sum(exp(x - max)) along `axis`; backward s * (g - <s, g>)."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis):
        self.axis = axis

    def forward(self, x):
        _floating("softmax", x)  # step 59: for floating dtypes only, as PyTorch's kernels
        xp = get_array_module(x)
        self.axis = _axis("softmax", self.axis, x.ndim)
        if x.size == 0:  # no step: an empty tensor's softmax is empty, as PyTorch's (NumPy finds no maximum there)
            self.save_for_backward(x)
            return x.copy()
        if x.dtype == np.float16:  # no step: computed in float32 and rounded once, as PyTorch's (its opmath type)
            s = self.forward(x.astype(np.float32)).astype(np.float16)
            self.save_for_backward(s)
            return s
        e = xp.exp(x - x.max(axis=self.axis, keepdims=True))  # the largest is exp(0) = 1: no overflow
        s = e / e.sum(axis=self.axis, keepdims=True)
        self.save_for_backward(s)  # the output: its derivative needs nothing else (PyTorch saves it too)
        return s

    def backward(self, gy):
        (s,) = self.saved_tensors
        if array_of(s).dtype == np.float16:  # no step: in float32 (the engine rounds the gradient once), as PyTorch's
            s, gy = astype(s, np.float32), astype(gy, np.float32)  # (in float16 steps, gy - <s, gy> cancels)
        return s * (gy - sum(gy * s, axis=self.axis, keepdims=True))

    def jvp(self, t):  # step 64: ds = s (dx - <s, dx>), backward's formula on the tangent
        s = self.results[0]
        return s * (t - (s * t).sum(axis=self.axis, keepdims=True))


class LogSoftmax(Function):  # step 50
    """y = x - logsumexp(x) along `axis`; backward g - exp(y) * sum(g)."""
    result_layout = "contiguous"  # no step: PyTorch's, whatever the input's (tinypytorch.layout)

    def __init__(self, axis):
        self.axis = axis

    def forward(self, x):
        _floating("log_softmax", x)  # step 59: for floating dtypes only, as PyTorch's kernels
        xp = get_array_module(x)
        self.axis = _axis("log_softmax", self.axis, x.ndim)
        if x.size == 0:  # no step: an empty tensor's log_softmax is empty, as PyTorch's (NumPy finds no maximum there)
            self.save_for_backward(x)
            return x.copy()
        shifted = x - x.max(axis=self.axis, keepdims=True)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))
        self.save_for_backward(y)  # the output, as PyTorch saves it
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return gy - exp(y) * sum(gy, axis=self.axis, keepdims=True)

    def jvp(self, t):  # step 64: dy = dx - <softmax, dx>
        y = self.results[0]
        return t - (get_array_module(y).exp(y) * t).sum(axis=self.axis, keepdims=True)


def softmax(input, dim=None, *, axis=None):  # noqa: A002 (PyTorch's parameter name)
    """PyTorch's `softmax(input, dim)`: probabilities along `dim`, each row summing to 1 (NumPy's name axis= too)."""
    return Softmax(_one_dim("softmax", input, dim, axis))(input)


def log_softmax(input, dim=None, *, axis=None):  # noqa: A002 (PyTorch's parameter name)
    """PyTorch's `log_softmax(input, dim)`: log-probabilities along `dim`, finite even where softmax rounds to 0."""
    return LogSoftmax(_one_dim("log_softmax", input, dim, axis))(input)


def _one_dim(op, x, dim, axis):
    """The one dim of softmax and log_softmax, given as PyTorch's dim= (checked here, as PyTorch checks it) or
    as NumPy's axis=, as step 50 gives it (checked by the function, as NumPy checks it)."""
    if axis is not None:
        if dim is not None:
            raise TypeError(f"{op}: got both dim and axis, two names of one argument (PyTorch's and NumPy's)")
        return axis
    if dim is None:
        raise TypeError(f"{op}: missing the dim to normalize along")
    dim = _dim(op, dim, _ndim(x))
    return None if _ndim(x) == 0 else dim  # a 0-d x takes dim 0 and -1, as PyTorch: its one element (None)


class NLLLoss(Function):  # step 50
    """The negative log-likelihood of the target classes, given log-probabilities of shape (N, C)."""

    def __init__(self, target, reduction, ignore_index):
        self.target, self.reduction, self.ignore_index = target, reduction, ignore_index

    def forward(self, logp):
        xp = get_array_module(logp)
        kept = self.target != self.ignore_index
        self.rows, self.classes = xp.arange(len(self.target)), xp.where(kept, self.target, 0)
        total = xp.asarray(kept.sum(), dtype=logp.dtype)  # the number of rows that count (0-d, as PyTorch)
        # the derivative of the loss with respect to each picked log-probability, times -1
        with np.errstate(invalid="ignore"):  # every row ignored: the mean is 0/0 = nan, as in PyTorch
            self.weights = kept.astype(logp.dtype) / (total if self.reduction == "mean" else 1)
        self.save_for_backward(logp, self.target, total)  # what PyTorch's NllLossBackward keeps
        picked = -logp[self.rows, self.classes] * self.weights
        return picked if self.reduction == "none" else picked.sum()

    def backward(self, gy):
        shape = self.saved_tensors[0].shape
        # each row's gradient goes to its target class only; ignored rows get none
        return GetItemGrad((self.rows, self.classes), shape)(-gy * self.weights)

    def jvp(self, t):  # step 64: minus the picked tangents, weighted as the picked log-probabilities
        picked = -t[self.rows, self.classes] * self.weights
        return picked if self.reduction == "none" else picked.sum()


def cross_entropy(input, target, reduction="mean", ignore_index=-100):  # noqa: A002 (PyTorch's name)
    """PyTorch's `cross_entropy`: log_softmax over the classes, then the negative log-likelihood of `target`.

    input: scores of shape (N, C); target: N class indices (integers in [0, C), or ignore_index for a
    row that does not count); reduction: "mean" over the rows that count, "sum", or "none" (one loss a row).
    """
    input = as_variable(input, "cross_entropy")
    input, = autocast_composite("cross_entropy", input)  # step 61: in float32 under autocast, log_softmax too
    target = _checked_target(input, target, ignore_index)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: {reduction!r} is not a valid value for reduction: "
                         "expected 'mean', 'sum' or 'none'")
    return NLLLoss(target, reduction, ignore_index)(log_softmax(input, axis=1))


def nll_loss(input, target, reduction="mean", ignore_index=-100):  # noqa: A002 (PyTorch's name)
    """PyTorch's `nll_loss`: the negative log-likelihood of `target` given log-probabilities of shape (N, C),
    as cross_entropy takes it after log_softmax; target and reduction as in cross_entropy."""
    input = as_variable(input, "nll_loss")
    target = _checked_target(input, target, ignore_index, "nll_loss")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"nll_loss: {reduction!r} is not a valid value for reduction: "
                         "expected 'mean', 'sum' or 'none'")
    return NLLLoss(target, reduction, ignore_index)(input)


def _checked_target(input, target, ignore_index, op="cross_entropy"):
    """`target` as an integer array on input's device, after checking it against input of shape (N, C)."""
    if input.ndim != 2:
        raise ValueError(f"{op}: expected an input of shape (N, C), got {tuple(input.shape)}")
    if batching_state.open_vmap_levels and isinstance(target, batching_state.batched_type):  # step 69
        return target  # a batched target (vmap): nll_loss's batching rule takes it
    if isinstance(target, Variable):
        target = target.data
    xp = get_array_module(input.data)
    target = xp.asarray(target) if isinstance(target, cuda.array_types) else xp.asarray(np.asarray(target))
    if not np.issubdtype(target.dtype, np.integer) or target.dtype == bool:
        raise TypeError(f"{op}: expected target dtype to be an integer type (class indices), "
                        f"but got {target.dtype}")
    if target.shape != (input.shape[0],):
        raise ValueError(f"{op}: expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({target.shape[0] if target.ndim else target.shape})")
    wrong = (target != ignore_index) & ((target < 0) | (target >= input.shape[1]))
    if bool(wrong.any()):
        raise ValueError(f"{op}: target {int(target[wrong][0])} is out of bounds "
                         f"for {input.shape[1]} classes")
    return target


def accuracy(scores, target):
    """The fraction of rows whose highest score is the target class (a number; nothing to differentiate)."""
    scores = scores.data if isinstance(scores, Variable) else scores
    target = target.data if isinstance(target, Variable) else target
    xp = get_array_module(scores)
    return float((scores.argmax(axis=1) == xp.asarray(target)).mean())


formulas_on_arrays(Softmax, LogSoftmax, NLLLoss)  # speed: their backward runs on arrays too (grad_mode.BackwardMode)

# PyTorch's refusal of a number for the tensor (Function.coerce; functions.py lists the others)
Softmax.tensor_arguments, LogSoftmax.tensor_arguments = ("softmax", "input"), ("log_softmax", "input")

NLLLoss.torch_name = "NllLossBackward0"  # PyTorch's name for the node (Function.name)
