"""Capstone (step 66): a deep digit classifier trained under a memory budget, every technique, both frameworks.

The network: Linear(64, W), tanh, then `depth` residual layers x + tanh(Linear(W, W)(x)), then Linear(W, 10), float32,
on the 8 x 8 digits. For each technique the tutorial built:
- peak memory of training: the model and Adam built, then two steps (forward, backward, Adam step), so the weights,
  Adam's moments, the activations and the gradients all count; tinypytorch with tracemalloc
  (tinypytorch.utils.memory.peak_memory; it counts the arrays and the graph's Python objects), PyTorch from its
  profiler's CPU allocation events (the allocator's bytes; its C++ graph nodes are not counted);
- time per epoch (the median of a few epochs) and the test accuracy after those epochs, seeded;
- the search: for a budget (3.43 MB in both frameworks, about what plain training of depth 16 needs), the
  deepest network the technique trains within it (doubling, then bisection, up to a cap), and how far that
  verdict stands from changing (its margin).
Writes bench/results/capstone.md and capstone.png.  `python bench/capstone.py [--quick]`.
"""
import argparse
import functools
import gc
import itertools
import json
import math
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

import tinypytorch as tp  # noqa: E402
from tinypytorch import datasets, nn, optim  # noqa: E402
from tinypytorch import functions as F  # noqa: E402
from tinypytorch.amp import GradScaler  # noqa: E402
from tinypytorch.autograd.graph import save_on_cpu  # noqa: E402
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential  # noqa: E402
from tinypytorch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts  # noqa: E402
from tinypytorch.utils.memory import peak_memory  # noqa: E402
from timing import collector_off  # noqa: E402

WIDTH, BATCH, LR, BUDGET_DEPTH = 64, 256, 3e-3, 16
# bytes, for both frameworks: about what plain training of depth BUDGET_DEPTH needs, placed where every verdict
# stands at least 20 KiB from changing (peaks measured at the depths around each verdict)
BUDGET = 3_428_000
TECHNIQUES = ("plain", "√N checkpointing", "selective checkpointing", "save_on_cpu", "reversible blocks",
              "mixed precision", "optimizer in backward", "checkpointing + optimizer in backward")
TORCH_HAS = {t for t in TECHNIQUES if t != "reversible blocks"}


# ----- the data and the weights, shared ------------------------------------------------------------

def digits(seed=0):
    """(train x, train y, test x, test y): the 1,797 digits, pixels scaled to [0, 1], float32, 80/20 split."""
    images, labels = datasets.load_digits()
    x = (images.reshape(len(images), -1) / 16).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], labels[order[:cut]], x[order[cut:]], labels[order[cut:]]


def weights(depth, width=WIDTH, seed=0, reversible=False, dtype=np.float32):
    """[(W, b)] of every Linear, uniform in +-1/sqrt(fan_in) as PyTorch draws them; a coupling's f and g are
    Linear(width/2, width/2) each, so a reversible network of `depth` blocks has 2 * depth such layers."""
    rng = np.random.default_rng(seed)
    half = width // 2
    hidden = [(half, half)] * (2 * depth) if reversible else [(width, width)] * depth
    sizes = [(64, width), *hidden, (width, 10)]

    def draw(n_in, n_out):
        k = 1 / math.sqrt(n_in)
        return rng.uniform(-k, k, (n_out, n_in)).astype(dtype), rng.uniform(-k, k, n_out).astype(dtype)
    return [draw(*s) for s in sizes]


def segments_of(n):
    """checkpoint_sequential's √N rule: about √n segments of about √n modules."""
    return max(1, round(math.sqrt(n)))


# ----- tinypytorch ---------------------------------------------------------------------------------

def tp_linear(W, b):
    layer = nn.Linear(W.shape[1], W.shape[0])
    layer.weight.data, layer.bias.data = W.copy(), b.copy()
    return layer


