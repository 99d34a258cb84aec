# %% [markdown]
# # Step 30: `sum`, broadcasting and `sum_to`
#
# Step 29's functions moved elements around: every output element was exactly
# one input element. This step is about functions that *combine* elements and
# functions that *copy* them. `sum` adds many elements into one;
# `broadcast_to` copies one element into many places. Each is the other's
# backward pass, and together they make NumPy's broadcasting in `+ - * /`
# differentiable, which a layer needs as soon as it adds one bias vector to a
# whole batch of rows.

# %%

import numpy as np

import tinypytorch
import tinypytorch.core
import tinypytorch.functions as F
from tinypytorch import Variable
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## `sum`
#
# For $y = \sum_i x_i$, every element enters with coefficient 1:
# $\partial y / \partial x_i = 1$. By the chain rule
# $\partial L / \partial x_i = \partial L / \partial y \cdot 1$: the one number
# $g = \partial L / \partial y$ is *copied* into every position of $x$.
#
# Summing along an axis works the same way, one sum per output element. For a
# matrix summed over its rows (axis 0), $y_j = \sum_i x_{ij}$, and
# $\partial L / \partial x_{ij} = g_j$: column $j$ of the gradient is $g_j$,
# copied down the column.
#
# `keepdims=True` keeps each summed axis with length 1 ($(2, 3) \to (1, 3)$
# instead of $(3,)$), so the result still lines up with the input. The
# backward pass needs exactly that: it first puts the summed axes back as
# length-1 axes with `reshape`, then copies the gradient along them with
# `broadcast_to` (below). Without the reshape the copy goes wrong, because
# NumPy lines a shorter shape up with the *last* axes. A sum over axis 1 of a
# $2 \times 3$ matrix has shape $(2,)$; broadcast to $(2, 3)$, its two numbers
# would have to fill rows of length 3, and NumPy refuses. Worse, for a
# $3 \times 3$ matrix the broadcast succeeds and copies $g$ along the wrong
# axis: a silently wrong gradient. Reshaped to $(3, 1)$, $g_i$ fills row $i$,
# as it should.

# %%
show_code(F.Sum)
show_code(F.sum)
show_code(Variable.sum)

# %%
try:
    np.broadcast_to(np.ones(2), (2, 3))
except ValueError as error:
    print("broadcast (2,) to (2, 3):", error)
g = np.array([1.0, 2.0, 3.0])  # dL/dy for y = x.sum(axis=1), x of shape (3, 3)
print("broadcast (3,) to (3, 3):  ", np.broadcast_to(g, (3, 3)).tolist(), " wrong")
print("broadcast (3, 1) to (3, 3):", np.broadcast_to(g.reshape(3, 1), (3, 3)).tolist(), " right")

# %% [markdown]
# `axis` may be `None` (every axis), an int, or a tuple of ints, negative ones
# counting from the end, as in NumPy and PyTorch (PyTorch names the arguments
# `dim` and `keepdim`, and accepts NumPy's `axis` and `keepdims` as well). A
# helper checks `axis` before NumPy sees it:

# %%
show_code(F._normalize_axis)

# %% [markdown]
# In each example below, $L = \sum_j w_j y_j$ with distinct weights $w$, so
# $\partial L / \partial y = w$ and the gradient shows where each weight was
# copied:

# %%
x = Variable(np.arange(6.0).reshape(2, 3))
for axis, keepdims in [(None, False), (0, False), (1, False), (1, True), ((0, 1), True)]:
    x.cleargrad()
    y = x.sum(axis=axis, keepdims=keepdims)
    w = np.arange(1.0, y.numel() + 1).reshape(y.shape)
    (y * w).sum().backward()
    print(f"axis={axis!s:6} keepdims={keepdims!s:5}  y = {y.data.tolist()!s:16}"
          f"  w = {w.tolist()!s:18}  x.grad = {x.grad.data.tolist()}")

# %% [markdown]
# ## `broadcast_to`
#
# Broadcasting is NumPy's rule for combining arrays of different shapes.
# Compare the shapes from the right. Two lengths are compatible when they
# are equal or one of them is 1. A length 1 is *stretched*: its single element
# is reused along that axis. An array with fewer axes gets length-1 axes in
# front. So $(3,)$ broadcasts to $(2, 3)$ (one row, reused for both rows),
# $(2, 1)$ to $(2, 3)$ (one column, reused three times), and $(3,)$ does not
# broadcast to $(3, 2)$.
#
# `broadcast_to(x, shape)` makes that explicit. Every element of $x$ appears in
# several places of $y$, so its gradient is the sum of the gradients of all its
# copies: the backward pass is a sum, `sum_to(gy, x.shape)`.

# %%
show_code(F.BroadcastTo)

