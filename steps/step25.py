# %% [markdown]
# # Step 25: Drawing the computational graph
#
# Step 24 found 38 functions behind the Goldstein–Price function. A count says
# how big a graph is, not what it looks like: which function feeds which, where
# $x$ is used again, where the numbers of the formula come in. A picture shows
# that at a glance, and it is the first thing to look at when a gradient comes
# out wrong.
#
# The idea of this step: **walk the graph from the output, as `backward` does,
# and write down every node and every arrow** in Graphviz's DOT language.
# `get_dot_graph(y)` returns that text; `plot_dot_graph(y)` has Graphviz draw
# it. PyTorch users do the same with the `torchviz` package; we borrow its
# colours.

# %%
import re

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.testfunctions import goldstein_price
from tinypytorch.utils import DotGraph, drawing, get_dot_graph, plot_dot_graph
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## The DOT language
#
# [Graphviz](https://graphviz.org) lays out graphs. You describe nodes and
# edges in a small text language, DOT, and its program `dot` places them so
# that every arrow points the same way. `n0 [label="x", shape=ellipse]`
# declares a node, `n0 -> n1` draws an arrow. Here is one written by hand; it
# is also the legend of every drawing in this tutorial:

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
# Arrows point the way the forward pass runs; the backward pass walks them in
# reverse. A number such as the 2 in `2 * x` becomes a constant: a `Variable`
# with `requires_grad=False` (step 33), drawn dashed, to which no gradient
# flows. Graphviz is two installs: the `dot` program (`apt install graphviz`,
# `brew install graphviz`) and the Python package (`pip install graphviz`).
# Without them the notebook shows each graph's DOT text where the picture would
# be, and a plain `python steps/step25.py` shows no pictures at all.
#
# ## From a graph to DOT: `get_dot_graph`
#
# The graph lives in the objects: a `Variable` knows its `creator`, a
# `Function` its `outputs` and, for each input, where that input came from
# (its `edges`, step 35). `get_dot_graph` walks these links first in, first
# out, from the output, and numbers each node `n0, n1, ...` the first time it
# meets it. Numbering by the walk, not by memory address (DeZero uses
# `id(obj)`), makes the text the same on every run, so a test can compare it
# with a stored copy. A node used many times is declared once and gets one
# arrow per use.

# %%
show_code(get_dot_graph, drawing._functions_first_in_first_out, drawing._draw_function, step=25)

# %% [markdown]
# (`_DotNodes`, not shown, gives each node its id and its declaring line; a
# nameless 0-d constant is labelled with its value.) Step 16's graph is small
# enough to read: $a = x^2$ and $y = a^2 + a^2$.

# %%
x = Variable(np.array(2.0), name="x")
a = tinypytorch.square(x)
a.name = "a"
y = tinypytorch.square(a) + tinypytorch.square(a)
y.name = "y"
dot_text = get_dot_graph(y)
print(dot_text)


# %% tags=["hide-input"]
def dot_to_dag(text):
    """The nodes and arrows of DOT text, in draw_dag's form, each node noted with its id."""
    nodes, notes = {}, {}
    for node, label, rest in re.findall(r'^  (n\d+) \[label="([^"]*)", (.*)\]$', text, flags=re.MULTILINE):
        kind = ("function" if "shape=box" in rest else "leaf" if "lightblue" in rest
                else "output" if "darkolivegreen1" in rest else "variable")
        nodes[node], notes[node] = (kind, label or " "), node
    return nodes, re.findall(r"^  (n\d+) -> (n\d+)$", text, flags=re.MULTILINE), notes


nodes, arrows, notes = dot_to_dag(dot_text)
fig, ax = plt.subplots(figsize=(8, 3))
draw_dag(nodes, arrows, notes=notes, ax=ax,
         title="the DOT text above, laid out: each node's id is the order in which the walk from y met it")
plt.show()

# %% [markdown]
# Read it with the ids: the walk starts at `y` (`n0`) and its `Add` (`n1`),
# meets that `Add`'s two nameless inputs (`n2`, `n3`), then takes their
# creators in the queue's order, the two `Square`s `n4` and `n6`. Both read
# `a` (`n5`): declared once, two arrows. Last the `Square` that made `a`, and
# the leaf `x`. Graphviz draws the same text:

# %%
plot_dot_graph(y)

# %% [markdown]
# With `verbose=True` every label adds the variable's shape and dtype, and
# `plot_dot_graph(y, to_file="graph.png")` also writes the drawing to a file
# in the format its suffix names (without `dot` it warns and writes nothing).
# What `plot_dot_graph` returns, a `DotGraph`, always offers Jupyter the DOT
# text and adds the picture only where `dot` is installed; that is why this
# page reads the same on either machine. `tests/test_step25.py` checks the
# files, the warnings and both ways of showing.

# %% tags=["hide-cell"]
show_code(plot_dot_graph, drawing.missing_drawing_tools, DotGraph)

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
# The picture reads like the formula upside down: $x$ and $y$ at the top
# with an arrow into every function that uses them, the last `Mul` making $z$
# at the bottom, each dashed number entering where the formula writes it.
# `Pow` carries its exponent as an attribute (step 22), not as an input. The
# sizes follow from the formula: 10 `+`, 5 `-`, 17 `*` and 6 `**` make 38
# functions with one output each; with its 17 numbers and $x$, $y$ that is
# $2 + 17 + 38 = 57$ variables, and $38 + 2 \cdot 32 + 6 = 108$ arrows.

