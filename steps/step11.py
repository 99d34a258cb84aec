# %% [markdown]
# # Step 11: Functions with several inputs and outputs
#
# Every function of stage 1 took one `Variable` and returned one: `square`,
# `exp`, and chains of them. Most operations a network needs are not like
# that. Addition and multiplication take two inputs; concatenation takes any
# number; splitting an array, or `divmod`, returns several outputs.
#
# This step changes the calling convention of `Function` so that it accepts
# any number of inputs and returns any number of outputs. Only the forward
# direction is generalised here. The backward pass still handles one input and
# one output per function; step 12 generalises it.
#
# ## The new calling convention
#
# A function with $n$ inputs and $m$ outputs computes
#
# $$(y_1, \dots, y_m) = f(x_1, \dots, x_n).$$
#
# In code, three pieces of Python syntax carry this:
#
# - `def __call__(self, *inputs)` packs however many positional arguments the
#   caller passes into the tuple `inputs`;
# - `self.forward(*xs)` does the reverse: it unpacks the list of arrays `xs`
#   into separate arguments, so a subclass writes `forward(self, x0, x1)` with
#   named parameters rather than indexing into a list;
# - `forward` returns either one array (the common case) or a tuple of arrays.
#   `__call__` wraps a single array into a 1-tuple, so the code after it deals
#   with one shape of data only: a sequence of outputs.
#
# The function keeps `inputs` and `outputs` (plural now), and returns a single
# `Variable` when there is one output and a list otherwise. The first rule keeps
# `y = square(x)` readable; the second lets a caller unpack the outputs, as in
# `q, r = DivMod()(a, b)` below.
#
# The base class's `forward` and `backward` now name the subclass that forgot
# to implement them, which saves a search when a new function is half written.
# And `numerical_diff` wraps its shifted inputs with `as_array`: for 0-d data,
# `x.data - eps` is a NumPy scalar, which `Variable` rightly refuses.
#
# ## The framework after this step
#
# `Variable` is unchanged except for one line of `backward`: a function no longer
# has `input` and `output` attributes, so the loop reads the first (and, for now,
# only) input and output from the new lists.

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

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)  # the seed dy/dy = 1, in data's shape and dtype
        funcs = [self.creator]  # functions whose backward has still to run
        while funcs:
            f = funcs.pop()
            x, y = f.inputs[0], f.outputs[0]  # still one input and one output: step 12 lifts this
            x.grad = f.backward(y.grad)  # one step of the chain rule
            if x.creator is not None:
                funcs.append(x.creator)  # continue towards the leaves


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


# %% [markdown]
# `Function.__call__` is where the change happens. Each output gets its own
# `Variable`, and each of them records this function as its creator.

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

    def backward(self, gy):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")


# %% [markdown]
# `Square` and `Exp` keep their `forward(self, x)`: with one input, `forward(*xs)`
# passes exactly one array. Their `backward` reads the input from `inputs[0]`.
#
# `Add` is the first function with two inputs. It has no `backward` yet: the
# loop in `Variable.backward` could not deliver two gradients anyway.

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


def square(x):
    return Square()(x)


def exp(x):
    return Exp()(x)


def numerical_diff(f, x, eps=1e-4):
    x0 = Variable(as_array(x.data - eps))  # 0-d data minus a float is a NumPy scalar, not an array
    x1 = Variable(as_array(x.data + eps))
    y0 = f(x0)
    y1 = f(x1)
    return (y1.data - y0.data) / (2 * eps)


# %% [markdown]
# ## Two inputs, one output
#
# `Add()` creates the function object; calling it with two variables runs
# `forward(x0.data, x1.data)`. The output records `Add` as its creator, and the
# `Add` object records both inputs.

# %%
x0 = Variable(np.array(2.0))
x1 = Variable(np.array(3.0))
f = Add()
y = f(x0, x1)
print("y.data =", y.data)
print("y.creator is f:", y.creator is f)
print("f.inputs are x0, x1:", f.inputs[0] is x0 and f.inputs[1] is x1)
print("number of outputs:", len(f.outputs))

# %% [markdown]
# Nothing in `Add` is specific to scalars: `forward` receives NumPy arrays, so
# two arrays of the same shape are added element by element.

