# %% [markdown]
# # Step 15: A wrong gradient on a branching graph
#
# Step 14 made gradients accumulate, and every graph so far came out right.
# This step's idea is a graph on which the framework, unchanged, returns a
# wrong gradient: nothing crashes, and the number is plausible but off by
# half. The cause is the **order** in which the backward loop runs the
# functions. We predict the wrong number by hand, watch the loop produce it,
# and name what a right order needs; step 16 provides it.
#
# The graph branches at $a$:
#
# $$a = x^2, \qquad b = a^2, \qquad c = a^2, \qquad y = b + c,$$
#
# so $y = 2x^4$ and $dy/dx = 8x^3$, which is $64$ at $x = 2$. Write $A$ for the
# function that computes $a$, $B$ and $C$ for the two that read it. By the
# chain rule $\partial y / \partial a$ collects both branches, $2a + 2a = 4a =
# 16$, and $A$ must turn this *complete* gradient into $2x \cdot 16 = 64$.
#
# The framework is step 14's, line for line (collapsed below):

# %% tags=["hide-cell"]
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


# %% tags=["hide-cell"]
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


# %% tags=["hide-cell"]
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


# %%
from tinypytorch.utils.listing import show_change

show_change(15, "Variable.backward")

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (harness: the pictures and the trace of this page)

from tinypytorch.utils.pictures import draw_graph  # noqa: E402
from tinypytorch.utils.tracing import Traced, backward_order, ordinal  # noqa: E402


def order_notes(ran, labels):
    """[(function, 'A: 3rd, 5th')] for draw_graph's notes; labels: [(function, 'A')]."""
    runs = {id(f): (f, []) for f, _ in labels}
    for n, f in enumerate(ran, 1):
        runs[id(f)][1].append(ordinal(n))
    return [(f, f"{label}: " + ", ".join(runs[id(f)][1])) for f, label in labels]


class TracedSquare(Traced, Square):
    pass


class TracedAdd(Traced, Add):
    pass


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
ran = backward_order(y)  # y.backward(), noting the order the functions ran (collapsed cell above)
print("y.data =", y.data, "  (2x^4 = 32)")
print("x.grad =", x.grad, "  (8x^3 = 64)")

# %% [markdown]
# ## Predicting 96 by hand
#
# `Variable.backward` keeps the functions still to run in a list, appends at
# the end and pops from the end: a stack, last in, first out. The traversal is
# depth-first: it follows one branch down to the leaf before it looks at the
# other. From $y$ with $g_y = 1$:
#
# | pop | function | its output's gradient | sends back | after accumulation | stack afterwards |
# |---|---|---|---|---|---|
# | 1 | Add | $g_y = 1$ | $1$ to $b$, $1$ to $c$ | `b.grad` $= 1$, `c.grad` $= 1$ | B, C |
# | 2 | C | $g_c = 1$ | $2a \cdot 1 = 8$ to $a$ | `a.grad` $= 8$ | B, A |
# | 3 | A | $g_a = 8$ | $2x \cdot 8 = 32$ to $x$ | `x.grad` $= 32$ | B |
# | 4 | B | $g_b = 1$ | $2a \cdot 1 = 8$ to $a$ | `a.grad` $= 16$ | A |
# | 5 | A | $g_a = 16$ | $2x \cdot 16 = 64$ to $x$ | `x.grad` $= 96$ | (empty) |
#
# Pop 3 is the mistake: $A$ runs while `a.grad` holds only $C$'s share. When
# $B$ adds its share, $A$ runs again, now with the complete $16$. The second
# run alone gives the right $64$; the first run's $32$ is extra:
#
# $$x.\mathrm{grad} = \underbrace{2x \cdot 2a}_{\text{A with C's share}} + \underbrace{2x \cdot (2a + 2a)}_{\text{A with both}} = 4x^3 + 8x^3 = 12x^3,$$
#
# one and a half times the true $8x^3$ at every $x$ (the tests try many).
# The loop's own trace, from `Square` and `Add` subclassed to print what each
# backward receives and sends (collapsed above), is the table:

# %% tags=["hide-input"]
xt_ = Variable(np.array(2.0))
at_ = TracedSquare("A: a = x^2")(xt_)
TracedAdd("Add: b + c")(TracedSquare("B: b = a^2")(at_), TracedSquare("C: c = a^2")(at_)).backward()
print("x.grad =", xt_.grad)

# %% tags=["hide-input"]
import torch  # noqa: E402


def torch_order():
    """The order PyTorch's engine runs the backward functions of the same graph, from hooks on them."""
    xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    at = xt**2
    bt, ct = at**2, at**2
    yt = bt + ct
    order = []
    for t, label in [(at, "A"), (bt, "B"), (ct, "C"), (yt, "Add")]:
        t.grad_fn.register_hook(lambda grad_inputs, grad_outputs, label=label: order.append(label))
    yt.backward()
    return order


