# %% [markdown]
# # Step 38: Saved-tensor hooks
#
# Step 35 showed what a function keeps for its backward pass: the arrays its
# `forward` passed to `save_for_backward`. They wait in memory until the
# backward pass reads them, and in a deep network these saved activations are
# most of the memory that training takes.
#
# PyTorch lets the user decide *how* a saved tensor waits. Inside the context
# `saved_tensors_hooks(pack_hook, unpack_hook)`, every tensor that an operation
# saves is handed to `pack_hook`, and whatever `pack_hook` returns is kept in
# its place. When the backward pass needs the tensor, `unpack_hook` turns the
# kept object back into an array.
#
# Hooks can move saved tensors to host memory (`save_on_cpu`), store them in
# a smaller dtype, write them to disk, or keep nothing and recompute them
# (checkpointing, step 43). This step builds the first three, and shows a case
# where PyTorch silently returns a wrong gradient and tinypytorch raises.

# %%
import contextlib
import textwrap

import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.autograd.graph import SavedTensor, save_on_cpu, saved_tensors_hooks
from tinypytorch.utils.listing import show_code

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (harness: pictures, the PyTorch twins, how numbers are printed)
import torch  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from tinypytorch import functions as F  # noqa: E402
from tinypytorch.layers import MLP  # noqa: E402


