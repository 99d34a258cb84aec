# %% [markdown]
# # Step 01: `Variable`, a box around an array
#
# Every deep-learning framework has one central object that holds numbers and
# remembers where they came from. PyTorch calls it `Tensor`; we will call ours
# `Variable`, as DeZero and early PyTorch (before version 0.4) did.
#
# In this first step a `Variable` does only one thing: it holds a NumPy array in
# its `data` attribute. That sounds trivial, and it is. But fixing the shape of
# the box now pays off later. In the coming steps the same box will also hold
# a gradient (`grad`), a link to the function that created it (`creator`), a
# name, and more. Code that uses a `Variable` never has to know which of these
# exist: it reads `x.data` and gets the array.
#
# ## Arrays are the unit of data
#
# We build on NumPy's `ndarray`. A 0-dimensional array such as `np.array(1.0)`
# is a scalar, a 1-dimensional array is a vector, a 2-dimensional one a matrix,
# and so on. The number of dimensions is `ndim`; the size along each dimension
# is `shape`.

# %%
import numpy as np

for value in (np.array(1.0), np.array([1.0, 2.0, 3.0]), np.array([[1.0, 2.0], [3.0, 4.0]])):
    print(f"ndim={value.ndim}  shape={value.shape!s:7}  {value.tolist()}")

# %% [markdown]
# ## The `Variable` class
#
# The class stores whatever array it is given. Nothing is copied: `x.data` is
# the very array we passed in, so writing `x.data = ...` replaces the contents
# of the box.

# %%
class Variable:
    def __init__(self, data):
        self.data = data


# %%
data = np.array(1.0)
x = Variable(data)
print("x.data =", x.data)
print("same array object:", x.data is data)

x.data = np.array(2.0)
print("after x.data = np.array(2.0):", x.data)

# %% [markdown]
# The box does not care how many dimensions the array has:

# %%
m = Variable(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
print("m.data.shape =", m.data.shape)
print(m.data)

# %% [markdown]
# ## What is still missing
#
# Right now nothing stops us from putting a Python float, a list or a string in
# the box, and `Variable` knows nothing about gradients. Step 02 adds the second
# main class, `Function`, which takes `Variable`s in and gives `Variable`s out;
# step 09 makes `Variable` reject anything that is not an `ndarray`.
#
# ## Check against PyTorch
#
# The PyTorch counterpart of our box is `torch.tensor`. Both should hold the
# same numbers, with the same shape and dtype (`float64`: NumPy's default and
# the precision every check in this tutorial uses).

# %%
import torch

for array in (np.array(1.0), np.array([1.0, 2.0, 3.0]), np.arange(6.0).reshape(2, 3)):
    v = Variable(array)
    t = torch.tensor(array)
    np.testing.assert_array_equal(v.data, t.numpy())
    assert v.data.shape == tuple(t.shape) and str(t.dtype) == f"torch.{v.data.dtype}"
    print(f"shape {v.data.shape!s:7} dtype {v.data.dtype}: Variable.data == torch.tensor")

print("PyTorch check passed: Variable.data holds the same values, shape and dtype as torch.tensor")
