"""PyTorch's torch.Size: what `x.shape` and `x.size()` give.

A tuple of ints, so it compares, indexes, unpacks and hashes as a tuple does (`x.shape == (2, 3)` holds); it
prints as PyTorch prints it, `torch.Size([2, 3])`, counts its elements with `numel()`, and a slice of it or a sum
with a tuple is a Size again.
"""
import math


class Size(tuple):
    """The shape of a tensor: a tuple of ints (PyTorch's torch.Size)."""

    def __repr__(self):
        return f"torch.Size({list(self)})"

    __str__ = __repr__

    def numel(self):
        """The number of elements of a tensor of this shape."""
        return math.prod(self)

    def __getitem__(self, key):
        item = super().__getitem__(key)
        return Size(item) if isinstance(key, slice) else item

    def __add__(self, other):
        return Size(tuple(self) + tuple(other))

    def __radd__(self, other):
        return Size(tuple(other) + tuple(self))


__all__ = ["Size"]
