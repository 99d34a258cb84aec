# %% [markdown]
# # Step 59: Dtypes and type promotion, PyTorch's rules
#
# Every tensor has a dtype, and when two dtypes meet in one operation
# something must decide the dtype of the result. NumPy and PyTorch decide
# differently, and until now the package let NumPy decide: its arrays did
# the arithmetic. Most of the time nobody notices. But a float32 model
# whose activations quietly become float64 takes twice the memory, and
# autocast (step 61) casts only float32: a model built of float64 modules
# it leaves alone. This step gives the package PyTorch's three rules, in
# one module that every operation asks (`tinypytorch.dtypes`): the
# **default dtype**, the **category lattice** of dtypes, and the three
# **ranks** of operands.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import dtypes, nn
from tinypytorch.core import Function
from tinypytorch.utils.listing import show_code

# %% [markdown]
# ## The default dtype
#
# NumPy makes a float64 array of Python floats; PyTorch makes float32,
# its *default dtype*, for Python floats, for new tensors (`ones`, `rand`)
# and for the parameters of its modules. Half the bytes of float64, and
# enough for training: float32 keeps about seven decimal digits. An
# array handed over keeps its own dtype.
#
# A dtype of the package is PyTorch's kind of object: one per dtype
# (`x.dtype is tp.float32`), printed as PyTorch prints it,
# `torch.float32`. It holds NumPy's dtype (`tp.float32.dtype`), which the
# arrays underneath use, and NumPy takes it wherever a dtype goes.

# %%
print("np.array([1.5, 2.0]):         ", np.array([1.5, 2.0]).dtype)
print("tp.tensor([1.5, 2.0]):        ", tp.tensor([1.5, 2.0]).dtype)
print("tp.ones(2), nn.Linear's weight:", tp.ones(2).dtype, nn.Linear(2, 3).weight.dtype)
print("tp.from_numpy(np.ones(2)):    ", tp.from_numpy(np.ones(2)).dtype)

# %% [markdown]
# `set_default_dtype` changes it for everything made afterwards, as
# `torch.set_default_dtype` does. The pages of steps 52 to 56 start with
# `set_default_dtype(float64)`: their checks against PyTorch then hold to
# $10^{-12}$ rather than float32's $10^{-6}$.

# %%
tp.set_default_dtype(tp.float64)
print("under float64:", tp.tensor([1.5]).dtype, nn.Linear(2, 3).weight.dtype)
tp.set_default_dtype(tp.float32)

# %% [markdown]
# ## Categories first
#
# The dtypes fall into four categories, ordered: bool < integers <
# floating point < complex. Two dtypes of one category promote to the
# smaller one that holds both (`int8` and `uint8` to `int16`). Two of
# different categories promote to the higher category's dtype, whatever
# the widths: `int64` with `float16` gives `float16`. NumPy looks at the
# widths too, and gives `float64`, the float it counts as wide enough for
# any int64.

# %%
pairs = [("int8", "uint8"), ("int64", "float16"), ("int32", "float32"),
         ("bool", "int8"), ("float16", "float32")]
print(f"{'':18}{'promote_types':>15}{'NumPy':>10}")
for a, b in pairs:
    print(f"{a + ', ' + b:18}{str(tp.promote_types(a, b)):>15}{str(np.promote_types(a, b)):>10}")

# %% tags=["hide-input"]
LATTICE = {"bool": ["bool"], "integer": ["uint8", "int8", "int16", "int32", "int64"],
           "floating": ["float16", "float32", "float64"], "complex": ["complex64", "complex128"]}


