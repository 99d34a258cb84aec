# %% [markdown]
# # Step 39: Debugging gradients: anomaly mode and gradcheck
#
# Two kinds of bug live in a backward pass. The loud kind stops the program or
# fills the gradients with NaN: a `backward` raises, returns a wrong shape, or
# divides zero by zero. The error then comes from deep inside the engine,
# long after the forward pass, and says little about *which* operation of
# the model caused it. The quiet kind returns numbers of the right shape that
# are simply wrong: the model trains badly and nothing tells you why.
#
# PyTorch has a tool for each, and so does the package from this step on:
#
# - **anomaly mode** (`detect_anomaly`, `set_detect_anomaly`) records, for
#   every operation of the forward pass, where in the program it was called;
#   an error in its backward, or a NaN it returns, is reported with that
#   place;
# - **`gradcheck`** compares the whole Jacobian that `backward` computes with
#   a numerical one, element by element;
# - **`gradgradcheck`** does the same one order up, for the second derivatives
#   of step 27.

# %%
import inspect
import re
import time
import warnings

import numpy as np

import tinypytorch
from tinypytorch import Function, Variable, autograd
from tinypytorch.autograd import GradcheckError, anomaly, gradcheck, gradgradcheck
from tinypytorch.autograd.gradcheck import analytical_jacobian, numerical_jacobian

# %% [markdown]
# ## Where a NaN comes from
#
# A NaN in a gradient does not need a NaN, or even an infinity, in the
# loss. Take $x = (0, 1)$ and keep only the second element of $\log x$:
#
# $$y = \log x = (-\infty, 0), \qquad \text{loss} = y_1 = 0$$
#
# (elements numbered from 0, as in Python).
#
# The loss is a finite number. Backward sends $(0, 1)$ to $y$ (the first
# element was dropped, so its gradient is $0$), and `Log.backward` divides
# it by $x$: $0/0 = \text{NaN}$ for the first element. From there the NaN
# spreads to everything the gradient reaches. NumPy warns "divide by zero
# encountered in log" in the forward pass and "invalid value encountered in
# divide" in the backward pass, which say *what* happened, but not in which
# of the model's thousands of operations. (Those NumPy warnings are silenced
# below with `np.errstate`, so that only what the framework says is shown.)

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with np.errstate(divide="ignore", invalid="ignore"):
    y = tinypytorch.log(x)
    loss = y[1:].sum()
    loss.backward()
print("y =", y)
print(f"loss = {loss:.1f}")
print("x.grad =", x.grad)

# %% [markdown]
# ## Anomaly mode
#
# In anomaly mode two things change:
#
# - every function recorded in the forward pass keeps `creation_stack`, the
#   Python stack of the call that made it, as `traceback` formats it;
# - the engine runs each `backward` through `checked_backward`: an exception
#   raised inside gets a *note* (Python's `add_note`, printed under the
#   traceback) with that stack, and a gradient containing NaN raises a
#   `RuntimeError` naming the function and which of its outputs (gradients,
#   one per input) it was, with the same note.

# %%
print(inspect.getsource(anomaly.record_creation))
print(inspect.getsource(anomaly.checked_backward))

# %% [markdown]
# `tinypytorch.autograd.detect_anomaly()` turns the mode on for a `with`
# block, and warns that it is slow, as PyTorch's does. The forward pass must
# run inside the block too: that is when the stacks are recorded.
#
# A note is text with file paths and line numbers, which differ from one
# machine to the next (and between this script and its notebook). The
# helper below reads each frame's function and line of source out of such a
# text, which is what we print.

# %%
FRAME = re.compile(r'^  File "[^"]*", line \d+, in (.+)\n    (.+)$', re.MULTILINE)


def forward_frames(text):
    """[(function, line of source)] for each frame of a traceback's text (paths and line numbers left out)."""
    return FRAME.findall(text)


x = Variable(np.array([0.0, 1.0]), name="x")
with warnings.catch_warnings(record=True) as caught, np.errstate(divide="ignore", invalid="ignore"):
    warnings.simplefilter("always")
    with autograd.detect_anomaly():
        y = tinypytorch.log(x)
        loss = y[1:].sum()
        try:
            loss.backward()
        except RuntimeError as error:
            nan_error = error
