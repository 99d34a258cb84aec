# %% [markdown]
# # Step 34: Hooks on gradients
#
# A backward pass computes many gradients that the user never sees: those of
# intermediate variables live only in the engine's buffers (step 33), and a
# leaf's arrives in `.grad` already added to whatever was there. A *hook* is a
# function the user attaches to a variable; the engine calls it with the
# variable's gradient during the backward pass. It can look at the gradient
# (to print it, to check it for NaN, to record it) or return a new one, which
# then replaces the gradient for the rest of the pass (to clip it, to scale
# it, to reverse it). PyTorch's name for this is `Tensor.register_hook`, and
# `retain_grad()`, which keeps an intermediate gradient in `.grad`, is built
# on the same mechanism.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, autograd
from tinypytorch.autograd import engine, hooks
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

# %% [markdown]
# ## `register_hook`
#
# `x.register_hook(hook)` stores `hook` in a dictionary on the variable,
# keyed by a fresh number, and returns a *handle* that knows the dictionary
# and the number; `handle.remove()` deletes the entry. A variable that does
# not require grad never receives a gradient, so a hook on it could never
# run: that is refused at once.

# %%
show_code(Variable.register_hook, hooks.RemovableHandle, step=34)

# %% [markdown]
# The engine calls its `call_hooks` at the moment a variable's gradient is
# complete. It calls the hooks in the order they were registered; whatever a
# hook returns, unless it is `None`, becomes the gradient that the next hook
# sees and that the pass uses from then on:

# %%
show_code(engine.call_hooks, step=34)

# %% [markdown]
# For a variable a function made, that moment is when the function leaves
# the ready queue (step 33): `run_function` first calls `finish_output` for
# each of its outputs, and only then the function's own backward. A hook is
# kept by the function, under the number of its output. (For a leaf,
# `finish_leaf` calls the hooks just before adding into `.grad`.)

# %%
show_code(engine.GraphTask.finish_output, step=34)

# %% [markdown]
# ## Looking at a gradient
#
# Take $a = 2x$ and $y = a \cdot a + a$ at $x = 1$. The variable $a$ is used
# three times, twice by the product and once by the addition, so three
# contributions reach it: $a = 2$ from each side of the product and $1$ from
# the addition. A hook on `a` is called once, with their sum $5$, when every
# contribution has arrived: in step 33's terms, when the count of `a`'s
# creator has reached zero and the engine takes it from the ready queue.
# The drawing follows the gradient backwards, from the seed to $x$.

# %% tags=["hide-input"]
nodes = {"seed": ("output", "seed 1"), "add": ("function", "Add"), "mul": ("function", "Mul (a * a)"),
         "hook": ("highlight", "a's hook: sees 5"), "scale": ("function", "Mul (x * 2)"),
         "x": ("leaf", "x.grad = 10")}
edges = [("seed", "add"), ("add", "mul"), ("add", "hook"), ("mul", "hook"), ("hook", "scale"),
         ("scale", "x")]
where = {"seed": (0, 0.4), "add": (1.7, 0.4), "mul": (3.7, 1.2), "hook": (5.7, 0.4), "scale": (8.2, 0.4),
         "x": (10.2, 0.4)}
fig, ax = plt.subplots(figsize=(10, 3))
draw_dag(nodes, edges, ax=ax, positions=where,
         edge_labels={("add", "hook"): "1", ("mul", "hook"): "2 + 2", ("hook", "scale"): "5"},
         notes={"hook": "a's count: 3 -> 0", "scale": "runs after the hook"},
         title="backward through y = a * a + a, a = 2x: the hook runs once a's gradient is complete")
plt.show()

# %%
x = Variable(np.array(1.0), name="x")
a = x * 2.0
a.register_hook(lambda grad: print(f"hook on a: grad = {grad:.1f}"))
y = a * a + a
y.backward()
print(f"x.grad = {x.grad:.1f}   (dy/dx = (2a + 1) * 2 = 10)")
print("a.grad =", a.grad)

