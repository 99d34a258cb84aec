"""Per-sample gradients two ways, in tinypytorch and in PyTorch, side by side: a loop of one backward pass per sample
against vmap(grad(loss)) over the batch (step 70), into bench/results/per_sample.md.

    python bench/bench_autograd.py              # the full run writes it with autograd.md (`make bench`)
    python bench/speed_per_sample.py            # this measurement alone, into bench/results/per_sample.md
    python bench/speed_per_sample.py --quick    # a smoke test, seconds: written to bench/_out/

The model is an MLP (64 -> 128 -> 10, ReLU) with cross-entropy, float64, the same weights in both frameworks. The
loop runs each sample through the model and backward, and copies its .grads out; vmap(grad) runs a loss written
for one sample with functional_call, batched over the samples (torch.func's vmap and grad in PyTorch). Before
timing, the four results are checked to agree. Frameworks and ways take turns (timing.in_turns); medians of the
repeats.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.func  # noqa: E402

import tinypytorch  # noqa: E402
from tinypytorch import func  # noqa: E402
from timing import in_turns  # noqa: E402
from writing import command_line, format_time, header, machine_lines, output_folder, save, pyplot, write_results, written_by  # noqa: E402

torch.set_num_threads(1)

SETTINGS = {"full": {"batches": (8, 32, 128, 512), "repeats": 7},
            "quick": {"batches": (8, 32), "repeats": 2}}
SIZES = (64, 128, 10)  # inputs, hidden units, classes
WAYS = ("loop", "vmap")


def models():
    """The MLP in both frameworks, float64, torch's weights copied into tinypytorch's."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.ReLU(),
                                 torch.nn.Linear(SIZES[1], SIZES[2])).double()
    ours = tinypytorch.nn.Sequential(tinypytorch.nn.Linear(SIZES[0], SIZES[1], dtype=tinypytorch.float64),
                                     tinypytorch.nn.ReLU(),
                                     tinypytorch.nn.Linear(SIZES[1], SIZES[2], dtype=tinypytorch.float64))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def data(batch, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, SIZES[0])), rng.integers(0, SIZES[2], batch)


def per_sample_call(fw, way, model, x, y):
    """A function returning {name: per-sample gradients (batch in front)}, computed `way` in framework fw."""
    F = fw.nn.functional
    transforms = func if fw is tinypytorch else torch.func
    xs, ys = (tinypytorch.tensor(x), tinypytorch.tensor(y)) if fw is tinypytorch else (torch.tensor(x),
                                                                                     torch.tensor(y))
    if way == "loop":
        def loop():
            grads = {k: [] for k, _ in model.named_parameters()}
            for i in range(len(x)):
                model.zero_grad()
                F.cross_entropy(model(xs[i:i + 1]), ys[i:i + 1]).backward()
                for k, p in model.named_parameters():
                    grads[k].append(p.grad.clone() if fw is torch else p.grad.data.copy())
            return {k: fw.stack(g) if fw is torch else np.stack(g) for k, g in grads.items()}
        return loop
    params = {k: p.detach() for k, p in model.named_parameters()}

    def loss(p, x1, y1):
        return F.cross_entropy(transforms.functional_call(model, p, (x1.unsqueeze(0),)), y1.unsqueeze(0))
    batched = transforms.vmap(transforms.grad(loss), in_dims=(None, 0, 0))
    return lambda: batched(params, xs, ys)


def as_array(g):
    return g.detach().numpy() if isinstance(g, torch.Tensor) else np.asarray(getattr(g, "data", g))


def check(batch):
    """The four ways give the same per-sample gradients (float64)."""
    ours, theirs = models()
    x, y = data(batch)
    results = [per_sample_call(fw, way, m, x, y)() for fw, m in ((tinypytorch, ours), (torch, theirs)) for way in WAYS]
    for other in results[1:]:
        for k in results[0]:
            np.testing.assert_allclose(as_array(other[k]), as_array(results[0][k]), rtol=1e-9, atol=1e-12)


def measure(quick=False):
    """{(framework, way, batch): (median, best) seconds per batch's per-sample gradients}."""
    s = SETTINGS["quick" if quick else "full"]
    ours, theirs = models()
    prepares = {}
    for batch in s["batches"]:
        check(batch)
        x, y = data(batch)
        for fw, model in ((tinypytorch, ours), (torch, theirs)):
            for way in WAYS:
                prepares[fw.__name__, way, batch] = (lambda fw=fw, way=way, model=model, x=x, y=y:
                                                     per_sample_call(fw, way, model, x, y))
    return in_turns(prepares, number=1, repeats=s["repeats"])


def report(times, batches, mode):
    """The results file's text: each batch's times and the ratio loop / vmap in each framework."""
    med = {key: t[0] for key, t in times.items()}
    lines = ["# Per-sample gradients: a loop of backward passes against vmap(grad), tinypytorch and torch.func", "",
             f"{written_by('speed_per_sample.py', mode)} (also by `bench_autograd.py`). Per-sample gradients of "
             f"the cross-entropy of an MLP {' -> '.join(map(str, SIZES))} (ReLU), float64, the same weights in both "
             "frameworks; the four ways were checked to agree before timing. loop: one forward and backward pass "
             "per sample, .grads copied out; vmap: vmap(grad(loss), in_dims=(None, 0, 0)) of a loss written for "
             "one sample with functional_call. Medians of repeats, taking turns. loop / vmap above 1: vmap was "
             "faster.", ""]
    lines += machine_lines()
    lines += [""] + header("batch", "tinypytorch loop", "tinypytorch vmap", "tinypytorch loop / vmap",
                           "torch loop", "torch.func vmap", "torch loop / vmap", "vmap: tinypytorch / torch.func")
    for batch in batches:
        cells = []
        for fw in ("tinypytorch", "torch"):
            loop, vmap = med[fw, "loop", batch], med[fw, "vmap", batch]
            cells += [format_time(loop), format_time(vmap), f"{loop / vmap:.1f}"]
        cells.append(f"{med['tinypytorch', 'vmap', batch] / med['torch', 'vmap', batch]:.1f}")
        lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    lines += ["", "The loop's time grows with the batch, a fixed cost per sample (Python, one small pass through "
              "every operation); vmap runs each operation once on the whole batch, so its time grows with the "
              "arithmetic, which is small here. The per-sample gradients themselves take batch × (number of "
              "parameters) numbers either way.", ""]
    return "\n".join(lines)


def plot(times, batches, path):
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6, 4))
    for fw, style, label in (("tinypytorch", "-o", "tinypytorch"), ("torch", "--s", "torch / torch.func")):
        ax.plot(batches, [times[fw, "loop", b][0] / times[fw, "vmap", b][0] for b in batches], style, label=label)
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xscale("log", base=2), ax.set_yscale("log")
    ax.set_xlabel("batch (samples)"), ax.set_ylabel("time loop / time vmap(grad)")
    ax.set_title("Per-sample gradients: above 1, vmap(grad) is faster")
    ax.legend()
    save(figure, path, 120)


def run(quick, out=None):
    """Measure, and write per_sample.md and .png into `out` (bench/results, or bench/_out when quick)."""
    batches = SETTINGS["quick" if quick else "full"]["batches"]
    times = measure(quick)
    write_results(output_folder(out, quick), "per_sample", report(times, batches, "quick" if quick else "full"),
                  lambda path: plot(times, batches, path))


if __name__ == "__main__":
    command_line(__doc__, run, "per_sample.md and .png")
