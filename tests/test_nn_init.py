"""nn.init against torch.nn.init: gains, fans and refusals equal torch's; the spread of what each initializer draws
equals the formula PyTorch documents, worked out here from fan_in and fan_out.

The draws come from another generator than torch's, so values are checked statistically on large tensors
(n = 250,000 elements, a fixed seed). The sample std s of n independent draws with std sigma has a standard
error of about sigma sqrt((kurtosis - 1) / (4n)): sigma sqrt(1 / (2n)) for a normal (kurtosis 3, 0.0014 sigma here),
sigma sqrt(0.2 / n) for a uniform (kurtosis 9/5, 0.0009 sigma). The tests allow 6 standard errors (1e-9 odds
of a false alarm), 0.0085 and 0.0054 relative, and the mean 6 sigma / sqrt(n).
"""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.init as TI

import tinypytorch
from tinypytorch import Variable, cuda
from tinypytorch.nn import init

pytestmark = [pytest.mark.torch]

SHAPE = (500, 500)  # fan_in = fan_out = 500
N = math.prod(SHAPE)
NORMAL_TOL, UNIFORM_TOL = 6 * math.sqrt(1 / (2 * N)), 6 * math.sqrt(0.2 / N)
NONLINEARITIES = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                  "sigmoid", "tanh", "relu", "leaky_relu", "selu"]


def assert_spread(values, std, uniform):
    """Mean 0 and sample std `std`, within 6 standard errors; for a uniform, every value within sqrt(3) std."""
    values = np.asarray(values, dtype=np.float64)
    assert abs(values.mean()) < 6 * std / math.sqrt(values.size)
    assert abs(values.std() / std - 1) < (UNIFORM_TOL if uniform else NORMAL_TOL)
    if uniform:
        assert np.abs(values).max() <= math.sqrt(3) * std


@pytest.mark.parametrize("nonlinearity", NONLINEARITIES)
def test_gains_equal_torchs(nonlinearity):
    assert init.calculate_gain(nonlinearity) == TI.calculate_gain(nonlinearity)


@pytest.mark.parametrize("slope", [0, 0.2, 1, -0.5, 3.0])
def test_leaky_relu_gain_of_a_slope_equals_torchs(slope):
    assert init.calculate_gain("leaky_relu", slope) == TI.calculate_gain("leaky_relu", slope)
    assert init.calculate_gain("leaky_relu", slope) == math.sqrt(2 / (1 + slope**2))  # the documented formula


def test_documented_gains():
    assert init.calculate_gain("tanh") == 5 / 3 and init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("selu") == 3 / 4 and init.calculate_gain("leaky_relu") == math.sqrt(2 / (1 + 0.01**2))


@pytest.mark.parametrize(("args", "message"), [(("foo",), "Unsupported nonlinearity foo"),
                                                (("leaky_relu", "a"), "negative_slope a not a valid number"),
                                                (("leaky_relu", True), "negative_slope True not a valid number")])
