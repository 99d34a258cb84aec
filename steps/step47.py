# %% [markdown]
# # Step 47: Reversible columns (RevCol)
#
# Step 46 made a stack of blocks reversible, so that it keeps no
# activations for backward. This step applies the idea to a network of
# another shape: RevCol (Cai et al., "Reversible Column Networks", ICLR
# 2023), made of $N$ **columns** of $L$ **levels** each (in the paper, four
# feature scales of an image). Every column reads the input $x$ and the $L$
# states of the column before, and hands $L$ new states to the next; it is
# built so that the states it received can be computed back from those it
# returned. We read the package's version (`tinypytorch.reversible`), check
# its gradients, and measure what it saves and what it costs.

# %%
import gc
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Parameter, Variable, no_grad, random
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Layer, Linear
from tinypytorch.optimizers import SGD
from tinypytorch.reversible import (RevColumn, RevColumnFunction, ReversibleColumns,
                                    ReversibleColumnsFunction, _column_backward, _column_forward,
                                    clamp_alpha)
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ")


def below(error, bound):
    """'< 1e-14' after checking that error < bound (a power of ten); '0' for an error that must be exactly 0.

    Rounding errors differ from one CPU to another by a small factor; a bound does not."""
    if bound == 0:
        assert error == 0, error
        return "0"
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< 1e{round(math.log10(bound))}"


# %% [markdown]
# ## The level equation
#
# Write $c_i$ for the state of level $i$ that a column receives and $c_i'$
# for the state it returns. The column computes its levels from the bottom
# up:
#
# $$
# c_i' = l_i\bigl(c_{i-1}',\ c_{i+1}\bigr) + \alpha_i\, c_i, \qquad c_{-1}' = x .
# $$
#
# $l_i$, any function with parameters, reads the *new* state of the level
# below (the input $x$ for level 0) and the *old* state of the level above
# (nothing at the top); in RevCol it fuses the two and runs a few ConvNeXt
# blocks. $\alpha_i c_i$ is a shortcut from the previous column, scaled by
# a learnable $\alpha_i$, one number per channel, which RevCol starts at
# 0.5. With four levels:
#
# $$
# \begin{aligned}
# c_0' &= l_0(x, c_1) + \alpha_0 c_0, & c_1' &= l_1(c_0', c_2) + \alpha_1 c_1, \\
# c_2' &= l_2(c_1', c_3) + \alpha_2 c_2, & c_3' &= l_3(c_2') + \alpha_3 c_3.
# \end{aligned}
# $$
#
# Solve each equation for the old state:
#
# $$
# c_i = \bigl(c_i' - l_i(c_{i-1}',\ c_{i+1})\bigr) / \alpha_i .
# $$
#
# The right-hand side needs two returned states and one *old* state,
# $c_{i+1}$. The top level needs none, so $c_3$ comes first, then $c_2$
# from it, down to $c_0$: the inverse runs from the top down. $l_i$ is only
# evaluated again, never inverted, since it does not read $c_i$. This is
# step 46's additive coupling with a scale on the shortcut, and the inverse
# divides by it, so $\alpha_i$ must not be 0. A network chains $N$ columns
# that all read $x$, the first starting from zeros; RevCol's image models
# have 4 (RevCol-T), 8 (S, L, XL and H) or 16 (B).

