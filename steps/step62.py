# %% [markdown]
# # Step 62: Dynamic loss scaling (GradScaler)
#
# float16 stores numbers with 5 exponent bits: its smallest number above
# zero is $2^{-24} \approx 6 \times 10^{-8}$, anything at or below half of
# it becomes zero, and small gradients flush to zero. The
# cure is old arithmetic: multiply the loss by a large scale $S$; every
# gradient is then $S$ times larger (the chain rule is linear), clear of
# the underflow range, and is divided by $S$ again before the optimizer
# uses it. Too large an $S$ overflows to `inf` instead, so PyTorch's
# `torch.amp.GradScaler` adapts $S$ while training: it skips a step whose
# gradients hold an inf or NaN and halves $S$, and doubles $S$ after a run
# of clean steps. This step builds `tinypytorch.amp.GradScaler`, checks
# its trajectory against PyTorch's, and trains a classifier three ways:
# float32, plain float16, and mixed precision with the scaler.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

from tinypytorch import Variable, datasets, nn, optim
from tinypytorch.amp import GradScaler
from tinypytorch.nn import functional as F
from tinypytorch.nn.utils import clip_grad_norm_
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## Why scale
#
# A linear model's gradients, computed in float16 as a float16 network would
# compute them, against the same gradients computed in float64. Backward
# first computes the gradient at the output, one entry per sample and
# output, then the matrix product sums it over the batch into the weights'
# gradients. Nearly every entry at the output is at or below $2^{-25}$ and
# becomes 0 in float16 before that sum, so many weight gradients come out as
# 0, though few of them are that small themselves (the first two lines
# below). With the loss multiplied by $S = 2^{16}$ they survive, and
# dividing by $S$ in float32 gives them back:

# %%
rng = np.random.default_rng(0)
x, t = rng.normal(size=(256, 64)), rng.normal(size=(256, 8))
w = rng.normal(size=(64, 8)) * 0.1
exact = x.T @ (x @ w - t) * (2 / t.size) * 1e-5  # the gradient of 1e-5 * MSE, in float64


def half_gradient(S):
    """The same gradient with float16 arrays, the loss scaled by S, then unscaled in float32."""
    gy = ((x @ w - t) * (2 / t.size) * 1e-5 * S).astype(np.float16)  # the (scaled) gradient at the output
    return (x.astype(np.float16).T @ gy).astype(np.float32) / np.float32(S)


at_output = (x @ w - t) * (2 / t.size) * 1e-5
print(f"gradients at the output, 0 in float16: {np.mean(at_output.astype(np.float16) == 0):.0%} "
      f"| weight gradients at or below 2^-25: {np.mean(np.abs(exact) <= 2.0**-25):.0%}")
for S in (1.0, 2.0**16):
    g = half_gradient(S)
    relative = np.abs(g - exact).max() / np.abs(exact).max()
    print(f"S = {S:>7g}: zeros {np.mean(g == 0):.0%}, max relative error {relative:.2g}")


# %% tags=["hide-input"]
def underflow_picture():
    """Where the gradients' magnitudes lie, before and after scaling, against float16's range."""
    gy = np.abs((x @ w - t) * (2 / t.size) * 1e-5).ravel()
    fig, axis = plt.subplots(figsize=(8, 2.8))
    bins = np.logspace(-12, 6, 80)
    axis.hist(gy, bins=bins, color="C0", alpha=0.7, label="output gradients, S = 1")
    axis.hist(gy * 2**16, bins=bins, color="C2", alpha=0.7, label="the same times S = 2^16")
    axis.axvspan(1e-12, 2.0**-25, color="C3", alpha=0.15, label="float16: 0 (2^-25 and below)")
    axis.axvspan(2.0**-25, 2.0**-14, color="C1", alpha=0.15, label="float16: subnormal, few digits")
    axis.axvspan(65504, 1e6, color="k", alpha=0.15, label="float16: inf (above 65504)")
    axis.set(xscale="log", xlabel="|gradient|", ylabel="count", yticks=[])
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not on them
    fig.tight_layout()
    plt.show()


