# %% [markdown]
# # Step 57: Every gradient mode
#
# Step 18 gave the framework one switch, `no_grad`: inside it, operations
# record no graph. PyTorch has a family of them: `set_grad_enabled`, which
# is a call, a block and a decorator at once; `enable_grad`, which turns
# recording back on inside `no_grad`; decorators that also work on
# generators; and `inference_mode`, a stricter `no_grad` whose tensors skip
# even the bookkeeping of steps 36 and 37 (version counters and views).
# Every one of them belongs to the thread that set it. This step walks
# through them all, in the one file of the package where they live,
# `tinypytorch/grad_mode.py`, shown part by part, then whole. It ends with the
# oldest trap in PyTorch: `.data` against `.detach()`.

# %%
import re
import textwrap
import threading

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
# ## One home for every mode
#
# A mode is a flag that operations read before they act. The package keeps
# all of them in one module that imports nothing else of the package, so
# that every other module may ask it. Each flag lives on a
# `threading.local` object: a thread sees its own value, starting from the
# class's default. Step 18's `Config.enable_backprop` is the grad mode,
# and `Config = _Config()` its one instance:

# %%
show_code(grad_mode._Config)

# %% [markdown]
# ## set_grad_enabled: a call, a block, a decorator
#
# `no_grad` and `enable_grad` save the old flag on entering and put it
# back on leaving, so they nest. `set_grad_enabled(mode)` does its switch
# in `__init__`: called bare, it switches at once and stays switched;
# used in `with`, it also switches back at the end.

# %%
show_code(grad_mode.no_grad, grad_mode.enable_grad, grad_mode.is_grad_enabled, grad_mode.set_grad_enabled)

# %%
w = tp.tensor([1.0, 2.0], requires_grad=True)
tp.set_grad_enabled(False)  # a call: off until switched back
print("after the call:  ", tp.is_grad_enabled(), (w * 2).requires_grad)
tp.set_grad_enabled(True)
with tp.set_grad_enabled(False):
    with tp.enable_grad():
        print("enable_grad inside:", tp.is_grad_enabled(), (w * 2).requires_grad)
    print("in the block:    ", tp.is_grad_enabled())
print("after the block: ", tp.is_grad_enabled())

# %% [markdown]
# `requires_grad_` is the other switch, on a tensor rather than a thread:
# `w.requires_grad_(False)` freezes `w` (nothing computed from it alone
# records), the everyday way to fine-tune part of a model.

# %%
w.requires_grad_(False)
print("frozen:", (w * 2).requires_grad, "| again:", (w.requires_grad_() * 2).requires_grad)

# %% [markdown]
# ## Modes as decorators, on functions and generators
#
# `@no_grad` (bare or called) wraps a function so that each call runs in a
# fresh copy of the mode. A generator is subtler: its body runs a piece
# at a time, and the caller runs in between. PyTorch enters the mode
# around each piece only, so the caller's own code between two `next`
# calls records as usual.

# %%
show_code(grad_mode._DecoratorContextManager)

# %% [markdown]
# `_wrap_generator` steps the generator by hand: a fresh copy of the mode
# around each `next`, `send`, `throw` and `close`, and none around the
# `yield` that hands a value to the caller.


# %%
@tp.no_grad()
def steps():
    seen = yield tp.is_grad_enabled()
    yield seen


it = steps()
inside = next(it)
between = tp.is_grad_enabled()  # the caller, between two steps
print("inside the generator:", inside, "| the caller, between:", between, "| sent back:", it.send(between))


# %% tags=["hide-input"]
def generator_picture():
    """When grad mode is on, along a generator decorated with @no_grad: on in the caller, off in each step."""
    fig, axis = plt.subplots(figsize=(8, 1.2))
    spans = [("caller", 0, 1, True), ("next(): body", 1, 2, False), ("caller", 2, 3, True),
             ("send(): body", 3, 4, False), ("caller", 4, 5, True)]
    for label, a, b, on in spans:
        axis.barh(0, b - a, left=a, color="C2" if on else "0.85", edgecolor="white")
        axis.text((a + b) / 2, 0, f"{label}\n{'records' if on else 'no_grad'}", ha="center", va="center",
                  fontsize=8.5)
    axis.set(xlim=(0, 5), ylim=(-0.5, 0.5))
    axis.axis("off")
    axis.set_title("@no_grad on a generator: the mode is on only while the body runs (green: grad mode on)",
                   fontsize=9.5)
    fig.tight_layout()
    plt.show()


generator_picture()

