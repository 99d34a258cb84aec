# %% [markdown]
# # Step 68: One door for every mode
#
# By the end of stage 5 an operation had many things to ask before it
# ran: is a selective-checkpoint region open (step 63)? autocast (step 61)?
# inference mode (step 58)? a dual level (step 64)? Each answer came from
# its own check in `Function.__call__`, and every operation paid for every
# check, open or not. Stage 6 adds one more mode, vmap (step 69). PyTorch
# does not grow its operations this way: each call goes through its
# **dispatcher**, which keeps the modes that are on as a set of *keys* in
# a fixed order, and hands the call to the highest one; that one does its
# part and hands the call on to the next. This step gives the package the
# same shape: one **mode stack** that `Function.__call__` asks once.

# %%
import contextlib

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.autograd.forward_ad as torch_fwAD

import tinypytorch as tp
import tinypytorch.autograd.forward_ad as fwAD
from tinypytorch import grad_mode, modes
from tinypytorch.amp import autocast_mode
from tinypytorch.func import vmap
from tinypytorch.utils.listing import show_code

R = np.random.default_rng(0)

# %% [markdown]
# ## The door
#
# `Function.__call__` now reads one number, `modes.open_modes`. While it is
# 0 (no mode is open, the common case) the operation goes straight to
# `run_plain`, the door of step 23 with what steps 33 to 59 added to it
# (recording, views, PyTorch's dtypes), which asks no mode at all:

# %%
show_code(tp.Function.__call__)
print("modes open now:", modes.open_now())

# %% [markdown]
# While some mode is open, the call goes down the stack instead. The
# stack is a tuple of **entries**, one per open mode, always in the same
# order; each entry is a function `entry(function, inputs, below)` that
# either computes the outputs itself, or calls `below(inputs)`, the rest
# of the stack, with the inputs as they are or changed. Below the last
# entry waits `run_plain`:

# %%
print("the order, top first:", modes.ORDER)
show_code(modes.dispatch, modes._below)

# %% [markdown]
# A mode belongs to the module that owns its state: `grad_mode` owns
# inference mode, `amp` autocast, `batching_state` vmap, the core forward
# AD, `utils.selective_checkpoint` its regions. Each **registers** its
# entry once, and **opens** and **closes** it with its blocks: entering
# `autocast` calls `modes.opened("autocast")`, leaving it
# `modes.closed("autocast")`. Nested blocks of one mode are counted, and
# the stack holds each mode once. Two entries, the shortest:

# %%
show_code(grad_mode.recording_nothing, autocast_mode.casting_mode)

# %% [markdown]
# Inference mode's entry turns recording off for the call, even where
# `enable_grad` turned grad mode back on inside the block (step 58), then
# hands the call on. Autocast's entry hands it on with its inputs cast.
# Neither needs to know what else is open.
#
# ## The path of one operation
#
# To watch an operation go down the stack, `traced` wraps every
# registered entry so that it notes when it sees a call and when it hands
# it on. Inside `autocast` and a dual level, `x @ W` goes like this:

# %%
@contextlib.contextmanager
def traced(log):
    """While open, every entry of the mode stack notes (mode, operation, what it did) in `log`."""
    registered = dict(modes._handlers)

    def noting(mode, entry):
        def noted(function, inputs, below):
            def handed_on(xs):
                log.append((mode, type(function).__name__, "hands on"))
                return below(xs)
            log.append((mode, type(function).__name__, "sees"))
            return entry(function, inputs, handed_on)
        return noted

    for mode, entry in registered.items():
        modes.register(mode, noting(mode, entry))
    try:
        yield
    finally:
        for mode, entry in registered.items():
            modes.register(mode, entry)


x = tp.tensor(R.normal(size=(3, 4)).astype(np.float32))
W = tp.tensor(R.normal(size=(4, 2)).astype(np.float32))
log = []
with traced(log), tp.autocast("cpu", dtype=tp.float16), fwAD.dual_level():
    dual = fwAD.make_dual(x, tp.ones_like(x))
    print("open:", modes.open_now())
    log.clear()
    y = dual @ W
    path = list(log)
    tangent = fwAD.unpack_dual(y).tangent
