# %% [markdown]
# # Step 47: Reversible columns (RevCol)
#
# Step 46 made a stack of blocks reversible: a block's input can be
# computed from its output, so the stack keeps no activations for backward
# and recomputes them on the way down. This step applies the idea to a
# network of another shape, the reversible column network RevCol (Cai et
# al., "Reversible Column Networks", ICLR 2023).
#
# A RevCol network is made of $N$ **columns**, each a small network of $L$
# **levels** (in the paper, four feature scales of an image). Column $k$
# takes the input $x$ and the $L$ states $c_0, \dots, c_{L-1}$ of column
# $k - 1$ and returns $L$ new states for column $k + 1$. A column is built
# so that its input states can be computed back from its output states.
# RevCol's `ReverseFunction` uses this: a column keeps only $x$ and its new
# states, and backward recomputes everything else.
#
# We read the package's version, check its gradients against a plain run
# and against PyTorch (a plain column, and a port of RevCol's own
# `ReverseFunction`), and then measure what reversibility costs and where it
# breaks: memory against the number of columns, rounding errors that grow
# when they are divided by a small $\alpha$, and random numbers that must be
# drawn again identically.

# %%
import gc
import inspect
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np
import torch

import tinypytorch
from tinypytorch import Parameter, Variable, autograd, random
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Layer, Linear
from tinypytorch.reversible import (RevColumn, RevColumnFunction, ReversibleColumns, ReversibleColumnsFunction,
                                    _column_backward, _column_forward, _level_backward, clamp_alpha)

torch.set_num_threads(1)  # arrays this small gain nothing from threads


def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ")


def bounded(value, bound):
    """'< 1eK' after checking that value is below bound = 1eK; '0' for a value that must be exactly 0.

    Rounding errors differ from one CPU to another (BLAS kernels, NumPy's vectorised tanh), by a small
    factor, so the step prints a power of ten the error stays below, never the error itself."""
    if bound == 0:
        assert value == 0, value
        return "0"
    assert value < bound, (value, bound)
    return f"< 1e{round(math.log10(bound))}"


# %% [markdown]
# ## The level equation
#
# Write $c_i$ for the state of level $i$ that a column receives and $c_i'$
# for the state it returns. A column computes its levels from the bottom
# up:
#
# $$
# c_i' = l_i\bigl(c_{i-1}',\ c_{i+1}\bigr) + \alpha_i\, c_i, \qquad i = 0, \dots, L - 1,
# $$
#
# with $c_{-1}' = x$ (level 0 reads the input) and no $c_L$ (the top level
# reads only the level below). $l_i$ is any function with parameters; in
# RevCol it *fuses* the new state of the level below with the old state of
# the level above and runs a few ConvNeXt blocks on the result. $\alpha_i$
# is a learnable scale, one number per channel, which RevCol starts at 0.5,
# and $\alpha_i c_i$ is a shortcut from the same level of the previous
# column. For four levels:
#
# $$
# c_0' = l_0(x, c_1) + \alpha_0 c_0, \quad
# c_1' = l_1(c_0', c_2) + \alpha_1 c_1, \quad
# c_2' = l_2(c_1', c_3) + \alpha_2 c_2, \quad
# c_3' = l_3(c_2') + \alpha_3 c_3.
# $$
#
# ### Why a column can be inverted
#
# Solve each equation for the old state:
#
# $$
# c_i = \frac{c_i' - l_i\bigl(c_{i-1}',\ c_{i+1}\bigr)}{\alpha_i}.
# $$
#
# The right-hand side needs $c_i'$ and $c_{i-1}'$, outputs of the column,
# and $c_{i+1}$, an *old* state. So the inverse runs from the top down: the
# top level needs no old state, so $c_3$ comes first, then $c_2$ from it,
# and so on down to $c_0$. $l_i$ need not be invertible: it never sees
# $c_i$, which reaches $c_i'$ only through the shortcut. This is step 46's
# additive coupling with a scale on the shortcut, and the inverse divides
# by that scale. So $\alpha_i$ must never be 0, and, as we shall measure,
# had better not be small.
#
# ### Columns
#
# A network stacks $N$ columns. Every column receives the same input $x$,
# and the states one column returns are those the next one receives. The
# first column has no previous column and starts from zeros (RevCol passes
# the integer 0; here they are arrays of zeros).
#
# ## The package: `RevColumn`
#
# `RevColumn(levels, alphas)` is one column. `levels[i]` is a callable of
# `(below, above)`, usually a `Layer`, returning an array shaped like
# $c_i$ (`above` is `None` for the top level); `alphas[i]` is a `Parameter`
# that broadcasts against $c_i$. Called with $x$ and the old states, it
# returns the new ones:

# %%
print(inspect.getsource(RevColumn.forward))
print(inspect.getsource(RevColumn.plain))

# %% [markdown]
# `forward` checks that it got one state per level and keeps every $\alpha$
# away from 0 (`clamp_alpha`, below). Then there are two paths:
#
# - with `reversible=False`, or with recording switched off, `plain`
#   computes the level equations with ordinary operations and the graph
#   records everything. This is RevCol's `_forward_nonreverse`, the
#   reference the reversible path must reproduce;
# - otherwise one `RevColumnFunction` node (RevCol's `ReverseFunction`)
#   computes the whole column. Its
#   inputs are $x$, the old states, the $\alpha$'s and every parameter of
#   the levels, so the parameters' gradients come back through the graph
#   like any other gradient.
#
# ### Forward
#
# `RevColumnFunction` is a thin shell around two functions on arrays, one
# column's forward and backward, which the next section will reuse:

# %%
print(inspect.getsource(RevColumnFunction))
print(inspect.getsource(_column_forward))

