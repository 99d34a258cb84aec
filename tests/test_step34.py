"""Step 34: hooks on gradients (register_hook, RemovableHandle) and retain_grad, against torch."""
import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import tinypytorch
from reference import BINARY_EXPRESSIONS, UNARY_EXPRESSIONS, evaluate, expressions, floats, operation_lists
from steploader import load_step
from tinypytorch import Variable, autograd

pytestmark = [pytest.mark.step34, pytest.mark.torch]
step = load_step(34)

UNARY = expressions(UNARY_EXPRESSIONS, "sin", "exp", "tanh", "pow2", "add 1.5")
BINARY = expressions(BINARY_EXPRESSIONS, "add", "sub", "mul")
SCALES = [None, None, 2.0, -0.5]  # what a hook does: None only looks, a number scales the gradient


@st.composite
def hooked_graphs(draw):
    count = draw(st.integers(1, 3))
    values = draw(st.lists(floats(-1.5, 1.5), min_size=count, max_size=count))
    operations = draw(operation_lists(UNARY, BINARY, max_size=12))
    total = count + len(operations)
    # per node: a list of hooks (each a scale or None), and whether retain_grad() is called
    node_hooks = draw(st.lists(st.lists(st.sampled_from(SCALES), max_size=2), min_size=total, max_size=total))
    retain = draw(st.lists(st.booleans(), min_size=total, max_size=total))
    return values, operations, node_hooks, retain


def build(m, make, graph, calls):
    values, operations, node_hooks, retain = graph
    nodes = evaluate(m, [make(v) for v in values], operations, UNARY, BINARY)
    for k, node in enumerate(nodes):
        for j, scale in enumerate(node_hooks[k]):
            def hook(grad, k=k, j=j, scale=scale):
                calls.append((k, j, grad.item()))
                return None if scale is None else grad * scale
            node.register_hook(hook)
        if retain[k]:
            node.retain_grad()
    return nodes


def ours_and_torch(graph):
    calls, calls_t = [], []
    ours = build(tinypytorch, lambda v: Variable(np.array(v)), graph, calls)
    theirs = build(torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True), graph, calls_t)
    return ours, theirs, calls, calls_t


def assert_same_calls(calls, calls_t):
    assert [(k, j) for k, j, _ in calls] == [(k, j) for k, j, _ in calls_t]
    scale = max([1.0] + [abs(g) for _, _, g in calls_t])
    np.testing.assert_allclose([g for _, _, g in calls], [g for _, _, g in calls_t], rtol=1e-12, atol=1e-14 * scale)


def grads(variables):
    """Each .grad as a number, nan for None (torch warns on reading a non-leaf's .grad: not read)."""
    return [np.nan if not (v.is_leaf or v.retains_grad) or v.grad is None else v.grad.item() for v in variables]


@given(hooked_graphs())
def test_random_graphs_hook_calls_modified_grads_and_retained_grads_equal_torch(graph):
    ours, theirs, calls, calls_t = ours_and_torch(graph)
    assume(all(bool(torch.isfinite(t)) for t in theirs))
    for _ in range(2):  # a second pass: leaf and retained grads add up, hooks run again
        ours[-1].backward(retain_graph=True)
        theirs[-1].backward(retain_graph=True)
    assert_same_calls(calls, calls_t)
    np.testing.assert_allclose(grads(ours), grads(theirs), rtol=1e-12, atol=1e-13)  # nan where both are None
    assert [v.retains_grad for v in ours] == [t.retains_grad for t in theirs]


