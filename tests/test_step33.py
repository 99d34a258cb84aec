"""Step 33: the dependency-counting engine, against torch; with what the page leaves to tests: requires_grad,
leaves and detach, and autograd.grad (the page's exercise 3) in full.

Engine-level tests live here too: random graphs (gradients and the order functions run in), a 100,000-deep
chain, a 2,000-wide frontier, the n-branch sum sum_k sin(c_k x) whose gradient sum_k c_k cos(c_k x) is checked
against the formula (the backward time stays linear in the graph's size: bench/ measures it), and graphs freed
without the cycle collector.
"""
import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import tinypytorch
from memory import assert_graph_freed_by_reference_counting
from reference import BINARY_EXPRESSIONS, UNARY_EXPRESSIONS, evaluate, expressions, floats, operation_lists
from steploader import load_step
from tinypytorch import Function, Variable, autograd, no_grad
from tinypytorch.autograd import engine
from tinypytorch.autograd.gradients import current_pass

pytestmark = [pytest.mark.step33, pytest.mark.torch]
step = load_step(33)


def branches(n):
    """x and y = sum_k sin(c_k x), added one branch at a time onto x * 0 (3n + 1 functions), and the constants c_k,
    cycling through 0, 0.25, ..., 1.5."""
    x = Variable(np.array(0.5), name="x")
    c = np.arange(1, n + 1) % 7 * 0.25
    y = x * 0.0
    for k in range(n):
        y = y + tinypytorch.sin(x * c[k])
    return x, y, c


# ----- random graphs built the same way in both frameworks -----------------------------

# operations whose PyTorch node is <Name>Backward0, so the run order can be compared by name
UNARY = expressions(UNARY_EXPRESSIONS, "sin", "exp", "tanh", "neg", "pow2", "add 1.5")
BINARY = expressions(BINARY_EXPRESSIONS, "add", "sub", "mul", "div")


@st.composite
def graphs(draw):
    """Leaf values, which leaves require grad, and operations picking operands among all earlier nodes."""
    count = draw(st.integers(1, 4))
    values = draw(st.lists(floats(-1.5, 1.5), min_size=count, max_size=count))
    requires = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    requires[draw(st.integers(0, count - 1))] = True  # at least one leaf requires grad
    return values, requires, draw(operation_lists(UNARY, BINARY, max_size=14))


def both(graph):
    values, requires, operations = graph
    ours = evaluate(tinypytorch, [Variable(np.array(v), requires_grad=r) for v, r in zip(values, requires)],
                    operations, UNARY, BINARY)
    theirs = evaluate(torch, [torch.tensor(v, dtype=torch.float64, requires_grad=r) for v, r in zip(values, requires)],
                      operations, UNARY, BINARY)
    return ours, theirs


def close(ours, theirs):
    scale = max([1.0] + [abs(t) for t in theirs if t is not None])
    for a, b in zip(ours, theirs):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14 * scale)


@given(graphs())
def test_random_graphs_requires_grad_is_leaf_and_grad_fn_equal_torch(graph):
    ours, theirs = both(graph)
    for v, t in zip(ours, theirs):
        assert (v.requires_grad, v.is_leaf, v.grad_fn is None) == (t.requires_grad, t.is_leaf, t.grad_fn is None)
        assert v.grad_fn is v.creator


@given(graphs())
def test_random_graphs_backward_grads_and_run_order_equal_torch(graph):
    ours, theirs = both(graph)
    assume(ours[-1].requires_grad and all(bool(torch.isfinite(t)) for t in theirs))
    calls = step.record_backward_calls(ours[-1])
    _, torch_calls = step.torch_run_order(theirs[-1])
    ours[-1].backward()
    theirs[-1].backward()
    assert calls == torch_calls()  # same functions, each once, in the same order
    assert len(calls) == len(step.functions_in_graph(ours[-1]))
    count = len(graph[0])
    close([None if v.grad is None else v.grad.item() for v in ours[:count]],
          [None if t.grad is None else t.grad.item() for t in theirs[:count]])
    assert all(v.grad is None for v in ours[count:])  # intermediate gradients are not kept