x = Variable(np.array([1.0, 2.0, 3.0]))
y = F.broadcast_to(x, (2, 3))
w = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])
(y * w).sum().backward()
print("y =", y.data.tolist())
print("x.grad =", x.grad.data.tolist(), " (column sums of w)")

# %% [markdown]
# ## `sum_to`: summing a broadcast away
#
# `sum_to(x, shape)` is the inverse bookkeeping of `broadcast_to`: given an
# array whose shape is a broadcast of `shape`, it adds up the elements that
# were copies of one element. PyTorch has the same operation as
# `Tensor.sum_to_size`. The algorithm follows from the two ways in which a
# broadcast makes an array bigger:
#
# 1. it *prepends* axes: if `x` has $k$ more axes than `shape`, sum over the
#    first $k$ axes;
# 2. it *stretches* axes of length 1: sum over every axis where `shape` has a
#    1 and `x` does not, keeping it (`keepdims=True`) with length 1.
#
# A worked example. Let `shape` $= (2, 1)$ and let the gradient have shape
# $(4, 2, 3)$. Aligned from the right, $(2, 1)$ sits under the last two axes of
# $(4, 2, 3)$; there is $k = 1$ prepended axis (axis 0), and one stretched
# axis, axis 2 (1 in `shape`, 3 in `x`). Summing over axes $(0, 2)$ with
# `keepdims=True` gives shape $(1, 2, 1)$, and a final reshape drops the
# prepended axis: $(2, 1)$.

# %%
show_code(F.sum_to_array)

g = np.arange(24.0).reshape(4, 2, 3)
print("sum_to_array:", F.sum_to_array(g, (2, 1)).tolist())
print("by hand:     ", g.sum(axis=(0, 2)).reshape(2, 1).tolist())

# %% [markdown]
# As a differentiable function, `SumTo` first checks that its input really
# is a broadcast of the target shape, and its backward pass is `broadcast_to`:
# the two functions are each other's backward, just as `sum` and
# `broadcast_to` are.

# %%
show_code(F.SumTo)
show_code(F.sum_to)

# %% [markdown]
# ## Broadcasting in `+`, `-`, `*` and `/`
#
# NumPy broadcasts in arithmetic by itself, so the *forward* passes of the four
# operators always could compute `x + b` for `x` of shape $(4, 3)$ and `b` of
# shape $(3,)$. Until now the package refused those shapes, because the
# *backward* pass got them wrong: the gradient with respect to `b` arrives
# with the output's shape $(4, 3)$, not `b`'s.
#
# The fix is the rule of this step. `x + b` is `x + broadcast_to(b, (4, 3))`
# in disguise, so `b`'s gradient must pass through the backward of
# `broadcast_to`, which is `sum_to`. Each binary operation therefore checks in
# its forward pass that the shapes broadcast, keeping the two shapes when they
# differ, and its backward pass sums each input's gradient to that input's
# shape. The four operations share this in a base class, `_Binary`. That is
# why `broadcast_to` and `sum_to` live in `core.py`, beside the arithmetic
# that needs them (`tinypytorch.functions` offers them too). (The
# lines of `Mul` marked step 35 choose what forward keeps for backward; until
# then, read `self.saved_tensors` as "the inputs".)

# %%
show_code(tinypytorch.core._check_broadcast)
show_code(tinypytorch.core._Binary)
show_code(tinypytorch.core.Mul)

# %% [markdown]
# A bias added to every row gets the column sums of the incoming gradient; in
# an outer product $a_i b_j$ built from shapes $(2, 1)$ and $(1, 3)$, $a$ gets the
# row sums of $g_{ij} b_j$ and $b$ the column sums of $g_{ij} a_i$:

# %%
x = Variable(np.zeros((4, 3)))
b = Variable(np.array([0.5, -1.0, 2.0]))
w = np.arange(12.0).reshape(4, 3)
((x + b) * w).sum().backward()
print("b.grad =", b.grad.data.tolist(), " column sums of w:", w.sum(axis=0).tolist())

a = Variable(np.array([[1.0], [2.0]]))
c = Variable(np.array([[1.0, 10.0, 100.0]]))
(a * c).sum().backward()
print("a.grad =", a.grad.data.tolist(), " c.grad =", c.grad.data.tolist())

# %% [markdown]
# ### What goes wrong without `sum_to`
#
# A backward pass that returned the output-shaped gradient for `b` would not
# fail on the spot. NumPy would broadcast it into whatever came next. Take a
# bias of shape $(1, 3)$ and one step of gradient descent with a gradient of
# shape $(4, 3)$: the update `b - lr * g` broadcasts too, and the bias silently
# turns into a $4 \times 3$ matrix, one row per example of the batch. DeZero's
# issue #20 is a discussion of exactly where `sum_to` is needed.

