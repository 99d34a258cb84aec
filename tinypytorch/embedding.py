"""The embedding lookup, PyTorch's torch.nn.functional.embedding: row i of a weight for each integer index i.

    embedding(indices, weight)[..., :] = weight[indices[...], :]       shape: indices.shape + (embedding_dim,)

It is indexing (step 31's x[key] with an integer array), and its gradient is indexing's: each occurrence of an
index adds its output gradient into that row (`xp.add.at`, GetItemGrad), so a word met twice in a batch gets
two. PyTorch's options change only that gradient: the row `padding_idx` gets none (its output is the row, as
any other), and `scale_grad_by_freq` divides each row's gradient by the number of times the batch uses it.
`max_norm` rescales, in place and before the lookup, every looked-up row whose `norm_type` norm exceeds it.
"""
import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch.core import Function, Variable, formulas_on_arrays
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import GetItemGrad
from tinypytorch.grad_mode import no_grad


class Embedding(Function):
    """weight[indices], one node (PyTorch's EmbeddingBackward0); backward adds each output row's gradient into
    its row of the weight, times `scale` (0 for padding_idx, 1/count with scale_grad_by_freq)."""

    def __init__(self, indices, padding_idx, scale_grad_by_freq):
        self.indices, self.padding_idx, self.scale_grad_by_freq = indices, padding_idx, scale_grad_by_freq

    def forward(self, weight):
        self.num_weights = weight.shape[0]
        self.save_for_backward(self.indices)  # the indices, as PyTorch's node keeps them
        return weight[self.indices]

    def backward(self, gy):
        (indices,) = self.saved_tensors
        indices = indices.data if isinstance(indices, Variable) else indices
        xp = get_array_module(indices)
        scale = None
        if self.padding_idx is not None or self.scale_grad_by_freq:
            scale = xp.ones(indices.shape, dtype=gy.dtype)
            if self.scale_grad_by_freq:
                counts = xp.bincount(indices.ravel(), minlength=self.num_weights)
                scale = scale / counts[indices].astype(gy.dtype)
            if self.padding_idx is not None:
                scale = scale * (indices != self.padding_idx)
            gy = gy * scale[..., None]  # an array: a constant factor, so the formula stays differentiable in gy
        return GetItemGrad(indices, (self.num_weights, gy.shape[-1]))(gy)

    def jvp(self, t):  # step 64: linear in the weight; padding_idx only stops the gradient
        return t[self.indices]


formulas_on_arrays(Embedding)  # speed: its backward runs on arrays too (grad_mode.BackwardMode)


def _checked_indices(indices, weight):
    """The index array, refused as PyTorch refuses it: not an integer tensor of int64 or int32, or out of range."""
    if not isinstance(indices, (Variable, *cuda.array_types)):
        raise TypeError(f"embedding(): argument 'indices' (position 2) must be Tensor, not {type(indices).__name__}")
    array = indices.data if isinstance(indices, Variable) else indices
    if array.dtype not in (np.int64, np.int32):
        kind = "CPUBoolType" if array.dtype == np.bool_ else dtypes.tensor_type(Variable(array, requires_grad=False))
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {kind} instead (while checking arguments for embedding)")
    cuda.check_same_device("embedding", [array, weight.data])
    if array.size and (bool((array < 0).any()) or bool((array >= weight.shape[0]).any())):
        raise IndexError("index out of range in self")  # PyTorch's words; NumPy would wrap a negative index
    return array


def padding_index(padding_idx, num_embeddings):
    """padding_idx as a row number (a negative one counts from the end), after PyTorch's check and words."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx % num_embeddings


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,  # noqa: A002
              sparse=False):
    """PyTorch's F.embedding: the rows of `weight` (num_embeddings, embedding_dim) that the integer tensor `input`
    picks, of shape input.shape + (embedding_dim,)."""
    if not isinstance(weight, Variable):
        raise TypeError(f"embedding(): argument 'weight' (position 1) must be Tensor, not {type(weight).__name__}")
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if sparse:
        raise NotImplementedError("embedding: sparse=True makes a sparse gradient; tinypytorch has no sparse tensors")
    indices = _checked_indices(input, weight)
    padding_idx = padding_index(padding_idx, weight.shape[0])
    if max_norm is not None:
        _renorm_(weight, indices, max_norm, norm_type)
    return Embedding(indices, padding_idx, scale_grad_by_freq)(weight)


def _renorm_(weight, indices, max_norm, norm_type):
    """Rescale in place, under no_grad as PyTorch's embedding_renorm_, each looked-up row whose norm exceeds
    max_norm, to max_norm / (norm + 1e-7) of itself."""
    xp = get_array_module(indices)
    rows = xp.unique(indices.ravel())
    values = weight.data[rows]
    norms = xp.linalg.norm(values.astype(np.float64), ord=norm_type, axis=1)
    over = norms > max_norm
    scale = (max_norm / (norms[over] + 1e-7)).astype(weight.data.dtype)
    with no_grad():  # written even if no row is over: an in-place operation, the weight's version moves on
        weight[rows[over]] = values[over] * scale[:, None]
