# %% [markdown]
# # Step 24: Differentiating optimisation test functions
#
# With operators (steps 20-22) a formula can be typed into Python as it is
# printed on paper, and the package (step 23) differentiates it. This step
# puts that to work on three functions from the optimisation literature, in
# increasing order of difficulty: the sphere, Matyas and Goldstein-Price.
#
# Optimisation *test functions* benchmark minimisation algorithms. Each has a
# known minimum and a shape chosen to be hard in some way: a flat valley,
# steep walls, several local minima. A gradient-based optimiser needs
# $\nabla f$ at every iterate, and the gradient of Goldstein-Price by hand is
# a page of algebra with plenty of room for mistakes. Here it costs one call
# to `backward`, on the graph that Python recorded while it evaluated the
# formula: *define-by-run*, as in PyTorch.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.testfunctions import goldstein_price, matyas, sphere
from tinypytorch.utils import functions_in_graph, numerical_diff
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The three functions
#
# They live in the package, `tinypytorch.testfunctions`, because later steps
# and the benchmarks use them too. The code is the formula:
#
# - sphere, $x^2 + y^2$: a round bowl, minimum $f(0, 0) = 0$;
# - Matyas, $0.26\,(x^2 + y^2) - 0.48\,xy$: the bowl squeezed into a long,
#   nearly flat valley along $y = x$, minimum $f(0, 0) = 0$;
# - Goldstein-Price: a product of two polynomials of degree 4, walls rising
#   to about $10^6$ within $[-2, 2]^2$, several local minima, and the global
#   minimum $f(0, -1) = 3$.

# %%
show_code(sphere, matyas, goldstein_price, step=24)

# %% [markdown]
# Each is called on 0-d Variables and differentiated with one `backward`:

# %%
for f in (sphere, matyas, goldstein_price):
    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
    z = f(x, y)
    z.backward()
    print(f"{f.__name__:15} at (1, 1) = {z.data:8.2f}   grad = ({x.grad:9.4f}, {y.grad:9.4f})")

# %% [markdown]
# In the valley of Matyas the two terms of each partial derivative nearly
# cancel, $0.52x - 0.48y$: at $(1, 1)$ the gradient is only $(0.04, 0.04)$,
# and a gradient step crawls. (It is $0.04$ plus a rounding error of about
# $4 \times 10^{-17}$, the one `0.52 - 0.48` makes in plain Python, which is
# why values here are printed with few digits.)
#
# ## The landscapes and their gradients
#
# Nothing in the three functions is specific to 0-d arrays: called on
# Variables holding $200 \times 200$ grids, the same code evaluates each
# function at every grid point at once (under `no_grad`: only the values are
# needed). The arrow at $(1, 1)$ points along $-\nabla f$, where a
# gradient-descent step would go (step 26).

# %% tags=["hide-input"]
grid_x, grid_y = np.meshgrid(np.linspace(-2.0, 2.0, 200), np.linspace(-2.0, 2.0, 200))
figure, axes = plt.subplots(1, 3, figsize=(9, 3.3))
panels = [(sphere, "sphere", False, (0, 0)), (matyas, "Matyas", False, (0, 0)),
          (goldstein_price, "Goldstein-Price (log$_{10}$)", True, (0, -1))]
for ax, (f, title, log, minimum) in zip(axes, panels):
    with tinypytorch.no_grad():
        values = f(Variable(grid_x), Variable(grid_y)).data
    ax.contourf(grid_x, grid_y, np.log10(values) if log else values, levels=30, cmap="viridis")
    x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
    f(x, y).backward()
    g = np.array([float(x.grad), float(y.grad)])
    arrow = -0.7 * g / np.hypot(*g)
    ax.annotate("", xy=(1 + arrow[0], 1 + arrow[1]), xytext=(1, 1),
                arrowprops={"arrowstyle": "-|>", "color": "white", "lw": 2})
    ax.plot(1, 1, "wo", markersize=4)
    ax.text(1.0, 1.25, f"-grad: ({-g[0]:.4g}, {-g[1]:.4g})", color="white", fontsize=8, ha="center")
    ax.plot(*minimum, "r*", markersize=12)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("x")
    ax.set_aspect("equal")
axes[0].set_ylabel("y")
figure.suptitle("Contours, the global minimum (red star) and the descent direction at (1, 1)", fontsize=11)
plt.tight_layout()
plt.show()

