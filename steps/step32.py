# %% [markdown]
# # Step 32: Parameters, layers and optimizers: fitting a curve
#
# Steps 29–31 gave us everything a neural network computes: `linear`,
# element-wise functions and broadcasting. Training one by hand, though, means
# bookkeeping: create every weight matrix and bias, clear each gradient before
# each backward pass, and update each one after it. With two layers that is
# four variables; with fifty layers nobody gets it right.
#
# PyTorch organises this bookkeeping with three ideas, and so does this step:
#
# - a `Parameter` is a Variable marked as something to train;
# - a `Layer` (PyTorch: `nn.Module`) owns parameters and sub-layers and can
#   list all of them: `Linear` and `MLP` are layers;
# - an optimizer (PyTorch: `torch.optim`) takes that list and updates every
#   parameter from its gradient: `SGD` and `Adam`.
#
# With two activation functions and a loss function, that is enough to fit a
# small network to noisy samples of $\sin(2\pi x)$.

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
# ## Activations and the loss
#
# A stack of linear layers is still linear: $W_2(W_1 x + b_1) + b_2$ is one
# matrix times $x$ plus one vector. A non-linear *activation* between the layers
# lets the network bend. Two classic ones:
#
# $$
# \sigma(x) = \frac{1}{1 + e^{-x}}, \quad \sigma'(x) = \sigma(x)\,(1 - \sigma(x));
# \qquad
# \operatorname{relu}(x) = \max(x, 0), \quad \operatorname{relu}'(x) = [x > 0].
# $$
#
# The textbook form of $\sigma$ computes $e^{-x}$, which overflows to infinity
# for $x < -709$ in float64. The result, $1/\infty = 0$, is nearly right, but
# NumPy prints an overflow warning. `Sigmoid` computes $z = e^{-|x|} \le 1$
# instead, which cannot overflow, and then $\sigma(x) = 1/(1 + z)$ for
# $x \ge 0$ and $\sigma(x) = z/(1 + z)$ for $x < 0$ (multiply the textbook
# form by $e^x/e^x$). The second form also keeps full precision where
# $\sigma(x) \approx e^x$ is tiny: $\sigma(-40) \approx 4.2 \times 10^{-18}$, which
# DeZero's form $\tfrac12 \tanh(x/2) + \tfrac12$ rounds to 0. The backward
# pass uses the output, as `Tanh` and `Exp` do. `ReLU`'s derivative at exactly
# 0 is taken to be 0, as in PyTorch; the mask is a constant array, so no
# gradient flows into it.

# %%
show_code(F.Sigmoid)
show_code(F.ReLU)

x = Variable(np.array([-1000.0, -40.0, -1.0, 0.0, 1.0, 1000.0]))
print("x:      ", "  ".join(f"{v:10.4g}" for v in x.data))
print("sigmoid:", "  ".join(f"{v:10.4g}" for v in F.sigmoid(x).data))
print("relu:   ", "  ".join(f"{v:10.4g}" for v in F.relu(x).data))
print(f"tanh form at -40: {0.5 * np.tanh(-20.0) + 0.5:.4g}")

# %% [markdown]
# The loss measures how far the predictions $\hat y$ are from the targets $y$.
# For regression the usual choice is the mean squared error over all $n$
# elements, PyTorch's `mse_loss`:
#
# $$
# L = \frac{1}{n} \sum_i (\hat y_i - y_i)^2, \qquad
# \frac{\partial L}{\partial \hat y_i} = \frac{2}{n} (\hat y_i - y_i), \qquad
# \frac{\partial L}{\partial y_i} = -\frac{2}{n} (\hat y_i - y_i).
# $$
#
# As one `Function` it keeps only its two inputs for the backward pass, rather
# than the difference, its square and the sum that the composed formula would
# keep.

# %%
show_code(F.MeanSquaredError)

# %% [markdown]
# ## `Parameter`
#
# A parameter is a Variable in every respect; the subclass only marks it, so
# that a layer can tell its weights apart from anything else it stores.

# %%
show_code(Parameter)

