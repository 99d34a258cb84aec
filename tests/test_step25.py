"""Step 25: get_dot_graph and plot_dot_graph (tinypytorch/utils/drawing.py).

Expected DOT text comes from a golden file that was read line by line against the formula;
expected counts come from the formula's source text; the structure of a graph is compared
with the backward graph PyTorch records for the same expression.
"""
import collections
import inspect
import pathlib
import re
import shutil
import subprocess

import graphviz
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import TwoOutputs, evaluate, floats, operation_lists
from steploader import load_step
from tinypytorch import Variable, utils
from tinypytorch.utils import DotGraph, get_dot_graph, plot_dot_graph

pytestmark = [pytest.mark.step25, pytest.mark.torch]
step = load_step(25)
GOLDEN = pathlib.Path(__file__).parent / "golden" / "goldstein_price.dot"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz program `dot` is not installed")

NODE = re.compile(r'^  (n\d+) \[label="((?:[^"\\]|\\.)*)", shape=(\w+), fillcolor=(\w+)(, style="filled,dashed")?\]$')
EDGE = re.compile(r"^  (n\d+) -> (n\d+)$")


def parse(text):
    """(nodes: id -> (label, shape, colour) in declaration order, edges: [(tail, head)]); every line must parse.

    A dashed outline is part of the colour: "white dashed".
    """
    lines = text.splitlines()
    assert lines[0] == "digraph g {" and lines[1].startswith("  node [") and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[2:-1]:
        if match := NODE.match(line):
            assert match[1] not in nodes, f"{match[1]} declared twice"
            nodes[match[1]] = (match[2], match[3], match[4] + (" dashed" if match[5] else ""))
        else:
            match = EDGE.match(line)
            assert match, f"unexpected line {line!r}"
            assert match[1] in nodes and match[2] in nodes, f"edge {line!r} before its nodes are declared"
            edges.append(match.group(1, 2))
    assert list(nodes) == [f"n{i}" for i in range(len(nodes))], "ids are n0, n1, ... in declaration order"
    return nodes, edges


def goldstein_price_graph(a=1.0, b=1.0):
    x, y = Variable(np.array(a), name="x"), Variable(np.array(b), name="y")
    z = step.goldstein_price(x, y)
    z.name = "z"
    return x, y, z


# ----- the golden DOT text of Goldstein-Price ----------------------------------------------

def test_goldstein_price_dot_text_equals_the_golden_file():
    assert get_dot_graph(goldstein_price_graph()[2]) == GOLDEN.read_text()


def test_golden_file_has_the_nodes_and_edges_the_formula_implies():
    source = inspect.getsource(step.goldstein_price).split("return", 1)[1]
    powers = source.count("**")
    operators = {"Add": source.count("+"), "Sub": source.count(" - "),
                 "Mul": source.count("*") - 2 * powers, "Pow": powers}
    assert operators == {"Add": 10, "Sub": 5, "Mul": 17, "Pow": 6}  # what the step's prose says
    numbers = re.findall(r"(?<![*\w.])\d+(?!\w)", source.replace("**2", ""))
    nodes, edges = parse(GOLDEN.read_text())
    boxes = {n: label for n, (label, shape, _) in nodes.items() if shape == "box"}
    ellipses = {n: label for n, (label, shape, _) in nodes.items() if shape == "ellipse"}
    assert collections.Counter(boxes.values()) == operators
    constants = sorted(label for label in ellipses.values() if label not in ("", "x", "y", "z"))
    assert constants == sorted(numbers) and len(numbers) == 17
    functions = sum(operators.values())
    assert len(ellipses) == 2 + len(numbers) + functions  # x, y, the numbers, one output per function
    assert len(nodes) == 95
    # one arrow to each function's output, one from each input: binary operators have two, Pow one
    assert len(edges) == functions + 2 * (functions - powers) + powers == 108
    tails = collections.Counter(tail for tail, _ in edges)
    assert tails[_id(nodes, "x")] == source.count("x") and tails[_id(nodes, "y")] == source.count("y")


