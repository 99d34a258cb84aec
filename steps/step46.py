# %% [markdown]
# # Step 46: Reversible residual blocks
#
# Checkpointing (steps 42–45) keeps the input of each segment and recomputes
# the rest during backward: at best about $2\sqrt N$ activations for $N$
# layers. A **reversible** block needs even less, because its input can be
# computed back from its output. A stack of such blocks keeps only its final
# output; backward recovers each block's input from its output, from the top
# down. The memory for activations is then the same at any depth.
#
# RevNet (Gomez, Ren, Urtasun and Grosse, "The Reversible Residual Network",
# 2017) builds such a block from two ordinary residual functions. This step
# reads the package's version (`tinypytorch.reversible`), checks its
# gradients, and measures the two prices: compute, and exactness.

# %%
import gc
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, autograd, enable_grad, no_grad, random
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear
from tinypytorch.recomputation import replaying
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential, ReversibleSequentialFunction
from tinypytorch.utils.checkpoint import checkpoint_sequential
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ", suppress_small=True)


def below(error, bound):
    """'< 1e-14', after checking it. Rounding errors differ from one CPU to another; a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## The additive coupling
#
# Split the features of $x$ into two halves, $x = (x_1, x_2)$, and take two
# functions $f$ and $g$ that map a half to a half. RevNet's block is two
# residual steps, each adding to one half something computed from the other:
#
# $$
# y_1 = x_1 + f(x_2), \qquad y_2 = x_2 + g(y_1).
# $$
#
# Read from the bottom up, they undo themselves:
#
# $$
# x_2 = y_2 - g(y_1), \qquad x_1 = y_1 - f(x_2).
# $$
#
# $y_1$ is part of the output, so $g(y_1)$ can be computed again, which
# gives $x_2$; then $f(x_2)$ can be computed again, which gives $x_1$.
# Neither $f$ nor $g$ is ever inverted, only *evaluated* again, so they can
# be any layers that keep the shape of a half.

# %% tags=["hide-input"]
def coupling_picture():
    """RevNet's coupling: forward on the left, its inverse on the right."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    box = dict(boxstyle="round,pad=0.4", facecolor="#dbe9f6", edgecolor="#1f77b4")
    node = dict(boxstyle="circle,pad=0.15", facecolor="white", edgecolor="black")
    arrow = dict(arrowstyle="->", color="black", lw=1.2)
    bend = dict(arrow, connectionstyle="angle,angleA=0,angleB=90")

    def panel(ax, title, inputs, outputs, steps, sign, middle):
        """steps: (name, lane it reads, lane it adds into), twice; lanes at heights 3 (top) and 1 (bottom)."""
        ax.set(xlim=(0, 10), ylim=(0, 4.2), title=title)
        ax.axis("off")
        for y, label_in, label_out in ((3, inputs[0], outputs[0]), (1, inputs[1], outputs[1])):
            ax.text(0.4, y, label_in, ha="center", va="center", fontsize=13)
            ax.text(9.6, y, label_out, ha="center", va="center", fontsize=13)
            stops = [0.8] + [x_add for (_, _, lane), x_add in zip(steps, (4, 7)) if lane == y] + [9.2]
            for a, b in zip(stops, stops[1:]):
                ax.annotate("", xy=(b - (0.25 if b < 9 else 0), y), xytext=(a + (0.25 if a > 1 else 0), y),
                            arrowprops=arrow)
        for (name, read_y, add_y), x_box, x_add in zip(steps, (2.6, 5.6), (4, 7)):
            ax.text(x_box, 2, name, ha="center", va="center", fontsize=12, bbox=box)
            ax.annotate("", xy=(x_box, 2 + (-0.35 if read_y < 2 else 0.35)), xytext=(x_box, read_y),
                        arrowprops=arrow)
            ax.plot([x_box], [read_y], "ko", markersize=4)
            ax.annotate("", xy=(x_add, add_y + (-0.25 if add_y > 2 else 0.25)), xytext=(x_box + 0.35, 2),
                        arrowprops=bend)
            ax.text(x_add, add_y, sign, ha="center", va="center", fontsize=12, bbox=node)
        for x, y, label in middle:
            ax.text(x, y + 0.35, label, ha="center", va="bottom", fontsize=10, color="#555555")

    panel(axes[0], "forward: y1 = x1 + f(x2), y2 = x2 + g(y1)", ("x1", "x2"), ("y1", "y2"),
          [("f", 1, 3), ("g", 3, 1)], "+", [(5.0, 3, "y1")])
    panel(axes[1], "inverse: x2 = y2 − g(y1), x1 = y1 − f(x2)", ("y1", "y2"), ("x1", "x2"),
          [("g", 3, 1), ("f", 1, 3)], "−", [(5.0, 1, "x2")])
    fig.tight_layout()
    plt.show()


