# %% [markdown]
# # Step 40: gradcheck and gradgradcheck
#
# Step 39's anomaly mode finds the bugs that announce themselves: an error,
# a NaN. A backward that returns wrong numbers of the right shape announces
# nothing: the model trains badly and nothing says why. Step 10 caught such
# bugs by comparing `backward` with a numerical derivative, but only for
# element-wise functions, and only with a seed gradient of ones.
#
# `gradcheck` compares the whole **Jacobian** that `backward` computes with a
# numerical one, element by element; `gradgradcheck` does the same one order
# up, for the second derivatives of step 27. Both have PyTorch's names,
# defaults and messages.

# %%
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import GradcheckError, gradcheck, gradgradcheck
from tinypytorch.autograd.gradcheck import analytical_jacobian, jacobians_agree, numerical_jacobian
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The Jacobian, two ways
#
# For a function with input $x$ ($n$ elements, flattened) and output $y$
# ($m$ elements), the Jacobian is the $m \times n$ matrix
# $J_{ji} = \partial y_j / \partial x_i$. It can be computed two ways:
#
# - **numerically, one column at a time**: move input element $i$ by
#   $\pm\varepsilon$ and take step 04's central difference,
#   $J_{\cdot i} \approx \big(y(x + \varepsilon e_i) - y(x - \varepsilon e_i)\big)/2\varepsilon$:
#   $2n$ forward passes;
# - **by backward, one row at a time**: a backward pass whose incoming
#   gradient is $e_j$ (1 at output element $j$, 0 elsewhere) returns
#   $e_j^\top J$, row $j$: $m$ backward passes.
#
# Here for $y = \tanh(W x)$ with $W$ a fixed $3 \times 4$ matrix:

# %% tags=["hide-input"]
rng = np.random.default_rng(0)
W4 = Variable(rng.standard_normal((3, 4)), name="W", requires_grad=False)
x4 = Variable(0.3 * rng.standard_normal((4, 1)), name="x")


def tanh_Wx(W, x):
    return tinypytorch.tanh(tinypytorch.matmul(W, x))


J = analytical_jacobian(tanh_Wx, (W4, x4))[(1, 0)].T  # stored (input, output): transposed to J[j, i]
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for axis, (kind, index) in zip(axes, (("column", 1), ("row", 2))):
    m, n = J.shape
    for j in range(m):
        for i in range(n):
            lit = (kind == "column" and i == index) or (kind == "row" and j == index)
            axis.add_patch(plt.Rectangle((i, m - 1 - j), 1, 1, facecolor="#f9e79f" if lit else "white",
                                         edgecolor="gray"))
            axis.text(i + 0.5, m - 0.5 - j, f"{J[j, i]:+.2f}", ha="center", va="center", fontsize=9)
    axis.set(xlim=(-1.3, n + 0.2), ylim=(-1.2, m + 0.9), aspect="equal")
    axis.axis("off")
    for i in range(n):
        axis.text(i + 0.5, m + 0.2, f"$x_{i}$", ha="center", fontsize=9)
    for j in range(m):
        axis.text(-0.15, m - 0.5 - j, f"$y_{j}$", ha="right", va="center", fontsize=9)
    if kind == "column":
        axis.annotate(f"$x \\pm \\varepsilon e_{index}$", xy=(index + 0.5, -0.05), xytext=(index + 0.5, -0.9),
                      ha="center", fontsize=9, arrowprops=dict(arrowstyle="-|>"))
        axis.set_title(f"numerical: perturb $x_{index}$ → column {index}\n(2 forward passes per column)",
                       fontsize=10)
    else:
        axis.annotate(f"seed $e_{index}$", xy=(-0.6, m - 0.5 - index), xytext=(-1.3, -0.9), fontsize=9,
                      ha="left", arrowprops=dict(arrowstyle="-|>"))
        axis.set_title(f"backward: seed $e_{index}$ for $y$ → row {index}\n(1 backward pass per row)", fontsize=10)
fig.text(0.5, 0.45, "compared\nelement by\nelement", ha="center", va="center", fontsize=9, style="italic")
fig.suptitle(r"$J_{ji} = \partial y_j / \partial x_i$ of $y = \tanh(Wx)$: both ways fill the same matrix",
             fontsize=10, y=0.98)
fig.tight_layout()
plt.show()

# %% [markdown]
# The package stores each block transposed, one row per input element, the
# layout PyTorch's `gradcheck` prints: `numerical_jacobian` fills row $k$
# from the perturbation of element $k$, `analytical_jacobian` column $k$ from
# the one-hot seed $k$.

# %%
show_code(numerical_jacobian, analytical_jacobian, step=40)

