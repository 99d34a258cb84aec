# %% [markdown]
# # Step 31: The matrix product, `linear` and indexing
#
# A fully connected layer multiplies a batch of inputs by a weight matrix and
# adds a bias. The idea of this step: **the gradient of a matrix product is
# two more matrix products**, one for each operand, and the shapes alone tell
# which. With it come `linear` (the whole layer as one function) and indexing
# `x[key]`, whose backward scatters the gradient back.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Function, Variable
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The matrix product and its gradients
#
# For $x$ of shape $(N, D)$ and $W$ of shape $(D, H)$, $y = xW$ has shape
# $(N, H)$ and $y_{nh} = \sum_d x_{nd} W_{dh}$. Given $g = \partial L/\partial y$,
# the chain rule sums over every output element an input element touches:
#
# $$
# \frac{\partial L}{\partial x_{nd}} = \sum_h g_{nh} W_{dh} = (g W^\top)_{nd},
# \qquad
# \frac{\partial L}{\partial W_{dh}} = \sum_n x_{nd}\, g_{nh} = (x^\top g)_{dh}.
# $$
#
# The shapes are a memory aid: $\partial L/\partial x$ must have $x$'s shape
# $(N, D)$, and the only product of $g$ $(N, H)$ and $W$ $(D, H)$ with that
# shape is $g W^\top$; likewise $x^\top g$ is the only one with $W$'s shape.

# %% tags=["hide-input"]
from matplotlib.patches import Rectangle  # noqa: E402  (harness: the drawing of this page)


def matrix(ax, x0, rows, cols, label, color, unit=0.33):
    """A matrix drawn as a box of rows x cols cells (unit wide each), its name and shape under it."""
    w, h = cols * unit, rows * unit
    ax.add_patch(Rectangle((x0, 2.2 - h), w, h, facecolor=color, edgecolor="black"))
    ax.text(x0 + w / 2, 2.2 - h / 2, label, ha="center", va="center", fontsize=11)
    ax.text(x0 + w / 2, 2.2 - h - 0.25, f"({rows}, {cols})", ha="center", va="center", fontsize=9)
    return x0 + w


def product(ax, x0, parts, title):
    """Draw `a @ b = c` from (rows, cols, label, colour) triples, starting at x0; return where it ends."""
    (a, b, c) = parts
    end = matrix(ax, x0, *a)
    ax.text(end + 0.3, 1.7, "@", fontsize=14, ha="center", va="center")
    end = matrix(ax, end + 0.6, *b)
    ax.text(end + 0.3, 1.7, "=", fontsize=14, ha="center", va="center")
    end = matrix(ax, end + 0.6, *c)
    ax.text(x0, 2.45, title, fontsize=10, ha="left")
    return end


N, D, H = 4, 3, 5
fig, ax = plt.subplots(figsize=(10, 3))
end = product(ax, 0.0, [(N, D, "x", "#cfe2f3"), (D, H, "W", "#fce5cd"), (N, H, "y", "#d9ead3")],
              "forward: y = x @ W")
end = product(ax, end + 0.9, [(N, H, "g", "#d9ead3"), (H, D, "Wᵀ", "#fce5cd"), (N, D, "gx", "#cfe2f3")],
              "backward: dL/dx = g @ Wᵀ")
product(ax, end + 0.9, [(D, N, "xᵀ", "#cfe2f3"), (N, H, "g", "#d9ead3"), (D, H, "gW", "#fce5cd")],
        "backward: dL/dW = xᵀ @ g")
ax.set(xlim=(-0.1, 18.4), ylim=(0.3, 2.6), aspect="equal")
ax.axis("off")
plt.show()

# %% [markdown]
# Each gradient has its operand's shape and colour. `MatMul.backward` writes
# the two products with `matmul` and `transpose(., -2, -1)` (step 29) on
# Variables, so the backward pass can be differentiated again (step 27).
# `self.saved_tensors` hands back $x$ and $W$ (how a function keeps them is
# step 35's subject). `sum_to` matters only for stacks of matrices: NumPy's
# and PyTorch's `@` broadcast all axes but the last two (step 30), and an
# operand used for every matrix of a stack gets the sum of their gradients.

# %%
show_code(F.MatMul, step=31)

# %%
x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
W = Variable(np.arange(12.0).reshape(3, 4) - 5)
g = np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 1.0, -1.0, 0.0]])  # dL/dy, through L = sum(g * y)
((x @ W) * g).sum().backward()
print("x.grad =", x.grad.data.tolist(), "  g W^T =", (g @ W.data.T).tolist())
print("W.grad == x^T g:", np.array_equal(W.grad.data, x.data.T @ g))

