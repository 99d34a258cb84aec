# %% [markdown]
# # Step 46: Reversible residual blocks
#
# Checkpointing (steps 41–45) keeps the input of each segment and recomputes
# the rest during backward. At best that leaves about $2\sqrt N$ activations
# for a chain of $N$ layers. A **reversible** block needs less than that,
# because its input can be computed back from its output. A stack of such
# blocks then keeps only its final output. During backward it recovers each
# block's input from that block's output, one block at a time, from the top.
# So the memory for activations stays the same at any depth.
#
# RevNet (Gomez, Ren, Urtasun and Grosse, "The Reversible Residual Network",
# 2017) builds such a block from two ordinary residual functions. This step
# reads the package's version of it (`tinypytorch.reversible`), checks its
# gradients against a plain run and PyTorch, and measures two things: the
# memory it saves, and the price in exactness, since an inverse computed in
# floating point is not exact and its errors grow with depth. It ends with
# the pitfalls that reversible libraries have run into.

# %%
import gc
import inspect
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, no_grad, random
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential, ReversibleSequentialFunction
from tinypytorch.utils.checkpoint import checkpoint_sequential


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
# functions $f$ and $g$ that map a half to a half. RevNet's block is
#
# $$
# y_1 = x_1 + f(x_2), \qquad y_2 = x_2 + g(y_1).
# $$
#
# These are two residual steps, each adding to one half something computed
# from the other half. Read the lines from the bottom up to undo them:
#
# $$
# x_2 = y_2 - g(y_1), \qquad x_1 = y_1 - f(x_2).
# $$
#
# $y_1$ is part of the output, so $g(y_1)$ can be computed again, and that
# gives $x_2$. Then $f(x_2)$ can be computed again, and that gives $x_1$.
# Neither $f$ nor $g$ has to be invertible. Each is only *evaluated* again,
# never inverted, so they can be any layers that keep the shape of a half.
# Here is the package's block:

# %%
print(inspect.getsource(AdditiveCoupling))

# %% [markdown]
# `halves` splits the last axis. `apply` runs $f$ or $g$, checks that the
# shape is kept, and can record or restore the random generator's state
# (used later, for dropout). `forward` and `inverse` are the two pairs of
# equations above.
#
# For $f$ and $g$ we use a linear layer followed by $\tanh$, with an
# optional dropout after it:

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
print("x[0]            =", show(x.data[0]))
print("y[0]            =", show(y.data[0]))
print("inverse(y)[0]   =", show(block.inverse(y).data[0]))
print("max |inverse(y) - x|", below(np.abs(block.inverse(y).data - x.data).max(), 1e-14))

# %% [markdown]
# The inverse gives $x$ back up to rounding: $y_1 = x_1 + f(x_2)$ was
# rounded when it was computed, and subtracting $f(x_2)$ again does not undo
# that rounding exactly.
#
# ## `ReversibleSequential`: one node for the whole stack
#
# Being invertible is not enough by itself. A block written with ordinary
# operations records a graph as it runs, and the graph saves the block's
# intermediate values whether we need them or not. The package therefore
# runs a whole stack of blocks as a single `Function`, as the reentrant
# checkpoint of step 42 runs a segment. The layer is `ReversibleSequential`,
# and its Function `ReversibleSequentialFunction`:

# %%
print(inspect.getsource(ReversibleSequential))

# %% [markdown]
# The inputs of the node are $x$ and every parameter of every block. The
# parameters receive their gradients as outputs of the node's `backward`,
# like any other input, so `autograd.grad` with respect to a weight works.
#
# ### Forward: no graph, one saved tensor

# %%
print(inspect.getsource(ReversibleSequentialFunction.forward))

# %% [markdown]
# The blocks run under `no_grad`, so nothing inside them is recorded or
# saved. Before $f$ and before $g$ of each block the generator's state is
# noted, two small dictionaries per block. Then the node saves one tensor,
# the stack's output.
#
# ### Backward: walk the blocks in reverse

# %%
print(inspect.getsource(ReversibleSequentialFunction.backward))

