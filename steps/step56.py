# %% [markdown]
# # Step 56: Gradient clipping and gradient accumulation
#
# Two small things happen in almost every PyTorch training loop between
# `loss.backward()` and `optimizer.step()`. **Clipping** guards the step
# against one bad batch: if the gradient is huge, it is cut down before
# the optimizer sees it. **Accumulation** trains with a batch too large
# for memory: the batch is cut into micro-batches, each one's gradient is
# added into `.grad`, and the optimizer steps once. Both are a few lines;
# this step shows what they compute, checks them against
# `torch.nn.utils`, and shows where accumulation is *not* the big batch
# it imitates: batch normalisation, and micro-batches of unequal size.

# %%
import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, nn, optim
from tinypytorch.nn.utils import clip_grad_norm_, clip_grad_value_
from tinypytorch.nn.utils.clip_grad import clip_grads_with_norm_
from tinypytorch.utils.listing import show_code

tinypytorch.set_default_dtype(tinypytorch.float64)  # float64, so the checks hold to 1e-12 (step 59)


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


def with_grad(values):
    """A parameter whose gradient is `values`, as backward would have left it."""
    p = nn.Parameter(np.zeros(len(values)))
    p.grad = Variable(np.array(values, dtype=np.float64), requires_grad=False)
    return p


# %% [markdown]
# ## Clipping by norm
#
# `clip_grad_norm_(parameters, max_norm, norm_type=2)` looks at every
# gradient of the model at once, as if they were concatenated into one
# long vector $g$, and computes its norm $\|g\|_p$: the 2-norm
# $\sqrt{\sum g_i^2}$, the 1-norm $\sum |g_i|$, or the largest $|g_i|$
# for `norm_type=inf`. Then every gradient is multiplied, in place, by
#
# $$c = \min\left(\frac{m}{\|g\|_p + 10^{-6}},\ 1\right),
#   \qquad m = \mathtt{max\_norm}.$$
#
# A gradient already short enough is left as it is ($c = 1$); a long one
# is shortened to `max_norm`, all its components by the same factor, so
# the **direction is kept**. The function returns the total norm
# *before* clipping, which is worth logging: a spike in it is the bad
# batch. Here one gradient $(3, 4)$, clipped to 2 in each norm:

# %%
for norm_type in (2, 1, math.inf):
    p = with_grad([3.0, 4.0])
    total = clip_grad_norm_([p], max_norm=2.0, norm_type=norm_type)
    print(f"norm_type={norm_type}: total norm {float(total.data):g} -> grad {np.round(p.grad.data, 4)}")
small = with_grad([0.3, 0.4])
clip_grad_norm_([small], max_norm=2.0)
print("a gradient of norm 0.5 is left as it was:", np.array_equal(small.grad.data, [0.3, 0.4]))

# %% [markdown]
# The code is PyTorch's recipe. The coefficient is clamped to 1 and every
# gradient multiplied by it, rather than testing `total > max_norm`
# first: on a GPU the test would make the host wait for the device. The
# $10^{-6}$ keeps the division finite when every gradient is zero.

# %%
show_code(clip_grad_norm_, clip_grads_with_norm_)

# %% [markdown]
# ## Clipping by value
#
# `clip_grad_value_(parameters, clip_value)` clamps every element to
# $[-v, v]$ on its own. It is cheaper (no norm to compute) but the
# **direction changes**: $(3, 4)$ clipped to 2 becomes $(2, 2)$, which
# points elsewhere.

# %%
p = with_grad([3.0, 4.0])
clip_grad_value_([p], clip_value=2.0)
turn = math.degrees(math.atan2(4, 3) - math.atan2(*p.grad.data[::-1]))
print("clipped by value:", p.grad.data, f"| turned by {turn:.1f} degrees")


