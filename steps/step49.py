# %% [markdown]
# # Step 49: Custom Functions, PyTorch's way
#
# Stage 5 is about what a PyTorch user meets every day, taken down to its
# internals. The first thing many users write is their own operation: a
# function PyTorch does not have, or one whose gradient should be something
# other than the true derivative.
#
# Since step 11 a tinypytorch operation has been a subclass of `Function`
# whose *instance* is a node of the graph: `forward` works on arrays,
# `backward` on Variables, and whatever backward needs is kept on `self`.
# PyTorch splits the two roles. The user's class only holds two static
# methods; `apply` makes the node and hands both methods a **context**,
# `ctx`, to carry what backward needs. This step adds that form,
# `tinypytorch.autograd.Function`, on top of the package's own.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, autograd
from tinypytorch.autograd import Function, once_differentiable
from tinypytorch.autograd.function import CustomNode
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array (or a Variable's) with fixed decimals, printed the same way on every machine."""
    a = a.data if isinstance(a, Variable) else a
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ", suppress_small=True)


# %% [markdown]
# ## The same operation, written both ways
#
# Here is $e^x$ as PyTorch's documentation writes it, with `ctx` in place
# of `self`, and the call through `apply`:

# %%
class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        y = tinypytorch.exp(x)
        ctx.save_for_backward(y)  # d e^x / dx = e^x: keep the output
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


x = Variable(np.array([0.0, 1.0, 2.0]), name="x")
y = Exp.apply(x)
y.sum().backward()
print("y =", show(y), " y.creator:", type(y.creator).__name__)
print("x.grad =", show(x.grad), " (e^x)")

# %% [markdown]
# The node is named as PyTorch names it, `ExpBackward`. Each piece has a
# counterpart in the package's own `Exp` (step 03, its backward step 06,
# its saving step 35):
#
# | PyTorch's way (`autograd.Function`) | the package's way (`tinypytorch.Function`) |
# |---|---|
# | `Exp.apply(x)`: a new node for every call | `Exp()(x)`: an instance per call, which *is* the node |
# | `forward(ctx, x)` gets the Variables | `forward(self, x)` gets their arrays (step 11) |
# | `ctx.save_for_backward(y)` | `self.save_for_backward(y)` (step 35) |
# | `ctx.saved_tensors` | `self.saved_tensors` (step 35) |
# | `ctx.needs_input_grad` | `self.needs_input_grad` (step 35) |
# | any attribute, `ctx.bits = bits` | any attribute, `self.axis = axis` (`Sum`, step 30) |
# | `backward` returns one value per argument of forward, `None` for a number or a flag | one per input Variable; numbers became constants (step 21) |
# | `ctx.mark_non_differentiable(out)` | — (every output of a node requires grad) |
# | an unused output's gradient: zeros (`set_materialize_grads`) | `None` reaches the engine, which skips it |
# | `@once_differentiable` | — (a backward on arrays is silently wrong to second order: step 40) |
#
# ## What `apply` does
#
# `apply` builds the node, a subclass of the package's `Function` named
# after the user's class, and calls it on the Variable arguments only; the
# other arguments (a number of bits, a flag) travel with the node. So
# everything the package built still applies: saved tensors and their
# version checks (steps 35-37), saved-tensor hooks (38), anomaly mode (39),
# higher-order gradients (27).

# %%
show_code(Function.apply, CustomNode.forward, step=49)

# %% [markdown]
# The user's forward runs under `no_grad`, on the original arguments: it
# may use any operation, and records nothing; the node is the only thing
# the graph gets. The engine calls the node's backward with one gradient
# per output; the node hands them to the user's backward and checks what
# comes back (`checked`: a gradient for a non-Variable argument is refused,
# one of another shape is summed down if it broadcasts, else refused):

# %%
show_code(CustomNode.backward, step=49)

# %% tags=["hide-input"]
def apply_picture():
    """Quantize.apply(x, 2): the user's class, the node apply makes, and what travels between them."""
    fig, axis = plt.subplots(figsize=(9, 3.6))
    axis.set(xlim=(0, 10), ylim=(0, 4.2))
    axis.axis("off")
    boxes = {"class": (1.6, 3.0, "class Quantize(Function):\n  forward(ctx, x, bits)\n  backward(ctx, grad)",
                       "#e8f0fb"),
             "node": (5.0, 3.0, "QuantizeBackward\n(a tinypytorch.Function)\nargs = (x, 2)", "#fdf0d5"),
             "ctx": (5.0, 0.9, "ctx\nsaved tensors, needs_input_grad,\nctx.bits, materialize_grads", "#eef7ee"),
             "y": (8.5, 3.0, "y\ncreator: QuantizeBackward", "#e8f0fb")}
    for x, y, text, color in boxes.values():
        axis.text(x, y, text, ha="center", va="center", fontsize=8.5, family="monospace",
                  bbox=dict(boxstyle="round,pad=0.5", facecolor=color, edgecolor="black", linewidth=0.8))
    arrow = dict(arrowstyle="->", color="black", lw=1.0)
    axis.annotate("", xy=(3.55, 3.0), xytext=(3.15, 3.0), arrowprops=arrow)
    axis.text(3.35, 3.55, "apply(x, 2)\nmakes", ha="center", fontsize=8)
    axis.annotate("", xy=(7.1, 3.0), xytext=(6.5, 3.0), arrowprops=arrow)
    axis.text(6.8, 3.5, "forward\n(no_grad)", ha="center", fontsize=8)
    axis.annotate("", xy=(4.4, 1.55), xytext=(4.4, 2.35), arrowprops=dict(arrow, color="C2"))
    axis.text(4.3, 1.95, "forward fills", ha="right", fontsize=8, color="C2")
    axis.annotate("", xy=(5.6, 2.35), xytext=(5.6, 1.55), arrowprops=dict(arrow, color="C3"))
    axis.text(5.7, 1.95, "backward reads", ha="left", fontsize=8, color="C3")
    axis.text(8.5, 1.2, "backward(ctx, grad) returns\n(grad, None): one value per\nargument; the node checks\n"
              "the count and the shapes,\nand drops None for bits", ha="center", va="center", fontsize=8,
              color="C3")
    axis.set_title("Quantize.apply(x, 2): the class holds the code, the node and ctx hold the call", fontsize=10)
    fig.tight_layout()
    plt.show()


apply_picture()

# %% [markdown]
# ## A gradient that is not the derivative: the straight-through estimator
#
# Quantizing rounds each value to one of $2^{\text{bits}}$ levels between
# the smallest and the largest. Its derivative is $0$ almost everywhere:
# a network that quantizes its activations could not learn through them.
# The **straight-through estimator** (Bengio et al., 2013) pretends the
# rounding was the identity in backward and passes the gradient through
# unchanged. `bits` is not a Variable, so backward returns `None` for it:

# %%
class Quantize(Function):
    @staticmethod
    def forward(ctx, x, bits):
        low, high = x.data.min(), x.data.max()
        scale = (2**bits - 1) / (high - low)
        ctx.bits = bits  # anything backward needs can ride on ctx
        return Variable(np.round((x.data - low) * scale) / scale + low)

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # straight through for x; nothing for bits


x = Variable(np.linspace(-1.0, 1.0, 7), name="x")
y = Quantize.apply(x, 2)
(y * y).sum().backward()
print("x          =", show(x))
print("quantized  =", show(y), f" ({2**2} levels)")
print("x.grad     =", show(x.grad))
print("(2y: the gradient of sum(y^2), passed straight through)")

# %% [markdown]
# Backward must return exactly one value per argument of forward, as in
# PyTorch, whose messages the node repeats:

# %%
class Forgetful(Quantize):
    @staticmethod
    def backward(ctx, grad):
        return grad  # forgot the None for bits


class Summed(Exp):
    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return (grad * y).sum()  # one number where x has three elements


for y in (Forgetful.apply(x, 2), Summed.apply(Variable(np.ones(3)))):
    try:
        y.sum().backward()
    except RuntimeError as error:
        print(textwrap.fill(f"RuntimeError: {error}", 108))

# %% [markdown]
# A gradient may also come back with fewer dimensions that broadcast to
# the input's shape; the node then sums it back down, as PyTorch does.
#
# ## Several outputs, and the ones nobody used
#
# A Function may return a tuple. Backward then receives one gradient per
# output, also for an output the loss never used: PyTorch passes **zeros**
# there, so that backward can do arithmetic without checking for `None`.
# `ctx.set_materialize_grads(False)` passes `None` instead, which lets
# backward skip the work:

# %%
class SinCos(Function):
    @staticmethod
    def forward(ctx, x, materialize=True):
        ctx.set_materialize_grads(materialize)
        ctx.save_for_backward(x)
        return tinypytorch.sin(x), tinypytorch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        print("  backward received: grad_sin", grad_sin if grad_sin is None else show(grad_sin),
              "| grad_cos", grad_cos if grad_cos is None else show(grad_cos))
        grad = 0.0
        if grad_sin is not None:
            grad = grad + grad_sin * tinypytorch.cos(x)
        if grad_cos is not None:
            grad = grad - grad_cos * tinypytorch.sin(x)
        return grad, None


for materialize in (True, False):
    x = Variable(np.array([0.0, 1.0]), name="x")
    s, c = SinCos.apply(x, materialize)
    print(f"materialize={materialize}, loss = sum(sin x):")
    s.sum().backward()
    print("  x.grad =", show(x.grad), " (cos x)")

# %% [markdown]
# ## Outputs that are not differentiable, and needs_input_grad
#
# An output may be an index, a count or a mask: nothing to differentiate.
# `ctx.mark_non_differentiable(out)` makes it a Variable that does not
# require grad; backward still gets a gradient slot for it (zeros). And
# `ctx.needs_input_grad` says which arguments will receive a gradient, so
# backward can skip the others, as the package's `Mul` does since step 35:

# %%
class RowMax(Function):
    """The largest value of each row, and its column."""

    @staticmethod
    def forward(ctx, x):
        columns = x.data.argmax(axis=1)
        ctx.columns, ctx.shape = columns, x.shape
        index = Variable(columns)
        ctx.mark_non_differentiable(index)
        return Variable(x.data[np.arange(len(columns)), columns]), index

    @staticmethod
    def backward(ctx, grad_values, grad_index):
        if not ctx.needs_input_grad[0]:
            return None
        grad = np.zeros(ctx.shape)
        grad[np.arange(len(ctx.columns)), ctx.columns] = grad_values.data
        return Variable(grad)


x = Variable(np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]]), name="x")
values, index = RowMax.apply(x)
(values * np.array([1.0, 10.0])).sum().backward()
print("values =", show(values), " index =", index.data, " index.requires_grad:", index.requires_grad)
print("x.grad =\n" + show(x.grad, 1))

