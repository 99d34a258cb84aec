# %% [markdown]
# # Step 33: Counting instead of ordering
#
# The backward pass has grown one idea at a time since step 07: a loop
# (step 08), accumulation (step 14), generations (step 16), a heap
# (step 23). A function may pass its gradient on only once it has *all* of
# it, and generations ensured that by ordering the graph. This step does it
# the way PyTorch's autograd engine does, with one idea: **count, for every
# function, how many gradients it will receive, and run it as soon as all
# have arrived.** No order of the whole graph is needed, and every earlier
# step runs on this engine unchanged.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.autograd import engine
from tinypytorch.utils import functions_in_graph
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## Two passes: count, then run
#
# 1. **Count.** Walk the graph from the output once and count, for every
#    node, how many gradients will flow into it: one per use of its output
#    (two for `x * x`), plus the seed for the output.
# 2. **Run.** Whenever a gradient arrives at a node, add it to the node's
#    buffer and lower its count; at zero the node's gradient is complete and
#    the node goes to a *ready queue*. Take a node from the queue, run its
#    backward, send the results on.
#
# A node is a `Function`, or, for a leaf (a variable no recorded function
# made; `is_leaf` in PyTorch and here), the leaf itself: PyTorch gives each
# leaf a node, `AccumulateGrad`, that adds the complete gradient into
# `.grad`. The walk follows each function's `edges`: for each input, the
# node its gradient goes to, or nothing. (Until step 35, read the edges as
# the inputs' creators.)

# %%
show_code(engine.count_dependencies, step=33)

# %% [markdown]
# **What is counted.** Only the nodes a gradient flows to, which PyTorch
# marks with `requires_grad`. A variable the user makes requires grad here
# by default (PyTorch's `torch.tensor` needs `requires_grad=True`), and so
# does the result of an operation with such an input. A number in an
# expression, the `4.0` in `c * 4.0`, or a variable made with
# `requires_grad=False` (or a leaf switched off by `requires_grad_(False)`
# before use) is a *constant*: no edge leads to it, and an operation on
# constants only is not recorded at all, nor is anything under `no_grad`
# (step 18). Here only `x` and the two functions that lead to it are
# counted:

# %%
x = Variable(np.array(3.0), name="x")
c = Variable(np.array(2.0), name="c", requires_grad=False)
y = x * c + c * 4.0
counts = engine.count_dependencies([y])
print("counts:", {(v.name if isinstance(v, Variable) else type(v).__name__): n for v, n in counts.items()})
print("c * 4.0 was recorded:", y.creator.edges[1][0] is not None)

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
# The run is an object, `GraphTask` (PyTorch's name), one per backward
# pass. It seeds the output's node with `receive`, then takes ready
# functions off the queue until none is left. `receive` adds an arriving
# gradient to the node's buffer, one slot per output, and lowers the count;
# at zero a leaf is finished at once (`finish_leaf` adds into `.grad`) and a
# function goes to the ready queue. `run_function` completes a function's
# output gradients (`finish_output`: hooks, step 34), calls its backward
# through `call_backward`, which checks one gradient per input, each of its
# input's shape, and sends the results along the edges. (`capture` and
# `leading` serve `autograd.grad`, exercise 3. Lines marked `speed` in the
# package are left out of these listings: the book's chapter "How
# tinypytorch is made fast" explains them.)

# %%
show_code(engine.GraphTask.receive, engine.GraphTask.run_function, step=33)

# %% [markdown]
# **Which ready function first?** Any order gives the same gradients, since
# a function is ready only when its gradient is complete. PyTorch picks the
# one created last, the highest `sequence_nr` (a counter that numbers the
# recorded functions in the order they are made), and so does the package;
# the queue holds only ready functions, seldom more than two, where step
# 23's heap held every function discovered. Step 34 relies on this order
# being PyTorch's to compare hooks.
#
# The buffers belong to the pass, not to the variables: an intermediate
# gradient waits there until its count reaches zero and is gone after the
# pass. So a gradient kept in `.grad` from an earlier pass is never counted
# twice: step 14's trap, where $y = (x^2)^2$ backpropagated twice with its
# intermediate gradients kept gave `x.grad` $= 96$ instead of PyTorch's
# $64$, is gone.
#
# ## Check against PyTorch
#
# The branching example, and a graph with a constant and a leaf that
# requires no grad: every function runs once, in the order PyTorch's engine
# runs its nodes (recorded with `Node.register_prehook`), and the leaves'
# gradients, `None` where no gradient flows, equal torch's. The collapsed
# cell holds the twins.

# %% tags=["hide-input"]
import torch  # noqa: E402


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


def with_constants(m, x, c):
    """x is used three times, c (no grad) twice, 2.0 once: only x's node and the functions leading to it count."""
    return (x * c + m.sin(x * 2.0)) * x + c * c