# %% [markdown]
# The hook saw the gradient of $a$, but `a.grad` stays `None`: the hook is a
# window into the pass, not a place where the gradient is stored.
#
# On a leaf, the hooks run *before* the gradient is added into `.grad`, so a
# hook sees this pass's gradient alone. Two passes through $y = 3x$ give the
# hook $3$ each time, while `x.grad` adds up to $6$:

# %%
x = Variable(np.array(1.0), name="x")
x.register_hook(lambda grad: print(f"hook on x: grad = {grad:.1f}"))
y = x * 3.0
for _ in range(2):
    y.backward()
    print(f"x.grad = {x.grad:.1f}")

# %% [markdown]
# ## Changing a gradient
#
# A hook that returns a gradient replaces the old one. For an intermediate
# variable the replacement is what its creator then backpropagates, so the
# change reaches every variable behind it. Below, a hook on $h = \sin x$
# doubles its gradient; $x$, behind $h$, gets $2\cos x$ instead of $\cos x$,
# while $w$, which is not behind $h$, is unaffected.

# %%
x, w = Variable(np.array(0.5), name="x"), Variable(np.array(2.0), name="w")
h = tinypytorch.sin(x)
handle = h.register_hook(lambda grad: grad * 2.0)
y = h + w * w
y.backward(retain_graph=True)  # the graph is used again below (step 35)
print(f"with the hook: x.grad = {x.grad:.6f} (2 cos 0.5 = {2 * np.cos(0.5):.6f}), w.grad = {w.grad:.1f}")

handle.remove()
x.cleargrad()
w.cleargrad()
y.backward()
print(f"hook removed:  x.grad = {x.grad:.6f} (cos 0.5 = {np.cos(0.5):.6f}), w.grad = {w.grad:.1f}")

# %% [markdown]
# Real uses of a modifying hook: clipping the gradient of one parameter
# element by element, zeroing the gradient of frozen entries of a weight,
# or the *gradient reversal layer* of domain adaptation (Ganin and Lempitsky,
# 2015), an identity in the forward pass whose hook returns $-g$. A hook may
# return an array as well as a Variable. Here a hook clips the gradient of a
# parameter vector to $[-1, 1]$:

# %%
p = Variable(np.array([0.5, -2.0, 3.0]), name="p")
p.register_hook(lambda grad: np.clip(grad.data, -1.0, 1.0))
loss = (p * p * p).sum()  # gradient 3 p^2 = (0.75, 12, 27)
loss.backward()
print("p.grad =", p.grad)

# %% [markdown]
# Several hooks on one variable run in registration order, each seeing the
# result of the ones before; a hook that returns another shape or dtype is
# refused at once, naming the hook, in PyTorch's words, and a variable that
# does not require grad takes no hook (collapsed below).

# %% tags=["hide-cell"]
def first(grad):
    print(f"  first hook sees  {grad:.1f}, returns 10 times it")
    return grad * 10.0


def second(grad):
    print(f"  second hook sees {grad:.1f}")


x = Variable(np.array(1.0), name="x")
y = x * 3.0
y.register_hook(first)
y.register_hook(second)
y.backward()
print(f"x.grad = {x.grad:.1f}")

x = Variable(np.array([1.0, 2.0]), name="x")
x.register_hook(lambda grad: grad.sum())
try:
    (x * x).sum().backward()
except RuntimeError as error:
    print("RuntimeError:", error)
try:
    Variable(np.array(1.0), requires_grad=False).register_hook(print)
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## The order of hooks across variables
#
# Each variable's hooks run when its gradient is complete: for a non-leaf,
# when the engine takes its creator from the ready queue; for a leaf, as soon
# as its last contribution arrives. The order across variables is therefore
# the engine's order, which step 33 made PyTorch's (the newest ready function
# first). Hooks on every variable of step 33's branching example:

# %%
def record_hook_calls(named):
    """Register on each (name, variable) a hook that appends (name, gradient) to the returned list."""
    calls = []
    for name, v in named:
        v.register_hook(lambda grad, name=name: calls.append((name, grad.item())))
    return calls