def _id(nodes, label):
    (node,) = [n for n, (text, _, _) in nodes.items() if text == label]
    return node


def test_golden_file_colours_leaves_output_intermediates_and_functions():
    nodes, edges = parse(GOLDEN.read_text())
    produced = {head for tail, head in edges if nodes[tail][1] == "box"}
    for node, (label, shape, colour) in nodes.items():
        if shape == "box":
            assert colour == "lightgrey"
        elif label == "z":
            assert colour == "darkolivegreen1" and node == "n0"
        elif node in produced:
            assert colour == "white" and label == ""
        elif label in ("x", "y"):
            assert colour == "lightblue"  # leaves that get a gradient
        else:
            assert colour == "white dashed" and float(label)  # the numbers: requires_grad=False


@needs_dot
def test_golden_file_is_valid_dot():
    layout = graphviz.Source(GOLDEN.read_text()).pipe(format="plain", encoding="utf-8")
    assert layout.count("\nnode ") == 95 and layout.count("\nedge ") == 108


# ----- the same structure as PyTorch's graph -------------------------------------------------

TORCH_KIND = {"AddBackward0": "Add", "SubBackward0": "Sub", "RsubBackward1": "Sub", "MulBackward0": "Mul",
              "DivBackward0": "Div", "NegBackward0": "Neg", "PowBackward0": "Pow", "ExpBackward0": "Exp",
              "SinBackward0": "Sin"}


def operations_in_dot(text, leaves):
    """Per Function box in DOT order: its label and, per input, the box that made it or the leaf's label."""
    nodes, edges = parse(text)
    boxes = [n for n, (_, shape, _) in nodes.items() if shape == "box"]
    made_by = {head: tail for tail, head in edges if tail in boxes}
    return [(nodes[box][0], [boxes.index(made_by[v]) if v in made_by else nodes[v][0]
                             for v, head in edges if head == box and (v in made_by or nodes[v][0] in leaves)])
            for box in boxes]


def operations_in_torch(output, names):
    nodes = [output.grad_fn]
    for node in nodes:  # the list grows while we walk it: a queue
        for n, _ in node.next_functions:
            if n is not None and n not in nodes:
                nodes.append(n)
    functions = [n for n in nodes if type(n).__name__ != "AccumulateGrad"]
    return [(TORCH_KIND[type(f).__name__], [names[id(n.variable)] if type(n).__name__ == "AccumulateGrad"
                                            else functions.index(n) for n, _ in f.next_functions if n is not None])
            for f in functions]


def test_goldstein_price_dot_has_torchs_operations_and_wiring():
    z = goldstein_price_graph()[2]
    xt, yt = (torch.tensor(1.0, dtype=torch.float64, requires_grad=True) for _ in range(2))
    zt = step.goldstein_price(xt, yt)
    expected = operations_in_torch(zt, {id(xt): "x", id(yt): "y"})
    assert len(expected) == 38
    assert operations_in_dot(get_dot_graph(z), {"x", "y"}) == expected


UNARY = {
    "neg": lambda m, a: -a,
    "exp": lambda m, a: m.exp(a * 0.25),  # two operations: Mul by a number, then Exp
    "sin": lambda m, a: m.sin(a),
    "pow3": lambda m, a: a**3,
    "a + 1.5": lambda m, a: a + 1.5,
    "1.5 - a": lambda m, a: 1.5 - a,
    "2 * a": lambda m, a: 2.0 * a,
}
BINARY = {"add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
          "div": lambda m, a, b: a / b}


@st.composite
def expression_graphs(draw):
    """2-3 named leaves and operations that pick their operands among all earlier nodes (shared, reused)."""
    count = draw(st.integers(2, 3))
    inputs = [draw(arrays(np.float64, (2,), elements=floats(0.5, 2.0))) for _ in range(count)]
    return inputs, draw(operation_lists(UNARY, BINARY, max_size=12))


