"""Three behaviours that PyTorch's tutorials rely on, each run on both frameworks, torch 2.13 giving the expected
result: the order of a node's `next_functions` (the reflected operators, `linear`); gradcheck and gradgradcheck with
torch's whole signature, each check catching its wrong backward; and torch.save / torch.load of any object under
torch's weights-only rule.
"""

import numpy as np
import pytest
import torch

import tinypytorch
from reference import assert_close_to_torch

pytestmark = pytest.mark.torch
FRAMEWORKS = {"torch": torch, "tinypytorch": tinypytorch}


def _name(node):
    """A node's name in both frameworks (torch names its leaf node torch::autograd::AccumulateGrad)."""
    return None if node is None else node.name().split("::")[-1]


def edges(node):
    """(name, [(name of the next node, output number)]) of a node: what next_functions shows."""
    return _name(node), [(_name(n), nr) for n, nr in node.next_functions]


def two_levels(node):
    """edges of a node and of each node it points to."""
    return edges(node), [edges(n) for n, _ in node.next_functions if n is not None]


# ----- next_functions: the reflected operators list the tensor where torch's nodes do ------------------------------

def sin_of(m, values=(0.5, 1.0, -0.3)):
    a = m.tensor(values, dtype=m.float64, requires_grad=True)
    return a, a.sin()


EXPRESSIONS = {
    "2 * b": lambda m, b: 2 * b,
    "b * 2": lambda m, b: b * 2,
    "b + 1": lambda m, b: b + 1,
    "1 + b": lambda m, b: 1 + b,
    "True + b": lambda m, b: True + b,
    "1 - b": lambda m, b: 1 - b,
    "2.5 - b": lambda m, b: 2.5 - b,
    "b - 1": lambda m, b: b - 1,
    "b / 2": lambda m, b: b / 2,
    "2 / b": lambda m, b: 2 / b,
    "b ** 2": lambda m, b: b ** 2,
    "2 ** b": lambda m, b: 2 ** b,
    "2.0 ** b": lambda m, b: 2.0 ** b,
    "0 ** b": lambda m, b: 0 ** b,
    "b % 2": lambda m, b: b % 2,
    "NumPy 2.0 * b": lambda m, b: np.float64(2.0) * b,
    "NumPy 2.0 - b": lambda m, b: np.float64(2.0) - b,
    "NumPy 2.0 ** b": lambda m, b: np.float64(2.0) ** b,
    "NumPy 2.0 / b": lambda m, b: np.float64(2.0) / b,
    "sum([b, b])": lambda m, b: sum([b, b]),
    "rsub(b, 1)": lambda m, b: m.rsub(b, 1),
    "rsub(b, t)": lambda m, b: m.rsub(b, m.tensor(2.0, dtype=m.float64)),
    "b.__rsub__(t)": lambda m, b: b.__rsub__(m.tensor(2.0, dtype=m.float64)),
    "b.__radd__(t)": lambda m, b: b.__radd__(m.tensor(2.0, dtype=m.float64)),
    "b.__rmul__(t)": lambda m, b: b.__rmul__(m.tensor(2.0, dtype=m.float64)),
    "b.__rtruediv__(t)": lambda m, b: b.__rtruediv__(m.tensor(2.0, dtype=m.float64)),
    "b.__rpow__(t)": lambda m, b: b.__rpow__(m.tensor(2.0, dtype=m.float64)),
    "t * b": lambda m, b: m.tensor(2.0, dtype=m.float64) * b,
    "t - b": lambda m, b: m.tensor(2.0, dtype=m.float64) - b,
    "add(1, b)": lambda m, b: m.add(1, b),
    "mul(2, b)": lambda m, b: m.mul(2, b),
    "sub(1, b)": lambda m, b: m.sub(1, b),
    "pow(2, b)": lambda m, b: m.pow(2, b),
    "b * b": lambda m, b: b * b,
    "2 * a": lambda m, b: 2 * b.grad_fn.next_functions[0][0].variable,
}


@pytest.mark.step33
@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_next_functions_list_the_inputs_as_torchs_do(name):
    expression = EXPRESSIONS[name]
    ours, theirs = (expression(m, sin_of(m)[1]) for m in (tinypytorch, torch))
    assert two_levels(ours.grad_fn) == two_levels(theirs.grad_fn)


@pytest.mark.step33
@pytest.mark.parametrize("name", [n for n in EXPRESSIONS if n != "2 * a"])
def test_the_reordered_operations_give_torchs_values_and_gradients(name):
    expression = EXPRESSIONS[name]
    results = {}
    for key, m in FRAMEWORKS.items():
        a, b = sin_of(m, (0.5, 1.0, 2.0))  # sin > 0: 0 ** b and 2 / b are finite
        y = expression(m, b)
        y.backward(m.ones_like(y))
        results[key] = y, a.grad
    (y, g), (y_t, g_t) = results["tinypytorch"], results["torch"]
    assert str(y.dtype) == str(y_t.dtype)
    assert_close_to_torch(y.data, y_t.detach().numpy())
    assert_close_to_torch(g.data, g_t.numpy())


