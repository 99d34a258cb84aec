# %% [markdown]
# # Step 23: The `tinypytorch` package
#
# Every step so far has been self-contained: step 22's script carries the
# whole framework, from `Variable` to `Pow`, before its first example. That
# let you read each step alone and diff it against the one before, and it
# stops working once steps start *using* the framework rather than rewriting
# it. From this step on the code has one home, the Python package
# `tinypytorch`: steps, notebooks and tests `import` it, and a fix made there
# reaches all of them. This step moves step 22's code into the package and
# runs step 22's checks against it.
#
# ## The layout
#
# A *module* is one `.py` file; a *package* is a directory of modules with an
# `__init__.py`, which runs on `import` and decides what the package's name
# exposes. At this step the package is five modules and a subpackage:
#
# ```
# tinypytorch/
#     __init__.py    what `import tinypytorch` exposes: Variable, no_grad, exp, ...
#     grad_mode.py   Config, using_config, no_grad: the switches
#     cuda.py        the array backend: NumPy, or CuPy on a GPU
#     core.py        Variable, Function, Add ... Pow, the operators
#     functions.py   functions that are not operators: square, exp
#     utils/         numerical_diff, gradient_check (step 10)
# pyproject.toml     the package's name, version and dependencies, read by pip
# ```
#
# The modules stand in floors, and a module imports only from the floors
# below it:

# %% tags=["hide-input"]
import matplotlib.pyplot as plt

boxes = {  # name: (x, y, label, colour), in axes fractions
    "grad_mode": (0.1, 0.72, "grad_mode\nConfig, no_grad", "lightblue"),
    "cuda": (0.1, 0.25, "cuda\nget_array_module", "lightblue"),
    "core": (0.4, 0.48, "core\nVariable, Function,\nAdd ... Pow", "lightgrey"),
    "functions": (0.67, 0.72, "functions\nsquare, exp", "white"),
    "utils": (0.67, 0.25, "utils\nnumerical_diff", "white"),
    "init": (0.9, 0.48, "__init__\nimport tinypytorch", "#caff70"),
}
imports = [("grad_mode", "core"), ("cuda", "core"), ("core", "functions"), ("core", "utils"),
           ("functions", "init"), ("utils", "init")]
fig, ax = plt.subplots(figsize=(8, 3))
artists = {name: ax.text(x, y, label, ha="center", va="center", fontsize=9, transform=ax.transAxes,
                         bbox=dict(boxstyle="round,pad=0.4", facecolor=colour, edgecolor="0.3"))
           for name, (x, y, label, colour) in boxes.items()}
for low, high in imports:
    ax.annotate("", xy=(0, 0.5), xycoords=artists[high].get_bbox_patch(), xytext=(1, 0.5),  # box to box
                textcoords=artists[low].get_bbox_patch(),
                arrowprops=dict(arrowstyle="-|>", color="0.35", shrinkA=3, shrinkB=3))
for x, floor in [(0.1, "ground floor"), (0.4, "the core"), (0.67, "above the core"), (0.9, "the face")]:
    ax.text(x, 0.02, floor, ha="center", fontsize=9, color="0.4", style="italic", transform=ax.transAxes)
ax.axis("off")
ax.set_title("The package at step 23: an arrow A -> B means B imports A; no arrow runs back", fontsize=11)
plt.show()

# %% [markdown]
# `core.py` holds what every computation needs and nothing more. New
# functions (stage 3 adds `sin`, `tanh`, `reshape`, `sum`, `matmul`) go to
# `functions.py`, each a `Function` subclass and a lower-case wrapper, so
# adding one never touches the core.
#
# ## Installing it: `pip install -e .`
#
# `make` runs `pip install -e .` in the tutorial's virtual environment. The
# *editable* install puts a pointer to this directory into `site-packages`
# instead of a copy, so an edit to `tinypytorch/core.py` is seen by the next
# `import` (in Jupyter: after restarting the kernel). DeZero instead appends
# the repository's root, computed from the script's `__file__`, to
# `sys.path`; a notebook has no `__file__`, so there the import works only if
# Jupyter was started in the right directory. An installed package is found
# wherever Python runs: scripts, notebooks and tests alike.
#
# Code written for step 22 runs unchanged; only the import is new. Here is
# $y = x^3 - 2x/(x + 1)$ at $x = 2$, whose derivative is
# $3x^2 - 2/(x+1)^2 = 12 - 2/9 = 11.7778$:

# %%
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.utils.listing import show_code

x = Variable(np.array(2.0), name="x")
y = x**3 - 2 * x / (x + 1)
y.backward()
print("y =", f"{y.data:.4f}", "  x.grad =", f"{x.grad:.4f}")

# %% [markdown]
# (The package keeps growing after this step: from step 27 on a gradient is
# itself a `Variable`. Read `x.grad` as the array it holds; formatting it
# works as for an array.)
#
# ## Inside `core.py`
#
# `show_code` (`tinypytorch.utils.listing`) shows the package's own code,
# highlighted, as it stood at a given step: what you read is what runs, less
# the statements later steps added, each of which carries a comment naming
# its step. Every operation goes through `Function.__call__`, which hands
# its inputs to `run_plain` (step 68 puts the modes of later steps between
# the two):

# %%
show_code(tinypytorch.Function.run_plain, tinypytorch.Function.coerce, step=23)

# %% [markdown]
# It does what step 22's did, in a different shape:
#
# - The conversion of numbers and arrays into Variables, `coerce`, runs only
#   when an input needs it. Every operation, forward and backward, pays for
#   `run_plain`, and most get Variables only. Inside `coerce`,
#   `cuda.get_array_module` is new; it matters on the GPU (below).
# - The check that two operands have the same shape moved into the four
#   binary operations, where step 30 puts broadcasting; in `run_plain` it
#   would also bind functions such as `matmul`, whose inputs differ in shape.
# - The graph is recorded as in step 22, before the `return`: under
#   `Config.enable_backprop` the function takes its generation (step 16),
#   each output its creator, and the function keeps its inputs and weak
#   references to its outputs (step 17). The listing leaves that block out
#   because the package no longer holds it: step 33 records only where a
#   gradient can reach an input (`requires_grad`), and step 35 moves the
#   recording into one method, `record`, which keeps edges instead of inputs;
#   step 35's page shows both. The outputs' `requires_grad=False` is step
#   33's too: read `Variable(as_array(y))`.
#
# ## The backward loop: a heap instead of a sort
#
# Step 16 ran the pending functions by decreasing generation, keeping them in
# a list sorted again after each addition. Sorting a list of $k$ items costs
# about $k$ steps even when only the last one is out of place, so $n$
# functions cost on the order of $n^2$. A *binary heap* (Python's `heapq`)
# keeps its smallest item first at $O(\log n)$ per push and pop. The
# package's loop was made with one, keyed by `(-generation, -counter,
# function)`: highest generation first and, among equals, the function added
# last, exactly the order in which step 16's `list.pop()` took them; the
# counter keeps `heapq` from ever comparing two `Function`s.
#
# Step 33 replaces that loop with PyTorch's, so the two loops are written out
# against the package in the collapsed cell below (its gradients are kept
# under *edges*: an edge is where an input's gradient goes, the function that
# made the input and which of its outputs it is, a detail step 35 explains).
# On a wide graph, where $n$ functions wait at once, both give the gradient
# of the package's own `backward`. Speed is measured in `bench/`, not on
# these pages, since timings depend on the machine:
# `bench/results/autograd.md` gives the package's backward time against graph
# size, for chains and wide graphs, beside DeZero's, which keeps step 16's
# sorted list and turns quadratic on the wide graph.

# %% tags=["hide-cell"]
import heapq
import itertools

from tinypytorch import Function


def run(f, grads, add_func):
    """One turn of either loop: f's backward, gradients sent along its edges, the functions they reach queued."""
    with tinypytorch.no_grad():  # step 27: computing the gradients records no graph
        gxs = f.backward(*[grads.pop((f, i), None) for i in range(len(f.outputs))])
        gxs = gxs if isinstance(gxs, tuple) else (gxs,)
        for edge, gx in zip(f.edges, gxs):
            if edge[0] is None:  # a constant such as the 2 in 2 * x: no gradient goes there
                continue
            grads[edge] = gx if edge not in grads else grads[edge] + gx  # step 14
            if isinstance(edge[0], Function):
                add_func(edge[0])


def give_the_leaves_their_grads(grads):
    for (leaf, _), grad in grads.items():  # all that is left: every function took its own
        leaf.grad = grad