# %% tags=["hide-input"]
def columns_picture():
    """RevCol's grid (left): what level i of a column reads; one column undone from the top down (right)."""
    fig, (grid, undo) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.2, 1]})
    node = dict(boxstyle="round,pad=0.3", facecolor="#dbe9f6", edgecolor="#1f77b4")
    lit_node = dict(node, facecolor="#fde0c5", edgecolor="#d62728")
    grey = dict(arrowstyle="->", color="#b0b0b0", lw=1.0, shrinkA=2, shrinkB=2)  # from box edge to box edge
    colour = {"below": "#1f77b4", "above": "#ff7f0e", "alpha": "#2ca02c"}
    xs = (1.2, 3.6, 6.0)
    grid.set(xlim=(-0.2, 7.6), ylim=(-1.7, 3.8))
    grid.axis("off")
    grid.set_title("forward: columns of L = 4 levels, bottom up", fontsize=12)
    boxes = {}  # (column, level): the box drawn around its name, where arrows start and end
    for k, xk in enumerate(xs, start=1):
        grid.text(xk, 3.55, f"column {k}", ha="center", fontsize=11)
        for i in range(4):
            lit = (k, i) == (3, 1)
            boxes[k, i] = grid.text(xk, i, f"$c_{i}^{{({k})}}$", ha="center", va="center", fontsize=12,
                                    bbox=lit_node if lit else node).get_bbox_patch()

            def arrow(what, start, source=None, **extra):
                style = dict(grey, color=colour[what], lw=2.0) if lit else grey
                grid.annotate("", xy=(xk, i), xytext=start, arrowprops={
                    **style, "patchA": boxes.get(source), "patchB": boxes[k, i], **extra})

            arrow("below", (xk, i - 1) if i else (xk, -1.25), (k, i - 1) if i else None,
                  **({} if i else {"shrinkA": 0}))
            if k > 1:
                arrow("alpha", (xs[k - 2], i), (k - 1, i))
                if i < 3:
                    arrow("above", (xs[k - 2], i + 1), (k - 1, i + 1))
            else:
                grid.text(0.0, i, "0", ha="center", va="center", fontsize=11, color="#555555")
                grid.annotate("", xy=(xk, i), xytext=(0.0, i), arrowprops=dict(grey, shrinkA=6, patchB=boxes[k, i]))
    grid.plot([xs[0], xs[-1]], [-1.25, -1.25], color="#b0b0b0", lw=1.0)
    grid.text(3.6, -1.6, "the input x, read by level 0 of every column", ha="center", fontsize=10, color="#555555")
    grid.text(4.8, 0.93, r"$\alpha_1 \cdot$", ha="center", va="top", fontsize=12, color=colour["alpha"])
    grid.text(5.2, 1.72, "above", ha="center", va="center", fontsize=11, color=colour["above"])
    grid.text(6.12, 0.5, "below", ha="left", va="center", fontsize=11, color=colour["below"])

    undo.set(xlim=(0, 10), ylim=(-1.7, 3.8))
    undo.axis("off")
    undo.set_title("backward: column 3 undone, top down", fontsize=12)
    undo.text(0.2, 3.55, r"$c_i = c_i^{(2)}$ (received),  $c_i' = c_i^{(3)}$ (returned, saved)", fontsize=11)
    steps = [r"$c_3 = (c_3' - l_3(c_2'))\,/\,\alpha_3$", r"$c_2 = (c_2' - l_2(c_1', c_3))\,/\,\alpha_2$",
             r"$c_1 = (c_1' - l_1(c_0', c_2))\,/\,\alpha_1$", r"$c_0 = (c_0' - l_0(x, c_1))\,/\,\alpha_0$"]
    for n, (i, text) in enumerate(zip((3, 2, 1, 0), steps), start=1):
        undo.text(0.6, i - 0.25, str(n), ha="center", va="center", fontsize=11, color="white",
                  bbox=dict(boxstyle="circle,pad=0.25", facecolor="#d62728", edgecolor="none"))
        undo.text(1.3, i - 0.25, text, ha="left", va="center", fontsize=13)
        if i:
            undo.annotate("", xy=(0.6, i - 1.0), xytext=(0.6, i - 0.5),
                          arrowprops=dict(arrowstyle="->", color="#d62728", lw=1.3))
    undo.text(0.2, -1.25, "each old state just computed is what the level below\n"
              "reads above: so the levels come off from the top", ha="left", va="center", fontsize=10,
              color="#555555")
    fig.tight_layout()
    plt.show()


columns_picture()

# %% [markdown]
# Left: level 1 of column 3 reads the new state below it (blue), the
# previous column's state above it (orange), and adds $\alpha_1$ times the
# previous column's state of its own level (green). Right: column 3 undone,
# each line using the old state the line above computed.
#
# ## One column as one node
#
# `RevColumn(levels, alphas)` is one column: `levels[i]` is a `Layer` called
# as `level(below, above)`, `alphas[i]` a `Parameter` that broadcasts
# against $c_i$. Its `plain` method is the level equation with ordinary
# operations, everything recorded (RevCol's `_forward_nonreverse`): the
# reference. The reversible path is one `Function`, `RevColumnFunction`
# (RevCol's `ReverseFunction`), whose inputs are $x$, the old states, the
# $\alpha$'s and every parameter of the levels, so that all their gradients
# come back through the graph. Its forward runs the same equation on
# arrays, under `no_grad`:

# %%
show_code(RevColumn.plain, RevColumnFunction.forward, _column_forward, step=47)

# %% [markdown]
# Nothing inside the levels is recorded; the node saves $x$ and the $L$ new
# states. The generator's state is noted before each level (step 41).
#
# **Backward, top level down.** Backward receives $\bar g_i = \partial\mathcal{L}/\partial c_i'$ from
# whatever used the new states. As $c_i'$ is also level $i + 1$'s `below`,
# its whole gradient is
#
# $$
# T_i = \bar g_i + \Bigl(\frac{\partial l_{i+1}}{\partial\,\text{below}}\Bigr)^{\!\top} T_{i+1},
# $$
#
# which needs level $i + 1$ done first: backward goes top down, the order
# of the inverse. The rest follows from $T_i$:
#
# $$
# \begin{aligned}
# \frac{\partial\mathcal{L}}{\partial c_i} &= \alpha_i T_i
#   + \Bigl(\frac{\partial l_{i-1}}{\partial\,\text{above}}\Bigr)^{\!\top} T_{i-1}, &
# \frac{\partial\mathcal{L}}{\partial \alpha_i} &= \sum_{\text{rows}} T_i \odot c_i, \\
# \frac{\partial\mathcal{L}}{\partial \theta_i} &= \Bigl(\frac{\partial l_i}{\partial \theta_i}\Bigr)^{\!\top} T_i, &
# \frac{\partial\mathcal{L}}{\partial x} &= \Bigl(\frac{\partial l_0}{\partial\,\text{below}}\Bigr)^{\!\top} T_0.
# \end{aligned}
# $$
#
# $\alpha_i$'s gradient needs the old $c_i$, which is why backward computes
# it back before moving down a level:

# %%
show_code(_column_backward, step=47)

# %% [markdown]
# For each level from the top, `_level_backward` **recomputes** the level
# from fresh leaves holding `below` and `above` (the old $c_{i+1}$ just
# computed back), graph recorded, generator set to the level's noted state
# (`replaying`, steps 42 and 45); **checks** that it reads no weight the
# column cannot list (step 46); and **backpropagates** $T_i$, giving the
# gradients of `below`, `above` and the level's parameters. Then the loop
# **inverts**: `old[i] = (new[i] - out) / alphas[i]`.
#
# ## A model to test on
#
# Each level is RevCol's with linear layers for convolutions: a fusion
# $f = \tanh(\text{down}(\text{below}) + \text{up}(\text{above}))$, then one ConvNeXt block
# reduced to its shape (four times wider, $\tanh$, back, added to its
# input), with an optional DropPath on its branch. Widths grow upwards, as
# RevCol's channels do.

# %%
def drop_path(h, p, training):
    """timm's DropPath, as RevCol's blocks use it: each row's branch dropped with probability p."""
    if not training or p == 0.0:
        return h
    keep = random.default_generator().random((h.shape[0], 1)) >= p
    return h * (keep / (1.0 - p)).astype(h.dtype)


class Level(Layer):
    """l_i(below, above) = f + block(f), f = tanh(down(below) + up(above))."""

    def __init__(self, n_below, n, n_above, rng, drop=0.0):
        super().__init__()
        self.down = Linear(n_below, n, rng=rng)  # RevCol: a strided convolution
        self.up = Linear(n_above, n, bias=False, rng=rng) if n_above else None
        self.expand = Linear(n, 4 * n, rng=rng)  # the block: 4x wider, tanh, and back
        self.project = Linear(4 * n, n, rng=rng)
        self.drop = drop

    def forward(self, below, above):
        fused = self.down(below) if above is None else self.down(below) + self.up(above)
        f = tinypytorch.tanh(fused)
        block = self.project(tinypytorch.tanh(self.expand(f)))
        return f + drop_path(block, self.drop, self.training)


D_IN, WIDTHS, ROWS = 8, (8, 12, 16, 20), 16
L = len(WIDTHS)
WAYS = ("plain", "chained", "one Function")


def make_stack(n_columns, alpha=0.5, seed=0, drop=0.0, dtype=np.float64):
    """n_columns RevColumns of four Levels; every alpha starts at `alpha`."""
    rng = np.random.default_rng(seed)
    columns = []
    for _ in range(n_columns):
        sizes = [(D_IN if i == 0 else WIDTHS[i - 1], WIDTHS[i], WIDTHS[i + 1] if i + 1 < L else 0)
                 for i in range(L)]
        levels = [Level(*size, rng, drop) for size in sizes]
        columns.append(RevColumn(levels, [Parameter(np.full((1, d), alpha)) for d in WIDTHS]))
        for p in columns[-1].params():
            p.data = p.data.astype(dtype)
    return columns


def run(columns, x, way):
    """(the last column's states, the node that made the first column's); first from zeros."""
    for column in columns:
        column.reversible = way != "plain"
    cs = [Variable(np.zeros((x.shape[0], d), x.dtype), requires_grad=False) for d in WIDTHS]
    if way == "one Function":  # all the columns as one node: see below
        cs = ReversibleColumns(*columns)(x, *cs)
        return cs, cs[0].creator
    first = None
    for column in columns:
        cs = column(x, *cs)
        first = first or cs[0].creator
    return cs, first


# %% tags=["hide-cell"]
rng = np.random.default_rng(1)
X = rng.standard_normal((ROWS, D_IN))
LOSS_WEIGHTS = [rng.standard_normal((256, d)) for d in WIDTHS]  # 256 rows: the memory section uses more
OLD = [np.random.default_rng(2).standard_normal((ROWS, d)) for d in WIDTHS]  # old states for a column on its own


def loss_of(cs):
    """A loss that uses every level of the last column: sum_i sum(c_i * w_i)."""
    return sum((c * w[:c.shape[0]].astype(c.dtype, copy=False)).sum() for c, w in zip(cs, LOSS_WEIGHTS))


def gradients(columns, way, x0=X):
    """[x's gradient] + every parameter's (params() order), and the node that made the first column's states."""
    for column in columns:
        column.cleargrads()
    x = Variable(x0)
    cs, first = run(columns, x, way)
    loss_of(cs).backward()
    return [x.grad.data] + [p.grad.data for column in columns for p in column.params()], first


def relative_difference(ours, theirs):
    """max |ours - theirs| over a list of arrays, relative to the largest |theirs|."""
    return max(np.abs(a - b).max() for a, b in zip(ours, theirs, strict=True)) / max(np.abs(b).max() for b in theirs)


