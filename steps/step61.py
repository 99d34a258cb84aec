# %% [markdown]
# # Step 61: autocast
#
# A GPU multiplies float16 matrices several times faster than float32 ones
# (its tensor cores work in half precision), and a float16 activation takes
# half the memory. But half precision has 11 significant bits and a largest
# value of 65504: a sum of many terms, an exponential or a loss computed in it
# goes wrong. *Mixed precision* runs each operation in the dtype that suits
# it, and `torch.autocast` does it for you: inside the block, matrix products
# get their inputs cast to float16, losses and other sensitive operations to
# float32, everything else runs in whatever dtype arrives. This step builds
# `tinypytorch.autocast`, with PyTorch's lists, its weight cache and its
# gradients.

# %%
import textwrap
import threading
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch

import tinypytorch as tp
from tinypytorch import autocast_state
from tinypytorch.amp import autocast_mode
from tinypytorch.nn import functional as F
from tinypytorch.utils.listing import show_code

torch.set_num_threads(1)

# %% [markdown]
# ## A model under autocast
#
# The parameters stay float32. Inside the block the linear layer runs in
# float16, and the loss in float32:

# %%
rng = np.random.default_rng(0)
x = tp.tensor(rng.normal(size=(8, 3)), dtype=tp.float32)
target = tp.tensor(rng.normal(size=(8, 2)), dtype=tp.float32)
w = tp.tensor(rng.normal(size=(2, 3)), dtype=tp.float32, requires_grad=True)
b = tp.tensor(np.zeros(2), dtype=tp.float32, requires_grad=True)

with tp.autocast("cpu", dtype=tp.float16):
    y = F.linear(x, w, b)
    loss = F.mse_loss(y, target)
print("y:", y.dtype, "  loss:", loss.dtype)

# %% [markdown]
# Outside the block, `backward` finds each cast in the graph and casts the
# gradient back: the parameters get float32 gradients, as their optimizer
# expects.

# %%
loss.backward()
print("w.grad:", w.grad.dtype, "  b.grad:", b.grad.dtype)


# %% tags=["hide-input"]
def graph_nodes(y):
    """(name, output dtype, [inputs]) of y's graph, each node once, and the leaves that require grad."""
    nodes, todo = {}, [y.creator]
    while todo:
        f = todo.pop()
        if f is None or id(f) in nodes:
            continue
        ins = [node for node, _ in f.edges if node is not None]
        nodes[id(f)] = (type(f).__name__, str(f.output_meta[0][1]), ins)
        todo += [node for node in ins if not isinstance(node, tp.Variable)]
    return nodes


def draw_graph(loss, names):
    nodes = graph_nodes(loss)
    place = {"w": (0, 1.2), "b": (0, -0.2), "Cast w": (1.6, 1.2), "Cast b": (1.6, -0.2), "Linear": (3.3, 0.5),
             "Cast y": (5.0, 0.5), "MeanSquaredError": (6.9, 0.5)}
    shown = {"LinearFunction": "linear", "MeanSquaredError": "mse_loss"}
    labels, at = {}, {}
    for key, (name, dtype, ins) in nodes.items():
        tag = name if name != "Cast" else "Cast " + names.get(id(ins[0]), "y")
        at[key], labels[key] = place[tag.replace("LinearFunction", "Linear")], f"{shown.get(name, name)}\n{dtype}"
    fig, ax = plt.subplots(figsize=(8.5, 2.8))
    for key, (name, dtype, ins) in nodes.items():
        for node in ins:
            src = place[names[id(node)]] if isinstance(node, tp.Variable) else at[id(node)]
            ax.annotate("", at[key], src, arrowprops=dict(arrowstyle="->", color="0.3", shrinkA=24, shrinkB=24))
    for leaf in ("w", "b"):
        ax.text(*place[leaf], f"{leaf}\nfloat32", ha="center", va="center", bbox=dict(fc="#dddddd", ec="0.4"))
    boxes = {}
    for key, text in labels.items():
        colour = "#9ecae1" if "float16" in text else "#fdd0a2"
        boxes[nodes[key][0]] = ax.text(*at[key], text, ha="center", va="center",
                                       bbox=dict(fc=colour, ec="0.4", boxstyle="round")).get_bbox_patch()
    # the target enters mse_loss as a constant: an input, but no node of the graph and no edge
    ax.annotate("target float32 (a constant)", xy=(0.5, 1), xycoords=boxes["MeanSquaredError"], xytext=(6.9, 1.4),
                textcoords="data", ha="center", va="center", fontsize=9, color="0.3",
                arrowprops=dict(arrowstyle="->", color="0.5", linestyle="--", shrinkA=2, shrinkB=2))
    ax.text(3.3, -0.75, "backward: each Cast casts the gradient back to its input's dtype", ha="center", va="top",
            fontsize=9, color="0.3")  # under the boxes, not on Cast b's
    ax.set_xlim(-0.5, 7.8), ax.set_ylim(-1.1, 1.8), ax.axis("off")
    ax.set_title("the graph autocast records: casts are nodes (blue: float16, orange: float32)")
    plt.show()


