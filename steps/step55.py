# %% [markdown]
# # Step 55: Convolution and pooling
#
# Step 51's MLP reads a digit as 64 unrelated numbers. Move the digit one
# pixel to the right and every one of them changes: to the MLP it is a new
# input. A **convolution** looks at an image through a small window, the
# same few weights at every position, so a stroke is recognised wherever it
# is. This step builds `conv2d` from one idea, **a convolution is a matrix
# product over unfolded patches**: copy every window of the image into a
# column (`unfold`), multiply by the filters as a matrix, reshape. Its
# backward needs nothing new: the gradient of `unfold` is `fold`, which adds
# the columns back where they came from. Then pooling, the modules of a
# convolutional network, a small CNN against step 51's MLP, and the price of
# the matrix product in memory.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, datasets, nn
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.classification import accuracy, cross_entropy
from tinypytorch.convolution import Fold, MaxPool2d, Unfold, Windows, _convolve
from tinypytorch.layers import MLP
from tinypytorch.nn import functional as F
from tinypytorch.optimizers import Adam
from tinypytorch.utils.data import DataLoader, TensorDataset, random_split
from tinypytorch.utils.listing import show_code

tinypytorch.set_default_dtype(tinypytorch.float64)  # float64, so the checks hold to 1e-12 (step 59)


# %% tags=["hide-input"]
def cells(axis, values, left=0.0, top=0.0, width=1.0, height=1.0, colours=None, fmt="{:g}", fontsize=10):
    """A grid of numbers drawn cell by cell, its top left corner at (left, top) (y grows downwards)."""
    rows, cols = values.shape
    for i in range(rows):
        for j in range(cols):
            face = "white" if colours is None else colours[i][j]
            x0, y0 = left + j * width, top + i * height
            axis.add_patch(plt.Rectangle((x0, y0), width, height, facecolor=face, edgecolor="0.55", lw=0.8))
            axis.text(x0 + width / 2, y0 + height / 2, fmt.format(values[i, j]), ha="center", va="center",
                      fontsize=fontsize)


def outline(axis, left, top, width, height, colour, inset):
    axis.add_patch(plt.Rectangle((left + inset, top + inset), width - 2 * inset, height - 2 * inset,
                                 fill=False, edgecolor=colour, lw=2.6))


def shades(values, cmap="Blues", top=None):
    """A colour per value, light to dark, so that the printed numbers stay readable."""
    top = np.abs(values).max() if top is None else top
    return plt.get_cmap(cmap)(0.08 + 0.5 * np.abs(values) / top)


def finish(axis, title, xlim, ylim):
    """Equal scales, y downwards as in an array, no frame."""
    axis.set_title(title, fontsize=10)
    axis.set(xlim=xlim, ylim=ylim[::-1], aspect="equal")
    axis.axis("off")


# %% [markdown]
# ## Patches as columns: unfold
#
# A convolution with a $k_h \times k_w$ kernel looks at every
# $k_h \times k_w$ window of the image. `F.unfold` (PyTorch's name; the
# classic one is *im2col*) copies each window's values into a column: a
# batch of images $(N, C, H, W)$ becomes $(N, C k_h k_w, L)$, one column per
# window, $L$ windows. A $4 \times 4$ image holding $0, 1, \dots, 15$ has four
# $3 \times 3$ windows:

# %%
x = Variable(np.arange(16.0).reshape(1, 1, 4, 4))
columns = F.unfold(x, kernel_size=3)
print("x:", tuple(x.shape), "-> columns:", tuple(columns.shape))


# %% tags=["hide-input"]
def unfold_picture():
    fig, axis = plt.subplots(figsize=(8, 4.2))
    cells(axis, x.data[0, 0], left=0, top=0.25)
    outline(axis, 0, 0.25, 3, 3, "C0", 0.06)
    outline(axis, 1, 0.25, 3, 3, "C1", 0.16)
    cells(axis, columns.data[0], left=6.5, top=0, width=0.8, height=0.5,
          colours=[["#cfe0f3", "#fde2c8", "white", "white"]] * 9)
    for k in range(4):
        axis.text(6.5 + 0.8 * k + 0.4, -0.08, str(k), ha="center", va="bottom", fontsize=9)
    axis.text(6.35, -0.08, "window", ha="right", va="bottom", fontsize=8, color="0.35")
    for r in range(9):
        axis.text(6.35, 0.25 + 0.5 * r, f"({r // 3}, {r % 3})", ha="right", va="center", fontsize=8,
                  color="0.35")
    axis.text(5.3, 2.5, "kernel position (u, v)", ha="center", va="center", rotation=90, fontsize=8,
              color="0.35")
    for start, end, colour in (((1.5, 0.2), (6.9, -0.45), "C0"), ((2.5, 0.2), (7.7, -0.45), "C1")):
        axis.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.6,
                                                                connectionstyle="arc3,rad=-0.2"))
    axis.text(2, 4.5, "the image (4 x 4), two of its four windows", ha="center", va="top", fontsize=9)
    finish(axis, "unfold: each 3 x 3 window's nine values become one column", (-0.3, 10.0), (-1.4, 4.9))
    fig.tight_layout()
    plt.show()