# %% [markdown]
# A collapsed cell holds the data, a loss that reads every level of the
# last column, and `gradients(columns, way)`: the gradients of $x$ and of
# every parameter. Three columns, run the three ways:

# %%
stack = make_stack(3)
plain, _ = gradients(stack, "plain")
for way in WAYS:
    cs, first = run(stack, Variable(X), way)
    print(f"{way:12}: made by {type(first).__name__:25} c_3'[0, :3] = {show(cs[3].data[0, :3])}")
grads, _ = gradients(stack, "chained")
difference = relative_difference(grads, plain)
print(f"chained, {len(grads)} gradient arrays against the plain run:", below(difference, 1e-14))

# %% [markdown]
# The reversible forward runs the same operations on the same arrays, only
# recording nothing: the same bits. The gradients, computed from inverted
# states, agree to rounding.
#
# ## $\alpha$, kept away from 0
#
# Training could drive $\alpha_i$ to 0, where the inverse divides by 0.
# Before every forward pass RevCol calls `_clamp_abs(alpha.data, 1e-3)`:
# lift $|\alpha|$ to at least $10^{-3}$, keeping the sign. `clamp_alpha`
# does the same, in place and only when needed (bumping the version
# counter, step 36). Exactly 0 slips through RevCol's clamp (its sign is
# 0, so it stays 0, and the inverse yields infinities); `clamp_alpha`
# refuses it.

# %%
show_code(clamp_alpha, step=47)
alpha = Parameter(np.array([[0.5, 2e-4, -2e-4, -0.25]]))
clamp_alpha(alpha)
print("clamped:", show(alpha.data), "version", alpha._version)

# %% [markdown]
# ## One random state per level
#
# A level that draws random numbers computes something else when it runs
# again, unless it draws the same numbers. The levels are recomputed one at
# a time, in reverse order, so the column notes one generator state per
# level (step 42's checkpoint needs one: it reruns its function from the
# start). To see that they matter, throw them away before backward:

# %%
class ForgetfulRevColumnFunction(RevColumnFunction):
    """RevColumnFunction that forgets its noted states: levels recomputed with whatever is drawn."""

    def backward(self, *gys):
        self.states = [None] * len(self.states)
        return super().backward(*gys)


# %% tags=["hide-input"]
def dropout_run(columns, way):
    """(gradients of x and every parameter, the first column's states computed back, the next draw)."""
    tinypytorch.manual_seed(0)
    if way != "forgetful":
        grads, first = gradients(columns, way)
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
dropped_plain, _, next_plain = dropout_run(dropped, "plain")
print("3 columns, DropPath 0.2      gradients vs plain   first column's zeros back   next draw as plain's")
for way in ("chained", "forgetful"):
    grads, back, next_draw = dropout_run(dropped, way)
    d, b = relative_difference(grads, dropped_plain), max(np.abs(c).max() for c in back)
    if way == "forgetful":  # other masks: errors the size of the values themselves
        assert d > 0.1 and b > 0.1
    print(f"{way + (' (one state a level)' if way == 'chained' else ' (no states)'):30}"
          f"{'> 1e-1' if way == 'forgetful' else below(d, 1e-14):>16}"
          f"{'> 1e-1' if way == 'forgetful' else below(b, 0):>27}{str(next_draw == next_plain):>23}")

# %% [markdown]
# With its states, DropPath draws the same masks when a level is
# recomputed. Without them, every recomputed level drops other rows: the
# gradients belong to a network that never ran, and the inversion subtracts
# the wrong $l_i(\cdot)$, so the first column's zeros come back as large as
# the states. Nothing raises. (RevCol fixes `preserve_rng_state = True`.)
#
# ## One Function for all the columns
#
# Each `RevColumn` saves $x$ and its $L$ new states, so a chain of $N$
# columns keeps $N L$ states (RevCol chains one `ReverseFunction` a
# column). Yet column $k$'s new states are the old states of column
# $k + 1$, which its backward computes back anyway: only the last column's
# are needed. A chain cannot drop them, since a node cannot hand its saved
# arrays to another. So `ReversibleColumns(*columns)` runs all the columns
# as one node, whose backward hands each column's computed-back old states
# to the column before, as *its* new states:

# %%
show_code(ReversibleColumnsFunction.forward, ReversibleColumnsFunction.backward, step=47)

# %% [markdown]
# $x$'s gradient is summed over the columns, which all read $x$; each
# column's parameter gradients go on as soon as it is done
# (`current_pass().send`, step 46). The first column started from zeros, so
# what it computes back should be zeros, a cheap probe of the inversion:

# %%
grads, first = gradients(stack, "one Function")
print(f"one Function, {len(grads)} gradient arrays against the plain run:",
      below(relative_difference(grads, plain), 1e-14))
for way, bound in [("chained", 0), ("one Function", 1e-13)]:
    _, first = gradients(stack, way)
    back = max(np.abs(c).max() for c in first.reconstructed)
    print(f"{way:12}: largest |first column's states computed back|", below(back, bound))

