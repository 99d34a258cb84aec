# %% [markdown]
# # Step 33: A PyTorch-shaped engine
#
# The backward pass has grown one idea at a time since step 07: a loop
# (step 08), accumulation (step 14), generations (step 16), a heap
# (step 23). This step rebuilds it the way PyTorch's autograd engine works.
# The idea: **count, for every function, how many gradients it will receive,
# and run it as soon as all have arrived**; no ordering of the whole graph is
# needed. Around it come PyTorch's words, `requires_grad`, `is_leaf` and
# `grad_fn`, and `tinypytorch.autograd.grad`, which returns gradients instead
# of storing them. Every earlier step runs on this engine unchanged.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, autograd
from tinypytorch.autograd import engine
from tinypytorch.utils import functions_in_graph
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## Where gradients flow: `requires_grad`
#
# In PyTorch every tensor says whether it `requires_grad`. An operation is
# recorded only if one of its inputs requires grad, and then its result
# requires grad too. The package adopts the flag with one difference: a
# `Variable` the user creates requires grad *by default*, so every earlier
# step still works. The numbers inside expressions, the `2` in `2 * x`, are
# constants with `requires_grad=False`, and nothing is recorded under
# `no_grad` (step 18). A *leaf* is a variable no recorded operation made;
# `grad_fn` is PyTorch's name for `creator`:

# %%
x = Variable(np.array(3.0), name="x")
c = Variable(np.array(2.0), name="c", requires_grad=False)
with tinypytorch.no_grad():
    w = x * 5.0
for name, v in [("x", x), ("c", c), ("x * c", x * c), ("c * 4", c * 4.0), ("w (no_grad)", w)]:
    grad_fn = None if v.grad_fn is None else type(v.grad_fn).__name__
    print(f"{name:11} requires_grad={v.requires_grad!s:5}  is_leaf={v.is_leaf!s:5}  grad_fn={grad_fn}")

# %% [markdown]
# `c * 4` is computed from constants only, so no graph is kept for it.
# `detach()` and `requires_grad_(False)` switch the flag, as in PyTorch
# (collapsed below; a backward pass from a variable that requires no grad is
# an error, as in PyTorch, and the tests try it).

# %% tags=["hide-cell"]
x = Variable(np.array(3.0), name="x")
y = x * x
(y * x).backward()
print(f"d(y x)/dx          = {x.grad:.1f}   (3 x^2)")
x.cleargrad()
(y.detach() * x).backward()
print(f"d(y.detach() x)/dx = {x.grad:.1f}    (y, a constant now)")
try:
    y.requires_grad_(False)
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## Counting instead of ordering
#
# A function may pass its gradient on only once it has *all* of it. Step 16
# ensured this by running the pending function of highest generation next.
# PyTorch's engine does not order the graph; it works in two passes:
#
# 1. **Count.** Walk the graph from the output once and count, for every
#    node, how many gradients will flow into it: one per use of its output
#    (two for `x * x`), plus the seed for the output.
# 2. **Run.** Whenever a gradient arrives at a node, add it to the node's
#    buffer and lower its count; at zero the node's gradient is complete and
#    the node goes to a *ready queue*. Take a node from the queue, run its
#    backward, send the results on.
#
# A node is a `Function`, or, for a leaf, the leaf itself (PyTorch gives each
# leaf a node, `AccumulateGrad`, that adds the complete gradient into
# `.grad`). The walk follows each function's `edges`: for each input, the
# node its gradient goes to, or nothing for a constant. (Until step 35, read
# the edges as the inputs' creators.)

# %%
show_code(engine.count_dependencies, step=33)

# %% [markdown]
# The drawing shows the counts for a graph with branches,
# $a = w \sin x$, $b = e^{x - w}$, $y = ab + a$. `a`'s maker, the `Mul` on
# the left, waits for two gradients (from `a * b` and from `+`), and so does
# each leaf. Under each node: its count before the pass and, for a
# function, the order in which the engine ran it.

# %% tags=["hide-input"]
def record_backward_calls(y, names=True):
    """From now on, every Function behind y appends its name (or, names=False, itself) to the returned list
    when its backward runs."""
    calls = []
    for f in functions_in_graph(y):
        def recording(*gys, f=f, original=f.backward):
            calls.append(type(f).__name__ if names else f)
            return original(*gys)
        f.backward = recording  # an instance attribute hides the method, for this object only
    return calls