def show(a):
    """An array with 4 decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=4, floatmode="fixed", separator=", ")


# %% [markdown]
# ## Pack when saved, unpack in backward
#
# `saved_tensors_hooks` is a context manager. It pushes the pair of hooks onto
# a stack on entry and pops it on exit. The stack is one of the package's modes,
# kept with the others in `grad_mode`, and belongs to the thread that entered
# the context, as in PyTorch:

# %%
show_code(saved_tensors_hooks, tinypytorch.grad_mode.saved_tensors_hooks_entered, step=38)

# %% [markdown]
# When a function saves a tensor, step 35's `SavedTensor` looks at the top of
# that stack. If a pair is there, it keeps only what the pack hook returns,
# with what it needs to rebuild the Variable later: the leaf the gradient goes
# to, or the function that made the tensor. The hook runs with recording off,
# as in PyTorch, because packing is not part of the computation being
# differentiated.

# %%
show_code(SavedTensor._pack, step=38)

# %% [markdown]
# To see when each hook runs, here is a pair that keeps the arrays in a
# dictionary of its own and gives autograd a ticket number instead. Autograd
# keeps whatever the pack hook returns, even a plain integer.
#
# Take $y = \sum_i e^{x_i^2}$. The product $x \cdot x$ saves both of its
# operands, because each is the other's gradient. `exp` saves its output,
# because $e^u$ is its own derivative (step 27).

# %%
storage, events = {}, []


def pack_to_ticket(v):
    ticket = len(storage)
    storage[ticket] = v.data
    events.append(("pack", ticket))
    print(f"pack:   ticket {ticket} <- {show(v.data)}")
    return ticket


def unpack_ticket(ticket):
    events.append(("unpack", ticket))
    print(f"unpack: ticket {ticket} -> {show(storage[ticket])}")
    return storage[ticket]


x = Variable(np.array([0.5, 1.0]), name="x")
with saved_tensors_hooks(pack_to_ticket, unpack_ticket):
    y = tinypytorch.exp(x * x).sum()
print("forward done; now backward")
y.backward()
print("x.grad     =", show(x.grad))
print("2x e^(x^2) =", show(2 * x.data * np.exp(x.data**2)))

# %% tags=["hide-input"]
def draw_timeline(events, saved_by, what, forward_ops, backward_ops):
    """Forward on the left packing each saved tensor, backward on the right unpacking it; a lane per ticket."""
    column = {("pack", op): i for i, op in enumerate(forward_ops)}
    column.update({("unpack", op): len(forward_ops) + 1 + i for i, op in enumerate(backward_ops)})
    tickets = sorted({ticket for _, ticket in events})
    lane = {ticket: 2.0 - 0.75 * k for k, ticket in enumerate(tickets)}
    fig, axis = plt.subplots(figsize=(8, 3.5))
    for (phase, op), c in column.items():
        label = op if phase == "pack" else f"backward\nof {op}"
        axis.add_patch(FancyBboxPatch((c - 0.42, 2.75), 0.84, 0.5, boxstyle="round,pad=0.02",
                                      facecolor="#dbe9f6" if phase == "pack" else "#fde2cf", edgecolor="gray"))
        axis.text(c, 3.0, label, ha="center", va="center", fontsize=8.5)
    middle = len(forward_ops)
    axis.plot([middle, middle], [0.1, 2.8], color="gray", linestyle="--", linewidth=0.8)  # up to the call
    axis.text(middle, 3.0, "y.backward()", ha="center", va="center", fontsize=9)
    axis.text((middle - 1) / 2, 3.45, "forward: pack_hook runs\nas each tensor is saved", ha="center", fontsize=9)
    axis.text(middle + 1 + (len(backward_ops) - 1) / 2, 3.45, "backward: unpack_hook runs\nwhen the tensor is needed",
              ha="center", fontsize=9)
    seen, where = {}, {}
    for phase, ticket in events:  # tickets packed by one function sit side by side
        key = (phase, saved_by[ticket])
        offset = 0.22 * seen.get(key, 0) - 0.11 * (sum(saved_by[t] == saved_by[ticket] for t in tickets) - 1)
        seen[key] = seen.get(key, 0) + 1
        where[phase, ticket] = column[key] + offset
    for (phase, ticket), x in where.items():
        marker, color = ("v", "C2") if phase == "pack" else ("^", "C1")
        axis.plot([x], [lane[ticket]], marker=marker, color=color, markersize=9, zorder=3)
        axis.plot([x, x], [lane[ticket] + 0.12, 2.73], color=color, linewidth=0.8, linestyle=":")
    for ticket in tickets:
        start, end = where["pack", ticket], where["unpack", ticket]
        axis.plot([start, end], [lane[ticket]] * 2, color="gray", linewidth=5, alpha=0.35, zorder=1)
        # the label goes in the widest stretch of the bar that no vertical line crosses
        crossing = {middle} | {x for (_, t), x in where.items() if lane[t] < lane[ticket]}
        stops = [start, *sorted(x for x in crossing if start < x < end), end]
        left, right = max(zip(stops, stops[1:]), key=lambda gap: gap[1] - gap[0])
        axis.text((left + right) / 2, lane[ticket] + 0.1, f"autograd keeps ticket {ticket}", ha="center", fontsize=8)
    for ticket in tickets:
        axis.text(-0.5, lane[ticket], f"ticket {ticket}:\n{what[ticket]}", ha="right", va="center", fontsize=8.5)
    axis.plot([], [], "v", color="C2", label="pack_hook(tensor) → ticket")
    axis.plot([], [], "^", color="C1", label="unpack_hook(ticket) → array")
    axis.legend(loc="lower center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False, fontsize=9)
    axis.set(xlim=(-1.9, column[("unpack", backward_ops[-1])] + 0.6), ylim=(0.1, 3.9))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


# Mul saves both of its operands (tickets 0 and 1), Exp its output (ticket 2); Sum saves nothing.
SAVED_BY = {0: "x * x", 1: "x * x", 2: "exp"}
WHAT = {0: "x, 1st operand", 1: "x, 2nd operand", 2: "exp's output"}
assert events == [("pack", 0), ("pack", 1), ("pack", 2), ("unpack", 2), ("unpack", 0), ("unpack", 1)]
draw_timeline(events, SAVED_BY, WHAT, ["x * x", "exp", "sum"], ["sum", "exp", "x * x"])

# %% [markdown]
# The packs happen during the forward pass, in the order the functions ran.
# The unpacks happen during the backward pass, in the order the engine visits
# the functions: `exp` first, then the product. In between, the dictionary
# held the arrays, not autograd. PyTorch calls its hooks at the same moments,
# with the same values (the check at the end compares the two sequences).
#
# The unpack hook may return an array or a Variable. Either way, autograd
# builds a Variable around the array that sends its gradient where the saved
# tensor's went, so second derivatives (step 27) work under hooks too. Only
# tensors reach the pack hook: the `2.0` of `x * 2.0` is kept as a Python
# number, as PyTorch keeps it, and never packed.
#
# A tensor is packed once, when it is saved, but unpacked each time a backward
# pass needs it: twice, if the first pass was asked to `retain_graph`. So an
# unpack hook must leave the packed object usable. Cleanup belongs at the end
# of the packed object's life: after the last backward pass autograd drops
# every packed object, and so does a graph that is thrown away unused.
# Exercise 1 builds on that. The next cell, collapsed, counts the calls and
# tries nested contexts.

# %% tags=["hide-cell"]
counts = {"pack": 0, "unpack": 0}


def counting_pack(v):
    counts["pack"] += 1
    return v


def counting_unpack(v):
    counts["unpack"] += 1
    return v


a = Variable(np.array([0.5, -1.0, 2.0]), name="a")
with saved_tensors_hooks(counting_pack, counting_unpack):
    y = tinypytorch.exp(a * a).sum()
print("after forward:                   ", counts)
y.backward(retain_graph=True)
print("after backward(retain_graph=True):", counts)
y.backward()
print("after a second backward():       ", counts)

log = []


def tagging(tag):
    return saved_tensors_hooks(lambda v: log.append(f"pack by {tag}") or v,
                               lambda v: log.append(f"unpack by {tag}") or v)


with tagging("outer"):
    with tagging("inner"):  # the innermost pair packs
        y = a * a
    z = tinypytorch.sin(y).sum()
with tagging("late"):  # a context entered only around backward packs nothing
    z.backward()
print(log)

# %% [markdown]
# ## `save_on_cpu`: keeping saved tensors in host memory
#
# On a GPU, saved activations take device memory, usually the scarcest memory
# in training. `save_on_cpu()` is a ready-made pair of hooks. Its pack hook
# copies a saved CuPy array to host memory, so the device can release the
# array once nothing else holds it. Its unpack hook copies it back to the
# device it came from. The price is two copies across the bus for every saved
# tensor. Like PyTorch's, it takes `pin_memory=True`, which allocates
# page-locked host memory, from which the copy back is faster.

# %%
show_code(save_on_cpu, step=38)

# %% [markdown]
# A NumPy array is already in host memory, so the hooks pass it through:

# %%
x = Variable(np.array([0.5, 1.0]), name="x")
with save_on_cpu():
    y = tinypytorch.exp(x)
(saved,) = y.creator.saved_tensors  # unpacked through the hook
print("on the CPU the unpacked array is the saved one:", saved.data is y.data)
y.sum().backward()
print("x.grad =", show(x.grad), "  e^x =", show(np.exp(x.data)))

# %% [markdown]
# What the hooks do to device memory, measured with CuPy's memory pool, is in
# [step 48](step48.ipynb), which runs the package on a GPU.
#
# ## Compressing saved tensors to float16
#
# A pack hook may return something smaller than the tensor it received. If it
# stores float32 activations as float16, they take half the bytes. The unpack
# hook converts them back, and backward computes in float32 as before, only
# from inputs rounded to float16's 11 significant bits: each value is off by
# a relative error of at most $2^{-11} \approx 4.9 \times 10^{-4}$. (float16
# also overflows above 65504; the activations here are far smaller.)
#
# The test bed (collapsed) is a float32 `MLP((8, 32, 32, 1))` with `tanh`
# (step 32) on 16 inputs; `gradients(model, hooks)` returns its gradients
# with the tensors saved under `hooks`.

# %% tags=["hide-input"]
def float32_mlp():
    model = MLP((8, 32, 32, 1), activation=F.tanh, rng=np.random.default_rng(0))
    for p in model.params():
        p.data = p.data.astype(np.float32)
    return model


model = float32_mlp()
inputs = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
names = [f"l{i}.{kind}" for i in range(3) for kind in ("weight", "bias")]


def gradients(model, hooks=None):
    """The parameters' gradients of the mean squared output, with tensors saved under `hooks` (a context)."""
    model.cleargrads()
    with contextlib.nullcontext() if hooks is None else hooks:
        y = model(Variable(inputs, requires_grad=False))
        loss = (y**2).sum() / len(inputs)
    loss.backward()
    return [p.grad.data for p in model.params()]


