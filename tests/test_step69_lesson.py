"""Step 69's lesson: the exercises' solutions (pairwise distances by two vmaps, the physical permutation of a
batched permute, a softmax of each column through in_dims and out_dims), checked against torch, and the page's
own check (its functions and misuses against torch.func.vmap)."""
import numpy as np
import pytest
import torch
import torch.func as tfunc
from hypothesis import given, settings
from hypothesis import strategies as st

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step69, pytest.mark.torch]
step = load_step(69)


@pytest.mark.parametrize("n, m, d", [(1, 1, 1), (4, 5, 3), (6, 2, 7)])
def test_pairwise_distances_equal_torch_cdist(n, m, d):
    rng = np.random.default_rng(n * 10 + m)
    P, Q = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    ours = step.pairwise(tp.tensor(P), tp.tensor(Q))
    theirs = torch.cdist(torch.tensor(P), torch.tensor(Q))
    assert tuple(ours.shape) == (n, m)
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.permutations(range(n))))
def test_the_physical_permutation_permutes_every_sample_as_torch(perm):
    perm = tuple(perm)
    batch = np.random.default_rng(len(perm)).normal(size=(3,) + (2, 3, 4, 5)[:len(perm)])
    theirs = tfunc.vmap(lambda x: x.permute(*perm))(torch.tensor(batch)).numpy()
    np.testing.assert_array_equal(np.transpose(batch, step.physical_perm(perm)), theirs)


@pytest.mark.parametrize("shape", [(3, 6), (1, 4), (5, 1)])
def test_column_softmax_equals_torch_softmax_over_dim_0(shape):
    S = np.random.default_rng(sum(shape)).normal(size=shape) * 10
    ours = step.column_softmax(tp.tensor(S))
    np.testing.assert_allclose(ours.data, torch.softmax(torch.tensor(S), dim=0).numpy(), rtol=1e-12, atol=1e-15)


def test_the_pages_check_compared_every_function_and_misuse_with_torch():
    assert len(step.agree) >= 30 and all(step.agree.values())
    assert all(ours == theirs and ours[0] for ours, theirs in step.errors.values())


def test_the_pages_comparison_fails_on_a_wrong_value_dtype_or_shape():
    """`same`, the page's comparison, is not blind: it tells a different value, dtype or shape from torch's."""
    t = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert step.same(tp.tensor([1.0, 2.0], dtype=tp.float64), t)
    assert not step.same(tp.tensor([1.0, 2.0 + 1e-9], dtype=tp.float64), t)
    assert not step.same(tp.tensor([1.0, 2.0], dtype=tp.float32), t)
    assert not step.same(tp.tensor([[1.0, 2.0]], dtype=tp.float64), t)
