# %% [markdown]
# # Step 74: Sharding: ZeRO's three stages and fully_shard
#
# Data parallelism ([step 73](step73.ipynb)) keeps N copies of everything:
# every process holds the whole model, its whole gradient and the whole
# optimizer state, and only the batch is split. With Adam in float32 a
# parameter costs 16 bytes on every process: 4 for its value, 4 for its
# gradient, 8 for Adam's two moments. **ZeRO** (Rajbhandari et al., 2020)
# keeps one copy spread over the N processes instead, and pays in
# communication. Stage 1 shards the optimizer state: each rank updates its
# slice of every parameter, then the slices are gathered. Stage 2 shards
# the gradients too: a reduce-scatter gives each rank the average of its
# slice only, where DDP's all-reduce gave everyone the whole. Stage 3
# shards the parameters: PyTorch's `fully_shard` gathers a layer's
# parameters just before the layer runs and frees them just after, for
# forward and again for backward. Each stage is a hook the book has
# already taught: a post-accumulate-grad hook and forward hooks on a module
# ([step 53](step53.ipynb)), a hook on a tensor's gradient
# ([step 34](step34.ipynb)). The check: after a few
# Adam steps on two processes, all three equal torch's `fully_shard` and
# one process on the whole batch.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
import tinypytorch.distributed as dist
from tinypytorch.distributed.fsdp import FSDPModule, FSDPParam, FSDPState, fully_shard
from tinypytorch.distributed.zero import ZeroDataParallel, optimizer_state_bytes
from tinypytorch.nn.parallel import DistributedDataParallel
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The accounting
#
# Call the number of parameters Ψ. ZeRO's paper counts bytes for
# mixed-precision training: 2 bytes a float16 parameter, 2 its gradient,
# and K = 12 bytes of optimizer state (a float32 copy of the parameter and
# Adam's two float32 moments), so 16Ψ on every rank without sharding,
# (4 + 12/N)Ψ with stage 1, (2 + 14/N)Ψ with stage 2 and 16Ψ/N with stage
# 3. The package trains in float32: the parameters are float32 already,
# the optimizer keeps no copy of them (K = 8), and the sums become:
#
# | | parameters | gradients | Adam's moments | bytes a parameter |
# |---|---|---|---|---|
# | plain DDP | 4 | 4 | 8 | 16 |
# | stage 1 | 4 | 4 | 8/N | 8 + 8/N |
# | stage 2 | 4 | 4/N | 8/N | 4 + 12/N |
# | stage 3 | 4/N | 4/N | 8/N | 16/N |
#
# Worked out for a few N (the formula, not a measurement):

