# %% [markdown]
# # Step 35: Saved tensors, what the backward pass keeps
#
# Stage 4 is about memory. The backward pass needs some of the values the
# forward pass computed: the derivative of $\tanh$ needs $\tanh x$, that of
# a product needs both factors. Those values wait in memory until the
# backward pass has used them, and in a deep network they, not the weights,
# fill it. Everything this stage does (hooks, checkpointing, reversible
# networks) is a way to keep less.
#
# First the framework must keep exactly what the backward pass needs. Since
# step 07 a `Function` kept its input Variables, and with them their arrays,
# needed or not. This step changes that, the way PyTorch works:
#
# - a function keeps, for each input, an **edge**: where the input's gradient
#   goes, not the input itself;
# - `forward` **saves** what `backward` will need with
#   `self.save_for_backward(...)`, and `backward` reads it back from
#   `self.saved_tensors`;
# - the backward pass **frees** the saved tensors once it has used them,
#   unless asked to `retain_graph`.

# %%
import gc
import tracemalloc
import weakref

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, utils
from tinypytorch.autograd.graph import SavedTensor
from tinypytorch.functions import Exp
from tinypytorch.utils.listing import show_code

# %% tags=["hide-input"]
from matplotlib.patches import FancyBboxPatch  # noqa: E402  (harness: the drawings of this page)


def node_name(node):
    """How a drawing or a printout names an edge's end: a Function's class, a leaf's name, or None."""
    return type(node).__name__ if isinstance(node, Function) else getattr(node, "name", None)


def record_label(s):
    """What a SavedTensor holds now: 'input <name>' (the Variable), 'output' (its array only) or 'freed'."""
    if s.freed:
        return "freed"
    if s.variable is not None:
        return f"input {s.variable.name or 'exp(x)'}"
    return "output"


def saved_records(y):
    """[(function name, [record labels])] for the functions behind y, in the order they were made."""
    functions, todo = [], [y.creator]
    while todo:
        f = todo.pop()
        if isinstance(f, Function) and f not in functions:
            functions.append(f)
            todo.extend(node for node, _ in f.edges)
    functions.sort(key=lambda f: f.sequence_nr)
    return [(type(f).__name__, [record_label(s) for s in f.saved if isinstance(s, SavedTensor)]) for f in functions]


def box(axis, xy, w, h, text, face, edge="black", text_color="black", linestyle="-"):
    axis.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h, boxstyle="round,pad=0.02",
                                  facecolor=face, edgecolor=edge, linewidth=1.2, linestyle=linestyle))
    axis.text(*xy, text, ha="center", va="center", fontsize=9, color=text_color)


def arrow(axis, start, end, color="black", dashed=False, rad=0.0):
    axis.annotate("", xy=end, xytext=start, arrowprops=dict(
        arrowstyle="-|>", color=color, linestyle="--" if dashed else "-", linewidth=1.3,
        connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2))


def variable_box(axis, xy, title, data):
    """A Variable drawn as a box with its array inside, or a dotted outline once nothing holds it."""
    if data is None:
        box(axis, xy, 1.8, 1.1, title + ":\ngone", "white", edge="gray", text_color="gray", linestyle=":")
        return
    box(axis, xy, 1.8, 1.1, "", "white")
    axis.text(xy[0], xy[1] + 0.33, title, ha="center", va="center", fontsize=9)
    box(axis, (xy[0], xy[1] - 0.15), 1.4, 0.4, f"array, {data.nbytes} bytes", "#fff2cc")


