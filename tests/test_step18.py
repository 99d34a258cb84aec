import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from reference import (
    ADD_SQUARE_EXP, add_square_exp_grads, assert_grads_equal_torch, draw_operations, floats, programs,
    run_add_square_exp, same_shape_arrays,
)
from steploader import load_step

pytestmark = [pytest.mark.step18, pytest.mark.torch]
step = load_step(18)

pairs = same_shape_arrays(2, floats(-2, 2), max_dims=2)


def build(x0, x1, add, square):
    t = square(add(x0, x1))
    return t, add(x0, t)


@given(pairs)
def test_by_default_only_leaves_keep_grads_and_they_equal_torch(pair):
    v0, v1 = pair
    x0, x1 = step.Variable(v0), step.Variable(v1)
    t, y = build(x0, x1, step.add, step.square)
    y.backward()
    x0t, x1t = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    tt, yt = build(x0t, x1t, torch.add, torch.square)
    yt.backward(torch.ones_like(yt))
    assert t.grad is None and y.grad is None  # the seed on y is released too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading a non-leaf .grad warns in torch
        assert tt.grad is None and yt.grad is None
    np.testing.assert_allclose(x0.grad, x0t.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x1.grad, x1t.grad.numpy(), rtol=1e-12)


@given(pairs)
def test_retain_grad_true_keeps_intermediate_grads_equal_to_torchs_retain_grad(pair):
    v0, v1 = pair
    x0, x1 = step.Variable(v0), step.Variable(v1)
    t, y = build(x0, x1, step.add, step.square)
    y.backward(retain_grad=True)
    x0t, x1t = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    tt, yt = build(x0t, x1t, torch.add, torch.square)
    tt.retain_grad()
    yt.backward(torch.ones_like(yt))
    np.testing.assert_array_equal(t.grad, tt.grad.numpy())
    np.testing.assert_allclose(x0.grad, x0t.grad.numpy(), rtol=1e-12)


def test_the_source_materials_example():
    x0, x1 = step.Variable(np.array(1.0)), step.Variable(np.array(1.0))
    t = step.add(x0, x1)
    y = step.add(x0, t)
    y.backward()
    assert t.grad is None and y.grad is None  # the source prints "None None"
    assert x0.grad == 2.0 and x1.grad == 1.0


def test_reusing_the_output_after_backward_gives_torchs_8_not_10():
    # y = 2x at x = 1, backward; then z = 3y, backward: x.grad = 2 + 6 = 8.
    # A seed left on y would be added to in the second pass: 2 + 2 * 4 = 10.
    x = step.Variable(np.array(1.0))
    y = step.add(x, x)
    y.backward()
    assert x.grad == 2.0 and y.grad is None
    z = step.add(step.add(y, y), y)
    z.backward()
    xt = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    yt = xt + xt
    yt.backward(retain_graph=True)
    (yt + yt + yt).backward()
    assert x.grad == 8.0 == xt.grad.item()


@given(pairs)
def test_a_seed_set_by_the_caller_is_used_then_released(pair):
    v, seed = pair
    x = step.Variable(v)
    y = step.square(step.exp(x))
    y.grad = seed
    y.backward()
    xt = torch.tensor(v, requires_grad=True)
    yt = torch.square(torch.exp(xt))
    yt.backward(torch.tensor(seed))
    assert y.grad is None
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


@given(floats(-3, 3))
def test_repeated_backward_now_accumulates_like_torch(value):
    x = step.Variable(np.array(value))
    y = step.square(step.square(x))
    y.backward()
    y.backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    yt = (xt**2) ** 2
    yt.backward(retain_graph=True)
    yt.backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_no_grad_records_nothing_and_restores_the_setting():
    x = step.Variable(np.array(2.0))
    with step.no_grad():
        assert step.Config.enable_backprop is False
        f = step.Square()
        y = f(x)
    assert step.Config.enable_backprop is True
    assert y.data == 4.0 and y.creator is None and y.generation == 0
    assert not hasattr(f, "inputs") and not hasattr(f, "outputs")
    y.backward()  # a creator-less variable: only its seed is set
    assert y.grad == 1.0 and x.grad is None


