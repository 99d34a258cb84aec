# %% [markdown]
# # Step 45: A memory-efficient DenseNet block
#
# Step 44 checkpointed whole segments of a chain. A DenseNet checkpoints
# something smaller: in each layer, the one piece whose activations grow with
# depth. torchvision's `memory_efficient=True` option does this (Pleiss et
# al., 2017, "Memory-efficient implementation of DenseNets"), and makes the
# memory of a dense block linear in its depth instead of quadratic.
#
# Two new pieces of the package make it possible: `concatenate` (PyTorch's
# `torch.cat`) and `BatchNorm1d`. Batch normalisation also has state, its
# running statistics, and recomputing it would update them twice. PyTorch
# does exactly that; tinypytorch does not.

# %%
import matplotlib.pyplot as plt
import numpy as np

from tinypytorch import Parameter, Variable, concatenate, recomputation
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import BatchNorm1d, Layer, Linear
from tinypytorch.utils.checkpoint import checkpoint
from tinypytorch.utils.listing import show_code

BATCH, IN_FEATURES, GROWTH, BN_SIZE = 32, 10, 6, 4  # a batch of 32 rows; 10 features in; each layer adds 6

# %% tags=["hide-input"]
from matplotlib import patches  # noqa: E402  (harness: how arrays are printed)


