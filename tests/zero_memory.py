"""What each rank holds with float32 Adam: plain DDP, ZeRO stages 1 and 2 (ZeroDataParallel) and stage 3 (fully_shard).

For one rank of a spawned run, each setup is built and trained for one step; then, between steps (gradients still
there, before zero_grad), the bytes of the parameters, gradients and optimizer state are

    counted   the nbytes of the arrays the setup keeps (its parameters, their .grad, Adam's moments)
    traced    NumPy's bytes still held (tracemalloc's NumPy domain) beyond those held before the model was built

and around the next forward pass:

    forward peak    the most memory (tracemalloc, all of it) held during forward, above what was held before it;
                    the smallest of three forward passes: gloo's worker thread lets go of a collective's tensors a
                    moment after the collective is over, so now and then the previous layer's gathered parameters
                    are still alive when the next layer's are gathered (a peak of both layers' bytes)
    after forward   NumPy's bytes held after forward, above what was held before it (what the graph keeps)

Used by tests/test_distributed_zero.py and tests/test_distributed_fsdp.py, and by bench/memory_zero.py (N = 1, 2, 4).
"""
import time
import tracemalloc

import numpy as np

import tinypytorch as tp
from memory import tracing_numpy
from tinypytorch.distributed.fsdp import fully_shard
from tinypytorch.distributed.zero import ZeroDataParallel, optimizer_state_bytes

SIZES = (64, 256, 64)  # rows 256 and 64: divisible by 1, 2 and 4, so that no shard or piece is padded
PSI = 64 * 256 + 256 + 256 * 64 + 64
SETUPS = ("plain DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def mlp(sizes=SIZES):
    tp.manual_seed(0)  # every rank alike: fully_shard, as PyTorch's, does not broadcast
    return tp.nn.Sequential(tp.nn.Linear(sizes[0], sizes[1], dtype=tp.float32), tp.nn.Tanh(),
                            tp.nn.Linear(sizes[1], sizes[2], dtype=tp.float32))


def build(setup):
    """(the model to call, the optimizer, its step, the parameters whose bytes count)."""
    if setup == "plain DDP":
        ddp = tp.nn.parallel.DistributedDataParallel(mlp())
        adam = tp.optim.Adam(ddp.parameters())
        return ddp, adam, adam.step, list(ddp.parameters()), False
    if setup in ("ZeRO-1", "ZeRO-2"):
        zero = ZeroDataParallel(mlp(), tp.optim.Adam, stage=int(setup[-1]))
        return zero, zero.optimizer, zero.step, None, zero
    model = mlp()
    for layer in model:
        if isinstance(layer, tp.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    adam = tp.optim.Adam(model.parameters())  # over the shards
    return model, adam, adam.step, list(model.parameters()), False


def counted(optimizer, params, zero):
    if zero:
        return zero.bytes_held()
    return {"parameters": sum(p.data.nbytes for p in params),
            "gradients": sum(p.grad.data.nbytes for p in params if p.grad is not None),
            "optimizer state": optimizer_state_bytes(optimizer)}


def settled(held):
    """held(), once gloo's worker threads have let go of the last collective's tensors: they hold them a moment after
    the collective is over (so a reading may count a buffer already given up); read until three readings agree."""
    readings = [held()]
    for _ in range(200):
        time.sleep(0.005)
        readings.append(held())
        if readings[-3:].count(readings[-1]) == 3:
            break
    return readings[-1]


def held_by_each_setup(rank):
    """{setup: {"parameters", "gradients", "optimizer state", "traced", "forward peak", "after forward"}}."""
    x = np.random.default_rng(rank).standard_normal((2, SIZES[0])).astype(np.float32)
    table = {}
    for setup in SETUPS:
        with tracing_numpy() as held:
            model, optimizer, step, params, zero = build(setup)
            model(tp.tensor(x)).sum().backward()
            step()
            row = counted(optimizer, params, zero)
            row["traced"] = settled(held)
            if zero:
                zero.zero_grad()
            else:
                optimizer.zero_grad()
            peaks = []
            for _ in range(3):  # the smallest of three: see forward_peak
                before = settled(held)
                start = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                y = model(tp.tensor(x))
                peaks.append(tracemalloc.get_traced_memory()[1] - start)
                row["after forward"] = settled(held) - before
                y.sum().backward()
                del y
                optimizer.zero_grad() if not zero else zero.zero_grad()
            row["forward peak"] = min(peaks)
            del model, optimizer, step, params, zero
        table[setup] = row
    return table


def expected(n, psi=PSI):
    """ZeRO's accounting for float32 Adam: (parameters, gradients, optimizer state) bytes a rank holds."""
    return {"plain DDP": (4 * psi, 4 * psi, 8 * psi), "ZeRO-1": (4 * psi, 4 * psi, 8 * psi // n),
            "ZeRO-2": (4 * psi, 4 * psi // n, 8 * psi // n), "ZeRO-3": (4 * psi // n, 4 * psi // n, 8 * psi // n)}


def markdown(tables):
    """{N: rank 0's table} as one markdown table."""
    lines = ["| N | setup | parameters | gradients | optimizer state | total counted | bytes a parameter | traced "
             "| forward peak | after forward |", "|" + "---|" * 10]
    for n, table in tables.items():
        for setup, row in table.items():
            total = row["parameters"] + row["gradients"] + row["optimizer state"]
            lines.append(f"| {n} | {setup} | {row['parameters']} | {row['gradients']} | {row['optimizer state']} "
                         f"| {total} | {total / PSI:g} | {row['traced']} | {row['forward peak']} "
                         f"| {row['after forward']} |")
    return "\n".join(lines)
