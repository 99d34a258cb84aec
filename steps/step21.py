# %% [markdown]
# # Step 21: Mixing variables with arrays and numbers
#
# After step 20, `a * b + c` works when all three are `Variable`s. Formulas
# are full of constants, though: $3x + 1$, $0.5\,x^2$, an array of weights
# that is not being trained. This step lets a Python number, a NumPy scalar
# or an `ndarray` stand on either side of `+` and `*`. Three pieces do it:
#
# - `as_variable` turns such an operand into a `Variable` (a constant leaf of
#   the graph), and `Function.__call__` applies it to every input;
# - `__radd__` and `__rmul__` handle a number on the *left*, `3.0 * x`;
# - `__array_priority__` makes an array on the left, `np.array(2.0) + x`,
#   step aside for `Variable`.
#
# The whole framework after this step is in the collapsed cell below.

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
    __array_priority__ = 200  # above ndarray's 0.0: `ndarray + Variable` calls Variable.__radd__

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

    def __add__(self, other):  # x + other
        return add(self, other)

    def __radd__(self, other):  # other + x, when other cannot add a Variable
        return add(other, self)

    def __mul__(self, other):  # x * other
        return mul(self, other)

    def __rmul__(self, other):  # other * x
        return mul(other, self)

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


def as_variable(obj, op="as_variable"):
    if isinstance(obj, Variable):
        return obj
    if isinstance(obj, (np.ndarray, int, float, np.number)):
        return Variable(as_array(obj))
    raise TypeError(f"{op}: unsupported operand type {type(obj).__name__}")


class Function:
    def __call__(self, *inputs):
        op = type(self).__name__.lower()  # names the operation in error messages: "add", "mul", ...
        inputs = tuple(as_variable(x, op) for x in inputs)
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


class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy * x1, gy * x0  # dy/dx0 = x1, dy/dx1 = x0


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def add(x0, x1):
    return Add()(x0, x1)


def mul(x0, x1):
    return Mul()(x0, x1)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Converting the operands
#
# A `Variable` passes through `as_variable` unchanged; an `ndarray`, a Python
# `int` or `float` or a NumPy scalar becomes a new `Variable` (numbers through
# `as_array`, as 0-d arrays); anything else is a `TypeError` that names the
# operation, taken from the class name (`Add` gives `add`), rather than an
# error from deep inside NumPy. Because the conversion sits in
# `Function.__call__`, every function gets it, `square(2.0)` included.

# %%
show_change(21, "as_variable", "Function.__call__")

# %% [markdown]
# The constant is a leaf like any other, and the backward pass computes a
# gradient for it too, which nobody reads. PyTorch skips that work for tensors
# with `requires_grad=False`, which step 33 introduces.
#
# ## Which method Python calls
#
# For `x * 3.0` Python calls `x.__mul__(3.0)`, which now works. For `3.0 * x`
# it first calls `float.__mul__(3.0, x)`. A `float` does not know `Variable`
# and returns the special value `NotImplemented`, so Python tries the
# *reflected* method of the right operand, `x.__rmul__(3.0)`.
#
# An `ndarray` on the left does not give up so easily: `ndarray.__add__`
# accepts almost anything, treating an unknown object as one element. NumPy
# steps aside only for an object with a higher `__array_priority__` than the
# array's ($0.0$) that defines the reflected method. `Variable` sets it to
# 200, as DeZero does.

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (the picture of this page)

rows = [(0.72, ["3.0 * x", "(3.0).__mul__(x)", "x.__rmul__(3.0)", "mul(3.0, x)"], "NotImplemented"),
        (0.22, ["a + x\n(a = np.array(2.0))", "a.__add__(x)", "x.__radd__(a)", "add(a, x)"],
         "NotImplemented:\npriority 200 > 0.0")]
colours = ["lightblue", "lightgrey", "#ffcc80", "#caff70"]
fig, ax = plt.subplots(figsize=(8, 3))
for y, labels, refusal in rows:
    boxes = [ax.text(x, y, label, ha="center", va="center", fontsize=9, transform=ax.transAxes,
                     bbox=dict(boxstyle="round,pad=0.4", facecolor=colour, edgecolor="0.3"))
             for x, label, colour in zip([0.09, 0.37, 0.64, 0.9], labels, colours)]
    for k, (start, end) in enumerate(zip(boxes, boxes[1:])):
        ax.annotate("", xy=(0, 0.5), xycoords=end, xytext=(1, 0.5), textcoords=start,
                    arrowprops=dict(arrowstyle="-|>", color="0.35", shrinkA=4, shrinkB=4))
    ax.text(0.505, y - 0.1, refusal, ha="center", va="top", fontsize=8, color="#b22222", transform=ax.transAxes)
ax.text(0.37, 0.98, "Python asks the left operand", ha="center", va="top", fontsize=9, transform=ax.transAxes)
ax.text(0.64, 0.98, "then the Variable", ha="center", va="top", fontsize=9, transform=ax.transAxes)
ax.axis("off")
ax.set_title("A constant on the left of an operator", fontsize=11)
plt.show()

# %% [markdown]
# The reflected methods pass the operands on in their written order,
# `mul(other, self)`, so the graph records `3.0 * x` as `Mul(3.0, x)`. For `+`
# and `*` the order does not matter; for step 22's `-` and `/` it will.

