# %% [markdown]
# # Step 44: checkpoint_sequential, the √N schedule and a memory-efficient DenseNet block
#
# Steps 41 and 43 checkpointed one function: its forward pass keeps only its
# inputs, and backward runs it again to get back what it would have saved.
# A deep network is a chain of many layers, and checkpointing raises a
# question that one function does not: which layers should keep their
# activations, and which should recompute them?
#
# This step answers it for a chain of $N$ layers. `checkpoint_sequential`
# splits the chain into $k$ segments and checkpoints all of them but the last.
# Counting what stays in memory gives about $k + N/k$ activations, which is
# smallest at $k = \sqrt N$: memory that grows like $\sqrt N$ instead of $N$,
# at the price of one extra forward pass at most. We measure it, at depths from
# 8 to 128, and draw memory over time to see what checkpointing does.
#
# Then a real use: DenseNet's `memory_efficient` option, which checkpoints one
# small piece of each layer (a concatenation, a batch normalisation, a ReLU
# and a $1 \times 1$ convolution) because that piece keeps arrays that grow with
# depth. Two new pieces of the package make it possible: `concatenate`
# (PyTorch's `torch.cat`) and `BatchNorm1d`. Batch normalisation also has
# state, its running statistics, and recomputing it would update them twice.
# PyTorch does exactly that; tinypytorch does not.

# %%
import gc
import inspect
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Parameter, Variable, concatenate, recomputation
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint, checkpoint_sequential


