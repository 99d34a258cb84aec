"""tinypytorch.nn: PyTorch's torch.nn.

For now it holds only `functional` (PyTorch's torch.nn.functional: relu, softmax, cross_entropy, linear, ...);
Module and the layers built on it come later.
"""
from tinypytorch.nn import functional

__all__ = ["functional"]