print("warning:", caught[0].message)
print("RuntimeError:", nan_error)
note = nan_error.__notes__[0]
print(note.splitlines()[0])
for function, line in forward_frames(note)[-2:]:
    print(f"    in {function}: {line}")

# %% [markdown]
# The error names `Log`, its 0th output (the gradient of its only input),
# and the line of the forward pass that called it, `y = tinypytorch.log(x)`,
# followed by the package's own `log`, which made the `Log` node. The real
# note lists the whole stack with files and line numbers, as any traceback.
# PyTorch says the same for this example, with its own name for the node,
# `LogBackward0` (see the check at the end).
#
# The stacks are recorded in the forward pass. With anomaly mode turned on
# around `backward` only, the NaN is still caught and named, but there is no
# place to show (PyTorch: "No forward pass information available"):

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with np.errstate(divide="ignore", invalid="ignore"):
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
# no such reading. `check_nan=False` keeps the recorded stacks but skips the
# NaN test (it costs a pass over every gradient):

# %%
x = Variable(np.array([0.0, 1.0]), name="x")
with np.errstate(divide="ignore", invalid="ignore"), autograd.set_detect_anomaly(True, check_nan=False):
    tinypytorch.log(x)[1:].sum().backward()
print("with check_nan=False, no error: x.grad =", x.grad)

# %% [markdown]
# ### Any error in a backward
#
# The note is added to *every* exception raised by a backward, not only to
# NaN. Here is a user-written function with a bug: the sum of each row of a
# matrix, whose backward forgets to spread the gradient back over the row.
# Its gradient has shape $(n, 1)$ instead of $(n, m)$, which happens to be
# right when $m = 1$. A model uses it twice, on a $(3, 1)$ and a $(3, 2)$
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
try:
    model(narrow, wide).backward()
except ValueError as error:
    print("ValueError:", error)
    print("notes:", getattr(error, "__notes__", None))

# %% [markdown]
# The engine checks the shape of every gradient, so it catches the bug and
# names `RowSum`. But `RowSum` is called twice, and in a real model it may be
# called in fifty places. In anomaly mode the same error says which call
# made the node that failed:

# %%
with autograd.set_detect_anomaly(True):
    try:
        model(narrow, wide).backward()
    except ValueError as error:
        print("ValueError:", error)
        note = error.__notes__[0]
        print(note.splitlines()[0])
        function, line = forward_frames(note)[-1]
        print(f"    in {function}: {line}")

# %% [markdown]
# The same holds for an exception a `backward` raises itself, a typo that
# reads a missing attribute for instance.
#
# ### Turning it on and off, and what it costs
#
# `set_detect_anomaly(mode, check_nan=True)` sets the mode at once, for the
# rest of the program; used in a `with` statement it gives the old mode
# back at the end, as `detect_anomaly` does:

# %%
autograd.set_detect_anomaly(True)
print("after set_detect_anomaly(True):", anomaly.enabled())
autograd.set_detect_anomaly(False)
print("after set_detect_anomaly(False):", anomaly.enabled())
with autograd.set_detect_anomaly(True):
    print("inside a with block:", anomaly.enabled())
print("after the block:", anomaly.enabled())

# %% [markdown]
# Outside anomaly mode a function keeps no stack at all. Inside, every
# recorded operation stores one, a string built by walking and formatting
# the whole Python stack, and every gradient is scanned for NaN:

# %%
x = Variable(np.array([0.5, 1.0]), name="x")
y = tinypytorch.tanh(x)
print("outside anomaly mode, Tanh has creation_stack:", hasattr(y.creator, "creation_stack"))
with autograd.set_detect_anomaly(True):
    y = tinypytorch.tanh(x)
print("inside anomaly mode, Tanh has creation_stack: ", hasattr(y.creator, "creation_stack"))

# %% [markdown]
# How much slower a small graph gets (the figure depends on the machine and
# on how deep the Python stack is, which is why this cell's output is not
# compared):

# %% tags=["nbval-ignore-output"]
def forward_backward(steps=300):
    x = Variable(np.array([0.5, 1.0, 1.5]))
    y = x
    for _ in range(steps):
        y = tinypytorch.tanh(y) * 1.01
    y.sum().backward()


