"""No label on another, no legend on data, no label on an arrow or a curve: measured, in matplotlib's renderer.

tests/overlaps.py does the measuring (`fig.canvas.draw()`, then the window extents of texts, legends and markers and
the drawn paths of lines, arrows and patch outlines, in pixels). Here: that it finds each kind of fault in a figure
drawn to have it, that it finds nothing in the same figure drawn well, and that the graphs of
tinypytorch.utils.pictures (draw_dag, draw_graph) come out clean, step 33's among them, whose arrow Mul -> w ran
through the Sin box. Every figure of every step's page is measured by
tests/test_page_pictures.py, marked slow since it runs the pages.

What is not measured: the Graphviz pictures (plot_dot_graph: `dot` lays them out, and its SVG is not a matplotlib
figure; these tests need no `dot`); colours and contrast; a label inside a filled cell or bar (how many pictures
name things); see tests/overlaps.py's docstring for the exact rules.
"""
import weakref

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Annotation

import tinypytorch
import tinypytorch.utils.pictures as pictures
from overlaps import overlaps
from tinypytorch import Variable
from tinypytorch.autograd import engine
from tinypytorch.utils.pictures import draw_dag, draw_graph

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def planted(fault=None):
    """A small plot with a curve, an arrow, four labels, a legend and two big markers, each placed clear of the
    rest; `fault` moves one thing onto another."""
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.linspace(0, 10, 50)
    ax.plot(x, x, color="C0", label="y = x")
    ax.plot([2], [8], "*", ms=14, color="C1", label="a star")
    ax.plot([2.35 if fault == "markers" else 4], [8], "*", ms=14, color="C2", label="another star")
    ax.annotate("", xy=(9, 1), xytext=(6, 1), arrowprops=dict(arrowstyle="->"))
    ax.text(7.5, 1.3, "an arrow", ha="center")
    ax.text(*((7.5, 1) if fault == "arrow" else (7.5, 0.5)), "on the arrow?", ha="center", va="center")
    ax.text(*((5, 5.2) if fault == "curve" else (8.5, 2.3)), "on the curve?", ha="center", va="center")
    ax.text(1, 9.4, "one label")
    ax.text(*((1.3, 9.3) if fault == "text" else (5, 9.4)), "another label")
    ax.legend(loc=(0.02, 0.6) if fault == "legend" else (0.65, 0.3))
    ax.set(xlim=(0, 10), ylim=(0, 10))
    return fig


@pytest.mark.parametrize("fault, expected", [
    ("text", "text on text: 'one label'"),
    ("curve", "label on a line: 'on the curve?'"),
    ("arrow", "label on a line: 'on the arrow?'"),
    ("legend", "legend on data"),
    ("markers", "markers on each other"),
])
def test_each_planted_overlap_is_reported_and_the_clean_figure_passes(fault, expected):
    assert overlaps(planted()) == []
    found = overlaps(planted(fault))
    assert len(found) >= 1 and any(line.startswith(expected) for line in found), found


def test_touching_is_not_overlapping_and_one_point_drawn_twice_is_no_fault():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 0], color="k")
    ax.text(0.5, 0, "on top of the line", va="bottom", ha="center")  # its box sits on the line, not across it
    ax.plot([0.5], [0.5], "o", ms=12, color="C0")
    ax.plot([0.5], [0.5], "x", ms=12, mew=2, color="C3")  # two programs' equal results, one over the other
    ax.set(xlim=(-0.1, 1.1), ylim=(-0.5, 1))
    assert overlaps(fig) == []


def step_33_graph():
    """The nodes, edges and notes of step 33's picture of y = ab + a, a = w sin x, b = exp(x - w), built by the
    package's engine as the page builds them."""
    x, w = Variable(np.array(0.5), name="x"), Variable(np.array(1.5), name="w")
    a = tinypytorch.sin(x) * w
    y = a * tinypytorch.exp(x - w) + a
    counts = engine.count_dependencies([y])
    add = y.creator
    names = {x: "leaf x", w: "leaf w", add: "Add (ab + a)", add.edges[0][0]: "Mul (a * b)",
             add.edges[1][0]: "Mul (a = w sin x)"}
    nodes = {n: ("leaf" if isinstance(n, Variable) else "function", names.get(n, type(n).__name__)) for n in counts}
    edges = [(f, n) for f in counts if not isinstance(f, Variable) for n, _ in f.edges if n is not None]
    notes = {n: f"count {k}" for n, k in counts.items()}
    return nodes, edges, notes


