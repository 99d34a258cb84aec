"""PyTorch's torch.multiprocessing, which starts the processes of a distributed run: `spawn(fn, args, nprocs)`
runs fn(i, *args) in nprocs new processes (the script's functions: a spawned child imports the script again,
so its entry point sits under `if __name__ == "__main__":`). The processes are torch's; the package's tensors
pass between them through tinypytorch.distributed. `tinypytorch.distributed.spawn` is the package's shortcut,
which also joins them in a process group and forks, so that it works from a notebook.
"""
from torch.multiprocessing import get_all_start_methods, get_start_method, set_start_method, spawn, start_processes

__all__ = ["spawn", "start_processes", "get_start_method", "set_start_method", "get_all_start_methods"]
