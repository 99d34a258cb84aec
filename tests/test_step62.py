"""Step 62: tinypytorch.amp.GradScaler against torch.amp.GradScaler("cpu") (torch 2.13): the scale, growth tracker,
skipped steps and parameters over a gradient stream with injected infs, state_dict, enabled=False, and PyTorch's
errors for calls out of order and bad arguments."""
import warnings

import numpy as np
import pytest
import torch

from tinypytorch import Variable, nn, optim
from tinypytorch.amp import GradScaler

pytestmark = [pytest.mark.step62, pytest.mark.torch]


def pair(init=None, dtype=np.float32, **kwargs):
    w = np.linspace(-1, 1, 6).reshape(3, 2).astype(dtype) if init is None else init
    p, p_t = nn.Parameter(w.copy()), torch.tensor(w.copy(), requires_grad=True)
    return p, p_t, optim.SGD([p], lr=0.1, momentum=0.9), torch.optim.SGD([p_t], lr=0.1, momentum=0.9)


def backward_both(scaler, scaler_t, p, p_t, x):
    scaler.scale((Variable(x) @ p).square().mean()).backward()
    scaler_t.scale((torch.from_numpy(x) @ p_t).square().mean()).backward()


def error_of(call):
    try:
        call()
    except (RuntimeError, ValueError, AssertionError) as error:
        return type(error), str(error)
    return None


@pytest.mark.parametrize("kwargs", [dict(init_scale=8.0, growth_interval=3),
                                    dict(init_scale=2.0**16, growth_factor=3.0, backoff_factor=0.3, growth_interval=2),
                                    dict(init_scale=1.7, growth_factor=1.1, backoff_factor=0.77, growth_interval=1)])
def test_trajectory_skips_and_parameters_equal_torchs(kwargs):
    p, p_t, opt, opt_t = pair()
    scaler, scaler_t = GradScaler("cpu", **kwargs), torch.amp.GradScaler("cpu", **kwargs)
    rng = np.random.default_rng(0)
    inject = {4: np.inf, 5: -np.inf, 11: np.nan, 12: np.inf}
    for i in range(25):
        # the same scaled gradient stream in both: computed once, written into both .grad
        g = rng.normal(size=(3, 2)).astype(np.float32) * np.float32(scaler_t.get_scale())
        if i in inject:
            g[1, 0] = inject[i]
        scaler.scale((p * 0.0).sum()).backward()
        scaler_t.scale((p_t * 0.0).sum()).backward()
        p.grad.data[...] = g
        p_t.grad.copy_(torch.from_numpy(g))
        assert scaler.step(opt) is None and scaler_t.step(opt_t) is None
        scaler.update()
        scaler_t.update()
        assert scaler.get_scale() == scaler_t.get_scale()
        assert scaler.state_dict() == scaler_t.state_dict()
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=0, atol=0)
        np.testing.assert_allclose(p.data, p_t.detach().numpy(), rtol=1e-6, atol=1e-7)
        opt.zero_grad()
        opt_t.zero_grad()


def test_a_full_training_run_equals_torchs_in_float64():
    rng = np.random.default_rng(1)
    p, p_t, opt, opt_t = pair(rng.normal(size=(3, 2)))
    scaler, scaler_t = GradScaler("cpu", init_scale=4.0, growth_interval=2), torch.amp.GradScaler(
        "cpu", init_scale=4.0, growth_interval=2)
    for i in range(15):
        backward_both(scaler, scaler_t, p, p_t, rng.normal(size=(5, 3)))
        if i in (3, 7):
            p.grad.data[0, 1], p_t.grad[0, 1] = np.nan, float("nan")
        scaler.step(opt), scaler_t.step(opt_t), scaler.update(), scaler_t.update()
        opt.zero_grad(), opt_t.zero_grad()
        assert scaler.state_dict() == scaler_t.state_dict()
    np.testing.assert_allclose(p.data, p_t.detach().numpy(), rtol=1e-12)


