"""Anomaly detection (step 39): find the forward operation behind a failing or NaN-producing backward.

    with tinypytorch.autograd.detect_anomaly():   # as torch.autograd.detect_anomaly
        loss.backward()
    tinypytorch.autograd.set_detect_anomaly(True)  # on from now on (also a context manager)

In anomaly mode every recorded function keeps the stack of the forward call that made it.
An error raised by its backward carries that stack as a note, and (with `check_nan`) a
backward that returns NaN raises "Function 'Log' returned nan values in its 0th output."
"""
import pathlib
import traceback
import warnings

from tinypytorch import cuda, grad_mode

def enabled():
    """Whether anomaly mode is on (its switch is in tinypytorch.grad_mode, with every other mode)."""
    return grad_mode.is_anomaly_enabled()


is_anomaly_check_nan_enabled = grad_mode.is_anomaly_check_nan_enabled


class set_detect_anomaly:  # noqa: N801 (PyTorch's name)
    """Turn anomaly mode on or off now; used in a `with` block, the old mode returns at its end."""

    def __init__(self, mode, check_nan=True):
        if not isinstance(mode, bool) or not isinstance(check_nan, bool):
            raise TypeError("set_detect_anomaly: mode and check_nan must be bools")
        self.previous = grad_mode.set_anomaly(mode, check_nan)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        grad_mode.restore_anomaly(self.previous)
        return False


class detect_anomaly(set_detect_anomaly):  # noqa: N801 (PyTorch's name)
    """A context in which anomaly mode is on: slow, for debugging."""

    def __init__(self, check_nan=True):
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should "
                      "only be enabled for debugging.", UserWarning, stacklevel=2)
        super().__init__(True, check_nan)


# the files whose frames lie between the call of an operation and its record: the door, the mode stack, its entries
_DOOR = {"anomaly.py", "core.py", "modes.py", "grad_mode.py", "batching_state.py", "autocast_mode.py",
         "selective_checkpoint.py"}


def record_creation(function):
    """Keep where `function` was made: the stack of the forward call, without the package's own frames."""
    stack = traceback.extract_stack()
    while stack and pathlib.Path(stack[-1].filename).name in _DOOR:  # this function, record, the door and the
        stack.pop()  # mode stack's entries between the call and record (step 68)
    function.creation_stack = "".join(traceback.format_list(stack))


def forward_traceback(function):
    name = type(function).__name__
    return (f"Error detected in {name}. Traceback of forward call that caused the error:\n"
            f"{getattr(function, 'creation_stack', '  (made before anomaly mode was enabled)')}")


def checked_backward(function, gys, call_backward):
    """`call_backward(function, gys)` in anomaly mode: errors name the forward call; NaN raises."""
    try:
        gxs = call_backward(function, gys)
    except Exception as error:
        error.add_note(forward_traceback(function))
        raise
    if grad_mode.is_anomaly_check_nan_enabled():
        for i, gx in enumerate(gxs):
            data = gx if gx is None or isinstance(gx, cuda.array_types) else gx.data  # a Variable, or an array
            if data is not None and cuda.get_array_module(data).isnan(data).any():
                error = RuntimeError(f"Function '{type(function).__name__}' returned nan values in its {i}th output.")
                error.add_note(forward_traceback(function))
                raise error
    return gxs
