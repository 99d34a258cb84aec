"""The bytes each rank holds with float32 Adam: plain DDP and ZeRO stages 1, 2 (ZeroDataParallel) and 3 (fully_shard),
for N = 1, 2 and 4 processes on this machine, against ZeRO's accounting and against what torch's fully_shard holds on
the same network; and, for N = 4, fully_shard's shards and parameters after 3 Adam steps against torch's.

The measures are tests/zero_memory.py's (tests/test_distributed_fsdp.py checks them for N = 1 and 2). Run:
    python bench/memory_zero.py            # writes bench/results/zero.md and zero.png
"""
import argparse
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
from writing import header, machine_lines, output_folder, pyplot, save, write_results, written_by  # noqa: E402
from zero_memory import PSI, SETUPS, SIZES, expected, held_by_each_setup  # noqa: E402

# ZeRO's count for float32 Adam, in bytes a parameter each rank holds
FORMULA = {"plain DDP": "16", "ZeRO-1": "8 + 8/N", "ZeRO-2": "4 + 12/N", "ZeRO-3": "16/N"}


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


def torch_fully_shard_bytes(rank):
    """What torch's fully_shard (every Linear, then the root) holds on this rank after one Adam step on the same
    network: its local shards of the parameters, of their gradients and of Adam's two moments (not the 0-d steps)."""
    model = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.Tanh(),
                                torch.nn.Linear(SIZES[1], SIZES[2]))
    for layer in model[::2]:
        torch_fully_shard(layer)
    torch_fully_shard(model)
    adam = torch.optim.Adam(model.parameters())
    x = np.random.default_rng(rank).standard_normal((2, SIZES[0])).astype(np.float32)
    model(torch.from_numpy(x)).sum().backward()
    adam.step()

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    params = list(model.parameters())
    return (sum(local(p).nbytes for p in params) + sum(local(p.grad).nbytes for p in params)
            + sum(local(v).nbytes for state in adam.state.values() for v in state.values() if v.dim() > 0))


def report(tables, torch_bytes, shards):
    """The results file: bytes a parameter per setup and N, measured, ZeRO's count and torch's fully_shard's."""
    lines = ["# Memory per rank: data parallel and ZeRO's three stages (step 74)", "",
             f"{written_by('memory_zero.py', 'full')}. The float32 network {SIZES[0]} → {SIZES[1]} → {SIZES[2]} "
             f"(Ψ = {PSI:,} parameters) with Adam, on N processes of this machine (gloo); each rank counts the bytes "
             "of the arrays it keeps between training steps (parameters, gradients, Adam's two moments). ZeRO's "
             "count for float32 Adam, in bytes a parameter: plain 4 + 4 + 8 = 16; stage 1 shards the moments, "
             "4 + 4 + 8/N; stage 2 the gradients too, 4 + 12/N; stage 3 everything, 16/N. torch's column: what "
             "torch's `fully_shard` holds on the same network (local shards of the parameters, their gradients and "
             "Adam's moments), for the ZeRO-3 row.", "", *machine_lines(), "",
             *header("N", "setup", "bytes a rank holds (rank 0)", "bytes a parameter", "ZeRO's count",
                     "equal to the count", "torch's fully_shard"),
             ]
    for n, table in tables.items():
        for setup in SETUPS:
            row = table[setup]
            total = row["parameters"] + row["gradients"] + row["optimizer state"]
            theirs = f"{torch_bytes[n]:,}" if setup == "ZeRO-3" else ""
            count = sum(expected(n)[setup])
            lines.append(f"| {n} | {setup} | {total:,} | {total / PSI:g} | {FORMULA[setup]} = {count / PSI:g} "
                         f"| {'yes' if total == count else 'NO'} | {theirs} |")
    lines += ["", "The package's ZeRO-1 and ZeRO-2 also keep their optimizer's pieces of the parameters as copies "
              "(4/N bytes a parameter more than the count, in tracemalloc's totals, not in the table); torch's "
              "ZeroRedundancyOptimizer steps whole parameters on each rank.", "",
              "fully_shard on N = 4, each rank's shards and the parameters after 3 Adam steps (float64), against "
              "torch's fully_shard on the same network:", "",
              *[f"- rank {rank}: shards {ours} ({'the same as torch' if ours == theirs else f'torch: {theirs}'}), "
                f"largest difference of the parameters {gap:.1e}" for rank, ((ours, theirs), gap) in enumerate(shards)],
              ""]
    return "\n".join(lines)


def plot(tables, path):
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(7, 4))
    ns = list(tables)
    for k, setup in enumerate(SETUPS):
        measured = [(tables[n][setup]["parameters"] + tables[n][setup]["gradients"]
                     + tables[n][setup]["optimizer state"]) / PSI for n in ns]
        ax.plot(ns, [sum(expected(n)[setup]) / PSI for n in ns], color=f"C{k}", lw=1, ls="--")
        ax.plot(ns, measured, "o", color=f"C{k}", label=f"{setup} ({FORMULA[setup]})")
    ax.set(xlabel="processes N", ylabel="bytes a parameter, each rank", xticks=ns, ylim=(0, 17))
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, title="measured; dashed: the count")
    save(figure, path, 120)


def main():
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    tables = {n: dist.spawn(held_by_each_setup, n, timeout=120)[0] for n in (1, 2, 4)}
    torch_bytes = {n: dist.spawn(torch_fully_shard_bytes, n, timeout=120)[0] for n in (1, 2, 4)}
    shards = dist.spawn(shards_both_ways, 4, timeout=120)
    write_results(output_folder(None, False), "zero", report(tables, torch_bytes, shards),
                  lambda path: plot(tables, path))


if __name__ == "__main__":
    main()