# %% [markdown]
# `backward` walks the blocks from the last to the first, and leaves each
# block's work to `block_backward`:

# %%
print(inspect.getsource(ReversibleSequentialFunction.block_backward))

# %% [markdown]
# For each block, starting from the last, with $y$ its output and
# $\bar y = \partial\mathcal L/\partial y$ the gradient that arrived:
#
# 1. **Reconstruct** the block's input, $x = \text{inverse}(y)$, under
#    `no_grad`.
# 2. **Recompute** the block from a fresh leaf holding $x$, with the graph
#    recorded. This is the block exactly as a plain run would have recorded
#    it, if $x$ is right.
# 3. **Check** that the recomputed graph reads, of what requires grad, only
#    the leaf and the block's parameters (`_refuse_unknown_inputs`, see
#    "Bad input" below): any other weight would get no gradient.
# 4. **Backpropagate** $\bar y$ through that small graph, in a backward pass
#    inside the running one (`_inner_grad`). This gives
#    $\partial\mathcal L/\partial x$, which becomes $\bar y$ for the block
#    below, and the gradients of the block's parameters.
# 5. **Drop** the block's graph. The next iteration starts from $x$, which
#    is the output of the block below.
# 6. **Send on** the block's parameter gradients. They are complete once the
#    block is done (the first block that uses a parameter is the last one
#    backward reaches), so `engine.send_early` hands them to the running
#    backward pass at once, where they reach `.grad`, hooks or
#    `autograd.grad` as if the node had returned them. The node never holds
#    more than one block's gradients, which matters when an optimizer or a
#    hook lets each gradient go as soon as it is complete.
#
# At any moment backward holds one block's graph, whatever the depth. Random
# numbers are handled as in checkpointing, and the whole loop runs in
# `fork_rng`. The recomputations run inside `replaying` (from
# `tinypytorch.recomputation`, shared with checkpointing), which tells
# `BatchNorm1d` not to update its statistics again (step 45).
#
# The gradients equal a plain run's up to the error of the reconstruction.
# Let us check that on a stack of six blocks:

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
print("the stack's node:", type(net(Variable(X)).creator).__name__)
print("outputs bitwise equal:", np.array_equal(y_rev, y_plain))
print(f"{len(plain)} gradient arrays; largest difference, relative:", below(relative_difference(rev, plain), 1e-14))

# %% [markdown]
# The outputs are the same bits: the forward pass runs the same operations
# in the same order, only without recording them. The gradients agree to
# rounding: the printed bound is loose, and the errors are near $10^{-16}$.
#
# ## Randomness: dropout inside $f$ and $g$
#
# With dropout in $f$ or $g$, the inverse must subtract exactly the
# $f(x_2)$ and $g(y_1)$ that the forward pass added, so it has to draw the
# same masks again. So does the recomputation. That is why `forward` notes
# the generator's state before every $f$ and $g$, and `inverse` and the
# recomputation put it back (`replay`). Without the replay, the inverse draws
# new masks and computes a wrong input:

# %%
block = make_stack(1, WIDTH, p=0.5).blocks[0]
tinypytorch.manual_seed(0)
x = Variable(X)
states = []
y = block.forward(x, states)  # notes the generator's state before f and before g
wrong = block.inverse(y)  # draws new masks
right = block.inverse(y, replay=states)
print("inverse with new masks:      max |error| =", f"{np.abs(wrong.data - X).max():.2f}")
print("inverse replaying the masks: max |error|", below(np.abs(right.data - X).max(), 1e-14))

# %% [markdown]
# A stack with dropout then gives the gradients of the plain run. The outer
# random stream must also continue as if the reversible backward had drawn
# nothing: the next number drawn after backward must be the one drawn after
# the plain run's backward.

# %%
def seeded_run(net, reversible):
    tinypytorch.manual_seed(0)
    _, grads = gradients(net, reversible)
    return grads, random.default_generator().random()


