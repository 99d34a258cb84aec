"""tinypytorch.nn: PyTorch's torch.nn.

`functional` (PyTorch's torch.nn.functional: relu, softmax, cross_entropy, linear, ...), and from step 52
`Module` with the modules built on it (`nn.modules`): Sequential, ModuleList, Linear, Dropout, the activations
ReLU, Tanh and Sigmoid, the losses MSELoss and CrossEntropyLoss. `Parameter` is step 32's.
"""
from tinypytorch.layers import Parameter
from tinypytorch.nn import functional, modules
from tinypytorch.nn.modules import (
    CrossEntropyLoss, Dropout, Linear, Module, ModuleList, MSELoss, ReLU, Sequential, Sigmoid, Tanh,
)

__all__ = [
    "functional", "modules", "Parameter", "Module", "Sequential", "ModuleList", "Linear", "Dropout", "ReLU", "Tanh",
    "Sigmoid", "MSELoss", "CrossEntropyLoss",
]