def branches_example(m, x, w):
    a = m.sin(x) * w
    b = m.exp(x - w)
    return a * b + a


def draw_counts(y, names, title):
    """The graph behind y drawn from y's node to the leaves, each node with its count and run order."""
    counts = engine.count_dependencies([y])
    calls = record_backward_calls(y, names=False)
    y.backward(retain_graph=True)
    order = {f: i for i, f in enumerate(calls, 1)}
    label = {node: names.get(node, type(node).__name__) for node in counts}
    nodes = {node: ("leaf" if isinstance(node, Variable) else "function", label[node]) for node in counts}
    edges = [(f, node) for f in counts if not isinstance(f, Variable) for node, _ in f.edges if node is not None]
    notes = {node: f"count {n}" + (f", runs {order[node]}" if node in order else "") for node, n in counts.items()}
    fig, ax = plt.subplots(figsize=(10, 3.2))
    draw_dag(nodes, edges, ax=ax, notes=notes, title=title)
    plt.show()


x, w = Variable(np.array(0.5), name="x"), Variable(np.array(1.5), name="w")
y = branches_example(tinypytorch, x, w)
add = y.creator
mul_ab, mul_a = add.edges[0][0], add.edges[1][0]
names = {x: "leaf x", w: "leaf w", add: "Add (ab + a)", mul_ab: "Mul (a * b)", mul_a: "Mul (a = w sin x)"}
draw_counts(y, names, "dependency counts of y = a b + a; each node runs when its count reaches 0")

# %% [markdown]
# A backward pass is an object, `GraphTask` (PyTorch's name), made by
# `run_backward`, through which both `Variable.backward` and `autograd.grad`
# start. Its `run` seeds the roots with `receive`, then runs ready functions
# until none is left. `receive` adds an arriving gradient to the node's
# buffer, one slot per output, and lowers the count; at zero a leaf is
# finished at once (`finish_leaf` adds into `.grad`) and a function goes to
# the ready heap. `run_function` completes a function's output gradients
# (`finish_output`: hooks, step 34, and `retain_grad`), calls its backward
# through `call_backward`, which checks one gradient per input, each of its
# input's shape, and sends the results along the edges. (`capture` and
# `leading` serve `autograd.grad`, below. Lines marked `speed` in the
# package, gradients passed as bare arrays, are left out of these
# listings: the book's chapter "How tinypytorch is made fast" explains them.)

# %%
show_code(engine.GraphTask.receive, engine.GraphTask.run_function, step=33)

# %% [markdown]
# **Which ready function first?** Any order gives the same gradients, since
# a function is ready only when its gradient is complete. PyTorch picks the
# one created last, the highest `sequence_nr` (a counter that numbers the
# recorded functions in the order they are made), and so does the package;
# this heap holds only ready functions, seldom more than two, where step
# 23's held every function discovered. The same order as PyTorch's is what
# step 34 relies on to compare hooks.
#
# **Buffers.** An intermediate gradient waits in `buffers`, which belong to
# this pass, not in `.grad`, so a gradient kept from an earlier pass is never
# counted twice: step 14's trap, where $y = (x^2)^2$ backpropagated twice with
# intermediate gradients kept gave `x.grad` $= 96$ instead of $64$:

# %%
x = Variable(np.array(2.0), name="x")
a = tinypytorch.square(x)
y = tinypytorch.square(a)
y.backward(retain_graph=True, retain_grad=True)
y.backward(retain_grad=True)
print(f"two passes, intermediate grads kept: x.grad = {x.grad:.1f}, a.grad = {a.grad:.1f}")

# %% [markdown]
# ## `tinypytorch.autograd.grad`: gradients returned, not stored
#
# `backward` adds into the `.grad` of every leaf. Often one wants some
# gradients as values, with no side effects: for Newton's method (step 28),
# a gradient penalty, any function that computes a derivative for its
# caller. `torch.autograd.grad(outputs, inputs)` does that, and so does the
# package's. It runs the same engine with `inputs`: only the functions from
# which an input can be reached run, and each input's complete gradient is
# handed back. An input the outputs do not use is an error unless
# `allow_unused=True`, as in PyTorch.

