"""vmap: a function of one sample run once on a whole batch (PyTorch's torch.func.vmap).

    vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None)(*args)

Each argument's dim in_dims (an int, None for an argument shared by every sample, or a pytree of those that
matches the arguments) is its batch dim: vmap opens a level, wraps each batched argument as a BatchedVariable
(tinypytorch.batched) whose batch dim is in front, runs func once, and each output's batch dim goes to out_dims.
Inside, every operation meets BatchedVariables and runs its batching rule (tinypytorch.batching_rules) on the
whole batch. Levels nest: vmap(vmap(f)) batches twice. randomness: "error" refuses random operations inside,
"different" draws for every sample, "same" draws once for the batch. chunk_size only sizes PyTorch's batches; the
values do not depend on it, so here the whole batch runs at once.
"""
import functools

from tinypytorch import batching_rules  # noqa: F401 (the rules, registered as it is imported)
from tinypytorch import batching_state
from tinypytorch.batched import BatchedVariable, batched, unbatched
from tinypytorch.core import Variable
from tinypytorch.functions import broadcast_to, movedim, unsqueeze
from tinypytorch.utils.pytree import tree_flatten, tree_unflatten


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """func vectorized over the dims in_dims of its arguments; the results' batch dims at out_dims."""
    if not callable(func):
        raise TypeError(f"'{type(func).__name__}' object is not callable")

    @functools.wraps(func)
    def vectorized(*args, **kwargs):
        if chunk_size is not None and chunk_size <= 0:
            raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
        if randomness not in ("error", "different", "same"):
            raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. "
                               f"Got {randomness}")
        name = getattr(func, "__name__", repr(func))
        leaves, spec = tree_flatten(args)
        dims = _broadcast(in_dims, args, f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)", "in_dims", "inputs")
        size = _batch_size(leaves, dims, f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)")
        with batching_state.vmap_level(size, randomness) as level:
            inputs = [x if d is None else batched(_moved(x, d, 0), level) for x, d in zip(leaves, dims)]
            output = func(*tree_unflatten(inputs, spec), **kwargs)
            return _outputs(output, out_dims, level, size, name)
    return vectorized


def _broadcast(dims, tree, where, dims_name, tree_name):
    """One dim (or None) per leaf of `tree`: `dims` is an int or None for all of a subtree, or a pytree of them
    that matches `tree` down to where it has ints and Nones (PyTorch's broadcasting of in_dims and out_dims)."""
    if dims_name == "in_dims" and not isinstance(dims, (int, tuple)):
        raise ValueError(f"{where}: expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(dims)}.")
    if dims_name == "in_dims" and isinstance(dims, int):
        dims = (dims,) * len(tree)  # one for each argument
    spec = tree_flatten(tree)[1]
    try:
        return _spread(dims, tree)
    except _Mismatch:
        raise ValueError(f"{where}: {dims_name} is not compatible with the structure of `{tree_name}`. {dims_name} "
                         f"has structure {tree_flatten(dims)[1]} but {tree_name} has structure {spec}.") from None


class _Mismatch(Exception):
    pass


def _spread(dims, tree):
    if dims is None or isinstance(dims, int):
        return [dims] * len(tree_flatten(tree)[0])
    if isinstance(dims, dict) and isinstance(tree, dict) and set(dims) == set(tree):
        return [d for key in tree for d in _spread(dims[key], tree[key])]
    if isinstance(dims, (tuple, list)) and isinstance(tree, (tuple, list)) and len(dims) == len(tree):
        return [d for dim, part in zip(dims, tree) for d in _spread(dim, part)]
    if not isinstance(dims, (tuple, list, dict)):  # not a dim: _batch_size refuses it by name
        return [dims] * len(tree_flatten(tree)[0])
    raise _Mismatch


def _batch_size(leaves, dims, where):
    """The batch size: the length of every batched argument's dim; PyTorch's errors for what cannot be batched."""
    sizes = []
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            raise ValueError(f"{where}: Got in_dim={d} for an input but in_dim must be either an integer dimension "
                             "or None.")
        if not isinstance(x, Variable):
            raise ValueError(f"{where}: Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                             "vmap over non-Tensor arguments, please use None as the respective in_dim")
        if not -x.ndim <= d < x.ndim:
            raise ValueError(f"{where}: Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                             f"{x.ndim} so expected in_dim to satisfy -{x.ndim} <= in_dim < {x.ndim}.")
        sizes.append(x.shape[d])
    if not sizes:
        raise ValueError(f"{where}: at least one input must be batched (in_dims not all None), and a Tensor: "
                         "vmap has no batch size otherwise")
    if len(set(sizes)) > 1:
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return sizes[0]


def _outputs(output, out_dims, level, size, name):
    """func's output with each leaf's batch dim of `level` moved to its out_dim (an unbatched leaf repeated)."""
    leaves, spec = tree_flatten(output)
    try:
        dims = _spread(out_dims, output)
    except _Mismatch:
        raise ValueError(f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with the "
                         f"structure of `outputs`. out_dims has structure {tree_flatten(out_dims)[1]} but outputs "
                         f"has structure {spec}.") from None
    return tree_unflatten([_output(y, d, level, size, name) for y, d in zip(leaves, dims)], spec)


def _output(y, out_dim, level, size, name):
    if not isinstance(y, Variable):
        if out_dim is None:
            return y
        raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(y)}. Did you mean "
                         "to set out_dims= to None for output?")
    physical = unbatched(y, level)
    if out_dim is None:
        if physical is not None:
            raise ValueError(f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None")
        return y
    if physical is None:  # the same for every sample: repeated (a broadcast view, as PyTorch's expand)
        physical = broadcast_to(unsqueeze(y, 0), (size,) + tuple(y.shape))
    ndim = physical.ndim
    if not -ndim <= out_dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got "
                         f"{out_dim})")
    return _moved(physical, 0, out_dim)


def _moved(x, source, destination):
    """x with dim source moved to destination; x itself if it stays (no node recorded for nothing)."""
    return x if source % x.ndim == destination % x.ndim else movedim(x, source, destination)


__all__ = ["vmap", "BatchedVariable"]
