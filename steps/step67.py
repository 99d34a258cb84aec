# %% [markdown]
# # Step 67: Memory over time, drawn
#
# Steps 42–47 counted memory in single numbers: the bytes saved for
# backward, the peak. A number hides *when*. Plain training holds more and
# more as the forward pass runs and lets go layer by layer in backward;
# √N checkpointing holds little, then briefly a segment again, one segment
# after the other; a reversible network holds almost nothing, all along.
# This step records one training step as a sequence of **events**, each
# with the bytes it adds or frees, and draws the bytes held against
# time. PyTorch draws the same picture from its allocator
# (`torch.cuda.memory._record_memory_history`, viewed in its memory
# visualiser); here the events come from hooks the package already has,
# and tracemalloc checks that they account for what NumPy holds.

# %%
import gc
import json
import pathlib
import tempfile

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import Variable
from tinypytorch.layers import MLP, Layer, Linear
from tinypytorch.reversible import AdditiveCoupling, ReversibleSequential
from tinypytorch.utils import memory_timeline as mt
from tinypytorch.utils.checkpoint import checkpoint_sequential
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The recorder
#
# `MemoryTimeline` is a context around one training step. It enters a
# `saved_tensors_hooks` pair (step 38), so every tensor saved for backward
# passes its pack hook: a **saved** event, or a **recomputed** one when the
# recomputation flag of steps 42–47 is up. On each saved activation it
# registers a tensor hook (step 34), which meets its **gradient**; on each
# parameter a post-accumulate-grad hook, which meets the **accumulated**
# `.grad`. Every array it meets gets a `weakref.finalize`: when reference
# counting frees the array, a **freed** event subtracts its bytes. An array
# counts once, by the block of memory it views (a view adds nothing), and
# a leaf (parameter, batch, target) counts 0: that memory existed before
# the step.

# %%
show_code(mt.MemoryTimeline._pack)
show_code(mt.MemoryTimeline._meet)


# %% tags=["hide-input"]
N, WIDTH, BATCH = 16, 256, 64  # sixteen 256 x 256 layers, a batch of 64 rows, float64
ACT = BATCH * WIDTH * 8  # one activation: 128 KiB
K = 4  # √N segments
rng = np.random.default_rng(64)
X, TARGET = rng.standard_normal((BATCH, WIDTH)), rng.standard_normal((BATCH, WIDTH))


class LinearTanh(Layer):
    """f or g of a coupling block: tanh(Linear(size, size))."""

    def __init__(self, size, rng):
        super().__init__()
        self.linear = Linear(size, size, rng=rng)

    def forward(self, x):
        return tp.tanh(self.linear(x))


def mlp(depth=N, width=WIDTH):
    return MLP((width,) * (depth + 1), activation=tp.tanh, rng=np.random.default_rng(0))


def revnet(depth=N, width=WIDTH):
    r = np.random.default_rng(0)
    return ReversibleSequential(*[AdditiveCoupling(LinearTanh(width // 2, r), LinearTanh(width // 2, r))
                                  for _ in range(depth)])


def layer_functions(model):
    """The MLP as one function per layer, for checkpoint_sequential: tanh(Linear(x)), the last Linear alone."""
    return [(lambda layer: lambda h: model.activation(layer(h)))(layer) for layer in model.layers[:-1]] + \
        [model.layers[-1]]


def forward(variant, net, x):
    if variant == "checkpoint":
        return checkpoint_sequential(layer_functions(net), K, x, use_reentrant=True)
    return net(x)


def drop(p):
    p.grad = None  # an optimizer that steps inside backward lets each gradient go at once


def step(variant, net, x=X, target=TARGET, trace=False, drop_grads=True):
    """One training step under a MemoryTimeline, gradients let go as they are accumulated; the timeline."""
    gc.collect()
    gc.disable()  # only reference counting frees: the events come in the order the step frees
    try:
        with mt.MemoryTimeline(net.params(), trace=trace) as timeline:
            handles = [p.register_post_accumulate_grad_hook(drop) for p in net.params()] if drop_grads else []
            xv = Variable(x, requires_grad=True)  # the batch needs a gradient: reentrant checkpoints need one
            loss = tp.mean_squared_error(forward(variant, net, xv), Variable(target))
            timeline.mark("forward done")
            loss.backward()
            timeline.mark("backward done")
            del loss, xv
            timeline.mark("loss freed")
            for h in handles:
                h.remove()
    finally:
        gc.enable()
    return timeline


VARIANTS = {"plain": mlp, "checkpoint": mlp, "reversible": revnet}
TIMELINES = {v: step(v, build()) for v, build in VARIANTS.items()}

# %% [markdown]
# ## One step, three ways
#
# The same training step of a 16-layer network of width 256 (float64, a
# batch of 64 rows: one activation is 128 KiB), recorded three times: the
# plain MLP, the MLP through `checkpoint_sequential` in $k = 4$ segments,
# and a reversible network of 16 coupling blocks on the same width. Each
# parameter's gradient is let go as soon as it is accumulated, as an
# optimizer stepping inside backward would, so that what is drawn is what
# the activations take.

# %% tags=["hide-input"]
def timeline_picture():
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), sharey=True)
    for ax, (variant, timeline) in zip(axes, TIMELINES.items()):
        t, held = mt.held_over_time(timeline.events)
        ax.step(t, held / ACT, where="post", color="C0")
        done = next(e.seq for e in timeline.events if e.name == "forward done")
        ax.axvline(done, color="grey", linestyle=":")
        for e in timeline.events:
            if e.kind == "recomputed" and e.bytes:
                ax.plot(e.seq, e.held / ACT, ".", color="C3", markersize=3)
        ax.set_title(f"{variant} (peak {timeline.peak / ACT:.1f})", fontsize=10)
        ax.set_xlabel("event")
    axes[0].set_ylabel("bytes held / one activation")
    fig.tight_layout()
    plt.show()


