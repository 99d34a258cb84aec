"""Step 39: anomaly mode (detect_anomaly, set_detect_anomaly), gradcheck and gradgradcheck, against torch."""
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
from reference import values_and_seeds
from steploader import load_step
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import GradcheckError, anomaly, gradcheck, gradgradcheck
from tinypytorch.autograd.gradcheck import analytical_jacobian, numerical_jacobian

pytestmark = [pytest.mark.step39, pytest.mark.torch]
step = load_step(39)

NAN_MESSAGE = re.compile(r"Function '(\w+)' returned nan values in its (\d+)th output\.")


@pytest.fixture(autouse=True)
def anomaly_mode_left_as_found():
    """Every test starts with anomaly mode off in both frameworks and leaves it so."""
    assert not anomaly.enabled() and anomaly.is_anomaly_check_nan_enabled()
    assert not torch.is_anomaly_enabled()
    yield
    autograd.set_detect_anomaly(False)
    torch.autograd.set_detect_anomaly(False)


def tensor(array, requires_grad=True):
    return torch.tensor(np.asarray(array, dtype=np.float64), requires_grad=requires_grad)


def torch_anomaly_note(caught):
    """The text of torch's "Error detected in ..." warning among the warnings caught."""
    notes = [str(w.message) for w in caught if str(w.message).startswith("Error detected in")]
    assert len(notes) == 1, [str(w.message) for w in caught]
    return notes[0]


# ----- log ------------------------------------------------------------------------------------


@given(values_and_seeds(1e-3, 1e3))
def test_log_value_and_gradient_equal_torch(case):
    x_data, seed = case
    x = Variable(x_data)
    y = tinypytorch.log(x)
    y.backward(Variable(seed, requires_grad=False))
    xt = tensor(x_data)
    yt = torch.log(xt)
    yt.backward(torch.tensor(seed))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15)  # gy / x: one division in both


