"""Feeding a model minibatches (step 51), as PyTorch's `torch.utils.data`.

    Dataset        what can be indexed: dataset[i] is one sample, len(dataset) how many
    TensorDataset  a dataset over arrays of equal length: sample i is (a[i], b[i], ...)
    Subset         some samples of a dataset, by index; random_split makes them
    DataLoader     an iterable of minibatches: shuffled each epoch from the framework's generator
    default_collate  how a list of samples becomes one batch (PyTorch's rules)
    distributed    DistributedSampler: each process of a group takes its own share of the samples
"""
import collections.abc
import numbers
import warnings

import numpy as np

from tinypytorch import cuda, functions, random
from tinypytorch.core import Variable
from tinypytorch.factories import tensor_data
from tinypytorch.not_there import PAGE


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
    over, unless `drop_last`. Samples become a batch as PyTorch's `default_collate` makes them:
    a tuple (x, t) gives a list [x stacked, t stacked], its Variables on `device`.

    PyTorch's other arguments (no step), keyword-only here:

        collate_fn   makes a batch of a list of samples, in place of default_collate
        generator    a NumPy Generator (the kind the framework's generator is) that draws the shuffled
                     order in place of the framework's generator
        sampler      an iterable of sample indices (a DistributedSampler) that gives the order of the
                     samples in place of shuffle; the batches are its indices, batch_size at a time
        num_workers  PyTorch's worker processes: here every sample is loaded in the main process, so
                     the batches are the same, in the same order, as with num_workers=0 (PyTorch's are
                     too), and nothing loads faster. prefetch_factor and persistent_workers are checked
                     as PyTorch checks them and have no workers to act on. worker_init_fn, which
                     PyTorch runs in each worker, raises NotImplementedError with num_workers > 0
                     (there is no worker to run it in); with num_workers=0 PyTorch never calls it
                     either.
        pin_memory   each batch's arrays copied into page-locked host memory, which copies to a GPU
                     faster; without a GPU, PyTorch's warning, and nothing changes (as in PyTorch)

    `device` is the package's own: the batches' Variables are moved there.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, *, sampler=None, num_workers=0, collate_fn=None,
                 pin_memory=False, drop_last=False, worker_init_fn=None, generator=None, prefetch_factor=None,
                 persistent_workers=False, device="cpu"):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"DataLoader: dataset must support len() and indexing (a Dataset), "
                            f"got {type(dataset).__name__}")
        if not isinstance(batch_size, numbers.Integral) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size!r}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, int(batch_size), shuffle, drop_last
        self.device = cuda.device(device)
        self.num_workers, self.prefetch_factor = _workers(num_workers, prefetch_factor, persistent_workers,
                                                          worker_init_fn)
        self.persistent_workers, self.worker_init_fn = persistent_workers, worker_init_fn
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got {type(collate_fn).__name__}")
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError("DataLoader: generator must be a numpy.random.Generator (the framework's generators are "
                            f"NumPy's), got {type(generator).__name__}")
        self.generator, self.pin_memory = generator, bool(pin_memory)
        if sampler is not None and shuffle:  # no step: a sampler decides the order (PyTorch's words)
            raise ValueError("sampler option is mutually exclusive with shuffle")
        self.sampler = sampler  # no step: a DistributedSampler's share of the samples

    def __len__(self):
        """The number of batches in an epoch."""
        n = len(self.dataset) if self.sampler is None else len(self.sampler)  # no step: the sampler's share
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batches(self):
        """The sample indices of each batch of one epoch."""
        n = len(self.dataset)
        if self.sampler is not None:  # no step: the sampler's indices, in its order
            return _in_batches(np.fromiter(self.sampler, np.int64), self.batch_size, self.drop_last)
        if self.shuffle and self.generator is not None:  # no step: the loader's own generator draws the order
            return _in_batches(self.generator.permutation(n), self.batch_size, self.drop_last)
        order = random.default_generator().permutation(n) if self.shuffle else np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        return [order[i:i + self.batch_size].tolist() for i in range(0, stop, self.batch_size)]

    def __iter__(self):
        _check_pinning(self.pin_memory)  # no step: PyTorch's warning where no GPU can use pinned memory
        for indices in self.batches():
            yield self.collate([self.dataset[i] for i in indices])

    def collate(self, samples):
        """One batch of `samples` by PyTorch's `default_collate` rules, its Variables on the loader's device."""
        if self.collate_fn is not default_collate or self.pin_memory:  # no step: PyTorch's collate_fn, pin_memory
            batch = self.collate_fn(samples)
            return _to(_pinned(batch) if self.pin_memory and cuda.GPU else batch, self.device)
        return _to(default_collate(samples), self.device)


