# %% [markdown]
# # Step 32: Parameters, layers and optimizers: fitting a curve
#
# Steps 29–31 gave us everything a neural network computes. Training one by
# hand, though, is bookkeeping: create every weight and bias, clear each
# gradient before each backward pass, update each one after it. The idea of
# this step, PyTorch's: **a model is a set of `Parameter`s gathered by
# `Layer`s, and an optimizer's `step()` updates all of them from their
# gradients.** With it, a small network learns $\sin(2\pi x)$ from noisy
# samples.

# %%
import sys

import matplotlib.pyplot as plt
import numpy as np
from tqdm import tqdm

import tinypytorch
import tinypytorch.functions as F
from tinypytorch import Parameter, Variable
from tinypytorch.layers import MLP, Layer, Linear
from tinypytorch.optimizers import SGD, Adam, Optimizer
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
# ## `Linear` and `MLP`
#
# `Linear(in_size, out_size)` holds a weight of shape $(\text{out}, \text{in})$
# and a bias of shape $(\text{out},)$ and computes step 31's `linear`, with
# PyTorch's argument order and layout, so weights copy between the two as
# they are. Both start uniform in $[-k, k]$, $k = 1/\sqrt{\text{in}}$, as in
# PyTorch, which keeps $Wx$ of the order of $x$ whatever the number of
# inputs. `rng`, a seeded NumPy `Generator`, makes them reproducible.

# %%
show_code(Linear, step=32)

# %% [markdown]
# A multi-layer perceptron chains `Linear` layers with an activation between
# them. `MLP((1, 10, 1))` maps one input through ten hidden units to one
# output: two `Linear` layers, 31 numbers in four parameters.

# %%
show_code(MLP, step=32)
model = MLP((1, 10, 1), rng=np.random.default_rng(1))
shapes = [(p.name, tuple(p.shape)) for p in model.params()]
print(shapes, "numbers:", sum(p.numel() for p in model.params()))

# %% [markdown]
# ## Optimizers
#
# An optimizer takes the list of parameters once, as `torch.optim` does;
# `step()` then updates every parameter that has a gradient, in place and
# under `no_grad` (an update is no part of any graph). Each optimizer says in
# `update` how one parameter moves. **SGD** moves it against its gradient,
# $p \leftarrow p - \eta\, g$. (`param.sub_(...)` is the in-place
# subtraction of step 36; read it as `param.data -= ...`.) The package also
# has `torch.optim`'s options, which no step builds and these listings leave
# out: momentum (the first exercise writes it), weight decay, `maximize`,
# `amsgrad`, AdamW, and the `closure` that `step` still names.

# %%
show_code(Optimizer.step, SGD.update, step=32)

# %% [markdown]
# **Adam** (Kingma and Ba, 2015) gives each element its own step size. It
# keeps running averages $m$ of the gradient and $v$ of its square, and steps
# by $\eta\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)$, where
# $\hat m_t = m_t/(1 - \beta_1^t)$ and $\hat v_t = v_t/(1 - \beta_2^t)$ undo
# the bias of averages that start at zero. So wherever the gradient's sign is
# steady the step is about $\eta$, however small the gradient. Its `update`
# is collapsed below (`weight_decay` and `amsgrad`, still named there, are
# off by default; `state_of` reads `self.state.setdefault(param, {})` until
# step 48); the check at the end compares three steps with `torch.optim.Adam`.

# %% tags=["hide-cell"]
show_code(Adam.update, Adam.moments, step=32)

# %% [markdown]
# ## Fitting $\sin(2\pi x)$
#
# 100 points $x$ uniform in $[0, 1]$ and $y = \sin(2\pi x) + \varepsilon$, with
# Gaussian noise of standard deviation 0.1: even the true curve has a mean
# squared error of about $0.1^2 = 0.01$. One training step is four lines:
# the loss, clear the gradients, backpropagate, update. The same network,
# from the same weights, is trained 10,000 steps with SGD ($\eta = 0.15$) and
# with Adam ($\eta = 0.005$). `tqdm` draws a progress bar, without a clock so
# that it reads the same on every machine.

