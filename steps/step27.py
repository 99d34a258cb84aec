# %% [markdown]
# # Step 27: Higher-order derivatives
#
# `backward` gives the first derivative. Many methods need more: Newton's
# method divides by the second derivative (step 28), a Hessian-vector product
# differentiates a gradient, and a loss may contain a gradient as one of its
# terms (double backprop, step 28). This step makes the derivative itself
# differentiable: the backward pass is recorded as a graph of its own, and
# `backward` is called on that graph.
#
# ## The idea: a derivative is a computation too
#
# For $y = \sin x$ the backward pass computes $g = \frac{\partial y}{\partial x} = g_y \cos x$,
# with $g_y = 1$ the seed. That is an ordinary computation, a `cos` and a
# multiplication, so if the framework records it the way it records the
# forward pass, the result $g$ has a creator, and `g.backward()` gives
#
# $$\frac{\partial g}{\partial x} = \frac{\partial^2 y}{\partial x^2} = -\sin x.$$
#
# Repeat, and each pass adds one order. Two things are needed: backward
# methods that compute with `Variable` operations (which are recorded), not
# with raw arrays (which are not); and a switch to record them only when a
# higher derivative is wanted.

# %%

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.functions import Sin, Tanh
from tinypytorch.utils import functions_in_graph, plot_dot_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Backward methods compute with Variables
#
# Through step 22 a gradient was a NumPy array: `Square.backward` computed
# `2 * x * gy` with `x = self.inputs[0].data`, arithmetic on arrays, which
# leaves no trace to differentiate. In the package every backward method works
# on Variables: the input Variables it needs (`self.saved_tensors`, which
# forward kept for it; step 35 explains the mechanism, read it as "the
# inputs" for now), `gy`, a Variable, and `cos` below, the package's
# differentiable `cos`, not NumPy's:

# %%
show_code(Sin.backward)
show_code(tinypytorch.core.Mul.backward)
show_code(Tanh.backward)

# %% [markdown]
# `Mul.backward` returns $\partial y/\partial x_0 = g_y x_1$ and
# $\partial y/\partial x_1 = g_y x_0$, each a product of Variables
# (`sum_to_inputs` undoes broadcasting, step 30), and `None` for an input
# that is a constant, whose gradient would be thrown away. `Tanh.backward` uses
# $\tanh'(x) = 1 - \tanh^2 x$ and reads $\tanh x$ from the function's own
# output, which forward saved, rather than computing it again. Since the
# output's creator is this `Tanh`, a graph of the derivative passes through
# the forward `Tanh` once more: exactly what the chain rule needs when the
# derivative is differentiated.
#
# So gradients are Variables. They behave like numbers where it matters:
# `f"{x.grad:.4f}"` formats a 0-d Variable, and `np.asarray(x.grad)` (what
# `np.testing.assert_allclose` calls) gives its array.

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.sin(x)
y.backward()
print("type(x.grad):", type(x.grad).__name__)
print(f"x.grad = {x.grad:.6f}   cos(1) = {np.cos(1.0):.6f}")
print("x.grad.creator:", x.grad.creator)

# %% [markdown]
# ## Recording the backward pass: `create_graph`
#
# The last line shows that the gradient above has no creator: nothing was
# recorded. That is the default, and here is where it is decided:

# %%
show_code(Variable.backward)
show_code(tinypytorch.autograd.engine.run_backward)

# %% [markdown]
# The first lines check the input and make the seed (step 33 explains the
# check); `run_backward` runs the backward methods in a valid order (step
# 16's idea, which step 33 rebuilds the way PyTorch does it). What matters
# here is the `with` block in it, around the pass. A backward method records a
# graph exactly when a forward computation would: when
# `Config.enable_backprop` is on (step 18). `run_backward` sets it to
# `create_graph` for the length of the pass, so
#
# - `backward()` (the default, `create_graph=False`) computes gradients as
#   plain values. Nothing of the backward pass is kept, which saves the memory
#   of every intermediate of the derivative and the time to record it; a first
#   derivative needs no more, and training needs only first derivatives.
# - `backward(create_graph=True)` records the backward pass: every gradient
#   has a creator, and can be differentiated.
#
# PyTorch has the same keyword with the same meaning: `loss.backward(create_graph=True)`.

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.sin(x)
y.backward(create_graph=True)
gx = x.grad
print(f"gx = {gx:.6f}, creator: {type(gx.creator).__name__}")