# %% [markdown]
# Chained, the zeros come back *exactly*: $l_i(\cdot) + \alpha_i \cdot 0$ is
# exactly $l_i(\cdot)$, recomputed from the same arrays, and each column
# inverts from its own saved states. As one Function, each column inverts
# from what the next computed back, and the zeros return as rounding noise.
#
# Memory, measured in a collapsed cell: a pack hook (step 38) sees what the
# columns save; `tracemalloc`, sampled during backward, gives the peak of
# NumPy memory, less the parameters' gradients. 256 rows make the
# activations outweigh the weights, as in RevCol's image models.

# %% tags=["hide-input"]
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
for n in COLUMNS:
    columns = make_stack(n)
    for way in WAYS:
        SAVED[way, n], PEAK[way, n] = saved_bytes(columns, way), peak_bytes(columns, way)
assert [SAVED["chained", n] for n in COLUMNS] == [X_MEMORY.nbytes + n * STATES for n in COLUMNS]
assert {SAVED["one Function", n] for n in COLUMNS} == {X_MEMORY.nbytes + STATES}
assert [PEAK["chained", b] - PEAK["chained", a] for a, b in zip(COLUMNS[1:], COLUMNS[2:])] == [2 * STATES, 4 * STATES]
assert 0 <= PEAK["one Function", 4] - PEAK["one Function", 2] <= X_MEMORY.nbytes  # x's gradient, summed
assert PEAK["one Function", 4] == PEAK["one Function", 8]


def memory_picture():
    per_column = {way: (SAVED[way, 2] - SAVED[way, 1]) / STATES for way in WAYS}
    for way in WAYS:
        assert all(SAVED[way, n] == SAVED[way, 1] + (n - 1) * per_column[way] * STATES for n in COLUMNS)
    print(f"saved, in one column's {L} states: " + ", ".join(
        f"{way} {SAVED[way, 1] / STATES:.2f}" + (f" + {per_column[way]:.0f}/column" if per_column[way] else "")
        for way in WAYS))
    fig, ax = plt.subplots(figsize=(8, 3.0))
    for way, marker in zip(WAYS, "os^"):
        ax.plot(COLUMNS, [PEAK[way, n] / STATES for n in COLUMNS], marker + "-", label=f"{way}: peak")
        ax.plot(COLUMNS, [SAVED[way, n] / STATES for n in COLUMNS], marker + ":", color=ax.lines[-1].get_color(),
                label=f"{way}: saved")
    ax.set_xscale("log", base=2)
    ax.set_xticks(COLUMNS, [str(n) for n in COLUMNS])
    ax.set(xlabel="columns N", ylabel="one column's states", title="memory of one forward and backward pass")
    ax.legend(fontsize=8, ncol=3, loc="upper left")
    fig.tight_layout()
    plt.show()


memory_picture()

# %% [markdown]
# A plain column keeps everything its levels computed, six times its
# states. A chained reversible column saves $x$ and its new states: saved
# bytes and peak grow by exactly one column's states a column. One Function
# saves $x$ and one column's states, and its peak is flat from 4 columns on;
# what remains is backward's working memory (one level's recomputed graph,
# the gradients in flight). The price in time: every level runs twice
# (`bench/results/reversible.md`).
#
# ## The price: drift
#
# The inversion divides by $\alpha$. An error $\varepsilon$ in
# $c_i' - l_i(\cdot)$ becomes $\varepsilon / \alpha_i$ in $c_i$, which level
# $i - 1$ reads as `above`: its error passes through $l_{i-1}$ and is
# divided again. Over $L$ levels the error grows like $1/\alpha^L$. As one
# Function, the columns multiply it again: each inversion starts from the
# errors of the next. Below, left: one column inverted from its own
# outputs, every $\alpha$ the same; right: the gradients through $N$
# columns run as one Function, against the plain run.

# %% tags=["hide-input"]
def inversion_error(alpha, dtype):
    """Relative error of the old states one column computes back, every alpha = `alpha`."""
    column = make_stack(1, alpha=alpha, dtype=dtype)[0]
    old = [c.astype(dtype) for c in OLD]
    cs = column(Variable(X.astype(dtype)), *[Variable(c) for c in old])
    loss_of(cs).backward()
    back = cs[0].creator.reconstructed
    return max(np.abs(r.astype(np.float64) - c).max() for r, c in zip(back, old)) / max(np.abs(c).max() for c in old)


def drift(n, alpha, dtype):
    columns, x0 = make_stack(n, alpha=alpha, dtype=dtype), X.astype(dtype)
    plain, _ = gradients(columns, "plain", x0)
    chained, first = gradients(columns, "chained", x0)
    assert not any(c.any() for c in first.reconstructed)  # chained: the zeros come back exactly
    one, first = gradients(columns, "one Function", x0)
    return {"chained: gradients": relative_difference(chained, plain),
            "one Function: gradients": relative_difference(one, plain),
            "one Function: first states": max(np.abs(c).max() for c in first.reconstructed)}