timeline_picture()

# %% [markdown]
# Left, plain training: the forward pass ramps up one activation a layer
# (each `tanh` output is saved, and is the next layer's input), the dotted
# line is where backward begins, and each node frees what it saved once it
# has run: the fall (each spike is a weight gradient, four activations
# big, held for one event before it is let go). Middle, √N checkpointing: the forward pass keeps only
# each checkpointed segment's input and the last segment, plainly; backward
# walks down the last segment, then recomputes each earlier segment (red
# dots: recomputed events) and walks it down: the sawtooth, one tooth per
# checkpointed segment. Right, the reversible network: one Function keeps
# only its output; backward computes each block's input back from its
# output, so at most a block's worth is held at once.

# %% [markdown]
# ## The events, one by one
#
# Each event carries its number, its kind, what it is about (shape and
# dtype), the bytes it adds and the bytes held after it; `block` numbers
# the memory blocks, so a free can be matched with its allocation. The
# first events of a tiny network, two layers of width 4 on a batch of 2:

# %% tags=["hide-input"]
tiny = step("plain", mlp(depth=2, width=4), X[:2, :4], TARGET[:2, :4], drop_grads=False)
print(f"{'seq':>3}  {'kind':<12}{'what':<14}{'bytes':>6}{'held':>6}{'block':>6}")
for e in tiny.events[:16]:
    print(f"{e.seq:>3}  {e.kind:<12}{e.name:<14}{e.bytes:>6}{e.held:>6}{e.block:>6}")

# %% [markdown]
# The first Linear saves the batch (a leaf: 0 bytes) and its weight
# (a leaf); `tanh` saves its output (64 bytes: 2 × 4 float64), which the
# second Linear saves again (its block is already held: 0 bytes); the
# loss saves the network's output and the target. Backward unpacks, meets
# each gradient, frees what it no longer needs and accumulates `.grad`.

# %% [markdown]
# ## Peaks against the formulas
#
# Counted in activations, steps 42–47 predicted the peaks. Plain: the
# forward pass holds $N$ activations (the sixteen layer outputs), and
# backward adds the gradient in flight. √N checkpointing with $k$
# segments: $k + N/k$ (the kept segment inputs plus one segment held
# again). Reversible: a constant, whatever $N$.

# %% tags=["hide-input"]
def forward_held(timeline):
    return next(e.held for e in timeline.events if e.name == "forward done")


PREDICTED = {"plain": f"N = {N}", "checkpoint": f"k + N/k = {K + N // K}", "reversible": "constant"}
print(f"{'variant':<12}{'after forward':>14}{'peak':>8}   predicted (activations)")
for variant, timeline in TIMELINES.items():
    print(f"{variant:<12}{forward_held(timeline) / ACT:>14.2f}{timeline.peak / ACT:>8.2f}   {PREDICTED[variant]}")
