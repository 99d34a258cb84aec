"""tinypytorch.distributed: the collectives on the package's tensors, checked against torch.distributed's on the same
data in the same processes; the launcher's failures (a rank that raises, ranks whose shapes disagree) end the run
within seconds with a clear error; DistributedSampler against torch's; the DataLoader's sampler; the engine's
end-of-backward callbacks.

Two processes on the loopback interface; every spawned run bounded by `timeout`.
"""
import time

import numpy as np
import pytest
import torch
import torch.distributed as torch_dist
import torch.utils.data as torch_data

import tinypytorch as tp
from tinypytorch.autograd.gradients import queue_callback

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
TIMEOUT = 30  # seconds, per spawned run


def collectives_both_ways(rank):
    """Each collective on package tensors and on torch tensors of the same values; returns {name: (ours, torch's)}."""
    world = dist.get_world_size()
    rng = np.random.default_rng(rank)
    out = {}

    a = rng.standard_normal((2, 3))
    x, x_t = tp.tensor(a.copy()), torch.tensor(a.copy())
    array, version = x.data, x._version
    dist.all_reduce(x)
    torch_dist.all_reduce(x_t)
    out["all_reduce"] = (x.numpy(), x_t.numpy())
    out["in place, version moved"] = (x.data is array and x._version == version + 1, True)

    strided = tp.tensor(a.copy()).T  # a transposed view: not contiguous, lent as a copy and written back
    base = strided.data.base
    dist.all_reduce(strided, op=dist.ReduceOp.MAX)
    out["all_reduce MAX of a strided view"] = (strided.numpy(), torch_reduced(a.T.copy(), torch_dist.ReduceOp.MAX))
    out["strided view still a view"] = (strided.data.base is base, True)

    f32 = tp.tensor(a.astype(np.float32) * (rank + 1))
    work = dist.all_reduce(f32, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    out["AVG, async, float32"] = (f32.numpy(), torch_reduced(a.astype(np.float32) * (rank + 1)) / world)

    b = tp.tensor(a.copy())
    b_t = torch.tensor(a.copy())
    dist.broadcast(b, src=1)
    torch_dist.broadcast(b_t, src=1)
    out["broadcast"] = (b.numpy(), b_t.numpy())

    ints = tp.tensor(np.arange(3) + 10 * rank)
    gathered = [tp.zeros(3, dtype=tp.int64) for _ in range(world)]
    gathered_t = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, ints)
    torch_dist.all_gather(gathered_t, torch.tensor(np.arange(3) + 10 * rank))
    out["all_gather int64"] = (np.stack([g.numpy() for g in gathered]), np.stack([g.numpy() for g in gathered_t]))

    into, into_t = tp.zeros(2 * world, 3, dtype=tp.float64), torch.zeros(2 * world, 3, dtype=torch.float64)
    dist.all_gather_into_tensor(into, tp.tensor(a[:2]))
    torch_dist.all_gather_into_tensor(into_t, torch.tensor(a[:2]))
    out["all_gather_into_tensor"] = (into.numpy(), into_t.numpy())

    c = rng.standard_normal((2 * world, 3))
    piece, piece_t = tp.zeros(2, 3, dtype=tp.float64), torch.zeros(2, 3, dtype=torch.float64)
    dist.reduce_scatter_tensor(piece, tp.tensor(c))
    torch_dist.reduce_scatter_tensor(piece_t, torch.tensor(c))
    out["reduce_scatter_tensor"] = (piece.numpy(), piece_t.numpy())

    chunks = [tp.tensor(c[2 * r:2 * r + 2]) for r in range(world)]
    piece2, piece2_t = tp.zeros(2, 3, dtype=tp.float64), torch.zeros(2, 3, dtype=torch.float64)
    dist.reduce_scatter(piece2, chunks)
    torch_dist.reduce_scatter(piece2_t, [torch.tensor(c[2 * r:2 * r + 2]) for r in range(world)])
    out["reduce_scatter"] = (piece2.numpy(), piece2_t.numpy())

    dist.barrier()
    out["rank, world size"] = ((dist.get_rank(), dist.get_world_size(), dist.is_initialized()), (rank, 2, True))
    return out


