"""Step 41: the default generator (manual_seed, RNG state, fork_rng), dropout, and train/eval, against torch."""
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from tinypytorch import Variable, random
from tinypytorch import functions as F
from tinypytorch.layers import Dropout, Layer, Linear
from reference import floats

pytestmark = [pytest.mark.step41, pytest.mark.torch]

seeds = st.integers(0, 2**63 - 1)


def pcg64(seed):
    """A fresh PCG64 generator: the reference for the default generator's stream after manual_seed(seed)."""
    return np.random.Generator(np.random.PCG64(seed))


def torch_dropout_with(x, keep, p):
    """torch's CPU dropout formula, input * (noise / (1 - p)), with the noise (the kept mask) given."""
    return x * (torch.from_numpy(keep.astype(np.float64)).to(x.dtype) / (1.0 - p))

# ----- the default generator -------------------------------------------------------------------------

@given(seeds, st.integers(1, 20))
def test_manual_seed_restarts_the_pcg64_stream_of_that_seed(seed, n):
    generator = tinypytorch.manual_seed(seed)
    assert generator is random.default_generator()
    assert random.initial_seed() == seed
    first = random.default_generator().random(n)
    np.testing.assert_array_equal(first, pcg64(seed).random(n))
    tinypytorch.manual_seed(seed)
    np.testing.assert_array_equal(random.default_generator().random(n), first)


def test_a_fresh_process_starts_from_the_fixed_seed_and_draws_the_same_numbers():
    program = ("import tinypytorch; from tinypytorch import random; "
               "print(random.initial_seed(), repr(random.default_generator().random()))")
    output = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    assert output == f"67280421310721 {pcg64(67280421310721).random()!r}\n"


@given(seeds, st.integers(0, 10), st.integers(1, 10))
def test_the_state_round_trips_and_a_snapshot_is_not_moved_by_later_draws(seed, before, after):
    tinypytorch.manual_seed(seed)
    random.default_generator().random(before)
    state = tinypytorch.get_rng_state()
    drawn = random.default_generator().random(after)
    random.default_generator().random(5)
    tinypytorch.set_rng_state(state)
    np.testing.assert_array_equal(random.default_generator().random(after), drawn)
    reference = pcg64(seed)
    reference.random(before)
    np.testing.assert_array_equal(drawn, reference.random(after))


@given(seeds, st.integers(0, 10))
def test_fork_rng_leaves_the_outer_stream_as_if_nothing_was_drawn(seed, inside):
    tinypytorch.manual_seed(seed)
    with random.fork_rng():
        random.default_generator().random(inside)
        tinypytorch.manual_seed(seed + 1)  # even reseeding inside is undone
        random.default_generator().random(3)
    np.testing.assert_array_equal(random.default_generator().random(4), pcg64(seed).random(4))


def assert_restores_the_state_when_the_block_raises(fork_rng):
    """The generator's state after fork_rng()'s block raised is the state before it; the error goes through."""
    tinypytorch.manual_seed(7)
    with pytest.raises(KeyError, match="inside"):
        with fork_rng():
            random.default_generator().random(10)
            raise KeyError("inside")
    assert random.default_generator().random() == pcg64(7).random()


def test_fork_rng_restores_the_state_when_the_block_raises():
    assert_restores_the_state_when_the_block_raises(random.fork_rng)


def test_fork_rng_disabled_lets_the_stream_move_like_torch():
    tinypytorch.manual_seed(7)
    with random.fork_rng(enabled=False):
        random.default_generator().random(2)
    reference = pcg64(7)
    reference.random(2)
    assert random.default_generator().random() == reference.random()
    torch.manual_seed(7)
    with torch.random.fork_rng(enabled=False):
        torch.rand(2)
    after = torch.rand(1)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3)[2:], after)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3", None, np.float64(2.0)])
def test_manual_seed_refuses_what_is_not_an_int_at_least_zero(seed):
    with pytest.raises(ValueError, match="manual_seed: the seed must be an int >= 0"):
        tinypytorch.manual_seed(seed)


def test_manual_seed_takes_numpy_integers():
    tinypytorch.manual_seed(np.int64(5))
    assert random.initial_seed() == 5 and type(random.initial_seed()) is int
    assert random.default_generator().random() == pcg64(5).random()


