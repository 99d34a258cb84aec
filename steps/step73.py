# %% [markdown]
# # Step 73: Data parallel from hooks
#
# One process trains on a batch by computing the gradient of the mean loss
# over all its samples. Two processes can share that work: each takes half
# of the batch, runs forward and backward on it, and the two gradients are
# averaged. The mean of two half-batch means is the whole batch's mean, so
# after the averaging every process holds the gradient one process would
# have computed on the whole batch, and their optimizers, stepping alike,
# keep identical models. PyTorch's `DistributedDataParallel` (DDP) does the
# averaging **during** backward: a post-accumulate-grad hook on every
# parameter (step 53) marks its gradient ready, gradients travel in
# **buckets**, and a bucket's all-reduce starts as soon as its last
# gradient is ready, while backward computes the layers below. This step
# opens stage 7, on training with several processes: the bytes travel
# through `torch.distributed` (gloo), and everything else is the package's
# own hooks. The check: parameters after training on two processes equal
# one process on the whole batch, and torch's own DDP on a twin model.

# %%
import sys
import time

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
import tinypytorch.distributed as dist
from tinypytorch.nn.parallel import DistributedDataParallel
from tinypytorch.nn.parallel.reducer import Bucket, Reducer
from tinypytorch.utils.bucket_timeline import on_buckets
from tinypytorch.utils.data.distributed import DistributedSampler
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Processes and collectives
#
# `dist.spawn(fn, 2)` starts two processes on this machine, joins them in
# a **process group** (gloo, on the loopback interface) and runs
# `fn(rank)` in each: `rank` is 0 or 1, the process's number in the group.
# The processes are forked, so each starts as a copy of this one, and a
# function defined on this page runs in them. `spawn` returns what `fn`
# returned on each rank. Inside, every rank calls the same **collective**,
# and each gets its share of the result:

# %%
def collectives(rank):
    def mine():  # rank 0 holds 1 2 3 4, rank 1 holds 2 4 6 8
        return tp.tensor([1.0, 2.0, 3.0, 4.0]) * (rank + 1)

    summed, copied, piece = mine(), mine(), tp.zeros(2)
    gathered = [tp.zeros(4), tp.zeros(4)]
    dist.all_reduce(summed)                    # in place: the sum of every rank's
    dist.broadcast(copied, src=0)              # in place: rank 0's
    dist.all_gather(gathered, mine())          # every rank's, one after another
    dist.reduce_scatter_tensor(piece, mine())  # the sum, cut in two: rank r keeps piece r
    return {"holds": mine(), "all_reduce": summed, "broadcast": copied,
            "all_gather": tp.cat(gathered), "reduce_scatter": piece}


def numbers(t):
    return " ".join(f"{v:g}" for v in t.numpy())


on_ranks = dist.spawn(collectives, 2)
for name in on_ranks[0]:
    line = " | ".join(f"rank {r}: {numbers(results[name]):<15}" for r, results in enumerate(on_ranks))
    print(f"{name:>14}: {line}".rstrip())

# %% [markdown]
# The package moves no bytes itself: `all_reduce` lends the tensor's array
# to `torch.distributed` through `torch.from_numpy`, the same memory seen
# as a torch tensor, so the sum lands in the package tensor in place (its
# version counter moves, as for any in-place change). The first line checks
# that every rank called the same collective on the same shapes, so that a
# mismatch raises a clear error instead of hanging.

# %%
show_code(dist.all_reduce)


