# %% [markdown]
# # Step 52: Module
#
# Step 32's `Layer` found every parameter of a model, however deeply its
# layers were nested, and handed them to an optimizer as a flat stream.
# That is enough to train, but not to talk about a model: which of these
# arrays is the second layer's bias? PyTorch answers with **names**. A
# model is a tree of modules; every parameter is reached from the root by
# the attribute names on the way, joined by dots (`body.2.weight`), and
# those names are what you print, save, load and share. This step grows
# `Layer` into `tinypytorch.nn.Module` and builds PyTorch's everyday
# modules on it: `Sequential`, `ModuleList`, `Linear`, activations and
# losses, and the state dict that saves a model to a file.

# %%
import pathlib
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, nn
from tinypytorch.nn.modules import Module, ModuleList, Sequential
from tinypytorch.serialization import load, save
from tinypytorch.utils.listing import show_code

tinypytorch.set_default_dtype(tinypytorch.float64)  # float64, so the checks hold to 1e-12 (step 59)


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## A model is a tree of modules
#
# A model is a class: `__init__` assigns its parts to attributes, `forward`
# says how they compute. Calling the model calls `forward`. Here a body of
# two layers with $\tanh$, and a head that gives three scores:

# %%
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.body(x))


tinypytorch.manual_seed(0)
model = Net()
print(model)
for name, param in model.named_parameters():
    print(f"{name:14} {param.shape}")

# %% [markdown]
# The printout is PyTorch's, to the character: each module shows its own
# settings (`extra_repr`) and then its children, indented. The names are
# the path from the root: `body.2.weight` is attribute `weight` of child
# `2` of child `body`. A `Sequential` names its children by position.

# %% tags=["hide-input"]
def tree_picture(model, title):
    """The module tree, top down: modules in boxes, parameters as leaves with their dotted names and shapes."""
    fig, axis = plt.subplots(figsize=(8, 3.5))
    slots = []  # x of each leaf, in depth-first order

    def place(module, path, label, depth):
        children = [(n, c) for n, c in module.named_children()]
        params = [(n, p) for n, p in module.named_parameters(recurse=False)]
        xs = []
        for name, param in params:
            x = len(slots)
            slots.append(x)
            full = f"{path}.{name}" if path else name
            axis.text(x, -(depth + 1), f"{full}\n{param.shape}", ha="center", va="center", fontsize=7.5,
                      color="C1", bbox=dict(boxstyle="round", fc="#fff3e6", ec="C1"))
            xs.append(x)
        for name, child in children:
            xs.append(place(child, f"{path}.{name}" if path else name,
                            f"({name}) {type(child).__name__}", depth + 1))
        if not xs:  # a module without parameters or children takes a slot of its own, with nothing below
            slots.append(len(slots))
            x = slots[-1]
        else:
            x = sum(xs) / len(xs)
        for leaf_x in xs:
            axis.plot([x, leaf_x], [-depth - 0.2, -(depth + 1) + 0.25], color="0.7", lw=0.8, zorder=0)
        axis.text(x, -depth, label, ha="center", va="center", fontsize=8.5,
                  bbox=dict(boxstyle="round", fc="#e6eef8", ec="C0"))
        return x

    place(model, "", type(model).__name__, 0)
    axis.set(xlim=(-0.7, len(slots) - 0.3), ylim=(-3.5, 0.4))
    axis.axis("off")
    axis.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.show()


tree_picture(model, "modules (blue) own parameters (orange); a parameter's name is its path from the root")

# %% [markdown]
# ## Registration by attribute
#
# Nothing in `Net` lists its parameters: assigning a `Parameter` or a
# module to an attribute registers it, under the attribute's name, in the
# order assigned. `Module` is a `Layer` (step 32), so that registry is
# Layer's; Module adds which kind of slot each name is, and PyTorch's
# rule that a slot keeps its kind: a parameter may be replaced by a
# parameter or by `None` (an empty slot, as `Linear(..., bias=False)` has),
# nothing else.

# %%
show_code(Module.__setattr__)

# %%
try:
    model.head.weight = Variable(np.zeros((3, 4)))
except TypeError as error:
    print(textwrap.fill(f"TypeError: {error}", 100))

# %% [markdown]
# Walking the tree is then a few lines: the children are the registered
# names that hold modules; `named_modules` visits them depth first,
# building the dotted prefix, and `named_parameters` asks each module for
# its own parameters under that prefix (a parameter shared by two modules
# counts once, under its first name).

# %%
show_code(Module.named_children, Module.named_modules, Module._named_members)

