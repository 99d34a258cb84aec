# %% [markdown]
# # Step 43: Checkpointing on saved-tensor hooks
#
# Step 42 checkpointed a function the reentrant way: the whole function became
# one node, whose backward ran the function again and then a backward pass of
# its own inside the outer one. That form has limits. When no input requires a
# gradient there is no node, so the parameters inside get no gradient;
# `autograd.grad` cannot use it; and the function always runs to the end.
#
# PyTorch recommends another form, `checkpoint(..., use_reentrant=False)`,
# built on step 38's saved-tensor hooks. The function runs normally, so its
# graph is recorded as usual. But every tensor it saves goes through a pack
# hook that keeps a small **placeholder** instead of the tensor. When backward
# first needs one of those tensors, the unpack hook runs the function again and
# fills in every placeholder. The graph is the ordinary one; only *where the
# saved tensors come from* has changed.

# %%
import textwrap

import numpy as np

import tinypytorch
from tinypytorch import Variable, recomputation
from tinypytorch.utils import checkpoint as checkpoint_module
from tinypytorch.utils import saved_tensors
from tinypytorch.utils.checkpoint import CheckpointError, checkpoint
from tinypytorch.utils.listing import show_code


def show(a):
    """An array with 4 decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=4, floatmode="fixed", separator=", ")


# %% [markdown]
# ## A function that says when it runs
#
# The function `f` applies six operations. A helper `run` writes each
# operation's name into a log before running it, with "(again)" when it runs
# inside a recomputation (`recomputation.is_recomputing()`).
#
# Only the first three operations save tensors (step 35): `sin` saves its
# input, the square $h \cdot h$ saves both factors, `tanh` saves its output.
# Adding 1, multiplying by 3 and negating save nothing, since their derivatives
# are constants. So `f` saves four tensors, the last of them in its third
# operation.

# %%
log = []


def run(name, operation, h):
    log.append(name + (" (again)" if recomputation.is_recomputing() else ""))
    return operation(h)


def f(x, m=tinypytorch):
    """Six operations; m provides sin and tanh (tinypytorch here, torch in the check)."""
    h = run("sin", m.sin, x)
    h = run("square", lambda h: h * h, h)
    h = run("tanh", m.tanh, h)
    h = run("add 1", lambda h: h + 1.0, h)
    h = run("times 3", lambda h: h * 3.0, h)
    return run("neg", lambda h: -h, h)


x0 = np.array([0.5, 1.0, 2.0])
x = Variable(x0.copy(), name="x")
y = checkpoint(f, x, use_reentrant=False).sum()
print("forward: ", log)
log.clear()
y.backward()
print("backward:", log)
x_plain = Variable(x0.copy())
f(x_plain).sum().backward()
print("x.grad =", show(x.grad))
print("bitwise equal to the plain run's:", np.array_equal(x.grad.data, x_plain.grad.data))

# %% [markdown]
# Backward ran three of the six operations again: `sin`, the square and `tanh`.
# The last three were not repeated, because nothing they compute is needed.
# The gradient is the plain run's to the last bit: the same operations ran on
# the same numbers.
#
# ## Placeholders instead of tensors
#
# What did the graph keep? Step 35's `saved_tensors(y)` lists the functions
# behind `y` with what they saved. Each saved tensor was packed by the
# checkpoint's hook, which kept a `_Holder`, an empty object:

# %%
log.clear()
x = Variable(x0.copy(), name="x")
y = checkpoint(f, x, use_reentrant=False).sum()
for function, saved in saved_tensors(y):
    print(f"{type(function).__name__:5} keeps a {type(saved.packed).__name__}, "
          f"whose values are {saved.packed.values}")

# %% [markdown]
# `checkpoint(..., use_reentrant=False)` comes to `_checkpoint_hooks`. Only
# its tensor arguments are kept; anything else (a flag, a number) is passed to
# the function as it is. Under `no_grad` nothing would be saved, so it just
# calls the function. Otherwise it makes a `_Frame`, one per checkpointed call,
# and runs the function under the frame's hooks:

# %%
show_code(checkpoint_module._checkpoint_hooks, step=43)

# %% [markdown]
# The frame remembers how to run the function again: the function, its inputs
# and the random state (step 41; `rng_state` and `replaying` come from
# `tinypytorch.recomputation`, which holds all the replaying). It keeps the
# inputs as `SavedTensor`s, so an in-place change to one of them after forward
# is caught by step 36's version check. The pack hook makes a holder, keeps a
# *weak* reference to it and records the tensor's shape, dtype and device.
# Autograd keeps the holder itself, so when a backward pass frees a function's
# saved tensors (step 35), the holder goes with them:

# %%
show_code(checkpoint_module._Holder, step=43)
show_code(checkpoint_module._Frame.pack, step=43)

# %% [markdown]
# ## Recomputing on the first unpack
#
# Nothing happens until backward asks for a saved tensor. Every backward pass
# has an id, read from the running pass (`current_pass()`, the door of step
# 42). The first unpack in a pass finds no recomputation for that id and
# starts one; later unpacks in the same pass find their tensors already in
# their holders. Each tensor is handed out once and replaced by `None`, so a
# recomputed tensor lives only until the function that needs it has run its
# backward:

# %%
show_code(checkpoint_module._Frame.unpack, step=43)

# %% [markdown]
# The recomputation unpacks the saved inputs (the version check runs here),
# restores the random state and calls the function again, recording, under a
# second pair of hooks whose pack hook is `repack`:

# %%
show_code(checkpoint_module._Frame.recompute, step=43)

# %% [markdown]
# The second run saves its tensors in the order the first run did, so the
# $k$-th tensor saved now belongs in the $k$-th holder. `repack` puts it there,
# detached: only the values are needed, since the graph being differentiated
# is the one recorded in forward. As soon as the last holder is filled,
# nothing the rest of the function computes can be needed. `repack` then
# raises `_StopRecomputation` from inside the pack hook; the exception unwinds
# out of the function, and `recompute` catches it. This is **early stop**.

# %%
show_code(checkpoint_module._Frame.repack, step=43)

# %% [markdown]
# ### Watching the holders
#
# A holder is *empty* before the recomputation, *filled* after it, and *handed
# out* once its tensor has been unpacked. In `g` below, `sin` saves $x$, the
# product saves $\sin x$ and $x$, and `tanh` saves its output: four holders. A
# gradient hook (step 34) on the product prints their states in the middle of
# backward, after `tanh`'s backward has unpacked its tensor and before the
# product's has:

# %%
def state(holder_ref):
    values = list(holder_ref().values.values())
    return "empty" if not values else "handed out" if values[-1] is None else "filled"


def g(x):
    h = tinypytorch.sin(x) * x
    if not recomputation.is_recomputing():
        h.register_hook(lambda grad: print("during backward:", [state(r) for r in frame.holders]))
    return tinypytorch.tanh(h)


x = Variable(x0.copy(), name="x")
y = checkpoint(g, x, use_reentrant=False).sum()
frame = saved_tensors(y)[0][1].unpack_hook.__self__  # the frame whose method is the unpack hook
print("after forward:  ", [state(r) for r in frame.holders])
y.backward(retain_graph=True)
print("after backward: ", [state(r) for r in frame.holders])

# %% [markdown]
# The first unpack filled all four holders at once; by the end of the pass
# every tensor has been used and dropped, although the graph was retained (a
# second pass would recompute again). The picture follows `f`'s four holders
# through one forward and one backward pass:

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402

OPS = [  # (time, label, phase) on the operations lane
    *[(t, name, "forward") for t, name in enumerate(["sin", "square", "tanh", "+1", "×3", "neg"])],
    (6.6, "neg'", "backward"), (7.6, "×3'", "backward"), (8.6, "+1'", "backward"),
    (9.6, "sin", "again"), (10.6, "square", "again"), (11.6, "tanh", "again"),
    (13.2, "tanh'", "backward"), (14.2, "square'", "backward"), (15.2, "sin'", "backward"),
]
HOLDERS = [  # (label, packed at, filled at, handed out at)
    ("holder 0: sin's input", 0, 9.6, 15.2),
    ("holder 1: square's 1st factor", 1, 10.6, 14.2),
    ("holder 2: square's 2nd factor", 1, 10.6, 14.2),
    ("holder 3: tanh's output", 2, 11.6, 13.2),
]
COLORS = {"forward": "#9ecae1", "backward": "#a1d99b", "again": "#fdae6b"}

fig, axis = plt.subplots(figsize=(9, 3.8))
top = len(HOLDERS) + 0.6
for t, label, phase in OPS:
    axis.add_patch(FancyBboxPatch((t - 0.42, top - 0.3), 0.84, 0.6, boxstyle="round,pad=0.02",
                                  facecolor=COLORS[phase], edgecolor="black", linewidth=0.6))
    axis.text(t, top, label, ha="center", va="center", fontsize=7.5)
for row, (label, packed, filled, used) in enumerate(HOLDERS):
    level = len(HOLDERS) - 1 - row
    axis.text(-0.7, level, label, ha="right", va="center", fontsize=8)
    axis.add_patch(Rectangle((packed, level - 0.18), filled - packed, 0.36, facecolor="white",
                             edgecolor="gray", linestyle="--", linewidth=0.8))
    axis.add_patch(Rectangle((filled, level - 0.18), used - filled, 0.36, facecolor=COLORS["again"],
                             edgecolor="black", linewidth=0.6))
    axis.plot([used], [level], marker="X", color="black", markersize=7)
axis.axvline(6.1, color="black", linewidth=0.8)
axis.text(2.5, top + 0.65, "forward: pack keeps empty holders", ha="center", fontsize=8.5)
axis.text(11, top + 0.65, "backward: the first unpack (tanh') recomputes", ha="center", fontsize=8.5)
axis.annotate("", xy=(9.6, top - 0.35), xytext=(13.2, top - 0.35),
              arrowprops=dict(arrowstyle="->", color="C3", connectionstyle="arc3,rad=-0.35"))
axis.text(11.4, top - 1.15, "tanh' unpacks holder 3", ha="center", va="center", fontsize=7.5, color="C3")
axis.plot([12.35, 12.35], [-0.5, top - 1.35], color="C3", linestyle=":", linewidth=1.2)
axis.text(12.4, -0.75, "early stop: holder 3 filled,\n+1, ×3, neg not rerun", fontsize=7.5, color="C3")
handles = [Rectangle((0, 0), 1, 1, facecolor=COLORS["forward"]), Rectangle((0, 0), 1, 1, facecolor=COLORS["again"]),
           Rectangle((0, 0), 1, 1, facecolor=COLORS["backward"]),
           Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="gray", linestyle="--"),
           Rectangle((0, 0), 1, 1, facecolor=COLORS["again"], edgecolor="black"),
           plt.Line2D([], [], marker="X", color="black", linestyle="none")]
axis.legend(handles, ["forward op", "op run again (recomputation)", "backward op", "empty holder",
                      "holder filled by the recomputation", "handed out, then freed"], loc="upper center",
            bbox_to_anchor=(0.42, -0.1), ncol=3, fontsize=7.5, frameon=False)
axis.set(xlim=(-0.6, 15.8), ylim=(-1.0, top + 1.0), xlabel="time →")
axis.set_yticks([])
axis.set_xticks([])
for side in ("top", "right", "left"):
    axis.spines[side].set_visible(False)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What is recomputed: early stop
#
# How many operations run again depends on where the last saving operation
# is, not on the length of the function. `checkpoint` takes `early_stop=True`
# by default; with `early_stop=False` the recomputation runs to the end:

# %%
def count_runs(early_stop):
    """(operations run in forward, those run again in backward, x.grad) for f checkpointed."""
    log.clear()
    x = Variable(x0.copy())
    y = checkpoint(f, x, use_reentrant=False, early_stop=early_stop).sum()
    forward = len(log)
    y.backward()
    return forward, [name.removesuffix(" (again)") for name in log[forward:]], x.grad


for early_stop in (True, False):
    forward, again, grad = count_runs(early_stop)
    print(f"early_stop={early_stop!s:5}: {forward} in forward, {len(again)} again: {again}")
    print(f"    x.grad = {show(grad)}")

# %% [markdown]
# Early stop saves three operations out of six here, and changes nothing in
# the gradient. Functions often end with operations that save nothing (a
# residual addition, a reshape, a sum); with early stop those never run again.
# PyTorch stops at the same place, as the check at the end confirms.
#
# ## When the second run differs: the determinism check
#
# All of this relies on the second run saving the same tensors as the first,
# in the same order. If it takes another branch, the tensors no longer match
# their holders. The frame checks what it can without keeping the values:
#
# - the **number** of tensors saved;
# - the **metadata** (shape, dtype, device) of each tensor.
#
# Both are compared after the recomputation, in `check_recomputation`, with
# PyTorch's messages. Only a tensor *beyond* the last holder is refused at
# once, by `repack`.
#
# To provoke each error, `h` reads a global setting `CHANGE`. The forward pass
# runs with `CHANGE = None`; then `CHANGE` is set before backward, so only the
# recomputation sees it.

# %%
CHANGE = None


def h(x, m=tinypytorch):
    a = m.sin(x)  # saves x
    if CHANGE == "float32":
        a = tinypytorch.functions.astype(a, np.float32)  # a differentiable cast
    if CHANGE != "one op fewer":
        a = a * a  # saves a twice
    return m.tanh(a) * 3.0  # tanh saves its output


def backward_after_change(change, **options):
    """Forward with CHANGE = None, backward with CHANGE = change: x's gradient, or the error."""
    global CHANGE
    x = Variable(x0.copy())
    CHANGE = None
    y = checkpoint(h, x, use_reentrant=False, **options).sum()
    CHANGE = change
    try:
        y.backward()
        return f"no error, x.grad = {show(x.grad)}"
    except CheckpointError as error:
        return f"CheckpointError: {error}"
    finally:
        CHANGE = None


