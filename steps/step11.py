# %% [markdown]
# # Step 11: Functions with several inputs and outputs
#
# Every function of stage 1 took one `Variable` and returned one. Most
# operations a network needs are not like that: addition and multiplication
# take two inputs, concatenation any number; splitting an array, or `divmod`,
# returns several outputs. This step's idea: **a `Function` takes any number
# of inputs and returns any number of outputs**,
#
# $$(y_1, \dots, y_m) = f(x_1, \dots, x_n).$$
#
# Only the forward direction is generalised here; step 12 does the backward.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from tinypytorch.utils.listing import show_change
from tinypytorch.utils.pictures import draw_graph

# %% [markdown]
# ## The new calling convention
#
# The whole framework as it stands after this step is in the collapsed cell
# below. The change is in `Function.__call__`:

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
            x, y = f.inputs[0], f.outputs[0]  # still one input and one output: step 12 lifts this
            x.grad = f.backward(y.grad)  # one step of the chain rule
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


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
        for output in outputs:
            output.set_creator(self)  # the output remembers where it came from
        self.inputs = inputs  # kept for backward, which needs the input values
        self.outputs = outputs
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, gy):
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


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %%
show_change(11, "Function.__call__")

# %% [markdown]
# Three pieces of Python syntax carry it:
#
# - `def __call__(self, *inputs)` packs the positional arguments into the
#   tuple `inputs`;
# - `self.forward(*xs)` unpacks the list of arrays again, so a subclass writes
#   `forward(self, x0, x1)` with named parameters;
# - `forward` returns one array or a tuple of arrays; one array is wrapped into
#   a 1-tuple, so the code after it handles one shape of data only.
#
# Each output gets its own `Variable` with this function as its creator. The
# call returns a single `Variable` for one output (so `y = square(x)` still
# reads well) and a list otherwise (so `q, r = DivMod()(a, b)` unpacks).
# The rest follows: functions keep `inputs` and `outputs` (plural), so
# `Variable.backward` and the `backward` of `Square` and `Exp` read
# `inputs[0]` and `outputs[0]`; the base class's errors name the subclass
# that forgot a method; and `numerical_diff` wraps its shifted inputs with
# `as_array`, so it takes 0-d input again.
#
# ## Two inputs: `Add`
#
# `Add` is the first function with two inputs. It has no `backward` yet: the
# loop in `Variable.backward` could not deliver two gradients anyway.

# %%
class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1


x0 = Variable(np.array(2.0))
x1 = Variable(np.array(3.0))
f = Add()
y = f(x0, x1)
print("y.data =", y.data, "| y.creator is f:", y.creator is f, "| f.inputs are x0, x1:",
      f.inputs[0] is x0 and f.inputs[1] is x1)


# %% [markdown]
# ## Two outputs: `DivMod`
#
# A function returns several outputs by returning a tuple from `forward`.
# `np.divmod` returns quotient and remainder as a tuple, so a function built
# on it needs nothing more. (An illustration only, not part of the framework:
# floor division has no useful derivative.)

# %%
class DivMod(Function):
    def forward(self, x0, x1):
        return np.divmod(x0, x1)  # a tuple (quotient, remainder)


a, b = Variable(np.array([7.0, -7.0])), Variable(np.array([2.0, 2.0]))
q, r = DivMod()(a, b)
print("quotient =", q.data, "| remainder =", r.data, "| one creator:", q.creator is r.creator)


# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 2.8))
draw_graph(y, names={x0: "x0 = 2", x1: "x1 = 3", y: "y = 5"}, ax=left, title="Add: two inputs, one output")
draw_graph(q, r, names={a: "a", b: "b", q: "quotient", r: "remainder"}, ax=right,
           title="DivMod: two inputs, two outputs")
plt.show()

# %% [markdown]
# In both graphs the function holds a link to every input (`inputs`) and
# every output (`outputs`), and every output's `creator` is the function.
# The remainder of $-7$ by $2$ is $1$, not $-1$: NumPy floors the quotient
# ($-3.5 \to -4$), so the remainder has the sign of the divisor, as Python's
# `%` does.
#
# What is still missing: a graph with `Add` cannot be differentiated, since
# `Add` has no `backward` and the loop would read only `f.inputs[0]`:

# %%
try:
    Add()(Variable(np.array(2.0)), Variable(np.array(3.0))).backward()
except NotImplementedError as error:
    print("NotImplementedError:", error)

# %% [markdown]
# Chains of one-input functions still differentiate as before (a test checks
# them against PyTorch).
#
# ## Check against PyTorch
#
# `Add` must compute what `torch.add` computes. Both do one IEEE addition per
# element, so the results must be identical, not merely close. `DivMod`'s
# outputs are compared with torch's floor division and `torch.remainder`,
# which follow the same sign convention, and the stage-1 chain's gradient
# with autograd.

# %%
rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    ours = Add()(Variable(a), Variable(b))
    np.testing.assert_array_equal(ours.data, torch.add(torch.tensor(a), torch.tensor(b)).numpy())
a, b = np.array([7.0, -7.0, 7.5, -7.5]), np.array([2.0, 2.0, -2.0, 0.5])
q, r = DivMod()(Variable(a), Variable(b))
ta, tb = torch.tensor(a), torch.tensor(b)
np.testing.assert_array_equal(q.data, torch.div(ta, tb, rounding_mode="floor").numpy())
np.testing.assert_array_equal(r.data, torch.remainder(ta, tb).numpy())
x = Variable(np.array(0.5))
square(exp(square(x))).backward()
xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
torch.square(torch.exp(torch.square(xt))).backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print("PyTorch check passed: Add forward equals torch.add; the stage-1 chain still backpropagates")

# %% [markdown]
# ## Recap
#
# - `__call__(self, *inputs)` takes any number of inputs; `forward(*xs)`
#   receives them as named parameters.
# - `forward` returns one array or a tuple; `__call__` makes one `Variable`
#   per output, each with the function as its creator.
# - A function keeps `inputs` and `outputs`, and returns a single `Variable`
#   or a list.
# - The backward pass is still one input, one output: step 12.
#
# ## Exercises
#
# **1. `Mul`.** Write `Mul`, the element-wise product of two inputs (forward
# only).

# %% tags=["hide-cell"]
class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1


print(Mul()(Variable(np.array([1.0, 2.0])), Variable(np.array([3.0, 4.0]))).data)


# %% [markdown]
# **2. One input, two outputs.** Write `SinCos`, which returns $\sin x$ and
# $\cos x$ as two outputs of one function.

# %% tags=["hide-cell"]
class SinCos(Function):
    def forward(self, x):
        return np.sin(x), np.cos(x)


s, c = SinCos()(Variable(np.array([0.0, np.pi / 2])))
print("sin:", np.round(s.data, 6), "cos:", np.round(c.data, 6))


# %% [markdown]
# **3. Any number of inputs.** Write `AddN`, the sum of however many inputs
# it is given, left to right.

# %% tags=["hide-cell"]
class AddN(Function):
    def forward(self, *xs):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total


print(AddN()(*[Variable(np.array(float(k))) for k in range(1, 5)]).data)