# %% [markdown]
# Under `no_grad` nothing inside the levels is recorded. Before each level
# the generator's state is noted (step 41), one snapshot per level, because
# a level may draw random numbers (RevCol's blocks use DropPath) and
# backward must draw the same ones again. Each level must return an array
# of its state's shape. Then `save_for_backward(x, *new)` keeps $x$ and the
# $L$ new states and nothing else, whatever the levels compute inside.
#
# ### Backward
#
# Backward receives $\bar g_i = \partial\mathcal{L}/\partial c_i'$, the
# gradients of the new states from whatever used them. Two facts organise
# it. First, $c_i'$ is used outside the column *and* by level $i + 1$ as
# `below`, so its whole gradient is
#
# $$
# T_i = \bar g_i + \Bigl(\frac{\partial l_{i+1}}{\partial\,\text{below}}\Bigr)^{\!\top} T_{i+1},
# $$
#
# which needs level $i + 1$ done first: backward runs from the top down,
# the order in which the inverse recovers the old states. Second,
# everything else follows from $T_i$:
#
# $$
# \frac{\partial\mathcal{L}}{\partial c_i} = \alpha_i T_i + \Bigl(\frac{\partial l_{i-1}}{\partial\,\text{above}}\Bigr)^{\!\top} T_{i-1},
# \qquad
# \frac{\partial\mathcal{L}}{\partial \alpha_i} = \sum_{\text{rows}} T_i \odot c_i,
# \qquad
# \frac{\partial\mathcal{L}}{\partial \theta_i} = \Bigl(\frac{\partial l_i}{\partial \theta_i}\Bigr)^{\!\top} T_i,
# \qquad
# \frac{\partial\mathcal{L}}{\partial x} = \Bigl(\frac{\partial l_0}{\partial\,\text{below}}\Bigr)^{\!\top} T_0.
# $$
#
# The old $c_i$ gets the shortcut's share and what level $i - 1$ sends back
# (it read $c_i$ as `above`); $\alpha_i$'s gradient needs the old $c_i$,
# which backward must compute back first.

# %%
print(inspect.getsource(_column_backward))

# %% [markdown]
# The work on one level is `_level_backward`'s:

# %%
print(inspect.getsource(_level_backward))

# %% [markdown]
# For each level, from the top:
#
# 1. **Recompute.** Fresh leaves hold `below` ($c_{i-1}'$, or $x$) and
#    `above` (the old $c_{i+1}$, computed back by the previous iteration).
#    The level runs again with recording on, inside `replaying`, which sets
#    the generator to this level's snapshot: step 42's recomputation, for
#    one level.
# 2. **Check** that the recomputed graph reads, of what requires grad, only
#    `below`, `above` and the level's parameters (`_refuse_unknown_inputs`,
#    step 46): a weight the column cannot list would get no gradient.
# 3. **Backpropagate** in a backward pass inside the running one
#    (`_inner_grad`), seeded with $T_i$: the gradient of `below` (added into
#    $T_{i-1}$, or $x$'s for level 0), of `above`, and of the level's
#    parameters, all at once.
# 4. **Invert.** `old[i] = (new[i] - out.data) / alphas[i]` is the `above`
#    of the next iteration, and gives $\alpha_i$'s gradient (`sum_to` folds
#    $T_i \odot c_i$ to $\alpha_i$'s shape).
#
# The loop runs inside `fork_rng`, so the generator outside continues as if
# backward drew nothing. The old states computed back are kept in
# `reconstructed`, for us to look at.
#
# RevCol's backward does the same arithmetic but only *adds* the
# parameters' and $\alpha$'s gradients to their `.grad` (the check at the
# end shows the consequence); here they are returned, so `autograd.grad`
# with respect to an $\alpha$ or a weight works.
#
# ## A model to test on
#
# Each level is RevCol's level with linear layers for convolutions. A
# fusion adds a linear map of the state below and one of the state above
# and squashes the sum with $\tanh$; one block follows, RevCol's ConvNeXt
# block reduced to its shape: four times wider, $\tanh$, back, added to its
# input. An optional DropPath on the block's branch is used later.

# %%
def drop_path(h, p, training):
    """timm's DropPath, as RevCol's blocks use it: each row's branch dropped with probability p, the rest scaled
    by 1 / (1 - p); the mask drawn from the framework's generator."""
    if not training or p == 0.0:
        return h
    keep = random.default_generator().random((h.shape[0], 1)) >= p
    return h * (keep / (1.0 - p)).astype(h.dtype)


class Level(Layer):
    """l_i(below, above) = f + block(f), f = tanh(down(below) + up(above)): RevCol's fusion and one block."""

    def __init__(self, n_below, n, n_above, rng, drop=0.0):
        super().__init__()
        self.down = Linear(n_below, n, rng=rng)  # from the new state below (RevCol: a strided convolution)
        self.up = Linear(n_above, n, bias=False, rng=rng) if n_above else None  # from the old state above
        self.expand = Linear(n, 4 * n, rng=rng)  # the block: 4x wider, tanh, and back
        self.project = Linear(4 * n, n, rng=rng)
        self.drop = drop

    def forward(self, below, above):
        fused = self.down(below) if above is None else self.down(below) + self.up(above)
        f = tinypytorch.tanh(fused)
        return f + drop_path(self.project(tinypytorch.tanh(self.expand(f))), self.drop, self.training)


# %% [markdown]
# Four levels whose widths grow upwards, as RevCol's channels do; every
# $\alpha_i$ starts at 0.5 with one entry per channel, shape $(1, d_i)$.
# `run` computes a stack of columns in one of three ways: **plain**
# (everything recorded), **chained** (reversible `RevColumn`s one after
# another) and **one Function** (`ReversibleColumns`, introduced in the
# memory section). It returns the last column's states and the node that
# made the first column's.

# %%
D_IN, WIDTHS, ROWS = 8, (8, 12, 16, 20), 16
L = len(WIDTHS)
WAYS = ("plain", "chained", "one Function")


