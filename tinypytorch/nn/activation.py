"""PyTorch's nn.Softmax and nn.LogSoftmax: Modules around nn.functional.softmax and log_softmax along `dim`."""
from tinypytorch.nn import functional as F
from tinypytorch.nn.modules import Module

__all__ = ["Softmax", "LogSoftmax"]


class Softmax(Module):
    """PyTorch's nn.Softmax(dim=None): probabilities along `dim`. Without a dim, calling it raises, as F.softmax does
    (PyTorch's guess of a dim is deprecated)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """PyTorch's nn.LogSoftmax(dim=None): log-probabilities along `dim`."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):  # noqa: A002
        return F.log_softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"
