# %% [markdown]
# # Step 09: Making the framework easier to use
#
# The framework computes gradients, but using it takes ceremony and it trusts
# its input blindly. This step's idea is **usability**, in three small changes
# and a convenience:
#
# 1. `backward()` seeds the output's gradient itself: no more
#    `y.grad = np.array(1.0)`;
# 2. `Variable` accepts only NumPy arrays (or `None`) and refuses anything else
#    with a `TypeError` that names what it got;
# 3. `as_array` turns the NumPy scalars that NumPy returns for 0-d arithmetic
#    back into arrays, which change 2 makes necessary;
# 4. `square(x)` and `exp(x)` replace `Square()(x)` and `Exp()(x)`.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from tinypytorch.utils.listing import show_change
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# The whole framework as it stands after this step is in the collapsed cell
# below; the changes since step 08 are shown one by one.

# %% tags=["hide-cell"]
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)  # one step of the chain rule
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(as_array(y))  # NumPy may return a scalar for 0-d input
        output.set_creator(self)  # the output remembers where it came from
        self.input = input  # kept for backward, which needs the input's value
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError()

    def backward(self, gy):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.input.data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.input.data
        return np.exp(x) * gy


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## A type check and an implicit seed

# %%
show_change(9, "Variable.__init__", "Variable.backward")

# %% [markdown]
# **The seed.** The backward pass starts from $dy/dy = 1$; `np.ones_like`
# gives it `data`'s shape and dtype. For an array output, a seed of ones
# computes the gradient of the sum of its elements (step 06). PyTorch is
# stricter: a bare `backward()` works only for a one-element output and
# otherwise raises "grad can be implicitly created only for scalar outputs".
#
# **The type check.** Until now `Variable([1.0, 2.0])` was accepted and failed
# later, inside `Square.forward`, far from where the list came in. Now the
# mistake is caught where it is made. `None` stays allowed, for a value not
# known yet (a layer's parameter before the input size is known, later on).

# %%
for bad in (1.0, [1.0, 2.0]):
    try:
        Variable(bad)
    except TypeError as error:
        print("TypeError:", error)

# %% [markdown]
# ## NumPy scalars and `as_array`
#
# The type check has a side effect: arithmetic on a 0-d array gives a *NumPy
# scalar*, an `np.float64`, not an `ndarray` (an array of one or more
# dimensions stays an array). `Square()(Variable(np.array(1.0)))` would now
# raise our own `TypeError` for input the user got right.

# %%
x0 = np.array(1.0)
print(f"type(x0 ** 2) = {type(x0 ** 2).__name__}, an ndarray: {isinstance(x0 ** 2, np.ndarray)}")

# %% [markdown]
# `as_array` undoes that: `np.isscalar` is true for `1.0` and `np.float64(1.0)`
# but false for a 0-d array, exactly the distinction needed, and
# `Function.__call__` passes every result of `forward` through it:

# %%
show_change(9, "as_array", "Function.__call__")


# %% tags=["hide-input"]
def as_array_picture():
    """The value of square(x) for a 0-d x, from forward to the output Variable, with its type on the way."""
    nodes = {"x": ("leaf", "x.data\n0-d ndarray"), "pow": ("function", "x ** 2"),
             "s": ("variable", "np.float64\n(a scalar)"), "as": ("highlight", "as_array"),
             "y": ("output", "y.data\n0-d ndarray")}
    _, ax = plt.subplots(figsize=(8, 2.0))
    positions = {name: (2 * i, 0) for i, name in enumerate(nodes)}
    names = list(nodes)
    draw_dag(nodes, list(zip(names, names[1:])), ax=ax, positions=positions,
             title="inside Function.__call__ for a 0-d input: as_array puts the array back")
    plt.show()


as_array_picture()

# %% [markdown]
# Only `data` passes through `as_array`; a gradient is whatever `backward`
# returns, so for a 0-d input `x.grad` is still a NumPy scalar (step 12 wraps
# gradients too). `numerical_diff` builds `Variable(x.data - eps)` without
# `as_array`, so for now it needs an input of at least one dimension; step 11
# fixes it.
#
# ## `square` and `exp`
#
# Two helpers hide the creation of the function object, and make a rule
# automatic: every call gets a *new* `Function`. That matters because a
# `Function` remembers the input and output of its latest call; reusing one
# object twice in a graph would overwrite the first call's links.

