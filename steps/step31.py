# %% [markdown]
# # Step 31: The matrix product, `linear` and indexing
#
# A fully connected layer of a neural network multiplies a batch of inputs by
# a weight matrix and adds a bias. This step adds the matrix product `matmul`
# (the `@` operator), the layer's whole computation as one function, `linear`,
# and indexing, `x[...]`, whose backward pass has a trap of its own.

# %%
import tracemalloc

import numpy as np

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Variable
from tinypytorch.utils import functions_in_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The matrix product and its gradients
#
# For $x$ of shape $(N, D)$ and $W$ of shape $(D, H)$, $y = xW$ has shape
# $(N, H)$ and
#
# $$ y_{nh} = \sum_d x_{nd} W_{dh}. $$
#
# Given $g = \partial L / \partial y$, also of shape $(N, H)$, the chain rule sums
# over every output element that an input element touches. $x_{nd}$ appears in
# $y_{nh}$ for every $h$, with coefficient $W_{dh}$; $W_{dh}$ appears in $y_{nh}$
# for every $n$, with coefficient $x_{nd}$:
#
# $$
# \frac{\partial L}{\partial x_{nd}} = \sum_h g_{nh} W_{dh} = (g W^\top)_{nd},
# \qquad
# \frac{\partial L}{\partial W_{dh}} = \sum_n x_{nd}\, g_{nh} = (x^\top g)_{dh}.
# $$
#
# The shapes are a good memory aid: $\partial L / \partial x$ must have $x$'s
# shape $(N, D)$, and the only way to get it from $g$ $(N, H)$ and $W$ $(D, H)$
# by a matrix product is $g W^\top$; likewise $x^\top g$ is the only product of
# $x$ and $g$ with $W$'s shape $(D, H)$.
#
# Both gradients are again matrix products, so `MatMul.backward` calls
# `matmul` and `transpose` (step 29) on Variables, and the backward pass can be
# differentiated once more.

# %%
show_code(F.MatMul)
show_code(F.matmul)
show_code(Variable.__matmul__)

# %%
x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
W = Variable(np.arange(12.0).reshape(3, 4) - 5)
y = x @ W
g = np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 1.0, -1.0, 0.0]])  # dL/dy, through L = sum(g * y)
(y * g).sum().backward()
print("y.shape =", y.shape, " x.grad.shape =", x.grad.shape, " W.grad.shape =", W.grad.shape)
print("x.grad =", x.grad.data.tolist())
print("g W^T  =", (g @ W.data.T).tolist())
print("W.grad =", W.grad.data.tolist())
print("x^T g  =", (x.data.T @ g).tolist())

# %% [markdown]
# ### Stacks of matrices
#
# NumPy's `@` and PyTorch's `matmul` also multiply *stacks* of matrices: all
# axes but the last two are batch axes, and they broadcast (step 30). A batch
# of five $2 \times 3$ matrices times one $3 \times 4$ matrix is five products,
# all with the same $W$. $W$ was then used five times, so its gradient is the sum
# of five gradients: exactly what `sum_to(gW, W.shape)` at the end of
# `MatMul.backward` computes. For plain matrices `sum_to` has nothing to do.
# The transposes in `MatMul.backward` are `transpose(W, -2, -1)`: swapping the
# last two dimensions (step 29) gives $W^\top$ for a matrix and the transpose
# of every matrix for a stack (PyTorch writes `W.mT` or `W.transpose(-2, -1)`).

# %%
xs = Variable(np.random.default_rng(0).uniform(-1.0, 1.0, (5, 2, 3)))
W = Variable(np.arange(12.0).reshape(3, 4) / 10)
y = xs @ W
y.sum().backward()
per_matrix = sum(xs.data[i].T @ np.ones((2, 4)) for i in range(5))
print("y.shape =", y.shape, " W.grad.shape =", W.grad.shape)
print("W.grad equals the sum of the five matrices' gradients:", np.allclose(W.grad, per_matrix, rtol=1e-14))

# %% [markdown]
# The forward pass checks the shapes first, so a mismatch names the operation,
# both shapes and the two lengths that differ. PyTorch's `matmul` also accepts
# 1-D operands (a vector is treated as a row or a column); this one asks for
# matrices, and a vector must be reshaped to $(1, D)$ or $(D, 1)$ explicitly.

# %%
show_code(F._check_matmul)

attempts = {
    "(2, 3) @ (2, 3)": (np.ones((2, 3)), np.ones((2, 3))),
    "(4, 2, 3) @ (5, 3, 1)": (np.ones((4, 2, 3)), np.ones((5, 3, 1))),
    "(3,) @ (3, 2)": (np.ones(3), np.ones((3, 2))),
}
for code, (a, b) in attempts.items():
    try:
        Variable(a) @ Variable(b)
    except ValueError as error:
        print(f"{code:22} ValueError: {error}")

