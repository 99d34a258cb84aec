# %% [markdown]
# # Step 44: checkpoint_sequential and the √N schedule
#
# Steps 42 and 43 checkpointed one function: its forward pass keeps only its
# inputs, and backward runs it again to get back what it would have saved.
# A deep network is a chain of many layers, and that raises a question one
# function does not: which layers should keep their activations, and which
# should recompute them?
#
# `checkpoint_sequential` splits a chain of $N$ layers into $k$ segments and
# checkpoints all of them but the last. About $k + N/k$ activations stay in
# memory, which is smallest at $k = \sqrt N$: memory that grows like
# $\sqrt N$ instead of $N$, for at most one extra forward pass. We count it,
# measure it at depths 8 to 128, and watch memory over time.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Parameter, Variable, recomputation
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint, checkpoint_sequential
from tinypytorch.utils.listing import show_code

# %% tags=["hide-input"]
import gc  # noqa: E402  (harness: how arrays are printed and memory is measured)
import tracemalloc  # noqa: E402

from matplotlib import patches  # noqa: E402


def show(a, precision=4):
    """An array with a fixed number of decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=precision, floatmode="fixed", separator=", ")


# %% [markdown]
# ## `checkpoint_sequential`
#
# `checkpoint_sequential(functions, segments, input)` runs a list of functions
# one after another, as PyTorch's function of the same name does. It cuts the
# list into chunks of `len(functions) // segments` functions and checkpoints
# each chunk but the last with step 42's or step 43's `checkpoint`
# (`use_reentrant` picks which):

# %%
show_code(checkpoint_sequential, step=44)

# %% [markdown]
# Two details come from PyTorch and matter for memory:
#
# - **The last chunk runs plainly.** Backward starts with it. Checkpointed, it
#   would be recomputed at once, and its activations would take the memory
#   that keeping them did: a forward pass spent for nothing.
# - **The remainder goes into the last chunk.** With 7 functions and 3
#   segments, chunks have $7 // 3 = 2$ functions: 0–1 and 2–3 are
#   checkpointed, and 4, 5 and 6 run plainly.
#
# Seven functions that take the sine and log their calls show it.
# `recomputation.is_recomputing()` says whether a call is a recomputation:

# %%
calls = []


def logged(i):
    def sine(x):
        calls.append(f"{i}{'*' if recomputation.is_recomputing() else ''}")
        return tinypytorch.sin(x)
    return sine


functions = [logged(i) for i in range(7)]
for segments in (1, 2, 3, 7):
    calls.clear()
    x = Variable(np.array([0.5, 2.0]))
    checkpoint_sequential(functions, segments, x, use_reentrant=False).sum().backward()
    print(f"segments={segments}: calls {' '.join(calls):34} x.grad = {show(x.grad)}")
print("(* = recomputed during backward)")

# %% [markdown]
# With one segment nothing is checkpointed. With three, backward reaches the
# checkpointed chunks in reverse order, 2–3 before 0–1. With seven, every
# function but the last runs again. The gradient is the same every time.
#
# ## The √N schedule
#
# ### A chain of layers
#
# Each layer is a `Linear` of width 64 followed by $\tanh$, in float64, on a
# batch of 32 rows:

# %%
WIDTH, BATCH = 64, 32
ACTIVATION = BATCH * WIDTH * 8  # bytes of one activation: a (32, 64) float64 array
BATCH_DATA = np.random.default_rng(1).standard_normal((BATCH, WIDTH))


class LinearTanh(Layer):
    def __init__(self, width, rng):
        super().__init__()
        self.linear = Linear(width, width, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def make_chain(depth, seed=0):
    rng = np.random.default_rng(seed)
    return [LinearTanh(WIDTH, rng) for _ in range(depth)]


# %% [markdown]
# A layer saves its input $x$ (for the weight's gradient), its weight, and
# the output of $\tanh$ (its derivative is $1 - \tanh^2$). Layer $i$'s output
# is layer $i + 1$'s input, so a plain run keeps the chain's input and its $N$
# outputs: $N + 1$ activations, besides the weights.
#
# ### Counting what is saved
#
# An outer pair of saved-tensor hooks (step 38) sees every tensor saved
# outside a checkpoint; inside one, the checkpoint's own hooks are innermost
# and take them, keeping only placeholders. `run_chain` (collapsed below)
# passes the chain forward and backward under such an outer hook and returns
# the bytes packed and the **activations**: the distinct arrays saved that are
# not parameters, in units of one $32 \times 64$ array.

# %% tags=["hide-input"]
def run_chain(layers, segments, use_reentrant=False, wrap=None, sequential=checkpoint_sequential):
    """Forward and backward through `sequential(functions, segments, x)`; returns (loss, bytes packed, activations)."""
    functions = layers if wrap is None else [wrap(layer) for layer in layers]
    packed, activations = [], {}

    def pack(v):
        packed.append(v.data.nbytes)
        if not isinstance(v, Parameter):
            activations[id(v.data)] = v.data  # held while counting, so that no id is reused
        return v.data  # the array: a saved output's Variable would refer back to its creator

    x = Variable(BATCH_DATA, requires_grad=False)
    with saved_tensors_hooks(pack, lambda data: data):
        if sequential is checkpoint_sequential:
            y = sequential(functions, segments, x, use_reentrant=use_reentrant)
        else:
            y = sequential(functions, segments, x)
        loss = (y * y).sum()
    del y
    held = sum(a.nbytes for a in activations.values()) // ACTIVATION
    activations.clear()  # counted: from now on only the graph holds them
    loss.backward()
    for layer in layers:
        layer.cleargrads()
    return loss, sum(packed), held


# %%
chain = make_chain(16)
for segments in (1, 2, 4, 8, 16):
    _, packed, activations = run_chain(chain, segments)
    print(f"N = 16, k = {segments:2}: {packed:9,} bytes packed, {activations:2} activations")

# %% [markdown]
# The bytes packed include the weights, and count a $\tanh$ output twice
# (saved by the $\tanh$ and by the next layer); the activations do not.
#
# ### Why $k + N/k$
#
# Split $N$ layers into $k$ segments of $N/k$. After the forward pass each of
# the first $k - 1$ segments holds its input. The last segment ran plainly, so
# it holds its input and its $N/k$ outputs: $k + N/k$ in all, as counted
# above ($1 + 16$, $2 + 8$, $4 + 4$, $8 + 2$, $16 + 1$). In backward each
# segment is recomputed just before it is needed and holds its $N/k$
# activations again while the earlier inputs wait, so the peak is also about
# $k + N/k$.
#
# $f(k) = k + N/k$ has derivative $1 - N/k^2$, zero at $k = \sqrt N$, where
# $f = 2\sqrt N$. More segments mean more inputs to keep; fewer mean longer
# segments to hold while one is recomputed. Checkpointing every layer
# ($k = N$) keeps as much as checkpointing nothing, because a layer's input
# is all that a layer of this chain keeps.

# %% tags=["hide-input"]
def draw_schedule(depth=16, ks=(1, 4, 16)):
    """One row per k: the chain's activations a_0 .. a_N, kept ones filled, recomputed ones hatched."""
    fig, axis = plt.subplots(figsize=(8, 3.5))
    for row, k in enumerate(ks):
        size, top = depth // k, -1.6 * row
        first_plain = size * (k - 1)  # the last segment starts here and runs plainly
        for i in range(depth + 1):
            kept = i % size == 0 or i >= first_plain
            axis.add_patch(patches.Rectangle((i, top), 0.8, 0.8, facecolor="C0" if kept else "white",
                                             edgecolor="C0", hatch=None if kept else "////"))
        for s in range(k if k < depth else 0):
            start = s * size
            end = depth + 0.8 if s == k - 1 else start + size + 0.8
            plain = s == k - 1
            axis.plot([start, end], [top - 0.15] * 2, color="C3" if plain else "gray", linewidth=2)
        kept_count = k + depth - (k - 1) * size
        axis.text(-0.5, top + 0.4, f"k = {k:2}", ha="right", va="center", fontsize=11)
        axis.text(depth + 1.2, top + 0.4, f"{kept_count} kept", ha="left", va="center", fontsize=10)
    for i in (0, depth // 2, depth):
        axis.text(i + 0.4, 1.05, f"$a_{{{i}}}$", ha="center", fontsize=10)
    axis.add_patch(patches.Rectangle((0, 0), 0, 0, facecolor="C0", label="kept after forward"))
    axis.add_patch(patches.Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="C0", hatch="////",
                                     label="recomputed in backward"))
    axis.plot([], [], color="gray", linewidth=2, label="checkpointed segment")
    axis.plot([], [], color="C3", linewidth=2, label="last segment (plain)")
    axis.set(xlim=(-3, depth + 4), ylim=(-1.6 * len(ks) + 0.6, 1.6))
    axis.set_axis_off()
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, 0.02), ncol=2, frameon=False, fontsize=9)
    axis.set_title(f"the activations $a_0 \\dots a_{{{depth}}}$ of a {depth}-layer chain, in k segments", fontsize=11)
    fig.tight_layout()
    plt.show()


