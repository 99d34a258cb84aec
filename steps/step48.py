# %% [markdown]
# # Step 48: The GPU with CuPy
#
# Everything so far ran on NumPy, on the CPU. CuPy offers NumPy's API on an
# NVIDIA GPU, so the same framework can run there with almost no change. This
# last step of stage 4 looks at four questions: when a GPU is faster at all,
# how one piece of code serves two array libraries, how PyTorch's device API
# (`.to`, `.cuda()`, `.cpu()`) moves data and models between them, and what
# becomes of the memory techniques of steps 38–47 when the memory that runs
# out is the GPU's.
#
# This page gives the same output on a machine with a GPU and on one without.
# Where a GPU is present the code runs there. Where none is, the same lines run
# on NumPy, and only statements that hold on both machines are printed.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import torch

import tinypytorch
from tinypytorch import Variable, cuda, random
from tinypytorch import functions as F
from tinypytorch.autograd.graph import current_hooks, save_on_cpu, saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear, Parameter
from tinypytorch.optimizers import Adam
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential
from tinypytorch.utils.checkpoint import checkpoint_sequential
from tinypytorch.utils.listing import show_code

DEVICE = "cuda" if cuda.is_available() else "cpu"  # the rest of the page runs on DEVICE
xp = cuda.cupy if cuda.is_available() else np

# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(cuda.as_numpy(a), precision=decimals, floatmode="fixed", separator=", ", suppress_small=True)


# %% [markdown]
# ## Why a GPU: throughput against launch latency
#
# A GPU has thousands of arithmetic units and memory that delivers a few
# terabytes per second, perhaps a hundred times what one CPU core streams.
# But every CuPy operation is a **kernel launch**: Python asks the driver to
# start a program on the device, and that costs some 5–10 µs whatever the
# size of the array. NumPy's fixed cost per call is about 1 µs. A simple
# model of one element-wise operation that reads and writes $b$ bytes:
#
# $$
# t_\text{GPU} \approx t_\text{launch} + \frac{b}{B_\text{GPU}}, \qquad
# t_\text{NumPy} \approx t_\text{call} + \frac{b}{B_\text{CPU}} .
# $$
#
# Small arrays are all launch latency, and NumPy wins; large ones are all
# bandwidth, and the GPU wins by the ratio of the bandwidths. With
# $b = s\,n$ for $n$ elements of $s$ bytes read and written each, the two
# times are equal at
#
# $$
# n^* = \frac{t_\text{launch} - t_\text{call}}{s / B_\text{CPU} - s / B_\text{GPU}} .
# $$
#
# The picture draws this **model, not a
# measurement**, with the assumed parameters printed below it. The measured
# crossover, for one operation and for a small graph of the framework's
# operations, is in `bench/results/gpu.md`, written by `make bench-gpu` on a
# machine with a GPU.

# %% tags=["hide-input"]
MODEL = dict(launch=8e-6, call=1e-6, gpu_bandwidth=2e12, cpu_bandwidth=1e10, bookkeeping=20e-6)  # assumptions


def model_times(n, launch, call, gpu_bandwidth, cpu_bandwidth, bookkeeping=0.0, bytes_per_element=16):
    """(GPU, NumPy) seconds for one element-wise operation on n elements, in the model above."""
    b = bytes_per_element * np.asarray(n, dtype=float)
    return bookkeeping + launch + b / gpu_bandwidth, bookkeeping + call + b / cpu_bandwidth


def model_crossover(launch, call, gpu_bandwidth, cpu_bandwidth, bytes_per_element=16, bookkeeping=0.0):
    """Elements where the model's GPU and NumPy times are equal (bookkeeping, paid on both, cancels)."""
    return (launch - call) / (bytes_per_element / cpu_bandwidth - bytes_per_element / gpu_bandwidth)


n = np.logspace(1, 8, 200)
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
gpu, cpu = model_times(n, **{k: v for k, v in MODEL.items() if k != "bookkeeping"})
left.loglog(n, gpu * 1e6, label="GPU (CuPy)")
left.loglog(n, cpu * 1e6, label="CPU (NumPy)")
left.set(xlabel="elements", ylabel="µs per operation", title="one operation (model, not a measurement)")
left.axvline(model_crossover(**MODEL), color="gray", linestyle=":", linewidth=0.8)
left.legend()
for bookkeeping, label in ((0.0, "one CuPy operation"), (MODEL["bookkeeping"], "one framework operation")):
    gpu, cpu = model_times(n, **{**MODEL, "bookkeeping": bookkeeping})
    right.loglog(n, cpu / gpu, label=label)
