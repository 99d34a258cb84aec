"""The PyTorch surface of the operations: tinypytorch.nn.functional against torch.nn.functional, PyTorch's names
for the nodes a graph records (Function.name), and the operations PyTorch's tensor methods need (abs, sqrt,
clamp and the views unsqueeze, squeeze, flatten, expand, t) at their edges. Every expected value comes from torch,
in float64."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from operations import OPERATIONS, operands
from reference import assert_close_to_torch
from tinypytorch import Function, Variable
from tinypytorch import functions as F
from tinypytorch.nn import functional as NF

pytestmark = [pytest.mark.torch]

RNG = np.random.default_rng(0)
X = RNG.normal(size=(4, 5))
TARGET = np.array([1, 0, 4, 2])


def run(fn, *arrays):
    """fn of Variables of `arrays`, and the gradients of sum(w * fn(...)) with respect to each (w fixed)."""
    xs = [Variable(a.copy()) for a in arrays]
    y = fn(*xs)
    w = np.random.default_rng(1).uniform(-1.0, 1.0, y.shape)
    (y * Variable(w, requires_grad=False)).sum().backward()
    return y.data, [x.grad.data for x in xs]


def run_torch(fn, *arrays):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    w = np.random.default_rng(1).uniform(-1.0, 1.0, tuple(y.shape))
    (y * torch.tensor(w)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def assert_same(ours, theirs, what):
    (y, gs), (yt, gts) = ours, theirs
    assert y.shape == yt.shape, what
    assert_close_to_torch(y, yt, what)
    for g, gt in zip(gs, gts, strict=True):
        assert_close_to_torch(g, gt, f"{what}: gradient")


# ----- tinypytorch.nn.functional against torch.nn.functional ------------------------------------------------------

CALLS = {  # name: (the call, the arrays it takes); the same call runs on NF and on torch's functional
    "relu": (lambda f, x: f.relu(x), (X,)),
    "relu, inplace=False": (lambda f, x: f.relu(x, inplace=False), (X,)),
    "sigmoid": (lambda f, x: f.sigmoid(x), (X,)),
    "tanh": (lambda f, x: f.tanh(x), (X,)),
    "softmax dim 1": (lambda f, x: f.softmax(x, dim=1), (X,)),
    "softmax dim 0": (lambda f, x: f.softmax(x, 0), (X,)),
    "log_softmax dim -1": (lambda f, x: f.log_softmax(x, dim=-1), (X,)),
    "linear": (lambda f, x, w, b: f.linear(x, w, b), (X, RNG.normal(size=(3, 5)), RNG.normal(size=3))),
    "linear, no bias": (lambda f, x, w: f.linear(input=x, weight=w), (X, RNG.normal(size=(3, 5)))),
    "dropout, not training": (lambda f, x: f.dropout(x, p=0.3, training=False), (X,)),
    "dropout, p=0": (lambda f, x: f.dropout(x, 0.0), (X,)),
    "dropout, p=1": (lambda f, x: f.dropout(x, p=1.0), (X,)),
    "mse_loss": (lambda f, x, y: f.mse_loss(x, y), (X, RNG.normal(size=(4, 5)))),
    "mse_loss, sum": (lambda f, x, y: f.mse_loss(x, y, reduction="sum"), (X, RNG.normal(size=(4, 5)))),
    "mse_loss, none": (lambda f, x, y: f.mse_loss(input=x, target=y, reduction="none"), (X, RNG.normal(size=(4, 5)))),
    "cross_entropy": (lambda f, x: f.cross_entropy(x, TARGET if f is NF else torch.tensor(TARGET)), (X,)),
    "cross_entropy, sum, ignore_index": (
        lambda f, x: f.cross_entropy(x, np.array([1, -1, 4, 2]) if f is NF else torch.tensor([1, -1, 4, 2]),
                                     ignore_index=-1, reduction="sum"), (X,)),
    "cross_entropy, none": (lambda f, x: f.cross_entropy(x, TARGET if f is NF else torch.tensor(TARGET),
                                                         reduction="none"), (X,)),
    "nll_loss": (lambda f, x: f.nll_loss(f.log_softmax(x, 1), TARGET if f is NF else torch.tensor(TARGET)), (X,)),
    "nll_loss, sum, ignore_index": (
        lambda f, x: f.nll_loss(x, np.array([1, 7, 4, 7]) if f is NF else torch.tensor([1, 7, 4, 7]),
                                ignore_index=7, reduction="sum"), (X,)),
}


@pytest.mark.parametrize("name", CALLS)
def test_each_function_gives_torchs_values_and_gradients(name):
    call, arrays = CALLS[name]
    assert_same(run(lambda *xs: call(NF, *xs), *arrays), run_torch(lambda *ts: call(TF, *ts), *arrays), name)


def test_dropout_in_training_zeroes_and_scales_as_torch_does_with_the_same_mask():
    tinypytorch.manual_seed(0)
    ours = run(lambda x: NF.dropout(x, 0.25), X)
    keep = np.random.Generator(np.random.PCG64(0)).random(X.shape) >= 0.25  # the package's draw (tests/operations.py)
    theirs = run_torch(lambda t: t * torch.tensor(keep) / 0.75, X)
    assert_same(ours, theirs, "dropout")


def test_functional_is_the_package_nn_namespace_and_names_what_it_holds():
    assert tinypytorch.nn.functional is NF
    for name in NF.__all__:
        assert callable(getattr(NF, name)) and hasattr(TF, name), name


@pytest.mark.parametrize("call", [lambda: NF.cross_entropy(Variable(X), TARGET, None),
                                  lambda: NF.cross_entropy(Variable(X), TARGET, weight=np.ones(5)),
                                  lambda: NF.cross_entropy(Variable(X), TARGET, label_smoothing=0.1),
                                  lambda: NF.mse_loss(Variable(X), Variable(X), None)])
def test_an_argument_torch_has_and_the_package_does_not_is_a_type_error_not_ignored(call):
    with pytest.raises(TypeError):
        call()


def test_what_the_wrappers_refuse_they_refuse_by_name():
    with pytest.raises(ValueError, match="dropout: inplace=True is not supported"):
        NF.dropout(Variable(X), inplace=True)
    with pytest.raises(ValueError, match=r"mse_loss: shapes \(4, 5\) and \(5,\) differ"):
        NF.mse_loss(Variable(X), Variable(X[0]))
    with pytest.raises(ValueError, match="mse_loss: 'avg' is not a valid value for reduction"):
        NF.mse_loss(Variable(X), Variable(X), reduction="avg")
    with pytest.raises(ValueError, match="nll_loss: 'avg' is not a valid value for reduction"):
        NF.nll_loss(Variable(X), TARGET, reduction="avg")
    with pytest.raises(ValueError, match=r"nll_loss: expected an input of shape \(N, C\)"):
        NF.nll_loss(Variable(X[0]), TARGET)
    with pytest.raises(ValueError, match="nll_loss: target 5 is out of bounds for 5 classes"):
        NF.nll_loss(Variable(X), np.array([5, 0, 0, 0]))
    with pytest.raises(TypeError, match="softmax: missing the dim"):
        NF.softmax(Variable(X))


# ----- PyTorch's names for the nodes ------------------------------------------------------------------------------

# Rows of tests/operations.py whose torch twin records its graph otherwise than the expression here does:
NAMES_DIFFER = {
    "conv2d": "torch records a convolution as one node, ConvolutionBackward0; here conv2d is unfold (Im2ColBackward0), "
              "a matrix product and a reshape, each a node of its own (tinypytorch.convolution)",
    "conv2d, 2 groups, padding same": "as conv2d",
    "conv_transpose2d, 2 groups, stride 2": "torch records it as one node, ConvolutionBackward0; here it is a matrix "
                                            "product, fold (Col2ImBackward0) and reshapes, each a node of its own",
    "mul_ of a view": "torch records an in-place change of a view as one node, CopySlices, that wraps the "
                      "operation and the view; here ViewScatter, the view's GetItem and the Mul are nodes of their own",
}


def node_names(y):
    """The names of the nodes of the graph that made y (not the leaves), the output's first."""
    names, todo, seen = [], [y.grad_fn], set()
    while todo:
        f = todo.pop(0)
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, Function):
            names.append(f.name())
            todo += [node for node, _ in f.edges]
        elif not isinstance(f, Variable):  # torch's node; a Variable here is a leaf (AccumulateGrad in torch)
            if type(f).__name__ != "AccumulateGrad":
                names.append(type(f).__name__)
            todo += [node for node, _ in f.next_functions]
    return names


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_each_operation_records_nodes_under_torchs_names(operation):
    """The output's node has torch's name, and every node the expression records is one torch records too
    (torch may record more: linear's transpose of the weight, one node per index of x[0:1, 1:])."""
    if operation.name in NAMES_DIFFER:
        pytest.skip(NAMES_DIFFER[operation.name])
    values = operands(operation)
    ours = node_names(operation.ours(*[Variable(v) for v in values]))
    theirs = node_names(operation.theirs(*[torch.tensor(v, requires_grad=True) for v in values]))
    assert ours[0] == theirs[0], (ours, theirs)
    assert set(ours) <= set(theirs), (ours, theirs)