def torch_reduced(array, op=torch_dist.ReduceOp.SUM):
    t = torch.tensor(array)
    torch_dist.all_reduce(t, op=op)
    return t.numpy()


def test_collectives_equal_torch_distributed():
    for rank, results in enumerate(dist.spawn(collectives_both_ways, 2, timeout=TIMEOUT)):
        for name, (ours, theirs) in results.items():
            np.testing.assert_array_equal(ours, theirs, err_msg=f"rank {rank}: {name}")
            if isinstance(theirs, np.ndarray):
                assert np.asarray(ours).dtype == theirs.dtype, name


def future_of_an_all_reduce(rank):
    x = tp.tensor([1.0, 2.0]) * (rank + 1)
    seen = []
    work = dist.all_reduce(x, async_op=True)
    work.get_future().then(lambda future: seen.append(future.value()[0].tolist()))
    work.wait()
    deadline = time.monotonic() + 10  # the callback runs on gloo's thread, at or just after completion
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        work.get_future()
        late = "no error"
    except RuntimeError as error:
        late = str(error)
    return seen, x.data.tolist(), late


def test_an_async_collectives_future_runs_its_callback_with_the_reduced_values():
    for seen, reduced, late in dist.spawn(future_of_an_all_reduce, 2, timeout=TIMEOUT):
        assert reduced == [3.0, 6.0] and seen == [[3.0, 6.0]]  # 1 * x + 2 * x, as torch's all_reduce gives
        assert late.startswith("get_future: ask before wait()")


def fails_in_rank_1(rank):
    if rank == 1:
        time.sleep(0.5)  # rank 0 is waiting in its all-reduce by now
        raise ValueError("rank 1 cannot go on")
    dist.all_reduce(tp.ones(3))  # waits for rank 1, which never comes
    time.sleep(60)


def shapes_disagree(rank):
    dist.all_reduce(tp.ones(3 if rank == 0 else 5))


def test_a_rank_that_raises_ends_the_run_with_its_error():
    start = time.monotonic()
    with pytest.raises(dist.ProcessFailed, match="rank 1 raised ValueError: rank 1 cannot go on") as failure:
        dist.spawn(fails_in_rank_1, 2, timeout=TIMEOUT)
    assert failure.value.rank == 1
    assert time.monotonic() - start < 15


def test_shapes_that_disagree_raise_a_clear_error_not_a_hang():
    start = time.monotonic()
    with pytest.raises(dist.ProcessFailed, match=r"all_reduce: the ranks' calls do not match \(rank 0: all_reduce of "
                                                 r"shape \(3,\) float32, op SUM; rank 1: all_reduce of shape \(5,\)"):
        dist.spawn(shapes_disagree, 2, timeout=TIMEOUT)
    assert time.monotonic() - start < 15


def test_a_run_that_outlives_its_timeout_is_stopped():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        dist.spawn(lambda rank: time.sleep(60), 2, timeout=3)
    assert time.monotonic() - start < 10


def test_spawn_returns_each_ranks_result_and_takes_a_function_defined_anywhere():
    def local(rank, k):  # a closure: a forked child runs it as it is (a spawned one could not import it)
        return rank * k, dist.get_world_size()

    assert dist.spawn(local, 2, args=(10,), timeout=TIMEOUT) == [(0, 2), (10, 2)]


def test_what_gloo_cannot_move_is_refused_clearly():
    with pytest.raises(ValueError, match="backend 'nccl' is not available in tinypytorch"):
        dist.init_process_group("nccl")
    with pytest.raises(ValueError, match="all_reduce: the output tensor is read-only"):
        dist.collectives._Lent(np.broadcast_to(np.ones(1), (3,)), "all_reduce", written=True)
    with pytest.raises(TypeError, match="expected a tinypytorch tensor in host memory"):
        dist.collectives._Lent([1.0, 2.0], "broadcast", written=True)


# ----- DistributedSampler and the DataLoader's sampler ------------------------------------------------------------

@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (2, 4, False), (8, 2, False),
                                                    (7, 2, True), (1, 3, False)])
