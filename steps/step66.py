# %% [markdown]
# # Step 66: Capstone — train under a memory budget
#
# The tutorial has built seven ways to train a network in less memory.
# This step puts them side by side on one question: **I have this much
# memory; how deep a network can I train, and what does it cost?** The
# network is the digit classifier of step 51 made deep (residual layers,
# so that depth still trains, step 54's lesson). For each technique the
# page measures the peak memory of a training step, trains the network
# for two epochs, and searches, for a fixed budget, the deepest network
# whose training step fits. PyTorch's twin does the same where PyTorch has
# the technique. Wall-clock times come from the benchmark,
# `bench/results/capstone.md`, not from
# this page.

# %%
import contextlib
import functools
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import transforms

import tinypytorch as tp
from tinypytorch import datasets, nn, optim
from tinypytorch import functions as F
from tinypytorch.amp import GradScaler
from tinypytorch.autograd.graph import save_on_cpu
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential
from tinypytorch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.memory import peak_memory


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


WIDTH, BATCH, LR = 64, 256, 3e-3
np.seterr(over="ignore", invalid="ignore")  # float16 overflows while GradScaler finds its scale (it skips those steps)
images, labels = datasets.load_digits()
order = np.random.default_rng(0).permutation(len(images))
pixels = (images.reshape(len(images), -1) / 16).astype(np.float32)[order]
labels = labels[order]
x_train, y_train, x_test, y_test = pixels[:1437], labels[:1437], pixels[1437:], labels[1437:]
xb, yb = x_train[:BATCH], y_train[:BATCH]


def weights(depth, reversible=False, dtype=np.float32, seed=0):
    """[(W, b)] of every Linear, uniform in +-1/sqrt(fan_in) as PyTorch draws them; a reversible block's f and g
    are Linear(WIDTH/2, WIDTH/2) each (so its weights are half a residual layer's)."""
    rng, half = np.random.default_rng(seed), WIDTH // 2
    sizes = [(64, WIDTH), *([(half, half)] * 2 * depth if reversible else [(WIDTH, WIDTH)] * depth), (WIDTH, 10)]
    draw = [(rng.uniform(-1, 1, (o, i)) / math.sqrt(i), rng.uniform(-1, 1, o) / math.sqrt(i)) for i, o in sizes]
    return [(W.astype(dtype), b.astype(dtype)) for W, b in draw]


def linear(W, b):
    layer = nn.Linear(W.shape[1], W.shape[0])
    layer.weight.data, layer.bias.data = W.copy(), b.copy()
    return layer


# %% [markdown]
# ## The techniques, recalled
#
# | technique | what backward finds kept | what it costs | step |
# |---|---|---|---|
# | plain | every activation an operation saved | nothing | 35 |
# | √N checkpointing | the input of each of √N segments; one segment's activations at a time in backward | each segment's forward runs twice | 42-44 |
# | selective checkpointing | the outputs the policy keeps (here every matmul's); the rest recomputed | the cheap operations run twice | 62 |
# | `save_on_cpu` | the activations, moved from the device to host memory | two copies per saved tensor | 38, 48 |
# | reversible blocks | only the last output: each block's input is computed back from its output | a block's inverse and forward in backward | 46-47 |
# | mixed precision | float16 activations (half the bytes) beside float32 weights | float16's rounding; a `GradScaler` | 59-61 |
# | optimizer in backward | gradients only until their parameter has stepped | no gradient clipping by the global norm | 53 |
#
# The last row of the measurements combines the two that compose freely:
# √N checkpointing and the optimizer inside backward. (A `GradScaler`
# cannot be combined with the optimizer inside backward: it must see
# every gradient before any step.)
#
# ## One network, every way to train it
#
# The network: `Linear(64, 64)` and tanh, then `depth` residual layers
# `x + tanh(Linear(64, 64)(x))`, then `Linear(64, 10)`; float32, batches
# of 256 digits, Adam. The reversible network replaces the residual
# layers by `depth` additive couplings whose `f` and `g` are
# `Linear(32, 32)` and tanh. `trainer(technique, model)` returns one
# training step; each technique changes a line or two of the usual step.

