# %% [markdown]
# # Step 22: Negation, subtraction, division and powers
#
# With `+` and `*` in place, the remaining arithmetic operators follow the same
# pattern: a `Function` with its derivative, a plain function, and a method on
# `Variable`. This step adds unary minus, `-`, `/` and `**`, and settles what
# happens when the two operands of a binary operation have different shapes.
# After it, formulas are written as formulas: `y = (x + 3) ** 2 / 2`.
#
# ## The derivatives
#
# | operation | forward | $\partial y / \partial x_0$ | $\partial y / \partial x_1$ |
# |---|---|---|---|
# | `Neg` | $y = -x$ | $-1$ | |
# | `Sub` | $y = x_0 - x_1$ | $1$ | $-1$ |
# | `Div` | $y = x_0 / x_1$ | $1 / x_1$ | $-x_0 / x_1^2$ |
# | `Pow` | $y = x^c$ | $c\,x^{c-1}$ | |
#
# Each `backward` multiplies the incoming gradient $g_y$ by these partial
# derivatives.
#
# In `Pow` the exponent $c$ is a constant number stored on the function
# (`Pow(c)`), not an input variable, so it receives no gradient. $x^y$ with a
# variable exponent would need $\partial y / \partial c = x^c \ln x$ and is not
# part of this stage. For $c = 0$ the function is constant and its derivative
# is $0$, but the formula $c\,x^{c-1}$ gives $0 \cdot \infty = $ NaN at $x = 0$;
# `Pow.backward` returns zeros directly in that case, as PyTorch does.
#
# ## Reflected operators that do not commute
#
# `2.0 - x` makes Python call `x.__rsub__(2.0)`: the variable that runs the
# method is the *right* operand. `rsub(x0, x1)` therefore computes
# `Sub()(x1, x0)`, swapping the operands back into the written order; `rdiv`
# does the same for `/`. Getting this backwards would compute $x - 2$ instead
# of $2 - x$, and the gradient's sign with it. There is no `__rpow__`: an
# exponent that is a variable is not supported, and `2 ** x` fails with
# Python's own `TypeError`.
#
# ## Shapes
#
# Until stage 3 teaches broadcasting, a binary operation accepts two operands
# of the same shape, or a 0-d operand with anything. Other combinations raise a
# `ValueError` in `Function.__call__`, before NumPy gets a chance to broadcast
# them: NumPy would happily add shapes `(2, 3)` and `(3,)`, and the backward
# pass, which does not know about broadcasting yet, would hand back gradients
# of the wrong shape.
#
# The 0-d case has a rule of its own. In $y = c\,x$ with a 0-d $c$ and an
# array $x$, the one number $c$ is used at every element: $y_i = c\,x_i$. It
# reaches the output along as many paths as $x$ has elements, and, as in
# step 14, the contributions add up:
#
# $$\frac{\partial L}{\partial c} = \sum_i \frac{\partial L}{\partial y_i}\,\frac{\partial y_i}{\partial c} = \sum_i g_i\, x_i.$$
#
# So the gradient of a 0-d operand is the *sum* of the element-wise gradient,
# and it has the operand's shape, `()`. `sum_to(gx, shape)` does this in the
# backward of every binary operation; it is the special case of the function
# that stage 3 generalises to all broadcasts. (Until now, the gradient of a
# number such as the `3.0` in `3.0 * x` came out with the shape of `x`. Nobody
# read it, but a 0-d variable with a 3-element gradient was wrong.)
#
# ## The framework after this step
#
# This is the complete framework of stage 2. Step 23 moves it into the
# `tinypytorch` package.

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

    def __neg__(self):  # -x
        return neg(self)

    def __sub__(self, other):  # x - other
        return sub(self, other)

    def __rsub__(self, other):  # other - x
        return rsub(self, other)

    def __truediv__(self, other):  # x / other
        return div(self, other)

    def __rtruediv__(self, other):  # other / x
        return rdiv(self, other)

    def __pow__(self, c):  # x ** c, for a constant number c
        return pow(self, c)

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
        arrays = [x for x in xs if x.ndim > 0]  # a 0-d operand combines with any shape
        for other in arrays[1:]:
            if other.shape != arrays[0].shape:
                raise ValueError(f"{op}: shapes {arrays[0].shape} and {other.shape} do not match (broadcasting comes in stage 3)")
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


