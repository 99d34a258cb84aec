"""F.binary_cross_entropy_with_logits, F.binary_cross_entropy, nn.BCEWithLogitsLoss and nn.BCELoss against torch's:
values and gradients (input and target) for every reduction, weight and pos_weight, logits far from 0 (where a
sigmoid rounds to 0 or 1), probabilities of exactly 0 and 1, second derivatives, dtypes, the modules' buffers, and
torch's errors. Every expected value is torch's, from the same tensors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tinypytorch
from reference import assert_refused_as_torch
from tinypytorch import nn
from tinypytorch.nn import functional as F

pytestmark = pytest.mark.torch

RNG = np.random.default_rng(11)
SHAPE = (4, 3)
LOGITS = RNG.standard_normal(SHAPE) * 3
FAR = np.array([[-800.0, -50.0, -40.0], [-20.0, 0.0, 20.0], [36.0, 40.0, 50.0], [100.0, 800.0, 1e-30]])
TARGETS = RNG.uniform(size=SHAPE)
HARD = (RNG.uniform(size=SHAPE) > 0.5).astype(np.float64)
WEIGHTS = {"none": None, "per-class": RNG.uniform(0.5, 2, size=3), "per-element": RNG.uniform(0.5, 2, size=SHAPE)}
POS_WEIGHT = RNG.uniform(0.5, 3, size=3)


def both(op, x, t, weight=None, pos_weight=None, reduction="mean"):
    """(ours, torch's): (value, input gradient, target gradient)."""
    results = []
    for fw, functional in ((tinypytorch, F), (torch, TF)):
        v = fw.tensor(x, requires_grad=True)
        u = fw.tensor(t, requires_grad=True)
        kwargs = {"reduction": reduction}
        if weight is not None:
            kwargs["weight"] = fw.tensor(weight)
        if pos_weight is not None:
            kwargs["pos_weight"] = fw.tensor(pos_weight)
        y = getattr(functional, op)(v, u, **kwargs)
        g = np.random.default_rng(0).standard_normal(tuple(y.shape))
        (y * fw.tensor(g)).sum().backward()
        results.append((np.asarray(y.detach().numpy()), v.grad.numpy(), u.grad.numpy()))
    return results


def assert_same(ours, theirs, rtol=1e-12, atol=1e-15):
    for what, a, b in zip(("value", "input gradient", "target gradient"), ours, theirs):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", WEIGHTS, ids=str)
@pytest.mark.parametrize("pos_weight", [None, POS_WEIGHT], ids=["", "pos_weight"])
@pytest.mark.parametrize("targets", [TARGETS, HARD], ids=["soft", "hard"])
def test_with_logits_values_and_gradients_equal_torchs(reduction, weight, pos_weight, targets):
    assert_same(*both("binary_cross_entropy_with_logits", LOGITS, targets, WEIGHTS[weight], pos_weight, reduction))


@pytest.mark.parametrize("pos_weight", [None, POS_WEIGHT], ids=["", "pos_weight"])
@pytest.mark.parametrize("targets", [TARGETS, HARD], ids=["soft", "hard"])
def test_with_logits_far_from_zero_is_finite_and_equals_torchs(pos_weight, targets):
    """Logits of +-800 (exp overflows), +-40 (sigmoid rounds to 1), 1e-30: the loss stays finite and the gradient
    sigmoid(x) - t is torch's to the last bit where the terms round."""
    ours, theirs = both("binary_cross_entropy_with_logits", FAR, targets, pos_weight=pos_weight, reduction="none")
    assert np.isfinite(ours[0]).all()
    assert_same(ours, theirs, rtol=1e-13, atol=0)


def test_with_logits_second_derivatives_equal_torchs():
    grads = []
    for fw, functional in ((tinypytorch, F), (torch, TF)):
        v, u = fw.tensor(LOGITS, requires_grad=True), fw.tensor(TARGETS, requires_grad=True)
        y = functional.binary_cross_entropy_with_logits(v, u, pos_weight=fw.tensor(POS_WEIGHT), reduction="sum")
        gx, gt = (tinypytorch.autograd.grad if fw is tinypytorch else torch.autograd.grad)(y, [v, u],
                                                                                         create_graph=True)
        ((gx * gx).sum() + (gt * gx).sum()).backward()
        grads.append((v.grad.numpy(), u.grad.numpy()))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


PROBABILITIES = 1 / (1 + np.exp(-LOGITS))
EDGES = np.array([[0.0, 1.0, 1e-50], [1 - 1e-16, 0.5, 1e-10], [0.25, 0.75, 0.999], [1e-300, 0.1, 0.9]])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weight", ["none", "per-class", "per-element"])
@pytest.mark.parametrize("targets", [TARGETS, HARD], ids=["soft", "hard"])
def test_probabilities_values_and_gradients_equal_torchs(reduction, weight, targets):
    assert_same(*both("binary_cross_entropy", PROBABILITIES, targets, WEIGHTS[weight], reduction=reduction))


def test_probabilities_of_exactly_0_and_1_give_torchs_clamped_loss_and_gradients():
    """log is clamped at -100, and the input gradient's denominator at 1e-12, as torch's."""
    ours, theirs = both("binary_cross_entropy", EDGES, HARD, reduction="none")
    assert np.isfinite(ours[0]).all() and np.isfinite(ours[1]).all()
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-13, atol=0)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-13, atol=0)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-13, atol=0)  # inf where p is 0 or 1, as torch