coupling_picture()

# %% [markdown]
# On the left, $f$ reads $x_2$ and adds into the top lane, then $g$ reads
# the new $y_1$ and adds into the bottom lane. The inverse on the right runs
# the same two boxes in the opposite order, subtracting. Here is the
# package's block:

# %%
show_code(AdditiveCoupling.forward, AdditiveCoupling.inverse, step=46)

# %% [markdown]
# `halves` splits the last axis. `apply` runs $f$ or $g$, checks that the
# shape is kept, and records (`states`) or restores (`replay`) the random
# generator's state, for dropout (below). For $f$ and $g$ we use a linear
# layer and $\tanh$, with an optional dropout:

# %%
class LinearTanh(Layer):
    """dropout(tanh(x W^T + b)) on one half of the features: f or g of a coupling."""

    def __init__(self, size, rng, p=0.0):
        super().__init__()
        self.linear = Linear(size, size, rng=rng)
        self.p = p

    def forward(self, x):
        return F.dropout(tinypytorch.tanh(self.linear(x)), self.p, self.training)


def make_stack(depth, width, p=0.0, seed=0, dtype=np.float64):
    """ReversibleSequential of `depth` couplings on `width` features; f and g are LinearTanh layers."""
    rng = np.random.default_rng(seed)
    blocks = [AdditiveCoupling(LinearTanh(width // 2, rng, p), LinearTanh(width // 2, rng, p))
              for _ in range(depth)]
    net = ReversibleSequential(*blocks)
    for param in net.params():
        param.data = param.data.astype(dtype)
    return net


def run_plainly(net, x):
    """The same blocks one after another, each recorded in the graph as usual."""
    for block in net.blocks:
        x = block(x)
    return x


block = make_stack(1, 8).blocks[0]
x = Variable(np.random.default_rng(1).standard_normal((3, 8)))
y = block(x)
print("x[0]          =", show(x.data[0]))
print("inverse(y)[0] =", show(block.inverse(y).data[0]))
print("max |inverse(y) - x|", below(np.abs(block.inverse(y).data - x.data).max(), 1e-14))

# %% [markdown]
# The inverse gives $x$ back up to rounding: $x_1 + f(x_2)$ was rounded, and
# subtracting $f(x_2)$ does not undo that rounding exactly.
#
# ## One node for the whole stack
#
# Being invertible is not enough. Run with ordinary operations, a block
# records a graph, and the graph saves its intermediate values anyway. So
# `ReversibleSequential` runs the whole stack as one `Function`,
# `ReversibleSequentialFunction`, as step 42's reentrant checkpoint runs a
# segment. Its inputs are $x$ and every parameter of every block, so the
# parameters get their gradients through the graph like any input.

# %%
show_code(ReversibleSequentialFunction.forward, step=46)

# %% [markdown]
# The blocks run under `no_grad`, so nothing inside them is saved; the
# generator's state is noted before each $f$ and $g$. The node saves one
# array: the stack's output. Backward walks the blocks from the last:

# %%
show_code(ReversibleSequentialFunction.backward, ReversibleSequentialFunction.block_backward, step=46)

# %% [markdown]
# For each block, with $y$ its output and $\bar y$ the gradient that arrived:
#
# 1. **Reconstruct** the input, $x = \text{inverse}(y)$, under `no_grad`.
# 2. **Recompute** the block from a fresh leaf holding $x$, recording the
#    graph a plain run would have recorded.
# 3. **Check** that this small graph reads, of what requires grad, only the
#    leaf and the block's parameters (`_refuse_unknown_inputs`); any other
#    weight would silently get no gradient.
# 4. **Backpropagate** $\bar y$ through it (`_inner_grad`: the public
#    `autograd.grad`, a backward pass inside the running one):
#    $\bar x$ becomes $\bar y$ of the block below. Its gradients go on to
#    the running pass through the node's edges, so the running pass
#    *gathers* (`current_pass().gathering()`, the door of step 42): the inner
#    pass leaves the parameters' hooks to it, and they run once, on the
#    whole gradient.
# 5. **Send on** the block's parameter gradients at once
#    (`current_pass().send`), then drop the block's graph.
#
# Backward holds one block's graph at a time, whatever the depth. The loop
# runs in `fork_rng`; the recomputations run in `replaying` (step 45), with
# $f$ and $g$ each drawing as from its noted state (`draw_as`; all three
# from `tinypytorch.recomputation`), so `BatchNorm1d` does not count a
# batch twice. The gradients must equal a
# plain run's up to the error of the reconstruction:

# %%
WIDTH = 8
X = np.random.default_rng(1).standard_normal((5, WIDTH))
LOSS_WEIGHTS = np.random.default_rng(2).standard_normal((5, WIDTH))


def gradients(net, reversible, x0=X):
    """Loss sum(y * w); returns (output, [x.grad] + every parameter's grad)."""
    net.cleargrads()
    x = Variable(x0.copy())
    y = net(x) if reversible else run_plainly(net, x)
    (y * LOSS_WEIGHTS.astype(y.dtype)).sum().backward()
    return y.data, [x.grad.data] + [p.grad.data for p in net.params()]


def relative_difference(ours, reference):
    """max |ours - reference| over a list of arrays, relative to the largest |reference|."""
    largest = max(np.abs(r.astype(np.float64)).max() for r in reference)
    return max(np.abs(a.astype(np.float64) - r).max() for a, r in zip(ours, reference)) / largest


net = make_stack(6, WIDTH)
y_rev, rev = gradients(net, True)
y_plain, plain = gradients(net, False)
print("outputs bitwise equal:", np.array_equal(y_rev, y_plain))
largest = relative_difference(rev, plain)
print(f"{len(plain)} gradient arrays; largest difference, relative:", below(largest, 1e-14))

# %% [markdown]
# ## Randomness: dropout inside $f$ and $g$
#
# With dropout in $f$ or $g$, the inverse must subtract exactly the
# $f(x_2)$ and $g(y_1)$ that forward added, so it must draw the same masks;
# so must the recomputation. That is what the noted states are for. Without
# the replay the inverse computes a wrong input:

# %%
block = make_stack(1, WIDTH, p=0.5).blocks[0]
tinypytorch.manual_seed(0)
states = []
y = block.forward(Variable(X), states)  # notes the generator's state before f and before g
print("inverse with new masks:      max |error| =", f"{np.abs(block.inverse(y).data - X).max():.2f}")
replayed = block.inverse(y, replay=states)
print("inverse replaying the masks: max |error|", below(np.abs(replayed.data - X).max(), 1e-14))


def seeded_run(net, reversible):
    tinypytorch.manual_seed(0)
    _, grads = gradients(net, reversible)
    return grads, random.default_generator().random()


(rev, rev_next), (plain, plain_next) = (seeded_run(make_stack(6, WIDTH, p=0.2), r) for r in (True, False))
largest = relative_difference(rev, plain)
print("6 blocks with dropout, gradients against the plain run:", below(largest, 1e-14))
print(f"next draw after backward: reversible {rev_next:.6f}, plain {plain_next:.6f}")

# %% [markdown]
# The next draw after backward is the plain run's, so the next training
# step draws the same masks too. MemCNN, a PyTorch library of reversible
# blocks, got this wrong at first (its issues #12 and #44).
#
# ## Memory against depth
#
# A saved-tensor hook (step 38) that counts what is packed shows what the
# stack keeps for backward:

# %%
def saved_by(run):
    """(number of tensors, bytes) packed for backward while `run()` executes."""
    packed = []
    with saved_tensors_hooks(lambda v: packed.append(v.data.nbytes) or v.data, lambda data: data):
        run()
    return len(packed), sum(packed)


for depth in (1, 4, 16, 64):
    net = make_stack(depth, WIDTH)
    print(f"depth {depth:2}: plain saves {saved_by(lambda: run_plainly(net, Variable(X)))[0]:3} tensors, "
          f"reversible {saved_by(lambda: net(Variable(X)))[0]}")

# %% [markdown]
# A plain block saves six tensors (each linear layer's input and weight,
# each $\tanh$'s output); the reversible stack saves one, its output.
#
# Saved tensors are not the whole story: backward also holds gradients and
# the recomputed graph. The next table runs the same stack three ways
# (plainly, with `checkpoint_sequential` in $\operatorname{round}(\sqrt N)$
# segments as in step 44, and reversibly) on a batch of 2,048 rows of 16
# features, and measures the peak of NumPy memory with `tracemalloc`,
# sampled during backward, in units of one activation ($2048 \times 16$
# float64, 256 KiB). It also counts the calls of $f$ and $g$.

# %% tags=["hide-cell"]
MEM_WIDTH, MEM_BATCH = 16, 2048
ACTIVATION = MEM_BATCH * MEM_WIDTH * 8
MEM_X = np.random.default_rng(3).standard_normal((MEM_BATCH, MEM_WIDTH))


def numpy_bytes():
    """Bytes of NumPy array data traced by tracemalloc and not yet freed."""
    return sum(t.size for t in tracemalloc.take_snapshot().traces if t.domain == np.lib.tracemalloc_domain)


class Probe(Layer):
    """Wraps f or g: counts its calls and samples memory when backward reaches its output."""

    run = None  # the measurement in progress: a Run

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        y = self.layer(x)
        Probe.run.calls += 1
        if y.requires_grad:
            y.register_hook(Probe.run.reached)
        return y


class Run:
    """One measurement: f and g calls, and the largest NumPy memory sampled (8 samples during backward)."""

    def __init__(self, depth):
        self.calls, self.reached_count, self.every = 0, 0, max(1, 2 * depth // 8)
        self.base = numpy_bytes()
        self.peak = 0

    def sample(self):
        self.peak = max(self.peak, numpy_bytes() - self.base)

    def reached(self, grad):
        if self.reached_count % self.every == 0:
            self.sample()
        self.reached_count += 1


def probed_stack(depth):
    net = make_stack(depth, MEM_WIDTH)
    for block in net.blocks:
        block.f, block.g = Probe(block.f), Probe(block.g)
    return net


WAYS = ["plain", "sqrt(N)", "reversible"]


def measure(net, way):
    """(tensors saved, activations saved, peak in activations, f and g calls) of one forward and backward."""
    depth = len(net.blocks)
    x = Variable(MEM_X, requires_grad=False)
    if way == "reversible":
        run = lambda: net(x)  # noqa: E731
    else:
        segments = 1 if way == "plain" else round(math.sqrt(depth))
        run = lambda: checkpoint_sequential(net.blocks, segments, x, use_reentrant=False)  # noqa: E731
    gc.collect()
    gc.disable()  # what the graph frees, it frees by reference counting alone
    tracemalloc.start()
    try:
        Probe.run = measurement = Run(depth)
        box = []
        count, saved = saved_by(lambda: box.append(run()))
        loss = (box.pop() ** 2).sum()
        measurement.sample()
        loss.backward()
    finally:
        Probe.run = None
        tracemalloc.stop()
        gc.enable()
    net.cleargrads()
    return count, saved / ACTIVATION, measurement.peak / ACTIVATION, measurement.calls


DEPTHS = [8, 16, 32, 64, 128]
memory = {}
for depth in DEPTHS:
    net = probed_stack(depth)
    for way in WAYS:
        memory[depth, way] = measure(net, way)

# %% tags=["hide-input"]
print(f"{'':>5} {'peak, in activations':^33}  {'calls of f and g':^24}")
print(f"{'N':>5} " + "".join(f"{way:>11}" for way in WAYS) + "  " + "".join(f"{way:>12}" for way in WAYS[::2]))
for depth in DEPTHS:
    print(f"{depth:5} " + "".join(f"{memory[depth, way][2]:11.2f}" for way in WAYS) + "  "
          + "".join(f"{memory[depth, way][3]:12}" for way in WAYS[::2]))
print(f"reversible peak, depth 128 / depth 8: {memory[128, 'reversible'][2] / memory[8, 'reversible'][2]:.3f}")

fig, axis = plt.subplots(figsize=(8, 3.5))
for way, style in zip(WAYS, ("o-", "s-", "^-")):
    axis.plot(DEPTHS, [memory[d, way][2] for d in DEPTHS], style, label=way)
axis.set_xscale("log", base=2)
axis.set_yscale("log", base=2)
axis.set_xticks(DEPTHS, [str(d) for d in DEPTHS])
axis.set(xlabel="depth N (blocks)", ylabel="peak (activations)", title="peak memory of forward + backward")
axis.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The plain run's peak grows by 2.5 activations a block, the √N schedule's
# like $\sqrt N$, and the reversible peak stays at 7.5 activations, one
# block's worth (the saved output, its gradient, the reconstructed input,
# the recomputed graph), plus the parameters' gradients: 6% more at depth
# 128 than at 8.
#
# The price is compute: a reversible block runs $f$ and $g$ three times
# (forward, inverse, recomputation), $6N$ calls where the plain run makes
# $2N$. Exercise 1 brings that down to $4N$.
#
# ## Drift: how exact is the inverse?
#
# Each inverse rounds, and it starts from an output that already carries
# the errors of the blocks above. If the output is off by $\varepsilon$,
# then $|\hat x_2 - x_2| \le (1 + \operatorname{Lip}(g))\,\varepsilon$, and
# each block can multiply the error by up to about
# $(1 + \operatorname{Lip}(f))(1 + \operatorname{Lip}(g))$, where
# $\operatorname{Lip}$ is the most a function can stretch a difference (at
# most $\lVert W\rVert_2$ for $\tanh(Wx + b)$). Errors partly cancel, so the
# growth is slower than this bound, but it is geometric in the end.
#
# The table measures stacks of 32 features on a batch of 16: the
# **reconstruction** error ($\max|\hat x - x| / \max|x|$ after inverting
# every block) and the **gradient** error (against the plain run in the
# same precision). Rounding differs by up to a factor of 3 between CPUs, so
# it prints a power of ten that each error stays below, and checks it.

# %% tags=["hide-cell"]
DRIFT_WIDTH = 32
DRIFT_X = np.random.default_rng(4).standard_normal((16, DRIFT_WIDTH))
DRIFT_WEIGHTS = np.random.default_rng(5).standard_normal((16, DRIFT_WIDTH))


def drift(depth, dtype, scale=1.0):
    """(reconstruction error, gradient error) of a stack of `depth` blocks in `dtype`; weights times `scale`."""
    net = make_stack(depth, DRIFT_WIDTH, dtype=dtype)
    for block in net.blocks:
        for half in (block.f, block.g):
            half.linear.weight.data *= dtype(scale)
    x0 = DRIFT_X.astype(dtype)
    with no_grad():
        y = run_plainly(net, Variable(x0))
        for block in reversed(net.blocks):
            y = block.inverse(y)
    reconstruction = np.abs(y.data - x0).max() / np.abs(x0).max()
    grads = {}
    for reversible in (True, False):
        net.cleargrads()
        x = Variable(x0.copy())
        out = net(x) if reversible else run_plainly(net, x)
        (out * DRIFT_WEIGHTS.astype(dtype)).sum().backward()
        grads[reversible] = [x.grad.data] + [p.grad.data for p in net.params()]
    return reconstruction, relative_difference(grads[True], grads[False])


DRIFT_DEPTHS = [1, 4, 16, 64, 256, 1024]
errors = {(d, dtype): drift(d, dtype) for d in DRIFT_DEPTHS for dtype in (np.float32, np.float64)}
doubled = {d: drift(d, np.float64, scale=2.0) for d in DRIFT_DEPTHS}
BOUNDS = {1: (1e-6, 1e-6, 1e-15, 1e-15), 4: (1e-6, 1e-6, 1e-15, 1e-14), 16: (1e-5, 1e-5, 1e-14, 1e-14),
          64: (1e-4, 1e-4, 1e-13, 1e-13), 256: (1e-2, 1e-2, 1e-11, 1e-11), 1024: (1e0, 1e0, 1e-8, 1e-9)}

# %% tags=["hide-input"]
print(f"{'depth':>5}  {'float32: reconstruction':>24} {'gradient':>9}  {'float64: reconstruction':>24} {'gradient':>9}")
for d in DRIFT_DEPTHS:
    (r32, g32), (r64, g64) = errors[d, np.float32], errors[d, np.float64]
    b = BOUNDS[d]
    print(f"{d:5}  {below(r32, b[0]):>24} {below(g32, b[1]):>9}  {below(r64, b[2]):>24} {below(g64, b[3]):>9}")
print("float32 gradient error above 1e-2 at 1024 blocks:", errors[1024, np.float32][1] > 1e-2)
print("float64 gradient error at 1024 blocks with every weight doubled, above 1e-6:", doubled[1024][1] > 1e-6)

fig, axis = plt.subplots(figsize=(8, 3.5))
for name, values, color in [("float32", [errors[d, np.float32] for d in DRIFT_DEPTHS], "C0"),
                            ("float64", [errors[d, np.float64] for d in DRIFT_DEPTHS], "C1"),
                            ("float64, weights x2", [doubled[d] for d in DRIFT_DEPTHS], "C2")]:
    axis.plot(DRIFT_DEPTHS, [r for r, _ in values], "o-", color=color, label=f"{name}, reconstruction")
    axis.plot(DRIFT_DEPTHS, [g for _, g in values], "s--", color=color, label=f"{name}, gradient")
axis.axhline(1e-2, color="grey", linestyle=":", label="1% (float32 no longer usable above)")
axis.set(xscale="log", yscale="log", xlabel="depth (blocks)", ylabel="relative error",
         title="drift of the inverse (this machine's values)")
axis.set_xscale("log", base=4)
axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
fig.tight_layout()
plt.show()

# %% [markdown]
# At one block each precision makes about one rounding error ($10^{-7}$ in
# float32, $10^{-16}$ in float64). The errors grow by about 100 over the
# first 64 blocks, then faster; float64 follows float32 about nine orders of
# magnitude lower. **Float32 is usable here up to about 256 blocks**, where
# the gradient is within 1%; at 1,024 blocks it is off by 5–15%. Doubling
# every weight (larger Lipschitz constants) makes float64 at 1,024 blocks
# lose four orders of magnitude or more. The remedies: an ordinary
# checkpoint every so many blocks (the inversion restarts from stored
# values), or gently scaled $f$ and $g$ (normalisation, small weights).
#
# ## Pitfalls
#
# Each of these is demonstrated in the collapsed cell below and tested in
# `tests/test_step46.py`:
#
# - **Backward twice** raises PyTorch's error, since the node frees its
#   saved output; with `retain_graph=True` the gradients add up to twice.
# - **A tensor saved by the layer before.** MemCNN freed its input's storage
#   (issues #70, #39), which broke a $\tanh$ before it or a residual around
#   it. The package frees nothing: the graph decides what lives.
# - **`BatchNorm1d` in $f$ and $g$** counts each batch once (step 45), where
#   a naive port updates its statistics in forward, inverse and
#   recomputation, three times.
# - **Bad input:** $f$ or $g$ changing a half's shape, an odd number of
#   features, a block without `inverse`, an empty stack.
# - **A function that hides its weights** (`lambda h: tanh(linear(h))`)
#   trains plainly, but the stack could not give its weight a gradient, so
#   backward refuses it rather than skip it silently.

# %% tags=["hide-cell"]
class NormTanh(Layer):
    """tanh(BatchNorm1d(x W^T + b)): f or g with batch normalisation."""

    def __init__(self, size, rng):
        super().__init__()
        self.linear, self.norm = Linear(size, size, rng=rng), BatchNorm1d(size)

    def forward(self, x):
        return tinypytorch.tanh(self.norm(self.linear(x)))


def norm_stack(depth=3, seed=7):
    rng = np.random.default_rng(seed)
    return ReversibleSequential(*[AdditiveCoupling(NormTanh(WIDTH // 2, rng), NormTanh(WIDTH // 2, rng))
                                  for _ in range(depth)])


net = make_stack(3, WIDTH)
x = Variable(X.copy())
loss = (net(x) * LOSS_WEIGHTS).sum()
loss.backward(retain_graph=True)
first = x.grad.data.copy()
loss.backward()
print("backward twice with retain_graph: x.grad == 2 * first:", np.array_equal(x.grad.data, 2 * first))
try:
    loss.backward()
except RuntimeError as error:
    print("backward a third time: RuntimeError:", str(error).split(". ")[0])

linear = Linear(WIDTH, WIDTH, rng=np.random.default_rng(6))
results = []
for reversible in (True, False):
    net.cleargrads()
    linear.cleargrads()
    x = Variable(X.copy())
    h = tinypytorch.tanh(linear(x))  # tanh saves h; the stack reads h; a residual adds h again
    ((h + (net(h) if reversible else run_plainly(net, h))) * LOSS_WEIGHTS).sum().backward()
    results.append([x.grad.data, linear.weight.grad.data] + [p.grad.data for p in net.params()])
print("tanh before the stack and a residual around it, gradients against the plain run:",
      below(relative_difference(*results), 1e-14))

nets = {reversible: norm_stack() for reversible in (True, False)}
for reversible, net in nets.items():
    gradients(net, reversible)
norms = {r: [half.norm for block in net.blocks for half in (block.f, block.g)] for r, net in nets.items()}
print("batches counted by each BatchNorm1d:", [n.num_batches_tracked for n in norms[True]],
      "| running statistics equal the plain run's:",
      all(np.array_equal(a.running_mean, b.running_mean) and np.array_equal(a.running_var, b.running_var)
          for a, b in zip(norms[True], norms[False])))

rng = np.random.default_rng(8)
attempts = [
    lambda: ReversibleSequential(AdditiveCoupling(Linear(4, 3, rng=rng), LinearTanh(4, rng)))(Variable(np.ones((2, 8)))),
    lambda: ReversibleSequential(AdditiveCoupling(LinearTanh(4, rng), LinearTanh(4, rng)))(Variable(np.ones((2, 9)))),
    lambda: ReversibleSequential(AdditiveCoupling(LinearTanh(4, rng), LinearTanh(4, rng)), Linear(8, 8, rng=rng)),
    lambda: ReversibleSequential(),
]
linear_f, linear_g = Linear(4, 4, rng=rng), Linear(4, 4, rng=rng)
hidden = AdditiveCoupling(lambda h: tinypytorch.tanh(linear_f(h)), lambda h: tinypytorch.tanh(linear_g(h)))
attempts.append(lambda: (ReversibleSequential(hidden)(Variable(X)) * LOSS_WEIGHTS).sum().backward())
for attempt in attempts:
    try:
        attempt()
    except (TypeError, ValueError, RuntimeError) as error:
        print(f"{type(error).__name__}: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# A collapsed cell writes the coupling network plainly in `torch` (float64,
# the same weights, the dropout masks of the tinypytorch run) and ports the
# algorithm as a `torch.autograd.Function` (forward under `no_grad`, only the
# output saved, backward inverting block by block).

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)  # arrays this small gain nothing from threads


class FixedMask(torch.nn.Module):
    """Dropout with masks given in advance, one per call: x * keep / (1 - p), as tinypytorch computes it."""

    def __init__(self, masks, p):
        super().__init__()
        self.masks, self.p = masks, p

    def forward(self, x):
        if self.p == 0:  # tinypytorch draws no mask then
            return x
        return x * torch.from_numpy(self.masks.pop(0).astype(np.float64)) / (1.0 - self.p)


def torch_half(half, masks):
    """f or g in torch: Linear, Tanh, then a FixedMask or a BatchNorm1d, copied from tinypytorch's layer."""
    linear = torch.nn.Linear(*half.linear.weight.shape[::-1], dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(half.linear.weight.data))
        linear.bias.copy_(torch.from_numpy(half.linear.bias.data))
    if isinstance(half, NormTanh):
        return torch.nn.Sequential(linear, torch.nn.BatchNorm1d(half.norm.num_features, dtype=torch.float64),
                                   torch.nn.Tanh())
    return torch.nn.Sequential(linear, torch.nn.Tanh(), FixedMask(masks, half.p))


class TorchCoupling(torch.nn.Module):
    def __init__(self, block, masks):
        super().__init__()
        self.f, self.g = torch_half(block.f, masks), torch_half(block.g, masks)

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=-1)
        y1 = x1 + self.f(x2)
        return torch.cat([y1, x2 + self.g(y1)], dim=-1)

    def inverse(self, y):
        y1, y2 = y.chunk(2, dim=-1)
        x2 = y2 - self.g(y1)
        return torch.cat([y1 - self.f(x2), x2], dim=-1)


class TorchReversible(torch.autograd.Function):
    """The algorithm of ReversibleSequentialFunction in PyTorch, without RNG replay: for blocks that draw nothing."""

    @staticmethod
    def forward(ctx, x, blocks, *params):
        with torch.no_grad():
            for block in blocks:
                x = block(x)
        ctx.blocks, ctx.params = blocks, params
        ctx.save_for_backward(x)  # the output, and nothing else
        return x

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        grads = {}
        for block in reversed(ctx.blocks):
            with torch.no_grad():
                x = block.inverse(y)  # reconstruct
            leaf = x.detach().requires_grad_()
            params = list(block.parameters())
            with torch.enable_grad():  # recompute, and backpropagate through the block
                gy, *g_params = torch.autograd.grad(block(leaf), [leaf, *params], gy)
            grads.update(zip(params, g_params))
            y = x
        return (gy, None, *[grads[p] for p in ctx.params])


def torch_run(net, masks, port=False):
    """(output, [x.grad] + parameter grads, blocks) of the torch twin of `net` under the loss of `gradients`."""
    blocks = torch.nn.ModuleList([TorchCoupling(block, masks) for block in net.blocks])
    x = torch.tensor(X, requires_grad=True)
    if port:
        y = TorchReversible.apply(x, blocks, *blocks.parameters())
    else:
        y = x
        for block in blocks:
            y = block(y)
    (y * torch.from_numpy(LOSS_WEIGHTS)).sum().backward()
    return y.detach().numpy(), [x.grad.numpy()] + [p.grad.numpy() for p in blocks.parameters()], blocks


def recorded_masks(net):
    """The dropout masks a plain tinypytorch run draws from seed 0: the boolean tensors Dropout saves."""
    masks = []
    tinypytorch.manual_seed(0)
    with saved_tensors_hooks(lambda v: masks.append(v.data) if v.dtype == bool else None, lambda _: None):
        run_plainly(net, Variable(X))
    return masks


def assert_close(ours, theirs, what):
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(b).max()), err_msg=what)


net = make_stack(6, WIDTH)
_, ours = gradients(net, True)
assert_close(ours, torch_run(net, [], port=True)[1], "gradients of the torch.autograd.Function port")
net = norm_stack()
gradients(net, True)
for port, expected_count in [(False, 1), (True, 3)]:  # the naive port counts a batch three times
    _, _, blocks = torch_run(net, [], port=port)
    for block, twin in zip(net.blocks, blocks):
        for half, half_t in [(block.f, twin.f), (block.g, twin.g)]:
            assert half_t[1].num_batches_tracked.item() == expected_count
            if not port:
                assert_close([half.norm.running_mean, half.norm.running_var],
                             [half_t[1].running_mean.numpy(), half_t[1].running_var.numpy()], "running statistics")
print("the torch.autograd.Function port gives the same gradients; BatchNorm statistics as torch's plain step")

# %%
net = make_stack(6, WIDTH, p=0.2)
tinypytorch.manual_seed(0)
y_ours, ours = gradients(net, True)
y_torch, theirs, _ = torch_run(net, recorded_masks(net))  # torch's plain network, the same masks
assert_close([y_ours] + ours, [y_torch] + theirs, "output and gradients with dropout")
print(f"6 blocks with dropout: output and {len(theirs)} gradient arrays equal torch's plain network")
print("PyTorch check passed: reversible stack's output and gradients (with dropout) "
      "equal torch's plain network")

# %% [markdown]
# ## Recap
#
# - RevNet's coupling $y_1 = x_1 + f(x_2)$, $y_2 = x_2 + g(y_1)$ is undone
#   by $x_2 = y_2 - g(y_1)$, $x_1 = y_1 - f(x_2)$: $f$ and $g$ are evaluated
#   again, never inverted.
# - `ReversibleSequential` runs the stack as one node that saves only its
#   output; backward reconstructs, recomputes and backpropagates one block
#   at a time, so activation memory is flat in depth.
# - The generator's state before each $f$ and $g$ is replayed, so dropout
#   draws the same masks in the inverse and the recomputation.
# - The price: $f$ and $g$ run three times instead of once, and the inverse
#   drifts with depth, geometrically; float32 stops being usable here
#   beyond about 256 blocks.
# - The package frees nothing itself, counts a batch once in `BatchNorm1d`,
#   and refuses $f$ and $g$ that hide their weights.
#
# ## Exercises
#
# **1. Fuse the inverse and the recomputation.** `block_backward` calls $g$
# and $f$ to invert, then $f$ and $g$ again to recompute. RevNet's own
# algorithm does both at once: compute $g(y_1)$ *with* the graph recorded
# from a leaf $z_1 = y_1$; it gives $x_2 = y_2 - g(y_1)$ and, by
# backpropagating $\bar y_2$, $\bar z_1 = \bar y_1 + (\partial g/\partial
# y_1)^\top \bar y_2$. Then compute $f(x_2)$ from a leaf $x_2$: it gives
# $x_1 = y_1 - f(x_2)$ and $\bar x_2 = \bar y_2 + (\partial f/\partial
# x_2)^\top \bar z_1$; and $\bar x_1 = \bar z_1$. Write a subclass of
# `ReversibleSequentialFunction` whose `block_backward` does this, count
# the calls of $f$ and $g$, and check the gradients against the unfused
# stack and torch.

# %% tags=["hide-cell"]
class FusedReversibleFunction(ReversibleSequentialFunction):
    def block_backward(self, k, y, gy):
        block, (state_f, state_g) = self.blocks[k], self.states[k]
        y1, y2 = block.halves(Variable(y, requires_grad=False))
        gy1, gy2 = block.halves(gy)
        with replaying(None), enable_grad():
            z1 = Variable(y1.data, requires_grad=True)
            g_out = block.apply(block.g, "g", z1, replay=state_g)  # one call of g: inverse and gradient
            x2 = Variable(y2.data - g_out.data, requires_grad=True)
            f_out = block.apply(block.f, "f", x2, replay=state_f)  # one call of f
        f_params, g_params = list(block.f.params()), list(block.g.params())
        gz1, *g_grads = autograd.grad(g_out, [z1, *g_params], gy2)
        gz1 = gy1 + gz1
        gx2, *f_grads = autograd.grad(f_out, [x2, *f_params], gz1)
        x = np.concatenate([y1.data - f_out.data, x2.data], axis=-1)
        return x, F.concatenate([gz1, gy2 + gx2], axis=-1), f_grads + g_grads


class FusedReversibleSequential(ReversibleSequential):
    def forward(self, x):
        params = list(self.params())
        return FusedReversibleFunction(self.blocks, params)(x, *params)


class Counted(Layer):
    """f or g, counting its calls in a shared dict."""

    def __init__(self, layer, counts, name):
        super().__init__()
        self.layer, self.counts, self.name = layer, counts, name

    def forward(self, x):
        self.counts[self.name] += 1
        return self.layer(x)


def counted_run(kind, depth=6, p=0.2):
    """(gradients, {'f': calls, 'g': calls}) of one forward and backward of a `kind` stack, dropout p."""
    counts = {"f": 0, "g": 0}
    blocks = make_stack(depth, WIDTH, p=p).blocks
    for block in blocks:
        block.f, block.g = Counted(block.f, counts, "f"), Counted(block.g, counts, "g")
    net = {"unfused": ReversibleSequential, "fused": FusedReversibleSequential}[kind](*blocks)
    tinypytorch.manual_seed(0)
    _, grads = gradients(net, True)
    return grads, counts


(unfused, unfused_calls), (fused, fused_calls) = counted_run("unfused"), counted_run("fused")
print("calls of f and g for 6 blocks: unfused", unfused_calls, "fused", fused_calls)
print("fused against unfused:", below(relative_difference(fused, unfused), 1e-14), "| against torch:",
      below(relative_difference(fused, theirs), 1e-14))

# %% [markdown]
# **2.** Write `invert_stack(net, y)`, which computes the input of a whole
# `ReversibleSequential` from its output under `no_grad`, and use it to
# recover $X$ from the output of a stack of 16 blocks.

# %% tags=["hide-cell"]
def invert_stack(net, y):
    with no_grad():
        for block in reversed(net.blocks):
            y = block.inverse(y)
    return y


net = make_stack(16, WIDTH)
print("16 blocks, max |invert_stack(net, net(X)) - X|",
      below(np.abs(invert_stack(net, net(Variable(X))).data - X).max(), 1e-13))
