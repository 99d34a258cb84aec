# %% [markdown]
# # Step 58: What a mode promises: inference_mode, .data and .detach()
#
# Step 57 switched recording on and off. But a tensor made under
# `no_grad` still gets the bookkeeping of steps 36 and 37: a version
# counter, so that backward can tell when a saved tensor was changed in
# place, and, for a view, a record of its base. `no_grad` keeps them in
# case the tensor is used later in a computation that records.
# `inference_mode` promises that it will not be, and skips both: its
# tensors are *inference tensors*, and PyTorch enforces the promise with
# errors that the package reproduces. The page ends with the oldest trap
# in PyTorch, already met in step 36: `.data` against `.detach()`, the
# same values, with the version counter shared or escaped.

# %%
import contextlib
import re
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import torch

import tinypytorch as tp
from tinypytorch import grad_mode
from tinypytorch.utils.listing import show_code

torch.set_num_threads(1)


# %% tags=["hide-input"]
def key(error):
    """An error's type and the key phrase of its message: the words before the first '.' or ':'."""
    return f"{type(error).__name__}: {re.split(r'[.:]', str(error))[0]}"


# %% [markdown]
# ## inference_mode: no graph, and no bookkeeping either
#
# Tensors made inside `inference_mode` have no version counter and no
# view record. Inside the mode even `enable_grad` records nothing;
# `inference_mode(False)` turns both off again. The counter of open
# blocks is a speed shortcut: while no thread is in the mode, making a
# tensor does not read the thread-local flag (`InferenceMode.enabled`).

# %%
show_code(grad_mode.inference_mode)

# %%
w = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
with tp.inference_mode():
    x = w * 2
    print("made inside:", "is_inference", x.is_inference(), "| requires_grad", x.requires_grad,
          "| counter", x.version_counter, "| a view's record", x[0:2].view_record)
print("a normal tensor's view outside keeps a record:", w[0:2].view_record is not None)

# %% [markdown]
# The promise is enforced: with no counter, backward could not tell if an
# inference tensor had changed since it was saved, so PyTorch refuses to
# save one, to change one in place outside the mode, or to make one
# require grad (nor does it give its `_version`). The package raises the
# same errors, in PyTorch's words:

# %%
attempts = [lambda fw, x: x * fw.tensor([1.0, 1.0, 1.0], requires_grad=True),  # saves x for w's gradient
            lambda fw, x: x.add_(1)]  # an in-place change outside the mode
for attempt in attempts:
    for fw in (torch, tp):
        with fw.inference_mode():
            x = fw.tensor([1.0, 2.0, 3.0])
        try:
            attempt(fw, x)
        except RuntimeError as error:
            lines = textwrap.wrap(str(error), 94)
            print(f"{fw.__name__:12}", lines[0], *(f"\n{'':12} {line}" for line in lines[1:]))
    print()

# %% [markdown]
# Only the path of a file differs (`tinypytorch.no_grad()` where torch
# says `torch.no_grad()`). What *is* allowed outside the mode: using an
# inference tensor where nothing is saved of it (`x + w`), and
# `x.clone()`, a normal tensor with a fresh counter.
#
# ## Three modes side by side
#
# The table below asks each mode five questions about a tensor `y = w * 2`
# made inside it, `w` requiring grad: does it record a graph, does `y`
# count versions, does a view of `y` keep its base, may `y` be saved for
# a backward pass later, is it an inference tensor?

# %% tags=["hide-input"]
def probe(fw, mode):
    """What a mode does, asked of the framework: five yes/no answers."""
    w = fw.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with mode(fw):
        y = w * 2
        view = y[0:2]
    try:
        counted = y._version == 0
    except RuntimeError:
        counted = False
    try:
        (y * fw.tensor([1.0, 1.0, 1.0], requires_grad=True)).sum().backward()
        savable = True
    except RuntimeError:
        savable = False
    return {"records a graph": y.grad_fn is not None,
            "counts versions": counted, "views keep their base": view._base is not None,
            "may be saved later": savable, "inference tensors": y.is_inference()}


