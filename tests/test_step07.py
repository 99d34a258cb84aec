import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import (assert_seeded_square_exp_square_grads_equal_torch, seeded_chain_grads, square_exp_ops,
                       values_and_seeds)
from steploader import load_step

pytestmark = [pytest.mark.step07, pytest.mark.torch]
step = load_step(7)

RTOL = 1e-14  # same multiplications as torch; only exp may differ in the last bit
OPS = square_exp_ops(step)


@given(pair=values_and_seeds(-2.0, 2.0))
def test_backward_gives_torchs_gradients_for_every_variable(pair):
    assert_seeded_square_exp_square_grads_equal_torch(step, *pair, rtol=RTOL)


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), values_and_seeds(-1.0, 1.0))
def test_backward_through_any_chain_of_up_to_three_functions_equals_torch(names, pair):
    # From |x| <= 1 the largest exp argument is exp(exp(1)) ~ 15, which turns an ulp-level
    # difference between the libraries into ~15 ulp: rtol 1e-13.
    array, seed = pair
    ours, theirs = seeded_chain_grads(step.Variable, [OPS[name] for name in names], array, seed)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=0)


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
