"""Step 16's lesson: the generations and turns the picture writes, and the exercises' solutions (gradients by
hand in generation order, a heap) against PyTorch."""
import numpy as np
import pytest
import torch
from hypothesis import given

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step16, pytest.mark.torch]
step = load_step(16)


def test_the_picture_numbers_add_first_and_a_last_once():
    x = step.Variable(np.array(2.0))
    a = step.square(x)
    b, c = step.square(a), step.square(a)
    y = step.add(b, c)
    assert [v.generation for v in (x, a, b, c, y)] == [0, 1, 2, 2, 3]
    ran = step.backward_order(y)
    assert ran[0] is y.creator and ran[-1] is a.creator and len(ran) == 4
    assert {id(f) for f in ran[1:3]} == {id(b.creator), id(c.creator)}
    assert x.grad == 64.0


@given(floats(-2, 2))
def test_gradients_by_hand_equal_torchs_node_by_node(value):
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    at = xt**2
    bt, ct = at**2, torch.exp(at)
    yt = bt + ct
    for t in (at, bt, ct, yt):
        t.retain_grad()
    yt.backward()
    by_hand = step.grads_by_hand(value)
    expected = {"y": yt.grad, "b": bt.grad, "c": ct.grad, "a": at.grad, "x": xt.grad}
    assert list(by_hand) == ["y", "b", "c", "a", "x"]  # generation order, from the output down
    for name, g in expected.items():
        np.testing.assert_allclose(by_hand[name], g.item(), rtol=1e-12, atol=1e-300)


def test_gradients_by_hand_work_on_arrays_too():
    values = np.array([-1.0, 0.3, 1.5])
    xt = torch.tensor(values, requires_grad=True)
    at = xt**2
    (at**2 + torch.exp(at)).sum().backward()
    np.testing.assert_allclose(step.grads_by_hand(values)["x"], xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("build, torch_build", [
    (lambda a: step.add(step.square(a), step.square(a)), lambda a: a**2 + a**2),
    (lambda a: step.add(step.exp(step.exp(a)), a), lambda a: torch.exp(torch.exp(a)) + a),
    (lambda a: step.add(step.add(step.square(a), a), step.square(step.square(a))), lambda a: (a**2 + a) + a**4),
])
def test_the_heap_gives_torchs_gradient(build, torch_build):
    values = np.array([-0.9, 0.4, 1.1])
    x = step.Variable(values)
    step.backward_heap(build(step.square(x)))
    xt = torch.tensor(values, requires_grad=True)
    torch_build(xt**2).sum().backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


def test_the_heap_on_a_leaf_sets_the_seed():
    x = step.Variable(np.array([1.0, 2.0]))
    step.backward_heap(x)
    np.testing.assert_array_equal(x.grad, [1.0, 1.0])
