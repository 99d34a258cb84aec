# %% [markdown]
# # Step 36: Version counters and in-place operations
#
# Step 35 made every function keep exactly the tensors its backward needs.
# That opens a trap. A saved tensor is not a copy: it is the array the
# forward pass computed, shared with whoever else holds it. If that array is
# changed afterwards, *in place*, the backward pass computes with values the
# forward pass never saw, and returns a wrong gradient without a word.
#
# PyTorch closes the trap with a **version counter** on every tensor: each
# in-place operation adds one to it, every saved tensor remembers the version
# it was saved at, and unpacking a tensor whose version moved raises an
# error. This step adds in-place operations to the package (`add_`, `sub_`,
# `mul_`, `div_`, `zero_`, PyTorch's names: a trailing underscore means "in
# place") and the counter that guards them. Step 37 adds what views need.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Variable, inplace, views
from tinypytorch.autograd import graph
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The trap
#
# $c = b^2$ with $b = 2a$ saves $b$ for its gradient $\partial c/\partial b =
# 2b$. Change $b$ in place afterwards, and a backward pass that trusted the
# saved array would compute $2(b + 1)$: a gradient of a function nobody
# computed. Here is what the package says instead:

# %%
a = Variable(np.array([1.0, 2.0]), name="a")
b = a * 2
c = b * b
b.add_(1)
print("b after add_:", b, "  version:", b._version)
try:
    c.sum().backward()
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 100))

# %% [markdown]
# The message names the array (dtype and shape), which function made it
# (after `add_`, $b$ is the output of `Add`), and both versions. PyTorch's
# says the same ("...[torch.DoubleTensor [2]], which is output 0 of
# AddBackward0, is at version 1; expected version 0 instead"). The timeline:

# %% tags=["hide-input"]
def box(axis, x, y, text, color, width=1.9, height=0.62):
    axis.add_patch(plt.matplotlib.patches.FancyBboxPatch(
        (x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.04", facecolor=color,
        edgecolor="black", linewidth=0.8))
    axis.text(x, y, text, ha="center", va="center", fontsize=9)


fig, axis = plt.subplots(figsize=(8.5, 3.8))
events = [(0.0, "b = a * 2", "b's counter: 0"), (2.5, "c = b * b", "saves b\nat version 0"),
          (5.0, "b.add_(1)", "counter 0 → 1"), (7.5, "c.sum().backward()", "unpack: 1 ≠ 0\nRuntimeError")]
axis.step([-1.0, 5.0, 9.0], [0, 1, 1], where="post", color="C0", linewidth=2, label="b._version (the counter)")
axis.plot([2.5, 9.0], [0, 0], color="C1", linestyle="--", linewidth=2, label="version the SavedTensor remembers")
for x, code, what in events:
    box(axis, x, 2.1, code, "#e8f0fb" if x < 7 else "#fbe3e3")
    axis.text(x, 1.55, what, ha="center", va="top", fontsize=8.5)
    axis.axvline(x, ymin=0.08, ymax=0.55, color="gray", linewidth=0.6, linestyle=":")
axis.annotate("", xy=(7.5, 0.05), xytext=(7.5, 0.95), arrowprops=dict(arrowstyle="<->", color="C3"))
axis.text(7.65, 0.5, "compared\non unpack", fontsize=8.5, color="C3", va="center")
axis.set(xlim=(-1.2, 9.2), ylim=(-0.4, 2.6), yticks=[0, 1], xticks=[], ylabel="version",
         title="a saved tensor changed in place: the counter moves, the remembered version does not")
axis.legend(loc="upper center", fontsize=8.5, frameon=False, bbox_to_anchor=(0.5, 0.0), ncol=2)  # under the axes
for side in ("top", "right"):
    axis.spines[side].set_visible(False)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The counter
#
# A `VersionCounter` is one integer in a small object (in `tinypytorch.views`,
# with everything a variable knows about the memory it shares). Every Variable has
# one, and an in-place operation calls `increment_version` (PyTorch's name)
# after it wrote. A `SavedTensor` keeps a reference to the counter and its
# value at the time of saving, and compares the two on `unpack`:

# %%
show_code(views.VersionCounter, views.increment_version, step=36)
show_code(graph.SavedTensor.unpack, step=36)

# %% [markdown]
# ### What the counter cannot see: `.data`
#
# The counter counts in-place *operations*, the ones that go through the
# framework. Code that reaches past it to the array is not counted: assigning
# a new array to `x.data`, or writing into `x.data` itself. The same holds
# in PyTorch, whose `x.data` is documented as a tensor that shares the
# storage but not the version counter: `.data` bypasses the check. Whether
# the gradient is then right depends on what was saved:
#
# - a saved **output** is kept as its array (step 35); giving the output
#   Variable a new `.data` leaves that array alone, and the gradient is right;
# - a saved **input** is kept as the Variable, so backward reads whatever its
#   `.data` holds *now*, and the gradient is silently wrong;
# - writing *into* the array changes what every saved tensor sees: wrong too.

# %%
a = Variable(np.array([1.0, 2.0]), name="a")
b = a * 2
c = (b * b).sum()  # dc/da = 8a = [8, 16]
b.data = np.array([100.0, 200.0])  # not counted: b._version is still 0
c.backward()
print("after b.data = [100, 200]: a.grad =", a.grad, " (right: [8. 16.])")

# %% [markdown]
# PyTorch gives the same wrong `[400, 800]`. The remedy is the one door the
# counter watches: change values through an in-place operation, or through
# `detach()`, which shares the data *and* the counter, so that
# `b.detach().add_(1)` is caught. The descent loops of steps 26 and 28
# assign `.data` only after backward, when no graph waits for the old values,
# which is safe. The four cases in both frameworks:

# %% tags=["hide-input"]
import torch  # noqa: E402  (harness: the same cases in PyTorch)


def data_cases(m):
    """{case: the gradient of a, or 'raises'} in framework m ('ours' or 'torch'); a = [1, 2] throughout."""
    def leaf():
        return Variable(np.array([1.0, 2.0])) if m == "ours" else torch.tensor([1.0, 2.0], dtype=torch.float64,
                                                                               requires_grad=True)

    def array(values):
        return np.array(values) if m == "ours" else torch.tensor(values, dtype=torch.float64)

    exp = tinypytorch.exp if m == "ours" else torch.exp
    grad = (lambda t: t.grad.data) if m == "ours" else (lambda t: t.grad.numpy())
    cases = {}
    for case in ("input: b.data = new", "output: y.data = new", "input: written into b.data", "b.detach().add_(1)"):
        a = leaf()
        b = exp(a) if case.startswith("output") else a * 2
        c = b.sum() if case.startswith("output") else (b * b).sum()
        if case.endswith("= new"):
            b.data = array([100.0, 200.0])
        elif case.startswith("input: written"):
            b.data[...] += 1  # numpy and torch alike: into the array, past the framework
        else:
            b.detach().add_(1)
        try:
            c.backward()
            cases[case] = np.array(grad(a))
        except RuntimeError:
            cases[case] = "raises"
    return cases


RIGHT = {"input: b.data = new": [8.0, 16.0], "output: y.data = new": np.exp([1.0, 2.0]),
         "input: written into b.data": [8.0, 16.0], "b.detach().add_(1)": "raises"}
data_results = {m: data_cases(m) for m in ("ours", "torch")}
print(f"{'case (a = [1, 2])':28} {'tinypytorch':18} {'PyTorch':18} right?")
for case, right in RIGHT.items():
    ours, theirs = data_results["ours"][case], data_results["torch"][case]
    text = [o if isinstance(o, str) else np.array2string(o, precision=2, floatmode="fixed") for o in (ours, theirs)]
    correct = isinstance(right, str) and ours == right or not isinstance(right, str) and np.allclose(ours, right)
    print(f"{case:28} {text[0]:18} {text[1]:18} {'yes' if correct else 'NO: silently wrong'}")

# %% [markdown]
# ## In-place operations
#
# `x.add_(y)` writes $x + y$ into $x$'s own array and adds one to its
# version. When no gradient can flow (under `no_grad`, or when neither
# operand requires grad) that is all. Otherwise the operation is recorded like
# its out-of-place twin on an `alias` of $x$ (a Variable with $x$'s place in
# the graph), and $x$ then takes the result's place: later operations see
# the new value, and the gradient goes back through the addition to the old
# one, exactly as if we had written `x = x + y`.

# %%
show_code(inplace.apply, views.take_place, step=36)

# %%
a = Variable(np.array([1.0, 2.0, 3.0]), name="a")
b = a * 2
made_b = b.creator
b.mul_(3)
print("b =", b, "  version", b._version)
print("b's creator is a new Mul:", b.creator is not made_b, "  whose input is the old b:",
      b.creator.edges[0] == (made_b, 0))
(b * b).sum().backward()
print("a.grad =", a.grad, "  (b = 6a, d(b^2)/da = 72a)")

# %% [markdown]
# `b.mul_(w)` with a `w` that requires grad needs the old $b$ for $w$'s
# gradient, but the operation overwrites it. PyTorch copies the old value
# first in exactly that case (it calls it `original_self`), and so does
# `apply` (`needs_old`).
#
# ### Leaves that require grad
#
# A leaf that requires grad may not be changed in place while gradients are
# recorded, as in PyTorch: its `.grad` would be the gradient of a value it
# no longer holds. Under `no_grad` it may, and that is how the optimizers
# update parameters (`param.sub_(lr * grad)`, step 32's `SGD` now). The
# version moves all the same, so a graph that saved a parameter before a step
# cannot silently use the stepped value.

# %%
w = Variable(np.array([0.5, -1.0]), name="w")
try:
    w.add_(1.0)
except RuntimeError as error:
    print("RuntimeError:", error)
with tinypytorch.no_grad():
    w.sub_(0.1)
print("under no_grad:", w, " version", w._version)

# %% [markdown]
# ## More cases
#
# The rule to check is simple to state: wherever PyTorch raises, the package
# raises; wherever PyTorch computes, the gradients are equal. Never a silent
# wrong gradient through an in-place operation. The hidden cell runs a dozen
# scenarios in both frameworks (the tests run them on every backend). Three
# worth reading:
#
# - `unsaved_input_changed`: $c = b + 1$ saved nothing, so changing $b$
#   afterwards harms no one, and both frameworks compute.
# - `saved_input_changed_under_no_grad`: `no_grad` does not make an in-place
#   change invisible; the version still moves, and the saved $b$ is refused.
# - `constant_takes_a_gradient`: adding a Variable that requires grad into a
#   constant makes the constant part of the graph; it now requires grad.

# %% tags=["hide-input"]
class Ours:
    leaf = staticmethod(lambda values, requires_grad=True: Variable(np.array(values), requires_grad=requires_grad))
    exp, no_grad = staticmethod(tinypytorch.exp), staticmethod(tinypytorch.no_grad)
    grad = staticmethod(lambda t: t.grad.data)


class Torch:
    leaf = staticmethod(lambda values, requires_grad=True: torch.tensor(values, dtype=torch.float64,
                                                                        requires_grad=requires_grad))
    exp, no_grad = staticmethod(torch.exp), staticmethod(torch.no_grad)
    grad = staticmethod(lambda t: t.grad.numpy())


def saved_output_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    y = m.exp(a)
    y.add_(1)
    y.sum().backward()
    return [a]


def saved_input_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b
    b.add_(1)
    c.sum().backward()
    return [a]


def unsaved_input_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b + 1
    b.add_(1)
    c.sum().backward()
    return [a]


def changed_then_used(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    b.mul_(3)
    (b * b).sum().backward()
    return [a]


def mul_by_a_leaf(m):
    a, w = m.leaf([1.0, 2.0, 3.0]), m.leaf([0.5, -1.0, 2.0])
    b = a * 2
    b.mul_(w)
    (b * b).sum().backward()
    return [a, w]


def div_by_a_leaf(m):
    a, w = m.leaf([1.0, 2.0, 3.0]), m.leaf([0.5, -1.0, 2.0])
    b = a * 2
    b.div_(w)
    (b * b).sum().backward()
    return [a, w]


def leaf_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    a.add_(1)
    return [a]


def leaf_changed_under_no_grad(m):
    a = m.leaf([1.0, 2.0, 3.0])
    with m.no_grad():
        a.sub_(0.5)
    (a * a).sum().backward()
    return [a]


def saved_leaf_changed_under_no_grad(m):
    a = m.leaf([1.0, 2.0, 3.0])
    c = a * a
    with m.no_grad():
        a.sub_(0.5)
    c.sum().backward()
    return [a]


def constant_takes_a_gradient(m):
    a, c = m.leaf([1.0, 2.0, 3.0]), m.leaf([0.0, 0.0, 0.0], requires_grad=False)
    c.add_(a)
    (c * c).sum().backward()
    return [a]


def zero_of_a_non_leaf(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    b.zero_()
    (b + a * a).sum().backward()
    return [a]


def saved_input_changed_under_no_grad(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b
    with m.no_grad():
        b.add_(1)
    c.sum().backward()
    return [a]


def detached_copy_changed(m):
    a = m.leaf([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b
    b.detach().add_(1)
    c.sum().backward()
    return [a]


SCENARIOS = [saved_output_changed, saved_input_changed, unsaved_input_changed, changed_then_used,
             mul_by_a_leaf, div_by_a_leaf, leaf_changed, leaf_changed_under_no_grad, saved_leaf_changed_under_no_grad,
             constant_takes_a_gradient, zero_of_a_non_leaf, saved_input_changed_under_no_grad, detached_copy_changed]


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


print(f"{'scenario':36} both frameworks")
results = {scenario.__name__: compare(scenario) for scenario in SCENARIOS}
for name, (what, _) in results.items():
    print(f"{name:36} {what}")

# %% [markdown]
# ## Check against PyTorch
#
# The trap of the first section in PyTorch: the same versions in the
# message, and the same function named. The scenarios above and the `.data`
# cases agree as well (the hidden cells assert it).

# %%
at = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
bt = at * 2
ct = bt * bt
bt.add_(1)
errors = [outcome(saved_input_changed, Ours)]
try:
    ct.sum().backward()
except RuntimeError as error:
    errors.append(error)
for error in errors:
    assert "which is output 0 of Add" in str(error)
    assert "is at version 1; expected version 0 instead" in str(error)
assert len(errors) == 2 and all(agree for _, agree in results.values())
for case in RIGHT:
    ours, theirs = data_results["ours"][case], data_results["torch"][case]
    assert ours == theirs if isinstance(ours, str) else np.allclose(ours, theirs, rtol=1e-14)
print("both messages: output 0 of Add, at version 1, expected version 0")
print("PyTorch check passed: the version check raises where torch's does, in-place gradients equal torch's")

# %% [markdown]
# ## Recap
#
# - A saved tensor is the forward pass's own array; changing it in place
#   would make backward compute a wrong gradient silently.
# - Every Variable has a version counter; in-place operations (`add_`,
#   `sub_`, `mul_`, `div_`, `zero_`) call `increment_version`, and a
#   `SavedTensor` whose counter moved since saving refuses to unpack.
# - A recorded in-place operation runs its out-of-place twin on an alias and
#   gives the variable the result's place in the graph.
# - A leaf that requires grad may change in place only under `no_grad`, as
#   optimizer steps do; its version moves anyway.
# - `.data` bypasses the counter, in PyTorch too: a saved input read through
#   a reassigned `.data` gives a silently wrong gradient.
#
# ## Exercises
#
# **1.** Write `clamp_(x, low, high)`: clip $x$ to $[\text{low},
# \text{high}]$ in place, the package's way (`inplace.check_writable`, then
# `inplace.write`, which counts the change), only where no gradient is
# recorded, like an optimizer's weight clipping. Show that a graph that saved
# a parameter refuses to use it after clipping.

# %% tags=["hide-cell"]
def clamp_(x, low, high):
    inplace.check_writable("clamp_", x)
    if tinypytorch.is_grad_enabled() and x.requires_grad:
        raise RuntimeError("clamp_: only where no gradient is recorded (under no_grad)")
    inplace.write("clamp_", x, tinypytorch.cuda.get_array_module(x.data).clip(x.data, low, high))
    return x


p = Variable(np.array([-2.0, 0.5, 3.0]), name="p")
loss = (p * p).sum()  # saves p
with tinypytorch.no_grad():
    clamp_(p, -1.0, 1.0)
print("p =", p, " version", p._version)
try:
    loss.backward()
except RuntimeError as error:
    print("RuntimeError: ...", str(error).split("], ")[1].split(".")[0])

# %% [markdown]
# **2.** Write a *recorded* `exp_(x)`: where a gradient can flow, run
# `tinypytorch.exp` on `inplace.alias(x)` and hand the result to
# `inplace.record`; elsewhere just write. Check the gradient of
# $\sum (e^{2a})^2$ through it, $4e^{4a}$.

# %% tags=["hide-cell"]
def exp_(x):
    inplace.check_writable("exp_", x)
    if not (tinypytorch.is_grad_enabled() and x.requires_grad):
        inplace.write("exp_", x, tinypytorch.cuda.get_array_module(x.data).exp(x.data))
        return x
    return inplace.record("exp_", x, tinypytorch.exp(inplace.alias(x)))


a = Variable(np.array([0.0, 0.5]), name="a")
b = a * 2
exp_(b)
(b * b).sum().backward()
print("b =", b, " version", b._version, " creator", type(b.creator).__name__)
print("a.grad =", np.array2string(a.grad.data, precision=4, floatmode="fixed"), "  4 e^(4a) =",
      np.array2string(4 * np.exp(4 * a.data), precision=4, floatmode="fixed"))
