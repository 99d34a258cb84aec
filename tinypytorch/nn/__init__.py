"""tinypytorch.nn: PyTorch's torch.nn.

    functional     relu, softmax, cross_entropy, linear, layer_norm, ... (PyTorch's torch.nn.functional)
    modules        from step 52, Module and the modules built on it: Sequential, ModuleList, Linear, Dropout,
                   the activations ReLU, Tanh and Sigmoid, the losses MSELoss and CrossEntropyLoss
    normalization  from step 54, LayerNorm
    init           filling weights: xavier_uniform_, kaiming_normal_, calculate_gain, ...
    batchnorm      from step 56, BatchNorm1d (step 45's layer as a Module, torch's state-dict keys); BatchNorm2d
    sparse         Embedding; loss: BCELoss, BCEWithLogitsLoss
    conv           Conv2d (tinypytorch.convolution's conv2d as a Module, torch's initialization)
    pooling        MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d
    flatten        Flatten, Unflatten, Identity; activation: Softmax, LogSoftmax
    utils          clip_grad_norm_, clip_grad_value_

RNN, LSTM, GRU (and their cells) and DataParallel are not in tinypytorch: constructing one raises a clear
error (tinypytorch.not_there).

`Parameter` is step 32's.
"""
from tinypytorch.layers import Parameter
from tinypytorch.nn import batchnorm, functional, init, modules, normalization, utils
from tinypytorch.nn.batchnorm import BatchNorm1d, BatchNorm2d
from tinypytorch.nn.modules import (
    CrossEntropyLoss, Dropout, Linear, Module, ModuleList, MSELoss, ReLU, Sequential, Sigmoid, Tanh,
)
from tinypytorch.nn.normalization import LayerNorm
from tinypytorch.nn import activation, conv, flatten, loss, pooling, sparse
from tinypytorch.nn.activation import LogSoftmax, Softmax
from tinypytorch.nn.conv import Conv2d
from tinypytorch.nn.flatten import Flatten, Identity, Unflatten
from tinypytorch.nn.loss import BCELoss, BCEWithLogitsLoss
from tinypytorch.nn.pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d
from tinypytorch.nn.sparse import Embedding
from tinypytorch.not_there import GRU, LSTM, RNN, DataParallel, GRUCell, LSTMCell, RNNCell

__all__ = [
    "functional", "modules", "init", "utils", "Parameter", "Module", "Sequential", "ModuleList", "Linear", "Dropout",
    "ReLU", "Tanh", "Sigmoid", "MSELoss", "CrossEntropyLoss",
    "normalization", "LayerNorm", "batchnorm", "BatchNorm1d", "BatchNorm2d", "sparse", "Embedding",
    "loss", "BCELoss", "BCEWithLogitsLoss",
    "conv", "Conv2d", "pooling", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d",
    "flatten", "Flatten", "Unflatten", "Identity", "activation", "Softmax", "LogSoftmax",
    "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell", "DataParallel",
]


def __getattr__(name):
    """`tinypytorch.nn.parallel` on first use: DistributedDataParallel needs PyTorch's torch.distributed."""
    if name == "parallel":
        import importlib
        return importlib.import_module("tinypytorch.nn.parallel")
    raise AttributeError(f"module 'tinypytorch.nn' has no attribute '{name}'")
