import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import array_shapes, arrays

from steploader import load_step
from reference import floats

pytestmark = [pytest.mark.step01, pytest.mark.torch]
step = load_step(1)

float_arrays = arrays(np.float64, array_shapes(min_dims=0, max_dims=3), elements=floats(-1e6, 1e6))


@given(float_arrays)
def test_data_holds_the_same_values_as_torch_tensor(array):
    x = step.Variable(array)
    t = torch.tensor(array)
    assert x.data.shape == tuple(t.shape)
    np.testing.assert_array_equal(x.data, t.numpy())


def test_data_is_the_array_passed_in_not_a_copy():
    array = np.array([1.0, 2.0])
    assert step.Variable(array).data is array


def test_data_can_be_replaced():
    x = step.Variable(np.array(1.0))
    x.data = np.array(2.0)
    assert x.data == 2.0
