# %% [markdown]
# # Step 54: Vanishing gradients
#
# Stack enough layers and the first ones stop learning: their gradient is
# so small that no learning rate moves them. Backpropagation multiplies
# one factor per layer on the way down, and a product of two dozen
# factors each a little below one is practically zero; a little above one
# and it blows up. This step builds a deep network five ways (sigmoid,
# ReLU, residual connections, LayerNorm, initialisation by Xavier and by
# Kaiming), measures every layer's weight gradient after one backward
# pass, and explains each verdict. It adds `nn.LayerNorm` to the package;
# torch, given the same weights, measures the same gradients.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch.autograd import grad
from tinypytorch.nn import init
from tinypytorch.utils.listing import show_code

tinypytorch.set_default_dtype(tinypytorch.float64)  # float64, so the checks hold to 1e-12 (step 59)

# %% [markdown]
# ## A deep network and its gradient flow
#
# The network is 24 blocks of width 32. A block is a `Linear`, optionally
# a `LayerNorm`, then an activation; with `residual=True` it adds its
# input back, $h \mapsto h + f(h)$. The loss is the mean squared error
# against a fixed random target, on a fixed batch of 64 inputs.

# %%
WIDTH, DEPTH, BATCH = 32, 24, 64
rng = np.random.default_rng(1)
x = Variable(rng.normal(size=(BATCH, WIDTH)), requires_grad=False)
target = Variable(rng.normal(size=(BATCH, WIDTH)), requires_grad=False)


def block_class(nn):
    """The block in either framework's `nn` (the final check builds torch's twin from the same lines)."""
    class Block(nn.Module):
        def __init__(self, activation, norm=False, residual=False):
            super().__init__()
            self.linear = nn.Linear(WIDTH, WIDTH)
            self.norm = nn.LayerNorm(WIDTH) if norm else None
            self.activation = activation()
            self.residual = residual

        def forward(self, h):
            out = self.linear(h)
            if self.norm is not None:
                out = self.norm(out)
            out = self.activation(out)
            return h + out if self.residual else out

    return Block


Block = block_class(nn)


def deep(activation, norm=False, residual=False, fill=None, depth=DEPTH):
    """`depth` blocks, PyTorch's default init, or `fill` on every weight (biases zero)."""
    tinypytorch.manual_seed(0)
    model = nn.Sequential(*[Block(activation, norm, residual) for _ in range(depth)])
    for block in model if fill else []:
        fill(block.linear.weight)
        init.zeros_(block.linear.bias)
    return model


def gradient_norms(model):
    """After one backward pass: the norm of each block's weight gradient, first block first."""
    model.zero_grad()
    nn.MSELoss()(model(x), target).backward()
    return np.array([np.linalg.norm(block.linear.weight.grad.data) for block in model])


# %% [markdown]
# The seed of every variant is the same, so the default-init variants
# start from the very same weights. The variants:

# %%
def kaiming(w):
    return init.kaiming_normal_(w, nonlinearity="relu")


def too_large(w):
    return init.normal_(w, std=4 / math.sqrt(WIDTH))


VARIANTS = {
    "sigmoid, default init": lambda: deep(nn.Sigmoid),
    "sigmoid, Xavier init": lambda: deep(nn.Sigmoid, fill=init.xavier_normal_),
    "ReLU, default init": lambda: deep(nn.ReLU),
    "ReLU, Kaiming init": lambda: deep(nn.ReLU, fill=kaiming),
    "sigmoid, residual": lambda: deep(nn.Sigmoid, residual=True),
    "ReLU, LayerNorm": lambda: deep(nn.ReLU, norm=True),
    "tanh, weights 4x too large": lambda: deep(nn.Tanh, fill=too_large),
}
norms = {name: gradient_norms(build()) for name, build in VARIANTS.items()}


# %% tags=["hide-input"]
def flow_picture(norms, title):
    """One line per variant: each layer's weight-gradient norm, log scale."""
    fig, axis = plt.subplots(figsize=(8, 4.2))
    layers = np.arange(1, DEPTH + 1)
    for i, (name, values) in enumerate(norms.items()):
        axis.semilogy(layers, values, "o-", ms=3, color=f"C{i}", label=name)
    axis.set(xlabel="layer (1 = nearest the input)", ylabel="|| dL/dW ||", title=title, xlim=(0.5, DEPTH + 6.5))
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    plt.show()


flow_picture(norms, "gradient flow: each layer's weight-gradient norm after one backward pass")


# %% [markdown]
# Read it from the right, where the loss is, toward the input. The
# sigmoid curves fall through fifteen or twenty orders of magnitude, the
# default-init ReLU through eight; the tanh with too large weights climbs;
# the others stay within a factor of a hundred. The verdict, by the ratio
# of the first layer's norm to the last's, to its power of ten (a factor
# of a thousand or more either way counts):

