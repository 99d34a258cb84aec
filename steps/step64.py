# %% [markdown]
# # Step 64: Forward mode
#
# Every gradient so far came from reverse mode: one forward pass records
# the graph, one backward pass carries $\partial L/\partial(\cdot)$ from the
# output back to every input. [Step 05](step05.ipynb) showed the other
# order of the chain rule, from the input forward, with numbers worked by
# hand. This step makes that order a mechanism: **forward-mode automatic
# differentiation**, PyTorch's `torch.autograd.forward_ad`. Each value
# carries a *tangent*, its derivative along one direction of the inputs,
# and every operation computes its output's tangent as it computes its
# output. One forward pass, no graph, no backward: out comes $J\,v$, the
# Jacobian times a direction.

# %%
import importlib.util
import math
import pathlib
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import Variable, autograd, core, forward_ad_state
from tinypytorch import functions as F
from tinypytorch.autograd import forward_ad as fwAD
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## Dual numbers by hand
#
# Take numbers of the form $a + b\,\varepsilon$ with one rule,
# $\varepsilon^2 = 0$. Then
# $(a + b\varepsilon)(c + d\varepsilon) = ac + (ad + bc)\,\varepsilon$:
# the $\varepsilon$ part follows the product rule. And by Taylor,
# $f(a + b\varepsilon) = f(a) + f'(a)\,b\,\varepsilon$, every higher power
# of $\varepsilon$ being zero. So a function evaluated on $x + 1\varepsilon$
# returns its value *and* its derivative. A class of a few lines does it:

# %%
class Dual:
    """a + b ε with ε² = 0: `value` a, `tangent` b."""

    def __init__(self, value, tangent=0.0):
        self.value, self.tangent = value, tangent

    def __add__(self, other):
        other = other if isinstance(other, Dual) else Dual(other)
        return Dual(self.value + other.value, self.tangent + other.tangent)

    def __mul__(self, other):
        other = other if isinstance(other, Dual) else Dual(other)
        return Dual(self.value * other.value, self.tangent * other.value + self.value * other.tangent)

    __radd__, __rmul__ = __add__, __mul__


def sin(x):
    return Dual(math.sin(x.value), math.cos(x.value) * x.tangent)


def exp(x):
    return Dual(math.exp(x.value), math.exp(x.value) * x.tangent)


y = Dual(2.0, 1.0) * sin(Dual(2.0, 1.0))  # f(x) = x sin x at x = 2, seeded with dx/dx = 1
print(f"f(2)  = {y.value:.12f}   x sin x            = {2 * math.sin(2):.12f}")
print(f"f'(2) = {y.tangent:.12f}   sin x + x cos x    = {math.sin(2) + 2 * math.cos(2):.12f}")
b = exp(Dual(0.5, 1.0) * Dual(0.5, 1.0))  # step 05's y = (e^(x²))² at x = 0.5
print(f"step 05's chain: {(b * b).tangent:.9f}   (step 05: 3.297442541, 2 e^0.5 = {2 * math.exp(0.5):.9f})")

# %% [markdown]
# Both derivatives agree with the formulas to the last printed digit, and
# the second with step 05's forward-mode and reverse-mode numbers. No
# difference quotient, no graph: the tangent rides along with the value.
#
# ## Why forward mode: a column, not a row
#
# For $y = f(x)$ with $x \in \mathbb{R}^n$, $y \in \mathbb{R}^m$ and
# Jacobian $J$ ($m \times n$), the two modes traverse the same graph in
# opposite directions. Forward mode pushes a tangent $v$ from the inputs
# and gets $J\,v$: **a column** of $J$ when $v$ is a unit vector. Reverse
# mode pulls a gradient $u$ from the outputs and gets $u^\top J$: **a
# row**. A loss ($m = 1$) has one row: reverse mode wins, which is why
# training uses it. A map with few inputs and many outputs, or a single
# directional derivative, is forward mode's case; so is a Jacobian–vector
# product without storing the graph.