# %% [markdown]
# ## `linear`: $y = x W^\top + b$
#
# A fully connected layer computes $y = x W^\top + b$ for a batch $x$ of shape
# $(N, \text{in})$. Like PyTorch's `torch.nn.functional.linear`, the weight has
# shape $(\text{out}, \text{in})$: row $j$ holds the weights of output unit $j$.
# (DeZero stores $W$ as $(\text{in}, \text{out})$ and computes $xW + b$; the
# arithmetic is the same, but with PyTorch's layout the weights of a model
# can be copied between the two frameworks as they are, which step 32 does.)
# The bias $b$ has shape $(\text{out},)$ and is broadcast over the $N$ rows.
#
# Written with the operators, `x @ W.T + b` records three functions:
# `Transpose`, `MatMul` and `Add`. One function for the whole layer records
# one node, and its backward computes the three gradients at once. In a
# framework where every function keeps its input Variables for the backward
# pass, as DeZero's do, the fused function also saves memory: there the `Add`
# node keeps the product $xW^\top$, an $N \times \text{out}$ array, alive for
# as long as the graph lives, although no backward formula needs it (the
# gradients of a sum don't depend on the values added). The package's
# functions keep only what their backward needs, a change made in step 35,
# which measures it. Its
# gradients are those of the matrix product, with $W^\top$ in place of $W$,
# plus the bias gradient of step 30:
#
# $$
# \frac{\partial L}{\partial x} = g W, \qquad
# \frac{\partial L}{\partial W} = g^\top x, \qquad
# \frac{\partial L}{\partial b} = \sum_n g_{n\cdot} \ (\texttt{sum\_to}).
# $$

# %%
show_code(F.LinearFunction)
show_code(F.linear)

# %% [markdown]
# The memory each form holds, measured with `tracemalloc` for a batch of
# 1,000 rows and 100 inputs and outputs: each figure counts the arrays
# created while building the graph that are still alive, the output
# included. With the package as it is, both hold the $1000 \times 100$ output
# (0.8 MB in float64) and nothing else: `MatMul` keeps $x$ and $W^\top$,
# which exist anyway ($W^\top$ is a *view*, the same memory as $W$ with the
# axes swapped), and `Add` keeps nothing. Before step 35 the composed form
# held the product as well, twice the memory.

# %%
rng = np.random.default_rng(0)
x = Variable(rng.uniform(-1.0, 1.0, (1000, 100)))
W = Variable(rng.uniform(-0.1, 0.1, (100, 100)))
b = Variable(rng.uniform(-0.1, 0.1, 100))
for name, build in [("x @ W.T + b", lambda: x @ W.T + b), ("linear(x, W, b)", lambda: F.linear(x, W, b))]:
    tracemalloc.start()
    y = build()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{name:16} {held / 1e6:.1f} MB held  functions: {', '.join(type(f).__name__ for f in functions_in_graph(y))}")
    del y

# %% [markdown]
# Both give the same gradients; the bias gradient is the column sum of $g$:

# %%
x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
W = Variable(np.array([[0.1, 0.2, 0.3], [-0.4, 0.5, -0.6]]))
b = Variable(np.array([1.0, -1.0]))
g = np.array([[1.0, 2.0], [3.0, 4.0]])  # dL/dy, through L = sum(g * y)
y = F.linear(x, W, b)
(y * g).sum().backward()
print("y.shape =", y.shape)
print("b.grad =", b.grad.data.tolist(), " column sums of g:", g.sum(axis=0).tolist())
print("W.grad =", W.grad.data.tolist(), " g^T x:", (g.T @ x.data).tolist())

# %% [markdown]
# The shapes are checked with messages in PyTorch's terms:

# %%
for code, args in {
    "linear(x(4, 3), W(2, 5))": (np.ones((4, 3)), np.ones((2, 5))),
    "linear(x(4, 3), W(2, 3), b(3,))": (np.ones((4, 3)), np.ones((2, 3)), np.ones(3)),
    "linear(x(3,), W(2, 3))": (np.ones(3), np.ones((2, 3))),
}.items():
    try:
        F.linear(*args)
    except ValueError as error:
        print(f"{code:32} ValueError: {error}")

# %% [markdown]
# ## Indexing: `x[key]`
#
# `x[key]` takes part of an array: an element, a row, a slice, or, with a list
# of indices (*fancy indexing*), any selection of rows in any order, repeats
# allowed. `Variable.__getitem__` accepts every key NumPy accepts and passes it
# to a function `GetItem`.
#
# The backward pass sends the gradient of each selected element back to the
# element it came from, and zero to elements that were not selected. Think of
# it as scattering $g$ into a zero array shaped like $x$. The trap is a
# repeated index. In $y = x[[0, 0, 1]]$, $x_0$ is used twice, so its gradient
# is the *sum* of two gradients (step 14's rule). The obvious NumPy statement
# `gx[key] += gy` does not do that: with a repeated index, the `+=` writes the
# same position twice, and the second write replaces the first. `np.add.at`
# adds once per occurrence:

# %%
key = [0, 0, 1]
gy = np.ones(3)
gx = np.zeros(3)
gx[key] += gy
print("gx[key] += gy        ->", gx.tolist())
gx = np.zeros(3)
np.add.at(gx, key, gy)
print("np.add.at(gx, key, gy) ->", gx.tolist())

# %% [markdown]
# The scatter is itself a `Function`, `GetItemGrad`, so that the backward
# pass can be differentiated. Its own backward is indexing again: the
# gradient of a scatter into `key` is a gather from `key`.

# %%
show_code(F.GetItem)
show_code(F.GetItemGrad)
show_code(Variable.__getitem__)

# %%
x = Variable(np.arange(6.0).reshape(3, 2))
for code, select in [("x[1]", lambda v: v[1]), ("x[:, 1:]", lambda v: v[:, 1:]),
                     ("x[[0, 0, 1]]", lambda v: v[[0, 0, 1]]), ("x[x.data > 2]", lambda v: v[v.data > 2])]:
    x.cleargrad()
    y = select(x)
    y.sum().backward()
    print(f"{code:14} y = {y.data.tolist()!s:40} x.grad = {x.grad.data.tolist()}")

# %% [markdown]
# An index that does not exist raises `IndexError`, as in NumPy and PyTorch,
# with the operation, the key and the shape added to NumPy's message. (The
# type matters beyond the message: Python's `for` loop over an object that
# has only `__getitem__` stops at the first `IndexError`, so `for row in x`
# walks the rows of a Variable.)

# %%
x = Variable(np.zeros((3, 2)))
for code, select in [("x[5]", lambda: x[5]), ("x[[0, 5]]", lambda: x[[0, 5]]), ("x[0, 0, 0]", lambda: x[0, 0, 0])]:
    try:
        select()
    except IndexError as error:
        print(f"{code:11} IndexError: {error}")
print("rows of x:", [row.shape for row in x])

# %% [markdown]
# ## Check against PyTorch
#
# The matrix product of matrices and of a stack with a matrix, `linear` with a
# broadcast bias (PyTorch's `torch.nn.functional.linear`, same weight layout),
# and indexing with an int, slices, a repeated list and a boolean mask. Then a
# second derivative through `matmul`: with `create_graph=True`, the gradient
# $\partial L / \partial W$ of $L = \sum \tanh(xW)$ is a Variable, and the
# gradient of $\sum (\partial L / \partial W)^2$ with respect to $x$ and $W$ needs
# the backward pass of the backward pass, compared with
# `torch.autograd.grad(..., create_graph=True)`. Sums run in a different order
# than in PyTorch's matrix kernels, so the tolerance is $10^{-12}$.

# %%
import torch

rng = np.random.default_rng(1)


def check(f, g, *arrays):
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


x, W, b = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 5)), rng.uniform(-1, 1, 5)
check(lambda x, W: x @ W, lambda x, W: x @ W, x, W)
check(lambda x, W: x @ W, lambda x, W: x @ W, rng.uniform(-1, 1, (6, 4, 3)), W)
print("x @ W for (4, 3) @ (3, 5) and (6, 4, 3) @ (3, 5): values and grads == torch")
check(F.linear, torch.nn.functional.linear, x, W.T.copy(), b)
print("linear(x, W, b), W (5, 3), b (5,) broadcast over 4 rows: values and grads == torch")

keys = {"x[1]": 1, "x[1:3]": slice(1, 3), "x[:, ::2]": (slice(None), slice(None, None, 2)),
        "x[[0, 0, 1]]": [0, 0, 1], "x[[2, 0], [1, 1]]": ([2, 0], [1, 1]), "x[mask]": x > 0}
for key in keys.values():
    check(lambda v: v[key], lambda t: t[torch.as_tensor(key) if isinstance(key, np.ndarray) else key], x)
print("indexing", ", ".join(keys), "(x: (4, 3)): values and grads == torch")

xv, Wv = Variable(x.copy()), Variable(W.copy())
tinypytorch.tanh(xv @ Wv).sum().backward(create_graph=True)
gW = Wv.grad
xv.cleargrad()
Wv.cleargrad()
(gW * gW).sum().backward()
xt, Wt = torch.tensor(x, requires_grad=True), torch.tensor(W, requires_grad=True)
(gWt,) = torch.autograd.grad(torch.tanh(xt @ Wt).sum(), Wt, create_graph=True)
(gWt * gWt).sum().backward()
np.testing.assert_allclose(gW.data, gWt.detach().numpy(), rtol=1e-12)
np.testing.assert_allclose(xv.grad, xt.grad.numpy(), rtol=1e-12)
np.testing.assert_allclose(Wv.grad, Wt.grad.numpy(), rtol=1e-12)
print("second derivative: grads of sum((dL/dW)^2), L = sum(tanh(x @ W)), w.r.t. x and W == torch")
print("PyTorch check passed: grads of matmul, linear, indexing and a second derivative through matmul equal torch")
