"""Automatic mixed precision (PyTorch's torch.amp): autocast (step 58)."""
from tinypytorch.amp.autocast_mode import autocast, is_autocast_enabled

__all__ = ["autocast", "is_autocast_enabled"]
