"""Step 41's lesson: the exercises' solutions (inverted dropout by hand, a fork_rng of one's own) and the numbers
the page prints and draws, against PCG64 drawn here, the dropout formula worked out here, and torch."""
import numpy as np
import pytest
import torch

import tinypytorch
from steploader import load_step
from test_step41 import assert_restores_the_state_when_the_block_raises, pcg64
from tinypytorch import Variable, random
from tinypytorch import functions as F

pytestmark = [pytest.mark.step41, pytest.mark.torch]
step = load_step(41)


# ----- exercise 1: inverted dropout by hand -----------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 3, 12345])
@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5)])
def test_inverted_dropout_keeps_where_pcg64_draws_at_least_p_and_divides_by_1_minus_p(seed, p, shape):
    x = np.random.default_rng(1).standard_normal(shape)
    keep = pcg64(seed).random(shape) >= p
    got = step.inverted_dropout(x, p, seed)
    assert got.shape == shape
    np.testing.assert_array_equal(got == 0, ~keep)
    np.testing.assert_allclose(got, np.where(keep, x / (1.0 - p), 0.0), rtol=1e-15, atol=0)


@pytest.mark.parametrize("seed, p", [(0, 0.5), (3, 0.25), (99, 0.8)])
def test_inverted_dropout_reproduces_f_dropout_from_the_same_seed(seed, p):
    x = np.random.default_rng(2).standard_normal((4, 6))
    tinypytorch.manual_seed(seed)
    np.testing.assert_array_equal(step.inverted_dropout(x, p, seed), F.dropout(Variable(x), p).data)


def test_inverted_dropout_keeps_the_expected_value_like_torchs_dropout():
    n, p = 200_000, 0.3
    mean = step.inverted_dropout(np.ones(n), p, 5).mean()
    torch.manual_seed(5)
    mean_t = torch.nn.functional.dropout(torch.ones(n, dtype=torch.float64), p).mean().item()
    sigma = np.sqrt(p / (1 - p) / n)  # of the mean: each output has variance p / (1 - p)
    assert abs(mean - 1.0) < 5 * sigma and abs(mean_t - 1.0) < 5 * sigma


# ----- exercise 2: a fork_rng of one's own -------------------------------------------------------------------

@pytest.mark.parametrize("seed, inside", [(0, 1), (7, 10), (2**40, 0)])
def test_my_fork_rng_leaves_the_stream_outside_as_if_nothing_was_drawn(seed, inside):
    tinypytorch.manual_seed(seed)
    before = random.default_generator().random(2)
    with step.my_fork_rng():
        random.default_generator().random(inside)
        tinypytorch.manual_seed(seed + 1)  # even reseeding inside is undone
        random.default_generator().random(3)
    reference = pcg64(seed)
    np.testing.assert_array_equal(before, reference.random(2))
    np.testing.assert_array_equal(random.default_generator().random(4), reference.random(4))


def test_my_fork_rng_restores_the_state_when_the_block_raises_and_lets_the_error_through():
    assert_restores_the_state_when_the_block_raises(step.my_fork_rng)


def test_my_fork_rng_nests():
    tinypytorch.manual_seed(6)
    with step.my_fork_rng():
        random.default_generator().random(3)
        with step.my_fork_rng():
            random.default_generator().random(5)
        inner_after = random.default_generator().random()
    reference = pcg64(6)
    assert inner_after == reference.random(4)[-1]
    assert random.default_generator().random() == pcg64(6).random()


# ----- what the page prints and draws ---------------------------------------------------------------------------

def test_the_printed_streams_are_pcg64s():
    stream = pcg64(0).random(13)
    np.testing.assert_array_equal(step.first, stream[:4])
    np.testing.assert_array_equal(step.stream, stream)  # the picture's tape
    np.testing.assert_array_equal(step.plain, stream[:4])
    np.testing.assert_array_equal(step.before, stream[:2])
    np.testing.assert_array_equal(step.inside, stream[2:7])
    np.testing.assert_array_equal(step.after, stream[2:4])
    assert step.show(step.first) == "[0.6370, 0.2698, 0.0410, 0.0165]"


def test_the_printed_mask_is_the_dropout_outputs_pattern():
    keep = pcg64(0).random((2, 6)) >= 0.5
    np.testing.assert_array_equal(step.by_hand, keep)
    tinypytorch.manual_seed(0)
    np.testing.assert_array_equal(F.dropout(Variable(np.ones((2, 6))), 0.5).data, np.where(keep, 2.0, 0.0))


@pytest.mark.parametrize("p", [0.2, 0.6])
def test_dropout_law_agrees_with_the_binomial_law_in_both_frameworks(p):
    n = 100_000
    for framework in ("tinypytorch", "torch"):
        values, kept, unchanged = step.dropout_law(framework, p, n=n, seed=1)
        assert values == {0.0, 1.0 / (1.0 - p)} and unchanged
        assert abs(kept - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)


def test_the_model_in_evaluation_mode_is_its_plain_computation():
    net, x = step.net, Variable(np.random.default_rng(0).standard_normal((3, 4)))
    net.eval()
    try:
        hidden, out = net.hidden, net.out
        expected = np.tanh(x.data @ hidden.weight.data.T + hidden.bias.data) @ out.weight.data.T + out.bias.data
        np.testing.assert_allclose(net(x).data, expected, rtol=1e-14, atol=1e-15)
    finally:
        net.train()
