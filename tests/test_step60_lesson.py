"""Step 60's lesson: the page's float16 facts against NumPy's float16 arithmetic and torch.finfo, the flushed
gradients measured again by torch.nn (the same float16 weights loaded into torch's twin), the scaled-loss preview,
and the exercises' solutions: counts of float16 values from their bit patterns, Kahan's sum against the exact 6.0,
the smallest lossless scale from torch's gradients."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step60, pytest.mark.torch]
step = load_step(60)
h = np.float16


def test_the_formats_from_their_bits_equal_finfo():
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        info, ours = torch.finfo(dtype), step.limits[name]
        assert (info.eps, info.max, info.smallest_normal) == (ours["eps"], ours["max"], ours["smallest normal"])
    assert step.limits["float16"]["smallest subnormal"] == np.finfo(h).smallest_subnormal == 2.0**-24
    assert step.limits["bfloat16"]["max"] == torch.finfo(torch.bfloat16).max == 3.3895313892515355e38


def test_the_float16_facts_in_numpy_arithmetic():
    assert h(1e-8) == 0 and h(6e-8) == 2.0**-24 and h(2.0**-25) == 0 and h(2.0**-25 * 1.01) == 2.0**-24
    with np.errstate(over="ignore"):
        assert h(65519) == 65504 and np.isinf(h(65520)) and np.isinf(h(300) * h(300))
    values = np.unique(np.arange(1, 2, 2.0**-12).astype(h))
    assert len(values[values < 2]) == 1024
    assert h(1) + h(1e-4) == h(1)


def test_the_running_sum_stalls_where_the_page_says_in_numpy_and_torch():
    total, stalled_at = h(0), None
    for i in range(6000):
        new = total + h(0.001)
        if new == total and stalled_at is None:
            stalled_at = i + 1
        total = new
    assert (total, stalled_at) == (4.0, step.stall + 1)
    t = torch.zeros((), dtype=torch.float16)
    for _ in range(6000):
        t = t + 0.001
    assert t.item() == 4.0 == step.sums[-1]


def test_the_flushed_shares_are_torchs():
    t32, t16 = step.torch_gradients(torch.float32), step.torch_gradients(torch.float16)
    theirs = step.flushed(t16, t32)
    assert theirs == step.flushed(step.g16, step.g32)
    assert theirs["0.weight"] > 0.25 and theirs["4.bias"] == 0  # the page's reading: deeper is smaller
    for name in t16:
        assert np.all(np.abs(step.g16[name].astype(np.float32) - t16[name]) <= 2.0**-24), name
        np.testing.assert_allclose(step.g32[name], t32[name], rtol=1e-5, atol=1e-6 * np.abs(t32[name]).max())


def test_scaling_the_loss_in_torch_recovers_the_gradients():
    t32 = step.torch_gradients(torch.float32)
    scaled = step.torch_gradients(torch.float16, scale=2.0**10)
    lost = sum(int(np.sum((scaled[n] == 0) & (t32[n] != 0))) for n in t32)
    assert lost == 1  # the page's one entry near 2^-34
    for name in t32:
        unscaled = scaled[name].astype(np.float64) / 2.0**10
        nonzero = t32[name] != 0
        assert np.median(np.abs(unscaled - t32[name])[nonzero] / np.abs(t32[name][nonzero])) < 0.01


def test_exercise_1_counts_float16_values_by_enumeration():
    every = np.arange(2**15, dtype=np.uint16).view(h)  # every non-negative pattern
    assert np.sum(every < 1) == step.below_one == 15360 and np.sum(every < 2.0**-14) == step.subnormal == 1024


def test_exercise_2_kahan_in_float16_ends_near_the_exact_sum():
    assert abs(float(step.kahan(0.001, 6000, h)) - 6000 * float(h(0.001))) <= 2 * float(np.spacing(h(6)))
    assert step.kahan(0.001, 6000, np.float64) == pytest.approx(6.0, rel=1e-12)


def test_exercise_3_the_smallest_lossless_scale_in_torch():
    t32 = step.torch_gradients(torch.float32)

    def lost(k):
        grads = step.torch_gradients(torch.float16, scale=2.0**k)
        return sum(int(np.sum((grads[n] == 0) & (t32[n] != 0))) for n in t32)

    assert lost(11) > 0 and lost(12) == 0 == step.counts[12] and step.counts[11] == lost(11)