underflow_picture()

# %% [markdown]
# ## The scaler
#
# Four calls a training iteration. `scale(loss)` multiplies by $S$ (a
# float32). `unscale_(optimizer)` multiplies each `.grad` in place by
# $1/S$ (taken in float64, rounded to float32, as PyTorch does) and
# records whether any gradient was inf or NaN. `step(optimizer)` unscales
# if that was not done yet and calls `optimizer.step()` only if all was
# finite. `update()` then backs off ($S \cdot 0.5$) after an inf, or
# grows ($S \cdot 2$) after `growth_interval` clean steps in a row, never
# past float32's largest number.

# %%
show_code(GradScaler.unscale_, GradScaler.step, GradScaler._update_scale)


# %% tags=["hide-input"]
def state_picture():
    """Each optimizer's stage within an iteration, and the errors of calls out of order."""
    fig, axis = plt.subplots(figsize=(8, 3.2))
    spots = {"READY": 0, "UNSCALED": 3, "STEPPED": 6}
    for name, x0 in spots.items():
        axis.add_patch(plt.Rectangle((x0, 0), 1.8, 0.8, color="C0", alpha=0.25))
        axis.text(x0 + 0.9, 0.4, name, ha="center", va="center", fontsize=9)
    for start, end, label in [((1.8, 0.4), (3, 0.4), "unscale_"), ((4.8, 0.4), (6, 0.4), "step")]:
        axis.annotate("", end, start, arrowprops=dict(arrowstyle="->"))
        axis.text((start[0] + end[0]) / 2, start[1] + 0.06, label, ha="center", fontsize=8)
    for start, end, rad, y, label in [((6.9, 0.8), (0.9, 0.8), 0.35, 1.6, "update(): every optimizer READY again"),
                                      ((0.9, 0), (6.9, 0), 0.25, -0.95, "step alone (unscales first)")]:
        axis.annotate("", end, start, arrowprops=dict(arrowstyle="->", connectionstyle=f"arc3,rad={rad}"))
        axis.text(3.9, y, label, ha="center", va="top" if y < 0 else "baseline", fontsize=8)  # beside the arc
    axis.text(3.9, -1.35, "unscale_ twice, unscale_ after step, step twice: RuntimeError", ha="center", va="top",
              fontsize=8, color="C3")
    axis.set(xlim=(-0.2, 8), ylim=(-1.6, 1.9))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


state_picture()

# %% [markdown]
# Calls out of order raise PyTorch's errors:

# %%
p = nn.Parameter(np.ones(3, dtype=np.float32))
sgd = optim.SGD([p], lr=0.1)
scaler = GradScaler("cpu")
for calls in (["unscale_", "unscale_"], ["step", "unscale_"], ["step", "step"]):
    (scaler.scale((p * p).sum())).backward()
    try:
        for call in calls:
            getattr(scaler, call)(sgd)
    except RuntimeError as error:
        print(f"{' then '.join(calls)}: {error}")
    scaler.update()

# %% [markdown]
# ## The scale over a training run
#
# A small regression with SGD, `init_scale=2**10` and `growth_interval=5`
# so that growth shows; at chosen iterations one gradient element is set
# to inf, as an overflow would. Each such step is skipped and halves the
# scale; five clean steps double it.

# %%
def run(steps, inject, growth_interval=5):
    """Train; the scale after each update, the skipped iterations, the final weights, the growth tracker."""
    data = np.random.default_rng(1)
    p = nn.Parameter(np.full((4, 2), 0.5, dtype=np.float32))
    opt = optim.SGD([p], lr=0.05, momentum=0.9)
    scaler = GradScaler("cpu", 2.0**10, growth_interval=growth_interval)
    scales, skipped, trackers = [], [], []
    for i in range(steps):
        x = data.normal(size=(8, 4)).astype(np.float32)
        opt.zero_grad()
        scaler.scale(((Variable(x) @ p) - 1.0).square().mean()).backward()
        if i in inject:
            p.grad.data[0, 0] = np.inf
        before = p.data.copy()
        scaler.step(opt)
        if np.array_equal(before, p.data):
            skipped.append(i)
        scaler.update()
        scales.append(scaler.get_scale())
        trackers.append(scaler.state_dict()["_growth_tracker"])
    return scales, skipped, p.data, trackers