# %% [markdown]
# `RowMax.backward` computes on arrays. Its gradient is right, but it is a
# constant: a second derivative through it would silently be zero (step
# 40's `SinOnArrays`). PyTorch's remedy is the decorator
# `@once_differentiable`: backward runs under `no_grad`, and when a graph of
# the backward pass is being recorded (`create_graph=True`), its results go
# through a node that raises if a second backward ever reaches it:

# %%
show_code(once_differentiable, step=49)


# %%
class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return Variable(3 * x.data**2 * grad.data)  # on arrays: right once, not differentiable


x = Variable(np.array([1.0, 2.0]), name="x")
(g,) = autograd.grad((Cube.apply(x) ** 2).sum(), [x], create_graph=True)
print("first derivative of sum(x^6):", show(g), " (6 x^5)")
try:
    g.sum().backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# The Functions of this page are written again as `torch.autograd.Function`s
# in the collapsed cell (`.detach()` where this page reads `.data`): the
# quantizer's gradients, the gradients each backward *received* (zeros, or
# `None`), `RowMax` with its index, and the error of a second derivative
# through `once_differentiable`.

# %% tags=["hide-cell"]
import torch  # noqa: E402


class TorchQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bits):
        low, high = x.min(), x.max()
        scale = (2**bits - 1) / (high - low)
        return torch.round((x - low) * scale) / scale + low

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class TorchSinCos(torch.autograd.Function):
    received = []

    @staticmethod
    def forward(ctx, x, materialize=True):
        ctx.set_materialize_grads(materialize)
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        TorchSinCos.received.append([None if g is None else g.numpy().copy() for g in (grad_sin, grad_cos)])
        grad = grad_sin * torch.cos(x) if grad_sin is not None else 0.0
        return grad - grad_cos * torch.sin(x) if grad_cos is not None else grad, None