class TpResidual(nn.Module):
    """x + tanh(Linear(x)): a hidden layer that a deep network can still train (step 54's lesson)."""

    def __init__(self, W, b):
        super().__init__()
        self.body = nn.Sequential(tp_linear(W, b), nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


def tp_model(ws, reversible=False):
    layers = [tp_linear(*ws[0]), nn.Tanh()]
    hidden = ws[1:-1]
    if reversible:
        pairs = [(nn.Sequential(tp_linear(*f), nn.Tanh()), nn.Sequential(tp_linear(*g), nn.Tanh()))
                 for f, g in zip(hidden[0::2], hidden[1::2])]
        layers.append(ReversibleSequential(*[AdditiveCoupling(f, g) for f, g in pairs]))
    else:
        layers += [TpResidual(*w) for w in hidden]
    return nn.Sequential(*layers, tp_linear(*ws[-1]))


def tp_chunks(model, context_fn=None):
    """The model as about √N checkpointed chunks (all but the last), each chunk's saves decided by `context_fn`."""
    modules = list(model)
    size = len(modules) // segments_of(len(modules))
    cuts = list(range(0, len(modules) - size, size)) if size < len(modules) else []

    def forward(x):
        for start in cuts:
            chunk = nn.Sequential(*modules[start:start + size])
            kwargs = {"context_fn": context_fn} if context_fn else {}
            x = checkpoint(chunk, x, use_reentrant=False, **kwargs)
        return nn.Sequential(*modules[cuts[-1] + size if cuts else 0:])(x)
    return forward


def tp_trainer(technique, model):
    """step(x, y): one training step of `model` with `technique` (Adam)."""
    params = list(model.parameters())
    in_backward = "optimizer in backward" in technique
    if in_backward:  # step 53: each parameter stepped, and its gradient let go, once accumulated
        opts = {p: optim.Adam([p], lr=LR) for p in params}

        def hook(p):
            opts[p].step()
            opts[p].zero_grad()
        for p in params:
            p.register_post_accumulate_grad_hook(hook)
    opt = optim.Adam(params, lr=LR)
    forward = model
    if "checkpointing" in technique:
        keep = functools.partial(create_selective_checkpoint_contexts, [F.LinearFunction])
        forward = tp_chunks(model, keep if technique.startswith("selective") else None)
    scaler = GradScaler("cpu", init_scale=2.0**10, enabled=technique == "mixed precision")

    def step(x, y):
        with tp.autocast("cpu", dtype=tp.float16, enabled=technique == "mixed precision"):
            if technique == "save_on_cpu":
                with save_on_cpu():
                    loss = tp.cross_entropy(forward(tp.Variable(x)), y)
            else:
                loss = tp.cross_entropy(forward(tp.Variable(x)), y)
        if in_backward:
            loss.backward()
            return
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step


def tp_build(technique, depth, seed=0):
    model = tp_model(weights(depth, seed=seed, reversible=technique == "reversible blocks"),
                     reversible=technique == "reversible blocks")
    return model, tp_trainer(technique, model)


def tp_accuracy(model, x, y):
    with tp.no_grad():
        return float(np.mean(model(tp.Variable(x)).data.argmax(1) == y))


def tp_build_weights(technique, ws):
    model = tp_model(ws, reversible=technique == "reversible blocks")
    return model, tp_trainer(technique, model)


def tp_peak(technique, depth, x, y):
    """The most memory held at once while the model is built and takes two training steps: the weights, Adam's
    state, the activations, the gradients (the second step is the one with Adam's state there)."""
    ws = weights(depth, reversible=technique == "reversible blocks")

    def work():
        _, step = tp_build_weights(technique, ws)
        step(x, y)
        step(x, y)
    return peak_memory(work)[0]


# ----- PyTorch -------------------------------------------------------------------------------------

def torch_linear(W, b):
    layer = torch.nn.Linear(W.shape[1], W.shape[0])
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(W))
        layer.bias.copy_(torch.from_numpy(b))
    return layer.to(torch.from_numpy(W).dtype)


