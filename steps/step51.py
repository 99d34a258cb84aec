# %% [markdown]
# # Step 51: Data and a classifier
#
# Step 32 fitted a curve, one batch of 100 points, every step the same.
# Real training is different: the data is larger than one step should
# look at, so each step takes a **minibatch**, a few dozen samples, and
# the samples are visited in a new random order every pass over the data
# (an **epoch**). PyTorch splits the job in two: a `Dataset` knows how to
# give sample $i$, and a `DataLoader` decides which samples go together.
# This step adds both (`tinypytorch.utils.data`), then trains two
# classifiers with step 50's cross-entropy: one on a toy spiral, one on
# real handwritten digits that ship with the package.

# %%
import sys

import matplotlib.pyplot as plt
import numpy as np
from tqdm import tqdm

import tinypytorch
from tinypytorch import Variable, datasets
from tinypytorch.classification import accuracy, cross_entropy
from tinypytorch.layers import MLP
from tinypytorch.optimizers import Adam
from tinypytorch.utils.data import DataLoader, TensorDataset, default_collate, random_split
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## Dataset and DataLoader
#
# A dataset is anything with a length and an index: `dataset[i]` is one
# sample, usually a tuple (input, target). `TensorDataset(x, t)` is the
# simplest, arrays side by side. The loader turns it into minibatches:

# %%
show_code(DataLoader.batches, DataLoader.__iter__, DataLoader.collate, step=51)

# %% [markdown]
# The batch is made by PyTorch's rules (`default_collate`), so a dataset that
# is a plain list of `(features, label)` pairs works as it does in PyTorch:

# %%
show_code(default_collate)

# %% [markdown]
# `batches` draws a permutation of the indices from the framework's
# generator (step 41), so `manual_seed` fixes the order, and cuts it into
# pieces of `batch_size`; the last piece is what is left over, unless
# `drop_last`. `collate` stacks field $k$ of every sample into one array,
# as PyTorch's `default_collate` does, and makes it a Variable that needs
# no gradient. Ten samples in batches of four:

# %%
ten = TensorDataset(np.arange(10.0).reshape(10, 1), np.arange(10))
tinypytorch.manual_seed(0)
loader = DataLoader(ten, batch_size=4, shuffle=True)
for epoch in range(2):
    print(f"epoch {epoch}:", [t.data.tolist() for x, t in loader])
print("batches an epoch:", len(loader),
      "| with drop_last:", len(DataLoader(ten, batch_size=4, drop_last=True)))

# %% tags=["hide-input"]
def epochs_picture(n=10, batch_size=4, seed=0):
    """Two epochs of a shuffled loader: each sample a cell, coloured by the batch it lands in."""
    tinypytorch.manual_seed(seed)
    loader = DataLoader(TensorDataset(np.arange(n)), batch_size=batch_size, shuffle=True)
    fig, axis = plt.subplots(figsize=(8, 2.2))
    for row in range(2):
        for k, indices in enumerate(loader.batches()):
            for j, i in enumerate(indices):
                x = k * batch_size + j + 0.3 * k
                axis.add_patch(plt.Rectangle((x, -row), 0.9, 0.8, color=f"C{k}", alpha=0.75))
                axis.text(x + 0.45, -row + 0.4, str(i), ha="center", va="center", fontsize=10)
        axis.text(-0.4, -row + 0.4, f"epoch {row}", ha="right", va="center", fontsize=9)
    axis.set(xlim=(-2.2, n + 1.2), ylim=(-1.2, 1.0))
    axis.axis("off")
    axis.set_title("a new permutation every epoch, cut into batches of 4; the last one holds the rest", fontsize=10)
    fig.tight_layout()
    plt.show()


epochs_picture()

# %% [markdown]
# ## A first classifier: the spiral
#
# Three spiral arms of 100 points each, one class an arm
# (`datasets.spiral`): no straight line separates them, so the model needs
# a hidden layer. An `MLP((2, 30, 3))` with $\tanh$ gives three scores per
# point; the loss is step 50's `cross_entropy`, minimised with Adam on
# batches of 30.

# %%
def train(model, loader, epochs, lr, on_epoch=None):
    optimizer = Adam(model.params(), lr=lr)
    for epoch in range(epochs):
        model.train()
        for x, t in loader:
            loss = cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.step()
        if on_epoch:
            on_epoch(epoch, model)
    return model


