"""tinypytorch.func.functional_call against torch.func.functional_call: a model called with other parameters and
buffers for one call, its values, its gradients under func.grad and func.jacrev, the model put back afterwards,
tied weights, strict names and torch's errors. Every expected value is torch's, from the same model with the
same weights."""
import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, func, nn

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("float64_default")]

RNG = np.random.default_rng(63)
X = RNG.standard_normal((5, 3))
TARGET = RNG.standard_normal((5, 2))


def mlps():
    """The same small MLP in both frameworks (float64, torch's weights copied into ours)."""
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    ours = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def other_params(seed=1):
    """Parameters of the MLP's shapes, other than its own: (ours, torch's)."""
    rng = np.random.default_rng(seed)
    shapes = {"0.weight": (4, 3), "0.bias": (4,), "2.weight": (2, 4), "2.bias": (2,)}
    arrays = {k: rng.standard_normal(s) for k, s in shapes.items()}
    return ({k: tinypytorch.tensor(a) for k, a in arrays.items()},
            {k: torch.tensor(a) for k, a in arrays.items()})


def assert_dicts_close(ours, theirs, rtol=1e-12):
    assert list(ours) == list(theirs)
    for key in theirs:
        np.testing.assert_allclose(ours[key].data, theirs[key].detach().numpy(), rtol=rtol, atol=1e-14, err_msg=key)


def own_arrays(model):
    return {k: v.data.copy() for k, v in model.state_dict().items()}


def test_the_call_uses_the_given_parameters_and_leaves_the_model_as_it_was():
    ours, theirs = mlps()
    before = own_arrays(ours)
    params, params_t = other_params()
    y = func.functional_call(ours, params, Variable(X))  # one argument, not in a tuple
    y_t = torch.func.functional_call(theirs, params_t, torch.tensor(X))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)
    assert all(np.array_equal(before[k], v.data) for k, v in ours.state_dict().items())
    assert all(isinstance(p, nn.Parameter) for p in ours.parameters()) and len(list(ours.parameters())) == 4
    np.testing.assert_allclose(ours(Variable(X)).data, theirs(torch.tensor(X)).detach().numpy(), rtol=1e-12)


def test_some_parameters_given_the_rest_are_the_models_own():
    ours, theirs = mlps()
    params, params_t = other_params()
    y = func.functional_call(ours, {"2.weight": params["2.weight"]}, (Variable(X),))
    y_t = torch.func.functional_call(theirs, {"2.weight": params_t["2.weight"]}, (torch.tensor(X),))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)


def loss_of(framework, model):
    def loss(p, x, target):
        y = framework.func.functional_call(model, p, (x,))
        return ((y - target) ** 2).mean()
    return loss


def test_grad_of_a_loss_with_respect_to_the_parameters_equals_torchs():
    ours, theirs = mlps()
    params, params_t = other_params(2)
    grads = func.grad(loss_of(tinypytorch, ours))(params, Variable(X), Variable(TARGET))
    grads_t = torch.func.grad(loss_of(torch, theirs))(params_t, torch.tensor(X), torch.tensor(TARGET))
    assert_dicts_close(grads, grads_t)
    value = func.grad_and_value(loss_of(tinypytorch, ours))(params, Variable(X), Variable(TARGET))[1]
    value_t = torch.func.grad_and_value(loss_of(torch, theirs))(params_t, torch.tensor(X), torch.tensor(TARGET))[1]
    np.testing.assert_allclose(value.item(), value_t.item(), rtol=1e-12)
    assert all(p.grad is None for p in ours.parameters())  # a transform leaves .grad alone


def test_grad_with_respect_to_the_models_own_parameters_equals_backward_and_torchs():
    """The usual pattern: dict(model.named_parameters()) as the argument (torch: the gradients then keep a graph)."""
    ours, theirs = mlps()
    grads = func.grad(loss_of(tinypytorch, ours))(dict(ours.named_parameters()), Variable(X), Variable(TARGET))
    grads_t = torch.func.grad(loss_of(torch, theirs))(dict(theirs.named_parameters()), torch.tensor(X),
                                                      torch.tensor(TARGET))
    assert_dicts_close(grads, grads_t)
    ((ours(Variable(X)) - Variable(TARGET)) ** 2).mean().backward()
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.data, grads[name].data, rtol=1e-12)


