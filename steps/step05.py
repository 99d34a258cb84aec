# %% [markdown]
# # Step 05: Backpropagation, the chain rule in reverse
#
# Step 04 ended with two complaints about numerical differentiation: it costs
# two evaluations of the function per input, and it loses a third of float64's
# digits. Backpropagation has neither problem. It obtains the derivatives of
# one output with respect to *every* variable in the computation with a single
# backward sweep, and each derivative is exact up to the rounding of the few
# multiplications it takes. This step is the theory, worked through with
# numbers; step 06 turns it into code.
#
# ## The framework so far
#
# Unchanged from step 04: this step adds no code to the framework.

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


class Exp(Function):
    def forward(self, x):
        return np.exp(x)


# %%
def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## The chain rule
#
# Take the composite of step 03, $y = C(B(A(x)))$, and name the intermediate
# values $a = A(x)$ and $b = B(a)$. The chain rule says that the derivative of
# a composite is the product of the derivatives of its parts, each evaluated at
# the value that went into it:
#
# $$\frac{dy}{dx} = \frac{dy}{db} \cdot \frac{db}{da} \cdot \frac{da}{dx}
#   = C'(b) \cdot B'(a) \cdot A'(x).$$
#
# Each factor is a *local* derivative: it involves one function and one value,
# and nothing else about the graph. With $A(x) = x^2$, $B(a) = e^a$ and
# $C(b) = b^2$:
#
# $$A'(x) = 2x, \qquad B'(a) = e^a, \qquad C'(b) = 2b.$$
#
# ## Two orders for one product
#
# Multiplication is associative, so the product can be evaluated starting from
# either end, and the partial products mean different things.
#
# **From the input** (forward mode), starting from $\frac{dx}{dx} = 1$:
#
# $$\frac{da}{dx} = A'(x) \cdot 1, \qquad
#   \frac{db}{dx} = B'(a)\,\frac{da}{dx}, \qquad
#   \frac{dy}{dx} = C'(b)\,\frac{db}{dx}.$$
#
# Every partial product is the derivative of some variable *with respect to
# the input* $x$.
#
# **From the output** (reverse mode), starting from $\frac{dy}{dy} = 1$:
#
# $$\frac{dy}{db} = C'(b) \cdot 1, \qquad
#   \frac{dy}{da} = \frac{dy}{db}\,B'(a), \qquad
#   \frac{dy}{dx} = \frac{dy}{da}\,A'(x).$$
#
# Every partial product is the derivative *of the output* $y$ with respect to
# some variable.
#
# For a chain with one input and one output, the two orders cost the same. In
# machine learning they do not: the output is one number, the loss, and the
# inputs are millions of parameters. Forward mode yields the derivatives with
# respect to one input per sweep, so it would need a sweep per parameter.
# Reverse mode yields the derivatives of the one output with respect to all
# variables in a single sweep. Reverse mode is what *backpropagation* means:
# derivatives of the output propagate backwards, from $y$ towards the inputs.
#
# ## The backward pass as a recipe
#
# Write $g_v$ for $\frac{dy}{dv}$, the gradient of the output with respect to
# the variable $v$. The reverse sweep is
#
# $$g_y = 1, \qquad g_b = C'(b)\,g_y, \qquad g_a = B'(a)\,g_b, \qquad g_x = A'(x)\,g_a.$$
#
# Every step does the same thing: a function receives the gradient with respect
# to its *output* and multiplies it by its local derivative, which gives the
# gradient with respect to its *input*. Side by side with the forward pass:
#
# ```
# forward:   x  --A-->  a  --B-->  b  --C-->  y
# backward: g_x <--A'(x)-- g_a <--B'(a)-- g_b <--C'(b)-- g_y = 1
# ```
#
# The local derivatives need the forward values: $A'$ needs $x$, $B'$ needs $a$,
# $C'$ needs $b$. So the forward pass runs first and its intermediate values
# must be kept until the backward pass has used them. This is why a framework's
# memory use grows with the size of the graph, the subject of stage 4.
#
# ## A worked example at $x = 0.5$
#
# First the forward pass, with the framework:

# %%
A = Square()
B = Exp()
C = Square()

