# %% [markdown]
# # Step 19: Making `Variable` pleasant to use
#
# A `Variable` is a box around an array, and the user mostly cares about the
# array. Until now every question about it went through `.data`
# (`x.data.shape`, `x.data.dtype`), and `print(x)` showed a memory address.
# This step makes the box transparent: a `Variable` answers the questions one
# asks an `ndarray` (its shape, its number of axes and of elements, its type,
# its length), carries an optional name, and prints its data.
#
# Nothing in the engine changes; only `Variable` gains a few methods. The
# whole framework as it stands after this step is in the collapsed cell just
# below: expand it to read it all.

# %% tags=["hide-cell"]
import contextlib
import weakref

import numpy as np

from tinypytorch.utils.listing import show_change


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
# ## What changes in `Variable`
#
# The lines marked `+` are new since step 18:

# %%
show_change(19, "Variable")

# %% [markdown]
# - `@property` turns a method into an attribute computed when it is read, so
#   `x.shape` always follows the current `x.data`, even after `x.data` has
#   been replaced.
# - `len(x)` is the length of the first axis, as for an `ndarray`. A 0-d
#   variable has none; NumPy would say `len() of unsized object`, so we raise
#   a `TypeError` that says what was wrong, in PyTorch's words for a 0-d
#   tensor.
# - `name` is a label the framework never computes with; it shows in `repr`
#   and, from step 25, in drawings of the graph.
# - `__repr__` prints the data with `np.array2string`: four fixed decimals
#   (`precision=4, floatmode="fixed"`), so the text does not change from run
#   to run; commas between elements, as in a Python list; and
#   `prefix="variable("`, so the later rows of a matrix line up under the
#   first.
#
# For a $2 \times 3$ array the new attributes mean this:

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (the picture of this page)

data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
fig, ax = plt.subplots(figsize=(8, 3))
for (i, j), value in np.ndenumerate(data):
    ax.add_patch(plt.Rectangle((j, -i), 1, 1, facecolor="#cfe2f3" if i == 0 else "#fff2cc", edgecolor="0.3"))
    ax.text(j + 0.5, -i + 0.5, f"{value:.1f}", ha="center", va="center", fontsize=11)
ax.annotate("", xy=(3, 1.25), xytext=(0, 1.25), arrowprops=dict(arrowstyle="<->", color="0.3"))
ax.text(1.5, 1.4, "axis 1: 3 columns", ha="center", fontsize=10)
ax.annotate("", xy=(-0.2, -1), xytext=(-0.2, 1), arrowprops=dict(arrowstyle="<->", color="0.3"))
ax.text(-0.35, 0, "axis 0:\n2 rows", ha="right", va="center", fontsize=10)
notes = ["x.shape = (2, 3)  each axis's length", "x.ndim  = 2       how many axes",
         "x.size  = 6       how many elements", "x.dtype = float64 each element's type",
         "len(x)  = 2       rows: x.data[0] is blue"]
for k, note in enumerate(notes):
    ax.text(3.5, 1.3 - 0.58 * k, note, fontsize=10, family="monospace", va="center")
ax.set_xlim(-1.7, 9.2)
ax.set_ylim(-1.3, 1.7)
ax.set_aspect("equal")
ax.axis("off")
ax.set_title("What a Variable now says about the array it holds", fontsize=11)
plt.show()

# %% [markdown]
# ## Using them

# %%
x = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), name="x")
print("shape", x.shape, " ndim", x.ndim, " size", x.size, " dtype", x.dtype, " len", len(x))
print(x)
try:
    len(Variable(np.array(1.0)))
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# Negative numbers get a column for their sign, so the values still line up,
# and a variable without data says so. Names help when several variables are
# printed together; a gradient stays a plain `ndarray` and prints as one (`z`
# has none left: step 18 released it).

# %%
print(Variable(np.array([-1.0, 0.5, 2.0])), " ", Variable(None))
a = Variable(np.array(3.0), name="a")
b = Variable(np.array(4.0), name="b")
z = add(square(a), square(b))
z.backward()
for v in (a, b, z):
    print(f"{v!r:26} grad = {v.grad}")

# %% [markdown]
# ## Check against PyTorch
#
# The attributes must equal those of a torch tensor holding the same array
# (`shape`, `dim()`, `numel()`, `dtype`, `len`), for 0-d to 3-d arrays and
# two dtypes; `len` of a 0-d one fails with a `TypeError` for both. The tests
# also fix the `repr` strings, which later pages rely on.

# %% tags=["hide-input"]
import torch  # noqa: E402


def len_error(obj):
    """The TypeError message of len(obj), or None when len works."""
    try:
        len(obj)
    except TypeError as error:
        return str(error)
    return None


# %%
for array in (np.array(1.5), np.arange(3.0), np.ones((2, 3)), np.zeros((2, 3, 4), np.float32)):
    v, t = Variable(array), torch.tensor(array)
    assert (v.shape, v.ndim, v.size) == (tuple(t.shape), t.dim(), t.numel())
    assert str(t.dtype) == f"torch.{v.dtype}"
    assert (len(v) == len(t)) if v.ndim else ("0-d" in len_error(v) and "0-d" in len_error(t))
    print(f"shape {v.shape!s:10} ndim {v.ndim}  size {v.size:2}  dtype {v.dtype!s:7} len: as torch")
print("PyTorch check passed: shape, ndim, size, dtype and len equal the torch tensor's")

# %% [markdown]
# ## Recap
#
# - A `Variable` forwards `shape`, `ndim`, `size` and `dtype` to its array with
#   read-only properties, which follow `x.data` when it is replaced.
# - `len(x)` is the first axis's length; for a 0-d variable it is a
#   `TypeError` that says so, as in PyTorch.
# - `name` labels a variable for people: `repr` and, later, graph drawings.
# - `repr` prints the data with four fixed decimals and no address, so
#   outputs are the same on every run.
#
# ## Exercises
#
# 1. Give `Variable` PyTorch's `item()`: the single value as a Python number,
#    for a variable of exactly one element (of any shape); otherwise a
#    `RuntimeError` like torch's `a Tensor with 6 elements cannot be converted
#    to Scalar`.

# %% tags=["hide-cell"]
def item(self):
    if self.size != 1:
        raise RuntimeError(f"a Variable with {self.size} elements cannot be converted to Scalar")
    return self.data.item()  # ndarray.item gives a Python float (or int)


Variable.item = item
print(Variable(np.array([[2.5]])).item(), type(Variable(np.array(7)).item()).__name__)

# %% [markdown]
# 2. PyTorch's `repr` says how a tensor was made:
#    `tensor(25., grad_fn=<AddBackward0>)`. Write `repr_with_creator(v)`,
#    which appends `creator=Add` (the creator's class name) to our `repr`
#    when the variable has a creator, and leaves a leaf's `repr` as it is.

# %% tags=["hide-cell"]
def repr_with_creator(v):
    text = repr(v)
    if v.creator is None:
        return text
    return f"{text[:-1]}, creator={type(v.creator).__name__})"  # before the closing parenthesis


a = Variable(np.array(3.0), name="a")
print(repr_with_creator(add(square(a), a)), " ", repr_with_creator(a))
