"""tinypytorch.utils.pictures: the graph a page draws is the graph its objects hold."""
import matplotlib
import numpy as np
import pytest

from steploader import load_step
from tinypytorch.utils.pictures import _layers, draw_dag, draw_graph, graph_of

matplotlib.use("Agg")


def test_step_16s_diamond_is_four_functions_and_five_variables_wired_as_written():
    s = load_step(16)
    x = s.Variable(np.array(2.0))
    a = s.square(x)
    y = s.add(s.square(a), s.square(a))
    nodes, edges = graph_of(y, names={x: "x", a: "a", y: "y"})
    kinds = sorted(kind for kind, _ in nodes.values())
    assert kinds == ["function"] * 4 + ["leaf", "output", "variable", "variable", "variable"]
    label = {n: text for n, (_, text) in nodes.items()}
    wires = sorted((label[p], label[q]) for p, q in edges)
    # x -> Square -> a; a feeds two Squares, each makes a 16 (= 4 squared); both 16s feed Add, which makes y
    assert wires == sorted([("x", "Square"), ("Square", "a"), ("a", "Square"), ("a", "Square"), ("Square", "16"),
                            ("Square", "16"), ("16", "Add"), ("16", "Add"), ("Add", "y")])


def test_the_single_input_functions_of_step_08_are_followed_too():
    s = load_step(8)
    x = s.Variable(np.array(0.5))
    y = s.Square()(s.Exp()(s.Square()(x)))
    nodes, edges = graph_of(y)
    # met from the output back, each function then its input and output; a 0-d variable is labelled by its value:
    # exp(0.25) = 1.28403, 1.28403**2 = 1.64872
    assert [text for _, text in nodes.values()] == ["Square", "1.28403", "1.64872", "Exp", "0.25", "Square", "0.5"]
    assert len(edges) == 6


def test_columns_follow_the_longest_path_and_notes_find_their_boxes():
    # a -> f -> b -> g -> c, and a -> g directly: g sits after b however the edges are listed
    assert _layers(["a", "f", "b", "g", "c"], [("a", "g"), ("b", "g"), ("a", "f"), ("f", "b"), ("g", "c")]) == \
        {"a": 0, "f": 1, "b": 2, "g": 3, "c": 4}
    s = load_step(16)
    x = s.Variable(np.array(1.0))
    y = s.square(x)
    ax = draw_graph(y, notes={y.creator: "1st"})
    assert "1st" in [t.get_text() for t in ax.texts]
    with pytest.raises(KeyError):
        draw_dag({0: ("no such kind", "x")}, [])


def test_backward_order_notes_each_run_and_leaves_the_functions_as_they_were():
    """Step 16's diamond a = x**2, y = a**2 + a**2: Add runs first, the two squares of a next, x's square last
    (generations 2, 1, 1, 0); step 15's depth-first loop runs x's square twice, once per branch."""
    from tinypytorch.utils.tracing import backward_order
    for number, runs in [(16, 4), (15, 5)]:
        s = load_step(number)
        x = s.Variable(np.array(2.0))
        a = s.square(x)
        y = s.add(s.square(a), s.square(a))
        ran = backward_order(y)
        assert len(ran) == runs and type(ran[0]).__name__ == "Add" and ran[-1] is a.creator
        assert all("backward" not in vars(f) for f in ran)  # the wrappers are gone
        # step 16: y = 2 x**4, so dy/dx = 8 x**3 = 64. Step 15 runs A after C alone (a.grad = 8, x gets
        # 2x * 8 = 32), then after B (a.grad = 16, x gets 64 more): 96
        assert x.grad == (64.0 if number == 16 else 96.0)
