# %% [markdown]
# # Step 29: Tensors: element-wise functions, `reshape` and `transpose`
#
# Until now almost every variable held a single number. A neural network
# works on arrays: a batch of inputs is a matrix, an image a 3-dimensional
# array. PyTorch calls every such array a *tensor*, whether or not it takes
# part in a gradient; here it is still a `Variable` holding an `ndarray`.
#
# The element-wise functions of the earlier steps already work on arrays.
# What is new are functions that change an array's *shape*, not its values:
# `reshape`, and `transpose` with its general form `permute`. The idea of
# this step: **such a function only moves elements, so its backward moves
# each gradient back to where its element came from**, the inverse move.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Function, Variable
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Element-wise functions already work on arrays
#
# An element-wise $y_i = f(x_i)$ has a diagonal Jacobian, so backward returns
# $\partial L/\partial x_j = g_j\, f'(x_j)$: stage 1's chain rule, element by
# element. `Sin.backward` returns `gy * cos(x)`, and `*` on arrays multiplies
# element by element: nothing assumed a 0-d array. It never builds the
# $6 \times 6$ Jacobian either; every backward computes the
# *vector-Jacobian product* $g^\top J$ directly.
#
# A gradient is defined for a scalar $L$. For an array `y`, the seed
# $\partial L/\partial y$ is shaped like `y`; ones are the gradient of
# $L = \sum_i y_i$. Steps 09–22 seeded ones silently; PyTorch refuses to guess
# for more than one element, and so does the package: give the seed, or take
# the sum first. For $y = \sin(x)\,x + x^2$:

# %%
x = Variable(np.array([[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]]))
y = tinypytorch.sin(x) * x + x**2
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", error)
y.backward(np.ones_like(y.data))
formula = np.cos(x.data) * x.data + np.sin(x.data) + 2 * x.data
assert np.abs(x.grad.data - formula).max() < 1e-12
print("x.grad.shape =", x.grad.shape, "  equal to cos(x) x + sin(x) + 2x within 1e-12")

# %% [markdown]
# ## `reshape`: the same elements in a new shape
#
# `reshape` lays the elements out again in row-major order (the last index
# changes fastest). No value changes: each element of $y$ *is* one element of
# $x$, so backward reshapes the incoming gradient back to the input's shape,
# which forward remembered. (One entry of the shape may be $-1$, worked out
# from the size; a reshape to the same shape is a new view of `x`, as in
# PyTorch.)

# %%
show_code(F.Reshape, step=29)

# %% [markdown]
# ## `transpose` and `permute`: moving dimensions
#
# `permute(x, dims)` reorders the dimensions: dimension $k$ of $y$ is
# dimension $p_k$ of $x$. `transpose(x, dim0, dim1)` swaps two of them
# (for a stack of matrices, `transpose(x, -2, -1)` transposes each; step 31
# needs that), and `x.T` reverses them all. Each is one permutation, so one
# `Function`, `Transpose`, records all three. Its backward applies the
# *inverse* permutation: dimension $i$ of $x$ went to position
# `perm.index(i)` of $y$.

# %%
show_code(F.Transpose, step=29)

# %% [markdown]
# The picture follows the elements. Each of $x$'s six elements has its own
# colour; forward moves it, and backward sends the gradient arriving at that
# place in $y$ back to the same cell of $x$:

# %% tags=["hide-input"]
def cells(ax, values, origin, title):
    """A grid of coloured cells, one colour per element of the original x (values: its index 0-5)."""
    rows, cols = values.shape
    colours = plt.cm.tab10(np.arange(6))
    for (r, c), v in np.ndenumerate(values):
        ax.add_patch(plt.Rectangle((origin[0] + c, origin[1] - r), 1, 1, facecolor=colours[int(v)], alpha=0.55,
                                   edgecolor="black"))
        ax.text(origin[0] + c + 0.5, origin[1] - r + 0.5, f"{int(v)}", ha="center", va="center", fontsize=9)
    ax.text(origin[0] + cols / 2, origin[1] + 1.35, title, ha="center", fontsize=9)


def arrow(ax, start, end, text, colour, side):
    """An arrow with its label beside it (side: "left", "right", "above" or "below"), never over it."""
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.4))
    x, y = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
    dx, dy, ha, va = {"left": (-0.2, 0, "right", "center"), "right": (0.2, 0, "left", "center"),
                      "above": (0, 0.15, "center", "bottom"), "below": (0, -0.15, "center", "top")}[side]
    ax.text(x + dx, y + dy, text, ha=ha, va=va, fontsize=8, color=colour)


index = np.arange(6).reshape(2, 3)
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), gridspec_kw={"width_ratios": [1, 1]})
cells(left, index, (1.5, 0), "x (2, 3)")
cells(left, index.reshape(1, 6), (0, -3.6), "x.reshape(6)")
arrow(left, (1.2, -0.9), (1.2, -2.0), "forward:\nreshape", "black", "left")
arrow(left, (5.1, -2.0), (5.1, -0.9), "backward:\nreshape(2, 3)", "#b22222", "right")
left.set(xlim=(-1.2, 7.2), ylim=(-3.9, 2.6))
cells(right, index, (0, 0.5), "x (2, 3)")
cells(right, index.T, (5, 1), "x.T (3, 2)")
arrow(right, (3.2, 1.2), (4.8, 1.2), "forward:\ntranspose", "black", "above")
arrow(right, (4.8, -0.1), (3.2, -0.1), "backward:\ntranspose", "#b22222", "below")
right.set(xlim=(-0.3, 7.3), ylim=(-2.4, 3.1))
for ax in (left, right):
    ax.set_aspect("equal")
    ax.axis("off")
