# %% [markdown]
# # Step 08: From recursion to a loop
#
# Step 07's `Variable.backward` calls `backward` on the next variable, which
# calls it on the next, and so on: a chain of $n$ functions keeps $n$ Python
# calls open at once. Python stops that at `sys.getrecursionlimit()` calls
# (1,000 by default) with a `RecursionError`, and real graphs, an unrolled
# recurrent network for one, are longer than that. This step's one idea:
# **walk the graph with a loop and a list of functions still to run**, so the
# depth of the graph no longer decides the depth of the call stack.

# %%
import sys

import matplotlib.pyplot as plt
import numpy as np
import torch

from tinypytorch.utils.listing import show_change

# %% [markdown]
# ## The loop
#
# The whole framework as it stands after this step is in the collapsed cell
# below; only `Variable.backward` changed since step 07.

# %% tags=["hide-cell"]
class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)  # one step of the chain rule
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        output.set_creator(self)  # the output remembers where it came from
        self.input = input  # kept for backward, which needs the input's value
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError()

    def backward(self, gy):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.input.data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.input.data
        return np.exp(x) * gy


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %%
show_change(8, "Variable.backward")

# %% [markdown]
# `funcs` holds the functions whose `backward` has yet to run. The loop takes
# one, turns its output's gradient into its input's gradient, and puts the
# input's creator on the list. Inside the loop there is no `self` for each
# variable on the way, so the gradient is read from `f.output.grad`: that is
# what step 07's `Function.output` is for. On a chain the list never holds
# more than one function; once functions take several inputs (stage 2) several
# can wait at once, and the order they leave the list is step 16's subject.
# (The loop puts `self.creator` on the list unchecked, so `backward()` on a
# leaf fails here; step 16 gives it PyTorch's behaviour.)
#
# On the composite of the previous steps the loop gives step 07's gradients:

# %%
x = Variable(np.array(0.5))
y = Square()(Exp()(Square()(x)))
y.grad = np.array(1.0)
y.backward()
print(f"x.grad = {x.grad:.10f}")

# %% [markdown]
# ## A chain of 10,000 functions
#
# A long chain needs a function whose iterates stay finite: squaring 10,000
# times over- or underflows, and a few `Exp`s in a row overflow. $x_{k+1} =
# \sin x_k$ from $x_0 = 1$ creeps towards 0 ($x_n \approx \sqrt{3/n}$), and the
# chain's derivative $\prod_k \cos x_k$ decays only like a power of $n$. So,
# for this experiment only, a `Sin` function, and step 07's recursive
# `backward` as a plain function, to run both versions on the same graph:

# %%
class Sin(Function):  # a demo function for long chains; not part of the framework
    def forward(self, x):
        return np.sin(x)

    def backward(self, gy):
        return np.cos(self.input.data) * gy


def sin_chain(x, depth):
    y = x
    for _ in range(depth):
        y = Sin()(y)  # a new Function object per link: each remembers its own input
    return y


def backward_recursive(y):
    """Step 07's Variable.backward, as a function of the variable."""
    f = y.creator
    if f is not None:
        f.input.grad = f.backward(y.grad)
        backward_recursive(f.input)


depth = 10_000
x = Variable(np.array(1.0))
y = sin_chain(x, depth)
y.grad = np.array(1.0)
try:
    backward_recursive(y)
except RecursionError as error:
    print("recursive backward raised", type(error).__name__)

# %% [markdown]
# The loop needs no limit:

# %%
y.backward()
print(f"loop backward: dx_{depth}/dx_0 = {x.grad:.6e}")

# %% [markdown]
# ## What the recursion limit guards, and what still costs
#
# The limit counts the Python calls open at once. It exists to stop a runaway
# recursion (a function that never stops calling itself) with an error,
# before it exhausts the stack or the memory and crashes the process. It can
# be raised with `sys.setrecursionlimit`, and since Python 3.11 a Python
# function calling a Python function no longer uses the interpreter's C stack,
# so the recursion then finishes, here with the loop's gradient to the last
# bit (a test runs it
# 200,000 deep too):

# %%
loop_grad = x.grad
limit = sys.getrecursionlimit()
sys.setrecursionlimit(2 * depth)
try:
    backward_recursive(y)
finally:
    sys.setrecursionlimit(limit)  # put the guard back
print(f"limit {2 * depth:,}: recursive backward finished, same gradient as the loop: {x.grad == loop_grad}")


# %% [markdown]
# What is left is cost. Every open call keeps its frame, its local variables,
# until the whole chain is done, so the recursion's memory grows with the
# depth of the graph, and a program that raises the limit has lost the guard
# for all its other recursions. The loop keeps one frame and a list. The
# picture counts the Python frames open while each function's `backward` runs:

# %% tags=["hide-input"]
def frames_per_step(backward, depth):
    """Python frames open when each Sin.backward of a chain of `depth` runs, relative to the first."""
    seen = []

    class CountingSin(Sin):
        def backward(self, gy):
            frame, n = sys._getframe(), 0
            while frame is not None:
                frame, n = frame.f_back, n + 1
            seen.append(n)
            return super().backward(gy)

    y = Variable(np.array(1.0))
    for _ in range(depth):
        y = CountingSin()(y)
    y.grad = np.array(1.0)
    backward(y)
    return np.array(seen) - seen[0] + 1


n = 800
fig, ax = plt.subplots(figsize=(8, 3))
ax.plot(np.arange(1, n + 1), frames_per_step(backward_recursive, n), label="recursion (step 07)")
ax.plot(np.arange(1, n + 1), frames_per_step(Variable.backward, n), lw=2.5, label="loop (step 08)")
ax.text(n * 0.98, 40, "the loop: one call open, at any depth", ha="right", color="C1")
ax.axhline(limit, color="0.5", ls="--", lw=1)
ax.text(n * 0.98, limit * 0.93, f"default recursion limit ({limit:,})", ha="right", va="top", color="0.4")
ax.set(xlabel="functions whose backward has run", ylabel="Python calls open",
       title=f"backward through a chain of {n} functions: the call stack", ylim=(-40, limit * 1.08))
ax.legend(loc="upper left", bbox_to_anchor=(0, 0.86))  # below the limit line, above the curves
plt.show()

# %% [markdown]
# PyTorch's autograd engine, too, walks the graph with a loop over a queue of
# nodes, not with recursion.
#
# ## Check against PyTorch
#
# The composite at a scalar and an array (`rtol=1e-14`: $e^a$ may differ in
# the last bit), then the 10,000-deep `sin` chain built the same way in
# PyTorch. Its gradient is a product of 10,000 cosines, each from a different
# library and each product rounded: up to about $3 \times 10^4$ units of
# $u = 1.1 \times 10^{-16}$ apart, so `rtol=1e-11`.

# %%
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0])):
    x = Variable(array)
    y = Square()(Exp()(Square()(x)))
    y.grad = np.ones_like(y.data)
    y.backward()
    t = torch.tensor(array, requires_grad=True)
    torch.square(torch.exp(torch.square(t))).backward(torch.ones_like(t))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)

x = Variable(np.array(1.0))
y = sin_chain(x, depth)
y.grad = np.array(1.0)
y.backward()  # the default recursion limit is in force
t = ty = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
for _ in range(depth):
    ty = torch.sin(ty)
ty.backward()
np.testing.assert_allclose(y.data, ty.item(), rtol=1e-11, atol=0)
np.testing.assert_allclose(x.grad, t.grad.item(), rtol=1e-11, atol=0)
print("PyTorch check passed: loop backward equals torch; a 10,000-deep chain runs without RecursionError")

# %% [markdown]
# ## Recap
#
# - The recursive `backward` keeps one Python call open per function of the
#   chain; past `sys.getrecursionlimit()` (1,000 by default) it raises
#   `RecursionError`.
# - The loop keeps a list of functions still to run and reads each one's
#   output gradient from `f.output.grad`: the stack stays flat at any depth.
# - Raising the limit makes the recursion finish on Python 3.11+, but its
#   memory still grows with depth and the guard against runaway recursion is
#   gone; the loop needs neither.
# - PyTorch's engine is a loop over a queue too.
#
# ## Exercises
#
# **1. Backprop ninja: a deep `Cos` chain.** Write `Cos` (its backward by
# hand) and backpropagate through $\cos$ applied 1,000 times to $x_0 = 1$.
# Why does this gradient shrink so much faster than the `sin` chain's?

# %% tags=["hide-cell"]
class Cos(Function):
    def forward(self, x):
        return np.cos(x)

    def backward(self, gy):
        return -np.sin(self.input.data) * gy  # d cos(x)/dx = -sin x


x = y = Variable(np.array(1.0))
for _ in range(1000):
    y = Cos()(y)
y.grad = np.array(1.0)
y.backward()
print(f"x_1000 = {y.data:.6f}, dx_1000/dx_0 = {x.grad:.3e}")
# the iterates settle at 0.739085 (cos x = x), where each factor is -sin(0.739085) = -0.674: 0.674^1000


# %% [markdown]
# **2. A loop over variables.** Write `backward_variables(y)`, the loop with a
# list of *variables* to visit instead of functions, so it needs no
# `Function.output`; a leaf simply has no creator to follow, so it also works
# on a leaf.

# %% tags=["hide-cell"]
def backward_variables(y):
    todo = [y]
    while todo:
        v = todo.pop()
        f = v.creator
        if f is not None:
            f.input.grad = f.backward(v.grad)
            todo.append(f.input)


x = Variable(np.array(1.0))
y = sin_chain(x, depth)
y.grad = np.array(1.0)
backward_variables(y)
print(f"dx_{depth}/dx_0 = {x.grad:.6e}")
