"""PyTorch's torch.nn.Conv2d: a Module around nn.functional.conv2d, with PyTorch's signature, initialization,
printout and state-dict keys (`weight`, `bias`)."""
import math
import numbers

import numpy as np

from tinypytorch.layers import Parameter
from tinypytorch.nn import functional as F
from tinypytorch.nn import init
from tinypytorch.nn.modules import Module, factory_dtype

__all__ = ["Conv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _pair(name, value):
    """An int or a sequence of ints as a pair (PyTorch's _pair), refused by name if it is neither."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, (tuple, list)) and all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                for v in value):
        return tuple(int(v) for v in value)
    raise TypeError(f"Conv2d: {name} must be an int or a tuple of ints, got {value!r}")


class Conv2d(Module):
    """PyTorch's nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
    bias=True, padding_mode='zeros', device=None, dtype=None).

    weight (out_channels, in_channels / groups, kh, kw) and bias (out_channels,) start uniform in [-k, k],
    k = 1 / sqrt(fan_in), fan_in = in_channels / groups * kh * kw: what PyTorch's kaiming_uniform_(a=sqrt(5)) comes
    to, drawn from the framework's generator, in `dtype` (the default dtype unless given) on `device`. Only the
    zero padding is there: another padding_mode raises NotImplementedError.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups <= 0:
            raise ValueError("groups must be a positive integer")  # PyTorch's words, here and below
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        self.kernel_size, self.stride = _pair("kernel_size", kernel_size), _pair("stride", stride)
        self.dilation = _pair("dilation", dilation)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'same', 'valid'}}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _pair("padding", padding)
        if padding_mode not in _PADDING_MODES:
            raise ValueError("padding_mode must be one of {'circular', 'reflect', 'replicate', 'zeros'}, but got "
                             f"padding_mode='{padding_mode}'")
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv2d: padding_mode='{padding_mode}' is not implemented in tinypytorch; "
                                      "only 'zeros' is")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, int(groups)
        self.padding_mode, self.transposed, self.output_padding = padding_mode, False, (0, 0)
        dtype = factory_dtype(dtype)
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(np.empty(shape, dtype), name="weight")
        if bias:
            self.bias = Parameter(np.empty(out_channels, dtype), name="bias")
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        """PyTorch's: kaiming_uniform_(weight, a=sqrt(5)), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias
        from the same interval."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels // self.groups * math.prod(self.kernel_size)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        """PyTorch's: what differs from the defaults, after the channels, the kernel and the stride."""
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s