unfold_picture()

# %% [markdown]
# Column $\ell$ is window $\ell$ read row by row; row $(u, v)$ holds the
# value under kernel position $(u, v)$ in every window, so a pixel that
# several windows share appears in several columns. Because the image
# holds $0, 1, \dots, 15$, the matrix is also the **index** that unfold
# gathers with: for each kernel position of each window, the flat position
# of its pixel. The package computes that index from the kernel size,
# stride, padding and dilation (`Windows.index`) and unfolds with one
# gather by fancy indexing; padding is a border of zeros put around the
# image first. The backward of `Unfold` is `Fold`, which comes below.

# %%
show_code(Unfold.forward, Unfold.backward, Windows.gather, step=55)

# %% [markdown]
# ## A convolution is a matrix product
#
# A convolution layer with $O$ filters of shape $(C, k_h, k_w)$ computes, at
# every window, the dot product of each filter with the window:
#
# $$y_{n,o,i,j} = b_o + \sum_{c,u,v} w_{o,c,u,v}\; x_{n,\,c,\; i s + u d,\; j s + v d},$$
#
# ($s$ the stride, $d$ the dilation, $x$ padded with zeros). A window is a
# column of `unfold(x)`; a filter, flattened, is a row of the weight
# reshaped to $(O, C k_h k_w)$. All the dot products at once are one matrix
# product, $Y = W\,\text{unfold}(x)$, of shape $(N, O, L)$, and a reshape
# lays the $L$ results of each filter out as an image. Two filters on the
# image above, a left-to-right difference and an average:

# %%
w = Variable(np.stack([np.tile([-1.0, 0.0, 1.0], (3, 1)), np.full((3, 3), 1 / 9)])[:, None])  # (2, 1, 3, 3)
by_hand = (w.reshape(2, 9) @ columns).reshape(1, 2, 2, 2)
difference, average = np.round(by_hand.data[0], 6).tolist()
print("difference:", difference, "| average:", average)
print("conv2d gives the same:", np.array_equal(F.conv2d(x, w).data, by_hand.data))

# %% [markdown]
# The image rises by 1 to the right, so the difference of columns two apart,
# over three rows, is 6 everywhere; the averages are the windows' centres.
# `F.conv2d` is exactly this, once it has checked its arguments as PyTorch
# does; with `groups`, the channels split into groups that each have their
# own product:

# %%
show_code(_convolve, step=55)

# %% [markdown]
# ### Stride, padding and the output's size
#
# A stride $s$ moves the window $s$ pixels at a time; a padding $p$ adds $p$
# rows and columns of zeros on every side; a dilation $d$ spreads the
# kernel's positions $d$ apart, so it spans $d(k-1)+1$ pixels. Along each
# side, the number of windows is
#
# $$H_{\text{out}} = \left\lfloor \frac{H + 2p - d(k - 1) - 1}{s} \right\rfloor + 1.$$
#
# With $k = 3$ and $p = 1$ at stride 1 the output keeps the image's size
# (PyTorch's `padding="same"`); stride 2 halves it. On an $8 \times 8$ digit:

# %%
digit = Variable(np.random.default_rng(0).normal(size=(1, 1, 8, 8)))
SETTINGS = [(3, 1, 0, 1), (3, 1, 1, 1), (3, 2, 1, 1), (2, 2, 0, 1), (3, 1, 0, 2)]  # k, s, p, d
for k, s, p, d in SETTINGS:
    formula = (8 + 2 * p - d * (k - 1) - 1) // s + 1
    y = F.conv2d(digit, Variable(np.ones((1, 1, k, k))), stride=s, padding=p, dilation=d)
    print(f"k={k} stride={s} padding={p} dilation={d}: formula {formula}, conv2d {tuple(y.shape[2:])}")

