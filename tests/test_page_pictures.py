"""Every figure a page shows, measured as tests/overlaps.py measures: no label on another or on a line, no legend
on data, no big marker on another.

Each page runs as its script, in a process of its own (a page sets the default dtype, seeds, modes), with
`plt.show` replaced by the measurement; the test reports the faults of each figure by its number on the page.
The pages: those that draw graphs with tinypytorch.utils.pictures, step 29 and steps 52-67. Slow: it runs the
pages (steps 66 and 67 take a minute between them); tests/test_picture_overlaps.py is the quick check of the
measuring and of the helpers.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [3, 5, 6, 7, 9, 11, 12, 13, 14, 15, 16, 18, 20, 25, 27, 29, 33, 34, *range(52, 68), 69]

MEASURE = """
import io, json, runpy, sys, contextlib
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
sys.path.insert(0, sys.argv[2])
from overlaps import overlaps

found = []


def show(*args, **kwargs):
    fig = plt.gcf()
    found.append(overlaps(fig))
    plt.close(fig)


plt.show = show
with contextlib.redirect_stdout(io.StringIO()):
    runpy.run_path(sys.argv[1], run_name="__main__")
print(json.dumps(found))
"""


def test_the_pages_are_the_ones_that_draw():
    drawing = {int(path.stem[4:]) for path in (ROOT / "steps").glob("step[0-9][0-9].py")
               if "draw_dag" in path.read_text() or "draw_graph" in path.read_text()}
    assert drawing <= set(PAGES)


@pytest.mark.slow
@pytest.mark.parametrize("number", PAGES, ids=lambda n: f"step{n:02d}")
def test_no_figure_of_the_page_has_an_overlap(number):
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, "-c", MEASURE, str(ROOT / "steps" / f"step{number:02d}.py"),
                             str(ROOT / "tests")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures, "the page shows no figure"
    faults = {f"figure {k}": found for k, found in enumerate(figures, 1) if found}
    assert not faults, faults