@given(hooked_graphs(), st.data())
def test_random_graphs_hooks_under_autograd_grad_equal_torch(graph, data):
    ours, theirs, calls, calls_t = ours_and_torch(graph)
    assume(all(bool(torch.isfinite(t)) for t in theirs))
    count = len(graph[0])
    picked = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=2))  # leaves: see the quirk below
    result = autograd.grad(ours[-1], [ours[i] for i in picked], allow_unused=True)
    expected = torch.autograd.grad(theirs[-1], [theirs[i] for i in picked], allow_unused=True)
    assert_same_calls(calls, calls_t)
    np.testing.assert_allclose([np.nan if g is None else g.item() for g in result],
                               [np.nan if g is None else g.item() for g in expected], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(grads(ours), grads(theirs))  # retained grads set, leaves untouched, as in torch


def test_a_hook_on_a_variable_used_twice_sees_the_complete_gradient_once():
    seen, seen_t = [], []
    for m, make, log in [(tinypytorch, lambda: Variable(np.array(1.0)), seen),
                         (torch, lambda: torch.tensor(1.0, dtype=torch.float64, requires_grad=True), seen_t)]:
        x = make()
        a = x * 2.0
        a.register_hook(lambda grad, log=log: log.append(grad.item()))
        (a * a + a).backward()
    assert seen == seen_t == [5.0]  # 2a + 1 at a = 2


def test_a_leaf_hook_sees_each_passs_gradient_before_it_is_added_into_grad():
    x = Variable(np.array(1.0))
    seen = []
    x.register_hook(lambda grad: seen.append((grad.item(), None if x.grad is None else x.grad.item())))
    y = x * 3.0
    y.backward()
    y.backward()
    assert seen == [(3.0, None), (3.0, 3.0)] and x.grad.item() == 6.0


def test_the_steps_order_example_gives_each_gradient_once_in_torchs_order():
    orders = []
    for m, make in [(tinypytorch, lambda v: Variable(np.array(v))),
                    (torch, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True))]:
        x, w = make(0.5), make(1.5)
        s = m.sin(x)
        a = s * w
        d = x - w
        b = m.exp(d)
        ab = a * b
        y = ab + a
        calls = step.record_hook_calls([("x", x), ("w", w), ("s", s), ("a", a), ("d", d), ("b", b), ("ab", ab),
                                        ("y", y)])
        y.backward()
        orders.append(calls)
    assert [name for name, _ in orders[0]] == [name for name, _ in orders[1]] == ["y", "ab", "b", "d", "a", "w", "s",
                                                                                   "x"]
    np.testing.assert_allclose([g for _, g in orders[0]], [g for _, g in orders[1]], rtol=1e-14)


def test_the_clipping_example():
    np.testing.assert_allclose(step.p.grad, [0.75, 1.0, 1.0])  # 3 p^2 = (0.75, 12, 27) clipped to [-1, 1]


def test_hooks_run_in_registration_order_each_seeing_the_last_result():
    x = Variable(np.array(1.0))
    y = x * 3.0
    seen = []
    y.register_hook(lambda grad: seen.append(("first", grad.item())) or grad * 10.0)
    y.register_hook(lambda grad: seen.append(("second", grad.item())) or grad + 1.0)
    y.register_hook(lambda grad: seen.append(("third", grad.item())))
    y.backward()
    assert seen == [("first", 1.0), ("second", 10.0), ("third", 11.0)] and x.grad.item() == 33.0


def test_remove_unregisters_and_removing_twice_or_from_inside_a_hook_is_harmless():
    x = Variable(np.array(1.0))
    seen = []
    handles = []
    handles.append(x.register_hook(lambda grad: seen.append("once") or handles[0].remove()))
    second = x.register_hook(lambda grad: seen.append("always"))
    (x * 2.0).backward()
    (x * 2.0).backward()
    second.remove()
    second.remove()
    (x * 2.0).backward()
    assert seen == ["once", "always", "always"] and x.grad.item() == 6.0


def test_a_hook_on_the_root_gets_the_seed_and_can_scale_everything():
    x = Variable(np.array(2.0))
    y = x * x
    y.register_hook(lambda grad: grad * 3.0)
    y.backward(gradient=np.array(0.5))
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    yt = xt * xt
    yt.register_hook(lambda grad: grad * 3.0)
    yt.backward(torch.tensor(0.5, dtype=torch.float64))
    assert x.grad.item() == xt.grad.item() == 6.0


def test_a_hook_may_return_an_array():
    x = Variable(np.array([1.0, -4.0]))
    x.register_hook(lambda grad: np.clip(grad.data, -1.0, 1.0))
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [1.0, -1.0])