net = make_stack(6, WIDTH, p=0.2)
rev, rev_next = seeded_run(net, True)
plain, plain_next = seeded_run(net, False)
print("with dropout: largest difference from the plain run, relative:", below(relative_difference(rev, plain), 1e-14))
print(f"next draw after backward: reversible {rev_next:.6f}, plain {plain_next:.6f}")

# %% [markdown]
# Both hold. The first draw after backward is the same number, so the masks
# of the next training step will be the same too. MemCNN, a PyTorch library
# of reversible blocks, got this wrong at first: its issues #12 and #44
# report dropout giving wrong gradients because the masks were not replayed.
#
# ## One saved tensor, whatever the depth
#
# A saved-tensor hook (step 38) that counts what is packed shows the
# difference directly. Around the stack alone, not the loss, it sees what
# the stack keeps for backward:

# %%
def saved_by(run):
    """(number of tensors, bytes) packed for backward while `run()` executes."""
    packed = []

    def pack(v):
        packed.append(v.data.nbytes)
        return v.data

    with saved_tensors_hooks(pack, lambda data: data):
        run()
    return len(packed), sum(packed)


print(f"{'depth':>5} {'plain: tensors':>15} {'bytes':>7} {'reversible: tensors':>20} {'bytes':>6}")
for depth in (1, 4, 16, 64):
    net = make_stack(depth, WIDTH)
    plain_count, plain_bytes = saved_by(lambda: run_plainly(net, Variable(X)))
    rev_count, rev_bytes = saved_by(lambda: net(Variable(X)))
    print(f"{depth:5} {plain_count:15} {plain_bytes:7,} {rev_count:20} {rev_bytes:6,}")
print("one (5, 8) float64 array:", X.nbytes, "bytes")

# %% [markdown]
# A plain block saves six tensors: the input and the weight of each linear
# layer, and the output of each $\tanh$. The reversible stack saves one
# tensor, its output, at every depth. The RNG states it notes are not
# tensors: they are a few hundred bytes of Python dictionaries per block.
#
# ## Memory against depth
#
# ### Three ways to run the same stack
#
# Now compare three ways of running the same stack: plainly, with
# `checkpoint_sequential` in $\operatorname{round}(\sqrt N)$ segments (step
# 41), and reversibly. To make activations the dominant cost, the batch is
# large (2,048 rows of 16 features) and $f$, $g$ are small (8 × 8 weights).
# One activation, a $2048 \times 16$ float64 array, is 256 KiB. The
# benchmark `bench/bench_memory.py` measures the same stack at full size,
# in tinypytorch and PyTorch, and writes `bench/results/reversible.md`.
#
# ### Measuring saved bytes and the peak
#
# The saved bytes come from the counting hook above. For the peak, as in step 44, `tracemalloc` traces every allocation, and NumPy reports
# its arrays' data in a domain of its own. A snapshot filtered on that domain
# gives the exact bytes of all arrays alive. A snapshot is slow, so we take
# one when the forward pass ends and then eight during backward, evenly
# spaced among the moments when backward reaches the output of an $f$ or a
# $g$. The first of these is the start of backward. The peak is the largest
# sample, counted from before the run. It includes the parameters'
# gradients, about 1 KiB a block.

# %%
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

# %% [markdown]
# Each way is run once per depth. The table gives the tensors and bytes the
# counting hook saw (in activations), the peak, and how many times $f$ and
# $g$ were called in all. Every figure is a count of bytes or calls, so it is
# the same on every machine.

# %%
WAYS = ["plain", "sqrt(N)", "reversible"]


def measure(net, way):
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
print(f"{'N':>4} {'way':>11} {'saved: tensors':>15} {'activations':>12} {'peak':>7} {'f, g calls':>11}")
for depth in DEPTHS:
    net = probed_stack(depth)
    for way in WAYS:
        memory[depth, way] = measure(net, way)
        count, saved, peak, calls = memory[depth, way]
        print(f"{depth:4} {way:>11} {count:15} {saved:12.2f} {peak:7.2f} {calls:11}")