class TorchRowMax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=1)
        ctx.mark_non_differentiable(index)
        ctx.save_for_backward(index)
        ctx.shape = x.shape
        return values, index

    @staticmethod
    def backward(ctx, grad_values, grad_index):
        (index,) = ctx.saved_tensors
        return torch.zeros(ctx.shape, dtype=grad_values.dtype).index_put_((torch.arange(len(index)), index),
                                                                           grad_values)


class TorchCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


def received_by_sincos(materialize):
    """What SinCos.backward receives when only sin is used, in both frameworks."""
    received = []

    class Recording(SinCos):
        @staticmethod
        def backward(ctx, grad_sin, grad_cos):
            received.append([None if g is None else g.data.copy() for g in (grad_sin, grad_cos)])
            return grad_sin * tinypytorch.cos(ctx.saved_tensors[0]), None

    x0 = np.array([0.0, 1.0])
    Recording.apply(Variable(x0), materialize)[0].sum().backward()
    TorchSinCos.received.clear()
    TorchSinCos.apply(torch.tensor(x0, requires_grad=True), materialize)[0].sum().backward()
    return received[0], TorchSinCos.received[0]


def second_derivative_error(apply, grad, leaf):
    """The message of a second backward through a once_differentiable backward."""
    x = leaf(np.array([1.0, 2.0]))
    (g,) = grad((apply(x) ** 2).sum(), [x], create_graph=True)
    try:
        g.sum().backward()
    except RuntimeError as error:
        return str(error)


