"""PyTorch's normalization modules (step 54): LayerNorm, a Module around `nn.functional.layer_norm`.

LayerNorm re-centres and re-scales each sample over its last dims, so whatever a deep stack of
layers did to the scale of its activations, the next layer sees them at unit variance again;
its backward divides by the same standard deviation, which keeps gradients at a steady scale too.
"""
import numbers

import numpy as np

from tinypytorch.layers import Parameter
from tinypytorch.nn import functional as F
from tinypytorch.nn import init
from tinypytorch.nn.modules import Module, factory_dtype


class LayerNorm(Module):  # step 54
    """PyTorch's nn.LayerNorm(normalized_shape, eps=1e-05, elementwise_affine=True, bias=True).

    weight (ones) and bias (zeros) have the shape `normalized_shape`, the trailing dims of the input
    that each slice normalizes over; without elementwise_affine both slots are empty (None).
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)  # a float fails here, as in PyTorch ("not iterable")
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            dtype = factory_dtype(dtype)  # step 59: the default dtype unless given
            self.weight = Parameter(np.empty(self.normalized_shape, dtype), name="weight")
            if bias:
                self.bias = Parameter(np.empty(self.normalized_shape, dtype), name="bias")
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:  # step 59: PyTorch's factory arguments
            self.to(device)

    def reset_parameters(self):
        """The identity map to start with: weight ones, bias zeros."""
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