inject = [3, 4, 14, 15, 16, 30]
scales, skipped, final, trackers = run(40, inject)
print("skipped iterations:", skipped)
print("scale after iterations 0-9:", [f"{s:g}" for s in scales[:10]])


# %% tags=["hide-input"]
def trajectory_picture(scales, inject):
    fig, axis = plt.subplots(figsize=(8, 2.8))
    axis.step(range(len(scales)), scales, where="post", color="C0", label="scale after update()")
    axis.scatter(inject, [scales[i] for i in inject], color="C3", zorder=3, label="inf injected: step skipped")
    axis.set(xlabel="iteration", ylabel="scale")
    axis.set_yscale("log", base=2)
    axis.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    plt.show()


trajectory_picture(scales, inject)

# %% [markdown]
# ## Unscale before clipping
#
# `clip_grad_norm_` (step 56) must see the true gradients. Clipped while
# still scaled, their norm is $S$ times too large, the clipping
# coefficient $S$ times too small, and after unscaling the step is tiny.
# PyTorch's recipe is `unscale_`, then clip, then `step` (which then does
# not unscale again).

# %%
def clipped_norm(unscale_first):
    p = nn.Parameter(np.array([3.0, 4.0], dtype=np.float32))
    opt, scaler = optim.SGD([p], lr=1.0), GradScaler("cpu", init_scale=1024.0)
    scaler.scale((p * p).sum() / 2).backward()  # the gradient is p itself: norm 5
    if unscale_first:
        scaler.unscale_(opt)
    clip_grad_norm_([p], max_norm=1.0)
    scaler.unscale_(opt) if not unscale_first else None
    return float(np.linalg.norm(p.grad.data))


print(f"unscale_, then clip to 1: gradient norm {clipped_norm(True):.4f}")
print(f"clip the scaled gradient, then unscale: gradient norm {clipped_norm(False):.6f}  (1/1024 of it)")

# %% [markdown]
# ## Gradient accumulation
#
# With micro-batches, every `backward` adds a scaled gradient into
# `.grad`; they must all carry the **same** scale, so `unscale_`, `step`
# and `update` come once per effective batch, after the last micro-batch:

# %%
data = np.random.default_rng(2)
xs, ts = data.normal(size=(12, 4)).astype(np.float32), data.normal(size=(12, 2)).astype(np.float32)
p = nn.Parameter(data.normal(size=(4, 2)).astype(np.float32))
opt, scaler = optim.SGD([p], lr=0.1), GradScaler("cpu", init_scale=2.0**12)
for xb, tb in zip(np.split(xs, 3), np.split(ts, 3)):
    scaler.scale(F.mse_loss(Variable(xb) @ p, Variable(tb)) / 3).backward()  # scale unchanged in between
scaler.unscale_(opt)
reference = 2 * xs.astype(np.float64).T @ (xs @ p.data.astype(np.float64) - ts) / ts.size
print("3 scaled micro-batches, unscaled once, vs the full batch's gradient:",
      below(np.abs(p.grad.data - reference).max(), 1e-5))

# %% [markdown]
# ## Mixed precision, by hand
#
# The digits (step 51), a network 64-32-10, SGD with mini-batches of 64.
# To make gradients small, as a deep network's are, the loss is
# multiplied by $2^{-16}$ and the learning rate by $2^{16}$: in exact
# arithmetic that changes nothing. Three ways: **float32**; **float16**,
# weights and computation in float16; **mixed**, float32 master weights
# cast to float16 for the matmuls (what autocast, step 61, automates),
# the loss in float32, scaled by a `GradScaler`, and the step taken on
# the float32 weights.

