"""PyTorch's torch.nn.functional: the package's operations under PyTorch's names and signatures.

Each is a thin wrapper around a function of tinypytorch.functions, tinypytorch.classification or
tinypytorch.normalization that
gives it PyTorch's parameter names (`input`, ...) and defaults; none computes anything of its own.
Arguments PyTorch has and the package does not (cross_entropy's weight and label_smoothing, say) are
not accepted: a call that passes one fails with a TypeError that names it, rather than ignoring it.
The convolution and pooling functions (conv2d, unfold, max_pool2d, ...) are tinypytorch.convolution's own,
already in PyTorch's names and signatures.
"""
from tinypytorch import classification, functions, normalization
from tinypytorch.autocast_state import autocast_composite
from tinypytorch.core import as_variable
from tinypytorch.convolution import (  # noqa: F401  (PyTorch's names and signatures already: no wrapper needed)
    adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, conv2d, fold, max_pool2d, unfold,
)

__all__ = ["relu", "sigmoid", "tanh", "softmax", "log_softmax", "linear", "dropout", "mse_loss", "cross_entropy",
           "nll_loss", "layer_norm"]
__all__ += ["conv2d", "unfold", "fold", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"]


def _refuse_inplace(op, inplace):
    if inplace:
        raise ValueError(f"{op}: inplace=True is not supported; use the result")


def relu(input, inplace=False):  # noqa: A002 (PyTorch's names, here and below)
    _refuse_inplace("relu", inplace)
    return functions.relu(input)


def sigmoid(input):  # noqa: A002
    return functions.sigmoid(input)


def tanh(input):  # noqa: A002
    return functions.tanh(input)


def softmax(input, dim=None):  # noqa: A002
    """Probabilities along `dim` (needed: PyTorch's choice of a dim when none is given is deprecated)."""
    return classification.softmax(input, dim)


def log_softmax(input, dim=None):  # noqa: A002
    return classification.log_softmax(input, dim)


def linear(input, weight, bias=None):  # noqa: A002
    """input weight^T + bias, with weight of shape (out_features, in_features); input of shape (N, in_features)."""
    return functions.linear(input, weight, bias)


def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    _refuse_inplace("dropout", inplace)
    return functions.dropout(input, p, training)


def mse_loss(input, target, *, reduction="mean"):  # noqa: A002
    """The squared differences, averaged ("mean"), added ("sum") or each ("none")."""
    input, target = as_variable(input, "mse_loss"), as_variable(target, "mse_loss")
    input, target = autocast_composite("mse_loss", input, target)  # step 59: every reduction in float32
    if input.shape != target.shape:  # PyTorch broadcasts them, with a warning that it is likely a mistake
        raise ValueError(f"mse_loss: shapes {tuple(input.shape)} and {tuple(target.shape)} differ")
    if reduction == "mean":
        return functions.mean_squared_error(input, target)
    if reduction not in ("sum", "none"):
        raise ValueError(f"mse_loss: {reduction!r} is not a valid value for reduction: "
                         "expected 'mean', 'sum' or 'none'")
    squares = functions.square(input - target)
    return squares if reduction == "none" else functions.sum(squares)


def cross_entropy(input, target, *, ignore_index=-100, reduction="mean"):  # noqa: A002
    """log_softmax of the scores `input` (N, C), then the negative log-likelihood of the class indices `target`."""
    return classification.cross_entropy(input, target, reduction, ignore_index)


def nll_loss(input, target, *, ignore_index=-100, reduction="mean"):  # noqa: A002
    """The negative log-likelihood of the class indices `target`, given log-probabilities `input` (N, C)."""
    return classification.nll_loss(input, target, reduction, ignore_index)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):  # noqa: A002
    """Normalize over the trailing dims `normalized_shape` (a tuple or list), then `* weight + bias` (stage 5)."""
    return normalization.layer_norm(input, normalized_shape, weight, bias, eps)
