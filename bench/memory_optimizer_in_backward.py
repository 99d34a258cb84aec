"""The optimizer stepped inside backward (step 53): the gradient memory it saves, tinypytorch and PyTorch.

The usual loop runs backward, then `optimizer.step()`: every parameter's gradient is alive at once
when backward ends. Inside backward, a post-accumulate-grad hook on each parameter steps that
parameter's own optimizer and lets its gradient go (`.grad = None`) as soon as it is accumulated,
so at most one gradient is alive at a time. PyTorch's way, the same in both frameworks:

    optimizers = {p: optim.SGD([p], lr=...) for p in params}
    def hook(p):
        optimizers[p].step(); optimizers[p].zero_grad()
    for p in params:
        p.register_post_accumulate_grad_hook(hook)

Two measures, on networks.py's MLP and its PyTorch twin:
- gradient bytes counted: after each accumulation into a .grad, the bytes of every .grad then alive
  (a deterministic count; its maximum is the peak gradient memory);
- the peak of all memory over forward + backward + step: tinypytorch with tracemalloc, PyTorch from its profiler.
Called from bench_memory.py, whose "memory" part writes this section into bench/results/memory.md.
"""
import contextlib
import json
import pathlib
import tempfile
import tracemalloc

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from memory_measures import MARKS, _held_from_events
from networks import batch_and_target, build_mlp, loss_tinypytorch
from ports import loss_torch, torch_mlp_twin
from timing import collector_off
from tinypytorch import optim
from writing import MiB, header, mib, pyplot, save, yes

SETTINGS = {
    "full": {"depths": [8, 16, 32], "width": 1024, "batch": 256, "lr": 1e-3},
    "quick": {"depths": [2, 4], "width": 64, "batch": 16, "lr": 1e-3},
}
WAYS = ("usual", "in backward")


def grad_bytes(p):
    g = p.grad
    return 0 if g is None else (g.nelement() * g.element_size() if isinstance(g, torch.Tensor) else g.data.nbytes)


@contextlib.contextmanager
def training(params, make_optimizer, in_backward, curve):
    """One step's machinery: `step()` to call after backward (only a count in backward's case); `curve` gets the
    bytes of the .grad arrays alive after each accumulation, and after the step."""
    alive = {}

    def count(p):
        alive[id(p)] = grad_bytes(p)
        curve.append(sum(alive.values()))

    if in_backward:
        optimizers = {p: make_optimizer([p]) for p in params}

        def hook(p):
            count(p)
            optimizers[p].step()
            optimizers[p].zero_grad()  # the gradient let go at once
            alive[id(p)] = 0
        handles = [p.register_post_accumulate_grad_hook(hook) for p in params]

        def step():  # nothing left to do: each parameter was stepped in backward
            curve.append(0)
    else:
        optimizer = make_optimizer(params)
        handles = [p.register_post_accumulate_grad_hook(count) for p in params]

        def step():
            optimizer.step()
            optimizer.zero_grad()
            alive.clear()
            curve.append(0)
    try:
        yield step
    finally:
        for handle in handles:
            handle.remove()


def tinypytorch_pass(model, x, target, s, in_backward):
    """(gradient bytes curve, tracemalloc peak over forward + backward + step above what was held before)."""
    params, curve = list(model.params()), []
    with training(params, lambda ps: optim.SGD(ps, lr=s["lr"]), in_backward, curve) as step, collector_off():
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            loss_tinypytorch(model, x, target).backward()
            step()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    return curve, peak


def torch_pass(twin, x, target, s, in_backward):
    """The same in PyTorch, its peak from the profiler's allocation events (tensors only)."""
    params, curve = list(twin.parameters()), []
    with training(params, lambda ps: torch.optim.SGD(ps, lr=s["lr"]), in_backward, curve) as step, collector_off():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            with record_function(MARKS[0]):
                loss = loss_torch(twin, x, target)
            with record_function(MARKS[1]):
                loss.backward()
                step()
            del loss
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return curve, _held_from_events(events)[0]


