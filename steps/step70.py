# %% [markdown]
# # Step 70: Per-sample gradients
#
# A backward pass from a batch's mean loss gives **one** gradient: the
# mean of the samples' gradients, each sample's contribution added into
# the same `.grad`. Some methods need the terms of that sum one by one:
# differentially private training (DP-SGD) clips each sample's gradient
# before adding it, and the size of each sample's gradient tells which
# samples pull the model hardest. The plain way is a loop, one backward
# pass per sample. This step gets all of them in one call by composing
# two transforms the package has, `grad` ([step 65](step65.ipynb)) of
# the loss as a function of the parameters and `vmap` over the samples
# ([step 69](step69.ipynb)): `vmap(grad(loss), in_dims=(None, 0, 0))`, as
# `torch.func` does it. It
# ends with the same trick turned around: `vmap` over a stack of models'
# parameters runs an ensemble in one call (`stack_module_state`).

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import Variable, func, nn
from tinypytorch.nn import functional as F
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

tp.set_default_dtype(tp.float64)  # float64, so the checks hold to 1e-12


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


def flat(grads):
    """A dict of gradients (each with the samples in front, or not) as one row of numbers per sample."""
    rows = [np.asarray(g.data).reshape(len(Y) if g.ndim > p.ndim else 1, -1)
            for g, p in zip(grads.values(), params.values())]
    return np.concatenate(rows, axis=1)


# %% [markdown]
# ## One gradient for the batch, one per sample
#
# The task: 16 points in 4 dimensions, three classes, a small network
# (4 → 8 → 3, tanh) trained on them for a while. One label is wrong on
# purpose: the point that lies deepest inside its class is given another
# class.

# %% tags=["hide-input"]
rng = np.random.default_rng(69)
N = 16
X = tp.tensor(rng.standard_normal((N, 4)))
scores = X.data @ rng.standard_normal((4, 3))  # the classes: the largest of three linear scores
Y = tp.tensor(np.argmax(scores, axis=1))
ranked = np.sort(scores, axis=1)
FLIPPED = int(np.argmax(ranked[:, -1] - ranked[:, -2]))  # the widest margin between first and second class
Y.data[FLIPPED] = (Y.data[FLIPPED] + 1) % 3  # the wrong label
print(f"sample {FLIPPED} gets the wrong label")

tp.manual_seed(69)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
optimizer = tp.optim.SGD(model.parameters(), lr=0.5)
for _ in range(60):
    optimizer.zero_grad()
    F.cross_entropy(model(X), Y).backward()
    optimizer.step()
alone = F.cross_entropy(model(X[FLIPPED:FLIPPED + 1]), Y[FLIPPED:FLIPPED + 1]).item()
print(f"after 60 steps of SGD: mean loss {F.cross_entropy(model(X), Y).item():.2f}, "
      f"loss of sample {FLIPPED} {alone:.2f}")

# %% [markdown]
# The batch's gradient is one backward pass. The per-sample gradients are
# a loop: sample $i$ alone through the model, its loss $\ell_i$, one
# backward pass, the `.grad`s copied out. Their mean is the batch's
# gradient, since the mean loss is $\frac1N\sum_i \ell_i$ and a gradient
# is linear.

# %%
model.zero_grad()
F.cross_entropy(model(X), Y).backward()
batch_grad = {k: p.grad.data.copy() for k, p in model.named_parameters()}

loop_grads = {k: [] for k in batch_grad}
for i in range(N):  # one backward pass per sample
    model.zero_grad()
    F.cross_entropy(model(X[i:i + 1]), Y[i:i + 1]).backward()
    for k, p in model.named_parameters():
        loop_grads[k].append(p.grad.data.copy())
loop_grads = {k: np.stack(g) for k, g in loop_grads.items()}
print({k: g.shape for k, g in loop_grads.items()})
print("mean of the per-sample gradients vs the batch's gradient:",
      below(max(np.abs(loop_grads[k].mean(axis=0) - batch_grad[k]).max() for k in batch_grad), 1e-15))

# %% [markdown]
# Laid out as rows, one per sample, each the model's 67 parameters, the
# per-sample gradients show what the mean hides: the samples do not pull
# alike. The one with the wrong label pulls hardest; the points the
# model already fits well hardly pull at all. Their mean, the batch's
# gradient (the bottom row), is faint: the pulls partly cancel.

