"""Step 74's lesson: the exercises' solutions (the bytes a rank holds on N ranks, a reduce-scatter from an all-reduce
and a slice, the rows fully_shard gives each rank), checked against torch: its fully_shard and DDP with Adam, its
reduce_scatter_single, its chunk and the shards of its fully_shard on the page."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steploader import load_step

pytestmark = [pytest.mark.step74, pytest.mark.torch]
step = load_step(74)


@pytest.mark.distributed
@pytest.mark.parametrize("n", [1, 2])
def test_the_bytes_per_rank_are_torchs_and_the_pages_measures(n):
    """Plain DDP and ZeRO-3 against torch's DDP and fully_shard with Adam (tests/test_step74.py's twin of the page's
    network); every stage against the page's measures."""
    dist = pytest.importorskip("tinypytorch.distributed")
    from test_step74 import torch_holdings

    predicted = step.bytes_per_rank(step.PSI, n)
    for rank, theirs in enumerate(dist.spawn(torch_holdings, n, timeout=60)):
        assert predicted["plain DDP"] == sum(theirs["plain DDP"].values())
        assert predicted["ZeRO-3"] == sum(theirs["fully_shard"].values())
        for setup in step.SETUPS:
            assert predicted[setup] == sum(step.measured[n][rank][setup].values()), (rank, setup)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_the_bytes_per_rank_follow_zeros_accounting(n):
    predicted = step.bytes_per_rank(step.PSI, n)
    assert predicted["ZeRO-3"] * n == predicted["plain DDP"]  # one copy between the ranks
    assert predicted["ZeRO-1"] - predicted["ZeRO-2"] == 4 * step.PSI * (1 - 1 / n)  # the gradient, sharded
    assert predicted["ZeRO-2"] - predicted["ZeRO-3"] == 4 * step.PSI * (1 - 1 / n)  # the parameters, sharded
    assert predicted["plain DDP"] - predicted["ZeRO-1"] == 8 * step.PSI * (1 - 1 / n)  # Adam's moments, sharded


def by_hand_and_torchs(rank, length):
    dist = pytest.importorskip("tinypytorch.distributed")
    import tinypytorch as tp

    mine = np.random.default_rng(10 + rank).standard_normal(length)
    theirs = torch.zeros(length // dist.get_world_size(), dtype=torch.float64)
    torch.distributed.reduce_scatter_single(theirs, torch.from_numpy(mine.copy()))
    return step.reduce_scatter_by_hand(tp.tensor(mine)).numpy(), theirs.numpy(), mine


@pytest.mark.distributed
def test_the_reduce_scatter_by_hand_equals_torchs():
    dist = pytest.importorskip("tinypytorch.distributed")
    assert callable(step.reduce_scatter_by_hand)  # the page runs here, before the processes fork (they use it)
    results = dist.spawn(by_hand_and_torchs, 2, args=(10,), timeout=60)
    total = sum(mine for _, _, mine in results)
    for rank, (ours, theirs, _) in enumerate(results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)
        np.testing.assert_allclose(ours, total[5 * rank:5 * rank + 5], rtol=1e-15, atol=0)  # piece `rank` of the sum


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9))
def test_the_rows_of_each_rank_are_torch_chunks(rows, n):
    chunks = torch.arange(rows).chunk(n)
    theirs = [(int(c[0]), int(c[-1]) + 1) for c in chunks] + [(rows, rows)] * (n - len(chunks))
    assert [step.rows_of(rows, n, r) for r in range(n)] == theirs


@pytest.mark.distributed
def test_the_rows_of_each_rank_are_the_shards_of_torchs_fully_shard_on_the_page():
    for rank, out in enumerate(step.runs):
        for shape, full in zip(out["shapes", "torch"], (5, 5, 3, 3, 1, 1), strict=True):
            start, stop = step.rows_of(full, 2, rank)
            assert shape[0] == stop - start
