"""Batching rules: how each operation runs on a batch, for vmap (tinypytorch.batched, tinypytorch.batching).

When an operation meets a BatchedVariable, Function.__call__ hands it to `run_rule`. The rule sees the inputs of
the highest vmap level present as their PHYSICAL values, batch dim first, and the other inputs as they are
(unbatched at that level); it calls the same kind of Function on those values, with its arguments adjusted to
the batch dim in front (an axis one further, a shape with the batch size before it), so that whatever graph
autograd records is recorded on the physical values. `run_rule` wraps the results back at that level.

One rule per operation of the package, grouped where a group shares one:

    element-wise           pad each batched operand's dims so that the logical dims line up under broadcasting
    reductions, softmax    the axes shifted by one (a negative axis made non-negative first)
    shapes and indexing    the batch dim prepended to the shape, the permutation, the index
    matrix products        vectors made matrices, then as element-wise: batch dims lined up
    images (N, C, H, W)    the batch merged with N, and split again after
    joins (cat, stack)     every operand batched (an unbatched one repeated), the axis shifted

An operation without a rule raises a NotImplementedError that names it: never a silently wrong result.
"""
import copy
import numbers

from tinypytorch import batching_state, core, cuda
from tinypytorch import classification as C
from tinypytorch import convolution as CV
from tinypytorch import functions as F
from tinypytorch import linear_algebra as LA
from tinypytorch import structure as ST
from tinypytorch.batched import BatchedVariable, unbatched
from tinypytorch.core import (Add, BroadcastTo, Cast, Clone, Function, Neg, Pow, Reciprocal, SumTo, Variable,
                              _Binary, as_variable)
from tinypytorch.normalization import NativeLayerNorm

RULES = {}  # Function class -> its batching rule
ATTRIBUTE_OPERANDS = {F.Where: "condition", C.NLLLoss: "target"}  # operands that are attributes, not inputs


def rule(*classes):
    """Register the decorated function as the batching rule of `classes` (and of their subclasses)."""
    def register(function):
        for cls in classes:
            RULES[cls] = function
        return function
    return register


class Batch:
    """One call of an operation inside vmap: the Function, its inputs at the highest level present (`values`:
    physical where `batched`, else as given), that level and its batch size."""

    def __init__(self, function, inputs):
        operands = list(inputs) + _attribute_operands(function)
        self.level = max(x.level for x in operands if isinstance(x, BatchedVariable))
        self.size = batching_state.size_of(self.level)
        self.function = function
        physical = [unbatched(x, self.level) for x in inputs]
        self.batched = [p is not None for p in physical]
        self.values = [x if p is None else p for x, p in zip(inputs, physical)]

    def run(self, *args, **changes):
        """A fresh copy of the Function, its attributes changed by `changes`, called on `args` (physical)."""
        function = copy.copy(self.function)
        function.__dict__.update(changes)
        return function(*args)

    def ndim(self, i):
        """The logical number of dims of input i."""
        x = self.values[i]
        return _ndim(x) - 1 if self.batched[i] else _ndim(x)

    def padded(self, ndim):
        """The inputs, each batched one with 1s after its batch dim up to `ndim` logical dims: broadcasting then
        lines up the logical dims, and the batch dim, in front, meets only batch dims or nothing."""
        return [pad(x, ndim) if b else x for x, b in zip(self.values, self.batched)]

    def expanded(self):
        """Every input batched: an unbatched one repeated along a new batch dim in front (a broadcast view)."""
        return [x if b else expand(x, self.size) for x, b in zip(self.values, self.batched)]


def run_rule(function, inputs):
    """Function.__call__ under vmap, for an operation with a batched input: its rule, its outputs batched."""
    batch = Batch(function, inputs)
    cls = next((c for c in type(function).__mro__ if c in RULES), None)
    if cls is None:
        raise NotImplementedError(f"vmap: there is no batching rule for {function.op_name()} "
                                  f"({type(function).__name__}) in tinypytorch; call it outside vmap, or loop over "
                                  "the batch")
    outputs = RULES[cls](batch)
    if isinstance(outputs, (tuple, list)):  # (a Function of several outputs returns a list)
        return tuple(BatchedVariable(y, batch.level) for y in outputs)
    return BatchedVariable(outputs, batch.level)