fig.suptitle("a gradient goes back where its element came from: the inverse move", fontsize=10)
plt.show()

# %% [markdown]
# To see the gradients land in the right places, weight each output element
# differently: the gradient of $\sum_k w_k y_k$ with respect to $y$ is $w$,
# so `x.grad` must be $w$ moved back, reshaped to $2 \times 3$ for `reshape`
# and transposed for the transpose.

# %%
x = Variable(np.arange(6.0).reshape(2, 3))
w = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
(x.reshape(6) * w).sum().backward()
print("reshape:   x.grad =", x.grad.data.tolist())
x.cleargrad()
(x.T * w.reshape(3, 2)).sum().backward()
print("transpose: x.grad =", x.grad.data.tolist())
print("   w.reshape(3, 2).T =", w.reshape(3, 2).T.tolist())

# %% [markdown]
# The methods take PyTorch's arguments: `x.reshape(3, 2)` or
# `x.reshape((3, 2))`, `x.transpose(0, 2)`, `x.permute(2, 0, 1)`. They live in
# `tensor_methods.py`, wired onto `Variable` as `import tinypytorch` runs,
# since `core.py` cannot import `functions.py` back. Mind one clash of names:
# NumPy's `ndarray.transpose(axes)` is PyTorch's `permute`, so for a matrix
# `m.transpose(0, 1)` is the identity in NumPy but the transpose in PyTorch
# and here. Dims are checked as PyTorch checks them (an `IndexError` out of
# range; `permute` needs each dim once); `tests/test_step29.py` holds those
# cases. The collapsed cell shows the helpers.

# %% tags=["hide-cell"]
show_code(F.reshape, Variable.reshape, F.permute, F.transpose, F._dim, F._permutation, step=29)
a = np.zeros((2, 3))
import torch  # noqa: E402

for kind, m in [("numpy.ndarray", a), ("torch.Tensor", torch.from_numpy(a)), ("Variable", Variable(a))]:
    print(f"{kind:13}  m.transpose(0, 1).shape = {tuple(m.transpose(0, 1).shape)}")

# %% [markdown]
# Both backward methods are written with `reshape` and `permute` themselves,
# functions of Variables, so with `create_graph=True` (step 27) they can be
# differentiated again.
#
# ## Check against PyTorch
#
# The same expressions, written once for the module `m` (`torch` or
# `tinypytorch`), for the curriculum's shapes $()$, $(3,)$ and $(2, 3)$. Each
# result is multiplied by random weights before the backward pass, so a
# gradient sent to the wrong element would show. (PyTorch's `.T` warns on
# anything but a matrix, so reversing all dims is spelt with `permute`.)

# %%
def reverse_dims(x):
    return x.permute(tuple(reversed(range(x.ndim))))


cases = {
    "sin(x) * x + x**2": lambda m, x: m.sin(x) * x + x**2,
    "exp(tanh(x)) / (1 + x**2)": lambda m, x: m.exp(m.tanh(x)) / (1 + x**2),
    "x.reshape(-1)": lambda m, x: x.reshape(-1),
    "x.reshape(1, -1, 1)": lambda m, x: x.reshape(1, -1, 1),
    "x.transpose(0, -1)": lambda m, x: x.transpose(0, -1),
    "reversed dims": lambda m, x: reverse_dims(x),
    "sin(reversed dims).reshape(-1) * 2": lambda m, x: m.sin(reverse_dims(x)).reshape(-1) * 2,
}
rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    data = rng.uniform(-2.0, 2.0, shape)
    for f in cases.values():
        x, t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
        y, yt = f(tinypytorch, x), f(torch, t)
        weights = rng.uniform(-1.0, 1.0, y.shape)
        (y * weights).sum().backward()
        (yt * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7}: values and grads equal torch's for {len(cases)} expressions")
print("PyTorch check passed: grads of element-wise ops, reshape and transpose for shapes (), (3,), (2, 3)")

# %% [markdown]
# ## Recap
#
# - Element-wise functions work on arrays unchanged: their backward multiplies
#   the gradient by $f'$ element by element, never forming the Jacobian.
# - `backward()` of more than one element needs its seed, as in PyTorch; ones
#   are the gradient of the sum.
# - `reshape`, `transpose`, `permute` and `.T` move elements without changing
#   them; backward applies the inverse move: reshape back, permute by the
#   inverse permutation.
# - Written with Variable operations, these backward passes can be
#   differentiated again.
#
# ## Exercises
#
# **1. Backprop ninja: `Flip`.** Write a `Function` `Flip` that reverses an
# array along its last dimension (`np.flip(x, -1)`), with its backward by hand,
# written with `Flip` itself so that it stays differentiable. Compare with
# `torch.flip(x, (-1,))`.

# %% tags=["hide-cell"]
class Flip(Function):
    def forward(self, x):
        return np.flip(x, -1).copy()

    def backward(self, gy):
        return Flip()(gy)  # reversing is its own inverse: the gradient goes back to its element


x = Variable(np.arange(6.0).reshape(2, 3))
(Flip()(x) * np.array([1.0, 10.0, 100.0])).sum().backward()
print("x.grad =", x.grad.data.tolist())


# %% [markdown]
# **2. `mT`.** Write `mT(x)`, PyTorch's `x.mT`: each matrix of a stack
# transposed (the last two dimensions swapped), with `transpose`. Check the
# shape and gradient for a $(4, 2, 3)$ array.

# %% tags=["hide-cell"]
def mT(x):
    return x.transpose(-2, -1)


x = Variable(np.arange(24.0).reshape(4, 2, 3))
y = mT(x)
(y * np.arange(24.0).reshape(y.shape)).sum().backward()
print("mT(x).shape =", y.shape, " x.grad[0] =", x.grad.data[0].tolist())
