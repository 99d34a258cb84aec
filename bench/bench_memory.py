"""How much memory does tinypytorch's autograd keep, plainly and under checkpointing? Side by side with PyTorch.

    python bench/bench_memory.py            # the full run, a few minutes: bench/results/{memory,checkpoint}.{md,png}
    python bench/bench_memory.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/
    python bench/bench_memory.py --only checkpoint   # one part (memory or checkpoint)

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
from tinypytorch.layers import MLP
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


def saved_tinypytorch(model, x, target, segments=None):
    """Forward (with a counting pack hook) and backward once: what tinypytorch saved.

    Under checkpointing the checkpoint's own hooks are the innermost inside each checkpointed
    segment, and win: this hook sees what is kept outside the checkpoints, and each
    checkpoint's input (saved, as in PyTorch, outside the checkpoint's hooks).
    """
    records = []

    def pack(v):
        records.append((v.data.nbytes, _numpy_block(v.data)))
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        loss = loss_tinypytorch(model, x, target, segments)
    loss.backward()
    model.cleargrads()
    existing = {_numpy_block(a) for a in [p.data for p in model.params()] + [x, target]}
    return _saved(records, existing)


def saved_torch(twin, x, target, segments=None):
    """Forward (with a counting pack hook) and backward once: what PyTorch saved (the same rules as above)."""
    records = []

    def pack(t):
        records.append((t.nelement() * t.element_size(), _torch_block(t)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_torch(twin, x, target, segments)
    loss.backward()
    twin.zero_grad(set_to_none=True)
    existing = {_torch_block(t) for t in [*twin.parameters(), torch.from_numpy(x), torch.from_numpy(target)]}
    return _saved(records, existing)


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


def memory_tinypytorch(model, x, target, segments=None, drop_gradients=False):
    """tinypytorch's memory during one forward + backward, measured with tracemalloc.

    segments: as in loss_tinypytorch. drop_gradients: each gradient is let go as soon as it is
    complete, so that the peak is what the activations take (gradients then reports 0).
    """
    with _gradients_dropped_tinypytorch(model, drop_gradients):
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            base_all, base_arrays = tracemalloc.get_traced_memory()[0], _numpy_bytes()
            tracemalloc.reset_peak()
            loss = loss_tinypytorch(model, x, target, segments)
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
    gradients = 0 if drop_gradients else sum(p.grad.data.nbytes for p in model.params())
    model.cleargrads()
    return Memory(peak, after_forward, output, after_backward, gradients, after_drop,
                  overhead=all_after_forward - base_all - after_forward)


MARKS = ("bench_memory: forward", "bench_memory: backward")


def _drop_grad(p):
    p.grad = None


def memory_torch(twin, x, target, segments=None, drop_gradients=False):
    """PyTorch's memory during one forward + backward, from its profiler's allocation events.

    segments, drop_gradients: as in memory_tinypytorch; PyTorch lets a gradient go with a hook that
    runs once it has been accumulated into .grad (register_post_accumulate_grad_hook), setting .grad to None.
    """
    handles = [p.register_post_accumulate_grad_hook(_drop_grad) for p in twin.parameters()] if drop_gradients else []
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function(MARKS[0]):
                loss = loss_torch(twin, x, target, segments)
            output = loss.untyped_storage().nbytes()
            with record_function(MARKS[1]):
                loss.backward()
            del loss
    finally:
        gc.enable()
        for handle in handles:
            handle.remove()
    gradients = sum(p.grad.nelement() * p.grad.element_size() for p in twin.parameters() if p.grad is not None)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for memory.{md,png} and checkpoint.{md,png} "
                        "(default: bench/results, or bench/_out with --quick)")
    parser.add_argument("--only", choices=["memory", "checkpoint"], help="run one of the two parts (default: both)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    out = args.out or ROOT / ("_out" if args.quick else "results")
    out.mkdir(parents=True, exist_ok=True)
    if args.only != "checkpoint":
        s = SETTINGS[mode]
        results = run(s)
        text, _ = report(results, s, mode)
        print(text)
        (out / "memory.md").write_text(text)
        plot(results, out / "memory.png")
        print(f"written: {out / 'memory.md'}, {out / 'memory.png'}")
    if args.only != "memory":
        s = CHECKPOINT_SETTINGS[mode]
        results = run_checkpoint(s)
        text, _ = report_checkpoint(results, s, mode)
        print(text)
        (out / "checkpoint.md").write_text(text)
        plot_checkpoint(results, s, out / "checkpoint.png")
        print(f"written: {out / 'checkpoint.md'}, {out / 'checkpoint.png'}")


if __name__ == "__main__":
    main()