@given(graphs(), st.data())
def test_random_graphs_autograd_grad_equals_torch_and_runs_the_same_functions(graph, data):
    ours, theirs = both(graph)
    assume(ours[-1].requires_grad and all(bool(torch.isfinite(t)) for t in theirs))
    candidates = [i for i, v in enumerate(ours[:-1]) if v.requires_grad]
    assume(candidates)
    picked = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3))
    calls = step.record_backward_calls(ours[-1])
    _, torch_calls = step.torch_run_order(theirs[-1])
    result = autograd.grad(ours[-1], [ours[i] for i in picked], allow_unused=True)
    expected = torch.autograd.grad(theirs[-1], [theirs[i] for i in picked], allow_unused=True)
    assert calls == torch_calls()  # only the functions that lead to the inputs run, in torch's order
    close([None if g is None else g.item() for g in result], [None if g is None else g.item() for g in expected])
    assert all(v.grad is None for v in ours)  # nothing is stored


@given(graphs())
def test_random_graphs_retain_grad_keeps_every_intermediate_gradient_like_torch_retain_grad(graph):
    ours, theirs = both(graph)
    assume(ours[-1].requires_grad and all(bool(torch.isfinite(t)) for t in theirs))
    for t in theirs:
        if t.requires_grad:
            t.retain_grad()
    for _ in range(2):  # twice: retained gradients add up in both
        ours[-1].backward(retain_graph=True, retain_grad=True)
        theirs[-1].backward(retain_graph=True)
    close([None if v.grad is None else v.grad.item() for v in ours],
          [None if t.grad is None else t.grad.item() for t in theirs])


# ----- requires_grad, leaves, detach ---------------------------------------------------

def test_the_steps_table_equals_torch():
    x = Variable(np.array(3.0))
    c = Variable(np.array(2.0), requires_grad=False)
    with no_grad():
        w = x * 5.0
    flags = [(v.requires_grad, v.is_leaf, v.grad_fn is None) for v in (x, c, x * c, c * 4.0, w)]
    assert flags == [(True, True, True), (False, True, True), (True, False, False), (False, True, True),
                     (False, True, True)]
    xt = torch.tensor(3.0, requires_grad=True)
    ct = torch.tensor(2.0)
    with torch.no_grad():
        wt = xt * 5.0
    assert flags == [(t.requires_grad, t.is_leaf, t.grad_fn is None) for t in (xt, ct, xt * ct, ct * 4.0, wt)]


def test_a_user_variable_requires_grad_by_default_unlike_torch_tensor():
    assert Variable(np.array(1.0)).requires_grad is True
    assert torch.tensor(1.0).requires_grad is False


def test_numbers_and_arrays_in_expressions_are_constants_and_get_no_gradient():
    assert tinypytorch.as_variable(2.0).requires_grad is False
    assert tinypytorch.as_variable(np.ones(2)).requires_grad is False
    x = Variable(np.array(3.0))
    c = np.array(1.0)
    y = x * 2.0 + c
    # step 35: no edge goes to a constant, and its function keeps only what it looked like (for drawings)
    edges = [edge for f in step.functions_in_graph(y) for edge in f.edges]
    assert edges.count((None, 0)) == 2 and [f.constants[1].value for f in step.functions_in_graph(y)] == [1.0, 2.0]
    y.backward()
    assert x.grad.item() == 2.0


def test_an_operation_on_constants_only_records_no_graph():
    c = Variable(np.array(2.0), requires_grad=False)
    f = tinypytorch.functions.Exp()
    y = f(c)
    assert y.creator is None and not y.requires_grad and not hasattr(f, "inputs")


def test_sequence_numbers_follow_creation_order():
    x = Variable(np.array(1.0))
    a = x * 2.0
    b = tinypytorch.sin(x)
    c = a + b
    assert a.creator.sequence_nr < b.creator.sequence_nr < c.creator.sequence_nr


@given(floats(-3.0, 3.0))
def test_detach_cuts_the_gradient_path_like_torch(value):
    x = Variable(np.array(value))
    y = x * x
    (y.detach() * x + y).backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    yt = xt * xt
    (yt.detach() * xt + yt).backward()
    np.testing.assert_allclose(x.grad, xt.grad.item(), rtol=1e-14)  # x^2 + 2x
    d = y.detach()
    assert d.data is y.data and d.is_leaf and not d.requires_grad


