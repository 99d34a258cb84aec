"""tinypytorch.optim (the optimizers of step 32) against torch.optim, in float64.

Every reference is torch's: the same problem, the same initial parameters and each framework's
own gradients, stepped by torch's optimizer and by ours; errors are compared with the message
torch gives for the same call. Also: Linear's initial weights come from the framework's
generator, so tinypytorch.manual_seed fixes them.
"""
import copy
import inspect
import re

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Parameter, Variable, cuda, optim
from tinypytorch.layers import MLP, Linear

pytestmark = [pytest.mark.step32, pytest.mark.torch]


@pytest.fixture(autouse=True)
def _leave_the_framework_stream_as_found():
    """The Linear tests seed and draw; the tests after them find the default generator where it was."""
    with tinypytorch.random.fork_rng():
        yield


TOL = {"rtol": 1e-12, "atol": 1e-14}  # the same formulas in the same order: a few ulp apart after a few steps
CLASSES = {"SGD": (optim.SGD, torch.optim.SGD), "Adam": (optim.Adam, torch.optim.Adam),
           "AdamW": (optim.AdamW, torch.optim.AdamW), "RMSprop": (optim.RMSprop, torch.optim.RMSprop),
           "Adadelta": (optim.Adadelta, torch.optim.Adadelta)}

# A small least-squares problem: loss = sum((x W + c - y)^2), W (3, 2), c (2,).
_rng = np.random.default_rng(2024)
X, Y = _rng.standard_normal((6, 3)), _rng.standard_normal((6, 2))
W0, C0 = _rng.uniform(-1.0, 1.0, (3, 2)), _rng.uniform(-1.0, 1.0, 2)


def our_params(*arrays):
    return [Parameter(a.copy()) for a in (arrays or (W0, C0))]


def torch_params(*arrays):
    return [torch.tensor(a.copy(), requires_grad=True) for a in (arrays or (W0, C0))]


def our_loss(params):
    w, c = params
    x, y = (Variable(cuda.to_device(a, w.device), requires_grad=False) for a in (X, Y))  # where the parameters are
    r = x @ w + c - y
    return (r * r).sum()


def torch_loss(params):
    w, c = params
    r = torch.tensor(X) @ w + c - torch.tensor(Y)
    return (r * r).sum()


def step_both(ours, theirs, params, params_t, steps):
    for _ in range(steps):
        ours.zero_grad()
        our_loss(params).backward()
        ours.step()
        theirs.zero_grad()
        torch_loss(params_t).backward()
        theirs.step()


def assert_same_params(params, params_t):
    for p, pt in zip(params, params_t, strict=True):
        np.testing.assert_allclose(cuda.as_numpy(p.data), pt.detach().numpy(), **TOL)


def assert_same_state_dict(ours, theirs):
    """Our state_dict() equals torch's: the same indices, keys, values and dtypes, and group settings."""
    assert list(ours["state"]) == list(theirs["state"])
    for index, state_t in theirs["state"].items():
        state = ours["state"][index]
        assert list(state) == list(state_t)
        for key, value_t in state_t.items():
            value = cuda.as_numpy(state[key])
            assert value.dtype == value_t.numpy().dtype, key
            np.testing.assert_allclose(value, value_t.numpy(), **TOL, err_msg=key)
    assert len(ours["param_groups"]) == len(theirs["param_groups"])
    for group, group_t in zip(ours["param_groups"], theirs["param_groups"]):
        # torch's groups also hold its implementation switches (foreach, fused, capturable, differentiable)
        assert set(group) <= set(group_t)
        assert group == {k: group_t[k] for k in group}


# ----- the arithmetic of each optimizer ---------------------------------------------------------------------

SGD_CASES = [{}, {"lr": 0.05}, {"lr": 0.02, "momentum": 0.9}, {"lr": 0.02, "momentum": 0.9, "dampening": 0.5},
             {"lr": 0.02, "momentum": 0.9, "nesterov": True}, {"lr": 0.05, "weight_decay": 0.3},
             {"lr": 0.01, "maximize": True},
             {"lr": 0.02, "momentum": 0.7, "nesterov": True, "weight_decay": 0.1, "maximize": True}]