# %%
def verdict(values):
    exponent = math.log10(values[0] / values[-1])
    assert abs(exponent % 1 - 0.5) > 0.02, "too near a rounding boundary to print the same everywhere"
    power = round(exponent)
    word = "vanishes" if power <= -3 else "explodes" if power >= 3 else "stays"
    return word, power


for name, values in norms.items():
    word, power = verdict(values)
    print(f"{name:27} {word:9} first/last ~ 1e{power:+03d}")


# %% [markdown]
# ## Why: a product of Jacobians
#
# Write the blocks as $h_l = f_l(h_{l-1})$. The chain rule carries the
# loss's gradient down one Jacobian at a time,
#
# $$\frac{\partial L}{\partial h_{l-1}} = J_l^\top \frac{\partial L}{\partial h_l},
# \qquad J_l = \mathrm{diag}\big(\sigma'(z_l)\big)\, W_l, \quad z_l = W_l h_{l-1} + b_l,$$
#
# so the gradient reaching block 1 has been multiplied by 23 such
# matrices. And a weight's gradient is an outer product,
# $\partial L / \partial W_l = \big(\sigma'(z_l) \odot \partial L/\partial h_l\big)\, h_{l-1}^\top$:
# the signal coming down times the activation that went up. If the
# typical factor per layer is $c$, the first layer's gradient is about
# $c^{23}$ times the last one's. The activation decides much of $c$:

# %% tags=["hide-input"]
def derivatives_picture():
    z = np.linspace(-6, 6, 601)
    sig = 1 / (1 + np.exp(-z))
    fig, axis = plt.subplots(figsize=(8, 2.8))
    axis.plot(z, sig * (1 - sig), label="sigmoid' = s(1 - s), at most 1/4")
    axis.plot(z, 1 - np.tanh(z) ** 2, label="tanh' = 1 - tanh^2, at most 1")
    axis.plot(z, (z > 0).astype(float), label="ReLU' = 1 where z > 0, else 0")
    axis.axhline(0.25, color="0.6", lw=0.8, ls="--")
    axis.set(xlabel="z", ylabel="derivative", ylim=(-0.05, 1.1), title="the factor each activation contributes")
    axis.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.show()


derivatives_picture()


# %% [markdown]
# Sigmoid's derivative is never above $1/4$, and its outputs are all
# positive (mean about $1/2$), so each layer shrinks the gradient by about
# four at best; 23 layers make $4^{-23} \approx 10^{-14}$, and the weights
# shrink it further. Xavier's init does not rescue sigmoid: it keeps the
# variance for an activation of slope 1 at 0 (PyTorch's
# `calculate_gain("sigmoid")` is 1), while sigmoid's slope there is 1/4.
#
# ReLU passes the gradient unchanged where it is active, half the units,
# so it halves the variance each layer; the weights must double it back:
# variance $2/\text{fan}_{\text{in}}$, Kaiming's init, with `nonlinearity="relu"`
# giving the gain $\sqrt 2$. PyTorch's default init for `Linear` is
# $U(-1/\sqrt{\text{fan}_{\text{in}}}, 1/\sqrt{\text{fan}_{\text{in}}})$, variance
# $1/(3\,\text{fan}_{\text{in}})$: six times too small for ReLU, so the gradient
# shrinks at every layer, and ReLU alone vanishes too: ReLU is often said
# to cure vanishing gradients, and with PyTorch's default init it does not.

# %%
show_code(init.kaiming_normal_, init._kaiming_std, init.calculate_gain)


# %% [markdown]
# ## Both halves of each weight gradient
#
# A weight's gradient needs both the activation going up and the
# gradient coming down. The left panel follows the forward signal (the
# root mean square of each block's output), the right one the backward
# signal (the norm of $\partial L/\partial h_l$, the product of Jacobians
# so far):

# %%
def signals(model):
    """Each block's output rms (forward) and the norm of dL/d(that output) (backward)."""
    outputs, h = [], x
    for block in model:
        h = block(h)
        outputs.append(h)
    gradients = grad(nn.MSELoss()(h, target), outputs)
    return [np.sqrt(np.mean(h.data**2)) for h in outputs], [np.linalg.norm(g.data) for g in gradients]


flows = {name: signals(build()) for name, build in VARIANTS.items()}