def show(a, precision=4):
    """An array with a fixed number of decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=precision, floatmode="fixed", separator=", ")


# %% [markdown]
# ## `checkpoint_sequential`
#
# `checkpoint_sequential(functions, segments, input)` runs a list of functions
# one after another, each on the previous one's output, as PyTorch's function
# of the same name does. It cuts the list into chunks of
# `len(functions) // segments` functions and checkpoints each chunk with
# step 41's or step 43's `checkpoint` (`use_reentrant` picks which):

# %%
print(inspect.getsource(checkpoint_sequential))

# %% [markdown]
# Two details come from PyTorch and matter for memory:
#
# - **The last chunk runs plainly.** Backward starts with the last chunk. Had
#   it been checkpointed, backward would have to recompute it at once, and the
#   recomputed activations would take the same memory that keeping them did.
#   Checkpointing it would cost a forward pass and save nothing.
# - **The remainder goes into the last chunk.** With 7 functions and 3
#   segments, each chunk has $7 // 3 = 2$ functions. Functions 0–1 and 2–3 are
#   checkpointed, and 4, 5 and 6 run plainly.
#
# To watch it happen, here are seven functions that each take the sine of
# their input and log their calls. `recomputation.is_recomputing()` says
# whether a call is part of a recomputation:

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
    y = checkpoint_sequential(functions, segments, x, use_reentrant=False)
    y.sum().backward()
    print(f"segments={segments}: calls {' '.join(calls):34} x.grad = {show(x.grad)}")
print("(* = recomputed during backward)")

# %% [markdown]
# With one segment nothing is checkpointed. With two, the chunk size is 3, and
# only functions 0–2 run again in backward. With three, backward reaches the
# checkpointed chunks in reverse order, 2–3 before 0–1. With seven, every
# function but the last is recomputed, one at a time. The gradient is the same
# every time.
#
# ## The √N schedule
#
# ### A chain of layers
#
# To measure memory we need a chain that keeps something. Each layer is a
# `Linear` of width 64 followed by $\tanh$, in float64, on a batch of 32 rows:

# %%
WIDTH, BATCH = 64, 32
ACTIVATION = BATCH * WIDTH * 8  # bytes of one activation: a (32, 64) float64 array


class LinearTanh(Layer):
    """tanh(x W^T + b): one layer of the chain."""

    def __init__(self, width, rng):
        super().__init__()
        self.linear = Linear(width, width, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def make_chain(depth, seed=0):
    rng = np.random.default_rng(seed)
    return [LinearTanh(WIDTH, rng) for _ in range(depth)]


BATCH_DATA = np.random.default_rng(1).standard_normal((BATCH, WIDTH))
print(f"one activation: {BATCH} x {WIDTH} float64 = {ACTIVATION:,} bytes")

# %% [markdown]
# One layer saves its input $x$ (for the weight's gradient), its weight (for
# the input's gradient) and the output of $\tanh$ (its derivative is
# $1 - \tanh^2$). The output of layer $i$ is the input of layer $i + 1$, so in
# a plain run the chain keeps its input and its $N$ outputs: $N + 1$
# activations, plus the weights, which stay in memory anyway.
#
# ### Counting what is saved
#
# An outer pair of saved-tensor hooks (step 38) sees every tensor that is
# saved outside a checkpoint. Inside a checkpoint the checkpoint's own hooks
# are the innermost pair, so they take those tensors and the outer hook never
# sees them. That is exactly right, because the checkpoint keeps only
# placeholders for them. The hook below records two things. The first is the
# bytes of every tensor it is given, which PyTorch's hooks can count the same
# way (the check at the end does). The second is the **activations**: the
# distinct arrays among them that are not parameters, in units of one
# $32 \times 64$ array.

# %%
def run_chain(layers, segments, use_reentrant=False, wrap=None):
    """Forward and backward through the chain in `segments` segments; returns (loss, bytes packed, activations)."""
    functions = layers if wrap is None else [wrap(layer) for layer in layers]
    packed, activations = [], {}

    def pack(v):
        packed.append(v.data.nbytes)
        if not isinstance(v, Parameter):
            activations[id(v.data)] = v.data  # held while counting, so that no id is reused
        return v.data  # the array: a saved output's Variable would refer back to its creator

    x = Variable(BATCH_DATA, requires_grad=False)
    with saved_tensors_hooks(pack, lambda data: data):
        y = checkpoint_sequential(functions, segments, x, use_reentrant=use_reentrant)
        loss = (y * y).sum()
    del y
    held = sum(a.nbytes for a in activations.values()) // ACTIVATION
    activations.clear()  # counted: from now on only the graph holds them
    loss.backward()
    for layer in layers:
        layer.cleargrads()
    return loss, sum(packed), held


chain = make_chain(16)
for segments in (1, 2, 4, 8, 16):
    _, packed, activations = run_chain(chain, segments)
    print(f"N = 16, k = {segments:2}: {packed:9,} bytes packed, {activations:2} activations")

# %% [markdown]
# The bytes packed are more than the activations. They include the weights,
# which a linear layer saves for its input's gradient, and they count an array
# each time it is saved: a $\tanh$ output is saved by the $\tanh$ and again by
# the next layer.
#
# ### Why $k + N/k$
#
# Split $N$ layers into $k$ segments of $N/k$ layers. After the forward pass,
# each of the first $k - 1$ segments holds its input, one activation each. The
# last segment ran plainly, so it holds its input and the $N/k$ activations of
# its layers. That makes $k + N/k$ activations in all, as counted above:
# $1 + 16 = 17$, $2 + 8 = 10$, $4 + 4 = 8$, $8 + 2 = 10$, $16 + 1 = 17$.
#
# During backward, each segment is recomputed just before it is needed. Then it
# holds its $N/k$ activations again, while the inputs of the segments before it
# wait. The peak is therefore also about $k + N/k$ activations, plus the
# gradients in flight.
#
# The function $f(k) = k + N/k$ has derivative $1 - N/k^2$. This is zero at
# $k = \sqrt N$, where $f = 2\sqrt N$. Equivalently,
# $k + N/k \ge 2\sqrt{k \cdot N/k} = 2\sqrt N$ (the arithmetic mean is at
# least the geometric mean), with equality when the two terms are equal. More segments mean more inputs to
# keep. Fewer segments mean longer segments to hold while one of them is
# recomputed. $\sqrt N$ balances the two. Notice the symmetry: checkpointing
# every layer ($k = N$) keeps exactly as much as checkpointing nothing, because
# in this chain a layer's input is all that a layer keeps.
#
# The price is time. Every layer in a checkpointed segment runs twice, so
# backward adds $(k - 1) \cdot N/k < N$ layer forwards: less than one extra
# forward pass, about a third more work for a forward and backward pass (a
# backward pass costs about twice a forward pass). Chen et al. (2016) proposed
# this schedule and reported about 30% more time.
#
# $\sqrt N$ is a whole number only for some $N$, and PyTorch's segmenting puts
# the remainder into the last segment, which then holds more. With
# $s = \lfloor N/k \rfloor$ the exact count is $k + N - (k - 1)s$, the input of
# each segment plus the outputs of the last. The schedule below takes the $k$
# with the smallest count (the smallest such $k$ when there is a tie, since it
# recomputes the least). For the depths below it is a power of 2 next to
# $\sqrt N$:

# %%
def activations_kept(depth, segments):
    """Activations held after the forward pass: the segments' inputs, and the last segment's outputs."""
    return segments + depth - (segments - 1) * (depth // segments)


def sqrt_schedule(depth):
    """The number of segments, near sqrt(depth), that keeps the fewest activations."""
    return min(range(1, depth + 1), key=lambda k: (activations_kept(depth, k), k))


DEPTHS = [8, 16, 32, 64, 128]
for depth in DEPTHS:
    k = sqrt_schedule(depth)
    print(f"N = {depth:3}: sqrt(N) = {math.sqrt(depth):5.2f}, k = {k:2} keeps {activations_kept(depth, k):2}"
          f" activations; k = round(sqrt(N)) = {round(math.sqrt(depth)):2} would keep"
          f" {activations_kept(depth, round(math.sqrt(depth))):2}")

# %% [markdown]
# For $N = 128$, rounding $\sqrt{128} \approx 11.3$ to 11 segments gives chunks
# of 11 layers and a last chunk of $128 - 10 \cdot 11 = 18$ layers. That keeps
# 29 activations, where 8 segments of 16 keep 24.
#
# ### Measuring the peak
#
# The saved-tensor count tells us what is held between the passes. To see the
# peak, and how memory moves during backward, we measure it. `tracemalloc`
# traces every allocation, and NumPy reports the data of its arrays under a
# domain of its own, so filtering on that domain gives the exact bytes of
# every array alive (as step 35 and the memory benchmark do). We take a
# sample:
#
# - after each layer's forward call, both in the forward pass and in a
#   recomputation (`is_recomputing()` tells them apart);
# - during backward, from a gradient hook (step 34) on each layer's output,
#   which runs when that output's gradient is complete, just before backward
#   goes through the layer.
#
# Each sample is the bytes held since the start, less the parameters'
# gradients, which every schedule ends up holding and which say nothing
# about activations. The peak is the largest sample. A sample lands between
# layers, not inside one, so the short-lived temporaries of a single
# operation are not in it; those are the same whatever the schedule.

# %%
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

# %% [markdown]
# Now the sweep: depths 8 to 128, each with three schedules. Plain is one
# segment, the √N schedule is `sqrt_schedule(N)`, and "every layer" is $N$
# segments. The table gives the activations saved (counted by the hook), the
# formula $k + N/k$, the peak in bytes and in activations, and how many layer
# calls the forward and backward passes made. Every figure is a count of
# bytes or calls, so it is the same on every machine.

# %%
results = {}
print(f"{'N':>4} {'schedule':>13} {'k':>4} {'saved':>6} {'k+N/k':>7} {'peak bytes':>11} {'peak':>7} {'calls':>6}")
for depth in DEPTHS:
    chain = make_chain(depth)
    for name, k in [("plain", 1), ("sqrt(N)", sqrt_schedule(depth)), ("every layer", depth)]:
        packed, activations, timeline = measure(chain, k)
        results[depth, name] = (k, packed, activations, peak(timeline), timeline.calls)
        print(f"{depth:4} {name:>13} {k:4} {activations:6} {k + depth / k:7.2f} {peak(timeline):11,}"
              f" {peak(timeline) / ACTIVATION:7.2f} {timeline.calls:6}")

# %% [markdown]
# The saved activations follow the count exactly: $N + 1$ for plain and for
# every layer checkpointed, and $k + N/k$ for the √N schedule whenever $k$
# divides $N$. At depth 128 the √N schedule keeps 24 activations where the
# plain run keeps 129.
#
# The peak equals the saved count (and 16 bytes: the loss and the seed of its
# gradient), and it comes at the start of backward. The batch is one of the
# saved activations, but it was in memory before the measurement began, so it
# does not count; in its place one array of gradient is alive, the gradient
# arriving at the network's output. (The product $y \cdot y$ sends a gradient
# to each of its two factors, and the engine adds them into one buffer; the two
# parts are freed as soon as they are added.) With checkpointing, backward
# never climbs back above that starting level, because no recomputed segment
# is longer than the last one, which ran plainly.
#
# The calls column counts the cost: $N$ plain, and $N + (k - 1)\,N/k$ with
# checkpointing, so 240 layer calls instead of 128 at depth 128, under the √N
# schedule.

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
depths = np.array(DEPTHS)
curve = np.geomspace(8, 128, 100)
styles = {"plain": dict(marker="o", markersize=9, fillstyle="none"), "sqrt(N)": dict(marker="s"),
          "every layer": dict(marker="^", linestyle="--")}
for axis, index, title in [(left, 2, "saved for backward (counted)"), (right, 3, "peak (tracemalloc)")]:
    for name, style in styles.items():
        values = [results[d, name][index] / (1 if index == 2 else ACTIVATION) for d in DEPTHS]
        axis.plot(depths, values, label=f"{name} (measured)", **style)
    axis.plot(curve, curve + 1, ":", color="grey", label="$k + N/k$ for $k = 1$ or $N$")
    axis.plot(curve, 2 * np.sqrt(curve), ":", color="black", label=r"$2\sqrt{N}$, $k = \sqrt{N}$")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log", base=2)
    axis.set_xticks(DEPTHS, [str(d) for d in DEPTHS])
    axis.set_yticks([4, 8, 16, 32, 64, 128], ["4", "8", "16", "32", "64", "128"])
    axis.set_xlabel("depth N (layers)")
    axis.set_title(title)
left.set_ylabel("activations (32 x 64 float64 arrays)")
left.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# On log-log axes, the plain run has slope 1 and the √N schedule slope 1/2.
# Checkpointing every layer lies on top of the plain run. The measured points
# of the √N schedule sit on $2\sqrt N$ at the depths that are perfect squares
# (16 and 64), and a little above it at the others. There no whole $k$ makes
# the two terms equal, and the best $k$ gives $3\sqrt{N/2}$, about 6% more than
# $2\sqrt N$. The peaks equal the counts.
#
# ## Memory over time
#
# The table gives one number per run. A picture of the whole run shows more.
# Here are the samples of a 16-layer chain, plain and with 4 segments, from the
# first layer of the forward pass to the last step of backward:

# %%
chain = make_chain(16)
timelines = {name: measure(chain, k)[2] for name, k in [("plain, k = 1", 1), ("sqrt(N), k = 4", 4)]}
fig, axis = plt.subplots(figsize=(9, 4))
for (name, timeline), style in zip(timelines.items(), ["o-", "s-"]):
    held = np.array([b for _, b in timeline.samples]) / ACTIVATION
    axis.plot(np.arange(len(held)), held, style, markersize=3, label=name)
    recomputed = [i for i, (phase, _) in enumerate(timeline.samples) if phase == "recompute"]
    if recomputed:
        axis.plot(recomputed, held[recomputed], "x", color="red", label="recomputation (k = 4)")
axis.axvline(15.5, color="grey", linestyle=":")  # 16 forward samples, then backward
axis.text(8, 19, "forward", ha="center")
axis.text(30, 19, "backward", ha="center")
axis.set_xlabel("sample (after each layer forward; before each layer backward)")
axis.set_ylabel("activations held")
axis.set_ylim(0, 21)
axis.legend()
fig.tight_layout()
plt.show()
for name, timeline in timelines.items():
    forward = max(b for phase, b in timeline.samples if phase == "forward")
    print(f"{name}: {len(timeline.samples)} samples; the most held in forward {forward / ACTIVATION:5.2f}, "
          f"in the whole run {peak(timeline) / ACTIVATION:5.2f} activations")

# %% [markdown]
# The plain run climbs by one activation per layer, to 16 (the batch was there
# before the first sample). At the start of backward it rises by one array,
# the gradient of the network's output, then falls by one activation per
# layer, as backward frees each saved tensor once it has used it (step 35).
#
# The checkpointed run climbs slowly. Inside a checkpointed segment it holds
# the inputs of the segments so far and the current layer's input and output:
# one more array after each segment. The last segment runs plainly and climbs
# by one per layer. Backward has a sawtooth shape. Before backward goes through
# a checkpointed segment, the segment is recomputed (the red crosses), so memory
# rises by a segment's activations, and backward through the segment frees
# them again. No tooth rises above the level at which backward started.
#
# ## DenseNet's memory-efficient bottleneck
#
# In a DenseNet (Huang et al., 2017) each layer of a dense block sees the
# features of every layer before it. Layer $i$ concatenates the block's input
# and the $i - 1$ outputs so far, and adds `growth` new features of its own.
# That concatenation and what the layer computes from it grow with every
# layer, so the memory of a block of $L$ layers grows like $L^2$.
# torchvision's `_DenseLayer` has a `memory_efficient` option for this
# (Pleiss et al., 2017, "Memory-efficient implementation of DenseNets"). It
# checkpoints the **bottleneck**, which is everything that touches the
# concatenation: concatenate, then BatchNorm, ReLU and a $1 \times 1$
# convolution that reduces the width to `bn_size * growth`. The rest of the
# layer (BatchNorm, ReLU, a $3 \times 3$ convolution down to `growth`
# features) runs plainly.
#
# On feature vectors instead of images, a $1 \times 1$ convolution is a linear
# layer: it mixes the channels at each pixel, and here there is one pixel. So
# is the $3 \times 3$ one, since with its padding only its centre meets the
# single pixel. We need two more operations, which this step adds to the
# package.
#
# ### `concatenate`
#
# `concatenate(xs, axis)` joins arrays along an existing axis, like
# `numpy.concatenate` and `torch.cat`. Its backward pass cuts the gradient
# back into pieces along the same axis, one piece per input. It saves no
# tensor, only where the pieces start and end (PyTorch's `cat` saves only the
# sizes too):

# %%
print(inspect.getsource(F.Concatenate))

# %%
a = Variable(np.arange(6.0).reshape(2, 3), name="a")
b = Variable(np.arange(4.0).reshape(2, 2) + 10, name="b")
y = concatenate([a, b], axis=1)
print("concatenate([a, b], axis=1) =\n" + show(y.data, 1))
print("saved tensors:", len(y.creator._saved))
(y * np.arange(1.0, 11.0).reshape(2, 5)).sum().backward()
print("a.grad =\n" + show(a.grad, 1))
print("b.grad =\n" + show(b.grad, 1))

# %% [markdown]
# The weights of the sum were $1, 2, \dots, 10$ row by row. $a$ gets the first
# three columns of them and $b$ the last two.
#
# ### `BatchNorm1d`
#
# Batch normalisation (Ioffe and Szegedy, 2015) normalises each feature $j$
# over the batch, then scales and shifts it with learned parameters
# $\gamma_j$ (`weight`) and $\beta_j$ (`bias`):
#
# $$\mu_j = \frac1n \sum_i x_{ij}, \qquad \sigma_j^2 = \frac1n \sum_i (x_{ij} - \mu_j)^2, \qquad
#   y_{ij} = \gamma_j \frac{x_{ij} - \mu_j}{\sqrt{\sigma_j^2 + \epsilon}} + \beta_j.$$
#
# In training mode it also keeps running estimates of the mean and the variance
# for later use in evaluation mode. They move towards each batch's statistics
# with `momentum` $m$ (0.1, as in PyTorch): $r \leftarrow (1 - m)\,r + m\,s$.
# The running variance takes the unbiased batch variance $\frac{n}{n-1}
# \sigma_j^2$, and `num_batches_tracked` counts the updates. In evaluation
# mode the layer normalises with the running statistics. tinypytorch builds it
# from the package's operations, so its gradients come from theirs:

# %%
print(inspect.getsource(BatchNorm1d.forward))

# %%
bn = BatchNorm1d(3)
rng = np.random.default_rng(2)
for _ in range(3):
    y = bn(Variable(rng.normal([1.0, -2.0, 0.0], [1.0, 0.5, 3.0], size=(16, 3))))
print("batch output: mean", show(y.data.mean(axis=0)), " std", show(y.data.std(axis=0)))
print("running_mean:", show(bn.running_mean), " running_var:", show(bn.running_var),
      " num_batches_tracked:", bn.num_batches_tracked)
bn.eval()
print("eval mode, x = [1, -2, 0]:", show(bn(Variable(np.array([[1.0, -2.0, 0.0]]))).data))

# %% [markdown]
# In training mode each batch comes out with mean 0 and standard deviation 1
# (just under 1, because of $\epsilon$). After three batches the running
# statistics have moved only $1 - 0.9^3 = 27\%$ of the way from their start
# $(0, 1)$ towards the data's $(1, -2, 0)$ and $(1, 0.25, 9)$.
#
# ### A dense layer and a dense block
#
# Here are torchvision's `_DenseLayer` and `_DenseBlock`, with linear layers in
# place of the convolutions. `bottleneck` is the piece that is checkpointed
# when `memory_efficient` is set, and only when some input needs a gradient,
# as in torchvision. torchvision's current code passes `use_reentrant=False`,
# and so do we:

# %%
class DenseLayer(Layer):
    """torchvision's _DenseLayer on feature vectors: 1x1 and 3x3 convolutions become linear layers."""

    def __init__(self, in_features, growth, bn_size, memory_efficient, rng):
        super().__init__()
        self.norm1 = BatchNorm1d(in_features)
        self.linear1 = Linear(in_features, bn_size * growth, bias=False, rng=rng)
        self.norm2 = BatchNorm1d(bn_size * growth)
        self.linear2 = Linear(bn_size * growth, growth, bias=False, rng=rng)
        self.memory_efficient = memory_efficient

    def bottleneck(self, *features):
        return self.linear1(F.relu(self.norm1(concatenate(features, axis=1))))

    def forward(self, features):
        if self.memory_efficient and any(f.requires_grad for f in features):
            out = checkpoint(self.bottleneck, *features, use_reentrant=False)
        else:
            out = self.bottleneck(*features)
        return self.linear2(F.relu(self.norm2(out)))


