"""Step 43's lesson: the exercises' solutions, checked against PyTorch's checkpoint and against maths."""
import functools

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import tinypytorch
from steploader import load_step
from tinypytorch import Variable
from tinypytorch.utils import saved_tensors

pytestmark = [pytest.mark.step43, pytest.mark.torch]
step = load_step(43)


# ----- exercise 1: what runs again, and what early stop saves --------------------------------------------------

def late_torch(x):
    """The page's `late`, in PyTorch, logging through the page's `run`."""
    h = step.run("times 2", lambda h: h * 2.0, x)
    h = step.run("sin", torch.sin, h)
    h = step.run("plus 1.5", lambda h: h + 1.5, h)
    h = step.run("neg", lambda h: -h, h)
    return step.run("over 3", lambda h: h / 3.0, h)


def torch_reruns(function, early_stop):
    step.log.clear()
    y = torch_checkpoint.checkpoint(function, torch.tensor(step.x0, requires_grad=True), use_reentrant=False,
                                    early_stop=early_stop).sum()
    in_forward = len(step.log)
    y.backward()
    return list(step.log[in_forward:])


@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("ours, theirs", [(step.late, late_torch), (step.f, functools.partial(step.f, m=torch))],
                         ids=["late", "f"])
def test_reruns_lists_what_torch_recomputes(ours, theirs, early_stop):
    again = step.reruns(ours, early_stop)
    assert all(name.endswith(" (again)") for name in again)  # they ran inside the recomputation
    assert [name.removesuffix(" (again)") for name in again] == torch_reruns(theirs, early_stop)


def test_early_stop_stops_after_the_last_saving_operation_of_late():
    # only sin saves (its input): early stop reruns up to sin, the second of five operations
    assert step.reruns(step.late, True) == ["times 2 (again)", "sin (again)"]
    assert len(step.reruns(step.late, False)) == 5


# ----- exercise 2: a checkpoint of one's own -------------------------------------------------------------------

CASES = [  # (ours, torch's, derivative by hand)
    (tinypytorch.exp, torch.exp, np.exp),  # saves its output
    (tinypytorch.sin, torch.sin, np.cos),  # saves its input
    (tinypytorch.tanh, torch.tanh, lambda x: 1 - np.tanh(x) ** 2),  # saves its output
    (lambda x: x**3, lambda x: x**3, lambda x: 3 * x**2),  # saves its input
]


@pytest.mark.parametrize("ours, theirs, derivative", CASES, ids=["exp", "sin", "tanh", "cube"])
def test_my_checkpoint_keeps_nothing_recomputes_once_and_gives_torchs_gradient(ours, theirs, derivative):
    calls = [0]

    def counted(x):
        calls[0] += 1
        return ours(x)

    x0 = np.array([-1.5, 0.25, 2.0])
    x = Variable(x0.copy())
    y = step.my_checkpoint(counted, x).sum()
    assert calls[0] == 1
    assert [saved.packed for _, saved in saved_tensors(y)] == [None]  # nothing kept for backward
    y.backward()
    assert calls[0] == 2  # backward ran the function once more
    xt = torch.tensor(x0, requires_grad=True)
    theirs(xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.data, derivative(x0), rtol=1e-13)


def test_my_checkpoint_returns_the_functions_value():
    x0 = np.array([0.5, 1.0])
    np.testing.assert_array_equal(step.my_checkpoint(tinypytorch.exp, Variable(x0)).data, np.exp(x0))


# ----- exercise 3: the determinism check fires ------------------------------------------------------------------

def test_drift_error_is_the_count_error_torch_raises():
    message = step.drift_error()
    # forward: sin saves x, two tanh save their outputs = 3; the recomputation has one tanh = 2
    assert message == ("tinypytorch.utils.checkpoint: A different number of tensors was saved during the original "
                       "forward and recomputation.\nNumber of tensors saved during forward: 3\n"
                       "Number of tensors saved during recomputation: 2.")
    runs = [0]

    def drifting_t(x):
        runs[0] += 1
        h = torch.sin(x)
        for _ in range(3 - runs[0]):
            h = torch.tanh(h)
        return h

    y = torch_checkpoint.checkpoint(drifting_t, torch.tensor(step.x0, requires_grad=True), use_reentrant=False).sum()
    with pytest.raises(torch_checkpoint.CheckpointError) as error:
        y.backward()
    assert str(error.value).startswith(message.replace("tinypytorch.utils", "torch.utils"))
    assert step.drift_error() == message  # the counter is reset: the same error every time


# ----- the page's printed figures -------------------------------------------------------------------------------

def test_the_pages_holder_states():
    # four holders: sin's input, the product's two factors, tanh's output; all handed out after backward
    x = Variable(step.x0.copy())
    y = step.checkpoint(step.g, x, use_reentrant=False).sum()
    step.frame = saved_tensors(y)[0][1].unpack_hook.__self__
    assert [step.state(r) for r in step.frame.holders] == ["empty"] * 4
    y.backward(retain_graph=True)
    assert [step.state(r) for r in step.frame.holders] == ["handed out"] * 4
    plain = Variable(step.x0.copy())
    tinypytorch.tanh(tinypytorch.sin(plain) * plain).sum().backward()
    np.testing.assert_array_equal(x.grad.data, plain.grad.data)
