"""Step 50: mean, max and logsumexp along axes, softmax, log_softmax and cross_entropy, against PyTorch (the
operation table, tests/operations.py, runs each to third order on every backend; these test what the page claims:
stability at large scores, the Jacobian, the loss's gradient, reductions and ignore_index, and bad input)."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tinypytorch
from tinypytorch import Variable, autograd
from tinypytorch import classification as C
from tinypytorch import functions as F
from reference import floats

pytestmark = [pytest.mark.step50, pytest.mark.torch]

scores = arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 6)), elements=floats(-1e3, 1e3))


def value_and_grad(fn, values, weights):
    x = Variable(values.copy())
    y = fn(x)
    (y * weights[: y.numel()].reshape(y.shape)).sum().backward()
    return y.data, x.grad.data


def torch_value_and_grad(fn, values, weights):
    x = torch.tensor(values, requires_grad=True)
    y = fn(x)
    (y * torch.tensor(weights[: y.numel()].reshape(tuple(y.shape)))).sum().backward()
    return y.detach().numpy(), x.grad.numpy()


PAIRS = {
    "softmax": (lambda v: C.softmax(v, axis=1), lambda v: torch.softmax(v, 1)),
    "softmax axis 0": (lambda v: C.softmax(v, axis=0), lambda v: torch.softmax(v, 0)),
    "log_softmax": (lambda v: C.log_softmax(v, axis=1), lambda v: torch.log_softmax(v, 1)),
    "logsumexp": (lambda v: F.logsumexp(v, axis=1), lambda v: torch.logsumexp(v, 1)),
    "logsumexp all": (lambda v: F.logsumexp(v), lambda v: torch.logsumexp(v, (0, 1))),
    "mean": (lambda v: v.mean(axis=0, keepdims=True), lambda v: v.mean(0, keepdim=True)),
    "max": (lambda v: v.max(axis=1), lambda v: v.amax(1)),
}


@pytest.mark.parametrize("name", PAIRS)
@given(values=scores, seed=st.integers(0, 100))
def test_values_and_gradients_equal_torch_for_scores_up_to_1e3(name, values, seed):
    weights = np.random.default_rng(seed).uniform(-1, 1, values.size)
    ours, theirs = PAIRS[name]
    (y, g), (yt, gt) = value_and_grad(ours, values, weights), torch_value_and_grad(theirs, values, weights)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(g))
    scale = max(1.0, np.abs(values).max())
    np.testing.assert_allclose(y, yt, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(g, gt, rtol=1e-10, atol=1e-12)


@given(values=arrays(np.float64, st.integers(1, 6), elements=floats(-50, 50)))
def test_softmax_backward_is_the_jacobian_si_delta_ij_minus_sj_times_the_gradient(values):
    g = np.linspace(-1.0, 1.0, values.size)
    x = Variable(values.copy())
    (C.softmax(x, axis=0) * g).sum().backward()
    s = np.exp(values - values.max()) / np.exp(values - values.max()).sum()
    np.testing.assert_allclose(x.grad.data, (np.diag(s) - np.outer(s, s)).T @ g, rtol=1e-12, atol=1e-15)


def test_naive_log_softmax_is_infinite_with_nan_gradients_in_both_frameworks_and_log_softmax_is_not():
    big = np.array([[1000.0, 0.0, -1000.0]])
    x, xt = Variable(big.copy()), torch.tensor(big, requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        naive, naive_t = tinypytorch.log(C.softmax(x, axis=1)), torch.log(torch.softmax(xt, 1))
        naive.sum().backward()
        naive_t.sum().backward()
    assert np.isinf(naive.data).sum() == 2 and torch.isinf(naive_t).sum() == 2
    assert np.isnan(x.grad.data).all() and torch.isnan(xt.grad).all()
    stable = C.log_softmax(Variable(big), axis=1)
    np.testing.assert_array_equal(stable.data, [[0.0, -1000.0, -2000.0]])


def test_logsumexp_of_a_row_of_minus_infinity_is_minus_infinity_like_torch():
    row = np.array([[-np.inf, -np.inf], [0.0, 0.0]])
    with np.errstate(divide="ignore"):
        ours = F.logsumexp(Variable(row), axis=1).data
    np.testing.assert_array_equal(ours, torch.logsumexp(torch.tensor(row), 1).numpy())


def test_the_max_shares_the_gradient_among_ties_like_torch_amax():
    values = np.array([[3.0, 1.0, 3.0, 3.0]])
    (_, g), (_, gt) = (value_and_grad(lambda v: v.max(axis=1), values, np.ones(1)),
                       torch_value_and_grad(lambda v: v.amax(1), values, np.ones(1)))
    np.testing.assert_array_equal(g, gt)
    np.testing.assert_array_equal(g, [[1 / 3, 0.0, 1 / 3, 1 / 3]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 1])
@given(data=st.data())
def test_cross_entropy_equals_torchs_for_each_reduction_and_ignore_index(reduction, ignore_index, data):
    n, classes = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 5))
    values = data.draw(arrays(np.float64, (n, classes), elements=floats(-1e3, 1e3)))
    target = np.array(data.draw(st.lists(st.sampled_from(list(range(classes)) + [ignore_index]), min_size=n,
                                         max_size=n)))
    x, xt = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    with np.errstate(invalid="ignore"):
        loss = C.cross_entropy(x, target, reduction, ignore_index)
    loss_t = torch.nn.functional.cross_entropy(xt, torch.tensor(target), reduction=reduction,
                                               ignore_index=ignore_index)
    np.testing.assert_allclose(loss.data, loss_t.detach().numpy(), rtol=1e-12, atol=1e-9, equal_nan=True)
    if np.all(np.isfinite(loss.data)):
        loss.sum().backward()
        loss_t.sum().backward()
        np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_the_gradient_of_the_mean_loss_is_softmax_minus_one_hot_over_the_rows_that_count():
    values = np.random.default_rng(0).normal(size=(4, 3))
    target = np.array([2, -100, 0, 1])
    x = Variable(values.copy())
    C.cross_entropy(x, target).backward()
    s = np.exp(values) / np.exp(values).sum(axis=1, keepdims=True)
    counts = (target != -100)[:, None]
    expected = (s - np.eye(3)[np.where(counts[:, 0], target, 0)]) * counts / counts.sum()
    np.testing.assert_allclose(x.grad.data, expected, rtol=1e-13, atol=1e-16)


def test_the_mean_over_only_ignored_rows_is_nan_like_torch():
    values = np.ones((2, 3))
    ours = C.cross_entropy(Variable(values), np.array([-100, -100])).data
    theirs = torch.nn.functional.cross_entropy(torch.tensor(values), torch.tensor([-100, -100]))
    assert np.isnan(ours) and torch.isnan(theirs)


def test_every_backward_passes_gradcheck_and_gradgradcheck():
    x = Variable(np.random.default_rng(1).normal(size=(3, 4)))
    for fn in (lambda v: C.softmax(v, axis=1), lambda v: C.log_softmax(v, axis=0), lambda v: F.logsumexp(v, axis=1),
               lambda v: v.mean(axis=1), lambda v: v.max(axis=0), lambda v: C.cross_entropy(v, [3, 0, 1], "sum")):
        assert autograd.gradcheck(fn, x) and autograd.gradgradcheck(fn, x)


def test_accuracy_counts_the_rows_whose_largest_score_is_the_target():
    values = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    assert C.accuracy(Variable(values), np.array([1, 0, 0, 0])) == 3 / 4  # rows 0, 1, 3 right


def test_what_each_operation_saves_is_what_torch_saves_for_cross_entropy():
    saved, saved_t = [], []
    values, target = np.ones((2, 3)), np.array([0, 2])
    with tinypytorch.autograd.graph.saved_tensors_hooks(lambda v: saved.append((v.shape, str(v.dtype))) or v,
                                                        lambda v: v):
        C.cross_entropy(Variable(values), target)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved_t.append((tuple(t.shape), str(t.dtype))) or t,
                                                  lambda t: t):
        torch.nn.functional.cross_entropy(torch.tensor(values, requires_grad=True), torch.tensor(target))
    assert [s for s, _ in saved] == [s for s, _ in saved_t] == [(2, 3), (2, 3), (2,), ()]


# ----- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, error, fragment", [
    (np.array([0, 3]), ValueError, "target 3 is out of bounds for 3 classes"),
    (np.array([-1, 0]), ValueError, "target -1 is out of bounds"),
    (np.array([0.0, 1.0]), TypeError, "expected target dtype to be an integer type"),
    (np.array([True, False]), TypeError, "expected target dtype to be an integer type"),
    (np.array([0, 1, 2]), ValueError, "expected input batch_size (2) to match target batch_size (3)"),
    (np.array([[0], [1]]), ValueError, "to match target batch_size"),
])
def test_cross_entropy_refuses_bad_targets_where_torch_does(target, error, fragment):
    with pytest.raises(error) as ours:
        C.cross_entropy(Variable(np.ones((2, 3))), target)
    assert fragment in str(ours.value)
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        torch.nn.functional.cross_entropy(torch.ones(2, 3, dtype=torch.float64), torch.tensor(target))


def test_cross_entropy_refuses_an_unknown_reduction_and_an_input_that_is_not_2d():
    with pytest.raises(ValueError, match="'average' is not a valid value for reduction"):
        C.cross_entropy(Variable(np.ones((2, 3))), [0, 1], reduction="average")
    with pytest.raises(ValueError, match=r"expected an input of shape \(N, C\), got \(3,\)"):
        C.cross_entropy(Variable(np.ones(3)), [0])


@pytest.mark.parametrize("fn, op", [(lambda v, a: C.softmax(v, axis=a), "softmax"),
                                    (lambda v, a: C.log_softmax(v, axis=a), "log_softmax"),
                                    (lambda v, a: F.logsumexp(v, axis=a), "logsumexp"),
                                    (lambda v, a: v.mean(axis=a), "mean"), (lambda v, a: v.max(axis=a), "max")])
def test_an_axis_the_input_does_not_have_or_that_is_no_int_is_refused(fn, op):
    with pytest.raises(ValueError, match=f"{op}: axis 2 is out of range for a variable with 2 dimension"):
        fn(Variable(np.ones((2, 3))), 2)
    with pytest.raises(TypeError, match=f"{op}: axis must be an int"):
        fn(Variable(np.ones((2, 3))), 1.0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.softmax(torch.ones(2, 3), 2)


def test_the_max_of_an_empty_axis_is_refused_and_its_mean_is_nan():
    with pytest.raises(ValueError, match="max: the maximum over axis 0 of an empty variable"):
        Variable(np.ones((0, 3))).max(axis=0)  # NumPy's spelling, NumPy's kind of refusal
    with pytest.raises(ValueError, match="zero-size array"):
        np.ones((0, 3)).max(axis=0)
    # the mean of nothing: NaN, as torch's and NumPy's
    np.testing.assert_array_equal(Variable(np.ones((0, 3))).mean(axis=0).data, torch.ones(0, 3).mean(0).numpy())
    assert np.isnan(Variable(np.ones((0, 3))).mean(axis=0).data).all()
