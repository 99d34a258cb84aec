"""Automatic mixed precision, PyTorch's `torch.amp`.

    autocast     step 60: each listed operation run in the dtype that suits it (autocast_mode.py)
    GradScaler   step 61: dynamic loss scaling, so that float16 gradients do not flush to zero (grad_scaler.py)
"""
from tinypytorch.amp.autocast_mode import autocast, is_autocast_enabled
from tinypytorch.amp.grad_scaler import GradScaler

__all__ = ["autocast", "is_autocast_enabled", "GradScaler"]
