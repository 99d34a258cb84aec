"""The process group: which processes take part, and who each one is (rank) among how many (world size).

PyTorch's torch.distributed keeps the group; these functions are its, with one rule of the package's
added: the backend is gloo, since the package's arrays live in host memory (NCCL moves GPU memory).
"""
import datetime
import numbers

import torch.distributed as torch_dist

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # PyTorch's default for gloo


def is_available():
    return torch_dist.is_available()


def init_process_group(backend="gloo", init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join the group, PyTorch's way: with `init_method=None` (env://) the rendezvous comes from the
    environment variables torchrun sets, MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.

    `timeout` (a timedelta, or seconds) bounds every collective: a rank that waits longer for the
    others raises instead of hanging.
    """
    if backend not in ("gloo", None, "cpu:gloo"):
        raise ValueError(f"init_process_group: backend {backend!r} is not available in tinypytorch: its tensors "
                         "live in host memory, which the gloo backend moves (NCCL moves GPU memory)")
    if isinstance(timeout, numbers.Real):
        timeout = datetime.timedelta(seconds=timeout)
    torch_dist.init_process_group(
        "gloo", init_method=init_method, timeout=timeout or DEFAULT_TIMEOUT, store=store, group_name=group_name,
        world_size=-1 if world_size is None else world_size, rank=-1 if rank is None else rank,
        pg_options=pg_options, device_id=device_id)


def destroy_process_group(group=None):
    torch_dist.destroy_process_group(group)


def is_initialized():
    return torch_dist.is_initialized()


def get_rank(group=None):
    """This process's number in the group, 0 to world size - 1."""
    return torch_dist.get_rank(group)


def get_world_size(group=None):
    """How many processes the group holds."""
    return torch_dist.get_world_size(group)


def barrier(group=None, async_op=False):
    """Wait until every rank of the group has reached its barrier."""
    return torch_dist.barrier(group=group, async_op=async_op)