# %% [markdown]
# The simplest compression hook converts every tensor it is given, and counts
# the bytes on both sides:

# %%
stored = {"tensors": 0, "float32 bytes": 0, "float16 bytes": 0}


def pack_float16(v):
    half = v.data.astype(np.float16)
    stored["tensors"] += 1
    stored["float32 bytes"] += v.data.nbytes
    stored["float16 bytes"] += half.nbytes
    return half, v.dtype


def unpack_float16(packed):
    half, dtype = packed
    return half.astype(dtype)


naive = gradients(model, saved_tensors_hooks(pack_float16, unpack_float16))
print(stored)

# %% tags=["hide-input"]
def bytes_kept_by_the_graph(model):
    """Bytes and number of the distinct non-leaf arrays the graph keeps for backward, counted by a pack hook."""
    arrays = {}  # id -> array; the array is held here, so its id cannot be reused during the count

    def pack(v):
        if not v.is_leaf:
            arrays[id(v.data)] = v.data
        return v

    gradients(model, saved_tensors_hooks(pack, lambda v: v))
    return sum(array.nbytes for array in arrays.values()), len(arrays)


print("without hooks the graph keeps %d bytes in %d arrays" % bytes_kept_by_the_graph(model))

# %% [markdown]
# The hook stored 6,496 bytes, but without it the graph kept only 4,160 (a
# counting hook, collapsed above, finds that). The simple hook made memory
# use worse, for two reasons that apply to any pack hook that copies:
#
# - A `tanh` output is saved twice: by the `tanh` (its derivative is
#   $1 - \tanh^2$) and by the next layer (the weight's gradient needs that
#   layer's input). Autograd kept one array for both; the hook made two copies.
# - Leaves are saved too: the input, and the weights. They stay in memory
#   anyway, so a copy of them is pure extra.
#
# A better hook leaves leaves alone and makes one copy per array. It
# remembers which arrays it has converted while the context lasts, and
# forgets them at the end, so that the float32 arrays can then be freed:

# %%
@contextlib.contextmanager
def save_in_float16(stored):
    copies = {}  # id of a float32 array -> (the array, its float16 copy), while the context lasts

    def pack(v):
        if v.is_leaf:  # a parameter or an input: it stays in memory anyway
            return v
        if id(v.data) not in copies:
            copies[id(v.data)] = v.data, v.data.astype(np.float16)
            stored["float16 bytes"] += copies[id(v.data)][1].nbytes
        return copies[id(v.data)][1], v.dtype

    def unpack(packed):
        return packed if isinstance(packed, Variable) else packed[0].astype(packed[1])

    try:
        with saved_tensors_hooks(pack, unpack):
            yield
    finally:
        copies.clear()


stored_once = {"float16 bytes": 0}
better = gradients(model, save_in_float16(stored_once))
print(stored_once, "(half of 4160)")

# %% [markdown]
# What does it cost in accuracy? The relative error
# $\lVert g_{16} - g \rVert / \lVert g \rVert$ of each parameter's gradient,
# for both hooks:

# %%
exact = gradients(model)


def relative_error(approx, reference):
    return np.linalg.norm(approx - reference) / np.linalg.norm(reference)


print(f"{'parameter':10} {'every tensor':>13} {'activations once':>17}")
for name, g_naive, g_better, g in zip(names, naive, better, exact):
    print(f"{name:10} {relative_error(g_naive, g):13.0e} {relative_error(g_better, g):17.0e}")
print(f"float16 unit roundoff 2^-11 = {2.0**-11:.1e}")

# %% [markdown]
# Every error is a few units of $10^{-4}$ or less, the size of float16's
# rounding, and usually small next to the noise of a minibatch gradient. The
# better hook is also the more accurate one, because it leaves the weights and
# the input exact.
#
# ## Hooks and in-place changes: where PyTorch is silently wrong
#
# Step 36's version counter guards saved tensors: when one is unpacked, its
# version is compared with the version it had when saved, and if an in-place
# operation changed it since, backward raises rather than compute a gradient
# from the wrong values.
#
# PyTorch makes this check only when no hooks are set. A pack hook may return
# anything (a ticket, a compressed copy, a file name), so PyTorch cannot tell
# whether what the unpack hook returns is the saved tensor itself, which an
# in-place change spoiled, or an independent copy. Here is step 36's trap
# under identity hooks: $b = 2a$ and $c = b \cdot b$, then $b$ changed in
# place. The right gradient is that of the computation that was run,
# $\partial \sum c / \partial a = 2b \cdot 2 = 8a$. `ours(pack, unpack)` and
# `theirs(pack, unpack)` (collapsed) run it in tinypytorch and in PyTorch.

# %% tags=["hide-input"]
def ours(pack, unpack):
    """b = 2a and c = b * b under the hooks, then b += 1 in place: a's gradient, or the error."""
    a = Variable(np.array([1.0, 2.0]), name="a")
    with saved_tensors_hooks(pack, unpack):
        b = a * 2.0
        c = b * b
    b.add_(1.0)
    try:
        c.sum().backward()
    except RuntimeError as error:
        return f"RuntimeError: {error}"
    return f"a.grad = {show(a.grad)}"


