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
import dezero_workloads as dz
from timing import in_turns, page_faults_per_call
from writing import format_time, machine_lines, pyplot, save, verdict, written_by

torch.set_num_threads(1)

# DeZero, when installed (dezero_workloads.py): the framework a learner would otherwise pick
FRAMEWORKS = ("tinypytorch", "dezero", "torch", "numpy") if dz.AVAILABLE else ("tinypytorch", "torch", "numpy")
LABELS = {"tinypytorch": "tinypytorch", "dezero": "DeZero", "torch": "PyTorch", "numpy": "NumPy"}
DEZERO_TARGET = 1.0  # every workload at most as slow as DeZero


def measured(results):
    """The frameworks the results hold, in the order of the tables (DeZero only where it was installed)."""
    return [name for name in ("tinypytorch", "dezero", "torch", "numpy") if name in results["scalar graph"]]


def fitted_slope(sizes, seconds):
    """Slope of log(seconds) against log(size): 1 means time proportional to size (sizes not run: None, left out)."""
    points = [(n, t) for n, t in zip(sizes, seconds) if t is not None]
    return float(np.polyfit(np.log([n for n, _ in points]), np.log([t for _, t in points]), 1)[0])


DEZERO_WIDE_LIMIT = 30_000  # DeZero's backward is quadratic in a wide graph: 100,000 functions took minutes


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
    """{framework: (median, best)} of `functions` (tinypytorch's, DeZero's, PyTorch's, NumPy's: DeZero's is
    left out when it is not installed), each prepared by call(f)."""
    named = dict(zip(("tinypytorch", "dezero", "torch", "numpy"), functions))
    return in_turns({name: (lambda f=named[name]: call(f)) for name in FRAMEWORKS}, **timing)


def run_workloads(s):
    """Every measurement: {workload: {framework: (median, best)}} plus the scaling curves."""
    results = {"scalar graph": _three((gp_tinypytorch, dz.gp_dezero, gp_torch, gp_numpy),
                                      lambda f: (lambda: f(1.0, 1.0)), number=s["gp_number"], repeats=s["gp_repeats"]),
               "chain": _three((chain_tinypytorch, dz.chain_dezero, chain_torch, chain_numpy),
                               lambda f: f(s["chain_length"]), repeats=s["chain_repeats"])}
    coefficients = wide_coefficients(s["wide_branches"])
    results["wide graph"] = _three((wide_tinypytorch, dz.wide_dezero, wide_torch, wide_numpy),
                                   lambda f: f(coefficients), repeats=s["wide_repeats"])
    a = arrays_input(s["array_size"])
    arrays = dict(zip(("tinypytorch", "dezero", "torch", "numpy"),
                      (arrays_tinypytorch, dz.arrays_dezero, arrays_torch, arrays_numpy)))
    results["large arrays"] = _three(tuple(arrays.values()), lambda f: (lambda: f(a)), repeats=s["array_repeats"])
    results["page faults"] = {name: page_faults_per_call(lambda f=arrays[name]: f(a)) for name in FRAMEWORKS}
    results["large arrays, tanh and division"] = _three((ratio_tinypytorch, dz.ratio_dezero, ratio_torch, ratio_numpy),
                                                        lambda f: (lambda: f(a)), repeats=s["array_repeats"])
    data = mlp_data()
    results["MLP training step"] = _three((mlp_tinypytorch, dz.mlp_dezero, mlp_torch, mlp_numpy), lambda f: f(*data),
                                          number=s["mlp_number"], repeats=s["mlp_repeats"])
    results["one operation"] = {recorded: in_turns({name: lambda name=name: _one_operation(name, recorded)
                                                    for name in FRAMEWORKS}, number=s["op_number"],
                                                   repeats=s["op_repeats"])
                                for recorded in (True, False)}
    dz.enable_backprop()
    return results, run_scaling(s)


def _one_operation(name, recorded):
    return dz.one_operation(recorded) if name == "dezero" else one_operation(name, recorded)