for change in (None, "one op fewer", "float32"):
    first, *rest = backward_after_change(change).splitlines()[:4]
    print("\n    ".join(textwrap.wrap(f"{change}: {first}", 100) + rest))

# %% [markdown]
# Without the product the recomputation saves two tensors instead of four: it
# never fills the last holder, so it runs to the end, and then the count is
# compared. With the cast, the product and `tanh` save float32 arrays where the
# first run saved float64 ones: the count is right, and the message lists
# every position whose metadata differs, 1 to 3, as PyTorch's does.
#
# The checks cannot see everything, and early stop hides more. The tests of
# this step (`tests/test_step43.py`) check each row against PyTorch:
#
# | the recomputation ... | `early_stop=True` | `early_stop=False` |
# |---|---|---|
# | saves fewer tensors | count error | count error |
# | saves a tensor of another dtype or shape | metadata error | metadata error |
# | adds an operation *after* the last save | not run: the forward's gradient | "trying to save more tensors" |
# | adds an operation *before* the last save | **a wrong gradient, no error** | "trying to save more tensors" |
# | changes dtype, with `determinism_check="none"` | accepted: a gradient close to, not equal to, the right one | the same |
#
# The checks compare counts and metadata, never values, since keeping the
# values would defeat the purpose. So a checkpointed function must not depend
# on state that changes between forward and backward (a global flag, a
# counter, a training step number). Random numbers are the common case, which
# is why `preserve_rng_state=True` restores the random state.
#
# ## What follows from an ordinary graph
#
# The reentrant checkpoint is one node that runs a backward pass of its own.
# The hook-based one leaves the graph as it was and only changes where the
# saved tensors come from, so whatever works on an ordinary graph works here:
# parameters get their gradients when no input requires grad, `autograd.grad`
# with `create_graph=True` gives second derivatives (the function then runs
# three times), checkpoints nest, an input changed in place raises step 36's
# error, a third backward raises step 35's, and dropout draws the same masks
# again. Only two things differ: a custom `backward` that reads
# `saved_tensors` twice gets a `CheckpointError` (each holder is unpacked once
# a pass), and under `no_grad` the function is simply called, once. The
# hidden cell below checks each case; `tests/test_step43.py` checks each
# against PyTorch.

