"""PyTorch's modules that pass their input on reshaped, or as it is: Flatten, Unflatten, Identity (the glue between
a convolutional stack's images and the Linear layers after it)."""
import math
import numbers

from tinypytorch import functions
from tinypytorch.core import as_variable
from tinypytorch.nn.modules import Module

__all__ = ["Flatten", "Unflatten", "Identity"]


class Flatten(Module):
    """PyTorch's nn.Flatten(start_dim=1, end_dim=-1): dims start_dim to end_dim made one, the batch dim kept."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        return functions.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """PyTorch's nn.Unflatten(dim, unflattened_size): dim `dim` split into `unflattened_size` (one entry may be -1)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(f"unflattened_size must be a tuple of ints, but found type "
                            f"{type(unflattened_size).__name__}")
        for i, size in enumerate(unflattened_size):
            if not isinstance(size, numbers.Integral) or isinstance(size, bool):
                raise TypeError(f"unflattened_size must be tuple of ints, but found element of type "
                                f"{type(size).__name__} at pos {i}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):  # noqa: A002
        x = as_variable(input, "unflatten")
        dim = self._dim(x.ndim)
        sizes = list(self.unflattened_size)
        known = math.prod(s for s in sizes if s != -1)
        if sizes.count(-1) == 1 and known and x.shape[dim] % known == 0:
            sizes[sizes.index(-1)] = x.shape[dim] // known
        if math.prod(sizes) != x.shape[dim] or any(s < 0 for s in sizes):
            raise RuntimeError(f"unflatten: Provided sizes {list(self.unflattened_size)} don't multiply up to the "
                               f"size of dim {self.dim} ({x.shape[dim]}) in the input tensor")
        return functions.reshape(x, x.shape[:dim] + tuple(sizes) + x.shape[dim + 1:])

    def _dim(self, ndim):
        if not -ndim <= self.dim < ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got "
                             f"{self.dim})")
        return self.dim % ndim

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Identity(Module):
    """PyTorch's nn.Identity: its input, unchanged (any arguments are accepted and ignored, as PyTorch's)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input