def show(a, precision=4):
    """An array with a fixed number of decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=precision, floatmode="fixed", separator=", ")


# %% [markdown]
# ## DenseNet's bottleneck
#
# In a DenseNet (Huang et al., 2017) each layer of a dense block sees the
# features of every layer before it. Layer $i$ concatenates the block's input
# and the $i - 1$ outputs so far, and adds `growth` new features of its own:

# %% tags=["hide-input"]
def draw_growth(num_layers=4):
    """Each layer's input: the block's input and the outputs of the layers before it, side by side."""
    fig, axis = plt.subplots(figsize=(8, 3.2))
    rows = [f"layer {i + 1} input" for i in range(num_layers)] + ["block output"]
    for row, name in enumerate(rows):
        left = 0
        for source in range(row + 1):
            width = IN_FEATURES if source == 0 else GROWTH
            axis.barh(row, width, left=left, color=f"C{source}", edgecolor="white",
                      label=("block input x" if source == 0 else f"output of layer {source}") if row == num_layers
                      else None)
            left += width
        axis.text(left + 0.5, row, f"{left} features", va="center", fontsize=9)
    axis.set_yticks(range(len(rows)), rows)
    axis.invert_yaxis()
    axis.set_xlim(0, IN_FEATURES + num_layers * GROWTH + 9)
    axis.set_xlabel("features (columns of the concatenation)")
    axis.set_title(f"a dense block: {IN_FEATURES} features in, growth {GROWTH}", fontsize=11)
    axis.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    plt.show()


draw_growth()

# %% [markdown]
# The concatenation, and everything computed from it, grows with every layer,
# so a block of $L$ layers keeps memory that grows like $L^2$.
# torchvision's `_DenseLayer` checkpoints the **bottleneck**, everything that
# touches the concatenation: concatenate, BatchNorm, ReLU and a $1 \times 1$
# convolution down to `bn_size * growth` features. The rest (BatchNorm, ReLU,
# a $3 \times 3$ convolution down to `growth`) runs plainly. On feature
# vectors, one pixel each, both convolutions are linear layers.
#
# ### `concatenate`
#
# `concatenate(xs, axis)` joins arrays along an existing axis, like
# `numpy.concatenate` and `torch.cat`. Backward cuts the gradient back into
# one piece per input. It saves no tensor, only where the pieces start and
# end (PyTorch's `cat` saves only the sizes too):

# %%
show_code(F.Concatenate, step=45)

# %%
a = Variable(np.arange(6.0).reshape(2, 3))
b = Variable(np.arange(4.0).reshape(2, 2) + 10)
y = concatenate([a, b], axis=1)
print("concatenate([a, b], axis=1) =\n" + show(y.data, 1))
print("saved tensors:", len(y.creator._saved))
(y * np.arange(1.0, 11.0).reshape(2, 5)).sum().backward()
print("a.grad =\n" + show(a.grad, 1) + "\nb.grad =\n" + show(b.grad, 1))

# %% [markdown]
# The weights of the sum were $1, \dots, 10$ row by row: $a$ gets the first
# three columns of them, $b$ the last two.
#
# ### `BatchNorm1d`
#
# Batch normalisation (Ioffe and Szegedy, 2015) normalises each feature $j$
# over the batch, then scales and shifts it by learned $\gamma_j$ (`weight`)
# and $\beta_j$ (`bias`):
#
# $$\mu_j = \frac1n \sum_i x_{ij}, \qquad \sigma_j^2 = \frac1n \sum_i (x_{ij} - \mu_j)^2, \qquad
#   y_{ij} = \gamma_j \frac{x_{ij} - \mu_j}{\sqrt{\sigma_j^2 + \epsilon}} + \beta_j.$$
#
# In training mode it also moves running estimates towards each batch's
# statistics with `momentum` $m$ (0.1, as in PyTorch):
# $r \leftarrow (1 - m)\,r + m\,s$, the variance taken unbiased,
# $\frac{n}{n-1}\sigma_j^2$. `num_batches_tracked` counts the updates, and
# evaluation mode normalises with the running statistics. It is built from the
# package's operations, so its gradients come from theirs. Note the guard
# around the update; the last section is about it:

# %%
show_code(BatchNorm1d.forward, step=45)

# %%
bn = BatchNorm1d(3)
rng = np.random.default_rng(2)
for _ in range(3):
    y = bn(Variable(rng.normal([1.0, -2.0, 0.0], [1.0, 0.5, 3.0], size=(16, 3))))
print("batch output: mean", show(np.round(y.data.mean(axis=0), 12) + 0.0), " std", show(y.data.std(axis=0)))
print("running_mean:", show(bn.running_mean), " running_var:", show(bn.running_var),
      " num_batches_tracked:", bn.num_batches_tracked)

# %% [markdown]
# Each batch comes out with mean 0 and standard deviation just under 1
# (because of $\epsilon$). After three batches the running statistics have
# moved $1 - 0.9^3 = 27\%$ of the way from $(0, 1)$ towards the data's
# $(1, -2, 0)$ and $(1, 0.25, 9)$.
#
# ### A dense layer and a dense block
#
# torchvision's `_DenseLayer` and `_DenseBlock`, with linear layers for the
# convolutions. `bottleneck` is checkpointed when `memory_efficient` is set
# and some input needs a gradient, as in torchvision, with
# `use_reentrant=False` as torchvision passes:

# %%
class DenseLayer(Layer):
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
    def __init__(self, num_layers, in_features, growth, bn_size=BN_SIZE, memory_efficient=False, seed=0):
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


# %% tags=["hide-input"]
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


def block_pass(block, x0=BLOCK_INPUT, weights=BLOCK_WEIGHTS):
    """Forward (under a pack hook that records the non-parameter arrays saved) and backward of sum(w * block(x));
    returns (bytes saved, arrays saved, the input Variable)."""
    activations = {}

    def pack(v):
        if not isinstance(v, Parameter):
            activations[id(v.data)] = v.data
        return v.data

    x = Variable(x0.copy(), name="x")
    with saved_tensors_hooks(pack, lambda data: data):
        loss = (block(x) * weights).sum()
    saved = sum(a.nbytes for a in activations.values()), len(activations)
    activations.clear()
    loss.backward()
    return (*saved, x)


# %% [markdown]
# ## What the block keeps
#
# As in step 44, an outer pack hook (collapsed above, `block_pass`) records
# the distinct arrays saved in a forward pass, parameters aside. The loss is
# $\sum_{ij} w_{ij}\, y_{ij}$ for fixed random $w$, so that every output
# feature matters. Both versions of a 4-layer block:

# %%
blocks = {efficient: dense_block(efficient) for efficient in (False, True)}
passes = {efficient: block_pass(block) for efficient, block in blocks.items()}
for efficient, (held, count, _) in passes.items():
    print(f"memory_efficient={efficient!s:5}: {count} arrays saved, {held:7,} bytes")
(_, _, x_plain), (_, _, x_efficient) = passes[False], passes[True]
pairs = [(x_plain, x_efficient), *zip(blocks[False].params(), blocks[True].params(), strict=True)]
print("largest difference between the two versions' gradients:",
      max(np.abs(p.grad.data - q.grad.data).max() for p, q in pairs))

# %% [markdown]
# Both versions compute the same numbers in the same order, the recomputation
# included, so their gradients are equal to the last bit. In each layer the
# plain bottleneck saves three arrays as wide as the concatenation:
# BatchNorm's centred copy $x - \mu$ and normalised copy, and the ReLU's
# output, which the linear layer needs for its weight's gradient. The
# efficient one keeps none of them; its checkpoint keeps its inputs, which
# are the block's input and the layers' outputs, 6 features wide each, and
# which the concatenation only copied. The second half of each layer keeps the
# same in both. Layer 3 of the block:

# %% tags=["hide-input"]
def draw_bottleneck(layer=3):
    """One dense layer, plain and memory-efficient: which arrays each operation leaves saved for backward."""
    width, hidden = IN_FEATURES + (layer - 1) * GROWTH, BN_SIZE * GROWTH
    inputs = " + ".join([str(IN_FEATURES)] + [str(GROWTH)] * (layer - 1))
    ops = [("inputs", inputs), ("concat", "nothing"), ("BN", f"2 × {width}"), ("ReLU", ""),
           ("linear 1×1", f"1 × {width}"), ("BN", f"2 × {hidden}"), ("ReLU", ""), ("linear", f"1 × {hidden}")]
    fig, axis = plt.subplots(figsize=(8, 3.5))
    for row, (name, efficient) in enumerate([("plain", False), ("memory_efficient", True)]):
        top = -2.2 * row
        axis.text(-0.2, top + 0.75, name, ha="left", fontsize=10, fontweight="bold")
        for i, (op, saved) in enumerate(ops):
            axis.add_patch(patches.FancyBboxPatch((i + 0.08, top), 0.84, 0.5, boxstyle="round,pad=0.02",
                                                  facecolor="whitesmoke", edgecolor="gray"))
            axis.text(i + 0.5, top + 0.25, op, ha="center", va="center", fontsize=9)
            if i < len(ops) - 1:
                axis.annotate("", (i + 1.08, top + 0.25), (i + 0.92, top + 0.25), arrowprops=dict(arrowstyle="->"))
            if i == 0:
                kept = efficient
            else:
                kept = saved not in ("", "nothing") and (i > 4 or not efficient)
            recomputed = efficient and 1 < i <= 4 and saved
            if kept or recomputed:
                axis.add_patch(patches.Rectangle((i + 0.15, top - 0.55), 0.7, 0.35,
                                                 facecolor=("C1" if i <= 4 else "C0") if kept else "white",
                                                 edgecolor="C1", hatch=None if kept else "////"))
                axis.text(i + 0.5, top - 0.75, saved, ha="center", va="top", fontsize=8)
        if efficient:
            axis.add_patch(patches.Rectangle((1.02, top - 1.05), 3.96, 1.7, fill=False, linestyle="--",
                                             edgecolor="C3"))
            axis.text(3.0, top + 0.7, "checkpoint: the bottleneck", ha="center", color="C3", fontsize=9)
    axis.add_patch(patches.Rectangle((0, 0), 0, 0, facecolor="C1", label=f"saved, grows with the layer ({width} wide)"))
    axis.add_patch(patches.Rectangle((0, 0), 0, 0, facecolor="C0", label=f"saved, fixed width ({hidden})"))
    axis.add_patch(patches.Rectangle((0, 0), 0, 0, facecolor="white", edgecolor="C1", hatch="////",
                                     label="recomputed in backward"))
    axis.set(xlim=(-0.3, len(ops) + 0.1), ylim=(-3.9, 1.2))
    axis.set_axis_off()
    axis.legend(loc="lower center", bbox_to_anchor=(0.5, -0.08), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    plt.show()


draw_bottleneck()

# %% [markdown]
# The savings grow with depth. Layer $i$'s concatenation is $10 + 6(i - 1)$
# features wide, so the plain block keeps bytes quadratic in the number of
# layers $L$, and the efficient block bytes linear in $L$:

# %% tags=["hide-input"]
print(f"{'layers':>6} {'plain bytes':>12} {'efficient bytes':>16} {'ratio':>6}")
growth_table = {}
for num_layers in (2, 4, 8, 16, 32):
    weights = np.random.default_rng(5).standard_normal((BATCH, IN_FEATURES + num_layers * GROWTH))
    held = [block_pass(dense_block(efficient, num_layers), weights=weights)[0] for efficient in (False, True)]
    growth_table[num_layers] = held
    print(f"{num_layers:6} {held[0]:12,} {held[1]:16,} {held[0] / held[1]:6.2f}")

# %% [markdown]
# Each doubling of the layers about doubles the efficient block's bytes; the
# plain block's grow by 2.3, 2.5, 2.8 and 3.2 times, on their way to the
# factor 4 of a quadratic. Pleiss et al. report that with memory linear in
# depth, one GPU could train DenseNets of 14 million parameters instead of 4
# million.
#
# ## BatchNorm under a checkpoint: statistics updated once
#
# A checkpointed function runs twice, in the forward pass and when backward
# recomputes it, so a BatchNorm inside sees the same batch twice. The output is
# the same both times, but the running statistics are state that each call
# changes. PyTorch updates them on both calls: `num_batches_tracked` counts 2
# for one batch, and the running mean moves towards the batch mean twice
# (pytorch/pytorch#96136). That is what happens to the first BatchNorm of
# every layer of a DenseNet built with `memory_efficient=True`.
#
# tinypytorch's `BatchNorm1d` asks `recomputation.is_recomputing()` before
# updating (the guard in the listing above). `tinypytorch.recomputation`,
# which checkpointing and reversible blocks share, counts the
# recomputations running:

# %%
show_code(recomputation.is_recomputing, step=45)

# %% [markdown]
# One `BatchNorm1d` on one batch, run plainly and inside each kind of
# checkpoint, in both frameworks (the PyTorch side is collapsed):

# %% tags=["hide-input"]
import torch  # noqa: E402

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


def torch_norm_step(way, momentum=0.1):
    """The same in PyTorch, with torch.utils.checkpoint.checkpoint."""
    norm = torch.nn.BatchNorm1d(IN_FEATURES, momentum=momentum, dtype=torch.float64)
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
# From a running mean of 0 with momentum 0.1, one batch should leave a tenth
# of the batch mean. Both plain runs do, and so does tinypytorch under either
# checkpoint. PyTorch's checkpointed runs moved twice,
# $0.1 + 0.9 \cdot 0.1 = 0.19$ of the way, and count two batches; its running
# variance is off the same way, and with it the output in evaluation mode.
#
# In PyTorch the usual workarounds are to patch the BatchNorms to skip the
# update during recomputation (fairscale's `patch_batchnorm`), or to use the
# momentum $m' = 1 - \sqrt{1 - m}$ for layers that will be recomputed. The
# latter is exact for the statistics, since both updates use the same batch:
# $(1 - m')^2 = 1 - m$. The count still says 2:

# %% tags=["hide-input"]
norm = torch_norm_step("use_reentrant=False", momentum=1 - np.sqrt(1 - 0.1))
print("PyTorch, momentum 1 - sqrt(0.9), checkpointed:")
print("    running_mean[:3] =", show(norm.running_mean[:3].numpy()),
      " num_batches_tracked =", norm.num_batches_tracked.item())

# %% [markdown]
# ## Bad input
#
# `BatchNorm1d` checks the shape of its input. In training it needs more
# than one row, as PyTorch's does: one row is its own mean, so every output
# would be $\beta$, and the unbiased variance would divide by $n - 1 = 0$.
# `concatenate` needs shapes that agree except along the axis, and an axis
# the inputs have:

# %%
for shape in [(8, 4), (8, 3, 2), (1, 3)]:
    try:
        BatchNorm1d(3)(Variable(np.ones(shape)))
    except ValueError as error:
        print("ValueError:", error)
for shapes, axis in [([(2, 3), (2, 4)], 0), ([(2, 3), (2, 4)], 2), ([], 0)]:
    try:
        concatenate([Variable(np.ones(s)) for s in shapes], axis=axis)
    except ValueError as error:
        print("ValueError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# `concatenate` against `torch.cat`, and `BatchNorm1d` against
# `torch.nn.BatchNorm1d` in training and evaluation mode, are compared in the
# collapsed cell below. The visible check runs the memory-efficient block and
# a torch twin of torchvision's layer (collapsed too) that checkpoints the
# same bottleneck: equal gradients, and the first BatchNorm of each layer
# counting 1 batch here and 2 in torch.

# %% tags=["hide-cell"]
def torch_twin(module, parameters):
    """`module` (a torch.nn.Linear or BatchNorm1d, float64) with `parameters`' values copied in."""
    with torch.no_grad():
        for p_t, p in zip(module.parameters(), parameters, strict=True):
            p_t.copy_(torch.from_numpy(p.data))
    return module


