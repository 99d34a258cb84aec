"""Step 33's lesson: the drawing's counts and run order, and the exercises' solutions (PyTorch's dependency count,
a gradient penalty), checked against PyTorch."""
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_penalty_gradient_equals_torchs_and_a_numerical_one(seed):
    rng = np.random.default_rng(seed)
    xs, ws = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)
    ours = step.penalty_grad(tinypytorch, Variable(xs), Variable(ws)).data
    theirs = step.penalty_grad(torch, leaf(xs), leaf(ws)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-15)

    def penalty(w):  # P = sum (w (1 - tanh^2(w x)))^2, worked out by hand
        return np.sum((w * (1 - np.tanh(w * xs) ** 2)) ** 2)

    h = 1e-6
    numerical = [(penalty(ws + h * e) - penalty(ws - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(ours, numerical, rtol=1e-6, atol=1e-8)