# %%
images, digits = datasets.load_digits()
inputs = (images.reshape(len(images), -1) / 16).astype(np.float32)
init = np.random.default_rng(0)
W1 = init.normal(size=(64, 32)).astype(np.float32) * 0.1
W2 = init.normal(size=(32, 10)).astype(np.float32) * 0.1
TINY, LR = 2.0**-16, 0.1 * 2.0**16


def train(way, epochs=10, watch=None):
    """Accuracy on the digits after training `way`, and the scaler's final scale (`watch(params)`: a look
    at the gradients after each backward)."""
    low = np.float16 if way != "float32" else np.float32
    params = [nn.Parameter(W.astype(np.float16 if way == "float16" else np.float32)) for W in (W1, W2)]
    opt, scaler = optim.SGD(params, lr=LR), GradScaler("cpu", growth_interval=50, enabled=way == "mixed")
    for _ in range(epochs):
        for i in range(0, len(inputs), 64):
            xb = Variable(inputs[i:i + 64].astype(low))
            A, B = (W.half() for W in params) if way == "mixed" else params
            logits = F.relu(xb @ A) @ B
            loss = F.cross_entropy(logits.float() if way == "mixed" else logits, digits[i:i + 64]) * TINY
            opt.zero_grad()
            scaler.scale(loss).backward()
            if watch:
                watch(params)
            scaler.step(opt)
            scaler.update()
    logits = F.relu(Variable(inputs) @ params[0].float()) @ params[1].float()
    return float(np.mean(logits.data.argmax(1) == digits)), scaler.get_scale()


ours = {way: train(way) for way in ("float32", "float16", "mixed")}
for way, (accuracy, scale) in ours.items():
    scale_note = f", final scale 2^{np.log2(scale):g}" if way == "mixed" else ""
    print(f"{way:>8}: accuracy {accuracy:.2f}{scale_note}")

# %% [markdown]
# ## Check against PyTorch
#
# The regression run above, in torch with `torch.amp.GradScaler("cpu")`
# and the same data, weights and injected infs: the scale after every
# update, the growth tracker, the skipped steps and the final weights
# must be equal. Then the three ways in torch, from the same weights.
# Plain float16 learns nothing in either framework: at every step about
# half of the gradient entries are zero and nearly all the others
# subnormal, with a few bits left (the package's, counted in the output
# below), so its steps do not train the network and the accuracy stays
# at chance, 0.10.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)