# %% tags=["hide-input"]
per_sample_rows = np.concatenate([loop_grads[k].reshape(N, -1) for k in batch_grad], axis=1)
mean_row = per_sample_rows.mean(axis=0, keepdims=True)
print("parameters:", per_sample_rows.shape[1])
limit = np.abs(per_sample_rows).max()
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.6), height_ratios=[N, 2.2], sharex=True)
image = top.imshow(per_sample_rows, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
top.set_yticks(range(N), [f"{i} (wrong label)" if i == FLIPPED else str(i) for i in range(N)], fontsize=7)
top.set_title("per-sample gradients: a row per sample (one backward pass each)", fontsize=10)
bottom.imshow(mean_row, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
bottom.set_yticks([0], ["batch (mean)"], fontsize=8)
bottom.set_xlabel("the 67 parameters: 0.weight, 0.bias, 2.weight, 2.bias")
fig.colorbar(image, ax=[top, bottom], shrink=0.8)
plt.show()

# %% [markdown]
# ## A loss as a function of the parameters, differentiated per sample
#
# `grad` differentiates a function with respect to its arguments, so the
# loss must take the parameters as an argument. `functional_call(model,
# params, args)` runs the model with the tensors of the dict `params` in
# its parameters' places, for that call only (PyTorch's
# `torch.func.functional_call`): the model is used for its structure,
# and its own parameters are left as they were.
# The function is written for **one** sample (a batch of one, as the
# model expects); `grad` gives that sample's gradient, a dict shaped as
# `params`.

# %%
params = {k: p.detach() for k, p in model.named_parameters()}


def loss_of(params, x, y):
    """The loss of one sample, as a function of the parameters."""
    logits = func.functional_call(model, params, (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


g0 = func.grad(loss_of)(params, X[0], Y[0])
print("grad of sample 0 vs the loop's:",
      below(max(np.abs(g0[k].data - loop_grads[k][0]).max() for k in g0), 1e-15))

# %% [markdown]
# `vmap` maps that over the batch: `in_dims=(None, 0, 0)` says the
# parameters are shared (not batched) and `x`, `y` are batched along
# dim 0. Each result comes back with the 16 samples in front.

# %%
per_sample = func.vmap(func.grad(loss_of), in_dims=(None, 0, 0))(params, X, Y)
print({k: tuple(g.shape) for k, g in per_sample.items()})
print("vmap(grad) vs the loop of 16 backward passes:",
      below(max(np.abs(per_sample[k].data - loop_grads[k]).max() for k in per_sample), 1e-14))

# %% [markdown]
# ## Why it equals the loop: a copy of the parameters per sample
#
# Inside `vmap` the forward pass runs once, on the whole batch. If `grad`
# made its leaf of the shared parameters, the 16 losses would all hang
# from that one leaf, and a backward pass from them would add their
# gradients into it: the batch's sum again, not the terms. So before the
# forward pass `grad` gives each sample **its own copy**: `_physical_leaf`
# broadcasts an argument that every sample shares to the batch (a
# broadcast view of `(16, …)`, no memory copied) and makes that the leaf.
# Sample $i$'s loss uses row $i$ of it and no other row, so
#
# $$\frac{\partial}{\partial W_i}\sum_j \ell_j(W_j) = \frac{\partial \ell_i}{\partial W_i},$$
#
# and one backward pass, seeded with a one for each sample's loss
# (`_physical_pair`), fills row $i$ with sample $i$'s gradient: exactly
# what the loop's $i$-th backward pass computed, the same derivatives
# taken for all samples at once. `run_recorded` is where `grad`, `vjp` and
# `jacrev` make their leaves; outside `vmap` `_open_levels` is empty and
# the leaf is a new leaf on the argument's data, as in step 65.

# %%
show_code(func._Call.run_recorded, func._physical_leaf, func._physical_pair, step=70)

# %% [markdown]
# The same by hand, on a linear model $\ell_i = (x_i\cdot w - t_i)^2$
# with a shared $w$ of 3 numbers: the shared leaf gets the sum of the
# samples' gradients; the copy, a leaf of 16 rows, gets one row each,
# $2(x_i\cdot w - t_i)\,x_i$.

# %%
Xl, t, w0 = rng.standard_normal((N, 3)), rng.standard_normal(N), rng.standard_normal(3)
by_formula = 2 * (Xl @ w0 - t)[:, None] * Xl  # sample i's gradient, worked out by hand

w = Variable(w0.copy(), requires_grad=True)  # one leaf that every sample shares
losses = (tp.matmul(tp.tensor(Xl), w) - tp.tensor(t)) ** 2
losses.sum().backward()
print("shared leaf: w.grad", w.grad.shape, "= the sum of the rows:",
      below(np.abs(w.grad.data - by_formula.sum(0)).max(), 1e-13))

copies = Variable(np.broadcast_to(w0, (N, 3)), requires_grad=True)  # w per sample (a broadcast view)
losses = ((copies * tp.tensor(Xl)).sum(dim=1) - tp.tensor(t)) ** 2
losses.backward(tp.ones(N))  # a one for each sample's loss
print("one copy per sample: copies.grad", copies.grad.shape, "= the rows:",
      below(np.abs(copies.grad.data - by_formula).max(), 1e-13))

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 2.6))
edges = [("w", "mm"), ("X", "mm"), ("mm", "l"), ("l", "sum"), ("sum", "L")]
draw_dag({"w": ("leaf", "w (3,)"), "X": ("variable", "X (16, 3)"), "mm": ("function", "(X w - t)²"),
          "l": ("variable", "ℓ (16,)"), "sum": ("function", "sum"), "L": ("output", "L")}, edges, ax=left,
         positions={"w": (0, 0.5), "X": (0, -0.5), "mm": (1.2, 0), "l": (2.3, 0), "sum": (3.2, 0),
                    "L": (4.0, 0)},
         notes={"w": "w.grad = Σᵢ ∂ℓᵢ/∂w"}, title="the batch's loss: one leaf, gradients added")
draw_dag({"w": ("variable", "w (3,)"), "b": ("function", "broadcast"), "W": ("leaf", "W (16, 3)"),
          "X": ("variable", "X (16, 3)"), "mm": ("function", "(Wᵢ·xᵢ - tᵢ)²"), "l": ("output", "ℓ (16,)")},
         [("w", "b"), ("b", "W"), ("W", "mm"), ("X", "mm"), ("mm", "l")], ax=right,
         positions={"w": (0, 0.5), "b": (1, 0.5), "W": (2.1, 0.5), "X": (2.1, -0.6), "mm": (3.3, 0),
                    "l": (4.4, 0)},
         notes={"W": "W.grad[i] = ∂ℓᵢ/∂w", "l": "seeded with ones"},
         title="inside vmap(grad(f)): a copy per sample")
plt.tight_layout()
plt.show()

# %% [markdown]
# The loop runs 16 small forward and backward passes; `vmap(grad)` runs
# one of each on the whole batch, with batched operations in place of
# the loop. The work is the same arithmetic, in fewer and larger
# operations; `bench/speed_per_sample.py` measures the two in
# tinypytorch and in PyTorch.
#
# ## Clipping each sample's gradient (DP-SGD)
#
# Differentially private SGD (Abadi et al.) bounds how much any
# one sample can move the model: each sample's gradient $g_i$ is scaled
# down to a norm of at most $C$, $g_i \min(1, C/\lVert g_i\rVert)$, before
# the mean is taken (then Gaussian noise of a size set by $C$ is added,
# which this page leaves out). That needs every $\lVert g_i\rVert$, the
# norm over all of the model's parameters: the per-sample gradients.

# %%
rows = flat(per_sample)  # (16, 67): each sample's gradient as one row
norms = np.linalg.norm(rows, axis=1)
C = 0.5
clipped = rows * np.minimum(1, C / norms)[:, None]
print("norms of the per-sample gradients:", np.round(norms, 3))
print(f"sample {FLIPPED} (wrong label): {norms[FLIPPED]:.3f}; the median: {np.median(norms):.3f}")
share = norms[FLIPPED] / norms.sum(), min(norms[FLIPPED], C) / np.minimum(norms, C).sum()
print(f"its part of the sum of the norms: {share[0]:.0%} unclipped, {share[1]:.0%} clipped at C = {C}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar(range(N), norms, color=["tab:red" if i == FLIPPED else "tab:blue" for i in range(N)])
ax.axhline(C, color="0.3", ls="--", lw=1)
ax.set_xticks(range(N))
ax.set_xlabel("sample (red: the wrong label)"), ax.set_ylabel("‖gᵢ‖")
ax.set_yscale("log")
ax.set_title(f"each sample's gradient norm; dashed: the clipping norm C = {C}", fontsize=10)
plt.tight_layout()
plt.show()

# %% [markdown]
# Unclipped, the wrong label has the largest say in the step. Clipped
# at $C$, it counts no more than any other sample whose gradient
# reaches $C$. (The norm of the batch's
# gradient alone, which `clip_grad_norm_` of [step 56](step56.ipynb)
# would clip, cannot tell which sample it came from.)
#
# ## Ensembles: vmap over models
#
# `vmap` batches any argument, the parameters too. $M$ models of one
# architecture, each with its own weights, are $M$ sets of parameters of
# the same shapes: stacked along a new first dim, they are one batched
# argument. `stack_module_state(models)` does the stacking, PyTorch's
# way: a dict of stacked parameters (new leaves that require grad, not
# views of the models' own) and a dict of stacked buffers, by name.

# %%
show_code(func.stack_module_state, func._stacked_leaf, step=70)

# %% [markdown]
# With `in_dims=(0, 0, None)` the parameters and buffers are batched
# along the models and the data is shared: every model sees the same 16
# points, and the output has the models in front.

# %%
M = 5
tp.manual_seed(0)
models = [nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)) for _ in range(M)]
stacked_params, stacked_buffers = func.stack_module_state(models)
print({k: tuple(p.shape) for k, p in stacked_params.items()}, stacked_buffers)
print("new leaves that require grad:",
      all(p.requires_grad and p.creator is None for p in stacked_params.values()))


def ensemble_member(params, buffers, x):
    return func.functional_call(models[0], (params, buffers), (x,))  # models[0] lends only its structure


outputs = func.vmap(ensemble_member, in_dims=(0, 0, None))(stacked_params, stacked_buffers, X)
print("outputs:", tuple(outputs.shape), "(models, samples, classes)")
print("row m vs model m called alone:",
      below(max(np.abs(outputs.data[m] - models[m](X).data).max() for m in range(M)), 1e-15))

# %% [markdown]
# The stacked parameters are leaves, so a loss of all $M$ outputs
# trains the $M$ models at once: one backward pass gives each stacked
# parameter the gradients of its $M$ models, and an optimizer over
# `stacked_params.values()` steps them all.

# %%
loss = sum(F.cross_entropy(outputs[m], Y) for m in range(M))
loss.backward()
models[2].zero_grad()
F.cross_entropy(models[2](X), Y).backward()
error = max(np.abs(stacked_params[k].grad.data[2] - p.grad.data).max()
            for k, p in models[2].named_parameters())
print("gradient of model 2, from the ensemble vs alone:", below(error, 1e-15))

# %% [markdown]
# ## Check against PyTorch
#
# The same network in `torch.nn` with the same weights (float64): the
# per-sample gradients of its cross-entropy against `torch.func`'s
# `vmap(grad)` and torch's own loop of 16 backward passes, their norms,
# and the ensemble: `stack_module_state` and the outputs of `vmap` over
# the models, against `torch.func`'s; `rtol=1e-10`.

# %% tags=["hide-input"]
import torch  # noqa: E402
import torch.func as tfunc  # noqa: E402


def torch_copy(ours):
    """The same network in torch.nn, with our weights."""
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    theirs.load_state_dict({k: torch.tensor(np.asarray(v.data)) for k, v in ours.state_dict().items()})
    return theirs


def close(ours, theirs):
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=1e-10, atol=1e-14)