# %% [markdown]
# ## Backward: fold adds the patches back
#
# Write $C = \text{unfold}(x)$, so $Y = W C$. The matrix product's backward
# is step 31's: $\partial L/\partial W = \sum_n G_n C_n^\top$ and
# $\partial L/\partial C = W^\top G$, with $G = \partial L/\partial Y$. What
# remains is unfold's backward. Unfold copies pixel $x_{c,h,w}$ into every
# column whose window covers it, so the pixel's gradient is the sum of the
# gradients of all those copies: **fold** (*col2im*) sends each entry of a
# column back to the pixel it came from and adds up where windows overlap,
#
# $$\frac{\partial L}{\partial x} = \text{fold}\big(W^\top G\big).$$
#
# Fold is unfold's transpose (its adjoint), and unfold is fold's: each is the
# other's backward, so second and higher derivatives come for free. With a
# kernel of ones and $\partial L/\partial y = 1$, the gradient of each pixel
# counts the windows that cover it:

# %%
ones = Variable(np.ones((1, 1, 3, 3)))
F.conv2d(x, ones).sum().backward()
G = np.ones((1, 1, 4))  # dL/dY: one filter, four windows
by_fold = F.fold(ones.reshape(1, 9).T @ Variable(G), output_size=(4, 4), kernel_size=3)
print("x.grad from backward = fold(W^T G):", np.array_equal(by_fold.data, x.grad.data))


# %% tags=["hide-input"]
def fold_picture():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), gridspec_kw={"width_ratios": [4, 5]})
    for axis, size, stride in zip(axes, (4, 5), (1, 2)):
        image = Variable(np.zeros((1, 1, size, size)))
        F.conv2d(image, ones, stride=stride).sum().backward()
        counts = image.grad.data[0, 0]
        cells(axis, counts, colours=shades(counts, top=4), fmt="{:.0f}", fontsize=12)
        starts = range(0, size - 2, stride)
        for k, (i, j) in enumerate((i, j) for i in starts for j in starts):
            outline(axis, j, i, 3, 3, f"C{k}", 0.05 + 0.07 * k)
        limits = (-0.2, size + 0.2)
        finish(axis, f"{size} x {size} image, 3 x 3 kernel, stride {stride}", limits, limits)
    fig.suptitle("x.grad when every output's gradient is 1: the windows covering each pixel, added up",
                 fontsize=10)
    fig.tight_layout()
    plt.show()


fold_picture()

# %% [markdown]
# Fold scatters with `add.at` rather than `+=`: where two windows send a
# value to the same pixel, `+=` with a repeated index would keep only one.

# %%
show_code(Fold.forward, step=55)

# %% [markdown]
# ## Pooling
#
# Pooling shrinks an image by summarising each window: `F.max_pool2d(x, 2)`
# keeps the largest value of each $2 \times 2$ window, `F.avg_pool2d(x, 2)`
# their mean (the stride defaults to the kernel's size, so the windows do
# not overlap). The backward follows from what each keeps. The maximum
# depends on one element only, the window's winner: it gets the window's
# gradient, the other three get nothing. The mean depends on all four
# equally: each gets a quarter. Here each window's output has its own
# gradient, 1 to 4; the picture below shows where each one goes:

# %%
x = Variable(np.array([[3.0, 1, 0, 2], [4, 2, 5, 1], [0, 6, 1, 1], [2, 1, 3, 0]]).reshape(1, 1, 4, 4))
G = Variable(np.array([[1.0, 2], [3, 4]]).reshape(1, 1, 2, 2))
grads = {}
for pooling in (F.max_pool2d, F.avg_pool2d):
    x.grad = None
    y = pooling(x, 2)
    (y * G).sum().backward()
    grads[pooling.__name__] = x.grad.data[0, 0]  # drawn below
    print(f"{pooling.__name__}: y = {y.data[0, 0].tolist()}")