# %%
x0 = np.linspace(-1.0, 1.0, 7)
x, xt = Variable(x0.copy()), torch.tensor(x0, requires_grad=True)
(Quantize.apply(x, 2) ** 2).sum().backward()
(TorchQuantize.apply(xt, 2) ** 2).sum().backward()
np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15, atol=0)
for materialize in (True, False):
    ours, theirs = received_by_sincos(materialize)
    assert [g is None for g in ours] == [g is None for g in theirs]
    for g, gt in zip(ours, theirs):
        if g is not None:
            np.testing.assert_array_equal(g, gt)
m0 = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
x, xt = Variable(m0.copy()), torch.tensor(m0, requires_grad=True)
(v, i), (vt, it) = RowMax.apply(x), TorchRowMax.apply(xt)
(v * np.array([1.0, 10.0])).sum().backward()
(vt * torch.tensor([1.0, 10.0], dtype=torch.float64)).sum().backward()
np.testing.assert_array_equal(i.data, it.numpy())
assert i.requires_grad is False and it.requires_grad is False
np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
assert second_derivative_error(Cube.apply, autograd.grad, Variable) == second_derivative_error(
    TorchCube.apply, torch.autograd.grad, lambda a: torch.tensor(a, requires_grad=True))
print("PyTorch check passed: Function grads, zero grads, non-differentiable outputs, "
      "once_differentiable as torch's")

