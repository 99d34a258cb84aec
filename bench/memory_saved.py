"""What an MLP's autograd saves for backward and holds, in tinypytorch and in PyTorch: bench/results/memory.{md,png}.

    python bench/bench_memory.py --only memory           # the full run (its part of `make bench`)
    python bench/bench_memory.py --only memory --quick   # a smoke test, written to bench/_out/

The workload: an MLP of `depth` Linear layers (width 1,024, tanh between them) on a batch of 256
rows, a mean-squared-error loss against a fixed target, in float32 and float64, at depths 4 to 32;
PyTorch runs a twin with the same weights (ports.torch_mlp_twin). Measured as memory_measures.py says:
saved bytes through a counting pack hook, memory held and peak with `tracemalloc` (tinypytorch) and
PyTorch's profiler. After its forward pass each framework holds the loss, what the graph saved that
existed before (no new memory) and the activations it saved: so "held after forward minus output"
must equal the saved activations' bytes, which the tables check to the byte. The measured pass
follows one unmeasured forward + backward (the one that counts the saved tensors).
"""
import numpy as np
import torch

from memory_measures import count_saved_tinypytorch, count_saved_torch, measure_tinypytorch, measure_torch
from networks import DTYPES, batch_and_target, build_mlp, loss_tinypytorch
from ports import loss_torch, torch_mlp_twin
from writing import LABELS, MiB, difference, machine_lines, mib, pyplot, save, verdict, written_by, yes

torch.set_num_threads(1)  # as in bench_autograd.py; memory does not depend on it, the run's length does

SETTINGS = {
    "full": {"depths": [4, 8, 16, 32], "width": 1024, "batch": 256},
    "quick": {"depths": [1, 2, 4], "width": 64, "batch": 16},
}


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


def memory_tinypytorch(model, x, target, segments=None, drop_gradients=False):
    """tinypytorch's memory during one forward + backward, measured with tracemalloc.

    segments: as in loss_tinypytorch. drop_gradients: each gradient is let go as soon as it is
    complete, so that the peak is what the activations take (gradients then reports 0).
    """
    return measure_tinypytorch(lambda: loss_tinypytorch(model, x, target, segments), model, drop_gradients)


def memory_torch(twin, x, target, segments=None, drop_gradients=False):
    """PyTorch's memory during one forward + backward, from its profiler's allocation events."""
    return measure_torch(lambda: loss_torch(twin, x, target, segments), twin, drop_gradients)


def expected_saved(depth, width, batch, itemsize):
    """What both frameworks should save, by hand: (bytes, tensors).

    The first Linear saves its input (its weight's gradient needs it; the batch needs no gradient, so
    its weight is not saved); every other Linear its input and its weight; each tanh its output; the
    loss both operands. 3 * depth tensors: (2 depth + 1) of batch x width, depth - 1 of width x width.
    """
    return ((2 * depth + 1) * batch * width + (depth - 1) * width * width) * itemsize, 3 * depth


def run(s):
    """{(depth, dtype name): {"tinypytorch": (Saved, Memory), "torch": (Saved, Memory)}}."""
    results = {}
    for dtype in DTYPES:
        for depth in s["depths"]:
            model = build_mlp(depth, s["width"], DTYPES[dtype])
            x, target = batch_and_target(s["batch"], s["width"], DTYPES[dtype])
            row = {"tinypytorch": (saved_tinypytorch(model, x, target), memory_tinypytorch(model, x, target))}
            twin = torch_mlp_twin(model)
            del model  # one framework's parameters in memory at a time
            row["torch"] = (saved_torch(twin, x, target), memory_torch(twin, x, target))
            del twin
            results[depth, dtype] = row
            print(f"depth {depth:2}, {dtype}: saved {row['tinypytorch'][0].bytes / MiB:.2f} MiB (tinypytorch), "
                  f"{row['torch'][0].bytes / MiB:.2f} MiB (PyTorch)", flush=True)
    return results


