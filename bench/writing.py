"""What every results file shares: the machine it was measured on, numbers as the tables write them, the plots.

The results files (bench/results/*.md, *.png) are written by the drivers (bench_*.py) through
`write_results`; the measurement modules build their text with the helpers here.
"""
import argparse
import datetime
import os
import pathlib
import platform

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent
MiB = 2**20
LABELS = {"tinypytorch": "tinypytorch", "torch": "PyTorch"}  # the frameworks the memory benchmarks compare


def _cpu_and_memory():
    """The CPU's model name and the memory installed, from /proc (Linux); what platform says elsewhere."""
    cpu, memory = platform.processor() or "unknown CPU", "unknown"
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
        with open("/proc/meminfo") as file:
            kib = next(int(line.split()[1]) for line in file if line.startswith("MemTotal"))
        memory = f"{kib / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        pass
    return cpu, memory


def machine(memory=False):
    """{what: value} of the machine and the versions, in the order the results files list them.

    memory: also the memory installed (the memory benchmarks name it).
    """
    import torch

    import tinypytorch

    cpu, installed = _cpu_and_memory()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    about = {"CPU": f"{cpu}, {os.cpu_count()} logical cores"}
    if memory:
        about["memory"] = installed
    return {**about, "load average (1, 5, 15 min) at the end": load, "OS": platform.platform(),
            "Python": platform.python_version(), "NumPy": np.__version__,
            "PyTorch": f"{torch.__version__}, {torch.get_num_threads()} thread", "tinypytorch": tinypytorch.__version__}


def machine_lines(memory=False):
    """The machine as the markdown list every results file carries."""
    return [f"- {key}: {value}" for key, value in machine(memory).items()]


def written_by(script, mode, extra=""):
    """The opening of a results file's first paragraph: which command wrote it, and when."""
    return (f"Written by `python bench/{script}{' --quick' if mode == 'quick' else ''}{extra}` on "
            f"{datetime.date.today().isoformat()}")


def format_time(seconds, units=(("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))):
    """Seconds in the largest of `units` that leaves at least 1, three significant digits; ns below them all."""
    for unit, scale in units:
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def mib(n):
    return f"{n / MiB:.2f}"


def difference(n):
    """A difference in bytes that should be 0: written as bytes, so that one stray byte shows."""
    return "0" if n == 0 else f"{n:+,} B"


def verdict(ok):
    return "met" if ok else "NOT met"


def yes(ok):
    return "yes" if ok else "NO"


def header(*columns):
    """A markdown table's header and rule."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def pyplot():
    """matplotlib's pyplot on the Agg backend: the benchmarks write files and never open a window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure, path, dpi):
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)


def output_folder(out, quick):
    """Where the results go: `out` if given, else bench/results (bench/_out for a quick run); made if missing."""
    out = out or ROOT / ("_out" if quick else "results")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_results(out, name, text, plot=None):
    """Print `text`, write it to out/name.md and, given plot(path), the plot to out/name.png; say what was written."""
    print(text)
    (out / f"{name}.md").write_text(text)
    written = [out / f"{name}.md"]
    if plot is not None:
        plot(out / f"{name}.png")
        written.append(out / f"{name}.png")
    print("written: " + ", ".join(map(str, written)))


def command_line(doc, run, files):
    """`python bench/<part>.py [--quick] [--out FOLDER]`: its arguments parsed, then run(quick, out)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few repeats: a smoke test")
    parser.add_argument("--out", type=pathlib.Path, help=f"folder for {files}")
    args = parser.parse_args()
    run(args.quick, args.out)
