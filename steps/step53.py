# %% [markdown]
# # Step 53: Module hooks and the optimizer inside backward
#
# Step 34 hung hooks on a variable's gradient. A model is made of modules,
# and most questions about it are asked per module: what does the third
# layer output, how large are the gradients that reach it, why are they
# NaN? PyTorch answers with **module hooks**: functions that
# `module(x)` calls before and after `forward`, and in backward before
# and after the module's own gradients. This step builds the four of them
# on step 52's `nn.Module`, as PyTorch builds them, down to the identity
# Functions that the full backward hook wraps around a module. Then a
# hook of step 34's family, the post-accumulate-grad hook, moves the
# optimizer inside backward, where each gradient can be freed as soon as
# it is used.

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, nn, optim
from tinypytorch.nn import module_hooks
from tinypytorch.utils.listing import show_code

tinypytorch.set_default_dtype(tinypytorch.float64)  # float64, so the checks hold to 1e-12 (step 59)


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


def build(n, seed=0):
    """The page's model in `n` (tinypytorch.nn or torch.nn): three Linear layers, tanh between them."""
    return n.Sequential(n.Linear(4, 8), n.Tanh(), n.Linear(8, 8), n.Tanh(), n.Linear(8, 2))


# %% [markdown]
# ## Forward hooks: looking inside a model
#
# `register_forward_hook(hook)` makes every call of the module end with
# `hook(module, args, output)`. Registered on every module of a model, it
# records each layer's activations, a first look when a network trains
# badly: are the tanh layers saturated, are the scales drifting?

# %%
tinypytorch.manual_seed(0)
model = build(nn)
stats = {}


def record(module, args, output):
    stats[name_of[module]] = (output.shape, output.data.mean(), output.data.std(), output.data.copy())


name_of = {module: name for name, module in model.named_modules()}
handles = [module.register_forward_hook(record) for name, module in model.named_modules() if name]
x = Variable(np.random.default_rng(0).normal(size=(64, 4)), requires_grad=False)
y = model(x)
for name, (shape, mean, std, _) in stats.items():
    print(f"{name} {type(model[int(name)]).__name__:6} output {shape}  mean {mean:+.2f}  std {std:.2f}")
for handle in handles:
    handle.remove()

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 5, figsize=(11, 2.6), sharey=True)
for axis, (name, (_, _, _, values)) in zip(axes, stats.items()):
    axis.hist(values.ravel(), bins=30, color="tab:blue" if name in "024" else "tab:orange")
    axis.set_title(f"{name}: {type(model[int(name)]).__name__}", fontsize=9)
    axis.set_xlabel("output value", fontsize=9)
