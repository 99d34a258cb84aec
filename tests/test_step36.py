"""Step 36: version counters and in-place operations, against PyTorch (views: tests/test_step37.py)."""
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tinypytorch
from in_place import (OPERANDS, OPS, assert_in_place_sequence_as_in_torch, assert_scenario_as_in_torch,
                      assert_table_has_cases_of_both_kinds, leaf_values, operand)
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.layers import Linear
from tinypytorch.optimizers import SGD, Adam

pytestmark = [pytest.mark.step36, pytest.mark.torch]
step = load_step(36)


@pytest.mark.parametrize("scenario", step.SCENARIOS, ids=lambda s: s.__name__)
def test_each_scenario_raises_where_torch_raises_and_otherwise_equals_torchs_gradients(scenario, xp):
    assert_scenario_as_in_torch(step, scenario, xp)


def test_the_table_has_cases_of_both_kinds():
    assert_table_has_cases_of_both_kinds(step)


# random sequences of in-place operations on a whole non-leaf, against torch (through views: test_step37.py)

@given(ops=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(OPERANDS)), min_size=1, max_size=5),
       values=leaf_values)
def test_random_in_place_sequences_give_torchs_values_and_gradients(ops, values):
    def change(b, w):
        for op, name in ops:
            getattr(b, op)(operand(name, w))

    assert_in_place_sequence_as_in_torch(values, change)


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


def test_detach_shares_the_data_and_the_counter_as_in_torch():
    b = Variable(np.array([1.0, 2.0]), requires_grad=False)
    d = b.detach()
    d.add_(1.0)
    assert b._version == d._version == 1 and b.data.tolist() == [2.0, 3.0]
    t = torch.tensor([1.0, 2.0])
    t.detach().add_(1.0)
    assert t._version == 1


def test_a_leaf_that_requires_grad_cannot_change_in_place_but_can_under_no_grad():
    w = Variable(np.array([1.0, 2.0]))
    for op in ["add_", "sub_", "mul_", "div_"]:
        with pytest.raises(RuntimeError, match=f"^{op}: a leaf Variable that requires grad is being used in an "
                                               "in-place operation.$"):
            getattr(w, op)(1.0)
    with pytest.raises(RuntimeError, match="^zero_: a leaf Variable"):
        w.zero_()
    assert w._version == 0 and w.data.tolist() == [1.0, 2.0]
    with tinypytorch.no_grad():
        w.add_(1.0)
    assert w._version == 1 and w.data.tolist() == [2.0, 3.0]
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        t.add_(1.0)


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


def test_an_operand_that_would_change_the_shape_or_dtype_raises():
    x = Variable(np.ones(3), requires_grad=False)
    with pytest.raises(RuntimeError, match=re.escape("add_: output with shape (3,) doesn't match the broadcast "
                                                     "shape (2, 3)")):
        x.add_(np.ones((2, 3)))
    i = Variable(np.array([1, 2, 3]), requires_grad=False)
    with pytest.raises(RuntimeError, match="^result type Float can't be cast to the desired output type Long$"):
        i.mul_(0.5)
    with pytest.raises(RuntimeError, match="^result type Float can't be cast to the desired output type Long$"):
        torch.tensor([1, 2, 3]).mul_(0.5)  # PyTorch's words
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


# ----- .data bypasses the version counter, in both frameworks ---------------------------------------------------

def data_case(case, leaf, array, exp, grad):
    """a = [1, 2]; b = 2a with c = sum(b^2) (dc/da = 8a), or y = exp(a) with c = sum(y) (dc/da = e^a)."""
    a = leaf([1.0, 2.0])
    b = exp(a) if case == "output assigned" else a * 2
    c = b.sum() if case == "output assigned" else (b * b).sum()
    if case in ("input assigned", "output assigned"):
        b.data = array([100.0, 200.0])
    else:  # written into the array, past the framework
        b.data[...] += 1
    assert b._version == 0  # not counted
    c.backward()
    return grad(a)


OURS = dict(leaf=lambda v: Variable(np.array(v)), array=np.array, exp=tinypytorch.exp,
            grad=lambda t: np.array(t.grad.data))
TORCH = dict(leaf=lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True),
             array=lambda v: torch.tensor(v, dtype=torch.float64), exp=torch.exp, grad=lambda t: t.grad.numpy())


def test_assigning_data_of_a_saved_input_gives_the_same_silently_wrong_gradient_in_both():
    ours, theirs = data_case("input assigned", **OURS), data_case("input assigned", **TORCH)
    np.testing.assert_allclose(ours, theirs, rtol=1e-14)
    np.testing.assert_allclose(ours, 4 * np.array([100.0, 200.0]), rtol=1e-14)  # 2b with the new b
    assert not np.allclose(ours, 8 * np.array([1.0, 2.0]))  # not the right 8a


def test_assigning_data_of_a_saved_output_leaves_the_saved_array_so_the_gradient_is_right_in_both():
    ours, theirs = data_case("output assigned", **OURS), data_case("output assigned", **TORCH)
    np.testing.assert_allclose(ours, theirs, rtol=1e-14)
    np.testing.assert_allclose(ours, np.exp([1.0, 2.0]), rtol=1e-14)


def test_writing_into_data_is_not_counted_and_gives_the_same_wrong_gradient_in_both():
    ours, theirs = data_case("input written", **OURS), data_case("input written", **TORCH)
    np.testing.assert_allclose(ours, theirs, rtol=1e-14)
    np.testing.assert_allclose(ours, 4 * (2 * np.array([1.0, 2.0]) + 1), rtol=1e-14)


def test_the_pages_data_table_agrees_with_torch_and_names_the_wrong_cases():
    ours, theirs = step.data_results["ours"], step.data_results["torch"]
    assert ours["b.detach().add_(1)"] == theirs["b.detach().add_(1)"] == "raises"
    for case in ("input: b.data = new", "output: y.data = new", "input: written into b.data"):
        np.testing.assert_allclose(ours[case], theirs[case], rtol=1e-14)
    np.testing.assert_allclose(ours["output: y.data = new"], step.RIGHT["output: y.data = new"], rtol=1e-14)
    assert not np.allclose(ours["input: b.data = new"], step.RIGHT["input: b.data = new"])