# %%
show_code(autograd.grad, step=33)

# %% [markdown]
# Step 28's Newton iteration needed `cleargrad` twice per step, because each
# `backward` added into `x.grad`. With `autograd.grad` it needs neither:

# %%
def f(x):
    return x**4 - 2 * x**2


x = Variable(np.array(2.0), name="x")
for k in range(1, 7):
    (gx,) = autograd.grad(f(x), x, create_graph=True)  # f'(x), differentiable
    (gxx,) = autograd.grad(gx, x)  # f''(x)
    x.data = x.data - gx.data / gxx.data
    print(f"iteration {k}: x = {x.data:.15f}")
print("x.grad is still", x.grad)

# %% [markdown]
# ## Linear time
#
# The count visits every function and every edge once; the run does the
# same, plus a push and a pop on a ready heap that stays short. So the time
# grows in proportion to the graph. A graph with $n$ branches,
# $y = \sum_{k=1}^{n} \sin(c_k x)$, added one branch at a time, has $3n + 1$
# functions; for $n = 2000$ each backward runs exactly once, and the gradient
# is $\sum_k c_k \cos(c_k x)$. How the time grows is measured, with the
# timings, by the benchmarks in `bench/` (timings vary by machine and belong
# there, not on a page); the tests check that a chain of 100,000 functions
# backpropagates too, since the walk and the run are loops, not recursion.

# %%
def branches(n):
    x = Variable(np.array(0.5), name="x")
    c = np.arange(1, n + 1) % 7 * 0.25  # the constants c_k, cycling through 0, 0.25, ..., 1.5
    y = x * 0.0
    for k in range(n):
        y = y + tinypytorch.sin(x * c[k])
    return x, y, c


x, y, c = branches(2000)
calls = record_backward_calls(y)
y.backward()
print(f"{len(functions_in_graph(y))} functions, {len(calls)} backward calls")
print(f"x.grad = {x.grad:.6f}   sum c_k cos(c_k x) = {np.sum(c * np.cos(c * 0.5)):.6f}")

# %% [markdown]
# | PyTorch | tinypytorch |
# |---|---|
# | `Node`, `tensor.grad_fn`, `node.next_functions` | `Function`, `variable.creator` (`grad_fn`), `function.edges` |
# | `AccumulateGrad` node of a leaf | the leaf itself, as a node of the count |
# | `sequence_nr`, ready queue, `InputBuffer` | `Function.sequence_nr`, the `ready` heap, the `buffers` dict |
#
# ## Check against PyTorch
#
# The table of `requires_grad`, `is_leaf` and `grad_fn` above; the branching
# example's order of backward calls (PyTorch's recorded with
# `Node.register_prehook`) and gradients; `autograd.grad` for first and
# second derivatives, with `.grad` untouched and an unused input refused;
# and the 2,000-branch gradient. The collapsed cell holds the twins.

# %% tags=["hide-input"]
import torch  # noqa: E402


def flags(m, make, make_constant):
    """(requires_grad, is_leaf, has grad_fn) of x, c, x * c, c * 4 and a no_grad result, in framework m."""
    x, c = make(3.0), make_constant(2.0)
    with m.no_grad():
        w = x * 5.0
    return [(v.requires_grad, v.is_leaf, v.grad_fn is not None) for v in (x, c, x * c, c * 4.0, w)]


