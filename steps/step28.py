# %% [markdown]
# # Step 28: Newton's method and double backprop
#
# Step 27 made derivatives differentiable. This step puts second derivatives
# to work. The idea: **a step that divides by the curvature**. Newton's
# method fits a parabola to $f$ at the current point, using $f'$ and $f''$
# from two backward passes, and jumps to its lowest point; it reaches a
# minimum in a handful of iterations where gradient descent needs hundreds.
# The same machinery differentiates any loss that contains a gradient:
# *double backprop*.

# %%
import matplotlib.pyplot as plt
import numpy as np

from tinypytorch import Variable
from tinypytorch.testfunctions import rosenbrock
from tinypytorch.utils import plot_dot_graph

# %% [markdown]
# ## Newton's method
#
# Near $x_k$, Taylor's formula approximates $f$ by a parabola,
# $f(x) \approx f(x_k) + f'(x_k)(x - x_k) + \tfrac12 f''(x_k)(x - x_k)^2$.
# If $f''(x_k) > 0$ it opens upwards, and its lowest point is
#
# $$x_{k+1} = x_k - \frac{f'(x_k)}{f''(x_k)} .$$
#
# Gradient descent, $x_{k+1} = x_k - \eta f'(x_k)$, goes the same way with a
# step of fixed scale $\eta$; Newton takes a long step where $f$ is flat and a
# short one where it bends sharply. The example is $f(x) = x^4 - 2x^2$, with
# minima at $x = \pm 1$ and a maximum at $0$, from $x = 2$. Both derivatives
# come from `backward`, as in step 27.

# %%
def f(x):
    return x**4 - 2 * x**2


def newton(f, x0, iterations):
    """Newton's method from x0; f' and f'' by backward. Returns the iterates x_0 ... x_n."""
    x = Variable(np.array(x0))
    iterates = [x0]
    for _ in range(iterations):
        x.cleargrad()
        f(x).backward(create_graph=True)
        gx = x.grad  # f'(x), with the graph of its computation
        x.cleargrad()  # step 27: or the next backward adds f'' to f'
        gx.backward()  # x.grad = f''(x)
        x.data = x.data - gx.data / x.grad.data
        iterates.append(float(x.data))
    return iterates


def gradient_descent(f, x0, iterations, lr=0.01):
    x = Variable(np.array(x0))
    iterates = [x0]
    for _ in range(iterations):
        x.cleargrad()
        f(x).backward()
        x.data = x.data - lr * x.grad.data
        iterates.append(float(x.data))
    return iterates


newton_x, descent_x = newton(f, 2.0, 7), gradient_descent(f, 2.0, 300)
print(" k   Newton x_k          |x_k - 1|    descent x_k (lr 0.01)")
for k, x in enumerate(newton_x):
    print(f"{k:2d}   {x:.15f}   {abs(x - 1):9.1e}    {descent_x[k]:.15f}")

# %% tags=["hide-input"]
def iterations_to(iterates, tolerance):
    return next(k for k, x in enumerate(iterates) if abs(x - 1) < tolerance)


fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
grid = np.linspace(0.6, 2.1, 200)
left.plot(grid, f(grid), "k", label="f")
for k, colour in zip(range(3), ("#d62728", "#ff7f0e", "#2ca02c")):
    a = newton_x[k]
    d1, d2 = 4 * a**3 - 4 * a, 12 * a**2 - 4
    left.plot(grid, f(a) + d1 * (grid - a) + d2 / 2 * (grid - a) ** 2, "--", color=colour, lw=1)
    b = newton_x[k + 1]
    bottom = f(a) + d1 * (b - a) + d2 / 2 * (b - a) ** 2
    left.plot([a, b], [f(a), bottom], "o", color=colour, ms=4)
    left.plot([b, b], [bottom, f(b)], ":", color=colour)
    left.annotate("", xy=(newton_x[k + 1], -1.6), xytext=(a, -1.6),
                  arrowprops=dict(arrowstyle="->", color=colour))