labels = [(a.creator, "A"), (b.creator, "B"), (c.creator, "C"), (y.creator, "Add")]
right = [f for name in torch_order() for f, label in labels if label == name]
fig, (left, right_ax) = plt.subplots(1, 2, figsize=(10, 3.2))
for ax, order, title in [(left, ran, "this framework: depth first, A runs twice"),
                         (right_ax, right, "PyTorch: A waits for B and C, runs once")]:
    draw_graph(y, names=[(x, "x"), (a, "a"), (b, "b"), (c, "c"), (y, "y")], ax=ax,
               notes=order_notes(order, labels), title=title)
fig.tight_layout()
plt.show()

# %% [markdown]
# The picture numbers the turns each function's backward took, on this
# page's own graph: on the left as our loop ran them, on the right as
# PyTorch's engine runs the same graph (read from hooks on its backward
# functions). PyTorch runs $A$ once, last.
#
# ## Why step 14's examples were right
#
# In $y = (x + x) + x$ the reused variable is a leaf. A leaf has no creator,
# so nothing runs after it receives a gradient and the order of its
# contributions does not matter. The trouble starts when the reused variable
# is the output of a function, here $a$: its creator must wait until *every*
# function that read $a$ has delivered. A stack does not wait, and a queue
# (first in, first out) is no cure either: on a graph whose branches from $a$
# differ in length, a queue also reaches $A$ too early (exercise 1).
#
# The loop needs an order in which a function runs only after all the
# functions that use its outputs: a topological order of the graph, read from
# the output backwards. Step 16 gets one cheaply by numbering the functions as
# the forward pass creates them.
#
# ## Check against PyTorch
#
# PyTorch gives the true $8x^3 = 64$. The check asserts that, that our
# framework gives exactly the predicted $12x^3 = 96$, and so that the two
# differ: it verifies the explanation of the bug; step 16's check verifies
# the fix.

# %%
x = Variable(np.array(2.0))
a = square(x)
add(square(a), square(a)).backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_allclose(xt.grad.numpy(), 8 * 2.0**3, rtol=1e-15)  # torch: the true derivative 8x^3
np.testing.assert_allclose(x.grad, 12 * 2.0**3, rtol=1e-15)  # ours: 4x^3 + 8x^3, as predicted
assert x.grad != xt.grad.item()
print(f"torch x.grad = {xt.grad.item():.1f} (8x^3);  ours {x.grad:.1f} (12x^3, as predicted)")
print("PyTorch check passed: torch gives 64 = 8x^3; the naive order gives the predicted wrong 96")

# %% [markdown]
# ## Recap
#
# - When a variable that some function made is read by several functions,
#   its creator must run only after all of them have delivered their shares.
# - The loop's stack is depth first: it runs $A$ with a partial gradient,
#   then again with the complete one, and the extra run's share is added in.
# - The result is wrong silently: $12x^3$ instead of $8x^3$ here. Leaves are
#   safe, since nothing runs after them.
# - A right order is a topological order read from the output; PyTorch's
#   engine runs a function once, when all its gradients have arrived.
#
# ## Exercises
#
# **1.** Replace the stack by a queue that takes each function once: write
# `backward_fifo(y)`, the loop of `Variable.backward` with `funcs.pop(0)`,
# appending a creator only if it was never appended before. Check that it
# gives $64$ on this page's graph, but not PyTorch's $4x^3 + 8x^7$ for
# $y = a^2 + (a^2)^2$, whose two branches from $a$ differ in length.

# %% tags=["hide-cell"]
def backward_fifo(y):
    y.grad = np.ones_like(y.data)
    funcs, seen = [y.creator], {y.creator}
    while funcs:
        f = funcs.pop(0)  # first in, first out
        gxs = f.backward(*[output.grad for output in f.outputs])
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        for x, gx in zip(f.inputs, gxs, strict=True):
            x.grad = as_array(gx) if x.grad is None else as_array(x.grad + gx)
            if x.creator is not None and x.creator not in seen:
                funcs.append(x.creator)
                seen.add(x.creator)


for name, branches, true in [("a^2 + a^2", lambda a: add(square(a), square(a)), 8 * 2**3),
                             ("a^2 + (a^2)^2", lambda a: add(square(a), square(square(a))), 4 * 2**3 + 8 * 2**7)]:
    x = Variable(np.array(2.0))
    backward_fifo(branches(square(x)))
    print(f"y = {name:13} queue: x.grad = {x.grad:g}   (true: {true})")

# %% [markdown]
# **2.** With three branches, $a = x^2$ and $y = (a^2 + a^2) + a^2$, predict
# with the stack what the framework returns (PyTorch gives $12x^3$), then
# check your formula at $x = 1, 2$.

# %% tags=["hide-cell"]
# pops: Add, D (a.grad = 2a), A (x.grad = 4x^3), Add, C (a.grad = 4a), A (+ 8x^3), B (a.grad = 6a), A (+ 12x^3)
for value in (1.0, 2.0):
    x = Variable(np.array(value))
    a = square(x)
    add(add(square(a), square(a)), square(a)).backward()
    assert x.grad == 24 * value**3
    print(f"x = {value:g}: framework {x.grad:g} = 24x^3, twice PyTorch's 12x^3 = {12 * value**3:g}")
