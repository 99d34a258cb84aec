"""Gradient checkpointing of an MLP, in tinypytorch and in PyTorch: bench/results/checkpoint.{md,png}.

    python bench/bench_memory.py --only checkpoint           # the full run (its part of `make bench`)
    python bench/bench_memory.py --only checkpoint --quick   # a smoke test, written to bench/_out/

The MLP of memory_saved.py in float32 at depths N = 8 to 128, in three configurations: plain;
checkpoint_sequential with round(√N) segments; checkpoint_sequential with N segments (every layer).
Both frameworks use use_reentrant=False, the mode PyTorch recommends, and split as PyTorch does
(networks.segment_layout). Measured: saved bytes with the counting hook, entered outside the
checkpoints (so it sees what is kept outside them and each checkpoint's input: the checkpoints' own
hooks are innermost and win inside); peak memory, once with the gradients kept and once with each
gradient let go when complete, against the k + N/k prediction; and the time of forward + backward
relative to the plain run.
"""
import dataclasses
import functools
import os
import statistics

import numpy as np
import torch

from memory_measures import Memory, Saved
from memory_saved import memory_tinypytorch, memory_torch, saved_tinypytorch, saved_torch
from networks import DTYPES, batch_and_target, build_mlp, loss_tinypytorch, segment_layout, segments_for
from ports import loss_torch, torch_mlp_twin
from timing import time_passes
from writing import LABELS, MiB, machine_lines, pyplot, save, verdict, written_by, yes

torch.set_num_threads(1)

CONFIGURATIONS = {"plain": "plain", "sqrt": "√N segments", "every": "every layer"}

CHECKPOINT_SETTINGS = {
    # repeats: how many timed forward + backward passes per configuration at each depth (fewer for the deepest)
    "full": {"depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256, "dtype": "float32",
             "repeats": {8: 5, 16: 5, 32: 5, 64: 3, 128: 3}},
    "quick": {"depths": [4, 9, 16], "width": 64, "batch": 16, "dtype": "float32", "repeats": {4: 2, 9: 2, 16: 2}},
}


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


def run_checkpoint(s):
    """{(depth, configuration): {"tinypytorch": Checkpointed, "torch": Checkpointed}}."""
    results = {}
    dtype = DTYPES[s["dtype"]]
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
                net = torch_mlp_twin(model)
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


def median_ratio(row, framework, plain_row):
    """A configuration's median forward + backward time over the plain run's, in one framework."""
    return statistics.median(row[framework].seconds) / statistics.median(plain_row[framework].seconds)


def best_ratio(row, framework, plain_row):
    """The same with the fastest repeat of each: what the machine's other work disturbs least."""
    return min(row[framework].seconds) / min(plain_row[framework].seconds)


@dataclasses.dataclass
class Units:
    """What the report's sections write sizes in: one activation a, one layer's backward working memory c."""
    itemsize: int
    a: int
    c: int
    unit: int
    unit_name: str
    depths: list
    rng_bytes: int  # PyTorch's CPU generator state, which each of its checkpoints keeps

    def size(self, n):
        return f"{n / self.unit:.2f}"


def units(results, s):
    itemsize = np.dtype(DTYPES[s["dtype"]]).itemsize
    a = s["batch"] * s["width"] * itemsize  # one activation, in bytes
    unit, unit_name = (MiB, "MiB") if a >= MiB / 4 else (1024, "KiB")
    return Units(itemsize, a, working_memory(s["width"], s["batch"]) * itemsize, unit, unit_name,
                 sorted({d for d, _ in results}), torch.get_rng_state().nbytes)