growth = memory[128, "reversible"][2] / memory[8, "reversible"][2]
print(f"reversible peak, depth 128 / depth 8: {growth:.3f}")

# %% [markdown]
# The plain run's peak grows by 2.5 activations per block. Each block keeps
# three half-width arrays (the outputs of its two $\tanh$, and $y_1$, which
# $g$'s linear layer saves) and its whole output. `concatenate` made that
# output a new array, and it stays alive because the next block's linear
# layer saves $x_2$, a view into it. The √N schedule grows like $\sqrt N$, as in step 44. The reversible peak
# is 7.5 activations at every depth, plus the parameters' gradients computed
# so far (1,152 bytes a block, which every way ends up holding): 6% more at
# depth 128 than at depth 8. The 7.5 activations are one block's worth: the saved output, its gradient, the
# reconstructed input, and the recomputed block's graph.
#
# The price is compute. A reversible block runs $f$ and $g$ three times:
# forward, inverse and recomputation. The plain run calls them once and the
# √N schedule about twice. Backward itself costs about two forward passes,
# so the reversible run does roughly 5 units of work where the plain run
# does 3.

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
styles = {"plain": "o-", "sqrt(N)": "s-", "reversible": "^-"}
for axis, index, title in [(left, 1, "saved for backward (counting hook)"), (right, 2, "peak (tracemalloc)")]:
    for way, style in styles.items():
        axis.plot(DEPTHS, [memory[d, way][index] for d in DEPTHS], style, label=way)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log", base=2)
    axis.set_xticks(DEPTHS, [str(d) for d in DEPTHS])
    axis.set_xlabel("depth N (blocks)")
    axis.set_title(title)
left.set_ylabel("activations (2048 x 16 float64 arrays)")
left.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# On log–log axes the plain run has slope 1, the √N schedule about 1/2, and
# the reversible stack slope 0.
#
# ## Drift: how exact is the inverse?
#
# Backward starts from the saved output and inverts block after block. Every
# inverse is computed in floating point, so it makes a rounding error of its
# own. It also works on an input that already carries the error of the
# blocks above it, and it amplifies that error. Suppose the output of a
# block is off by $\varepsilon$. Then
#
# $$
# \hat x_2 = \hat y_2 - g(\hat y_1)
# \quad\Rightarrow\quad
# |\hat x_2 - x_2| \le \varepsilon + \operatorname{Lip}(g)\, \varepsilon,
# $$
#
# and in the same way $|\hat x_1 - x_1| \le \varepsilon + \operatorname{Lip}(f)
# (1 + \operatorname{Lip}(g))\,\varepsilon$. Here $\operatorname{Lip}(f)$ is
# the Lipschitz constant of $f$, the most by which $f$ can stretch a
# difference; for $\tanh(W x + b)$ it is at most $\lVert W\rVert_2$. So
# each block can multiply the error by up to about
# $(1 + \operatorname{Lip}(f))(1 + \operatorname{Lip}(g))$. Over $N$ blocks
# the bound grows geometrically. In practice errors point in many
# directions and partly cancel, so the growth is much slower than the
# bound, but it is still geometric in the end.
#
# We measure two errors for stacks of 32 features, a batch of 16, and
# PyTorch's default initialisation (the setting of the drift table in
# `research/memory-anchors.md`):
#
# - **reconstruction**: run the stack forward, invert every block back to
#   the input, and take $\max|\hat x - x| / \max|x|$;
# - **gradient**: the gradients of the input and all parameters from the
#   reversible run against the plain run in the same precision, the largest
#   difference relative to the largest gradient.

# %%
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

# %% [markdown]
# The exact errors depend on how each matrix product rounds, which depends
# on the CPU's BLAS kernels: from one machine to another they differ by up to
# about a factor of 3 (the plot below shows this machine's). So the table
# prints, for each error, a power of ten that it stays below on every CPU we
# tried, and the code checks it.

