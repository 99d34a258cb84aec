"""The text and the plot of bench/results/reversible.md and reversible.png, from memory_reversible.py's run.

Each section is a function of the results and of the sizes they are written in (Context); the
targets dict is filled in as the sections check them.
"""
import dataclasses
import statistics

import numpy as np
import torch

from memory_checkpoint import best_ratio, median_ratio
from memory_reversible import (CONCATENATE_BOUNDS, expected_saved_coupling, expected_saved_revcol, held_coupling,
                               held_coupling_extra, held_revcol)
from networks import COUPLING_CONFIGURATIONS, DTYPES, REVCOL_CONFIGURATIONS
from writing import LABELS, MiB, machine_lines, pyplot, save, verdict, written_by, yes


@dataclasses.dataclass
class Context:
    """The settings, the results split by network, and what sizes are written in."""
    sc: dict  # the coupling stack's settings
    sr: dict  # RevCol's
    coupling: dict
    revcol: dict
    itemsize: int
    a_c: int  # one activation of the coupling stack, in bytes
    a_r: int  # one of RevCol
    unit: int
    unit_name: str
    rng_bytes: int  # PyTorch's CPU generator state, which each of its checkpoints keeps

    @property
    def depths(self):
        return sorted({d for d, _ in self.coupling})

    @property
    def column_counts(self):
        return sorted({n for n, _ in self.revcol})

    def size(self, n):
        return f"{n / self.unit:.2f}"


def context(results, s):
    itemsize = np.dtype(DTYPES[s["dtype"]]).itemsize
    sc, sr = s["coupling"], s["revcol"]
    a_c, a_r = sc["batch"] * sc["width"] * itemsize, sr["batch"] * sr["width"] * itemsize
    unit, unit_name = (MiB, "MiB") if min(a_c, a_r) >= MiB / 8 else (1024, "KiB")
    return Context(sc, sr, results["coupling"], results["revcol"], itemsize, a_c, a_r, unit, unit_name,
                   torch.get_rng_state().nbytes)


def _spread(values):
    """max / min: 1.00 means flat."""
    return max(values) / min(values)


def _saved_table(rows, names, expected, n_label, size):
    out = ["| " + n_label + " | configuration | saved, tinypytorch | saved, PyTorch | tensors, tinypytorch "
           "| tensors, PyTorch | expected by counting | as expected |", "|---|---|---|---|---|---|---|---|"]
    all_match = True
    for (n, conf), row in rows.items():
        bytes_, tensors = expected(n, conf)
        match = all((r.saved.bytes, r.saved.count) == (bytes_, tensors) for r in row.values())
        all_match &= match
        out.append(f"| {n} | {names[conf]} | {size(row['tinypytorch'].saved.bytes)} | "
                   f"{size(row['torch'].saved.bytes)} | {row['tinypytorch'].saved.count} | "
                   f"{row['torch'].saved.count} | {size(bytes_)} ({tensors} tensors) | {yes(match)} |")
    return out, all_match


def _memory_table(rows, names, held, a, extra, n_label, size):
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


def _time_table(rows, names, repeats, n_label):
    out = ["| " + n_label + " | repeats | configuration | tinypytorch, s | tinypytorch / plain | best "
           "| PyTorch, s | PyTorch / plain | best |", "|---|---|---|---|---|---|---|---|---|"]
    for (n, conf), row in rows.items():
        plain = rows[n, "plain"]
        out.append(f"| {n} | {repeats[n]} | {names[conf]} | " + " | ".join(
            f"{statistics.median(row[f].seconds):.3f} | {median_ratio(row, f, plain):.2f} | "
            f"{best_ratio(row, f, plain):.2f}" for f in LABELS) + " |")
    return out