class TorchResidual(torch.nn.Module):
    def __init__(self, W, b):
        super().__init__()
        self.body = torch.nn.Sequential(torch_linear(W, b), torch.nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


def torch_model(ws):
    layers = [torch_linear(*ws[0]), torch.nn.Tanh(), *(TorchResidual(*w) for w in ws[1:-1])]
    return torch.nn.Sequential(*layers, torch_linear(*ws[-1]))


def torch_chunks(model, context_fn=None):
    modules = list(model)
    size = len(modules) // segments_of(len(modules))
    cuts = list(range(0, len(modules) - size, size)) if size < len(modules) else []

    def forward(x):
        for start in cuts:
            chunk = torch.nn.Sequential(*modules[start:start + size])
            kwargs = {"context_fn": context_fn} if context_fn else {}
            x = torch.utils.checkpoint.checkpoint(chunk, x, use_reentrant=False, **kwargs)
        return torch.nn.Sequential(*modules[cuts[-1] + size if cuts else 0:])(x)
    return forward


def torch_trainer(technique, model):
    params = list(model.parameters())
    in_backward = "optimizer in backward" in technique
    if in_backward:
        opts = {p: torch.optim.Adam([p], lr=LR) for p in params}

        def hook(p):
            opts[p].step()
            opts[p].zero_grad(set_to_none=True)
        for p in params:
            p.register_post_accumulate_grad_hook(hook)
    opt = torch.optim.Adam(params, lr=LR)
    forward = model
    if "checkpointing" in technique:
        from torch.utils.checkpoint import create_selective_checkpoint_contexts as sac
        keep = functools.partial(sac, [torch.ops.aten.addmm.default, torch.ops.aten.mm.default])
        forward = torch_chunks(model, keep if technique.startswith("selective") else None)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=technique == "mixed precision")

    def step(x, y):
        with torch.autocast("cpu", dtype=torch.float16, enabled=technique == "mixed precision"):
            if technique == "save_on_cpu":
                with torch.autograd.graph.save_on_cpu():
                    loss = torch.nn.functional.cross_entropy(forward(torch.from_numpy(x)), torch.from_numpy(y))
            else:
                loss = torch.nn.functional.cross_entropy(forward(torch.from_numpy(x)), torch.from_numpy(y))
        if in_backward:
            loss.backward()
            return
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step


def torch_build(technique, depth, seed=0):
    return torch_trainer_built(technique, weights(depth, seed=seed))


def torch_trainer_built(technique, ws):
    model = torch_model(ws)
    return model, torch_trainer(technique, model)


def torch_accuracy(model, x, y):
    with torch.no_grad():
        return float(np.mean(model(torch.from_numpy(x)).argmax(1).numpy() == y))


