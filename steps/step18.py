# %% [markdown]
# # Step 18: What backward keeps, and what it need not
#
# Step 17 freed a graph as soon as nobody holds its result. This step asks
# what a graph must keep while it lives. The answer is the idea of the step:
# **keep only what a backward pass will read.**
#
# - The answer of a backward pass is the gradients of the leaves (inputs and
#   parameters). An intermediate variable $t$'s gradient is read exactly
#   once, by $t$'s creator, and step 16's order guarantees it is complete by
#   then. So once a function has run, `backward` drops its outputs'
#   gradients, unless called with `retain_grad=True`. The seed
#   $\partial y / \partial y$ goes too: it is read once, by $y$'s creator.
# - The graph itself (the creator links, the inputs each function holds) is
#   kept only for a backward pass. When none will come, for instance when a
#   trained model is only evaluated, recording it keeps every intermediate
#   array alive for nothing. A setting, `Config.enable_backprop`, turns
#   recording off, and `with no_grad():` turns it off for a block.
#
# PyTorch makes the same choices: after `backward` only leaf tensors have a
# `.grad` (a non-leaf keeps one only if `t.retain_grad()` was called on it),
# and `torch.no_grad()` records no graph. Dropping intermediate gradients
# also removes step 14's trap: a second `backward` finds no stale
# intermediate gradient to add to, so repeated calls accumulate into the
# leaves exactly as in PyTorch.
#
# The whole snapshot is collapsed below; the change follows it.

# %% tags=["hide-cell"]
import contextlib
import weakref

import numpy as np


class Config:
    enable_backprop = True  # record the graph in Function.__call__


@contextlib.contextmanager
def using_config(name, value):
    known = [key for key in vars(Config) if not key.startswith("_")]
    if name not in known:  # a typo would otherwise set a new attribute and change nothing
        raise ValueError(f"using_config: unknown option {name!r}; known options: {', '.join(known)}")
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:  # restore even when the block raises
        setattr(Config, name, old_value)


def no_grad():
    return using_config("enable_backprop", False)


# %% tags=["hide-cell"]
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf
        self.generation = 0

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        self.grad = None

    def backward(self, retain_grad=False):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = []  # functions whose backward has still to run
        seen = set()

        def add_func(f):
            if f not in seen:  # a function reached through several outputs runs once
                funcs.append(f)
                seen.add(f)
                funcs.sort(key=lambda func: func.generation)  # highest generation last, for pop()

        if self.creator is not None:  # a leaf: nothing to propagate to
            add_func(self.creator)
        while funcs:
            f = funcs.pop()
            gys = [output().grad for output in f.outputs]  # outputs are weak references: call to get the Variable
            gxs = f.backward(*gys)  # one step of the chain rule
            if not isinstance(gxs, tuple):  # one input: treat its gradient as a 1-tuple
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs, strict=True):
                if x.grad is None:
                    x.grad = as_array(gx)  # 0-d arithmetic gives a NumPy scalar: keep grads ndarrays like data
                else:
                    x.grad = as_array(x.grad + gx)  # a new array, never `+=`: gx may be another variable's grad
                if x.creator is not None:
                    add_func(x.creator)  # continue towards the leaves
            if not retain_grad:
                for output in f.outputs:
                    output().grad = None  # used up, the seed included: f was the only function that needed it


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


# %% tags=["hide-cell"]
class Function:
    def __call__(self, *inputs):
        xs = [x.data for x in inputs]  # unwrap: forward works on plain ndarrays
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):  # one array: treat it as a 1-tuple from here on
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]  # NumPy may return a scalar for 0-d input
        if Config.enable_backprop:  # under no_grad nothing links the outputs to this function or its inputs
            self.generation = max(x.generation for x in inputs)
            for output in outputs:
                output.set_creator(self)  # the output remembers where it came from
            self.inputs = inputs  # kept for backward, which needs the input values
            self.outputs = [weakref.ref(output) for output in outputs]  # weak: output.creator -> self is not a cycle
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *gys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")


