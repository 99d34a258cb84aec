"""PyTorch's torch.nn.BatchNorm1d, as a Module (step 55).

Step 45's `layers.BatchNorm1d` computes batch normalisation; this module gives it PyTorch's face, as
`nn.Linear` does for `layers.Linear`: torch's signature and printout, and torch's state dict, in which
the number of batches seen is a buffer too (`num_batches_tracked`, a 0-d int64 array), so that a
checkpoint holds everything the running statistics depend on.
"""
import numpy as np

from tinypytorch import layers
from tinypytorch.nn.modules import Module, factory_dtype

__all__ = ["BatchNorm1d"]


class BatchNorm1d(layers.BatchNorm1d, Module):  # step 55
    """PyTorch's nn.BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, *,
    bias=True), for inputs of shape (N, num_features).

    Parameters weight (ones) and bias (zeros); buffers running_mean, running_var and num_batches_tracked.
    """

    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        if not (affine and track_running_stats and bias):  # say so, rather than normalise differently from PyTorch
            raise NotImplementedError("BatchNorm1d: only affine=True, track_running_stats=True and bias=True are "
                                      "implemented")
        super().__init__(num_features, eps, momentum, dtype=factory_dtype(dtype))  # layers.BatchNorm1d, then Module's
        self.affine, self.track_running_stats = affine, track_running_stats
        del self.num_batches_tracked  # step 45's plain int becomes a buffer; `+= 1` then adds in place
        self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        if device is not None:
            self.to(device)

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        if self.training and len(input.shape) == 2 and input.shape[0] == 1:  # PyTorch's check and message
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
        return super().forward(input)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")  # torch 2.13's
