"""A Jacobian by columns (jacfwd: one forward-mode pass per input) against rows (jacrev: one backward pass
per output), in tinypytorch and in torch.func, side by side: bench/results/jacobians.{md,png} (step 65).

    python bench/bench_autograd.py             # the full run writes it with autograd.md (`make bench`)
    python bench/speed_jacobians.py            # this measurement alone, into bench/results/jacobians.{md,png}
    python bench/speed_jacobians.py --quick    # a smoke test, seconds: written to bench/_out/

The map is x -> tanh(W x), W m x n, float64, with n m = 1024 fixed, from n = 4 (m = 256) to n = 256 (m = 4).
tinypytorch's jacfwd and jacrev are loops of n and m passes; torch.func's run one batched pass through
vmap, so the ratio jacfwd / jacrev is what to compare, not the times. Frameworks and modes take turns
(timing.in_turns); medians of the repeats.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.func  # noqa: E402

import tinypytorch  # noqa: E402
from timing import in_turns  # noqa: E402
from writing import command_line, format_time, header, machine_lines, output_folder, pyplot, save, write_results, written_by  # noqa: E402

torch.set_num_threads(1)

SETTINGS = {"full": {"sizes": (4, 8, 16, 32, 64, 128, 256), "repeats": 7},
            "quick": {"sizes": (4, 32, 256), "repeats": 2}}
PRODUCT = 1024  # n m


def problem(n, m, seed=0):
    """(W, x) for the map x -> tanh(W x): W is m x n."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, n)) / np.sqrt(n), rng.standard_normal(n)


def jacobian_call(fw, mode, W, x):
    """A function computing the Jacobian of x -> tanh(W x) with fw's jacfwd or jacrev."""
    transform = getattr(fw.func, mode)
    if fw is torch:
        tW, tx = torch.from_numpy(W), torch.from_numpy(x)
        return lambda: transform(lambda a: torch.tanh(tW @ a))(tx)
    Wt = tinypytorch.Variable(W.T.copy(), requires_grad=False)
    vx = tinypytorch.Variable(x.copy(), requires_grad=False)
    return lambda: transform(lambda a: tinypytorch.tanh(tinypytorch.matmul(a.reshape(1, -1), Wt)).reshape(-1))(vx)


def measure(quick=False):
    """{(framework, mode, n): (median, best) seconds per Jacobian}."""
    s = SETTINGS["quick" if quick else "full"]
    prepares = {}
    for n in s["sizes"]:
        W, x = problem(n, PRODUCT // n)
        for fw in (tinypytorch, torch):
            for mode in ("jacfwd", "jacrev"):
                prepares[fw.__name__, mode, n] = lambda fw=fw, mode=mode, W=W, x=x: jacobian_call(fw, mode, W, x)
    return in_turns(prepares, number=1, repeats=s["repeats"])


def report(times, sizes, mode):
    """The results file's text: each size's times and the ratio jacfwd / jacrev in each framework."""
    med = {key: t[0] for key, t in times.items()}
    lines = ["# A Jacobian by columns (jacfwd) or by rows (jacrev): tinypytorch and torch.func", "",
             f"{written_by('speed_jacobians.py', mode)} (also by `bench_autograd.py`). The Jacobian of "
             f"x -> tanh(W x), W m × n, float64, n m = {PRODUCT}; medians of repeats, taking turns. jacfwd / jacrev "
             "above 1: rows (reverse mode) were cheaper. tinypytorch loops over n forward-mode passes or m backward "
             "passes; torch.func batches them with vmap.", ""]
    lines += machine_lines()
    lines += [""] + header("n", "m", "tinypytorch jacfwd", "tinypytorch jacrev", "tinypytorch jacfwd / jacrev",
                           "torch.func jacfwd", "torch.func jacrev", "torch.func jacfwd / jacrev")
    for n in sizes:
        cells = []
        for fw in ("tinypytorch", "torch"):
            f, r = med[fw, "jacfwd", n], med[fw, "jacrev", n]
            cells += [format_time(f), format_time(r), f"{f / r:.2f}"]
        lines.append(f"| {n} | {PRODUCT // n} | " + " | ".join(cells) + " |")
    lines += ["", "Passes: jacfwd makes n, jacrev one forward and m. Where n < m columns are fewer and forward mode "
              "should win; where n > m, rows. The crossover sits near n = m if a forward-mode pass and a backward "
              "pass cost alike; each pass's fixed overhead (Python, per operation) dominates at these sizes. "
              "torch.func's ratio stays near 1: vmap makes one batched pass either way.", ""]
    return "\n".join(lines)


def plot(times, sizes, path):
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(6, 4))
    for fw, style in (("tinypytorch", "-o"), ("torch", "--s")):
        ax.plot(sizes, [times[fw, "jacfwd", n][0] / times[fw, "jacrev", n][0] for n in sizes], style,
                label=fw if fw == "tinypytorch" else "torch.func")
    ax.axhline(1, color="grey", lw=0.8)
    ax.set_xscale("log", base=2), ax.set_yscale("log")
    ax.set_xlabel(f"n inputs (m = {PRODUCT} / n outputs)"), ax.set_ylabel("time jacfwd / time jacrev")
    ax.set_title("Columns or rows: above 1, jacrev is cheaper")
    ax.legend()
    save(figure, path, 120)


def run(quick, out=None):
    """Measure, and write jacobians.md and .png into `out` (bench/results, or bench/_out when quick)."""
    sizes = SETTINGS["quick" if quick else "full"]["sizes"]
    times = measure(quick)
    write_results(output_folder(out, quick), "jacobians", report(times, sizes, "quick" if quick else "full"),
                  lambda path: plot(times, sizes, path))


if __name__ == "__main__":
    command_line(__doc__, run, "jacobians.md and .png")