ADAM_CASES = [{}, {"lr": 0.1}, {"lr": 0.1, "weight_decay": 0.3}, {"lr": 0.1, "betas": (0.8, 0.5), "amsgrad": True},
              {"lr": 0.1, "betas": (0.3, 0.9), "eps": 1e-3}, {"lr": 0.05, "maximize": True},
              {"lr": 0.1, "betas": (0.8, 0.5), "weight_decay": 0.3, "amsgrad": True, "maximize": True}]
ADAMW_CASES = [{}, {"lr": 0.1}, {"lr": 0.1, "weight_decay": 0.0}, {"lr": 0.1, "weight_decay": 0.5},
               {"lr": 0.1, "betas": (0.8, 0.5), "weight_decay": 0.2, "amsgrad": True},
               {"lr": 0.05, "weight_decay": 0.2, "maximize": True}]
RMSPROP_CASES = [{}, {"lr": 0.05, "alpha": 0.9}, {"lr": 0.05, "momentum": 0.8}, {"lr": 0.05, "centered": True},
                 {"lr": 0.05, "alpha": 0.3, "centered": True},  # 1 - alpha >= 0.5: torch's other lerp formula
                 {"lr": 0.05, "eps": 0.1, "weight_decay": 0.3}, {"lr": 0.02, "maximize": True},
                 {"lr": 0.05, "alpha": 0.8, "momentum": 0.5, "centered": True, "weight_decay": 0.1, "maximize": True}]
ADADELTA_CASES = [{}, {"lr": 0.5}, {"lr": 2.0, "rho": 0.5, "eps": 1e-3}, {"lr": 1.0, "weight_decay": 0.3},
                  {"lr": 1.5, "maximize": True}, {"lr": 3.0, "rho": 0.7, "weight_decay": 0.2, "maximize": True}]
CASES = ([("SGD", kw) for kw in SGD_CASES] + [("Adam", kw) for kw in ADAM_CASES]
         + [("AdamW", kw) for kw in ADAMW_CASES] + [("RMSprop", kw) for kw in RMSPROP_CASES]
         + [("Adadelta", kw) for kw in ADADELTA_CASES])


@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{kw}" for n, kw in CASES])
def test_five_steps_equal_torchs(name, kwargs):
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours, theirs = ours_class(params, **kwargs), torch_class(params_t, **kwargs)
    for _ in range(5):
        step_both(ours, theirs, params, params_t, 1)
        assert_same_params(params, params_t)  # after every step, not only the last
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())


FLOAT32_CASES = [("RMSprop", {"lr": 0.05, "momentum": 0.8, "centered": True, "weight_decay": 0.1}),
                 ("RMSprop", {"lr": 0.05, "alpha": 0.3, "maximize": True}),
                 ("Adadelta", {"lr": 2.0, "rho": 0.5, "eps": 1e-3, "weight_decay": 0.2}), ("Adadelta", {})]


@pytest.mark.parametrize("name, kwargs", FLOAT32_CASES, ids=[f"{n}-{kw}" for n, kw in FLOAT32_CASES])
def test_float32_steps_equal_torchs_to_float32_precision(name, kwargs):
    """float32 parameters and gradients, eight steps in two groups: torch's values to a few float32 ulps (torch's
    vectorised kernels fuse a multiply-add, as in addcmul_ and lerp_, rounding once where NumPy rounds twice)."""
    ours_class, torch_class = CLASSES[name]
    arrays = [a.astype(np.float32) for a in (W0, C0)]
    params, params_t = our_params(*arrays), torch_params(*arrays)
    ours = ours_class([{"params": params[:1]}, {"params": params[1:], "lr": 0.5 * kwargs.get("lr", 1.0)}], **kwargs)
    theirs = torch_class([{"params": params_t[:1]}, {"params": params_t[1:], "lr": 0.5 * kwargs.get("lr", 1.0)}],
                         **kwargs)
    rng = np.random.default_rng(7)
    for _ in range(8):  # the same float32 gradients in both, so that only the optimizers' arithmetic differs
        for p, pt in zip(params, params_t):
            g = rng.standard_normal(p.shape).astype(np.float32)
            p.grad, pt.grad = Variable(g.copy(), requires_grad=False), torch.from_numpy(g.copy())
        ours.step()
        theirs.step()
        for p, pt in zip(params, params_t):
            assert p.dtype == np.float32
            np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-5, atol=1e-6)
    state, state_t = ours.state_dict(), theirs.state_dict()
    for index, entries in state_t["state"].items():
        assert list(state["state"][index]) == list(entries)
        for key, value_t in entries.items():
            assert state["state"][index][key].dtype == value_t.numpy().dtype, key
            np.testing.assert_allclose(state["state"][index][key], value_t.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("name", CLASSES)
def test_the_step_count_has_torchs_scalar_dtype_float64_under_a_float64_default(name):
    kwargs = {"momentum": 0.9} if name == "SGD" else {}
    params, params_t = our_params(), torch_params()
    tinypytorch.set_default_dtype(np.float64)
    torch.set_default_dtype(torch.float64)
    try:
        ours, theirs = CLASSES[name][0](params, **kwargs), CLASSES[name][1](params_t, **kwargs)
        step_both(ours, theirs, params, params_t, 1)
    finally:
        torch.set_default_dtype(torch.float32)
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())  # dtypes included