@given(expression_graphs())
def test_random_graphs_dot_has_torchs_operations_wiring_and_grads(graph):
    inputs, operations = graph
    names = [f"x{i}" for i in range(len(inputs))]
    leaves = [Variable(a.copy(), name=n) for a, n in zip(inputs, names)]
    tensors = [torch.tensor(a, requires_grad=True) for a in inputs]
    with np.errstate(all="ignore"):  # x / (x - x) is inf in both frameworks: the structure is still compared
        out = evaluate(tinypytorch, leaves, operations, UNARY, BINARY)[-1]
        out_t = evaluate(torch, tensors, operations, UNARY, BINARY)[-1]
        expected = operations_in_torch(out_t, {id(t): n for t, n in zip(tensors, names)})
        assert operations_in_dot(get_dot_graph(out), set(names)) == expected
        # drawing changes nothing: backward still gives torch's gradients
        out.sum().backward()
        out_t.backward(torch.ones_like(out_t))
    finite = [t.grad for t in tensors if t.grad is not None and torch.isfinite(t.grad).all()]
    scale = max([1.0] + [float(g.abs().max()) for g in finite])  # cancellation leaves rounding at this scale
    for leaf, t in zip(leaves, tensors):
        if t.grad is None:
            assert leaf.grad is None
        elif torch.isfinite(t.grad).all():
            np.testing.assert_allclose(leaf.grad, t.grad.numpy(), rtol=1e-10, atol=1e-12 * scale)


# ----- determinism, labels, shapes of graphs ----------------------------------------------------

def test_the_text_is_the_same_for_every_build_of_the_same_graph():
    texts = {get_dot_graph(goldstein_price_graph(a, b)[2]) for a, b in [(1.0, 1.0), (0.3, -1.2), (1.0, 1.0)]}
    assert len(texts) == 1  # values are not in the labels; ids do not depend on memory addresses


def test_step_16_example_nodes_edges_and_labels():
    x = Variable(np.array(2.0), name="x")
    a = tinypytorch.square(x)
    a.name = "a"
    y = tinypytorch.square(a) + tinypytorch.square(a)
    nodes, edges = parse(get_dot_graph(y))
    labels = [label for label, _, _ in nodes.values()]
    assert labels == ["", "Add", "", "", "Square", "a", "Square", "Square", "x"]
    assert len(edges) == 9
    assert nodes["n5"][0] == "a" and [tail for tail, _ in edges].count("n5") == 2  # a feeds two Squares


def test_verbose_labels_add_shape_and_dtype():
    x = Variable(np.ones((2, 3), dtype=np.float32), name="x")
    y = tinypytorch.exp(x) * 2.0
    nodes, _ = parse(get_dot_graph(y, verbose=True))
    # the number takes float32, as in torch, where float32 * 2.0 stays float32; a label names a dtype as NumPy does
    # (float32: the label is not a repr, which says torch.float32)
    product = str((torch.ones(2, 3, dtype=torch.float32) * 2.0).dtype).removeprefix("torch.")
    assert [label for label, _, _ in nodes.values()] == [
        f"(2, 3) {product}", "Mul", "(2, 3) float32", f"2\\n() {product}", "Exp", "x\\n(2, 3) float32"]
    plain, _ = parse(get_dot_graph(y))
    assert [label for label, _, _ in plain.values()] == ["", "Mul", "", "2", "Exp", "x"]


def test_a_variable_without_data_and_an_unnamed_array_leaf_are_drawn_with_what_is_known():
    empty = Variable(None)
    nodes, edges = parse(get_dot_graph(empty, verbose=True))
    assert list(nodes.values()) == [("", "ellipse", "darkolivegreen1")] and edges == []
    x = Variable(np.array([1.0, 2.0]))  # an unnamed leaf that is not a number: no label
    nodes, _ = parse(get_dot_graph(tinypytorch.exp(x)))
    assert nodes["n2"] == ("", "ellipse", "lightblue")