@pytest.mark.parametrize("ours, theirs", [
    (lambda x: x[0], lambda t: t[0]), (lambda x: x[:, 1], lambda t: t[:, 1]), (lambda x: x[None], lambda t: t[None]),
    (lambda x: x[1:, 0], lambda t: t[1:, 0]), (lambda x: x[:, 1:], lambda t: t[:, 1:]),
    (lambda x: x[[0, 1], 1:], lambda t: t[[0, 1], 1:]),
    (lambda x: F.permute(x, (1, 0)), lambda t: t.permute(1, 0)), (lambda x: x.T, lambda t: t.T),
    (lambda x: F.transpose(x, 0, 1), lambda t: t.transpose(0, 1)), (F.t, torch.t),
    (lambda x: F.sum(x, 0), lambda t: t.sum(0)), (F.sum, torch.sum), (lambda x: F.mean(x, 1), lambda t: t.mean(1)),
    (lambda x: F.max(x), torch.max), (lambda x: F.max(x, axis=1), lambda t: t.amax(1)),
    (lambda x: F.max(x, 1).values, lambda t: t.max(1).values),
    (lambda x: F.min(x, 0).values, lambda t: t.min(0).values),
    (F.min, torch.min), (lambda x: F.amin(x, 0), lambda t: t.amin(0)),
    (lambda x: F.squeeze(F.unsqueeze(x, 0)), lambda t: t.unsqueeze(0).squeeze()),
    (lambda x: F.squeeze(F.unsqueeze(x, 0), 0), lambda t: t.unsqueeze(0).squeeze(0)),
    (lambda x: F.squeeze(F.unsqueeze(x, 0), (0,)), lambda t: t.unsqueeze(0).squeeze((0,))),
    (F.flatten, torch.flatten), (lambda x: F.expand(x, 2, 2, 3), lambda t: t.expand(2, 2, 3)),
    (lambda x: F.linear(x, x), lambda t: TF.linear(t, t)), (lambda x: F.to(x, dtype=np.float32), lambda t: t.float()),
])
def test_the_output_node_of_each_use_of_a_class_that_serves_several_torch_nodes_has_torchs_name(ours, theirs):
    values = np.arange(6.0).reshape(2, 3) - 2.5
    theirs = type(theirs(torch.tensor(values, requires_grad=True)).grad_fn).__name__
    assert ours(Variable(values)).grad_fn.name() == theirs


