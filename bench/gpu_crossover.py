"""Where the GPU overtakes the CPU: section 4 of bench/results/gpu.md and the left two panels of gpu.png.

    python bench/bench_gpu.py    # on a machine with an NVIDIA GPU (`make bench-gpu`)

One operation (exp) and a small graph (the elementwise expression of speed_gpu.py, forward and
backward) at sizes 2^4 to 2^24: NumPy on the CPU (the graph by hand), tinypytorch on NumPy and on
CuPy, CuPy by hand, PyTorch on the CPU and on CUDA; and the size from which the GPU is faster than
NumPy. The CPU columns run on one thread (PyTorch too, as in bench_autograd.py: NumPy's elementwise
functions use one).
"""
import dataclasses
import statistics

import numpy as np
import torch

from tinypytorch import Variable
from tinypytorch import functions as F

from speed_gpu import (elementwise_by_hand, elementwise_input, elementwise_tinypytorch, elementwise_torch,
                       power_of_two, sync_torch, sync_xp)
from timing import time_call

torch.set_num_threads(1)  # the CPU columns: one thread, as NumPy's elementwise functions


def exp_tinypytorch(v):
    """One recorded operation: tinypytorch's exp of a Variable that requires grad."""
    return F.exp(v)


@dataclasses.dataclass
class Runner:
    """One implementation of exp and of the small graph, and where it runs."""
    to_input: object  # NumPy array -> what op and graph take (an array on the device, a Variable, a tensor)
    op: object  # input -> exp of it
    graph: object  # NumPy-derived input -> (y, dy/dx): the elementwise expression, forward and backward
    sync: object  # () -> when the device is done
    gpu: bool


def crossover_runners(xp, device):
    """{name: Runner}: NumPy, tinypytorch on NumPy and on module `xp`, `xp` by hand, PyTorch on the CPU and on `device`.

    xp: CuPy on a GPU (the strict stand-in in tests); device: PyTorch's GPU device ("cuda"; "cpu" in tests).
    """
    def variable(module):
        return lambda a: Variable(module.asarray(a))

    def tensor(where):
        return lambda a: torch.from_numpy(a).to(where).requires_grad_()

    cpu = sync_xp(np)  # nothing to wait for
    return {
        "NumPy": Runner(lambda a: a, np.exp, lambda a: elementwise_by_hand(a, np), cpu, False),
        "tinypytorch, CPU": Runner(variable(np), exp_tinypytorch, lambda v: elementwise_tinypytorch(v.data), cpu,
                                   False),
        "tinypytorch, GPU": Runner(variable(xp), exp_tinypytorch, lambda v: elementwise_tinypytorch(v.data),
                                   sync_xp(xp), True),
        "CuPy by hand": Runner(xp.asarray, xp.exp, lambda a: elementwise_by_hand(a, xp), sync_xp(xp), True),
        "PyTorch, CPU": Runner(tensor("cpu"), torch.exp, elementwise_torch, cpu, False),
        "PyTorch, CUDA": Runner(tensor(device), torch.exp, elementwise_torch, sync_torch(device), True),
    }


def run_crossover(sizes, runners, repeats):
    """{(name, "exp" or "graph", n): median seconds per call} for every runner at every size."""
    times = {}
    for n in sizes:
        host = elementwise_input(n)
        for name, r in runners.items():
            a = r.to_input(host)
            times[name, "exp", n] = statistics.median(time_call(lambda: r.op(a), r.sync, repeats))
            times[name, "graph", n] = statistics.median(time_call(lambda: r.graph(a), r.sync, repeats))
            del a
        print(f"crossover: {power_of_two(n)} done", flush=True)
    return times


def overtakes(sizes, slow, fast):
    """The smallest size from which `fast` is faster than `slow` at that size and every larger one (None: never)."""
    found = None
    for n in reversed(sizes):
        if fast[n] < slow[n]:
            found = n
        else:
            break
    return found


COMPARISONS = {  # the comparisons the report states, from the slower to the faster
    "tinypytorch on the GPU against NumPy": ("NumPy", "tinypytorch, GPU"),
    "tinypytorch on the GPU against tinypytorch on the CPU": ("tinypytorch, CPU", "tinypytorch, GPU"),
    "CuPy by hand against NumPy": ("NumPy", "CuPy by hand"),
    "PyTorch CUDA against PyTorch on the CPU": ("PyTorch, CPU", "PyTorch, CUDA"),
}


def crossover_section(times, sizes):
    """Section 4's text, and {"exp" or "graph": {comparison: the size from which the GPU is faster, or None}}."""
    names = list(dict.fromkeys(name for name, _, _ in times))
    lines = ["", "## 4. The crossover: where the GPU overtakes the CPU", "",
             "Time per call, µs: one operation (exp of a Variable or tensor that requires grad; NumPy and CuPy on "
             "plain arrays) and a small graph (the elementwise expression of section 2, forward and backward; NumPy "
             "and CuPy by hand). The CPU columns run on one thread."]
    crossings = {}
    for what, title in [("exp", "One operation: exp"), ("graph", "A small graph: sum(exp(x)·x + x²), forward and "
                                                                   "backward")]:
        lines += ["", f"### {title}", "", "| n | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for n in sizes:
            lines.append(f"| {power_of_two(n)} | " + " | ".join(f"{times[name, what, n] * 1e6:,.1f}" for name in names)
                         + " |")
        column = {name: {n: times[name, what, n] for n in sizes} for name in names}
        found = {k: overtakes(sizes, column[slow], column[fast]) for k, (slow, fast) in COMPARISONS.items()}
        crossings[what] = found
        lines += ["", "The GPU is faster from (at that size and every larger one): " + "; ".join(
            f"{k}, {power_of_two(n) + f' = {n:,}' if n else 'at no size here'}" for k, n in found.items()) + "."]
    lines += ["", "Below the crossover a call costs what launching its kernels and the framework's Python cost, "
              "whatever the size; above it, what moving the data through memory costs, where the GPU's bandwidth "
              "wins. Plotted in `gpu.png`."]
    return lines, crossings


STYLES = {"NumPy": ("tab:gray", "-"), "tinypytorch, CPU": ("tab:blue", "--"), "tinypytorch, GPU": ("tab:blue", "-"),
          "CuPy by hand": ("tab:green", "-"), "PyTorch, CPU": ("tab:red", "--"), "PyTorch, CUDA": ("tab:red", "-")}


def plot_crossover(axes, times, sizes, crossings):
    """Time per call against size on two axes, exp and the small graph; where tinypytorch on the GPU overtakes."""
    names = list(dict.fromkeys(name for name, _, _ in times))
    for axis, what, title in [(axes[0], "exp", "one operation: exp"),
                              (axes[1], "graph", "sum(exp(x)·x + x²), forward + backward")]:
        for name in names:
            colour, style = STYLES.get(name, (None, "-"))
            axis.plot(sizes, [times[name, what, n] for n in sizes], style, color=colour, marker="o", markersize=3,
                      label=name)
        n = crossings[what]["tinypytorch on the GPU against NumPy"]
        if n:
            axis.axvline(n, color="black", linestyle=":", label=f"tinypytorch GPU overtakes NumPy: {power_of_two(n)}")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("elements")
        axis.set_ylabel("seconds per call (median)")
        axis.set_title(title)
        axis.grid(True, alpha=0.3, which="both")
        axis.legend(fontsize=7)
