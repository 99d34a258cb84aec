# %% [markdown]
# # Step 14: Accumulating the gradient of a reused variable
#
# So far every variable fed exactly one function. Real computations reuse
# variables all the time: $y = x + x$, $y = x \cdot x$, a weight matrix applied
# at every time step of a recurrent network. If $x$ reaches $y$ along several
# paths, a small change $\Delta x$ changes $y$ along each of them, and the
# changes add. The multivariable chain rule sums over the paths: when $x$
# feeds functions with outputs $u_1, \dots, u_k$ (or one function several
# times),
#
# $$\frac{\partial L}{\partial x} = \sum_{i=1}^{k} \frac{\partial L}{\partial u_i} \frac{\partial u_i}{\partial x}.$$
#
# Each term is one gradient that the backward loop delivers to $x$. The loop
# of step 13 assigned `x.grad = gx`, so each delivery replaced the one before
# and only the last term survived: $y = x + x$ gave $1$, not $2$. This step's
# idea is a one-line change: the first gradient a variable receives is
# stored, every later one is **added** to it.
#
# The whole snapshot (step 13's framework with this change) is in the
# collapsed cells below; the change itself follows them.

# %% tags=["hide-cell"]
import numpy as np


class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy.ndarray (or None), got {type(data).__name__}")
        self.data = data
        self.grad = None  # dy/d(this variable), filled in by the backward pass
        self.creator = None  # the Function that produced this variable; None for a leaf

    def set_creator(self, func):
        self.creator = func

    def cleargrad(self):
        self.grad = None

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
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
                    funcs.append(x.creator)  # continue towards the leaves


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


# %%
from tinypytorch.utils.listing import show_change

show_change(14, "Variable.backward")

# %% [markdown]
# The sum is written `x.grad + gx`, a new array, and not `x.grad += gx`:
# `Add.backward` returns the very array it received, so after the first
# delivery `x.grad` *is* the output's `.grad`, and `+=` would write into that
# other variable's gradient too. (Expand the next cell for the two wrong
# versions side by side: overwriting, and adding in place, which gives $4$
# instead of $3$ for $(x + x) + x$; the tests pin both.)

# %% tags=["hide-cell"]
def backward_with(y, store):
    """Variable.backward's loop, with the line that stores a gradient replaced by store(x, gx)."""
    y.grad = np.ones_like(y.data)
    funcs = [y.creator]
    while funcs:
        f = funcs.pop()
        gxs = f.backward(*[output.grad for output in f.outputs])
        if not isinstance(gxs, tuple):
            gxs = (gxs,)
        for x, gx in zip(f.inputs, gxs, strict=True):
            store(x, as_array(gx))
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


def overwrite(x, gx):  # the rule of steps 12 and 13
    x.grad = gx


def add_in_place(x, gx):  # tempting, and wrong
    if x.grad is None:
        x.grad = gx
    else:
        x.grad += gx


for name, store in [("overwrite", overwrite), ("add in place", add_in_place)]:
    x = Variable(np.array(3.0))
    y = add(add(x, x), x)
    backward_with(y, store)
    print(f"{name:12}  y = (x + x) + x:  x.grad = {x.grad}  (should be 3.0)")

# %% [markdown]
# ## Reused variables, right
#
# With accumulation, $y = x + x$ gives $2$, and $y = (x + x) + x$, where $x$
# is reached once directly and twice through $t = x + x$, gives $3$:

# %%
x = Variable(np.array(3.0))
y = add(x, x)
y.backward()
print("y = x + x:        x.grad =", x.grad)

x = Variable(np.array(3.0))
t = add(x, x)
y = add(t, x)
y.backward()
print("y = (x + x) + x:  x.grad =", x.grad)

# %% tags=["hide-input"]
import matplotlib.pyplot as plt  # noqa: E402  (harness: the picture of this page)

from tinypytorch.utils.pictures import draw_dag, graph_of  # noqa: E402


def deliveries(y, x):
    """The gradients the backward loop delivers to x, in order (recorded with backward_with)."""
    got = []

    def accumulate_and_note(v, gx):
        if v is x:
            got.append(float(gx))
        v.grad = gx if v.grad is None else v.grad + gx

    backward_with(y, accumulate_and_note)
    return got


x.cleargrad()
t.cleargrad()
received = deliveries(y, x)  # the pass again, on the page's own y, noting what reaches x
nodes, edges = graph_of(y, names=[(x, "x"), (t, "t"), (y, "y")])
outer, inner = [n for n, (kind, _) in nodes.items() if kind == "function"]  # met from y backwards
at = {label: n for n, (kind, label) in nodes.items() if kind != "function"}
fig, ax = plt.subplots(figsize=(8, 3))
draw_dag(nodes, edges, ax=ax, positions={at["x"]: (0, 0), inner: (1.2, 0.8), at["t"]: (2.2, 0.8), outer: (3.2, 0),
                                         at["y"]: (4.2, 0)},
         notes={at["x"]: "receives " + ", ".join(f"{g:g}" for g in received) + f"\nx.grad = {x.grad:g}",
                inner: "sends 1 to x, twice", outer: "sends 1 to t, 1 to x"},
         title="y = (x + x) + x: three gradients reach x, and accumulate")
