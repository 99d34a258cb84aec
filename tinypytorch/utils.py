"""Tools around the graph: numerical gradients (step 10) and drawings of the graph (step 25)."""
import collections
import pathlib
import re
import shutil
import warnings

import numpy as np

from tinypytorch.core import Variable, as_variable, no_grad
from tinypytorch.cuda import get_array_module

try:  # step 25: optional, like the `dot` program it drives; get_dot_graph needs neither
    import graphviz
except ImportError:
    graphviz = None


def numerical_diff(f, x, eps=1e-4):
    """Central-difference gradient of `f(x).sum()` with respect to every element of `x`.

    `f` maps a Variable to a Variable; `x` is a Variable or an array. The result is a
    float64 array shaped like `x`: element i is (F(x + eps e_i) - F(x - eps e_i)) / (2 eps)
    with F = sum of f's output, which is what backward computes when seeded with ones.
    The error is O(eps^2) from the Taylor series plus about 1e-16 * |F| / eps from rounding.
    """
    x = as_variable(x, "numerical_diff")
    xp = get_array_module(x)
    data = x.data.astype(xp.float64)  # a copy, in floating point, that we may perturb
    grad = xp.zeros_like(data)

    def total(array):
        return float(f(Variable(array.copy())).data.sum())

    with no_grad():  # only values are needed: record no graph
        for index in np.ndindex(data.shape):
            original = float(data[index])
            data[index] = original + eps
            forward = total(data)
            data[index] = original - eps
            back = total(data)
            data[index] = original
            grad[index] = (forward - back) / (2 * eps)
    return grad


def gradient_check(f, x, rtol=1e-6, atol=1e-8):
    """True when backward's gradient of `f(x).sum()` matches `numerical_diff` within rtol/atol.

    `x` is not modified: the backward pass runs on a fresh Variable holding the same data.
    """
    x = Variable(as_variable(x, "gradient_check").data)
    f(x).backward()
    xp = get_array_module(x)
    return bool(xp.allclose(x.grad, numerical_diff(f, x), rtol=rtol, atol=atol))


# ----- drawing the graph (step 25) -------------------------------------------------------
# DeZero's shapes (a Variable is an ellipse, a Function a box) with torchviz's colours.

GRAPH_STYLE = {
    "leaf": "shape=ellipse, fillcolor=lightblue",  # made by the user, not by a Function; gets a .grad
    "constant": 'shape=ellipse, fillcolor=white, style="filled,dashed"',  # a leaf with requires_grad=False
    "intermediate": "shape=ellipse, fillcolor=white",
    "output": "shape=ellipse, fillcolor=darkolivegreen1",  # the Variable(s) the graph was drawn from
    "function": "shape=box, fillcolor=lightgrey",
}


def functions_in_graph(y):
    """Every Function that `y` depends on, in the order a walk from `y.creator` first meets them (step 24)."""
    found, seen, todo = [], set(), [y.creator]
    while todo:  # step 08: a loop, so any depth will do
        f = todo.pop()
        if f is not None and f not in seen:
            seen.add(f)
            found.append(f)
            todo.extend(x.creator for x in f.inputs)
    return found


