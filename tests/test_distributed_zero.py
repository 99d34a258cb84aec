"""ZeRO stages 1 and 2 (tinypytorch.distributed.zero): parameters after N Adam steps on two processes equal plain
DistributedDataParallel's (the package's and torch's, on the same data in the same processes). The bytes each rank
holds (ZeRO's accounting for float32 Adam: 4 + 4 + 8 bytes a parameter plain, 4 + 4 + 8/N at stage 1, 4 + (4 + 8)/N at stage 2, (4 + 4 + 8)/N
at stage 3) are measured for all four in one table: tests/zero_memory.py, checked in tests/test_distributed_fsdp.py.
"""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
from tinypytorch.distributed.zero import ZeroDataParallel  # noqa: E402

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
