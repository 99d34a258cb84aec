"""What the package has of PyTorch's `torch.linalg`: `cross`, and `LinAlgError` (tinypytorch.linear_algebra).

    tinypytorch.linalg.cross(a, b)         # along the last dimension, as torch.linalg.cross

(`torch.svd` is `tinypytorch.svd`; torch.linalg.svd, which returns Vh and full matrices by default, is not here.)
"""
from tinypytorch.linear_algebra import LinAlgError  # noqa: F401 (svd's error for a matrix it cannot decompose)
from tinypytorch.linear_algebra import linalg_cross as cross

__all__ = ["cross", "LinAlgError"]