class DenseBlock(Layer):
    """`num_layers` dense layers; each sees the block's input and every layer's output before it."""

    def __init__(self, num_layers, in_features, growth, bn_size=4, memory_efficient=False, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.layers = []
        for i in range(num_layers):
            layer = DenseLayer(in_features + i * growth, growth, bn_size, memory_efficient, rng)
            setattr(self, f"denselayer{i + 1}", layer)
            self.layers.append(layer)

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return concatenate(features, axis=1)


IN_FEATURES, GROWTH = 10, 6
block_rng = np.random.default_rng(3)
BLOCK_INPUT = block_rng.standard_normal((BATCH, IN_FEATURES))
BLOCK_WEIGHTS = block_rng.standard_normal((BATCH, IN_FEATURES + 4 * GROWTH))


def dense_block(memory_efficient, num_layers=4):
    """A block with batch-norm parameters away from their initial 1 and 0, so that their gradients are tested."""
    block = DenseBlock(num_layers, IN_FEATURES, GROWTH, memory_efficient=memory_efficient)
    rng = np.random.default_rng(4)
    for layer in block.layers:
        for norm in (layer.norm1, layer.norm2):
            norm.weight.data = rng.uniform(0.5, 1.5, norm.num_features)
            norm.bias.data = rng.uniform(-0.5, 0.5, norm.num_features)
    return block


print("features entering each layer:", [layer.norm1.num_features for layer in dense_block(False).layers],
      " bottleneck width:", 4 * GROWTH, " block output:", IN_FEATURES + 4 * GROWTH)

# %% [markdown]
# ### What the block keeps
#
# The same counting hook as for the chain now counts the distinct arrays
# saved, other than parameters, in a forward pass through the block. The
# gradients are those of $\sum_{ij} w_{ij}\, y_{ij}$ for fixed random weights
# $w$, so that every output feature matters. Both versions are computed and
# compared:

# %%
def block_pass(block, x0=BLOCK_INPUT, weights=BLOCK_WEIGHTS):
    """Forward (under a counting hook) and backward; returns (bytes, arrays) saved and the input."""
    activations = {}

    def pack(v):
        if not isinstance(v, Parameter):
            activations[id(v.data)] = v.data
        return v.data

    x = Variable(x0.copy(), name="x")
    with saved_tensors_hooks(pack, lambda data: data):
        loss = (block(x) * weights).sum()
    loss.backward()
    return sum(a.nbytes for a in activations.values()), len(activations), x


blocks = {efficient: dense_block(efficient) for efficient in (False, True)}
passes = {efficient: block_pass(block) for efficient, block in blocks.items()}
for efficient, (held, count, _) in passes.items():
    print(f"memory_efficient={efficient!s:5}: {count} arrays saved, {held:7,} bytes")
(_, _, x_plain), (_, _, x_efficient) = passes[False], passes[True]
pairs = [(x_plain, x_efficient), *zip(blocks[False].params(), blocks[True].params(), strict=True)]
difference = max(np.abs(p.grad.data - q.grad.data).max() for p, q in pairs)
print("largest difference between the two versions' gradients (input and parameters):", difference)

# %% [markdown]
# Both versions compute the same numbers in the same order, the recomputation
# included, so their gradients are equal to the last bit. The efficient version
# keeps about a third fewer bytes. In each layer the plain bottleneck saves
# three arrays as wide as the concatenation: BatchNorm's centred copy
# $x - \mu$ and its normalised copy $(x - \mu)/\sqrt{\sigma^2 + \epsilon}$, and the
# output of the ReLU, which the linear layer needs for its weight's gradient.
# The efficient version keeps none of them. Its checkpoints keep their inputs
# instead: the block's input and the outputs of the layers so far, 6 features
# wide each. What the second half of each layer keeps, 24 features wide, is the
# same in both.
#
# The savings grow with depth. Layer $i$'s concatenation is
# $10 + 6(i - 1)$ features wide, so the plain block keeps a number of bytes
# quadratic in the number of layers $L$. The efficient block keeps a number
# linear in $L$:

# %%
print(f"{'layers':>6} {'plain bytes':>12} {'efficient bytes':>16} {'ratio':>6}")
for num_layers in (2, 4, 8, 16, 32):
    width = IN_FEATURES + num_layers * GROWTH
    weights = np.random.default_rng(5).standard_normal((BATCH, width))
    held = [block_pass(dense_block(efficient, num_layers), weights=weights)[0] for efficient in (False, True)]
    print(f"{num_layers:6} {held[0]:12,} {held[1]:16,} {held[0] / held[1]:6.2f}")

# %% [markdown]
# Each doubling of the layers about doubles the efficient block's bytes. The
# plain block's grow by 2.3, 2.5, 2.8 and 3.2 times, on their way to the factor
# 4 of a quadratic. Pleiss et al. report that with the memory of the feature
# maps made linear in depth, a single GPU could train DenseNets of 14 million
# parameters instead of 4 million.
#
# ## BatchNorm under a checkpoint: statistics updated once
#
# A checkpointed function runs twice, once in the forward pass and once when
# backward recomputes it. A BatchNorm inside it therefore sees the same batch
# twice. The normalised output is the same both times. The running statistics,
# though, are state that each call changes. PyTorch updates them on both calls:
# `num_batches_tracked` counts 2 for one batch, and the running mean moves
# towards the batch mean twice (reported in pytorch/pytorch#96136). This is
# exactly what happens to the first BatchNorm of every layer of a DenseNet
# built with `memory_efficient=True`.
#
# tinypytorch's `BatchNorm1d` asks `recomputation.is_recomputing()` before
# updating, and a recomputation leaves the statistics alone. The module
# `tinypytorch.recomputation`, which checkpointing and reversible blocks (steps
# 42-43) share, counts the recomputations that are running:

# %%
print(inspect.getsource(recomputation.is_recomputing))
print(inspect.getsource(recomputation.replaying))

# %% [markdown]
# Here is one `BatchNorm1d` on one batch, run plainly and inside a checkpoint
# of each kind, in both frameworks. PyTorch appears ahead of the final check,
# as in step 38, because its behaviour is what this section is about. The loss
# is a weighted sum of the outputs, and its backward pass needs what the
# BatchNorm saved, so the checkpoint recomputes it.

# %%
import torch

torch.set_num_threads(1)  # arrays this small gain nothing from threads

NORM_WEIGHTS = np.random.default_rng(7).standard_normal((BATCH, IN_FEATURES))
WAYS = ["plain", "use_reentrant=True", "use_reentrant=False"]


def norm_step(way):
    """One batch through a fresh BatchNorm1d, run `way`, and backward: the layer."""
    norm = BatchNorm1d(IN_FEATURES)
    x = Variable(BLOCK_INPUT)
    y = norm(x) if way == "plain" else checkpoint(norm, x, use_reentrant=way == "use_reentrant=True")
    (y * NORM_WEIGHTS).sum().backward()
    return norm


def torch_norm_step(way):
    """The same in PyTorch, with torch.utils.checkpoint.checkpoint."""
    norm = torch.nn.BatchNorm1d(IN_FEATURES, dtype=torch.float64)
    x = torch.tensor(BLOCK_INPUT, requires_grad=True)
    if way == "plain":
        y = norm(x)
    else:
        y = torch.utils.checkpoint.checkpoint(norm, x, use_reentrant=way == "use_reentrant=True")
    (y * torch.from_numpy(NORM_WEIGHTS)).sum().backward()
    return norm


print(f"{'':34} {'num_batches_tracked':>19}   running_mean[:3]")
for way in WAYS:
    norm = norm_step(way)
    print(f"{'tinypytorch, ' + way:34} {norm.num_batches_tracked:19}   {show(norm.running_mean[:3])}")
for way in WAYS:
    norm = torch_norm_step(way)
    print(f"{'PyTorch, ' + way:34} {norm.num_batches_tracked.item():19}   {show(norm.running_mean[:3].numpy())}")
print(f"{'the batch mean / 10':34} {'':19}   {show(BLOCK_INPUT.mean(axis=0)[:3] / 10)}")

# %% [markdown]
# One batch, starting from a running mean of 0 with momentum 0.1, should leave
# the running mean at a tenth of the batch mean. Both plain runs do, and so
# does tinypytorch under either checkpoint. PyTorch's checkpointed runs have
# moved twice, $0.1 + 0.9 \cdot 0.1 = 0.19$ of the way, and count two batches.
# The running variance is off in the same way, and with it the layer's output
# in evaluation mode. The final check shows the same in the DenseNet block:
# there PyTorch's first BatchNorm of each layer counts 2 and the second, outside
# the checkpoint, counts 1.
#
# In PyTorch the usual workarounds are to replace the momentum $m$ by
# $m' = 1 - \sqrt{1 - m}$ for layers that will be recomputed, or to patch the
# BatchNorms so that they skip the update during recomputation (fairscale's
# `patch_batchnorm`). The first is exact for the statistics, because both
# updates use the same batch: $(1 - m')^2 = 1 - m$, so after two updates the
# old value keeps weight $1 - m$ and the batch gets weight $m$. The count
# still says 2:

# %%
norm = torch.nn.BatchNorm1d(IN_FEATURES, momentum=1 - math.sqrt(1 - 0.1), dtype=torch.float64)
x = torch.tensor(BLOCK_INPUT, requires_grad=True)
y = torch.utils.checkpoint.checkpoint(norm, x, use_reentrant=False)
(y * torch.from_numpy(NORM_WEIGHTS)).sum().backward()
print("PyTorch, momentum 1 - sqrt(0.9), checkpointed: running_mean[:3] =", show(norm.running_mean[:3].numpy()),
      " num_batches_tracked =", norm.num_batches_tracked.item())

# %% [markdown]
# ## Bad input
#
# `checkpoint_sequential` needs between 1 and `len(functions)` segments. With
# more segments than functions, PyTorch's chunk size would be 0. PyTorch then
# fails inside its loop with a message about `range`. With 0 segments it
# divides by zero, and with a negative number it checkpoints nothing and says
# nothing. tinypytorch says what was wrong:

# %%
functions = [logged(i) for i in range(3)]
for segments in (0, 4, -1):
    try:
        checkpoint_sequential(functions, segments, Variable(np.ones(2)), use_reentrant=False)
    except ValueError as error:
        print("ValueError:", error)
    try:
        torch.utils.checkpoint.checkpoint_sequential([torch.sin] * 3, segments, torch.ones(2, requires_grad=True),
                                                     use_reentrant=False)
        print("  PyTorch: no error; every function ran plainly")
    except (ValueError, ZeroDivisionError) as error:
        print(f"  PyTorch: {type(error).__name__}: {error}")
try:
    checkpoint_sequential(functions, 1.5, Variable(np.ones(2)))
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# `BatchNorm1d` checks the shape of its input. In training mode it also needs
# more than one row, as PyTorch's does: one row is its own mean, so every
# output would be $\beta$ whatever the input, and the unbiased variance of the
# running statistics would divide by $n - 1 = 0$:

# %%
for shape in [(8, 4), (8, 3, 2), (1, 3)]:
    try:
        BatchNorm1d(3)(Variable(np.ones(shape)))
    except ValueError as error:
        print("ValueError:", error)

# %% [markdown]
# `concatenate` needs inputs whose shapes agree except along the axis, and an
# axis the inputs have:

# %%
attempts = [([np.ones((2, 3)), np.ones((2, 4))], 0), ([np.ones((2, 3)), np.ones((2, 4, 1))], 1),
            ([np.ones((2, 3)), np.ones((2, 4))], 2), ([], 0)]
for arrays, axis in attempts:
    try:
        concatenate([Variable(a) for a in arrays], axis=axis)
    except ValueError as error:
        print("ValueError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# - `checkpoint_sequential` with 1, 2 and 3 segments, reentrant and not: the
#   gradients of a 7-layer chain (input and parameters) equal those of the
#   same chain in torch, run by `torch.utils.checkpoint.checkpoint_sequential`
#   with the same `use_reentrant`;
# - `concatenate`: values and gradients equal `torch.cat`'s along each axis;
# - `BatchNorm1d`: outputs and gradients in training and evaluation mode, and
#   the running statistics after three steps, equal `torch.nn.BatchNorm1d`'s;
# - the memory-efficient dense block: the gradients of its input and of all
#   its parameters equal those of a torch twin that checkpoints the same
#   bottleneck with `torch.utils.checkpoint.checkpoint(use_reentrant=False)`;
#   the first BatchNorm counts 1 batch here and 2 in torch, and tinypytorch's
#   running statistics equal torch's from a plain run;
# - the bytes saved by the chain, plain and checkpointed, for depths 8, 16
#   and 32, equal PyTorch's, counted by the same pack hooks.

# %%
def torch_twin(module, parameters):
    """`module` (a torch.nn.Linear or BatchNorm1d, float64) with `parameters`' values copied in."""
    with torch.no_grad():
        for p_t, p in zip(module.parameters(), parameters, strict=True):
            p_t.copy_(torch.from_numpy(p.data))
    return module


def torch_chain(layers):
    """The chain in torch: one Sequential(Linear, Tanh) per layer, with the same weights."""
    return [torch.nn.Sequential(torch_twin(torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64), layer.linear.params()),
                                torch.nn.Tanh()) for layer in layers]


def assert_close(ours, theirs, what):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(theirs).max()), err_msg=what)