# %% tags=["hide-input"]
def clipping_picture():
    """One 2-D gradient, clipped by norm (onto the circle, same direction) and by value (into the square)."""
    g, limit = np.array([3.0, 4.0]), 2.0
    by_norm = g * min(limit / (np.linalg.norm(g) + 1e-6), 1.0)
    by_value = np.clip(g, -limit, limit)
    fig, axis = plt.subplots(figsize=(5.5, 4.2))
    axis.add_patch(plt.Circle((0, 0), limit, fill=False, ls="--", color="C0"))
    axis.add_patch(plt.Rectangle((-limit, -limit), 2 * limit, 2 * limit, fill=False, ls=":", color="C1"))
    for vector, color, label in [(g, "0.4", "gradient (3, 4), norm 5"),
                                 (by_norm, "C0", "clip_grad_norm_(max_norm=2): (1.2, 1.6)"),
                                 (by_value, "C1", "clip_grad_value_(2): (2, 2)")]:
        axis.annotate("", vector, (0, 0), arrowprops=dict(arrowstyle="->", color=color, lw=2))
        axis.plot([], [], color=color, lw=2, label=label)
    axis.set(xlim=(-2.5, 4.5), ylim=(-2.5, 4.5), aspect="equal", xlabel="$g_1$", ylabel="$g_2$")
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8)  # below: inside it hid the circle
    axis.set_title("by norm: same direction, length 2; by value: each element to [-2, 2]", fontsize=9)
    fig.tight_layout()
    plt.show()


clipping_picture()

# %% [markdown]
# ## A gradient that is not finite
#
# If one gradient holds a NaN or an infinity, so does the total norm, and
# the coefficient multiplies every gradient into NaN: one bad element
# spoils the whole step. With `error_if_nonfinite=True` the function
# raises PyTorch's error instead, before touching anything.

# %%
bad = with_grad([float("nan"), 4.0])
try:
    clip_grad_norm_([bad], max_norm=1.0, error_if_nonfinite=True)
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 100))
print("without the check:", clip_grad_norm_([bad], max_norm=1.0), "-> grad", bad.grad.data)

# %% [markdown]
# ## Where clipping goes in a training loop
#
# After `backward` (the gradients must exist) and before `step` (which
# uses them). A small regression, the norms before clipping logged:

# %%
rng = np.random.default_rng(0)
x, t = rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
tinypytorch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
optimizer = optim.SGD(model.parameters(), lr=0.5)
norms = []
for _ in range(20):
    optimizer.zero_grad()
    loss = nn.MSELoss()(model(Variable(x)), Variable(t))
    loss.backward()
    norms.append(float(clip_grad_norm_(model.parameters(), max_norm=0.5).data))
    optimizer.step()
print("total norm before clipping, steps 1-3:", np.round(norms[:3], 3))
print("loss after 20 steps:", round(float(loss.data), 3))

# %% [markdown]
# ## Gradient accumulation
#
# A gradient is linear in the loss. The mean loss over a batch of
# $N = km$ samples is the mean of the $k$ micro-batch means, each over
# $m$ samples, so
#
# $$\nabla \frac{1}{N}\sum_{i=1}^N \ell_i
#   = \sum_{j=1}^{k} \nabla \frac{1}{k}\Big(\frac{1}{m}\sum_{i \in B_j} \ell_i\Big).$$
#
# Since `backward` *adds* into `.grad`, the right side is $k$ backward
# passes, each of a micro-batch's loss divided by $k$. Only one
# micro-batch's activations are alive at a time, so the memory is that
# of a batch of $m$. The optimizer steps once, after the $k$-th pass:

# %%
def gradients(model):
    return [p.grad.data.copy() for p in model.parameters()]


model.zero_grad()
nn.MSELoss()(model(Variable(x)), Variable(t)).backward()
full = gradients(model)

k = 4
model.zero_grad()
history = []  # the first layer's weight.grad after each backward, for the picture
for xb, tb in zip(np.split(x, k), np.split(t, k)):
    loss = nn.MSELoss()(model(Variable(xb)), Variable(tb)) / k
    loss.backward()  # adds into .grad
    history.append(model[0].weight.grad.data.copy())
