# %% [markdown]
# # Step 26: A Taylor-series `sin`, and gradient descent
#
# Two exercises for the framework as it stands. First, a function the package
# does not know, $\sin x$, written as a loop of additions, multiplications and
# powers: it is differentiated with no new backward code, and step 25's
# drawings show its graph growing with every term. Second, the reason
# gradients are computed at all: gradient descent, which walks downhill on the
# Rosenbrock function until it reaches the minimum at $(1, 1)$.

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
# A function that is smooth around a point $a$ can be written as a power
# series in $x - a$, its *Taylor series*:
#
# $$f(x) = \sum_{k=0}^{\infty} \frac{f^{(k)}(a)}{k!}\,(x - a)^k
#        = f(a) + f'(a)(x - a) + \frac{f''(a)}{2!}(x - a)^2 + \cdots$$
#
# At $a = 0$ the derivatives of $\sin$ cycle through $\sin 0 = 0$,
# $\cos 0 = 1$, $-\sin 0 = 0$, $-\cos 0 = -1$, so only the odd powers remain,
# with alternating signs:
#
# $$\sin x = x - \frac{x^3}{3!} + \frac{x^5}{5!} - \cdots
#          = \sum_{i=0}^{\infty} \frac{(-1)^i}{(2i + 1)!}\, x^{2i+1}.$$
#
# A computer sums finitely many terms. `my_sin` stops after the first term
# whose size is below `threshold`; since the terms shrink quickly once
# $2i + 1 > |x|$, the error of the sum is about the size of the next term.
# Every operation is one the package already has (`*` with a number, `**`,
# `+`), so the result is a `Variable` with a graph, ready for `backward`.

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
# Both are right to about six digits. The gradient needed no thought: the
# graph holds powers, products with numbers and sums, and `backward`
# differentiates each. In fact it computes exactly the derivative of the
# polynomial that was summed, term by term,
#
# $$\frac{d}{dx} \sum_{i=0}^{n-1} \frac{(-1)^i}{(2i + 1)!}\, x^{2i+1}
#   = \sum_{i=0}^{n-1} \frac{(-1)^i}{(2i)!}\, x^{2i},$$
#
# which is the Taylor series of $\cos x$ cut after the same number of terms.
# Its first omitted term, $x^{2n}/(2n)!$, is larger than the sine's,
# $x^{2n+1}/(2n+1)!$, so the gradient is always a little less accurate than
# the value.
#
# ## The graph grows with every term
#
# Each term adds a `Pow`, a `Mul` by its coefficient and (after the first) an
# `Add`: $n$ terms make $3n - 1$ functions. A smaller threshold buys accuracy
# with a longer graph, and a longer backward pass. The number of functions
# below is counted in step 25's DOT text, one box per function:

# %%
print(f"{'threshold':>9}  {'terms':>5}  {'functions':>9}  {'|value error|':>13}  {'|grad error|':>12}")
for threshold in (1e-1, 1e-4, 1e-8, 1e-12, 1e-16):
    x = Variable(np.array(np.pi / 4))
    y = my_sin(x, threshold)
    y.backward()
    functions = get_dot_graph(y).count("shape=box")
    terms = (functions + 1) // 3
    value_error, grad_error = abs(y.data - np.sin(np.pi / 4)), abs(x.grad.data - np.cos(np.pi / 4))
    print(f"{threshold:9.0e}  {terms:5d}  {functions:9d}  {value_error:13.1e}  {grad_error:12.1e}")

# %% [markdown]
# With a threshold of $10^{-12}$ the value is exact to the last bit of a
# `float64`, from eight terms and 23 functions. Here is the graph for the
# default threshold, $10^{-4}$: four terms, each a `Pow` of $x$ and a `Mul` by
# its coefficient ($1$, $-1/3! \approx -0.166667$, $1/5! \approx 0.00833333$,
# $-1/7! \approx -0.000198413$), summed by a chain of three `Add`s.

