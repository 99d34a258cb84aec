"""Step 19's lesson: the exercises' solutions (item, repr_with_creator) against PyTorch."""
import re

import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step19, pytest.mark.torch]
step = load_step(19)


@pytest.mark.parametrize("array", [np.array(2.5), np.array([-1.25]), np.array([[7.0]]), np.array(3), np.ones((1, 1, 1))])
def test_item_of_one_element_is_torchs_python_number(array):
    ours, theirs = step.Variable(array).item(), torch.tensor(array).item()
    assert ours == theirs and type(ours) is type(theirs)


@pytest.mark.parametrize("shape", [(2,), (2, 3), (0,)])
def test_item_of_more_or_fewer_elements_is_a_runtime_error_like_torchs(shape):
    size = int(np.prod(shape))
    with pytest.raises(RuntimeError, match=f"a Variable with {size} elements cannot be converted to Scalar"):
        step.Variable(np.zeros(shape)).item()
    with pytest.raises(RuntimeError, match=f"a Tensor with {size} elements cannot be converted to Scalar"):
        torch.zeros(shape).item()


@pytest.mark.parametrize("make, torch_make", [
    (lambda s, x: s.add(s.square(x), x), lambda t: t**2 + t),
    (lambda s, x: s.square(x), lambda t: t**2),
    (lambda s, x: s.exp(s.add(x, x)), lambda t: torch.exp(t + t)),
])
def test_repr_with_creator_names_the_function_torch_names_in_grad_fn(make, torch_make):
    x = step.Variable(np.array(3.0), name="x")
    y = make(step, x)
    text = step.repr_with_creator(y)
    creator = re.fullmatch(r"variable\((.*), creator=(\w+)\)", text)
    assert creator and creator.group(1) == repr(y)[len("variable("):-1]
    grad_fn = torch_make(torch.tensor(3.0, dtype=torch.float64, requires_grad=True)).grad_fn
    names = {"Square": "PowBackward0"}  # torch's x**2 is a Pow; our other functions keep torch's name
    assert names.get(creator.group(2), creator.group(2) + "Backward0") == type(grad_fn).__name__


def test_repr_with_creator_leaves_a_leaf_alone():
    x = step.Variable(np.array([1.0, 2.0]), name="w")
    assert step.repr_with_creator(x) == repr(x) == "variable([1.0000, 2.0000], name='w')"
