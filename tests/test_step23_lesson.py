"""Step 23's lesson: the layout the page draws, the listings as they stood at step 23, and the exercises'
solutions (a numerical gradient check, sigmoid from public names) against PyTorch and maths."""
import ast
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils.listing import source_at_step
from reference import floats

pytestmark = [pytest.mark.step23, pytest.mark.torch]
step = load_step(23)
PACKAGE = pathlib.Path(tinypytorch.__file__).parent


def test_the_drawn_modules_exist_and_hold_what_the_picture_says():
    assert {"grad_mode", "cuda", "core", "functions", "utils", "init"} == set(step.boxes)
    for module in ("grad_mode.py", "cuda.py", "core.py", "functions.py", "utils/numerical.py"):
        assert (PACKAGE / module).exists()
    assert tinypytorch.core.Variable is tinypytorch.Variable and tinypytorch.functions.exp is tinypytorch.exp
    assert tinypytorch.grad_mode.no_grad is tinypytorch.no_grad


def package_imports(module):
    """What a module of the package imports of the package: ["tinypytorch.modes", ...]."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    imported = [f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    return [name for name in imported if name.startswith("tinypytorch")]


def test_grad_mode_is_the_ground_floor_it_imports_only_the_mode_stack_which_imports_nothing():
    assert package_imports("grad_mode") == ["tinypytorch.modes"]  # step 68: inference mode is an entry of it
    assert package_imports("modes") == []


def test_the_call_listing_at_step_23_holds_no_later_machinery():
    text = source_at_step(tinypytorch.Function.run_plain, 23)
    for later in ("view", "device", "BackwardMode", "autocast", "inference", "tangent", "dispatch_mode",
                  "needs_input_grad", "_to_save", "_requires_grad", "enable_backprop", "record"):
        assert later not in text, later
    assert "self.coerce(inputs)" in text and "self.forward(" in text
    assert "needs_input_grad" in source_at_step(tinypytorch.Function.run_plain, 35)


@given(arrays(np.float64, st.integers(1, 6), elements=floats(0.0, 4.0)))
def test_exercise_1_backward_equals_the_numerical_gradient_and_the_derivative(values):
    x = Variable(values.copy())
    step.f(x).backward(np.ones_like(values))
    numerical = tinypytorch.utils.numerical_diff(step.f, Variable(values.copy()))
    np.testing.assert_allclose(x.grad.data, numerical, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.grad.data, 3 * values**2 - 2 / (values + 1) ** 2, rtol=1e-12, atol=1e-12)


@given(arrays(np.float64, st.integers(1, 6), elements=floats(-20.0, 20.0)))
def test_exercise_2_sigmoid_equals_torchs_value_and_grad(values):
    x = Variable(values.copy())
    y = step.sigmoid(x)
    y.backward(np.ones_like(values))
    xt = torch.tensor(values, requires_grad=True)
    yt = torch.sigmoid(xt)
    yt.sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12, atol=1e-300)
    # torch's backward is y (1 - y), which loses digits to cancellation where y is near 1: an absolute bound
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
    e = np.exp(-np.abs(values))  # the derivative e^-|x| / (1 + e^-|x|)^2, even in x and without cancellation
    np.testing.assert_allclose(x.grad.data, e / (1 + e) ** 2, rtol=1e-12)
