# %% [markdown]
# # Step 32: Parameters, layers and optimizers: fitting a curve
#
# Steps 29–31 gave us everything a neural network computes. Training one by
# hand, though, is bookkeeping: create every weight and bias, clear each
# gradient before each backward pass, update each one after it. The idea of
# this step, PyTorch's: **a model is a set of `Parameter`s gathered by
# `Layer`s, and an optimizer's `step()` updates all of them from their
# gradients.** With it, and plain gradient descent (SGD), a small network
# learns $\sin(2\pi x)$ from noisy samples.

# %%
import sys

import matplotlib.pyplot as plt
import numpy as np
from tqdm import tqdm

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Parameter, Variable
from tinypytorch.layers import MLP, Layer, Linear
from tinypytorch.optimizers import SGD, Optimizer
from tinypytorch.utils.listing import show_code

# %% [markdown]
# The network also needs a non-linear *activation* between its layers (a
# stack of linear maps is one linear map) and a *loss*. This step adds
# `sigmoid`, `relu` and `mean_squared_error` (PyTorch's `mse_loss`), each a
# `Function` like those of step 29; their code, and why `Sigmoid` computes
# $e^{-|x|}$ rather than $e^{-x}$ (no overflow for $x < -709$), are in the
# collapsed cell.

# %% tags=["hide-cell"]
show_code(F.Sigmoid, F.ReLU, step=32)
x = Variable(np.array([-1000.0, -40.0, -1.0, 0.0, 1.0, 1000.0]))
print("x:      ", "  ".join(f"{v:10.4g}" for v in x.data))
print("sigmoid:", "  ".join(f"{v:10.4g}" for v in F.sigmoid(x).data))
print("relu:   ", "  ".join(f"{v:10.4g}" for v in F.relu(x).data))
print(f"DeZero's form 0.5 tanh(x/2) + 0.5 at -40: {0.5 * np.tanh(-20.0) + 0.5:.4g}")

# %% [markdown]
# ## `Parameter` and `Layer`
#
# A parameter is a Variable in every respect; the subclass only marks it as
# something to train.

# %%
show_code(Parameter, step=32)

# %% [markdown]
# A layer finds its parameters by watching its own attribute assignments.
# Python calls `__setattr__` for every `self.name = value`; `Layer` records the
# name when the value is a `Parameter` or another `Layer`, in the order of
# assignment. `params()` walks the layer and its sub-layers (`modules()`,
# depth first) and yields every parameter once, in the order of PyTorch's
# `parameters()`; `cleargrads()` clears all their gradients. PyTorch's names,
# `parameters()` and `zero_grad()`, are aliases.

# %%
show_code(Layer, step=32)

# %% [markdown]
# A tiny layer of our own: the parameter and the sub-layer are registered,
# the string and the plain array are not. (Assigning a parameter before
# `super().__init__()` is an `AttributeError`, as in PyTorch; the tests try it.)

# %%
class Scaled(Layer):
    def __init__(self):
        super().__init__()
        self.scale = Parameter(np.array(2.0), name="scale")
        self.inner = Linear(3, 2, rng=np.random.default_rng(0))
        self.note = "not a parameter"
        self.table = np.zeros(3)

    def forward(self, x):
        return self.inner(x) * self.scale


layer = Scaled()
print("registered:", layer._registered)
print("params:    ", [(p.name, p.shape) for p in layer.params()])

# %% [markdown]
# ## A model: `Linear` and `MLP`
#
# The curve is fitted by a model built from two layers of the package.
# `Linear(in_size, out_size)` holds a weight of shape $(\text{out}, \text{in})$
# and a bias of shape $(\text{out},)$ and computes step 31's `linear`, with
# PyTorch's layout, so weights copy between the two as they are. Both start
# uniform in $[-k, k]$, $k = 1/\sqrt{\text{in}}$, as in PyTorch; `rng`, a
# seeded NumPy `Generator`, makes them reproducible. `MLP` (a multi-layer
# perceptron) chains `Linear` layers with an activation between them.

# %%
show_code(Linear, MLP, step=32)

# %% [markdown]
# `MLP((1, 10, 1))` maps one input through ten hidden units to one output.
# Its parameters sit two layers down, yet `params()` finds all four: 31
# numbers, which the optimizer will train.

