"""Step 32's lesson: what moved off the page (a parameter assigned before Layer.__init__) and the exercises'
solutions (SGD with momentum, Adam and its run on the page's curve, a tied layer), checked against torch.optim and
torch.nn."""
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


@pytest.mark.parametrize("kwargs, steps", [({"lr": 0.005}, 3), ({"lr": 0.05, "betas": (0.5, 0.9)}, 8),
                                           ({"lr": 0.01, "betas": (0.0, 0.99), "eps": 1e-3}, 5)])
def test_plain_adam_equals_torch_optim_adam(kwargs, steps):
    ours, theirs = step.train_twins(step.PlainAdam, torch.optim.Adam, steps, **kwargs)
    step.assert_params_equal(ours, theirs, "PlainAdam")
    start = step.twin_models()[0]
    assert all(not np.allclose(p.data, q.data) for p, q in zip(ours.params(), start.params()))


def test_plain_adams_first_step_moves_each_element_by_lr_whatever_the_gradients_size():
    # at t = 1, m_hat = g and v_hat = g^2 (worked by hand): the step is lr g / (|g| + eps), about lr sign(g)
    g = np.array([1e-4, -3.0, 200.0])
    p = Parameter(np.zeros(3))
    (p * g).sum().backward()
    step.PlainAdam([p], lr=0.1).step()
    np.testing.assert_allclose(p.data, -0.1 * g / (np.abs(g) + 1e-8), rtol=1e-14)
    pt = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (pt * torch.tensor(g)).sum().backward()
    torch.optim.Adam([pt], lr=0.1).step()
    np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-14)


def test_the_adam_exercise_leaves_the_plateau_where_torchs_adam_does_and_sooner_than_sgd():
    losses = step.adam_losses
    assert len(losses) == 3_000 and step.adam_below == next(i for i, v in enumerate(losses) if v < 0.05)
    assert step.adam_below < step.sgd_below / 3
    twin = torch.nn.Sequential(torch.nn.Linear(1, 10), torch.nn.Sigmoid(), torch.nn.Linear(10, 1)).double()
    with torch.no_grad():
        for p, pt in zip(step.twin_models()[0].params(), twin.parameters(), strict=True):
            pt.copy_(torch.tensor(p.data))
    optimizer = torch.optim.Adam(twin.parameters(), lr=0.005)
    xt, yt = torch.tensor(step.x), torch.tensor(step.y)
    losses_t = []
    for _ in range(3_000):
        loss = torch.nn.functional.mse_loss(twin(xt), yt)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses_t.append(loss.item())
    np.testing.assert_allclose(losses[:2500], losses_t[:2500], rtol=1e-8)
    assert step.adam_below == next(i for i, v in enumerate(losses_t) if v < 0.05)


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
