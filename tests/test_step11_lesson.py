"""Step 11's lesson: the exercises' solutions (Mul, SinCos, AddN: forwards with two inputs, two outputs and any
number of inputs), checked against torch."""
import functools

import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step11, pytest.mark.torch]
step = load_step(11)
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_mul_forward_equals_torch_mul(shape):
    a, b = RNG.standard_normal(shape), RNG.standard_normal(shape)
    y = step.Mul()(step.Variable(a), step.Variable(b))
    assert isinstance(y, step.Variable) and isinstance(y.data, np.ndarray)
    np.testing.assert_array_equal(y.data, torch.mul(torch.tensor(a), torch.tensor(b)).numpy())
    assert len(y.creator.inputs) == 2 and y.creator.outputs == [y]


@pytest.mark.parametrize("shape", [(), (4,), (2, 2)])
def test_sincos_gives_two_outputs_equal_to_torchs_sin_and_cos(shape):
    x = RNG.uniform(-4, 4, shape)
    outputs = step.SinCos()(step.Variable(x))
    assert isinstance(outputs, list) and len(outputs) == 2
    s, c = outputs
    assert s.creator is c.creator
    np.testing.assert_allclose(s.data, torch.sin(torch.tensor(x)).numpy(), rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(c.data, torch.cos(torch.tensor(x)).numpy(), rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(s.data ** 2 + c.data ** 2, 1.0, rtol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_addn_sums_any_number_of_inputs_as_torch_add_does_left_to_right(n):
    arrays = [RNG.standard_normal(3) for _ in range(n)]
    y = step.AddN()(*[step.Variable(a) for a in arrays])
    assert len(y.creator.inputs) == n
    np.testing.assert_array_equal(y.data, functools.reduce(torch.add, map(torch.tensor, arrays)).numpy())