# %% tags=["hide-input"]
def collectives_picture():
    """What each collective moves, 4 ranks: before and after, and the bytes a rank sends (ring algorithms)."""
    n = 4
    fig, axes = plt.subplots(1, 4, figsize=(10, 3.4))
    cases = [("all_reduce", "sends 2(N-1)/N × B"), ("broadcast", "sends about B"),
             ("all_gather", "sends (N-1)/N × B"), ("reduce_scatter", "sends (N-1)/N × B")]
    for ax, (name, cost) in zip(axes, cases):
        for r in range(n):
            y = n - 1 - r
            ax.text(-0.15, y + 0.4, f"rank {r}", ha="right", va="center", fontsize=8)
            if name == "all_gather":  # before: a quarter each; after: every quarter
                ax.add_patch(plt.Rectangle((r / n, y), 1 / n, 0.8, facecolor=f"C{r}", alpha=0.6))
                for k in range(n):
                    ax.add_patch(plt.Rectangle((1.5 + k / n, y), 1 / n, 0.8, facecolor=f"C{k}", alpha=0.6))
            else:
                ax.add_patch(plt.Rectangle((0, y), 1, 0.8, facecolor=f"C{r}", alpha=0.6))
            if name == "all_reduce":  # the sum of all four, everywhere
                for k in range(n):
                    ax.add_patch(plt.Rectangle((1.5, y + k * 0.2), 1, 0.2, facecolor=f"C{k}", alpha=0.6))
            elif name == "broadcast":
                ax.add_patch(plt.Rectangle((1.5, y), 1, 0.8, facecolor="C0", alpha=0.6))
            elif name == "reduce_scatter":  # the sum of quarter r, on rank r
                for k in range(n):
                    ax.add_patch(plt.Rectangle((1.5 + r / n, y + k * 0.2), 1 / n, 0.2, facecolor=f"C{k}",
                                               alpha=0.6))
        ax.text(1.25, n + 0.35, name, ha="center", fontsize=10)
        ax.text(0.5, -0.45, "before", ha="center", fontsize=8, color="0.3")
        ax.text(2.0, -0.45, "after", ha="center", fontsize=8, color="0.3")
        ax.text(1.25, -1.1, cost, ha="center", fontsize=8)
        ax.set(xlim=(-0.9, 2.6), ylim=(-1.4, n + 0.8))
        ax.axis("off")
    fig.tight_layout()
    plt.show()


collectives_picture()

# %% [markdown]
# The picture shows four ranks, each with a tensor of B bytes (for
# `all_gather`, B is the result's size). Colours are the ranks' data;
# stacked colours are a sum. The costs are those of the **ring**
# algorithms gloo uses for large tensors: the ranks sit in a ring, each
# tensor is cut into N pieces, and every step each rank sends one piece to
# its neighbour. `reduce_scatter` takes N - 1 steps (each rank adds what
# it receives to its own piece), `all_gather` N - 1 more (each passes the
# finished pieces on), and `all_reduce` is the two in turn: every rank
# sends 2(N-1)/N × B bytes, whatever the number of ranks:

# %%
for n in (2, 4, 8, 64):
    print(f"N = {n:2d}: each rank sends {2 * (n - 1) / n:.2f} × B")

# %% [markdown]
# So the time of an all-reduce hardly grows with the number of
# processes: what costs is B, the bytes of the gradients, and the latency
# of each of the 2(N - 1) steps.
#
# ## DistributedDataParallel: a hook on every parameter
#
# `DistributedDataParallel(model)` wraps the model. Its constructor
# broadcasts rank 0's parameters and buffers, so every rank starts from the
# same model whatever each rank's initialisation drew; cuts the parameters
# into buckets; and registers the reducer's `mark_ready` as a
# post-accumulate-grad hook on every parameter.

# %%
show_code(DistributedDataParallel.__init__, DistributedDataParallel._broadcast_states)

# %% [markdown]
# A backward pass makes the gradients of the last layer first, so the
# buckets are filled in reverse order of the parameters, each closed once
# it holds at least `bucket_cap_mb` (25 MiB unless given). When
# `mark_ready` has counted every gradient of a bucket, the bucket is
# flattened into one array, divided by the number of ranks, and its
# all-reduce **starts** (`async_op=True`): the call returns at once, and
# backward goes on with the layers below while the bytes travel. Buckets
# start in order, bucket 0 first, since every rank must issue the same
# collectives in the same order.