def test_log_at_zero_gives_minus_inf_and_an_infinite_gradient_as_torch():
    x = Variable(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore"):
        y = tinypytorch.log(x)
        y.backward()
    xt = tensor([0.0, 1.0])
    yt = torch.log(xt)
    yt.backward(torch.ones(2, dtype=torch.float64))
    assert y.data.tolist() == yt.tolist() == [-np.inf, 0.0]
    assert x.grad.data.tolist() == xt.grad.tolist() == [np.inf, 1.0]


# ----- anomaly mode: NaN ------------------------------------------------------------------------


def test_without_anomaly_mode_a_nan_gradient_passes_silently_as_in_torch():
    x = Variable(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore", invalid="ignore"):
        tinypytorch.log(x)[1:].sum().backward()
    xt = tensor([0.0, 1.0])
    torch.log(xt)[1:].sum().backward()
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())  # nan where both are nan
    assert np.isnan(x.grad.data[0]) and x.grad.data[1] == 1.0


def test_anomaly_mode_names_log_its_0th_output_and_the_forward_line_as_torch_does():
    xt = tensor([0.0, 1.0])
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        yt = torch.log(xt)  # forward line (torch)
        with pytest.raises(RuntimeError) as raised_t:
            yt[1:].sum().backward()
    note_t = torch_anomaly_note(caught)

    x = Variable(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore", invalid="ignore"), autograd.set_detect_anomaly(True):
        y = tinypytorch.log(x)  # forward line (ours)
        with pytest.raises(RuntimeError) as raised:
            y[1:].sum().backward()

    assert NAN_MESSAGE.fullmatch(str(raised_t.value)).groups() == ("LogBackward0", "0")
    assert NAN_MESSAGE.fullmatch(str(raised.value)).groups() == ("Log", "0")
    assert str(raised.value) == "Function 'Log' returned nan values in its 0th output."
    (note,) = raised.value.__notes__
    assert note.startswith("Error detected in Log. Traceback of forward call that caused the error:")
    assert note_t.startswith("Error detected in LogBackward0. Traceback of forward call that caused the error:")
    assert "yt = torch.log(xt)  # forward line (torch)" in note_t
    assert "y = tinypytorch.log(x)  # forward line (ours)" in note
    assert "test_anomaly_mode_names_log_its_0th_output_and_the_forward_line_as_torch_does" in note


class TwoInputs(Function):
    """x0 * x1 with a backward that returns NaN for the input `bad` (a made-up failure)."""

    def __init__(self, bad):
        self.bad = bad

    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        grads = [gy * 1.0, gy * 1.0]
        grads[self.bad] = gy * np.nan
        return tuple(grads)


class TwoInputsTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x0, x1, bad):
        ctx.bad = bad
        return x0 * x1

    @staticmethod
    def backward(ctx, gy):
        grads = [gy * 1.0, gy * 1.0, None]
        grads[ctx.bad] = gy * float("nan")
        return tuple(grads)


@pytest.mark.parametrize("bad", [0, 1])
def test_the_nan_message_gives_the_index_of_the_input_whose_gradient_is_nan_as_torch(bad):
    with np.errstate(invalid="ignore"), autograd.set_detect_anomaly(True):
        with pytest.raises(RuntimeError) as raised:
            TwoInputs(bad)(Variable(np.ones(2)), Variable(np.ones(2))).sum().backward()
    with warnings.catch_warnings(record=True), torch.autograd.set_detect_anomaly(True):
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as raised_t:
            TwoInputsTorch.apply(tensor(np.ones(2)), tensor(np.ones(2)), bad).sum().backward()
    assert NAN_MESSAGE.fullmatch(str(raised.value)).groups() == ("TwoInputs", str(bad))
    assert NAN_MESSAGE.fullmatch(str(raised_t.value)).groups() == ("TwoInputsTorchBackward", str(bad))


def test_the_nan_of_a_package_operation_is_located_in_mul_as_in_torch():
    # x0 = (inf, 1) is a constant, x1 requires grad: forward (inf, 2) -> [1:] -> 2, finite; backward
    # sends (0, 1) to the product, whose gradient for x1 is gy * x0 = (0 * inf, 1) = (nan, 1)
    with np.errstate(invalid="ignore"), autograd.set_detect_anomaly(True):
        with pytest.raises(RuntimeError) as raised:
            (Variable(np.array([np.inf, 1.0]), requires_grad=False) * Variable(np.array([1.0, 2.0])))[1:].sum() \
                .backward()
    with warnings.catch_warnings(record=True), torch.autograd.set_detect_anomaly(True):
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as raised_t:
            (tensor([np.inf, 1.0], requires_grad=False) * tensor([1.0, 2.0]))[1:].sum().backward()
    assert NAN_MESSAGE.fullmatch(str(raised.value)).groups() == ("Mul", "1")
    assert NAN_MESSAGE.fullmatch(str(raised_t.value)).groups() == ("MulBackward0", "1")


def test_check_nan_false_records_the_stacks_but_lets_the_nan_through():
    x = Variable(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore", invalid="ignore"), autograd.set_detect_anomaly(True, check_nan=False):
        y = tinypytorch.log(x)
        y[1:].sum().backward()
    assert hasattr(y.creator, "creation_stack")
    assert np.isnan(x.grad.data[0]) and x.grad.data[1] == 1.0


def test_anomaly_mode_on_only_around_backward_still_raises_but_has_no_forward_stack():
    x = Variable(np.array([0.0, 1.0]))
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = tinypytorch.log(x)[1:].sum()
        with autograd.set_detect_anomaly(True), pytest.raises(RuntimeError, match="'Log' returned nan") as raised:
            loss.backward()
    (note,) = raised.value.__notes__
    assert note.startswith("Error detected in Log.") and "File " not in note


# ----- anomaly mode: any error in a backward ---------------------------------------------------


# The Functions of the step, right and wrong backwards in both frameworks: tested as the step shows them
Cube = step.Cube
CubeTorch = step.CubeTorch
CubeOnArrays = step.CubeOnArrays
CubeDetachedTorch = step.CubeDetachedTorch
ForgetfulExp = step.ForgetfulExp
ForgetfulExpTorch = step.ForgetfulExpTorch
MatVec = step.MatVec
MatVecTorch = step.MatVecTorch
MatVecBuggy = step.MatVecBuggy
MatVecBuggyTorch = step.MatVecBuggyTorch
RowSum = step.RowSum
RowSumTorch = step.RowSumTorch


class Typo(Function):
    """A backward that raises by itself: it reads an attribute forward never set."""

    def forward(self, x):
        self.shape = x.shape
        return x * 2.0

    def backward(self, gy):
        return gy.reshape(self.shap)  # bug: a typo for self.shape


BUGGY = {
    "wrong shape": (lambda v: RowSum()(v), ValueError, "RowSum.backward returned a gradient of shape (3, 1) "
                                                       "for input 0 of shape (3, 2)"),
    "raises": (lambda v: Typo()(v), AttributeError, "shap"),
}


@pytest.mark.parametrize("name", BUGGY)
def test_an_error_in_a_backward_carries_the_forward_traceback_only_in_anomaly_mode(name):
    function, error_type, fragment = BUGGY[name]
    x = Variable(np.ones((3, 2)))

    y = function(x)  # made outside anomaly mode
    with pytest.raises(error_type, match=re.escape(fragment)) as raised:
        y.sum().backward()
    assert not hasattr(raised.value, "__notes__")

    with autograd.set_detect_anomaly(True):
        y = function(x)  # the forward call the note must show
        with pytest.raises(error_type, match=re.escape(fragment)) as raised:
            y.sum().backward()
    (note,) = raised.value.__notes__
    made_by = type(y.creator).__name__
    assert note.startswith(f"Error detected in {made_by}. Traceback of forward call that caused the error:")
    assert "y = function(x)  # the forward call the note must show" in note
    assert note.count("File ") >= 2  # a stack, not a single line


def test_the_wrong_shape_raises_in_torch_too_and_both_point_at_the_same_call():
    a, b = np.ones((3, 1)), np.ones((3, 2))

    def model(row_sum, a, b):
        s = row_sum(a)
        t = row_sum(b)  # the call whose backward fails
        return (s * t).sum()

    with autograd.set_detect_anomaly(True), pytest.raises(ValueError) as raised:
        model(lambda v: RowSum()(v), Variable(a), Variable(b)).backward()
    with warnings.catch_warnings(record=True) as caught, torch.autograd.set_detect_anomaly(True):
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=r"got \[3, 1\] but expected shape compatible with \[3, 2\]"):
            model(RowSumTorch.apply, tensor(a), tensor(b)).backward()
    line = "t = row_sum(b)  # the call whose backward fails"
    assert line in raised.value.__notes__[0] and line in torch_anomaly_note(caught)
    assert "s = row_sum(a)" not in raised.value.__notes__[0]


def test_creation_stack_is_kept_only_in_anomaly_mode():
    x = Variable(np.array([0.5, 1.0]))
    y = tinypytorch.tanh(x)
    assert not hasattr(y.creator, "creation_stack")
    with autograd.set_detect_anomaly(True):
        y = tinypytorch.tanh(x)  # recorded here
        z = y * 2.0
    assert "y = tinypytorch.tanh(x)  # recorded here" in y.creator.creation_stack
    assert "test_creation_stack_is_kept_only_in_anomaly_mode" in y.creator.creation_stack
    assert "z = y * 2.0" in z.creator.creation_stack
    with tinypytorch.no_grad(), autograd.set_detect_anomaly(True):
        assert tinypytorch.tanh(x).creator is None  # nothing recorded, nothing kept


# ----- anomaly mode: switching it ----------------------------------------------------------------


def modes():
    return (anomaly.enabled(), anomaly.is_anomaly_check_nan_enabled())


def torch_modes():
    return (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())


def test_set_detect_anomaly_sets_the_mode_and_as_a_context_manager_restores_it_as_torch():
    seen = []
    for set_mode, current in [(autograd.set_detect_anomaly, modes), (torch.autograd.set_detect_anomaly, torch_modes)]:
        states = [current()]
        set_mode(True)
        states.append(current())
        with set_mode(False, check_nan=False):
            states.append(current())
            with set_mode(True):
                states.append(current())
            states.append(current())
        states.append(current())
        with pytest.raises(KeyError):
            with set_mode(False):
                states.append(current())
                raise KeyError("restored even when the block raises")
        states.append(current())
        set_mode(False)
        states.append(current())
        seen.append(states)
    assert seen[0] == seen[1] == [(False, True), (True, True), (False, False), (True, True), (False, False),
                                  (True, True), (False, True), (True, True), (False, True)]


def test_detect_anomaly_warns_turns_the_mode_on_and_restores_it():
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled. This mode will increase the runtime"):
        with autograd.detect_anomaly():
            assert modes() == (True, True)
    assert modes() == (False, True)
    with pytest.warns(UserWarning), autograd.detect_anomaly(check_nan=False):
        assert modes() == (True, False)
    assert modes() == (False, True)


def test_set_detect_anomaly_refuses_what_is_not_a_bool():
    with pytest.raises(TypeError, match="set_detect_anomaly"):
        autograd.set_detect_anomaly(1)
    with pytest.raises(TypeError, match="set_detect_anomaly"):
        autograd.set_detect_anomaly(True, check_nan="yes")
    assert modes() == (False, True)


# ----- functions with right and wrong backwards, in both frameworks ------------------------------


class CubeWrongFactor(Cube):
    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3.0 * x * gy  # wrong: 3x instead of 3x^2


class CubeWrongFactorTorch(CubeTorch):
    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return 3.0 * x * gy


class SinWrongSign(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return np.sin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return -gy * tinypytorch.cos(x)  # wrong sign


class SinWrongSignTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return -gy * torch.cos(x)


def unary(m, name):
    return lambda x: getattr(m, name)(x)


def two_outputs(m):
    return lambda x, w: (m.sin(x) * w, (x * x).sum())


@st.composite
def vectors(draw, low, high, min_size=1, max_size=4):
    return [draw(arrays(np.float64, draw(st.integers(min_size, max_size)), elements=st.floats(low, high)))], [True]


@st.composite
def matrix_pairs(draw):
    n, k, m = (draw(st.integers(1, 3)) for _ in range(3))
    elements = st.floats(-2.0, 2.0)
    return [draw(arrays(np.float64, (n, k), elements=elements)), draw(arrays(np.float64, (k, m), elements=elements))], \
        [True, True]


@st.composite
def layer_inputs(draw):
    n, k, m = draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    elements = st.floats(-2.0, 2.0)
    X, W, b = (draw(arrays(np.float64, shape, elements=elements)) for shape in [(n, k), (m, k), (m,)])
    return [X, W, b], [False, True, True]


@st.composite
def matrix_and_column(draw):
    W = draw(arrays(np.float64, (3, 3), elements=st.floats(-3.0, 3.0)))
    x = draw(arrays(np.float64, (3, 1), elements=st.floats(-3.0, 3.0)))
    return [W, x], [False, True]


@st.composite
def vector_pairs(draw):
    n = draw(st.integers(1, 4))
    return [draw(arrays(np.float64, n, elements=st.floats(-2.0, 2.0))) for _ in range(2)], [True, True]


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
    ours_fn, torch_fn, right_fn, inputs = CASES[name]
    ours, theirs = both(*data.draw(inputs))
    expected = expected_verdict(torch_fn, right_fn, theirs)
    assert gradcheck(ours_fn, ours, raise_exception=False) == expected
    assert torch.autograd.gradcheck(torch_fn, theirs, raise_exception=False) == expected


@settings(max_examples=20)
@given(st.data())
@pytest.mark.parametrize("name", CASES)
def test_gradchecks_jacobians_equal_torchs(name, data):
    ours_fn, torch_fn, right_fn, inputs = CASES[name]
    ours, theirs = both(*data.draw(inputs))
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
    ours_fn, torch_fn, _, inputs = CASES[name]
    ours, theirs = both(*data.draw(inputs))
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


@given(arrays(np.float64, (3, 3), elements=st.floats(-9.0, 9.0)), arrays(np.float64, (3, 1), elements=st.floats(-3, 3)))
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


def test_the_creation_stack_stops_before_function_call_and_what_it_calls():
    # the stack ends at the call of the Function (in the user's code, or in a function such as log that makes
    # it), never inside Function.__call__ or the method that records the graph
    with autograd.set_detect_anomaly(True):
        y = tinypytorch.log(Variable(np.array([1.0, 2.0])))  # the user's line
    stack = y.creator.creation_stack
    assert "y = tinypytorch.log(Variable(np.array([1.0, 2.0])))" in stack
    assert stack.strip().splitlines()[-1].strip() == "return Log()(x)"
    assert "self.record(" not in stack and "core.py" not in stack
