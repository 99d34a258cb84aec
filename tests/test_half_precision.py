"""float16 operations computed as PyTorch computes them on the CPU: in float32 (its "opmath" type), rounded to
float16 once at the end. An operation that NumPy evaluates as several float16 steps rounds at every step and can
land on another float16; near 1 that is the difference between a sigmoid of 1.0 (a zero gradient) and of
0.99951 (torch's)."""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = pytest.mark.torch


def ulps_apart(a, b):
    """How many float16 steps apart two float16 arrays are (their bit patterns, ordered as integers)."""
    def ordered(x):
        bits = x.astype(np.float16).view(np.int16).astype(np.int32)
        return np.where(bits < 0, -32768 - bits, bits)
    return np.abs(ordered(a) - ordered(b))


def test_sigmoid_of_float16_is_torchs_within_one_step_everywhere():
    xs = np.linspace(-12, 12, 20001).astype(np.float16)
    ours = tp.sigmoid(tp.from_numpy(xs)).data
    theirs = torch.sigmoid(torch.from_numpy(xs)).numpy()
    assert ours.dtype == np.float16
    assert ulps_apart(ours, theirs).max() <= 1  # (computed in float16 steps, 6,310 of these differed, by up to 2)


def test_sigmoid_just_below_one_keeps_its_gradient_as_torchs():
    # sigmoid(8.305) = 1 - 2.47e-4 lies just below the halfway point 1 - 2^-12 between float16's 0.99951 and 1:
    # rounded once it is 0.99951, and y (1 - y) is not zero (found by tests/test_differential.py's fuzzing)
    x = np.float16(np.exp(np.float16(np.exp(np.float16(0.75)))))
    ours = tp.tensor(x, requires_grad=True)
    tp.sigmoid(ours).backward()
    theirs = torch.tensor(x, requires_grad=True)
    torch.sigmoid(theirs).backward()
    assert float(theirs.grad) != 0.0
    assert float(ours.grad.data) == pytest.approx(float(theirs.grad), rel=1e-2)