# ----- abs, sqrt and clamp at their edges --------------------------------------------------------------------------

EDGES = np.array([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0])


@pytest.mark.parametrize("name, ours, theirs", [
    ("abs", F.abs, torch.abs),
    ("sqrt", F.sqrt, torch.sqrt),
    ("clamp(-1, 1)", lambda x: F.clamp(x, -1, 1), lambda t: torch.clamp(t, -1, 1)),
    ("clamp(min=0)", lambda x: F.clamp(x, min=0), lambda t: torch.clamp(t, min=0)),
    ("clamp(max=0.5)", lambda x: F.clamp(x, max=0.5), lambda t: torch.clamp(t, max=0.5)),
    ("clamp(1, -1): min above max", lambda x: F.clamp(x, 1, -1), lambda t: torch.clamp(t, 1, -1)),
])
def test_at_zero_and_at_the_bounds_values_and_gradients_are_torchs(name, ours, theirs):
    """abs's gradient is 0 at 0, sqrt's inf; clamp's is 1 on the bounds themselves: as torch's."""
    values = np.abs(EDGES) if name == "sqrt" else EDGES
    with np.errstate(divide="ignore"):
        (y, (g,)), (yt, (gt,)) = run(ours, values), run_torch(theirs, values)
    if name == "sqrt":  # NumPy's sqrt is correctly rounded; torch's (MKL's) is within an ulp, on some CPUs off by one
        np.testing.assert_array_max_ulp(y, yt, maxulp=1)
        np.testing.assert_array_max_ulp(g, gt, maxulp=2)  # w / (2 sqrt(x)): that ulp, and one more rounding
        return
    np.testing.assert_array_equal(y, yt, name)  # abs and clamp copy or choose: every CPU gives the same bits
    np.testing.assert_array_equal(g, gt, name)


def test_clamp_keeps_float32_refuses_no_bounds_and_bounds_that_are_not_numbers():
    assert F.clamp(Variable(np.ones(3, dtype=np.float32)), 0, 0.5).dtype == np.float32
    with pytest.raises(ValueError, match="clamp: at least one of 'min' or 'max' must not be None"):
        F.clamp(Variable(X))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(torch.tensor(X))
    with pytest.raises(TypeError, match="clamp: min and max must be numbers, got ndarray"):
        F.clamp(Variable(X), np.zeros(5))