def run_scaling(s):
    """{(graph, framework): [median backward seconds at each size]} for a chain and a wide graph."""
    scaling = {}
    graphs = [("chain", {"tinypytorch": chain_tinypytorch, "dezero": dz.chain_dezero, "torch": chain_torch}),
              ("wide", {"tinypytorch": fan_tinypytorch, "dezero": dz.fan_dezero, "torch": fan_torch})]
    for shape, builders in graphs:
        for n in s["sizes"]:
            names = [name for name in FRAMEWORKS if name in builders
                     and not (name == "dezero" and shape == "wide" and n > DEZERO_WIDE_LIMIT)]
            timed = in_turns({name: lambda b=builders[name]: b(n) for name in names}, repeats=s["scaling_repeats"])
            for name in FRAMEWORKS:
                if name in builders:
                    scaling.setdefault((shape, name), []).append(timed[name][0] if name in timed else None)
    return scaling


WORKLOADS = {  # what is timed (filled in with the run's sizes), and the target (not a test)
    "scalar graph": ("Goldstein–Price forward + backward on 0-d values (38 operations), per call", "torch", 1.5),
    "chain": ("backward only: a chain of {chain_length:,} sin functions", "torch", 1.0),
    "wide graph": ("backward only: {wide_branches:,} branches × 10 operations, summed", "torch", 1.5),
    "large arrays": ("sum(exp(x) * x + x ** 2), forward + backward, {array_size:,} elements", "numpy", 1.2),
    "large arrays, tanh and division": ("sum(tanh(x) / (1 + x * x)), forward + backward, {array_size:,} elements",
                                        "numpy", 1.2),
    "MLP training step": ("784 → 256 → 10, ReLU, batch 64, float32, MSE, Adam: one step", "torch", 1.2),
}
SLOPE_TARGET = 1.15  # "linear": a fitted log-log slope of at most this


def _workload_table(results, s, verdicts):
    """The workloads' times in each framework, tinypytorch's ratios to the others, and the targets."""
    frameworks = measured(results)
    others = frameworks[1:]
    lines = ["", "| workload | " + " | ".join(LABELS[name] for name in frameworks) + " | "
             + " | ".join(f"tinypytorch / {LABELS[name]}" for name in others) + " | target | met |",
             "|---|" + "---|" * (len(frameworks) + len(others) + 2)]
    for workload, (description, reference, target) in WORKLOADS.items():
        description = description.format(**s)
        t = {name: median for name, (median, _) in results[workload].items()}
        verdicts[workload] = t["tinypytorch"] / t[reference] <= target
        targets, met = [f"≤ {target} × {LABELS[reference]}"], [verdicts[workload]]
        if "dezero" in t:
            verdicts[f"{workload} (DeZero)"] = t["tinypytorch"] / t["dezero"] <= DEZERO_TARGET
            targets.append(f"≤ {DEZERO_TARGET} × DeZero")
            met.append(verdicts[f"{workload} (DeZero)"])
        lines.append(f"| {workload}: {description} | " + " | ".join(format_time(t[name]) for name in frameworks)
                     + " | " + " | ".join(f"{t['tinypytorch'] / t[name]:.2f}" for name in others)
                     + f" | {'; '.join(targets)} | {', '.join('yes' if ok else 'no' for ok in met)} |")
    return lines


OPERATION_TARGETS = {True: 2.0, False: 1.5}  # one operation, recorded and not: at most this × PyTorch's


def _fixed_costs(results, s, verdicts):
    """What one operation costs, recorded and not; the large arrays' page faults (where the OS counts them)."""
    lines, frameworks = [], measured(results)
    ops = results.get("one operation")
    if ops:
        lines += ["", "One operation, sin of a 0-d value, per call: the fixed cost each node of a small graph pays "
                  "(a recorded operation also pays for its backward later). DeZero records whenever its "
                  "backprop switch is on; \"not recorded\" is that switch off:", "",
                  "| | " + " | ".join(LABELS[name] if name != "numpy" else "NumPy (np.sin)" for name in frameworks)
                  + " | tinypytorch / PyTorch | target | met |", "|---|" + "---|" * (len(frameworks) + 3)]
        for recorded in (True, False):
            t = {name: ops[recorded][name][0] for name in frameworks}
            label = "recorded (requires grad)" if recorded else "not recorded"
            verdicts[f"one operation, {label}"] = ok = t["tinypytorch"] / t["torch"] <= OPERATION_TARGETS[recorded]
            lines.append(f"| {label} | " + " | ".join(format_time(t[name]) for name in frameworks)
                         + f" | {t['tinypytorch'] / t['torch']:.2f} | ≤ {OPERATION_TARGETS[recorded]} × PyTorch | "
                         + ("yes" if ok else "no") + " |")
    faults = results.get("page faults", {})
    if faults and all(faults.get(name) is not None for name in frameworks):
        lines += ["", "Large arrays, minor page faults per call (fresh 4 KiB pages from the OS): "
                  + ", ".join(f"{LABELS[name]} {faults[name]:,.0f}" for name in frameworks)
                  + f"; the arrays themselves are {s['array_size'] * 8 / 4096:,.0f} pages each."]
    return lines


