"""One table of every differentiable operation of the package, each with its PyTorch twin.

Tests that must hold for every operation (what it saves for backward, step 35; its
derivatives and dtypes) iterate over OPERATIONS. `test_every_function_of_the_package_is_in_the_table`
fails when a Function subclass is added to the package without a row here.

A row: the tinypytorch expression and the torch one (each takes one argument per operand),
the operands' shapes, the interval each operand is drawn from (the operation's domain),
and the Function classes the expression records. Gradient functions that only a backward
pass creates (GetItemGrad, ViewScatter) are listed with the row that exercises them.
"""
import dataclasses
import warnings

import numpy as np
import torch
import torch.nn.functional as TF

import tinypytorch
from tinypytorch import Function
from tinypytorch import classification as C
from tinypytorch import convolution as CV
from tinypytorch import functions as F
from tinypytorch import inplace
from tinypytorch import linear_algebra as LA
from tinypytorch import structure as ST
from tinypytorch.core import Add, Clone, Div, Mul, Neg, Pow, Reciprocal, Rsub, Sub
from tinypytorch.normalization import NativeLayerNorm


_SPREAD = (0.0, 5.0, 10.0)


def _spread(a):
    """(0, 5, 10) on a's device and in its dtype: added to a's rows, it keeps each slice's values apart."""
    if isinstance(a, torch.Tensor):
        return torch.tensor(_SPREAD, dtype=a.dtype, device=a.device)
    return tinypytorch.cuda.get_array_module(a.data).asarray(_SPREAD, dtype=a.dtype)


def _torch_layer_norm_composed(a, w, b, eps=1e-5):
    z = a + _spread(a)
    centred = z - z.mean(-1, keepdim=True)
    return centred / torch.sqrt((centred * centred).mean(-1, keepdim=True) + eps) * w + b


@dataclasses.dataclass(frozen=True)
class Operation:
    name: str
    ours: object
    theirs: object
    shapes: tuple
    functions: tuple
    domain: tuple = (-2.0, 2.0)  # every operand drawn from [low, high]
    # For linear: PyTorch saves the weight's transpose (a view of the same memory), so the
    # saved shapes are compared with that one swapped.
    torch_saves_transposed: tuple = ()
    # The torch twin when the operands live on a GPU (or the stand-in), where it differs: dropout's mask
    # comes from the device's generator there.
    theirs_on_device: object = None
    # The torch twin for derivatives, where torch's own node's are wrong: its layer_norm's third derivatives fail
    # torch.autograd.gradcheck (2.13), so layer_norm is compared with the same formula written in torch's operations.
    theirs_derivatives: object = None
    # Shapes of tensors torch saves whose values its backward never reads, only their size (max and average
    # pooling's input): the package keeps the size, not the tensor.
    torch_saves_unused: tuple = ()
    # The torch twin for what is saved, where the package composes an operation that torch computes as one node:
    # conv2d is unfold, a matrix product and a reshape here, so it saves what the product needs (the unfolded input
    # and the weight as a matrix), where torch's convolution saves the input and the weight. The twin is the same
    # composition in torch; torch folds a matrix product of a stack into one of two matrices, and the twin multiplies
    # each group of channels apart, so the two save as many elements in all, in other shapes and pieces: the count
    # is compared.
    theirs_saved: object = None


def _inplace_view_mul(x, w):
    """(x * 1) viewed as its first row, multiplied by w in place: the base's gradient goes through ViewScatter."""
    base = x * 1.0
    row = base[0]
    row.mul_(w)
    return base


def _torch_inplace_view_mul(x, w):
    base = x * 1.0
    row = base[0]
    row.mul_(w)
    return base


def _inplace_zero(x):
    y = x * 2.0
    y.zero_()
    return y + x


def _torch_inplace_zero(x):
    y = x * 2.0
    y.zero_()
    return y + x


def _setitem(x, w):
    """x[0] = w of a non-leaf, in place, then used with x: x's gradient skips the overwritten row."""
    y = x * 1.0
    y[0] = w * 2.0
    return y * x


_torch_setitem = _setitem  # the same code runs on torch tensors


def _dropout(a):
    """Dropout with p = 0.5, drawing its mask from the default generator seeded with 0."""
    tinypytorch.manual_seed(0)
    return F.dropout(a, 0.5)


def _torch_dropout(a):
    """The same mask, drawn as the package draws it (keep where a uniform draw >= p), applied in torch."""
    keep = np.random.Generator(np.random.PCG64(0)).random(tuple(a.shape)) >= 0.5
    return a * torch.tensor(keep) * 2.0


def _zero_at(a):
    """A constant, a's value at [0, 1] and 0 elsewhere, on a's device: a - _zero_at(a) has an element that is exactly
    0 and still depends on a (its derivative and tangent are not 0)."""
    if isinstance(a, torch.Tensor):
        c = torch.zeros_like(a.detach())
        c[0, 1] = a.detach()[0, 1]
        return c
    c = tinypytorch.cuda.get_array_module(a.data).zeros_like(a.data)
    c[0, 1] = a.data[0, 1]
    return c


