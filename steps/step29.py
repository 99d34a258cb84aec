# %% [markdown]
# # Step 29: Tensors: element-wise functions, `reshape` and `transpose`
#
# Until now almost every variable held a single number. The data a neural
# network works with are arrays: a batch of inputs is a matrix, a layer's
# weights are a matrix, an image is a 3-dimensional array. PyTorch calls an
# array with a gradient a *tensor*; in this tutorial it is still a `Variable`
# that holds an `ndarray`.
#
# This step starts the move to tensors. First it shows that the element-wise
# functions of the earlier steps already work on arrays, and why. Then it adds
# the first functions that change an array's *shape* rather than its values:
# `reshape`, and `transpose` with its general form `permute`, both under
# PyTorch's names and with PyTorch's arguments.

# %%

import numpy as np

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Variable
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Element-wise functions already work on arrays
#
# An element-wise function applies the same scalar function $f$ to every
# element: $y_i = f(x_i)$. Each output element depends on one input element
# only, so the Jacobian $\partial y_i / \partial x_j$ is diagonal: $f'(x_i)$
# when $i = j$, zero otherwise. Backward receives $g_i = \partial L / \partial y_i$
# for some final scalar $L$ and returns
#
# $$
# \frac{\partial L}{\partial x_j} = \sum_i g_i \frac{\partial y_i}{\partial x_j} = g_j\, f'(x_j).
# $$
#
# That is the scalar chain rule of stage 1, applied element by element. And
# that is exactly what the code already does: `Sin.backward` returns
# `gy * cos(x)`, and `*` on arrays multiplies element by element. Nothing in
# `sin`, `exp`, `tanh` or the arithmetic operators assumed a 0-d array.

# %%
show_code(F.Sin)

# %% [markdown]
# So a whole array goes through a formula in one call, and the gradient has
# the shape of the input. For $y = \sin(x)\,x + x^2$ the derivative is
# $\cos(x)\,x + \sin(x) + 2x$, element by element (the seed of ones is
# explained just below):

# %%
x = Variable(np.array([[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]]))
y = tinypytorch.sin(x) * x + x**2
y.backward(np.ones_like(y.data))
print("y.shape =", y.shape, "  x.grad.shape =", x.grad.shape)
print("x.grad =", x.grad)
formula = np.cos(x.data) * x.data + np.sin(x.data) + 2 * x.data
print(f"largest difference from the formula: {np.abs(x.grad - formula).max():.1e}")

# %% [markdown]
# ### What `backward` of an array means
#
# A gradient is defined for a *scalar* $L$. When `y` is an array, the seed
# $g = \partial L / \partial y$ is an array shaped like `y`, and ones are exactly
# the gradient of $L = \sum_i y_i$, since $\partial L / \partial y_i = 1$. So
# `y.backward(np.ones_like(y.data))` computes the gradient of the sum of its
# elements, as `y.sum().backward()` does.
#
# Steps 09–22 seeded ones whenever no seed was given. PyTorch refuses to guess,
# and the package follows PyTorch: for an output of more than one element,
# `backward()` needs the seed spelt out, or the sum taken first.

# %%
import torch

t = torch.tensor(x.data, requires_grad=True)
yt = torch.sin(t) * t + t**2
for name, output in [("tinypytorch", y), ("torch", yt)]:
    try:
        output.backward()
    except RuntimeError as error:
        print(f"{name:11} RuntimeError: {error}")
yt.backward(gradient=torch.ones_like(yt))
print("with an explicit seed of ones, the same grad:", np.allclose(x.grad, t.grad.numpy(), rtol=1e-12))

# %% [markdown]
# Notice also what backward did *not* do: it never built the $6 \times 6$
# Jacobian. It multiplied the incoming gradient by the diagonal, which costs
# one operation per element. Every backward method in this framework computes
# such a *vector-Jacobian product* $g^\top J$ directly, without forming $J$;
# for an input of a million elements, $J$ would have $10^{12}$ entries.
#
# ## `reshape`: the same elements in a new shape
#
# `reshape` arranges the elements of an array into another shape with the
# same number of elements. NumPy reads and writes them in row-major order
# (the last index changes fastest), so a $2 \times 3$ matrix reshaped to
# $(6,)$ lists the first row, then the second.
#
# No value changes: each element of $y$ *is* one element of $x$. The
# gradient of each $x$ element is therefore the gradient of the $y$ element it
# became, and those sit in the same row-major order. Backward reshapes the
# incoming gradient back to the input's shape, which forward remembered:

# %%
show_code(F.Reshape)
show_code(F.reshape)

# %% [markdown]
# Two details. Like NumPy and PyTorch, one entry of the new shape may be $-1$:
# it is worked out from the size. And a reshape to the shape the variable
# already has returns the variable itself, recording nothing.
#
# To see that the gradient lands in the right places, the example multiplies
# the reshaped variable by a vector of distinct weights $w$: the gradient of
# $\sum_k w_k y_k$ with respect to $y$ is $w$, so `x.grad` must be $w$ laid
# out as a $2 \times 3$ matrix.

# %%
x = Variable(np.arange(6.0).reshape(2, 3))
y = F.reshape(x, (6,))
w = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
(y * w).sum().backward()
print("y      =", y)
print("x.grad =", x.grad)
print("reshape to the same shape returns x itself:", F.reshape(x, (2, 3)) is x)

# %% [markdown]
# ### The method `x.reshape(...)`
#
# NumPy and PyTorch also offer `reshape` as a method that takes the shape as a
# tuple or as separate numbers. `Variable` gets the same method; it calls
# `tinypytorch.functions.reshape`. The method is not written inside the
# `Variable` class in `core.py`: `functions.py` imports `core.py`, so `core.py`
# cannot import it back without an import circle. It lives in
# `tensor_methods.py`, with every method of `Variable` that calls a module
# above the core, and `import tinypytorch` wires them onto `Variable` once
# (`wire_tensor_methods`; DeZero's `setup_variable` does the same for its
# operators). For the user it is a method like any other.

# %%
show_code(Variable.reshape)

x = Variable(np.arange(6.0).reshape(2, 3))
calls = {
    "x.reshape(3, 2)": x.reshape(3, 2),
    "x.reshape((3, 2))": x.reshape((3, 2)),
    "x.reshape(-1, 2)": x.reshape(-1, 2),
    "x.reshape(6)": x.reshape(6),
}
for code, y in calls.items():
    print(f"{code:18} {y.data.tolist()}")

# %% [markdown]
# ## `transpose` and `permute`: moving dimensions
#
# The transpose of a matrix swaps its two dimensions: $y_{ij} = x_{ji}$.
# PyTorch generalises it to arrays of any number of dimensions in two ways.
#
# - `transpose(x, dim0, dim1)` swaps two dimensions and leaves the others
#   where they are. For a stack of matrices of shape $(B, N, M)$,
#   `transpose(x, -2, -1)` transposes every matrix (negative dims count from
#   the end); step 31 needs exactly that.
# - `permute(x, dims)` reorders all of them: with `dims` $= (p_0, p_1, \ldots)$,
#   dimension $k$ of $y$ is dimension $p_k$ of $x$, so $y$ has shape
#   $(n_{p_0}, n_{p_1}, \ldots)$ and
#
# $$ y[i_0, i_1, \ldots] = x[j_0, j_1, \ldots] \quad\text{with } j_{p_k} = i_k. $$
#
# A swap of two dimensions is one particular permutation, so a single
# `Function`, `Transpose`, holding a permutation, records both. Its forward
# pass is NumPy's `ndarray.transpose(perm)`, which, despite the name, is a
# full permutation.
#
# Again no value changes, only where each element sits, so the gradient must
# be moved back to where each element came from. That is the *inverse*
# permutation: dimension $i$ of $x$ went to position $k$ with $p_k = i$, that
# is, position `perm.index(i)`. A worked example with a $2 \times 3 \times 4$
# array and `dims = (1, 2, 0)`: $y$ has shape $(3, 4, 2)$. Dimension 0 of $x$
# is now dimension 2 of $y$, dimension 1 is dimension 0, dimension 2 is
# dimension 1, so the inverse is $(2, 0, 1)$, and permuting $y$ by it gives
# back $x$'s shape and $x$:

