# %% [markdown]
# # Step 50: Softmax, log-softmax and cross-entropy
#
# A classifier ends in one number per class, a **score** (a *logit*):
# larger means "more likely this class". Training needs two things from
# those scores: probabilities, and a loss that is small when the right
# class is probable. **Softmax** gives the first, **cross-entropy** the
# second. Both are one line of mathematics, and both overflow when written
# as that line: $e^{1000}$ is `inf` in float64. This step adds them to the
# package the way PyTorch computes them, together with the reductions
# along an axis they are built from: `mean`, `max` and `logsumexp`.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, autograd
from tinypytorch import classification as C
from tinypytorch import functions as F
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def show(a, decimals=4):
    """An array (or a Variable's) with fixed decimals, printed the same way on every machine."""
    a = a.data if isinstance(a, Variable) else a
    return np.array2string(np.asarray(a), precision=decimals, floatmode="fixed", separator=", ", suppress_small=True)


def below(error, bound):
    """'< 1e-14', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


# %% [markdown]
# ## Reductions along an axis
#
# Step 30's `sum` adds over some axes; its backward copies the gradient
# back along them. Three more reductions follow the same pattern:
#
# - `mean` divides the sum by the number of elements summed, so each
#   element's derivative is $1/n$;
# - `max` keeps the largest element; its derivative is $1$ at the maximum
#   and $0$ elsewhere (a tie shares the gradient equally, as PyTorch's
#   `amax` does; `torch.max(x, dim)` also returns the indices);
# - `logsumexp` is $\log \sum_j e^{x_j}$, computed as
#   $m + \log \sum_j e^{x_j - m}$ with $m = \max_j x_j$, so that the largest
#   exponential is $e^0 = 1$. Its derivative is $e^{x_i} / \sum_j e^{x_j}$:
#   the softmax.

# %%
show_code(F.LogSumExp.forward, F.LogSumExp.backward, step=50)

# %%
x = Variable(np.array([[1.0, 3.0, 3.0], [1000.0, 0.0, -1000.0]]), name="x")
print("mean over axis 1:     ", show(x.mean(axis=1)))
print("max over axis 1:      ", show(x.max(axis=1)))
print("logsumexp over axis 1:", show(F.logsumexp(x, axis=1)))
with np.errstate(over="ignore"):
    print("log(sum(exp(x))):     ", show(np.log(np.exp(x.data).sum(axis=1))), " (written as the formula)")
x.max(axis=1).sum().backward()
print("gradient of the max:\n" + show(x.grad, 1))

# %% [markdown]
# The first row's maximum, 3, is reached twice: each of the two gets half
# the gradient. The second row's `logsumexp` is 1000 (the other terms are
# below $e^{-1000}$); the formula as written overflows to `inf`.
#
# ## Softmax and its Jacobian
#
# Softmax turns a row of scores into probabilities:
#
# $$s_i = \frac{e^{x_i}}{\sum_j e^{x_j}} .$$
#
# Adding a constant $c$ to every score multiplies numerator and denominator
# by $e^c$: nothing changes. So the package subtracts the row's maximum
# first and never overflows. The derivative, by the quotient rule, is
#
# $$\frac{\partial s_i}{\partial x_j}
#   = \frac{\delta_{ij} e^{x_i}}{\sum_k e^{x_k}} - \frac{e^{x_i} e^{x_j}}{(\sum_k e^{x_k})^2}
#   = s_i (\delta_{ij} - s_j),$$
#
# a full matrix: every probability depends on every score. Backward
# multiplies the incoming gradient $g$ by it, and the matrix never needs to
# be formed:
#
# $$\bar x_j = \sum_i g_i \, s_i (\delta_{ij} - s_j)
#   = s_j \Big(g_j - \sum_i g_i s_i\Big) = s_j \big(g_j - \langle s, g \rangle\big).$$
#
# Softmax saves its output $s$ and nothing else:

# %%
show_code(C.Softmax, step=50)

# %% tags=["hide-input"]
def jacobian_picture():
    """The softmax Jacobian s_i (delta_ij - s_j) of one row of scores, next to the probabilities."""
    scores = np.array([2.0, 1.0, 0.1, -1.0])
    s = C.softmax(Variable(scores), axis=0).data
    jacobian = np.diag(s) - np.outer(s, s)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.4), gridspec_kw={"width_ratios": [1, 1.2]})
    left.bar(range(4), s, color="C0")
    for i, p in enumerate(s):
        left.text(i, p + 0.01, f"{p:.2f}", ha="center", fontsize=9)
    left.set(xticks=range(4), xticklabels=[f"x={v:g}" for v in scores], ylabel="s_i", ylim=(0, 0.75),
             title="softmax of four scores")
    limit = np.abs(jacobian).max()
    image = right.imshow(jacobian, cmap="RdBu_r", vmin=-limit, vmax=limit)
    for (i, j), v in np.ndenumerate(jacobian):
        right.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=8)
    right.set(xticks=range(4), yticks=range(4), xlabel="j (score)", ylabel="i (probability)",
              title="∂s_i/∂x_j = s_i (δ_ij − s_j)")
    fig.colorbar(image, ax=right, shrink=0.8)
    fig.tight_layout()
    plt.show()


jacobian_picture()

# %% [markdown]
# The diagonal is $s_i(1 - s_i) > 0$: raising a score raises its own
# probability. Everything else is $-s_i s_j < 0$: it lowers the others.
# Each column sums to 0, because the probabilities always sum to 1. The
# package's backward agrees with this matrix times $g$:

# %%
scores = np.array([2.0, 1.0, 0.1, -1.0])
g = np.array([0.5, -1.0, 2.0, 0.0])
x = Variable(scores, name="x")
(C.softmax(x, axis=0) * g).sum().backward()
s = np.exp(scores) / np.exp(scores).sum()
by_matrix = (np.diag(s) - np.outer(s, s)).T @ g
print("backward:     ", show(x.grad))
print("Jacobian^T g: ", show(by_matrix), " difference", below(np.abs(x.grad.data - by_matrix).max(), 1e-15))

# %% [markdown]
# ## Log-probabilities: why log(softmax(x)) fails
#
# The loss needs $\log s_i$. Computed as the log of a softmax, a
# probability that rounded to 0 gives $\log 0 = -\infty$, and its gradient
# $0 \cdot \infty = $ NaN. `log_softmax` computes the logarithm directly,
#
# $$\log s_i = x_i - \operatorname{logsumexp}(x),$$
#
# finite for any finite scores. Its backward is $g - e^{y} \sum_j g_j$, from
# the output $y$ it saves. Both frameworks, at scores $\pm 1000$:

# %%
show_code(C.LogSoftmax.forward, C.LogSoftmax.backward, step=50)

# %%
import torch  # noqa: E402  (the same computation in PyTorch, side by side)

big = np.array([[1000.0, 0.0, -1000.0]])
x, xt = Variable(big.copy()), torch.tensor(big, requires_grad=True)
with np.errstate(divide="ignore", invalid="ignore"):
    naive, naive_t = tinypytorch.log(C.softmax(x, axis=1)), torch.log(torch.softmax(xt, 1))
    naive.sum().backward()
    naive_t.sum().backward()
print("log(softmax):  tinypytorch", show(naive, 1), " grad", show(x.grad, 1))
print("               PyTorch    ", show(naive_t.detach(), 1), " grad", show(xt.grad, 1))
x, xt = Variable(big.copy()), torch.tensor(big, requires_grad=True)
stable, stable_t = C.log_softmax(x, axis=1), torch.log_softmax(xt, 1)
stable.sum().backward()
stable_t.sum().backward()
print("log_softmax:   tinypytorch", show(stable, 1), " grad", show(x.grad, 1))
print("               PyTorch    ", show(stable_t.detach(), 1), " grad", show(xt.grad, 1))

# %% tags=["hide-input"]
def overflow_picture():
    """log s_0 for the scores (0, -t, -2t) as t grows: the formula against log_softmax."""
    ts = np.geomspace(1, 1000, 200)
    rows = np.stack([np.zeros_like(ts), -ts, -2 * ts], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        naive = np.log(np.exp(rows) / np.exp(rows).sum(axis=1, keepdims=True))[:, 2]
    stable = C.log_softmax(Variable(rows), axis=1).data[:, 2]
    fig, axis = plt.subplots(figsize=(8, 3.2))
    axis.plot(ts, -stable, label="log_softmax (finite everywhere)", lw=3, color="C0")
    axis.plot(ts, -naive, "--", label="log(softmax): inf once exp(-2t) underflows to 0", color="C3")
    axis.axvline(745 / 2, color="gray", ls=":", lw=1)
    axis.text(745 / 2 * 1.05, 30, "exp(-2t) < 5e-324:\nrounds to 0", fontsize=8, color="gray")
    axis.set(xscale="log", yscale="log", xlabel="t (scores 0, -t, -2t)", ylabel="-log s_2 (the loss)")
    axis.legend(fontsize=8, loc="upper left")
    axis.set_title("the loss of the least likely class", fontsize=10)
    fig.tight_layout()
    plt.show()


overflow_picture()

# %% [markdown]
# The naive curve stops where $e^{-2t}$ falls below the smallest float64
# (about $t = 372$): from there its loss is infinite and its gradient NaN.
#
# ## Cross-entropy
#
# For a batch of $N$ rows of $C$ scores and the right class $t_n$ of each
# row, the cross-entropy loss is the mean negative log-probability of the
# right classes:
#
# $$L = -\frac{1}{N} \sum_n \log s_{n, t_n}, \qquad
#   \frac{\partial L}{\partial x_{n,j}} = \frac{1}{N}\big(s_{n,j} - [j = t_n]\big).$$
#
# The gradient is "probabilities minus the one-hot target": the right
# class is pushed up by $1 - s$, every other class down by its probability.
# `cross_entropy` is `log_softmax` followed by `NLLLoss`, which picks each
# row's target log-probability. Like PyTorch's, it takes `reduction`
# (`"mean"`, `"sum"` or `"none"`, one loss a row) and `ignore_index`, a
# target value for rows that do not count (padding, say); the mean is over
# the rows that count.

# %%
show_code(C.cross_entropy, C.NLLLoss.forward, C.NLLLoss.backward, step=50)

# %%
scores = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, -1.0], [1.0, 1.0, 1.0]])
target = np.array([0, 2, -100])  # the third row does not count
x = Variable(scores, name="x")
loss = C.cross_entropy(x, target)
loss.backward()
s = C.softmax(Variable(scores), axis=1).data
one_hot = np.eye(3)[[0, 2, 0]] * np.array([[1], [1], [0]])
print(f"loss = {loss.data:.4f}  (mean over 2 rows)")
print("x.grad =\n" + show(x.grad))
expected = (s - one_hot) / 2 * np.array([[1], [1], [0]])
error = np.abs(x.grad.data - expected).max()
print("against (softmax - one_hot) / 2, the ignored row zero:", below(error, 1e-15))
print("reductions: sum", show(C.cross_entropy(x, target, "sum")),
      " none", show(C.cross_entropy(x, target, "none")))

# %% [markdown]
# `gradcheck` (step 40) confirms every backward of this step against
# numerical derivatives, to second order:

# %%
rng = np.random.default_rng(0)
x = Variable(rng.standard_normal((3, 4)), name="x")
checks = {"softmax": lambda v: C.softmax(v, axis=1), "log_softmax": lambda v: C.log_softmax(v, axis=0),
          "logsumexp": lambda v: F.logsumexp(v, axis=1), "mean": lambda v: v.mean(axis=0),
          "cross_entropy": lambda v: C.cross_entropy(v, np.array([3, 0, 1]))}
for name, fn in checks.items():
    print(f"{name:14} gradcheck {autograd.gradcheck(fn, x)}  gradgradcheck {autograd.gradgradcheck(fn, x)}")

# %% [markdown]
# Bad input fails early, with PyTorch's words where it has them: a target
# out of range, not integer, or of the wrong length; an unknown reduction;
# an axis the input does not have (the tests, `tests/test_step50.py`, try
# each).

# %%
for attempt in (lambda: C.cross_entropy(Variable(scores), np.array([0, 3, 1])),
                lambda: C.cross_entropy(Variable(scores), np.array([0.0, 1.0, 1.0])),
                lambda: C.cross_entropy(Variable(scores), np.array([0, 1])),
                lambda: C.softmax(Variable(scores), axis=2)):
    try:
        attempt()
    except (TypeError, ValueError) as error:
        print(f"{type(error).__name__}: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# Values and gradients (float64) of every operation of this step against
# PyTorch's, on random scores and on scores of $\pm 1000$, and
# cross-entropy with each reduction and an ignored row.

# %%
def compare(ours, theirs, values, weights):
    x, xt = Variable(values.copy()), torch.tensor(values, requires_grad=True)
    y, yt = ours(x), theirs(xt)
    (y * weights[: y.numel()].reshape(y.shape)).sum().backward()
    (yt * torch.tensor(weights[: yt.numel()].reshape(tuple(yt.shape)))).sum().backward()
    return max(np.abs(y.data - yt.detach().numpy()).max(), np.abs(x.grad.data - xt.grad.numpy()).max())


t = torch.tensor([2, -100, 0, 1])
pairs = [(lambda v: v.mean(axis=1), lambda v: v.mean(1)), (lambda v: v.max(axis=0), lambda v: v.amax(0)),
         (lambda v: F.logsumexp(v, axis=1), lambda v: torch.logsumexp(v, 1)),
         (lambda v: C.softmax(v, axis=1), lambda v: torch.softmax(v, 1)),
         (lambda v: C.log_softmax(v, axis=1), lambda v: torch.log_softmax(v, 1))]
pairs += [(lambda v, r=r: C.cross_entropy(v, t.numpy(), r),
           lambda v, r=r: torch.nn.functional.cross_entropy(v, t, reduction=r))
          for r in ("mean", "sum", "none")]
weights = np.random.default_rng(1).uniform(-1, 1, 12)
largest = max(compare(ours, theirs, values, weights) for ours, theirs in pairs
              for values in (np.random.default_rng(2).normal(0, 3, (4, 3)), 1000.0 * np.sign(
                  np.random.default_rng(3).normal(size=(4, 3)))))
print(f"{len(pairs)} operations, random scores and scores of +-1000: values and gradients",
      below(largest, 1e-12), "from torch's")
print("PyTorch check passed: mean, max, logsumexp, softmax, log_softmax, cross_entropy: "
      "values, grads as torch's")

# %% [markdown]
# ## Recap
#
# - `mean`, `max` and `logsumexp` reduce along axes; each backward copies
#   the gradient back along them: scaled by $1/n$, to the maxima (shared
#   in a tie), or times the softmax.
# - Softmax's Jacobian is $s_i(\delta_{ij} - s_j)$; backward needs only
#   $s \odot (g - \langle s, g \rangle)$, from the saved output.
# - Subtracting the maximum changes nothing and prevents overflow;
#   `log_softmax` computes $x - \operatorname{logsumexp}(x)$ directly and
#   stays finite where `log(softmax(x))` gives `-inf` and NaN, in both
#   frameworks.
# - `cross_entropy` is `log_softmax` then the negative log-likelihood of
#   the targets; its gradient is softmax minus one-hot, over the rows that
#   count, with PyTorch's `reduction` and `ignore_index`.
#
# ## Exercises
#
# **1. Label smoothing.** Instead of a one-hot target, train towards
# $(1 - \varepsilon)$ on the right class and $\varepsilon / C$ spread over
# all $C$ classes. Write `smoothed_cross_entropy(x, target, epsilon)` from
# `log_softmax` and `mean`, and check its value and gradient against
# PyTorch's `cross_entropy(..., label_smoothing=epsilon)`.

# %% tags=["hide-cell"]
def smoothed_cross_entropy(x, target, epsilon):
    logp = C.log_softmax(x, axis=1)
    n, classes = logp.shape
    weights = np.full((n, classes), epsilon / classes)
    weights[np.arange(n), target] += 1.0 - epsilon
    return -(logp * weights).sum(axis=1).mean()


scores = np.random.default_rng(4).normal(size=(5, 4))
target = np.array([0, 3, 1, 1, 2])
x, xt = Variable(scores.copy()), torch.tensor(scores, requires_grad=True)
smoothed_cross_entropy(x, target, 0.1).backward()
torch.nn.functional.cross_entropy(xt, torch.tensor(target), label_smoothing=0.1).backward()
print("smoothed: gradient against torch's label_smoothing", below(np.abs(x.grad.data - xt.grad.numpy()).max(), 1e-15))

# %% [markdown]
# **2. Binary cross-entropy with logits.** For one score $z$ and a label
# $y \in \{0, 1\}$ the loss is $-y \log \sigma(z) - (1 - y)\log(1 - \sigma(z))$,
# with $\sigma(z) = 1/(1 + e^{-z})$; written so, it overflows for large
# $|z|$. Show that it equals $\log(1 + e^{z}) - z y$, and that
# $\log(1 + e^z) = \operatorname{logsumexp}(0, z)$, which never overflows.
# Write `bce_with_logits(z, y)` (the mean over a batch) with package
# operations, and check it against `binary_cross_entropy_with_logits` at
# $z = \pm 800$ and at $z = 0$.

# %% tags=["hide-cell"]
def bce_with_logits(z, y):
    zero_and_z = tinypytorch.concatenate([np.zeros((z.shape[0], 1)), z.reshape(-1, 1)], axis=1)
    return (F.logsumexp(zero_and_z, axis=1) - z * y).mean()  # log(1 + e^z) - z y, then the mean


z0, y0 = np.array([800.0, -800.0, 0.0, -2.0]), np.array([0.0, 0.0, 1.0, 1.0])
z, zt = Variable(z0.copy()), torch.tensor(z0, requires_grad=True)
loss = bce_with_logits(z, y0)
loss.backward()
loss_t = torch.nn.functional.binary_cross_entropy_with_logits(zt, torch.tensor(y0))
loss_t.backward()
print(f"bce_with_logits = {loss.data:.4f} (torch {loss_t.item():.4f}); gradient",
      below(np.abs(z.grad.data - zt.grad.numpy()).max(), 1e-15), "from torch's")