# %% [markdown]
# `gradcheck` then asks that the two agree element by element,
#
# $$|J^{\text{ana}} - J^{\text{num}}| \le \text{atol} + \text{rtol}\,|J^{\text{num}}| ,$$
#
# with PyTorch's defaults $\varepsilon = 10^{-6}$, $\text{atol} = 10^{-5}$,
# $\text{rtol} = 10^{-3}$, for every (input that requires grad, output)
# pair. It also runs backward once with a zero incoming gradient, which must
# give zero: step 10's backward that forgot to multiply by `gy` passes the
# Jacobian test when the output has one element, since the seed is then $1$.
# The cost ($2n$ forward and $m$ backward passes) makes it a tool for small
# test inputs, not for a model's real ones.

# %%
show_code(jacobians_agree, gradcheck, step=40)

# %% [markdown]
# ## Why float64, and why these tolerances
#
# Step 04 worked out the error of a central difference: a truncation part
# $\frac{\varepsilon^2}{6}|f'''|$ and a rounding part about $uR/\varepsilon$,
# with $u$ the unit roundoff and $R$ the size of the values. In float64,
# $u = 2^{-53} \approx 1.1 \times 10^{-16}$: at $\varepsilon = 10^{-6}$ the
# two parts are about $10^{-13}|f'''|$ and $10^{-10} R$, some five orders of
# magnitude inside `atol`, while a wrong backward is usually off by far more.
# In float32, $u = 2^{-24} \approx 6 \times 10^{-8}$: the rounding part
# becomes $0.06\,R$, and $x \pm \varepsilon$ is itself rounded, so the step is
# not even $\varepsilon$. Take $x^3$, built from multiplications (rounded the
# same way on every CPU), at points float32 holds exactly:

# %%
def cube(v):
    return v * v * v


points = np.array([0.5, -1.25, 2.0])
for dtype in (np.float64, np.float32):
    numerical = np.diag(numerical_jacobian(cube, (Variable(points.astype(dtype)),), eps=1e-6)[(0, 0)])
    print(f"{np.dtype(dtype).name}: largest error of the numerical derivative "
          f"{np.abs(numerical - 3 * points**2).max():.0e}")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    passed = gradcheck(cube, Variable(points.astype(np.float32)), raise_exception=False)
print("gradcheck on float32:", passed)
print(textwrap.fill(f"{caught[0].category.__name__}: {caught[0].message}", 100))

# %% [markdown]
# Hence `gradcheck` warns, as PyTorch's does, when an input that requires
# grad is not float64, and the check then fails even for a right backward.
#
# ## The package's functions pass
#
# `gradcheck(fn, inputs)` takes a function of Variables and a Variable or a
# tuple of them; it checks the inputs that require grad and returns `True`
# or raises `GradcheckError`. Below: $\tanh$, a matrix product, and a layer
# $\tanh(X W^\top + b)$ whose input $X$ is data (`requires_grad=False`).

# %%
def layer(X, W, b):
    return tinypytorch.tanh(tinypytorch.linear(X, W, b))


x = Variable(rng.standard_normal(4), name="x")
A, B = Variable(rng.standard_normal((2, 3)), name="A"), Variable(rng.standard_normal((3, 4)), name="B")
X = Variable(rng.standard_normal((5, 3)), name="X", requires_grad=False)
W, b = Variable(rng.standard_normal((2, 3)), name="W"), Variable(rng.standard_normal(2), name="b")
print("gradcheck(tanh, x):          ", gradcheck(tinypytorch.tanh, x))
print("gradcheck(matmul, (A, B)):   ", gradcheck(tinypytorch.matmul, (A, B)))
print("gradcheck(layer, (X, W, b)): ", gradcheck(layer, (X, W, b)))

# %% [markdown]
# ## A wrong backward fails
#
# The classic slip in a linear map $y = W x$: its backward must return
# $W^\top g_y$, and returns $W g_y$. For a square $W$ both have the right
# shape, so no shape check can notice. Below $x$ is a column and $W$ is data.

# %%
class MatVec(Function):
    """y = W x, for a matrix W and a column x; W gets no gradient."""

    def forward(self, W, x):
        self.save_for_backward(W)
        return W @ x

    def backward(self, gy):
        (W,) = self.saved_tensors
        return None, W.T @ gy


class MatVecBuggy(MatVec):
    def backward(self, gy):
        (W,) = self.saved_tensors
        return None, W @ gy  # bug: W instead of W^T


Wc = Variable(np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [4.0, 0.0, 1.0]]), name="W", requires_grad=False)
xc = Variable(rng.standard_normal((3, 1)), name="x")
print("right backward:", gradcheck(lambda W, x: MatVec()(W, x), (Wc, xc)))
try:
    gradcheck(lambda W, x: MatVecBuggy()(W, x), (Wc, xc))
except GradcheckError as error:
    print("GradcheckError:", error)

