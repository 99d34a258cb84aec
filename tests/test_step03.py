import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference import float_arrays
from steploader import load_step

pytestmark = [pytest.mark.step03, pytest.mark.torch]
step = load_step(3)

# NumPy and PyTorch compute exp with different code and may differ in the last
# bit; squaring doubles a relative difference. 1e-14 is a few units of 2**-53.
RTOL = 1e-14


@given(float_arrays(-700.0, 700.0))  # exp(709.8) is the largest finite float64
def test_exp_equals_torch_exp(array):
    y = step.Exp()(step.Variable(array))
    np.testing.assert_allclose(y.data, torch.exp(torch.tensor(array)).numpy(), rtol=RTOL, atol=0)


@given(float_arrays(-10.0, 10.0))  # e^(2x^2) stays finite for |x| < 18.8
def test_square_exp_square_equals_torch_with_intermediates(array):
    x = step.Variable(array)
    a = step.Square()(x)
    b = step.Exp()(a)
    y = step.Square()(b)
    t = torch.tensor(array)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ty = torch.square(tb)
    for ours, theirs in ((a, ta), (b, tb), (y, ty)):
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=RTOL, atol=0)


OPS = {"square": (step.Square, torch.square), "exp": (step.Exp, torch.exp)}


@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3), float_arrays(-1.0, 1.0))
def test_any_chain_of_up_to_three_functions_equals_torch(names, array):
    # From |x| <= 1, three functions reach at most exp(exp(exp(1))) ~ 3.8e6: no overflow.
    # exp(v) turns an ulp-level difference in v into a relative one of |v| ulp (|v| <= 16 here).
    y, t = step.Variable(array), torch.tensor(array)
    for name in names:
        ours, theirs = OPS[name]
        y, t = ours()(y), theirs(t)
    np.testing.assert_allclose(y.data, t.numpy(), rtol=1e-13, atol=0)


def test_the_steps_example_at_one_half_is_e_to_the_one_half():
    y = step.Square()(step.Exp()(step.Square()(step.Variable(np.array(0.5)))))
    np.testing.assert_allclose(y.data, np.e ** 0.5, rtol=RTOL)  # (e^(1/4))^2 = e^(1/2)


def test_the_order_of_composition_matters():
    x = step.Variable(np.array(0.5))
    exp_of_square = step.Exp()(step.Square()(x)).data  # e^(1/4)
    square_of_exp = step.Square()(step.Exp()(x)).data  # e^1
    np.testing.assert_allclose([exp_of_square, square_of_exp], [np.e ** 0.25, np.e], rtol=RTOL)