def _attribute_operands(function):
    name = ATTRIBUTE_OPERANDS.get(type(function))
    return [] if name is None else [getattr(function, name)]


def has_batched_attribute(function):
    """Whether an operand kept as an attribute (where's condition, nll_loss's target) is batched."""
    return any(isinstance(x, BatchedVariable) for x in _attribute_operands(function))


# ----- helpers on physical values (their dim 0 the batch dim) -------------------------------------------------

def _ndim(x):
    return x.ndim if isinstance(x, (Variable, *cuda.array_types)) else 0


def pad(x, ndim):
    """Physical x with 1s inserted after its batch dim until it has `ndim` logical dims."""
    missing = ndim - (x.ndim - 1)
    return x if missing <= 0 else F.reshape(x, (x.shape[0],) + (1,) * missing + tuple(x.shape[1:]))


def expand(x, size):
    """An unbatched operand as a physical value: repeated `size` times along a new dim 0."""
    x = as_variable(x, "vmap")
    return F.broadcast_to(x, (size,) + tuple(x.shape))


def merge(x):
    """Physical (B, N, ...) as (B * N, ...); for operations whose own dim 0 is a batch (images)."""
    return F.reshape(x, (x.shape[0] * x.shape[1],) + tuple(x.shape[2:]))


def split(y, size):
    """merge's inverse on a result: (B * N, ...) as (B, N, ...)."""
    return F.reshape(y, (size, y.shape[0] // size) + tuple(y.shape[1:]))


def shifted_axes(axis, ndim):
    """A reduction's axis (None, an int or a tuple, negative ones counting from the end) over `ndim` logical
    dims, as the physical axes: every one non-negative and one further."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    return tuple(a % max(ndim, 1) + 1 for a in axes)


# ----- element-wise operations --------------------------------------------------------------------------------

@rule(_Binary, Neg, Reciprocal, Pow, Clone, Cast, F.Square, F.Exp, F.Sin, F.Cos, F.Tanh, F.Log, F.Abs, F.Sqrt,
      F.Clamp, F.Sigmoid, F.ReLU, F.Asin, F._Rounding)
def elementwise(batch):
    """Element-wise: the batched operands padded to the largest logical rank; the unbatched ones as they are."""
    ndim = max(batch.ndim(i) for i in range(len(batch.values)))
    return batch.run(*batch.padded(ndim))


@rule(F.Where)
def where(batch):
    """where: the condition, an attribute, batched as an operand (padded like the others)."""
    condition = batch.function.condition
    physical = unbatched(condition, batch.level)
    ndim = max([batch.ndim(i) for i in range(2)] + [condition.ndim])
    if physical is not None:
        if isinstance(physical, BatchedVariable):
            raise NotImplementedError("vmap: where with a condition batched at an outer vmap level, its inputs not: "
                                      "not supported in tinypytorch")
        condition = pad(physical, ndim).data
    return batch.run(*batch.padded(ndim), condition=condition)


@rule(F.MeanSquaredError)
def mean_squared_error(batch):
    """The mean over each sample's elements (the Function's mean would take the batch's too): the same formula,
    mean((x0 - x1)^2), over the logical axes."""
    x0, x1 = batch.padded(max(batch.ndim(0), batch.ndim(1)))
    diff = x0 - x1
    return F.mean(diff * diff, axis=tuple(range(1, diff.ndim)))


@rule(F.Dropout)
def dropout(batch):
    """Random: vmap's randomness decides. 'different': one mask per sample, drawn over the physical shape;
    'same': one mask of the logical shape, shared by the batch ('error' never gets here: the draw refuses)."""
    (x,) = batch.values
    if batching_state.levels[-1].randomness == "same":
        xp = cuda.get_array_module(x.data) if not isinstance(x, BatchedVariable) else __import__("numpy")
        ones = Variable(xp.ones(tuple(x.shape[1:]), dtype=x.data.dtype), requires_grad=False)
        return x * batch.run(ones)  # the mask, scaled: dropout of ones
    with batching_state.per_sample_draws():
        batching_state.check_random()  # 'error': PyTorch's error, before anything is drawn
        return batch.run(x)


# ----- reductions, softmax ------------------------------------------------------------------------------------

@rule(F.Sum, F.Mean, F.Max, F.LogSumExp, F.Norm, F.Prod)
def reduction(batch):
    """A reduction over `axis`: the same axes of each sample, one further (None: every logical axis)."""
    return batch.run(batch.values[0], axis=shifted_axes(batch.function.axis, batch.ndim(0)))


@rule(F.Var)
def variance(batch):
    """var and std: as the other reductions; `named` (the dims the call named) follows the axes."""
    axes = shifted_axes(batch.function.axis, batch.ndim(0))
    return batch.run(batch.values[0], axis=axes, named=axes)


@rule(C.Softmax, C.LogSoftmax)
def softmax(batch):
    """softmax and log_softmax along one axis: that axis, one further (a 0-d sample: its one element)."""
    (x,) = batch.values
    if batch.ndim(0) == 0:
        return F.reshape(batch.run(F.reshape(x, (x.shape[0], 1)), axis=1), (x.shape[0],))
    return batch.run(x, axis=shifted_axes(batch.function.axis, batch.ndim(0))[0])


@rule(F.TakeAlongDim)
def take_along_dim(batch):
    """Values at indices along a dim: both operands batched, the dim one further."""
    return batch.run(*batch.expanded(), dim=batch.function.dim % max(batch.ndim(0), 1) + 1)


@rule(C.NLLLoss)
def nll_loss(batch):
    """nll_loss of (N, C) log-probabilities and N targets per sample: the batch's samples as one (B * N, C) with
    reduction 'none', then each sample's reduction of its N losses (the mean over the rows that count)."""
    function, size = batch.function, batch.size
    logp = batch.values[0] if batch.batched[0] else expand(batch.values[0], size)
    target = unbatched(function.target, batch.level)
    xp = cuda.get_array_module(logp.data if not isinstance(logp, BatchedVariable) else None)
    if target is None:
        target = xp.broadcast_to(function.target, (size,) + tuple(function.target.shape))
    elif isinstance(target, Variable):
        if isinstance(target, BatchedVariable):
            raise NotImplementedError("vmap: nll_loss with a target batched at an outer vmap level: not supported in "
                                      "tinypytorch")
        target = target.data
    rows = logp.shape[1]
    losses = batch.run(merge(logp), target=target.reshape(-1), reduction="none")
    losses = F.reshape(losses, (size, rows))
    if function.reduction == "none":
        return losses
    total = F.sum(losses, axis=1)
    if function.reduction == "sum":
        return total
    kept = (target != function.ignore_index).sum(axis=1).astype(logp.data.dtype)
    return total / Variable(kept, requires_grad=False)


# ----- shapes, views and indexing -----------------------------------------------------------------------------

@rule(F.Reshape)
def reshape(batch):
    """reshape, view, squeeze, flatten: the batch size before the new shape."""
    return batch.run(batch.values[0], shape=(batch.size,) + tuple(batch.function.shape))


@rule(F.Unsqueeze)
def unsqueeze(batch):
    function = batch.function
    return batch.run(batch.values[0], shape=(batch.size,) + tuple(function.shape), dim=function.dim + 1)


@rule(F.Transpose)
def transpose(batch):
    """permute, transpose, t, movedim: the batch dim stays first, the others move as they would."""
    return batch.run(batch.values[0], perm=(0,) + tuple(p + 1 for p in batch.function.perm))


@rule(BroadcastTo)
def broadcast_to(batch):
    """broadcast_to and expand: the sample padded to the target's rank first, so that the batch dim stays first."""
    shape = tuple(batch.function.shape)
    return batch.run(pad(batch.values[0], len(shape)), shape=(batch.size,) + shape)


@rule(SumTo)
def sum_to(batch):
    """sum_to: the sample's leading dims are summed too, so they are kept as 1s first, then dropped."""
    shape, ndim = tuple(batch.function.shape), batch.ndim(0)
    kept = (batch.size,) + (1,) * (ndim - len(shape)) + shape
    y = batch.run(batch.values[0], shape=kept)
    return y if ndim == len(shape) else F.reshape(y, (batch.size,) + shape)


def _batched_key(key):
    """An index of one sample made an index of the physical value (the batch dim first, whole); and where the
    batch dim lands: 0, or after the index arrays' dims when NumPy puts those first (index arrays that a slice
    separates). A batched index tensor is not supported."""
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, BatchedVariable) for k in parts):
        raise NotImplementedError("vmap: indexing with a batched index tensor is not supported in tinypytorch")
    advanced = [i for i, k in enumerate(parts) if _is_index_array(k)]
    position = 0
    if advanced and advanced[-1] - advanced[0] + 1 != len(advanced):  # separated: NumPy moves their dims first
        import numpy as np
        position = np.broadcast(*[np.empty(np.shape(_array(parts[i]))) for i in advanced]).ndim
    return (slice(None),) + parts, position


