# %% [markdown]
# # Step 17: Memory, reference cycles and `weakref`
#
# The graph holds arrays: every function keeps its inputs, and through them
# the intermediate results of the forward pass. Once we drop the result, all
# of that should go back to the system at once. With step 16's classes it
# does not, because each function and its output refer to each other. This
# step's idea is to make one of those two links **weak**.
#
# CPython frees objects in two ways:
#
# - **reference counting**: every object counts the references to it, and is
#   freed the moment the count drops to zero (dropping what it holds in turn);
# - **the cycle collector** (`gc`): objects that refer to each other in a ring
#   never reach zero, so every so often the collector finds unreachable rings
#   and frees them.
#
# "Every so often" is the catch: the collector runs when enough Python objects
# have been allocated (`gc.get_threshold()`), not when memory runs low. A graph
# holding hundreds of megabytes of arrays is a few dozen Python objects, so it
# can sit in memory long after its last use; and some programs switch the
# collector off (`gc.disable()`) to avoid its pauses.
#
# In step 16, `output.creator` is the function (the backward pass finds it
# that way) and `function.outputs` lists the outputs (it reads their
# gradients): every function–output pair is a ring. `weakref.ref(obj)` is a
# reference that does not count: calling it returns `obj` while `obj` lives,
# `None` after. The function's link to its outputs becomes weak; the strong
# links that remain all point one way, from the result towards the leaves.
#
# The whole snapshot is collapsed below; the change follows it.

# %% tags=["hide-cell"]
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


# %% tags=["hide-cell"]
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

show_change(17, "Function.__call__", "Variable.backward")

# %% [markdown]
# The backward pass is the only reader of `outputs`, so it is the only other
# line that changes: `output()` calls the weak reference. The variable is
# always alive there, since the pass reaches a function only through an
# output that something still holds (the user, or the next function's
# `inputs`).
#
# ## The links, drawn from the objects
#
# To compare with step 16, `SquareKeepingOutputs` (collapsed) is `Square`
# with step 16's strong `self.outputs = [output]` put back. The picture draws
# the links of $y = (x^2)^2$ built both ways, reading each function's
# `outputs` to see whether the link is strong or weak.

# %% tags=["hide-cell"]
class SquareKeepingOutputs(Square):
    """Square as step 16 stored it: strong references to its outputs (a reference cycle)."""

    def __call__(self, *inputs):
        output = super().__call__(*inputs)
        self.outputs = [output]  # step 16's self.outputs = outputs
        return output


# %% tags=["hide-input"]
import gc  # noqa: E402
import tracemalloc  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402  (harness: the picture and the measurements of this page)


def links(y):
    """[(from, to, kind)] for the references between the Variables and Functions behind y: kind is
    'creator', 'inputs', 'outputs' (strong) or 'outputs, weak' (a weakref.ref)."""
    found, todo = [], [y]
    while todo:
        v = todo.pop()
        if v.creator is None:
            continue
        f = v.creator
        found.append((v, f, "creator"))
        ref = f.outputs[0]
        found.append((f, v, "outputs, weak" if isinstance(ref, weakref.ref) else "outputs"))
        found += [(f, x, "inputs") for x in f.inputs]
        todo += list(f.inputs)
    return found


def draw_links(ax, y, names, title):
    order = [y]
    while order[-1].creator is not None:
        order += [order[-1].creator, order[-1].creator.inputs[0]]
    where = {id(obj): (2 * (len(order) - 1 - i), 0) for i, obj in enumerate(order)}
    for a, b, kind in links(y):
        (xa, _), (xb, _) = where[id(a)], where[id(b)]
        weak, cycle = kind == "outputs, weak", kind in ("creator", "outputs")
        strong_ring = cycle and not isinstance(b.outputs[0] if kind == "creator" else a.outputs[0], weakref.ref)
        rad = {"creator": -0.5, "inputs": 0.0}.get(kind, -0.5)
        ax.annotate("", xy=(xb, 0), xytext=(xa, 0), arrowprops=dict(
            arrowstyle="-|>", lw=1.4, linestyle="--" if weak else "-", shrinkB=16,
            shrinkA=26 if kind == "inputs" else 16,  # a straight arrow leaves the wide function box at its side
            color="#b22222" if strong_ring else "0.6" if weak else "0.25", connectionstyle=f"arc3,rad={rad}"))
        label_y = {"creator": -0.62, "inputs": 0.1}.get(kind, 0.55)  # creator arcs below, outputs above
        ax.text((xa + xb) / 2, label_y, kind, ha="center", fontsize=8, color="0.3")
    for obj in order:
        function = not isinstance(obj, Variable)
        ax.text(*where[id(obj)], type(obj).__name__.replace("KeepingOutputs", "") if function else names[id(obj)],
                ha="center", va="center", fontsize=10, bbox=dict(
                    boxstyle="square,pad=0.4" if function else "round,pad=0.4",
                    facecolor="lightgrey" if function else "white", edgecolor="0.3"))
    ax.set(xlim=(-0.8, 2 * len(order) - 1.2), ylim=(-1.0, 1.0), title=title)
    ax.axis("off")


fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.6))
for ax, make, title in [(top, lambda v: SquareKeepingOutputs()(v), "step 16: strong both ways, a ring per function"),
                        (bottom, square, "step 17: outputs are weak, every strong link points to the leaves")]:
    x = Variable(np.array(2.0))
    a = make(x)
    y = make(a)
    draw_links(ax, y, {id(x): "x", id(a): "a", id(y): "y"}, title)
fig.tight_layout()
plt.show()
del x, a, y
_ = gc.collect()  # reclaim the rings drawn above (the return value, a count of objects, is not wanted)

