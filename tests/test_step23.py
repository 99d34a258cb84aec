"""Step 23: the package passes step 22's checks; the heap-ordered backward loop equals step 16's sort.

The package itself is tested in test_package.py; here are the step's own examples.
"""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from reference import floats, torch_branching_grad
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import functions_in_graph

pytestmark = [pytest.mark.step23, pytest.mark.torch]
step = load_step(23)

positive = floats(0.5, 2.0)


@given(
    case=st.sampled_from(sorted(step.binary)),
    shapes=st.sampled_from([((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ())]),
    data=st.data(),
)
def test_every_binary_case_of_the_check_equals_torch_on_random_inputs(case, shapes, data):
    values = [data.draw(arrays(np.float64, shape, elements=positive)) for shape in shapes]
    compare_with_torch(step.binary[case], values)


@given(case=st.sampled_from(sorted(step.unary)), shape=st.sampled_from([(), (3,), (2, 3)]), data=st.data())
def test_every_unary_case_of_the_check_equals_torch_on_random_inputs(case, shape, data):
    compare_with_torch(step.unary[case], [data.draw(arrays(np.float64, shape, elements=positive))])


def compare_with_torch(expression, values):
    ours = [Variable(v.copy()) for v in values]
    out = expression(tinypytorch, *ours)
    out.sum().backward()
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    expected = expression(torch, *theirs)
    expected.backward(torch.ones_like(expected))
    # atol: where terms cancel (2 - x0 / x1 at x0 = 2 x1) a different order of operations leaves
    # rounding at the scale of the terms, which is O(1) for inputs in [0.5, 2]
    atol = 1e-14
    np.testing.assert_allclose(out.data, expected.detach().numpy(), rtol=1e-12, atol=atol)
    for variable, tensor in zip(ours, theirs):
        assert variable.grad.shape == tuple(tensor.grad.shape)
        assert isinstance(variable.grad, Variable) and type(variable.grad.data) is np.ndarray  # step 27
        np.testing.assert_allclose(variable.grad.data, tensor.grad.numpy(), rtol=1e-12, atol=atol)


@given(floats(0.0, 5.0))
def test_the_opening_example_has_the_derivative_worked_out_by_hand(value):
    x = Variable(np.array(value))
    y = x**3 - 2 * x / (x + 1)
    y.backward()
    # d/dx [x^3 - 2x/(x+1)] = 3x^2 - 2/(x+1)^2; atol: both differences cancel to 0 somewhere in
    # [0, 5], leaving rounding of the size of the terms (up to 125 ulp-scaled: 1e-13)
    scale = 1e-15 * (value**3 + 2)
    np.testing.assert_allclose(y.data, value**3 - 2 * value / (value + 1), rtol=1e-13, atol=scale)
    np.testing.assert_allclose(x.grad.data, 3 * value**2 - 2 / (value + 1) ** 2, rtol=1e-12, atol=scale)


@pytest.mark.parametrize("n", [1, 10, 300])
@pytest.mark.parametrize("loop", ["backward_with_heap", "backward_with_sort", "package"])
def test_wide_graph_gradient_equals_the_formula_with_either_loop_and_the_package(loop, n):
    x, s = step.wide_graph(n)
    (Variable.backward if loop == "package" else getattr(step, loop))(s)
    # s = sum_k (c_k x)^2 with c_k = k mod 5, so ds/dx = 2 x sum_k c_k^2: a sum of integers, exact
    expected = 2 * 0.5 * sum((k % 5) ** 2 for k in range(1, n + 1))
    assert isinstance(x.grad, Variable) and x.grad.item() == expected
    assert s.grad is None  # the seed was released, as by the package


@pytest.mark.parametrize("loop", ["backward_with_heap", "backward_with_sort"])
def test_the_loops_compute_gradients_without_recording_a_graph(loop):
    x, s = step.wide_graph(10)
    getattr(step, loop)(s)
    assert x.grad.creator is None and tinypytorch.Config.enable_backprop is True


def order_of_backward(y, leaves, run):
    """The functions in the order `run(y)` calls their backward, recorded by wrapping each one."""
    order = []
    for f in functions_in_graph(y):
        original = type(f).backward.__get__(f)
        f.backward = lambda *gys, f=f, original=original: (order.append(f), original(*gys))[1]
    for leaf in leaves:
        leaf.cleargrad()
    y.cleargrad()
    run(y)
    return order


@given(st.lists(st.tuples(st.sampled_from("+-*"), st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=25))
def test_heap_processes_functions_in_exactly_step_16s_order(operations):
    leaves = [Variable(np.array(v)) for v in (0.5, 1.5, 2.0)]
    nodes = list(leaves)
    for op, i, j in operations:  # operands picked among all earlier nodes: many ties in generation
        a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
        nodes.append(a + b if op == "+" else a - b if op == "-" else a * b)
    y = nodes[-1]
    heap_order = order_of_backward(y, leaves, step.backward_with_heap)
    heap_grads = [leaf.grad for leaf in leaves]
    sort_order = order_of_backward(y, leaves, step.backward_with_sort)
    assert heap_order == sort_order
    assert len(heap_order) == len(functions_in_graph(y))  # each function ran exactly once
    for heap_grad, leaf in zip(heap_grads, leaves):
        # products of products may overflow to inf, and inf - inf is nan: in both loops alike
        assert (heap_grad is None and leaf.grad is None) or np.array_equal(heap_grad.data, leaf.grad.data,
                                                                          equal_nan=True)


def test_the_step_16_and_step_18_examples_equal_torch():
    x = Variable(np.array(2.0))
    a = tinypytorch.square(x)
    (tinypytorch.square(a) + tinypytorch.square(a)).backward()
    assert x.grad.item() == torch_branching_grad(2.0) == 64.0  # y = 2 x^4, dy/dx = 8 x^3 = 64 at x = 2

    x0, x1 = Variable(np.array(1.0)), Variable(np.array(1.0))
    t = x0 + x1
    y = x0 + t
    y.backward()
    assert y.grad is None and t.grad is None
    assert (x0.grad.item(), x1.grad.item()) == (2.0, 1.0)


def test_the_error_cells_show_the_messages_the_step_promises(monkeypatch):
    with pytest.raises(ValueError, match="unknown option 'enable_backprob'"):
        step.typo()
    with pytest.raises(TypeError, match="got float"):
        step.attempts["Variable(1.0)"]()
    # the lambdas read the module's a and b, which later cells rebind: restore the cell's operands
    monkeypatch.setattr(step, "a", Variable(np.array([1.0, 2.0])))
    monkeypatch.setattr(step, "b", Variable(np.array([1.0, 2.0, 3.0])))
    with pytest.raises(ValueError, match=r"^mul: shapes \(2,\) and \(3,\) do not broadcast$"):
        step.attempts["a * b"]()
    with pytest.raises(TypeError, match=r"^add: unsupported operand type str$"):
        step.attempts['a + "abc"']()
    with pytest.raises(TypeError, match=r"^pow: the exponent must be a number or a tensor, got str$"):
        step.attempts['a ** "2"']()


# (Not 1.5 / a: the package computes a number over a tensor as PyTorch does, a.reciprocal() * 1.5, which saves no
# a; step 22 divides. They agree to a few ulps, not to the last bit.)
OPERATIONS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b,
    "2 -": lambda a, b: 2.0 - a, "** 2": lambda a, b: a**2, "** -1": lambda a, b: a**-1,
    "neg": lambda a, b: -a,
}


@given(
    values=st.lists(positive, min_size=3, max_size=3),
    operations=st.lists(st.tuples(st.sampled_from(sorted(OPERATIONS)), st.integers(0, 99), st.integers(0, 99)),
                        min_size=1, max_size=20),
)
def test_the_heap_loop_gives_step_22s_gradients_to_the_last_bit(values, operations):
    """Same formulas, same order of accumulation (heap = step 16's sort): bitwise the same leaves' grads.

    This is the step's claim about the package as it made it; the package's own backward loop
    is replaced in step 33 by one that may add contributions in another order.
    """
    snapshot = load_step(22)

    def run(variable_class, backward):
        leaves = [variable_class(np.array(v)) for v in values]
        nodes = list(leaves)
        with np.errstate(all="ignore"):  # x - x then ** -1: inf in both, compared as such
            for name, i, j in operations:
                nodes.append(OPERATIONS[name](nodes[i % len(nodes)], nodes[j % len(nodes)]))
            backward(nodes[-1])
        return [leaf.grad for leaf in leaves]

    ours_all = run(Variable, step.backward_with_heap)
    theirs_all = run(snapshot.Variable, snapshot.Variable.backward)
    for ours, theirs in zip(ours_all, theirs_all):
        assert (ours is None and theirs is None) or np.array_equal(ours.data, theirs, equal_nan=True)