# %% tags=["hide-cell"]
class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        x = self.inputs[0].data
        return 2 * x * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        x = self.inputs[0].data
        return np.exp(x) * gy


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy  # dy/dx0 = dy/dx1 = 1


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def add(x0, x1):
    return Add()(x0, x1)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %%
from tinypytorch.utils.listing import show_change

show_change(18, "Variable.backward", "Function.__call__")

# %% [markdown]
# `Config` is a class used as a namespace: its attributes are settings any
# code can read. `using_config(name, value)`, a generator that
# `@contextlib.contextmanager` turns into a context manager, sets one
# for a `with` block and restores it in a
# `finally`, so an exception cannot leave recording off; it
# rejects unknown names, since with a typo `setattr` would silently make a
# new attribute. `no_grad()` is the common case, as `torch.no_grad()` is in
# PyTorch (expand for the code; the tests check the restoring and the typo):

# %% tags=["hide-cell"]
show_change(18, "Config", "using_config", "no_grad")

# %% [markdown]
# ## Only the leaves keep their gradients
#
# $t = x_0 + x_1$ and $y = x_0 + t$, so $\partial y / \partial x_0 = 2$ and
# $\partial y / \partial x_1 = 1$. By default only the leaves keep a gradient;
# with `retain_grad=True` every variable does:

# %%
def graph():
    x0, x1 = Variable(np.array(1.0)), Variable(np.array(1.0))
    t = add(x0, x1)
    return x0, x1, t, add(x0, t)


for retain_grad in (False, True):
    x0, x1, t, y = graph()
    y.backward(retain_grad=retain_grad)
    grads = "  ".join(f"{name}.grad = {v.grad}" for name, v in [("y", y), ("t", t), ("x0", x0), ("x1", x1)])
    print(f"retain_grad={retain_grad!s:5}  {grads}")

# %% tags=["hide-input"]
import tracemalloc  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402  (harness: the pictures and measurements of this page)

from tinypytorch.utils.pictures import draw_dag, graph_of  # noqa: E402


def grad_label(name, v):
    return f"{name}\n{'no grad' if v.grad is None else f'grad {float(v.grad):g}'}"


fig, axes = plt.subplots(1, 2, figsize=(9, 2.8))
for ax, retain_grad in zip(axes, (False, True)):
    x0, x1, t, y = graph()
    y.backward(retain_grad=retain_grad)
    nodes, edges = graph_of(y, names=[(v, grad_label(n, v)) for v, n in [(x0, "x0"), (x1, "x1"), (t, "t"), (y, "y")]])
    outer, inner = [n for n, (kind, _) in nodes.items() if kind == "function"]  # met from y backwards
    at = {label.split()[0]: n for n, (kind, label) in nodes.items() if kind != "function"}
    where = {at["x0"]: (0, 0.8), at["x1"]: (0, -0.4), inner: (0.9, 0), at["t"]: (2.5, 0), outer: (3.5, 0.8), at["y"]: (4.7, 0.8)}
    draw_dag(nodes, edges, ax=ax, positions=where, title=f"after y.backward(retain_grad={retain_grad})")
fig.tight_layout()
plt.show()

# %% [markdown]
# Left, the default: the leaves (blue) hold the answer, $t$ and $y$ hold
# nothing. Right, every variable keeps what passed through it, which is
# handy for inspecting a graph. Step 14's trap is gone: two backward calls on
# $y = (x^2)^2$ give $2 \cdot 4x^3 = 64$ at $x = 2$, where step 14 gave 96.

# %%
x = Variable(np.array(2.0))
y = square(square(x))
y.backward()
y.backward()
print("y = (x^2)^2, two backward calls: x.grad =", x.grad)

# %% [markdown]
# ## Forward passes without a graph
#
# Inside `with no_grad():` functions still compute, but record nothing: the
# output has no creator, and the function object, holding no inputs, is gone
# when `__call__` returns. Calling `backward` on such a result only sets its
# own seed; `x` receives nothing.

