# %% [markdown]
# # Step 19: Making `Variable` pleasant to use
#
# The engine is complete for this stage: variadic functions, accumulation,
# generation order, weak references, configuration. The next four steps make
# `Variable` comfortable to work with. This one lets a `Variable` answer the
# questions one asks an `ndarray` (its shape, its type, its length), gives it
# an optional name, and makes it print as something readable.
#
# ## A transparent box
#
# A `Variable` is a box around an array, and the user mostly cares about the
# array. Until now every question about it went through `.data`:
# `x.data.shape`, `x.data.dtype`. Read-only properties forward the common
# ones, so that a `Variable` can be used where code expects an array-like
# object:
#
# | attribute | meaning | for a $2 \times 3$ array |
# |---|---|---|
# | `shape` | size along each axis | `(2, 3)` |
# | `ndim` | number of axes | `2` |
# | `size` | number of elements, the product of `shape` | `6` |
# | `dtype` | element type | `float64` |
#
# `@property` turns a method into an attribute that is computed when read, so
# `x.shape` always reflects the current `x.data`, even after `x.data` has been
# replaced.
#
# `len(x)` is the length of the first axis, as for an `ndarray`. A 0-d variable
# has no first axis; NumPy reports that as `len() of unsized object`, which
# does not say what was wrong. We raise a `TypeError` that names the problem,
# with the same message PyTorch uses for a 0-d tensor (with `Variable` for
# `tensor`).
#
# ## A name
#
# `Variable(data, name="x")` attaches a label. The framework does not use it
# for computing; it shows up in `repr` and, in step 25, in drawings of the
# graph, where a graph with a dozen unnamed boxes is hard to read.
#
# ## A readable, stable `repr`
#
# Python's default `repr` of an object shows its class and its memory address,
# which says nothing about the contents and changes on every run. We define
# `__repr__` so that `print(x)` and the notebook show the data:
#
# ```
# variable([[1.0000, 2.0000],
#           [3.0000, 4.0000]])
# ```
#
# It is built with `np.array2string`:
#
# - `precision=4, floatmode="fixed"` prints every float with exactly four
#   decimals, so columns line up and the output does not depend on how many
#   digits a value happens to need;
# - `separator=", "` puts commas between elements, as in PyTorch's `tensor(...)`
#   and a Python list, which makes the output easy to copy back into code;
# - `prefix="variable("` tells NumPy how far the opening bracket is indented,
#   so the second and later rows of a matrix line up under the first.
#
# A name, when set, is appended as `name='x'`, and a variable without data
# prints as `variable(None)`.
#
# ## The framework after this step
#
# Only `Variable` changes.

# %%
import contextlib
import weakref

import numpy as np


class Config:
    enable_backprop = True  # record the graph in Function.__call__


@contextlib.contextmanager
def using_config(name, value):
    known = [key for key in vars(Config) if not key.startswith("_")]
    if name not in known:  # a typo would otherwise set a new attribute and change nothing
        raise ValueError(f"using_config: unknown option {name!r}; known options: {', '.join(known)}")
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:  # restore even when the block raises
        setattr(Config, name, old_value)


def no_grad():
    return using_config("enable_backprop", False)


# %%
class Variable:
    def __init__(self, data, name=None):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.name = name
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf
        self.generation = 0

    @property
    def shape(self):
        return self.data.shape

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def dtype(self):
        return self.data.dtype

    def __len__(self):
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d Variable")  # NumPy would say "len() of unsized object"
        return len(self.data)

    def __repr__(self):
        if self.data is None:
            return "variable(None)"
        body = np.array2string(self.data, precision=4, floatmode="fixed", separator=", ", prefix="variable(")
        name = "" if self.name is None else f", name={self.name!r}"
        return f"variable({body}{name})"

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        self.grad = None

    def backward(self, retain_grad=False):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = []  # functions whose backward has still to run
        seen = set()

        def add_func(f):
            if f not in seen:  # a function reached through several outputs runs once
                funcs.append(f)
                seen.add(f)
                funcs.sort(key=lambda func: func.generation)  # highest generation last, for pop()

        if self.creator is not None:  # a leaf: nothing to propagate to
            add_func(self.creator)
        while funcs:
            f = funcs.pop()
            gys = [output().grad for output in f.outputs]  # outputs are weak references: call to get the Variable
            gxs = f.backward(*gys)  # one step of the chain rule
            if not isinstance(gxs, tuple):  # one input: treat its gradient as a 1-tuple
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs, strict=True):
                if x.grad is None:
                    x.grad = as_array(gx)  # 0-d arithmetic gives a NumPy scalar: keep grads ndarrays like data
                else:
                    x.grad = as_array(x.grad + gx)  # a new array, never `+=`: gx may be another variable's grad
                if x.creator is not None:
                    add_func(x.creator)  # continue towards the leaves
            if not retain_grad:
                for output in f.outputs:
                    output().grad = None  # used up, the seed included: f was the only function that needed it


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


