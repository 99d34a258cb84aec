"""How much memory does tinypytorch's autograd keep, plainly and under checkpointing? Side by side with PyTorch.

    python bench/bench_memory.py            # the full run, a few minutes: bench/results/{memory,checkpoint}.{md,png}
    python bench/bench_memory.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/
    python bench/bench_memory.py --only checkpoint   # one part (memory, checkpoint or reversible)

The workload: a multilayer perceptron of `depth` Linear layers (width 1,024, tanh between them)
on a batch of 256 rows, with a mean-squared-error loss against a fixed target, in float32 and
float64, for depths 4, 8, 16 and 32. The PyTorch network is a twin: torch.nn.Linear layers with
the weights of tinypytorch's MLP copied in (tests/test_bench_memory.py checks that both give the
same loss and gradients). Three measures:

- saved for backward: every tensor the forward pass saves goes through a pack hook that counts its
  bytes and returns it unchanged, the same kind of hook in both frameworks
  (tinypytorch.autograd.graph.saved_tensors_hooks, torch.autograd.graph.saved_tensors_hooks).
  A tensor saved by two functions (a tanh output is also the next layer's input) counts twice,
  as the hook sees it twice. The target is a ratio of exactly 1.00: tinypytorch saves what PyTorch saves.
- tinypytorch's memory, with `tracemalloc`: NumPy reports every array's data to it under a domain of
  its own, so the bytes of arrays held are exact; the peak counts every traced allocation (arrays
  and Python objects) during forward + backward.
- PyTorch's memory, with its profiler (`torch.profiler.profile(profile_memory=True)`): every
  allocation and free of a tensor by PyTorch's CPU allocator, in order; scratch memory that MKL or
  oneDNN take for themselves is not seen. `tracemalloc` does not see PyTorch's tensors at all.

Each framework holds three kinds of arrays after its forward pass: the loss (the output), what the
graph saved that existed before (parameters, the batch, the target: no new memory), and the
activations it saved. So "held after forward minus output" must equal the bytes of the saved
activations, each counted once; the tables report both and their difference. The backward pass
frees the saved tensors even while the loss (and so the graph) is still referenced; then only the
gradients are left, and the output. The measured pass follows one unmeasured forward + backward
(the one that counts the saved tensors), and runs with the garbage collector off: what the graph
frees, it frees by reference counting alone.

Checkpointing (checkpoint.{md,png}): the same MLP in float32 at depths N = 8 to 128, in three
configurations: plain; checkpoint_sequential with round(√N) segments; checkpoint_sequential with N
segments (every layer). Both frameworks use use_reentrant=False, the mode PyTorch recommends. Saved
bytes with the same counting hook, entered outside the checkpoints (so it sees what is kept outside
them and each checkpoint's input: the checkpoints' own hooks are innermost and win inside); peak
memory as above, once with the gradients kept and once with each gradient let go when complete,
against the k + N/k prediction; and the time of forward + backward relative to the plain run.

Reversible networks (reversible.{md,png}), in float32, with the same measures: a RevNet stack of N
AdditiveCoupling blocks (N = 8 to 128), plain, in √N checkpointed segments and reversible
(ReversibleSequential: one Function keeping only the output); and RevCol's columns (N = 2 to 16
columns of 4 levels), non-reversible, reversible per column (RevColumn, RevCol's ReverseFunction:
x and the new c's of each column kept) and reversible as one Function (ReversibleColumns: x and
the last column's c's kept). PyTorch runs ports of the same Functions (torch.autograd.Function)
with the same weights. Targets: the reversible peak flat within 1.1x in depth and in the number
of columns; the reversible forward + backward at most 2x the plain run's time.
"""
import os

# NumPy's BLAS on one thread, as PyTorch's below (set before NumPy loads; a value already set wins): the
# checkpointing part times forward + backward, and two BLAS threads on a busy two-core machine wait on each other.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402 (after the environment is set)
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import math
import pathlib
import platform
import statistics
import tempfile
import time
import tracemalloc

import numpy as np
import torch
import torch.utils.checkpoint
from torch.profiler import ProfilerActivity, profile, record_function

import tinypytorch
from tinypytorch import Variable
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import MLP, Layer, Linear, Parameter
from tinypytorch.reversible import (AdditiveCoupling, ReversibleColumns, ReversibleColumnsFunction,
                                    ReversibleSequential, RevColumn)
from tinypytorch.utils.checkpoint import checkpoint_sequential

torch.set_num_threads(1)  # as in bench_autograd.py; memory does not depend on it, the run's length does
ROOT = pathlib.Path(__file__).resolve().parent
MiB = 2**20
DTYPES = {"float32": (np.float32, torch.float32), "float64": (np.float64, torch.float64)}
LABELS = {"tinypytorch": "tinypytorch", "torch": "PyTorch"}


# ----- the workload: an MLP and its PyTorch twin ------------------------------------------------

def build_mlp(depth, width, dtype, seed=0):
    """tinypytorch's MLP of `depth` Linear layers of `width` -> `width`, tanh between them."""
    model = MLP((width,) * (depth + 1), activation=tinypytorch.tanh, rng=np.random.default_rng(seed))
    for p in model.params():
        p.data = p.data.astype(dtype)  # Linear draws float64 weights; float32 gets them rounded
    return model


def batch_and_target(batch, width, dtype, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, width)).astype(dtype), rng.standard_normal((batch, width)).astype(dtype)


def torch_twin(model):
    """A torch Sequential with the same Linear layers as `model` (an MLP of tanh), the same weights and dtype."""
    modules = []
    for i, layer in enumerate(model.layers):
        out_size, in_size = layer.weight.shape
        linear = torch.nn.Linear(in_size, out_size, dtype=DTYPES[layer.weight.dtype.name][1])
        modules += [linear] + ([torch.nn.Tanh()] if i < len(model.layers) - 1 else [])
    twin = torch.nn.Sequential(*modules)
    with torch.no_grad():
        for p, pt in zip(model.params(), twin.parameters(), strict=True):
            pt.copy_(torch.from_numpy(p.data))
    return twin


def layer_functions(model):
    """tinypytorch's MLP as `depth` functions, one per Linear layer: x -> tanh(Linear(x)), the last Linear alone."""
    def with_tanh(layer):
        return lambda x: model.activation(layer(x))

    return [with_tanh(layer) for layer in model.layers[:-1]] + [model.layers[-1]]


def torch_layer_functions(twin):
    """The twin as `depth` modules, one per Linear layer: Sequential(Linear, Tanh), the last Linear alone."""
    modules = list(twin)
    return [torch.nn.Sequential(*modules[i:i + 2]) for i in range(0, len(modules) - 1, 2)] + [modules[-1]]


def loss_tinypytorch(model, x, target, segments=None):
    """The loss of `model` on `x`: plainly, or (segments given) through checkpoint_sequential of its layers."""
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    if segments is None:
        y = model(x)
    else:
        y = checkpoint_sequential(layer_functions(model), segments, x, use_reentrant=False)
    return tinypytorch.mean_squared_error(y, target)


def loss_torch(twin, x, target, segments=None):
    x = torch.from_numpy(x)
    if segments is None:
        y = twin(x)
    else:
        y = torch.utils.checkpoint.checkpoint_sequential(torch_layer_functions(twin), segments, x, use_reentrant=False)
    return torch.nn.functional.mse_loss(y, torch.from_numpy(target))


# ----- what is saved for backward ---------------------------------------------------------------

def _numpy_block(a):
    """(address, bytes) of the memory an array lives in: its base-most array's, so views match their base."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.__array_interface__["data"][0], a.nbytes


def _torch_block(t):
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


@dataclasses.dataclass
class Saved:
    bytes: int  # what the pack hook counted, summed over every saved tensor
    count: int  # how many tensors the pack hook saw
    activations: int  # bytes of the distinct memory blocks saved that are neither parameters nor inputs


def _saved(records, existing):
    """Saved from the hook's records [(bytes counted, memory block)] and the blocks of parameters and inputs."""
    new_blocks = {block for _, block in records if block not in existing}
    return Saved(sum(n for n, _ in records), len(records), sum(size for _, size in new_blocks))


def count_saved_tinypytorch(forward, model, inputs):
    """Run forward() (with a counting pack hook) and backward once: what tinypytorch saved.

    forward: () -> a loss of `model` (a Layer); inputs: the arrays it reads that existed before
    (the batch, the target), which are, with the parameters, no new memory.
    """
    records = []

    def pack(v):
        records.append((v.data.nbytes, _numpy_block(v.data)))
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        loss = forward()
    loss.backward()
    model.cleargrads()
    existing = {_numpy_block(a) for a in [p.data for p in model.params()] + list(inputs)}
    return _saved(records, existing)


def count_saved_torch(forward, module, inputs):
    """The same in PyTorch: forward() -> a loss of `module` (an nn.Module); inputs: NumPy arrays it reads."""
    records = []

    def pack(t):
        records.append((t.nelement() * t.element_size(), _torch_block(t)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    loss.backward()
    module.zero_grad(set_to_none=True)
    existing = {_torch_block(t) for t in [*module.parameters(), *map(torch.from_numpy, inputs)]}
    return _saved(records, existing)


def saved_tinypytorch(model, x, target, segments=None):
    """Forward (with a counting pack hook) and backward once: what tinypytorch saved.

    Under checkpointing the checkpoint's own hooks are the innermost inside each checkpointed
    segment, and win: this hook sees what is kept outside the checkpoints, and each
    checkpoint's input (saved, as in PyTorch, outside the checkpoint's hooks).
    """
    return count_saved_tinypytorch(lambda: loss_tinypytorch(model, x, target, segments), model, [x, target])


def saved_torch(twin, x, target, segments=None):
    """Forward (with a counting pack hook) and backward once: what PyTorch saved (the same rules as above)."""
    return count_saved_torch(lambda: loss_torch(twin, x, target, segments), twin, [x, target])


def expected_saved(depth, width, batch, itemsize):
    """What both frameworks should save, by hand: (bytes, tensors).

    The first Linear saves its input (its weight's gradient needs it; the batch needs no gradient, so
    its weight is not saved); every other Linear its input and its weight; each tanh its output; the
    loss both operands. 3 * depth tensors: (2 depth + 1) of batch x width, depth - 1 of width x width.
    """
    return ((2 * depth + 1) * batch * width + (depth - 1) * width * width) * itemsize, 3 * depth


# ----- memory held and peak ---------------------------------------------------------------------

@dataclasses.dataclass
class Memory:
    """Bytes, relative to the moment before the forward pass."""
    peak: int  # the most held at any moment of forward + backward
    after_forward: int
    output: int  # the loss's own memory
    after_backward: int  # the loss still referenced
    gradients: int  # the parameters' .grad
    after_drop: int  # the loss deleted
    overhead: int = 0  # tinypytorch: Python objects (not arrays) held after forward: the graph's nodes


def _numpy_bytes():
    """Bytes of NumPy array data traced by tracemalloc and not freed (NumPy's own tracemalloc domain)."""
    numpy_only = tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)
    return sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces([numpy_only]).traces)