# ----- views: unsqueeze, squeeze, flatten, expand, t ----------------------------------------------------------------

@pytest.mark.parametrize("name, ours, theirs, shape", [
    ("unsqueeze 0", lambda x: F.unsqueeze(x, 0), lambda t: t.unsqueeze(0), (2, 3)),
    ("unsqueeze -1", lambda x: F.unsqueeze(x, -1), lambda t: t.unsqueeze(-1), (2, 3)),
    ("unsqueeze of 0-d", lambda x: F.unsqueeze(x, 0), lambda t: t.unsqueeze(0), ()),
    ("squeeze", F.squeeze, torch.squeeze, (1, 2, 1, 3)),
    ("squeeze 2", lambda x: F.squeeze(x, 2), lambda t: t.squeeze(2), (1, 2, 1, 3)),
    ("squeeze -1, not of length 1", lambda x: F.squeeze(x, -1), lambda t: t.squeeze(-1), (1, 2, 1, 3)),
    ("squeeze (0, 2)", lambda x: F.squeeze(x, (0, 2)), lambda t: t.squeeze((0, 2)), (1, 2, 1, 3)),
    ("flatten", F.flatten, torch.flatten, (2, 3, 4)),
    ("flatten 1", lambda x: F.flatten(x, 1), lambda t: t.flatten(1), (2, 3, 4)),
    ("flatten 0, -2", lambda x: F.flatten(x, 0, -2), lambda t: t.flatten(0, -2), (2, 3, 4)),
    ("flatten of 0-d", F.flatten, torch.flatten, ()),
    ("expand", lambda x: F.expand(x, 3, -1, 4), lambda t: t.expand(3, -1, 4), (2, 1)),
    ("expand, a tuple", lambda x: F.expand(x, (2, 3)), lambda t: t.expand((2, 3)), (3,)),
    ("expand of 0-d", lambda x: F.expand(x, 2, 2), lambda t: t.expand(2, 2), ()),
    ("t", F.t, torch.t, (2, 3)),
    ("t of 1-d", F.t, torch.t, (3,)),
])
def test_views_give_torchs_values_shapes_and_gradients(name, ours, theirs, shape):
    values = RNG.normal(size=shape)
    (y, (g,)), (yt, (gt,)) = run(ours, values), run_torch(theirs, values)
    assert y.shape == yt.shape, name
    np.testing.assert_array_equal(y, yt, name)
    np.testing.assert_array_equal(g, gt, name)


@pytest.mark.parametrize("view", [lambda x: F.unsqueeze(x, 1), lambda x: F.squeeze(F.unsqueeze(x, 0)), F.flatten, F.t])
def test_the_views_share_memory_with_their_input_and_see_its_in_place_changes_as_torchs_do(view):
    x = Variable(np.arange(6.0).reshape(2, 3), requires_grad=False)
    y = view(x)
    assert np.shares_memory(y.data, x.data) and y._base is x
    t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    x.add_(1.0)
    np.testing.assert_array_equal(y.data, view(Variable(t.numpy() + 1.0)).data)


def test_expand_copies_nothing_as_broadcast_to():
    x = Variable(np.arange(3.0))
    assert np.shares_memory(F.expand(x, 4, 3).data, x.data)


@pytest.mark.parametrize("call, message, torch_call", [
    (lambda x: F.unsqueeze(x, 3), "unsqueeze: dim 3 is out of range", lambda t: t.unsqueeze(3)),
    (lambda x: F.squeeze(x, 2), "squeeze: dim 2 is out of range", lambda t: t.squeeze(2)),
    (lambda x: F.flatten(x, 1, 0), "flatten: start_dim 1 cannot come after end_dim 0", lambda t: t.flatten(1, 0)),
    (lambda x: F.expand(x, 2, 4), "expand: the expanded size 4 must match the existing size 3 at non-singleton "
                                  "dimension 1", lambda t: t.expand(2, 4)),
    (lambda x: F.expand(x, 3), r"expand: the number of sizes provided \(1\) must be greater or equal",
     lambda t: t.expand(3)),
    (lambda x: F.expand(x, -1, 2, 3), "expand: -1 is not allowed in a new leading dimension",
     lambda t: t.expand(-1, 2, 3)),
    (lambda x: F.t(F.unsqueeze(x, 0)), "t: expects a variable with <= 2 dimensions, but it has 3",
     lambda t: t.unsqueeze(0).t()),
])
def test_what_torch_refuses_the_views_refuse_by_name(call, message, torch_call):
    with pytest.raises((IndexError, ValueError), match=message):
        call(Variable(np.ones((2, 3))))
    with pytest.raises((IndexError, RuntimeError)):
        torch_call(torch.ones(2, 3))