def test_the_amsgrad_cases_reach_a_shrinking_second_moment():
    """The amsgrad cases above test something only where v falls below its running maximum: torch's state shows it."""
    params_t = torch_params()
    theirs = torch.optim.Adam(params_t, lr=0.1, betas=(0.8, 0.5), amsgrad=True)
    for _ in range(5):
        theirs.zero_grad()
        torch_loss(params_t).backward()
        theirs.step()
    state = theirs.state[params_t[0]]
    assert (state["max_exp_avg_sq"] > state["exp_avg_sq"]).any()


def test_the_constructors_signatures_and_defaults_are_torchs():
    for ours, theirs in CLASSES.values():
        torch_parameters = inspect.signature(theirs).parameters
        for name, parameter in inspect.signature(ours).parameters.items():
            assert name in torch_parameters, (ours.__name__, name)
            assert parameter.default == torch_parameters[name].default, (ours.__name__, name)
            assert parameter.kind == torch_parameters[name].kind, (ours.__name__, name)


def test_the_default_learning_rate_is_torchs():
    """torch.optim.SGD's lr defaults to 1e-3 (no longer required): one step of the default shows it."""
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.SGD(params), torch.optim.SGD(params_t)
    step_both(ours, theirs, params, params_t, 1)
    assert_same_params(params, params_t)
    assert ours.param_groups[0]["lr"] == theirs.param_groups[0]["lr"]


@pytest.mark.parametrize("name", CLASSES)
def test_a_step_changes_the_parameters_in_place_and_moves_their_versions_as_torchs(name):
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours, theirs = ours_class(params, lr=0.1), torch_class(params_t, lr=0.1)
    arrays = [p.data for p in params]
    versions, versions_t = [p._version for p in params], [p._version for p in params_t]
    step_both(ours, theirs, params, params_t, 1)
    assert all(p.data is a for p, a in zip(params, arrays)) and all(p.creator is None for p in params)
    # AdamW changes a parameter twice (decay, then the Adam step), the others once
    assert ([p._version - v for p, v in zip(params, versions)]
            == [p._version - v for p, v in zip(params_t, versions_t)])


def test_a_parameter_without_a_gradient_is_skipped_and_its_adam_step_count_waits():
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.Adam(params, lr=0.1), torch.optim.Adam(params_t, lr=0.1)
    for reaches_c in (False, True, True):
        ours.zero_grad()
        theirs.zero_grad()
        if reaches_c:
            our_loss(params).backward()
            torch_loss(params_t).backward()
        else:  # c gets no gradient at all, not a zero one
            (params[0] * params[0]).sum().backward()
            (params_t[0] * params_t[0]).sum().backward()
        ours.step()
        theirs.step()
    assert_same_params(params, params_t)
    assert float(ours.state[params[1]]["step"]) == theirs.state[params_t[1]]["step"].item()


def test_step_with_a_closure_returns_its_loss_as_torchs():
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.SGD(params, lr=0.05, momentum=0.5), torch.optim.SGD(params_t, lr=0.05, momentum=0.5)

    def closure():
        ours.zero_grad()
        loss = our_loss(params)
        loss.backward()
        return loss

    def closure_t():
        theirs.zero_grad()
        loss = torch_loss(params_t)
        loss.backward()
        return loss

    for _ in range(3):
        np.testing.assert_allclose(ours.step(closure).item(), theirs.step(closure_t).item(), **TOL)
    assert_same_params(params, params_t)
    assert ours.step() is None and theirs.step() is None


