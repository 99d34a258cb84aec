import io
import unittest

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis.extra.numpy import array_shapes, arrays

from reference import floats, torch_grad
from steploader import load_step

pytestmark = [pytest.mark.step10, pytest.mark.torch]
step = load_step(10)

RTOL = 1e-14  # same multiplications as torch; only exp may differ in the last bit
# gradient_check shifts x by eps, and a 0-d x meets the type check there (a known limitation)
float_arrays = arrays(np.float64, array_shapes(min_dims=1, max_dims=3), elements=floats(-2.0, 2.0))
STEP_CASES = ("SquareTest", "ExpTest", "GradientCheckTest", "TorchTest")


def run_cases(*names):
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(getattr(step, n)) for n in names)
    return unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)


@pytest.mark.parametrize("ours, theirs", [
    (step.square, torch.square),
    (step.exp, torch.exp),
    (step.composite, lambda t: torch.square(torch.exp(torch.square(t)))),
])
@given(array=float_arrays)
def test_gradient_check_passes_and_the_gradient_it_computed_equals_torchs(ours, theirs, array):
    # composite on [-2, 2]: |f'''/f'| = 12 + 16x^2 <= 76, truncation ~76 * 1.7e-9 << rtol 1e-6
    x = step.Variable(array)
    assert step.gradient_check(ours, x)
    np.testing.assert_allclose(x.grad, torch_grad(theirs, array), rtol=RTOL, atol=0)


@given(array=float_arrays.filter(lambda a: np.any(np.abs(a + np.log(2)) > 1e-3)))
def test_gradient_check_catches_a_forgotten_gy_under_another_function(array):
    # square(ForgetfulExp(x)) returns e^x instead of 2 e^(2x): off by a factor 2 e^x, which
    # is 1 only at x = -ln 2, where the bug happens to be invisible
    x = step.Variable(array)
    assert not step.gradient_check(lambda v: step.square(step.ForgetfulExp()(v)), x)


@given(array=float_arrays.filter(lambda a: np.any(np.abs(a) > 1e-3)))
def test_gradient_check_catches_a_wrong_derivative(array):
    class WrongSquare(step.Square):
        def backward(self, gy):
            return 3 * self.input.data * gy  # should be 2x

    # where x != 0 the gradients differ by x, far beyond atol 1e-8 + rtol 1e-6 * 2|x|
    assert not step.gradient_check(lambda v: WrongSquare()(v), step.Variable(array))


def test_the_step_shows_a_forgotten_gy_passing_when_its_function_is_last():
    # the step's point: a gy of ones hides the bug
    x = step.Variable(np.random.default_rng(0).uniform(-1, 1, 5))
    assert step.gradient_check(lambda v: step.ForgetfulExp()(v), x)
    assert step.gradient_check(lambda v: step.ForgetfulExp()(step.square(v)), x)


def test_the_steps_unittest_cases_all_pass():
    result = run_cases(*STEP_CASES)
    assert result.testsRun == 10
    assert result.wasSuccessful(), result.failures + result.errors


def test_the_steps_unittest_cases_fail_on_a_broken_square(monkeypatch):
    class BrokenSquare(step.Square):
        def backward(self, gy):
            return self.input.data * gy  # should be 2x

    monkeypatch.setattr(step, "square", lambda x: BrokenSquare()(x))
    result = run_cases("SquareTest", "GradientCheckTest", "TorchTest")
    failed = sorted(test.id().rsplit(".", 1)[-1] for test, _ in result.failures)
    assert failed == ["test_backward", "test_composite", "test_random_arrays", "test_scalar", "test_square"]


def test_the_steps_unittest_cases_fail_on_a_broken_exp(monkeypatch):
    class BrokenExp(step.Exp):
        def forward(self, x):
            return np.exp(x) + 1e-6  # off by far more than rounding, far less than a typo

    monkeypatch.setattr(step, "exp", lambda x: BrokenExp()(x))
    result = run_cases("ExpTest", "TorchTest")
    failed = sorted(test.id().rsplit(".", 1)[-1] for test, _ in result.failures)
    assert failed == ["test_forward", "test_random_arrays", "test_scalar"]


def test_backward_on_a_leaf_fails_a_known_limitation():
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'input'"):
        step.Variable(np.array(1.0)).backward()


def test_numerical_diff_on_a_zero_dim_variable_fails_a_known_limitation():
    with pytest.raises(TypeError, match="got float64"):
        step.numerical_diff(step.square, step.Variable(np.array(0.5)))


def test_the_final_framework_keeps_step_09s_contract():
    with pytest.raises(TypeError, match="got float"):
        step.Variable(1.0)
    x = step.Variable(np.array(0.5))
    y = step.composite(x)
    y.backward()
    assert type(y.data) is np.ndarray
    np.testing.assert_allclose(x.grad, 2 * np.e ** 0.5, rtol=RTOL)  # 4x e^(2x^2) at x = 1/2
