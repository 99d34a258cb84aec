# %% [markdown]
# # Step 16: Ordering the backward pass by generation
#
# Step 15 found the flaw in the backward loop: a function could run before
# all the gradients for its output had arrived. A function $f$ may run only
# after every function that reads $f$'s output has sent its share back: the
# functions must run in a topological order of the graph, read from the
# output backwards. This step's idea is a cheap way to get one for graphs
# built by running code forward: number them as they are made, with a
# **generation**.
#
# - A variable the user creates (a leaf) has generation $0$.
# - A function's generation is the largest generation among its inputs.
# - A function's output has generation one more than the function.
#
# If a function $g$ reads an output of $f$, then
# $\mathrm{gen}(g) \ge \mathrm{gen}(f) + 1 > \mathrm{gen}(f)$: every consumer
# of $f$ has a strictly higher generation. So the loop always pops the
# pending function with the **highest** generation. It cannot pop $f$ while
# a consumer $g$ on the way to the output is still to run: the first
# function not yet run on the chain from the output down to $g$ is pending,
# and its generation is at least $\mathrm{gen}(g) > \mathrm{gen}(f)$.
# Functions of equal generation never read each other's outputs, so their
# order does not matter.
#
# The whole snapshot is collapsed below; the change follows it.

# %% tags=["hide-cell"]
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
            gys = [output.grad for output in f.outputs]
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
        self.outputs = outputs
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


# %% [markdown]
# `Variable.__init__` starts every variable at generation 0; `set_creator`
# and `Function.__call__` number the outputs and the function; `backward`
# takes its pending functions through `add_func`:

# %%
from tinypytorch.utils.listing import show_change

show_change(16, "Variable.__init__", "Variable.set_creator", "Function.__call__", "Variable.backward")

# %% [markdown]
# `add_func` keeps the list sorted by generation, so `funcs.pop()` returns
# the highest. Its set `seen` adds a function once: in step 15's graph both
# $B$ and $C$ hand `a` a gradient, and without `seen` $A$ would run twice,
# each time with the complete `a.grad`, giving $128$. And `backward` on a
# leaf now just sets its seed, as in PyTorch, where before it put `None` in
# the list.
#
# ## The graph of step 15, numbered

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (harness: the pictures and the trace of this page)

from tinypytorch.utils.pictures import draw_dag, graph_of  # noqa: E402
from tinypytorch.utils.tracing import Traced, backward_order, ordinal  # noqa: E402


def draw_numbered(ax, y, names, ran, raised=(), title=None):
    """The graph behind y with each function's generation and backward turn, each variable's generation.
    names: [(variable, label)] for every variable; raised: labels of variables drawn a row up, with their
    creators (so that a long branch does not hide a short one)."""
    nodes, edges = graph_of(y, names=names)
    node_of = {label: n for n, (kind, label) in nodes.items() if kind != "function"}
    made = {b: a for a, b in edges if nodes[a][0] == "function"}  # variable node -> its creator's node
    turn = {id(f): n for n, f in enumerate(ran, 1)}
    notes = {}
    for v, label in names:
        notes[node_of[label]] = f"gen {v.generation}"
        if v.creator is not None:
            notes[made[node_of[label]]] = f"gen {v.creator.generation}, {ordinal(turn[id(v.creator)])}"
    column = dict.fromkeys(nodes, 0)
    for _ in nodes:
        for a, b in edges:
            column[b] = max(column[b], column[a] + 1)
    up = {node_of[label] for label in raised} | {made[node_of[label]] for label in raised}
    positions = {n: (column[n], 0.9 if n in up else 0) for n in nodes} if raised else None
    draw_dag(nodes, edges, ax=ax, positions=positions, notes=notes, title=title)


class TracedSquare(Traced, Square):
    pass


class TracedAdd(Traced, Add):
    pass


# %% [markdown]
# The numbers are assigned as the forward pass runs; nothing else is needed
# to order the backward pass later. With the graph and $x = 2$ of step 15,
# the gradient is now $8x^3 = 64$:

# %%
x = Variable(np.array(2.0))
a = square(x)
b = square(a)
c = square(a)
y = add(b, c)
print("generations:", "  ".join(f"{name} {v.generation}" for name, v in zip("xabcy", [x, a, b, c, y])))
ran = backward_order(y)  # y.backward(), noting the order the functions ran (collapsed cell above)
print("x.grad =", x.grad)

# %% [markdown]
# Branches of different lengths are handled too. In $y_2 = e^{e^{a}} + a$
# with $a = x^2$, the short branch (the direct use of $a$) delivers at once,
# the long one through two `Exp`. $A$ still runs last, since its generation,
# 0, is the lowest:
#
# $$\frac{dy_2}{dx} = \left(e^{e^{a}} e^{a} + 1\right) 2x.$$

# %%
x2 = Variable(np.array(0.5))
a2 = square(x2)
y2 = add(exp(exp(a2)), a2)
ran2 = backward_order(y2)
a_ = 0.25
print(f"x.grad = {x2.grad:.6f}   formula: {(np.exp(np.exp(a_)) * np.exp(a_) + 1) * 2 * 0.5:.6f}")

# %% tags=["hide-input"]
e2 = y2.creator.inputs[0]  # exp(exp(a)), and exp(a) below it
e1 = e2.creator.inputs[0]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.6))
draw_numbered(top, y, [(x, "x"), (a, "a"), (b, "b"), (c, "c"), (y, "y")], ran,
              title="y = a² + a²: B and C (gen 1) run before A (gen 0)")
