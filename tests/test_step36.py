"""Step 36: version counters, in-place operations and views, against PyTorch."""
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, cuda
from tinypytorch.layers import Linear
from tinypytorch.optimizers import SGD, Adam

pytestmark = [pytest.mark.step36, pytest.mark.torch]
step = load_step(36)


def ours_on(xp):
    """The step's `Ours`, with leaves on the xp fixture's backend (NumPy, the strict stand-in for CuPy, CuPy)."""
    class OnBackend(step.Ours):
        leaf = staticmethod(lambda values, requires_grad=True: Variable(xp.asarray(np.array(values)),
                                                                        requires_grad=requires_grad))
        grad = staticmethod(lambda t: cuda.as_numpy(t.grad.data))

    return OnBackend


@pytest.mark.parametrize("scenario", step.SCENARIOS, ids=lambda s: s.__name__)
def test_each_scenario_raises_where_torch_raises_and_otherwise_equals_torchs_gradients(scenario, xp):
    ours, theirs = step.outcome(scenario, ours_on(xp)), step.outcome(scenario, step.Torch)
    assert isinstance(ours, RuntimeError) == isinstance(theirs, RuntimeError), (ours, theirs)
    if not isinstance(ours, RuntimeError):
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o, t, rtol=1e-14, atol=0)


def test_the_table_has_cases_of_both_kinds():
    kinds = [isinstance(step.outcome(s, step.Torch), RuntimeError) for s in step.SCENARIOS]
    assert 5 <= sum(kinds) <= len(kinds) - 5


# random sequences of in-place operations on a non-leaf, against torch

OPS = ["add_", "sub_", "mul_", "div_"]


@given(ops=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(["w", "number", "array"]),
                              st.sampled_from(["whole", "slice", "element", "reshape"])), min_size=1, max_size=5),
       values=st.lists(st.floats(0.5, 2.0), min_size=4, max_size=4))
def test_random_in_place_sequences_give_torchs_values_and_gradients(ops, values):
    def run(leaf, as_numpy):
        a, w = leaf(values), leaf([1.5, 0.75, 1.25, 0.5])
        b = a * 2.0
        for op, operand, where in ops:
            target = {"whole": b, "slice": b[1:3], "element": b[2], "reshape": b.reshape(2, 2)}[where]
            other = {"w": w, "number": 1.25, "array": np.float64(0.5)}[operand]
            if operand == "w" and where != "whole":
                other = {"slice": w[1:3], "element": w[2], "reshape": w.reshape(2, 2)}[where]
            getattr(target, op)(other)
        (b * b).sum().backward()
        return as_numpy(b), as_numpy(a.grad), as_numpy(w.grad) if w.grad is not None else None

    ours = run(lambda v: Variable(np.array(v)), lambda t: np.array(t.data))
    theirs = run(lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True), lambda t: t.detach().numpy())
    for o, t in zip(ours, theirs):
        assert (o is None) == (t is None)
        if o is not None:
            np.testing.assert_allclose(o, t, rtol=1e-12, atol=1e-12)


def test_every_in_place_operation_bumps_the_version_by_one_and_returns_the_variable():
    x = Variable(np.ones(3), requires_grad=False)
    for i, op in enumerate(["add_", "sub_", "mul_", "div_"], start=1):
        assert getattr(x, op)(2.0) is x and x._version == i
    assert x.zero_() is x and x._version == 5 and x.data.tolist() == [0.0, 0.0, 0.0]
    t = torch.ones(3)
    for op in ["add_", "sub_", "mul_", "div_"]:
        getattr(t, op)(2.0)
    t.zero_()
    assert t._version == 5


def test_in_place_values_equal_numpys():
    x = Variable(np.array([1.0, 2.0, 4.0]), requires_grad=False)
    x.add_(1.0).mul_(np.array([2.0, 3.0, 0.5])).sub_(Variable(np.array([1.0, 1.0, 1.0]))).div_(2.0)
    np.testing.assert_array_equal(x.data, ((np.array([1.0, 2.0, 4.0]) + 1) * [2.0, 3.0, 0.5] - 1) / 2)


def test_views_share_the_version_counter_and_copies_do_not():
    b = Variable(np.arange(6.0).reshape(2, 3), requires_grad=False)
    views = [b[0], b[:, 1:], b.T, b.transpose(0, 1), b.reshape(3, 2), b.reshape(6)[2:], b.detach()]
    copies = [b[[0, 1]], b.T.reshape(6), b * 1.0]
    b.add_(1.0)
    assert all(v._version == 1 for v in views) and all(c._version == 0 for c in copies)
    views[0].mul_(2.0)  # a change through a view shows in the base and in every view
    assert b._version == 2 and all(v._version == 2 for v in views)
    np.testing.assert_array_equal(b.data[0], (np.arange(3.0) + 1) * 2)
    t = torch.arange(6.0).reshape(2, 3)
    tv = [t[0], t[:, 1:], t.T, t.transpose(0, 1), t.reshape(3, 2), t.reshape(6)[2:], t.detach()]
    t.add_(1.0)
    assert all(v._version == 1 for v in tv)


