import gc
import operator
import weakref

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from reference import (
    assert_grads_equal_torch, draw_operations, floats, programs, torch_grad_after_reusing_the_output, torch_leaf,
)
from steploader import load_step

pytestmark = [pytest.mark.step22, pytest.mark.torch]
step = load_step(22)

shapes = array_shapes(min_dims=0, max_dims=3, max_side=4)
positive = floats(0.25, 4.0)  # divisions and fractional powers stay defined and well conditioned
signed = floats(-4.0, 4.0)

BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}
NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


def assert_grads_match(ours, theirs):
    for x, t in zip(ours, theirs):
        assert x.grad.shape == tuple(t.grad.shape)
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12)


@st.composite
def operand_pairs(draw, elements):
    """Two arrays of one shape, or a 0-d array and an array of any shape (in either order)."""
    shape = draw(shapes)
    first, second = shape, draw(st.sampled_from([shape, ()]))
    if draw(st.booleans()):
        first, second = second, first
    return draw(arrays(np.float64, first, elements=elements)), draw(arrays(np.float64, second, elements=elements))


@pytest.mark.parametrize("symbol", BINARY)
@given(pair=operand_pairs(positive))
def test_binary_operators_match_torch_including_0d_operands(symbol, pair):
    op = BINARY[symbol]
    a, b = pair
    x0, x1 = step.Variable(a), step.Variable(b)
    y = op(x0, x1)
    y.backward()
    t0, t1 = torch_leaf(a), torch_leaf(b)
    yt = op(t0, t1)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    assert_grads_match((x0, x1), (t0, t1))


@pytest.mark.parametrize("symbol", ["-", "/"])
@given(value=arrays(np.float64, shapes, elements=positive), number=positive)
def test_reflected_sub_and_div_keep_the_operands_in_written_order(symbol, value, number):
    op = BINARY[symbol]
    x = step.Variable(value)
    y = op(number, x)  # x.__rsub__ / x.__rtruediv__
    y.backward()
    xt = torch_leaf(value)
    yt = op(number, xt)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    first, second = y.creator.inputs
    assert first.data == number and second is x


@given(arrays(np.float64, shapes, elements=signed))
def test_neg_matches_torch(value):
    x = step.Variable(value)
    y = -x
    y.backward()
    xt = torch_leaf(value)
    (-xt).backward(torch.ones_like(xt))
    np.testing.assert_array_equal(y.data, -value)
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@given(value=arrays(np.float64, shapes, elements=positive), c=st.sampled_from([0, 1, 2, 3, -1, 0.5, -1.5, 2.5]) | positive)
def test_pow_with_a_constant_exponent_matches_torch(value, c):
    x = step.Variable(value)
    y = x**c
    y.backward()
    xt = torch_leaf(value)
    yt = xt**c
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


