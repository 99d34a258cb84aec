# %% [markdown]
# # Step 41: Randomness the framework owns, and dropout
#
# Dropout, the first random layer of this framework, zeroes a random part of
# its input on every call. Step 42 will run forward passes a second time
# during backward, and a dropout there must draw the mask it drew the first
# time. So before dropout, the framework needs random numbers of its own: one
# stream that everything random draws from, whose place can be noted and
# returned to.
#
# This step builds that stream (`manual_seed`, the state saved and restored,
# `fork_rng`), then dropout on top of it, with PyTorch's training and
# evaluation modes.

# %%
import contextlib

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, random
from tinypytorch import functions as F
from tinypytorch.layers import Dropout, Layer, Linear
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array with fixed decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ")


# %% [markdown]
# ## One default generator
#
# Like PyTorch, tinypytorch has one **default generator**, in
# `tinypytorch.random`, and everything random in the package draws from it.
# It is NumPy's `Generator` on the PCG64 bit generator. It starts from a
# fixed seed, 67280421310721 (the default seed in PyTorch's C++ source), so
# a program that never seeds still draws the same numbers on every run.
# `manual_seed` starts it again from a seed of your choice:

# %%
show_code(random.manual_seed, step=41)

# %%
tinypytorch.manual_seed(0)
first = random.default_generator().random(4)
tinypytorch.manual_seed(0)
print("after manual_seed(0):", show(first))
print("after manual_seed(0):", show(random.default_generator().random(4)))

# %% [markdown]
# PCG64 is integer arithmetic, and its conversion to floats in $[0, 1)$ is
# exact, so these numbers are the same on every machine.
#
# ## The state, saved and restored
#
# Seeding goes back to the start of the stream. A recomputation needs
# something finer: note where the stream is *now*, and come back there
# later. `get_rng_state` returns a snapshot (NumPy's state dictionary, a
# copy), and `set_rng_state` puts the generator back:

# %%
show_code(random.get_rng_state, random.set_rng_state, step=41)

# %%
tinypytorch.manual_seed(0)
random.default_generator().random(10)  # the stream has moved on
state = tinypytorch.get_rng_state()
print("three draws:         ", show(random.default_generator().random(3)))
tinypytorch.set_rng_state(state)
print("the same three again:", show(random.default_generator().random(3)))

# %% [markdown]
# ## `fork_rng`: draws that leave no trace
#
# A recomputation sets the generator back to the first run's state, and its
# own draws move the generator on. Afterwards the stream must carry on from
# where it was *before* the recomputation, or the next training step would
# draw other masks than it would have without one. PyTorch's
# `torch.random.fork_rng` does this, and so does tinypytorch's: whatever is
# drawn inside, the stream outside continues as if nothing had been drawn,
# even when the block raises.

# %%
show_code(random.fork_rng, step=41)

# %% [markdown]
# `get_all_states` and `set_all_states` are the snapshot and the restore of
# every generator the package has: for now only this one (step 48 adds one
# on the GPU).

# %%
tinypytorch.manual_seed(0)
plain = random.default_generator().random(4)
tinypytorch.manual_seed(0)
before = random.default_generator().random(2)
with random.fork_rng():
    inside = random.default_generator().random(5)
after = random.default_generator().random(2)
print("four draws, no fork:       ", show(plain))
print("two, then five inside:     ", show(before), show(inside))
print("two after the fork:        ", show(after))

# %% [markdown]
# The five draws inside the fork are the stream's numbers 3 to 7; after the
# fork the stream is back at number 3. The picture shows both mechanisms on
# the stream, drawn as a tape of numbers:

# %% tags=["hide-input"]
def tape(axis, y, start, values, color, label=None):
    """Draws at stream positions start+1, start+2, ... as cells of a tape, with their values."""
    for k, value in enumerate(values):
        axis.add_patch(plt.Rectangle((start + k, y), 0.94, 0.6, facecolor=color, edgecolor="black", lw=0.6))
        axis.text(start + k + 0.47, y + 0.3, f"{value:.2f}", ha="center", va="center", fontsize=7)
    if label:
        axis.text(start + len(values) + 0.2, y + 0.3, label, va="center", fontsize=8)