# %%
show_code(Reducer.mark_ready, Reducer.start_ready_buckets, Bucket.start)

# %% [markdown]
# The first `mark_ready` of a pass queues `finalize` to run when backward
# ends (`queue_callback`, a callback of the engine's pass). It waits for
# every bucket's sum and writes the averages back into `.grad`. When
# `loss.backward()` returns, every rank holds the average gradient.

# %%
show_code(Reducer.finalize, Bucket.finish)

# %% [markdown]
# ## Training on two processes
#
# A small network, float64, trained with SGD and momentum on 16 samples.
# Each rank builds its model from a different seed (the constructor's
# broadcast makes them equal), takes its share of the samples from
# `DistributedSampler` (rank r keeps positions r, r + 2, r + 4, ...), and
# trains on those 8. A bucket cap of 512 bytes cuts the model into one
# bucket per layer. Then one process trains the same model on all 16.

# %%
X = np.random.default_rng(0).standard_normal((16, 8))
Y = np.random.default_rng(1).standard_normal((16, 4))
STEPS = 5


def make_model(seed):
    tp.manual_seed(seed)
    return tp.nn.Sequential(tp.nn.Linear(8, 16, dtype=tp.float64), tp.nn.Tanh(),
                            tp.nn.Linear(16, 16, dtype=tp.float64), tp.nn.Tanh(),
                            tp.nn.Linear(16, 4, dtype=tp.float64))


def train(model, x, y, steps=STEPS):
    opt = tp.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        loss = ((model(tp.tensor(x)) - tp.tensor(y)) ** 2).mean()
        opt.zero_grad()
        loss.backward()  # with DDP: every rank's .grad is the average when it returns
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def data_parallel(rank):
    model = make_model(seed=rank)
    drawn = [p.detach().numpy().copy() for p in model.parameters()]
    ddp = DistributedDataParallel(model, bucket_cap_mb=512 / 2**20)
    share = list(DistributedSampler(range(len(X)), shuffle=False))
    buckets = [[name for name, p in model.named_parameters() if any(p is q for q in b.params)]
               for b in ddp.reducer.buckets]
    return {"drawn": drawn, "share": share, "buckets": buckets, "trained": train(ddp, X[share], Y[share])}


ranks = dist.spawn(data_parallel, 2)
alone = train(make_model(seed=0), X, Y)
print("buckets:", ranks[0]["buckets"])
for rank, run in enumerate(ranks):
    print(f"rank {rank}: samples {run['share']}")
print("the ranks drew different initial weights:",
      not np.array_equal(ranks[0]["drawn"][0], ranks[1]["drawn"][0]))
same = all(np.allclose(a, b, rtol=1e-12, atol=1e-14)
           for run in ranks for a, b in zip(run["trained"], alone))
print(f"after {STEPS} steps, both ranks' parameters equal one process's on all 16 samples:", same)

# %% [markdown]
# The two ranks agree with the single process to rounding (the sums run in
# another order): what the ranks computed apart, the average joined.
#
# ## Backward and the buckets, overlapping
#
# How much of the communication hides behind backward? A wider network
# (four 256 × 256 layers, float32, 64 samples per rank, a bucket per
# layer) runs a few training steps on two ranks. Hooks record when each
# layer's gradient is ready, when each bucket's all-reduce starts, and when
# torch reports it complete, in time since backward began.

# %% tags=["hide-input"]
def record(ddp, log, clock=time.perf_counter):
    """Each bucket's launch and completion (its all-reduce's torch future) into `log`."""
    on_buckets(ddp, lambda k: log.append(("launch", k, clock())), lambda k: log.append(("done", k, clock())))