@needs_dot
def test_names_with_quotes_and_backslashes_are_escaped_and_survive_the_layout():
    name = 'say "hi" \\ bye'
    x = Variable(np.array(1.0), name=name)
    text = get_dot_graph(tinypytorch.exp(x))
    assert '[label="say \\"hi\\" \\\\ bye", shape=ellipse' in text
    svg = graphviz.Source(text).pipe(format="svg", encoding="utf-8")
    assert ">say &quot;hi&quot; \\ bye</text>" in svg  # the drawn text is the name, one backslash


def test_leaves_that_need_no_gradient_are_drawn_dashed_with_their_name_or_value():
    x = Variable(np.array(1.0), name="x")
    w = Variable(np.array(2.0), name="w", requires_grad=False)
    with tinypytorch.no_grad():
        c = tinypytorch.exp(x)  # made under no_grad: a leaf that records nothing
    nodes, _ = parse(get_dot_graph(x * w + 3 + c))
    colours = {label: colour for label, _, colour in nodes.values() if label not in ("", "Mul", "Add")}
    assert colours == {"x": "lightblue", "w": "white dashed", "3": "white dashed", "2.71828": "white dashed"}


def test_a_variable_used_twice_by_one_function_gets_two_arrows():
    x = Variable(np.array(3.0), name="x")
    nodes, edges = parse(get_dot_graph(x + x))
    assert edges.count(("n2", "n1")) == 2 and nodes["n2"][0] == "x"


def test_a_function_with_two_outputs_draws_both_and_skips_one_that_was_freed():
    x = Variable(np.array(1.0), name="x")
    first, second = TwoOutputs()(x)
    first.name, second.name = "first", "second"
    y = tinypytorch.exp(first)
    nodes, edges = parse(get_dot_graph(y))
    ids = {label: n for n, (label, _, _) in nodes.items()}
    assert nodes[ids["second"]][2] == "white"  # an output of the function, but not the one drawn from
    assert (ids["TwoOutputs"], ids["first"]) in edges and (ids["TwoOutputs"], ids["second"]) in edges
    del second  # only a weak reference to it remains in the graph
    nodes, edges = parse(get_dot_graph(y))  # parse also checks no edge points at an undeclared node
    assert "second" not in [label for label, _, _ in nodes.values()] and len(edges) == 4


def test_several_outputs_are_all_green_and_shared_nodes_drawn_once():
    x = Variable(np.array(1.0), name="x")
    first, second = TwoOutputs()(x)
    nodes, edges = parse(get_dot_graph([tinypytorch.exp(first), second]))
    colours = collections.Counter(colour for _, _, colour in nodes.values())
    assert colours == {"darkolivegreen1": 2, "lightgrey": 2, "white": 1, "lightblue": 1}
    assert len(nodes) == 6 and len(edges) == 5


def test_a_100000_deep_chain_is_walked_without_recursion():
    y = x = Variable(np.array(0.0), name="x")
    for _ in range(100_000):
        y = y + 1.0
    nodes, edges = parse(get_dot_graph(y))
    assert len(nodes) == 1 + 3 * 100_000 and len(edges) == 3 * 100_000  # per Add: a box, a number, an output


def test_legend_in_the_step_uses_the_package_styles():
    styles = dict(re.findall(r'label="(\w+)[^"]*", (shape=.*)\]$', step.legend, flags=re.MULTILINE))
    assert styles == {"leaf": utils.GRAPH_STYLE["leaf"], "constant": utils.GRAPH_STYLE["constant"],
                      "Function": utils.GRAPH_STYLE["function"], "intermediate": utils.GRAPH_STYLE["intermediate"],
                      "output": utils.GRAPH_STYLE["output"]}