@given(value=arrays(np.float64, shapes, elements=floats(-4.0, 4.0)), c=st.sampled_from([1, 2, 3, 4, 5, -1, -2, -3]))
def test_integer_powers_of_negative_bases_and_values_near_zero_match_torch(value, c):
    # x**c for an integer c is defined for every x but 0 when c < 0: the sign of the base matters
    # (d(x^2)/dx at -1.5 is -3, not 3), so the whole real line is drawn, not only positive numbers
    assume(c > 0 or np.all(np.abs(value) > 1e-3))
    x = step.Variable(value)
    y = x**c
    y.backward()
    xt = torch_leaf(value)
    (xt**c).backward(torch.ones_like(xt))
    np.testing.assert_allclose(y.data, (xt**c).detach().numpy(), rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_the_derivative_of_x_squared_at_minus_one_and_a_half_is_minus_three():
    x = step.Variable(np.array(-1.5))
    (x**2).backward()
    assert x.grad == -3.0  # 2 x, worked out by hand


def test_pow_with_exponent_zero_has_gradient_zero_at_zero_like_torch():
    x = step.Variable(np.array([0.0, 2.0]))
    (x**0).backward()
    xt = torch_leaf(np.array([0.0, 2.0]))
    (xt**0).backward(torch.ones(2, dtype=torch.float64))
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
    np.testing.assert_array_equal(x.grad, [0.0, 0.0])


def test_the_steps_examples():
    derivatives = {"-x": -1.0, "x - 1": 1.0, "1 - x": -1.0, "x / 4": 0.25, "4 / x": -1.0, "x ** 3": 12.0}  # at x = 2
    builds = {"-x": lambda v: -v, "x - 1": lambda v: v - 1, "1 - x": lambda v: 1 - v, "x / 4": lambda v: v / 4,
              "4 / x": lambda v: 4 / v, "x ** 3": lambda v: v**3}
    for text, expected in derivatives.items():
        x = step.Variable(np.array(2.0))
        builds[text](x).backward()
        assert x.grad == expected, text

    x = step.Variable(np.array(1.0))
    y = (x + 3) ** 2 / 2
    y.backward()
    assert y.data == 8.0 and x.grad == 4.0  # dy/dx = x + 3

    x, y = step.Variable(np.array(2.0)), step.Variable(np.array(4.0))
    (x**2 / y - y / x).backward()
    assert x.grad == 2 * 2 / 4 + 4 / 2**2 and y.grad == -(2**2) / 4**2 - 1 / 2


def test_a_0d_operands_gradient_is_the_sum_with_shape_0d():
    c = step.Variable(np.array(2.0))
    x = step.Variable(np.array([1.0, 2.0, 3.0]))
    (c * x).backward()
    assert c.grad.shape == () and type(c.grad) is np.ndarray and c.grad == 6.0  # sum of x
    np.testing.assert_array_equal(x.grad, [2.0, 2.0, 2.0])


def test_a_python_number_used_with_an_array_gets_a_0d_gradient():
    x = step.Variable(np.array([1.0, 2.0]))
    y = 3.0 * x
    y.backward()
    constant = y.creator.inputs[0]
    assert constant.grad.shape == () and constant.grad == 3.0


@pytest.mark.parametrize("symbol", BINARY)
@pytest.mark.parametrize("left, right", [((2, 3), (3,)), ((3,), (2, 3)), ((2, 3), (3, 2)), ((2,), (3,)), ((1,), (3,))])
def test_mismatched_shapes_raise_a_value_error_naming_the_operation(symbol, left, right):
    message = f"{NAMES[symbol]}: shapes {left} and {right} do not match (broadcasting comes in stage 3)"
    a, b = np.ones(left), np.ones(right)
    for x0, x1 in [(step.Variable(a), step.Variable(b)), (step.Variable(a), b), (a, step.Variable(b))]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            BINARY[symbol](x0, x1)


BAD = ["abc", [1.0], {}, None, (1.0,), object()]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("symbol", BINARY)
def test_unsupported_operands_name_the_operation_on_either_side(symbol, bad):
    x = step.Variable(np.array(2.0))
    message = f"{NAMES[symbol]}: unsupported operand type {type(bad).__name__}"
    with pytest.raises(TypeError, match=message):
        BINARY[symbol](x, bad)
    with pytest.raises(TypeError, match=message):
        BINARY[symbol](bad, x)


@pytest.mark.parametrize("exponent", [step.Variable(np.array(2.0)), np.array(2.0), "2", None])
def test_the_exponent_must_be_a_constant_number(exponent):
    with pytest.raises(TypeError, match=f"pow: the exponent must be a constant number, got {type(exponent).__name__}"):
        step.Variable(np.array(2.0)) ** exponent


# A random DAG of + - * / ** over 2-3 inputs; every node may be reused by later ones. Values stay
# positive and moderate: inputs in [0.5, 1.5]; subtraction is written a - b + 2, division by
# (b * b + 1) and powers as (a * a + 1) ** c, so that no intermediate result comes near 0 or changes sign.
KINDS, EXPONENTS = ["+", "-", "*", "/", "**", "neg"], [2, 3, 0.5, -1]
expression_programs = programs(KINDS, 0.5, 1.5, n_inputs=(2, 3), n_operations=(1, 12), constants=EXPONENTS)


def run(inputs, ops):
    nodes = list(inputs)
    for kind, i, j, c in ops:
        a, b = nodes[i], nodes[j]
        nodes.append({
            "+": lambda: a + b,
            "-": lambda: a - b + 2.0,
            "*": lambda: a * b,
            "/": lambda: a / (b * b + 1.0),
            "**": lambda: (a * a + 1.0) ** c,
            "neg": lambda: 3.0 - (-a) * 0.5,
        }[kind]())
    return nodes[-1]


@given(expression_programs)
def test_random_expression_graphs_with_shared_subexpressions_match_torch(program):
    values, ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(all="ignore"):
        y = run(xs, ops)
        assume(np.all(np.isfinite(y.data)) and np.all(np.abs(y.data) < 1e50))
        y.backward()
    ts = [torch_leaf(v) for v in values]
    yt = run(ts, ops)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-10)
    assert_grads_equal_torch(xs, ts, rtol=1e-9, atol=1e-12)


@given(expression_programs, st.integers(2, 3))
def test_repeated_backward_calls_accumulate_like_torch(program, calls):
    values, ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(all="ignore"):
        y = run(xs, ops)
        assume(np.all(np.isfinite(y.data)) and np.all(np.abs(y.data) < 1e50))
        for _ in range(calls):
            y.backward()
    ts = [torch_leaf(v) for v in values]
    yt = run(ts, ops)
    for _ in range(calls):
        yt.backward(torch.ones_like(yt), retain_graph=True)
    for x, t in zip(xs, ts):
        if t.grad is not None:
            np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_the_branching_graph_of_step_15_gives_64():
    x = step.Variable(np.array(2.0))
    a = x**2
    y = a**2 + a**2
    y.backward()
    assert x.grad == 64.0 and a.grad is None and y.grad is None


