"""Step 75: the capstone on N processes, as the page measures it: each technique's deepest network within the
per-process budget (its peak within, the next depth's above, every verdict at least 10 KiB from changing), peaks that
grow by a fixed step a layer, at least the bytes the page counts and not far above, the count's parameters and
activations against a torch twin, and the page's check (fully_shard with checkpointing on two processes against one
process and torch's fully_shard with torch.utils.checkpoint). The package's fully_shard with checkpoint is tested in
tests/test_distributed_fsdp_checkpoint.py."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step75, pytest.mark.torch, pytest.mark.distributed]
dist = pytest.importorskip("tinypytorch.distributed")
step = load_step(75)


@pytest.mark.parametrize("n", [1, 2])
def test_each_deepest_network_fits_and_the_next_does_not_with_a_margin(n):
    peaks, depths = step.runs[n]
    for t in step.TECHNIQUES:
        d = depths[t]
        assert 1 <= d < 24, (t, d)
        assert peaks[t, d] <= step.BUDGET - 10 * 1024, (t, d, peaks[t, d])
        assert peaks[t, d + 1] >= step.BUDGET + 10 * 1024, (t, d + 1, peaks[t, d + 1])


def test_on_two_processes_sharding_goes_deeper_and_checkpointing_deeper_still():
    deepest = {n: step.runs[n][1] for n in step.runs}
    assert deepest[2]["data parallel"] < deepest[2]["fully_shard"] < deepest[2]["fully_shard + checkpointing"]
    assert deepest[1]["fully_shard"] <= deepest[1]["data parallel"] < deepest[1]["fully_shard + checkpointing"]
    for t in step.TECHNIQUES:  # half the samples a rank: every technique goes deeper on two processes
        assert deepest[2][t] > deepest[1][t]


@pytest.mark.parametrize("n", [1, 2])
def test_peaks_grow_by_a_fixed_step_a_layer_a_little_above_the_count(n):
    peaks, _ = step.runs[n]
    for t in step.TECHNIQUES:
        slopes = [(peaks[t, b] - peaks[t, a]) / (b - a) for a, b in [(4, 8), (8, 16)]]
        assert max(slopes) - min(slopes) < 0.05 * max(slopes), (t, slopes)
        count = sum(step.counted(t, n))
        assert count <= slopes[-1] <= count + 30 * 1024, (t, slopes[-1], count)


def test_the_count_is_torchs_parameters_and_saved_activations():
    layer = torch.nn.Linear(step.WIDTH, step.WIDTH)
    assert step.psi == sum(p.numel() for p in layer.parameters())
    body = torch.nn.Sequential(layer, torch.nn.Tanh())
    x = torch.randn(32, step.WIDTH, requires_grad=True)
    params, kept = {p.data_ptr() for p in layer.parameters()}, {}

    def pack(t):
        if t.data_ptr() not in params:
            kept[t.data_ptr()] = t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x + body(x)  # a residual layer: Linear saves its input, tanh its output, the sum nothing
    rows = sum(kept.values()) // (32 * step.WIDTH * 4)
    assert rows == step.ROWS_SAVED["data parallel"] == step.ROWS_SAVED["fully_shard"] == 2
    for n in (1, 2, 4):
        state, acts = step.counted("fully_shard", n)
        assert (state, acts) == (16 * step.psi // n, 2 * step.WIDTH * 4 * step.BATCH // n)
        assert step.counted("data parallel", n)[0] == 16 * step.psi
        assert step.counted("fully_shard + checkpointing", n)[1] == acts // 2


def test_fully_shard_with_checkpointing_on_two_ranks_equals_one_process_and_torch():
    first = [np.concatenate([w.ravel(), b]) for w, b in
             (step.drawn(k, i, o, np.float64) for k, (i, o) in
              enumerate([(64, 64)] + [(64, 64)] * step.CHECK_DEPTH + [(64, 10)]))]
    for ours, theirs, acc in step.ranks:
        for a, b, c in zip(ours, theirs, step.one, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
            np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-13)
        assert acc == step.one_accuracy > 0.5
    moved = np.concatenate([p.ravel() for p in step.one])
    assert not np.allclose(moved, np.concatenate(first))  # training moved the parameters
