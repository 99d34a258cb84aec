# %% [markdown]
# # Step 35: Saved tensors, what the backward pass keeps
#
# Stage 4 is about memory. Training a network needs, for every layer, some of
# the values its forward pass computed: the backward pass of $\tanh$ needs
# $\tanh x$, the backward pass of a product needs both factors. Those values
# stay in memory from the moment they are computed until the backward pass has
# used them, and for a deep network they, not the weights, fill the memory.
# Everything this stage does (hooks, checkpointing, reversible networks) is a
# way to keep less.
#
# To say anything true about that memory, the framework must first keep
# exactly what the backward pass needs and nothing more. Since step 07 a
# `Function` kept its input Variables (`self.inputs`), and with them their
# arrays, whether its backward needed them or not. This step changes the
# package the way PyTorch works:
#
# - a function keeps, for each input, an **edge**: where the input's gradient
#   goes, not the input itself;
# - `forward` **saves** what `backward` will need, with
#   `self.save_for_backward(...)`, and `backward` reads it back from
#   `self.saved_tensors`;
# - the backward pass **frees** the saved tensors once it has used them,
#   unless asked to `retain_graph`.

# %%
import gc
import inspect
import tracemalloc
import weakref

import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd, utils
from tinypytorch.functions import Exp, Sigmoid
from tinypytorch.layers import MLP
from tinypytorch.utils import get_dot_graph, plot_dot_graph

# %% [markdown]
# ## Edges instead of inputs
#
# Take $y = x \cdot e^{x}$. The backward pass must send the gradient of the
# product to $x$ and to $e^x$, and from $e^x$ on to $x$. For that it needs to
# know *where* each gradient goes: to the function that made the input, or,
# for a leaf, to the leaf itself (PyTorch's `AccumulateGrad`, step 33). It
# does not need the input Variables. So each function now keeps its `edges`,
# one per input: `(function that made it, which of that function's outputs
# it is)`, `(leaf, 0)`, or `(None, 0)` for a constant, which gets no
# gradient. PyTorch calls them `next_functions`.

# %%
x = Variable(np.array([0.5, 1.0, 2.0]), name="x")
y = x * tinypytorch.exp(x)
mul = y.creator
exp = mul.edges[1][0]
print("Mul.edges:", [(type(node).__name__ if isinstance(node, Function) else node.name, nr) for node, nr in mul.edges])
print("Exp.edges:", [(type(node).__name__ if isinstance(node, Function) else node.name, nr) for node, nr in exp.edges])
print(inspect.getsource(tinypytorch.core.gradient_edge))

# %% [markdown]
# Everything a call of a function keeps for the backward pass is written in
# one method, `Function.record`, which `Function.__call__` runs only when the
# graph is recorded: the edges, the shape and dtype each output's gradient
# must have (`output_meta`), weak references to the outputs, and the tensors
# `forward` saved, which the next section is about.

# %%
print(inspect.getsource(Function.record))

# %% [markdown]
# The intermediate $e^x$ is no longer referred to by anything: the `Exp`
# function holds its output only weakly (step 17), and `Mul` holds an edge to
# `Exp`, not the Variable. So the Variable is gone as soon as the expression
# is evaluated, and yet the gradient still flows, because the engine keeps
# each gradient under its edge (step 33's buffers, one slot per output of a
# function) rather than in the variables:

# %%
print("the Variable e^x still exists:", exp.outputs[0]() is not None)
y.backward()
print("x.grad =", x.grad, "  (1 + x) e^x =", Variable((1 + x.data) * np.exp(x.data)))

# %% [markdown]
# ## Saving what backward needs
#
# A `forward` works on arrays. It passes to `self.save_for_backward` the
# arrays its `backward` will need; `Function.record` finds out, by identity,
# which of them are inputs and which outputs, and keeps them in `SavedTensor`
# objects (PyTorch's `SavedVariable`, `tinypytorch.autograd.graph`).
# `backward` gets them back, as Variables, from `self.saved_tensors`. `Exp`
# saves its output, $\frac{d}{dx}e^x = e^x$; `Mul` saves each factor only if
# the *other* input needs a gradient, which `self.needs_input_grad` says
# (PyTorch's name):