def _is_index_array(k):
    return isinstance(k, (Variable, list, *cuda.array_types)) or (hasattr(k, "shape") and not isinstance(k, slice))


def _array(k):
    return k.data if isinstance(k, Variable) else k


@rule(F.GetItem)
def get_item(batch):
    """x[key]: x[:, key] on the batch (the batch dim moved back to the front where NumPy moved it)."""
    key, position = _batched_key(batch.function.key)
    y = batch.run(batch.values[0], key=key)
    return F.movedim(y, position, 0) if position else y


@rule(F.GetItemGrad)
def get_item_grad(batch):
    """The gradient of x[key] (a backward formula meeting a batched gradient): the key as get_item's."""
    key, position = _batched_key(batch.function.key)
    gy = batch.values[0]
    gy = F.movedim(gy, 0, position) if position else gy
    return batch.run(gy, key=key, shape=(batch.size,) + tuple(batch.function.shape))


# ----- matrix products --------------------------------------------------------------------------------------------

@rule(F.MatMul)
def matmul(batch):
    """x @ W: a batched vector made a matrix (a row for x, a column for W), the operands padded to one rank so
    that the batch dim meets a batch dim (or nothing), then the dims the vectors added dropped again."""
    (x, W), (bx, bW) = batch.values, batch.batched
    nx, nW = batch.ndim(0), batch.ndim(1)
    drop = []
    if bx and nx == 1:
        x, nx = F.unsqueeze(x, 1), 2
        drop.append(-2)
    if bW and nW == 1:
        W, nW = F.unsqueeze(W, -1), 2
        drop.append(-1)
    ndim = max(nx, nW)
    y = batch.run(pad(x, ndim) if bx else x, pad(W, ndim) if bW else W)
    for _ in drop:  # the column's dim is the last; the row's the last but one, or the last once the column's went
        y = F.squeeze(y, -1 if len(drop) == 2 or drop == [-1] else -2)
    return y