def make_stack(n_columns, alpha=0.5, seed=0, drop=0.0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    columns = []
    for _ in range(n_columns):
        levels = [Level(D_IN if i == 0 else WIDTHS[i - 1], WIDTHS[i], WIDTHS[i + 1] if i + 1 < L else 0, rng, drop)
                  for i in range(L)]
        columns.append(RevColumn(levels, [Parameter(np.full((1, d), alpha)) for d in WIDTHS]))
        for p in columns[-1].params():
            p.data = p.data.astype(dtype)
    return columns


def run(columns, x, way):
    """(the last column's new states, the node that made the first column's), the first column from zeros."""
    for column in columns:
        column.reversible = way != "plain"
    cs = [Variable(np.zeros((x.shape[0], d), x.dtype), requires_grad=False) for d in WIDTHS]
    if way == "one Function":
        cs = ReversibleColumns(*columns)(x, *cs)
        return cs, cs[0].creator
    first = None
    for column in columns:
        cs = column(x, *cs)
        first = first or cs[0].creator
    return cs, first


rng = np.random.default_rng(1)
X = rng.standard_normal((ROWS, D_IN))
LOSS_WEIGHTS = [rng.standard_normal((256, d)) for d in WIDTHS]  # 256 rows: the memory section uses more
OLD = [np.random.default_rng(2).standard_normal((ROWS, d)) for d in WIDTHS]  # old states for one column


def loss_of(cs):
    """A loss that uses every level of the last column: sum_i sum(c_i * w_i)."""
    return sum((c * w[:c.shape[0]].astype(c.dtype, copy=False)).sum() for c, w in zip(cs, LOSS_WEIGHTS))


stack = make_stack(3)
print("one column:", [sum(p.size for p in level.params()) for level in stack[0].levels], "weights in its levels,",
      "alphas of shapes", [a.shape for a in stack[0].alphas])
outputs = {}
for way in WAYS:
    cs, _ = run(stack, Variable(X), way)
    outputs[way] = [c.data for c in cs]
    print(f"{way:12}: made by {type(cs[0].creator).__name__:25} c_3'[0, :4] = {show(cs[3].data[0, :4])}")
print("outputs bitwise equal:", all(np.array_equal(a, b) for way in WAYS for a, b in zip(outputs[way],
                                                                                         outputs["plain"])))

# %% [markdown]
# The outputs are the same bits: the reversible forward runs the same
# operations on the same arrays in the same order, and only records nothing.
#
# ## Gradients equal the plain run
#
# The gradients are computed differently (the old $c_{i+1}$ comes from the
# inversion, not from memory), so they should agree with the plain run to
# rounding. First one column, with random old states that require
# gradients, so that every gradient of the column is there to compare:

# %%
def largest_difference(ours, theirs):
    """max |ours - theirs| over a list of arrays, relative to the largest |theirs|."""
    return max(np.abs(a - b).max() for a, b in zip(ours, theirs, strict=True)) / max(np.abs(b).max() for b in theirs)


def column_gradients(column, reversible):
    column.reversible = reversible
    column.cleargrads()
    x, cs = Variable(X), [Variable(c) for c in OLD]
    loss_of(column(x, *cs)).backward()
    return {"x": [x.grad.data], "old c's": [c.grad.data for c in cs], "alphas": [a.grad.data for a in column.alphas],
            "level weights": [p.grad.data for i in range(L) for p in column.levels[i].params()]}


ours, plain = column_gradients(stack[1], True), column_gradients(stack[1], False)
for what in plain:
    print(f"{what:14} {len(plain[what]):2} arrays: difference {bounded(largest_difference(ours[what], plain[what]), 1e-14)}"
          " of the largest gradient")


# %% [markdown]
# Then the stack of three columns, where the gradients of one column's old
# states are the incoming gradients of the column before, computed chained
# and as one Function:

# %%
def stack_gradients(columns, x0, way):
    """[x's gradient, every parameter's in params() order], and the node that made the first column's states."""
    for column in columns:
        column.cleargrads()
    x = Variable(x0)
    cs, first = run(columns, x, way)
    loss_of(cs).backward()
    return [x.grad.data] + [p.grad.data for column in columns for p in column.params()], first


plain, _ = stack_gradients(stack, X, "plain")
for way in WAYS[1:]:
    grads, _ = stack_gradients(stack, X, way)
    print(f"{way:12}: {len(grads)} gradient arrays, difference from the plain run "
          f"{bounded(largest_difference(grads, plain), 1e-14)} of the largest")

# %% [markdown]
# ### `autograd.grad` with respect to $\alpha$ and the weights
#
# Because the node returns its parameters' gradients, `autograd.grad` can
# ask for them, and leaves every `.grad` alone (step 33):

# %%
for column in stack:
    column.cleargrads()
params = [p for column in stack for p in column.params()]
wanted = [stack[2].alphas[3], stack[1].levels[0].down.weight]
for way in WAYS[1:]:
    g_alpha, g_weight = autograd.grad(loss_of(run(stack, Variable(X), way)[0]), wanted)
    for g, p in zip([g_alpha, g_weight], wanted):
        index = next(i for i, q in enumerate(params) if q is p)
        np.testing.assert_allclose(g.data, plain[1 + index], rtol=1e-12, atol=1e-14)  # plain[0] is x's
    print(f"{way:12}: d loss / d alpha_3 of the last column {show(g_alpha.data[0, :4])} ..., as plain; "
          f"every .grad still None: {all(p.grad is None for p in params)}")

# %% [markdown]
# ## The first column computes back to zero
#
# During backward each column computes its old states back. For the first
# column these are the zeros it started from. RevCol's code has a
# commented-out `print` of this value, a cheap probe of how exact the
# inversion is:

# %%
for way, bound in [("chained", 0), ("one Function", 1e-13)]:
    _, first = stack_gradients(stack, X, way)
    print(f"{way:12}: largest |first column's states computed back| "
          f"{bounded(max(np.abs(c).max() for c in first.reconstructed), bound)}")

# %% [markdown]
# In the chained run the zeros come back *exactly*: in forward $c_i' =
# l_i(\cdot) + \alpha_i \cdot 0$ is exactly $l_i(\cdot)$, and backward
# recomputes $l_i$ from the same arrays, gets the same bits and subtracts
# them to 0. Each `RevColumn` inverts from its *own* saved states, so one
# column's errors never reach another. With one Function only the last
# column's states were saved, each column is inverted from what the column
# after it computed back, and the zeros come back as rounding noise. Why
# accept that, and what it costs, is the subject of the memory and drift
# sections.
#
# ## $\alpha$: learnable, and kept away from 0
#
# $\alpha_i$ is trained with the rest, and training could drive it towards
# 0, where the inverse divides by 0. Before every forward pass RevCol calls
# `_clamp_abs(alpha.data, 1e-3)`: take the sign, clamp $|\alpha|$ to at
# least $10^{-3}$, put the sign back. `clamp_alpha` does the same, in place
# and only when a value needs it (an in-place change bumps the version
# counter, step 36):

# %%
print(inspect.getsource(clamp_alpha))
alpha = Parameter(np.array([[0.5, 2e-4, -2e-4, -1e-3, -0.25]]))
clamp_alpha(alpha)
print("clamped:", show(alpha.data), "version", alpha._version)
clamp_alpha(alpha)
print("clamped again: version", alpha._version, "(nothing needed clamping: no write)")


# %% [markdown]
# The sign is kept: $-2 \cdot 10^{-4}$ becomes $-10^{-3}$. One value slips
# through RevCol's clamp: exactly 0, whose sign is 0, so the clamped value
# multiplied back by the sign is 0 again. PyTorch shows it:

# %%
def revcol_clamp_abs(data, value):
    """RevCol's SubNet._clamp_abs, as in models/revcol.py."""
    with torch.no_grad():
        sign = data.sign()
        data.abs_().clamp_(value)
        data *= sign


data = torch.tensor([0.5, 2e-4, -2e-4, 0.0], dtype=torch.float64)
revcol_clamp_abs(data, 1e-3)
print("RevCol's clamp:", show(data.numpy()))
zero = make_stack(1)[0]
zero.alphas[2].data[0, 5] = 0.0
try:
    zero(Variable(X), *[Variable(c) for c in OLD])
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# With $\alpha_i = 0$ a column forgets $c_i$: $c_i' = l_i(\cdot)$, and there
# is nothing to compute back. RevCol's inverse would divide by zero and
# carry on with infinities and NaNs; `clamp_alpha` refuses before the
# column runs.
#
# ### What a small $\alpha$ costs
#
# Why $10^{-3}$ and not smaller? An error $\varepsilon$ in $c_i' -
# l_i(\cdot)$ becomes $\varepsilon / \alpha_i$ in $c_i$. The levels are
# coupled: the old $c_{i+1}$ computed back, with its error, is the `above`
# of level $i$, so its error passes through $l_i$ and is divided by
# $\alpha_i$ again. Over $L$ levels the error grows like $1/\alpha^L$. And
# there is an error to begin with: $c_i' = l_i + \alpha_i c_i$ was rounded,
# and a small $\alpha_i c_i$ added to a larger $l_i$ keeps only some of its
# digits.
#
# One column, every $\alpha$ set to the same value, old states from a
# standard normal: the largest error of the states computed back, relative
# to the largest state.

# %%
ALPHA_SWEEP = [0.5, 0.1, 0.01, 0.001]


def inversion_error(alpha, dtype):
    column = make_stack(1, alpha=alpha, dtype=dtype)[0]
    old = [c.astype(dtype) for c in OLD]
    cs = column(Variable(X.astype(dtype)), *[Variable(c) for c in old])
    loss_of(cs).backward()
    back = cs[0].creator.reconstructed
    return max(np.abs(r.astype(np.float64) - c).max() for r, c in zip(back, old)) / max(np.abs(c).max() for c in old)


INVERSION = {(a, dtype): inversion_error(a, dtype) for a in ALPHA_SWEEP for dtype in (np.float64, np.float32)}
INVERSION_BOUNDS = {0.5: (1e-14, 1e-6), 0.1: (1e-12, 1e-4), 0.01: (1e-9, 1.0), 0.001: (1e-5, 1e4)}
print(f"{'alpha':>6} {'float64':>9} {'float32':>9}   (relative error of the old states computed back)")
for a in ALPHA_SWEEP:
    print(f"{a:6} {bounded(INVERSION[a, np.float64], INVERSION_BOUNDS[a][0]):>9}"
          f" {bounded(INVERSION[a, np.float32], INVERSION_BOUNDS[a][1]):>9}")

fig, ax = plt.subplots(figsize=(6, 3.5))
for dtype, marker in [(np.float64, "o-"), (np.float32, "s-")]:
    ax.plot(ALPHA_SWEEP, [INVERSION[a, dtype] for a in ALPHA_SWEEP], marker, label=dtype.__name__)
ax.plot(ALPHA_SWEEP, [1e-16 * (0.5 / a) ** L for a in ALPHA_SWEEP], "k:", label="proportional to $1/\\alpha^4$")
ax.set(xscale="log", yscale="log", xlabel="alpha (every level)", ylabel="relative error of the old states",
       title="One column inverted: error against alpha")
ax.invert_xaxis()
ax.legend()
plt.show()

# %% [markdown]
# Once $\alpha$ is small, each tenfold decrease multiplies the error by
# about $10^4 = 10^L$. At $\alpha = 10^{-3}$ float64 keeps about six correct
# digits of the old states; float32, which starts with seven, returns
# states hundreds of times larger than they were. RevCol's floor of
# $10^{-3}$ protects against a division by zero, not against this: a column
# whose $\alpha$'s train towards the floor computes its backward from wrong
# states, and nothing raises. (The plot shows the values measured on the
# machine that ran it; the table, bounds that hold on every CPU.)
#
# ## Memory against the number of columns
#
# ### Why a chain of columns grows
#
# Each `RevColumn` saves $x$ and its $L$ new states. $x$ is one array shared
# by all columns, but the states are new arrays in every column: a chain of
# $N$ columns keeps $N L$ states. Yet column $k$'s new states are the old
# states of column $k + 1$, which column $k + 1$'s backward *computes back*
# anyway. Saving them is redundant: only the last column's are needed.
#
# A chain cannot drop them by itself: each column is a separate node of the
# graph, and a node cannot hand its saved arrays to another. So the package
# runs all the columns as **one** Function, `ReversibleColumns(*columns)`.
# Its forward runs `_column_forward` column after column and saves $x$ and
# the last column's states; its backward runs `_column_backward` from the
# last column to the first, and hands each column's computed-back old
# states to the column before as *its* new states:

# %%
print(inspect.getsource(ReversibleColumnsFunction))

# %% [markdown]
# The gradients of the old states that one column returns are the incoming
# gradients of the column before, and $x$'s gradient is the sum over the
# columns, since every column reads $x$. Each column's parameter gradients
# are sent on to the running backward pass as soon as that column is done
# (`engine.send_early`, as in step 46). `reconstructed` now holds the
# first column's old states, computed back through every column.
#
# ### Saved bytes and peak, measured
#
# A pack hook (step 38) around the columns sees every array they save; we
# add up the distinct ones that are not parameters. The peak comes during
# backward: as in step 44, `tracemalloc` (filtered to NumPy's domain) gives
# the bytes of every array alive, sampled by a wrapper around each level
# after every call and when backward reaches the level's output (a gradient
# hook, step 34). From the largest sample, the bytes held since the start,
# we take away the parameters' gradients, which every run holds at the end
# (one Function holds them all inside its backward, until it returns
# them). A batch of 256 rows makes the activations weigh more than the
# weights, as in RevCol's image models. The unit of the peaks is one
# column's $L$ states.

# %%
MEMORY_ROWS = 256
X_MEMORY = np.random.default_rng(3).standard_normal((MEMORY_ROWS, D_IN))
STATES = MEMORY_ROWS * sum(WIDTHS) * 8  # one column's L states, float64


def saved_bytes(columns, way):
    """Bytes of the distinct non-parameter arrays that the columns save for backward."""
    arrays = {}

    def pack(v):
        if not isinstance(v, Parameter):
            arrays[id(v.data)] = v.data
        return v.data

    with saved_tensors_hooks(pack, lambda data: data):
        cs, _ = run(columns, Variable(X_MEMORY), way)
    held = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    loss_of(cs).backward()
    for column in columns:
        column.cleargrads()
    return held


def numpy_bytes():
    numpy_only = tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)
    return sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces([numpy_only]).traces)