# %%
BOUNDS = {1: (1e-6, 1e-6, 1e-15, 1e-15), 4: (1e-6, 1e-6, 1e-15, 1e-14), 16: (1e-5, 1e-5, 1e-14, 1e-14),
          64: (1e-4, 1e-4, 1e-13, 1e-13), 256: (1e-2, 1e-2, 1e-11, 1e-11), 1024: (1e0, 1e0, 1e-8, 1e-9)}
print(f"{'depth':>5}  {'float32: reconstruction':>24} {'gradient':>9}  {'float64: reconstruction':>24} {'gradient':>9}")
for d in DRIFT_DEPTHS:
    (r32, g32), (r64, g64) = errors[d, np.float32], errors[d, np.float64]
    b = BOUNDS[d]
    print(f"{d:5}  {below(r32, b[0]):>24} {below(g32, b[1]):>9}  {below(r64, b[2]):>24} {below(g64, b[3]):>9}")
print("float32 gradient error above 1e-2 at 1024 blocks:", errors[1024, np.float32][1] > 1e-2)

# %% [markdown]
# At one block each precision makes about one rounding error: $10^{-7}$ in
# float32, $10^{-16}$ in float64. The errors then grow slowly at first, by
# about a factor of 100 over the first 64 blocks, and then faster, by a
# factor of several hundred from 256 to 1,024 blocks. The float64 errors
# follow the float32 errors about nine orders of magnitude lower: the
# amplification is the same, and only the rounding unit differs. This
# agrees with the table in `research/memory-anchors.md`, measured on the same
# kind of network: float32 $10^{-7}$ at one block, $3 \cdot 10^{-5}$ at 100
# and $10^{-1}$ at 1,000; float64 $8 \cdot 10^{-10}$ at 1,000.
#
# **Float32 is usable for this network up to about 256 blocks.** There the
# gradient is within 1% of the plain run's, and close to $10^{-3}$, the
# tolerance that revlib's own tests use in float32. At 1,024
# blocks it is off by 5–15%: it is no longer the gradient of the network.
# Float64 stays within $10^{-9}$ at every depth here.
#
# The growth depends on the Lipschitz constants of $f$ and $g$. Doubling
# every weight lets each block stretch errors more, and in float64 at
# 1,024 blocks the gradient error jumps by four orders of magnitude or more:

# %%
doubled = {d: drift(d, np.float64, scale=2.0) for d in DRIFT_DEPTHS}
print("float64 gradient error at 1024 blocks, weights doubled: above 1e-6:", doubled[1024][1] > 1e-6,
      "(weights as initialised:", below(errors[1024, np.float64][1], 1e-9) + ")")

# %%
fig, axis = plt.subplots(figsize=(7, 4))
curves = [("float32", [errors[d, np.float32] for d in DRIFT_DEPTHS], "C0"),
          ("float64", [errors[d, np.float64] for d in DRIFT_DEPTHS], "C1"),
          ("float64, weights x2", [doubled[d] for d in DRIFT_DEPTHS], "C2")]
for name, values, color in curves:
    axis.plot(DRIFT_DEPTHS, [r for r, _ in values], "o-", color=color, label=f"{name}, reconstruction")
    axis.plot(DRIFT_DEPTHS, [g for _, g in values], "s--", color=color, label=f"{name}, gradient")
axis.axhline(1e-2, color="grey", linestyle=":", label="1% (float32 no longer usable above)")
axis.set_xscale("log", base=4)
axis.set_yscale("log")
axis.set_xlabel("depth (blocks)")
axis.set_ylabel("relative error")
axis.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# Two ways out exist when a network must be deeper. One is to keep some
# activations after all: an ordinary checkpoint every so many blocks resets
# the error, since the inversion restarts from stored values. The other is
# to keep $f$ and $g$ gently scaled, which is what normalisation layers and
# small initial weights do. Step 47 meets the same effect in RevCol, where
# the inverse also divides by a learned $\alpha$.
#
# ## Pitfalls
#
# ### Backward twice
#
# The stack's node frees its saved output after a backward pass, like every
# other node (step 35). A second backward through the same graph raises
# PyTorch's error. With `retain_graph=True` the output is kept, and the
# second backward adds the same gradients again:

# %%
net = make_stack(3, WIDTH)
x = Variable(X.copy())
loss = (net(x) * LOSS_WEIGHTS).sum()
loss.backward(retain_graph=True)
first = x.grad.data.copy()
loss.backward()
print("after two backward passes with retain_graph, x.grad == 2 * first:", np.array_equal(x.grad.data, 2 * first))
loss = (net(Variable(X)) * LOSS_WEIGHTS).sum()
loss.backward()
try:
    loss.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ### A tensor that another layer saved
#
# MemCNN frees the storage of its input to save memory (issue #70). When the
# layer before it had saved the same tensor, a ReLU saving its output for
# example, that layer's backward then read freed memory. A residual
# connection around the block fails in the same way (issue #39).
# `ReversibleSequentialFunction` never frees anything: it keeps only its own output
# and lets the graph decide what lives. Here a $\tanh$ saves its output $h$,
# the stack takes $h$ as its input, and a residual connection adds $h$ to
# the stack's output:

# %%
def tanh_stack_residual(net, linear, x, reversible):
    h = tinypytorch.tanh(linear(x))  # tanh saves h for its own backward
    return h + (net(h) if reversible else run_plainly(net, h))


net, linear = make_stack(3, WIDTH), Linear(WIDTH, WIDTH, rng=np.random.default_rng(6))
results = []
for reversible in (True, False):
    net.cleargrads()
    linear.cleargrads()
    x = Variable(X.copy())
    (tanh_stack_residual(net, linear, x, reversible) * LOSS_WEIGHTS).sum().backward()
    results.append([x.grad.data, linear.weight.grad.data] + [p.grad.data for p in net.params()])
print("gradients of x, the linear layer and the stack; largest difference from the plain run, relative:",
      below(relative_difference(*results), 1e-14))

# %% [markdown]
# ### Batch normalisation counts one batch
#
# With `BatchNorm1d` in $f$ and $g$, the inverse and the recomputation run
# $f$ and $g$ again in training mode. In a naive PyTorch port each of those
# calls would update the running statistics, so one batch would be counted
# three times (MemCNN's issues note it too). In tinypytorch both calls run as
# recomputations (step 45), so the statistics move once, exactly as in one
# plain forward pass:

# %%
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


nets = {reversible: norm_stack() for reversible in (True, False)}
for reversible, net in nets.items():
    gradients(net, reversible)
norms = {r: [half.norm for block in net.blocks for half in (block.f, block.g)] for r, net in nets.items()}
print("batches counted by each BatchNorm1d, reversible:", [n.num_batches_tracked for n in norms[True]])
print("running means equal the plain run's, bitwise:",
      all(np.array_equal(a.running_mean, b.running_mean) and np.array_equal(a.running_var, b.running_var)
          for a, b in zip(norms[True], norms[False])))

# %% [markdown]
# ## Bad input
#
# The coupling needs $f$ and $g$ to keep the shape of a half, since
# $x_1 + f(x_2)$ must add like to like. It also needs an even number of
# features, to split them into two halves of equal size:

# %%
rng = np.random.default_rng(8)
attempts = [
    ("f changes the shape", AdditiveCoupling(Linear(4, 3, rng=rng), LinearTanh(4, rng)), np.ones((2, 8))),
    ("odd number of features", AdditiveCoupling(LinearTanh(4, rng), LinearTanh(4, rng)), np.ones((2, 9))),
]
for what, block, data in attempts:
    try:
        ReversibleSequential(block)(Variable(data))
    except ValueError as error:
        print(f"{what}: ValueError: {error}")

# %% [markdown]
# `ReversibleSequential` needs blocks with an `inverse`, and at least one of
# them. An ordinary layer has no inverse, and the stack could not compute its
# input in backward:

# %%
for blocks in [(AdditiveCoupling(LinearTanh(4, rng), LinearTanh(4, rng)), Linear(8, 8, rng=rng)), ()]:
    try:
        ReversibleSequential(*blocks)
    except (TypeError, ValueError) as error:
        print(f"{type(error).__name__}: {error}")

