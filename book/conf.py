"""Sphinx configuration of the tinypytorch book (MyST-NB + sphinx-book-theme).

The book renders the step notebooks with their committed outputs; it never
executes them (nbval in `make test` already did). Sphinx reads only its own
source folder, so the notebooks are copied into book/notebooks/ and the
benchmarks' plots into book/bench/ (both git-ignored) at each build.
"""
import importlib.util
import pathlib
import shutil

BOOK = pathlib.Path(__file__).resolve().parent
ROOT = BOOK.parent

shutil.rmtree(BOOK / "notebooks", ignore_errors=True)
(BOOK / "notebooks").mkdir()
for notebook in sorted((ROOT / "notebooks").glob("step[0-9][0-9].ipynb")):
    shutil.copy2(notebook, BOOK / "notebooks" / notebook.name)
# the benchmarks' committed plots, for the chapters that discuss them (git-ignored copies, as the notebooks)
shutil.rmtree(BOOK / "bench", ignore_errors=True)
(BOOK / "bench").mkdir()
for plot in sorted((ROOT / "bench" / "results").glob("*.png")):
    shutil.copy2(plot, BOOK / "bench" / plot.name)

project = "tinypytorch"
author = "the tinypytorch authors"
copyright = "2026, " + author

extensions = ["myst_nb"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = "off"
nb_merge_streams = True

exclude_patterns = ["_build", "**/.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type"]

# The maths is typeset by MathJax 3.2.2 from a pinned package (sphinx-mathjax-offline, in
# requirements.txt), copied into the book's _static/, so pages read offline.
MATHJAX = pathlib.Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent / "static"
mathjax_path = "mathjax/tex-chtml.js"
html_static_path = [str(MATHJAX), "_static"]
html_css_files = ["tinypytorch.css"]

html_theme = "sphinx_book_theme"
html_title = "tinypytorch"
html_theme_options = {
    "path_to_docs": "book",
    "show_toc_level": 2,
    "use_download_button": True,
    "secondary_sidebar_items": {"notebooks/*": []},
}