class Sampled(Layer):
    """A level that records the bytes held after each call, and when backward reaches its output."""

    def __init__(self, level, samples):
        super().__init__()
        self.level, self.samples = level, samples

    def sample(self, *_):
        self.samples.append(numpy_bytes() - self.samples[0])

    def forward(self, below, above):
        out = self.level(below, above)
        self.sample()
        if out.requires_grad:
            out.register_hook(self.sample)
        return out


def peak_bytes(columns, way):
    """The largest sample during one forward and backward pass, less the parameters' gradients."""
    gc.collect()
    gc.disable()  # what the graph frees, it frees by reference counting alone (step 17)
    tracemalloc.start()
    try:
        samples = [numpy_bytes()]
        sampled = [RevColumn([Sampled(level, samples) for level in column.levels], column.alphas)
                   for column in columns]
        loss_of(run(sampled, Variable(X_MEMORY), way)[0]).backward()
    finally:
        tracemalloc.stop()
        gc.enable()
    for column in columns:
        column.cleargrads()
    return max(samples[1:]) - sum(p.data.nbytes for column in columns for p in column.params())


COLUMNS = [1, 2, 4, 8]
SAVED, PEAK = {}, {}
print(f"x: {X_MEMORY.nbytes:,} bytes; one column's {L} states: {STATES:,} bytes (the unit below)")
print(f"{'':>6}" + "".join(f"{way + ': saved':>21}{'peak':>6}" for way in WAYS))
for n in COLUMNS:
    columns = make_stack(n)
    for way in WAYS:
        SAVED[way, n], PEAK[way, n] = saved_bytes(columns, way), peak_bytes(columns, way)
    print(f"N = {n:2}" + "".join(f"{SAVED[way, n]:21,}{PEAK[way, n] / STATES:6.1f}" for way in WAYS))
