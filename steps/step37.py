# %% [markdown]
# # Step 37: Views and in-place changes
#
# Step 36 gave every Variable a version counter, so that a saved tensor
# changed in place is caught. But one array's memory may belong to several
# Variables. `reshape`, `transpose` (and `permute`, `.T`) and basic indexing
# (integers, slices) return **views**: NumPy arrays that share their base's
# memory. A change through a view is a change of its base, and the other way
# round. This step makes the package follow PyTorch there:
#
# - views share their base's version counter;
# - a view changed in place moves its **base** in the graph (PyTorch's
#   `CopySlices` node, the package's `ViewScatter`);
# - the other views of that base are rebuilt before they are used.

# %%
import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, inplace, views
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## Views share memory, and the counter
#
# Because a view and its base are one memory, they share one version
# counter: a change through either invalidates a tensor saved through
# either. `detach()` shares data and counter too (step 36). Advanced indexing
# such as `b[[0, 2]]`, and a `reshape` NumPy cannot do without copying, make
# copies, with counters of their own.

# %%
b = Variable(np.array([1.0, 2.0, 3.0]), requires_grad=False)
v = b[1:]
t = b.reshape(3, 1)
c = b[[0, 2]]
v.mul_(10.0)
print("b =", b, " versions: b", b._version, " v", v._version, " t", t._version, " b[[0, 2]]", c._version)
print("the counter object is shared:", v.version_counter is b.version_counter is t.version_counter)

# %% [markdown]
# The functions that may return a view (`Reshape`, `Transpose`, `GetItem`)
# say so with a class flag, `is_view = True`. After such a function ran,
# `Function.__call__` hands its output to `views.track_view`: if the output really
# shares the input's memory, it gets the input's counter and a small `View`
# record, which remembers the base and how to make the view from it.

# %%
show_code(views.track_view, step=37)

# %% [markdown]
# ## An in-place change through a view moves the base
#
# Take $b = 2a$ and its view `row = b[0:2]`, and multiply `row` by 3 in
# place. $b$ is now $[6a_0, 6a_1, 2a_2]$: the base changed too, so its place
# in the graph must move, not only the view's. PyTorch gives the base a new
# creator, `CopySlices`: "the old base, with the view's part replaced by the
# new values". The package's `ViewScatter` is the same node:

# %% tags=["hide-input"]
from matplotlib.patches import FancyBboxPatch  # noqa: E402  (harness: the picture)


def node(axis, x, y, text, kind):
    color = {"variable": "#e8f0fb", "function": "#fdf0d5", "new": "#fbe3e3"}[kind]
    style = "round,pad=0.05" if kind == "variable" else "square,pad=0.05"
    axis.add_patch(FancyBboxPatch((x - 0.62, y - 0.22), 1.24, 0.44, boxstyle=style, facecolor=color,
                                  edgecolor="C3" if kind == "new" else "black", linewidth=0.8))
    axis.text(x, y, text, ha="center", va="center", fontsize=8.5)


def edge_point(centre, towards):
    """Where the line from a box's centre towards another point leaves the box (half-sizes 0.67 x 0.27)."""
    dx, dy = towards[0] - centre[0], towards[1] - centre[1]
    t = min(0.67 / abs(dx) if dx else np.inf, 0.27 / abs(dy) if dy else np.inf)
    return centre[0] + t * dx, centre[1] + t * dy


def arrow(axis, start, end, color="black"):
    axis.annotate("", xy=edge_point(end, start), xytext=edge_point(start, end),
                  arrowprops=dict(arrowstyle="->", color=color, shrinkA=0, shrinkB=0))


fig, axis = plt.subplots(figsize=(8, 3.6))
before = {"a": (0.7, 2.3, "a (leaf)", "variable"), "mul": (0.7, 1.45, "Mul (× 2)", "function"),
          "b": (0.7, 0.6, "b", "variable"), "get": (2.2, 0.6, "GetItem [0:2]", "function"),
          "row": (2.2, -0.25, "row", "variable")}
