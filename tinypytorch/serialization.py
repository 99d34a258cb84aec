"""Saving and loading a state dict: PyTorch's torch.save / torch.load, for state dicts only (step 52).

The file is NumPy's .npz: one array a key, no pickled objects, so loading a file runs no code
(`allow_pickle=False`). The arrays come back as Variables that need no gradient, in the order saved.
"""
import collections
import collections.abc

import numpy as np

from tinypytorch import cuda
from tinypytorch.core import Variable


def save(obj, f):  # step 52
    """Write `obj`, a mapping of names to Variables or arrays (a `state_dict()`), to `f` (a path or a binary file),
    under exactly that name (np.savez alone would add ".npz" to a path without it)."""
    if not isinstance(obj, collections.abc.Mapping):
        raise TypeError(f"save: tinypytorch saves state dicts (a mapping of names to tensors), "
                        f"got {type(obj).__name__}")
    arrays = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise TypeError(f"save: keys must be str, got {key!r}")
        if isinstance(value, Variable):
            value = value.data
        if not isinstance(value, cuda.array_types):
            raise TypeError(f"save: the value of {key!r} must be a tinypytorch.Tensor or an array, "
                            f"got {type(value).__name__}")
        arrays[key] = cuda.as_numpy(value)
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "wb") as file:
            np.savez(file, **arrays)
    else:
        np.savez(f, **arrays)


def load(f):  # step 52
    """Read a state dict that `save` wrote: an ordered dict of names to Variables (no gradient), on the CPU."""
    with np.load(f, allow_pickle=False) as archive:
        return collections.OrderedDict((key, Variable(archive[key], requires_grad=False)) for key in archive.files)