@given(floats(-2.0, 2.0))
def test_hooks_are_recorded_under_create_graph_like_torch(value):
    # the hook turns y's gradient 1 into x, so g = 3x^2 * x = 3x^3 and, with the hook recorded, g' = 9x^2
    x = Variable(np.array(value))
    y = x**3
    y.register_hook(lambda grad: grad * x)
    (g,) = autograd.grad(y, x, create_graph=True)
    (gg,) = autograd.grad(g, x)
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    yt = xt**3
    yt.register_hook(lambda grad: grad * xt)
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (ggt,) = torch.autograd.grad(gt, xt)
    np.testing.assert_allclose([g.item(), gg.item()], [gt.item(), ggt.item()], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose([g.item(), gg.item()], [3 * value**3, 9 * value**2], rtol=1e-13, atol=1e-15)


def test_retain_grad_holds_the_gradient_after_all_hooks_whatever_the_order_like_torch():
    results = []
    for m, make in [(tinypytorch, lambda: Variable(np.array(2.0))),
                    (torch, lambda: torch.tensor(2.0, dtype=torch.float64, requires_grad=True))]:
        x = make()
        h = x * x
        h.retain_grad()
        h.register_hook(lambda grad: grad * 100.0)
        (h * 3.0).backward()
        results.append((h.grad.item(), x.grad.item(), h.retains_grad, x.retains_grad))
    assert results[0] == results[1] == (300.0, 1200.0, True, False)


def test_retain_grad_on_a_leaf_does_nothing_and_on_a_constant_raises_like_torch():
    x = Variable(np.array(2.0))
    x.retain_grad()
    assert not x.retains_grad and x.is_leaf
    with pytest.raises(RuntimeError,
                       match="^retain_grad: can't retain_grad on a variable that has requires_grad=False$"):
        Variable(np.array(1.0), requires_grad=False).retain_grad()
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        torch.tensor(1.0).retain_grad()


def test_hooks_on_autograd_grads_inputs_change_the_result_like_torch():
    x = Variable(np.array(2.0))
    x.register_hook(lambda grad: grad * 10.0)
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    xt.register_hook(lambda grad: grad * 10.0)
    assert autograd.grad(x * x, x)[0].item() == torch.autograd.grad(xt * xt, xt)[0].item() == 40.0
    assert x.grad is None


def test_the_documented_difference_an_input_on_the_path_to_another_input():
    # z = a^2 with a = 2x and a hook on a multiplying by 10; differentiate z with respect to a and x
    x = Variable(np.array(2.0))
    a = x * 2.0
    a.register_hook(lambda grad: grad * 10.0)
    ga, gx = autograd.grad(a * a, [a, x])
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    at = xt * 2.0
    at.register_hook(lambda grad: grad * 10.0)
    gat, gxt = torch.autograd.grad(at * at, [at, xt])
    assert gx.item() == gxt.item() == 160.0  # the hooked 80, times da/dx = 2
    assert ga.item() == 80.0 and gat.item() == 8.0  # torch returns a's gradient before the hook


# ----- bad input -----------------------------------------------------------------------

def test_register_hook_on_a_variable_that_does_not_require_grad_raises_like_torch():
    with pytest.raises(RuntimeError, match="^register_hook: cannot register a hook on a variable that doesn't "
                                           "require gradient$"):
        Variable(np.array(1.0), requires_grad=False).register_hook(lambda grad: None)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        torch.tensor(1.0).register_hook(lambda grad: None)


@pytest.mark.parametrize("hook, words", [
    (lambda grad: grad.sum(), "has changed the size of value"),
    (lambda grad: grad.float(), r"has changed the type of value \(was torch.DoubleTensor got torch.FloatTensor\)"),
])
@pytest.mark.parametrize("leaf", [True, False])
def test_a_hook_that_changes_the_gradients_shape_or_dtype_raises_as_torchs(hook, words, leaf):
    for fw in (torch, tinypytorch):
        x = fw.tensor([1.0, 2.0], dtype=fw.float64, requires_grad=True)
        hooked = x if leaf else x * 2.0
        hooked.register_hook(hook)
        with pytest.raises(RuntimeError, match=f"^hook '<lambda>' {words}$"):
            (hooked * hooked).sum().backward()


def test_a_hook_returning_something_that_is_not_a_gradient_raises_type_error():
    x = Variable(np.array(1.0))
    x.register_hook(lambda grad: "twice")
    with pytest.raises(TypeError, match="^hook '<lambda>': unsupported operand type str$"):
        (x * 2.0).backward()


def test_register_hook_rejects_what_is_not_callable():
    with pytest.raises(TypeError, match="^register_hook: a hook must be callable, got int$"):
        Variable(np.array(1.0)).register_hook(3)


# ----- memory --------------------------------------------------------------------------

def test_a_handle_keeps_no_variable_alive_and_hooks_add_no_reference_cycle():
    gc.collect()
    gc.disable()
    try:
        x = Variable(np.array(1.0))
        h = tinypytorch.sin(x)
        handle = h.register_hook(lambda grad: grad * 2.0)
        (h * 3.0).backward()
        alive = weakref.ref(h)
        del h
        assert alive() is None and handle.hooks  # the handle holds the dict of hooks only
        handle.remove()
        assert not handle.hooks
    finally:
        gc.enable()