draw_graph(loss, {id(w): "w", id(b): "b"})

# %% [markdown]
# ## Where the cast happens
#
# Every operation passes through `Function.__call__`. While an autocast
# block is open anywhere (a process-wide count, so that the common path
# pays one global read), autocast is an entry of the mode stack that
# `__call__` asks (step 68 builds it): the entry hands the inputs to the
# autocast policy, which returns them cast, and the operation runs on
# those. The state it asks is per thread, as PyTorch's, and lives in a
# small module beside the other modes:

# %%
show_code(autocast_mode.casting_mode, autocast_mode.cast_inputs, autocast_mode._cast)

# %% [markdown]
# A cast is `astype`, step 43's differentiable `Cast`: a node of the graph
# whose backward casts the gradient back. float64 and integer inputs are never
# cast: autocast only ever lowers or widens float32 and float16.
#
# ## Two devices, two lists
#
# Which operation goes where is data, PyTorch's lists for the operations the
# package has. They differ by device: on CUDA, softmax, log_softmax,
# layer_norm, sum, exp, log, pow and norm run in float32; PyTorch's CPU list
# leaves them alone (they run in float16 if float16 arrives).

# %% tags=["hide-input"]
def draw_lists():
    colours = {"lower": "#9ecae1", "float32": "#fdd0a2", "promote": "#c7e9c0", None: "white"}
    words = {"lower": "float16", "float32": "float32", "promote": "widest", None: "as it comes"}
    rows = len(autocast_mode.POLICY)
    fig, ax = plt.subplots(figsize=(8, 0.22 * rows + 0.9))  # a row a line of 9-point text, with room between
    ax.text(0.5, rows + 0.5, "package op (torch op)", ha="center", va="center", fontsize=9, weight="bold")
    for j, device in enumerate(("CPU", "CUDA")):
        ax.text(1.5 + j, rows + 0.5, device, ha="center", va="center", fontsize=9, weight="bold")
    for i, (ours, _, theirs, cpu, gpu) in enumerate(reversed(autocast_mode.POLICY)):
        ax.text(0.5, i + 0.5, ours if ours == theirs else f"{ours} ({theirs})", ha="center", va="center",
                fontsize=9)
        for j, policy in enumerate((cpu, gpu)):
            ax.add_patch(plt.Rectangle((1 + j, i), 1, 1, fc=colours[policy], ec="0.6"))
            ax.text(1.5 + j, i + 0.5, words[policy], ha="center", va="center", fontsize=9,
                    weight="bold" if cpu != gpu else "normal")
    ax.set_xlim(0, 3.02), ax.set_ylim(0, rows + 1), ax.axis("off")
    ax.set_title("autocast's policy per device (bold: where the two lists differ)")
    plt.show()


draw_lists()

# %% [markdown]
# On a GPU the same code runs with `autocast("cuda")` (float16 is its
# default). On the CPU PyTorch's default is bfloat16, which NumPy lacks: the
# package asks for `dtype=tp.float16` there, which PyTorch accepts too.
# The `ml-dtypes` package (the one JAX uses) would give NumPy a bfloat16,
# but its matrix product returns float32, so every product would need a
# cast back, and its CuPy support is experimental: one more dependency for
# a dtype whose lessons float16 already teaches (bfloat16 has float32's
# range, so it needs no loss scaling, step 62). On the CPU autocast is here
# to learn from: NumPy's float16 matrix product has no BLAS kernel behind
# it, so the speed comes only on a GPU.
#
# ## The weight cache
#
# A weight used several times in one block (a layer applied at each time
# step of a recurrent net) would be cast at each use. PyTorch casts it once:
# the cast of a float32 leaf that requires grad is kept until the outermost
# block closes. `cache_enabled=False` turns that off. Count the casts in the
# graph:

