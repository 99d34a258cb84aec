# %% [markdown]
# # Step 12: Backward through functions with several inputs
#
# Step 11 let a function take several inputs and return several outputs, but
# only in the forward direction. This step does the same for the backward
# pass: a function receives the gradients of all its outputs and returns one
# gradient per input, and the loop in `Variable.backward` hands each of those
# gradients to the right input.
#
# ## The chain rule with several inputs
#
# Let $L$ be the final output (the one `backward` is called on) and
# $y = f(x_0, x_1)$ a function somewhere in the graph. The backward pass reaches
# $f$ carrying $g_y = \partial L / \partial y$. The chain rule gives each input
# its own gradient, scaled by that input's partial derivative:
#
# $$g_{x_0} = g_y \frac{\partial y}{\partial x_0}, \qquad
#   g_{x_1} = g_y \frac{\partial y}{\partial x_1}.$$
#
# For addition, $y = x_0 + x_1$, both partial derivatives are $1$, so `Add`
# passes the incoming gradient through unchanged to both inputs:
#
# $$g_{x_0} = g_y, \qquad g_{x_1} = g_y.$$
#
# With several outputs $y_1, \dots, y_m$ the function receives one gradient per
# output, and each input collects the contributions of all of them:
# $g_{x_i} = \sum_j g_{y_j} \, \partial y_j / \partial x_i$. No function of this
# stage has two outputs, but the interface already allows it.
#
# ## The new `backward` interface
#
# `backward` mirrors `forward`. Where `forward(*xs)` receives one array per input,
# `backward(*gys)` receives one gradient per output. Where `forward` returns one
# array or a tuple, `backward` returns one gradient (a single input) or a tuple
# with one gradient per input, in the order of `inputs`. So `Add` reads:
#
# ```python
# def backward(self, gy):
#     return gy, gy
# ```
#
# and `Square` and `Exp` need no change: one output gives them one `gy`, and
# their single return value is one gradient for their single input.
#
# ## The framework after this step
#
# The loop collects the gradients of the function's outputs, calls
# `backward(*gys)`, wraps a single result into a 1-tuple (the same trick as in
# `__call__`), and then walks the inputs and their gradients in pairs.
# `zip(..., strict=True)` raises if a `backward` returns more or fewer gradients
# than its function has inputs; plain `zip` would stop at the shorter sequence
# and leave an input silently without its gradient.
#
# Each gradient is stored with `as_array`, as outputs are in `__call__`. NumPy
# returns a scalar type, not an array, from arithmetic on 0-d arrays:
# `2 * np.array(3.0) * np.array(1.0)` is `np.float64(6.0)`. `Variable` already
# refuses such scalars as `data`; wrapping gradients too means `x.grad` is
# always an `ndarray`, whatever the shape.

# %%
import numpy as np


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


# %%
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


# %% [markdown]
# `Add` gains its `backward`, and an `add(x0, x1)` function joins `square` and
# `exp`, so that graphs are written as nested calls, `exp(add(x, y))`, without
# creating function objects by hand.

# %%
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


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy  # dy/dx0 = dy/dx1 = 1


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def add(x0, x1):
    return Add()(x0, x1)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Gradients of a sum
#
# For $z = x + y$ both gradients are $1$, whatever the values of $x$ and $y$.

# %%
x = Variable(np.array(2.0))
y = Variable(np.array(3.0))
z = add(x, y)
z.backward()
print("z.data =", z.data)
print("x.grad =", x.grad, " y.grad =", y.grad)

# %% [markdown]
# With arrays, the seed gradient `np.ones_like(z.data)` has the shape of `z`,
# and `Add` hands each input an array of ones of that shape: every element of
# $z$ depends on exactly one element of $x$ and one of $y$, each with slope 1.

# %%
x = Variable(np.array([1.0, 2.0, 3.0]))
y = Variable(np.array([4.0, 5.0, 6.0]))
z = add(x, y)
z.backward()
print("z.data =", z.data)
print("x.grad =", x.grad)
print("y.grad =", y.grad)

# %% [markdown]
# ## A gradient through a sum
#
# When `Add` sits inside a longer chain, the gradient it passes on is no longer
# $1$. For $z = e^{x + y}$, `Exp` receives $g_z = 1$ and returns
# $e^{x+y}$; `Add` copies that to both inputs:
#
# $$\frac{\partial z}{\partial x} = \frac{\partial z}{\partial y} = e^{x+y},$$
#
# which at $x = 0.5$, $y = -0.25$ is $e^{0.25} \approx 1.284025$. The central
# difference in $x$ (with $y$ held fixed) agrees.

# %%
x = Variable(np.array(0.5))
y = Variable(np.array(-0.25))
z = exp(add(x, y))
z.backward()
print(f"x.grad = {x.grad:.6f}   y.grad = {y.grad:.6f}   e^0.25 = {np.exp(0.25):.6f}")
print(f"numerical d/dx = {numerical_diff(lambda v: exp(add(v, y)), x):.6f}")

# %% [markdown]
# ## A wrong number of gradients is an error
#
# A `backward` that forgets a gradient is a common slip when writing a new
# function. Because of `strict=True`, the loop reports it instead of leaving
# `y.grad` at `None`:

# %%
class AddMissingAGradient(Add):
    def backward(self, gy):
        return (gy,)  # one gradient for two inputs


x, y = Variable(np.array(1.0)), Variable(np.array(2.0))
try:
    AddMissingAGradient()(x, y).backward()
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## What is still missing
#
# The loop assigns `x.grad = gx`, overwriting whatever gradient `x` held. That
# is right as long as every variable feeds exactly one function, as in all the
# graphs above. Step 13 combines one- and two-input functions in one graph and
# shows when a left-over gradient causes trouble; step 14 shows what goes
# wrong when a variable is used twice, as in `add(x, x)`.
#
# ## Check against PyTorch
#
# The gradients of $x + y$ and $e^{x+y}$ with respect to both inputs are
# compared with autograd for a scalar and two array shapes. For the sum the
# gradients are exactly $1$, so they must be equal; for the exponential the
# arithmetic may round differently, so they must agree to `rtol=1e-12`.

# %%
import torch

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
    print(f"shape {shape!s:7} grads of x + y and exp(x + y) == torch")

print("PyTorch check passed: grads of x + y (and of exp(x + y)) equal torch autograd")