# %% [markdown]
# ## inference_mode: no graph, and no bookkeeping either
#
# `no_grad` stops the graph, but every new tensor still gets a version
# counter (step 36) and every view a record of its base (step 37), in case
# it is used later in a computation that records. `inference_mode`
# promises that it will not be: tensors made inside are *inference
# tensors*, with neither. Inside the mode even `enable_grad` records
# nothing; `inference_mode(False)` turns both off again. The counter of
# open blocks is a speed shortcut: while no thread is in the mode, making
# a tensor does not read the thread-local flag (`InferenceMode.enabled`).

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
# A view of a *normal* tensor made inside the mode is not an inference
# tensor: it shares its base's counter and requires grad as its base
# does. But nothing recorded how it was made, so outside the mode, where
# recording is on, PyTorch forbids changing it in place if it requires
# grad ("A view was created in inference mode and is being modified
# inplace in normal mode"); the package too (the check at the end asks
# both).

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
# ## A mode belongs to its thread
#
# Because each flag is a `threading.local`, a thread started inside
# `no_grad` does not inherit it: it starts from the default, grad mode on,
# as in PyTorch. (Anomaly mode, step 39, is the one process-wide switch.)

# %%
def seen_in_a_thread(fw):
    seen = {}

    def look(name):  # grad mode on? does w * 2 record?
        seen[name] = fw.is_grad_enabled(), (fw.tensor([1.0], requires_grad=True) * 2).requires_grad

    with fw.no_grad():
        thread = threading.Thread(target=look, args=("worker",))
        thread.start()
        thread.join()
        look("main")
    return seen


print("tinypytorch:", seen_in_a_thread(tp), "\ntorch:      ", seen_in_a_thread(torch))


# %% tags=["hide-input"]
def threads_picture(seen):
    """Each thread's own flag: the main thread inside no_grad, the worker at the default."""
    fig, axis = plt.subplots(figsize=(8, 1.7))
    for row, name in enumerate(("main", "worker")):
        on, records = seen[name]
        axis.barh(-row, 4, left=1, color="C2" if on else "0.85")
        axis.text(3, -row, f"Config.enable_backprop = {on}: w * 2 {'records' if records else 'records nothing'}",
                  ha="center", va="center", fontsize=9)
        axis.text(0.9, -row, f"{name} thread", ha="right", va="center", fontsize=9, family="monospace")
    axis.annotate("", xy=(2, -0.7), xytext=(2, -0.3), arrowprops=dict(arrowstyle="->", color="0.4"))
    axis.text(2.05, -0.5, "start(): the flag is not copied", fontsize=8, color="0.4", va="center")
    axis.set(xlim=(-0.4, 5.2), ylim=(-1.5, 0.5))
    axis.axis("off")
    axis.set_title("a threading.local flag per thread (green: grad mode on)", fontsize=9.5)
    fig.tight_layout()
    plt.show()


threads_picture(seen_in_a_thread(tp))

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
# step: formulas on bare arrays (the engine's speed path, step 33),
# saved-tensor hooks (step 38), anomaly mode (step 39) and recomputation
# (steps 42 to 47). Here is the file whole, top to bottom, with the parts
# shown above in their places (folded: open it to read):

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


def view_made_inside(fw):
    w = v(fw, True)
    with fw.inference_mode():
        return w[0:2]


def a_thread(fw):
    on, records = seen_in_a_thread(fw)["worker"]
    return f"grad mode in the thread: {on}, records: {records}"


def set_grad_enabled_call(fw):
    fw.set_grad_enabled(False)
    try:
        return state(v(fw, True) * 2)
    finally:
        fw.set_grad_enabled(True)


def in_block(fw, mode):
    with mode(fw):
        y = v(fw, True) * 2
    return state(y)


def decorated(fw):
    return fw.no_grad()(lambda: state(v(fw, True) * 2))()


def on_a_generator(fw):
    gen = fw.no_grad()(lambda: (yield fw.is_grad_enabled()))  # noqa: PLC3002 (a generator function, on the spot)
    it = gen()
    return f"grad mode inside: {next(it)}, in the caller: {fw.is_grad_enabled()}"