@pytest.mark.parametrize("state", ["state", {}, None, np.random.MT19937(0).state, {"bit_generator": "Philox"}])
def test_set_rng_state_refuses_what_get_rng_state_did_not_give(state):
    tinypytorch.manual_seed(3)
    with pytest.raises(TypeError, match=r"set_rng_state: expected a state from tinypytorch.get_rng_state\(\)"):
        tinypytorch.set_rng_state(state)
    assert random.default_generator().random() == pcg64(3).random()  # untouched


# ----- dropout -----------------------------------------------------------------------------------------

probabilities = floats(0.05, 0.95)
shapes = st.sampled_from([(1,), (5,), (3, 4), (2, 3, 2)])


@given(seeds, probabilities, shapes, st.data())
def test_dropout_keeps_where_the_generators_draw_is_at_least_p_and_scales_by_one_over_1_minus_p(seed, p, shape, data):
    values = data.draw(arrays(np.float64, shape, elements=floats(-10, 10)))
    tinypytorch.manual_seed(seed)
    y = F.dropout(Variable(values), p=p)
    keep = pcg64(seed).random(shape) >= p
    np.testing.assert_allclose(y.data, np.where(keep, values / (1 - p), 0.0), rtol=1e-15, atol=0)
    assert random.default_generator().random() == pcg64(seed).random(int(np.prod(shape)) + 1)[-1]


@given(seeds, probabilities, shapes, st.data())
def test_dropout_output_and_gradient_equal_torchs_formula_with_the_same_mask_bitwise(seed, p, shape, data):
    values = data.draw(arrays(np.float64, shape, elements=floats(-10, 10)))
    weights = data.draw(arrays(np.float64, shape, elements=floats(-10, 10)))
    tinypytorch.manual_seed(seed)
    x = Variable(values.copy())
    y = F.dropout(x, p=p)
    (y * weights).sum().backward()
    keep = pcg64(seed).random(shape) >= p
    x_t = torch.tensor(values, requires_grad=True)
    y_t = torch_dropout_with(x_t, keep, p)
    (y_t * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())
    np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())


def test_dropout_backward_uses_the_saved_mask_not_a_new_draw():
    tinypytorch.manual_seed(1)
    x = Variable(np.ones(50))
    y = F.dropout(x, p=0.5)
    tinypytorch.manual_seed(2)  # the stream moves elsewhere before backward
    random.default_generator().random(100)
    y.sum().backward()
    keep = pcg64(1).random(50) >= 0.5
    assert 0 < keep.sum() < 50
    np.testing.assert_array_equal(x.grad.data, np.where(keep, 2.0, 0.0))


def test_dropout_saves_a_boolean_mask():
    tinypytorch.manual_seed(1)
    y = F.dropout(Variable(np.ones((4, 5))), p=0.25)
    (mask,) = y.creator.saved_tensors
    assert mask.data.dtype == np.bool_ and mask.data.nbytes == 20
    np.testing.assert_array_equal(mask.data, pcg64(1).random((4, 5)) >= 0.25)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keeps_a_fraction_close_to_1_minus_p_and_the_mean(p):
    n = 200_000
    tinypytorch.manual_seed(0)
    y = F.dropout(Variable(np.ones(n)), p=p)
    sigma = np.sqrt(p * (1 - p) / n)  # of the kept fraction, binomial
    assert abs(np.count_nonzero(y.data) / n - (1 - p)) < 5 * sigma
    assert abs(y.data.mean() - 1.0) < 5 * sigma / (1 - p)


@given(arrays(np.float64, (3, 4), elements=floats(-10, 10)), arrays(np.float64, (3, 4), elements=floats(-2, 2)))
def test_p_zero_and_evaluation_mode_pass_the_input_through_and_draw_nothing_like_torch(values, weights):
    for p, training in [(0.0, True), (0.5, False), (1.0, False)]:
        tinypytorch.manual_seed(4)
        x = Variable(values.copy())
        y = F.dropout(x, p=p, training=training)
        (y * weights).sum().backward()
        assert random.default_generator().random() == pcg64(4).random()  # nothing drawn
        x_t = torch.tensor(values, requires_grad=True)
        torch.manual_seed(4)
        y_t = torch.nn.functional.dropout(x_t, p=p, training=training)
        (y_t * torch.from_numpy(weights)).sum().backward()
        np.testing.assert_array_equal(y.data, y_t.detach().numpy())
        np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())
        np.testing.assert_array_equal(x.grad.data, weights)


