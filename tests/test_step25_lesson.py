"""Step 25's lesson: the exercises' solutions (functions of a graph counted by kind, the uses of a leaf), checked
against PyTorch's backward graph of the same computation."""
import numpy as np
import pytest
import torch

from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step25, pytest.mark.torch]
step = load_step(25)
KIND = {"AddBackward0": "Add", "SubBackward0": "Sub", "RsubBackward1": "Sub", "MulBackward0": "Mul",
        "PowBackward0": "Pow", "NegBackward0": "Neg", "ExpBackward0": "Exp", "DivBackward0": "Div"}


def torch_nodes(output):
    nodes = [output.grad_fn]
    for node in nodes:
        nodes.extend(n for n, _ in node.next_functions if n is not None and n not in nodes)
    return nodes


def torch_graph(f, *values):
    leaves = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    return leaves, torch_nodes(f(*leaves))


@pytest.mark.parametrize("f", [step.goldstein_price, lambda x, y: (x * y - x) ** 2 + y.exp() / x])
def test_function_counts_equal_the_kinds_of_torchs_backward_nodes(f):
    _, nodes = torch_graph(f, 1.0, 2.0)
    kinds = [KIND[type(n).__name__] for n in nodes if type(n).__name__ != "AccumulateGrad"]
    expected = {kind: kinds.count(kind) for kind in set(kinds)}
    assert step.function_counts(f(Variable(np.array(1.0)), Variable(np.array(2.0)))) == expected


@pytest.mark.parametrize("f", [step.goldstein_price, lambda x, y: x * x + x * y])
def test_uses_equal_how_often_torchs_graph_reaches_each_leaf(f):
    (xt, yt), nodes = torch_graph(f, 1.0, 1.0)
    reached = [n.variable for node in nodes for n, _ in node.next_functions if type(n).__name__ == "AccumulateGrad"]
    z = f(Variable(np.array(1.0), name="x"), Variable(np.array(1.0), name="y"))
    assert step.uses(z, "x") == sum(v is xt for v in reached)
    assert step.uses(z, "y") == sum(v is yt for v in reached)