right.axhline(1.0, color="gray", linewidth=0.8)
right.axvline(model_crossover(**MODEL), color="gray", linestyle=":", linewidth=0.8)
right.set(xlabel="elements", ylabel="NumPy time / GPU time", title="speed-up (model, not a measurement)")
right.legend()
fig.tight_layout()
plt.show()

# %%
print(f"assumed: launch {MODEL['launch'] * 1e6:.0f} µs, NumPy call {MODEL['call'] * 1e6:.0f} µs, "
      f"GPU {MODEL['gpu_bandwidth'] / 1e9:.0f} GB/s, CPU {MODEL['cpu_bandwidth'] / 1e9:.0f} GB/s")
print(f"model crossover: about {model_crossover(**MODEL):,.0f} elements of float64 "
      "(the measured one: bench/results/gpu.md)")

# %% [markdown]
# The framework's own Python bookkeeping (creating a `Function`, recording
# edges) costs the same on both sides. It does not move the crossover, but it
# flattens the curve: a framework operation on a small array loses less on
# the GPU, and wins less on a large one. A training step of a small network
# is a few hundred such operations on arrays of a few thousand elements, near
# the crossover, which is why small models are no faster on a GPU.
#
# ## One code for two backends
#
# Package code never calls `numpy` on data that may live on the GPU. It asks
# `get_array_module` for the module that owns the data and calls that, and
# CuPy mirrors NumPy's API, so the same line runs on both:

# %%
show_code(F.Exp.forward)
print("module for a NumPy array:", cuda.get_array_module(np.ones(3)).__name__)

# %% [markdown]
# `get_array_module` returns `cupy` if any argument holds a CuPy array, else
# `numpy`. CuPy is optional: without it, or without a usable device,
# `tinypytorch.cuda.is_available()` is `False` and everything runs on NumPy.
#
# ## Devices, with PyTorch's names
#
# A `Variable` knows where its data lives. `x.device` is a
# `tinypytorch.cuda.device`, printed as PyTorch prints `torch.device`.
# `x.to("cuda")`, `x.cuda()` and `x.cpu()` return a copy on the other device,
# or `x` itself if it is there already; `x.to(np.float32)` changes the type.
# The move is an operation of the graph (`ToDevice`), so the gradient flows
# back to the device the data came from:

# %%
x = Variable(np.array([1.0, 2.0, 3.0]))
print(x.device, "|", cuda.device("cuda:0"), "|", repr(x.device), repr(cuda.device("cuda")))
print("x.to('cpu') is x:", x.to("cpu") is x, "| x.to(np.float32).dtype:", x.to(np.float32).dtype)
loss = (x.to(DEVICE) * x.to(DEVICE)).sum()  # computed on the device
loss.backward()
print("x.grad =", show(x.grad.data, 1), "on x's device:", x.grad.device == x.device)
show_code(F.ToDevice)

# %% [markdown]
# Without a GPU, `x.cuda()` raises `RuntimeError: to: cannot move to cuda: ...`
# and says why (CuPy missing, or no usable device). The next cell's output
# is the one place on this page that differs between machines; it is tagged
# `nbval-ignore-output`, so the notebook tests do not compare it.

# %% tags=["nbval-ignore-output"]
try:  # machine-dependent output: device(type='cuda', index=0) on a GPU, the reason for refusing elsewhere
    print(x.cuda().device)
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 100, break_on_hyphens=False))

# %% [markdown]
# An operation takes all its inputs from one device. Adding a variable on
# the GPU to one on the CPU fails with PyTorch's message:
#
# > `RuntimeError: add: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!`
#
# A model moves with `model.to(device)`: every parameter's data (and
# gradient) moves, but the `Parameter` objects stay the same, so an optimizer
# made before the move still holds them. State that is not trained, such as
# `BatchNorm1d`'s running mean and variance, is registered as a **buffer**
# (`register_buffer`) and moves too. Adam's running moments follow their
# parameter on its next step.

# %%
rng = np.random.default_rng(0)
net = Layer()
net.l0, net.norm, net.l1 = Linear(4, 8, rng=rng), BatchNorm1d(8), Linear(8, 1, rng=rng)
net.forward = lambda x: net.l1(tinypytorch.tanh(net.norm(net.l0(x))))
optimizer = Adam(net.params(), lr=0.01)
inputs, targets = rng.standard_normal((16, 4)), rng.standard_normal((16, 1))


