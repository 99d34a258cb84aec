# %% [markdown]
# # Step 22: Negation, subtraction, division and powers
#
# With `+` and `*` in place, the remaining arithmetic operators follow the
# same pattern: a `Function` with its derivative, a plain function, and a
# method on `Variable`. This step adds unary minus, `-`, `/` and `**`; after
# it, formulas are written as formulas: `y = (x + 3) ** 2 / 2`.
#
# | operation | forward | $\partial y / \partial x_0$ | $\partial y / \partial x_1$ |
# |---|---|---|---|
# | `Neg` | $y = -x$ | $-1$ | |
# | `Sub` | $y = x_0 - x_1$ | $1$ | $-1$ |
# | `Div` | $y = x_0 / x_1$ | $1 / x_1$ | $-x_0 / x_1^2$ |
# | `Pow` | $y = x^c$ | $c\,x^{c-1}$ | |
#
# Each `backward` multiplies the incoming gradient $g_y$ by these partial
# derivatives. This is the last snapshot: the whole framework of stage 2 is
# in the collapsed cell below, and step 23 moves it into a package.

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


class Function:
    def __call__(self, *inputs):
        op = type(self).__name__.lower()  # names the operation in error messages: "add", "mul", ...
        inputs = tuple(as_variable(x, op) for x in inputs)
        xs = [x.data for x in inputs]  # unwrap: forward works on plain ndarrays
        arrays = [x for x in xs if x.ndim > 0]  # a 0-d operand combines with any shape
        for other in arrays[1:]:
            if other.shape != arrays[0].shape:
                raise ValueError(f"{op}: shapes {arrays[0].shape} and {other.shape} do not match "
                                 "(broadcasting comes in stage 3)")
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
        gx1 = -gy * (x0 / x1 / x1)  # dy/dx1 = -x0/x1^2, computed in PyTorch's order
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
# ## The four functions
#
# In `Pow` the exponent $c$ is a constant number kept on the function
# (`Pow(c)`), not an input, so it gets no gradient. For $c = 0$ the function
# is constant and its derivative $0$, but the formula $c\,x^{c-1}$ would give
# $0 \cdot \infty$ = NaN at $x = 0$, so `backward` returns zeros there, as
# PyTorch does. (`sum_to`, in the binary ones, comes below.)

# %%
show_change(22, "Neg", "Sub", "Div", "Pow")

# %% [markdown]
# Each backward, run by the framework on 200 points, against its formula:

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (the picture of this page)

cases = [("Neg: y = -x", lambda v: -v, lambda t: -np.ones_like(t), (-2.0, 2.0)),
         ("Sub: y = x - 1", lambda v: v - 1, lambda t: np.ones_like(t), (-2.0, 2.0)),
         ("Div: y = 1 / x", lambda v: 1 / v, lambda t: -1 / t**2, (0.4, 3.0)),
         ("Pow: y = x ** 3", lambda v: v ** 3, lambda t: 3 * t**2, (-1.5, 1.5))]
fig, axes = plt.subplots(1, 4, figsize=(9, 3))
for ax, (title, f, formula, (low, high)) in zip(axes, cases):
    x = Variable(np.linspace(low, high, 200))
    y = f(x)
    y.backward()  # the seed is ones: x.grad is dy/dx at every point
    ax.plot(x.data, y.data, color="0.6", label="y")
    ax.plot(x.data, x.grad, color="tab:blue", linewidth=3, label="backward")
    ax.plot(x.data, formula(x.data), "--", color="tab:orange", label="formula")
    ax.set_title(title, fontsize=10)
    ax.axhline(0, color="0.85", linewidth=0.8, zorder=0)
axes[2].set_ylim(-7, 3)
axes[0].legend(fontsize=8, loc="upper right")
fig.suptitle("dy/dx from each new backward (blue) on the formula of the table (dashed)", fontsize=11)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Operators that do not commute
#
# `2.0 - x` makes Python call `x.__rsub__(2.0)`: the variable that runs the
# method is the *right* operand. `rsub(x0, x1)` therefore computes
# `Sub()(x1, x0)`, swapping the operands back into the written order, and
# `rdiv` does the same for `/`. Getting this backwards would compute $x - 2$
# instead of $2 - x$, and flip the gradient's sign. There is no `__rpow__`: a
# variable exponent is not part of this stage, and `2 ** x` fails with
# Python's own `TypeError`.

# %%
show_change(22, "rsub", "rdiv", "Variable")

# %% [markdown]
# At $x = 2$ the derivatives are $-1$, $1$, $-1$, $1/4$, $-4/x^2 = -1$ and
# $3x^2 = 12$:

# %%
for text, build in [("-x", lambda v: -v), ("x - 1", lambda v: v - 1), ("1 - x", lambda v: 1 - v),
                    ("x / 4", lambda v: v / 4), ("4 / x", lambda v: 4 / v), ("x ** 3", lambda v: v ** 3)]:
    x = Variable(np.array(2.0))
    y = build(x)
    y.backward()
    print(f"{text:6}  y = {y.data:6.2f}   dy/dx = {x.grad:6.2f}")

# %% [markdown]
# And a formula, $y = (x + 3)^2 / 2$ with $dy/dx = x + 3$:

# %%
x = Variable(np.array(1.0), name="x")
y = (x + 3) ** 2 / 2
y.backward()
print(y, "  dy/dx =", x.grad)

# %% [markdown]
# ## Shapes: a 0-d operand and an array
#
# Until stage 3 teaches broadcasting, a binary operation takes two operands
# of one shape, or a 0-d operand with anything; `Function.__call__` refuses
# other pairs with a `ValueError`, since NumPy would broadcast them and the
# backward pass would hand back gradients of the wrong shape. In $y = c\,x$
# with a 0-d $c$, the one number $c$ reaches every $y_i$, and as in step 14
# the contributions add up: $\partial L / \partial c = \sum_i g_i\,x_i$, of
# shape `()`. `sum_to(gx, shape)` does that sum in every binary backward.

# %%
show_change(22, "Function.__call__", "sum_to")

# %%
c = Variable(np.array(2.0), name="c")
x = Variable(np.array([1.0, 2.0, 3.0]), name="x")
(c * x).backward()
print("x.grad =", x.grad, "  c.grad =", c.grad, " shape", c.grad.shape)
try:
    Variable(np.ones((2, 3))) + np.ones(3)
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# For every new operator, in both orders where they differ, the value and the
# gradients of both operands must equal PyTorch's, for two scalars, two
# arrays of one shape and a 0-d operand with an array (its gradient summed to
# shape `()`). `/` and `**` do the same operations as PyTorch, not always in
# the same order, so the comparison allows `rtol=1e-12`.

# %% tags=["hide-input"]
import torch  # noqa: E402


def same_as_torch(fn, *values):
    """fn on Variables and on float64 tensors holding `values`: equal values and grads (shapes too)."""
    xs, ts = [Variable(v) for v in values], [torch.tensor(v, requires_grad=True) for v in values]
    y, yt = fn(*xs), fn(*ts)
    y.backward()
    yt.sum().backward()
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        assert x.grad.shape == tuple(t.grad.shape)
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-12)


# %%
binary = [lambda a, b: a - b, lambda a, b: a / b, lambda a, b: 2.0 - a / b]  # x0 - x1, x0 / x1, 2 - x0 / x1
unary = [lambda a: -a, lambda a: a ** 3, lambda a: a ** -1.5, lambda a: 1 / a]  # -x, x**3, x**-1.5, 1/x
rng = np.random.default_rng(0)
for shapes in [((), ()), ((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ())]:
    v0, v1 = (rng.uniform(0.5, 2.0, shape) for shape in shapes)  # positive: powers, quotients defined
    for fn in binary:
        same_as_torch(fn, v0, v1)
    for fn in unary:
        same_as_torch(fn, v1)
    print(f"shapes {shapes[0]!s:6} and {shapes[1]!s:6}: values and grads == torch")
print("PyTorch check passed: grads of neg, sub, rsub, div, rdiv and pow equal torch (0-d operands summed)")

# %% [markdown]
# ## Recap
#
# - `Neg`, `Sub`, `Div` and `Pow` each multiply $g_y$ by their partial
#   derivatives; `Pow`'s exponent is a constant on the function, with no
#   gradient.
# - `__rsub__` and `__rtruediv__` run on the right operand, so `rsub` and
#   `rdiv` swap the operands back into the written order.
# - Until broadcasting, operands have one shape or one is 0-d; a 0-d
#   operand's gradient is the sum over the elements it met (`sum_to`).
#
# ## Exercises
#
# 1. Backprop by hand: write the backward of `DivByHand`, whose forward is
#    $x_0 / x_1$, from the derivatives of the table, without looking at
#    `Div`, and compare its gradients with PyTorch's on arrays.

# %% tags=["hide-cell"]
class DivByHand(Function):
    def forward(self, x0, x1):
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy / x1, -gy * x0 / x1**2  # d/dx0 = 1/x1, d/dx1 = -x0/x1^2


v0, v1 = np.array([1.0, 2.0, 3.0]), np.array([0.5, -4.0, 2.0])
x0, x1 = Variable(v0), Variable(v1)
DivByHand()(x0, x1).backward()
t0, t1 = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
(t0 / t1).sum().backward()
np.testing.assert_allclose([x0.grad, x1.grad], [t0.grad.numpy(), t1.grad.numpy()], rtol=1e-12)
print("x0.grad =", x0.grad, " x1.grad =", x1.grad, " == torch")

# %% [markdown]
# 2. A constant base: write `RPow(c)`, whose forward is $c^x$ for a constant
#    $c > 0$, with $d(c^x)/dx = c^x \ln c$, and `rpow(c, x)`. (The page leaves
#    `Variable.__rpow__` out on purpose; `rpow(2.0, x)` is the function call.)

# %% tags=["hide-cell"]
class RPow(Function):
    def __init__(self, c):
        self.c = c  # the constant base: no gradient

    def forward(self, x):
        return self.c ** x

    def backward(self, gy):
        y = self.outputs[0]().data  # c**x, which forward computed (the output is a weak reference)
        return gy * y * np.log(self.c)


def rpow(c, x):
    return RPow(c)(x)


x = Variable(np.array([0.0, 1.0, 3.0]))
rpow(2.0, x).backward()
print("d(2**x)/dx =", np.round(x.grad, 4), "  (2**x ln 2)")