def _torch_dropout_device(a):
    """The mask as the device's generator draws it (seeded with 0; tests/test_step48.py checks that generator
    against SplitMix64 written out), applied in torch."""
    keep = tinypytorch.random.CounterGenerator(0).random(tuple(a.shape), np) >= 0.5
    return a * torch.tensor(keep) * 2.0


_UNFOLD = {"kernel_size": (2, 3), "dilation": (1, 2), "padding": 1, "stride": (2, 1)}  # of (4, 5) images: 3 x 3 windows
_CONV = {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)}  # 3 x 2 kernels on (5, 6) images: a 3 x 4 output


def _torch_product(w, columns):
    """w (O, K) times each (K, L) matrix of columns (N, K, L), as one product of two matrices: torch.mm saves each
    operand when the other needs a gradient, as the package's matmul does (torch.matmul of a stack may save the
    matrix copied for each sample, depending on which operand needs a gradient)."""
    n, k, blocks = columns.shape
    product = torch.mm(w, columns.transpose(0, 1).reshape(k, n * blocks))
    return product.reshape(w.shape[0], n, blocks).transpose(0, 1)


def _torch_conv2d_composed(a, w, b):
    """conv2d with _CONV as the package computes it, in torch's operations: unfold, a matrix product, a reshape."""
    columns = TF.unfold(a, w.shape[2:], dilation=_CONV["dilation"], padding=_CONV["padding"], stride=_CONV["stride"])
    y = _torch_product(w.reshape(w.shape[0], -1), columns).reshape(a.shape[0], w.shape[0], 3, 4)
    return y + b.reshape(-1, 1, 1)


def _torch_conv2d_same_groups_composed(a, w, b):
    """The grouped row's conv2d (two groups, "same" padding, dilation (2, 1)) in torch's operations: the padding
    d (k - 1) = (4, 1) in all, the odd cell behind, then unfold and one matrix product per group."""
    columns = TF.unfold(TF.pad(a, (0, 1, 2, 2)), w.shape[2:], dilation=(2, 1))
    half = columns.shape[1] // 2
    products = [_torch_product(w[3 * g:3 * g + 3].reshape(3, -1), columns[:, half * g:half * (g + 1)]) for g in (0, 1)]
    return torch.cat(products, 1).reshape(a.shape[0], 6, 5, 6) + b.reshape(-1, 1, 1)


_TRANSPOSED = {"stride": 2, "padding": 1, "output_padding": (1, 0), "groups": 2}  # (3, 4) images -> (6, 6)


def _torch_conv_transpose2d_composed(a, w, b):
    """conv_transpose2d with _TRANSPOSED as the package computes it, in torch's operations: for each group, the
    weight's transpose times the input's pixels as columns (torch.mm, as _torch_product), then fold and the bias."""
    n, blocks = a.shape[0], a.shape[2] * a.shape[3]
    columns = []
    for g in (0, 1):
        w_g = w[2 * g:2 * g + 2].reshape(2, -1)  # (C_in / G, C_out / G * kh * kw)
        x_g = a[:, 2 * g:2 * g + 2].reshape(n, 2, blocks).transpose(0, 1).reshape(2, n * blocks)
        columns.append(torch.mm(w_g.t(), x_g).reshape(-1, n, blocks).transpose(0, 1))
    folded = TF.fold(torch.cat(columns, 1), (6, 6), w.shape[2:], stride=2, padding=1)
    return folded + b.reshape(-1, 1, 1)


def _torch_conv2d_same_groups(a, w, b):
    with warnings.catch_warnings():  # torch's note that "same" with an even kernel pads a copy of the input
        warnings.filterwarnings("ignore", "Using padding='same'")
        return TF.conv2d(a, w, b, padding="same", dilation=(2, 1), groups=2)


_SCATTER_INDEX = np.array([[0, 2, 1, 3], [2, 0, 3, 1]])  # no position twice along either dim: which write wins is
#                                                             unspecified in torch


def _scatter_index(a):
    """_SCATTER_INDEX on a's device (torch's scatter wants the index where the data is)."""
    if isinstance(a, torch.Tensor):
        return torch.tensor(_SCATTER_INDEX, device=a.device)
    return tinypytorch.Variable(tinypytorch.cuda.get_array_module(a.data).asarray(_SCATTER_INDEX), requires_grad=False)


# Functions that came with their own tests against torch (tests/test_binary_cross_entropy.py, tests/test_embedding.py)
# and have no row here yet, so the table's checks (saved tensors, formulas run on arrays, forward mode) do not cover
# them; a row added removes its name (test_step35 holds the list to the functions still without one)
NOT_IN_THE_TABLE_YET = {"BinaryCrossEntropy", "BinaryCrossEntropyWithLogits", "Embedding", "LogSigmoid",
                        "Svd"}  # (svd: tests/test_tutorial_names_structure.py; its U and V have no sign to compare)