accumulated = gradients(model)
difference = max(np.abs(a - f).max() for a, f in zip(accumulated, full))
print(f"{k} micro-batches of 3 vs one batch of 12: max |difference| {below(difference, 1e-12)}")


# %% tags=["hide-input"]
def timeline_picture(history, full, k):
    """Forward and backward per micro-batch along time; one weight's .grad growing to the full batch's."""
    where = np.unravel_index(np.abs(full).argmax(), full.shape)  # the weight with the largest gradient
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 3.8), sharex=True, height_ratios=[1, 2])
    for j in range(k):
        top.broken_barh([(2 * j, 1), (2 * j + 1, 1)], (0, 1), facecolors=["C0", "C1"], alpha=0.7)
        top.text(2 * j + 1, 1.15, f"micro-batch {j + 1}\nloss / {k}", ha="center", fontsize=8)
    top.broken_barh([(2 * k + 0.2, 1.3)], (0, 1), facecolors="C2", alpha=0.8)
    top.text(2 * k + 0.85, 0.5, "step\nzero_grad", ha="center", va="center", fontsize=8, color="w")
    top.text(0.5, 0.5, "fwd", ha="center", va="center", fontsize=8, color="w")
    top.text(1.5, 0.5, "bwd", ha="center", va="center", fontsize=8, color="w")
    top.set(ylim=(0, 2.1), yticks=[])
    steps = [0] + [2 * j + 2 for j in range(k)] + [2 * k + 1.5]  # the last value held through the step
    bottom.step(steps, [0.0] + [h[where] for h in history] + [history[-1][where]], where="post", color="C1",
                label=f"accumulated .grad of weight{list(map(int, where))} of layer 0")
    bottom.axhline(full[where], ls="--", color="0.3", label="gradient of the full batch")
    bottom.set(xlabel="time", xticks=[], ylabel=".grad")
    bottom.legend(fontsize=8, loc="best")
    fig.tight_layout()
    plt.show()


timeline_picture(history, full[0], k)

# %% [markdown]
# ## Where accumulation is not the big batch
#
# The identity above needs the loss of the big batch to be a sum of
# per-sample terms, with the same weight for every sample. Two everyday
# cases break it.
#
# **Batch normalisation** normalises each sample with its batch's mean
# and variance: a sample's output depends on the other samples in its
# batch. In a micro-batch those are its own 3 neighbours, not all 12, so
# the outputs, the loss and the gradients change; and the running
# statistics are updated $k$ times with micro-batch statistics instead of
# once. The package's `nn.BatchNorm1d` (and `nn.BatchNorm2d`, for
# images; both share `_BatchNorm`) is step 45's layer given PyTorch's face:
# its printout and its state dict, in which the number of batches seen is a
# buffer, counted once per training batch.

# %%
show_code(nn.batchnorm._BatchNorm.__init__, nn.batchnorm._BatchNorm.forward)


# %% tags=["hide-input"]
def batchnorm_twins():
    """The same model with BatchNorm, in tinypytorch and in torch (float64), torch's initial weights in both."""
    import torch

    torch.manual_seed(0)
    twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 2)).double()
    ours = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2))
    ours.load_state_dict({key: tinypytorch.from_numpy(value.numpy()) for key, value in twin.state_dict().items()})
    return ours, twin


def torch_run(twin, parts, k):
    """torch: the same micro-batches, each loss divided by k; (gradients, state dict), as arrays."""
    import torch

    for p in twin.parameters():
        p.grad = None
    for xb, tb in parts:
        (torch.nn.functional.mse_loss(twin(torch.from_numpy(xb)), torch.from_numpy(tb)) / k).backward()
    return [p.grad.numpy().copy() for p in twin.parameters()], {n: v.numpy().copy() for n, v in twin.state_dict().items()}


