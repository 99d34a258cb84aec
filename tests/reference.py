"""What several test files share: PyTorch (float64) twins of the steps' computations, and the
hypothesis strategies they draw inputs from.

No expected value here comes from the code under test. A helper that runs the framework takes the step's
module or classes as an argument, so the tests of a snapshot step (01-22) keep exercising that
step's own classes; tinypytorch is imported only inside the helpers that test the package.
"""
import numpy as np
import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from tinypytorch import Function, Variable, mean_squared_error

# ----- arrays -------------------------------------------------------------------------------


def floats(low=None, high=None, **options):
    """Floats in [low, high], without subnormals (magnitudes below 2.2e-308, zero excepted).

    Every float strategy of the tests goes through here. Hypothesis draws subnormals whenever the range holds 0,
    and there libraries part ways without either being wrong: torch's prod backward divides the product by each
    factor, so prod([5e-324, 0.5]) underflows to 0 and gives the gradient 0 where it is 0.5. A test that means to
    draw them passes allow_subnormal=True and says what torch does there.
    """
    return st.floats(low, high, **{"allow_subnormal": False, **options})


def float_arrays(low, high, min_dims=0, max_dims=3, max_side=None):
    """float64 arrays of min_dims to max_dims dimensions (sides up to max_side, hypothesis's default
    when None) with elements in [low, high]."""
    shapes = array_shapes(min_dims=min_dims, max_dims=max_dims, max_side=max_side)
    return arrays(np.float64, shapes, elements=floats(low, high))


def same_shape_arrays(count, elements, max_dims=3, max_side=4):
    """Tuples of `count` float64 arrays of one shape (0 to max_dims dimensions, sides 1 to
    max_side), their elements drawn from the strategy `elements`."""
    return array_shapes(min_dims=0, max_dims=max_dims, max_side=max_side).flatmap(
        lambda shape: st.tuples(*[arrays(np.float64, shape, elements=elements)] * count)
    )


@st.composite
def values_and_seeds(draw, low, high):
    """An array (0 to 3 dimensions, elements in [low, high]) and a gradient of its shape (elements
    in [-10, 10]). A seed other than ones catches a backward that forgets to multiply by gy."""
    shape = draw(array_shapes(min_dims=0, max_dims=3))
    x = draw(arrays(np.float64, shape, elements=floats(low, high)))
    seed = draw(arrays(np.float64, shape, elements=floats(-10.0, 10.0)))
    return x, seed


# ----- how a tolerance is chosen --------------------------------------------------------------
#
# Two float64 computations of the same formula that round differently (another order of
# operations, another library's exp) agree to a few ulp *relative to the terms they add up*,
# not relative to the result. Where terms of size S nearly cancel, the result may be 1e-5 S
# while its error is still about 1e-16 S: a relative tolerance alone (rtol=1e-12, atol=0) then
# fails on correct code (a^2 - a/b^2 at a = 0.604, b = 1.287 is off by a relative 2.5e-12).
# So a comparison with torch uses
#
#   rtol = 1e-10                         room for the roundings of a few thousand operations
#   atol = 1e-12 * max(1, max |expected|)  an absolute error at the scale of the terms, estimated
#                                        by the largest element of the result (or 1)
#
# Where the arithmetic is the same operation by operation (no cancellation, same order), a test
# may be tighter (rtol=1e-14, or bitwise) and says why. Never atol=0 on a value that can cancel.

TOLERANCE = {"rtol": 1e-10, "atol": 1e-12}


def assert_close_to_torch(actual, expected, what=""):
    """assert_allclose with the tolerance above: rtol 1e-10, atol 1e-12 times the scale of `expected`'s finite
    values. Infinities must match exactly (place and sign), and NaN must sit in the same places: an infinity in
    the scale would make atol infinite, and any finite value would pass."""
    expected = np.asarray(expected)
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=TOLERANCE["rtol"], atol=TOLERANCE["atol"] * scale,
                               equal_nan=True, err_msg=what)


# ----- gradients from torch -----------------------------------------------------------------


def torch_leaf(value):
    """A float64 tensor that requires grad, holding `value` (a number or an array)."""
    return torch.tensor(value, dtype=torch.float64, requires_grad=True)