# ----- parameter groups ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, groups_kwargs, kwargs", [
    ("SGD", ({"lr": 0.1}, {}), {"lr": 0.01, "momentum": 0.9}),
    ("SGD", ({"momentum": 0.5, "nesterov": True}, {"lr": 0.3, "weight_decay": 0.2}), {"lr": 0.02}),
    ("Adam", ({"lr": 0.3, "betas": (0.5, 0.6)}, {"amsgrad": True}), {"lr": 0.05}),
    ("AdamW", ({"weight_decay": 0.5}, {"lr": 0.2}), {"lr": 0.05}),
])
def test_parameter_groups_with_their_own_settings_equal_torchs(name, groups_kwargs, kwargs):
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours = ours_class([{"params": [p], **g} for p, g in zip(params, groups_kwargs)], **kwargs)
    theirs = torch_class([{"params": [p], **g} for p, g in zip(params_t, groups_kwargs)], **kwargs)
    step_both(ours, theirs, params, params_t, 4)
    assert_same_params(params, params_t)
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())
    assert all(g["params"][0] is p for g, p in zip(ours.param_groups, params, strict=True))


def test_params_lists_every_parameter_in_group_order():
    params = our_params(W0, C0, W0)
    ours = optim.SGD([{"params": params[1:]}, {"params": params[:1]}], lr=0.1)
    assert [id(p) for p in ours.params] == [id(p) for p in params[1:] + params[:1]]
    assert len(optim.SGD(MLP((1, 2, 1), rng=np.random.default_rng(0)).params()).params) == 4  # a generator is read once, whole


def test_add_param_group_and_a_learning_rate_changed_in_the_groups_equal_torchs():
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.Adam(params[:1], lr=0.1), torch.optim.Adam(params_t[:1], lr=0.1)
    step_both(ours, theirs, params, params_t, 2)
    ours.add_param_group({"params": params[1], "lr": 0.3})  # one parameter, not in a list: torch takes it too
    theirs.add_param_group({"params": params_t[1], "lr": 0.3})
    step_both(ours, theirs, params, params_t, 2)
    for optimizer in (ours, theirs):  # a hand-written schedule, as PyTorch programs change lr
        for group in optimizer.param_groups:
            group["lr"] *= 0.5
    step_both(ours, theirs, params, params_t, 2)
    assert_same_params(params, params_t)
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())


def test_a_parameter_listed_twice_in_a_group_warns_as_torchs():
    p, pt = our_params(C0)[0], torch_params(C0)[0]
    with pytest.warns(UserWarning, match="duplicate parameters") as warned_t:
        torch.optim.SGD([pt, pt], lr=0.1)
    assert "parameter group with duplicate parameters" in str(warned_t[0].message)
    with pytest.warns(UserWarning, match="parameter group with duplicate parameters"):
        optim.SGD([p, p], lr=0.1)


# ----- zero_grad --------------------------------------------------------------------------------------------

def test_zero_grad_sets_the_gradients_to_none_by_default_as_torchs():
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.SGD(params, lr=0.1), torch.optim.SGD(params_t, lr=0.1)
    our_loss(params).backward()
    torch_loss(params_t).backward()
    ours.zero_grad()
    theirs.zero_grad()
    assert [p.grad for p in params] == [None, None] == [p.grad for p in params_t]


@pytest.mark.parametrize("name", CLASSES)
def test_zero_grad_without_set_to_none_fills_zeros_and_the_next_step_uses_them_as_torchs(name):
    """A zero gradient is still a gradient: the next step runs (weight decay, momentum, Adam's moments)."""
    ours_class, torch_class = CLASSES[name]
    kwargs = {"lr": 0.1, "weight_decay": 0.1} | ({"momentum": 0.9} if name == "SGD" else {})
    params, params_t = our_params(), torch_params()
    ours, theirs = ours_class(params, **kwargs), torch_class(params_t, **kwargs)
    step_both(ours, theirs, params, params_t, 2)
    grads, grads_t = [p.grad for p in params], [p.grad for p in params_t]
    ours.zero_grad(set_to_none=False)
    theirs.zero_grad(set_to_none=False)
    for p, g, pt, gt in zip(params, grads, params_t, grads_t):
        assert p.grad is g and pt.grad is gt  # the same gradient objects, now zero
        np.testing.assert_array_equal(p.grad.data, pt.grad.numpy())
        assert p.grad.requires_grad is False
    ours.step()
    theirs.step()
    assert_same_params(params, params_t)
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())


