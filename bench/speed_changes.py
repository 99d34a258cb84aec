"""What each speed change in the package saves: pieces of work timed before and after, for bench/results/changes.md.

    python bench/bench_changes.py --before DIR   # `make bench-changes`; DIR: the package before the changes
    python bench/speed_changes.py [--quick]      # one round in this process, as JSON (what the driver runs)

Each piece is one small piece of work that a change in "How tinypytorch is made fast" (the book)
makes cheaper. The two versions of the package run in separate processes, one round each in turn
(before, after, before, ...), so that the machine's load falls on both alike; a row's time is the
best of its rounds. A round imports whichever tinypytorch PYTHONPATH names, so this module imports
the package only inside measure().
"""
import json
import os
import statistics
import subprocess
import sys
import timeit

from timing import page_faults_per_call
from writing import format_time, written_by

# name: (what is timed, the setup, the statement, calls per round)
PIECES = {
    "number": ("a Python number meets a 0-d array: as_variable(2.0, ..., like=x)",
               "x = Variable(np.array(0.5))", "as_variable(2.0, 'mul', np, x)", 20_000),
    "op with a number": ("x * 2.0 on a 0-d x that requires grad (recorded)",
                         "x = Variable(np.array(0.5))", "x * 2.0", 20_000),
    "recorded op": ("sin(x) on a 0-d x that requires grad (recorded, one saved tensor)",
                    "x = Variable(np.array(0.5))", "tinypytorch.sin(x)", 20_000),
    "backward of one node": ("backward through sin(x), 0-d (retain_graph: the same graph each call)",
                             "x = Variable(np.array(0.5)); y = tinypytorch.sin(x)",
                             "y.backward(retain_graph=True)", 10_000),
    "x ** 2, large": ("sum(x ** 2) forward + backward, 10^6 elements",
                      "x = Variable(np.random.default_rng(0).uniform(-1, 1, 10**6))",
                      "tinypytorch.sum(x ** 2).backward()", 20),
    # the benchmark's workloads (bench_autograd.py), timed the same way
    "Goldstein-Price": ("Goldstein–Price forward + backward on 0-d values (bench_autograd's scalar graph)",
                        "from tinypytorch.testfunctions import goldstein_price\n"
                        "def gp():\n    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))\n"
                        "    goldstein_price(x, y).backward()", "gp()", 1000),
    "chain": ("a chain of 1,000 sin functions, forward + backward",
              "def chain():\n    x = y = Variable(np.array(0.5))\n    for _ in range(1000):\n"
              "        y = tinypytorch.sin(y)\n    y.backward()", "chain()", 10),
    "large arrays": ("sum(exp(x) * x + x ** 2) forward + backward, 10^6 elements (bench_autograd's)",
                     "x0 = np.random.default_rng(0).uniform(-1, 1, 10**6)\n"
                     "def arrays():\n    x = Variable(x0)\n    tinypytorch.sum(tinypytorch.exp(x) * x + x ** 2).backward()",
                     "arrays()", 10),
}
QUICK_DIVISOR = 20


def measure(quick):
    """One round in this process: {piece: seconds per call}, best of 3 repeats; large arrays' page faults too."""
    import numpy as np

    import tinypytorch
    from tinypytorch import Variable
    from tinypytorch.core import as_variable

    times = {}
    for name, (_, setup, statement, number) in PIECES.items():
        number = max(1, number // QUICK_DIVISOR) if quick else number
        namespace = {"np": np, "tinypytorch": tinypytorch, "Variable": Variable, "as_variable": as_variable}
        exec(setup, namespace)
        times[name] = min(timeit.repeat(statement, globals=namespace, number=number, repeat=3)) / number
        if "10^6" in PIECES[name][0]:  # large arrays: fresh pages from the OS per call, once warm
            run = compile(statement, name, "exec")
            times[name + " faults"] = page_faults_per_call(lambda: exec(run, namespace), number, warm=False) or 0.0
    return times


def run_round(package_dir, quick):
    """One round in a new process that imports the package from `package_dir`: {piece: seconds per call}."""
    env = dict(os.environ, PYTHONPATH=str(package_dir), OPENBLAS_NUM_THREADS="1")
    command = [sys.executable, __file__] + (["--quick"] if quick else [])
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(before, after, quick, rounds):
    """{"before": {piece: best seconds}, "after": ...} and the spread {label: {piece: median / best}}."""
    taken = {"before": [], "after": []}
    for _ in range(rounds):
        taken["before"].append(run_round(before, quick))
        taken["after"].append(run_round(after, quick))
    best = {label: {name: min(r[name] for r in rs) for name in rs[0]} for label, rs in taken.items()}
    spread = {label: {name: statistics.median(r[name] for r in rs) / best[label][name] for name in PIECES}
              for label, rs in taken.items()}
    return best, spread


def report(best, spread, quick):
    """The results file's text."""
    lines = ["# What each speed change saves", "",
             f"{written_by('bench_changes.py', 'quick' if quick else 'full')}: each piece of work timed in the "
             "package before the changes and "
             "after, in separate processes taking turns; best of the rounds (the median is within the factor in the "
             "last column of the best).", "",
             "| piece of work | before | after | after / before | median / best (before, after) |",
             "|---|---|---|---|---|"]
    for name, (description, *_) in PIECES.items():
        b, a = best["before"][name], best["after"][name]
        lines.append(f"| {description} | {ms(b)} | {ms(a)} | {a / b:.2f} | "
                     f"{spread['before'][name]:.2f}, {spread['after'][name]:.2f} |")
    faults = [name for name in PIECES if name + " faults" in best["after"]]
    lines += ["", "Large arrays, minor page faults per call (fresh 4 KiB pages from the OS; one 10^6-element array is "
              "1,953 pages), fewest over the rounds, before → after: "
              + "; ".join(f"{PIECES[n][0].split(',')[0]}: {best['before'][n + ' faults']:,.0f} → "
                          f"{best['after'][n + ' faults']:,.0f}" for n in faults) + "."]
    return "\n".join(lines) + "\n"


def ms(seconds):
    """A time as the table writes it: ms, µs or ns."""
    return format_time(seconds, units=(("ms", 1e-3), ("µs", 1e-6)))


if __name__ == "__main__":  # one round, as JSON on the last line
    print(json.dumps(measure("--quick" in sys.argv[1:])))
