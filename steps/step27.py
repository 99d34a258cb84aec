# %% [markdown]
# # Step 27: Higher-order derivatives
#
# `backward` gives the first derivative. Newton's method (step 28) needs the
# second, and a loss may contain a gradient as one of its terms. The idea of
# this step: **a derivative is a computation too**. For $y = \sin x$ the
# backward pass computes $g_x = g_y \cos x$, a `cos` and a multiplication. If
# the framework records that computation as it records the forward pass, $g_x$
# has a creator, and `gx.backward()` gives
#
# $$\frac{\partial g_x}{\partial x} = \frac{\partial^2 y}{\partial x^2} = -\sin x.$$
#
# Each further pass adds one order. Two things are needed: backward methods
# that compute with `Variable` operations (recorded), not raw arrays (not
# recorded); and a switch, `create_graph`, to record them only when a higher
# derivative is wanted.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.functions import Sin
from tinypytorch.utils import functions_in_graph, plot_dot_graph
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## Backward methods compute with Variables
#
# Through step 22 `Square.backward` computed `2 * x * gy` on NumPy arrays,
# which leaves no trace. In the package every backward method works on
# Variables: `gy` is a Variable, the inputs it needs come from
# `self.saved_tensors` (step 35; read it as "the inputs" for now), and `cos`
# is the package's differentiable `cos`:

# %%
show_code(Sin.backward, tinypytorch.core.Mul.backward, step=27)

# %% [markdown]
# (`sum_to_inputs` undoes broadcasting, step 30; a constant input gets `None`,
# step 33.) So a gradient is a Variable. By default it has no creator, since
# nothing was recorded:

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.sin(x)
y.backward()
print(f"x.grad = {x.grad:.6f} (cos 1 = {np.cos(1.0):.6f})")
print(f"a {type(x.grad).__name__}, creator {x.grad.creator}")

# %% [markdown]
# ## Recording the backward pass: `create_graph`
#
# A backward method records a graph exactly when a forward computation
# would: when `Config.enable_backprop` is on (step 18). `run_backward` sets it
# to `create_graph` for the length of the pass:

# %%
show_code(tinypytorch.autograd.engine.run_backward, step=27)

# %% [markdown]
# `backward()` (`create_graph=False`) computes gradients as plain values and
# keeps nothing of the pass: training needs only first derivatives.
# `backward(create_graph=True)`, PyTorch's keyword with the same meaning,
# records the pass, and every gradient can be differentiated.

# %%
x = Variable(np.array(1.0), name="x")
y = tinypytorch.sin(x)
y.backward(create_graph=True)
gx = x.grad
print(f"gx = {gx:.6f}, creator: {type(gx.creator).__name__}")

# %% tags=["hide-input"]
nodes = {"x": ("leaf", "x"), "Sin": ("function", "Sin"), "y": ("variable", "y"),
         "seed": ("variable", "1 (seed)"), "Cos": ("function", "Cos"), "c": ("variable", "cos x"),
         "Mul": ("function", "Mul"), "gx": ("output", "gx")}
edges = [("x", "Sin"), ("Sin", "y"), ("x", "Cos"), ("Cos", "c"), ("c", "Mul"), ("seed", "Mul"), ("Mul", "gx")]
where = {"x": (0, 0), "Sin": (1, 0.8), "y": (2, 0.8), "Cos": (1, -0.5), "c": (2, -0.5), "seed": (2, -1.5),
         "Mul": (3, -1), "gx": (4, -1)}
fig, ax = plt.subplots(figsize=(8, 3))
draw_dag(nodes, edges, ax=ax, positions=where,
         notes={"Sin": "forward", "Cos": "recorded by Sin.backward", "Mul": "gx = 1 · cos x"},
         title="backward(create_graph=True): the derivative gets a graph of its own, back to x")
plt.show()

# %% [markdown]
# The derivative's graph reaches `x` through the `Cos` that `Sin.backward`
# created, so `gx.backward()` differentiates $\cos x$. One catch: a backward
# pass *adds* into `.grad` (step 14), and `x.grad` still holds $g_x$. So each
# further order is: keep the current derivative in a Python name, clear
# `x.grad`, backpropagate from the kept derivative.

# %%
x.cleargrad()
gx.backward()
print(f"second derivative: x.grad = {x.grad:.6f}   -sin(1) = {-np.sin(1.0):.6f}")

# %% [markdown]
# Without `cleargrad`, `x.grad` would end up as $\cos 1 - \sin 1$, first and
# second derivative summed. Clearing also breaks a reference cycle: after
# `backward(create_graph=True)`, `x` holds its gradient, whose graph leads
# back to `x` (step 17's kind of cycle; PyTorch warns about it). Step 33's
# `autograd.grad` returns gradients instead of adding them: no clearing, no
# cycle.
#
# ## Any order, in a loop
#
# `derivatives(f, x0, n)` returns $f(x_0), f'(x_0), \ldots, f^{(n)}(x_0)$.
# For $x^4$ at $1.5$ they are $5.0625, 13.5, 27, 36, 24, 0$ (`Pow.backward`
# lowers the exponent by one each time, down to $x^0$, step 22); for $\sin$ at
# $\pi/4$ they cycle through $\pm 1/\sqrt 2$; for $t = \tanh x$,
# $t' = 1 - t^2$, $t'' = -2t(1 - t^2)$.

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