# %%
print(inspect.getsource(Exp))
print(inspect.getsource(tinypytorch.core.Mul))
print(inspect.getsource(Function.save_for_backward))
print(inspect.getsource(Function.saved_tensors.fget))

# %% [markdown]
# What each operation keeps follows from its derivative, and it is what
# PyTorch keeps (the check at the end compares every operation):
#
# | operation | saves | because |
# |---|---|---|
# | `+`, `-`, `neg`, `sum`, `reshape`, `transpose`, `broadcast_to` | nothing | the gradient does not depend on the values |
# | `exp`, `tanh`, `sigmoid`, `relu` | the output | $e^x$, $1 - \tanh^2 x$, $\sigma(1-\sigma)$, $[y > 0]$ |
# | `sin`, `cos`, `square`, `x ** c`, `log` | the input | $\cos x$, $-\sin x$, $2x$, $c\,x^{c-1}$, $1/x$ |
# | `*`, `/`, `@`, `linear` | the operands whose partner needs a gradient | $\partial(ab)/\partial a = b$, ... |
# | a Python number, such as the 2 in `x * 2` | no tensor | it is kept as a number |
#
# `needs_input_grad` makes a real difference in a network: in the first layer
# $y = xW^\top + b$ the batch $x$ needs no gradient, so `linear` saves $x$ (for
# $W$'s gradient) but not $W$.

# %%
x = Variable(np.ones((4, 3)), requires_grad=False, name="x")  # data: no gradient
W = Variable(np.full((2, 3), 0.5), name="W")
h = tinypytorch.linear(x, W) * 2.0
for f, saved in utils.saved_tensors(h):
    print(f"{type(f).__name__:14} saved {saved.variable.name}: {saved.variable.shape}")

# %% [markdown]
# ## A saved output makes no cycle
#
# `Exp` saves its output $y$. If the `SavedTensor` kept the Variable $y$, the
# function would refer to $y$ and $y$ (through `creator`) to the function: a
# reference cycle, which step 17 removed by holding outputs weakly, and which
# only the garbage collector could free. So a saved *output* keeps its array
# only, and `unpack` wraps it in a new Variable whose creator is the function
# again; a saved *input* is kept as the Variable itself, whose creator is
# another function. As in step 17, the graph below is freed by reference
# counting alone, with the collector switched off:

# %%
print(inspect.getsource(autograd.graph.SavedTensor.unpack))
print(inspect.getsource(autograd.graph.SavedTensor._rebuild))

gc.collect()
gc.disable()
x = Variable(np.array([1.0, 2.0]))
y = tinypytorch.exp(x)
saved = y.creator._saved[0]
print("the saved output keeps the Variable:", saved.variable is not None, "  its array:", saved.data is y.data)
alive = weakref.ref(y.creator)
del y
print("Exp freed without the garbage collector:", alive() is None)
gc.enable()

# %% [markdown]
# ## Freed after backward, and `retain_graph`
#
# Once a function's backward has run, its saved tensors have done their job.
# PyTorch frees them right then, and so does the engine now (the
# `release_saved` line of step 33's `GraphTask.run_function`). A second backward pass through
# the same functions finds nothing to compute with, and says so with
# PyTorch's message:

# %%
x = Variable(np.array([0.5, 1.5]), name="x")
y = (tinypytorch.tanh(x) * x).sum()
y.backward()
print("first pass: x.grad =", x.grad)
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# A function that saved nothing can run again: $y = x + 1$ backpropagates
# twice without complaint, in PyTorch too. Where a graph must be used twice,
# for instance for the rows of a Hessian (step 28), `retain_graph=True` keeps
# the saved tensors; then, as in PyTorch, the gradients of the two passes add
# up in `.grad`. `retain_graph` defaults to `create_graph`: a graph of the
# gradient (step 27) is built to be differentiated again, and will need the
# forward graph's saved tensors then. `autograd.grad` frees the same way.

