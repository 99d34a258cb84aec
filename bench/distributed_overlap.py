"""How much of DistributedDataParallel's communication hides behind backward: bench/results/distributed_overlap.md.

    python bench/distributed_overlap.py            # writes bench/results/distributed_overlap.md
    python bench/distributed_overlap.py --quick    # a smoke test, seconds: written to bench/_out/

Two processes on this machine (tinypytorch.distributed.spawn, gloo on the loopback interface), step 73's timed
network: four 256 x 256 layers with tanh between, float32, 64 samples per rank, bucket_cap_mb=0.25 (a bucket per
layer). On rank 0, for each of the last `steps` training steps: when each bucket's all-reduce started and when
torch reported it complete (the future of its Work), in time since backward began, and how long backward took.
Then the same steps with the averaging after backward instead: backward under no_sync, then one all-reduce per
bucket, each waited for. Medians over the steps; the page (step 73) draws one such step without its numbers.
"""
import argparse
import os
import pathlib
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: the two processes share the cores

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tinypytorch as tp  # noqa: E402
import tinypytorch.distributed as dist  # noqa: E402
from tinypytorch.nn.parallel import DistributedDataParallel  # noqa: E402
from tinypytorch.utils.bucket_timeline import on_buckets  # noqa: E402
from writing import format_time, machine_lines, output_folder, write_results, written_by  # noqa: E402

SETTINGS = {"full": {"warmup": 3, "steps": 30}, "quick": {"warmup": 1, "steps": 3}}


def wide_model():
    tp.manual_seed(0)
    layers = [tp.nn.Linear(256, 256) for _ in range(4)]
    return tp.nn.Sequential(layers[0], tp.nn.Tanh(), layers[1], tp.nn.Tanh(), layers[2], tp.nn.Tanh(), layers[3])


def measure(rank, warmup, steps):
    """[(launch, done) per bucket] and backward's time per measured step, overlapped; then the sequential times."""
    sys.setswitchinterval(1e-4)
    clock = time.perf_counter
    model = wide_model()
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.25)
    log = {}  # bucket -> [launched, done]
    on_buckets(ddp, lambda k: log.__setitem__(k, [clock(), None]), lambda k: log[k].__setitem__(1, clock()))
    x = tp.tensor(np.random.default_rng(rank).standard_normal((64, 256)).astype(np.float32))
    opt = tp.optim.SGD(model.parameters(), lr=0.01)
    overlapped, sequential = [], []
    for i in range(warmup + steps):
        loss = (ddp(x) ** 2).mean()
        opt.zero_grad()
        log.clear()
        began = clock()
        loss.backward()
        ended = clock()
        opt.step()
        if i >= warmup:
            overlapped.append(([(log[k][0] - began, log[k][1] - began) for k in sorted(log)], ended - began))
    buckets = ddp.reducer.buckets
    for i in range(warmup + steps):
        with ddp.no_sync():
            loss = (ddp(x) ** 2).mean()
        opt.zero_grad()
        began = clock()
        loss.backward()
        computed = clock()
        for bucket in buckets:  # the same bytes, averaged after backward: nothing to hide behind
            flat = np.concatenate([p.grad.data.ravel() for p in bucket.params]) / 2
            dist.all_reduce(flat)
        ended = clock()
        opt.step()
        if i >= warmup:
            sequential.append((computed - began, ended - began))
    return overlapped, sequential


def report(overlapped, sequential, mode):
    n = len(overlapped[0][0])
    launch = [np.median([step[0][k][0] for step in overlapped]) for k in range(n)]
    done = [np.median([step[0][k][1] for step in overlapped]) for k in range(n)]
    backward = np.median([step[1] for step in overlapped])
    compute = np.median([c for c, _ in sequential])
    total = np.median([t for _, t in sequential])
    lines = [
        "# Backward and DistributedDataParallel's buckets, overlapping",
        "",
        f"{written_by('distributed_overlap.py', mode)}. Two processes on this machine (gloo, loopback), step 73's "
        "timed network: four 256 × 256 layers, tanh, float32, 64 samples per rank, `bucket_cap_mb=0.25` (a bucket "
        f"per layer, the last layer's first). Medians over {len(overlapped)} training steps on rank 0, times since "
        "backward began; completion is when torch's future for the bucket's all-reduce ran its callback.",
        "",
        *machine_lines(),
        "",
        "| bucket | started | completed | all-reduce took |",
        "|---|---|---|---|",
        *[f"| {k} | {format_time(launch[k])} | {format_time(done[k])} | {format_time(done[k] - launch[k])} |"
          for k in range(n)],
        "",
        "| the training step's backward | time |",
        "|---|---|",
        f"| DDP: averaging during backward (`loss.backward()` returns averaged) | {format_time(backward)} |",
        f"| no_sync backward alone (the computation) | {format_time(compute)} |",
        f"| no_sync backward, then the same buckets all-reduced one after another | {format_time(total)} |",
        "",
        "The buckets start while backward still computes the layers below them; only the last bucket (the first "
        "layer) has nothing left to hide behind. The difference between the two last rows is what the "
        "communication costs when nothing overlaps it; DDP's row, against the computation alone, is what is left "
        "of it. Two processes share the machine's cores with each other and with whatever else runs: on a busy "
        "machine, run it again.",
        "",
    ]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    torch.set_num_threads(1)  # as in each rank (the launcher's setting), so that the results file says so
    overlapped, sequential = dist.spawn(measure, 2, args=tuple(SETTINGS[mode].values()), timeout=600)[0]
    write_results(output_folder(args.out, args.quick), "distributed_overlap", report(overlapped, sequential, mode))


if __name__ == "__main__":
    main()
