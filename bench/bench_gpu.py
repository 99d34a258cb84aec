"""How fast is tinypytorch on a GPU (CuPy)? Side by side with PyTorch CUDA and hand-written CuPy, in one run.

    python bench/bench_gpu.py            # the full run on a GPU, a few minutes: bench/results/gpu.{md,png}
    python bench/bench_gpu.py --quick    # a smoke test on a GPU, seconds: small sizes, written to bench/_out/

It needs CuPy with a usable CUDA device (`pip install -e .[gpu]`; README: which CuPy for which
driver) and a CUDA build of PyTorch. Without a GPU it says so, measures nothing, writes nothing
and exits 0: every figure in bench/results/gpu.md was measured on a GPU.

Everything runs in one process on the same GPU, each figure a ratio of two columns measured
side by side:

- MLP training step: forward, backward and an Adam step of an MLP of three Linear layers
  width -> width (ReLU between them), a batch of `batch` rows, a mean-squared-error loss, float32,
  at width/batch 256/64, 1024/256, 4096/1024; tinypytorch on CuPy against torch.nn.Linear layers
  with the same weights and torch.optim.Adam on CUDA. Target: at most 1.2x PyTorch CUDA at
  width >= 1024.
- elementwise: y = sum(exp(x) * x + x ** 2), forward and backward, on 2^24 float32; tinypytorch
  against the same written by hand in CuPy (the forward keeping exp(x), the derivative
  (1 + x) exp(x) + 2x by hand) and against PyTorch CUDA. Target: at most 1.2x the hand-written CuPy.
- dropout: p = 0.5 on 2^24 float32, forward and backward; tinypytorch (its mask drawn on the device by
  its own counter-based generator) against a hand-written CuPy dropout (a mask from cupy.random, a
  multiply, a scale) and torch.nn.functional.dropout. Target: at most 1.2x the hand-written one.
- the crossover: one operation (exp) and a small graph (the elementwise expression, forward and
  backward) at sizes 2^4 to 2^24: NumPy on the CPU (the graph by hand), tinypytorch on NumPy and on
  CuPy, CuPy by hand, PyTorch on the CPU and on CUDA; the size from which the GPU is faster than NumPy.
  The CPU columns run on one thread (PyTorch too, as in bench_autograd.py: NumPy's elementwise
  functions use one).
- peak device memory of forward + backward of a RevNet stack (reversible.md's, from networks.py:
  N AdditiveCoupling blocks on 1,024 features, a batch of 256, float32) at depths N = 8 to 128,
  plain, in round(sqrt(N)) checkpointed segments (checkpoint_sequential, use_reentrant=False) and
  reversible (ReversibleSequential); each parameter's gradient let go as soon as it is complete, as
  in reversible.md. tinypytorch through CuPy's memory pool (`tinypytorch.cuda.max_memory_allocated`),
  PyTorch through torch.cuda.reset_peak_memory_stats / max_memory_allocated, running the PyTorch
  ports of the same algorithms (ports.py). Targets: the reversible peak at N = 128 at most 1.1x the
  peak at N = 8, and at most 1.2x PyTorch CUDA's.

A GPU runs kernels asynchronously: every timed call is followed by a synchronisation of the device
(cupy.cuda.Device().synchronize(), torch.cuda.synchronize()) before the clock stops, and each timing
follows warm-up calls (CuPy compiles each kernel on first use). Each figure is the median of repeats;
a repeat runs the workload enough times to last about 20 ms. Neither framework uses TF32 (CuPy's and
PyTorch's defaults for float32 matrix products). The measuring functions (speed_gpu.py: sections 1
to 3; gpu_crossover.py: section 4; memory_gpu.py: section 5) take the array module (`xp`) and
PyTorch's device as parameters, so that tests/test_bench_gpu.py runs them on a strict stand-in for
CuPy (tests/strict_cupy.py) without a GPU; nothing there is timed. This file runs them and writes
the results.
"""
import argparse
import datetime
import pathlib
import platform
import sys

import numpy as np
import torch

import tinypytorch
from tinypytorch import cuda

import gpu_crossover
import memory_gpu
import speed_gpu
from writing import output_folder, pyplot, save, verdict, write_results