def adam_step(device):
    net.cleargrads()
    F.mean_squared_error(net(Variable(inputs).to(device)), Variable(targets).to(device)).backward()
    optimizer.step()


adam_step("cpu")  # Adam's moments are made on the CPU
params = list(net.params())
net.to(DEVICE)
adam_step(DEVICE)  # ... and follow their parameters here
print("same Parameter objects:", all(a is b for a, b in zip(params, net.params())))
print("BatchNorm1d's buffers (running_mean, running_var) on the device:",
      all(cuda.is_on(b, DEVICE) for b in net.buffers()))
print("Adam's moments on their parameter's device:",
      all(cuda.is_on(optimizer.state[p][m], p.device) for p in params for m in ("exp_avg", "exp_avg_sq")))
show_code(Layer.to)

# %% [markdown]
# ## The device's random generator
#
# Dropout on the GPU must draw its mask on the GPU; drawing on the CPU and
# copying would cost a transfer per layer. PyTorch's CUDA generator is
# Philox, a **counter-based** generator: the $k$-th number is a function of
# the seed and $k$ alone, so thousands of threads compute their numbers
# independently, and the whole state is two integers, $(\text{seed},
# \text{offset})$. `tinypytorch.random.CounterGenerator` has the same design
# with a simpler mixer (SplitMix64's): a few integer operations, element-wise,
# in whatever array module it is given.

# %%
show_code(random.CounterGenerator.random)

# %% [markdown]
# It is pure `uint64` arithmetic, so NumPy and CuPy compute the same bits:
# the mask drawn on a GPU can be checked on a CPU. A draw moves the offset
# past the numbers it used, and setting $(\text{seed}, \text{offset})$ back
# replays them. Checkpointing and reversible blocks save exactly this pair
# for recomputation, with `random.get_all_states()` (the CPU's generator and
# the device's) and `fork_rng`. `random.uniform(shape, xp)` draws from the
# CPU generator for NumPy and from this one otherwise; `F.dropout` uses it.

# %%
generator = random.CounterGenerator(seed=0)
first = generator.random((8,), xp)
state_after_first = generator.get_state()
second = generator.random((8,), xp)
print("first draw :", show(first, 3), "state", state_after_first)
print("second draw:", show(second, 3), "state", generator.get_state())
generator.set_state((0, 0))
print("(0, 0) restored replays the first draw:", bool((generator.random((8,), xp) == first).all()))
on_numpy = random.CounterGenerator(0).random((8,), np)
print("the same bits on NumPy:", np.array_equal(cuda.as_numpy(first), on_numpy))
mask = cuda.as_numpy(second) >= 0.5
print("dropout mask (p = 0.5) from the second draw:", mask.astype(int))

# %% tags=["hide-input"]
fig, axis = plt.subplots(figsize=(9, 3))
for start, draw, color in ((0, first, "C0"), (8, second, "C1")):
    positions = np.arange(start + 1, start + 9)
    axis.bar(positions, cuda.as_numpy(draw), color=color, label=f"draw from state (0, {start})")
axis.axhline(0.5, color="gray", linestyle="--", linewidth=0.8, label="p = 0.5: below is dropped")
axis.set(xlabel="position = offset + 1, 2, ...", ylabel="mix(seed, position)",
         title="counter-based generator: each number is a function of (seed, position)")
axis.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
fig.tight_layout()
plt.show()

# %% [markdown]
# ## CuPy's memory pool as the instrument
#
# On the CPU, steps 35–47 measured memory with `tracemalloc`. On a GPU, CuPy
# allocates through a **memory pool**, which keeps freed blocks for reuse
# and knows how many bytes live arrays hold: `cuda.memory_allocated()`
# (PyTorch's `torch.cuda.memory_allocated`). The pool keeps no high-water
# mark, so `max_memory_allocated()` installs a CuPy `MemoryHook` that reads
# the pool after every allocation, the only moments a peak can occur:

# %%
show_code(cuda.max_memory_allocated.__wrapped__)

# %% [markdown]
# The pool's figures depend on the device: blocks are rounded up to 512
# bytes, and CuPy's kernels allocate their own temporaries. Counting the
# bytes that pass through a pack hook (step 38) gives the same figure on
# every device, because it depends only on what the graph saves. So the
# table below counts saved bytes with pack hooks, and, where a GPU is
# present, checks the pool against them without printing it: after the
# forward pass the pool holds at least the bytes saved for backward, and the
# reversible network holds less than the plain one.
#
# ## Stage 4's memory techniques on the device
#
# The network is step 46's: eight additive couplings on 16 features, $f$
# and $g$ a linear layer and $\tanh$. It runs four ways: **plain** (every
# block recorded), **checkpointed** (`checkpoint_sequential` with 4
# segments, step 44), **saved on the CPU** (plain inside `save_on_cpu`,
# step 38: every saved CuPy array waits in host memory; NumPy arrays are
# already there and stay), and **reversible** (`ReversibleSequential`, which
# keeps only its output).

