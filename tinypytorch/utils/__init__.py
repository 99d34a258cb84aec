"""Tools around the graph: numerical gradients (step 10) and drawings of the graph (step 25)."""
import collections
import pathlib
import re
import shutil
import warnings

import numpy as np

from tinypytorch import autograd
from tinypytorch.core import Function, Variable, as_variable
from tinypytorch.grad_mode import no_grad
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
    f(x).sum().backward()
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
    "saved": "shape=note, fillcolor=orange",  # step 35: a tensor a function keeps for backward
}


def functions_in_graph(y):
    """Every Function that `y` depends on, in the order a walk from `y.creator` first meets them (step 24)."""
    found, seen, todo = [], set(), [y.creator]
    while todo:  # step 08: a loop, so any depth will do
        f = todo.pop()
        if isinstance(f, Function) and f not in seen:
            seen.add(f)
            found.append(f)
            todo.extend(node for node, _ in f.edges)  # step 35: a leaf or None ends the walk there
    return found


def saved_tensors(y):
    """What the graph behind `y` keeps for backward (step 35): (function, SavedTensor) pairs, in walk order."""
    return [(f, s) for f in functions_in_graph(y) for s in f.saved if isinstance(s, autograd.graph.SavedTensor)]


def _dot_string(lines):
    """A DOT string literal: quotes and backslashes escaped, lines joined by DOT's `\\n`."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def _label(name, shape, dtype, number, verbose):
    """A variable's label: its name, else the number it holds (a 0-d leaf: the 14 in 14 * x); verbose adds shape and dtype."""
    lines = [str(name)] if name is not None else [] if number is None else [f"{number:g}"]
    if verbose and shape is not None:
        lines.append(f"{shape} {dtype}")
    return _dot_string(lines)


def _variable_label(v, verbose):
    number = v.data.item() if v.creator is None and v.data is not None and v.data.ndim == 0 else None
    return _label(v.name, None if v.data is None else v.shape, None if v.data is None else v.dtype, number, verbose)


def _saved_label(saved):
    """A saved tensor in a drawing (step 35): its shape, dtype and bytes, or that it was freed."""
    if saved.freed:
        return _dot_string(["saved", "freed"])
    if saved.unpack_hook is not None:
        return _dot_string(["saved", "packed by a hook"])
    if saved.variable is None:  # an output of the function, kept as its array
        title, data = "saved output", saved.data
    else:
        title, data = "saved" if saved.variable.name is None else f"saved {saved.variable.name}", saved.variable.data
    return _dot_string([title, f"{data.shape} {data.dtype}", f"{data.nbytes:,} bytes"])


