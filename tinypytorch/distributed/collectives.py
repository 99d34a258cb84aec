"""Collectives on the package's tensors: every rank calls the same one, and each gets its share of the result.

    all_reduce              every rank ends with the sum (or min, max, product) of every rank's tensor
    broadcast               every rank ends with rank src's tensor
    all_gather              every rank ends with every rank's tensor, one after another
    reduce_scatter          the sum of every rank's tensor, cut into world-size pieces: rank r keeps piece r

The bytes travel through PyTorch (torch.distributed, gloo). A package tensor is lent to torch without
a copy: `torch.from_numpy` views the same memory, so an in-place collective (all_reduce) changes the
package tensor's own array, and its version counter moves as torch's does. Gloo needs contiguous
memory; a strided array (a transposed view) is lent as a contiguous copy that is written back.

Each call first checks that every rank called the same collective on the same shapes and dtypes
(a few bytes gathered from every rank): a mismatch raises the same clear error on every rank, where
gloo would abort a process or wait until its timeout. The package's own callers, which build the same
calls on every rank by construction (DDP's buckets, ZeRO's shards), skip it (`trusted_calls`).
"""
import contextlib
import threading

import numpy as np
import torch
import torch.distributed as torch_dist
from torch.distributed import ReduceOp

from tinypytorch.core import Variable, increment_version


class _Trust(threading.local):
    depth = 0


_trust = _Trust()


@contextlib.contextmanager
def trusted_calls():
    """A block whose collectives are the same on every rank by construction: no agreement check."""
    _trust.depth += 1
    try:
        yield
    finally:
        _trust.depth -= 1


def _host_array(tensor, op):
    array = tensor.data if isinstance(tensor, Variable) else tensor
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{op}: expected a tinypytorch tensor in host memory (gloo moves host memory), "
                        f"got {type(tensor).__name__}" + (" on a GPU; move it with .cpu()"
                                                          if isinstance(tensor, Variable) else ""))
    return array


class _Lent:
    """A package tensor lent to torch: `.torch` is a torch tensor over the same memory.

    Where gloo cannot use the array as it is (strided, or read-only), a contiguous copy is lent, and
    `give_back` writes the result into the array. An output's version counter moves at once, as torch's."""

    def __init__(self, tensor, op, written):
        self.array = _host_array(tensor, op)
        if written and not self.array.flags.writeable:
            raise ValueError(f"{op}: the output tensor is read-only (a broadcast view?); pass a tensor of its own")
        self.copied = not (self.array.flags.c_contiguous and self.array.flags.writeable)
        self.lent = np.ascontiguousarray(self.array) if self.copied else self.array
        if self.copied and not self.lent.flags.writeable:
            self.lent = self.lent.copy()
        self.torch = torch.from_numpy(self.lent)  # no copy: the same bytes
        self.written = written
        if written and isinstance(tensor, Variable):
            increment_version(tensor)  # an in-place change, as torch counts it

    def give_back(self):
        if self.written and self.copied:
            self.array[...] = self.lent


class Work:
    """What a collective with `async_op=True` returns: `wait()` returns once the result is in the tensors."""

    def __init__(self, work, finish):
        self._work, self._finish = work, finish

    def wait(self, timeout=None):
        if self._work is not None:
            self._work.wait() if timeout is None else self._work.wait(timeout)
            self._work = None
            self._finish()
        return True

    def is_completed(self):
        return self._work is None or self._work.is_completed()

    def get_future(self):
        """PyTorch's Future of the collective: `then(callback)` runs the callback once the collective completes
        (its value holds torch's tensors over the arrays the collective was given)."""
        if self._work is None:  # (torch's Work lets go of the tensors once waited on: so does this one)
            raise RuntimeError("get_future: ask before wait(), on a collective started with async_op=True")
        return self._work.get_future()


def _started(work, outputs, async_op, after=None):
    """A Work over torch's `work` that gives the outputs back when done; waited on here unless async_op."""
    def finish():
        if after is not None:
            after()
        for lent in outputs:
            lent.give_back()

    handle = Work(work, finish)
    if async_op:
        return handle
    handle.wait()
    return None


def _describe(tensor):
    """'shape (2, 3) float32': what must match between the ranks."""
    array = tensor.data if isinstance(tensor, Variable) else tensor
    return f"shape {tuple(getattr(array, 'shape', ()))} {getattr(array, 'dtype', type(array).__name__)}"


