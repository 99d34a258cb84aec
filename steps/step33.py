# %% [markdown]
# # Step 33: A PyTorch-shaped engine
#
# The backward pass has grown since step 07 one idea at a time: a loop
# (step 08), accumulation (step 14), generations (step 16), weak references
# (step 17), released intermediate gradients (step 18), a heap (step 23),
# gradients that are Variables (step 27). This step rebuilds it the way
# PyTorch's autograd engine works, and gives it PyTorch's vocabulary:
#
# - every Variable says whether it `requires_grad`; a graph is recorded only
#   where a gradient can flow, and `is_leaf` and `grad_fn` describe the graph;
# - the engine counts, for every function, how many gradients it will
#   receive, and runs it as soon as all have arrived, with no ordering of
#   the whole graph;
# - intermediate gradients live in buffers that belong to one backward pass,
#   not in `.grad`;
# - `tinypytorch.autograd.grad` returns gradients instead of storing them.
#
# The results do not change: every earlier step runs on this engine, and its
# gradients equal PyTorch's.

# %%
import time

import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import engine
from tinypytorch.utils import functions_in_graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Which variables gradients flow to: `requires_grad`
#
# In PyTorch every tensor carries a flag, `requires_grad`. Autograd records an
# operation only if one of its inputs requires grad, and then the result
# requires grad too; a tensor made directly by the user does not require grad
# unless asked (`torch.tensor(2.0, requires_grad=True)`). Parameters of a model
# require grad, data does not, so nothing of the graph is built for
# computations on data alone.
#
# The package adopts the flag with one difference: a `Variable` the user
# creates requires grad *by default*, `Variable(data, requires_grad=True)`.
# Every step so far has written `x = Variable(np.array(2.0))` and expected
# `x.grad` after `backward`, and it still works. What is new is everything
# else: the numbers and arrays that appear inside expressions, such as the
# `2` in `2 * x`, become constants with `requires_grad=False`, and the
# outputs of an operation require grad exactly when `Config.enable_backprop`
# is on and at least one input requires grad. Only then does
# `Function.__call__` record the graph (creator, inputs, generation):

# %%
show_code(tinypytorch.as_variable)
show_code(Function.__call__)

# %% [markdown]
# The new attribute `sequence_nr` numbers the recorded functions in the
# order they were created; PyTorch's nodes carry the same number, and the
# engine below uses it.
#
# Two properties describe the graph in PyTorch's words. A *leaf* is a
# variable that no recorded operation created: the user's variables,
# constants, and results computed under `no_grad` (step 18). `grad_fn` is
# PyTorch's name for `creator`. Here they are for five variables:

# %%
x = Variable(np.array(3.0), name="x")
c = Variable(np.array(2.0), name="c", requires_grad=False)
y = x * c
z = c * 4.0
with tinypytorch.no_grad():
    w = x * 5.0


def describe(name, v):
    grad_fn = None if v.grad_fn is None else type(v.grad_fn).__name__
    print(f"{name}: requires_grad={v.requires_grad!s:5}  is_leaf={v.is_leaf!s:5}  grad_fn={grad_fn}")


for name, v in [("x        ", x), ("c        ", c), ("y = x * c", y), ("z = c * 4", z), ("w (no_grad)", w)]:
    describe(f"{name:11}", v)

# %% [markdown]
# `z` is computed from constants only, so no graph is kept for it: no `Mul`
# holds `c` and `4.0` in memory waiting for a backward pass that will never
# come. The check at the end prints the same table from PyTorch.
#
# A backward pass from a variable that does not require grad has nothing to
# do, and PyTorch treats it as a mistake. So does the package:

# %%
try:
    z.backward()
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# (Before this step, everything computed with backprop on had a creator, and
# `backward` on a variable without one, a result of `no_grad`, set its
# `.grad` to ones and did nothing else. DeZero raises an `AttributeError`
# there, reported in its PR #41.)
#
# Two methods change the flag. `requires_grad_(False)` switches it off on a
# leaf (PyTorch refuses to do so on a non-leaf, and so does the package), and
# `detach()` returns a new leaf holding the same data that does not require
# grad: a way to use a value while cutting the gradient's path through it.
# With $y = x^2$, the product $y\,x$ has derivative $3x^2 = 27$ at $x = 3$,
# but `y.detach() * x` treats $y$ as a constant and gets $y = 9$:

# %%
x = Variable(np.array(3.0), name="x")
y = x * x
(y * x).backward()
print(f"d(y x)/dx          = {x.grad:.1f}")
x.cleargrad()
(y.detach() * x).backward()
print(f"d(y.detach() x)/dx = {x.grad:.1f}")
try:
    y.requires_grad_(False)
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## Counting instead of ordering
#
# A function may pass its gradient on only once it has *all* of it: every
# function that used its output must have run first. Step 16 guaranteed this
# with generations, running the pending function of highest generation next;
# step 23 kept every pending function in a heap keyed by generation.
#
# PyTorch's engine does not sort the graph at all. It works in two passes:
#
# 1. **Count.** Walk the graph from the output once and count, for every node,
#    how many gradients will flow into it: one per use of its output by a
#    function in the graph (two for `x * x`), plus the seed for the output.
# 2. **Run.** Give the output its seed. Whenever a gradient arrives at a node,
#    add it to the node's buffer and decrease its count; when the count reaches
#    zero the node's gradient is complete, and the node goes to a *ready
#    queue*. Take a node from the queue, run its backward, and send the
#    results on.
#
# A node is a `Function`, or, for a leaf, the leaf itself: PyTorch gives each
# leaf that requires grad a node of its own, `AccumulateGrad`, whose only job
# is to add the complete gradient into `.grad`. The walk follows each
# function's `edges`: for each input, the node its gradient goes to, with the
# number of that node's output the input is (a function may have several
# outputs), or nothing for a constant. (Until step 35 you may read the edges
# as the inputs' creators; step 35 explains why the package keeps edges and
# not the inputs.) The count:

# %%
show_code(engine.node_of)
show_code(engine.count_dependencies)

# %% [markdown]
# Step 16's graph, $a = x^2$, $y = a^2 + a^2$, makes a small example: the
# `Square` that makes $a$ waits for two gradients, one from each square of $a$.

# %%
x = Variable(np.array(2.0), name="x")
a = tinypytorch.square(x)
a.name = "a"
y = tinypytorch.square(a) + tinypytorch.square(a)
y.name = "y"


def label(node):
    """A node as text: a leaf's name, or a function with its output's name."""
    if isinstance(node, Variable):
        return f"leaf {node.name}"
    output = node.outputs[0]()  # a weak reference: a temporary result may be gone (step 35)
    name = None if output is None else output.name
    return f"{type(node).__name__} -> {name or '(unnamed)'}"


for node, count in engine.count_dependencies([y]).items():
    print(f"{label(node):22} will receive {count} gradient(s)")

# %% [markdown]
# A backward pass is an object, `GraphTask` (PyTorch's name for the same
# thing), made by `run_backward`, the one function through which both
# `Variable.backward` and `autograd.grad` start a pass. `run` seeds the roots
# and then runs ready functions until none is left. `receive` adds an
# arriving gradient to the node's buffer, one slot per output of a function,
# and decreases the count; at zero, a leaf is finished at once and a function
# goes to the ready queue. `finish_leaf` and `finish_output` run the hooks of
# step 34 and then store the gradient in `.grad` where it belongs (leaves,
# and every variable with `retain_grad=True`). The parts for `autograd.grad`
# (`capture`, `targets`, `leading`) come later in this step, `anomaly` in
# step 39, `release_saved` in step 35, and `send` (a gradient a function
# hands on before its backward has returned) in step 46. The lines marked
# `speed` make the pass faster without changing what it computes: when no
# graph of the backward pass is wanted, gradients travel as bare arrays and
# become Variables only where the user meets them, in hooks and `.grad` (the
# book's chapter "How tinypytorch is made fast").

# %%
show_code(engine.run_backward)
show_code(engine.GraphTask.run)
show_code(engine.GraphTask.run_function)
show_code(engine.GraphTask.receive)
show_code(engine.GraphTask.finish_leaf)
show_code(engine.GraphTask.finish_output)