def assert_close(ours, theirs, what):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(theirs).max()), err_msg=what)


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
bn.weight.data, bn.bias.data = rng.uniform(0.5, 1.5, 5), rng.uniform(-0.5, 0.5, 5)
torch_twin(bn_t, bn.params())
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
print("BatchNorm1d: outputs and gradients in training and eval mode, running statistics after 3 steps equal torch's")


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


# %%
block = dense_block(memory_efficient=True)  # fresh running statistics
block_t = TorchDenseBlock(block, memory_efficient=True)
_, _, x = block_pass(block)
assert_close(x.grad.data, torch_block_pass(block_t), "dense block input gradient")
for p, p_t in zip(block.params(), block_t.parameters(), strict=True):
    assert_close(p.grad.data, p_t.grad.numpy(), "dense block parameter gradient")
for layer, layer_t in zip(block.layers, block_t.layers, strict=True):
    assert layer.norm1.num_batches_tracked == 1 and layer_t.norm1.num_batches_tracked.item() == 2
print("PyTorch check passed: concatenate, BatchNorm1d, dense block grads as torch's; "
      "norm1 counts 1 batch (torch 2)")

# %% [markdown]
# ## Recap
#
# - A dense layer concatenates the block's input and every earlier layer's
#   output, so what it computes from the concatenation grows with depth, and
#   a plain block keeps memory quadratic in its number of layers.
# - The memory-efficient layer checkpoints only the bottleneck (concatenate,
#   BatchNorm, ReLU, $1 \times 1$ linear); its checkpoint keeps the narrow
#   inputs, and the block's memory becomes linear in depth.
# - `concatenate` saves no tensor; its backward hands each input its slice of
#   the gradient, as `torch.cat` does.
# - `BatchNorm1d` normalises with the batch's statistics in training and the
#   running ones in evaluation; the running ones move by
#   $r \leftarrow (1 - m)\,r + m\,s$.
# - Under a checkpoint, tinypytorch's BatchNorm skips the update while
#   `recomputation.is_recomputing()`, so it counts a batch once; PyTorch's
#   counts it twice.
#
# ## Exercises
#
# **1.** Write `dense_features(features, weight)`, a minimal dense layer:
# $\mathrm{relu}(\mathrm{concatenate}(\mathit{features}) \, W^\top)$ along axis 1. For the
# block's input and two 6-feature arrays, check that every input's gradient
# of the sum equals what `torch.cat` gives in the same computation.

