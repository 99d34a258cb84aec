"""Step 37: views, the shared version counter and in-place changes through views (CopySlices), against PyTorch."""
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

pytestmark = [pytest.mark.step37, pytest.mark.torch]
step = load_step(37)


@pytest.mark.parametrize("scenario", step.SCENARIOS, ids=lambda s: s.__name__)
def test_each_view_scenario_raises_where_torch_raises_and_otherwise_equals_torchs_gradients(scenario, xp):
    assert_scenario_as_in_torch(step, scenario, xp)


def test_the_table_has_cases_of_both_kinds():
    assert_table_has_cases_of_both_kinds(step)


# random sequences of in-place operations through views of a non-leaf, against torch

@given(ops=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(OPERANDS),
                              st.sampled_from(["whole", "slice", "element", "reshape"])), min_size=1, max_size=5),
       values=leaf_values)
def test_random_in_place_sequences_through_views_give_torchs_values_and_gradients(ops, values):
    def change(b, w):
        for op, name, where in ops:
            target = {"whole": b, "slice": b[1:3], "element": b[2], "reshape": b.reshape(2, 2)}[where]
            other = operand(name, w)
            if name == "w" and where != "whole":
                other = {"slice": w[1:3], "element": w[2], "reshape": w.reshape(2, 2)}[where]
            getattr(target, op)(other)

    assert_in_place_sequence_as_in_torch(values, change)


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


def test_a_views_base_is_the_first_variable_of_the_chain_as_torchs():
    b = Variable(np.arange(6.0).reshape(2, 3), requires_grad=False)
    assert b._base is None and b[0]._base is b and b.T[1]._base is b and b[[0, 1]]._base is None
    t = torch.zeros(2, 3)
    assert t._base is None and t[0]._base is t and t.T[1]._base is t and t[[0, 1]]._base is None


def test_an_element_is_a_0d_view_so_changing_it_changes_the_base_as_in_torch():
    b = Variable(np.array([1.0, 2.0, 3.0]), requires_grad=False)
    e = b[1]
    e.mul_(10.0)
    assert e.shape == () and b.data.tolist() == [1.0, 20.0, 3.0]
    t = torch.tensor([1.0, 2.0, 3.0])
    t[1].mul_(10.0)
    assert t.tolist() == b.data.tolist()


def test_a_view_changed_in_place_gives_its_base_a_view_scatter_and_is_made_again_from_it():
    a = Variable(np.array([1.0, 2.0, 3.0]))
    b = a * 2
    made_b = b.creator
    row = b[0:2]
    row.mul_(3)
    assert type(b.creator).__name__ == "ViewScatter" and b.creator.edges[0] == (made_b, 0)
    assert type(row.creator).__name__ == "GetItem" and row.creator.edges[0] == (b.creator, 0)
    assert row._base is b and row._version == b._version == 1


def test_a_view_of_a_leaf_that_requires_grad_cannot_change_in_place_as_in_torch():
    w = Variable(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="^add_: a view of a leaf Variable that requires grad is being used in an "
                                           "in-place operation.$"):
        w[0:1].add_(1.0)
    assert w._version == 0 and w.data.tolist() == [1.0, 2.0]
    with tinypytorch.no_grad():
        w[0:1].add_(1.0)
    assert w._version == 1 and w.data.tolist() == [2.0, 2.0]
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an in-place"):
        t[0:1].add_(1.0)


def test_a_broadcast_view_cannot_change_in_place():
    b = tinypytorch.broadcast_to(Variable(np.array([1.0, 2.0]), requires_grad=False), (3, 2))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single "
                                           "memory location"):
        b.add_(1.0)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single "
                                           "memory location"):
        torch.tensor([1.0, 2.0]).expand(3, 2).add_(1.0)