def draw_who_owns(y, title):
    """Functions, edges, SavedTensor records and what each refers to, for y = (x * exp(x)).sum(), drawn
    from the objects as they are now (a freed record is greyed, its outline dotted)."""
    sum_f = y.creator
    mul = sum_f.edges[0][0]
    x, exp = mul.edges[0][0], mul.edges[1][0]
    h = exp.outputs[0]()  # the Variable exp(x), alive only while something holds it
    fig, axis = plt.subplots(figsize=(9, 4.2))
    axis.set(xlim=(-0.1, 9.7), ylim=(0.0, 4.4))
    axis.axis("off")
    axis.set_title(title, fontsize=11)
    F = {exp: (3.4, 3.6), mul: (6.0, 3.6), sum_f: (8.6, 3.6)}
    for f, xy in F.items():
        box(axis, xy, 1.3, 0.5, type(f).__name__, "#cfe2f3")
    X, H = (1.0, 2.9), (6.0, 0.75)
    variable_box(axis, X, "Variable x (a leaf)", x.data)
    variable_box(axis, H, "Variable exp(x)", None if h is None else h.data)
    if h is not None:
        arrow(axis, (F[exp][0] + 0.3, F[exp][1] - 0.25), (H[0] - 0.7, H[1] + 0.55), color="gray", dashed=True)
        axis.text(4.25, 2.85, "weak", color="gray", fontsize=9)
    # edges: where each input's gradient goes
    arrow(axis, (F[sum_f][0] - 0.65, 3.6), (F[mul][0] + 0.65, 3.6))
    arrow(axis, (F[mul][0] - 0.65, 3.6), (F[exp][0] + 0.65, 3.6))
    arrow(axis, (F[exp][0] - 0.65, 3.6), (X[0] + 0.9, 3.25))
    arrow(axis, (F[mul][0] - 0.2, 3.85), (X[0], X[1] + 0.55), rad=0.3)
    axis.text(7.3, 3.7, "edge", fontsize=9, ha="center")
    # the records each function saved, and what each refers to
    places = {exp: [(2.9, 2.35)], mul: [(5.6, 2.35), (7.0, 2.35)]}
    for f, slots in places.items():
        for s, xy in zip([s for s in f.saved if isinstance(s, SavedTensor)], slots):
            axis.plot([F[f][0], xy[0]], [F[f][1] - 0.25, xy[1] + 0.3], color="darkorange", linewidth=1)
            if s.freed:
                box(axis, xy, 1.3, 0.6, "SavedTensor\nfreed", "#eeeeee", edge="gray", text_color="gray",
                    linestyle=":")
                continue
            kind = "saved input:\nthe Variable" if s.variable is not None else "saved output:\nits array only"
            box(axis, xy, 1.3, 0.6, kind, "#fce5cd", edge="darkorange")
            if s.variable is x:
                arrow(axis, (xy[0] - 0.1, xy[1] - 0.3), (X[0] + 0.3, X[1] - 0.55), color="darkorange", rad=-0.25)
            elif s.variable is not None:
                arrow(axis, (xy[0], xy[1] - 0.3), (H[0] + 0.6, H[1] + 0.55), color="darkorange")
            else:  # into the array's side, clear of the Variable's name
                arrow(axis, (xy[0], xy[1] - 0.3), (H[0] - 0.7, H[1] - 0.15), color="darkorange")
    axis.text(F[sum_f][0], 2.35, "Sum saves\nnothing", ha="center", va="center", fontsize=9, color="gray",
              style="italic")
    axis.text(7.9, 0.75, "black: edges (where gradients go)\norange: the records a function\nsaved, and what they hold\n"
              "dashed: weak reference\nto an output", fontsize=9, ha="left", va="center")
    fig.tight_layout()
    return fig


# %% [markdown]
# ## Edges instead of inputs
#
# Take $y = \sum x e^{x}$. The backward pass sends the gradient of the
# product to $x$ and to $e^x$, and from $e^x$ on to $x$. It needs to know
# *where* each gradient goes, not the input Variables. So each function keeps
# one **edge** per input: `(function that made it, which of its outputs)`,
# `(leaf, 0)` for a leaf (the leaf plays PyTorch's `AccumulateGrad`, step 33),
# or `(None, 0)` for a constant. PyTorch calls them `next_functions`.

