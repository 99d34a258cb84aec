"""Step 33's lesson: the counts the page prints and draws, its check's second graph, and the exercises' solutions
(PyTorch's dependency count, counting through detach, Newton's method with autograd.grad), checked against PyTorch
and worked out by hand."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.autograd import engine

pytestmark = [pytest.mark.step33, pytest.mark.torch]
step = load_step(33)


def leaf(v):
    return torch.tensor(v, dtype=torch.float64, requires_grad=True)


def test_the_drawings_counts_equal_the_edges_into_each_of_torchs_nodes():
    x, w = Variable(np.array(0.5)), Variable(np.array(1.5))
    ours = engine.count_dependencies([step.branches_example(tinypytorch, x, w)])
    xt, wt = leaf(0.5), leaf(1.5)
    theirs = step.count_uses(step.branches_example(torch, xt, wt))
    assert sorted(ours.values()) == sorted(theirs.values())
    assert ours[x] == ours[w] == 2  # x feeds sin and x - w; w feeds the product and x - w
    by_name = {}
    for node, n in theirs.items():
        by_name.setdefault(node.name().removesuffix("Backward0").split("::")[-1], []).append(n)
    assert by_name["AccumulateGrad"] == [2, 2] and by_name["Add"] == [1] and sorted(by_name["Mul"]) == [1, 2]


@pytest.mark.parametrize("make", [lambda m, x: m.sin(x) * x, lambda m, x: (x * x) * (x * x) + x])
def test_count_uses_counts_one_edge_per_use(make):
    t = leaf(0.7)
    counts = step.count_uses(make(torch, t))
    assert sum(counts.values()) == sum(len(node.next_functions) for node in counts) + 1  # edges, plus the seed
    ours = engine.count_dependencies([make(tinypytorch, Variable(np.array(0.7)))])
    assert sorted(counts.values()) == sorted(ours.values())


def test_a_constant_and_an_operation_on_constants_only_are_not_counted():
    x, c = Variable(np.array(3.0)), Variable(np.array(2.0), requires_grad=False)
    y = x * c + c * 4.0
    counts = engine.count_dependencies([y])
    assert counts == {y.creator: 1, y.creator.edges[0][0]: 1, x: 1}  # Add, the Mul x * c, x; c * 4.0 unrecorded
    xt, ct = leaf(3.0), torch.tensor(2.0, dtype=torch.float64)
    yt = xt * ct + ct * 4.0
    assert sorted(counts.values()) == sorted(step.count_uses(yt).values())
    assert yt.grad_fn.next_functions[1][0] is None  # torch records c * 4.0 no more than the package


def test_the_check_runs_the_graph_with_constants_in_torchs_order_and_gives_none_where_torch_does():
    (order, grads), (order_t, grads_t) = (step.run(m, make, step.with_constants, (True, False))
                                          for m, make in ((tinypytorch, step.variable), (torch, step.tensor)))
    assert order == order_t == ["Add", "Mul", "Add", "Sin", "Mul", "Mul"]
    assert grads[1] is None and grads_t[1] is None
    x, c = 0.5, 1.5  # y = (x c + sin 2x) x + c^2: dy/dx = 2 x c + sin 2x + 2 x cos 2x
    np.testing.assert_allclose(grads[0], 2 * x * c + np.sin(2 * x) + 2 * x * np.cos(2 * x), rtol=1e-14)
    np.testing.assert_allclose(grads[0], grads_t[0], rtol=1e-14)


@pytest.mark.parametrize("value", [3.0, -0.7, 2.5])
def test_detach_cuts_one_edge_from_the_count_and_the_gradient_equals_torchs(value):
    x = Variable(np.array(value))
    z = step.detached(tinypytorch, x)
    counts = engine.count_dependencies([z])
    add = z.creator
    product, square = add.edges[0][0], add.edges[1][0]  # detach(y) * x, and x * x
    assert counts == {add: 1, product: 1, square: 1, x: 3}  # x * x's Mul hears only from the Add
    xt = leaf(value)
    zt = step.detached(torch, xt)
    assert sorted(counts.values()) == sorted(step.count_uses(zt).values())
    z.backward()
    zt.backward()
    assert x.grad.item() == xt.grad.item() == value**2 + 2 * value  # y (a constant now) + 2x


@pytest.mark.parametrize("x0", [2.0, 0.4, -1.7])
def test_newton_with_autograd_grad_equals_torch_autograd_grad_and_leaves_grad_alone(x0):
    x, xt = Variable(np.array(x0)), leaf(x0)
    ours, theirs = step.newton(x, 6), step.newton(xt, 6)
    np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)
    v, expected = x0, []  # f' = 4x^3 - 4x, f'' = 12x^2 - 4, by hand
    for _ in range(6):
        v = v - (4 * v**3 - 4 * v) / (12 * v**2 - 4)
        expected.append(v)
    np.testing.assert_allclose(ours, expected, rtol=1e-14, atol=1e-15)
    assert x.grad is None and xt.grad is None
