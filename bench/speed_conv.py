"""conv2d's forward and backward in tinypytorch (unfold, a matrix product, a reshape: step 55), PyTorch eager
(one convolution node) and a hand-written NumPy im2col, side by side: bench/results/conv.md.

    python bench/bench_autograd.py       # the full run writes it with autograd.md (`make bench`)
    python bench/speed_conv.py           # this measurement alone, into bench/results/conv.md
    python bench/speed_conv.py --quick   # a smoke test, seconds: written to bench/_out/

Each call is one forward and one backward: y = conv2d(x, w, b), then the gradients of x, w and b for a fixed
output gradient g (y.backward(g)). "NumPy im2col" is the classic hand-written layer: the padded input copied into
columns one kernel position at a time (kh kw strided slices), one matrix product, and in backward the two
products of the gradient and col2im, the columns' gradient added back one kernel position at a time. It keeps
what its backward needs and no graph: the floor that the package's bookkeeping and its gather by index are
measured against. Float32, PyTorch on one thread, NumPy's BLAS on one thread; the three take turns
(timing.in_turns), medians of the repeats, each repeat after one untimed call.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tinypytorch  # noqa: E402
from timing import in_turns  # noqa: E402
from writing import command_line, format_time, header, machine_lines, output_folder, write_results, written_by  # noqa: E402

torch.set_num_threads(1)

# name: (input shape, weight shape, stride, padding)
WORKLOADS = {
    "the digits CNN's second convolution: 32 x 8 x 4 x 4, 16 filters 3 x 3": ((32, 8, 4, 4), (16, 8, 3, 3), 1, 1),
    "32 x 16 x 16 x 16, 32 filters 3 x 3": ((32, 16, 16, 16), (32, 16, 3, 3), 1, 1),
    "32 x 16 x 32 x 32, 32 filters 3 x 3, stride 2": ((32, 16, 32, 32), (32, 16, 3, 3), 2, 1),
    "8 x 64 x 32 x 32, 64 filters 3 x 3": ((8, 64, 32, 32), (64, 64, 3, 3), 1, 1),
}
SETTINGS = {"full": {"number": 5, "repeats": 11}, "quick": {"number": 1, "repeats": 2}}


def arrays(x_shape, w_shape, stride, padding, seed=0, dtype=np.float32):
    """(x, w, b, g) for one workload: g is the output's gradient."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    out = [(x_shape[2 + i] + 2 * padding - w_shape[2 + i]) // stride + 1 for i in (0, 1)]
    g = rng.standard_normal((x_shape[0], w_shape[0], *out)).astype(dtype)
    return x, w, b, g


def step_framework(fw, x, w, b, g, stride, padding):
    """A function running fw's conv2d forward and backward; it returns the gradients of x, w and b as arrays."""
    tx, tw, tb = (fw.tensor(a, requires_grad=True) for a in (x, w, b))
    tg = fw.tensor(g)

    def run():
        for t in (tx, tw, tb):
            t.grad = None
        fw.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=padding).backward(tg)
        return [np.asarray(t.grad.data if fw is tinypytorch else t.grad) for t in (tx, tw, tb)]
    run()  # untimed: a first call's allocations and torch's choice of kernel are not what is measured
    return run


def im2col(x, kh, kw, stride, padding):
    """The padded x's windows as columns (N, C*kh*kw, L), filled one kernel position at a time."""
    n, c, h, w = x.shape
    oh, ow = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
    for a in range(kh):
        for b in range(kw):
            cols[:, :, a, b] = padded[:, :, a:a + stride * oh:stride, b:b + stride * ow:stride]
    return cols.reshape(n, c * kh * kw, oh * ow), (oh, ow)


def col2im(cols, x_shape, kh, kw, stride, padding, out):
    """im2col's adjoint: each kernel position's slice of the columns added back into the padded image."""
    n, c, h, w = x_shape
    oh, ow = out
    cols = cols.reshape(n, c, kh, kw, oh, ow)
    padded = np.zeros((n, c, h + 2 * padding, w + 2 * padding), dtype=cols.dtype)
    for a in range(kh):
        for b in range(kw):
            padded[:, :, a:a + stride * oh:stride, b:b + stride * ow:stride] += cols[:, :, a, b]
    return padded[:, :, padding:padding + h, padding:padding + w]


