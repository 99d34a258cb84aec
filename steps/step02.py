# %% [markdown]
# # Step 02: `Function`, a Variable in and a Variable out
#
# A computation is a chain of operations. Our values live in `Variable`s
# (step 01); the operations become `Function`s. This step writes the base
# class `Function` and its first subclass, `Square`, which computes $y = x^2$.
#
# The idea: **a `Function` takes a `Variable` and returns a `Variable`**. It
# unwraps the array, lets `forward` compute on the bare array, and wraps the
# result in a new `Variable`. A subclass writes only `forward`, its maths.
#
# Why a class rather than `def square(x)`? An operation of an autodiff
# framework has more to do than compute its result: from step 06 on it
# remembers its input to compute a derivative later. A class gives that state
# a home, and the base class does the bookkeeping once for every operation.
#
# The whole framework as it stands after this step is in the collapsed cell;
# `Variable` is step 01's.

# %% tags=["hide-cell"]
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch


class Variable:
    def __init__(self, data):
        self.data = data


# %% [markdown]
# ## The `Function` base class
#
# Defining `__call__` makes instances callable: for `f = Square()`, `f(x)`
# runs `f.__call__(x)`. The base class's own `forward` raises
# `NotImplementedError`: `Function` is an abstract operation, and a subclass
# must say what it computes.

# %%
class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


class Square(Function):
    def forward(self, x):
        return x ** 2


# %% [markdown]
# What happens in one call, `Square()(x)`:

# %% tags=["hide-input"]
def draw_box(ax, xy, w, h, face, text, size=10, style="round,pad=0.05", edge="0.3"):
    ax.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h, boxstyle=style, facecolor=face,
                                edgecolor=edge))
    ax.text(*xy, text, ha="center", va="center", fontsize=size)


def draw_arrow(ax, start, end, label, label_x=None):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", lw=1.4, color="0.2"))
    ax.text((start[0] + end[0]) / 2 if label_x is None else label_x, start[1] - 0.35, label, ha="center",
            va="top", fontsize=8, family="monospace")


fig, ax = plt.subplots(figsize=(9, 3))
ax.add_patch(FancyBboxPatch((1.55, 0.35), 6.35, 2.05, boxstyle="round,pad=0.05", facecolor="#f3f3f3",
                            edgecolor="0.5", linestyle="--"))
ax.text(4.725, 2.2, "Function.__call__ (the same for every function)", ha="center", fontsize=10)
draw_box(ax, (0.7, 1.2), 1.1, 0.8, "lightblue", "Variable\nx\n10.0")
draw_box(ax, (2.75, 1.2), 0.7, 0.5, "#fff2cc", "10.0")
draw_box(ax, (4.5, 1.2), 1.3, 0.7, "#ffcc80", "forward\nx ** 2", style="square,pad=0.05")
draw_box(ax, (6.25, 1.2), 0.7, 0.5, "#fff2cc", "100.0")
draw_box(ax, (8.7, 1.2), 1.1, 0.8, "#caff70", "Variable\ny\n100.0")
# each label sits inside the dashed box, where its step happens, clear of the box's border
draw_arrow(ax, (1.3, 1.2), (2.35, 1.2), ".data", label_x=1.925)
draw_arrow(ax, (3.15, 1.2), (3.8, 1.2), "")
draw_arrow(ax, (5.2, 1.2), (5.85, 1.2), "")
draw_arrow(ax, (6.65, 1.2), (8.1, 1.2), "Variable(y)", label_x=7.27)
ax.text(4.725, 0.55, "Square writes only this: its maths on a bare ndarray", ha="center", fontsize=9,
        color="#b22222")
ax.set(xlim=(0, 9.6), ylim=(0.2, 2.6))
ax.axis("off")
ax.set_title("Square()(x): unwrap, forward on the array, wrap", fontsize=11)
plt.show()

# %%
x = Variable(np.array(10.0))
y = Square()(x)
print("type(y) =", type(y).__name__, "| y.data =", y.data)
m = Variable(np.array([[1.0, -2.0], [3.0, -4.0]]))
print(Square()(m).data)

# %% [markdown]
# Input and output are both `Variable`s, so the output of one function can be
# the input of the next: step 03 chains them. Because `forward` receives an
# array, `x ** 2` is NumPy's element-wise power and `Square` squares arrays
# of any shape. (For a 0-dimensional input NumPy returns a scalar,
# `np.float64`, rather than an array; step 09 deals with that.)
#
# ## Check against PyTorch
#
# PyTorch's `Square` is `torch.square`. Squaring is one multiplication, which
# IEEE 754 rounds the same everywhere, so the values must agree bit for bit
# (`assert_array_equal`, no tolerance): a scalar, a matrix and a seeded random
# 3-d array.

# %%
import torch  # noqa: E402

rng = np.random.default_rng(0)
for array in (np.array(10.0), np.array([[1.0, -2.0], [3.0, -4.0]]), rng.normal(size=(2, 3, 4))):
    np.testing.assert_array_equal(Square()(Variable(array)).data, torch.square(torch.tensor(array)).numpy())
    print(f"shape {array.shape!s:9}: Square()(x).data == torch.square(x)")
print("PyTorch check passed: Square()(x).data equals torch.square(x) bit for bit")

# %% [markdown]
# ## Recap
#
# - A `Function` takes a `Variable` and returns a new `Variable`.
# - `__call__`, in the base class, unwraps the array, calls `forward` and
#   wraps the result; a subclass writes only `forward`.
# - `forward` works on NumPy arrays, so an element-wise function handles any
#   shape.
# - The base class's `forward` raises `NotImplementedError`.
#
# ## Exercises
#
# **1.** Write `Cube(Function)`, $y = x^3$, and compare it with
# `torch.pow(t, 3)` on a seeded random array. (NumPy and PyTorch compute a
# cube in different ways, so allow a relative difference of $10^{-15}$.)

# %% tags=["hide-cell"]
class Cube(Function):
    def forward(self, x):
        return x ** 3


array = np.random.default_rng(1).normal(size=(3, 4))
np.testing.assert_allclose(Cube()(Variable(array)).data, torch.pow(torch.tensor(array), 3).numpy(), rtol=1e-15)
print("Cube()(x) equals torch.pow(x, 3) within 1e-15")

# %% [markdown]
# **2.** A function need not be element-wise. Write `Sum(Function)`, whose
# forward adds every element of its input and returns a 0-dimensional array,
# and compare with `torch.sum`.

# %% tags=["hide-cell"]
class Sum(Function):
    def forward(self, x):
        return np.asarray(np.sum(x))


array = np.arange(12.0).reshape(3, 4)
total = Sum()(Variable(array))
assert total.data.shape == () and total.data == torch.sum(torch.tensor(array)).item()
print("Sum()(x).data =", total.data, "== torch.sum(x)")