# %%
class Function:
    def __call__(self, *inputs):
        xs = [x.data for x in inputs]  # unwrap: forward works on plain ndarrays
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):  # one array: treat it as a 1-tuple from here on
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]  # NumPy may return a scalar for 0-d input
        if Config.enable_backprop:  # under no_grad nothing links the outputs to this function or its inputs
            self.generation = max(x.generation for x in inputs)
            for output in outputs:
                output.set_creator(self)  # the output remembers where it came from
            self.inputs = inputs  # kept for backward, which needs the input values
            self.outputs = [weakref.ref(output) for output in outputs]  # weak: output.creator -> self is not a cycle
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *gys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")


# %%
class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.inputs[0].data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.inputs[0].data
        return np.exp(x) * gy


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy  # dy/dx0 = dy/dx1 = 1


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def add(x0, x1):
    return Add()(x0, x1)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## The properties
#
# The example from the source material, with a float array:

# %%
x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
print("shape =", x.shape)
print("ndim  =", x.ndim)
print("size  =", x.size)
print("dtype =", x.dtype)
print("len   =", len(x))

# %% [markdown]
# `len` of a 0-d variable is an error, and says which:

# %%
try:
    len(Variable(np.array(1.0)))
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# ## The `repr`
#
# 0-d, 1-d, 2-d and 3-d data, integer data, a name, and no data:

# %%
print(Variable(np.array(1.5)))
print(Variable(np.array([1.0, 2.0])))
print(Variable(np.array([[1.0, 2.0], [3.0, 4.0]])))
print(Variable(np.arange(8.0).reshape(2, 2, 2)))
print(Variable(np.array([1, 2, 3])))
print(Variable(np.array(2.0), name="x"))
print(Variable(None))

# %% [markdown]
# Each row of the matrix starts under the first, and the blocks of the 3-d
# array are separated by a blank line, as NumPy prints them. Negative numbers
# get a column for their sign, and very large or small values switch to
# scientific notation for the whole array, still with four decimals:

# %%
print(Variable(np.array([-1.0, 0.5, 2.0])))
print(Variable(np.array([1e-8, 1.0, 1e8])))

# %% [markdown]
# The gradient is a plain `ndarray` and prints as one. Naming the inputs helps
# when several are printed together. `z` has no gradient left: as every output
# of a function, it gave up its seed once the backward pass had used it
# (step 18).

# %%
x = Variable(np.array(3.0), name="x")
y = Variable(np.array(4.0), name="y")
z = add(square(x), square(y))
z.backward()
for v in (x, y, z):
    print(f"{v!r:28} grad = {v.grad}")

# %% [markdown]
# ## Check against PyTorch
#
# The properties must agree with the corresponding attributes of a torch tensor
# (`shape`, `dim()`, `numel()`, `dtype`, `len`), and `len` of a 0-d variable
# must fail with a `TypeError`, as it does for a 0-d tensor. The check also
# fixes the `repr` of 0-d, 1-d, 2-d and named variables to the exact strings
# above: they are part of the framework's interface, and notebooks rely on
# them not changing.

# %%
import torch

for array in (np.array(1.5), np.array([1.0, 2.0, 3.0]), np.arange(6.0).reshape(2, 3), np.zeros((2, 3, 4), dtype=np.float32)):
    v, t = Variable(array), torch.tensor(array)
    assert v.shape == tuple(t.shape) and v.ndim == t.dim() and v.size == t.numel()
    assert str(t.dtype) == f"torch.{v.dtype}"
    if v.ndim:
        assert len(v) == len(t)
    else:
        for obj in (v, t):
            try:
                len(obj)
                raise AssertionError("len() of a 0-d object should fail")
            except TypeError as error:
                assert "len() of a 0-d" in str(error)
    print(f"shape {v.shape!s:10} ndim {v.ndim}  size {v.size:2}  dtype {v.dtype!s:7} == torch")

assert repr(Variable(np.array(1.5))) == "variable(1.5000)"
assert repr(Variable(np.array([1.0, 2.0]))) == "variable([1.0000, 2.0000])"
assert repr(Variable(np.array([[1.0, 2.0], [3.0, 4.0]]))) == "variable([[1.0000, 2.0000],\n          [3.0000, 4.0000]])"
assert repr(Variable(np.array(2.0), name="x")) == "variable(2.0000, name='x')"
assert repr(Variable(None)) == "variable(None)"
print("repr of 0-d, 1-d, 2-d, named and empty variables: as specified")

print("PyTorch check passed: shape, ndim, size, dtype and len equal the torch tensor's; repr is stable")
