# %% [markdown]
# # Step 25: Drawing the computational graph
#
# Step 24 found 38 functions, nine generations deep, behind the
# Goldstein–Price function. A count says how big a graph is, not what it
# looks like: which function feeds which, where $x$ is used again, where the
# numbers of the formula come in. A picture shows all of that at a glance, and
# it is the first thing to look at when a gradient comes out wrong.
#
# This step adds two functions to `tinypytorch.utils`, written in its module
# `tinypytorch/utils/drawing.py`: `get_dot_graph(y)` describes the graph that
# computed `y` in Graphviz's DOT language, and `plot_dot_graph(y)` has
# Graphviz draw it. PyTorch users do the same with the `torchviz` package; we
# borrow its colours.

# %%
import re
import tempfile
import unittest.mock
import warnings

import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.testfunctions import goldstein_price
from tinypytorch.utils import DotGraph, drawing, get_dot_graph, plot_dot_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Graphviz and the DOT language
#
# [Graphviz](https://graphviz.org) lays out graphs. You describe the nodes and
# edges in a small text language, DOT, and its program `dot` places the nodes
# in ranks so that every edge points the same way (down, by default) and as few
# edges cross as it can manage. A directed graph is `digraph <name> { ... }`
# holding one statement per line:
#
# - `n0 [label="x", shape=ellipse]` declares node `n0` with attributes;
# - `n0 -> n1` is an edge from `n0` to `n1`;
# - `node [...]` sets defaults for every node after it.
#
# Two pieces of software are involved: the `dot` program, which comes with the
# operating system's `graphviz` package (`apt install graphviz`,
# `brew install graphviz`), and the Python package `graphviz`
# (`pip install graphviz`), which holds DOT text and runs `dot` on it.
#
# Here is a graph written by hand. It is also the legend of every drawing in
# this tutorial. `DotGraph`, the package's holder for DOT text (more on it
# below), draws it when it is the last expression of a notebook cell:

# %%
legend = r"""digraph legend {
  rankdir=LR
  node [style=filled, fontname="Helvetica", fontsize=10, height=0.3]
  n0 [label="leaf\nsuch as x", shape=ellipse, fillcolor=lightblue]
  n1 [label="constant\nsuch as 2", shape=ellipse, fillcolor=white, style="filled,dashed"]
  n2 [label="Function", shape=box, fillcolor=lightgrey]
  n3 [label="intermediate", shape=ellipse, fillcolor=white]
  n4 [label="Function", shape=box, fillcolor=lightgrey]
  n5 [label="output", shape=ellipse, fillcolor=darkolivegreen1]
  n0 -> n2
  n1 -> n2
  n2 -> n3 -> n4 -> n5
}
"""
DotGraph(legend)

