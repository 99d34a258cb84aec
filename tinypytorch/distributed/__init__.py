"""Beyond one process: PyTorch's torch.distributed on the package's tensors.

The transport is PyTorch's own: torch.distributed with the gloo backend (CPU, processes on one
machine or many). The package never moves bytes itself; it hands its arrays to torch without a
copy (`torch.from_numpy`) and builds data parallelism and sharding from its own hooks on top.

    process_group  init_process_group, destroy_process_group, get_rank, get_world_size, barrier
    collectives    all_reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
                   reduce_scatter_tensor (async_op=True: a Work to wait on); ReduceOp
    launcher       spawn(fn, nprocs): N processes on this machine, from a script or a notebook
    zero           ZeroDataParallel: ZeRO stages 1 and 2, optimizer state (and gradients) sharded over the ranks
    fsdp           fully_shard: ZeRO stage 3, the parameters sharded too (PyTorch's FSDP2)

Needs PyTorch (`import tinypytorch` does not import this module; `tinypytorch.distributed` does).
"""
from tinypytorch.distributed.process_group import (
    barrier, destroy_process_group, get_rank, get_world_size, init_process_group, is_available, is_initialized,
)
from tinypytorch.distributed.collectives import (
    ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce, broadcast, reduce_scatter, reduce_scatter_tensor,
)
from tinypytorch.distributed.launcher import ProcessFailed, spawn
from tinypytorch.distributed import fsdp  # tinypytorch.distributed.fsdp.fully_shard: torch's place
from tinypytorch.distributed import zero  # tinypytorch.distributed.zero.ZeroDataParallel: stages 1 and 2

__all__ = [
    "init_process_group", "destroy_process_group", "get_rank", "get_world_size", "is_initialized", "is_available",
    "barrier", "ReduceOp", "Work", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "spawn", "ProcessFailed", "fsdp", "zero",
]
