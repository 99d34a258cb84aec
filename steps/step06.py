# %% [markdown]
# # Step 06: Backward by hand
#
# Step 05 computed the gradients of $y = C(B(A(x)))$ in reverse order, one
# local derivative at a time. This step moves that recipe into the framework.
# Two additions do it:
#
# - every `Variable` gets a `grad` attribute, to hold $\frac{dy}{dv}$ for
#   itself once it is known;
# - every `Function` gets a `backward` method, which turns the gradient with
#   respect to its output into the gradient with respect to its input, and
#   remembers its input so that it can evaluate its local derivative.
#
# We still call the `backward` methods ourselves, in the right order; step 07
# automates that.
#
# ## `Variable` gets a `grad`
#
# `grad` starts as `None`, meaning "not computed yet". Once computed it is an
# array of the same shape as `data`: one partial derivative per element.

# %%
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass


# %% [markdown]
# ## `Function` remembers its input and gets a `backward`
#
# `backward(gy)` receives `gy`, the gradient of the final output with respect
# to this function's output, and returns `gx`, the gradient with respect to its
# input. By the chain rule, for an element-wise function $y = F(x)$,
#
# $$g_x = F'(x)\, g_y,$$
#
# element by element. $F'$ is evaluated at the input $x$, which is gone by the
# time `backward` runs unless the forward pass kept it; so `__call__` now stores
# the input `Variable` in `self.input`. Only the reference is stored, not a
# copy.

# %%
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


# %% [markdown]
# Each concrete function now states its derivative: $\frac{d}{dx}x^2 = 2x$ and
# $\frac{d}{dx}e^x = e^x$.

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


# %% [markdown]
# `Exp.backward` computes $e^x$ a second time, although the forward pass already
# had it. Reusing the output would save one `exp` per call, and PyTorch's
# `ExpBackward` does exactly that; we keep the recomputation because it reads
# like the formula, and because step 07 is where functions start to remember
# their outputs.
#
# `numerical_diff` is unchanged from step 04.

# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Backpropagation by hand
#
# The forward pass is the same as in step 05. Note the three separate function
# objects: each remembers the input of its own call, and a single `Square`
# object used for both $A$ and $C$ would remember only the last one.

# %%
A = Square()
B = Exp()
C = Square()

x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)

# %% [markdown]
# Now the reverse sweep. It starts from $g_y = \frac{dy}{dy} = 1$, and each
# function, from the last to the first, turns the gradient of its output into
# the gradient of its input:

# %%
y.grad = np.array(1.0)
b.grad = C.backward(y.grad)
a.grad = B.backward(b.grad)
x.grad = A.backward(a.grad)
print(f"y.grad = {y.grad:.10f}")
print(f"b.grad = {b.grad:.10f}")
print(f"a.grad = {a.grad:.10f}")
print(f"x.grad = {x.grad:.10f}")

# %% [markdown]
# These are the numbers worked out by hand in step 05: $g_b = 2b$,
# $g_a = e^a g_b$ and $g_x = 2x\,g_a = 2e^{0.5}$.
#
# The same code handles arrays. With an array input, `y` is an array too, and
# the seed `y.grad` must have its shape. Seeding with ones computes, for each
# element, $\frac{dy_i}{dx_i} = 4x_i\,e^{2x_i^2}$. (Strictly, a seed of ones
# gives the gradient of $\sum_i y_i$; for an element-wise function each $y_i$
# depends on $x_i$ alone, so the two coincide.)

# %%
A = Square()
B = Exp()
C = Square()

xs = Variable(np.array([-1.0, 0.0, 0.5, 1.0]))
ys = C(B(A(xs)))
ys.grad = np.ones_like(ys.data)
gb = C.backward(ys.grad)
ga = B.backward(gb)
xs.grad = A.backward(ga)
print("x.grad       =", np.array2string(xs.grad, precision=6))
print("4x e^(2x^2)  =", np.array2string(4 * xs.data * np.exp(2 * xs.data ** 2), precision=6))

# %% [markdown]
# ## What is still manual
#
# The framework now knows every local derivative, but we supplied the
# structure: which function produced which variable, and the order in which to
# call the `backward` methods. Calling `A.backward(a.grad)` before `B.backward`
# fails, since `a.grad` is still `None`; pairing a gradient with the wrong
# function, say `C.backward(a.grad)`, is worse: it returns a wrong number
# without any error. Step 07 lets each variable remember the function that
# created it, so the graph can be walked automatically.
#
# ## Check against PyTorch
#
# We repeat both examples in PyTorch, keeping the intermediate gradients with
# `retain_grad()`, and compare `b.grad`, `a.grad` and `x.grad`. The arithmetic
# is the same multiplications; only $e^a$ may differ in the last bit between
# NumPy and PyTorch, hence `rtol=1e-14`.

# %%
import torch

for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.0])):
    A, B, C = Square(), Exp(), Square()
    x = Variable(array)
    a = A(x)
    b = B(a)
    y = C(b)
    y.grad = np.ones_like(y.data)
    b.grad = C.backward(y.grad)
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