def seconds(repeat=5):
    start = time.perf_counter()
    for _ in range(repeat):
        forward_backward()
    return (time.perf_counter() - start) / repeat


plain = seconds()
with autograd.set_detect_anomaly(True):
    slow = seconds()
print(f"600 operations: {plain * 1e3:.1f} ms plain, {slow * 1e3:.1f} ms in anomaly mode ({slow / plain:.0f}x)")

# %% [markdown]
# So anomaly mode is for finding a bug, not for training: turn it on, run the
# failing step once, read the note, turn it off.
#
# ## `gradcheck`: is the backward right?
#
# Anomaly mode finds errors that announce themselves. A backward that returns
# wrong numbers of the right shape announces nothing. Step 10 caught such
# bugs by comparing `backward` with a numerical derivative, but only for
# element-wise functions (it moved every element of $x$ at once) and only
# with the seed gradient of ones, which let a backward that forgot its `gy`
# pass. `gradcheck` compares the whole **Jacobian**. For a function with
# inputs $x$ (flattened, $n$ elements) and output $y$ ($m$ elements), it is
# the $n \times m$ matrix
#
# $$J_{ij} = \frac{\partial y_j}{\partial x_i},$$
#
# one row per input element and one column per output element, the layout
# PyTorch's `gradcheck` prints. It is computed twice:
#
# - **numerically**, one row at a time: move input element $i$ by
#   $\pm\varepsilon$ and take the central difference of step 04,
#   $J_{i\cdot} \approx \big(y(x + \varepsilon e_i) - y(x - \varepsilon e_i)\big)/2\varepsilon$;
#   that is $2n$ evaluations of the function;
# - **analytically**, one column at a time: a backward pass whose incoming
#   gradient is $e_j$ (1 at output element $j$, 0 elsewhere) returns
#   $\partial y_j / \partial x$, column $j$; that is $m$ backward passes.
#
# They must agree element by element, $|J^{\text{ana}} - J^{\text{num}}| \le
# \text{atol} + \text{rtol}\,|J^{\text{num}}|$, with PyTorch's defaults
# $\varepsilon = 10^{-6}$, $\text{atol} = 10^{-5}$, $\text{rtol} = 10^{-3}$.
# With a function of several inputs and outputs there is one such block per
# (input that requires grad, output) pair. The cost ($2n$ forward and $m$
# backward passes) makes it a tool for small test inputs, not for a model's
# real ones.

# %%
print(inspect.getsource(numerical_jacobian))
print(inspect.getsource(analytical_jacobian))
print(inspect.getsource(gradcheck))

# %% [markdown]
# ### Why float64, and why these tolerances
#
# Step 04 worked out the error of a central difference: a truncation part
# $\frac{\varepsilon^2}{6}|f'''|$ and a rounding part about $uR/\varepsilon$,
# with $u$ the unit roundoff and $R$ the size of the values involved. In
# float64, $u = 2^{-53} \approx 1.1 \times 10^{-16}$, so at
# $\varepsilon = 10^{-6}$ the truncation part is about $10^{-13}|f'''|$ and
# the rounding part about $10^{-10} R$: for functions of moderate size, some
# five orders of magnitude inside `atol`. A wrong backward is usually off by
# far more. In float32, $u = 2^{-24} \approx 6 \times 10^{-8}$:
# the rounding part becomes $0.06\,R$, and on top of that $x \pm \varepsilon$
# itself is rounded, so the step is not even $\varepsilon$. The numerical
# Jacobian is then too poor to judge anything.
#
# To see it with numbers that are the same on every machine, take
# $f(x) = x^3$ built from multiplications only (IEEE 754 rounds each one
# correctly, so every CPU gets the same bits) at points that float32 holds
# exactly, and compare the numerical derivative with $3x^2$:

# %%
def cube(v):
    return v * v * v


points = np.array([0.5, -1.25, 2.0])
for dtype in (np.float64, np.float32):
    x = Variable(points.astype(dtype))
    numerical = np.diag(numerical_jacobian(cube, (x,), eps=1e-6)[(0, 0)])
    print(f"{np.dtype(dtype).name}: largest error of the numerical derivative "
          f"{np.abs(numerical - 3 * points**2).max():.0e}")

