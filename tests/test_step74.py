"""Step 74: ZeRO's three stages and fully_shard, as the page shows them: the bytes each rank holds (measured on the
page at N = 1 and 2) against what torch's DDP, ZeroRedundancyOptimizer and fully_shard hold with Adam on a twin model,
and against NumPy's allocations traced (tests/zero_memory.py); stage 3's sequence of gathers and frees around forward and
backward; the page's check (shards' shapes as torch's, parameters after the steps as one process's). The package's own
code is tested in tests/test_distributed_zero.py and tests/test_distributed_fsdp.py."""
import numpy as np
import pytest
import torch

from reference import assert_comparison_is_not_blind
from steploader import load_step

pytestmark = [pytest.mark.step74, pytest.mark.torch, pytest.mark.distributed]
dist = pytest.importorskip("tinypytorch.distributed")
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402

from zero_memory import PSI, held_by_each_setup  # noqa: E402

step = load_step(74)
TIMEOUT = 60


def twin():
    """torch's copy of the page's float32 network (its weights copied)."""
    ours = step.mlp()
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 64))
    with torch.no_grad():
        for p_t, p in zip(theirs.parameters(), ours.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    return theirs


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def torch_bytes(params, optimizer_state):
    """(parameters, gradients, optimizer state) bytes this rank holds: local shards, not the 0-d step counts."""
    params = list(params)
    return {"parameters": sum(local(p).nbytes for p in params),
            "gradients": sum(local(p.grad).nbytes for p in params if p.grad is not None),
            "optimizer state": sum(local(v).nbytes for state in optimizer_state.values() for v in state.values()
                                   if torch.is_tensor(v) and v.dim() > 0)}


def torch_holdings(rank):
    """After one Adam step on this rank's two samples (the page's): torch's DDP, DDP with ZeroRedundancyOptimizer (its
    ZeRO-1), and fully_shard on every Linear and the root."""
    x = torch.from_numpy(np.random.default_rng(rank).standard_normal((2, 64)).astype(np.float32))
    out = {}
    ddp = torch.nn.parallel.DistributedDataParallel(twin())
    adam = torch.optim.Adam(ddp.parameters())
    ddp(x).sum().backward()
    adam.step()
    out["plain DDP"] = torch_bytes(ddp.parameters(), adam.state)
    ddp = torch.nn.parallel.DistributedDataParallel(twin())
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam)
    ddp(x).sum().backward()
    zero.step()
    out["ZeroRedundancyOptimizer"] = torch_bytes(ddp.parameters(), zero.optim.state)
    model = twin()
    for layer in model[::2]:
        torch_fully_shard(layer)
    torch_fully_shard(model)
    adam = torch.optim.Adam(model.parameters())
    model(x).sum().backward()
    adam.step()
    out["fully_shard"] = torch_bytes(model.parameters(), adam.state)
    return out


@pytest.mark.parametrize("n", [1, 2])
def test_the_measured_bytes_per_rank_are_what_torch_holds(n):
    ours = step.measured[n]  # the page runs here, before the processes fork (they use its network)
    theirs = dist.spawn(torch_holdings, n, timeout=TIMEOUT)
    assert len(ours) == n
    for rank in range(n):
        assert ours[rank]["plain DDP"] == theirs[rank]["plain DDP"]
        assert ours[rank]["ZeRO-3"] == theirs[rank]["fully_shard"]
        for setup in ("ZeRO-1", "ZeRO-2"):  # the parameters whole, as DDP's
            assert ours[rank][setup]["parameters"] == theirs[rank]["plain DDP"]["parameters"]
        assert ours[rank]["ZeRO-1"]["gradients"] == theirs[rank]["ZeroRedundancyOptimizer"]["gradients"]
    # torch's ZeRO-1 gives each rank whole parameters, not slices (here one layer each, 16,640 and 16,448 elements), so
    # only the ranks' sum is the package's: one copy of Adam's state between the ranks
    for setup in ("ZeRO-1", "ZeRO-2", "ZeRO-3"):
        assert sum(t[setup]["optimizer state"] for t in ours) == sum(
            t["ZeroRedundancyOptimizer"]["optimizer state"] for t in theirs) == 8 * PSI
    if n == 2:
        assert theirs[0]["fully_shard"]["parameters"] == 2 * PSI  # half a copy each: the accounting, from torch