def test_zero_grad_without_set_to_none_leaves_other_parameters_gradients_alone():
    """q + r hands the gradient of the sum to both; zeroing q's must not zero r's (torch's are separate tensors)."""
    q, r = our_params(C0, C0)
    qt, rt = torch_params(C0, C0)
    (q + r).sum().backward()
    (qt + rt).sum().backward()
    optim.SGD([q], lr=0.1).zero_grad(set_to_none=False)
    torch.optim.SGD([qt], lr=0.1).zero_grad(set_to_none=False)
    np.testing.assert_array_equal(q.grad.data, qt.grad.numpy())
    np.testing.assert_array_equal(r.grad.data, rt.grad.numpy())


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")  # torch's memory-leak advice
def test_zero_grad_without_set_to_none_detaches_a_gradient_made_with_create_graph_as_torch():
    p, pt = our_params(C0)[0], torch_params(C0)[0]
    (p * p * p).sum().backward(create_graph=True)
    (pt * pt * pt).sum().backward(create_graph=True)
    assert (p.grad.creator is not None) == (pt.grad.grad_fn is not None) == True  # noqa: E712
    optim.SGD([p]).zero_grad(set_to_none=False)
    torch.optim.SGD([pt]).zero_grad(set_to_none=False)
    assert p.grad.creator is None and pt.grad.grad_fn is None
    assert p.grad.requires_grad == pt.grad.requires_grad
    np.testing.assert_array_equal(p.grad.data, pt.grad.numpy())


# ----- state_dict and load_state_dict ---------------------------------------------------------------------

STATE_CASES = [("SGD", {"lr": 0.02}), ("SGD", {"lr": 0.02, "momentum": 0.9, "nesterov": True}),
               ("Adam", {"lr": 0.1}), ("Adam", {"lr": 0.1, "betas": (0.8, 0.5), "amsgrad": True}),
               ("AdamW", {"lr": 0.1, "weight_decay": 0.2}),
               ("RMSprop", {"lr": 0.05, "momentum": 0.8, "centered": True}), ("RMSprop", {"lr": 0.05}),
               ("Adadelta", {"lr": 2.0, "weight_decay": 0.1})]


@pytest.mark.parametrize("name, kwargs", STATE_CASES)
def test_state_dict_equals_torchs_and_holds_copies(name, kwargs):
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours = ours_class([{"params": params[:1]}, {"params": params[1:], "lr": 0.05}], **kwargs)
    theirs = torch_class([{"params": params_t[:1]}, {"params": params_t[1:], "lr": 0.05}], **kwargs)
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())  # before any step: no state yet
    step_both(ours, theirs, params, params_t, 3)
    saved, saved_t = ours.state_dict(), copy.deepcopy(theirs.state_dict())
    assert_same_state_dict(saved, saved_t)
    step_both(ours, theirs, params, params_t, 1)
    assert_same_state_dict(saved, saved_t)  # later steps do not reach into a saved state_dict


@pytest.mark.parametrize("name, kwargs", STATE_CASES)
def test_load_state_dict_continues_the_trajectory_as_torchs(name, kwargs):
    """Three steps, save, then a fresh optimizer (other settings) on a copy of the parameters loads the state and
    takes three more steps: the parameters are torch's after six uninterrupted steps."""
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours = ours_class([{"params": params[:1]}, {"params": params[1:], "lr": 0.05}], **kwargs)
    theirs = torch_class([{"params": params_t[:1]}, {"params": params_t[1:], "lr": 0.05}], **kwargs)
    step_both(ours, theirs, params, params_t, 3)
    saved = ours.state_dict()
    resumed = our_params(*[p.data for p in params])
    loader = ours_class([{"params": resumed[:1], "lr": 0.5}, {"params": resumed[1:]}], lr=0.9)
    loader.load_state_dict(saved)
    assert_same_state_dict(loader.state_dict(), theirs.state_dict())
    step_both(loader, theirs, resumed, params_t, 3)
    assert_same_params(resumed, params_t)