# %% tags=["hide-cell"]
def dense_features(features, weight):
    return F.relu(F.linear(concatenate(features, axis=1), weight))


rng = np.random.default_rng(8)
arrays = [BLOCK_INPUT, rng.standard_normal((BATCH, GROWTH)), rng.standard_normal((BATCH, GROWTH))]
weight = rng.standard_normal((GROWTH, IN_FEATURES + 2 * GROWTH))
features = [Variable(a) for a in arrays]
dense_features(features, weight).sum().backward()
features_t = [torch.tensor(a, requires_grad=True) for a in arrays]
torch.relu(torch.cat(features_t, 1) @ torch.from_numpy(weight).T).sum().backward()
print("gradients equal torch.cat's:", all(np.allclose(f.grad.data, f_t.grad.numpy(), rtol=1e-12, atol=0)
                                          for f, f_t in zip(features, features_t)),
      "| shapes:", [f.grad.shape for f in features])

# %% [markdown]
# **2.** Write `one_update(running, batch, momentum)`, the running mean after
# one batch. Start a `BatchNorm1d(10)` from a running mean of 1 (not 0, so
# that one update and two differ in every feature), run one checkpointed
# step on the block's input, and check that its running mean is one update,
# while PyTorch's checkpointed one is two.

# %% tags=["hide-cell"]
def one_update(running, batch, momentum=0.1):
    return (1 - momentum) * running + momentum * batch.mean(axis=0)


norm = BatchNorm1d(IN_FEATURES)
norm.running_mean[...] = 1.0
checkpoint(norm, Variable(BLOCK_INPUT), use_reentrant=False).sum().backward()
norm_t = torch.nn.BatchNorm1d(IN_FEATURES, dtype=torch.float64)
with torch.no_grad():
    norm_t.running_mean.fill_(1.0)
torch.utils.checkpoint.checkpoint(norm_t, torch.tensor(BLOCK_INPUT, requires_grad=True), use_reentrant=False) \
    .sum().backward()
once = one_update(np.ones(IN_FEATURES), BLOCK_INPUT)
print("tinypytorch, checkpointed: one update:", np.allclose(norm.running_mean, once, rtol=1e-12, atol=0))
print("PyTorch, checkpointed: two updates:",
      np.allclose(norm_t.running_mean.numpy(), one_update(once, BLOCK_INPUT), rtol=1e-12, atol=0))
