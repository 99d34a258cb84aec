# %% [markdown]
# # Step 69: vmap: a batch dimension the function never sees
#
# A function written for one sample, say the cosine similarity of two
# vectors, goes wrong on a batch: `x @ y` of two matrices is a matrix
# product, not a row of dot products, and `x.norm()` takes the norm of the
# whole batch. The usual cure is to rewrite it with batch dims in mind
# (`(x * y).sum(-1)`, `norm(dim=-1)`), or to loop over the samples in
# Python. PyTorch's `torch.func.vmap` does neither: it runs the function
# **once**, on values that look like one sample and hold the whole batch.
# Each operation the function calls meets such a value and runs its
# **batching rule**: the same operation on the whole batch, its arguments
# shifted past a hidden batch dimension. This step builds
# `tinypytorch.func.vmap` (also `tinypytorch.vmap`) and checks it against
# `torch.func.vmap`. It is stage 6's first transform, and the one the next
# steps combine with `grad` and the Jacobians; it enters the package as one
# more entry of step 68's mode stack.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import batching_rules, batching_state
from tinypytorch.batched import BatchedVariable, levels_of
from tinypytorch.func import vmap
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag


# %% tags=["hide-input"]
def wrapped(text, indent="    "):
    """A long message on lines the page's width takes."""
    return textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)


# %% [markdown]
# ## One sample, a whole batch
#
# `cosine` is written for two vectors. `vmap(cosine)` takes two batches of
# vectors (their dim 0 is the batch) and gives one similarity per pair,
# the same numbers as a loop over the pairs. Called on the batches
# directly, `cosine` asks for a matrix product of two (4, 3) matrices.

# %%
def cosine(x, y):
    return (x @ y) / (x.norm() * y.norm())


rng = np.random.default_rng(0)
X, Y = tp.tensor(rng.normal(size=(4, 3))), tp.tensor(rng.normal(size=(4, 3)))
batched = vmap(cosine)(X, Y)
looped = tp.stack([cosine(X[i], Y[i]) for i in range(4)])
print("vmap(cosine):", batched)
print("a loop      :", looped)
try:
    cosine(X, Y)
except ValueError as error:
    print("cosine(X, Y) on the batches:", error)

# %% [markdown]
# Inside `vmap`, `cosine` gets a `BatchedVariable`: its **physical**
# value holds the whole batch, shape (4, 3) with the batch at dim 0; its
# **logical** shape, the one the function sees through `shape`, `ndim`,
# `len` and `size`, is one sample's, (3,). The number of the vmap that
# made it, its **level**, is kept beside it, for nesting.

# %%
def look(x, y):
    print(f"{type(x).__name__}: logical shape {tuple(x.shape)}, physical {tuple(x.physical.shape)}, "
          f"level {x.level}")
    return cosine(x, y)


_ = vmap(look)(X, Y)


# %% tags=["hide-input"]
def shapes_picture():
    """The physical value (a batch of 4 rows) and the logical sample the function sees."""
    fig, ax = plt.subplots(figsize=(8, 3))
    for i in range(4):
        for j in range(3):
            ax.add_patch(plt.Rectangle((j, 3 - i), 0.95, 0.9, facecolor=f"C{i}", alpha=0.45))
        ax.text(-0.3, 3.45 - i, f"sample {i}", ha="right", va="center", fontsize=9)
    ax.text(1.5, 4.3, "physical: (4, 3)", ha="center", fontsize=10)
    ax.text(1.5, -0.5, "dim 0 is the batch of level 1", ha="center", fontsize=9, color="0.3")
    for j in range(3):
        ax.add_patch(plt.Rectangle((6 + j, 1.8), 0.95, 0.9, facecolor="white", edgecolor="0.3", hatch="//"))
    ax.text(7.5, 3.3, "logical: (3,)", ha="center", fontsize=10)
    ax.text(7.5, 1.2, "what the function sees:\none sample, any of the four", ha="center", va="top", fontsize=9,
            color="0.3")
    ax.annotate("", (5.8, 2.25), (3.2, 2.25), arrowprops=dict(arrowstyle="-|>", color="0.35", lw=1.2))
    ax.text(4.5, 2.5, "BatchedVariable", ha="center", fontsize=9)
    ax.set(xlim=(-2, 9.5), ylim=(-1, 4.8))
    ax.axis("off")
    fig.tight_layout()
    plt.show()