def wide_model():
    tp.manual_seed(0)
    layers = [tp.nn.Linear(256, 256) for _ in range(4)]
    return tp.nn.Sequential(layers[0], tp.nn.Tanh(), layers[1], tp.nn.Tanh(), layers[2], tp.nn.Tanh(), layers[3])


def timeline(rank, steps=3, clock=time.perf_counter):
    """The last of `steps` training steps, timed: [(what, which, seconds since backward began)], backward's duration,
    and the layers of each bucket."""
    sys.setswitchinterval(1e-4)  # a completion callback waits less for the interpreter
    model, log = wide_model(), []
    for name, p in model.named_parameters():  # registered before DDP's hooks: they run first
        p.register_post_accumulate_grad_hook(lambda p, name=name: log.append(("grad", name, clock())))
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.25)
    record(ddp, log, clock)
    x = tp.tensor(np.random.default_rng(rank).standard_normal((64, 256)).astype(np.float32))
    opt = tp.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = (ddp(x) ** 2).mean()
        opt.zero_grad()
        log.clear()
        began = clock()
        loss.backward()
        ended = clock()
        opt.step()
    layers = [sorted({name.split(".")[0] for name, p in model.named_parameters() if any(p is q for q in b.params)})
              for b in ddp.reducer.buckets]
    return [(what, which, t - began) for what, which, t in log], ended - began, layers


