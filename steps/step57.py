# %% [markdown]
# # Step 57: Switching recording on and off
#
# Step 18 gave the framework one switch, `no_grad`: inside it, operations
# record no graph. PyTorch has a family of them, and this step builds it:
# `set_grad_enabled`, which is a call, a block and a decorator at once;
# `enable_grad`, which turns recording back on inside `no_grad`;
# decorators that also work on generators; and `requires_grad_`, the
# switch on one tensor rather than on the whole program. Each of these
# modes belongs to the thread that set it. All of them live in one file of the
# package, `tinypytorch/grad_mode.py`, shown here part by part. Step 58
# then asks what a mode promises about the bookkeeping of steps 36 and 37
# (version counters and views): `inference_mode`, and `.data` against
# `.detach()`.

# %%
import contextlib
import re
import textwrap
import threading

import matplotlib.pyplot as plt
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

# %% [markdown]
# Each line below changes the flag, and `trace` notes the flag after it
# together with whether `w * 2` then records a graph:

# %%
w = tp.tensor([1.0, 2.0], requires_grad=True)
trace = []


def note(statement, depth=0):
    trace.append((statement, depth, tp.is_grad_enabled(), (w * 2).requires_grad))


note("(the default)")
tp.set_grad_enabled(False)  # a call: off until switched back
note("tp.set_grad_enabled(False)")
tp.set_grad_enabled(True)
note("tp.set_grad_enabled(True)")
with tp.set_grad_enabled(False):
    note("with tp.set_grad_enabled(False):")
    with tp.enable_grad():
        note("with tp.enable_grad():", 1)
    note("(enable_grad's block ends)", 1)
note("(the outer block ends)")
for statement, depth, on, records in trace:
    print(f"{'    ' * depth + statement:38} grad mode {'on ' if on else 'off'}  w * 2 records: {records}")


# %% tags=["hide-input"]
def trace_picture(trace):
    """The statements run (indented as nested) and the flag after each: green on, grey off."""
    fig, axis = plt.subplots(figsize=(8, 2.6))
    for row, (statement, depth, on, records) in enumerate(trace):
        axis.text(0.05 + 0.35 * depth, -row, statement, ha="left", va="center", fontsize=9, family="monospace")
        axis.add_patch(plt.Rectangle((5.3, -row - 0.42), 2.5, 0.84, color="C2" if on else "0.85"))
        axis.text(6.55, -row, "on: w * 2 records" if records else "off: records nothing", ha="center",
                  va="center", fontsize=8.5)
    axis.text(6.55, 0.8, "grad mode after the line", ha="center", va="center", fontsize=9)
    axis.set(xlim=(0, 8), ylim=(-len(trace) + 0.4, 1.2))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


trace_picture(trace)

# %% [markdown]
# The call form is the one to be careful with: nothing switches it back,
# so a program that forgets `set_grad_enabled(True)` records nothing from
# then on. The block forms cannot forget. `set_grad_enabled(False)` as a
# decorator (`@tp.set_grad_enabled(False)`) switches only while the
# function runs; decorating itself switches nothing.
#
# ## requires_grad_: a switch on one tensor
#
# An operation records only when grad mode is on *and* one of its inputs
# requires grad. `requires_grad_` is the other half of that rule, on a
# tensor rather than a thread: `w.requires_grad_(False)` freezes `w`
# (nothing computed from it alone records), the everyday way to fine-tune
# part of a model.

# %%
w.requires_grad_(False)
print("frozen:", (w * 2).requires_grad, "| again:", (w.requires_grad_() * 2).requires_grad)


# %% tags=["hide-input"]
def records(fw, mode_on, input_requires_grad):
    """Whether `a * b` records a graph, under grad mode on or off, with `a` requiring grad or not."""
    a, b = fw.tensor([1.0, 2.0]), fw.tensor([3.0, 4.0])
    a.requires_grad_(input_requires_grad)
    with fw.set_grad_enabled(mode_on):
        return (a * b).requires_grad


def rule_picture(rule):
    """The two switches, the thread's and the tensor's: an operation records only where both are on."""
    fig, axis = plt.subplots(figsize=(8, 2.0))
    for r, mode_on in enumerate((True, False)):
        axis.text(-0.1, -r, f"grad mode {'on' if mode_on else 'off'}", ha="right", va="center", fontsize=9,
                  family="monospace")
        for c, requires in enumerate((True, False)):
            on = rule[mode_on, requires]
            axis.add_patch(plt.Rectangle((1.1 * c + 0.05, -r - 0.4), 1.0, 0.8, color="C2" if on else "0.85"))
            axis.text(1.1 * c + 0.55, -r, "a * b records" if on else "no graph", ha="center", va="center",
                      fontsize=9)
    for c, requires in enumerate((True, False)):
        axis.text(1.1 * c + 0.55, 0.55, f"a.requires_grad_({requires})", ha="center", va="bottom", fontsize=8.5,
                  family="monospace")
    axis.set(xlim=(-1.6, 2.5), ylim=(-1.5, 1.0))
    axis.axis("off")
    fig.tight_layout()
    plt.show()


