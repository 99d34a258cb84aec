"""PyTorch's deprecated `torch.cuda.amp`: `GradScaler` and `autocast` for CUDA, each with PyTorch's FutureWarning.

PyTorch keeps them as subclasses of `torch.amp.GradScaler` and `torch.amp.autocast` that fix the
device type to "cuda"; so does the package. On a machine without a GPU both then warn and disable
themselves, as PyTorch's CPU build does. `tinypytorch.cuda` is one module, a floor below amp, so
this module is registered as its `amp` (tinypytorch/amp/__init__.py): `from tinypytorch.cuda.amp
import GradScaler` works as PyTorch's import does.
"""
import warnings

from tinypytorch.amp import autocast_mode, grad_scaler
from tinypytorch.factories import float16

__all__ = ["GradScaler", "autocast"]


class GradScaler(grad_scaler.GradScaler):
    """`torch.cuda.amp.GradScaler(...)`: `tinypytorch.amp.GradScaler("cuda", ...)`, with PyTorch's FutureWarning."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


class autocast(autocast_mode.autocast):  # noqa: N801 (PyTorch's name)
    """`torch.cuda.amp.autocast(...)`: `tinypytorch.amp.autocast("cuda", ...)`, with PyTorch's FutureWarning."""

    def __init__(self, enabled=True, dtype=float16, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
