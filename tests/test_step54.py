"""Step 54: nn.LayerNorm against torch.nn.LayerNorm 2.13 (float64): the printout, parameter names, state-dict keys,
initial values, outputs and gradients, a LayerNorm inside a model, and the refusal of an input whose trailing dims
are not normalized_shape (torch's RuntimeError, its words; a ValueError here, the package's type for wrong shapes).

Tolerance: rtol 1e-12 and atol 1e-13 times the largest expected magnitude, as tests/test_layer_norm.py explains
(torch sums the statistics in another order; a gradient element is a difference of terms of order one).
"""
import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch.nn.normalization import LayerNorm

pytestmark = [pytest.mark.step54, pytest.mark.torch, pytest.mark.usefixtures("float64_default")]  # the page's dtype

SETTINGS = [((8,), {}), (8, {}), ([2, 3], {}), ((4,), {"eps": 1e-3}), ((5,), {"elementwise_affine": False}),
            ((6,), {"bias": False}), ((2, 4), {"elementwise_affine": False, "bias": False}), ((3,), {"eps": 0.5})]


def assert_close(actual, expected, what):
    expected = np.asarray(expected)
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-12, atol=1e-13 * max(1.0, np.abs(expected).max()),
                               err_msg=what)


@pytest.mark.parametrize(("shape", "kwargs"), SETTINGS)
def test_printout_names_keys_and_initial_values_equal_torchs(shape, kwargs):
    ours, theirs = LayerNorm(shape, **kwargs), torch.nn.LayerNorm(shape, **kwargs).double()
    assert repr(ours) == repr(theirs)
    assert ours.normalized_shape == theirs.normalized_shape and ours.eps == theirs.eps
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, tuple(p.shape))
                                                                  for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[key].data, value.numpy(), err_msg=key)
    assert (ours.weight is None) == (theirs.weight is None) and (ours.bias is None) == (theirs.bias is None)


def test_the_exact_printout_of_the_default():
    assert repr(nn.LayerNorm(8)) == "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert nn.LayerNorm is LayerNorm and "LayerNorm" in nn.__all__


@pytest.mark.parametrize(("shape", "kwargs"), SETTINGS)
@pytest.mark.parametrize("x_shape", [(7,), (3, 7), (2, 3, 7)])
def test_outputs_and_gradients_equal_torchs(shape, kwargs, x_shape):
    shape_t = (shape,) if isinstance(shape, int) else tuple(shape)
    full = x_shape[:-1] + shape_t
    rng = np.random.default_rng(len(full) + sum(shape_t))
    x, gy = 2.0 * rng.normal(size=full) + 0.5, rng.normal(size=full)
    ours, theirs = LayerNorm(shape, **kwargs), torch.nn.LayerNorm(shape, **kwargs).double()
    with torch.no_grad():  # other affine values than ones and zeros, the same in both
        for p in theirs.parameters():
            p.copy_(torch.from_numpy(rng.normal(size=p.shape)))
    ours.load_state_dict({k: tinypytorch.from_numpy(v.numpy()) for k, v in theirs.state_dict().items()})
    x_ours, x_t = Variable(x.copy()), torch.tensor(x, requires_grad=True)
    y, y_t = ours(x_ours), theirs(x_t)
    assert_close(y.data, y_t.detach().numpy(), "output")
    (y * Variable(gy, requires_grad=False)).sum().backward()
    (y_t * torch.from_numpy(gy)).sum().backward()
    assert_close(x_ours.grad.data, x_t.grad.numpy(), "input gradient")
    for (name, p), (name_t, p_t) in zip(ours.named_parameters(), theirs.named_parameters(), strict=True):
        assert name == name_t
        assert_close(p.grad.data, p_t.grad.numpy(), name)


def test_inside_a_model_after_a_training_step_as_torchs():
    """Linear, LayerNorm, ReLU, Linear: one SGD step moves the LayerNorm's weight and bias as torch's."""
    def build(n):
        return n.Sequential(n.Linear(4, 6), n.LayerNorm(6), n.ReLU(), n.Linear(6, 2))

    tinypytorch.manual_seed(0)
    torch.manual_seed(0)
    ours, theirs = build(nn), build(torch.nn).double()
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: tinypytorch.from_numpy(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(5)
    x, t = rng.normal(size=(9, 4)), rng.normal(size=(9, 2))
    for model, wrap in ((ours, lambda a: Variable(a, requires_grad=False)), (theirs, torch.from_numpy)):
        loss = (model(wrap(x)) - wrap(t)).__pow__(2).mean()
        loss.backward()
    opt, opt_t = tinypytorch.optim.SGD(ours.parameters(), lr=0.5), torch.optim.SGD(theirs.parameters(), lr=0.5)
    opt.step()
    opt_t.step()
    for key, value in theirs.state_dict().items():
        assert_close(ours.state_dict()[key].data, value.numpy(), key)
    assert not np.array_equal(ours.state_dict()["1.weight"].data, np.ones(6))  # the step did move it


@pytest.mark.parametrize(("shape", "x_shape"), [(8, (3, 4)), ((2, 3), (4, 3, 2)), ((3, 4), (4,)), (5, (5, 1))])
def test_an_input_of_another_shape_is_refused_with_torchs_words(shape, x_shape):
    with pytest.raises(RuntimeError) as caught:
        torch.nn.LayerNorm(shape).double()(torch.zeros(x_shape, dtype=torch.float64))
    with pytest.raises(ValueError) as ours:
        LayerNorm(shape)(Variable(np.zeros(x_shape)))
    assert str(ours.value) == "layer_norm: g" + str(caught.value)[1:]  # torch's sentence, prefixed by the op


def test_a_float_shape_is_torchs_type_error():
    with pytest.raises(TypeError, match="'float' object is not iterable"):
        torch.nn.LayerNorm(8.0)
    with pytest.raises(TypeError, match="'float' object is not iterable"):
        LayerNorm(8.0)


def test_reset_parameters_brings_back_ones_and_zeros():
    norm = LayerNorm(3)
    norm.load_state_dict({"weight": tinypytorch.arange(3.0), "bias": tinypytorch.arange(3.0)})
    norm.reset_parameters()
    np.testing.assert_array_equal(norm.weight.data, np.ones(3))
    np.testing.assert_array_equal(norm.bias.data, np.zeros(3))