# %%
model = MLP((1, 10, 1), rng=np.random.default_rng(1))
shapes = [(p.name, tuple(p.shape)) for p in model.params()]
print(shapes, "numbers:", sum(p.numel() for p in model.params()))

# %% [markdown]
# ## The optimizer
#
# An optimizer takes the list of parameters once, as `torch.optim` does;
# `step()` then updates every parameter that has a gradient, in place and
# under `no_grad` (an update is no part of any graph). A subclass says in
# `update` how one parameter moves. **SGD** moves it against its gradient,
# $p \leftarrow p - \eta\, g$, with the learning rate $\eta$.
# (`param.sub_(...)` is the in-place subtraction of step 36; read it as
# `param.data -= ...`.) The package also has `torch.optim`'s options, which
# these listings leave out: momentum (the first exercise writes it), Adam
# (the second), weight decay, `maximize`, AdamW, and the `closure` that
# `step` still names.

# %%
show_code(Optimizer.step, SGD.update, step=32)

# %% [markdown]
# ## Fitting $\sin(2\pi x)$
#
# 100 points $x$ uniform in $[0, 1]$ and $y = \sin(2\pi x) + \varepsilon$, with
# Gaussian noise of standard deviation 0.1: even the true curve has a mean
# squared error of about $0.1^2 = 0.01$. One training step is four lines:
# the loss, clear the gradients, backpropagate, update. The network above is
# trained 10,000 steps with SGD, $\eta = 0.15$. `tqdm` draws a progress bar,
# without a clock so that it reads the same on every machine.

# %%
rng = np.random.default_rng(0)
x = rng.uniform(0.0, 1.0, (100, 1))
y = np.sin(2 * np.pi * x) + rng.normal(0.0, 0.1, (100, 1))


def train(optimizer_class, lr, steps=10_000):
    model = MLP((1, 10, 1), rng=np.random.default_rng(1))
    optimizer = optimizer_class(model.params(), lr=lr)
    losses = []
    bar = tqdm(range(steps), desc=optimizer_class.__name__, file=sys.stdout,
               bar_format="{l_bar}{bar:10}| {n_fmt}/{total_fmt}", mininterval=0, miniters=1000)
    for _ in bar:
        loss = F.mean_squared_error(model(x), y)
        model.cleargrads()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


sgd_model, sgd_losses = train(SGD, lr=0.15)
sgd_below = next(i for i, value in enumerate(sgd_losses) if value < 0.05)
print(f"loss: {sgd_losses[0]:.4f} at the start, {sgd_losses[-1]:.4f} after {len(sgd_losses):,} steps; "
      f"first below 0.05 at step {sgd_below:,}")

# %% tags=["hide-input"]
grid = np.linspace(0.0, 1.0, 200).reshape(-1, 1)
with tinypytorch.no_grad():  # predictions only: record no graph
    sgd_curve = sgd_model(grid).data
line = np.hstack([x, np.ones_like(x)])
best_line = np.mean((line @ np.linalg.lstsq(line, y, rcond=None)[0] - y) ** 2)

figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
left.plot(sgd_losses, label="SGD, lr = 0.15")
left.axhline(best_line, color="gray", linestyle="--", label="best straight line")
left.axhline(0.01, color="gray", linestyle=":", label="noise level 0.01")
left.set(yscale="log", xlabel="step", ylabel="mean squared error", title="training loss")
left.legend(fontsize=8, loc="center left")
right.scatter(x, y, s=10, color="gray", label="data")
right.plot(grid, np.sin(2 * np.pi * grid), "k:", label="sin(2πx)")
right.plot(grid, sgd_curve, label="SGD, after 10,000 steps")
right.set(xlabel="x", title="the fitted curve")
right.legend(fontsize=8, loc="upper right")
plt.tight_layout()
plt.show()

