"""Feeding a model minibatches (step 51), as PyTorch's `torch.utils.data`.

    Dataset        what can be indexed: dataset[i] is one sample, len(dataset) how many
    TensorDataset  a dataset over arrays of equal length: sample i is (a[i], b[i], ...)
    Subset         some samples of a dataset, by index; random_split makes them
    DataLoader     an iterable of minibatches: shuffled each epoch from the framework's generator
"""
import numbers

import numpy as np

from tinypytorch import cuda, random
from tinypytorch.core import Variable


class Dataset:
    """Base class: subclasses define `__getitem__(i)` (one sample) and `__len__()`."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")


class TensorDataset(Dataset):
    """Sample i is (arrays[0][i], arrays[1][i], ...): inputs and targets kept side by side."""

    def __init__(self, *arrays):
        arrays = [a.data if isinstance(a, Variable) else a for a in arrays]
        if not arrays or any(len(a) != len(arrays[0]) for a in arrays):
            raise ValueError(f"TensorDataset: size mismatch between arrays: {[len(a) for a in arrays]}")
        self.arrays = arrays

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def __len__(self):
        return len(self.arrays[0])


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths):
    """Subsets of the given lengths, of a permutation drawn from the framework's generator (PyTorch's)."""
    if sum(lengths) != len(dataset):
        raise ValueError("random_split: sum of input lengths does not equal the length of the input dataset!")
    order = random.default_generator().permutation(len(dataset))
    bounds = np.cumsum([0, *lengths])
    return [Subset(dataset, order[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:])]


class DataLoader:
    """Minibatches of `dataset`: `for x, t in loader` gives Variables of `batch_size` samples stacked.

    With `shuffle` every epoch (every `for` loop) visits the samples in a new order, drawn from
    the framework's generator (so `manual_seed` fixes it). The last batch holds what is left
    over, unless `drop_last`. A sample is a tuple of arrays or numbers; field k of the batch
    stacks field k of its samples, on `device`.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, device="cpu"):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"DataLoader: dataset must support len() and indexing (a Dataset), "
                            f"got {type(dataset).__name__}")
        if not isinstance(batch_size, numbers.Integral) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size!r}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, int(batch_size), shuffle, drop_last
        self.device = cuda.device(device)

    def __len__(self):
        """The number of batches in an epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batches(self):
        """The sample indices of each batch of one epoch."""
        n = len(self.dataset)
        order = random.default_generator().permutation(n) if self.shuffle else np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        return [order[i:i + self.batch_size].tolist() for i in range(0, stop, self.batch_size)]

    def __iter__(self):
        for indices in self.batches():
            yield self.collate([self.dataset[i] for i in indices])

    def collate(self, samples):
        """Field k of the batch: field k of every sample, stacked along a new first axis (default_collate)."""
        fields = zip(*[s if isinstance(s, tuple) else (s,) for s in samples])
        batch = tuple(Variable(cuda.to_device(_stack(field), self.device), requires_grad=False) for field in fields)
        return batch if len(batch) > 1 else batch[0]


def _stack(values):
    """Arrays, Variables or numbers stacked into one array, on the device they are on."""
    values = [v.data if isinstance(v, Variable) else v for v in values]
    xp = cuda.get_array_module(*values)
    return xp.stack([xp.asarray(v) for v in values])