# %% [markdown]
# Only attributes are registered. A plain Python list of layers hides them:
# the model below has no parameters at all, so an optimizer would train
# nothing. `ModuleList` is a list that registers what it holds, as children
# `0`, `1`, ...; `Sequential` is one that also calls them in turn, and
# takes integer, negative and slice indices (a slice is a `Sequential` that
# keeps the names).

# %%
class Hidden(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers


print("a list:      ", len(list(Hidden([nn.Linear(2, 2), nn.Linear(2, 2)]).parameters())), "parameters")
listed = Hidden(ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]))
print("a ModuleList:", len(list(listed.parameters())), "parameters")
print("model.body[-2]:", model.body[-2], "| model.body[:2]:", model.body[:2])

# %% [markdown]
# The parameters are `model.parameters()` as before, so step 32's
# optimizers take them unchanged. `train()` and `eval()` switch every
# module of the tree, and `zero_grad()` forgets the gradients, setting
# them to `None` as PyTorch does since 2.0.
#
# ## The state dict: a model as names and arrays
#
# `state_dict()` is the model's whole state as an ordered dict from dotted
# names to values: every parameter and every buffer (an array the model
# keeps but does not train, as batch normalisation's running statistics,
# step 45). `load_state_dict` copies such a dict back into the model's
# arrays, in place, so an optimizer built earlier still holds the same
# Parameters. It checks the keys both ways, and the shapes.

# %%
show_code(Module._state_entries, Module.load_state_dict)

# %% [markdown]
# A checkpoint from a model whose head has five outputs, and whose last
# layer's bias went missing, fails with PyTorch's message, every problem
# listed:

# %%
wrong = dict(model.state_dict())
wrong["head.weight"] = np.zeros((5, 4))
del wrong["head.bias"]
try:
    model.load_state_dict(wrong)
except RuntimeError as error:
    for line in str(error).splitlines():
        print(textwrap.fill(line, 100, subsequent_indent=" " * 12))

# %% [markdown]
# To keep a state dict, `tinypytorch.save` writes it to a file and
# `tinypytorch.load` reads it back. PyTorch pickles the dict, which means
# that loading a file may run code from it (hence torch's
# `weights_only=True`); here the file is NumPy's `.npz`: each array an
# entry, read with `allow_pickle=False`, and the dict's keys and nesting
# in one more entry, JSON text. So it holds nothing but arrays and text,
# and loading it runs no code. (It keeps a whole checkpoint too: dicts,
# lists and numbers around the state dicts of a model and an optimizer.)
# Any other object, a whole module for instance, is pickled as PyTorch
# pickles it, and `load` refuses it unless told `weights_only=False`, as
# PyTorch's does.

# %%
show_code(save, load)

# %%
folder = pathlib.Path(tempfile.mkdtemp())
save(model.state_dict(), folder / "net.pt")
tinypytorch.manual_seed(1)
restored = Net()  # other initial weights, then the saved ones
print(restored.load_state_dict(load(folder / "net.pt")))
x = Variable(np.random.default_rng(0).normal(size=(5, 2)), requires_grad=False)
print("same outputs after save and load:", np.array_equal(restored(x).data, model(x).data))

# %% tags=["hide-input"]
def state_picture(model):
    """The state dict as a table: key, shape, and the first values, as they travel to the file and back."""
    state = model.state_dict()
    fig, axis = plt.subplots(figsize=(8, 2.9))
    for row, (key, value) in enumerate(state.items()):
        y = -row
        axis.text(0.0, y, key, fontsize=9, family="monospace", va="center")
        axis.text(0.3, y, str(value.shape), fontsize=9, va="center")
        axis.text(0.53, y, " ".join(f"{v:+.2f}" for v in value.data.ravel()[:4]) + " ...", fontsize=8,
                  family="monospace", va="center", color="0.3")
        axis.add_patch(plt.Rectangle((0.86, y - 0.35), 0.06, 0.7, color="C1", alpha=0.4))
        axis.text(0.95, y, f"data/{row}.npy", fontsize=7, va="center", color="C1")
    axis.text(0.53, -len(state), "JSON: each key and its entry", fontsize=8, va="center", color="0.3")
    axis.add_patch(plt.Rectangle((0.86, -len(state) - 0.35), 0.06, 0.7, color="C0", alpha=0.4))
    axis.text(0.95, -len(state), "structure.npy", fontsize=7, va="center", color="C0")
    axis.set(xlim=(-0.02, 1.15), ylim=(-len(state) - 0.8, 0.8))
    axis.text(0.0, 0.7, "state_dict() key", fontsize=9, weight="bold")
    axis.text(0.3, 0.7, "shape", fontsize=9, weight="bold")
    axis.text(0.53, 0.7, "values", fontsize=9, weight="bold")
    axis.text(0.86, 0.7, "net.pt (npz)", fontsize=9, weight="bold", color="C1")
    axis.axis("off")
    fig.tight_layout()
    plt.show()


