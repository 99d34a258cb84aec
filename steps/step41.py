# %% [markdown]
# # Step 41: Randomness, and checkpointing by recomputation
#
# Steps 35 to 38 looked at what the backward pass keeps: the tensors each
# function saves, and hooks that decide how they wait. This step keeps fewer
# of them. **Gradient checkpointing** runs part of a network without saving
# anything inside it, keeps only that part's inputs, and runs the part again
# during the backward pass, when its saved tensors are needed. Memory is
# traded for computation.
#
# Running a forward pass a second time is only correct if the second run
# computes exactly what the first computed. Most operations do so by
# themselves. Random ones do not: dropout draws a new mask on every call. So
# before checkpointing, the framework needs random numbers of its own, whose
# state it can save and restore. The step has two halves:
#
# - the framework's random numbers: `manual_seed`, the generator's state,
#   `fork_rng`, and dropout with training and evaluation modes;
# - checkpointing in PyTorch's first, *reentrant* form: what it saves, how it
#   recomputes, why it must restore the random state, and where it stops
#   working.

# %%
import functools
import inspect
import warnings

import numpy as np

import tinypytorch
from tinypytorch import Config, Variable, autograd, random, recomputation
from tinypytorch import functions as F
from tinypytorch.autograd import engine
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Dropout, Layer, Linear
from tinypytorch.utils import checkpoint as checkpoint_module
from tinypytorch.utils.checkpoint import checkpoint


def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ")


# %% [markdown]
# ## Random numbers the framework owns
#
# Dropout needs random numbers. It could take them from anywhere: NumPy's
# global `np.random`, a generator the user passes in, the clock. But the
# framework must be able to answer one question: *what will the next draw
# be, and can the same draws be made again?* Checkpointing reruns a forward
# pass during backward, and a dropout inside it must draw the mask it drew
# the first time. Otherwise backward differentiates a network the forward
# pass never ran.
#
# So, like PyTorch, tinypytorch has one **default generator** from which
# everything random in the package draws. It is NumPy's `Generator` on the
# PCG64 bit generator, in `tinypytorch.random`. Its state is a handful of
# integers that can be read, copied and written back. It starts from a fixed
# seed, 67280421310721 (the default seed in PyTorch's C++ source), so a
# program that never seeds still draws the same numbers on every run.
# `manual_seed` starts it again from a seed of your choice:

# %%
print(inspect.getsource(random.manual_seed))
print("initial seed:", random.initial_seed())

# %%
tinypytorch.manual_seed(0)
first = random.default_generator().random(4)
tinypytorch.manual_seed(0)
again = random.default_generator().random(4)
print("after manual_seed(0):", show(first))
print("after manual_seed(0):", show(again))

# %% [markdown]
# PCG64 is integer arithmetic, and turning its 64-bit integers into floats in
# $[0, 1)$ is exact, so these numbers are the same on every machine. The
# printed decimals are safe.
#
# ### The state, saved and restored
#
# Seeding goes back to the very beginning of a stream. Checkpointing needs
# something finer: note where the stream is *now*, and come back to that
# place later. `get_rng_state` returns a snapshot (NumPy's state dictionary,
# a copy), and `set_rng_state` puts the generator back there:

# %%
print(inspect.getsource(random.get_rng_state))
print(inspect.getsource(random.set_rng_state))

# %%
tinypytorch.manual_seed(0)
random.default_generator().random(10)  # the stream has moved on
state = tinypytorch.get_rng_state()
print("the snapshot holds:", sorted(state))
print("three draws:          ", show(random.default_generator().random(3)))
tinypytorch.set_rng_state(state)
print("the same three again: ", show(random.default_generator().random(3)))

# %% [markdown]
# ### `fork_rng`: draws that leave no trace
#
# Setting the state back is not the whole story. When the backward pass
# recomputes a forward pass, it sets the generator to the state of the first
# run, and the recomputation moves the generator on. Afterwards the stream
# must continue from wherever it was *before* the recomputation. Otherwise
# the next training step would draw different masks with checkpointing than
# without. `fork_rng` (PyTorch's `torch.random.fork_rng`) does this: whatever
# is drawn inside it, the state outside continues as if nothing had been
# drawn. It restores the state even when the block raises.

# %%
print(inspect.getsource(random.fork_rng))

# %%
tinypytorch.manual_seed(0)
plain = random.default_generator().random(2)
tinypytorch.manual_seed(0)
with random.fork_rng():
    inside = random.default_generator().random(5)