def test_distributed_sampler_equals_torchs_without_shuffle(n, replicas, drop_last):
    for rank in range(replicas):
        ours = tp.utils.data.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = torch_data.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("n, replicas, drop_last", [(10, 3, False), (10, 3, True), (9, 2, False)])
def test_distributed_sampler_shuffles_by_epoch_the_same_on_every_rank(n, replicas, drop_last):
    """torch's shuffled order is its randperm's; ours NumPy's. The rule around it is the same: every rank draws the same
    order for an epoch, pads or cuts it as torch does, and the shares are disjoint apart from the padding."""
    def shares(epoch, seed=0):
        samplers = [tp.utils.data.DistributedSampler(range(n), replicas, r, seed=seed, drop_last=drop_last)
                    for r in range(replicas)]
        for s in samplers:
            s.set_epoch(epoch)
        return [list(s) for s in samplers]

    lengths = [len(s) for s in (torch_data.DistributedSampler(range(n), replicas, r, drop_last=drop_last)
                                for r in range(replicas))]
    for epoch in range(3):
        ours = shares(epoch)
        assert [len(s) for s in ours] == lengths
        interleaved = [ours[i % replicas][i // replicas] for i in range(sum(lengths))]  # the order, taken back
        order = interleaved[:n] if not drop_last else interleaved
        assert len(set(order)) == len(order)  # a permutation (its head, with drop_last)
        if not drop_last:
            assert sorted(order) == list(range(n)) and interleaved[n:] == interleaved[:len(interleaved) - n]
    assert shares(0) == shares(0) and shares(0) != shares(1) and shares(0, seed=1) != shares(0)


def test_distributed_sampler_refuses_a_rank_out_of_range_as_torch():
    for sampler in (tp.utils.data.DistributedSampler, torch_data.DistributedSampler):
        with pytest.raises(ValueError, match=r"Invalid rank 3, rank should be in the interval \[0, 2\]"):
            sampler(range(5), num_replicas=3, rank=3)


def test_dataloader_takes_a_sampler_as_torchs():
    data = np.arange(20.0).reshape(10, 2)
    for drop_last in (False, True):
        ours = tp.utils.data.DataLoader(
            tp.utils.data.TensorDataset(data), batch_size=3, drop_last=drop_last,
            sampler=tp.utils.data.DistributedSampler(range(10), 2, 1, shuffle=False))
        theirs = torch_data.DataLoader(
            torch_data.TensorDataset(torch.tensor(data)), batch_size=3, drop_last=drop_last,
            sampler=torch_data.DistributedSampler(range(10), 2, 1, shuffle=False))
        assert len(ours) == len(theirs)
        for (b,), (b_t,) in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(b.numpy(), b_t.numpy())
    for loader in (tp.utils.data.DataLoader, torch_data.DataLoader):
        with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
            loader(range(4), shuffle=True, sampler=[0, 1])


# ----- the engine: a call at the end of the backward pass --------------------------------------------------------

def test_a_queued_callback_runs_once_after_every_hook_and_gradient_of_the_pass():
    w = tp.tensor([1.0, 2.0], requires_grad=True)
    v = tp.tensor([3.0], requires_grad=True)
    seen = []

    def finally_():
        seen.append(("callback", w.grad.numpy().tolist(), v.grad.numpy().tolist()))
        queue_callback(lambda: seen.append(("queued by a callback",)))

    def hook(p):
        seen.append(("hook", p.shape[0]))
        if len(seen) == 1:
            queue_callback(finally_)

    w.register_post_accumulate_grad_hook(hook)
    v.register_post_accumulate_grad_hook(hook)
    ((w * w).sum() * v).sum().backward()
    assert [s[0] for s in seen] == ["hook", "hook", "callback", "queued by a callback"]
    assert seen[2][1:] == ([6.0, 12.0], [5.0])
    seen.clear()
    (w.sum() * v).sum().backward()  # a callback belongs to one pass: it does not run again
    assert [s[0] for s in seen] == ["hook", "hook", "callback", "queued by a callback"]


def test_queue_callback_outside_backward_raises_as_torch():
    with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward pass."):
        queue_callback(print)
    with pytest.raises(RuntimeError, match="Final callbacks can only be installed during backward pass."):
        torch.autograd.Variable._execution_engine.queue_callback(print)
