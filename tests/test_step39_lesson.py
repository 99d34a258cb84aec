"""Step 39's lesson: the exercises' solutions (locate_nan, safe_lengths) and the page's claims, against torch."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from steploader import load_step
from tinypytorch import Variable, autograd
from tinypytorch.autograd import anomaly

pytestmark = [pytest.mark.step39, pytest.mark.torch]
step = load_step(39)


@pytest.fixture(autouse=True)
def anomaly_mode_left_as_found():
    assert not anomaly.enabled() and not torch.is_anomaly_enabled()
    yield
    autograd.set_detect_anomaly(False)
    torch.autograd.set_detect_anomaly(False)


def torch_locate_nan(fn, *arrays_):
    """What torch's anomaly mode says: (the node's name without 'Backward0', the line of `fn` that made it)."""
    tensors = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays_]
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        try:
            fn(*tensors).backward()
        except RuntimeError as error:
            name = step.NAN.fullmatch(str(error)).group(1)
            (note,) = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
            return name.removesuffix("Backward0"), step.frame_of(fn.__name__, note)[-1]
    return None


def examples(m):
    """Loss functions written once for both frameworks (`m` is tinypytorch or torch)."""

    def log_tail(x):
        y = m.log(x)
        return y[1:].sum()

    def ratio_tail(x, y):
        q = x / y
        return q[1:].sum()

    def lengths(x, y):
        r2 = x * x + y * y
        return (r2 ** 0.5).sum()

    def harmless(x, y):
        s = m.tanh(x) * y
        return s.sum()

    return [log_tail, ratio_tail, lengths, harmless]


CASES = [
    (0, [[0.0, 1.0]], ("Log", "y = m.log(x)")),  # 0/0 in Log's backward
    (0, [[1.0, 2.0]], None),
    (1, [[0.0, 2.0], [0.0, 1.0]], ("Div", "q = x / y")),  # the dropped 0/0 gets 0/0 again
    (1, [[1.0, 2.0], [3.0, 1.0]], None),
    (2, [[3.0, 0.0], [4.0, 0.0]], ("Mul", "r2 = x * x + y * y")),  # inf from Pow, times x = 0 in Mul
    (2, [[3.0, 1.0], [4.0, 1.0]], None),
    (3, [[0.0, 1.0], [0.0, 0.0]], None),
]


@pytest.mark.parametrize("index, arrays_, expected", CASES)
def test_locate_nan_says_what_torchs_anomaly_mode_says(index, arrays_, expected):
    ours, theirs = examples(tinypytorch)[index], examples(torch)[index]
    assert torch_locate_nan(theirs, *arrays_) == expected  # the expectation is torch's
    assert step.locate_nan(ours, *arrays_) == expected


def test_locate_nan_leaves_anomaly_mode_off():
    step.locate_nan(examples(tinypytorch)[0], [0.0, 1.0])
    assert not anomaly.enabled()


def test_the_page_finds_mul_in_lengths_as_torch_does():
    points = [[3.0, 0.0, -1.0], [4.0, 0.0, 1.0]]
    assert step.locate_nan(step.lengths, *points) == torch_locate_nan(step.lengths, *points) \
        == ("Mul", "r2 = x * x + y * y")
    assert step.locate_nan(step.safe_lengths, *points) is None


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, 5, elements=st.sampled_from([0.0, 0.0, 1.5, -2.0, 1e-3, 3.0])),
       arrays(np.float64, 5, elements=st.sampled_from([0.0, 0.0, -0.5, 2.0, 4.0])))
def test_safe_lengths_has_the_value_of_the_norm_and_torchs_gradient_zero_at_the_origin(xs, ys):
    x, y = Variable(xs.copy()), Variable(ys.copy())
    value = step.safe_lengths(x, y)
    value.backward()
    xt, yt = (torch.tensor(a, requires_grad=True) for a in (xs, ys))
    value_t = torch.linalg.vector_norm(torch.stack([xt, yt]), dim=0).sum()
    value_t.backward()  # torch's norm has gradient 0 at the origin (a subgradient)
    np.testing.assert_allclose(value.data, value_t.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(y.grad.data, yt.grad.numpy(), rtol=1e-12, atol=1e-300)
    assert np.all(np.isfinite(x.grad.data)) and np.all(np.isfinite(y.grad.data))


def test_the_printed_gradient_of_safe_lengths():
    # x.grad = x / r for the vectors (3, 4), (0, 0), (-1, 1): 3/5, 0, -1/sqrt(2)
    np.testing.assert_allclose(step.x.grad.data, [0.6, 0.0, -1 / np.sqrt(2)], rtol=1e-12)
