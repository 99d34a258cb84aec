# %% [markdown]
# # Step 26: Using gradients: a Taylor-series `sin`, and gradient descent
#
# The framework can now differentiate any formula built from its functions.
# This step puts that to work twice. First a function the package does not
# know, $\sin x$, written as a loop of additions, multiplications and powers:
# **it is differentiated with no new backward code**, because its graph is
# made of functions that have one. Second, the reason gradients are computed
# at all: **gradient descent**, which walks downhill on the Rosenbrock
# function to its minimum at $(1, 1)$.

# %%
import itertools
import math

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.testfunctions import rosenbrock
from tinypytorch.utils import get_dot_graph, plot_dot_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## `sin` from its Taylor series
#
# Around $0$ the derivatives of $\sin$ cycle through $0, 1, 0, -1$, so its
# Taylor series keeps only the odd powers, with alternating signs:
#
# $$\sin x = x - \frac{x^3}{3!} + \frac{x^5}{5!} - \cdots
#          = \sum_{i=0}^{\infty} \frac{(-1)^i}{(2i + 1)!}\, x^{2i+1}.$$
#
# `my_sin` sums terms until one is smaller than `threshold`. Every operation
# is one the package has (`*` by a number, `**`, `+`), so the result is a
# `Variable` with a graph, ready for `backward`.

# %%
def my_sin(x, threshold=1e-4):
    """sin(x) by its Taylor series at 0, summed up to the first term smaller than `threshold`."""
    y = None
    for i in itertools.count():
        term = (-1) ** i / math.factorial(2 * i + 1) * x ** (2 * i + 1)
        y = term if y is None else y + term
        if float(abs(term.data).max()) < threshold:  # max: x may be an array
            return y


x = Variable(np.array(np.pi / 4), name="x")
y = my_sin(x)
y.backward()
print(f"my_sin(pi/4) = {y.data:.12f}   sin(pi/4) = {np.sin(np.pi / 4):.12f}")
print(f"x.grad       = {x.grad:.12f}   cos(pi/4) = {np.cos(np.pi / 4):.12f}")

# %% [markdown]
# Both are right to about six digits, and the gradient took no thought:
# `backward` differentiates each power, product and sum of the graph. It
# computes exactly the derivative of the polynomial that was summed,
# $\sum_{i<n} (-1)^i x^{2i}/(2i)!$, which is the series of $\cos x$ cut after
# the same $n$ terms; so the gradient is a little less accurate than the value.
# Four terms, each a `Pow` and a `Mul` by its coefficient, joined by three
# `Add`s:

# %%
y.name = "y"
plot_dot_graph(y)

# %% tags=["hide-input"]
grid = np.linspace(-4, 4, 200)
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
for n, colour in zip((1, 2, 3, 4), ("#c6dbef", "#6baed6", "#2171b5", "#08306b")):
    g = Variable(grid.copy())
    partial = sum((-1) ** i / math.factorial(2 * i + 1) * g ** (2 * i + 1) for i in range(n))
    partial.backward(np.ones_like(grid))
    left.plot(grid, partial.data, color=colour, label=f"{n} term{'s' * (n > 1)}")
    right.plot(grid, g.grad.data, color=colour)
left.plot(grid, np.sin(grid), "k--", label="sin")
right.plot(grid, np.cos(grid), "k--", label="cos")
for axis, title in ((left, "partial sums of the series"), (right, "their gradients, from backward")):
    axis.set(ylim=(-2, 2), title=title, xlabel="x")
# one legend for both panels (their colours agree), beside them: the curves fill every corner
fig.legend(handles=left.get_lines() + right.get_lines()[-1:], fontsize=8, loc="center right")
fig.tight_layout(rect=(0, 0, 0.86, 1))
plt.show()

# %% [markdown]
# Each extra term makes the polynomial, and the gradient `backward` finds for
# it, follow $\sin$ and $\cos$ further from $0$. More terms buy accuracy with
# a longer graph; for large $|x|$ the terms grow huge before they cancel and
# rounding spoils the sum (the collapsed cell measures both). That is why the
# package's `sin` is a `Function` of its own, whose backward is the exact
# derivative, $\cos x$:

# %% tags=["hide-cell"]
print(f"{'threshold':>9}  {'functions':>9}  {'|value error|':>13}  {'|grad error|':>12}")
for threshold in (1e-1, 1e-4, 1e-8, 1e-12, 1e-16):
    x = Variable(np.array(np.pi / 4))
    y = my_sin(x, threshold)
    y.backward()
    value_error, grad_error = abs(y.data - np.sin(np.pi / 4)), abs(x.grad.data - np.cos(np.pi / 4))
    print(f"{threshold:9.0e}  {get_dot_graph(y).count('shape=box'):9d}  {value_error:13.1e}  {grad_error:12.1e}")
