"""The bytes each rank holds with float32 Adam: plain DDP and ZeRO stages 1, 2 (ZeroDataParallel) and 3 (fully_shard),
for N = 1, 2 and 4 processes on this machine; and, for N = 4, fully_shard's shards against torch's fully_shard's.

The measures are tests/zero_memory.py's (tests/test_distributed_fsdp.py checks them for N = 1 and 2). Run:
    python bench/memory_zero.py
"""
import pathlib
import sys

TESTS = str(pathlib.Path(__file__).resolve().parents[1] / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402

import tinypytorch as tp  # noqa: E402
import tinypytorch.distributed as dist  # noqa: E402
from tinypytorch.distributed.fsdp import fully_shard  # noqa: E402
from zero_memory import held_by_each_setup, markdown  # noqa: E402


def shards_both_ways(rank):
    """Rows 5, 3 and 1 on N ranks: the local shapes, and the whole parameters after 3 Adam steps, ours and torch's."""
    tp.manual_seed(0)
    ours = tp.nn.Sequential(tp.nn.Linear(4, 5, dtype=tp.float64), tp.nn.Tanh(), tp.nn.Linear(5, 3, dtype=tp.float64),
                            tp.nn.Tanh(), tp.nn.Linear(3, 1, dtype=tp.float64))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3), torch.nn.Tanh(),
                                 torch.nn.Linear(3, 1)).double()
    with torch.no_grad():
        for p_t, p in zip(theirs.parameters(), ours.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    for m, shard in ((ours, fully_shard), (theirs, torch_fully_shard)):
        for layer in m[::2]:
            shard(layer)
        shard(m)
    shapes = ([tuple(p.shape) for p in ours.parameters()], [tuple(p.to_local().shape) for p in theirs.parameters()])
    x = np.random.default_rng(rank).standard_normal((2, 4))
    for m, fw in ((ours, tp), (theirs, torch)):
        opt = fw.optim.Adam(m.parameters(), lr=0.05)
        for _ in range(3):
            (m(fw.tensor(x)) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
    gap = max(float(np.abs(p.full_tensor().numpy() - p_t.full_tensor().detach().numpy()).max())
              for p, p_t in zip(ours.parameters(), theirs.parameters(), strict=True))
    return shapes, gap


def main():
    tables = {}
    for n in (1, 2, 4):
        per_rank = dist.spawn(held_by_each_setup, n, timeout=120)
        tables[n] = per_rank[0]
    print(markdown(tables))
    for rank, (shapes, gap) in enumerate(dist.spawn(shards_both_ways, 4, timeout=120)):
        same = "the same" if shapes[0] == shapes[1] else shapes[1]
        print(f"N = 4, rank {rank}: shards {shapes[0]} (torch's {same}), "
              f"largest difference of the parameters after 3 Adam steps {gap:.1e}")


if __name__ == "__main__":
    main()
