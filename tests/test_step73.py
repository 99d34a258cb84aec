"""Step 73: data parallel from hooks, as the page shows it: the collectives' results against torch.distributed's on
the same data, the page model's buckets against the ones torch's DDP builds, the run on two processes against one
process, the measured timeline's order (each bucket launched by its layer's last gradient, in order, during
backward), and no_sync's single averaging. tests/test_distributed*.py test the package's distributed code itself."""
import numpy as np
import pytest
import torch
import torch.distributed as torch_dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from steploader import load_step

pytestmark = [pytest.mark.step73, pytest.mark.torch, pytest.mark.distributed]
dist = pytest.importorskip("tinypytorch.distributed")
step = load_step(73)


def torch_collectives(rank):
    """The page's collectives, on torch tensors, with torch.distributed."""
    def mine():
        return torch.tensor([1.0, 2.0, 3.0, 4.0]) * (rank + 1)

    summed, copied, piece = mine(), mine(), torch.zeros(2)
    gathered = [torch.zeros(4), torch.zeros(4)]
    torch_dist.all_reduce(summed)
    torch_dist.broadcast(copied, src=0)
    torch_dist.all_gather(gathered, mine())
    torch_dist.reduce_scatter_tensor(piece, mine())
    return {"holds": mine(), "all_reduce": summed, "broadcast": copied, "all_gather": torch.cat(gathered),
            "reduce_scatter": piece}


def test_the_pages_collectives_give_what_torch_distributed_gives():
    ours, theirs = dist.spawn(step.collectives, 2, timeout=30), dist.spawn(torch_collectives, 2, timeout=30)
    for mine, torchs in zip(ours, theirs, strict=True):
        assert mine.keys() == torchs.keys()
        for name in mine:
            np.testing.assert_array_equal(mine[name].numpy(), torchs[name].numpy(), err_msg=name)
    assert not np.array_equal(ours[0]["reduce_scatter"].numpy(), ours[1]["reduce_scatter"].numpy())


def torch_page_buckets(rank):
    """The shapes in each bucket torch's DDP hands to a communication hook, for the page's model and cap, once it
    has rebuilt its buckets (third iteration)."""
    ddp = torch.nn.parallel.DistributedDataParallel(step.torch_twin(step.make_model(0)), bucket_cap_mb=512 / 2**20)
    seen = []
    ddp.register_comm_hook(None, lambda state, bucket: (seen.append([tuple(p.shape) for p in bucket.parameters()]),
                                                        allreduce_hook(state, bucket))[1])
    for _ in range(3):
        seen.clear()
        ddp(torch.from_numpy(step.X)).sum().backward()
    return seen


def test_the_page_models_buckets_are_torch_ddps():
    reducer = step.Reducer(list(step.make_model(0).parameters()), 512, None, 2, False)  # the page's cap, 512 bytes
    ours = [[tuple(p.shape) for p in bucket.params] for bucket in reducer.buckets]
    theirs = dist.spawn(torch_page_buckets, 2, timeout=30)[0]
    assert [sorted(b) for b in ours] == [sorted(b) for b in theirs]
    assert len(ours) == 3 and [name.split(".")[0] for b in step.ranks[0]["buckets"] for name in b] == [
        "4", "4", "2", "2", "0", "0"]


def test_two_processes_on_halves_train_as_one_on_the_whole_batch():
    first = [p.detach().numpy().copy() for p in step.make_model(0).parameters()]
    for run in step.ranks:
        assert step.equal(run["trained"], step.alone)
        assert not step.equal(run["trained"], first)  # training moved the parameters
    assert sorted(step.ranks[0]["share"] + step.ranks[1]["share"]) == list(range(16))
    # one rank on its half alone is not the whole batch: the averaging is what makes them equal
    half = step.ranks[0]["share"]
    assert not step.equal(step.train(step.make_model(0), step.X[half], step.Y[half]), step.alone)


def test_the_timeline_launches_each_bucket_at_its_layers_last_gradient_in_order_during_backward():
    events, backward, layers = step.events, step.backward, step.layers
    assert layers == [["6"], ["4"], ["2"], ["0"]]
    grads = {name: t for what, name, t in events if what == "grad"}
    launches = [(k, t) for what, k, t in events if what == "launch"]
    dones = {k: t for what, k, t in events if what == "done"}
    assert [k for k, _ in launches] == [0, 1, 2, 3] and sorted(dones) == [0, 1, 2, 3]
    assert len(grads) == 8 and all(0 <= t <= backward for t in grads.values())
    for k, t in launches:
        ready = max(grads[f"{layers[k][0]}.weight"], grads[f"{layers[k][0]}.bias"])
        others = [g for name, g in grads.items() if name.split(".")[0] not in layers[k]]
        assert ready <= t <= dones[k], k
        if k < 3:  # a layer below is still to come: the bucket travels while backward computes it
            assert t < max(others), k


def test_no_sync_starts_no_all_reduce_and_the_next_backward_averages_the_sum():
    results = dist.spawn(step.accumulated, 2, timeout=30)
    whole = step.torch_twin(step.make_model(0))
    ((whole(torch.from_numpy(step.X)) - torch.from_numpy(step.Y)) ** 2).mean().backward()
    for inside, after, grads in results:
        assert (inside, after) == (0, 3)
        for g, p in zip(grads, whole.parameters(), strict=True):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-12, atol=1e-14)