def test_unscale_is_in_place_with_torchs_inverse_and_step_returns_the_optimizers_value():
    p, p_t, opt, opt_t = pair()
    scaler, scaler_t = GradScaler("cpu", init_scale=3.0), torch.amp.GradScaler("cpu", init_scale=3.0)
    backward_both(scaler, scaler_t, p, p_t, np.ones((2, 3), dtype=np.float32))
    grad = p.grad
    scaler.unscale_(opt), scaler_t.unscale_(opt_t)
    assert p.grad is grad and p.grad.dtype == np.float32
    np.testing.assert_array_equal(p.grad.data, p_t.grad.numpy())
    opt.step = lambda *args, **kwargs: (args, kwargs)
    assert scaler.step(opt, 1, a=2) == ((1,), {"a": 2})


def test_scale_of_nested_outputs_and_dtypes_are_torchs():
    scaler, scaler_t = GradScaler("cpu", init_scale=3.0), torch.amp.GradScaler("cpu", init_scale=3.0)
    a, b = np.array([0.5, 30000.0], dtype=np.float16), np.array(2.0, dtype=np.float64)
    ours = scaler.scale([Variable(a), (Variable(b), Variable(a.astype(np.float32)))])
    theirs = scaler_t.scale([torch.from_numpy(a), (torch.from_numpy(b), torch.from_numpy(a.astype(np.float32)))])
    assert isinstance(ours, list) and isinstance(ours[1], tuple)
    for o, t in [(ours[0], theirs[0]), (ours[1][0], theirs[1][0]), (ours[1][1], theirs[1][1])]:
        assert o.dtype == t.numpy().dtype
        np.testing.assert_array_equal(o.data, t.numpy())
    h = Variable(np.array(1.5, dtype=np.float16))
    assert scaler.scale(h).dtype == scaler_t.scale(torch.tensor(1.5, dtype=torch.float16)).numpy().dtype
    assert error_of(lambda: scaler.scale(3.0)) == error_of(lambda: scaler_t.scale(3.0))


def states(make_scaler, make_param, sgd):
    """The errors of calls out of order, for one framework."""
    out = []
    for calls in (["unscale_", "unscale_"], ["step", "unscale_"], ["step", "step"], ["update"]):
        scaler, p = make_scaler(), make_param()
        opt = sgd([p], lr=0.1)
        if calls != ["update"]:
            scaler.scale((p * p).sum()).backward()
        else:
            scaler.scale((p * p).sum())
        out.append(error_of(lambda: [getattr(scaler, c)(*([] if c == "update" else [opt])) for c in calls]))
    return out


def test_calls_out_of_order_raise_torchs_errors():
    ours = states(lambda: GradScaler("cpu"), lambda: nn.Parameter(np.ones(2, dtype=np.float32)), optim.SGD)
    theirs = states(lambda: torch.amp.GradScaler("cpu"), lambda: torch.ones(2, requires_grad=True), torch.optim.SGD)
    assert ours == theirs and all(e is not None for e in ours)
    assert ours[-1] == (AssertionError, "No inf checks were recorded prior to update.")


def test_float16_gradients_closure_and_factors_raise_torchs_errors():
    p, p_t = nn.Parameter(np.ones(2, dtype=np.float16)), torch.ones(2, dtype=torch.float16, requires_grad=True)
    scaler, scaler_t = GradScaler("cpu"), torch.amp.GradScaler("cpu")
    scaler.scale((p * p).sum()).backward(), scaler_t.scale((p_t * p_t).sum()).backward()
    before = p.grad.data.copy()
    ours = error_of(lambda: scaler.unscale_(optim.SGD([p])))
    assert ours == error_of(lambda: scaler_t.unscale_(torch.optim.SGD([p_t])))
    assert ours == (ValueError, "Attempting to unscale FP16 gradients.")
    np.testing.assert_array_equal(p.grad.data, before)
    q, q_t = nn.Parameter(np.ones(2, dtype=np.float32)), torch.ones(2, requires_grad=True)
    scaler.scale(q.sum()), scaler_t.scale(q_t.sum())
    assert error_of(lambda: scaler.step(optim.SGD([q]), closure=lambda: 0)) == error_of(
        lambda: scaler_t.step(torch.optim.SGD([q_t]), closure=lambda: 0))
    for kwargs in (dict(growth_factor=1.0), dict(backoff_factor=1.0), dict(growth_factor=0.5)):
        assert error_of(lambda: GradScaler("cpu", **kwargs)) == error_of(lambda: torch.amp.GradScaler("cpu", **kwargs))
    assert error_of(lambda: GradScaler("cpu").unscale_(optim.SGD([q]))) == error_of(
        lambda: torch.amp.GradScaler("cpu").unscale_(torch.optim.SGD([q_t])))