for step, (mode, op, did) in enumerate(path, 1):
    print(f"{step:2d}. {mode:<10} {did:<8} {op}")
print("y:", y.dtype, " tangent:", tangent.dtype)

# %% [markdown]
# Autocast's entry sees `MatMul` first. Before it hands it on, it casts
# both inputs to float16, and each cast is an operation too: `Cast` goes
# down the stack **from the top**, so forward AD, below autocast, sees the
# casts and gives each cast input a float16 tangent. Then `MatMul` goes
# on, with the cast inputs, to forward AD's entry, which lets it run
# below and pushes the tangent afterwards. PyTorch calls this
# *redispatch*: what a mode runs meets every mode below it.

# %% tags=["hide-input"]
def draw_path(log, open_modes):
    """The stack as boxes, top first, the open ones filled; beside each, what it did in the traced calls."""
    rows = [*modes.ORDER, "run_plain (the door)"]

    def counted(mode, did):
        ops = [op for m, op, d in log if m == mode and d == did]
        return ", ".join(f"{op} x{ops.count(op)}" for op in dict.fromkeys(ops))

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, name in enumerate(rows):
        y = len(rows) - 1 - i
        is_open = name in open_modes or name == rows[-1]
        ax.add_patch(plt.Rectangle((0, y + 0.1), 2.6, 0.8, facecolor="#dbe8f6" if is_open else "#f2f2f2",
                                   edgecolor="#4a6f96" if is_open else "#bbbbbb"))
        ax.text(1.3, y + 0.5, name, ha="center", va="center", fontsize=10, color="black" if is_open else "#999999")
        if name in open_modes:
            ax.text(2.8, y + 0.5, f"sees {counted(name, 'sees')}; hands each on", va="center", fontsize=9)
    ax.text(2.8, 0.5, f"records and computes {counted(open_modes[-1], 'hands on')}", va="center", fontsize=9)
    open_rows = [len(rows) - 1 - rows.index(n) for n in [*open_modes, rows[-1]]]
    for upper, lower in zip(open_rows, open_rows[1:]):
        ax.annotate("", xy=(-0.15, lower + 0.5), xytext=(-0.15, upper + 0.5),
                    arrowprops=dict(arrowstyle="->", color="#4a6f96", connectionstyle="arc3,rad=0.35"))
    ax.set_xlim(-0.6, 8)
    ax.set_ylim(-0.1, len(rows) + 0.05)
    ax.axis("off")
    ax.set_title("The mode stack under autocast and a dual level: y = x @ W", fontsize=10)
    return fig


draw_path(path, ["autocast", "forward AD"])
plt.show()

# %% [markdown]
# The closed entries (grey) cost nothing: the stack holds only the open
# ones. With nothing open the stack is empty and `__call__` goes straight
# to the door, as in the first cell.
#
# ## Why this order
#
# The order is PyTorch's, read off its dispatch keys, highest priority
# first: functorch's batching (`FuncTorchBatched`), autocast
# (`AutocastCPU`), autograd (`AutogradCPU`, where forward AD computes and
# which inference mode switches off), then the Python dispatch modes
# (`Python`, where selective checkpointing's regions live, below
# autograd), then the kernel (`CPU`). PyTorch lists its keys lowest
# priority first:

# %%
keys = ["CPU", "Python", "AutogradCPU", "AutocastCPU", "FuncTorchBatched"]
everything = str(torch._C._dispatch_keyset_full())  # "DispatchKeySet(CPU, CUDA, ...)"
everything = everything.removeprefix("DispatchKeySet(").removesuffix(")").split(", ")
print(sorted(keys, key=everything.index))

# %% [markdown]
# The order is not a detail. With forward AD **above** autocast, forward
# AD's entry would compute the tangent from the inputs as it received
# them, in float32, before autocast cast them: the output is float16 and
# its tangent float32, where PyTorch's tangent is float16. The stack reads
# `modes.ORDER` when a mode opens, so the experiment is one assignment:

# %%
def matmul_under_autocast_and_forward_ad():
    with tp.autocast("cpu", dtype=tp.float16), fwAD.dual_level():
        y = fwAD.make_dual(x, tp.ones_like(x)) @ W
        return y.dtype, fwAD.unpack_dual(y).tangent.dtype


ours = modes.ORDER
modes.ORDER = ("vmap", "forward AD", "autocast", "inference", "selective checkpoint")
print("forward AD above autocast:", matmul_under_autocast_and_forward_ad())
modes.ORDER = ours
print("PyTorch's order:          ", matmul_under_autocast_and_forward_ad())
with torch.autocast("cpu", dtype=torch.float16), torch_fwAD.dual_level():
    xt = torch.tensor(x.data)
    yt = torch_fwAD.make_dual(xt, torch.ones_like(xt)) @ torch.tensor(W.data)
    print("PyTorch:                  ", (yt.dtype, torch_fwAD.unpack_dual(yt).tangent.dtype))

# %% [markdown]
# ## Check against PyTorch
#
# Modes combined, each result compared with PyTorch's on the same inputs:
# autocast with forward AD (dtypes and values), inference mode with
# `enable_grad` inside (nothing recorded), vmap under autocast, and a
# `jvp` inside `vmap` (forward AD below vmap's batching). After each, no
# mode is left open.

# %% tags=["hide-input"]
def check():
    """Scenarios with several modes open, against PyTorch; True where the package's result is PyTorch's."""
    results = {}
    xt, Wt = torch.tensor(x.data), torch.tensor(W.data)
    # autocast + forward AD: output and tangent, dtype and value (float16 results)
    with tp.autocast("cpu", dtype=tp.float16), fwAD.dual_level():
        y = fwAD.make_dual(x, tp.ones_like(x)) @ W
        primal, tangent = fwAD.unpack_dual(y)
    with torch.autocast("cpu", dtype=torch.float16), torch_fwAD.dual_level():
        yt = torch_fwAD.make_dual(xt, torch.ones_like(xt)) @ Wt
        primal_t, tangent_t = torch_fwAD.unpack_dual(yt)
    results["autocast + forward AD"] = (
        str(primal.dtype) == str(primal_t.dtype) and str(tangent.dtype) == str(tangent_t.dtype)
        and np.allclose(primal.data, primal_t.numpy(), rtol=2e-3) and np.allclose(tangent.data, tangent_t.numpy(),
                                                                                    rtol=2e-3))
    # inference mode with enable_grad inside: no graph
    a, at = tp.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    with tp.inference_mode(), tp.enable_grad():
        b = a * 2
    with torch.inference_mode(), torch.enable_grad():
        bt = at * 2
    results["inference mode + enable_grad"] = (b.requires_grad, b.creator is None, b.is_inference()) == (
        bt.requires_grad, bt.grad_fn is None, bt.is_inference())
    # vmap under autocast: each sample's product in float16
    batch = tp.tensor(R.normal(size=(5, 4)).astype(np.float32))
    with tp.autocast("cpu", dtype=tp.float16):
        v = vmap(lambda row: row @ W)(batch)
    with torch.autocast("cpu", dtype=torch.float16):
        vt = torch.func.vmap(lambda row: row @ Wt)(torch.tensor(batch.data))
    results["vmap under autocast"] = (str(v.dtype) == str(vt.dtype) and v.shape == tuple(vt.shape)
                                      and np.allclose(v.data, vt.numpy(), rtol=2e-3))
    # jvp inside vmap: forward AD below the batching rules
    b64, W64 = batch.to(tp.float64), W.to(tp.float64)

    def f(row):
        return (row @ W64).tanh()

    _, jv = vmap(lambda r: tp.func.jvp(f, (r,), (tp.ones_like(r),)))(b64)
    _, jvt = torch.func.vmap(lambda r: torch.func.jvp(lambda q: (q @ Wt.double()).tanh(), (r,),
                                                      (torch.ones_like(r),)))(torch.tensor(b64.data))
    results["jvp inside vmap"] = np.allclose(jv.data, jvt.numpy(), rtol=1e-12, atol=1e-14)
    results["no mode left open"] = modes.open_now() == [] and modes.open_modes == 0
    return results