DTYPES = [np.float64, np.float32]
ALPHA_SWEEP = [0.5, 0.1, 0.01, 0.001]
INVERSION = {(a, dtype): inversion_error(a, dtype) for a in ALPHA_SWEEP for dtype in DTYPES}
INVERSION_BOUNDS = {0.5: (1e-14, 1e-6), 0.1: (1e-12, 1e-4), 0.01: (1e-9, 1.0), 0.001: (1e-5, 1e4)}
DRIFT_COLUMNS, DRIFT_ALPHAS = [1, 2, 4, 8, 16], [0.5, 0.25]
DRIFT = {(dtype, a, n): drift(n, a, dtype) for dtype in DTYPES for a in DRIFT_ALPHAS for n in DRIFT_COLUMNS}
# Powers of ten for N = 2, 4, 8, 16 (N = 1: exactly 0) that the errors stay below on every CPU setting we tried,
# by a factor of 3 or more: chained gradients, one Function's gradients, one Function's first states.
DRIFT_BOUNDS = {(np.float64, 0.5): ([-14] * 4, [-14, -13, -12, -9], [-14, -12, -10, -6]),
                (np.float64, 0.25): ([-14] * 4, [-13, -12, -9, -3], [-12, -10, -6, 1]),
                (np.float32, 0.5): ([-5] * 4, [-6, -5, -3, -1], [-5, -4, -1, 2]),
                (np.float32, 0.25): ([-5] * 4, [-5, -3, 0, 0], [-4, -2, 2, 7])}
WHAT = ["chained: gradients", "one Function: gradients", "one Function: first states"]
print(f"{'one column, old states back':30}alpha =" + "".join(f"{a:>8}" for a in ALPHA_SWEEP))
for k, dtype in enumerate(DTYPES):
    print(f"{dtype.__name__:>37}" +
          "".join(f"{below(INVERSION[a, dtype], INVERSION_BOUNDS[a][k]):>8}" for a in ALPHA_SWEEP))
print(f"\n{'one Function':19}{'gradients against the plain run':^40}   {'first column computed back':^40}".rstrip())
print(f"{'N =':>19}" + "".join(f"{n:>8}" for n in DRIFT_COLUMNS) + "   " + "".join(f"{n:>8}" for n in DRIFT_COLUMNS))
for dtype in DTYPES:
    for a in DRIFT_ALPHAS:
        cells = {what: [below(DRIFT[dtype, a, n][what], 10.0 ** k if n > 1 else 0)
                        for n, k in zip(DRIFT_COLUMNS, [0] + exponents)]
                 for what, exponents in zip(WHAT, DRIFT_BOUNDS[dtype, a])}
        print(f"{dtype.__name__}, alpha {a:<4}" + "".join(f"{c:>8}" for c in cells[WHAT[1]]) + "   "
              + "".join(f"{c:>8}" for c in cells[WHAT[2]]))
print("chained columns, every N: gradients",
      ", ".join(f"{dtype.__name__} < 1e{DRIFT_BOUNDS[dtype, 0.5][0][0]}" for dtype in DTYPES))

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.3))
for dtype, marker in [(np.float64, "o-"), (np.float32, "s-")]:
    left.plot(ALPHA_SWEEP, [INVERSION[a, dtype] for a in ALPHA_SWEEP], marker, label=dtype.__name__)
left.plot(ALPHA_SWEEP, [1e-16 * (0.5 / a) ** L for a in ALPHA_SWEEP], "k:", label=r"$\propto 1/\alpha^4$")
left.set(xscale="log", yscale="log", xlabel="alpha (every level)", title="one column: old states back")
left.invert_xaxis()
left.legend(fontsize=9)
shown = DRIFT_COLUMNS[1:]  # with one column every error is exactly 0
for dtype, marker in [(np.float64, "o-"), (np.float32, "s-")]:
    for a, colour in zip(DRIFT_ALPHAS, ["C0", "C1"]):
        right.plot(shown, [DRIFT[dtype, a, n]["one Function: gradients"] for n in shown], marker, color=colour,
                   label=f"{dtype.__name__}, alpha = {a}")
right.set(yscale="log", xlabel="columns N", title="one Function: gradients vs plain")
right.set_xscale("log", base=2)
right.set_xticks(shown, [str(n) for n in shown])
right.legend(fontsize=8, loc="center left", bbox_to_anchor=(0.0, 0.4))
left.set_ylabel("relative error")
fig.tight_layout()
plt.show()