def step_numpy(x, w, b, g, stride, padding):
    """The same forward and backward by hand: im2col, matrix products, col2im."""
    o, c, kh, kw = w.shape
    w_matrix = w.reshape(o, -1)

    def run():
        cols, out = im2col(x, kh, kw, stride, padding)  # kept for backward, as a framework keeps it
        y = (w_matrix @ cols).reshape(x.shape[0], o, *out) + b[:, None, None]  # noqa: F841 (the forward's cost)
        g_flat = g.reshape(x.shape[0], o, -1)
        gw = np.einsum("nol,nkl->ok", g_flat, cols).reshape(w.shape)
        gb = g.sum(axis=(0, 2, 3))
        gx = col2im(w_matrix.T @ g_flat, x.shape, kh, kw, stride, padding, out)
        return [gx, gw, gb]
    run()
    return run


def measure(quick=False):
    """{workload: {contender: (median, best) seconds per forward and backward}}."""
    s = SETTINGS["quick" if quick else "full"]
    results = {}
    for name, (x_shape, w_shape, stride, padding) in WORKLOADS.items():
        x, w, b, g = arrays(x_shape, w_shape, stride, padding)
        prepares = {"tinypytorch": lambda: step_framework(tinypytorch, x, w, b, g, stride, padding),
                    "torch": lambda: step_framework(torch, x, w, b, g, stride, padding),
                    "numpy": lambda: step_numpy(x, w, b, g, stride, padding)}
        results[name] = in_turns(prepares, number=s["number"], repeats=s["repeats"])
    return results


def report(results, mode):
    """The results file's text: each contender's time per forward and backward, and tinypytorch's ratios."""
    lines = ["# conv2d forward and backward: tinypytorch, PyTorch eager and NumPy im2col by hand", "",
             f"{written_by('speed_conv.py', mode)} (also by `bench_autograd.py`). One call: y = conv2d(x, w, b) "
             "and the gradients of x, w and b for a fixed output gradient, float32, padding 1; medians of "
             "repeats (the ratios of the best repeats in brackets), the three taking turns. tinypytorch's "
             "conv2d is unfold (a gather by index), a matrix product and a reshape, its backward fold "
             "(`add.at`) and the product's; NumPy im2col by hand copies and adds one kernel position at a "
             "time, with no graph; PyTorch runs one convolution node (its CPU kernels, one thread).", ""]
    lines += machine_lines()
    lines += ["", *header("workload", "tinypytorch", "PyTorch", "NumPy im2col", "tinypytorch / PyTorch",
                          "tinypytorch / NumPy")]
    for name, times in results.items():
        median = {k: t[0] for k, t in times.items()}
        best = {k: t[1] for k, t in times.items()}
        ratios = [f"{median['tinypytorch'] / median[k]:.1f} ({best['tinypytorch'] / best[k]:.1f})"
                  for k in ("torch", "numpy")]
        lines.append(f"| {name} | {format_time(median['tinypytorch'])} | {format_time(median['torch'])} | "
                     f"{format_time(median['numpy'])} | " + " | ".join(ratios) + " |")
    lines += ["", "On the small layer the time is mostly bookkeeping: a node per operation, the windows' index "
              "built at each call. On the larger ones the arithmetic dominates: tinypytorch does the same matrix "
              "products as NumPy by hand, and its gather by index and `add.at` scatter cost more than the hand-"
              "written strided slices; PyTorch's own convolution kernels are faster than both. Memory, not only "
              "time, is the price of the columns: step 55 counts it.", ""]
    return "\n".join(lines)


def run(quick, out=None):
    """Measure, and write conv.md into `out` (bench/results, or bench/_out when quick)."""
    write_results(output_folder(out, quick), "conv", report(measure(quick), "quick" if quick else "full"))


if __name__ == "__main__":
    command_line(__doc__, run, "conv.md")