draw_schedule()

# %% [markdown]
# $\sqrt N$ is a whole number only for some $N$, and the remainder goes into
# the last segment, which then holds more. With $s = \lfloor N/k \rfloor$ the
# exact count is $k + N - (k - 1)s$. The schedule takes the $k$ with the
# smallest count (the smallest $k$ on a tie: it recomputes least):

# %%
def activations_kept(depth, segments):
    """Activations held after the forward pass: the segments' inputs, and the last segment's outputs."""
    return segments + depth - (segments - 1) * (depth // segments)


def sqrt_schedule(depth):
    """The number of segments, near sqrt(depth), that keeps the fewest activations."""
    return min(range(1, depth + 1), key=lambda k: (activations_kept(depth, k), k))


DEPTHS = [8, 16, 32, 64, 128]
for depth in DEPTHS:
    k, rounded = sqrt_schedule(depth), round(math.sqrt(depth))
    print(f"N = {depth:3}: sqrt(N) = {math.sqrt(depth):5.2f}, "
          f"k = {k:2} keeps {activations_kept(depth, k):2}; "
          f"k = round(sqrt(N)) = {rounded:2} would keep {activations_kept(depth, rounded):2}")

# %% [markdown]
# For $N = 128$, 11 segments make chunks of 11 and a last chunk of
# $128 - 10 \cdot 11 = 18$ layers: 29 activations, where 8 segments of 16
# keep 24.
#
# The price is time: every layer of a checkpointed segment runs twice, so
# backward adds $(k - 1)\,N/k < N$ layer calls, less than one forward pass,
# about a third more work for forward and backward together. Chen et al.
# (2016) proposed this schedule and reported about 30% more time.
#
# ### Measuring the peak
#
# The count says what is held between the passes. The peak is measured with
# `tracemalloc`, which sees NumPy's array data under a domain of its own (as
# in step 35). A sample is taken after each layer call, in the forward pass
# and in a recomputation, and, in backward, from a gradient hook (step 34) on
# each layer's output. Each sample is the bytes held since the start, less
# the parameters' gradients, which every schedule ends up holding. The
# harness is collapsed below; the sweep runs three schedules at depths 8 to
# 128: plain ($k = 1$), √N, and every layer ($k = N$).

# %% tags=["hide-cell"]
def numpy_bytes():
    """Bytes of NumPy array data traced by tracemalloc and not yet freed: the traces in NumPy's domain."""
    return sum(trace.size for trace in tracemalloc.take_snapshot().traces
               if trace.domain == np.lib.tracemalloc_domain)


class Timeline:
    """Samples of the array bytes held, taken as the chain runs forward, recomputes and runs backward."""

    def __init__(self, layers):
        self.params = [p for layer in layers for p in layer.params()]
        self.samples = []  # (phase, bytes held)
        self.calls = 0  # layer calls, recomputations included
        self.base = numpy_bytes()

    def sample(self, phase):
        gradients = sum(p.grad.data.nbytes for p in self.params if p.grad is not None)
        self.samples.append((phase, numpy_bytes() - self.base - gradients))

    def wrap(self, layer):
        def traced(x):
            self.calls += 1
            y = layer(x)
            self.sample("recompute" if recomputation.is_recomputing() else "forward")
            if y.requires_grad:
                y.register_hook(lambda g: self.sample("backward"))
            return y
        return traced


def measure(layers, segments):
    """(bytes packed, activations saved, Timeline) of one forward and backward pass in `segments` segments."""
    gc.collect()
    gc.disable()  # what the graph frees, it frees by reference counting alone (step 17)
    tracemalloc.start()
    try:
        timeline = Timeline(layers)
        _, packed, activations = run_chain(layers, segments, wrap=timeline.wrap)
    finally:
        tracemalloc.stop()
        gc.enable()
    return packed, activations, timeline


def peak(timeline):
    return max(held for _, held in timeline.samples)


# %% tags=["hide-input"]
results = {}
print(f"{'N':>4} {'schedule':>12} {'k':>4} {'saved':>6} {'k+N/k':>7} {'peak':>7} {'calls':>6}")
for depth in DEPTHS:
    chain = make_chain(depth)
    for name, k in [("plain", 1), ("sqrt(N)", sqrt_schedule(depth)), ("every layer", depth)]:
        packed, activations, timeline = measure(chain, k)
        results[depth, name] = (k, packed, activations, peak(timeline), timeline.calls)
        print(f"{depth:4} {name:>12} {k:4} {activations:6} {k + depth / k:7.2f}"
              f" {peak(timeline) / ACTIVATION:7.2f} {timeline.calls:6}")
print("(saved and peak in activations of 32 x 64 float64; calls: layer calls, recomputations included)")

# %% [markdown]
# The saved activations follow the count: $N + 1$ for plain and for every
# layer, $k + N/k$ for √N where $k$ divides $N$; 24 instead of 129 at depth
# 128. The peak equals the saved count (to 16 bytes, the loss and its seed),
# reached at the start of backward: the batch was in memory before the
# measurement began, and the output's gradient takes its place. Backward
# never climbs higher, because no recomputed segment is longer than the last
# one. The calls are $N + (k - 1)\,N/k$: 240 instead of 128 at depth 128.

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.8), sharey=True)
depths, curve = np.array(DEPTHS), np.geomspace(8, 128, 100)
styles = {"plain": dict(marker="o", markersize=9, fillstyle="none"), "sqrt(N)": dict(marker="s"),
          "every layer": dict(marker="^", linestyle="--")}