@contextlib.contextmanager
def _gradients_dropped_tinypytorch(model, drop):
    """With `drop`, each parameter's gradient is let go as soon as it is complete (its .grad holds no memory).

    A hook on the parameter replaces the complete gradient by a broadcast view of one shared
    zero, which owns no memory: the gradient's array is freed as the hook returns, as an optimizer
    that steps inside backward would free it. Without `drop`, nothing changes.
    """
    if not drop:
        yield
        return
    zero = np.zeros((), dtype=next(iter(model.params())).data.dtype)
    handles = [p.register_hook(lambda g: np.broadcast_to(zero, g.shape)) for p in model.params()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def measure_tinypytorch(forward, model, drop_gradients=False, gradients_out=None):
    """tinypytorch's memory during one forward() (-> a loss of `model`, a Layer) + backward, with tracemalloc.

    drop_gradients: each gradient is let go as soon as it is complete, so that the peak is what
    the activations take (gradients then reports 0). gradients_out: a list, given the gradients'
    arrays (kept) before they are cleared.
    """
    with _gradients_dropped_tinypytorch(model, drop_gradients):
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            base_all, base_arrays = tracemalloc.get_traced_memory()[0], _numpy_bytes()
            tracemalloc.reset_peak()
            loss = forward()
            all_after_forward, peak_forward = tracemalloc.get_traced_memory()
            after_forward = _numpy_bytes() - base_arrays
            output = loss.data.nbytes
            tracemalloc.reset_peak()  # the snapshot just taken is no part of the peak
            loss.backward()
            peak = max(peak_forward, tracemalloc.get_traced_memory()[1]) - base_all
            after_backward = _numpy_bytes() - base_arrays
            del loss
            after_drop = _numpy_bytes() - base_arrays
        finally:
            tracemalloc.stop()
            gc.enable()
    gradients = 0 if drop_gradients else sum(p.grad.data.nbytes for p in model.params() if p.grad is not None)
    if gradients_out is not None:
        gradients_out.extend(p.grad.data for p in model.params())
    model.cleargrads()
    return Memory(peak, after_forward, output, after_backward, gradients, after_drop,
                  overhead=all_after_forward - base_all - after_forward)


def memory_tinypytorch(model, x, target, segments=None, drop_gradients=False):
    """tinypytorch's memory during one forward + backward, measured with tracemalloc.

    segments: as in loss_tinypytorch. drop_gradients: each gradient is let go as soon as it is
    complete, so that the peak is what the activations take (gradients then reports 0).
    """
    return measure_tinypytorch(lambda: loss_tinypytorch(model, x, target, segments), model, drop_gradients)


MARKS = ("bench_memory: forward", "bench_memory: backward")


def _drop_grad(p):
    p.grad = None


def measure_torch(forward, twin, drop_gradients=False, gradients_out=None):
    """PyTorch's memory during one forward() (-> a loss of `twin`, an nn.Module) + backward, from its profiler.

    Its allocation events, in order. drop_gradients, gradients_out: as in measure_tinypytorch; PyTorch lets a
    gradient go with a hook that runs once it has been accumulated into .grad
    (register_post_accumulate_grad_hook), setting .grad to None.
    """
    handles = [p.register_post_accumulate_grad_hook(_drop_grad) for p in twin.parameters()] if drop_gradients else []
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function(MARKS[0]):
                loss = forward()
            output = loss.untyped_storage().nbytes()
            with record_function(MARKS[1]):
                loss.backward()
            del loss
    finally:
        gc.enable()
        for handle in handles:
            handle.remove()
    gradients = sum(p.grad.nelement() * p.grad.element_size() for p in twin.parameters() if p.grad is not None)
    if gradients_out is not None:
        gradients_out.extend(p.grad.numpy() for p in twin.parameters())
    twin.zero_grad(set_to_none=True)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    ends = {e["name"]: e["ts"] + e["dur"] for e in events if e.get("name") in MARKS and "dur" in e}
    allocations = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                         key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    held, peak, after = 0, 0, {}
    for e in allocations:
        for mark in MARKS:
            if mark not in after and e["ts"] > ends[mark]:
                after[mark] = held
        held += e["args"]["Bytes"]
        if e["ts"] <= ends[MARKS[1]]:
            peak = max(peak, held)
    after = {mark: after.get(mark, held) for mark in MARKS}
    return Memory(peak, after[MARKS[0]], output, after[MARKS[1]], gradients, held)


def memory_torch(twin, x, target, segments=None, drop_gradients=False):
    """PyTorch's memory during one forward + backward, from its profiler's allocation events.

    segments, drop_gradients: as in memory_tinypytorch (see measure_torch).
    """
    return measure_torch(lambda: loss_torch(twin, x, target, segments), twin, drop_gradients)


# ----- the run ------------------------------------------------------------------------------------

SETTINGS = {
    "full": {"depths": [4, 8, 16, 32], "width": 1024, "batch": 256},
    "quick": {"depths": [1, 2, 4], "width": 64, "batch": 16},
}


def run(s):
    """{(depth, dtype name): {"tinypytorch": (Saved, Memory), "torch": (Saved, Memory)}}."""
    results = {}
    for dtype in DTYPES:
        for depth in s["depths"]:
            model = build_mlp(depth, s["width"], DTYPES[dtype][0])
            x, target = batch_and_target(s["batch"], s["width"], DTYPES[dtype][0])
            row = {"tinypytorch": (saved_tinypytorch(model, x, target), memory_tinypytorch(model, x, target))}
            twin = torch_twin(model)
            del model  # one framework's parameters in memory at a time
            row["torch"] = (saved_torch(twin, x, target), memory_torch(twin, x, target))
            del twin
            results[depth, dtype] = row
            print(f"depth {depth:2}, {dtype}: saved {row['tinypytorch'][0].bytes / MiB:.2f} MiB (tinypytorch), "
                  f"{row['torch'][0].bytes / MiB:.2f} MiB (PyTorch)", flush=True)
    return results


# ----- report -----------------------------------------------------------------------------------------

def machine():
    cpu = platform.processor() or "unknown CPU"
    memory = "unknown"
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
        with open("/proc/meminfo") as file:
            kib = next(int(line.split()[1]) for line in file if line.startswith("MemTotal"))
        memory = f"{kib / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return {"CPU": f"{cpu}, {os.cpu_count()} logical cores", "memory": memory,
            "load average (1, 5, 15 min) at the end": load, "OS": platform.platform(),
            "Python": platform.python_version(), "NumPy": np.__version__,
            "PyTorch": f"{torch.__version__}, {torch.get_num_threads()} thread", "tinypytorch": tinypytorch.__version__}


def mib(n):
    return f"{n / MiB:.2f}"


def difference(n):
    """A difference in bytes that should be 0: written as bytes, so that one stray byte shows."""
    return "0" if n == 0 else f"{n:+,} B"


