# %% [markdown]
# # Step 17: Memory, reference cycles and `weakref`
#
# A backward pass needs the graph, and the graph holds arrays: every function
# keeps its inputs, and through them the intermediate results of the forward
# pass. Once we are done with a result, all of that should be returned to the
# system at once. With the classes of step 16 it is not. This step shows why,
# measures the cost, and fixes it with one of Python's weak references.
#
# ## How CPython frees objects
#
# CPython has two mechanisms.
#
# - **Reference counting.** Every object counts the references to it: names,
#   attributes, list slots, arguments being passed. When the count drops to
#   zero, the object is freed immediately, and the references it held are
#   dropped in turn, which may free further objects.
# - **The cycle collector** (the `gc` module). Objects that refer to each other
#   in a ring never reach a count of zero, even when nothing outside the ring
#   refers to them. Every so often the collector scans the container objects,
#   finds such unreachable rings and frees them.
#
# "Every so often" is the catch. The collector runs when enough Python
# objects have been allocated (see `gc.get_threshold()`), not when
# memory runs low. A graph holding hundreds of megabytes of arrays is only a
# few dozen Python objects, so it can sit in memory long after its last use.
# The collector can also be switched off (`gc.disable()`), and some programs do
# that to avoid its pauses.
#
# A two-object ring shows the difference. A `weakref.ref` lets us ask whether
# an object is still alive without keeping it alive ourselves:

# %%
import gc
import weakref


class Node:
    pass


gc.disable()  # as if the collector had not run yet
a, b = Node(), Node()
a.other, b.other = b, a  # a ring: a -> b -> a
probe = weakref.ref(a)
del a, b
print("after del, with no collection:  alive =", probe() is not None)
gc.collect()
print("after gc.collect():             alive =", probe() is not None)
gc.enable()

# %% [markdown]
# ## The cycle in our graph
#
# In step 16 every function and its output refer to each other:
#
# - `output.creator` is the function, so the backward pass can find it;
# - `function.outputs` lists the outputs, so the backward pass can read their
#   gradients.
#
# Each function–output pair is a ring, and since functions also hold their
# inputs, the rings hold every intermediate array of the forward pass. When the
# user drops the final result, no count reaches zero, and the whole graph waits
# for the collector.
#
# ## Weak references to the outputs
#
# `weakref.ref(obj)` creates a reference that does not count: calling it
# returns `obj` while `obj` is alive and `None` after it has been freed. We make
# the function's link to its outputs weak. The links that remain strong all
# point one way, from the result towards the leaves:
#
# ```
# y --creator--> f --inputs--> t --creator--> g --inputs--> x
# ```
#
# As long as the user holds `y`, the whole graph behind it is alive, which is
# exactly what `backward` needs. When the user drops `y`, its count reaches
# zero, then `f`'s, then `t`'s, and so on: reference counting alone frees the
# graph, at once.
#
# The backward pass is the only reader of `outputs`, so it is the only other
# line that changes: `output().grad` calls the weak reference to get the
# variable. The variable is always alive there, because the backward pass only
# reaches a function through an output that something still holds (the user,
# or the next function's `inputs`).
#
# ## The framework after this step

# %%
import weakref

import numpy as np


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

    def backward(self):
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
# ## Measuring what a dropped graph leaves behind
#
# To compare with step 16, we need a function that keeps strong references to
# its outputs. `SquareKeepingOutputs` is `Square` with step 16's line put back:
# after the normal call, it replaces the weak references with the outputs
# themselves, recreating the ring `output -> creator -> output`.

# %%
class SquareKeepingOutputs(Square):
    """Square as step 16 stored it: strong references to its outputs (a reference cycle)."""

    def __call__(self, *inputs):
        output = super().__call__(*inputs)
        self.outputs = [output]  # step 16's self.outputs = outputs
        return output


# %% [markdown]
# The experiment runs four forward passes. Each creates an input of $10^6$
# float64 numbers (8 MB, since $10^6 \times 8$ bytes $= 8 \times 10^6$ bytes),
# squares it three times (three more arrays of 8 MB), and then drops both the
# input and the result. After each pass, `tracemalloc` reports how much of the
# memory allocated since the start of the experiment is still allocated. The
# collector is switched off during the loop, so the numbers show what
# reference counting alone achieves; `gc.collect()` runs once at the end.
#
# The figures are rounded to whole megabytes ($10^6$ bytes). The arrays are
# exact multiples of 8 MB; the Python objects of the graph add a few kilobytes,
# which the rounding hides, so the printout is the same on every machine.

