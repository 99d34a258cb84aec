import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import array_shapes, arrays

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step02, pytest.mark.torch]
step = load_step(2)

# |x| <= 1e150 keeps x**2 finite, so no overflow warnings
float_arrays = arrays(np.float64, array_shapes(min_dims=0, max_dims=3), elements=floats(-1e150, 1e150))


@given(float_arrays)
def test_square_equals_torch_square_bit_for_bit(array):
    y = step.Square()(step.Variable(array))
    expected = torch.square(torch.tensor(array)).numpy()
    assert np.shape(y.data) == expected.shape
    np.testing.assert_array_equal(y.data, expected)


def test_the_steps_examples_square_10_and_a_matrix():
    assert step.Square()(step.Variable(np.array(10.0))).data == 100.0
    m = np.array([[1.0, -2.0], [3.0, -4.0]])
    np.testing.assert_array_equal(step.Square()(step.Variable(m)).data, [[1.0, 4.0], [9.0, 16.0]])


def test_call_returns_a_new_variable_and_leaves_the_input_alone():
    array = np.array([1.0, -2.0, 3.0])
    x = step.Variable(array)
    y = step.Square()(x)
    assert isinstance(y, step.Variable) and y is not x
    assert x.data is array
    np.testing.assert_array_equal(array, [1.0, -2.0, 3.0])


def test_call_unwraps_the_input_and_wraps_whatever_forward_returns():
    seen = []
    sentinel = np.array([42.0])

    class Probe(step.Function):
        def forward(self, x):
            seen.append(x)
            return sentinel

    x = step.Variable(np.array([1.0]))
    y = Probe()(x)
    assert seen == [x.data] and seen[0] is x.data  # forward got the bare array
    assert y.data is sentinel


def test_the_base_class_forward_raises_not_implemented():
    with pytest.raises(NotImplementedError):
        step.Function()(step.Variable(np.array(1.0)))


def test_a_zero_dim_input_gives_a_numpy_scalar_as_the_step_notes():
    data = step.Square()(step.Variable(np.array(3.0))).data
    assert isinstance(data, np.float64) and not isinstance(data, np.ndarray)
    assert data == 9.0