SCENARIOS = {
    "set_grad_enabled(False), called": set_grad_enabled_call,
    "set_grad_enabled(False), block": lambda fw: in_block(fw, lambda fw: fw.set_grad_enabled(False)),
    "enable_grad inside no_grad": lambda fw: in_block(fw, lambda fw: _both(fw.no_grad(), fw.enable_grad())),
    "@no_grad on a function": decorated,
    "@no_grad on a generator": on_a_generator,
    "requires_grad_(False)": lambda fw: state(v(fw, True).requires_grad_(False) * 2),
    "no_grad": lambda fw: in_block(fw, lambda fw: fw.no_grad()),
    "inference_mode": lambda fw: in_block(fw, lambda fw: fw.inference_mode()),
    "enable_grad in inference_mode": lambda fw: in_block(fw, lambda fw: _both(fw.inference_mode(),
                                                                                   fw.enable_grad())),
    "inference: _version": lambda fw: inference(fw)._version,
    "inference: saved for backward": lambda fw: inference(fw) * v(fw, True),
    "inference: add_ outside": lambda fw: inference(fw).add_(1),
    "inference: requires_grad_ outside": lambda fw: inference(fw).requires_grad_(),
    "inference: + outside": lambda fw: state(inference(fw) + v(fw, True)),
    "inference: clone()": lambda fw: state(inference(fw).clone()),
    "a normal tensor's view made inside": lambda fw: state(view_made_inside(fw)),
    "that view changed in place outside": lambda fw: view_made_inside(fw).mul_(2),
    "a thread under no_grad": a_thread,
    ".data changed after saving": lambda fw: f"a.grad = {np.asarray(through_data(fw).detach()).tolist()}",
    ".detach() changed after saving": through_detach,
}


class _both:
    """Two modes entered as one block (the second inside the first)."""

    def __init__(self, first, second):
        self.first, self.second = first, second

    def __enter__(self):
        self.first.__enter__()
        self.second.__enter__()

    def __exit__(self, *exc_info):
        self.second.__exit__(*exc_info)
        self.first.__exit__(*exc_info)


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
    print(textwrap.fill(ours.replace("RuntimeError: ", "raises: "), 108, initial_indent=f"{name:33} ",
                        subsequent_indent=" " * 34))
assert {name: probe(torch, mode) for name, mode in MODES.items()} == mode_table
assert table[".data changed after saving"][0] == "a.grad = [4.0, 6.0, 8.0]"  # 2a would be [2, 4, 6]
print(f"\nthe modes table: {len(MODES)} modes x {len(mode_table['no_grad'])} answers, equal to torch's")
print(f"PyTorch check passed: {len(table)} scenarios as torch's "
      "(outcomes, errors, the .data wrong gradient)")

# %% [markdown]
# ## Recap
#
# - `set_grad_enabled(mode)` switches when called, and switches back at
#   the end of a `with` block or a decorated call; `is_grad_enabled()`
#   asks. `no_grad` and `enable_grad` nest, and decorate functions and
#   generators (a generator's body runs in the mode, its caller does not).
# - `requires_grad_(False)` freezes one tensor, where a mode freezes a
#   thread.
# - `inference_mode` is `no_grad` plus a promise: its tensors keep no
#   version counter and no view record, so they may never be saved for
#   backward, changed in place outside the mode, or made to require grad;
#   `clone()` gives a normal tensor back.
# - Every mode but anomaly mode is per thread: a new thread starts with
#   grad mode on.
# - `.data` and `.detach()` share the memory; only `.detach()` shares the
#   version counter. A change through `.data` gives a wrong gradient
#   silently; through `.detach()`, backward raises.
#
# ## Exercises
#
# **1. Freeze the first layer.** In `nn.Sequential(nn.Linear(2, 3),
# nn.Tanh(), nn.Linear(3, 1))`, freeze the first layer with
# `requires_grad_(False)`, run a backward pass, and list which parameters
# got a gradient.

# %% tags=["hide-cell"]
def trained_names(model, x):
    for p in model[0].parameters():
        p.requires_grad_(False)
    model(x).sum().backward()
    return [name for name, p in model.named_parameters() if p.grad is not None]


tp.manual_seed(0)
frozen = tp.nn.Sequential(tp.nn.Linear(2, 3), tp.nn.Tanh(), tp.nn.Linear(3, 1))
print(trained_names(frozen, tp.tensor([[0.5, -1.0]])))

# %% [markdown]
# **2. Features from inference mode, trained on.** A feature computed under
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
# **3. Predictions batch by batch.** Write a generator `predictions(model,
# batches)`, decorated with `@tp.no_grad()`, that yields the model's output
# for each batch. Check that the outputs record nothing, and that a loss
# the caller computes between two batches still records.

# %% tags=["hide-cell"]
@tp.no_grad()
def predictions(model, batches):
    for batch in batches:
        yield model(batch)


model = tp.nn.Linear(2, 1)
batches = [tp.tensor([[1.0, 2.0]]), tp.tensor([[3.0, 4.0]])]
for out in predictions(model, batches):
    caller_loss = (model(batches[0]) - out).sum()  # the caller, between two batches
    print("output records:", out.requires_grad, "| the caller's loss records:", caller_loss.requires_grad)
