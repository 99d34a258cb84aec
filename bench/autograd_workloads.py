"""The workloads of bench_autograd.py, each written three ways: tinypytorch, PyTorch eager, and NumPy by hand.

Each computes a gradient; tests/test_bench.py checks every one against PyTorch or the maths.
"NumPy" is the same arithmetic written by hand: a forward pass that keeps what the backward
needs, and the chain rule spelt out, with no graph at all; it is the floor a framework's
bookkeeping is measured against. Where a workload builds a graph and times its backward only,
the function returns the backward runner (a function of no argument returning dy/dx).
"""
import dataclasses

import numpy as np
import torch

import tinypytorch
from tinypytorch import Variable
from tinypytorch import functions as F
from tinypytorch.layers import MLP
from tinypytorch.optimizers import Adam
from tinypytorch.testfunctions import goldstein_price  # the same formula serves torch tensors too


def _grad(v):
    """A tinypytorch gradient as a NumPy array (grads are Variables since step 27)."""
    return np.asarray(v.grad.data if isinstance(v.grad, Variable) else v.grad)


@dataclasses.dataclass(frozen=True)
class Scalars:
    """How a framework makes a 0-d leaf that requires grad, takes its sin, and reads the leaf's gradient."""
    leaf: object  # x0 -> a 0-d leaf
    sin: object
    grad: object  # leaf -> its gradient, a NumPy array

    def backward(self, y, x):
        """A function that runs y's backward and returns dy/dx: what the graph workloads time."""
        def run():
            y.backward()
            return self.grad(x)
        return run


TINYPYTORCH = Scalars(lambda x0: Variable(np.array(x0)), tinypytorch.sin, _grad)
TORCH = Scalars(lambda x0: torch.tensor(x0, dtype=torch.float64, requires_grad=True), torch.sin,
                lambda x: x.grad.numpy())


# ----- scalar graph: Goldstein-Price ---------------------------------------------------------


def gp_tinypytorch(a, b):
    x, y = Variable(np.array(a)), Variable(np.array(b))
    goldstein_price(x, y).backward()
    return _grad(x), _grad(y)


def gp_torch(a, b):
    x, y = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
    goldstein_price(x, y).backward()
    return x.grad.numpy(), y.grad.numpy()


def gp_numpy(a, b):
    """f = A B, A = 1 + u^2 p, B = 30 + v^2 q: forward, then the chain rule by hand."""
    x, y = np.array(a), np.array(b)
    u = x + y + 1
    p = 19 - 14*x + 3*x**2 - 14*y + 6*x*y + 3*y**2
    v = 2*x - 3*y
    q = 18 - 32*x + 12*x**2 + 48*y - 36*x*y + 27*y**2
    A, B = 1 + u**2 * p, 30 + v**2 * q
    gA, gB = B, A  # df/dA, df/dB
    gu, gp = gA * 2*u * p, gA * u**2
    gv, gq = gB * 2*v * q, gB * v**2
    gx = gu + gp * (-14 + 6*x + 6*y) + gv * 2 + gq * (-32 + 24*x - 36*y)
    gy = gu + gp * (-14 + 6*x + 6*y) - gv * 3 + gq * (48 - 36*x + 54*y)
    return np.asarray(gx), np.asarray(gy)


# ----- wide graph: branches of sin(c * h), summed ----------------------------------------------
# Each branch applies h <- sin(c_k h) five times (10 operations); the branches are summed.