# %% tags=["hide-input"]
def draw_modes():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
    nodes = {"x": (0, 1), "w": (0, 0), "a = x·w": (1, 0.5), "y = sin a": (2, 0.5)}
    edges = [("x", "a = x·w"), ("w", "a = x·w"), ("a = x·w", "y = sin a")]
    for ax, title, forward, colour in ((axes[0], "forward mode: tangents, $J\\,v$", True, "tab:blue"),
                                       (axes[1], "reverse mode: gradients, $u^T J$", False, "tab:red")):
        box = {name: ax.text(x, y, name, ha="center", va="center", bbox=dict(boxstyle="round", fc="white", ec="grey"))
               for name, (x, y) in nodes.items()}
        for a, b in edges:  # from box edge to box edge, however wide the names
            start, end = (a, b) if forward else (b, a)
            ax.annotate("", nodes[end], nodes[start], arrowprops=dict(
                arrowstyle="-|>", color=colour, lw=2, shrinkA=3, shrinkB=3,
                patchA=box[start].get_bbox_patch(), patchB=box[end].get_bbox_patch()))
        labels = (["ẋ, ẇ given", "ȧ = ẋw + xẇ", "ẏ = cos a · ȧ"] if forward
                  else ["x̄ = ā·w, w̄ = ā·x", "ā = ȳ·cos a", "ȳ = 1 given"])
        for (x, y), label in zip([(0, -0.45), (1, 0.05), (2, 0.05)], labels):
            ax.text(x, y, label, ha="center", color=colour, fontsize=9)
        ax.set_title(title)
        ax.set_xlim(-0.6, 2.6), ax.set_ylim(-0.7, 1.3), ax.axis("off")
    plt.tight_layout()
    plt.show()


draw_modes()

# %% [markdown]
# Forward mode needs the tangent rule of each operation, its **JVP**
# (Jacobian–vector product), as reverse mode needs its VJP (the
# `backward` of every Function). And it needs no memory for the graph: a
# tangent is used by the next operation and can be dropped, as the value
# is.
#
# ## `forward_ad`: dual tensors
#
# PyTorch's API has three parts: a level (`dual_level()`, a with block)
# within which tensors may carry tangents; `make_dual(primal, tangent)`
# making such a tensor; `unpack_dual(y)` giving back `(primal, tangent)`.
# A tensor without a tangent counts as a zero tangent.

# %%
x = Variable(np.array([0.5, 1.0, 2.0]), requires_grad=False)
w = Variable(np.array([1.5, -1.0, 0.5]), requires_grad=False)
with fwAD.dual_level():
    dual_x = fwAD.make_dual(x, np.array([1.0, 0.0, 0.0]))  # direction: the first element of x
    y = tp.sin(dual_x * w)
    value, tangent = fwAD.unpack_dual(y)
    print("y      ", np.round(value.data, 6))
    print("dy/dx0 ", np.round(tangent.data, 6) + 0.0)
    print("cos(x0 w0) w0 =", round(np.cos(0.75) * 1.5, 6),
          "(the first place; the others do not depend on x0)")
print("after the level:", fwAD.unpack_dual(y).tangent)

# %% [markdown]
# Inside, the mechanism sits where every operation passes:
# `Function.__call__`. While no level is open it costs nothing more than
# the door's one read of the open modes (step 68); under a level, forward
# AD is an entry of the mode stack: the operation runs, then
# `push_tangents` gathers its inputs' tangents and runs its `jvp`:

# %%
show_code(core.push_tangents_mode, core.Function.push_tangents, forward_ad_state.tangent_of, step=64)