# %% [markdown]
# Within a few hundred steps the network is as good as the best straight
# line, and then it sits on a plateau: bending the curve needs the sigmoid
# units to move, and there the gradient is tiny. SGD's steps are
# proportional to the gradient, so it crawls along for thousands of steps
# before the loss falls, and after 10,000 it is still on its way down to the
# noise level, with a curve that already traces the sine. (Adam, the second
# exercise, leaves the plateau several times sooner.)
#
# ## Check against PyTorch
#
# The same network in PyTorch, `nn.Sequential(nn.Linear(1, 10), nn.Sigmoid(),
# nn.Linear(10, 1))` in float64, with our initial weights copied in (same
# layout, same order: one `zip`). On the data above: the loss and every
# parameter's gradient after one backward pass; then every parameter after
# 100 training steps of our `SGD` and of `torch.optim.SGD`, each on its own
# model. Tolerance $10^{-12}$. The twins and the comparison are collapsed.

# %% tags=["hide-input"]
import torch  # noqa: E402


def twin_models():
    ours = MLP((1, 10, 1), rng=np.random.default_rng(1))
    theirs = torch.nn.Sequential(torch.nn.Linear(1, 10), torch.nn.Sigmoid(), torch.nn.Linear(10, 1)).double()
    with torch.no_grad():
        for p, pt in zip(ours.params(), theirs.parameters(), strict=True):
            pt.copy_(torch.tensor(p.data))
    return ours, theirs