assert [SAVED["chained", n] for n in COLUMNS] == [X_MEMORY.nbytes + n * STATES for n in COLUMNS]
assert {SAVED["one Function", n] for n in COLUMNS} == {X_MEMORY.nbytes + STATES}
assert [PEAK["chained", b] - PEAK["chained", a] for a, b in zip(COLUMNS[1:], COLUMNS[2:])] == [2 * STATES, 4 * STATES]
assert 0 <= PEAK["one Function", 4] - PEAK["one Function", 2] <= X_MEMORY.nbytes  # x's gradient, summed
assert PEAK["one Function", 4] == PEAK["one Function", 8]
plain_column = (SAVED["plain", 2] - SAVED["plain", 1]) / STATES
print(f"each column adds: plain {plain_column:.1f} states, chained exactly 1, one Function nothing")

# %%
fig, ax = plt.subplots(figsize=(6, 3.5))
for way, marker in zip(WAYS, "os^"):
    ax.plot(COLUMNS, [PEAK[way, n] / STATES for n in COLUMNS], marker + "-", label=f"{way}: peak")
    ax.plot(COLUMNS, [SAVED[way, n] / STATES for n in COLUMNS], marker + ":", color=ax.lines[-1].get_color(),
            label=f"{way}: saved")
ax.set_xscale("log", base=2)
ax.set_xticks(COLUMNS, [str(n) for n in COLUMNS])
ax.set(xlabel="columns N", ylabel="bytes, in units of one column's states", title="Memory of forward + backward")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# A plain column keeps everything its levels computed: the inputs of the
# linear layers and the outputs of the $\tanh$'s, among them the block's
# four-times-wider one, six times the states. A chained reversible column
# saves $x$ and its new states, so the chain's saved bytes, and its peak,
# grow by exactly one column's states per column. One Function saves $x$
# and one column's states however many columns there are, and its peak is
# flat: from 4 columns on the same number of bytes, and at 2 less only by
# one array of $x$'s size (the gradient of $x$, summed over the columns).
#
# What remains in the peak is the working memory of backward: one level's
# recomputed graph, the gradients in flight, the states computed back, and
# from two columns on the hand-over from one column to the one before.
# With one column the reversible peak is nearly a plain column's; the
# saving is in the slope, and grows with the blocks in a level (RevCol's
# levels hold several ConvNeXt blocks). The price is time: every level runs
# twice, in forward and again in backward (timings are in
# `bench/results/reversible.md`, measured by `bench/bench_memory.py`).
#
# ## Drift
#
# One Function keeps memory flat, but changes where its inversions start.
# A chained `RevColumn` inverts from its own saved states and goes back
# through one column: its error is one column's rounding. With one
# Function, the last column computes back the states of the column before,
# which computes back those of the column before it from these, and so on:
# each inversion starts from the previous one's errors, divides them by
# $\alpha$ at every level and passes them on. This is the situation of a
# RevCol network whose memory does not grow with its columns, and the
# first-column probe measures it.
#
# For $\alpha = 0.5$ and $0.25$, 1 to 16 columns, float64 and float32: the
# gradients of both reversible ways against the plain run (relative to the
# largest gradient), and the first column's states as one Function
# computes them back (0 is right; the chained run gives exactly 0, checked).

# %%
def drift(n, alpha, dtype):
    columns = make_stack(n, alpha=alpha, dtype=dtype)
    x0 = X.astype(dtype)
    plain, _ = stack_gradients(columns, x0, "plain")
    chained, first = stack_gradients(columns, x0, "chained")
    assert not any(c.any() for c in first.reconstructed)
    one, first = stack_gradients(columns, x0, "one Function")
    return {"chained: gradients": largest_difference(chained, plain),
            "one Function: gradients": largest_difference(one, plain),
            "one Function: first states": max(np.abs(c).max() for c in first.reconstructed)}