def run(m, make, example, requires):
    """(the names of the functions in the order backward ran them, the leaves' gradients) in framework m."""
    leaves = [make(v, r) for v, r in zip((0.5, 1.5), requires)]
    y = example(m, *leaves)
    recording = torch_run_order(y)[1] if m is torch else record_backward_calls(y)
    y.backward()
    order = recording() if m is torch else recording
    if m is tinypytorch:
        assert len(order) == len(functions_in_graph(y))  # every function ran, none twice
    return order, [None if v.grad is None else v.grad.item() for v in leaves]


def same_gradients(grads, grads_t):
    """None in the same places, the other gradients equal."""
    assert [g is None for g in grads] == [g is None for g in grads_t], (grads, grads_t)
    np.testing.assert_allclose([g for g in grads if g is not None], [g for g in grads_t if g is not None],
                               rtol=1e-14)
    return True


def tensor(v, requires_grad=True):
    return torch.tensor(v, dtype=torch.float64, requires_grad=requires_grad)


def variable(v, requires_grad=True):
    return Variable(np.array(v), requires_grad=requires_grad)


# %%
for example, requires in [(branches_example, (True, True)), (with_constants, (True, False))]:
    (order, grads), (order_t, grads_t) = (run(m, make, example, requires)
                                          for m, make in [(tinypytorch, variable), (torch, tensor)])
    assert order == order_t, (order, order_t)
    assert same_gradients(grads, grads_t)
    print(f"{example.__name__}: {len(order)} functions, each run once, in torch's order:", " ".join(order))
print("PyTorch check passed: run order and gradients equal torch's")

# %% [markdown]
# ## Recap
#
# - The engine first counts, per node, the gradients it will receive: one
#   per edge into it, plus the seed. Only what requires grad is counted;
#   constants have no edges.
# - Then it runs a function as soon as its count reaches zero, its gradient
#   complete in the pass's buffer: no ordering of the whole graph.
# - Among ready functions the newest runs first, as in PyTorch, so the order
#   (and that of hooks, step 34) is PyTorch's.
#
# ## Exercises
#
# **1.** Write `count_uses(y)`, the dependency count of this step, for
# PyTorch's graph: walk `y.grad_fn` (the package has the name too, for
# `creator`) and its `next_functions`, and count, for every node, the edges
# that end there (the root's node gets 1 for the seed). Compare the counts
# for the branching example with `engine.count_dependencies`.

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
# **2.** `y.detach()` returns a leaf with `y`'s data that requires no grad,
# in PyTorch and here. For $x = 3$, $y = x \cdot x$ and
# $z = \mathrm{detach}(y)\,x + y$, predict the count of every node and
# $\partial z/\partial x$ (the detached $y$ is a constant). Check with
# `engine.count_dependencies` and against torch.

# %% tags=["hide-cell"]
def detached(m, x):
    y = x * x
    return y.detach() * x + y


x = Variable(np.array(3.0), name="x")
z = detached(tinypytorch, x)
counts = engine.count_dependencies([z])
# Add 1 (the seed); each Mul 1, from the Add (x * x's only from there: the detached copy has no edge back);
# x 3, once from detach(y) * x and twice from x * x
print("counts:", sorted(counts.values()), " x's:", counts[x])
z.backward()
xt = tensor(3.0)
detached(torch, xt).backward()
print(f"dz/dx = {x.grad.item():.1f} (y + 2x = 9 + 6), torch's: {xt.grad.item():.1f}")

# %% [markdown]
# **3.** `tinypytorch.autograd.grad(outputs, inputs, create_graph=False)`,
# PyTorch's `torch.autograd.grad`, runs the same engine but returns each
# input's gradient instead of adding it into `.grad` (the `capture` lines of
# `run_function`; only the functions from which an input can be reached
# run). Redo step 28's Newton iteration for $f(x) = x^4 - 2x^2$ from $x = 2$
# with it: no `cleargrad` is needed, and `x.grad` stays `None`. Compare the
# iterates with `torch.autograd.grad`'s.

# %% tags=["hide-cell"]
def f(x):
    return x**4 - 2 * x**2


def newton(x, iterations=6):
    """Newton's method on f from the leaf x (tinypytorch or torch): the iterates after x_0."""
    iterates = []
    m = torch if isinstance(x, torch.Tensor) else tinypytorch
    for _ in range(iterations):
        (gx,) = m.autograd.grad(f(x), x, create_graph=True)  # f'(x), differentiable
        (gxx,) = m.autograd.grad(gx, x)  # f''(x)
        x.data = x.data - gx.data / gxx.data  # a step outside the graph
        iterates.append(x.item())
    return iterates


x, xt = Variable(np.array(2.0)), tensor(2.0)
ours, theirs = newton(x), newton(xt)
print("iterates:", " ".join(f"{v:.12f}" for v in ours))
print("equal torch's:", np.allclose(ours, theirs, rtol=1e-15, atol=0), "  x.grad:", x.grad, "  xt.grad:", xt.grad)