# %%
x = Variable(np.array(2.0))
with no_grad():
    print("inside:  Config.enable_backprop =", Config.enable_backprop)
    y = square(x)
print("after:   Config.enable_backprop =", Config.enable_backprop)
y.backward()
print("y.data =", y.data, " y.creator =", y.creator, " y.grad =", y.grad, " x.grad =", x.grad)

# %% [markdown]
# ## What each saves, measured
#
# A chain of eight `square`s on $10^6$ numbers (8 MB an array), measured with
# `tracemalloc` and rounded to whole megabytes: the gradients still held
# after `backward`, and, run forward only, the peak and what is held while
# we keep the result, recording the graph or under `no_grad()`.

# %% tags=["hide-input"]
def chain_of_squares(x, depth=8):
    y = x
    for _ in range(depth):
        y = square(y)
    return y


def bytes_held_after_backward(retain_grad):
    x = Variable(np.random.default_rng(0).uniform(0.9, 1.1, 1_000_000))  # values stay moderate under x^256
    y = chain_of_squares(x)
    tracemalloc.start()
    try:
        y.backward(retain_grad=retain_grad)
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def forward_memory():
    """(held while y is alive, peak) in bytes, of the forward pass alone (the input is allocated before)."""
    x = Variable(np.ones(1_000_000))
    tracemalloc.start()
    try:
        y = chain_of_squares(x)
        return tracemalloc.get_traced_memory()  # (current, peak) while y is alive
    finally:
        tracemalloc.stop()


grads_held = {retain_grad: bytes_held_after_backward(retain_grad) / 1e6 for retain_grad in (True, False)}
recording = forward_memory()
with no_grad():
    not_recording = forward_memory()
for retain_grad, mb in grads_held.items():
    print(f"backward(retain_grad={retain_grad!s:5}):  gradients held after backward {mb:3.0f} MB")
for name, (held, peak) in [("recording the graph", recording), ("under no_grad()", not_recording)]:
    print(f"forward, {name:20} peak {peak / 1e6:3.0f} MB, held while y is alive {held / 1e6:3.0f} MB")

fig, (left, right) = plt.subplots(1, 2, figsize=(9, 2.8))
left.barh(["retain_grad=True", "default"], [grads_held[True], grads_held[False]], color=["0.6", "#4a86c8"])
left.set(xlabel="MB of gradients held after backward", title="backward keeps the leaf's gradient only")
names = ["recording", "no_grad()"]
right.barh([n + ", held" for n in names], [recording[0] / 1e6, not_recording[0] / 1e6], color=["0.6", "#4a86c8"])
right.barh([n + ", peak" for n in names], [recording[1] / 1e6, not_recording[1] / 1e6], color=["0.75", "#9fc5e8"])
right.set(xlabel="MB allocated by the forward pass", title="no_grad() keeps no graph")
fig.tight_layout()
plt.show()

# %% [markdown]
# After backward, $72$ MB is nine gradients (the leaf's, seven intermediates'
# and the seed); by default $8$ MB, the leaf's. Forward, the recorded graph
# keeps all eight results alive, $64$ MB, for a backward pass that may come;
# without it at most two results exist at once, the running function's input
# and output ($16$ MB peak), and only the result remains ($8$ MB). The saving
# grows with depth; the peak under `no_grad()` does not.
#
# ## Check against PyTorch
#
# After a default backward pass the intermediate and the output have no
# gradient and the leaves have PyTorch's. PyTorch, too, keeps no gradient on
# a non-leaf (reading one makes it warn, so the check silences that while it
# looks). Two backward calls on $(x^2)^2$ accumulate to PyTorch's value, and
# a function called under `no_grad` records nothing, as under
# `torch.no_grad()`. (The tests try random graphs, shapes and a seed reused
# in a second graph.)

# %%
import warnings  # noqa: E402

