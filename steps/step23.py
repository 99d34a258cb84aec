# %% [markdown]
# # Step 23: The `tinypytorch` package
#
# Every step so far has been self-contained: step 22's script carries the whole
# framework, from `Variable` to `Pow`, before its first example. That was the
# point: you could read each step alone and diff it against the one before. It
# stops working once steps start *using* the framework rather than rewriting
# it. From this step on the code has one home, the Python package
# `tinypytorch`; steps, notebooks and tests `import` it, and a fix made there
# reaches all of them.
#
# This step moves the code of step 22 into the package, looks at what changed
# on the way, and runs step 22's checks against the package.
#
# ## Modules, packages and the layout
#
# A *module* is one `.py` file. A *package* is a directory of modules with an
# `__init__.py`, which runs on `import` and decides what the package name
# exposes. A *library* is what one installs: here, a single package.
#
# ```
# tinypytorch/
#     __init__.py    what `import tinypytorch` exposes
#     grad_mode.py   Config, using_config, no_grad: the switches, on the ground floor
#     core.py        Variable, Function, Add ... Pow, the operators
#     functions.py   functions that are not operators: square, exp
#     cuda.py        the array backend: NumPy, or CuPy on a GPU
#     utils/         a package; its numerical.py holds numerical_diff, gradient_check
# pyproject.toml     the package's name, version and dependencies, read by pip
# ```
#
# `core.py` holds what every computation needs and nothing more. New functions
# (stage 3 adds `sin`, `tanh`, `reshape`, `sum`, `matmul`) go to
# `functions.py`, each a `Function` subclass plus a lower-case wrapper, so
# adding one never touches the core. Imports run one way: `functions` and
# `utils` import from `core`, and `core` imports only the ground floor below
# it (`cuda`, `grad_mode`).
#
# ## Installing it: `pip install -e .`
#
# `make` runs `pip install -e .` in the tutorial's virtual environment. The
# `-e` (*editable*) install puts a pointer to this directory into
# `site-packages` instead of a copy, so an edit to `tinypytorch/core.py` is seen
# by the next `import` (in Jupyter: after restarting the kernel).
#
# DeZero instead starts each step by appending the repository root, computed
# from the script's `__file__`, to `sys.path`. A notebook has no `__file__`, so
# there the import works only if Jupyter was started in the right directory
# (ours run in `notebooks/`). An installed package is found wherever Python
# runs: scripts, notebooks and tests alike.
#
# `import tinypytorch` runs `__init__.py`, which imports the modules and
# re-exports the names a user needs. What this step prints is the package as
# it stands now, not as this step left it: the package keeps growing, and each
# later addition carries a comment naming its step (27, 30, 33, ...). Skip
# those lines for now; each is explained in its step.

# %%
import pathlib

import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.utils.listing import show_code

package = pathlib.Path(tinypytorch.__file__).parent
print("tinypytorch", tinypytorch.__version__)
print("modules:", ", ".join(sorted(path.name for path in package.glob("*.py"))))
print()
show_code(tinypytorch)

# %% [markdown]
# Code written for step 22 runs unchanged: only the import is new. Here is
# $y = x^3 - 2x/(x + 1)$ at $x = 2$, whose derivative is
# $3x^2 - 2/(x+1)^2 = 12 - 2/9 = 11.7778$:

# %%
x = Variable(np.array(2.0), name="x")
y = x**3 - 2 * x / (x + 1)
y.backward()
print("y      =", y)
print("x      =", x)
print("x.grad =", f"{x.grad:.4f}")