def torch_run(steps, inject, growth_interval=5):
    data = np.random.default_rng(1)
    p = torch.full((4, 2), 0.5, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", 2.0**10, growth_interval=growth_interval)
    scales, skipped, trackers = [], [], []
    for i in range(steps):
        x = torch.from_numpy(data.normal(size=(8, 4)).astype(np.float32))
        opt.zero_grad()
        scaler.scale(((x @ p) - 1.0).square().mean()).backward()
        if i in inject:
            p.grad[0, 0] = float("inf")
        before = p.detach().clone()
        scaler.step(opt)
        if torch.equal(before, p.detach()):
            skipped.append(i)
        scaler.update()
        scales.append(scaler.get_scale())
        trackers.append(scaler.state_dict()["_growth_tracker"])
    return scales, skipped, p.detach().numpy(), trackers


def torch_train(way, epochs=10):
    low = torch.float16 if way != "float32" else torch.float32
    params = [torch.tensor(W).to(torch.float16 if way == "float16" else torch.float32).requires_grad_()
              for W in (W1, W2)]
    opt = torch.optim.SGD(params, lr=LR)
    scaler = torch.amp.GradScaler("cpu", growth_interval=50, enabled=way == "mixed")
    target = torch.from_numpy(digits)
    for _ in range(epochs):
        for i in range(0, len(inputs), 64):
            xb = torch.from_numpy(inputs[i:i + 64]).to(low)
            A, B = (W.half() for W in params) if way == "mixed" else params
            logits = torch.relu(xb @ A) @ B
            loss = torch.nn.functional.cross_entropy(logits.float() if way == "mixed" else logits,
                                                     target[i:i + 64]) * TINY
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    logits = torch.relu(torch.from_numpy(inputs) @ params[0].float()) @ params[1].float()
    return float((logits.argmax(1).numpy() == digits).mean()), scaler.get_scale()


def float16_gradients():
    """Plain float16 trained again, as above: per step, the share of gradient entries that are 0, and the share
    of the others that are subnormal."""
    shares = []

    def count(params):
        g = np.concatenate([p.grad.data.ravel() for p in params])
        shares.append((np.mean(g == 0), np.mean(np.abs(g[g != 0]) < 2.0**-14)))
    train("float16", watch=count)
    return np.array(shares).T


# %%
scales_t, skipped_t, final_t, trackers_t = torch_run(40, inject)
assert scales == scales_t and skipped == skipped_t == inject, (scales, scales_t, skipped, skipped_t)
assert trackers == trackers_t and any(b > a for a, b in zip(scales, scales[1:]))  # it grew, too
print("scale and growth tracker after each of 40 updates, skipped steps", skipped, ": equal torch's")
print("final weights: max |difference| from torch's", below(np.abs(final - final_t).max(), 1e-6))
theirs = {way: torch_train(way) for way in ours}
print("accuracy   float32  float16  mixed")
print("tinypytorch  " + "     ".join(f"{ours[w][0]:.2f}" for w in ours))
print("torch        " + "     ".join(f"{theirs[w][0]:.2f}" for w in ours))
for table in (ours, theirs):
    assert abs(table["mixed"][0] - table["float32"][0]) < 0.01, table  # mixed within 1 point of float32
    assert table["float16"][0] < 0.2, table  # plain float16 stays at chance
assert ours["mixed"][1] == theirs["mixed"][1]  # the scaler ended at the same scale
zero, subnormal = float16_gradients()
assert 0.3 < zero.min() and zero.max() < 0.7 and subnormal.min() > 0.99, (zero, subnormal)
print(f"plain float16, each of its {len(zero)} steps: 30% to 70% of the gradient entries 0, "
      "over 99% of the rest subnormal")
print("PyTorch check passed: GradScaler's scales, skips, weights as torch's; "
      "mixed within 0.01 of float32 in both")

# %% [markdown]
# ## Recap
#
# - float16 rounds numbers at or below $2^{-25}$ to zero, and a weight's
#   gradient flushes when its samples' shares do, before the batch sum;
#   multiplying the loss by $S$ multiplies every gradient by $S$; dividing
#   by $S$ in float32 before the step restores them.
# - `GradScaler`: `scale(loss).backward()`, optionally `unscale_(opt)`,
#   `step(opt)` (skipped after an inf or NaN), `update()` (backoff after
#   an inf, growth after `growth_interval` clean steps).
# - Per optimizer READY → UNSCALED → STEPPED; out-of-order calls raise.
# - `unscale_` before `clip_grad_norm_`; with accumulation keep $S$
#   constant and unscale, step and update once per effective batch.
# - Mixed precision keeps float32 master weights: the small updates that
#   a float16 weight would round away accumulate there.
#
# ## Exercises
#
# **1. The trajectory by hand.** Write `trajectory(found_infs, init,
# interval)` with plain Python floats: the scale after each update for a
# list of booleans (an inf found or not), with growth factor 2 and
# backoff 0.5. It must match `torch.amp.GradScaler("cpu")`.

# %% tags=["hide-cell"]
def trajectory(found_infs, init=2.0**16, interval=3):
    scale, tracker, out = init, 0, []
    for found in found_infs:
        if found:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == interval:
                scale, tracker = scale * 2.0, 0
        out.append(scale)
    return out


print(trajectory([False, False, False, True, False, True, False, False, False]))

# %% [markdown]
# **2. The largest safe scale.** The largest float16 number is 65504.
# Write `safe_scale(max_grad)`: the largest power of two $S$ for which
# `max_grad * S` stays finite in float16.

# %% tags=["hide-cell"]
def safe_scale(max_grad):
    return 2.0 ** np.floor(np.log2(65504 / max_grad))


print(safe_scale(0.3), np.float16(0.3 * safe_scale(0.3)))
