# %% [markdown]
# # Step 20: Operator overloading: `*` and `+`
#
# Writing $y = ab + c$ as `add(mul(a, b), c)` works, but it reads inside out,
# and a longer formula becomes a thicket of parentheses. This step adds
# multiplication and lets Python's own operators build the graph:
# `y = a * b + c`.
#
# An operator is a method call in disguise. For `a * b` Python calls
# `type(a).__mul__(a, b)`, for `a + b` `type(a).__add__(a, b)`. So two
# methods on `Variable` that forward to `mul` and `add` are all it takes;
# precedence and associativity stay Python's, so `a * b + c` means $(ab) + c$
# without any work on our side.
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
# ## Multiplication and its gradient
#
# For $y = x_0 x_1$ each partial derivative is the *other* factor,
# $\partial y / \partial x_0 = x_1$ and $\partial y / \partial x_1 = x_0$, so
# `Mul.backward` returns $(g_y x_1, g_y x_0)$. Unlike `Add`, it needs the
# input values, which it reads from `self.inputs`. On arrays of one shape the
# products, and so the gradients, are element-wise. `Mul` and `mul` are new:

# %%
show_change(20, "Mul", "mul")

# %% [markdown]
# ## The operators
#
# `Variable` gains two methods. DeZero attaches the functions to the class
# after it is defined (`Variable.__mul__ = mul`); writing them in the class
# body does the same and keeps every operator of `Variable` in one place.

# %%
show_change(20, "Variable")

# %% [markdown]
# Python evaluates `a * b + c` in two calls, and each call adds one function
# to the graph: first `a.__mul__(b)` makes a `Mul` and a new variable, then
# that variable's `__add__(c)` makes an `Add`. The example from the source
# material, with $a = 3$, $b = 2$, $c = 1$: $y = 7$ and
# $\partial y/\partial a = b = 2$, $\partial y/\partial b = a = 3$,
# $\partial y/\partial c = 1$.

# %%
a = Variable(np.array(3.0), name="a")
b = Variable(np.array(2.0), name="b")
c = Variable(np.array(1.0), name="c")
y = a * b + c
y.backward()
print(y, "  a.grad =", a.grad, " b.grad =", b.grad, " c.grad =", c.grad)

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (the picture of this page)

from tinypytorch.utils.pictures import draw_dag, graph_of  # noqa: E402

ab = y.creator.inputs[0]  # the variable a * b, made by the first call
nodes, edges = graph_of(y, names={ab: "a * b", y: "y"})  # the graph behind the variables above
where = {"a": (0, 1.0), "b": (0, 0.2), "Mul": (1, 0.6), "a * b": (2, 0.6), "c": (2, 1.4), "Add": (3, 0.6),
         "y": (4, 0.6)}
ids = {label: node for node, (kind, label) in nodes.items()}
fig, ax = plt.subplots(figsize=(8, 3))
draw_dag(nodes, edges, ax=ax, positions={ids[label]: xy for label, xy in where.items()},
         notes={ids["Mul"]: "1st call: a.__mul__(b)", ids["Add"]: "2nd call: (a * b).__add__(c)"},
         title="y = a * b + c: each operator Python calls adds one function to the graph")
plt.show()

# %% [markdown]
# `x * x` passes one variable twice to a `Mul`, whose backward returns two
# contributions $g_y x$ to it; step 14's accumulation adds them into $2x$,
# the derivative of $x^2$, as `square` gives it:

# %%
x = Variable(np.array(3.0))
(x * x).backward()
print("d(x * x)/dx    =", x.grad)
x.cleargrad()
square(x).backward()
print("d square(x)/dx =", x.grad)

# %% [markdown]
# Both operands must still be `Variable`s: `x * 2.0` asks the number for
# `.data` inside `Function.__call__`, and `2.0 * x` finds no `__rmul__`.
# Step 21 makes numbers and arrays welcome on either side. (The tests check
# both errors.)
#
# ## Check against PyTorch
#
# The value of $ab + c$ and the gradients with respect to all three inputs
# must equal autograd's, for a scalar and an array; PyTorch's backward of a
# product multiplies the same numbers, so they agree to the last bit.

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (2, 3)]:
    va, vb, vc = (rng.standard_normal(shape) for _ in range(3))
    a, b, c = Variable(va), Variable(vb), Variable(vc)
    y = a * b + c
    y.backward()
    at, bt, ct = (torch.tensor(v, requires_grad=True) for v in (va, vb, vc))
    (at * bt + ct).sum().backward()
    np.testing.assert_array_equal(y.data, (at * bt + ct).detach().numpy())
    for ours, theirs in [(a, at), (b, bt), (c, ct)]:
        np.testing.assert_array_equal(ours.grad, theirs.grad.numpy())
    print(f"shape {shape!s:7} a*b + c and its grads == torch")
print("PyTorch check passed: grads of a*b + c equal torch")

# %% [markdown]
# ## Recap
#
# - `Mul` computes $x_0 x_1$; its backward returns each input's gradient as
#   $g_y$ times the *other* input.
# - Python turns `a * b` into `a.__mul__(b)` and `a + b` into `a.__add__(b)`;
#   methods that call `mul` and `add` let formulas build graphs.
# - Each operator evaluated adds one function to the graph, in Python's order
#   of evaluation.
# - `x * x` gives two contributions to `x`, added by step 14's accumulation.
#
# ## Exercises
#
# 1. Evaluate the polynomial $p(x) = c_3 x^3 + c_2 x^2 + c_1 x + c_0$ with
#    Horner's rule, $((c_3 x + c_2)\,x + c_1)\,x + c_0$, using only `*` and
#    `+` on `Variable`s. Backward gives $dp/dx$ and the gradient with respect
#    to each coefficient, $\partial p/\partial c_k = x^k$.

# %% tags=["hide-cell"]
def horner(coefficients, x):
    """coefficients: [c0, c1, ..., cn] as Variables; returns p(x) built from * and + only."""
    p = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        p = p * x + c
    return p


cs = [Variable(np.array(v)) for v in (1.0, -2.0, 0.5, 3.0)]
x = Variable(np.array(2.0))
horner(cs, x).backward()
print("dp/dx =", x.grad, " dp/dc_k =", [float(c.grad) for c in cs])

# %% [markdown]
# 2. A fused multiply-add: write `MulAdd`, one `Function` with three inputs
#    whose forward is $x_0 x_1 + x_2$ and whose backward returns all three
#    gradients at once. Its gradients must equal those of `a * b + c`, and of
#    PyTorch's `torch.addcmul(c, a, b)`.

# %% tags=["hide-cell"]
class MulAdd(Function):
    def forward(self, x0, x1, x2):
        return x0 * x1 + x2

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy * x1, gy * x0, gy


a, b, c = Variable(np.array(3.0)), Variable(np.array(2.0)), Variable(np.array(1.0))
MulAdd()(a, b, c).backward()
print("MulAdd grads:", a.grad, b.grad, c.grad)