DRIFT_COLUMNS, DRIFT_ALPHAS, DTYPES = [1, 2, 4, 8, 16], [0.5, 0.25], [np.float64, np.float32]
DRIFT = {(dtype, a, n): drift(n, a, dtype) for dtype in DTYPES for a in DRIFT_ALPHAS for n in DRIFT_COLUMNS}
# Powers of ten for N = 2, 4, 8, 16 (N = 1: exactly 0) that the errors stay below on every CPU setting we tried,
# by a factor of 3 or more: chained gradients, one Function's gradients, one Function's first states.
DRIFT_BOUNDS = {(np.float64, 0.5): ([-14] * 4, [-14, -13, -12, -9], [-14, -12, -10, -6]),
                (np.float64, 0.25): ([-14] * 4, [-13, -12, -9, -3], [-12, -10, -6, 1]),
                (np.float32, 0.5): ([-5] * 4, [-6, -5, -3, -1], [-5, -4, -1, 2]),
                (np.float32, 0.25): ([-5] * 4, [-5, -3, 0, 0], [-4, -2, 2, 7])}
print(f"{'':49}" + "".join(f"{f'N = {n}' if n == 1 else n:>9}" for n in DRIFT_COLUMNS))
for dtype in DTYPES:
    for a in DRIFT_ALPHAS:
        rows = {what: [0] + [10.0 ** k for k in exponents] for what, exponents in
                zip(["chained: gradients", "one Function: gradients", "one Function: first states"],
                    DRIFT_BOUNDS[dtype, a])}
        for what, row in rows.items():
            cells = [bounded(DRIFT[dtype, a, n][what], bound) for n, bound in zip(DRIFT_COLUMNS, row)]
            print(f"{dtype.__name__ + ', alpha = ' + str(a):21} {what:27}" + "".join(f"{c:>9}" for c in cells))

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
shown = DRIFT_COLUMNS[1:]  # with one column every error is exactly 0
for ax, dtype in zip(axes, DTYPES):
    for a, colour in zip(DRIFT_ALPHAS, ["C0", "C1"]):
        for what, marker in [("one Function: first states", "o-"), ("one Function: gradients", "s--"),
                             ("chained: gradients", "^:")]:
            ax.plot(shown, [DRIFT[dtype, a, n][what] for n in shown], marker, color=colour,
                    label=f"{what}, alpha = {a}")
    ax.set(yscale="log", xlabel="columns N", title=dtype.__name__)
    ax.set_xscale("log", base=2)
    ax.set_xticks(shown, [str(n) for n in shown])
axes[0].set_ylabel("error (gradients: relative)")
axes[1].legend(fontsize=7)
plt.show()

# %% [markdown]
# The chained columns' error does not grow with $N$: every column inverts
# from its own saved states, so the error is one column's rounding, in
# float64 and float32 alike.
#
# One Function's error grows geometrically with $N$: each column multiplies
# the error it inherits by roughly the same factor, here about 3 a column
# at $\alpha = 0.5$ and about 10 at $\alpha = 0.25$ (the slopes of the plot).
# In float64 at $\alpha = 0.5$, 16 columns still leave the gradients good to
# about ten digits; at $\alpha = 0.25$ the first column's zeros come back as
# numbers the size of the states. Float32 starts with seven digits instead
# of sixteen: with $\alpha = 0.25$ the gradients are wrong in their first
# digit after 8 columns, and then the error cannot grow much further, being
# as large as the gradients it is measured against. The research notes'
# table (four levels of Linear and $\tanh$, width 16) tells the same story:
# about $10^{-13}$ at 8 columns and $10^{-11}$ at 16 for float64 with
# $\alpha = 0.5$; $10^{-2}$ at 16 columns for float32; a first-column probe
# of about 7 for float32, $\alpha = 0.5$, $N = 16$.
#
# RevCol's largest models have 16 columns. Flat memory and exact
# reconstructions cannot both be had: one Function trades a few states per
# column for drift that depends on $\alpha$, $N$ and the float type, and the
# first-column probe is the cheap way to watch it during training.
#
# ## Randomness: DropPath inside the levels
#
# A level that draws random numbers computes something else when it is run
# again, unless it draws the same numbers. `_column_forward` snapshots the
# generator before each level, and `_column_backward` restores the snapshot
# before recomputing it: one snapshot per level, because the levels are
# recomputed one at a time and in reverse order (step 42's checkpoint needs
# one: it reruns its function from the start). To see that they matter,
# here is `RevColumnFunction` with its snapshots thrown away before backward,
# as `preserve_rng_state=False` does for a checkpoint:

# %%
class ForgetfulRevColumnFunction(RevColumnFunction):
    """RevColumnFunction without its RNG snapshots: each level is recomputed with whatever the generator draws."""

    def backward(self, *gys):
        self.states = [None] * len(self.states)
        return super().backward(*gys)


def dropout_run(columns, way):
    """(gradients of x and every parameter, the first column's states computed back, the next draw)."""
    tinypytorch.manual_seed(0)
    if way != "forgetful":
        grads, first = stack_gradients(columns, X, way)
        return grads, getattr(first, "reconstructed", None), random.default_generator().random()
    for column in columns:
        column.cleargrads()
    x, cs, first = Variable(X), [Variable(np.zeros((ROWS, d)), requires_grad=False) for d in WIDTHS], None
    for column in columns:  # what RevColumn.forward does, with the forgetful Function
        params = [p for i in range(L) for p in column.level_params(i)]
        cs = ForgetfulRevColumnFunction(column)(x, *cs, *column.alphas, *params)
        first = first or cs[0].creator
    loss_of(cs).backward()
    grads = [x.grad.data] + [p.grad.data for column in columns for p in column.params()]
    return grads, first.reconstructed, random.default_generator().random()