after = {"a": (4.2, 2.3, "a (leaf)", "variable"), "mul": (4.2, 1.45, "Mul (× 2)", "function"),
         "old": (4.2, 0.6, "b, version 0", "variable"), "get0": (5.7, 0.6, "GetItem [0:2]", "function"),
         "mul3": (5.7, -0.25, "Mul (× 3)", "function"), "scatter": (7.3, 1.45, "ViewScatter\n(CopySlices)", "new"),
         "b": (7.3, 2.3, "b, version 1", "variable"), "get1": (8.8, 2.3, "GetItem [0:2]", "new"),
         "row": (8.8, 1.45, "row", "variable")}
for nodes in (before, after):
    for x, y, text, kind in nodes.values():
        node(axis, x, y, text, kind)
for one, two in (("a", "mul"), ("mul", "b"), ("b", "get"), ("get", "row")):
    arrow(axis, before[one][:2], before[two][:2])
for one, two in (("a", "mul"), ("mul", "old"), ("old", "get0"), ("get0", "mul3")):
    arrow(axis, after[one][:2], after[two][:2])
for one, two in (("old", "scatter"), ("mul3", "scatter"), ("scatter", "b"), ("b", "get1"), ("get1", "row")):
    arrow(axis, after[one][:2], after[two][:2], color="C3")
axis.axvline(3.2, color="gray", linewidth=0.6)
axis.text(1.45, 2.85, "before: b = a * 2; row = b[0:2]", ha="center", fontsize=9.5)
axis.text(6.5, 2.85, "after row.mul_(3): new nodes and edges in red", ha="center", fontsize=9.5)
axis.text(6.6, -0.25, "the view's new values", fontsize=8, va="center")
axis.set(xlim=(0, 9.6), ylim=(-0.6, 3.05))
axis.axis("off")
fig.tight_layout()
plt.show()

# %% [markdown]
# Arrows point from input to output. The old $b$ keeps its creator, and both
# it and the view's new values feed `ViewScatter`, whose output is $b$ now.
# `row` itself is made again from the new $b$. Backward sends $b$'s gradient
# to the old base with the view's part zeroed (those old values were
# overwritten), and the view's part to the new values:

# %%
show_code(inplace.ViewScatter, inplace.rebase_view, step=37)

# %%
a = Variable(np.array([1.0, 2.0, 3.0]), name="a")
b = a * 2
row = b[0:2]
row.mul_(3)  # b = [6a0, 6a1, 2a2]
print("b =", b)
print("b.creator:", type(b.creator).__name__, " row.creator:", type(row.creator).__name__)
(b * b).sum().backward()
print("a.grad =", a.grad, "  (72 a0, 72 a1, 8 a2)")

# %% [markdown]
# ## Other views are rebuilt
#
# Any other view of the same base is out of date after that: its graph still
# starts at the old base. The view's `View` record keeps the base's version
# at the time the view's graph was made; when a view is next used as the
# input of a function (or changed in place), `refresh_view` compares it with
# the counter and, if it moved, makes the view's graph again from the base,
# as PyTorch does.

# %%
show_code(views.refresh_view, step=37)

# %% [markdown]
# Two overlapping views: after $v$ = `b[0:2]` is tripled, $w$ = `b[1:3]`
# holds one changed value, $6a_1$. Its gradient must account for the factor
# 3: $\partial \sum w^2 / \partial a = [0, 72a_1, 8a_2]$.

# %%
a = Variable(np.array([1.0, 2.0, 3.0]), name="a")
b = a * 2
v, w = b[0:2], b[1:3]
v.mul_(3)
(w * w).sum().backward()
print("w =", w)
print("a.grad =", a.grad, "  (0, 72 a1, 8 a2)")

# %% [markdown]
# ### A view of a leaf that requires grad
#
# Step 36 refused to change a leaf that requires grad in place. A view of
# such a leaf is refused for the same reason: the change would be the
# leaf's.

# %%
w = Variable(np.array([0.5, -1.0]), name="w")
try:
    w[0:1].mul_(2.0)