# %% [markdown]
# The tangents live in the state module keyed by the tensor, not on it, so
# `detach()` (a new tensor) has none, and closing the level drops them all.
# A tangent remembers the tensor's version (step 36): a tensor changed in
# place after its tangent was set refuses to give a stale one.
#
# ## Tangent rules
#
# A rule sits next to its operation's `forward` and `backward`. Compare
# with the backward: `Mul`'s JVP is the product rule
# $d(x_0x_1) = dx_0\,x_1 + x_0\,dx_1$; `Sin`'s multiplies by $\cos x$;
# `MatMul`'s is $dX\,W + X\,dW$. An operation linear in its inputs
# (reshape, sum, indexing, concatenation, ...) is its own JVP:
# `jvp_by_forward` runs it on the tangents.

# %%
show_code(core.Mul.jvp, F.Sin.jvp, F.MatMul.jvp, core.Function.jvp_by_forward)

# %% [markdown]
# An operation without a rule does not give a zero or stale tangent: its
# default `jvp` raises PyTorch's `NotImplementedError`. Of the package's
# operations, the in-place ones (`zero_`, `x[0] = w`, a view changed in
# place) have none yet.
#
# ## A custom Function's `jvp`
#
# A custom `autograd.Function` (step 49) gains a third static method,
# `jvp(ctx, *grad_inputs)`: one tangent per argument of `forward`, one per
# output back. Its `forward` runs with forward AD paused, as PyTorch runs
# it; without a `jvp`, PyTorch's error.