# %%
def casts_in_graph(loss):
    return sum(name == "Cast" for name, _, _ in graph_nodes(loss).values())


def recurrent(steps, cache_enabled):
    h = x[:, :2]
    with tp.autocast("cpu", dtype=tp.float16, cache_enabled=cache_enabled):
        for _ in range(steps):
            h = tp.tanh(F.linear(h, w2))
    return casts_in_graph(h.sum())


w2 = tp.tensor(rng.normal(size=(2, 2)), dtype=tp.float32, requires_grad=True)
counts = {cache: [recurrent(n, cache) for n in range(1, 7)] for cache in (True, False)}
print("casts of the weight, 1-6 uses, cached:  ", counts[True])
print("casts of the weight, 1-6 uses, uncached:", counts[False])

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(8, 3))
for cache, marker, size in ((False, "s", 9), (True, "o", 5)):  # at one use both count 1: the square shows round
    ax.plot(range(1, 7), counts[cache], marker=marker, ms=size, label=f"cache_enabled={cache}")
ax.set_xlabel("uses of the same weight in one block"), ax.set_ylabel("Cast nodes")
ax.set_title("the weight cache: one cast a block, however often the weight is used"), ax.legend()
plt.show()

# %% [markdown]
# ## Nesting, float64 and threads
#
# `autocast(enabled=False)` inside a block switches it off until its own end;
# float64 tensors pass untouched; a new thread starts without autocast.

# %%
a32, a64 = tp.ones(2, 2), tp.ones(2, 2, dtype=tp.float64)
seen = {}
with tp.autocast("cpu", dtype=tp.float16):
    seen["inside: float32 @ float32"] = (a32 @ a32).dtype
    seen["inside: float64 @ float64"] = (a64 @ a64).dtype
    with tp.autocast("cpu", enabled=False):
        seen["inside enabled=False"] = (a32 @ a32).dtype
    seen["back inside"] = (a32 @ a32).dtype
    thread = threading.Thread(target=lambda: seen.update({"another thread": (a32 @ a32).dtype}))
    thread.start(), thread.join()
for what, dtype in seen.items():
    print(f"{what:28} {dtype}")

# %% [markdown]
# ## Memory, counted
#
# Activations are what a forward pass keeps for backward. Under autocast a
# linear layer's output is float16: half the bytes.

# %%
big = tp.tensor(rng.normal(size=(256, 512)), dtype=tp.float32)
layer = tp.tensor(rng.normal(size=(512, 512)) / 20, dtype=tp.float32, requires_grad=True)
plain = F.linear(big, layer)
with tp.autocast("cpu", dtype=tp.float16):
    mixed = F.linear(big, layer)
print(f"linear output: float32 {plain.data.nbytes:,} bytes, under autocast {mixed.data.nbytes:,} bytes")

# %% [markdown]
# ## Bad input
#
# A device the package has no backend for is refused in PyTorch's words; a
# dtype autocast does not support gives PyTorch's warning, and autocast
# stays off; bfloat16 is a clear error.

# %%
for device, dtype in (("xla", None), ("cpu", "float64"), ("cpu", None)):
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # before autocast starts: its constructor warns
            with tp.autocast(device, dtype=dtype):
                print(f"{device}, {dtype}: autocast on:", tp.amp.is_autocast_enabled(device))
        for warning in caught:
            print("   UserWarning:", str(warning.message).splitlines()[0])
    except RuntimeError as error:
        print(textwrap.fill(f"{device}, {dtype}: RuntimeError: {error}", 104, subsequent_indent="    "))

# %% [markdown]
# ## Check against PyTorch
#
# The same operations under `tp.autocast("cpu", dtype=tp.float16)` and
# `torch.autocast("cpu", dtype=torch.float16)`, inputs float32 then float64:
# the output dtypes agree (the tests run every operation of the package), and
# the model above gives torch's loss and float32 gradients.

# %% tags=["hide-cell"]
def cases(fw):
    nnf = fw.nn.functional
    labels = fw.tensor(np.array([1, 0, 2, 1]))
    return {"matmul": lambda a, c: a @ c.T, "linear": lambda a, c: nnf.linear(a, c),
            "mse_loss": lambda a, c: nnf.mse_loss(a, c), "cross_entropy": lambda a, c: nnf.cross_entropy(a, labels),
            "nll_loss": lambda a, c: nnf.nll_loss(a, labels), "softmax": lambda a, c: fw.softmax(a, 1),
            "log_softmax": lambda a, c: fw.log_softmax(a, 1), "layer_norm": lambda a, c: nnf.layer_norm(a, (3,)),
            "sum": lambda a, c: a.sum(), "exp": lambda a, c: fw.exp(a), "log": lambda a, c: fw.log(a * a + 1),
            "pow": lambda a, c: a ** 2, "cat": lambda a, c: fw.cat([a.T @ c, a]), "relu": lambda a, c: fw.relu(a),
            "tanh": lambda a, c: fw.tanh(a), "mean": lambda a, c: a.mean(), "sin": lambda a, c: fw.sin(a)}


