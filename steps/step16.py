# %% [markdown]
# # Step 16: Ordering the backward pass by generation
#
# Step 15 found the flaw in the backward loop: it processed the functions in
# last-in, first-out order, so a function could run before all the gradients
# for its output had arrived. This step fixes the order. During the forward
# pass every variable and function gets a *generation* number, and the
# backward pass always takes the pending function with the highest generation.
#
# ## What the order must guarantee
#
# A function $f$ may run only after every function that reads $f$'s output has
# sent its contribution back; only then is the output's gradient complete. In
# graph terms: the functions must run in a topological order of the graph,
# read from the output backwards.
#
# A general topological sort is a graph algorithm of its own (step 33 uses
# one). There is a cheaper way for graphs built by running code forward: the
# order in which they were created already contains the information. We record
# it as a number:
#
# - a variable created by the user (a leaf) has generation $0$;
# - a function's generation is the largest generation among its inputs;
# - a function's output has generation one more than the function.
#
# If a function $g$ reads an output of $f$, then
# $\mathrm{gen}(g) \ge \mathrm{gen}(\text{that output}) = \mathrm{gen}(f) + 1 > \mathrm{gen}(f)$:
# every consumer of $f$ has a strictly higher generation than $f$.
#
# Now let the loop always pop the pending function with the highest
# generation. Could it pop $f$ while some consumer $g$ of $f$ (one that
# contributes to the final output) has not run? Follow the chain of functions
# from the final output down to $g$. The first function on it that has not
# run yet was added to the pending list when its successor on the chain ran,
# and like every function on the chain, its generation is at least
# $\mathrm{gen}(g) > \mathrm{gen}(f)$. So $f$ was not the highest pending
# generation: a contradiction. Functions of equal generation never read each
# other's outputs, so their relative order does not matter.
#
# ## The graph of step 15, numbered
#
# ```
#                       .-- B (1) -- b (2) --.
# x (0) -- A (0) -- a (1)                    Add (2) -- y (3)
#                       '-- C (1) -- c (2) --'
# ```
#
# After `Add`, both $B$ and $C$ (generation 1) are pending, and they run before
# $A$ (generation 0), whatever the order they were added in.
#
# ## The framework after this step
#
# `Variable` gets a `generation`, set to 0 in `__init__` and to the creator's
# generation plus one in `set_creator`. `Function.__call__` computes its own
# generation from its inputs before it marks itself as the outputs' creator.
#
# `backward` changes in three ways:
#
# - pending functions go through `add_func`, which keeps the list sorted by
#   generation, so `funcs.pop()` returns the highest one;
# - `add_func` also remembers in the set `seen` every function it has already
#   added. In step 15's graph, both $B$ and $C$ hand `a` a gradient and would add
#   its creator $A$. Without `seen`, $A$ would be in the list twice and run
#   twice, each time with the complete `a.grad` $= 16$: `x.grad` would be
#   $2 \cdot 64 = 128$;
# - `backward` on a variable without a creator (a leaf) now just sets its seed
#   gradient. Before, it put `None` in the list and failed on `None.outputs`.

# %%
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
        self.outputs = outputs
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
# ## The generations of step 15's graph
#
# The numbers are assigned as the forward pass runs; nothing else is needed to
# order the backward pass later.

# %%
x = Variable(np.array(2.0))
a = square(x)
b = square(a)
c = square(a)
y = add(b, c)
for name, var in [("x", x), ("a", a), ("b", b), ("c", c), ("y", y)]:
    creator = "leaf" if var.creator is None else f"created by {type(var.creator).__name__} of generation {var.creator.generation}"
    print(f"{name}: generation {var.generation}  ({creator})")

# %% [markdown]
# ## The right gradient
#
# With the same graph and the same $x = 2$ as in step 15, the gradient is now
# $8x^3 = 64$:

# %%
y.backward()
print("x.grad =", x.grad)

# %% [markdown]
# The same tracing subclasses as in step 15 show the new order: $C$ and $B$
# (generation 1) both run before $A$ (generation 0), so $A$ runs once, with the
# complete gradient $16$.