draw_numbered(bottom, y2, [(x2, "x"), (a2, "a"), (e1, "exp(a)"), (e2, "exp(exp(a))"), (y2, "y₂")], ran2,
              raised=["exp(a)", "exp(exp(a))"], title="y₂ = exp(exp(a)) + a: A still runs last")
fig.tight_layout()
plt.show()

# %% [markdown]
# Under each function: its generation and the turn its backward took, read
# from the page's own variables. After `Add`, $B$ and $C$ (generation 1) are
# pending and both run before $A$ (generation 0), whatever the order they
# were added in; on the right the two `Exp` run before $A$ although $A$ was
# added first. (The trace of step 15, on this framework, shows $A$ running
# once with the complete $16$: `TracedSquare` is in the collapsed cell.)
#
# A leaf can start a backward pass: its gradient with respect to itself is
# the seed, $1$, as in PyTorch.

# %%
leaf = Variable(np.array([1.0, 2.0]))
leaf.backward()
print("leaf.backward(): leaf.grad =", leaf.grad)

# %% [markdown]
# ## What the sort costs
#
# `add_func` sorts the pending list each time it adds a function. Python's
# sort notices that the list was sorted apart from the new element and takes
# $O(k)$ for $k$ pending functions, so a graph whose pending list grows wide
# (a sum of thousands of terms) can make the pass quadratic. A binary heap
# (`heapq`) does $O(\log k)$ per insertion and removal; the package (step 23
# on) uses one (exercise 2 writes it), the snapshots keep the sorted list as
# the shortest code that is obviously correct. Step 33 replaces generations
# with dependency counting, which is how PyTorch's engine decides when a
# function is ready.
#
# ## Check against PyTorch
#
# Step 15's graph at $x = 2$ must now give PyTorch's $64$ exactly, since both
# sides do the same multiplications; $e^{e^a} + a$ on an array must agree to
# `rtol=1e-12`. (The tests try other shapes and random graphs.)

# %%
import torch  # noqa: E402

x = Variable(np.array(2.0))
a = square(x)
add(square(a), square(a)).backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
assert x.grad == 64.0
print(f"a = x^2, y = a^2 + a^2 at x = 2: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

value = np.random.default_rng(0).uniform(-1, 1, (2, 3))
x, xt = Variable(value), torch.tensor(value, requires_grad=True)
a, at = square(x), xt**2
add(exp(exp(a)), a).backward()
(torch.exp(torch.exp(at)) + at).sum().backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print("a = x^2, y = exp(exp(a)) + a on a (2, 3) array: grads == torch")
print("PyTorch check passed: with generations, a = x^2; y = a^2 + a^2 gives x.grad = 64 at x = 2, as torch")

# %% [markdown]
# ## Recap
#
# - Each variable and function gets a generation as the forward pass runs:
#   leaves 0, a function the highest of its inputs, an output one more.
# - Every consumer of a function's output has a higher generation, so popping
#   the highest generation first is a topological order from the output.
# - `add_func` keeps the pending list sorted and adds each function once;
#   step 15's graph now gives $64$, as PyTorch.
# - A sorted list costs $O(k)$ per insertion; a heap costs $O(\log k)$.
#
# ## Exercises
#
# **1.** Backprop by hand. For $a = x^2$, $b = a^2$, $c = e^a$, $y = b + c$,
# write `grads_by_hand(x)`: with NumPy only, compute $g_y, g_b, g_c, g_a, g_x$
# node by node in generation order (each node's gradient is complete before
# it is used), and compare them with the framework's `.grad` of each
# variable at $x = 0.7$.

# %% tags=["hide-cell"]
def grads_by_hand(x):
    a = x**2
    g = {"y": 1.0}  # generation 3: the seed
    g["b"] = g["y"]  # Add (generation 2) sends g_y to both inputs
    g["c"] = g["y"]
    g["a"] = 2 * a * g["b"] + np.exp(a) * g["c"]  # B and C (generation 1), both done: g_a is complete
    g["x"] = 2 * x * g["a"]  # A (generation 0)
    return g


x = Variable(np.array(0.7))
a = square(x)
b, c = square(a), exp(a)
y = add(b, c)
y.backward()
by_hand = grads_by_hand(0.7)
for name, v in [("y", y), ("b", b), ("c", c), ("a", a), ("x", x)]:
    assert np.isclose(v.grad, by_hand[name], rtol=1e-12)
print(", ".join(f"g_{name} = {g:.4f}" for name, g in by_hand.items()), "  == the framework's .grad")

# %% [markdown]
# **2.** Write `backward_heap(y)`: the loop of `Variable.backward` with the
# pending functions in a `heapq` keyed by minus the generation (add a counter
# to break ties, since functions do not compare), each function pushed once.
# Check step 15's graph at $x = 2$ gives $64$.

# %% tags=["hide-cell"]
import heapq  # noqa: E402
import itertools  # noqa: E402


def backward_heap(y):
    y.grad = np.ones_like(y.data)
    if y.creator is None:
        return
    heap, seen, tie = [], set(), itertools.count()

    def push(f):
        if f not in seen:
            seen.add(f)
            heapq.heappush(heap, (-f.generation, next(tie), f))

    push(y.creator)
    while heap:
        f = heapq.heappop(heap)[2]
        gxs = f.backward(*[output.grad for output in f.outputs])
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        for x, gx in zip(f.inputs, gxs, strict=True):
            x.grad = as_array(gx) if x.grad is None else as_array(x.grad + gx)
            if x.creator is not None:
                push(x.creator)


x = Variable(np.array(2.0))
a = square(x)
backward_heap(add(square(a), square(a)))
print("heap: x.grad =", x.grad)