def assert_params_equal(ours, theirs, what):
    for p, pt in zip(ours.params(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.data, pt.detach().numpy(), rtol=1e-12, atol=1e-15, err_msg=what)


def train_twins(our_class, torch_class, steps, **kwargs):
    """`steps` steps of our optimizer and torch's on twin models; returns the two models."""
    ours, theirs = twin_models()
    optimizer, optimizer_t = our_class(ours.params(), **kwargs), torch_class(theirs.parameters(), **kwargs)
    for _ in range(steps):
        ours.cleargrads()
        F.mean_squared_error(ours(x), y).backward()
        optimizer.step()
        optimizer_t.zero_grad()
        torch.nn.functional.mse_loss(theirs(xt), yt).backward()
        optimizer_t.step()
    return ours, theirs


xt, yt = torch.tensor(x), torch.tensor(y)

# %%
ours, theirs = twin_models()
loss, loss_t = F.mean_squared_error(ours(x), y), torch.nn.functional.mse_loss(theirs(xt), yt)
loss.backward()
loss_t.backward()
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
for p, pt in zip(ours.params(), theirs.parameters(), strict=True):
    np.testing.assert_allclose(p.grad, pt.grad.numpy(), rtol=1e-12, atol=1e-15)
assert_params_equal(*train_twins(SGD, torch.optim.SGD, 100, lr=0.15), "SGD")
print("PyTorch check passed: MLP loss, parameter grads, parameters after 100 SGD steps equal torch's")

# %% [markdown]
# ## Recap
#
# - A `Parameter` is a Variable marked as trainable.
# - A `Layer` registers the parameters and sub-layers assigned to it, and
#   `params()` lists them all, each once, in PyTorch's order.
# - A model is layers of layers (`MLP` of `Linear`s); its `params()` are
#   every parameter inside, however deep.
# - An optimizer takes the parameters once; `step()` updates each of them
#   from its gradient. Each training step is: loss, clear the gradients,
#   `backward()`, `optimizer.step()`.
# - SGD steps by $\eta g$: where the gradient is tiny, on a plateau, it
#   crawls.
#
# ## Exercises
#
# **1.** Write `Momentum(Optimizer)`, SGD with momentum as `torch.optim.SGD`
# has it: a buffer $b \leftarrow \mu b + g$ per parameter, starting at the
# first $g$, and $p \leftarrow p - \eta b$. Keep the buffer in
# `self.state[param]`. Compare five steps with `torch.optim.SGD(...,
# momentum=0.9)`.

# %% tags=["hide-cell"]
class Momentum(Optimizer):
    def __init__(self, params, lr, momentum=0.9):
        super().__init__(params, {"lr": lr, "momentum": momentum})

    def update(self, param, grad, group):
        state = self.state.setdefault(param, {})
        if "buffer" not in state:
            state["buffer"] = grad.copy()  # the first step starts at the gradient itself
        else:
            state["buffer"] = group["momentum"] * state["buffer"] + grad
        param.data = param.data - group["lr"] * state["buffer"]


ours, theirs = train_twins(Momentum, torch.optim.SGD, 5, lr=0.1, momentum=0.9)
assert_params_equal(ours, theirs, "Momentum")
print("5 steps of Momentum equal torch.optim.SGD(momentum=0.9)")

# %% [markdown]
# **2.** Write Adam (Kingma and Ba, 2015) as `PlainAdam(Optimizer)`. It
# keeps running averages $m \leftarrow \beta_1 m + (1 - \beta_1) g$ of the
# gradient and $v \leftarrow \beta_2 v + (1 - \beta_2) g^2$ of its square,
# both starting at zero, and steps by
# $p \leftarrow p - \eta\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)$, where
# $\hat m_t = m_t/(1 - \beta_1^t)$ and $\hat v_t = v_t/(1 - \beta_2^t)$ undo
# the bias of averages that start at zero ($t$ counts the parameter's
# steps from 1; the defaults are $\beta_1 = 0.9$, $\beta_2 = 0.999$,
# $\epsilon = 10^{-8}$). Compare three steps with `torch.optim.Adam`. Then
# fit the curve with it, $\eta = 0.005$: at which step does the loss first
# fall below 0.05, against SGD's step above, and why?

# %% tags=["hide-cell"]
class PlainAdam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    def update(self, param, grad, group):
        (beta1, beta2), state = group["betas"], self.state.setdefault(param, {})
        if not state:
            state.update(t=0, m=np.zeros_like(grad), v=np.zeros_like(grad))
        state["t"] += 1
        state["m"] = beta1 * state["m"] + (1 - beta1) * grad
        state["v"] = beta2 * state["v"] + (1 - beta2) * grad * grad
        m_hat = state["m"] / (1 - beta1 ** state["t"])
        v_hat = state["v"] / (1 - beta2 ** state["t"])
        param.data = param.data - group["lr"] * m_hat / (np.sqrt(v_hat) + group["eps"])


ours, theirs = train_twins(PlainAdam, torch.optim.Adam, 3, lr=0.005)
assert_params_equal(ours, theirs, "PlainAdam")
print("3 steps of PlainAdam equal torch.optim.Adam")
adam_model, adam_losses = train(PlainAdam, lr=0.005, steps=3_000)
adam_below = next(i for i, value in enumerate(adam_losses) if value < 0.05)
print(f"first below 0.05: SGD at step {sgd_below:,}, Adam at step {adam_below:,}")
# Why: where the gradient's sign is steady, m_hat / sqrt(v_hat) is about +-1, so each
# element moves by about lr however small its gradient. Adam crosses the plateau
# where SGD, stepping by lr * g, crawls.
# The package's Adam, with torch's options (weight_decay and amsgrad, still named,
# are off by default; state_of reads self.state.setdefault(param, {}) until step 48):
from tinypytorch.optimizers import Adam

show_code(Adam.update, Adam.moments, step=32)

# %% [markdown]
# **3.** Weight tying: write a layer `Tied` that applies one `Linear(4, 4)`
# twice, $y = L(\tanh L(x))$. How many parameters does `params()` list, and
# is the shared weight's gradient the sum of its two uses? Compare with the
# same model in PyTorch.

# %% tags=["hide-cell"]
class Tied(Layer):
    def __init__(self):
        super().__init__()
        self.inner = Linear(4, 4, rng=np.random.default_rng(2))

    def forward(self, x):
        return self.inner(tinypytorch.tanh(self.inner(x)))


tied = Tied()
inner_t = torch.nn.Linear(4, 4).double()
with torch.no_grad():
    for p, pt in zip(tied.params(), inner_t.parameters(), strict=True):
        pt.copy_(torch.tensor(p.data))
batch = np.random.default_rng(3).uniform(-1, 1, (5, 4))
(tied(batch) ** 2).sum().backward()
(inner_t(torch.tanh(inner_t(torch.tensor(batch)))) ** 2).sum().backward()
print("parameters listed:", len(list(tied.params())), "(torch:", len(list(inner_t.parameters())), end=") ")
print("grads equal torch's:", all(np.allclose(p.grad.data, pt.grad.numpy(), rtol=1e-12, atol=1e-15)
                                   for p, pt in zip(tied.params(), inner_t.parameters())))