def dtypes(fw, dtype, half):
    arrays = [rng.normal(size=(4, 3)) for _ in range(2)]
    out = {}
    with fw.autocast("cpu", dtype=half):
        for name, run in cases(fw).items():
            out[name] = str(run(*[fw.tensor(a, dtype=dtype) for a in arrays]).dtype)
    return out


def torch_model():
    tw, tb = (torch.tensor(p.data, requires_grad=True) for p in (w, b))
    with torch.autocast("cpu", dtype=torch.float16):
        tloss = torch.nn.functional.mse_loss(torch.nn.functional.linear(torch.tensor(x.data), tw, tb),
                                             torch.tensor(target.data))
    tloss.backward()
    return tloss, tw.grad, tb.grad


# %%
agree = 0
for dtype, tdtype in ((tp.float32, torch.float32), (tp.float64, torch.float64)):
    ours, theirs = dtypes(tp, dtype, tp.float16), dtypes(torch, tdtype, torch.float16)
    assert ours == theirs, (ours, theirs)
    agree += len(ours)
tloss, tw_grad, tb_grad = torch_model()
np.testing.assert_allclose(loss.data, tloss.detach().numpy(), rtol=1e-3)
for ours, theirs in ((w.grad, tw_grad), (b.grad, tb_grad)):
    assert ours.dtype == np.float32 and theirs.dtype == torch.float32
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=5e-3, atol=5e-3)  # float16's rounding
print(f"{agree} output dtypes as torch's; loss and gradients within float16's rounding, gradients float32")
print(f"PyTorch check passed: {agree} of {agree} autocast output dtypes, "
      "the model's loss and float32 gradients")

# %% [markdown]
# ## Recap
#
# - `tp.autocast(device_type, dtype)` casts the inputs of listed operations
#   where `Function.__call__` receives them: matrix products to float16,
#   losses to float32, `cat` to the widest dtype; the rest runs as it comes.
# - The lists are PyTorch's and depend on the device: on CUDA, softmax, sum,
#   exp, log, pow and layer_norm also run in float32.
# - Casts are graph nodes, so backward (run after the block) gives float32
#   parameters float32 gradients. A weight's cast is made once a block.
# - float64 and integers are never cast; `enabled=False` nests; the state
#   belongs to the thread.
#
# ## Exercises
#
# **1. Dtypes through a network.** For a two-layer network `linear`,
# `relu`, `linear` with float32 weights, then `cross_entropy`, list the dtype
# of each output under CPU autocast with float16, and of the first weight's
# gradient after backward.

# %% tags=["hide-cell"]
def network_dtypes(fw, half):
    rng = np.random.default_rng(1)
    x, w1, w2 = (fw.tensor(rng.normal(size=shape), dtype=fw.float32) for shape in ((5, 3), (4, 3), (2, 4)))
    w1.requires_grad_(True)
    with fw.autocast("cpu", dtype=half):
        h = fw.nn.functional.linear(x, w1)
        r = fw.relu(h)
        out = fw.nn.functional.linear(r, w2)
        loss = fw.nn.functional.cross_entropy(out, fw.tensor(np.array([0, 1, 0, 1, 0])))
    loss.backward()
    return [str(t.dtype) for t in (h, r, out, loss, w1.grad)]


print(network_dtypes(tp, tp.float16))

# %% [markdown]
# **2. A float32 island.** Inside an autocast block, compute
# `logsumexp` of a linear layer's float16 output in float32: switch autocast
# off for that part and cast the input yourself.

# %% tags=["hide-cell"]
def float32_island(fw, half, a, c):
    with fw.autocast("cpu", dtype=half):
        h = a @ c
        with fw.autocast("cpu", enabled=False):
            return h.dtype, fw.logsumexp(h.float(), 1)


h_dtype, island = float32_island(tp, tp.float16, tp.ones(2, 3), tp.ones(3, 4))
print(h_dtype, island.dtype, island.data)