def torch_peak(technique, depth, x, y):
    """The most bytes PyTorch's CPU allocator held at once while the model is built and takes two training steps,
    from its profiler's memory events."""
    ws = weights(depth)
    gc.collect()
    with collector_off(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _, step = torch_trainer_built(technique, ws)
        step(x, y)
        step(x, y)
        del step
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    allocations = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                         key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    return max(itertools.accumulate(e["args"]["Bytes"] for e in allocations))


# ----- training, timing, the search ----------------------------------------------------------------

FRAMEWORKS = {"tinypytorch": (tp_build, tp_accuracy, tp_peak), "torch": (torch_build, torch_accuracy, torch_peak)}


def train(framework, technique, depth, epochs, seed=0):
    """(test accuracy after `epochs`, the seconds of each epoch): batches of BATCH in a seeded order."""
    build, accuracy, _ = FRAMEWORKS[framework]
    xtr, ytr, xte, yte = digits()
    model, step = build(technique, depth, seed)
    rng, seconds = np.random.default_rng(seed), []
    for _ in range(epochs):
        np.seterr(over="ignore", invalid="ignore")  # float16 overflows while GradScaler finds its scale, as in torch
        order, start = rng.permutation(len(xtr)), time.perf_counter()
        for i in range(0, len(xtr), BATCH):
            step(xtr[order[i:i + BATCH]], ytr[order[i:i + BATCH]])
        seconds.append(time.perf_counter() - start)
    return accuracy(model, xte, yte), seconds


def deepest(peak_at, budget, cap):
    """The largest depth <= cap whose peak_at(depth) fits `budget`: doubling, then bisection (peaks grow with depth)."""
    if peak_at(1) > budget:
        return 0
    low, high = 1, 2
    while high <= cap and peak_at(high) <= budget:
        low, high = high, high * 2
    if high > cap:
        high = cap + 1
        if peak_at(cap) <= budget:
            return cap
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if peak_at(mid) <= budget else (low, mid)
    return low


def margin(peak_at, budget, depth, cap):
    """How far the verdict `depth` stands from changing: the nearer of its own peak below the budget and the next
    depth's above it. tinypytorch's count of Python objects varies by a few KiB, so a small margin is a soft one."""
    gaps = ([budget - peak_at(depth)] if depth >= 1 else []) + ([peak_at(depth + 1) - budget] if depth < cap else [])
    return min(gaps)


def measure(settings):
    xtr, ytr, _, _ = digits()
    x, y = xtr[:BATCH], ytr[:BATCH]
    rows, curves = {}, {}
    for framework, (_, _, peak_fn) in FRAMEWORKS.items():
        memo = {}

        def peak_at(technique, depth):
            if (technique, depth) not in memo:
                memo[technique, depth] = peak_fn(technique, depth, x, y)
            return memo[technique, depth]
        budget = BUDGET
        for technique in TECHNIQUES:
            if framework == "torch" and technique not in TORCH_HAS:
                continue
            accuracy, seconds = train(framework, technique, BUDGET_DEPTH, settings["epochs"])
            depth = deepest(functools.partial(peak_at, technique), budget, settings["cap"])
            rows[framework, technique] = {
                "peak": peak_at(technique, BUDGET_DEPTH), "epoch": statistics.median(seconds), "accuracy": accuracy,
                "deepest": depth, "capped": depth == settings["cap"],
                "margin": margin(functools.partial(peak_at, technique), budget, depth, settings["cap"])}
            curves[framework, technique] = [(d, peak_at(technique, d)) for d in settings["depths"]]
            print(framework, technique, rows[framework, technique], flush=True)
        rows[framework, "budget"] = budget
    return rows, curves


def verdict(row):
    return f"{row['deepest']} (the cap)" if row["capped"] else f"{row['deepest']} ({row['margin'] / 1024:.0f} KiB)"


def report(rows, curves, settings, out):
    from writing import LABELS, header, machine_lines, pyplot, save
    kib = 1024
    lines = ["# Capstone: training under a memory budget (step 66)", "",
             f"The digit classifier: Linear(64, {WIDTH}), tanh, `depth` residual layers "
             f"x + tanh(Linear({WIDTH}, {WIDTH})(x)), Linear({WIDTH}, 10); float32, batch {BATCH}, Adam (lr {LR}); "
             "a reversible block is two "
             f"Linear({WIDTH // 2}, {WIDTH // 2}) + tanh (f and g of an additive coupling). Peak: the most memory "
             "held at once while the model and its optimizer are built and take two training steps (forward, "
             "backward, Adam step): the weights, Adam's moments, the activations and the gradients; tinypytorch "
             "with tracemalloc (arrays and the graph's Python objects), PyTorch from its "
             "profiler's CPU allocation events (its allocator's bytes; its C++ graph nodes are not counted). "
             f"Time: the median epoch of {settings['epochs']}; accuracy on the 360 test digits after them "
             f"(seeded). Budget: {BUDGET / 1e6:.2f} MB in both frameworks, about what plain training of depth "
             f"{BUDGET_DEPTH} needs; deepest: the deepest network (up to {settings['cap']}) whose step fits it. On a CPU save_on_cpu moves nothing "
             "(the saved tensors are already in host memory): its row is plain's, as it is in PyTorch.", "",
             *machine_lines(memory=True), "",
             *header("technique", "tinypytorch peak (KiB)", "PyTorch peak (KiB)", "tinypytorch time / epoch",
                    "PyTorch time / epoch", "tinypytorch accuracy", "PyTorch accuracy",
                    f"deepest within {BUDGET / 1e6:.2f} MB, tinypytorch (margin)",
                    f"deepest within {BUDGET / 1e6:.2f} MB, PyTorch (margin)")]
    for t in TECHNIQUES:
        a, b = rows["tinypytorch", t], rows.get(("torch", t))
        lines.append(f"| {t} | {a['peak'] / kib:.0f} | {b['peak'] / kib:.0f} | {a['epoch'] * 1e3:.0f} ms | "
                     f"{b['epoch'] * 1e3:.0f} ms | {a['accuracy']:.3f} | {b['accuracy']:.3f} | {verdict(a)} | "
                     f"{verdict(b)} |" if b else
                     f"| {t} | {a['peak'] / kib:.0f} | — | {a['epoch'] * 1e3:.0f} ms | — | "
                     f"{a['accuracy']:.3f} | — | "
                     f"{verdict(a)} | — |")
    lines += ["", f"Peaks at depth {BUDGET_DEPTH}; time and accuracy at depth {BUDGET_DEPTH}. "
              "Times are of this machine, under whatever else ran on it (see the load average): single epochs of "
              "tinypytorch vary by several times under load, so re-run on a quiet machine before reading ratios "
              "between techniques; peaks, accuracies and depths do not depend on the load. The margin: how far "
              "the deepest depth's peak lies below the budget, or the next depth's above it, whichever is nearer; "
              "tinypytorch's count of the Python objects beside its arrays varies by a few KiB between runs, so a "
              "verdict with a margin under 10 KiB could move by one layer in another run.", ""]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=False)
    for ax, framework in zip(axes, FRAMEWORKS):
        for i, t in enumerate(TECHNIQUES):  # one colour a technique in both panels
            if (framework, t) in curves:
                ds, ps = zip(*curves[framework, t])
                ax.plot(ds, np.array(ps) / kib, marker="o", ms=3, label=t, color=f"C{i}")
        ax.axhline(rows[framework, "budget"] / kib, color="k", ls="--", lw=1, label="budget")
        ax.set(xscale="log", yscale="log", xlabel="depth", ylabel="peak (KiB)", title=LABELS[framework])
        ax.set_xticks(settings["depths"], [str(d) for d in settings["depths"]])
    axes[0].legend(fontsize=7)
    save(fig, out / "capstone.png", 100)
    lines.append("![peak memory against depth](capstone.png)")
    (out / "capstone.md").write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings, to check the script runs")
    parser.add_argument("--load", help="a measurement saved by an earlier run (its JSON): only write the report")
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = ({"epochs": 1, "cap": 32, "depths": [1, 4, 16]} if args.quick else
                {"epochs": 3, "cap": 128, "depths": [1, 2, 4, 8, 16, 32, 64, 128]})
    saved = pathlib.Path(args.load or "/tmp/capstone-measured.json")
    if args.load:  # the table and plot again from a measurement saved before
        rows, curves = (eval(text) for text in json.loads(saved.read_text()))  # noqa: S307 (our own file)
    else:
        rows, curves = measure(settings)
        saved.write_text(json.dumps([repr(rows), repr(curves)]))
    out = ROOT / "results" if not args.quick else pathlib.Path("/tmp/capstone-quick")
    out.mkdir(exist_ok=True, parents=True)
    report(rows, curves, settings, out)
    print("wrote", out / "capstone.md")


if __name__ == "__main__":
    main()
