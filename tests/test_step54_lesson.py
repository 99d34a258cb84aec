"""Step 54's lesson: the gradient-flow measurements and the exercises' solutions (tanh with Kaiming's init, LayerNorm
with sigmoid, the ratio against depth), each measured again by torch.nn with the same weights (our state dict loaded
into torch's twin), and the verdicts' premises in the open: sigmoid's derivative at most 1/4, ReLU halving a variance
that Kaiming's 2/fan_in restores, the default Linear init's variance 1/(3 fan_in)."""
import math

import numpy as np
import pytest
import torch

from steploader import load_step
from tinypytorch import nn

pytestmark = [pytest.mark.step54, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype
step = load_step(54)


def torch_log_ratio(model):
    values = step.torch_gradient_norms(step.torch_twin(model))
    return math.log10(values[0] / values[-1])


def test_the_plotted_norms_are_torchs_and_the_verdicts_follow():
    expected = {"sigmoid, default init": "vanishes", "sigmoid, Xavier init": "vanishes",
                "ReLU, default init": "vanishes", "ReLU, Kaiming init": "stays", "sigmoid, residual": "stays",
                "ReLU, LayerNorm": "stays", "tanh, weights 4x too large": "explodes"}
    assert list(step.norms) == list(expected)
    for name, build in step.VARIANTS.items():
        theirs = step.torch_gradient_norms(step.torch_twin(build()))
        np.testing.assert_allclose(step.norms[name], theirs, rtol=1e-10, err_msg=name)
        exponent = math.log10(theirs[0] / theirs[-1])
        assert step.verdict(step.norms[name]) == (expected[name], round(exponent)), name
    assert step.verdict(step.norms["sigmoid, default init"])[1] <= -15  # twenty-odd factors of 1/4 or less


def test_the_residual_keeps_the_backward_signal_level_in_torch_too():
    """dL/dh at the first block and at the last are within a factor of two: the identity path (torch's autograd)."""
    theirs = torch_backward_norms(step.VARIANTS["sigmoid, residual"]())
    assert 0.5 < theirs[0] / theirs[-1] < 2
    np.testing.assert_allclose(step.flows["sigmoid, residual"][1], theirs, rtol=1e-10)


def test_exercise_1_tanh_with_kaimings_init_stays_as_in_torch():
    exponent = torch_log_ratio(step.tanh_kaiming)
    assert step.verdict(step.tanh_norms) == ("stays", round(exponent))
    assert abs(exponent) < 3
    np.testing.assert_allclose(step.tanh_norms, step.torch_gradient_norms(step.torch_twin(step.tanh_kaiming)),
                               rtol=1e-10)


def test_exercise_2_layer_norm_does_not_save_sigmoid_in_torch_either():
    model = step.deep(nn.Sigmoid, norm=True)
    theirs = step.torch_gradient_norms(step.torch_twin(model))
    np.testing.assert_allclose(step.sigmoid_norm, theirs, rtol=1e-10)
    assert step.verdict(step.sigmoid_norm) == ("vanishes", round(math.log10(theirs[0] / theirs[-1])))
    assert np.median(theirs[:-1] / theirs[1:]) < 0.5


def test_exercise_3_the_exponent_falls_in_proportion_to_depth_as_torch_measures():
    theirs = [torch_log_ratio(step.deep(nn.Sigmoid, depth=depth)) for depth in step.depths]
    np.testing.assert_allclose(step.exponents, theirs, rtol=1e-9)
    slope, intercept = np.polyfit(step.depths, theirs, 1)
    assert step.slope == pytest.approx(slope, rel=1e-9)
    assert slope < -math.log10(4) * 0.5  # well below one per layer
    residuals = np.array(theirs) - (slope * np.array(step.depths) + intercept)
    assert np.abs(residuals).max() < 1.0  # close to a line: a constant factor per layer


def test_the_premises_in_the_open():
    z = torch.linspace(-8, 8, 16001, dtype=torch.float64, requires_grad=True)
    torch.sigmoid(z).sum().backward()
    assert z.grad.max().item() == pytest.approx(0.25, abs=1e-12)  # at z = 0, s(1 - s) = 1/4
    assert torch.nn.init.calculate_gain("sigmoid") == 1 and torch.nn.init.calculate_gain("relu") == math.sqrt(2)
    fan_in = step.WIDTH  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), variance 1/(3 fan_in)
    weights = np.concatenate([block.linear.weight.data.ravel() for block in step.deep(nn.ReLU)])
    assert np.abs(weights).max() <= 1 / math.sqrt(fan_in)
    assert weights.var() == pytest.approx(1 / (3 * fan_in), rel=0.05)  # 24,576 draws: relative std error 0.6%
    relu = np.maximum(np.random.default_rng(0).normal(size=400_000), 0)
    assert np.mean(relu**2) == pytest.approx(0.5, rel=0.02)  # ReLU keeps half the second moment: gain sqrt(2)


def torch_backward_norms(model):
    """torch's ||dL/dh|| at each block's output, for our model's weights."""
    twin = step.torch_twin(model)
    h, outputs = torch.from_numpy(step.x.data), []
    for block in twin:
        h = block(h)
        outputs.append(h)
    grads = torch.autograd.grad(torch.nn.MSELoss()(h, torch.from_numpy(step.target.data)), outputs)
    return np.array([g.norm().item() for g in grads])


def test_the_backward_factor_per_layer_is_torchs_and_near_the_prediction():
    """The factors sqrt(n s^2) times the slope (1/4 or sqrt(1/2)), worked out here again, within 10%."""
    n = step.WIDTH
    assert step.predicted == pytest.approx({"sigmoid, default init": 0.25 * math.sqrt(n / (3 * n)),
                                            "sigmoid, Xavier init": 0.25 * math.sqrt(n * 2 / (n + n)),
                                            "ReLU, default init": math.sqrt(0.5 * n / (3 * n)),
                                            "ReLU, Kaiming init": math.sqrt(0.5 * n * 2 / n)}, rel=1e-15)
    for name, factor in step.predicted.items():
        theirs = torch_backward_norms(step.VARIANTS[name]())
        np.testing.assert_allclose(step.flows[name][1], theirs, rtol=1e-10, err_msg=name)
        measured = (theirs[0] / theirs[-1]) ** (1 / (step.DEPTH - 1))
        assert measured == pytest.approx(factor, rel=0.1), name
