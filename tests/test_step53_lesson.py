"""Step 53's lesson: the exercises' solutions (dead units by forward hooks, gradient norms by backward pre-hooks, the
peak gradient bytes of the optimizer inside backward), checked against torch.nn and against the parameters' sizes."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, nn

pytestmark = [pytest.mark.step53, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
step = load_step(53)


def twins(build):
    theirs = build(torch.nn).double()
    ours = build(nn)
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def relu_net(n):
    return n.Sequential(n.Linear(4, 16), n.ReLU(), n.Linear(16, 16), n.ReLU())


def test_dead_fraction_equals_torchs_relu_outputs():
    torch.manual_seed(3)
    ours, theirs = twins(relu_net)
    x = np.random.default_rng(2).normal(size=(32, 4))
    h1 = torch.relu(theirs[0](torch.from_numpy(x)))
    h2 = torch.relu(theirs[2](h1))
    expected = {"1": (h1 == 0).double().mean().item(), "3": (h2 == 0).double().mean().item()}
    assert step.dead_fraction(ours, Variable(x, requires_grad=False)) == pytest.approx(expected, abs=1e-15)
    assert all(not m.__dict__.get("_forward_hooks") for m in ours.modules())  # the hooks were removed
    assert 0 < expected["1"] < 1


def test_grad_output_norms_equal_torch_autograd_grad():
    torch.manual_seed(4)
    ours, theirs = twins(step.build)
    x = np.random.default_rng(5).normal(size=(6, 4))
    h = [torch.from_numpy(x)]
    outputs = {}
    for name, module in theirs.named_children():
        h.append(module(h[-1]))
        if isinstance(module, torch.nn.Linear):
            outputs[name] = h[-1]
    grads = torch.autograd.grad(h[-1].sum(), list(outputs.values()))
    expected = {name: g.norm().item() for name, g in zip(outputs, grads)}
    got = step.grad_output_norms(ours, Variable(x))
    assert list(got) == ["4", "2", "0"]  # backward's order
    assert got == pytest.approx(expected, rel=1e-12)


def test_peak_gradient_bytes_are_all_the_parameters_or_the_largest():
    model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256))
    total = 2 * (256 * 256 + 256) * 8  # float64
    assert step.peak_gradient_bytes(model, in_backward=False) == total
    assert step.peak_gradient_bytes(model, in_backward=True) == 256 * 256 * 8
    assert step.peak_gradient_bytes(step.deep, in_backward=False) == 6 * (256 * 256 + 256) * 8


def test_the_pages_in_backward_training_moved_the_parameters_as_the_usual_loop():
    for a, b in zip(step.usual.parameters(), step.inside.parameters()):
        np.testing.assert_allclose(a.data, b.data, rtol=1e-12, atol=1e-14)
