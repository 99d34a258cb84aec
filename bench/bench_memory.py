"""How much memory does tinypytorch's autograd keep? Side by side with PyTorch.

    python bench/bench_memory.py            # the full run, under a minute: bench/results/memory.{md,png}
    python bench/bench_memory.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/

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
"""
import argparse
import dataclasses
import datetime
import gc
import json
import os
import pathlib
import platform
import tempfile
import tracemalloc

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import tinypytorch
from tinypytorch import Variable
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import MLP

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


def loss_tinypytorch(model, x, target):
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    return tinypytorch.mean_squared_error(model(x), target)


def loss_torch(twin, x, target):
    return torch.nn.functional.mse_loss(twin(torch.from_numpy(x)), torch.from_numpy(target))


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


def saved_tinypytorch(model, x, target):
    """Forward (with a counting pack hook) and backward once: what tinypytorch saved."""
    records = []

    def pack(v):
        records.append((v.data.nbytes, _numpy_block(v.data)))
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        loss = loss_tinypytorch(model, x, target)
    loss.backward()
    model.cleargrads()
    existing = {_numpy_block(a) for a in [p.data for p in model.params()] + [x, target]}
    return _saved(records, existing)


def saved_torch(twin, x, target):
    """Forward (with a counting pack hook) and backward once: what PyTorch saved."""
    records = []

    def pack(t):
        records.append((t.nelement() * t.element_size(), _torch_block(t)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_torch(twin, x, target)
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


def memory_tinypytorch(model, x, target):
    """tinypytorch's memory during one forward + backward, measured with tracemalloc."""
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        base_all, base_arrays = tracemalloc.get_traced_memory()[0], _numpy_bytes()
        tracemalloc.reset_peak()
        loss = loss_tinypytorch(model, x, target)
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
    gradients = sum(p.grad.data.nbytes for p in model.params())
    model.cleargrads()
    return Memory(peak, after_forward, output, after_backward, gradients, after_drop,
                  overhead=all_after_forward - base_all - after_forward)


MARKS = ("bench_memory: forward", "bench_memory: backward")


def memory_torch(twin, x, target):
    """PyTorch's memory during one forward + backward, from its profiler's allocation events."""
    gc.collect()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function(MARKS[0]):
                loss = loss_torch(twin, x, target)
            output = loss.untyped_storage().nbytes()
            with record_function(MARKS[1]):
                loss.backward()
            del loss
    finally:
        gc.enable()
    gradients = sum(p.grad.nelement() * p.grad.element_size() for p in twin.parameters())
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for memory.md and memory.png "
                        "(default: bench/results, or bench/_out with --quick)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    s = SETTINGS[mode]
    out = args.out or ROOT / ("_out" if args.quick else "results")
    results = run(s)
    text, _ = report(results, s, mode)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory.md").write_text(text)
    plot(results, out / "memory.png")
    print(f"written: {out / 'memory.md'}, {out / 'memory.png'}")


if __name__ == "__main__":
    main()
