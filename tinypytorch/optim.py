"""`torch.optim`'s names for the optimizers of `tinypytorch.optimizers` (step 32).

    from tinypytorch import optim
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

The classes live in `tinypytorch.optimizers`; this module only gives them PyTorch's path,
so that a PyTorch training loop runs with `torch` renamed to `tinypytorch`.
"""
from tinypytorch.optimizers import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
