# %% [markdown]
# # Step 39: Anomaly mode
#
# Some bugs in a backward pass are loud: a `backward` raises, returns a
# gradient of the wrong shape, or divides zero by zero and fills the
# gradients with NaN. The error surfaces deep inside the engine, long after
# the forward pass, and says little about *which* operation of the model
# caused it.
#
# **Anomaly mode** (`detect_anomaly`, `set_detect_anomaly`, as in PyTorch)
# answers that question. It records, for every operation of the forward pass,
# where in the program it was called. An error in that operation's backward,
# or a NaN it returns, is then reported with that place. (The quiet bugs, a
# backward that returns wrong numbers of the right shape, are step 40's.)

# %%
import re
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import anomaly
from tinypytorch.utils.listing import show_code

# %% tags=["hide-input"]
# Harness: a note is a traceback's text, with file paths and line numbers that differ from one machine to the
# next (and between the script and its notebook). These helpers read out what is the same everywhere.
FRAME = re.compile(r'^  File "([^"]*)", line \d+, in (.+)\n    (.+)$', re.MULTILINE)
NAN = re.compile(r"Function '(\w+)' returned nan values in its (\d+)th output\.")


def forward_frames(text):
    """[(function, line of source)] for each frame of a traceback's text (paths and line numbers left out)."""
    return [(function, line) for _, function, line in FRAME.findall(text)]


def quiet():
    """NumPy's own "divide by zero" and "invalid value" warnings, silenced: only the framework speaks."""
    return np.errstate(divide="ignore", invalid="ignore")


# %% [markdown]
# ## Where a NaN comes from
#
# A NaN in a gradient needs no NaN, or even an infinity, in the loss. Take
# $x = (0, 1)$ and keep only the second element of $\log x$:
#
# $$y = \log x = (-\infty, 0), \qquad \text{loss} = y_1 = 0 .$$
#
# The loss is finite. Backward sends $(0, 1)$ to $y$ (the first element was
# dropped, so its gradient is $0$), and `Log.backward` divides it by $x$:
# $0/0 = \text{NaN}$ for the first element. From there the NaN spreads to
# everything the gradient reaches. NumPy's warnings ("invalid value
# encountered in divide") say *what* happened, not in which of a model's
# thousands of operations; they are silenced here.

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with quiet():
    y = tinypytorch.log(x)
    loss = y[1:].sum()
    loss.backward()
print(f"y = {y.data}, loss = {loss.data:.1f}, x.grad = {x.grad.data}")

# %% [markdown]
# ## Anomaly mode
#
# In anomaly mode, `Function.__call__` hands every function it records to
# `record_creation`, which keeps `creation_stack`: the Python stack of the
# call, as `traceback` formats it, minus the frames between the call and
# `record` (the door, and from step 68 the mode stack's entries).

# %%
show_code(anomaly.record_creation, step=39)

# %% [markdown]
# And the engine runs each `backward` through `checked_backward`. An
# exception raised inside gets a *note* (Python's `add_note`, printed under
# the traceback) with that stack. A gradient containing NaN raises a
# `RuntimeError` that names the function and which of its outputs (its
# gradients, one per input) it was.

# %%
show_code(anomaly.checked_backward, step=39)

# %% [markdown]
# `detect_anomaly()` turns the mode on for a `with` block and warns that it
# is slow, as PyTorch's does. The forward pass must run inside the block too:
# that is when the stacks are recorded. We print the last two frames of the
# note, without paths and line numbers:

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with warnings.catch_warnings(record=True) as caught, quiet():
    warnings.simplefilter("always")
    with autograd.detect_anomaly():
        y = tinypytorch.log(x)
        loss = y[1:].sum()
        try:
            loss.backward()
        except RuntimeError as error:
            nan_error = error
print(textwrap.fill(f"warning: {caught[0].message}", 100))
print("RuntimeError:", nan_error)
note = nan_error.__notes__[0]
print(note.splitlines()[0])
for function, line in forward_frames(note)[-2:]:
    print(f"    in {function}: {line}")

# %% [markdown]
# The error names `Log`, its 0th output (the gradient of its only input),
# and the line of the forward pass that called it, `y = tinypytorch.log(x)`,
# then the package's own `log`, which made the node. PyTorch says the same,
# with its name for the node, `LogBackward0` (see the check at the end).

