# %% [markdown]
# # Step 09: Making the framework easier to use
#
# The framework computes gradients, but using it takes ceremony and it trusts
# its input blindly. This step makes four small changes:
#
# 1. `backward()` seeds the output's gradient itself, so `y.grad = np.array(1.0)`
#    is no longer needed;
# 2. `Variable` accepts only NumPy arrays (or `None`) and rejects anything else
#    with a clear `TypeError`;
# 3. `as_array` turns the NumPy scalars that NumPy sometimes returns back into
#    arrays, which change 2 makes necessary;
# 4. the plain functions `square(x)` and `exp(x)` replace `Square()(x)` and
#    `Exp()(x)`.
#
# ## `Variable`: a type check and an implicit seed

# %%
import numpy as np


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


# %% [markdown]
# **The seed.** The backward pass starts from $\frac{dy}{dy} = 1$. If the
# output has no gradient yet, `backward` now creates it with `np.ones_like`,
# which matches the shape and dtype of `data`. For an array output, a seed of
# ones computes the gradient of the sum of its elements (step 06). PyTorch is
# stricter here: `backward()` without an argument works only for a one-element
# output and otherwise raises "grad can be implicitly created only for scalar
# outputs"; for any other output one passes the seed explicitly.
#
# **The type check.** Until now `Variable(1.0)` or `Variable([1.0, 2.0])` was
# accepted, and the mistake surfaced later and elsewhere: a list fails inside
# `Square.forward` with "unsupported operand type(s) for ** or pow()", far from
# where the list came in. Failing at construction, with a message that names
# the type received, points straight at the cause. `None` stays allowed: a
# variable whose value is not known yet is useful later, for instance a layer
# parameter created before the input size is known.

# %%
for bad in (1.0, [1.0, 2.0], "1.0"):
    try:
        Variable(bad)
    except TypeError as error:
        print("TypeError:", error)
print("Variable(None).data is None:", Variable(None).data is None)

# %% [markdown]
# ## NumPy scalars and `as_array`
#
# The type check has a side effect. Step 02 noted that a 0-dimensional array
# does not stay an array under arithmetic: NumPy returns a *NumPy scalar*, an
# `np.float64`, which is not an `ndarray`. Arrays with at least one dimension
# stay arrays:

# %%
x0 = np.array(1.0)
x1 = np.array([1.0])
for expression, value in (("x0 ** 2", x0 ** 2), ("np.exp(x0)", np.exp(x0)),
                          ("x1 ** 2", x1 ** 2), ("np.exp(x1)", np.exp(x1))):
    print(f"{expression:11} -> {type(value).__name__:8} is an ndarray: {isinstance(value, np.ndarray)}")

# %% [markdown]
# So `Square()(Variable(np.array(1.0)))` would now raise our own `TypeError`,
# for input the user got right. `as_array` undoes NumPy's conversion: it turns a
# scalar (Python's or NumPy's) into a 0-dimensional array and passes everything
# else through untouched. `np.isscalar` is true for `1.0` and `np.float64(1.0)`
# but false for a 0-dimensional array, which is exactly the distinction needed.

# %%
def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


# %%
for value in (np.float64(4.0), 4.0, np.array(4.0), np.array([4.0])):
    converted = as_array(value)
    print(f"{type(value).__name__:8} {value!s:5} -> {type(converted).__name__}, ndim {converted.ndim}")

# %% [markdown]
# `Function.__call__` passes every result of `forward` through `as_array`
# before wrapping it. Nothing else in `Function` changes.

# %%
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


# %% [markdown]
# `Square` and `Exp` are unchanged.

# %%
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


# %% [markdown]
# ## `square` and `exp` as Python functions
#
# Writing `Square()(x)` creates a function object and calls it. Two small
# helpers hide the first half:

# %%
def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


# %% [markdown]
# Besides reading better, they make a rule automatic: every call gets a *new*
# function object. That matters, because a `Function` remembers the input and
# output of its call. Reusing one object twice in a graph, as in
# `f = Square(); y = f(f(x))`, overwrites the links of the first call:
# `f.input` becomes the inner result, which names `f` itself as its creator,
# and `backward` would then return to `f` forever.
#
# `numerical_diff` is unchanged. It builds `Variable(x.data - eps)` without
# `as_array`, so for a 0-dimensional `x` it now meets the type check: use it
# with arrays of at least one dimension. Step 10 lists this among the known
# limitations of stage 1, and step 11 fixes it.

# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## The composite, in its new form
#
# The composite of the previous steps is now one line, and `backward()` needs no
# seed. Every intermediate result is a 0-dimensional `ndarray` again:

# %%
x = Variable(np.array(0.5))
y = square(exp(square(x)))
y.backward()
print(f"y = {y.data:.10f}   type {type(y.data).__name__}, ndim {y.data.ndim}")
print(f"x.grad = {x.grad:.10f}")

# %% [markdown]
# Only `data` passes through `as_array`. A gradient is whatever `backward`
# returns, so for a 0-dimensional input `x.grad` is still a NumPy scalar.
# Nothing depends on that yet; in stage 3 gradients become `Variable`s
# themselves.

# %% [markdown]
# On an array input the implicit seed is an array of ones, so `x.grad` holds
# $4x_i\,e^{2x_i^2}$ for every element:

# %%
xs = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
square(exp(square(xs))).backward()
print("x.grad       =", np.array2string(xs.grad, precision=6))
print("4x e^(2x^2)  =", np.array2string(4 * xs.data * np.exp(2 * xs.data ** 2), precision=6))

# %% [markdown]
# ## Check against PyTorch
#
# We compare `square(exp(square(x))).backward()` with PyTorch for a scalar
# (where PyTorch also seeds implicitly) and for arrays (where PyTorch needs the
# seed `torch.ones_like`), with `rtol=1e-14` as before, and confirm that every
# output's `data` is an `ndarray`. Then bad input: PyTorch's `torch.tensor` converts a
# Python float without complaint, so there is nothing to compare; we assert our
# own contract instead, a `TypeError` that names the type received.

# %%
import torch

rng = np.random.default_rng(0)
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0]), rng.uniform(-1.5, 1.5, size=(2, 3))):
    x = Variable(array)
    y = square(exp(square(x)))
    y.backward()
    assert isinstance(y.data, np.ndarray)

    t = torch.tensor(array, requires_grad=True)
    ty = torch.square(torch.exp(torch.square(t)))
    if ty.ndim == 0:
        ty.backward()  # implicit seed, as in our backward()
    else:
        ty.backward(torch.ones_like(ty))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-14, atol=0)
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14, atol=0)
    print(f"shape {array.shape!s:6}: y and x.grad equal torch's")

for bad, type_name in ((1.0, "float"), ([1.0, 2.0], "list")):
    try:
        Variable(bad)
    except TypeError as error:
        assert f"got {type_name}" in str(error)
        print(f"Variable({bad!r}) raises TypeError: {error}")
    else:
        raise AssertionError(f"Variable({bad!r}) was accepted")

print("PyTorch check passed: square/exp with implicit seed equal torch; non-arrays raise a clear TypeError")