def _side_by_side(results, s):
    """The table of saved bytes and peaks in both frameworks, its target; and whether the saved bytes are equal."""
    lines = ["", "## Side by side", "",
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
    expected = [expected_saved(depth, s["width"], s["batch"], np.dtype(DTYPES[dtype]).itemsize)
                for depth, dtype in results]
    by_hand = all((row[framework][0].bytes, row[framework][0].count) == counted
                  for row, counted in zip(results.values(), expected) for framework in ("tinypytorch", "torch"))
    lines += ["", f"Target: saved bytes equal, a ratio of exactly 1.00: {verdict(all_equal)} "
              f"(bytes and tensor counts equal at every depth and dtype). Both equal the count by hand, 3 × depth "
              f"tensors of (2 depth + 1) × batch × width + (depth − 1) × width² elements in all: "
              f"{yes(by_hand)} (the first Linear saves its input, the batch; every other Linear its input "
              "and its weight; each tanh its output; the loss both operands). PyTorch saves the transpose of each "
              "weight, a view: the same bytes."]
    return lines, all_equal


HOW = {"tinypytorch": ("tinypytorch, measured with `tracemalloc`",
                       "Held: bytes of NumPy arrays (NumPy's own `tracemalloc` domain: exact). Peak: every traced "
                       "allocation, arrays and Python objects. Graph objects: the Python objects (Variables, "
                       "Functions, saved-tensor records) held after forward, in KiB."),
       "torch": ("PyTorch, measured with its profiler",
                 "`torch.profiler.profile(profile_memory=True)` records each allocation and free of PyTorch's CPU "
                 "allocator, in order; their running sum is the memory held. It sees tensors only: not MKL's or "
                 "oneDNN's own scratch memory, not Python objects.")}


def _held_table(results, framework):
    """What `framework` holds after forward, after backward and after the loss is dropped, against the counts."""
    title, how = HOW[framework]
    graph = framework == "tinypytorch"  # its graph's Python objects are a column of their own
    lines = ["", f"## {title}", "", how + " Output: the loss's own memory. Activations: the distinct memory "
             "blocks saved for backward that are not parameters, the batch or the target (a tanh output "
             "saved twice counts once). \"Held after forward − output − activations\" should be 0.", "",
             "| depth | dtype | peak | held after forward | output | activations saved "
             "| after forward − output − activations | held after backward (loss referenced) | gradients "
             "| after backward − output − gradients | held after the loss is dropped |"
             + (" graph objects, KiB |" if graph else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if graph else "")]
    for (depth, dtype), row in results.items():
        saved, m = row[framework]
        lines.append(f"| {depth} | {dtype} | {mib(m.peak)} | {mib(m.after_forward)} | {m.output:,} B | "
                     f"{mib(saved.activations)} | {difference(m.after_forward - m.output - saved.activations)} | "
                     f"{mib(m.after_backward)} | {mib(m.gradients)} | "
                     f"{difference(m.after_backward - m.output - m.gradients)} | {mib(m.after_drop)} |"
                     + (f" {m.overhead / 1024:.1f} |" if graph else ""))
    return lines


CHECKS = {
    "held after forward − output = activations saved":
        lambda saved, m: m.after_forward - m.output == saved.activations,
    "held after backward = gradients + output (the saved tensors freed, the loss still referenced)":
        lambda saved, m: m.after_backward == m.gradients + m.output,
    "held after the loss is dropped = gradients": lambda saved, m: m.after_drop == m.gradients,
}


def _checks(results, s):
    """PyTorch's loss buffer, if it shows; the checks to the byte, in both frameworks; what they say of PyTorch's."""
    lines = []
    if all(row["torch"][1].output == s["batch"] * s["width"] * np.dtype(DTYPES[dtype]).itemsize
           for (_, dtype), row in results.items()):
        lines += ["", "PyTorch's output is larger: its `mse_loss` returns a 0-d loss whose storage is a whole batch × "
                  "width buffer, held until the loss is dropped; tinypytorch's loss holds one number."]

    def check(framework, holds):
        return f"{LABELS[framework]} {yes(all(holds(*row[framework]) for row in results.values()))}"

    lines += ["", "Checks, to the byte: " + "; ".join(
        f"{name}: {check('tinypytorch', holds)}, {check('torch', holds)}" for name, holds in CHECKS.items()) + "."]
    if all(holds(*row["torch"]) for row in results.values() for holds in CHECKS.values()):
        lines.append("PyTorch's profiler figures pass the same checks as tinypytorch's `tracemalloc` figures, which "
                     "is why they are reported: they account for every tensor PyTorch allocates on the CPU (not for "
                     "the memory the process takes from the OS, nor for MKL's and oneDNN's scratch memory).")
    else:
        lines.append("PyTorch's profiler figures fail a check: its allocator saw memory that the saved tensors, "
                     "the loss and the gradients do not account for. Read its columns with care.")
    return lines


def report(results, s, mode):
    """The results file's text, and whether every saved-bytes ratio is exactly 1."""
    lines = ["# Autograd memory: tinypytorch and PyTorch", "",
             f"{written_by('bench_memory.py', mode)}. An MLP of `depth` Linear layers "
             f"{s['width']:,} → {s['width']:,} with tanh between them, a batch of {s['batch']:,} rows, a "
             "mean-squared-error loss against a fixed target; PyTorch runs a twin with the same weights. Sizes in MiB "
             "(2^20 bytes). Nothing here is timed.",
             ""]
    lines += machine_lines(memory=True)
    side_by_side, all_equal = _side_by_side(results, s)
    lines += side_by_side + _held_table(results, "tinypytorch") + _held_table(results, "torch")
    lines += _checks(results, s) + [""]
    return "\n".join(lines), all_equal


def plot(results, path):
    """Saved bytes (left) and peaks (right) against depth, both frameworks, both dtypes."""
    plt = pyplot()
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
    save(figure, path, dpi=110)