# %% [markdown]
# Two details.
#
# - **Which ready function first?** Any order of the ready functions gives the
#   same gradients: a function is ready only when its gradient is complete.
#   PyTorch picks the one created last, the highest `sequence_nr`, and so does
#   the package, with a heap. (A leaf's `AccumulateGrad` has the highest
#   priority of all, so PyTorch finishes a leaf as soon as its gradient is
#   complete; `receive` does the same.) This heap holds only the functions that are
#   ready, seldom more than a few at a time (two at most in the graph at the
#   end of this step); step 23's held every function discovered and not yet
#   run. Following PyTorch's choice makes the order deterministic and the same
#   as PyTorch's, which step 34 relies on when it compares hook calls.
# - **Buffers.** An intermediate gradient waits in `buffers`, which belongs to
#   this pass and drops each entry as soon as it is used. `.grad` is only
#   written, never read back, so a gradient kept from an earlier pass can no
#   longer be counted twice: the trap of step 14, where $y = (x^2)^2$
#   backpropagated twice with intermediate gradients kept gave
#   `x.grad` $= 96$ instead of $64$.

# %%
x = Variable(np.array(2.0), name="x")
a = tinypytorch.square(x)
y = tinypytorch.square(a)
y.backward(retain_graph=True, retain_grad=True)
y.backward(retain_grad=True)
print(f"two passes, intermediate grads kept: x.grad = {x.grad:.1f}, a.grad = {a.grad:.1f}")

# %% [markdown]
# That is PyTorch's $64$; `a.grad` $= 2 \cdot 8$ adds up over the two passes,
# as a retained gradient does in PyTorch. (`retain_graph=True` asks the first
# pass to keep what the second needs; step 35 explains.)
#
# ### Checking what a backward method returns
#
# `run_function` calls each function's backward through `call_backward`, which
# checks the result: one gradient per input, and, in `checked_gradient`,
# each of its input's shape (and dtype, step 43). A
# mistake in a user-written `Function`, such as forgetting to broadcast a
# gradient back to the input's shape, is reported where it happens, naming
# the function, instead of surfacing later as a wrong gradient or a
# broadcasting error far away.

# %%
show_code(engine.call_backward)
show_code(engine.checked_gradient)


class SumWithABug(Function):
    def forward(self, x):
        return x.sum()

    def backward(self, gy):
        return gy  # should be broadcast to x's shape


try:
    SumWithABug()(Variable(np.ones(3))).backward()
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ### The order, compared
#
# Here is the order in which the functions of a graph with several
# branches run; the check at the end compares it with PyTorch's. To see it,
# `record_backward_calls` wraps the backward method of every function in the
# graph with one that notes the function's name first.

# %%
def record_backward_calls(y):
    """From now on, every Function behind y appends its name to the returned list when its backward runs."""
    calls = []
    for f in functions_in_graph(y):
        def recording(*gys, f=f, original=f.backward):
            calls.append(type(f).__name__)
            return original(*gys)
        f.backward = recording  # an instance attribute hides the method, for this object only
    return calls


def branches_example(m, x, w):
    a = m.sin(x) * w
    b = m.exp(x - w)
    return a * b + a


x, w = Variable(np.array(0.5), name="x"), Variable(np.array(1.5), name="w")
y = branches_example(tinypytorch, x, w)
calls = record_backward_calls(y)
y.backward()
print("backward order:", " ".join(calls))

# %% [markdown]
# ## Non-scalar outputs and the seed
#
# `backward()` on a non-scalar variable seeds it with ones (step 09), which
# differentiates the sum of its elements. PyTorch refuses ("grad can be
# implicitly created only for scalar outputs") and wants the seed as an
# argument, `y.backward(gradient)`: $\partial L / \partial y$ for whatever $L$
# the caller has in mind. The package keeps the convenience and accepts the
# argument, checked against $y$'s shape. Here $L = 1 \cdot y_0 + 10\, y_1 + 100\, y_2$:

# %%
x = Variable(np.array([1.0, 2.0, 3.0]), name="x")
y = x * x
y.backward(gradient=np.array([1.0, 10.0, 100.0]))
print("x.grad =", x.grad)
try:
    y.backward(gradient=np.ones(2))
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## `tinypytorch.autograd.grad`: gradients returned, not stored
#
# `backward` adds into the `.grad` of every leaf. Often one wants the
# gradient of some outputs with respect to some inputs, as values, with no
# side effects: in Newton's method (step 28), for a gradient penalty, or in
# any function that computes a derivative for its caller.
# `torch.autograd.grad(outputs, inputs)` does that, and so does the package's:

# %%
show_code(autograd.grad)