# %% [markdown]
# ### A function that hides its weights
#
# $f$ and $g$ may be any callables, but the block learns only the
# parameters it can list: those of the Layers it holds. A plain function
# that closes over a layer, `lambda h: tanh(linear(h))`, hides that layer's
# weights from `params()`. Run plainly, or under `checkpoint`, the graph
# reaches them all the same and they train. The reversible stack computes
# only the gradients of the parameters it knows, so a hidden weight would
# simply get none, and training would leave it where it is without a word.
# Backward therefore checks each recomputed block (`_refuse_unknown_inputs`
# walks its graph) and refuses a Variable that requires grad but is not
# among its parameters:

# %%
linear_f, linear_g = Linear(4, 4, rng=rng), Linear(4, 4, rng=rng)
hidden = AdditiveCoupling(lambda h: tinypytorch.tanh(linear_f(h)), lambda h: tinypytorch.tanh(linear_g(h)))
print("parameters the block can list:", len(list(hidden.params())))
(hidden(Variable(X)) * LOSS_WEIGHTS).sum().backward()
print("plain run: the hidden weight got a gradient:", linear_f.weight.grad is not None)
try:
    (ReversibleSequential(hidden)(Variable(X)) * LOSS_WEIGHTS).sum().backward()
except RuntimeError as error:
    print("reversible run: RuntimeError:", error)

# %% [markdown]
# The check walks only the small graph of one block, which backward builds
# anyway, and costs little next to it. Making $f$ and $g$ Layers, as
# `LinearTanh` is, registers their weights and makes the block work.
#
# A layer that changes the number of features (RevNet's downsampling
# between stages) cannot be inverted at all. It belongs between two
# `ReversibleSequential`s, where it saves its input as usual.
#
# ## Check against PyTorch
#
# - The same coupling network written plainly in `torch` (float64), with
#   the same weights and the dropout masks of the tinypytorch run: its output
#   and the gradients of its input and of every parameter equal those of the
#   reversible stack.
# - A port of the algorithm as a `torch.autograd.Function` (forward under
#   `no_grad`, only the output saved, backward inverting block by block)
#   gives the same gradients without dropout.
# - With `BatchNorm1d` in $f$ and $g$, tinypytorch's running statistics after
#   one reversible step equal those of one plain step in torch. The naive
#   port counts every batch three times.

# %%
import torch

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


net = make_stack(6, WIDTH, p=0.2)
tinypytorch.manual_seed(0)
y_ours, ours = gradients(net, True)
y_torch, theirs, _ = torch_run(net, recorded_masks(net))
assert_close([y_ours], [y_torch], "output")
assert_close(ours, theirs, "gradients with dropout")
print(f"6 blocks with dropout: output and {len(theirs)} gradient arrays equal torch's plain network")

net = make_stack(6, WIDTH)
_, ours = gradients(net, True)
_, theirs, _ = torch_run(net, [], port=True)
assert_close(ours, theirs, "gradients of the torch.autograd.Function port")
print(f"6 blocks: {len(theirs)} gradient arrays equal those of the torch.autograd.Function port")

net = norm_stack()
gradients(net, True)
for port, expected_count in [(False, 1), (True, 3)]:
    _, _, blocks = torch_run(net, [], port=port)
    for block, twin in zip(net.blocks, blocks):
        for half, half_t in [(block.f, twin.f), (block.g, twin.g)]:
            norm_t = half_t[1]
            assert norm_t.num_batches_tracked.item() == expected_count
            if not port:
                assert_close([half.norm.running_mean, half.norm.running_var],
                             [norm_t.running_mean.numpy(), norm_t.running_var.numpy()], "running statistics")
print("BatchNorm1d in f and g: running statistics equal torch's plain step; the naive torch port counts 3 batches")
print("PyTorch check passed: reversible stack's outputs and gradients (with dropout) equal torch's plain network "
      "and a torch.autograd.Function port; BatchNorm statistics updated once")