# %%
x = Variable(np.array(np.pi / 4), name="x")
y = my_sin(x)
y.name = "y"
plot_dot_graph(y)

# %% [markdown]
# ### Where the series fails
#
# The series converges for every $x$, but not in floating point. For large
# $|x|$ the terms first grow, to about $e^{|x|}/\sqrt{2\pi|x|}$, before
# factorials win; the sum must then cancel them down to a number between $-1$
# and $1$. Each term carries a rounding error of about
# $\varepsilon = 2^{-52} \approx 2.2 \times 10^{-16}$ of its size, and those
# errors do not cancel. Below the threshold is $10^{-20}$, so truncation plays
# no part: what is left is rounding alone. With $n$ terms whose largest is
# $L$, each term rounded a few times and each of the $n$ additions rounded
# once, the error is at most about $n L \varepsilon$, and of the order of
# $L \varepsilon$ when the roundings do not happen to cancel.

# %%
eps = np.finfo(np.float64).eps
print(f"{'x':>4}  {'terms n':>7}  {'largest term L':>14}  {'L·ε':>7}  {'|my_sin - sin| ≤ n·L·ε':>22}")
for value in (1.0, 10.0, 20.0, 30.0, 40.0):
    y = my_sin(Variable(np.array(value)), threshold=1e-20)
    terms = (get_dot_graph(y).count("shape=box") + 1) // 3
    largest = max(value ** (2 * i + 1) / math.factorial(2 * i + 1) for i in range(terms))
    error = abs(y.data - np.sin(value))
    print(f"{value:4.0f}  {terms:7d}  {largest:14.1e}  {largest * eps:7.0e}  {str(error <= terms * largest * eps):>22}")

# %% [markdown]
# The error grows with the largest term; at $x = 40$, where $L\varepsilon$ is
# about 3, it can exceed the whole range of $\sin$. The table prints the bound
# rather than the error itself, because the error's digits depend on the
# machine: they are the rounding errors of NumPy's power function, whose last
# bit differs between CPUs (NumPy picks a different implementation for
# AVX-512, AVX2 or older processors). On the machines we tried, the error was
# between $0.05\,L\varepsilon$ and $L\varepsilon$ (at $x = 20$, for instance,
# $9.5 \times 10^{-10}$ on one and $2.8 \times 10^{-9}$ on another); the tests
# check that it stays between $0.01\,L\varepsilon$ and $n L\varepsilon$ for every
# $x$ of the table but the first, where the sum happens to be exact.
#
# This is why a maths library never sums the series for large arguments. It
# first reduces $x$ to $r = x - k\pi/2$ with $|r| \le \pi/4$, which takes care
# of its own (the subtraction needs $\pi$ to more digits than a `float64`
# holds), and then evaluates a short polynomial in $r$ whose coefficients are
# tuned for that interval.
#
# ## The exact `sin` of the package
#
# So the package does not build `sin` from the series. `tinypytorch.sin` is a
# `Function` whose `forward` calls the array library's `sin`, and whose
# `backward` uses the exact derivative, $\frac{d}{dx}\sin x = \cos x$, itself
# a `Function` of the package:

# %%
show_code(tinypytorch.functions.Sin)
show_code(tinypytorch.functions.Cos)
show_code(tinypytorch.functions.sin)

# %%
x = Variable(np.array(np.pi / 4), name="x")
y = tinypytorch.sin(x)
y.backward()
print(f"sin(pi/4) = {y.data:.17f}   x.grad = {x.grad:.17f}   cos(pi/4) = {np.cos(np.pi / 4):.17f}")
print("functions in the graph:", get_dot_graph(y).count("shape=box"))