# %% [markdown]
# In the printed layout (one row per input element) the numerical Jacobian
# is $W^\top$ and the analytical one $W$: the transposition shows at a
# glance. Input 1 is `x`, the second of `(W, x)`. (`GradcheckError` is a
# `RuntimeError`, as in PyTorch; PyTorch numbers only the inputs that
# require grad, so for it `x` is input 0.)
#
# ## `gradgradcheck`: second derivatives
#
# Steps 27 and 28 differentiated gradients: `create_graph=True` records the
# backward pass as a graph of its own, which works only if every `backward`
# on the way computes with Variable operations. A `backward` that computes on
# arrays (`x.data`) returns the right numbers, but as a constant: the graph
# of the gradient is cut there, and every derivative through it is silently
# $0$.
#
# The backward pass with incoming gradient $v$ computes a function of $x$
# and $v$, $g(x, v) = J^\top v$, that is $g_i = \sum_j v_j\, \partial y_j /
# \partial x_i$. `gradgradcheck` runs `gradcheck` on $g$. Its Jacobian holds
# the second derivatives, $\partial g_i / \partial x_k = \sum_j v_j\,
# \partial^2 y_j / \partial x_i \partial x_k$, and $J$ once more
# ($\partial g_i / \partial v_j$); its analytical side is the backward of the
# backward.

# %%
show_code(gradgradcheck, step=40)

# %% [markdown]
# Where does $v$ come from? If you pass none, tinypytorch draws it from a
# standard normal with its own generator, `np.random.default_rng(seed)` with
# `seed=0`, so every call checks with the same $v$. PyTorch seeds nothing: its
# `gradgradcheck` draws $v$ uniformly from $[-1, 1]$ with
# `torch.testing.make_tensor`, from the global generator, so its $v$ changes
# from call to call unless you call `torch.manual_seed` first.
#
# Here is $\sin$ twice, as a user-written function: once with a backward
# written with Variables, once with the same formula on arrays.

# %%
class Sin(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return np.sin(x)

    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy * tinypytorch.cos(x)  # Variables: recorded under create_graph


class SinOnArrays(Sin):
    def backward(self, gy):
        (x,) = self.saved_tensors
        return gy.data * np.cos(x.data)  # the same numbers, as an array: a constant


x3 = Variable(points, name="x")
for function in (Sin, SinOnArrays):
    first = gradcheck(lambda v: function()(v), x3, raise_exception=False)
    second = gradgradcheck(lambda v: function()(v), x3, raise_exception=False)
    print(f"{function.__name__:12} gradcheck: {first}   gradgradcheck: {second}")
try:
    gradgradcheck(lambda v: SinOnArrays()(v), x3)
except GradcheckError as error:
    print("GradcheckError:", str(error).splitlines()[0])

# %% [markdown]
# `SinOnArrays` passes `gradcheck` (its gradient is right) and fails
# `gradgradcheck`: the numerical $\partial g_i / \partial x_i = -v_i \sin x_i$
# is not zero, the analytical one is. When the cut gradient is one term among
# others, nothing raises and a second derivative is silently wrong; that is
# what `gradgradcheck` is for. It checks the backward of the backward against
# the backward, though, not against the true derivative: run `gradcheck`
# first.
#
# ## Check against PyTorch
#
# The functions of this page, written the same way as `torch.autograd.Function`s
# in the hidden cell (`.detach()` for `.data`): our `gradcheck` and
# `gradgradcheck` must give torch's verdicts, on right and wrong backwards.

# %% tags=["hide-input"]
import torch  # noqa: E402


class MatVecTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, W, x):
        ctx.save_for_backward(W)
        return W @ x

    @staticmethod
    def backward(ctx, gy):
        (W,) = ctx.saved_tensors
        return None, W.T @ gy


class MatVecBuggyTorch(MatVecTorch):
    @staticmethod
    def backward(ctx, gy):
        (W,) = ctx.saved_tensors
        return None, W @ gy  # the same bug


class SinTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * torch.cos(x)


class SinDetachedTorch(SinTorch):
    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy.detach() * torch.cos(x.detach())


def layer_torch(X, W, b):
    return torch.tanh(torch.nn.functional.linear(X, W, b))


CASES = {  # name: (ours, torch's, inputs)
    "tanh": (tinypytorch.tanh, torch.tanh, (x,)),
    "matmul": (tinypytorch.matmul, torch.matmul, (A, B)),
    "layer": (layer, layer_torch, (X, W, b)),
    "tanh(W x)": (tanh_Wx, lambda W, x: torch.tanh(W @ x), (W4, x4)),
    "MatVec": (lambda W, x: MatVec()(W, x), MatVecTorch.apply, (Wc, xc)),
    "MatVecBuggy": (lambda W, x: MatVecBuggy()(W, x), MatVecBuggyTorch.apply, (Wc, xc)),
    "Sin": (lambda v: Sin()(v), SinTorch.apply, (x3,)),
    "SinOnArrays": (lambda v: SinOnArrays()(v), SinDetachedTorch.apply, (x3,)),
}


