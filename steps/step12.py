# %% [markdown]
# # Step 12: Backward through functions with several inputs
#
# Step 11 let a function take several inputs and return several outputs, in
# the forward direction only. This step's idea is the same for the backward
# pass: **a function receives the gradients of all its outputs and returns one
# gradient per input**, and `Variable.backward` hands each gradient to its
# input.
#
# ## The chain rule with several inputs
#
# Let $L$ be the output `backward` is called on and $y = f(x_0, x_1)$ a
# function in the graph. The backward pass reaches $f$ carrying
# $g_y = \partial L / \partial y$, and each input gets its own share:
#
# $$g_{x_0} = g_y \frac{\partial y}{\partial x_0}, \qquad
#   g_{x_1} = g_y \frac{\partial y}{\partial x_1}.$$
#
# For $y = x_0 + x_1$ both partial derivatives are 1: `Add` passes $g_y$ to
# both inputs unchanged. With several outputs, each input collects the
# contributions of all of them, $g_{x_i} = \sum_j g_{y_j}\,\partial y_j /
# \partial x_i$ (exercise 3).

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from tinypytorch.utils.listing import show_change
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## The new `backward` interface
#
# `backward` mirrors `forward`: `backward(*gys)` receives one gradient per
# output and returns one gradient (a single input) or a tuple with one per
# input, in the order of `inputs`. `Square` and `Exp` need no change; `Add`
# gains its backward, and `add(x0, x1)` joins `square` and `exp`:

# %% tags=["hide-cell"]
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            gys = [output.grad for output in f.outputs]
            gxs = f.backward(*gys)  # one step of the chain rule
            if not isinstance(gxs, tuple):  # one input: treat its gradient as a 1-tuple
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs, strict=True):
                x.grad = as_array(gx)  # 0-d arithmetic gives a NumPy scalar: keep grads ndarrays like data
                if x.creator is not None:
                    funcs.append(x.creator)  # continue towards the leaves


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, *inputs):
        xs = [x.data for x in inputs]  # unwrap: forward works on plain ndarrays
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):  # one array: treat it as a 1-tuple from here on
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]  # NumPy may return a scalar for 0-d input
        for output in outputs:
            output.set_creator(self)  # the output remembers where it came from
        self.inputs = inputs  # kept for backward, which needs the input values
        self.outputs = outputs
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *gys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.inputs[0].data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.inputs[0].data
        return np.exp(x) * gy


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %%
class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy  # dy/dx0 = dy/dx1 = 1


def add(x0, x1):
    return Add()(x0, x1)


# %% [markdown]
# The loop in `Variable.backward` (the whole framework is in the collapsed
# cell above) collects the gradients of the function's outputs, calls
# `backward(*gys)`, wraps a single result into a 1-tuple as `__call__` does,
# and walks inputs and gradients in pairs:

# %%
show_change(12, "Variable.backward")

# %% [markdown]
# `zip(..., strict=True)` raises a `ValueError` if a `backward` returns more
# or fewer gradients than its function has inputs; plain `zip` would stop at
# the shorter and leave an input silently without its gradient. `as_array`
# keeps every gradient an `ndarray`:
# `2 * np.array(3.0) * np.array(1.0)` is a NumPy scalar.
#
# ## A gradient through a sum
#
# For $z = e^{x + y}$, `Exp` receives $g_z = 1$ and returns $e^{x+y}$; `Add`
# copies that to both inputs:
# $\partial z / \partial x = \partial z / \partial y = e^{x+y}$, at
# $x = 0.5$, $y = -0.25$ that is $e^{0.25} \approx 1.284025$.

# %%
x = Variable(np.array(0.5))
y = Variable(np.array(-0.25))
s = add(x, y)
z = exp(s)
z.backward()
print(f"x.grad = {x.grad:.6f}   y.grad = {y.grad:.6f}   e^0.25 = {np.exp(0.25):.6f}")
print(f"numerical d/dx = {numerical_diff(lambda v: exp(add(v, y)), x):.6f}")


# %% tags=["hide-input"]
def gradient_flow_picture(x, y, s, z):
    """z = exp(x + y), drawn right to left as backward runs it, each variable's gradient under it."""
    nodes = {"z": ("output", "z"), "Exp": ("function", "Exp"), "s": ("variable", "s = x + y"),
             "Add": ("highlight", "Add"), "x": ("leaf", "x"), "y": ("leaf", "y")}
    positions = {"z": (6, 0), "Exp": (4.6, 0), "s": (3.1, 0), "Add": (1.5, 0), "x": (0, 0.7), "y": (0, -0.7)}
    edges = [("z", "Exp"), ("Exp", "s"), ("s", "Add"), ("Add", "x"), ("Add", "y")]
    notes = {"z": f"$g_z$ = {z.grad:g}", "s": f"$g_s$ = {s.grad:.4f}", "x": f"$g_x$ = {x.grad:.4f}",
             "y": f"$g_y$ = {y.grad:.4f}", "Add": "returns gy, gy", "Exp": "returns $e^s$ gy"}
    _, ax = plt.subplots(figsize=(8, 2.8))
    draw_dag(nodes, edges, ax=ax, positions=positions, notes=notes,
             title="backward of z = exp(x + y): Add hands the same gradient to both inputs")
    plt.show()


