"""How fast is tinypytorch's autograd? Side by side with PyTorch eager and hand-written NumPy.

    python bench/bench_autograd.py            # the full run, a few minutes: bench/results/autograd.{md,png}
    python bench/bench_autograd.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/
    python bench/bench_autograd.py --profile  # also: where tinypytorch spends its time (cProfile)

Workloads (each computes a gradient; tests/test_bench.py checks every one against PyTorch):

- scalar graph: Goldstein-Price, forward and backward, on 0-d values (38 operations);
- wide graph: 2,000 branches of 10 operations from one input, summed; backward only;
- chain: backward only, through a chain of 10,000 sin functions;
- large arrays: y = sum(exp(x) * x + x ** 2) on 10^6 elements, forward and backward, and a second
  expression with division and tanh, y = sum(tanh(x) / (1 + x * x));
- MLP training step: 784 -> 256 -> 10 with ReLU, a batch of 64, float32, mean squared error, Adam;
- one operation: what a single sin costs on a 0-d value, recorded and not, in each framework;
- scaling: backward time against graph size, 10^3 to 10^5 functions, for a chain and a wide graph.

"NumPy" is the same arithmetic written by hand: a forward pass that keeps what the backward
needs, and the chain rule spelt out, with no graph at all; it is the floor a framework's
bookkeeping is measured against. PyTorch runs eagerly on one CPU thread (torch.set_num_threads(1)),
in float64 like the rest (the MLP in float32). Each time is the median of several repeats; the
garbage collector is off while a repeat runs, as in `timeit`. NumPy's BLAS runs on one thread too.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import argparse  # noqa: E402 (after the environment is set)
import cProfile
import datetime
import gc
import pathlib
import platform
import pstats
import statistics
import sys
import time

import numpy as np
import torch

import tinypytorch
from tinypytorch import Variable
from tinypytorch import functions as F
from tinypytorch.layers import MLP
from tinypytorch.optimizers import Adam
from tinypytorch.testfunctions import goldstein_price  # the same formula serves torch tensors too

torch.set_num_threads(1)
ROOT = pathlib.Path(__file__).resolve().parent


def _grad(v):
    """A tinypytorch gradient as a NumPy array (grads are Variables since step 27)."""
    return np.asarray(v.grad.data if isinstance(v.grad, Variable) else v.grad)


# ----- scalar graph: Goldstein-Price ---------------------------------------------------------

def gp_tinypytorch(a, b):
    x, y = Variable(np.array(a)), Variable(np.array(b))
    goldstein_price(x, y).backward()
    return _grad(x), _grad(y)


def gp_torch(a, b):
    x, y = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    goldstein_price(x, y).backward()
    return x.grad.numpy(), y.grad.numpy()


def gp_numpy(a, b):
    """f = A B, A = 1 + u^2 p, B = 30 + v^2 q: forward, then the chain rule by hand."""
    x, y = np.array(a), np.array(b)
    u = x + y + 1
    p = 19 - 14*x + 3*x**2 - 14*y + 6*x*y + 3*y**2
    v = 2*x - 3*y
    q = 18 - 32*x + 12*x**2 + 48*y - 36*x*y + 27*y**2
    A, B = 1 + u**2 * p, 30 + v**2 * q
    gA, gB = B, A  # df/dA, df/dB
    gu, gp = gA * 2*u * p, gA * u**2
    gv, gq = gB * 2*v * q, gB * v**2
    gx = gu + gp * (-14 + 6*x + 6*y) + gv * 2 + gq * (-32 + 24*x - 36*y)
    gy = gu + gp * (-14 + 6*x + 6*y) - gv * 3 + gq * (48 - 36*x + 54*y)
    return np.asarray(gx), np.asarray(gy)


# ----- wide graph: branches of sin(c * h), summed ----------------------------------------------
# Each branch applies h <- sin(c_k h) five times (10 operations); the branches are summed.

def wide_coefficients(branches, depth=10, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, (branches, depth // 2))


def wide_tinypytorch(coefficients, x0=0.5):
    """Build the graph; return a function that runs backward and returns dy/dx."""
    x = Variable(np.array(x0))
    total = None
    for row in coefficients:
        h = x
        for c in row:
            h = tinypytorch.sin(h * float(c))
        total = h if total is None else total + h

    def backward():
        total.backward()
        return _grad(x)
    return backward


def wide_torch(coefficients, x0=0.5):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    total = None
    for row in coefficients:
        h = x
        for c in row:
            h = torch.sin(h * float(c))
        total = h if total is None else total + h

    def backward():
        total.backward()
        return x.grad.numpy()
    return backward


def wide_numpy(coefficients, x0=0.5):
    x = np.array(x0)
    saved = []  # per branch, the argument of each sin: its derivative is cos(argument)
    total = 0.0
    for row in coefficients:
        h, arguments = x, []
        for c in row:
            arguments.append(h * c)
            h = np.sin(arguments[-1])
        saved.append(arguments)
        total = total + h

    def backward():
        gx = 0.0
        for row, arguments in zip(coefficients, saved):
            g = 1.0  # d total / d (branch output)
            for c, argument in zip(row[::-1], arguments[::-1]):
                g = g * np.cos(argument) * c  # back through sin, then through the product with c
            gx = gx + g
        return np.asarray(gx)
    return backward


# ----- large arrays: y = sum(exp(x) * x + x ** 2) -------------------------------------------------

def arrays_input(size, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size)


def arrays_tinypytorch(a):
    x = Variable(a)
    F.sum(F.exp(x) * x + x**2).backward()
    return _grad(x)


def arrays_torch(a):
    x = torch.from_numpy(a).requires_grad_()
    torch.sum(torch.exp(x) * x + x**2).backward()
    return x.grad.numpy()


def arrays_numpy(a):
    e = np.exp(a)
    y = (e * a + a**2).sum()  # noqa: F841 (the forward value, computed as a framework would)
    g = np.ones_like(a)  # dy/d(each element of the sum)
    return (g * a) * e + g * e + 2 * a * g  # through exp, through the product's x, through x ** 2


# ----- large arrays, a second expression: y = sum(tanh(x) / (1 + x * x)) -------------------------

def ratio_tinypytorch(a):
    x = Variable(a)
    F.sum(F.tanh(x) / (1.0 + x * x)).backward()
    return _grad(x)


def ratio_torch(a):
    x = torch.from_numpy(a).requires_grad_()
    torch.sum(torch.tanh(x) / (1.0 + x * x)).backward()
    return x.grad.numpy()


def ratio_numpy(a):
    """t = tanh x, d = 1 + x^2: d(t/d)/dx = (1 - t^2)/d - t 2x / d^2."""
    t, d = np.tanh(a), 1.0 + a * a
    y = (t / d).sum()  # noqa: F841 (the forward value, computed as a framework would)
    g = np.ones_like(a)
    gt, gd = g / d, -g * t / (d * d)
    return gt * (1.0 - t * t) + gd * 2.0 * a


# ----- a training step of a small MLP, float32 ----------------------------------------------------

MLP_SIZES, MLP_BATCH = (784, 256, 10), 64


def mlp_data(seed=0, batch=MLP_BATCH, sizes=MLP_SIZES):
    """(a batch, its target, the weights (W, b) of every layer), float32, PyTorch's default init."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    target = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
    layers = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        k = 1.0 / np.sqrt(n_in)
        layers.append((rng.uniform(-k, k, (n_out, n_in)).astype(np.float32),
                       rng.uniform(-k, k, n_out).astype(np.float32)))
    return x, target, layers