left.set(ylim=(-1.8, 8.5), xlabel="x", title="each step jumps to the bottom of a parabola")
right.semilogy(np.abs(np.array(newton_x) - 1) + 1e-17, "o-", label="Newton")  # + 1e-17: log of 0
right.semilogy(np.abs(np.array(descent_x) - 1) + 1e-17, "-", label="gradient descent")
right.set(xlabel="iteration k", ylabel="$|x_k - 1|$", title="error: squared each step vs ×0.92")
right.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Newton reaches $x = 1$ to the last bit in seven iterations; gradient descent
# has moved from $2$ to about $1.28$. Near the minimum Newton's error is
# *squared* at every step, $e_{k+1} \approx \frac{f'''(1)}{2 f''(1)} e_k^2$,
# so the correct digits double; descent's error is multiplied by
# $|1 - \eta f''(1)| = 0.92$. One warning: Newton solves $f' = 0$, minimum or
# not. From $x = 0.4$, where $f'' < 0$, it converges just as fast to the
# *maximum* at $0$; practical methods check the curvature (exercise 2).
#
# ## Two variables: the Hessian by double backward
#
# For several variables the second derivative is the *Hessian*
# $H_{ij} = \partial^2 f/\partial x_i \partial x_j$ and Newton's step solves
# $H\Delta = -\nabla f$. Row $i$ of $H$ is the gradient of
# $g_i = \partial f/\partial x_i$: one more backward pass per row. The rows
# share one graph, so each pass keeps it for the next with
# `retain_graph=True`, as PyTorch requires (step 35).

# %%
def gradient_and_hessian(f, point):
    """The gradient and Hessian of f at `point` (a sequence of numbers), by backward passes."""
    xs = [Variable(np.array(v)) for v in point]
    f(*xs).backward(create_graph=True)
    grads = [x.grad for x in xs]
    hessian = []
    for g in grads:  # row i of the Hessian is the gradient of g_i
        for x in xs:
            x.cleargrad()
        g.backward(retain_graph=True)
        hessian.append([x.grad.item() for x in xs])
    return np.array([g.item() for g in grads]), np.array(hessian)


point = np.array([0.0, 2.0])
newton_path = [point]
for k in range(1, 7):
    gradient, hessian = gradient_and_hessian(rosenbrock, point)
    point = point - np.linalg.solve(hessian, gradient)
    newton_path.append(point)
    print(f"iteration {k}: x = ({point[0]: .6f}, {point[1]: .6f})   f = {rosenbrock(*point):.3e}")

# %% [markdown]
# Six iterations from step 26's start to the Rosenbrock minimum $(1, 1)$
# exactly, against gradient descent's 13,974 to come within $0.0025$. But
# $f$ *rose* on the second iteration (a Newton step is not a descent step),
# and each iteration costs $n$ extra backward passes and an $n \times n$
# solve; for millions of parameters the Hessian cannot even be stored. What
# stays affordable is a Hessian-vector product (exercise 1).
#
# ## Double backprop: a gradient inside a loss
#
# A gradient computed with `create_graph=True` is an ordinary Variable, so it
# can appear in a further computation. Take $y = x^2$, $g = \partial y/\partial x = 2x$,
# $z = g^3 + y$. $z$ depends on $x$ along two paths, through $y$ (the forward
# graph) and through $g$ (the recorded backward pass):
#
# $$\frac{dz}{dx} = 3g^2\,\frac{\partial g}{\partial x} + \frac{\partial y}{\partial x}
#   = 3\,(2x)^2 \cdot 2 + 2x = 24x^2 + 2x = 100 \text{ at } x = 2.$$

# %%
x = Variable(np.array(2.0), name="x")
y = x**2
y.backward(create_graph=True)
gx = x.grad
x.cleargrad()
z = gx**3 + y
z.backward()
print(f"g = dy/dx = {gx:.1f},  z = {z:.1f},  dz/dx = {x.grad:.1f}")

# %% [markdown]
# Both paths in one picture: the forward `Pow` makes $y$; the recorded
# backward pass made $g = 2 \cdot x^1 \cdot 1$; $z$ cubes $g$ and adds $y$.

# %%
gx.name, y.name, z.name = "g", "y", "z"
plot_dot_graph(z)

# %% [markdown]
# A gradient penalty, $\lambda \lVert \nabla_x D(x) \rVert^2$ added to a loss
# to keep a network smooth in its input (Drucker and LeCun's "double
# backpropagation", 1992; WGAN-GP), and meta-learning through a gradient step
# (MAML) are this pattern; in PyTorch, `torch.autograd.grad(...,
# create_graph=True)` inside a loss.
#
# ## Check against PyTorch
#
# The same algorithms with `torch.autograd.grad(create_graph=True)` and
# `torch.autograd.functional.hessian` (collapsed cell) give the same iterates:
# Newton from $x = 2$ and from $x = 0.4$, and Newton on Rosenbrock from
# $(0, 2)$ with the same gradients and Hessians; and the same double-backprop
# gradient, $100$.

# %% tags=["hide-cell"]
import torch  # noqa: E402


def torch_newton(f, x0, iterations):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    iterates = [x0]
    for _ in range(iterations):
        (gx,) = torch.autograd.grad(f(x), x, create_graph=True)
        (gxx,) = torch.autograd.grad(gx, x)
        with torch.no_grad():
            x -= gx / gxx
        iterates.append(x.item())
    return iterates