# %% [markdown]
# ## Recap
#
# - PyTorch's custom Function is a class of two static methods; `apply`
#   makes the node (`QuantizeBackward`) and a `ctx` that carries what
#   backward needs from forward.
# - Forward runs under `no_grad` on the original arguments; the node
#   records the Variable arguments, and the others (numbers, flags) ride
#   along. Backward returns one value per argument, `None` where there is
#   no gradient; the count and the shapes are checked with PyTorch's words.
# - A gradient need not be the derivative: the straight-through estimator
#   passes it through a rounding unchanged.
# - An unused output's gradient arrives as zeros, or `None` after
#   `set_materialize_grads(False)`; `mark_non_differentiable` makes an
#   output that needs none; `needs_input_grad` skips work.
# - `@once_differentiable` turns a silent zero second derivative into an
#   error.
#
# ## Exercises
#
# **1. A clipped straight-through estimator.** Write `Sign`, whose forward
# is $\operatorname{sign}(x)$ and whose backward passes the gradient only
# where $|x| \le 1$ (the estimator of binarized networks, Hubara et al.,
# 2016). Check its gradient of $\sum_i w_i \operatorname{sign}(x_i)$
# against a torch version.

# %% tags=["hide-cell"]
class Sign(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return Variable(np.sign(x.data))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (np.abs(x.data) <= 1.0)


x = Variable(np.array([-2.0, -0.5, 0.25, 1.0, 3.0]), name="x")
w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
(Sign.apply(x) * w).sum().backward()
print("sign(x) =", show(Sign.apply(x), 0), " x.grad =", show(x.grad, 1), " (w where |x| <= 1)")

# %% [markdown]
# **2. Softmax as a custom Function.** Write `CustomSoftmax` for a vector:
# forward $s = e^{x - \max x} / \sum_j e^{x_j - \max x}$, saving $s$;
# backward $s \odot (g - \langle s, g \rangle)$, from the Jacobian
# $\partial s_i / \partial x_j = s_i(\delta_{ij} - s_j)$. Check it with
# `gradcheck` (step 40) and against `torch.softmax`. Step 50 adds softmax
# to the package.

# %% tags=["hide-cell"]
class CustomSoftmax(Function):
    @staticmethod
    def forward(ctx, x):
        e = tinypytorch.exp(x - x.data.max())
        s = e / e.sum()
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return s * (grad - (s * grad).sum())


x = Variable(np.array([1.0, -0.5, 2.0, 0.0]), name="x")
print("gradcheck:", autograd.gradcheck(CustomSoftmax.apply, x),
      "| gradgradcheck:", autograd.gradgradcheck(CustomSoftmax.apply, x))

# %% [markdown]
# **3. Saving what backward needs, not more.** Write `Hypot(x, y)`,
# $\sqrt{x^2 + y^2}$ element-wise, whose backward uses
# `ctx.needs_input_grad` to compute only the gradients asked for
# ($x / r$ and $y / r$, with $r$ the saved output). Count, with a flag on
# `ctx`, how many of the two it computed when only $x$ requires grad.

# %% tags=["hide-cell"]
class Hypot(Function):
    @staticmethod
    def forward(ctx, x, y):
        r = (x * x + y * y) ** 0.5
        ctx.save_for_backward(x, y, r)
        return r

    @staticmethod
    def backward(ctx, grad):
        x, y, r = ctx.saved_tensors
        ctx.computed = [name for name, need in zip("xy", ctx.needs_input_grad) if need]
        gx = grad * x / r if ctx.needs_input_grad[0] else None
        gy = grad * y / r if ctx.needs_input_grad[1] else None
        return gx, gy


x = Variable(np.array([3.0, 5.0]), name="x")
y = Variable(np.array([4.0, 12.0]), name="y", requires_grad=False)
r = Hypot.apply(x, y)
r.sum().backward()
print("r =", show(r, 1), " x.grad =", show(x.grad), " (x / r); gradients computed:", r.creator.ctx.computed)