@pytest.mark.parametrize("x_dtype, t_dtype", [(np.float32, np.float64), (np.float64, np.float32),
                                               (np.float32, np.float32), (np.float16, np.float32)])
def test_mixed_dtypes_give_the_targets_dtype_computed_in_torchs_steps(x_dtype, t_dtype):
    """PyTorch writes (1 - t) x - log_sigmoid(x) into (1 - t): the loss has the target's dtype, and log_sigmoid
    is computed in the input's (float32 for a float32 input, even beside a float64 target)."""
    x, t = LOGITS.astype(x_dtype), TARGETS.astype(t_dtype)
    results = []
    for fw, functional in ((tinypytorch, F), (torch, TF)):
        v = fw.tensor(x, requires_grad=True)
        y = functional.binary_cross_entropy_with_logits(v, fw.tensor(t), pos_weight=fw.tensor(POS_WEIGHT),
                                                        reduction="none")
        y.sum().backward()
        results.append((y.detach().numpy(), v.grad.numpy()))
    for ours, theirs in zip(*results):
        assert ours.dtype == theirs.dtype
        tolerance = 16 * max(np.finfo(x_dtype).eps, np.finfo(t_dtype).eps)  # a few ulps of the coarser dtype
        np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_modules_equal_torchs_and_keep_their_weights_as_buffers(reduction):
    weight, pos_weight = WEIGHTS["per-class"], POS_WEIGHT
    ours = nn.BCEWithLogitsLoss(tinypytorch.tensor(weight), reduction=reduction,
                                pos_weight=tinypytorch.tensor(pos_weight))
    theirs = torch.nn.BCEWithLogitsLoss(torch.tensor(weight), reduction=reduction, pos_weight=torch.tensor(pos_weight))
    y = ours(tinypytorch.tensor(LOGITS), tinypytorch.tensor(TARGETS))
    np.testing.assert_allclose(y.data, theirs(torch.tensor(LOGITS), torch.tensor(TARGETS)).numpy(), rtol=1e-12)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "pos_weight"]
    ours_p, theirs_p = nn.BCELoss(reduction=reduction), torch.nn.BCELoss(reduction=reduction)
    y = ours_p(tinypytorch.tensor(PROBABILITIES), tinypytorch.tensor(TARGETS))
    np.testing.assert_allclose(y.data, theirs_p(torch.tensor(PROBABILITIES), torch.tensor(TARGETS)).numpy(),
                               rtol=1e-12)
    assert list(ours_p.state_dict()) == list(theirs_p.state_dict()) == []
    assert ours_p.weight is None and theirs_p.weight is None
    assert repr(ours) == repr(theirs) and repr(ours_p) == repr(theirs_p)


