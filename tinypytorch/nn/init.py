"""PyTorch's torch.nn.init: fill a weight in place with values whose spread suits the layer (stage 5).

A layer's output sums fan_in products; if each weight has variance 1/fan_in the output keeps the
input's variance, layer after layer. Xavier (Glorot & Bengio, 2010) balances the forward and the
backward pass with variance 2/(fan_in + fan_out); Kaiming (He et al., 2015) uses gain^2/fan,
where the gain makes up for what the nonlinearity removes (ReLU halves the variance: gain sqrt(2)).
A uniform U(-bound, bound) has standard deviation bound/sqrt(3), so its bound is sqrt(3) std.

Each function fills its Variable under no_grad, as PyTorch's do, so a leaf that requires grad
(a parameter) may be filled; the Variable's version moves on. The numbers come from the package's
generator (tinypytorch.manual_seed fixes them), or from `generator`, a NumPy Generator, if given:
not the numbers torch draws for the same seed, since the generators differ.
"""
import math
import numbers
import warnings

import numpy as np

from tinypytorch import factories, inplace
from tinypytorch.core import Variable
from tinypytorch.cuda import get_array_module
from tinypytorch.grad_mode import no_grad

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity, param=None):
    """The factor by which to scale a weight's std so that `nonlinearity` keeps the signal's variance (PyTorch's)."""
    if nonlinearity in _LINEAR or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01  # nn.LeakyReLU's default negative_slope
        elif isinstance(param, numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4  # PyTorch's choice, for self-normalizing networks
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _checked(op, tensor):
    if not isinstance(tensor, Variable):
        raise TypeError(f"{op}: expected a Variable, got {type(tensor).__name__}")
    return tensor


def _fill(op, tensor, values):
    """Write `values` into the Variable in place, under no_grad (a parameter may be filled); returns it."""
    xp = get_array_module(tensor.data)
    with no_grad():
        inplace.write(op, tensor, xp.asarray(values).astype(tensor.data.dtype, copy=False))
    return tensor


def _draw(tensor, generator, normal):
    """float64 standard normal or U[0, 1) numbers of the tensor's shape, where its data lives."""
    if generator is not None:  # a NumPy Generator: drawn on the CPU, then moved to the data's device
        xp = get_array_module(tensor.data)
        return xp.asarray(generator.standard_normal(tensor.shape) if normal else generator.random(tensor.shape))
    make = factories.randn if normal else factories.rand
    return make(tensor.shape, dtype=np.float64, device=tensor.device).data


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with numbers from U(a, b)."""
    _checked("uniform_", tensor)
    return _fill("uniform_", tensor, a + (b - a) * _draw(tensor, generator, normal=False))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with numbers from N(mean, std^2)."""
    _checked("normal_", tensor)
    return _fill("normal_", tensor, mean + std * _draw(tensor, generator, normal=True))


def constant_(tensor, val):
    """Fill with `val`."""
    _checked("constant_", tensor)
    return _fill("constant_", tensor, get_array_module(tensor.data).full(tensor.shape, val))


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight of shape (out_features, in_features, *receptive field), as PyTorch counts them:
    each output sums in_features * receptive-field products, and each input feeds out_features * as many."""
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive_field_size = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field_size, tensor.shape[0] * receptive_field_size


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower() if isinstance(mode, str) else mode
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _xavier_std(op, tensor, gain):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_checked(op, tensor))
    return gain * math.sqrt(2.0 / float(fan_in + fan_out))


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot's uniform: U(-bound, bound), bound = gain sqrt(6 / (fan_in + fan_out))."""
    bound = math.sqrt(3.0) * _xavier_std("xavier_uniform_", tensor, gain)
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot's normal: N(0, std^2), std = gain sqrt(2 / (fan_in + fan_out))."""
    return normal_(tensor, 0.0, _xavier_std("xavier_normal_", tensor, gain), generator)


def _kaiming_std(op, tensor, a, mode, nonlinearity):
    """gain / sqrt(fan), or None (after PyTorch's warning) for a tensor with no elements."""
    if 0 in _checked(op, tensor).shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He's uniform: U(-bound, bound), bound = gain sqrt(3 / fan); `a` is leaky_relu's negative slope."""
    std = _kaiming_std("kaiming_uniform_", tensor, a, mode, nonlinearity)
    return tensor if std is None else uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He's normal: N(0, std^2), std = gain / sqrt(fan); `a` is leaky_relu's negative slope."""
    std = _kaiming_std("kaiming_normal_", tensor, a, mode, nonlinearity)
    return tensor if std is None else normal_(tensor, 0.0, std, generator)