def theirs(pack, unpack):
    """The same in PyTorch (float64)."""
    a = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        b = a * 2.0
        c = b * b
    b.add_(1.0)
    try:
        c.sum().backward()
    except RuntimeError as error:
        return f"RuntimeError: {error}"
    return f"a.grad = {show(a.grad.numpy())}"


# %%
print("the right gradient 8a:      ", show(8 * np.array([1.0, 2.0])))
print("PyTorch with identity hooks:", theirs(lambda t: t, lambda t: t))
print("tinypytorch with identity hooks:")
print(textwrap.fill(ours(lambda v: v, lambda v: v), 100))

# %% [markdown]
# PyTorch's backward read $b + 1$ where the computation had used $b$, so it
# returned $2(b + 1) \cdot 2 = 4(2a + 1)$, without a warning. Without hooks,
# both frameworks raise here (step 36).
#
# tinypytorch keeps the check under hooks wherever it can still apply. When a
# tensor is packed, `_pack` above also kept a weak reference to the saved
# array. If the version has moved when the tensor is unpacked, and the
# unpacked array shares memory with the saved one, backward would read the
# changed values, so it raises:

# %%
show_code(SavedTensor._unpack_hooked, step=38)

# %% [markdown]
# Hooks that keep a copy are not affected by a later in-place change, and both
# frameworks then return the right gradient. The check cannot see through
# every hook, though: a pair that keeps the array itself and copies it only
# when unpacking hands backward an array that shares no memory with the saved
# one, and is then as silently wrong as PyTorch. A hook that needs a copy must
# make it when packing.

# %%
print("PyTorch, cloning:          ", theirs(lambda t: t.clone(), lambda t: t))
print("tinypytorch, cloning:      ", ours(lambda v: v.data.copy(), lambda v: v))
print("tinypytorch, copy at unpack:", ours(lambda v: v.data, lambda d: d.copy()))

# %% [markdown]
# Two rules bind the hooks themselves, in both frameworks. A pack hook must not
# change the tensor it receives: the version is compared before and after it,
# and a change raises `RuntimeError`. An unpack hook must return an array or a
# Variable; anything else raises `TypeError` when backward asks for the tensor.
#
# ## Check against PyTorch
#
# The collapsed cell runs the ticket example, two backward passes of a
# float64 MLP under counting hooks, and the float16 hooks in PyTorch too: the
# same calls in the same order, the same gradients. The visible lines check
# the in-place case.

# %% tags=["hide-input"]
def run_tickets(m, make):
    events, kept = [], {}

    def pack(v):
        kept[len(kept)] = v.detach().numpy() if m is torch else v.data
        events.append(("pack", len(kept) - 1, kept[len(kept) - 1].copy()))
        return len(kept) - 1

    def unpack(ticket):
        events.append(("unpack", ticket, kept[ticket].copy()))
        return torch.from_numpy(kept[ticket]) if m is torch else kept[ticket]

    x = make([0.5, 1.0])
    with (torch.autograd.graph.saved_tensors_hooks if m is torch else saved_tensors_hooks)(pack, unpack):
        y = m.exp(x * x).sum()
    y.backward()
    return events, np.asarray(x.grad.numpy() if m is torch else x.grad.data)


def make_ours(values):
    return Variable(np.array(values))


def make_torch(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


ticket_events, grad = run_tickets(tinypytorch, make_ours)
ticket_events_t, grad_t = run_tickets(torch, make_torch)
assert [e[:2] for e in ticket_events] == [e[:2] for e in ticket_events_t], (ticket_events, ticket_events_t)
for e, e_t in zip(ticket_events, ticket_events_t):
    np.testing.assert_allclose(e[2], e_t[2], rtol=1e-14)
np.testing.assert_allclose(grad, grad_t, rtol=1e-14)
print("ticket example:", " ".join(f"{kind} {ticket}" for kind, ticket, _ in ticket_events_t), "(as PyTorch)")


def torch_mlp(model, dtype):
    """A torch.nn.Sequential with the same Linear weights as `model`, tanh between the layers."""
    modules = []
    for layer in model.layers:
        linear = torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(layer.weight.data))
            linear.bias.copy_(torch.from_numpy(layer.bias.data))
        modules += [linear, torch.nn.Tanh()]
    return torch.nn.Sequential(*modules[:-1])


