import numpy as np
import pytest
import torch
from hypothesis import given

from reference import torch_grad, torch_square_exp_square_grads, values_and_seeds
from steploader import load_step

pytestmark = [pytest.mark.step06, pytest.mark.torch]
step = load_step(6)

# the same multiplications as torch's backward formulas; only e^x may differ in the last bit
RTOL = 1e-14


@pytest.mark.parametrize("cls, fn", [("Square", torch.square), ("Exp", torch.exp)])
@given(pair=values_and_seeds(-3.0, 3.0))
def test_backward_of_one_function_equals_torch_for_any_incoming_gradient(cls, fn, pair):
    array, gy = pair
    f = getattr(step, cls)()
    f(step.Variable(array))
    np.testing.assert_allclose(f.backward(gy), torch_grad(fn, array, gradient=gy), rtol=RTOL, atol=0)


@given(pair=values_and_seeds(-2.0, 2.0))
def test_backward_by_hand_through_the_chain_equals_torch(pair):
    array, seed = pair
    A, B, C = step.Square(), step.Exp(), step.Square()
    x = step.Variable(array)
    a = A(x)
    b = B(a)
    y = C(b)
    y.grad = seed
    b.grad = C.backward(y.grad)
    a.grad = B.backward(b.grad)
    x.grad = A.backward(a.grad)
    for ours, theirs in zip((b, a, x), torch_square_exp_square_grads(array, seed)):
        np.testing.assert_allclose(ours.grad, theirs, rtol=RTOL, atol=0)


def test_the_steps_example_at_one_half():
    A, B, C = step.Square(), step.Exp(), step.Square()
    x = step.Variable(np.array(0.5))
    b = B(A(x))
    C(b)
    grad = A.backward(B.backward(C.backward(np.array(1.0))))
    np.testing.assert_allclose(grad, 2 * np.e ** 0.5, rtol=RTOL)  # 4x e^(2x^2) at x = 1/2


def test_a_new_variable_has_no_grad():
    assert step.Variable(np.array(1.0)).grad is None


def test_a_function_remembers_the_input_variable_itself():
    x = step.Variable(np.array([1.0, 2.0]))
    f = step.Square()
    f(x)
    assert f.input is x


def test_one_function_object_remembers_only_its_latest_input():
    # why the step uses separate objects for A and C
    f = step.Square()
    x = step.Variable(np.array(3.0))
    a = f(x)
    f(a)
    assert f.input is a
    assert f.backward(np.array(1.0)) == 2 * 9.0  # the derivative at a = 9, not at x = 3


def test_the_base_class_backward_raises_not_implemented():
    with pytest.raises(NotImplementedError):
        step.Function().backward(np.array(1.0))


def test_backward_before_the_next_function_fails_because_grad_is_none():
    # the step's claim: calling A.backward(a.grad) too early fails rather than computing garbage
    A, B = step.Square(), step.Exp()
    a = A(step.Variable(np.array(0.5)))
    B(a)
    with pytest.raises(TypeError, match="NoneType"):
        A.backward(a.grad)