x, w = Variable(np.array(0.5), name="x"), Variable(np.array(1.5), name="w")
s = tinypytorch.sin(x)
a = s * w
d = x - w
b = tinypytorch.exp(d)
ab = a * b
y = ab + a
named = [("x", x), ("w", w), ("s", s), ("a", a), ("d", d), ("b", b), ("ab", ab), ("y", y)]
calls = record_hook_calls(named)
y.backward()
print(" -> ".join(f"{name} {grad:.4f}" for name, grad in calls))

# %% [markdown]
# Every gradient arrives once and complete: `a` (used by `a * b` and by the
# final addition) appears once, after `ab`, and `x` (used by `sin` and by the
# subtraction) appears once, last, once both of its paths are done. The
# check at the end records the same list in PyTorch.
#
# ## `retain_grad`
#
# By default an intermediate variable's `.grad` stays `None` after `backward`
# (step 18; PyTorch does the same). `y.retain_grad()` asks for it to be kept,
# as it is for leaves: after the hooks have run, the engine adds the
# gradient into `y.grad`. PyTorch implements `retain_grad` as a hook that it
# always runs after the user's hooks; the package checks a flag at the same
# point (in `finish_output` above). Either way `.grad` holds the gradient as
# the hooks left it, whenever they were registered:

# %%
show_code(Variable.retain_grad, step=34)
x = Variable(np.array(2.0), name="x")
h = x * x
h.retain_grad()
h.register_hook(lambda grad: grad * 100.0)  # registered after retain_grad, still runs before it
y = h * 3.0
y.backward()
print(f"h.grad = {h.grad:.1f}  (3, times 100 by the hook)   x.grad = {x.grad:.1f}  (300 * 2x)")

# %% [markdown]
# `retain_grad()` on a leaf does nothing (a leaf keeps its gradient anyway)
# and, on a variable that does not require grad, raises, as in PyTorch.
# `backward(retain_grad=True)`, DeZero's switch from step 18, still keeps every
# intermediate gradient for one pass; `retain_grad()` is PyTorch's per-variable
# form of it.
#
# ## Hooks and `autograd.grad`
#
# `autograd.grad` (step 33's third exercise: gradients returned, not
# stored) runs the same engine, so hooks on the variables it reaches run too, and a hook on one of its inputs changes the gradient it
# returns, as in PyTorch. One corner differs: when an input of
# `autograd.grad` also lies on the path to another input, PyTorch returns
# that input's gradient as it was *before* its hooks ran (while passing the
# hooked gradient on to the other input); the package applies the hooks
# first, as in every other case.

# %%
x = Variable(np.array(2.0), name="x")
x.register_hook(lambda grad: grad * 10.0)
(gx,) = autograd.grad(x * x, x)
print(f"autograd.grad(x * x, x) with a hook that multiplies by 10: {gx:.1f}  (2x = 4, times 10)")

# %% [markdown]
# ## Check against PyTorch
#
# The branching example again, in both frameworks, with a hook on every
# variable; the hooks on `s` and `d` also modify the gradient ($\times 2$ and
# $\times (-0.5)$), `a` has `retain_grad()`, and there are two passes, the
# second after removing the hook on `w`. The lists of hook calls (name and
# gradient, in order), the leaves' gradients and `a.grad` must be equal.
# Then the same with `autograd.grad` with respect to `x` and `w`. The
# collapsed cell builds the example for either framework.

# %% tags=["hide-input"]
import torch  # noqa: E402


def run(m, make, backward):
    """The hooked branching example in framework m: (hook calls, [results of both passes..., a.grad])."""
    x, w = make(0.5), make(1.5)
    s = m.sin(x)
    a = s * w
    d = x - w
    b = m.exp(d)
    ab = a * b
    y = ab + a
    a.retain_grad()
    named = [("x", x), ("w", w), ("s", s), ("a", a), ("d", d), ("b", b), ("ab", ab), ("y", y)]
    calls = []
    handles = {}
    for name, v in named:
        handles[name] = v.register_hook(lambda grad, name=name: calls.append((name, float(grad.item()))))
    s.register_hook(lambda grad: grad * 2.0)
    d.register_hook(lambda grad: grad * -0.5)
    results = backward(y, x, w)
    handles["w"].remove()
    results += backward(y, x, w)
    return calls, [float(r.item()) for r in results] + [float(a.grad.item())]


