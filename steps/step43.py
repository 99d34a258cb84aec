# %% [markdown]
# # Step 43: Checkpointing on saved-tensor hooks
#
# Step 42 checkpointed a function the reentrant way. The whole function became
# one node of the graph: its forward ran with recording off, and its backward
# ran the function again, this time recording, and then started a backward pass
# of its own inside the outer one. Step 42 ended with the limits of that form.
# When no input requires a gradient, there is no node, and the parameters
# inside get no gradient. `autograd.grad` cannot use it, because the inner pass
# writes into `.grad` instead of handing gradients back. And the function
# always runs to the end, even when backward needs only part of it.
#
# PyTorch recommends another form, `checkpoint(..., use_reentrant=False)`. It
# is built on step 38's saved-tensor hooks. The function runs normally, so
# its graph is recorded as usual, but every tensor it saves goes through a
# pack hook that keeps a small placeholder instead of the tensor. When backward
# needs one of those tensors, the unpack hook runs the function again and
# fills in every placeholder at once. The graph is the ordinary one; only
# *where the saved tensors come from* has changed. This step reads that code,
# counts what it recomputes, and looks at the errors it raises when the second
# run does not match the first.

# %%
import inspect
import tracemalloc

import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd, recomputation
from tinypytorch import functions as F
from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import MLP, Parameter
from tinypytorch.utils import checkpoint as checkpoint_module
from tinypytorch.utils import saved_tensors
from tinypytorch.utils.checkpoint import CheckpointError, checkpoint


def show(a):
    """An array with 4 decimals, printed the same way on every machine."""
    return np.array2string(np.asarray(a), precision=4, floatmode="fixed", separator=", ")


# %% [markdown]
# ## A function that says when it runs
#
# The function below applies six operations to its input. A helper `run`
# writes each operation's name into a log before running it, and adds
# "(again)" when the operation runs inside a recomputation
# (`recomputation.is_recomputing()`).
#
# Only the first three operations save tensors for backward (step 35): `sin`
# saves its input, since $\sin' = \cos$ needs it; the square $h \cdot h$ saves
# both factors; `tanh` saves its output, since $\tanh' = 1 - \tanh^2$. Adding
# 1, multiplying by 3 and negating save nothing: their derivatives are
# constants. So the function saves four tensors, and the last of them is saved
# by the third operation.

# %%
log = []


def run(name, operation, h):
    log.append(name + (" (again)" if recomputation.is_recomputing() else ""))
    return operation(h)


def f(x, m=tinypytorch):
    """Six operations; m is the module that provides sin and tanh (tinypytorch here, torch in the check)."""
    h = run("sin", m.sin, x)
    h = run("square", lambda h: h * h, h)
    h = run("tanh", m.tanh, h)
    h = run("add 1", lambda h: h + 1.0, h)
    h = run("times 3", lambda h: h * 3.0, h)
    return run("neg", lambda h: -h, h)


x0 = np.array([0.5, 1.0, 2.0])
x = Variable(x0.copy(), name="x")
y = checkpoint(f, x, use_reentrant=False).sum()
print("forward: ", log)
log.clear()
y.backward()
print("backward:", log)
print("x.grad =", show(x.grad))

# %% [markdown]
# The forward pass ran the six operations once. The backward pass ran three of
# them again: `sin`, the square and `tanh`. The last three were not repeated,
# because nothing they would compute is needed. This is **early stop**, and a
# later section counts it more carefully.
#
# The gradient is the same as without the checkpoint, down to the last bit,
# since the same operations ran on the same numbers:

# %%
x_plain = Variable(x0.copy())
f(x_plain).sum().backward()
print("plain x.grad =", show(x_plain.grad))
print("bitwise equal:", np.array_equal(x.grad.data, x_plain.grad.data))

# %% [markdown]
# ## Placeholders instead of tensors
#
# What did the graph keep? Step 35's `saved_tensors(y)` lists the functions
# behind `y` with the tensors they saved. Under the checkpoint, every one of
# them was packed by a hook, and what the hook kept is a `_Holder`, an empty
# object:

# %%
log.clear()
x = Variable(x0.copy(), name="x")
y = checkpoint(f, x, use_reentrant=False).sum()
for function, saved in saved_tensors(y):
    holder = saved.packed
    print(f"{type(function).__name__:5} keeps a {type(holder).__name__}, whose values are {holder.values}")

# %% [markdown]
# The hooks are methods of a `_Frame`, one object per checkpointed call. The
# frame remembers how to run the function again: the function, its inputs and
# the random state (step 41). It also keeps, for each holder, the shape, dtype
# and device of the tensor the holder stands for. That metadata is what
# the determinism check below compares.