# %% [markdown]
# Hence `gradcheck` warns, as PyTorch's does, when an input that requires
# grad is not float64, and the check then fails even for a right backward:

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = gradcheck(cube, Variable(points.astype(np.float32)), raise_exception=False)
print("gradcheck on float32:", result)
print(f"{caught[0].category.__name__}: {caught[0].message}")

# %% [markdown]
# ### Functions of the package pass
#
# `gradcheck(fn, inputs)` takes a function of Variables and a Variable or a
# tuple of them; it checks the inputs that require grad. It returns `True`
# or raises. Below: $\tanh$, a matrix product, and a layer
# $\tanh(X W^\top + b)$ whose input $X$ is data (`requires_grad=False`), so
# only $W$ and $b$ are checked.

# %%
def layer(X, W, b):
    return tinypytorch.tanh(tinypytorch.linear(X, W, b))


rng = np.random.default_rng(0)
x = Variable(rng.standard_normal(4), name="x")
A, B = Variable(rng.standard_normal((2, 3)), name="A"), Variable(rng.standard_normal((3, 4)), name="B")
X = Variable(rng.standard_normal((5, 3)), name="X", requires_grad=False)
W, b = Variable(rng.standard_normal((2, 3)), name="W"), Variable(rng.standard_normal(2), name="b")
print("gradcheck(tanh, x):          ", gradcheck(tinypytorch.tanh, x))
print("gradcheck(matmul, (A, B)):   ", gradcheck(tinypytorch.matmul, (A, B)))
print("gradcheck(layer, (X, W, b)): ", gradcheck(layer, (X, W, b)))

# %% [markdown]
# For $\tanh$, an element-wise function, the Jacobian is diagonal:
# $1 - \tanh^2 x_i$ on the diagonal, exactly $0$ elsewhere (moving $x_i$
# leaves the other outputs unchanged to the last bit). Both Jacobians, to six
# decimals:

# %%
with np.printoptions(precision=6, suppress=True):
    print("numerical:\n", numerical_jacobian(tinypytorch.tanh, (x,), eps=1e-6)[(0, 0)])
    print("analytical:\n", analytical_jacobian(tinypytorch.tanh, (x,))[(0, 0)])

# %% [markdown]
# ### A wrong backward fails
#
# The classic slip in a linear map $y = W x$: its backward must return
# $W^\top g_y$, and returns $W g_y$. For a square $W$ both have the right
# shape, so no shape check can notice, and for a symmetric $W$ the result
# would even be right. Below $x$ is a column, a $(3, 1)$ matrix, and $W$ is
# data, not checked.

# %%
class MatVec(Function):
    """y = W x, for a matrix W and a column x; W gets no gradient."""

    def forward(self, W, x):
        self.save_for_backward(W)
        return W @ x

    def backward(self, gy):
        (W,) = self.saved_tensors
        return None, W.T @ gy


class MatVecBuggy(MatVec):
    def backward(self, gy):
        (W,) = self.saved_tensors
        return None, W @ gy  # bug: W instead of W^T


Wc = Variable(np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [4.0, 0.0, 1.0]]), name="W", requires_grad=False)
xc = Variable(rng.standard_normal((3, 1)), name="x")
print("right backward:", gradcheck(lambda W, x: MatVec()(W, x), (Wc, xc)))
try:
    gradcheck(lambda W, x: MatVecBuggy()(W, x), (Wc, xc))
except GradcheckError as error:
    print("GradcheckError:", error)

# %% [markdown]
# The numerical Jacobian is $J_{ij} = \partial y_j / \partial x_i = W_{ji}$,
# that is $W^\top$; the analytical one is $W$: the transposition shows at a
# glance. (`GradcheckError` is a `RuntimeError`, as in PyTorch.) Input 1 is
# `x`, the second of `(W, x)`.
#
# PyTorch's `gradcheck` judges the same bug written as a
# `torch.autograd.Function` the same way, and prints the same two matrices.
# One difference in wording: PyTorch numbers only the inputs that require
# grad, so for it `x` is input 0.

# %%
import torch
from torch.autograd.gradcheck import GradcheckError as TorchGradcheckError


class MatVecBuggyTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, W, x):
        ctx.save_for_backward(W)
        return W @ x

    @staticmethod
    def backward(ctx, gy):
        (W,) = ctx.saved_tensors
        return None, W @ gy  # the same bug


