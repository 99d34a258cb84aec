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
- peak device memory of forward + backward of a RevNet stack (bench_memory.py's: N AdditiveCoupling
  blocks on 1,024 features, a batch of 256, float32) at depths N = 8 to 128, plain, in round(sqrt(N))
  checkpointed segments (checkpoint_sequential, use_reentrant=False) and reversible
  (ReversibleSequential); each parameter's gradient let go as soon as it is complete, as in
  reversible.md. tinypytorch through CuPy's memory pool (`tinypytorch.cuda.max_memory_allocated`),
  PyTorch through torch.cuda.reset_peak_memory_stats / max_memory_allocated, running bench_memory.py's
  ports of the same algorithms. Targets: the reversible peak at N = 128 at most 1.1x the peak at N = 8,
  and at most 1.2x PyTorch CUDA's.

A GPU runs kernels asynchronously: every timed call is followed by a synchronisation of the device
(cupy.cuda.Device().synchronize(), torch.cuda.synchronize()) before the clock stops, and each timing
follows warm-up calls (CuPy compiles each kernel on first use). Each figure is the median of repeats;
a repeat runs the workload enough times to last about 20 ms. Neither framework uses TF32 (CuPy's and
PyTorch's defaults for float32 matrix products). The functions below take the array module (`xp`) and
PyTorch's device as parameters, so that tests/test_bench_gpu.py runs them on a strict stand-in for CuPy
(tests/strict_cupy.py) without a GPU; nothing there is timed.
"""
import argparse
import dataclasses
import datetime
import gc
import importlib.util
import math
import pathlib
import platform
import statistics
import sys
import time

import numpy as np
import torch

import tinypytorch
from tinypytorch import Variable, cuda
from tinypytorch import functions as F
from tinypytorch.layers import MLP
from tinypytorch.optimizers import Adam

ROOT = pathlib.Path(__file__).resolve().parent
MiB = 2**20


def _load_bench_memory():
    """bench_memory.py, whose RevNet stack and PyTorch ports the memory part runs (loaded once, by path)."""
    if "bench_memory" in sys.modules:
        return sys.modules["bench_memory"]
    spec = importlib.util.spec_from_file_location("bench_memory", ROOT / "bench_memory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench_memory = _load_bench_memory()
torch.set_num_threads(1)  # the CPU columns of the crossover: one thread, as NumPy's elementwise functions


# ----- timing on a device ---------------------------------------------------------------------------

def _nothing():
    pass


def sync_xp(xp):
    """A function that returns when the device of module `xp` has finished its queued work (nothing on the CPU)."""
    return _nothing if xp is np else xp.cuda.Device().synchronize


def sync_torch(device):
    """The same for PyTorch's `device`."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else _nothing


def device_of_xp(xp):
    """tinypytorch's device for arrays of module `xp`."""
    return "cpu" if xp is np else "cuda"


TARGET_SECONDS = 0.02  # how long a timed repeat lasts, about


def time_call(fn, sync, repeats, warmup=2, number=None):
    """[seconds per call of fn()] for each of `repeats` repeats, after `warmup` calls.

    sync() runs before the clock stops, so the time is the device's work and not only the launch
    of its kernels. A repeat makes `number` calls, by default enough to last about TARGET_SECONDS
    (timed from one call), so that the clock's resolution and the launch of one call do not decide.
    The garbage collector is off while a repeat runs, as in `timeit`.
    """
    for _ in range(warmup):
        fn()
    sync()
    if number is None:
        start = time.perf_counter()
        fn()
        sync()
        once = time.perf_counter() - start
        number = max(1, min(10_000, int(TARGET_SECONDS / max(once, 1e-7))))
    seconds = []
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            seconds.append((time.perf_counter() - start) / number)
        finally:
            gc.enable()
    return seconds


# ----- the MLP training step ------------------------------------------------------------------------

MLP_LAYERS = 3  # Linear layers, width -> width each, ReLU between them


def mlp_data(width, batch, seed=1):
    """The batch and the target, float32 NumPy arrays (batch x width)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, width)).astype(np.float32),
            rng.standard_normal((batch, width)).astype(np.float32))


def mlp_tinypytorch(xp, width, batch, seed=0):
    """(step, model): step() runs one training step of tinypytorch's MLP where `xp` computes; returns the loss."""
    model = MLP((width,) * (MLP_LAYERS + 1), activation=F.relu, rng=np.random.default_rng(seed))
    for p in model.params():
        p.data = p.data.astype(np.float32)  # Linear draws float64 weights
    model.to(device_of_xp(xp))
    x, target = (Variable(xp.asarray(a), requires_grad=False) for a in mlp_data(width, batch))
    optimizer = Adam(model.params(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        loss = tinypytorch.mean_squared_error(model(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return step, model


def mlp_torch(device, model, width, batch):
    """(step, net): the same step in PyTorch on `device`: torch.nn.Linear layers with `model`'s weights, its Adam."""
    modules = []
    for i, layer in enumerate(model.layers):
        linear = torch.nn.Linear(width, width)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(cuda.as_numpy(layer.weight.data)))
            linear.bias.copy_(torch.from_numpy(cuda.as_numpy(layer.bias.data)))
        modules += [linear] + ([torch.nn.ReLU()] if i < len(model.layers) - 1 else [])
    net = torch.nn.Sequential(*modules).to(device)
    x, target = (torch.from_numpy(a).to(device) for a in mlp_data(width, batch))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return step, net


# ----- elementwise: sum(exp(x) x + x^2) -------------------------------------------------------------

def elementwise_tinypytorch(x):
    """y = sum(exp(x) x + x^2) and dy/dx in tinypytorch, x an array of any module: (y, dy/dx) as arrays."""
    v = Variable(x)
    y = F.sum(F.exp(v) * v + v**2)
    y.backward()
    return y.data, v.grad.data


def elementwise_by_hand(x, xp):
    """The same written by hand in module `xp`: the forward keeps exp(x), the derivative (1 + x) exp(x) + 2x."""
    e = xp.exp(x)
    y = (e * x + x * x).sum()
    return y, (1 + x) * e + 2 * x


def elementwise_torch(x):
    """The same in PyTorch, x a tensor on any device: (y, dy/dx) as tensors."""
    x = x.detach().requires_grad_()
    y = (torch.exp(x) * x + x**2).sum()
    y.backward()
    return y, x.grad


def elementwise_input(n, seed=2):
    """n float32 numbers in [-1, 1): exp stays well inside float32's range."""
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)


# ----- dropout ---------------------------------------------------------------------------------------

def dropout_tinypytorch(x, gy, p):
    """tinypytorch's dropout forward, and backward from `gy`: (y, dL/dx) as arrays of x's module."""
    v = Variable(x)
    y = F.dropout(v, p)
    y.backward(Variable(gy, requires_grad=False))
    return y.data, v.grad.data


def dropout_by_hand(x, gy, p, xp):
    """Dropout written by hand in module `xp` (CuPy): a mask from xp.random, one multiply, the scale folded in."""
    mask = (xp.random.random(x.shape, dtype=x.dtype) >= p) * x.dtype.type(1 / (1 - p))  # kept for backward
    return x * mask, gy * mask


def dropout_torch(x, gy, p):
    """PyTorch's dropout forward and backward: (y, dL/dx) as tensors."""
    x = x.detach().requires_grad_()
    y = torch.nn.functional.dropout(x, p, training=True)
    y.backward(gy)
    return y, x.grad


# ----- the crossover: where the GPU overtakes the CPU -------------------------------------------------

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

    return {
        "NumPy": Runner(lambda a: a, np.exp, lambda a: elementwise_by_hand(a, np), _nothing, False),
        "tinypytorch, CPU": Runner(variable(np), exp_tinypytorch, lambda v: elementwise_tinypytorch(v.data), _nothing,
                                   False),
        "tinypytorch, GPU": Runner(variable(xp), exp_tinypytorch, lambda v: elementwise_tinypytorch(v.data),
                                   sync_xp(xp), True),
        "CuPy by hand": Runner(xp.asarray, xp.exp, lambda a: elementwise_by_hand(a, xp), sync_xp(xp), True),
        "PyTorch, CPU": Runner(tensor("cpu"), torch.exp, elementwise_torch, _nothing, False),
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
        print(f"crossover: 2^{int(math.log2(n))} done", flush=True)
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


# ----- peak device memory: the RevNet stack ------------------------------------------------------------

COUPLING_CONFIGURATIONS = bench_memory.COUPLING_CONFIGURATIONS  # plain, √N segments, reversible


def coupling_workload(depth, width, batch, seed=0):
    """(net, x, target): bench_memory.py's RevNet stack (float32, on the CPU) with its batch and target."""
    net = bench_memory.build_coupling_stack(depth, width, np.float32, seed=seed)
    x, target = bench_memory.batch_and_target(batch, width, np.float32)
    return net, x, target


def peak_tinypytorch(net, x, target, configuration, xp):
    """The most device memory held during forward + backward, above what was held before, in bytes.

    net, x, target on the device of module `xp`. Each parameter's gradient is let go as soon as it is
    complete (a hook replaces it by a broadcast view of one zero, which owns no memory), as in
    bench_memory.py: the peak is what the activations take.
    """
    zero = xp.zeros((), dtype=x.dtype)
    handles = [p.register_hook(lambda g: xp.broadcast_to(zero, g.shape)) for p in net.params()]
    gc.collect()
    gc.disable()
    try:
        with cuda.max_memory_allocated() as peak:
            loss = bench_memory.loss_coupling_tinypytorch(net, x, target, configuration)
            loss.backward()
            del loss
    finally:
        gc.enable()
        for handle in handles:
            handle.remove()
    net.cleargrads()
    return peak.bytes - peak.start


def loss_coupling_torch(twin, x, target, configuration):
    """bench_memory.loss_coupling_torch with x and target tensors already on the device."""
    if configuration == "reversible":
        y = bench_memory.TorchReversibleFunction.apply(x, tuple(twin), *twin.parameters())
    elif configuration == "sqrt":
        y = torch.utils.checkpoint.checkpoint_sequential(list(twin), bench_memory.segments_for("sqrt", len(twin)), x,
                                                         use_reentrant=False)
    else:
        y = x
        for block in twin:
            y = block(y)
    return torch.nn.functional.mse_loss(y, target)


def peak_torch(twin, x, target, configuration, device):
    """PyTorch's peak on CUDA `device`, as peak_tinypytorch's (its allocator's high-water mark)."""
    handles = [p.register_post_accumulate_grad_hook(bench_memory._drop_grad) for p in twin.parameters()]
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    try:
        loss = loss_coupling_torch(twin, x, target, configuration)
        loss.backward()
        del loss
        torch.cuda.synchronize(device)
    finally:
        for handle in handles:
            handle.remove()
    twin.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated(device) - start


def run_memory(s, xp, device):
    """{(depth, configuration): {"tinypytorch": peak bytes, "torch": peak bytes}}."""
    results = {}
    for depth in s["depths"]:
        net, x, target = coupling_workload(depth, s["width"], s["batch"])
        twin = bench_memory.torch_coupling_twin(net)  # from the CPU weights, before they move
        net.to(device_of_xp(xp))
        xd, td = xp.asarray(x), xp.asarray(target)
        rows = {c: {} for c in COUPLING_CONFIGURATIONS}
        for c in COUPLING_CONFIGURATIONS:
            peak_tinypytorch(net, xd, td, c, xp)  # a warm-up pass: the pool's blocks and compiled kernels
            rows[c]["tinypytorch"] = peak_tinypytorch(net, xd, td, c, xp)
        del net, xd, td
        twin.to(device)
        xt, tt = torch.from_numpy(x).to(device), torch.from_numpy(target).to(device)
        for c in COUPLING_CONFIGURATIONS:
            peak_torch(twin, xt, tt, c, device)
            rows[c]["torch"] = peak_torch(twin, xt, tt, c, device)
        del twin, xt, tt
        for c in COUPLING_CONFIGURATIONS:
            results[depth, c] = rows[c]
        print(f"memory: depth {depth}: " + ", ".join(
            f"{COUPLING_CONFIGURATIONS[c]} {rows[c]['tinypytorch'] / MiB:.1f}/{rows[c]['torch'] / MiB:.1f}"
            for c in COUPLING_CONFIGURATIONS) + " MiB (tinypytorch/PyTorch)", flush=True)
    return results


# ----- the run ----------------------------------------------------------------------------------------

SETTINGS = {
    "full": {"mlp": [(256, 64), (1024, 256), (4096, 1024)], "elementwise": 2**24, "dropout": 2**24,
             "crossover": [2**k for k in range(4, 25)], "repeats": 7,
             "memory": {"depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256}},
    "quick": {"mlp": [(64, 16), (256, 64)], "elementwise": 2**16, "dropout": 2**16,
              "crossover": [2**k for k in range(4, 17, 4)], "repeats": 3,
              "memory": {"depths": [2, 4, 8], "width": 64, "batch": 16}},
}
DROPOUT_P = 0.5


def run(s, xp, device):
    results = {"mlp": {}, "elementwise": {}, "dropout": {}}
    sync_gpu, sync_t = sync_xp(xp), sync_torch(device)
    for width, batch in s["mlp"]:
        step, model = mlp_tinypytorch(xp, width, batch)
        step_t, _ = mlp_torch(device, model, width, batch)
        results["mlp"][width, batch] = {"tinypytorch": time_call(step, sync_gpu, s["repeats"]),
                                        "torch": time_call(step_t, sync_t, s["repeats"])}
        del step, model, step_t
        print(f"MLP step {width}/{batch} done", flush=True)

    host = elementwise_input(s["elementwise"])
    x, xt = xp.asarray(host), torch.from_numpy(host).to(device)
    results["elementwise"] = {"tinypytorch": time_call(lambda: elementwise_tinypytorch(x), sync_gpu, s["repeats"]),
                              "by hand": time_call(lambda: elementwise_by_hand(x, xp), sync_gpu, s["repeats"]),
                              "torch": time_call(lambda: elementwise_torch(xt), sync_t, s["repeats"])}
    host = elementwise_input(s["dropout"])
    x, xt = xp.asarray(host), torch.from_numpy(host).to(device)
    gy, gyt = xp.ones_like(x), torch.ones_like(xt)
    results["dropout"] = {
        "tinypytorch": time_call(lambda: dropout_tinypytorch(x, gy, DROPOUT_P), sync_gpu, s["repeats"]),
        "by hand": time_call(lambda: dropout_by_hand(x, gy, DROPOUT_P, xp), sync_gpu, s["repeats"]),
        "torch": time_call(lambda: dropout_torch(xt, gyt, DROPOUT_P), sync_t, s["repeats"])}
    del x, xt, gy, gyt
    print("elementwise and dropout done", flush=True)
    results["crossover"] = run_crossover(s["crossover"], crossover_runners(xp, device), s["repeats"])
    results["memory"] = run_memory(s["memory"], xp, device)
    return results


# ----- report ----------------------------------------------------------------------------------------

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


def _ms(seconds):
    return f"{statistics.median(seconds) * 1e3:.3f}"


def _ratio(a, b):
    return statistics.median(a) / statistics.median(b)


def _verdict(ok):
    return "met" if ok else "NOT met"


def _size(n):
    return f"2^{int(math.log2(n))}"


def report(results, s, mode, about):
    """The results file's text, and {target: met} for each target."""
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

    lines += ["", "## 1. MLP training step", "",
              f"Forward, backward and an Adam step: {MLP_LAYERS} Linear layers width → width, ReLU between them, "
              "a mean-squared-error loss; PyTorch: torch.nn.Linear layers with the same weights and torch.optim.Adam.",
              "", "| width | batch | tinypytorch, ms | PyTorch CUDA, ms | tinypytorch / PyTorch |",
              "|---|---|---|---|---|"]
    missed = []
    for (width, batch), row in results["mlp"].items():
        r = _ratio(row["tinypytorch"], row["torch"])
        lines.append(f"| {width:,} | {batch:,} | {_ms(row['tinypytorch'])} | {_ms(row['torch'])} | {r:.2f} |")
        if width >= 1024 and r > 1.2:
            missed.append(f"{width:,} ({r:.2f})")
    targets["mlp"] = not missed
    lines += ["", f"Target: at most 1.2× PyTorch CUDA at width ≥ 1,024: {_verdict(not missed)}"
              + (f" (missed at width {', '.join(missed)})." if missed else ".")]

    for key, title, what, floor in [
            ("elementwise", "2. Elementwise: sum(exp(x)·x + x²), forward and backward",
             f"On {_size(s['elementwise'])} float32. By hand: the forward keeping exp(x), the derivative "
             "(1 + x)·exp(x) + 2x written out, no graph.", "hand-written CuPy"),
            ("dropout", f"3. Dropout, p = {DROPOUT_P}, forward and backward",
             f"On {_size(s['dropout'])} float32, backward from a gradient of ones. By hand: a mask from "
             "`cupy.random.random` (float32), one multiply with the scale folded into the mask; tinypytorch draws its "
             "mask on the device from its counter-based generator (`tinypytorch.random.CounterGenerator`).",
             "hand-written CuPy")]:
        row = results[key]
        r_hand, r_torch = _ratio(row["tinypytorch"], row["by hand"]), _ratio(row["tinypytorch"], row["torch"])
        targets[key] = r_hand <= 1.2
        lines += ["", f"## {title}", "", what, "",
                  "| tinypytorch, ms | CuPy by hand, ms | PyTorch CUDA, ms | tinypytorch / by hand "
                  "| tinypytorch / PyTorch |", "|---|---|---|---|---|",
                  f"| {_ms(row['tinypytorch'])} | {_ms(row['by hand'])} | {_ms(row['torch'])} | {r_hand:.2f} "
                  f"| {r_torch:.2f} |", "",
                  f"Target: at most 1.2× the {floor}: {_verdict(targets[key])} ({r_hand:.2f})."]

    times, sizes = results["crossover"], s["crossover"]
    names = list(dict.fromkeys(name for name, _, _ in times))
    lines += ["", "## 4. The crossover: where the GPU overtakes the CPU", "",
              "Time per call, µs: one operation (exp of a Variable or tensor that requires grad; NumPy and CuPy on "
              "plain arrays) and a small graph (the elementwise expression of section 2, forward and backward; NumPy "
              "and CuPy by hand). The CPU columns run on one thread."]
    crossings = {}
    for what, title in [("exp", "One operation: exp"), ("graph", "A small graph: sum(exp(x)·x + x²), forward and "
                                                                   "backward")]:
        lines += ["", f"### {title}", "", "| n | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for n in sizes:
            lines.append(f"| {_size(n)} | " + " | ".join(f"{times[name, what, n] * 1e6:,.1f}" for name in names)
                         + " |")
        column = {name: {n: times[name, what, n] for n in sizes} for name in names}
        found = {
            "tinypytorch on the GPU against NumPy": overtakes(sizes, column["NumPy"], column["tinypytorch, GPU"]),
            "tinypytorch on the GPU against tinypytorch on the CPU": overtakes(sizes, column["tinypytorch, CPU"],
                                                                             column["tinypytorch, GPU"]),
            "CuPy by hand against NumPy": overtakes(sizes, column["NumPy"], column["CuPy by hand"]),
            "PyTorch CUDA against PyTorch on the CPU": overtakes(sizes, column["PyTorch, CPU"],
                                                                 column["PyTorch, CUDA"]),
        }
        crossings[what] = found
        lines += ["", "The GPU is faster from (at that size and every larger one): " + "; ".join(
            f"{k}, {_size(n) + f' = {n:,}' if n else 'at no size here'}" for k, n in found.items()) + "."]
    lines += ["", "Below the crossover a call costs what launching its kernels and the framework's Python cost, "
              "whatever the size; above it, what moving the data through memory costs, where the GPU's bandwidth "
              "wins. Plotted in `gpu.png`."]

    memory, depths = results["memory"], s["memory"]["depths"]
    lines += ["", "## 5. Peak device memory: plain, √N-checkpointed and reversible", "",
              f"bench_memory.py's RevNet stack: N AdditiveCoupling blocks on {s['memory']['width']:,} features, "
              f"a batch of {s['memory']['batch']:,}, float32; forward + backward, each parameter's gradient let go "
              "as soon as it is complete; √N: checkpoint_sequential with round(√N) segments, use_reentrant=False. "
              "tinypytorch: "
              "CuPy's memory pool (`tinypytorch.cuda.max_memory_allocated`); PyTorch: "
              "`torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, bench_memory.py's ports. MiB above "
              "what was held before.", "",
              "| N | configuration | tinypytorch, MiB | PyTorch CUDA, MiB | tinypytorch / PyTorch |",
              "|---|---|---|---|---|"]
    for depth in depths:
        for c, label in COUPLING_CONFIGURATIONS.items():
            row = memory[depth, c]
            lines.append(f"| {depth} | {label} | {row['tinypytorch'] / MiB:.2f} | {row['torch'] / MiB:.2f} | "
                         f"{row['tinypytorch'] / row['torch']:.2f} |")
    first, last = depths[0], depths[-1]
    growth = memory[last, "reversible"]["tinypytorch"] / memory[first, "reversible"]["tinypytorch"]
    plain_growth = memory[last, "plain"]["tinypytorch"] / memory[first, "plain"]["tinypytorch"]
    versus = {d: memory[d, "reversible"]["tinypytorch"] / memory[d, "reversible"]["torch"] for d in depths}
    targets["reversible flat"] = growth <= 1.1
    targets["reversible vs PyTorch"] = all(r <= 1.2 for r in versus.values())
    lines += ["", f"Target: the reversible peak at N = {last} at most 1.1× the peak at N = {first}, tinypytorch: "
              f"{_verdict(targets['reversible flat'])} ({growth:.3f}; the plain run's grows {plain_growth:.1f}×).",
              f"Target: the reversible peak at most 1.2× PyTorch CUDA's at every depth: "
              f"{_verdict(targets['reversible vs PyTorch'])} (" + ", ".join(
                  f"N = {d}: {r:.2f}" for d, r in versus.items()) + ")."]

    lines += ["", "## Targets", "", "| target | result |", "|---|---|"]
    labels = {"mlp": "training step ≤ 1.2× PyTorch CUDA at width ≥ 1,024",
              "elementwise": "elementwise ≤ 1.2× hand-written CuPy", "dropout": "dropout ≤ 1.2× hand-written CuPy",
              "reversible flat": f"reversible peak at N = {last} ≤ 1.1× at N = {first}",
              "reversible vs PyTorch": "reversible peak ≤ 1.2× PyTorch CUDA's"}
    lines += [f"| {labels[k]} | {_verdict(v)} |" for k, v in targets.items()]
    lines.append("")
    return "\n".join(lines), targets, crossings


def plot(results, s, crossings, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(17, 5))
    times, sizes = results["crossover"], s["crossover"]
    names = list(dict.fromkeys(name for name, _, _ in times))
    styles = {"NumPy": ("tab:gray", "-"), "tinypytorch, CPU": ("tab:blue", "--"), "tinypytorch, GPU": ("tab:blue", "-"),
              "CuPy by hand": ("tab:green", "-"), "PyTorch, CPU": ("tab:red", "--"), "PyTorch, CUDA": ("tab:red", "-")}
    for axis, what, title in [(axes[0], "exp", "one operation: exp"),
                              (axes[1], "graph", "sum(exp(x)·x + x²), forward + backward")]:
        for name in names:
            colour, style = styles.get(name, (None, "-"))
            axis.plot(sizes, [times[name, what, n] for n in sizes], style, color=colour, marker="o", markersize=3,
                      label=name)
        n = crossings[what]["tinypytorch on the GPU against NumPy"]
        if n:
            axis.axvline(n, color="black", linestyle=":", label=f"tinypytorch GPU overtakes NumPy: {_size(n)}")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("elements")
        axis.set_ylabel("seconds per call (median)")
        axis.set_title(title)
        axis.grid(True, alpha=0.3, which="both")
        axis.legend(fontsize=7)
    memory, depths = results["memory"], s["memory"]["depths"]
    colours = {"plain": "tab:blue", "sqrt": "tab:orange", "reversible": "tab:green"}
    for c, label in COUPLING_CONFIGURATIONS.items():
        for framework, style, marker, who in [("tinypytorch", "-", "o", "tinypytorch"),
                                              ("torch", "--", "x", "PyTorch")]:
            axes[2].plot(depths, [memory[d, c][framework] / MiB for d in depths], style, marker=marker,
                         color=colours[c], label=f"{who}, {label}")
    axes[2].set_xscale("log", base=2)
    axes[2].set_yscale("log", base=2)
    axes[2].set_xticks(depths, [str(d) for d in depths])
    axes[2].set_xlabel("depth N (coupling blocks)")
    axes[2].set_ylabel("MiB")
    axes[2].set_title("peak device memory, forward + backward")
    axes[2].grid(True, alpha=0.3, which="both")
    axes[2].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


NO_GPU = ("bench_gpu: no GPU available: {why}. Nothing was measured; bench/results/gpu.md is left as it is "
          "(on a machine with an NVIDIA GPU: pip install -e .[gpu], then make bench-gpu).")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (still on a GPU)")
    parser.add_argument("--out", type=pathlib.Path,
                        help="folder for gpu.md and gpu.png (default: bench/results, or bench/_out with --quick)")
    args = parser.parse_args(argv)
    if not cuda.is_available():
        print(NO_GPU.format(why=cuda._why_no_gpu()))
        return 0
    if not torch.cuda.is_available():
        print(NO_GPU.format(why=f"PyTorch {torch.__version__} here is a build without CUDA; the comparison needs a "
                                "CUDA build of the same version, from PyTorch's index for the driver's CUDA version"))
        return 0
    xp = cuda.cupy
    mode = "quick" if args.quick else "full"
    out = args.out or ROOT / ("_out" if args.quick else "results")
    out.mkdir(parents=True, exist_ok=True)
    s = SETTINGS[mode]
    results = run(s, xp, "cuda")
    text, _, crossings = report(results, s, mode, machine(xp))
    print(text)
    (out / "gpu.md").write_text(text)
    plot(results, s, crossings, out / "gpu.png")
    print(f"written: {out / 'gpu.md'}, {out / 'gpu.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
