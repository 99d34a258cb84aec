"""A Jacobian by columns (jacfwd: forward mode) against rows (jacrev: reverse mode), three ways side by side:
loops of single passes (step 65's), tinypytorch.func's batched transforms (vmap, step 69) and torch.func's
(also vmap): bench/results/jacobians.{md,png}.

    python bench/bench_autograd.py             # the full run writes it with autograd.md (`make bench`)
    python bench/speed_jacobians.py            # this measurement alone, into bench/results/jacobians.{md,png}
    python bench/speed_jacobians.py --quick    # a smoke test, seconds: written to bench/_out/

The map is x -> tanh(W x), W m x n, float64, with n m = 1024 fixed, from n = 4 (m = 256) to n = 256 (m = 4).
The loops (written here as on step 65's page, on tinypytorch.func's jvp and vjp) make n forward-mode passes or
one recorded forward and m backward passes; tinypytorch.func.jacfwd/jacrev and torch.func's run one batched
pass through vmap. All in one run, taking turns (timing.in_turns); medians of the repeats.
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

SETTINGS = {"full": {"sizes": (4, 8, 16, 32, 64, 128, 256), "repeats": 21},
            "quick": {"sizes": (4, 32, 256), "repeats": 2}}
PRODUCT = 1024  # n m
WAYS = ("loops", "tinypytorch", "torch")  # loops of single passes, tinypytorch.func (vmap), torch.func (vmap)
NAMES = {"loops": "loops", "tinypytorch": "tinypytorch.func", "torch": "torch.func"}


def problem(n, m, seed=0):
    """(W, x) for the map x -> tanh(W x): W is m x n."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, n)) / np.sqrt(n), rng.standard_normal(n)


def _unit(shape, k):
    e = np.zeros(int(np.prod(shape)))
    e[k] = 1.0
    return tinypytorch.Variable(e.reshape(shape), requires_grad=False)


def jacfwd_by_columns(f):
    """f's Jacobian by columns: one forward-mode pass (tinypytorch.func.jvp) per input element (step 65's loop)."""
    def jacobian(x):
        columns = []
        for k in range(x.numel()):
            y, column = tinypytorch.func.jvp(f, (x,), (_unit(x.shape, k),))
            columns.append(column.reshape(-1))
        return tinypytorch.stack(columns, dim=1).reshape(y.shape + x.shape)
    return jacobian


def jacrev_by_rows(f):
    """f's Jacobian by rows: one recorded forward pass, one backward pass (vjp) per output element (step 65's)."""
    def jacobian(x):
        y, pull = tinypytorch.func.vjp(f, x)
        rows = [pull(_unit(y.shape, i))[0] for i in range(y.numel())]
        return tinypytorch.stack(rows).reshape(y.shape + x.shape)
    return jacobian


LOOPS = {"jacfwd": jacfwd_by_columns, "jacrev": jacrev_by_rows}


def jacobian_call(way, mode, W, x):
    """A function computing the Jacobian of x -> tanh(W x) in one of WAYS, by jacfwd or jacrev."""
    if way == "torch":
        tW, tx = torch.from_numpy(W), torch.from_numpy(x)
        transform = getattr(torch.func, mode)
        return lambda: transform(lambda a: torch.tanh(tW @ a))(tx)
    transform = LOOPS[mode] if way == "loops" else getattr(tinypytorch.func, mode)
    Wt = tinypytorch.Variable(W.T.copy(), requires_grad=False)
    vx = tinypytorch.Variable(x.copy(), requires_grad=False)
    return lambda: transform(lambda a: tinypytorch.tanh(tinypytorch.matmul(a.reshape(1, -1), Wt)).reshape(-1))(vx)


