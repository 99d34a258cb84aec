import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from steploader import load_step

pytestmark = [pytest.mark.step16, pytest.mark.torch]
step = load_step(16)


def step15_graph(value):
    x = step.Variable(np.array(value))
    a = step.square(x)
    b, c = step.square(a), step.square(a)
    y = step.add(b, c)
    return x, a, b, c, y


def test_x_grad_is_64_at_2_as_in_torch():
    x, *_, y = step15_graph(2.0)
    y.backward()
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    at = xt**2
    (at**2 + at**2).backward()
    assert xt.grad.item() == 64.0
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@given(st.floats(-5, 5))
def test_the_branching_graph_gives_8x3_like_torch(value):
    x, *_, y = step15_graph(value)
    y.backward()
    xt = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    at = xt**2
    (at**2 + at**2).backward()
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, 8 * value**3, rtol=1e-12, atol=1e-300)  # atol: x^3 may be subnormal


def test_generations_follow_the_forward_pass():
    x, a, b, c, y = step15_graph(2.0)
    assert [v.generation for v in (x, a, b, c, y)] == [0, 1, 2, 2, 3]
    assert [v.creator.generation for v in (a, b, c, y)] == [0, 1, 1, 2]


def test_a_function_takes_the_highest_generation_of_its_inputs():
    x = step.Variable(np.array(1.0))
    deep = step.exp(step.exp(step.exp(x)))  # generation 3
    z = step.add(x, deep)
    assert z.creator.generation == 3 and z.generation == 4


def test_each_function_runs_once_after_all_its_consumers(capsys):
    x = step.Variable(np.array(2.0))
    a = step.TracedSquare("A")(x)
    b = step.TracedSquare("B")(a)
    c = step.TracedSquare("C")(a)
    step.TracedAdd("Add")(b, c).backward()
    calls = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert calls == ["Add", "C", "B", "A"]
    assert x.grad == 64.0


def test_without_the_seen_set_a_would_run_twice_with_the_full_gradient():
    # The claim in the text: generation order but no de-duplication gives 2 * 64 = 128 at x = 2.
    x, a = 2.0, 4.0
    grads, pending = {"y": 1.0}, [("Add", 2)]
    functions = {"Add": ("y", [("b", 1.0, "B", 1), ("c", 1.0, "C", 1)]),
                 "B": ("b", [("a", 2 * a, "A", 0)]), "C": ("c", [("a", 2 * a, "A", 0)]),
                 "A": ("a", [("x", 2 * x, None, None)])}
    while pending:
        pending.sort(key=lambda item: item[1])
        name, _ = pending.pop()
        output, inputs = functions[name]
        for variable, local, creator, generation in inputs:
            grads[variable] = grads.get(variable, 0.0) + grads[output] * local
            if creator is not None:
                pending.append((creator, generation))
    assert grads["x"] == 128.0


def test_backward_on_a_leaf_sets_the_seed_like_torch():
    x = step.Variable(np.array([1.0, 2.0]))
    x.backward()
    xt = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    xt.backward(torch.ones_like(xt))
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


@st.composite
def programs(draw):
    """A random DAG over 1-3 inputs: each node applies add/square/exp to earlier nodes, which may be reused."""
    n_inputs = draw(st.integers(1, 3))
    shape = draw(st.sampled_from([(), (3,), (2, 2)]))
    inputs = [np.array(draw(st.lists(st.floats(-1, 1), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))).reshape(shape)
              for _ in range(n_inputs)]
    ops, n_nodes = [], n_inputs
    for _ in range(draw(st.integers(1, 10))):
        ops.append((draw(st.sampled_from(["add", "square", "exp"])), draw(st.integers(0, n_nodes - 1)), draw(st.integers(0, n_nodes - 1))))
        n_nodes += 1
    return inputs, ops


def run(inputs, ops, add, square, exp):
    nodes = list(inputs)
    for kind, i, j in ops:
        nodes.append(add(nodes[i], nodes[j]) if kind == "add" else (square if kind == "square" else exp)(nodes[i]))
    return nodes[-1]


@given(programs())
def test_random_graphs_with_shared_nodes_match_torch(program):
    values, ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # exp of exp may overflow: such cases are skipped
        y = run(xs, ops, step.add, step.square, step.exp)
    assume(np.all(np.abs(y.data) < 1e100))
    with np.errstate(over="ignore", invalid="ignore"):
        y.backward()
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    yt = run(ts, ops, torch.add, torch.square, torch.exp)
    yt.backward(torch.ones_like(yt))
    for x, t in zip(xs, ts):
        if t.grad is None:  # an input the output does not depend on
            assert x.grad is None
        else:
            np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-10, atol=1e-12)