def test_jacrev_of_the_output_with_respect_to_the_parameters_equals_torchs():
    ours, theirs = mlps()
    params, params_t = other_params(3)
    jac = func.jacrev(lambda p: func.functional_call(ours, p, (Variable(X[:2]),)))(params)
    jac_t = torch.func.jacrev(lambda p: torch.func.functional_call(theirs, p, (torch.tensor(X[:2]),)))(params_t)
    for key in jac_t:
        assert jac[key].shape == tuple(jac_t[key].shape)
    assert_dicts_close(jac, jac_t)


def test_the_model_is_put_back_when_the_call_raises():
    ours, _ = mlps()
    before = own_arrays(ours)
    params, _ = other_params()
    with pytest.raises(ValueError):
        func.functional_call(ours, params, (Variable(np.ones((5, 7))),))  # the wrong number of features
    assert all(np.array_equal(before[k], v.data) for k, v in ours.state_dict().items())
    assert all(type(p) is nn.Parameter for p in ours.parameters())
    assert [n for n, _ in ours.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2, bias=False)
        self.b = torch.nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight  # one parameter under two names

    def forward(self, x):
        return self.b(self.a(x))


class OurTied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)
        self.b = nn.Linear(2, 2, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def tied_pair():
    theirs = Tied().double()
    ours = OurTied()
    ours.a.weight.data[...] = theirs.a.weight.detach().numpy()
    return ours, theirs


@pytest.mark.parametrize("tie_weights", [True, False])
def test_tied_weights_take_the_given_value_under_every_name_unless_untied_as_torch(tie_weights):
    ours, theirs = tied_pair()
    w = np.array([[0.5, -1.0], [2.0, 0.25]])
    y = func.functional_call(ours, {"a.weight": tinypytorch.tensor(w)}, Variable(np.ones((1, 2))),
                             tie_weights=tie_weights)
    y_t = torch.func.functional_call(theirs, {"a.weight": torch.tensor(w)}, torch.ones(1, 2, dtype=torch.float64),
                                     tie_weights=tie_weights)
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)
    assert ours.b.weight is ours.a.weight


def test_two_values_for_tied_weights_raise_torchs_error():
    ours, theirs = tied_pair()
    w, v = np.eye(2), 2 * np.eye(2)
    with pytest.raises(ValueError) as caught:
        torch.func.functional_call(theirs, {"a.weight": torch.tensor(w), "b.weight": torch.tensor(v)},
                                   torch.ones(1, 2, dtype=torch.float64))
    with pytest.raises(ValueError) as ours_caught:
        func.functional_call(ours, {"a.weight": tinypytorch.tensor(w), "b.weight": tinypytorch.tensor(v)},
                             Variable(np.ones((1, 2))))
    assert str(ours_caught.value) == str(caught.value)


def test_strict_names_and_a_list_of_dicts_raise_torchs_errors():
    ours, theirs = mlps()
    params, params_t = other_params()
    cases = [
        lambda f, p, x: f.functional_call(theirs if f is torch.func else ours, {"0.weight": p["0.weight"],
                                                                                "extra": p["0.bias"]}, x, strict=True),
        lambda f, p, x: f.functional_call(theirs if f is torch.func else ours, [{"0.weight": p["0.weight"]},
                                                                                {"0.weight": p["0.weight"]}], x),
        lambda f, p, x: f.functional_call(theirs if f is torch.func else ours, [p, 3], x),
        lambda f, p, x: f.functional_call(theirs if f is torch.func else ours, 3, x),
    ]
    for case in cases:
        with pytest.raises(Exception) as caught:
            case(torch.func, params_t, torch.tensor(X))
        with pytest.raises(type(caught.value)) as ours_caught:
            case(func, params, Variable(X))
        assert str(ours_caught.value) == str(caught.value)


def test_a_list_of_dicts_and_kwargs_are_torchs():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2).double()

        def forward(self, x, *, scale=1.0):
            return self.lin(x) * scale

    class OurScaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x, *, scale=1.0):
            return self.lin(x) * scale

    params, params_t = other_params()
    weight, bias = {"lin.weight": params["2.weight"][:, :3]}, {"lin.bias": params["2.bias"]}
    weight_t, bias_t = {"lin.weight": params_t["2.weight"][:, :3]}, {"lin.bias": params_t["2.bias"]}
    y = func.functional_call(OurScaled(), (weight, bias), (Variable(X),), {"scale": 3.0}, strict=True)
    y_t = torch.func.functional_call(Scaled(), (weight_t, bias_t), (torch.tensor(X),), {"scale": 3.0}, strict=True)
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)