eps = np.finfo(np.float64).eps
print("\nrounding for large x (threshold 1e-20): the error stays below n·L·ε, L the largest of n terms")
for value in (10.0, 20.0, 30.0, 40.0):
    y = my_sin(Variable(np.array(value)), threshold=1e-20)
    terms = (get_dot_graph(y).count("shape=box") + 1) // 3
    largest = max(value ** (2 * i + 1) / math.factorial(2 * i + 1) for i in range(terms))
    print(f"x = {value:2.0f}: n = {terms}, L = {largest:.1e}, L·ε = {largest * eps:.0e}, "
          f"|my_sin - sin| ≤ n·L·ε: {abs(y.data - np.sin(value)) <= terms * largest * eps}")

# %%
show_code(tinypytorch.functions.Sin, tinypytorch.functions.Cos, step=26)

# %% [markdown]
# (`save_for_backward` and `saved_tensors`, which keep $x$ for `backward`,
# arrive in step 35; until then a function kept its inputs.)
#
# ## Gradient descent on the Rosenbrock function
#
# $$f(x_0, x_1) = 100\,(x_1 - x_0^2)^2 + (1 - x_0)^2$$
#
# has its minimum $f(1, 1) = 0$ at the bottom of a long, curved, almost flat
# valley with steep walls. The gradient $\nabla f$ points the way $f$ rises
# fastest, so *gradient descent* repeats a small step the other way,
# $\mathbf{x} \leftarrow \mathbf{x} - \eta\,\nabla f(\mathbf{x})$, with a
# *learning rate* $\eta$. Each iteration builds the graph anew, clears the old
# gradients (`cleargrad`; they would accumulate, step 14), runs `backward`,
# and updates `.data` directly: the update is not part of anything we
# differentiate.

# %%
show_code(rosenbrock, step=26)


def gradient_descent(start, lr=0.001, tolerance=1e-3, max_iterations=50_000):
    """Iterates of gradient descent on rosenbrock from `start`, until |grad| < tolerance."""
    x0, x1 = (Variable(np.array(value)) for value in start)
    path = [start]
    for _ in range(max_iterations):
        x0.cleargrad()
        x1.cleargrad()
        rosenbrock(x0, x1).backward()
        if math.hypot(x0.grad.data, x1.grad.data) < tolerance:
            break
        x0.data = x0.data - lr * x0.grad.data
        x1.data = x1.data - lr * x1.grad.data
        path.append((x0.data.item(), x1.data.item()))
    return np.array(path)


path = gradient_descent((0.0, 2.0))
for i in (0, 1, 100, 1000, 10000, len(path) - 1):
    print(f"iteration {i:5d}: x = ({path[i, 0]:.6f}, {path[i, 1]:.6f})   f = {rosenbrock(*path[i]):.3e}")

# %% tags=["hide-input"]
grid0, grid1 = np.meshgrid(np.linspace(-1.0, 1.6, 300), np.linspace(-0.4, 2.2, 300))
fig, ax = plt.subplots(figsize=(8, 3.5))
contours = ax.contourf(grid0, grid1, np.log10(rosenbrock(grid0, grid1) + 1e-3), levels=30, cmap="viridis")
fig.colorbar(contours, label="log$_{10}$ f")
ax.plot(path[:, 0], path[:, 1], color="orange", lw=1.5, label="gradient descent")
ax.plot(path[::1000, 0], path[::1000, 1], "o", color="orange", ms=4, label="every 1000th iterate")
ax.plot(0.0, 2.0, "wo", ms=7, label="start (0, 2)")
ax.plot(1.0, 1.0, "r*", ms=14, label="minimum (1, 1)")
ax.set(xlabel="$x_0$", ylabel="$x_1$", title="down the wall in a few steps, then thousands along the valley floor")
ax.legend(loc="lower right", fontsize=7)
plt.show()

# %% [markdown]
# The first step drops straight down the wall: at $(0, 2)$ the gradient is
# $(-2, 400)$. After a hundred iterations the point is on the valley floor,
# and the thousands after that crawl along it. Why so slowly? Near the
# minimum the curvature (the Hessian, the matrix of second derivatives) is
# about 2,500 times larger across the valley than along it. The learning rate
# must stay below $2/\lambda_{\max}$ or the iterates bounce off the walls;
# along the floor each step then shrinks the distance by only
# $1 - \eta\lambda_{\min} \approx 0.9996$.

# %%
hessian = np.array([[802.0, -400.0], [-400.0, 200.0]])  # at (1, 1), worked out by hand
low, high = np.linalg.eigvalsh(hessian)
print(f"eigenvalues {low:.4f} and {high:.4f}: condition number {high / low:.0f}")
print(f"largest stable learning rate: {2 / high:.6f}")