# %%
def run(model, parts, k):
    """Micro-batches (x, t) with each loss divided by k; the gradients and the state dict after."""
    model.zero_grad()
    for xb, tb in parts:
        (nn.MSELoss()(model(Variable(xb)), Variable(tb)) / k).backward()
    return gradients(model), {key: value.data.copy() for key, value in model.state_dict().items()}


def gaps(a, b):
    """The largest difference between two runs' gradients, and between their running means."""
    return max(np.abs(g - h).max() for g, h in zip(a[0], b[0])), np.abs(a[1]["1.running_mean"]
                                                                      - b[1]["1.running_mean"]).max()


bn, bn_twin = batchnorm_twins()
start = {key: value.clone() for key, value in bn.state_dict().items()}  # the state dict shares memory
one_batch = run(bn, [(x, t)], 1)
bn.load_state_dict(start)
micro = run(bn, list(zip(np.split(x, 4), np.split(t, 4))), 4)
print(bn)
print("batches tracked:", one_batch[1]["1.num_batches_tracked"], "vs", micro[1]["1.num_batches_tracked"])
ours_gaps = gaps(one_batch, micro)
print("max |gradient difference| %.3g, max |running_mean difference| %.3g" % ours_gaps)


# %% tags=["hide-input"]
def batchnorm_picture(model, x, k):
    """Feature 0 entering BatchNorm, sample by sample: each micro-batch's mean against the full batch's."""
    h = model[0](Variable(x)).data[:, 0]
    fig, axis = plt.subplots(figsize=(8, 2.4))
    for j, part in enumerate(np.split(np.arange(len(h)), k)):
        axis.scatter(part, h[part], color=f"C{j}", zorder=3)
        axis.hlines(h[part].mean(), part[0] - 0.4, part[-1] + 0.4, color=f"C{j}", lw=2)
    axis.axhline(h.mean(), color="0.2", ls="--", label="the full batch's mean, used by every sample of one batch")
    axis.plot([], [], color="C0", lw=2, label="each micro-batch's own mean, used by its 3 samples")
    axis.set(xlabel="sample", ylabel="feature 0 before BatchNorm", xticks=range(len(h)))
    axis.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2)  # above the samples, not on them
    fig.tight_layout()
    plt.show()


batchnorm_picture(bn, x, 4)


# %% [markdown]
# **Micro-batches of unequal size.** 12 samples in micro-batches of 5,
# 5 and 2 (the last batch of an epoch is often short). Dividing each
# micro-batch's *mean* loss by $k = 3$ gives each sample of the short
# batch a weight $\frac{1}{3}\cdot\frac{1}{2} = \frac{1}{6}$, and each of
# the others $\frac{1}{15}$, instead of $\frac{1}{12}$ for everyone. The
# fix: sum the losses and divide by the total number of samples.

# %%
sizes = [5, 5, 2]
cuts = np.cumsum(sizes)[:-1]
uneven = list(zip(np.split(x, cuts), np.split(t, cuts)))
wrong = run(model, uneven, len(sizes))
model.zero_grad()
for xb, tb in uneven:
    (nn.MSELoss(reduction="sum")(model(Variable(xb)), Variable(tb)) / (len(x) * t.shape[1])).backward()
fixed = gradients(model)
uneven_gap = max(np.abs(w - f).max() for w, f in zip(wrong[0], full))
print("mean / k:            max |difference| from the full batch %.3g" % uneven_gap)
print("sum / total samples: max |difference| from the full batch",
      below(max(np.abs(g - f).max() for g, f in zip(fixed, full)), 1e-12))


