# %% [markdown]
# # Step 03: Chaining functions
#
# Step 02 made every `Function` take a `Variable` and return a `Variable`.
# That single rule is what lets functions be chained: the output of one is a
# valid input of the next. This step adds a second function, `Exp`, and builds
# the composite that the next few steps differentiate,
#
# $$y = \left(e^{x^2}\right)^2 = e^{2x^2}.$$
#
# ## The framework so far
#
# `Variable`, `Function` and `Square` are unchanged from step 02.

# %%
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data


# %%
class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


# %%
class Square(Function):
    def forward(self, x):
        return x ** 2


# %% [markdown]
# ## A new function: `Exp`
#
# `Exp` computes $y = e^x$ element-wise. Like `Square`, it only has to say what
# its `forward` does; the base class handles the `Variable`s.

# %%
class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# %% [markdown]
# ## Composition
#
# We write the composite as three functions applied in turn:
# $A(x) = x^2$, then $B(a) = e^a$, then $C(b) = b^2$, so
# $y = C(B(A(x)))$. Each call returns a `Variable`, and we keep every
# intermediate result in a name of its own.

# %%
A = Square()
B = Exp()
C = Square()

x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print(f"x = {x.data:.6f}")
print(f"a = A(x) = x^2   = {a.data:.6f}")
print(f"b = B(a) = e^a   = {b.data:.6f}")
print(f"y = C(b) = b^2   = {y.data:.6f}")
print(f"closed form e^(2x^2) = {np.exp(2 * 0.5 ** 2):.6f}")

# %% [markdown]
# The last two lines agree: $e^{2 \cdot 0.25} = e^{0.5} \approx 1.648721$.
#
# Drawn as a graph, the computation is a chain in which variables and
# functions alternate:
#
# ```
# x --> [A: square] --> a --> [B: exp] --> b --> [C: square] --> y
# ```
#
# Such a chain is a *computational graph*. Here it is written down by the
# program as it runs, one function call at a time; PyTorch builds its graphs
# the same way ("define-by-run"). The intermediate variables `a` and `b` matter:
# the derivative of `y` depends on them, and from step 06 on the backward pass
# reads them.
#
# `A` and `C` are two separate `Square` objects even though they compute the
# same thing. So far that is a matter of style; from step 06 on, a function
# object remembers the input of its call, so each place in the graph needs its
# own object.
#
# Since every function works element-wise, the same chain runs unchanged on an
# array, computing $e^{2x^2}$ for each element:

# %%
xs = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
ys = C(B(A(xs)))
print("x           =", xs.data)
print("C(B(A(x)))  =", np.array2string(ys.data, precision=6))
print("e^(2x^2)    =", np.array2string(np.exp(2 * xs.data ** 2), precision=6))

# %% [markdown]
# Nothing in `Function` limits the length of a chain. The next step asks how
# fast `y` changes when `x` changes, first by brute force.
#
# ## Check against PyTorch
#
# We repeat the chain with `torch.square` and `torch.exp` and compare the
# intermediates and the result. NumPy and PyTorch compute $e^x$ with different
# library code, whose results may differ in the last bit (the unit roundoff of
# float64 is $2^{-53} \approx 1.1 \times 10^{-16}$), so the comparison allows a
# relative difference of $10^{-14}$: a few units in the last place, nothing
# more.

# %%
import torch

rng = np.random.default_rng(0)
for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0]), rng.uniform(-2.0, 2.0, size=(3, 4))):
    x = Variable(array)
    a = A(x)
    b = B(a)
    y = C(b)
    t = torch.tensor(array)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ty = torch.square(tb)
    for ours, theirs in ((a, ta), (b, tb), (y, ty)):
        np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-14, atol=0)
    print(f"shape {array.shape!s:6}: a, b, y equal torch.square, torch.exp, torch.square")

print("PyTorch check passed: the chain square -> exp -> square equals torch, intermediates included")
