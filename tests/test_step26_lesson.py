"""Step 26's lesson: the exercises' solutions (exp from its series, descent with momentum), checked against
torch.exp and torch.optim.SGD."""
import numpy as np
import pytest
import torch

from steploader import load_step
from tinypytorch import Variable
from tinypytorch.testfunctions import rosenbrock

pytestmark = [pytest.mark.step26, pytest.mark.torch]
step = load_step(26)


@pytest.mark.parametrize("values", [[-1.0, 0.5, 2.0], [0.0], [-3.0, 3.0]])
def test_my_exp_value_and_grad_equal_torch_exp(values):
    x = Variable(np.array(values))
    y = step.my_exp(x)
    y.backward(np.ones(len(values)))
    xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    torch.exp(xt).sum().backward()
    np.testing.assert_allclose(y.data, torch.exp(xt).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("lr, momentum", [(0.001, 0.9), (0.0005, 0.5)])
def test_momentum_descent_iterates_equal_torch_sgd_with_momentum(lr, momentum):
    ours = step.momentum_descent((0.0, 2.0), lr, momentum, 300)
    p = torch.tensor([0.0, 2.0], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([p], lr=lr, momentum=momentum)
    theirs = [(0.0, 2.0)]
    for _ in range(300):
        optimizer.zero_grad()
        rosenbrock(p[0], p[1]).backward()
        optimizer.step()
        theirs.append(tuple(p.detach().numpy()))
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_momentum_gets_closer_than_plain_descent_in_2000_iterations():
    assert np.hypot(*(step.fast[-1] - 1)) < 0.01 < np.hypot(*(step.path[2000] - 1))