def test_no_grad_matches_torch_no_grad():
    with step.no_grad():
        y = step.exp(step.Variable(np.array([0.5, 1.5])))
    with torch.no_grad():
        yt = torch.exp(torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True))
    assert y.creator is None and yt.grad_fn is None
    np.testing.assert_array_max_ulp(y.data, yt.numpy(), maxulp=1)  # NumPy's exp and torch's part in the last bit


def test_using_config_restores_after_an_exception_and_when_nested():
    with pytest.raises(RuntimeError):
        with step.no_grad():
            raise RuntimeError("boom")
    assert step.Config.enable_backprop is True
    with step.using_config("enable_backprop", False):
        with step.using_config("enable_backprop", True):
            assert step.Config.enable_backprop is True
        assert step.Config.enable_backprop is False
    assert step.Config.enable_backprop is True


def test_using_config_rejects_an_unknown_option():
    with pytest.raises(ValueError, match="using_config: unknown option 'enable_backprob'; known options: enable_backprop"):
        with step.using_config("enable_backprob", False):
            pass
    assert not hasattr(step.Config, "enable_backprob")


def forward_memory(depth):
    x = step.Variable(np.ones(1_000_000))  # 8 MB, allocated before tracing
    tracemalloc.start()
    try:
        y = x
        for _ in range(depth):
            y = step.square(y)
        return tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()


def test_no_grad_keeps_the_peak_at_two_arrays_while_the_graph_keeps_all():
    held, peak = forward_memory(8)
    assert held >= 8 * 8e6 and peak >= 8 * 8e6
    with step.no_grad():
        held, peak = forward_memory(8)
    assert 8e6 <= held < 9e6 and 16e6 <= peak < 17e6  # the last result; at most an input and an output at once


def test_dropping_the_grads_of_function_outputs_keeps_only_the_leafs():
    for retain_grad, arrays_held in [(True, 9), (False, 1)]:
        x = step.Variable(np.ones(1_000_000))
        y = x
        for _ in range(8):
            y = step.square(y)
        tracemalloc.start()
        try:
            y.backward(retain_grad=retain_grad)
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert round(held / 8e6) == arrays_held


@given(programs(ADD_SQUARE_EXP, -1, 1))
def test_random_graphs_backpropagated_twice_match_torch(program):
    xs, ts = add_square_exp_grads(step, program, passes=2)
    assert_grads_equal_torch(xs, ts, rtol=1e-10, atol=1e-12)


@st.composite
def reused_outputs(draw):
    """A random program, then a second one whose result z depends on the first one's result y."""
    inputs, ops = draw(programs(ADD_SQUARE_EXP, -1, 1))
    # the first program's nodes, y the last of them, may be operands of the second
    more_ops = draw_operations(draw, ADD_SQUARE_EXP, len(inputs) + len(ops), draw(st.integers(0, 5)))
    return inputs, ops, more_ops


def run_twice(inputs, ops, more_ops, add, square, exp):
    nodes = run_add_square_exp(inputs, ops + more_ops, add, square, exp)
    y = nodes[len(inputs) + len(ops) - 1]
    return y, add(y, nodes[-1])  # z uses y, so y is an intermediate of z's backward pass


@given(reused_outputs())
def test_backward_then_reusing_the_output_in_a_second_graph_matches_torch(program):
    values, ops, more_ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # exp of exp may overflow: such cases are skipped
        y, z = run_twice(xs, ops, more_ops, step.add, step.square, step.exp)
        assume(np.all(np.abs(z.data) < 1e100))
        y.backward()
        z.backward()
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    yt, zt = run_twice(ts, ops, more_ops, torch.add, torch.square, torch.exp)
    yt.backward(torch.ones_like(yt), retain_graph=True)
    zt.backward(torch.ones_like(zt))
    assert y.grad is None and z.grad is None
    assert_grads_equal_torch(xs, ts, rtol=1e-10, atol=1e-12)
