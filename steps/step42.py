# %% [markdown]
# # Step 42: Checkpointing by recomputation (reentrant)
#
# Steps 35 to 38 looked at what the backward pass keeps: the tensors each
# function saves, and hooks that decide how they wait. This step keeps fewer
# of them. **Gradient checkpointing** runs part of a network without saving
# anything inside it, keeps only that part's inputs, and runs the part again
# during the backward pass, when its saved tensors are needed: memory traded
# for computation (Chen et al., 2016, "Training deep nets with sublinear
# memory cost").
#
# A second run is only correct if it computes exactly what the first
# computed. Dropout draws a new mask on every call, so the recomputation must
# replay the random stream of step 41. This step builds PyTorch's first form
# of checkpointing, the *reentrant* one, and checks that with dropout inside
# it gives the plain run's gradients bit for bit.

# %%
import functools
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Config, Function, Variable, autograd, enable_grad, no_grad, random
from tinypytorch import functions as F
from tinypytorch.autograd.gradients import current_pass
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Dropout, Layer, Linear
from tinypytorch.utils import checkpoint as checkpoint_module
from tinypytorch.utils.checkpoint import checkpoint
from tinypytorch.utils.listing import show_code

# %% [markdown]
# The network of this step is a chain of blocks, each `Linear`, `tanh` and
# `Dropout`: $h_{k+1} = \operatorname{dropout}\bigl(\tanh(h_k W_k^\top +
# b_k)\bigr)$. Its weights come from a seeded NumPy generator of its own;
# only dropout draws from the default generator.

