"""Step 15 keeps step 14's framework, whose depth-first order is wrong on branching graphs.

These tests pin the explanation: the framework's value equals what a last-in-first-out
schedule predicts (12x^3), torch gives the true derivative (8x^3), and the two differ.
"""
import numpy as np
import pytest
import torch
from hypothesis import given

from reference import backward_through_traced_branches, floats, torch_branching_grad
from steploader import load_step

pytestmark = [pytest.mark.step15, pytest.mark.torch]
step = load_step(15)

nonzero = floats(-5, 5).filter(lambda v: abs(v) > 1e-3)


def lifo_schedule(x):
    """Backpropagate a = x^2, b = a^2, c = a^2, y = b + c by hand with a stack and accumulation."""
    a = x * x
    creator = {"y": "Add", "b": "B", "c": "C", "a": "A", "x": None}
    functions = {  # name: (output, [(input, local derivative d output / d input)])
        "Add": ("y", [("b", 1.0), ("c", 1.0)]),
        "B": ("b", [("a", 2 * a)]),
        "C": ("c", [("a", 2 * a)]),
        "A": ("a", [("x", 2 * x)]),
    }
    grads, stack, order = {"y": 1.0}, ["Add"], []
    while stack:
        name = stack.pop()
        output, inputs = functions[name]
        order.append((name, grads[output]))
        for variable, local in inputs:
            grads[variable] = grads.get(variable, 0.0) + grads[output] * local
            if creator[variable] is not None:
                stack.append(creator[variable])
    return grads["x"], order


def framework_grad(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    step.add(step.square(a), step.square(a)).backward()
    return x.grad


def test_the_schedule_predicts_96_at_2_where_torch_gives_64():
    predicted, order = lifo_schedule(2.0)
    assert predicted == 96.0
    assert order == [("Add", 1.0), ("C", 1.0), ("A", 8.0), ("B", 1.0), ("A", 16.0)]
    assert torch_branching_grad(2.0) == 64.0  # 8x^3
    assert framework_grad(2.0) == predicted


@given(nonzero)
def test_the_framework_gives_the_predicted_12x3_not_torchs_8x3(value):
    predicted, _ = lifo_schedule(value)
    np.testing.assert_allclose(predicted, 12 * value**3, rtol=1e-12)  # 2x*2a + 2x*4a with a = x^2
    np.testing.assert_allclose(framework_grad(value), predicted, rtol=1e-12)
    np.testing.assert_allclose(torch_branching_grad(value), 8 * value**3, rtol=1e-12)
    assert not np.isclose(framework_grad(value), torch_branching_grad(value), rtol=1e-6, atol=0)  # 12x^3 vs 8x^3


def test_the_trace_shows_a_running_twice(capsys):
    x = backward_through_traced_branches(step)
    calls = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert calls == ["Add", "C", "A", "B", "A"]
    assert x.grad == 96.0


@given(floats(-5, 5))
def test_a_reused_leaf_is_still_right_because_order_does_not_matter_for_leaves(value):
    x = step.Variable(np.array(value))
    step.add(step.add(step.square(x), x), step.exp(x)).backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    ((xt**2 + xt) + torch.exp(xt)).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
