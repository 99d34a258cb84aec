# %% [markdown]
# # Step 24: Differentiating optimisation test functions
#
# With operators (steps 20–22) a formula can be typed into Python as it is
# printed on paper, and the package (step 23) differentiates it. This step puts
# that to work on three functions from the optimisation literature, in
# increasing order of difficulty: the sphere, Matyas and Goldstein–Price
# functions.
#
# Optimisation *test functions* are used to benchmark minimisation
# algorithms. Each has a known minimum and a shape chosen to be hard in some
# way: a flat valley, steep walls, several local minima. An optimiser based on
# gradients needs $\nabla f$ at every iterate, and working out the gradient
# of Goldstein–Price by hand is a page of algebra with plenty of room for
# mistakes. Here it costs one call to `backward`.

# %%
import collections

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.testfunctions import goldstein_price, matyas, sphere
from tinypytorch.utils import functions_in_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# The three functions live in the package, in `tinypytorch.testfunctions`,
# because later steps and the benchmarks use them too. Each is shown below
# from the package itself.

# %% [markdown]
# ## Sphere
#
# $$f(x, y) = x^2 + y^2, \qquad \nabla f = (2x,\ 2y).$$
#
# A round bowl with its minimum $f(0, 0) = 0$, the easiest case there is. At
# $(1, 1)$ the gradient is $(2, 2)$.

# %%
show_code(sphere)
x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
z = sphere(x, y)
z.backward()
print(f"sphere(1, 1) = {z.data:.6f}   grad = ({x.grad:.6f}, {y.grad:.6f})")

# %% [markdown]
# ## Matyas
#
# $$f(x, y) = 0.26\,(x^2 + y^2) - 0.48\,xy, \qquad
# \nabla f = (0.52x - 0.48y,\ 0.52y - 0.48x).$$
#
# The minimum is again $f(0, 0) = 0$, but the bowl is squeezed into a long,
# nearly flat valley along the line $y = x$: there the two terms of each
# partial derivative almost cancel, and a gradient step crawls. At $(1, 1)$,
# already in the valley, the gradient is only $(0.04, 0.04)$.

# %%
show_code(matyas)
x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
z = matyas(x, y)
z.backward()
print(f"matyas(1, 1) = {z.data:.6f}   grad = ({x.grad:.6f}, {y.grad:.6f})")
print(f"x.grad to 17 digits: {x.grad:.17g}   0.52 - 0.48 in float64: {0.52 - 0.48:.17g}")

# %% [markdown]
# The second line shows why every value in this tutorial is printed with a
# fixed number of digits: $0.26$ and $0.48$ have no exact binary
# representation, so the gradient is $0.04$ plus a rounding error of about
# $4 \times 10^{-17}$, the same error that `0.52 - 0.48` makes in plain Python.
#
# ### The same function without operators
#
# Before step 20, Matyas had to be spelt out in function calls. The result is
# the same, to the last bit, but few readers would recognise the formula:

# %%
from tinypytorch import add, mul, pow, sub


def matyas_by_calls(x, y):
    return sub(mul(0.26, add(pow(x, 2), pow(y, 2))), mul(0.48, mul(x, y)))


x2, y2 = Variable(np.array(1.0)), Variable(np.array(1.0))
matyas_by_calls(x2, y2).backward()
# compared as floats: from step 27 on, .grad is a Variable
same = float(x2.grad) == float(x.grad) and float(y2.grad) == float(y.grad)
print("same gradient, bit for bit:", same)

# %% [markdown]
# ## Goldstein–Price
#
# $$
# \begin{aligned}
# f(x, y) = {} & \left[1 + (x + y + 1)^2 \left(19 - 14x + 3x^2 - 14y + 6xy + 3y^2\right)\right] \\
# \times & \left[30 + (2x - 3y)^2 \left(18 - 32x + 12x^2 + 48y - 36xy + 27y^2\right)\right]
# \end{aligned}
# $$
#
# A product of two polynomial factors, each of degree 4: a landscape with
# walls rising to about $10^6$ within $[-2, 2]^2$, several local minima, and the
# global minimum $f(0, -1) = 3$. The code is the formula, line for line:

# %%
show_code(goldstein_price)
x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
z = goldstein_price(x, y)
z.backward()
print(f"goldstein_price(1, 1) = {z.data:.6f}   grad = ({x.grad:.6f}, {y.grad:.6f})")

# %% [markdown]
# Is $(-5376, 8064)$ right? At $(1, 1)$ the numbers are small enough to check
# by hand. Write $f = A\,B$ with $A = 1 + u^2 p$, $u = x + y + 1$, $p$ the
# first quadratic, and $B = 30 + v^2 q$, $v = 2x - 3y$, $q$ the second. At
# $(1, 1)$: $u = 3$, $p = 3$, $A = 28$; $v = -1$, $q = 37$, $B = 67$; so
# $f = 28 \cdot 67 = 1876$. By the product and chain rules,
#
# $$
# \begin{aligned}
# \partial_x A &= 2u\,p + u^2 (-14 + 6x + 6y) = 18 - 18 = 0, &
# \partial_y A &= 2u\,p + u^2 (-14 + 6x + 6y) = 0, \\
# \partial_x B &= 4v\,q + v^2 (-32 + 24x - 36y) = -148 - 44 = -192, &
# \partial_y B &= -6v\,q + v^2 (48 - 36x + 54y) = 222 + 66 = 288,
# \end{aligned}
# $$
#
# and $\partial_x f = \partial_x A \cdot B + A \cdot \partial_x B = 28 \cdot (-192) = -5376$,
# $\partial_y f = 28 \cdot 288 = 8064$. The backward pass agrees.
#
# Away from such friendly points there is no easy hand check, but step 10's
# numerical gradient works anywhere. `tinypytorch.utils.numerical_diff(f, x)`
# perturbs each element of `x` by $\pm\varepsilon$ ($\varepsilon = 10^{-4}$)
# and takes central differences, with an error of order $\varepsilon^2$ times
# the third derivative:

# %%
from tinypytorch.utils import numerical_diff

x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
numeric_x = numerical_diff(lambda v: goldstein_price(v, y), x)
numeric_y = numerical_diff(lambda v: goldstein_price(x, v), y)
print(f"numerical grad = ({numeric_x:.6f}, {numeric_y:.6f})")
print(f"relative error = ({abs(numeric_x / -5376 - 1):.1e}, {abs(numeric_y / 8064 - 1):.1e})")

# %% [markdown]
# Close, to about $10^{-8}$, but not exact, while backward's answer is exact
# here: it applies the same derivative rules as the hand computation, to every
# one of the graph's operations. How many operations is that? Walking the
# graph from `z` through the creators, as `backward` does:

# %%
show_code(functions_in_graph)  # in tinypytorch/utils/walking.py: later steps walk graphs too
counts = collections.Counter(type(f).__name__ for f in functions_in_graph(z))
print(f"{sum(counts.values())} functions:", ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))
print("generation of z:", z.generation)

# %% [markdown]
# Thirty-eight functions, nine generations deep, and $x$ and $y$ each feed
# many of them: exactly the kind of graph on which the order of the backward
# pass matters (step 16). Step 25 draws it.
#
# At the global minimum the gradient vanishes, as it must:

# %%
x, y = Variable(np.array(0.0)), Variable(np.array(-1.0))
z = goldstein_price(x, y)
z.backward()
print(f"goldstein_price(0, -1) = {z.data:.6f}   grad = ({x.grad:.6f}, {y.grad:.6f})")