def test_bad_gains_raise_torchs_value_error(args, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        TI.calculate_gain(*args)
    with pytest.raises(ValueError, match=f"^{message}$"):
        init.calculate_gain(*args)


@pytest.mark.parametrize("shape", [(3, 4), (5, 3, 2), (5, 3, 2, 4), (1, 7, 1, 1, 3)])
def test_fans_equal_torchs(shape):
    ours = init._calculate_fan_in_and_fan_out(Variable(np.zeros(shape)))
    assert ours == TI._calculate_fan_in_and_fan_out(torch.zeros(shape))
    assert ours == (shape[1] * math.prod(shape[2:]), shape[0] * math.prod(shape[2:]))  # (out, in, *receptive)


@pytest.mark.parametrize("gain", [1.0, 5 / 3])
def test_xavier_uniform_and_normal_have_the_documented_spread(gain):
    fan_in, fan_out = SHAPE[1], SHAPE[0]
    std = gain * math.sqrt(2 / (fan_in + fan_out))  # xavier_uniform's bound gain sqrt(6 / (fan_in + fan_out)) / sqrt(3)
    tinypytorch.manual_seed(0)
    assert_spread(init.xavier_uniform_(Variable(np.zeros(SHAPE)), gain=gain).data, std, uniform=True)
    assert_spread(init.xavier_normal_(Variable(np.zeros(SHAPE)), gain).data, std, uniform=False)


@pytest.mark.parametrize(("shape", "mode"), [((250, 1000), "fan_in"), ((250, 1000), "fan_out"),
                                             ((50, 20, 5, 5), "fan_in"), ((50, 20, 5, 5), "Fan_Out")])
@pytest.mark.parametrize(("a", "nonlinearity"), [(0, "leaky_relu"), (0.2, "leaky_relu"), (0, "relu"), (0, "tanh")])
def test_kaiming_uniform_and_normal_have_the_documented_spread(shape, mode, a, nonlinearity):
    fan = shape[1] * math.prod(shape[2:]) if mode == "fan_in" else shape[0] * math.prod(shape[2:])
    gain = {"relu": math.sqrt(2), "tanh": 5 / 3}.get(nonlinearity, math.sqrt(2 / (1 + a**2)))
    std = gain / math.sqrt(fan)  # kaiming_uniform's bound gain sqrt(3 / fan) is sqrt(3) std
    tinypytorch.manual_seed(1)
    assert_spread(init.kaiming_uniform_(Variable(np.zeros(shape)), a, mode, nonlinearity).data, std, uniform=True)
    assert_spread(init.kaiming_normal_(Variable(np.zeros(shape)), a=a, mode=mode, nonlinearity=nonlinearity).data,
                  std, uniform=False)


def test_uniform_normal_constant_ones_zeros():
    tinypytorch.manual_seed(2)
    u = init.uniform_(Variable(np.zeros(SHAPE)), -2.0, 3.0).data
    assert u.min() >= -2.0 and u.max() < 3.0
    assert_spread(u - 0.5, 5 / math.sqrt(12), uniform=True)  # U(a, b) has std (b - a) / sqrt(12)
    assert_spread(init.normal_(Variable(np.zeros(SHAPE)), mean=1.5, std=0.3).data - 1.5, 0.3, uniform=False)
    for ours, theirs, args in ((init.constant_, TI.constant_, (0.25,)), (init.ones_, TI.ones_, ()),
                               (init.zeros_, TI.zeros_, ())):
        np.testing.assert_array_equal(ours(Variable(np.full((2, 3), 7.0)), *args).data,
                                      theirs(torch.full((2, 3), 7.0, dtype=torch.float64), *args).numpy())


@pytest.mark.parametrize("fill", [lambda w: init.xavier_uniform_(w), lambda w: init.kaiming_normal_(w),
                                  lambda w: init.normal_(w), lambda w: init.zeros_(w), lambda w: init.constant_(w, 2)])
def test_a_parameter_is_filled_in_place_as_torchs(fill):
    """A leaf that requires grad, grad mode on: filled under no_grad, the same object back, one version more."""
    w, t = Variable(np.ones((4, 3), dtype=np.float32)), torch.ones(4, 3, requires_grad=True)
    assert fill(w) is w
    assert TI.xavier_uniform_(t) is t and t._version == 1 and t.requires_grad and t.grad_fn is None
    assert w._version == 1 and w.requires_grad and w.creator is None and w.dtype == np.float32


def test_the_packages_generator_or_a_given_one():
    tinypytorch.manual_seed(3)
    first = init.kaiming_uniform_(Variable(np.zeros((3, 4)))).data.copy()
    tinypytorch.manual_seed(3)
    np.testing.assert_array_equal(init.kaiming_uniform_(Variable(np.zeros((3, 4)))).data, first)
    drawn = [init.normal_(Variable(np.zeros(5)), generator=np.random.default_rng(9)).data for _ in range(2)]
    np.testing.assert_array_equal(drawn[0], drawn[1])
    np.testing.assert_array_equal(drawn[0], np.random.default_rng(9).standard_normal(5))


def test_on_every_backend(xp):
    device = "cpu" if xp is np else "cuda"
    w = Variable(xp.zeros(SHAPE))
    assert_spread(cuda.as_numpy(init.xavier_uniform_(w).data), math.sqrt(2 / 1000), uniform=True)
    assert cuda.get_array_module(w.data) is xp and w.device.type == device
    assert_spread(cuda.as_numpy(init.kaiming_normal_(w).data), math.sqrt(2 / (1 + 0.01**2)) / math.sqrt(500),
                  uniform=False)
    np.testing.assert_array_equal(cuda.as_numpy(init.ones_(w).data), np.ones(SHAPE))


@pytest.mark.parametrize("name", ["xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"])
def test_fewer_than_two_dims_is_torchs_value_error(name):
    message = "^Fan in and fan out can not be computed for tensor with fewer than 2 dimensions$"
    with pytest.raises(ValueError, match=message):
        getattr(TI, name)(torch.zeros(3))
    with pytest.raises(ValueError, match=message):
        getattr(init, name)(Variable(np.zeros(3)))


@pytest.mark.parametrize("name", ["kaiming_uniform_", "kaiming_normal_"])
def test_bad_mode_and_empty_tensors_as_torch(name):
    message = r"^Mode fan not supported, please use one of \['fan_in', 'fan_out'\]$"
    with pytest.raises(ValueError, match=message):
        getattr(TI, name)(torch.zeros(3, 4), mode="fan")
    with pytest.raises(ValueError, match=message):
        getattr(init, name)(Variable(np.zeros((3, 4))), mode="fan")
    for fill, empty in ((getattr(TI, name), torch.zeros(0, 4)), (getattr(init, name), Variable(np.zeros((0, 4))))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert fill(empty) is empty
        assert [str(w.message) for w in caught] == ["Initializing zero-element tensors is a no-op"]


def test_not_a_variable_is_a_type_error():
    with pytest.raises(TypeError, match="xavier_uniform_: expected a Variable, got ndarray"):
        init.xavier_uniform_(np.zeros((2, 2)))


@pytest.mark.step54
@pytest.mark.parametrize("shape", [(200, 1250), (1250, 200), (40, 25, 10, 25)])  # N elements each
@pytest.mark.parametrize(("name", "kwargs", "gain"), [
    ("xavier_uniform_", {}, 1.0), ("xavier_normal_", {"gain": 4.0}, 4.0),
    ("kaiming_uniform_", {"nonlinearity": "linear"}, 1.0), ("kaiming_normal_", {"nonlinearity": "sigmoid"}, 1.0),
    ("kaiming_normal_", {"nonlinearity": "relu", "mode": "fan_out"}, math.sqrt(2)),
    ("kaiming_uniform_", {"a": math.sqrt(5)}, math.sqrt(2 / 6))])  # nn.Linear's default: bound 1/sqrt(fan_in)
def test_unequal_fans_have_the_documented_spread_in_both(shape, name, kwargs, gain):
    """fan_in != fan_out, and a receptive field: xavier's std is gain sqrt(2 / (fan_in + fan_out)), kaiming's
    gain / sqrt(fan); the spreads of torch's own draws and of ours both match the formula."""
    fan_in, fan_out = shape[1] * math.prod(shape[2:]), shape[0] * math.prod(shape[2:])
    if name.startswith("xavier"):
        std = gain * math.sqrt(2 / (fan_in + fan_out))
    else:
        std = gain / math.sqrt(fan_out if kwargs.get("mode") == "fan_out" else fan_in)
    uniform = name.endswith("uniform_")
    tinypytorch.manual_seed(4)
    torch.manual_seed(4)
    assert_spread(getattr(init, name)(Variable(np.zeros(shape)), **kwargs).data, std, uniform)
    assert_spread(getattr(TI, name)(torch.zeros(shape, dtype=torch.float64), **kwargs).numpy(), std, uniform)