def backward_with_heap(y):
    """The package's backward pass as made in this step: pending functions in a heap."""
    grads = {(y.creator, 0): Variable(np.ones_like(y.data))}  # step 27: gradients are Variables
    pending, seen, counter = [], set(), itertools.count()

    def add_func(f):
        if f not in seen:
            seen.add(f)
            heapq.heappush(pending, (-f.generation, -next(counter), f))

    add_func(y.creator)
    while pending:
        run(heapq.heappop(pending)[-1], grads, add_func)
    give_the_leaves_their_grads(grads)


def backward_with_sort(y):
    """Step 16's backward pass: a list re-sorted by generation after every addition."""
    grads = {(y.creator, 0): Variable(np.ones_like(y.data))}
    funcs, seen = [], set()

    def add_func(f):
        if f not in seen:
            funcs.append(f)
            seen.add(f)
            funcs.sort(key=lambda func: func.generation)

    add_func(y.creator)
    while funcs:
        run(funcs.pop(), grads, add_func)
    give_the_leaves_their_grads(grads)


def wide_graph(n):
    x = Variable(np.array(0.5))
    s = x * 0.0
    for k in range(1, n + 1):
        s = s + tinypytorch.square(x * float(k % 5))
    return x, s


# %%
grads = {}
loops = {"heap": backward_with_heap, "sort": backward_with_sort, "package": Variable.backward}
for name, backward in loops.items():
    x, s = wide_graph(1000)  # s = sum of 1000 squares: 1000 functions wait at once
    backward(s)
    grads[name] = x.grad
print("n = 1000:", ", ".join(f"{name} x.grad = {grad:.4f}" for name, grad in grads.items()))

# %% [markdown]
# ## Array backends: `xp`
#
# CuPy is NumPy's API on NVIDIA GPUs, but NumPy functions do not accept CuPy
# arrays. So package code never calls `np.exp(x)` on data that may live on
# the GPU: it asks `get_array_module` which module owns the data, calls it
# `xp`, and writes `xp.exp(x)`. CuPy is optional; without it the answer is
# always NumPy. The same reason is behind `coerce`'s new line: in `x + 1.0`
# with `x` on the GPU, the number must become a CuPy array. Step 48 runs the
# framework on a GPU.

# %%
show_code(tinypytorch.cuda.get_array_module, step=23)
print("array module of x:", tinypytorch.cuda.get_array_module(x).__name__)

# %% [markdown]
# ## What else differs from step 22
#
# - `Config`, `using_config` and `no_grad` live in `grad_mode.py`, which
#   imports nothing of the package, so every module can ask it; as in
#   PyTorch, each thread has its own grad mode.
# - The checks of steps 09-22 fail at the door and name the operation (the
#   collapsed cell below runs each one).
# - `utils.numerical_diff` perturbs one element at a time, so it gives the
#   gradient of any function of an array, not only of an element-wise one.
# - Where steps 01-22 taught a DeZero habit PyTorch does not share, the
#   package follows PyTorch: `x.size()` is the shape and `x.numel()` the count
#   (step 19's `size` was NumPy's count); `==` compares element by element;
#   `repr` says how a variable was made. The book's page *tinypytorch for
#   PyTorch users* lists every name.

# %% tags=["hide-cell"]
def typo():
    with tinypytorch.using_config("enable_backprob", False):
        pass


a = Variable(np.array([1.0, 2.0]))
b = Variable(np.array([1.0, 2.0, 3.0]))
attempts = {
    "Variable(1.0)": lambda: Variable(1.0),
    'a + "abc"': lambda: a + "abc",
    "a * b": lambda: a * b,
    'a ** "2"': lambda: a ** "2",
    'with using_config("enable_backprob", False)': typo,
}
for code, attempt in attempts.items():
    try:
        attempt()
    except (TypeError, ValueError) as error:
        print(f"{code:43} {type(error).__name__}: {error}")

# %% [markdown]
# ## Check against PyTorch
#
# Step 22's check, run against the package: the same expressions and shapes
# (two scalars, two arrays, a 0-d variable with an array on either side),
# plus the operations of steps 11-21. Each expression is written once with
# `m` standing for `tinypytorch` or `torch` (both have `square` and `exp`) and
# compared in the collapsed cell; then step 16's example,
# $y = (x^2)^2 + (x^2)^2$, whose derivative is $8x^3 = 64$ at $x = 2$.

# %% tags=["hide-input"]
import torch  # noqa: E402