for axis, index, title in [(left, 2, "saved for backward (counted)"), (right, 3, "peak (tracemalloc)")]:
    for name, style in styles.items():
        values = [results[d, name][index] / (1 if index == 2 else ACTIVATION) for d in DEPTHS]
        axis.plot(depths, values, label=f"{name} (measured)", **style)
    axis.plot(curve, curve + 1, ":", color="grey", label="$N + 1$ ($k = 1$ or $N$)")
    axis.plot(curve, 2 * np.sqrt(curve), ":", color="black", label=r"$2\sqrt{N}$ ($k = \sqrt{N}$)")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log", base=2)
    axis.set_xticks(DEPTHS, [str(d) for d in DEPTHS])
    axis.set_yticks([4, 8, 16, 32, 64, 128], ["4", "8", "16", "32", "64", "128"])
    axis.set_xlabel("depth N (layers)")
    axis.set_title(title, fontsize=11)
left.set_ylabel("activations (32 x 64 arrays)")
handles, labels = left.get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
fig.tight_layout(rect=(0, 0.14, 1, 1))
plt.show()

# %% [markdown]
# On log-log axes the plain run has slope 1 and the √N schedule slope 1/2.
# Checkpointing every layer lies on the plain run. The √N points sit on
# $2\sqrt N$ at the perfect squares 16 and 64, and a little above it at the
# other depths, where no whole $k$ makes the two terms equal.
#
# ## Memory over time
#
# The samples of a 16-layer chain, plain and in 4 segments, from the first
# layer of the forward pass to the last step of backward:

# %% tags=["hide-input"]
chain = make_chain(16)
timelines = {name: measure(chain, k)[2] for name, k in [("plain, k = 1", 1), ("sqrt(N), k = 4", 4)]}
fig, axis = plt.subplots(figsize=(8, 3.5))
for (name, timeline), style in zip(timelines.items(), ["o-", "s-"]):
    held = np.array([b for _, b in timeline.samples]) / ACTIVATION
    axis.plot(np.arange(len(held)), held, style, markersize=3, label=name)
    recomputed = [i for i, (phase, _) in enumerate(timeline.samples) if phase == "recompute"]
    if recomputed:
        axis.plot(recomputed, held[recomputed], "x", color="red", label="recomputation (k = 4)")
axis.axvline(15.5, color="grey", linestyle=":")  # 16 forward samples, then backward
axis.text(15, 19, "forward ", ha="right")
axis.text(16, 19, " backward", ha="left")
axis.set_xlabel("sample (after each layer's forward; before each layer's backward)")
axis.set_ylabel("activations held")
axis.set_ylim(0, 21)
axis.legend(loc="upper right", fontsize=9, framealpha=1)
fig.tight_layout()
plt.show()
for name, timeline in timelines.items():
    forward = max(b for phase, b in timeline.samples if phase == "forward")
    print(f"{name}: the most held in forward {forward / ACTIVATION:5.2f}, "
          f"in the whole run {peak(timeline) / ACTIVATION:5.2f} activations")