scenarios = check()
for scenario, same in scenarios.items():
    print(f"{scenario:<30} {'same as PyTorch' if same else 'DIFFERENT'}")
assert all(scenarios.values()), [name for name, same in scenarios.items() if not same]
print("PyTorch check passed: modes combined on the stack give PyTorch's results")

# %% [markdown]
# ## Recap
#
# - `Function.__call__` asks one number, `modes.open_modes`; with no mode
#   open the operation goes straight to `run_plain`, the door of the
#   earlier steps, which asks no mode.
# - Each open mode is one entry of a stack, in PyTorch's dispatch order:
#   vmap, autocast, inference mode, forward AD, selective checkpointing,
#   then the door. An entry computes the call itself or hands it on with
#   `below(inputs)`.
# - What an entry runs on its own (a batching rule's operations, autocast's
#   casts) goes down the stack from the top again, so it meets every mode
#   below: the order decides results, such as the dtype of a tangent under
#   autocast.
# - Each mode is registered, opened and closed by the module that owns its
#   state; the stack itself imports nothing of the package.
#
# ## Exercises
#
# **1. Read a path.** Inside `inference_mode()` with `enable_grad()`
# nested in it, and a dual level open, which entries see `a * 2` and
# which hand it on? Predict, then trace it with `traced`. (Does the
# result have a tangent? Compare with PyTorch.)

# %% tags=["hide-cell"]
seen = []
with traced(seen), fwAD.dual_level():
    a = fwAD.make_dual(tp.ones(2), tp.ones(2))
    with tp.inference_mode(), tp.enable_grad():
        seen.clear()
        b = a * 2
        noted = list(seen)
        tangent = fwAD.unpack_dual(b).tangent
print(noted)
print("tangent:", tangent)
with torch_fwAD.dual_level():
    at = torch_fwAD.make_dual(torch.ones(2), torch.ones(2))
    with torch.inference_mode(), torch.enable_grad():
        print("PyTorch's tangent:", torch_fwAD.unpack_dual(at * 2).tangent)

# %% [markdown]
# **2. A mode of your own.** Write an entry `counting(function, inputs,
# below)` that counts each kind of operation it sees and hands every call
# on; put it in the place of selective checkpointing's entry for the
# length of a `with` block (register it, open the mode, and restore both
# afterwards), and count the operations of `((x @ W).tanh() ** 2).sum()`.
# Check the count against PyTorch's: `TorchDispatchMode` sees the same
# operations under other names.

# %% tags=["hide-cell"]
@contextlib.contextmanager
def counting_mode(counts):
    def counting(function, inputs, below):
        counts[type(function).__name__] = counts.get(type(function).__name__, 0) + 1
        return below(inputs)

    kept = modes._handlers["selective checkpoint"]
    modes.register("selective checkpoint", counting)
    modes.opened("selective checkpoint")
    try:
        yield
    finally:
        modes.closed("selective checkpoint")
        modes.register("selective checkpoint", kept)


counts = {}
with counting_mode(counts):
    ((x @ W).tanh() ** 2).sum()
print(counts)


class TorchCounting(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


xt, Wt = torch.tensor(x.data), torch.tensor(W.data)
with TorchCounting() as counter:
    ((xt @ Wt).tanh() ** 2).sum()
print(counter.counts)

# %% [markdown]
# **3. Why once per mode?** `autocast` blocks can nest. Open two nested
# blocks and print `modes.open_now()` and `len(modes.stack)` inside the
# inner one and after it closes. Why must the stack hold autocast's entry
# once, however many blocks are open?

# %% tags=["hide-cell"]
with tp.autocast("cpu", dtype=tp.float16):
    with tp.autocast("cpu", dtype=tp.float16):
        print("inner:", modes.open_now(), len(modes.stack))
    print("after the inner block:", modes.open_now(), len(modes.stack))
print("after both:", modes.open_now(), len(modes.stack))
# Twice on the stack, the entry would cast the inputs of each operation twice over (the second a no-op, but
# paid for), and the inner block's exit would have to remove the right copy: a count per mode keeps one entry
# until the last block closes.
