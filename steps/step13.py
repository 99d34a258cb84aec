# %% [markdown]
# # Step 13: One- and two-input functions in one graph; `cleargrad`
#
# Step 12 gave `Add` a backward pass. This step builds the first graph that mixes
# one-input and two-input functions,
#
# $$z = x^2 + y^2,$$
#
# and looks at what the loop does with it. The only new code is a small method,
# `Variable.cleargrad`, and the second half of the step shows why a framework
# that stores gradients on variables needs one.
#
# ## How `Square` fits the variadic interface
#
# `Square` is still written as in stage 1:
#
# ```python
# def forward(self, x):   return x ** 2
# def backward(self, gy): return 2 * self.inputs[0].data * gy
# ```
#
# It needs no change because the general interface degenerates gracefully to
# one input and one output:
#
# - `__call__(*inputs)` with one argument gives `inputs = (x,)`, and
#   `forward(*xs)` passes exactly one array to `forward(self, x)`;
# - `forward` returns one array, which `__call__` wraps into a 1-tuple;
# - the loop calls `backward(*gys)` with the one gradient of the one output;
# - `backward` returns one array, which the loop wraps into a 1-tuple and pairs
#   with the one input.
#
# A function author writes the natural signature for the function at hand, and
# the plumbing in `__call__` and `Variable.backward` handles the tuples.
#
# ## The framework after this step
#
# `Variable` gains `cleargrad`, which forgets the stored gradient. Everything
# else is as in step 12.

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

    def cleargrad(self):
        self.grad = None

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            gys = [output.grad for output in f.outputs]
            gxs = f.backward(*gys)  # one step of the chain rule
            if not isinstance(gxs, tuple):  # one input: treat its gradient as a 1-tuple
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs, strict=True):
                x.grad = as_array(gx)  # 0-d arithmetic gives a NumPy scalar: keep grads ndarrays like data
                if x.creator is not None:
                    funcs.append(x.creator)  # continue towards the leaves


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
        for output in outputs:
            output.set_creator(self)  # the output remembers where it came from
        self.inputs = inputs  # kept for backward, which needs the input values
        self.outputs = outputs
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
# ## $z = x^2 + y^2$
#
# The partial derivatives are $\partial z / \partial x = 2x$ and
# $\partial z / \partial y = 2y$, so at $(x, y) = (2, 3)$ we expect $(4, 6)$.
#
# The loop starts from `Add` with $g_z = 1$ and gives both squares the gradient
# $1$. It pushes their two `Square` functions, pops the one for $y$ first (the
# list is last in, first out), which sets `y.grad` $= 2 \cdot 3 \cdot 1$, then
# the one for $x$, which sets `x.grad` $= 2 \cdot 2 \cdot 1$.

# %%
x = Variable(np.array(2.0))
y = Variable(np.array(3.0))
z = add(square(x), square(y))
z.backward()
print("z.data =", z.data)
print("x.grad =", x.grad, " y.grad =", y.grad)

# %% [markdown]
# The same code works element-wise on arrays:

# %%
x = Variable(np.array([1.0, -2.0, 0.5]))
y = Variable(np.array([0.0, 3.0, -1.5]))
add(square(x), square(y)).backward()
print("x.grad =", x.grad, "  (2x)")
print("y.grad =", y.grad, "  (2y)")

# %% [markdown]
# ## A gradient left over from an earlier pass
#
# Gradients live on the variables, and they stay there after `backward`
# returns. That is what we want for the inputs we asked about, but it has a
# consequence: the next backward pass that touches the same variables finds
# them already holding a gradient.
#
# Take $a = x^2$ and $y = a^2 = x^4$. After `y.backward()`, `a` holds
# $\partial y / \partial a = 2a$, which is $8$ at $x = 2$, and `x` holds
# $4x^3 = 32$.
#
# Now we reuse `a` for a second question: what is $da/dx$? The answer is
# $2x = 4$. But `a.backward()` only seeds `a.grad` with $1$ when it is `None`.
# It is $8$, left over from the first pass, so the loop starts from the wrong
# seed and returns $2x \cdot 8 = 32$. That number is no accident: the stale seed
# is $\partial y / \partial a$, so the pass computes
# $\frac{\partial y}{\partial a} \frac{da}{dx} = \frac{dy}{dx}$ and silently
# answers the first question again.

# %%
x = Variable(np.array(2.0))
a = square(x)
y = square(a)
y.backward()
print("after y.backward():  a.grad =", a.grad, "  x.grad =", x.grad, "  (4x^3 = 32)")

a.backward()
print("after a.backward():  x.grad =", x.grad, "  (dy/dx again; da/dx = 2x = 4)")

# %% [markdown]
# `cleargrad` resets a variable to the state it had before any backward pass.
# Clearing the variables involved before asking the second question gives the
# right answer:

# %%
a.cleargrad()
x.cleargrad()
a.backward()
print("after cleargrad and a.backward():  x.grad =", x.grad)

# %% [markdown]
# Clearing `x` is not needed yet, because the loop overwrites `x.grad`; it is a
# good habit, though, and from step 14 on it is required. There, gradients
# accumulate instead of being overwritten (for a reason that step explains),
# and any gradient left on a variable from an earlier computation is added to
# the new one. PyTorch behaves the same way: it accumulates into `.grad`, and
# training loops call `optimizer.zero_grad()` (or set `x.grad = None`) before
# each backward pass, just as we call `cleargrad`.
#
# ## Check against PyTorch
#
# The gradients of $x^2 + y^2$ are compared with autograd for a scalar and two
# array shapes. Then the second question of the `cleargrad` example, $da/dx$,
# is asked of PyTorch: `retain_graph=True` on the first pass keeps the graph so
# that it can be traversed again from `a`, and `xt.grad = None` plays the role
# of `cleargrad` (PyTorch would otherwise add the new gradient to the old).

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    a_, b_ = rng.standard_normal(shape), rng.standard_normal(shape)
    x, y = Variable(a_), Variable(b_)
    add(square(x), square(y)).backward()
    xt, yt = torch.tensor(a_, requires_grad=True), torch.tensor(b_, requires_grad=True)
    (xt**2 + yt**2).backward(torch.ones_like(xt))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad, yt.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7} grads of x**2 + y**2 == torch")

x = Variable(np.array(2.0))
a = square(x)
square(a).backward()
a.cleargrad()
x.cleargrad()
a.backward()

xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2).backward(retain_graph=True)
xt.grad = None
at.backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print(f"da/dx after cleargrad: {x.grad:.1f} == torch {xt.grad.item():.1f}")

print("PyTorch check passed: grads of x**2 + y**2 equal torch; with cleargrad a reused variable gives torch's da/dx")