def test_requires_grad_false_on_a_leaf_after_use_stops_its_gradient_like_torch():
    x, w = Variable(np.array(2.0)), Variable(np.array(3.0))
    y = x * w
    w.requires_grad_(False)
    y.backward()
    xt, wt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (2.0, 3.0))
    yt = xt * wt
    wt.requires_grad_(False)
    yt.backward()
    assert x.grad.item() == xt.grad.item() == 3.0 and w.grad is None and wt.grad is None


# ----- the engine ------------------------------------------------------------------------

def test_dependency_counts_of_step_16s_graph_are_worked_out_by_hand():
    x = Variable(np.array(2.0))
    a = tinypytorch.square(x)
    b, c = tinypytorch.square(a), tinypytorch.square(a)
    y = b + c
    counts = engine.count_dependencies([y])
    # y's Add gets the seed; each square of a gets one gradient from the Add; the Square making a
    # gets one from each of them; x gets one, from that Square
    assert counts == {y.creator: 1, b.creator: 1, c.creator: 1, a.creator: 2, x: 1}


def test_a_variable_used_twice_by_one_function_counts_twice_and_constants_not_at_all():
    x = Variable(np.array(2.0))
    y = x * x * 3.0
    counts = engine.count_dependencies([y])
    assert counts[x] == 2 and len(counts) == 3  # Mul by 3, Mul x*x, the leaf x


def test_x_times_x_then_backward_twice_gives_torchs_64_not_step_14s_96():
    x = Variable(np.array(2.0))
    a = tinypytorch.square(x)
    y = tinypytorch.square(a)
    y.backward(retain_graph=True, retain_grad=True)
    y.backward(retain_grad=True)
    assert (x.grad.item(), a.grad.item()) == (64.0, 16.0)


def test_a_100000_deep_chain_backpropagates_and_is_freed_without_the_cycle_collector():
    x = Variable(np.array(1.0))
    y = x
    for _ in range(100_000):
        y = y + 1.0
    y.backward()  # a recursive count or run would raise RecursionError
    assert x.grad.item() == 1.0
    (gx,) = autograd.grad(y, x)  # Add saves nothing: a second pass needs no retain_graph (as in torch)
    assert gx.item() == 1.0
    first = y.creator
    while first.edges[0][0] is not x:
        first = first.edges[0][0]
    alive = weakref.ref(first)
    del first
    gc.collect()
    gc.disable()
    try:
        del y
        assert alive() is None
    finally:
        gc.enable()


