"""PyTorch's `torch.backends.cudnn`: the switches of NVIDIA's cuDNN, which tinypytorch never calls.

PyTorch runs convolutions (and a few other operations) on a GPU through cuDNN, and these
switches choose among its kernels: `enabled` (use cuDNN at all), `benchmark` (time the
kernels and keep the fastest for each shape), `deterministic` (only kernels that give the
same bits every run), `allow_tf32` (TensorFloat-32 matrix units). tinypytorch calls no cuDNN
kernel: on a GPU its convolution is an unfold and a matrix product of CuPy's. So the switches
are kept, with PyTorch's defaults and its check that each is a bool, and change nothing, as
they change nothing in PyTorch's CPU build. In particular `deterministic = True` does not make
a GPU convolution's gradient the same bits every run: unfold's backward adds with CuPy's
`add.at`, whose atomic additions on a GPU come in no fixed order.

`version()` is None and `is_available()` False: there is no cuDNN to ask.
"""
import contextlib
import sys
import types

_SWITCHES = {"enabled": ("set_enabled_cudnn", True), "benchmark": ("set_benchmark_cudnn", False),
             "deterministic": ("set_deterministic_cudnn", False), "allow_tf32": ("set_allow_tf32_cublas", True)}


def version():
    """cuDNN's version: None, as in PyTorch's CPU build, since the package uses no cuDNN."""
    return None


def is_available():
    """Whether cuDNN can be used: False, since the package never calls it."""
    return False


def _checked(name, value):
    if not isinstance(value, bool):
        raise RuntimeError(f"{_SWITCHES[name][0]} expects a bool, but got {type(value).__name__}")  # PyTorch's words
    return value


class _CudnnModule(types.ModuleType):
    """This module, with its switches as attributes that take only a bool (PyTorch's check on assignment)."""

    def __setattr__(self, name, value):
        if name in _SWITCHES:
            value = _checked(name, value)
        super().__setattr__(name, value)


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True):
    """Set the switches inside a `with` block and put them back after (PyTorch's `torch.backends.cudnn.flags`,
    with its defaults: `enabled=False`). They change nothing here: no cuDNN kernel runs. `benchmark_limit`
    stays None, as where PyTorch finds no cuDNN."""
    module = sys.modules[__name__]
    given = {"enabled": enabled, "benchmark": benchmark, "deterministic": deterministic, "allow_tf32": allow_tf32}
    previous = {name: getattr(module, name) for name in given}
    for name, value in given.items():
        _checked(name, value)
    try:
        for name, value in given.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in previous.items():
            setattr(module, name, value)


enabled, benchmark, deterministic, allow_tf32 = (default for _, default in _SWITCHES.values())
benchmark_limit = None  # how many kernels benchmark=True tries: None where there is no cuDNN, as in PyTorch

__all__ = ["version", "is_available", "flags", "enabled", "benchmark", "deterministic", "allow_tf32",
           "benchmark_limit"]

sys.modules[__name__].__class__ = _CudnnModule