dropped = make_stack(3, drop=0.2)
plain, _, next_plain = dropout_run(dropped, "plain")
for way in ("chained", "one Function", "forgetful"):
    grads, back, next_draw = dropout_run(dropped, way)
    d, b = largest_difference(grads, plain), max(np.abs(c).max() for c in back)
    if way == "forgetful":  # other masks: errors the size of the values themselves
        assert d > 0.1 and b > 0.1
    print(f"{way:12}: gradients vs plain {'> 1e-1' if way == 'forgetful' else bounded(d, 1e-14):>7}; first column's "
          f"states back {'> 1e-1' if way == 'forgetful' else bounded(b, 1e-13 if way == 'one Function' else 0):>7}; "
          f"next draw as after the plain run: {next_draw == next_plain}")

# %% [markdown]
# With the snapshots, DropPath draws the same masks when each level is
# recomputed, in both reversible ways: the gradients equal the plain run's
# to rounding. Without them, every recomputed level drops other rows: the
# gradients are those of a network that never ran, and the inversion
# subtracts the wrong $l_i(\cdot)$, so the first column's "zeros" come back
# the size of the states. Nothing raises; RevCol's hard-coded
# `preserve_rng_state = True` prevents exactly this. In every run the next
# draw is the plain run's: backward runs inside `fork_rng`, so its draws
# leave no trace outside.
#
# ## Bad input
#
# A column refuses what it could not invert, before it computes anything:
# an $\alpha$ of exactly 0, a different number of levels and $\alpha$'s or
# of states, an $\alpha$ that is not a `Parameter` (its gradient would have
# nowhere to go), a level whose output is not its state's shape (the
# inverse subtracts it from $c_i'$), and, in `ReversibleColumns`, a column
# that is not a `RevColumn`:

# %%
column = make_stack(1)[0]
attempts = {
    "alpha = 0": lambda: RevColumn(column.levels, column.alphas[:3] + [Parameter(np.zeros((1, 20)))]),
    "3 alphas for 4 levels": lambda: RevColumn(column.levels, column.alphas[:3]),
    "3 states for 4 levels": lambda: column,
    "alpha not a Parameter": lambda: RevColumn(column.levels, column.alphas[:3] + [np.full((1, 20), 0.5)]),
    "level 1 returns its below": lambda: RevColumn([column.levels[0], lambda below, above: below,
                                                    *column.levels[2:]], column.alphas),
    "a Level among the columns": lambda: ReversibleColumns(column, column.levels[0]),
}
for what, make in attempts.items():
    states = OLD[:3] if what.startswith("3 states") else OLD
    try:
        make()(Variable(X), *[Variable(c) for c in states])
        print(f"{what}: no error")
    except (ValueError, TypeError) as error:
        print(f"{what}: {type(error).__name__}: {error}")

# %% [markdown]
# A level with weights must be a `Layer`, as in step 46: a plain function
# that closes over a level, `lambda below, above: level(below, above)`,
# hides the level's weights from the column. The plain column trains them
# all the same; the reversible column, which computes the gradients of the
# parameters it can list and no others, refuses in backward rather than
# leave them without a gradient, both alone and in `ReversibleColumns`:

# %%
hiding = [lambda below, above, level=level: level(below, above) for level in column.levels]
for name, layer in [("plain column", RevColumn(hiding, column.alphas, reversible=False)),
                    ("RevColumn", RevColumn(hiding, column.alphas)),
                    ("ReversibleColumns", ReversibleColumns(RevColumn(hiding, column.alphas)))]:
    column.cleargrads()
    try:
        loss_of(layer(Variable(X), *[Variable(c) for c in OLD])).backward()
        print(f"{name}: every weight got a gradient:", all(p.grad is not None for p in column.params()))
    except RuntimeError as error:
        print(f"{name}: RuntimeError: {error}")

# %% [markdown]
# The plain path would not catch the wrong shape: it adds $l_i(\cdot) +
# \alpha_i c_i$, and NumPy broadcasts where it can. Backward through the
# columns a second time fails as any graph does after its saved tensors
# were freed (step 35); with `retain_graph=True` the gradients add up to
# exactly twice the first ones:

# %%
x = Variable(X)
loss = loss_of(run(stack, x, "one Function")[0])
loss.backward(retain_graph=True)
once = x.grad.data.copy()
loss.backward()
print("with retain_graph, the second backward doubles the gradient:", np.array_equal(x.grad.data, 2 * once))
try:
    loss.backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(". ")[0])

# %% [markdown]
# ## Check against PyTorch
#
# The same columns in PyTorch, float64, with the weights copied:
#
# - a **plain column**, RevCol's `_forward_nonreverse` in torch operations;
# - a **port of RevCol's `ReverseFunction`** to `torch.autograd.Function`
#   for any number of levels, written as RevCol writes it: forward under
#   `no_grad` saving $x$, the new states and an RNG state per level;
#   backward from the top level down, with `torch.autograd.backward` inside.
#
# For one column (gradients of $x$, of every old state, $\alpha$ and weight)
# and for a stack of three (run plain, chained and as one Function here,
# plain and ported there), the outputs and gradients must agree. Then the
# port's side effect.

# %%
def twin(linear):
    """torch.nn.Linear (float64) with a tinypytorch Linear's weights."""
    out_size, in_size = linear.weight.shape
    module = torch.nn.Linear(in_size, out_size, bias=linear.bias is not None, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(linear.weight.data))
        if linear.bias is not None:
            module.bias.copy_(torch.from_numpy(linear.bias.data))
    return module


class TorchLevel(torch.nn.Module):
    def __init__(self, level):
        super().__init__()
        self.down, self.up = twin(level.down), twin(level.up) if level.up is not None else None
        self.expand, self.project = twin(level.expand), twin(level.project)

    def forward(self, below, above):
        f = torch.tanh(self.down(below) if above is None else self.down(below) + self.up(above))
        return f + self.project(torch.tanh(self.expand(f)))


class TorchColumn(torch.nn.Module):
    """The twin of a RevColumn; ordered() lists its parameters in RevColumn.params()'s order (alphas first)."""

    def __init__(self, column):
        super().__init__()
        self.levels = torch.nn.ModuleList([TorchLevel(level) for level in column.levels])
        self.alphas = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(a.data.copy()))
                                              for a in column.alphas])

    def ordered(self):
        return [*self.alphas, *[p for level in self.levels for p in level.parameters()]]

    def plain(self, x, cs):
        new = []
        for i, (level, alpha) in enumerate(zip(self.levels, self.alphas)):
            new.append(alpha * cs[i] + level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < len(cs) else None))
        return new

    def reverse(self, x, cs):
        return TorchReverseFunction.apply(list(self.levels), list(self.alphas), x, *cs)[1:]


