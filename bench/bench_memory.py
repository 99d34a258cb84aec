"""How much memory does tinypytorch's autograd keep, plainly and under checkpointing? Side by side with PyTorch.

    python bench/bench_memory.py            # the full run, a few minutes: bench/results/{memory,checkpoint}.{md,png}
    python bench/bench_memory.py --quick    # a smoke test, seconds: small sizes, written to bench/_out/
    python bench/bench_memory.py --only checkpoint   # one part (memory, checkpoint or reversible)

Three parts, each a module of its own, measured alike (memory_measures.py) on the networks of
networks.py and their PyTorch twins (ports.py):

- memory (memory_saved.py): an MLP's saved bytes, memory held and peak, float32 and float64; and
  (memory_optimizer_in_backward.py, step 53) the gradient bytes of the usual loop against an optimizer
  stepped inside backward;
- checkpoint (memory_checkpoint.py): the same MLP plainly, in √N checkpointed segments and with every
  layer checkpointed; saved bytes, the peaks against the k + N/k prediction, the time;
- reversible (memory_reversible.py, memory_reversible_report.py): a RevNet stack of coupling blocks
  and RevCol's columns, plain, checkpointed and reversible.

Each writes bench/results/<part>.md and <part>.png. tests/test_bench_memory.py checks, at tiny
sizes, that what each counts is what the graphs hold and that its report says what it should.
"""
import os

# NumPy's BLAS on one thread, as PyTorch's (set before NumPy loads; a value already set wins): the
# checkpointing part times forward + backward, and two BLAS threads on a busy two-core machine wait on each other.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402 (after the environment is set)
import pathlib  # noqa: E402

import memory_checkpoint  # noqa: E402
import memory_optimizer_in_backward as in_backward  # noqa: E402
import memory_reversible  # noqa: E402
import memory_reversible_report  # noqa: E402
import memory_saved  # noqa: E402
from writing import output_folder, write_results  # noqa: E402


def run_memory(s):
    return memory_saved.run(s[0]), in_backward.run(s[1])


def report_memory(results, s, mode):
    """memory_saved's page, the optimizer inside backward's section (step 53) at its end."""
    return (memory_saved.report(results[0], s[0], mode)[0] + in_backward.report(results[1], s[1])[0],)


def plot_memory(results, s, path):
    memory_saved.plot(results[0], path)
    in_backward.plot(results[1], path.with_name(path.stem + "_optimizer_in_backward.png"))


PARTS = {  # name: (settings, run, report, plot(results, s, path))
    "memory": ({mode: (memory_saved.SETTINGS[mode], in_backward.SETTINGS[mode]) for mode in ("full", "quick")},
               run_memory, report_memory, plot_memory),
    "checkpoint": (memory_checkpoint.CHECKPOINT_SETTINGS, memory_checkpoint.run_checkpoint,
                   memory_checkpoint.report_checkpoint, memory_checkpoint.plot_checkpoint),
    "reversible": (memory_reversible.REVERSIBLE_SETTINGS, memory_reversible.run_reversible,
                   memory_reversible_report.report_reversible, memory_reversible_report.plot_reversible),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help="folder for memory, checkpoint and reversible .{md,png} "
                        "(default: bench/results, or bench/_out with --quick)")
    parser.add_argument("--only", choices=list(PARTS), help="run one of the three parts (default: all)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    out = output_folder(args.out, args.quick)
    for name, (settings, run_part, report_part, plot_part) in PARTS.items():
        if args.only not in (None, name):
            continue
        s = settings[mode]
        results = run_part(s)
        text = report_part(results, s, mode)[0]
        write_results(out, name, text, lambda path: plot_part(results, s, path))


if __name__ == "__main__":
    main()
