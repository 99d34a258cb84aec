"""One aliasing rule, as PyTorch's: a Variable that shares memory with another shares its version counter, wherever
the package hands one out. Each case the issue of silent wrong gradients listed, run on both frameworks: a module's
full backward hook (its identity nodes), a custom Function that returns its input, state_dict values, load_state_dict
after a forward, zero_grad(set_to_none=False), copy.deepcopy of a parameter with hooks, a view of an inference
tensor. Every one gives torch's gradient or torch's error, never a silent wrong gradient."""
import copy

import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.step53, pytest.mark.torch]

FRAMEWORKS = [torch, tp]


def outcome(scenario, fw):
    """("ok", the values it returns as lists) or ("error", the exception's type name)."""
    try:
        result = scenario(fw)
    except Exception as error:  # noqa: BLE001 (the outcome compared is the error's type)
        return "error", type(error).__name__
    return "ok", [np.asarray(r.detach() if fw is torch else r.data, dtype=np.float64).tolist() for r in result]


def assert_same(scenario):
    theirs, ours = outcome(scenario, torch), outcome(scenario, tp)
    assert ours[0] == theirs[0] and (ours[0] == "error" and ours[1] == theirs[1] or
                                     np.allclose(np.concatenate([np.ravel(v) for v in ours[1]]),
                                                 np.concatenate([np.ravel(v) for v in theirs[1]]))), (ours, theirs)


def hooked_module_input_changed(fw):
    m = fw.nn.Linear(3, 2, dtype=fw.float64)
    m.register_full_backward_hook(lambda *args: None)
    x = fw.ones(2, 3, dtype=fw.float64, requires_grad=True) * 1.0
    y = m(x)
    with fw.no_grad():
        x.mul_(10)
    y.sum().backward()
    return [m.weight.grad]


def hooked_module_output_changed(fw):
    m = fw.nn.Tanh()
    m.register_full_backward_hook(lambda *args: None)
    x = fw.ones(3, dtype=fw.float64, requires_grad=True)
    y = m(x)
    y.mul_(2)
    y.sum().backward()
    return [x.grad]


def custom_function_returning_its_input(fw):
    class Identity(fw.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    a = fw.ones(3, dtype=fw.float64, requires_grad=True) * 2.0
    y = Identity.apply(a)
    with fw.no_grad():
        a.mul_(10)
    (y * fw.ones(3, dtype=fw.float64, requires_grad=True)).sum().backward()
    return [a]


def state_dict_value_changed_after_forward(fw):
    m = fw.nn.Linear(3, 2, dtype=fw.float64)
    x = fw.ones(2, 3, dtype=fw.float64, requires_grad=True)
    y = m(x).sum()
    m.state_dict()["weight"].add_(1)  # the weight's own memory and version counter
    y.backward()
    return [x.grad]


def load_state_dict_after_forward(fw):
    fw.manual_seed(0)
    m, other = fw.nn.Linear(3, 2, dtype=fw.float64), fw.nn.Linear(3, 2, dtype=fw.float64)
    x = fw.ones(2, 3, dtype=fw.float64, requires_grad=True)
    y = (m(x) ** 2).sum()
    m.load_state_dict(other.state_dict())  # copied in place under no_grad: the saved weight's version moves
    y.backward()
    return [x.grad]


def zero_grad_keeping_the_tensor(fw):
    m = fw.nn.Linear(3, 2, dtype=fw.float64)
    m(fw.ones(1, 3, dtype=fw.float64)).sum().backward()
    g = m.weight.grad
    m.zero_grad(set_to_none=False)
    assert g is m.weight.grad
    return [g]


def inference_view_used_in_backward(fw):
    with fw.inference_mode():
        x = fw.ones(3, dtype=fw.float64, requires_grad=True)
    v = x[:2]
    assert not v.requires_grad
    (v * 2).sum().backward()
    return [x.grad]


@pytest.mark.parametrize("scenario", [
    hooked_module_input_changed, hooked_module_output_changed, custom_function_returning_its_input,
    state_dict_value_changed_after_forward, load_state_dict_after_forward, zero_grad_keeping_the_tensor,
    inference_view_used_in_backward,
], ids=lambda s: s.__name__)
def test_the_same_outcome_as_torch(scenario):
    assert_same(scenario)


def test_the_refusals_that_used_to_be_silent_are_torchs():
    for scenario in (hooked_module_input_changed, hooked_module_output_changed, custom_function_returning_its_input,
                     load_state_dict_after_forward, inference_view_used_in_backward):
        assert outcome(scenario, torch)[0] == outcome(scenario, tp)[0] == "error", scenario.__name__


def test_deepcopy_of_a_parameter_drops_its_hooks_as_torchs():
    for fw in FRAMEWORKS:
        p, calls = fw.nn.Parameter(fw.ones(3)), []
        p.register_post_accumulate_grad_hook(lambda t: calls.append("accumulate"))
        p.register_hook(lambda g: calls.append("hook"))
        q = copy.deepcopy(p)
        (q * 2).sum().backward()
        assert calls == [] and type(q).__name__ == "Parameter" and q.grad is not None
        assert q.data_ptr() != p.data_ptr() if fw is torch else not np.shares_memory(q.data, p.data)


def test_a_model_deep_copied_trains_apart_from_the_original():
    for fw in FRAMEWORKS:
        model = fw.nn.Linear(2, 1)
        twin = copy.deepcopy(model)
        twin(fw.ones(1, 2)).sum().backward()
        assert model.weight.grad is None and twin.weight.grad is not None


def test_deepcopy_of_a_non_leaf_is_refused_as_torchs():
    for fw in FRAMEWORKS:
        with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
            copy.deepcopy(fw.ones(2, requires_grad=True) * 2)


def test_state_dict_values_share_memory_and_version_counter_as_torchs():
    for fw in FRAMEWORKS:
        m = fw.nn.Linear(2, 2)
        value = m.state_dict()["weight"]
        before = m.weight._version
        assert not value.requires_grad and value._version == before
        with fw.no_grad():
            m.weight.add_(1)
        assert value._version == m.weight._version == before + 1
