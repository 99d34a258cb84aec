"""Step 39: anomaly mode (detect_anomaly, set_detect_anomaly), against torch."""
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given

import tinypytorch
from reference import values_and_seeds
from steploader import load_step
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import anomaly

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
        y.sum().backward()
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


def test_the_creation_stack_stops_before_function_call_and_what_it_calls():
    # the stack ends at the call of the Function (in the user's code, or in a function such as log that makes
    # it), never inside Function.__call__ or the method that records the graph
    with autograd.set_detect_anomaly(True):
        y = tinypytorch.log(Variable(np.array([1.0, 2.0])))  # the user's line
    stack = y.creator.creation_stack
    assert "y = tinypytorch.log(Variable(np.array([1.0, 2.0])))" in stack
    assert stack.strip().splitlines()[-1].strip() == "return Log()(x)"
    assert "self.record(" not in stack and "core.py" not in stack
