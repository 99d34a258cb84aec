"""PyTorch's `torch.functional` (no step): the functions PyTorch keeps in that module which the package has.

A program may import it as `import torch.functional as F`; `torch.einsum`, `torch.unique` and `torch.norm` are the
same functions.
"""
from tinypytorch.functions import norm
from tinypytorch.linear_algebra import einsum
from tinypytorch.structure import unique

__all__ = ["einsum", "norm", "unique"]