# %%
class Cube(autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        return 3 * ctx.x ** 2 * grad

    @staticmethod
    def jvp(ctx, tangent):
        return 3 * ctx.x ** 2 * tangent


with fwAD.dual_level():
    print("Cube's JVP:", fwAD.unpack_dual(Cube.apply(fwAD.make_dual(x, np.ones(3)))).tangent.data, "= 3x²")
    try:
        Cube.jvp = autograd.Function.jvp  # the rule taken away
        Cube.apply(fwAD.make_dual(w, np.ones(3)))
    except NotImplementedError as error:
        print(textwrap.fill(f"NotImplementedError: {error}", 100))

# %% [markdown]
# `gradcheck(..., check_forward_ad=True)` compares forward mode's Jacobian,
# built column by column with one-hot tangents, against the numerical one,
# as PyTorch's keyword does.

# %%
x64 = Variable(np.random.default_rng(61).uniform(0.5, 2.0, (2, 3)))
print("gradcheck, forward mode:",
      autograd.gradcheck(lambda a: F.log(a) * tp.sin(a), (x64,), check_forward_ad=True))

# %% [markdown]
# ## Check against PyTorch
#
# Every operation of the package's operation table (`tests/operations.py`,
# each row with its torch twin): random tangents on every operand, the JVP
# from `tinypytorch.autograd.forward_ad` against
# `torch.autograd.forward_ad`'s, float64, `rtol=1e-10`. The rows without
# a rule must raise.

# %% tags=["hide-input"]
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.autograd.forward_ad as tfwAD  # noqa: E402

with warnings.catch_warnings():  # torch 2.13's forward AD loads its rules with torch.jit.script, which warns
    warnings.simplefilter("ignore", DeprecationWarning)  # that it is deprecated: torch's affair, not the page's
    torch.func.jvp(torch.sin, (torch.zeros(1),), (torch.ones(1),))  # (loaded once, here)

_spec = importlib.util.spec_from_file_location(
    "operations", pathlib.Path(tp.__file__).resolve().parents[1] / "tests" / "operations.py")
operations = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(operations)


def jvp_pair(op, seed):
    values = operations.operands(op, seed)
    tangents = [np.random.default_rng(seed + 10).standard_normal(s) for s in op.shapes]
    with fwAD.dual_level():
        ours = fwAD.unpack_dual(op.ours(*[fwAD.make_dual(Variable(v.copy()), t) for v, t in zip(values, tangents)]))
        ours = ours.tangent.data
    with tfwAD.dual_level():
        theirs = op.theirs(*[tfwAD.make_dual(torch.tensor(v), torch.tensor(t)) for v, t in zip(values, tangents)])
        theirs = tfwAD.unpack_dual(theirs).tangent.numpy()
    return ours, theirs


# %%
equal, raised = 0, []
for op in operations.OPERATIONS:
    try:
        ours, theirs = jvp_pair(op, seed=0)
    except NotImplementedError:
        raised.append(op.name)
        continue
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    equal += 1
assert equal + len(raised) == len(operations.OPERATIONS) and len(raised) == 3
print(f"{equal} of {len(operations.OPERATIONS)} operations: JVPs equal torch's")
print("raise NotImplementedError (no rule yet):", ", ".join(raised))
print("PyTorch check passed: JVPs of", equal, "operations equal torch.autograd.forward_ad's")

# %% [markdown]
# ## Recap
#
# - A dual number $a + b\varepsilon$ with $\varepsilon^2 = 0$ carries a
#   derivative along with a value; forward mode does that for tensors.
# - One forward pass gives $J\,v$, a column of the Jacobian; one backward
#   pass gives $u^\top J$, a row. Few inputs or one direction: forward;
#   a scalar loss: reverse.
# - `with forward_ad.dual_level():`, `make_dual(x, v)`,
#   `unpack_dual(y) -> (primal, tangent)`; a missing tangent is zero; the
#   tangents go when the level closes, and with `detach()`; one level at a
#   time; none under `inference_mode`.
# - Each operation has a `jvp` next to its `backward`; a custom Function
#   gets a static `jvp(ctx, *grad_inputs)`; no rule raises.
#
# ## Exercises
#
# **1. A directional derivative two ways.** For
# $L(x) = \sum \tanh(x)\,x$ at a random $x$ and a direction $v$, get
# $\nabla L \cdot v$ from one forward-mode pass, and from the gradient
# (one backward pass) dotted with $v$.

# %% tags=["hide-cell"]
rng = np.random.default_rng(0)
x0, v = rng.standard_normal(5), rng.standard_normal(5)
with fwAD.dual_level():
    xd = fwAD.make_dual(Variable(x0), v)
    directional = fwAD.unpack_dual((tp.tanh(xd) * xd).sum()).tangent.data.item()
xg = Variable(x0.copy())
(tp.tanh(xg) * xg).sum().backward()
print("forward mode", round(directional, 9), "| gradient · v", round(float(xg.grad.data @ v), 9))

# %% [markdown]
# **2. A Jacobian column by column.** For
# $f(x) = (x_0 x_1,\ \sin x_0,\ x_1^2)$ at $x = (1, 2)$, build the
# $3 \times 2$ Jacobian with two forward passes, one per unit tangent.

# %% tags=["hide-cell"]
def f(x):
    return tp.concatenate([x[0:1] * x[1:2], tp.sin(x[0:1]), x[1:2] ** 2])


def jacobian_by_columns(f, x):
    columns = []
    for k in range(x.numel()):
        with fwAD.dual_level():
            columns.append(fwAD.unpack_dual(f(fwAD.make_dual(x, np.eye(x.numel())[k]))).tangent.data)
    return np.stack(columns, axis=1)


print(np.round(jacobian_by_columns(f, Variable(np.array([1.0, 2.0]))), 6))

# %% [markdown]
# **3. A `jvp` for a custom Function.** Write `SoftPlus`,
# $\log(1 + e^x)$, as an `autograd.Function` with `forward`, `backward`
# and `jvp` (its derivative is $\sigma(x)$), and check both with
# `gradcheck(..., check_forward_ad=True)`.

# %% tags=["hide-cell"]
class SoftPlus(autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.slope = Variable(1 / (1 + np.exp(-x.data)))
        return Variable(np.log1p(np.exp(x.data)))

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.slope

    @staticmethod
    def jvp(ctx, tangent):
        return tangent * ctx.slope


print("SoftPlus gradcheck (backward and forward mode):",
      autograd.gradcheck(SoftPlus.apply, (Variable(np.linspace(-2, 2, 5)),), check_forward_ad=True))