after = random.default_generator().random(2)
print("two draws, no fork:          ", show(plain))
print("five draws inside fork_rng:  ", show(inside))
print("two draws after the fork:    ", show(after))

# %% [markdown]
# ## Dropout
#
# Dropout (Srivastava et al., 2014) is the reason this step needs random
# numbers. During training it sets each element of its input to zero with
# probability $p$, independently, and divides the survivors by $1 - p$:
#
# $$
# y_i = \frac{m_i\, x_i}{1 - p}, \qquad
# m_i = \begin{cases} 1 & \text{with probability } 1 - p \\ 0 & \text{with probability } p \end{cases}
# $$
#
# The division keeps the expected value unchanged, $\mathbb{E}[y_i] = x_i$, so
# the layer can simply be switched off after training ("inverted dropout",
# what PyTorch does). The derivative is the mask again, scaled:
# $\partial y_i / \partial x_i = m_i / (1 - p)$. The backward pass needs the
# mask, so `Dropout` saves it (a boolean array, one byte an element, step 35).
# The mask is drawn from the default generator: element $i$ is kept when the
# generator's uniform draw $u_i$ satisfies $u_i \ge p$, which happens with
# probability $1 - p$.

# %%
print(inspect.getsource(F.Dropout))
print(inspect.getsource(F.dropout))

# %% [markdown]
# On a matrix of ones, the output shows the mask directly: each element is
# $0$ or $1/(1 - p) = 2$. The gradient of the sum is the same mask, scaled.
# The mask can also be recomputed by hand, from a fresh PCG64 generator with
# the same seed:

# %%
tinypytorch.manual_seed(0)
x = Variable(np.ones((2, 6)), name="x")
y = F.dropout(x, p=0.5)
y.sum().backward()
print("y =\n" + show(y.data, 1))
print("x.grad =\n" + show(x.grad.data, 1))
by_hand = np.random.Generator(np.random.PCG64(0)).random((2, 6)) >= 0.5
print("kept, by hand =\n" + show(by_hand))

# %% [markdown]
# Over many elements the fraction kept approaches $1 - p$, and the mean of the
# output approaches the mean of the input:

# %%
tinypytorch.manual_seed(0)
y = F.dropout(Variable(np.ones(100_000)), p=0.3)
print(f"kept: {np.count_nonzero(y.data) / y.size:.3f}   (1 - p = 0.7)")
print(f"mean of the output: {y.data.mean():.3f}   (mean of the input: 1)")

# %% [markdown]
# ### Training and evaluation mode
#
# After training, a network should give the same answer every time it is
# asked, so dropout must stop dropping. PyTorch switches every module of a
# model at once: `model.train()` sets the `training` flag of the model and of
# all its sub-modules, and `model.eval()` clears it. `Layer` now has the same
# two methods, and the `Dropout` layer passes its input through when
# `training` is off:

# %%
print(inspect.getsource(Layer.train))
print(inspect.getsource(Layer.eval))
print(inspect.getsource(Dropout))

# %% [markdown]
# The network used for the rest of this step is built from blocks of
# `Linear`, `tanh` and `Dropout`:
#
# $$h_{k+1} = \operatorname{dropout}\bigl(\tanh(h_k W_k^\top + b_k)\bigr)$$
#
# Its weights come from a seeded NumPy generator of its own (step 32). Only
# dropout draws from the default generator.

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


net = Net(width=4, depth=2, p=0.5)
x = Variable(np.full((1, 4), 0.5), name="x")
print("training flags:", [type(m).__name__ + ("" if m.training else " (eval)") for m in net.modules()])
tinypytorch.manual_seed(0)
print("training:  ", show(net(x).data))
net.eval()
print("training flags:", [type(m).__name__ + ("" if m.training else " (eval)") for m in net.modules()])
state = tinypytorch.get_rng_state()
print("evaluation:", show(net(x).data))
print("evaluation drew no random numbers:", tinypytorch.get_rng_state() == state)
net.train()
print("back in training:", all(m.training for m in net.modules()))

# %% [markdown]
# In training mode some outputs are zero and the rest are doubled. In
# evaluation mode the network is deterministic, and it leaves the random
# stream alone, as PyTorch's dropout does.

