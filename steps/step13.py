# %% [markdown]
# # Step 13: Gradients stay on the variables; `cleargrad`
#
# Step 12 gave `Add` a backward pass. This step puts one- and two-input
# functions into one graph, $z = x^2 + y^2$, and looks at where the backward
# pass leaves its results: on the variables, as `.grad`, where they stay after
# `backward` returns. That is the idea of this step. A gradient left over from
# one pass is read by the next, so a framework that keeps gradients on
# variables needs a way to forget them: `Variable.cleargrad`, the one new
# method.
#
# `Square` needs no change to join a two-input graph: with one argument,
# `__call__(*inputs)` gets the 1-tuple `(x,)`, `forward` returns one array that
# `__call__` wraps into a 1-tuple, and the loop wraps `backward`'s single
# result the same way. A function author writes the natural signature; the
# plumbing handles the tuples.
#
# The framework is step 12's with one method added. The whole snapshot is in
# the collapsed cells below; the change is shown after them.

# %% tags=["hide-cell"]
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

    def cleargrad(self):
        self.grad = None

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


# %% tags=["hide-cell"]
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


# %% tags=["hide-cell"]
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


# %%
from tinypytorch.utils.listing import show_change

show_change(13, "Variable.cleargrad")

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (harness: the pictures of this page)

from tinypytorch.utils.pictures import draw_graph  # noqa: E402
from tinypytorch.utils.tracing import backward_order, ordinal  # noqa: E402


def order_notes(ran):
    """[(function, 'backward 1st, 3rd')] for draw_graph's notes."""
    runs = {}
    for n, f in enumerate(ran, 1):
        runs.setdefault(id(f), (f, []))[1].append(ordinal(n))
    return [(f, "backward " + ", ".join(ns)) for f, ns in runs.values()]


# %% [markdown]
# ## $z = x^2 + y^2$
#
# The partial derivatives are $\partial z / \partial x = 2x$ and
# $\partial z / \partial y = 2y$, so at $(x, y) = (2, 3)$ we expect $(4, 6)$.
# The loop starts at `Add` with the seed $1$, passes $1$ to both squares, and
# pushes their two `Square` functions; the list is last in, first out, so the
# square of $y$ runs before that of $x$.

# %%
x = Variable(np.array(2.0))
y = Variable(np.array(3.0))
z = add(square(x), square(y))
ran = backward_order(z)  # z.backward(), noting the order the functions ran (collapsed cell above)
print("z.data =", z.data, "  x.grad =", x.grad, "  y.grad =", y.grad)
print("backward ran:", ", ".join(type(f).__name__ for f in ran))

# %% [markdown]
# The same code works element-wise on arrays, and the gradients are $2x$ and
# $2y$ element by element:

# %%
xs, ys = Variable(np.array([1.0, -2.0, 0.5])), Variable(np.array([0.0, 3.0, -1.5]))
add(square(xs), square(ys)).backward()
print("x.grad =", xs.grad, "  y.grad =", ys.grad)

# %% [markdown]
# ## A gradient left over from an earlier pass
#
# Take $a = x^2$ and $y = a^2 = x^4$ at $x = 2$. After `y.backward()`, `a`
# holds $\partial y / \partial a = 2a = 8$ and `x` holds $4x^3 = 32$: every
# variable the pass went through keeps its gradient (the picture's right
# half).
#
# Now ask a second question of the same graph: what is $da/dx = 2x = 4$?
# `a.backward()` seeds `a.grad` with $1$ only when it is `None`. It is $8$, so
# the pass starts from the stale seed $\partial y / \partial a$ and computes
# $\frac{\partial y}{\partial a} \frac{da}{dx} = \frac{dy}{dx} = 32$: it
# silently answers the first question again.

# %%
x = Variable(np.array(2.0))
a = square(x)
y4 = square(a)
y4.backward()
print("after y.backward():  a.grad =", a.grad, "  x.grad =", x.grad)
a.backward()
print("after a.backward():  x.grad =", x.grad, "  (dy/dx again; da/dx = 2x = 4)")

# %% tags=["hide-input"]
zx, zy = (v.creator.inputs[0] for v in z.creator.inputs)  # the leaves x and y of z = x² + y²
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
draw_graph(z, names=[(zx, "x"), (zy, "y"), (z, "z")], ax=left, notes=order_notes(ran),
           title="z = x² + y²: the order of the backward pass")