# %% [markdown]
# It runs the same engine with `inputs`: `functions_leading_to` finds the
# functions from which one of the inputs can be reached, only those run, and
# each input's complete gradient is handed back instead of stored.
#
# Step 28's Newton iteration needed `cleargrad` twice per step, because each
# `backward` added into `x.grad`. With `autograd.grad` it needs neither, and
# leaves no reference cycle through `x.grad` (step 27):

# %%
def f(x):
    return x**4 - 2 * x**2


x = Variable(np.array(2.0), name="x")
for k in range(1, 8):
    (gx,) = autograd.grad(f(x), x, create_graph=True)  # f'(x), differentiable
    (gxx,) = autograd.grad(gx, x)  # f''(x)
    x.data = x.data - gx.data / gxx.data
    print(f"iteration {k}: x = {x.data:.15f}")
print("x.grad is still", x.grad)

# %% [markdown]
# Only the needed part of the graph runs. Below, the loss has a large term
# in $w$ that does not involve $x$; asking for $\partial L/\partial x$ runs
# the three functions on $x$'s path (the final `Add`, the `Mul` and the `Exp`)
# and leaves the other 600 alone:

# %%
x, w = Variable(np.array(0.5), name="x"), Variable(np.array(1.5), name="w")
big = w
for _ in range(300):
    big = tinypytorch.sin(big) + w
loss = tinypytorch.exp(x) * 3.0 + big
calls = record_backward_calls(loss)
(gx,) = autograd.grad(loss, x, retain_graph=True)  # keep the graph: the next cell uses it again (step 35)
print(f"dL/dx = {gx:.6f} (3 e^0.5 = {3 * np.exp(0.5):.6f}); backward ran: {', '.join(calls)}")
print(f"functions in the graph: {len(functions_in_graph(loss))}")

# %% [markdown]
# An input that the outputs do not depend on is usually a mistake, so
# `autograd.grad` raises, as PyTorch does; `allow_unused=True` returns `None`
# for it instead. `retain_graph` works as for `backward` (step 35).

# %%
unrelated = Variable(np.array(1.0), name="u")
try:
    autograd.grad(loss, [x, unrelated], retain_graph=True)
except RuntimeError as error:
    print("RuntimeError:", error)
print("allow_unused=True:", autograd.grad(loss, [x, unrelated], allow_unused=True))

# %% [markdown]
# ## Linear time
#
# The count visits every function once and every input edge once; the run
# does the same, plus one push and one pop on the ready queue per function,
# each costing about $\log_2$ of the queue's length, which stays short (in
# the graph below, at most two functions). So the time grows in proportion to
# the size of the graph. A graph with
# $n$ branches, $y = \sum_{k=1}^{n} \sin(c_k x)$, added up one branch at a
# time, has $3n + 1$ functions: a `Mul`, a `Sin` and an `Add` per branch, and
# the `x * 0.0` that starts the sum. For $n = 2000$ every function's backward
# runs exactly once, and the gradient is $\sum_k c_k \cos(c_k x)$:

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
# and the time of `backward` as $n$ doubles (machine-dependent; what matters
# is that it doubles too):

# %% tags=["nbval-ignore-output"]
print(f"{'branches':>8}  {'functions':>9}  {'backward (s)':>12}  {'per function (us)':>17}")
for n in (1000, 2000, 4000, 8000, 16000):
    x, y, _ = branches(n)
    start = time.perf_counter()
    y.backward()
    seconds = time.perf_counter() - start
    print(f"{n:8d}  {3 * n + 1:9d}  {seconds:12.3f}  {seconds / (3 * n + 1) * 1e6:17.1f}")