def test_p_one_drops_everything_and_gives_zero_gradients_like_torch():
    values = np.random.default_rng(0).standard_normal((3, 4))
    x, x_t = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, y_t = F.dropout(x, p=1.0), torch.nn.functional.dropout(x_t, p=1.0)
    y.sum().backward()
    y_t.sum().backward()
    np.testing.assert_array_equal(y.data, np.zeros((3, 4)))
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())
    np.testing.assert_array_equal(x.grad.data, np.zeros((3, 4)))
    np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())


@given(seeds, probabilities)
def test_float32_stays_float32_and_equals_torchs_float32_formula(seed, p):
    values = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    tinypytorch.manual_seed(seed)
    x = Variable(values.copy())
    y = F.dropout(x, p=p)
    y.sum().backward()
    assert y.dtype == np.float32 and x.grad.dtype == np.float32
    keep = pcg64(seed).random((4, 3)) >= p
    x_t = torch.tensor(values, requires_grad=True)
    y_t = x_t * torch.from_numpy(keep).to(torch.float32) * np.float32(1.0 / (1.0 - p))
    y_t.sum().backward()
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=2e-7, atol=0)
    np.testing.assert_allclose(x.grad.data, x_t.grad.numpy(), rtol=2e-7, atol=0)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_dropout_refuses_a_probability_outside_0_1(p):
    with pytest.raises(ValueError, match="dropout: probability has to be between 0 and 1, but got"):
        F.dropout(Variable(np.ones(3)), p=p)
    with pytest.raises(ValueError, match="Dropout: probability has to be between 0 and 1, but got"):
        Dropout(p)


# ----- train() and eval() ----------------------------------------------------------------------------

class Inner(Layer):
    def __init__(self):
        super().__init__()
        self.linear = Linear(3, 3, rng=np.random.default_rng(0))
        self.drop = Dropout(0.5)

    def forward(self, x):
        return self.drop(self.linear(x))


class Outer(Layer):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.drop = Dropout(0.5)

    def forward(self, x):
        return self.drop(self.inner(x))


def torch_outer():
    inner = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    return torch.nn.Sequential(inner, torch.nn.Dropout(0.5))


def test_train_and_eval_switch_every_sub_layer_and_return_the_layer_like_torch():
    model, model_t = Outer(), torch_outer()
    assert [m.training for m in model.modules()] == [m.training for m in model_t.modules()] == [True] * 5
    assert model.eval() is model and model_t.eval() is model_t
    assert [m.training for m in model.modules()] == [m.training for m in model_t.modules()] == [False] * 5
    assert model.train() is model and model_t.train() is model_t
    assert all(m.training for m in model.modules()) and all(m.training for m in model_t.modules())
    model.inner.train(False)  # a sub-layer alone
    assert [m.training for m in model.modules()] == [True, False, False, False, True]
    model_t[0].train(False)
    assert [m.training for m in model_t.modules()] == [True, False, False, False, True]


def test_a_model_in_evaluation_mode_is_deterministic_and_draws_nothing():
    model = Outer()
    x = np.random.default_rng(2).standard_normal((4, 3))
    model.eval()
    tinypytorch.manual_seed(0)
    y = model(Variable(x)).data
    assert random.default_generator().random() == pcg64(0).random()
    expected = x @ model.inner.linear.weight.data.T + model.inner.linear.bias.data
    np.testing.assert_allclose(y, expected, rtol=1e-14, atol=1e-15)
    model.train()
    tinypytorch.manual_seed(0)
    generator = pcg64(0)
    inner_keep, outer_keep = generator.random((4, 3)) >= 0.5, generator.random((4, 3)) >= 0.5
    np.testing.assert_allclose(model(Variable(x)).data, expected * inner_keep * outer_keep * 4.0, rtol=1e-14,
                               atol=1e-15)


@pytest.mark.parametrize("mode", [1, "yes", None])
def test_train_refuses_a_mode_that_is_not_a_bool_as_torchs(mode):
    with pytest.raises(ValueError, match="^training mode is expected to be boolean$"):
        Outer().train(mode)
    with pytest.raises(ValueError, match="^training mode is expected to be boolean$"):
        torch.nn.Linear(1, 1).train(mode)
