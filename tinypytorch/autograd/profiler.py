"""PyTorch's `torch.autograd.profiler`: its `profile` is not in tinypytorch, and says so where it is used
(not_there.py)."""
from tinypytorch.not_there import autograd_profiler_profile as profile

__all__ = ["profile"]