def torch_rosenbrock_newton(start, iterations):
    """Newton on Rosenbrock in torch: [(point, gradient, Hessian)] per iteration, then the last point."""
    theirs, steps = torch.tensor(start, dtype=torch.float64), []
    for _ in range(iterations):
        xt = theirs.clone().requires_grad_()
        (gradient_t,) = torch.autograd.grad(rosenbrock(xt[0], xt[1]), xt)
        hessian_t = torch.autograd.functional.hessian(lambda v: rosenbrock(v[0], v[1]), theirs)
        steps.append((theirs.numpy(), gradient_t.numpy(), hessian_t.numpy()))
        theirs = theirs - torch.linalg.solve(hessian_t, gradient_t)
    return steps, theirs.numpy()


def torch_double_backprop(x0):
    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    yt = xt**2
    (gt,) = torch.autograd.grad(yt, xt, create_graph=True)
    (gt**3 + yt).backward()
    return xt.grad.item()


# %%
for x0 in (2.0, 0.4):
    np.testing.assert_allclose(newton(f, x0, 7), torch_newton(f, x0, 7), rtol=1e-12, atol=1e-15)
    print(f"Newton on x**4 - 2x**2 from {x0}: 7 iterates equal torch's")
steps, last = torch_rosenbrock_newton([0.0, 2.0], 6)
for ours, (point_t, gradient_t, hessian_t) in zip(newton_path, steps):
    gradient, hessian = gradient_and_hessian(rosenbrock, ours)
    np.testing.assert_allclose(ours, point_t, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(gradient, gradient_t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hessian, hessian_t, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(newton_path[-1], last, rtol=1e-12, atol=1e-15)
print(f"Newton on Rosenbrock: gradients, Hessians and 6 iterates equal torch's; last {newton_path[-1]}")
assert x.grad.item() == torch_double_backprop(2.0) == 100.0
print(f"double backprop: dz/dx = {x.grad:.1f}, torch's too")
print("PyTorch check passed: Newton iterates (1-D, Rosenbrock) and the double-backprop grad equal torch's")

# %% [markdown]
# ## Recap
#
# - Newton's step $-f'/f''$ jumps to the bottom of the local parabola; with
#   $f'$ and $f''$ from two backward passes it converges quadratically.
# - It finds any point where $f' = 0$, maxima included: check the curvature.
# - In $n$ variables, the Hessian's rows are the gradients of the gradient's
#   components: $n$ more passes over a retained graph, and an $n \times n$ solve.
# - A gradient made with `create_graph=True` can sit inside a loss, and the
#   whole is differentiated along both paths: double backprop.
#
# ## Exercises
#
# **1. Hessian-vector product.** Write `hvp(f, point, v)`, $H v$ without
# forming $H$: one backward pass with `create_graph=True` gives $\nabla f$,
# then one more from $\nabla f \cdot v$. Try Rosenbrock at $(1, 1)$ with
# $v = (1, 2)$; $H v = (802 - 800, -400 + 400) = (2, 0)$.

# %% tags=["hide-cell"]
def hvp(f, point, v):
    xs = [Variable(np.array(p)) for p in point]
    f(*xs).backward(create_graph=True)
    grads = [x_.grad for x_ in xs]
    for x_ in xs:
        x_.cleargrad()
    sum(g * vi for g, vi in zip(grads, v)).backward()
    return np.array([x_.grad.item() for x_ in xs])


print("H v at (1, 1), v = (1, 2):", hvp(rosenbrock, (1.0, 1.0), (1.0, 2.0)))


# %% [markdown]
# **2. A safe Newton.** Write `safe_newton(f, x0, iterations, lr=0.1)`: a
# Newton step where $f'' > 0$, a gradient-descent step $-\eta f'$ elsewhere.
# From $x = 0.4$, where plain Newton found the maximum, where does it go?

# %% tags=["hide-cell"]
def safe_newton(f, x0, iterations, lr=0.1):
    x_ = Variable(np.array(x0))
    iterates = [x0]
    for _ in range(iterations):
        x_.cleargrad()
        f(x_).backward(create_graph=True)
        g = x_.grad
        x_.cleargrad()
        g.backward()
        curvature = x_.grad.data
        x_.data = x_.data - (g.data / curvature if curvature > 0 else lr * g.data)
        iterates.append(float(x_.data))
    return iterates


print("from 0.4:", ", ".join(f"{v:.4f}" for v in safe_newton(f, 0.4, 12)))
