import operator

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from reference import floats, same_shape_arrays, torch_grad_after_reusing_the_output
from steploader import load_step

pytestmark = [pytest.mark.step21, pytest.mark.torch]
step = load_step(21)

moderate = floats(-10, 10)
values = arrays(np.float64, array_shapes(min_dims=0, max_dims=3, max_side=4), elements=moderate)
numbers = st.one_of(moderate, st.integers(-10, 10), moderate.map(np.float64), st.integers(-10, 10).map(np.int64))
OPS = {"+": operator.add, "*": operator.mul}


def compare(value, ours, theirs):
    x = step.Variable(value)
    y = ours(x)
    y.backward()
    xt = torch.tensor(value, requires_grad=True)
    yt = theirs(xt)
    yt.backward(torch.ones_like(yt))
    assert isinstance(y, step.Variable)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-15)


@pytest.mark.parametrize("symbol", OPS)
@given(value=values, number=numbers)
def test_a_number_on_either_side_matches_torch(symbol, value, number):
    op = OPS[symbol]
    c = float(number)
    compare(value, lambda v: op(v, number), lambda t: op(t, c))
    compare(value, lambda v: op(number, v), lambda t: op(c, t))


@pytest.mark.parametrize("symbol", OPS)
@given(pair=same_shape_arrays(2, moderate))
def test_an_ndarray_on_either_side_gives_one_variable_equal_to_torch(symbol, pair):
    op = OPS[symbol]
    value, constant = pair
    compare(value, lambda v: op(v, constant), lambda t: op(t, torch.tensor(constant)))
    compare(value, lambda v: op(constant, v), lambda t: op(torch.tensor(constant), t))


def test_the_two_cases_of_the_check():
    x = step.Variable(np.array(1.5))
    y = np.array(2.0) + x
    y.backward()
    assert isinstance(y, step.Variable) and y.data == 3.5 and x.grad == 1.0
    x = step.Variable(np.array([1.0, -2.0]))
    y = 3.0 * x
    y.backward()
    np.testing.assert_array_equal(y.data, [3.0, -6.0])
    np.testing.assert_array_equal(x.grad, [3.0, 3.0])


def test_the_reflected_operators_keep_the_written_order():
    x = step.Variable(np.array(2.0))
    y = 3.0 * x
    first, second = y.creator.inputs
    assert first.data == 3.0 and second is x
    z = np.array(1.0) + x
    assert z.creator.inputs[0].data == 1.0 and z.creator.inputs[1] is x


def test_without_the_priority_an_ndarray_on_the_left_makes_an_object_array():
    x = step.VariableWithoutPriority(np.array([10.0, 20.0]))
    y = np.array([1.0, 2.0]) + x
    assert type(y) is np.ndarray and y.dtype == object and y.shape == (2,)
    np.testing.assert_array_equal(y[0].data, [11.0, 21.0])  # 1 + x, the whole variable
    assert step.Variable.__array_priority__ == 200 > np.array(0.0).__array_priority__


def test_as_variable_converts_numbers_and_arrays_and_returns_variables_unchanged():
    x = step.Variable(np.array(1.0))
    assert step.as_variable(x) is x
    array = np.array([1.0, 2.0])
    assert step.as_variable(array).data is array
    for number in (2, 2.5, np.float64(2.5), np.int32(2)):
        converted = step.as_variable(number)
        assert isinstance(converted, step.Variable) and type(converted.data) is np.ndarray and converted.data.shape == ()
        assert converted.data == number


def test_functions_convert_their_inputs_too():
    y = step.square(2.0)
    assert isinstance(y, step.Variable) and y.data == 4.0


BAD = ["abc", [1.0, 2.0], {}, None, (1.0,), {1.0}, object(), torch.tensor(1.0)]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("symbol, name", [("+", "add"), ("*", "mul")])
def test_unsupported_operands_name_the_operation_and_the_type_on_either_side(symbol, name, bad):
    x = step.Variable(np.array(2.0))
    message = f"{name}: unsupported operand type {type(bad).__name__}"
    with pytest.raises(TypeError, match=message):
        OPS[symbol](x, bad)
    if not isinstance(bad, torch.Tensor):  # a tensor on the left is torch's business
        with pytest.raises(TypeError, match=message):
            OPS[symbol](bad, x)


def test_as_variable_names_the_caller_or_itself():
    with pytest.raises(TypeError, match="as_variable: unsupported operand type str"):
        step.as_variable("x")
    with pytest.raises(TypeError, match="exp: unsupported operand type list"):
        step.exp([1.0])


def test_the_output_gives_up_its_seed_and_can_be_reused_like_torch():
    # y = 2x at x = 1, backward; then z = 3y, backward: x.grad = 2 + 6 = 8, as in torch
    x = step.Variable(np.array(1.0))
    y = x * 2
    y.backward()
    assert y.grad is None
    (y * 3).backward()
    assert x.grad == 8.0 == torch_grad_after_reusing_the_output()