# %% [markdown]
# Red is a ring: `a.creator` and `Square.outputs` hold each other, so
# dropping `y` leaves every count above zero. Below, the dashed link does not
# count: while the user holds `y`, the graph behind it lives, which is what
# `backward` needs; once `y` is dropped its count reaches zero, then its
# creator's, then `a`'s, and so on, freed at once by counting alone.
#
# ## Measuring what a dropped graph leaves behind
#
# Four forward passes, each on an input of $10^6$ float64 numbers (8 MB)
# squared three times (three more arrays of 8 MB), then both input and result
# dropped. After each pass `tracemalloc` reports how much memory allocated
# since the start is still allocated, with the collector off (so the figures
# show what reference counting alone achieves); `gc.collect()` runs at the
# end. The figures are whole megabytes ($10^6$ bytes): the graph's Python
# objects add a few kilobytes, which the rounding hides on every machine.

# %% tags=["hide-input"]
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
# With strong outputs every pass leaves its four arrays behind, $32$ MB a
# pass, until the collector runs. With weak outputs nothing is left: in a
# training loop that builds a new graph each iteration, that is the
# difference between constant memory and memory that rises until the
# collector happens to run.
#
# The same fact, object by object: with the collector off, drop the result
# and the intermediate `a`, and ask weak probes whether `a` and its creator
# still live (the harness `intermediate_alive_after_del` is collapsed).

# %% tags=["hide-input"]
def intermediate_alive_after_del(square_function):
    """(a alive, a.creator alive) after `del a, y` for y = square(square(x)), with the collector off."""
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


# %%
for name, make in [("strong outputs", lambda v: SquareKeepingOutputs()(v)), ("weak outputs", square)]:
    print(f"{name:15} (a alive, a.creator alive) =", intermediate_alive_after_del(make))
_ = gc.collect()  # reclaim the ring the strong version left (gc.collect() returns a count: not printed)

# %% [markdown]
# The backward pass is unchanged: step 16's graph still gives `x.grad` $= 64$
# at $x = 2$, and `a` may be dropped before `backward`, since `y` keeps it
# alive through `y.creator.inputs`.
#
# ## Check against PyTorch
#
# Weak references change how long objects live, not what is computed: the
# gradient must still be torch's, exactly $64$ (the tests try random graphs
# with shared nodes). The check then asserts the memory facts measured
# above: with the collector off, dropping the result frees the intermediate
# and its creator at once, and a dropped graph of 32 MB leaves nothing.

# %%
import torch  # noqa: E402

x = Variable(np.array(2.0))
a = square(x)
y = add(square(a), square(a))
del a
y.backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"y = a^2 + a^2, a = x^2 dropped first: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")
assert intermediate_alive_after_del(square) == (False, False)
assert held_after_each_pass(lambda v: SquareKeepingOutputs()(v), passes=1)[0] >= 32e6  # rings hold 4 arrays
assert held_after_each_pass(square, passes=1)[0] < 1e6  # weak outputs: nothing is held
print("with gc disabled, dropping y frees the intermediate, its creator and all 32 MB of arrays")
print("PyTorch check passed: grads unchanged with weakref outputs; a dropped graph is freed without gc")

# %% [markdown]
# ## Recap
#
# - Reference counting frees an object the moment nothing refers to it; a
#   ring of references waits for the cycle collector, which runs by object
#   count, not by memory.
# - `output.creator` and `function.outputs` made a ring per function, holding
#   every array of a dropped graph: 32 MB a pass here.
# - `Function` now keeps `weakref.ref(output)`; `backward` calls it to get the
#   variable. Strong links point only towards the leaves.
# - A dropped graph is freed at once, with or without `gc`; gradients are
#   unchanged.
#
# ## Exercises
#
# **1.** The same ring in a tree: write `TreeNode(parent=None)`, which a
# parent holds in its list `children` and which refers back to its parent
# through a weak reference (a property `parent` returns it). Show, with the
# collector off, that dropping the root frees its children.

# %% tags=["hide-cell"]
class TreeNode:
    def __init__(self, parent=None):
        self.children = []
        self._parent = None if parent is None else weakref.ref(parent)
        if parent is not None:
            parent.children.append(self)

    @property
    def parent(self):
        return None if self._parent is None else self._parent()


gc.disable()
root = TreeNode()
child = TreeNode(root)
TreeNode(child)
print("child.parent is root:", child.parent is root)
probes = [weakref.ref(root), weakref.ref(child), weakref.ref(child.children[0])]
del root, child
print("alive after del, collector off:", [p() is not None for p in probes])
gc.enable()

# %% [markdown]
# **2.** Why the outputs and not the inputs? Write `SquareWeakInputs`, a
# `Square` whose function keeps weak references to its inputs (and `inputs`
# as a property calling them), build $y = (x^2)^2$ with it, drop `a`, and
# call `y.backward()`.

# %% tags=["hide-cell"]
class SquareWeakInputs(Square):
    def __call__(self, *inputs):
        output = super().__call__(*inputs)
        self._inputs = [weakref.ref(x) for x in inputs]
        return output

    @property
    def inputs(self):
        return tuple(ref() for ref in self._inputs)

    @inputs.setter
    def inputs(self, value):  # Function.__call__ assigns self.inputs: keep nothing strong
        pass


x = Variable(np.array(2.0))
a = SquareWeakInputs()(x)
y = SquareWeakInputs()(a)
del a
try:
    y.backward()
except AttributeError as error:
    print("AttributeError:", error, " (a is gone: backward needs the inputs)")
