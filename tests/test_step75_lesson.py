"""Step 75's lesson: the exercises' solutions (the deepest depth predicted from two peaks, against worked arithmetic
and the page's search; segments of fully_shard-ed layers checkpointed together, against torch's fully_shard with the
same segments and against one process)."""
import numpy as np
import pytest

from steploader import load_step

pytestmark = [pytest.mark.step75, pytest.mark.torch, pytest.mark.distributed]  # the page starts processes
step = load_step(75)


def test_the_prediction_is_the_arithmetic_of_a_straight_line():
    # 1000 bytes at depth 8, 1800 at 16: 100 a layer; 1500 allows 5 layers more than 8, 1499 only 4
    assert step.predicted_deepest(1000, 1800, 1500) == 13
    assert step.predicted_deepest(1000, 1800, 1499) == 12
    assert step.predicted_deepest(1000, 1800, 1000) == 8


@pytest.mark.parametrize("n", [1, 2])
def test_the_prediction_from_two_peaks_is_the_searchs_verdict_within_one_layer(n):
    peaks, depths = step.runs[n]
    for t in step.TECHNIQUES:
        predicted = step.predicted_deepest(peaks[t, 8], peaks[t, 16], step.BUDGET)
        assert abs(predicted - depths[t]) <= 1, (t, predicted, depths[t])


def test_segments_under_fully_shard_train_as_torchs_and_as_one_process():
    alone = step.dist.spawn(step.trained, 1, args=(1, "data parallel", 6), timeout=120)[0]
    for ours, theirs in step.segments:
        for a, b, c in zip(ours, theirs, alone, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
            np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-13)
