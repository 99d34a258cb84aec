"""tinypytorch: a small deep-learning framework, grown step by step and checked against PyTorch.

Steps 01-22 are self-contained snapshots of the framework as it grew; from step 23
on it lives here, in modules:

    core        Config, using_config, no_grad, Variable, Function and the arithmetic operators
    functions   differentiable functions that are not operators (exp, sin, reshape, matmul, ...)
    cuda        the array backend: NumPy, or CuPy on a GPU; devices, moves and device memory (step 48)
    utils       numerical gradients, walking and drawing the graph; utils.checkpoint (steps 41-45)
    testfunctions  sphere, Matyas, Goldstein-Price, Rosenbrock (steps 24, 26)
    layers      Parameter, Layer, Linear, MLP (step 32)
    optimizers  SGD, Adam (step 32)
    autograd    the backward engine, autograd.grad and gradient hooks (steps 33-34); saved tensors and
                their hooks, anomaly detection, gradcheck (steps 35-40)
    inplace     in-place operations, version counters and views (steps 36-37)
    random      the default random generator, its state, fork_rng (step 41); the device's generator (step 48)
    reversible  reversible blocks and columns: AdditiveCoupling, ReversibleSequential, RevColumn (steps 46-47)
    classification  softmax, log_softmax, cross_entropy, accuracy (step 50)
    datasets    a spiral and handwritten digits, offline (step 51); utils.data: Dataset, DataLoader (step 51)
"""
from tinypytorch import (
    autograd, classification, cuda, datasets, functions, inplace, layers, optimizers, random, reversible, testfunctions,
    utils,
)
from tinypytorch.classification import cross_entropy, log_softmax, softmax
from tinypytorch.core import (
    Config, Function, Variable, add, as_array, as_variable, div, enable_grad, mul, neg, no_grad, pow, rdiv, rsub, sub,
    using_config,
)
from tinypytorch.functions import (
    broadcast_to, concatenate, cos, exp, get_item, linear, log, logsumexp, matmul, max, mean, mean_squared_error,
    permute, relu, reshape, sigmoid, sin, square, sum, sum_to, tanh, transpose,
)
from tinypytorch.cuda import device
from tinypytorch.layers import Parameter
from tinypytorch.random import get_rng_state, manual_seed, set_rng_state

__version__ = "0.1.0"  # keep equal to the version in pyproject.toml

__all__ = [
    "Config", "Function", "Variable", "Parameter", "as_array", "as_variable", "using_config", "no_grad", "enable_grad",
    "add", "mul", "neg", "sub", "rsub", "div", "rdiv", "pow",
    "square", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "mean_squared_error",
    "reshape", "transpose", "permute", "sum", "broadcast_to", "sum_to", "matmul", "linear", "get_item", "concatenate",
    "mean", "max", "logsumexp", "softmax", "log_softmax", "cross_entropy",
    "manual_seed", "get_rng_state", "set_rng_state", "device",
    "autograd", "classification", "cuda", "datasets", "functions", "inplace", "layers", "optimizers", "random",
    "reversible", "testfunctions", "utils",
]
