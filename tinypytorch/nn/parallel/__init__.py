"""tinypytorch.nn.parallel: PyTorch's torch.nn.parallel.

    distributed  DistributedDataParallel: one model per process, gradients averaged over the processes
    reducer      its machinery: parameters cut into buckets, each bucket all-reduced once its gradients are ready

Needs PyTorch (torch.distributed moves the bytes); `import tinypytorch.nn` does not import it.
"""
from tinypytorch.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