OPERATIONS = [
    Operation("add", lambda a, b: a + b, lambda a, b: a + b, ((2, 3), (2, 3)), (Add,)),
    Operation("add, broadcast", lambda a, b: a + b, lambda a, b: a + b, ((2, 3), (3,)), (Add, F.SumTo)),
    Operation("sub", lambda a, b: a - b, lambda a, b: a - b, ((2, 3), (2, 3)), (Sub,)),
    Operation("rsub, broadcast", tinypytorch.rsub, torch.rsub, ((2, 3), (3,)), (Rsub, F.SumTo)),
    Operation("mul", lambda a, b: a * b, lambda a, b: a * b, ((2, 3), (2, 3)), (Mul,)),
    Operation("mul, broadcast", lambda a, b: a * b, lambda a, b: a * b, ((2, 1), (1, 3)), (Mul, F.SumTo)),
    Operation("div", lambda a, b: a / b, lambda a, b: a / b, ((2, 3), (2, 3)), (Div,), domain=(0.5, 2.0)),
    Operation("number / x", lambda a: 2.5 / a, lambda a: 2.5 / a, ((2, 3),), (Reciprocal, Mul), domain=(0.5, 2.0)),
    Operation("neg", lambda a: -a, lambda a: -a, ((2, 3),), (Neg,)),
    Operation("pow 3", lambda a: a**3, lambda a: a**3, ((2, 3),), (Pow,)),
    Operation("pow -1.5", lambda a: a**-1.5, lambda a: a**-1.5, ((2, 3),), (Pow,), domain=(0.5, 2.0)),
    Operation("square", tinypytorch.square, torch.square, ((2, 3),), (F.Square,)),
    Operation("exp", tinypytorch.exp, torch.exp, ((2, 3),), (F.Exp,)),
    Operation("log", tinypytorch.log, torch.log, ((2, 3),), (F.Log,), domain=(0.5, 2.0)),
    Operation("sin", tinypytorch.sin, torch.sin, ((2, 3),), (F.Sin,)),
    Operation("cos", tinypytorch.cos, torch.cos, ((2, 3),), (F.Cos,)),
    Operation("tanh", tinypytorch.tanh, torch.tanh, ((2, 3),), (F.Tanh,)),
    Operation("sigmoid", tinypytorch.sigmoid, torch.sigmoid, ((2, 3),), (F.Sigmoid,)),
    Operation("relu", tinypytorch.relu, torch.relu, ((2, 3),), (F.ReLU,)),
    Operation("sum", lambda a: a.sum(), lambda a: a.sum(), ((2, 3),), (F.Sum,)),
    Operation("sum axis 0", lambda a: a.sum(axis=0), lambda a: a.sum(dim=0), ((2, 3),), (F.Sum,)),
    Operation("reshape", lambda a: a.reshape(3, 2), lambda a: a.reshape(3, 2), ((2, 3),), (F.Reshape,)),
    Operation("transpose", lambda a: a.transpose(0, 1), lambda a: a.transpose(0, 1), ((2, 3),), (F.Transpose,)),
    Operation("broadcast_to", lambda a: tinypytorch.broadcast_to(a, (4, 2, 3)), lambda a: a.expand(4, 2, 3),
              ((2, 3),), (F.BroadcastTo,)),
    Operation("sum_to", lambda a: tinypytorch.sum_to(a, (1, 3)), lambda a: a.sum(0, keepdim=True), ((2, 3),),
              (F.SumTo,)),
    Operation("matmul", lambda a, b: a @ b, lambda a, b: a @ b, ((2, 3), (3, 4)), (F.MatMul,)),
    Operation("linear", tinypytorch.linear, torch.nn.functional.linear, ((2, 3), (4, 3), (4,)),
              (F.LinearFunction,), torch_saves_transposed=((3, 4),)),
    Operation("linear, no bias", tinypytorch.linear, torch.nn.functional.linear, ((2, 3), (4, 3)),
              (F.LinearFunction,), torch_saves_transposed=((3, 4),)),
    Operation("x[0:1, 1:]", lambda a: a[0:1, 1:], lambda a: a[0:1, 1:], ((2, 3),), (F.GetItem, F.GetItemGrad)),
    Operation("x[[0, 0, 1]]", lambda a: a[[0, 0, 1]], lambda a: a[[0, 0, 1]], ((2, 3),),
              (F.GetItem, F.GetItemGrad)),
    Operation("mean_squared_error", tinypytorch.mean_squared_error, torch.nn.functional.mse_loss,
              ((2, 3), (2, 3)), (F.MeanSquaredError,)),
    # Shape operations are linear: their second derivative is zero, and the backward of their backward
    # (GetItemGrad's, SumTo's, ...) runs only when the gradient arriving at them depends on the inputs.
    # Cubing the result makes it so, and the third derivatives then go through those backward methods.
    Operation("x[0:1, 1:] cubed", lambda a: a[0:1, 1:] ** 3, lambda a: a[0:1, 1:] ** 3, ((2, 3),),
              (F.GetItem, F.GetItemGrad, Pow)),
    Operation("x[[0, 0, 1]] cubed", lambda a: a[[0, 0, 1]] ** 3, lambda a: a[[0, 0, 1]] ** 3, ((2, 3),),
              (F.GetItem, F.GetItemGrad, Pow)),
    Operation("reshape cubed", lambda a: a.reshape(3, 2) ** 3, lambda a: a.reshape(3, 2) ** 3, ((2, 3),),
              (F.Reshape, Pow)),
    Operation("transpose cubed", lambda a: a.transpose(0, 1) ** 3, lambda a: a.transpose(0, 1) ** 3, ((2, 3),),
              (F.Transpose, Pow)),
    Operation("sum axis 0 cubed", lambda a: a.sum(axis=0) ** 3, lambda a: a.sum(dim=0) ** 3, ((2, 3),),
              (F.Sum, Pow)),
    Operation("broadcast_to cubed", lambda a: tinypytorch.broadcast_to(a, (4, 2, 3)) ** 3,
              lambda a: a.expand(4, 2, 3) ** 3, ((2, 3),), (F.BroadcastTo, Pow)),
    Operation("sum_to cubed", lambda a: tinypytorch.sum_to(a, (1, 3)) ** 3, lambda a: a.sum(0, keepdim=True) ** 3,
              ((2, 3),), (F.SumTo, Pow)),
    Operation("dropout", _dropout, _torch_dropout, ((4, 5),), (F.Dropout,), theirs_on_device=_torch_dropout_device),
    Operation("dropout cubed", lambda a: _dropout(a) ** 3, lambda a: _torch_dropout(a) ** 3, ((4, 5),),
              (F.Dropout, Pow), theirs_on_device=lambda a: _torch_dropout_device(a) ** 3),
    Operation("concatenate", lambda a, b: tinypytorch.concatenate([a, b], axis=1),
              lambda a, b: torch.cat([a, b], dim=1), ((2, 3), (2, 2)), (F.Concatenate,)),
    Operation("concatenate cubed", lambda a, b: tinypytorch.concatenate([a, b]) ** 3,
              lambda a, b: torch.cat([a, b]) ** 3, ((2, 3), (1, 3)), (F.Concatenate, Pow)),
    Operation("astype float32", lambda a: F.astype(a, np.float32) * 3.0, lambda a: a.to(torch.float32) * 3.0,
              ((2, 3),), (F.Cast,)),
    Operation("zero_ of a non-leaf", _inplace_zero, _torch_inplace_zero, ((2, 3),), (inplace.Zero,)),
    Operation("mul_ of a view", _inplace_view_mul, _torch_inplace_view_mul, ((2, 3), (3,)),
              (inplace.ViewScatter, Mul)),
    Operation("x[0] = w of a non-leaf", _setitem, _torch_setitem, ((2, 3), (3,)), (inplace.SetItem, Mul)),
    Operation("clone", lambda a: a.clone(), lambda a: a.clone(), ((2, 3),), (Clone,)),
    # Each slice spread apart (+0, +5, +10): where a slice is nearly constant, layer_norm's derivatives grow as
    # powers of 1/sqrt(eps) and the third ones are rounding error in both frameworks.
    Operation("layer_norm", lambda a, w, b: tinypytorch.nn.functional.layer_norm(a + _spread(a), (3,), w, b),
              lambda a, w, b: torch.nn.functional.layer_norm(a + _spread(a), (3,), w, b),
              ((2, 3), (3,), (3,)), (NativeLayerNorm, Add), theirs_derivatives=_torch_layer_norm_composed),
    # step 50: reductions along an axis, softmax and cross-entropy
    Operation("mean", lambda a: F.mean(a), lambda a: a.mean(), ((2, 3),), (F.Mean,)),
    Operation("mean axis 1 keepdims cubed", lambda a: F.mean(a, axis=1, keepdims=True) ** 3,
              lambda a: a.mean(1, keepdim=True) ** 3, ((2, 3),), (F.Mean, Pow)),
    Operation("max", lambda a: F.max(a), lambda a: torch.max(a), ((2, 3),), (F.Max,)),
    Operation("max axis 0 cubed", lambda a: F.max(a, axis=0) ** 3, lambda a: a.amax(0) ** 3, ((2, 3),),
              (F.Max, Pow)),
    Operation("logsumexp axis 1", lambda a: F.logsumexp(a, axis=1), lambda a: torch.logsumexp(a, 1), ((2, 3),),
              (F.LogSumExp,)),
    Operation("logsumexp keepdims", lambda a: F.logsumexp(a, axis=(0, 1), keepdims=True),
              lambda a: torch.logsumexp(a, (0, 1), keepdim=True), ((2, 3),), (F.LogSumExp,)),
    Operation("softmax axis 1", lambda a: C.softmax(a, axis=1), lambda a: torch.softmax(a, 1), ((2, 3),),
              (C.Softmax,)),
    Operation("softmax axis 0", lambda a: C.softmax(a, axis=0), lambda a: torch.softmax(a, 0), ((2, 3),),
              (C.Softmax,)),
    Operation("log_softmax axis 1", lambda a: C.log_softmax(a, axis=1), lambda a: torch.log_softmax(a, 1),
              ((2, 3),), (C.LogSoftmax,)),
    Operation("cross_entropy", lambda a: C.cross_entropy(a, np.array([2, 0, 1])),
              lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([2, 0, 1])), ((3, 4),),
              (C.LogSoftmax, C.NLLLoss, F.GetItemGrad)),
    Operation("cross_entropy, sum, a row ignored", lambda a: C.cross_entropy(a, np.array([2, -1, 1]), "sum", -1),
              lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([2, -1, 1]), reduction="sum",
                                                          ignore_index=-1), ((3, 4),),
              (C.LogSoftmax, C.NLLLoss, F.GetItemGrad)),
    Operation("cross_entropy, none", lambda a: C.cross_entropy(a, np.array([3, 1]), "none"),
              lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([3, 1]), reduction="none"), ((2, 4),),
              (C.LogSoftmax, C.NLLLoss, F.GetItemGrad)),
    # the PyTorch surface: PyTorch's spellings (dim=, keepdim=) and the operations its tensor methods need
    Operation("sum dim (0, -1) keepdim", lambda a: F.sum(a, dim=(0, -1), keepdim=True),
              lambda a: a.sum((0, -1), keepdim=True), ((2, 3, 2),), (F.Sum,)),
    Operation("mean dim -1", lambda a: F.mean(a, -1), lambda a: a.mean(-1), ((2, 3),), (F.Mean,)),
    Operation("amax dim -1", lambda a: F.amax(a, -1), lambda a: a.amax(-1), ((2, 3),), (F.Max,)),
    Operation("amin dim (0, 1) keepdim cubed", lambda a: F.amin(a, (0, 1), keepdim=True) ** 3,
              lambda a: a.amin((0, 1), keepdim=True) ** 3, ((2, 3),), (F.Min, Pow)),
    Operation("min", lambda a: F.min(a), lambda a: torch.min(a), ((2, 3),), (F.Min,)),
    Operation("max dim 1, values", lambda a: F.max(a, 1).values, lambda a: torch.max(a, 1).values, ((2, 3),),
              (F.TakeAlongDim, F.GetItemGrad)),
    Operation("min dim 0 keepdim, values cubed", lambda a: F.min(a, 0, keepdim=True).values ** 3,
              lambda a: torch.min(a, 0, keepdim=True).values ** 3, ((2, 3),), (F.TakeAlongDim, F.GetItemGrad, Pow)),
    Operation("x at argmax dim 1", lambda a: a[np.arange(2), F.argmax(a, dim=1).data],
              lambda a: a[torch.arange(2), torch.argmax(a, dim=1)], ((2, 3),), (F.GetItem, F.GetItemGrad)),
    Operation("x at argmin dim 0 keepdim", lambda a: a[F.argmin(a, 0, keepdim=True).data, np.arange(3)],
              lambda a: a[torch.argmin(a, 0, keepdim=True), torch.arange(3)], ((2, 3),), (F.GetItem, F.GetItemGrad)),
    Operation("logsumexp dim 1 keepdim", lambda a: F.logsumexp(a, 1, keepdim=True),
              lambda a: torch.logsumexp(a, 1, keepdim=True), ((2, 3),), (F.LogSumExp,)),
    Operation("softmax dim -1", lambda a: C.softmax(a, dim=-1), lambda a: torch.softmax(a, -1), ((2, 3),),
              (C.Softmax,)),
    Operation("log_softmax dim 0", lambda a: C.log_softmax(a, 0), lambda a: torch.log_softmax(a, 0), ((2, 3),),
              (C.LogSoftmax,)),
    Operation("nll_loss", lambda a: C.nll_loss(a, np.array([2, 0, 1])),
              lambda a: torch.nn.functional.nll_loss(a, torch.tensor([2, 0, 1])), ((3, 4),),
              (C.NLLLoss, F.GetItemGrad)),
    Operation("abs", F.abs, torch.abs, ((2, 3),), (F.Abs,)),
    # (cubed: sqrt(x)^2 = x makes the tests' second derivative exactly 0 in torch, and 1e-19 here, as Div's double
    # backward rounds otherwise)
    Operation("sqrt cubed", lambda a: F.sqrt(a) ** 3, lambda a: torch.sqrt(a) ** 3, ((2, 3),), (F.Sqrt, Pow),
              domain=(0.5, 2.0)),
    Operation("clamp(-1, 1)", lambda a: F.clamp(a, -1, 1), lambda a: torch.clamp(a, -1, 1), ((2, 3),), (F.Clamp,)),
    Operation("clamp min 0.5 cubed", lambda a: F.clamp(a, min=0.5) ** 3, lambda a: torch.clamp(a, min=0.5) ** 3,
              ((2, 3),), (F.Clamp, Pow)),
    # The norm's second derivative at x = 0 is NaN in PyTorch (0 here): the domains leave 0 out.
    Operation("norm", lambda a: F.norm(a), lambda a: torch.norm(a), ((2, 3),), (F.Norm,), domain=(0.5, 2.0)),
    Operation("norm dim 1 keepdim cubed", lambda a: F.norm(a, dim=1, keepdim=True) ** 3,
              lambda a: torch.norm(a, dim=1, keepdim=True) ** 3, ((2, 3),), (F.Norm, Pow), domain=(-2.0, -0.5)),
    Operation("unsqueeze -1 cubed", lambda a: F.unsqueeze(a, -1) ** 3, lambda a: a.unsqueeze(-1) ** 3, ((2, 3),),
              (F.Unsqueeze, Pow)),
    Operation("squeeze", F.squeeze, torch.squeeze, ((2, 1, 3),), (F.Reshape,)),
    Operation("squeeze dim 1", lambda a: F.squeeze(a, 1), lambda a: a.squeeze(1), ((2, 1, 3),), (F.Reshape,)),
    Operation("flatten 1", lambda a: F.flatten(a, 1), lambda a: a.flatten(1), ((2, 3, 2),), (F.Reshape,)),
    Operation("expand cubed", lambda a: F.expand(a, 4, -1, 3) ** 3, lambda a: a.expand(4, -1, 3) ** 3, ((2, 1),),
              (F.BroadcastTo, Pow)),
    Operation("t cubed", lambda a: F.t(a) ** 3, lambda a: a.t() ** 3, ((2, 3),), (F.Transpose, Pow)),
    Operation("permute", lambda a: F.permute(a, (2, 0, 1)), lambda a: a.permute(2, 0, 1), ((2, 3, 2),),
              (F.Transpose,)),
    # step 59: the element-wise operations of two tensors that PyTorch promotes as it promotes +, -, *, /
    Operation("pow, a tensor exponent", lambda a, b: a ** b, lambda a, b: a ** b, ((2, 3), (3,)),
              (F.PowTensor, F.SumTo), domain=(0.5, 2.0)),
    Operation("pow, a number base", lambda a: 2.0 ** a, lambda a: 2.0 ** a, ((2, 3),), (F.PowTensor,)),
    Operation("maximum", F.maximum, torch.maximum, ((2, 3), (2, 3)), (F.Maximum,)),
    Operation("minimum, broadcast cubed", lambda a, b: F.minimum(a, b) ** 3, lambda a, b: torch.minimum(a, b) ** 3,
              ((2, 3), (3,)), (F.Minimum, F.SumTo, Pow)),
    Operation("where", lambda a, b: F.where(a.data > 0, a, b), lambda a, b: torch.where(a > 0, a, b),
              ((2, 3), (2, 3)), (F.Where,)),
    Operation("remainder", lambda a, b: a % b, lambda a, b: a % b, ((2, 3), (2, 3)), (F.Remainder,),
              domain=(0.5, 2.0)),
    # convolution and pooling (tinypytorch.convolution). unfold and fold are linear, each the other's backward: cubed
    # as well, so that the third derivatives go through the backward of the backward.
    Operation("unfold", lambda a: CV.unfold(a, **_UNFOLD), lambda a: TF.unfold(a, **_UNFOLD), ((2, 2, 4, 5),),
              (CV.Unfold,)),
    Operation("unfold cubed", lambda a: CV.unfold(a, **_UNFOLD) ** 3, lambda a: TF.unfold(a, **_UNFOLD) ** 3,
              ((2, 2, 4, 5),), (CV.Unfold, CV.Fold, Pow)),
    Operation("fold", lambda a: CV.fold(a, (4, 5), **_UNFOLD), lambda a: TF.fold(a, (4, 5), **_UNFOLD), ((2, 12, 9),),
              (CV.Fold,)),
    Operation("fold cubed", lambda a: CV.fold(a, (4, 5), **_UNFOLD) ** 3, lambda a: TF.fold(a, (4, 5), **_UNFOLD) ** 3,
              ((2, 12, 9),), (CV.Fold, CV.Unfold, Pow)),
    Operation("conv2d", lambda a, w, b: CV.conv2d(a, w, b, **_CONV), lambda a, w, b: TF.conv2d(a, w, b, **_CONV),
              ((2, 3, 5, 6), (4, 3, 3, 2), (4,)), (CV.Unfold, CV.Fold, F.Reshape, F.MatMul, Add),
              theirs_saved=_torch_conv2d_composed),
    Operation("conv2d, 2 groups, padding same",
              lambda a, w, b: CV.conv2d(a, w, b, padding="same", dilation=(2, 1), groups=2),
              _torch_conv2d_same_groups,
              ((2, 4, 5, 6), (6, 2, 3, 2), (6,)), (CV.Unfold, CV.Fold, F.Reshape, F.MatMul, Add),
              theirs_saved=_torch_conv2d_same_groups_composed),
    Operation("conv_transpose2d, 2 groups, stride 2", lambda a, w, b: CV.conv_transpose2d(a, w, b, **_TRANSPOSED),
              lambda a, w, b: TF.conv_transpose2d(a, w, b, **_TRANSPOSED), ((2, 4, 3, 4), (4, 3, 3, 2), (6,)),
              (F.Reshape, F.Transpose, F.MatMul, CV.Fold, CV.Unfold, Add),
              theirs_saved=_torch_conv_transpose2d_composed,
              # torch 2.13's third derivative of conv_transpose2d with an output_padding raises ("output_padding is
              # not supported for non-transposed convolutions"): the composition stands in, as for layer_norm
              theirs_derivatives=_torch_conv_transpose2d_composed),
    Operation("max_pool2d", lambda a: CV.max_pool2d(a, 3, 2, 1, (1, 2), ceil_mode=True),
              lambda a: TF.max_pool2d(a, 3, 2, 1, (1, 2), ceil_mode=True), ((2, 3, 5, 6),), (CV.MaxPool2d,),
              torch_saves_unused=((2, 3, 5, 6),)),
    Operation("max_pool2d cubed", lambda a: CV.max_pool2d(a, 2, 1) ** 3, lambda a: TF.max_pool2d(a, 2, 1) ** 3,
              ((2, 3, 4, 5),), (CV.MaxPool2d, F.GetItemGrad, Pow), torch_saves_unused=((2, 3, 4, 5),)),
    Operation("avg_pool2d", lambda a: CV.avg_pool2d(a, (3, 2), (2, 1), 1, ceil_mode=True, count_include_pad=False),
              lambda a: TF.avg_pool2d(a, (3, 2), (2, 1), 1, ceil_mode=True, count_include_pad=False),
              ((2, 3, 5, 6),), (CV.AvgPool2d,), torch_saves_unused=((2, 3, 5, 6),)),
    Operation("avg_pool2d cubed", lambda a: CV.avg_pool2d(a, 3, 2, 1, ceil_mode=True) ** 3,
              lambda a: TF.avg_pool2d(a, 3, 2, 1, ceil_mode=True) ** 3, ((2, 3, 6, 5),), (CV.AvgPool2d, CV.Fold, Pow),
              torch_saves_unused=((2, 3, 6, 5),)),
    Operation("adaptive_avg_pool2d cubed", lambda a: CV.adaptive_avg_pool2d(a, (3, 4)) ** 3,
              lambda a: TF.adaptive_avg_pool2d(a, (3, 4)) ** 3, ((2, 3, 5, 7),), (CV.AvgPool2d, CV.Fold, Pow),
              torch_saves_unused=((2, 3, 5, 7),)),
    Operation("adaptive_max_pool2d", lambda a: CV.adaptive_max_pool2d(a, (3, 4)),
              lambda a: TF.adaptive_max_pool2d(a, (3, 4)), ((2, 3, 5, 7),), (CV.MaxPool2d, F.GetItemGrad),
              torch_saves_unused=((2, 3, 5, 7),)),
    # PyTorch's stack, cross, einsum and scatter (tinypytorch.structure, tinypytorch.linear_algebra); einsum records the
    # operations PyTorch's einsum is made of, its batched matrix product under torch's name, BmmBackward0
    Operation("stack dim -1", lambda a, b: ST.stack([a, b], dim=-1), lambda a, b: torch.stack([a, b], dim=-1),
              ((2, 3), (2, 3)), (ST.Stack, F.GetItemGrad)),
    Operation("cross dim 1, broadcast", lambda a, b: LA.cross(a, b, dim=1), lambda a, b: torch.cross(a, b, dim=1),
              ((1, 3), (4, 3)), (LA.Cross, F.SumTo)),
    Operation("einsum ij,jk->ik", lambda a, b: LA.einsum("ij,jk->ik", a, b),
              lambda a, b: torch.einsum("ij,jk->ik", a, b), ((2, 3), (3, 4)),
              (F.MatMul, F.Reshape, F.Transpose, F.Unsqueeze)),
    Operation("einsum Naf,Mbf->NMab", lambda a, b: LA.einsum("Naf,Mbf->NMab", a, b),
              lambda a, b: torch.einsum("Naf,Mbf->NMab", a, b), ((2, 3, 4), (2, 2, 4)),
              (F.MatMul, F.Reshape, F.Transpose, F.Unsqueeze)),
    Operation("scatter", lambda a, b: ST.scatter(a, 1, _scatter_index(a), b),
              lambda a, b: torch.scatter(a, 1, _scatter_index(a), b), ((2, 5), (2, 4)), (ST.Scatter, F.GetItemGrad)),
    Operation("scatter value cubed", lambda a: ST.scatter(a, 0, _scatter_index(a), 1.5) ** 3,
              lambda a: torch.scatter(a, 0, _scatter_index(a), 1.5) ** 3, ((4, 4),), (ST.Scatter, Pow)),
    # more of PyTorch's surface (no step). ceil and floor have derivative 0: times x, so that a derivative is there
    # to compare (and a tangent: forward mode's test wants one that is not 0).
    Operation("asin", F.asin, torch.asin, ((2, 3),), (F.Asin,), domain=(-0.9, 0.9)),
    Operation("x * floor(x)", lambda a: a * F.floor(a), lambda a: a * torch.floor(a), ((2, 3),), (F.Floor, Mul)),
    Operation("ceil(x) * x", lambda a: F.ceil(a) * a, lambda a: torch.ceil(a) * a, ((2, 3),), (F.Ceil, Mul)),
    # (away from 0: the second derivative divides by x twice, as Div's does, and x * x of 1e-163 underflows)
    Operation("prod", F.prod, torch.prod, ((2, 3),), (F.Prod,), domain=(0.5, 2.0)),
    Operation("prod dim 1 keepdim cubed", lambda a: F.prod(a, 1, keepdim=True) ** 3,
              lambda a: torch.prod(a, 1, keepdim=True) ** 3, ((2, 3),), (F.Prod, Pow), domain=(-2.0, -0.5)),
    # an element that is 0: its derivative is the product of the others, which y / x cannot give (0 / 0)
    Operation("prod, a zero", lambda a: F.prod(a - _zero_at(a)), lambda a: torch.prod(a - _zero_at(a)), ((2, 3),),
              (F.Prod, Sub, F.GetItem, F.Concatenate), domain=(0.5, 2.0)),
    Operation("prod dim 0, a zero", lambda a: F.prod(a - _zero_at(a), 0), lambda a: torch.prod(a - _zero_at(a), 0),
              ((2, 3),), (F.Prod, Sub, F.GetItem, F.Concatenate), domain=(0.5, 2.0)),
    Operation("var", F.var, torch.var, ((2, 3),), (F.Var,)),
    Operation("var dim 1 keepdim, correction 0, cubed", lambda a: F.var(a, 1, keepdim=True, correction=0) ** 3,
              lambda a: torch.var(a, 1, keepdim=True, correction=0) ** 3, ((2, 3),), (F.Var, Pow)),
    # (away from 0: std's derivatives divide by std once per order, and a std of 1e-112 overflows the third; the
    # magnitudes that matter, and std = 0 itself, are drawn all the same: constant rows)
    Operation("std", F.std, torch.std, ((2, 3),), (F.Std,), domain=(0.5, 2.0)),
    Operation("std dim 0, unbiased=False, cubed", lambda a: F.std(a, 0, False) ** 3,
              lambda a: torch.std(a, 0, False) ** 3, ((2, 3),), (F.Std, Pow), domain=(0.5, 2.0)),
    Operation("movedim cubed", lambda a: F.movedim(a, (0, 2), (2, 1)) ** 3,
              lambda a: torch.movedim(a, (0, 2), (2, 1)) ** 3, ((2, 3, 2),), (F.Transpose, Pow)),
]