def test_a_2000_wide_frontier_runs_each_function_once_with_torchs_gradient(monkeypatch):
    # 2,048 branches summed by a balanced tree of additions built level by level: after the
    # top addition, the ready queue fills with a whole level, 1,024 functions at once
    pushes, sizes = [], []
    original = engine.heapq.heappush

    def counting_push(heap, item):
        original(heap, item)
        pushes.append(item[1])
        sizes.append(len(heap))

    monkeypatch.setattr(engine.heapq, "heappush", counting_push)
    x = Variable(np.array(0.3))
    level = [tinypytorch.sin(x * float(k % 5 + 1)) for k in range(2048)]
    while len(level) > 1:
        level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    y = level[0]
    calls = step.record_backward_calls(y)
    y.backward()
    functions = step.functions_in_graph(y)
    assert len(calls) == len(functions) == len(pushes) == len(set(pushes)) == 3 * 2048 - 1
    assert max(sizes) >= 1024
    xt = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    torch.sin(xt * torch.tensor([float(k % 5 + 1) for k in range(2048)], dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(x.grad.item(), xt.grad.item(), rtol=1e-12)


def test_the_ready_queue_of_the_steps_branch_graph_never_holds_more_than_two(monkeypatch):
    sizes = []
    original = engine.heapq.heappush

    def recording_push(heap, item):
        original(heap, item)
        sizes.append(len(heap))

    monkeypatch.setattr(engine.heapq, "heappush", recording_push)
    x, y, _ = branches(2000)
    y.backward()
    assert max(sizes) == 2 and len(sizes) == 3 * 2000 + 1


@pytest.mark.parametrize("n", [1, 7, 2000])
def test_the_n_branch_gradient_is_the_sum_of_c_k_cos_c_k_x_and_torchs(n):
    # d/dx sum_k sin(c_k x) = sum_k c_k cos(c_k x): every branch's gradient reaches x exactly once
    x, y, c = branches(n)
    calls = step.record_backward_calls(y)
    y.backward()
    assert len(calls) == len(step.functions_in_graph(y)) == 3 * n + 1
    np.testing.assert_allclose(x.grad.item(), np.sum(c * np.cos(c * 0.5)), rtol=1e-12)
    xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    torch.sum(torch.sin(xt * torch.tensor(c))).backward()
    np.testing.assert_allclose(x.grad.item(), xt.grad.item(), rtol=1e-12)


def test_graphs_are_freed_without_the_cycle_collector_after_backward_and_autograd_grad():
    assert_graph_freed_by_reference_counting(lambda y, x: y.backward())
    assert_graph_freed_by_reference_counting(lambda y, x: autograd.grad(y, x))


def test_backward_of_a_function_without_backward_raises_not_implemented():
    class NoBackward(Function):
        def forward(self, x):
            return x * 2

    y = NoBackward()(Variable(np.array(1.0)))
    with pytest.raises(NotImplementedError, match="^NoBackward.backward is not implemented$"):
        y.backward()


# ----- seeds and autograd.grad -------------------------------------------------------------

@given(st.lists(floats(-2.0, 2.0), min_size=3, max_size=3), st.lists(floats(-2.0, 2.0), min_size=3, max_size=3))
def test_backward_with_a_gradient_equals_torch_and_without_one_seeds_ones(values, seed):
    x = Variable(np.array(values))
    y = tinypytorch.sin(x) * x
    y.backward(gradient=np.array(seed))
    xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    yt = torch.sin(xt) * xt
    yt.backward(torch.tensor(seed, dtype=torch.float64), retain_graph=True)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-13, atol=1e-15)
    y = tinypytorch.sin(x) * x  # the first pass freed what Sin and Mul saved: a new graph
    x.cleargrad()
    xt.grad = None
    y.sum().backward()  # DeZero's convenience; torch needs the ones spelt out
    yt.backward(torch.ones(3, dtype=torch.float64))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-13, atol=1e-15)


def test_autograd_grad_of_several_outputs_with_grad_outputs_equals_torch():
    x, w = Variable(np.array([0.5, -1.0])), Variable(np.array(2.0))
    y1, y2 = tinypytorch.tanh(x * w), (x * x).sum()
    g = autograd.grad([y1, y2], [x, w], grad_outputs=[np.array([1.0, 3.0]), None])
    xt, wt = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True), \
        torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y1t, y2t = torch.tanh(xt * wt), (xt * xt).sum()
    gt = torch.autograd.grad([y1t, y2t], [xt, wt], grad_outputs=[torch.tensor([1.0, 3.0], dtype=torch.float64),
                                                                  torch.ones((), dtype=torch.float64)])
    for ours, theirs in zip(g, gt):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-13)
    assert x.grad is None and w.grad is None


def test_autograd_grad_when_one_output_depends_on_another():
    x = Variable(np.array(1.5))
    y = x * x
    z = tinypytorch.sin(y)
    (g,) = autograd.grad([y, z], x)  # d(y + z)/dx = 2x + cos(x^2) 2x
    np.testing.assert_allclose(g.item(), 2 * 1.5 + np.cos(1.5**2) * 2 * 1.5, rtol=1e-14)


def test_autograd_grad_with_respect_to_the_output_itself_is_the_seed():
    x = Variable(np.array(2.0))
    y = x * 3.0
    assert autograd.grad(y, y)[0].item() == 1.0
    assert autograd.grad(y, [y, x])[1].item() == 3.0