def wide_coefficients(branches, depth=10, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, (branches, depth // 2))


def runner(graph, framework, name):
    """graph(size, framework, x0) as a function of (size, x0) named `name`: one builder serves each framework."""
    def run(size, x0=0.5):
        return graph(size, framework, x0)

    run.__name__ = run.__qualname__ = name
    return run


def wide_graph(coefficients, framework, x0=0.5):
    """Build the graph in `framework` (TINYPYTORCH or TORCH); return a function that runs backward and returns dy/dx."""
    x = framework.leaf(x0)
    total = None
    for row in coefficients:
        h = x
        for c in row:
            h = framework.sin(h * float(c))
        total = h if total is None else total + h
    return framework.backward(total, x)


wide_tinypytorch = runner(wide_graph, TINYPYTORCH, "wide_tinypytorch")
wide_torch = runner(wide_graph, TORCH, "wide_torch")


def wide_numpy(coefficients, x0=0.5):
    x = np.array(x0)
    saved = []  # per branch, the argument of each sin: its derivative is cos(argument)
    total = 0.0
    for row in coefficients:
        h, arguments = x, []
        for c in row:
            arguments.append(h * c)
            h = np.sin(arguments[-1])
        saved.append(arguments)
        total = total + h

    def backward():
        gx = 0.0
        for row, arguments in zip(coefficients, saved):
            g = 1.0  # d total / d (branch output)
            for c, argument in zip(row[::-1], arguments[::-1]):
                g = g * np.cos(argument) * c  # back through sin, then through the product with c
            gx = gx + g
        return np.asarray(gx)
    return backward


# ----- large arrays: y = sum(exp(x) * x + x ** 2) -------------------------------------------------


def arrays_input(size, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size)


def arrays_tinypytorch(a):
    x = Variable(a)
    F.sum(F.exp(x) * x + x**2).backward()
    return _grad(x)


def arrays_torch(a):
    x = torch.from_numpy(a).requires_grad_()
    torch.sum(torch.exp(x) * x + x**2).backward()
    return x.grad.numpy()


def arrays_numpy(a):
    e = np.exp(a)
    y = (e * a + a**2).sum()  # noqa: F841 (the forward value, computed as a framework would)
    g = np.ones_like(a)  # dy/d(each element of the sum)
    return (g * a) * e + g * e + 2 * a * g  # through exp, through the product's x, through x ** 2


# ----- large arrays, a second expression: y = sum(tanh(x) / (1 + x * x)) -------------------------


def ratio_tinypytorch(a):
    x = Variable(a)
    F.sum(F.tanh(x) / (1.0 + x * x)).backward()
    return _grad(x)


def ratio_torch(a):
    x = torch.from_numpy(a).requires_grad_()
    torch.sum(torch.tanh(x) / (1.0 + x * x)).backward()
    return x.grad.numpy()


def ratio_numpy(a):
    """t = tanh x, d = 1 + x^2: d(t/d)/dx = (1 - t^2)/d - t 2x / d^2."""
    t, d = np.tanh(a), 1.0 + a * a
    y = (t / d).sum()  # noqa: F841 (the forward value, computed as a framework would)
    g = np.ones_like(a)
    gt, gd = g / d, -g * t / (d * d)
    return gt * (1.0 - t * t) + gd * 2.0 * a


# ----- a training step of a small MLP, float32 ----------------------------------------------------

MLP_SIZES, MLP_BATCH = (784, 256, 10), 64


def mlp_data(seed=0, batch=MLP_BATCH, sizes=MLP_SIZES):
    """(a batch, its target, the weights (W, b) of every layer), float32, PyTorch's default init."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    target = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
    layers = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        k = 1.0 / np.sqrt(n_in)
        layers.append((rng.uniform(-k, k, (n_out, n_in)).astype(np.float32),
                       rng.uniform(-k, k, n_out).astype(np.float32)))
    return x, target, layers


def mlp_tinypytorch(x, target, layers, lr=1e-3):
    """A step function (loss, backward, Adam) on an MLP with these weights; it returns the weights' gradients."""
    model = MLP([layers[0][0].shape[1]] + [W.shape[0] for W, _ in layers], activation=F.relu)
    for layer, (W, b) in zip(model.layers, layers):
        layer.weight.data, layer.bias.data = W.copy(), b.copy()
    optimizer = Adam(model.params(), lr=lr)

    def step():
        model.cleargrads()
        F.mean_squared_error(model(x), target).backward()
        optimizer.step()
        return [p.grad.data for p in model.params()]
    return step


def mlp_torch(x, target, layers, lr=1e-3):
    modules = []
    for W, b in layers:
        linear = torch.nn.Linear(W.shape[1], W.shape[0])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(W))
            linear.bias.copy_(torch.from_numpy(b))
        modules += [linear, torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    tx, tt = torch.from_numpy(x), torch.from_numpy(target)

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(tx), tt).backward()
        optimizer.step()
        return [p.grad.numpy() for p in model.parameters()]
    return step


def mlp_numpy(x, target, layers, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
    """The same step by hand: forward keeping what backward needs, the chain rule, Adam's update."""
    params = [p.copy() for W, b in layers for p in (W, b)]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    t = [0]

    def step():
        hs, h = [], x
        for i in range(0, len(params), 2):
            hs.append(h)
            h = h @ params[i].T + params[i + 1]
            if i + 2 < len(params):
                h = np.maximum(h, 0)
        g = (2.0 / h.size) * (h - target)  # d mean((h - t)^2) / dh
        grads = [None] * len(params)
        for i in reversed(range(0, len(params), 2)):
            grads[i], grads[i + 1] = g.T @ hs[i // 2], g.sum(axis=0)
            if i:
                g = (g @ params[i]) * (hs[i // 2] > 0)
        t[0] += 1
        for p, grad, (m, v) in zip(params, grads, moments):
            m *= betas[0]
            m += (1 - betas[0]) * grad
            v *= betas[1]
            v += (1 - betas[1]) * grad * grad
            p -= lr * (m / (1 - betas[0] ** t[0])) / (np.sqrt(v / (1 - betas[1] ** t[0])) + eps)
        return grads
    return step


# ----- one operation on a 0-d value: the fixed cost every node pays ----------------------------------


def one_operation(framework, recorded):
    """A function computing sin of a 0-d value once, recording the graph or not."""
    if framework == "tinypytorch":
        x = Variable(np.array(0.5), requires_grad=recorded)
        return lambda: tinypytorch.sin(x)
    if framework == "torch":
        x = torch.tensor(0.5, dtype=torch.float64, requires_grad=recorded)
        return lambda: torch.sin(x)
    a = np.array(0.5)
    return lambda: np.sin(a)


# ----- scaling: a chain and a wide graph of n functions ---------------------------------------------


def chain_graph(n, framework, x0=0.5):
    """y = sin(sin(...sin(x))), n functions, in `framework`; returns the backward runner."""
    x = framework.leaf(x0)
    y = x
    for _ in range(n):
        y = framework.sin(y)
    return framework.backward(y, x)


chain_tinypytorch = runner(chain_graph, TINYPYTORCH, "chain_tinypytorch")
chain_torch = runner(chain_graph, TORCH, "chain_torch")


def chain_numpy(n, x0=0.5):
    """The chain by hand: forward keeps each input, backward multiplies the cosines."""
    def backward():
        hs, h = [], np.array(x0)
        for _ in range(n):
            hs.append(h)
            h = np.sin(h)
        g = np.array(1.0)
        for h in reversed(hs):
            g = g * np.cos(h)
        return g
    return backward


def fan_graph(n, framework, x0=0.5):
    """sin(x) + sin(x) + ... : n // 2 Sin functions wait while the chain of Adds is walked; the backward runner."""
    x = framework.leaf(x0)
    s = framework.sin(x)
    for _ in range(n // 2 - 1):
        s = s + framework.sin(x)
    return framework.backward(s, x)


fan_tinypytorch = runner(fan_graph, TINYPYTORCH, "fan_tinypytorch")
fan_torch = runner(fan_graph, TORCH, "fan_torch")
