"""ZeRO stage 3 (tinypytorch.distributed.fsdp.fully_shard) against torch's fully_shard (FSDP2) on a twin model with
the same data in the same two processes, and against plain DistributedDataParallel: the shards each rank holds
(torch.chunk's cut: 5 rows are 3 + 2, one row is 1 + 0), the reduce-scattered gradients, the parameters after N steps
of SGD and Adam, gradient accumulation over two backward passes; and the bytes each rank holds, one table for plain DDP
and ZeRO stages 1, 2 and 3 (tests/zero_memory.py), with the whole parameters freed after forward.
"""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402

from tinypytorch.distributed.fsdp import FSDPModule, ShardedParameter, fully_shard  # noqa: E402
from zero_memory import PSI, SETUPS, SIZES, expected, held_by_each_setup  # noqa: E402

TIMEOUT = 30
STEPS = 3
X = np.random.default_rng(0).standard_normal((8, 4))
Y = np.random.default_rng(1).standard_normal((8, 1))
OPTIMIZERS = {"sgd": ("SGD", dict(lr=0.1, momentum=0.9)), "adam": ("Adam", dict(lr=0.05))}


def model():
    """Rows 5, 3 and 1: on two ranks 3 + 2, 2 + 1 and 1 + 0 (an empty shard)."""
    tp.manual_seed(0)  # the same on every rank: fully_shard, as torch's, does not broadcast
    return tp.nn.Sequential(tp.nn.Linear(4, 5, dtype=tp.float64), tp.nn.Tanh(), tp.nn.Linear(5, 3, dtype=tp.float64),
                            tp.nn.Tanh(), tp.nn.Linear(3, 1, dtype=tp.float64))


def twin(m):
    t = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3), torch.nn.Tanh(),
                            torch.nn.Linear(3, 1)).double()
    with torch.no_grad():
        for p_t, p in zip(t.parameters(), m.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    return t


def shard(m, fw):
    for layer in m:
        if isinstance(layer, fw.nn.Linear):
            (fully_shard if fw is tp else torch_fully_shard)(layer)
    (fully_shard if fw is tp else torch_fully_shard)(m)
    return m


def loss_of(m, fw, rows, scale=1.0):
    return ((m(fw.tensor(X[rows])) - fw.tensor(Y[rows])) ** 2).mean() * scale


def train(m, fw, rank, optim_name, micro_batches=1):
    """STEPS steps on this rank's half of the batch, in `micro_batches` backward passes a step; the first step's sharded
    gradients, and the whole parameters after the last (gathered: full_tensor)."""
    cls, kwargs = OPTIMIZERS[optim_name]
    opt = getattr(fw.optim, cls)(m.parameters(), **kwargs)
    rows = np.arange(4 * rank, 4 * rank + 4).reshape(micro_batches, -1)
    first_grads = None
    for _ in range(STEPS):
        for part in rows:
            loss_of(m, fw, part, 1.0 / micro_batches).backward()
        if first_grads is None:
            first_grads = [(p.grad if fw is tp else p.grad.to_local()).numpy().copy() for p in m.parameters()]
        opt.step()
        opt.zero_grad()
    return first_grads, [(p.full_tensor()).numpy().copy() if fw is tp else p.full_tensor().detach().numpy().copy()
                         for p in m.parameters()]


def fsdp_runs(rank):
    out = {}
    ours, theirs = shard(model(), tp), shard(twin(model()), torch)
    out["classes"] = ([type(m).__name__ for m in ours], [type(m).__name__ for m in theirs],
                      all(isinstance(m, FSDPModule) for m in (ours, ours[0], ours[2], ours[4])))
    out["shapes"] = ([tuple(p.shape) for p in ours.parameters()],
                     [tuple(p.to_local().shape) for p in theirs.parameters()])
    out["full shapes"] = ([p.full_shape for p in ours.parameters()], [tuple(p.shape) for p in theirs.parameters()])
    y = ours(tp.tensor(X[:2]))  # after forward: shards in the slots again, the whole arrays freed (not the root's: it
    out["after forward"] = (  # has none of its own here)
        all(isinstance(p, ShardedParameter) for p in ours.parameters()),
        [p.unsharded.data.size for layer in ours[::2] for p in layer._fsdp_state.params])
    y.sum().backward()
    for optim_name in OPTIMIZERS:
        for micro in (1, 2):
            out[optim_name, micro] = (train(shard(model(), tp), tp, rank, optim_name, micro),
                                      train(shard(twin(model()), torch), torch, rank, optim_name, micro))
        ddp = tp.nn.parallel.DistributedDataParallel(model())
        cls, kwargs = OPTIMIZERS[optim_name]
        opt = getattr(tp.optim, cls)(ddp.parameters(), **kwargs)
        for _ in range(STEPS):
            loss_of(ddp, tp, slice(4 * rank, 4 * rank + 4)).backward()
            opt.step()
            opt.zero_grad()
        out[optim_name, "ddp"] = [p.data.copy() for p in ddp.parameters()]
    return out


def test_fully_shard_equals_torchs_fully_shard_and_plain_ddp():
    per_rank = dist.spawn(fsdp_runs, 2, timeout=TIMEOUT)
    rows = {0: [(3, 4), (3,), (2, 5), (2,), (1, 3), (1,)], 1: [(2, 4), (2,), (1, 5), (1,), (0, 3), (0,)]}
    for rank, out in enumerate(per_rank):
        ours, theirs, every_one = out["classes"]
        assert ours == theirs == ["FSDPLinear", "Tanh", "FSDPLinear", "Tanh", "FSDPLinear"] and every_one
        assert out["shapes"] == (rows[rank], rows[rank])
        assert out["full shapes"][0] == out["full shapes"][1]
        assert out["after forward"] == (True, [0] * 6)
        for optim_name in OPTIMIZERS:
            for micro in (1, 2):
                (grads, params), (grads_t, params_t) = out[optim_name, micro]
                where = f"rank {rank}, {optim_name}, {micro} backward pass(es) a step"
                for g, g_t in zip(grads, grads_t, strict=True):  # this rank's rows of the averaged gradient
                    np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-15, err_msg=f"{where}: gradients")
                for p, p_t, p_ddp in zip(params, params_t, out[optim_name, "ddp"], strict=True):
                    np.testing.assert_allclose(p, p_t, rtol=1e-12, atol=1e-14, err_msg=f"{where}: vs torch's")
                    np.testing.assert_allclose(p, p_ddp, rtol=1e-12, atol=1e-14, err_msg=f"{where}: vs plain DDP")
        assert not np.allclose(out["adam", 1][0][1][0], model()[0].weight.data)  # the steps moved the weights


