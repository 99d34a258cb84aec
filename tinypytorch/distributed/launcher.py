"""spawn(fn, nprocs): run fn(rank, *args) in nprocs processes of this machine, each in the process group.

PyTorch's `torch.multiprocessing.spawn` starts the processes; this adds what every run needs: a free
port on the loopback interface for the rendezvous, torchrun's environment variables, the process group
(with a timeout, so that no collective waits forever), and the return value of fn on each rank.

The processes are forked (where the system can): a forked child starts as a copy of the parent, so fn
may be defined in a notebook. A spawned child starts a fresh interpreter and imports fn by name from
its module, which a notebook's `__main__` is not.

Failure ends the run within seconds: when one rank raises, the parent stops the others and raises
ProcessFailed, naming the first rank that failed and its exception (the others' errors, "connection
reset by peer", are its consequences).
"""
import datetime
import os
import pickle
import socket
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as torch_mp


from tinypytorch.distributed import process_group


class ProcessFailed(RuntimeError):
    """A rank of a spawned run raised (or died); `.rank` names it."""

    def __init__(self, rank, message):
        super().__init__(message)
        self.rank = rank


def free_port():
    """A TCP port on the loopback interface that no one listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, nprocs, args=(), *, timeout=300, port=None):
    """Run fn(rank, *args) in `nprocs` processes joined in a gloo process group; return [fn's result per rank].

    `timeout` (seconds) bounds the whole run, and each collective (the process group's timeout).
    """
    port = free_port() if port is None else port
    method = "fork" if "fork" in torch_mp.get_all_start_methods() else "spawn"
    with tempfile.TemporaryDirectory(prefix="tinypytorch-spawn-") as folder:
        context = torch_mp.start_processes(_run_rank, args=(fn, args, nprocs, port, folder, timeout), nprocs=nprocs,
                                           join=False, start_method=method)
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    _stop(context)
                    raise TimeoutError(f"spawn: the {nprocs} processes did not finish within {timeout} s")
        except (torch_mp.ProcessRaisedException, torch_mp.ProcessExitedException) as error:
            raise _first_failure(folder, nprocs, error) from None
        return [_load(os.path.join(folder, f"rank{r}.result")) for r in range(nprocs)]


def _run_rank(rank, fn, args, world_size, port, folder, timeout):
    """One rank: torchrun's environment, the process group, fn; its result or its error written to `folder`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)  # N processes share the cores (torchrun's default, OMP_NUM_THREADS=1)
    try:
        process_group.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
        result = fn(rank, *args)
        with open(os.path.join(folder, f"rank{rank}.result"), "wb") as f:
            pickle.dump(result, f)
    except BaseException:
        with open(os.path.join(folder, f"rank{rank}.error"), "wb") as f:
            pickle.dump((time.time(), traceback.format_exc()), f)
        raise
    finally:
        if process_group.is_initialized():
            process_group.destroy_process_group()


def _first_failure(folder, nprocs, error):
    """ProcessFailed for the rank that failed first: the others' errors followed from it."""
    failures = []
    for r in range(nprocs):
        path = os.path.join(folder, f"rank{r}.error")
        if os.path.exists(path):
            when, trace = _load(path)
            failures.append((when, r, trace))
    if not failures:  # killed by a signal, no Python error to report
        return ProcessFailed(error.error_index, f"spawn: rank {error.error_index} died: {error}")
    _, rank, trace = min(failures)
    last = trace.strip().splitlines()[-1]
    return ProcessFailed(rank, f"spawn: rank {rank} raised {last}\n\n{trace}")


def _stop(context):
    for process in context.processes:
        if process.is_alive():
            process.kill()
        process.join()


def _load(path):
    with open(path, "rb") as f:
        return pickle.load(f)