# %% [markdown]
# (A plain `python steps/step25.py` shows no pictures; open the notebook to
# see them. Without Graphviz's `dot` program the notebook shows each graph's
# DOT text where the picture would be.)
#
# | node | drawn as | what it is |
# |---|---|---|
# | leaf | light-blue ellipse | a `Variable` no `Function` made, such as an input $x$; backward fills its `.grad` |
# | constant | dashed white ellipse | a leaf that needs no gradient: a number of the formula, such as the 2 in `2 * x` |
# | `Function` | grey box, labelled with its class | one recorded operation |
# | intermediate | white ellipse | a `Variable` made by a `Function` |
# | output | green ellipse | the `Variable` the drawing starts from |
#
# The shapes are DeZero's, the colours `torchviz`'s. Arrows point the way the
# forward pass runs, from inputs to function to output; the backward pass
# walks them in reverse.
#
# A number such as the 2 in `2 * x` reaches `Mul` as a plain Python number,
# and `Function.__call__` wraps it in a `Variable` created with
# `requires_grad=False`: a flag, borrowed from PyTorch and explained in step
# 33, that tells the backward pass no gradient needs to flow there. The
# drawing shows the flag by the dashed outline. `torchviz` leaves such inputs
# out altogether; we keep them, because they show where each number of a
# formula enters.
#
# ## From a graph to DOT: `get_dot_graph`
#
# The graph lives in the objects themselves: a `Variable` knows its `creator`,
# a `Function` its `outputs` (weak references, step 17) and, for each input,
# where the input came from: the function that made it, or the input itself
# if it is a leaf (the function's `edges`; step 35 explains why a function
# keeps these rather than the input Variables). `get_dot_graph` walks these
# links from the output, much as `backward` does, and writes one line per
# node and one per arrow. A few decisions make the text easy to read and the
# same on every run:
#
# - **Node ids.** DeZero names each node by `id(obj)`, its memory address,
#   which changes from run to run. We number nodes `n0, n1, ...` in the order
#   the walk meets them, so the same graph always gives the same text, and a
#   test can compare it with a stored copy.
# - **A fixed order.** The walk is first in, first out: take a function from
#   the queue, write its outputs and its inputs in their order, and queue the
#   inputs' creators. The order never depends on memory addresses or on the
#   order of a `set`; the set is only asked "seen it already?".
# - **Each node once.** A function with several consumers, or a variable used
#   by many functions (like $x$ in Goldstein–Price), is declared once; each
#   use gets its own arrow, so `add(x, x)` shows two arrows from `x`.
# - **Outputs are weak references.** An intermediate variable that nothing
#   holds any more, such as each partial result of a long formula, has been
#   freed. It is still drawn, unnamed, from what its creator recorded of it
#   (its shape and dtype), when another function used it; an unused output
#   that was freed is skipped.
# - **Labels.** A variable is labelled with its `name`. A nameless 0-d leaf is
#   almost always a number from the formula (the 14 in `14 * x`) and is
#   labelled with its value; other nameless variables get an empty label. With
#   `verbose=True` the label adds the shape and dtype.
#
# `get_dot_graph` reads from top to bottom and leaves the work to three
# pieces, shown after it: `_functions_first_in_first_out` is the walk,
# `_draw_function` writes one function's box and its arrows, and `_DotNodes`
# gives each node its id the first time it is met, with the line that
# declares it.

# %%
for kind, style in drawing.GRAPH_STYLE.items():
    print(f"{kind:>12}: {style}")
print()
show_code(drawing._variable_label)
show_code(get_dot_graph, drawing._functions_first_in_first_out, drawing._draw_function, drawing._DotNodes)

# %% [markdown]
# A small example first, step 16's graph: $a = x^2$ and $y = a^2 + a^2$, with
# $a$ feeding two `Square` functions.

# %%
x = Variable(np.array(2.0), name="x")
a = tinypytorch.square(x)
a.name = "a"
y = tinypytorch.square(a) + tinypytorch.square(a)
y.name = "y"
print(get_dot_graph(y))

# %% [markdown]
# Read it from the top: `n0` is the output `y`, made by the `Add` box `n1`
# from two nameless intermediates, `n2` and `n3`. The walk then takes the two
# `Square` boxes `n4` and `n6` in that order; both read `a` (`n5`), which is
# declared once and gets two arrows. Last comes the `Square` that made `a`
# from the leaf `x`. Five variables, four functions, nine arrows. Drawn:

# %%
plot_dot_graph(y)

# %% [markdown]
# ### Shapes and dtypes: `verbose=True`
#
# For arrays the shape and dtype of each variable matter. Here $y = 2e^{x}$
# for a vector $x$:

# %%
x = Variable(np.array([0.0, 0.5, 1.0]), name="x")
y = tinypytorch.exp(x) * 2
print(get_dot_graph(y, verbose=True))

# %% [markdown]
# The labels are two lines (DOT's `\n`). They show a detail that is easy to
# miss: `Mul` wrapped the Python `2` in a constant `Variable` holding a 0-d
# array, and gave it the dtype of `x`, `float64`, as NumPy's and PyTorch's
# promotion rules do for a Python number (with `float32` data it would be
# `float32`).
#
# ## Drawing: `plot_dot_graph`

# %%
show_code(plot_dot_graph)
show_code(drawing.missing_drawing_tools)
show_code(DotGraph)