@pytest.mark.parametrize("n", [1, 2])
def test_bytes_per_rank_plain_ddp_and_zero_stages_1_2_3(n):
    """Counted: ZeRO's accounting for float32 Adam, 16, 4 + 4 + 8/N, 4 + 12/N and 16/N bytes a parameter. Traced
    (NumPy's bytes held between steps): the same for plain DDP and stage 3, apart from Adam's 0-d step counts; stages 1
    and 2 hold besides the optimizer's pieces of the parameters (4/N bytes a parameter, copies). Forward: stage 3
    gathers one layer at a time (its peak holds at least the larger layer's whole parameters, never both layers'), and
    after forward holds what plain DDP's forward holds: the whole parameters are freed."""
    layer_bytes = [4 * (SIZES[0] * SIZES[1] + SIZES[1]), 4 * (SIZES[1] * SIZES[2] + SIZES[2])]
    for table in dist.spawn(held_by_each_setup, n, timeout=TIMEOUT):
        assert list(table) == list(SETUPS)
        for setup, (p, g, o) in expected(n).items():
            row = table[setup]
            assert (row["parameters"], row["gradients"], row["optimizer state"]) == (p, g, o), setup
            extra = row["traced"] - (p + g + o)
            pieces = 4 * PSI // n if setup in ("ZeRO-1", "ZeRO-2") else 0
            assert 0 <= extra - pieces <= 512, (setup, row)
        assert sum(expected(n)["ZeRO-3"]) * n == 16 * PSI
        zero3, ddp = table["ZeRO-3"], table["plain DDP"]
        assert max(layer_bytes) <= zero3["forward peak"] < sum(layer_bytes)
        assert ddp["forward peak"] < min(layer_bytes) // 4  # plain DDP's forward gathers nothing
        assert abs(zero3["after forward"] - ddp["after forward"]) <= 512
        assert ddp["after forward"] < min(layer_bytes) // 8