# %%
frame = saved_tensors(y)[0][1].unpack_hook.__self__
print(type(frame).__name__, "with", len(frame.holders), "holders, in the order the tensors were saved:")
for meta in frame.metadata:
    print("  ", meta)

# %% [markdown]
# Here is the code. `checkpoint(..., use_reentrant=False)` comes to
# `_checkpoint_hooks`. Its tensor arguments are the ones to keep; any other
# argument (a flag, a number) is passed to the function as it is. Under
# `no_grad` nothing would be saved, so it just runs the function. Otherwise it
# makes a frame and runs the function under the frame's hooks:

# %%
print(inspect.getsource(checkpoint_module._checkpoint_hooks))
print(inspect.getsource(checkpoint_module._Frame.__init__))

# %% [markdown]
# The frame saves the inputs as `SavedTensor`s (step 35), exactly as a
# function saves a tensor. So the inputs are kept, and an in-place change to
# one of them after the forward pass is caught by step 36's version check.
#
# The pack hook makes a holder, keeps a *weak* reference to it and records the
# tensor's metadata. Autograd keeps the holder itself in the `SavedTensor`:

# %%
print(inspect.getsource(checkpoint_module._Holder))
print(inspect.getsource(checkpoint_module._Frame.pack))
print(inspect.getsource(checkpoint_module._metadata))

# %% [markdown]
# The frame holds its holders weakly so that it does not keep them alive. When
# a backward pass frees a function's saved tensors (step 35), the holders go
# with them.
#
# ### Recomputing on the first unpack
#
# Nothing happens until backward asks for a saved tensor. Then the unpack hook
# runs. Every backward pass has an id (`engine.current_pass()`). The first
# unpack in a pass finds no recomputation for that id and starts one. Later
# unpacks in the same pass find the tensors already in their holders:

# %%
print(inspect.getsource(checkpoint_module._Frame.unpack))

# %% [markdown]
# The recomputation unpacks the saved inputs (this is where the version check
# runs) and calls the function again, with recording on. It restores the
# random state first, and it runs under a second pair of hooks, with
# `repack` as the pack hook:

# %%
print(inspect.getsource(checkpoint_module._Frame.recompute))

# %% [markdown]
# The second run saves its tensors in the same order as the first run did. So
# the $k$-th tensor saved now belongs in the $k$-th holder. `repack` puts it
# there, detached: the values are needed, not the graph of the second run.
# The real graph is the one recorded in the forward pass, and its functions
# send their gradients to the same places as before.
#
# Once the $k$-th tensor is in place, where $k$ is the number of tensors the
# first run saved, nothing the rest of the function computes can be needed.
# `repack` then raises `_StopRecomputation` from inside the pack hook. The
# exception unwinds out of the function, and `recompute` catches it:

# %%
print(inspect.getsource(checkpoint_module._Frame.repack))

# %% [markdown]
# Each tensor is handed out once per pass. `unpack` replaces it by `None` as
# soon as it has given it away, so a recomputed tensor lives only until the
# function that needs it has run its backward. This is true even with
# `retain_graph=True`: a second pass recomputes again.
#
# We can watch the holders fill and empty. The function below registers a
# gradient hook (step 34) on an intermediate value. During the backward pass,
# that hook runs after `tanh`'s backward has asked for its saved output, and
# before the backward of the product has asked for anything. A holder is
# *empty* before the recomputation, *filled* after it and *handed out* once
# its tensor has been unpacked:

# %%
def state(holder_ref):
    values = list(holder_ref().values.values())
    return "empty" if not values else "handed out" if values[-1] is None else "filled"


def g(x):
    h = tinypytorch.sin(x) * x  # Sin saves x; Mul saves sin(x) and x
    if not recomputation.is_recomputing():
        h.register_hook(lambda grad: print("during backward:", [state(r) for r in frame.holders]))
    return tinypytorch.tanh(h)  # saves its output


x = Variable(x0.copy(), name="x")
y = checkpoint(g, x, use_reentrant=False).sum()
frame = saved_tensors(y)[0][1].unpack_hook.__self__
print("after forward:  ", [state(r) for r in frame.holders])
y.backward(retain_graph=True)
print("after backward: ", [state(r) for r in frame.holders])

# %% [markdown]
# Holders 0 to 2 belong to `sin` and the product, holder 3 to `tanh`. When the
# hook runs, the recomputation has filled all four, and only `tanh`'s tensor
# has been used. At the end of the pass every tensor has been used and
# dropped. The arrays they held are gone, although the graph was retained.

# %% [markdown]
# ## What is recomputed: early stop
#
# The count of operations that run again depends on where the last saving
# operation is, not on the length of the function. `checkpoint` takes
# `early_stop=True` by default. With `early_stop=False` the recomputation
# always runs to the end. Here is `f` again, counting each operation's runs,
# with both settings:

# %%
def count_runs(early_stop):
    log.clear()
    x = Variable(x0.copy())
    y = checkpoint(f, x, use_reentrant=False, early_stop=early_stop).sum()
    forward = len(log)
    y.backward()
    again = [name.removesuffix(" (again)") for name in log[forward:]]
    return forward, again, x.grad


for early_stop in (True, False):
    forward, again, grad = count_runs(early_stop)
    print(f"early_stop={early_stop!s:5}: {forward} operations in forward, {len(again)} again in backward:", again)
    print(f"                   x.grad = {show(grad)}")

# %% [markdown]
# Early stop saves three operations out of six here, and changes nothing in
# the gradient. PyTorch stops at the same place. The check at the end compares
# the counts. A function often ends with operations that save nothing, such as
# a residual addition, a reshape or a sum. With early stop, those are never
# rerun.

# %% [markdown]
# ## When the second run differs: the determinism check
#
# Everything above relies on the second run saving the same tensors as the
# first, in the same order. That is the case when the function is
# deterministic. If the second run takes another branch, the tensors no longer
# match their holders. The frame checks what it can:
#
# - the **number** of tensors saved, after the recomputation;
# - the **metadata** (shape, dtype, device) of each tensor, as it is saved.
#
# To see each error, `h` below reads a global setting that changes what it does.
# The forward pass runs with `CHANGE = None`. Then `CHANGE` is set before
# backward, and so only the recomputation sees it. The dtype change uses the
# package's `astype`, a differentiable cast whose backward casts the gradient
# back (step 44 has more to say about gradients and dtypes).

# %%
CHANGE = None


def h(x):
    a = tinypytorch.sin(x)  # saves x
    if CHANGE == "float32":
        a = tinypytorch.functions.astype(a, np.float32)
    if CHANGE != "one op fewer":
        a = a * a  # saves a twice
    b = tinypytorch.tanh(a)  # saves its output
    if CHANGE == "one op more":
        b = tinypytorch.exp(b)  # saves its output: a fifth tensor
    return b * 3.0


def backward_after_change(change, **options):
    """Forward with CHANGE = None, backward with CHANGE = change: x's gradient, or the error."""
    global CHANGE
    x = Variable(x0.copy())
    CHANGE = None
    y = checkpoint(h, x, use_reentrant=False, **options).sum()
    CHANGE = change
    try:
        y.backward()
        return f"no error, x.grad = {show(x.grad)}"
    except CheckpointError as error:
        return f"CheckpointError: {error}"
    finally:
        CHANGE = None


print("nothing changed:", backward_after_change(None))

# %% [markdown]
# ### Fewer tensors
#
# Without the product, the recomputation saves two tensors instead of four.
# It runs to the end without stopping early, and the count is then
# compared:

# %%
print(backward_after_change("one op fewer"))

# %% [markdown]
# ### Another dtype
#
# With the cast, the product saves float32 arrays where the first run saved
# float64 ones. The recomputed tensor would still fill its holder, but the
# metadata differs, and `repack` raises at the first tensor that differs:

# %%
print(backward_after_change("float32"))

# %% [markdown]
# PyTorch compares the metadata after the recomputation and lists every tensor
# that differs (here, positions 1 to 3). tinypytorch stops at the first one.
#
# ### More tensors, and what early stop hides
#
# With the extra `exp`, the recomputation saves a fifth tensor. With early
# stop, the recomputation never gets there. It stops when the fourth tensor is
# back, and the extra operation after it is never run, so nothing is seen.
# With `early_stop=False` the fifth tensor has no holder:

# %%
print("early_stop=True: ", backward_after_change("one op more"))
print("early_stop=False:", backward_after_change("one op more", early_stop=False))

# %% [markdown]
# In the first line the gradient is the one of the forward pass, which had no
# `exp`. That is right, since the graph being differentiated is the one from
# the forward pass.
#
# Early stop can also hide a change that matters. Say the extra operation
# comes *before* the last saving operation: here an extra `sin` of the
# product, between the product and `tanh`. It saves one tensor, so the fourth
# tensor of the recomputation is the product (the input of `sin`), not the
# output of `tanh`. The recomputation stops there, and `tanh`'s holder gets the
# wrong array. Its shape and dtype are right, so no check notices:

# %%
def h2(x, m=tinypytorch):
    a = m.sin(x)
    a = a * a
    if CHANGE == "extra sin":
        a = m.sin(a)  # saves a: the fourth tensor is now the product
    return m.tanh(a) * 3.0


def h2_gradient(change, **options):
    """Forward with CHANGE = None, backward with CHANGE = change: x's gradient (an array), or the error."""
    global CHANGE
    x = Variable(x0.copy())
    CHANGE = None
    y = checkpoint(h2, x, use_reentrant=False, **options).sum()
    CHANGE = change
    try:
        y.backward()
        return x.grad.data
    except CheckpointError as error:
        return error
    finally:
        CHANGE = None