def _intro(s, mode, u):
    """The title, the configurations and how each splits the layers, the machine."""
    itemsize, a, unit_name, size, depths = u.itemsize, u.a, u.unit_name, u.size, u.depths
    lines = ["# Gradient checkpointing: tinypytorch and PyTorch", "",
             f"{written_by('bench_memory.py', mode)}. The MLP of `memory.md`: N Linear layers "
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
    lines += [""] + machine_lines(memory=True)
    return lines


def _saved_section(results, s, u):
    """Saved bytes against the count by hand; whether tinypytorch saves no more."""
    itemsize, size = u.itemsize, u.size
    lines = ["", "## Saved for backward", "",
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
                     f"{size(expected[0])} ({expected[1]} tensors) | {yes(matches)} |")
    lines += ["", f"Target: tinypytorch saves no more than PyTorch in every configuration: "
              f"{verdict(saved_target)}. Both equal the count by hand, bytes and tensors: "
              f"{yes(by_hand)}. The hook counts every saved tensor, each saved weight too (width², "
              f"{s['width'] / s['batch']:g} activations' worth, but a parameter: no new memory), and a tanh output "
              "twice (its tanh and the next Linear save it): saved bytes are not the memory held, which is measured "
              "below."]
    return lines, saved_target


def _prediction_text(s, u):
    """What the k + N/k scheme predicts for the peak, and how the two peaks are measured."""
    itemsize, c, unit_name, size = u.itemsize, u.c, u.unit_name, u.size
    lines = ["", "## Peak memory and the k + N/k prediction", "",
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
    return lines


def _dropped_section(results, u):
    """Peaks with the gradients let go against (k + N/k) a + c, and that target."""
    a, c, size, depths = u.a, u.c, u.size, u.depths
    lines = []
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
    return lines, sqrt_ratios, peak_target


def _schedule_section(results, u, sqrt_ratios):
    """What the schedule holds after forward, checked to the byte."""
    a, c, size, rng_bytes = u.a, u.c, u.size, u.rng_bytes
    lines = ["", "The schedule that checkpoint_sequential runs holds k + m − 1 activations when the forward pass "
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
              f"{yes(exact['tinypytorch'])}; PyTorch holds (k + m − 1) a + (k − 1) × "
              f"{rng_bytes:,} B: {yes(exact['torch'])} (each of its checkpoints keeps the CPU random "
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
    return lines


def _kept_section(results, s, u):
    """Peaks with the gradients kept, against (k + N/k) a + the gradients."""
    itemsize, a, unit_name, size = u.itemsize, u.a, u.unit_name, u.size
    lines = ["", "### Gradients kept", "",
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
    return lines


def _time_section(results, u):
    """Forward + backward time against the plain run's, and that target."""
    depths = u.depths
    lines = []
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
                time_ratios[f][depth, conf] = median_ratio(row, f, plain)
        lines.append(f"| {depth} | {len(row['tinypytorch'].seconds)} | {CONFIGURATIONS[conf]} | "
                     f"{recomputed_layers(depth, segments) if segments else 0} | "
                     + " | ".join(f"{statistics.median(row[f].seconds):.3f} | {median_ratio(row, f, plain):.2f} | "
                                  f"{best_ratio(row, f, plain):.2f}" for f in LABELS) + " |")
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
    return lines, time_target


def report_checkpoint(results, s, mode):
    """The checkpointing results file's text, and whether each target was met.

    Targets: {"saved": tinypytorch saves no more than PyTorch in every configuration,
    "peak": {framework: the √N configuration's peak, gradients let go, within 1.2x of (k + N/k) a + c},
    "time": {framework: every checkpointed configuration at most 1.35x the plain run's median time}}.
    """
    u = units(results, s)
    saved, saved_target = _saved_section(results, s, u)
    dropped, sqrt_ratios, peak_target = _dropped_section(results, u)
    time, time_target = _time_section(results, u)
    lines = (_intro(s, mode, u) + saved + _prediction_text(s, u) + dropped + _schedule_section(results, u, sqrt_ratios)
             + _kept_section(results, s, u) + time)
    return "\n".join(lines), {"saved": saved_target, "peak": peak_target, "time": time_target}


def plot_checkpoint(results, s, path):
    plt = pyplot()
    itemsize = np.dtype(DTYPES[s["dtype"]]).itemsize
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
                ratios = [median_ratio(results[d, conf], framework, results[d, "plain"]) for d in depths]
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
    save(figure, path, dpi=100)
