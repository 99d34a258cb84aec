"""autocast (step 61): PyTorch's `torch.autocast`, which runs each listed operation in the dtype that suits it.

Inside `with autocast("cuda"):` (or "cpu"), an operation of the table below gets its floating inputs cast
before it runs: to the lower dtype (float16) where half precision is fast and safe (matrix products), to float32
where it needs the range and precision (losses, and on CUDA exponentials, logarithms, sums, softmax), to the
widest input dtype for the "promote" ones (cat). Every other operation runs in whatever dtype arrives. float64
and integer inputs are never cast. Each cast is a Cast node of the graph, so backward, which runs after the block,
casts each gradient back to its input's dtype: a float32 weight gets a float32 gradient.

The policy is PyTorch's, per device type, as data (POLICY); the state (on or off, the dtype) is thread-local and
lives in tinypytorch.autocast_state, which Function.__call__ asks.
"""
import contextlib
import functools
import threading
import warnings

import numpy as np

from tinypytorch import autocast_state, cuda, modes
from tinypytorch.classification import LogSoftmax, NLLLoss, Softmax
from tinypytorch.core import Pow, astype
from tinypytorch.functions import Concatenate, Exp, LinearFunction, Log, MatMul, MeanSquaredError, Norm, Sum
from tinypytorch.functions import Asin, Prod  # (no step)
from tinypytorch.normalization import NativeLayerNorm
from tinypytorch.linear_algebra import Cross
from tinypytorch.structure import Stack

# step 61: PyTorch's lists (docs "Autocast Op Reference"; "float16 shares the lists of bfloat16" on CPU), for the
# operations the package has. "lower": to the autocast dtype; "float32"; "promote": to the widest input dtype;
# None: not listed, run in whatever dtype arrives.
#        package op      Function class     torch op          CPU        CUDA
POLICY = [
    ("matmul",        MatMul,           "matmul",         "lower",   "lower"),
    ("linear",        LinearFunction,   "linear",         "lower",   "lower"),
    ("mse_loss",      MeanSquaredError, "mse_loss",       "float32", "float32"),
    ("nll_loss",      NLLLoss,          "nll_loss",       "float32", "float32"),
    ("softmax",       Softmax,          "softmax",        None,      "float32"),
    ("log_softmax",   LogSoftmax,       "log_softmax",    None,      "float32"),
    ("layer_norm",    NativeLayerNorm,  "layer_norm",     None,      "float32"),
    ("sum",           Sum,              "sum",            None,      "float32"),
    ("exp",           Exp,              "exp",            None,      "float32"),
    ("log",           Log,              "log",            None,      "float32"),
    ("pow",           Pow,              "pow",            None,      "float32"),
    ("norm",          Norm,             "norm",           None,      "float32"),
    ("concatenate",   Concatenate,      "cat",            "promote", "promote"),
    ("stack",         Stack,            "stack",          "promote", "promote"),
    ("cross",         Cross,            "cross",          None,      "promote"),
    ("prod",          Prod,             "prod",           "float32", "float32"),  # (no step)
    ("asin",          Asin,             "asin",           None,      "float32"),  # (no step)
    # built from several operations (autocast_state.autocast_composite): cast once, as torch's one operation
    ("cross_entropy", None,             "cross_entropy",  "float32", "float32"),
    ("conv2d",        None,             "conv2d",         "lower",   "lower"),  # unfold, matmul, reshape
    ("conv_transpose2d", None,          "conv_transpose2d", "lower", "lower"),  # matmul, fold, reshape
]
_DEVICES = ("cpu", "cuda")
_BY_CLASS = {cls: {"cpu": cpu, "cuda": gpu} for _, cls, _, cpu, gpu in POLICY if cls is not None}
_BY_NAME = {name: {"cpu": cpu, "cuda": gpu} for name, _, _, cpu, gpu in POLICY}
# device types PyTorch knows (its message for others differs) but the package has no backend for
_OTHER_TORCH_DEVICES = ("ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia", "xla",
                        "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")
_DEFAULT_DTYPE = {"cpu": "bfloat16", "cuda": np.dtype(np.float16)}  # PyTorch's defaults
_BFLOAT16 = ("autocast: bfloat16 (PyTorch's default lower dtype on CPU) is not supported: NumPy has no bfloat16. "
             "Pass dtype=tinypytorch.float16, which PyTorch accepts on CPU too")


class _Cache(threading.local):
    """The casts of weights made in this thread's outermost autocast block: {id(weight): (weight, cast)}."""

    def __init__(self):
        self.casts = {}


_cache = _Cache()


def _device_type(array):
    return "cpu" if isinstance(array, np.ndarray) else "cuda"


def cast_inputs(function, inputs):  # step 61
    """The inputs `function` (a Function, or the name of an operation built from several) runs on under this
    thread's autocast: cast where POLICY lists it, else unchanged."""
    row = _BY_NAME.get(function) if isinstance(function, str) else _BY_CLASS.get(type(function))
    if row is None:
        return inputs
    state = autocast_state.Autocast
    device = _device_type(inputs[0].data)
    policy = row[device] if state.enabled.get(device) else None
    if policy is None:
        return inputs
    lower = state.dtype[device]
    target = {"lower": lower, "float32": np.dtype(np.float32), "promote": _widest(inputs, lower)}[policy]
    return tuple([_cast(x, target, lower, state.cache_enabled) for x in inputs])


