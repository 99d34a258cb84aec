"""Step 40: gradcheck and gradgradcheck, against torch's, on right and wrong backwards."""
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch.autograd.functional import jacobian
from torch.autograd.gradcheck import GradcheckError as TorchGradcheckError

import tinypytorch
from reference import floats, torch_function_of_x
from steploader import load_step
from tinypytorch import Function, Variable
from tinypytorch.autograd import GradcheckError, gradcheck, gradgradcheck
from tinypytorch.autograd.gradcheck import analytical_jacobian, numerical_jacobian

pytestmark = [pytest.mark.step40, pytest.mark.torch]
step = load_step(40)


def tensor(array, requires_grad=True):
    return torch.tensor(np.asarray(array, dtype=np.float64), requires_grad=requires_grad)


# The step's linear maps, right and wrong, in both frameworks: tested as the step shows them
MatVec = step.MatVec
MatVecTorch = step.MatVecTorch
MatVecBuggy = step.MatVecBuggy
MatVecBuggyTorch = step.MatVecBuggyTorch


class Cube(Function):
    """x^3 with a backward written with Variables (differentiable again)."""

    def forward(self, x):
        self.save_for_backward(x)
        return x * x * x

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x * x * gy


class CubeOnArrays(Cube):
    """The same gradient computed on arrays: right, but a constant to a second backward."""

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x.data * x.data * gy.data


def cube(x):
    return x * x * x


CubeTorch = torch_function_of_x("CubeTorch", cube, lambda x, gy: 3 * x * x * gy)
CubeDetachedTorch = torch_function_of_x("CubeDetachedTorch", cube,
                                        lambda x, gy: 3 * x.detach() * x.detach() * gy.detach())


class ForgetfulExp(Function):
    """exp whose backward forgets to multiply by its incoming gradient (step 10's bug)."""

    def forward(self, x):
        y = np.exp(x)
        self.save_for_backward(y)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return y


class ForgetfulExpTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        return y


# ----- functions with right and wrong backwards, in both frameworks ------------------------------


class CubeWrongFactor(Cube):
    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3.0 * x * gy  # wrong: 3x instead of 3x^2


CubeWrongFactorTorch = torch_function_of_x("CubeWrongFactorTorch", cube, lambda x, gy: 3.0 * x * gy)