def report(results, s, mode):
    """The results file's text, and whether every saved-bytes ratio is exactly 1."""
    lines = ["# Autograd memory: tinypytorch and PyTorch", "",
             f"Written by `python bench/bench_memory.py{' --quick' if mode == 'quick' else ''}` on "
             f"{datetime.date.today().isoformat()}. An MLP of `depth` Linear layers {s['width']:,} → {s['width']:,} "
             f"with tanh between them, a batch of {s['batch']:,} rows, a mean-squared-error loss against a fixed "
             "target; PyTorch runs a twin with the same weights. Sizes in MiB (2^20 bytes). Nothing here is timed.",
             ""]
    lines += [f"- {key}: {value}" for key, value in machine().items()]
    lines += ["", "## Side by side", "",
              "Saved for backward: the bytes a counting pack hook sees, the same hook in both frameworks (a tensor "
              "saved twice counts twice). Peak: the most memory held during forward + backward, above what was "
              "held before (tinypytorch: `tracemalloc`, arrays and Python objects; PyTorch: its profiler, tensors).",
              "", "| depth | dtype | saved, tinypytorch | saved, PyTorch | saved: tinypytorch / PyTorch "
              "| tensors saved, tinypytorch | tensors saved, PyTorch | peak, tinypytorch | peak, PyTorch "
              "| peak: tinypytorch / PyTorch |", "|---|---|---|---|---|---|---|---|---|---|"]
    all_equal = True
    for (depth, dtype), row in results.items():
        (saved, memory), (saved_t, memory_t) = row["tinypytorch"], row["torch"]
        all_equal &= saved.bytes == saved_t.bytes and saved.count == saved_t.count
        lines.append(f"| {depth} | {dtype} | {mib(saved.bytes)} | {mib(saved_t.bytes)} | "
                     f"{saved.bytes / saved_t.bytes:.2f} | {saved.count} | {saved_t.count} | {mib(memory.peak)} | "
                     f"{mib(memory_t.peak)} | {memory.peak / memory_t.peak:.2f} |")
    expected = [expected_saved(depth, s["width"], s["batch"], np.dtype(DTYPES[dtype][0]).itemsize)
                for depth, dtype in results]
    by_hand = all((row[framework][0].bytes, row[framework][0].count) == counted
                  for row, counted in zip(results.values(), expected) for framework in ("tinypytorch", "torch"))
    lines += ["", f"Target: saved bytes equal, a ratio of exactly 1.00: {'met' if all_equal else 'NOT met'} "
              f"(bytes and tensor counts equal at every depth and dtype). Both equal the count by hand, 3 × depth "
              f"tensors of (2 depth + 1) × batch × width + (depth − 1) × width² elements in all: "
              f"{'yes' if by_hand else 'NO'} (the first Linear saves its input, the batch; every other Linear its input "
              "and its weight; each tanh its output; the loss both operands). PyTorch saves the transpose of each "
              "weight, a view: the same bytes."]
    for framework, title, how in [
            ("tinypytorch", "tinypytorch, measured with `tracemalloc`",
             "Held: bytes of NumPy arrays (NumPy's own `tracemalloc` domain: exact). Peak: every traced "
             "allocation, arrays and Python objects. Graph objects: the Python objects (Variables, Functions, "
             "saved-tensor records) held after forward, in KiB."),
            ("torch", "PyTorch, measured with its profiler",
             "`torch.profiler.profile(profile_memory=True)` records each allocation and free of PyTorch's CPU "
             "allocator, in order; their running sum is the memory held. It sees tensors only: not MKL's or "
             "oneDNN's own scratch memory, not Python objects.")]:
        lines += ["", f"## {title}", "", how + " Output: the loss's own memory. Activations: the distinct memory "
                  "blocks saved for backward that are not parameters, the batch or the target (a tanh output "
                  "saved twice counts once). \"Held after forward − output − activations\" should be 0.", "",
                  "| depth | dtype | peak | held after forward | output | activations saved "
                  "| after forward − output − activations | held after backward (loss referenced) | gradients "
                  "| after backward − output − gradients | held after the loss is dropped |"
                  + (" graph objects, KiB |" if framework == "tinypytorch" else ""),
                  "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if framework == "tinypytorch" else "")]
        for (depth, dtype), row in results.items():
            saved, m = row[framework]
            lines.append(f"| {depth} | {dtype} | {mib(m.peak)} | {mib(m.after_forward)} | {m.output:,} B | "
                         f"{mib(saved.activations)} | {difference(m.after_forward - m.output - saved.activations)} | "
                         f"{mib(m.after_backward)} | {mib(m.gradients)} | "
                         f"{difference(m.after_backward - m.output - m.gradients)} | {mib(m.after_drop)} |"
                         + (f" {m.overhead / 1024:.1f} |" if framework == "tinypytorch" else ""))
    buffer = all(row["torch"][1].output == s["batch"] * s["width"] * np.dtype(DTYPES[dtype][0]).itemsize
                 for (_, dtype), row in results.items())
    if buffer:
        lines += ["", "PyTorch's output is larger: its `mse_loss` returns a 0-d loss whose storage is a whole batch × "
                  "width buffer, held until the loss is dropped; tinypytorch's loss holds one number."]

    def check(framework, holds):
        return f"{LABELS[framework]} {'yes' if all(holds(*row[framework]) for row in results.values()) else 'NO'}"

    checks = {
        "held after forward − output = activations saved":
            lambda saved, m: m.after_forward - m.output == saved.activations,
        "held after backward = gradients + output (the saved tensors freed, the loss still referenced)":
            lambda saved, m: m.after_backward == m.gradients + m.output,
        "held after the loss is dropped = gradients": lambda saved, m: m.after_drop == m.gradients,
    }
    lines += ["", "Checks, to the byte: " + "; ".join(
        f"{name}: {check('tinypytorch', holds)}, {check('torch', holds)}" for name, holds in checks.items()) + "."]
    if all(holds(*row["torch"]) for row in results.values() for holds in checks.values()):
        lines.append("PyTorch's profiler figures pass the same checks as tinypytorch's `tracemalloc` figures, which "
                     "is why they are reported: they account for every tensor PyTorch allocates on the CPU (not for "
                     "the memory the process takes from the OS, nor for MKL's and oneDNN's scratch memory).")
    else:
        lines.append("PyTorch's profiler figures fail a check: its allocator saw memory that the saved tensors, "
                     "the loss and the gradients do not account for. Read its columns with care.")
    lines.append("")
    return "\n".join(lines), all_equal


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = {"float32": "tab:blue", "float64": "tab:red"}
    for dtype, colour in colours.items():
        depths = [d for d, t in results if t == dtype]
        for framework, style, marker, label in [("tinypytorch", "-", "o", "tinypytorch"),
                                                ("torch", "--", "x", "PyTorch")]:
            saved = [results[d, dtype][framework][0].bytes / MiB for d in depths]
            left.plot(depths, saved, style, marker=marker, color=colour, markersize=8 if marker == "x" else 5,
                      label=f"{label}, {dtype}")
            peak = [results[d, dtype][framework][1].peak / MiB for d in depths]
            right.plot(depths, peak, style, marker=marker, color=colour, markersize=8 if marker == "x" else 5,
                       label=f"{label} peak, {dtype}")
        gradients = [results[d, dtype]["tinypytorch"][1].gradients / MiB for d in depths]
        right.plot(depths, gradients, ":", color=colour, alpha=0.6, label=f"the gradients alone, {dtype}")
    for axis, title in [(left, "saved for backward (pack hooks): the lines coincide"),
                        (right, "peak memory during forward + backward")]:
        axis.set_xticks(sorted({d for d, _ in results}), [str(d) for d in sorted({d for d, _ in results})])
        axis.set_xlabel("depth (Linear layers)")
        axis.set_ylabel("MiB")
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ----- checkpointing: the same MLP in segments ------------------------------------------------------
#
# Three configurations of the MLP's `depth` layers (a layer: Linear, then tanh, the last Linear alone):
# plain; checkpoint_sequential with round(√depth) segments; checkpoint_sequential with `depth` segments
# (every layer checkpointed). Both frameworks split as PyTorch does: k segments of depth // k layers,
# the last segment taking the remainder and running plainly (its activations are needed at once).

CONFIGURATIONS = {"plain": "plain", "sqrt": "√N segments", "every": "every layer"}

CHECKPOINT_SETTINGS = {
    # repeats: how many timed forward + backward passes per configuration at each depth (fewer for the deepest)
    "full": {"depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256, "dtype": "float32",
             "repeats": {8: 5, 16: 5, 32: 5, 64: 3, 128: 3}},
    "quick": {"depths": [4, 9, 16], "width": 64, "batch": 16, "dtype": "float32", "repeats": {4: 2, 9: 2, 16: 2}},
}


def segments_for(configuration, depth):
    """checkpoint_sequential's `segments` for a configuration; None: no checkpointing at all."""
    return {"plain": None, "sqrt": round(math.sqrt(depth)), "every": depth}[configuration]


def segment_layout(depth, segments):
    """(k, s, m): k segments, the first k - 1 of s layers checkpointed, the last of m layers run plainly."""
    if segments is None:
        return 1, depth, depth
    size = depth // segments
    return segments, size, depth - (segments - 1) * size


def expected_saved_checkpointed(depth, segments, width, batch, itemsize):
    """What a counting pack hook should see under checkpoint_sequential, by hand: (bytes, tensors).

    Each checkpointed segment's input (k - 1 of batch x width; the first is the batch), then what the
    last segment's m layers save plainly: each Linear its input and its weight (the segment's input
    needs a gradient, unless it is the batch: then the first weight is not saved), each of its m - 1
    tanh its output, and the loss both operands. With segments=None this is expected_saved.
    """
    k, _, m = segment_layout(depth, segments)
    first_is_batch = k == 1
    tensors = (k - 1) + 3 * m + 1 - first_is_batch
    elements = ((k - 1) + 2 * m + 1) * batch * width + (m - first_is_batch) * width * width
    return elements * itemsize, tensors


def held_activations(depth, segments):
    """Activations (arrays of batch x width) held for backward when the forward pass ends, by the schedule.

    The inputs of the checkpointed segments but the first (which is the batch, no new memory): k - 2;
    the last segment's input, the outputs of its m - 1 tanh and the network's output: m + 1. While a
    checkpointed segment is recomputed, fewer are held (the inputs still waiting, and s recomputed),
    so this is the most held at any moment. Plain: all `depth` (k = 1, m = depth).
    """
    k, _, m = segment_layout(depth, segments)
    return k + m - 1


def recomputed_layers(depth, segments):
    """How many layers backward runs again: those of the k - 1 checkpointed segments (all of each: every segment
    ends with a tanh, which saves its output, so the recomputation cannot stop early)."""
    k, size, _ = segment_layout(depth, segments)
    return (k - 1) * size


def predicted_activations(depth, segments):
    """The √N scheme's estimate: k kept segment inputs plus one segment of N / k recomputed activations."""
    k = segment_layout(depth, segments)[0]
    return k + depth / k


def working_memory(width, batch):
    """Elements in flight while one Linear layer runs backward, by hand: its weight's gradient (width x width)
    and two batch x width gradients (the one arriving and the one leaving). Not held for backward."""
    return width * width + 2 * batch * width


@dataclasses.dataclass
class Checkpointed:
    """One configuration at one depth in one framework."""
    saved: Saved  # the counting pack hook, outermost
    kept: Memory  # forward + backward, the gradients kept in .grad
    dropped: Memory  # forward + backward, each gradient let go when complete
    seconds: list  # forward + backward, each timed repeat


def time_passes(passes, clear, repeats):
    """{name: [seconds of each repeat]} of forward + backward for each of `passes` ({name: () -> loss}).

    The configurations take turns, one repeat each, so that a change in the machine's load hits them
    alike; the garbage collector is off while a pass runs (as in `timeit`), `clear()` runs untimed after it.
    """
    times = {name: [] for name in passes}
    for _ in range(repeats):
        for name, forward in passes.items():
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                forward().backward()
                times[name].append(time.perf_counter() - start)
            finally:
                gc.enable()
            clear()
    return times


def run_checkpoint(s):
    """{(depth, configuration): {"tinypytorch": Checkpointed, "torch": Checkpointed}}."""
    results = {}
    dtype = DTYPES[s["dtype"]][0]
    for depth in s["depths"]:
        model = build_mlp(depth, s["width"], dtype)
        x, target = batch_and_target(s["batch"], s["width"], dtype)
        segments = {c: segments_for(c, depth) for c in CONFIGURATIONS}
        rows = {c: {} for c in CONFIGURATIONS}
        for framework in ("tinypytorch", "torch"):
            if framework == "tinypytorch":
                net, saved, memory, loss, clear = (model, saved_tinypytorch, memory_tinypytorch, loss_tinypytorch,
                                                   model.cleargrads)
            else:
                net = torch_twin(model)
                del model  # one framework's parameters in memory at a time
                saved, memory, loss, clear = saved_torch, memory_torch, loss_torch, net.zero_grad
            counted = {c: saved(net, x, target, segments[c]) for c in CONFIGURATIONS}  # also a warm-up pass
            kept = {c: memory(net, x, target, segments[c]) for c in CONFIGURATIONS}
            dropped = {c: memory(net, x, target, segments[c], drop_gradients=True) for c in CONFIGURATIONS}
            times = time_passes({c: functools.partial(loss, net, x, target, segments[c]) for c in CONFIGURATIONS},
                                clear, s["repeats"][depth])
            for c in CONFIGURATIONS:
                rows[c][framework] = Checkpointed(counted[c], kept[c], dropped[c], times[c])
            del net, clear
        for c in CONFIGURATIONS:
            results[depth, c] = rows[c]
        print(f"depth {depth:3}: saved " + ", ".join(
            f"{CONFIGURATIONS[c]} " + "/".join(f"{rows[c][f].saved.bytes / MiB:.1f}" for f in LABELS)
            for c in CONFIGURATIONS) + " MiB (tinypytorch/PyTorch)", flush=True)
    return results


def _median_ratio(row, framework, plain_row):
    """A configuration's median forward + backward time over the plain run's, in one framework."""
    return statistics.median(row[framework].seconds) / statistics.median(plain_row[framework].seconds)


def _best_ratio(row, framework, plain_row):
    """The same with the fastest repeat of each: what the machine's other work disturbs least."""
    return min(row[framework].seconds) / min(plain_row[framework].seconds)


def report_checkpoint(results, s, mode):
    """The checkpointing results file's text, and whether each target was met.

    Targets: {"saved": tinypytorch saves no more than PyTorch in every configuration,
    "peak": {framework: the √N configuration's peak, gradients let go, within 1.2x of (k + N/k) a + c},
    "time": {framework: every checkpointed configuration at most 1.35x the plain run's median time}}.
    """
    itemsize = np.dtype(DTYPES[s["dtype"]][0]).itemsize
    a = s["batch"] * s["width"] * itemsize  # one activation, in bytes
    c = working_memory(s["width"], s["batch"]) * itemsize
    unit, unit_name = (MiB, "MiB") if a >= MiB / 4 else (1024, "KiB")

    def size(n):
        return f"{n / unit:.2f}"

    rng_bytes = torch.get_rng_state().nbytes
    depths = sorted({d for d, _ in results})
    lines = ["# Gradient checkpointing: tinypytorch and PyTorch", "",
             f"Written by `python bench/bench_memory.py{' --quick' if mode == 'quick' else ''}` on "
             f"{datetime.date.today().isoformat()}. The MLP of `memory.md`: N Linear layers "
             f"{s['width']:,} → {s['width']:,} with tanh between them, a batch of {s['batch']:,} rows, a "
             f"mean-squared-error loss against a fixed target, in {s['dtype']}; PyTorch runs a twin with the same "
             f"weights. Sizes in {unit_name}; one activation, a = batch × width × {itemsize} bytes = {size(a)} "
             f"{unit_name}.", "",
             "Three configurations of the N layers (a layer: a Linear and the tanh after it; the last Linear alone):",
             "", "- plain: no checkpointing;",
             "- √N segments: `checkpoint_sequential(layers, round(√N), x, use_reentrant=False)`;",
             "- every layer: `checkpoint_sequential(layers, N, x, use_reentrant=False)`.", "",
             "`tinypytorch.utils.checkpoint.checkpoint_sequential` and `torch.utils.checkpoint.checkpoint_sequential`, "
             "both with `use_reentrant=False` (checkpointing on saved-tensor hooks, the mode PyTorch recommends) and "
             "`preserve_rng_state=True` (the default). Both split alike: k segments of N // k layers, all but the "
             "last checkpointed; the last segment takes the remainder and runs plainly, since backward needs its "
             "activations at once. So every layer means N − 1 checkpointed layers, and √N segments leave "
             "m = N − (k − 1)(N // k) layers to the last segment:", "",
             "| N | √N segments: k | layers per checkpointed segment | last segment, m | recomputed layers, √N "
             "| recomputed layers, every layer |", "|---|---|---|---|---|---|"]
    for depth in depths:
        k, per_segment, m = segment_layout(depth, segments_for("sqrt", depth))
        lines.append(f"| {depth} | {k} | {per_segment} | {m} | {recomputed_layers(depth, k)} | "
                     f"{recomputed_layers(depth, depth)} |")
    if mode == "quick":
        lines += ["", "A smoke test at small sizes, where each operation's fixed costs and Python objects weigh most: "
                  "the targets are meant for the full run (`bench/results/checkpoint.md`)."]
    lines += [""] + [f"- {key}: {value}" for key, value in machine().items()]

    # 1. saved bytes
    lines += ["", "## Saved for backward", "",
              "The bytes a counting pack hook sees, entered around the whole forward pass, the same hook in both "
              "frameworks (as in `memory.md`). Inside a checkpointed segment the checkpoint's own hooks are the "
              "innermost and win, so the counting hook sees what is kept outside the checkpoints plus each "
              "checkpoint's input; the checkpoints' placeholders hold no tensor. Expected, by counting: the k − 1 "
              "checkpointed segments' inputs, plus what the last segment saves plainly (each Linear its input and "
              "its weight, each tanh its output, the loss both operands).", "",
              "| N | configuration | segments | saved, tinypytorch | saved, PyTorch | tinypytorch / PyTorch "
              "| tensors, tinypytorch | tensors, PyTorch | expected by counting | as expected |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    saved_target = by_hand = True
    for (depth, conf), row in results.items():
        ours, theirs = row["tinypytorch"].saved, row["torch"].saved
        segments = segments_for(conf, depth)
        expected = expected_saved_checkpointed(depth, segments, s["width"], s["batch"], itemsize)
        matches = all((r.saved.bytes, r.saved.count) == expected for r in row.values())
        saved_target &= ours.bytes <= theirs.bytes
        by_hand &= matches
        lines.append(f"| {depth} | {CONFIGURATIONS[conf]} | {segments or '—'} | {size(ours.bytes)} | "
                     f"{size(theirs.bytes)} | {ours.bytes / theirs.bytes:.2f} | {ours.count} | {theirs.count} | "
                     f"{size(expected[0])} ({expected[1]} tensors) | {'yes' if matches else 'NO'} |")
    lines += ["", f"Target: tinypytorch saves no more than PyTorch in every configuration: "
              f"{'met' if saved_target else 'NOT met'}. Both equal the count by hand, bytes and tensors: "
              f"{'yes' if by_hand else 'NO'}. The hook counts every saved tensor, each saved weight too (width², "
              f"{s['width'] / s['batch']:g} activations' worth, but a parameter: no new memory), and a tanh output "
              "twice (its tanh and the next Linear save it): saved bytes are not the memory held, which is measured "
              "below."]

    # 2. peak memory and the k + N/k prediction
    lines += ["", "## Peak memory and the k + N/k prediction", "",
              "Measured as in `memory.md`: tinypytorch with `tracemalloc` (every traced allocation, NumPy arrays and "
              "Python objects), PyTorch with its profiler (every tensor of its CPU allocator); the most held at any "
              "moment of forward + backward, above what was held before.", "",
              "What is predicted. The √N scheme keeps k segment inputs and recomputes one segment of N / k layers "
              "at a time, so at most **k + N/k activations** (arrays of batch × width) are held for backward. A "
              "backward pass needs more than that at its peak: the working memory of one layer's backward, counted "
              f"by hand as its weight's gradient (width², {size(s['width'] ** 2 * itemsize)} {unit_name}) and two "
              f"batch × width gradients in flight (the one arriving, the one leaving): **c = {size(c)} {unit_name}**; "
              "and the parameters' gradients, N × (width² + width) elements, which checkpointing cannot shrink. "
              "Two measurements separate them:", "",
              "- gradients let go: each parameter's gradient is dropped as soon as it is complete (tinypytorch: a "
              "hook on the parameter replaces it by a broadcast view of one zero; PyTorch: "
              "`register_post_accumulate_grad_hook` sets `.grad` to None), as an optimizer stepping inside backward "
              "would. Predicted peak: **(k + N/k) a + c**. The target compares this peak with this prediction.",
              "- gradients kept: the ordinary `loss.backward()`, every gradient in `.grad` at the end. Predicted "
              "peak: (k + N/k) a + the gradients.", "",
              "k + N/k is the idealised count, with k = 1 for plain and k = N for every layer.", "",
              "### Gradients let go: the activations", "",
              "| N | configuration | k + N/k | predicted peak | peak, tinypytorch | peak, PyTorch "
              "| tinypytorch / predicted | PyTorch / predicted |", "|---|---|---|---|---|---|---|---|"]
    sqrt_ratios = {f: {} for f in LABELS}
    for (depth, conf), row in results.items():
        segments = segments_for(conf, depth)
        predicted = predicted_activations(depth, segments) * a + c
        ratios = {f: r.dropped.peak / predicted for f, r in row.items()}
        if conf == "sqrt":
            for f, ratio in ratios.items():
                sqrt_ratios[f][depth] = ratio
        lines.append(f"| {depth} | {CONFIGURATIONS[conf]} | {predicted_activations(depth, segments):.2f} | "
                     f"{size(predicted)} | {size(row['tinypytorch'].dropped.peak)} | {size(row['torch'].dropped.peak)} "
                     f"| {ratios['tinypytorch']:.2f} | {ratios['torch']:.2f} |")
    peak_target = {f: all(r <= 1.2 for r in sqrt_ratios[f].values()) for f in LABELS}
    plain_fit = {f: [row[f].dropped.peak / (depth * a + c) for (depth, conf), row in results.items()
                     if conf == "plain"] for f in LABELS}
    lines += ["", "The plain run's peak over N a + c (its N activations and one layer's backward): " + "; ".join(
              f"{LABELS[f]} {min(fit):.3f} to {max(fit):.3f}" for f, fit in plain_fit.items()) + ". So c is about "
              "what a backward step adds (a little less where a framework frees a gradient sooner). Every layer "
              "peaks as plain does: checkpointing a layer keeps its input, which is the tanh output the plain run "
              "keeps anyway, so it saves nothing here and only recomputes. The activations alone, without c (the "
              "schedule's k + m − 1 below, against k + N/k), are within " + ", ".join(
                  f"{held_activations(d, k) / predicted_activations(d, k):.2f}"
                  for d, k in ((d, segments_for("sqrt", d)) for d in depths))
              + f" at N = {', '.join(map(str, depths))} for √N segments."]
    lines.append("")
    for f in LABELS:
        missed = [str(d) for d, r in sqrt_ratios[f].items() if r > 1.2]
        lines.append(f"Target: the √N configuration's peak within 1.2× of (k + N/k) a + c, {LABELS[f]}: "
                     f"{'met at every depth' if not missed else 'NOT met at N = ' + ', '.join(missed)} (ratios "
                     + ", ".join(f"{r:.3f}" for r in sqrt_ratios[f].values())
                     + f" at N = {', '.join(map(str, depths))}).")

    lines += ["", "The schedule that checkpoint_sequential runs holds k + m − 1 activations when the forward pass "
              "ends (the checkpointed segments' inputs but the first, which is the batch; the last segment's input, "
              "its m − 1 tanh outputs and the network's output), and no more at any later moment (a segment being "
              "recomputed holds N // k ≤ m). \"Held after forward\" measures it: the bytes held after the forward "
              "pass, less the loss's own, in activations.", "",
              "| N | configuration | k + m − 1 | held after forward, tinypytorch | held after forward, PyTorch "
              "| (k + m − 1) a + c | peak, tinypytorch / that | peak, PyTorch / that |",
              "|---|---|---|---|---|---|---|---|"]
    exact = {f: True for f in LABELS}
    for (depth, conf), row in results.items():
        segments = segments_for(conf, depth)
        k = segment_layout(depth, segments)[0]
        held = {f: r.dropped.after_forward - r.dropped.output for f, r in row.items()}
        exact["tinypytorch"] &= held["tinypytorch"] == held_activations(depth, segments) * a
        exact["torch"] &= held["torch"] == held_activations(depth, segments) * a + (k - 1) * rng_bytes
        schedule = held_activations(depth, segments) * a + c
        lines.append(f"| {depth} | {CONFIGURATIONS[conf]} | {held_activations(depth, segments)} | "
                     f"{held['tinypytorch'] / a:.3f} | {held['torch'] / a:.3f} | {size(schedule)} | "
                     f"{row['tinypytorch'].dropped.peak / schedule:.3f} | {row['torch'].dropped.peak / schedule:.3f} |")
    lines += ["", f"Checks, to the byte: tinypytorch holds (k + m − 1) a after forward in every row: "
              f"{'yes' if exact['tinypytorch'] else 'NO'}; PyTorch holds (k + m − 1) a + (k − 1) × "
              f"{rng_bytes:,} B: {'yes' if exact['torch'] else 'NO'} (each of its checkpoints keeps the CPU random "
              f"generator's state, a {rng_bytes:,}-byte tensor, for the recomputation; tinypytorch keeps NumPy's as "
              "a Python dict, not an array). The peaks differ from (k + m − 1) a + c by the last two columns: by what "
              "a framework's backward step holds beyond c or short of it, and in tinypytorch by Python objects (the "
              "graph's nodes) too."]
    by_schedule = [d for d, r in sqrt_ratios["tinypytorch"].items()
                   if max(sqrt_ratios[f][d] for f in LABELS) > 1.2
                   and held_activations(d, segments_for("sqrt", d)) > predicted_activations(d, segments_for("sqrt", d))]
    if by_schedule:
        d = by_schedule[-1]
        k, per_segment, m = segment_layout(d, segments_for("sqrt", d))
        lines += ["", f"Where the target is missed (N = {', '.join(map(str, by_schedule))}), the segmenting is why: "
                  f"at N = {d}, {k} segments of {per_segment} layers leave m = {m} layers to the last segment, which "
                  f"runs plainly, so the schedule holds k + m − 1 = {k + m - 1} activations where the idealised "
                  f"k + N/k is {predicted_activations(d, segments_for('sqrt', d)):.2f}. Both frameworks split the "
                  "same way (PyTorch's rule), and against the schedule's own count both peaks are within the last "
                  "two columns."]

    lines += ["", "### Gradients kept", "",
              "| N | configuration | gradients | peak, tinypytorch | peak, PyTorch | peak − gradients, tinypytorch "
              "| peak − gradients, PyTorch | predicted: (k + N/k) a + gradients | tinypytorch / predicted "
              "| PyTorch / predicted |", "|---|---|---|---|---|---|---|---|---|---|"]
    kept_ratios = []
    for (depth, conf), row in results.items():
        gradients = row["tinypytorch"].kept.gradients
        predicted = predicted_activations(depth, segments_for(conf, depth)) * a + gradients
        kept_ratios += [r.kept.peak / predicted for r in row.values()]
        lines.append(f"| {depth} | {CONFIGURATIONS[conf]} | {size(gradients)} | {size(row['tinypytorch'].kept.peak)} "
                     f"| {size(row['torch'].kept.peak)} | {size(row['tinypytorch'].kept.peak - gradients)} | "
                     f"{size(row['torch'].kept.peak - row['torch'].kept.gradients)} | {size(predicted)} | "
                     f"{row['tinypytorch'].kept.peak / predicted:.2f} | {row['torch'].kept.peak / predicted:.2f} |")
    lines += ["", f"With every gradient kept, every configuration's peak is within 1.2× of its prediction "
              f"({min(kept_ratios):.2f} to {max(kept_ratios):.2f}), plain included, so this comparison cannot tell "
              "checkpointing from none here. The peak comes at the end of backward: a weight's gradient "
              f"({size(s['width'] ** 2 * itemsize)} {unit_name}) is larger than a layer's activation ({size(a)} "
              f"{unit_name}), so memory grows as backward frees activations and keeps gradients, and at the end "
              "almost no activation is left in any configuration. Checkpointing lowers this workload's peak only "
              "where the gradients do not pile up (let go, as above, or a batch large against the width)."]

    # 3. time
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    lines += ["", "## Time of forward + backward", "",
              "Each configuration's forward + backward (no hooks, no measurement), timed with `time.perf_counter` "
              "with the garbage collector off, the configurations taking turns within one run; the median of the "
              "repeats (fewer for the deepest nets, to keep the run short), and its ratio to the plain run's median "
              "in the same framework; the targets are on these. \"Best\": the same ratio with the fastest repeat of "
              "each, which the machine's other work disturbs least. PyTorch on one thread (as in "
              f"`bench_autograd.py`), NumPy's BLAS with OPENBLAS_NUM_THREADS={blas}. Timings are reported here "
              "only, never asserted in tests.", "",
              "| N | repeats | configuration | recomputed layers | tinypytorch, s | tinypytorch / plain | best "
              "| PyTorch, s | PyTorch / plain | best |", "|---|---|---|---|---|---|---|---|---|---|"]
    time_ratios = {f: {} for f in LABELS}
    for (depth, conf), row in results.items():
        plain = results[depth, "plain"]
        segments = segments_for(conf, depth)
        for f in LABELS:
            if conf != "plain":
                time_ratios[f][depth, conf] = _median_ratio(row, f, plain)
        lines.append(f"| {depth} | {len(row['tinypytorch'].seconds)} | {CONFIGURATIONS[conf]} | "
                     f"{recomputed_layers(depth, segments) if segments else 0} | "
                     + " | ".join(f"{statistics.median(row[f].seconds):.3f} | {_median_ratio(row, f, plain):.2f} | "
                                  f"{_best_ratio(row, f, plain):.2f}" for f in LABELS) + " |")
    time_target = {f: all(r <= 1.35 for r in time_ratios[f].values()) for f in LABELS}
    lines.append("")
    for f in LABELS:
        missed = [f"N = {d}, {CONFIGURATIONS[conf]} ({r:.3f})" for (d, conf), r in time_ratios[f].items() if r > 1.35]
        lines.append(f"Target: recomputation at most 1.35× the plain run, {LABELS[f]}: "
                     f"{'met in every checkpointed row' if not missed else 'NOT met at ' + '; '.join(missed)}.")
    expected = {conf: [1 + recomputed_layers(d, segments_for(conf, d)) / (3 * d) for d in depths]
                for conf in ("sqrt", "every")}
    lines += ["", "What to expect: recomputing r of the N layers adds one forward of each, and a layer's forward (one "
              "matrix product) is about a third of its forward + backward (three), so about 1 + r / (3N): "
              + "; ".join(f"{CONFIGURATIONS[conf]} {min(e):.2f} to {max(e):.2f}" for conf, e in expected.items())
              + " at these depths. The elementwise work (tanh, the loss) and each framework's bookkeeping move it a "
              "little; a busy machine moves it more.", ""]
    return "\n".join(lines), {"saved": saved_target, "peak": peak_target, "time": time_target}


def plot_checkpoint(results, s, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    itemsize = np.dtype(DTYPES[s["dtype"]][0]).itemsize
    a = s["batch"] * s["width"] * itemsize
    c = working_memory(s["width"], s["batch"]) * itemsize
    depths = sorted({d for d, _ in results})
    colours = {"plain": "tab:blue", "sqrt": "tab:orange", "every": "tab:green"}
    figure, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    (saved_axis, dropped_axis), (kept_axis, time_axis) = axes
    for conf, colour in colours.items():
        for framework, style, marker in [("tinypytorch", "-", "o"), ("torch", "--", "x")]:
            label = f"{LABELS[framework]}, {CONFIGURATIONS[conf]}"
            size = 8 if marker == "x" else 5
            rows = [results[d, conf][framework] for d in depths]
            saved_axis.plot(depths, [r.saved.bytes / MiB for r in rows], style, marker=marker, color=colour,
                            markersize=size, label=label)
            dropped_axis.plot(depths, [r.dropped.peak / MiB for r in rows], style, marker=marker, color=colour,
                              markersize=size, label=label)
            kept_axis.plot(depths, [r.kept.peak / MiB for r in rows], style, marker=marker, color=colour,
                           markersize=size, label=label)
            if conf != "plain":
                ratios = [_median_ratio(results[d, conf], framework, results[d, "plain"]) for d in depths]
                time_axis.plot(depths, ratios, style, marker=marker, color=colour, markersize=size, label=label)
        dropped_axis.plot(depths, [(predicted_activations(d, segments_for(conf, d)) * a + c) / MiB for d in depths],
                          ":", color=colour, alpha=0.7, label=f"predicted (k + N/k) a + c, {CONFIGURATIONS[conf]}")
    kept_axis.plot(depths, [results[d, "plain"]["tinypytorch"].kept.gradients / MiB for d in depths], ":",
                   color="black", alpha=0.6, label="the gradients alone")
    for conf in ("sqrt", "every"):
        time_axis.plot(depths, [1 + recomputed_layers(d, segments_for(conf, d)) / (3 * d) for d in depths], ":",
                       color=colours[conf], alpha=0.7, label=f"expected 1 + r / (3N), {CONFIGURATIONS[conf]}")
    time_axis.axhline(1.35, color="tab:red", linestyle=":", label="target: 1.35")
    time_axis.axhline(1.0, color="tab:blue", alpha=0.5, label="plain")
    titles = {saved_axis: "saved for backward (outer counting pack hook)",
              dropped_axis: "peak, gradients let go when complete (every layer = plain here)",
              kept_axis: "peak, gradients kept in .grad (the configurations coincide)",
              time_axis: "forward + backward time / plain (median)"}
    for axis, title in titles.items():
        axis.set_xscale("log", base=2)
        if axis is not time_axis:
            axis.set_yscale("log", base=2)
            axis.set_ylabel("MiB")
        else:
            axis.set_ylabel("ratio")
        axis.set_xticks(depths, [str(d) for d in depths])
        axis.set_xlabel("depth N (Linear layers)")
        axis.set_title(title)
        axis.grid(True, alpha=0.3, which="both")
        axis.legend(fontsize=7)
    figure.suptitle(f"Checkpointing an MLP (width {s['width']}, batch {s['batch']}, {s['dtype']}), "
                    "use_reentrant=False: tinypytorch (solid) and PyTorch (dashed)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# ----- reversible networks: a RevNet stack of coupling blocks, and RevCol's columns ---------------------------
#
# The coupling stack: N AdditiveCoupling blocks on features of `width` split into two halves, f and g each a
# Linear(half, half) with tanh after it; the loss, a mean squared error against a fixed target, on the output.
# Three configurations of the same blocks: plain (each block recorded as it runs); checkpoint_sequential with
# round(√N) segments (as above); reversible (ReversibleSequential: one Function that keeps only the output).
# RevCol: N columns (RevColumn) of L levels, level i: c_i' = tanh(Linear(below) + Linear(above)) + alpha_i c_i
# (below: c_{i-1}' of this column, x for level 0; above: c_{i+1} of the column before, none for the top level),
# the first column's states zero; the loss on the last column's top level. Three configurations of the same
# columns: non-reversible (RevColumn(..., reversible=False), everything recorded); reversible, one Function per
# column (RevCol's ReverseFunction, each keeping x and its new c's); reversible, one Function over all the
# columns (ReversibleColumns: x and the last column's c's only).


class LinearTanh(Layer):
    """f or g of a coupling block: tanh(Linear(size, size))."""

    def __init__(self, size, rng):
        super().__init__()
        self.linear = Linear(size, size, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def _cast(layer, dtype):
    for p in layer.params():
        p.data = p.data.astype(dtype)  # Linear draws float64 weights; float32 gets them rounded
    return layer


def build_coupling_stack(depth, width, dtype, seed=0):
    """ReversibleSequential of `depth` AdditiveCoupling blocks on `width` features; its .blocks run plainly too."""
    rng = np.random.default_rng(seed)
    blocks = [AdditiveCoupling(LinearTanh(width // 2, rng), LinearTanh(width // 2, rng)) for _ in range(depth)]
    return _cast(ReversibleSequential(*blocks), dtype)


COUPLING_CONFIGURATIONS = {"plain": "plain", "sqrt": "√N segments", "reversible": "reversible"}


def loss_coupling_tinypytorch(net, x, target, configuration):
    """The loss of the coupling stack `net` on x: its blocks plainly, in √N checkpointed segments, or reversibly."""
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    if configuration == "reversible":
        y = net(x)
    elif configuration == "sqrt":
        y = checkpoint_sequential(net.blocks, segments_for("sqrt", len(net.blocks)), x, use_reentrant=False)
    else:
        y = x
        for block in net.blocks:
            y = block(y)
    return tinypytorch.mean_squared_error(y, target)


class TorchCoupling(torch.nn.Module):
    """AdditiveCoupling in PyTorch: y1 = x1 + f(x2), y2 = x2 + g(y1); and its inverse."""

    def __init__(self, f, g):
        super().__init__()
        self.f, self.g = f, g

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=-1)
        y1 = x1 + self.f(x2)
        return torch.cat([y1, x2 + self.g(y1)], dim=-1)

    def inverse(self, y):
        y1, y2 = y.chunk(2, dim=-1)
        x2 = y2 - self.g(y1)
        return torch.cat([y1 - self.f(x2), x2], dim=-1)


class TorchReversibleFunction(torch.autograd.Function):
    """tinypytorch's ReversibleFunction in PyTorch: the blocks run under no_grad, only the output is saved;
    backward walks the blocks in reverse, computing each block's input from its output, running the block
    again with the graph recorded and backpropagating through it.

    One difference, PyTorch's reversible libraries' way (RevCol's ReverseFunction, MemCNN): each block's
    parameters get their gradients into .grad as that block's backward ends (torch.autograd.backward),
    where tinypytorch's sends them on to the running pass through the graph as that block is done
    (engine.send_early). Either way a hook lets each block's gradients go when they are complete. The blocks draw no random numbers: no RNG state is kept.
    """

    @staticmethod
    def forward(ctx, x, blocks, *params):
        ctx.blocks = blocks
        with torch.no_grad():
            for block in blocks:
                x = block(x)
        ctx.save_for_backward(x)  # the output, and nothing else
        return x

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        for block in reversed(ctx.blocks):
            with torch.no_grad():
                x = block.inverse(y)
            leaf = x.detach().requires_grad_()
            with torch.enable_grad():
                output = block(leaf)
            torch.autograd.backward(output, gy)  # the block's parameters' gradients go into .grad now
            gy, y = leaf.grad, x
            del output, leaf
        return (gy if ctx.needs_input_grad[0] else None, None, *[None] * (len(ctx.needs_input_grad) - 2))


def torch_coupling_twin(net):
    """A ModuleList of TorchCoupling blocks with the weights of `net`'s blocks (f, g: Sequential(Linear, Tanh))."""
    blocks = []
    for block in net.blocks:
        halves = []
        for half in (block.f, block.g):
            out_size, in_size = half.linear.weight.shape
            linear = torch.nn.Linear(in_size, out_size, dtype=DTYPES[half.linear.weight.dtype.name][1])
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(half.linear.weight.data))
                linear.bias.copy_(torch.from_numpy(half.linear.bias.data))
            halves.append(torch.nn.Sequential(linear, torch.nn.Tanh()))
        blocks.append(TorchCoupling(*halves))
    return torch.nn.ModuleList(blocks)


def loss_coupling_torch(twin, x, target, configuration):
    x = torch.from_numpy(x)
    if configuration == "reversible":
        y = TorchReversibleFunction.apply(x, tuple(twin), *twin.parameters())
    elif configuration == "sqrt":
        y = torch.utils.checkpoint.checkpoint_sequential(list(twin), segments_for("sqrt", len(twin)), x,
                                                         use_reentrant=False)
    else:
        y = x
        for block in twin:
            y = block(y)
    return torch.nn.functional.mse_loss(y, torch.from_numpy(target))


class Level(Layer):
    """A RevCol level: tanh(Linear(below) + Linear(above)); the top level has no level above."""

    def __init__(self, width, top, rng):
        super().__init__()
        self.below = Linear(width, width, rng=rng)
        self.above = None if top else Linear(width, width, rng=rng)

    def forward(self, below, above):
        h = self.below(below)
        if self.above is not None:
            h = h + self.above(above)
        return tinypytorch.tanh(h)


class RevColNet(Layer):
    """`columns` RevColumns of `levels` levels on `width` features; alpha starts at 0.5, as in RevCol."""

    def __init__(self, columns, levels, width, dtype, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.columns = []
        for j in range(columns):
            column = RevColumn([Level(width, i == levels - 1, rng) for i in range(levels)],
                               [Parameter(np.full(width, 0.5)) for _ in range(levels)])
            setattr(self, f"column{j}", column)
            self.columns.append(column)
        self.joined = ReversibleColumns(*self.columns)  # the same columns as one Function (params() counts each once)
        _cast(self, dtype)

    def forward(self, x, states, configuration):
        """The last column's top level; `states`: the first column's c's; configuration: a REVCOL_CONFIGURATIONS key."""
        for column in self.columns:
            column.reversible = configuration != "plain"
        if configuration == "one":
            return self.joined(x, *states)[-1]
        cs = states
        for column in self.columns:
            cs = column(x, *cs)
        return cs[-1]


REVCOL_CONFIGURATIONS = {"plain": "non-reversible", "reversible": "reversible, per column",
                         "one": "reversible, one Function"}


def revcol_states(levels, batch, width, dtype):
    """The first column's states: zeros (RevCol's int 0), made once, as the batch: no new memory."""
    return [np.zeros((batch, width), dtype=dtype) for _ in range(levels)]


def first_states_back(net, x, states, target):
    """max |c| over the first column's states as ReversibleColumns' backward computes them back through every
    column (its `reconstructed`): the states are zeros, so this is the error the reconstruction has built up."""
    loss = loss_revcol_tinypytorch(net, x, states, target, "one")
    todo, function = [loss.creator], None
    while todo and function is None:  # the graph's nodes, from the loss back
        f = todo.pop()
        if isinstance(f, ReversibleColumnsFunction):
            function = f
        else:
            todo.extend(node for node, _ in getattr(f, "edges", ()))
    if function is None:
        raise RuntimeError("first_states_back: no ReversibleColumnsFunction behind the loss")
    loss.backward()
    net.cleargrads()
    return max(float(np.max(np.abs(c - state))) for c, state in zip(function.reconstructed, states, strict=True))


def loss_revcol_tinypytorch(net, x, states, target, configuration):
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    states = [Variable(c, requires_grad=False) for c in states]
    return tinypytorch.mean_squared_error(net(x, states, configuration), target)


class TorchLevel(torch.nn.Module):
    def __init__(self, below, above):
        super().__init__()
        self.below, self.above = below, above

    def forward(self, below, above):
        h = self.below(below)
        if self.above is not None:
            h = h + self.above(above)
        return torch.tanh(h)


class TorchColumn(torch.nn.Module):
    def __init__(self, levels, alphas):
        super().__init__()
        self.levels, self.alphas = torch.nn.ModuleList(levels), torch.nn.ParameterList(alphas)

    def forward(self, x, cs, reversible):
        if reversible:
            return TorchReverseFunction.apply(self, x, *cs, *self.parameters())
        new = []  # RevCol's _forward_nonreverse, in tinypytorch's order of operations
        for i, (level, alpha) in enumerate(zip(self.levels, self.alphas)):
            new.append(level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < len(cs) else None) + alpha * cs[i])
        return tuple(new)


def _torch_column_forward(column, x, cs):
    """One column under no_grad, levels bottom-up: its new c's (RevCol's ReverseFunction.forward)."""
    n, new = len(column.levels), []
    with torch.no_grad():
        for i, (level, alpha) in enumerate(zip(column.levels, column.alphas)):
            new.append(level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < n else None) + alpha * cs[i])
    return new


def _torch_column_backward(column, x, new, gys):
    """One column's backward, levels top-down (RevCol's ReverseFunction.backward): the gradient of x, of each old
    c (the levels' parameters' and the alphas' into .grad), and the old c's computed back."""
    n = len(new)
    total = [torch.zeros_like(c) if g is None else g for g, c in zip(gys, new)]  # whole gradient of c_i'
    old = [None] * n
    g_from_below = [0] * n  # gradient of the old c_i through level i - 1 of this column
    g_x = None
    for i in reversed(range(n)):
        below = (x if i == 0 else new[i - 1]).detach().requires_grad_()
        above = old[i + 1].detach().requires_grad_() if i + 1 < n else None
        alpha = column.alphas[i]
        with torch.enable_grad():
            out = column.levels[i](below, above)
        torch.autograd.backward(out, total[i])
        with torch.no_grad():
            old[i] = (new[i] - out) / alpha  # c_i = (c_i' - l_i(.)) / alpha_i
        with torch.enable_grad():
            torch.autograd.backward(old[i] * alpha, total[i])  # alpha_i's gradient: sum of g c_i
        if above is not None:
            g_from_below[i + 1] = g_from_below[i + 1] + above.grad
        if i > 0:
            total[i - 1] = total[i - 1] + below.grad
        else:
            g_x = below.grad
        del out, below, above
    with torch.no_grad():
        g_old = [alpha * total[i] + g_from_below[i] for i, alpha in enumerate(column.alphas)]
    return g_x, g_old, old


class TorchReverseFunction(torch.autograd.Function):
    """RevCol's ReverseFunction (models/revcol_function.py) for L levels, as tinypytorch's computes it.

    Forward: the levels bottom-up under no_grad; saved: x and the new c's. Backward, levels top-down:
    recompute level i from the saved c_{i-1}' and the reconstructed c_{i+1} (leaves), backpropagate the
    whole gradient of c_i' through it (parameters into .grad, as RevCol does), reconstruct
    c_i = (c_i' - l_i(.)) / alpha_i, and alpha_i's gradient from it. No RNG state: the levels draw nothing.
    """

    @staticmethod
    def forward(ctx, column, x, *rest):
        new = _torch_column_forward(column, x, rest[:len(column.levels)])
        ctx.column = column
        ctx.save_for_backward(x, *new)  # x and the new c's: all a column keeps
        return tuple(new)

    @staticmethod
    def backward(ctx, *gys):
        x, *new = ctx.saved_tensors
        n, needs = len(new), ctx.needs_input_grad
        g_x, g_old, _ = _torch_column_backward(ctx.column, x, new, gys)
        g_old = [g if needs[2 + i] else None for i, g in enumerate(g_old)]
        return (None, g_x if needs[1] else None, *g_old, *[None] * (len(needs) - 2 - n))


class TorchReversibleColumnsFunction(torch.autograd.Function):
    """tinypytorch's ReversibleColumnsFunction in PyTorch: every column as one Function.

    Forward: the columns one after another under no_grad; saved: x and the last column's c's only. Backward:
    from the last column to the first, each column's backward as TorchReverseFunction's, its computed-back
    old c's handed to the column before as that column's new c's (and the gradients of the old c's as the
    gradients of its new c's). The gradient of x is summed over the columns.
    """

    @staticmethod
    def forward(ctx, columns, x, *rest):
        cs = rest[:len(columns[0].levels)]
        for column in columns:
            cs = _torch_column_forward(column, x, cs)
        ctx.columns = columns
        ctx.save_for_backward(x, *cs)  # x and the last column's c's, however many columns
        return tuple(cs)

    @staticmethod
    def backward(ctx, *gys):
        x, *new = ctx.saved_tensors
        n, needs = len(new), ctx.needs_input_grad
        g_x = None
        for column in reversed(ctx.columns):
            g, gys, new = _torch_column_backward(column, x, new, gys)
            g_x = g if g_x is None else (g_x if g is None else g_x + g)
        del new  # the first column's old c's, computed back
        g_old = [g if needs[2 + i] else None for i, g in enumerate(gys)]
        return (None, g_x if needs[1] else None, *g_old, *[None] * (len(needs) - 2 - n))


def torch_revcol_twin(net):
    """The columns of `net` (a RevColNet) in PyTorch, the same weights and alphas."""
    def linear(layer):
        if layer is None:
            return None
        twin = torch.nn.Linear(*reversed(layer.weight.shape), dtype=DTYPES[layer.weight.dtype.name][1])
        with torch.no_grad():
            twin.weight.copy_(torch.from_numpy(layer.weight.data))
            twin.bias.copy_(torch.from_numpy(layer.bias.data))
        return twin

    columns = [TorchColumn([TorchLevel(linear(level.below), linear(level.above)) for level in column.levels],
                           [torch.nn.Parameter(torch.from_numpy(alpha.data.copy())) for alpha in column.alphas])
               for column in net.columns]
    return torch.nn.ModuleList(columns)


def revcol_parameter_pairs(net, twin):
    """[(tinypytorch Parameter, torch Parameter)] of a RevColNet and its twin, paired by place."""
    pairs = []
    for column, twin_column in zip(net.columns, twin, strict=True):
        for level, alpha, twin_level, twin_alpha in zip(column.levels, column.alphas, twin_column.levels,
                                                        twin_column.alphas, strict=True):
            for name in ("below", "above"):
                layer, twin_layer = getattr(level, name), getattr(twin_level, name)
                if layer is not None:
                    pairs += [(layer.weight, twin_layer.weight), (layer.bias, twin_layer.bias)]
            pairs.append((alpha, twin_alpha))
    return pairs


def loss_revcol_torch(twin, x, states, target, configuration):
    cs = tuple(map(torch.from_numpy, states))
    x = torch.from_numpy(x)
    if configuration == "one":
        cs = TorchReversibleColumnsFunction.apply(tuple(twin), x, *cs, *twin.parameters())
    else:
        for column in twin:
            cs = column(x, cs, configuration == "reversible")
    return torch.nn.functional.mse_loss(cs[-1], torch.from_numpy(target))


def expected_saved_coupling(depth, configuration, width, batch, itemsize):
    """What the counting hook should see for the coupling stack, by hand: (bytes, tensors).

    Reversible: the stack's output, then the loss's two operands (the output again and the target): 3
    arrays of batch x width. Plain, and the last segment of checkpoint_sequential: in each block, f's
    Linear its input x2 (a view: half a batch x width) and its weight (unless x2 is the batch's, which
    needs no gradient), f's tanh its output, g's Linear its input y1 and its weight, g's tanh its output:
    6 tensors of 4 half activations and 2 weights of (width / 2)^2; before it, each checkpointed segment's
    input (k - 1, the first the batch); after it, the loss's two operands.
    """
    activation, weight = batch * width * itemsize, (width // 2) ** 2 * itemsize
    if configuration == "reversible":
        return 3 * activation, 3
    k, _, m = segment_layout(depth, segments_for(configuration, depth))
    first_is_batch = k == 1
    tensors = (k - 1) + 6 * m - first_is_batch + 2
    return (k - 1 + 2 * m + 2) * activation + (2 * m - first_is_batch) * weight, tensors


def held_coupling(depth, configuration):
    """Activations (batch x width) the coupling stack holds for backward when its forward pass ends, by hand.

    Reversible: its output (the loss's operand too). Plain: each block's input but the batch (x2 is a view
    of it), its f and g tanh outputs and y1 (three halves), and the last block's output: 2.5 N. √N
    segments: the k - 1 checkpoints' inputs but the batch, the last segment's input, and 2.5 m as plain.
    """
    if configuration == "reversible":
        return 1
    k, _, m = segment_layout(depth, segments_for(configuration, depth))
    return k - 1 + 2.5 * m


CONCATENATE_BOUNDS = np.cumsum([0, 1, 1]).nbytes  # tinypytorch's concatenate node keeps its split points (3 ints)


def held_coupling_extra(depth, configuration, framework):
    """Bytes the coupling stack holds after forward beyond its activations, by hand: in tinypytorch each recorded
    block's concatenate node's split points (checkpointed blocks are recorded too, with placeholders); in PyTorch
    each checkpoint's copy of the random generator's state."""
    if configuration == "reversible":
        return 0
    if framework == "tinypytorch":
        return depth * CONCATENATE_BOUNDS
    return (segment_layout(depth, segments_for(configuration, depth))[0] - 1) * torch.get_rng_state().nbytes


def expected_saved_revcol(columns, levels, configuration, width, batch, itemsize):
    """What the counting hook should see for RevCol, by hand: (bytes, tensors).

    Reversible, per column: each column x and its L new c's; then the loss's two operands. Reversible, one
    Function: x and the last column's L c's, whatever the number of columns; then the loss's two operands.
    Non-reversible, level i
    of a column: its Linear on below its input and weight (not the weight where below is the batch x),
    its Linear on above its input and weight (not the weight in the first column, whose states are
    constant zeros; the top level has none), the tanh its output, alpha_i c_i both factors (c_i for
    alpha's gradient; alpha_i only where c_i needs a gradient, not in the first column).
    """
    a, w2, alpha = batch * width * itemsize, width * width * itemsize, width * itemsize
    if configuration == "reversible":
        return (columns * (levels + 1) + 2) * a, columns * (levels + 1) + 2
    if configuration == "one":
        return (levels + 1 + 2) * a, levels + 1 + 2
    # the first column: 4 L - 1 activations, L - 1 weights (the lower Linears but level 0's)
    first = ((4 * levels - 1) * a + (levels - 1) * w2, 5 * levels - 2)
    # every later column: 2 L - 2 weights (each Linear's but level 0's lower one), L alphas
    later = ((4 * levels - 1) * a + (2 * levels - 2) * w2 + levels * alpha, 7 * levels - 3)
    return (first[0] + (columns - 1) * later[0] + 2 * a, first[1] + (columns - 1) * later[1] + 2)


def held_revcol(columns, levels, configuration):
    """Activations (batch x width) held for backward when the forward pass ends, by hand: reversible per column,
    the L new c's of every column (x is the batch): L N; one Function, the last column's L c's: L; non-reversible,
    also each level's tanh output: 2 L N."""
    return {"plain": 2 * columns * levels, "reversible": columns * levels, "one": levels}[configuration]


@dataclasses.dataclass
class Measured:
    """One configuration at one size in one framework."""
    saved: Saved  # the counting pack hook, outermost
    kept: Memory  # forward + backward, the gradients kept in .grad
    dropped: Memory  # forward + backward, each gradient let go when complete
    seconds: list  # forward + backward, each timed repeat
    error: float = 0.0  # the gradients' largest relative difference from the plain run's (same framework)
    states_back: float = None  # RevCol, one Function, tinypytorch: max |c| of the first column's states computed back


def relative_error(gradients, reference):
    """max over parameters of max |g - g_plain| / max |g_plain|; for a parameter whose plain gradient is all zero
    (RevCol's first column's alphas), max |g| over the largest plain gradient of all the parameters."""
    pairs = list(zip(gradients, reference, strict=True))
    largest = max(float(np.max(np.abs(r))) for _, r in pairs)
    return max(float(np.max(np.abs(g - r))) / (float(np.max(np.abs(r))) or largest) for g, r in pairs)


REVERSIBLE_SETTINGS = {
    # repeats: how many timed forward + backward passes per configuration at each size
    "full": {"dtype": "float32",
             "coupling": {"depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256,
                          "repeats": {8: 5, 16: 5, 32: 5, 64: 3, 128: 3}},
             "revcol": {"columns": [2, 4, 8, 16], "levels": 4, "width": 512, "batch": 256,
                        "repeats": {2: 5, 4: 5, 8: 3, 16: 3}}},
    "quick": {"dtype": "float32",
              "coupling": {"depths": [2, 4, 8], "width": 64, "batch": 16, "repeats": {2: 2, 4: 2, 8: 2}},
              "revcol": {"columns": [2, 4], "levels": 4, "width": 32, "batch": 16, "repeats": {2: 2, 4: 2}}},
}


def _measure_configurations(framework, net, losses, clear, repeats):
    """{configuration: Measured} for one network in one framework; losses: {configuration: () -> loss}."""
    count, measure = ((count_saved_tinypytorch, measure_tinypytorch) if framework == "tinypytorch"
                      else (count_saved_torch, measure_torch))
    inputs = losses.pop(None)  # the arrays the losses read, no new memory
    counted = {c: count(loss, net, inputs) for c, loss in losses.items()}  # also a warm-up pass
    kept, errors, plain = {}, {}, []
    for c, loss in losses.items():  # plain first: the others' gradients are compared with its
        gradients = plain if c == "plain" else []
        kept[c] = measure(loss, net, gradients_out=gradients)
        errors[c] = relative_error(gradients, plain) if c != "plain" else 0.0
    dropped = {c: measure(loss, net, drop_gradients=True) for c, loss in losses.items()}
    times = time_passes(losses, clear, repeats)
    return {c: Measured(counted[c], kept[c], dropped[c], times[c], errors[c]) for c in losses}


def run_reversible(s):
    """{"coupling": {(depth, configuration): {framework: Measured}}, "revcol": {(columns, configuration): ...}}."""
    dtype = DTYPES[s["dtype"]][0]
    results = {"coupling": {}, "revcol": {}}
    sc = s["coupling"]
    for depth in sc["depths"]:
        net = build_coupling_stack(depth, sc["width"], dtype)
        x, target = batch_and_target(sc["batch"], sc["width"], dtype)
        rows = {c: {} for c in COUPLING_CONFIGURATIONS}
        for framework in LABELS:
            if framework == "torch":
                net = torch_coupling_twin(net)  # one framework's parameters in memory at a time
            loss = loss_coupling_tinypytorch if framework == "tinypytorch" else loss_coupling_torch
            losses = {c: functools.partial(loss, net, x, target, c) for c in COUPLING_CONFIGURATIONS}
            losses[None] = [x, target]
            clear = net.cleargrads if framework == "tinypytorch" else net.zero_grad
            for c, measured in _measure_configurations(framework, net, losses, clear, sc["repeats"][depth]).items():
                rows[c][framework] = measured
        del net
        for c in COUPLING_CONFIGURATIONS:
            results["coupling"][depth, c] = rows[c]
        print(f"coupling, depth {depth:3}: peak (gradients let go) " + ", ".join(
            f"{COUPLING_CONFIGURATIONS[c]} " + "/".join(f"{rows[c][f].dropped.peak / MiB:.1f}" for f in LABELS)
            for c in COUPLING_CONFIGURATIONS) + " MiB (tinypytorch/PyTorch)", flush=True)
    sr = s["revcol"]
    for columns in sr["columns"]:
        net = RevColNet(columns, sr["levels"], sr["width"], dtype)
        x, target = batch_and_target(sr["batch"], sr["width"], dtype)
        states = revcol_states(sr["levels"], sr["batch"], sr["width"], dtype)
        rows = {c: {} for c in REVCOL_CONFIGURATIONS}
        for framework in LABELS:
            if framework == "torch":
                net = torch_revcol_twin(net)
            loss = loss_revcol_tinypytorch if framework == "tinypytorch" else loss_revcol_torch
            losses = {c: functools.partial(loss, net, x, states, target, c) for c in REVCOL_CONFIGURATIONS}
            losses[None] = [x, target, *states]
            clear = net.cleargrads if framework == "tinypytorch" else net.zero_grad
            for c, measured in _measure_configurations(framework, net, losses, clear,
                                                       sr["repeats"][columns]).items():
                rows[c][framework] = measured
            if framework == "tinypytorch":
                rows["one"][framework].states_back = first_states_back(net, x, states, target)
        del net
        for c in REVCOL_CONFIGURATIONS:
            results["revcol"][columns, c] = rows[c]
        print(f"RevCol, {columns:2} columns: peak (gradients let go) " + ", ".join(
            f"{REVCOL_CONFIGURATIONS[c]} " + "/".join(f"{rows[c][f].dropped.peak / MiB:.1f}" for f in LABELS)
            for c in REVCOL_CONFIGURATIONS) + " MiB (tinypytorch/PyTorch)", flush=True)
    return results


def _spread(values):
    """max / min: 1.00 means flat."""
    return max(values) / min(values)


def report_reversible(results, s, mode):
    """The reversible networks' results file's text, and whether each target was met.

    Targets: {"coupling": {framework: {"peak": the reversible stack's peak, gradients let go, within 1.1x
    from the shallowest to the deepest (max / min), "time": reversible at most 2x the plain run's median}},
    "revcol": the same for the reversible columns against the number of columns}.
    """
    itemsize = np.dtype(DTYPES[s["dtype"]][0]).itemsize
    sc, sr = s["coupling"], s["revcol"]
    a_c, a_r = sc["batch"] * sc["width"] * itemsize, sr["batch"] * sr["width"] * itemsize
    unit, unit_name = (MiB, "MiB") if min(a_c, a_r) >= MiB / 8 else (1024, "KiB")
    rng_bytes = torch.get_rng_state().nbytes

    def size(n):
        return f"{n / unit:.2f}"

    coupling, revcol = results["coupling"], results["revcol"]
    depths, column_counts = sorted({d for d, _ in coupling}), sorted({n for n, _ in revcol})
    targets = {"coupling": {}, "revcol": {}}
    lines = ["# Reversible networks: tinypytorch and PyTorch", "",
             f"Written by `python bench/bench_memory.py{' --quick' if mode == 'quick' else ''}"
             f"{' --only reversible' if mode == 'quick' else ''}` on {datetime.date.today().isoformat()}, "
             f"in {s['dtype']}. Sizes in {unit_name}. Two networks, each run with the same weights in both "
             "frameworks (tests/test_bench_memory.py checks that they give the same loss and gradients, in "
             "float64, in every configuration):", "",
             f"- **a RevNet stack**: N `AdditiveCoupling` blocks (y1 = x1 + f(x2), y2 = x2 + g(y1)) on "
             f"{sc['width']:,} features split into halves of {sc['width'] // 2:,}, f and g each a Linear "
             f"({sc['width'] // 2:,} → {sc['width'] // 2:,}) with tanh after it, a batch of {sc['batch']:,} rows, "
             "a mean-squared-error loss on the output against a fixed target; N = "
             f"{', '.join(map(str, depths))}. Three configurations of the same blocks: *plain* (each block "
             "recorded as it runs); *√N segments* (`checkpoint_sequential(blocks, round(√N), x, "
             "use_reentrant=False)` in both frameworks, as in `checkpoint.md`); *reversible* "
             "(`tinypytorch.reversible.ReversibleSequential`: one Function that runs the blocks under no_grad, keeps "
             "only their output, and in backward computes each block's input back from its output and runs the "
             "block again; in PyTorch, `TorchReversibleFunction` of `bench/bench_memory.py`, the same algorithm, "
             "which puts each block's parameter gradients into `.grad` as that block's backward ends, as PyTorch's "
             "reversible libraries do). One activation: a = batch × width × "
             f"{itemsize} bytes = {size(a_c)} {unit_name}.",
             f"- **RevCol**: N `RevColumn`s of L = {sr['levels']} levels on {sr['width']:,} features, a batch of "
             f"{sr['batch']:,} rows; level i of a column computes c_i' = tanh(Linear(c_{{i−1}}') + "
             "Linear(c_{i+1})) + α_i c_i (x for the level below level 0; no level above the top one), α starting "
             "at 0.5; the first column's states are zeros (made once, as the batch); the loss on the last column's "
             f"top level; N = {', '.join(map(str, column_counts))} columns. Three configurations: *non-reversible* "
             "(`RevColumn(..., reversible=False)`, RevCol's `_forward_nonreverse`: everything recorded; in PyTorch "
             "the same columns in `torch.nn`); *reversible, per column* (each `RevColumn` one Function, RevCol's "
             "`ReverseFunction`, which keeps x and the new c's of its column; in PyTorch, `TorchReverseFunction` of "
             "`bench/bench_memory.py`, a port of RevCol's to L levels that computes as tinypytorch's does); and "
             "*reversible, one Function* (`tinypytorch.reversible.ReversibleColumns`: all the columns as one "
             "Function that keeps x and the last column's c's only, and in backward hands each column's old c's, "
             "computed back, to the column before as its new c's; in PyTorch, `TorchReversibleColumnsFunction` of "
             "`bench/bench_memory.py`, the same algorithm on the same per-column pieces as `TorchReverseFunction`). "
             "One activation: a = batch × width × "
             f"{itemsize} bytes = {size(a_r)} {unit_name}.", "",
             "Measured as in `memory.md` and `checkpoint.md`. Saved for backward: the bytes a counting pack hook "
             "sees, entered around the whole forward pass (outermost: inside a checkpoint the checkpoint's hooks "
             "win). Memory: tinypytorch with `tracemalloc` (held: NumPy's arrays, exact; peak: every traced "
             "allocation, arrays and Python objects), PyTorch with its profiler (every tensor of its CPU "
             "allocator); the most held at any moment of forward + backward, above what was held before. Two "
             "peaks: **gradients let go** (each parameter's gradient dropped as soon as it is complete, as an "
             "optimizer stepping inside backward would: tinypytorch a hook on the parameter, PyTorch "
             "`register_post_accumulate_grad_hook`), the quantity the targets are on; and **gradients kept** (the "
             "ordinary `loss.backward()`), reported less the gradients' own bytes."]
    if mode == "quick":
        lines += ["", "A smoke test at small sizes, where each operation's fixed costs and Python objects weigh most: "
                  "the targets are meant for the full run (`bench/results/reversible.md`)."]
    lines += [""] + [f"- {key}: {value}" for key, value in machine().items()]

    def saved_table(rows, names, expected, n_label):
        out = ["| " + n_label + " | configuration | saved, tinypytorch | saved, PyTorch | tensors, tinypytorch "
               "| tensors, PyTorch | expected by counting | as expected |", "|---|---|---|---|---|---|---|---|"]
        all_match = True
        for (n, conf), row in rows.items():
            bytes_, tensors = expected(n, conf)
            match = all((r.saved.bytes, r.saved.count) == (bytes_, tensors) for r in row.values())
            all_match &= match
            out.append(f"| {n} | {names[conf]} | {size(row['tinypytorch'].saved.bytes)} | "
                       f"{size(row['torch'].saved.bytes)} | {row['tinypytorch'].saved.count} | "
                       f"{row['torch'].saved.count} | {size(bytes_)} ({tensors} tensors) | {'yes' if match else 'NO'} |")
        return out, all_match

    def memory_table(rows, names, held, a, extra, n_label):
        """Held after forward in activations (measured and by hand), the two peaks; and whether held is exact.

        extra(n, configuration, framework): bytes held beyond the activations, by hand."""
        out = ["| " + n_label + " | configuration | held after forward − output, in a: tinypytorch | PyTorch "
               "| by hand | peak, gradients let go: tinypytorch | PyTorch | peak − gradients, gradients kept: "
               "tinypytorch | PyTorch | gradients: largest relative difference from plain, tinypytorch | PyTorch |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
        exact = {f: True for f in LABELS}
        for (n, conf), row in rows.items():
            measured = {f: (r.dropped.after_forward - r.dropped.output) for f, r in row.items()}
            for f in LABELS:
                exact[f] &= measured[f] == held(n, conf) * a + extra(n, conf, f)
            out.append(f"| {n} | {names[conf]} | {measured['tinypytorch'] / a:.3f} | {measured['torch'] / a:.3f} | "
                       f"{held(n, conf):g} | {size(row['tinypytorch'].dropped.peak)} | {size(row['torch'].dropped.peak)} "
                       f"| {size(row['tinypytorch'].kept.peak - row['tinypytorch'].kept.gradients)} | "
                       f"{size(row['torch'].kept.peak - row['torch'].kept.gradients)} | "
                       + " | ".join("—" if conf == "plain" else f"{row[f].error:.1e}" for f in LABELS) + " |")
        return out, exact

    def time_table(rows, names, repeats, n_label):
        out = ["| " + n_label + " | repeats | configuration | tinypytorch, s | tinypytorch / plain | best "
               "| PyTorch, s | PyTorch / plain | best |", "|---|---|---|---|---|---|---|---|---|"]
        for (n, conf), row in rows.items():
            plain = rows[n, "plain"]
            out.append(f"| {n} | {repeats[n]} | {names[conf]} | " + " | ".join(
                f"{statistics.median(row[f].seconds):.3f} | {_median_ratio(row, f, plain):.2f} | "
                f"{_best_ratio(row, f, plain):.2f}" for f in LABELS) + " |")
        return out

    # ----- the coupling stack
    lines += ["", "## 1. A RevNet stack of coupling blocks", "", "### Saved for backward", "",
              "Expected, by counting: reversible, the stack's output and the loss's two operands (the output again, "
              "the target); plain, in each block, f's Linear its input x2 (a view, half an activation) and its "
              "weight (not where x2 is the batch's, which needs no gradient), f's tanh its output, g's Linear its "
              "input y1 and its weight, g's tanh its output, then the loss's two operands; √N segments, the k − 1 "
              "checkpoints' inputs and the last segment of m blocks saved as plain (the layout of "
              "`checkpoint.md`: k = round(√N) segments of N // k blocks, the last taking the remainder).", ""]
    table, coupling_saved = saved_table(
        coupling, COUPLING_CONFIGURATIONS,
        lambda n, conf: expected_saved_coupling(n, conf, sc["width"], sc["batch"], itemsize), "N")
    lines += table
    lines += ["", f"Both frameworks equal the count by hand, bytes and tensors, in every row: "
              f"{'yes' if coupling_saved else 'NO'}. The reversible stack saves "
              f"{size(expected_saved_coupling(1, 'reversible', sc['width'], sc['batch'], itemsize)[0])} {unit_name} "
              "at every depth (3 tensors: one array of new memory, its output)."]
    lines += ["", "### Memory", "",
              "Held after forward: the new memory held when the forward pass ends, less the loss's own, in "
              "activations a (by hand: reversible 1, the output; plain 2.5 N, each block's input but the batch's, "
              "its two tanh outputs and y1, three halves, and the last output; √N segments k − 1 + 2.5 m, the "
              "checkpoints' inputs but the batch, the last segment's input, and its m blocks as plain). PyTorch's "
              f"checkpoints each keep the random generator's state too ({rng_bytes:,} B).", ""]
    table, coupling_exact = memory_table(coupling, COUPLING_CONFIGURATIONS, held_coupling, a_c,
                                         lambda n, conf, f: held_coupling_extra(n, conf, f), "N")
    lines += table
    lines += ["", f"Checks, to the byte: tinypytorch holds the count by hand plus {CONCATENATE_BOUNDS} B per block "
              f"in the plain and checkpointed runs, in every row: {'yes' if coupling_exact['tinypytorch'] else 'NO'} "
              f"(each block's concatenate node keeps its split points, a NumPy array of {CONCATENATE_BOUNDS} B, "
              f"checkpointed blocks' nodes too); PyTorch the count by hand plus {rng_bytes:,} B per checkpoint: "
              f"{'yes' if coupling_exact['torch'] else 'NO'}."]
    reversible_peaks = {f: [coupling[d, "reversible"][f].dropped.peak for d in depths] for f in LABELS}
    reversible_kept = {f: [coupling[d, "reversible"][f].kept.peak - coupling[d, "reversible"][f].kept.gradients
                           for d in depths] for f in LABELS}
    plain_peaks = {f: [coupling[d, "plain"][f].dropped.peak for d in depths] for f in LABELS}
    lines.append("")
    for f in LABELS:
        spread = _spread(reversible_peaks[f])
        targets["coupling"][f] = {"peak": spread <= 1.1}
        lines.append(f"Target: the reversible stack's peak (forward + backward, gradients let go) flat within 1.1× "
                     f"from N = {depths[0]} to {depths[-1]}, {LABELS[f]}: {'met' if spread <= 1.1 else 'NOT met'} "
                     f"(max / min {spread:.3f}; N = {depths[-1]} / N = {depths[0]}: "
                     f"{reversible_peaks[f][-1] / reversible_peaks[f][0]:.3f}; with the gradients kept, peak − "
                     f"gradients {_spread(reversible_kept[f]):.3f}; the plain run's peak grows "
                     f"{plain_peaks[f][-1] / plain_peaks[f][0]:.1f}× over the same depths).")
    growth = {f: (reversible_peaks[f][-1] - reversible_peaks[f][0]) / (depths[-1] - depths[0]) for f in LABELS}
    kept_growth = {f: (reversible_kept[f][-1] - reversible_kept[f][0]) / (depths[-1] - depths[0]) for f in LABELS}
    block_gradients = 2 * ((sc["width"] // 2) ** 2 + sc["width"] // 2) * itemsize  # f's and g's Linear
    lines += ["", "The reversible stack's activations take what one block's backward needs (the output, the block's "
              "input computed back, the block recorded again, the gradients in flight), the same at every depth: "
              "with the gradients kept, the peak less the gradients grows by "
              + ", ".join(f"{kept_growth[f]:,.0f} B per block in {LABELS[f]}" for f in LABELS)
              + " (bookkeeping: tinypytorch keeps two random-generator states per block, Python dicts, and Python "
              "objects per parameter, which `tracemalloc` sees). With the gradients let go, the peak grows by "
              + ", ".join(f"{growth[f]:,.0f} B per block in {LABELS[f]}" for f in LABELS)
              + f"; one block's parameters' gradients are {block_gradients:,} B. PyTorch's twin puts each block's "
              "gradients into `.grad` as that block's backward ends, where a hook lets them go. tinypytorch's "
              "ReversibleSequential sends each block's parameter gradients on to the running backward pass as soon "
              "as that block is done (`engine.send_early`), through the graph rather than into `.grad` directly, so "
              "that `autograd.grad` reaches them too and a hook runs once, when the gradient is complete; the Function "
              "holds one block's gradients at a time, not the whole stack's. Relative differences of the gradients "
              "from the plain run's: float32 arithmetic, the reversible run computing each block's input back from "
              "its output."]
    lines += ["", "### Time of forward + backward", "",
              "Each configuration's forward + backward (no hooks, no measurement), timed with `time.perf_counter` "
              "with the garbage collector off, the configurations taking turns (as in `checkpoint.md`); the median "
              "of the repeats and its ratio to the plain run's median in the same framework; \"best\": the same with "
              "the fastest repeat of each. Timings are reported here only, never asserted in tests.", ""]
    lines += time_table(coupling, COUPLING_CONFIGURATIONS, sc["repeats"], "N")
    lines.append("")
    for f in LABELS:
        ratios = {d: _median_ratio(coupling[d, "reversible"], f, coupling[d, "plain"]) for d in depths}
        targets["coupling"][f]["time"] = all(r <= 2 for r in ratios.values())
        missed = [f"N = {d} ({r:.2f})" for d, r in ratios.items() if r > 2]
        lines.append(f"Target: reversible at most 2× the plain run, {LABELS[f]}: "
                     f"{'met at every depth' if not missed else 'NOT met at ' + ', '.join(missed)} (ratios "
                     f"{min(ratios.values()):.2f} to {max(ratios.values()):.2f}).")
    lines += ["", "What to expect: a block's forward is about a third of its forward + backward; the reversible "
              "run does the forward, then in backward the inverse (one forward's work) and the forward again before "
              "the backward: about 5/3 ≈ 1.67× plain; √N segments recompute N − m blocks: 1 + (N − m) / (3N)."]

    # ----- RevCol
    lines += ["", f"## 2. RevCol: reversible columns, L = {sr['levels']} levels", "", "### Saved for backward", "",
              "Expected, by counting: reversible per column, each column x and its L new c's (RevCol's "
              "`ctx.save_for_backward(x, c0, c1, c2, c3)`), then the loss's two operands; reversible as one "
              "Function, x and the last column's L c's, then the loss's two operands, whatever the number of "
              "columns; non-reversible, in each "
              "level the lower Linear its input and weight (no weight where the input is the batch x), the upper "
              "Linear its input and weight (no weight in the first column, whose states are constant zeros; none "
              "at the top level), the tanh its output, α_i c_i its factors (c_i for α's gradient; α_i only where "
              "c_i needs a gradient, not in the first column), then the loss's two operands.", ""]
    table, revcol_saved = saved_table(
        revcol, REVCOL_CONFIGURATIONS,
        lambda n, conf: expected_saved_revcol(n, sr["levels"], conf, sr["width"], sr["batch"], itemsize), "columns")
    lines += table
    one_saved = expected_saved_revcol(1, sr["levels"], "one", sr["width"], sr["batch"], itemsize)
    lines += ["", f"Both frameworks equal the count by hand, bytes and tensors, in every row: "
              f"{'yes' if revcol_saved else 'NO'}. A reversible column run as a Function of its own saves x + L c's: "
              f"{size((sr['levels'] + 1) * a_r)} {unit_name} more per column; the columns run as one Function save "
              f"x + L c's in all, {size(one_saved[0])} {unit_name} with the loss's operands ({one_saved[1]} tensors), "
              "at every number of columns."]
    lines += ["", "### Memory", "",
              "Held after forward, in activations a, by hand: reversible per column L N (every column's new c's; x is "
              "the batch), reversible as one Function L (the last column's c's), non-reversible 2 L N (the new c's "
              "and each level's tanh output).", ""]
    table, revcol_exact = memory_table(revcol, REVCOL_CONFIGURATIONS,
                                       lambda n, conf: held_revcol(n, sr["levels"], conf), a_r,
                                       lambda n, conf, f: 0, "columns")
    lines += table
    lines += ["", f"Checks, to the byte: tinypytorch holds the count by hand in every row: "
              f"{'yes' if revcol_exact['tinypytorch'] else 'NO'}; PyTorch: {'yes' if revcol_exact['torch'] else 'NO'}.",
              ""]
    first, last = column_counts[0], column_counts[-1]
    w, levels = sr["width"], sr["levels"]
    column_gradients = ((2 * levels - 1) * (w * w + w) + levels * w) * itemsize  # 2 L - 1 Linears and L alphas
    growth_per_column = {}
    for f in LABELS:
        peaks = {c: [revcol[n, c][f].dropped.peak for n in column_counts] for c in REVCOL_CONFIGURATIONS}
        growth_per_column[f] = {c: (p[-1] - p[0]) / (last - first) / a_r for c, p in peaks.items()}
        flat = _spread(peaks["one"]) <= 1.1
        targets["revcol"][f] = {"peak": flat}
        ratio = {c: p[-1] / p[0] for c, p in peaks.items()}
        kept = [revcol[n, "one"][f].kept.peak - revcol[n, "one"][f].kept.gradients for n in column_counts]
        lines.append(f"Target: the reversible columns' peak (forward + backward, gradients let go) flat within 1.1× "
                     f"in the number of columns, one Function, {LABELS[f]}: {'met' if flat else 'NOT met'} (max / min "
                     f"{_spread(peaks['one']):.3f}; {last} columns / {first}: {ratio['one']:.3f}; "
                     f"{growth_per_column[f]['one']:.2f} a per column; with the gradients kept, peak − gradients "
                     f"{_spread(kept):.3f}). Not flat, as counted: a Function per column "
                     f"{ratio['reversible']:.2f}× ({growth_per_column[f]['reversible']:.2f}"
                     f" a per column), non-reversible {ratio['plain']:.2f}× "
                     f"({growth_per_column[f]['plain']:.2f} a per column).")
    lines += ["", "Why: a reversible column run as a Function of its own keeps x and its L new c's, the algorithm's "
              "own (RevCol's `ReverseFunction` saves them, and so does tinypytorch's), and a column's new c's are the "
              "next column's inputs; so N such columns keep N L c's, which the held-after-forward check counts to the "
              "byte, and the peak grows by about L activations a column (measured: "
              + ", ".join(f"{growth_per_column[f]['reversible']:.2f} a in {LABELS[f]}" for f in LABELS)
              + f"; L = {sr['levels']}). That column saves memory inside itself (the non-reversible one keeps each "
              "level's activations too, here one tanh output per level, in RevCol a whole stack of ConvNeXt blocks), "
              "not across columns. But the old c's a column's backward computes back are the previous column's new "
              "c's: so run as one Function (`ReversibleColumns`), the columns keep x and the last column's c's only, "
              "each column's backward takes its new c's from the backward of the column after it, and the "
              "activations take what one column's backward needs at any number of columns (measured, with the "
              "gradients kept, peak − gradients: "
              + ", ".join(f"{(revcol[first, 'one'][f].kept.peak - revcol[first, 'one'][f].kept.gradients) / a_r:.1f}"
                          f" a at {first} columns, "
                          f"{(revcol[last, 'one'][f].kept.peak - revcol[last, 'one'][f].kept.gradients) / a_r:.1f}"
                          f" a at {last} in {LABELS[f]}" for f in LABELS)
              + "). What grows beside them: in tinypytorch the "
              "random generator's state kept before each level (a Python dict, which `tracemalloc` sees), and, as "
              "for the stack above, the gradients in flight: one column's parameters' gradients, sent on to the pass "
              "when that column is done (by hand "
              f"{column_gradients / a_r:.2f} a a column: its {2 * sr['levels'] - 1} Linears and {sr['levels']} "
              "alphas); PyTorch's port puts each level's into `.grad` as it goes. The price: every c but the last "
              "column's is computed back through all the columns after it, so rounding errors build up with the number of columns (below). "
              "After backward, while the loss is referenced, "
              "tinypytorch's reversible Functions still hold the c's they computed back (`reconstructed`, kept for "
              "a step to print: L a per column, or L a for the one Function); PyTorch's ports let them go."]
    errors = {c: {f: [revcol[n, c][f].error for n in column_counts] for f in LABELS} for c in ("reversible", "one")}
    back = [revcol[n, "one"]["tinypytorch"].states_back for n in column_counts]
    wrong = [n for i, n in enumerate(column_counts) if max(errors["one"][f][i] for f in LABELS) > 1e-2]
    lines += ["", f"Gradients, one Function, in {s['dtype']}: the largest relative difference from the non-reversible "
              "run's (the table's last columns) at " + ", ".join(map(str, column_counts)) + " columns: "
              + "; ".join(f"{LABELS[f]} " + ", ".join(f"{e:.1e}" for e in errors["one"][f]) for f in LABELS)
              + "; a Function per column, at most "
              + ", ".join(f"{max(errors['reversible'][f]):.1e} in {LABELS[f]}" for f in LABELS) + "."
              + ("" if None in back else " The first column's states, zeros in forward, as tinypytorch's one Function "
                 "computes them back through every column after it (its `reconstructed`): max |c| = "
                 + ", ".join(f"{b:.1e}" for b in back) + ".")
              + " Each column's backward computes its old c's from its new ones, dividing by α (0.5 here), and the "
              "error in the new c's it was handed goes through the column's levels too: so the error grows by a "
              "factor with every column it is carried back through, as in RevCol's reconstruction. "
              + (f"Where it passes 1e-2 ({', '.join(map(str, wrong))} columns here), the first columns' gradients are "
                 "no longer the network's: the flat peak is paid for in accuracy, and the one Function is usable in "
                 f"{s['dtype']} up to {max([n for n in column_counts if n not in wrong], default=0)} columns here. "
                 if wrong else "It stays below 1e-2 at every number of columns here. ")
              + "A Function per column starts each column's backward from the c's it kept, so its error does not "
              "build up across columns."]
    lines += ["", "### Time of forward + backward", "", "As for the stack above.", ""]
    lines += time_table(revcol, REVCOL_CONFIGURATIONS, sr["repeats"], "columns")
    lines.append("")
    for f in LABELS:
        ratios = {(n, c): _median_ratio(revcol[n, c], f, revcol[n, "plain"])
                  for c in ("reversible", "one") for n in column_counts}
        targets["revcol"][f]["time"] = all(r <= 2 for r in ratios.values())
        missed = [f"{n} columns, {REVCOL_CONFIGURATIONS[c]} ({r:.2f})" for (n, c), r in ratios.items() if r > 2]
        lines.append(f"Target: reversible (per column and one Function) at most 2× the non-reversible run, "
                     f"{LABELS[f]}: {'met at every size' if not missed else 'NOT met at ' + '; '.join(missed)} "
                     f"(ratios {min(ratios.values()):.2f} to {max(ratios.values()):.2f}).")
    lines += ["", "What to expect: backward recomputes each level (one forward's work) and computes each c back: "
              "about 4/3 ≈ 1.33× plus the reconstruction's elementwise work, in both reversible configurations (one "
              "Function does the same arithmetic, only keeping less).", ""]
    return "\n".join(lines), targets


def plot_reversible(results, s, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    colours = {"plain": "tab:blue", "sqrt": "tab:orange", "reversible": "tab:green", "one": "tab:purple"}
    for row_axes, part, names, label in [(axes[0], "coupling", COUPLING_CONFIGURATIONS, "depth N (coupling blocks)"),
                                         (axes[1], "revcol", REVCOL_CONFIGURATIONS, "columns N")]:
        rows = results[part]
        sizes = sorted({n for n, _ in rows})
        saved_axis, peak_axis, time_axis = row_axes
        for conf, name in names.items():
            for framework, style, marker in [("tinypytorch", "-", "o"), ("torch", "--", "x")]:
                measured = [rows[n, conf][framework] for n in sizes]
                kwargs = {"color": colours[conf], "marker": marker, "markersize": 8 if marker == "x" else 5,
                          "label": f"{LABELS[framework]}, {name}"}
                saved_axis.plot(sizes, [m.saved.bytes / MiB for m in measured], style, **kwargs)
                peak_axis.plot(sizes, [m.dropped.peak / MiB for m in measured], style, **kwargs)
                if conf != "plain":
                    time_axis.plot(sizes, [_median_ratio(rows[n, conf], framework, rows[n, "plain"]) for n in sizes],
                                   style, **kwargs)
        time_axis.axhline(2.0, color="tab:red", linestyle=":", label="target: 2")
        time_axis.axhline(1.0, color="tab:blue", alpha=0.5, label="plain")
        title = "RevNet stack" if part == "coupling" else f"RevCol, L = {s['revcol']['levels']}"
        for axis, what in [(saved_axis, "saved for backward (outer counting pack hook)"),
                           (peak_axis, "peak of forward + backward, gradients let go"),
                           (time_axis, "forward + backward time / plain (median)")]:
            axis.set_xscale("log", base=2)
            axis.set_xticks(sizes, [str(n) for n in sizes])
            if axis is time_axis:
                axis.set_ylabel("ratio")
            else:
                axis.set_yscale("log", base=2)
                axis.set_ylabel("MiB")
            axis.set_xlabel(label)
            axis.set_title(f"{title}: {what}", fontsize=10)
            axis.grid(True, alpha=0.3, which="both")
            axis.legend(fontsize=7)
    sc, sr = s["coupling"], s["revcol"]
    figure.suptitle(f"Reversible networks, {s['dtype']}: coupling blocks (width {sc['width']}, batch {sc['batch']}) "
                    f"and RevCol columns (width {sr['width']}, batch {sr['batch']}); tinypytorch solid, PyTorch dashed")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for memory, checkpoint and reversible .{md,png} "
                        "(default: bench/results, or bench/_out with --quick)")
    parser.add_argument("--only", choices=["memory", "checkpoint", "reversible"],
                        help="run one of the three parts (default: all)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    out = args.out or ROOT / ("_out" if args.quick else "results")
    out.mkdir(parents=True, exist_ok=True)
    parts = {  # name: (settings, run, report, plot); plot() of the memory part takes no settings
        "memory": (SETTINGS, run, report, lambda results, s, path: plot(results, path)),
        "checkpoint": (CHECKPOINT_SETTINGS, run_checkpoint, report_checkpoint, plot_checkpoint),
        "reversible": (REVERSIBLE_SETTINGS, run_reversible, report_reversible, plot_reversible),
    }
    for name, (settings, run_part, report_part, plot_part) in parts.items():
        if args.only not in (None, name):
            continue
        s = settings[mode]
        results = run_part(s)
        text, _ = report_part(results, s, mode)
        print(text)
        (out / f"{name}.md").write_text(text)
        plot_part(results, s, out / f"{name}.png")
        print(f"written: {out / f'{name}.md'}, {out / f'{name}.png'}")

if __name__ == "__main__":
    main()
