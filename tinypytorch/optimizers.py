"""Optimizers: update parameters from their gradients (step 32), as `torch.optim` does.

    optimizer = SGD(model.params(), lr=0.1)
    loss.backward()
    optimizer.step()       # every parameter that has a gradient takes one step
    optimizer.zero_grad()  # and the gradients start again from None

The updates change each parameter in place under no_grad, as PyTorch's optimizers do: a
step is not part of any graph, every reference to the parameter stays valid, and the
parameter's version moves on (step 36), so a graph that saved the old value cannot
silently use the new one.
"""
import numbers

from tinypytorch.core import no_grad
from tinypytorch import cuda
from tinypytorch.cuda import get_array_module


class Optimizer:  # step 32
    def __init__(self, params, lr):
        self.params = list(params)  # a generator such as model.params() can be read only once
        name = type(self).__name__
        if not self.params:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(lr, numbers.Real) or lr < 0:
            raise ValueError(f"{name}: invalid learning rate {lr!r}")
        self.lr = lr

    def step(self):
        with no_grad():  # step 36: in-place changes of leaves that require grad are allowed here
            for param in self.params:
                if param.grad is not None:  # a parameter the loss did not reach keeps its value
                    self.update(param, param.grad.data)

    def update(self, param, grad):
        raise NotImplementedError(f"{type(self).__name__}.update is not implemented")

    def zero_grad(self):
        for param in self.params:
            param.cleargrad()


class SGD(Optimizer):  # step 32
    """Plain gradient descent: p <- p - lr * g."""

    def __init__(self, params, lr=0.01):
        super().__init__(params, lr)

    def update(self, param, grad):
        param.sub_(self.lr * grad)


class Adam(Optimizer):  # step 32
    """Adam (Kingma and Ba, 2015) with the update rule of `torch.optim.Adam`:

        m <- beta1 m + (1 - beta1) g          v <- beta2 v + (1 - beta2) g^2
        m_hat = m / (1 - beta1^t)             v_hat = v / (1 - beta2^t)
        p <- p - lr * m_hat / (sqrt(v_hat) + eps)

    where t counts this parameter's steps, from 1.
    """

    def __init__(self, params, lr=0.001, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, lr)
        if len(betas) != 2 or not all(isinstance(b, numbers.Real) and 0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"Adam: betas must be two numbers in [0, 1), got {betas!r}")
        if not isinstance(eps, numbers.Real) or eps < 0:
            raise ValueError(f"Adam: invalid eps {eps!r}")
        self.betas, self.eps = tuple(betas), eps
        self.state = {}  # id(param) -> [t, m, v]

    def update(self, param, grad):
        xp = get_array_module(grad)
        if id(param) not in self.state:
            self.state[id(param)] = [0, xp.zeros_like(param.data), xp.zeros_like(param.data)]
        state = self.state[id(param)]
        if not cuda.is_on(state[1], param.device):  # step 48: the state follows its parameter to another device
            state[1:] = [cuda.to_device(a, param.device) for a in state[1:]]
        state[0] += 1
        t, m, v = state
        beta1, beta2 = self.betas
        m *= beta1
        m += (1 - beta1) * grad  # running mean of the gradient
        v *= beta2
        v += (1 - beta2) * grad * grad  # running mean of its square
        m_hat = m / (1 - beta1**t)  # both start at 0: divide out that bias
        v_hat = v / (1 - beta2**t)
        param.sub_(self.lr * m_hat / (xp.sqrt(v_hat) + self.eps))