@rule(F.LinearFunction)
def linear(batch):
    """x W^T + b: with only x batched, the same Function (its rows are the batch's rows); with a batched weight
    or bias (per-sample parameters), the same formula as a batched matrix product and a sum."""
    *bias, x, W = batch.values
    *b_bias, bx, bW = batch.batched
    if not bW and not any(b_bias):  # the batch's rows as rows of one matrix (the Function's formulas are for 2-D x)
        rows = F.reshape(x, (-1, x.shape[-1]))
        y = batch.run(*bias, rows, W)
        return F.reshape(y, tuple(x.shape[:-1]) + (y.shape[-1],))
    x = x if bx else expand(x, batch.size)
    W = W if bW else expand(W, batch.size)
    ndim = batch.ndim(len(bias))  # the sample's x: (..., in)
    Wt = pad(F.transpose(W, 1, 2), max(ndim, 2))  # (B, 1..., in, out)
    y = F.matmul(F.unsqueeze(x, 1), Wt) if ndim == 1 else F.matmul(x, Wt)
    y = F.squeeze(y, 1) if ndim == 1 else y
    if bias:
        b = bias[0] if b_bias[0] else expand(bias[0], batch.size)
        y = y + pad(b, max(ndim, 1))
    return y


@rule(LA.Cross)
def cross(batch):
    """The cross product along `dim`: element-wise in the other dims, the dim counted in the padded rank."""
    ndim = max(batch.ndim(0), batch.ndim(1))
    a, b = [pad(x, ndim) for x in batch.expanded()]  # (its components are indexed by position: one rank for both)
    return batch.run(a, b, dim=batch.function.dim % ndim + 1)


