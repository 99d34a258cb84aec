"""PyTorch's `torch.backends.mps`: Apple's Metal backend, which tinypytorch does not have."""


def is_built():
    """Whether the framework was built with Metal support: never (PyTorch's Linux build says False too)."""
    return False


def is_available():
    """Whether a Metal device can be used: never; devices are "cpu" and "cuda" (tinypytorch.cuda)."""
    return False


__all__ = ["is_available", "is_built"]