shapes_picture()

# %% [markdown]
# ## The batched Variable
#
# `BatchedVariable` (tinypytorch/batched.py) is a `Variable` with no
# array of its own: it keeps the physical value and the level, and
# answers every question about shape with the physical shape minus dim 0.
# What would read one sample's values raises PyTorch's error, since there
# is no one sample to read: `item()` (and `float`, `int`), and `bool()`,
# which Python calls for an `if` on a tensor.

# %%
show_code(BatchedVariable.__init__, BatchedVariable.shape.fget)
show_code(BatchedVariable.item, BatchedVariable.__bool__)

# %% [markdown]
# ## The door: vmap's entry of the mode stack
#
# Every operation of the package goes through `Function.__call__`, which
# asks the mode stack of step 68 once. While a vmap is open, vmap is an
# entry of that stack: an operation with a batched input goes to
# `run_rule` instead of its own forward; any other goes on down the stack:

# %%
show_code(batching_state.batching_mode, batching_rules.run_rule)

# %% [markdown]
# `Batch` unwraps the inputs at the highest level present: each batched
# one becomes its physical value, batch first; the others stay as they
# are. The rule calls **the same kind of Function** on those values,
# with its arguments adjusted, so the operation's own forward (and
# backward, if a gradient is wanted) runs on the whole batch at once;
# `run_rule` wraps the result at that level again.

# %% tags=["hide-input"]
def path_picture():
    """The path of a + b (a batched, b not) through the door and its rule."""
    nodes = {
        "call": ("leaf", "a + b\nlogical (3,), (2, 1)"),
        "door": ("function", "vmap's entry:\na batched input"),
        "batch": ("function", "Batch: physical\n(4, 3) and (2, 1)"),
        "rule": ("highlight", "elementwise rule:\npad to (4, 1, 3)"),
        "add": ("function", "Add on arrays:\n(4, 1, 3) + (2, 1)"),
        "out": ("output", "BatchedVariable\nphysical (4, 2, 3)\nlogical (2, 3)"),
    }
    positions = {"call": (0, 1), "door": (1.25, 1), "batch": (2.5, 1), "rule": (2.5, 0), "add": (1.25, 0),
                 "out": (0, 0)}
    edges = [("call", "door"), ("door", "batch"), ("batch", "rule"), ("rule", "add"), ("add", "out")]
    _, ax = plt.subplots(figsize=(8, 2.6))
    draw_dag(nodes, edges, ax=ax, positions=positions)
    plt.show()


path_picture()

# %% [markdown]
# ## Three rules
#
# **Element-wise operations** broadcast, and broadcasting lines dims up
# from the right. A batched operand whose sample has fewer dims than the
# other operand's would have its batch dim lined up with a sample dim:
# physical (4, 3) against an unbatched (2, 1) compares 4 with 2 and fails.
# The rule pads each batched operand with 1s after its batch dim, up to the
# largest logical rank: (4, 1, 3) against (2, 1) gives (4, 2, 3), the batch
# of four (2, 3) results.

# %%
show_code(batching_rules.Batch.padded, batching_rules.pad, batching_rules.elementwise)

# %%
a, b = tp.tensor(rng.normal(size=(4, 3))), tp.tensor(rng.normal(size=(2, 1)))
try:
    a.data + b.data
except ValueError as error:
    print("physical values, not padded:", str(error).strip())


def add(x, y):
    z = x + y
    print(f"logical {tuple(x.shape)} + {tuple(y.shape)} -> {tuple(z.shape)}; "
          f"physical {tuple(z.physical.shape)}")
    return z


