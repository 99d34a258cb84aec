"""Optimizers: update parameters from their gradients (step 32), as `torch.optim` does.

    optimizer = SGD(model.params(), lr=0.1)
    loss.backward()
    optimizer.step()       # every parameter that has a gradient takes one step
    optimizer.zero_grad()  # and the gradients start again from None

The updates change each parameter in place under no_grad, as PyTorch's optimizers do: a
step is not part of any graph, every reference to the parameter stays valid, and the
parameter's version moves on (step 36), so a graph that saved the old value cannot
silently use the new one.

The names, defaults, parameter groups, state and `state_dict` layout are PyTorch's, and so
is the arithmetic: a training loop written for `torch.optim` runs with its imports renamed
(`tinypytorch.optim` is the PyTorch-named home of these classes).
"""
import copy
import numbers
import warnings

import numpy as np

from tinypytorch import cuda, dtypes
from tinypytorch.core import Variable
from tinypytorch.grad_mode import enable_grad, no_grad
from tinypytorch.cuda import get_array_module


class Optimizer:  # step 32
    """Base class of the optimizers, PyTorch's `torch.optim.Optimizer`.

    `params` is an iterable of parameters, or of dicts that each make a parameter group with
    hyperparameters of its own: `SGD([{"params": body}, {"params": head, "lr": 0.1}], lr=0.01)`.
    What a group leaves out comes from `defaults`. A subclass says in `update` how one
    parameter moves.
    """

    def __init__(self, params, defaults):
        if isinstance(params, Variable):  # one parameter, not an iterable of them
            raise TypeError("params argument given to the optimizer should be an iterable of Variables or dicts, "
                            f"but got {type(params).__name__}")
        self.defaults = dict(defaults)
        self.state = {}  # parameter -> dict of its state (momentum, moments); Variables hash by identity
        self.param_groups = []
        groups = list(params)  # a generator such as model.params() can be read only once
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    @property
    def params(self):
        """Every parameter, group after group, in order."""
        return [p for group in self.param_groups for p in group["params"]]

    def add_param_group(self, param_group):
        """Add a group (a dict with "params" and any hyperparameters); the defaults fill in the rest."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, set):  # its order changes from run to run, and so would the state_dict's indices
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        params = param_group["params"] = [params] if isinstance(params, Variable) else list(params)
        for param in params:
            if not isinstance(param, Variable):
                raise TypeError(f"optimizer can only optimize Variables, but one of the params is "
                                f"{type(param).__name__}")
            if not (param.is_leaf or param.retains_grad):  # a computed value is made again by each forward pass
                raise ValueError("can't optimize a non-leaf Variable")
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        # Sets of parameters, never `p in list`: comparing Variables with == is element-wise.
        if len(set(params)) != len(params):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error", UserWarning, stacklevel=2)
        if not set(self.params).isdisjoint(params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def step(self, closure=None):
        """Update every parameter that has a gradient."""
        loss = None  # no step: PyTorch's surface: `closure`, if given, computes the loss first and is returned
        if closure is not None:  # no step: PyTorch's surface
            with enable_grad():
                loss = closure()
        with no_grad():  # in-place changes of leaves that require grad are allowed here (step 36)
            for group in self.param_groups:
                for param in group["params"]:
                    if param.grad is not None:  # a parameter the loss did not reach keeps its value and state
                        self.update(param, param.grad.data, group)
        return loss  # no step: PyTorch's surface (the closure's loss)

    def update(self, param, grad, group):
        """Move `param` (in place) by its gradient array `grad`, with the hyperparameters of its `group`."""
        raise NotImplementedError(f"{type(self).__name__}.update is not implemented")

    def zero_grad(self, set_to_none=True):
        """Set every gradient to None (PyTorch's default), or with `set_to_none=False` fill it with zeros."""
        for param in self.params:
            if param.grad is None:
                continue
            if set_to_none:
                param.cleargrad()
                continue
            if param.grad.creator is not None:  # a gradient made with create_graph leaves its graph, as in torch
                param.grad = param.grad.detach()
            # A new array of zeros, not `data[...] = 0`: the engine may hand one array to the
            # gradients of several parameters, or a read-only broadcast view.
            param.grad.data = get_array_module(param.grad.data).zeros_like(param.grad.data)

    def state_of(self, param):  # step 48: its arrays follow the parameter to another device
        """The state dict of `param`, its arrays on the parameter's device (a model may move after its optimizer was
        made). "step" stays on the CPU, as torch keeps it."""
        state = self.state.setdefault(param, {})
        for key, value in state.items():
            if key != "step" and not cuda.is_on(value, param.device):
                state[key] = cuda.to_device(value, param.device)
        return state

    def state_dict(self):
        """The state and the groups as PyTorch lays them out: parameters replaced by their index, arrays copied."""
        index, groups, start = {}, [], 0
        for group in self.param_groups:
            for i, param in enumerate(group["params"], start):
                index.setdefault(param, i)  # a parameter listed twice in a group keeps its first index
            start += len(group["params"])
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": [index[p] for p in group["params"]]})
        state = {index[p]: {k: _copied(v) for k, v in s.items()} for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Take the state and hyperparameters of `state_dict()` (of an optimizer with groups of the same sizes)."""
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(s["params"]) != len(g["params"]) for s, g in zip(saved_groups, self.param_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        # The saved indices name this optimizer's parameters in order, as in torch, without further checks.
        param_of = {i: p for s, g in zip(saved_groups, self.param_groups) for i, p in zip(s["params"], g["params"])}
        self.state = {param_of[i]: {k: _loaded(k, v, param_of[i]) for k, v in s.items()}
                      for i, s in state_dict["state"].items() if i in param_of}
        self.param_groups = [{**s, "params": g["params"]} for s, g in zip(saved_groups, self.param_groups)]


def _copied(value):
    return value.copy() if isinstance(value, cuda.array_types) else copy.deepcopy(value)


def _loaded(key, value, param):
    """A saved state value for `param`: a copy, floating-point arrays in the parameter's dtype and on its device
    (torch's cast); "step" stays as saved."""
    if not isinstance(value, cuda.array_types) or key == "step":
        return _copied(value)
    value = cuda.to_device(value, param.device)
    return value.astype(param.data.dtype if value.dtype.kind == "f" else value.dtype, copy=True)


def new_step_count():
    """A 0-d count of steps, on the CPU as torch keeps it, in torch's scalar dtype: float64 where the default dtype
    is float64, else float32."""
    return np.zeros((), dtype=np.float64 if dtypes.default() == np.float64 else np.float32)


def lerp_(start, end, weight):
    """start moves `weight` of the way to `end`, in place: torch's lerp_, whose formula depends on the weight so
    that both ends are exact (start + w (end - start) below one half, end - (end - start)(1 - w) from it on)."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        start[...] = end - (end - start) * (1 - weight)
    return start


def ascent_and_decay(param, grad, group):
    """The gradient an update starts from: negated with maximize, plus weight_decay * p (an L2 penalty's gradient),
    as torch's RMSprop and Adadelta begin."""
    if group["maximize"]:
        grad = -grad
    if group["weight_decay"] != 0:
        grad = grad + group["weight_decay"] * param.data
    return grad


def _check(ok, message):
    if not ok:
        raise ValueError(message)


def _check_real(op, **values):
    for name, value in values.items():
        if not isinstance(value, numbers.Real):
            raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")


class SGD(Optimizer):  # step 32
    """Stochastic gradient descent, `torch.optim.SGD`: p <- p - lr * g, where g is the gradient, plus

    - weight_decay: g + weight_decay * p (the gradient of an L2 penalty);
    - momentum: a running buffer b, b <- momentum * b + (1 - dampening) * g, starting as the first g;
      the step follows b, or with nesterov g + momentum * b;
    - maximize: ascend, with -g.
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False):
        _check_real("SGD", lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(momentum >= 0, f"Invalid momentum value: {momentum}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        _check(not nesterov or (momentum > 0 and dampening == 0),
               "Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def update(self, param, grad, group):
        if grad.dtype == np.float16:  # step 60
            return self.update_float16(param, grad, group)
        if group["maximize"]:  # no step: PyTorch's surface (ascend)
            grad = -grad
        if group["weight_decay"] != 0:  # no step: PyTorch's surface (the gradient of an L2 penalty)
            grad = grad + group["weight_decay"] * param.data
        # no step: PyTorch's surface (step 32's first exercise writes momentum); without it SGD keeps no state
        if group["momentum"] != 0:
            grad = self.momentum(self.state_of(param), grad, group)
        param.sub_(group["lr"] * grad)

    def update_float16(self, param, grad, group):
        """The same step on float16, rounded as torch's: each of its operations computes in float32 and rounds
        once (step 60). (torch rounds an `alpha` to float16 first, but not a factor of `mul_`: measured.)"""
        def op(a, alpha, b):  # torch's a.add(b, alpha=alpha)
            alpha = np.float16(alpha).astype(np.float32)
            return (a.astype(np.float32) + alpha * b.astype(np.float32)).astype(np.float16)

        if group["maximize"]:
            grad = -grad
        if group["weight_decay"] != 0:
            grad = op(grad, group["weight_decay"], param.data)
        if group["momentum"] != 0:
            state = self.state_of(param)
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.copy()
            else:  # torch's buf.mul_(momentum).add_(grad, alpha=1 - dampening): two operations
                buf[...] = (buf.astype(np.float32) * np.float32(group["momentum"])).astype(np.float16)
                buf[...] = op(buf, 1 - group["dampening"], grad)
            grad = op(grad, group["momentum"], buf) if group["nesterov"] else buf
        param.copy_(op(param.data, -group["lr"], grad))

    def momentum(self, state, grad, group):
        """The direction of the step: the momentum buffer (updated in place), or Nesterov's look-ahead."""
        buf = state.get("momentum_buffer")
        if buf is None:  # the first step starts the buffer at the gradient itself, not at zero
            buf = state["momentum_buffer"] = grad.copy()
        else:
            buf *= group["momentum"]
            buf += (1 - group["dampening"]) * grad
        return grad + group["momentum"] * buf if group["nesterov"] else buf


class Adam(Optimizer):  # step 32
    """Adam (Kingma and Ba, 2015) with the update rule of `torch.optim.Adam`:

        m <- beta1 m + (1 - beta1) g          v <- beta2 v + (1 - beta2) g^2
        m_hat = m / (1 - beta1^t)             v_hat = v / (1 - beta2^t)
        p <- p - lr * m_hat / (sqrt(v_hat) + eps)

    where t counts this parameter's steps, from 1. weight_decay adds weight_decay * p to g
    (an L2 penalty, which the division by sqrt(v_hat) then rescales); amsgrad divides by the
    largest v seen so far instead of v; maximize ascends, with -g.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 maximize=False, decoupled_weight_decay=False):
        name = type(self).__name__
        _check_real(name, lr=lr, eps=eps, weight_decay=weight_decay)
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        _check_real(name, beta1=betas[0], beta2=betas[1])
        _check(lr >= 0, f"Invalid learning rate: {lr}")
        _check(eps >= 0, f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            _check(0 <= beta < 1, f"Invalid beta parameter at index {i}: {beta}")
        _check(weight_decay >= 0, f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize,
                                  "decoupled_weight_decay": decoupled_weight_decay})

    def update(self, param, grad, group):
        if group["maximize"]:  # no step: PyTorch's surface (ascend)
            grad = -grad
        lr, weight_decay = group["lr"], group["weight_decay"]
        # no step: PyTorch's surface: weight decay, decoupled from g in AdamW (the parameter shrinks), else an L2
        # penalty's gradient added to g
        if weight_decay != 0 and group["decoupled_weight_decay"]:
            param.mul_(1 - lr * weight_decay)
        elif weight_decay != 0:
            grad = grad + weight_decay * param.data
        state = self.state_of(param)
        if not state:
            self.init_state(state, param, group["amsgrad"])
        state["step"] += 1
        m, v = self.moments(state, grad, group)
        t = float(state["step"])
        beta1, beta2 = group["betas"]
        m_scale = lr / (1 - beta1**t)  # both moments start at 0: divide out that bias
        denominator = get_array_module(v).sqrt(v) / (1 - beta2**t) ** 0.5 + group["eps"]
        param.sub_(m_scale * (m / denominator))

    def init_state(self, state, param, amsgrad):
        xp = get_array_module(param.data)
        state["step"] = new_step_count()
        state["exp_avg"] = xp.zeros_like(param.data)
        state["exp_avg_sq"] = xp.zeros_like(param.data)
        if amsgrad:
            state["max_exp_avg_sq"] = xp.zeros_like(param.data)

    def moments(self, state, grad, group):
        """Update the running moments in place; return (m, v)."""
        beta1, beta2 = group["betas"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m += (1 - beta1) * (grad - m)  # m moves (1 - beta1) of the way to g: torch's lerp
        v *= beta2
        v += (1 - beta2) * grad * grad
        if group["amsgrad"]:  # no step: PyTorch's surface: v the largest so far
            v = get_array_module(v).maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
        return m, v


class AdamW(Adam):
    """AdamW (Loshchilov and Hutter, 2019), `torch.optim.AdamW`: Adam whose weight decay is decoupled from the
    gradient, p <- p (1 - lr weight_decay) before the Adam step, so every weight decays at the same rate."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)