def sum_to(gx, shape):
    """Sum gx to `shape`; until broadcasting (stage 3) only needed for a 0-d operand used with an array."""
    if gx.shape == shape:
        return gx
    return as_array(gx.sum())  # shape is (): the 0-d operand met every element of the array


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return sum_to(gy, x0.shape), sum_to(gy, x1.shape)  # dy/dx0 = dy/dx1 = 1


class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return sum_to(gy * x1, x0.shape), sum_to(gy * x0, x1.shape)  # dy/dx0 = x1, dy/dx1 = x0


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy  # dy/dx = -1


class Sub(Function):
    def forward(self, x0, x1):
        return x0 - x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return sum_to(gy, x0.shape), sum_to(-gy, x1.shape)  # dy/dx0 = 1, dy/dx1 = -1


class Div(Function):
    def forward(self, x0, x1):
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        gx0 = gy / x1  # dy/dx0 = 1/x1
        gx1 = -gy * x0 / x1 ** 2  # dy/dx1 = -x0/x1^2
        return sum_to(gx0, x0.shape), sum_to(gx1, x1.shape)


class Pow(Function):
    def __init__(self, c):
        self.c = c  # a constant exponent, not an input: it gets no gradient

    def forward(self, x):
        return x ** self.c

    def backward(self, gy):
        x, c = self.inputs[0].data, self.c
        if c == 0:  # x**0 is constant; c * x**(c-1) would be 0 * inf = nan at x = 0
            return np.zeros_like(gy)
        return c * x ** (c - 1) * gy  # dy/dx = c x^(c-1)


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def add(x0, x1):
    return Add()(x0, x1)


def mul(x0, x1):
    return Mul()(x0, x1)


def neg(x):
    return Neg()(x)


def sub(x0, x1):
    return Sub()(x0, x1)


def rsub(x0, x1):
    return Sub()(x1, x0)  # x0 is the Variable whose __rsub__ ran: it is the right operand


def div(x0, x1):
    return Div()(x0, x1)


def rdiv(x0, x1):
    return Div()(x1, x0)  # as in rsub: x1 / x0