# %% tags=["hide-cell"]
from tinypytorch import Function, autograd  # noqa: E402  (the cases above, checked)
from tinypytorch import functions as F  # noqa: E402
from tinypytorch.layers import MLP  # noqa: E402

calls = [0]


def u(x, m=tinypytorch):
    calls[0] += 1
    return m.sin(x) * m.exp(x)


layer_model = MLP((3, 4, 2), activation=F.tanh, rng=np.random.default_rng(0))
data = Variable(np.random.default_rng(1).standard_normal((5, 3)), requires_grad=False)
grads = []
for use_checkpoint in (True, False):
    layer_model.cleargrads()
    (((checkpoint(layer_model, data, use_reentrant=False) if use_checkpoint else layer_model(data)) ** 2).sum()
     .backward())
    grads.append([p.grad.data for p in layer_model.params()])
assert all(np.array_equal(a, b) for a, b in zip(*grads))
print("no input requires grad: the parameters' gradients are the plain run's")

x = Variable(x0.copy())
(du,) = autograd.grad(checkpoint(u, x, use_reentrant=False).sum(), x, create_graph=True)
(d2u,) = autograd.grad(du.sum(), x)
np.testing.assert_allclose(du.data, (np.cos(x0) + np.sin(x0)) * np.exp(x0), rtol=1e-14)
np.testing.assert_allclose(d2u.data, 2 * np.cos(x0) * np.exp(x0), rtol=1e-14)
assert calls[0] == 3
print("autograd.grad and a second derivative: u' and u'' right, u ran", calls[0], "times")