# %% [markdown]
# ## `Layer`
#
# A layer finds its parameters by watching its own attribute assignments.
# Python calls `__setattr__` for every `self.name = value`; `Layer` overrides it
# to record the name when the value is a `Parameter` or another `Layer`, in
# the order of assignment, before storing the attribute as usual. A name that is
# later given something else (`self.bias = None`) is forgotten again.
#
# `params()` then walks the layer and its sub-layers (`modules()`, depth first)
# and yields every parameter once, even when two layers share one. This is
# also the order of PyTorch's `parameters()`, which matters below: the check
# at the end pairs our parameters with PyTorch's one by one. `cleargrads()`
# clears all their gradients. PyTorch's names for the two, `parameters()` and
# `zero_grad()`, are aliases.

# %%
show_code(Layer)

# %% [markdown]
# A tiny layer of our own shows the registration: the parameter and the
# sub-layer are found; the number and the plain array are not parameters.

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
y = layer(np.ones((4, 3)))
y.sum().backward()
print("grads after backward:", [p.grad is not None for p in layer.params()])
layer.cleargrads()
print("after cleargrads:    ", [p.grad is not None for p in layer.params()])

# %% [markdown]
# Assigning a parameter before `Layer.__init__` has run would lose it, so it
# is an error, as it is in PyTorch:

# %%
class Forgetful(Layer):
    def __init__(self):
        self.w = Parameter(np.zeros(2))  # super().__init__() not called


try:
    Forgetful()
except AttributeError as error:
    print("AttributeError:", error)

# %% [markdown]
# ## `Linear`
#
# `Linear(in_size, out_size)` holds a weight of shape $(\text{out}, \text{in})$
# and a bias of shape $(\text{out},)$, and computes `linear(x, weight, bias)` of
# step 31. The argument order and the layout are PyTorch's
# (`nn.Linear(in_features, out_features)`). DeZero writes `Linear(out_size)`
# and infers `in_size` from the first input, creating the weight only then
# (PyTorch's `LazyLinear` does the same). Giving both sizes is the choice here,
# for three reasons: the order is the one a PyTorch user expects; the
# parameters exist as soon as the layer does, so a model can be inspected,
# counted, copied and handed to an optimizer before any data flows; and a
# wrong input size is reported by `linear` at the first call, naming both
# shapes.
#
# The initial values are PyTorch's: uniform in $[-k, k]$ with
# $k = 1/\sqrt{\text{in}}$. That keeps $W x$ of the same order as $x$, whatever
# the number of inputs, so the sigmoid starts out in its steep middle part
# instead of its flat tails. `rng` is a NumPy `Generator`; passing a seeded one
# makes the weights reproducible (PyTorch uses one global generator, seeded by
# `torch.manual_seed`).

# %%
show_code(Linear)

# %% [markdown]
# ## `MLP`
#
# A multi-layer perceptron is a chain of `Linear` layers with an activation
# between them. `MLP((1, 10, 1))` maps one input through ten hidden units to one
# output: two `Linear` layers, 31 parameters in four arrays.

# %%
show_code(MLP)

model = MLP((1, 10, 1), rng=np.random.default_rng(1))
for p in model.params():
    print(f"{p.name:6} {p.shape}")
print("number of parameters:", sum(p.numel() for p in model.params()))

# %% [markdown]
# ## Optimizers
#
# An optimizer takes the list of parameters once, at construction, as
# `torch.optim` does, and then `step()` updates every parameter that has a
# gradient; `zero_grad()` clears the gradients. The update changes each
# parameter in place under `no_grad`: it is not part of any graph. (It uses
# `param.sub_(...)`, the in-place subtraction of step 36; read it as
# `param.data -= ...`, which is what it does to the array.)
#
# **SGD**, plain gradient descent, moves each parameter against its gradient:
# $p \leftarrow p - \eta\, g$ with learning rate $\eta$. One $\eta$ must suit
# every parameter, however different the scales of their gradients.
#
# **Adam** (Kingma and Ba, 2015) gives each element its own step size. It
# keeps running averages of the gradient and of its square,
#
# $$
# m_t = \beta_1 m_{t-1} + (1 - \beta_1)\, g_t, \qquad
# v_t = \beta_2 v_{t-1} + (1 - \beta_2)\, g_t^2,
# $$
#
# and steps by $\eta\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)$: the step is about $\eta$
# in size wherever the gradient's sign is consistent, whatever its magnitude.
# The hats are the *bias correction*. Both averages start at $m_0 = v_0 = 0$, so
# early on they are too small: $m_1 = (1 - \beta_1)\, g_1$ is a tenth of $g_1$
# with $\beta_1 = 0.9$. In general $\mathbb{E}[m_t] \approx (1 - \beta_1^t)\, \mathbb{E}[g]$,
# so dividing by $1 - \beta_1^t$ removes the bias:
# $\hat m_t = m_t / (1 - \beta_1^t)$, $\hat v_t = v_t / (1 - \beta_2^t)$. In the first
# step $\hat m_1 / \sqrt{\hat v_1} = g_1 / |g_1|$: every element moves by
# almost exactly $\eta$. This is the update rule of `torch.optim.Adam` with its
# defaults $\beta = (0.9, 0.999)$ and $\epsilon = 10^{-8}$; $t$ counts the
# steps of each parameter separately, and a parameter without a gradient is
# skipped without advancing its $t$, as in PyTorch.