state_picture(model)

# %% [markdown]
# The picture is the file: one array a key, and an entry `structure` that
# maps each key to its array. Nothing in it says how to build `Net`; the
# code does that, and the state fills it.
#
# ## Check against PyTorch
#
# The same architecture in `torch.nn` (float64): the printout, the
# parameter names and shapes and the state-dict keys must be the same.
# Then torch's weights are loaded into ours through its own state dict;
# saved to a file and loaded into another `Net`, they must give torch's
# outputs, and a cross-entropy loss on a batch torch's gradients. The
# collapsed cell builds the twin.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)


def torch_twin(seed):
    """torch's Net, float64, named Net so that its printout can be compared."""
    class Net(torch.nn.Module):  # noqa: F811 (the twin of the model above)
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4),
                                            torch.nn.Tanh())
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.head(self.body(x))

    torch.manual_seed(seed)
    return Net().double()


def as_ours(state):
    """torch's state dict as tinypytorch's tensors, sharing the arrays (from_numpy)."""
    return {key: tinypytorch.from_numpy(value.detach().numpy()) for key, value in state.items()}


# %%
twin = torch_twin(0)
names = [(n, p.shape) for n, p in model.named_parameters()]
assert names == [(n, tuple(p.shape)) for n, p in twin.named_parameters()]
assert repr(model) == repr(twin) and list(model.state_dict()) == list(twin.state_dict())
model.load_state_dict(as_ours(twin.state_dict()))
save(model.state_dict(), folder / "from_torch.pt")
restored.load_state_dict(load(folder / "from_torch.pt"))
x_t = torch.from_numpy(x.data)
np.testing.assert_allclose(restored(x).data, twin(x_t).detach().numpy(), rtol=1e-12)
t = np.array([0, 2, 1, 1, 0])
loss = nn.CrossEntropyLoss()(model(x), t)
model.zero_grad()
loss.backward()
loss_t = torch.nn.CrossEntropyLoss()(twin(x_t), torch.from_numpy(t))
loss_t.backward()
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
for (name, p), p_t in zip(model.named_parameters(), twin.parameters()):
    np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, atol=1e-15, err_msg=name)
print("printout, 6 parameter names and shapes, state-dict keys: equal; "
      "after save and load, outputs equal torch's;")
print("loss and 6 gradients equal torch's")
print("PyTorch check passed: a Module's names, state dict, outputs and gradients equal torch.nn's")

# %% [markdown]
# ## Recap
#
# - `nn.Module` is step 32's `Layer` with names: assigning a Parameter, a
#   module or (through `register_buffer`) a buffer to an attribute
#   registers it; the dotted path from the root names it.
# - `named_parameters`, `named_buffers`, `named_children` and
#   `named_modules` walk the tree depth first, in the order assigned.
# - `Sequential` and `ModuleList` register a list of modules; a plain
#   Python list hides them.
# - `state_dict()` maps the names to the values; `load_state_dict` copies
#   them back in place and reports missing, unexpected and misshapen keys
#   as PyTorch does; `save`/`load` keep a state dict in an `.npz` file,
#   without pickle.
#
# ## Exercises
#
# **1. Parameters per part.** Write `count(model)`, a dict from each
# direct child's name to the number of numbers in its parameters (a
# parameter of shape (4, 2) holds 8). Which part of `Net` is larger?

# %% tags=["hide-cell"]
def count(model):
    return {name: sum(p.data.size for p in child.parameters()) for name, child in model.named_children()}


print(count(model))

# %% [markdown]
# **2. A residual block.** Write `Residual(inner)`, a module whose output
# is `x + inner(x)`, and build
# `Sequential(Linear(3, 3), Residual(Sequential(Linear(3, 3), Tanh())))`.
# What are its parameter names? (The torch twin has the same.)

# %% tags=["hide-cell"]
class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


residual = nn.Sequential(nn.Linear(3, 3), Residual(nn.Sequential(nn.Linear(3, 3), nn.Tanh())))
print([name for name, _ in residual.named_parameters()])

# %% [markdown]
# **3. Part of a checkpoint.** A checkpoint of the whole `Net` holds the
# body's weights under `body.`. Write `sub_state(state, prefix)`, the
# entries whose key starts with `prefix`, the prefix removed, and load the
# body of `model` into a fresh `Sequential` of the same layers.

# %% tags=["hide-cell"]
def sub_state(state, prefix):
    return {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}


body = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
print(body.load_state_dict(sub_state(model.state_dict(), "body.")))
print("same hidden features:", np.array_equal(body(x).data, model.body(x).data))
