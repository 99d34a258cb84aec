# %% [markdown]
# # Step 05: Backpropagation, the chain rule in reverse
#
# Step 04 ended with two complaints about numerical differentiation: two
# evaluations of the function per input, and a third of float64's digits
# lost. Backpropagation has neither problem. One backward sweep gives the
# derivatives of one output with respect to *every* variable of the
# computation, each exact up to the rounding of a few multiplications.
#
# The idea: **apply the chain rule from the output back to the input**,
# multiplying one local derivative at a time. This step is the theory,
# worked through with numbers; the framework does not change (the collapsed
# cell holds it as step 04 left it). Step 06 turns the recipe into code.

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


class Exp(Function):
    def forward(self, x):
        return np.exp(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(x.data - eps)
    x1 = Variable(x.data + eps)
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## The chain rule
#
# Take step 03's composite $y = C(B(A(x)))$ with $a = A(x)$, $b = B(a)$. The
# derivative of a composite is the product of the derivatives of its parts,
# each evaluated at the value that went into it:
#
# $$\frac{dy}{dx} = \frac{dy}{db} \cdot \frac{db}{da} \cdot \frac{da}{dx}
#   = C'(b) \cdot B'(a) \cdot A'(x), \qquad A'(x) = 2x,\; B'(a) = e^a,\; C'(b) = 2b.$$
#
# Each factor is *local*: one function, one value, nothing else about the
# graph.
#
# ## Two orders for one product
#
# A product can be evaluated from either end:
#
# - **from the input** (forward mode), starting at $\frac{dx}{dx} = 1$: each
#   partial product is a derivative *with respect to* $x$, $\frac{da}{dx}$,
#   then $\frac{db}{dx}$, then $\frac{dy}{dx}$;
# - **from the output** (reverse mode), starting at $\frac{dy}{dy} = 1$: each
#   partial product is a derivative *of* $y$, $\frac{dy}{db}$, then
#   $\frac{dy}{da}$, then $\frac{dy}{dx}$.
#
# For a chain of one input and one output both cost the same. In machine
# learning they do not: the output is one number, the loss, and the inputs
# are millions of parameters. Forward mode gives the derivatives for one
# input per sweep; reverse mode gives the derivatives of the one output with
# respect to all variables in one sweep. Reverse mode is *backpropagation*.
#
# ## The backward pass as a recipe
#
# Write $g_v = \frac{dy}{dv}$, the gradient of the output with respect to
# $v$. The reverse sweep is
#
# $$g_y = 1, \qquad g_b = C'(b)\,g_y, \qquad g_a = B'(a)\,g_b, \qquad g_x = A'(x)\,g_a.$$
#
# Each function receives the gradient of its *output*, multiplies it by its
# local derivative, and passes on the gradient of its *input*. The local
# derivatives need the forward values ($A'$ needs $x$, $B'$ needs $a$, $C'$
# needs $b$), so the forward pass runs first and its values are kept until
# the backward pass has used them: why a framework's memory grows with its
# graph (stage 4).
#
# ## A worked example at $x = 0.5$
#
# The forward pass, with the framework:

# %%
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)
print(f"x = {x.data}   a = x^2 = {a.data:.6f}   b = e^a = {b.data:.6f}   y = b^2 = {y.data:.6f}")

# %% [markdown]
# The backward pass, in plain NumPy: each line multiplies the incoming
# gradient by one local derivative, at a value the forward pass left behind.

# %%
def backward_by_hand(x, a, b):
    """Reverse sweep for y = C(B(A(x))): the gradients g_b, g_a, g_x."""
    g_y = np.ones_like(b)  # dy/dy = 1
    g_b = 2 * b * g_y  # C'(b) = 2b
    g_a = np.exp(a) * g_b  # B'(a) = e^a
    g_x = 2 * x * g_a  # A'(x) = 2x
    return g_b, g_a, g_x


g_b, g_a, g_x = backward_by_hand(x.data, a.data, b.data)
print(f"g_b = {g_b:.6f}   g_a = {g_a:.6f}   g_x = {g_x:.6f}")

# %% [markdown]
# The two sweeps side by side: forward, values flow left to right; backward,
# gradients flow right to left, each arrow multiplying by the local
# derivative written on it. (At $x = 0.5$, $A'(x) = 2x = 1$, so $g_x = g_a$.)

# %% tags=["hide-input"]
names = ["x", "a", "b", "y"]
values = [x.data, a.data, b.data, y.data]
grads = [g_x, g_a, g_b, 1.0]
nodes = {name: ("leaf" if name == "x" else "output" if name == "y" else "variable", f"{name}\n{v:.4f}")
         for name, v in zip(names, values)}
nodes |= {"g" + name: ("highlight", f"g_{name}\n{g:.4f}") for name, g in zip(names, grads)}
positions = {name: (3.0 * i, 1.2) for i, name in enumerate(names)} | {
    "g" + name: (3.0 * i, 0.0) for i, name in enumerate(names)}
edges = [("x", "a"), ("a", "b"), ("b", "y"), ("gy", "gb"), ("gb", "ga"), ("ga", "gx")]
edge_labels = {("x", "a"): "A: square", ("a", "b"): "B: exp", ("b", "y"): "C: square",
               ("gy", "gb"): f"× 2b = {2 * b.data:.4f}",
               ("gb", "ga"): f"× e^a = {np.exp(a.data):.4f}",
               ("ga", "gx"): f"× 2x = {2 * x.data:.1f}"}
fig, ax = plt.subplots(figsize=(9, 3))
draw_dag(nodes, edges, ax=ax, positions=positions, edge_labels=edge_labels,
         title="forward (top): values left to right; backward (bottom): gradients right to left")
