"""Capstone on N processes (step 75): the deepest network whose training step fits a per-process memory budget, for
N = 1, 2 and 4 processes of this machine, each way of training on N processes.

The network is step 66's digit classifier: Linear(64, 64), tanh, `depth` residual layers x + tanh(Linear(64, 64)(x)),
Linear(64, 10); float32, a batch of 256 cut into N equal shares, Adam (lr 0.003). The ways:
- data parallel: DistributedDataParallel, every rank the whole model and Adam's state;
- data parallel + checkpointing: the same, each residual layer checkpointed (tinypytorch.utils.checkpoint);
- fully_shard: each residual layer and the root fully_shard-ed (ZeRO-3), each layer sharded as soon as it is built;
- fully_shard + checkpointing: the same, each residual layer checkpointed.
Peak: in each rank, tracemalloc (tinypytorch.utils.memory.peak_memory, started once per rank and left on) over building
the model and Adam and two training steps; a depth fits when the largest of the ranks' peaks fits. The search is step
66's (doubling, then bisection, up to a cap); the margin is how far the verdict stands from changing.
Writes bench/results/capstone_distributed.md and .png.  `python bench/capstone_distributed.py [--quick]`.
"""
import argparse
import math
import pathlib
import sys
import tracemalloc

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

import tinypytorch as tp  # noqa: E402
import tinypytorch.distributed as dist  # noqa: E402
from tinypytorch import datasets, nn, optim  # noqa: E402
from tinypytorch.distributed.fsdp import fully_shard  # noqa: E402
from tinypytorch.nn.parallel import DistributedDataParallel  # noqa: E402
from tinypytorch.utils.checkpoint import checkpoint  # noqa: E402
from tinypytorch.utils.memory import peak_memory  # noqa: E402
from capstone import deepest  # noqa: E402  (step 66's search: doubling, then bisection)

WIDTH, BATCH, LR = 64, 256, 3e-3
BUDGET = 3_428_000  # step 66's benchmark budget: about what plain training of depth 16 needs on one process
TECHNIQUES = ("data parallel", "data parallel + checkpointing", "fully_shard", "fully_shard + checkpointing")
PSI = WIDTH * WIDTH + WIDTH  # the parameters of one residual layer
ROWS_SAVED = {"data parallel": 2, "data parallel + checkpointing": 1, "fully_shard": 2,
              "fully_shard + checkpointing": 1}  # float32 rows of WIDTH a sample a layer kept for backward


def batch():
    images, labels = datasets.load_digits()
    order = np.random.default_rng(0).permutation(len(images))
    pixels = (images.reshape(len(images), -1) / 16).astype(np.float32)[order]
    return pixels[:BATCH], labels[order][:BATCH]


def linear(k, fan_in, fan_out):
    rng = np.random.default_rng([0, k])  # layer k's own seed: every rank draws the same, a layer at a time
    layer = nn.Linear(fan_in, fan_out)
    layer.weight.data = (rng.uniform(-1, 1, (fan_out, fan_in)) / math.sqrt(fan_in)).astype(np.float32)
    layer.bias.data = (rng.uniform(-1, 1, fan_out) / math.sqrt(fan_in)).astype(np.float32)
    return layer


