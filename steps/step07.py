# %% [markdown]
# # Step 07: Automatic backward, every variable knows its creator
#
# In step 06 we ran the backward pass by hand: we knew that `y` came from `C`,
# that `C`'s input was `b`, and so on, and called the `backward` methods in that
# order. The forward pass had all of that information. This step makes the
# forward pass **record it as links** (a variable remembers the function that
# made it, its `creator`; a function remembers its `input` and `output`), and
# lets `Variable.backward` follow the links by itself, recursively.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from tinypytorch.utils.listing import show_change
from tinypytorch.utils.pictures import draw_dag, graph_of

# %% [markdown]
# ## What changes
#
# The whole framework as it stands after this step is in the collapsed cell
# below (each step 01-22 is a self-contained snapshot); `Square`, `Exp` and
# `numerical_diff` are step 06's.

# %% tags=["hide-cell"]
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


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# `Function.__call__` records the links while the forward pass runs: the
# output's creator is this function, and the function keeps its input and its
# output (`self.output` is not used yet; step 08's loop needs it):

# %%
show_change(7, "Function.__call__")

# %% [markdown]
# `Variable` gains `creator` and a `backward` that does for one variable what
# we did by hand: give the creator this variable's gradient, store the result
# as the gradient of the creator's input, and ask that input to do the same.
# The recursion stops at a **leaf**, a variable the user made, whose `creator`
# is `None`:

# %%
show_change(7, "Variable")

# %% [markdown]
# ## The links after a forward pass

# %%
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print("y.creator is C:", y.creator is C, "| C.input is b:", C.input is b, "| C.output is y:", C.output is y)
print("x.creator:", x.creator)


# %% tags=["hide-input"]
def links_picture(y, names, order, title):
    """The chain as the objects hold it: arrows in the direction of forward, labelled with the attribute
    that holds the link; under each function, when y.backward() reaches it."""
    nodes, edges = graph_of(y, names=names)
    label = {(a, b): "input" if nodes[b][0] == "function" else "output\ncreator" for a, b in edges}
    functions = [n for n, (kind, _) in nodes.items() if kind == "function"]  # met from y back: C, B, A
    _, ax = plt.subplots(figsize=(8, 2.6))
    draw_dag(nodes, edges, ax=ax, title=title, edge_labels=label, notes=dict(zip(functions, order)))
    plt.show()


links_picture(y, {x: "x", a: "a", b: "b", y: "y"},
              ["1st: in\ny.backward()", "2nd: in\nb.backward()", "3rd: in\na.backward()"],
              "y = C(B(A(x))): its links, and when y.backward() runs each function's backward")

# %% [markdown]
# Each arrow is a link: a function's `input` on the way in, its `output` (and
# the output's `creator`, pointing back) on the way out. Read right to left,
# `creator` then `input` then `creator` ... walks from `y` to the leaf `x`.
# `y.backward()` runs `C.backward`, then, *inside* that call, `b.backward()`
# runs `B.backward`, and inside that `a.backward()` runs `A.backward`: three
# nested calls for three functions.
#
# The graph was recorded by running the program, not declared in advance: an
# `if` or a loop in the forward pass records whichever path was taken. PyTorch
# builds its graphs the same way ("define-by-run").
#
# ## Automatic backward
#
# One call now does the whole backward pass. We still seed the output's
# gradient ourselves (step 09 removes that chore):

# %%
y.grad = np.array(1.0)
y.backward()
print(f"b.grad = {b.grad:.10f}   a.grad = {a.grad:.10f}   x.grad = {x.grad:.10f}")

# %% [markdown]
# The same numbers as step 06, without our help. Because each call of
# `backward` calls the next before it returns, a chain of $n$ functions nests
# $n$ Python calls; Python stops at 1,000 by default, which step 08 is about.
#
# ## The same links in PyTorch
#
# PyTorch's `grad_fn` is our `creator`. It points to the node that computes the
# backward of the forward function, and `next_functions` leads towards the
# inputs (`torch.square` is a power, hence `PowBackward0`). The leaf's last
# node, `AccumulateGrad`, writes into `t.grad`; the leaf itself has no
# `grad_fn`, as our `x` has no creator:

# %%
t = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
node, chain = torch.square(torch.exp(torch.square(t))).grad_fn, []
while node is not None:
    chain.append(type(node).__name__)
    node = node.next_functions[0][0] if node.next_functions else None
print(" -> ".join(chain), "| t.grad_fn is None:", t.grad_fn is None)

# %% [markdown]
# ## Check against PyTorch
#
# `y.backward()` on a scalar and on an array (seeded with ones) against
# PyTorch's gradients of `b`, `a` and `x`; `rtol=1e-14` because $e^a$ may
# differ in the last bit between the two libraries.

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

print("PyTorch check passed: recursive y.backward() gives torch's gradients for b, a and x")

# %% [markdown]
# ## Recap
#
# - The forward pass records the graph: `Function.__call__` sets the output's
#   `creator` and keeps `input` and `output`.
# - A leaf is a variable without a creator; PyTorch calls the creator
#   `grad_fn`, and a leaf has none.
# - `Variable.backward` takes one chain-rule step through its creator and then
#   calls `backward` on the creator's input: the recursion visits the functions
#   from the output back to the leaf.
# - The graph is define-by-run: whatever the forward pass executed is what
#   backward follows.
#
# ## Exercises
#
# **1. Backprop ninja: `Sin`.** Write a `Sin` function for this framework,
# forward $\sin x$ and a backward you work out by hand, and compute the
# gradient of $\sin(x^2)$ at $x = 0.5$ with `y.backward()`.

# %% tags=["hide-cell"]
class Sin(Function):
    def forward(self, x):
        return np.sin(x)

    def backward(self, gy):
        return np.cos(self.input.data) * gy  # d sin(x)/dx = cos x


x = Variable(np.array(0.5))
y = Sin()(Square()(x))
y.grad = np.array(1.0)
y.backward()
print(f"d sin(x^2)/dx at 0.5 = {x.grad:.6f}   (2x cos x^2 = {2 * 0.5 * np.cos(0.25):.6f})")


# %% [markdown]
# **2. Walk the links.** Write `path(y)`, the names of the functions met on the
# way from `y` to its leaf, following `creator` and `input` (no recursion
# needed). For `Square()(Exp()(Square()(x)))` it lists PyTorch's chain of
# `grad_fn`s, with our names.

# %% tags=["hide-cell"]
def path(y):
    names = []
    while y.creator is not None:
        names.append(type(y.creator).__name__)
        y = y.creator.input
    return names


print(path(Square()(Exp()(Square()(Variable(np.array(0.5)))))))
