# %% [markdown]
# # Step 30: `sum`, broadcasting and `sum_to`
#
# Step 29's functions moved elements: every output element was exactly one
# input element. This step's functions *combine* and *copy* them. `sum` adds
# many elements into one; `broadcast_to` copies one element into many places.
# The idea: **each is the other's backward**. A sum's gradient is copied back
# to every element it added; a copied element's gradient is the sum of its
# copies' gradients. Together they make NumPy's broadcasting in `+ - * /`
# differentiable, which a layer needs as soon as it adds one bias vector to a
# whole batch of rows.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
import tinypytorch.core
import tinypytorch.functions as F
from tinypytorch import Function, Variable
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## `sum`: the gradient is copied back
#
# For $y = \sum_i x_i$, $\partial y/\partial x_i = 1$, so the one number
# $g = \partial L/\partial y$ is *copied* into every position of $x$. Summed
# along an axis, one sum per output element: for $y_j = \sum_i x_{ij}$,
# column $j$ of the gradient is $g_j$ copied down the column. Backward first
# puts the summed axes back as length-1 axes (`reshape`), then copies along
# them (`broadcast_to`). Without the reshape NumPy would line the shorter
# shape up with the *last* axes: for a $3 \times 3$ matrix summed over axis
# 1 that copies $g$ along the wrong axis, a silently wrong gradient.

# %%
show_code(F.Sum, step=30)

# %% [markdown]
# `axis` may be `None` (every axis), an int or a tuple, negative ones counting
# from the end; PyTorch's `dim=`, `keepdim=` are accepted too. With weights
# $w$ on the output, $\partial L/\partial y = w$, and `x.grad` shows where
# each weight was copied:

# %%
x = Variable(np.arange(6.0).reshape(2, 3))
for axis, keepdims in [(None, False), (0, False), (1, True)]:
    x.cleargrad()
    y = x.sum(axis=axis, keepdims=keepdims)
    w = np.arange(1.0, y.numel() + 1).reshape(y.shape)
    (y * w).sum().backward()
    print(f"axis={axis!s:4} keepdims={keepdims!s:5} w = {w.tolist()!s:16} x.grad = {x.grad.data.tolist()}")

# %% [markdown]
# ## `broadcast_to` and `sum_to`: copies summed back
#
# NumPy broadcasts by comparing shapes from the right: lengths that are
# equal or 1 are compatible, a length 1 is *stretched* (its element reused
# along the axis), and missing axes are *prepended*. So $(3,)$ broadcasts to
# $(2, 3)$ and so does $(2, 1)$. Every element of $x$ then appears in several
# places of $y$, and its gradient is the sum over its copies:
# `BroadcastTo.backward` is `sum_to(gy, x.shape)` (PyTorch's
# `Tensor.sum_to_size`), and `SumTo.backward` is `broadcast_to`.

# %% tags=["hide-input"]
def grid(ax, values, origin, title, colours):
    rows, cols = values.shape
    for (r, c), v in np.ndenumerate(values):
        ax.add_patch(plt.Rectangle((origin[0] + c, origin[1] - r), 1, 1, facecolor=colours[r, c], alpha=0.6,
                                   edgecolor="black"))
        ax.text(origin[0] + c + 0.5, origin[1] - r + 0.5, f"{v:g}", ha="center", va="center", fontsize=9)
    ax.text(origin[0] + cols / 2, origin[1] + 1.3, title, ha="center", fontsize=9)


g = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])  # a gradient of shape (2, 3) arriving at x + b
palette = plt.cm.tab10(np.arange(3))
by_column, by_row = palette[[[0, 1, 2], [0, 1, 2]]], palette[[[0, 0, 0], [1, 1, 1]]]
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
for ax, colours, target, title in ((left, by_column, (3,), "b of shape (3,): one row, reused"),
                                   (right, by_row, (2, 1), "b of shape (2, 1): one column, reused")):
    grid(ax, g, (0, 0), "gradient (2, 3)", colours)
    summed = F.sum_to_array(g, target).reshape(-1, 3) if target == (3,) else F.sum_to_array(g, target)
    where = (5, -0.5) if target == (3,) else (5.5, 0)
    grid(ax, summed, where, f"sum_to {target}", colours[:1] if target == (3,) else colours[:, :1])
    ax.annotate("", xy=(where[0] - 0.3, 0.5), xytext=(3.3, 0.5), arrowprops=dict(arrowstyle="-|>", lw=1.4))
    ax.text((3.3 + where[0] - 0.3) / 2, -0.1, "add up\nthe copies", ha="center", va="top", fontsize=8,
            color="#b22222")  # under the middle of the arrow
    ax.set(xlim=(-0.3, 8.4), ylim=(-2.3, 2.6), aspect="equal", title=title)
    ax.title.set_fontsize(9)
    ax.axis("off")
fig.suptitle("backward of a broadcast: each element of b gets the sum of its copies' gradients", fontsize=10)
plt.show()

# %% [markdown]
# `sum_to(x, shape)` follows from the two ways a broadcast enlarges an array:
# it sums over the *prepended* leading axes, then over every *stretched* axis
# (1 in `shape`, more in `x`), keeping it with length 1. For `shape` $(2, 1)$
# and a gradient of shape $(4, 2, 3)$: axis 0 was prepended, axis 2
# stretched; summing over $(0, 2)$ with `keepdims` gives $(1, 2, 1)$, reshaped
# to $(2, 1)$.

# %%
show_code(F.sum_to_array, F.BroadcastTo, F.SumTo, step=30)

# %% [markdown]
# ## Broadcasting in `+`, `-`, `*` and `/`
#
# NumPy broadcasts in arithmetic by itself, so `x + b` for `x` of shape
# $(4, 3)$ and `b` of shape $(3,)$ always computed. The package refused those
# shapes until now because the *backward* got them wrong: `b`'s gradient
# arrives with the output's shape $(4, 3)$. But `x + b` is
# `x + broadcast_to(b, (4, 3))` in disguise, so `b`'s gradient must go
# through `sum_to`. The four operators share that in a base class: forward
# keeps the two shapes when they differ, backward sums each gradient to its
# input's shape.

# %%
show_code(tinypytorch.core._Binary, step=30)

# %% [markdown]
# A bias added to every row gets the column sums of the incoming gradient:

# %%
x = Variable(np.zeros((4, 3)))
b = Variable(np.array([0.5, -1.0, 2.0]))
w = np.arange(12.0).reshape(4, 3)
((x + b) * w).sum().backward()
print("b.grad =", b.grad.data.tolist(), " column sums of w:", w.sum(axis=0).tolist())

# %% [markdown]
# Without `sum_to` nothing would fail on the spot. NumPy would broadcast the
# output-shaped gradient into whatever came next: one step of gradient descent,
# `b - lr * g`, would silently turn a $(1, 3)$ bias into a $4 \times 3$ matrix,
# one row per example. Errors for shapes that do not broadcast, and second
# derivatives through broadcasting (the backward passes are written with
# each other, so step 27 applies), are in `tests/test_step30.py`.
#
# ## Check against PyTorch
#
# `sum` with every kind of `axis`, `broadcast_to`, `sum_to` (`sum_to_size`)
# and the four operators on shape pairs that broadcast in different ways: a
# vector against a matrix, a column against a row, prepended and stretched
# axes at once, a 0-d array against a matrix. `check` (collapsed) weights each
# result by random numbers before the backward pass and compares values and
# gradients, and that each gradient has its input's shape.

# %% tags=["hide-cell"]
import torch  # noqa: E402

rng = np.random.default_rng(0)


def check(f, g, *arrays):
    """Values and grads of f (tinypytorch) and g (torch) on the same arrays, weighted by random numbers."""
    xs = [Variable(a.copy()) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, yt = f(*xs), g(*ts)
    w = rng.uniform(-1.0, 1.0, y.shape)
    (y * w).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        assert x.grad.shape == x.shape
        np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12, atol=1e-15)


# %%
data = rng.uniform(-1.0, 1.0, (2, 3, 4))
for axis in [None, 0, 2, -1, (0, 2), (1, -1), (0, 1, 2)]:
    for keepdims in (False, True):
        check(lambda x: x.sum(axis, keepdims=keepdims), lambda t: t.sum(axis, keepdim=keepdims), data)