def test_the_counted_bytes_are_numpys_allocations():
    """tracemalloc's NumPy domain, held between steps beyond what was held before the model: the page's count, plus
    the optimizer's pieces of the parameters that stages 1 and 2 copy (4/N bytes a parameter), plus a few bytes
    (Adam's 0-d step counts)."""
    assert step.PSI == PSI  # (the page runs here, before the processes fork)
    for rank, table in enumerate(dist.spawn(held_by_each_setup, 2, timeout=TIMEOUT)):
        for setup in step.SETUPS:
            counted = sum(step.measured[2][rank][setup].values())
            pieces = 4 * PSI // 2 if setup in ("ZeRO-1", "ZeRO-2") else 0
            assert 0 <= table[setup]["traced"] - pieces - counted <= 512, (rank, setup)


def test_the_accounting_at_four_ranks_is_zeros():
    """The ZeRO paper's analysis with float32 Adam (K = 8, 4-byte gradients): 16, 8 + 8/4, 4 + 12/4, 16/4."""
    assert [sum(step.accounting(4)[s]) for s in step.SETUPS] == [16, 10, 7, 4]
    for n in range(1, 9):  # stage 3's ranks hold one copy between them
        assert sum(step.accounting(n)["ZeRO-3"]) * n == sum(step.accounting(n)["plain DDP"])


def test_stage_3_gathers_before_each_layer_frees_after_and_gathers_again_for_backward():
    events = [(what, k) for what, k, _ in step.events]
    forward = [("all-gather", 0), ("forward", 0), ("free", 0), ("all-gather", 2), ("forward", 2), ("free", 2)]
    backward = [("all-gather", 2), ("backward", 2), ("reduce-scatter", 2), ("free", 2),
                ("all-gather", 0), ("backward", 0), ("reduce-scatter", 0), ("free", 0)]
    assert events == forward + backward and step.n_forward == len(forward)
    layer_bytes = {0: 4 * (64 * 256 + 256), 2: 4 * (256 * 64 + 64)}
    for what, k, held in step.events:  # one layer whole at a time, never two
        assert held == (0 if what == "free" else layer_bytes[k]), (what, k, held)
    assert step.shards == 4 * PSI // 2
    assert step.layers == {0: "Linear(64, 256)", 2: "Linear(256, 64)"}


def test_the_pages_check_shards_as_torch_and_trains_as_one_process():
    chunks = {0: [(3, 4), (3,), (2, 5), (2,), (1, 3), (1,)], 1: [(2, 4), (2,), (1, 5), (1,), (0, 3), (0,)]}
    for rank, out in enumerate(step.runs):  # torch.chunk's cut of 5, 3 and 1 rows in two
        assert out["shapes", "tinypytorch"] == out["shapes", "torch"] == chunks[rank]
        for name in ("ZeRO-1", "ZeRO-2", "fully_shard (tinypytorch)", "fully_shard (torch)"):
            for p, p_t in zip(out[name], step.alone["torch"], strict=True):
                np.testing.assert_allclose(p, p_t, rtol=1e-12, atol=1e-14, err_msg=f"rank {rank}: {name}")
    # one rank alone on its half is not the whole batch: the reduce-scatters are what make them equal
    model = step.small(torch)
    step.train(model, torch.optim.Adam(model.parameters(), lr=0.05), torch, slice(0, 4))
    assert not step.equal(step.whole(model.parameters()), step.alone["torch"])


def test_the_pages_comparison_is_not_blind():
    assert_comparison_is_not_blind(step.equal)