# %% tags=["hide-input"]
def pooling_picture():
    fig, axes = plt.subplots(1, 3, figsize=(8, 3.3))
    panels = [(x.data[0, 0], "the image, 2 x 2 windows", "Greys", "{:g}"),
              (grads["max_pool2d"], "max_pool2d: to the winner", "Oranges", "{:g}"),
              (grads["avg_pool2d"], "avg_pool2d: spread evenly", "Blues", "{:g}")]
    for axis, (values, title, cmap, fmt) in zip(axes, panels):
        cells(axis, values, colours=shades(values, cmap), fmt=fmt, fontsize=11)
        for i in (0, 2):
            for j in (0, 2):
                outline(axis, j, i, 2, 2, "0.15", 0.0)
        finish(axis, title, (-0.1, 4.1), (-0.1, 4.1))
    fig.suptitle("the four outputs' gradients, 1, 2, 3 and 4, sent back to the image", fontsize=10)
    fig.tight_layout()
    plt.show()


pooling_picture()

# %% [markdown]
# `MaxPool2d` remembers each window's winner as a flat index into the
# image (PyTorch's `return_indices=True`; among equal values the first in
# the window, as PyTorch picks), and its backward scatters the gradient to
# those indices (with `add.at`: a pixel that wins two overlapping windows
# gets both gradients). `AvgPool2d`'s backward divides each gradient by the
# number its window's average divided by, and folds it back, as the
# convolution does.

# %%
show_code(MaxPool2d.backward, step=55)

# %% [markdown]
# ## The modules
#
# `nn.Conv2d(in_channels, out_channels, kernel_size, ...)` owns a weight
# $(O, C, k_h, k_w)$ and a bias $(O,)$, drawn as PyTorch draws them from
# $U(\pm 1/\sqrt{C k_h k_w})$. `nn.BatchNorm2d(C)` is step 45's batch
# normalisation for images: a mean and a variance per channel, over the
# batch and every pixel. `nn.MaxPool2d` has no parameters; `nn.Flatten`
# turns $(N, C, H, W)$ into $(N, C H W)$ for a final `nn.Linear`. A small
# network for the $8 \times 8$ digits:

# %%
def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),  # 8 x 8 -> 4 x 4
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),  # -> 2 x 2
        nn.Flatten(), nn.Linear(16 * 2 * 2, 10))


tinypytorch.manual_seed(0)
model = cnn()
h = Variable(np.zeros((32, 1, 8, 8)))
for layer in model:
    h = layer(h)
    count = sum(p.data.size for p in layer.parameters())
    print(f"{type(layer).__name__:12} output {str(tuple(h.shape)):15} {count:4d} parameters")

# %% [markdown]
# The first convolution has $8 \times (1 \cdot 3 \cdot 3) + 8 = 80$
# parameters however large the image: its nine weights per filter are
# shared by every position. That, and pooling's tolerance of small shifts,
# is what a CNN has and an MLP lacks.
#
# ## A CNN against step 51's MLP
#
# Both models are trained as step 51 trained its MLP: the same 1,500 digits
# (the same split), the same minibatches of 32 in the same order, Adam with
# learning rate 0.005, 15 epochs. The MLP is step 51's own,
# `MLP((64, 64, 10))` with tanh, after an `nn.Flatten`.

# %%
images, digits = datasets.load_digits()
tinypytorch.manual_seed(0)
train_set, test_set = random_split(TensorDataset(images[:, None] / 16.0, digits), [1500, 297])
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
x_test, t_test = next(iter(DataLoader(test_set, batch_size=len(test_set))))


def train(model, epochs=15, lr=0.005):
    tinypytorch.manual_seed(1)  # the loader's order, the same for both models
    optimizer = Adam(model.params(), lr=lr)
    for epoch in range(epochs):
        model.train()
        for x, t in train_loader:
            loss = cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.step()
    model.eval()
    return model


step51_mlp = MLP((64, 64, 10), activation=tinypytorch.tanh, rng=np.random.default_rng(1))
mlp = train(nn.Sequential(nn.Flatten(), step51_mlp))  # the 64 pixels as a row
tinypytorch.manual_seed(0)
cnn_model = train(cnn())

# %% [markdown]
# Both are measured on the 297 test digits, and on the same digits moved
# one pixel left and one right (594 images, zeros moving in):

# %%
def shifted(x, dx):
    moved = np.zeros_like(x.data)
    moved[..., max(dx, 0):8 + min(dx, 0)] = x.data[..., max(-dx, 0):8 - max(dx, 0)]
    return Variable(moved)