# %% [markdown]
# ## Inside `core.py`
#
# The package shows its own code below with `show_code`
# (`tinypytorch.utils.listing`), which reads it with `inspect.getsource` and
# highlights it: what you read is what runs. Each piece carries a comment naming the step that
# introduced it, for when you want the longer explanation.
#
# One of the later additions shows in the outputs: from step 27 on, a
# gradient is itself a `Variable`. Read `x.grad` as the array it holds;
# printing it and `f"{x.grad:.4f}"` work as they would for an array.
#
# ### The operators
#
# As in step 22, the operators are ordinary methods of `Variable` that call the
# module's functions: `x + 1` runs `x.__add__(1)`, which calls `add(x, 1)`. The
# functions are defined further down `core.py` than the class, which is fine:
# Python looks the name `add` up when the method runs, and by then the whole
# module has been loaded. (DeZero instead attaches the operators from outside,
# with a `setup_variable()` that its `__init__.py` must remember to call.) A
# reflected method keeps the operands in their written order (step 21), and
# the non-commuting ones swap them back in `rsub` and `rdiv` (step 22):

# %%
for code in (Variable.__radd__, Variable.__rsub__, tinypytorch.rsub):
    show_code(code)

# %% [markdown]
# ### `Function.__call__`
#
# Every operation goes through this method: turn the inputs into Variables,
# run `forward` on their arrays, wrap the results, and record the graph only
# when `Config.enable_backprop` is on and some input requires a gradient. It
# is short enough to read whole; three lines belong to later steps and are
# each one call (views and in-place changes, step 37; one device per
# operation, step 48), two marked `speed` serve a backward formula that runs
# on bare arrays (the book's chapter "How tinypytorch is made fast"), and
# what the graph keeps is one method of its own, `record`, which step 35
# reads.

# %%
show_code(tinypytorch.Function.__call__)
show_code(tinypytorch.Function.coerce)

# %% [markdown]
# Two things differ from step 22's version. The conversion of numbers and
# arrays into Variables, `coerce`, now runs only when an input needs it: most
# calls get Variables only, and every operation, forward and backward, pays
# for this method, so it avoids work it does not need. Inside it the line
# `xp = cuda.get_array_module(*inputs)` is new; it matters on the GPU and is
# explained below. And the check that two operands have the same shape has
# moved out, into the four binary operations (see the end of this step).
#
# What `record` keeps is, for now, the generation of step 16, the creator
# and the weak references to the outputs of step 17; until step 35, read
# `edges` as "the inputs":

# %%
show_code(tinypytorch.Function.record)

# %% [markdown]
# ### The backward loop: a heap instead of a sort
#
# Step 16 showed why the backward pass must run functions in order of
# decreasing generation: a variable must receive every contribution to its
# gradient before its creator passes the gradient on. Step 16 kept the pending
# functions in a list and sorted it after each addition. Sorting a list of $k$
# items that is already sorted but for its last one still costs about $k$
# comparisons, so $n$ additions cost on the order of $n^2$.
#
# A *binary heap* (Python's `heapq`) keeps a list arranged so that its
# smallest item is always first; pushing and popping cost $O(\log n)$. The
# package's `Variable.backward` was made with a heap, keyed by
# `(-generation, -counter, function)`: the highest generation comes out
# first, and among equal generations the function added last, exactly the
# order in which step 16's `list.pop()` took them. The counter also makes
# every key distinct, so `heapq` never has to compare two `Function`s, which
# would raise a `TypeError`.
#
# Step 33 replaces that loop with the one PyTorch's engine uses, which counts
# how many gradients each function waits for instead of ordering by
# generation. So the two loops are written out here, against the package's
# classes, rather than printed from the package. They share the work done on
# each function, `run`, and differ only in how they keep the pending ones.
# (As the package does since step 27, they seed a `Variable` and do the
# gradient arithmetic under `no_grad`.)
#
# One detail comes from a later step. A function of the package does not keep
# its input Variables: for each input it keeps an *edge*, the place the
# input's gradient goes, `(function that made the input, which of its
# outputs)`, or `(the leaf itself, 0)` for a leaf. Step 35 explains why. So
# the loops keep each gradient under its edge, in a dictionary, rather than
# in the variables' `.grad`, and give the leaves their gradients at the end.

# %%
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


