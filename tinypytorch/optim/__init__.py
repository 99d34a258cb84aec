"""`torch.optim`'s names for the optimizers (step 32) and the learning-rate schedulers.

    from tinypytorch import optim
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=30)

SGD, Adam and AdamW live in `tinypytorch.optimizers` (step 32); this package gives them PyTorch's path, beside
the optimizers that have no step of their own (`rmsprop`, `adadelta`) and `lr_scheduler`, at torch's paths,
so that a PyTorch training loop runs with `torch` renamed to `tinypytorch`.
"""
from tinypytorch.optimizers import SGD, Adam, AdamW, Optimizer
from tinypytorch.optim import lr_scheduler
from tinypytorch.optim.adadelta import Adadelta
from tinypytorch.optim.rmsprop import RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adadelta", "lr_scheduler"]