# %% [markdown]
# Newton's method divides by the curvature instead of fighting it. For that
# the framework must give second derivatives: the backward pass itself must
# become differentiable, which is step 27.
#
# ## Check against PyTorch
#
# The same `my_sin`, called on a float64 tensor at seven points of $[-3, 3]$,
# gives PyTorch's values and gradients; the package's `sin` matches
# `torch.sin`; and the same descent loop in PyTorch (`torch.no_grad()` for the
# update) gives our first 1,000 iterates, while ours stopped within $0.003$ of
# $(1, 1)$, about the $10^{-3}/\lambda_{\min}$ the stopping rule allows.

# %% tags=["hide-cell"]
import torch  # noqa: E402


def torch_descent(start, lr, iterations):
    """The same loop in PyTorch: its iterates."""
    x0, x1 = (torch.tensor(value, dtype=torch.float64, requires_grad=True) for value in start)
    iterates = [start]
    for _ in range(iterations):
        rosenbrock(x0, x1).backward()
        with torch.no_grad():
            x0 -= lr * x0.grad
            x1 -= lr * x1.grad
        x0.grad = x1.grad = None
        iterates.append((x0.item(), x1.item()))
    return np.array(iterates)


# %%
points = np.linspace(-3.0, 3.0, 7)
for name, f, f_t in (("my_sin", my_sin, my_sin), ("tinypytorch.sin", tinypytorch.sin, torch.sin)):
    x, xt = Variable(points.copy()), torch.tensor(points, requires_grad=True)
    y, yt = f(x), f_t(xt)
    y.backward(np.ones_like(y.data))
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12)
    print(f"{name}: values and grads at -3 ... 3 equal torch's")
np.testing.assert_allclose(path[:1001], torch_descent((0.0, 2.0), 0.001, 1000), rtol=1e-12)
distance = math.hypot(path[-1, 0] - 1, path[-1, 1] - 1)
assert distance < 0.003, distance
print(f"descent: iterates 0-1000 equal torch's; stopped {distance:.6f} from (1, 1) after {len(path) - 1}")
print("PyTorch check passed: Taylor and exact sin grads; descent iterates, reaching (1, 1) within 0.003")

# %% [markdown]
# ## Recap
#
# - A function composed of the package's functions is differentiable with no
#   new code: `backward` differentiates each piece of its graph.
# - The gradient of a truncated series is the derivative of that polynomial,
#   not of the function it approximates; an exact `Function` with its own
#   backward is shorter, exact and works for every $x$.
# - Gradient descent: rebuild the graph, clear the gradients, `backward`,
#   step `.data` against the gradient.
# - A badly conditioned valley makes it slow: the learning rate is bounded by
#   the steepest curvature, progress by the flattest.
#
# ## Exercises
#
# **1. `exp` from its series.** Write `my_exp(x, threshold=1e-12)`, the sum of
# $x^k/k!$ until a term is below the threshold. Its gradient should be close to
# its value, since $\frac{d}{dx}e^x = e^x$.

# %% tags=["hide-cell"]
def my_exp(x, threshold=1e-12):
    y = None
    for k in itertools.count():
        term = 1 / math.factorial(k) * x**k
        y = term if y is None else y + term
        if float(abs(term.data).max()) < threshold:
            return y


x = Variable(np.array([-1.0, 0.5, 2.0]))
y = my_exp(x)
y.backward(np.ones(3))
print("my_exp:", np.round(y.data, 6), "grad:", np.round(x.grad.data, 6))


# %% [markdown]
# **2. Momentum.** Gradient descent with momentum keeps a velocity $v$ per
# coordinate: $v \leftarrow \mu v + \nabla f$, then
# $\mathbf{x} \leftarrow \mathbf{x} - \eta v$ (PyTorch's `SGD(momentum=μ)`).
# Write `momentum_descent(start, lr, momentum, iterations)` returning the
# iterates, and compare how far 2,000 iterations from $(0, 2)$ get with
# $\mu = 0.9$ and with plain descent.

# %% tags=["hide-cell"]
def momentum_descent(start, lr=0.001, momentum=0.9, iterations=2000):
    x0, x1 = (Variable(np.array(value)) for value in start)
    v0, v1 = 0.0, 0.0
    iterates = [start]
    for _ in range(iterations):
        x0.cleargrad()
        x1.cleargrad()
        rosenbrock(x0, x1).backward()
        v0, v1 = momentum * v0 + x0.grad.data, momentum * v1 + x1.grad.data
        x0.data, x1.data = x0.data - lr * v0, x1.data - lr * v1
        iterates.append((x0.data.item(), x1.data.item()))
    return np.array(iterates)


fast = momentum_descent((0.0, 2.0))
print(f"after 2000 iterations: momentum {math.dist(fast[-1], (1, 1)):.4f} from (1, 1),",
      f"plain descent {math.dist(path[2000], (1, 1)):.4f}")
