"""Every gradient mode against PyTorch: no_grad, enable_grad, set_grad_enabled, inference_mode (steps 57 and 58).

Each scenario is written once, against a framework module `fw` (torch or tinypytorch: the names are the same),
runs in both, and must give the same outcome: the same values, or the same error with PyTorch's words.
"""
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import floats

pytestmark = pytest.mark.torch

FRAMEWORKS = [torch, tinypytorch]


def outcome(scenario, fw):
    """What `scenario(fw)` gives: ("ok", its result as plain Python values) or ("error", type name, message)."""
    try:
        result = scenario(fw)
    except Exception as error:  # noqa: BLE001 (the outcome compared is the error itself)
        return "error", type(error).__name__, str(error).replace("tinypytorch.", "torch.")
    finally:  # a scenario that fails inside a mode must not leave it on for the next
        assert not fw.is_inference_mode_enabled() and fw.is_grad_enabled()
    return "ok", plain(result)


def plain(value):
    """Tensors, Variables and arrays as nested lists, so that both frameworks' results compare with ==."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, (torch.Tensor, tinypytorch.Variable)):
        return np.asarray(value.detach()).tolist()
    return value


def assert_same_outcome(scenario):
    expected, got = outcome(scenario, torch), outcome(scenario, tinypytorch)
    assert got == expected


def vector(fw, values=(1.0, 2.0, 3.0), requires_grad=False):
    return fw.tensor(list(values), dtype=fw.float64, requires_grad=requires_grad)


# ----- no_grad, enable_grad, set_grad_enabled: context managers, decorators, plain calls ------------

def decorated_bare(fw):
    @fw.no_grad
    def f():
        return fw.is_grad_enabled()

    @fw.enable_grad
    def g():
        return fw.is_grad_enabled()

    with fw.no_grad():
        inside_no_grad = g()
    return f(), inside_no_grad, fw.is_grad_enabled()


def decorated_called(fw):
    @fw.no_grad()
    def f(w):
        return (w * 2).requires_grad, fw.is_grad_enabled()

    @fw.enable_grad()
    def g(w):
        return (w * 2).requires_grad

    w = vector(fw, requires_grad=True)
    with fw.no_grad():
        recorded = g(w)
    return f(w), recorded, f.__name__


def decorated_generator(fw):
    @fw.no_grad()
    def steps():
        received = yield fw.is_grad_enabled()
        yield received, fw.is_grad_enabled()

    it = steps()
    first = next(it)
    between = fw.is_grad_enabled()  # the caller runs outside the mode between steps
    second = it.send("sent")
    return first, between, second


def set_grad_enabled_called(fw):
    fw.set_grad_enabled(False)  # switches at once, and stays until changed
    try:
        off = fw.is_grad_enabled(), (vector(fw, requires_grad=True) * 2).requires_grad
    finally:
        fw.set_grad_enabled(True)
    return off, fw.is_grad_enabled()


def set_grad_enabled_as_context(fw):
    with fw.set_grad_enabled(False) as entered:
        inside = fw.is_grad_enabled()
        with fw.set_grad_enabled(True):
            nested = fw.is_grad_enabled()
        back = fw.is_grad_enabled()
    return entered, inside, nested, back, fw.is_grad_enabled()


def set_grad_enabled_as_decorator(fw):
    @fw.set_grad_enabled(False)
    def f():
        return fw.is_grad_enabled()

    after_decorating = fw.is_grad_enabled()  # decorating switches nothing
    return after_decorating, f(), f(), fw.is_grad_enabled()


def set_grad_enabled_not_a_bool(fw):
    fw.set_grad_enabled(1)


@pytest.mark.parametrize("scenario", [
    decorated_bare, decorated_called, decorated_generator, set_grad_enabled_called, set_grad_enabled_as_context,
    set_grad_enabled_as_decorator,
], ids=lambda s: s.__name__)
def test_grad_mode_as_torch(scenario):
    assert_same_outcome(scenario)


def test_set_grad_enabled_refuses_a_mode_that_is_not_a_bool_as_torch():
    assert outcome(set_grad_enabled_not_a_bool, torch)[:2] == ("error", "TypeError")
    assert outcome(set_grad_enabled_not_a_bool, tinypytorch) == (
        "error", "TypeError", "set_grad_enabled: mode must be a bool, got int")


def test_a_decorated_generator_closes_and_takes_exceptions_inside_the_mode():
    seen = []

    @tinypytorch.no_grad()
    def steps():
        try:
            yield 1
        except KeyError:
            seen.append(("thrown", tinypytorch.is_grad_enabled()))
            yield 2
        finally:
            seen.append(("closed", tinypytorch.is_grad_enabled()))

    it = steps()
    assert next(it) == 1 and it.throw(KeyError) == 2
    it.close()
    assert seen == [("thrown", False), ("closed", False)] and tinypytorch.is_grad_enabled()


# ----- inference mode ---------------------------------------------------------------------------------

def made_inside(fw):
    with fw.inference_mode():
        x = vector(fw)
        state = fw.is_grad_enabled(), fw.is_inference_mode_enabled()
        return x.is_inference(), x.requires_grad, state, (x * 2).is_inference(), x[0:2].is_inference()


def views_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    view = x[0:2]
    return (view.is_inference(), view._base is None, x.detach().is_inference(), x.reshape(3).is_inference(),
            (x * 2).is_inference(), x.clone().is_inference())


def version_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    return x._version


def version_inside(fw):
    with fw.inference_mode():
        return vector(fw)._version


def nested_off(fw):
    with fw.no_grad(), fw.inference_mode():
        x = vector(fw)
        with fw.inference_mode(False):  # PyTorch's guard: grad mode on again, new tensors normal
            w = vector(fw, requires_grad=True)
            inner = fw.is_grad_enabled(), fw.is_inference_mode_enabled(), w.is_inference(), (w * 2).requires_grad
        back = fw.is_grad_enabled(), fw.is_inference_mode_enabled()
    return inner, back, x.is_inference()


def enable_grad_inside(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode(), fw.enable_grad():  # grad mode on, and still nothing is recorded
        y = w * 2
        return fw.is_grad_enabled(), y.requires_grad, y.is_inference(), y.grad_fn is None


def no_grad_inside(fw):
    with fw.inference_mode(), fw.no_grad():
        return fw.is_inference_mode_enabled(), vector(fw).is_inference()


def in_place_inside(fw):
    with fw.inference_mode():
        x = vector(fw)
        x.add_(1)
        x.mul_(2)
    return x


def in_place_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    x.add_(1)


def in_place_of_a_view_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    x[0:2].mul_(2)


def set_item_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    x[0] = 5.0


def in_place_when_nested_off(fw):
    with fw.inference_mode():
        x = vector(fw)
        with fw.inference_mode(False):
            x.zero_()


def normal_tensor_changed_inside(fw):
    x = vector(fw)
    with fw.inference_mode():
        x.add_(1)
        view = x[0:2]
        return x, x._version, view.is_inference(), view._version


def requires_grad_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    x.requires_grad_()


def requires_grad_set_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    x.requires_grad = True


def requires_grad_off_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    return x.requires_grad_(False).requires_grad


def requires_grad_inside(fw):
    with fw.inference_mode():
        a = vector(fw, requires_grad=True)  # allowed inside; outside, a constant factor saves nothing of it
    (a * 2).sum().backward()
    return a.is_inference(), a.requires_grad, a.grad


def added_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    y = vector(fw, (4.0, 5.0, 6.0), requires_grad=True)
    z = x + y  # add saves nothing: allowed
    z.sum().backward()
    return z, z.is_inference(), z.requires_grad, y.grad


def multiplied_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    return x * vector(fw, requires_grad=True)  # mul saves x for y's gradient


def multiplied_on_the_right(fw):
    with fw.inference_mode():
        x = vector(fw)
    return vector(fw, requires_grad=True) * x


def multiplied_by_a_constant(fw):
    with fw.inference_mode():
        x = vector(fw)
    return x * vector(fw).detach(), fw.abs(x)  # (exact operations: the outcomes compare with ==)


def cloned_outside(fw):
    with fw.inference_mode():
        x = vector(fw)
    c = x.clone()  # a normal tensor: it may be saved, and changed in place
    y = vector(fw, (4.0, 5.0, 6.0), requires_grad=True)
    (c * y).sum().backward()
    c.add_(1)
    return c.is_inference(), y.grad, c


def as_decorator(fw):
    @fw.inference_mode()
    def called():
        return fw.is_inference_mode_enabled(), fw.is_grad_enabled(), vector(fw).is_inference()

    @fw.inference_mode
    def bare():
        return fw.is_inference_mode_enabled()

    @fw.inference_mode(False)
    def off():
        return fw.is_inference_mode_enabled()

    with fw.inference_mode():
        nested = off()
    return called(), bare(), nested, fw.is_inference_mode_enabled()


def generator_decorated(fw):
    @fw.inference_mode()
    def steps():
        yield fw.is_inference_mode_enabled()
        yield vector(fw).is_inference()

    it = steps()
    return next(it), fw.is_inference_mode_enabled(), next(it)


def grad_made_in_a_backward_inside(fw):
    """A backward pass inside the mode on a graph made outside: .grad is an inference tensor, so the next pass
    outside may not add into it (torch: the in-place error); inside the mode it may."""
    x = vector(fw, requires_grad=True)
    y = (x * x).sum()
    with fw.inference_mode():
        y.backward(retain_graph=True)
    made_inference = x.grad.is_inference()
    with fw.inference_mode():
        y.backward(retain_graph=True)
    y.backward()
    return made_inference, x.grad


def grad_added_to_inside(fw):
    x = vector(fw, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    with fw.inference_mode():
        y.backward()
    return x.grad.is_inference(), x.grad


INFERENCE_SCENARIOS = [
    grad_made_in_a_backward_inside, grad_added_to_inside,
    made_inside, views_outside, version_outside, version_inside, nested_off, enable_grad_inside, no_grad_inside,
    in_place_inside, in_place_outside, in_place_of_a_view_outside, set_item_outside, in_place_when_nested_off,
    normal_tensor_changed_inside, requires_grad_outside, requires_grad_set_outside, requires_grad_off_outside,
    requires_grad_inside, added_outside, multiplied_outside, multiplied_on_the_right, multiplied_by_a_constant,
    cloned_outside, as_decorator, generator_decorated,
]


@pytest.mark.parametrize("scenario", INFERENCE_SCENARIOS, ids=lambda s: s.__name__)
def test_inference_mode_as_torch(scenario):
    assert_same_outcome(scenario)


def view_of_a_grad_tensor_made_inside(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode():
        view = w[0:2]  # a normal tensor, requires_grad as its base, no grad_fn, _base w
    return view.is_inference(), view.requires_grad, view.grad_fn is None, view._base is w


def view_made_inside_changed_outside(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode():
        view = w[0:2]
    view.mul_(2)  # "A view was created in inference mode and is being modified inplace in normal mode..."


def view_made_inside_changed_outside_under_no_grad(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode():
        view = w[0:2]
    with fw.no_grad():
        view.mul_(2)  # allowed: nothing records
    return w


def view_made_inside_used_outside(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode():
        view = w[0:2]
    (view * 3).sum().backward()  # no graph leads to w, and the view keeps no .grad
    return w.grad is None, view.grad is None


def view_made_inside_used_after_its_base_changed(fw):
    w = vector(fw, requires_grad=True)
    with fw.inference_mode():
        view = w[0:2]
        view.mul_(3)  # allowed inside the mode
        inside = view * 2
    with fw.no_grad():
        under_no_grad = view * 2
    return inside, under_no_grad, view * 2  # the last one: "... its base or another view of its base ..."


def view_of_a_plain_tensor_made_inside_changed_outside(fw):
    x = vector(fw)
    with fw.inference_mode():
        view = x[0:2]
    view.mul_(2)  # allowed: nothing requires grad
    return x


# A view of a normal tensor made in inference mode is a normal tensor: no graph records how it was made, so PyTorch
# refuses what would need one.
VIEWS_MADE_INSIDE = [
    view_of_a_grad_tensor_made_inside, view_made_inside_changed_outside, view_made_inside_changed_outside_under_no_grad,
    view_made_inside_used_outside, view_made_inside_used_after_its_base_changed,
    view_of_a_plain_tensor_made_inside_changed_outside,
]


@pytest.mark.parametrize("scenario", VIEWS_MADE_INSIDE, ids=lambda s: s.__name__)
def test_a_view_of_a_normal_tensor_made_in_inference_mode_as_torch(scenario):
    assert_same_outcome(scenario)


def test_the_views_made_inside_meet_each_of_torchs_view_errors():
    messages = {outcome(s, torch)[2] for s in VIEWS_MADE_INSIDE if outcome(s, torch)[0] == "error"}
    assert {m.split(" in normal mode")[0] for m in messages} == {
        "A view was created in inference mode and is being modified inplace",
        "A view was created in inference mode and its base or another view of its base has been modified inplace",
    }


def test_the_inference_scenarios_meet_each_of_torchs_errors():
    messages = {outcome(s, torch)[2] for s in INFERENCE_SCENARIOS if outcome(s, torch)[0] == "error"}
    assert messages == {
        "Inference tensors do not track version counter.",
        "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a "
        "normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for more details.",
        "Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.",
        "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
        "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use "
        "it in autograd, or use `torch.no_grad()` instead of `torch.inference_mode()`.",
    }


def test_an_inference_tensor_keeps_no_version_counter_and_no_view_record():
    with tinypytorch.inference_mode():
        x = tinypytorch.ones(4, dtype=tinypytorch.float64)
        view = x.reshape(2, 2)
    assert x.version_counter is None and view.version_counter is None and view.view_record is None


def test_inference_mode_refuses_a_mode_that_is_neither_a_bool_nor_a_function():
    with pytest.raises(TypeError, match="inference_mode: mode must be a bool, got int"):
        tinypytorch.inference_mode(1)


@settings(max_examples=25, deadline=None)
@given(arrays(np.float64, st.integers(1, 5), elements=floats(-10, 10)))
def test_an_inference_tensor_added_outside_the_mode_gives_torchs_gradients(values):
    def scenario(fw):
        with fw.inference_mode():
            x = fw.tensor(values, dtype=fw.float64)
        y = fw.tensor(values[::-1].copy(), dtype=fw.float64, requires_grad=True)
        ((x + y) * (x + y)).sum().backward()
        return y.grad

    expected, got = outcome(scenario, torch), outcome(scenario, tinypytorch)
    assert got[0] == expected[0] == "ok"
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


# ----- .data and .detach(): two views of the same memory, one of them counted ------------------------

def detached_changed(fw):
    a = vector(fw, requires_grad=True)
    b = a * 1
    c = (b * b).sum()  # saves b
    b.detach().add_(1)  # shares b's version counter: backward sees the change
    c.backward()


def data_changed(fw):
    a = vector(fw, requires_grad=True)
    b = a * 1
    c = (b * b).sum()
    if fw is torch:
        b.data.add_(1)  # a tensor that shares the memory and not the counter
    else:
        b.data += 1  # the array itself: nothing counts the change
    c.backward()
    return a.grad, b._version


def test_a_change_through_detach_makes_backward_raise_in_both():
    expected, got = outcome(detached_changed, torch), outcome(detached_changed, tinypytorch)
    assert expected[0] == got[0] == "error" and expected[1] == got[1] == "RuntimeError"
    for message in expected[2], got[2]:
        assert "modified by an inplace operation" in message and "is at version 1; expected version 0" in message


def test_a_change_through_data_gives_the_same_silently_wrong_gradient_in_both():
    expected, got = outcome(data_changed, torch), outcome(data_changed, tinypytorch)
    assert got == expected == ("ok", [[4.0, 6.0, 8.0], 0])  # d(sum b*b)/da = 2a = [2, 4, 6]: wrong in both


# ----- thread-local modes -----------------------------------------------------------------------------

def seen_from_another_thread(fw, mode):
    """What a second thread sees while this one is inside `mode`, and what this one sees while the second
    thread is inside it."""
    def state():
        w = vector(fw, requires_grad=True)
        return fw.is_grad_enabled(), fw.is_inference_mode_enabled(), (w * 2).requires_grad, w.is_inference()

    seen, entered, checked = {}, threading.Event(), threading.Event()

    def worker(hold):
        if hold:
            with mode(fw):
                entered.set()
                checked.wait(5)
        else:
            seen["other"] = state()

    with mode(fw):
        thread = threading.Thread(target=worker, args=(False,))
        thread.start()
        thread.join()
    thread = threading.Thread(target=worker, args=(True,))
    thread.start()
    entered.wait(5)
    seen["this"] = state()
    checked.set()
    thread.join()
    return seen


@pytest.mark.parametrize("mode", [lambda fw: fw.no_grad(), lambda fw: fw.inference_mode(),
                                  lambda fw: fw.set_grad_enabled(False)], ids=["no_grad", "inference_mode",
                                                                               "set_grad_enabled"])
def test_a_mode_belongs_to_its_thread_as_in_torch(mode):
    expected = seen_from_another_thread(torch, mode)
    assert expected == {"other": (True, False, True, False), "this": (True, False, True, False)}
    assert seen_from_another_thread(tinypytorch, mode) == expected