# %% tags=["hide-input"]
def weights_picture(sizes):
    """The weight each sample's loss has in the gradient: full batch, mean / k, sum / N."""
    n, k = sum(sizes), len(sizes)
    by_k = np.concatenate([np.full(s, 1 / (k * s)) for s in sizes])
    fig, axis = plt.subplots(figsize=(8, 2.5))
    index = np.arange(n)
    axis.bar(index - 0.2, by_k, width=0.4, color="C3", label="each micro-batch's mean / k")
    axis.bar(index + 0.2, np.full(n, 1 / n), width=0.4, color="C2", label="full batch = sum / N (the fix)")
    for edge in np.cumsum(sizes)[:-1]:
        axis.axvline(edge - 0.5, color="0.5", ls=":")
    axis.set(xticks=index, xlabel="sample (micro-batches of 5, 5, 2)", ylabel="weight in the gradient")
    axis.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    plt.show()


weights_picture(sizes)

# %% [markdown]
# ## Check against PyTorch
#
# The same gradients in torch (float64): clipping by norm for
# `norm_type` 2, 1 and inf must give `torch.nn.utils.clip_grad_norm_`'s
# total norm and clipped gradients, value clipping its clamped ones, and
# the non-finite error its message. The accumulated gradients must equal
# the full batch's and torch's. The two counterexamples must differ from
# the full batch by the same amounts in torch.

# %% tags=["hide-cell"]
import torch  # noqa: E402
import torch.nn.utils as TU  # noqa: E402

torch.set_num_threads(1)


def torch_params(grads):
    params = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g.copy())
    return params


