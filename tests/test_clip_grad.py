"""nn.utils.clip_grad_norm_, clip_grad_value_ (and the two halves PyTorch splits the first into, get_total_norm and
clip_grads_with_norm_) against torch.nn.utils (float64): the returned norm, the clipped gradients, None gradients,
non-finite norms with and without error_if_nonfinite, and torch's exact message."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.utils as TU

from tinypytorch import Variable, cuda
from tinypytorch.nn import utils

pytestmark = [pytest.mark.torch]

RNG = np.random.default_rng(0)
GRADS = [RNG.normal(size=(3, 4)), None, RNG.normal(size=5), RNG.normal(size=()), RNG.normal(size=(2, 1, 3))]


def pair(grads):
    """Parameters with these gradients (None: no gradient), in the package and in torch."""
    ours, theirs = [], []
    for g in grads:
        p, t = Variable(np.zeros(np.shape(g) if g is not None else (2,))), torch.zeros(
            np.shape(g) if g is not None else (2,), dtype=torch.float64, requires_grad=True)
        if g is not None:
            p.grad, t.grad = Variable(np.array(g, dtype=np.float64), requires_grad=False), torch.tensor(g)
        ours.append(p)
        theirs.append(t)
    return ours, theirs


def assert_same_grads(ours, theirs):
    for p, t in zip(ours, theirs, strict=True):
        assert (p.grad is None) == (t.grad is None)
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.data, t.grad.numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("norm_type", [1, 2.0, 3, math.inf, "inf", 0.5])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # above and below the total norm (about 4.6 for the 2-norm)
def test_norm_and_clipped_grads_equal_torchs(norm_type, max_norm):
    ours, theirs = pair(GRADS)
    total = utils.clip_grad_norm_(ours, max_norm, norm_type)
    total_t = TU.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, Variable) and total.shape == () and not total.requires_grad
    np.testing.assert_allclose(total.data, total_t.numpy(), rtol=1e-12, atol=0)
    assert_same_grads(ours, theirs)
    assert (float(total_t) > max_norm) == (max_norm == 0.5)  # both cases happen


def test_a_single_variable_a_generator_and_only_none_grads():
    ours, theirs = pair([np.array([3.0, 4.0])])
    total = utils.clip_grad_norm_(ours[0], 1.0)  # one Variable, not a list
    np.testing.assert_allclose(total.data, TU.clip_grad_norm_(theirs[0], 1.0).numpy(), rtol=1e-12)
    assert_same_grads(ours, theirs)
    ours, theirs = pair(GRADS)
    utils.clip_grad_norm_((p for p in ours), 2.0, 3)
    TU.clip_grad_norm_((t for t in theirs), 2.0, 3)
    assert_same_grads(ours, theirs)
    ours, theirs = pair([None, None])
    empty = utils.clip_grad_norm_(ours, 1.0)
    empty_t = TU.clip_grad_norm_(theirs, 1.0)
    assert empty.data == empty_t.item() == 0.0 and empty.dtype == np.float32 and empty_t.dtype == torch.float32


def test_an_empty_generator_warns_as_torch():
    for clip in (utils.clip_grad_norm_, TU.clip_grad_norm_):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert float(clip((p for p in []), 1.0)) == 0.0
        assert [str(w.message) for w in caught] == [
            "`parameters` is an empty generator, no gradient clipping will occur."]


def test_grads_change_in_place_and_float32_stays_float32():
    p, t = Variable(np.zeros(3, dtype=np.float32)), torch.zeros(3, requires_grad=True)
    p.grad, t.grad = Variable(np.array([3.0, -4.0, 12.0], dtype=np.float32)), torch.tensor([3.0, -4.0, 12.0])
    grad = p.grad
    total, total_t = utils.clip_grad_norm_([p], 1.0), TU.clip_grad_norm_([t], 1.0)
    assert p.grad is grad and grad._version == 1 and grad.dtype == np.float32 and total.dtype == np.float32
    np.testing.assert_array_equal(total.data, total_t.numpy())
    np.testing.assert_allclose(p.grad.data, t.grad.numpy(), rtol=1e-6)  # float32 arithmetic in either order


def test_get_total_norm_and_clip_grads_with_norm_equal_torchs():
    ours, theirs = pair(GRADS)
    total = utils.get_total_norm([p.grad for p in ours if p.grad is not None], 3.0)
    total_t = TU.get_total_norm([t.grad for t in theirs if t.grad is not None], 3.0)
    np.testing.assert_allclose(total.data, total_t.numpy(), rtol=1e-12, atol=0)
    utils.clip_grads_with_norm_(ours, 1.0, total)
    TU.clip_grads_with_norm_(theirs, 1.0, total_t)
    assert_same_grads(ours, theirs)


NONFINITE = {"inf": [np.array([1.0, np.inf]), np.array([2.0])], "nan": [np.array([1.0, np.nan]), np.array([2.0])],
             "inf and -inf": [np.array([np.inf, -np.inf])]}


@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf])
@pytest.mark.parametrize("grads", NONFINITE)
def test_a_nonfinite_norm_as_torch_with_and_without_the_error(grads, norm_type):
    ours, theirs = pair(NONFINITE[grads])
    with pytest.raises(RuntimeError) as theirs_error:
        TU.clip_grad_norm_(theirs, 1.0, norm_type, error_if_nonfinite=True)
    with pytest.raises(RuntimeError) as ours_error:
        utils.clip_grad_norm_(ours, 1.0, norm_type, error_if_nonfinite=True)
    assert str(ours_error.value) == str(theirs_error.value)
    assert str(ours_error.value) == (
        f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it cannot be "
        "clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
        "`error_if_nonfinite=False`")
    assert_same_grads(ours, theirs)  # untouched by the refusal
    total = utils.clip_grad_norm_(ours, 1.0, norm_type)  # scaled by the non-finite norm: inf -> 0 * g, nan -> nan
    total_t = TU.clip_grad_norm_(theirs, 1.0, norm_type)
    np.testing.assert_array_equal(total.data, total_t.numpy())
    for p, t in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(p.grad.data, t.grad.numpy())  # nan where torch has nan


@pytest.mark.parametrize("clip_value", [0.5, 2.0, -1.0])
def test_clip_grad_value_equals_torchs(clip_value):
    grads = GRADS + [np.array([np.nan, np.inf, -np.inf])]
    ours, theirs = pair(grads)
    assert utils.clip_grad_value_(ours, clip_value) is None
    assert TU.clip_grad_value_(theirs, clip_value) is None
    for p, t in zip(ours, theirs, strict=True):
        if p.grad is not None:
            np.testing.assert_array_equal(p.grad.data, t.grad.numpy())
    single, single_t = pair([np.array([3.0, -0.2])])
    utils.clip_grad_value_(single[0], 1)
    TU.clip_grad_value_(single_t[0], 1)
    np.testing.assert_array_equal(single[0].grad.data, single_t[0].grad.numpy())


def test_on_every_backend(xp):
    p = Variable(xp.zeros(4))
    p.grad = Variable(xp.asarray(np.array([3.0, -4.0, 0.0, 12.0])), requires_grad=False)
    total = utils.clip_grad_norm_([p], 1.0)
    assert cuda.get_array_module(total.data) is xp and cuda.get_array_module(p.grad.data) is xp
    np.testing.assert_allclose(cuda.as_numpy(total.data), 13.0, rtol=1e-15)
    np.testing.assert_allclose(cuda.as_numpy(p.grad.data), np.array([3.0, -4.0, 0.0, 12.0]) / (13.0 + 1e-6),
                               rtol=1e-15)
    utils.clip_grad_value_(p, 0.5)
    assert float(cuda.as_numpy(p.grad.data).max()) == 0.5
    with pytest.raises(RuntimeError, match="non-finite"):
        p.grad = Variable(xp.asarray(np.array([np.inf])), requires_grad=False)
        utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