x_moved = Variable(np.concatenate([shifted(x_test, -1).data, shifted(x_test, 1).data]))
t_moved = np.concatenate([t_test.data, t_test.data])
table = {}
print(f"{'model':10} {'parameters':>10}   {'test digits':>17}   {'moved one pixel':>17}")
for name, model in (("MLP", mlp), ("CNN", cnn_model)):
    with tinypytorch.no_grad():
        right = round(accuracy(model(x_test), t_test) * 297)
        moved = round(accuracy(model(x_moved), t_moved) * 594)
    size = sum(p.data.size for p in model.params())
    table[name] = (size, right, moved)
    print(f"{name:10} {size:10,}   {right} of 297 ({right / 297:.1%})   {moved} of 594 ({moved / 594:.1%})")

# %% [markdown]
# On the digits as they are the two are as good as each other (a digit or
# two of 297 is luck), the CNN with 40% of the MLP's parameters. Moved by a
# pixel, the MLP gets half of them wrong: it learnt where each digit's
# strokes usually are. The CNN's filters find a stroke wherever it is and
# max pooling forgets exactly where; it keeps three quarters (its final
# `Linear` still reads a $2 \times 2$ map by position, and edges fall off).
#
# ## What unfold costs
#
# The matrix product needs the unfolded input, and so does its backward
# ($\partial L/\partial W = G C^\top$): the graph keeps $C$, which holds
# every pixel once per window that covers it, about $k_h k_w$ times the
# input. PyTorch's convolution is one node that keeps the input and the
# weight, and works from them in the backward pass (its CPU kernels unfold
# again there, or do without unfolding). Counted with a pack hook (step 38)
# that adds up the bytes of every distinct array saved, for the CNN's
# second convolution on a batch of 32:

# %%
def saved_bytes(work):
    """Bytes of the distinct arrays saved for backward while work() runs (a view counts as its base)."""
    kept = {}

    def pack(v):
        base = v.data if v.data.base is None else v.data.base
        kept[id(base)] = base.nbytes
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        work()
    return sum(kept.values())


layer_input = Variable(np.random.default_rng(2).normal(size=(32, 8, 4, 4)))
conv = cnn_model[4]  # Conv2d(8, 16, 3, padding=1)
kept = saved_bytes(lambda: conv(layer_input))
unfolded = F.unfold(layer_input, 3, padding=1).data.nbytes
print(f"input {layer_input.data.nbytes:,} bytes; tinypytorch saves {kept:,} bytes, of which the unfolded "
      f"input {unfolded:,}: {unfolded / layer_input.data.nbytes:.1f} x the input")


# %% tags=["hide-input"]
import torch  # noqa: E402

torch.set_num_threads(1)


