"""PyTorch's torch.nn.utils: for now the clipping of gradients (clip_grad)."""
from tinypytorch.nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]