axes[0].set_ylabel("count", fontsize=9)
fig.suptitle("each module's output, recorded by a forward hook during one call of the model", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# `register_forward_pre_hook(hook)` runs `hook(module, args)` before
# forward, with the positional arguments as a tuple. Either hook may
# return a replacement: new arguments (a single value is wrapped in a
# tuple) or a new output. Each `register_*` returns a handle whose
# `remove()` takes the hook off (a second `remove()` does nothing).
# `prepend=True` puts a hook before those already there. Seen from
# `Module.__call__`, which hands its call to `module_hooks.call`:

# %%
show_code(module_hooks.call, module_hooks._run_forward_pre_hooks)

# %% [markdown]
# A debugging pre-hook: stop at the first module that receives a NaN,
# naming it, instead of a NaN loss much later.

# %%
def no_nan(module, args):
    if any(np.isnan(a.data).any() for a in args):
        raise FloatingPointError(f"NaN entering {name_of[module]} ({type(module).__name__})")


handles = [module.register_forward_pre_hook(no_nan) for name, module in model.named_modules() if name]
bad = model[0].weight.data.copy()
model[0].weight.data[0, 0] = np.nan
try:
    model(x)
except FloatingPointError as error:
    print("FloatingPointError:", error)
model[0].weight.data[...] = bad
for handle in handles:
    handle.remove()

# %% [markdown]
# ## Full backward hooks: identity Functions around a module
#
# `register_full_backward_hook(hook)` calls `hook(module, grad_input,
# grad_output)` in backward: the gradients of the loss with respect to
# the module's inputs and outputs. A module is not one node of the graph
# but many, so PyTorch's old `register_backward_hook`, which hooked the
# node that made the output, saw only the **last** operation: on
# `Sequential(Linear(3, 2), Tanh())` fed a batch of shape (4, 3), its
# grad_input has shape (4, 2), the gradient of tanh's input, not of the
# module's. It is deprecated. The full hook wraps the whole module
# instead: `module(x)` passes its inputs through an identity Function
# before forward, and its outputs through another after.

# %% tags=["hide-input"]
def wrapping_picture():
    fig, axis = plt.subplots(figsize=(10, 2.6))
    boxes = [(0.4, "x", "white"), (2.0, "identity\n(inputs)", "#fde0c5"), (4.2, "matmul", "#dbe9f6"),
             (5.9, "add bias", "#dbe9f6"), (8.1, "identity\n(outputs)", "#fde0c5"), (9.7, "y", "white")]
    for x0, label, colour in boxes:
        axis.text(x0, 1, label, ha="center", va="center", fontsize=9,
                  bbox=dict(boxstyle="round", fc=colour, ec="grey"))
    for a, b in zip(boxes, boxes[1:]):
        axis.annotate("", (b[0] - 0.6, 1.12), (a[0] + 0.6, 1.12), arrowprops=dict(arrowstyle="->", color="black"))
        axis.annotate("", (a[0] + 0.6, 0.88), (b[0] - 0.6, 0.88), arrowprops=dict(arrowstyle="->", color="tab:red"))
    axis.add_patch(plt.Rectangle((3.3, 0.55), 3.5, 0.9, fill=False, ls="--", ec="tab:blue"))
    axis.text(5.05, 1.6, "the module's forward (Linear)", ha="center", color="tab:blue", fontsize=9)
    axis.text(8.6, -0.3, "backward reaches it first: keeps grad_output,\nruns the backward pre-hooks",
              ha="center", fontsize=8, color="tab:red")
    axis.text(1.9, -0.3, "reached last: runs the backward hooks\nwith (grad_input, grad_output)",
              ha="center", fontsize=8, color="tab:red")
    axis.text(5.9, 0.12, "old register_backward_hook:\nthis node only", ha="center", fontsize=8, color="grey")
    axis.set_xlim(-0.2, 10.3)
    axis.set_ylim(-0.6, 1.9)
    axis.axis("off")
    plt.show()


wrapping_picture()

# %% [markdown]
# Forward black, backward red. One `BackwardHook` object per call holds
# what the two nodes share: the node at the outputs keeps `grad_output`
# (after the pre-hooks of `register_full_backward_pre_hook`, which may
# replace it), and the node at the inputs hands the user's hooks both.
# A hook may return a replacement `grad_input`, of the same number and
# shapes (else PyTorch's errors).

# %%
show_code(module_hooks.BackwardHookFunction, module_hooks.BackwardHook.on_output,
          module_hooks.BackwardHook.on_input)

# %%
layer = model[2]
handle = layer.register_full_backward_hook(
    lambda m, grad_input, grad_output: print(f"grad_input {[g.shape for g in grad_input]}, "
                                             f"grad_output {[g.shape for g in grad_output]}"))
model(x).sum().backward()
handle.remove()

# %% [markdown]
# ## When no input requires grad: `(None,)`
#
# The first layer's input is the batch, which needs no gradient. Then no
# identity wraps the inputs, and the hook runs at the **outputs'** node,
# before the module's backward, with `grad_input = (None,)`: one `None`
# per positional argument. PyTorch warns, and a hook may return only
# Nones there.

# %%
def look(module, grad_input, grad_output):
    print("grad_input", grad_input, "| weight.grad at that moment:", module.weight.grad)


model.zero_grad()
handle = model[0].register_full_backward_hook(look)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model(x).sum().backward()
handle.remove()
print("warning:", str(caught[0].message)[:93], "...")

# %% [markdown]
# ## `.grad` is not the backward hook's business
#
# A module backward hook is about the gradients of the module's inputs
# and outputs. The parameters' `.grad` is whatever the engine has done by
# then: above it was still None, as the hook ran before the module's
# backward. With the inputs wrapped, a Linear's weight gradient has
# usually been accumulated before the inputs' node runs, but nothing
# promises it, and a module applied twice shows that it can be missing:
# the first firing comes before the weight's second contribution, so
# `.grad` is not set yet.

# %%
twice, seen = nn.Linear(2, 2), []
twice.register_full_backward_hook(lambda m, gi, go: seen.append(m.weight.grad is None))
twice(nn.Tanh()(twice(Variable(np.ones((3, 2)))))).sum().backward()
print("weight.grad is None at the first firing, then at the second:", seen)

# %% [markdown]
# The hook made for that moment is step 34's cousin
# `p.register_post_accumulate_grad_hook(hook)`: `hook(p)` runs right after
# the complete gradient has been added into `p.grad`.
#
# ## The optimizer inside backward
#
# The usual loop runs backward, then `optimizer.step()`: when backward
# ends, every parameter's gradient is in memory at once, as much memory
# as the parameters themselves. But a parameter can be stepped as soon as
# its gradient is complete, and the gradient freed then: one optimizer
# per parameter, stepped from its post-accumulate hook.

# %%
def step_in_backward(params, make_optimizer):
    optimizers = {p: make_optimizer([p]) for p in params}

    def hook(p):
        optimizers[p].step()
        optimizers[p].zero_grad()  # .grad = None: the gradient goes now

    return [p.register_post_accumulate_grad_hook(hook) for p in params]


def train(model, in_backward, steps=5):
    params = list(model.parameters())
    if in_backward:
        handles = step_in_backward(params, lambda ps: optim.Adam(ps, lr=0.01))
    else:
        optimizer = optim.Adam(params, lr=0.01)
    for i in range(steps):
        batch = Variable(np.random.default_rng(i).normal(size=(16, 4)), requires_grad=False)
        (model(batch) ** 2).sum().backward()
        if not in_backward:
            optimizer.step()
            optimizer.zero_grad()
    for handle in handles if in_backward else []:
        handle.remove()
    return [p.data for p in params]


usual, inside = build(nn), build(nn)
inside.load_state_dict(usual.state_dict())
gap = max(np.abs(a - b).max() for a, b in zip(train(usual, False), train(inside, True)))
print("largest difference after 5 Adam steps, usual loop against in backward:", below(gap, 1e-12))

# %% [markdown]
# The same parameters, each gradient freed at once. How much memory that
# saves is counted, not argued: the bytes of every `.grad` alive, after
# each accumulation of a deeper MLP's backward pass.

# %% tags=["hide-input"]
def gradient_bytes_curve(model, in_backward):
    params, alive, curve = list(model.parameters()), {}, []

    def count(p):
        alive[p] = p.grad.data.nbytes
        curve.append(sum(alive.values()))
        if in_backward:
            optimizers[p].step()
            optimizers[p].zero_grad()
            alive[p] = 0

    optimizers = {p: optim.SGD([p], lr=0.01) for p in params}
    handles = [p.register_post_accumulate_grad_hook(count) for p in params]
    (model(Variable(np.ones((8, 256)), requires_grad=False)) ** 2).sum().backward()
    for handle in handles:
        handle.remove()
    model.zero_grad()
    return curve


deep = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.Tanh())])
curves = {way: gradient_bytes_curve(deep, way == "in backward") for way in ("usual", "in backward")}
fig, axis = plt.subplots(figsize=(7, 3))
for way, curve in curves.items():
    axis.step(range(1, len(curve) + 1), np.array(curve) / 2**20, where="post", label=f"{way}: peak "
              f"{max(curve) / 2**20:.2f} MiB")