def _widest(inputs, lower):
    """PyTorch's promote: the lower dtype promoted with every floating input's dtype."""
    return np.result_type(lower, *[x.data.dtype for x in inputs if x.data.dtype.kind == "f"])


def _cast(x, target, lower, cache_enabled):
    """x cast to `target` if autocast may cast it (floating, not float64); a weight's cast to the lower dtype
    is made once a block, as PyTorch caches it: a float32 leaf that requires grad and is not a view."""
    dtype = x.data.dtype
    if dtype.kind != "f" or dtype == np.float64 or dtype == target:
        return x
    if not (cache_enabled and target == lower and dtype == np.float32 and x.is_leaf and x.requires_grad
            and x._base is None):
        return astype(x, target)
    kept = _cache.casts.get(id(x))
    if kept is None:
        kept = _cache.casts[id(x)] = (x, astype(x, target))  # x kept alive, so that its id is not reused
    return kept[1]


autocast_state.register_autocast_policy(cast_inputs)


def casting_mode(function, inputs, below):  # step 68: autocast's entry of the mode stack
    """Under autocast, the operation runs below on its inputs cast as POLICY says (a formula running on bare
    arrays is not cast: it runs past every mode)."""
    xs = function.variables(inputs)
    return below(inputs if xs is None else cast_inputs(function, xs))


modes.register("autocast", casting_mode)


def _checked_device_type(device_type):
    if not isinstance(device_type, str):  # PyTorch's words, here and below
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type in _OTHER_TORCH_DEVICES:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
    if device_type not in _DEVICES:
        raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {device_type}")
    return device_type


def _checked_dtype(device_type, dtype):
    """The lower dtype, or None where PyTorch warns and disables autocast (a dtype it does not support)."""
    if dtype is None:
        dtype = autocast_state.Autocast.dtype.get(device_type) or _DEFAULT_DTYPE[device_type]
    if "bfloat16" in str(dtype):
        raise RuntimeError(_BFLOAT16)
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype != np.float16:
        name = device_type.upper()
        warnings.warn(f"In {name} autocast, but the target dtype is not supported. Disabling autocast.\n"
                      f"{name} Autocast only supports dtypes of float16 currently (bfloat16: not in NumPy).",
                      stacklevel=4)
        return None
    return dtype


class autocast:  # noqa: N801 (PyTorch's name); step 61
    """Run the operations of POLICY in their dtype inside a `with` block, or inside a decorated function.

    autocast(device_type, dtype=None, enabled=True, cache_enabled=None), PyTorch's signature: device_type
    "cpu" or "cuda"; dtype float16 (PyTorch's CUDA default; its CPU default, bfloat16, is not in NumPy);
    enabled=False turns autocast off inside an enclosing block; cache_enabled: cache the casts of weights
    (default: the enclosing block's setting, True at first).
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.device = _checked_device_type(device_type)
        self.fast_dtype = dtype
        if enabled and self.device == "cuda" and not cuda.is_available():
            warnings.warn("CUDA is not available. Disabling autocast.", stacklevel=2)
            enabled = False
        if enabled:
            self.fast_dtype = _checked_dtype(self.device, dtype)
            enabled = self.fast_dtype is not None
        self._enabled = enabled
        self._cache_enabled = cache_enabled
        self._previous = []

    def __enter__(self):
        cache_enabled = autocast_state.Autocast.cache_enabled if self._cache_enabled is None else self._cache_enabled
        dtype = self.fast_dtype if self.fast_dtype is not None else autocast_state.Autocast.dtype.get(self.device)
        self._previous.append(autocast_state.enter_autocast(self.device, self._enabled, dtype, cache_enabled))
        return self

    def __exit__(self, *exc_info):
        if autocast_state.exit_autocast(self._previous.pop()):
            _cache.casts = {}  # the outermost block closed: its weights' casts go (PyTorch's clear_autocast_cache)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, but got {type(func).__name__}.")

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorate_autocast


def keep_autocast(function):  # step 61
    """`function`, run whenever it is called under this thread's autocast settings of now: checkpoint's
    recomputation, which backward runs outside any autocast block, must cast as the first run did
    (PyTorch's checkpoint records the settings too)."""
    state = autocast_state.Autocast
    recorded = [(device, state.enabled.get(device, False), state.dtype.get(device), state.cache_enabled)
                for device in _DEVICES]
    if not any(enabled for _, enabled, _, _ in recorded):
        return _without_autocast(function)

    @functools.wraps(function)
    def run(*args, **kwargs):
        with contextlib.ExitStack() as blocks:
            for device, enabled, dtype, cache_enabled in recorded:
                blocks.enter_context(autocast(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled))
            return function(*args, **kwargs)

    return run


def _without_autocast(function):
    """`function`, run with autocast off if a block is open when it is called (the common case costs one read)."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        if not autocast_state.open_autocast_blocks:
            return function(*args, **kwargs)
        with autocast("cpu", enabled=False), autocast("cuda", enabled=False):
            return function(*args, **kwargs)

    return run


def is_autocast_enabled(device_type="cuda"):
    """Whether autocast is on for `device_type` in this thread (PyTorch's `torch.is_autocast_enabled`)."""
    return autocast_state.Autocast.enabled.get(_checked_device_type(device_type), False)

