"""Step 60's lesson: float16's range (the page's from the bit counts) against torch.finfo and NumPy's rounding, the
flushed gradients and the zeros of each layer's delta measured again by torch.nn (the same float16 weights loaded
into torch's twin), the one entry scaling by 2^10 leaves flushed, and the exercises' solutions: the gap after 1 and
bfloat16's eps against torch.finfo, float16 sums that stall in NumPy and in torch, the smallest lossless scale from
torch's gradients."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step60, pytest.mark.torch]
step = load_step(60)
h = np.float16


def test_the_ranges_from_the_bits_equal_finfo():
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        info, ours = torch.finfo(dtype), step.limits[name]
        assert (info.max, info.smallest_normal) == (ours["max"], ours["smallest normal"])
        # the smallest subnormal, by enumeration: the bit pattern 1 (torch has no bfloat16 view from NumPy)
        smallest = torch.tensor([1], dtype=torch.int16).view(dtype).item() if dtype != torch.float32 else \
            torch.tensor([1], dtype=torch.int32).view(torch.float32).item()
        assert smallest == ours["smallest subnormal"]
    assert step.limits["float16"]["smallest subnormal"] == np.finfo(h).smallest_subnormal == 2.0**-24
    assert step.limits["float16"]["max"] == 65504 and step.limits["float16"]["smallest normal"] == 2.0**-14


def test_the_rounding_at_both_ends_of_float16_in_numpy_and_torch():
    for value, rounded in ((1e-8, 0.0), (2.0**-25, 0.0), (2.0**-25 * 1.01, 2.0**-24), (65519, 65504.0)):
        assert float(h(value)) == rounded == torch.tensor(value, dtype=torch.float64).half().item()
    with np.errstate(over="ignore"):
        assert np.isinf(h(65520)) and torch.tensor(65520.0).half().isinf()
    assert 2.0**-14 > float(h(1e-5)) > 0 and float(h(1e-5)) != 1e-5  # a subnormal, fewer bits


def test_the_flushed_shares_are_torchs():
    (t32, _), (t16, _) = step.torch_gradients(torch.float32), step.torch_gradients(torch.float16)
    theirs = step.flushed(t16, t32)
    assert theirs == step.flushed(step.g16, step.g32)
    assert theirs["0.weight"] > 0.25 and theirs["4.bias"] == 0  # the page's reading: deeper is smaller
    for name in t16:
        assert np.all(np.abs(step.g16[name].astype(np.float32) - t16[name]) <= 2.0**-24), name
        np.testing.assert_allclose(step.g32[name], t32[name], rtol=1e-5, atol=1e-6 * np.abs(t32[name]).max())


def test_most_flushed_entries_are_representable_and_lost_in_the_samples_shares():
    """The page's reading: most flushed gradients lie above 2^-25, and nearly every per-sample delta at the first
    layer is 0 in float16, in torch as in the package."""
    (t32, d32), (t16, d16) = step.torch_gradients(torch.float32), step.torch_gradients(torch.float16)
    lost = np.concatenate([np.abs(t32[n][(t16[n] == 0) & (t32[n] != 0)]) for n in t32])
    assert lost.size == step.flushed_values.size == 1201 and np.sum(lost > 2.0**-25) == 870
    zeros = {i: np.mean(d16[i][d32[i] != 0] == 0) for i in d32}
    assert zeros[0] > 0.95 and zeros[0] > zeros[2] > zeros[4]
    np.testing.assert_allclose(step.d32[0], d32[0], rtol=1e-4, atol=1e-6 * np.abs(d32[0]).max())


def test_scaling_the_loss_in_torch_recovers_the_gradients_but_one():
    t32, _ = step.torch_gradients(torch.float32)
    scaled, _ = step.torch_gradients(torch.float16, scale=2.0**10)
    lost = [(n, tuple(i)) for n in t32 for i in np.argwhere((scaled[n] == 0) & (t32[n] != 0))]
    assert lost == [("2.weight", (13, 38))] == [(step.entry, (step.row, step.col))]
    assert round(np.log2(abs(t32["2.weight"][13, 38]))) == -34
    # the page's shares (its float32 delta times the layer's input) add up to torch's entry, and cancel:
    # their sizes add up to about 2^11 times it
    assert np.sum(step.shares, dtype=np.float64) == pytest.approx(t32["2.weight"][13, 38], rel=1e-3)
    assert round(np.log2(np.abs(step.shares).sum())) == -23
    for name in t32:
        unscaled = scaled[name].astype(np.float64) / 2.0**10
        nonzero = t32[name] != 0
        assert np.median(np.abs(unscaled - t32[name])[nonzero] / np.abs(t32[name][nonzero])) < 0.01


def test_exercise_1_the_gap_after_1():
    every = np.arange(2**15, dtype=np.uint16).view(h)  # every non-negative pattern
    assert np.sum((every >= 1) & (every < 2)) == step.two - step.one == 1024
    for name, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        assert step.eps[name] == torch.finfo(dtype).eps
    assert torch.finfo(torch.bfloat16).eps == 8 * torch.finfo(torch.float16).eps
    assert (torch.tensor(1.0).half() + torch.tensor(1e-4).half()).item() == 1.0 == h(1) + h(1e-4)


def test_exercise_2_float16_sums_stall_in_numpy_and_torch():
    t = torch.zeros((), dtype=torch.float16)
    for _ in range(6000):
        t = t + 0.001
    assert t.item() == 4.0 == step.total and step.changed == 3070
    exact = float(h(5000 * np.float64(h(0.001))))  # the float16 nearest the exact sum of the float16 0.001s
    assert step.column.sum(axis=0)[0] == 4.0
    assert float(step.column.T.copy().sum(axis=1)[0]) == exact == torch.from_numpy(step.column).sum(dim=0)[0].item()


def test_exercise_3_the_smallest_lossless_scale_in_torch():
    t32, _ = step.torch_gradients(torch.float32)

    def lost(k):
        grads, _ = step.torch_gradients(torch.float16, scale=2.0**k)
        return sum(int(np.sum((grads[n] == 0) & (t32[n] != 0))) for n in t32)

    assert lost(11) > 0 and lost(12) == 0 == step.counts[12] and step.counts[11] == lost(11)