print("the right gradient:         ", show(h2_gradient(None)))
print("extra sin, early_stop=True: ", show(h2_gradient("extra sin")))
print("extra sin, early_stop=False: CheckpointError:", h2_gradient("extra sin", early_stop=False))


# %% [markdown]
# The second gradient is wrong, and nothing was raised. PyTorch computes the
# same wrong gradient (the check at the end compares them). The checks count
# tensors and compare their metadata. They cannot compare values, because
# keeping the values would defeat the purpose. A function whose behaviour
# depends on state that may change between forward and backward (a global
# flag, a counter, a training step number) is a bug in checkpointed code.
# Random numbers are the common case, which is why `preserve_rng_state=True`
# restores the random state (step 41). `early_stop=False` catches more of
# these bugs but always runs the whole function again.
#
# `determinism_check="none"` turns the metadata comparison off. The float32
# recomputation is then accepted, and backward computes with values that were
# rounded to float32. The gradient comes out close to the right one, but not
# equal to it:

# %%
print(backward_after_change("float32", determinism_check="none"))
rounded = Variable(x0.copy())
y = checkpoint(h, rounded, use_reentrant=False, determinism_check="none").sum()
CHANGE = "float32"
y.backward()
CHANGE = None
exact = Variable(x0.copy())
h(exact).sum().backward()
difference = np.abs(rounded.grad.data - exact.grad.data).max()
print("bitwise equal to the float64 gradient:", np.array_equal(rounded.grad.data, exact.grad.data),
      "  within 1e-6:", bool(difference < 1e-6))

# %% [markdown]
# ## What hooks make possible
#
# The reentrant checkpoint is one node whose backward runs a backward pass of
# its own. The hook-based one leaves the graph as it was, and only changes
# where the saved tensors come from. That makes everything that works on an
# ordinary graph work here too.
#
# ### When no input requires a gradient
#
# The first segment of a network usually receives plain data, which requires
# no gradient. Step 42's reentrant checkpoint then recorded no node, and the
# parameters inside got no gradient. Here the function's own operations are
# recorded as usual, and the parameters are among their inputs:

# %%
layer_model = MLP((3, 4, 2), activation=F.tanh, rng=np.random.default_rng(0))
data = Variable(np.random.default_rng(1).standard_normal((5, 3)), requires_grad=False)
(checkpoint(layer_model, data, use_reentrant=False) ** 2).sum().backward()
checkpointed_grads = [p.grad.data for p in layer_model.params()]
layer_model.cleargrads()
(layer_model(data) ** 2).sum().backward()
print("parameter gradients bitwise equal to the plain run's:",
      all(np.array_equal(g, p.grad.data) for g, p in zip(checkpointed_grads, layer_model.params())))

# %% [markdown]
# ### `autograd.grad` and second derivatives
#
# `autograd.grad` (step 33) hands gradients back instead of adding them into
# `.grad`. Step 42's reentrant checkpoint refused it. With hooks, a backward
# pass of `autograd.grad` is a backward pass like any other. With
# `create_graph=True` (step 27) the first derivative is itself a graph, which a
# second pass can differentiate. Below, `calls` counts the runs of
# $u(x) = \sin(x)\, e^{x}$. Its derivatives are
# $u' = (\cos x + \sin x)\, e^x$ and $u'' = 2 \cos(x)\, e^x$:

# %%
calls = [0]


def u(x, m=tinypytorch):
    calls[0] += 1
    return m.sin(x) * m.exp(x)


x = Variable(x0.copy())
y = checkpoint(u, x, use_reentrant=False).sum()
(du,) = autograd.grad(y, x, create_graph=True)
(d2u,) = autograd.grad(du.sum(), x)
print("u'  =", show(du), "  (cos x + sin x) e^x =", show((np.cos(x0) + np.sin(x0)) * np.exp(x0)))
print("u'' =", show(d2u), "  2 cos(x) e^x        =", show(2 * np.cos(x0) * np.exp(x0)))
print("u ran", calls[0], "times")

# %% [markdown]
# `u` ran three times: once in forward, and once for each of the two backward
# passes. The second pass goes through the first derivative's graph, which
# refers to the tensors `u` saved. Those are holders, so they are recomputed
# again.
#
# ### Nested checkpoints
#
# A checkpointed function may itself call `checkpoint`. The inner call
# creates a frame whose hooks are innermost, so they pack what the inner
# function saves (step 38: the innermost pair wins). The outer frame sees only
# the inner frame's inputs. When the outer recomputation runs the outer
# function, the inner checkpoint runs again under the outer `repack`, and the
# inner function is recomputed later, when backward reaches it.

