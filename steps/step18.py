# %% [markdown]
# # Step 18: Saving memory with `retain_grad` and `no_grad`
#
# Step 17 made sure that a graph is freed as soon as nobody holds its result.
# This step reduces what a graph costs while it is alive, in two situations.
#
# - After `backward`, every variable that some function produced still holds
#   its gradient, an array as large as its data. Usually only the gradients of
#   the leaves (the inputs and parameters) are wanted. From now on `backward`
#   drops each of those gradients as soon as it has been used, unless it is
#   called with `retain_grad=True`.
# - When no gradient is needed at all, for instance when a trained model is
#   only evaluated, recording the graph is pure overhead: it keeps every
#   intermediate array alive. A global switch, `Config.enable_backprop`, turns
#   recording off, and `with no_grad():` flips it for the duration of a block.
#
# ## Dropping intermediate gradients
#
# The gradient of an intermediate variable $t$ is read exactly once: by $t$'s
# creator, when the backward pass reaches it. Step 16's generation order
# guarantees that by then every contribution to $t$'s gradient has arrived,
# and after that no function reads it again. So once a function has run, the
# gradients of its outputs can go: `backward` sets them to `None`.
#
# The variable `backward` was called on is no exception. Its gradient is the
# seed, $\partial y / \partial y = 1$ (or whatever the caller stored in
# `y.grad` before calling `backward`), and it is read once too, by `y`'s
# creator, which runs first. After that it goes like the others; `y` keeps a
# gradient only if it is a leaf, for then no function runs at all.
#
# PyTorch makes the same choice by default: after `backward`, only leaf tensors
# have a `.grad`; a non-leaf, the one `backward` was called on included, keeps
# its gradient only if `t.retain_grad()` was called on it before the backward
# pass. Our `backward(retain_grad=True)` keeps all of them, which is handy for
# inspecting a graph.
#
# Releasing the gradients is not only about memory. `backward` adds into
# `.grad` and passes `.grad` on, so it is correct only if every variable that
# is not a leaf enters the pass with `.grad` equal to `None`. Dropping the
# intermediate gradients removes the trap of step 14: a second `backward` no
# longer finds a stale intermediate gradient to add to, so repeated calls
# accumulate into the leaves exactly as in PyTorch. A kept seed would be such a
# stale gradient as soon as its variable became an intermediate of a later
# computation; the example below shows the wrong result it would give.
#
# ## Switching the graph off
#
# Everything `Function.__call__` records (the generation, the creator link, the
# inputs and the weak outputs) exists only for the backward pass. With
# `Config.enable_backprop` false, `__call__` computes the outputs and records
# nothing: the outputs have no creator, and the function object, which no
# longer holds its inputs, disappears when `__call__` returns. In a chain of
# functions each intermediate array is then freed as soon as the next function
# has consumed it.
#
# `Config` is a class used as a namespace: its class attributes are settings
# that any code can read, without passing them around. Setting
# `Config.enable_backprop = False` by hand works, but it is easy to forget to
# set it back, especially when an exception leaves the block early.
# `using_config(name, value)` is a context manager written with
# `contextlib.contextmanager`: the code before `yield` runs when the `with`
# block is entered, the code in `finally` when it is left, normally or by an
# exception. It rejects names that are not settings: with a typo such as
# `"enable_backprob"`, `setattr` would silently create a new attribute and
# recording would stay on. `no_grad()` is the common case with a short name,
# as `torch.no_grad()` is in PyTorch.
#
# ## The framework after this step

# %%
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


# %%
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


# %%
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


# %%
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


# %% [markdown]
# ## Only the leaves keep their gradients
#
# The example from the source material: $t = x_0 + x_1$ and $y = x_0 + t$, so
# $\partial y / \partial x_0 = 2$ and $\partial y / \partial x_1 = 1$. By
# default only the leaves $x_0$ and $x_1$ keep a gradient; $t$ and the output
# $y$ lose theirs. With `retain_grad=True` every variable keeps one.