points, arms = datasets.spiral(points_per_class=100, classes=3, seed=1)
tinypytorch.manual_seed(0)
spiral_model = MLP((2, 30, 3), activation=tinypytorch.tanh, rng=np.random.default_rng(0))
spiral_loader = DataLoader(TensorDataset(points, arms), batch_size=30, shuffle=True)
train(spiral_model, spiral_loader, epochs=200, lr=0.02)
spiral_model.eval()
print(f"training accuracy on the spiral: {accuracy(spiral_model(Variable(points)), arms):.2f}")

# %% tags=["hide-input"]
grid = np.stack(np.meshgrid(np.linspace(-1.1, 1.1, 200), np.linspace(-1.1, 1.1, 200)), axis=-1).reshape(-1, 2)
with tinypytorch.no_grad():
    regions = spiral_model(Variable(grid)).data.argmax(axis=1).reshape(200, 200)
fig, axis = plt.subplots(figsize=(4.6, 4.0))
axis.contourf(np.linspace(-1.1, 1.1, 200), np.linspace(-1.1, 1.1, 200), regions, levels=[-0.5, 0.5, 1.5, 2.5],
              colors=["#cfe0f3", "#fde2c8", "#d3ecd3"])
for k, marker in enumerate("o^s"):
    axis.scatter(*points[arms == k].T, s=12, marker=marker, color=f"C{k}", label=f"arm {k}")
axis.set(aspect="equal", title="decision regions of the trained MLP")
axis.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# Every point of the plane gets the class of its largest score; the
# regions follow the arms. `model.eval()` before evaluating is a habit from
# PyTorch: it switches dropout and batch normalisation (steps 41, 45) to
# their evaluation behaviour. This model has neither, so here it changes
# nothing; `train()` switches back at the start of every epoch.
#
# ## Real data: handwritten digits, offline
#
# `datasets.load_digits()` returns 1,797 images of 8 × 8 pixels, values 0
# to 16, each a digit from 0 to 9: the test set of UCI's "Optical
# Recognition of Handwritten Digits" (Alpaydin and Kaynak, 1998). It is
# small enough to train on in seconds and real enough to be hard.
#
# The file (57 KB) ships inside the package, with its licence
# (`tinypytorch/datasets/DIGITS_LICENSE.txt`: CC BY 4.0 from UCI, BSD-3
# from the copy scikit-learn distributes). scikit-learn's `load_digits`
# reads the very same file, but installing scikit-learn brings SciPy,
# joblib and threadpoolctl: about 170 MB on disk for one small table. And
# a file in the repository cannot change under the tutorial.

# %%
images, digits = datasets.load_digits()
print("images:", images.shape, images.dtype, f"pixels {images.min():.0f}..{images.max():.0f}",
      "| digits:", np.bincount(digits).tolist())

# %% tags=["hide-input"]
fig, axes = plt.subplots(2, 10, figsize=(8, 1.9))
for axis, i in zip(axes.flat, [int(np.flatnonzero(digits == d)[k]) for k in range(2) for d in range(10)]):
    axis.imshow(images[i], cmap="gray_r", vmin=0, vmax=16)
    axis.set_title(str(digits[i]), fontsize=9)
    axis.axis("off")
fig.tight_layout()
plt.show()

# %% [markdown]
# Each image becomes a row of 64 pixels scaled to $[0, 1]$. `random_split`
# keeps 297 images aside as a **test set**, drawn with the framework's
# generator: the model never trains on them, so its accuracy there says
# how well it does on digits it has not seen. The classifier is an
# `MLP((64, 64, 10))` with $\tanh$; each epoch ends with the loss and the
# accuracy on both sets, measured in evaluation mode.

# %%
tinypytorch.manual_seed(0)
train_set, test_set = random_split(TensorDataset(images.reshape(-1, 64) / 16.0, digits), [1500, 297])
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)


def whole(subset):
    """All of a subset at once: (inputs, digits), as one batch."""
    return next(iter(DataLoader(subset, batch_size=len(subset))))


history = {"train loss": [], "test loss": [], "train accuracy": [], "test accuracy": []}