SETTINGS = {
    "full": {"mlp": [(256, 64), (1024, 256), (4096, 1024)], "elementwise": 2**24, "dropout": 2**24,
             "crossover": [2**k for k in range(4, 25)], "repeats": 7,
             "memory": {"depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256}},
    "quick": {"mlp": [(64, 16), (256, 64)], "elementwise": 2**16, "dropout": 2**16,
              "crossover": [2**k for k in range(4, 17, 4)], "repeats": 3,
              "memory": {"depths": [2, 4, 8], "width": 64, "batch": 16}},
}


def run(s, xp, device):
    """Every measurement, in one process: xp the device's array module, device PyTorch's."""
    results = speed_gpu.run_speed(s, xp, device)
    runners = gpu_crossover.crossover_runners(xp, device)
    results["crossover"] = gpu_crossover.run_crossover(s["crossover"], runners, s["repeats"])
    results["memory"] = memory_gpu.run_memory(s["memory"], xp, device)
    return results


def machine(xp):
    """The GPU, the versions, the date: what the results file names."""
    props = xp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    driver = xp.cuda.runtime.driverGetVersion()
    return {"GPU": f"{name}, {props['totalGlobalMem'] / 2**30:.1f} GiB",
            "CUDA driver": f"{driver // 1000}.{driver % 1000 // 10}",
            "CuPy": xp.__version__, "PyTorch": f"{torch.__version__} (CUDA {torch.version.cuda})",
            "NumPy": np.__version__, "Python": platform.python_version(), "tinypytorch": tinypytorch.__version__,
            "CPU columns": f"{platform.processor() or platform.machine()}, one thread"}


TARGETS = {"mlp": "training step ≤ 1.2× PyTorch CUDA at width ≥ 1,024",
           "elementwise": "elementwise ≤ 1.2× hand-written CuPy", "dropout": "dropout ≤ 1.2× hand-written CuPy",
           "reversible flat": "reversible peak at N = {last} ≤ 1.1× at N = {first}",
           "reversible vs PyTorch": "reversible peak ≤ 1.2× PyTorch CUDA's"}


def report(results, s, mode, about):
    """The results file's text, {target: met} for each target, and where the GPU overtakes the CPU."""
    q = " --quick" if mode == "quick" else ""
    targets = {}
    lines = ["# tinypytorch on a GPU: CuPy against PyTorch CUDA and hand-written CuPy", "",
             f"Written by `python bench/bench_gpu.py{q}`{'' if q else ' (`make bench-gpu`)'} on "
             f"{datetime.date.today().isoformat()}. "
             "Every figure was measured in one process on the GPU below; each ratio compares two columns measured "
             "side by side. Times are medians of repeats, each timed call followed by a synchronisation of the "
             "device, after warm-up calls; float32 throughout, no TF32. Workloads: `bench/bench_gpu.py`'s docstring.",
             ""]
    lines += [f"- {key}: {value}" for key, value in about.items()]
    lines += speed_gpu.mlp_section(results, targets) + speed_gpu.versus_by_hand_sections(results, s, targets)
    crossover, crossings = gpu_crossover.crossover_section(results["crossover"], s["crossover"])
    lines += crossover + memory_gpu.memory_section(results["memory"], s, targets)
    depths = s["memory"]["depths"]
    lines += ["", "## Targets", "", "| target | result |", "|---|---|"]
    lines += [f"| {TARGETS[k].format(first=depths[0], last=depths[-1])} | {verdict(v)} |" for k, v in targets.items()]
    lines.append("")
    return "\n".join(lines), targets, crossings


def plot(results, s, crossings, path):
    """The crossover's two panels and the peaks' one, side by side."""
    figure, axes = pyplot().subplots(1, 3, figsize=(17, 5))
    gpu_crossover.plot_crossover(axes[:2], results["crossover"], s["crossover"], crossings)
    memory_gpu.plot_memory(axes[2], results["memory"], s["memory"]["depths"])
    save(figure, path, dpi=100)


NO_GPU = ("bench_gpu: no GPU available: {why}. Nothing was measured; bench/results/gpu.md is left as it is "
          "(on a machine with an NVIDIA GPU: pip install -e .[gpu], then make bench-gpu).")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (still on a GPU)")
    parser.add_argument("--out", type=pathlib.Path,
                        help="folder for gpu.md and gpu.png (default: bench/results, or bench/_out with --quick)")
    args = parser.parse_args(argv)
    if not cuda.is_available():
        print(NO_GPU.format(why=cuda.why_unavailable()))
        return 0
    if not torch.cuda.is_available():
        print(NO_GPU.format(why=f"PyTorch {torch.__version__} here is a build without CUDA; the comparison needs a "
                                "CUDA build of the same version, from PyTorch's index for the driver's CUDA version"))
        return 0
    xp = cuda.cupy
    mode = "quick" if args.quick else "full"
    out = output_folder(args.out, args.quick)
    s = SETTINGS[mode]
    results = run(s, xp, "cuda")
    text, _, crossings = report(results, s, mode, machine(xp))
    write_results(out, "gpu", text, lambda path: plot(results, s, crossings, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
