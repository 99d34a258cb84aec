# %% [markdown]
# # Step 15: A wrong gradient on a branching graph
#
# Step 14 made gradients accumulate, and every graph so far came out right. This
# step builds a graph on which the framework, unchanged, returns a wrong
# gradient. Nothing crashes and nothing looks suspicious: it is a plausible
# number that is off by half. We work the wrong number out by hand, watch the
# loop produce it, and pin down the cause, which step 16 then removes.
#
# ## The graph
#
# $$a = x^2, \qquad b = a^2, \qquad c = a^2, \qquad y = b + c.$$
#
# So $y = 2x^4$ and
#
# $$\frac{dy}{dx} = 8x^3,$$
#
# which is $64$ at $x = 2$. The graph branches at $a$: two functions, $B$ and
# $C$, both read it, and their results meet again in the addition. Writing $A$
# for the function that computes $a$:
#
# ```
#            .-- B: b = a^2 --.
# x -- A -- a                  Add -- y
#            '-- C: c = a^2 --'
# ```
#
# By the chain rule, $\partial y / \partial a$ collects both branches,
# $2a + 2a = 4a = 16$, and $A$ must turn this *complete* gradient into
# $\partial y / \partial x = 2x \cdot 16 = 64$.
#
# ## The framework, unchanged from step 14
#
# The code below is step 14's framework, line for line. The bug is in it, and
# it is the lesson of this step.

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
                if x.grad is None:
                    x.grad = as_array(gx)  # 0-d arithmetic gives a NumPy scalar: keep grads ndarrays like data
                else:
                    x.grad = as_array(x.grad + gx)  # a new array, never `+=`: gx may be another variable's grad
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
# ## The wrong answer
#
# At $x = 2$ the framework reports 96 instead of 64:

# %%
x = Variable(np.array(2.0))
a = square(x)
b = square(a)
c = square(a)
y = add(b, c)
y.backward()
print("y.data =", y.data, "  (2x^4 = 32)")
print("x.grad =", x.grad, "  (8x^3 = 64)")

# %% [markdown]
# ## Predicting 96 by hand
#
# `Variable.backward` keeps the functions still to be processed in a list,
# appends at the end and pops from the end: a stack, last in, first out. That
# makes the traversal depth-first: it follows one branch all the way down to
# the leaf before it looks at the other. Starting from $y$ with $g_y = 1$:
#
# | pop | function | its output's gradient | sends back | after accumulation | stack afterwards |
# |---|---|---|---|---|---|
# | 1 | Add | $g_y = 1$ | $1$ to $b$, $1$ to $c$ | `b.grad` $= 1$, `c.grad` $= 1$ | B, C |
# | 2 | C | $g_c = 1$ | $2a \cdot 1 = 8$ to $a$ | `a.grad` $= 8$ | B, A |
# | 3 | A | $g_a = 8$ | $2x \cdot 8 = 32$ to $x$ | `x.grad` $= 32$ | B |
# | 4 | B | $g_b = 1$ | $2a \cdot 1 = 8$ to $a$ | `a.grad` $= 16$ | A |
# | 5 | A | $g_a = 16$ | $2x \cdot 16 = 64$ to $x$ | `x.grad` $= 96$ | (empty) |
#
# Pop 3 is the mistake. $A$ runs while `a.grad` holds only $C$'s contribution,
# because $B$ has not run yet. When $B$ later adds its share, $A$ is pushed and
# run a second time, now with the complete gradient $16$. The second run alone
# gives the right $64$; the first run's $32$ is extra. So
#
# $$x.\mathrm{grad} = \underbrace{2x \cdot 2a}_{\text{A with C's share}} + \underbrace{2x \cdot (2a + 2a)}_{\text{A with both}} = 4x^3 + 8x^3 = 12x^3,$$
#
# $96$ at $x = 2$: one and a half times the true $8x^3$, at every $x$.
#
# ## Watching the loop do it
#
# To see the order without touching the framework, we subclass `Square` and
# `Add` with a `backward` that prints what it receives and what it returns
# before handing the result to the unchanged loop.

# %%
class Traced:
    """Mix-in for a Function subclass: print each backward call as the loop makes it."""

    def __init__(self, label):
        self.label = label

    def backward(self, *gys):
        gxs = super().backward(*gys)
        shown = gxs if isinstance(gxs, tuple) else (gxs,)
        print(f"{self.label:<12} gy = {float(gys[0]):>4.0f}   sends back {', '.join(f'{float(g):.0f}' for g in shown)}")
        return gxs


class TracedSquare(Traced, Square):
    pass


class TracedAdd(Traced, Add):
    pass


x = Variable(np.array(2.0))
a = TracedSquare("A: a = x^2")(x)
b = TracedSquare("B: b = a^2")(a)
c = TracedSquare("C: c = a^2")(a)
y = TracedAdd("Add: b + c")(b, c)
y.backward()
print("x.grad =", x.grad)

# %% [markdown]
# The trace is the table: $A$ runs twice, first with the partial gradient $8$,
# then with the complete $16$.
#
# The ratio does not depend on $x$. At three points:

# %%
for value in (1.0, 2.0, 3.0):
    x = Variable(np.array(value))
    a = square(x)
    add(square(a), square(a)).backward()
    print(f"x = {value:.0f}:  framework {x.grad:6.1f}   12x^3 = {12 * value**3:6.1f}   true 8x^3 = {8 * value**3:6.1f}")

# %% [markdown]
# ## Why step 14's examples were right
#
# In $y = (x + x) + x$ the reused variable $x$ is a leaf. A leaf has no creator,
# so nothing runs after it receives a gradient, and the order in which its
# contributions arrive does not matter: they are only added up. The trouble
# starts when the reused variable is itself the output of a function, here
# $a$: its creator must wait until *every* function that read $a$ has
# delivered its contribution. A stack does not wait. Replacing it with a queue
# (first in, first out) is no cure: on a graph whose two branches from $a$
# differ in length, a queue also reaches $a$'s creator before the longer branch
# has delivered.
#
# What the loop needs is an order in which a function runs only after all the
# functions that use its outputs: a topological order of the graph, read from
# the output backwards. Step 16 gets one cheaply by numbering the functions as
# the forward pass creates them.
#
# ## Check against PyTorch
#
# PyTorch's autograd schedules each function only after all the gradients
# for its outputs have arrived, so it gives the true $8x^3 = 64$. The check
# asserts that torch gives 64, that our framework gives exactly the $12x^3 = 96$
# predicted by the trace above, and therefore that the two differ. This check
# verifies the explanation of the bug; step 16's check verifies the fix.

# %%
import torch

x = Variable(np.array(2.0))
a = square(x)
y = add(square(a), square(a))
y.backward()

xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
yt = at**2 + at**2
yt.backward()

np.testing.assert_allclose(xt.grad.numpy(), 8 * 2.0**3, rtol=1e-15)  # torch: the true derivative 8x^3
np.testing.assert_allclose(x.grad, 12 * 2.0**3, rtol=1e-15)  # ours: 4x^3 + 8x^3, as traced
assert x.grad != xt.grad.item()
print(f"torch x.grad = {xt.grad.item():.1f} (8x^3);  this framework x.grad = {x.grad:.1f} (12x^3, as predicted)")

print("PyTorch check passed: torch gives 64 = 8x^3; the naive order gives the predicted wrong 96")
