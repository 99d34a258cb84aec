"""Step 36's lesson: the exercises' solutions (clamp_, exp_) and the page's own numbers, against PyTorch."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable

pytestmark = [pytest.mark.step36, pytest.mark.torch]
step = load_step(36)


def tensor(values, requires_grad=True):
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


# ----- exercise 1: clamp_ where no gradient is recorded ---------------------------------------------------------

@pytest.mark.parametrize("low, high", [(-1.0, 1.0), (0.0, 0.25), (-5.0, 5.0)])
def test_clamp_gives_torchs_values_and_bumps_the_version_once(low, high):
    values = np.random.default_rng(0).uniform(-3, 3, size=7)
    x = Variable(values.copy(), requires_grad=False)
    assert step.clamp_(x, low, high) is x
    t = torch.tensor(values)
    t.clamp_(low, high)
    np.testing.assert_array_equal(x.data, t.numpy())
    assert x._version == t._version == 1


def test_clamp_under_no_grad_makes_a_graph_that_saved_the_parameter_refuse_as_torchs_does():
    p, pt = Variable(np.array([-2.0, 0.5, 3.0])), tensor([-2.0, 0.5, 3.0])
    loss, loss_t = (p * p).sum(), (pt * pt).sum()
    with tinypytorch.no_grad():
        step.clamp_(p, -1.0, 1.0)
    with torch.no_grad():
        pt.clamp_(-1.0, 1.0)
    np.testing.assert_array_equal(p.data, pt.detach().numpy())
    with pytest.raises(RuntimeError, match="which is a leaf, is at version 1; expected version 0 instead"):
        loss.backward()
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0 instead"):
        loss_t.backward()


def test_clamp_refuses_a_leaf_that_requires_grad_and_a_recorded_change():
    p = Variable(np.array([-2.0, 3.0]))
    with pytest.raises(RuntimeError, match="^clamp_: a leaf Variable that requires grad is being used in an in-place"):
        step.clamp_(p, -1.0, 1.0)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        tensor([-2.0, 3.0]).clamp_(-1.0, 1.0)
    b = p * 2
    with pytest.raises(RuntimeError, match="^clamp_: only where no gradient is recorded"):
        step.clamp_(b, -1.0, 1.0)
    assert p._version == b._version == 0 and b.data.tolist() == [-4.0, 6.0]


# ----- exercise 2: a recorded exp_ ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exp_gives_torchs_values_and_gradients(seed):
    values = np.random.default_rng(seed).uniform(-1, 1, size=5)
    a, at = Variable(values.copy()), tensor(values)
    b, bt = a * 2, at * 2
    assert step.exp_(b) is b
    bt.exp_()
    (b * b).sum().backward()
    (bt * bt).sum().backward()
    np.testing.assert_allclose(b.data, bt.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(a.grad.data, at.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(a.grad.data, 4 * np.exp(4 * values), rtol=1e-13)  # d/da e^(4a) summed
    assert b._version == bt._version == 1 and type(b.creator).__name__ == "Exp"


def test_exp_of_a_saved_tensor_is_refused_as_torchs():
    a, at = Variable(np.array([0.0, 0.5])), tensor([0.0, 0.5])
    b, bt = a * 2, at * 2
    c, ct = b * b, bt * bt
    step.exp_(b)
    bt.exp_()
    with pytest.raises(RuntimeError, match="which is output 0 of Exp, is at version 1; expected version 0"):
        c.sum().backward()
    with pytest.raises(RuntimeError, match="which is output 0 of Exp, is at version 1; expected version 0"):
        ct.sum().backward()


def test_exp_where_nothing_is_recorded_only_writes():
    x = Variable(np.array([0.0, 1.0]), requires_grad=False)
    step.exp_(x)
    np.testing.assert_allclose(x.data, np.exp([0.0, 1.0]), rtol=1e-15)
    assert x._version == 1 and x.creator is None


# ----- the page's numbers ---------------------------------------------------------------------------------------

def test_every_scenario_on_the_page_agreed_with_torch():
    assert step.results and all(agree for _, agree in step.results.values())
    assert set(step.results) == {s.__name__ for s in step.SCENARIOS}