axis.set_xlabel("accumulation into a .grad, in backward's order (6 Linear layers of 256 x 256, float64)")
axis.set_ylabel("MiB of .grad alive")
axis.legend()
axis.grid(alpha=0.3)
plt.show()

# %% [markdown]
# In the usual loop the gradients pile up to the parameters' size
# (3.01 MiB); inside backward the peak is one weight's gradient
# (0.5 MiB). PyTorch's own tutorial does exactly this, and
# `bench/bench_memory.py` measures it for an MLP of width 1,024 in both
# frameworks, with `tracemalloc` and PyTorch's profiler (results in
# `bench/results/memory.md`). The price: gradients cannot be accumulated
# over several batches, and a step sees one parameter at a time (no
# clipping by the global norm).
#
# ## Check against PyTorch
#
# The same model in `torch.nn`, torch's weights loaded into ours. Every
# kind of hook on every module records what it is given; the two logs
# must agree in order and in values, with the batch not requiring grad
# (the first Linear's `(None,)`) and requiring it. Then five Adam steps
# inside backward must give torch's parameters. The collapsed cell holds
# the recorders.

# %% tags=["hide-cell"]
import torch  # noqa: E402

torch.set_num_threads(1)


def arrays(values):
    return [None if v is None else (v.detach().numpy() if isinstance(v, torch.Tensor) else v.data) for v in values]


