import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import arrays

from reference import floats, same_shape_arrays
from steploader import load_step

pytestmark = [pytest.mark.step11, pytest.mark.torch]
step = load_step(11)

pairs = same_shape_arrays(2, floats(-1e6, 1e6))


@given(pairs)
def test_add_forward_equals_torch_add(pair):
    a, b = pair
    y = step.Add()(step.Variable(a), step.Variable(b))
    assert isinstance(y, step.Variable)
    np.testing.assert_array_equal(y.data, torch.add(torch.tensor(a), torch.tensor(b)).numpy())
    assert y.data.shape == a.shape


def test_add_records_its_inputs_and_output():
    x0, x1 = step.Variable(np.array(2.0)), step.Variable(np.array(3.0))
    f = step.Add()
    y = f(x0, x1)
    assert y.data == 5.0
    assert y.creator is f
    assert len(f.inputs) == 2 and f.inputs[0] is x0 and f.inputs[1] is x1
    assert f.outputs == [y]


@given(
    arrays(np.float64, 5, elements=floats(-100, 100)),
    arrays(np.float64, 5, elements=floats(0.5, 10) | floats(-10, -0.5)),
)
def test_a_tuple_from_forward_gives_a_list_of_outputs_equal_to_torch(a, b):
    outputs = step.DivMod()(step.Variable(a), step.Variable(b))
    assert isinstance(outputs, list) and len(outputs) == 2
    q, r = outputs
    assert q.creator is r.creator and q.creator.outputs == outputs
    ta, tb = torch.tensor(a), torch.tensor(b)
    np.testing.assert_array_equal(q.data, torch.div(ta, tb, rounding_mode="floor").numpy())
    np.testing.assert_array_equal(r.data, torch.remainder(ta, tb).numpy())


def test_a_scalar_forward_result_is_wrapped_as_a_0d_array():
    y = step.Add()(step.Variable(np.array(1.0)), step.Variable(np.array(2.0)))
    assert isinstance(y.data, np.ndarray) and y.data.shape == ()


@given(floats(-1.5, 1.5))
def test_one_input_chains_still_backpropagate_like_torch(value):
    x = step.Variable(np.array(value))
    step.square(step.exp(step.square(x))).backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    torch.square(torch.exp(torch.square(xt))).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)


def test_the_steps_chain_example_equals_torch_and_the_numerical_derivative():
    x = step.Variable(np.array(0.5))
    step.square(step.exp(step.square(x))).backward()
    expected = 4 * 0.5 * np.exp(2 * 0.25)  # d/dx e^(2x^2) = 4x e^(2x^2)
    np.testing.assert_allclose(x.grad, expected, rtol=1e-12)
    numerical = step.numerical_diff(lambda v: step.square(step.exp(step.square(v))), step.Variable(np.array(0.5)))
    np.testing.assert_allclose(numerical, expected, rtol=1e-7)


def test_add_has_no_backward_yet_and_says_so():
    y = step.Add()(step.Variable(np.array(2.0)), step.Variable(np.array(3.0)))
    with pytest.raises(NotImplementedError, match="Add.backward is not implemented"):
        y.backward()


def test_base_function_names_the_missing_method():
    with pytest.raises(NotImplementedError, match="Function.forward is not implemented"):
        step.Function()(step.Variable(np.array(1.0)))


def test_variable_still_rejects_non_arrays():
    with pytest.raises(TypeError, match="got float"):
        step.Variable(1.0)