def torch_saved_bytes(work):
    """The same count for torch: the distinct storages a pack hook is handed."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        work()
    return sum(kept.values())


twin = torch.nn.Conv2d(8, 16, 3, padding=1).double()
kept_by_torch = torch_saved_bytes(lambda: twin(torch.tensor(layer_input.data, requires_grad=True)))
print(f"torch saves {kept_by_torch:,} bytes (the input and the weight): tinypytorch keeps "
      f"{kept / kept_by_torch:.1f} x that")

# %% [markdown]
# With stride 1 and padding 1 there is a window at every pixel, so the columns
# are exactly nine times the input (at stride $s$, about $k_h k_w / s^2$
# times). The input torch keeps is the output of the layer before,
# which other nodes may keep too; the columns are new memory, kept by this
# node alone. Unfolding is what makes the convolution one fast matrix
# product, and this is what it costs.
#
# ## Check against PyTorch
#
# `conv2d` with every argument (stride, padding including `"same"`,
# dilation, groups, with and without a bias), `max_pool2d` (with ties and
# padding), `avg_pool2d` (with and without counting the padding) and
# `conv_transpose2d`, in float64, against `torch.nn.functional`: the values,
# and the gradients with respect to every input for a random output
# gradient, to rtol 1e-12. Then second derivatives: the package's
# `gradcheck` and `gradgradcheck` (step 40) on each, and torch's own on
# torch's. The collapsed cell holds the cases.

# %% tags=["hide-cell"]
import torch.nn.functional as TF  # noqa: E402

RNG = np.random.default_rng(7)
CASES = {  # name: (the call on a framework's functional module, the operands' shapes)
    "conv2d, stride 2, padding 1, bias": (lambda f, x, w, b: f.conv2d(x, w, b, stride=2, padding=1),
                                          [(2, 3, 6, 7), (4, 3, 3, 3), (4,)]),
    "conv2d, strides (2, 1), padding (1, 2), dilation (1, 2)": (
        lambda f, x, w: f.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
        [(2, 3, 6, 7), (4, 3, 3, 2)]),
    "conv2d, 2 groups, padding same, bias": (
        lambda f, x, w, b: f.conv2d(x, w, b, padding="same", groups=2), [(2, 4, 5, 6), (6, 2, 3, 3), (6,)]),
    "conv2d, depthwise (groups 4), dilation 2": (
        lambda f, x, w: f.conv2d(x, w, padding=2, dilation=2, groups=4), [(2, 4, 5, 6), (4, 1, 3, 3)]),
    "max_pool2d 2": (lambda f, x: f.max_pool2d(x, 2), [(2, 3, 6, 6)]),
    "max_pool2d 3, stride 2, padding 1, ties": (lambda f, x: f.max_pool2d(x, 3, 2, 1), [(2, 3, 7, 6)]),
    "avg_pool2d 2": (lambda f, x: f.avg_pool2d(x, 2), [(2, 3, 6, 6)]),
    "avg_pool2d 3, stride 2, padding 1, not counting it": (
        lambda f, x: f.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(2, 3, 7, 6)]),
    "conv_transpose2d, stride 2, output_padding 1, 2 groups": (
        lambda f, x, w, b: f.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
        [(2, 4, 3, 4), (4, 3, 3, 2), (6,)]),
}


def operands(name, shapes):
    if "ties" in name:  # small integers: most windows hold several equal largest values
        return [RNG.integers(-1, 2, shapes[0]).astype(np.float64)]
    return [RNG.normal(size=s) for s in shapes]


def compare(name):
    """Values and first derivatives of one case in both frameworks; gradcheck and gradgradcheck in each."""
    call, shapes = CASES[name]
    arrays = operands(name, shapes)
    ours = [Variable(a.copy()) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, y_t = call(F, *ours), call(TF, *theirs)
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=name)
    g = RNG.normal(size=y.shape)
    (y * Variable(g)).sum().backward()
    (y_t * torch.tensor(g)).sum().backward()
    for v, t in zip(ours, theirs):
        np.testing.assert_allclose(v.grad.data, t.grad.numpy(), rtol=1e-12, atol=1e-12, err_msg=name)
    distinct = [RNG.normal(size=s) for s in shapes]  # no ties: a tie's numerical derivative is a half
    ours = [Variable(a.copy()) for a in distinct]
    theirs = [torch.tensor(a, requires_grad=True) for a in distinct]
    assert tinypytorch.autograd.gradcheck(lambda *v: call(F, *v), ours), name
    assert tinypytorch.autograd.gradgradcheck(lambda *v: call(F, *v), ours), name
    assert torch.autograd.gradcheck(lambda *t: call(TF, *t), theirs), name
    assert torch.autograd.gradgradcheck(lambda *t: call(TF, *t), theirs), name
    return len(arrays)


# %%
checked = {name: compare(name) for name in CASES}
print(f"{len(checked)} settings of conv2d, max_pool2d, avg_pool2d and conv_transpose2d:")
print(f"values, and the gradients of {sum(checked.values())} inputs, equal torch's (rtol 1e-12)")
print("gradcheck and gradgradcheck pass on every setting, in tinypytorch and in torch")
print("PyTorch check passed: convolution and pooling: values, gradients and second derivatives")

# %% [markdown]
# ## Recap
#
# - `unfold` (im2col) copies every window of the image into a column,
#   $(N, C, H, W) \to (N, C k_h k_w, L)$, with one gather through an index
#   of the windows' positions.
# - `conv2d` is one matrix product, the filters as the rows of a
#   $(O, C k_h k_w)$ matrix times the columns, and a reshape; the output is
#   $\lfloor (H + 2p - d(k-1) - 1)/s \rfloor + 1$ pixels along each side.
# - Its backward is the product's and unfold's: `fold` (col2im) adds each
#   column's gradient back into the image, summed where windows overlap.
#   Fold and unfold are each other's backward: derivatives of every order.
# - Max pooling sends each window's gradient to its winner; average
#   pooling spreads it evenly over the window.
# - A CNN matches step 51's MLP on the digits with 40% of its parameters,
#   and keeps far more of them when they move by a pixel; the price of the
#   matrix product is memory: the columns are about $k_h k_w$ times the input.
#
# ## Exercises
#
# **1. The transposed convolution.** The gradient of `conv2d` with respect
# to its input, $\text{fold}(W^\top G)$, is an operation of its own,
# `F.conv_transpose2d(g, w)`: it maps $O$ channels back to $C$ and an
# image up in size (decoders and generators use it to upsample). Write
# `transposed(g, w, stride)` for one group with `F.fold` and a matrix
# product, and check it against `F.conv_transpose2d` and against the
# gradient of `conv2d` (`tinypytorch.autograd.grad`).

# %% tags=["hide-cell"]
def transposed(g, w, stride=1):
    """conv2d's input gradient for output gradient g (N, O, h, w) and weight w (O, C, kh, kw)."""
    n, o, h_out, w_out = g.shape
    kernel = w.shape[2:]
    size = tuple((out - 1) * stride + k for out, k in zip((h_out, w_out), kernel))
    cols = w.reshape(o, -1).T @ g.reshape(n, o, h_out * w_out)  # (C*kh*kw, O) @ (N, O, L)
    return F.fold(cols, size, kernel, stride=stride)