stream = np.random.Generator(np.random.PCG64(0)).random(13)
fig, axis = plt.subplots(figsize=(9, 3.6))
tape(axis, 3.4, 0, stream[:10], "0.9", None)
tape(axis, 3.4, 10, stream[10:13], "C0", "random(3)")
axis.annotate("get_rng_state()", (10, 4.05), (8.6, 4.55), fontsize=8, arrowprops=dict(arrowstyle="->"))
tape(axis, 2.3, 10, stream[10:13], "C0", "the same three again")
axis.annotate("", (10.0, 2.9), (10.0, 3.4), arrowprops=dict(arrowstyle="->"))
axis.text(9.8, 3.1, "set_rng_state(state): back to position 10", fontsize=8, ha="right", va="center")
tape(axis, 0.2, 0, stream[:2], "0.9", None)
tape(axis, 1.2, 2, stream[2:7], "C1", "inside fork_rng: drawn, then undone")
tape(axis, 0.2, 2, stream[2:4], "C2", "after the fork: positions 3, 4 again")
axis.annotate("fork_rng() notes position 2", (2, 0.2), (2.3, -0.45), fontsize=8, arrowprops=dict(arrowstyle="->"))
axis.annotate("", (2.0, 1.85), (7.0, 1.85), arrowprops=dict(arrowstyle="->", connectionstyle="arc3,rad=0.25"))
axis.text(4.5, 2.5, "on exit: back to position 2", fontsize=8, ha="center", va="bottom")
axis.text(-0.2, 3.7, "manual_seed(0)", fontsize=8, ha="right", va="center")
axis.text(-0.2, 0.5, "manual_seed(0)", fontsize=8, ha="right", va="center")
axis.set(xlim=(-2.8, 19), ylim=(-0.6, 4.8), xlabel="position in the stream (draws after manual_seed(0))")
axis.set_xticks(np.arange(13) + 0.47, [str(k + 1) for k in range(13)])
axis.set_yticks([])
for side in ("left", "right", "top"):
    axis.spines[side].set_visible(False)
