# %% [markdown]
# # Step 38: Saved-tensor hooks
#
# Step 35 showed what a function keeps for its backward pass: the arrays its
# `forward` passed to `save_for_backward`. They wait in memory from the moment
# they are saved until the backward pass reads them, and in a deep network these
# saved activations are most of the memory that training takes.
#
# PyTorch lets the user decide how a saved tensor waits. Inside the context
# `saved_tensors_hooks(pack_hook, unpack_hook)`, every tensor that an operation
# saves is handed to `pack_hook`, and whatever `pack_hook` returns is kept in its
# place. When the backward pass needs the tensor, `unpack_hook` turns the kept
# object back into an array. A pair of hooks can move saved tensors to host
# memory (`save_on_cpu`), store them in a smaller dtype, write them to disk, or
# keep nothing at all and recompute them (checkpointing, step 43).
#
# This step writes hooks of each kind and measures what they save and what they
# cost. It also shows a case where PyTorch returns a wrong gradient without a
# word, and where tinypytorch raises an error instead.

# %%
import contextlib
import inspect

import numpy as np

import tinypytorch
from tinypytorch import Config, Variable
from tinypytorch import functions as F
from tinypytorch.autograd import graph
from tinypytorch.autograd.graph import save_on_cpu, saved_tensors_hooks
from tinypytorch.layers import MLP