def run(s):
    """{depth: {(framework, way): (curve, peak)}, plus "params": the parameters' bytes and "agree": whether the
    parameters after one step of each way and framework agree}."""
    results = {}
    for depth in s["depths"]:
        row, after = {}, []
        for way in WAYS:
            model = build_mlp(depth, s["width"], np.float32)
            twin = torch_mlp_twin(model)
            x, target = batch_and_target(s["batch"], s["width"], np.float32)
            row["tinypytorch", way] = tinypytorch_pass(model, x, target, s, way == "in backward")
            row["torch", way] = torch_pass(twin, x, target, s, way == "in backward")
            after += [[p.data for p in model.params()], [p.detach().numpy() for p in twin.parameters()]]
            row["params"] = sum(p.data.nbytes for p in model.params())
            del model, twin
        row["agree"] = all(np.allclose(a, b, rtol=1e-5, atol=1e-7) for other in after[1:]
                           for a, b in zip(after[0], other))
        results[depth] = row
        print(f"depth {depth:2}: peak gradient bytes usual {max(row['tinypytorch', 'usual'][0]) / MiB:.2f} MiB, "
              f"in backward {max(row['tinypytorch', 'in backward'][0]) / MiB:.2f} MiB", flush=True)
    return results


def same_counts(ours, theirs, way):
    """The same counts, up to the order within a Linear layer (PyTorch's addmm hands the bias its gradient first,
    tinypytorch the weight): usual, the same number of accumulations, peak and total; in backward, the same
    gradient sizes, one alive at a time."""
    if way == "usual":
        return len(ours) == len(theirs) and max(ours) == max(theirs) and ours[-2] == theirs[-2]
    return sorted(ours) == sorted(theirs)


def report(results, s):
    """The section of memory.md, and whether the counts agree between frameworks and the in-backward peak is the
    largest single gradient."""
    lines = ["", "## The optimizer inside backward (step 53)", "",
             f"The same MLP (float32, width {s['width']:,}, batch {s['batch']:,}), one training step with SGD "
             "(lr {lr}): the usual loop (backward, then `step()` and `zero_grad()`) against an optimizer per parameter "
             "stepped by a post-accumulate-grad hook that then sets `.grad` to None. Gradient bytes: the bytes of "
             "every `.grad` alive, counted after each accumulation; their peak. Peak of all memory: forward + "
             "backward + step (tinypytorch: `tracemalloc`; PyTorch: its profiler). MiB.".format(lr=s["lr"]), ""]
    lines += header("depth", "parameters", "peak gradient bytes, usual", "in backward",
                    "peak, tinypytorch usual", "tinypytorch in backward", "peak, PyTorch usual",
                    "PyTorch in backward", "gradient counts agree", "parameters agree")
    ok = True
    for depth, row in results.items():
        equal = all(same_counts(row["tinypytorch", w][0], row["torch", w][0], w) for w in WAYS)
        largest = max(np.diff([0] + row["tinypytorch", "usual"][0][:-1]))  # the largest single gradient
        ok = ok and equal and row["agree"] and max(row["tinypytorch", "in backward"][0]) == largest
        lines.append(f"| {depth} | {mib(row['params'])} | {mib(max(row['tinypytorch', 'usual'][0]))} | "
                     f"{mib(max(row['tinypytorch', 'in backward'][0]))} | "
                     + " | ".join(mib(row[f, w][1]) for f in ("tinypytorch", "torch") for w in WAYS)
                     + f" | {yes(equal)} | {yes(row['agree'])} |")
    lines += ["", "In the usual loop every gradient is alive when backward ends: the peak gradient bytes are the "
              "parameters' bytes. Inside backward at most one gradient is alive at a time: the peak is the largest "
              f"weight's gradient ({yes(ok)} in every row; both frameworks count the same, though within a Linear "
              "layer PyTorch accumulates the bias first and tinypytorch the weight). The peak of all memory falls "
              "too, by less than the gradients' bytes: inside backward the peak moves to the start of backward, "
              "where the activations and backward's own temporaries are held.", "",
              "The gradient bytes alive over the step of the deepest MLP, both ways and both frameworks: "
              "memory_optimizer_in_backward.png.", ""]
    return "\n".join(lines), ok


def plot(results, path):
    """Gradient bytes alive over the backward pass of the deepest MLP, usual loop against in backward."""
    depth = max(results)
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for (framework, way), style in [(("tinypytorch", "usual"), "-"), (("tinypytorch", "in backward"), "-"),
                                    (("torch", "usual"), "--"), (("torch", "in backward"), "--")]:
        curve = results[depth][framework, way][0]
        axis.step(range(1, len(curve) + 1), [c / MiB for c in curve], style, where="post",
                  label=f"{'PyTorch' if framework == 'torch' else framework}, {way}")
    axis.set_xlabel("accumulation into a .grad (in backward's order), then the step")
    axis.set_ylabel("MiB of .grad alive")
    axis.set_title(f"gradient bytes over one training step, MLP of depth {depth}")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    save(figure, path, dpi=110)