# %% [markdown]
# Left: once $\alpha$ is small, each tenfold decrease multiplies the error
# by about $10^4 = 10^L$. At RevCol's floor, $\alpha = 10^{-3}$, float64
# keeps about six digits of the old states and float32 none: the floor
# prevents a division by zero, not this, and nothing raises.
#
# Right: one Function's error grows geometrically with $N$, about 2 to 3
# times a column at $\alpha = 0.5$ and 5 times at $0.25$ (the first column's
# states, in the table, 3 and 10 times). Float64 at $\alpha = 0.5$ keeps
# about ten digits through 16 columns; float32 at $0.25$ is off by percents
# of the largest gradient from 8 columns on. Chained columns do not drift.
# So flat memory and exact inversions cannot both be had: at RevCol's 4 to
# 16 columns the trade depends on $\alpha$ and the float type, and the
# first-column probe is the cheap way to watch it. (The plots show this
# machine's values; the tables, bounds that hold on every CPU.)
#
# ## Pitfalls
#
# Shown in the collapsed cell below and tested in `tests/test_step47.py`:
# **bad input** is refused before anything runs (an $\alpha$ of exactly 0,
# mismatched numbers of levels, $\alpha$'s and states, an $\alpha$ that is
# not a `Parameter`, a level that changes its state's shape); **a level
# that hides its weights** (`lambda below, above: level(below, above)`) is
# refused in backward rather than left without gradients; **backward
# twice** raises PyTorch's error.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)  # arrays this small gain nothing from threads


def revcol_clamp_abs(data, value):
    """RevCol's SubNet._clamp_abs, as in its models/revcol.py."""
    with torch.no_grad():
        sign = data.sign()
        data.abs_().clamp_(value)
        data *= sign


data = torch.tensor([0.5, 2e-4, -2e-4, 0.0], dtype=torch.float64)
revcol_clamp_abs(data, 1e-3)
print("RevCol's clamp of [0.5, 2e-4, -2e-4, 0]:", show(data.numpy()))

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
# A collapsed cell writes the columns in `torch` (float64): a plain column,
# and RevCol's `ReverseFunction` ported to any number of levels. It checks
# one column with every gradient, and one difference: the port's weights
# and $\alpha$'s are not inputs of its node, so `torch.autograd.grad`
# cannot return their gradients (its backward fills their `.grad`). Below,
# three columns run the three ways here, plainly and ported there.

# %% tags=["hide-cell"]
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

twin_column = TorchColumn(stack[1])
x_t = torch.tensor(X, requires_grad=True)
loss_t = torch_loss(twin_column.reverse(x_t, [torch.tensor(c) for c in OLD]))
params_t = twin_column.ordered()
grads_t = torch.autograd.grad(loss_t, [x_t, *params_t], allow_unused=True)
print(f"the port: torch.autograd.grad returns {sum(g is not None for g in grads_t[1:])} of {len(params_t)} weights' "
      f"and alphas' gradients, yet fills every .grad: {all(p.grad is not None for p in params_t)}")
column.reversible = True
grads = tinypytorch.autograd.grad(loss_of(column(Variable(X), *[Variable(c) for c in OLD])), list(column.params()))
for g, p_t in zip(grads, params_t, strict=True):
    assert_close(g.data, p_t.grad.numpy(), "autograd.grad")
print(f"tinypytorch's autograd.grad returns all {len(grads)}, equal to the port's .grad")


def torch_stack(columns, torch_way):
    """The last column's states and [x's gradient] + every parameter's, in torch, the first column from zeros."""
    twins = [TorchColumn(column) for column in columns]
    x_t = torch.tensor(X, requires_grad=True)
    cs_t = [torch.zeros(ROWS, d, dtype=torch.float64) for d in WIDTHS]
    for twin_column in twins:
        cs_t = getattr(twin_column, torch_way)(x_t, cs_t)
    torch_loss(cs_t).backward()
    return [c.detach().numpy() for c in cs_t], [x_t.grad.numpy()] + [p.grad.numpy() for t in twins for p in t.ordered()]


# %%
for torch_way in ("plain", "reverse"):
    states_t, grads_t = torch_stack(stack, torch_way)
    for way in WAYS:
        cs, _ = run(stack, Variable(X), way)
        for c, c_t in zip(cs, states_t, strict=True):
            assert_close(c.data, c_t, f"{way}: states")
        for g, g_t in zip(gradients(stack, way)[0], grads_t, strict=True):
            assert_close(g, g_t, f"{way}: gradients, against torch {torch_way}")
print(f"3 columns, states and {len(grads_t)} gradient arrays, every way: equal to torch's")
print("PyTorch check passed: RevColumn and ReversibleColumns states and gradients equal torch's"
      " and the port's")

# %% [markdown]
# ## Recap
#
# - A RevCol level computes $c_i' = l_i(c_{i-1}', c_{i+1}) + \alpha_i c_i$,
#   bottom up; the column is undone top down, $c_i = (c_i' -
#   l_i(\cdot))/\alpha_i$, evaluating each $l_i$ again, never inverting it.
# - `RevColumn` runs a column as one node (`RevColumnFunction`) that saves
#   $x$ and the new states; backward recomputes, backpropagates and inverts
#   one level at a time, replaying one generator state per level.
# - `clamp_alpha` keeps $|\alpha| \ge 10^{-3}$ with its sign, and refuses an
#   $\alpha$ of exactly 0, which RevCol's clamp lets through.
# - `ReversibleColumns` runs all the columns as one node: saved memory no
#   longer grows with their number, but each inversion starts from the
#   errors of the next, so the error grows geometrically with $N$, and like
#   $1/\alpha^L$ as $\alpha$ shrinks.
#
# ## Exercises
#
# **1. Learn $\alpha$.** Make targets: a column's outputs with its
# $\alpha$'s replaced by random ones in $\pm[0.2, 1]$, five top-level
# channels set to 0. Train only the $\alpha$'s of the column, from 0.5, with `SGD`
# (rate 0.1, 200 steps) on the squared error, reversibly. Check that they
# reach the targets, except the five, which `clamp_alpha` holds at
# $\pm 10^{-3}$.