axis.set_title("the default generator's stream: a snapshot restored (top), a fork's excursion (bottom)", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Dropout
#
# Dropout (Srivastava et al., 2014) is the layer that needs these numbers.
# In training it sets each element of its input to zero with probability
# $p$, independently, and divides the survivors by $1 - p$:
#
# $$
# y_i = \frac{m_i\, x_i}{1 - p}, \qquad
# m_i = \begin{cases} 1 & \text{with probability } 1 - p \\ 0 & \text{with probability } p \end{cases}
# $$
#
# The division keeps the expected value, $\mathbb{E}[y_i] = x_i$, so the
# layer can simply be switched off after training ("inverted dropout", what
# PyTorch does). The derivative is the mask again, scaled:
# $\partial y_i / \partial x_i = m_i / (1 - p)$. So `Dropout` saves the mask
# for backward (booleans, one byte an element, step 35). Element $i$ is kept
# when the default generator's uniform draw $u_i$ satisfies $u_i \ge p$,
# which happens with probability $1 - p$. (`random.uniform` draws from the
# default generator; on a GPU, step 48, from the device's.)

# %%
show_code(F.Dropout, F.dropout, step=41)

# %% [markdown]
# On a matrix of ones, the output shows the mask: each element is $0$ or
# $1/(1 - p) = 2$. The gradient of the sum is the same mask, scaled, and the
# mask can be recomputed by hand from a fresh PCG64 generator with the same
# seed:

# %%
tinypytorch.manual_seed(0)
x = Variable(np.ones((2, 6)), name="x")
y = F.dropout(x, p=0.5)
y.sum().backward()
print("y =\n" + show(y.data, 1))
print("x.grad =\n" + show(x.grad.data, 1))
by_hand = np.random.Generator(np.random.PCG64(0)).random((2, 6)) >= 0.5
print("kept, by hand =\n" + show(by_hand.astype(int)))

# %% [markdown]
# Over many elements the fraction kept approaches $1 - p$, and the mean of
# the output the mean of the input:

# %%
tinypytorch.manual_seed(0)
y = F.dropout(Variable(np.ones(100_000)), p=0.3)
print(f"kept: {np.count_nonzero(y.data) / y.numel():.3f}   (1 - p = 0.7)")
print(f"mean of the output: {y.data.mean():.3f}   (mean of the input: 1)")

# %% [markdown]
# ## Training and evaluation mode
#
# After training, a network should give the same answer every time, so
# dropout must stop dropping. PyTorch switches a whole model at once:
# `model.train()` sets the `training` flag of the model and of every
# sub-module, and `model.eval()` clears it. `Layer` has the same two
# methods, and the `Dropout` layer passes its input through when `training`
# is off:

# %%
show_code(Layer.train, Layer.eval, Dropout, step=41)


# %%
class Net(Layer):
    def __init__(self, rng):
        super().__init__()
        self.hidden, self.drop, self.out = Linear(4, 4, rng=rng), Dropout(0.5), Linear(4, 2, rng=rng)

    def forward(self, x):
        return self.out(self.drop(tinypytorch.tanh(self.hidden(x))))


net = Net(np.random.default_rng(0))
x = Variable(np.full((1, 4), 0.5))
tinypytorch.manual_seed(0)
print("training:         ", show(net(x).data), show(net(x).data))
net.eval()
print("training flags after eval():", [m.training for m in net.modules()])
state = tinypytorch.get_rng_state()
print("evaluation:       ", show(net(x).data), show(net(x).data))
print("evaluation drew no random numbers:", tinypytorch.get_rng_state() == state)
net.train()
print("training flags after train():", [m.training for m in net.modules()])

# %% [markdown]
# In training mode two calls give two answers, from two masks. In evaluation
# mode the network is deterministic and leaves the random stream alone, as
# PyTorch's dropout does. The errors for a bad seed, a state from another
# generator or a probability outside $[0, 1]$ are in the step's tests.
#
# ## Check against PyTorch
#
# PyTorch draws its masks from its own generator, so the same seed gives
# different masks: masks cannot be compared bit for bit across frameworks.
# What can be compared is the law. The hidden cell runs both dropouts on
# 100,000 ones for several $p$: every output is $0$ or exactly
# $1/(1-p)$, the kept fraction is within 5 standard deviations
# ($\sqrt{p(1-p)/n}$) of $1 - p$, and in evaluation mode both return the
# input. It also applies tinypytorch's mask in PyTorch, as
# `x * mask / (1 - p)`: outputs and gradients are bitwise equal.

# %% tags=["hide-input"]
import torch  # noqa: E402


def dropout_law(framework, p, n=100_000, seed=0):
    """(the set of output values, the kept fraction, eval returns the input) of `framework`'s dropout on ones."""
    if framework == "torch":
        torch.manual_seed(seed)
        ones = torch.ones(n, dtype=torch.float64)
        y = torch.nn.functional.dropout(ones, p=p).numpy()
        unchanged = torch.equal(torch.nn.functional.dropout(ones, p=p, training=False), ones)
    else:
        tinypytorch.manual_seed(seed)
        ones = Variable(np.ones(n))
        y = F.dropout(ones, p=p).data
        unchanged = F.dropout(ones, p=p, training=False) is ones
    return set(np.unique(y).tolist()), np.count_nonzero(y) / n, unchanged


for p in (0.1, 0.3, 0.5, 0.9):
    for framework in ("tinypytorch", "torch"):
        values, kept, unchanged = dropout_law(framework, p)
        assert values == {0.0, 1.0 / (1.0 - p)} and unchanged, (framework, p)
        assert abs(kept - (1 - p)) < 5 * np.sqrt(p * (1 - p) / 100_000), (framework, p, kept)
    fraction = dropout_law("tinypytorch", p)[1]
    print(f"p = {p}: outputs 0 or {1 / (1 - p):.4f} in both; tinypytorch keeps {fraction:.4f}, "
          "torch within 5 standard deviations of 1 - p")

rng = np.random.default_rng(5)
for p in (0.1, 0.5, 0.9):
    values, weights = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    tinypytorch.manual_seed(11)
    x = Variable(values.copy())
    (F.dropout(x, p=p) * weights).sum().backward()
    keep = np.random.Generator(np.random.PCG64(11)).random((3, 7)) >= p
    x_t = torch.tensor(values, requires_grad=True)
    y_t = x_t * torch.from_numpy(keep.astype(np.float64)) * (1.0 / (1.0 - p))
    (y_t * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_array_equal(F.dropout(Variable(values), p=p, training=False).data, values)
    np.testing.assert_array_equal(x.grad.data, x_t.grad.numpy())

# %%
torch_model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
for model in (net, torch_model):  # eval() and train() switch every sub-module in both
    assert not any(m.training for m in model.eval().modules())
    assert all(m.training for m in model.train().modules())
print("PyTorch check passed: dropout's values, kept fraction, eval mode and gradients follow torch's law")

# %% [markdown]
# ## Recap
#
# - Everything random in tinypytorch draws from one default generator
#   (PCG64), which starts from a fixed seed; `manual_seed` restarts it.
# - `get_rng_state` and `set_rng_state` note a place in the stream and come
#   back to it: the same draws again.
# - `fork_rng` lets a block draw without moving the stream outside it, even
#   when the block raises.
# - Dropout zeroes each element with probability $p$ and divides the rest by
#   $1 - p$; its gradient is the same scaled mask, which it saves.
# - `train()` and `eval()` switch a model and all its sub-layers; in
#   evaluation mode dropout passes its input through and draws nothing.
#
# ## Exercises
#
# **1.** Write `inverted_dropout(x, p, seed)` on NumPy arrays: draw the mask
# from a fresh `np.random.Generator(np.random.PCG64(seed))`, keep where the
# draw is at least $p$, and scale. It must reproduce `F.dropout` after
# `tinypytorch.manual_seed(seed)`.

# %% tags=["hide-cell"]
def inverted_dropout(x, p, seed):
    keep = np.random.Generator(np.random.PCG64(seed)).random(x.shape) >= p
    return x * keep * (1.0 / (1.0 - p))


values = np.arange(1.0, 9.0).reshape(2, 4)
tinypytorch.manual_seed(3)
print(show(inverted_dropout(values, 0.25, seed=3), 3))
print("equal to F.dropout:", np.array_equal(inverted_dropout(values, 0.25, 3), F.dropout(Variable(values), 0.25).data))

# %% [markdown]
# **2.** Write your own `my_fork_rng()`, a context manager (with
# `contextlib.contextmanager`) built on `get_rng_state` and `set_rng_state`
# alone, that restores the default generator's state on the way out, also
# when the block raises.

# %% tags=["hide-cell"]
@contextlib.contextmanager
def my_fork_rng():
    state = tinypytorch.get_rng_state()
    try:
        yield
    finally:
        tinypytorch.set_rng_state(state)


tinypytorch.manual_seed(0)
try:
    with my_fork_rng():
        random.default_generator().random(100)
        raise KeyError("inside")
except KeyError:
    pass
print("the next draw is the stream's first:", random.default_generator().random() == first[0])
