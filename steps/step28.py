# %% [markdown]
# # Step 28: Newton's method and double backprop
#
# Step 27 made derivatives differentiable. This step puts second derivatives
# to work. Newton's method uses the curvature $f''$ to choose each step, and
# reaches a minimum in a handful of iterations where gradient descent needs
# hundreds or thousands. Then *double backprop*: a loss that contains a
# gradient, differentiated as a whole.

# %%
import matplotlib.pyplot as plt
import numpy as np

from tinypytorch import Variable
from tinypytorch.testfunctions import rosenbrock
from tinypytorch.utils import plot_dot_graph

# %% [markdown]
# ## Newton's method
#
# Near a point $x_k$, Taylor's formula approximates $f$ by a parabola:
#
# $$f(x) \approx f(x_k) + f'(x_k)\,(x - x_k) + \tfrac12 f''(x_k)\,(x - x_k)^2 .$$
#
# If $f''(x_k) > 0$ the parabola opens upwards, and setting its derivative
# $f'(x_k) + f''(x_k)(x - x_k)$ to zero gives its lowest point. Newton's
# method jumps there:
#
# $$x_{k+1} = x_k - \frac{f'(x_k)}{f''(x_k)} .$$
#
# Gradient descent, $x_{k+1} = x_k - \eta\, f'(x_k)$, takes the same
# direction but a step of fixed scale $\eta$, the learning rate, chosen by hand. Newton
# divides by the curvature instead: a long step where $f$ is nearly flat, a
# short one where it bends sharply.
#
# The example is $f(x) = x^4 - 2x^2$, with
# $f'(x) = 4x^3 - 4x = 4x(x - 1)(x + 1)$ and $f''(x) = 12x^2 - 4$. It has
# minima at $x = \pm 1$ (where $f'' = 8$) and a maximum at $x = 0$ (where
# $f'' = -4$). We start at $x = 2$.
#
# Both derivatives come from `backward`, as in step 27: the first with
# `create_graph=True`, so that the second is the gradient of the first.

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
        gx.backward()  # x.grad = f''(x); no graph needed past the second order
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


# %%
newton_x = newton(f, 2.0, 7)
descent_x = gradient_descent(f, 2.0, 300)
print(" k   Newton x_k          e_k = |x_k - 1|   1.5 e_(k-1)^2    descent x_k (lr 0.01)")
for k, x in enumerate(newton_x):
    predicted = f"{1.5 * abs(newton_x[k - 1] - 1) ** 2:13.3e}" if k else " " * 13
    print(f"{k:2d}   {x:.15f}   {abs(x - 1):13.3e}   {predicted}    {descent_x[k]:.15f}")

# %% [markdown]
# Newton's method reaches $x = 1$ to the last bit of a float64 in seven
# iterations. Gradient descent with $\eta = 0.01$ has moved from $2$ to
# $1.28$ in the same time. The third column shows why Newton is so fast:
# near the minimum, the error is squared at every step,
# $e_{k+1} \approx \frac{f'''(1)}{2 f''(1)}\, e_k^2 = \frac{24}{16}\, e_k^2$
# (*quadratic convergence*), so the number of correct digits doubles each
# time. Gradient descent converges *linearly*: near the minimum its error is
# multiplied by $|1 - \eta f''(1)| = 0.92$ per step.

# %%
def iterations_to(iterates, tolerance):
    return next(k for k, x in enumerate(iterates) if abs(x - 1) < tolerance)


for tolerance in (1e-6, 1e-10):
    print(f"|x - 1| < {tolerance:.0e}: Newton after {iterations_to(newton_x, tolerance)} iterations, "
          f"gradient descent after {iterations_to(descent_x, tolerance)}")

figure, ax = plt.subplots(figsize=(6, 3.5))
errors = [(abs(np.array(newton_x) - 1) + 1e-17, "Newton"), (abs(np.array(descent_x) - 1) + 1e-17, "gradient descent")]
for error, label in errors:  # + 1e-17: an error of exactly 0 has no logarithm
    ax.semilogy(error, "o-" if label == "Newton" else "-", label=label)
ax.set_xlabel("iteration k")
ax.set_ylabel("|x_k - 1|")
ax.legend()
plt.show()

# %% [markdown]
# ### Newton looks for $f' = 0$, not for a minimum
#
# Newton's update is a root-finder for $f'$: it stops wherever $f' = 0$,
# minimum or not. Where $f'' < 0$ the parabola opens downwards and the
# "lowest point" is its highest: from $x = 0.4$ ($f''(0.4) = -2.08$) the
# method converges, just as fast, to the *maximum* at $x = 0$.

# %%
print("from x = 0.4:", ", ".join(f"{x:.3e}" for x in newton(f, 0.4, 5)))

# %% [markdown]
# Practical Newton methods therefore check the curvature and fall back on a
# gradient step, or damp the step with a line search. Near
# $x = 1/\sqrt 3 \approx 0.577$, where $f'' = 0$, the step $f'/f''$ is huge.
#
# ## Two variables: the Hessian by double backward
#
# For $f(x_0, x_1, \ldots)$ the second derivative is a matrix, the
# *Hessian* $H_{ij} = \partial^2 f / \partial x_i \partial x_j$, and Newton's
# step solves $H\,\Delta = -\nabla f$. Row $i$ of $H$ is the gradient of
# $g_i = \partial f/\partial x_i$: one more backward pass per row, from each
# component of a gradient computed with `create_graph=True`. The components
# share one graph, so each pass asks to keep it for the next with
# `retain_graph=True`, as PyTorch requires (step 35 shows what a backward
# pass frees otherwise).
#
# Step 26 ran gradient descent on the Rosenbrock function
# $f = 100\,(x_1 - x_0^2)^2 + (1 - x_0)^2$ from $(0, 2)$: 13,974 iterations to
# come within $0.0025$ of the minimum $(1, 1)$. Its Hessian is
#
# $$H = \begin{pmatrix} 1200x_0^2 - 400x_1 + 2 & -400x_0 \\ -400x_0 & 200 \end{pmatrix},$$
#
# $\begin{pmatrix} 802 & -400 \\ -400 & 200 \end{pmatrix}$ at $(1, 1)$:

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