# %% [markdown]
# ## Checkpointing: keep the inputs, recompute the rest
#
# A network of $N$ blocks keeps, for its backward pass, the activations of
# all $N$ blocks (step 35). If each block saves $a$ bytes, that is $N a$
# bytes, waiting from the forward pass until backward reaches them.
#
# A **checkpoint** around a segment of blocks changes this. The segment runs
# in the forward pass without saving anything, and only its input is kept.
# When the backward pass arrives at the segment, it runs the segment's
# forward pass again, this time saving what backward needs, and
# backpropagates through it at once. During the forward pass only the
# segment's input waits. During the backward pass the segment's activations
# exist again, but only until its own backward is done. The price is one more
# forward pass of the segment (Chen et al., 2016, "Training deep nets with
# sublinear memory cost").
#
# `checkpoint(function, *args)` has PyTorch's signature, from
# `torch.utils.checkpoint`. The function can be any callable, such as a
# layer. How much does it save? A pack hook (step 38) sees every tensor that
# is saved. This one records each array once, and leaves out the parameters
# and the network's input, which stay in memory anyway. The network has four
# blocks of width 64, on a batch of 32, in float64, with dropout $p = 0.2$.
# It is run three ways: plainly, with one checkpoint around the whole
# network, and with a checkpoint around each block.

# %%
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


net = Net(width=64, depth=4, p=0.2)
batch = np.random.default_rng(1).standard_normal((32, 64))
runs = {"plain": net, "one checkpoint": lambda x: checkpoint(net, x), "a checkpoint per block": every_block(net)}
print(f"{'':24} {'saved by forward':>17} {'saved during backward':>22}")
for name, run in runs.items():
    tinypytorch.manual_seed(0)
    forward, backward = saved_bytes(run, net, batch)
    print(f"{name:24} {forward:17,} {backward:22,}")

# %% [markdown]
# Each plain block saves its `tanh` output (16,384 bytes), its dropout mask
# (2,048 bytes), and the dropout output, which the next `Linear` saves as its
# input (the loss saves the last one). That makes $4 \times 34{,}816 =
# 139{,}264$ bytes. With one checkpoint around the whole network, only the
# network's output is saved, by the loss, outside the checkpoint. The
# checkpoint itself saves its input $x$, which was left out of the count. The
# functions inside ran with recording switched off, so they saved nothing.
# With a checkpoint per block, each block's input is kept: three activations
# and the output.
#
# The second column is the other side of the trade. The saved-tensor hooks
# around `backward` catch the tensors that the recomputations save: 122,880
# bytes either way, which is everything the plain forward pass saved inside
# the network (the output, saved by the loss outside the checkpoint, is not
# recomputed). With one checkpoint these tensors are all in memory together
# during backward, so the peak is the same as without checkpointing: the
# memory was only moved from the forward pass to the backward pass. With a
# checkpoint per block, each block's tensors are freed by its own backward
# pass before the next block is recomputed. Segments are what lower the peak,
# and choosing them so that both the kept inputs and one segment's inside
# stay small is the $\sqrt{N}$ schedule of step 44.

# %% [markdown]
# ## The reentrant implementation
#
# PyTorch's original checkpoint, `use_reentrant=True`, is a single autograd
# `Function`, `CheckpointFunction`. It is what PyTorch 2.13 still runs when
# `use_reentrant` is not given (with a warning asking you to choose), and it is
# tinypytorch's default too. Its forward and backward are these:

# %%
print(inspect.getsource(checkpoint_module.CheckpointFunction))

# %% [markdown]
# **Forward.** `checkpoint` makes one `CheckpointFunction` node, whose inputs
# are the checkpoint's arguments. Its `forward`:
#
# 1. saves the random state (when `preserve_rng_state`, the default);
# 2. saves the inputs with `save_for_backward`: this is all it keeps;
# 3. runs the function under `no_grad`, on Variables that need no gradient,
#    so that nothing inside records a graph or saves a tensor.
#
# The outputs therefore have one creator, the `CheckpointFunction`, with one
# edge per input. The parameters used inside are not inputs of the node and
# have no edge.
#
# **Backward.** When the engine reaches the node, its `backward`:
#
# 1. makes fresh leaves holding the saved inputs;
# 2. inside `fork_rng`, sets the random state back to the one saved by
#    forward (`recomputation.replaying`, below), so that dropout draws the
#    same masks;
# 3. runs the function again under `enable_grad`, which records a graph:
#    the recomputation;
# 4. runs a whole backward pass through that graph, from the recomputed
#    outputs, seeded with the gradients it received. This is a backward pass
#    *inside* a backward pass, which is why the form is called reentrant.
#    This inner pass fills the `.grad` of the parameters inside the function
#    as a side effect, like any `backward()`, and the `.grad` of the fresh
#    leaves;
# 5. returns the leaves' `.grad` as the gradients of its inputs, and the
#    outer pass carries on.

