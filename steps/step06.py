# %% [markdown]
# # Step 06: Backward by hand
#
# Step 05 computed the gradients of $y = C(B(A(x)))$ in reverse order, one
# local derivative at a time. This step moves that recipe into the
# framework. The idea: **each `Function` gets a `backward` method** that turns
# the gradient of its output into the gradient of its input, and **each
# `Variable` a `grad`** to hold its gradient. We still call the `backward`
# methods ourselves, in the right order; step 07 automates that.
#
# The whole framework after this step is in the collapsed cell; below, what
# changed since step 05.

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt
import numpy as np

from tinypytorch.utils.listing import show_change
from tinypytorch.utils.pictures import draw_dag


class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        self.input = input  # kept for backward, which needs the input's value
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
# ## What changed
#
# `backward(gy)` receives $g_y$, the gradient of the final output with
# respect to this function's output, and returns $g_x$, the gradient with
# respect to its input. For an element-wise $y = F(x)$ the chain rule gives
# $g_x = F'(x)\,g_y$, element by element. $F'$ needs the input $x$, so
# `__call__` now keeps the input `Variable` in `self.input` (a reference, not
# a copy). `grad` starts as `None`, "not computed yet"; once computed it has
# the shape of `data`.

# %%
show_change(6, "Variable", "Function", "Square", "Exp")

# %% [markdown]
# `Exp.backward` computes $e^x$ again, although the forward pass had it.
# PyTorch's `ExpBackward` reuses the output instead; we keep the formula as
# written until functions remember their outputs (step 07).
#
# ## Backpropagation by hand
#
# The forward pass is step 05's. Each place in the graph needs its own
# function object: each remembers the input of its own call, and one
# `Square` used for both $A$ and $C$ would remember only the last.

# %%
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)

# %% [markdown]
# The reverse sweep starts from $g_y = \frac{dy}{dy} = 1$, and each function,
# last to first, turns its output's gradient into its input's:

# %%
y.grad = np.array(1.0)
b.grad = C.backward(y.grad)
a.grad = B.backward(b.grad)
x.grad = A.backward(a.grad)
print(f"y.grad = {y.grad:.6f}   b.grad = {b.grad:.6f}   a.grad = {a.grad:.6f}   x.grad = {x.grad:.6f}")

# %% [markdown]
# These are step 05's numbers: $g_b = 2b$, $g_a = e^a g_b$,
# $g_x = 2x\,g_a = 2e^{0.5}$. Drawn, the forward pass runs along the top;
# our three calls, numbered in the order we made them, run back along the
# bottom, each reading the input its function kept (dotted):

# %% tags=["hide-input"]
top, bottom = 1.4, 0.0
order = ["x", "A", "a", "B", "b", "C", "y"]
FUNCTIONS = {"A": "Square", "B": "Exp", "C": "Square"}
nodes, positions = {}, {}
for i, name in enumerate(order):
    v = {"x": x, "a": a, "b": b, "y": y}.get(name)
    kind = "function" if v is None else "leaf" if name == "x" else "output" if name == "y" else "variable"
    nodes[name] = (kind, f"{name}\n{v.data:.4f}" if v is not None else f"{name}\n{FUNCTIONS[name]}")
    positions[name] = (1.8 * i, top)
    if v is None:
        nodes[name + "'"] = ("highlight", f"{name}.\nbackward")
    else:
        nodes[name + "'"] = ("variable", f"{name}.grad\n{v.grad:.4f}")
    positions[name + "'"] = (1.8 * i, bottom)
forward = list(zip(order, order[1:]))
backward = [(b2 + "'", a2 + "'") for a2, b2 in forward]
reads = [(f + "'", v) for f, v in (("A", "x"), ("B", "a"), ("C", "b"))]  # each backward reads its self.input
fig, ax = plt.subplots(figsize=(10, 3.2))
draw_dag(nodes, forward + backward + reads, ax=ax, positions=positions,
         notes={"C'": "call 1", "B'": "call 2", "A'": "call 3"},
         edge_styles={edge: dict(linestyle=":", color="#b22222", lw=1.0) for edge in reads},
         title="forward (top) and the backward calls we make by hand (bottom)")
ax.text(positions["B"][0], (top + bottom) / 2, "self.input", ha="center", fontsize=9, color="#b22222")
plt.show()

# %% [markdown]
# The same code handles arrays. The seed `y.grad` then needs the shape of
# `y`; a seed of ones gives, for each element, $\frac{dy_i}{dx_i} =
# 4x_i\,e^{2x_i^2}$ (strictly, the gradient of $\sum_i y_i$, which for an
# element-wise function is the same thing).

# %%
A, B, C = Square(), Exp(), Square()
xs = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
ys = C(B(A(xs)))
xs.grad = A.backward(B.backward(C.backward(np.ones_like(ys.data))))
print("x.grad      =", np.array2string(xs.grad, precision=6))
print("4x e^(2x^2) =", np.array2string(4 * xs.data * np.exp(2 * xs.data ** 2), precision=6))