chain = make_chain(7)
chain_t = torch_chain(chain)
for use_reentrant in (True, False):
    for segments in (1, 2, 3):
        x = Variable(BATCH_DATA.copy())
        loss = (checkpoint_sequential(chain, segments, x, use_reentrant=use_reentrant) ** 2).sum()
        loss.backward()
        x_t = torch.tensor(BATCH_DATA, requires_grad=True)
        loss_t = (torch.utils.checkpoint.checkpoint_sequential(chain_t, segments, x_t,
                                                                use_reentrant=use_reentrant) ** 2).sum()
        loss_t.backward()
        assert_close(loss.data, loss_t.item(), "loss")
        assert_close(x.grad.data, x_t.grad.numpy(), "input gradient")
        params_t = [p for m in chain_t for p in m.parameters()]
        for p, p_t in zip([p for layer in chain for p in layer.params()], params_t, strict=True):
            assert_close(p.grad.data, p_t.grad.numpy(), "parameter gradient")
            p.cleargrad()
            p_t.grad = None
print("checkpoint_sequential, 7 layers, 1/2/3 segments, use_reentrant True and False: grads equal torch's")

rng = np.random.default_rng(6)
for shapes, axis in [([(2, 3), (2, 1), (2, 4)], 1), ([(1, 3), (4, 3)], 0), ([(2, 2, 3), (2, 1, 3)], -2)]:
    arrays = [rng.standard_normal(shape) for shape in shapes]
    xs, xs_t = [Variable(a) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]
    y, y_t = concatenate(xs, axis=axis), torch.cat(xs_t, dim=axis)
    w = rng.standard_normal(y.shape)
    (y * w).sum().backward()
    (y_t * torch.from_numpy(w)).sum().backward()
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())
    for x, x_t in zip(xs, xs_t):
        np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())