# %% [markdown]
# `plot_dot_graph` returns a `DotGraph`, a `graphviz.Source` holding the DOT
# text. Nothing is drawn until someone asks: Jupyter asks for a picture when the
# object is the last expression of a cell, and `graphviz` pipes the text
# through `dot -Tsvg`. It runs `dot` as a subprocess with an argument list,
# never through a shell, and writes no temporary files. (DeZero writes the
# DOT text to `~/.dezero/` and runs `dot` through the shell, so a file name
# with a space breaks it.)
#
# The subclass changes two things. The `repr` of a `graphviz.Source` contains
# its memory address, which changes on every run; `DotGraph`'s counts the
# nodes and edges instead. And what it hands Jupyter (`_repr_mimebundle_`, a
# dictionary from a kind of output to the output) always holds the DOT text as
# plain text, with the SVG picture added only when `dot` is installed. Jupyter
# shows the richest kind it has, so a machine with Graphviz shows the picture
# and one without shows the text, in the same place. The notebook tests
# compare the plain text and skip pictures, so they pass on both.
#
# With `to_file` the drawing is also written to a file, in the format its
# suffix names. Here it goes to a temporary directory, and the first bytes
# show what was written. This is the one cell whose output depends on the
# machine: without `dot`, no file can be written, and the cell says so.

# %% tags=["nbval-ignore-output"]
if drawing.missing_drawing_tools() is not None:
    print("Graphviz cannot draw on this machine:", drawing.missing_drawing_tools())
