"""Binary cross-entropy, PyTorch's F.binary_cross_entropy and F.binary_cross_entropy_with_logits: the loss of
independent yes/no predictions (one per element), against targets in [0, 1].

From probabilities p:  loss = -(t log p + (1 - t) log(1 - p)), each log clamped at -100 as PyTorch's, so that a
p of exactly 0 or 1 gives a large finite loss, not inf.

From logits x (p = sigmoid(x)), without forming p: log p = log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)) and
log(1 - p) = log_sigmoid(x) - x, so

    loss = (1 - t) x - log_sigmoid(x)

which neither overflows nor loses the small probabilities that sigmoid would round to 0 or 1 (a logit of 40 has
1 - p = 4e-18, which float64 cannot tell from 1). pos_weight w+ weighs the positive term: log_sigmoid(x) is
multiplied by 1 + (w+ - 1) t. Each is one node, with PyTorch's own gradient formulas (sigmoid(x) - t for the
logits), so gradients equal PyTorch's for large |x| too; `weight` rescales each element's loss; neither weight
is differentiable, as in PyTorch. The steps and their dtypes are PyTorch's too: with logits, log_sigmoid is
computed in the input's dtype and the loss written into 1 - t, so it has the target's dtype.
"""
import operator

import numpy as np

from tinypytorch import dtypes
from tinypytorch.core import Function, Variable, as_variable, sum_to
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import clamp, log, sigmoid
from tinypytorch.grad_mode import is_grad_enabled

REDUCTIONS = ("none", "mean", "sum")
_EPSILON = float(np.float32(1e-12))  # PyTorch's clamp of the gradient's denominator: 1e-12 as a C++ float


def _log_sigmoid(xp, x):
    """log(sigmoid(x)) in x's dtype; float16 computed in float32 and rounded once, as PyTorch's kernel."""
    wide = x.astype(np.float32) if x.dtype == np.float16 else x
    return (xp.minimum(wide, 0) - xp.log1p(xp.exp(-xp.abs(wide)))).astype(x.dtype, copy=False)


def _into(op, dtype, *arrays):
    """op on the arrays in their result_type (PyTorch's promotion), rounded into `dtype`: what an in-place
    operation of PyTorch's (mul_, sub_) gives, its result keeping the dtype of the tensor written into."""
    common = dtypes.result_type(*arrays)
    return op(*[dtypes.cast(a, common) for a in arrays]).astype(dtype, copy=False)


def _check_broadcast(loss_shape, weight):
    """The weight multiplies the loss in place in PyTorch: it may broadcast over the loss, not enlarge it."""
    shape = np.broadcast_shapes(loss_shape, weight.shape)
    if shape != loss_shape:
        raise RuntimeError(f"output with shape {list(loss_shape)} doesn't match the broadcast shape {list(shape)}")