# %%
import tracemalloc


def held_after_each_pass(square_function, passes=4):
    """Bytes still allocated after each dropped forward pass (collector off), then after gc.collect()."""
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        held = []
        for _ in range(passes):
            x = Variable(np.ones(1_000_000))
            y = square_function(square_function(square_function(x)))
            del x, y
            held.append(tracemalloc.get_traced_memory()[0])
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0])
        return held
    finally:
        tracemalloc.stop()
        gc.enable()


strong = held_after_each_pass(lambda v: SquareKeepingOutputs()(v))
weak = held_after_each_pass(square)
print(f"{'':22}{'strong outputs (step 16)':>26}{'weak outputs (step 17)':>26}")
for label, s, w in zip([f"after pass {i}" for i in range(1, 5)] + ["after gc.collect()"], strong, weak):
    print(f"{label:22}{s / 1e6:>23.0f} MB{w / 1e6:>23.0f} MB")

# %% [markdown]
# With strong references, every pass leaves its four arrays behind: $32$ MB
# per pass, growing without bound until the collector runs. With weak
# references, nothing is left after a pass: dropping `y` frees the graph
# immediately. In a training loop that builds a new graph at every iteration,
# this is the difference between constant memory and memory that keeps rising
# until the collector happens to run (or, with the collector off, until the
# process runs out of memory).
#
# ## The graph is freed without the collector
#
# The same fact, observed directly: we keep weak references to an intermediate
# variable and to its creator, drop the result and the intermediate, and ask
# whether they are still alive, with the collector off.

# %%
def intermediate_alive_after_del(square_function):
    gc.disable()
    try:
        x = Variable(np.array(2.0))
        a = square_function(x)
        y = square_function(a)
        a_probe, creator_probe = weakref.ref(a), weakref.ref(a.creator)
        del a, y
        return a_probe() is not None, creator_probe() is not None
    finally:
        gc.enable()


print("strong outputs: (a alive, a.creator alive) =", intermediate_alive_after_del(lambda v: SquareKeepingOutputs()(v)))
print("weak outputs:   (a alive, a.creator alive) =", intermediate_alive_after_del(square))
_ = gc.collect()  # reclaim the ring the strong version left behind (its return value: how many objects)

# %% [markdown]
# ## Backward is unchanged
#
# The weak references cost nothing in the backward pass. Step 16's graph still
# gives `x.grad` $= 64$ at $x = 2$, and the intermediate `a` can be dropped
# before `backward` is called: `y` keeps it alive through `y.creator.inputs`.

# %%
x = Variable(np.array(2.0))
a = square(x)
y = add(square(a), square(a))
del a
y.backward()
print("x.grad =", x.grad)

# %% [markdown]
# ## Check against PyTorch
#
# Weak references change how long objects live, not what is computed, so the
# gradients must still equal torch's: step 16's graph at $x = 2$ (exactly 64)
# and on arrays. The check then asserts the memory facts measured above: with
# the collector off, dropping the result frees the intermediate variable and
# its creator at once, and a dropped graph of 32 MB leaves nothing behind.

# %%
import torch

x = Variable(np.array(2.0))
a = square(x)
add(square(a), square(a)).backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"a = x^2, y = a^2 + a^2 at x = 2: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

rng = np.random.default_rng(0)
for shape in [(3,), (2, 3)]:
    value = rng.uniform(-1, 1, shape)
    x = Variable(value)
    a = square(x)
    add(exp(square(a)), a).backward()
    xt = torch.tensor(value, requires_grad=True)
    at = xt**2
    yt = torch.exp(at**2) + at
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    print(f"shape {shape!s:7} a = x^2, y = exp(a^2) + a: grads == torch")

assert intermediate_alive_after_del(square) == (False, False)
assert held_after_each_pass(lambda v: SquareKeepingOutputs()(v), passes=1)[0] >= 32e6  # the cycle holds 4 arrays
assert held_after_each_pass(square, passes=1)[0] < 1e6  # weak outputs: nothing is held
print("with gc disabled, dropping y frees the intermediate variable, its creator and all 32 MB of arrays")

print("PyTorch check passed: grads unchanged with weakref outputs; the graph is freed without the cycle collector")
