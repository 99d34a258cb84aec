"""Step 32's lesson: what moved off the page (a parameter assigned before Layer.__init__) and the exercises'
solutions (SGD with momentum, a tied layer), checked against torch.optim and torch.nn."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Parameter
from tinypytorch.layers import Layer

pytestmark = [pytest.mark.step32, pytest.mark.torch]
step = load_step(32)


def test_a_parameter_assigned_before_layer_init_is_refused():
    class Forgetful(Layer):
        def __init__(self):
            self.w = Parameter(np.zeros(2))  # super().__init__() not called

    with pytest.raises(AttributeError, match=r"call super\(\).__init__\(\) before assigning 'w'"):
        Forgetful()


def test_the_small_layer_registers_its_parameter_and_sub_layer_only():
    layer = step.Scaled()
    assert layer._registered == ["scale", "inner"]
    assert [p.name for p in layer.params()] == ["scale", "weight", "bias"]


@pytest.mark.parametrize("lr, momentum, steps", [(0.1, 0.9, 5), (0.05, 0.5, 7)])
def test_momentum_equals_torchs_sgd_with_momentum(lr, momentum, steps):
    ours, theirs = step.train_twins(step.Momentum, torch.optim.SGD, steps, lr=lr, momentum=momentum)
    step.assert_params_equal(ours, theirs, "Momentum")
    moved = step.twin_models()[0]
    assert any(not np.allclose(p.data, q.data) for p, q in zip(ours.params(), moved.params()))


def test_momentum_by_hand_on_one_number():
    # f(p) = p^2 / 2 has gradient p: b1 = p0, p1 = p0 - lr b1; b2 = mu b1 + p1, p2 = p1 - lr b2
    p = Parameter(np.array(1.0))
    optimizer = step.Momentum([p], lr=0.1, momentum=0.9)
    expected, b = 1.0, None
    for _ in range(3):
        p.cleargrad()
        (p * p / 2.0).backward()
        optimizer.step()
        b = expected if b is None else 0.9 * b + expected
        expected = expected - 0.1 * b
        assert p.item() == pytest.approx(expected, rel=1e-15)


def test_a_tied_layer_lists_its_weight_once_and_sums_both_uses():
    tied = step.Tied()
    assert len(list(tied.params())) == 2
    inner = torch.nn.Linear(4, 4).double()
    with torch.no_grad():
        for p, pt in zip(tied.params(), inner.parameters(), strict=True):
            pt.copy_(torch.tensor(p.data))
    batch = np.random.default_rng(5).uniform(-1, 1, (3, 4))
    (tied(batch) ** 2).sum().backward()
    (inner(torch.tanh(inner(torch.tensor(batch)))) ** 2).sum().backward()
    for p, pt in zip(tied.params(), inner.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.data, pt.grad.numpy(), rtol=1e-12, atol=1e-15)
