"""DistributedSampler: each of N processes takes its own share of a dataset's samples (PyTorch's).

Every rank draws the same order (a generator seeded with seed + epoch), pads it by repeating its
start until N divides it (or, with drop_last, cuts the tail), and keeps every N-th index from its rank
on: rank r of N gets positions r, r + N, r + 2N, ... So the ranks' shares are disjoint, equally long
(no rank waits at a collective for a batch the others do not have), and together cover the dataset.
`set_epoch` changes the order from one epoch to the next, the same on every rank.

The order is drawn by NumPy's generator, as the package's DataLoader draws its shuffle: the shares
follow PyTorch's rule, the shuffled order is not torch's (its randperm); without shuffle it is.
"""
import math
import numbers

import numpy as np


class DistributedSampler:
    """The indices of rank `rank`'s share of `dataset` among `num_replicas` processes (default: the group's)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from tinypytorch import distributed  # the group decides; only then is torch needed
            if not distributed.is_initialized():
                raise RuntimeError("Default process group has not been initialized, please make sure to call "
                                   "init_process_group.")  # PyTorch's words
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if not isinstance(rank, numbers.Integral) or rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:  # cut the tail, so that every share is whole
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:  # pad, so that every share is as long
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:  # the same order on every rank: the same seed
            order = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            order = list(range(n))
        if self.drop_last:
            order = order[:self.total_size]
        else:  # repeat the order's start until it is total_size long
            missing = self.total_size - n
            order += (order * math.ceil(missing / n))[:missing] if missing else []
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Shuffle differently in `epoch` (call it at the start of each epoch, on every rank)."""
        self.epoch = epoch