def default_collate(batch):
    """A list of samples as one batch, by the rules of PyTorch's `default_collate`:

        arrays, Variables   stacked along a new first axis (one shape), differentiably if one requires grad
        Python numbers      one array: float64 if the first is a float, else as tensor() infers (int64, bool)
        NumPy scalars       one array of their dtype
        strings             left as they are
        dicts               a dict: key k collates the samples' values at k
        tuples, lists       a list: field k collates field k of every sample (a namedtuple stays one)

    The arrays become Variables that need no gradient.
    """
    if not batch:
        raise IndexError("default_collate: the batch is empty")  # PyTorch's type (its batch[0] fails)
    first = batch[0]
    if isinstance(first, (Variable, *cuda.array_types)):
        return _stack(batch)
    if isinstance(first, (str, bytes)):
        return batch
    if isinstance(first, (numbers.Number, np.generic)):
        python_float = isinstance(first, float) and not isinstance(first, np.generic)
        return Variable(tensor_data(batch, np.float64 if python_float else None, "default_collate"),
                        requires_grad=False)
    if isinstance(first, collections.abc.Mapping):
        return _same_type(first, {key: default_collate([sample[key] for sample in batch]) for key in first})
    if not isinstance(first, collections.abc.Sequence):
        raise TypeError("default_collate: batch must contain arrays, Variables, numbers, dicts or lists; "
                        f"found {type(first).__name__}")
    if any(len(sample) != len(first) for sample in batch):
        raise RuntimeError("each element in list of batch should be of equal size")  # PyTorch's words
    fields = [default_collate(field) for field in zip(*batch)]  # a field of strings stays a tuple, as in torch
    return type(first)(*fields) if hasattr(first, "_fields") else fields  # a namedtuple, or a list


def _stack(values):
    """Arrays or Variables of one shape stacked along a new first axis, on the device they are on (torch.stack).

    Entries after the first may be anything `tensor` takes, as in torch."""
    values = [v if isinstance(v, (Variable, *cuda.array_types)) else tensor_data(v, None, "default_collate")
              for v in values]
    for i, v in enumerate(values):
        if v.shape != values[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(values[0].shape)} at "
                               f"entry 0 and {list(v.shape)} at entry {i}")  # PyTorch's words
    if any(isinstance(v, Variable) and v.requires_grad for v in values):  # the batch stays in the graph, as in torch
        return functions.concatenate([functions.reshape(v, (1, *v.shape)) for v in values])
    arrays = [v.data if isinstance(v, Variable) else v for v in values]
    if arrays[0].dtype.kind not in "biufc":
        raise TypeError("default_collate: batch must contain arrays, Variables, numbers, dicts or lists; "
                        f"found an array of dtype {arrays[0].dtype}")
    xp = cuda.get_array_module(*arrays)
    return Variable(xp.stack([xp.asarray(a) for a in arrays]), requires_grad=False)


def _same_type(mapping, items):
    """`items` in the mapping type of `mapping` where that type can be built from a dict (else a dict)."""
    try:
        return type(mapping)(items)
    except TypeError:
        return items


def _to(batch, device):
    """The Variables of a collated batch moved to `device`; lists, dicts and namedtuples walked."""
    return _each_variable(batch, lambda v: v.to(device))


def _each_variable(batch, change):
    """The batch with change(v) in place of each Variable v; lists, dicts and namedtuples walked."""
    if isinstance(batch, Variable):
        return change(batch)
    if isinstance(batch, collections.abc.Mapping):
        return _same_type(batch, {key: _each_variable(value, change) for key, value in batch.items()})
    if isinstance(batch, list):
        return [_each_variable(field, change) for field in batch]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(_each_variable(field, change) for field in batch))
    return batch  # strings


# ----- PyTorch's other DataLoader arguments (no step) -------------------------------------------------

def _workers(num_workers, prefetch_factor, persistent_workers, worker_init_fn):
    """(num_workers, prefetch_factor), checked in PyTorch's order and words. No worker process is started:
    the loader loads every sample in the main process, whatever num_workers says."""
    if not isinstance(num_workers, numbers.Integral):
        raise TypeError(f"DataLoader: num_workers must be an int, got {type(num_workers).__name__}")
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to "
                         "enable multiprocessing, otherwise set prefetch_factor to None.")
    if num_workers > 0 and prefetch_factor is None:
        prefetch_factor = 2  # PyTorch's default: batches loaded ahead per worker
    elif prefetch_factor is not None and not isinstance(prefetch_factor, numbers.Integral):
        raise TypeError(f"DataLoader: prefetch_factor must be an int, got {type(prefetch_factor).__name__}")
    elif prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if num_workers > 0 and worker_init_fn is not None:
        raise NotImplementedError("DataLoader: worker_init_fn runs in each worker process, and tinypytorch starts "
                                  "none: it loads every sample in the main process, with the batches num_workers=0 "
                                  f"gives; {PAGE}")
    return int(num_workers), prefetch_factor


def _in_batches(order, batch_size, drop_last):
    """The sample indices `order` cut into batches (the last one short, or dropped with drop_last)."""
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    return [order[i:i + batch_size].tolist() for i in range(0, stop, batch_size)]


def _check_pinning(pin_memory):
    if pin_memory and not cuda.GPU:  # PyTorch's warning, and as in PyTorch the batches stay as they are
        warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned memory "
                      "won't be used.", stacklevel=3)


def _pinned(batch):
    """The batch with each host array copied into page-locked memory, which copies to a GPU faster (PyTorch's
    pin_memory); device arrays, and Variables that require grad (a copy would leave the graph), as they are."""
    def pin(v):
        if v.requires_grad or not isinstance(v.data, np.ndarray):
            return v
        host = cuda.cupyx.empty_pinned(v.data.shape, v.data.dtype)
        host[...] = v.data
        return Variable(host, requires_grad=False)

    return _each_variable(batch, pin)


from tinypytorch.utils.data.distributed import DistributedSampler  # noqa: E402 (torch.utils.data.DistributedSampler)
