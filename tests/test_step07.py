import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from steploader import load_step

pytestmark = [pytest.mark.step07, pytest.mark.torch]
step = load_step(7)

RTOL = 1e-14  # same multiplications as torch; only exp may differ in the last bit
OPS = {"square": (step.Square, torch.square), "exp": (step.Exp, torch.exp)}
shapes = array_shapes(min_dims=0, max_dims=3)


@st.composite
def values_and_seeds(draw, low, high):
    shape = draw(shapes)
    x = draw(arrays(np.float64, shape, elements=st.floats(low, high)))
    seed = draw(arrays(np.float64, shape, elements=st.floats(-10.0, 10.0)))
    return x, seed


@given(pair=values_and_seeds(-2.0, 2.0))
def test_backward_gives_torchs_gradients_for_every_variable(pair):
    array, seed = pair
    x = step.Variable(array)
    a = step.Square()(x)
    b = step.Exp()(a)
    y = step.Square()(b)
    y.grad = seed
    y.backward()

    t = torch.tensor(array, requires_grad=True)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    torch.square(tb).backward(torch.tensor(seed))
    for ours, theirs in ((b, tb), (a, ta), (x, t)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=RTOL, atol=0)


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), values_and_seeds(-1.0, 1.0))
def test_backward_through_any_chain_of_up_to_three_functions_equals_torch(names, pair):
    # From |x| <= 1 the largest exp argument is exp(exp(1)) ~ 15, which turns an ulp-level
    # difference between the libraries into ~15 ulp: rtol 1e-13.
    array, seed = pair
    x = step.Variable(array)
    t = torch.tensor(array, requires_grad=True)
    y, ty = x, t
    for name in names:
        ours, theirs = OPS[name]
        y, ty = ours()(y), theirs(ty)
    y.grad = seed
    y.backward()
    ty.backward(torch.tensor(seed))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-13, atol=0)


def test_the_forward_pass_records_creator_input_and_output():
    A, B = step.Square(), step.Exp()
    x = step.Variable(np.array(0.5))
    a = A(x)
    y = B(a)
    assert x.creator is None
    assert a.creator is A and A.input is x and A.output is a
    assert y.creator is B and B.input is a and B.output is y


def test_set_creator_stores_the_function():
    v = step.Variable(np.array(1.0))
    f = step.Square()
    v.set_creator(f)
    assert v.creator is f


def test_the_steps_example_at_one_half():
    x = step.Variable(np.array(0.5))
    y = step.Square()(step.Exp()(step.Square()(x)))
    y.grad = np.array(1.0)
    y.backward()
    np.testing.assert_allclose(x.grad, 2 * np.e ** 0.5, rtol=RTOL)  # 4x e^(2x^2) at x = 1/2


def test_backward_on_a_leaf_does_nothing():
    # the recursive version checks for a creator first, so a leaf is simply the end
    x = step.Variable(np.array(2.0))
    x.grad = np.array(1.0)
    x.backward()
    assert x.grad == 1.0


def test_recursion_fails_on_a_chain_deeper_than_the_recursion_limit():
    # the limitation that step 08 removes
    x = step.Variable(np.array(0.5))
    y = x
    for _ in range(sys.getrecursionlimit() + 100):
        y = step.Square()(y)
    y.grad = np.array(1.0)
    with pytest.raises(RecursionError):
        y.backward()