class SinWrongSign(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return np.sin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return -gy * tinypytorch.cos(x)  # wrong sign


SinWrongSignTorch = torch_function_of_x("SinWrongSignTorch", torch.sin, lambda x, gy: -gy * torch.cos(x))


def unary(m, name):
    return lambda x: getattr(m, name)(x)


def two_outputs(m):
    return lambda x, w: (m.sin(x) * w, (x * x).sum())


@st.composite
def vectors(draw, low, high, min_size=1, max_size=4):
    return [draw(arrays(np.float64, draw(st.integers(min_size, max_size)), elements=floats(low, high)))], [True]


@st.composite
def matrix_pairs(draw):
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    elements = floats(-2.0, 2.0)
    return [draw(arrays(np.float64, (n, k), elements=elements)), draw(arrays(np.float64, (k, m), elements=elements))], \
        [True, True]


@st.composite
def layer_inputs(draw):
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    elements = floats(-2.0, 2.0)
    X, W, b = (draw(arrays(np.float64, shape, elements=elements)) for shape in [(n, k), (m, k), (m,)])
    return [X, W, b], [False, True, True]


@st.composite
def matrix_and_column(draw):
    W = draw(arrays(np.float64, (3, 3), elements=floats(-3.0, 3.0)))
    x = draw(arrays(np.float64, (3, 1), elements=floats(-3.0, 3.0)))
    return [W, x], [False, True]


@st.composite
def vector_pairs(draw):
    n = draw(st.integers(1, 4))
    return [draw(arrays(np.float64, n, elements=floats(-2.0, 2.0))) for _ in range(2)], [True, True]


def layer(m):
    if m is torch:
        return lambda X, W, b: torch.tanh(torch.nn.functional.linear(X, W, b))
    return lambda X, W, b: tinypytorch.tanh(tinypytorch.linear(X, W, b))


# name: (ours, torch's, torch's with a right backward, inputs)
CASES = {
    "tanh": (unary(tinypytorch, "tanh"), torch.tanh, torch.tanh, vectors(-3.0, 3.0)),
    "sin": (unary(tinypytorch, "sin"), torch.sin, torch.sin, vectors(-3.0, 3.0)),
    "exp": (unary(tinypytorch, "exp"), torch.exp, torch.exp, vectors(-2.0, 2.0)),
    "log": (unary(tinypytorch, "log"), torch.log, torch.log, vectors(0.2, 10.0)),
    "sigmoid": (unary(tinypytorch, "sigmoid"), torch.sigmoid, torch.sigmoid, vectors(-4.0, 4.0)),
    "matmul": (tinypytorch.matmul, torch.matmul, torch.matmul, matrix_pairs()),
    "layer": (layer(tinypytorch), layer(torch), layer(torch), layer_inputs()),
    "two outputs": (two_outputs(tinypytorch), two_outputs(torch), two_outputs(torch), vector_pairs()),
    "Cube": (lambda x: Cube()(x), CubeTorch.apply, CubeTorch.apply, vectors(-2.0, 2.0)),
    "CubeOnArrays": (lambda x: CubeOnArrays()(x), CubeDetachedTorch.apply, CubeTorch.apply, vectors(-2.0, 2.0)),
    "MatVec": (lambda W, x: MatVec()(W, x), MatVecTorch.apply, MatVecTorch.apply, matrix_and_column()),
    "CubeWrongFactor": (lambda x: CubeWrongFactor()(x), CubeWrongFactorTorch.apply, CubeTorch.apply,
                        vectors(-2.0, 2.0)),
    # one element: see test_a_backward_that_ignores_its_incoming_gradient_fails_even_on_one_element
    "ForgetfulExp": (lambda x: ForgetfulExp()(x), ForgetfulExpTorch.apply, torch.exp, vectors(-2.0, 2.0, min_size=2)),
    "SinWrongSign": (lambda x: SinWrongSign()(x), SinWrongSignTorch.apply, torch.sin, vectors(-3.0, 3.0)),
    "MatVecBuggy": (lambda W, x: MatVecBuggy()(W, x), MatVecBuggyTorch.apply, MatVecTorch.apply,
                    matrix_and_column()),
}
ATOL, RTOL = 1e-5, 1e-3  # gradcheck's defaults, in both frameworks


def both(arrays_, requires):
    ours = tuple(Variable(a.copy(), requires_grad=r) for a, r in zip(arrays_, requires))
    theirs = tuple(tensor(a, requires_grad=r) for a, r in zip(arrays_, requires))
    return ours, theirs


def drawn_case(name, data):
    """(ours, torch's, the right function, our inputs, torch's) of CASES[name], the inputs drawn from `data`."""
    ours_fn, torch_fn, right_fn, inputs = CASES[name]
    return (ours_fn, torch_fn, right_fn, *both(*data.draw(inputs)))


def torch_jacobians(fn, tensors):
    """{(i, j): d output j / d input i} from torch.autograd.functional.jacobian, in gradcheck's layout
    (input size, output size), for the inputs that require grad."""
    checked = [i for i, t in enumerate(tensors) if t.requires_grad]

    def of_checked(*ts):
        full = list(tensors)
        for i, t in zip(checked, ts):
            full[i] = t
        return fn(*full)

    outputs = of_checked(*[tensors[i] for i in checked])
    single = not isinstance(outputs, tuple)
    blocks = jacobian(of_checked, tuple(tensors[i] for i in checked))
    blocks = (blocks,) if single else blocks
    result = {}
    for j, per_input in enumerate(blocks):
        size_out = (outputs if single else outputs[j]).numel()
        for i, block in zip(checked, per_input):
            result[(i, j)] = block.reshape(size_out, tensors[i].numel()).T.numpy()
    return result


def expected_verdict(theirs, right, tensors):
    """Whether the Jacobians of `theirs` equal those of the right function within gradcheck's tolerance,
    by torch; cases on the edge of the tolerance are skipped."""
    got, true = torch_jacobians(theirs, tensors), torch_jacobians(right, tensors)
    excess = max(float(np.max(np.abs(got[key] - true[key]) - (ATOL + RTOL * np.abs(true[key])))) for key in true)
    assume(abs(excess) > 1e-6)  # a wrong backward that lands on the edge of the tolerance: skipped
    return excess <= 0


@settings(max_examples=20)
@given(st.data())
@pytest.mark.parametrize("name", CASES)
def test_gradcheck_passes_and_fails_where_torchs_does(name, data):
    ours_fn, torch_fn, right_fn, ours, theirs = drawn_case(name, data)
    expected = expected_verdict(torch_fn, right_fn, theirs)
    assert gradcheck(ours_fn, ours, raise_exception=False) == expected
    assert torch.autograd.gradcheck(torch_fn, theirs, raise_exception=False) == expected


@settings(max_examples=20)
@given(st.data())
@pytest.mark.parametrize("name", CASES)
def test_gradchecks_jacobians_equal_torchs(name, data):
    ours_fn, torch_fn, right_fn, ours, theirs = drawn_case(name, data)
    analytical, numerical = analytical_jacobian(ours_fn, ours), numerical_jacobian(ours_fn, ours, 1e-6)
    expected, true = torch_jacobians(torch_fn, theirs), torch_jacobians(right_fn, theirs)
    assert analytical.keys() == numerical.keys() == expected.keys()
    for key in expected:
        np.testing.assert_allclose(analytical[key], expected[key], rtol=1e-12, atol=1e-14)  # the same backward
        np.testing.assert_allclose(numerical[key], true[key], rtol=1e-6, atol=1e-7)  # the true derivative


@settings(max_examples=5)
@given(st.data())
@pytest.mark.parametrize("name", CASES)
def test_gradcheck_leaves_the_inputs_unchanged(name, data):
    ours_fn, _, _, inputs = CASES[name]
    arrays_, requires = data.draw(inputs)
    ours, _ = both(arrays_, requires)
    gradcheck(ours_fn, ours, raise_exception=False)
    for v, a in zip(ours, arrays_):
        np.testing.assert_array_equal(v.data, a)
        assert v.grad is None  # gradients are returned by autograd.grad, never stored


GRADGRAD = ["tanh", "sin", "exp", "log", "sigmoid", "matmul", "layer", "two outputs", "Cube", "CubeOnArrays",
            "ForgetfulExp", "MatVecBuggy"]


@settings(max_examples=8)
@given(st.data())
@pytest.mark.parametrize("name", GRADGRAD)
def test_gradgradcheck_passes_and_fails_where_torchs_does(name, data):
    ours_fn, torch_fn, _, ours, theirs = drawn_case(name, data)
    if name == "CubeOnArrays":  # the second derivative 6 x v is not zero, so the cut graph shows
        assume(np.abs(ours[0].data).max() > 0.1)
    torch.manual_seed(0)
    assert gradgradcheck(ours_fn, ours, raise_exception=False) == \
        torch.autograd.gradgradcheck(torch_fn, theirs, raise_exception=False)


def fixed_inputs(name):
    """Seeded inputs of each case's shapes, away from 0 (arrays, which require grad)."""
    rng = np.random.default_rng(38)

    def draw(*shape):
        return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)

    if name in ("matmul",):
        return [draw(2, 3), draw(3, 2)], [True, True]
    if name == "layer":
        return [draw(4, 3), draw(2, 3), draw(2)], [False, True, True]
    if name == "two outputs":
        return [draw(3), draw(3)], [True, True]
    if name in ("MatVec", "MatVecBuggy"):
        return [np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [4.0, 0.0, 1.0]]), draw(3, 1)], [False, True]
    return [np.abs(draw(3)) if name == "log" else draw(3)], [True]