# %%
x = Variable(np.array([0.5, 1.5]), name="x")
y = (tinypytorch.tanh(x) * x).sum()
y.backward(retain_graph=True)
once = x.grad.data.copy()
y.backward()
print("after two passes x.grad / once =", x.grad.data / once)

(g,) = autograd.grad((tinypytorch.tanh(x) * x).sum(), x, create_graph=True)
(gg,) = autograd.grad(g.sum(), x)
print("create_graph keeps the graph for the second derivative:", gg)

# %% [markdown]
# ## What a forward pass holds, measured
#
# Now the memory can be measured and explained. A multilayer perceptron with
# four `Linear` layers of width 512 and $\tanh$ between them, on a batch of
# 256 rows, in float64, with a mean-squared-error loss. `tracemalloc` follows
# every allocation; `array_kib` below counts only those of NumPy's arrays
# (NumPy reports them to `tracemalloc` under a domain of their own), in KiB.
# `utils.saved_tensors` walks the graph and lists what its functions saved:

# %%
print(inspect.getsource(utils.saved_tensors))


def array_kib():
    """KiB of NumPy arrays allocated since tracemalloc started and not freed."""
    numpy_only = tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)
    return sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces([numpy_only]).traces) / 1024


def mlp_and_data():
    model = MLP((512, 512, 512, 512, 512), activation=tinypytorch.tanh, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    batch = Variable(rng.standard_normal((256, 512)), requires_grad=False, name="batch")
    return model, batch, Variable(rng.standard_normal((256, 512)), requires_grad=False, name="target")


model, batch, target = mlp_and_data()
tracemalloc.start()
before = array_kib()
loss = tinypytorch.mean_squared_error(model(batch), target)
after_forward = array_kib()
saved = utils.saved_tensors(loss)
for f, s in saved:
    what, data = ("its output", s.data) if s.variable is None else (s.variable.name or "an input", s.variable.data)
    print(f"{type(f).__name__:17} saved {what:10} {str(data.shape):11} {s.nbytes() / 1024:5.0f} KiB")
new_arrays = {id(s.data if s.variable is None else s.variable.data): s.nbytes() for _, s in saved
              if s.variable is None or s.variable.creator is not None}
print(f"\nheld after forward:                    {after_forward - before:8.1f} KiB")
print(f"saved arrays the forward pass created: {sum(new_arrays.values()) / 1024:8.1f} KiB ({len(new_arrays)} arrays)")
loss.backward()
gradients = sum(p.grad.data.nbytes for p in model.params()) / 1024
print(f"held after backward, gradients aside:  {array_kib() - before - gradients:8.1f} KiB")
tracemalloc.stop()

# %% [markdown]
# Twelve tensors are saved: each `Linear` its input (for $W$'s gradient) and,
# except the first, $W$ (for its input's gradient; the batch needs none); each
# $\tanh$ its output; the loss both operands. The weights and the batch
# existed before the forward pass and cost nothing new; a $\tanh$ output is
# also the next layer's input, one array saved twice. What the forward pass
# created and keeps is four arrays of $256 \times 512$ float64, 1 MiB each: the
# three hidden activations and the network's output. That is exactly what
# `tracemalloc` finds held after the forward pass, and after the backward
# pass they are gone: only the gradients remain (and the loss, one number).
#
# Before this step, every function kept its input Variables, and so every
# intermediate array: here also the three pre-activations $xW^\top + b$ and
# the products $xW^\top$ before the bias, seven more arrays of 1 MiB, and
# nothing freed them after the backward pass while the loss was alive.

# %% [markdown]
# ## Seeing the saved tensors
#
# `get_dot_graph(y, show_saved=True)` (and `plot_dot_graph`) draws each
# saved tensor as an orange note attached to the function that keeps it, with
# its shape and bytes, and adds the total the graph holds. The total counts
# an array once, however many functions saved it (`torchviz`, PyTorch's
# drawing tool, has the same `show_saved` option).

# %%
x = Variable(np.array([0.5, 1.0, 2.0]), name="x")
w = Variable(np.array([1.0, -1.0, 0.5]), name="w")
y = tinypytorch.sigmoid(x * w).sum()
y.name = "y"
print(get_dot_graph(y, show_saved=True).splitlines()[2].strip())
plot_dot_graph(y, show_saved=True)

# %% [markdown]
# `Mul` saved both $x$ and $w$, each needed for the other's gradient, and
# `Sigmoid` its output; `Sum` saved nothing. After `y.backward()` the same
# drawing marks them freed.

# %%
y.backward()
print(get_dot_graph(y, show_saved=True).splitlines()[2].strip())

# %% [markdown]
# ## Bad input
#
# `save_for_backward` takes arrays (or Variables); anything else is refused
# when the function records its graph, naming the function:

# %%
class SavesAString(Function):
    def forward(self, x):
        self.save_for_backward("x")
        return x * 2


try:
    SavesAString()(Variable(np.ones(2)))
except TypeError as error:
    print("TypeError:", error)

# %% [markdown]
# ## Check against PyTorch
#
# - **What each operation saves.** PyTorch calls a pack hook
#   (`torch.autograd.graph.saved_tensors_hooks`, step 38) once for every
#   tensor an operation saves; the same expression in tinypytorch is counted
#   through its `SavedTensor`s. For every differentiable operation of the
#   package, with every input requiring a gradient and with only one, the
#   shapes of the saved tensors are equal (`linear` excepted: PyTorch saves
#   the weight's transpose, a view of the same memory, so the shapes are
#   swapped and the bytes equal).
# - **Backward twice** raises in both; with `retain_graph=True` the gradients
#   double in both.
# - **The bytes the MLP saves** equal PyTorch's for the same network.

# %%
import torch

rng = np.random.default_rng(0)
A, B = rng.uniform(0.5, 1.5, (2, 3)), rng.uniform(0.5, 1.5, (2, 3))
M, W, bias = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, 4)
OPERATIONS = {  # name: (tinypytorch, torch, operands)
    "add": (lambda x, y: x + y, lambda x, y: x + y, [A, B]),
    "sub": (lambda x, y: x - y, lambda x, y: x - y, [A, B]),
    "mul": (lambda x, y: x * y, lambda x, y: x * y, [A, B]),
    "div": (lambda x, y: x / y, lambda x, y: x / y, [A, B]),
    "neg": (lambda x: -x, lambda x: -x, [A]),
    "x * 2.0": (lambda x: x * 2.0, lambda x: x * 2.0, [A]),
    "2.0 / x": (lambda x: 2.0 / x, lambda x: 2.0 / x, [A]),
    "pow": (lambda x: x**3, lambda x: x**3, [A]),
    "square": (tinypytorch.square, torch.square, [A]),
    "exp": (tinypytorch.exp, torch.exp, [A]),
    "log": (tinypytorch.log, torch.log, [A]),
    "sin": (tinypytorch.sin, torch.sin, [A]),
    "cos": (tinypytorch.cos, torch.cos, [A]),
    "tanh": (tinypytorch.tanh, torch.tanh, [A]),
    "sigmoid": (tinypytorch.sigmoid, torch.sigmoid, [A]),
    "relu": (tinypytorch.relu, torch.relu, [A]),
    "sum": (lambda x: x.sum(), lambda x: x.sum(), [A]),
    "sum(axis)": (lambda x: x.sum(axis=0), lambda x: x.sum(dim=0), [A]),
    "reshape": (lambda x: x.reshape(3, 2), lambda x: x.reshape(3, 2), [A]),
    "transpose": (lambda x: x.transpose(0, 1), lambda x: x.transpose(0, 1), [A]),
    "broadcast_to": (lambda x: tinypytorch.broadcast_to(x, (4, 2, 3)), lambda x: x.expand(4, 2, 3), [A]),
    "sum_to": (lambda x: tinypytorch.sum_to(x, (1, 3)), lambda x: x.sum(0, keepdim=True), [A]),
    "matmul": (lambda x, m: x @ m, lambda x, m: x @ m, [A, M]),
    "linear": (tinypytorch.linear, torch.nn.functional.linear, [A, W, bias]),
    "x[0:1, 1:]": (lambda x: x[0:1, 1:], lambda x: x[0:1, 1:], [A]),
    "x[[0, 0, 1]]": (lambda x: x[[0, 0, 1]], lambda x: x[[0, 0, 1]], [A]),
    "mean_squared_error": (tinypytorch.mean_squared_error, torch.nn.functional.mse_loss, [A, B]),
}