def test_step_33s_arrow_mul_to_w_bends_over_the_sin_box(monkeypatch):
    nodes, edges, notes = step_33_graph()
    fig, ax = plt.subplots(figsize=(10, 3.2))
    draw_dag(nodes, edges, ax=ax, notes=notes)
    assert overlaps(fig) == []
    bends = {(nodes[a][1], nodes[b][1]): arrow.arrow_patch.get_connectionstyle().rad
             for (a, b), arrow in zip(edges, [t for t in ax.texts if isinstance(t, Annotation)], strict=True)}
    assert {edge: rad for edge, rad in bends.items() if rad} == {("Mul (a = w sin x)", "leaf w"): -0.15}  # up

    monkeypatch.setattr(pictures, "_bend", lambda *args: 0.0)  # every arrow straight, as before: one through Sin
    fig, ax = plt.subplots(figsize=(10, 3.2))
    draw_dag(nodes, edges, ax=ax, notes=notes)
    assert [line.split(" at ")[0] for line in overlaps(fig)] == ["label on a line: 'Sin'"]


SHAPES = {
    "a chain": ({"x": ("leaf", "x"), "f": ("function", "Square"), "y": ("output", "y")}, [("x", "f"), ("f", "y")]),
    "a diamond": ({"x": ("leaf", "x"), "f": ("function", "Square"), "a": ("variable", "a"),
                   "g": ("function", "Square"), "h": ("function", "Square"), "b": ("variable", "b"),
                   "c": ("variable", "c"), "add": ("function", "Add"), "y": ("output", "y")},
                  [("x", "f"), ("f", "a"), ("a", "g"), ("a", "h"), ("g", "b"), ("h", "c"), ("b", "add"),
                   ("c", "add"), ("add", "y")]),
    "a skip over a row": ({"a": ("leaf", "a"), "f": ("function", "Exp"), "b": ("variable", "exp(a)"),
                           "g": ("function", "Exp"), "c": ("variable", "exp(exp(a))"), "add": ("function", "Add"),
                           "y": ("output", "y")},
                          [("a", "f"), ("f", "b"), ("b", "g"), ("g", "c"), ("c", "add"), ("a", "add"),
                           ("add", "y")]),
    "two skips on one row": ({k: ("function", k) for k in "pqrst"},
                             [("p", "q"), ("q", "r"), ("r", "s"), ("s", "t"), ("p", "r"), ("q", "t")]),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_draw_dags_graphs_have_no_label_on_an_arrow(shape):
    nodes, edges = SHAPES[shape]
    positions = {node: (k, 0.0) for k, node in enumerate(nodes)} if shape == "two skips on one row" else None
    ax = draw_dag(nodes, edges, positions=positions, title=shape, notes={edges[0][1]: "1st", edges[-1][0]: "last"},
                  edge_labels={edges[0]: "forward"})
    assert overlaps(ax.figure) == []


class Var:
    """A variable as steps 07-22 have them: a creator, and a name from step 19 on."""

    def __init__(self, name, creator=None):
        self.name, self.creator = name, creator


class Func:
    """A function as steps 07-22 have them: its inputs, and weak references to its outputs."""

    def __init__(self, *inputs):
        self.inputs, self.outputs = list(inputs), []

    def __call__(self, name):
        out = Var(name, self)
        self.outputs.append(weakref.ref(out))
        return out


class Square(Func):
    pass


class Add(Func):
    pass


def test_draw_graph_of_step_16s_diamond_with_notes_has_no_overlap():
    x = Var("x")
    a = Square(x)("a")
    b, c = Square(a)("b"), Square(a)("c")
    y = Add(b, c)("y")
    ax = draw_graph(y, notes={y.creator: "gen 2, 1st", b.creator: "gen 1, 2nd", c.creator: "gen 1, 3rd",
                              a.creator: "gen 0, 4th"}, title="y = a² + a²")
    assert len([t for t in ax.texts if isinstance(t, Annotation)]) == 9  # an arrow per edge
    assert overlaps(ax.figure) == []
