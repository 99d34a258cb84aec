"""Automatic mixed precision, PyTorch's `torch.amp`.

    autocast     step 61: each listed operation run in the dtype that suits it (autocast_mode.py)
    GradScaler   step 62: dynamic loss scaling, so that float16 gradients do not flush to zero (grad_scaler.py)

PyTorch's deprecated torch.cuda.amp (GradScaler, autocast for "cuda") is deprecated.py, found as tinypytorch.cuda.amp.
"""
import sys

from tinypytorch import cuda
from tinypytorch.amp.autocast_mode import autocast, is_autocast_enabled
from tinypytorch.amp.grad_scaler import GradScaler
from tinypytorch.amp import deprecated

# cuda is a module, not a package: its amp is registered here, so that `tinypytorch.cuda.amp.GradScaler` and
# `from tinypytorch.cuda.amp import GradScaler` find it
cuda.amp = sys.modules["tinypytorch.cuda.amp"] = deprecated

__all__ = ["autocast", "is_autocast_enabled", "GradScaler"]