@given(floats(-2.0, 2.0))
def test_autograd_grad_create_graph_gives_second_derivatives_like_torch(value):
    x = Variable(np.array(value))
    (g,) = autograd.grad(tinypytorch.tanh(x) ** 3, x, create_graph=True)
    (gg,) = autograd.grad(g, x)
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    (gt,) = torch.autograd.grad(torch.tanh(xt) ** 3, xt, create_graph=True)
    (ggt,) = torch.autograd.grad(gt, xt)
    np.testing.assert_allclose([g.item(), gg.item()], [gt.item(), ggt.item()], rtol=1e-12, atol=1e-14)
    assert g.requires_grad and not gg.requires_grad and x.grad is None


def test_autograd_grad_runs_only_the_functions_leading_to_the_inputs():
    # the step's example: a loss with a 600-function term in w, differentiated with respect to x
    x, w = Variable(np.array(0.5)), Variable(np.array(1.5))
    big = w
    for _ in range(300):
        big = tinypytorch.sin(big) + w
    loss = tinypytorch.exp(x) * 3.0 + big
    calls = step.record_backward_calls(loss)
    (gx,) = autograd.grad(loss, x)
    assert calls == ["Add", "Mul", "Exp"] and len(step.functions_in_graph(loss)) == 603
    np.testing.assert_allclose(gx.item(), 3 * np.exp(0.5), rtol=1e-15)
    assert x.grad is None and w.grad is None


def test_newton_with_autograd_grad_follows_the_update_rule_and_stores_nothing():
    x = Variable(np.array(2.0))
    iterates = [2.0] + step.newton(x, 7)  # exercise 3's solution
    expected = [2.0]
    for _ in range(7):
        v = expected[-1]
        expected.append(v - (4 * v**3 - 4 * v) / (12 * v**2 - 4))
    np.testing.assert_allclose(iterates, expected, rtol=1e-15)
    assert x.grad is None and iterates[-1] == 1.0


# ----- bad input ----------------------------------------------------------------------------

def test_backward_on_a_variable_that_does_not_require_grad_raises_like_torch():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        Variable(np.array(1.0), requires_grad=False).backward()
    x = Variable(np.array(1.0))
    with no_grad():
        y = x * 3.0
    with pytest.raises(RuntimeError, match="^backward: element 0 of variables does not require grad"):
        y.backward()
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        torch.tensor(1.0).backward()


def test_autograd_grad_of_an_unused_input_raises_unless_allow_unused():
    x, u = Variable(np.array(1.0)), Variable(np.array(2.0))
    y = x * 2.0
    with pytest.raises(RuntimeError, match="index 1 appears to not have been used in the graph. Set allow_unused"):
        autograd.grad(y, [x, u])
    assert autograd.grad(y, [x, u], allow_unused=True)[1] is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(torch.tensor(1.0, requires_grad=True) * 2.0, [torch.tensor(2.0, requires_grad=True)])


def test_autograd_grad_rejects_inputs_and_outputs_that_do_not_require_grad():
    x, c = Variable(np.array(1.0)), Variable(np.array(2.0), requires_grad=False)
    with pytest.raises(RuntimeError, match="^grad: the differentiated Variable at index 1 does not require grad$"):
        autograd.grad(x * c, [x, c])
    with pytest.raises(RuntimeError, match="^grad: element 0 of outputs does not require grad"):
        autograd.grad(c * 2.0, [x])


class _SendsEarly(Function):
    """y = a * b; the gradient of b is sent from inside backward (current_pass().send), the way a reversible
    stack sends each block's gradients; a's is returned as usual (both, with no pass running)."""

    def forward(self, a, b):
        self.save_for_backward(a, b)
        return a * b

    def backward(self, gy):
        a, b = self.saved_tensors
        running = current_pass()
        if running is None:
            return gy * b, gy * a
        running.send(self, 1, gy * a)
        return gy * b, None