# %%
dot_text = get_dot_graph(z)
boxes = re.findall(r'^  n\d+ \[label="(\w+)", shape=box', dot_text, flags=re.MULTILINE)
ellipses = re.findall(r"^  n\d+ \[.*shape=ellipse", dot_text, flags=re.MULTILINE)
arrows = re.findall(r"^  n\d+ -> n\d+$", dot_text, flags=re.MULTILINE)
print(f"{len(boxes)} functions:", ", ".join(f"{boxes.count(n)} {n}" for n in sorted(set(boxes))))
print(f"{len(ellipses)} variables, {len(arrows)} arrows")

# %% [markdown]
# PyTorch records no node for a Python number: its graph of Goldstein–Price
# has the same 38 operations plus one `AccumulateGrad` for each of $x$ and $y$
# (the node that adds a gradient into a leaf's `.grad`).
#
# ## Check against PyTorch
#
# The gradients at $(1, 1)$ and at five seeded random points equal PyTorch's;
# walking PyTorch's backward nodes (`grad_fn`, `next_functions`) first in,
# first out gives the same 38 operations as our DOT text, of the same kinds,
# each fed by the same producers or by $x$ and $y$ (the collapsed cell reads
# both into lists of `(kind, [producer's position or leaf name])`); and the
# DOT text of a graph built twice is identical.

# %% tags=["hide-cell"]
import torch  # noqa: E402

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


def both(a, b):
    """Goldstein–Price at (a, b), ours and torch's, after backward."""
    x, y = Variable(np.array(a), name="x"), Variable(np.array(b), name="y")
    xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    z, zt = goldstein_price(x, y), goldstein_price(xt, yt)
    z.backward()
    zt.backward()
    return (x, y, z), (xt, yt, zt)


# %%
points = [(1.0, 1.0)] + [tuple(p) for p in np.random.default_rng(0).uniform(-2.0, 2.0, (5, 2))]
for a, b in points:
    (x, y, z), (xt, yt, zt) = both(a, b)
    ours, theirs = [z.data, x.grad.data, y.grad.data], [zt.item(), xt.grad.item(), yt.grad.item()]
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    print(f"({a:+.3f}, {b:+.3f}): grad ({ours[1]:11.3f}, {ours[2]:11.3f}) equals torch's")
ours, theirs = operations_in_dot(get_dot_graph(z)), operations_in_torch(zt, {id(xt): "x", id(yt): "y"})
assert ours == theirs
print(f"DOT text: {len(ours)} operations, kinds and wiring as torch's; first two: {ours[:2]}")
assert get_dot_graph(both(1.0, 1.0)[0][2]) == get_dot_graph(both(1.0, 1.0)[0][2])
print("PyTorch check passed: Goldstein–Price grads; the DOT graph has torch's operations and wiring")

# %% [markdown]
# ## Recap
#
# - The graph is in the objects; drawing it is a walk from the output, first
#   in, first out, like the backward pass.
# - DOT text is one line per node and one per arrow; numbering nodes in the
#   order the walk meets them makes the text the same on every run.
# - A variable used many times is one node with one arrow per use; a number
#   of the formula is a dashed constant that receives no gradient.
# - `plot_dot_graph` hands the text to Graphviz; without it the page shows the
#   text instead of the picture.
#
# ## Exercises
#
# **1. Count by kind.** Write `function_counts(y)`, a dict from each function's
# class name to how many boxes of that kind `get_dot_graph(y)` holds, and
# apply it to `goldstein_price` at $(1, 1)$. (The test compares it with the
# kinds of PyTorch's backward nodes.)

# %% tags=["hide-cell"]
def function_counts(y):
    kinds = re.findall(r'^  n\d+ \[label="(\w+)", shape=box', get_dot_graph(y), flags=re.MULTILINE)
    return {kind: kinds.count(kind) for kind in sorted(set(kinds))}


print(function_counts(goldstein_price(Variable(np.array(1.0)), Variable(np.array(1.0)))))


# %% [markdown]
# **2. How often is $x$ used?** Write `uses(y, name)`, the number of arrows
# that leave the node labelled `name` in `get_dot_graph(y)`. How many
# functions of Goldstein–Price read $x$, and how many read $y$? (The test
# counts how often PyTorch's graph reaches $x$'s and $y$'s `AccumulateGrad`.)

# %% tags=["hide-cell"]
def uses(y, name):
    text = get_dot_graph(y)
    ids = re.findall(rf'^  (n\d+) \[label="{re.escape(name)}"', text, flags=re.MULTILINE)
    return len(re.findall(rf"^  {ids[0]} -> n\d+$", text, flags=re.MULTILINE))


z = goldstein_price(Variable(np.array(1.0), name="x"), Variable(np.array(1.0), name="y"))
print("x is read by", uses(z, "x"), "functions, y by", uses(z, "y"))