# %%
x = Variable(np.array([0.5, 1.0, 2.0]), name="x")
y = (x * tinypytorch.exp(x)).sum()
mul = y.creator.edges[0][0]
exp = mul.edges[1][0]
print("Mul.edges:", [(node_name(node), nr) for node, nr in mul.edges])
print("Exp.edges:", [(node_name(node), nr) for node, nr in exp.edges])

# %% [markdown]
# `Function.run_plain` (what `__call__` runs, step 23) asks `record` to keep
# all of it, and only when a gradient can flow: the edges, the shape and
# dtype each output's gradient
# must have (`output_meta`), **weak** references to the outputs (step 17),
# and the tensors `forward` saved.

# %%
show_code(Function.run_plain, Function.record, step=35)

# %% [markdown]
# ## Who owns a saved tensor
#
# The drawing shows the graph of $y$ as it is now, made from the objects
# themselves. Edges point at functions (and at the leaf), never at data.
# Each function owns `SavedTensor` records; `Exp` saved its output, `Mul`
# both its inputs, `Sum` nothing. The Variable $e^x$ is held by one thing
# only: `Mul`'s saved input. `Exp` refers to it weakly and keeps its
# *array* alone. One array, saved twice, is held once.

# %% tags=["hide-input"]
draw_who_owns(y, "who owns a saved tensor: y = (x * exp(x)).sum(), after the forward pass")
plt.show()

# %% [markdown]
# ## Saving what backward needs
#
# `forward` works on arrays and passes the ones `backward` will need to
# `save_for_backward`. `record` matches them, by identity, with the inputs
# and outputs and wraps each in a `SavedTensor` (PyTorch's `SavedVariable`).
# `backward` gets them back as Variables from `saved_tensors`. `Exp` saves
# its output, since $\frac{d}{dx}e^x = e^x$; `Mul` saves a factor only if
# the *other* input needs a gradient (`self.needs_input_grad`, PyTorch's
# name).

# %%
show_code(Function.save_for_backward, Function.saved_tensors.fget, Exp, tinypytorch.core.Mul, step=35)

# %% [markdown]
# What each operation keeps follows from its derivative, and it is what
# PyTorch keeps (the check at the end compares every operation):
#
# | operation | saves | because |
# |---|---|---|
# | `+`, `-`, `sum`, `reshape`, `transpose`, `broadcast_to` | nothing | the gradient does not depend on the values |
# | `exp`, `tanh`, `sigmoid`, `relu` | the output | $e^x$, $1 - \tanh^2 x$, $\sigma(1-\sigma)$, $[y > 0]$ |
# | `sin`, `cos`, `square`, `x ** c`, `log` | the input | $\cos x$, $-\sin x$, $2x$, $c\,x^{c-1}$, $1/x$ |
# | `*`, `@`, `linear` | the operands whose partner needs a gradient | $\partial(ab)/\partial a = b$, ... |
# | `/` | the divisor $b$ if either needs a gradient; the dividend $a$ too if $b$ does | $1/b$, and $-a/b^2$ |
# | a Python number, such as the 2 in `x * 2` | no tensor | it is kept as a number |
#
# In a network's first layer, $y = xW^\top + b$, the batch $x$ needs no
# gradient, so `linear` saves $x$ (for $W$'s gradient) but not $W$:

# %%
batch = Variable(np.ones((4, 3)), requires_grad=False, name="batch")
W = Variable(np.full((2, 3), 0.5), name="W")
for f, saved in utils.saved_tensors(tinypytorch.linear(batch, W)):
    print(f"{type(f).__name__} saved {saved.variable.name}: {saved.variable.shape}")

# %% [markdown]
# ## A saved output makes no cycle
#
# If `Exp`'s record kept the Variable $e^x$, the function would refer to
# its output and the output (through `creator`) to the function: the
# reference cycle of step 17, which only the garbage collector frees. So a
# saved *output* keeps its array only, and `unpack` wraps it in a new
# Variable whose creator is the function again; a saved *input* keeps the
# Variable, whose creator is another function.