# ----- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, typename", [(1.0, "float"), (np.ones(2), "ndarray"), ([Variable(np.ones(1)), 2], "int")])
def test_get_dot_graph_rejects_what_is_not_a_variable(bad, typename):
    with pytest.raises(TypeError, match=f"^get_dot_graph: expected a Variable or a list of Variables, got {typename}$"):
        get_dot_graph(bad)


def test_get_dot_graph_rejects_an_empty_list():
    with pytest.raises(ValueError, match="^get_dot_graph: no output Variable to draw from$"):
        get_dot_graph([])


@pytest.mark.parametrize("name", ["graph.jpg", "graph", "graph.dot"])
def test_plot_dot_graph_rejects_an_unknown_file_format_before_drawing(tmp_path, name):
    with pytest.raises(ValueError, match=f"^plot_dot_graph: to_file must end in .png, .svg or .pdf, got '{name}'$"):
        plot_dot_graph(Variable(np.array(1.0)), to_file=tmp_path / name)
    assert not any(tmp_path.iterdir())


# ----- rendering ------------------------------------------------------------------------------------

@needs_dot
@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml"), (".pdf", b"%PDF-"),
                                           (".PNG", b"\x89PNG\r\n\x1a\n")])
def test_plot_dot_graph_renders_and_writes_the_format_of_the_suffix(tmp_path, monkeypatch, suffix, magic):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    calls = []
    real_popen = subprocess.Popen

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    z = goldstein_price_graph()[2]
    target = tmp_path / f"graph{suffix}"
    graph = plot_dot_graph(z, to_file=target)
    assert isinstance(graph, graphviz.Source) and graph.source == get_dot_graph(z)
    assert target.read_bytes().startswith(magic)
    assert calls and all(not kwargs.get("shell") and isinstance(args[0], (list, tuple)) for args, kwargs in calls)
    assert str(calls[0][0][0][0]) == "dot"
    assert not any(home.iterdir()) and sorted(p.name for p in tmp_path.iterdir()) == sorted(["home", target.name])


@needs_dot
def test_the_returned_graph_shows_as_svg_and_text_and_its_repr_has_no_address():
    z = goldstein_price_graph()[2]
    graph = plot_dot_graph(z)
    bundle = graph._repr_mimebundle_()
    assert sorted(bundle) == ["image/svg+xml", "text/plain"] and "<svg" in bundle["image/svg+xml"]
    assert bundle["text/plain"] == get_dot_graph(z)
    assert repr(graph) == "DotGraph(95 nodes, 108 edges)"


def test_without_dot_the_graph_shows_the_same_text_and_no_picture(monkeypatch):
    z = goldstein_price_graph()[2]
    monkeypatch.setattr(shutil, "which", lambda name: None)
    graph = plot_dot_graph(z)  # no file asked for: nothing to warn about
    assert isinstance(graph, DotGraph) and graph._repr_mimebundle_() == {"text/plain": get_dot_graph(z)}
    assert repr(graph) == "DotGraph(95 nodes, 108 edges)"


def test_missing_dot_warns_naming_the_program_and_packages_and_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    x, y, z = goldstein_price_graph()
    target = tmp_path / "graph.png"
    with pytest.warns(UserWarning, match=r"'dot' is not on PATH \(apt install graphviz, or brew install graphviz\)"
                                         r"; .*graph.png was not written$"):
        result = plot_dot_graph(z, verbose=True, to_file=target)
    assert isinstance(result, DotGraph) and result.source == get_dot_graph(z, verbose=True)
    assert not target.exists()


def test_missing_graphviz_package_warns_and_shows_the_text(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/dot")
    monkeypatch.setattr(tinypytorch.utils.drawing, "graphviz", None)
    z = goldstein_price_graph()[2]
    with pytest.warns(UserWarning, match=r"graphviz Python package is not installed \(pip install graphviz\)"):
        graph = plot_dot_graph(z, to_file=tmp_path / "graph.svg")
    assert graph._repr_mimebundle_() == {"text/plain": get_dot_graph(z)}
    assert not any(tmp_path.iterdir())