deep = {n: step("reversible", revnet(depth=n)).peak for n in (4, 16)}
assert deep[4] == deep[16]
print(f"reversible peak, N = 4 and N = 16: {deep[4] / ACT:.2f} activations both")

# %% [markdown]
# Measured, each peak is the activations held plus one weight gradient
# (256 × 256, four activations) between its accumulation and its release.
# Plain: 16 + 4. Checkpointed: the $k - 1 = 3$ kept segment inputs (the
# first is the batch, a leaf) and the last segment's $N/k = 4$, then + 4:
# the $k + N/k$ of step 44, less the batch. Reversible: the same 6.5 at
# depth 4 as at 16.

# %% [markdown]
# ## Against tracemalloc, and PyTorch's visualiser
#
# The recorder counts only arrays its hooks meet. NumPy reports every
# array it allocates to tracemalloc (a domain of its own), so the same step
# run with `trace=True` has, beside each event, the bytes NumPy really
# holds. When forward is done they agree to the loss's own 8 bytes, and
# once the loss is freed exactly; in between, NumPy holds more, never
# less: what no hook meets, a layer's output before `tanh` in forward,
# the temporaries of a Linear's backward (at most three weight-sized
# arrays and an activation), the batch's own gradient.

# %% tags=["hide-input"]
TRACED = {v: step(v, build(), trace=True) for v, build in VARIANTS.items()}
LOSS_BYTES, SLACK = 16, 3 * WIDTH * WIDTH * 8 + ACT  # the loss and its gradient; a Linear's backward temporaries
for variant, timeline in TRACED.items():
    assert [e.held for e in timeline.events] == [e.held for e in TIMELINES[variant].events]
    gaps = [e.traced - e.held for e in timeline.events]
    marks = [e.traced - e.held for e in timeline.events if e.name in ("forward done", "loss freed")]
    assert all(0 <= g <= SLACK for g in gaps) and all(0 <= g <= LOSS_BYTES for g in marks), (variant, gaps)
    print(f"{variant:<12} at the marks NumPy holds {max(marks)} bytes more; "
          f"between them at most {max(gaps) / 1024:.0f} KiB more")

# %% [markdown]
# PyTorch's memory visualiser reads a snapshot dict whose `device_traces`
# list each allocation and free. `memory_viz` writes the events in that
# form (`alloc` and `free_completed`, the event number as time, the block
# number as address). The allocator's `segments` stay empty: NumPy has no
# caching allocator whose reserved segments could be listed honestly.

# %%
snapshot = mt.memory_viz(TIMELINES["checkpoint"].events)
path = pathlib.Path(tempfile.mkdtemp()) / "checkpoint_snapshot.json"
path.write_text(json.dumps(snapshot))
print(len(snapshot["device_traces"][0]), "entries; first:", snapshot["device_traces"][0][0]["action"],
      snapshot["device_traces"][0][0]["size"], "bytes")

# %% [markdown]
# ## Check against PyTorch
#
# The same MLP and the same checkpointed MLP in torch (float64,
# `checkpoint_sequential` reentrant, the batch requiring grad, each
# gradient let go once accumulated). Saved bytes: a `saved_tensors_hooks`
# pack hook that counts, in both. Held after forward and peak: torch's
# profiler records every allocation and free of its CPU allocator; their
# running sum is what torch holds. After forward torch may hold one
# activation more (measured: a 64 × 256 buffer its `mse_loss` allocates
# and keeps until backward), its 8-byte loss and, checkpointed, each
# checkpoint's CPU random state (5 KiB each); at the peak torch holds
# more by at most three weight gradients and an activation: it counts the
# temporaries of backward, which the recorder does not meet.

# %% tags=["hide-input"]
import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.utils.checkpoint as tc  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402


def torch_twin(net):
    layers = []
    for i, layer in enumerate(net.layers):
        linear = torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(layer.weight.data))
            linear.bias.copy_(torch.from_numpy(layer.bias.data))
        layers.append(torch.nn.Sequential(linear, torch.nn.Tanh()) if i < len(net.layers) - 1 else linear)
    return torch.nn.Sequential(*layers)  # one module per layer: checkpoint_sequential splits as ours


