"""tinypytorch: a small deep-learning framework, grown step by step and checked against PyTorch.

Steps 01-22 are self-contained snapshots of the framework as it grew; from step 23
on it lives here, in modules:

    grad_mode   every mode, thread-local as PyTorch's: grad mode (Config, no_grad), saved-tensor hooks, anomaly, ...
    autocast_state  autocast's state beside them: on or off per device and thread, what Function.__call__ asks (58)
    forward_ad_state  forward mode's state beside them: the open dual level and each Variable's tangent (step 64)
    batching_state  vmap's state beside them: the open vmap levels, what Function.__call__ asks (step 69)
    dtypes      PyTorch's dtype rules in one place: the default dtype, type promotion, casting
    core        Variable, Function and the arithmetic operators: the floor every other module stands on
    views       version counters and views' records (steps 36-37), asked by every operation
    tensor_methods  x.reshape, x.sum, x.add_, x.to, ...: Variable's methods that call the floors above core
    functions   differentiable functions that are not operators (exp, sin, reshape, matmul, ...)
    cuda        the array backend: NumPy, or CuPy on a GPU; devices, moves and device memory (step 48)
    backends    torch.backends: mps and cudnn, answered truthfully (the package uses neither)
    functional  torch.functional: einsum, norm, unique, for `import torch.functional as F`
    not_there   PyTorch's names the package lacks (compile, nn.LSTM, profiler.profile, ...): a clear error where used
    utils       numerical gradients (utils.numerical), walking and drawing the graph (utils.walking, utils.drawing);
                utils.checkpoint (steps 42-44, selective checkpointing 60), utils.data (step 51), utils.memory
                (steps 66-67), the book's listings and pictures (utils.listing, utils.pictures)
    testfunctions  sphere, Matyas, Goldstein-Price, Rosenbrock (steps 24, 26)
    layers      Parameter, Layer, Linear, MLP (step 32)
    optimizers  SGD, Adam (step 32)
    autograd    the backward engine, autograd.grad and gradient hooks (steps 33-34); saved tensors and
                their hooks, anomaly detection, gradcheck (steps 35-40)
    inplace     in-place operations, on views too (steps 36-37)
    random      the default random generator, its state, fork_rng (step 41); the device's generator (step 48)
    recomputation  running a forward computation again for backward: checkpointing's and reversible blocks' replays
    reversible  reversible blocks and columns: AdditiveCoupling, ReversibleSequential, RevColumn (steps 46-47)
    normalization  layer_norm, one node with its own backward (step 54)
    classification  softmax, log_softmax, cross_entropy, accuracy (step 50)
    binary_cross_entropy  binary cross-entropy of probabilities and of logits (no step: nn.functional's)
    embedding   the embedding lookup, rows of a weight picked by integer indices (no step: nn.functional's)
    convolution  unfold, fold, conv2d as a matrix product over unfolded patches, max and average pooling
    structure   stack, scatter (x.scatter_), unique: operations that arrange elements (no step: PyTorch's)
    linear_algebra  cross, einsum (from the package's operations, as PyTorch's), svd (no step: PyTorch's);
                linalg: torch.linalg.cross
    datasets    a spiral and handwritten digits, offline (step 51); utils.data: Dataset, DataLoader (step 51)
    batched     BatchedVariable: a batch seen as one sample inside vmap, its batch at dim 0 of a physical value (68)
    batching_rules  a batching rule per operation: the same operation on the whole batch, dims shifted (step 69)
    batching    vmap: in_dims, out_dims, randomness, nested levels (step 69); func.vmap and tinypytorch.vmap

PyTorch's everyday surface, so that a PyTorch program runs with its imports renamed:

    factories   tensor, zeros, ones, full, eye, arange, linspace, rand, randn, *_like, from_numpy; dtype names
    nn          nn.functional: relu, softmax, cross_entropy, mse_loss, linear, dropout, ...; nn.Module, Sequential,
                ModuleList, Linear, the activation and loss modules (step 52)
    serialization  save and load of tensors, state dicts and checkpoints, an .npz file without pickle (step 52)
    optim       SGD, Adam, AdamW with parameter groups and state dicts (the optimizers of step 32, grown);
                RMSprop, Adadelta; optim.lr_scheduler: StepLR, MultiStepLR, ExponentialLR, LambdaLR, ...
    amp         autocast: each listed operation in its dtype, float16 or float32 (step 61); GradScaler (step 62)
    func        jvp, vjp, jacfwd, jacrev, hessian: transforms of functions of Variables (step 65); vmap (step 69);
                functional_call, a module as a function of its parameters, stack_module_state (step 70)
    distributed torch.distributed on the gloo backend: a process group, collectives on the package's arrays,
                spawn (step 73); distributed.zero: ZeRO stages 1-2; distributed.fsdp: fully_shard (ZeRO stage 3)
    nn.parallel DistributedDataParallel: gradients all-reduced in buckets from post-accumulate-grad hooks (step 73)
    multiprocessing  torch.multiprocessing's names (PyTorch's own)
    comparisons eq, ne, lt, le, gt, ge, equal, allclose, all, any, bitwise_xor: results without a gradient
    outputs     out= arguments: add, sub, mul, div, matmul (and the factories rand, randn) writing into a given tensor
"""
from tinypytorch import (
    amp, autograd, classification, cuda, datasets, dtypes, factories, func, functions, inplace, layers, nn, optim,
    optimizers, random, reversible, serialization, testfunctions, utils, views,
)
from tinypytorch import comparisons, outputs  # (no step)
from tinypytorch.tensor_methods import wire_tensor_methods
wire_tensor_methods()  # x.reshape, x.sum, x.add_, x.to, ...: Variable's methods that call the floors above core
import tinypytorch.utils.checkpoint  # noqa: E402,F401  (tinypytorch.utils.checkpoint and .data after `import tinypytorch`,
import tinypytorch.utils.data  # noqa: E402,F401  as torch.utils.checkpoint and .data after `import torch`)
from tinypytorch import backends, profiler  # noqa: E402  (torch.backends, torch.profiler)
from tinypytorch import functional  # noqa: E402  (torch.functional: einsum, norm, unique)
from tinypytorch.not_there import compile  # noqa: E402,A001  (torch.compile: a clear error where it is used)
from tinypytorch.amp import autocast
from tinypytorch.classification import cross_entropy, log_softmax, softmax
from tinypytorch.core import Function, Variable, add, as_array, as_variable, div, mul, neg, rdiv, rsub, sub
from tinypytorch.dtypes import can_cast, dtype, get_default_dtype, promote_types, set_default_dtype
from tinypytorch.dtypes import torch_result_type as result_type
from tinypytorch.grad_mode import (
    Config, enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad, set_grad_enabled,
    using_config,
)
from tinypytorch.factories import (
    arange, bool, cdouble, cfloat, complex64, complex128, double, eye, float, float16, float32, float64, from_numpy,
    full, full_like, half, int8, int16, int32, int64, linspace, long, ones, ones_like, rand, rand_like, randn,
    randn_like, short, tensor, uint8, zeros, zeros_like,
)
from tinypytorch.functions import (
    abs, amax, amin, argmax, argmin, broadcast_to, clamp, concatenate, cos, exp, expand, flatten, floor_divide,
    get_item, linear, log, logsumexp, matmul, max, maximum, mean, mean_squared_error, min, minimum, norm, permute, pow,
    relu, remainder, reshape, sigmoid, sin, sqrt, square, squeeze, sum, sum_to, t, tanh, transpose, unsqueeze, where,
)
from tinypytorch.functions import asin, ceil, floor, movedim, prod, std, var  # (no step)
from tinypytorch.functions import movedim as moveaxis  # PyTorch's other name of movedim
from tinypytorch.comparisons import all, allclose, any, bitwise_xor, eq, equal, ge, gt, le, lt, ne  # noqa: A004
from tinypytorch.inplace import sin_  # (no step)
# PyTorch's signatures of add, sub, mul, div and matmul, with out= (and alpha=): they replace core's and functions'
from tinypytorch.outputs import add, div, matmul, mul, sub  # noqa: F811
from tinypytorch.cuda import device
from tinypytorch import convolution
from tinypytorch.convolution import conv2d, conv_transpose2d, max_pool2d  # torch.conv2d, torch.max_pool2d, ...
from tinypytorch import linalg, linear_algebra, structure  # no step: PyTorch's surface
from tinypytorch.cuda import get_default_device, set_default_device
from tinypytorch.factories import empty, empty_like, randint
from tinypytorch.linear_algebra import cross, einsum, svd
from tinypytorch.structure import scatter, stack, unique
from tinypytorch.layers import Parameter
from tinypytorch.size import Size
from tinypytorch.random import get_rng_state, manual_seed, set_rng_state
from tinypytorch.serialization import load, save
from tinypytorch.func import vmap  # torch.vmap, torch.func.vmap's other name