rule = {(m, r): records(tp, m, r) for m in (True, False) for r in (True, False)}
rule_picture(rule)

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
# A program that computes in several threads (a data loader's workers, a
# server answering requests) must therefore enter `no_grad` in each
# thread that should not record.
#
# ## Check against PyTorch
#
# Every scenario of the page, run in both frameworks: the `requires_grad`
# and `grad_fn` of its result, or what grad mode was where. The collapsed
# cell writes the scenarios once, for a framework `fw`.

# %% tags=["hide-cell"]
def v(fw, grad=False):
    return fw.tensor([1.0, 2.0, 3.0], dtype=fw.float64, requires_grad=grad)


def state(y):
    return f"requires_grad={y.requires_grad}, grad_fn={'None' if y.grad_fn is None else 'set'}"


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


def decorated(fw, mode):
    function = mode(fw)(lambda: state(v(fw, True) * 2))
    return f"{function()}; grad mode after the call: {fw.is_grad_enabled()}"


def on_a_generator(fw):
    gen = fw.no_grad()(lambda: (yield fw.is_grad_enabled()))  # noqa: PLC3002 (a generator function, on the spot)
    it = gen()
    return f"grad mode inside: {next(it)}, in the caller: {fw.is_grad_enabled()}"


def a_thread(fw):
    on, recorded = seen_in_a_thread(fw)["worker"]
    return f"grad mode in the thread: {on}, records: {recorded}"


@contextlib.contextmanager
def _both(first, second):
    """Two modes entered as one block (the second inside the first)."""
    with first, second:
        yield


SCENARIOS = {
    "set_grad_enabled(False), called": set_grad_enabled_call,
    "set_grad_enabled(False), block": lambda fw: in_block(fw, lambda fw: fw.set_grad_enabled(False)),
    "@set_grad_enabled(False)": lambda fw: decorated(fw, lambda fw: fw.set_grad_enabled(False)),
    "no_grad": lambda fw: in_block(fw, lambda fw: fw.no_grad()),
    "enable_grad inside no_grad": lambda fw: in_block(fw, lambda fw: _both(fw.no_grad(), fw.enable_grad())),
    "no_grad inside enable_grad": lambda fw: in_block(fw, lambda fw: _both(fw.enable_grad(), fw.no_grad())),
    "@no_grad on a function": lambda fw: decorated(fw, lambda fw: fw.no_grad()),
    "@no_grad on a generator": on_a_generator,
    "requires_grad_(False)": lambda fw: state(v(fw, True).requires_grad_(False) * 2),
    "requires_grad_() on a constant": lambda fw: state(v(fw).requires_grad_() * 2),
    "a thread under no_grad": a_thread,
}


def outcome(scenario, fw):
    """What the scenario gives: its result, or its error's type and key phrase."""
    try:
        result = scenario(fw)
    except RuntimeError as error:
        return key(error)
    finally:  # a scenario leaves grad mode on
        assert fw.is_grad_enabled()
    return str(result)


# %%
table = {name: (outcome(s, tp), outcome(s, torch)) for name, s in SCENARIOS.items()}
for name, (ours, theirs) in table.items():
    assert ours == theirs, (name, ours, theirs)
    print(textwrap.fill(ours, 108, initial_indent=f"{name:32} ", subsequent_indent=" " * 33))
assert {(m, r): records(torch, m, r) for m in (True, False) for r in (True, False)} == rule
assert [entry[2:] for entry in trace] == [(True, True), (False, False), (True, True), (False, False),
                                          (True, True), (False, False), (True, True)]
print(f"\nthe rule of the two switches: {len(rule)} cases, equal to torch's")
print(f"PyTorch check passed: {len(table)} scenarios as torch's")

# %% [markdown]
# ## Recap
#
# - `set_grad_enabled(mode)` switches when called, and switches back at
#   the end of a `with` block or a decorated call; `is_grad_enabled()`
#   asks. `no_grad` and `enable_grad` save the old flag and put it back,
#   so they nest.
# - The same modes decorate functions and generators: a generator's body
#   runs in the mode, its caller between two steps does not.
# - An operation records when grad mode is on and an input requires grad:
#   `requires_grad_(False)` freezes one tensor, where a mode freezes a
#   thread.
# - Every mode but anomaly mode is per thread (`threading.local`): a new
#   thread starts with grad mode on.
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
# **2. Predictions batch by batch.** Write a generator `predictions(model,
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

# %% [markdown]
# **3. Evaluate in a worker thread.** Write `evaluate_in_thread(model, x)`:
# it runs `model(x)` in a new thread, entering `no_grad` *inside* that
# thread, and returns the output. Check that the output records nothing
# even though the main thread's grad mode is on, and that entering
# `no_grad` in the main thread instead would not have been enough.

# %% tags=["hide-cell"]
def evaluate_in_thread(model, x, fw=tp):
    result = {}

    def work():
        with fw.no_grad():  # this thread's own flag
            result["out"] = model(x)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return result["out"]


def evaluate_from_outside(model, x, fw=tp):
    """The mistake: no_grad in the main thread, the work in another."""
    result = {}
    with fw.no_grad():
        thread = threading.Thread(target=lambda: result.update(out=model(x)))
        thread.start()
        thread.join()
    return result["out"]


model = tp.nn.Linear(2, 1)
x = tp.tensor([[1.0, 2.0]])
print("no_grad in the worker:", evaluate_in_thread(model, x).requires_grad,
      "| no_grad in the main thread:", evaluate_from_outside(model, x).requires_grad)
