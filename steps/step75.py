# %% [markdown]
# # Step 75: Capstone, wider — the deepest network on N processes
#
# [Step 66](step66.ipynb) asked: with this much memory, how deep a network
# can one process train? Stage 7 gave N processes, each with its own
# memory. This page asks the question again with a **budget per
# process**: which way of training on N processes reaches the deepest
# network whose training step fits, in every process, under the budget?
# The network, the batch and the optimizer are step 66's: `Linear(64, 64)`
# and tanh, `depth` residual layers `x + tanh(Linear(64, 64)(x))`,
# `Linear(64, 10)`; float32, batches of 256 digits, Adam. Three ways:
#
# - **data parallel** ([step 73](step73.ipynb)): every process holds the
#   whole model and Adam's state, and trains on 256/N of the samples;
# - **fully_shard** ([step 74](step74.ipynb)): each process holds 1/N of
#   every parameter, of its gradient and of Adam's state, and gathers a
#   layer's whole parameters only while the layer computes;
# - **fully_shard + checkpointing**: the same, with each residual layer
#   checkpointed ([step 43](step43.ipynb)): backward runs it again.
#
# The last one needs the package to compose sharding with recomputation,
# which is this step's change to `fully_shard`. The page runs N = 1 and 2;
# the benchmark `bench/results/capstone_distributed.md` adds N = 4.

# %%
import math
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
import tinypytorch.distributed as dist
from tinypytorch import datasets, nn, optim
from tinypytorch.distributed.fsdp import FSDPState, fully_shard
from tinypytorch.nn.parallel import DistributedDataParallel
from tinypytorch.utils.checkpoint import checkpoint
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.memory import peak_memory


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-10', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


WIDTH, BATCH, LR = 64, 256, 3e-3
images, labels = datasets.load_digits()
order = np.random.default_rng(0).permutation(len(images))
pixels = (images.reshape(len(images), -1) / 16).astype(np.float32)[order]
labels = labels[order]
x_train, y_train, x_test, y_test = pixels[:1437], labels[:1437], pixels[1437:], labels[1437:]
xb, yb = x_train[:BATCH], y_train[:BATCH]


def drawn(k, fan_in, fan_out, dtype=np.float32):
    """Layer k's (W, b), uniform in +-1/sqrt(fan_in) as PyTorch draws them, from a seed of its own: every
    rank draws the same, one layer at a time."""
    rng = np.random.default_rng([0, k])
    W, b = (rng.uniform(-1, 1, shape) / math.sqrt(fan_in) for shape in ((fan_out, fan_in), (fan_out,)))
    return W.astype(dtype), b.astype(dtype)


def share(array, rank, n):
    """Rank `rank`'s rows of a batch cut in n."""
    size = len(array) // n
    return array[rank * size:(rank + 1) * size]


def linear(k, fan_in, fan_out, dtype=np.float32):
    layer = nn.Linear(fan_in, fan_out)
    layer.weight.data, layer.bias.data = drawn(k, fan_in, fan_out, dtype)
    return layer


# %% [markdown]
# ## A rank's bytes, counted
#
# Before measuring, the accounting. A residual layer has
# ψ = 64 · 64 + 64 parameters. Trained with Adam in float32, each costs
# 16 bytes: 4 for the weight, 4 for its gradient, 8 for Adam's two
# moments. Data parallel keeps all 16 on every rank; fully_shard keeps
# 16/N (ZeRO-3). For backward the layer also saves activations: its
# `Linear` saves its input and tanh its output, two rows of 64 float32 a
# sample. Each rank has 256/N samples, whichever way it trains: sharding
# does not shrink the activations of a rank's own samples. A checkpointed
# layer keeps only its input, one row a sample, and recomputes the rest
# in backward. What one more residual layer adds to a rank, if everything
# were held at once:

# %%
psi = WIDTH * WIDTH + WIDTH
ROWS_SAVED = {"data parallel": 2, "fully_shard": 2, "fully_shard + checkpointing": 1}
TECHNIQUES = list(ROWS_SAVED)