x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print(f"x = {x.data:.10f}")
print(f"a = x^2 = {a.data:.10f}")
print(f"b = e^a = {b.data:.10f}")
print(f"y = b^2 = {y.data:.10f}")

# %% [markdown]
# Then the backward pass, in plain NumPy: each line multiplies the incoming
# gradient by one local derivative, evaluated at a value the forward pass left
# behind. The function takes those values as arguments, which makes the
# dependence explicit.

# %%
def backward_by_hand(x, a, b):
    """Reverse sweep for y = C(B(A(x))): the gradients g_b, g_a, g_x."""
    g_y = np.ones_like(b)  # dy/dy = 1
    g_b = 2 * b * g_y  # C'(b) = 2b
    g_a = np.exp(a) * g_b  # B'(a) = e^a
    g_x = 2 * x * g_a  # A'(x) = 2x
    return g_b, g_a, g_x


g_b, g_a, g_x = backward_by_hand(x.data, a.data, b.data)
print(f"g_y = dy/dy                  = {1.0:.10f}")
print(f"g_b = C'(b) g_y = {2 * b.data:.10f} x {1.0:.10f} = {g_b:.10f}")
print(f"g_a = B'(a) g_b = {np.exp(a.data):.10f} x {g_b:.10f} = {g_a:.10f}")
print(f"g_x = A'(x) g_a = {2 * x.data:.10f} x {g_a:.10f} = {g_x:.10f}")

# %% [markdown]
# At this point $A'(x) = 2x = 1$, so the last multiplication changes nothing,
# and $g_a = g_x$.
#
# Three independent ways to get the same number: the closed form
# $\frac{d}{dx} e^{2x^2} = 4x\,e^{2x^2}$, which at $x = 0.5$ is $2e^{0.5}$;
# the forward-mode order of the same product; and the central difference of
# step 04 (with `eps = 1e-5`, whose error step 04 estimated at
# $9 \times 10^{-10}$).

# %%
def f(x):
    return Square()(Exp()(Square()(x)))


da_dx = 2 * x.data * 1.0  # forward mode: start from dx/dx = 1
db_dx = np.exp(a.data) * da_dx
dy_dx = 2 * b.data * db_dx
print(f"reverse mode (backprop)  {g_x:.9f}")
print(f"forward mode             {dy_dx:.9f}")
print(f"closed form 4x e^(2x^2)  {4 * 0.5 * np.exp(2 * 0.5 ** 2):.9f}")
print(f"central difference       {numerical_diff(f, Variable(np.array(0.5)), eps=1e-5):.9f}")

# %% [markdown]
# The first three agree to every printed digit; the central difference is
# one unit off in the ninth decimal, as predicted. Backpropagation also produced, free of
# charge, $g_a = \frac{dy}{da}$ and $g_b = \frac{dy}{db}$: the sensitivity of
# the output to every intermediate variable. In a neural network those
# intermediates include the weights, and their gradients are what training
# needs.
#
# Step 06 gives every `Function` a `backward` method that performs one line of
# `backward_by_hand`, and every `Variable` a place to keep its gradient.
#
# ## Check against PyTorch
#
# PyTorch's autograd runs the same reverse sweep. Calling `retain_grad()` on
# the intermediates keeps their gradients (PyTorch frees them by default), so
# we can compare all three of $g_b$, $g_a$, $g_x$, at $x = 0.5$ and on a small
# array. The backward formulas of `torch.square` and `torch.exp` multiply the
# same numbers as ours; only $e^a$ may differ in the last bit between the two
# libraries, hence `rtol=1e-14`.

# %%
import torch

for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.5])):
    x = Variable(array)
    a = Square()(x)
    b = Exp()(a)
    ours = backward_by_hand(x.data, a.data, b.data)

    t = torch.tensor(array, requires_grad=True)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    torch.square(tb).backward(torch.ones_like(tb))  # the seed dy/dy = 1, one per element

    for name, mine, theirs in zip(("g_b", "g_a", "g_x"), ours, (tb.grad, ta.grad, t.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-14, atol=0)
    print(f"x = {np.array2string(array)}: g_b, g_a, g_x equal torch's b.grad, a.grad, x.grad")

print("PyTorch check passed: gradients computed by hand in reverse order equal torch autograd")