def measure(epoch, model):
    model.eval()
    with tinypytorch.no_grad():
        for name, subset in (("train", train_set), ("test", test_set)):
            x, t = whole(subset)
            scores = model(x)
            history[f"{name} loss"].append(float(cross_entropy(scores, t).data))
            history[f"{name} accuracy"].append(accuracy(scores, t))


EPOCHS = 15
digits_model = MLP((64, 64, 10), activation=tinypytorch.tanh, rng=np.random.default_rng(1))

# %% [markdown]
# The loader's order for the first epoch is kept for the PyTorch check at
# the end; the generator is then put back, so training sees the same
# order. The progress bar leaves out the clock (its speed would differ on
# every run) and redraws on every epoch, so the page is the same everywhere.

# %%
tinypytorch.manual_seed(1)
first_epoch = train_loader.batches()
tinypytorch.manual_seed(1)
bar = tqdm(total=EPOCHS, desc="epochs", file=sys.stdout, bar_format="{l_bar}{bar:10}| {n_fmt}/{total_fmt}",
           mininterval=0)
train(digits_model, train_loader, EPOCHS, lr=0.005, on_epoch=lambda epoch, model: (measure(epoch, model),
                                                                                   bar.update()))
bar.close()

# %%
for name, subset in (("train", train_set), ("test", test_set)):
    fraction = history[f"{name} accuracy"][-1]
    print(f"after {EPOCHS} epochs, {name} accuracy {fraction:.1%}: "
          f"{round(fraction * len(subset))} of {len(subset)}")

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.2))
epochs = np.arange(1, EPOCHS + 1)
for name, style in (("train", "-"), ("test", "--")):
    left.plot(epochs, history[f"{name} loss"], style, label=name)
    right.plot(epochs, history[f"{name} accuracy"], style, label=name)
left.set(xlabel="epoch", ylabel="cross-entropy", yscale="log", title="loss")
right.set(xlabel="epoch", ylabel="accuracy", ylim=(0.5, 1.0), title="accuracy")
for axis in (left, right):
    axis.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The training loss keeps falling; the test loss falls more slowly and
# the test accuracy flattens out a little below the training accuracy:
# the gap is what the model learnt about these 1,500 images in particular.
# The digits it still gets wrong:

# %% tags=["hide-input"]
x_test, t_test = whole(test_set)
digits_model.eval()
with tinypytorch.no_grad():
    predicted = digits_model(x_test).data.argmax(axis=1)
wrong = np.flatnonzero(predicted != t_test.data)
fig, axes = plt.subplots(1, max(len(wrong), 1), figsize=(min(8, 0.8 * max(len(wrong), 1)), 1.3), squeeze=False)
for axis, i in zip(axes.flat, wrong):
    axis.imshow(x_test.data[i].reshape(8, 8), cmap="gray_r", vmin=0, vmax=1)
    axis.set_title(f"{predicted[i]} ({t_test.data[i]})", fontsize=8)
    axis.axis("off")
fig.suptitle("misclassified test digits: predicted (true)", fontsize=9)
fig.tight_layout()
plt.show()
print(len(wrong), "of", len(t_test.data), "test digits misclassified")

# %% [markdown]
# At $8 \times 8$ pixels some of these would puzzle a person too.
#
# ## Check against PyTorch
#
# A torch model with the same initial weights (float64), trained with
# `torch.optim.Adam` on exactly the batches the loader gave in the first
# epoch: after every minibatch its parameters must equal the tinypytorch
# model's. The collapsed cell builds the twin and replays the epoch.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)


def first_epoch_parameters():
    """Parameters after each minibatch of the first epoch: (tinypytorch's, torch's), replaying `first_epoch`."""
    ours = MLP((64, 64, 10), activation=tinypytorch.tanh, rng=np.random.default_rng(1))
    twin = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).double()
    with torch.no_grad():
        for p, p_t in zip(ours.params(), [twin[0].weight, twin[0].bias, twin[2].weight, twin[2].bias]):
            p_t.copy_(torch.from_numpy(p.data))
    optimizer, optimizer_t = Adam(ours.params(), lr=0.005), torch.optim.Adam(twin.parameters(), lr=0.005)
    trajectory = []
    for indices in first_epoch:
        x, t = train_loader.collate([train_set[i] for i in indices])
        loss = cross_entropy(ours(x), t)
        ours.cleargrads()
        loss.backward()
        optimizer.step()
        loss_t = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x.data)), torch.from_numpy(t.data))
        optimizer_t.zero_grad()
        loss_t.backward()
        optimizer_t.step()
        trajectory.append(([p.data.copy() for p in ours.params()],
                           [p.detach().numpy().copy() for p in (twin[0].weight, twin[0].bias, twin[2].weight,
                                                               twin[2].bias)]))
    return trajectory


