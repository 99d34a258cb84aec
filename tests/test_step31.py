"""Step 31: matmul, linear and indexing, against PyTorch (float64)."""
import re
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, basic_indices, mutually_broadcastable_shapes

import tinypytorch
import tinypytorch.functions as F
from reference import compare_weighted_sum, floats
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import functions_in_graph, numerical_diff

pytestmark = [pytest.mark.step31, pytest.mark.torch]
step = load_step(31)

sides = st.integers(1, 5)


def uniform(seed, shape):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, shape)


# ----- matmul ---------------------------------------------------------------------------------

@given(n=sides, d=sides, h=sides, seed=st.integers(0, 2**32 - 1))
def test_matmul_of_matrices_equals_torch(n, d, h, seed):
    compare_weighted_sum(lambda x, W: x @ W, lambda x, W: x @ W, uniform(seed, (n, d)), uniform(seed + 1, (d, h)),
                         seed=seed)


@given(batch=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       n=sides, d=sides, h=sides, seed=st.integers(0, 2**32 - 1))
def test_matmul_of_stacks_with_broadcast_batch_dimensions_equals_torch(batch, n, d, h, seed):
    a, b = batch.input_shapes
    compare_weighted_sum(F.matmul, torch.matmul, uniform(seed, a + (n, d)), uniform(seed + 1, b + (d, h)), seed=seed)


def test_matmul_function_method_and_operator_forms_agree():
    x, W = Variable(uniform(0, (2, 3))), Variable(uniform(1, (3, 4)))
    expected = x.data @ W.data
    for y in (x @ W, x.matmul(W), F.matmul(x, W), tinypytorch.matmul(x, W), x.data @ W, x @ W.data):
        assert isinstance(y, Variable)
        np.testing.assert_array_equal(y.data, expected)


def test_ndarray_at_variable_sends_the_gradient_to_the_variable():
    a, W = uniform(0, (2, 3)), Variable(uniform(1, (3, 4)))
    (a @ W).sum().backward()
    np.testing.assert_allclose(W.grad, a.T @ np.ones((2, 4)), rtol=1e-15)


def test_matmul_gradients_of_the_steps_example_equal_the_formulas():
    x, W = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])), Variable(np.arange(12.0).reshape(3, 4) - 5)
    g = np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 1.0, -1.0, 0.0]])
    (x @ W * g).sum().backward()
    # dL/dx_nd = sum_h g_nh W_dh, dL/dW_dh = sum_n x_nd g_nh, written out as loops
    expected_x = [[sum(g[n, h] * W.data[d, h] for h in range(4)) for d in range(3)] for n in range(2)]
    expected_W = [[sum(x.data[n, d] * g[n, h] for n in range(2)) for h in range(4)] for d in range(3)]
    np.testing.assert_array_equal(x.grad, expected_x)
    np.testing.assert_array_equal(W.grad, expected_W)