# %% [markdown]
# The difference shows on a *wide* graph, where many functions wait at once.
# Below, $s = \sum_{k=1}^{n} (c_k x)^2$ is built as a chain of additions; the
# backward pass walks down the chain, and each addition leaves one `Square`
# waiting until the chain is done (its generation is lower than every
# addition's), so the pending list grows to $n$ functions. Both loops give
# the gradient that the package's `backward` gives:

# %%
def wide_graph(n):
    x = Variable(np.array(0.5))
    s = x * 0.0
    for k in range(1, n + 1):
        s = s + tinypytorch.square(x * float(k % 5))
    return x, s


grads = {}
for name, backward in [("heap", backward_with_heap), ("sort", backward_with_sort), ("package", Variable.backward)]:
    x, s = wide_graph(1000)
    backward(s)
    grads[name] = x.grad
# ds/dx = sum 2 c_k^2 x = x * 2 * 200 * (0 + 1 + 4 + 9 + 16) = 6000 at x = 0.5
print("n = 1000:", ", ".join(f"{name} x.grad = {grad:.4f}" for name, grad in grads.items()))

# %% [markdown]
# and the time each takes as $n$ doubles (the numbers depend on the machine;
# the ratios are what matter):

# %% tags=["nbval-ignore-output"]
import time


def seconds(backward, n):
    _, s = wide_graph(n)
    start = time.perf_counter()
    backward(s)
    return time.perf_counter() - start


print(f"{'n':>5}  {'heap (s)':>9}  {'sort (s)':>9}")
for n in (1000, 2000, 4000):
    print(f"{n:>5}  {seconds(backward_with_heap, n):9.3f}  {seconds(backward_with_sort, n):9.3f}")

# %% [markdown]
# Doubling $n$ roughly doubles the heap's time and quadruples the sort's. On
# the machine that built this notebook the sort was already 8 to 12 times
# slower at $n = 4000$, and 16 to 24 times at $n = 8000$: the gap keeps
# growing with $n$.
#
# ## Array backends: `xp`
#
# A GPU runs array arithmetic much faster than a CPU, and CuPy is NumPy's
# API on NVIDIA GPUs: `cupy.exp`, `cupy.ones_like` and so on behave like their
# NumPy namesakes but work on arrays in GPU memory. NumPy functions do not
# accept CuPy arrays, though, so package code never calls `np.exp(x)` on data
# that may live on the GPU. It asks `cuda.get_array_module` which module owns
# the data, calls it `xp`, and writes `xp.exp(x)`:

# %%
show_code(tinypytorch.cuda.get_array_module)
show_code(tinypytorch.functions.Exp)

# %% [markdown]
# CuPy is optional. `import tinypytorch` works without it, and then
# `get_array_module` always answers NumPy. `tinypytorch.cuda.GPU` is true only
# when CuPy is installed *and* `cupy.is_available()` finds a usable device:
# importing CuPy succeeds on machines without a GPU. The same reason explains
# the line in `Function.__call__`: in `x + 1.0` with `x` on the GPU, the
# number must become a CuPy array, since CuPy refuses to mix its arrays with
# NumPy's. Operators such as `*` and `**` need nothing: they dispatch to the
# right library by themselves. Step 48 runs the framework on a GPU.

# %%
x = Variable(np.array([1.0, 2.0]))
print("array module of x:", tinypytorch.cuda.get_array_module(x).__name__)
print("exp(x) =", tinypytorch.exp(x))

# %% [markdown]
# ## Configuration
#
# `Config` holds the switches of the whole framework; for now there is one,
# `enable_backprop` (step 18). `using_config` changes a switch for the length
# of a `with` block and restores it even when the block raises. `no_grad()` is
# `using_config("enable_backprop", False)`: operations run, but record no
# creator, so nothing of the graph is kept. They live in `grad_mode.py`, a
# module that imports nothing of the package, so that every other module can
# ask it; the modes of later steps (saved-tensor hooks, anomaly mode,
# recomputation) join them there. As in PyTorch, each thread has its own grad
# mode: `no_grad` in one thread does not stop another from recording.