# %% tags=["hide-input"]
def signals_picture(flows):
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.4), sharex=True)
    layers = np.arange(1, DEPTH + 1)
    for i, (name, (sizes, grads)) in enumerate(flows.items()):
        left.semilogy(layers, sizes, "o-", ms=2.5, color=f"C{i}", label=name)
        right.semilogy(layers, grads, "o-", ms=2.5, color=f"C{i}")
    left.set(xlabel="layer", title="forward: rms of each block's output")
    right.set(xlabel="layer", title="backward: || dL/dh ||")
    for axis in (left, right):
        axis.grid(True, alpha=0.3)
    fig.legend(fontsize=7, loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    plt.show()


signals_picture(flows)


# %% [markdown]
# - **Default init, ReLU**: the forward signal drops to a floor that the
#   biases keep up; the backward one shrinks by a constant factor per
#   layer, and the product vanishes. **Kaiming**: both stay level.
# - **Sigmoid**: the forward signal does not vanish (outputs sit near
#   1/2), the backward one does; the Jacobians alone kill it.
# - **Residual**: $h_l = h_{l-1} + f(h_{l-1})$ has the Jacobian
#   $I + J_f$. Whatever $J_f$ does, the identity carries
#   $\partial L/\partial h_l$ down nearly unchanged: the backward signal
#   is level. The forward one grows, as each block adds its positive
#   sigmoid outputs to the stream; the last layer's input is about
#   twelve times the first's, and that, not a vanishing gradient, is
#   most of the $10^{-2}$ in its ratio.
# - **Tanh with weights 4x too large**: the forward signal saturates
#   (rms near 1) and stays bounded; backward, $\|W\|$ is about four times
#   what keeps the norm, more than tanh's slope takes away, and the
#   gradient grows by a constant factor per layer: it explodes.
#
# The factor per layer can be predicted. A square weight matrix whose
# entries have variance $s^2$ scales a random vector's norm by about
# $\sqrt{n s^2}$ ($n$ = fan_in = 32); the activation's slope then
# multiplies it by about $1/4$ for sigmoid (its inputs stay near 0) or
# $\sqrt{1/2}$ for ReLU (half the units pass). PyTorch's default init
# has $n s^2 = 1/3$, Xavier's $1$ here, Kaiming's $2$:

# %%
predicted = {"sigmoid, default init": 1 / 4 / math.sqrt(3), "sigmoid, Xavier init": 1 / 4,
             "ReLU, default init": math.sqrt(1 / 2 / 3), "ReLU, Kaiming init": math.sqrt(1 / 2 * 2)}
for name, factor in predicted.items():
    backward = flows[name][1]
    measured = (backward[0] / backward[-1]) ** (1 / (DEPTH - 1))
    print(f"{name:22} backward factor per layer: measured {measured:.2f}, predicted {factor:.2f}")


# %% [markdown]
# Twenty-three factors of 0.14 make $10^{-20}$, the sigmoid's verdict;
# of 0.41, $10^{-9}$; of 1, nothing lost.
#
# ## LayerNorm: re-scaling at every layer
#
# `LayerNorm` normalizes each sample over its features: subtract the
# mean, divide by the standard deviation, then scale and shift by a
# learned `weight` (ones at first) and `bias` (zeros). Whatever the
# weights did to the scale, the next block sees unit variance; and its
# backward divides by the same standard deviation, so a layer that
# shrank its input by $c$ has its gradient multiplied by $1/c$ on the way
# back: the shrinking cancels. In the package's `F.layer_norm`, with
# $g = \partial L/\partial y \odot \text{weight}$ and
# $\hat x = (x - \text{mean})\,\text{rstd}$,
#
# $$\frac{\partial L}{\partial x} = \text{rstd}\,\big(g - \text{mean}(g) - \hat x\, \text{mean}(g \hat x)\big),
# \qquad \text{rstd} = 1/\sqrt{\text{var}(x) + \varepsilon}.$$
#
# The module this step adds is a few lines around that function: it owns
# the weight and the bias, with PyTorch's names and printout.

# %%
show_code(nn.LayerNorm.__init__, nn.LayerNorm.forward, nn.LayerNorm.extra_repr)

# %%
norm = nn.LayerNorm(WIDTH)
print(norm)
print({key: value.shape for key, value in norm.state_dict().items()})
h = norm(Variable(3.0 + 5.0 * rng.normal(size=(2, WIDTH))))
print("after LayerNorm, each sample's mean and std:", np.round(h.data.mean(axis=1), 6) + 0,
      np.round(h.data.std(axis=1), 4))

# %% [markdown]
# LayerNorm helps ReLU, whose gradient factor per layer is the weights'
# scale, which LayerNorm gives back. It does not save sigmoid: what the
# weights took away comes back, but sigmoid's slope, at most 1/4, still
# takes its share at every layer (exercise 2).
#
# ## Check against PyTorch
#
# Every variant again in `torch.nn` (float64), twin by twin: our weights
# are loaded into torch's model through its `load_state_dict`, so both
# compute with the same numbers. Every layer's weight-gradient norm must
# equal torch's to rtol 1e-10, in each of the seven variants, the tiny
# $10^{-21}$ and the huge included. The collapsed cell builds the twins.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)


TorchBlock = block_class(torch.nn)


def torch_twin(model):
    """torch's copy of one of our deep models (float64), our weights loaded through torch's state dict."""
    twin = torch.nn.Sequential(*[TorchBlock(getattr(torch.nn, type(b.activation).__name__), b.norm is not None,
                                            b.residual) for b in model]).double()
    twin.load_state_dict({key: torch.from_numpy(value.data.copy()) for key, value in model.state_dict().items()})
    return twin


def torch_gradient_norms(twin):
    twin.zero_grad()
    torch.nn.MSELoss()(twin(torch.from_numpy(x.data)), torch.from_numpy(target.data)).backward()
    return np.array([block.linear.weight.grad.norm().item() for block in twin])


# %%
for name, build in VARIANTS.items():
    model = build()
    twin = torch_twin(model)
    assert repr(model) == repr(twin), name
    np.testing.assert_allclose(norms[name], torch_gradient_norms(twin), rtol=1e-10, err_msg=name)
    assert verdict(torch_gradient_norms(twin)) == verdict(norms[name])
print(f"7 variants x {DEPTH} layers: every weight-gradient norm equals torch's (rtol 1e-10),")
print("and so does every verdict (sigmoid, ReLU, residual, LayerNorm, Xavier, Kaiming, tanh)")
print("PyTorch check passed: per-layer gradient norms of 7 deep networks equal torch's")

# %% [markdown]
# ## Recap
#
# - Backpropagation multiplies one Jacobian per layer; a typical factor
#   $c$ per layer gives $c^{\text{depth}}$ at the first layer: below one
#   it vanishes, above one it explodes.
# - Sigmoid's derivative is at most 1/4: deep sigmoid stacks vanish,
#   Xavier's init or not. ReLU keeps the gradient where active, but
#   halves the variance: with PyTorch's default init (variance
#   $1/(3\,\text{fan}_{\text{in}})$) it vanishes too; Kaiming's $2/\text{fan}_{\text{in}}$
#   keeps it.
# - A residual connection adds the identity to every Jacobian: the
#   gradient reaches the first layer undiminished.
# - `nn.LayerNorm` re-scales every sample to unit variance; its backward
#   undoes the weights' shrinking. It is `F.layer_norm` with a weight of
#   ones and a bias of zeros, printed and saved as PyTorch's.
#
# ## Exercises
#
# **1. Kaiming for tanh.** Fill the tanh network's weights with
# `kaiming_normal_(w, nonlinearity="tanh")` (gain 5/3) instead of the 4x
# too large ones. What is the verdict now?

# %% tags=["hide-cell"]
tanh_kaiming = deep(nn.Tanh, fill=lambda w: init.kaiming_normal_(w, nonlinearity="tanh"))
tanh_norms = gradient_norms(tanh_kaiming)
word, power = verdict(tanh_norms)
print(f"tanh, Kaiming init: {word}, first/last ~ 1e{power:+03d}")

# %% [markdown]
# **2. LayerNorm with sigmoid.** Build `deep(nn.Sigmoid, norm=True)`.
# Does LayerNorm save sigmoid as it saves ReLU? Print its verdict and
# the median ratio of consecutive layers' norms (the factor per layer).

# %% tags=["hide-cell"]
sigmoid_norm = gradient_norms(deep(nn.Sigmoid, norm=True))
word, power = verdict(sigmoid_norm)
print(f"sigmoid, LayerNorm: {word}, first/last ~ 1e{power:+03d}")
print("factor per layer, median:", round(float(np.median(sigmoid_norm[:-1] / sigmoid_norm[1:])), 1))

# %% [markdown]
# **3. Depth.** For the sigmoid network with the default init, the
# exponent of the first-to-last ratio should fall in proportion to the
# depth. Measure $\log_{10}$ of the ratio for depths 4, 8, 16 and 24
# (`deep(nn.Sigmoid, depth=...)`) and fit a line: its slope is
# $\log_{10}$ of the factor per layer.

# %% tags=["hide-cell"]
def log_ratio(depth):
    values = gradient_norms(deep(nn.Sigmoid, depth=depth))
    return math.log10(values[0] / values[-1])


depths = [4, 8, 16, 24]
exponents = [log_ratio(depth) for depth in depths]
slope = np.polyfit(depths, exponents, 1)[0]
print("log10 first/last:", [round(e) for e in exponents], "| slope per layer:", round(slope, 1))