# %%
print(inspect.getsource(recomputation.replaying))
print(inspect.getsource(checkpoint_module._checkpoint_reentrant))

# %% [markdown]
# To watch this happen, wrap the network in a function that records each
# call: whether recording was on, and whether a backward pass was running
# (`engine.current_pass()`, which the engine keeps for this purpose):

# %%
calls = []


def watched(h):
    calls.append(f"call {len(calls) + 1}: recording {'on' if Config.enable_backprop else 'off'}, "
                 f"inside a backward pass: {engine.current_pass() is not None}")
    return net(h)


net = Net(width=3, depth=2, p=0.5)
x = Variable(np.random.default_rng(2).standard_normal((2, 3)), name="x")
y = checkpoint(watched, x)
print(f"after forward:  {len(calls)} call(s)")
print("the node:", type(y.creator).__name__, " its edges go to:",
      [n.name if isinstance(n, Variable) else type(n).__name__ for n, _ in y.creator.edges])
(y * y).sum().backward()
print(f"after backward: {len(calls)} call(s)")
print("\n".join(calls))
print("every parameter has a gradient:", all(p.grad is not None for p in net.params()))

# %% [markdown]
# The function ran twice: once in the forward pass, with recording off, and
# once inside the backward pass, with recording on. The node has a single
# edge, to `x`, and yet all four parameters received gradients. They came
# from the inner backward pass.
#
# ## Dropout inside a checkpoint
#
# Now the experiment this step has been preparing for. The network has six
# blocks of width 16 with dropout $p = 0.3$, on a batch of 8, in float64.
# The gradients of one training step are computed three ways, each from
# `manual_seed(0)`:
#
# - **plain**: no checkpoint;
# - **preserved**: one checkpoint around the network, `preserve_rng_state=True`;
# - **not preserved**: the same, `preserve_rng_state=False`.
#
# After each backward pass, the gradients of the input and of every
# parameter are compared with the plain run, and the generator is asked for
# one more number. That number is where the next training step's masks would
# start.

# %%
def one_step(net, batch, run):
    """From manual_seed(0): y = run(x), sum(y^2).backward(); the gradients (x first) and the next draw."""
    net.cleargrads()
    tinypytorch.manual_seed(0)
    x = Variable(batch.copy(), name="x")
    y = run(x)
    (y * y).sum().backward()
    return [x.grad.data] + [p.grad.data for p in net.params()], random.default_generator().random()


net = Net(width=16, depth=6, p=0.3)
batch = np.random.default_rng(3).standard_normal((8, 16))
plain, plain_next = one_step(net, batch, net)
preserved, preserved_next = one_step(net, batch, lambda x: checkpoint(net, x))
shifted, shifted_next = one_step(net, batch, lambda x: checkpoint(net, x, preserve_rng_state=False))


def compare(grads, reference):
    """(largest |difference|, every array bitwise equal, how many entries differ)."""
    largest = max(np.abs(g - r).max() for g, r in zip(grads, reference))
    equal = all(np.array_equal(g, r) for g, r in zip(grads, reference))
    differ = sum(np.count_nonzero(g != r) for g, r in zip(grads, reference))
    return largest, equal, differ


entries = sum(g.size for g in plain)
print(f"{'':14} {'max |difference|':>17} {'bitwise equal':>14} {'entries that differ':>20} {'next draw':>10}")
print(f"{'plain':14} {'':>17} {'':>14} {'':>20} {plain_next:10.4f}")
for name, grads, following in [("preserved", preserved, preserved_next), ("not preserved", shifted, shifted_next)]:
    largest, equal, differ = compare(grads, plain)
    print(f"{name:14} {largest:17.2g} {str(equal):>14} {f'{differ} of {entries}':>20} {following:10.4f}")