# %% [markdown]
# The plain run climbs by one activation per layer to 16, rises by one array
# at the start of backward (the output's gradient), then falls by one per
# layer as backward frees each saved tensor (step 35).
#
# The checkpointed run climbs by one array per segment, then by one per layer
# in the plain last segment. Backward is a sawtooth: before backward goes
# through a checkpointed segment, the segment is recomputed (red crosses),
# and backward through it frees those activations again. No tooth rises above
# the level where backward started.
#
# ## Check against PyTorch
#
# A 7-layer chain and its torch twin (collapsed below) are run through both
# frameworks' `checkpoint_sequential`, reentrant and not, with 1, 2 and 3
# segments; then the bytes the chain saves, counted by the same pack hooks in
# both.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)  # arrays this small gain nothing from threads


def torch_chain(layers):
    """The chain in torch: one Sequential(Linear, Tanh) per layer, with the same weights."""
    modules = []
    for layer in layers:
        linear = torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(layer.linear.weight.data))
            linear.bias.copy_(torch.from_numpy(layer.linear.bias.data))
        modules.append(torch.nn.Sequential(linear, torch.nn.Tanh()))
    return modules


def chain_gradients(layers, segments, use_reentrant):
    """The input's and the parameters' gradients of sum(y^2), through checkpoint_sequential."""
    x = Variable(BATCH_DATA.copy())
    (checkpoint_sequential(layers, segments, x, use_reentrant=use_reentrant) ** 2).sum().backward()
    grads = [x.grad.data] + [p.grad.data for layer in layers for p in layer.params()]
    for layer in layers:
        layer.cleargrads()
    return grads


def torch_chain_gradients(modules, segments, use_reentrant):
    x = torch.tensor(BATCH_DATA, requires_grad=True)
    (torch.utils.checkpoint.checkpoint_sequential(modules, segments, x, use_reentrant=use_reentrant) ** 2).sum() \
        .backward()
    return [x.grad.numpy()] + [p.grad.numpy() for m in modules for p in m.parameters()]


def torch_chain_bytes(modules, segments):
    """Bytes packed by torch's saved-tensor hooks in the forward pass of the chain, input needing no gradient."""
    packed = []
    x = torch.tensor(BATCH_DATA)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.nelement() * t.element_size()) or t,
                                                  lambda t: t):
        y = torch.utils.checkpoint.checkpoint_sequential(modules, segments, x, use_reentrant=False)
        loss = (y * y).sum()
    loss.backward()
    return sum(packed)