Wt, xt = torch.tensor(Wc.data), torch.tensor(xc.data, requires_grad=True)
try:
    torch.autograd.gradcheck(MatVecBuggyTorch.apply, (Wt, xt))
except TorchGradcheckError as error:
    print("torch GradcheckError:", error)

# %% [markdown]
# Step 10's forgotten `gy` is caught too. There, the broken function passed
# whenever it came last, because its `gy` was the seed, all ones. The seeds of
# `gradcheck` are one-hot, so column $j$ of the Jacobian comes out as
# $e^{x}$ in *every* row instead of only in row $j$:

# %%
class ForgetfulExp(Function):
    def forward(self, x):
        y = np.exp(x)
        self.save_for_backward(y)
        return y

    def backward(self, gy):
        (y,) = self.saved_tensors
        return y  # bug: should be gy * y


def forgetful_exp(x):
    return ForgetfulExp()(x)


print("ForgetfulExp:", gradcheck(forgetful_exp, x, raise_exception=False))

# %% [markdown]
# ### Bad input
#
# With nothing to differentiate there is nothing to check, and that is an
# error, not a pass:

# %%
try:
    gradcheck(tinypytorch.tanh, Variable(np.ones(3), requires_grad=False))
except ValueError as error:
    print("ValueError:", error)

# %% [markdown]
# ## `gradgradcheck`: second derivatives
#
# Steps 27 and 28 differentiated gradients: `create_graph=True` records the
# backward pass as a graph of its own, which works only if every `backward`
# on the way computes with Variable operations. A `backward` that computes
# on arrays (`x.data`) returns the right numbers, but as a constant: the
# graph of the gradient is cut there, and every derivative through it is
# silently $0$.
#
# `gradgradcheck(fn, inputs)` checks this. The backward pass with incoming
# gradient $v$ computes a function of $x$ and $v$,
#
# $$g(x, v) = J(x)\,v, \qquad g_i = \sum_j v_j \frac{\partial y_j}{\partial x_i},$$
#
# and `gradgradcheck` runs `gradcheck` on $g$. The Jacobian of $g$ holds the
# second derivatives ($\partial g_i / \partial x_k = \sum_j v_j\,
# \partial^2 y_j / \partial x_i \partial x_k$) and $J$ once more
# ($\partial g_i / \partial v_j$). Its analytical side is the backward of the
# backward; $v$ is random (seeded), as in PyTorch.

# %%
print(inspect.getsource(gradgradcheck))

# %% [markdown]
# $x^3$ twice, as a user-written function: once with a backward written with
# Variables, once with the same formula on arrays.

# %%
class Cube(Function):
    def forward(self, x):
        self.save_for_backward(x)
        return x * x * x

    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x * x * gy  # Variables: this computation is recorded under create_graph


class CubeOnArrays(Cube):
    def backward(self, gy):
        (x,) = self.saved_tensors
        return 3 * x.data * x.data * gy.data  # the same numbers, as an array: a constant


x3 = Variable(points, name="x")
for function in (Cube, CubeOnArrays):
    def fn(v, function=function):
        return function()(v)

    first = gradcheck(fn, x3, raise_exception=False)
    second = gradgradcheck(fn, x3, raise_exception=False)
    print(f"{function.__name__:13} gradcheck: {first}   gradgradcheck: {second}")

# %% [markdown]
# `CubeOnArrays` passes `gradcheck` (its gradient is right) and fails
# `gradgradcheck`. The failure shows why: the numerical second derivatives
# are $6 x_i v_i$ on the diagonal, the analytical ones all $0$.

# %%
try:
    gradgradcheck(lambda v: CubeOnArrays()(v), x3)
except GradcheckError as error:
    print("GradcheckError:", error)

# %% [markdown]
# Why this matters: when the cut gradient is one term among others, nothing
# raises, and a second derivative is silently wrong. Differentiate
# $\sum_i g_i + \sum_i x_i^2$, where $g$ is the gradient of $\sum_i x_i^3$;
# the right answer is $6x + 2x$:

# %%
for function in (Cube, CubeOnArrays):
    x3 = Variable(points, name="x")
    (g,) = autograd.grad(function()(x3).sum(), x3, create_graph=True)
    (gg,) = autograd.grad(g.sum() + (x3 * x3).sum(), x3)
    print(f"{function.__name__:13} d/dx (sum(g) + sum(x^2)) = {gg.data}   (8x = {8 * points})")