gradient_flow_picture(x, y, s, z)

# %% [markdown]
# Arrows point the way backward runs; under each variable, the gradient it
# receives: `Exp` turns $g_z = 1$ into $g_s = e^{0.25}$, and `Add` hands that
# to $x$ and to $y$. On arrays the seed has the shape of the output, and
# `Add` hands each input that array of gradients.

# %% [markdown]
# A `backward` that forgets a gradient, caught by `strict=True`:

# %% tags=["hide-cell"]
class AddMissingAGradient(Add):
    def backward(self, gy):
        return (gy,)  # one gradient for two inputs


try:
    AddMissingAGradient()(Variable(np.array(1.0)), Variable(np.array(2.0))).backward()
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# Still missing: the loop *assigns* `x.grad = gx`, which is right as long as
# every variable feeds one function. Step 14 shows what goes wrong for a
# variable used twice, as in `add(x, x)`.
#
# ## Check against PyTorch
#
# The gradients of $x + y$ and $e^{x+y}$ with respect to both inputs, against
# autograd for a scalar and two array shapes. For the sum the gradients are
# exactly 1, so they must be equal; for the exponential the arithmetic may
# round differently, so `rtol=1e-12`.

# %%
rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    at = torch.tensor(a, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)
    x, y = Variable(a), Variable(b)
    add(x, y).backward()
    (at + bt).backward(torch.ones_like(at))
    np.testing.assert_array_equal(x.grad, at.grad.numpy())
    np.testing.assert_array_equal(y.grad, bt.grad.numpy())
    at.grad = bt.grad = None
    x, y = Variable(a), Variable(b)
    exp(add(x, y)).backward()
    torch.exp(at + bt).backward(torch.ones_like(at))
    np.testing.assert_allclose(x.grad, at.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad, bt.grad.numpy(), rtol=1e-12)
print("PyTorch check passed: grads of x + y (and of exp(x + y)) equal torch autograd")

# %% [markdown]
# ## Recap
#
# - `backward(*gys)` takes one gradient per output and returns one per input,
#   in the order of `inputs`.
# - `Add.backward` returns `gy, gy`: both partial derivatives are 1.
# - The loop pairs inputs with gradients using `zip(..., strict=True)`, so a
#   missing gradient is an error, not a silent gap; `as_array` keeps
#   gradients arrays.
# - Gradients are still assigned, not added: a variable used twice is step
#   14's problem.
#
# ## Exercises
#
# **1. Backprop ninja: `Mul`.** Write `Mul` and `mul(x0, x1)` with a backward
# worked out by hand ($\partial (x_0 x_1) / \partial x_0 = x_1$), and compute
# the gradients of $e^{x y}$ at $x = 0.5$, $y = -0.25$.

# %% tags=["hide-cell"]
class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy * x1, gy * x0


def mul(x0, x1):
    return Mul()(x0, x1)


x, y = Variable(np.array(0.5)), Variable(np.array(-0.25))
exp(mul(x, y)).backward()
print(f"x.grad = {x.grad:.6f}  y.grad = {y.grad:.6f}")


# %% [markdown]
# **2. `Sub`.** Write `Sub` and `sub(x0, x1)`, $x_0 - x_1$, forward and
# backward.

# %% tags=["hide-cell"]
class Sub(Function):
    def forward(self, x0, x1):
        return x0 - x1

    def backward(self, gy):
        return gy, -gy


def sub(x0, x1):
    return Sub()(x0, x1)


x, y = Variable(np.array(2.0)), Variable(np.array(3.0))
square(sub(x, y)).backward()
print("x.grad =", x.grad, " y.grad =", y.grad)


# %% [markdown]
# **3. Two outputs, backward.** Give step 11's `SinCos` (outputs $\sin x$ and
# $\cos x$) a backward that combines both outputs' gradients, and
# differentiate `add(*SinCos()(x))`, $\sin x + \cos x$. (Here both outputs'
# gradients arrive together, from `Add`; on separate paths the loop may reach
# `SinCos` before one of them exists: the order of the loop is step 16's.)

# %% tags=["hide-cell"]
class SinCos(Function):
    def forward(self, x):
        return np.sin(x), np.cos(x)

    def backward(self, g_sin, g_cos):
        x = self.inputs[0].data
        return np.cos(x) * g_sin - np.sin(x) * g_cos


x = Variable(np.array(0.5))
add(*SinCos()(x)).backward()
print(f"x.grad = {x.grad:.6f}   cos x - sin x = {np.cos(0.5) - np.sin(0.5):.6f}")
