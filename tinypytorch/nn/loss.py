"""PyTorch's nn.BCELoss and nn.BCEWithLogitsLoss: Modules around nn.functional's binary cross-entropies.

As in torch, a given `weight` or `pos_weight` is a buffer (moved by `to`, saved by state_dict); one not given is
None and no buffer. `reduction` is a keyword, checked when the module is built, as the package's other losses.
"""
from tinypytorch.nn import functional as F
from tinypytorch.nn.modules import Module, _check_reduction

__all__ = ["BCELoss", "BCEWithLogitsLoss"]


class _WeightedLoss(Module):
    def __init__(self, weight, reduction, **buffers):
        super().__init__()
        self.reduction = _check_reduction(type(self).__name__, reduction)
        for name, value in {"weight": weight, **buffers}.items():
            if value is None:
                object.__setattr__(self, name, None)  # torch's None buffer: an attribute, not in the state dict
            else:
                self.register_buffer(name, value)


class BCELoss(_WeightedLoss):
    """PyTorch's nn.BCELoss(weight=None, reduction="mean"): binary cross-entropy of probabilities."""

    def __init__(self, weight=None, *, reduction="mean"):
        super().__init__(weight, reduction)

    def forward(self, input, target):  # noqa: A002 (PyTorch's name)
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """PyTorch's nn.BCEWithLogitsLoss(weight=None, reduction="mean", pos_weight=None): binary cross-entropy of
    logits, computed stably (a sigmoid and BCELoss in one)."""

    def __init__(self, weight=None, *, reduction="mean", pos_weight=None):
        super().__init__(weight, reduction, pos_weight=pos_weight)

    def forward(self, input, target):  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