import torch  # noqa: E402

v0, v1 = np.random.default_rng(0).standard_normal((2, 3))
x0, x1 = Variable(v0), Variable(v1)
t = square(add(x0, x1))
y = add(x0, t)
y.backward()
x0t, x1t = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
tt = (x0t + x1t) ** 2
yt = x0t + tt
yt.sum().backward()
assert t.grad is None and y.grad is None
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch warns when a non-leaf's .grad is read
    assert tt.grad is None and yt.grad is None and not tt.is_leaf and not yt.is_leaf
np.testing.assert_allclose([x0.grad, x1.grad], [x0t.grad.numpy(), x1t.grad.numpy()], rtol=1e-12)
print("t = (x0 + x1)^2, y = x0 + t: t.grad and y.grad are None as in torch; leaf grads == torch")

x, xt = Variable(np.array(2.0)), torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
y, yt = square(square(x)), (xt**2) ** 2
y.backward()
y.backward()
yt.backward(retain_graph=True)
yt.backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"two backward calls on (x^2)^2 at x = 2: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

with no_grad():
    y = square(Variable(np.array(2.0)))
with torch.no_grad():
    yt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True) ** 2
assert y.creator is None and yt.grad_fn is None and not yt.requires_grad
measured = [round(grads_held[retain]) for retain in (True, False)]
measured += [round(m[0] / 1e6) for m in (recording, not_recording)]
assert measured == [72, 8, 64, 8], measured  # 9 arrays of 8 MB, then 1; 8 arrays, then 1
print("under no_grad: same value, no creator (torch: no grad_fn); measured: 72 -> 8 MB and 64 -> 8 MB")
print("PyTorch check passed: only the leaves keep grads, equal to torch's; no_grad records no graph")

# %% [markdown]
# ## Recap
#
# - A backward pass reads each intermediate gradient once; `backward` drops
#   them after use and keeps the leaves' gradients, as PyTorch does.
#   `retain_grad=True` keeps them all, for inspection.
# - Without stale intermediate gradients, repeated backward calls accumulate
#   into the leaves exactly as in PyTorch.
# - The graph is kept only for a backward pass: under `no_grad()`,
#   `Function.__call__` records nothing and intermediate arrays are freed as
#   soon as they are consumed.
# - `Config` holds settings; `using_config` sets one for a block and restores
#   it even on an exception.
#
# ## Exercises
#
# **1.** PyTorch keeps a non-leaf's gradient only where asked, tensor by
# tensor: `t.retain_grad()`. Write `backward_keeping(y, keep)`: `y.backward()`
# that keeps the gradients of the variables in `keep` (and of the leaves)
# and drops the others, and check that $t$'s is PyTorch's `t.grad` after
# `t.retain_grad()`.

# %% tags=["hide-cell"]
def backward_keeping(y, keep):
    y.backward(retain_grad=True)
    todo, seen = [y], set()
    while todo:
        v = todo.pop()
        if id(v) in seen or v.creator is None:
            continue
        seen.add(id(v))
        if not any(v is k for k in keep):
            v.grad = None
        todo.extend(v.creator.inputs)


x0, x1, t, y = graph()
backward_keeping(y, keep=[t])
print("kept t only:  y.grad =", y.grad, " t.grad =", t.grad, " x0.grad =", x0.grad, " x1.grad =", x1.grad)

# %% [markdown]
# **2.** Write `enable_grad()`, the opposite of `no_grad()` (PyTorch has
# `torch.enable_grad()`), and check that inside a `no_grad()` block it
# records a graph whose gradient equals PyTorch's.

# %% tags=["hide-cell"]
def enable_grad():
    return using_config("enable_backprop", True)


x = Variable(np.array(3.0))
with no_grad():
    y_off = square(x)
    with enable_grad():
        y_on = square(x)
y_on.backward()
print("no_grad: creator", y_off.creator, "  inside enable_grad: x.grad =", x.grad)