def mlp_counts(m, model, params, batch):
    """(packs, unpacks) after forward and after each of two backward passes, and the gradients."""
    tally, snapshots = {"pack": 0, "unpack": 0}, []

    def pack(v):
        tally["pack"] += 1
        return v

    def unpack(v):
        tally["unpack"] += 1
        return v

    with (torch.autograd.graph.saved_tensors_hooks if m is torch else saved_tensors_hooks)(pack, unpack):
        loss = (model(torch.from_numpy(batch) if m is torch else Variable(batch, requires_grad=False)) ** 2).sum()
    snapshots.append((tally["pack"], tally["unpack"]))
    for _ in range(2):
        loss.backward(retain_graph=True)
        snapshots.append((tally["pack"], tally["unpack"]))
    return snapshots, [p.grad.numpy() if m is torch else p.grad.data for p in params]


mlp = MLP((3, 4, 4, 1), activation=F.tanh, rng=np.random.default_rng(0))
mlp_t = torch_mlp(mlp, torch.float64)
batch = np.random.default_rng(1).standard_normal((5, 3))
(counts_ours, grads), (counts_t, grads_t) = (mlp_counts(tinypytorch, mlp, list(mlp.params()), batch),
                                              mlp_counts(torch, mlp_t, list(mlp_t.parameters()), batch))
assert counts_ours == counts_t, (counts_ours, counts_t)
for g, g_t in zip(grads, grads_t):
    np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-15)
print(f"MLP((3, 4, 4, 1)): (packs, unpacks) {counts_t} and gradients as PyTorch's")

model_t = torch_mlp(model, torch.float32)


def torch_gradients(hooks=None):
    model_t.zero_grad()
    with contextlib.nullcontext() if hooks is None else torch.autograd.graph.saved_tensors_hooks(*hooks):
        y = model_t(torch.from_numpy(inputs))
        loss = (y**2).sum() / len(inputs)
    loss.backward()
    return [p.grad.numpy().copy() for p in model_t.parameters()]


exact_t = torch_gradients()
naive_t = torch_gradients((lambda t: (t.to(torch.float16), t.dtype), lambda packed: packed[0].to(packed[1])))
for g, g_t, g16, g16_t in zip(exact, exact_t, naive, naive_t):
    np.testing.assert_allclose(g, g_t, rtol=1e-4, atol=1e-6 * np.abs(g_t).max())  # float32 arithmetic
    np.testing.assert_allclose(g16, g16_t, rtol=0, atol=2.0**-11 * np.abs(g16_t).max())  # float16 precision
    assert relative_error(g16_t, g_t) < 2e-3 and relative_error(g16, g) < 2e-3
print("float16 hooks: gradients equal PyTorch's within 2^-11 of their largest entry")
right, wrong = (f"a.grad = {show(g)}" for g in (8 * np.array([1.0, 2.0]), 4 * (2 * np.array([1.0, 2.0]) + 1)))
assert theirs(lambda t: t.clone(), lambda t: t) == ours(lambda v: v.data.copy(), lambda v: v) == right

# %%
assert theirs(lambda t: t, lambda t: t) == wrong  # PyTorch: silently wrong under identity hooks
assert ours(lambda v: v, lambda v: v).startswith("RuntimeError: one of the variables")
print("PyTorch check passed: hook calls and gradients equal torch's; in-place under hooks raises")

# %% [markdown]
# ## Recap
#
# - Inside `saved_tensors_hooks(pack, unpack)`, each tensor a function saves
#   goes through `pack` once, when it is saved, under no_grad; autograd keeps
#   only what `pack` returned.
# - `unpack` runs each time a backward pass needs the tensor, in the engine's
#   order; the innermost context that was active when saving decides.
# - `save_on_cpu` keeps saved GPU arrays in host memory until backward; a
#   float16 hook halves the bytes for an error of order $2^{-11}$, if it skips
#   leaves and copies each array once.
# - PyTorch skips the in-place check under hooks and can return a wrong
#   gradient; tinypytorch raises whenever the unpacked array shares memory with
#   the one that was changed.
# - Cleanup belongs at the end of the packed object's life, which autograd
#   ends after the last backward pass.
#
# ## Exercises
#
# **1.** Write `save_on_disk(directory)`, a pair of hooks whose pack hook writes
# the saved array to a temporary file in `directory` and returns a handle, and
# whose unpack hook reads it back. The file must be deleted when autograd lets
# go of the handle: after the last backward pass, or when the graph is thrown
# away unused. (Hint: `tempfile.mkstemp`, `np.save`, and `weakref.finalize`
# on the handle.)

