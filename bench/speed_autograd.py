"""How fast is tinypytorch's autograd, against PyTorch eager and NumPy by hand: bench/results/autograd.{md,png}.

    python bench/bench_autograd.py            # the full run, a few minutes (`make bench`)
    python bench/bench_autograd.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/

The workloads are autograd_workloads.py's, each timed in the three frameworks taking turns
(timing.in_turns): the median of several repeats per call, the garbage collector off. Each row of
the report has a target (a goal for the package, not a test); the scaling curves give backward
time against graph size, 10^3 to 10^5 functions, for a chain and a wide graph, with the slope of a
straight-line fit on log-log axes (1: linear).
"""
import cProfile
import pstats
import sys

import numpy as np
import torch

from autograd_workloads import (arrays_input, arrays_numpy, arrays_tinypytorch, arrays_torch, chain_numpy,
                                chain_tinypytorch, chain_torch, fan_tinypytorch, fan_torch, gp_numpy, gp_tinypytorch,
                                gp_torch, mlp_data, mlp_numpy, mlp_tinypytorch, mlp_torch, one_operation,
                                ratio_numpy, ratio_tinypytorch, ratio_torch, wide_coefficients, wide_numpy,
                                wide_tinypytorch, wide_torch)
from timing import in_turns, page_faults_per_call
from writing import format_time, machine_lines, pyplot, save, verdict, written_by

torch.set_num_threads(1)

FRAMEWORKS = ("tinypytorch", "torch", "numpy")
LABELS = {"tinypytorch": "tinypytorch", "torch": "PyTorch", "numpy": "NumPy"}