# %%
trajectory = first_epoch_parameters()
largest = max(np.abs(a - b).max() for ours, theirs in trajectory for a, b in zip(ours, theirs))
print(f"{len(trajectory)} minibatches of the first epoch: every parameter after every step",
      below(largest, 1e-12), "from torch's")
print("PyTorch check passed: a digits classifier's parameters after every minibatch of epoch 1 "
      "equal torch's")

# %% [markdown]
# ## Recap
#
# - A `Dataset` gives sample $i$; a `DataLoader` cuts a permutation of the
#   indices, drawn from the framework's generator every epoch, into
#   minibatches (the last one partial unless `drop_last`) and stacks them.
# - A classifier ends in one score per class; step 50's `cross_entropy`
#   trains it, `accuracy` counts the largest scores that are the target.
# - A test set, split off before training, measures what the model does
#   on data it has not seen; `eval()` and `train()` switch modes.
# - The digits ship with the package, with their licence: the tutorial
#   runs offline, with no extra dependency.
#
# ## Exercises
#
# **1. A confusion matrix.** Write `confusion(predicted, target, classes)`,
# whose entry $(i, j)$ counts the test digits of class $i$ predicted as
# $j$. Which digit does the model answer most often when it is wrong?

# %% tags=["hide-cell"]
def confusion(predicted, target, classes=10):
    matrix = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(matrix, (target, predicted), 1)
    return matrix


matrix = confusion(predicted, t_test.data)
print(matrix)
wrongly = matrix.sum(axis=0) - np.diag(matrix)  # column j: the digits taken for a j
print(f"right: {np.trace(matrix)} of {matrix.sum()}; the wrong answer given most: {wrongly.argmax()}, "
      f"{wrongly.max()} times")

# %% [markdown]
# **2. A dataset that augments.** Write `Shifted(dataset)`, a `Dataset`
# twice as long as `dataset`: sample $i < n$ is sample $i$, sample $n + i$
# is image $i$ shifted one pixel to the right (the left column blank).
# Check that a `DataLoader` serves it.

# %% tags=["hide-cell"]
class Shifted(tinypytorch.utils.data.Dataset):
    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return 2 * len(self.dataset)

    def __getitem__(self, i):
        n = len(self.dataset)
        image, digit = self.dataset[i % n]
        if i < n:
            return image, digit
        shifted = np.zeros((8, 8))
        shifted[:, 1:] = image.reshape(8, 8)[:, :-1]
        return shifted.reshape(64), digit


augmented = Shifted(train_set)
x, t = next(iter(DataLoader(augmented, batch_size=8)))
print("samples:", len(augmented), "| a batch:", x.shape, t.shape)

# %% [markdown]
# **3. A stratified split.** `random_split` leaves the share of each digit
# in the test set to chance. Write `stratified_split(targets, test_fraction)`,
# which splits the indices of each class on its own with `random_split`
# (so still from the framework's generator) and returns (train, test)
# index lists in which every class keeps its proportion. Compare the
# digits per class in a test set of 297 both ways.

# %% tags=["hide-cell"]
def stratified_split(targets, test_fraction):
    train, test = [], []
    for c in np.unique(targets):
        members = np.flatnonzero(targets == c)
        held = round(test_fraction * len(members))
        kept, out = random_split(members, [len(members) - held, held])
        train += [int(kept[i]) for i in range(len(kept))]
        test += [int(out[i]) for i in range(len(out))]
    return train, test


tinypytorch.manual_seed(0)
_, stratified = stratified_split(digits, 297 / 1797)
print("test digits per class, random_split:    ", np.bincount(digits[test_set.indices]).tolist())
print("test digits per class, stratified_split:", np.bincount(digits[stratified]).tolist())