# %%
class Residual(nn.Module):
    def __init__(self, W, b):
        super().__init__()
        self.body = nn.Sequential(linear(W, b), nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


def build(ws, reversible=False):
    layers = [linear(*ws[0]), nn.Tanh()]
    if reversible:
        halves = [nn.Sequential(linear(*w), nn.Tanh()) for w in ws[1:-1]]
        layers.append(ReversibleSequential(*map(AdditiveCoupling, halves[0::2], halves[1::2])))
    else:
        layers += [Residual(*w) for w in ws[1:-1]]
    return nn.Sequential(*layers, linear(*ws[-1]))


def segmented(model, context_fn=None):
    """The model's modules in about √N segments, all but the last checkpointed."""
    modules = list(model)
    size = max(1, len(modules) // round(math.sqrt(len(modules))))

    def forward(x):
        for start in range(0, len(modules) - size, size):
            x = checkpoint(nn.Sequential(*modules[start:start + size]), x, use_reentrant=False,
                           **({"context_fn": context_fn} if context_fn else {}))
        return nn.Sequential(*modules[(len(modules) - 1) // size * size:])(x)
    return forward


def step_one(opts, p):
    opts[p].step()
    opts[p].zero_grad()


def trainer(technique, model):
    params, forward = list(model.parameters()), model
    in_backward, mixed = "optimizer in backward" in technique, technique == "mixed precision"
    if in_backward:  # each parameter stepped, its gradient let go, once accumulated
        opts = {p: optim.Adam([p], lr=LR) for p in params}
        for p in params:
            p.register_post_accumulate_grad_hook(functools.partial(step_one, opts))
    if "checkpointing" in technique:
        keep = functools.partial(create_selective_checkpoint_contexts, [F.LinearFunction])
        forward = segmented(model, keep if technique.startswith("selective") else None)
    # A first scale of 2**10, not 2**16: float16 does not overflow, so no step is skipped to find it
    opt, scaler = optim.Adam(params, lr=LR), GradScaler("cpu", init_scale=2.0**10, enabled=mixed)

    def step(x, y):
        offload = save_on_cpu() if technique == "save_on_cpu" else contextlib.nullcontext()
        with tp.autocast("cpu", dtype=tp.float16, enabled=mixed), offload:
            loss = tp.cross_entropy(forward(tp.Variable(x)), y)  # float16 may overflow: the scaler skips
        if in_backward:
            return loss.backward()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step


TECHNIQUES = ["plain", "√N checkpointing", "selective checkpointing", "save_on_cpu", "reversible blocks",
              "mixed precision", "optimizer in backward", "checkpointing + optimizer in backward"]

# %% [markdown]
# ## A step's peak, measured
#
# `peak_memory(work)` (new in the package) runs `work()` under Python's
# `tracemalloc`, to which NumPy reports every array, with the garbage
# collector off: what a step frees, it frees by reference counting, as
# training does. The count is deterministic. The work measured is the
# whole cost of training: building the model and its optimizer, then two
# steps (the second with Adam's moments present), so the peak holds the
# weights, Adam's state, the activations and the gradients. (The Python
# objects it counts vary by a few KiB from run to run, so the page prints
# coarse fractions; the benchmark's table has the bytes.)

# %%
show_code(peak_memory)


# %%
@functools.cache
def peak(technique, depth):
    ws = weights(depth, reversible=technique == "reversible blocks")

    def work():
        step = trainer(technique, build(ws, reversible=technique == "reversible blocks"))
        step(xb, yb), step(xb, yb)
    return peak_memory(work)[0]


peaks = {t: peak(t, 8) for t in TECHNIQUES}
mib = peaks["plain"] / 2**20
print(f"plain training at depth 8 peaks at {mib:.1f} MiB; the others, as fractions of it:")
for t in TECHNIQUES[1:]:
    print(f"{t:>38}: {peaks[t] / peaks['plain']:.1f}")

# %% [markdown]
# At depth 8 (the fractions above), reversible blocks and √N checkpointing
# take the most off the peak, mixed precision less (its float16 activations
# are only part of the bytes: the float32 weights, Adam's moments and the
# float32 loss stay). The optimizer inside backward barely moves it: the
# peak comes at the start of backward, when every activation is held and no
# gradient exists yet; freeing gradients early pays where they are large
# beside the activations (step 53). On a CPU `save_on_cpu` moves nothing
# (the saved tensors are already in host memory): its row is plain's, as in
# PyTorch; on a GPU it frees the device's memory. The selective policy keeps
# every matmul's output, which plain training of this network does not keep
# at all (tanh saves its output, the residual add nothing), so it saves less
# than full checkpointing, for fewer recomputations.
#
# ## What it costs in accuracy
#
# Two epochs of each technique at depth 4 from the same weights and the
# same batches. Checkpointing recomputes exactly what forward computed,
# and Adam stepped per parameter inside backward does what Adam does
# after backward: their accuracies must equal plain's. Mixed precision
# rounds its products to float16, and the reversible network is another
# network (couplings of half-width layers).

# %%
def accuracy(technique, depth=4, epochs=2):
    reversible = technique == "reversible blocks"
    model = build(weights(depth, reversible), reversible=reversible)
    step, rng = trainer(technique, model), np.random.default_rng(0)
    for _ in range(epochs):
        batches = rng.permutation(len(x_train))
        for i in range(0, len(x_train), BATCH):
            step(x_train[batches[i:i + BATCH]], y_train[batches[i:i + BATCH]])
    with tp.no_grad():
        return float(np.mean(model(tp.Variable(x_test)).data.argmax(1) == y_test))


accuracies = {t: accuracy(t) for t in TECHNIQUES}
for t in TECHNIQUES:
    print(f"{t:>38}: test accuracy {accuracies[t]:.3f}")
exact = ["√N checkpointing", "selective checkpointing", "save_on_cpu", "optimizer in backward",
         "checkpointing + optimizer in backward"]
assert all(accuracies[t] == accuracies["plain"] for t in exact)

# %% [markdown]
# ## The deepest network under a budget
#
# The budget: 1.68 MB (1.60 MiB), a little less than plain training of
# depth 8 needs. Plain's peak grows in proportion to depth, checkpointing's
# activations like √depth, and a reversible network's activations not at
# all; weights, Adam's moments and gradients grow in proportion to depth
# for everyone. So the peak grows with depth for every technique
# (checkpointing's steps back a little where its segments regroup), and
# a doubling search, then a bisection between the last depth that fits
# and the first that does not, finds the deepest network that fits (up
# to 32 here; the benchmark takes 3.43 MB, about plain's depth 16, and
# goes to 128). A round budget, not a measured one, placed so that every
# peak tried lies at least 15 KiB from it: the Python objects tracemalloc
# counts beside the arrays vary by a few KiB between runs, and between a
# script, a notebook and the tests, so the verdicts do not.

# %%
def deepest(technique, budget, cap=32):
    def fits(d):
        return peak(technique, d) <= budget
    low, high = 0, 1
    while high <= cap and fits(high):
        low, high = high, 2 * high
    high = min(high, cap + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


budget = 1_680_000
depths = {t: deepest(t, budget) for t in TECHNIQUES}
print(f"budget {budget / 1e6:.2f} MB ({budget / 2**20:.2f} MiB); the deepest network within it:")
for t in TECHNIQUES:
    print(f"{t:>38}: deepest {depths[t]:2d}" + (" (the cap)" if depths[t] == 32 else ""))
print("times plain's depth:", ", ".join(f"{t} {depths[t] / depths['plain']:.1f}"
                                        for t in ("√N checkpointing", "reversible blocks")))

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(9, 4.6))
grid = [1, 2, 4, 8, 16, 32]
drawn = [t for t in TECHNIQUES if t != "save_on_cpu"]
for t in drawn:
    line, = ax.plot(grid, [peak(t, d) / 1024 for d in grid], marker="o", ms=3, label=t)
    same = [u for u in drawn if depths[u] == depths[t]]  # a second star of one depth left of the first, not on it
    beside = transforms.offset_copy(ax.transData, fig=fig, x=-15 * same.index(t), units="points")
    ax.plot(depths[t], peak(t, depths[t]) / 1024, marker="*", ms=14, color=line.get_color(), transform=beside)
ax.axhline(budget / 1024, color="k", ls="--", lw=1)
ax.text(1, budget / 1024 * 1.05, "budget: 1.68 MB", fontsize=9)
ax.set(xscale="log", yscale="log", xlabel="depth (residual layers or reversible blocks)", ylabel="peak (KiB)",
       title="Peak memory of training against depth; ★ the deepest within the budget")
ax.set_xticks(grid, [str(d) for d in grid])
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# Each curve is a technique (`save_on_cpu`, on a CPU, lies on plain's);
# the star is the deepest network that fits the dashed budget (where two
# techniques reach the same depth, the second star stands just left of
# the first: plain and the optimizer in backward, √N checkpointing with
# and without it). Under the same memory √N checkpointing trains 1.7
# times as deep as plain, and reversible blocks 2.6 times (printed
# above): what grows with their depth is mostly the weights, Adam's
# moments and the gradients. The price shows in the benchmark's times
# per epoch: checkpointing runs forward about twice, reversible blocks
# run every block's inverse.
#
# ## Check against PyTorch
#
# The twin in `torch.nn`, with the same weights, in float64. For each
# technique PyTorch has, one training step's gradients must equal
# torch's (relative error below 1e-10): `checkpoint_sequential`-style
# segments with `torch.utils.checkpoint.checkpoint`, the selective
# policy keeping `aten.addmm`, `torch.autograd.graph.save_on_cpu`, and
# the optimizer inside backward (the weights after its step). Mixed
# precision, with `torch.autocast("cpu", dtype=torch.float16)` and
# `torch.amp.GradScaler("cpu")` on the float32 network, must agree
# within float16's rounding (relative 1e-2). The collapsed cell holds the
# twins.

# %% tags=["hide-cell"]
import torch  # noqa: E402
from torch.utils.checkpoint import checkpoint as torch_checkpoint  # noqa: E402
from torch.utils.checkpoint import create_selective_checkpoint_contexts as torch_sac  # noqa: E402

torch.set_num_threads(1)


class TorchResidual(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.body = torch.nn.Sequential(layer, torch.nn.Tanh())

    def forward(self, x):
        return x + self.body(x)


def torch_build(ws, dtype):
    def lin(W, b):
        layer = torch.nn.Linear(W.shape[1], W.shape[0]).to(dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(W)), layer.bias.copy_(torch.from_numpy(b))
        return layer
    return torch.nn.Sequential(lin(*ws[0]), torch.nn.Tanh(), *(TorchResidual(lin(*w)) for w in ws[1:-1]),
                               lin(*ws[-1]))


def torch_segmented(model, context_fn=None):
    modules = list(model)
    size = max(1, len(modules) // round(math.sqrt(len(modules))))

    def forward(x):
        for start in range(0, len(modules) - size, size):
            x = torch_checkpoint(torch.nn.Sequential(*modules[start:start + size]), x, use_reentrant=False,
                                 **({"context_fn": context_fn} if context_fn else {}))
        return torch.nn.Sequential(*modules[(len(modules) - 1) // size * size:])(x)
    return forward


def torch_grads(technique, ws, x, y, dtype=torch.float64):
    model = torch_build(ws, dtype)
    forward = model
    if "checkpointing" in technique:
        keep = functools.partial(torch_sac, [torch.ops.aten.addmm.default])
        forward = torch_segmented(model, keep if technique.startswith("selective") else None)
    mixed, x, y = technique == "mixed precision", torch.from_numpy(x).to(dtype), torch.from_numpy(y)
    with torch.autocast("cpu", dtype=torch.float16, enabled=mixed), \
            torch.autograd.graph.save_on_cpu() if technique == "save_on_cpu" else contextlib.nullcontext():
        loss = torch.nn.functional.cross_entropy(forward(x), y)
    torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=mixed).scale(loss).backward()
    return [p.grad.numpy() / (2.0**10 if mixed else 1) for p in model.parameters()]


def ours_grads(technique, ws, x, y, dtype=np.float64):
    model = build(ws)
    forward = model
    if "checkpointing" in technique:
        keep = functools.partial(create_selective_checkpoint_contexts, [F.LinearFunction])
        forward = segmented(model, keep if technique.startswith("selective") else None)
    mixed = technique == "mixed precision"
    with tp.autocast("cpu", dtype=tp.float16, enabled=mixed), save_on_cpu() if technique == "save_on_cpu" \
            else contextlib.nullcontext():
        loss = tp.cross_entropy(forward(tp.Variable(x.astype(dtype))), y)
    GradScaler("cpu", init_scale=2.0**10, enabled=mixed).scale(loss).backward()
    return [p.grad.data / (2.0**10 if mixed else 1) for p in model.parameters()]


def relative(ours, theirs):
    return max(np.abs(a - b).max() / np.abs(b).max() for a, b in zip(ours, theirs))


def adam_in_backward_torch(ws, x, y):
    model = torch_build(ws, torch.float64)
    opts = {p: torch.optim.Adam([p], lr=LR) for p in model.parameters()}
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(functools.partial(step_one, opts))
    torch.nn.functional.cross_entropy(model(torch.from_numpy(x).double()), torch.from_numpy(y)).backward()
    return [p.detach().numpy() for p in model.parameters()]


def adam_in_backward_ours(ws, x, y):
    model = build(ws)
    trainer("optimizer in backward", model)(x.astype(np.float64), y)
    return [p.data for p in model.parameters()]


# %%
ws = weights(8, dtype=np.float64)
gaps = {t: relative(ours_grads(t, ws, xb, yb), torch_grads(t, ws, xb, yb))
        for t in ["plain", "√N checkpointing", "selective checkpointing", "save_on_cpu"]}
gaps["optimizer in backward"] = relative(adam_in_backward_ours(ws, xb, yb),
                                        adam_in_backward_torch(ws, xb, yb))
ws32 = [(W.astype(np.float32), b.astype(np.float32)) for W, b in ws]
mixed_gap = relative(ours_grads("mixed precision", ws32, xb, yb, np.float32),
                     torch_grads("mixed precision", ws32, xb, yb, torch.float32))
for t, gap in gaps.items():
    what = "weights after the step" if "backward" in t else "gradients"
    print(f"{t:>24}: {what} against torch's, relative {below(gap, 1e-10)}")
print(f"{'mixed precision':>24}: gradients against torch's (autocast, GradScaler), "
      f"relative {below(mixed_gap, 1e-2)}")
print("PyTorch check passed: torch's gradients for every technique it has (float16: within rounding)")

# %% [markdown]
# The peaks compare too: the benchmark measures PyTorch's from its
# profiler (the allocator's bytes, without its C++ graph nodes, which
# tracemalloc cannot see) and finds each technique's tinypytorch peak
# from 6% to 18% above PyTorch's, the techniques in the same order but
# for √N checkpointing with and without the optimizer inside backward
# (8 KiB apart in tinypytorch, the other way round in PyTorch), and under
# one budget for both (3.43 MB) PyTorch's deepest network one to eight
# layers deeper than tinypytorch's. The benchmark's table is
# `bench/results/capstone.md`.
#
# ## Recap
#
# - The memory of training is the weights, the optimizer's state, the
#   activations saved for backward and the gradients; each technique
#   takes a bite of one of them.
# - Checkpointing and reversible blocks trade compute for activations;
#   mixed precision halves their bytes; the optimizer inside backward
#   frees the gradients early; `save_on_cpu` moves them off the device.
# - Exact techniques (checkpointing, the optimizer inside backward) train
#   to exactly plain's accuracy; mixed precision to nearly the same.
# - For a budget, a doubling search finds the deepest network each
#   technique trains: here √N checkpointing 1.7 times plain's depth,
#   reversible blocks 2.6 times, then limited by the weights,
#   Adam's state and the gradients.
#
# ## Exercises
#
# **1. Where the bytes go.** Write `saved_bytes(model, x, y)`: the bytes
# of the distinct arrays saved for backward by one forward of the plain
# network (count them with `tp.autograd.graph.saved_tensors_hooks`,
# skipping the parameters). How many bytes does one residual layer add?

# %% tags=["hide-cell"]
def saved_bytes(model, x, y):
    params, kept = {id(p.data) for p in model.parameters()}, {}

    def pack(v):
        if id(v.data) not in params:
            kept[id(v.data)] = v.data.nbytes
        return v
    with tp.autograd.graph.saved_tensors_hooks(pack, lambda v: v):
        tp.cross_entropy(model(tp.Variable(x)), y)
    return sum(kept.values())


per_layer = saved_bytes(build(weights(5)), xb, yb) - saved_bytes(build(weights(4)), xb, yb)
print(f"one residual layer saves {per_layer} bytes: {per_layer // (BATCH * WIDTH * 4)} arrays of 256 x 64 float32")

# %% [markdown]
# **2. Checkpointing and mixed precision together.** Write
# `mixed_checkpointed_grads(ws, x, y)`: the gradients of the float32
# network with √N checkpointing under float16 `autocast`, the loss
# scaled by 1024 and unscaled after. `checkpoint` records the autocast
# settings of its first run and recomputes under the same ones, as
# PyTorch's does, so the two compose with no extra code; the
# recomputation repeats the first run's float16 arithmetic, so the
# gradients must equal mixed precision's without checkpointing exactly.

# %% tags=["hide-cell"]
def mixed_checkpointed_grads(ws, x, y):
    model = build(ws)
    with tp.autocast("cpu", dtype=tp.float16):
        loss = tp.cross_entropy(segmented(model)(tp.Variable(x)), y)
    (loss * 1024.0).backward()
    return [p.grad.data / 1024.0 for p in model.parameters()]


gap = relative(mixed_checkpointed_grads(ws32, xb, yb), ours_grads("mixed precision", ws32, xb, yb, np.float32))
assert gap == 0, gap
print("checkpointed against not, under autocast: the same gradients, bit for bit")