# %% tags=["hide-input"]
def box(axis, center, text, color="white", edge="black", width=1.2, height=0.5, size=9, left=False):
    x0 = center[0] - width / 2
    axis.add_patch(plt.Rectangle((x0, center[1] - height / 2), width, height, facecolor=color, edgecolor=edge,
                                 linewidth=1.6 if edge != "black" else 1.0))
    axis.text(x0 + 0.15 if left else center[0], center[1], text, ha="left" if left else "center", va="center",
              fontsize=size, family="monospace")


def arrow(axis, start, end, color="black", dashed=False, text=None, at=(0.0, 0.2), style="-|>"):
    axis.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle=style, color=color, lw=1.4,
                                                          linestyle="--" if dashed else "-"))
    if text:
        axis.text((start[0] + end[0]) / 2 + at[0], (start[1] + end[1]) / 2 + at[1], text, ha="center",
                  va="center", fontsize=8.5, color=color, family="monospace")


RED, PINK, OLIVE = "#c0392b", "#fadbd8", "#7d6608"
fig, axis = plt.subplots(figsize=(9, 4.4))
nodes = {"x": 0.5, "Log": 2.1, "y": 3.7, "GetItem": 5.3, "Sum": 6.9, "loss": 8.4}
for name, at in nodes.items():
    function = name in ("Log", "GetItem", "Sum")
    box(axis, (at, 3.0), name, color=PINK if name == "Log" else ("#eaf2f8" if function else "white"),
        edge=RED if name == "Log" else "black", width=1.1 if function else 0.7)
names = list(nodes)
for a, b in zip(names, names[1:]):
    arrow(axis, (nodes[a] + 0.45, 3.0), (nodes[b] - 0.45, 3.0))
    arrow(axis, (nodes[b] - 0.1, 2.1), (nodes[a] + 0.1, 2.1), color=RED if a == "x" else "black",
          text={"x": "(nan, 1)", "Log": "(0, 1)", "y": "(0, 1)", "GetItem": "(1,)", "Sum": "1"}[a])
axis.text(9.0, 3.0, "forward", fontsize=9, style="italic", va="center")
axis.text(9.0, 2.1, "backward", fontsize=9, style="italic", va="center")
axis.text(2.1, 1.75, "Log.backward: (0, 1) / x = 0/0 in element 0", fontsize=8.5, color=RED, ha="left",
          family="monospace")
box(axis, (5.5, 0.75), "RuntimeError: Function 'Log' returned nan values in its 0th output.\n"
    "note: Error detected in Log. Traceback of forward call ...", color=PINK, edge=RED, width=8.2, height=0.7,
    size=8.5)
arrow(axis, (1.3, 1.95), (1.6, 1.12), color=RED, text="checked_backward\nfinds the NaN", at=(-0.85, 0.05))
box(axis, (6.25, 4.5), "Log.creation_stack, kept in the forward pass:\n"
    "  in <module>:  y = tinypytorch.log(x)\n  in log:       return Log()(x)", color="#fef9e7", width=6.7,
    height=0.9, size=8.5, left=True)
arrow(axis, (2.1, 3.27), (2.88, 4.3), color=OLIVE, dashed=True, style="-", text="record_creation", at=(-0.9, 0.1))
axis.plot([9.6, 10.0, 10.0], [4.5, 4.5, 0.75], color=OLIVE, linestyle="--", lw=1.4)
arrow(axis, (10.0, 0.75), (9.62, 0.75), color=OLIVE)
axis.text(10.15, 2.6, "copied into the note", rotation=90, fontsize=8.5, color=OLIVE, va="center",
          family="monospace")