def measure(quick=False):
    """{(way, mode, n): (median, best) seconds per Jacobian}."""
    s = SETTINGS["quick" if quick else "full"]
    prepares = {}
    for n in s["sizes"]:
        W, x = problem(n, PRODUCT // n)
        for way in WAYS:
            for mode in ("jacfwd", "jacrev"):
                prepares[way, mode, n] = lambda way=way, mode=mode, W=W, x=x: jacobian_call(way, mode, W, x)
    for prepare in prepares.values():  # one untimed call each: torch.func's first call sets itself up
        prepare()()
    return in_turns(prepares, number=1, repeats=s["repeats"])


def report(times, sizes, mode):
    """The results file's text: the times of each way, then the ratios that compare them."""
    med = {key: t[0] for key, t in times.items()}
    lines = ["# A Jacobian by columns (jacfwd) or by rows (jacrev): loops, tinypytorch.func and torch.func", "",
             f"{written_by('speed_jacobians.py', mode)} (also by `bench_autograd.py`). The Jacobian of "
             f"x -> tanh(W x), W m × n, float64, n m = {PRODUCT}; medians of repeats, all in one run, taking turns. "
             "Three ways: **loops** of single passes (step 65's `jacfwd_by_columns`, n forward-mode passes, and "
             "`jacrev_by_rows`, one recorded forward and m backward passes, on `tinypytorch.func.jvp`/`vjp`); "
             "**tinypytorch.func**'s `jacfwd`/`jacrev`, which batch those passes into one with vmap (step 69); "
             "**torch.func**'s, which do the same in PyTorch.", ""]
    lines += machine_lines()
    lines += ["", "Times per Jacobian:", ""]
    lines += header("n", "m", *(f"{NAMES[w]} {fn}" for w in WAYS for fn in ("jacfwd", "jacrev")))
    for n in sizes:
        cells = [format_time(med[w, fn, n]) for w in WAYS for fn in ("jacfwd", "jacrev")]
        lines.append(f"| {n} | {PRODUCT // n} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios of those times: jacfwd / jacrev in each way (above 1: rows were cheaper), then "
              "tinypytorch.func against torch.func and against the loops (below 1: faster than the loops).", ""]
    lines += header("n", "m", *(f"{NAMES[w]} jacfwd / jacrev" for w in WAYS),
                    "tinypytorch.func / torch.func, jacfwd", "tinypytorch.func / torch.func, jacrev",
                    "tinypytorch.func / loops, jacfwd", "tinypytorch.func / loops, jacrev")
    for n in sizes:
        cells = [f"{med[w, 'jacfwd', n] / med[w, 'jacrev', n]:.2f}" for w in WAYS]
        cells += [f"{med['tinypytorch', fn, n] / med['torch', fn, n]:.2f}" for fn in ("jacfwd", "jacrev")]
        cells += [f"{med['tinypytorch', fn, n] / med['loops', fn, n]:.2f}" for fn in ("jacfwd", "jacrev")]
        lines.append(f"| {n} | {PRODUCT // n} | " + " | ".join(cells) + " |")
    lines += ["", "The loops make n passes by columns, 1 + m by rows: where n < m columns are fewer and forward "
              "mode should win, where n > m rows; each pass's fixed overhead (Python, per operation) dominates at "
              "these sizes, so their ratio follows n / m. Batched, tinypytorch.func and torch.func make one pass "
              "either way (jacrev's backward after its forward), so their ratios should stay near 1: batching "
              "takes the crossover away.", ""]
    return "\n".join(lines)


def plot(times, sizes, path):
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    styles = {"loops": "-o", "tinypytorch": "-s", "torch": "--^"}
    for way in WAYS:
        for fn, colour in (("jacfwd", "tab:blue"), ("jacrev", "tab:red")):
            left.plot(sizes, [times[way, fn, n][0] * 1e3 for n in sizes], styles[way], color=colour,
                      alpha=1.0 if way != "torch" else 0.6, label=f"{NAMES[way]} {fn}")
        right.plot(sizes, [times[way, "jacfwd", n][0] / times[way, "jacrev", n][0] for n in sizes],
                   styles[way], color="black" if way == "loops" else "tab:green" if way == "tinypytorch" else "grey",
                   label=NAMES[way])
    left.set_xscale("log", base=2), left.set_yscale("log")
    left.set_xlabel(f"n inputs (m = {PRODUCT} / n outputs)"), left.set_ylabel("ms per Jacobian")
    left.set_title("Time per Jacobian")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    right.axhline(1, color="grey", lw=0.8)
    right.set_xscale("log", base=2), right.set_yscale("log")
    right.set_xlabel(f"n inputs (m = {PRODUCT} / n outputs)"), right.set_ylabel("time jacfwd / time jacrev")
    right.set_title("Columns or rows: above 1, jacrev is cheaper")
    right.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    figure.tight_layout()
    save(figure, path, 120)


def run(quick, out=None):
    """Measure, and write jacobians.md and .png into `out` (bench/results, or bench/_out when quick)."""
    sizes = SETTINGS["quick" if quick else "full"]["sizes"]
    times = measure(quick)
    write_results(output_folder(out, quick), "jacobians", report(times, sizes, "quick" if quick else "full"),
                  lambda path: plot(times, sizes, path))


if __name__ == "__main__":
    command_line(__doc__, run, "jacobians.md and .png")