# %%
show_code(SavedTensor.__init__, SavedTensor.unpack, step=35)

# %% [markdown]
# (The `hooks` branch is step 38's saved-tensor hooks; until then it
# is never taken.) With the garbage collector switched off, reference
# counting alone frees the function:

# %%
gc.collect()
gc.disable()
h = tinypytorch.exp(Variable(np.array([1.0, 2.0])))
record = h.creator.saved[0]
print("the record keeps the Variable:", record.variable is not None, "| its array:", record.data is h.data)
alive = weakref.ref(h.creator)
del h
print("Exp freed without the garbage collector:", alive() is None)
gc.enable()

# %% [markdown]
# ## Freed after backward, and `retain_graph`
#
# Once a function's backward has run, its saved tensors have done their
# job. The engine releases them right then (the `release_saved` call in step
# 33's `GraphTask.run_function`), as PyTorch does:

# %%
show_code(SavedTensor.release, step=35)
y.backward()
print("x.grad =     ", x.grad)
print("(1 + x) e^x =", Variable((1 + x.data) * np.exp(x.data)))

# %% [markdown]
# The same graph, drawn again from its objects: every record is freed, and
# the Variable $e^x$, which only `Mul`'s record held, is gone. The gradient
# still reached $x$, because the engine keeps gradients under edges (step
# 33), not in Variables.

# %% tags=["hide-input"]
draw_who_owns(y, "the same graph after y.backward(): the saved tensors are freed")
plt.show()

# %% [markdown]
# A second backward pass through the same functions finds nothing to
# compute with and says so with PyTorch's message. Where a graph must be
# used twice, `retain_graph=True` keeps the saved tensors, and the two
# passes' gradients add up in `.grad`. (`retain_graph` defaults to
# `create_graph`, since a graph of the gradient, step 27, will need the
# forward graph's saved tensors; `autograd.grad` frees the same way. A
# graph that saved nothing, such as $x + 1$, can always run again.)

# %%
try:
    y.backward()
except RuntimeError as error:
    print("RuntimeError:", str(error).split(" (")[0], "(...)")

x = Variable(np.array([0.5, 1.5]), name="x")
y = (tinypytorch.tanh(x) * x).sum()
y.backward(retain_graph=True)
once = x.grad.data.copy()
y.backward()
print("after two passes x.grad / once =", x.grad.data / once)

# %% [markdown]
# ## What a forward pass holds, measured
#
# Now the memory can be measured and explained: an MLP with four `Linear`
# layers of width 512 and $\tanh$ between them, a batch of 256 rows in
# float64, a mean-squared-error loss. `array_kib()` (in the collapsed cell)
# counts, with `tracemalloc`, the KiB of NumPy arrays alive, and
# `utils.saved_tensors(loss)` lists what the graph's functions saved.

# %% tags=["hide-input"]
def array_kib():
    """KiB of NumPy arrays allocated since tracemalloc started and not freed."""
    numpy_only = tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)
    return sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces([numpy_only]).traces) / 1024


