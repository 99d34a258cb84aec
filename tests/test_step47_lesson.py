"""Step 47's lesson: the exercises' solutions (alphas learned and kept away from 0; a whole stack of columns
inverted from its last states; the alpha where float32 loses 1% of the gradient), checked against torch, states
known in advance and errors computed here."""
import numpy as np
import pytest
import torch

from steploader import load_step
from tinypytorch import Parameter, Variable, no_grad
from tinypytorch.reversible import ALPHA_MIN

pytestmark = [pytest.mark.step47, pytest.mark.torch]
step = load_step(47)


def revcol_clamp_abs(data, value=1e-3):
    """RevCol's SubNet._clamp_abs (models/revcol.py): |alpha| >= value, sign kept."""
    with torch.no_grad():
        sign = data.sign()
        data.abs_().clamp_(value)
        data *= sign


def random_alphas(seed, zeros_on_top=5):
    rng = np.random.default_rng(seed)
    alphas = [rng.uniform(0.2, 1.0, (1, d)) * rng.choice([-1.0, 1.0], (1, d)) for d in step.WIDTHS]
    alphas[-1][0, :zeros_on_top] = 0.0
    return alphas


def torch_states(column, alphas=None):
    """The column's new states from step.X and step.OLD, computed by its torch twin, with `alphas` if given."""
    twin = step.TorchColumn(column)
    with torch.no_grad():
        if alphas is not None:
            for a_t, a in zip(twin.alphas, alphas):
                a_t.copy_(torch.from_numpy(a))
        new = twin.plain(torch.from_numpy(step.X), [torch.from_numpy(c) for c in step.OLD])
    return [c.numpy() for c in new]


def torch_train_alphas(column, targets, steps, lr):
    """The same training in torch: RevCol's clamp before each forward, plain SGD on the alphas alone."""
    twin = step.TorchColumn(column)
    for level in twin.levels:
        level.requires_grad_(False)
    x, old = torch.from_numpy(step.X), [torch.from_numpy(c) for c in step.OLD]
    targets = [torch.from_numpy(t) for t in targets]
    for _ in range(steps):
        for alpha in twin.alphas:
            revcol_clamp_abs(alpha.data)
            alpha.grad = None
        new = twin.plain(x, old)
        loss = sum(((c - t) ** 2).sum() for c, t in zip(new, targets)) / step.ROWS
        loss.backward()
        with torch.no_grad():
            for alpha in twin.alphas:
                alpha -= lr * alpha.grad
    for alpha in twin.alphas:
        revcol_clamp_abs(alpha.data)
    return [a.detach().numpy() for a in twin.alphas], loss.item()