def torch_value_and_grads(fn, *values, gradient=None, calls=1):
    """fn's value and its inputs' gradients, from torch in float64.

    fn takes one tensor per value. The output is backpropagated `calls` times with `gradient` (ones
    of the output's shape by default), so the inputs' gradients add up as in torch. Returns
    (value, [gradient of each input]) as ndarrays; an input the output does not use gets None.
    """
    leaves = [torch_leaf(v) for v in values]
    y = fn(*leaves)
    seed = torch.ones_like(y) if gradient is None else torch.tensor(gradient, dtype=torch.float64)
    for _ in range(calls):
        y.backward(seed, retain_graph=True)
    return y.detach().numpy(), [None if t.grad is None else t.grad.numpy() for t in leaves]


def torch_grad(fn, value, gradient=None, calls=1):
    """The gradient (ndarray) of fn's single input at `value`; as torch_value_and_grads."""
    return torch_value_and_grads(fn, value, gradient=gradient, calls=calls)[1][0]


def torch_derivatives(f, x0, n):
    """[f(x0), f'(x0), ..., f^(n)(x0)] as floats; each derivative is torch.autograd.grad
    (create_graph=True) of the one before."""
    x = torch_leaf(x0)
    g = f(x)
    values = [g.item()]
    for _ in range(n):
        (g,) = torch.autograd.grad(g, x, create_graph=True)
        values.append(g.item())
    return values


def torch_square_exp_square_grads(array, seed=None):
    """The gradients at b, a and x, in that order, of y = square(b), b = exp(a), a = square(x),
    from torch, backpropagating `seed` (ones by default); ndarrays."""
    t = torch_leaf(array)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    ty = torch.square(tb)
    ty.backward(torch.ones_like(ty) if seed is None else torch.tensor(seed, dtype=torch.float64))
    return tb.grad.numpy(), ta.grad.numpy(), t.grad.numpy()


def torch_branching_grad(value):
    """dy/dx at x = value for y = b + c with b = c = a^2, a = x^2 (the branching graph of steps
    15-16), from torch: 8 x^3, as a float."""
    xt = torch_leaf(value)
    at = xt**2
    (at**2 + at**2).backward()
    return xt.grad.item()


def torch_grad_after_reusing_the_output():
    """x.grad from torch after y = 2x at x = 1, y.backward(), then (3y).backward(): 2 + 3 * 2 = 8.0.
    A seed left on y by the first pass would be added to in the second."""
    xt = torch_leaf(1.0)
    yt = xt * 2
    yt.backward(retain_graph=True)
    (yt * 3).backward()
    return xt.grad.item()


def torch_function_of_x(name, forward, backward, once_differentiable=False):
    """A torch.autograd.Function `name` of one tensor x that saves x: forward(x) -> y, backward(x, gy) -> x's
    gradient (with once_differentiable, torch's decorator on backward)."""
    def backward_of_ctx(ctx, gy):
        (x,) = ctx.saved_tensors
        return backward(x, gy)

    def forward_of_ctx(ctx, x):
        ctx.save_for_backward(x)
        return forward(x)

    if once_differentiable:
        backward_of_ctx = torch.autograd.function.once_differentiable(backward_of_ctx)
    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(forward_of_ctx), "backward": staticmethod(backward_of_ctx)})


def train_twins(model, twin, optimizer, optimizer_t, x, y, steps, device="cpu"):
    """`steps` steps of mean-squared-error training of `model` (ours, its data on `device`) and `twin` (torch, on the
    CPU), each with its own optimizer, on the same NumPy inputs x and targets y."""
    xv, yv = (Variable(a, requires_grad=False).to(device) for a in (x, y))
    for _ in range(steps):
        optimizer.zero_grad()
        mean_squared_error(model(xv), yv).backward()
        optimizer.step()
        optimizer_t.zero_grad()
        torch.nn.functional.mse_loss(twin(torch.tensor(x)), torch.tensor(y)).backward()
        optimizer_t.step()


# ----- running the snapshot steps (pass the step's module or classes in) -----------------------


def square_exp_square(step, array):
    """x, a, b, y for y = Square()(b), b = Exp()(a), a = Square()(x), x = Variable(array), with
    the step's own classes (steps 05-08)."""
    x = step.Variable(array)
    a = step.Square()(x)
    b = step.Exp()(a)
    y = step.Square()(b)
    return x, a, b, y


def seeded_chain_grads(variable_class, functions, array, seed):
    """x.grad of a chain x -> f1 -> f2 -> ... seeded with `seed`, by the step and by torch.

    functions: (the step's Function class, torch's function) pairs, applied in order, a new
    instance of the class per call. The step's output is seeded by hand, y.grad = seed, then
    y.backward() (steps 07-08); torch's with backward(seed). Returns (ours, torch's).
    """
    x, t = variable_class(array), torch_leaf(array)
    y, ty = x, t
    for ours, theirs in functions:
        y, ty = ours()(y), theirs(ty)
    y.grad = seed
    y.backward()
    ty.backward(torch.tensor(seed, dtype=torch.float64))
    return x.grad, t.grad.numpy()


