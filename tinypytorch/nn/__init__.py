"""tinypytorch.nn: PyTorch's torch.nn.

For now it holds `functional` (PyTorch's torch.nn.functional: relu, softmax, cross_entropy, linear, layer_norm, ...),
`init` (filling weights: xavier_uniform_, kaiming_normal_, ...) and `utils` (clip_grad_norm_, clip_grad_value_);
Module and the layers built on it come later.
"""
from tinypytorch.nn import functional, init, utils

__all__ = ["functional", "init", "utils"]