# ----- exercise 1: learning alpha -----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 3])
def test_make_targets_gives_torchs_states_with_the_alphas_replaced_zeros_included(seed):
    column, alphas = step.make_stack(1, seed=seed)[0], random_alphas(seed + 10)
    for ours, theirs in zip(step.make_targets(column, alphas), torch_states(column, alphas), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("steps, lr", [(5, 0.1), (40, 0.1), (30, 0.2)])
def test_training_the_alphas_follows_torch_with_revcols_clamp_step_by_step(steps, lr):
    column = step.make_stack(1, seed=1)[0]
    targets = torch_states(column, random_alphas(7))
    theirs, loss_t = torch_train_alphas(column, targets, steps, lr)  # the twin copies the alphas before training
    loss = step.train_alphas(column, targets, steps, lr)
    for alpha, alpha_t in zip(column.alphas, theirs, strict=True):
        np.testing.assert_allclose(alpha.data, alpha_t, rtol=1e-8, atol=1e-10)
    assert loss == pytest.approx(loss_t, rel=1e-8)


@pytest.mark.parametrize("seed", [0, 5, 9])
def test_the_alphas_reach_reachable_targets_and_clamp_alpha_holds_the_zeros_at_1e_3(seed):
    column, alphas = step.make_stack(1, seed=seed)[0], random_alphas(seed + 20)
    final_loss = step.train_alphas(column, torch_states(column, alphas))
    for alpha, target in zip(column.alphas, alphas, strict=True):
        assert isinstance(alpha, Parameter)
        np.testing.assert_allclose(alpha.data[target != 0], target[target != 0], atol=1e-3)
        np.testing.assert_array_equal(np.abs(alpha.data[target == 0]), ALPHA_MIN)  # lifted to the floor exactly
    # what is left: the five clamped channels' 1e-3 * c_3, squared, summed over the rows, over ROWS
    floor = (1e-3 * step.OLD[-1][:, :5]) ** 2
    assert final_loss < 10 * floor.sum() / step.ROWS


def test_the_page_trained_its_column_to_its_targets():
    for alpha, target in zip(step.learner.alphas, step.TARGET_ALPHAS, strict=True):
        np.testing.assert_allclose(alpha.data[target != 0], target[target != 0], atol=1e-3)
    np.testing.assert_array_equal(np.abs(step.learner.alphas[-1].data[step.TARGET_ALPHAS[-1] == 0]), 1e-3)


# ----- exercise 2: inverting a whole stack ---------------------------------------------------------------------------

def forward_recording(columns, start):
    """Every column's received states (plain runs, recorded here) and the last column's returned states."""
    received, cs = [], [Variable(c) for c in start]
    with no_grad():
        for column in columns:
            received.append([c.data for c in cs])
            column.reversible = False
            cs = column(Variable(step.X), *cs)
            column.reversible = True
    return received, [c.data for c in cs]


@pytest.mark.parametrize("n_columns", [1, 2, 5])
@pytest.mark.parametrize("seed", [0, 11])
def test_invert_stack_recovers_every_columns_received_states(n_columns, seed):
    columns = step.make_stack(n_columns, seed=seed)
    start = [np.random.default_rng(seed + 1).standard_normal((step.ROWS, d)) for d in step.WIDTHS]
    received, last = forward_recording(columns, start)
    back = step.invert_stack(columns, step.X, last)
    assert len(back) == n_columns
    for states, expected in zip(back, received, strict=True):
        for b, e in zip(states, expected, strict=True):
            assert isinstance(b, np.ndarray)
            np.testing.assert_allclose(b, e, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", [2, 4])
def test_invert_column_undoes_torchs_column(seed):
    column = step.make_stack(1, seed=seed)[0]
    with no_grad():
        for alpha in column.alphas:  # alphas other than 0.5, of both signs, per channel
            alpha.data[...] = np.random.default_rng(seed).uniform(0.3, 1.5, alpha.shape) * np.sign(
                np.random.default_rng(seed + 1).standard_normal(alpha.shape))
    back = step.invert_column(column, step.X, torch_states(column))
    for b, old in zip(back, step.OLD, strict=True):
        np.testing.assert_allclose(b, old, rtol=0, atol=1e-11)


def test_invert_stack_needs_the_columns_in_their_order():
    columns = step.make_stack(2, seed=3)
    start = [np.random.default_rng(4).standard_normal((step.ROWS, d)) for d in step.WIDTHS]
    _, last = forward_recording(columns, start)
    right = step.invert_stack(columns, step.X, last)[0]
    wrong = step.invert_stack(columns[::-1], step.X, last)[-1]
    assert max(np.abs(r - s).max() for r, s in zip(right, start)) < 1e-10
    assert max(np.abs(w - s).max() for w, s in zip(wrong, start)) > 1e-2


# ----- exercise 3: where float32 gives up -----------------------------------------------------------------------------

def error_against_torch(alpha):
    """The float32 reversible column's gradients (x, old states, every parameter) against torch's float64 plain run,
    max |difference| relative to the largest torch gradient, computed here."""
    column = step.make_stack(1, alpha=alpha, dtype=np.float32)[0]
    twin = step.TorchColumn(step.make_stack(1, alpha=alpha)[0])  # the same weights, in float64
    x_t = torch.tensor(step.X, requires_grad=True)
    old_t = [torch.tensor(c, requires_grad=True) for c in step.OLD]
    step.torch_loss(twin.plain(x_t, old_t)).backward()
    theirs = [x_t.grad.numpy()] + [c.grad.numpy() for c in old_t] + [p.grad.numpy() for p in twin.ordered()]
    x, old = Variable(step.X.astype(np.float32)), [Variable(c.astype(np.float32)) for c in step.OLD]
    step.loss_of(column(x, *old)).backward()
    ours = [x.grad.data] + [c.grad.data for c in old] + [p.grad.data for p in column.params()]
    for g in ours:
        assert g.dtype == np.float32
    largest = max(np.abs(t).max() for t in theirs)
    return max(np.abs(o.astype(np.float64) - t).max() for o, t in zip(ours, theirs, strict=True)) / largest


@pytest.mark.parametrize("alpha", [0.5, 0.05, 0.01])
def test_gradient_error_is_the_float32_columns_distance_from_torchs_float64_gradients(alpha):
    assert step.gradient_error(alpha) == pytest.approx(error_against_torch(alpha), rel=1e-6)


def test_in_float64_the_gradient_error_stays_at_rounding_over_the_grid():
    for alpha in step.ALPHA_GRID:
        assert step.gradient_error(alpha, np.float64) < 1e-8


def test_the_alpha_found_is_the_first_of_the_grid_that_loses_one_percent():
    found = step.first_alpha_losing(0.01)
    k = step.ALPHA_GRID.index(found)
    assert k > 0
    assert error_against_torch(found) > 1e-2
    assert all(error_against_torch(a) <= 1e-2 for a in step.ALPHA_GRID[:k])
    assert step.ALPHA_LOST == found


def test_a_stricter_fraction_is_lost_at_a_larger_alpha():
    strict = step.first_alpha_losing(3e-6)
    assert strict > step.first_alpha_losing(0.01)
    assert error_against_torch(strict) > 3e-6
