"""tinypytorch.func.stack_module_state against torch.func.stack_module_state: the stacked parameters and buffers
(names, values, dtypes, requires_grad, new leaves unrelated to the models'), an ensemble run with vmap over the
stacked parameters and its gradients, and torch's errors. Every expected value is torch's, from models with the
same weights."""
import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, func, nn

pytestmark = [pytest.mark.torch, pytest.mark.step70, pytest.mark.usefixtures("float64_default")]

X = np.random.default_rng(69).standard_normal((6, 3))


def mlp(fw):
    return fw.nn.Sequential(fw.nn.Linear(3, 4), fw.nn.Tanh(), fw.nn.Linear(4, 2))


def ensembles(make=mlp, count=3):
    """`count` models in both frameworks, each pair with the same float64 weights (torch's copied into ours)."""
    torch.manual_seed(0)
    theirs = [make(torch).double() for _ in range(count)]
    ours = [make(tinypytorch) for _ in range(count)]
    for o, t in zip(ours, theirs):
        o.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in t.state_dict().items()})
    return ours, theirs


def assert_same_state(ours, theirs):
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name].shape == theirs[name].shape, name
        assert np.dtype(ours[name].data.dtype) == theirs[name].numpy(force=True).dtype, name
        assert ours[name].requires_grad == theirs[name].requires_grad, name
        assert (ours[name].creator is None) == theirs[name].is_leaf, name
        np.testing.assert_array_equal(np.asarray(ours[name].data), theirs[name].detach().numpy(), err_msg=name)


def test_parameters_are_stacked_by_name_as_new_leaves_as_torch():
    ours, theirs = ensembles()
    params, buffers = func.stack_module_state(ours)
    t_params, t_buffers = torch.func.stack_module_state(theirs)
    assert_same_state(params, t_params)
    assert buffers == t_buffers == {}
    assert all(p.requires_grad and p.is_leaf for p in t_params.values())  # torch: new leaves that require grad
    params["0.weight"].data[0, 0, 0] += 1.0  # not a view of the models' parameters (torch.stack copies)
    assert ours[0][0].weight.data[0, 0] == params["0.weight"].data[0, 0, 0] - 1.0
    for p in ours[0].parameters():
        assert p.grad is None


def test_buffers_and_a_parameter_that_requires_no_grad_as_torch():
    def model(fw):
        return fw.nn.Sequential(fw.nn.Linear(3, 4), fw.nn.BatchNorm1d(4))
    ours, theirs = ensembles(model)
    for i, (o, t) in enumerate(zip(ours, theirs)):  # different running statistics per model
        t(torch.tensor(np.random.default_rng(i).standard_normal((5, 3))))
        o.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in t.state_dict().items()})
        o[1].bias.requires_grad_(False), t[1].bias.requires_grad_(False)
    params, buffers = func.stack_module_state(ours)
    t_params, t_buffers = torch.func.stack_module_state(theirs)
    assert_same_state(params, t_params)
    assert_same_state(buffers, t_buffers)  # num_batches_tracked stacked as int64, as torch's
    assert not params["1.bias"].requires_grad


def test_an_ensemble_under_vmap_and_its_gradients_as_torch():
    ours, theirs = ensembles()
    params, buffers = func.stack_module_state(ours)
    t_params, t_buffers = torch.func.stack_module_state(theirs)
    out = func.vmap(lambda p, b, x: func.functional_call(ours[0], (p, b), (x,)), in_dims=(0, 0, None))(
        params, buffers, Variable(X))
    t_out = torch.func.vmap(lambda p, b, x: torch.func.functional_call(theirs[0], (p, b), (x,)), in_dims=(0, 0, None))(
        t_params, t_buffers, torch.tensor(X))
    assert out.shape == t_out.shape == (3, 6, 2)
    np.testing.assert_allclose(out.data, t_out.detach().numpy(), rtol=1e-12, atol=1e-14)
    for model, row in zip(ours, out.data):  # each row is that model's own output
        np.testing.assert_allclose(model(Variable(X)).data, row, rtol=1e-12, atol=1e-14)
    (out ** 2).sum().backward()
    (t_out ** 2).sum().backward()
    for name in t_params:  # the gradients reach the stacked leaves, not the models' parameters
        np.testing.assert_allclose(params[name].grad.data, t_params[name].grad.numpy(), rtol=1e-12, atol=1e-14)
    assert all(p.grad is None for p in ours[0].parameters())


def test_a_module_list_and_a_single_model_as_torch():
    ours, theirs = ensembles(count=1)
    assert_same_state(func.stack_module_state(nn.ModuleList(ours))[0],
                      torch.func.stack_module_state(torch.nn.ModuleList(theirs))[0])


def error_of(call):
    with pytest.raises(Exception) as info:
        call()
    return info.type, str(info.value)


def cases(fw):
    """The models torch refuses to stack (the same in both frameworks)."""
    lin = fw.nn.Linear
    evaluated = lin(3, 2).eval()
    frozen = lin(3, 2)
    frozen.bias.requires_grad_(False)
    return {
        "no model": [],
        "train and eval": [lin(3, 2), evaluated],
        "two classes": [lin(3, 2), fw.nn.Sequential(lin(3, 2))],
        "two shapes": [lin(3, 2), lin(3, 4)],
        "transposed": [lin(3, 2), lin(2, 3)],
        "a name a later model lacks": [lin(3, 2), lin(3, 2, bias=False)],
        "requires_grad in one only": [lin(3, 2), frozen],
        "not a sequence": iter([lin(3, 2)]),
    }


@pytest.mark.parametrize("case", list(cases(tinypytorch)))
def test_torch_errors(case):
    ours = error_of(lambda: func.stack_module_state(cases(tinypytorch)[case]))
    theirs = error_of(lambda: torch.func.stack_module_state(cases(torch)[case]))
    assert ours == theirs


def test_models_of_different_depths_stack_the_first_models_names_as_torch():
    """torch takes the names of the first model: a later model's extra layers are left out, without an error."""
    def stacked(fw):
        return fw.func.stack_module_state([fw.nn.Sequential(fw.nn.Linear(3, 2)),
                                           fw.nn.Sequential(fw.nn.Linear(3, 2), fw.nn.Linear(2, 2))])[0]
    ours, theirs = stacked(tinypytorch), stacked(torch)
    assert list(ours) == list(theirs) == ["0.weight", "0.bias"]


def test_a_batched_buffer_is_refused_clearly():
    """The package's buffers are arrays, which vmap does not batch: functional_call says so (torch batches them)."""
    ours = [nn.BatchNorm1d(3).eval() for _ in range(2)]
    params, buffers = func.stack_module_state(ours)
    with pytest.raises(NotImplementedError, match="buffer 'running_mean' is given a Variable batched by vmap"):
        func.vmap(lambda p, b, x: func.functional_call(ours[0], (p, b), (x,)), in_dims=(0, 0, None))(
            params, buffers, Variable(X))
    assert isinstance(ours[0].running_mean, np.ndarray)  # the module was put back