# %%
show_code(F.Transpose)

x = Variable(np.arange(24.0).reshape(2, 3, 4))
y = F.permute(x, (1, 2, 0))
perm = y.creator.perm
inverse = tuple(perm.index(i) for i in range(len(perm)))
print("y.shape =", y.shape, "  inverse permutation:", inverse)
print("permute(y, inverse) equals x:", np.array_equal(F.permute(y, inverse).data, x.data))

# %% [markdown]
# `permute` and `transpose` only work out the permutation; `transpose` builds
# it by swapping two entries of $(0, 1, \ldots, n - 1)$. A permutation that
# moves nothing returns the variable itself, as a reshape to the same shape
# does.

# %%
show_code(F._apply_permutation)
show_code(F.permute)
show_code(F.transpose)

x = Variable(np.zeros((5, 2, 3)))
print("transpose(x, -2, -1).shape  =", F.transpose(x, -2, -1).shape)
print("transpose(x, 0, 2).shape    =", F.transpose(x, 0, 2).shape)
print("permute(x, (2, 0, 1)).shape =", F.permute(x, (2, 0, 1)).shape)
print("transpose(x, 1, 1) is x:", F.transpose(x, 1, 1) is x)

# %% [markdown]
# The gradient follows its element. Multiplying $y = x^\top$ by a matrix $w$
# of distinct weights gives $\partial L / \partial y = w$, so
# $\partial L / \partial x = w^\top$:

# %%
x = Variable(np.arange(6.0).reshape(2, 3))
w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
(F.transpose(x, 0, 1) * w).sum().backward()
print("x.grad =", x.grad)
print("w.T    =", w.T.tolist())

# %% [markdown]
# Before anything is moved, each dim is checked the way PyTorch checks it: an
# int in $[-n, n - 1]$ for $n$ dimensions, negative values counting from the
# end. Out of range is an `IndexError`, the type PyTorch raises. (PyTorch
# lets a 0-d tensor use dim $0$ and $-1$, as if it had one dimension; so does
# `_dim`.) `permute` also needs each of the $n$ dims exactly once.

# %%
show_code(F._dim)
show_code(F._permutation)

# %% [markdown]
# ### The methods `x.transpose`, `x.permute` and `x.T`
#
# The methods take PyTorch's arguments: `x.transpose(dim0, dim1)`, and
# `x.permute(2, 0, 1)` or `x.permute((2, 0, 1))`. The property `x.T` reverses
# all the dimensions, as NumPy's `.T` does; for a matrix, that is its
# transpose. (PyTorch's `.T` does the same, but warns that it is deprecated
# for anything but a matrix; its `x.mT` transposes the last two dimensions.)

# %%
show_code(Variable.transpose)
show_code(Variable.permute)
show_code(Variable.T.fget)

x, t = Variable(np.zeros((2, 3, 4))), torch.zeros(2, 3, 4)
print("x.transpose(0, 2).shape  =", x.transpose(0, 2).shape, " torch:", tuple(t.transpose(0, 2).shape))
print("x.permute(2, 0, 1).shape =", x.permute(2, 0, 1).shape, " torch:", tuple(t.permute(2, 0, 1).shape))
print("x.T.shape                =", x.T.shape)

# %% [markdown]
# ### NumPy's `transpose` is `permute`
#
# NumPy uses the name differently: `ndarray.transpose(axes)` and
# `np.transpose(a, axes)` take a whole permutation, PyTorch's `permute`
# (NumPy's two-dimension swap is `np.swapaxes`). The same call can mean two
# things. For a matrix, `m.transpose(0, 1)` is the transpose in PyTorch and
# here, but the identity permutation in NumPy:

# %%
a = np.zeros((2, 3))
for kind, m in [("numpy.ndarray", a), ("torch.Tensor", torch.from_numpy(a)), ("Variable", Variable(a))]:
    print(f"{kind:13}  m.transpose(0, 1).shape = {tuple(m.transpose(0, 1).shape)}")

