"""PyTorch's torch.optim.Adadelta (Zeiler, 2012): a step whose size is the ratio of two running root mean squares,
that of the past steps over that of the gradients, so that it carries the parameter's units.

    v <- rho v + (1 - rho) g^2                                  (square_avg)
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u <- rho u + (1 - rho) delta^2                              (acc_delta)
    p <- p - lr delta

lr (1.0 by default) only scales the step. weight_decay adds weight_decay p to g; maximize ascends, with -g. The
arithmetic is torch's, operation by operation, and so are the state's keys and the step count's dtype.
"""
from tinypytorch.cuda import get_array_module
from tinypytorch.optim.rmsprop import refuse_switches
from tinypytorch.optimizers import Optimizer, ascent_and_decay, _check, _check_real, new_step_count

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """torch.optim.Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
    maximize=False, differentiable=False). `foreach` picks one of torch's implementations of the same arithmetic:
    accepted, and the one implementation here serves."""

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
                 maximize=False, differentiable=False):
        _check_real("Adadelta", lr=lr, rho=rho, eps=eps, weight_decay=weight_decay)
        _check(0.0 <= lr, f"Invalid learning rate: {lr}")  # torch's checks, in its order and words
        _check(0.0 <= rho <= 1.0, f"Invalid rho value: {rho}")
        _check(0.0 <= eps, f"Invalid epsilon value: {eps}")
        _check(0.0 <= weight_decay, f"Invalid weight_decay value: {weight_decay}")
        refuse_switches("Adadelta", capturable, differentiable)
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize})

    def update(self, param, grad, group):
        rho, eps = group["rho"], group["eps"]
        state = self.state_of(param)
        xp = get_array_module(param.data)
        if not state:  # torch's keys, in its order
            state["step"] = new_step_count()
            state["square_avg"] = xp.zeros_like(param.data)
            state["acc_delta"] = xp.zeros_like(param.data)
        state["step"] += 1
        grad = ascent_and_decay(param, grad, group)
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        square_avg *= rho
        square_avg += (1 - rho) * grad * grad
        std = xp.sqrt(square_avg + eps)
        delta = xp.sqrt(acc_delta + eps) / std * grad  # torch's order: divided first, then times g
        acc_delta *= rho
        acc_delta += (1 - rho) * delta * delta
        param.sub_(group["lr"] * delta)
