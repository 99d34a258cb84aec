# %% [markdown]
# # Step 07: Automatic backward, every variable knows its creator
#
# In step 06 we ran the backward pass ourselves: we knew that `y` came from
# `C`, that `C`'s input was `b`, and so on, and we called the `backward`
# methods in that order. All of this is information the forward pass already
# had. This step makes the forward pass record it, as links between variables
# and functions, and lets `Variable.backward` follow the links.
#
# ## Two kinds of link
#
# Walking a chain backwards from `y` needs two questions answered at every
# stage: *which function produced this variable?* and *what was that function's
# input?* So:
#
# - a `Variable` remembers its **creator**, the function that produced it.
#   Variables made directly by the user, such as the input `x`, have no creator
#   (`None`): they are the *leaves* of the graph;
# - a `Function` remembers its **input** (as in step 06) and now also its
#   **output**.
#
# With these links the graph is a linked structure that can be followed from
# the output back to the leaves:
#
# ```
#     x <--input-- A <--creator-- a <--input-- B <--creator-- b <--input-- C <--creator-- y
# ```
#
# ## `Variable`: `creator`, `set_creator` and `backward`

# %%
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        f = self.creator
        if f is not None:
            x = f.input
            x.grad = f.backward(self.grad)  # one step of the chain rule
            x.backward()  # then carry on from the input, towards the leaves


# %% [markdown]
# `backward` does for one variable what we did by hand in step 06: take the
# creator `f`, give it this variable's gradient, and store the result as the
# gradient of `f`'s input. Then it asks the input to do the same. The recursion
# ends at a leaf, whose `creator` is `None`. Called on `y`, it therefore runs
# `C.backward`, `B.backward`, `A.backward`, in that order, and every variable on
# the way receives its gradient.
#
# ## `Function` records the links
#
# The links are made while the forward pass runs: `__call__` sets itself as the
# creator of its output and keeps references to its input and output. Nothing
# else changes. `self.output` is not needed by the recursive `backward` above;
# step 08's loop uses it.

# %%
class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        output.set_creator(self)  # the output remembers where it came from
        self.input = input  # kept for backward, which needs the input's value
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError()

    def backward(self, gy):
        raise NotImplementedError()


# %% [markdown]
# `Square`, `Exp` and `numerical_diff` are unchanged from step 06.

# %%
class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.input.data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.input.data
        return np.exp(x) * gy


# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Following the links
#
# After a forward pass the links are in place:

# %%
A = Square()
B = Exp()
C = Square()

x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)

print("y.creator is C:", y.creator is C)
print("C.input is b:  ", C.input is b)
print("C.output is y: ", C.output is y)
print("x.creator:     ", x.creator)

# %% [markdown]
# Starting from `y` and alternating "creator" and "input" visits the whole
# chain in reverse, ending at the leaf:

# %%
v = y
while v.creator is not None:
    f = v.creator
    print(f"{v.data:.6f} was created by {type(f).__name__}, whose input was {f.input.data:.6f}")
    v = f.input
print(f"{v.data:.6f} has no creator: it is the leaf x ->", v is x)

# %% [markdown]
# This graph was recorded by running the program, not declared in advance. A
# Python `if` or loop in the forward pass simply records whatever path was
# taken. PyTorch builds its graphs the same way ("define-by-run").
#
# ## Automatic backward
#
# One call now does the whole backward pass. We still have to seed the output's
# gradient ourselves (step 09 removes that chore):

# %%
y.grad = np.array(1.0)
y.backward()
print(f"b.grad = {b.grad:.10f}")
print(f"a.grad = {a.grad:.10f}")
print(f"x.grad = {x.grad:.10f}")

# %% [markdown]
# The same numbers as step 06, now without our help. Each call of
# `Variable.backward` calls `backward` on the next variable before it returns,
# so a chain of $n$ functions nests $n$ Python calls. Python refuses to nest
# more than 1000 by default; step 08 replaces the recursion by a loop.
#
# ## The same links in PyTorch
#
# PyTorch stores the creator as `grad_fn`. It points not to the forward
# function but to the node that computes its backward, and each node lists the
# next nodes towards the inputs in `next_functions`. Following them reproduces
# our chain (`torch.square` is implemented as a power, hence `PowBackward0`):

# %%
import torch

t = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
ty = torch.square(torch.exp(torch.square(t)))
node = ty.grad_fn
while node is not None:
    print(type(node).__name__)
    node = node.next_functions[0][0] if node.next_functions else None
print("t.grad_fn is None:", t.grad_fn is None)

# %% [markdown]
# The last node, `AccumulateGrad`, belongs to the leaf `t`: it writes the
# arriving gradient into `t.grad`. A leaf has no `grad_fn`, just as our `x` has
# no creator.
#
# ## Check against PyTorch
#
# `y.backward()` on a scalar and on an array (seeded with ones), compared with
# PyTorch's gradients of `b`, `a` and `x`; `rtol=1e-14` because $e^a$ may differ
# in the last bit between the two libraries.

# %%
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0])):
    x = Variable(array)
    a = Square()(x)
    b = Exp()(a)
    y = Square()(b)
    y.grad = np.ones_like(y.data)
    y.backward()

    t = torch.tensor(array, requires_grad=True)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    torch.square(tb).backward(torch.ones_like(tb))

    for ours, theirs in ((b, tb), (a, ta), (x, t)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-14, atol=0)
    print(f"x = {np.array2string(array)}: y.backward() gives torch's b.grad, a.grad, x.grad")

print("PyTorch check passed: recursive y.backward() gives torch's gradients for b, a and x")