def mlp_tinypytorch(x, target, layers, lr=1e-3):
    """A step function (loss, backward, Adam) on an MLP with these weights; it returns the weights' gradients."""
    model = MLP([layers[0][0].shape[1]] + [W.shape[0] for W, _ in layers], activation=F.relu)
    for layer, (W, b) in zip(model.layers, layers):
        layer.weight.data, layer.bias.data = W.copy(), b.copy()
    optimizer = Adam(model.params(), lr=lr)

    def step():
        model.cleargrads()
        F.mean_squared_error(model(x), target).backward()
        optimizer.step()
        return [p.grad.data for p in model.params()]
    return step


def mlp_torch(x, target, layers, lr=1e-3):
    modules = []
    for W, b in layers:
        linear = torch.nn.Linear(W.shape[1], W.shape[0])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(W))
            linear.bias.copy_(torch.from_numpy(b))
        modules += [linear, torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    tx, tt = torch.from_numpy(x), torch.from_numpy(target)

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(tx), tt).backward()
        optimizer.step()
        return [p.grad.numpy() for p in model.parameters()]
    return step


def mlp_numpy(x, target, layers, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """The same step by hand: forward keeping what backward needs, the chain rule, Adam's update."""
    params = [p.copy() for W, b in layers for p in (W, b)]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    t = [0]

    def step():
        hs, h = [], x
        for i in range(0, len(params), 2):
            hs.append(h)
            h = h @ params[i].T + params[i + 1]
            if i + 2 < len(params):
                h = np.maximum(h, 0)
        g = (2.0 / h.size) * (h - target)  # d mean((h - t)^2) / dh
        grads = [None] * len(params)
        for i in reversed(range(0, len(params), 2)):
            grads[i], grads[i + 1] = g.T @ hs[i // 2], g.sum(axis=0)
            if i:
                g = (g @ params[i]) * (hs[i // 2] > 0)
        t[0] += 1
        for p, grad, (m, v) in zip(params, grads, moments):
            m *= betas[0]
            m += (1 - betas[0]) * grad
            v *= betas[1]
            v += (1 - betas[1]) * grad * grad
            p -= lr * (m / (1 - betas[0] ** t[0])) / (np.sqrt(v / (1 - betas[1] ** t[0])) + eps)
        return grads
    return step


# ----- one operation on a 0-d value: the fixed cost every node pays ----------------------------------

def one_operation(framework, recorded):
    """A function computing sin of a 0-d value once, recording the graph or not."""
    if framework == "tinypytorch":
        x = Variable(np.array(0.5), requires_grad=recorded)
        return lambda: tinypytorch.sin(x)
    if framework == "torch":
        x = torch.tensor(0.5, dtype=torch.float64, requires_grad=recorded)
        return lambda: torch.sin(x)
    a = np.array(0.5)
    return lambda: np.sin(a)


# ----- scaling: a chain and a wide graph of n functions ---------------------------------------------

def chain_tinypytorch(n, x0=0.5):
    """y = sin(sin(...sin(x))), n functions; returns the backward runner."""
    x = Variable(np.array(x0))
    y = x
    for _ in range(n):
        y = tinypytorch.sin(y)

    def backward():
        y.backward()
        return _grad(x)
    return backward


def chain_torch(n, x0=0.5):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    y = x
    for _ in range(n):
        y = torch.sin(y)

    def backward():
        y.backward()
        return x.grad.numpy()
    return backward


def chain_numpy(n, x0=0.5):
    """The chain by hand: forward keeps each input, backward multiplies the cosines."""
    def backward():
        hs, h = [], np.array(x0)
        for _ in range(n):
            hs.append(h)
            h = np.sin(h)
        g = np.array(1.0)
        for h in reversed(hs):
            g = g * np.cos(h)
        return g
    return backward


def fan_tinypytorch(n, x0=0.5):
    """sin(x) + sin(x) + ... : n // 2 Sin functions wait while the chain of Adds is walked."""
    x = Variable(np.array(x0))
    s = tinypytorch.sin(x)
    for _ in range(n // 2 - 1):
        s = s + tinypytorch.sin(x)

    def backward():
        s.backward()
        return _grad(x)
    return backward


def fan_torch(n, x0=0.5):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    s = torch.sin(x)
    for _ in range(n // 2 - 1):
        s = s + torch.sin(x)

    def backward():
        s.backward()
        return x.grad.numpy()
    return backward


# ----- timing ---------------------------------------------------------------------------------------

def time_once(prepare, number=1):
    """Seconds per call of the function that prepare() returns, called `number` times in a row.

    prepare() is not timed (it may build a graph). The garbage collector is off while the
    calls run, as in `timeit`.
    """
    run = prepare()
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - start) / number
    finally:
        gc.enable()


def measure(prepares, number=1, repeats=5):
    """{name: (median, best) seconds per call} for each of `prepares` ({name: prepare}).

    The contenders take turns, one repeat each, so that a change in the machine's load
    during the run (other programs, CPU frequency) affects all of them alike.
    """
    times = {name: [] for name in prepares}
    for _ in range(repeats):
        for name, prepare in prepares.items():
            times[name].append(time_once(prepare, number))
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def page_faults_per_call(run, calls=10):
    """Minor page faults per call of run(): each is a fresh page of memory from the OS (None off Unix).

    Large NumPy arrays are allocated with mmap and returned to the OS when freed, so a
    program that frees and reallocates them pays for zeroed pages on every call.
    """
    try:
        import resource
    except ImportError:
        return None
    run()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        run()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


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


def run_workloads(s):
    """Every measurement: {workload: {framework: (median, best)}} plus the scaling curves."""
    names = ("tinypytorch", "torch", "numpy")
    results = {}
    results["scalar graph"] = measure(
        {name: lambda f=f: (lambda: f(1.0, 1.0)) for name, f in zip(names, (gp_tinypytorch, gp_torch, gp_numpy))},
        number=s["gp_number"], repeats=s["gp_repeats"])
    results["chain"] = measure(
        {name: lambda f=f: f(s["chain_length"]) for name, f in zip(names, (chain_tinypytorch, chain_torch, chain_numpy))},
        repeats=s["chain_repeats"])
    coefficients = wide_coefficients(s["wide_branches"])
    results["wide graph"] = measure(
        {name: lambda f=f: f(coefficients) for name, f in zip(names, (wide_tinypytorch, wide_torch, wide_numpy))},
        repeats=s["wide_repeats"])
    a = arrays_input(s["array_size"])
    array_functions = dict(zip(names, (arrays_tinypytorch, arrays_torch, arrays_numpy)))
    results["large arrays"] = measure({name: lambda f=f: (lambda: f(a)) for name, f in array_functions.items()},
                                      repeats=s["array_repeats"])
    results["page faults"] = {name: page_faults_per_call(lambda f=f: f(a)) for name, f in array_functions.items()}
    results["large arrays, tanh and division"] = measure(
        {name: lambda f=f: (lambda: f(a)) for name, f in zip(names, (ratio_tinypytorch, ratio_torch, ratio_numpy))},
        repeats=s["array_repeats"])
    data = mlp_data()
    results["MLP training step"] = measure(
        {name: lambda f=f: f(*data) for name, f in zip(names, (mlp_tinypytorch, mlp_torch, mlp_numpy))},
        number=s["mlp_number"], repeats=s["mlp_repeats"])
    results["one operation"] = {recorded: measure({name: lambda name=name: one_operation(name, recorded)
                                                   for name in names}, number=s["op_number"], repeats=s["op_repeats"])
                                for recorded in (True, False)}
    scaling = {}
    for shape, builders in [("chain", (chain_tinypytorch, chain_torch)), ("wide", (fan_tinypytorch, fan_torch))]:
        for n in s["sizes"]:
            timed = measure({name: lambda b=b: b(n) for name, b in zip(names, builders)}, repeats=s["scaling_repeats"])
            for name, (median, _) in timed.items():
                scaling.setdefault((shape, name), []).append(median)
    return results, scaling


# ----- report -----------------------------------------------------------------------------------------

def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return {"CPU": f"{cpu}, {os.cpu_count()} logical cores", "load average (1, 5, 15 min) at the end": load,
            "OS": platform.platform(),
            "Python": platform.python_version(), "NumPy": np.__version__,
            "PyTorch": f"{torch.__version__}, {torch.get_num_threads()} thread", "tinypytorch": tinypytorch.__version__}


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
LABELS = {"tinypytorch": "tinypytorch", "torch": "PyTorch", "numpy": "NumPy"}


def format_time(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def report(results, scaling, s, mode):
    lines = ["# Autograd speed: tinypytorch, PyTorch eager, hand-written NumPy", "",
             f"Written by `python bench/bench_autograd.py{' --quick' if mode == 'quick' else ''}` on "
             f"{datetime.date.today().isoformat()}. Times are medians of repeats; the targets are goals "
             "for the package, not tests.", ""]
    lines += [f"- {key}: {value}" for key, value in machine().items()]
    lines += ["", "| workload | tinypytorch | PyTorch | NumPy | tinypytorch / PyTorch | tinypytorch / NumPy "
              "| target | met |", "|---|---|---|---|---|---|---|---|"]
    verdicts = {}
    sizes = s["sizes"]
    for workload, (description, reference, target) in WORKLOADS.items():
        description = description.format(**s)
        t = {name: median for name, (median, _) in results[workload].items()}
        ratio = t["tinypytorch"] / t[reference]
        verdicts[workload] = ratio <= target
        times = " | ".join(format_time(t[name]) for name in ("tinypytorch", "torch", "numpy"))
        lines.append(f"| {workload}: {description} | {times} | {t['tinypytorch'] / t['torch']:.2f} | "
                     f"{t['tinypytorch'] / t['numpy']:.2f} | ≤ {target} × {LABELS[reference]} | "
                     f"{'yes' if verdicts[workload] else 'no'} |")
    ops = results.get("one operation")
    if ops:
        lines += ["", "One operation, sin of a 0-d value, per call: the fixed cost each node of a small graph pays "
                  "(a recorded operation also pays for its backward later):", "",
                  "| | tinypytorch | PyTorch | NumPy (np.sin) |", "|---|---|---|---|"]
        for recorded in (True, False):
            lines.append(f"| {'recorded (requires grad)' if recorded else 'not recorded'} | "
                         + " | ".join(format_time(ops[recorded][name][0]) for name in ("tinypytorch", "torch", "numpy"))
                         + " |")
    faults = results.get("page faults", {})
    if all(faults.get(name) is not None for name in ("tinypytorch", "torch", "numpy")):
        lines += ["", "Large arrays, minor page faults per call (fresh 4 KiB pages from the OS): "
                  + ", ".join(f"{LABELS[name]} {faults[name]:,.0f}" for name in ("tinypytorch", "torch", "numpy"))
                  + f"; the arrays themselves are {s['array_size'] * 8 / 4096:,.0f} pages each."]
    lines += ["", "Backward time against graph size (functions in the graph), and the slope of a straight-line fit "
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
    lines += ["", "Targets: " + "; ".join(f"{name}: {'met' if ok else 'NOT met'}" for name, ok in verdicts.items()), ""]
    return "\n".join(lines), slopes, verdicts


def plot(results, scaling, slopes, sizes, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def profile(s):
    """cProfile of tinypytorch on the scalar and the wide workloads: the functions with most own time."""
    for title, code in [("scalar graph, 200 calls", lambda: [gp_tinypytorch(1.0, 1.0) for _ in range(200)]),
                        ("wide graph, backward", wide_tinypytorch(wide_coefficients(s["wide_branches"])))]:
        profiler = cProfile.Profile()
        profiler.runcall(code)
        print(f"\n== profile: tinypytorch, {title} ==")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for autograd.md and autograd.png "
                        "(default: bench/results, or bench/_out with --quick)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of tinypytorch")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    s = SETTINGS[mode]
    out = args.out or ROOT / ("_out" if args.quick else "results")
    results, scaling = run_workloads(s)
    text, slopes, verdicts = report(results, scaling, s, mode)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "autograd.md").write_text(text)
    plot(results, scaling, slopes, s["sizes"], out / "autograd.png")
    print(f"written: {out / 'autograd.md'}, {out / 'autograd.png'}")
    if args.profile:
        profile(s)


if __name__ == "__main__":
    main()
