"""Step 02's lesson: the exercises' solutions (Cube, Sum) against PyTorch."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference import float_arrays
from steploader import load_step

pytestmark = [pytest.mark.step02, pytest.mark.torch]
step = load_step(2)


@given(float_arrays(-1e3, 1e3))
def test_cube_equals_torch_pow_3(array):
    y = step.Cube()(step.Variable(array))
    assert isinstance(y, step.Variable)
    np.testing.assert_allclose(y.data, torch.pow(torch.tensor(array), 3).numpy(), rtol=1e-15, atol=1e-300)  # atol: subnormal cubes


def test_cube_is_x_times_x_times_x_worked_out():
    np.testing.assert_array_equal(step.Cube()(step.Variable(np.array([-2.0, 0.5, 3.0]))).data, [-8.0, 0.125, 27.0])


@given(float_arrays(-1e6, 1e6))
def test_sum_equals_torch_sum_and_is_zero_dimensional(array):
    y = step.Sum()(step.Variable(array))
    assert isinstance(y.data, np.ndarray) and y.data.shape == ()
    np.testing.assert_allclose(y.data, torch.sum(torch.tensor(array)).item(), rtol=1e-12, atol=1e-6)


@given(st.integers(1, 50))
def test_sum_of_1_to_n_is_n_n_plus_1_over_2(n):
    assert step.Sum()(step.Variable(np.arange(1.0, n + 1))).data == n * (n + 1) / 2
