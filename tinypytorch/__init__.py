"""tinypytorch: a small deep-learning framework, grown step by step and checked against PyTorch.

The package is the code of step 22 (steps 01-22 are self-contained snapshots of it
as it grew), organised into modules from step 23 on:

    core       Config, using_config, no_grad, Variable, Function and the arithmetic operators
    functions  differentiable functions that are not operators (square, exp, ...)
    cuda       the array backend: NumPy, or CuPy on a GPU
    utils      numerical gradients for checking backward
"""
from tinypytorch import cuda, functions, utils
from tinypytorch.core import (
    Config,
    Function,
    Variable,
    add,
    as_array,
    as_variable,
    div,
    mul,
    neg,
    no_grad,
    pow,
    rdiv,
    rsub,
    sub,
    using_config,
)
from tinypytorch.functions import exp, square

__version__ = "0.1.0"  # keep equal to the version in pyproject.toml

__all__ = [
    "Config", "Function", "Variable", "as_array", "as_variable", "using_config", "no_grad",
    "add", "mul", "neg", "sub", "rsub", "div", "rdiv", "pow", "square", "exp",
    "functions", "utils", "cuda",
]
