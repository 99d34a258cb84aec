"""Automatic mixed precision, PyTorch's `torch.amp`: dynamic loss scaling with `GradScaler` (step 59)."""
from tinypytorch.amp.grad_scaler import GradScaler

__all__ = ["GradScaler"]