def mlp_and_data():
    model = tinypytorch.layers.MLP((512,) * 5, activation=tinypytorch.tanh, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    batch = Variable(rng.standard_normal((256, 512)), requires_grad=False, name="batch")
    return model, batch, Variable(rng.standard_normal((256, 512)), requires_grad=False, name="target")


def print_saved(loss):
    """One line per saved tensor: the function, what it saved, shape and KiB."""
    for f, s in utils.saved_tensors(loss):
        what, data = ("its output", s.data) if s.variable is None else (s.variable.name or "an input", s.variable.data)
        print(f"{type(f).__name__:17} saved {what:10} {str(data.shape):11} {s.nbytes() / 1024:5.0f} KiB")


# %%
model, batch, target = mlp_and_data()
tracemalloc.start()
before = array_kib()
loss = tinypytorch.mean_squared_error(model(batch), target)
held_after_forward = array_kib() - before
print_saved(loss)
print(f"\nheld after forward:                   {held_after_forward:7.1f} KiB")
loss.backward()
gradients = sum(p.grad.data.nbytes for p in model.params()) / 1024
held_after_backward = array_kib() - before - gradients
print(f"held after backward, gradients aside: {held_after_backward:7.1f} KiB")
tracemalloc.stop()

# %% [markdown]
# Twelve tensors are saved: each `Linear` its input (for $W$'s gradient)
# and, except the first, $W$ (the batch needs no gradient); each $\tanh$
# its output; the loss both operands. The weights and the batch existed
# before and cost nothing new, and a $\tanh$ output is also the next layer's
# input, one array saved twice. What the forward pass created and keeps is
# four arrays of $256 \times 512$ float64, 1 MiB each: three hidden
# activations and the output. That is the 4096 KiB `tracemalloc` finds (the
# loss, one float64, adds 8 bytes), and after the backward pass they are gone.
#
# Before this step each $\tanh$ also kept its input Variable, the
# pre-activation $xW^\top + b$: three more MiB, and nothing freed any of
# them while the loss was alive.
#
# ## Check against PyTorch
#
# The collapsed cell compares, for every differentiable operation of the
# package and each pattern of inputs needing a gradient, the shapes saved
# here with those PyTorch's pack hook (`saved_tensors_hooks`, step 38) sees;
# backward twice and `retain_graph` against `torch`; and the MLP's saved
# bytes against the same network in PyTorch.

# %% tags=["hide-input"]
import torch  # noqa: E402

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
    return sorted((s.data if s.variable is None else s.variable.data).shape for _, s in utils.saved_tensors(y))


def shapes_saved_by_torch(fn, operands, requires):
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        fn(*[torch.tensor(a, requires_grad=r) for a, r in zip(operands, requires)])
    return sorted(shapes)


cases = 0
for name, (ours, theirs, operands) in OPERATIONS.items():
    all_inputs, first_only = (True,) * len(operands), (True,) + (False,) * (len(operands) - 1)
    for requires in [all_inputs] if len(operands) == 1 else [first_only, all_inputs]:
        got, expected = shapes_saved_by_ours(ours, operands, requires), shapes_saved_by_torch(theirs, operands, requires)
        if name == "linear":  # PyTorch saves W.t(), a view of W: the same bytes, the shape swapped
            expected = sorted((s[1], s[0]) if s == (3, 4) else s for s in expected)
        assert got == expected, (name, requires, got, expected)
        cases += 1


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

model, batch, target = mlp_and_data()
twin = torch.nn.Sequential(*[m for layer in model.layers
                             for m in (torch.nn.Linear(512, 512).double(), torch.nn.Tanh())][:-1])
with torch.no_grad():
    for p, pt in zip(model.params(), twin.parameters(), strict=True):
        pt.copy_(torch.tensor(p.data))
torch_saved = []
with torch.autograd.graph.saved_tensors_hooks(lambda t: torch_saved.append(t.nelement() * t.element_size()) or t,
                                              lambda t: t):
    loss_t = torch.nn.functional.mse_loss(twin(torch.tensor(batch.data)), torch.tensor(target.data))
loss = tinypytorch.mean_squared_error(model(batch), target)
our_saved = [s.nbytes() for _, s in utils.saved_tensors(loss)]
np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-12)
assert our_saved and sum(our_saved) == sum(torch_saved) and len(our_saved) == len(torch_saved)

# %%
print(f"{len(OPERATIONS)} operations, {cases} cases: the shapes saved equal those torch's pack hook sees")
print("backward twice raises in both; with retain_graph the gradients double in both")
print(f"the MLP saves {len(our_saved)} tensors, {sum(our_saved):,} bytes, in both frameworks")
print("PyTorch check passed: saved tensors, backward twice, retain_graph "
      "and the MLP's saved bytes as torch's")