# %% tags=["hide-cell"]
import os  # noqa: E402
import tempfile  # noqa: E402
import weakref  # noqa: E402


class OnDisk:
    """What the pack hook keeps: one saved array, in a file that is deleted with this handle."""

    def __init__(self, array, directory):
        descriptor, self.path = tempfile.mkstemp(suffix=".npy", dir=directory)
        with os.fdopen(descriptor, "wb") as file:
            np.save(file, array)
        weakref.finalize(self, os.remove, self.path)


def save_on_disk(directory):
    return saved_tensors_hooks(lambda v: OnDisk(v.data, directory), lambda handle: np.load(handle.path))


def mlp_gradients(hooks=None, on_forward=lambda: None):
    """The gradients of a float64 MLP((3, 4, 4, 1))'s summed squared output, tensors saved under `hooks`."""
    net = MLP((3, 4, 4, 1), activation=F.tanh, rng=np.random.default_rng(0))
    with contextlib.nullcontext() if hooks is None else hooks:
        loss = (net(Variable(batch, requires_grad=False)) ** 2).sum()
    on_forward()
    loss.backward()
    return [p.grad.data for p in net.params()]


with tempfile.TemporaryDirectory() as directory:
    on_disk = mlp_gradients(save_on_disk(directory),
                            on_forward=lambda: print("files after forward:", len(os.listdir(directory))))
    print("files after backward:", len(os.listdir(directory)))
print("gradients equal the run without hooks:", all(np.array_equal(g, h) for g, h in zip(on_disk, mlp_gradients())))

# %% [markdown]
# **2.** Write `save_in_int8()`, hooks that store each saved float array as
# int8: $q = \operatorname{round}(x / s)$ with the scale $s = \max|x| / 127$,
# unpacked as $q s$. Check that every value comes back within $s / 2$ of the
# original, and measure what int8 does to the gradients of exercise 1's
# network.

# %% tags=["hide-cell"]
def quantize(array):
    scale = float(np.abs(array).max()) / 127 or 1.0  # an all-zero array: any scale will do
    return np.round(array / scale).astype(np.int8), scale, array.dtype


def dequantize(packed):
    q, scale, dtype = packed
    return (q * scale).astype(dtype)


def save_in_int8():
    return saved_tensors_hooks(lambda v: quantize(v.data), dequantize)


worst = []  # for each saved array: its largest error in units of s / 2


def measure(v):
    q, scale, dtype = quantize(v.data)
    worst.append(np.abs(dequantize((q, scale, dtype)) - v.data).max() / (scale / 2))
    return v


mlp_gradients(saved_tensors_hooks(measure, lambda v: v))
int8_errors = [relative_error(g, h) for g, h in zip(mlp_gradients(save_in_int8()), mlp_gradients())]
print(f"largest error over {len(worst)} saved arrays: {max(worst):.3f} × s / 2")
print("gradients' relative errors:", " ".join(f"{e:.0e}" for e in int8_errors))

# %% [markdown]
# **3.** Write a context `count_saved_bytes()` that yields a dictionary and
# fills it, per dtype name, with the bytes of the arrays the graph keeps for
# backward: each array once, leaves left out. Run the float32 network and the
# float64 network of exercise 1 inside one such context.

# %% tags=["hide-cell"]
@contextlib.contextmanager
def count_saved_bytes():
    totals, seen = {}, {}  # seen: id -> array, held so that an id is not reused while counting

    def pack(v):
        if not v.is_leaf and id(v.data) not in seen:
            seen[id(v.data)] = v.data
            totals[str(v.dtype)] = totals.get(str(v.dtype), 0) + v.data.nbytes
        return v

    try:
        with saved_tensors_hooks(pack, lambda v: v):
            yield totals
    finally:
        seen.clear()


with count_saved_bytes() as saved_bytes:
    (model(Variable(inputs, requires_grad=False)) ** 2).sum()
    (MLP((3, 4, 4, 1), activation=F.tanh, rng=np.random.default_rng(0))(Variable(batch, requires_grad=False)) ** 2).sum()
print(saved_bytes)
