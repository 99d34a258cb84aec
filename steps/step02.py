# %% [markdown]
# # Step 02: `Function`, a Variable in and a Variable out
#
# A computation is a chain of operations: take a value, apply an operation,
# take its result, apply the next one. In our framework the values live in
# `Variable`s (step 01) and the operations will be `Function`s. This step
# writes the `Function` base class and its first concrete subclass, `Square`,
# which computes $y = x^2$.
#
# Why a class, and not a plain Python function such as `def square(x)`?
# Because an operation in an autodiff framework has more to do than compute
# its result. In step 06 it will remember its input, so that it can compute a
# derivative later, and in step 07 it will record itself as the creator of its
# output. A class gives that state a home, and a base class lets every
# operation share the bookkeeping while writing only its own mathematics.
#
# ## The framework so far
#
# `Variable` is unchanged from step 01.

# %%
import numpy as np


class Variable:
    def __init__(self, data):
        self.data = data


# %% [markdown]
# ## The `Function` base class
#
# Defining `__call__` makes instances callable: for `f = Square()`, the
# expression `f(x)` runs `f.__call__(x)`. The base class does the part that is
# the same for every operation: it unwraps the array from the input `Variable`,
# hands the bare array to `forward`, and wraps the result in a new `Variable`.
# Subclasses implement only `forward`, the computation on NumPy arrays.
#
# The base class's own `forward` raises `NotImplementedError`. `Function` is an
# abstract operation: calling it directly is a mistake, and the error says so at
# once instead of returning something meaningless.

# %%
class Function:
    def __call__(self, input):
        x = input.data  # unwrap: forward works on plain ndarrays
        y = self.forward(x)
        output = Variable(y)  # wrap: every function returns a Variable
        return output

    def forward(self, x):
        raise NotImplementedError()


# %% [markdown]
# ## `Square`, the first concrete function
#
# `Square` inherits `__call__` and supplies the mathematics:

# %%
class Square(Function):
    def forward(self, x):
        return x ** 2


# %%
x = Variable(np.array(10.0))
f = Square()
y = f(x)
print("type(y) =", type(y).__name__)
print("y.data  =", y.data)

# %% [markdown]
# Input and output are both `Variable`s, so the output of one function can be
# the input of the next; step 03 uses exactly that to chain functions.
#
# Because `forward` receives a NumPy array, `x ** 2` is NumPy's element-wise
# power, and `Square` squares every element of an array of any shape without a
# line of extra code:

# %%
m = Variable(np.array([[1.0, -2.0], [3.0, -4.0]]))
print(Square()(m).data)

# %% [markdown]
# Calling the abstract base class fails with the error we built in:

# %%
try:
    Function()(x)
except NotImplementedError:
    print("Function()(x) raised NotImplementedError: a subclass must define forward")

# %% [markdown]
# One detail to remember for later. For the 0-dimensional input above, NumPy
# returned a NumPy *scalar*, `np.float64`, not a 0-dimensional `ndarray`:

# %%
print("type(x.data) =", type(x.data).__name__)
print("type(y.data) =", type(y.data).__name__)

# %% [markdown]
# Most code cannot tell the two apart, so nothing breaks yet. Step 09 makes
# `Variable` accept only `ndarray`s and has to deal with this; until then we
# simply note it.
#
# ## Check against PyTorch
#
# PyTorch's counterpart of `Square` is `torch.square`. Squaring is a single
# multiplication, which IEEE 754 rounds the same way everywhere, so the values
# must agree bit for bit: `assert_array_equal`, no tolerance. We compare a
# scalar, a vector, a matrix and a seeded random 3-d array.

# %%
import torch

rng = np.random.default_rng(0)
for array in (np.array(10.0), np.array([-1.5, 0.0, 2.0]), np.array([[1.0, -2.0], [3.0, -4.0]]),
              rng.normal(size=(2, 3, 4))):
    ours = Square()(Variable(array)).data
    theirs = torch.square(torch.tensor(array)).numpy()
    np.testing.assert_array_equal(ours, theirs)
    print(f"shape {array.shape!s:9}: Square()(x).data == torch.square(x)")

print("PyTorch check passed: Square()(x).data equals torch.square(x) bit for bit")