def lattice_picture():
    """The dtypes by category (columns) and width (rows), and where two of them promote to."""
    fig, axis = plt.subplots(figsize=(8, 3.5))
    place, box = {}, {}  # dtype -> where its name is drawn, and the box drawn around it
    for column, (category, names) in enumerate(LATTICE.items()):
        for name in names:
            bits = np.dtype(name).itemsize * 8
            x = column + {"uint8": -0.22, "int8": 0.22}.get(name, 0.0)  # the two 8-bit integers side by side
            place[getattr(tp, name)] = (x, np.log2(bits) - 3)
            box[getattr(tp, name)] = axis.text(x, np.log2(bits) - 3, name, ha="center", va="center", fontsize=9,
                                               bbox={"boxstyle": "round", "fc": f"C{column}", "alpha": 0.25})
        axis.text(column, -0.85, category, ha="center", fontsize=10, weight="bold")

    def arrow(start, end, **style):  # from box edge to box edge, whatever the names' widths
        axis.annotate("", xy=place[end], xytext=place[start], arrowprops={
            "arrowstyle": "->", "shrinkA": 2, "shrinkB": 2, "patchA": box[start].get_bbox_patch(),
            "patchB": box[end].get_bbox_patch(), **style})

    for a, b, color in [(tp.uint8, tp.int8, "C1"), (tp.int64, tp.float16, "C3")]:
        result = tp.promote_types(a, b)
        for start in (a, b):
            if start is not result:
                arrow(start, result, color=color, lw=1.5)
    arrow(tp.int64, tp.float64, color="0.5", ls="--")
    axis.text(1.35, 0.5, "uint8, int8 -> int16", color="C1", fontsize=9)
    axis.text(2.3, 1.0, "int64, float16 -> float16", color="C3", fontsize=9, va="center")
    axis.text(1.5, 3.25, "NumPy: float64", color="0.4", fontsize=9, ha="center")
    axis.set_yticks(range(5), [f"{2 ** (k + 3)} bits" for k in range(5)], fontsize=8)
    axis.set(xlim=(-0.5, 3.5), ylim=(-1.1, 4.5), xticks=[],
             title="promote_types: the higher category wins, then the wider dtype within it")
    for side in ("top", "right", "bottom"):
        axis.spines[side].set_visible(False)
    fig.tight_layout()
    plt.show()


lattice_picture()

# %% [markdown]
# ## Three ranks of operands
#
# The second rule is about *which operands count*. PyTorch ranks them: a
# tensor with dimensions, then a 0-d tensor, then a Python number. Each
# rank is promoted on its own, and a lower rank changes the result only
# if its category is higher than the ranks above it. So a 0-d float64
# tensor (a loss scale, a learning rate kept as a tensor) leaves a
# float32 tensor float32: it is only a number that happens to be stored
# as a tensor. And an int64 tensor times 0.5 becomes float, but the
# default float: a Python float counts as float32.
#
# NumPy 2 ranks only Python numbers below arrays ("weak" scalars); a 0-d
# array counts like any array, and an integer array that meets a Python
# float becomes float64.

# %%
v32, v16 = np.ones(3, np.float32), np.ones(3, np.float16)
i64, i32 = np.arange(3), np.arange(3, dtype=np.int32)
cases = {  # written once, each side computed by its library
    "float32 vector * 0-d float64": (v32, np.array(2.0)),
    "int64 vector * 0.5": (i64, 0.5),
    "float16 vector + 0-d float32": (v16, np.array(1.0, np.float32)),
    "int32 vector + 0-d int64": (i32, np.array(5)),
    "int64 vector * 0-d float64": (i64, np.array(2.5)),
    "bool vector + 1": (np.array([True, False]), 1),
}


def ours(a, b):
    return tp.from_numpy(a) * (b if isinstance(b, (int, float)) else tp.from_numpy(b))


print(f"{'':30}{'NumPy':>10}{'tinypytorch':>15}")
for name, (a, b) in cases.items():
    print(f"{name:30}{str((a * b).dtype):>10}{str(ours(a, b).dtype):>15}")

# %% [markdown]
# The rule in the package, `promote_ranks`, takes each operand as a
# (dtype, rank) pair, the dtype its array's (NumPy's: inside, the package
# works with those, and `promote` is `promote_types` on them); `_combine`
# says when a lower rank counts:

# %%
show_code(dtypes.promote_ranks, dtypes._combine, step=59)

# %% [markdown]
# ## Where the operations ask
#
# An element-wise operation of several inputs (`+`, `*`, `/`, `**`,
# `maximum`, `where`) sets `promotes = True`. When its inputs' dtypes
# differ, `Function.__call__` hands them to `promoted` before the
# forward runs, so that NumPy only ever computes on arrays of one dtype,
# the one PyTorch's rule chose. An input of another dtype is replaced by
# a stand-in: the cast array, with the input's place in the graph and its
# version counter, so a saved tensor still notices an in-place change of
# the input (step 36). Inputs of one dtype, nearly every call, skip it.

# %%
show_code(Function.promoted, step=59)

# %% [markdown]
# Three more of PyTorch's rules follow from the same module. A floating
# operation (`exp`, `sqrt`, `sigmoid`, true division) of integers gives
# the default float. A matrix product does not promote at all: mixed
# dtypes are refused, since a silent cast of a large matrix is costly.
# And an in-place operation may not cast its result *down* a category:
# an integer tensor cannot hold `x + 1.5`.

