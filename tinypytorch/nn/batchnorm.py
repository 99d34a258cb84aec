"""PyTorch's torch.nn.BatchNorm1d and BatchNorm2d, as Modules (step 56).

Step 45's `layers.BatchNorm1d` normalises a batch of feature vectors (N, C); these modules give it PyTorch's
face, as `nn.Linear` does for `layers.Linear`: torch's signature, printout and state dict, in which the number of
batches seen is a buffer too (`num_batches_tracked`, a 0-d int64 array), so that a checkpoint holds everything
the running statistics depend on. One forward (`_BatchNorm`, torch's name) serves both: each channel c of
(N, C), (N, C, L) or (N, C, H, W) is normalised over every position that holds it (the batch, and the length or
the image), with step 45's formulas:

    y = (x - mean) / sqrt(var + eps) * weight + bias,    var biased; the running variance takes it unbiased.

PyTorch's options: affine=False (no weight, no bias; bias=False, no bias), track_running_stats=False (no running
statistics: the batch's are used in evaluation too), momentum=None (a cumulative average). A float16 input is
normalised in float32 and rounded once, as PyTorch's CPU kernels do, and may meet float32 parameters.
"""
import numpy as np

from tinypytorch import batching_state, cuda, dtypes, layers, recomputation
from tinypytorch.core import Variable, as_variable, astype
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import reshape
from tinypytorch.nn.modules import Module, factory_dtype
from tinypytorch.normalization import _check_dtypes

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _BatchNorm(layers.BatchNorm1d, Module):  # step 56
    """What BatchNorm1d and BatchNorm2d share; each says which input shapes it takes (`_check_input_dim`)."""

    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, dtype=factory_dtype(dtype))  # layers.BatchNorm1d, then Module's
        self.affine, self.track_running_stats = affine, track_running_stats
        del self.num_batches_tracked  # step 45's plain int becomes a buffer; `+= 1` then adds in place
        if track_running_stats:
            self.register_buffer("num_batches_tracked", np.array(0, dtype=np.int64))
        else:  # no statistics: torch's None buffers, which no state dict holds
            del self.running_mean, self.running_var
            self.running_mean = self.running_var = self.num_batches_tracked = None
        for name, kept in (("weight", affine), ("bias", affine and bias)):
            if not kept:
                delattr(self, name)
                self.register_parameter(name, None)  # an empty slot, as torch's
        if device is not None:
            self.to(device)

    def _check_input_dim(self, input):  # noqa: A002 (PyTorch's name)
        raise NotImplementedError

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        x = as_variable(input, type(self).__name__)
        self._check_input_dim(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        counting = self.training and self.track_running_stats and self.num_batches_tracked is not None
        if counting and not recomputation.is_recomputing():  # step 45: a recomputation must not count twice
            # torch counts before it checks the batch (a batch of one that raises below has been counted)
            self.num_batches_tracked += 1
            momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        update = self.training and self.track_running_stats and not recomputation.is_recomputing()
        return _batch_norm(x, self.running_mean if update or not self.training else None,
                           self.running_var if update or not self.training else None,
                           self.weight, self.bias, use_batch, momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")  # torch 2.13's


class BatchNorm1d(_BatchNorm):  # step 56
    """PyTorch's nn.BatchNorm1d(num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True,
    device=None, dtype=None, *, bias=True), for inputs (N, C) or (N, C, L).

    Parameters weight (ones) and bias (zeros); buffers running_mean, running_var and num_batches_tracked.
    """

    def _check_input_dim(self, input):  # noqa: A002
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")


class BatchNorm2d(_BatchNorm):
    """PyTorch's nn.BatchNorm2d, BatchNorm1d's arguments, for images (N, C, H, W): one mean and variance per
    channel, over the batch and every pixel."""

    def _check_input_dim(self, input):  # noqa: A002
        if input.ndim != 4:
            raise ValueError(f"expected 4D input (got {input.ndim}D input)")


def _batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum, eps):
    """torch's F.batch_norm for a Module's buffers: normalise x with the batch's statistics (use_batch) or the
    running ones; with use_batch, running statistics given (arrays) move `momentum` of the way to the batch's."""
    if batching_state.open_vmap_levels and any(isinstance(v, batching_state.batched_type)  # step 69: vmap
                                               for v in (x, running_mean, running_var, weight, bias)):
        raise NotImplementedError("vmap: batch_norm of a batched input or with batched parameters is not supported "
                                  "in tinypytorch; call it outside vmap, or loop over the batch")
    channels = x.shape[1]
    if use_batch and x.numel() // channels == 1:  # torch's check, before the others
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.shape}")
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):  # torch's checks, its order and words
        if p is not None and p.shape[0] != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {p.shape[0]}")
    if x.dtype.kind != "f":
        raise NotImplementedError(f"\"batch_norm\" not implemented for '{dtypes.torch_name(x.dtype)}'")
    params = [p for p in (weight, bias, running_mean, running_var) if p is not None]
    _check_dtypes(x, params)
    cuda.check_same_device("batch_norm", [x.data] + [p.data if isinstance(p, Variable) else p for p in params])
    axes = (0,) + tuple(range(2, x.ndim))  # every position of a channel
    shape = (1, channels) + (1,) * (x.ndim - 2)  # a per-channel vector, broadcast over those positions
    dtype = x.data.dtype
    if dtype == np.float16:  # computed in float32, rounded once at the end (PyTorch's opmath type)
        x = astype(x, np.float32)
    if use_batch:
        n = x.numel() // channels
        mean = x.sum(axis=axes, keepdims=True) / n
        centred = x - mean
        var = (centred * centred).sum(axis=axes, keepdims=True) / n
        y = centred / (var + eps) ** 0.5
        if running_mean is not None:  # the buffers live where the batch does (step 48)
            running_mean *= 1 - momentum
            running_mean += (momentum * mean.data.reshape(channels)).astype(running_mean.dtype)
        if running_var is not None:
            running_var *= 1 - momentum
            running_var += (momentum * var.data.reshape(channels) * n / (n - 1)).astype(running_var.dtype)
    else:
        xp = get_array_module(x)
        scale = (1.0 / xp.sqrt(running_var + eps)).astype(x.data.dtype).reshape(shape)
        y = (x - running_mean.astype(x.data.dtype).reshape(shape)) * scale
    if weight is not None:
        y = y * reshape(astype(weight, y.data.dtype), shape)
    if bias is not None:
        y = y + reshape(astype(bias, y.data.dtype), shape)
    return astype(y, dtype)