def _intro(s, mode, u):
    """The title, the two networks and their configurations, how they are measured; the machine."""
    itemsize, sc, sr, a_c, a_r = u.itemsize, u.sc, u.sr, u.a_c, u.a_r
    unit_name, size, depths, column_counts = u.unit_name, u.size, u.depths, u.column_counts
    lines = ["# Reversible networks: tinypytorch and PyTorch", "",
             f"{written_by('bench_memory.py', mode, ' --only reversible' if mode == 'quick' else '')}, "
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
             "block again; in PyTorch, `TorchReversibleSequentialFunction` of `bench/ports.py`, the same algorithm, "
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
    lines += [""] + machine_lines(memory=True)
    return lines


def _coupling_saved(u):
    """The stack's saved bytes against the count by hand."""
    itemsize, sc, unit_name, size, coupling = u.itemsize, u.sc, u.unit_name, u.size, u.coupling
    lines = ["", "## 1. A RevNet stack of coupling blocks", "", "### Saved for backward", "",
             "Expected, by counting: reversible, the stack's output and the loss's two operands (the output again, "
             "the target); plain, in each block, f's Linear its input x2 (a view, half an activation) and its "
             "weight (not where x2 is the batch's, which needs no gradient), f's tanh its output, g's Linear its "
             "input y1 and its weight, g's tanh its output, then the loss's two operands; √N segments, the k − 1 "
             "checkpoints' inputs and the last segment of m blocks saved as plain (the layout of "
             "`checkpoint.md`: k = round(√N) segments of N // k blocks, the last taking the remainder).", ""]
    table, coupling_saved = _saved_table(
        coupling, COUPLING_CONFIGURATIONS,
        lambda n, conf: expected_saved_coupling(n, conf, sc["width"], sc["batch"], itemsize), "N", size)
    lines += table
    lines += ["", f"Both frameworks equal the count by hand, bytes and tensors, in every row: "
              f"{yes(coupling_saved)}. The reversible stack saves "
              f"{size(expected_saved_coupling(1, 'reversible', sc['width'], sc['batch'], itemsize)[0])} {unit_name} "
              "at every depth (3 tensors: one array of new memory, its output)."]
    return lines


def _coupling_memory(u):
    """What the stack holds after forward, to the byte, and its two peaks."""
    a_c, rng_bytes, coupling, size = u.a_c, u.rng_bytes, u.coupling, u.size
    lines = ["", "### Memory", "",
             "Held after forward: the new memory held when the forward pass ends, less the loss's own, in "
             "activations a (by hand: reversible 1, the output; plain 2.5 N, each block's input but the batch's, "
             "its two tanh outputs and y1, three halves, and the last output; √N segments k − 1 + 2.5 m, the "
             "checkpoints' inputs but the batch, the last segment's input, and its m blocks as plain). PyTorch's "
             f"checkpoints each keep the random generator's state too ({rng_bytes:,} B).", ""]
    table, coupling_exact = _memory_table(coupling, COUPLING_CONFIGURATIONS, held_coupling, a_c,
                                          held_coupling_extra, "N", size)
    lines += table
    lines += ["", f"Checks, to the byte: tinypytorch holds the count by hand plus {CONCATENATE_BOUNDS} B per block "
              f"in the plain and checkpointed runs, in every row: {yes(coupling_exact['tinypytorch'])} "
              f"(each block's concatenate node keeps its split points, a NumPy array of {CONCATENATE_BOUNDS} B, "
              f"checkpointed blocks' nodes too); PyTorch the count by hand plus {rng_bytes:,} B per checkpoint: "
              f"{yes(coupling_exact['torch'])}."]
    return lines


def _coupling_peaks(u, targets):
    """The target on the reversible stack's peak, and where its growth comes from."""
    itemsize, sc, coupling, depths = u.itemsize, u.sc, u.coupling, u.depths
    lines = []
    reversible_peaks = {f: [coupling[d, "reversible"][f].dropped.peak for d in depths] for f in LABELS}
    reversible_kept = {f: [coupling[d, "reversible"][f].kept.peak - coupling[d, "reversible"][f].kept.gradients
                           for d in depths] for f in LABELS}
    plain_peaks = {f: [coupling[d, "plain"][f].dropped.peak for d in depths] for f in LABELS}
    lines.append("")
    for f in LABELS:
        spread = _spread(reversible_peaks[f])
        targets["coupling"][f] = {"peak": spread <= 1.1}
        lines.append(f"Target: the reversible stack's peak (forward + backward, gradients let go) flat within 1.1× "
                     f"from N = {depths[0]} to {depths[-1]}, {LABELS[f]}: {verdict(spread <= 1.1)} "
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
              "as that block is done (`current_pass().send`), through the graph rather than into `.grad` directly, so "
              "that `autograd.grad` reaches them too and a hook runs once, when the gradient is complete; the Function "
              "holds one block's gradients at a time, not the whole stack's. Relative differences of the gradients "
              "from the plain run's: float32 arithmetic, the reversible run computing each block's input back from "
              "its output."]
    return lines


def _coupling_time(u, targets):
    """The stack's forward + backward times and their target."""
    sc, coupling, depths = u.sc, u.coupling, u.depths
    lines = ["", "### Time of forward + backward", "",
             "Each configuration's forward + backward (no hooks, no measurement), timed with `time.perf_counter` "
             "with the garbage collector off, the configurations taking turns (as in `checkpoint.md`); the median "
             "of the repeats and its ratio to the plain run's median in the same framework; \"best\": the same with "
             "the fastest repeat of each. Timings are reported here only, never asserted in tests.", ""]
    lines += _time_table(coupling, COUPLING_CONFIGURATIONS, sc["repeats"], "N")
    lines.append("")
    for f in LABELS:
        ratios = {d: median_ratio(coupling[d, "reversible"], f, coupling[d, "plain"]) for d in depths}
        targets["coupling"][f]["time"] = all(r <= 2 for r in ratios.values())
        missed = [f"N = {d} ({r:.2f})" for d, r in ratios.items() if r > 2]
        lines.append(f"Target: reversible at most 2× the plain run, {LABELS[f]}: "
                     f"{'met at every depth' if not missed else 'NOT met at ' + ', '.join(missed)} (ratios "
                     f"{min(ratios.values()):.2f} to {max(ratios.values()):.2f}).")
    lines += ["", "What to expect: a block's forward is about a third of its forward + backward; the reversible "
              "run does the forward, then in backward the inverse (one forward's work) and the forward again before "
              "the backward: about 5/3 ≈ 1.67× plain; √N segments recompute N − m blocks: 1 + (N − m) / (3N)."]
    return lines


def _revcol_saved(u):
    """RevCol's saved bytes against the count by hand."""
    itemsize, sr, a_r, unit_name, size = u.itemsize, u.sr, u.a_r, u.unit_name, u.size
    revcol = u.revcol
    lines = ["", f"## 2. RevCol: reversible columns, L = {sr['levels']} levels", "", "### Saved for backward", "",
             "Expected, by counting: reversible per column, each column x and its L new c's (RevCol's "
             "`ctx.save_for_backward(x, c0, c1, c2, c3)`), then the loss's two operands; reversible as one "
             "Function, x and the last column's L c's, then the loss's two operands, whatever the number of "
             "columns; non-reversible, in each "
             "level the lower Linear its input and weight (no weight where the input is the batch x), the upper "
             "Linear its input and weight (no weight in the first column, whose states are constant zeros; none "
             "at the top level), the tanh its output, α_i c_i its factors (c_i for α's gradient; α_i only where "
             "c_i needs a gradient, not in the first column), then the loss's two operands.", ""]
    table, revcol_saved = _saved_table(
        revcol, REVCOL_CONFIGURATIONS,
        lambda n, conf: expected_saved_revcol(n, sr["levels"], conf, sr["width"], sr["batch"], itemsize), "columns",
        size)
    lines += table
    one_saved = expected_saved_revcol(1, sr["levels"], "one", sr["width"], sr["batch"], itemsize)
    lines += ["", f"Both frameworks equal the count by hand, bytes and tensors, in every row: "
              f"{yes(revcol_saved)}. A reversible column run as a Function of its own saves x + L c's: "
              f"{size((sr['levels'] + 1) * a_r)} {unit_name} more per column; the columns run as one Function save "
              f"x + L c's in all, {size(one_saved[0])} {unit_name} with the loss's operands ({one_saved[1]} tensors), "
              "at every number of columns."]
    return lines


def _revcol_memory(u):
    """What RevCol holds after forward, to the byte, and its two peaks."""
    sr, a_r, revcol, size = u.sr, u.a_r, u.revcol, u.size
    lines = ["", "### Memory", "",
             "Held after forward, in activations a, by hand: reversible per column L N (every column's new c's; x is "
             "the batch), reversible as one Function L (the last column's c's), non-reversible 2 L N (the new c's "
             "and each level's tanh output).", ""]
    table, revcol_exact = _memory_table(revcol, REVCOL_CONFIGURATIONS,
                                        lambda n, conf: held_revcol(n, sr["levels"], conf), a_r,
                                        lambda n, conf, f: 0, "columns", size)
    lines += table
    lines += ["", f"Checks, to the byte: tinypytorch holds the count by hand in every row: "
              f"{yes(revcol_exact['tinypytorch'])}; PyTorch: {yes(revcol_exact['torch'])}.",
              ""]
    return lines


def _revcol_peaks(u, targets):
    """The target on the one Function's peak, and why a Function per column grows."""
    itemsize, sr, a_r, revcol, column_counts = u.itemsize, u.sr, u.a_r, u.revcol, u.column_counts
    lines = []
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
                     f"in the number of columns, one Function, {LABELS[f]}: {verdict(flat)} (max / min "
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
              "column's is computed back through all the columns after it, so rounding errors build up with the "
              "number of columns (below). "
              "After backward, while the loss is referenced, "
              "tinypytorch's reversible Functions still hold the c's they computed back (`reconstructed`, kept for "
              "a step to print: L a per column, or L a for the one Function); PyTorch's ports let them go."]
    return lines