# %% [markdown]
# One function instead of eleven, exact to the last bit, and for any $x$.
# A framework needs hand-written backward methods for a core set of
# functions; everything else can be composed from them, as `my_sin` was.
#
# ## Gradient descent on the Rosenbrock function
#
# $$f(x_0, x_1) = 100\,(x_1 - x_0^2)^2 + (1 - x_0)^2$$
#
# has its minimum $f(1, 1) = 0$ at the bottom of a long, curved, almost flat
# valley along the parabola $x_1 = x_0^2$, whose walls are steep: the factor
# 100 makes them so. It is a standard test of optimisers because walking
# along the valley floor is hard.
#
# *Gradient descent* repeats one step: the gradient $\nabla f$ points the way
# $f$ rises fastest, so move a little the other way,
#
# $$\mathbf{x} \leftarrow \mathbf{x} - \eta\,\nabla f(\mathbf{x}),$$
#
# with a *learning rate* $\eta$. Each iteration builds the graph of $f$ anew,
# clears the old gradients (`cleargrad`, step 13; otherwise they would
# accumulate, step 14), runs `backward`, and updates `.data` directly: the
# update itself is not part of any function we want to differentiate. We start
# at $(0, 2)$ with $\eta = 0.001$ and stop when $|\nabla f| < 10^{-3}$.
# The function itself is in the package, next to step 24's:

# %%
show_code(rosenbrock)


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
for i in (0, 1, 2, 10, 100, 1000, 5000, 10000, len(path) - 1):
    print(f"iteration {i:6d}: x = ({path[i, 0]:.6f}, {path[i, 1]:.6f})   f = {rosenbrock(*path[i]):.3e}")
distance = math.hypot(path[-1, 0] - 1, path[-1, 1] - 1)
print(f"stopped after {len(path) - 1} iterations, {distance:.6f} from (1, 1)")

# %% [markdown]
# The first step is large: at $(0, 2)$ the gradient is $(-2, 400)$, so $x_1$
# drops by $0.4$ at once, straight down the wall. After a hundred iterations
# the point is on the valley floor, $x_1 \approx x_0^2$, and $f$ has fallen from
# 401 to 0.59; the remaining thousands of iterations crawl along the floor
# towards $(1, 1)$. The picture shows it:

# %%
grid0, grid1 = np.meshgrid(np.linspace(-1.0, 1.6, 300), np.linspace(-0.4, 2.2, 300))
figure, ax = plt.subplots(figsize=(6, 5.5))
log_f = np.log10(rosenbrock(grid0, grid1) + 1e-3)  # + 1e-3: f = 0 at the minimum
contours = ax.contourf(grid0, grid1, log_f, levels=30, cmap="viridis")
figure.colorbar(contours, label="log$_{10}$ f")
ax.plot(path[:, 0], path[:, 1], color="orange", lw=1.5, label="gradient descent")
ax.plot(path[::1000, 0], path[::1000, 1], "o", color="orange", ms=4, label="every 1000th iterate")
ax.plot(0.0, 2.0, "wo", ms=7, label="start (0, 2)")
ax.plot(1.0, 1.0, "r*", ms=14, label="minimum (1, 1)")
ax.set_xlabel("$x_0$")
ax.set_ylabel("$x_1$")
ax.legend(loc="lower right", fontsize=8)
plt.show()

# %% [markdown]
# ### Why so many iterations
#
# Near the minimum $f$ is close to a quadratic, $f \approx \frac12 \mathbf{d}^\top H \mathbf{d}$
# with $\mathbf{d} = \mathbf{x} - (1, 1)$ and the Hessian (the matrix of
# second derivatives)
#
# $$H = \begin{pmatrix} 1200x_0^2 - 400x_1 + 2 & -400x_0 \\ -400x_0 & 200 \end{pmatrix}
#     = \begin{pmatrix} 802 & -400 \\ -400 & 200 \end{pmatrix} \text{ at } (1, 1).$$
#
# A step multiplies the component of $\mathbf{d}$ along an eigenvector of $H$
# with eigenvalue $\lambda$ by $1 - \eta\lambda$. Steep and flat directions pull
# in opposite ways. Along the steep one ($\lambda_{\max} \approx 1002$) the
# factor must stay above $-1$, so $\eta < 2/\lambda_{\max} \approx 0.002$, or
# the iterates bounce off the walls and diverge. Along the valley floor
# ($\lambda_{\min} \approx 0.4$) the factor is then $1 - 0.001 \cdot 0.4 = 0.9996$:
# the distance shrinks by a factor $e$ only every 2,500 iterations. The ratio
# $\lambda_{\max}/\lambda_{\min} \approx 2500$, the *condition number*, is what
# makes the problem hard. The stopping rule has a meaning too: on the valley
# floor $|\nabla f| \approx \lambda_{\min}\,|\mathbf{d}|$, so
# $|\nabla f| < 10^{-3}$ puts the point within about
# $10^{-3}/\lambda_{\min} \approx 0.0025$ of the minimum.