# %%
show_code(Optimizer)
show_code(SGD)
show_code(Adam)

# %% [markdown]
# ## Fitting $\sin(2\pi x)$
#
# The data: 100 points $x$ drawn uniformly from $[0, 1]$, and
# $y = \sin(2\pi x) + \varepsilon$ with Gaussian noise of standard deviation 0.1.
# Both are $(100, 1)$ arrays: a batch of 100 examples with one feature each.
# The noise sets a floor: even the true curve has a mean squared error of
# about $0.1^2 = 0.01$.

# %%
rng = np.random.default_rng(0)
x = rng.uniform(0.0, 1.0, (100, 1))
y = np.sin(2 * np.pi * x) + rng.normal(0.0, 0.1, (100, 1))
print("x:", x.shape, " y:", y.shape)
print("first three (x, y):", "  ".join(f"({a:.3f}, {b:.3f})" for a, b in zip(x[:3, 0], y[:3, 0])))

# %% [markdown]
# One training step is four lines: predict and compute the loss, clear the old
# gradients, backpropagate, update. The same two-layer sigmoid network, from
# the same initial weights, is trained twice, 10,000 steps each: with SGD
# ($\eta = 0.15$) and with Adam ($\eta = 0.005$). The loop is wrapped in `tqdm`,
# which draws a progress bar (on `sys.stdout`, so that the notebook shows it
# with the other output). The bar leaves out the clock and redraws every
# 1,000 steps, so it reads the same on every machine.

# %%
def train(optimizer_class, lr, steps=10_000):
    model = MLP((1, 10, 1), rng=np.random.default_rng(1))
    optimizer = optimizer_class(model.params(), lr=lr)
    losses = []
    bar = tqdm(range(steps), desc=f"{optimizer_class.__name__:4}", file=sys.stdout,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}", mininterval=0, miniters=1000)
    for _ in bar:
        loss = F.mean_squared_error(model(x), y)
        model.cleargrads()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


sgd_model, sgd_losses = train(SGD, lr=0.15)
adam_model, adam_losses = train(Adam, lr=0.005)

# %% [markdown]
# The losses at a few points of the run, next to two yardsticks: the loss of
# the best straight line through the data (least squares, solved directly),
# and the loss of the true curve, which is the noise. (Why the table stops at
# step 4,000 is explained below the plots.)

# %%
print(f"{'step':>6}  {'SGD':>7}  {'Adam':>7}")
for t in (0, 100, 1000, 2000, 4000):
    print(f"{t:>6}  {sgd_losses[t]:7.4f}  {adam_losses[t]:7.4f}")
line = np.hstack([x, np.ones_like(x)])
coefficients = np.linalg.lstsq(line, y, rcond=None)[0]
noise = np.mean((np.sin(2 * np.pi * x) - y) ** 2)
print(f"best straight line: {np.mean((line @ coefficients - y) ** 2):.4f}")
print(f"true curve:         {noise:.4f}")
print(f"after 10,000 steps: SGD {sgd_losses[-1]:.3f}, Adam below the true curve: {adam_losses[-1] < noise}")

# %%
grid = np.linspace(0.0, 1.0, 200).reshape(-1, 1)
with tinypytorch.no_grad():  # predictions only: record no graph
    sgd_curve, adam_curve = sgd_model(grid).data, adam_model(grid).data

figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
left.plot(sgd_losses, label="SGD, lr = 0.15")
left.plot(adam_losses, label="Adam, lr = 0.005")
left.axhline(0.01, color="gray", linestyle=":", label="noise level 0.01")
left.set_yscale("log")
left.set_xlabel("step")
left.set_ylabel("mean squared error")
left.legend()
right.scatter(x, y, s=10, color="gray", label="data")
right.plot(grid, np.sin(2 * np.pi * grid), "k:", label="sin(2πx)")
right.plot(grid, sgd_curve, label="SGD")
right.plot(grid, adam_curve, label="Adam")
right.set_xlabel("x")
right.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Both networks end close to the noise level and trace the sine; Adam's loss
# is even a little below that of the true curve, since with 31 parameters the
# network starts to fit the noise of these 100 points as well.
#
# The loss curves show the difference between the optimizers. Both reach the
# loss of the best straight line within a few hundred steps, and both then
# sit on a plateau: to bend the curve, the sigmoid units must move into a new
# configuration, and the gradient in that direction is tiny. SGD's steps are
# proportional to the gradient, so it crawls along the plateau for about
# 7,000 steps. Adam divides each element's step by the running size of its
# gradient, so small but consistent gradients still give steps of about
# $\eta$, and it leaves the plateau in under 2,000 steps.
#
# From about step 4,500 on, Adam's loss no longer falls smoothly: it jitters
# by about one per cent from step to step (the thickened line in the plot).
# Adam's steps stay of size about $\eta$ even near a minimum, so it keeps
# stepping back and forth across the bottom of the valley. Which steps go up
# and which go down then depends on the last bits of every product and sum,
# and those differ between CPUs, since NumPy and its BLAS library pick their
# code by processor: on two machines the loss at step 6,000 was 0.00885 and
# 0.00888. Printed to four digits, that part of the table would differ from
# machine to machine, so the table stops at step 4,000, where every machine
# agrees to many more digits than are printed, and for the end says only
# what holds everywhere. (The tests compare the whole run with PyTorch's:
# equal to 8 digits up to step 4,000, and within a few per cent after.)
#
# Why not simply a larger learning rate for SGD? With $\eta = 0.2$ it does
# cross the plateau sooner, but in the steeper valley beyond, the same step is
# too long: the loss shoots up in spikes (to above 1) before settling again.
# One learning rate has to suit both the flattest and the steepest direction
# of the loss; that is the problem Adam's per-element scaling addresses.
#
# ## Check against PyTorch
#
# The same network in PyTorch: `nn.Sequential(nn.Linear(1, 10), nn.Sigmoid(),
# nn.Linear(10, 1))` in float64, with our initial weights copied in. Since
# both `Linear`s store the weight as $(\text{out}, \text{in})$ and list their
# parameters in the same order, the copy is one `zip`. Then, on the data
# above: the loss and every parameter's gradient after one backward pass; the
# parameters after one SGD step; and the parameters after three Adam steps
# (three, so that the bias correction is checked at $t = 1, 2, 3$). The
# arithmetic differs from PyTorch's only in the order of a few operations, so
# the tolerance is $10^{-12}$.

# %%
import torch


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


xt, yt = torch.tensor(x), torch.tensor(y)
ours, theirs = twin_models()
loss = F.mean_squared_error(ours(x), y)
loss.backward()
loss_t = torch.nn.functional.mse_loss(theirs(xt), yt)
loss_t.backward()
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
for p, pt in zip(ours.params(), theirs.parameters(), strict=True):
    np.testing.assert_allclose(p.grad, pt.grad.numpy(), rtol=1e-12, atol=1e-15)
print(f"loss {loss.item():.6f} and the gradients of {', '.join(p.name + str(p.shape) for p in ours.params())} == torch")

for our_class, torch_class, kwargs, steps in [(SGD, torch.optim.SGD, {"lr": 0.15}, 1),
                                              (Adam, torch.optim.Adam, {"lr": 0.005}, 3)]:
    ours, theirs = twin_models()
    optimizer, optimizer_t = our_class(ours.params(), **kwargs), torch_class(theirs.parameters(), **kwargs)
    for _ in range(steps):
        ours.cleargrads()
        F.mean_squared_error(ours(x), y).backward()
        optimizer.step()
        optimizer_t.zero_grad()
        torch.nn.functional.mse_loss(theirs(xt), yt).backward()
        optimizer_t.step()
    assert_params_equal(ours, theirs, our_class.__name__)
    print(f"{our_class.__name__:4} {kwargs}: parameters after {steps} step(s) == torch.optim.{torch_class.__name__}")
print("PyTorch check passed: MLP loss, parameter grads, and parameters after SGD and Adam steps equal torch's")