# %%
a = Variable(np.array([1.0, 2.0, 3.0]))
b = Variable(np.array([10.0, 20.0, 30.0]))
print("Add()(a, b).data =", Add()(a, b).data)

# %% [markdown]
# ## Several outputs
#
# A function returns several outputs by returning a tuple from `forward`.
# `np.divmod` returns the quotient and the remainder as a tuple of two arrays, so
# a function built on it needs no extra code. This function is only an
# illustration and not part of the framework: division is not differentiable in
# a useful way.

# %%
class DivMod(Function):
    def forward(self, x0, x1):
        return np.divmod(x0, x1)  # a tuple (quotient, remainder)


q, r = DivMod()(Variable(np.array([7.0, -7.0])), Variable(np.array([2.0, 2.0])))
print("quotient  =", q.data)
print("remainder =", r.data)
print("both outputs share one creator:", q.creator is r.creator)

# %% [markdown]
# The remainder of $-7$ divided by $2$ is $1$, not $-1$: NumPy floors the
# quotient ($-7 / 2 = -3.5 \to -4$), so the remainder $-7 - 2 \cdot (-4) = 1$
# has the sign of the divisor, as Python's `%` does.
#
# ## Stage-1 graphs still differentiate
#
# A chain of one-input functions runs through the same loop as before. The
# gradient of $y = (e^{x^2})^2 = e^{2x^2}$ is $\frac{dy}{dx} = 4x\,e^{2x^2}$;
# at $x = 0.5$ that is $2e^{0.5} \approx 3.297443$. Backpropagation and the
# central difference of step 04 agree.

# %%
x = Variable(np.array(0.5))
y = square(exp(square(x)))
y.backward()
print(f"backprop:       {x.grad:.6f}")
print(f"numerical diff: {numerical_diff(lambda v: square(exp(square(v))), x):.6f}")
print(f"4x e^(2x^2):    {4 * 0.5 * np.exp(2 * 0.5 ** 2):.6f}")

# %% [markdown]
# ## What is still missing
#
# The backward pass of a graph that contains `Add` fails in two places: `Add`
# has no `backward`, and even if it had one, the loop reads only
# `f.inputs[0]`, so the gradient for the second input would be dropped. The
# error below is the one the base class raises for the missing method.

# %%
y = Add()(Variable(np.array(2.0)), Variable(np.array(3.0)))
try:
    y.backward()
except NotImplementedError as error:
    print("NotImplementedError:", error)

# %% [markdown]
# Step 12 gives `backward` the same treatment `forward` received here: it takes
# the gradients of all outputs and returns one gradient per input.
#
# ## Check against PyTorch
#
# `Add` must compute what `torch.add` computes, for scalars and arrays. Both
# perform one IEEE addition per element, so the results must be identical, not
# merely close. The two outputs of `DivMod` are compared with torch's floor
# division and `torch.remainder`, which follow the same sign convention. The
# gradient of the stage-1 chain is compared with autograd.

# %%
import torch

rng = np.random.default_rng(0)
for shape in [(), (3,), (2, 3)]:
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    ours = Add()(Variable(a), Variable(b))
    theirs = torch.add(torch.tensor(a), torch.tensor(b))
    np.testing.assert_array_equal(ours.data, theirs.numpy())
    print(f"shape {shape!s:7} Add forward == torch.add")

a, b = np.array([7.0, -7.0, 7.5, -7.5]), np.array([2.0, 2.0, -2.0, 0.5])
q, r = DivMod()(Variable(a), Variable(b))
np.testing.assert_array_equal(q.data, torch.div(torch.tensor(a), torch.tensor(b), rounding_mode="floor").numpy())
np.testing.assert_array_equal(r.data, torch.remainder(torch.tensor(a), torch.tensor(b)).numpy())
print("DivMod outputs == torch floor division and torch.remainder")

x = Variable(np.array(0.5))
square(exp(square(x))).backward()
xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
torch.square(torch.exp(torch.square(xt))).backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print(f"d/dx square(exp(square(x))) at 0.5: {x.grad:.6f} == torch {xt.grad.item():.6f}")

print("PyTorch check passed: Add forward equals torch.add; the stage-1 chain still backpropagates")