# %% [markdown]
# ## The three landscapes
#
# Nothing in the three functions is specific to 0-d arrays. Called on
# Variables holding $200 \times 200$ grids of $x$ and $y$, the same code
# evaluates each function at every grid point at once; under `no_grad` no
# graph is recorded, since only the values are needed. The arrow at $(1, 1)$
# points along $-\nabla f$, the way a gradient-descent step would go (step 26).
# Goldstein–Price is drawn on a logarithmic scale: its range spans six orders
# of magnitude. Its arrow points away from the global minimum, down towards a
# local one near $(1.2, 0.8)$: a gradient describes only the neighbourhood of
# the point where it is taken.

# %%
grid = np.linspace(-2.0, 2.0, 200)
grid_x, grid_y = np.meshgrid(grid, grid)
figure, axes = plt.subplots(1, 3, figsize=(13, 4))
panels = [(sphere, "sphere", False), (matyas, "Matyas", False), (goldstein_price, "Goldstein–Price", True)]
for ax, (f, title, log) in zip(axes, panels):
    with tinypytorch.no_grad():
        values = f(Variable(grid_x), Variable(grid_y)).data
    ax.contourf(grid_x, grid_y, np.log10(values) if log else values, levels=30, cmap="viridis")
    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
    f(x, y).backward()
    direction = -np.array([x.grad, y.grad]) / np.hypot(x.grad, y.grad)
    ax.annotate("", xy=(1 + 0.6 * direction[0], 1 + 0.6 * direction[1]), xytext=(1, 1),
                arrowprops={"arrowstyle": "->", "color": "white", "lw": 2})
    minimum = (0, -1) if f is goldstein_price else (0, 0)
    ax.plot(*minimum, "r*", markersize=12)
    ax.set_title(title + (" (log$_{10}$)" if log else ""))
    ax.set_xlabel("x")
    ax.set_aspect("equal")
axes[0].set_ylabel("y")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Define-by-run
#
# The graph that `backward` walks was recorded while Python executed
# `goldstein_price`, one operation at a time. This is *define-by-run*, the
# style of PyTorch and of this tutorial: the program *is* the model
# description, so Python's `if`, `for` and function calls work unchanged, and a
# debugger or a `print` sees real values. The alternative, *define-and-run*
# (TensorFlow 1.x, Theano), first builds a symbolic graph in a special
# language, with its own `cond` and `while_loop`, and then runs it. That lets
# a compiler optimise the whole graph before it runs, at the price of writing
# programs in two languages.
#
# ## Check against PyTorch
#
# The same three Python functions, called on float64 tensors, give PyTorch's
# values and gradients: at $(1, 1)$, at the Goldstein–Price minimum, and at
# five seeded random points of $[-2, 2]^2$. The arithmetic is the same up to
# the order of a few additions, so they agree to `rtol=1e-12`.

# %%
import torch

points = [(1.0, 1.0), (0.0, -1.0)] + [tuple(p) for p in np.random.default_rng(0).uniform(-2.0, 2.0, (5, 2))]
for f in (sphere, matyas, goldstein_price):
    for a, b in points:
        x, y = Variable(np.array(a)), Variable(np.array(b))
        z = f(x, y)
        z.backward()
        xt, yt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
        zt = f(xt, yt)
        zt.backward()
        expected = np.array([zt.item(), xt.grad.item(), yt.grad.item()])
        np.testing.assert_allclose([z.data, x.grad, y.grad], expected, rtol=1e-12)
    print(f"{f.__name__:16} value and gradient equal torch at {len(points)} points")

x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
goldstein_price(x, y).backward()
xt, yt = (torch.tensor(1.0, dtype=torch.float64, requires_grad=True) for _ in range(2))
goldstein_price(xt, yt).backward()
np.testing.assert_array_equal([x.grad, y.grad], [xt.grad.item(), yt.grad.item()])
print(f"goldstein_price at (1, 1): grad ({x.grad:.1f}, {y.grad:.1f}),",
      f"torch ({xt.grad.item():.1f}, {yt.grad.item():.1f})")
print("PyTorch check passed: sphere, Matyas, Goldstein–Price values and grads; GP grad (-5376, 8064) at (1, 1)")