print("concatenate: values and gradients equal torch.cat's, along axes 1, 0 and -2")

bn, bn_t = BatchNorm1d(5), torch.nn.BatchNorm1d(5, dtype=torch.float64)
gamma, beta = rng.uniform(0.5, 1.5, 5), rng.uniform(-0.5, 0.5, 5)
bn.weight.data, bn.bias.data = gamma.copy(), beta.copy()
with torch.no_grad():
    bn_t.weight.copy_(torch.from_numpy(gamma))
    bn_t.bias.copy_(torch.from_numpy(beta))
for mode in ("train", "train", "train", "eval"):
    bn.train(mode == "train")
    bn_t.train(mode == "train")
    data, w = rng.normal(2.0, 3.0, (8, 5)), rng.standard_normal((8, 5))
    x, x_t = Variable(data.copy()), torch.tensor(data, requires_grad=True)
    y, y_t = bn(x), bn_t(x_t)
    (y * w).sum().backward()
    (y_t * torch.from_numpy(w)).sum().backward()
    assert_close(y.data, y_t.detach().numpy(), f"BatchNorm1d output, {mode}")
    assert_close(x.grad.data, x_t.grad.numpy(), f"BatchNorm1d input gradient, {mode}")
    assert_close(bn.weight.grad.data, bn_t.weight.grad.numpy(), "BatchNorm1d weight gradient")
    assert_close(bn.bias.grad.data, bn_t.bias.grad.numpy(), "BatchNorm1d bias gradient")
    bn.cleargrads()
    bn_t.zero_grad()
    assert_close(bn.running_mean, bn_t.running_mean.numpy(), "running_mean")
    assert_close(bn.running_var, bn_t.running_var.numpy(), "running_var")