# %% [markdown]
# Goldstein-Price spans six orders of magnitude, hence the logarithmic scale.
# Its arrow points away from the global minimum, down towards a local one
# near $(1.2, 0.8)$: a gradient describes only the neighbourhood of the point
# where it is taken.
#
# Is $(-5376, 8064)$ right? At $(1, 1)$ the numbers are small enough to check
# by hand. Write $f = A\,B$ with $A = 1 + u^2 p$, $u = x + y + 1$, $p$ the
# first quadratic, and $B = 30 + v^2 q$, $v = 2x - 3y$, $q$ the second. At
# $(1, 1)$: $u = 3$, $p = 3$, $A = 28$; $v = -1$, $q = 37$, $B = 67$; so
# $f = 28 \cdot 67 = 1876$. By the product and chain rules,
#
# $$
# \begin{aligned}
# \partial_x A = \partial_y A &= 2u\,p + u^2 (-14 + 6x + 6y) = 18 - 18 = 0, \\
# \partial_x B &= 4v\,q + v^2 (-32 + 24x - 36y) = -148 - 44 = -192, \\
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
x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
z = goldstein_price(x, y)
z.backward()
numeric_x = numerical_diff(lambda v: goldstein_price(v, y), x)
numeric_y = numerical_diff(lambda v: goldstein_price(x, v), y)
print(f"backward  = ({x.grad:.6f}, {y.grad:.6f})")
print(f"numerical = ({numeric_x:.6f}, {numeric_y:.6f})")
error = max(abs(numeric_x / -5376 - 1), abs(numeric_y / 8064 - 1))
print("relative error of the numerical one < 1e-7:", error < 1e-7)

# %% [markdown]
# Close, but not exact, while backward's answer is exact here: it applies
# the same rules as the hand computation to every operation of the graph,
# and there are many. `functions_in_graph` walks the graph from `z` through
# the creators, as `backward` does:

# %%
names = sorted({type(f).__name__ for f in functions_in_graph(z)})
print(len(functions_in_graph(z)), "functions:", ", ".join(names), "  generation of z:", z.generation)

# %% [markdown]
# Thirty-eight functions, nine generations deep, with $x$ and $y$ feeding many
# of them: the kind of graph on which the order of the backward pass matters
# (step 16). Step 25 draws it.
#
# ## Check against PyTorch
#
# The same three Python functions, called on float64 tensors, give PyTorch's
# values and gradients at $(1, 1)$, at the Goldstein-Price minimum and at five
# seeded random points of $[-2, 2]^2$ (the collapsed cell); the arithmetic is
# the same up to the order of a few additions, so they agree to `rtol=1e-12`.
# At $(1, 1)$ Goldstein-Price's gradient is exactly $(-5376, 8064)$ in both.

# %% tags=["hide-input"]
import torch  # noqa: E402

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

# %%
x, y = Variable(np.array(1.0)), Variable(np.array(1.0))
goldstein_price(x, y).backward()
xt, yt = (torch.tensor(1.0, dtype=torch.float64, requires_grad=True) for _ in range(2))
goldstein_price(xt, yt).backward()
assert [x.grad.item(), y.grad.item()] == [xt.grad.item(), yt.grad.item()] == [-5376.0, 8064.0]
print(f"goldstein_price at (1, 1): grad ({x.grad:.1f}, {y.grad:.1f}), as torch's")
print("PyTorch check passed: sphere, Matyas, Goldstein-Price values and grads; GP grad (-5376, 8064)")

# %% [markdown]
# ## Recap
#
# - A formula typed with operators is a program that records its own graph
#   as it runs (define-by-run); one `backward` gives its gradient.
# - Sphere, Matyas and Goldstein-Price test an optimiser with a round bowl, a
#   flat valley and a rugged landscape with local minima.
# - The backward pass is exact where the hand computation is; a numerical
#   gradient only approximates it, to about $10^{-8}$ here.
# - The same functions run on grids of points, which draws their landscapes.
#
# ## Exercises
#
# 1. Write the Rosenbrock function $f(x, y) = 100\,(y - x^2)^2 + (1 - x)^2$,
#    whose minimum $f(1, 1) = 0$ lies in a curved valley, and compare its
#    gradient at $(0, 2)$ with the one worked out by hand:
#    $\partial_x f = -400x(y - x^2) - 2(1 - x) = -2$,
#    $\partial_y f = 200(y - x^2) = 400$.

# %% tags=["hide-cell"]
def rosenbrock(x, y):
    return 100 * (y - x**2) ** 2 + (1 - x) ** 2


x, y = Variable(np.array(0.0)), Variable(np.array(2.0))
rosenbrock(x, y).backward()
print(f"rosenbrock grad at (0, 2) = ({x.grad:.1f}, {y.grad:.1f})")

# %% [markdown]
# 2. Evaluate the gradient on a whole grid with one `backward`: call Matyas
#    on Variables holding a $5 \times 5$ grid and seed `backward` with ones.
#    Since each point's value depends only on its own $x$ and $y$, `x.grad`
#    holds $\partial f/\partial x$ at every point. Compare it with the
#    formula $0.52x - 0.48y$ and with PyTorch.

# %% tags=["hide-cell"]
gx, gy = np.meshgrid(np.linspace(-2.0, 2.0, 5), np.linspace(-2.0, 2.0, 5))
x, y = Variable(gx), Variable(gy)
matyas(x, y).backward(np.ones_like(gx))
xt, yt = torch.tensor(gx, requires_grad=True), torch.tensor(gy, requires_grad=True)
matyas(xt, yt).sum().backward()
np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12, atol=1e-15)
error = np.max(np.abs(x.grad.data - (0.52 * gx - 0.48 * gy)))
print("largest error against 0.52x - 0.48y < 1e-12:", error < 1e-12)