def test_load_state_dict_casts_the_state_to_the_parameters_dtype_as_torch():
    params, params_t = our_params(), torch_params()
    ours, theirs = optim.Adam(params, lr=0.1), torch.optim.Adam(params_t, lr=0.1)
    step_both(ours, theirs, params, params_t, 2)
    single = [Parameter(p.data.astype(np.float32)) for p in params]
    single_t = [torch.tensor(p.data.astype(np.float32), requires_grad=True) for p in params]
    loader, loader_t = optim.Adam(single), torch.optim.Adam(single_t)
    loader.load_state_dict(ours.state_dict())
    loader_t.load_state_dict(theirs.state_dict())
    for p, pt in zip(single, single_t):
        for key, value_t in loader_t.state[pt].items():  # exp_avg* become float32; step stays as saved
            assert loader.state[p][key].dtype == value_t.numpy().dtype, key


# ----- devices: the state lives where its parameter lives -------------------------------------------------

def on(xp):
    return "cpu" if xp is np else "cuda"


@pytest.mark.parametrize("name, kwargs", [("SGD", {"lr": 0.02, "momentum": 0.9}),
                                          ("Adam", {"lr": 0.1, "amsgrad": True}), ("AdamW", {"lr": 0.1}),
                                          ("RMSprop", {"lr": 0.05, "momentum": 0.8, "centered": True}),
                                          ("Adadelta", {"lr": 2.0})])
def test_the_state_follows_its_parameters_device_and_loads_onto_it(name, kwargs, xp):
    ours_class, torch_class = CLASSES[name]
    params, params_t = our_params(), torch_params()
    ours, theirs = ours_class(params, **kwargs), torch_class(params_t, **kwargs)
    step_both(ours, theirs, params, params_t, 1)  # the state is made on the CPU
    for p in params:
        p.data = cuda.to_device(p.data, on(xp))
    step_both(ours, theirs, params, params_t, 2)  # ... and moves with its parameter
    assert all(cuda.get_array_module(p.data) is xp for p in params)
    assert_same_params(params, params_t)
    for state in ours.state.values():
        for key, value in state.items():
            # torch keeps Adam's step count on the CPU, whatever the parameter's device
            assert cuda.get_array_module(value) is (np if key == "step" else xp), key
    assert_same_state_dict(ours.state_dict(), theirs.state_dict())
    on_device = [Parameter(cuda.to_device(W0.copy(), on(xp))), Parameter(cuda.to_device(C0.copy(), on(xp)))]
    loader = ours_class(on_device, **kwargs)
    loader.load_state_dict(copy.deepcopy(ours.state_dict()))
    for state in loader.state.values():
        assert all(cuda.get_array_module(v) is (np if k == "step" else xp) for k, v in state.items())


# ----- errors: torch's type and message ---------------------------------------------------------------------

def torch_error(make):
    with pytest.raises(Exception) as caught:
        make(torch.optim, [torch.zeros(1, requires_grad=True)])
    return caught.value


@pytest.mark.parametrize("make", [
    lambda o, p: o.SGD([], lr=0.1),
    lambda o, p: o.SGD([{"params": p}, {"params": p}], lr=0.1),
    lambda o, p: o.SGD(p, lr=-1),
    lambda o, p: o.SGD(p, lr=-0.5, momentum=0.9),
    lambda o, p: o.SGD(p, momentum=-0.5),
    lambda o, p: o.SGD(p, weight_decay=-1e-3),
    lambda o, p: o.SGD(p, nesterov=True),
    lambda o, p: o.SGD(p, momentum=0.9, dampening=0.1, nesterov=True),
    lambda o, p: o.Adam(p, lr=-1e-3),
    lambda o, p: o.Adam(p, eps=-1e-8),
    lambda o, p: o.Adam(p, betas=(1.0, 0.999)),
    lambda o, p: o.Adam(p, betas=(0.9, -0.1)),
    lambda o, p: o.Adam(p, weight_decay=-0.1),
    lambda o, p: o.AdamW(p, lr=-0.5),
    lambda o, p: o.AdamW(p, betas=(0.9, 1.0)),
    lambda o, p: o.AdamW(p, weight_decay=-0.01),
    lambda o, p: o.RMSprop(p, lr=-0.5),
    lambda o, p: o.RMSprop(p, eps=-1e-8),
    lambda o, p: o.RMSprop(p, momentum=-0.1),
    lambda o, p: o.RMSprop(p, weight_decay=-0.1),
    lambda o, p: o.RMSprop(p, alpha=-0.9),
    lambda o, p: o.Adadelta(p, lr=-1.0),
    lambda o, p: o.Adadelta(p, rho=1.5),
    lambda o, p: o.Adadelta(p, rho=-0.1),
    lambda o, p: o.Adadelta(p, eps=-1e-6),
    lambda o, p: o.Adadelta(p, weight_decay=-0.1),
    lambda o, p: o.SGD(p).load_state_dict({"state": {}, "param_groups": []}),
    lambda o, p: o.SGD(p).load_state_dict({"state": {}, "param_groups": [{"params": [0]}, {"params": [1]}]}),
    lambda o, p: o.SGD(p).load_state_dict({"state": {}, "param_groups": [{"params": [0, 1]}]}),
    lambda o, p: o.Adam(p).add_param_group({"params": p}),
])
def test_errors_have_torchs_type_and_message(make):
    expected = torch_error(make)
    with pytest.raises(type(expected), match="^" + re.escape(str(expected)) + "$"):
        make(optim, [Parameter(np.zeros(1))])


