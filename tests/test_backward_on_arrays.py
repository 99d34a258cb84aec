"""Backward formulas on bare arrays (grad_mode.BackwardMode).

One formula per operation serves both kinds of backward pass: given Variables (create_graph=True)
it records a graph, given arrays (create_graph=False) it computes on arrays and makes no Variable.
These tests check that the two paths give the same gradients as each other and as PyTorch, that the
engine hands each formula what it expects, and that what reaches the user is a Variable.
"""
import numpy as np
import pytest
import torch

import tinypytorch
from operations import NOT_IN_THE_TABLE_YET, OPERATIONS, operands, package_functions
from reference import assert_close_to_torch
from tinypytorch import Variable, autograd, core, cuda
from tinypytorch.core import Function
from tinypytorch.grad_mode import BackwardMode

pytestmark = [pytest.mark.torch]


def test_every_operation_of_the_package_has_one_formula_for_arrays_and_variables():
    written_on_variables = {f.__name__ for f in package_functions() if not f.formula_on_arrays}
    assert sorted(written_on_variables - NOT_IN_THE_TABLE_YET) == []  # those are run on arrays once they have rows


@pytest.fixture
def variables_made(monkeypatch):
    """A list that grows by one for every Variable made while the fixture is active."""
    made = []
    init = Variable.__init__

    def counting(self, *args, **kwargs):
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Variable, "__init__", counting)
    return made


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_first_derivatives_on_arrays_equal_the_same_formula_on_variables_and_torchs(operation, xp, variables_made):
    """On each backend (NumPy, the CuPy stand-in, CuPy on a GPU): the pass without a graph runs every formula
    on arrays, makes no Variable but the gradients it hands back, and agrees with the pass that records."""
    values = operands(operation)
    xs = [Variable(xp.asarray(v)) for v in values]
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    y = operation.ours(*xs)
    w = np.random.default_rng(1).uniform(-1, 1, y.shape)
    scalar = (y * Variable(xp.asarray(w), requires_grad=False)).sum()
    on_variables = autograd.grad(scalar, xs, retain_graph=True, create_graph=True, allow_unused=True)
    variables_made.clear()
    on_arrays = autograd.grad(scalar, xs, allow_unused=True)
    assert len(variables_made) <= len(xs) + 1, operation.name  # the gradients handed back, and the seed
    theirs_fn = operation.theirs if xp is np or operation.theirs_on_device is None else operation.theirs_on_device
    theirs = torch.autograd.grad((theirs_fn(*ts) * torch.tensor(w)).sum(), ts, allow_unused=True)
    for i, (a, v, t) in enumerate(zip(on_arrays, on_variables, theirs)):
        if t is None:
            continue
        where = f"{operation.name} on {xp.__name__}, operand {i}"
        assert not a.requires_grad and a.creator is None, where
        assert cuda.get_array_module(a.data) is xp, where
        np.testing.assert_allclose(cuda.as_numpy(a.data), cuda.as_numpy(v.data), rtol=1e-15, atol=0, err_msg=where)
        assert_close_to_torch(cuda.as_numpy(a.data), t.numpy(), where)


class Recording(Function):
    """y = 3x, whose backward notes what it was given."""

    formula_on_arrays = True
    given = []

    def forward(self, x):
        return 3.0 * x

    def backward(self, gy):
        Recording.given.append((type(gy), BackwardMode.arrays))
        return 3.0 * gy


class OnVariables(Recording):
    formula_on_arrays = False


@pytest.mark.parametrize("cls, without_graph", [(Recording, (np.ndarray, True)), (OnVariables, (Variable, False))])
def test_a_formula_gets_arrays_only_if_it_allows_them_and_no_graph_is_wanted(cls, without_graph):
    x = Variable(np.array([1.0, 2.0]))
    Recording.given = []
    (cls()(x) * x).sum().backward()  # d(3x * x)/dx = 6x
    assert Recording.given == [without_graph]
    np.testing.assert_array_equal(x.grad.data, [6.0, 12.0])
    Recording.given = []
    x.cleargrad()
    (cls()(x) * x).sum().backward(create_graph=True)
    assert Recording.given == [(Variable, False)]  # a graph of the backward pass: Variables, recording
    np.testing.assert_array_equal(x.grad.data, [6.0, 12.0])
    assert x.grad.creator is not None  # 6x depends on x: it can be differentiated again


def test_gradients_handed_to_the_user_are_variables_whatever_the_formulas_ran_on():
    x = Variable(np.array([0.5, 1.5]))
    seen = []
    y = tinypytorch.sin(x)
    y.register_hook(lambda g: seen.append(type(g)))
    y.retain_grad()
    (y * y).sum().backward()
    assert seen == [Variable] and isinstance(y.grad, Variable) and isinstance(x.grad, Variable)
    (g,) = autograd.grad(tinypytorch.exp(x).sum(), [x])
    assert isinstance(g, Variable) and not g.requires_grad


def test_an_unpack_hook_gets_and_gives_variables_while_formulas_run_on_arrays():
    seen = []

    def unpack(v):
        seen.append((type(v), BackwardMode.arrays))
        return v

    x = Variable(np.array([0.3, -0.7]))
    with autograd.graph.saved_tensors_hooks(lambda v: v, unpack):
        y = tinypytorch.sin(x)
    y.sum().backward()
    assert seen == [(Variable, False)]
    np.testing.assert_allclose(x.grad.data, np.cos([0.3, -0.7]), rtol=1e-15)