# %% [markdown]
# The forward pass checks the shapes first, so a mismatch names both shapes
# (the collapsed cell shows the messages). As in PyTorch, a vector is a
# matrix of one row on the left of `@` and of one column on the right, and
# that dimension is dropped from the result: `v @ v` is a dot product, `A @ v`
# a vector. `matmul` reshapes around `MatMul`, so the node only meets matrices.

# %% tags=["hide-cell"]
for code, (a, b) in {"(2, 3) @ (2, 3)": (np.ones((2, 3)), np.ones((2, 3))),
                     "(3,) @ (2, 2)": (np.ones(3), np.ones((2, 2)))}.items():
    try:
        Variable(a) @ Variable(b)
    except ValueError as error:
        print(f"{code:16} ValueError: {error}")

# %% [markdown]
# ## `linear`: $y = x W^\top + b$
#
# A layer computes $y = x W^\top + b$ with PyTorch's layout: $W$ of shape
# $(\text{out}, \text{in})$, so weights copy between the two frameworks as
# they are (step 32 does). Written with operators, `x @ W.T + b` records three
# functions; `linear` records one, whose backward gives all three gradients:
# $\partial L/\partial x = gW$, $\partial L/\partial W = g^\top x$, and for the
# bias, broadcast over the rows, the column sums of $g$ (step 30's `sum_to`).

# %%
show_code(F.LinearFunction, step=31)

# %% [markdown]
# ## Indexing: `x[key]`
#
# `x[key]` accepts every key NumPy accepts. Its backward sends each selected
# element's gradient back where it came from, zero elsewhere: a scatter into
# zeros shaped like $x$. The trap is a repeated index: in $x[[0, 0, 1]]$,
# $x_0$ is used twice and must get the sum of two gradients (step 14), but
# NumPy's `gx[key] += gy` writes the same place twice, the second write
# replacing the first. `np.add.at` adds once per occurrence:

# %%
gx = np.zeros(3)
gx[[0, 0, 1]] += np.ones(3)
print("gx[key] += gy          ->", gx.tolist())
gx = np.zeros(3)
np.add.at(gx, [0, 0, 1], np.ones(3))
print("np.add.at(gx, key, gy) ->", gx.tolist())

# %% [markdown]
# The scatter is itself a `Function`, `GetItemGrad`, so the backward pass can
# be differentiated: the gradient of a scatter into `key` is a gather from
# `key`. (`GetItem` saves the key's index arrays, as PyTorch does, step 35.)

# %%
show_code(F.GetItem, F.GetItemGrad, step=31)

# %% [markdown]
# An index that does not exist raises `IndexError` naming the key and the
# shape, as NumPy and PyTorch do (collapsed below); so `for row in x` walks
# the rows of a Variable, since Python's `for` over `__getitem__` stops at the
# first `IndexError`.

# %% tags=["hide-cell"]
x = Variable(np.zeros((3, 2)))
for code, select in [("x[5]", lambda: x[5]), ("x[[0, 5]]", lambda: x[[0, 5]])]:
    try:
        select()
    except IndexError as error:
        print(f"{code:10} IndexError: {error}")
print("rows of x:", [row.shape for row in x])

# %% [markdown]
# ## Check against PyTorch
#
# The matrix product of matrices and of a stack with a matrix, `linear` with
# a broadcast bias, indexing with an int, slices, a repeated list, two lists
# and a mask; and a second derivative through `matmul`: the gradient of
# $\sum (\partial L/\partial W)^2$, $L = \sum \tanh(xW)$, with respect to $x$
# and $W$. Sums run in another order than in PyTorch's kernels, so the
# tolerance is $10^{-12}$. The helper `check` (collapsed) compares values
# and gradients of one expression in both frameworks.

# %% tags=["hide-input"]
import torch  # noqa: E402

rng = np.random.default_rng(1)


def check(f, g, *arrays):
    """f on Variables and g on tensors: equal values, and equal gradients of sum(w * y) for a random w."""
    xs = [Variable(a.copy()) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = f(*xs), g(*ts)
    w = rng.uniform(-1.0, 1.0, y.shape)
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-14)


def second_derivative(m, x, W):
    """The gradients, w.r.t. x and W, of sum((dL/dW)^2) with L = sum(tanh(x @ W)), in framework m."""
    (gW,) = m.autograd.grad(m.tanh(x @ W).sum(), W, create_graph=True)
    return m.autograd.grad((gW * gW).sum(), [x, W])