def get_dot_graph(y, verbose=False, show_saved=False):
    """The graph that computed `y` (a Variable or a list of them), as Graphviz DOT text.

    The walk starts at the outputs and takes Functions first in, first out: for each, its
    outputs and its inputs, following its edges (step 35) and queueing the functions they go
    to. Nodes are numbered n0, n1, ... as the walk first meets them, so the same graph gives
    the same text on every run. An intermediate variable that no longer exists is drawn
    without a name, from what its creator recorded of it. `verbose` adds each Variable's
    shape and dtype; `show_saved` draws the tensors each function saved for backward, with
    their bytes, and the total the graph holds (step 35).
    """
    outputs = list(y) if isinstance(y, (list, tuple)) else [y]
    if not outputs:
        raise ValueError("get_dot_graph: no output Variable to draw from")
    for v in outputs:
        if not isinstance(v, Variable):
            raise TypeError(f"get_dot_graph: expected a Variable or a list of Variables, got {type(v).__name__}")

    ids, lines = {}, []  # node key -> DOT id; a key is a Function, a leaf, a (function, output) or a constant

    def node(key, kind, label):
        """The DOT id of `key`; on first meeting, also the line that declares it."""
        if key not in ids:
            ids[key] = f"n{len(ids)}"  # never id(obj): that changes from run to run
            lines.append(f"  {ids[key]} [label={label}, {GRAPH_STYLE[kind]}]")
        return ids[key]

    def key_of(v):
        return (v.creator, v.output_nr) if v.creator is not None else v

    output_keys = {key_of(v) for v in outputs}

    def variable(v):  # a Variable that exists
        key = key_of(v)
        if key in output_keys:
            kind = "output"
        elif v.creator is not None:
            kind = "intermediate"
        else:
            kind = "leaf" if v.requires_grad else "constant"  # step 33: no gradient flows to a constant
        return node(key, kind, _variable_label(v, verbose))

    def output_of(f, nr):  # output nr of f, which may no longer exist (step 35)
        v = f.outputs[nr]()
        if v is not None:
            return variable(v)
        shape, dtype = f.output_meta[nr]
        return node((f, nr), "output" if (f, nr) in output_keys else "intermediate",
                    _label(None, shape, dtype, None, verbose))

    def input_of(f, i):
        node_, nr = f.edges[i]
        if node_ is None:  # a constant: the function kept only what it looked like
            c = f.constants[i]
            return node(c, "constant", _label(c.name, c.shape, c.dtype, c.value, verbose))
        return output_of(node_, nr) if isinstance(node_, Function) else variable(node_)

    queue, queued = collections.deque(), set()

    def enqueue(f):
        if isinstance(f, Function) and f not in queued:  # a Function with several consumers is drawn once
            queued.add(f)
            queue.append(f)

    saved_count, saved_arrays = 0, {}
    for v in outputs:
        variable(v)
        enqueue(v.creator)
    while queue:
        f = queue.popleft()
        f_id = node(f, "function", _dot_string([type(f).__name__]))
        for nr, ref in enumerate(f.outputs):
            if ref() is not None or (f, nr) in ids:  # an output that exists, or that a drawn function used
                lines.append(f"  {f_id} -> {output_of(f, nr)}")
        for i, (node_, _) in enumerate(f.edges):
            lines.append(f"  {input_of(f, i)} -> {f_id}")  # once per use: add(x, x) draws two arrows
            enqueue(node_)
        if show_saved:
            for saved in f.saved:
                if isinstance(saved, autograd.graph.SavedTensor):
                    saved_count += 1
                    s_id = node(saved, "saved", _saved_label(saved))
                    lines.append(f"  {s_id} -> {f_id} [style=dashed]")
                    data = None if saved.freed else saved.data if saved.variable is None else saved.variable.data
                    if data is not None:
                        saved_arrays[id(data)] = data  # an array saved twice (x * x) is held once
    header = '  node [style=filled, fontname="Helvetica", fontsize=10, height=0.3]'
    if show_saved:
        held = sum(a.nbytes for a in saved_arrays.values())
        header += f'\n  graph [label="saved for backward: {saved_count} tensors holding {held:,} bytes", fontname="Helvetica"]'
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


def plot_dot_graph(y, verbose=False, to_file=None, show_saved=False):
    """Draw the graph of `y` with Graphviz: returns a DotGraph, which Jupyter shows inline.

    Jupyter shows the picture when the Graphviz program `dot` is installed, and the DOT text of
    get_dot_graph when it is not (`verbose`, `show_saved`: as there). With `to_file` the drawing
    is also written there, in the format its suffix names (.png, .svg or .pdf), by `dot` run
    without a shell; without `dot` a UserWarning says what to install and that the file was
    not written.
    """
    if to_file is not None:
        to_file = pathlib.Path(to_file)
        if to_file.suffix.lower() not in _FILE_FORMATS:
            raise ValueError(f"plot_dot_graph: to_file must end in .png, .svg or .pdf, got {to_file.name!r}")
    graph = DotGraph(get_dot_graph(y, verbose, show_saved))
    if to_file is not None:
        missing = missing_drawing_tools()
        if missing is None:
            to_file.write_bytes(graph.pipe(format=to_file.suffix[1:].lower()))
        else:
            warnings.warn(f"plot_dot_graph: cannot draw: {missing}; {to_file} was not written", UserWarning,
                          stacklevel=2)
    return graph