# %%
show_change(21, "Variable")

# %% [markdown]
# $y = 3x + 1$ has $dy/dx = 3$ whichever side the constants are written on:

# %%
x = Variable(np.array(2.0), name="x")
for text, build in [("3.0 * x + 1.0", lambda v: 3.0 * v + 1.0), ("x * 3.0 + 1.0", lambda v: v * 3.0 + 1.0),
                    ("np.array(3.0) * x + 1", lambda v: np.array(3.0) * v + 1)]:
    x.cleargrad()
    y = build(x)
    y.backward()
    print(f"{text:22} y = {y!r:18} dy/dx = {x.grad}")

# %% [markdown]
# ## Without `__array_priority__`
#
# A subclass that sets the priority back to NumPy's $0.0$ shows what the
# attribute prevents:

# %%
class VariableWithoutPriority(Variable):
    __array_priority__ = 0.0


x = VariableWithoutPriority(np.array([10.0, 20.0]))
y = np.array([1.0, 2.0]) + x
print("type:", type(y).__name__, " dtype:", y.dtype, " shape:", y.shape)
print("y[0] =", y[0], "  y[1] =", y[1])

# %% [markdown]
# NumPy added the whole variable to each element separately: `y[0]` is
# $1 + x$ and `y[1]` is $2 + x$, each a full-size `Variable`. The result is
# not a `Variable`, cannot be backpropagated through, and has the wrong
# values. With the priority, `__radd__` gets the whole array and the result
# is one `Variable`, $(11, 22)$.
#
# The operator methods raise the `TypeError` themselves instead of returning
# `NotImplemented`, so the message names the operation whichever side the bad
# operand is on:

# %%
x = Variable(np.array(2.0))
for text, build in [('x + "abc"', lambda: x + "abc"), ("[1, 2] * x", lambda: [1, 2] * x)]:
    try:
        build()
    except TypeError as error:
        print(f"{text:10} TypeError: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# `np.array(2.0) + x` and `3.0 * x` must give PyTorch's values and gradients
# for a scalar and an array `x`, and both results must be `Variable`s.
# (PyTorch's counterpart of the 0-d array is a 0-d float64 tensor.)

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,)]:
    value = rng.standard_normal(shape)
    for text, ours, theirs in [("np.array(2.0) + x", lambda v: np.array(2.0) + v,
                                lambda t: torch.tensor(2.0, dtype=torch.float64) + t),
                               ("3.0 * x", lambda v: 3.0 * v, lambda t: 3.0 * t)]:
        x, xt = Variable(value), torch.tensor(value, requires_grad=True)
        y, yt = ours(x), theirs(xt)
        y.backward()
        yt.sum().backward()
        assert isinstance(y, Variable)
        np.testing.assert_array_equal(y.data, yt.detach().numpy())
        np.testing.assert_array_equal(x.grad, xt.grad.numpy())
        print(f"shape {shape!s:5} {text:18} a Variable; value and grad == torch")
print("PyTorch check passed: np.array(2.0) + x and 3.0 * x give torch's values and grads")

# %% [markdown]
# ## Recap
#
# - `Function.__call__` passes every input through `as_variable`: numbers and
#   arrays become constant leaves; other types are a `TypeError` naming the
#   operation.
# - For `3.0 * x` Python tries `float.__mul__` first, gets `NotImplemented`,
#   then calls `x.__rmul__(3.0)`, which keeps the written order.
# - An `ndarray` on the left steps aside only for an operand with a higher
#   `__array_priority__` (ours: 200); without it NumPy makes an object array
#   of separate variables.
#
# ## Exercises
#
# 1. NumPy has a second way to step aside: a class that sets
#    `__array_ufunc__ = None` makes every NumPy ufunc, `np.add` behind `+`
#    included, refuse it, so `ndarray + x` goes to `x.__radd__`. Write
#    `VariableUfuncNone`, a subclass of `VariableWithoutPriority` that does
#    this, and check that `np.array([1.0, 2.0]) + x` is one `Variable` again.

# %% tags=["hide-cell"]
class VariableUfuncNone(VariableWithoutPriority):
    __array_ufunc__ = None  # NumPy's ufuncs refuse this operand: ndarray.__add__ returns NotImplemented


x = VariableUfuncNone(np.array([10.0, 20.0]))
y = np.array([1.0, 2.0]) * x + np.array([1.0, 2.0])
y.backward()
print(type(y).__name__, y, " x.grad =", x.grad)

# %% [markdown]
# 2. In `3.0 * x` the constant becomes a leaf that receives a gradient
#    nobody reads. Write `Scale`, a one-input `Function` that keeps the
#    constant as an attribute (`Scale(3.0)(x)`), so that the graph has one
#    input and the backward computes one gradient, and check it against
#    PyTorch's `3.0 * x`.

# %% tags=["hide-cell"]
class Scale(Function):
    def __init__(self, c):
        self.c = c  # a constant, not an input: it gets no gradient

    def forward(self, x):
        return self.c * x

    def backward(self, gy):
        return self.c * gy


x = Variable(np.array([1.0, -2.0]))
y = Scale(3.0)(x)
y.backward()
print(y, " inputs:", len(y.creator.inputs), " x.grad =", x.grad)