def counted(technique, n):
    """(state, activations): bytes one residual layer adds to each of n ranks."""
    state = 16 * psi // (1 if technique == "data parallel" else n)
    return state, ROWS_SAVED[technique] * WIDTH * 4 * (BATCH // n)


print(f"one residual layer: ψ = {psi} parameters, 16ψ = {16 * psi} bytes")
print(f"a batch of {BATCH} samples, {BATCH}/N a rank")
for n in (1, 2, 4):
    for t in TECHNIQUES:
        state, acts = counted(t, n)
        print(f"N = {n}  {t:>27}: {state:6d} + {acts:6d} = {(state + acts) / 1024:5.1f} KiB")

# %% [markdown]
# Data parallel halves the activations with N = 2 (half the samples) but
# not the 16ψ; fully_shard halves both; checkpointing halves the
# activations once more. So, by the count, the combination goes deepest,
# and its advantage grows with N. The measurement below says whether a
# rank really holds what the count says.
#
# ## Sharding meets recomputation
#
# A checkpointed layer runs its forward again inside backward. Under
# `fully_shard` that second forward calls the layer's hooks again. The
# pre-forward hook puts the whole parameters in the layer's slots (mostly
# gathered already: the hook on the layer's outputs gathers them when
# backward reaches the layer) and must not start the bookkeeping of a new
# pass; the post-forward hook must not give them back, since the layer's
# backward comes next and needs them. Both ask `is_recomputing()` (the
# flag checkpoint sets while it recomputes; step 45's BatchNorm asks it
# too). After the layer's gradients are reduce-scattered, `post_backward`
# frees the whole parameters and puts the shards back into the slots.
# The hook on the outputs also puts the whole parameters into the slots,
# so that a checkpoint *inside* the layer's forward recomputes with them.
# PyTorch's `fully_shard` does the same, with a training state in place
# of the flag.

# %%
show_code(FSDPState.pre_forward, FSDPState.post_forward, FSDPState.pre_backward)


# %% [markdown]
# ## One network, three ways to train it on N ranks
#
# Each rank builds the network one layer at a time, and with fully_shard
# shards each residual layer as soon as it exists, so that no rank holds
# the whole model even while building it (PyTorch builds on the `meta`
# device for the same reason). `trainer` returns one training step;
# `share(xb, rank, n)` is a rank's 256/N samples of the batch.

# %%
class Residual(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.body = nn.Sequential(layer, nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


class Net(nn.Sequential):
    segment = None  # with checkpointing: how many residual layers are checkpointed together

    def forward(self, x):
        first, tanh, *residuals, last = self
        x = tanh(first(x))
        size = self.segment or len(residuals)
        for start in range(0, len(residuals), size):
            part = nn.Sequential(*residuals[start:start + size])  # checkpointed: run again in backward
            x = checkpoint(part, x, use_reentrant=False) if self.segment else part(x)
        return last(x)


def build(technique, depth, dtype=np.float32):
    sharded = technique.startswith("fully_shard")
    layers = [linear(0, 64, WIDTH, dtype), nn.Tanh()]
    for k in range(1, depth + 1):
        layers.append(Residual(linear(k, WIDTH, WIDTH, dtype)))
        if sharded:
            fully_shard(layers[-1])
    model = Net(*layers, linear(depth + 1, WIDTH, 10, dtype))
    model.segment = 1 if technique.endswith("checkpointing") else None
    return fully_shard(model) if sharded else DistributedDataParallel(model)


def trainer(technique, depth, dtype=np.float32):
    model = build(technique, depth, dtype)
    opt = optim.Adam(model.parameters(), lr=LR)  # fully_shard: over this rank's shards

    def step(x, y):
        loss = tp.cross_entropy(model(tp.Variable(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step, model



# %% [markdown]
# ## Each rank's peak, measured
#
# As in step 66, `peak_memory` runs the whole cost of training under
# `tracemalloc` in each rank: building the model and its optimizer, then
# two steps, so that Adam's moments exist in the second. What a rank
# counts is what it really holds: its shards or whole arrays, the
# activations of its samples, the buffers a collective fills, the graph's
# Python objects. A network fits when its peak fits on **every** rank: the
# ranks agree on the largest of their peaks (`all_reduce` with `MAX`),
# so that all of them take the same next depth in the search. The search
# is step 66's: doubling, then bisection, up to 24 layers.

# %%
def peak(technique, depth, rank, n):
    x, y = share(xb, rank, n), share(yb, rank, n)

    def work():
        step, _ = trainer(technique, depth)
        step(x, y), step(x, y)
    largest = tp.tensor([float(peak_memory(work)[0])])
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return int(largest.item())


def deepest(fits, cap=24):
    low, high = 0, 1
    while high <= cap and fits(high):
        low, high = high, 2 * high
    high = min(high, cap + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


BUDGET, GRID = 1_680_000, (1, 2, 4, 8, 16)


def survey(rank, n):
    """Every technique's peaks on the grid and its deepest network within BUDGET, on n ranks."""
    tracemalloc.start()  # once, left on: stopped while gloo's threads freed arrays, it crashed a rank
    for t in TECHNIQUES:  # a first step of each, not measured: one-time allocations (caches) out of the way
        trainer(t, 1)[0](share(xb, rank, n), share(yb, rank, n))
    peaks = {}

    def measured(t, d):
        if (t, d) not in peaks:
            peaks[t, d] = peak(t, d, rank, n)
        return peaks[t, d]
    depths = {t: deepest(lambda d, t=t: measured(t, d) <= BUDGET) for t in TECHNIQUES}
    for t in TECHNIQUES:
        for d in GRID:
            measured(t, d)
    return peaks, depths


runs = {n: dist.spawn(survey, n, args=(n,))[0] for n in (1, 2)}
print(f"budget {BUDGET / 1e6:.2f} MB a process; the deepest network within it:")
for t in TECHNIQUES:
    print(f"{t:>27}: " + ", ".join(f"N = {n}: {runs[n][1][t]:2d}" for n in runs))

# %% [markdown]
# The slope of each curve is what a residual layer really adds to a rank:
# the measured peaks at depths 8 and 16, against the count above. The
# slope lies a little above the count; by how much exactly varies by a few
# KiB from run to run (the Python objects beside the arrays), so the page
# prints a bound it keeps (the benchmark prints the slopes themselves).

# %%
for n, (peaks, _) in runs.items():
    for t in TECHNIQUES:
        slope, count = (peaks[t, 16] - peaks[t, 8]) / 8, sum(counted(t, n))
        print(f"N = {n}  {t:>27}: {count / 1024:5.1f} KiB a layer counted; "
              f"measured above it by less than 30 KiB: {0 <= slope - count < 30 * 1024}")


# %% tags=["hide-input"]
def picture():
    fig, ax = plt.subplots(figsize=(9, 4.8))
    for k, t in enumerate(TECHNIQUES):
        for n, style in ((1, "-"), (2, "--")):
            peaks, depths = runs[n]
            measured = sorted(d for u, d in peaks if u == t)  # the grid and the search's depths
            ax.plot(measured, [peaks[t, d] / 1024 for d in measured], style, color=f"C{k}", marker="o",
                    ms=3, label=f"{t}, N = {n}")
            ax.plot(depths[t], peaks[t, depths[t]] / 1024, marker="*", ms=13, color=f"C{k}", ls="none")
    ax.axhline(BUDGET / 1024, color="k", ls=":", lw=1)
    ax.text(0.5, BUDGET / 1024 + 60, f"budget: {BUDGET / 1e6:.2f} MB a process", fontsize=9)
    ax.set(xlabel="depth (residual layers)", ylabel="peak of a rank (KiB)", xlim=(0, 25), ylim=(0, None),
           title="The largest peak of the ranks against depth; ★ the deepest within the budget")
    ax.legend(fontsize=8, loc="lower right")
    plt.show()

picture()

# %% [markdown]
# Solid lines are one process, dashed two; each star is the deepest
# network within the budget. The curves are straight: every layer adds
# the same bytes. The measured slopes lie a little above the count:
# beside the arrays, each layer adds the graph's Python objects (its
# nodes, the hooks, checkpoint's records of what to recompute). On one
# process, fully_shard only adds copies (the one shard is the whole
# parameter, and gathering it makes a second array), so it reaches less
# deep than data parallel; on two, its halved 16ψ pays. Checkpointing
# halves the activations beside it, and on two processes the
# combination trains the deepest network, 1.7 times data parallel's
# depth (printed below). The benchmark shows the gap growing with N: at
# N = 4 fully_shard divides the 16ψ by 4, data parallel still not at all.

# %%
print("on two processes, deepest against data parallel's:",
      ", ".join(f"{t} {runs[2][1][t] / runs[2][1]['data parallel']:.1f}×" for t in TECHNIQUES[1:]))

# %% [markdown]
# ## Check against PyTorch
#
# On two processes, the float64 network of depth 4 trained three Adam
# steps with fully_shard and each residual layer checkpointed, each rank
# on half the batch, must give the parameters (gathered with
# `full_tensor`) that one process gives training the plain network on
# the whole batch, and that PyTorch gives with its own `fully_shard` and
# `torch.utils.checkpoint` on a twin with the same weights (relative
# difference below 1e-10). Then the float32 network trains two epochs
# (five batches of 256 an epoch, the last 157 digits dropped so that the
# two ranks' shares are equal) both ways; the test accuracies must agree.

# %% tags=["hide-cell"]
import torch  # noqa: E402
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402
from torch.utils.checkpoint import checkpoint as torch_checkpoint  # noqa: E402

CHECK_DEPTH, CHECK_STEPS = 4, 3


class TorchResidual(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.body = torch.nn.Sequential(layer, torch.nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


class TorchNet(torch.nn.Sequential):
    segment = 1

    def forward(self, x):
        first, tanh, *residuals, last = self
        x = tanh(first(x))
        for start in range(0, len(residuals), self.segment):
            part = torch.nn.Sequential(*residuals[start:start + self.segment])
            x = torch_checkpoint(part, x, use_reentrant=False)
        return last(x)


def torch_linear(k, fan_in, fan_out):
    layer = torch.nn.Linear(fan_in, fan_out).double()
    with torch.no_grad():
        for p, value in zip((layer.weight, layer.bias), drawn(k, fan_in, fan_out, np.float64), strict=True):
            p.copy_(torch.from_numpy(value))
    return layer


def torch_trained(rank, n, depth=CHECK_DEPTH, steps=CHECK_STEPS, segment=1):
    layers = [torch_linear(0, 64, WIDTH), torch.nn.Tanh()]
    for k in range(1, depth + 1):
        layers.append(torch_fully_shard(TorchResidual(torch_linear(k, WIDTH, WIDTH))))
    model = TorchNet(*layers, torch_linear(depth + 1, WIDTH, 10))
    model.segment = segment
    torch_fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = torch.from_numpy(share(xb, rank, n).astype(np.float64)), torch.from_numpy(share(yb, rank, n))
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.full_tensor().detach().numpy().copy() for p in model.parameters()]


def trained(rank, n, technique, depth=CHECK_DEPTH, steps=CHECK_STEPS, segment=1):
    step, model = trainer(technique, depth, np.float64)
    if getattr(model, "segment", None):  # the fully_shard-ed Net itself (data parallel wraps it)
        model.segment = segment
    for _ in range(steps):
        step(share(xb, rank, n).astype(np.float64), share(yb, rank, n))
    return [(p.full_tensor().numpy() if hasattr(p, "full_tensor") else p.data).copy()
            for p in model.parameters()]


def accuracy(rank, n, technique, depth=CHECK_DEPTH, epochs=2):
    step, model = trainer(technique, depth)
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        batches = rng.permutation(len(x_train))
        for i in range(0, len(x_train) - BATCH + 1, BATCH):
            rows = batches[i:i + BATCH]
            step(share(x_train[rows], rank, n), share(y_train[rows], rank, n))
    with tp.no_grad():
        return float(np.mean(model(tp.Variable(x_test)).data.argmax(1) == y_test))


def checked(rank):
    return (trained(rank, 2, "fully_shard + checkpointing"), torch_trained(rank, 2),
            accuracy(rank, 2, "fully_shard + checkpointing"))


def relative(ours, theirs):
    return max(np.abs(a - b).max() / np.abs(b).max() for a, b in zip(ours, theirs, strict=True))


def alone(rank):
    """One process, the plain network (data parallel on one rank: nothing to average), the whole batch."""
    return trained(rank, 1, "data parallel"), accuracy(rank, 1, "data parallel")


# %%
ranks = dist.spawn(checked, 2)
(one, one_accuracy), = dist.spawn(alone, 1)
for rank, (ours, theirs, acc) in enumerate(ranks):
    print(f"rank {rank}: {CHECK_STEPS} steps, against one process {below(relative(ours, one), 1e-10)},",
          f"against torch's fully_shard + checkpoint {below(relative(ours, theirs), 1e-10)}")
    assert acc == one_accuracy, (acc, one_accuracy)
per_epoch, dropped = divmod(len(x_train), BATCH)
print(f"two epochs of {per_epoch} batches of {BATCH} (the last {dropped} digits dropped)")
print(f"test accuracy after them: 2 processes {ranks[0][2]:.3f}, one process {one_accuracy:.3f}")
print("PyTorch check passed: fully_shard with checkpointing trains as one process and as torch's")

# %% [markdown]
# ## Recap
#
# - Per process, training holds the parameters, gradients and optimizer
#   state (16 bytes a float32 Adam parameter) and the activations of the
#   process's own samples.
# - Data parallel divides the samples, so the activations, by N; the 16ψ
#   stays whole on every rank. fully_shard divides the 16ψ by N too.
#   Checkpointing each layer divides what remains of the activations.
# - Sharding and checkpointing compose when a recomputed layer keeps its
#   gathered parameters until its backward is done: the package's
#   `fully_shard` asks `is_recomputing()`, PyTorch's its training state.
# - Measured per rank, the combination trains the deepest network under a
#   per-process budget, on two processes and (in the benchmark) on four;
#   it trains what one process trains on the whole batch, to rounding.
#
# ## Exercises
#
# **1. The deepest depth, predicted.** A rank's peak grows by about the
# same bytes with every layer. Write `predicted_deepest(p8, p16,
# budget)`: from the peaks at depths 8 and 16, the deepest depth whose
# peak the straight line through them keeps within the budget. Compare it
# with the search's verdicts above.

# %% tags=["hide-cell"]
def predicted_deepest(p8, p16, budget):
    slope = (p16 - p8) / 8
    return 8 + math.floor((budget - p8) / slope)


for n, (peaks, depths) in runs.items():  # the line's verdict can differ from the search's by one layer
    for t in TECHNIQUES:  # (a layer's Python objects vary by a few KiB from run to run)
        predicted = predicted_deepest(peaks[t, 8], peaks[t, 16], BUDGET)
        print(f"N = {n}  {t:>27}: predicted within one layer of the search's {depths[t]}: "
              f"{abs(predicted - depths[t]) <= 1}")

# %% [markdown]
# **2. Segments under fully_shard.** Checkpointing every residual
# layer keeps one row a sample a layer; step 44's segments keep one row a
# sample a segment, and recompute a whole segment in backward, so that
# several fully_shard-ed layers run again inside one recomputation. Write
# `segments_both_ways(rank)`: on two processes, the float64 network of
# depth 6, fully_shard with segments of 3 residual layers checkpointed
# (`Net.segment`), trained three Adam steps; return its whole parameters
# and those of torch's `fully_shard` with the same segments, and check
# that they agree to 1e-10.

# %% tags=["hide-cell"]
def segments_both_ways(rank, depth=6, segment=3):
    return (trained(rank, 2, "fully_shard + checkpointing", depth, segment=segment),
            torch_trained(rank, 2, depth, segment=segment))


segments = dist.spawn(segments_both_ways, 2)
for rank, (ours, theirs) in enumerate(segments):
    print(f"rank {rank}: segments of 3, against torch's {below(relative(ours, theirs), 1e-10)}")
