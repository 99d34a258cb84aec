"""Step 52's lesson: the exercises' solutions (parameters per part, a residual block, part of a checkpoint), checked
against torch.nn doing the same."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, nn

pytestmark = [pytest.mark.step52, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
step = load_step(52)


def test_parameters_per_part_equal_torchs_numel_per_child():
    twin = step.torch_twin(0)
    expected = {name: sum(p.numel() for p in child.parameters()) for name, child in twin.named_children()}
    assert step.count(step.model) == expected == {"body": 32, "head": 15}
    tiny = nn.Sequential(nn.Linear(3, 2, bias=False), nn.Tanh())
    assert step.count(tiny) == {"0": 6, "1": 0}


class TorchResidual(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


def test_the_residual_block_has_torchs_names_and_gives_its_outputs_and_gradients():
    twin = torch.nn.Sequential(torch.nn.Linear(3, 3), TorchResidual(torch.nn.Sequential(torch.nn.Linear(3, 3),
                                                                                         torch.nn.Tanh()))).double()
    ours = step.residual
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in twin.named_parameters()]
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in twin.state_dict().items()})
    x = np.random.default_rng(0).normal(size=(4, 3))
    y, y_t = ours(Variable(x)), twin(torch.from_numpy(x))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)
    ours.zero_grad()
    (y * y).sum().backward()
    (y_t * y_t).sum().backward()
    for (name, p), p_t in zip(ours.named_parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, err_msg=name)


def test_sub_state_gives_the_keys_torchs_submodule_state_dict_has():
    twin = step.torch_twin(3)
    state = {k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in twin.state_dict().items()}
    part = step.sub_state(state, "body.")
    assert list(part) == list(twin.body.state_dict())
    body = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
    body.load_state_dict(part)
    x = np.random.default_rng(1).normal(size=(3, 2))
    np.testing.assert_allclose(body(Variable(x)).data, twin.body(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    assert step.sub_state(state, "nothing.") == {}


def test_the_pages_body_was_loaded_from_the_models_checkpoint():
    np.testing.assert_array_equal(step.body(step.x).data, step.model.body(step.x).data)