gradient, hessian = gradient_and_hessian(rosenbrock, (1.0, 1.0))
print("Hessian at (1, 1):")
for row in hessian:
    print(" ".join(f"{h:8.1f}" for h in row))

# %% [markdown]
# Newton's method from step 26's starting point:

# %%
point = np.array([0.0, 2.0])
newton_path = [point]
print(f"iteration 0: x = ({point[0]: .6f}, {point[1]: .6f})   f = {rosenbrock(*point):.3e}")
for k in range(1, 7):
    gradient, hessian = gradient_and_hessian(rosenbrock, point)
    point = point - np.linalg.solve(hessian, gradient)
    newton_path.append(point)
    print(f"iteration {k}: x = ({point[0]: .6f}, {point[1]: .6f})   f = {rosenbrock(*point):.3e}")

# %% [markdown]
# Six iterations to $(1, 1)$ exactly, against step 26's 13,974 to come
# within $0.0025$. Two remarks keep this in proportion. On the second
# iteration $f$ *rose* from about $1$ to $100$: a Newton step is not a descent
# step, and only the third lands in the valley. And each iteration costs more: for
# $n$ variables, one backward pass for the gradient and $n$ more for the
# Hessian, plus solving an $n \times n$ system, about $n^3$ operations. For a
# network with millions of parameters the Hessian cannot even be stored. What
# remains affordable is a *Hessian-vector product* $H v$, the gradient of
# $\nabla f \cdot v$: a single extra backward pass, the workhorse of
# second-order methods for large models.
#
# ## Double backprop: a gradient inside a loss
#
# A gradient computed with `create_graph=True` is an ordinary Variable, so it
# can appear in a further computation, and that computation can be
# differentiated. Take
#
# $$y = x^2, \qquad g = \frac{\partial y}{\partial x} = 2x, \qquad z = g^3 + y .$$
#
# $z$ depends on $x$ along two paths: through $y$, by the forward graph, and
# through $g$, by the graph of the backward pass. By the chain rule,
#
# $$\frac{dz}{dx} = 3g^2\,\frac{\partial g}{\partial x} + \frac{\partial y}{\partial x}
#   = 3\,(2x)^2 \cdot 2 + 2x = 24x^2 + 2x,$$
#
# which at $x = 2$ is $24 \cdot 4 + 4 = 100$.

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
# Both paths in one picture. On the right, the forward `Pow` makes $y = x^2$.
# On the left is the recorded backward pass: `Pow.backward` computed
# $g = 2 \cdot x^1 \cdot 1$ (a `Pow` with exponent $1$, then the factor $2$,
# then the seed $1$). At the bottom $z$ cubes $g$ and adds $y$:

# %%
gx.name, y.name, z.name = "g", "y", "z"
plot_dot_graph(z)

# %% [markdown]
# Double backprop has real uses. A gradient penalty adds
# $\lambda \lVert \nabla_x D(x) \rVert^2$ to a loss, to keep a network $D$
# smooth in its input $x$; the idea goes back to Drucker and LeCun's "double
# backpropagation" (1992), and WGAN-GP uses it to train GANs. Meta-learning
# (MAML) differentiates through a gradient step, $\theta - \eta \nabla L(\theta)$.
# In PyTorch each of these is `torch.autograd.grad(..., create_graph=True)`
# inside a loss.
#
# ## Check against PyTorch
#
# The same algorithms in PyTorch, with derivatives from
# `torch.autograd.grad(create_graph=True)` and the Rosenbrock Hessian from
# `torch.autograd.functional.hessian`, must give the same iterates (Newton
# from $x = 2$ and from $x = 0.4$; Newton on Rosenbrock from $(0, 2)$), the
# same gradient and Hessian at every Rosenbrock iterate, and the same
# double-backprop gradient, $100$.

# %%
import torch


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


for x0 in (2.0, 0.4):
    np.testing.assert_allclose(newton(f, x0, 7), torch_newton(f, x0, 7), rtol=1e-12, atol=1e-15)
    print(f"Newton on x**4 - 2x**2 from {x0}: 7 iterates equal torch's")

ours, theirs = np.array([0.0, 2.0]), torch.tensor([0.0, 2.0], dtype=torch.float64)
for k in range(6):
    gradient, hessian = gradient_and_hessian(rosenbrock, ours)
    xt = theirs.clone().requires_grad_()
    (gradient_t,) = torch.autograd.grad(rosenbrock(xt[0], xt[1]), xt)
    hessian_t = torch.autograd.functional.hessian(lambda v: rosenbrock(v[0], v[1]), theirs)
    np.testing.assert_allclose(gradient, gradient_t.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hessian, hessian_t.numpy(), rtol=1e-12, atol=1e-12)
    ours, theirs = ours - np.linalg.solve(hessian, gradient), theirs - torch.linalg.solve(hessian_t, gradient_t)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-15)
print(f"Newton on Rosenbrock: gradients, Hessians and 6 iterates equal torch's; last {ours}")

xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
yt = xt**2
(gt,) = torch.autograd.grad(yt, xt, create_graph=True)
(gt**3 + yt).backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"double backprop: dz/dx = {x.grad:.1f}, torch {xt.grad.item():.1f}")
print("PyTorch check passed: Newton iterates (1-D and Rosenbrock) and the double-backprop gradient 100 equal torch's")