# %% [markdown]
# The time per function stays flat. Depth is no problem either: the counting
# walk and the run are loops, not recursion (step 08), so a chain of 100,000
# additions backpropagates like a wide graph (the tests check both).
#
# ## What maps to what
#
# | PyTorch | tinypytorch |
# |---|---|
# | `Tensor` with its `AutogradMeta` | `Variable` (`requires_grad`, `grad`, `creator`) |
# | `Node`, `tensor.grad_fn` | `Function`, `variable.creator` (alias `grad_fn`) |
# | `node.next_functions` (edges) | `function.edges` |
# | `AccumulateGrad` node of a leaf | the leaf itself, as a node of the count |
# | `sequence_nr`, ready queue | `Function.sequence_nr`, the `ready` heap of `GraphTask` |
# | `InputBuffer` | the `buffers` dict of one pass |
# | `torch.autograd.grad` | `tinypytorch.autograd.grad` |
#
# PyTorch runs the engine in C++, with worker threads for the devices, and
# frees each function's saved tensors as soon as it has run unless
# `retain_graph=True`; so does the package, from step 35 on.
#
# ## Check against PyTorch
#
# - The table of `requires_grad`, `is_leaf` and whether there is a `grad_fn`
#   for the five variables above equals PyTorch's.
# - The branching example runs its functions in the same order as PyTorch
#   runs its nodes (recorded with `Node.register_prehook`), with the same
#   gradients.
# - `autograd.grad` equals `torch.autograd.grad`, for first and second
#   derivatives, and both refuse an unused input unless `allow_unused`.
# - The 2,000-branch gradient equals PyTorch's.

# %%
import torch

ours = {}
x = Variable(np.array(3.0))
c = Variable(np.array(2.0), requires_grad=False)
with tinypytorch.no_grad():
    w = x * 5.0
for name, v in [("x", x), ("c", c), ("y", x * c), ("z", c * 4.0), ("w", w)]:
    ours[name] = (v.requires_grad, v.is_leaf, v.grad_fn is not None)
theirs = {}
xt = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
ct = torch.tensor(2.0, dtype=torch.float64)
with torch.no_grad():
    wt = xt * 5.0
for name, t in [("x", xt), ("c", ct), ("y", xt * ct), ("z", ct * 4.0), ("w", wt)]:
    theirs[name] = (t.requires_grad, t.is_leaf, t.grad_fn is not None)
assert ours == theirs, (ours, theirs)
print("requires_grad, is_leaf, grad_fn for x, c, y, z, w: equal to torch's")

x, w = Variable(np.array(0.5)), Variable(np.array(1.5))
y = branches_example(tinypytorch, x, w)
calls = record_backward_calls(y)
y.backward()
xt, wt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (0.5, 1.5))
yt = branches_example(torch, xt, wt)
torch_calls, todo, seen = [], [yt.grad_fn], set()
while todo:  # a pre-hook on every node of torch's graph records when it runs
    node = todo.pop()
    if node is not None and node not in seen:
        seen.add(node)
        node.register_prehook(lambda grads, node=node: torch_calls.append(node.name()))
        todo.extend(next_node for next_node, _ in node.next_functions)
yt.backward()
torch_functions = [name.removesuffix("Backward0") for name in torch_calls if "AccumulateGrad" not in name]
assert calls == torch_functions, (calls, torch_functions)
np.testing.assert_allclose([x.grad.item(), w.grad.item()], [xt.grad.item(), wt.grad.item()], rtol=1e-14)
print("branching example: functions run in torch's order:", " ".join(calls))

x = Variable(np.array(0.8))
xt = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
(g1,) = autograd.grad(tinypytorch.tanh(x) * x, x, create_graph=True)
(g2,) = autograd.grad(g1, x)
(g1t,) = torch.autograd.grad(torch.tanh(xt) * xt, xt, create_graph=True)
(g2t,) = torch.autograd.grad(g1t, xt)
np.testing.assert_allclose([g1.item(), g2.item()], [g1t.item(), g2t.item()], rtol=1e-13)
assert x.grad is None and xt.grad is None
u, ut = Variable(np.array(1.0)), torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
for grad, a, b in [(autograd.grad, x * 2.0, u), (torch.autograd.grad, xt * 2.0, ut)]:
    try:
        grad(a, [b])
        raise AssertionError("an unused input was accepted")
    except RuntimeError as error:
        assert "appears to not have been used in the graph" in str(error)
assert autograd.grad(x * 2.0, [u], allow_unused=True) == (None,)
assert torch.autograd.grad(xt * 2.0, [ut], allow_unused=True) == (None,)
print("autograd.grad: 1st and 2nd derivatives of tanh(x) x equal torch's; .grad untouched; unused inputs alike")

x, y, c = branches(2000)
y.backward()
xt = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
torch.sum(torch.sin(xt * torch.tensor(c))).backward()
np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-12)
print(f"2,000 branches: x.grad = {x.grad:.6f}, torch {xt.grad.item():.6f}")
print("PyTorch check passed: leaves, requires_grad, backward order, autograd.grad, 2,000-branch grad equal torch's")