def show(a):
    """An array with 4 decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=4, floatmode="fixed", separator=", ")


# %% [markdown]
# ## A pack hook and an unpack hook
#
# `saved_tensors_hooks` is a context manager. It pushes the pair onto a stack on
# entry and pops it on exit. When a function saves a tensor, step 35's
# `SavedTensor` looks at the top of the stack. If a pair is there, the tensor
# goes through that pair's pack hook.

# %%
print(inspect.getsource(graph.saved_tensors_hooks))
print(inspect.getsource(graph.current_hooks))

# %% [markdown]
# To see when each hook runs, here is a pair that keeps the arrays in a
# dictionary of its own and gives autograd a ticket number instead. Autograd
# keeps whatever the pack hook returns, even a plain integer.
#
# Take $y = \sum_i e^{x_i^2}$. The product $x \cdot x$ saves both of its
# operands, because each is the other's gradient. `exp` saves its output,
# because $e^u$ is its own derivative (step 27).

# %%
storage = {}


def pack_to_ticket(v):
    ticket = len(storage)
    storage[ticket] = v.data
    print(f"pack:   ticket {ticket} <- {show(v.data)}")
    return ticket


def unpack_ticket(ticket):
    print(f"unpack: ticket {ticket} -> {show(storage[ticket])}")
    return storage[ticket]


x = Variable(np.array([0.5, 1.0]), name="x")
with saved_tensors_hooks(pack_to_ticket, unpack_ticket):
    y = tinypytorch.exp(x * x).sum()
print("forward done; now backward")
y.backward()
print("x.grad     =", show(x.grad))
print("2x e^(x^2) =", show(2 * x.data * np.exp(x.data**2)))

# %% [markdown]
# The three packs happen during the forward pass, in the order the functions
# ran. The unpacks happen during the backward pass, in the order the engine
# visits the functions: `exp` first, then the product. In between, the
# dictionary held the arrays, not autograd. PyTorch calls its hooks at the same
# moments; the check at the end of this step compares the two sequences.
#
# The unpack hook may return an array, as here, or a Variable. Either way,
# autograd builds a Variable around the array that takes the saved tensor's
# place in the graph. For the leaf `x`, gradients flowing through the unpacked
# value still reach `x`, so second derivatives (step 27) work under hooks too.

# %% [markdown]
# ### The pack hook runs with recording off
#
# The pack hook is not part of the computation being differentiated. Autograd
# runs it with recording switched off, as PyTorch does. This matters for a hook
# that computes something. PyTorch's tutorial uses a pair that packs $4x$ and
# unpacks by dividing by 4. The product in the pack hook records nothing, and
# the gradient of $x^2$ is still $2x$:

# %%
def pack_times_4(v):
    print("pack:   recording is", "on" if Config.enable_backprop else "off")
    return v * 4.0


def unpack_over_4(packed):
    print("unpack: the packed variable requires grad:", packed.requires_grad)
    return packed / 4.0


x = Variable(np.array([1.0, -3.0]), name="x")
with saved_tensors_hooks(pack_times_4, unpack_over_4):
    y = (x**2).sum()
y.backward()
print("x.grad =", show(x.grad), "  2x =", show(2 * x.data))

# %% [markdown]
# ### Which tensors are packed
#
# Only the tensors that a function saves reach the pack hook. A Python number
# in an expression is not one of them. PyTorch keeps the `2.0` of `x * 2.0` as a
# number (a "wrapped number") and never packs it, and tinypytorch does the
# same. A constant array is a tensor like any other. A function also saves only
# what the gradients it must compute need (step 35): `x * c` keeps `c`, the
# derivative with respect to `x`, and not `x`, since no gradient flows to `c`.

# %%
def count_packs(f):
    packed = []
    with saved_tensors_hooks(lambda v: packed.append(v) or v, lambda v: v):
        f()
    return len(packed)


x = Variable(np.array([1.0, 2.0]), name="x")
c = np.array([3.0, 4.0])
for text, f in [("x * 2.0", lambda: x * 2.0), ("x * c", lambda: x * c), ("x * x", lambda: x * x)]:
    print(f"{text:8} packs {count_packs(f)} tensor(s)")

# %% [markdown]
# ### Nested contexts, and hooks that come too late
#
# With nested contexts, the innermost pair packs. A context entered only
# around `backward` does nothing, because the tensors were saved earlier. The
# pair that packed a tensor is also the pair that unpacks it, wherever the
# backward pass runs.

# %%
log = []


def tagging(tag):
    return saved_tensors_hooks(lambda v: log.append(f"pack by {tag}") or v,
                               lambda v: log.append(f"unpack by {tag}") or v)


x = Variable(np.array(2.0), name="x")
with tagging("outer"):
    with tagging("inner"):
        y = x * x  # saves x twice
    z = tinypytorch.sin(y)  # saves y
print(log)
log.clear()
with tagging("late"):
    z.backward()
print(log)

# %% [markdown]
# ## How often each hook runs
#
# A tensor is packed once, when it is saved. It is unpacked each time a backward
# pass needs it. With `retain_graph=True` (step 35) the graph can be traversed
# again, and then every saved tensor is unpacked again:

# %%
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
print("after forward:        ", counts)
y.backward(retain_graph=True)
print("after first backward: ", counts)
y.backward()
print("after second backward:", counts)

# %% [markdown]
# An unpack hook must therefore leave the packed object usable. A hook that
# stores tensors in files and deletes each file in its unpack hook works for one
# pass and fails on the second. Cleanup belongs to the end of the packed
# object's life. After a backward pass without `retain_graph`, autograd drops
# every packed object, so a `__del__` method on it (or the garbage collector)
# can do the cleanup. Here each packed object reports when it is released:

# %%
class Packed:
    """What a pack hook keeps: an array and a label. It says when autograd lets go of it."""

    def __init__(self, array, label):
        self.array, self.label = array, label

    def __del__(self):
        print(f"  released {self.label}")


labels = iter(["a (first operand)", "a (second operand)", "exp(a * a)"])
a = Variable(np.array([0.5, -1.0, 2.0]), name="a")
with saved_tensors_hooks(lambda v: Packed(v.data, next(labels)), lambda p: p.array):
    y = tinypytorch.exp(a * a).sum()
print("backward(retain_graph=True):")
y.backward(retain_graph=True)
print("backward():")
y.backward()
try:
    y.backward()
except RuntimeError as error:
    print("a third backward: RuntimeError:", str(error)[:56], "...")

# %% [markdown]
# ## `save_on_cpu`: keeping saved tensors in host memory
#
# On a GPU, saved activations take device memory, usually the scarcest memory in
# training. `save_on_cpu()` is a ready-made pair of hooks. Its pack hook copies a
# saved CuPy array to host memory, so the device can release the array once
# nothing else holds it. Its unpack hook copies the array back to the device it
# came from when backward needs it. The price is two copies across the bus for
# every saved tensor. Like PyTorch's, it takes `pin_memory=True`, which
# allocates page-locked host memory, from which the copy back to the device is
# faster.
#
# A NumPy array is already in host memory, so the hooks pass it through
# unchanged:

# %%
print(inspect.getsource(graph.save_on_cpu))

# %%
x = Variable(np.array([0.5, 1.0]), name="x")
with save_on_cpu():
    y = tinypytorch.exp(x)
(saved,) = y.creator.saved_tensors  # unpacked through the hook, as backward will do
print("on the CPU the unpacked array is the saved array itself:", saved.data is y.data)
y.sum().backward()
print("x.grad =", show(x.grad), "  e^x =", show(np.exp(x.data)))

# %% [markdown]
# What the hooks do to device memory, measured with CuPy's memory pool, is part
# of step 48, which runs the package on a GPU.
#
# ## Compressing saved tensors to float16
#
# A pack hook may return something smaller than the tensor it received. If it
# stores float32 activations as float16, they take half the bytes. The unpack
# hook converts them back, and backward computes in float32 as before, only
# from inputs rounded to float16's 11 significant bits. Each rounded value is
# off by a relative error of at most $2^{-11} \approx 4.9 \times 10^{-4}$.
# float16 also overflows above 65504; the activations here are far smaller.
#
# The test bed is a small float32 network: `MLP((8, 32, 32, 1))` with `tanh`
# between its `Linear` layers (step 32), and a batch of 16 inputs.

# %%
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
# ### What a float16 hook stores
#
# The simplest compression hook converts every tensor it is given and counts
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

# %% [markdown]
# The hook halves the bytes that pass through it. But how many bytes did the
# graph keep alive without any hooks? A counting hook can find out. It should
# count each array once and leave out leaves (the weights and the input), which
# the model and the caller keep in memory anyway:

# %%
def bytes_kept_by_the_graph(model):
    arrays = {}  # id -> array; the array is held here, so its id cannot be reused during the count

    def pack(v):
        if not v.is_leaf:
            arrays[id(v.data)] = v.data
        return v

    gradients(model, saved_tensors_hooks(pack, lambda v: v))
    return sum(array.nbytes for array in arrays.values()), len(arrays)


print("without hooks the graph keeps %d bytes in %d arrays" % bytes_kept_by_the_graph(model))

# %% [markdown]
# Only 4,160 bytes were kept alive for the graph, and the float16 hook stored
# 6,496. The simple hook has made memory use worse, for two reasons that apply
# to any pack hook that copies:
#
# - A pack hook sees a tensor each time a function saves it. A `tanh` output is
#   saved by the `tanh` (its derivative is $1 - \tanh^2$) and again by the next
#   layer (the weight's gradient needs that layer's input). Autograd alone kept
#   one array for both; the hook made two copies.
# - Leaves are saved too: the input, and the weights, which the input's gradient
#   needs. They stay in memory anyway, so a copy of them is pure extra.
#
# A better hook skips leaves and makes one copy per array. While the forward pass
# runs it remembers which arrays it has converted, and it forgets them when the
# context ends, so that the float32 arrays can then be freed:

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
        if isinstance(packed, Variable):
            return packed
        half, dtype = packed
        return half.astype(dtype)

    try:
        with saved_tensors_hooks(pack, unpack):
            yield
    finally:
        copies.clear()


stored_once = {"float16 bytes": 0}
better = gradients(model, save_in_float16(stored_once))
print(stored_once, "(half of 4160)")

# %% [markdown]
# ### What it costs in accuracy
#
# The gradients computed from float16 copies differ from the exact float32
# ones. Below is the relative error $\lVert g_{16} - g \rVert / \lVert g \rVert$
# of each parameter's gradient, for both hooks:

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
# rounding. That is usually small next to the noise of a minibatch gradient,
# which is what makes this kind of compression worth considering. The better hook is
# also more accurate, because it leaves the weights and the input exact.
#
# ## Hooks and in-place changes: where PyTorch is silently wrong
#
# Step 36 showed the version counter. When a saved tensor is unpacked, its
# version is compared with the version it had when saved, and if an in-place
# operation has changed it since, the backward pass raises an error rather than
# compute a gradient from the wrong values.
#
# PyTorch makes this check only when no hooks are set. A pack hook may return
# anything (a ticket, a compressed copy, a file name), so PyTorch cannot tell
# whether what the unpack hook returns is the saved tensor itself, which an
# in-place change would have spoiled, or an independent copy that it would not
# have. The cost shows with hooks that keep the tensor itself. Here is step 36's
# trap again, now under identity hooks: $b = 2a$ and $c = b \cdot b$, then $b$
# changed in place. The right gradient is that of the computation that was run:
# $\partial \sum c / \partial a = 2b \cdot 2 = 8a$.
#
# PyTorch appears here ahead of the final check, because its behaviour is what
# this section is about:

# %%
import torch


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


print("the right gradient 8a:      ", show(8 * np.array([1.0, 2.0])))
print("PyTorch with identity hooks:", theirs(lambda t: t, lambda t: t))
print("tinypytorch with identity hooks:")
print(ours(lambda v: v, lambda v: v))

# %% [markdown]
# PyTorch's backward read $b + 1$ where the computation had used $b$, so it
# returned $2(b + 1) \cdot 2 = 4(2a + 1)$ and gave no warning. Without hooks,
# both frameworks raise here (step 36).
#
# tinypytorch keeps the check when hooks are set, wherever it can still apply.
# When a tensor is packed, it also keeps a weak reference to the saved array. If
# the array's version has moved when it is unpacked, and the unpacked array
# shares memory with the saved array, the values backward would read are the
# changed ones, so it raises:

# %%
print(inspect.getsource(graph.SavedTensor._unpack_hooked))

# %% [markdown]
# Hooks that keep a copy are not affected by a later in-place change, and both
# frameworks then return the right gradient.
#
# The check cannot see through every hook, though. A pair that keeps the array
# itself and copies it only when unpacking hands backward an array that shares
# no memory with the saved one, so tinypytorch cannot tell it from a safe copy,
# and it is then as silently wrong as PyTorch. A pack hook that needs a copy
# must make it when packing.

# %%
print("PyTorch with cloning hooks:    ", theirs(lambda t: t.clone(), lambda t: t))
print("tinypytorch with cloning hooks:", ours(lambda v: v.data.copy(), lambda v: v))
print("tinypytorch, copying only when unpacking:", ours(lambda v: v.data, lambda data: data.copy()))

# %% [markdown]
# ## Hooks that break the rules
#
# A pack hook must not change the tensor it receives. If it changes it in place,
# the forward computation would go on with values that are not the ones it
# computed. Both frameworks compare the version before and after the pack hook
# and raise. By then the change has already happened:

# %%
def pack_in_place(v):
    return v.add_(1.0)


x = Variable(np.array([1.0, 2.0]), name="x")
try:
    with saved_tensors_hooks(pack_in_place, lambda v: v):
        y = x * x
except RuntimeError as error:
    print("RuntimeError:", error)
print("x is now", x)

# %% [markdown]
# An unpack hook must return an array or a Variable. Anything else is refused
# with a `TypeError` when backward asks for the tensor, and so are hooks that
# cannot be called:

# %%
x = Variable(np.array([1.0, 2.0]), name="x")
with saved_tensors_hooks(lambda v: v, lambda v: str(v)):  # a description of the tensor, not the tensor
    y = (x * x).sum()
try:
    y.backward()
except TypeError as error:
    print("TypeError:", error)
try:
    with saved_tensors_hooks("pack", "unpack"):
        pass
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# The same computations with PyTorch's hooks:
#
# - the ticket example: the sequence of packs and unpacks and the values they
#   carry;
# - pack and unpack counts for `exp(a * a).sum()` and for a float64
#   `MLP((3, 4, 4, 1))` over two backward passes with `retain_graph`, and the
#   gradients, which must equal PyTorch's;
# - the float32 network with the simple float16 hook, whose gradients must equal
#   PyTorch's within float16's precision;
# - identity hooks and an in-place change: PyTorch's gradient differs from the
#   right one while tinypytorch raises, and cloning hooks give the right gradient
#   in both.

# %%
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


events, grad = run_tickets(tinypytorch, make_ours)
events_t, grad_t = run_tickets(torch, make_torch)
assert [e[:2] for e in events] == [e[:2] for e in events_t], (events, events_t)
for e, e_t in zip(events, events_t):
    np.testing.assert_allclose(e[2], e_t[2], rtol=1e-14)
np.testing.assert_allclose(grad, grad_t, rtol=1e-14)
print("ticket example:", " ".join(f"{kind} {ticket}" for kind, ticket, _ in events_t), "- as in PyTorch")


def counted(m, run):
    """Run `run(hooks)` under counting hooks; return the counts after forward, each backward, and run's result."""
    counts = {"pack": 0, "unpack": 0}
    snapshots = []

    def pack(v):
        counts["pack"] += 1
        return v

    def unpack(v):
        counts["unpack"] += 1
        return v

    hooks = (torch.autograd.graph.saved_tensors_hooks if m is torch else saved_tensors_hooks)(pack, unpack)
    result = run(hooks, lambda: snapshots.append((counts["pack"], counts["unpack"])))
    return snapshots, result