x, W, b = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 5)), rng.uniform(-1, 1, 5)
keys = {"x[1]": 1, "x[1:3]": slice(1, 3), "x[:, ::2]": (slice(None), slice(None, None, 2)),
        "x[[0, 0, 1]]": [0, 0, 1], "x[[2, 0], [1, 1]]": ([2, 0], [1, 1]), "x[mask]": x > 0}

# %%
check(lambda x, W: x @ W, lambda x, W: x @ W, x, W)
check(lambda x, W: x @ W, lambda x, W: x @ W, rng.uniform(-1, 1, (6, 4, 3)), W)
check(F.linear, torch.nn.functional.linear, x, W.T.copy(), b)
for key in keys.values():
    check(lambda v: v[key], lambda t: t[torch.as_tensor(key) if isinstance(key, np.ndarray) else key], x)
ours = second_derivative(tinypytorch, Variable(x), Variable(W))
theirs = second_derivative(torch, torch.tensor(x, requires_grad=True), torch.tensor(W, requires_grad=True))
for a, t in zip(ours, theirs, strict=True):
    np.testing.assert_allclose(a.data, t.numpy(), rtol=1e-12)
print("PyTorch check passed: grads of matmul, linear, indexing, 2nd derivative through matmul equal torch")

# %% [markdown]
# ## Recap
#
# - $y = xW$ has gradients $g W^\top$ for $x$ and $x^\top g$ for $W$: two
#   more matrix products, picked by the shapes.
# - A stack of matrices broadcasts its batch axes, and an operand shared by
#   the stack gets the sum of the gradients (`sum_to`).
# - `linear(x, W, b)` is $xW^\top + b$ as one function, with PyTorch's
#   $(\text{out}, \text{in})$ weight layout.
# - Indexing scatters the gradient back with `np.add.at`, so a repeated
#   index gets the sum of its gradients.
#
# ## Exercises
#
# **1. (Backprop ninja.)** Write the backward of the matrix product yourself:
# a `Function` `MyMatMul` for two matrices whose `backward` returns
# $\partial L/\partial x$ and $\partial L/\partial W$ from `gy` and the two
# input arrays, which its `forward` keeps (use `matmul` and `.T`), without
# looking at `MatMul`. Compare its gradients with PyTorch's.

# %% tags=["hide-cell"]
class MyMatMul(Function):
    def forward(self, x, W):
        self.inputs_kept = (x, W)  # arrays: enough for this backward
        return x @ W

    def backward(self, gy):
        x, W = (Variable(a, requires_grad=False) for a in self.inputs_kept)
        return F.matmul(gy, W.T), F.matmul(x.T, gy)  # (N, H) @ (H, D) and (D, N) @ (N, H)


x0, W0, g0 = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 2)), rng.uniform(-1, 1, (4, 2))
xv, Wv = Variable(x0), Variable(W0)
(MyMatMul()(xv, Wv) * g0).sum().backward()
xt, Wt = torch.tensor(x0, requires_grad=True), torch.tensor(W0, requires_grad=True)
((xt @ Wt) * torch.tensor(g0)).sum().backward()
print("x.grad equals torch's:", np.allclose(xv.grad.data, xt.grad.numpy(), rtol=1e-12, atol=0))
print("W.grad equals torch's:", np.allclose(Wv.grad.data, Wt.grad.numpy(), rtol=1e-12, atol=0))

# %% [markdown]
# **2.** An embedding layer picks rows of a table: $E[\text{ids}]$. Write
# `embedding_grad(ids, g, rows)`, the gradient of the table for
# $L = \sum (E[\text{ids}] \cdot g)$, with a plain Python loop (no
# `np.add.at`), and compare it with `E.grad` for ids with repeats.

# %% tags=["hide-cell"]
def embedding_grad(ids, g, rows):
    grad = np.zeros((rows,) + g.shape[1:])
    for i, row in enumerate(ids):
        grad[row] += g[i]  # one row at a time: a repeated id adds up
    return grad


E = Variable(rng.uniform(-1, 1, (5, 3)))
ids, g1 = [3, 0, 3, 3], rng.uniform(-1, 1, (4, 3))
(E[ids] * g1).sum().backward()
print("E.grad equals the loop's:", np.allclose(E.grad.data, embedding_grad(ids, g1, 5), rtol=1e-15, atol=0))
print("rows of E.grad that are zero:", [r for r in range(5) if not E.grad.data[r].any()])
