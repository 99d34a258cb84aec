# %% [markdown]
# # Step 01: `Variable`, a box around an array
#
# Every deep-learning framework has one central object that holds numbers.
# PyTorch calls it `Tensor`; ours is `Variable`, as in DeZero and in PyTorch
# before version 0.4. In this first step a `Variable` does one thing: it holds
# a NumPy array in its attribute `data`.
#
# That is the whole idea, and the box is worth having now. Later steps put
# more in it (a gradient `grad`, the function that made it `creator`, a
# `name`), and code that only needs the numbers keeps reading `x.data`.

# %%
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch

# %% [markdown]
# ## Arrays are the unit of data
#
# We build on NumPy's `ndarray`. A 0-dimensional array such as `np.array(1.0)`
# is a scalar, a 1-dimensional one a vector, a 2-dimensional one a matrix.
# `ndim` counts the dimensions and `shape` gives the size along each.

# %%
for value in (np.array(1.0), np.array([1.0, 2.0, 3.0]), np.array([[1.0, 2.0], [3.0, 4.0]])):
    print(f"ndim={value.ndim}  shape={value.shape!s:7}  {value.tolist()}")

# %% [markdown]
# ## The `Variable` class
#
# The class stores whatever array it is given. Nothing is copied: `x.data` is
# the very array we passed in.

# %%
class Variable:
    def __init__(self, data):
        self.data = data


# %%
data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
x = Variable(data)
print("x.data.shape =", x.data.shape, "| x.data is data:", x.data is data)
x.data = np.array(2.0)
print("after x.data = np.array(2.0):", x.data)

# %% [markdown]
# Drawn, a `Variable` is a box with one slot, and the slot refers to an
# array, which keeps its own shape and dtype. The box does not care how many
# dimensions the array has.

# %% tags=["hide-input"]
def draw_box(ax, x, y, w, h, face, text="", size=10):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", facecolor=face, edgecolor="0.3"))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)


fig, ax = plt.subplots(figsize=(8, 3))
draw_box(ax, 0.2, 0.4, 3.2, 2.2, "lightblue")
ax.text(1.8, 2.3, "Variable", ha="center", fontsize=12, weight="bold")
draw_box(ax, 0.6, 1.0, 2.4, 0.8, "white", "data  ●", size=11)
draw_box(ax, 4.6, 0.3, 3.6, 2.4, "#fff2cc")
ax.text(6.4, 2.35, "numpy.ndarray", ha="center", fontsize=11, weight="bold")
for row, values in enumerate(data):
    for col, value in enumerate(values):
        draw_box(ax, 4.9 + 1.0 * col, 1.45 - 0.6 * row, 0.8, 0.45, "white", f"{value:.0f}")
ax.text(6.4, 0.45, "shape (2, 3), dtype float64", ha="center", fontsize=10)
ax.annotate("", xy=(4.6, 1.4), xytext=(2.75, 1.4), arrowprops=dict(arrowstyle="-|>", lw=1.5, color="0.2"))
ax.text(3.9, 1.55, "refers to", ha="center", fontsize=9, color="0.3")
ax.set(xlim=(0, 8.5), ylim=(0.1, 2.9))
ax.axis("off")
ax.set_title("Variable(data): a box whose slot data refers to the array, not a copy", fontsize=11)
plt.show()

# %% [markdown]
# Nothing yet stops us from putting a float, a list or a string in the box,
# and the box knows nothing about gradients. Step 02 adds the second main
# class, `Function`; step 09 makes `Variable` refuse anything but an
# `ndarray`.
#
# ## Check against PyTorch
#
# PyTorch's box is the class `torch.Tensor`; the function `torch.tensor`
# makes one from an array. Both boxes must hold the same numbers, with the
# same shape and dtype (`float64`, NumPy's default and the precision of every
# check in this tutorial).

# %%
import torch  # noqa: E402

for array in (np.array(1.0), np.array([1.0, 2.0, 3.0]), np.arange(6.0).reshape(2, 3)):
    v, t = Variable(array), torch.tensor(array)
    np.testing.assert_array_equal(v.data, t.numpy())
    assert v.data.shape == tuple(t.shape) and str(t.dtype) == f"torch.{v.data.dtype}"
    print(f"shape {v.data.shape!s:7} dtype {v.data.dtype}: Variable.data == torch.tensor(array)")
print("PyTorch check passed: Variable.data holds the same values, shape and dtype as torch.tensor(array)")

# %% [markdown]
# ## Recap
#
# - A `Variable` is a box; its attribute `data` holds a NumPy `ndarray`.
# - The box keeps the array itself, not a copy: `x.data is data`.
# - `ndim`, `shape` and `dtype` belong to the array; `float64` is the
#   precision every check uses.
# - PyTorch's counterpart is the class `torch.Tensor`, made here by the
#   function `torch.tensor`; it holds the same values.
#
# ## Exercises
#
# **1.** Write `describe(v)`, returning `(ndim, shape, dtype name)` of a
# Variable's array, and compare it with what the tensor `t =
# torch.tensor(array)` reports (`t.dim()`, `tuple(t.shape)`, `t.dtype`) for
# a scalar, a vector, a matrix and an array of shape `(2, 3, 4)`.

# %% tags=["hide-cell"]
def describe(v):
    return v.data.ndim, v.data.shape, v.data.dtype.name


for array in (np.array(1.0), np.array([1.0, 2.0]), np.ones((2, 2)), np.zeros((2, 3, 4))):
    t = torch.tensor(array)
    assert describe(Variable(array)) == (t.dim(), tuple(t.shape), str(t.dtype).removeprefix("torch."))
    print(describe(Variable(array)))

# %% [markdown]
# **2.** Our box keeps the array it was given. `torch.tensor(array)` copies
# it; `torch.from_numpy(array)` shares its memory. Change the array in place
# (`array[0] = 9.0`) and find out which of the two our `Variable` behaves
# like.

# %% tags=["hide-cell"]
def after_writing_in_place():
    """What x.data, torch.tensor and torch.from_numpy see after the array they were made from changes."""
    array = np.array([1.0, 2.0, 3.0])
    v, copied, shared = Variable(array), torch.tensor(array), torch.from_numpy(array)
    array[0] = 9.0
    return v.data[0], copied[0].item(), shared[0].item()


ours, copied, shared = after_writing_in_place()
print(f"Variable sees {ours}, torch.tensor sees {copied}, torch.from_numpy sees {shared}")
print("Variable behaves like torch.from_numpy:", ours == shared != copied)