print("sum over (2, 3, 4): 7 axis choices, keepdims or not: equal torch's")
for shape, target in [((3,), (2, 3)), ((2, 1), (2, 3)), ((), (2, 3)), ((1, 3, 1), (2, 4, 3, 5))]:
    x_data, y_data = rng.uniform(-1.0, 1.0, shape), rng.uniform(-1.0, 1.0, target)
    check(lambda x: F.broadcast_to(x, target), lambda t: torch.broadcast_to(t, target), x_data)
    check(lambda x: F.sum_to(x, shape), lambda t: t.sum_to_size(shape), y_data)
print("broadcast_to and sum_to (torch: sum_to_size): equal torch's for 4 shape pairs")
operators = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
             "*": lambda a, b: a * b, "/": lambda a, b: a / b}
pairs = [((2, 3), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 1)),
         ((), (2, 3)), ((2, 3), (1, 1))]
for shape0, shape1 in pairs:
    a, b = rng.uniform(0.5, 2.0, shape0), rng.uniform(0.5, 2.0, shape1)
    for op in operators.values():
        check(op, op, a, b)
print(f"+ - * / on {len(pairs)} pairs of shapes that broadcast: values and grads equal torch's")
print("PyTorch check passed: grads of sum, broadcast_to, sum_to and broadcasting + - * / equal torch")

# %% [markdown]
# ## Recap
#
# - `sum`'s backward copies the gradient back to every element it added
#   (reshape the summed axes back to length 1, then `broadcast_to`).
# - `broadcast_to`'s backward sums the gradients of the copies: `sum_to`,
#   over the prepended axes and the stretched ones.
# - `sum` and `broadcast_to`, like `broadcast_to` and `sum_to`, are each
#   other's backward.
# - `+ - * /` broadcast as NumPy does, and sum each input's gradient back to
#   its shape; without that a bias would silently grow into a matrix.
#
# ## Exercises
#
# **1. Backprop ninja: broadcasting's backward by hand.** Write a `Function`
# `MyBroadcastTo(shape)` whose forward is `np.broadcast_to` and whose
# backward you write yourself, without `sum_to`: sum over the leading axes the
# broadcast prepended, then over the stretched ones with `keepdims=True`
# (`gy.sum(axis=..., keepdims=...)`), and reshape to the input's shape.
# Compare with `torch.broadcast_to` for $(2, 1) \to (4, 2, 3)$.

# %% tags=["hide-cell"]
class MyBroadcastTo(Function):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        self.x_shape = x.shape
        return np.broadcast_to(x, self.shape).copy()

    def backward(self, gy):
        lead = len(self.shape) - len(self.x_shape)
        if lead:
            gy = gy.sum(axis=tuple(range(lead)))
        stretched = tuple(i for i, n in enumerate(self.x_shape) if n == 1 and self.shape[lead + i] != 1)
        if stretched:
            gy = gy.sum(axis=stretched, keepdims=True)
        return gy.reshape(self.x_shape)


x = Variable(np.array([[1.0], [2.0]]))
y = MyBroadcastTo((4, 2, 3))(x)
(y * np.arange(24.0).reshape(4, 2, 3)).sum().backward()
print("y.shape =", y.shape, " x.grad =", x.grad.data.tolist())


# %% [markdown]
# **2. Centring.** Write `center(x)`, each row of a matrix minus its mean,
# `x - x.sum(axis=1, keepdims=True) / n`, and look at the gradient of
# $\sum w \cdot \mathrm{center}(x)$: what do its rows sum to?

# %% tags=["hide-cell"]
def center(x):
    return x - x.sum(axis=1, keepdims=True) / x.shape[1]


x = Variable(np.array([[1.0, 2.0, 6.0], [0.0, -1.0, 4.0]]))
(center(x) * np.array([[1.0, 2.0, 3.0], [4.0, 0.0, -1.0]])).sum().backward()
print("x.grad =", x.grad.data.tolist(), " row sums:", x.grad.data.sum(axis=1).tolist())