def by_backward(y, x, w):
    y.backward(retain_graph=True)
    return [x.grad.clone(), w.grad.clone()]  # .grad adds up in place, in both frameworks


def by_grad(m):
    return lambda y, x, w: list(m.autograd.grad(y, [x, w], retain_graph=True))


def same(ours, theirs):
    """Equal hook calls (names in order, gradients) and equal results."""
    (calls, values), (calls_t, values_t) = ours, theirs
    assert [name for name, _ in calls] == [name for name, _ in calls_t], (calls, calls_t)
    np.testing.assert_allclose([g for _, g in calls], [g for _, g in calls_t], rtol=1e-14)
    np.testing.assert_allclose(values, values_t, rtol=1e-14)
    return len(calls)


def ours(v):
    return Variable(np.array(v))


def theirs(v):
    return torch.tensor(v, dtype=torch.float64, requires_grad=True)


# %%
n = same(run(tinypytorch, ours, by_backward), run(torch, theirs, by_backward))
m = same(run(tinypytorch, ours, by_grad(tinypytorch)), run(torch, theirs, by_grad(torch)))
print(f"backward: {n} hook calls, autograd.grad: {m}, in torch's order with torch's gradients")
print("PyTorch check passed: hook call order, hook-modified grads and retain_grad equal torch's")

# %% [markdown]
# ## Recap
#
# - `register_hook(hook)` attaches a function to a variable; the engine calls
#   it once per pass with the variable's complete gradient, and
#   `handle.remove()` detaches it.
# - A hook that returns a gradient replaces it: everything behind the
#   variable gets the new one.
# - A non-leaf's hooks run when its creator leaves the ready queue, before
#   its backward; a leaf's just before `.grad` is added to. So the order of
#   hooks is the engine's, which is PyTorch's.
# - `retain_grad()` keeps a non-leaf's gradient in `.grad`, as the hooks
#   left it.
#
# ## Exercises
#
# **1.** A *gradient reversal layer*: write `reverse_gradient(x)`, which
# returns a variable equal to `x` whose gradient, on its way back to `x`, is
# negated by a hook. Check it on $\sum \sin(x)$ against PyTorch with the same
# hook.

# %% tags=["hide-cell"]
def reverse_gradient(x):
    y = x * 1.0  # a new variable, so that the hook is on it and not on x
    y.register_hook(lambda grad: -grad)
    return y


x = Variable(np.array([0.0, 1.0, 2.0]))
tinypytorch.sin(reverse_gradient(x)).sum().backward()
xt = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
torch.sin(reverse_gradient(xt)).sum().backward()
print("x.grad =", x.grad, " equals torch's:", np.allclose(x.grad.data, xt.grad.numpy(), rtol=1e-15, atol=0))

# %% [markdown]
# **2.** Write `clip_norm_hook(max_norm)`, a hook that rescales a gradient
# whose Euclidean norm exceeds `max_norm` to that norm and leaves a smaller
# one alone. Put it on a parameter vector and compare its `.grad` with
# PyTorch's, the same hook on a tensor.

# %% tags=["hide-cell"]
def clip_norm_hook(max_norm):
    def hook(grad):
        norm = float((grad * grad).sum().item()) ** 0.5
        return grad * (max_norm / norm) if norm > max_norm else None

    return hook


q = Variable(np.array([0.5, -2.0, 3.0]))
q.register_hook(clip_norm_hook(1.0))
(q * q * q).sum().backward()  # gradient 3 p^2, norm about 29.6
pt = torch.tensor([0.5, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
pt.register_hook(clip_norm_hook(1.0))
(pt * pt * pt).sum().backward()
print(f"|q.grad| = {np.linalg.norm(q.grad.data):.6f}, equals torch's:",
      np.allclose(q.grad.data, pt.grad.numpy(), rtol=1e-14, atol=0))