fig.tight_layout()
plt.show()

# %% [markdown]
# The picture is drawn from the variables of the cell above: `x` has one
# arrow into the inner `Add` (it is both of its inputs) and one into the
# outer `Add`. Three gradients arrive, and `x.grad` is their sum.
#
# ## Two backward calls add up, as in PyTorch
#
# Accumulation does not stop at the end of a pass. A second `backward` adds a
# second copy of every gradient, and a new graph built from the same `x` adds
# its gradients to the old ones. PyTorch does exactly this with `.grad`, which
# is why a training loop clears gradients before each step (`cleargrad` here,
# `optimizer.zero_grad()` or `x.grad = None` in PyTorch).

# %%
x = Variable(np.array(3.0))
y = add(x, x)
y.backward()
y.backward()
print("after two y.backward():              x.grad =", x.grad)
x.cleargrad()
add(x, x).backward()
print("after x.cleargrad(), a new backward: x.grad =", x.grad)

# %% [markdown]
# This agrees with PyTorch only because $x + x$ has no intermediate variable.
# Ours keep their gradients (step 13), and a second pass adds to them too,
# then sends the *accumulated* value on: for $y = (x^2)^2$ at $x = 2$ two
# calls give `x.grad` $= 32 + 64 = 96$ where PyTorch, which keeps no
# intermediate gradients, gives $32 + 32 = 64$. Until step 18 drops
# intermediate gradients, clear every variable of a graph before a second
# pass through it.

# %%
x = Variable(np.array(2.0))
y = square(square(x))
y.backward()
y.backward()
print("y = (x^2)^2, two backward calls:  x.grad =", x.grad, "  (PyTorch: 64.0)")

# %% [markdown]
# ## Check against PyTorch
#
# The gradients of $x + x$ and $(x + x) + x$ are exactly $2$ and $3$ per
# element, as in autograd (the tests try scalars and other shapes); two
# backward calls on $x + x$ accumulate to $4$, as two calls do in PyTorch
# (`retain_graph=True` keeps PyTorch's graph for the second).

# %%
import torch  # noqa: E402

value = np.random.default_rng(0).standard_normal(3)
builds = [("x + x", lambda v, plus: plus(v, v)), ("(x + x) + x", lambda v, plus: plus(plus(v, v), v))]
for name, build in builds:
    x, xt = Variable(value), torch.tensor(value, requires_grad=True)
    build(x, add).backward()
    build(xt, torch.add).sum().backward()
    np.testing.assert_array_equal(x.grad, xt.grad.numpy())
    print(f"grad of {name:11} == torch: {x.grad}")

x, xt = Variable(np.array(3.0)), torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
y, yt = add(x, x), xt + xt
y.backward()
y.backward()
yt.backward(retain_graph=True)
yt.backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"two backward calls on x + x: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")
print("PyTorch check passed: grad of x + x is 2 and accumulates over two backward calls, as in torch")

# %% [markdown]
# ## Recap
#
# - A variable reached along several paths gets one gradient per path; the
#   chain rule adds them.
# - `Variable.backward` stores the first gradient and adds every later one:
#   `x.grad + gx`, a new array, never `+=` on a gradient another variable may
#   share.
# - Gradients also accumulate across backward calls, as PyTorch's `.grad`
#   does; clear them (`cleargrad`, `zero_grad`) before a new pass.
# - Intermediate variables still keep theirs, so a second pass through the
#   same graph counts the first again; step 18 fixes that.
#
# ## Exercises
#
# **1.** Write `repeat_add(x, n)`, which builds $x + x + \dots + x$ ($n$
# terms, $n \ge 2$) with `add`, and check that the gradient of $x$ is $n$.

# %% tags=["hide-cell"]
def repeat_add(x, n):
    y = add(x, x)
    for _ in range(n - 2):
        y = add(y, x)
    return y


for n in range(2, 6):
    x = Variable(np.array(0.5))
    repeat_add(x, n).backward()
    print(f"n = {n}: x.grad = {x.grad}")

# %% [markdown]
# **2.** Write `Neg(Function)`, $y = -x$, whose backward returns $-g_y$,
# and `neg(x)`. What is the gradient of $x + (-x)$? And of
# $(x + x) + (-x)$? Accumulation must add a negative contribution as well.

# %% tags=["hide-cell"]
class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


def neg(x):
    return Neg()(x)


x = Variable(np.array(3.0))
add(x, neg(x)).backward()
print("x + (-x):        x.grad =", x.grad)
x = Variable(np.array(3.0))
add(add(x, x), neg(x)).backward()
print("(x + x) + (-x):  x.grad =", x.grad)