except RuntimeError as error:
    print("RuntimeError:", error)

# %% [markdown]
# ## More cases
#
# The hidden cell runs the view scenarios in both frameworks: where PyTorch
# raises, the package raises, and otherwise the gradients are equal. Two
# worth reading:
#
# - `saved_view_base_changed`: $c = (b_{1:})^2$ saved the view; changing the
#   base bumps the shared counter, so the saved view is refused.
# - `transposed_view_squared`: `v.mul_(v)` multiplies a view by itself. The
#   multiplication saves its operand, `v`, for the gradient, and then
#   changes it: refused in both frameworks.

# %% tags=["hide-input"]
import torch  # noqa: E402  (harness: the same scenarios in PyTorch)


class Ours:
    leaf = staticmethod(lambda values, requires_grad=True: Variable(np.array(values), requires_grad=requires_grad))
    exp = staticmethod(tinypytorch.exp)
    grad = staticmethod(lambda t: t.grad.data)


class Torch:
    leaf = staticmethod(lambda values, requires_grad=True: torch.tensor(values, dtype=torch.float64,
                                                                        requires_grad=requires_grad))
    exp = staticmethod(torch.exp)
    grad = staticmethod(lambda t: t.grad.numpy())


def slice_of_a_non_leaf(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    b[0:2].mul_(3)
    (b * b).sum().backward()
    return [a]


def element_of_a_non_leaf(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    b[1].mul_(5)
    (b * b).sum().backward()
    return [a]


def reshaped_non_leaf(m):
    a = m.leaf([[1.0, 2.0], [3.0, 4.0]])
    b = a * 2
    b.reshape(4).add_(1)
    (b * b).sum().backward()
    return [a]


def transposed_view_squared(m):
    a = m.leaf([[1.0, 2.0], [3.0, 4.0]])
    b = a * 2
    v = b.T
    v.mul_(v)
    (b * a).sum().backward()
    return [a]


def saved_view_base_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b[1:] * b[1:]
    b.add_(1)
    c.sum().backward()
    return [a]


def saved_base_view_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b
    b[0:2].add_(1)
    c.sum().backward()
    return [a]


def view_of_a_leaf(m):
    a = m.leaf([1.0, 2.0, 3.0])
    a[0:2].add_(1)
    return [a]


def overlapping_views(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    v, w = b[0:2], b[1:3]
    v.mul_(3)
    (w * w).sum().backward()
    return [a]


def view_of_a_view_changed(m):
    a = m.leaf([[1.0, 2.0], [3.0, 4.0]])
    b = a * 2
    b.T[0].mul_(3)
    (b * b).sum().backward()
    return [a]


def advanced_index_copy_unaffected(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b[[0, 2]] * b[[0, 2]]
    b.add_(1)
    c.sum().backward()
    return [a]


SCENARIOS = [slice_of_a_non_leaf, element_of_a_non_leaf, reshaped_non_leaf, transposed_view_squared,
             saved_view_base_changed, saved_base_view_changed, view_of_a_leaf, overlapping_views,
             view_of_a_view_changed, advanced_index_copy_unaffected]


def outcome(scenario, m):
    """The gradients of the scenario's leaves, or the RuntimeError it raised."""
    try:
        return [m.grad(leaf) for leaf in scenario(m)]
    except RuntimeError as error:
        return error


def compare(scenario):
    ours, theirs = outcome(scenario, Ours), outcome(scenario, Torch)
    if isinstance(ours, RuntimeError) or isinstance(theirs, RuntimeError):
        agree = isinstance(ours, RuntimeError) and isinstance(theirs, RuntimeError)
        return "raises" if agree else "DIFFERENT", agree
    agree = all(np.allclose(o, t, rtol=1e-14, atol=0) for o, t in zip(ours, theirs, strict=True))
    return "computes, equal gradients" if agree else "DIFFERENT", agree


print(f"{'scenario':34} both frameworks")
results = {scenario.__name__: compare(scenario) for scenario in SCENARIOS}
for name, (what, _) in results.items():
    print(f"{name:34} {what}")

# %% [markdown]
# ## Check against PyTorch
#
# The slice example in PyTorch: `b`'s new creator is `CopySlices`, and the
# gradients are equal. The scenarios above agree as well.

# %%
at = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
bt = at * 2
bt[0:2].mul_(3)
(bt * bt).sum().backward()
print("torch: b.grad_fn is", type(bt.grad_fn).__name__, "  a.grad =", at.grad.numpy())
ours = outcome(slice_of_a_non_leaf, Ours)[0]
np.testing.assert_allclose(ours, at.grad.numpy(), rtol=1e-14, atol=0)
assert type(bt.grad_fn).__name__ == "CopySlices" and all(agree for _, agree in results.values())
print("PyTorch check passed: in-place changes through views: torch's gradients, and raise where torch's do")

# %% [markdown]
# ## Recap
#
# - `reshape`, `transpose` and basic indexing return views: the same memory,
#   and the same version counter as their base.
# - A view changed in place changes its base; the base gets a new creator,
#   `ViewScatter` (PyTorch's `CopySlices`): the old base with the view's part
#   replaced by the new values.
# - Its backward sends the base's gradient to the old base with the view's
#   part zeroed, and the view's part to the new values.
# - Every other view remembers the base's version its graph was made at, and
#   `refresh_view` makes its graph again before it is used.
# - A view of a leaf that requires grad is refused, like the leaf.
#
# ## Exercises
#
# **1.** Predict, then check: which of these raise in PyTorch, and does the
# package agree? With `a` a leaf of three values that requires grad:
#
# - (A) `b = a * 2; v = b[1:]; b.mul_(2); (v * v).sum().backward()`
# - (B) `b = a * 2; v = b[1:]; c = v * v; b.mul_(2); c.sum().backward()`
# - (C) `b = a * 2; c = exp(b); b[0:1].zero_(); c.sum().backward()`
# - (D) `a.reshape(3, 1)[0].mul_(2)`

# %% tags=["hide-cell"]
PREDICTIONS = {"A": "computes", "B": "raises", "C": "computes", "D": "raises"}


def quiz(case, m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    if case == "A":
        v = b[1:]
        b.mul_(2)  # v is rebuilt from the new b before v * v
        (v * v).sum().backward()
    elif case == "B":
        v = b[1:]
        c = v * v  # saves the view, whose counter is b's
        b.mul_(2)
        c.sum().backward()
    elif case == "C":
        c = m.exp(b)  # exp saves its output, not b
        b[0:1].zero_()
        c.sum().backward()
    else:
        a.reshape(3, 1)[0].mul_(2)
    return [a]


for case, predicted in PREDICTIONS.items():
    found = ["raises" if isinstance(outcome(lambda m: quiz(case, m), fw), RuntimeError) else "computes"
             for fw in (Ours, Torch)]
    print(f"({case}) predicted {predicted:8}  tinypytorch {found[0]:8}  PyTorch {found[1]}")

# %% [markdown]
# **2.** Build the CopySlices node by hand: for `base` of four values and
# `value` of two, `inplace.ViewScatter(lambda t: t[1:3])(base, value)` is
# the base with `value` written into elements 1 and 2. Compare it, and the
# gradients of its weighted sum, with PyTorch's `torch.slice_scatter`.

# %% tags=["hide-cell"]
def scatter_by_hand(base_values, value_values, weights):
    base, value = Variable(np.array(base_values)), Variable(np.array(value_values))
    out = inplace.ViewScatter(lambda t: t[1:3])(base, value)
    (out * Variable(np.array(weights), requires_grad=False)).sum().backward()
    return out.data, base.grad.data, value.grad.data


out, base_grad, value_grad = scatter_by_hand([1.0, 2.0, 3.0, 4.0], [20.0, 30.0], [1.0, 2.0, 3.0, 4.0])
print("out =", out, " base.grad =", base_grad, " value.grad =", value_grad)