def fitted_slope(sizes, seconds):
    """Slope of log(seconds) against log(size): 1 means time proportional to size."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


SETTINGS = {
    "full": {"gp_number": 2000, "gp_repeats": 5, "chain_length": 10_000, "chain_repeats": 7, "wide_branches": 2000,
             "wide_repeats": 7, "array_size": 10**6, "array_repeats": 15, "mlp_number": 20, "mlp_repeats": 7,
             "op_number": 20_000, "op_repeats": 5, "sizes": [1000, 3000, 10_000, 30_000, 100_000],
             "scaling_repeats": 3},
    "quick": {"gp_number": 50, "gp_repeats": 2, "chain_length": 1000, "chain_repeats": 2, "wide_branches": 200,
              "wide_repeats": 2, "array_size": 10**5, "array_repeats": 2, "mlp_number": 2, "mlp_repeats": 2,
              "op_number": 1000, "op_repeats": 2, "sizes": [1000, 3000, 10_000], "scaling_repeats": 1},
}


def _three(functions, call, **timing):
    """{framework: (median, best)} of the three `functions` (one per framework), each prepared by call(f)."""
    return in_turns({name: (lambda f=f: call(f)) for name, f in zip(FRAMEWORKS, functions)}, **timing)


def run_workloads(s):
    """Every measurement: {workload: {framework: (median, best)}} plus the scaling curves."""
    results = {"scalar graph": _three((gp_tinypytorch, gp_torch, gp_numpy), lambda f: (lambda: f(1.0, 1.0)),
                                      number=s["gp_number"], repeats=s["gp_repeats"]),
               "chain": _three((chain_tinypytorch, chain_torch, chain_numpy), lambda f: f(s["chain_length"]),
                               repeats=s["chain_repeats"])}
    coefficients = wide_coefficients(s["wide_branches"])
    results["wide graph"] = _three((wide_tinypytorch, wide_torch, wide_numpy), lambda f: f(coefficients),
                                   repeats=s["wide_repeats"])
    a = arrays_input(s["array_size"])
    arrays = (arrays_tinypytorch, arrays_torch, arrays_numpy)
    results["large arrays"] = _three(arrays, lambda f: (lambda: f(a)), repeats=s["array_repeats"])
    results["page faults"] = {name: page_faults_per_call(lambda f=f: f(a)) for name, f in zip(FRAMEWORKS, arrays)}
    results["large arrays, tanh and division"] = _three((ratio_tinypytorch, ratio_torch, ratio_numpy),
                                                        lambda f: (lambda: f(a)), repeats=s["array_repeats"])
    data = mlp_data()
    results["MLP training step"] = _three((mlp_tinypytorch, mlp_torch, mlp_numpy), lambda f: f(*data),
                                          number=s["mlp_number"], repeats=s["mlp_repeats"])
    results["one operation"] = {recorded: in_turns({name: lambda name=name: one_operation(name, recorded)
                                                    for name in FRAMEWORKS}, number=s["op_number"],
                                                   repeats=s["op_repeats"])
                                for recorded in (True, False)}
    return results, run_scaling(s)


def run_scaling(s):
    """{(graph, framework): [median backward seconds at each size]} for a chain and a wide graph."""
    scaling = {}
    for shape, builders in [("chain", (chain_tinypytorch, chain_torch)), ("wide", (fan_tinypytorch, fan_torch))]:
        for n in s["sizes"]:
            timed = in_turns({name: lambda b=b: b(n) for name, b in zip(FRAMEWORKS, builders)},
                             repeats=s["scaling_repeats"])
            for name, (median, _) in timed.items():
                scaling.setdefault((shape, name), []).append(median)
    return scaling


WORKLOADS = {  # what is timed (filled in with the run's sizes), and the target (not a test)
    "scalar graph": ("Goldstein–Price forward + backward on 0-d values (38 operations), per call", "torch", 1.0),
    "chain": ("backward only: a chain of {chain_length:,} sin functions", "torch", 1.0),
    "wide graph": ("backward only: {wide_branches:,} branches × 10 operations, summed", "torch", 1.5),
    "large arrays": ("sum(exp(x) * x + x ** 2), forward + backward, {array_size:,} elements", "numpy", 1.2),
    "large arrays, tanh and division": ("sum(tanh(x) / (1 + x * x)), forward + backward, {array_size:,} elements",
                                        "numpy", 1.2),
    "MLP training step": ("784 → 256 → 10, ReLU, batch 64, float32, MSE, Adam: one step", "torch", 1.2),
}
SLOPE_TARGET = 1.15  # "linear": a fitted log-log slope of at most this


def _workload_table(results, s, verdicts):
    """The workloads' times in the three frameworks, their ratios and targets."""
    lines = ["", "| workload | tinypytorch | PyTorch | NumPy | tinypytorch / PyTorch | tinypytorch / NumPy "
             "| target | met |", "|---|---|---|---|---|---|---|---|"]
    for workload, (description, reference, target) in WORKLOADS.items():
        description = description.format(**s)
        t = {name: median for name, (median, _) in results[workload].items()}
        verdicts[workload] = t["tinypytorch"] / t[reference] <= target
        times = " | ".join(format_time(t[name]) for name in FRAMEWORKS)
        lines.append(f"| {workload}: {description} | {times} | {t['tinypytorch'] / t['torch']:.2f} | "
                     f"{t['tinypytorch'] / t['numpy']:.2f} | ≤ {target} × {LABELS[reference]} | "
                     f"{'yes' if verdicts[workload] else 'no'} |")
    return lines


def _fixed_costs(results, s):
    """What one operation costs, recorded and not; the large arrays' page faults (where the OS counts them)."""
    lines = []
    ops = results.get("one operation")
    if ops:
        lines += ["", "One operation, sin of a 0-d value, per call: the fixed cost each node of a small graph pays "
                  "(a recorded operation also pays for its backward later):", "",
                  "| | tinypytorch | PyTorch | NumPy (np.sin) |", "|---|---|---|---|"]
        for recorded in (True, False):
            lines.append(f"| {'recorded (requires grad)' if recorded else 'not recorded'} | "
                         + " | ".join(format_time(ops[recorded][name][0]) for name in FRAMEWORKS) + " |")
    faults = results.get("page faults", {})
    if all(faults.get(name) is not None for name in FRAMEWORKS):
        lines += ["", "Large arrays, minor page faults per call (fresh 4 KiB pages from the OS): "
                  + ", ".join(f"{LABELS[name]} {faults[name]:,.0f}" for name in FRAMEWORKS)
                  + f"; the arrays themselves are {s['array_size'] * 8 / 4096:,.0f} pages each."]
    return lines