# %%
x0 = Variable(np.array(1.0))
x1 = Variable(np.array(1.0))
t = add(x0, x1)
y = add(x0, t)
y.backward()
print("default:           y.grad =", y.grad, " t.grad =", t.grad, " x0.grad =", x0.grad, " x1.grad =", x1.grad)

x0 = Variable(np.array(1.0))
x1 = Variable(np.array(1.0))
t = add(x0, x1)
y = add(x0, t)
y.backward(retain_grad=True)
print("retain_grad=True:  y.grad =", y.grad, " t.grad =", t.grad, " x0.grad =", x0.grad, " x1.grad =", x1.grad)

# %% [markdown]
# Step 14's trap is gone: two backward calls on $y = (x^2)^2$ give
# $2 \cdot 4x^3 = 64$ at $x = 2$, where step 14 gave 96.

# %%
x = Variable(np.array(2.0))
y = square(square(x))
y.backward()
y.backward()
print("y = (x^2)^2, two backward calls: x.grad =", x.grad)

# %% [markdown]
# ### Why the seed goes too
#
# Take $y = 2x$ at $x = 1$ and call `y.backward()`: `x.grad` becomes
# $\partial y / \partial x = 2$. Now use $y$ again, in $z = 3y$, and call
# `z.backward()`. It adds $\partial z / \partial x = 6$, so `x.grad` must be
# $2 + 6 = 8$, and that is what PyTorch gives. (Multiplication arrives in step
# 20, so the code writes $2x$ as `add(x, x)` and $3y$ as `add(add(y, y), y)`.)
#
# Had `y` kept its seed, the second pass would start from the stale
# `y.grad` $= 1$, add the 3 that flows back from $z$, pass 4 instead of 3 to
# `y`'s creator, and leave `x.grad` $= 2 + 8 = 10$. With `keep_seed=True`,
# the function below puts the seed back by hand to show that result.

# %%
import torch


def y_then_3y(keep_seed):
    x = Variable(np.array(1.0))
    y = add(x, x)  # y = 2x
    y.backward()
    if keep_seed:
        y.grad = np.ones_like(y.data)  # what backward would leave if it kept the seed
    z = add(add(y, y), y)  # z = 3y
    z.backward()
    return x.grad


xt = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
yt = xt + xt
yt.backward(retain_graph=True)
(yt + yt + yt).backward()
print(f"seed released:  x.grad = {y_then_3y(keep_seed=False):.1f}   torch: {xt.grad.item():.1f}")
print(f"seed kept:      x.grad = {y_then_3y(keep_seed=True):.1f}")

# %% [markdown]
# ### How much memory the dropped gradients take
#
# A chain of eight `square`s on $10^6$ numbers produces eight results: seven
# intermediates and the output. With `retain_grad=True` every one of them
# keeps an 8 MB gradient after the backward pass, and so does the leaf; by
# default only the leaf does. The figures are the bytes still allocated after
# `backward` returns (measured with `tracemalloc`, rounded to whole megabytes).

# %%
import tracemalloc


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


for retain_grad in (True, False):
    print(f"retain_grad={retain_grad!s:5}:  gradients held after backward: {bytes_held_after_backward(retain_grad) / 1e6:3.0f} MB")

# %% [markdown]
# $72$ MB is nine arrays (the leaf, seven intermediates and the seed); $8$ MB
# is one, the leaf's gradient.
#
# ## Forward passes without a graph
#
# Inside `with no_grad():` functions still compute, but nothing is recorded:

# %%
x = Variable(np.array(2.0))
print("before:  Config.enable_backprop =", Config.enable_backprop)
with no_grad():
    print("inside:  Config.enable_backprop =", Config.enable_backprop)
    y = square(x)
print("after:   Config.enable_backprop =", Config.enable_backprop)
print("y.data =", y.data, " y.creator =", y.creator, " y.generation =", y.generation)

# %% [markdown]
# `y` is a leaf now, as far as the framework knows. Calling `backward` on it is
# harmless and only sets its own seed gradient (since step 16, a variable
# without a creator no longer makes `backward` crash); `x` receives nothing.

# %%
y.backward()
print("y.grad =", y.grad, " x.grad =", x.grad)