_ = vmap(add, in_dims=(0, None))(a, b)

# %% [markdown]
# **Reductions** name their dims in the sample's terms: `x.sum(0)` means
# the sample's first dim, which is the physical value's dim 1, and
# `x.sum(-1)` its last, the same dim counted from the right. The rule
# makes every dim non-negative against the logical rank, then one further;
# `None` (all of the sample) becomes every dim but the batch's.

# %%
show_code(batching_rules.shifted_axes, batching_rules.reduction)
for dim in (0, -1, (0, 1), None):
    print(f"a sample of 2 dims, sum over {dim}: physical axes {batching_rules.shifted_axes(dim, 2)}")

# %% [markdown]
# **Matrix products** pad too, but a vector operand has no dim to spare:
# `v @ W` of a vector (n,) contracts v's only dim. The rule makes a batched
# vector a matrix first, a row (B, 1, n) on the left or a column (B, n, 1)
# on the right, multiplies (matmul broadcasts the batch dim as any
# leading dim), and drops the dim it added.

# %%
show_code(batching_rules.matmul)
W = tp.tensor(rng.normal(size=(3, 5)))
print("vmap(v @ W), v batched (4, 3):", tuple(vmap(lambda v: v @ W)(X).shape),
      "| W @ v, W (5, 3) shared:", tuple(vmap(lambda v: W.t() @ v)(X).shape),
      "| u @ v, both batched:", tuple(vmap(lambda u, v: u @ v)(X, Y).shape))

# %% [markdown]
# Reshapes put the batch size before the new shape, permutations keep dim
# 0 first, indexing prepends a whole slice for the batch, `cat` and `stack`
# repeat an unbatched operand along a new batch dim (a broadcast view, no
# copy) and shift their dim. An operation with no rule raises a
# `NotImplementedError` that names it, never a wrong result.
#
# ## in_dims and out_dims
#
# `in_dims` says where each argument's batch is: an int per argument
# (the default, 0, for all), `None` for an argument every sample shares,
# or a nested structure that matches the arguments. vmap moves each batch
# dim to the front before wrapping. `out_dims` says where each output's
# batch dim goes. Below, the samples are the **columns** of a (3, 4)
# matrix, `w` is shared, and the results are returned as columns again:

# %%
def standardize(x, w):
    return w * (x - x.mean()) / x.std()


columns, w = X.t(), tp.tensor([1.0, 2.0, 3.0], dtype=tp.float64)
out = vmap(standardize, in_dims=(1, None), out_dims=1)(columns, w)
print("in_dims=(1, None), out_dims=1:", tuple(columns.shape), "->", tuple(out.shape))
print("column 0 equals standardize(column 0):",
      np.allclose(out.data[:, 0], standardize(columns[:, 0], w).data, rtol=1e-14, atol=0))

# %% [markdown]
# ## Nested vmap
#
# `vmap(vmap(f))` batches twice: the outer vmap opens level 1, the inner
# one level 2. A value batched at both is a `BatchedVariable` of level 2
# around one of level 1 around the array, whose dims are level 1's batch,
# then level 2's, then the sample's. A rule works at the highest level
# present and takes the level-1 wrapper inside as its "physical" value:
# that wrapper is a Variable, so the same rule runs on it and meets level
# 1's rule underneath. Pairwise distances between two sets of points: the
# outer vmap walks the rows of `P`, the inner one the rows of `Q`. In the
# picture below, each coloured block of the array is one row of `P`, each
# row of a block one row of `Q`.

# %%
def distance(p, q):
    d = p - q
    return (d * d).sum().sqrt()


def look_inside(p, q):
    d = p - q
    print(f"p - q: levels {levels_of(d)}, logical {tuple(d.shape)}, "
          f"array {tuple(d.physical.physical.shape)}")
    return distance(p, q)