# %%
t_model, tX, tY = torch_copy(model), torch.tensor(X.data), torch.tensor(Y.data)


def t_loss_of(params, x, y):
    logits = tfunc.functional_call(t_model, params, (x.unsqueeze(0),))
    return torch.nn.functional.cross_entropy(logits, y.unsqueeze(0))


t_per_sample = tfunc.vmap(tfunc.grad(t_loss_of), in_dims=(None, 0, 0))(
    {k: p.detach() for k, p in t_model.named_parameters()}, tX, tY)
for i in range(N):  # torch's loop
    t_model.zero_grad()
    torch.nn.functional.cross_entropy(t_model(tX[i:i + 1]), tY[i:i + 1]).backward()
    for k, p in t_model.named_parameters():
        close(per_sample[k].data[i], p.grad)
for k in per_sample:
    close(per_sample[k].data, t_per_sample[k])
t_norms = torch.cat([g.reshape(N, -1) for g in t_per_sample.values()], dim=1).norm(dim=1)
close(norms, t_norms)
print(f"per-sample gradients ({N} samples, 4 tensors) and their norms equal torch.func's and torch's loop")

t_models = [torch_copy(m) for m in models]
t_params, t_buffers = tfunc.stack_module_state(t_models)
for k in t_params:
    close(stacked_params[k].data, t_params[k])
    assert stacked_params[k].requires_grad == t_params[k].requires_grad and t_params[k].is_leaf
