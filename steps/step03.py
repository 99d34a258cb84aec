# %% [markdown]
# # Step 03: Chaining functions
#
# Step 02 made every `Function` take a `Variable` and return a `Variable`.
# That one rule lets functions be chained: the output of one is a valid input
# of the next. This step adds a second function, `Exp`, and builds the
# composite the next steps differentiate,
#
# $$y = \left(e^{x^2}\right)^2 = e^{2x^2}.$$
#
# The framework so far (`Variable`, `Function`, `Square`, unchanged since
# step 02) is in the collapsed cell.

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt
import numpy as np

from tinypytorch.utils.pictures import draw_dag


class Variable:
    def __init__(self, data):
        self.data = data


class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2


# %% [markdown]
# ## A new function: `Exp`
#
# `Exp` computes $y = e^x$ element-wise. Like `Square`, it only says what its
# `forward` does; the base class handles the `Variable`s.

# %%
class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# %% [markdown]
# ## Composition
#
# The composite is three functions applied in turn: $A(x) = x^2$, then
# $B(a) = e^a$, then $C(b) = b^2$, so $y = C(B(A(x)))$. Each call returns a
# `Variable`, and each intermediate result keeps a name of its own.

# %%
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print(f"x = {x.data:.6f}   a = {a.data:.6f}   b = {b.data:.6f}   y = {y.data:.6f}")
print(f"closed form e^(2x^2) = {np.exp(2 * 0.5 ** 2):.6f}")

# %% [markdown]
# Drawn, the computation is a chain in which variables (round boxes) and
# functions (square boxes) alternate, each variable with its value:

# %% tags=["hide-input"]
nodes = {"x": ("leaf", "x"), "A": ("function", "A\nSquare"), "a": ("variable", "a"),
         "B": ("function", "B\nExp"), "b": ("variable", "b"), "C": ("function", "C\nSquare"),
         "y": ("output", "y")}
edges = [("x", "A"), ("A", "a"), ("a", "B"), ("B", "b"), ("b", "C"), ("C", "y")]
values = {"x": x, "a": a, "b": b, "y": y}
fig, ax = plt.subplots(figsize=(8.5, 2.2))
draw_dag(nodes, edges, ax=ax, notes={name: f"{v.data:.4f}" for name, v in values.items()},
         title="y = C(B(A(x))) at x = 0.5: a computational graph")
plt.show()

# %% [markdown]
# Such a chain is a *computational graph*. The program writes it down as it
# runs, one call at a time; PyTorch builds its graphs the same way
# ("define-by-run"). The intermediates `a` and `b` matter: the derivative of
# `y` depends on them, and from step 06 on the backward pass reads them. For
# the same reason `A` and `C` are two `Square` objects: from step 06 on a
# function object remembers the input of its call, so each place in the
# graph needs its own.
#
# Every function works element-wise, so the same chain runs unchanged on an
# array, computing $e^{2x^2}$ for each element:

# %%
xs = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
print("C(B(A(x))) =", np.array2string(C(B(A(xs))).data, precision=6))
print("e^(2x^2)   =", np.array2string(np.exp(2 * xs.data ** 2), precision=6))

# %% [markdown]
# ## Check against PyTorch
#
# We repeat the chain with `torch.square` and `torch.exp` and compare the
# intermediates and the result. NumPy and PyTorch compute $e^x$ with different
# library code, whose results may differ in the last bit (float64's unit
# roundoff is $2^{-53} \approx 1.1 \times 10^{-16}$), so the comparison
# allows a relative difference of $10^{-14}$: a few units in the last place.

# %%
import torch  # noqa: E402

rng = np.random.default_rng(0)
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0]), rng.uniform(-2.0, 2.0, size=(3, 4))):
    a = A(Variable(array))
    b = B(a)
    y = C(b)
    ta = torch.square(torch.tensor(array))
    tb = torch.exp(ta)
    for ours, theirs in ((a, ta), (b, tb), (y, torch.square(tb))):
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-14, atol=0)
    print(f"shape {array.shape!s:6}: a, b, y equal torch.square, torch.exp, torch.square")
print("PyTorch check passed: the chain square -> exp -> square equals torch, intermediates included")

# %% [markdown]
# ## Recap
#
# - Since a `Function` maps a `Variable` to a `Variable`, functions chain:
#   `C(B(A(x)))`.
# - A chain of calls is a computational graph, variables and functions in
#   turn, recorded as the program runs (define-by-run).
# - The intermediate variables are part of the graph; the derivative will
#   need them.
# - `Exp` is one more `forward`; nothing in `Function` limits a chain's
#   length.
#
# ## Exercises
#
# **1.** Write `compose(*functions)`, which returns a Python function that
# applies the given functions in order, so that
# `compose(Square(), Exp(), Square())(x)` is `C(B(A(x)))`. Compare it with
# torch on a vector.

# %% tags=["hide-cell"]
def compose(*functions):
    def composite(x):
        for f in functions:
            x = f(x)
        return x
    return composite


array = np.array([-1.0, 0.0, 0.5, 1.0])
ours = compose(Square(), Exp(), Square())(Variable(array)).data
np.testing.assert_allclose(ours, torch.square(torch.exp(torch.square(torch.tensor(array)))).numpy(), rtol=1e-14)
print("compose(Square(), Exp(), Square())(x) =", np.array2string(ours, precision=6))

# %% [markdown]
# **2.** Write `Log(Function)`, the natural logarithm, and chain it after
# `Exp`. Is `Log()(Exp()(x))` exactly `x`? Compare it with `x` and with
# `torch.log(torch.exp(t))`.

# %% tags=["hide-cell"]
class Log(Function):
    def forward(self, x):
        return np.log(x)


array = np.linspace(-3.0, 3.0, 7)
back = Log()(Exp()(Variable(array))).data
np.testing.assert_allclose(back, torch.log(torch.exp(torch.tensor(array))).numpy(), rtol=1e-14, atol=1e-15)
assert np.all(np.abs(back - array) <= 1e-15)
print("log(exp(x)) is x within 1e-15 for every element, but exact only up to rounding")