def verdicts(ours, theirs, inputs):
    """(ours, torch's) verdicts of gradcheck, then of gradgradcheck."""
    tensors = tuple(torch.tensor(v.data, requires_grad=v.requires_grad) for v in inputs)
    torch.manual_seed(0)  # torch's gradgradcheck draws its v from the global generator
    return (gradcheck(ours, inputs, raise_exception=False),
            torch.autograd.gradcheck(theirs, tensors, raise_exception=False),
            gradgradcheck(ours, inputs, raise_exception=False),
            torch.autograd.gradgradcheck(theirs, tensors, raise_exception=False))


# %%
print(f"{'':12}{'gradcheck':>13}{'gradgradcheck':>16}\n{'':12}{'ours  torch':>14}{'ours  torch':>14}")
for name, case in CASES.items():
    ours_first, torch_first, ours_second, torch_second = verdicts(*case)
    assert ours_first == torch_first and ours_second == torch_second, name
    print(f"{name:12}{ours_first!s:>7}{torch_first!s:>7}  {ours_second!s:>7}{torch_second!s:>7}")
print("PyTorch check passed: gradcheck and gradgradcheck agree with torch's on right and wrong backwards")

# %% [markdown]
# ## Recap
#
# - `gradcheck` builds the Jacobian twice: numerically, a column per input
#   element ($x \pm \varepsilon e_i$), and by backward, a row per output
#   element (seed $e_j$), and compares them element by element.
# - It passes when $|J^{\text{ana}} - J^{\text{num}}| \le \text{atol} +
#   \text{rtol}\,|J^{\text{num}}|$, with $\varepsilon = 10^{-6}$,
#   $\text{atol} = 10^{-5}$, $\text{rtol} = 10^{-3}$; in float64 the numerical
#   error is far inside, in float32 it is not.
# - A wrong backward of the right shape (here $W$ for $W^\top$) fails, and the
#   message shows both Jacobians.
# - `gradgradcheck` runs `gradcheck` on the backward itself, $g(x, v) =
#   J^\top v$: a backward computed on arrays cuts the graph and fails it.
# - Its $v$ is seeded in tinypytorch (`seed=0`); PyTorch draws it from the
#   global generator.
#
# ## Exercises
#
# **1.** Write `Cube`, $y = x^3$ as a `Function` whose backward is written
# so that double backward works, and `CubeOnArrays`, whose backward computes
# the same numbers on arrays. Check both with `gradcheck` and `gradgradcheck`.
# Then, with $g$ the gradient of $\sum_i x_i^3$ (by `autograd.grad` with
# `create_graph=True`), differentiate $\sum_i g_i + \sum_i x_i^2$: the right
# answer is $6x + 2x = 8x$.

# %% tags=["hide-cell"]
class Cube(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x * x

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x * x * gy  # Variable operations: differentiable again


class CubeOnArrays(Cube):
    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x.data * x.data * gy.data  # arrays: a constant to the second backward


def second_derivative(function, values):
    """d/dx (sum(g) + sum(x^2)), g the gradient of sum(x^3): 6x + 2x = 8x."""
    v = Variable(values, name="x")
    (g,) = autograd.grad(function()(v).sum(), v, create_graph=True)
    (gg,) = autograd.grad(g.sum() + (v * v).sum(), v)
    return gg.data


for function in (Cube, CubeOnArrays):
    checks = [check(lambda v: function()(v), x3, raise_exception=False) for check in (gradcheck, gradgradcheck)]
    print(f"{function.__name__:12} gradcheck: {checks[0]}   gradgradcheck: {checks[1]}   "
          f"d/dx (sum(g) + sum(x^2)) = {second_derivative(function, points)}   (8x = {8 * points})")

# %% [markdown]
# **2.** Write `Norm`, $y = \lVert x \rVert_2$ of a vector, as a `Function`
# with a backward ($g_y\, x / y$) that passes `gradcheck` and
# `gradgradcheck`.

# %% tags=["hide-cell"]
class Norm(Function):
    def forward(self, x):
        y = np.sqrt(np.sum(x * x, keepdims=True)).reshape(())
        self.save_for_backward(x, y)
        return y

    def backward(self, gy):
        x, y = self.saved_tensors
        return gy * x / y  # Variables: the graph of the gradient goes through x and y


def norm(x):
    return Norm()(x)


v = Variable(np.array([3.0, -4.0, 12.0]), name="v")
norm(v).backward()
print(f"|v| = {norm(v).data:.1f}, gradient v / |v| = {np.round(v.grad.data, 4)}")
print("gradcheck:", gradcheck(norm, v), "  gradgradcheck:", gradgradcheck(norm, v))