# %%
x = Variable(np.array(3.0))
with tinypytorch.no_grad():
    y = x * 2
print("inside no_grad:  y =", y, " creator:", y.creator)
print("after no_grad:  ", "creator:", type((x * 2).creator).__name__)

# %% [markdown]
# ## Failing early on bad input
#
# A framework that accepts anything fails later, inside NumPy, with a message
# about the wrong thing. The package keeps the checks of steps 09–22, which
# fail at the door and name the operation: a `Variable` holds only arrays, an
# operand must be a Variable, an array or a number, two arrays must have the
# same shape unless one is 0-d (step 30 widens this to NumPy's broadcasting,
# which is why the message below says "broadcast"), an exponent must be a
# constant number, and `using_config` refuses an option that does not exist
# (a typo such as `enable_backprob` would otherwise create a new attribute
# and silently leave backprop on).

# %%
def typo():
    with tinypytorch.using_config("enable_backprob", False):
        pass


a = Variable(np.array([1.0, 2.0]))
b = Variable(np.array([1.0, 2.0, 3.0]))
attempts = {
    "Variable(1.0)": lambda: Variable(1.0),
    'a + "abc"': lambda: a + "abc",
    "a * b": lambda: a * b,
    "a ** a": lambda: a**a,
    'with using_config("enable_backprob", False)': typo,
}
for code, attempt in attempts.items():
    try:
        attempt()
    except (TypeError, ValueError) as error:
        print(f"{code:43} {type(error).__name__}: {error}")

# %% [markdown]
# ## The seed gradient is released too
#
# With `retain_grad=False`, only the leaves keep a gradient after `backward`,
# and the variable `backward` was called on is no exception: its seed is
# released too, as in DeZero, and as in PyTorch for any non-leaf tensor.
# Step 18 gave the reason: `backward` adds into `.grad`, so a variable that is
# not a leaf must enter every backward pass with `.grad` equal to `None`.
# Its example, written with operators: take
# $y = 2x$ at $x = 1$ and call `y.backward()`, which gives
# $\partial y/\partial x = 2$; then use $y$ again in $z = 3y$ and call
# `z.backward()`, which adds $\partial z/\partial x = 6$. `x.grad` must be
# $2 + 6 = 8$, as in PyTorch; a seed left on `y` would have been added to in
# the second pass, giving 10.

# %%
import torch

x = Variable(np.array(1.0))
y = x * 2
y.backward()
z = y * 3
z.backward()
print(f"package: y.grad = {y.grad}, x.grad = {x.grad:.1f}")

xt = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
yt = xt * 2
yt.backward(retain_graph=True)
(yt * 3).backward()
print(f"torch:   x.grad = {xt.grad.item():.1f}")