@pytest.mark.parametrize("use_grad", [False, True])
def test_a_gradient_sent_early_arrives_once_through_hooks_and_autograd_grad(use_grad):
    a0, b0 = np.array([1.5, -2.0]), np.array([0.5, 3.0])
    a, b = Variable(a0), Variable(b0)
    seen = []
    b.register_hook(lambda g: seen.append(g.data.copy()) or g)
    y = _SendsEarly()(a, b)
    z = (y * b).sum()  # b is used twice: the early gradient is one of two that must add up
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a0, b0))
    ((ta * tb) * tb).sum().backward()
    if use_grad:
        ga, gb = autograd.grad(z, [a, b])
    else:
        z.backward()
        ga, gb = a.grad, b.grad
    np.testing.assert_allclose(ga.data, ta.grad.numpy(), rtol=1e-15)
    np.testing.assert_allclose(gb.data, tb.grad.numpy(), rtol=1e-15)
    assert len(seen) == 1  # the hook ran once, on the whole gradient
    np.testing.assert_allclose(seen[0], tb.grad.numpy(), rtol=1e-15)


def test_outside_a_backward_pass_there_is_no_pass_to_send_to():
    assert current_pass() is None
    a, b = Variable(np.array(2.0)), Variable(np.array(3.0))
    f = _SendsEarly()
    f(a, b)
    assert [g.data for g in f.backward(Variable(np.array(1.0)))] == [3.0, 2.0]


def test_autograd_grad_takes_a_generator_of_inputs_as_torch_does():
    """Layer.params() is a generator; torch.autograd.grad accepts one (module.parameters()) too."""
    a, b = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    x, w = Variable(a), Variable(b)
    gx, gw = autograd.grad(tinypytorch.sum(x * w * w), (v for v in [x, w]))
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (a, b))
    expected = torch.autograd.grad((tx * tw * tw).sum(), (t for t in [tx, tw]))
    np.testing.assert_array_equal(gx.data, expected[0].numpy())
    np.testing.assert_array_equal(gw.data, expected[1].numpy())


@pytest.mark.parametrize("call, error, message", [
    (lambda x, y: autograd.grad(y, 3.0), TypeError,
     "grad: inputs must be a Variable or a sequence of Variables, got float"),
    (lambda x, y: autograd.grad([y, 1], x), TypeError, "grad: outputs must be a Variable or a sequence"),
    (lambda x, y: autograd.grad(y, []), ValueError, "grad: inputs is empty"),
    (lambda x, y: autograd.grad(y, x, grad_outputs=[None, None]), ValueError, "grad: 2 grad_outputs for 1 outputs"),
    (lambda x, y: autograd.grad(y, x, grad_outputs=np.ones(3)), ValueError,
     r"grad: gradient of shape \(3,\) for a variable of shape \(2,\)"),
    (lambda x, y: y.backward(gradient=np.ones((2, 1))), ValueError,
     r"^backward: gradient of shape \(2, 1\) for a variable of shape \(2,\)$"),
    (lambda x, y: y.backward(gradient="ones"), TypeError, "^backward: unsupported operand type str$"),
])
def test_bad_arguments_to_grad_and_backward_name_the_problem(call, error, message):
    x = Variable(np.array([1.0, 2.0]))
    with pytest.raises(error, match=message):
        call(x, x * 2.0)


def test_requires_grad_accepts_only_bools_and_only_leaves_may_drop_it():
    x = Variable(np.array(1.0))
    with pytest.raises(TypeError, match="^requires_grad must be a bool, got int$"):
        x.requires_grad = 1
    y = x * 2.0
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad_(False)
    assert y.requires_grad_(True) is y  # asking a non-leaf for what it has is fine, as in torch
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        (torch.tensor(1.0, requires_grad=True) * 2.0).requires_grad_(False)


def test_a_backward_method_that_returns_the_wrong_number_or_shape_of_gradients_is_named():
    class TwoForOne(Function):
        def forward(self, x):
            return x * 2

        def backward(self, gy):
            return gy, gy

    class WrongShape(Function):
        def forward(self, x):
            return x.sum()

        def backward(self, gy):
            return gy  # forgot to broadcast back to x's shape

    with pytest.raises(RuntimeError, match=r"^TwoForOne.backward returned 2 gradient\(s\) for 1 input\(s\)$"):
        TwoForOne()(Variable(np.array(1.0))).backward()
    with pytest.raises(ValueError,
                       match=r"^WrongShape.backward returned a gradient of shape \(\) for input 0 of shape \(3,\)$"):
        WrongShape()(Variable(np.ones(3))).backward()