# %%
class Traced:
    """Mix-in for a Function subclass: print each backward call as the loop makes it."""

    def __init__(self, label):
        self.label = label

    def backward(self, *gys):
        gxs = super().backward(*gys)
        shown = gxs if isinstance(gxs, tuple) else (gxs,)
        print(f"{self.label:<12} gy = {float(gys[0]):>4.0f}   sends back {', '.join(f'{float(g):.0f}' for g in shown)}")
        return gxs


class TracedSquare(Traced, Square):
    pass


class TracedAdd(Traced, Add):
    pass


x = Variable(np.array(2.0))
a = TracedSquare("A: a = x^2")(x)
b = TracedSquare("B: b = a^2")(a)
c = TracedSquare("C: c = a^2")(a)
y = TracedAdd("Add: b + c")(b, c)
y.backward()
print("x.grad =", x.grad)

# %% [markdown]
# Branches of different lengths are handled too. In
# $y = e^{e^{a}} + a$ with $a = x^2$, the short branch (the direct use of $a$)
# delivers its gradient immediately and the long one through two `Exp`
# functions. $A$ still runs last, because its generation, 0, is the lowest in
# the graph:
#
# $$\frac{dy}{dx} = \left(e^{e^{a}} e^{a} + 1\right) 2x.$$

# %%
x = Variable(np.array(0.5))
a = square(x)
y = add(exp(exp(a)), a)
y.backward()
print(f"x.grad = {x.grad:.6f}   formula: {(np.exp(np.exp(0.25)) * np.exp(0.25) + 1) * 2 * 0.5:.6f}")  # a = 0.25

# %% [markdown]
# And a leaf can be the start of a backward pass: its gradient with respect to
# itself is the seed, $1$, as in PyTorch.

# %%
x = Variable(np.array([1.0, 2.0]))
x.backward()
print("x.backward() on a leaf: x.grad =", x.grad)

# %% [markdown]
# ## What the sort costs
#
# `add_func` sorts the whole pending list every time it adds a function. With
# $k$ functions pending, that is $O(k \log k)$ in general; Python's sort notices
# that the list was already sorted apart from the new element and does it in
# $O(k)$. Either way, a graph whose pending list grows wide (a sum of
# thousands of terms, say) pays about $O(k)$ per function, so the whole backward
# pass can become quadratic in the graph's size.
#
# A binary heap (`heapq`) keeps the highest generation at the front with
# $O(\log k)$ work per insertion and removal, so the pass costs
# $O(n \log n)$ for $n$ functions. The `tinypytorch` package (step 23 on) uses a
# heap; the snapshots keep the sorted list because it is the shortest code that
# is obviously correct. Step 33 replaces the generation numbers altogether with
# dependency counting, which is how PyTorch's engine decides when a function is
# ready.
#
# ## Check against PyTorch
#
# Step 15's graph at $x = 2$ must now give PyTorch's $64$, exactly, since both
# sides perform the same multiplications. The graph with branches of
# different lengths, and step 15's graph on arrays, must agree with autograd to
# `rtol=1e-12`.

# %%
import torch

x = Variable(np.array(2.0))
a = square(x)
add(square(a), square(a)).backward()
xt = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
assert x.grad == 64.0
print(f"a = x^2, y = a^2 + a^2 at x = 2: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    value = rng.uniform(-1, 1, shape)
    for name, ours, theirs in [
        ("a^2 + a^2", lambda a: add(square(a), square(a)), lambda a: a**2 + a**2),
        ("exp(exp(a)) + a", lambda a: add(exp(exp(a)), a), lambda a: torch.exp(torch.exp(a)) + a),
    ]:
        x = Variable(value)
        ours(square(x)).backward()
        xt = torch.tensor(value, requires_grad=True)
        yt = theirs(xt**2)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
        print(f"shape {shape!s:7} a = x^2, y = {name:15}: grads == torch")

print("PyTorch check passed: with generations, a = x^2; y = a^2 + a^2 gives x.grad = 64 at x = 2, as torch")
