import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference import (assert_seeded_square_exp_square_grads_equal_torch, seeded_chain_grads, square_exp_ops,
                       values_and_seeds)
from steploader import load_step

pytestmark = [pytest.mark.step08, pytest.mark.torch]
step = load_step(8)

RTOL = 1e-14  # same multiplications as torch; only exp may differ in the last bit
OPS = square_exp_ops(step)
DEPTH = 10_000


@given(pair=values_and_seeds(-2.0, 2.0))
def test_loop_backward_gives_torchs_gradients_for_every_variable(pair):
    assert_seeded_square_exp_square_grads_equal_torch(step, *pair, rtol=RTOL)


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), values_and_seeds(-1.0, 1.0))
def test_loop_backward_through_any_short_chain_equals_torch(names, pair):
    # largest exp argument exp(exp(1)) ~ 15 amplifies an ulp-level difference ~15 times: rtol 1e-13
    array, seed = pair
    ours, theirs = seeded_chain_grads(step.Variable, [OPS[name] for name in names], array, seed)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=0)


@pytest.fixture(scope="module")
def torch_sin_chain():
    t = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    ty = t
    for _ in range(DEPTH):
        ty = torch.sin(ty)
    ty.backward()
    return ty.item(), t.grad.item()


def test_a_10000_deep_chain_backpropagates_and_equals_torch(torch_sin_chain):
    # 10,000 cosines from different libraries and 10,000 rounded products: the worst case
    # is about 3e4 u ~ 3e-12 relative, so rtol 1e-11
    value, grad = torch_sin_chain
    x = step.Variable(np.array(1.0))
    y = step.sin_chain(x, DEPTH)
    y.grad = np.array(1.0)
    y.backward()
    np.testing.assert_allclose(y.data, value, rtol=1e-11, atol=0)
    np.testing.assert_allclose(x.grad, grad, rtol=1e-11, atol=0)


def test_the_sin_chain_gradient_is_the_product_of_cosines():
    # independent of torch: d x_n / d x_0 = prod cos(x_k), k = 0 .. n-1
    depth = 1000
    values = [1.0]
    for _ in range(depth):
        values.append(np.sin(values[-1]))
    x = step.Variable(np.array(1.0))
    y = step.sin_chain(x, depth)
    y.grad = np.array(1.0)
    y.backward()
    np.testing.assert_allclose(x.grad, np.prod(np.cos(values[:-1])), rtol=1e-12)


def test_the_recursive_version_fails_on_the_same_chain():
    x = step.Variable(np.array(1.0))
    y = step.sin_chain(x, DEPTH)
    y.grad = np.array(1.0)
    with pytest.raises(RecursionError):
        step.backward_recursive(y)


def test_the_steps_own_chain_reached_its_leaf_with_torchs_gradient(torch_sin_chain):
    # the module's x is the leaf of the check cell's 10,000-deep chain
    np.testing.assert_allclose(step.x.grad, torch_sin_chain[1], rtol=1e-11, atol=0)


def test_backward_on_a_leaf_fails_a_known_limitation_of_the_loop():
    # the loop puts self.creator (None) on its list unchecked; the step says so
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'input'"):
        step.Variable(np.array(1.0)).backward()


@pytest.mark.parametrize("depth", [DEPTH, 200_000])
def test_with_the_limit_raised_the_recursion_finishes_with_the_loops_gradient(depth):
    # the page's claim for Python 3.11+: Python-to-Python calls no longer use the C stack, so only the limit stops
    # the recursion; the gradient is the product of cosines either way
    assert sys.version_info >= (3, 11)
    x = step.Variable(np.array(1.0))
    y = step.sin_chain(x, depth)
    y.grad = np.array(1.0)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 1000)
    try:
        step.backward_recursive(y)
    finally:
        sys.setrecursionlimit(limit)
    recursive = x.grad
    y.backward()
    assert recursive == x.grad
    values = [1.0]
    for _ in range(depth - 1):
        values.append(np.sin(values[-1]))
    np.testing.assert_allclose(recursive, np.prod(np.cos(values)), rtol=1e-9)