# %% [markdown]
# ### How much memory the graph takes
#
# The same chain of eight squares, run forward only, with and without
# recording. Tracing starts after the input is allocated, so the figures count
# only what the forward pass allocates: the peak during the pass, and what is
# still allocated while we hold the result.

# %%
def forward_memory():
    x = Variable(np.ones(1_000_000))
    tracemalloc.start()
    try:
        y = chain_of_squares(x)
        return tracemalloc.get_traced_memory()  # (current, peak) while y is alive
    finally:
        tracemalloc.stop()


held, peak = forward_memory()
print(f"recording the graph:  peak {peak / 1e6:3.0f} MB, held while y is alive {held / 1e6:3.0f} MB")
with no_grad():
    held, peak = forward_memory()
print(f"under no_grad():      peak {peak / 1e6:3.0f} MB, held while y is alive {held / 1e6:3.0f} MB")

# %% [markdown]
# With the graph, every one of the eight results stays alive for a backward
# pass that may come: $64$ MB. Without it, at most two results exist at once,
# the input and the output of the function that is running ($16$ MB), and only
# the final result remains ($8$ MB). The saving grows with the depth of the
# computation; the peak without a graph does not.
#
# ## `using_config` restores the setting, and checks the name
#
# The setting is restored when the block is left by an exception, and a
# misspelt option is an error instead of a silent no-op:

# %%
try:
    with no_grad():
        raise RuntimeError("something failed inside the block")
except RuntimeError as error:
    print("RuntimeError:", error)
print("after the exception: Config.enable_backprop =", Config.enable_backprop)

try:
    with using_config("enable_backprob", False):
        pass
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# After a default backward pass, the intermediate variable and the output must
# have no gradient and the leaves must have PyTorch's gradients. PyTorch, too,
# keeps no gradient on its non-leaf tensors (reading `.grad` of a non-leaf
# makes PyTorch warn that it is not populated, so the check silences that
# warning while it looks). Two backward calls on $(x^2)^2$, and a backward pass
# through $y = 2x$ followed by one through $z = 3y$, must accumulate to
# PyTorch's values, and a function called under `no_grad` must, like one under
# `torch.no_grad()`, record nothing: no creator here, no `grad_fn` there.

# %%
import warnings

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    v0, v1 = rng.standard_normal(shape), rng.standard_normal(shape)
    x0, x1 = Variable(v0), Variable(v1)
    t = square(add(x0, x1))
    y = add(x0, t)
    y.backward()

    x0t, x1t = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
    tt = (x0t + x1t) ** 2
    yt = x0t + tt
    yt.backward(torch.ones_like(yt))

    assert t.grad is None and y.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when a non-leaf's .grad is read
        assert tt.grad is None and yt.grad is None and not tt.is_leaf and not yt.is_leaf
    np.testing.assert_allclose(x0.grad, x0t.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x1.grad, x1t.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7} t = (x0 + x1)^2, y = x0 + t: t.grad, y.grad are None as in torch; leaf grads == torch")

x = Variable(np.array(2.0))
y = square(square(x))
y.backward()
y.backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
yt = (xt**2) ** 2
yt.backward(retain_graph=True)
yt.backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"two backward calls on (x^2)^2 at x = 2: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

xt = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
yt = xt + xt
yt.backward(retain_graph=True)
(yt + yt + yt).backward()
x_grad = y_then_3y(keep_seed=False)
np.testing.assert_array_equal(x_grad, xt.grad.numpy())
print(f"backward through y = 2x, then z = 3y, at x = 1: x.grad = {x_grad:.1f} == torch {xt.grad.item():.1f}")

with no_grad():
    y = square(Variable(np.array(2.0)))
with torch.no_grad():
    yt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True) ** 2
assert y.creator is None and yt.grad_fn is None and not yt.requires_grad
np.testing.assert_array_equal(y.data, yt.numpy())
print("under no_grad: same value, no creator (torch: no grad_fn)")

print("PyTorch check passed: only the leaves keep grads, equal to torch's; no_grad records no graph")