binary = {  # step 22's four, then + and * from steps 12, 20 and 21
    "x0 - x1": lambda m, a, b: a - b,
    "x0 / x1": lambda m, a, b: a / b,
    "x0 * x1 + x0": lambda m, a, b: a * b + a,
    "2 - x0 / x1": lambda m, a, b: 2.0 - a / b,
    "x0 + x1": lambda m, a, b: a + b,
    "3 * x0 + x1 * 0.5": lambda m, a, b: 3 * a + b * 0.5,
}
unary = {  # step 22's four, then the functions of stage 1
    "-x": lambda m, a: -a,
    "x ** 3": lambda m, a: a**3,
    "x ** -1.5": lambda m, a: a**-1.5,
    "1 / x": lambda m, a: 1.0 / a,
    "square(x)": lambda m, a: m.square(a),
    "exp(x)": lambda m, a: m.exp(a),
}


def same_as_torch(fn, *values):
    """fn(tinypytorch, ...) and fn(torch, ...) on float64 `values`: equal values and grads, shapes too."""
    xs, ts = [Variable(v) for v in values], [torch.tensor(v, requires_grad=True) for v in values]
    y, yt = fn(tinypytorch, *xs), fn(torch, *ts)
    y.backward(np.ones_like(y.data))
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
    for x, t in zip(xs, ts):
        assert x.grad.shape == tuple(t.grad.shape)
        np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12)


rng = np.random.default_rng(0)
for shapes in [((), ()), ((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ())]:
    v0, v1 = (rng.uniform(0.5, 2.0, shape) for shape in shapes)
    for fn in binary.values():
        same_as_torch(fn, v0, v1)
    for fn in unary.values():
        same_as_torch(fn, v1)
    print(f"shapes {shapes[0]!s:6} and {shapes[1]!s:6}: values and grads of {len(binary) + len(unary)} "
          "expressions == torch")

# %%
x, xt = Variable(np.array(2.0)), torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
a, at = tinypytorch.square(x), xt**2
(tinypytorch.square(a) + tinypytorch.square(a)).backward()
(at**2 + at**2).backward()
assert x.grad.item() == xt.grad.item() == 64.0
print(f"step 16: x.grad = {x.grad:.1f}, torch {xt.grad.item():.1f}")
print("PyTorch check passed: the package's values and grads of every stage-2 operation equal torch")

# %% [markdown]
# ## Recap
#
# - From this step on the framework lives in one package, `tinypytorch`;
#   steps, notebooks and tests `import` it instead of carrying a copy.
# - Modules stand in floors (`grad_mode` and `cuda`, then `core`, then
#   `functions` and `utils`); imports only run downward.
# - `pip install -e .` makes the package importable from anywhere while its
#   source stays editable.
# - Package code asks `get_array_module` for `xp`, so the same code runs on
#   NumPy and CuPy; the backward loop keeps its pending functions in a heap.
#
# ## Exercises
#
# 1. Check a gradient with the package's own tool: compare the backward of
#    $f(x) = x^3 - 2x/(x + 1)$, on an array of five points, with
#    `tinypytorch.utils.numerical_diff(f, x)` (central differences of
#    `f(x).sum()`).

# %% tags=["hide-cell"]
def f(x):
    return x**3 - 2 * x / (x + 1)


x = Variable(np.array([0.0, 0.5, 1.0, 2.0, 4.0]))
f(x).backward(np.ones(5))
numerical = tinypytorch.utils.numerical_diff(f, x)
print("largest difference:", "< 1e-6" if np.max(np.abs(x.grad.data - numerical)) < 1e-6 else "too large")

# %% [markdown]
# 2. Code outside the package that uses only its public names: write
#    `sigmoid(x)` $= 1 / (1 + e^{-x})$ with `tinypytorch.exp` and the
#    operators, and compare its gradient with `torch.sigmoid`'s.

# %% tags=["hide-cell"]
def sigmoid(x):
    return 1 / (1 + tinypytorch.exp(-x))


x = Variable(np.array([-2.0, 0.0, 3.0]))
sigmoid(x).backward(np.ones(3))
xt = torch.tensor([-2.0, 0.0, 3.0], dtype=torch.float64, requires_grad=True)
torch.sigmoid(xt).sum().backward()
np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12)
print("sigmoid grads:", np.round(x.grad.data, 4), "== torch")