def ours_params(grads):
    params = [nn.Parameter(np.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = Variable(g.copy(), requires_grad=False)
    return params


# %%
for norm_type in (2, 1, math.inf):
    ours, theirs = ours_params(full), torch_params(full)
    total, total_t = clip_grad_norm_(ours, 0.01, norm_type), TU.clip_grad_norm_(theirs, 0.01, norm_type)
    np.testing.assert_allclose(total.data, total_t.numpy(), rtol=1e-12)
    assert float(total.data) > 0.01  # the clipping happened
    for p, p_t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.data, p_t.grad.numpy(), rtol=1e-12, atol=0)
ours, theirs = ours_params(full), torch_params(full)
clip_grad_value_(ours, 0.01), TU.clip_grad_value_(theirs, 0.01)
assert any(np.abs(g).max() > 0.01 for g in full)  # some elements clamped
assert all(np.array_equal(p.grad.data, p_t.grad.numpy()) for p, p_t in zip(ours, theirs))
messages = []
for clip, params in [(TU.clip_grad_norm_, torch_params), (clip_grad_norm_, ours_params)]:
    try:
        clip(params([np.array([np.nan, 4.0])]), 1.0, error_if_nonfinite=True)
    except RuntimeError as error:
        messages.append(str(error))
assert len(messages) == 2 and messages[0] == messages[1]
print("clip_grad_norm_ (norm_type 2, 1, inf): total norms and clipped gradients equal torch's")
print("clip_grad_value_: equal; the non-finite error: torch's message")

twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
twin.load_state_dict({k: torch.from_numpy(v.data.copy()) for k, v in model.state_dict().items()})
even = list(zip(np.split(x, k), np.split(t, k)))
grads_t = torch_run(twin, even, k)[0]
full_t = torch_run(twin, [(x, t)], 1)[0]
for a, a_t, f_t in zip(run(model, even, k)[0], grads_t, full_t):
    np.testing.assert_allclose(a, a_t, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a, f_t, rtol=1e-12, atol=1e-15)
print(f"{k} accumulated micro-batches: gradients equal the full batch's and torch's")

bn_one = torch_run(bn_twin, [(x, t)], 1)
bn_twin.load_state_dict({key: torch.from_numpy(value.data) for key, value in start.items()})
torch_gaps = gaps(bn_one, torch_run(bn_twin, list(zip(np.split(x, 4), np.split(t, 4))), 4))
np.testing.assert_allclose(ours_gaps, torch_gaps, rtol=1e-9)
uneven_t = torch_run(twin, uneven, len(sizes))[0]
np.testing.assert_allclose(uneven_gap, max(np.abs(w - f).max() for w, f in zip(uneven_t, full_t)),
                           rtol=1e-9)
print("BatchNorm: gradient and running_mean differences %.3g and %.3g in torch too" % torch_gaps)
print("unequal micro-batches: %.3g in torch too" % uneven_gap)
print("PyTorch check passed: clipping, accumulation and its two counterexamples equal torch's")

# %% [markdown]
# ## Recap
#
# - `clip_grad_norm_` scales every gradient by
#   $\min(m / (\|g\| + 10^{-6}), 1)$ ($m$ = `max_norm`, $g$ all gradients
#   together), keeping the direction; it returns the norm before clipping.
#   `clip_grad_value_` clamps each element and changes the direction.
# - A NaN or infinite gradient makes every gradient NaN after clipping;
#   `error_if_nonfinite=True` raises instead.
# - Clip after `backward`, before `step`; with accumulation, after the
#   last micro-batch's `backward`.
# - $k$ micro-batches, each mean loss divided by $k$, `backward` each,
#   one `step`: the big batch's gradient, as long as samples do not see
#   each other (BatchNorm does) and the micro-batches are of equal size
#   (otherwise sum the losses and divide by the number of samples).
# - `nn.BatchNorm1d` has PyTorch's printout and state dict, with
#   `num_batches_tracked` a 0-d int64 buffer.
#
# ## Exercises
#
# **1. Clipping by hand.** Write `clip_by_hand(grads, max_norm,
# norm_type)` with NumPy alone: a list of arrays in, the clipped list and
# the total norm out. It must give `torch.nn.utils.clip_grad_norm_`'s
# numbers for the 2-, 1- and inf-norms.

# %% tags=["hide-cell"]
def clip_by_hand(grads, max_norm, norm_type=2.0):
    flat = np.concatenate([g.ravel() for g in grads])
    total = np.abs(flat).max() if norm_type == math.inf else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    scale = min(max_norm / (total + 1e-6), 1.0)
    return [g * scale for g in grads], total


clipped, total = clip_by_hand(full, 0.1, 1)
print("1-norm of the full batch's gradients:", round(float(total), 4))

# %% [markdown]
# **2. Accumulating unequal micro-batches.** Write
# `accumulate(model, x, t, sizes)`: micro-batches of the given sizes,
# each loss a mean, weighted so that the gradients are those of the whole
# batch's mean loss. (Hint: a micro-batch of $n_j$ samples weighs
# $n_j / N$.)

# %% tags=["hide-cell"]
def accumulate(model, x, t, sizes):
    model.zero_grad()
    cuts = np.cumsum(sizes)[:-1]
    for xb, tb in zip(np.split(x, cuts), np.split(t, cuts)):
        (nn.MSELoss()(model(Variable(xb)), Variable(tb)) * (len(xb) / len(x))).backward()
    return gradients(model)


print("sizes 7, 4, 1 vs the full batch:",
      below(max(np.abs(a - f).max() for a, f in zip(accumulate(model, x, t, [7, 4, 1]), full_t)), 1e-12))

# %% [markdown]
# **3. Clip once, not per micro-batch.** With accumulation, clip after
# the last `backward`. Write `clip_each(model, parts, k, max_norm)`, which
# clips after *every* micro-batch's backward instead, and compare with
# clipping the accumulated gradient once. Which one equals clipping the
# full batch's gradient?

# %% tags=["hide-cell"]
def clip_each(model, parts, k, max_norm):
    model.zero_grad()
    for xb, tb in parts:
        (nn.MSELoss()(model(Variable(xb)), Variable(tb)) / k).backward()
        clip_grad_norm_(model.parameters(), max_norm)
    return gradients(model)


once = clip_by_hand(run(model, even, k)[0], 0.02)[0]
each = clip_each(model, even, k, 0.02)
print("clipped once vs the full batch clipped:",
      below(max(np.abs(a - b).max() for a, b in zip(once, clip_by_hand(full, 0.02)[0])), 1e-12))
print("clipped per micro-batch vs once: max |difference| %.3g" % max(np.abs(a - b).max() for a, b in zip(each, once)))