def square_exp_ops(step):
    """The operations of steps 07-08's random chains: the step's Square and Exp, each with torch's function."""
    return {"square": (step.Square, torch.square), "exp": (step.Exp, torch.exp)}


def assert_seeded_square_exp_square_grads_equal_torch(step, array, seed, rtol):
    """The gradient of every variable of y = square(exp(square(x))), y seeded by hand (y.grad = seed, then
    y.backward(), steps 07-08), equals torch's within rtol."""
    x, a, b, y = square_exp_square(step, array)
    y.grad = seed
    y.backward()
    for ours, theirs in zip((b, a, x), torch_square_exp_square_grads(array, seed)):
        np.testing.assert_allclose(ours.grad, theirs, rtol=rtol, atol=0)


def backward_through_traced_branches(step):
    """x after y.backward() for y = Add(B(a), C(a)), a = A(x), x = 2, built from the step's
    TracedSquare and TracedAdd (steps 15-16), which print one line per backward call: read them
    with capsys."""
    x = step.Variable(np.array(2.0))
    a = step.TracedSquare("A")(x)
    b = step.TracedSquare("B")(a)
    c = step.TracedSquare("C")(a)
    step.TracedAdd("Add")(b, c).backward()
    return x


# ----- random expression graphs, steps 16-22: programs of (kind, i, j[, c]) -------------------


def draw_operations(draw, kinds, n_nodes, count, constants=None):
    """`count` operations (kind, i, j), or (kind, i, j, c) with c drawn from `constants`: i and j
    index any node before the operation (n_nodes of them at first, one more after each)."""
    operations = []
    for _ in range(count):
        operation = (draw(st.sampled_from(kinds)), draw(st.integers(0, n_nodes - 1)), draw(st.integers(0, n_nodes - 1)))
        if constants is not None:
            operation += (draw(st.sampled_from(constants)),)
        operations.append(operation)
        n_nodes += 1
    return operations


@st.composite
def programs(draw, kinds, low, high, n_inputs=(1, 3), n_operations=(1, 10), constants=None):
    """A random DAG: (inputs, operations). The inputs are n_inputs[0] to n_inputs[1] float64 arrays
    of one shape, (), (3,) or (2, 2), elements in [low, high]; then n_operations[0] to
    n_operations[1] operations as in draw_operations, so any node may be reused by later ones."""
    count = draw(st.integers(*n_inputs))
    shape = draw(st.sampled_from([(), (3,), (2, 2)]))
    size = int(np.prod(shape))
    inputs = [np.array(draw(st.lists(floats(low, high), min_size=size, max_size=size))).reshape(shape)
              for _ in range(count)]
    return inputs, draw_operations(draw, kinds, count, draw(st.integers(*n_operations)), constants)


ADD_SQUARE_EXP = ["add", "square", "exp"]  # the kinds of operation of steps 16-18's programs


def run_add_square_exp(inputs, operations, add, square, exp):
    """Every node (the inputs first, the output last) of a program of "add", "square" and "exp"
    (steps 16-18), evaluated with the given functions: the step's or torch's."""
    nodes = list(inputs)
    for kind, i, j in operations:
        nodes.append(add(nodes[i], nodes[j]) if kind == "add" else (square if kind == "square" else exp)(nodes[i]))
    return nodes


def add_square_exp_grads(step, program, passes=1):
    """The input Variables and tensors after `passes` backward passes through a program of "add",
    "square" and "exp", run with the step's functions (step.add, step.square, step.exp) and with
    torch's. A program whose output reaches 1e100 (exp of exp may overflow) is skipped (assume)."""
    values, operations = program
    xs = [step.Variable(v) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):
        y = run_add_square_exp(xs, operations, step.add, step.square, step.exp)[-1]
        assume(np.all(np.abs(y.data) < 1e100))
        for _ in range(passes):
            y.backward()
    ts = [torch_leaf(v) for v in values]
    yt = run_add_square_exp(ts, operations, torch.add, torch.square, torch.exp)[-1]
    for _ in range(passes):
        yt.backward(torch.ones_like(yt), retain_graph=True)
    return xs, ts