# %%
b_data = np.zeros((1, 3))
g_wrong = np.ones((4, 3))  # dL/d(x + b), not yet summed to b's shape
print("bias shape after a step with the wrong gradient:", (b_data - 0.1 * g_wrong).shape)
print("with sum_to:", (b_data - 0.1 * F.sum_to_array(g_wrong, (1, 3))).shape)

# %% [markdown]
# ## Bad input
#
# Each function checks its shapes and axes and names itself, instead of
# failing inside NumPy (NumPy's own `AxisError` would not say which operation
# went wrong):

# %%
x = Variable(np.zeros((2, 3)))
attempts = {
    "broadcast_to(x, (3,))": lambda: F.broadcast_to(x, (3,)),
    "broadcast_to(x, (3, 3))": lambda: F.broadcast_to(x, (3, 3)),
    "x.sum(axis=2)": lambda: x.sum(axis=2),
    "x.sum(axis=(0, -2))": lambda: x.sum(axis=(0, -2)),
    "x.sum(axis=1.0)": lambda: x.sum(axis=1.0),
    "sum_to(x, (2,))": lambda: F.sum_to(x, (2,)),
    "x + np.zeros((3, 2))": lambda: x + np.zeros((3, 2)),
    "x * np.zeros(2)": lambda: x * np.zeros(2),
}
for code, attempt in attempts.items():
    try:
        attempt()
    except (TypeError, ValueError) as error:
        print(f"{code:23} {type(error).__name__}: {error}")

# %% [markdown]
# ## Higher derivatives
#
# `Sum.backward` is written with `reshape` and `broadcast_to`, `BroadcastTo`'s
# and `SumTo`'s with each other, so gradients through broadcasting can be
# differentiated again (step 27). For $L = \sum_{ij} (x_{ij} + b_j)^3$ the
# gradient is $\partial L / \partial b_j = \sum_i 3 (x_{ij} + b_j)^2$ and its
# derivative $\partial / \partial b_j$ of $\sum_j \partial L / \partial b_j$
# is $\sum_i 6 (x_{ij} + b_j)$:

# %%
x = Variable(np.array([[0.5, 1.0], [1.5, -2.0], [0.0, 0.25]]))
b = Variable(np.array([1.0, -1.0]))
((x + b) ** 3).sum().backward(create_graph=True)
gb = b.grad
b.cleargrad()
gb.sum().backward()
print(f"dL/db           = {gb.data.tolist()!s:16} formula: {(3 * (x.data + b.data) ** 2).sum(axis=0).tolist()}")
print(f"d(sum dL/db)/db = {b.grad.data.tolist()!s:16} formula: {(6 * (x.data + b.data)).sum(axis=0).tolist()}")

# %% [markdown]
# ## Check against PyTorch
#
# `sum` with every kind of `axis`, `broadcast_to`, `sum_to` (PyTorch's
# `sum_to_size`) and the four operators on pairs of shapes that broadcast in
# the different ways: a vector against a matrix, a column against a row,
# prepended and stretched axes at once, a 0-d array against a matrix. Each
# result is weighted by fixed random numbers before the backward pass. Sums
# may add in a different order than PyTorch, so the tolerance is $10^{-12}$.

# %%
import torch

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
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


data = rng.uniform(-1.0, 1.0, (2, 3, 4))
for axis in [None, 0, 2, -1, (0, 2), (1, -1), (0, 1, 2)]:
    for keepdims in (False, True):
        check(lambda x: x.sum(axis=axis, keepdims=keepdims), lambda t: t.sum(dim=axis, keepdim=keepdims), data)
print("sum over (2, 3, 4): 7 axis choices x keepdims == torch")

for shape, target in [((3,), (2, 3)), ((2, 1), (2, 3)), ((), (2, 3)), ((1, 3, 1), (2, 4, 3, 5))]:
    x_data = rng.uniform(-1.0, 1.0, shape)
    check(lambda x: F.broadcast_to(x, target), lambda t: torch.broadcast_to(t, target), x_data)
    check(lambda x: F.sum_to(x, shape), lambda t: t.sum_to_size(shape), rng.uniform(-1.0, 1.0, target))
print("broadcast_to and sum_to (torch: sum_to_size) == torch for 4 shape pairs")

operators = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
pairs = [((2, 3), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3)), ((4, 1, 3), (2, 1)), ((), (2, 3)), ((2, 3), (1, 1))]
for shape0, shape1 in pairs:
    a, b = rng.uniform(0.5, 2.0, shape0), rng.uniform(0.5, 2.0, shape1)
    for op in operators.values():
        check(op, op, a, b)
    print(f"{shape0!s:9} with {shape1!s:7}: values and grads of + - * / == torch")
print("PyTorch check passed: grads of sum, broadcast_to, sum_to and broadcasting + - * / equal torch")