def _agree(op, group, *details):
    """Every rank of the group called `op` with the same `details` (shapes, dtypes), or a clear error on every rank."""
    if _trust.depth:
        return
    mine = (op, *details)
    everyone = [None] * torch_dist.get_world_size(group)
    torch_dist.all_gather_object(everyone, mine, group=group)
    if any(theirs != mine for theirs in everyone):
        calls = "; ".join(f"rank {r}: {call[0]} of {', '.join(map(str, call[1:]))}" for r, call in enumerate(everyone))
        raise RuntimeError(f"{op}: the ranks' calls do not match ({calls}): every rank must call the same collective "
                           "on tensors of the same shape and dtype")


def _name(op):
    return f"op {getattr(op, 'name', op)}"


def _averaging(op, lent, group):
    """Gloo has no AVG: sum, then divide by the world size (floating tensors only, as torch's AVG)."""
    if op != ReduceOp.AVG:
        return op, None
    if lent.torch.dtype.is_floating_point is False:
        raise ValueError("ReduceOp.AVG needs a floating point tensor")
    world = torch_dist.get_world_size(group)
    return ReduceOp.SUM, lambda: lent.torch.div_(world)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Every rank's `tensor` becomes, in place, the reduction (SUM: the sum) of every rank's `tensor`."""
    _agree("all_reduce", group, _describe(tensor), _name(op))
    lent = _Lent(tensor, "all_reduce", written=True)
    op, after = _averaging(op, lent, group)
    work = torch_dist.all_reduce(lent.torch, op=op, group=group, async_op=True)
    return _started(work, [lent], async_op, after)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """Every rank's `tensor` becomes, in place, rank `src`'s."""
    _agree("broadcast", group, _describe(tensor), src if group_src is None else group_src)
    lent = _Lent(tensor, "broadcast", written=True)
    work = torch_dist.broadcast(lent.torch, src=src, group=group, async_op=True, group_src=group_src)
    return _started(work, [lent], async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] becomes rank r's `tensor`, on every rank."""
    _agree("all_gather", group, _describe(tensor), f"[{', '.join(_describe(t) for t in tensor_list)}]")
    outputs = [_Lent(t, "all_gather", written=True) for t in tensor_list]
    source = _Lent(tensor, "all_gather", written=False)
    work = torch_dist.all_gather([o.torch for o in outputs], source.torch, group=group, async_op=True)
    return _started(work, outputs, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """`output_tensor` (world size times as long along dim 0) becomes every rank's `input_tensor`, in rank order."""
    _agree("all_gather_into_tensor", group, _describe(output_tensor), _describe(input_tensor))
    output = _Lent(output_tensor, "all_gather_into_tensor", written=True)
    source = _Lent(input_tensor, "all_gather_into_tensor", written=False)
    gather = getattr(torch_dist, "all_gather_single", None) or torch_dist.all_gather_into_tensor  # torch's new name
    work = gather(output.torch, source.torch, group=group, async_op=True)
    return _started(work, [output], async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """`output` becomes the reduction over the ranks of their input_list[r], r this rank."""
    _agree("reduce_scatter", group, _describe(output), f"[{', '.join(_describe(t) for t in input_list)}]", _name(op))
    lent = _Lent(output, "reduce_scatter", written=True)
    sources = [_Lent(t, "reduce_scatter", written=False) for t in input_list]
    op, after = _averaging(op, lent, group)
    work = torch_dist.reduce_scatter(lent.torch, [s.torch for s in sources], op=op, group=group, async_op=True)
    return _started(work, [lent], async_op, after)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002 (torch's name)
    """`output` becomes piece r (along dim 0) of the reduction over the ranks of their `input`, r this rank."""
    _agree("reduce_scatter_tensor", group, _describe(output), _describe(input), _name(op))
    lent = _Lent(output, "reduce_scatter_tensor", written=True)
    source = _Lent(input, "reduce_scatter_tensor", written=False)
    op, after = _averaging(op, lent, group)
    scatter = getattr(torch_dist, "reduce_scatter_single", None) or torch_dist.reduce_scatter_tensor
    work = scatter(lent.torch, source.torch, op=op, group=group, async_op=True)
    return _started(work, [lent], async_op, after)
