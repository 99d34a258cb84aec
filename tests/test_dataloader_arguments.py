"""PyTorch's DataLoader arguments beyond step 51's: num_workers (with prefetch_factor and persistent_workers),
collate_fn, pin_memory, worker_init_fn and generator.

The package loads every sample in the main process, so num_workers changes nothing but what PyTorch checks: its
batches must be PyTorch's with two worker processes, batch for batch, in the same order. torch 2.13 gives every
expected value and message here."""
import collections
import re
import warnings

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import cuda
from tinypytorch.utils.data import DataLoader, Dataset

pytestmark = [pytest.mark.torch, pytest.mark.step51]

PAGE = "see the page 'tinypytorch for PyTorch users' (book/pytorch_users.md), section 'What is not there'"


class Samples(Dataset):
    """Sample i: a dict of a float vector, an int label and a Python number, all computed from i (no randomness,
    so worker processes and the main process load the same thing)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": np.arange(3.0) + i, "label": np.int64(i % 3), "weight": 0.5 * i}


def plain(batch):
    """A batch of either framework as nested Python lists and dicts of NumPy arrays."""
    if isinstance(batch, dict):
        return {key: plain(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [plain(value) for value in batch]
    if isinstance(batch, torch.Tensor):
        return (batch.numpy(), str(batch.dtype))
    if isinstance(batch, tinypytorch.Variable):
        return (cuda.as_numpy(batch.data), str(batch.dtype))
    return batch


def assert_same_batches(ours, theirs):
    ours, theirs = [plain(b) for b in ours], [plain(b) for b in theirs]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        flat_a, flat_b = _leaves(a), _leaves(b)
        assert len(flat_a) == len(flat_b)
        for (x, x_dtype), (y, y_dtype) in zip(flat_a, flat_b):
            assert x_dtype == y_dtype
            np.testing.assert_array_equal(x, y)


def _leaves(value):
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, list) and not (len(value) == 2 and isinstance(value[1], str)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [tuple(value)]


@pytest.mark.parametrize("batch_size, drop_last", [(4, False), (4, True), (3, False), (16, False)])
def test_two_workers_give_torchs_batches_with_two_workers_in_the_same_order(batch_size, drop_last):
    theirs = list(torch.utils.data.DataLoader(Samples(10), batch_size=batch_size, drop_last=drop_last,
                                              num_workers=2, prefetch_factor=3, persistent_workers=True))
    loader = DataLoader(Samples(10), batch_size=batch_size, drop_last=drop_last, num_workers=2, prefetch_factor=3,
                        persistent_workers=True)
    assert_same_batches(list(loader), theirs)
    assert_same_batches(list(loader), theirs)  # a second epoch, as persistent workers would give it
    assert_same_batches(list(DataLoader(Samples(10), batch_size=batch_size, drop_last=drop_last)), theirs)
    assert len(loader) == len(theirs)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 3, True)


def test_with_workers_a_shuffled_epoch_is_the_epoch_without_them():
    orders = []
    for workers in (0, 3):
        tinypytorch.manual_seed(7)
        loader = DataLoader(Samples(9), batch_size=4, shuffle=True, num_workers=workers)
        orders.append([b["weight"].data.tolist() for _ in range(2) for b in loader])
    assert orders[0] == orders[1] and sorted(orders[0][0] + orders[0][1] + orders[0][2]) == [0.5 * i for i in range(9)]


def test_the_default_prefetch_factor_is_torchs():
    assert DataLoader(Samples(4), num_workers=2).prefetch_factor == torch.utils.data.DataLoader(
        Samples(4), num_workers=2).prefetch_factor == 2
    assert DataLoader(Samples(4)).prefetch_factor is torch.utils.data.DataLoader(Samples(4)).prefetch_factor is None


@pytest.mark.parametrize("arguments", [
    {"num_workers": -1},
    {"prefetch_factor": 2},
    {"persistent_workers": True},
    {"num_workers": 2, "prefetch_factor": -1},
], ids=["negative workers", "prefetch without workers", "persistent without workers", "negative prefetch"])
def test_worker_arguments_are_refused_as_torch_refuses_them(arguments):
    with pytest.raises(ValueError) as expected:
        torch.utils.data.DataLoader(Samples(4), **arguments)
    with pytest.raises(ValueError, match=f"^{re.escape(str(expected.value))}$"):
        DataLoader(Samples(4), **arguments)


def test_a_worker_init_fn_with_workers_is_refused_since_no_worker_runs_it():
    called = []
    with pytest.raises(NotImplementedError) as error:
        DataLoader(Samples(4), num_workers=2, worker_init_fn=called.append)
    assert str(error.value).startswith("DataLoader: worker_init_fn runs in each worker process")
    assert str(error.value).endswith(PAGE)
    # without workers torch never calls it, and neither does the package
    assert len(list(DataLoader(Samples(4), worker_init_fn=called.append))) == 4
    assert len(list(torch.utils.data.DataLoader(Samples(4), worker_init_fn=called.append))) == 4
    assert called == []


def test_a_collate_fn_makes_the_batches_as_in_torch():
    def pairs(samples):
        return [(int(s["label"]), s["weight"]) for s in samples]

    for workers in (0, 2):
        ours = list(DataLoader(Samples(5), batch_size=2, collate_fn=pairs, num_workers=workers))
        theirs = list(torch.utils.data.DataLoader(Samples(5), batch_size=2, collate_fn=pairs, num_workers=workers))
        assert ours == theirs == [[(0, 0.0), (1, 0.5)], [(2, 1.0), (0, 1.5)], [(1, 2.0)]]

    def weights(samples):
        return tinypytorch.tensor([s["weight"] for s in samples])

    stacked = list(DataLoader(Samples(4), batch_size=2, collate_fn=weights))
    assert [b.data.tolist() for b in stacked] == [[0.0, 0.5], [1.0, 1.5]]
    with pytest.raises(TypeError, match="collate_fn must be callable"):
        DataLoader(Samples(4), collate_fn="stack")


def test_pin_memory_without_a_gpu_warns_as_torch_and_changes_nothing():
    previous = cuda.use_backend(None)
    try:
        for loader in (DataLoader, torch.utils.data.DataLoader):
            with pytest.warns(UserWarning) as caught:
                batches = list(loader(Samples(4), batch_size=2, pin_memory=True, num_workers=2))
            assert [str(w.message) for w in caught] == [
                "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't "
                "be used."]
            if loader is DataLoader:
                assert_same_batches(batches, list(DataLoader(Samples(4), batch_size=2)))
    finally:
        cuda.use_backend(*previous)


def test_pin_memory_copies_each_batch_into_page_locked_memory_then_to_the_device(xp, monkeypatch):
    if xp is np:
        pytest.skip("pinned memory is for a GPU: runs on the strict stand-in and on CuPy")
    pinned = []

    def empty_pinned(shape, dtype):
        pinned.append(original(shape, dtype))
        return pinned[-1]

    original = cuda.cupyx.empty_pinned
    monkeypatch.setattr(cuda.cupyx, "empty_pinned", empty_pinned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a GPU is there: no warning
        batch = next(iter(DataLoader(Samples(4), batch_size=2, pin_memory=True)))
        on_device = next(iter(DataLoader(Samples(4), batch_size=2, pin_memory=True, device="cuda")))
    assert len(pinned) == 6 and batch["x"].data is pinned[0] and batch["label"].data is pinned[1]
    np.testing.assert_array_equal(batch["x"].data, [[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    assert on_device["x"].device.type == "cuda" and on_device["x"].dtype == tinypytorch.float64
    np.testing.assert_array_equal(cuda.as_numpy(on_device["weight"]), [0.0, 0.5])


def test_a_numpy_generator_draws_the_shuffled_order_and_leaves_the_frameworks_alone():
    tinypytorch.manual_seed(0)
    state = tinypytorch.get_rng_state()
    epochs = []
    for _ in range(2):
        loader = DataLoader(Samples(8), batch_size=3, shuffle=True, generator=np.random.default_rng(5))
        epochs.append([b["weight"].data.tolist() for b in loader])
    assert epochs[0] == epochs[1]  # the same seed, the same order
    expected = (np.random.default_rng(5).permutation(8) * 0.5).tolist()
    assert sum(epochs[0], []) == expected and [len(b) for b in epochs[0]] == [3, 3, 2]
    assert tinypytorch.get_rng_state() == state  # nothing drawn from the framework's generator
    with pytest.raises(TypeError, match="generator must be a numpy.random.Generator"):
        DataLoader(Samples(4), shuffle=True, generator=torch.Generator())


def test_arguments_after_shuffle_are_keywords_where_torchs_fourth_is_a_sampler():
    with pytest.raises(TypeError):
        DataLoader(Samples(4), 2, False, True)  # torch would take True as its sampler
    assert collections.Counter(type(b).__name__ for b in DataLoader(Samples(4), 2, False, drop_last=True)) == {
        "dict": 2}