assert bn.num_batches_tracked == bn_t.num_batches_tracked.item() == 3
print("BatchNorm1d: outputs and gradients in training and eval mode, running statistics after 3 steps:",
      "equal torch's")


class TorchDenseLayer(torch.nn.Module):
    """torchvision's _DenseLayer with linear layers for the convolutions: the twin of a DenseLayer."""

    def __init__(self, layer, memory_efficient):
        super().__init__()
        in_features, hidden, growth = layer.norm1.num_features, layer.norm2.num_features, layer.linear2.weight.shape[0]
        double = {"dtype": torch.float64}
        self.norm1 = torch_twin(torch.nn.BatchNorm1d(in_features, **double), layer.norm1.params())
        self.relu1 = torch.nn.ReLU()
        self.conv1 = torch_twin(torch.nn.Linear(in_features, hidden, bias=False, **double), layer.linear1.params())
        self.norm2 = torch_twin(torch.nn.BatchNorm1d(hidden, **double), layer.norm2.params())
        self.relu2 = torch.nn.ReLU()
        self.conv2 = torch_twin(torch.nn.Linear(hidden, growth, bias=False, **double), layer.linear2.params())
        self.memory_efficient = memory_efficient

    def bn_function(self, inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def forward(self, features):
        if self.memory_efficient and any(f.requires_grad for f in features):
            out = torch.utils.checkpoint.checkpoint(lambda *inputs: self.bn_function(inputs), *features,
                                                    use_reentrant=False)
        else:
            out = self.bn_function(features)
        return self.conv2(self.relu2(self.norm2(out)))


class TorchDenseBlock(torch.nn.Module):
    """torchvision's _DenseBlock: each layer gets the list of all features so far."""

    def __init__(self, block, memory_efficient):
        super().__init__()
        self.layers = torch.nn.ModuleList([TorchDenseLayer(layer, memory_efficient) for layer in block.layers])

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


def torch_block_pass(block_t):
    """Forward and backward through the torch block, with the loss of block_pass: the input's gradient."""
    x_t = torch.tensor(BLOCK_INPUT, requires_grad=True)
    (block_t(x_t) * torch.from_numpy(BLOCK_WEIGHTS)).sum().backward()
    return x_t.grad.numpy()


efficient_block = dense_block(True)  # fresh running statistics
block_t, plain_block_t = TorchDenseBlock(efficient_block, True), TorchDenseBlock(efficient_block, False)
_, _, x = block_pass(efficient_block)
assert_close(x.grad.data, torch_block_pass(block_t), "dense block input gradient")
torch_block_pass(plain_block_t)
for p, p_t in zip(efficient_block.params(), block_t.parameters(), strict=True):
    assert_close(p.grad.data, p_t.grad.numpy(), "dense block parameter gradient")
for layer, t, t_plain in zip(efficient_block.layers, block_t.layers, plain_block_t.layers):
    assert layer.norm1.num_batches_tracked == 1 and t.norm1.num_batches_tracked.item() == 2
    assert layer.norm2.num_batches_tracked == 1 and t.norm2.num_batches_tracked.item() == 1
    assert_close(layer.norm1.running_mean, t_plain.norm1.running_mean.numpy(), "running_mean")
    assert_close(layer.norm1.running_var, t_plain.norm1.running_var.numpy(), "running_var")
    assert np.abs(layer.norm1.running_mean - t.norm1.running_mean.numpy()).max() > 1e-3
print(f"memory-efficient dense block: the input's and {len(list(block_t.parameters()))} parameters' gradients",
      "equal torch's (checkpoint, use_reentrant=False); norm1 counts 1 batch (torch: 2), its running statistics",
      "equal torch's plain run")


def torch_chain_bytes(modules, segments):
    packed = []
    x_t = torch.tensor(BATCH_DATA)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.nelement() * t.element_size()) or t,
                                                  lambda t: t):
        y_t = torch.utils.checkpoint.checkpoint_sequential(modules, segments, x_t, use_reentrant=False)
        loss_t = (y_t * y_t).sum()
    loss_t.backward()
    return sum(packed)


for depth in (8, 16, 32):
    chain = make_chain(depth)
    chain_t = torch_chain(chain)
    row = []
    for segments in (1, sqrt_schedule(depth), depth):
        _, packed, _ = run_chain(chain, segments)
        assert packed == torch_chain_bytes(chain_t, segments), (depth, segments)
        row.append(f"k={segments}: {packed:,}")
    print(f"depth {depth:2}, bytes saved, equal in both: {'; '.join(row)}")
print("PyTorch check passed: checkpoint_sequential, concatenate, BatchNorm1d and DenseNet block grads equal torch's; "
      "BatchNorm counts 1 batch under checkpoint (torch 2); saved bytes equal")