def test_an_element_is_a_0d_view_so_changing_it_changes_the_base_as_in_torch():
    b = Variable(np.array([1.0, 2.0, 3.0]), requires_grad=False)
    e = b[1]
    e.mul_(10.0)
    assert e.shape == () and b.data.tolist() == [1.0, 20.0, 3.0]


def test_a_leaf_that_requires_grad_cannot_change_in_place_but_can_under_no_grad():
    w = Variable(np.array([1.0, 2.0]))
    for op in ["add_", "sub_", "mul_", "div_"]:
        with pytest.raises(RuntimeError, match=f"^{op}: a leaf Variable that requires grad is being used in an "
                                               "in-place operation.$"):
            getattr(w, op)(1.0)
    with pytest.raises(RuntimeError, match="^zero_: a leaf Variable"):
        w.zero_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        w[0:1].add_(1.0)
    assert w._version == 0 and w.data.tolist() == [1.0, 2.0]
    with tinypytorch.no_grad():
        w.add_(1.0)
    assert w._version == 1 and w.data.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("optimizer", [lambda p: SGD(p, lr=0.1), lambda p: Adam(p, lr=0.1)], ids=["SGD", "Adam"])
def test_an_optimizer_step_bumps_the_parameters_versions_so_an_old_graph_cannot_use_them(optimizer):
    layer = Linear(3, 2, rng=np.random.default_rng(0))
    x = Variable(np.ones((4, 3)))  # requires grad, so linear saves W for x's gradient
    loss = (layer(x) * layer(x)).sum()
    loss.backward(retain_graph=True)
    optimizer(layer.params()).step()
    assert all(p._version == 1 for p in layer.params())
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*is at version 1; expected version 0"):
        loss.backward()


def test_a_broadcast_view_cannot_change_in_place():
    b = tinypytorch.broadcast_to(Variable(np.array([1.0, 2.0]), requires_grad=False), (3, 2))
    with pytest.raises(RuntimeError, match="more than one element of the written-to variable refers to a single "
                                           "memory location"):
        b.add_(1.0)


def test_an_operand_that_would_change_the_shape_or_dtype_raises():
    x = Variable(np.ones(3), requires_grad=False)
    with pytest.raises(RuntimeError, match=re.escape("add_: output with shape (3,) doesn't match the broadcast "
                                                     "shape (2, 3)")):
        x.add_(np.ones((2, 3)))
    i = Variable(np.array([1, 2, 3]), requires_grad=False)
    with pytest.raises(TypeError, match="mul_: result type float64 can't be cast to the variable's dtype int64"):
        i.mul_(0.5)
    with pytest.raises(TypeError, match="add_: unsupported operand type str"):
        x.add_("1")
    assert x._version == 0 and i._version == 0


def test_the_error_names_the_tensor_its_maker_and_both_versions_like_torch():
    a = Variable(np.array([1.0, 2.0, 3.0]))
    y = tinypytorch.exp(a)
    y.add_(1.0)
    y.add_(1.0)
    with pytest.raises(RuntimeError) as error:
        y.sum().backward()
    message = str(error.value)
    assert message.startswith("one of the variables needed for gradient computation has been modified by an "
                              "inplace operation: [float64 array of shape (3,)], which is output 0 of Exp, is at "
                              "version 2; expected version 0 instead.")
    at = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    yt = torch.exp(at)
    yt.add_(1.0)
    yt.add_(1.0)
    with pytest.raises(RuntimeError, match="which is output 0 of Exp, is at version 2; expected version 0"):
        yt.sum().backward()


def test_a_recorded_in_place_operation_makes_the_variable_a_non_leaf_of_the_new_function():
    a = Variable(np.array([1.0, 2.0]))
    c = Variable(np.zeros(2), requires_grad=False)
    assert c.is_leaf and not c.requires_grad
    c.add_(a)
    assert not c.is_leaf and c.requires_grad and type(c.creator).__name__ == "Add"
    assert c.creator.outputs[0]() is c


def test_second_derivatives_through_an_in_place_operation_equal_torchs():
    def second(leaf, grad):
        a = leaf([0.5, 1.5])
        b = a * a
        b.mul_(a)  # b = a^3
        (g,) = grad(b.sum(), a)
        (gg,) = grad(g.sum(), a)
        return gg

    ours = second(lambda v: Variable(np.array(v)),
                  lambda y, x: tinypytorch.autograd.grad(y, x, create_graph=True))
    theirs = second(lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True),
                    lambda y, x: torch.autograd.grad(y, x, create_graph=True))
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-14)  # 6a
    np.testing.assert_allclose(ours.data, [3.0, 9.0], rtol=1e-14)