runs = {"outer": 0, "inner": 0}


def inner(h):
    runs["inner"] += 1
    return tinypytorch.tanh(h) * h


def outer(x):
    runs["outer"] += 1
    return tinypytorch.sin(checkpoint(inner, tinypytorch.exp(x), use_reentrant=False))


x, x_plain = Variable(x0.copy()), Variable(x0.copy())
checkpoint(outer, x, use_reentrant=False).sum().backward()
assert runs == {"outer": 2, "inner": 3}, runs
e = tinypytorch.exp(x_plain)
tinypytorch.sin(tinypytorch.tanh(e) * e).sum().backward()  # the same, without checkpoints
assert np.array_equal(x.grad.data, x_plain.grad.data)
print("nested: runs", runs, "and the plain gradient")

a = Variable(x0.copy()) * 2.0
y = checkpoint(u, a, use_reentrant=False).sum()
a.add_(1.0)
try:
    y.backward()
    raise AssertionError("no error")
except RuntimeError as error:
    assert "modified by an inplace operation" in str(error) and "is at version 1; expected version 0" in str(error)
    print("input changed in place: RuntimeError:", str(error)[:60], "...")

calls[0] = 0
y = checkpoint(u, Variable(x0.copy()), use_reentrant=False).sum()
counts = [calls[0]]
for retain in (True, False):
    y.backward(retain_graph=retain)
    counts.append(calls[0])