# %% [markdown]
# ## Bad input
#
# A reshape must keep the number of elements; a dim must exist; and the dims
# of a permutation must name each dimension once. The errors say so before
# NumPy is reached, naming the operation and what was wrong.

# %%
x = Variable(np.zeros((2, 3)))
attempts = {
    "x.reshape(4)": lambda: x.reshape(4),
    "x.reshape(4, -1)": lambda: x.reshape(4, -1),
    "x.reshape(2.0, 3.0)": lambda: x.reshape(2.0, 3.0),
    "x.transpose(0, 2)": lambda: x.transpose(0, 2),
    "x.transpose(0, 1.0)": lambda: x.transpose(0, 1.0),
    "x.permute(0, 0)": lambda: x.permute(0, 0),
    "x.permute(1, 0, 2)": lambda: x.permute(1, 0, 2),
    "x.permute(-3, 0)": lambda: x.permute(-3, 0),
}
for code, attempt in attempts.items():
    try:
        attempt()
    except (TypeError, ValueError, IndexError) as error:
        print(f"{code:20} {type(error).__name__}: {error}")

# %% [markdown]
# ## Higher derivatives come for free
#
# Both backward methods are written with `reshape` and `permute`
# themselves, functions of Variables, so with `create_graph=True` (step 27) the
# backward pass records a graph that can be differentiated again. For
# $L = \sum \tanh(x^\top)^2 \cdot w$, summed after weighting by $w$, the gradient
# flows through a transpose twice: once forwards and once in the backward pass.
# The second derivative of $\tanh^2$ is $2(1 - \tanh^2)(1 - 3\tanh^2)$ element by element:

# %%
x = Variable(np.array([[0.1, -0.4, 0.7], [1.2, -0.9, 0.3]]))
w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
(tinypytorch.tanh(x.T) ** 2 * w).sum().backward(create_graph=True)
gx = x.grad
x.cleargrad()
gx.sum().backward()  # the gradient of sum(x.grad): here the diagonal second derivative, weighted
th = np.tanh(x.data)
formula = w.T * 2 * (1 - th**2) * (1 - 3 * th**2)
print("second derivative: x.grad =", x.grad)
print(f"largest difference from the formula: {np.abs(x.grad - formula).max():.1e}")

# %% [markdown]
# ## Check against PyTorch
#
# The same expressions in PyTorch, for the three shapes of the curriculum:
# $()$, $(3,)$ and $(2, 3)$. Each result is multiplied by fixed random weights
# before the backward pass, so a gradient sent to the wrong element would
# show. Both frameworks accept the same `reshape`, `transpose` and `permute`
# calls, so each expression is written once, for the module `m` (`torch` or
# `tinypytorch`); the reversal of all dims is spelt with `permute`, since
# PyTorch's `.T` warns on anything but a matrix. Then a 3-dimensional array
# goes through `permute` and `transpose`. The arithmetic is identical element
# by element, so the tolerance is $10^{-12}$, and moving elements is exact.

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
        assert y.shape == tuple(yt.shape) and x.grad.shape == tuple(t.grad.shape)
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7}: values and grads == torch for {len(cases)} expressions")

moves = {"permute(1, 2, 0)": lambda x: x.permute(1, 2, 0), "transpose(0, 2)": lambda x: x.transpose(0, 2)}
for code, move in moves.items():
    x = Variable(np.arange(24.0).reshape(2, 3, 4))
    t = torch.arange(24.0, dtype=torch.float64).reshape(2, 3, 4).requires_grad_()
    y, yt = move(x), move(t)
    weights = np.arange(24.0).reshape(y.shape)
    (y * weights).sum().backward()
    (yt * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_array_equal(x.grad, t.grad.numpy())
    print(f"shape (2, 3, 4): {code:16} values and grads == torch, exactly")
print("PyTorch check passed: grads of element-wise ops, reshape, transpose and permute for shapes (), (3,), (2, 3)")