# %%
SETUPS = ("plain DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def accounting(n):
    """ZeRO's accounting, float32 Adam: bytes a parameter of (parameters, gradients, optimizer state)."""
    return {"plain DDP": (4, 4, 8), "ZeRO-1": (4, 4, 8 / n), "ZeRO-2": (4, 4 / n, 8 / n),
            "ZeRO-3": (4 / n, 4 / n, 8 / n)}


print("bytes a parameter, each rank   N = 1   N = 2   N = 4   N = 8")
for setup in SETUPS:
    print(f"{setup:<28}" + "".join(f"{sum(accounting(n)[setup]):8g}" for n in (1, 2, 4, 8)))

# %% [markdown]
# Stage 1 never falls below the 8 bytes of the parameter and its
# gradient; stage 3 falls as 1/N without a floor: N ranks hold together
# exactly one copy, 16Ψ.
#
# ## Stage 1: each rank steps its slice
#
# `ZeroDataParallel(module, optimizer_class, stage=1)` wraps a module as
# DDP does: rank 0's weights are broadcast. It then cuts each parameter's
# flattened array into N equal pieces (the last padded with zeros), and
# builds this rank's optimizer over its own pieces only: Adam's moments
# exist for 1/N of every parameter. A post-accumulate-grad hook on every
# parameter, `_reduce`, runs as soon as backward has made its gradient.

# %%
show_code(ZeroDataParallel.__init__)

# %% [markdown]
# At stage 1 the hook all-reduces the whole gradient, as DDP does (one
# parameter at a time, no buckets), and gives the rank's piece its slice.
# At stage 2 it **reduce-scatters** instead: each rank receives the
# average of its own slice, half the bytes of an all-reduce (step 73: a
# ring all-reduce is a reduce-scatter followed by an all-gather), and the
# whole gradient is let go at once.

# %%
show_code(ZeroDataParallel._reduce)

# %% [markdown]
# After the optimizer steps the pieces, every parameter is stale on every
# rank but in the rank's own slice: an all-gather writes every rank's
# slice into every rank's parameter. At stage 2 that all-gather is the
# other half of the all-reduce the reduce-scatter replaced, so stage 2
# sends as many bytes as DDP; stage 1, which all-reduced, sends the
# all-gather on top (half again as many).

# %%
show_code(ZeroDataParallel.step)

# %% [markdown]
# ## Stage 3: fully_shard
#
# Stage 3 shards the parameters themselves. `fully_shard(layer)` replaces
# each parameter of the layer by a `ShardedParameter` holding this rank's
# rows (dim 0, cut as `torch.chunk` cuts: chunks of ⌈rows / N⌉ rows), and
# keeps beside it an empty `Parameter` for the whole array. It is applied
# to every layer, then to the root, and the optimizer is built over the
# shards. Four hooks do the rest. A forward pre-hook gathers the layer's
# whole parameters (`unshard`: an all-gather of every rank's rows) and
# puts them in the layer's slots; a forward hook puts the shards back and
# frees the whole arrays (`reshard`: an empty array in their place). The
# root's own parameters, if it has any, stay whole until its backward, as
# in PyTorch: they would be gathered again at once.

# %%
show_code(FSDPParam.unshard, FSDPParam.reshard, FSDPState.post_forward, step=74)

# %% [markdown]
# The graph saved the whole-parameter `Variable`, not its array, so
# backward needs the bytes back: the forward hook hangs `pre_backward` on
# the layer's outputs (`register_hook`), which runs just before the
# layer's backward and gathers again. A post-accumulate-grad hook on each
# whole parameter counts them in; when the layer's last gradient is made,
# `post_backward` reduce-scatters each gradient, averaged over the ranks,
# into the shard's `.grad`, and frees the whole parameters and gradients.

# %%
show_code(FSDPState.pre_backward, FSDPState.post_backward, step=74)

# %% [markdown]
# Here is the order in which this happens on rank 0, recorded by wrapping
# each layer's `unshard`, `reshard` and `post_backward` and by hooks that
# mark each layer's forward and backward, for a network of two `Linear`
# layers (64 → 256 → 64, float32) and one training step.

# %%
def mlp(dtype=tp.float32):
    tp.manual_seed(0)  # every rank alike: fully_shard, as torch's, does not broadcast
    return tp.nn.Sequential(tp.nn.Linear(64, 256, dtype=dtype), tp.nn.Tanh(),
                            tp.nn.Linear(256, 64, dtype=dtype))


def sharded(model):
    for layer in model:
        if isinstance(layer, tp.nn.Linear):
            fully_shard(layer)
    return fully_shard(model)


PSI = sum(p.data.size for p in mlp().parameters())


# %% tags=["hide-input"]
def watch(model, log):
    """Append (event, layer, bytes of whole parameters held) to `log` at each gather, free, reduce-scatter, and at each
    layer's forward and backward."""
    layers = {k: m for k, m in enumerate(model) if isinstance(m, FSDPModule)}

    def whole():
        return sum(p.unsharded.data.nbytes for m in layers.values() for p in m._fsdp_state.params)

    def wrapped(plain, k, name):
        def run(*args):
            before = whole()
            if name == "post_backward":
                log.append(("reduce-scatter", k, before))
            result = plain(*args)
            if name != "post_backward" and whole() != before:
                log.append(("all-gather" if whole() > before else "free", k, whole()))
            return result
        return run

    def on_output(output, k):  # a hook after fully_shard's: the layer's backward starts, its parameters gathered
        output.register_hook(lambda grad: log.append(("backward", k, whole())))

    for k, m in layers.items():
        for name in ("unshard", "reshard", "post_backward"):
            setattr(m._fsdp_state, name, wrapped(getattr(m._fsdp_state, name), k, name))
        m.register_forward_pre_hook(lambda module, args, k=k: log.append(("forward", k, whole())))  # after the gather
        m.register_forward_hook(lambda module, args, output, k=k: on_output(output, k))
    return layers


def sequence_picture(events, n_forward, layers):
    """Top: each layer's whole parameters held (a band from gather to free), every event named in its layer's row.
    Bottom: the bytes of whole parameters held after each event."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 4.6), sharex=True, height_ratios=(1.4, 1))
    rows = {k: i for i, k in enumerate(sorted(layers, reverse=True))}
    since = {}
    for x, (what, k, _) in enumerate(events):
        if what == "all-gather":
            since[k] = x
        if what == "free":
            start = since.pop(k)
            top.add_patch(plt.Rectangle((start - 0.45, rows[k] - 0.4), x - start + 0.9, 0.8, facecolor="C0",
                                        alpha=0.25, linewidth=0))
        top.text(x, rows[k], what.replace("-s", "-\ns"), rotation=90, ha="center", va="center", fontsize=8)
    backward = n_forward - 0.5
    for ax in (top, bottom):
        ax.axvline(backward, color="0.4", lw=1, ls="--")
    top.text(backward / 2, len(layers) - 0.3, "forward", ha="center", fontsize=10)
    top.text((backward + len(events)) / 2, len(layers) - 0.3, "backward", ha="center", fontsize=10)
    top.set_yticks(list(rows.values()), [f"layer {k}: {layers[k]}" for k in rows])
    top.set(ylim=(-0.6, len(layers) + 0.1))
    bottom.step(range(len(events)), [held / 1024 for _, _, held in events], where="post", color="C0")
    bottom.set_ylabel("whole parameters\nheld (KiB)")
    bottom.set_xticks(range(len(events)), [str(x + 1) for x in range(len(events))])
    bottom.set_xlabel("events on rank 0, in order")
    bottom.set(xlim=(-0.6, len(events) - 0.4), ylim=(0, None))
    for ax in (top, bottom):
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.tight_layout()
    plt.show()


# %%
def stage_3_sequence(rank):
    model, log = sharded(mlp()), []
    layers = {k: f"Linear({m.in_features}, {m.out_features})" for k, m in watch(model, log).items()}
    x = tp.tensor(np.random.default_rng(rank).standard_normal((2, 64)).astype(np.float32))
    loss = model(x).sum()
    n_forward = len(log)
    loss.backward()
    shards = sum(p.data.nbytes for p in model.parameters())
    return log, n_forward, layers, shards


events, n_forward, layers, shards = dist.spawn(stage_3_sequence, 2)[0]
sequence_picture(events, n_forward, layers)
print(f"this rank's shards: {shards:,} bytes; the whole model: {4 * PSI:,} bytes")
print(f"whole parameters held at most: {max(held for _, _, held in events):,} bytes (one layer's)")

# %% [markdown]
# Each layer's whole parameters exist only around its own computation:
# in forward, from its all-gather to its free; in backward, from the
# gather its output's hook starts to the reduce-scatter of its gradient.
# The last layer is freed after forward and gathered again at once for
# backward (`fully_shard(layer, reshard_after_forward=False)` keeps a
# layer's parameters from its forward to its backward, as in PyTorch). A
# rank holds its shards and at most one layer whole: what gathering costs
# is set by the widest layer, not by the depth. The price is on the wire:
# the parameters are all-gathered twice a step and the gradients
# reduce-scattered once. Each of these moves (N − 1)/N of the parameters'
# bytes through a rank, and an all-reduce twice that, so stage 3 moves
# 3/2 = 1.5 times the bytes of DDP's all-reduce.
#
# ## Measured: what each rank holds
#
# For each setup, one rank builds the float32 network (Ψ = 33,088
# parameters), takes one Adam step, and counts, between steps (gradients
# still there), the bytes of the arrays it keeps: parameters, gradients,
# Adam's moments. One run on one process, one on two.

# %%
def setups():
    ddp = DistributedDataParallel(mlp())
    yield "plain DDP", ddp, tp.optim.Adam(ddp.parameters())
    for stage in (1, 2):
        zero = ZeroDataParallel(mlp(), tp.optim.Adam, stage=stage)
        yield f"ZeRO-{stage}", zero, zero  # zero has step() and zero_grad(): the sharded optimizer's
    model = sharded(mlp())
    yield "ZeRO-3", model, tp.optim.Adam(model.parameters())  # over the shards


def bytes_held(model, optimizer):
    if isinstance(model, ZeroDataParallel):
        return model.bytes_held()
    params = list(model.parameters())
    return {"parameters": sum(p.data.nbytes for p in params),
            "gradients": sum(p.grad.data.nbytes for p in params if p.grad is not None),
            "optimizer state": optimizer_state_bytes(optimizer)}


def held(rank):
    x = tp.tensor(np.random.default_rng(rank).standard_normal((2, 64)).astype(np.float32))
    table = {}
    for setup, model, optimizer in setups():
        model(x).sum().backward()
        optimizer.step()
        table[setup] = bytes_held(model, optimizer)
    return table


measured = {1: dist.spawn(held, 1), 2: dist.spawn(held, 2)}
print(f"Ψ = {PSI:,}     measured: bytes a rank holds     ZeRO's accounting: bytes a parameter")
print(f"{'setup':<10}{'N = 1':>15}{'N = 2, each rank':>21}{'N = 1':>16}{'N = 2':>8}{'N = 4':>8}")
for setup in SETUPS:
    (one,), (two,) = ({sum(t[setup].values()) for t in measured[n]} for n in (1, 2))  # the ranks alike
    assert [one, two] == [sum(accounting(n)[setup]) * PSI for n in (1, 2)], setup
    print(f"{setup:<10}{f'{one:,} = {one / PSI:g}Ψ':>15}{f'{two:,} = {two / PSI:g}Ψ':>21}"
          + "".join(f"{sum(accounting(n)[setup]):>{w}g}" for n, w in ((1, 16), (2, 8), (4, 8))))


# %% tags=["hide-input"]
def holdings_picture(measured):
    """Stacked bars per rank (N = 1; N = 2, rank 0 and rank 1) for each setup, KiB; a black tick at ZeRO's
    accounting."""
    parts = ("parameters", "gradients", "optimizer state")
    fig, axes = plt.subplots(1, 4, figsize=(10, 3.6), sharey=True)
    bars = [(1, 0), (2, 0), (2, 1)]
    for ax, setup in zip(axes, SETUPS):
        for x, (n, rank) in enumerate(bars):
            bottom = 0
            for c, part in enumerate(parts):
                kib = measured[n][rank][setup][part] / 1024
                ax.bar(x, kib, bottom=bottom, color=f"C{c}", width=0.7, label=part if x == 0 else None)
                bottom += kib
            ax.plot([x - 0.42, x + 0.42], [sum(accounting(n)[setup]) * PSI / 1024] * 2, color="k", lw=1.5,
                    label="ZeRO's accounting" if x == 0 else None)
        ax.set_xticks(range(len(bars)), ["N = 1", "N = 2\nrank 0", "N = 2\nrank 1"], fontsize=8)
        ax.set_title(setup, fontsize=10)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0].set_ylabel("bytes a rank holds (KiB)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    plt.show()


holdings_picture(measured)

# %% [markdown]
# Every bar ends at ZeRO's accounting: the stages take away the optimizer
# state, then the gradients, then the parameters, each divided between
# the ranks. The four-process figures (10, 7 and 4 bytes a parameter
# for stages 1 to 3) are measured by `bench/memory_zero.py`. The
# package's stages 1 and 2 keep one thing more than the count above:
# their optimizer's pieces of the parameters are copies, 4/N bytes a
# parameter. The whole parameters stage 3 gathers for one layer live
# only while that layer computes (the picture above).
#
# ## Check against PyTorch
#
# A float64 network whose rows do not divide evenly (5, 3 and 1 rows: on
# two ranks 3 + 2, 2 + 1 and 1 + 0, an empty shard) trains for three Adam
# steps on two processes, each on its half of 8 samples: with the
# package's ZeRO-1, ZeRO-2 and `fully_shard`, and with torch's
# `fully_shard` on a twin model in the same processes. Each must equal one
# process on all 8 samples, the package's and torch's; each rank's shards
# must have torch's shapes.

# %% tags=["hide-cell"]
import torch  # noqa: E402
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402

X = np.random.default_rng(0).standard_normal((8, 4))
Y = np.random.default_rng(1).standard_normal((8, 1))
STEPS = 3


def small(fw):
    tp.manual_seed(0)
    ours = tp.nn.Sequential(tp.nn.Linear(4, 5, dtype=tp.float64), tp.nn.Tanh(), tp.nn.Linear(5, 3, dtype=tp.float64),
                            tp.nn.Tanh(), tp.nn.Linear(3, 1, dtype=tp.float64))
    if fw is tp:
        return ours
    twin = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3), torch.nn.Tanh(),
                               torch.nn.Linear(3, 1)).double()
    with torch.no_grad():
        for p_t, p in zip(twin.parameters(), ours.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    return twin


def train(model, optimizer, fw, rows):
    for _ in range(STEPS):
        ((model(fw.tensor(X[rows])) - fw.tensor(Y[rows])) ** 2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def whole(params):
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().numpy().copy() for p in params]


def both_frameworks(rank):
    half, out = slice(4 * rank, 4 * rank + 4), {}
    for stage in (1, 2):
        zero = ZeroDataParallel(small(tp), tp.optim.Adam, stage=stage, lr=0.05)
        train(zero, zero, tp, half)
        out[f"ZeRO-{stage}"] = whole(zero.module.parameters())
    for fw, shard in ((tp, fully_shard), (torch, torch_fully_shard)):
        model = small(fw)
        for layer in model[::2]:
            shard(layer)
        shard(model)
        out["shapes", fw.__name__] = [tuple(p.to_local().shape) for p in model.parameters()]
        train(model, fw.optim.Adam(model.parameters(), lr=0.05), fw, half)
        out[f"fully_shard ({fw.__name__})"] = whole(model.parameters())
    return out


def equal(a, b):
    return all(np.allclose(p, q, rtol=1e-12, atol=1e-14) for p, q in zip(a, b, strict=True))


# %%
runs = dist.spawn(both_frameworks, 2)
alone = {}
for fw in (tp, torch):
    model = small(fw)
    train(model, fw.optim.Adam(model.parameters(), lr=0.05), fw, slice(0, 8))
    alone[fw.__name__] = whole(model.parameters())
assert equal(alone["tinypytorch"], alone["torch"])
assert not equal(alone["torch"], whole(small(tp).parameters()))  # the steps moved the parameters
for rank, out in enumerate(runs):
    assert out["shapes", "tinypytorch"] == out["shapes", "torch"], f"rank {rank}: shards unlike torch's"
    print(f"rank {rank}: shards {out['shapes', 'torch']}, as torch's")
    for name in ("ZeRO-1", "ZeRO-2", "fully_shard (tinypytorch)", "fully_shard (torch)"):
        assert equal(out[name], alone["torch"]), f"rank {rank}: {name} differs from one process"
print(f"{STEPS} Adam steps on 2 ranks: ZeRO-1, ZeRO-2 and fully_shard equal torch's fully_shard,")
print("and one process on the whole batch (tinypytorch's and torch's), to 1e-12")
print("PyTorch check passed: the three stages train as torch's fully_shard and as one process")

# %% [markdown]
# ## Recap
#
# - Data parallelism holds 16 bytes a float32 Adam parameter on every
#   rank. ZeRO divides them between the ranks: stage 1 the optimizer state
#   (8 + 8/N), stage 2 the gradients too (4 + 12/N), stage 3 the
#   parameters too (16/N). The measured bytes per rank are the accounting.
# - Stage 1: each rank's optimizer steps its slice of every parameter;
#   an all-gather puts the slices together. Stage 2: a post-accumulate-grad
#   hook reduce-scatters each gradient, so a rank receives only its
#   slice's average: with the all-gather, DDP's bytes.
# - Stage 3, `fully_shard`: a forward pre-hook all-gathers a layer's
#   parameters, a forward hook frees them, a hook on the layer's output
#   gathers them again for its backward, and a post-accumulate-grad hook
#   reduce-scatters the gradients and frees them. A rank holds its shards
#   and at most one layer whole, for half again DDP's bytes on the wire.
# - Sharded or not, the ranks train as one process on the whole batch,
#   and as torch's `fully_shard`.
#
# ## Exercises
#
# **1. Eight processes.** Write `bytes_per_rank(psi, n)`: the bytes one
# rank holds in each setup, for a float32 model of `psi` parameters
# trained with Adam on `n` ranks (rows dividing evenly). What does the
# page's network need per rank at N = 8, in each setup?

# %% tags=["hide-cell"]
def bytes_per_rank(psi, n):
    return {"plain DDP": 16 * psi, "ZeRO-1": (8 + 8 / n) * psi, "ZeRO-2": (4 + 12 / n) * psi,
            "ZeRO-3": 16 * psi / n}


print({setup: f"{b:,.0f}" for setup, b in bytes_per_rank(PSI, 8).items()})

# %% [markdown]
# **2. Reduce-scatter by hand.** On each rank, reduce-scatter a tensor
# with an all-reduce and a slice: `reduce_scatter_by_hand(tensor)` returns
# this rank's piece of the sum. Check it against
# `torch.distributed.reduce_scatter_single` (the new name of
# `reduce_scatter_tensor`) on the same tensors. How many
# bytes does each rank send, compared with a reduce-scatter's (N - 1)/N × B?

# %% tags=["hide-cell"]
def reduce_scatter_by_hand(tensor):
    summed = tp.tensor(tensor.numpy().copy())
    dist.all_reduce(summed)  # 2(N - 1)/N × B a rank: twice a reduce-scatter's bytes
    k = len(summed) // dist.get_world_size()
    return summed[dist.get_rank() * k:(dist.get_rank() + 1) * k]


def by_hand_and_torch(rank):
    mine = np.random.default_rng(rank).standard_normal(6)
    theirs = torch.zeros(3, dtype=torch.float64)
    torch.distributed.reduce_scatter_single(theirs, torch.from_numpy(mine))
    return reduce_scatter_by_hand(tp.tensor(mine)).numpy(), theirs.numpy()


print(all(np.allclose(a, b, rtol=1e-15, atol=0) for a, b in dist.spawn(by_hand_and_torch, 2)))

# %% [markdown]
# **3. Where the rows go.** Write `rows_of(rows, n, rank)`: the range of
# rows (start, stop) that `fully_shard` gives rank `rank` of `n` for a
# parameter of `rows` rows. Check it against `torch.chunk` (which may
# return fewer than `n` chunks: the ranks after them hold none) and
# against the shards of the check above. How many bytes of padding does
# the all-gather of a (5, 4) float32 weight move on 4 ranks?

# %% tags=["hide-cell"]
def rows_of(rows, n, rank):
    chunk = -(-rows // n)  # ceil(rows / n) rows a rank, the last ones fewer or none
    return min(rank * chunk, rows), min((rank + 1) * chunk, rows)


chunks = torch.arange(5).chunk(4)
print([rows_of(5, 4, r) for r in range(4)], [(int(c[0]), int(c[-1]) + 1) for c in chunks])
print("padding:", (4 * -(-5 // 4) - 5) * 4 * 4, "bytes")  # (4 ranks × 2 rows - 5 rows) × 4 floats × 4 bytes
