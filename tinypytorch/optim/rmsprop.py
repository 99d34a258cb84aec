"""PyTorch's torch.optim.RMSprop: each parameter's step divided by a running root mean square of its gradients.

    v <- alpha v + (1 - alpha) g^2                     (square_avg)
    p <- p - lr g / (sqrt(v) + eps)

centered subtracts the square of a running mean of g from v (grad_avg), so the divisor estimates the gradient's
standard deviation; momentum keeps a buffer b <- momentum b + g / (sqrt(v) + eps) and steps by it
(momentum_buffer); weight_decay adds weight_decay p to g; maximize ascends, with -g. The arithmetic is torch's,
operation by operation, and so are the state's keys, their order and the step count's dtype.
"""
from tinypytorch.cuda import get_array_module
from tinypytorch.optimizers import Optimizer, ascent_and_decay, _check, _check_real, lerp_, new_step_count

__all__ = ["RMSprop"]


def refuse_switches(op, capturable, differentiable):
    """torch's switches that change what a step is (CUDA-graph capture, a step autograd records): not here."""
    for name, value in (("capturable", capturable), ("differentiable", differentiable)):
        if value:
            raise NotImplementedError(f"{op}: {name}=True is not implemented in tinypytorch")


class RMSprop(Optimizer):
    """torch.optim.RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
    capturable=False, foreach=None, maximize=False, differentiable=False). `foreach` picks one of torch's
    implementations of the same arithmetic: accepted, and the one implementation here serves."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                 capturable=False, foreach=None, maximize=False, differentiable=False):
        _check_real("RMSprop", lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)
        _check(0.0 <= lr, f"Invalid learning rate: {lr}")  # torch's checks, in its order and words
        _check(0.0 <= eps, f"Invalid epsilon value: {eps}")
        _check(0.0 <= momentum, f"Invalid momentum value: {momentum}")
        _check(0.0 <= weight_decay, f"Invalid weight_decay value: {weight_decay}")
        _check(0.0 <= alpha, f"Invalid alpha value: {alpha}")
        refuse_switches("RMSprop", capturable, differentiable)
        super().__init__(params, {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                                  "weight_decay": weight_decay, "maximize": maximize})

    def update(self, param, grad, group):
        alpha, lr, momentum = group["alpha"], group["lr"], group["momentum"]
        state = self.state_of(param)
        if not state:  # torch's keys, in its order
            xp = get_array_module(param.data)
            state["step"] = new_step_count()
            state["square_avg"] = xp.zeros_like(param.data)
            if momentum > 0:
                state["momentum_buffer"] = xp.zeros_like(param.data)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(param.data)
        state["step"] += 1
        grad = ascent_and_decay(param, grad, group)
        square_avg = state["square_avg"]
        square_avg *= alpha
        square_avg += (1 - alpha) * grad * grad
        xp = get_array_module(square_avg)
        if group["centered"]:  # the variance about the running mean, not the raw second moment
            grad_avg = lerp_(state["grad_avg"], grad, 1 - alpha)
            avg = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            avg = xp.sqrt(square_avg)
        avg += group["eps"]  # outside the root, as torch adds it
        if momentum > 0:
            buf = state["momentum_buffer"]
            buf *= momentum
            buf += grad / avg
            param.sub_(lr * buf)
        else:
            param.sub_(lr * grad / avg)