@pytest.mark.parametrize("make, message", [
    (lambda o, p: o.SGD(p[0]), "params argument given to the optimizer should be an iterable of "),
    (lambda o, p: o.SGD([1.0]), "optimizer can only optimize"),
    (lambda o, p: o.SGD([p[0] * 2]), "can't optimize a non-leaf"),
    (lambda o, p: o.SGD(p).add_param_group(p), "param_group must be a dict, but got"),
    (lambda o, p: o.SGD(p).add_param_group({"params": set(p)}), "optimizer parameters need to be organized in "
                                                                "ordered collections"),
    (lambda o, p: o.SGD(p, lr="0.1"), None),
])
def test_errors_torch_words_for_its_tensors_have_torchs_type_and_meaning(make, message):
    """torch's message names its Tensor, ours the Variable; the rest of the sentence and the type are the same."""
    expected = torch_error(make)
    assert message is None or str(expected).startswith(message)
    with pytest.raises(type(expected), match=None if message is None else "^" + re.escape(message)):
        make(optim, [Parameter(np.zeros(1))])


def test_betas_that_are_not_a_pair_raise_a_clear_value_error():
    """torch indexes betas without checking their number (IndexError for one, a third silently kept): a clear
    ValueError here."""
    for betas in [(0.9,), (0.9, 0.99, 0.5)]:
        with pytest.raises(ValueError, match=re.escape(f"Adam: betas must be a pair (beta1, beta2), got {betas!r}")):
            optim.Adam([Parameter(np.zeros(1))], betas=betas)


# ----- a PyTorch training loop with its imports renamed --------------------------------------------------

def training_loop(torch_or_tinypytorch, params, loss_of):
    """Written for torch; tinypytorch runs it unchanged."""
    optimizer = torch_or_tinypytorch.optim.SGD(
        [{"params": params[:1]}, {"params": params[1:], "weight_decay": 0.01}], lr=0.05, momentum=0.9)
    checkpoint = None
    for epoch in range(6):
        optimizer.zero_grad()
        loss = loss_of(params)
        loss.backward()
        optimizer.step()
        if epoch == 2:
            # deepcopy: torch's state_dict holds the live state tensors, which later steps change (ours
            # holds copies already, and a copy of a copy changes nothing)
            checkpoint = copy.deepcopy(optimizer.state_dict())
            for group in optimizer.param_groups:
                group["lr"] = 0.5 * group["lr"]
    optimizer.load_state_dict(checkpoint)
    optimizer.zero_grad(set_to_none=False)
    loss_of(params).backward()
    optimizer.step()
    return loss.item()


def test_a_pytorch_training_loop_runs_with_its_imports_renamed():
    params, params_t = our_params(), torch_params()
    loss, loss_t = training_loop(tinypytorch, params, our_loss), training_loop(torch, params_t, torch_loss)
    np.testing.assert_allclose(loss, loss_t, **TOL)
    assert_same_params(params, params_t)


def test_optim_is_torch_optims_path_to_the_optimizers():
    from tinypytorch import optimizers
    assert (optim.Optimizer, optim.SGD, optim.Adam, optim.AdamW) == (
        optimizers.Optimizer, optimizers.SGD, optimizers.Adam, optimizers.AdamW)
    assert all(issubclass(c, optim.Optimizer) for c, _ in CLASSES.values())
    assert set(optim.__all__) <= set(torch.optim.__all__) | {"lr_scheduler"}