# %%
chain = make_chain(7)
for use_reentrant in (True, False):
    for segments in (1, 2, 3):
        torch_grads = torch_chain_gradients(torch_chain(chain), segments, use_reentrant)
        for ours, theirs in zip(chain_gradients(chain, segments, use_reentrant), torch_grads, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
for depth in (8, 16, 32):
    chain = make_chain(depth)
    for segments in (1, sqrt_schedule(depth), depth):
        theirs = torch_chain_bytes(torch_chain(chain), segments)
        assert run_chain(chain, segments)[1] == theirs, (depth, segments)
print("PyTorch check passed: checkpoint_sequential's gradients and the chain's saved bytes equal torch's")

# %% [markdown]
# ## Recap
#
# - `checkpoint_sequential(functions, k, x)` cuts a chain into chunks of
#   $\lfloor N/k \rfloor$ functions and checkpoints all but the last, which
#   runs plainly and takes the remainder, as in PyTorch.
# - After the forward pass the chain keeps each segment's input and the last
#   segment's activations: $k + N/k$, smallest at $k = \sqrt N$, where it is
#   $2\sqrt N$.
# - $k = 1$ and $k = N$ both keep $N + 1$: checkpointing every layer of a
#   chain saves nothing.
# - The cost is $(k - 1)\,N/k < N$ extra layer calls, less than one forward
#   pass.
# - The measured peak follows the count, and in backward each recomputed
#   segment rises and falls again below the level where backward started.
#
# ## Exercises
#
# **1.** From $f(k) = k + N/k$ alone: write `optimal_k(depth)`, which returns
# the whole $k$ with the smallest $f(k)$ (only $\lfloor \sqrt N \rfloor$ and
# $\lceil \sqrt N \rceil$ need trying; the smaller on a tie). Then check with
# `run_chain` that for $N = 25$ the chain keeps $f(k)$ activations, and how
# many bytes that is.

# %% tags=["hide-cell"]
def optimal_k(depth):
    low = math.isqrt(depth)
    candidates = [low] if low * low == depth else [low, low + 1]
    return min(candidates, key=lambda k: (k + depth / k, k))


k25 = optimal_k(25)
_, _, kept25 = run_chain(make_chain(25), k25)
print(f"N = 25: k = {k25}, f(k) = {k25 + 25 / k25:.0f}, counted {kept25} activations = {kept25 * ACTIVATION:,} bytes")
print("optimal_k for N = 8, 10, 12, 128:", [optimal_k(n) for n in (8, 10, 12, 128)])

# %% [markdown]
# **2.** PyTorch's chunks put the whole remainder into the last, plain
# segment. Write `balanced_bounds(depth, k)`, which returns the $k$
# `(start, end)` ranges of segments whose sizes differ by at most one, the
# longer ones first, and `checkpoint_bounds(functions, bounds, x)`, which runs
# them, checkpointing all but the last with `checkpoint(...,
# use_reentrant=False)`. How many activations does $N = 128$, $k = 11$ keep
# now (`run_chain(..., sequential=checkpoint_bounds)` takes the bounds as its
# `segments`)?

# %% tags=["hide-cell"]
def balanced_bounds(depth, k):
    size, extra = divmod(depth, k)
    bounds, start = [], 0
    for s in range(k):
        end = start + size + (1 if s < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def checkpoint_bounds(functions, bounds, x):
    def run(start, end):
        def chunk(h):
            for f in functions[start:end]:
                h = f(h)
            return h
        return chunk

    for start, end in bounds[:-1]:
        x = checkpoint(run(start, end), x, use_reentrant=False)
    return run(*bounds[-1])(x)


bounds128 = balanced_bounds(128, 11)
_, _, kept_balanced = run_chain(make_chain(128), bounds128, sequential=checkpoint_bounds)
print("segment sizes:", [end - start for start, end in bounds128])
print(f"N = 128, k = 11: balanced keeps {kept_balanced}, PyTorch's chunks {activations_kept(128, 11)}, "
      f"its best k {activations_kept(128, sqrt_schedule(128))}")