# (number, tensor values, tensor dtype): the dtypes PyTorch gives a number and an integer or float32 tensor
MIXED = [(2, [1, 2, 3], "int64"), (2.5, [1, 2, 3], "int64"), (2, [1.5, 2.0], "float32"), (-1, [0, 1, 2], "int32"),
         (3, [True, False], "bool")]
REFLECTED = {"number - x": lambda c, x: c - x, "number ** x": lambda c, x: c ** x, "number * x": lambda c, x: c * x,
             "number + x": lambda c, x: c + x, "number / x": lambda c, x: c / x}


@pytest.mark.parametrize("number, values, dtype", MIXED, ids=repr)
@pytest.mark.parametrize("name", list(REFLECTED))
def test_a_reflected_operator_with_integer_and_bool_tensors_gives_torchs_values_and_dtype(name, number, values, dtype):
    results = []
    for m in (tinypytorch, torch):
        x = m.tensor(values, dtype=getattr(m, dtype))
        try:
            results.append(REFLECTED[name](number, x))
        except Exception as error:  # torch's refusals (a bool subtracted; a negative power of an integer)
            results.append(type(error))
    ours, theirs = results
    if isinstance(theirs, type):
        assert ours is theirs
    else:
        assert str(ours.dtype) == str(theirs.dtype)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def linear_net(m, bias=True):
    """Two linear layers with a ReLU between, as the blitz tutorial's network ends, the same weights in both."""
    torch.manual_seed(0)
    twin = torch.nn.Sequential(torch.nn.Linear(4, 3, bias=bias), torch.nn.ReLU(), torch.nn.Linear(3, 2, bias=bias))
    if m is torch:
        return twin
    net = tinypytorch.nn.Sequential(tinypytorch.nn.Linear(4, 3, bias=bias), tinypytorch.nn.ReLU(),
                                    tinypytorch.nn.Linear(3, 2, bias=bias))
    net.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in twin.state_dict().items()})
    return net


def blitz_chain(m, shape=(5, 4), bias=True):
    """The loss of a linear net and the nodes the blitz tutorial prints: loss.grad_fn, next_functions[0][0], and
    its next_functions[0][0]."""
    net = linear_net(m, bias)
    x = m.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    output = net(x)
    loss = m.nn.MSELoss()(output, m.zeros_like(output))
    last = loss.grad_fn.next_functions[0][0]
    return net, loss, [loss.grad_fn, last, last.next_functions[0][0]]


@pytest.mark.step33
def test_the_blitz_tutorials_walk_from_the_loss_meets_torchs_nodes():
    ours, theirs = (blitz_chain(m)[2] for m in (tinypytorch, torch))
    assert [_name(n) for n in ours] == [_name(n) for n in theirs] == ["MseLossBackward0", "AddmmBackward0",
                                                                      "AccumulateGrad"]


@pytest.mark.step33
@pytest.mark.parametrize("shape, bias", [((5, 4), True), ((5, 4), False), ((2, 5, 4), True)],
                         ids=["a batch", "a batch, no bias", "batches of batches"])
def test_a_linear_node_lists_the_bias_the_input_and_the_weight_as_torchs(shape, bias):
    """torch's node lists weight.t(), a node of its own (TBackward0) leading to the weight; the package's linear
    transposes inside its one node, so it lists the weight's own AccumulateGrad there (a deliberate difference).
    (Batches of batches without a bias: torch's mm is wrapped in an UnsafeViewBackward0, the package's reshape in a
    ViewBackward0.)"""
    (net, _, ours), (twin, _, theirs) = (blitz_chain(m, shape, bias) for m in (tinypytorch, torch))
    node, node_t = ours[1], theirs[1]
    while _name(node_t) not in ("AddmmBackward0", "MmBackward0"):  # a view around it for batches of batches
        assert _name(node) == _name(node_t)
        node, node_t = node.next_functions[0][0], node_t.next_functions[0][0]
    ours_edges, theirs_edges = edges(node), edges(node_t)
    assert ours_edges[0] == theirs_edges[0] == ("AddmmBackward0" if bias else "MmBackward0")
    assert ours_edges[1][:-1] == theirs_edges[1][:-1]  # the bias and the input (ReLU's node, or a view of it)
    weight, weight_t = node.next_functions[-1][0], node_t.next_functions[-1][0]
    assert _name(weight_t) == "TBackward0" and weight_t.next_functions[0][0].variable is twin[2].weight
    assert _name(weight) == "AccumulateGrad" and weight.variable is net[2].weight
    if bias:
        assert node.next_functions[0][0].variable is net[2].bias
        assert node_t.next_functions[0][0].variable is twin[2].bias


@pytest.mark.step33
def test_a_linear_net_still_gives_torchs_gradients():
    grads = []
    for m in (tinypytorch, torch):
        net, loss, _ = blitz_chain(m, (2, 5, 4))
        loss.backward()
        grads.append([p.grad.numpy() if m is torch else p.grad.data for p in net.parameters()])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)  # float32
