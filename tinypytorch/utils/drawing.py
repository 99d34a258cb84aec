"""Drawing the graph (step 25): DOT text of the graph behind a Variable, and Graphviz pictures of it.

DeZero's shapes (a Variable is an ellipse, a Function a box) with torchviz's colours.
"""
import collections
import pathlib
import re
import shutil
import warnings

from tinypytorch import autograd
from tinypytorch.core import Function, Variable

try:  # optional, like the `dot` program it drives; get_dot_graph needs neither
    import graphviz
except ImportError:
    graphviz = None

GRAPH_STYLE = {
    "leaf": "shape=ellipse, fillcolor=lightblue",  # made by the user, not by a Function; gets a .grad
    "constant": 'shape=ellipse, fillcolor=white, style="filled,dashed"',  # a leaf with requires_grad=False
    "intermediate": "shape=ellipse, fillcolor=white",
    "output": "shape=ellipse, fillcolor=darkolivegreen1",  # the Variable(s) the graph was drawn from
    "function": "shape=box, fillcolor=lightgrey",
    "saved": "shape=note, fillcolor=orange",  # step 35: a tensor a function keeps for backward
}


def _dot_string(lines):
    """A DOT string literal: quotes and backslashes escaped, lines joined by DOT's `\\n`."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def _label(name, shape, dtype, number, verbose):
    """A variable's label: its name, else the number it holds (a 0-d leaf: the 14 in 14 * x).

    `verbose` adds its shape and dtype.
    """
    lines = [str(name)] if name is not None else [] if number is None else [f"{number:g}"]
    if verbose and shape is not None:
        lines.append(f"{shape} {dtype}")
    return _dot_string(lines)


def _variable_label(v, verbose):
    number = v.data.item() if v.creator is None and v.data is not None and v.data.ndim == 0 else None
    # the array's dtype, NumPy's short name (float32): a label, not a repr (which prints torch.float32)
    return _label(v.name, None if v.data is None else tuple(v.shape), None if v.data is None else v.data.dtype, number,
                  verbose)


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


def _key_of(v):
    """What identifies a variable's node: its creator and output number (the variable may be freed), or the leaf."""
    return (v.creator, v.output_nr) if v.creator is not None else v


class _DotNodes:
    """The nodes and arrows written so far, and the DOT id of each node, given the first time it is met.

    A node's key is a Function, a leaf, a (function, output number) or a constant. Ids are n0, n1, ...
    in that order, never id(obj): that changes from run to run.
    """

    def __init__(self, outputs, verbose):
        self.ids, self.lines, self.verbose = {}, [], verbose
        self.output_keys = {_key_of(v) for v in outputs}

    def node(self, key, kind, label):
        """The DOT id of `key`; on first meeting, also the line that declares it."""
        if key not in self.ids:
            self.ids[key] = f"n{len(self.ids)}"
            self.lines.append(f"  {self.ids[key]} [label={label}, {GRAPH_STYLE[kind]}]")
        return self.ids[key]

    def arrow(self, tail, head, attributes=""):
        self.lines.append(f"  {tail} -> {head}{attributes}")

    def variable(self, v):
        """The node of a Variable that exists."""
        key = _key_of(v)
        if key in self.output_keys:
            kind = "output"
        elif v.creator is not None:
            kind = "intermediate"
        else:
            kind = "leaf" if v.requires_grad else "constant"  # step 33: no gradient flows to a constant
        return self.node(key, kind, _variable_label(v, self.verbose))

    def output_of(self, f, nr):
        """The node of output `nr` of `f`, which may no longer exist (step 35): then drawn from f's record of it."""
        v = f.outputs[nr]()
        if v is not None:
            return self.variable(v)
        shape, dtype = f.output_meta[nr]
        kind = "output" if (f, nr) in self.output_keys else "intermediate"
        return self.node((f, nr), kind, _label(None, shape, dtype, None, self.verbose))

    def input_of(self, f, i):
        """The node of input `i` of `f`: the output of another function, a leaf, or a constant."""
        source, nr = f.edges[i]
        if source is None:  # a constant: the function kept only what it looked like
            c = f.constants[i]
            return self.node(c, "constant", _label(c.name, c.shape, c.dtype, c.value, self.verbose))
        return self.output_of(source, nr) if isinstance(source, Function) else self.variable(source)


def _functions_first_in_first_out(outputs):
    """The Functions behind `outputs`, first in, first out from their creators, following edges (step 35).

    Each is met once however many functions use it; the queue's order never depends on memory addresses.
    """
    queue, seen = collections.deque(v.creator for v in outputs), set()
    while queue:
        f = queue.popleft()
        if isinstance(f, Function) and f not in seen:
            seen.add(f)
            yield f
            queue.extend(source for source, _ in f.edges)


def _draw_function(nodes, f):
    """f's box, an arrow to each output that exists or that a drawn function used, and one from each input."""
    f_id = nodes.node(f, "function", _dot_string([type(f).__name__]))
    for nr, ref in enumerate(f.outputs):
        if ref() is not None or (f, nr) in nodes.ids:
            nodes.arrow(f_id, nodes.output_of(f, nr))
    for i in range(len(f.edges)):
        nodes.arrow(nodes.input_of(f, i), f_id)  # once per use: add(x, x) draws two arrows
    return f_id


def _saved_by(f):
    """The tensors f saved for backward (step 35)."""
    return [s for s in f.saved if isinstance(s, autograd.graph.SavedTensor)]


def _draw_saved(nodes, f, f_id):
    """A note for each tensor f saved for backward, with a dashed arrow to f (step 35)."""
    for saved in _saved_by(f):
        nodes.arrow(nodes.node(saved, "saved", _saved_label(saved)), f_id, " [style=dashed]")


def _saved_summary(functions):
    """The drawing's caption with show_saved (step 35): how many tensors the functions saved, and the bytes held."""
    saved = [s for f in functions for s in _saved_by(f)]
    arrays = {}
    for s in saved:
        data = None if s.freed else s.data if s.variable is None else s.variable.data
        if data is not None:
            arrays[id(data)] = data  # an array saved twice (x * x) is held once
    held = sum(a.nbytes for a in arrays.values())
    return f'  graph [label="saved for backward: {len(saved)} tensors holding {held:,} bytes", fontname="Helvetica"]'


def _outputs_to_draw(y):
    outputs = list(y) if isinstance(y, (list, tuple)) else [y]
    if not outputs:
        raise ValueError("get_dot_graph: no output Variable to draw from")
    for v in outputs:
        if not isinstance(v, Variable):
            raise TypeError(f"get_dot_graph: expected a Variable or a list of Variables, got {type(v).__name__}")
    return outputs


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
    outputs = _outputs_to_draw(y)
    nodes = _DotNodes(outputs, verbose)
    for v in outputs:
        nodes.variable(v)
    functions = []
    for f in _functions_first_in_first_out(outputs):
        f_id = _draw_function(nodes, f)
        if show_saved:  # step 35: the tensors each function saved
            _draw_saved(nodes, f, f_id)
        functions.append(f)
    header = ['  node [style=filled, fontname="Helvetica", fontsize=10, height=0.3]']
    if show_saved:  # step 35: the bytes the saved tensors hold
        header.append(_saved_summary(functions))
    return "\n".join(["digraph g {", *header, *nodes.lines, "}"]) + "\n"


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