# %%
runs = {"outer": 0, "inner": 0}


def inner(h):
    runs["inner"] += 1
    return tinypytorch.tanh(h) * h


def outer(x):
    runs["outer"] += 1
    return tinypytorch.sin(checkpoint(inner, tinypytorch.exp(x), use_reentrant=False))


def nested(x):
    return tinypytorch.sin(inner(tinypytorch.exp(x)))


x, x_plain = Variable(x0.copy()), Variable(x0.copy())
checkpoint(outer, x, use_reentrant=False).sum().backward()
print("runs:", runs)
nested(x_plain).sum().backward()
print("x.grad =", show(x.grad), "  bitwise equal to the plain run:", np.array_equal(x.grad.data, x_plain.grad.data))

# %% [markdown]
# The outer function ran twice: in forward and in the outer recomputation.
# The inner one ran three times: in forward, inside the outer recomputation, and
# in its own recomputation. Each level of nesting saves memory and costs one
# more run of everything inside it.
#
# ### The inputs are version-checked
#
# The frame keeps its inputs as saved tensors, so step 36's rule holds. If a
# checkpoint's input is changed in place after the forward pass, the
# recomputation would run on the new values. Backward refuses:

# %%
x = Variable(x0.copy())
a = x * 2.0
y = checkpoint(u, a, use_reentrant=False).sum()
a.add_(1.0)
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ### Backward twice, and `retain_graph`
#
# The holders are saved tensors like any others. A backward pass frees them,
# and a second pass raises step 35's error. With `retain_graph=True` they stay,
# and every pass recomputes:

# %%
calls[0] = 0
x = Variable(x0.copy())
y = checkpoint(u, x, use_reentrant=False).sum()
print("after forward:                   u ran", calls[0], "time")
y.backward(retain_graph=True)
print("after backward(retain_graph=True): u ran", calls[0], "times")
y.backward()
print("after backward():                 u ran", calls[0], "times")
try:
    y.backward()
except RuntimeError as error:
    print("a third backward: RuntimeError:", str(error)[:56], "...")

# %% [markdown]
# ### Each tensor is unpacked once per pass
#
# A holder hands its tensor out once per backward pass. A custom `Function`
# whose backward reads `saved_tensors` twice works in an ordinary graph, but
# not under this checkpoint:

# %%
class SquareReadingTwice(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x

    def backward(self, gy):
        (x,) = self.saved_tensors
        (x_again,) = self.saved_tensors  # a second unpack of the same tensor
        return 2.0 * x_again * gy


x = Variable(x0.copy())
SquareReadingTwice()(x).sum().backward()
print("without checkpoint: x.grad =", show(x.grad))
y = checkpoint(lambda x: SquareReadingTwice()(x), x, use_reentrant=False).sum()
try:
    y.backward()
except CheckpointError as error:
    print("CheckpointError:", error)

# %% [markdown]
# ### Under `no_grad`, just a call
#
# Nothing is saved when the graph is not recorded, so there is nothing to
# recompute. `checkpoint` then simply calls the function:

# %%
calls[0] = 0
with tinypytorch.no_grad():
    y = checkpoint(u, Variable(x0.copy()), use_reentrant=False)
print("u ran", calls[0], "time; the result requires grad:", y.requires_grad)

# %% [markdown]
# ### Dropout
#
# Step 42 saved the random state with each checkpoint and replayed it in the
# recomputation. The hook-based form does the same (`preserve_rng_state=True`
# by default, the `recomputation.replaying` context in `recompute`). A float64 network with
# dropout gets the same gradients, bit for bit, with and without the
# checkpoint:

# %%
drop_model = MLP((4, 16, 16, 1), activation=F.tanh, rng=np.random.default_rng(0))
drop_batch = np.random.default_rng(1).standard_normal((8, 4))


def dropped(h):
    for layer in drop_model.layers[:-1]:
        h = F.dropout(tinypytorch.tanh(layer(h)), p=0.3)
    return h


def dropout_gradients(use_checkpoint, **options):
    drop_model.cleargrads()
    tinypytorch.manual_seed(0)
    x = Variable(drop_batch.copy())
    hidden = checkpoint(dropped, x, use_reentrant=False, **options) if use_checkpoint else dropped(x)
    (drop_model.layers[-1](hidden) ** 2).sum().backward()
    return [p.grad.data for p in drop_model.params()] + [x.grad.data]


plain = dropout_gradients(False)
same = all(np.array_equal(a, b) for a, b in zip(plain, dropout_gradients(True)))
differ = not all(np.array_equal(a, b) for a, b in zip(plain, dropout_gradients(True, preserve_rng_state=False)))
print("preserve_rng_state=True:  every gradient bitwise equal to the plain run:", same)
print("preserve_rng_state=False: the gradients differ:", differ)

# %% [markdown]
# ## Memory
#
# What does the checkpoint keep between forward and backward? Step 38's trick
# answers that: a pack hook around the whole computation that records every
# array it is given. Under the checkpoint the frame's hooks are innermost, so
# they pack everything the checkpointed function saves. The outer hook sees
# only what is saved outside the checkpoint, and the checkpoint's inputs,
# which the frame saves as ordinary saved tensors.
#
# The network is an `MLP` with eight hidden layers of width 256 and `tanh`,
# and a batch of 256 float64 inputs. So each hidden activation is
# $256 \times 256 \times 8$ bytes, 0.5 MiB. The eight hidden layers are
# checkpointed as one function; the output layer and the loss are not. The
# hook skips parameters, which the model keeps anyway, and counts each array
# once.

# %%
model = MLP((64,) + (256,) * 8 + (1,), activation=F.tanh, rng=np.random.default_rng(0))
batch = np.random.default_rng(1).standard_normal((256, 64))
ACTIVATION = 256 * 256 * 8  # bytes


def hidden_layers(h):
    for layer in model.layers[:-1]:
        h = tinypytorch.tanh(layer(h))
    return h


def loss_of(use_checkpoint):
    x = Variable(batch, requires_grad=False)
    h = checkpoint(hidden_layers, x, use_reentrant=False) if use_checkpoint else hidden_layers(x)
    return (model.layers[-1](h) ** 2).sum()


def bytes_held(use_checkpoint):
    arrays = {}  # id -> array: each array counted once, and held so that its id stays unique

    def pack(v):
        if not isinstance(v, Parameter):
            arrays[id(v.data)] = v.data
        return v

    with saved_tensors_hooks(pack, lambda v: v):
        loss = loss_of(use_checkpoint)
    held = sum(a.nbytes for a in arrays.values())
    arrays.clear()
    model.cleargrads()
    loss.backward()
    return held


plain_bytes, checkpointed_bytes = bytes_held(False), bytes_held(True)
for name, held in [("plain", plain_bytes), ("checkpointed", checkpointed_bytes)]:
    print(f"{name:12}: {held:9,} bytes held for backward ({held / ACTIVATION:.2f} activations)")

# %% [markdown]
# Without the checkpoint the graph holds the eight `tanh` outputs (each is
# also the next layer's input), the input batch (a quarter of an activation,
# 64 columns) and the network's output, which the square in the loss saves.
# With the checkpoint it holds the batch, which is the checkpoint's input, the
# last hidden activation, which the output layer saves, and the output.
#
# `tracemalloc` measures the same thing from the allocator's side. It also
# shows the other half of the story, the peak during the backward pass. Both
# are printed in activations of 0.5 MiB, rounded to a whole number, since the
# allocator also counts small Python objects:

# %%
def traced_memory(use_checkpoint):
    model.cleargrads()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    loss = loss_of(use_checkpoint)
    after_forward = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.reset_peak()
    loss.backward()
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    return after_forward, peak


for use_checkpoint in (False, True):
    after_forward, peak = traced_memory(use_checkpoint)
    name = "checkpointed" if use_checkpoint else "plain"
    print(f"{name:12}: activations held after forward ~{after_forward / ACTIVATION:.0f}, "
          f"at the peak of backward ~{peak / ACTIVATION:.0f}")

# %% [markdown]
# Between forward and backward the checkpoint holds one activation instead of
# eight. During backward, though, the peak is the same. The first unpack
# recomputes all eight activations at once, and they are released one by one as
# the backward pass uses them. One checkpoint around everything only moves the
# memory from *between* the passes to *during* backward. To lower the peak, the
# network is cut into segments, each checkpointed on its own, so that only one
# segment is recomputed at a time. That is step 44's `checkpoint_sequential`
# and its $\sqrt{N}$ schedule.

# %% [markdown]
# ## Check against PyTorch
#
# The same functions checkpointed with
# `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`, in float64:
#
# - the six-operation function `f`: its gradient, and the operations run in
#   forward and again in backward, with and without early stop;
# - $u = \sin(x)\, e^x$: `autograd.grad` with `create_graph`, the second
#   derivative and how often $u$ ran; then two passes with `retain_graph`: the
#   runs, the doubled gradient and the error of a third pass;
# - the nested checkpoint: its gradient and run counts;
# - the three determinism errors, matched on their wording; the gradient with
#   an extra operation after the last save; the wrong gradient that early stop
#   lets through; the in-place change of an input;
# - dropout, where PyTorch's gradients with and without the checkpoint are
#   bitwise equal too, and the bytes the MLP holds for backward.

# %%
import functools

import torch
import torch.utils.checkpoint as torch_checkpoint


def torch_leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def torch_checkpointed(function, **options):
    return functools.partial(torch_checkpoint.checkpoint, function, use_reentrant=False, **options)


# f: the gradient and the operations run, with and without early stop
for early_stop in (True, False):
    forward, again, grad = count_runs(early_stop)
    log.clear()
    xt = torch_leaf(x0)
    yt = torch_checkpointed(functools.partial(f, m=torch), early_stop=early_stop)(xt).sum()
    forward_t = len(log)
    yt.backward()
    assert (forward, again) == (forward_t, log[forward_t:]), (again, log)
    np.testing.assert_allclose(grad.data, xt.grad.numpy(), rtol=1e-14)
    print(f"f, early_stop={early_stop}: {forward} operations in forward and {len(again)} again in backward "
          "in both; gradients equal")

# u: autograd.grad with create_graph, the second derivative, the runs
calls[0] = 0
x = Variable(x0.copy())
(du,) = autograd.grad(checkpoint(u, x, use_reentrant=False).sum(), x, create_graph=True)
(d2u,) = autograd.grad(du.sum(), x)
calls_ours, calls[0] = calls[0], 0
xt = torch_leaf(x0)
(du_t,) = torch.autograd.grad(torch_checkpointed(functools.partial(u, m=torch))(xt).sum(), xt, create_graph=True)
(d2u_t,) = torch.autograd.grad(du_t.sum(), xt)
np.testing.assert_allclose(du.data, du_t.detach().numpy(), rtol=1e-14)
np.testing.assert_allclose(d2u.data, d2u_t.numpy(), rtol=1e-14)
assert calls_ours == calls[0] == 3, (calls_ours, calls)
print("u: autograd.grad with create_graph and the second derivative equal PyTorch's; u ran 3 times in both")


def two_passes(m, x, checkpointed):
    """Runs of u after forward and after two passes (the first retained), x.grad, and a third pass's error."""
    calls[0] = 0
    y = checkpointed(functools.partial(u, m=m))(x).sum()
    counts = [calls[0]]
    for retain in (True, False):
        y.backward(retain_graph=retain)
        counts.append(calls[0])
    try:
        y.backward()
    except RuntimeError as error:
        return counts, np.asarray(x.grad.numpy() if m is torch else x.grad.data), str(error)[:60]


ours = two_passes(tinypytorch, Variable(x0.copy()), lambda fn: functools.partial(checkpoint, fn, use_reentrant=False))
theirs = two_passes(torch, torch_leaf(x0), torch_checkpointed)
assert ours[0] == theirs[0] == [1, 2, 3] and ours[2] == theirs[2], (ours, theirs)
np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-14)
np.testing.assert_allclose(theirs[1], 2 * (np.cos(x0) + np.sin(x0)) * np.exp(x0), rtol=1e-14)
print("u, two passes: runs [1, 2, 3] and doubled gradients in both; a third pass:", repr(theirs[2] + "..."))