def _dot_string(lines):
    """A DOT string literal: quotes and backslashes escaped, lines joined by DOT's `\\n`."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def _variable_label(v, verbose):
    lines = []
    if v.name is not None:
        lines.append(str(v.name))
    elif v.creator is None and v.data is not None and v.data.ndim == 0:
        lines.append(f"{v.data.item():g}")  # a number from the formula, such as the 14 in 14 * x
    if verbose and v.data is not None:
        lines.append(f"{v.shape} {v.dtype}")
    return _dot_string(lines)


def get_dot_graph(y, verbose=False):
    """The graph that computed `y` (a Variable or a list of them), as Graphviz DOT text.

    The walk starts at the outputs and takes Functions first in, first out: for each, its
    outputs (weak references; one that no longer exists is skipped) and its inputs, queueing
    the inputs' creators. Nodes are numbered n0, n1, ... as the walk first meets them, so the
    same graph gives the same text on every run. `verbose` adds each Variable's shape and dtype.
    """
    outputs = list(y) if isinstance(y, (list, tuple)) else [y]
    if not outputs:
        raise ValueError("get_dot_graph: no output Variable to draw from")
    for v in outputs:
        if not isinstance(v, Variable):
            raise TypeError(f"get_dot_graph: expected a Variable or a list of Variables, got {type(v).__name__}")

    ids, met, lines = {}, [], []  # met keeps every node alive, so no id() is reused during the walk
    output_ids = {id(v) for v in outputs}

    def node(obj, kind, label):
        """The DOT id of `obj`; on first meeting, also the line that declares it."""
        if id(obj) not in ids:
            ids[id(obj)] = f"n{len(ids)}"  # never id(obj): that changes from run to run
            met.append(obj)
            lines.append(f"  {ids[id(obj)]} [label={label}, {GRAPH_STYLE[kind]}]")
        return ids[id(obj)]

    def variable(v):
        if id(v) in output_ids:
            kind = "output"
        elif v.creator is not None:
            kind = "intermediate"
        else:
            kind = "leaf" if v.requires_grad else "constant"  # step 33: no gradient flows to a constant
        return node(v, kind, _variable_label(v, verbose))

    queue, queued = collections.deque(), set()

    def enqueue(f):
        if f is not None and f not in queued:  # a Function with several consumers is drawn once
            queued.add(f)
            queue.append(f)

    for v in outputs:
        variable(v)
        enqueue(v.creator)
    while queue:
        f = queue.popleft()
        f_id = node(f, "function", _dot_string([type(f).__name__]))
        for ref in f.outputs:
            out = ref()
            if out is not None:
                out_id = variable(out)
                lines.append(f"  {f_id} -> {out_id}")
        for x in f.inputs:
            x_id = variable(x)
            lines.append(f"  {x_id} -> {f_id}")  # once per use: add(x, x) draws two arrows
            enqueue(x.creator)
    header = '  node [style=filled, fontname="Helvetica", fontsize=10, height=0.3]'
    return "\n".join(["digraph g {", header, *lines, "}"]) + "\n"


def missing_drawing_tools():
    """Why Graphviz cannot draw here (the `dot` program or the graphviz package is missing), or None."""
    if shutil.which("dot") is None:
        return "the Graphviz program 'dot' is not on PATH (apt install graphviz, or brew install graphviz)"
    if graphviz is None:
        return "the graphviz Python package is not installed (pip install graphviz)"
    return None


_Source = graphviz.Source if graphviz is not None else object


class DotGraph(_Source):
    """What plot_dot_graph returns: DOT text that Jupyter shows as a picture when Graphviz can draw it.

    A graphviz.Source, with two changes. Its repr has no memory address. And its display always
    holds the DOT text as text/plain, with the SVG picture added only when `dot` is installed:
    without Graphviz a notebook shows the text, and the output a notebook test compares
    (text/plain; pictures are not compared) is the same on every machine.
    """

    def __init__(self, source):
        if _Source is object:  # no graphviz package: a holder of the text
            self.source = source
        else:
            super().__init__(source)

    def __repr__(self):
        text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', self.source)  # labels may hold anything: blank them
        nodes = re.findall(r"^\s*(?!(?:node|edge|graph)\b)\w+\s*\[", text, flags=re.MULTILINE)
        return f"DotGraph({len(nodes)} nodes, {text.count('->')} edges)"

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        bundle = {"text/plain": self.source}
        if missing_drawing_tools() is None:
            bundle.update(super()._repr_mimebundle_(include, exclude, **kwargs))
        return bundle


_FILE_FORMATS = (".png", ".svg", ".pdf")  # to_file's suffix names the format Graphviz writes


def plot_dot_graph(y, verbose=False, to_file=None):
    """Draw the graph of `y` with Graphviz: returns a DotGraph, which Jupyter shows inline.

    Jupyter shows the picture when the Graphviz program `dot` is installed, and the DOT text of
    get_dot_graph when it is not. With `to_file` the drawing is also written there, in the format
    its suffix names (.png, .svg or .pdf), by `dot` run without a shell; without `dot` a
    UserWarning says what to install and that the file was not written.
    """
    if to_file is not None:
        to_file = pathlib.Path(to_file)
        if to_file.suffix.lower() not in _FILE_FORMATS:
            raise ValueError(f"plot_dot_graph: to_file must end in .png, .svg or .pdf, got {to_file.name!r}")
    graph = DotGraph(get_dot_graph(y, verbose))
    if to_file is not None:
        missing = missing_drawing_tools()
        if missing is None:
            to_file.write_bytes(graph.pipe(format=to_file.suffix[1:].lower()))
        else:
            warnings.warn(f"plot_dot_graph: cannot draw: {missing}; {to_file} was not written", UserWarning,
                          stacklevel=2)
    return graph
