"""How fast is tinypytorch's autograd? Side by side with PyTorch eager and hand-written NumPy.

    python bench/bench_autograd.py            # the full run, a few minutes: bench/results/autograd.{md,png}
    python bench/bench_autograd.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/
    python bench/bench_autograd.py --profile  # also: where tinypytorch spends its time (cProfile)

Workloads (each computes a gradient; tests/test_bench.py checks every one against PyTorch):

- scalar graph: Goldstein-Price, forward and backward, on 0-d values (38 operations);
- wide graph: 2,000 branches of 10 operations from one input, summed; backward only;
- chain: backward only, through a chain of 10,000 sin functions;
- large arrays: y = sum(exp(x) * x + x ** 2) on 10^6 elements, forward and backward, and a second
  expression with division and tanh, y = sum(tanh(x) / (1 + x * x));
- MLP training step: 784 -> 256 -> 10 with ReLU, a batch of 64, float32, mean squared error, Adam;
- one operation: what a single sin costs on a 0-d value, recorded and not, in each framework;
- scaling: backward time against graph size, 10^3 to 10^5 functions, for a chain and a wide graph;
- grad modes: a small MLP's forward with the graph recorded, under no_grad and under inference_mode
  (speed_grad_modes.py, written to grad_modes.md);
- Jacobians: jacfwd (columns) against jacrev (rows) as n and m vary, as loops of passes and batched with vmap,
  against torch.func (speed_jacobians.py, jacobians.md);
- per-sample gradients: a loop of backward passes against vmap(grad) (speed_per_sample.py, per_sample.md);
- convolution: conv2d forward and backward against PyTorch and a hand-written NumPy im2col (speed_conv.py, conv.md).

"NumPy" is the same arithmetic written by hand: a forward pass that keeps what the backward
needs, and the chain rule spelt out, with no graph at all; it is the floor a framework's
bookkeeping is measured against. PyTorch runs eagerly on one CPU thread (torch.set_num_threads(1)),
in float64 like the rest (the MLP in float32). Each time is the median of several repeats; the
garbage collector is off while a repeat runs, as in `timeit`. NumPy's BLAS runs on one thread too.

The workloads live in autograd_workloads.py; speed_autograd.py times them, writes the table and
draws the plot; this file runs it.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one thread, as PyTorch below

import argparse  # noqa: E402 (after the environment is set)
import pathlib  # noqa: E402

import speed_conv  # noqa: E402
import speed_grad_modes  # noqa: E402
import speed_jacobians  # noqa: E402
import speed_per_sample  # noqa: E402
from speed_autograd import SETTINGS, plot, profile, report, run_workloads  # noqa: E402
from writing import output_folder, write_results  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for autograd.md, autograd.png, grad_modes.md and conv.md "
                        "(default: bench/results, or bench/_out with --quick)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of tinypytorch")
    args = parser.parse_args(argv)
    s = SETTINGS["quick" if args.quick else "full"]
    results, scaling = run_workloads(s)
    text, slopes, _ = report(results, scaling, s, "quick" if args.quick else "full")
    write_results(output_folder(args.out, args.quick), "autograd", text,
                  lambda path: plot(results, scaling, slopes, s["sizes"], path))
    speed_grad_modes.run(args.quick, args.out)  # steps 57 and 58: each gradient mode's cost, into grad_modes.md
    speed_jacobians.run(args.quick, args.out)  # step 65: jacfwd against jacrev, into jacobians.md
    speed_per_sample.run(args.quick, args.out)  # step 70: a loop of backward passes against vmap(grad), per_sample.md
    speed_conv.run(args.quick, args.out)  # step 55: conv2d forward and backward against torch and NumPy, conv.md
    if args.profile:
        profile(s)


if __name__ == "__main__":
    main()