P, Q = tp.tensor(rng.normal(size=(4, 3))), tp.tensor(rng.normal(size=(5, 3)))
pairwise = vmap(vmap(look_inside, in_dims=(None, 0)), in_dims=(0, None))(P, Q)
print("pairwise distances:", tuple(pairwise.shape), "| [1, 2] equals |P[1] - Q[2]|:",
      np.isclose(pairwise.data[1, 2], np.linalg.norm(P.data[1] - Q.data[2]), rtol=1e-14, atol=0))


# %% tags=["hide-input"]
def levels_picture():
    """p - q inside two vmaps: two wrappers around one array, drawn as 4 blocks (level 1) of 5 rows (level 2)."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    boxes = [((0, 0), 7.6, 4.1, "C1", "BatchedVariable, level 2 (inner vmap, rows of Q): the function sees (3,)"),
             ((0.2, 0.15), 7.2, 3.4, "C0", "BatchedVariable, level 1 (outer vmap, rows of P): logical (5, 3)"),
             ((0.4, 0.3), 6.8, 2.7, "0.5", "the array: (4, 5, 3) = (level 1's batch, level 2's, the sample)")]
    for (x, y), width, height, colour, label in boxes:
        ax.add_patch(plt.Rectangle((x, y), width, height, facecolor=colour, alpha=0.1, edgecolor=colour))
        ax.text(x + 0.15, y + height - 0.12, label, va="top", fontsize=9)
    for i in range(4):  # level 1's batch: one block per row of P
        for j in range(5):  # level 2's: one row per row of Q
            for k in range(3):  # the sample
                ax.add_patch(plt.Rectangle((0.9 + 1.6 * i + 0.36 * k, 0.75 + 0.36 * j), 0.33, 0.3,
                                           facecolor=f"C{i}", alpha=0.3 + 0.1 * j))
        ax.text(1.4 + 1.6 * i, 0.68, f"P[{i}]", ha="center", va="top", fontsize=8)
    ax.set(xlim=(-0.1, 7.7), ylim=(-0.1, 4.2))
    ax.axis("off")
    fig.tight_layout()
    plt.show()


levels_picture()

# %% [markdown]
# ## Randomness
#
# What should `dropout` do inside vmap: one mask per sample, or one mask
# for all? PyTorch makes the caller say. `randomness="error"`, the default,
# refuses random operations; `"different"` draws for every sample;
# `"same"` draws once and shares it. Four rows of ones through dropout:

# %%
ones = tp.ones(4, 6, dtype=tp.float64)
try:
    vmap(lambda r: tp.nn.functional.dropout(r, 0.5))(ones)
except RuntimeError as error:
    print("randomness='error':\n" + wrapped(str(error)))
tp.manual_seed(0)
for randomness in ("different", "same"):
    masks = vmap(lambda r: tp.nn.functional.dropout(r, 0.5), randomness=randomness)(ones)
    rows = ["".join("1" if v else "0" for v in row) for row in masks.data]
    print(f"randomness={randomness!r}: rows kept {' '.join(rows)}")

# %% [markdown]
# In tinypytorch `dropout` has a rule that draws per sample; a factory such
# as `rand` inside `vmap(randomness="different")` raises a clear
# `NotImplementedError` rather than give every sample the same numbers.
#
# ## What cannot be batched
#
# A function that looks at one sample's values cannot run once for the
# whole batch: there is no one value to look at. PyTorch raises, and so
# does tinypytorch, with PyTorch's words. An in-place write of a batched
# value into a tensor that is not batched fails too: the tensor has room
# for one sample's result, not for four.

# %%
import torch  # noqa: E402
import torch.func  # noqa: E402

UNBATCHABLE = {
    ".item()": lambda vm, fw, x, s: vm(lambda r: r.sum().item())(x),
    "an if on a value": lambda vm, fw, x, s: vm(lambda r: r if r.sum() > 0 else -r)(x),
    "add_ into a shared tensor": lambda vm, fw, x, s: vm(lambda r, t: t.add_(r), in_dims=(0, None))(x, s),
    "x[0] = batched value": lambda vm, fw, x, s: vm(lambda r, t: t.__setitem__(0, r.sum()),
                                                    in_dims=(0, None))(x, s),
}


def error_of(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 (its type and words are shown)
        return type(error).__name__, str(error)
    return None, "no error"


for case, call in UNBATCHABLE.items():
    ours = error_of(lambda: call(vmap, tp, X, tp.ones(3, dtype=tp.float64)))
    theirs = error_of(lambda: call(torch.func.vmap, torch, torch.tensor(X.data), torch.ones(3).double()))
    print(f"{case}: {ours[0]}, the same type and words as torch's: {ours == theirs}\n{wrapped(ours[1])}")

# %% [markdown]
# ## Check against PyTorch
#
# A set of functions in both frameworks, run through `vmap` and
# `torch.func.vmap` on the same float64 (and float32, and int64) arrays:
# element-wise operations with rank padding, reductions over every kind of
# dim, softmax, the matrix products, shapes and indexing, joins, losses,
# `in_dims` and `out_dims` of every form, nested vmaps. Values, dtypes and
# shapes must be equal; then the errors of the cases above, and of
# misused arguments, must have torch's types and words.

# %% tags=["hide-cell"]
R = np.random.default_rng(68)
A, B, M = R.normal(size=(4, 3)), R.normal(size=(4, 3)), R.normal(size=(3, 5))
C, I = R.normal(size=(4, 2, 3)), np.array([0, 2, 1, 2])

FUNCTIONS = {  # name: (call(vmap, framework, tensor) -> output)
    "cosine": lambda vm, fw, T: vm(cosine)(T(A), T(B)),
    "add, a shared (2, 1)": lambda vm, fw, T: vm(lambda x, y: x + y, in_dims=(0, None))(T(A), T(M[:2, :1])),
    "exp, tanh, sigmoid": lambda vm, fw, T: vm(lambda x: fw.exp(x).tanh() * fw.sigmoid(x))(T(C)),
    "pow, abs, sqrt": lambda vm, fw, T: vm(lambda x: (x.abs() ** 1.5).sqrt() - 1 / (x * x + 1))(T(A)),
    "where": lambda vm, fw, T: vm(lambda x, y: fw.where(x > y, x, y * 2))(T(A), T(B)),
    "sum(0)": lambda vm, fw, T: vm(lambda x: x.sum(0))(T(C)),
    "sum(-1, keepdim)": lambda vm, fw, T: vm(lambda x: x.sum(-1, keepdim=True))(T(C)),
    "mean over (0, 1)": lambda vm, fw, T: vm(lambda x: x.mean((0, 1)))(T(C)),
    "max, std, var": lambda vm, fw, T: vm(lambda x: x.max() + x.std() * x.var(0).sum())(T(C)),
    "logsumexp, prod": lambda vm, fw, T: vm(lambda x: fw.logsumexp(x, 1) * x.prod(0).sum())(T(C)),
    "softmax(-1)": lambda vm, fw, T: vm(lambda x: fw.softmax(x, -1))(T(C)),
    "log_softmax(0)": lambda vm, fw, T: vm(lambda x: fw.log_softmax(x, 0))(T(C)),
    "v @ W": lambda vm, fw, T: vm(lambda v, m: v @ m, in_dims=(0, None))(T(A), T(M)),
    "W @ v": lambda vm, fw, T: vm(lambda v, m: m.t() @ v, in_dims=(0, None))(T(A), T(M)),
    "u @ v": lambda vm, fw, T: vm(lambda u, v: u @ v)(T(A), T(B)),
    "X @ W, X a matrix": lambda vm, fw, T: vm(lambda x, m: x @ m, in_dims=(0, None))(T(C), T(M)),
    "v @ W, W batched": lambda vm, fw, T: vm(lambda v, m: v @ m, in_dims=(None, 0))(T(A[0]), T(C.transpose(0, 2, 1))),
    "linear": lambda vm, fw, T: vm(lambda x, m, c: fw.nn.functional.linear(x, m, c), in_dims=(0, None, None))(
        T(C), T(M.T), T(M[0])),
    "reshape, transpose": lambda vm, fw, T: vm(lambda x: x.reshape(3, 2).t() * x.flatten()[:2, None])(T(C)),
    "unsqueeze, expand": lambda vm, fw, T: vm(lambda x: x.unsqueeze(1).expand(3, 2) * x[:2])(T(A)),
    "indexing": lambda vm, fw, T: vm(lambda x: x[1:, ::2] * x[0, -1])(T(C)),
    "cat and stack, one shared": lambda vm, fw, T: vm(lambda x, y: fw.cat([x, y]) * fw.stack([x, y], 1).sum(),
                                                      in_dims=(0, None))(T(A), T(B[0])),
    "mse_loss": lambda vm, fw, T: vm(lambda x, y: fw.nn.functional.mse_loss(x, y))(T(A), T(B)),
    "cross_entropy, batched targets": lambda vm, fw, T: vm(
        lambda x, t: fw.nn.functional.cross_entropy(x.unsqueeze(0), t.unsqueeze(0)))(T(A), T(I)),
    "in_dims 1, out_dims 1": lambda vm, fw, T: vm(standardize, in_dims=(1, None), out_dims=1)(T(A.T), T(B[0])),
    "in_dims -1, out_dims -1": lambda vm, fw, T: vm(lambda x: x[:, None] * x, in_dims=-1, out_dims=-1)(T(C)),
    "a dict in_dims": lambda vm, fw, T: vm(lambda d: d["x"] * d["y"], in_dims=({"x": 0, "y": None},))(
        {"x": T(A), "y": T(B[0])}),
    "an unbatched output repeated": lambda vm, fw, T: vm(lambda x, y: y * 2, in_dims=(0, None))(T(A), T(B[0])),
    "nested: pairwise distances": lambda vm, fw, T: vm(vm(distance, in_dims=(None, 0)), in_dims=(0, None))(
        T(A), T(C[:, 0])),
    "nested: in_dims 1 inside": lambda vm, fw, T: vm(vm(lambda x: x.exp().sum(), in_dims=1))(T(C)),
    "float32": lambda vm, fw, T: vm(lambda x, y: (x * y).sum(), in_dims=(0, None))(
        T(A.astype(np.float32)), T(B[0].astype(np.float32))),
    "int64": lambda vm, fw, T: vm(lambda x: x * 3 + x.sum())(T(np.arange(12).reshape(4, 3))),
    "int64 times 2.5: float32": lambda vm, fw, T: vm(lambda x: x * 2.5)(T(np.arange(12).reshape(4, 3))),
}

ERRORS = {
    **{case: (lambda call: lambda vm, fw, T: call(vm, fw, T(A), T(np.ones(3))))(call)
       for case, call in UNBATCHABLE.items()},
    "randomness='error'": lambda vm, fw, T: vm(lambda x: fw.nn.functional.dropout(x, 0.5))(T(A)),
    "batch sizes differ": lambda vm, fw, T: vm(lambda x, y: x + y)(T(A), T(M)),
    "in_dims out of range": lambda vm, fw, T: vm(lambda x: x, in_dims=(2,))(T(A)),
    "in_dims of the wrong structure": lambda vm, fw, T: vm(lambda x, y: x, in_dims=(0,))(T(A), T(B)),
    "out_dims None, a batched output": lambda vm, fw, T: vm(lambda x: x, out_dims=None)(T(A)),
    "a number returned": lambda vm, fw, T: vm(lambda x: 2.0)(T(A)),
}


def ours_and_torch(call):
    return (call(vmap, tp, lambda a: tp.tensor(a) if isinstance(a, np.ndarray) else a),
            call(torch.func.vmap, torch, lambda a: torch.tensor(a)))


def same(ours, theirs):
    """Equal shape, dtype and values (float32: to its precision)."""
    tolerance = 1e-5 if theirs.dtype == torch.float32 else 1e-12
    return (tuple(ours.shape) == tuple(theirs.shape) and str(ours.dtype) == str(theirs.dtype)
            and np.allclose(np.asarray(ours.data), theirs.numpy(), rtol=tolerance, atol=tolerance))


# %%
agree = {name: same(*ours_and_torch(call)) for name, call in FUNCTIONS.items()}
errors = {name: (error_of(lambda: call(vmap, tp, tp.tensor)), error_of(lambda: call(torch.func.vmap, torch,
                                                                                     torch.tensor)))
          for name, call in ERRORS.items()}
assert all(agree.values()), [name for name, ok in agree.items() if not ok]
assert all(ours == theirs and ours[0] for ours, theirs in errors.values()), errors
print(f"{len(agree)} functions: values, dtypes and shapes equal torch.func.vmap's")
print(f"{len(errors)} misuses: the same error types and messages as torch's")
print("PyTorch check passed: vmap batches as torch.func.vmap and refuses what it refuses")

# %% [markdown]
# ## Recap
#
# - `vmap(f)` runs `f` once on `BatchedVariable`s: a physical value with
#   the batch at dim 0, a level, and one sample's shape as its logical
#   shape. `f` is written for one sample and never sees the batch.
# - vmap's entry of the mode stack hands an operation with a batched input
#   to its batching rule, which runs the same operation on the physical values:
#   element-wise operations pad the batched operands to one logical rank,
#   reductions shift their dims by one, matmul makes a batched vector a
#   matrix first.
# - `in_dims` places the batch of each argument (`None`: shared),
#   `out_dims` places it in each output; nested vmaps nest wrappers, one
#   level each; `randomness` says whether random operations draw per
#   sample, once, or not at all.
# - What would look at one sample's values (`.item()`, an `if` on a
#   tensor) or write a batch into an unbatched tensor in place raises
#   PyTorch's errors.
#
# ## Exercises
#
# **1. Pairwise distances.** Write `pairwise(P, Q)`, the matrix of
# distances $\lVert p_i - q_j \rVert$, as two vmaps of a function of two
# points, and compare it with `torch.cdist`.

# %% tags=["hide-cell"]
def pairwise(P, Q):
    def one(p, q):
        return ((p - q) ** 2).sum().sqrt()
    return vmap(vmap(one, in_dims=(None, 0)), in_dims=(0, None))(P, Q)


print(np.allclose(pairwise(P, Q).data, torch.cdist(torch.tensor(P.data), torch.tensor(Q.data)).numpy(),
                  rtol=1e-12, atol=0))

# %% [markdown]
# **2. A rule by hand.** `x.permute(perm)` on one sample of `ndim` dims:
# write `physical_perm(perm)`, the permutation of the physical value
# (batch at dim 0) that permutes every sample by `perm`, and check it on a
# NumPy batch against `torch.func.vmap(lambda x: x.permute(perm))`.

# %% tags=["hide-cell"]
def physical_perm(perm):
    return (0,) + tuple(p + 1 for p in perm)


batch = R.normal(size=(4, 2, 3, 5))
print(np.array_equal(np.transpose(batch, physical_perm((2, 0, 1))),
                     torch.func.vmap(lambda x: x.permute(2, 0, 1))(torch.tensor(batch)).numpy()))

# %% [markdown]
# **3. Samples in columns.** A design matrix holds one sample per
# **column**. Write `column_softmax(S)`: the softmax of each column,
# computed by vmapping a softmax written for one vector, with `in_dims`
# and `out_dims` chosen so that the result is laid out as `S`. Compare it
# with `torch.softmax(S, dim=0)`.

# %% tags=["hide-cell"]
def column_softmax(S):
    def one(v):
        e = (v - v.max()).exp()
        return e / e.sum()
    return vmap(one, in_dims=1, out_dims=1)(S)


S = tp.tensor(R.normal(size=(3, 6)))
print(np.allclose(column_softmax(S).data, torch.softmax(torch.tensor(S.data), dim=0).numpy(), rtol=1e-12, atol=0))