def exp_run(m, make):
    def run(hooks, snapshot):
        a = make([0.5, -1.0, 2.0])
        with hooks:
            y = m.exp(a * a).sum()
        snapshot()
        for _ in range(2):
            y.backward(retain_graph=True)
            snapshot()
        return np.asarray(a.grad.numpy() if m is torch else a.grad.data)
    return counted(m, run)


(counts_ours, grad), (counts_t, grad_t) = exp_run(tinypytorch, make_ours), exp_run(torch, make_torch)
assert counts_ours == counts_t == [(3, 0), (3, 3), (3, 6)], (counts_ours, counts_t)
np.testing.assert_allclose(grad, grad_t, rtol=1e-14)
print(f"exp(a * a).sum(): (packs, unpacks) after forward and two backwards {counts_t}, as in PyTorch")


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


mlp = MLP((3, 4, 4, 1), activation=F.tanh, rng=np.random.default_rng(0))
mlp_t = torch_mlp(mlp, torch.float64)
batch = np.random.default_rng(1).standard_normal((5, 3))


def mlp_run(m, model, params):
    def run(hooks, snapshot):
        with hooks:
            y = model(torch.from_numpy(batch) if m is torch else Variable(batch, requires_grad=False))
            loss = (y**2).sum()
        snapshot()
        for _ in range(2):
            loss.backward(retain_graph=True)
            snapshot()
        return [p.grad.numpy() if m is torch else p.grad.data for p in params]
    return counted(m, run)