def timeline_picture(events, backward, layers):
    """Backward's gradients as ticks on one row (coloured as their bucket), each bucket's all-reduce as a bar from
    its launch to its completion."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    bucket_of = {layer: k for k, bucket in enumerate(layers) for layer in bucket}
    for what, name, t in events:
        if what == "grad":
            ax.plot([t, t], [-0.35, 0.35], color=f"C{bucket_of[name.split('.')[0]]}", lw=2)
    launches = {which: t for what, which, t in events if what == "launch"}
    dones = {which: t for what, which, t in events if what == "done"}
    for k in sorted(launches):
        ax.barh(-(k + 1.3), dones[k] - launches[k], left=launches[k], height=0.6, color=f"C{k}", alpha=0.7)
    ax.axvline(backward, color="0.2", lw=1, ls="--")
    ax.text(backward, 0.9, "backward returns ", ha="right", fontsize=8, color="0.2")
    ax.axvline(0, color="0.5", lw=1)
    ax.set_yticks([0] + [-(k + 1.3) for k in sorted(launches)],
                  ["gradients ready"] + [f"bucket {k}: layer {', '.join(layers[k])}" for k in sorted(launches)])
    ax.set_xticks([])
    ax.set_xlabel("time since backward began (measured on this machine) →")
    ax.set(xlim=(-0.03 * backward, 1.08 * backward), ylim=(-(len(launches) + 1), 1.5))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    plt.show()


# %%
events, backward, layers = dist.spawn(timeline, 2)[0]
timeline_picture(events, backward, layers)
order = [which for what, which, _ in events if what == "launch"]
last_grad = max(t for what, _, t in events if what == "grad")
print("buckets started in order:", order)
print("buckets started before backward's last gradient:",
      [k for what, k, t in events if what == "launch" and t < last_grad])

# %% [markdown]
# Each bucket starts the moment its layer's gradients are ready, and the
# layers below are computed while it travels: only the last bucket (the
# first layer) has no backward left to hide behind. `loss.backward()`
# returns after `finalize` has waited for them all. The times vary from
# machine to machine and run to run; bench/distributed_overlap.py measures
# them, and how long the same step takes when the gradients are averaged
# only after backward (bench/results/distributed_overlap.md).
#
# ## no_sync: accumulate, then average once
#
# Gradient accumulation (step 56) sums the gradients of several
# micro-batches before one optimizer step. Under DDP, averaging after every
# micro-batch would send the bytes k times for one step. `no_sync()` turns
# the averaging off: backward passes inside it only accumulate into each
# rank's own `.grad`. The first backward outside averages the sum. Two
# micro-batches of 4 samples per rank, each loss halved:

# %%
def accumulated(rank):
    model = make_model(seed=0)
    ddp = DistributedDataParallel(model, bucket_cap_mb=512 / 2**20)
    launched = []
    for bucket in ddp.reducer.buckets:
        bucket.start = (lambda plain: lambda *a: (launched.append(1), plain(*a)))(bucket.start)
    share = list(DistributedSampler(range(len(X)), shuffle=False))
    first, second = share[:4], share[4:]
    with ddp.no_sync():
        (((ddp(tp.tensor(X[first])) - tp.tensor(Y[first])) ** 2).mean() / 2).backward()
    in_no_sync = len(launched)
    (((ddp(tp.tensor(X[second])) - tp.tensor(Y[second])) ** 2).mean() / 2).backward()
    return in_no_sync, len(launched) - in_no_sync, [p.grad.numpy() for p in model.parameters()]


one = make_model(seed=0)
((one(tp.tensor(X)) - tp.tensor(Y)) ** 2).mean().backward()
for rank, (inside, after, grads) in enumerate(dist.spawn(accumulated, 2)):
    print(f"rank {rank}: all-reduces started inside no_sync {inside}, after it {after}")
    print("        gradients equal one backward on all 16 samples:",
          all(np.allclose(g, p.grad.numpy(), rtol=1e-12, atol=1e-14)
              for g, p in zip(grads, one.parameters())))

# %% [markdown]
# ## Check against PyTorch
#
# In the same two processes, torch's `DistributedDataParallel` trains a twin
# of the package's model (the same initial weights, copied) on the same
# shares, with the same optimizer; each rank's parameters after the steps
# must equal the package's, which must equal one process on all 16 samples.

# %% tags=["hide-cell"]
import torch  # noqa: E402


def torch_twin(model):
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4)).double()
    with torch.no_grad():
        for p_t, p in zip(twin.parameters(), model.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.detach().numpy().copy()))
    return twin


def train_torch(model, x, y, steps=STEPS):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        loss = ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def both_frameworks(rank):
    """The package's DDP and torch's, each from rank-dependent weights (DDP broadcasts rank 0's), on this rank's share."""
    share = list(DistributedSampler(range(len(X)), shuffle=False))
    model = make_model(seed=rank)
    theirs = torch.nn.parallel.DistributedDataParallel(torch_twin(model), bucket_cap_mb=512 / 2**20)
    ours = DistributedDataParallel(model, bucket_cap_mb=512 / 2**20)
    return train(ours, X[share], Y[share]), train_torch(theirs, X[share], Y[share])


def equal(a, b):
    return all(np.allclose(p, q, rtol=1e-12, atol=1e-14) for p, q in zip(a, b, strict=True))


# %%
runs = dist.spawn(both_frameworks, 2)
alone_torch = train_torch(torch_twin(make_model(seed=0)), X, Y)
assert all(equal(ours, theirs) for ours, theirs in runs), "the package's DDP differs from torch's"
assert all(equal(ours, alone) for ours, _ in runs), "DDP differs from one process"
assert equal(alone, alone_torch), "one process differs from torch's"
print(f"2 ranks, {STEPS} SGD steps: each rank's parameters equal torch's DDP on the twin model")
print("both equal one process on the whole batch, in tinypytorch and in torch")
print("PyTorch check passed: DistributedDataParallel averages gradients as torch's does")

# %% [markdown]
# ## Recap
#
# - Collectives move tensors between processes: `all_reduce` (the sum, on
#   every rank), `broadcast`, `all_gather`, `reduce_scatter`. The ring
#   all-reduce sends 2(N-1)/N × B bytes per rank, about 2B for any N.
# - `DistributedDataParallel` broadcasts rank 0's model, then hooks
#   `mark_ready` after every parameter's gradient accumulation. Parameters
#   are bucketed in reverse order; a full bucket starts its all-reduce
#   asynchronously while backward computes the layers below, and a
#   callback at the end of backward waits and writes the averages into
#   `.grad`.
# - With each rank on an equal share of the batch, the average of the
#   ranks' gradients is the whole batch's: training on two processes equals
#   training on one, and torch's DDP.
# - `no_sync()` accumulates locally; the first backward after it averages
#   the sum, once.
#
# ## Exercises
#
# **1. The ring, counted.** Write `ring_all_reduce(arrays)`: N equal-length
# arrays (one per rank, length divisible by N), summed by the ring
# algorithm (N - 1 steps of reduce-scatter, N - 1 of all-gather, each rank
# sending one piece to rank r + 1 per step). Return each rank's result and
# the bytes each rank sent; check the results against `torch.stack(...).sum(0)`
# and the bytes against 2(N-1)/N × B.

# %% tags=["hide-cell"]
def ring_all_reduce(arrays):
    n = len(arrays)
    pieces = [np.array_split(a.copy(), n) for a in arrays]  # pieces[r][c]: rank r's copy of piece c
    sent = [0] * n
    for step in range(n - 1):  # reduce-scatter: rank r sends piece (r - step) to r + 1, which adds it
        outgoing = [(r, (r - step) % n, pieces[r][(r - step) % n].copy()) for r in range(n)]
        for r, c, piece in outgoing:
            pieces[(r + 1) % n][c] += piece
            sent[r] += piece.nbytes
    for step in range(n - 1):  # all-gather: rank r passes on its finished piece (r + 1 - step)
        outgoing = [(r, (r + 1 - step) % n, pieces[r][(r + 1 - step) % n].copy()) for r in range(n)]
        for r, c, piece in outgoing:
            pieces[(r + 1) % n][c] = piece
            sent[r] += piece.nbytes
    return [np.concatenate(p) for p in pieces], sent


arrays = [np.random.default_rng(r).standard_normal(12) for r in range(4)]
results, sent = ring_all_reduce(arrays)
total = torch.stack([torch.from_numpy(a) for a in arrays]).sum(0).numpy()
print(all(np.allclose(r, total, rtol=1e-12, atol=1e-12) for r in results),
      sent == [2 * 3 * arrays[0].nbytes // 4] * 4)

# %% [markdown]
# **2. How many buckets?** Write `bucket_count(sizes, cap_bytes)`: given
# the parameters' sizes in bytes in the model's order, the number of
# buckets DDP's rule makes (reverse order; a bucket closes once it holds
# at least `cap_bytes`). Check it, for a few caps, against the buckets
# torch's `DistributedDataParallel` hands to a communication hook
# (`register_comm_hook`) from its second iteration on, once it has rebuilt
# them in the order the gradients arrived.

# %% tags=["hide-cell"]
def bucket_count(sizes, cap_bytes):
    count, filled = 0, 0
    for size in reversed(sizes):
        filled += size
        if filled >= cap_bytes:
            count, filled = count + 1, 0
    return count + (filled > 0)


model_sizes = [p.data.nbytes for p in make_model(0).parameters()]
print([bucket_count(model_sizes, cap) for cap in (100, 512, 2048, 2**20)])

# %% [markdown]
# **3. Each rank's share.** Without shuffling, `DistributedSampler` pads
# the dataset by repeating its start until N divides its length, then gives
# rank r the positions r, r + N, r + 2N, ... Write `share(n, world, rank)`
# and check it against `torch.utils.data.distributed.DistributedSampler`
# for datasets whose length N does not divide.

# %% tags=["hide-cell"]
def share(n, world, rank):
    total = -(-n // world) * world  # n rounded up to a multiple of world
    order = list(range(n)) * (total // n + 1)
    return order[:total][rank::world]


print(share(5, 2, 1), list(torch.utils.data.distributed.DistributedSampler(range(5), 2, 1, shuffle=False)))
