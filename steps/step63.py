# %% [markdown]
# # Step 63: Selective activation checkpointing
#
# Step 43's checkpoint is all or nothing: a region keeps only its inputs,
# and backward runs all of it again. Yet the operations in a region are
# not alike. A matrix product costs $2\,n\,d_{in}\,d_{out}$ operations
# for an output of $n\,d_{out}$ numbers; a `tanh` costs one per number.
# Keeping the products and recomputing the cheap element-wise operations
# buys back most of the compute, often for a part of the memory (measured
# below: when it is, and when not). PyTorch's
# **selective activation checkpointing** does that: a *policy* says, for
# each operation in the region, whether its output is kept or computed
# again. This step builds it on step 43's checkpoint, through the
# argument PyTorch opens for it, `context_fn`.

# %%
import functools
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import Variable, recomputation
from tinypytorch import functions as F
from tinypytorch.utils import checkpoint as checkpoint_module
from tinypytorch.utils import selective_checkpoint as sac
from tinypytorch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


N, D, LAYERS = 64, 128, 3  # a batch of 64 rows through three 128 x 128 layers, float64
rng = np.random.default_rng(60)
X = rng.standard_normal((N, D))
WEIGHTS = [(rng.standard_normal((D, D)) / np.sqrt(D), rng.standard_normal(D) / 10) for _ in range(LAYERS)]
COUNTED = (F.LinearFunction, F.Tanh)


class counting_recomputations:
    """Counts, per Function class, the forwards that run while recomputing (wrapping the classes' own forward)."""

    def __enter__(self):
        self.counts, self.originals = {c.__name__: 0 for c in COUNTED}, {c: c.__dict__["forward"] for c in COUNTED}
        for c, forward in self.originals.items():
            c.forward = self.counting(c.__name__, forward)
        return self.counts

    def counting(self, name, forward):
        def run(op, *xs):
            self.counts[name] += recomputation.is_recomputing()
            return forward(op, *xs)
        return run

    def __exit__(self, *exc):
        for c, forward in self.originals.items():
            c.forward = forward


def block(fw, t):
    """(where, bytes) of the memory a tensor lives in: a view (a weight's transpose) is its base's memory."""
    if fw is not tp:
        return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
    a = t.data
    while isinstance(a.base, np.ndarray):
        a = a.base
    return id(a), a.nbytes


def saved_blocks(fw, run_forward, params, x):
    """Bytes of the distinct memory a forward saves that is neither a parameter's nor the input's (no checkpoint)."""
    blocks, skip = {}, {block(fw, p)[0] for pair in params for p in pair} | {block(fw, x)[0]}

    def pack(t):
        where, nbytes = block(fw, t)
        if where not in skip:
            blocks[where] = nbytes
        return t
    hooks = tp.autograd.graph.saved_tensors_hooks if fw is tp else fw.autograd.graph.saved_tensors_hooks
    with hooks(pack, lambda t: t):
        y = run_forward(x)
    return y, sum(blocks.values())


# %% [markdown]
# ## From all or nothing to a policy per operation
#
# The region is a small MLP: three `Linear` layers with `tanh` between.
# A policy is a function `policy_fn(ctx, op, *args, **kwargs)`; `op` is
# the operation (here the package's Function class, `LinearFunction` or
# `Tanh`; in PyTorch an ATen operator such as `aten.addmm.default`),
# `args` its inputs, and `ctx.op_output` its output. It returns a
# `CheckpointPolicy`: `MUST_SAVE` or `PREFER_SAVE` keep the output,
# `MUST_RECOMPUTE` or `PREFER_RECOMPUTE` let backward compute it again
# (the `MUST_`/`PREFER_` difference matters only to `torch.compile`). A
# bool also works: `True` is `MUST_SAVE`, `False` is `PREFER_RECOMPUTE`.
# `create_selective_checkpoint_contexts(policy_fn)` turns the policy into
# a pair of contexts, and `checkpoint` takes a function that makes that
# pair as `context_fn`. Here a policy that keeps the products, and says
# when it is asked:

# %%
params = [(Variable(W.copy()), Variable(b.copy())) for W, b in WEIGHTS]


def mlp(x):
    for i, (W, b) in enumerate(params):
        x = F.linear(x, W, b)
        x = F.tanh(x) if i < LAYERS - 1 else x
    return x


def keep_products(ctx, op, *args, **kwargs):
    print(f"  asked: {op.__name__:15} is_recompute={ctx.is_recompute}  output {ctx.op_output.shape}")
    return CheckpointPolicy.MUST_SAVE if op is F.LinearFunction else CheckpointPolicy.PREFER_RECOMPUTE


context_fn = functools.partial(create_selective_checkpoint_contexts, keep_products)
print("forward:")
y = checkpoint(mlp, Variable(X.copy()), use_reentrant=False, context_fn=context_fn)
print("backward:")
with counting_recomputations() as ran_again:
    (y * y).sum().backward()
print("run again in backward:", ran_again)

# %% [markdown]
# The policy is asked once per operation, during the first run only
# (PyTorch 2.13 does the same: `is_recompute` is kept for older code and
# is always `False`). Backward then ran the two `tanh` again and none of
# the products. A list of operations is the short form of such a policy:
# `create_selective_checkpoint_contexts([F.LinearFunction])` keeps those
# (`MUST_SAVE`) and recomputes the rest.
#
# ## The policy and the context pair
#
# The pair shares one storage. The first context is open around the first
# run, the second around each recomputation; `checkpoint` enters them
# (for `use_reentrant=False` only, as PyTorch) by wrapping the function:

# %%
show_code(checkpoint_module._in_contexts, sac.create_selective_checkpoint_contexts, sac._as_policy)

# %% [markdown]
# An answer that is neither a policy nor a bool is refused here. PyTorch
# 2.13 takes `None` or `"save"` without a word and recomputes: a policy
# that forgot a `return` would silently save nothing.
#
# How does a context see each operation? PyTorch's pair are
# `TorchDispatchMode`s, which see every ATen call below autograd. In the
# package, while a context is open, selective checkpointing is an
# entry of the mode stack that `Function.__call__` asks (step 68 builds
# that stack), the last before the operation runs, below autograd's
# entries as in PyTorch, so every operation comes to `_dispatch`. The
# innermost context of the thread handles it and is set aside meanwhile,
# so the operation itself (`below`, the rest of the stack), and anything
# the policy runs, goes through as usual:

# %%
show_code(sac._dispatch, sac._run)

# %% [markdown]
# ## The storage: one queue per operation
#
# The first run numbers the calls of each operation, 0, 1, 2, ... and
# stores, under that number, either the output (with the version counter
# of its tensor) or a mark that says "recompute". The recomputation
# numbers its calls the same way and takes, for each, what is stored: a
# kept output comes back instead of running the forward, and is marked
# *consumed*; a "recompute" mark lets the operation run. Per operation it
# is a queue, first in, first out. A package Function's forward also saves
# tensors for its own backward, and sets a few attributes (shapes): the
# stand-in forward sets and saves the same, from the kept outputs and the
# recomputation's inputs.

# %%
show_code(sac._CachingMode.handle, sac._CachedMode.handle, sac._CachedMode.take)