# %%
class LinearTanh(Layer):
    def __init__(self, size, rng):
        super().__init__()
        self.linear = Linear(size, size, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def make_net(device, depth=8, width=16, seed=0):
    rng = np.random.default_rng(seed)
    blocks = [AdditiveCoupling(LinearTanh(width // 2, rng), LinearTanh(width // 2, rng))
              for _ in range(depth)]
    return ReversibleSequential(*blocks).to(device)


def forward(net, x, technique):
    if technique == "reversible":
        return net(x)
    if technique == "checkpointed":
        return checkpoint_sequential(net.blocks, 4, x)
    for block in net.blocks:  # plain, and saved on the CPU (inside save_on_cpu's hooks)
        x = block(x)
    return x


TECHNIQUES = ("plain", "checkpointed", "saved on the CPU", "reversible")
DATA = np.random.default_rng(1).standard_normal((2, 32, 16))  # inputs and targets

# %% tags=["hide-input"]
def counted_forward(net, x, technique):
    """(output, bytes of activations saved for backward, bytes of them moved to host memory), from pack hooks;
    parameters are not counted. save_on_cpu's own hooks do the packing inside the counting ones."""
    tally = {"saved": 0, "moved": 0}
    inner = None
    if technique == "saved on the CPU":
        context = save_on_cpu()
        context.__enter__()
        inner = current_hooks()

    def pack(v):
        packed = inner[0](v) if inner else v.data
        if not isinstance(v, Parameter):
            tally["saved"] += v.data.nbytes
            tally["moved"] += v.data.nbytes if inner and packed[0] is not None else 0
        return packed

    try:
        with saved_tensors_hooks(pack, inner[1] if inner else (lambda data: data)):
            y = forward(net, x, technique)
    finally:
        if inner:
            context.__exit__(None, None, None)
    return y, tally["saved"], tally["moved"]


def run(technique, device, steps=0, lr=0.01):
    """One measured forward and backward, then `steps` Adam steps; returns (saved bytes, gradients, loss)."""
    net = make_net(device)
    x, target = (Variable(a).to(device) for a in DATA)
    optimizer = Adam(net.params(), lr=lr)
    with cuda.max_memory_allocated() as peak:
        y, saved, moved = counted_forward(net, x, technique)
        held = cuda.memory_allocated() - peak.start
        loss = F.mean_squared_error(y, target)
        loss.backward()
    assert moved == (saved if technique == "saved on the CPU" and device != "cpu" else 0)  # device arrays only
    if cuda.is_available() and device != "cpu":  # the pool, where there is one: checked, not printed
        assert peak.bytes - peak.start >= held >= saved - moved, (peak.bytes, held, saved)
    grads = [cuda.as_numpy(p.grad.data) for p in net.params()]
    for _ in range(steps):
        optimizer.step()
        net.cleargrads()
        loss = F.mean_squared_error(forward(net, x, technique), target)
        loss.backward()
    return saved, held, grads, float(cuda.as_numpy(loss.data))


# %% [markdown]
# For each technique: the bytes saved for backward, the gradients against
# the plain run's, and then 30 Adam steps on the device.

# %%
results = {technique: run(technique, DEVICE, steps=30) for technique in TECHNIQUES}
plain_bytes, _, plain_grads, _ = results["plain"]
for technique, (saved, held, grads, loss) in results.items():
    error = max(np.abs(g - h).max() for g, h in zip(grads, plain_grads))
    assert error < 1e-12, (technique, error)
    print(f"{technique:16}: {saved:6,} bytes saved ({saved / plain_bytes:4.0%}), "
          f"loss after 30 steps {loss:.3f}")
print("every technique's gradients equal the plain run's to 1e-12")
if cuda.is_available():
    assert results["reversible"][1] < results["plain"][1]  # the pool agrees: less held after forward

# %% tags=["hide-input"]
fig, axis = plt.subplots(figsize=(7, 3.2))
saved_kib = [results[t][0] / 1024 for t in TECHNIQUES]
on_device = [0 if t == "saved on the CPU" else k for t, k in zip(TECHNIQUES, saved_kib)]
axis.barh(TECHNIQUES, saved_kib, color="lightgray", label="saved for backward")
axis.barh(TECHNIQUES, on_device, color="C0", label="of which in device memory (on a GPU)")
axis.invert_yaxis()
axis.set(xlabel="KiB saved for backward (pack hooks; the same on every device)",
         title="eight couplings, 32 × 16 float64")
axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# `save_on_cpu` saves as much as the plain run, but on a GPU all of it waits
# in host memory and none in the device's; on NumPy there is nothing to move.
# Checkpointing keeps each segment's input and the last segment's graph;
# the reversible network keeps one array, its output. All four train the
# same network to the same loss.
#
# ## Check against PyTorch
#
# A small MLP in float64: its gradients computed on `DEVICE` must equal the
# same MLP's on the CPU, and PyTorch's (on the CPU, and on CUDA where
# PyTorch has a GPU).

# %%
def mlp_gradients(device):
    rng = np.random.default_rng(3)
    model = Layer()
    model.l0, model.l1 = Linear(5, 7, rng=rng), Linear(7, 2, rng=rng)
    model.to(device)
    x = Variable(rng.standard_normal((4, 5))).to(device)
    model.l1(tinypytorch.tanh(model.l0(x))).sum().backward()
    grads = [cuda.as_numpy(p.grad.data) for p in model.params()]
    return grads, [cuda.as_numpy(p.data) for p in model.params()], x


ours, weights, x = mlp_gradients(DEVICE)
for torch_device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
    w0, b0, w1, b1 = (torch.tensor(w, device=torch_device, requires_grad=True) for w in weights)
    x_t = torch.tensor(cuda.as_numpy(x.data), device=torch_device)
    (torch.tanh(x_t @ w0.T + b0) @ w1.T + b1).sum().backward()
    for g, p in zip(ours + mlp_gradients("cpu")[0], [w0, b0, w1, b1] * 2):
        np.testing.assert_allclose(g, p.grad.cpu().numpy(), rtol=1e-10, atol=1e-12)
print("PyTorch check passed: an MLP's gradients on the step's device "
      "equal the CPU run's and torch's (float64)")

# %% [markdown]
# ## Recap
#
# - A GPU pays a launch latency of several microseconds per operation and
#   wins only on arrays large enough for its bandwidth to matter; the
#   measured crossover is in `bench/results/gpu.md`.
# - Package code asks `get_array_module` for `numpy` or `cupy`, and one line
#   serves both.
# - `x.device`, `x.to(device)`, `.cuda()`, `.cpu()` and `model.to(device)`
#   have PyTorch's names and meaning; the move is differentiable, buffers and
#   optimizer state follow their parameters, and mixing devices in one
#   operation is an error.
# - The device's generator is counter-based: its state is $(\text{seed},
#   \text{offset})$, which checkpointing saves and restores cheaply.
# - Pack hooks count saved bytes the same way on every device; CuPy's memory
#   pool measures what the device actually holds. Checkpointing,
#   `save_on_cpu` and reversible blocks cut the first; the pool confirms it.
#
# ## Exercises
#
# **1.** Write `softplus_forward(x)`, $\log(1 + e^x)$ computed stably as
# $\max(x, 0) + \log(1 + e^{-|x|})$, so that it runs on NumPy and CuPy
# arrays alike.

# %% tags=["hide-cell"]
def softplus_forward(x):
    xp = cuda.get_array_module(x)
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


print(show(softplus_forward(np.array([-800.0, -1.0, 0.0, 1.0, 800.0])), 3))

# %% [markdown]
# **2.** Using the model of the first section, find the crossover for float32
# (8 bytes per element for `exp`) with the same parameters. Why does it grow?

# %% tags=["hide-cell"]
float32_crossover = model_crossover(**MODEL, bytes_per_element=8)
print(f"float32: about {float32_crossover:,.0f} elements, twice float64's: half the bytes per element, "
      "the same launch latency to amortise")

# %% [markdown]
# **3.** A counter-based generator can jump ahead without drawing what lies
# before. Write `draw_at(seed, offset, shape, xp)`, which returns the numbers
# a `CounterGenerator(seed)` would give after `offset` numbers had been drawn.

# %% tags=["hide-cell"]
def draw_at(seed, offset, shape, xp):
    generator = random.CounterGenerator(seed)
    generator.set_state((seed, offset))
    return generator.random(shape, xp)


print("draw_at(0, 8, (8,)) equals the second draw:", np.array_equal(cuda.as_numpy(draw_at(0, 8, (8,), xp)),
                                                                    cuda.as_numpy(second)))