def test_the_output_gives_up_its_seed_and_can_be_reused_like_torch():
    # y = 2x at x = 1, backward; then z = 3y, backward: x.grad = 2 + 6 = 8.
    # A seed left on y would be added to in the second pass: 2 + 2 * 4 = 10.
    x = step.Variable(np.array(1.0))
    y = x * 2
    y.backward()
    assert x.grad == 2.0 and y.grad is None
    (y * 3).backward()
    assert x.grad == 8.0 == torch_grad_after_reusing_the_output()


@st.composite
def reused_outputs(draw):
    """A random program, and a second one over its inputs and its result y."""
    inputs, ops = draw(expression_programs)
    more_ops = draw_operations(draw, KINDS, len(inputs) + 1, draw(st.integers(0, 6)), EXPONENTS)
    return inputs, ops, more_ops


@given(reused_outputs())
def test_backward_then_reusing_the_output_in_a_second_graph_matches_torch(program):
    values, ops, more_ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(all="ignore"):
        y = run(xs, ops)
        z = y * run([*xs, y], more_ops)  # z depends on y, so y is an intermediate of z's backward pass
        assume(np.all(np.isfinite(z.data)) and np.all(np.abs(z.data) < 1e50))
        y.backward()
        z.backward()
    ts = [torch_leaf(v) for v in values]
    yt = run(ts, ops)
    zt = yt * run([*ts, yt], more_ops)
    yt.backward(torch.ones_like(yt), retain_graph=True)
    zt.backward(torch.ones_like(zt))
    assert y.grad is None and z.grad is None
    assert_grads_equal_torch(xs, ts, rtol=1e-9, atol=1e-12)


class Split(step.Function):
    """A test-only function with two outputs: (x, 2x)."""

    def forward(self, x):
        return x, 2 * x

    def backward(self, gy0, gy1):
        return gy0 + 2 * gy1


def test_a_function_with_two_outputs_returns_a_list_and_backpropagates_both():
    x = step.Variable(np.array([1.0, 2.0]))
    outputs = Split()(x)
    assert isinstance(outputs, list) and len(outputs) == 2
    a, b = outputs
    (a * b).backward()  # 2x^2: d/dx = 4x
    np.testing.assert_array_equal(x.grad, [4.0, 8.0])


# The rest of the stage-2 contract, as it stands in the final snapshot.

def test_variable_rejects_non_arrays_with_the_type_name():
    for bad, name in [(1.0, "float"), ([1.0], "list"), (torch.tensor(1.0), "Tensor")]:
        with pytest.raises(TypeError, match=f"got {name}"):
            step.Variable(bad)


def test_base_function_names_the_missing_method():
    with pytest.raises(NotImplementedError, match="Function.forward is not implemented"):
        step.Function()(step.Variable(np.array(1.0)))

    class NoBackward(step.Function):
        def forward(self, x):
            return x

    with pytest.raises(NotImplementedError, match="NoBackward.backward is not implemented"):
        NoBackward()(step.Variable(np.array(1.0))).backward()


def test_backward_on_a_leaf_sets_only_its_seed():
    x = step.Variable(np.array([1.0, 2.0]))
    x.backward()
    np.testing.assert_array_equal(x.grad, [1.0, 1.0])


def test_no_grad_records_nothing_and_backward_on_the_result_does_not_crash():
    x = step.Variable(np.array(2.0))
    with step.no_grad():
        y = x * x + 1
    assert y.creator is None and step.Config.enable_backprop
    y.backward()
    assert y.grad == 1.0 and x.grad is None


def test_using_config_rejects_unknown_options():
    with pytest.raises(ValueError, match="using_config: unknown option 'train'; known options: enable_backprop"):
        with step.using_config("train", False):
            pass


def test_retain_grad_keeps_intermediate_grads_equal_to_torch():
    x = step.Variable(np.array(1.5))
    t = x * x
    y = t / x + t
    y.backward(retain_grad=True)
    xt = torch_leaf(np.array(1.5))
    tt = xt * xt
    tt.retain_grad()
    (tt / xt + tt).backward()
    np.testing.assert_allclose(t.grad, tt.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


def test_the_graph_is_freed_without_the_cycle_collector():
    gc.disable()
    try:
        x = step.Variable(np.ones(3))
        a = x * 2.0
        y = (a - 1.0) / a
        probes = [weakref.ref(a), weakref.ref(a.creator), weakref.ref(y.creator)]
        del a, y
        assert all(p() is None for p in probes)
    finally:
        gc.enable()


def test_repr_len_and_properties():
    x = step.Variable(np.array([[1.0, 2.0], [3.0, 4.0]]), name="W")
    assert repr(x) == "variable([[1.0000, 2.0000],\n          [3.0000, 4.0000]], name='W')"
    assert (x.shape, x.ndim, x.size, x.dtype, len(x)) == ((2, 2), 2, 4, np.float64, 2)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d Variable"):
        len(step.Variable(np.array(1.0)))
    assert step.Variable.__array_priority__ == 200
    assert isinstance(np.array([1.0, 2.0]) - step.Variable(np.array([3.0, 4.0])), step.Variable)