# %% tags=["hide-cell"]
rng = np.random.default_rng(5)
TARGET_ALPHAS = [rng.uniform(0.2, 1.0, (1, d)) * rng.choice([-1.0, 1.0], (1, d)) for d in WIDTHS]
TARGET_ALPHAS[3][0, :5] = 0.0


def make_targets(column, alphas):
    """The new states of `column` with its alphas replaced by `alphas` (zeros allowed), from X and OLD."""
    with no_grad():
        new = []
        for i, level in enumerate(column.levels):
            above = Variable(OLD[i + 1]) if i + 1 < L else None
            new.append(level(Variable(X) if i == 0 else new[-1], above) + Variable(alphas[i]) * Variable(OLD[i]))
    return [c.data for c in new]


def train_alphas(column, targets, steps=200, lr=0.1):
    """SGD on the column's alphas alone; the loss: sum of squared errors against `targets`, over ROWS."""
    optimizer = SGD(column.alphas, lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        new = column(Variable(X), *[Variable(c) for c in OLD])  # clamps its alphas, then runs reversibly
        loss = sum(((c - t) ** 2).sum() for c, t in zip(new, targets)) / ROWS
        loss.backward()
        optimizer.step()
    for alpha in column.alphas:
        clamp_alpha(alpha)  # as the next forward pass would
    return loss.data


learner = make_stack(1)[0]
final_loss = train_alphas(learner, make_targets(learner, TARGET_ALPHAS))
zeros_at = TARGET_ALPHAS[3] == 0
reached = max(np.abs(a.data - t)[t != 0].max() for a, t in zip(learner.alphas, TARGET_ALPHAS))
print("largest |alpha - target| where the target is not 0:", below(reached, 1e-3))
print("alphas whose target is 0:", show(learner.alphas[3].data[zeros_at]))

# %% [markdown]
# **2. Invert a whole stack.** Write `invert_stack(columns, x, states)`,
# which computes back, under `no_grad`, the states every column received
# from the last column's states. Recover the random start of 4 columns.

# %% tags=["hide-cell"]
def invert_column(column, x, new):
    """The states `column` received, from x and the states it returned: top level first."""
    old = [None] * len(new)
    with no_grad():
        for i in reversed(range(len(new))):
            below_state = Variable(x if i == 0 else new[i - 1])
            above = None if i + 1 == len(new) else Variable(old[i + 1])
            old[i] = (new[i] - column.levels[i](below_state, above).data) / column.alphas[i].data
    return old


def invert_stack(columns, x, states):
    """[the states each column received, first column's first], from the last column's states."""
    received = []
    for column in reversed(columns):
        states = invert_column(column, x, states)
        received.insert(0, states)
    return received


columns = make_stack(4, seed=4)
start = [np.random.default_rng(7).standard_normal((ROWS, d)) for d in WIDTHS]
with no_grad():
    cs = [Variable(c) for c in start]
    for column in columns:
        cs = column(Variable(X), *cs)
back = invert_stack(columns, X, [c.data for c in cs])
print("4 columns, max |states computed back - random start|",
      below(max(np.abs(b - s).max() for b, s in zip(back[0], start)), 1e-12))

# %% [markdown]
# **3. Where float32 gives up.** Write `gradient_error(alpha)`: how far the
# gradients of a float32 reversible column (every $\alpha$ = `alpha`) are
# from the same column's run plainly in float64, relative to the largest.
# Find the first $\alpha$ of 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005 where
# more than 1% is lost.

# %% tags=["hide-cell"]
ALPHA_GRID = [0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005]




def column_gradients(alpha, dtype, reversible):
    """Gradients of x, of the old states and of every parameter, one column, every alpha = `alpha`."""
    column = make_stack(1, alpha=alpha, dtype=dtype)[0]
    column.reversible = reversible
    x, old = Variable(X.astype(dtype)), [Variable(c.astype(dtype)) for c in OLD]
    loss_of(column(x, *old)).backward()
    return [x.grad.data] + [c.grad.data for c in old] + [p.grad.data for p in column.params()]


def gradient_error(alpha, dtype=np.float32):
    ours = [g.astype(np.float64) for g in column_gradients(alpha, dtype, True)]
    return relative_difference(ours, column_gradients(alpha, np.float64, False))


def first_alpha_losing(fraction=0.01):
    return next(a for a in ALPHA_GRID if gradient_error(a) > fraction)


ALPHA_LOST = first_alpha_losing()
previous = ALPHA_GRID[ALPHA_GRID.index(ALPHA_LOST) - 1]
print(f"float32 gradients: error {below(gradient_error(previous), 1e-2)} at alpha = {previous}, "
      f"> 1e-2 from alpha = {ALPHA_LOST}")