def batchnorm_pair():
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).double()
    ours = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_given_buffers_take_batchnorms_updates_in_place_as_torchs_and_the_models_stay():
    ours, theirs = batchnorm_pair()
    buffers = {"1.running_mean": tinypytorch.zeros(4, dtype=tinypytorch.float64) + 0.5,
               "1.running_var": tinypytorch.ones(4, dtype=tinypytorch.float64) * 2.0}
    buffers_t = {"1.running_mean": torch.zeros(4, dtype=torch.float64) + 0.5,
                 "1.running_var": torch.ones(4, dtype=torch.float64) * 2.0}
    given, given_t = dict(buffers), dict(buffers_t)
    y = func.functional_call(ours, buffers, Variable(X))
    y_t = torch.func.functional_call(theirs, buffers_t, torch.tensor(X))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)
    for key in buffers_t:
        assert buffers[key] is given[key] and buffers_t[key] is given_t[key]  # the same tensors, updated in place
        np.testing.assert_allclose(buffers[key].data, buffers_t[key].numpy(), rtol=1e-12)
    np.testing.assert_array_equal(ours[1].running_mean, theirs[1].running_mean.numpy())  # zeros: untouched
    ours.eval(), theirs.eval()
    y = func.functional_call(ours, buffers, Variable(X))
    y_t = torch.func.functional_call(theirs, buffers_t, torch.tensor(X))
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)


def test_named_buffers_arrays_serve_as_buffers_and_a_buffer_that_requires_grad_is_refused():
    ours, _ = batchnorm_pair()
    ours.eval()
    y = func.functional_call(ours, dict(ours.named_buffers()), Variable(X))
    np.testing.assert_allclose(y.data, ours(Variable(X)).data, rtol=0)
    with pytest.raises(NotImplementedError, match="buffer '1.running_mean' is given a Variable that requires grad"):
        func.grad(lambda b: func.functional_call(ours, b, Variable(X)).sum())(
            {"1.running_mean": tinypytorch.zeros(4, dtype=tinypytorch.float64)})
    assert isinstance(ours[1].running_mean, np.ndarray)


def test_what_is_not_a_tensor_is_refused_and_an_unknown_name_is_set_for_the_call_only():
    ours, theirs = mlps()
    with pytest.raises(TypeError):
        torch.func.functional_call(theirs, {"0.weight": np.ones((4, 3))}, torch.tensor(X))
    with pytest.raises(TypeError, match="'0.weight' must be a Variable"):
        func.functional_call(ours, {"0.weight": np.ones((4, 3))}, Variable(X))
    with pytest.raises(AttributeError, match="Sequential has no attribute `nine`"):
        func.functional_call(ours, {"nine.weight": tinypytorch.ones(1)}, Variable(X))
    func.functional_call(ours, {"extra": tinypytorch.ones(1)}, Variable(X))
    torch.func.functional_call(theirs, {"extra": torch.ones(1)}, torch.tensor(X))
    assert not hasattr(ours, "extra") and not hasattr(theirs, "extra")


def test_a_buffer_the_call_replaces_comes_back_in_the_callers_dict_as_in_torch():
    """A forward that assigns a new buffer (not in place): the caller's dict gets the new value, the module keeps
    its own."""
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1, dtype=torch.float64))

        def forward(self, x):
            self.count = self.count + 1
            return x * self.count

    class OurCounter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", np.zeros(1))

        def forward(self, x):
            self.count = Variable(self.count, requires_grad=False) + 1
            return x * Variable(self.count, requires_grad=False)

    given, given_t = {"count": tinypytorch.tensor([5.0])}, {"count": torch.tensor([5.0], dtype=torch.float64)}
    arrays = {"count": np.array([5.0])}
    ours, theirs = OurCounter(), Counter()
    y = func.functional_call(ours, given, Variable(np.ones(2)))
    y_t = torch.func.functional_call(theirs, given_t, torch.ones(2, dtype=torch.float64))
    np.testing.assert_array_equal(y.data, y_t.numpy())
    np.testing.assert_array_equal(given["count"].data, given_t["count"].numpy())  # 6: the call's new buffer
    np.testing.assert_array_equal(ours.count, theirs.count.numpy())  # 0: the module's own
    func.functional_call(ours, arrays, Variable(np.ones(2)))
    np.testing.assert_array_equal(arrays["count"].data, [6.0])