def torch_forward(variant, twin, x):
    if variant == "checkpoint":
        return tc.checkpoint_sequential(twin, K, x, use_reentrant=True)
    return twin(x)


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's start and stop lines go to the process's stderr, and not always: silenced, for same outputs."""
    sys.stderr.flush()
    saved_fd, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        os.close(devnull)


def torch_step(variant, twin):
    """Saved bytes (pack hook), and held after forward and peak (the profiler's allocations), above the start."""
    saved = []
    for p in twin.parameters():
        p.register_post_accumulate_grad_hook(drop)
    x, target = torch.tensor(X, requires_grad=True), torch.from_numpy(TARGET)
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            with record_function("forward"):
                loss = torch.nn.functional.mse_loss(torch_forward(variant, twin, x), target)
        loss.backward()
    existing = {t.untyped_storage().data_ptr() for t in [x, target, *twin.parameters()]}
    new = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    saved = [len(saved), sum(size for ptr, size in new.items() if ptr not in existing)]
    with tempfile.TemporaryDirectory() as folder:
        prof.export_chrome_trace(f"{folder}/trace.json")
        events = json.loads(pathlib.Path(f"{folder}/trace.json").read_text())["traceEvents"]
    return saved, torch_held(events)


def torch_held(events):
    end = next(e["ts"] + e["dur"] for e in events if e.get("name") == "forward" and "dur" in e)
    allocations = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                         key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    held, peak, after_forward = 0, 0, None
    for e in allocations:
        if after_forward is None and e["ts"] > end:
            after_forward = held
        held += e["args"]["Bytes"]
        peak = max(peak, held)
    return after_forward, peak


# %%
def saved_counts(timeline):
    """What the pack hook saw in forward: (tensors, bytes, new bytes)."""
    forward = [e for e in timeline.events[:next(e.seq for e in timeline.events if e.name == "forward done")]
               if e.kind == "saved"]
    return len(forward), sum(e.bytes for e in forward)


for variant in ("plain", "checkpoint"):
    ours = TIMELINES[variant]
    saved, (after_forward, peak) = torch_step(variant, torch_twin(mlp()))
    count, new = saved_counts(ours)
    assert [count, new] == saved, ([count, new], saved)
    assert 0 <= after_forward - forward_held(ours) <= ACT + 16 * 1024 and 0 <= peak - ours.peak <= SLACK
    print(f"{variant}: {count} tensors saved, {new // 1024} KiB new (= torch's)")
    print(f"    KiB held after forward {forward_held(ours) // 1024} (torch {after_forward // 1024}), "
          f"peak {ours.peak // 1024} (torch {peak // 1024})")
print("PyTorch check passed: saved tensors and bytes as torch's; held after forward, peaks within bounds")

# %% [markdown]
# ## Recap
#
# - A memory timeline is a list of events (saved, recomputed, unpacked,
#   gradient, accumulated, freed), each with its bytes and the bytes held
#   so far; drawn, it shows *when* memory is held, not only how much.
# - Public hooks suffice: pack/unpack hooks see what is saved and
#   recomputed, tensor and accumulate hooks see gradients, weakref
#   finalizers see frees. tracemalloc checks that nothing large is missed.
# - Plain training ramps up in forward and falls in backward; √N
#   checkpointing draws a sawtooth of $k-1$ teeth under $k + N/k$;
#   a reversible network stays flat, whatever its depth.

# %% [markdown]
# ## Exercises
#
# 1. Find the event at which the plain step's peak is reached: what kind
#    is it, and is it in forward or backward?
# 2. Predict how many teeth the sawtooth has for $k$ = 2, 4 and 8
#    segments of the 16-layer MLP (count the runs of recomputed events),
#    and check with the recorder.

# %% tags=["hide-cell"]
# Exercise 1
peak_event = next(e for e in TIMELINES["plain"].events if e.held == TIMELINES["plain"].peak)
in_backward = peak_event.seq > next(e.seq for e in TIMELINES["plain"].events if e.name == "forward done")
print(f"peak at event {peak_event.seq}: {peak_event.kind} ({'backward' if in_backward else 'forward'})")


# %% tags=["hide-cell"]
# Exercise 2
def teeth(k):
    """Runs of consecutive recomputed events in the checkpointed step with k segments."""
    global K
    K, saved_k = k, K
    try:
        kinds = [e.kind for e in step("checkpoint", mlp()).events if e.kind in ("recomputed", "freed", "gradient")]
    finally:
        K = saved_k
    return sum(1 for a, b in zip(["start"] + kinds, kinds) if b == "recomputed" and a != "recomputed")


print({k: teeth(k) for k in (2, 4, 8)}, "predicted:", {k: k - 1 for k in (2, 4, 8)})