Tensor = Variable  # PyTorch's name of the class, for isinstance checks and annotations in ported code
cat = concatenate  # PyTorch's name of step 45's concatenate

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
    # PyTorch's surface
    "Tensor", "is_grad_enabled", "set_grad_enabled", "inference_mode", "is_inference_mode_enabled", "tensor", "zeros", "ones", "full", "eye", "arange", "linspace",
    "rand", "randn", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "from_numpy",
    "float16", "float32", "float64", "half", "float", "double", "uint8", "int8", "int16", "short", "int32", "int64",
    "long", "bool", "complex64", "complex128", "cfloat", "cdouble",
    "abs", "amax", "amin", "argmax", "argmin", "clamp", "expand", "flatten", "min", "norm", "sqrt", "squeeze", "t",
    "unsqueeze", "cat", "factories", "nn", "optim", "save", "load", "serialization", "amp", "autocast", "func",
    "dtype", "get_default_dtype", "set_default_dtype", "promote_types", "can_cast", "result_type", "dtypes",
    "where", "maximum", "minimum", "floor_divide", "remainder", "Size", "vmap",
    "convolution", "conv2d", "conv_transpose2d", "max_pool2d",
    # no step: more of PyTorch's surface
    "asin", "ceil", "floor", "prod", "var", "std", "movedim", "moveaxis", "sin_", "all", "any", "allclose", "equal",
    "eq", "ne", "lt", "le", "gt", "ge", "bitwise_xor", "comparisons", "outputs",
]
__all__ += ["backends", "profiler", "compile", "functional"]  # torch.backends, torch.profiler, torch.compile (not_there)
__all__ += ["empty", "empty_like", "randint", "set_default_device", "get_default_device", "stack", "scatter", "unique",
            "cross", "einsum", "svd", "linalg", "linear_algebra", "structure"]


def __getattr__(name):
    """`tinypytorch.distributed` and `tinypytorch.multiprocessing` on first use, as `torch.distributed` after
    `import torch`: they need PyTorch (its transport), which `import tinypytorch` alone does not import."""
    if name in ("distributed", "multiprocessing"):
        import importlib
        return importlib.import_module(f"tinypytorch.{name}")
    raise AttributeError(f"module 'tinypytorch' has no attribute '{name}'")