plt.show()

# %% [markdown]
# Three independent ways give the same number: the closed form
# $\frac{d}{dx} e^{2x^2} = 4x\,e^{2x^2}$, the forward-mode order of the same
# product, and step 04's central difference (with `eps = 1e-5`, off by about
# $9 \times 10^{-10}$).

# %%
def f(x):
    return Square()(Exp()(Square()(x)))


da_dx = 2 * x.data * 1.0  # forward mode: start from dx/dx = 1
db_dx = np.exp(a.data) * da_dx
dy_dx = 2 * b.data * db_dx
print(f"reverse mode (backprop) {g_x:.8f}   forward mode {dy_dx:.8f}")
print(f"closed form 4x e^(2x^2) {4 * 0.5 * np.exp(2 * 0.5 ** 2):.8f}   "
      f"central difference {numerical_diff(f, Variable(np.array(0.5)), eps=1e-5):.8f}")

# %% [markdown]
# Backpropagation also gave $g_a$ and $g_b$: the sensitivity of the output to
# every intermediate. In a network those intermediates include the weights,
# and their gradients are what training needs.
#
# ## Check against PyTorch
#
# PyTorch's autograd runs the same reverse sweep. `retain_grad()` keeps the
# intermediates' gradients (PyTorch frees them by default), so all of $g_b$,
# $g_a$, $g_x$ are compared, at $x = 0.5$ and on an array. Only $e^a$ may
# differ in its last bit between the libraries, hence `rtol=1e-14`.

# %%
import torch  # noqa: E402

for array in (np.array(0.5), np.array([-1.0, 0.0, 0.5, 1.5])):
    ours = backward_by_hand(array, array ** 2, np.exp(array ** 2))
    t = torch.tensor(array, requires_grad=True)
    ta = torch.square(t)
    tb = torch.exp(ta)
    ta.retain_grad()
    tb.retain_grad()
    torch.square(tb).backward(torch.ones_like(tb))  # the seed dy/dy = 1, one per element
    for mine, theirs in zip(ours, (tb.grad, ta.grad, t.grad)):
        np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-14, atol=0)
    print(f"x = {np.array2string(array)}: g_b, g_a, g_x equal torch's b.grad, a.grad, x.grad")
print("PyTorch check passed: gradients computed by hand in reverse order equal torch autograd")

# %% [markdown]
# ## Recap
#
# - The chain rule: the derivative of a composite is the product of local
#   derivatives, each at the value that entered its function.
# - Reverse mode evaluates that product from the output: $g_y = 1$, then each
#   function turns its output's gradient into its input's.
# - One reverse sweep gives $\frac{dy}{dv}$ for every variable $v$; forward
#   mode would need a sweep per input.
# - The backward pass needs the forward pass's values, which must be kept.
#
# ## Exercises
#
# **1.** Run the reverse sweep by hand for another chain,
# $y = e^{(e^x)^2}$ (so $b = e^x$, $c = b^2$, $y = e^c$), at $x = 0.1$:
# compute $g_c$, $g_b$ and $g_x$ and compare them with torch.

# %% tags=["hide-cell"]
def backward_exp_square_exp(x):
    b = np.exp(x)
    c = b ** 2
    g_c = np.exp(c) * 1.0  # y = e^c
    g_b = 2 * b * g_c  # c = b^2
    g_x = np.exp(x) * g_b  # b = e^x
    return g_c, g_b, g_x


t = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
tb = torch.exp(t)
tc = torch.square(tb)
tb.retain_grad()
tc.retain_grad()
torch.exp(tc).backward()
ours = backward_exp_square_exp(np.array(0.1))
np.testing.assert_allclose(ours, [tc.grad.item(), tb.grad.item(), t.grad.item()], rtol=1e-14)
print("g_c, g_b, g_x =", np.array2string(np.array(ours), precision=6), "equal torch's")

# %% [markdown]
# **2.** Forward mode carries $\frac{dv}{dx}$ along with each value $v$.
# Write `forward_mode(x)` for the page's chain, returning
# $(\frac{da}{dx}, \frac{db}{dx}, \frac{dy}{dx})$ on an array, and compare
# each with PyTorch's forward-mode derivative, `torch.func.jvp` with tangent
# one.

# %% tags=["hide-cell"]
import warnings  # noqa: E402


def forward_mode(x):
    a = x ** 2
    b = np.exp(a)
    da_dx = 2 * x * 1.0  # start from dx/dx = 1
    db_dx = np.exp(a) * da_dx
    dy_dx = 2 * b * db_dx
    return da_dx, db_dx, dy_dx


def torch_chain(t):
    ta = torch.square(t)
    tb = torch.exp(ta)
    return ta, tb, torch.square(tb)


with warnings.catch_warnings():  # torch 2.13's forward AD loads its rules with torch.jit.script, which warns
    warnings.simplefilter("ignore", DeprecationWarning)  # that it is deprecated: torch's affair, not the page's
    torch.func.jvp(torch.sin, (torch.zeros(1),), (torch.ones(1),))  # (loaded once, here)
array = np.array([-1.0, 0.0, 0.5, 1.5])
_, tangents = torch.func.jvp(torch_chain, (torch.tensor(array),), (torch.ones(4, dtype=torch.float64),))
for mine, theirs in zip(forward_mode(array), tangents):
    np.testing.assert_allclose(mine, theirs.numpy(), rtol=1e-14)
print("dy/dx, forward mode:", np.array2string(forward_mode(array)[2], precision=4), "== torch.func.jvp")