t_member = lambda p, b, x: tfunc.functional_call(t_models[0], (p, b), (x,))  # noqa: E731
t_outputs = tfunc.vmap(t_member, in_dims=(0, 0, None))(t_params, t_buffers, tX)
close(outputs.data, t_outputs)
print(f"stack_module_state and the ensemble's outputs ({M} models) equal torch.func's")
print("PyTorch check passed: per-sample gradients, their norms and the vmap ensemble equal torch's")

# %% [markdown]
# ## Recap
#
# - A batch's backward pass gives the mean of the per-sample gradients;
#   the terms themselves need one backward pass per sample, or
#   `vmap(grad(loss), in_dims=(None, 0, 0))` of a loss written for one
#   sample as a function of the parameters (`functional_call`).
# - Inside `vmap`, `grad` differentiates a per-sample copy of each
#   shared argument (`_physical_leaf`: broadcast to the batch, made the
#   leaf). Sample $i$'s loss depends on row $i$ only, so one backward pass
#   puts each sample's gradient in its row: the loop's values.
# - Per-sample norms are what DP-SGD clips: no single sample moves the
#   model by more than $C$.
# - `stack_module_state` stacks $M$ models' parameters as new leaves;
#   `vmap(..., in_dims=(0, 0, None))` runs the ensemble in one call.
#
# ## Exercises
#
# **1. Linear regression by hand.** For $\hat y = w\cdot x + b$ and the
# squared error $(\hat y - y)^2$, a sample's gradient is
# $2(\hat y_i - y_i)\,(x_i, 1)$. Get the per-sample gradients of an
# `nn.Linear(3, 1)` with `vmap(grad)` and compare them with the formula.