def shapes_saved_by_ours(fn, operands, requires):
    y = fn(*[Variable(a, requires_grad=r) for a, r in zip(operands, requires)])
    saved = [s for s in y.creator._saved if isinstance(s, autograd.graph.SavedTensor)]
    return sorted((s.data if s.variable is None else s.variable.data).shape for s in saved)


def shapes_saved_by_torch(fn, operands, requires):
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        fn(*[torch.tensor(a, requires_grad=r) for a, r in zip(operands, requires)])
    return sorted(shapes)


print(f"{'operation':20} {'inputs needing a gradient':26} saved shapes (tinypytorch = torch)")
for name, (ours, theirs, operands) in OPERATIONS.items():
    all_inputs, first_only = (True,) * len(operands), (True,) + (False,) * (len(operands) - 1)
    for requires in [all_inputs] if len(operands) == 1 else [first_only, all_inputs]:
        got, expected = shapes_saved_by_ours(ours, operands, requires), shapes_saved_by_torch(theirs, operands, requires)
        if name == "linear":  # PyTorch saves W.t(), a view of W: the same bytes, the shape swapped
            expected = sorted((s[1], s[0]) if s == (3, 4) else s for s in expected)
        assert got == expected, (name, requires, got, expected)
        print(f"{name:20} {str(sum(requires)) + ' of ' + str(len(requires)):26} {got}")
