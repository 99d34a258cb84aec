# %% [markdown]
# # Step 08: From recursion to a loop
#
# Step 07's `Variable.backward` calls `backward` on the next variable, which
# calls it on the next, and so on: a chain of $n$ functions means $n$ nested
# Python calls, all waiting at once. Python caps the nesting depth (1000 frames
# by default) and raises `RecursionError` beyond it, and a real network's graph
# easily has more nodes than that, for example an unrolled recurrent network.
# This step rewrites `backward` as a loop over a list of functions still to be
# processed, which needs no deeper stack however long the chain.
#
# ## The loop
#
# The list `funcs` holds the functions whose `backward` has yet to run. The
# loop takes one out, lets it turn its output's gradient into its input's
# gradient, and, if that input was itself produced by a function, puts that
# function on the list:

# %%
import sys

import numpy as np


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


# %% [markdown]
# Compared with step 07, the function reads its output's gradient from
# `f.output.grad` rather than from `self.grad`: inside the loop there is no
# `self` for each variable on the way. That is what `Function.output`, added in
# step 07, is for.
#
# On a chain, `funcs` never holds more than one function. A list is still the
# right structure: in stage 2 functions take several inputs, the graph
# branches, and several functions can be waiting at once; the order in which
# they leave the list then becomes the subject of step 16.
#
# One behaviour is lost in the rewrite. The recursive version checked
# `self.creator` before using it; the loop puts `self.creator` on the list
# unchecked, so calling `backward()` on a leaf (a variable with no creator)
# fails with an `AttributeError` on `None`. PyTorch accepts it and sets the
# leaf's gradient to one. Stage 1 keeps the loop as it is and lists this among
# its known limitations (step 10); step 16 handles the case.
#
# `Function`, `Square`, `Exp` and `numerical_diff` are unchanged from step 07.

# %%
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


# %%
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


# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Same results
#
# On the composite of the previous steps the loop gives the same gradients as
# the recursion:

# %%
A = Square()
B = Exp()
C = Square()

x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
y.grad = np.array(1.0)
y.backward()
print(f"b.grad = {b.grad:.10f}")
print(f"a.grad = {a.grad:.10f}")
print(f"x.grad = {x.grad:.10f}")

# %% [markdown]
# ## A chain of 10,000 functions
#
# To see the difference we need a long chain whose value and gradient stay
# finite. `Square` and `Exp` are no good for that: squaring 10,000 times
# computes $x^{2^{10000}}$, which overflows or underflows unless $x$ is 0 or
# $\pm 1$, and there the derivative is 0 or $2^{10000}$, which overflows; and
# three or four `Exp`s in a row already overflow. So, for this experiment only, we define a
# `Sin` function. Iterating $x_{k+1} = \sin x_k$ from $x_0 = 1$ creeps towards
# 0 slowly, $x_n \approx \sqrt{3/n}$, and the derivative of the chain,
#
# $$\frac{dx_n}{dx_0} = \prod_{k=0}^{n-1} \cos x_k,$$
#
# is a product of factors close to 1 that decays only like a power of $n$:
# small but far from underflow.

# %%
class Sin(Function):  # a demo function for long chains; not part of the framework
    def forward(self, x):
        return np.sin(x)

    def backward(self, gy):
        x = self.input.data
        return np.cos(x) * gy


def sin_chain(x, depth):
    y = x
    for _ in range(depth):
        y = Sin()(y)  # a new Function object per link: each remembers its own input
    return y


depth = 10_000
x = Variable(np.array(1.0))
y = sin_chain(x, depth)
print(f"x_{depth} = {y.data:.6f}   (sqrt(3/n) = {np.sqrt(3 / depth):.6f})")

# %% [markdown]
# For comparison we keep step 07's recursive `backward`, written as a plain
# function so that both versions can run on the same graph:

# %%
def backward_recursive(y):
    """Step 07's Variable.backward, as a function of the variable."""
    f = y.creator
    if f is not None:
        x = f.input
        x.grad = f.backward(y.grad)
        backward_recursive(x)


y.grad = np.array(1.0)
try:
    backward_recursive(y)
    print("recursive backward finished")
except RecursionError as error:
    print("recursive backward raised", type(error).__name__)

# %% [markdown]
# The recursion gave up after about a thousand of the 10,000 links: Python
# counts the frames of running calls and raises `RecursionError` at
# `sys.getrecursionlimit()`, 1,000 by default, to turn a runaway recursion
# into an error. The limit can be raised. Since Python 3.11, which this
# tutorial requires, a Python function calling a Python function no longer
# takes room on the interpreter's C stack, so with a higher limit the same
# recursion finishes:

# %%
limit = sys.getrecursionlimit()
sys.setrecursionlimit(2 * depth)
try:
    backward_recursive(y)
finally:
    sys.setrecursionlimit(limit)  # put the guard back
recursive_grad = x.grad
print(f"limit {2 * depth:,}: recursive backward finished, dx_{depth}/dx_0 = {recursive_grad:.6e}")

# %% [markdown]
# What the recursion still costs: every level keeps its frame until the
# whole chain is done, memory that grows with the depth; a recursion that
# passes through C code (a `__del__`, a callback written in C) does use the
# C stack, where going too deep crashes the process instead of raising; and
# a program that raises the limit loses the guard against its own runaway
# recursions. A loop keeps only a list of the functions still to run.
# PyTorch's autograd engine, too, processes the graph with a loop and a
# queue rather than recursion.
#
# The loop needs no limit, and gives the same gradient:

# %%
y.backward()
print(f"loop backward finished: dx_{depth}/dx_0 = {x.grad:.6e}, the recursion's: {x.grad == recursive_grad}")

# %% [markdown]
# ## Check against PyTorch
#
# First the composite, at a scalar and an array; the arithmetic matches
# PyTorch's except for $e^a$, which may differ in the last bit, hence
# `rtol=1e-14`. Then the 10,000-deep `sin` chain, built the same way in PyTorch.
# Its gradient is a product of 10,000 cosines, each computed by a different
# library and each multiplication rounded: the relative differences can add up
# to about $3 \times 10^4$ units of $u = 1.1 \times 10^{-16}$ in the worst case,
# so we allow `rtol=1e-11`.

# %%
import torch

for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0])):
    x = Variable(array)
    y = Square()(Exp()(Square()(x)))
    y.grad = np.ones_like(y.data)
    y.backward()
    t = torch.tensor(array, requires_grad=True)
    torch.square(torch.exp(torch.square(t))).backward(torch.ones_like(t))
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)
    print(f"x = {np.array2string(array)}: x.grad equals torch's")

x = Variable(np.array(1.0))
y = sin_chain(x, depth)
y.grad = np.array(1.0)
y.backward()
t = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
ty = t
for _ in range(depth):
    ty = torch.sin(ty)
ty.backward()
np.testing.assert_allclose(y.data, ty.item(), rtol=1e-11, atol=0)
np.testing.assert_allclose(x.grad, t.grad.item(), rtol=1e-11, atol=0)
print(f"sin chain of depth {depth}: value {y.data:.6f} and x.grad {x.grad:.6e} equal torch's")

print("PyTorch check passed: loop backward equals torch, and a 10,000-deep chain runs without RecursionError")