# %% [markdown]
# ## What is still manual
#
# We supplied the structure: which function produced which variable, and the
# order of the calls. `A.backward(a.grad)` before `B.backward` fails, since
# `a.grad` is still `None`; pairing a gradient with the wrong function, say
# `C.backward(a.grad)`, is worse: a wrong number and no error. Step 07 lets
# each variable remember the function that created it, so the graph can be
# walked automatically.
#
# ## Check against PyTorch
#
# The two examples again in PyTorch, keeping the intermediates' gradients
# with `retain_grad()`. The arithmetic is the same multiplications; only $e^a$
# may differ in the last bit between NumPy and PyTorch, hence `rtol=1e-14`.

# %%
import torch  # noqa: E402

for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0])):
    A, B, C = Square(), Exp(), Square()
    x = Variable(array)
    a = A(x)
    b = B(a)
    y = C(b)
    b.grad = C.backward(np.ones_like(y.data))
    a.grad = B.backward(b.grad)
    x.grad = A.backward(a.grad)
    t = torch.tensor(array, requires_grad=True)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    torch.square(tb).backward(torch.ones_like(tb))
    for ours, theirs in ((b, tb), (a, ta), (x, t)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-14, atol=0)
    print(f"x = {np.array2string(array)}: b.grad, a.grad, x.grad equal torch's")
print("PyTorch check passed: backward methods called by hand give torch's gradients for b, a and x")

# %% [markdown]
# ## Recap
#
# - `Variable.grad` holds $\frac{dy}{dv}$ once the backward pass has
#   computed it; it starts as `None`.
# - `Function.backward(gy)` returns $F'(x)\,g_y$; `__call__` keeps the input
#   in `self.input` so that `backward` can evaluate $F'(x)$.
# - Seeding `y.grad` with ones and calling the `backward` methods from last to
#   first gives every variable's gradient.
# - The order and the pairing of calls are still ours to get right.
#
# ## Exercises
#
# These are "backprop ninja" exercises: you write the backward yourself and
# PyTorch judges it.
#
# **1.** Write `Sin(Function)` with its `backward` ($\frac{d}{dx}\sin x =
# \cos x$). Then compute, by calling `backward` methods by hand, the
# gradients of $y = (\sin x)^2$ at $x = (0.3, 1, 2.5)$, for $x$ and for
# $s = \sin x$, and compare them with torch.

# %% tags=["hide-cell"]
class Sin(Function):
    def forward(self, x):
        return np.sin(x)

    def backward(self, gy):
        x = self.input.data
        return np.cos(x) * gy


S, Q = Sin(), Square()
x = Variable(np.array([0.3, 1.0, 2.5]))
s = S(x)
y = Q(s)
s.grad = Q.backward(np.ones_like(y.data))
x.grad = S.backward(s.grad)

t = torch.tensor([0.3, 1.0, 2.5], dtype=torch.float64, requires_grad=True)
ts = torch.sin(t)
ts.retain_grad()
torch.square(ts).sum().backward()
np.testing.assert_allclose(s.grad, ts.grad.numpy(), rtol=1e-14)
np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-14)
print("x.grad =", np.array2string(x.grad, precision=6), "== torch; 2 sin x cos x = sin 2x:",
      np.array2string(np.sin(2 * x.data), precision=6))

# %% [markdown]
# **2.** Write `Tanh(Function)`. Its derivative is written with its output,
# $\frac{d}{dx}\tanh x = 1 - \tanh^2 x$; this step's functions keep only
# their input, so `backward` recomputes $\tanh x$ from it. Backpropagate by hand
# through $y = \tanh(e^{x})$ at $x = (-1, 0, 0.5)$, and compare both
# gradients, $g_e$ for $e = e^x$ and $g_x$, with torch and $g_x$ with
# `numerical_diff`.

# %% tags=["hide-cell"]
class Tanh(Function):
    def forward(self, x):
        return np.tanh(x)

    def backward(self, gy):
        y = np.tanh(self.input.data)  # the output (this step's functions keep only their input)
        return (1 - y ** 2) * gy


E, T = Exp(), Tanh()
x = Variable(np.array([-1.0, 0.0, 0.5]))
e = E(x)
y = T(e)
e.grad = T.backward(np.ones_like(y.data))
x.grad = E.backward(e.grad)

t = torch.tensor([-1.0, 0.0, 0.5], dtype=torch.float64, requires_grad=True)
te = torch.exp(t)
te.retain_grad()
torch.tanh(te).sum().backward()
np.testing.assert_allclose(e.grad, te.grad.numpy(), rtol=1e-13)
np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=1e-13)
numerical = numerical_diff(lambda v: Tanh()(Exp()(v)), Variable(x.data), eps=1e-5)
np.testing.assert_allclose(x.grad, numerical, rtol=1e-8)
print("x.grad =", np.array2string(x.grad, precision=6), "== torch, and the central difference within 1e-8")