draw_graph(y4, ax=right, names=[(v, f"{name}\ngrad {v.grad:g}") for v, name in [(x, "x"), (a, "a"), (y4, "y")]],
           title="y = (x²)² after y.backward(): grads stay")
fig.tight_layout()
plt.show()

# %% [markdown]
# On the left the graph of $z$: the leaves (blue) and the output (green) are
# the very variables of the cells above, the functions grey, each numbered
# with the turn its backward took. On the right every variable still holds
# its gradient once the pass is over, and `a.grad` is the stale seed.
#
# `cleargrad` resets a variable to the state it had before any backward
# pass. Clearing the variables involved before the second question gives the
# right answer:

# %%
a.cleargrad()
x.cleargrad()
a.backward()
print("after cleargrad and a.backward():  x.grad =", x.grad)

# %% [markdown]
# Clearing `x` is not needed yet, because the loop overwrites `x.grad`; from
# step 14 on it is required, since gradients will accumulate. PyTorch
# accumulates into `.grad` too, and training loops call
# `optimizer.zero_grad()` (or set `x.grad = None`) before each backward pass,
# as we call `cleargrad`.
#
# ## Check against PyTorch
#
# The gradients of $x^2 + y^2$ on arrays, then the second question, $da/dx$,
# asked of PyTorch: `retain_graph=True` keeps its graph for a second pass from
# `a`, and `xt.grad = None` plays `cleargrad`. (The tests compare $x^2 + y^2$
# for random shapes and values.)

# %%
import torch  # noqa: E402

rng = np.random.default_rng(0)
u, v = rng.standard_normal((2, 3))
x, y = Variable(u), Variable(v)
add(square(x), square(y)).backward()
xt, yt = torch.tensor(u, requires_grad=True), torch.tensor(v, requires_grad=True)
(xt**2 + yt**2).sum().backward()
np.testing.assert_allclose([x.grad, y.grad], [xt.grad.numpy(), yt.grad.numpy()], rtol=1e-12)

x = Variable(np.array(2.0))
a = square(x)
square(a).backward()
a.cleargrad()
x.cleargrad()
a.backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2).backward(retain_graph=True)
xt.grad = None
at.backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print(f"da/dx after cleargrad: {x.grad:.1f} == torch {xt.grad.item():.1f}")
print("PyTorch check passed: grads of x**2 + y**2 equal torch; after cleargrad, da/dx equals torch's")

# %% [markdown]
# ## Recap
#
# - `Square` fits the variadic interface unchanged: one input and one output
#   are 1-tuples inside `__call__` and the backward loop.
# - The backward pass leaves each gradient on its variable, as `.grad`, for
#   the leaves and the intermediate variables alike.
# - A later pass reads what is there: a stale `a.grad` becomes the seed of
#   `a.backward()`, and the answer is wrong without any error.
# - `cleargrad()` forgets a gradient; PyTorch's `x.grad = None` and
#   `optimizer.zero_grad()` do the same job.
#
# ## Exercises
#
# **1.** Write `Cube(Function)`, $y = x^3$, with its backward
# $3x^2 \, g_y$, and `cube(x)`. Check the gradients of $x^3 + y^2$ at
# $(x, y) = (2, 3)$: $12$ and $6$.

# %% tags=["hide-cell"]
class Cube(Function):
    def forward(self, x):
        return x ** 3

    def backward(self, gy):
        x = self.inputs[0].data
        return 3 * x ** 2 * gy


def cube(x):
    return Cube()(x)


x, y = Variable(np.array(2.0)), Variable(np.array(3.0))
add(cube(x), square(y)).backward()
print("x.grad =", x.grad, "  y.grad =", y.grad)

# %% [markdown]
# **2.** Write `clear_graph(y)`: `cleargrad` on every variable of the graph
# behind `y` (follow `creator` and `inputs`), so that one call prepares the
# second question of the `cleargrad` example.

# %% tags=["hide-cell"]
def clear_graph(y):
    todo = [y]
    while todo:
        v = todo.pop()
        v.cleargrad()
        if v.creator is not None:
            todo.extend(v.creator.inputs)


x = Variable(np.array(2.0))
a = square(x)
y = square(a)
y.backward()
clear_graph(y)
a.backward()
print("after clear_graph(y) and a.backward():  x.grad =", x.grad)