# %%
rng = np.random.default_rng(0)
x = rng.uniform(0.0, 1.0, (100, 1))
y = np.sin(2 * np.pi * x) + rng.normal(0.0, 0.1, (100, 1))


def train(optimizer_class, lr, steps=10_000):
    model = MLP((1, 10, 1), rng=np.random.default_rng(1))
    optimizer = optimizer_class(model.params(), lr=lr)
    losses = []
    bar = tqdm(range(steps), desc=f"{optimizer_class.__name__:4}", file=sys.stdout,
               bar_format="{l_bar}{bar:10}| {n_fmt}/{total_fmt}", mininterval=0, miniters=1000)
    for _ in bar:
        loss = F.mean_squared_error(model(x), y)
        model.cleargrads()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


sgd_model, sgd_losses = train(SGD, lr=0.15)
adam_model, adam_losses = train(Adam, lr=0.005)

# %% tags=["hide-input"]
grid = np.linspace(0.0, 1.0, 200).reshape(-1, 1)
with tinypytorch.no_grad():  # predictions only: record no graph
    sgd_curve, adam_curve = sgd_model(grid).data, adam_model(grid).data
line = np.hstack([x, np.ones_like(x)])
best_line = np.mean((line @ np.linalg.lstsq(line, y, rcond=None)[0] - y) ** 2)

figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
left.plot(sgd_losses, label="SGD, lr = 0.15")
left.plot(adam_losses, label="Adam, lr = 0.005")
left.axhline(best_line, color="gray", linestyle="--", label="best straight line")
left.axhline(0.01, color="gray", linestyle=":", label="noise level 0.01")
left.set(yscale="log", xlabel="step", ylabel="mean squared error", title="training loss")
left.legend(fontsize=8)
right.scatter(x, y, s=10, color="gray", label="data")
right.plot(grid, np.sin(2 * np.pi * grid), "k:", label="sin(2πx)")
right.plot(grid, sgd_curve, label="SGD")
right.plot(grid, adam_curve, label="Adam")
right.set(xlabel="x", title="the fitted curves")
right.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# Both networks end near the noise level and trace the sine. Both first reach
# the best straight line within a few hundred steps and then sit on a
# plateau, where bending the curve needs the sigmoid units to move while the
# gradient is tiny. SGD's steps are proportional to the gradient, so it
# crawls along for thousands of steps; Adam's are about $\eta$ whatever the
# gradient's size, and it leaves in under 2,000. Near the end Adam's loss
# jitters (the thick line): steps of size $\eta$ keep crossing the valley's
# floor, and which way each goes depends on the last bits of the arithmetic,
# which differ between CPUs, so the page prints no losses from there.
#
# ## Check against PyTorch
#
# The same network in PyTorch, `nn.Sequential(nn.Linear(1, 10), nn.Sigmoid(),
# nn.Linear(10, 1))` in float64, with our initial weights copied in (same
# layout, same order: one `zip`). On the data above: the loss and every
# parameter's gradient after one backward pass; the parameters after one SGD
# step and after three Adam steps (the bias correction at $t = 1, 2, 3$).
# Tolerance $10^{-12}$. The twins and the comparison are collapsed.

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
assert_params_equal(*train_twins(SGD, torch.optim.SGD, 1, lr=0.15), "SGD")
assert_params_equal(*train_twins(Adam, torch.optim.Adam, 3, lr=0.005), "Adam")
print("PyTorch check passed: MLP loss, parameter grads, parameters after SGD and Adam steps equal torch's")

# %% [markdown]
# ## Recap
#
# - A `Parameter` is a Variable marked as trainable.
# - A `Layer` registers the parameters and sub-layers assigned to it, and
#   `params()` lists them all, each once, in PyTorch's order.
# - `Linear` is `linear` with its weight and bias; `MLP` chains `Linear`s
#   with an activation between them.
# - An optimizer takes the parameters once; each training step is: loss,
#   clear the gradients, `backward()`, `optimizer.step()`.
# - SGD steps by $\eta g$; Adam by about $\eta$ per element, whatever the
#   gradient's size, which gets it off a plateau sooner.
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
# **2.** Weight tying: write a layer `Tied` that applies one `Linear(4, 4)`
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
