"""PyTorch's torch.nn.functional: the package's operations under PyTorch's names and signatures.

Each is a thin wrapper around a function of tinypytorch.functions, tinypytorch.classification,
tinypytorch.normalization, tinypytorch.embedding or tinypytorch.binary_cross_entropy that
gives it PyTorch's parameter names (`input`, ...) and defaults; none computes anything of its own.
relu_ is relu written in place through tinypytorch.inplace's machinery (version counter, graph, views).
Arguments PyTorch has and the package does not (cross_entropy's weight and label_smoothing, say) are
not accepted: a call that passes one fails with a TypeError that names it, rather than ignoring it.
The convolution and pooling functions (conv2d, unfold, max_pool2d, ...) are tinypytorch.convolution's own,
already in PyTorch's names and signatures.
"""
from tinypytorch import binary_cross_entropy as bce
from tinypytorch import classification, embedding as lookup, functions, inplace, normalization
from tinypytorch.autocast_state import autocast_composite
from tinypytorch.core import Variable, as_variable
from tinypytorch.grad_mode import is_grad_enabled
from tinypytorch.views import refresh_view
from tinypytorch.convolution import (  # noqa: F401  (PyTorch's names and signatures already: no wrapper needed)
    adaptive_avg_pool2d, adaptive_max_pool2d, avg_pool2d, conv2d, conv_transpose2d, fold, max_pool2d, unfold,
)

__all__ = ["relu", "relu_", "sigmoid", "tanh", "softmax", "log_softmax", "linear", "dropout", "mse_loss",
           "cross_entropy", "nll_loss", "layer_norm", "embedding", "binary_cross_entropy",
           "binary_cross_entropy_with_logits"]
__all__ += ["conv2d", "conv_transpose2d", "unfold", "fold", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"]


def _refuse_inplace(op, inplace):
    if inplace:
        raise ValueError(f"{op}: inplace=True is not supported; use the result")


def relu(input, inplace=False):  # noqa: A002 (PyTorch's names, here and below)
    return relu_(input) if inplace else functions.relu(input)


def relu_(input):  # noqa: A002
    """relu in place: `input` holds max(input, 0) and is returned; its version moves on, and where a gradient can
    flow the operation is recorded as its out-of-place twin and `input` takes the result's place in the graph
    (a view moves its base), as tinypytorch.inplace does for add_ and the others."""
    if not isinstance(input, Variable):
        raise TypeError(f"relu_(): argument 'input' must be Tensor, not {type(input).__name__}")
    inplace.check_writable("relu_", input)
    inplace.refuse_tangents("relu_", input)
    if not (is_grad_enabled() and input.requires_grad):
        inplace.write("relu_", input, functions.relu(Variable(input.data, requires_grad=False)).data)
        return input
    if input.view_record is not None:  # a view whose base changed is made again first
        refresh_view(input)
    # relu saves its output, a new array, not the input's: writing into the input leaves what it saved intact
    return inplace.record("relu_", input, functions.relu(inplace.alias(input)))


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
    input, target = autocast_composite("mse_loss", input, target)  # step 61: every reduction in float32
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


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    """The rows of `weight` (num_embeddings, embedding_dim) that the integer tensor `input` picks; padding_idx's row
    gets no gradient."""
    return lookup.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


def binary_cross_entropy(input, target, weight=None, *, reduction="mean"):  # noqa: A002
    """-(t log p + (1 - t) log(1 - p)) of probabilities `input` and targets in [0, 1], each log clamped at -100."""
    return bce.binary_cross_entropy(input, target, weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, *, reduction="mean", pos_weight=None):  # noqa: A002
    """binary_cross_entropy of sigmoid(input), computed from the logits `input` without forming the sigmoid."""
    return bce.binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight)
