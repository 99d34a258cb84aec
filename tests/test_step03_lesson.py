"""Step 03's lesson: the exercises' solutions (compose, Log after Exp) against PyTorch and maths."""
import numpy as np
import pytest
import torch
from hypothesis import given

from reference import float_arrays
from steploader import load_step

pytestmark = [pytest.mark.step03, pytest.mark.torch]
step = load_step(3)


@given(float_arrays(-5.0, 5.0))
def test_compose_square_exp_square_equals_torch(array):
    y = step.compose(step.Square(), step.Exp(), step.Square())(step.Variable(array))
    expected = torch.square(torch.exp(torch.square(torch.tensor(array)))).numpy()
    np.testing.assert_allclose(y.data, expected, rtol=1e-14, atol=0)


def test_compose_applies_in_the_order_given_and_of_nothing_is_the_identity():
    x = step.Variable(np.array([2.0]))
    np.testing.assert_allclose(step.compose(step.Exp(), step.Square())(x).data, np.exp(4.0), rtol=1e-15)  # e^(2*2)
    np.testing.assert_allclose(step.compose(step.Square(), step.Exp())(x).data, np.exp(4.0), rtol=1e-15)  # e^(2^2)
    np.testing.assert_array_equal(step.compose(step.Square(), step.Square())(x).data, [16.0])
    assert step.compose()(x) is x


@given(float_arrays(1e-300, 1e300))
def test_log_equals_torch_log(array):
    np.testing.assert_allclose(step.Log()(step.Variable(array)).data, torch.log(torch.tensor(array)).numpy(),
                               rtol=1e-14, atol=0)


@given(float_arrays(-30.0, 30.0))
def test_log_after_exp_gives_x_back_as_torch_does(array):
    back = step.Log()(step.Exp()(step.Variable(array))).data
    np.testing.assert_allclose(back, torch.log(torch.exp(torch.tensor(array))).numpy(), rtol=1e-14, atol=1e-15)
    # log(e^x) = x, up to two roundings of a result of size max(1, |x|)
    assert np.all(np.abs(back - array) <= 4 * np.finfo(float).eps * np.maximum(1.0, np.abs(array)))