MODES = {"grad enabled": lambda fw: fw.enable_grad(), "no_grad": lambda fw: fw.no_grad(),
         "inference_mode": lambda fw: fw.inference_mode()}


def modes_picture(table):
    """The modes (rows) against what each does (columns): green yes, grey no."""
    columns = list(next(iter(table.values())))
    fig, axis = plt.subplots(figsize=(8, 2.2))
    for r, (mode, answers) in enumerate(table.items()):
        axis.text(-0.1, -r, mode, ha="right", va="center", fontsize=9, family="monospace")
        for c, column in enumerate(columns):
            axis.add_patch(plt.Rectangle((c + 0.05, -r - 0.4), 0.9, 0.8, color="C2" if answers[column] else "0.85"))
            axis.text(c + 0.5, -r, "yes" if answers[column] else "no", ha="center", va="center", fontsize=9)
    for c, column in enumerate(columns):
        axis.text(c + 0.5, 0.6, column.replace(" ", "\n", 1), ha="center", va="bottom", fontsize=8.5)
    axis.set(xlim=(-1.6, len(columns)), ylim=(-len(table) + 0.4, 1.6))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


mode_table = {name: probe(tp, mode) for name, mode in MODES.items()}
modes_picture(mode_table)

# %% [markdown]
# Each cell above was asked of the package just now (the check at the end
# asks torch the same). `no_grad` and `inference_mode` differ only in the
# three right-hand columns: what a tensor made in the mode may do later.
# What the bookkeeping saved costs in time is measured in
# `bench/results/grad_modes.md`, a forward pass of a small MLP in each
# mode, against torch's.
#
# ## A view made inside inference mode
#
# A view of a *normal* tensor made inside the mode is not an inference
# tensor: it shares its base's counter and requires grad as its base
# does. But nothing recorded how it was made, so outside the mode, where
# recording is on, an in-place change to it could not be replayed on the
# base's graph (step 37's rebasing): PyTorch forbids it if the view
# requires grad, and so does the package. Inside the mode the same change
# is allowed, since nothing records there.

# %%
def view_made_inside(fw):
    base = fw.tensor([1.0, 2.0, 3.0], requires_grad=True) * 1  # a normal tensor, not a leaf
    with fw.inference_mode():
        view = base[0:2]
    return base, view


view_facts = {}
for fw in (torch, tp):
    base, view = view_made_inside(fw)
    facts = {"inference tensor": view.is_inference(), "requires grad": view.requires_grad,
             "shares the counter": view._version == base._version}
    with fw.inference_mode():
        view.mul_(2)
    facts["mul_ inside the mode"] = f"allowed, the base's version is now {base._version}"
    try:
        view.mul_(2)
    except RuntimeError as error:
        facts["mul_ outside the mode"] = key(error).removeprefix("RuntimeError: ")
    view_facts[fw.__name__] = facts
for name, fact in view_facts["tinypytorch"].items():
    print(f"{name:21} {fact}")
assert view_facts["tinypytorch"] == view_facts["torch"]