def hook_log(model, batch):
    log = []
    for name, m in model.named_modules():
        m.register_forward_pre_hook(lambda m, args, name=name: log.append(("pre", name, arrays(args))))
        m.register_forward_hook(lambda m, args, out, name=name: log.append(("forward", name, arrays([out]))))
        m.register_full_backward_pre_hook(lambda m, go, name=name: log.append(("backward pre", name, arrays(go))))
        m.register_full_backward_hook(lambda m, gi, go, name=name: log.append(
            ("backward", name, arrays(gi) + arrays(go))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(batch).sum().backward()
    return log


def log_gap(ours, theirs):
    assert [e[:2] for e in ours] == [e[:2] for e in theirs]
    gaps = [0.0]
    for a, b in zip(ours, theirs):
        assert [u is None for u in a[2]] == [v is None for v in b[2]]
        gaps += [np.abs(u - v).max() for u, v in zip(a[2], b[2]) if u is not None]
    return max(gaps)


def torch_train(twin, steps=5):
    params = list(twin.parameters())
    step_in_backward(params, lambda ps: torch.optim.Adam(ps, lr=0.01))
    for i in range(steps):
        batch = torch.from_numpy(np.random.default_rng(i).normal(size=(16, 4)))
        (twin(batch) ** 2).sum().backward()
    return [p.detach().numpy() for p in params]


# %%
torch.manual_seed(0)
twin = build(torch.nn).double()
state = {k: v.detach().numpy().copy() for k, v in twin.state_dict().items()}
gaps, events = [], 0
for requires_grad in (False, True):
    ours = build(nn)
    ours.load_state_dict({k: tinypytorch.from_numpy(v) for k, v in state.items()})
    twin.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    log = hook_log(ours, Variable(x.data, requires_grad=requires_grad))
    log_t = hook_log(twin, torch.tensor(x.data, requires_grad=requires_grad))
    gaps.append(log_gap(log, log_t))
    events += len(log)
ours = build(nn)
ours.load_state_dict({k: tinypytorch.from_numpy(v) for k, v in state.items()})
twin = build(torch.nn).double()
twin.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
params_gap = max(np.abs(a - b).max() for a, b in zip(train(ours, True), torch_train(twin)))
print(f"{events} hook calls in torch's order, arguments as torch's (None where None): "
      f"{below(max(gaps), 1e-12)}")
print(f"parameters after 5 Adam steps inside backward against torch's: {below(params_gap, 1e-12)}")
print("PyTorch check passed: module hooks run as torch.nn's; "
      "the optimizer inside backward gives torch's parameters")

# %% [markdown]
# ## Recap
#
# - `register_forward_pre_hook` and `register_forward_hook` run before
#   and after `forward`; each may replace the input or the output.
#   `prepend=True` goes first; a handle's `remove()` takes a hook off.
# - `register_full_backward_pre_hook(hook)` gets `(module, grad_output)`,
#   `register_full_backward_hook(hook)` `(module, grad_input,
#   grad_output)`; both may return replacements of the same number and
#   shapes. They are built from identity Functions around the module's
#   inputs and outputs; the deprecated `register_backward_hook` saw only
#   the last operation.
# - When no input requires grad, the hook runs at the outputs with
#   `grad_input = (None,)`, before the module's backward.
# - A module hook promises nothing about `.grad`; the
#   post-accumulate-grad hook runs once `.grad` is complete, and an
#   optimizer stepped there can free each gradient at once: the peak of
#   gradient memory falls from all the parameters' size to one
#   parameter's.
#
# ## Exercises
#
# **1. Dead units.** Write `dead_fraction(model, x)`: with forward hooks
# on every `ReLU` of `model`, the fraction of outputs that are exactly 0,
# per ReLU name; remove the hooks before returning.

# %% tags=["hide-cell"]
def dead_fraction(model, x):
    fractions = {}
    relus = [(name, m) for name, m in model.named_modules() if type(m).__name__ == "ReLU"]
    handles = [m.register_forward_hook(lambda m, args, out, name=name: fractions.__setitem__(
        name, float((out.data == 0).mean()))) for name, m in relus]
    model(x)
    for handle in handles:
        handle.remove()
    return fractions


relu_model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
print(dead_fraction(relu_model, x))

# %% [markdown]
# **2. Gradient norms per module.** Write `grad_output_norms(model, x)`:
# the norm of `grad_output[0]` of every Linear of `model` for the loss
# `model(x).sum()`, by name, with full backward pre-hooks (here `x`
# requires grad, so no module fires at its outputs).

# %% tags=["hide-cell"]
def grad_output_norms(model, x):
    norms = {}
    handles = [m.register_full_backward_pre_hook(lambda m, go, name=name: norms.__setitem__(
        name, float(np.linalg.norm(go[0].data)))) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    model(x).sum().backward()
    for handle in handles:
        handle.remove()
    return norms


print({name: round(norm, 3) for name, norm in grad_output_norms(build(nn), Variable(x.data)).items()})

# %% [markdown]
# **3. The saving, in bytes.** Write `peak_gradient_bytes(model,
# in_backward)`, the most bytes held in `.grad` at once during one
# backward pass of `model`, for both ways. For the `deep` model above,
# what do the parameters' sizes say it should be?

# %% tags=["hide-cell"]
def peak_gradient_bytes(model, in_backward):
    return max(gradient_bytes_curve(model, in_backward))


print({way: peak_gradient_bytes(deep, way == "in backward") for way in ("usual", "in backward")})
print("parameters:", sum(p.data.nbytes for p in deep.parameters()), "largest:",
      max(p.data.nbytes for p in deep.parameters()))
