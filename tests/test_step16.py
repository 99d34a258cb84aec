import numpy as np
import pytest
import torch
from hypothesis import given

from reference import (
    ADD_SQUARE_EXP, add_square_exp_grads, assert_grads_equal_torch, backward_through_traced_branches, floats,
    programs, torch_branching_grad,
)
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
    expected = torch_branching_grad(2.0)
    assert expected == 64.0
    np.testing.assert_array_equal(x.grad, expected)


@given(floats(-5, 5))
def test_the_branching_graph_gives_8x3_like_torch(value):
    x, *_, y = step15_graph(value)
    y.backward()
    np.testing.assert_allclose(x.grad, torch_branching_grad(value), rtol=1e-12)
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
    x = backward_through_traced_branches(step)
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


@given(programs(ADD_SQUARE_EXP, -1, 1))
def test_random_graphs_with_shared_nodes_match_torch(program):
    xs, ts = add_square_exp_grads(step, program)
    assert_grads_equal_torch(xs, ts, rtol=1e-10, atol=1e-12)
