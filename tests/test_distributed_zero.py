"""ZeRO stages 1 and 2 (tinypytorch.distributed.zero): parameters after N Adam steps on two processes equal plain
DistributedDataParallel's (the package's and torch's, on the same data in the same processes); the bytes each rank
holds equal ZeRO's accounting for float32 Adam: 4 + 4 + 8 bytes a parameter plain, 4 + 4 + 8/N at stage 1,
4 + (4 + 8)/N at stage 2.
"""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
from tinypytorch.distributed.zero import ZeroDataParallel, optimizer_state_bytes  # noqa: E402

TIMEOUT = 30
X = np.random.default_rng(0).standard_normal((8, 4))
Y = np.random.default_rng(1).standard_normal((8, 3))


def model(seed, dtype=tp.float64, sizes=(4, 5, 3)):
    tp.manual_seed(seed)
    return tp.nn.Sequential(tp.nn.Linear(sizes[0], sizes[1], dtype=dtype), tp.nn.Tanh(),
                            tp.nn.Linear(sizes[1], sizes[2], dtype=dtype))


def twin(m):
    t = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    with torch.no_grad():
        for p_t, p in zip(t.parameters(), m.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    return t


def steps(wrapped, optimizer, fw, rank, n=3):
    half = slice(4 * rank, 4 * rank + 4)
    for _ in range(n):
        loss = ((wrapped(fw.tensor(X[half])) - fw.tensor(Y[half])) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def zero_runs(rank):
    out = {}
    for stage in (1, 2):
        zero = ZeroDataParallel(model(seed=rank), tp.optim.Adam, stage=stage, lr=0.05)  # rank 0's weights win
        steps(zero, zero, tp, rank)
        out[f"stage {stage}"] = [p.data.copy() for p in zero.module.parameters()]
    ddp = tp.nn.parallel.DistributedDataParallel(model(seed=rank))
    steps(ddp, tp.optim.Adam(ddp.parameters(), lr=0.05), tp, rank)
    out["ddp"] = [p.data.copy() for p in ddp.parameters()]
    ddp_t = torch.nn.parallel.DistributedDataParallel(twin(model(seed=rank)))
    steps(ddp_t, torch.optim.Adam(ddp_t.parameters(), lr=0.05), torch, rank)
    out["torch ddp"] = [p.detach().numpy().copy() for p in ddp_t.parameters()]
    return out


def test_zero_stages_1_and_2_equal_plain_ddp_and_torchs():
    for rank, out in enumerate(dist.spawn(zero_runs, 2, timeout=TIMEOUT)):
        for name in ("stage 1", "stage 2", "ddp"):
            for ours, theirs in zip(out[name], out["torch ddp"], strict=True):
                np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14, err_msg=f"rank {rank}: {name}")


def memory_runs(rank):
    """Bytes held after a step (gradients still there) by float32 Adam, plain DDP and ZeRO 1 and 2; sizes that N
    divides, so that no piece is padded."""
    x = np.ones((2, 8), np.float32)
    held = {}
    ddp = tp.nn.parallel.DistributedDataParallel(model(0, tp.float32, (8, 16, 4)))
    adam = tp.optim.Adam(ddp.parameters())
    ddp(tp.tensor(x)).sum().backward()
    adam.step()
    params = list(ddp.parameters())
    held["plain"] = {"parameters": sum(p.data.nbytes for p in params),
                     "gradients": sum(p.grad.data.nbytes for p in params), "optimizer state": optimizer_state_bytes(adam)}
    for stage in (1, 2):
        zero = ZeroDataParallel(model(0, tp.float32, (8, 16, 4)), tp.optim.Adam, stage=stage)
        zero(tp.tensor(x)).sum().backward()
        zero.step()
        held[f"stage {stage}"] = zero.bytes_held()
    return held, sum(p.data.size for p in params)


@pytest.mark.parametrize("n", [1, 2])
def test_bytes_per_rank_follow_zeros_accounting(n):
    for held, psi in dist.spawn(memory_runs, n, timeout=TIMEOUT):
        assert psi == 8 * 16 + 16 + 16 * 4 + 4
        expected = {"plain": (4 * psi, 4 * psi, 8 * psi), "stage 1": (4 * psi, 4 * psi, 8 * psi // n),
                    "stage 2": (4 * psi, 4 * psi // n, 8 * psi // n)}
        for name, (p, g, o) in expected.items():
            assert held[name] == {"parameters": p, "gradients": g, "optimizer state": o}, name