# %% tags=["hide-input"]
def view_picture(facts):
    """The base, a view of it made inside inference mode, and the two in-place changes: inside and outside."""
    fig, axis = plt.subplots(figsize=(8, 2.4))
    boxes = [(1.2, 1.0, "base (normal)\nrequires grad"), (4.0, 1.0, "view = base[0:2]\nmade in inference_mode"),
             (1.2, -0.4, "shared\nversion counter")]
    for x, y, text in boxes:
        axis.text(x, y, text, ha="center", va="center", fontsize=9, bbox=dict(boxstyle="round", fc="white", ec="0.5"))
    axis.annotate("", xy=(2.1, 1.0), xytext=(2.95, 1.0), arrowprops=dict(arrowstyle="->"))
    axis.text(2.52, 1.28, "a view of it,\nno record of how", ha="center", va="bottom", fontsize=8, color="C3")
    axis.annotate("", xy=(1.2, -0.05), xytext=(1.2, 0.6), arrowprops=dict(arrowstyle="->", color="C1"))
    axis.annotate("", xy=(1.9, -0.3), xytext=(3.6, 0.6), arrowprops=dict(arrowstyle="->", color="C1"))
    outside = facts["mul_ outside the mode"]
    axis.text(6.6, 1.15, "view.mul_(2) inside the mode:\nallowed", ha="center", va="center", fontsize=8.5,
              bbox=dict(boxstyle="round", fc="#d9f0d9", ec="C2"))
    axis.text(6.6, -0.25, "view.mul_(2) outside:\n" + "\n".join(textwrap.wrap(outside, 30)), ha="center",
              va="center", fontsize=8.5, bbox=dict(boxstyle="round", fc="#f6d5d5", ec="C3"))
    axis.set(xlim=(0, 8.2), ylim=(-1.2, 1.8))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


view_picture(view_facts["tinypytorch"])

# %% [markdown]
# ## .data against .detach()
#
# Both give the tensor's values without its history, sharing the same
# memory. The difference is the version counter. `.detach()` is a new
# tensor that *shares* the counter (step 36), so a change through it is
# seen by every graph that saved the original. `.data` escapes the counter:
# in PyTorch it is a tensor with a counter of its own; in tinypytorch it is
# the array itself. Here `b` is saved by `b * b`, then changed by 1:

# %%
def through_data(fw):
    a = fw.tensor([1.0, 2.0, 3.0], dtype=fw.float64, requires_grad=True)
    b = a * 1
    c = (b * b).sum()  # saves b: dc/da = 2b
    b.data += 1  # nothing counts this change
    c.backward()
    return a.grad


def through_detach(fw):
    a = fw.tensor([1.0, 2.0, 3.0], dtype=fw.float64, requires_grad=True)
    b = a * 1
    c = (b * b).sum()
    b.detach().add_(1)  # the shared counter goes to 1
    c.backward()


for fw in (torch, tp):
    try:
        through_detach(fw)
    except RuntimeError as error:
        found = [re.search(p, str(error)).group() for p in ("modified by an inplace operation",
                                                            r"is at version \d+; expected version \d+")]
        print(f"{fw.__name__:11} .detach(): raises '... {found[0]} ... {found[1]}'")
    grad = np.asarray(through_data(fw).detach()).tolist()
    print(f"{fw.__name__:11} .data:      a.grad = {grad}, silently")
print("the right gradient, 2a:", [2.0, 4.0, 6.0])


# %% tags=["hide-input"]
def data_detach_picture():
    """b, b.detach() and b.data: one array, and which of them share b's version counter."""
    fig, axis = plt.subplots(figsize=(8, 2.1))
    axis.add_patch(plt.Rectangle((3.2, 0.8), 1.6, 0.6, color="C0", alpha=0.3))
    axis.text(4.0, 1.1, "the array [2, 3, 4]", ha="center", va="center", fontsize=9)
    axis.add_patch(plt.Rectangle((3.2, -0.9), 1.6, 0.6, color="C1", alpha=0.3))
    axis.text(4.0, -0.6, "b's version counter: 1", ha="center", va="center", fontsize=9)
    for x, name, counted in [(1.0, "b.detach()", True), (4.0, "b (saved at version 0)", True),
                             (7.0, "b.data", False)]:
        axis.text(x, 0.25, name, ha="center", va="center", fontsize=9, family="monospace",
                  bbox=dict(boxstyle="round", fc="white", ec="0.5"))
        axis.annotate("", xy=(4.0 + (x - 4) * 0.2, 0.8), xytext=(x, 0.45), arrowprops=dict(arrowstyle="->"))
        if counted:
            axis.annotate("", xy=(4.0 + (x - 4) * 0.2, -0.3), xytext=(x, 0.05), arrowprops=dict(arrowstyle="->",
                                                                                                 color="C1"))
    axis.text(7.0, -0.3, "no counter of b's:\nthe change goes unseen", ha="center", va="center", fontsize=8.5,
              color="C3")
    axis.text(1.0, -0.3, "shares it: backward\nsees version 1, raises", ha="center", va="center", fontsize=8.5,
              color="C1")
    axis.set(xlim=(-0.3, 8.3), ylim=(-1.1, 1.6))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


