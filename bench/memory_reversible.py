"""Reversible networks in tinypytorch and in PyTorch, what they save and hold: the runs of bench/results/reversible.md.

    python bench/bench_memory.py --only reversible           # the full run (its part of `make bench`)
    python bench/bench_memory.py --only reversible --quick   # a smoke test, written to bench/_out/

In float32, measured as in memory_saved.py and memory_checkpoint.py (saved bytes, memory held and
peak, time of forward + backward): a RevNet stack of N AdditiveCoupling blocks (N = 8 to 128),
plain, in √N checkpointed segments and reversible (ReversibleSequential: one Function keeping only
the output); and RevCol's columns (N = 2 to 16 columns of 4 levels), non-reversible, reversible per
column (RevColumn, RevCol's ReverseFunction: x and the new c's of each column kept) and reversible
as one Function (ReversibleColumns: x and the last column's c's kept). PyTorch runs the ports of
ports.py with the same weights. Here: the settings, the counts by hand and the run;
memory_reversible_report.py writes the results file and the plot. Targets: the reversible peak flat
within 1.1x in depth and in the number of columns; the reversible forward + backward at most 2x the
plain run's time.
"""
import dataclasses
import functools

import numpy as np
import torch

from tinypytorch.reversible import ReversibleColumnsFunction

from memory_checkpoint import Checkpointed
from memory_measures import count_saved_tinypytorch, count_saved_torch, measure_tinypytorch, measure_torch
from networks import (COUPLING_CONFIGURATIONS, DTYPES, REVCOL_CONFIGURATIONS, RevColNet, batch_and_target,
                      build_coupling_stack, loss_coupling_tinypytorch, loss_revcol_tinypytorch, revcol_states,
                      segment_layout, segments_for)
from ports import loss_coupling_torch, loss_revcol_torch, torch_coupling_twin, torch_revcol_twin
from timing import time_passes
from writing import LABELS, MiB

torch.set_num_threads(1)

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
class Measured(Checkpointed):
    """One configuration at one size in one framework: what memory_checkpoint measures, and how right it is."""
    error: float = 0.0  # the gradients' largest relative difference from the plain run's (same framework)
    states_back: float = None  # RevCol, one Function, tinypytorch: max |c| of the first column's states computed back


def relative_error(gradients, reference):
    """max over parameters of max |g - g_plain| / max |g_plain|; for a parameter whose plain gradient is all zero
    (RevCol's first column's alphas), max |g| over the largest plain gradient of all the parameters."""
    pairs = list(zip(gradients, reference, strict=True))
    largest = max(float(np.max(np.abs(r))) for _, r in pairs)
    return max(float(np.max(np.abs(g - r))) / (float(np.max(np.abs(r))) or largest) for g, r in pairs)


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


def _measure_both(net, twin_of, loss, configurations, repeats, after_tinypytorch=None):
    """{configuration: {framework: Measured}}: `net` in tinypytorch, then twin_of(net) in PyTorch.

    loss: {framework: (net, configuration) -> loss} with the arrays it reads as loss["inputs"]. One framework's
    parameters are in memory at a time. after_tinypytorch(net, rows): what to do before the net goes.
    """
    rows = {c: {} for c in configurations}
    for framework in LABELS:
        if framework == "torch":
            net = twin_of(net)
        losses = {c: functools.partial(loss[framework], net, c) for c in configurations}
        losses[None] = loss["inputs"]
        clear = net.cleargrads if framework == "tinypytorch" else net.zero_grad
        for c, measured in _measure_configurations(framework, net, losses, clear, repeats).items():
            rows[c][framework] = measured
        if framework == "tinypytorch" and after_tinypytorch is not None:
            after_tinypytorch(net, rows)
    return rows


def _peaks(rows, names):
    """The peaks with the gradients let go, as the run prints them."""
    return ", ".join(f"{names[c]} " + "/".join(f"{rows[c][f].dropped.peak / MiB:.1f}" for f in LABELS)
                     for c in names) + " MiB (tinypytorch/PyTorch)"


def run_coupling(sc, dtype):
    """{(depth, configuration): {framework: Measured}} of the RevNet stack."""
    results = {}
    for depth in sc["depths"]:
        x, target = batch_and_target(sc["batch"], sc["width"], dtype)
        loss = {"tinypytorch": lambda net, c: loss_coupling_tinypytorch(net, x, target, c),
                "torch": lambda twin, c: loss_coupling_torch(twin, x, target, c), "inputs": [x, target]}
        rows = _measure_both(build_coupling_stack(depth, sc["width"], dtype), torch_coupling_twin, loss,
                             COUPLING_CONFIGURATIONS, sc["repeats"][depth])
        for c in COUPLING_CONFIGURATIONS:
            results[depth, c] = rows[c]
        print(f"coupling, depth {depth:3}: peak (gradients let go) " + _peaks(rows, COUPLING_CONFIGURATIONS),
              flush=True)
    return results


def run_revcol(sr, dtype):
    """{(columns, configuration): {framework: Measured}} of RevCol's columns."""
    results = {}
    for columns in sr["columns"]:
        x, target = batch_and_target(sr["batch"], sr["width"], dtype)
        states = revcol_states(sr["levels"], sr["batch"], sr["width"], dtype)
        loss = {"tinypytorch": lambda net, c: loss_revcol_tinypytorch(net, x, states, target, c),
                "torch": lambda twin, c: loss_revcol_torch(twin, x, states, target, c), "inputs": [x, target, *states]}

        def states_back(net, rows):
            rows["one"]["tinypytorch"].states_back = first_states_back(net, x, states, target)

        rows = _measure_both(RevColNet(columns, sr["levels"], sr["width"], dtype), torch_revcol_twin, loss,
                             REVCOL_CONFIGURATIONS, sr["repeats"][columns], states_back)
        for c in REVCOL_CONFIGURATIONS:
            results[columns, c] = rows[c]
        print(f"RevCol, {columns:2} columns: peak (gradients let go) " + _peaks(rows, REVCOL_CONFIGURATIONS),
              flush=True)
    return results


def run_reversible(s):
    """{"coupling": {(depth, configuration): {framework: Measured}}, "revcol": {(columns, configuration): ...}}."""
    dtype = DTYPES[s["dtype"]]
    return {"coupling": run_coupling(s["coupling"], dtype), "revcol": run_revcol(s["revcol"], dtype)}
