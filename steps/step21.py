# %% [markdown]
# # Step 21: Mixing variables with arrays and numbers
#
# After step 20, `a * b + c` works when all three are `Variable`s. Formulas are
# full of constants, though: $3x + 1$, $0.5\,x^2$, or an array of weights that
# is not being trained. This step lets a Python number, a NumPy scalar or an
# `ndarray` appear on either side of `+` and `*`, and makes every other kind of
# operand fail with a message that names the operation.
#
# ## Converting the operands
#
# `Function.__call__` now passes each input through `as_variable`:
#
# - a `Variable` is returned as it is;
# - an `ndarray`, a Python `int` or `float`, or a NumPy scalar becomes a new
#   `Variable` (numbers through `as_array`, as 0-d arrays);
# - anything else raises
#   `TypeError("<op>: unsupported operand type <type>")`, where `<op>` is the
#   operation's name, taken from the class (`Add` gives `add`). The error comes
#   from the operation the user wrote, not from deep inside NumPy.
#
# The constant becomes a leaf of the graph like any other input. The backward
# pass computes a gradient for it too, which nobody reads; PyTorch avoids that
# work for tensors with `requires_grad=False`, a distinction step 33 introduces.
#
# Because the conversion happens in `__call__`, it covers every function,
# including the one-input ones: `square(2.0)` works as well.
#
# ## A number on the left: the reflected operators
#
# For `x * 3.0` Python calls `x.__mul__(3.0)`, which now works. For `3.0 * x` it
# first calls `float.__mul__(3.0, x)`. A `float` does not know what a
# `Variable` is, so it returns the special value `NotImplemented`, and Python
# then tries the *reflected* method of the right operand:
# `x.__rmul__(3.0)`. `__radd__` and `__rmul__` pass the operands on in their
# written order, `add(other, self)` and `mul(other, self)`, so the graph
# records `3.0 * x` as `Mul(3.0, x)`. Addition and multiplication commute, but
# step 22's subtraction and division do not, and there the order matters.
#
# ## An array on the left: `__array_priority__`
#
# An `ndarray` on the left is different: it does not give up. NumPy's
# `ndarray.__add__` accepts almost anything as its right operand. It treats an
# unknown object as a single element, adds it to every element of the array,
# and collects the results in a new array of `dtype=object`. Each of those
# element-wise sums calls `Variable.__radd__` with one number, so the result is
# an array of separate variables rather than one `Variable`.
#
# NumPy has a rule for stepping aside: if the right operand has a higher
# `__array_priority__` than the array (an `ndarray`'s own is $0.0$) and
# defines the reflected method, `ndarray.__add__` returns `NotImplemented`, and
# Python calls `Variable.__radd__` with the whole array. We set
# `__array_priority__ = 200`, as DeZero does. (Newer NumPy code can get the
# same effect with `__array_ufunc__ = None`, which tells NumPy's ufuncs to
# refuse the operand altogether.)
#
# ## Errors instead of `NotImplemented`
#
# The operator methods raise the `TypeError` themselves instead of returning
# `NotImplemented`. With `NotImplemented`, Python would go on to try the other
# operand and finally report its own generic error; raising directly keeps the
# operation name in the message. The price is that a third type cannot take
# part in `Variable`'s arithmetic by defining its own reflected methods, which
# this framework does not need.
#
# ## The framework after this step
#
# `Variable` gets `__array_priority__`, `__radd__` and `__rmul__`; a new
# function `as_variable` converts operands; `Function.__call__` calls it.

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


# %%
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
# ## Numbers and arrays on either side
#
# $y = 3x + 1$ has $dy/dx = 3$, whichever side the constants are written on:

# %%
x = Variable(np.array(2.0), name="x")
for text, build in [("3.0 * x + 1.0", lambda v: 3.0 * v + 1.0),
                    ("x * 3.0 + 1.0", lambda v: v * 3.0 + 1.0),
                    ("1.0 + 3 * x", lambda v: 1.0 + 3 * v),
                    ("np.array(3.0) * x + np.float64(1.0)", lambda v: np.array(3.0) * v + np.float64(1.0))]:
    x.cleargrad()
    y = build(x)
    y.backward()
    print(f"{text:37} y = {y!r:18} dy/dx = {x.grad}")