def _revcol_errors(s, u):
    """How far the reversible runs' gradients are from the non-reversible run's."""
    revcol, column_counts = u.revcol, u.column_counts
    lines = []
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
    return lines


def _revcol_time(u, targets):
    """RevCol's forward + backward times and their target."""
    sr, revcol, column_counts = u.sr, u.revcol, u.column_counts
    lines = ["", "### Time of forward + backward", "", "As for the stack above.", ""]
    lines += _time_table(revcol, REVCOL_CONFIGURATIONS, sr["repeats"], "columns")
    lines.append("")
    for f in LABELS:
        ratios = {(n, c): median_ratio(revcol[n, c], f, revcol[n, "plain"])
                  for c in ("reversible", "one") for n in column_counts}
        targets["revcol"][f]["time"] = all(r <= 2 for r in ratios.values())
        missed = [f"{n} columns, {REVCOL_CONFIGURATIONS[c]} ({r:.2f})" for (n, c), r in ratios.items() if r > 2]
        lines.append(f"Target: reversible (per column and one Function) at most 2× the non-reversible run, "
                     f"{LABELS[f]}: {'met at every size' if not missed else 'NOT met at ' + '; '.join(missed)} "
                     f"(ratios {min(ratios.values()):.2f} to {max(ratios.values()):.2f}).")
    lines += ["", "What to expect: backward recomputes each level (one forward's work) and computes each c back: "
              "about 4/3 ≈ 1.33× plus the reconstruction's elementwise work, in both reversible configurations (one "
              "Function does the same arithmetic, only keeping less).", ""]
    return lines


def report_reversible(results, s, mode):
    """The reversible networks' results file's text, and whether each target was met.

    Targets: {"coupling": {framework: {"peak": the reversible stack's peak, gradients let go, within 1.1x
    from the shallowest to the deepest (max / min), "time": reversible at most 2x the plain run's median}},
    "revcol": the same for the reversible columns against the number of columns}.
    """
    u = context(results, s)
    targets = {"coupling": {}, "revcol": {}}
    lines = (_intro(s, mode, u) + _coupling_saved(u) + _coupling_memory(u) + _coupling_peaks(u, targets)
             + _coupling_time(u, targets) + _revcol_saved(u) + _revcol_memory(u) + _revcol_peaks(u, targets)
             + _revcol_errors(s, u) + _revcol_time(u, targets))
    return "\n".join(lines), targets


def plot_reversible(results, s, path):
    plt = pyplot()
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
                    time_axis.plot(sizes, [median_ratio(rows[n, conf], framework, rows[n, "plain"]) for n in sizes],
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
    save(figure, path, dpi=100)