class LogSigmoid(Function):
    """log(sigmoid(x)), computed stably; its derivative is sigmoid(-x). (What the with-logits target gradient
    needs, differentiable again.)"""
    result_layout = "inputs"  # no step: laid out after the inputs as PyTorch's (tinypytorch.layout)

    def forward(self, x):
        self.save_for_backward(x)
        return _log_sigmoid(get_array_module(x), x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * sigmoid(-x)


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


class _BinaryCrossEntropy(Function):
    """Inputs (x, t) and then weight, pos_weight where given. Backward follows PyTorch's formulas in PyTorch's
    order (the element's gradient times gy, then times weight, then divided by the count for "mean"), each summed
    back to its input's shape (a weight larger than the input broadcasts the loss)."""

    def __init__(self, reduction, has_weight, has_pos_weight=False):
        self.reduction, self.has_weight, self.has_pos_weight = reduction, has_weight, has_pos_weight

    def extra(self, extra):
        weight = extra[0] if self.has_weight else None
        return weight, (extra[-1] if self.has_pos_weight else None)

    def forward(self, x, t, *extra):
        weight, pos_weight = self.extra(extra)
        loss = self.loss(get_array_module(x), x, t, pos_weight)  # in the target's dtype, as PyTorch's
        if weight is not None:
            loss = _into(operator.mul, loss.dtype, loss, weight)
        self.count = loss.size
        self.save_for_backward(x, t, *extra)
        return _reduce(loss, self.reduction)

    def backward(self, gy):
        x, t, *extra = self.saved_tensors
        weight, pos_weight = self.extra(extra)
        grads = [self.input_grad(x, t, pos_weight, gy) if self.needs_input_grad[0] else None,
                 self.target_grad(x, pos_weight, gy) if self.needs_input_grad[1] else None]
        for i, (g, shape) in enumerate(zip(grads, (x.shape, t.shape))):
            if g is not None:
                g = g if weight is None else g * weight
                g = g / self.count if self.reduction == "mean" else g
                grads[i] = sum_to(g, shape)
        return (*grads,) + (None,) * len(extra)


class BinaryCrossEntropy(_BinaryCrossEntropy):  # PyTorch's BinaryCrossEntropyBackward0
    def loss(self, xp, p, t, pos_weight):
        with np.errstate(divide="ignore"):  # log(0) = -inf, then clamped at -100
            return (t - 1) * xp.maximum(xp.log1p(-p), -100) - t * xp.maximum(xp.log(p), -100)

    def input_grad(self, p, t, pos_weight, gy):  # PyTorch's: gy (p - t) / max(p (1 - p), eps)
        return gy * (p - t) / clamp((1 - p) * p, min=_EPSILON)

    def target_grad(self, p, pos_weight, gy):  # PyTorch's: -logit(p) gy
        with np.errstate(divide="ignore"):  # inf where p is 0 or 1, as PyTorch's, without NumPy's warning
            return -log(p / (1 - p)) * gy


class BinaryCrossEntropyWithLogits(_BinaryCrossEntropy):  # PyTorch's BinaryCrossEntropyWithLogitsBackward0
    def loss(self, xp, x, t, pos_weight):
        """PyTorch's steps and dtypes: log_sigmoid in x's dtype (times the positive weight, in place), and
        (1 - t) * x - log_sigmoid written into (1 - t), in t's dtype."""
        log_sigmoid = _log_sigmoid(xp, x)
        if pos_weight is not None:
            log_weight = _into(lambda w, t: (w - 1) * t + 1, dtypes.result_type(pos_weight, t), pos_weight, t)
            log_sigmoid = _into(operator.mul, x.dtype, log_sigmoid, log_weight)
        return _into(operator.sub, t.dtype, _into(operator.mul, t.dtype, 1 - t, x), log_sigmoid)

    def input_grad(self, x, t, pos_weight, gy):  # PyTorch's: sigmoid(x) - t, or (w+ t + 1 - t) sigmoid(x) - w+ t
        if pos_weight is None:
            return (sigmoid(x) - t) * gy
        weighted = pos_weight * t
        return ((weighted + 1 - t) * sigmoid(x) - weighted) * gy

    def target_grad(self, x, pos_weight, gy):  # PyTorch's: -x, or log_sigmoid(-x) - w+ log_sigmoid(x)
        if pos_weight is None:
            return -x * gy
        return (LogSigmoid()(-x) - LogSigmoid()(x) * pos_weight) * gy


def _checked(op, input, target, weight, pos_weight, reduction):  # noqa: A002 (PyTorch's names)
    """The operands as Variables, after PyTorch's checks."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    input, target = as_variable(input, op), as_variable(target, op)
    if input.shape != target.shape:
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})"
                         if op == "binary_cross_entropy_with_logits" else
                         f"Using a target size ({target.shape}) that is different to the input size ({input.shape}) "
                         "is deprecated. Please ensure they have the same size.")
    extra = [as_variable(w, op) for w in (weight, pos_weight) if w is not None]
    for name, w in (("weight", weight), ("pos_weight", pos_weight)):
        if isinstance(w, Variable) and w.requires_grad and is_grad_enabled():
            raise RuntimeError(f"The function '{op}' is not differentiable with respect to argument '{name}'. This "
                               "input cannot have requires_grad True.")
    if weight is not None:
        _check_broadcast(tuple(input.shape), extra[0])
    return input, target, extra


def binary_cross_entropy(input, target, weight=None, reduction="mean"):  # noqa: A002
    """PyTorch's F.binary_cross_entropy: the loss of probabilities `input` (in [0, 1]) against `target`."""
    input, target, extra = _checked("binary_cross_entropy", input, target, weight, None, reduction)
    if target.dtype != input.dtype:  # PyTorch's kernel takes one dtype, and says which it found
        raise RuntimeError(f"Found dtype {dtypes.torch_name(target.dtype)} but expected "
                           f"{dtypes.torch_name(input.dtype)}")
    if input.dtype.kind != "f":
        raise NotImplementedError(f'"binary_cross_entropy" not implemented for \'{dtypes.torch_name(input.dtype)}\'')
    p = input.data
    if bool(((p < 0) | (p > 1) | (p != p)).any()):
        raise RuntimeError("all elements of input should be between 0 and 1")
    return BinaryCrossEntropy(reduction, weight is not None)(input, target, *extra)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):  # noqa: A002
    """PyTorch's F.binary_cross_entropy_with_logits: the loss of logits `input` against `target`, stably."""
    input, target, extra = _checked("binary_cross_entropy_with_logits", input, target, weight, pos_weight, reduction)
    if input.dtype.kind != "f":
        raise NotImplementedError(f'"log_sigmoid_cpu" not implemented for \'{dtypes.torch_name(input.dtype)}\'')
    if target.dtype.kind != "f":  # PyTorch computes (1 - t) x into t's dtype
        raise RuntimeError(f"result type {dtypes.torch_name(dtypes.result_type(input, target))} can't be cast to the "
                           f"desired output type {dtypes.torch_name(target.dtype)}")
    return BinaryCrossEntropyWithLogits(reduction, weight is not None, pos_weight is not None)(input, target, *extra)