# ----- images, normalization ----------------------------------------------------------------------------------

@rule(CV.Unfold, CV.Fold, CV.MaxPool2d, CV.AvgPool2d)
def images(batch):
    """Operations on (N, C, H, W): the batch merged with N (a sample of one image, (C, H, W), is an N already)."""
    x = batch.values[0]
    if batch.ndim(0) < 4 and not isinstance(batch.function, CV.Fold) or batch.ndim(0) < 3:
        return batch.run(x)
    outputs = batch.run(merge(x))
    if isinstance(outputs, (tuple, list)):
        return tuple(split(y, batch.size) for y in outputs)
    return split(outputs, batch.size)


@rule(NativeLayerNorm)
def layer_norm(batch):
    """layer_norm over the last dims: the same Function on the batch, if the weight and bias are shared."""
    if any(batch.batched[1:]):
        raise NotImplementedError("vmap: layer_norm with a batched weight or bias is not supported in tinypytorch")
    return batch.run(*batch.values)


# ----- joins --------------------------------------------------------------------------------------------------

@rule(F.Concatenate)
def concatenate(batch):
    """cat: every operand batched, the axis one further."""
    return batch.run(*batch.expanded(), axis=batch.function.axis % max(batch.ndim(0), 1) + 1)


@rule(ST.Stack)
def stack(batch):
    """stack: every operand batched, the new dim one further (it counts among the result's dims)."""
    return batch.run(*batch.expanded(), dim=batch.function.dim % (batch.ndim(0) + 1) + 1)


def compare(op, x, other):
    """x <op> other (==, <, ...; not a Function: nothing to differentiate) of batched values: element-wise."""
    batch = Batch(None, [x, other])
    ndim = max(batch.ndim(0), batch.ndim(1))
    return BatchedVariable(core.compare(op, *batch.padded(ndim)), batch.level)


# ----- in-place operations (tinypytorch.inplace hands them here inside vmap) -----------------------------------

IN_PLACE = ("vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a Tensor `other` in "
            "extra_args that has more elements than `self`. This happened due to `other` being vmapped over but "
            "`self` not being vmapped over in a vmap. Please try to use out-of-place operators instead of inplace "
            "arithmetic. If said operator is being called inside the PyTorch framework, please file a bug report "
            "instead.")  # PyTorch's words


def in_place(write, x, others, key=None, name=None):
    """x changed in place by `write(physical x, *physical others)`: the change made to x's batch, each batched
    other padded to x's rank (or, with `key`, to the rank of x[key]). Only a batched x can take a batched value:
    an unbatched one has room for one sample's."""
    operands = [x, *others]
    level = max(v.level for v in operands if isinstance(v, BatchedVariable))
    target = unbatched(x, level)
    if target is None or not isinstance(x, BatchedVariable) or x.level != level:
        if name == "add_":  # PyTorch's words for x.add_(batched): the write's shapes, with the batch's size
            import numpy as np
            shape = np.broadcast_shapes(tuple(x.shape), *[tuple(v.shape) for v in others if hasattr(v, "shape")])
            raise RuntimeError(f"output with shape {list(x.shape)} doesn't match the broadcast shape "
                               f"{[batching_state.size_of(level)] + list(shape)}")
        raise RuntimeError(IN_PLACE)
    ndim = x.ndim if key is None else _slot_ndim(x, key)
    physical = [unbatched(v, level) for v in others]
    write(target, *[v if p is None else pad(p, ndim) for v, p in zip(others, physical)])
    return x


def _slot_ndim(x, key):
    import numpy as np
    return np.empty(tuple(x.shape), dtype=bool)[key].ndim


def batched_key(key):
    """The index of x[key] in x's physical value (the batch dim first, whole)."""
    key, position = _batched_key(key)
    if position:
        raise NotImplementedError("vmap: an in-place write through index arrays that a slice separates is not "
                                  "supported in tinypytorch")
    return key


batching_state.run_rule = run_rule
batching_state.in_place = in_place
batching_state.compare = compare
batching_state.batched_key = batched_key
batching_state.has_batched_attribute = has_batched_attribute
batching_state.attribute_operand_types = tuple(ATTRIBUTE_OPERANDS)