assert set(OPERATIONS) >= {"add", "sub", "mul", "div", "neg", "pow", "exp", "log", "sin", "cos", "tanh",
                           "sigmoid", "relu", "sum", "reshape", "transpose", "matmul", "linear"}


def three_passes(m, x, as_numpy):
    """x.grad after one pass and after two (retain_graph), and the error of a third pass."""
    y = (m.tanh(x) * x).sum()
    y.backward(retain_graph=True)
    first = as_numpy(x.grad).copy()
    y.backward()  # frees the saved tensors
    try:
        y.backward()
    except RuntimeError as error:
        return first, as_numpy(x.grad), str(error)
    raise AssertionError("the third pass should have failed")


ours = three_passes(tinypytorch, Variable(np.array([0.5, 1.5])), lambda g: g.data)
theirs = three_passes(torch, torch.tensor([0.5, 1.5], dtype=torch.float64, requires_grad=True),
                      lambda g: g.detach().numpy())
np.testing.assert_allclose(ours[1], 2 * ours[0], rtol=1e-15)
np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-14)
assert ours[2].startswith("Trying to backward through the graph a second time") and "second time" in theirs[2]
print("retain_graph: gradients double as in torch; a pass without it frees, and the next raises in both")

model, batch, target = mlp_and_data()
twin = torch.nn.Sequential(*[m for layer in model.layers
                             for m in (torch.nn.Linear(512, 512).double(), torch.nn.Tanh())][:-1])
with torch.no_grad():
    for p, pt in zip(model.params(), twin.parameters(), strict=True):
        pt.copy_(torch.tensor(p.data))
counted = []
with torch.autograd.graph.saved_tensors_hooks(lambda t: counted.append(t.nelement() * t.element_size()) or t,
                                              lambda t: t):
    loss_t = torch.nn.functional.mse_loss(twin(torch.tensor(batch.data)), torch.tensor(target.data))
loss = tinypytorch.mean_squared_error(model(batch), target)
ours_bytes = sum(s.nbytes() for _, s in utils.saved_tensors(loss))
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
assert ours_bytes == sum(counted) and len(utils.saved_tensors(loss)) == len(counted)
print(f"the MLP saves {len(counted)} tensors, {ours_bytes:,} bytes, in both frameworks")
print("PyTorch check passed: every operation saves torch's tensors; backward twice and retain_graph as torch; "
      "the MLP's saved bytes equal torch's")