@pytest.mark.parametrize("name, expected", [("tanh", True), ("matmul", True), ("layer", True), ("two outputs", True),
                                            ("Cube", True), ("CubeOnArrays", False), ("ForgetfulExp", False),
                                            ("MatVecBuggy", True)])
def test_gradgradcheck_verdicts_on_fixed_inputs(name, expected):
    # MatVecBuggy passes: gradgradcheck compares the backward of the backward with the backward,
    # which is wrong but differentiable; ForgetfulExp's backward of the backward is wrong too.
    _, torch_fn, _, _ = CASES[name]
    ours, theirs = both(*fixed_inputs(name))
    torch.manual_seed(0)
    assert gradgradcheck(CASES[name][0], ours, raise_exception=False) is expected
    assert torch.autograd.gradgradcheck(torch_fn, theirs, raise_exception=False) is expected


def test_gradgradcheck_with_given_grad_outputs_checks_the_second_derivative():
    # d/dx of (3 x^2 v) is 6 x v: with v = 0 the cut graph of CubeOnArrays cannot show in the x block,
    # but d/dv = 3 x^2 still disagrees with the analytical 0, as in torch
    x = Variable(np.array([0.5, -1.0]))
    v = Variable(np.array([0.0, 0.0]))
    assert gradgradcheck(lambda t: Cube()(t), x, v) is True
    with pytest.raises(GradcheckError, match="with respect to input 1"):
        gradgradcheck(lambda t: CubeOnArrays()(t), x, v)
    with pytest.raises(TorchGradcheckError):
        torch.autograd.gradgradcheck(CubeDetachedTorch.apply, tensor([0.5, -1.0]), tensor([0.0, 0.0]))