# nesting: the gradient and the runs
runs.update(outer=0, inner=0)
x = Variable(x0.copy())
checkpoint(outer, x, use_reentrant=False).sum().backward()
runs_t = {"outer": 0, "inner": 0}


def inner_t(h):
    runs_t["inner"] += 1
    return torch.tanh(h) * h


def outer_t(x):
    runs_t["outer"] += 1
    return torch.sin(torch_checkpointed(inner_t)(torch.exp(x)))


xt = torch_leaf(x0)
torch_checkpointed(outer_t)(xt).sum().backward()
assert runs == runs_t == {"outer": 2, "inner": 3}, (runs, runs_t)
np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-14)
print("nested checkpoints: gradients equal, runs", runs_t, "in both")


# the determinism checks
def h_t(x):
    a = torch.sin(x)
    if CHANGE == "float32":
        a = a.to(torch.float32)
    if CHANGE != "one op fewer":
        a = a * a
    b = torch.tanh(a)
    if CHANGE == "one op more":
        b = torch.exp(b)
    return b * 3.0


def torch_after_change(function, change, **options):
    """As backward_after_change, in PyTorch: the gradient (an array) or the error's message."""
    global CHANGE
    xt = torch_leaf(x0)
    CHANGE = None
    yt = torch_checkpointed(function, **options)(xt).sum()
    CHANGE = change
    try:
        yt.backward()
        return xt.grad.numpy()
    except torch_checkpoint.CheckpointError as error:
        return f"CheckpointError: {error}"
    finally:
        CHANGE = None


