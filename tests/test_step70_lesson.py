"""Step 70's lesson: the page's per-sample gradients, norms, clipping and ensemble, and the exercises' solutions,
checked against torch (torch.func and torch's own loops, from the page's weights and data) and against formulas
worked out by hand."""
import numpy as np
import pytest
import torch
import torch.func as tfunc

from steploader import load_step

pytestmark = [pytest.mark.step70, pytest.mark.torch]
step = load_step(70)


def torch_net(ours):
    return step.torch_copy(ours)


def torch_per_sample(model, x, y):
    """torch's per-sample gradients of the page's loss, by its own loop of backward passes."""
    grads = {k: [] for k, _ in model.named_parameters()}
    for i in range(len(x)):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in model.named_parameters():
            grads[k].append(p.grad.clone())
    return {k: torch.stack(g) for k, g in grads.items()}


def tX():
    return torch.tensor(step.X.data), torch.tensor(step.Y.data)


def test_the_wrong_label_is_the_one_the_page_names():
    classes = np.argmax(step.scores, axis=1)
    assert (classes != step.Y.data).sum() == 1 and classes[step.FLIPPED] != step.Y.data[step.FLIPPED]


def test_page_loop_vmap_and_norms_equal_torchs_loop():
    expected = torch_per_sample(torch_net(step.model), *tX())
    for k in expected:
        np.testing.assert_allclose(step.loop_grads[k], expected[k].numpy(), rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(step.per_sample[k].data, expected[k].numpy(), rtol=1e-10, atol=1e-14)
    rows = torch.cat([g.reshape(step.N, -1) for g in expected.values()], dim=1)
    np.testing.assert_allclose(step.norms, rows.norm(dim=1).numpy(), rtol=1e-10)
    assert int(np.argmax(step.norms)) == step.FLIPPED  # the page's point: the wrong label pulls hardest


def test_page_clipping_is_torchs_clip_of_each_sample():
    expected = torch_per_sample(torch_net(step.model), *tX())
    for i in range(step.N):  # clip_grad_norm_ of torch.nn.utils, on sample i's gradients alone
        grads = [g[i].clone() for g in expected.values()]
        tensors = [torch.zeros_like(g, requires_grad=True) for g in grads]
        for t, g in zip(tensors, grads):
            t.grad = g
        torch.nn.utils.clip_grad_norm_(tensors, step.C)
        np.testing.assert_allclose(step.clipped[i], torch.cat([t.grad.reshape(-1) for t in tensors]).numpy(),
                                   rtol=1e-4)  # (clip_grad_norm_ divides by the norm plus 1e-6, norms here > 0.09)


def test_page_ensemble_equals_torch_func():
    t_models = [torch_net(m) for m in step.models]
    t_params, t_buffers = tfunc.stack_module_state(t_models)
    out = tfunc.vmap(lambda p, b, x: tfunc.functional_call(t_models[0], (p, b), (x,)), in_dims=(0, 0, None))(
        t_params, t_buffers, tX()[0])
    np.testing.assert_allclose(step.outputs.data, out.detach().numpy(), rtol=1e-10, atol=1e-14)


def test_exercise_1_regression_per_sample_gradients_equal_torch_and_the_formula():
    theirs = torch.nn.Linear(3, 1).double()
    theirs.load_state_dict({k: torch.tensor(np.asarray(v.data)) for k, v in step.regression.state_dict().items()})
    xr, yr = torch.tensor(step.Xr.data), torch.tensor(step.yr.data)
    expected = tfunc.vmap(tfunc.grad(lambda p, x, y: ((tfunc.functional_call(theirs, p, (x,)) - y) ** 2).sum()),
                          in_dims=(None, 0, 0))({k: v.detach() for k, v in theirs.named_parameters()}, xr, yr)
    for k in expected:
        np.testing.assert_allclose(step.r_grads[k].data, expected[k].numpy(), rtol=1e-10, atol=1e-14)
    residual = step.Xr.data @ step.regression.weight.data[0] + step.regression.bias.data[0] - step.yr.data
    np.testing.assert_allclose(step.r_grads["bias"].data[:, 0], 2 * residual, rtol=1e-12)  # by hand


def test_exercise_2_clipped_step_equals_torchs():
    t_model = torch_net(step.model)
    x, y = tX()
    per_sample = torch_per_sample(t_model, x, y)
    norms = torch.cat([g.reshape(step.N, -1) for g in per_sample.values()], dim=1).norm(dim=1)
    factor = torch.clamp(step.C / norms, max=1.0)
    with torch.no_grad():
        for k, p in t_model.named_parameters():
            p -= 0.5 * (per_sample[k] * factor.reshape((-1,) + (1,) * p.ndim)).mean(dim=0)
        after = torch.nn.functional.cross_entropy(t_model(x), y, reduction="none")
    for k, p in t_model.named_parameters():
        np.testing.assert_allclose(step.stepped[k].data, p.detach().numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(step.after, after.numpy(), rtol=1e-10, atol=1e-14)


def test_exercise_3_every_models_per_sample_gradients_equal_torch_func():
    t_models = [torch_net(m) for m in step.models]
    t_params, _ = tfunc.stack_module_state(t_models)
    x, y = tX()

    def loss(p, x, y):
        return torch.nn.functional.cross_entropy(tfunc.functional_call(t_models[0], p, (x.unsqueeze(0),)),
                                                 y.unsqueeze(0))
    expected = tfunc.vmap(tfunc.vmap(tfunc.grad(loss), in_dims=(None, 0, 0)), in_dims=(0, None, None))(t_params, x, y)
    for k in expected:
        np.testing.assert_allclose(step.every[k].data, expected[k].detach().numpy(), rtol=1e-10, atol=1e-14)
