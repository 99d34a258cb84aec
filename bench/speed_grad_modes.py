"""What each gradient mode costs: a small MLP's forward pass with the graph recorded, under no_grad and under
inference_mode, in tinypytorch and in PyTorch, beside hand-written NumPy: bench/results/grad_modes.md.

    python bench/bench_autograd.py            # the full run writes it with autograd.md (`make bench`)
    python bench/speed_grad_modes.py          # this measurement alone, into bench/results/grad_modes.md
    python bench/speed_grad_modes.py --quick  # a smoke test, seconds: written to bench/_out/

The network is small on purpose (a batch of 16, 32 -> 64 -> 64 -> 10, ReLU, float32): the arithmetic is a
few microseconds, so what a mode adds or saves per operation (a node recorded, a version counter made) is
what the times show. Each call enters its mode (`with no_grad(): model(x)`), as a user's code does; "grad
enabled" is the plain call with parameters that require grad, so the graph is built and then freed. The
ratios are to the same framework's no_grad; the frameworks take turns (timing.in_turns).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tinypytorch  # noqa: E402
from timing import in_turns  # noqa: E402
from writing import command_line, format_time, machine_lines, output_folder, write_results, written_by  # noqa: E402

torch.set_num_threads(1)

SIZES, BATCH = (32, 64, 64, 10), 16
MODES = ("grad enabled", "no_grad", "inference_mode")
SETTINGS = {"full": {"number": 2000, "repeats": 21}, "quick": {"number": 20, "repeats": 2}}


def mlp_weights(seed=0, sizes=SIZES, batch=BATCH):
    """(a batch, the (W, b) of every layer), float32, PyTorch's default init."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    layers = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        k = 1.0 / np.sqrt(n_in)
        layers.append((rng.uniform(-k, k, (n_out, n_in)).astype(np.float32),
                       rng.uniform(-k, k, n_out).astype(np.float32)))
    return x, layers


def _sequential(fw, layers):
    """fw.nn.Sequential of Linear and ReLU holding these weights (tinypytorch's and torch's are spelt alike)."""
    modules = []
    for W, b in layers:
        linear = fw.nn.Linear(W.shape[1], W.shape[0])
        with fw.no_grad():
            linear.weight.copy_(fw.from_numpy(W.copy()))
            linear.bias.copy_(fw.from_numpy(b.copy()))
        modules += [linear, fw.nn.ReLU()]
    return fw.nn.Sequential(*modules[:-1])


def forward(fw, x, layers, mode):
    """A function that runs the model's forward pass on x under `mode` and returns the output."""
    model, tx = _sequential(fw, layers), fw.from_numpy(x)
    if mode == "grad enabled":
        return lambda: model(tx)
    context = {"no_grad": fw.no_grad, "inference_mode": fw.inference_mode}[mode]

    def run():
        with context():
            return model(tx)
    return run


def forward_numpy(x, layers):
    """The same forward pass by hand: no mode, no graph, no tensor type."""
    def run():
        h = x
        for i, (W, b) in enumerate(layers):
            h = h @ W.T + b
            if i < len(layers) - 1:
                h = np.maximum(h, 0)
        return h
    return run


def measure(quick=False):
    """{(framework, mode): (median, best) seconds per forward}; NumPy's under the mode "by hand"."""
    s = SETTINGS["quick" if quick else "full"]
    x, layers = mlp_weights()
    prepares = {(fw.__name__, mode): (lambda fw=fw, mode=mode: forward(fw, x, layers, mode))
                for fw in (tinypytorch, torch) for mode in MODES}
    prepares["numpy", "by hand"] = lambda: forward_numpy(x, layers)
    return in_turns(prepares, number=s["number"], repeats=s["repeats"])


def report(times, mode):
    """The results file's text: each mode's time and its ratio to no_grad, both frameworks side by side."""
    median = {key: t[0] for key, t in times.items()}
    best = {key: t[1] for key, t in times.items()}
    lines = ["# What each gradient mode costs: an MLP's forward pass, tinypytorch and PyTorch eager", "",
             f"{written_by('speed_grad_modes.py', mode)} (also by `bench_autograd.py`). A forward pass of "
             f"{' → '.join(map(str, SIZES))}, ReLU, batch {BATCH}, float32, entering its mode at each call; "
             "medians of repeats, the frameworks taking turns. The ratio is to the same framework's no_grad "
             "(below 1: cheaper than no_grad), of the medians and, in brackets, of the best repeats: on a shared "
             "machine the two say how far a ratio can be trusted.", ""]
    lines += machine_lines()
    lines += ["", "| mode | tinypytorch | tinypytorch / its no_grad | PyTorch | PyTorch / its no_grad |",
              "|---|---|---|---|---|"]
    rows = [(m, ("tinypytorch", m), ("torch", m)) for m in MODES]
    rows.append(("NumPy by hand (no mode, no tensors)", ("numpy", "by hand"), ("numpy", "by hand")))
    for label, ours, theirs in rows:
        cells = [f"{format_time(median[key])} | {median[key] / median[fw, 'no_grad']:.2f} "
                 f"({best[key] / best[fw, 'no_grad']:.2f})" for key, fw in ((ours, "tinypytorch"), (theirs, "torch"))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Grad enabled pays for the graph: a node per operation, kept until the output is freed. no_grad "
              "records nothing; inference_mode records nothing either, and its new tensors also go without a "
              "version counter and a view record (step 58). NumPy by hand is the floor: the same arithmetic "
              "with no tensor type at all. Where the ratio of medians and the ratio of best repeats disagree, the "
              "machine's load (above) moved the times more than the mode did: run it again on a quiet machine.", ""]
    return "\n".join(lines)


def run(quick, out=None):
    """Measure, and write grad_modes.md into `out` (bench/results, or bench/_out when quick)."""
    write_results(output_folder(out, quick), "grad_modes", report(measure(quick), "quick" if quick else "full"))


if __name__ == "__main__":
    command_line(__doc__, run, "grad_modes.md")