class TorchReverseFunction(torch.autograd.Function):
    """RevCol's ReverseFunction (models/revcol_function.py), its four levels written as a loop."""

    @staticmethod
    def forward(ctx, run_functions, alpha, x, *cs):
        ctx.run_functions, ctx.alpha, ctx.cpu_states, new = run_functions, alpha, [], []
        n = len(run_functions)
        with torch.no_grad():
            for i, level in enumerate(run_functions):
                ctx.cpu_states.append(torch.get_rng_state())
                new.append(level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < n else None) + cs[i] * alpha[i])
        ctx.save_for_backward(x, *new)
        return (x, *new)

    @staticmethod
    def backward(ctx, gx_right, *g_right):
        x, *c = [t.detach().requires_grad_() for t in ctx.saved_tensors]  # RevCol's detach_and_grad
        levels, alpha, n = ctx.run_functions, ctx.alpha, len(ctx.run_functions)
        g_up, g_left, left = [None] * n, [None] * n, None  # left: the old c_{i+1}, computed back
        with torch.enable_grad(), torch.random.fork_rng():
            for i in reversed(range(n)):
                g_up[i] = g_right[i] if i == n - 1 else g_right[i] + c[i].grad  # T_i
                g_left[i] = g_up[i] * alpha[i]  # "shortcut"
                torch.set_rng_state(ctx.cpu_states[i])
                oup = levels[i](x if i == 0 else c[i - 1], left)
                torch.autograd.backward(oup, g_up[i], retain_graph=True)  # .grad of weights, below, left
                if left is not None:
                    left.requires_grad = False
                    torch.autograd.backward(left * alpha[i + 1], g_up[i + 1])  # "alpha update": into alpha.grad
                    g_left[i + 1] = g_left[i + 1] + left.grad  # "fusion"
                with torch.no_grad():
                    left = (1 / alpha[i]) * (c[i] - oup)  # "feature reverse"
                left = left.detach().requires_grad_()
            left.requires_grad = False
            torch.autograd.backward(left * alpha[0], g_up[0])
        return (None, None, x.grad, *g_left)


def assert_close(ours, theirs, what):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(theirs).max()), err_msg=what)


def torch_loss(cs):
    return sum((c * torch.from_numpy(w[:c.shape[0]])).sum() for c, w in zip(cs, LOSS_WEIGHTS))


# %%
column, twin_column = stack[1], TorchColumn(stack[1])
for torch_way in ("plain", "reverse"):
    x_t, old_t = torch.tensor(X, requires_grad=True), [torch.tensor(c, requires_grad=True) for c in OLD]
    new_t = getattr(twin_column, torch_way)(x_t, old_t)
    torch_loss(new_t).backward()
    for reversible in (True, False):
        column.reversible = reversible
        column.cleargrads()
        x, old = Variable(X), [Variable(c) for c in OLD]
        new = column(x, *old)
        loss_of(new).backward()
        for ours, theirs in [*zip(new, new_t), (x.grad, x_t.grad), *zip([c.grad for c in old], [c.grad for c in old_t]),
                             *zip([p.grad for p in column.params()], [p.grad for p in twin_column.ordered()])]:
            assert_close(ours.data, theirs.detach().numpy(), f"one column, torch {torch_way}")
    twin_column.zero_grad()
print(f"one column: new states, gradients of x, {L} old states, {L} alphas and "
      f"{sum(len(list(level.params())) for level in column.levels)} weights equal torch's, plain and ported")

twins = [TorchColumn(column) for column in stack]
for torch_way in ("plain", "reverse"):
    x_t = torch.tensor(X, requires_grad=True)
    cs_t = [torch.zeros(ROWS, d, dtype=torch.float64) for d in WIDTHS]
    for twin_column in twins:
        cs_t = getattr(twin_column, torch_way)(x_t, cs_t)
    torch_loss(cs_t).backward()
    theirs = [x_t.grad.numpy()] + [p.grad.numpy() for t in twins for p in t.ordered()]
    for way in WAYS:
        cs, _ = run(stack, Variable(X), way)
        for c, c_t in zip(cs, cs_t, strict=True):
            assert_close(c.data, c_t.detach().numpy(), f"stack, {way}, torch {torch_way}")
        for g, g_t in zip(stack_gradients(stack, X, way)[0], theirs, strict=True):
            assert_close(g, g_t, f"stack, {way}, torch {torch_way}")
    for t in twins:
        t.zero_grad()
print(f"stack of 3 columns, plain, chained and one Function: states and gradients of x and of all "
      f"{len(theirs) - 1} parameters equal torch's, plain and ported")

# %% [markdown]
# The port's weights and $\alpha$'s are not inputs of its node: RevCol
# passes them in Python lists, and its backward reaches them by calling
# `torch.autograd.backward` itself. So `torch.autograd.grad` with respect to
# them finds nothing, and yet, running the port's backward to reach $x$,
# fills their `.grad`:

# %%
twin_column = TorchColumn(stack[1])
x_t = torch.tensor(X, requires_grad=True)
loss_t = torch_loss(twin_column.reverse(x_t, [torch.tensor(c) for c in OLD]))
params_t = twin_column.ordered()
try:
    torch.autograd.grad(loss_t, [x_t, *params_t], retain_graph=True)
except RuntimeError as error:
    print("torch.autograd.grad:", str(error).splitlines()[0])
twin_column.zero_grad()
grads_t = torch.autograd.grad(loss_t, [x_t, *params_t], allow_unused=True)
print(f"with allow_unused=True: {sum(g is not None for g in grads_t[1:])} of {len(params_t)} weights' and alphas' "
      f"gradients returned, yet all their .grad filled: {all(p.grad is not None for p in params_t)}")

column = stack[1]
column.reversible = True
grads = autograd.grad(loss_of(column(Variable(X), *[Variable(c) for c in OLD])), list(column.params()))
for g, p_t in zip(grads, params_t, strict=True):
    assert_close(g.data, p_t.grad.numpy(), "autograd.grad")
print(f"tinypytorch's autograd.grad returns all {len(grads)}, equal to the port's .grad")
print("PyTorch check passed: RevColumn and ReversibleColumns states, grads of x, states, weights and alphas equal "
      "a torch column and a port of RevCol's ReverseFunction")
