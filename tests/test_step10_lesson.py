"""Step 10's lesson: the exercises' solutions (a hand-written Cube backward, a gradient check with a random seed),
checked against torch and the numerical derivative."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step10, pytest.mark.torch]
step = load_step(10)
RNG = np.random.default_rng(10)


@pytest.mark.parametrize("array", [np.array([0.5]), RNG.uniform(-1, 1, 5), RNG.uniform(-1.2, 1.2, (2, 3))])
def test_cube_passes_the_gradient_check_and_equals_torch(array):
    assert step.gradient_check(lambda v: step.exp(step.cube(v)), step.Variable(array))
    x = step.Variable(array)
    step.square(step.cube(x)).backward()  # cube's gy is not one
    t = torch.tensor(array, requires_grad=True)
    torch.square(t ** 3).sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("name", ["square", "exp", "composite", "cube"])
def test_the_seeded_check_passes_correct_functions_and_matches_torchs_vector_jacobian_product(name):
    f = getattr(step, name)
    x_array, gy = RNG.uniform(-1, 1, 6), RNG.uniform(0.5, 2, 6)
    assert step.seeded_gradient_check(f, step.Variable(x_array), gy)
    x = step.Variable(x_array)
    y = f(x)
    y.grad = gy
    y.backward()
    t = torch.tensor(x_array, requires_grad=True)
    twin = {"square": torch.square, "exp": torch.exp, "cube": lambda v: v ** 3,
            "composite": lambda v: torch.square(torch.exp(torch.square(v)))}[name]
    twin(t).backward(torch.tensor(gy))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14)


def test_the_seeded_check_catches_a_forgotten_gy_where_the_plain_check_does_not():
    x_array, gy = RNG.uniform(-1, 1, 6), RNG.uniform(0.5, 2, 6)
    forgetful = lambda v: step.ForgetfulExp()(v)  # noqa: E731
    assert step.gradient_check(forgetful, step.Variable(x_array))  # the seed of ones hides the bug
    assert not step.seeded_gradient_check(forgetful, step.Variable(x_array), gy)
