"""PyTorch's torch.nn.Embedding: a table of num_embeddings vectors, looked up by integer indices (torch.nn.sparse
is where torch keeps it, for its sparse gradients; this package has none, so sparse=True is refused)."""
import numbers

import numpy as np

from tinypytorch import embedding as lookup
from tinypytorch.core import Variable
from tinypytorch.grad_mode import no_grad
from tinypytorch.layers import Parameter
from tinypytorch.nn import functional as F
from tinypytorch.nn import init
from tinypytorch.nn.modules import Module, factory_dtype

__all__ = ["Embedding"]


class Embedding(Module):
    """PyTorch's nn.Embedding(num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
    scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None).

    weight (num_embeddings, embedding_dim) starts N(0, 1), drawn from the framework's generator, with the row
    padding_idx zeroed (it then gets no gradient, so it stays what it is); `_weight` gives the table instead.
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None):
        super().__init__()
        for name, value in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Embedding: {name} must be a non-negative int, got {value!r}")
        if sparse:
            raise NotImplementedError("Embedding: sparse=True makes a sparse gradient; tinypytorch has no sparse "
                                      "tensors")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = lookup.padding_index(padding_idx, num_embeddings)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), factory_dtype(dtype)),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        """PyTorch's: N(0, 1), then the padding row zeroed."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):  # noqa: A002 (PyTorch's name)
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += ", scale_grad_by_freq=True"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        """An Embedding whose table is `embeddings` (2-D), frozen (no gradient) unless freeze=False."""
        if not isinstance(embeddings, Variable) or embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(num_embeddings=rows, embedding_dim=cols, _weight=embeddings, _freeze=freeze,
                   padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