# %%
class Net(Layer):
    """`depth` blocks of Linear(width, width), tanh and Dropout(p)."""

    def __init__(self, width, depth, p, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.blocks = []
        for k in range(depth):
            setattr(self, f"linear{k}", Linear(width, width, rng=rng))
            setattr(self, f"dropout{k}", Dropout(p))
            self.blocks.append((getattr(self, f"linear{k}"), getattr(self, f"dropout{k}")))

    def block(self, k, h):
        linear, drop = self.blocks[k]
        return drop(tinypytorch.tanh(linear(h)))

    def forward(self, h):
        for k in range(len(self.blocks)):
            h = self.block(k, h)
        return h


# %% [markdown]
# ## Keep the inputs, recompute the rest
#
# A network of $N$ blocks keeps the activations of all $N$ blocks for its
# backward pass (step 35). A **checkpoint** around a segment changes this:
# the segment runs in the forward pass without saving anything, and only its
# input is kept. When backward reaches the segment, it runs the segment
# again, this time saving what backward needs, and backpropagates through it
# at once. The price is one more forward pass of the segment.
#
# `checkpoint(function, *args)` has PyTorch's signature, from
# `torch.utils.checkpoint`. How much does it save? A pack hook (step 38) sees
# every saved tensor; the hidden cell counts each array once, leaving out the
# parameters and the network's input, which stay in memory anyway. Four
# blocks of width 64, a batch of 32, float64, dropout $p = 0.2$; run plainly,
# with one checkpoint around the network, and with one per block:

# %% tags=["hide-input"]
def saved_bytes(run, net, batch):
    """Bytes of the distinct arrays saved for backward: by the forward pass and loss, then by the backward pass."""
    x = Variable(batch, name="x")
    leave_out = {id(p.data) for p in net.params()} | {id(x.data)}
    arrays = {}

    def pack(v):
        if id(v.data) not in leave_out:
            arrays[id(v.data)] = v.data
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        y = run(x)
        loss = (y * y).sum()
    forward = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    with saved_tensors_hooks(pack, lambda v: v):  # catches what a recomputation saves
        loss.backward()
    return forward, sum(a.nbytes for a in arrays.values())


def every_block(net):
    def run(x):
        for k in range(len(net.blocks)):
            x = checkpoint(functools.partial(net.block, k), x)
        return x
    return run


# %%
net = Net(width=64, depth=4, p=0.2)
batch = np.random.default_rng(1).standard_normal((32, 64))
runs = {"plain": net, "one checkpoint": lambda x: checkpoint(net, x),
        "a checkpoint per block": every_block(net)}
print(f"{'':24} {'saved by forward':>17} {'saved during backward':>22}")
for name, run in runs.items():
    tinypytorch.manual_seed(0)
    forward, backward = saved_bytes(run, net, batch)
    print(f"{name:24} {forward:17,} {backward:22,}")

# %% [markdown]
# A plain block saves its `tanh` output (16,384 bytes), its dropout mask
# (2,048) and its output, which the next `Linear` (or the loss) saves:
# $4 \times 34{,}816 = 139{,}264$ bytes. With one checkpoint only the
# network's output is saved, by the loss outside; with one per block, each
# block's input is kept.
#
# The second column is the other side of the trade: what the recomputations
# save during backward, everything the plain run saved inside the network.
# With one checkpoint all of it is in memory together, so the peak is not
# lower, only later. With one per block, each block's tensors are freed by
# its own backward before the next block is recomputed. Segments are what
# lower the peak; choosing them is the $\sqrt{N}$ schedule of step 44.
#
# ## The reentrant implementation
#
# PyTorch's original checkpoint, `use_reentrant=True`, is one autograd
# `Function`, `CheckpointFunction`. PyTorch still runs it when `use_reentrant`
# is not given (with a warning asking you to choose), and it is
# tinypytorch's default too:

# %%
show_code(checkpoint_module.CheckpointFunction, step=42)

# %% [markdown]
# **Forward** saves the random state (`rng_state`, with
# `preserve_rng_state`, the default; it and `replaying` come from
# `tinypytorch.recomputation`, which holds all the replaying) and the
# inputs, then runs the function under `no_grad`, so that nothing inside
# records a graph or saves a tensor. The outputs have one
# creator, this node, with one edge per input. The parameters used inside
# are not inputs and have no edge.
#
# **Backward** first refuses to serve `autograd.grad` (below). Then it makes
# fresh leaves holding the saved inputs and, inside `replaying` (step 41's
# `fork_rng` around `set_all_states` with the saved state), runs the
# function again with recording on. Then it runs a whole backward pass
# through the recomputed graph with the public `autograd.backward`, as
# PyTorch's `CheckpointFunction.backward` calls `torch.autograd.backward`: a
# backward *inside* a backward, which is why the form is called reentrant.
# That inner pass fills the `.grad` of the parameters inside, like any
# `backward()`, and of the fresh leaves, whose `.grad` the node returns to
# the outer pass.

# %% tags=["hide-input"]
def box(axis, x0, x1, y, text, color, height=0.8, fontsize=8):
    axis.add_patch(plt.Rectangle((x0, y), x1 - x0, height, facecolor=color, edgecolor="black", lw=0.8))
    axis.text((x0 + x1) / 2, y + height / 2, text, ha="center", va="center", fontsize=fontsize, wrap=True)


fig, axis = plt.subplots(figsize=(9, 3.6))
box(axis, 0.0, 2.6, 3.3, "save x and the\nRNG state; run f\nunder no_grad", "0.9", height=1.0)
box(axis, 2.8, 4.6, 1.9, "loss.backward()\nreaches the\ncheckpoint's node", "0.9", height=1.0)
box(axis, 4.8, 13.0, 1.7, "", "#eef4fb", height=1.4)
axis.text(8.9, 2.82, "CheckpointFunction.backward, inside the outer pass", ha="center", fontsize=9)
steps = [(5.0, 6.9, "1 restore the RNG\nstate (fork_rng)", "#fdd9b5"),
         (7.1, 9.0, "2 run f again,\ngrad on: a graph", "#cdebc5"),
         (9.2, 11.3, "3 inner backward:\nparameters' .grad,\nleaves' .grad", "#c6dbef"),
         (11.5, 12.8, "4 return\nthe leaves'\n.grad", "#e0d4ec")]
for x0, x1, text, color in steps:
    box(axis, x0, x1, 1.8, text, color, height=0.95, fontsize=7.5)
box(axis, 13.2, 14.6, 1.9, "the outer\npass goes on\nto x", "0.9", height=1.0)
for x0, x1 in ((4.6, 4.8), (6.9, 7.1), (9.0, 9.2), (11.3, 11.5), (13.0, 13.2)):
    axis.annotate("", (x1, 2.3), (x0, 2.3), arrowprops=dict(arrowstyle="->"))
axis.text(-0.1, 4.5, "forward pass", fontsize=9)
axis.text(2.8, 3.05, "backward pass", fontsize=9)
axis.text(7.3, 1.2, "f runs twice: in forward (nothing saved) and in step 2 (graph recorded, freed by step 3)",
          ha="center", fontsize=8)
axis.set(xlim=(-0.2, 14.8), ylim=(1.0, 4.8), xlabel="time →")
axis.set_xticks([])
axis.set_yticks([])
for side in ("left", "right", "top"):
    axis.spines[side].set_visible(False)
axis.set_title("reentrant checkpointing: a backward pass inside the backward pass", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# To watch this happen, wrap the network in a function that records each
# call: whether recording was on, and whether a backward pass was running
# (`current_pass()`, from `tinypytorch.autograd.gradients`: the one door the
# autograd kernel opens to the code that runs a pass inside a pass, for what
# `backward` and `grad` cannot tell it):

# %%
calls = []


def watched(h):
    calls.append(f"call {len(calls) + 1}: recording {'on' if Config.enable_backprop else 'off'}, "
                 f"inside a backward pass: {current_pass() is not None}")
    return net(h)


net = Net(width=3, depth=2, p=0.5)
x = Variable(np.random.default_rng(2).standard_normal((2, 3)), name="x")
y = checkpoint(watched, x)
print("the node:", type(y.creator).__name__, "| its edges go to:", [n.name for n, _ in y.creator.edges])
(y * y).sum().backward()
print("\n".join(calls))
print("every parameter has a gradient:", all(p.grad is not None for p in net.params()))

# %% [markdown]
# The node has a single edge, to `x`, and yet all four parameters received
# gradients: they came from the inner backward pass.
#
# ## Dropout inside a checkpoint
#
# Six blocks of width 16 with dropout $p = 0.3$, a batch of 8, float64. The
# gradients of one training step are computed three ways, each from
# `manual_seed(0)`: **plain**, **preserved** (one checkpoint around the
# network, `preserve_rng_state=True`) and **not preserved**
# (`preserve_rng_state=False`). After each backward the generator is asked
# for one more number: where the next step's masks would start.

# %%
def one_step(net, batch, run):
    """From manual_seed(0): y = run(x), sum(y^2).backward(); the gradients (x first) and the next draw."""
    net.cleargrads()
    tinypytorch.manual_seed(0)
    x = Variable(batch.copy(), name="x")
    y = run(x)
    (y * y).sum().backward()
    return [x.grad.data] + [p.grad.data for p in net.params()], random.default_generator().random()


def compare(grads, reference):
    """(largest |difference|, every array bitwise equal, how many entries differ)."""
    largest = max(np.abs(g - r).max() for g, r in zip(grads, reference))
    equal = all(np.array_equal(g, r) for g, r in zip(grads, reference))
    return largest, equal, sum(np.count_nonzero(g != r) for g, r in zip(grads, reference))


net = Net(width=16, depth=6, p=0.3)
batch = np.random.default_rng(3).standard_normal((8, 16))
plain, plain_next = one_step(net, batch, net)
preserved, preserved_next = one_step(net, batch, lambda x: checkpoint(net, x))
shifted, shifted_next = one_step(net, batch, lambda x: checkpoint(net, x, preserve_rng_state=False))
entries = sum(g.size for g in plain)
print(f"{'':14} {'max |difference|':>17} {'bitwise equal':>14} "
      f"{'entries that differ':>20} {'next draw':>10}")
print(f"{'plain':14} {'':>17} {'':>14} {'':>20} {plain_next:10.4f}")
cases = [("preserved", preserved, preserved_next), ("not preserved", shifted, shifted_next)]
for name, grads, following in cases:
    largest, equal, differ = compare(grads, plain)
    print(f"{name:14} {largest:17.2g} {str(equal):>14} {f'{differ} of {entries}':>20} {following:10.4f}")

# %% [markdown]
# With the state preserved, the gradients are **bitwise equal** to the plain
# run's: the same float64 operations in the same order on the same arrays.
# The generator also ends where the plain run left it, because the
# recomputation drew inside `fork_rng`.
#
# Without it, the recomputation drew *new* masks. The loss came from the
# first masks, but backward differentiated a network with other masks: every
# gradient entry but one is wrong (that one is zero under both), and nothing
# warns. The stream has also moved on, so every later mask differs too.
# PyTorch, with `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`
# and its own generator, gives the same verdicts (its masks differ from
# ours, so only its own runs are compared):

# %% tags=["hide-input"]
import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402


def torch_twin(net, masks=None):
    """net in torch.nn (float64), the same weights. With `masks`, each block multiplies by a fixed mask instead."""
    modules = []
    for k, (linear, drop) in enumerate(net.blocks):
        twin = torch.nn.Linear(linear.weight.shape[1], linear.weight.shape[0], dtype=torch.float64)
        with torch.no_grad():
            twin.weight.copy_(torch.from_numpy(linear.weight.data))
            twin.bias.copy_(torch.from_numpy(linear.bias.data))
        last = torch.nn.Dropout(drop.p) if masks is None else FixedMask(masks[k], drop.p)
        modules += [twin, torch.nn.Tanh(), last]
    return torch.nn.Sequential(*modules)


class FixedMask(torch.nn.Module):
    """Dropout with a mask given in advance: x * keep * (1 / (1 - p)), as tinypytorch computes it."""

    def __init__(self, keep, p):
        super().__init__()
        self.keep, self.scale = torch.from_numpy(keep.astype(np.float64)), 1.0 / (1.0 - p)

    def forward(self, x):
        return x * self.keep * self.scale


def torch_one_step(twin, batch, run):
    """one_step in PyTorch, from torch.manual_seed(0)."""
    twin.zero_grad()
    torch.manual_seed(0)
    x = torch.tensor(batch, requires_grad=True)
    y = run(x)
    (y * y).sum().backward()
    return [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in twin.parameters()], torch.rand(1).item()


def torch_checkpoint(function, *args, **kwargs):
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=True, **kwargs)


twin = torch_twin(net)
t_plain, t_plain_next = torch_one_step(twin, batch, twin)
t_preserved, t_preserved_next = torch_one_step(twin, batch, lambda x: torch_checkpoint(twin, x))
t_shifted, t_shifted_next = torch_one_step(twin, batch, lambda x: torch_checkpoint(twin, x, preserve_rng_state=False))
print(f"PyTorch        {'bitwise equal':>14} {'next draw equal':>16}")
for name, grads, following in [("preserved", t_preserved, t_preserved_next),
                               ("not preserved", t_shifted, t_shifted_next)]:
    print(f"{name:14} {str(compare(grads, t_plain)[1]):>14} {str(following == t_plain_next):>16}")

# %% [markdown]
# `preserve_rng_state=False` exists because saving and restoring the state
# costs a little time. It is safe only when the function draws no random
# numbers at all.
#
# ## The limits of the reentrant form
#
# One node whose backward runs a backward of its own has two limits, both
# PyTorch's too. First, the node records a graph only if one of its
# *inputs* requires a gradient; the parameters inside are not inputs. If the
# input is plain data, as the first segment of a network usually receives,
# there is no node, and the parameters get no gradient. Both frameworks warn,
# with the same words:

# %%
net = Net(width=3, depth=2, p=0.0)
data = np.random.default_rng(4).standard_normal((2, 3))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = checkpoint(net, Variable(data, requires_grad=False))
print("UserWarning:", caught[0].message)
print("the output requires grad:", y.requires_grad)

# %% [markdown]
# The repair is `requires_grad=True` on the input, or the first layers left
# outside the checkpoint. Second, `autograd.grad` (step 33) returns the
# gradients it is asked for and leaves every `.grad` alone. The inner
# `backward()` writes into the parameters' `.grad`, and the outer pass cannot
# ask the node for a parameter's gradient. So the node refuses, when the
# running pass is one of `autograd.grad`'s (`current_pass().capture`, in the
# listing above):

# %%
x = Variable(data, name="x")
try:
    autograd.grad((checkpoint(net, x) ** 2).sum(), x)
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 100))