(counts_ours, grads), (counts_t, grads_t) = (mlp_run(tinypytorch, mlp, list(mlp.params())),
                                              mlp_run(torch, mlp_t, list(mlp_t.parameters())))
assert counts_ours == counts_t, (counts_ours, counts_t)
for g, g_t in zip(grads, grads_t):
    np.testing.assert_allclose(g, g_t, rtol=1e-12, atol=1e-15)
print(f"MLP((3, 4, 4, 1)), float64: (packs, unpacks) {counts_t}, as in PyTorch;",
      "gradients after two passes equal PyTorch's")

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
print("float16 hooks, float32 MLP: gradients equal PyTorch's within 2^-11 of their largest entry;",
      "both frameworks' errors below 2e-3")

right = f"a.grad = {show(8 * np.array([1.0, 2.0]))}"
assert theirs(lambda t: t, lambda t: t) == f"a.grad = {show(4 * (2 * np.array([1.0, 2.0]) + 1))}" != right
assert ours(lambda v: v, lambda v: v).startswith("RuntimeError: one of the variables needed for gradient computation")
assert theirs(lambda t: t.clone(), lambda t: t) == ours(lambda v: v.data.copy(), lambda v: v) == right
print("identity hooks + in-place change: PyTorch returns 4(2a + 1) instead of 8a, tinypytorch raises;",
      "cloning hooks: 8a in both")
print("PyTorch check passed: hook call counts and gradients equal torch's; float16 hooks agree; "
      "in-place under identity hooks raises")
