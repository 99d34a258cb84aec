import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis.extra.numpy import array_shapes, arrays

from reference import assert_grads_equal_torch, floats, programs, same_shape_arrays, torch_grad_after_reusing_the_output
from steploader import load_step

pytestmark = [pytest.mark.step20, pytest.mark.torch]
step = load_step(20)

moderate = floats(-10, 10)
triples = same_shape_arrays(3, moderate)


@given(triples)
def test_grads_of_a_times_b_plus_c_equal_torch(values):
    a, b, c = (step.Variable(v) for v in values)
    y = a * b + c
    y.backward()
    at, bt, ct = (torch.tensor(v, requires_grad=True) for v in values)
    yt = at * bt + ct
    yt.backward(torch.ones_like(yt))
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    for ours, theirs in [(a, at), (b, bt), (c, ct)]:
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)


def test_the_source_materials_example():
    a, b, c = step.Variable(np.array(3.0)), step.Variable(np.array(2.0)), step.Variable(np.array(1.0))
    y = a * b + c
    y.backward()
    assert y.data == 7.0 and a.grad == 2.0 and b.grad == 3.0 and c.grad == 1.0


def test_operators_build_the_same_graph_as_the_functions():
    a, b, c = (step.Variable(np.array(v)) for v in (3.0, 2.0, 1.0))
    y = a * b + c
    assert isinstance(y.creator, step.Add) and y.creator.inputs[1] is c
    product = y.creator.inputs[0]
    assert isinstance(product.creator, step.Mul) and product.creator.inputs == (a, b)


def test_mul_backward_returns_the_other_factor_times_gy():
    f = step.Mul()
    f(step.Variable(np.array(3.0)), step.Variable(np.array(5.0)))
    g0, g1 = f.backward(np.array(2.0))
    assert g0 == 10.0 and g1 == 6.0  # gy * x1, gy * x0


@given(arrays(np.float64, array_shapes(min_dims=0, max_dims=3, max_side=4), elements=moderate))
def test_x_times_x_accumulates_to_2x_like_torch(value):
    x = step.Variable(value)
    (x * x).backward()
    xt = torch.tensor(value, requires_grad=True)
    (xt * xt).backward(torch.ones_like(xt))
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())


def test_numbers_are_not_operands_yet():
    x = step.Variable(np.array(3.0))
    with pytest.raises(AttributeError, match="has no attribute 'data'"):
        x * 2.0
    with pytest.raises(TypeError, match="unsupported operand"):
        2.0 * x


def run(inputs, ops, square, exp):
    nodes = list(inputs)
    for kind, i, j in ops:
        a, b = nodes[i], nodes[j]
        nodes.append({"+": lambda: a + b, "*": lambda: a * b, "square": lambda: square(a), "exp": lambda: exp(a)}[kind]())
    return nodes[-1]


@given(programs(["+", "*", "square", "exp"], -1.5, 1.5))  # a random DAG over 1-3 inputs built with + and *
def test_random_expressions_with_shared_nodes_match_torch(program):
    values, ops = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # exp of exp may overflow: such cases are skipped
        y = run(xs, ops, step.square, step.exp)
        assume(np.all(np.abs(y.data) < 1e100))
        y.backward()
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    yt = run(ts, ops, torch.square, torch.exp)
    yt.backward(torch.ones_like(yt))
    assert_grads_equal_torch(xs, ts, rtol=1e-10, atol=1e-12)


def test_the_output_gives_up_its_seed_and_can_be_reused_like_torch():
    # y = 2x at x = 1, backward; then z = 3y, backward: x.grad = 2 + 6 = 8, as in torch
    x = step.Variable(np.array(1.0))
    y = x * step.Variable(np.array(2.0))  # numbers become operands in step 21
    y.backward()
    assert y.grad is None
    (y * step.Variable(np.array(3.0))).backward()
    assert x.grad == 8.0 == torch_grad_after_reusing_the_output()