@pytest.mark.parametrize("shape0, shape1, message", [
    ((2, 3), (2, 3), "matmul: shapes (2, 3) and (2, 3) are not aligned: 3 (dim 1) != 2 (dim 0)"),
    ((5, 2, 3), (4, 2), "matmul: shapes (5, 2, 3) and (4, 2) are not aligned: 3 (dim 2) != 4 (dim 0)"),
    ((4, 2, 3), (5, 3, 1), "matmul: batch dimensions (4,) and (5,) do not broadcast"),
    ((3,), (2, 2), "matmul: shapes (3,) and (2, 2) are not aligned: 3 (dim 0) != 2 (dim 0)"),
    ((2, 3), (2,), "matmul: shapes (2, 3) and (2,) are not aligned: 3 (dim 1) != 2 (dim 0)"),
    ((3,), (5, 2, 4), "matmul: shapes (3,) and (5, 2, 4) are not aligned: 3 (dim 0) != 2 (dim 1)"),
])
def test_matmul_with_bad_shapes_raises_value_error_naming_both_shapes(shape0, shape1, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        Variable(np.ones(shape0)) @ Variable(np.ones(shape1))


@given(shapes=st.sampled_from([((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((4, 2, 3), (3,)), ((3,), (4, 3, 2)),
                                ((1,), (1,))]),
       seed=st.integers(0, 2**32 - 1))
def test_matmul_with_a_vector_equals_torch(shapes, seed):
    # a vector is one row on the left, one column on the right, and that dimension is dropped from the result
    compare_weighted_sum(lambda x, W: x @ W, lambda x, W: x @ W, uniform(seed, shapes[0]), uniform(seed + 1, shapes[1]),
                         seed=seed)


@pytest.mark.parametrize("shapes", [((), (3,)), ((2, 3), ())])
def test_matmul_of_a_0d_tensor_raises_torchs_error(shapes):
    with pytest.raises(RuntimeError) as expected:
        torch.ones(shapes[0]) @ torch.ones(shapes[1])
    with pytest.raises(RuntimeError) as ours:
        tinypytorch.ones(shapes[0]) @ tinypytorch.ones(shapes[1])
    assert str(ours.value) == str(expected.value)


@pytest.mark.parametrize("shapes", [((2,), (2,)), ((2, 2), (2,)), ((2, 2), (2, 2)), ((3, 2, 2), (3, 2, 2))])
def test_matmul_of_bools_raises_not_implemented_error_as_torch(shapes):
    with pytest.raises(NotImplementedError):
        torch.ones(shapes[0], dtype=torch.bool) @ torch.ones(shapes[1], dtype=torch.bool)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        tinypytorch.ones(shapes[0], dtype=tinypytorch.bool) @ tinypytorch.ones(shapes[1], dtype=tinypytorch.bool)


# ----- linear -----------------------------------------------------------------------------------

@given(n=sides, n_in=sides, n_out=sides, bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear_equals_torch_functional_linear(n, n_in, n_out, bias, seed):
    arrays_ = [uniform(seed, (n, n_in)), uniform(seed + 1, (n_out, n_in))] + ([uniform(seed + 2, n_out)] if bias else [])
    compare_weighted_sum(F.linear, torch.nn.functional.linear, *arrays_, seed=seed)


@given(lead=st.sampled_from([(), (1,), (4, 2), (2, 1, 3)]), bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear_of_one_sample_or_batches_of_batches_equals_torch(lead, bias, seed):
    arrays_ = [uniform(seed, (*lead, 3)), uniform(seed + 1, (2, 3))] + ([uniform(seed + 2, 2)] if bias else [])
    compare_weighted_sum(F.linear, torch.nn.functional.linear, *arrays_, seed=seed)


def test_linear_of_a_0d_input_raises_torchs_error():
    with pytest.raises(RuntimeError) as expected:
        torch.nn.functional.linear(torch.tensor(1.0), torch.ones(2, 3))
    with pytest.raises(RuntimeError) as ours:
        F.linear(tinypytorch.tensor(1.0), tinypytorch.ones(2, 3))
    assert str(ours.value) == str(expected.value)


@given(n=sides, n_in=sides, n_out=sides, seed=st.integers(0, 2**32 - 1))
def test_linear_equals_the_composition_of_matmul_transpose_and_add(n, n_in, n_out, seed):
    data = [uniform(seed, (n, n_in)), uniform(seed + 1, (n_out, n_in)), uniform(seed + 2, n_out)]
    w = uniform(seed + 3, (n, n_out))
    fused, composed = [Variable(a.copy()) for a in data], [Variable(a.copy()) for a in data]
    (F.linear(*fused) * w).sum().backward()
    x, W, b = composed
    ((x @ W.T + b) * w).sum().backward()
    for a, c in zip(fused, composed):
        np.testing.assert_allclose(a.grad, c.grad, rtol=1e-13, atol=1e-15)


def test_linear_records_one_node_and_neither_form_keeps_the_intermediate_product():
    rng = np.random.default_rng(0)
    x, W, b = (Variable(rng.uniform(-1, 1, s)) for s in [(1000, 100), (100, 100), (100,)])

    def held(build):
        tracemalloc.start()
        y = build()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return held, [type(f).__name__ for f in functions_in_graph(y)]

    composed, composed_nodes = held(lambda: x @ W.T + b)
    fused, fused_nodes = held(lambda: F.linear(x, W, b))
    one_product = 1000 * 100 * 8
    assert sorted(composed_nodes) == ["Add", "MatMul", "Transpose"] and fused_nodes == ["LinearFunction"]
    assert abs(fused - one_product) < 0.05 * one_product  # the output only
    assert abs(composed - one_product) < 0.05 * one_product  # step 35: Add keeps no input, so x @ W.T is freed


@pytest.mark.parametrize("shapes, message", [
    (((4, 3), (2, 5)), "linear: input of shape (4, 3) does not fit weight of shape (2, 5): in_features 3 != 5"),
    (((4, 3), (2, 3), (3,)), "linear: bias of shape (3,) does not match out_features 2"),
    (((4, 3), (2, 3), (1, 2)), "linear: bias of shape (1, 2) does not match out_features 2"),
    (((3,), (2, 4)), "linear: input of shape (3,) does not fit weight of shape (2, 4): in_features 3 != 4"),
    (((5, 4, 3), (2, 4)), "linear: input of shape (5, 4, 3) does not fit weight of shape (2, 4): in_features 3 != 4"),
    (((4, 3), (3,)), "linear: weight must be 2-D, got shape (3,)"),
])
def test_linear_with_bad_shapes_raises_value_error(shapes, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        F.linear(*(np.ones(s) for s in shapes))


# ----- indexing ---------------------------------------------------------------------------------

@given(data=st.data(), shape=st.lists(sides, min_size=1, max_size=3).map(tuple), seed=st.integers(0, 2**32 - 1))
def test_basic_indexing_equals_torch(data, shape, seed):
    key = data.draw(basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    parts = key if isinstance(key, tuple) else (key,)
    assume(all(p.step is None or p.step > 0 for p in parts if isinstance(p, slice)))  # torch has no negative steps
    compare_weighted_sum(lambda x: x[key] * 1.0, lambda t: t[key] * 1.0, uniform(seed, shape), seed=seed)


@given(n=sides, m=sides, picks=st.lists(st.integers(-5, 4), min_size=1, max_size=8), seed=st.integers(0, 2**32 - 1))
def test_fancy_indexing_with_repeats_accumulates_like_torch(n, m, picks, seed):
    picks = [p for p in picks if -n <= p < n] or [0]
    compare_weighted_sum(lambda x: x[picks], lambda t: t[picks], uniform(seed, (n, m)), seed=seed)
    compare_weighted_sum(lambda x: x[:, [0, 0, m - 1]], lambda t: t[:, [0, 0, m - 1]], uniform(seed, (n, m)), seed=seed)


@given(arrays(np.float64, (3, 4), elements=floats(-1.0, 1.0)))
def test_boolean_mask_indexing_equals_torch(data):
    mask = data > 0
    compare_weighted_sum(lambda x: x[mask], lambda t: t[torch.as_tensor(mask)], data)


def test_repeated_index_gradient_counts_every_occurrence():
    x = Variable(np.arange(6.0).reshape(3, 2))
    x[[0, 0, 1]].sum().backward()
    np.testing.assert_array_equal(x.grad, [[2.0, 2.0], [1.0, 1.0], [0.0, 0.0]])
    x.cleargrad()
    x[[2, 2, 2], [1, 1, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad, [[0.0, 0.0], [0.0, 0.0], [1.0, 2.0]])


def test_indexing_gradient_matches_the_numerical_gradient():
    w = uniform(7, (4, 2))
    data = uniform(8, (3, 2))

    def f(v):
        return tinypytorch.sin(v[[0, 2, 2, 1]] * 2.0) * w

    x = Variable(data.copy())
    f(x).sum().backward()
    np.testing.assert_allclose(x.grad, numerical_diff(f, data), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("key, message", [
    (5, "getitem: index 5 is out of bounds for axis 0 with size 3 (key 5, shape (3, 2))"),
    ([0, 5], "getitem: index 5 is out of bounds for axis 0 with size 3 (key [0, 5], shape (3, 2))"),
    ((0, -3), "getitem: index -3 is out of bounds for axis 1 with size 2 (key (0, -3), shape (3, 2))"),
    ((0, 0, 0), "getitem: too many indices for array: array is 2-dimensional, but 3 were indexed"),
])
def test_an_index_out_of_range_raises_index_error_naming_op_index_and_shape(key, message):
    with pytest.raises(IndexError, match="^" + re.escape(message)):
        Variable(np.zeros((3, 2)))[key]


def test_iterating_over_a_variable_yields_its_rows_and_stops():
    x = Variable(np.arange(6.0).reshape(3, 2))
    rows = list(x)
    assert len(rows) == 3 and all(isinstance(r, Variable) for r in rows)
    np.testing.assert_array_equal(rows[2].data, [4.0, 5.0])


# ----- second derivatives ---------------------------------------------------------------------

@given(n=sides, d=sides, h=sides, seed=st.integers(0, 2**32 - 1))
def test_second_derivative_of_sum_tanh_x_at_W_equals_torch(n, d, h, seed):
    x0, W0 = uniform(seed, (n, d)), uniform(seed + 1, (d, h))
    x, W = Variable(x0.copy()), Variable(W0.copy())
    tinypytorch.tanh(x @ W).sum().backward(create_graph=True)
    gx, gW = x.grad, W.grad
    x.cleargrad()
    W.cleargrad()
    ((gW * gW).sum() + (gx**3).sum()).backward()
    xt, Wt = torch.tensor(x0, requires_grad=True), torch.tensor(W0, requires_grad=True)
    gxt, gWt = torch.autograd.grad(torch.tanh(xt @ Wt).sum(), (xt, Wt), create_graph=True)
    ((gWt * gWt).sum() + (gxt**3).sum()).backward()
    for ours, theirs in [(gx, gxt), (gW, gWt), (x.grad, xt.grad), (W.grad, Wt.grad)]:
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-11, atol=1e-14)


@given(seed=st.integers(0, 2**32 - 1))
def test_second_derivative_through_linear_and_indexing_equals_torch(seed):
    x0, W0, b0 = uniform(seed, (4, 3)), uniform(seed + 1, (2, 3)), uniform(seed + 2, 2)
    x, W, b = (Variable(a.copy()) for a in (x0, W0, b0))
    (F.linear(x, W, b)[[0, 0, 3]] ** 3).sum().backward(create_graph=True)
    gW, gb = W.grad, b.grad
    for v in (x, W, b):
        v.cleargrad()
    ((gW * gW).sum() + (gb * gb).sum()).backward()
    xt, Wt, bt = (torch.tensor(a, requires_grad=True) for a in (x0, W0, b0))
    gWt, gbt = torch.autograd.grad((torch.nn.functional.linear(xt, Wt, bt)[[0, 0, 3]] ** 3).sum(), (Wt, bt),
                                   create_graph=True)
    ((gWt * gWt).sum() + (gbt * gbt).sum()).backward()
    for ours, theirs in [(gW, gWt), (gb, gbt), (x.grad, xt.grad), (W.grad, Wt.grad), (b.grad, bt.grad)]:
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-11, atol=1e-14)


# ----- the step's own check -----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(step.keys))
@given(seed=st.integers(0, 2**32 - 1))
def test_the_steps_index_keys_equal_torch_on_random_inputs(name, seed):
    key = step.keys[name]
    data = uniform(seed, (4, 3))
    if isinstance(key, np.ndarray):
        key = data > 0
    compare_weighted_sum(lambda v: v[key], lambda t: t[torch.as_tensor(key) if isinstance(key, np.ndarray) else key],
                         data, seed=seed)
