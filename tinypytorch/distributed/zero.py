"""ZeRO (Rajbhandari et al., 2020), FSDP's way: shard across the N ranks what plain data parallelism keeps N times.

Plain data parallelism holds on every rank the whole model: its parameters, their gradients and the
optimizer's state (Adam's two moments): 4 + 4 + 8 = 16 bytes a float32 parameter. ZeRO cuts each
parameter's flattened array into N equal pieces (the last padded): rank r owns piece r.

    stage 1  the optimizer state is sharded: each rank's optimizer steps its pieces only; the gradients
             are averaged whole (all-reduce), and after the step each rank's pieces are gathered into
             every rank's parameters (all-gather). Bytes a parameter: 4 + 4 + 8/N.
    stage 2  the gradients too: each gradient is reduce-scattered as soon as backward has made it, so a
             rank receives the average of its piece only, and the whole gradient is let go at once.
             Bytes a parameter: 4 + (4 + 8)/N.

ZeroDataParallel wraps a module as DistributedDataParallel does (rank 0's weights broadcast at
construction, forward passes through) and holds the sharded optimizer: `step()` and `zero_grad()`.
Its collectives run as each gradient arrives, one at a time (PyTorch's FSDP overlaps them with
backward, as DDP's buckets do).
"""
import math

import numpy as np

from tinypytorch.core import Variable, increment_version
from tinypytorch.distributed import collectives
from tinypytorch.distributed import process_group as groups
from tinypytorch.layers import Parameter
from tinypytorch.nn.modules import Module


class Shard:
    """A parameter's piece on this rank: `piece`, a Parameter of k elements that the rank's optimizer steps."""

    def __init__(self, param, rank, world_size):
        self.param, self.world_size = param, world_size
        self.k = math.ceil(param.data.size / world_size)  # every piece as long: reduce-scatter needs that
        self.slice = slice(rank * self.k, (rank + 1) * self.k)
        self.piece = Parameter(self.padded(param.data)[self.slice].copy())

    def padded(self, array):
        """`array` flattened, zeros after it up to N pieces of k."""
        flat = np.zeros(self.k * self.world_size, array.dtype)
        flat[:array.size] = array.ravel()
        return flat

    def gather_parameter(self, group):
        """Every rank's piece, in rank order, written into the whole parameter (after the step)."""
        whole = np.empty(self.k * self.world_size, self.piece.data.dtype)
        collectives.all_gather_into_tensor(whole, self.piece.data, group=group)
        self.param.data[...] = whole[:self.param.data.size].reshape(self.param.data.shape)
        increment_version(self.param)


class ZeroDataParallel(Module):
    """`module` trained on N ranks with ZeRO stage 1 or 2; `optimizer_class(**defaults)` steps this rank's pieces."""

    def __init__(self, module, optimizer_class, stage=2, process_group=None, **defaults):
        super().__init__()
        if stage not in (1, 2):
            raise ValueError(f"ZeroDataParallel: stage must be 1 or 2, got {stage!r}")
        self.module, self.stage, self.group = module, stage, process_group
        self.world_size = groups.get_world_size(process_group)
        params = [p for p in module.parameters() if p.requires_grad]
        with collectives.trusted_calls():
            for state in params + list(module.buffers()):
                collectives.broadcast(state, src=0, group=process_group)  # every rank starts from rank 0's
        rank = groups.get_rank(process_group)
        self.shards = {id(p): Shard(p, rank, self.world_size) for p in params}
        self.optimizer = optimizer_class([s.piece for s in self.shards.values()], **defaults)
        self._handles = [p.register_post_accumulate_grad_hook(self._reduce) for p in params]

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)

    def _reduce(self, param):
        """param's gradient is whole on this rank: average it over the ranks, keeping what the stage keeps."""
        shard = self.shards[id(param)]
        flat = shard.padded(param.grad.data) / self.world_size
        with collectives.trusted_calls():
            if self.stage == 1:  # the whole average, on every rank: .grad becomes a view of it, the piece too
                collectives.all_reduce(flat, group=self.group)
                param.grad = Variable(flat[:param.data.size].reshape(param.data.shape), requires_grad=False)
                piece = flat[shard.slice]
            else:  # the average of this rank's piece only; the whole gradient let go
                piece = np.empty(shard.k, flat.dtype)
                collectives.reduce_scatter_tensor(piece, flat, group=self.group)
                param.grad = None
        shard.piece.grad = Variable(piece, requires_grad=False)

    def step(self):
        """This rank's optimizer steps its pieces; then every rank gathers every piece into its parameters."""
        self.optimizer.step()
        with collectives.trusted_calls():
            for shard in self.shards.values():
                shard.gather_parameter(self.group)

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad()
        for shard in self.shards.values():
            shard.param.grad = None

    def bytes_held(self):
        """{"parameters", "gradients", "optimizer state": bytes this rank holds} (a stage 1 piece's gradient is a
        view of the whole one, counted once)."""
        params = [s.param for s in self.shards.values()]
        grads = sum(p.grad.data.nbytes for p in params if p.grad is not None)
        if self.stage == 2:
            grads += sum(s.piece.grad.data.nbytes for s in self.shards.values() if s.piece.grad is not None)
        return {"parameters": sum(p.data.nbytes for p in params), "gradients": grads,
                "optimizer state": optimizer_state_bytes(self.optimizer)}


def optimizer_state_bytes(optimizer):
    """Bytes of the arrays an optimizer keeps per parameter (Adam's moments; not its 0-d step counts)."""
    return sum(value.nbytes for state in optimizer.state.values() for value in state.values()
               if isinstance(value, np.ndarray) and value.ndim > 0)