data_detach_picture()

# %% [markdown]
# The `.data` gradient is $2(a + 1)$, computed from the changed `b`: wrong
# by exactly the change, and nothing warns. Use `.detach()` (or a `no_grad`
# block) to change a tensor outside the graph, and let the counter catch
# the mistake.
#
# ## The whole home
#
# The other modes of the package live in the same file, each taught in its
# step: grad mode (steps 18 and 57), formulas on bare arrays (the engine's
# speed path, step 33), saved-tensor hooks (step 38), anomaly mode
# (step 39) and recomputation (steps 42 to 47). Here is the file whole,
# top to bottom, with the parts shown above in their places (folded: open
# it to read):

# %% tags=["hide-output"]
show_code(grad_mode)

# %% [markdown]
# ## Check against PyTorch
#
# Every scenario of the page, run in both frameworks: what it records, the
# `requires_grad` and `is_inference` of its result, the error it raises and
# its key phrase, the `.data` gradient. The collapsed cell writes the
# scenarios once, for a framework `fw`.

# %% tags=["hide-cell"]
def v(fw, grad=False):
    return fw.tensor([1.0, 2.0, 3.0], dtype=fw.float64, requires_grad=grad)


def inference(fw):
    with fw.inference_mode():
        return v(fw)


def state(y):
    return f"requires_grad={y.requires_grad}, grad_fn={'None' if y.grad_fn is None else 'set'}, " \
           f"is_inference={y.is_inference()}"


def in_block(fw, mode):
    with mode(fw):
        y = v(fw, True) * 2
    return state(y)


def inference_view(fw):
    w = v(fw, True)
    with fw.inference_mode():
        return w[0:2]


@contextlib.contextmanager
def _both(first, second):
    """Two modes entered as one block (the second inside the first)."""
    with first, second:
        yield


SCENARIOS = {
    "no_grad": lambda fw: in_block(fw, lambda fw: fw.no_grad()),
    "inference_mode": lambda fw: in_block(fw, lambda fw: fw.inference_mode()),
    "enable_grad in inference_mode": lambda fw: in_block(fw, lambda fw: _both(fw.inference_mode(),
                                                                                   fw.enable_grad())),
    "inference_mode(False) inside": lambda fw: in_block(fw, lambda fw: _both(fw.inference_mode(),
                                                                                  fw.inference_mode(False))),
    "inference: _version": lambda fw: inference(fw)._version,
    "inference: saved for backward": lambda fw: inference(fw) * v(fw, True),
    "inference: add_ outside": lambda fw: inference(fw).add_(1),
    "inference: requires_grad_ outside": lambda fw: inference(fw).requires_grad_(),
    "inference: + outside": lambda fw: state(inference(fw) + v(fw, True)),
    "inference: clone()": lambda fw: state(inference(fw).clone()),
    "inference: a view outside": lambda fw: state(inference(fw)[0:2]),
    "a normal tensor's view made inside": lambda fw: state(inference_view(fw)),
    "that view changed in place outside": lambda fw: view_made_inside(fw)[1].mul_(2),
    ".data changed after saving": lambda fw: f"a.grad = {np.asarray(through_data(fw).detach()).tolist()}",
    ".detach() changed after saving": through_detach,
}


def outcome(scenario, fw):
    """What the scenario gives: its result, or its error's type and key phrase."""
    try:
        result = scenario(fw)
    except RuntimeError as error:
        return key(error)
    finally:  # a scenario leaves no mode on
        assert fw.is_grad_enabled() and not fw.is_inference_mode_enabled()
    return state(result) if isinstance(result, (torch.Tensor, tp.Variable)) else str(result)