# %% [markdown]
# ## Recap
#
# - A function keeps **edges** (where each input's gradient goes), weak
#   references to its outputs, and what `forward` passed to
#   `save_for_backward`; it keeps no input.
# - Each operation saves what its derivative needs, and only for inputs
#   that need a gradient (`needs_input_grad`): the same tensors PyTorch saves.
# - A saved input is kept as its Variable; a saved output as its array only,
#   rebuilt on `unpack`, so no reference cycle forms.
# - The backward pass frees each function's saved tensors once it has run;
#   a second pass raises, unless the first was asked to `retain_graph`.
# - What a forward pass holds is exactly the arrays it created and saved,
#   and after the backward pass nothing of it remains.
#
# ## Exercises
#
# **1.** $\frac{d}{dx}\frac{1}{x} = -\frac{1}{x^2} = -y^2$: the derivative
# of the reciprocal needs only its output. Write `Reciprocal(Function)`
# whose forward saves $y$ and not $x$, and check what it saved and its
# gradient at $x = (0.5, 1, 2)$.

# %% tags=["hide-cell"]
class Reciprocal(Function):
    def forward(self, x):
        y = 1.0 / x
        self.save_for_backward(y)  # the output: backward needs nothing else
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return -gy * y * y


x = Variable(np.array([0.5, 1.0, 2.0]))
y = Reciprocal()(x)
(record,) = y.creator.saved
print("saved:", "its output" if record.variable is None else "an input", f"{record.nbytes()} bytes")
y.sum().backward()
print("x.grad =", x.grad)
print("-1/x^2 =", Variable(-1 / x.data**2))

# %% [markdown]
# **2.** Write `held_bytes(y)`: the bytes of the arrays the graph behind `y`
# holds in saved tensors, each array counted once however many records
# refer to it. Walk the functions through their `edges` and read each
# `SavedTensor` (`.variable`, or `.data` for a saved output).

# %% tags=["hide-cell"]
def held_bytes(y):
    arrays, seen, todo = {}, set(), [y.creator]
    while todo:
        f = todo.pop()
        if not isinstance(f, Function) or f in seen:
            continue  # a leaf, a constant (None), or a function already visited
        seen.add(f)
        for s in f.saved:
            if isinstance(s, SavedTensor) and not s.freed:
                data = s.data if s.variable is None else s.variable.data
                arrays[id(data)] = data.nbytes
        todo.extend(node for node, _ in f.edges)
    return sum(arrays.values())


x = Variable(np.array([0.5, 1.0, 2.0]))
y = (x * tinypytorch.exp(x)).sum()
print("held by (x * exp(x)).sum():", held_bytes(y), "bytes")
y.backward()
print("after backward:", held_bytes(y), "bytes")

# %% [markdown]
# **3.** Predict, then measure with `held_bytes`, which formula of each pair
# holds fewer bytes for a vector of 1000 float64:
# $\sigma(x)$ or $1/(1 + e^{-x})$, and $\tanh x$ or $2\sigma(2x) - 1$.

# %% tags=["hide-cell"]
FORMULAS = {
    "sigmoid(x)": tinypytorch.sigmoid,
    "1 / (1 + exp(-x))": lambda x: 1.0 / (1.0 + tinypytorch.exp(-x)),
    "tanh(x)": tinypytorch.tanh,
    "2 * sigmoid(2 * x) - 1": lambda x: 2.0 * tinypytorch.sigmoid(2.0 * x) - 1.0,
}
x = Variable(np.linspace(-3.0, 3.0, 1000))
# sigma: its output. 1 / (1 + e^-x): exp's output and the reciprocal. 2 sigma(2x) - 1: sigmoid's
# output only, since the numbers 2 and 1 are kept as numbers.
for name, formula in FORMULAS.items():
    print(f"{name:24} {held_bytes(formula(x)):6,} bytes")