# %% [markdown]
# PyTorch's `gradgradcheck` agrees: the same function with a backward that
# calls `.detach()` (PyTorch's way of leaving the graph) passes `gradcheck`
# and fails `gradgradcheck`. PyTorch words it differently: it sees that the
# gradient does not depend on $x$ in the graph, so it expects the numerical
# second derivative to be zero, and it is not.

# %%
class CubeDetachedTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return 3 * x.detach() * x.detach() * gy.detach()


torch.manual_seed(0)
x3t = torch.tensor(points, requires_grad=True)
print("torch gradcheck:", torch.autograd.gradcheck(CubeDetachedTorch.apply, x3t))
try:
    torch.autograd.gradgradcheck(CubeDetachedTorch.apply, x3t)
except TorchGradcheckError as error:
    print("torch gradgradcheck, GradcheckError:", str(error).splitlines()[0])

# %% [markdown]
# One more thing `gradgradcheck` does *not* do: it checks the backward of the
# backward against the backward, not against the true derivative. The buggy
# `MatVecBuggy` computes $g = W v$, a function whose own derivatives its
# (differentiable) backward gets right, so `gradgradcheck` passes, in both
# frameworks. Run `gradcheck` first; `gradgradcheck` only adds the second
# order.

# %%
print("MatVecBuggy, gradgradcheck:      ", gradgradcheck(lambda W, x: MatVecBuggy()(W, x), (Wc, xc)))
print("MatVecBuggy, torch gradgradcheck:", torch.autograd.gradgradcheck(MatVecBuggyTorch.apply, (Wt, xt)))

# %% [markdown]
# ## Check against PyTorch
#
# - **The NaN case.** $\log$ of $(0, 1)$, second element kept, in anomaly
#   mode: both raise, naming the function (`Log`, `LogBackward0`) and its 0th
#   output, and both tracebacks of the forward call (our note, PyTorch's
#   warning) point at the same line of `nan_case`.
# - **An error in a backward.** `RowSum`'s wrong shape: both raise, and both
#   point at the second call, `t = row_sum(b)`.
# - **gradcheck and gradgradcheck** give torch's verdicts for every function
#   of this step, with right and wrong backwards: `tanh`, `matmul`, the
#   layer, `Cube`, `CubeOnArrays`, `ForgetfulExp`, `MatVec`, `MatVecBuggy`
#   (torch versions of the user functions written the same way, `.detach()`
#   for `.data`).
# - **The Jacobians.** Our analytical Jacobian of each function equals
#   `torch.autograd.functional.jacobian` of its torch version (same backward,
#   right or wrong); our numerical Jacobian equals it where the backward is
#   right.

# %%
from torch.autograd.functional import jacobian


def nan_case(m, x):
    y = m.log(x)
    return y[1:].sum()


def rowsum_case(row_sum, a, b):
    s = row_sum(a)
    t = row_sum(b)
    return (s * t).sum()


def frame_of(function, text):
    """The line of source that the traceback `text` shows for `function`."""
    return [line for name, line in forward_frames(text) if name == function]


def ours_anomaly(case, *args):
    with np.errstate(divide="ignore", invalid="ignore"), autograd.set_detect_anomaly(True):
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


message, note = ours_anomaly(nan_case, tinypytorch, Variable(np.array([0.0, 1.0])))
message_t, note_t = torch_anomaly(nan_case, torch, torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True))
NAN = re.compile(r"Function '(\w+)' returned nan values in its (\d+)th output\.")
assert NAN.fullmatch(message).groups() == ("Log", "0") and NAN.fullmatch(message_t).groups() == ("LogBackward0", "0")
assert note.startswith("Error detected in Log.") and note_t.startswith("Error detected in LogBackward0.")
assert frame_of("nan_case", note) == frame_of("nan_case", note_t) == ["y = m.log(x)"]
print(f"NaN case: {message}  |  torch: {message_t}")
print(f"  both forward tracebacks point at nan_case: {frame_of('nan_case', note)[0]}")


class RowSumTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sum(dim=1)

    @staticmethod
    def backward(ctx, gy):
        return gy.reshape(-1, 1)  # the same bug