g1 = Variable(RNG.normal(size=(2, 4, 3, 3)))
w1 = Variable(RNG.normal(size=(4, 3, 2, 2)))
x1 = Variable(RNG.normal(size=(2, 3, 6, 6)))
(by_grad,) = tinypytorch.autograd.grad((F.conv2d(x1, w1, stride=2) * g1).sum(), [x1])
mine, library = transposed(g1, w1, 2).data, F.conv_transpose2d(g1, w1, stride=2).data
print("fold(W^T G) = conv_transpose2d:", np.allclose(mine, library, rtol=1e-12),
      "| = the gradient of conv2d:", np.allclose(mine, by_grad.data, rtol=1e-12))

# %% [markdown]
# **2. A $1 \times 1$ convolution is a linear layer.** With a kernel of
# size 1 each window is one pixel's $C$ channels. Show that
# `F.conv2d(x, w, b)` with `w` of shape $(O, C, 1, 1)$ is `F.linear`
# applied to every pixel: move the channels last, apply the linear layer,
# move them back.

# %% tags=["hide-cell"]
def pointwise(x, w, b):
    channels_last = x.permute(0, 2, 3, 1)  # (N, H, W, C)
    return F.linear(channels_last, w.reshape(w.shape[0], -1), b).permute(0, 3, 1, 2)


x2, w2, b2 = (Variable(RNG.normal(size=s)) for s in [(2, 5, 4, 6), (3, 5, 1, 1), (3,)])
same = np.allclose(pointwise(x2, w2, b2).data, F.conv2d(x2, w2, b2).data, rtol=1e-12)
print("1 x 1 conv2d = linear on every pixel:", same)

# %% [markdown]
# **3. Pooling from unfold.** Average and max pooling are a reduction over
# each window: unfold with `stride=kernel_size`, reshape to
# $(N, C, k_h k_w, L)$ and take the mean or the maximum over the window's
# positions. Write `pool(x, k, how)` this way and check both its values and
# its gradients against `F.avg_pool2d` and `F.max_pool2d` on an image
# without ties.

# %% tags=["hide-cell"]
def pool(x, k, how):
    n, c, h, w = x.shape
    windows = F.unfold(x, k, stride=k).reshape(n, c, k * k, -1)
    reduced = windows.mean(dim=2) if how == "avg" else windows.max(dim=2)[0]
    return reduced.reshape(n, c, h // k, w // k)


x3, g3 = Variable(RNG.normal(size=(2, 3, 6, 4))), Variable(RNG.normal(size=(2, 3, 3, 2)))
for how, library in (("avg", F.avg_pool2d), ("max", F.max_pool2d)):
    ours, (ours_grad,) = pool(x3, 2, how), tinypytorch.autograd.grad((pool(x3, 2, how) * g3).sum(), [x3])
    theirs, (theirs_grad,) = library(x3, 2), tinypytorch.autograd.grad((library(x3, 2) * g3).sum(), [x3])
    print(f"{how} pooling from unfold: values {np.allclose(ours.data, theirs.data, rtol=1e-12)}, "
          f"gradients {np.allclose(ours_grad.data, theirs_grad.data, rtol=1e-12)}")