def assert_grads_equal_torch(variables, tensors, rtol, atol):
    """Each variable's grad equals its twin tensor's; it is None exactly where torch's is (an input
    the output does not depend on)."""
    for x, t in zip(variables, tensors):
        if t.grad is None:
            assert x.grad is None
        else:
            np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=rtol, atol=atol)


# ----- random expression graphs of the package: operations named in tables ---------------------


# what the random graphs of steps 33, 34 and 38 are made of, (m, *operands) -> a node, m tinypytorch or torch;
# each test takes the ones it needs with `expressions`
UNARY_EXPRESSIONS = {
    "sin": lambda m, a: m.sin(a),
    "exp": lambda m, a: m.exp(a * 0.25),
    "tanh": lambda m, a: m.tanh(a),
    "neg": lambda m, a: -a,
    "pow2": lambda m, a: a**2,
    "add 1.5": lambda m, a: a + 1.5,
    "div 3": lambda m, a: a / 3.0,
    "rdiv": lambda m, a: 2.0 / (a * a + 1.0),
}
BINARY_EXPRESSIONS = {
    "add": lambda m, a, b: a + b,
    "sub": lambda m, a, b: a - b,
    "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / (b * b + 1.0),  # never by zero
}


def expressions(table, *names):
    """The rows of `table` named, in that order."""
    return {name: table[name] for name in names}


def operation_lists(unary, binary, max_size):
    """Lists of 1 to max_size operations: (name, i) for a name in `unary`, (name, i, j) for one in
    `binary`; i, j in [0, 99] pick an operand among the nodes so far, modulo their number."""
    one = st.tuples(st.sampled_from(sorted(unary)), st.integers(0, 99))
    two = st.tuples(st.sampled_from(sorted(binary)), st.integers(0, 99), st.integers(0, 99))
    return st.lists(st.one_of(one, two), min_size=1, max_size=max_size)


def evaluate(m, leaves, operations, unary, binary):
    """Every node, the leaves first, after applying the operations with m (tinypytorch or torch):
    table[name](m, *operands), each operand nodes[pick % len(nodes)], so nodes are shared."""
    nodes = list(leaves)
    for name, *picks in operations:
        function = unary.get(name) or binary[name]
        nodes.append(function(m, *(nodes[pick % len(nodes)] for pick in picks)))
    return nodes


# ----- the package against torch: values and weighted gradients --------------------------------


def compare_weighted_sum(f, g, *arrays, seed=0, rtol=1e-12):
    """Assert that f (on tinypytorch Variables) and g (on float64 torch tensors) of the same arrays
    agree: same shape and values, and the same gradients of sum(f(...) * w) and sum(g(...) * w),
    w uniform in [-1, 1) from `seed`, each of its input's shape (atol 1e-14 throughout)."""
    from tinypytorch import Variable  # here, so that the snapshot steps' tests need no package

    xs = [Variable(a.copy()) for a in arrays]
    ts = [torch_leaf(a) for a in arrays]
    y, yt = f(*xs), g(*ts)
    assert y.shape == tuple(yt.shape)
    w = np.random.default_rng(seed).uniform(-1.0, 1.0, y.shape)
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=rtol, atol=1e-14)
    for x, t in zip(xs, ts):
        assert x.grad.shape == x.shape  # DeZero #20: a gradient always has its variable's shape
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=rtol, atol=1e-14)


class TwoOutputs(Function):
    """A function of two outputs, 2x and 3x: what the drawings of a multi-output node are tested on (step 25)."""

    def forward(self, x):
        return 2 * x, 3 * x

    def backward(self, gy0, gy1):
        return 2 * gy0 + 3 * gy1


def assert_refused_as_torch(make, ours, theirs):
    """make(framework, functional) raises in torch; the package raises the same exception type with the same words.
    `ours` and `theirs` are (tinypytorch, its functional module) and (torch, torch.nn.functional)."""
    with pytest.raises(Exception) as expected:
        make(*theirs)
    with pytest.raises(type(expected.value)) as raised:
        make(*ours)
    assert str(raised.value) == str(expected.value)


def assert_comparison_is_not_blind(equal):
    """A page's `equal` of lists of arrays (steps 73 and 74) tells a copy from a change of 1e-9, and refuses
    lists of different lengths: a check built on it can fail."""
    a = [np.ones((2, 3)), np.zeros(3)]
    assert equal(a, [x.copy() for x in a])
    assert not equal(a, [a[0] + 1e-9, a[1]])
    with pytest.raises(ValueError):
        equal(a, a[:1])