# %% [markdown]
# ## What differs from step 22
#
# - The backward pass keeps the pending functions in a heap keyed by
#   generation instead of re-sorting a list: the same order, at $O(\log n)$
#   per function instead of $O(n)$.
# - Array code goes through `xp = get_array_module(x)`, and numbers join the
#   device of the other inputs, so the same package runs on NumPy and CuPy.
# - The shape check sits in the four binary operations, where step 30 puts
#   broadcasting, instead of in `Function.__call__`, where it would also bind
#   functions such as `matmul` whose inputs legitimately differ in shape.
# - `utils.numerical_diff` perturbs one element at a time, so it gives the
#   gradient of any function of an array, not only of an element-wise one, and
#   `utils.gradient_check` (step 10) no longer writes into the caller's `x.grad`.
#
# Everything else is step 22's code: the same classes, names and error
# messages (one widened: a `Variable` may also hold a CuPy array), and the same
# arithmetic in the same order, so the backward pass as made here
# (`backward_with_heap`) gives step 22's gradients to the last bit; the tests
# check it on random graphs.
#
# Later steps extend the package in place, each addition marked with its step
# number. Step 27 makes gradients Variables, step 30 replaces the equal-shape
# rule with broadcasting, and step 33 replaces the backward loop with
# PyTorch's, which may add a variable's gradient contributions in another
# order, so from then on a gradient can differ from step 22's in its last bits.
#
# Where steps 01–22 taught a DeZero habit that PyTorch does not share, the
# package follows PyTorch, so that a PyTorch program gives the same result:
# `x.size()` is the shape and `x.numel()` the element count (step 19's `size`
# was NumPy's count); `==` and `<` compare element by element instead of
# asking whether two Variables are the same object; `p -= lr * g` changes `p`
# in place instead of making a new Variable; a Variable of integers requires
# no gradient (it would be truncated); `repr` says how a variable was made,
# as PyTorch's does; and `backward()` needs its seed for an output of more
# than one element (step 29 explains why). The book's page *tinypytorch for
# PyTorch users* lists every name.
#
# ## Check against PyTorch
#
# Step 22's check, run against the package: the same expressions, the same
# shapes (two scalars, two arrays, a 0-d variable with an array on either
# side) and the same random numbers, plus the operations of steps 11–21
# (`+`, `*`, `square`, `exp`, numbers on the left). Each expression is written
# once and evaluated twice, with `m` standing for `tinypytorch` or `torch`;
# both have `square` and `exp`, and the operators are shared. Then step 16's
# example, $y = (x^2)^2 + (x^2)^2$ with $\partial y/\partial x = 64$ at $x = 2$,
# and step 18's, where only the leaves keep a gradient.

# %%
rng = np.random.default_rng(0)
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

for shapes in [((), ()), ((2, 3), (2, 3)), ((), (2, 3)), ((2, 3), ())]:
    v0, v1 = (rng.uniform(0.5, 2.0, shape) for shape in shapes)
    for fn in binary.values():
        x0, x1 = Variable(v0), Variable(v1)
        y = fn(tinypytorch, x0, x1)
        y.backward(np.ones_like(y.data))
        t0, t1 = torch.tensor(v0, requires_grad=True), torch.tensor(v1, requires_grad=True)
        yt = fn(torch, t0, t1)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-12)
        for ours, theirs in [(x0, t0), (x1, t1)]:
            assert ours.grad.shape == tuple(theirs.grad.shape)
            np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)
    print(f"shapes {shapes[0]!s:6} and {shapes[1]!s:6}: values and grads == torch for {', '.join(binary)}")

for shape in [(), (2, 3)]:
    v = rng.uniform(0.5, 2.0, shape)
    for fn in unary.values():
        x = Variable(v)
        y = fn(tinypytorch, x)
        y.backward(np.ones_like(y.data))
        xt = torch.tensor(v, requires_grad=True)
        yt = fn(torch, xt)
        yt.backward(torch.ones_like(yt))
        np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
    print(f"shape  {shape!s:6}: grads == torch for {', '.join(unary)}")

x, xt = Variable(np.array(2.0)), torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
a = tinypytorch.square(x)
(tinypytorch.square(a) + tinypytorch.square(a)).backward()
at = xt**2
(at**2 + at**2).backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print(f"step 16: x.grad = {x.grad:.1f}, torch {xt.grad.item():.1f}")

x0, x1 = Variable(np.array(1.0)), Variable(np.array(1.0))
t = x0 + x1
y = x0 + t
y.backward()
x0t, x1t = (torch.tensor(1.0, dtype=torch.float64, requires_grad=True) for _ in range(2))
(x0t + (x0t + x1t)).backward()
assert y.grad is None and t.grad is None  # torch keeps no .grad on non-leaf tensors either
np.testing.assert_array_equal([x0.grad, x1.grad], [x0t.grad.numpy(), x1t.grad.numpy()])
print(f"step 18: y.grad = {y.grad}, t.grad = {t.grad}, x0.grad = {x0.grad:.1f}, x1.grad = {x1.grad:.1f}, as torch")
print("PyTorch check passed: the package's values and grads of every stage-2 operation equal torch (step 22's checks)")