# Function subclasses that are not operations but wrap a user's function, each tested where it is taught
NOT_OPERATIONS = {"CheckpointFunction": "tests/test_step42.py (reentrant checkpointing)",
                  "ReversibleSequentialFunction": "tests/test_step46.py (reversible blocks)",
                  "RevColumnFunction": "tests/test_step47.py (reversible columns)",
                  "ReversibleColumnsFunction": "tests/test_step47.py (reversible columns, one Function for all)",
                  # a move needs two devices: the stand-in's (tests/strict_cupy.py) and the CPU
                  "ToDevice": "tests/test_step48.py (x.to(device): gradients go back to the source device)",
                  # a custom Function's node runs the user's forward and backward (autograd.function.Function)
                  "CustomNode": "tests/test_step49.py (custom Functions, PyTorch's way)",
                  "DelayedError": "tests/test_step49.py (once_differentiable)",
                  # no derivative, as in PyTorch: backward through it raises PyTorch's error
                  "FloorDivide": "tests/test_dtypes.py (floor division)",
                  "Unique": "tests/test_tutorial_names_structure.py (unique)",
                  # the node of module hooks' identity Function (an autograd.Function of the package)
                  "BackwardHookFunctionBackward": "tests/test_step53.py (module hooks)",
                  # gradcheck's identity whose backward sends no gradient (check_undefined_grad)
                  "UndefinedGrad": "tests/test_tutorial_behaviour.py (gradcheck's check_undefined_grad)"}


def package_functions():
    """Every concrete Function subclass defined in the package (a name starting with _ is a base class),
    but NOT_OPERATIONS."""
    found, todo = set(), [Function]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("tinypytorch.") and not sub.__name__.startswith("_") \
                    and sub.__name__ not in NOT_OPERATIONS:
                found.add(sub)
    return found


def operands(operation, seed=0, dtype=np.float64):
    """Operands for `operation`, drawn uniformly from its domain with a seeded generator."""
    rng = np.random.default_rng(seed)
    low, high = operation.domain
    return [rng.uniform(low, high, shape).astype(dtype) for shape in operation.shapes]