@pytest.mark.parametrize("value", [0.3, -1.0])
def test_a_backward_that_ignores_its_incoming_gradient_fails_even_on_one_element(value):
    # With one element the only one-hot gradient is 1, so the Jacobians agree; torch also runs the
    # backward with a zero incoming gradient, which must give zero ("backward not multiplied by grad_output").
    ours, theirs = both([np.array([value])], [True])
    assert torch.autograd.gradcheck(ForgetfulExpTorch.apply, theirs, raise_exception=False) is False
    assert torch.autograd.gradgradcheck(ForgetfulExpTorch.apply, theirs, raise_exception=False) is False
    assert gradcheck(lambda x: ForgetfulExp()(x), ours, raise_exception=False) is False
    assert gradgradcheck(lambda x: ForgetfulExp()(x), ours, raise_exception=False) is False


class CubeOffBy(Cube):
    """x^3 with a backward off by `delta` times the incoming gradient."""

    def __init__(self, delta):
        self.delta = delta

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3.0 * x * x * gy + self.delta * gy


class CubeOffByTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, delta):
        ctx.save_for_backward(x)
        ctx.delta = delta
        return x * x * x

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return 3.0 * x * x * gy + ctx.delta * gy, None


@pytest.mark.parametrize("x, delta, passes", [
    (0.0, 5e-6, True), (0.0, -5e-6, True), (0.0, 2e-5, False), (0.0, -2e-5, False),  # atol = 1e-5 at f' = 0
    (10.0, 0.25, True), (10.0, -0.25, True), (10.0, 0.35, False), (10.0, -0.35, False),  # 1e-5 + 1e-3 * 300
])
def test_the_tolerance_is_atol_plus_rtol_times_the_numerical_derivative_as_in_torch(x, delta, passes):
    ours, theirs = both([np.array([x])], [True])
    assert gradcheck(lambda v: CubeOffBy(delta)(v), ours, raise_exception=False) is passes
    assert torch.autograd.gradcheck(lambda t: CubeOffByTorch.apply(t, delta), theirs, raise_exception=False) is passes
    assert gradcheck(lambda v: CubeOffBy(delta)(v), ours, atol=1.0, rtol=0.0, raise_exception=False) is True


# ----- the failure message, bad input ------------------------------------------------------------