def row_sum(x):
    return RowSum()(x)


message, note = ours_anomaly(rowsum_case, row_sum, narrow, wide)
message_t, note_t = torch_anomaly(rowsum_case, RowSumTorch.apply, *[torch.tensor(v.data, requires_grad=True)
                                                                    for v in (narrow, wide)])
assert "RowSum" in message and "(3, 1)" in message and "(3, 2)" in message
assert "RowSumTorch" in message_t and "[3, 1]" in message_t and "[3, 2]" in message_t
assert frame_of("rowsum_case", note) == frame_of("rowsum_case", note_t) == ["t = row_sum(b)"]
print("wrong shape in RowSum: both raise; both forward tracebacks point at rowsum_case: t = row_sum(b)")


class CubeTorch(CubeDetachedTorch):
    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return 3 * x * x * gy


class ForgetfulExpTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        return y


class MatVecTorch(MatVecBuggyTorch):
    @staticmethod
    def backward(ctx, gy):
        (W,) = ctx.saved_tensors
        return None, W.T @ gy


def layer_torch(X, W, b):
    return torch.tanh(torch.nn.functional.linear(X, W, b))


CASES = {  # name: (ours, torch's, inputs, whether the backward is right)
    "tanh": (tinypytorch.tanh, torch.tanh, (x,), True),
    "matmul": (tinypytorch.matmul, torch.matmul, (A, B), True),
    "layer": (layer, layer_torch, (X, W, b), True),
    "Cube": (lambda v: Cube()(v), CubeTorch.apply, (x3,), True),
    "CubeOnArrays": (lambda v: CubeOnArrays()(v), CubeDetachedTorch.apply, (x3,), True),
    "ForgetfulExp": (forgetful_exp, ForgetfulExpTorch.apply, (x,), False),
    "MatVec": (lambda W, x: MatVec()(W, x), MatVecTorch.apply, (Wc, xc), True),
    "MatVecBuggy": (lambda W, x: MatVecBuggy()(W, x), MatVecBuggyTorch.apply, (Wc, xc), False),
}
print(f"{'':14}{'gradcheck':>18}{'gradgradcheck':>22}")
print(f"{'':14}{'ours':>10}{'torch':>8}{'ours':>14}{'torch':>8}")
for name, (ours, theirs, inputs, right) in CASES.items():
    tensors = tuple(torch.tensor(v.data, requires_grad=v.requires_grad) for v in inputs)
    verdicts = (gradcheck(ours, inputs, raise_exception=False),
                torch.autograd.gradcheck(theirs, tensors, raise_exception=False),
                gradgradcheck(ours, inputs, raise_exception=False),
                torch.autograd.gradgradcheck(theirs, tensors, raise_exception=False))
    assert verdicts[0] == verdicts[1] == right and verdicts[2] == verdicts[3], (name, verdicts)
    print(f"{name:14}{verdicts[0]!s:>10}{verdicts[1]!s:>8}{verdicts[2]!s:>14}{verdicts[3]!s:>8}")

    checked = [i for i, v in enumerate(inputs) if v.requires_grad]

    def of_checked(*ts, theirs=theirs, tensors=tensors, checked=checked):
        full = list(tensors)
        for i, t in zip(checked, ts):
            full[i] = t
        return theirs(*full)

    expected = jacobian(of_checked, tuple(tensors[i] for i in checked))
    analytical, numerical = analytical_jacobian(ours, inputs), numerical_jacobian(ours, inputs, 1e-6)
    for i, J in zip(checked, expected):
        J = J.reshape(-1, inputs[i].size).T.numpy()  # torch: (output, input) -> ours: (input, output)
        np.testing.assert_allclose(analytical[(i, 0)], J, rtol=1e-12, atol=1e-14)
        if right:
            np.testing.assert_allclose(numerical[(i, 0)], J, rtol=1e-6, atol=1e-8)
print(f"Jacobians: analytical equal torch.autograd.functional.jacobian in all {len(CASES)} cases,",
      f"numerical too in the {sum(right for *_, right in CASES.values())} with a right backward")
print("PyTorch check passed: anomaly mode names the NaN and the failing call; gradcheck and gradgradcheck verdicts "
      "and Jacobians equal torch's")