# %% tags=["hide-cell"]
tp.manual_seed(1)
regression = nn.Linear(3, 1)
Xr, yr = tp.tensor(rng.standard_normal((6, 3))), tp.tensor(rng.standard_normal(6))
r_params = {k: p.detach() for k, p in regression.named_parameters()}


def squared_error(params, x, y):
    return ((func.functional_call(regression, params, (x,)) - y) ** 2).sum()


r_grads = func.vmap(func.grad(squared_error), in_dims=(None, 0, 0))(r_params, Xr, yr)
residual = Xr.data @ regression.weight.data[0] + regression.bias.data[0] - yr.data
print("weight:", below(np.abs(r_grads["weight"].data[:, 0] - 2 * residual[:, None] * Xr.data).max(), 1e-14),
      "| bias:", below(np.abs(r_grads["bias"].data[:, 0] - 2 * residual).max(), 1e-14))

# %% [markdown]
# **2. One step of DP-SGD (without the noise).** From the per-sample
# gradients of the classifier above, clip each to norm $C = 0.5$, take
# their mean, and make one SGD step with learning rate 0.5 on a copy of
# `params`. Which sample's loss rises or falls the most?

# %% tags=["hide-cell"]
scale = np.minimum(1, C / norms)  # one factor per sample
stepped = {}
for k, p in params.items():
    mean_clipped = (per_sample[k].data * scale.reshape((N,) + (1,) * p.ndim)).mean(axis=0)
    stepped[k] = Variable(p.data - 0.5 * mean_clipped, requires_grad=False)
before = func.vmap(loss_of, in_dims=(None, 0, 0))(params, X, Y).data
after = func.vmap(loss_of, in_dims=(None, 0, 0))(stepped, X, Y).data
change = after - before
print("loss change per sample:", np.round(change, 4))
print("largest change: sample", int(np.argmax(np.abs(change))))

# %% [markdown]
# **3. Per-sample gradients of every model of the ensemble.** Nest the
# two `vmap`s: the inner one over the samples (`in_dims=(None, 0, 0)`),
# the outer one over the models (`in_dims=(0, None, None)`). Check the
# block of model 2 and sample 3 against one backward pass.

# %% tags=["hide-cell"]
def member_loss(params, x, y):
    return F.cross_entropy(func.functional_call(models[0], params, (x.unsqueeze(0),)), y.unsqueeze(0))


every = func.vmap(func.vmap(func.grad(member_loss), in_dims=(None, 0, 0)), in_dims=(0, None, None))(
    stacked_params, X, Y)
print({k: tuple(g.shape) for k, g in every.items()})
models[2].zero_grad()
F.cross_entropy(models[2](X[3:4]), Y[3:4]).backward()
print("model 2, sample 3:", below(max(np.abs(every[k].data[2, 3] - p.grad.data).max()
                                      for k, p in models[2].named_parameters()), 1e-15))