def torch_run_order(output):
    """(the names recorded, a function giving them without AccumulateGrad): pre-hooks on torch's nodes behind
    `output` note each node as torch's engine runs it, in whatever pass runs next."""
    calls, todo, seen = [], [output.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            node.register_prehook(lambda grads, node=node: calls.append(node.name()))
            todo.extend(next_node for next_node, _ in node.next_functions)
    return calls, lambda: [name.removesuffix("Backward0") for name in calls if "AccumulateGrad" not in name]


def torch_order(yt):
    """The names of torch's nodes behind yt in the order yt.backward() runs them."""
    _, names = torch_run_order(yt)
    yt.backward()
    return names()


def first_and_second(m, x):
    (g1,) = m.autograd.grad(m.tanh(x) * x, x, create_graph=True)
    (g2,) = m.autograd.grad(g1, x)
    return [g1.item(), g2.item()]


def refuses_unused(grad, x, u):
    try:
        grad(x * 2.0, [u])
    except RuntimeError as error:
        return "appears to not have been used in the graph" in str(error)
    return False


def tensor(v, requires_grad=True):
    return torch.tensor(v, dtype=torch.float64, requires_grad=requires_grad)


def variable(v, requires_grad=True):
    return Variable(np.array(v), requires_grad=requires_grad)


# %%
constant = {"tinypytorch": lambda v: variable(v, False), "torch": lambda v: tensor(v, False)}
assert flags(tinypytorch, variable, constant["tinypytorch"]) == flags(torch, tensor, constant["torch"])
x, w = Variable(np.array(0.5)), Variable(np.array(1.5))
y = branches_example(tinypytorch, x, w)
calls = record_backward_calls(y)
y.backward()
xt, wt = tensor(0.5), tensor(1.5)
assert calls == torch_order(branches_example(torch, xt, wt))
np.testing.assert_allclose([x.grad.item(), w.grad.item()], [xt.grad.item(), wt.grad.item()], rtol=1e-14)
x, xt = Variable(np.array(0.8)), tensor(0.8)
np.testing.assert_allclose(first_and_second(tinypytorch, x), first_and_second(torch, xt), rtol=1e-13)
assert x.grad is None and xt.grad is None
assert refuses_unused(autograd.grad, x, variable(1.0))
assert refuses_unused(torch.autograd.grad, xt, tensor(1.0))
x, y, c = branches(2000)
y.backward()
xt = tensor(0.5)
torch.sum(torch.sin(xt * torch.tensor(c))).backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print("PyTorch check passed: requires_grad, leaves, backward order, autograd.grad, 2,000 branches as torch")

# %% [markdown]
# ## Recap
#
# - `requires_grad` says where gradients flow; only operations with such an
#   input are recorded. A leaf is a variable no recorded operation made.
# - The engine first counts, per node, the gradients it will receive, then
#   runs a function as soon as its count reaches zero: no ordering of the
#   whole graph, time linear in its size.
# - Among ready functions the newest runs first, as in PyTorch, so the
#   order (and that of hooks) is PyTorch's.
# - Intermediate gradients live in buffers of one pass, not in `.grad`.
# - `autograd.grad(outputs, inputs)` returns gradients and leaves `.grad`
#   alone.
#
# ## Exercises
#
# **1.** Write `count_uses(y)`, the dependency count of this step, for
# PyTorch's graph: walk `y.grad_fn` and its `next_functions` and count, for
# every node, the edges that end there (the root's node gets 1 for the
# seed). Compare the counts for the branching example with
# `engine.count_dependencies`, node by node in the drawing's order.

# %% tags=["hide-cell"]
def count_uses(yt):
    counts, todo = {yt.grad_fn: 1}, [yt.grad_fn]
    while todo:
        for node, _ in todo.pop().next_functions:
            if node is None:
                continue
            if node not in counts:
                counts[node] = 0
                todo.append(node)
            counts[node] += 1
    return counts


xt, wt = tensor(0.5), tensor(1.5)
theirs = count_uses(branches_example(torch, xt, wt))
x, w = Variable(np.array(0.5)), Variable(np.array(1.5))
ours = engine.count_dependencies([branches_example(tinypytorch, x, w)])
print("torch:", sorted(theirs.values()), " ours:", sorted(ours.values()))

# %% [markdown]
# **2.** A gradient penalty, as WGAN-GP uses: for $L(x, w) = \sum \tanh(wx)$,
# compute $P = \lVert \partial L/\partial x \rVert^2$ with `autograd.grad`
# (`create_graph=True`) and then $\partial P/\partial w$ with a second
# `autograd.grad`. Compare with `torch.autograd.grad` doing the same.

# %% tags=["hide-cell"]
def penalty_grad(m, x, w):
    (gx,) = m.autograd.grad(m.tanh(w * x).sum(), x, create_graph=True)
    return m.autograd.grad((gx * gx).sum(), w)[0]


xs, ws = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.3, -0.7])
ours = penalty_grad(tinypytorch, Variable(xs), Variable(ws))
theirs = penalty_grad(torch, tensor(xs), tensor(ws))
print("dP/dw =", ours, " equals torch's:", np.allclose(ours.data, theirs.numpy(), rtol=1e-13, atol=0))