# %%
i = tp.tensor([1, 2, 3])
print("exp(int64):", tp.exp(i).dtype, "| int64 / int64:", (i / i).dtype, "| int64 // 2:", (i // 2).dtype)
for attempt in (lambda: tp.ones(2, 2) @ tp.ones(2, 2, dtype=tp.float64), lambda: i.add_(1.5),
                lambda: i.mean()):
    try:
        attempt()
    except RuntimeError as error:
        print(textwrap.fill(f"RuntimeError: {error}", 104, subsequent_indent="    "))

# %% [markdown]
# ## What the ranks save
#
# A float32 network that multiplies its activations by a 0-d float64
# tensor keeps them float32 under PyTorch's rule; NumPy's would make
# every activation after it float64. Measured on one layer's output,
# 256 rows of 512:

# %% tags=["hide-input"]
def activation_bytes():
    layer = nn.Linear(512, 512)
    h = layer(tp.ones(256, 512))
    scale = tp.tensor(0.5, dtype=tp.float64)
    return {"PyTorch's rule": (h * scale).data.nbytes, "NumPy's rule": (h.data * scale.data).nbytes}


def bytes_picture(sizes):
    fig, axis = plt.subplots(figsize=(8, 2.4))
    names = list(sizes)
    axis.barh(names, [sizes[n] / 2**10 for n in names], color=["C0", "C3"])
    for row, name in enumerate(names):
        axis.text(sizes[name] / 2**10, row, f"  {sizes[name] // 2**10:,} KiB", va="center")
    axis.set(xlabel="KiB of h * 0-d float64 scale (h: float32, 256 x 512)", xlim=(0, 1400))
    axis.invert_yaxis()
    fig.tight_layout()
    plt.show()


sizes = activation_bytes()
bytes_picture(sizes)

# %% [markdown]
# ## Check against PyTorch
#
# Every pair of operand kinds (seven dtypes, each as a vector, a 0-d
# tensor and a Python number of its category) under `+`, `*`, `/` and
# `==`, in both frameworks: the result's dtype and values. The tests run
# every operation of the package's table, and the lattice, in full.

# %% tags=["hide-input"]
import torch  # noqa: E402

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]
NUMBERS = {"b": True, "u": 3, "i": 3, "f": 2.5}
OPS = {"+": lambda a, b: a + b, "*": lambda a, b: a * b, "/": lambda a, b: a / b, "==": lambda a, b: a == b}


def operand(fw, dtype, kind):
    """A vector, a 0-d tensor, or a Python number of `dtype`'s category, in framework `fw`."""
    if kind == "number":
        return NUMBERS[np.dtype(dtype).kind]
    shape = (3,) if kind == "vector" else ()
    values = np.full(shape, 1, dtype=dtype) if dtype == "bool" else np.arange(1, 4)[:3 if shape else 1].reshape(shape)
    return fw.tensor(values.astype(dtype), dtype=getattr(fw, dtype))


def both(op, left, right):
    """The result in each framework: (dtype name, values), or the error's type."""
    results = []
    for fw in (tp, torch):
        try:
            y = OPS[op](operand(fw, *left), operand(fw, *right))
            results.append((str(y.dtype), np.asarray(y.detach() if fw is torch else y.data)))
        except (RuntimeError, TypeError) as error:
            results.append(type(error).__name__)
    return results


equal = 0
for op in OPS:
    for left in [(d, k) for d in DTYPES for k in ("vector", "scalar")]:
        for right in [(d, k) for d in DTYPES for k in ("vector", "scalar", "number")]:
            ours_, theirs_ = both(op, left, right)
            assert type(ours_) is type(theirs_), (op, left, right, ours_, theirs_)
            if isinstance(ours_, tuple):
                assert ours_[0] == theirs_[0], (op, left, right, ours_[0], theirs_[0])
                np.testing.assert_array_equal(ours_[1], theirs_[1].astype(ours_[1].dtype))
            equal += 1
assert sizes == {"PyTorch's rule": 256 * 512 * 4, "NumPy's rule": 256 * 512 * 8}
print(f"{equal} combinations of operation, dtype and rank: result dtypes and values equal torch's")
print("PyTorch check passed: type promotion, dtype by dtype and rank by rank, equals torch.result_type")

# %% [markdown]
# ## Recap
#
# - PyTorch's default dtype is float32 (`get_default_dtype`,
#   `set_default_dtype`): Python floats, new tensors and module
#   parameters; an array handed over keeps its dtype.
# - `promote_types`: the category first (bool < integer < floating <
#   complex), then the width within it. `int64` with `float16` is
#   `float16`, where NumPy gives `float64`.
# - `result_type`: dimensioned tensors over 0-d tensors over Python
#   numbers; a lower rank counts only with a higher category. A 0-d
#   float64 tensor leaves a float32 tensor float32.
# - Floating operations of integers give the default float; matrix
#   products refuse mixed dtypes; an in-place result may not go down a
#   category.
# - The package asks one module, `tinypytorch.dtypes`, from every
#   operation (`promotes`, `Function.__call__`), never NumPy's promotion.
#
# ## Exercises
#
# **1. The rule by hand.** Write `by_hand(a, b)` for two operands given
# as `(dtype, rank)` pairs, ranks `"dim"`, `"zero"` and `"number"`, from
# `promote_types` and the category order alone (no `result_type`), and
# compare it with `torch.result_type` on every pair of
# `bool, int32, int64, float16, float32, float64` and every rank.

# %% tags=["hide-cell"]
def category(dtype):
    """bool 0 < integers 1 < floating point 2 < complex 3, from what a dtype says of itself."""
    return 3 if dtype.is_complex else 2 if dtype.is_floating_point else 0 if dtype == tp.bool else 1


def by_hand(a, b):
    """The result dtype of two (dtype, rank) operands; a Python number of a category counts as its default."""
    order = {"dim": 0, "zero": 1, "number": 2}
    (high, high_rank), (low, low_rank) = sorted([a, b], key=lambda operand: order[operand[1]])
    high, low = getattr(tp, high), getattr(tp, low)
    if low_rank == "number":  # a Python number: bool, int64 or the default float of its category
        low = [tp.bool, tp.int64, tp.get_default_dtype()][category(low)]
    if high_rank == low_rank or category(low) > category(high):
        return tp.promote_types(high, low)
    return high


kinds = ["bool", "int32", "int64", "float16", "float32", "float64"]
agree = 0
for a in [(d, r) for d in kinds for r in ("dim", "zero")]:
    for b in [(d, r) for d in kinds for r in ("dim", "zero", "number")]:
        operands = [torch.ones((2,) if r == "dim" else (), dtype=getattr(torch, d)) if r != "number"
                    else {"b": True, "i": 2, "f": 2.5}[np.dtype(d).kind] for d, r in (a, b)]
        agree += str(by_hand(a, b)) == str(torch.result_type(*operands))
print(f"by_hand equals torch.result_type on {agree} of {len(kinds) * 2 * len(kinds) * 3} pairs")

# %% [markdown]
# **2. Three ways to write a half.** A float32 activation `h` is scaled by
# `0.5` written three ways: the Python number `0.5`, NumPy's scalar
# `np.float64(0.5)`, and the 0-d tensor `tp.tensor(0.5, dtype=tp.float64)`.
# Predict the dtype of `h * s` in each case, then check with torch.

# %% tags=["hide-cell"]
h = tp.ones(4)
scales = {"0.5": 0.5, "np.float64(0.5)": np.float64(0.5), "0-d float64 tensor": tp.tensor(0.5, dtype=tp.float64)}
for name, s in scales.items():
    print(f"h * {name:20} {(h * s).dtype}")  # float32 every time: a number, a number, a 0-d tensor

# %% [markdown]
# **3. In place when it fits.** Write `add_or_new(x, y)`: `x.add_(y)` when
# `can_cast(result_type(x, y), x.dtype)`, otherwise a new `x + y`; and
# check that its results have torch's dtypes for an int64, a float16 and a
# float32 `x`, each with `y` an int, a float and a 0-d float64 tensor.

# %% tags=["hide-cell"]
def add_or_new(x, y):
    if tp.can_cast(tp.result_type(x, y), x.dtype):
        return x.add_(y)
    return x + y


others = {"2": 2, "0.5": 0.5, "0-d float64": tp.tensor(0.25, dtype=tp.float64)}
for x_dtype in ("int64", "float16", "float32"):
    print(f"{x_dtype:8}", "  ".join(f"+ {name} -> {add_or_new(tp.ones(3, dtype=getattr(tp, x_dtype)), y).dtype}"
                                    for name, y in others.items()))