# %% [markdown]
# With an array on the left of an array-valued variable, the result is one
# `Variable` holding the element-wise sum:

# %%
x = Variable(np.array([10.0, 20.0]))
y = np.array([1.0, 2.0]) + x
print("type:", type(y).__name__, "  ", y)

# %% [markdown]
# ## Without `__array_priority__`
#
# A subclass that sets the priority back to $0.0$, NumPy's own, shows what the
# attribute prevents:

# %%
class VariableWithoutPriority(Variable):
    __array_priority__ = 0.0


x = VariableWithoutPriority(np.array([10.0, 20.0]))
y = np.array([1.0, 2.0]) + x
print("type:", type(y).__name__, " dtype:", y.dtype, " shape:", y.shape)
print("y[0] =", y[0])
print("y[1] =", y[1])

# %% [markdown]
# NumPy added the whole variable to each element separately: `y[0]` is
# $1 + x$, `y[1]` is $2 + x$, each a full-size `Variable`. The result is not a
# `Variable`, cannot be backpropagated through, and has the wrong values.
#
# With a 0-d array on the left, the damage happens to cancel out: NumPy unwraps
# the single object of a 0-d result, so `np.array(2.0) + x` returns the
# `Variable` that `__radd__` made from the number $2.0$. That is luck, not
# design; the priority makes both cases go through `__radd__` with the whole
# array.

# %%
y = np.array(2.0) + x
print("type:", type(y).__name__, " ", y)

# %% [markdown]
# ## Operands that cannot be converted
#
# Strings, lists, dictionaries, `None` are not numbers. The error names the
# operation and the offending type, whichever side it is on:

# %%
x = Variable(np.array(2.0))
for text, build in [('x + "abc"', lambda: x + "abc"), ('"abc" + x', lambda: "abc" + x),
                    ("x * {}", lambda: x * {}), ("[1, 2] * x", lambda: [1, 2] * x),
                    ("x + None", lambda: x + None), ('square("2")', lambda: square("2"))]:
    try:
        build()
    except TypeError as error:
        print(f"{text:12} TypeError: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# `np.array(2.0) + x` and `3.0 * x` must give PyTorch's values and gradients
# for a scalar and an array `x` (PyTorch's counterpart of the 0-d array is a
# 0-d float64 tensor), and both results must be `Variable`s. So must an array
# on the left of an array-valued variable.

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,)]:
    value = rng.standard_normal(shape)
    for text, ours, theirs in [
        ("np.array(2.0) + x", lambda v: np.array(2.0) + v, lambda t: torch.tensor(2.0, dtype=torch.float64) + t),
        ("3.0 * x", lambda v: 3.0 * v, lambda t: 3.0 * t),
        ("x * 3.0 + 1.0", lambda v: v * 3.0 + 1.0, lambda t: t * 3.0 + 1.0),
    ]:
        x = Variable(value)
        y = ours(x)
        y.backward()
        xt = torch.tensor(value, requires_grad=True)
        yt = theirs(xt)
        yt.backward(torch.ones_like(yt))
        assert isinstance(y, Variable)
        np.testing.assert_array_equal(y.data, yt.detach().numpy())
        np.testing.assert_array_equal(x.grad, xt.grad.numpy())
        print(f"shape {shape!s:5} {text:18} value and grad == torch")

left = np.array([1.0, 2.0, 3.0])
x = Variable(np.array([10.0, 20.0, 30.0]))
y = left * x + left
y.backward()
xt = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64, requires_grad=True)
yt = torch.tensor(left) * xt + torch.tensor(left)
yt.backward(torch.ones_like(yt))
assert isinstance(y, Variable)
np.testing.assert_array_equal(y.data, yt.detach().numpy())
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print("ndarray * x + ndarray: a Variable; value and grad == torch")

print("PyTorch check passed: np.array(2.0) + x and 3.0 * x give torch's values and grads")