for change, options, expected in [
    ("one op fewer", {}, ["A different number of tensors was saved during the original forward and recomputation.",
                          "Number of tensors saved during forward: 4\n"
                          "Number of tensors saved during recomputation: 2."]),
    ("float32", {}, ["Recomputed values for the following tensors have different metadata than during the forward "
                     "pass.\ntensor at position 1:\nsaved metadata: {", "float64",
                     "recomputed metadata: {", "float32"]),
    ("one op more", {"early_stop": False}, ["trying to save more tensors during recomputation than during the "
                                            "original forward pass."]),
]:
    ours, theirs = backward_after_change(change, **options), torch_after_change(h_t, change, **options)
    for text in expected:
        assert text in ours and text in theirs, (text, ours, theirs)
    print(f"{change}: CheckpointError in both, {expected[0][:60]}...")

right = 3 * (1 - np.tanh(np.sin(x0) ** 2) ** 2) * 2 * np.sin(x0) * np.cos(x0)  # d/dx 3 tanh(sin(x)^2)
assert backward_after_change("one op more") == f"no error, x.grad = {show(right)}"
np.testing.assert_allclose(torch_after_change(h_t, "one op more"), right, rtol=1e-14)
print("one op more, early stop: no error in either, and the gradient of what the forward pass computed")

wrong, wrong_t = h2_gradient("extra sin"), torch_after_change(functools.partial(h2, m=torch), "extra sin")
np.testing.assert_allclose(wrong, wrong_t, rtol=1e-14)
assert not np.allclose(wrong_t, right)
print("extra sin before the last save, early stop: the same wrong gradient in both,", show(wrong_t))

xt = torch_leaf(x0)
at = xt * 2.0
yt = torch_checkpointed(functools.partial(u, m=torch))(at).sum()
at.add_(1.0)
try:
    yt.backward()
    raise AssertionError("PyTorch did not raise")
except RuntimeError as error:
    assert "modified by an inplace operation" in str(error) and "is at version 1; expected version 0" in str(error)
x = Variable(x0.copy())
a = x * 2.0
y = checkpoint(u, a, use_reentrant=False).sum()
a.add_(1.0)
try:
    y.backward()
    raise AssertionError("tinypytorch did not raise")
except RuntimeError as error:
    assert "modified by an inplace operation" in str(error) and "is at version 1; expected version 0" in str(error)
print("an input changed in place after forward: both raise, naming versions 1 and 0")

# dropout, in PyTorch (the weights of drop_model)
linears = []
for layer in drop_model.layers:
    linears.append(torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=torch.float64))
    with torch.no_grad():
        linears[-1].weight.copy_(torch.from_numpy(layer.weight.data))
        linears[-1].bias.copy_(torch.from_numpy(layer.bias.data))


def dropped_t(h):
    for linear in linears[:-1]:
        h = torch.nn.functional.dropout(torch.tanh(linear(h)), p=0.3)
    return h


def dropout_gradients_t(use_checkpoint):
    for linear in linears:
        linear.zero_grad()
    torch.manual_seed(0)
    xt = torch_leaf(drop_batch)
    hidden = torch_checkpointed(dropped_t)(xt) if use_checkpoint else dropped_t(xt)
    (linears[-1](hidden) ** 2).sum().backward()
    return [p.grad.clone() for linear in linears for p in linear.parameters()] + [xt.grad]


assert all(torch.equal(a, b) for a, b in zip(dropout_gradients_t(False), dropout_gradients_t(True)))
assert all(np.array_equal(a, b) for a, b in zip(dropout_gradients(False), dropout_gradients(True)))
print("dropout: gradients with and without the checkpoint bitwise equal, in both")

# the bytes held for backward by the MLP
layers_t = []
for layer in model.layers:
    linear = torch.nn.Linear(layer.weight.shape[1], layer.weight.shape[0], dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(layer.weight.data))
        linear.bias.copy_(torch.from_numpy(layer.bias.data))
    layers_t.append(linear)
parameters_t = {p.data_ptr() for linear in layers_t for p in linear.parameters()}


def bytes_held_t(use_checkpoint):
    storages = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in parameters_t:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def hidden_layers_t(h):
        for linear in layers_t[:-1]:
            h = torch.tanh(linear(h))
        return h

    xt = torch.from_numpy(batch)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h = torch_checkpointed(hidden_layers_t)(xt) if use_checkpoint else hidden_layers_t(xt)
        loss = (layers_t[-1](h) ** 2).sum()
    held = sum(storages.values())
    loss.backward()
    return held, loss.item()


(plain_t, loss_plain_t), (checkpointed_t, loss_t) = bytes_held_t(False), bytes_held_t(True)
assert (plain_bytes, checkpointed_bytes) == (plain_t, checkpointed_t), (plain_t, checkpointed_t)
np.testing.assert_allclose(float(loss_of(True).data), loss_t, rtol=1e-12)
print(f"MLP: {plain_t:,} bytes held plain and {checkpointed_t:,} checkpointed, in both")
print("PyTorch check passed: non-reentrant checkpoint grads, recompute counts, early stop, determinism errors "
      "and held bytes as torch's")