# %%
hessian = np.array([[802.0, -400.0], [-400.0, 200.0]])
low, high = np.linalg.eigvalsh(hessian)
print(f"eigenvalues of H at (1, 1): {low:.4f} and {high:.4f}, condition number {high / low:.0f}")
print(f"largest stable learning rate 2/lambda_max = {2 / high:.6f}")
print(f"distance predicted by |grad| < 1e-3: {1e-3 / low:.6f}; reached: {distance:.6f}")

# %% [markdown]
# Second derivatives are what a better method would use. Newton's method
# steps by $-H^{-1}\nabla f$, dividing by the curvature instead of fighting
# it; from $(0, 2)$ it lands on $(1, 1)$ in five steps. To get second
# derivatives from the framework, the backward pass itself must become
# differentiable: that is step 27.
#
# ## Check against PyTorch
#
# - `my_sin` at seven points of $[-3, 3]$ (one array) and at
#   thresholds $10^{-4}$ and $10^{-12}$: the same Python function, called on a
#   float64 tensor, gives PyTorch's value and gradient, and the package's
#   exact `sin` matches `torch.sin`.
# - Gradient descent: the same loop written in PyTorch (`torch.no_grad()`
#   for the update, `grad = None` to clear) gives the same first 1,000
#   iterates, and ours stopped within 0.003 of $(1, 1)$: the distance the
#   stopping rule predicts, 0.0025, with a little room.

# %%
import torch

points = np.linspace(-3.0, 3.0, 7)
for threshold in (1e-4, 1e-12):
    x = Variable(points.copy())
    y = my_sin(x, threshold)
    y.backward(np.ones_like(y.data))
    xt = torch.tensor(points, requires_grad=True)
    yt = my_sin(xt, threshold)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    print(f"my_sin, threshold {threshold:.0e}: values and grads at x = -3 ... 3 equal torch's (max |grad - cos| "
          f"{np.abs(x.grad.data - np.cos(points)).max():.1e})")

x, xt = Variable(points.copy()), torch.tensor(points, requires_grad=True)
y, yt = tinypytorch.sin(x), torch.sin(xt)
y.backward(np.ones_like(y.data))
yt.backward(torch.ones_like(yt))
np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print("tinypytorch.sin: values and grads equal torch.sin's")

x0t, x1t = (torch.tensor(value, dtype=torch.float64, requires_grad=True) for value in (0.0, 2.0))
torch_path = [(0.0, 2.0)]
for _ in range(1000):
    rosenbrock(x0t, x1t).backward()
    with torch.no_grad():
        x0t -= 0.001 * x0t.grad
        x1t -= 0.001 * x1t.grad
    x0t.grad = x1t.grad = None
    torch_path.append((x0t.item(), x1t.item()))
np.testing.assert_allclose(path[:1001], torch_path, rtol=1e-12)
print(f"gradient descent: iterates 0-1000 equal torch's; iterate 1000 = ({path[1000, 0]:.6f}, {path[1000, 1]:.6f})")
distance = math.hypot(path[-1, 0] - 1, path[-1, 1] - 1)
assert distance < 0.003, distance
print(f"gradient descent stopped {distance:.6f} from (1, 1), within 0.003, after {len(path) - 1} iterations")
print("PyTorch check passed: Taylor and exact sin grads; Rosenbrock descent iterates, reaching (1, 1) within 0.003")