# %% [markdown]
# Now `gx` is the output of a `Mul` (of the seed and $\cos x$). Its graph,
# drawn with step 25's `plot_dot_graph`, goes back to `x` through the `Cos`
# that `Sin.backward` created:

# %%
plot_dot_graph(gx)

# %% [markdown]
# ## The second derivative, and why `cleargrad` comes first
#
# `gx.backward()` now differentiates $g_x = \cos x$ with respect to `x`. But
# `x.grad` still holds $g_x$, and a backward pass *adds* into `.grad` (step
# 14: a variable used in several places sums its gradients, and two losses
# backpropagated one after the other sum theirs). Without clearing it first,
# `x.grad` would end up as $\cos x - \sin x$, the first derivative plus the
# second:

# %%
gx.backward()
print(f"without cleargrad: x.grad = {x.grad:.6f}   cos(1) - sin(1) = {np.cos(1.0) - np.sin(1.0):.6f}")

# %% [markdown]
# So the recipe for each further order is: keep the current derivative in a
# Python variable, clear `x.grad`, backpropagate from the kept derivative.
# Clearing `x.grad` drops only `x`'s reference to $g_x$; the name `gx` keeps
# it, and its graph, alive.

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.sin(x)
y.backward(create_graph=True)
gx = x.grad
x.cleargrad()
gx.backward()
print(f"with cleargrad:    x.grad = {x.grad:.6f}   -sin(1) = {-np.sin(1.0):.6f}")

# %% [markdown]
# Clearing has a second use. After `backward(create_graph=True)`, `x.grad`
# is the output of a graph whose inputs include `x` itself, so `x` refers to
# its gradient, which refers (through creators and edges) back to `x`: a
# reference cycle, the kind step 17 removed from the forward graph. Reference
# counting cannot free it, only Python's slower cycle collector can.
# `x.cleargrad()` breaks the cycle. PyTorch has the same cycle, and warns
# about it when `backward` is called with `create_graph=True`.
#
# Step 33 adds `tinypytorch.autograd.grad`, PyTorch's function that returns
# gradients instead of adding them into `.grad`: no clearing, and no cycle.
#
# ## Any order, in a loop
#
# `derivatives(f, x0, n)` returns $f(x_0), f'(x_0), \ldots, f^{(n)}(x_0)$. Each
# pass uses `create_graph=True`, so its result can be differentiated by the
# next. The last pass could do without the graph; keeping the loop uniform
# costs one unneeded recording.

# %%
def derivatives(f, x0, n):
    """[f(x0), f'(x0), ..., f^(n)(x0)] as floats, by n backward passes."""
    x = Variable(np.array(x0), name="x")
    g = f(x)
    values = [float(g.data)]
    for _ in range(n):
        x.cleargrad()
        g.backward(create_graph=True)
        g = x.grad
        values.append(float(g.data))
    return values


def show(name, values, exact):
    for order, (value, expected) in enumerate(zip(values, exact)):
        print(f"{name} order {order}: {value:12.6f}   exact {expected:12.6f}")


# %% [markdown]
# ### $x^4$
#
# $f = x^4$, $f' = 4x^3$, $f'' = 12x^2$, $f''' = 24x$, $f'''' = 24$, and every
# higher derivative is $0$. At $x = 1.5$: $5.0625$, $13.5$, $27$, $36$, $24$, $0$.
# `Pow.backward` computes $c\,x^{c-1} g_y$ with a `Pow` of exponent $c - 1$, so
# each order lowers the exponent by one until $x^0$, whose derivative the
# package knows to be $0$ (step 22).

# %%
show("x**4", derivatives(lambda x: x**4, 1.5, 5), [1.5**4, 4 * 1.5**3, 12 * 1.5**2, 24 * 1.5, 24.0, 0.0])

# %% [markdown]
# ### $\sin x$
#
# The derivatives of $\sin$ cycle with period four: $\cos x$, $-\sin x$,
# $-\cos x$, $\sin x$. At $x = \pi/4$ all of them have size $1/\sqrt 2 \approx 0.707107$:

# %%
x0 = np.pi / 4
show("sin", derivatives(tinypytorch.sin, x0, 4), [np.sin(x0), np.cos(x0), -np.sin(x0), -np.cos(x0), np.sin(x0)])