def _scaling_table(scaling, sizes, verdicts):
    """Backward time against graph size with the fitted slopes; the slopes, and the targets on them."""
    lines = ["", "Backward time against graph size (functions in the graph), and the slope of a straight-line fit "
             f"on log-log axes (1 = linear; target ≤ {SLOPE_TARGET} for tinypytorch; DeZero's wide graph stops at "
             f"{DEZERO_WIDE_LIMIT:,} functions, where its backward is already quadratic):", "",
             "| graph | framework | " + " | ".join(f"{n:,}" for n in sizes) + " | slope |",
             "|---|---|" + "---|" * len(sizes) + "---|"]
    slopes = {}
    for (shape, name), seconds in scaling.items():
        slopes[shape, name] = fitted_slope(sizes, seconds)
        lines.append(f"| {shape} | {name} | " + " | ".join("—" if s is None else format_time(s) for s in seconds)
                     + f" | {slopes[shape, name]:.2f} |")
    for shape in ("chain", "wide"):
        verdicts[f"linear backward ({shape})"] = slopes[shape, "tinypytorch"] <= SLOPE_TARGET
    return lines, slopes


def report(results, scaling, s, mode):
    """The results file's text, the scaling slopes, and {target: met}."""
    lines = ["# Autograd speed: tinypytorch, DeZero, PyTorch eager, hand-written NumPy", "",
             f"{written_by('bench_autograd.py', mode)}. Times are medians of repeats; the targets are goals "
             "for the package, not tests.", ""]
    lines += machine_lines()
    if "dezero" not in measured(results):
        lines += ["", dz.MISSING_NOTE]
    verdicts = {}
    lines += _workload_table(results, s, verdicts) + _fixed_costs(results, s, verdicts)
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
    others = measured(results)[1:]
    width = 0.8 / len(others)
    offsets = {name: (k - (len(others) - 1) / 2) * width for k, name in enumerate(others)}
    colours = {"dezero": "tab:purple", "torch": "tab:orange", "numpy": "tab:blue"}
    for reference in others:
        ratios = [results[n]["tinypytorch"][0] / results[n][reference][0] for n in names]
        bars = left.bar(positions + offsets[reference], ratios, width=width, color=colours[reference],
                        label=f"tinypytorch / {LABELS[reference]}")
        left.bar_label(bars, fmt="%.2f", fontsize=7)
    for i, name in enumerate(names):  # the targets, over the bars they apply to
        _, reference, target = WORKLOADS[name]
        for ref, value in [(reference, target)] + ([("dezero", DEZERO_TARGET)] if "dezero" in others else []):
            centre = i + offsets[ref]
            left.hlines(value, centre - width / 2, centre + width / 2, colors="black", linestyles="dashed")
    left.set_yscale("log")
    left.set_xticks(positions, [name.replace(", ", ",\n").replace(" training", "\ntraining") for name in names],
                    fontsize=8)
    left.set_ylabel("time ratio (lower is better)")
    left.set_title("tinypytorch's time relative to others (dashed: target)")
    left.legend(fontsize=8)
    for (shape, name), seconds in scaling.items():
        kept = [(n, t) for n, t in zip(sizes, seconds) if t is not None]
        right.loglog([n for n, _ in kept], [t for _, t in kept], "-" if shape == "chain" else "--", marker="o",
                     color={"tinypytorch": "tab:green", "dezero": "tab:purple"}.get(name, "tab:orange"),
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
