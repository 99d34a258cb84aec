# %% [markdown]
# # Step 20: Operator overloading: `*` and `+`
#
# Writing $y = ab + c$ as `add(mul(a, b), c)` works, but it reads inside out,
# and a longer formula becomes a thicket of parentheses. This step adds
# multiplication and lets the two arithmetic operators of Python build the
# graph: `y = a * b + c`.
#
# ## Multiplication and its gradient
#
# For $y = x_0 x_1$ the partial derivatives are the *other* factor:
#
# $$\frac{\partial y}{\partial x_0} = x_1, \qquad \frac{\partial y}{\partial x_1} = x_0,$$
#
# so `Mul.backward` returns $(g_y\,x_1,\; g_y\,x_0)$. Unlike `Add`, it needs the
# input values, which it reads from `self.inputs`. For arrays of the same shape
# the products are element-wise, and so are the gradients.
#
# ## How Python evaluates `a * b`
#
# An operator is a method call in disguise. For `a * b`, Python calls
# `type(a).__mul__(a, b)`; for `a + b`, `type(a).__add__(a, b)`. Defining these
# two methods on `Variable` is enough to make `*` and `+` build the graph:
# `a * b + c` evaluates `a.__mul__(b)`, a new `Variable`, and then that
# variable's `__add__(c)`. Precedence and associativity are Python's own, so
# `a * b + c` means $(ab) + c$ without any work on our side.
#
# The methods only forward to `mul` and `add`. DeZero attaches the functions
# to the class after it is defined (`Variable.__mul__ = mul`); methods written
# inside the class body do the same, and a reader finds every operator of
# `Variable` in one place.
#
# ## The framework after this step
#
# `Variable` gains `__add__` and `__mul__`; `Mul` and `mul` join the functions.

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

    def __add__(self, other):  # x + other
        return add(self, other)

    def __mul__(self, other):  # x * other
        return mul(self, other)

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
# ## $y = ab + c$
#
# The example from the source material. With $a = 3$, $b = 2$, $c = 1$:
# $y = 7$, $\partial y / \partial a = b = 2$, $\partial y / \partial b = a = 3$
# and $\partial y / \partial c = 1$.

# %%
a = Variable(np.array(3.0), name="a")
b = Variable(np.array(2.0), name="b")
c = Variable(np.array(1.0), name="c")
y = a * b + c
y.backward()
print(y)
print("a.grad =", a.grad, " b.grad =", b.grad, " c.grad =", c.grad)

# %% [markdown]
# The operators build exactly the graph the nested calls would:

# %%
print("y.creator:", type(y.creator).__name__, " its first input's creator:", type(y.creator.inputs[0].creator).__name__)

# %% [markdown]
# Element-wise on arrays:

# %%
a = Variable(np.array([1.0, 2.0, 3.0]))
b = Variable(np.array([4.0, 5.0, 6.0]))
c = Variable(np.array([0.5, 0.5, 0.5]))
y = a * b + c
y.backward()
print("y      =", y.data)
print("a.grad =", a.grad, "  (= b)")
print("b.grad =", b.grad, "  (= a)")

# %% [markdown]
# ## A variable times itself
#
# `x * x` passes the same variable twice to one `Mul`. Its backward returns
# $(g_y x, g_y x)$, two contributions to the same variable, and step 14's
# accumulation adds them: $2x$, the derivative of $x^2$. The result equals
# `square`'s:

# %%
x = Variable(np.array(3.0))
(x * x).backward()
print("d(x * x)/dx    =", x.grad)
x.cleargrad()
square(x).backward()
print("d square(x)/dx =", x.grad)

# %% [markdown]
# ## What is still missing
#
# Both operands must be `Variable`s. A Python number on the right reaches
# `Function.__call__`, which asks it for `.data`; a number on the left makes
# Python look for `__rmul__` on `Variable`, which does not exist yet:

# %%
x = Variable(np.array(3.0))
try:
    x * 2.0
except AttributeError as error:
    print("x * 2.0:  AttributeError:", error)
try:
    2.0 * x
except TypeError as error:
    print("2.0 * x:  TypeError:", error)

# %% [markdown]
# Step 21 fixes both, and makes the second error, for operands that really
# cannot be used, say which operation failed.
#
# ## Check against PyTorch
#
# The gradients of $ab + c$ with respect to all three inputs are compared with
# autograd, for scalars and arrays, and so is the gradient of $x \cdot x$.
# PyTorch's `Mul` backward multiplies the same numbers as ours, so the results
# agree to `rtol=1e-12` (in practice exactly).

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    va, vb, vc = (rng.standard_normal(shape) for _ in range(3))
    a, b, c = Variable(va), Variable(vb), Variable(vc)
    y = a * b + c
    y.backward()
    at, bt, ct = (torch.tensor(v, requires_grad=True) for v in (va, vb, vc))
    yt = at * bt + ct
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-15)
    for ours, theirs in [(a, at), (b, bt), (c, ct)]:
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)

    x = Variable(va)
    (x * x).backward()
    xt = torch.tensor(va, requires_grad=True)
    (xt * xt).backward(torch.ones_like(xt))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7} grads of a*b + c and of x*x == torch")

print("PyTorch check passed: grads of a*b + c (and x*x) equal torch")
