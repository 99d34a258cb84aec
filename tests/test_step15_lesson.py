"""Step 15's lesson: the orders the picture numbers (ours depth first, PyTorch's), and the exercises' solutions
(a queue, three branches) against PyTorch and the derivative worked out by hand."""
import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step15, pytest.mark.torch]
step = load_step(15)

nonzero = floats(-3, 3).filter(lambda v: abs(v) > 1e-2)
away_from_0 = floats(-3, 3).filter(lambda v: abs(v) > 0.5)  # where the long branch's 8x^7 is not negligible


def branching(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    b, c = step.square(a), step.square(a)
    return x, a, b, c, step.add(b, c)


def test_the_left_picture_numbers_add_c_a_b_a():
    x, a, b, c, y = branching(2.0)
    ran = step.backward_order(y)
    assert [next(name for f, name in [(y.creator, "Add"), (a.creator, "A"), (b.creator, "B"), (c.creator, "C")]
                 if f is g) for g in ran] == ["Add", "C", "A", "B", "A"]
    assert x.grad == 96.0


def test_the_right_picture_is_pytorchs_order_add_first_a_once_and_last():
    order = step.torch_order()
    assert order[0] == "Add" and order[-1] == "A" and sorted(order[1:3]) == ["B", "C"] and len(order) == 4


def torch_grad(value, build):
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    build(xt**2, lambda u, v: u + v, lambda u: u**2).backward()
    return xt.grad.item()


EQUAL = lambda a, add, sq: add(sq(a), sq(a))  # noqa: E731
UNEQUAL = lambda a, add, sq: add(sq(a), sq(sq(a)))  # noqa: E731


@given(away_from_0)
def test_a_queue_is_right_on_equal_branches_and_wrong_on_unequal_ones(value):
    x = step.Variable(np.array(value))
    step.backward_fifo(EQUAL(step.square(x), step.add, step.square))
    np.testing.assert_allclose(x.grad, torch_grad(value, EQUAL), rtol=1e-12)
    x = step.Variable(np.array(value))
    step.backward_fifo(UNEQUAL(step.square(x), step.add, step.square))
    true = 4 * value**3 + 8 * value**7  # y = x^4 + x^8
    np.testing.assert_allclose(torch_grad(value, UNEQUAL), true, rtol=1e-12)
    # the queue runs A after B alone (a.grad = 2a): only the short branch's 4x^3 reaches x
    np.testing.assert_allclose(x.grad, 4 * value**3, rtol=1e-12)
    assert not np.isclose(x.grad, true, rtol=1e-6)


@given(nonzero)
def test_three_branches_give_twice_pytorchs_gradient(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    step.add(step.add(step.square(a), step.square(a)), step.square(a)).backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    at = xt**2
    ((at**2 + at**2) + at**2).backward()
    np.testing.assert_allclose(xt.grad.item(), 12 * value**3, rtol=1e-12)  # y = 3x^4
    # A runs three times, with a.grad = 2a, 4a, 6a: 2x(2a + 4a + 6a) = 24x^3
    np.testing.assert_allclose(x.grad, 24 * value**3, rtol=1e-12)