t = np.tanh(1.0)
for name, f, x0, exact in [("x**4", lambda x: x**4, 1.5, [5.0625, 13.5, 27.0, 36.0, 24.0, 0.0]),
                           ("sin", tinypytorch.sin, np.pi / 4, np.sqrt(0.5) * np.array([1, 1, -1, -1, 1])),
                           ("tanh", tinypytorch.tanh, 1.0, [t, 1 - t**2, -2 * t * (1 - t**2)])]:
    values = derivatives(f, x0, len(exact) - 1)
    np.testing.assert_allclose(values, exact, rtol=1e-12, atol=1e-15)
    print(f"{name:4} at {x0:.4f}:", "  ".join(f"{v:8.4f}" for v in values), "  (equal the exact values)")

# %% [markdown]
# On an array $x$, the backward pass of $\sum_i \tanh x_i$ gives $\tanh'(x_j)$
# for every $j$ at once: the derivative *function* sampled on a grid. The same
# loop draws three orders:

# %% tags=["hide-input"]
grid = np.linspace(-4.0, 4.0, 201)
x = Variable(grid, name="x")
g = tinypytorch.tanh(x)
curves = [g.data]
for _ in range(3):
    x.cleargrad()
    g.sum().backward(create_graph=True)
    g = x.grad
    curves.append(g.data)
fig, ax = plt.subplots(figsize=(8, 3))
for order, curve in enumerate(curves):
    ax.plot(grid, curve, label="tanh" + "'" * order)
ax.set(xlabel="x", title="tanh and its first three derivatives, each from a backward pass over the last")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Every pass differentiates the previous pass's graph, and nothing simplifies
# expressions, so the graphs grow: from the third order on each derivative of
# $\tanh$ has about 2.6 times the functions of the one before (the collapsed
# cell counts them and draws the second derivative's graph). High orders get
# expensive; in practice one rarely needs more than the second.

# %% tags=["hide-cell"]
x = Variable(np.array(1.0), name="x")
g = tinypytorch.tanh(x)
for order in range(1, 7):
    x.cleargrad()
    g.backward(create_graph=True)
    g = x.grad
    print(f"order {order}: {len(functions_in_graph(g)):4d} functions   value {g.data:12.6f}")
x = Variable(np.array(1.0), name="x")
tinypytorch.tanh(x).backward(create_graph=True)
gx = x.grad
x.cleargrad()
gx.backward(create_graph=True)
plot_dot_graph(x.grad)

# %% [markdown]
# ## Check against PyTorch
#
# PyTorch computes higher derivatives the same way:
# `torch.autograd.grad(y, x, create_graph=True)` returns $\partial y/\partial x$
# with its own graph, which `autograd.grad` differentiates again (the
# collapsed cell). For $\sin$, $\tanh$ and $x^4$ at five seeded random points
# our first three derivatives equal PyTorch's.

# %% tags=["hide-cell"]
import torch  # noqa: E402


def torch_derivatives(f, x0, n):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    g = f(x)
    values = [g.item()]
    for _ in range(n):
        (g,) = torch.autograd.grad(g, x, create_graph=True)
        values.append(g.item())
    return values


# %%
points = np.random.default_rng(0).uniform(-2.0, 2.0, 5)
cases = {"sin": (tinypytorch.sin, torch.sin), "tanh": (tinypytorch.tanh, torch.tanh),
         "x**4": (lambda x: x**4, lambda x: x**4)}
for name, (ours, theirs) in cases.items():
    for x0 in points:
        expected = torch_derivatives(theirs, x0, 3)
        np.testing.assert_allclose(derivatives(ours, x0, 3), expected, rtol=1e-12, atol=1e-14)
    print(f"{name:4}: f, f', f'', f''' equal torch.autograd.grad's at {len(points)} points")
print("PyTorch check passed: 2nd and 3rd derivatives of sin, tanh and x**4 equal torch's (create_graph)")

# %% [markdown]
# ## Recap
#
# - Backward methods compute with Variables, so the backward pass is an
#   ordinary computation that can be recorded.
# - `backward(create_graph=True)` records it: the gradient has a creator, and
#   its own `backward` gives the next derivative.
# - `.grad` accumulates: keep the derivative in a name and `cleargrad()`
#   before each further pass (which also breaks the cycle `x → x.grad → x`).
# - Each order's graph is larger than the last; the second derivative is what
#   methods usually need.
#
# ## Exercises
#
# **1. A mixed derivative.** For $f(x, y) = x^2 y^3$, compute
# $\frac{\partial^2 f}{\partial y\,\partial x}$ at $(x, y) = (1.5, -0.5)$: one
# `backward(create_graph=True)`, then backpropagate from `x.grad` and read
# `y.grad`. Maths says $6xy^2$.

# %% tags=["hide-cell"]
def mixed_derivative(x0, y0):
    x, y = Variable(np.array(x0)), Variable(np.array(y0))
    (x**2 * y**3).backward(create_graph=True)
    gx = x.grad
    x.cleargrad()
    y.cleargrad()
    gx.backward()
    return float(y.grad.data)


print(f"d2f/dydx at (1.5, -0.5) = {mixed_derivative(1.5, -0.5):.6f}   6xy^2 = {6 * 1.5 * 0.25:.6f}")


# %% [markdown]
# **2. Taylor coefficients.** With `derivatives`, compute the first six
# Taylor coefficients $f^{(k)}(0)/k!$ of $\tanh$ at $0$. (They are
# $0, 1, 0, -\tfrac13, 0, \tfrac{2}{15}$.)

# %% tags=["hide-cell"]
def taylor_coefficients(f, n):
    return [d / math.factorial(k) for k, d in enumerate(derivatives(f, 0.0, n - 1))]


print("tanh:", "  ".join(f"{c:+.6f}" for c in taylor_coefficients(tinypytorch.tanh, 6)))