# %% [markdown]
# With the random state preserved, the gradients are **bitwise equal** to the
# plain run's: the largest difference is exactly zero. This is float64
# arithmetic, the same operations in the same order on the same arrays, so
# nothing less would be right. The generator also ends where the plain run
# left it, because the recomputation drew its masks inside `fork_rng`.
#
# Without preservation, the recomputation drew *new* masks from wherever the
# stream happened to be. The output and the loss were computed with the first
# masks, but the backward pass differentiated a network with other masks.
# Every gradient entry but one is wrong, many of them by about as much as the
# gradient itself. (The entry that agrees is zero under both sets of masks.)
# Nothing raises or warns, and training still runs, only on wrong gradients,
# so the bug is easy to miss. The recomputation's draws were also not
# forked, so the stream has moved on: every later mask of the training run
# differs from the plain run's.
#
# PyTorch behaves the same way. Here is the same experiment with
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`, PyTorch's own
# generator (`torch.manual_seed`) and its dropout, on a copy of the network
# (PyTorch's masks come from a different generator, so its numbers differ
# from ours; the comparison is between its own runs):

# %%
import torch
import torch.utils.checkpoint


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


twin = torch_twin(net)
t_plain, t_plain_next = torch_one_step(twin, batch, twin)
t_preserved, t_preserved_next = torch_one_step(
    twin, batch, lambda x: torch.utils.checkpoint.checkpoint(twin, x, use_reentrant=True))
t_shifted, t_shifted_next = torch_one_step(
    twin, batch, lambda x: torch.utils.checkpoint.checkpoint(twin, x, use_reentrant=True, preserve_rng_state=False))
print(f"PyTorch        {'bitwise equal':>14} {'next draw equal':>16}")
for name, grads, following in [("preserved", t_preserved, t_preserved_next),
                               ("not preserved", t_shifted, t_shifted_next)]:
    print(f"{name:14} {str(compare(grads, t_plain)[1]):>14} {str(following == t_plain_next):>16}")

# %% [markdown]
# The same picture: bitwise equal gradients and an untouched stream with the
# state preserved, wrong gradients and a shifted stream without it.
# `preserve_rng_state=False` exists because saving and restoring the state
# costs a little time. It is safe only when the checkpointed function draws
# no random numbers at all.

# %% [markdown]
# ## The limits of the reentrant form
#
# Because it is one node whose backward runs a backward pass of its own, the
# reentrant checkpoint has two limits, both inherited from PyTorch.
#
# ### When no input requires a gradient
#
# The `CheckpointFunction` node records a graph only if one of its inputs
# requires a gradient. The parameters used inside are not inputs. So if the
# input is plain data, as the first segment of a network usually receives,
# the output requires no gradient, there is no node, and the parameters
# inside will never receive gradients. PyTorch warns, and so does
# tinypytorch, with PyTorch's words. A `backward()` from that output then
# fails, because nothing behind it requires a gradient:

# %%
net = Net(width=3, depth=2, p=0.0)
data = np.random.default_rng(4).standard_normal((2, 3))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = checkpoint(net, Variable(data, requires_grad=False))
print("UserWarning:", caught[0].message)
print("the output requires grad:", y.requires_grad)
try:
    (y * y).sum().backward()
except RuntimeError as error:
    print("RuntimeError:", error)
print("gradients of the parameters:", [p.grad for p in net.params()])

# %%
twin = torch_twin(net)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y_t = torch.utils.checkpoint.checkpoint(twin, torch.tensor(data), use_reentrant=True)
print("PyTorch, UserWarning:", caught[0].message)
print("PyTorch, the output requires grad:", y_t.requires_grad)
try:
    (y_t * y_t).sum().backward()
except RuntimeError as error:
    print("PyTorch, RuntimeError:", error)
print("PyTorch, gradients of the parameters:", [p.grad for p in twin.parameters()])

# %% [markdown]
# The usual repair is to set `requires_grad=True` on the input, although its
# gradient is not wanted, or to leave the first layers outside the
# checkpoint.
#
# ### `autograd.grad`
#
# `autograd.grad` (step 33) returns the gradients of the inputs it is asked
# about and leaves every `.grad` alone. A reentrant checkpoint cannot obey
# either rule. Its inner backward pass is an ordinary `backward()`, which
# writes into the `.grad` of the parameters inside. And the outer pass cannot
# ask the node for a parameter's gradient, because the parameters are not
# its inputs. Rather than return wrong or missing gradients, the node refuses
# when its backward runs in an `autograd.grad` pass:

# %%
x = Variable(data, name="x")
y = checkpoint(net, x)
try:
    autograd.grad((y * y).sum(), x)
except RuntimeError as error:
    print("RuntimeError:", error)

x_t = torch.tensor(data, requires_grad=True)
y_t = torch.utils.checkpoint.checkpoint(twin, x_t, use_reentrant=True)
try:
    torch.autograd.grad((y_t * y_t).sum(), x_t)
except RuntimeError as error:
    print("PyTorch, RuntimeError:", error)

# %% [markdown]
# PyTorch now recommends `use_reentrant=False`. That form is built on the
# saved-tensor hooks of step 38 rather than on a node with a backward pass
# of its own, and it has neither limit. It is step 43.

# %% [markdown]
# ## Bad input
#
# `checkpoint` wants something it can call, and dropout a probability:

# %%
try:
    checkpoint("net", Variable(data))
except TypeError as error:
    print("TypeError:", error)
for p in (-0.1, 1.5):
    try:
        F.dropout(Variable(data), p=p)
    except ValueError as error:
        print("ValueError:", error)
try:
    Dropout(p=2)
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# The generator refuses seeds and states that are not its own:

# %%
try:
    tinypytorch.manual_seed(-1)
except ValueError as error:
    print("ValueError:", error)
try:
    tinypytorch.set_rng_state(np.random.MT19937(0).state)
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# - **Dropout, given the same mask.** tinypytorch draws its masks from
#   PCG64, PyTorch from its own generator, so the same seed gives different
#   masks. The mask is therefore redrawn by hand from PCG64 and applied in
#   PyTorch. Outputs and gradients are bitwise equal: multiplying by 0 or 1
#   and then by $1/(1-p)$ rounds the same way in both.
# - **A checkpointed network.** The six-block network with dropout is
#   checkpointed in tinypytorch. Its PyTorch copy applies the masks that
#   tinypytorch drew, as fixed multipliers, and is checkpointed with
#   `torch.utils.checkpoint` (`use_reentrant=True`). The losses and all
#   gradients agree. Both also equal their plain runs bitwise.
# - **The random state.** With `preserve_rng_state`, the gradients are
#   bitwise equal to the plain run's and the next draw is the same. Without
#   it, both differ, in both frameworks.
# - **The limits.** Both frameworks warn when no input requires a gradient,
#   and both raise for `autograd.grad`.

# %%
rng = np.random.default_rng(5)
for p in (0.1, 0.5, 0.9):
    values, weights = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    tinypytorch.manual_seed(11)
    x = Variable(values.copy())
    y = F.dropout(x, p=p)
    (y * weights).sum().backward()
    keep = np.random.Generator(np.random.PCG64(11)).random((3, 7)) >= p
    x_t = torch.tensor(values, requires_grad=True)
    y_t = FixedMask(keep, p)(x_t)
    (y_t * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_array_equal(y.data, y_t.detach().numpy())
    np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())
print("dropout with p = 0.1, 0.5, 0.9: outputs and gradients bitwise equal to PyTorch's with the same mask")

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
y_t = torch.utils.checkpoint.checkpoint(twin, x_t, use_reentrant=True)
loss_t = (y_t * y_t).sum()
loss_t.backward()
grads_t = [x_t.grad.numpy()] + [p.grad.numpy() for p in twin.parameters()]
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
for g, g_t in zip(grads, grads_t, strict=True):
    np.testing.assert_allclose(g, g_t, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(g_t).max()))
np.testing.assert_array_equal(grads[0], plain[0])
assert compare(grads, plain)[1] and compare(t_preserved, t_plain)[1]
print(f"checkpointed network with dropout: loss {loss.item():.4f} and {len(grads)} gradients equal PyTorch's",
      "with tinypytorch's masks; both equal their plain runs bitwise")

assert compare(preserved, plain)[1] and preserved_next == plain_next
assert compare(t_preserved, t_plain)[1] and t_preserved_next == t_plain_next
assert not compare(shifted, plain)[1] and shifted_next != plain_next
assert not compare(t_shifted, t_plain)[1] and t_shifted_next != t_plain_next
print("preserve_rng_state=True: bitwise equal gradients, same next draw; False: both differ; in both frameworks")


def limits(m):
    """(the warning for an input that needs no gradient, the error of autograd.grad) in tinypytorch or torch."""
    net = Net(width=3, depth=2, p=0.0)
    module = net if m is tinypytorch else torch_twin(net)
    run = checkpoint if m is tinypytorch else functools.partial(torch.utils.checkpoint.checkpoint,
                                                                use_reentrant=True)
    make = (lambda a, r: Variable(a, requires_grad=r)) if m is tinypytorch else \
        (lambda a, r: torch.tensor(a, requires_grad=r))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = run(module, make(data, False))
    assert not y.requires_grad
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
print("no input requiring grad: the same warning; autograd.grad: RuntimeError in both")
print("PyTorch check passed: dropout, a checkpointed network's gradients, RNG preservation "
      "and the reentrant limits as in torch")
