"""Step 73's lesson: the exercises' solutions (the ring all-reduce counted, the number of DDP buckets for a cap, each
rank's share of a dataset), checked against torch, and the page's own check (the package's DDP against torch's DDP
and one process)."""
import numpy as np
import pytest
import torch
import torch.utils.data.distributed as torch_data_dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from reference import assert_comparison_is_not_blind
from steploader import load_step

pytestmark = [pytest.mark.step73, pytest.mark.torch]
step = load_step(73)


@pytest.mark.parametrize("n, pieces", [(2, 1), (3, 4), (4, 3), (8, 2)])
def test_the_ring_sums_as_torch_and_each_rank_sends_2_n_minus_1_over_n_of_the_bytes(n, pieces):
    arrays = [np.random.default_rng(r).standard_normal(n * pieces) for r in range(n)]
    results, sent = step.ring_all_reduce(arrays)
    total = torch.stack([torch.from_numpy(a) for a in arrays]).sum(0).numpy()
    for result in results:
        np.testing.assert_allclose(result, total, rtol=1e-12, atol=1e-12)
    nbytes = arrays[0].nbytes
    assert sent == [2 * (n - 1) * nbytes // n] * n  # 2(N-1)/N × B, exactly: N divides the length


def torch_buckets(rank, sizes, caps):
    """For each cap: the number of buckets torch's DDP hands to a communication hook in its third iteration (after it
    rebuilt them in the order the gradients arrived), on a chain of Linear-like parameters of `sizes` elements."""
    counts = []
    for cap in caps:
        torch.manual_seed(0)
        params = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(size)) for size in sizes])

        class Chain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.params = params

            def forward(self, x):
                for p in self.params:  # each parameter used in turn: backward meets them last first
                    x = (x * p.sum()).tanh()
                return x

        ddp = torch.nn.parallel.DistributedDataParallel(Chain(), bucket_cap_mb=cap / 2**20)
        seen = []

        def hook(state, bucket):
            seen.append(bucket.index())
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, hook)
        for _ in range(3):
            seen.clear()
            ddp(torch.ones(2)).sum().backward()
        counts.append(len(seen))
    return counts


@pytest.mark.distributed
def test_the_bucket_count_equals_torch_ddps_buckets():
    dist = pytest.importorskip("tinypytorch.distributed")
    sizes = [300, 7, 64, 1, 1000, 5, 40]  # float32 elements, in the model's order
    caps = [1, 100, 500, 1200, 4000, 10**6]  # bytes
    counts = dist.spawn(torch_buckets, 2, args=(sizes, caps), timeout=60)[0]
    assert counts == [step.bucket_count([4 * s for s in sizes], cap) for cap in caps]
    assert len(set(counts)) >= 4  # the caps make different numbers of buckets


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 6), st.data())
def test_each_ranks_share_equals_torchs_distributed_sampler(n, world, data):
    rank = data.draw(st.integers(0, world - 1))
    theirs = list(torch_data_dist.DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
    assert step.share(n, world, rank) == theirs


@pytest.mark.distributed
def test_the_pages_check_compared_both_frameworks_and_one_process():
    assert len(step.runs) == 2
    for ours, theirs in step.runs:
        assert step.equal(ours, theirs) and step.equal(ours, step.alone)
    assert step.equal(step.alone, step.alone_torch)


def test_the_pages_comparison_is_not_blind():
    assert_comparison_is_not_blind(step.equal)