def test_disabled_scaler_passes_everything_through():
    p = nn.Parameter(np.ones(2, dtype=np.float32))
    opt = optim.SGD([p], lr=0.5)
    scaler, scaler_t = GradScaler("cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False)
    loss = (p * p).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    p.grad.data[0] = np.inf  # not checked: the step is taken
    assert scaler.step(opt, closure=lambda: 7.0) == 7.0
    assert p.data[0] == -np.inf
    scaler.update(), scaler.unscale_(opt)
    for name in ("get_scale", "is_enabled", "state_dict", "_get_growth_tracker"):
        assert getattr(scaler, name)() == getattr(scaler_t, name)()
    assert GradScaler("cpu", growth_factor=0.5, enabled=False).is_enabled() is False


def test_cuda_without_cuda_warns_and_disables_as_torch():
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        scaler = GradScaler()
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        scaler_t = torch.amp.GradScaler()
    assert scaler.is_enabled() == scaler_t.is_enabled() is False
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]


def test_state_dict_load_state_dict_getters_and_new_scale_are_torchs():
    kwargs = dict(init_scale=5.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=7)
    scaler, scaler_t = GradScaler("cpu", **kwargs), torch.amp.GradScaler("cpu", **kwargs)
    assert scaler.state_dict() == scaler_t.state_dict()
    assert list(scaler.state_dict()) == ["scale", "growth_factor", "backoff_factor", "growth_interval",
                                         "_growth_tracker"]
    for name in ("get_scale", "get_growth_factor", "get_backoff_factor", "get_growth_interval", "is_enabled"):
        assert getattr(scaler, name)() == getattr(scaler_t, name)()
    saved = dict(scale=0.1, growth_factor=2.5, backoff_factor=0.125, growth_interval=3, _growth_tracker=2)
    fresh, fresh_t = GradScaler("cpu"), torch.amp.GradScaler("cpu")
    p, p_t = nn.Parameter(np.ones(1, dtype=np.float32)), torch.ones(1, requires_grad=True)
    fresh.scale(p.sum()), fresh_t.scale(p_t.sum())
    fresh.load_state_dict(saved), fresh_t.load_state_dict(saved)
    assert fresh.state_dict() == fresh_t.state_dict()  # the scale stored as float32
    assert error_of(lambda: fresh.load_state_dict({})) == error_of(lambda: fresh_t.load_state_dict({}))
    fresh.update(0.3), fresh_t.update(0.3)
    assert fresh.get_scale() == fresh_t.get_scale()
    fresh.update(Variable(np.array(4.0, dtype=np.float32), requires_grad=False)), fresh_t.update(torch.tensor(4.0))
    assert fresh.get_scale() == fresh_t.get_scale() == 4.0
    one = np.array([2.0], dtype=np.float32)
    assert error_of(lambda: fresh.update(Variable(one, requires_grad=False))) == error_of(
        lambda: fresh_t.update(torch.from_numpy(one)))
    assert error_of(lambda: fresh.update(Variable(np.ones(2, dtype=np.float32), requires_grad=False))) == error_of(
        lambda: fresh_t.update(torch.ones(2)))


def test_growth_stops_at_float32s_largest_number():
    scaler, scaler_t = GradScaler("cpu", init_scale=3e38, growth_interval=1), torch.amp.GradScaler(
        "cpu", init_scale=3e38, growth_interval=1)
    p, p_t = nn.Parameter(np.zeros(1, dtype=np.float32)), torch.zeros(1, requires_grad=True)
    opt, opt_t = optim.SGD([p]), torch.optim.SGD([p_t])
    for _ in range(2):
        scaler.scale(p.sum()).backward(), scaler_t.scale(p_t.sum()).backward()
        scaler.step(opt), scaler_t.step(opt_t), scaler.update(), scaler_t.update()
        assert scaler.state_dict() == scaler_t.state_dict()
    assert np.isfinite(scaler.get_scale())