# %% tags=["hide-input"]
def storage_picture():
    """The storage of the keep-the-products region: after the first run, and after the recomputation."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.6))
    rows = {"LinearFunction": 3, "Tanh": 2}
    for axis, stage in zip(axes, ("after the first run", "after the recomputation")):
        for r, (op, calls) in enumerate(rows.items()):
            axis.text(-0.2, -r, op, ha="right", va="center", fontsize=9)
            for i in range(calls):
                kept = op == "LinearFunction"
                label = ("output kept" if kept else "recompute") if stage.startswith("after the first") else \
                    ("consumed" if kept else "recompute")
                color = {"output kept": "C0", "recompute": "0.85", "consumed": "white"}[label]
                axis.add_patch(plt.Rectangle((i * 1.3, -r - 0.35), 1.1, 0.7, facecolor=color, edgecolor="0.3"))
                axis.text(i * 1.3 + 0.55, -r, f"[{i}]\n{label}", ha="center", va="center", fontsize=7.5,
                          color="white" if color == "C0" else "black")
        axis.annotate("", xy=(3.9, 0.55), xytext=(0, 0.55), arrowprops=dict(arrowstyle="->", color="0.4"))
        axis.text(1.95, 0.75, "calls in order: first in, first out", ha="center", fontsize=8, color="0.3")
        axis.set(xlim=(-2.2, 4.0), ylim=(-1.6, 1.0), title=stage)
        axis.axis("off")
    fig.tight_layout()
    plt.show()


storage_picture()

# %% [markdown]
# Being consumed is what makes a second backward through the region fail,
# and the version counter what makes a changed output fail: both below.
#
# ## The memory/compute frontier
#
# Four ways to run the region, measured: no checkpoint; plain
# checkpointing (`PREFER_RECOMPUTE` everywhere, step 43); keep the
# products; and keep everything (`PREFER_SAVE` everywhere). Memory is
# what is held for backward besides the region's input and output and the
# weights: without a checkpoint, the tensors the operations saved
# (counted by a pack hook); with one, the outputs the storage keeps.
# Compute is what runs again, counted on each Function's forward; its
# cost in floating-point operations is $2\,n\,d^2 + n\,d$ for a `Linear`
# (product and bias) and $n\,d$ for a `tanh`.

# %%
FLOPS = {"LinearFunction": 2 * N * D * D + N * D, "Tanh": N * D}
POLICIES = {"no checkpoint": None,
            "plain checkpoint": lambda *a, **k: CheckpointPolicy.PREFER_RECOMPUTE,
            "keep the products": [F.LinearFunction],
            "keep everything": lambda *a, **k: CheckpointPolicy.PREFER_SAVE}


def measure(policy):
    """(kept bytes, recomputations per Function, gradients) of one backward through the region."""
    x = Variable(X.copy())
    if policy is None:
        y, kept = saved_blocks(tp, mlp, params, x)
    else:
        pair = create_selective_checkpoint_contexts(policy)
        y = checkpoint(mlp, x, use_reentrant=False, context_fn=lambda: pair)
        kept = sac.kept_bytes(pair[0], besides=[y])  # y: held anyway, by whoever called
    for W, b in params:
        W.grad = b.grad = None
    with counting_recomputations() as counts:
        (y * y).sum().backward()
    return kept, counts, [p.grad.data.copy() for pair in params for p in pair]


ours = {name: measure(policy) for name, policy in POLICIES.items()}
for name, (kept, counts, _) in ours.items():
    flops = sum(FLOPS[op] * n for op, n in counts.items())
    print(f"{name:18} kept {kept // 1024:4d} KiB   run again {counts}   {flops / 1e6:.2f} MFLOP")

# %% [markdown]
# In this MLP every layer's backward needs one tensor anyway, the `tanh`
# output (the `tanh` and the next product both read it), so keeping the
# products costs as much memory as no checkpoint. Where an activation's
# backward keeps more (exercise 1), keeping only the products is the
# cheaper side. **Keeping everything is not the same as no checkpoint**,
# as PyTorch's documentation warns: it keeps every output, also the
# pre-activations that no backward formula needs (twice the memory
# here), and backward still runs the region's Python again, though every
# operation then takes its output from the storage.

# %% tags=["hide-cell"]
import torch  # noqa: E402
import torch.utils.checkpoint as tc  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

torch.set_num_threads(1)
TORCH_POLICIES = {"no checkpoint": None, "plain checkpoint": lambda *a, **k: tc.CheckpointPolicy.PREFER_RECOMPUTE,
                  "keep the products": [torch.ops.aten.addmm.default],
                  "keep everything": lambda *a, **k: tc.CheckpointPolicy.PREFER_SAVE}
TORCH_FLOPS = {"addmm": FLOPS["LinearFunction"], "tanh": FLOPS["Tanh"], "t": 0}


class TorchRecomputations(TorchDispatchMode):
    """Counts the ATen operations that run while `on` (set by the region during its second run)."""

    def __init__(self):
        super().__init__()
        self.on, self.counts = False, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and func is not torch.ops.aten.detach.default:
            name = func.overloadpacket.__name__
            self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def torch_measure(policy):
    tparams = [(torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)) for W, b in WEIGHTS]
    counter, runs = TorchRecomputations(), []

    def region(x):
        runs.append(1)
        counter.on = len(runs) > 1
        try:
            for i, (W, b) in enumerate(tparams):
                x = torch.nn.functional.linear(x, W, b)
                x = torch.tanh(x) if i < LAYERS - 1 else x
            return x
        finally:
            counter.on = False
    x = torch.tensor(X)
    if policy is None:
        y, kept = saved_blocks(torch, region, tparams, x)
    else:
        pair = tc.create_selective_checkpoint_contexts(policy)
        y = tc.checkpoint(region, x, use_reentrant=False, context_fn=lambda: pair)
        weights = {p.untyped_storage().data_ptr() for pair_ in tparams for p in pair_}
        blocks = {e.val.untyped_storage().data_ptr(): e.val.untyped_storage().nbytes()
                  for entries in pair[0].storage.values() for e in entries.values() if hasattr(e, "val")}
        kept = sum(n for ptr, n in blocks.items() if ptr not in weights | {y.untyped_storage().data_ptr()})
    with counter:
        (y * y).sum().backward()
    return kept, counter.counts, [p.grad.numpy() for pair in tparams for p in pair]


theirs = {name: torch_measure(policy) for name, policy in TORCH_POLICIES.items()}


# %% tags=["hide-input"]
def frontier_picture():
    fig, axis = plt.subplots(figsize=(7.5, 3.6))
    offsets = {"no checkpoint": (10, 8), "plain checkpoint": (-40, 12), "keep the products": (10, -14),
               "keep everything": (10, 6)}
    for (name, (kept, counts, _)), (kept_t, counts_t, _) in zip(ours.items(), theirs.values()):
        flops = sum(FLOPS[op] * n for op, n in counts.items()) / 1e6
        flops_t = sum(TORCH_FLOPS[op] * n for op, n in counts_t.items()) / 1e6
        axis.plot(flops, kept / 1024, "o", color="C0", markersize=9)
        axis.plot(flops_t, kept_t / 1024, "x", color="C3", markersize=10, mew=2)
        label = f"{name}\n({flops:.2f} MFLOP)" if name == "keep the products" else name
        axis.annotate(label, (flops, kept / 1024), textcoords="offset points", xytext=offsets[name], fontsize=9)
    axis.annotate("PyTorch: the last addmm\nnot run again (early stop)", (4.23, 0), textcoords="offset points",
                  xytext=(-60, 30), fontsize=8, color="C3", arrowprops=dict(arrowstyle="->", color="C3"))
    axis.plot([], [], "o", color="C0", label="tinypytorch")
    axis.plot([], [], "x", color="C3", mew=2, label="PyTorch")
    axis.set(xlabel="recomputed in backward (MFLOP)", ylabel="kept for backward (KiB)", xlim=(-0.3, 7.5),
             ylim=(-20, 300), title="The region's memory against its recomputation, per policy")
    axis.legend(loc="upper right")
    fig.tight_layout()
    plt.show()


frontier_picture()

# %% [markdown]
# The two frameworks keep the same bytes. Plain checkpointing differs by
# one product: PyTorch's autograd saves an operation's inputs *before* it
# runs, so the recomputation stops (step 43's early stop) once the last
# `addmm`'s inputs are saved, without running it; a package Function
# saves from inside its forward, so the last `LinearFunction` runs first.
#
# | the package's operation | PyTorch's (ATen) operations |
# |---|---|
# | `F.LinearFunction` (`F.linear`) | `aten.t.default` (the weight's transpose, a view) and `aten.addmm.default` (`aten.mm.default` without a bias) |
# | `F.MatMul` (`tp.matmul`) | `aten.mm.default` |
# | `F.Tanh`, `F.ReLU` | `aten.tanh.default`, `aten.relu.default` |
#
# An operation is named by its Function class here, and by its
# `OpOverload` in PyTorch: `torch.ops.aten.mm`, an overload *packet*, is
# refused in a list; `torch.ops.aten.mm.default` is one overload.
#
# ## Two errors
#
# A kept output is handed out once: a second backward through the region
# finds it consumed. And it is handed out as it was stored, so if it was
# changed in place in between, its version counter (step 36) has moved
# and the recomputation refuses it (`allow_cache_entry_mutation=True`
# turns that check off). Both, in both frameworks:

# %%
def scenario(fw, case):
    """A region keeping its matmul h, returning (h, tanh(h)); backward twice, or h changed in place."""
    W = fw.tensor(WEIGHTS[0][0][:4, :4].copy(), requires_grad=True)
    make, run = ((create_selective_checkpoint_contexts, checkpoint) if fw is tp else
                 (tc.create_selective_checkpoint_contexts, tc.checkpoint))
    keep = [F.MatMul if fw is tp else torch.ops.aten.mm.default]

    def region(x):
        h = fw.matmul(x, W)
        return h, fw.tanh(h)
    h, y = run(region, fw.tensor(X[:2, :4].copy()), use_reentrant=False,
               context_fn=functools.partial(make, keep))
    if case == "changed in place":
        h.mul_(2.0)
    y.sum().backward(retain_graph=True)
    y.sum().backward()


for case in ("backward twice", "changed in place"):
    for fw in (tp, torch):
        try:
            scenario(fw, case)
        except RuntimeError as error:
            print(f"{case}, {fw.__name__}:")
            print(textwrap.fill(f"RuntimeError: {error}", 90,
                                initial_indent="    ", subsequent_indent="      "))

# %% [markdown]
# `checkpoint(..., use_reentrant=True, context_fn=...)` is refused with
# PyTorch's message: the reentrant form (step 42) runs its region under
# `no_grad` and has no place for the contexts.
#
# ## Check against PyTorch
#
# For each policy, the gradients must equal those without a checkpoint
# (exactly: the same operations on the same arrays) and torch's with the
# same policy over `aten.addmm`; the kept bytes must equal torch's; what
# runs again must match per operation type (`Tanh` as `tanh`,
# `LinearFunction` as `addmm`, less the one product torch's early stop
# skips in plain checkpointing). The errors above must carry torch's
# messages.

# %%
def runs(counts):
    return ", ".join(f"{op} {n}" for op, n in counts.items() if n) or "nothing"


plain_grads = ours["no checkpoint"][2]
for name in POLICIES:
    (kept, counts, grads), (kept_t, counts_t, grads_t) = ours[name], theirs[name]
    assert all(np.array_equal(g, p) for g, p in zip(grads, plain_grads))
    error = max(np.abs(g - t).max() for g, t in zip(grads, grads_t))
    assert kept == kept_t and counts["Tanh"] == counts_t.get("tanh", 0)
    assert counts["LinearFunction"] == counts_t.get("addmm", 0) + (name == "plain checkpoint")
    print(f"{name}: gradients = no checkpoint's, vs torch's {below(error, 1e-12)}; "
          f"kept {kept // 1024} KiB = torch's")
    print(f"    run again: {runs(counts)}  (torch: {runs(counts_t)})")
messages = {}
for case in ("backward twice", "changed in place"):
    for fw in (tp, torch):
        try:
            scenario(fw, case)
        except RuntimeError as error:
            messages[case, fw.__name__] = str(error)
for case, expected in (("backward twice", sac.BACKWARD_TWICE), ("changed in place", sac.MUTATED)):
    assert messages[case, "tinypytorch"] == messages[case, "torch"] == expected, case
refused = []
for run, make, op in ((checkpoint, create_selective_checkpoint_contexts, F.MatMul),
                      (tc.checkpoint, tc.create_selective_checkpoint_contexts, torch.ops.aten.mm.default)):
    try:
        run(lambda x: x * 2, torch.tensor(X) if run is tc.checkpoint else Variable(X), use_reentrant=True,
            context_fn=functools.partial(make, [op]))
    except ValueError as error:
        refused.append(str(error))
assert len(refused) == 2 and refused[0] == refused[1]
print("backward twice, a kept output changed in place, context_fn with use_reentrant=True: "
      "torch's messages")
print("PyTorch check passed: torch's gradients, kept bytes, recomputations and errors")

# %% [markdown]
# ## Recap
#
# - `checkpoint(f, x, use_reentrant=False, context_fn=...)`: `context_fn()`
#   gives two contexts, one around the first run, one around each
#   recomputation.
# - `create_selective_checkpoint_contexts(policy_fn or a list of ops)`
#   makes that pair. `policy_fn(ctx, op, *args, **kwargs)` is asked once
#   per operation in the first run and returns a `CheckpointPolicy` (or a
#   bool); `*_SAVE` keeps the output, `*_RECOMPUTE` lets it run again.
# - The storage is a queue per operation: kept outputs come back in the
#   order they were made, each once (a second backward fails), and only
#   if unchanged since (the version counter).
# - Plain checkpointing is `PREFER_RECOMPUTE` everywhere; `PREFER_SAVE`
#   everywhere is not "no checkpoint": it also keeps outputs no backward
#   formula needs.
# - Keep what is expensive to compute and cheap to store (matrix
#   products); recompute the element-wise rest.
#
# ## Exercises
#
# **1. An activation that keeps more.** Replace `tanh` by SiLU,
# $x\,\sigma(x)$, written as `x * F.sigmoid(x)`: its backward keeps
# $x$ and $\sigma(x)$ besides the output the next layer keeps. Measure the
# kept bytes without a checkpoint and with the products kept, and check
# them against torch's with `x * torch.sigmoid(x)`.

# %% tags=["hide-cell"]
def silu_mlp(x):
    for i, (W, b) in enumerate(params):
        x = F.linear(x, W, b)
        x = x * F.sigmoid(x) if i < LAYERS - 1 else x
    return x


def silu_kept(policy):
    x = Variable(X.copy())
    if policy is None:
        return saved_blocks(tp, silu_mlp, params, x)[1]
    pair = create_selective_checkpoint_contexts(policy)
    y = checkpoint(silu_mlp, x, use_reentrant=False, context_fn=lambda: pair)
    return sac.kept_bytes(pair[0], besides=[y])


silu_none, silu_products = silu_kept(None), silu_kept([F.LinearFunction])
print(f"SiLU MLP: no checkpoint {silu_none // 1024} KiB, products kept {silu_products // 1024} KiB")

# %% [markdown]
# **2. A budget.** Write `budget_policy(limit)`: a policy that keeps the
# products in the order they come until `limit` bytes are kept, and
# recomputes everything else. With room for one product, which
# recomputations remain? The gradients must still be torch's.

# %% tags=["hide-cell"]
def budget_policy(limit):
    used = [0]

    def policy(ctx, op, *args, **kwargs):
        if op is F.LinearFunction and used[0] + ctx.op_output.data.nbytes <= limit:
            used[0] += ctx.op_output.data.nbytes
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


one_product = N * D * 8
budget_kept, budget_counts, budget_grads = measure(budget_policy(one_product))
print("room for one product: run again", budget_counts, "| gradients vs no checkpoint",
      below(max(np.abs(g - p).max() for g, p in zip(budget_grads, plain_grads)), 1e-15))