def pow(x, c):  # shadows the built-in pow inside this module, as DeZero does
    if not isinstance(c, (int, float, np.number)):
        raise TypeError(f"pow: the exponent must be a constant number, got {type(c).__name__}")
    return Pow(c)(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Each operator
#
# At $x = 2$: $-x$, $x - 1$, $1 - x$, $x / 4$, $4 / x$ and $x^3$, with their
# derivatives $-1$, $1$, $-1$, $1/4$, $-4/x^2 = -1$ and $3x^2 = 12$:

# %%
for text, build in [("-x", lambda v: -v), ("x - 1", lambda v: v - 1), ("1 - x", lambda v: 1 - v),
                    ("x / 4", lambda v: v / 4), ("4 / x", lambda v: 4 / v), ("x ** 3", lambda v: v ** 3)]:
    x = Variable(np.array(2.0))
    y = build(x)
    y.backward()
    print(f"{text:6}  y = {y.data:6.2f}   dy/dx = {x.grad:6.2f}")

# %% [markdown]
# ## A formula
#
# The example that closes the source material's discussion of operators:
#
# $$y = \frac{(x + 3)^2}{2}, \qquad \frac{dy}{dx} = x + 3.$$

# %%
x = Variable(np.array(1.0), name="x")
y = (x + 3) ** 2 / 2
y.backward()
print(y, "  dy/dx =", x.grad)

# %% [markdown]
# And two variables, $z = x^2 / y - y / x$, with
# $\partial z / \partial x = 2x / y + y / x^2$ and
# $\partial z / \partial y = -x^2 / y^2 - 1 / x$; at $(x, y) = (2, 4)$ that is
# $(2, -0.75)$:

# %%
x = Variable(np.array(2.0))
y = Variable(np.array(4.0))
z = x ** 2 / y - y / x
z.backward()
print("z =", z.data, "  dz/dx =", x.grad, "  dz/dy =", y.grad)

# %% [markdown]
# ## A 0-d operand and an array
#
# $y = c\,x$ with $c = 2$ and $x = (1, 2, 3)$. `x.grad` is $c$ at each element,
# and `c.grad` is $\sum_i x_i = 6$, a 0-d array like `c`:

# %%
c = Variable(np.array(2.0), name="c")
x = Variable(np.array([1.0, 2.0, 3.0]), name="x")
y = c * x
y.backward()
print("x.grad =", x.grad)
print("c.grad =", c.grad, " shape", c.grad.shape)

# %% [markdown]
# Two arrays of different shapes are refused, with the operation's name and
# both shapes, whichever operator and side:

# %%
x = Variable(np.ones((2, 3)))
for text, build in [("x + ones(3)", lambda: x + np.ones(3)), ("ones(3) - x", lambda: np.ones(3) - x),
                    ("x * ones((3, 2))", lambda: x * np.ones((3, 2))), ("x / ones(2)", lambda: x / np.ones(2))]:
    try:
        build()
    except ValueError as error:
        print(f"{text:17} ValueError: {error}")

# %% [markdown]
# Unsupported operands are reported as in step 21, and so is an exponent that
# is not a number:

# %%
x = Variable(np.array(2.0))
for text, build in [('x - "a"', lambda: x - "a"), ("[1.0] / x", lambda: [1.0] / x), ("x ** x", lambda: x ** x)]:
    try:
        build()
    except TypeError as error:
        print(f"{text:9} TypeError: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# For every new operator, and both argument orders where they differ, the
# value and the gradients with respect to both operands must equal PyTorch's:
# for two scalars, for two arrays of the same shape, and for a 0-d variable
# combined with an array, where the 0-d gradient must be the sum, of shape
# `()`, as in PyTorch. `/` and `**` compute their gradients with the same
# operations as PyTorch but not always in the same order, so all comparisons
# use `rtol=1e-12`.

# %%
import torch

rng = np.random.default_rng(0)
binary = {"x0 - x1": lambda a, b: a - b, "x0 / x1": lambda a, b: a / b,
          "x0 * x1 + x0": lambda a, b: a * b + a, "2 - x0 / x1": lambda a, b: 2.0 - a / b}
unary = {"-x": lambda a: -a, "x ** 3": lambda a: a ** 3, "x ** -1.5": lambda a: a ** -1.5, "1 / x": lambda a: 1.0 / a}

for shapes in [((), ()), ((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ())]:
    v0, v1 = (rng.uniform(0.5, 2.0, shape) for shape in shapes)  # positive: powers and divisions stay defined
    for name, fn in binary.items():
        x0, x1 = Variable(v0), Variable(v1)
        y = fn(x0, x1)
        y.backward()
        t0, t1 = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
        yt = fn(t0, t1)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
        for ours, theirs in [(x0, t0), (x1, t1)]:
            assert ours.grad.shape == tuple(theirs.grad.shape)
            np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)
    print(f"shapes {shapes[0]!s:6} and {shapes[1]!s:6}: {', '.join(binary)}: values and grads == torch")

for shape in [(), (2, 3)]:
    v = rng.uniform(0.5, 2.0, shape)
    for name, fn in unary.items():
        x = Variable(v)
        fn(x).backward()
        xt = torch.tensor(v, requires_grad=True)
        yt = fn(xt)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    print(f"shape  {shape!s:6}: {', '.join(unary)}: grads == torch")

print("PyTorch check passed: grads of neg, sub, rsub, div, rdiv and pow equal torch, with 0-d operands summed")