# %%
show_change(9, "square", "exp")

# %% [markdown]
# The composite of the previous steps is now one line, and `backward()` needs
# no seed. On an array input the seed is all ones, so `x.grad` holds
# $4x_i\,e^{2x_i^2}$ for every element:

# %%
x = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
y = square(exp(square(x)))
y.backward()
print("x.grad      =", np.array2string(x.grad, precision=6))
print("4x e^(2x^2) =", np.array2string(4 * x.data * np.exp(2 * x.data ** 2), precision=6))

# %% [markdown]
# ## Check against PyTorch
#
# `square(exp(square(x))).backward()` against PyTorch for a scalar (where
# PyTorch too seeds implicitly) and for arrays (where PyTorch needs the seed
# `torch.ones_like`), `rtol=1e-14` as before; every output is an `ndarray`.
# For bad input there is nothing to compare (`torch.tensor(1.0)` converts a
# float without complaint): we assert our own contract, a `TypeError` naming
# the type received.

# %%
rng = np.random.default_rng(0)
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0]), rng.uniform(-1.5, 1.5, size=(2, 3))):
    x = Variable(array)
    y = square(exp(square(x)))
    y.backward()
    assert isinstance(y.data, np.ndarray)
    t = torch.tensor(array, requires_grad=True)
    ty = torch.square(torch.exp(torch.square(t)))
    ty.backward() if ty.ndim == 0 else ty.backward(torch.ones_like(ty))  # torch seeds only a scalar
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-14, atol=0)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)
for bad, type_name in ((1.0, "float"), ([1.0, 2.0], "list")):
    try:
        Variable(bad)
        raise AssertionError(f"Variable({bad!r}) was accepted")
    except TypeError as error:
        assert f"got {type_name}" in str(error)
print("PyTorch check passed: square/exp with implicit seed equal torch; non-arrays raise a clear TypeError")

# %% [markdown]
# ## Recap
#
# - `backward()` seeds $dy/dy$ with `np.ones_like(y.data)`; PyTorch does so
#   only for a one-element output.
# - `Variable` refuses anything but an `ndarray` (or `None`), naming the type
#   it got: the error appears where the mistake is made.
# - NumPy turns 0-d results into scalars; `as_array` in `Function.__call__`
#   turns them back, so every `data` is an `ndarray`.
# - `square(x)` and `exp(x)` make a fresh `Function` per call.
#
# ## Exercises
#
# **1. Backprop ninja: `tanh`.** Write `Tanh` and `tanh(x)`. Work the
# backward out by hand and use the output you already have:
# $\frac{d}{dx}\tanh x = 1 - \tanh^2 x$.

# %% tags=["hide-cell"]
class Tanh(Function):
    def forward(self, x):
        return np.tanh(x)

    def backward(self, gy):
        y = self.output.data
        return (1 - y ** 2) * gy


def tanh(x):
    return Tanh()(x)


x = Variable(np.array([-1.0, 0.0, 2.0]))
square(tanh(x)).backward()
print("d tanh(x)^2/dx =", np.array2string(x.grad, precision=6))


# %% [markdown]
# **2. A friendlier constructor.** Write `variable(value)`, which accepts a
# Python number, a list or an array and makes a float64 `Variable` of it, as
# `torch.tensor(value, dtype=torch.float64)` does, and, like `torch.tensor`,
# refuses a string with a `TypeError`.

# %% tags=["hide-cell"]
def variable(value):
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":  # booleans, integers and floats
        raise TypeError(f"cannot make a Variable of {type(value).__name__} data")
    return Variable(array.astype(np.float64))


print(variable(3).data, variable([1, 2.5]).data)


# %% [markdown]
# **3. PyTorch's seed rule.** Write `backward_like_torch(y)`, which seeds
# implicitly only when `y` has one element and otherwise raises PyTorch's
# `RuntimeError`.

# %% tags=["hide-cell"]
def backward_like_torch(y):
    if y.data.size != 1:
        raise RuntimeError("grad can be implicitly created only for scalar outputs")
    y.backward()


try:
    backward_like_torch(square(Variable(np.array([1.0, 2.0]))))
except RuntimeError as error:
    print("RuntimeError:", error)
