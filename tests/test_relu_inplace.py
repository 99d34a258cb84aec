"""F.relu_, F.relu(inplace=True) and nn.ReLU(inplace=True) against torch: the values written in place, the version
counter, the graph (the input takes the result's place; a view moves its base), a saved input changed in place
refused at backward, a leaf that requires grad refused, and a model's gradients. Every expected value is torch's."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from tinypytorch import nn
from tinypytorch.nn import functional as F

pytestmark = pytest.mark.torch

X = np.array([[-1.5, 2.0, 0.0], [3.0, -0.5, 1.0]])
G = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])


def frameworks():
    return ((tinypytorch, F.relu_), (torch, torch.relu_))


def test_a_computed_tensor_is_changed_in_place_and_differentiated_as_torchs():
    results = []
    for fw, relu_ in frameworks():
        a = fw.tensor(X, requires_grad=True)
        x = a * 2
        version = x._version
        y = relu_(x)
        assert y is x
        (x * fw.tensor(G)).sum().backward()
        results.append((x.detach().numpy(), x._version - version, x.grad_fn.name(), a.grad.numpy()))
    assert results[0][1:3] == results[1][1:3] == (1, "ReluBackward0")
    for ours, theirs in zip(results[0][::3], results[1][::3]):
        np.testing.assert_array_equal(ours, theirs)


def test_a_view_changed_in_place_changes_its_base_and_its_gradient_as_torchs():
    grads = []
    for fw, relu_ in frameworks():
        a = fw.tensor(X, requires_grad=True)
        b = a * 1
        relu_(b[:, 1:])  # a view: b's graph moves too
        (b * fw.tensor(G)).sum().backward()
        grads.append((b.detach().numpy(), a.grad.numpy()))
    for ours, theirs in zip(*grads):
        np.testing.assert_array_equal(ours, theirs)


def test_without_a_graph_a_leaf_is_changed_under_no_grad_and_an_integer_tensor_too():
    for fw, relu_ in frameworks():
        a = fw.tensor(X, requires_grad=True)
        with fw.no_grad():
            relu_(a)
        np.testing.assert_array_equal(a.detach().numpy(), np.maximum(X, 0))
        assert a.requires_grad and a.grad_fn is None
        n = fw.tensor([-2, 3])
        relu_(n)
        assert n.tolist() == [0, 3]


def test_a_leaf_that_requires_grad_is_refused_as_by_torch():
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place "
                                           "operation") as theirs:
        torch.relu_(torch.tensor(X, requires_grad=True))
    with pytest.raises(RuntimeError) as ours:
        F.relu_(tinypytorch.tensor(X, requires_grad=True))
    assert str(ours.value) == "relu_: " + str(theirs.value)


def test_an_input_saved_by_another_operation_then_changed_in_place_fails_at_backward_as_in_torch():
    for fw, relu_ in frameworks():
        x = fw.tensor(X, requires_grad=True) * 1
        y = x * x  # saves x
        relu_(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_relu_inplace_true_and_the_module_train_as_torchs():
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(inplace=True), torch.nn.Linear(4, 2)).double()
    ours = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    ours.double()
    assert repr(ours) == repr(theirs)
    x = np.random.default_rng(0).standard_normal((5, 3))
    ours(tinypytorch.tensor(x)).square().sum().backward()
    theirs(torch.tensor(x)).square().sum().backward()
    for p, pt in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.data, pt.grad.numpy(), rtol=1e-12)
    h = tinypytorch.tensor(X) * 1
    assert F.relu(h, inplace=True) is h and TF.relu(torch.tensor(X), inplace=True).min() == 0