def matrices_in(text):
    """The matrices printed after 'numerical:' and 'analytical:' in a gradcheck failure message."""
    numbers = re.compile(r"-?\d+\.?\d*(?:e[+-]?\d+)?")
    _, numerical, analytical = re.split(r"numerical:|analytical:", text)
    return [np.array([[float(n) for n in numbers.findall(row)] for row in part.strip().splitlines()])
            for part in (numerical, analytical)]


@given(arrays(np.float64, (3, 3), elements=floats(-9.0, 9.0)), arrays(np.float64, (3, 1), elements=floats(-3, 3)))
def test_the_failure_message_shows_both_jacobians(W, x):
    assume(np.abs(W - W.T).max() > 0.1)  # a symmetric W would hide the bug
    ours, theirs = both([W, x], [False, True])
    with pytest.raises(GradcheckError) as raised:
        gradcheck(lambda W, x: MatVecBuggy()(W, x), ours)
    with pytest.raises(TorchGradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        torch.autograd.gradcheck(MatVecBuggyTorch.apply, theirs)
    assert isinstance(raised.value, RuntimeError)
    message = str(raised.value)
    assert message.startswith("Jacobian mismatch for output 0 with respect to input 1,\n")  # x is input 1 of (W, x)
    numerical, analytical = matrices_in(message)
    true = torch_jacobians(MatVecTorch.apply, theirs)[(1, 0)]  # W^T
    wrong = torch_jacobians(MatVecBuggyTorch.apply, theirs)[(1, 0)]  # W
    np.testing.assert_allclose(numerical, true, atol=6e-5)  # printed with 4 decimals
    np.testing.assert_allclose(analytical, wrong, atol=6e-5)


def test_raise_exception_false_returns_false_and_the_default_raises():
    x = Variable(np.array([0.3, -0.7, 1.1]))
    assert gradcheck(lambda v: SinWrongSign()(v), x, raise_exception=False) is False
    assert gradcheck(lambda v: SinWrongSign()(v), x, raise_exception=False, atol=3.0, rtol=0.0) is True  # |2 cos x| < 3
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        gradcheck(lambda v: SinWrongSign()(v), x)
    assert gradgradcheck(lambda v: CubeOnArrays()(v), x, raise_exception=False) is False
    with pytest.raises(GradcheckError):
        gradgradcheck(lambda v: CubeOnArrays()(v), x)


def test_float32_inputs_that_require_grad_warn_as_in_torch():
    x32 = np.array([0.5, -1.25, 2.0], dtype=np.float32)
    with pytest.warns(UserWarning, match=r"Input #0 requires gradient and is not a double precision"):
        result = gradcheck(lambda v: v * v * v, Variable(x32), raise_exception=False)
    assert result is False  # x +- 1e-6 rounded to float32: the numerical derivative is off by percents
    with pytest.warns(UserWarning, match=r"Input #0 requires gradient and is not a double precision"):
        torch.autograd.gradcheck(lambda v: v * v * v, torch.tensor(x32, requires_grad=True), raise_exception=False)
    with pytest.warns(UserWarning, match=r"Input #1 requires gradient"):
        gradgradcheck(lambda a, b: a * b, (Variable(np.ones(2)), Variable(np.ones(2, dtype=np.float32))),
                      raise_exception=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float32 that needs no gradient is not checked: no warning
        assert gradcheck(lambda a, b: a * b, (Variable(np.ones(2)), Variable(x32[:2], requires_grad=False)))


@pytest.mark.parametrize("check", [gradcheck, gradgradcheck])
def test_no_input_requiring_grad_raises_a_value_error_as_in_torch(check):
    with pytest.raises(ValueError, match="at least one input to require gradient"):
        check(tinypytorch.tanh, Variable(np.ones(3), requires_grad=False))
    torch_check = getattr(torch.autograd, check.__name__)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        torch_check(torch.tanh, tensor(np.ones(3), requires_grad=False))


def test_inputs_that_are_not_variables_are_refused():
    with pytest.raises(TypeError, match="gradcheck: input 0 must be a Variable"):
        gradcheck(tinypytorch.tanh, np.ones(3))