# %% [markdown]
# PyTorch now recommends `use_reentrant=False`, built on the saved-tensor
# hooks of step 38 instead of a nested backward. It has neither limit, and it
# is step 43.
#
# ## Check against PyTorch
#
# The six-block network with dropout is checkpointed in tinypytorch. Its
# PyTorch copy applies the masks tinypytorch drew (redrawn from PCG64) as
# fixed multipliers, and is checkpointed with
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`; the hidden cell
# compares loss and gradients (`rtol=1e-10`) and the two limits' warning and
# error in both frameworks.

# %% tags=["hide-input"]
net = Net(width=16, depth=6, p=0.3)
tinypytorch.manual_seed(0)
generator = np.random.Generator(np.random.PCG64(0))
masks = [generator.random(batch.shape) >= 0.3 for _ in net.blocks]  # one per block, in the order drawn
x = Variable(batch.copy())
y = checkpoint(net, x)
loss = (y * y).sum()
loss.backward()
grads = [x.grad.data] + [p.grad.data for p in net.params()]
twin = torch_twin(net, masks)
x_t = torch.tensor(batch, requires_grad=True)
y_t = torch_checkpoint(twin, x_t)
loss_t = (y_t * y_t).sum()
loss_t.backward()
grads_t = [x_t.grad.numpy()] + [p.grad.numpy() for p in twin.parameters()]
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
for g, g_t in zip(grads, grads_t, strict=True):
    np.testing.assert_allclose(g, g_t, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(g_t).max()))


def limits(m):
    """(the warning for an input that needs no gradient, the error of autograd.grad) in tinypytorch or torch."""
    small = Net(width=3, depth=2, p=0.0)
    module = small if m is tinypytorch else torch_twin(small)
    run = checkpoint if m is tinypytorch else torch_checkpoint
    make = (lambda a, r: Variable(a, requires_grad=r)) if m is tinypytorch else \
        (lambda a, r: torch.tensor(a, requires_grad=r))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not run(module, make(data, False)).requires_grad
    x = make(data, True)
    try:
        (autograd.grad if m is tinypytorch else torch.autograd.grad)(run(module, x).sum(), x)
    except RuntimeError as error:
        return str(caught[0].message), str(error)
    raise AssertionError("autograd.grad through a reentrant checkpoint should have raised")


(warning, error), (warning_t, error_t) = limits(tinypytorch), limits(torch)
assert warning == warning_t == "None of the inputs have requires_grad=True. Gradients will be None"
assert error.startswith("When use_reentrant=True, tinypytorch.utils.checkpoint is incompatible with autograd.grad()")
assert error_t.startswith("When use_reentrant=True, torch.utils.checkpoint is incompatible with .grad()")
print(f"loss {loss.item():.4f} and {len(grads)} gradients equal PyTorch's checkpointed twin's with the same masks")

# %%
assert compare(preserved, plain)[1] and preserved_next == plain_next
assert compare(t_preserved, t_plain)[1] and t_preserved_next == t_plain_next
assert not compare(shifted, plain)[1] and not compare(t_shifted, t_plain)[1]
print("PyTorch check passed: checkpointed gradients with dropout, RNG preservation "
      "and reentrant limits as torch's")

# %% [markdown]
# ## Recap
#
# - A checkpoint keeps only a segment's inputs; backward runs the segment
#   again and backpropagates through the recomputed graph at once.
# - The reentrant form is one `Function`: forward under `no_grad`, backward
#   recomputes with recording on and runs a backward pass inside the outer
#   one; the parameters get their `.grad` from that inner pass.
# - Recomputing moves memory from forward to backward; only several segments
#   lower the peak.
# - With dropout inside, restoring the RNG state in a `fork_rng` gives
#   bitwise the plain run's gradients and leaves the stream where it was;
#   without it the gradients are silently wrong.
# - Its limits: no node when no input requires a gradient, and no
#   `autograd.grad`.
#
# ## Exercises
#
# **1.** Checkpoint a two-layer block $\tanh(W_1 \tanh(W_0 x + b_0) + b_1)$
# by hand: write a `Function`, `Recomputed(block)`, whose `forward` saves
# only its input and runs `block` under `no_grad`, and whose `backward`
# recomputes `block` from a fresh leaf under `enable_grad` and calls
# `backward(gy)` on the result. Compare with the plain run's gradients.

# %% tags=["hide-cell"]
class Recomputed(Function):
    def __init__(self, block):
        self.block = block

    def forward(self, x):
        self.save_for_backward(x)  # the input: all it keeps
        with no_grad():
            return self.block(Variable(x)).data

    def backward(self, gy):
        (x,) = self.saved_tensors
        leaf = Variable(x.data)
        with enable_grad():
            y = self.block(leaf)
        y.backward(gy)  # the inner pass: the block's parameters get their .grad here
        return leaf.grad


rng = np.random.default_rng(7)
layer0, layer1 = Linear(5, 5, rng=rng), Linear(5, 5, rng=rng)


def two_layers(h):
    return tinypytorch.tanh(layer1(tinypytorch.tanh(layer0(h))))


inputs = rng.standard_normal((4, 5))
results = []
for run in (two_layers, lambda h: Recomputed(two_layers)(h)):
    layer0.cleargrads(), layer1.cleargrads()
    x = Variable(inputs)
    (run(x) ** 2).sum().backward()
    results.append([x.grad.data, layer0.weight.grad.data, layer1.weight.grad.data])
print("gradients bitwise equal to the plain run's:", all(np.array_equal(a, b) for a, b in zip(*results)))

# %% [markdown]
# **2.** Count, with a pack hook, the bytes the block saves for backward
# (parameters left out) plainly and through `Recomputed`.

# %% tags=["hide-cell"]
def block_saved_bytes(run, x):
    parameters = {id(p.data) for p in (*layer0.params(), *layer1.params())}
    arrays = {}

    def pack(v):
        if id(v.data) not in parameters:
            arrays[id(v.data)] = v.data.nbytes
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        run(x)
    return sum(arrays.values())


x = Variable(inputs)
print("plain:", block_saved_bytes(two_layers, x), "bytes; recomputed:",
      block_saved_bytes(lambda h: Recomputed(two_layers)(h), x), "bytes")

# %% [markdown]
# **3.** Put dropout between the two layers and make `Recomputed` right
# again: a subclass `RecomputedWithRng` that notes the random state in
# `forward` and replays it in `backward`, leaving the stream outside as it
# was. Its gradients must equal the plain run's bitwise, and so must the next
# draw.

# %% tags=["hide-cell"]
class RecomputedWithRng(Recomputed):
    def forward(self, x):
        self.rng_state = tinypytorch.get_rng_state()
        return super().forward(x)

    def backward(self, gy):
        with random.fork_rng():
            tinypytorch.set_rng_state(self.rng_state)
            return super().backward(gy)


def with_dropout(h):
    return tinypytorch.tanh(layer1(F.dropout(tinypytorch.tanh(layer0(h)), 0.5)))


results = []
for run in (with_dropout, lambda h: RecomputedWithRng(with_dropout)(h), lambda h: Recomputed(with_dropout)(h)):
    layer0.cleargrads(), layer1.cleargrads()
    tinypytorch.manual_seed(0)
    x = Variable(inputs)
    (run(x) ** 2).sum().backward()
    results.append(([x.grad.data, layer0.weight.grad.data], random.default_generator().random()))
for name, (grads, following) in zip(("with the state", "without it"), results[1:]):
    print(f"{name}: gradients bitwise equal {all(np.array_equal(a, b) for a, b in zip(grads, results[0][0]))}, "
          f"next draw equal {following == results[0][1]}")