# %% [markdown]
# ### $\tanh x$
#
# With $t = \tanh x$, $t' = 1 - t^2$, and by the chain rule
#
# $$t'' = -2t\,(1 - t^2), \qquad t''' = -2(1 - t^2)(1 - 3t^2).$$

# %%
t = np.tanh(1.0)
exact = [t, 1 - t**2, -2 * t * (1 - t**2), -2 * (1 - t**2) * (1 - 3 * t**2)]
show("tanh", derivatives(tinypytorch.tanh, 1.0, 3), exact)

# %% [markdown]
# ## Derivatives of arrays
#
# $\tanh$ works element by element, so on an array $x$ the backward pass of
# $\sum_i \tanh x_i$ computes $\partial \sum_i \tanh x_i / \partial x_j = \tanh'(x_j)$
# for every $j$ at once: the derivative *function* sampled on a grid. The
# same loop then draws the first three derivatives:

# %%
grid = np.linspace(-4.0, 4.0, 201)
x = Variable(grid, name="x")
g = tinypytorch.tanh(x)
curves = [g.data]
for _ in range(3):
    x.cleargrad()
    g.sum().backward(create_graph=True)
    g = x.grad
    curves.append(g.data)

for order, curve in enumerate(curves):
    plt.plot(grid, curve, label="tanh" + "'" * order)
plt.xlabel("x")
plt.legend()
plt.title("tanh and its first three derivatives")
plt.show()

# %% [markdown]
# ## Each order's graph is bigger
#
# Every pass differentiates the previous pass's graph, so the graphs grow:
# the derivative of a product is a sum of two products, and so on. Counting
# the functions in the graph of each derivative of $\tanh$:

# %%
x = Variable(np.array(1.0), name="x")
g = tinypytorch.tanh(x)
for order in range(1, 7):
    x.cleargrad()
    g.backward(create_graph=True)
    g = x.grad
    print(f"order {order}: {len(functions_in_graph(g)):4d} functions   value {g.data:12.6f}")

# %% [markdown]
# From the third order on, each graph is about 2.6 times the one before.
# Nothing in the framework simplifies expressions (a computer-algebra system
# would), so high orders of complicated functions get expensive; in practice
# one rarely needs more than the second.
#
# The graph of the second derivative (`x` in light blue, the result in
# green) shows $t'' = -2t(1 - t^2)$ in the form the chain rule produced it:
# $\big((-1)\,t + (-1)\,t\big)\,(1 - t\,t)$. The two $(-1)\,t$ terms come from the
# two uses of $t$ in $t\,t$, one per arrow into that `Mul`. The $-1$ is what
# `Sub.backward` passed to its second input, minus the incoming gradient $1$;
# it is a constant, a leaf, because nothing it was computed from requires grad.

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.tanh(x)
y.backward(create_graph=True)
gx = x.grad
x.cleargrad()
gx.backward(create_graph=True)
plot_dot_graph(x.grad)

# %% [markdown]
# ## Check against PyTorch
#
# PyTorch computes higher derivatives the same way: `torch.autograd.grad(y, x,
# create_graph=True)` returns $\partial y/\partial x$ with its own graph,
# which `autograd.grad` differentiates again. For $\sin$, $\tanh$ and $x^4$ at
# seeded random points, our first three derivatives (computed as above, with
# `backward` and `cleargrad`) equal PyTorch's. The arithmetic differs only in
# the order of a few operations, so the relative tolerance is $10^{-12}$, with an
# absolute one of $10^{-14}$ for derivatives that pass through $0$.

# %%
import torch


def torch_derivatives(f, x0, n):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    g = f(x)
    values = [g.item()]
    for _ in range(n):
        (g,) = torch.autograd.grad(g, x, create_graph=True)
        values.append(g.item())
    return values


points = np.random.default_rng(0).uniform(-2.0, 2.0, 5)
cases = {"sin": (tinypytorch.sin, torch.sin), "tanh": (tinypytorch.tanh, torch.tanh),
         "x**4": (lambda x: x**4, lambda x: x**4)}
for name, (ours, theirs) in cases.items():
    for x0 in points:
        np.testing.assert_allclose(derivatives(ours, x0, 3), torch_derivatives(theirs, x0, 3), rtol=1e-12, atol=1e-14)
    print(f"{name:4}: f, f', f'', f''' equal torch.autograd.grad(create_graph=True) at {len(points)} points")

print("PyTorch check passed: 2nd and 3rd derivatives of sin, tanh and x**4 equal torch's create_graph derivatives")