try:
    y.backward()
    raise AssertionError("no error")
except RuntimeError as error:
    assert counts == [1, 2, 3] and "backward through the graph a second time" in str(error)
    print("u ran", counts, "times after forward and each pass; a third pass: RuntimeError:", str(error)[:50], "...")


class SquareReadingTwice(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x

    def backward(self, gy):
        (x,) = self.saved_tensors
        (x_again,) = self.saved_tensors  # a second unpack of the same tensor
        return 2.0 * x_again * gy


x = Variable(x0.copy())
SquareReadingTwice()(x).sum().backward()  # fine without the checkpoint
try:
    checkpoint(lambda x: SquareReadingTwice()(x), x, use_reentrant=False).sum().backward()
    raise AssertionError("no error")
except CheckpointError as error:
    assert "already unpacked once" in str(error)
    print("saved_tensors read twice: CheckpointError:", str(error)[30:95], "...")

calls[0] = 0
with tinypytorch.no_grad():
    y = checkpoint(u, Variable(x0.copy()), use_reentrant=False)
assert calls[0] == 1 and not y.requires_grad
print("under no_grad: u ran once, the result does not require grad")

drop_model = MLP((4, 16, 16, 1), activation=F.tanh, rng=np.random.default_rng(0))
drop_batch = np.random.default_rng(1).standard_normal((8, 4))


def dropped(h):
    for layer in drop_model.layers[:-1]:
        h = F.dropout(tinypytorch.tanh(layer(h)), p=0.3)
    return h


def dropout_gradients(use_checkpoint, **options):
    drop_model.cleargrads()
    tinypytorch.manual_seed(0)
    x = Variable(drop_batch.copy())
    hidden = checkpoint(dropped, x, use_reentrant=False, **options) if use_checkpoint else dropped(x)
    (drop_model.layers[-1](hidden) ** 2).sum().backward()
    return [p.grad.data for p in drop_model.params()] + [x.grad.data]


plain = dropout_gradients(False)
assert all(np.array_equal(a, b) for a, b in zip(plain, dropout_gradients(True)))
assert not all(np.array_equal(a, b) for a, b in zip(plain, dropout_gradients(True, preserve_rng_state=False)))
print("dropout: bitwise the plain gradients; with preserve_rng_state=False they differ")

# %% [markdown]
# ## Memory
#
# What does the checkpoint keep between forward and backward, and what does it
# cost during backward? The network is an `MLP` with eight hidden layers of
# width 256 and `tanh`, on a batch of 256 float64 inputs, so one hidden
# activation is $256 \times 256 \times 8$ bytes, 0.5 MiB. The eight hidden
# layers are checkpointed as one function; the output layer and the loss are
# not. A hidden cell measures two things: the bytes saved for backward, with
# step 38's counting pack hook (parameters skipped, each array counted once),
# and the peak during backward, with `tracemalloc` (rounded to whole
# activations, since the allocator also counts small Python objects).

# %% tags=["hide-cell"]
import tracemalloc  # noqa: E402  (the measuring harness)

from tinypytorch.autograd.graph import saved_tensors_hooks  # noqa: E402
from tinypytorch.layers import Parameter  # noqa: E402

model = MLP((64,) + (256,) * 8 + (1,), activation=F.tanh, rng=np.random.default_rng(0))
batch = np.random.default_rng(1).standard_normal((256, 64))
ACTIVATION = 256 * 256 * 8  # bytes


def hidden_layers(h):
    for layer in model.layers[:-1]:
        h = tinypytorch.tanh(layer(h))
    return h


def loss_of(use_checkpoint):
    x = Variable(batch, requires_grad=False)
    h = checkpoint(hidden_layers, x, use_reentrant=False) if use_checkpoint else hidden_layers(x)
    return (model.layers[-1](h) ** 2).sum()


def bytes_held(use_checkpoint):
    """Bytes of the distinct non-parameter arrays saved for backward (an outer pack hook sees them)."""
    arrays = {}  # id -> array: each array counted once, and held so that its id stays unique

    def pack(v):
        if not isinstance(v, Parameter):
            arrays[id(v.data)] = v.data
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        loss = loss_of(use_checkpoint)
    held = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    model.cleargrads()
    loss.backward()
    return held


def traced_memory(use_checkpoint):
    """(bytes allocated after forward, peak bytes during backward), from tracemalloc."""
    model.cleargrads()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    loss = loss_of(use_checkpoint)
    after_forward = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.reset_peak()
    loss.backward()
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    return after_forward, peak


plain_bytes, checkpointed_bytes = bytes_held(False), bytes_held(True)
traced = {use_checkpoint: traced_memory(use_checkpoint) for use_checkpoint in (False, True)}

# %%
measured = [("plain", plain_bytes, traced[False]), ("checkpointed", checkpointed_bytes, traced[True])]
for name, held, (_, peak) in measured:
    print(f"{name:12}: {held:9,} bytes saved for backward ({held / ACTIVATION:.2f} activations), "
          f"peak during backward ~{peak / ACTIVATION:.0f} activations")

# %% tags=["hide-input"]
fig, axis = plt.subplots(figsize=(8, 3))
labels = ["saved for backward\n(pack hook)", "peak during backward\n(tracemalloc)"]
for offset, name, values in [(-0.2, "plain", (plain_bytes, traced[False][1])),
                             (0.2, "checkpointed", (checkpointed_bytes, traced[True][1]))]:
    bars = axis.barh(np.arange(2) + offset, np.array(values) / ACTIVATION, height=0.38, label=name)
    axis.bar_label(bars, [f"{values[0] / ACTIVATION:.2f}", f"~{values[1] / ACTIVATION:.0f}"], fontsize=8, padding=2)
axis.set_yticks(np.arange(2), labels)
axis.invert_yaxis()
axis.set(xlim=(0, 14), xlabel="activations of 0.5 MiB (256 × 256 float64)",
         title="eight hidden layers checkpointed as one function")
axis.legend(loc="upper right")
fig.tight_layout()
plt.show()

# %% [markdown]
# Without the checkpoint the graph holds the eight `tanh` outputs, the input
# batch (a quarter of an activation: 64 columns) and the output, which the
# square in the loss saves. With it, it holds the batch (the checkpoint's
# input), the last hidden activation (the output layer's input) and the
# output: one activation instead of eight.
#
# During backward, though, the peak is the same: the first unpack recomputes
# all eight activations at once, and the pass releases them one by one. One
# checkpoint around everything only moves the memory from *between* the
# passes to *during* backward. To lower the peak, the network is cut into
# segments, each checkpointed on its own, so that one segment is recomputed at
# a time: step 44's `checkpoint_sequential` and its $\sqrt{N}$ schedule.
#
# ## Check against PyTorch
#
# `f` checkpointed with `torch.utils.checkpoint.checkpoint(...,
# use_reentrant=False)` in float64: the gradient and the operations run again
# in backward, with and without early stop; and the count error of `h` with
# one operation fewer. The other cases are checked against PyTorch in
# `tests/test_step43.py`.

# %% tags=["hide-cell"]
import functools  # noqa: E402

import torch  # noqa: E402
import torch.utils.checkpoint as torch_checkpoint  # noqa: E402


def torch_runs(early_stop):
    """count_runs in PyTorch: (operations run in forward, those run again in backward, x's gradient)."""
    log.clear()
    xt = torch.tensor(x0, requires_grad=True)
    yt = torch_checkpoint.checkpoint(functools.partial(f, m=torch), xt, use_reentrant=False, early_stop=early_stop)
    forward = len(log)
    yt.sum().backward()
    return forward, log[forward:], xt.grad.numpy()


def torch_after_change(change):
    """backward_after_change, in PyTorch: the error's message, or None."""
    global CHANGE
    xt = torch.tensor(x0, requires_grad=True)
    yt = torch_checkpoint.checkpoint(functools.partial(h, m=torch), xt, use_reentrant=False).sum()
    CHANGE = change
    try:
        yt.backward()
    except torch_checkpoint.CheckpointError as error:
        return f"CheckpointError: {error}"
    finally:
        CHANGE = None


# %%
for early_stop in (True, False):
    (forward, again, grad), (forward_t, again_t, grad_t) = count_runs(early_stop), torch_runs(early_stop)
    assert (forward, again) == (forward_t, again_t), (again, again_t)
    np.testing.assert_allclose(grad.data, grad_t, rtol=1e-14)
ours, theirs = backward_after_change("one op fewer"), torch_after_change("one op fewer")
assert theirs.startswith(ours.replace("tinypytorch.utils", "torch.utils")), (ours, theirs)
print("PyTorch check passed: non-reentrant checkpoint's gradients, recomputed operations "
      "and count error as torch's")

# %% [markdown]
# ## Recap
#
# - `checkpoint(f, x, use_reentrant=False)` runs `f` normally under
#   saved-tensor hooks: the graph is the ordinary one, but every saved tensor
#   is packed as an empty holder, and only the inputs are kept.
# - The first unpack in a backward pass runs `f` again, with the saved random
#   state, and `repack` puts the $k$-th tensor it saves into the $k$-th holder;
#   each holder hands its tensor out once and drops it.
# - Early stop ends the recomputation as soon as the last holder is filled, so
#   operations after the last saving one never run again.
# - The determinism check compares the number of tensors and their shape,
#   dtype and device, never their values; a function that depends on changing
#   state can still give a wrong gradient, which early stop can hide.
# - Because the graph is ordinary, `autograd.grad`, second derivatives,
#   nesting, inputs without grad and version checks all work. Memory between
#   the passes drops to the inputs, but the peak during backward does not.
#
# ## Exercises
#
# **1.** The function `late` below saves a tensor only in its second operation
# (`sin` saves its input). Write `reruns(function, early_stop)`, which
# checkpoints `function` on a copy of `x0`, runs backward, and returns the
# log entries of the operations that ran again. How many operations does early
# stop save here?

# %%
def late(x):
    h = run("times 2", lambda h: h * 2.0, x)
    h = run("sin", tinypytorch.sin, h)
    h = run("plus 1.5", lambda h: h + 1.5, h)
    h = run("neg", lambda h: -h, h)
    return run("over 3", lambda h: h / 3.0, h)


# %% tags=["hide-cell"]
def reruns(function, early_stop):
    log.clear()
    y = checkpoint(function, Variable(x0.copy()), use_reentrant=False, early_stop=early_stop).sum()
    in_forward = len(log)
    y.backward()
    return log[in_forward:]


for early_stop in (True, False):
    print(f"early_stop={early_stop}: {reruns(late, early_stop)}")
print("early stop saves", len(reruns(late, False)) - len(reruns(late, True)), "of 5 operations")

# %% [markdown]
# **2.** Write `my_checkpoint(function, x)` on `saved_tensors_hooks` alone, for
# a function that saves one tensor (such as `tinypytorch.exp`, which saves its
# output). The pack hook keeps nothing (`None`). The unpack hook runs
# `function(x)` again, recording (`tinypytorch.enable_grad()`: backward itself
# runs without recording) under a pair of hooks that captures the tensor it
# saves, and returns that tensor. Check the gradient of $\sum e^x$.

# %% tags=["hide-cell"]
from tinypytorch import enable_grad  # noqa: E402
from tinypytorch.autograd.graph import saved_tensors_hooks  # noqa: E402


def my_checkpoint(function, x):
    def unpack(_):
        captured = []
        with enable_grad(), saved_tensors_hooks(lambda v: captured.append(v.detach()) or v, lambda v: v):
            function(x)  # the same computation again: it saves the same (one) tensor
        return captured[0]

    with saved_tensors_hooks(lambda v: None, unpack):
        return function(x)


x = Variable(x0.copy())
y = my_checkpoint(tinypytorch.exp, x).sum()
print("kept for backward:", [saved.packed for _, saved in saved_tensors(y)])
y.backward()
print("x.grad =", show(x.grad), "  e^x =", show(np.exp(x0)))

# %% [markdown]
# **3.** A function whose behaviour depends on a counter (a "training step")
# is a bug under a checkpoint. Write `drifting(x)`, which counts its runs in
# `drift_runs` and applies `tanh` to $\sin x$ $(3 - \text{runs})$ times: twice
# in forward, once in the recomputation. Make the determinism check fire and
# explain its message.

# %% tags=["hide-cell"]
drift_runs = [0]


def drifting(x):
    drift_runs[0] += 1
    h = tinypytorch.sin(x)
    for _ in range(3 - drift_runs[0]):
        h = tinypytorch.tanh(h)
    return h


def drift_error():
    drift_runs[0] = 0
    y = checkpoint(drifting, Variable(x0.copy()), use_reentrant=False).sum()
    try:
        y.backward()
    except CheckpointError as error:
        return str(error)


print(drift_error())
print("forward saved sin's input and two tanh outputs (3); the recomputation took one tanh fewer (2)")
