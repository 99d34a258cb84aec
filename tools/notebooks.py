"""Generate notebooks/stepNN.ipynb from steps/stepNN.py and execute it.

    python tools/notebooks.py               # every step
    python tools/notebooks.py step07 12     # some steps

Each notebook is executed top to bottom in a fresh `python3` kernel whose
working directory is notebooks/ (as in Jupyter and nbval), and written with its
outputs. A cell tagged `raises-exception` may raise; any other error stops the
build, so a broken step never reaches a committed notebook.
"""
import argparse
import pathlib
import sys
import time

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
STEPS, NOTEBOOKS = ROOT / "steps", ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def step_paths(names):
    if not names:
        return sorted(STEPS.glob("step[0-9][0-9].py"))
    paths = []
    for name in names:
        name = name.removesuffix(".py").removeprefix("steps/")
        name = name if name.startswith("step") else f"step{int(name):02d}"
        path = STEPS / f"{name}.py"
        if not path.exists():
            sys.exit(f"no such step: {path.relative_to(ROOT)}")
        paths.append(path)
    return paths


def tidy_streams(cell):
    """Merge consecutive outputs of one stream and apply carriage returns, as Jupyter shows them.

    A progress bar redraws itself with "\r"; stored raw, the book would print every redraw.
    """
    merged = []
    for output in cell.outputs:
        previous = merged[-1] if merged else None
        if output.output_type == "stream" and previous and previous.output_type == "stream" \
                and previous.name == output.name:
            previous.text += output.text
        else:
            merged.append(output)
    for output in merged:
        if output.output_type == "stream":
            lines = output.text.split("\n")
            output.text = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)
    cell.outputs = merged


def build(script):
    notebook = jupytext.read(script)
    notebook.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=900,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    notebook.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for index, cell in enumerate(notebook.cells):  # stable ids, tags only: rebuilds diff cleanly
        cell.id = f"cell-{index:03d}"
        cell.metadata = {"tags": cell.metadata["tags"]} if cell.metadata.get("tags") else {}
        if cell.cell_type == "code":
            tidy_streams(cell)
    target = NOTEBOOKS / f"{script.stem}.ipynb"
    nbformat.write(notebook, target)
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="*", help="step names or numbers (default: all)")
    args = parser.parse_args()
    for script in step_paths(args.steps):
        start = time.perf_counter()
        target = build(script)
        print(f"{target.relative_to(ROOT)}  executed in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