else:
    with tempfile.TemporaryDirectory() as folder:
        for suffix, magic in [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")]:
            path = f"{folder}/graph{suffix}"
            plot_dot_graph(y, to_file=path)
            with open(path, "rb") as file:
                start = file.read(len(magic))
            print(f"graph{suffix}: starts with {start}, the signature of a {suffix[1:].upper()} file: {start == magic}")

# %% [markdown]
# Here is what a machine without `dot` sees. `shutil.which`, which looks a
# program up on the `PATH`, is made to report that `dot` is missing. Asked
# for a file, `plot_dot_graph` warns, saying what to install; the graph it
# returns offers Jupyter only its text:

# %%
with unittest.mock.patch("shutil.which", return_value=None), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    graph = plot_dot_graph(y, to_file="graph.png")
    shown = graph._repr_mimebundle_()
print(f"{caught[0].category.__name__}: {caught[0].message}")
print("returned:", repr(graph), "holding get_dot_graph(y):", graph.source == get_dot_graph(y))
print("what Jupyter is offered:", list(shown), "equal to the DOT text:", shown["text/plain"] == graph.source)

# %% [markdown]
# ## The graph of Goldstein–Price
#
# Now the function of step 24, at $(1, 1)$:

# %%
x, y = Variable(np.array(1.0), name="x"), Variable(np.array(1.0), name="y")
z = goldstein_price(x, y)
z.name = "z"
plot_dot_graph(z)

# %% [markdown]
# The picture reads like the formula turned upside down. $x$ and $y$ sit at
# the top with an arrow into every function that uses them; the last `Mul`
# multiplies the two big factors into $z$ at the bottom; each dashed number
# enters exactly where the formula writes it. `Pow` boxes carry no
# exponent: the exponent is an attribute of the `Pow` function (step 22), not
# an input, so it is not a node.
#
# The sizes can be checked against the formula without looking at the
# picture. Its operators are 10 `+`, 5 `-`, 17 `*` and 6 `**`: 38 functions,
# each with one output. It holds 17 numbers other than exponents, and each
# becomes a `Variable` of its own. So there are $2 + 17 + 38 = 57$ variables
# and $57 + 38 = 95$ nodes. Each function has one arrow to its output and one
# from each input, two for the 32 binary operators and one for the 6 powers:
# $38 + 64 + 6 = 108$ arrows.

# %%
dot_text = get_dot_graph(z)
boxes = re.findall(r'^  n\d+ \[label="(\w+)", shape=box', dot_text, flags=re.MULTILINE)
ellipses = re.findall(r"^  n\d+ \[.*shape=ellipse", dot_text, flags=re.MULTILINE)
arrows = re.findall(r"^  n\d+ -> n\d+$", dot_text, flags=re.MULTILINE)
print(f"{len(boxes)} functions:", ", ".join(f"{boxes.count(n)} {n}" for n in sorted(set(boxes))))
print(f"{len(ellipses)} variables, {len(boxes) + len(ellipses)} nodes, {len(arrows)} arrows")

# %% [markdown]
# Only $x$ and $y$ are light blue: they are the leaves whose gradients
# `backward` computes. The 17 numbers are nodes in our graph but carry
# `requires_grad=False`, so no gradient is sent to them. PyTorch records no
# node at all for a Python number: its graph of Goldstein–Price has 38
# backward nodes plus one for each of $x$ and $y$ (`AccumulateGrad`, the node
# that adds a gradient into a leaf's `.grad`).
#
# ## Check against PyTorch
#
# Three things are compared. The gradients at $(1, 1)$ and at five seeded
# random points equal PyTorch's. The DOT text describes the graph PyTorch
# records: walking PyTorch's backward nodes (`grad_fn` and its
# `next_functions`) in the same first-in, first-out order gives the same 38
# operations, of the same kinds, wired to the same producers or to $x$ and $y$;
# numbers, which PyTorch does not record, are left out of our side. And the
# DOT text of a graph built a second time is identical, character for
# character. In the list printed below, each operation is its kind and, per
# input, the position in the list of the operation that made that input, or
# the name of the leaf: `('Mul', [1, 2])` is the final `Mul`, fed by the two
# `Add`s that follow it in the walk.

# %%
import torch

TORCH_KIND = {"AddBackward0": "Add", "SubBackward0": "Sub", "RsubBackward1": "Sub", "MulBackward0": "Mul",
              "PowBackward0": "Pow"}


def operations_in_dot(text):
    """Per Function box, in DOT order: (label, [the box that made each input, or the leaf's name])."""
    labels = dict(re.findall(r'^  (n\d+) \[label="([^"]*)"', text, flags=re.MULTILINE))
    boxes = re.findall(r"^  (n\d+) \[.*shape=box", text, flags=re.MULTILINE)
    arrows = re.findall(r"^  (n\d+) -> (n\d+)$", text, flags=re.MULTILINE)
    made_by = {variable: box for box, variable in arrows if box in boxes}
    return [(labels[box], [boxes.index(made_by[v]) if v in made_by else labels[v]
                           for v, target in arrows if target == box and (v in made_by or labels[v] in ("x", "y"))])
            for box in boxes]


def operations_in_torch(output, names):
    """The same for PyTorch's backward graph, walked first in, first out from output.grad_fn."""
    nodes = [output.grad_fn]
    for node in nodes:  # the list grows while we walk it: a queue
        for n, _ in node.next_functions:
            if n is not None and n not in nodes:
                nodes.append(n)
    functions = [n for n in nodes if type(n).__name__ != "AccumulateGrad"]
    return [(TORCH_KIND[type(f).__name__], [names[id(n.variable)] if type(n).__name__ == "AccumulateGrad"
                                            else functions.index(n) for n, _ in f.next_functions if n is not None])
            for f in functions]


points = [(1.0, 1.0)] + [tuple(p) for p in np.random.default_rng(0).uniform(-2.0, 2.0, (5, 2))]
for a, b in points:
    x, y = Variable(np.array(a), name="x"), Variable(np.array(b), name="y")
    z = goldstein_price(x, y)
    z.backward()
    xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    zt = goldstein_price(xt, yt)
    zt.backward()
    np.testing.assert_allclose([z.data, x.grad, y.grad], [zt.item(), xt.grad.item(), yt.grad.item()], rtol=1e-12)
    print(f"({a:+.6f}, {b:+.6f}): grad ({x.grad:14.6f}, {y.grad:14.6f}),",
          f"torch ({xt.grad.item():14.6f}, {yt.grad.item():14.6f})")

ours, theirs = operations_in_dot(get_dot_graph(z)), operations_in_torch(zt, {id(xt): "x", id(yt): "y"})
assert ours == theirs
print(f"DOT text: {len(ours)} operations, the same kinds and wiring as torch's graph; the first three: {ours[:3]}")

first = get_dot_graph(goldstein_price(Variable(np.array(1.0), name="x"), Variable(np.array(1.0), name="y")))
again = get_dot_graph(goldstein_price(Variable(np.array(1.0), name="x"), Variable(np.array(1.0), name="y")))
assert first == again
print(f"DOT text of two separately built graphs: identical ({len(first.splitlines())} lines)")
print("PyTorch check passed: Goldstein–Price grads and the DOT graph's operations and wiring equal torch's graph")
