"""Step 14's lesson: what the picture says reaches x, and the exercises' solutions (repeat_add, Neg) against
PyTorch."""
import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step14, pytest.mark.torch]
step = load_step(14)


def test_three_gradients_of_one_reach_x_in_x_plus_x_plus_x():
    x = step.Variable(np.array(3.0))
    y = step.add(step.add(x, x), x)
    assert step.deliveries(y, x) == [1.0, 1.0, 1.0]  # one per path: d/dx of each term of x + x + x
    assert x.grad == 3.0


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_repeat_add_gives_n_as_torch_does(n):
    values = np.array([0.5, -2.0])
    x = step.Variable(values)
    step.repeat_add(x, n).backward()
    xt = torch.tensor(values, requires_grad=True)
    yt = xt + xt
    for _ in range(n - 2):
        yt = yt + xt
    yt.sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
    np.testing.assert_array_equal(x.grad, np.full(2, float(n)))


@given(floats(-100, 100))
def test_neg_forward_and_grad_equal_torch(u):
    x = step.Variable(np.array(u))
    y = step.neg(x)
    y.backward()
    t = torch.tensor(u, dtype=torch.float64, requires_grad=True)
    yt = -t
    yt.backward()
    assert y.data == yt.item()
    assert x.grad == t.grad.item() == -1.0


def test_a_reused_variable_through_neg_accumulates_as_in_torch():
    for build, expected in [(lambda v, add, neg: add(v, neg(v)), 0.0),
                            (lambda v, add, neg: add(add(v, v), neg(v)), 1.0)]:
        x = step.Variable(np.array(3.0))
        build(x, step.add, step.neg).backward()
        xt = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
        build(xt, torch.add, torch.neg).backward()
        assert x.grad == xt.grad.item() == expected
