# %% [markdown]
# # Step 14: Accumulating the gradient of a reused variable
#
# So far every variable fed exactly one function. Real computations reuse
# variables all the time: $y = x + x$, $y = x \cdot x$, a weight matrix applied
# at every time step of a recurrent network. This step shows that the loop of
# step 13 gets the gradient of a reused variable wrong, and fixes it with a
# one-line change: gradients are added up instead of overwritten.
#
# ## Why the contributions add up
#
# If $x$ reaches $y$ along several paths, a small change $\Delta x$ changes
# $y$ along each of them, and the changes add. For $y = x + x$ both paths have
# slope $1$, so
#
# $$\frac{dy}{dx} = 1 + 1 = 2.$$
#
# In general, when $x$ is an input of several functions with outputs
# $u_1, \dots, u_k$ (or of one function several times), the multivariable chain
# rule sums over the paths:
#
# $$\frac{\partial L}{\partial x} = \sum_{i=1}^{k} \frac{\partial L}{\partial u_i} \frac{\partial u_i}{\partial x}.$$
#
# Each term is one gradient that the backward loop delivers to $x$. The loop of
# step 13 assigned `x.grad = gx`, so each delivery replaced the previous one and
# only the last term survived.
#
# ## The framework after this step
#
# The one change is in `Variable.backward`: the first gradient a variable
# receives is stored, every later one is added to it. The sum is written
# `x.grad + gx`, which creates a new array; the section after the code shows
# why the shorter `x.grad += gx` would be a bug.

# %%
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


# %%
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
# With accumulation, $y = x + x$ gives the right gradient, and so does
# $y = (x + x) + x$, where $x$ is reached once directly and twice through the
# intermediate $t = x + x$:

# %%
x = Variable(np.array(3.0))
y = add(x, x)
y.backward()
print("y = x + x:        x.grad =", x.grad)

x = Variable(np.array(3.0))
y = add(add(x, x), x)
y.backward()
print("y = (x + x) + x:  x.grad =", x.grad)

# %% [markdown]
# ## What the two wrong versions do
#
# To see the effect of that one line, here is the loop of `Variable.backward`
# written as a function whose gradient-storing line is a parameter, `store`.
# Everything else is the loop above.

# %%
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


# %% [markdown]
# ### Overwriting loses a path
#
# `Add.backward` returns `(gy, gy)`: one gradient for each of its two inputs.
# Both inputs are `x`, so the loop stores into `x.grad` twice, and with
# `overwrite` the second store replaces the first:

# %%
x = Variable(np.array(3.0))
y = add(x, x)
backward_with(y, overwrite)
print("overwrite:  x.grad =", x.grad, "  (should be 2.0)")

# %% [markdown]
# ### Adding in place corrupts another variable's gradient
#
# `x.grad += gx` looks like a harmless shortcut for `x.grad = x.grad + gx`. It
# is not: `+=` on an ndarray writes into the existing array, and that array is
# not owned by `x`. `Add.backward` returns the very array it received, `gy`,
# which is `y.grad`. The first store makes `x.grad` *the same object* as
# `y.grad`; the second, `x.grad += gy`, then adds into `y.grad` as well.

# %%
x = Variable(np.array(3.0))
y = add(x, x)
backward_with(y, add_in_place)
print("add in place:  x.grad =", x.grad, "  y.grad =", y.grad, "  (y.grad should be 1.0)")
print("x.grad is y.grad:", x.grad is y.grad)

# %% [markdown]
# Here only `y.grad` is wrong, and it is not read again. In $y = (x + x) + x$
# the corrupted array is read again, and the gradient of $x$ comes out wrong.
# Let $g$ be the seed array, $g = 1$. The outer `Add` returns $(g, g)$, so
# `t.grad` and `x.grad` both become $g$ itself. The inner `Add` receives
# `t.grad`, which is $g$, and returns $(g, g)$ again. The first `+=` doubles
# $g$ in place to $2$, and with it `x.grad`, `t.grad` and `y.grad`. The second
# `+=` adds $g$ to itself, giving $4$ instead of $3$:

# %%
x = Variable(np.array(3.0))
y = add(add(x, x), x)
backward_with(y, add_in_place)
print("add in place, y = (x + x) + x:  x.grad =", x.grad, "  (should be 3.0)")

# %% [markdown]
# The framework's `x.grad + gx` allocates a new array, so `y.grad` and `t.grad`
# are never written to. Arrays are still shared between variables (after the
# first store, `x.grad is y.grad` also holds in `Variable.backward`), and that is
# fine as long as nothing modifies a gradient array in place.
#
# ## Two backward calls add up, as in PyTorch
#
# Accumulation does not stop at the end of a backward pass. Calling `backward`
# a second time adds a second copy of every gradient, and building a new graph
# from the same `x` and backpropagating adds its gradients to the old ones.
# That is exactly what PyTorch does with `.grad`, and why a training loop
# clears gradients before each step: with `cleargrad` here, with
# `optimizer.zero_grad()` or `x.grad = None` in PyTorch.

# %%
x = Variable(np.array(3.0))
y = add(x, x)
y.backward()
print("after the 1st y.backward():          x.grad =", x.grad)
y.backward()
print("after the 2nd y.backward():          x.grad =", x.grad)
y2 = add(x, x)
y2.backward()
print("after a new graph, y2.backward():    x.grad =", x.grad)
x.cleargrad()
y2.backward()
print("after x.cleargrad(), y2.backward():  x.grad =", x.grad)

# %% [markdown]
# This agrees with PyTorch only because $y = x + x$ has no intermediate
# variable. An intermediate keeps its gradient too, and the second pass adds to
# it, then sends the *accumulated* value on towards $x$, so the earlier pass is
# counted again. For $y = (x^2)^2$ at $x = 2$, the first pass leaves
# $a = x^2$ with `a.grad` $= 2a = 8$ and gives `x.grad` $= 4x^3 = 32$. The
# second pass makes `a.grad` $= 16$ and adds $2x \cdot 16 = 64$, so
# `x.grad` $= 96$, where PyTorch (which does not store intermediate gradients)
# reports $32 + 32 = 64$:

# %%
x = Variable(np.array(2.0))
y = square(square(x))
y.backward()
y.backward()
print("y = (x^2)^2, two backward calls:  x.grad =", x.grad, "  (PyTorch: 64.0)")

# %% [markdown]
# Step 18 removes this trap: by default, `backward` will drop the gradients of
# intermediate variables once they have been used, as PyTorch does. Until then,
# call `cleargrad` on every variable of a graph before backpropagating through
# it again. Step 15 shows a second, more serious way in which intermediate
# gradients still go wrong, within a single backward pass.
#
# ## Check against PyTorch
#
# The gradients of $x + x$ and $(x + x) + x$ must be exactly $2$ and $3$ per
# element, for scalars and arrays, as in autograd. Then two backward calls on
# $x + x$ must accumulate to $4$, as two `backward` calls do in PyTorch
# (`retain_graph=True` keeps PyTorch's graph alive for the second call).

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    value = rng.standard_normal(shape)
    for name, build in [("x + x", lambda v, plus: plus(v, v)), ("(x + x) + x", lambda v, plus: plus(plus(v, v), v))]:
        x = Variable(value)
        build(x, add).backward()
        xt = torch.tensor(value, requires_grad=True)
        yt = build(xt, torch.add)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_array_equal(x.grad, xt.grad.numpy())
        print(f"shape {shape!s:7} grad of {name:11} == torch ({x.grad.flat[0]:.1f} per element)")

x = Variable(np.array(3.0))
y = add(x, x)
y.backward()
y.backward()
xt = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
yt = xt + xt
yt.backward(retain_graph=True)
yt.backward()
np.testing.assert_array_equal(x.grad, xt.grad.numpy())
print(f"two backward calls on x + x: x.grad = {x.grad:.1f} == torch {xt.grad.item():.1f}")

print("PyTorch check passed: grad of x + x is 2 and accumulates over two backward calls, as in torch")