class Residual(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.body = nn.Sequential(layer, nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


class Net(nn.Sequential):
    checkpointed = False

    def forward(self, x):
        first, tanh, *residuals, last = self
        x = tanh(first(x))
        for layer in residuals:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed else layer(x)
        return last(x)


def trainer(technique, depth):
    sharded = technique.startswith("fully_shard")
    layers = [linear(0, 64, WIDTH), nn.Tanh()]
    for k in range(1, depth + 1):
        layers.append(Residual(linear(k, WIDTH, WIDTH)))
        if sharded:
            fully_shard(layers[-1])
    model = Net(*layers, linear(depth + 1, WIDTH, 10))
    model.checkpointed = technique.endswith("checkpointing")
    model = fully_shard(model) if sharded else DistributedDataParallel(model)
    opt = optim.Adam(model.parameters(), lr=LR)

    def step(x, y):
        loss = tp.cross_entropy(model(tp.Variable(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def survey(rank, n, grid, cap):
    """{(technique, depth): (smallest, largest) of the ranks' peaks}, {technique: deepest}."""
    x, y = batch()
    size = BATCH // n
    x, y = x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]
    for t in TECHNIQUES:  # a first step of each, not measured: one-time allocations out of the way
        trainer(t, 1)(x, y)
    tracemalloc.start()  # once, left on: stopping it while gloo's threads let go of arrays crashed a rank now and then
    peaks = {}

    def measured(t, d):
        if (t, d) not in peaks:
            def work():
                step = trainer(t, d)
                step(x, y), step(x, y)
            mine = float(peak_memory(work)[0])
            low, high = tp.tensor([mine]), tp.tensor([mine])
            dist.all_reduce(low, op=dist.ReduceOp.MIN)
            dist.all_reduce(high, op=dist.ReduceOp.MAX)
            peaks[t, d] = (int(low.item()), int(high.item()))
        return peaks[t, d][1]
    depths = {}
    for t in TECHNIQUES:
        depths[t] = deepest(lambda d, t=t: measured(t, d), BUDGET, cap)
        for d in grid:
            measured(t, d)
        if depths[t] < cap:
            measured(t, depths[t] + 1)
    return peaks, depths


def margin(peaks, t, d, cap):
    gaps = ([BUDGET - peaks[t, d][1]] if d >= 1 else []) + ([peaks[t, d + 1][1] - BUDGET] if d < cap else [])
    return min(gaps)


def counted(t, n):
    """Bytes one residual layer adds to a rank, everything held at once: 16 a parameter (divided by n when sharded)
    and the saved rows of the rank's samples."""
    return 16 * PSI // (n if t.startswith("fully_shard") else 1) + ROWS_SAVED[t] * WIDTH * 4 * (BATCH // n)


def report(results, grid, cap, out):
    from writing import header, machine_lines, pyplot, save
    kib = 1024
    lines = ["# Capstone on N processes: the deepest network under a per-process budget (step 75)", "",
             f"Step 66's digit classifier: Linear(64, {WIDTH}), tanh, `depth` residual layers x + tanh(Linear({WIDTH}, "
             f"{WIDTH})(x)), Linear({WIDTH}, 10); float32, a batch of {BATCH} cut into N equal shares, Adam (lr {LR}), "
             "on N processes of this machine (gloo). Data parallel is DistributedDataParallel; fully_shard shards "
             "each residual layer as it is built, then the root; checkpointing checkpoints each residual layer. "
             "Peak: in each rank, tracemalloc over building the model and Adam and two training steps (arrays and "
             "Python objects, whatever the rank holds: its shards or whole parameters, gathered copies, its "
             "samples' activations, DDP's bucket). A depth fits when the largest of the ranks' peaks fits the "
             f"budget, {BUDGET / 1e6:.2f} MB a process (step 66's benchmark budget); deepest: the deepest such network "
             f"up to {cap}, found by doubling and bisection; margin: how far the verdict stands from changing (the "
             "deepest depth's peak below the budget, or the next depth's above it, whichever is nearer). Counted: "
             "the bytes a residual layer adds to a rank if all were held at once, 16 a parameter (/N when sharded) "
             "and the rows of 64 float32 a sample it saves (2, or 1 checkpointed) for the rank's samples; measured: "
             "the slope of the largest peak between depths 8 and 16.", "",
             *machine_lines(memory=True), "",
             *header("N", "technique", "deepest within the budget (margin)", "peak at depth 16, ranks' largest (KiB)",
                     "smallest rank's (KiB)", "a layer: counted (KiB)", "a layer: measured (KiB)")]
    for n, (peaks, depths) in results.items():
        for t in TECHNIQUES:
            d = depths[t]
            verdict = f"{d} (the cap)" if d == cap else f"{d} ({margin(peaks, t, d, cap) / kib:.0f} KiB)"
            slope = (peaks[t, 16][1] - peaks[t, 8][1]) / 8
            lines.append(f"| {n} | {t} | {verdict} | {peaks[t, 16][1] / kib:.0f} | {peaks[t, 16][0] / kib:.0f} | "
                         f"{counted(t, n) / kib:.1f} | {slope / kib:.1f} |")
    lines += ["", "Peaks and depths do not depend on the load; the Python objects tracemalloc counts beside the "
              "arrays vary by a few hundred bytes to a few KiB from run to run, so a verdict with a margin under "
              "10 KiB could move by a layer in another run.", "",
              "![peak of a rank against depth](capstone_distributed.png)"]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4.4), sharey=True)
    for ax, (n, (peaks, depths)) in zip(axes, results.items()):
        for k, t in enumerate(TECHNIQUES):
            ds = sorted(d for u, d in peaks if u == t)
            ax.plot(ds, [peaks[t, d][1] / kib for d in ds], marker="o", ms=3, color=f"C{k}", label=t)
            ax.plot(depths[t], peaks[t, depths[t]][1] / kib, marker="*", ms=12, color=f"C{k}", ls="none")
        ax.axhline(BUDGET / kib, color="k", ls=":", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="depth (residual layers)", title=f"N = {n}")
        ax.set_xticks(grid, [str(d) for d in grid])
    axes[0].set_ylabel("largest peak of the ranks (KiB)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Peak of a rank against depth; dotted: the budget ({BUDGET / 1e6:.2f} MB a process); "
                 "★ the deepest within it", fontsize=10)
    save(fig, out / "capstone_distributed.png", 100)
    (out / "capstone_distributed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small settings, to check the script runs")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in the ranks (the launcher sets it there): the machine lines say this process's
    grid, cap = ((1, 4, 8, 16), 24) if args.quick else ((1, 2, 4, 8, 16, 32, 64), 128)
    results = {}
    for n in (1, 2, 4):
        results[n] = dist.spawn(survey, n, args=(n, grid, cap), timeout=3000)[0]
        print(f"N = {n}: deepest {results[n][1]}", flush=True)
    out = ROOT / "results" if not args.quick else pathlib.Path("/tmp/capstone-distributed-quick")
    out.mkdir(exist_ok=True, parents=True)
    report(results, grid, cap, out)
    print("wrote", out / "capstone_distributed.md")


if __name__ == "__main__":
    main()