# %%
table = {name: (outcome(s, tp), outcome(s, torch)) for name, s in SCENARIOS.items()}
for name, (ours, theirs) in table.items():
    assert ours == theirs, (name, ours, theirs)
    print(textwrap.fill(ours.replace("RuntimeError: ", "raises: "), 108, initial_indent=f"{name:35} ",
                        subsequent_indent=" " * 36))
assert {name: probe(torch, mode) for name, mode in MODES.items()} == mode_table
assert table[".data changed after saving"][0] == "a.grad = [4.0, 6.0, 8.0]"  # 2a would be [2, 4, 6]
print(f"\nthe modes table: {len(MODES)} modes x {len(mode_table['no_grad'])} answers, equal to torch's")
print(f"PyTorch check passed: {len(table)} scenarios as torch's "
      "(outcomes, errors, the .data wrong gradient)")

# %% [markdown]
# ## Recap
#
# - `inference_mode` is `no_grad` plus a promise: its tensors keep no
#   version counter and no view record, so they may never be saved for
#   backward, changed in place outside the mode, or made to require grad;
#   `clone()` gives a normal tensor back.
# - A view of a normal tensor made inside the mode is a normal tensor
#   without a record of how it was made: changing it in place outside the
#   mode raises when it requires grad.
# - `.data` and `.detach()` share the memory; only `.detach()` shares the
#   version counter. A change through `.data` gives a wrong gradient
#   silently; through `.detach()`, backward raises.
#
# ## Exercises
#
# **1. Features from inference mode, trained on.** A feature computed under
# `inference_mode` cannot enter a product that is trained. Write
# `head_gradient(x, w)`: the features `x * x` made in inference mode, then
# the gradient of `sum(features * w)` with respect to `w`, using the fix the
# error message suggests.

# %% tags=["hide-cell"]
def head_gradient(x, w):
    with tp.inference_mode():
        features = x * x
    (features.clone() * w).sum().backward()  # a normal tensor, which may be saved
    return w.grad


print(head_gradient(tp.tensor([1.0, -2.0, 3.0]), tp.tensor([0.5, 0.5, 0.5], requires_grad=True)))

# %% [markdown]
# **2. Which are inference tensors?** Write `kinds(fw)`: make `x = w * 2`
# inside `inference_mode` (with `w` requiring grad), then outside the mode
# `x + 1`, `x[0:2]`, `x.clone()` and `x.detach()`, and return each one's
# `is_inference()`. Before running it, guess from the rule "made in the
# mode, or sharing its memory with a tensor that was".

# %% tags=["hide-cell"]
def kinds(fw=tp):
    w = fw.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with fw.inference_mode():
        x = w * 2
    made = {"x": x, "x + 1": x + 1, "x[0:2]": x[0:2], "x.clone()": x.clone(), "x.detach()": x.detach()}
    return {name: t.is_inference() for name, t in made.items()}


print(kinds())

# %% [markdown]
# **3. The optimizer step without `.data`.** Old training loops update a
# parameter with `w.data -= lr * w.grad`. Write `sgd_steps(w, loss, lr,
# n)`: `n` steps of gradient descent on `loss(w)` that update `w` in place
# inside `no_grad` instead, then return `w`. Since `w` is a leaf that
# requires grad, `w -= ...` outside `no_grad` would raise; inside, the
# change is counted, and nothing is recorded.

# %% tags=["hide-cell"]
def sgd_steps(w, loss, lr, n):
    for _ in range(n):
        w.grad = None
        loss(w).backward()
        with tp.no_grad():
            w -= lr * w.grad  # in place: counted by w's version counter, recorded by no graph
    return w


w = tp.tensor([1.0, -2.0], dtype=tp.float64, requires_grad=True)
print(sgd_steps(w, lambda w: (w * w).sum(), 0.1, 3), "| version:", w._version)