axis.set(xlim=(0.0, 10.4), ylim=(0.3, 5.05))
axis.axis("off")
axis.set_title("anomaly mode: the NaN's path (red), and the stack that names its forward call", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# The stacks are recorded in the forward pass. With anomaly mode turned on
# around `backward` only, the NaN is still caught and named, but there is no
# place to show (PyTorch says "No forward pass information available"):

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with quiet():
    loss = tinypytorch.log(x)[1:].sum()
    with autograd.set_detect_anomaly(True):
        try:
            loss.backward()
        except RuntimeError as error:
            print("RuntimeError:", error)
            print(error.__notes__[0])

# %% [markdown]
# Why NaN and not also infinity? An infinite gradient is not always a bug:
# the gradient of $\log$ at $0$ *is* $+\infty$, and PyTorch gives it. NaN has
# no such reading.
#
# ## Any error in a backward
#
# The note is added to *every* exception a backward raises, not only to NaN.
# Here is a user-written function with a bug: the sum of each row of a
# matrix, whose backward forgets to spread the gradient back over the row.
# Its gradient has shape $(n, 1)$ instead of $(n, m)$, which happens to be
# right when $m = 1$. A model calls it twice, on a $(3, 1)$ and a $(3, 2)$
# matrix:

# %%
class RowSum(Function):
    """The sum of each row: (n, m) -> (n,). Its backward has a bug."""

    def forward(self, x):
        return x.sum(axis=1)

    def backward(self, gy):
        return gy.reshape(-1, 1)  # bug: should be broadcast to (n, m), the shape of x


def model(a, b):
    s = RowSum()(a)
    t = RowSum()(b)
    return (s * t).sum()


rng = np.random.default_rng(38)
narrow = Variable(rng.standard_normal((3, 1)), name="narrow")
wide = Variable(rng.standard_normal((3, 2)), name="wide")
for mode in (False, True):
    with autograd.set_detect_anomaly(mode):
        try:
            model(narrow, wide).backward()
        except ValueError as error:
            print(f"anomaly {mode}: ValueError: {error}")
            for note in getattr(error, "__notes__", []):
                function, line = forward_frames(note)[-1]
                print(f"    {note.splitlines()[0]}\n        in {function}: {line}")

# %% [markdown]
# The engine checks the shape of every gradient, so it catches the bug and
# names `RowSum` either way. But `RowSum` is called twice, and in a real
# model it may be called in fifty places. Only in anomaly mode does the error
# say which call made the node that failed: `t = RowSum()(b)`. The same holds
# for an exception a `backward` raises itself, a typo that reads a missing
# attribute for instance.
#
# ## Turning it on and off, and what it costs
#
# `set_detect_anomaly(mode, check_nan=True)` sets the mode at once, for the
# rest of the program; used in a `with` statement it gives the old mode back
# at the end, as `detect_anomaly` does. `check_nan=False` keeps the stacks
# but skips the NaN test.

# %%
autograd.set_detect_anomaly(True)
print("after set_detect_anomaly(True):", anomaly.enabled())
autograd.set_detect_anomaly(False)
print("after set_detect_anomaly(False):", anomaly.enabled())
with autograd.set_detect_anomaly(True):
    inside = anomaly.enabled()
    y = tinypytorch.tanh(Variable(np.array([0.5, 1.0])))
print(f"inside a with block: {inside}; after it: {anomaly.enabled()}")
print("Tanh made inside keeps a creation_stack:", hasattr(y.creator, "creation_stack"))
z = tinypytorch.tanh(Variable(np.ones(2)))
print("Tanh made outside keeps one:", hasattr(z.creator, "creation_stack"))

# %% [markdown]
# Outside anomaly mode a function keeps no stack and no gradient is scanned,
# so the mode costs nothing when it is off. When it is on, it is expensive:
# every recorded operation walks and formats the whole Python stack (dozens
# of frames in a notebook) into a string, and every gradient is scanned once
# more for NaN. A graph of many small operations runs many times slower. So
# anomaly mode is for finding a bug, not for training: turn it on, run the
# failing step once, read the note, turn it off.
#
# ## Check against PyTorch
#
# Two cases in both frameworks, in anomaly mode: the NaN of $\log$ at $0$,
# and `RowSum`'s wrong shape. Both must raise, name the same function, and
# point at the same line of the forward pass (the harness is in the hidden
# cell).

# %% tags=["hide-input"]
import torch  # noqa: E402


def nan_case(m, x):
    y = m.log(x)
    return y[1:].sum()


def rowsum_case(row_sum, a, b):
    s = row_sum(a)
    t = row_sum(b)
    return (s * t).sum()


class RowSumTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sum(dim=1)

    @staticmethod
    def backward(ctx, gy):
        return gy.reshape(-1, 1)  # the same bug


def frame_of(function, text):
    """The lines of source that the traceback `text` shows for `function`."""
    return [line for name, line in forward_frames(text) if name == function]


def ours_anomaly(case, *args):
    with quiet(), autograd.set_detect_anomaly(True):
        try:
            case(*args).backward()
        except (RuntimeError, ValueError) as error:
            return str(error), error.__notes__[0]
    raise AssertionError("no error in anomaly mode")


def torch_anomaly(case, *args):
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly():
        warnings.simplefilter("always")
        try:
            case(*args).backward()
        except RuntimeError as error:
            notes = [str(w.message) for w in caught if "Traceback of forward call" in str(w.message)]
            return str(error), notes[0]
    raise AssertionError("no error in anomaly mode")


def tensors(*variables):
    return [torch.tensor(v.data, requires_grad=True) for v in variables]


RESULTS = {
    "nan": (ours_anomaly(nan_case, tinypytorch, Variable(np.array([0.0, 1.0]))),
            torch_anomaly(nan_case, torch, *tensors(Variable(np.array([0.0, 1.0]))))),
    "shape": (ours_anomaly(rowsum_case, lambda v: RowSum()(v), narrow, wide),
              torch_anomaly(rowsum_case, RowSumTorch.apply, *tensors(narrow, wide))),
}
(message, note), (message_t, note_t) = RESULTS["nan"]
assert NAN.fullmatch(message).groups() == ("Log", "0") and NAN.fullmatch(message_t).groups() == ("LogBackward0", "0")
assert note.startswith("Error detected in Log.") and note_t.startswith("Error detected in LogBackward0.")
(message, note), (message_t, note_t) = RESULTS["shape"]
assert "RowSum" in message and "(3, 1)" in message and "(3, 2)" in message
assert "RowSumTorch" in message_t and "[3, 1]" in message_t and "[3, 2]" in message_t

# %%
for case, name in (("nan", "nan_case"), ("shape", "rowsum_case")):
    (message, note), (message_t, note_t) = RESULTS[case]
    assert frame_of(name, note) == frame_of(name, note_t), (frame_of(name, note), frame_of(name, note_t))
    print(f"{message}\n  torch: {message_t.splitlines()[0][:70]}")
    print(f"  both point at {name}: {frame_of(name, note)[0]}")
print("PyTorch check passed: anomaly mode names the NaN's function and the failing call, as torch's does")

# %% [markdown]
# ## Recap
#
# - A NaN gradient needs no NaN in the loss: $0/0$ in one backward (here
#   `Log`'s at $x = 0$) is enough, and it spreads from there.
# - In anomaly mode every recorded function keeps `creation_stack`, the stack
#   of its forward call; the forward pass must run in the mode.
# - `checked_backward` adds that stack as a note to any error a backward
#   raises, and raises "returned nan values in its $i$th output" on a NaN.
# - `detect_anomaly()` (a block) and `set_detect_anomaly(mode, check_nan)`
#   (now, or a block) switch it, with PyTorch's names and messages.
# - It costs a formatted stack per operation and a scan per gradient: on
#   to find a bug, off to train.
#
# ## Exercises
#
# **1.** Write `locate_nan(fn, *arrays)`: it calls `fn` on Variables made
# from `arrays` in anomaly mode, runs `backward` on the result, and returns
# `(name, line)`, the name of the function whose backward returned NaN and
# the line of `fn` that created it; `None` if no NaN appears.

# %% tags=["hide-cell"]
def locate_nan(fn, *arrays):
    with quiet(), autograd.set_detect_anomaly(True):
        try:
            fn(*[Variable(np.asarray(a, dtype=np.float64)) for a in arrays]).backward()
        except RuntimeError as error:
            name = NAN.fullmatch(str(error)).group(1)
            return name, frame_of(fn.__name__, error.__notes__[0])[-1]
    return None


def log_tail(x):
    y = tinypytorch.log(x)
    return y[1:].sum()


print("x = (0, 1):", locate_nan(log_tail, [0.0, 1.0]))
print("x = (2, 1):", locate_nan(log_tail, [2.0, 1.0]))

# %% [markdown]
# **2.** The lengths of 2-D vectors, $\sqrt{x^2 + y^2}$, have a NaN gradient
# when one vector is $(0, 0)$. Use `locate_nan` to find where. Why is it not
# the power $r^{0.5}$, whose derivative is infinite at $0$? Then write
# `safe_lengths(x, y)` with the same values and gradient $0$ at the origin
# (hint: raise a harmless $1$ to the power where $r^2 = 0$, and multiply the
# result by $0$ there).

# %% tags=["hide-cell"]
def lengths(x, y):
    r2 = x * x + y * y
    return (r2 ** 0.5).sum()


def safe_lengths(x, y):
    r2 = x * x + y * y
    zero = (r2.data == 0).astype(np.float64)  # a constant: 1 where the vector is (0, 0)
    return ((r2 + zero) ** 0.5 * (1.0 - zero)).sum()


points = (np.array([3.0, 0.0, -1.0]), np.array([4.0, 0.0, 1.0]))
print("lengths:", locate_nan(lengths, *points))
print("  Pow's backward gives +inf at r2 = 0; Mul's turns inf * x = inf * 0 into NaN")
print("safe_lengths:", locate_nan(safe_lengths, *points))
x, y = (Variable(p) for p in points)
safe_lengths(x, y).backward()
print(f"values {safe_lengths(x, y).data:.4f} (= {lengths(x, y).data:.4f}); x.grad = {np.round(x.grad.data, 4)}")