def _scaling_table(scaling, sizes, verdicts):
    """Backward time against graph size with the fitted slopes; the slopes, and the targets on them."""
    lines = ["", "Backward time against graph size (functions in the graph), and the slope of a straight-line fit "
             f"on log-log axes (1 = linear; target ≤ {SLOPE_TARGET} for tinypytorch):", "",
             "| graph | framework | " + " | ".join(f"{n:,}" for n in sizes) + " | slope |",
             "|---|---|" + "---|" * len(sizes) + "---|"]
    slopes = {}
    for (shape, name), seconds in scaling.items():
        slopes[shape, name] = fitted_slope(sizes, seconds)
        lines.append(f"| {shape} | {name} | " + " | ".join(format_time(s) for s in seconds)
                     + f" | {slopes[shape, name]:.2f} |")
    for shape in ("chain", "wide"):
        verdicts[f"linear backward ({shape})"] = slopes[shape, "tinypytorch"] <= SLOPE_TARGET
    return lines, slopes


def report(results, scaling, s, mode):
    """The results file's text, the scaling slopes, and {target: met}."""
    lines = ["# Autograd speed: tinypytorch, PyTorch eager, hand-written NumPy", "",
             f"{written_by('bench_autograd.py', mode)}. Times are medians of repeats; the targets are goals "
             "for the package, not tests.", ""]
    lines += machine_lines()
    verdicts = {}
    lines += _workload_table(results, s, verdicts) + _fixed_costs(results, s)
    scaling_lines, slopes = _scaling_table(scaling, s["sizes"], verdicts)
    lines += scaling_lines
    lines += ["", "Targets: " + "; ".join(f"{name}: {verdict(ok)}" for name, ok in verdicts.items()), ""]
    return "\n".join(lines), slopes, verdicts


def plot(results, scaling, slopes, sizes, path):
    """tinypytorch's time relative to the others (left); backward time against graph size (right)."""
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(WORKLOADS)
    positions = np.arange(len(names))
    for offset, reference, colour in ((-0.2, "torch", "tab:orange"), (0.2, "numpy", "tab:blue")):
        ratios = [results[n]["tinypytorch"][0] / results[n][reference][0] for n in names]
        bars = left.bar(positions + offset, ratios, width=0.4, color=colour, label=f"tinypytorch / {LABELS[reference]}")
        left.bar_label(bars, fmt="%.2f", fontsize=8)
    for i, name in enumerate(names):  # the target, over the bar it applies to
        _, reference, target = WORKLOADS[name]
        centre = i + (-0.2 if reference == "torch" else 0.2)
        left.hlines(target, centre - 0.25, centre + 0.25, colors="black", linestyles="dashed")
    left.set_yscale("log")
    left.set_xticks(positions, names)
    left.set_ylabel("time ratio (lower is better)")
    left.set_title("tinypytorch's time relative to others (dashed: target)")
    left.legend(fontsize=8)
    for (shape, name), seconds in scaling.items():
        right.loglog(sizes, seconds, "-" if shape == "chain" else "--", marker="o",
                     color="tab:green" if name == "tinypytorch" else "tab:orange",
                     label=f"{name}, {shape}: slope {slopes[shape, name]:.2f}")
    right.set_xlabel("functions in the graph")
    right.set_ylabel("backward time (s)")
    right.set_title("backward time against graph size")
    right.legend(fontsize=8)
    right.grid(True, which="both", alpha=0.3)
    save(figure, path, dpi=110)


def profile(s):
    """cProfile of tinypytorch on the scalar and the wide workloads: the functions with most own time."""
    for title, code in [("scalar graph, 200 calls", lambda: [gp_tinypytorch(1.0, 1.0) for _ in range(200)]),
                        ("wide graph, backward", wide_tinypytorch(wide_coefficients(s["wide_branches"])))]:
        profiler = cProfile.Profile()
        profiler.runcall(code)
        print(f"\n== profile: tinypytorch, {title} ==")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)