def test_a_model_with_a_logit_output_trains_as_torchs():
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    ours = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 3))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    ours.double()
    opt, opt_t = tinypytorch.optim.Adam(ours.parameters(), lr=0.05), torch.optim.Adam(theirs.parameters(), lr=0.05)
    loss, loss_t = nn.BCEWithLogitsLoss(), torch.nn.BCEWithLogitsLoss()
    for _ in range(5):
        for model, o, lf, fw in ((ours, opt, loss, tinypytorch), (theirs, opt_t, loss_t, torch)):
            o.zero_grad()
            lf(model(fw.tensor(LOGITS)), fw.tensor(HARD)).backward()
            o.step()
    for p, pt in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("make", [
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(3), fw.ones(2, 3)),  # a weight larger
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3) / 2, fw.ones(3), fw.ones(2, 3)),  # than the loss
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(2)),
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3) / 2, fw.ones(2)),
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(3), reduction="avg"),
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3) / 2, fw.ones(3), reduction="avg"),
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3) * 2, fw.ones(3)),  # not a probability
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3, dtype=fw.float32) / 2, fw.ones(3, dtype=fw.float64)),
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(3), fw.ones(3, requires_grad=True)),
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(3),
                                                       pos_weight=fw.ones(3, requires_grad=True)),
    lambda fw, F_: F_.binary_cross_entropy(fw.ones(3) / 2, fw.ones(3), fw.ones(3, requires_grad=True)),
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3), fw.ones(3, dtype=fw.int64)),
    lambda fw, F_: F_.binary_cross_entropy_with_logits(fw.ones(3, dtype=fw.int64), fw.ones(3, dtype=fw.int64)),
])
def test_bad_input_raises_torchs_error_type_and_words(make):
    assert_refused_as_torch(make, (tinypytorch, F), (torch, TF))


def test_reduction_is_a_keyword_as_in_the_packages_other_losses():
    """torch's positional size_average and reduce (deprecated) come before reduction: a clear TypeError here."""
    with pytest.raises(TypeError):
        F.binary_cross_entropy_with_logits(tinypytorch.ones(3), tinypytorch.ones(3), None, None, None, "sum")
    with pytest.raises(TypeError):
        nn.BCELoss(None, None, None, "sum")


def test_both_losses_and_their_gradients_on_every_backend(xp):
    from tinypytorch import cuda

    where = "cpu" if xp is np else "cuda"
    theirs = both("binary_cross_entropy_with_logits", LOGITS, TARGETS, WEIGHTS["per-class"], POS_WEIGHT)[1]
    v, u = tinypytorch.tensor(LOGITS, requires_grad=True, device=where), tinypytorch.tensor(TARGETS, device=where)
    y = F.binary_cross_entropy_with_logits(v, u, tinypytorch.tensor(WEIGHTS["per-class"], device=where),
                                           pos_weight=tinypytorch.tensor(POS_WEIGHT, device=where))
    y.backward()
    assert cuda.get_array_module(v.grad.data) is xp
    np.testing.assert_allclose(cuda.as_numpy(y.data), theirs[0], rtol=1e-12)
    p = tinypytorch.tensor(PROBABILITIES, requires_grad=True, device=where)
    F.binary_cross_entropy(p, u, reduction="sum").backward()
    p_t = torch.tensor(PROBABILITIES, requires_grad=True)
    TF.binary_cross_entropy(p_t, torch.tensor(TARGETS), reduction="sum").backward()
    np.testing.assert_allclose(cuda.as_numpy(p.grad.data), p_t.grad.numpy(), rtol=1e-12)