@pytest.mark.parametrize("make", [lambda p: optim.RMSprop(p, capturable=True),
                                  lambda p: optim.RMSprop(p, differentiable=True),
                                  lambda p: optim.Adadelta(p, capturable=True),
                                  lambda p: optim.Adadelta(p, differentiable=True)])
def test_torchs_switches_that_change_what_a_step_is_are_refused(make):
    """capturable (CUDA graphs) and differentiable (a step autograd records) are not here: a clear error."""
    with pytest.raises(NotImplementedError, match="=True is not implemented"):
        make(our_params())


@pytest.mark.parametrize("foreach", [None, False, True])
def test_foreach_picks_an_implementation_and_changes_no_value(foreach):
    params, params_t = our_params(), torch_params()
    ours = optim.RMSprop(params, lr=0.05, momentum=0.5, foreach=foreach)
    theirs = torch.optim.RMSprop(params_t, lr=0.05, momentum=0.5, foreach=foreach)
    step_both(ours, theirs, params, params_t, 3)
    assert_same_params(params, params_t)


# ----- Linear's initial weights come from the framework's generator ------------------------------------

def test_manual_seed_fixes_the_initial_weights_of_linear_and_mlp():
    models = []
    for seed in (0, 0, 1):
        tinypytorch.manual_seed(seed)
        models.append([p.data for p in MLP((3, 4, 2)).params()])
    assert all(np.array_equal(a, b) for a, b in zip(models[0], models[1], strict=True))
    assert not any(np.array_equal(a, b) for a, b in zip(models[0], models[2], strict=True))


def test_linear_draws_uniform_weights_then_bias_from_the_seeded_pcg64_stream():
    """manual_seed(s) starts the default generator as PCG64(s) (tinypytorch.random); Linear draws from it, weight
    first, uniform in [-k, k] with k = 1/sqrt(in_size), PyTorch's nn.Linear distribution."""
    tinypytorch.manual_seed(7)
    layer = Linear(5, 3)
    reference = np.random.Generator(np.random.PCG64(7))
    k = 1 / np.sqrt(5)
    np.testing.assert_array_equal(layer.weight.data, reference.uniform(-k, k, (3, 5)))
    np.testing.assert_array_equal(layer.bias.data, reference.uniform(-k, k, 3))


def test_a_generator_of_the_callers_still_gives_its_own_weights_and_leaves_the_framework_stream_alone():
    tinypytorch.manual_seed(3)
    state = tinypytorch.get_rng_state()
    layer = Linear(4, 2, rng=np.random.default_rng(11))
    assert tinypytorch.get_rng_state() == state
    np.testing.assert_array_equal(layer.weight.data, np.random.default_rng(11).uniform(-0.5, 0.5, (2, 4)))


# ----- float16: each of torch's operations rounds once (step 60) --------------------------------------

SGD_FLOAT16 = [
    {"lr": 0.1 * 2.0**16},  # an lr that float16 cannot hold: 6553.6, not 6552
    {"lr": 0.3, "momentum": 0.9},
    {"lr": 0.3, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    {"lr": 0.3, "momentum": 0.9, "nesterov": True, "maximize": True},
]


@pytest.mark.step60
@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="torch's scalar float16 kernels (ATEN_CPU_CAPABILITY=default, processors other than x86) "
                           "round SGD's float16 steps otherwise than its vectorised x86 ones, which the package follows")
@pytest.mark.parametrize("settings", SGD_FLOAT16, ids=str)
def test_sgd_on_float16_parameters_gives_torchs_bits(settings):
    """Fed the same float16 gradients, SGD's float16 parameters equal torch's bit for bit, step after step, where
    torch runs its vectorised x86 kernels (AVX2 or AVX-512): each operation computes in float32 and rounds once."""
    rng = np.random.default_rng(5)
    start = (rng.normal(size=(8, 16)) * 0.1).astype(np.float16)
    ours, theirs = Parameter(start.copy()), torch.tensor(start).requires_grad_()
    mine, torchs = optim.SGD([ours], **settings), torch.optim.SGD([theirs], **settings)
    scale = 1e-5 if settings["lr"] > 1000 else 1e-1
    for _ in range(6):
        g = (rng.normal(size=start.shape) * scale).astype(np.float16)
        ours.grad, theirs.grad = Variable(g.copy()), torch.tensor(g)
        mine.step()
        torchs.step()
        assert ours.dtype == np.float16
        np.testing.assert_array_equal(ours.data, theirs.detach().numpy())
