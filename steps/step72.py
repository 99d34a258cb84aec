# %% [markdown]
# # Step 72: Reverse mode from forward mode: linearize, then transpose
#
# Every operation of the package carries two derivative formulas: a
# `backward` for reverse mode ([step 6](step06.ipynb) on) and a `jvp`
# for forward mode ([step 64](step64.ipynb)). They say the same thing
# twice. At a point $x$, the derivative of $f$ is a linear map: forward
# mode computes $t \mapsto J t$, reverse mode $u \mapsto J^\top u$, its
# **transpose**. JAX derives the second from the first, and this step
# does the same with the package's jvp rules.
# `tinypytorch.func.linearize` (PyTorch's `torch.func.linearize`) keeps
# each operation's jvp with the primal values it read, so its `jvp_fn`
# is a function of the tangents alone. Written down as a program, it is
# made of **linear primitives**: multiply by a constant, add,
# sum, broadcast, reshape, matmul by a constant, and a few more. Each
# has a simple transpose. Run the program backwards with those
# transposes, and out comes the vjp, with no `backward` formula
# involved. The code is `tinypytorch/linear_transpose.py`. PyTorch has
# no public function for it; `torch.func.vjp` is the reference.

# %%
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import linear_transpose as lt
from tinypytorch.core import Function
from tinypytorch.func import linearize
from tinypytorch.linear_transpose import LinearTracer, linear_transpose, vjp_by_transpose
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

tp.set_default_dtype(tp.float64)  # float64, so the checks hold to 1e-12


# %% tags=["hide-input"]
warnings.filterwarnings("ignore", message="Attempted to insert a get_attr Node")  # torch.func.linearize's tracing


def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


def wrapped(text, indent="    "):
    """A long message on lines the page's width takes."""
    return textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)


# %% [markdown]
# ## A linear function, written down
#
# Take $f(x, y) = \sin(x)\,y + x / y$ on vectors. `linearize` runs $f$
# once, in forward mode, and returns `jvp_fn`: the tangents $(t_x, t_y)$
# in, $J\,(t_x, t_y)$ out.
#
# To see what `jvp_fn` does, run it on a `LinearTracer` in place of each
# tangent array. A tracer holds a shape and a dtype, no values; every
# operation on it writes down one line of a `LinearProgram` and returns a
# new tracer. `trace` does that with `jvp_fn.on_arrays` (`jvp_fn` on bare
# arrays) and `jvp_fn.in_types` (each tangent's shape and dtype), two
# attributes `linearize` gives its `jvp_fn` for this step.

# %%
def f(x, y):
    return tp.sin(x) * y + x / y


rng = np.random.default_rng(72)
x, y = tp.tensor(rng.normal(size=3)), tp.tensor(rng.uniform(1, 2, size=3))
out, jvp_fn = linearize(f, x, y)
program = lt.trace(jvp_fn.on_arrays, jvp_fn.in_types)
print(program)

# %% [markdown]
# `t0` and `t1` are the tangents of `x` and `y`. Every line is linear in
# them, and everything else is a constant `c`: the primal values that the
# jvp rules read. Sin's rule, `cos(x) * t`, is line `t2`; Mul's,
# `t * y + sin(x) * s`, gives `t3`, `t4` and `t5`; Div's gives `t6` to
# `t9`; Add's rule adds.

# %%
constants = [args[1] for _, args, _, _ in program.equations
             if len(args) == 2 and not isinstance(args[1], LinearTracer)]
print("c0 is cos(x):", np.array_equal(constants[0], np.cos(x.data)),
      "| c1 is y:", np.array_equal(constants[1], y.data),
      "| c2 is sin(x):", np.array_equal(constants[2], np.sin(x.data)))

# %% [markdown]
# How a jvp rule ends up as lines: the rules are NumPy code, so the
# tracer answers NumPy's two hooks. `__array_ufunc__` catches `*`, `+`,
# `-`, `/`, `@` and NumPy's element-wise functions;
# `__array_function__` catches `np.where`, `np.sum`, `np.broadcast_to`,
# `np.concatenate` and a few more. Each sends the call to a primitive,
# or raises if the call is not linear in the tracer.

# %%
show_code(LinearTracer.__array_ufunc__, lt._mul_either, lt.bind)

# %% [markdown]
# ## Transposing, line by line
#
# A linear program is a chain of linear maps, and the transpose of a
# chain is the chain of transposes in reverse order:
# $(A_3 A_2 A_1)^\top = A_1^\top A_2^\top A_3^\top$. So the program is run
# backwards, from the cotangent $u$ of its output, and each line's
# transpose rule turns its output's cotangent into its inputs'. Four of
# the rules:

# %%
show_code(lt.transpose_mul, lt.transpose_add, lt.transpose_sum, lt.transpose_matmul)

# %% [markdown]
# Multiplying by a constant (element-wise) is a diagonal matrix, its own
# transpose. `add` takes two values to one, so its transpose copies the
# cotangent to both operands: a **fan-out**. Where one value feeds two
# lines (`t0` feeds `t2` and `t6`), the two cotangents that come back to
# it are **added**, as gradients of a variable used twice are added in
# reverse mode ([step 14](step14.ipynb)). Sum and broadcast transpose to
# each other, and so do indexing and a scatter-add; a matrix product by
# $C$ transposes to a product by $C^\top$ on the other side. The
# `backward_pass` is the loop:

# %%
show_code(lt.backward_pass)

# %% [markdown]
# The transposed function, traced in turn, is itself a linear program:
# its input is the output's cotangent `u`, its outputs are the
# cotangents of `x` and `y`.

# %%
vjp_fn = linear_transpose(jvp_fn, x, y)
transposed = lt.trace(vjp_fn.on_arrays, vjp_fn.in_types)
print(transposed)


# %% tags=["hide-input"]
def program_nodes(program):
    """draw_dag's nodes and edges for a program: the inputs, one box per line (its primitive and constant), and
    the output; positions in columns by the longest path from the inputs."""
    short = {"mul": "× {}", "div": "/ {}", "add": "+", "neg": "−", "sum": "sum", "matmul": "@ {}"}
    names = {}
    nodes, edges, column = {}, [], {}
    for v, name in zip(program.inputs, "xy"):
        nodes[v.n], column[v.n] = ("leaf", f"t{v.n}: t{name}"), 0
    for primitive, args, _, out in program.equations:
        constant = next((a for a in args if not isinstance(a, LinearTracer)), None)
        label = short.get(primitive, primitive).format(
            "" if constant is None else names.setdefault(id(constant), f"c{len(names)}"))
        nodes[out.n] = ("function", f"t{out.n}: {label}")
        column[out.n] = 1 + max(column[a.n] for a in args if isinstance(a, LinearTracer))
        edges += [(a.n, out.n) for a in args if isinstance(a, LinearTracer)]
    (y,) = program.outputs
    nodes["out"], column["out"] = ("output", "J t"), column[y.n] + 1
    edges.append((y.n, "out"))
    rows = {}
    for node in nodes:
        rows.setdefault(column[node], []).append(node)
    positions = {node: (1.25 * column[node], (len(members) - 1) / 2 - members.index(node))
                 for members in rows.values() for node in members}
    return nodes, edges, positions


def programs_picture(program):
    """The program of jvp_fn (top) and its transpose (bottom): the same boxes, each line's transpose rule in
    it, the arrows reversed."""
    nodes, edges, positions = program_nodes(program)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.4))
    draw_dag(nodes, edges, ax=top, positions=positions, title="jvp_fn: tangents in, J t out")
    rules = {"+": "fan-out"}
    back = {}
    for node, (kind, label) in nodes.items():
        name, _, rule = label.partition(": ")
        uses = sum(a == node for a, _ in edges)
        back[node] = ({"leaf": "output", "output": "leaf"}.get(kind, kind),
                      "u" if node == "out" else f"{rule[1]}̄: {uses} added" if kind == "leaf" else
                      f"{name}: {rules.get(rule, rule)}")
    mirrored = {node: (-x, y) for node, (x, y) in positions.items()}
    draw_dag(back, [(b, a) for a, b in edges], ax=bottom, positions=mirrored,
             title="its transpose: u in, the cotangents of x and y out (arrows reversed)")
    fig.tight_layout()
    plt.show()


programs_picture(program)

# %% [markdown]
# ## The vjp that falls out
#
# `linear_transpose(jvp_fn, x, y)` is that transposed function, shaped as
# `torch.func.vjp`'s `vjp_fn`: it takes a cotangent shaped as the output
# and returns one per primal. `vjp_by_transpose(f, x, y)` is the pair
# `(f(x, y), vjp_fn)`, linearize and transpose in one call. Both are
# checked here against `torch.func.vjp`, and `jvp_fn` against
# `torch.func.linearize`, in float64:

# %%
import torch  # noqa: E402
import torch.func  # noqa: E402

u, t = tp.tensor(rng.normal(size=3)), (tp.tensor(rng.normal(size=3)), tp.tensor(rng.normal(size=3)))
gx, gy = vjp_fn(u)
tx, ty = torch.tensor(x.data), torch.tensor(y.data)
_, torch_vjp = torch.func.vjp(lambda a, b: a.sin() * b + a / b, tx, ty)
_, torch_jvp = torch.func.linearize(lambda a, b: a.sin() * b + a / b, tx, ty)
tgx, tgy = torch_vjp(torch.tensor(u.data))
print("vjp_fn(u) vs torch.func.vjp:", below(max(np.abs(gx.data - tgx.numpy()).max(),
                                                np.abs(gy.data - tgy.numpy()).max()), 1e-12))
print("jvp_fn(t) vs torch.func.linearize:",
      below(np.abs(jvp_fn(*t).data - torch_jvp(*[torch.tensor(a.data) for a in t]).numpy()).max(), 1e-12))

# %% [markdown]
# A tanh layer, $(W, b, x) \mapsto \tanh(W x + b)$, brings matrix products
# with a tangent on either side: `t0 @ c0` is the tangent of $W$ times
# $x$ (made a column), `c1 @ t3` is $W$ times the tangent of $x$. Their
# transposes put $u$ on the other side: $u\,x^\top$ for $W$, and
# $W^\top u$ for $x$.

# %%
W, b, v = tp.tensor(rng.normal(size=(4, 3))), tp.tensor(rng.normal(size=4)), tp.tensor(rng.normal(size=3))
layer_out, layer_vjp = vjp_by_transpose(lambda W, b, v: tp.tanh(W @ v + b), W, b, v)
print(layer_vjp.program)
u4 = tp.tensor(rng.normal(size=4))
_, torch_layer_vjp = torch.func.vjp(lambda W, b, v: torch.tanh(W @ v + b),
                                    *[torch.tensor(a.data) for a in (W, b, v)])
ours, theirs = layer_vjp(u4), torch_layer_vjp(torch.tensor(u4.data))
gap = max(np.abs(a.data - b.numpy()).max() for a, b in zip(ours, theirs))
print("the layer's vjp vs torch.func.vjp:", below(gap, 1e-12))

# %% [markdown]
# ## Each line once
#
# Reverse mode's backward pass visits each operation of the forward pass
# once. So does the transposed program: `backward_pass` lists the lines
# whose rule it ran.

# %%
for name, vjp in (("f", vjp_fn), ("the tanh layer", layer_vjp)):
    prog, visited = vjp.program, []
    lt.backward_pass(prog, [np.ones(y.shape) for y in prog.outputs], visited)
    back = lt.trace(vjp.on_arrays, vjp.in_types)
    adds = [sum(e[0] == "add" for e in p.equations) for p in (prog, back)]
    once = len({id(e) for e in visited}) == len(visited) == len(prog.equations)
    print(f"{name}: {len(prog.equations)} lines, {len(visited)} rules run, each line once: {once}")
    print(f"    transposed: {len(back.equations)} lines | adds: {adds[0]} forward, {adds[1]} transposed")

# %% [markdown]
# The transposed program does about the forward program's work: each
# rule one primitive's. The adds move: an `add` of the forward program
# becomes a fan-out, which costs nothing, and a value that fed two lines
# becomes an `add` (for $f$, three adds forward, two transposed: `t0`
# and `t1` each feed two lines). As in reverse mode, what the transpose
# cannot do without is the forward pass's values: here the constants that
# `linearize` kept.
#
# ## What cannot be transposed
#
# Only a linear map has a transpose. A jvp rule that is not linear in its
# tangent, say an operation whose rule squares it, runs in forward mode
# but is refused when traced, with what is not linear named, never
# turned into a silent result; so is a NumPy function that has no
# primitive here (`np.cumsum`). A custom `autograd.Function`'s `jvp`
# works on tensors, not arrays, and cannot be traced either: it raises a
# `NotImplementedError` that says so.

# %%
class WrongSquare(Function):
    """x^2, with a jvp rule that is not linear in its tangent."""

    def forward(self, x):
        return x * x

    def jvp(self, t):
        return 2 * self.primals[0] * t * t


def traced(f):
    """The program of f, a function of one tangent of shape (3,)."""
    return lt.trace(lambda ts: [f(ts[0])], [((3,), np.float64)])


for what, call in (("a jvp rule t * t", lambda: vjp_by_transpose(lambda a: WrongSquare()(a), x)),
                   ("np.exp of a tangent", lambda: traced(np.exp)),
                   ("np.cumsum of a tangent", lambda: traced(np.cumsum))):
    try:
        call()
    except (RuntimeError, NotImplementedError) as error:
        print(f"{what}: {type(error).__name__}\n{wrapped(str(error))}")

# %% [markdown]
# ## Check against PyTorch
#
# A set of functions in both frameworks (element-wise operations with
# broadcasting, reductions with and without `keepdim`, softmax and
# logsumexp, matrix products with a tangent on either side and batched,
# indexing with slices and with an index array, `cat` and `stack`,
# losses, a tuple output), each through `vjp_by_transpose` and
# `torch.func.vjp` on the same float64 numbers and one random cotangent.
# And the defining property of a transpose, $\langle u, J t\rangle =
# \langle J^\top u, t\rangle$, on random $u$ and $t$.

# %% tags=["hide-cell"]
from torch.utils import _pytree as torch_pytree  # noqa: E402

from tinypytorch.utils.pytree import tree_flatten, tree_unflatten  # noqa: E402

R = np.random.default_rng(720)
A, B, C = R.normal(size=(3, 4)), R.normal(size=(4, 5)), R.normal(size=(2, 3, 4))
F_ = {tp: tp.nn.functional, torch: torch.nn.functional}
CHECKS = {  # name: (f(framework, *tensors), the arrays)
    "sin(x) y + x / y": (lambda fw, a, c: fw.sin(a) * c + a / c, (A, A * A + 1)),
    "tanh layer": (lambda fw, w, c, a: fw.tanh(w @ a + c), (B.T, B[0], A[0])),
    "broadcasting": (lambda fw, a, c: a.reshape(3, 4, 1) * c + fw.exp(a).reshape(3, 4, 1), (A, B[0])),
    "sum, keepdim, mean": (lambda fw, a: a.sum(1, keepdim=True) * a.mean(0) + (a * a).sum(), (A,)),
    "softmax, logsumexp": (lambda fw, a: fw.softmax(a, 1) * fw.logsumexp(a, 0).sum(), (A,)),
    "x @ W, W @ x": (lambda fw, a, w: (a @ w).tanh() @ w.t() + (a @ a.t()).sin() @ a, (A, B)),
    "batched matmul": (lambda fw, c, w: (c @ w).sum(0) * (c[0] @ w), (C, B)),
    "vector @ matrix": (lambda fw, a, w: (a[0] @ w) * (w.t() @ a[1]).sum(), (A, B)),
    "indexing": (lambda fw, a: a[1:, ::2] * a[0, -1] + a[[0, 2, 1]].sum(0, keepdim=True)[:, :2], (A,)),
    "reshape, permute": (lambda fw, c: c.reshape(4, 3, 2).permute(2, 0, 1).exp() * c.sum(), (C,)),
    "cat, stack": (lambda fw, a, c: fw.cat([a, c * 2]).exp() + fw.cat([fw.stack([a, c], 1).sin().sum(1)] * 2),
                   (A, A[::-1].copy())),
    "relu, where, max": (lambda fw, a: fw.relu(a) * fw.where(a > 0, a, a * 2) + a.amax(1, keepdim=True), (A,)),
    "cross_entropy": (lambda fw, a: F_[fw].cross_entropy(a, fw.tensor(np.array([0, 3, 1]))), (A,)),
    "mse_loss, std": (lambda fw, a, c: F_[fw].mse_loss(a, c) * a.std(), (A, A + 1)),
    "a tuple out": (lambda fw, a: (a.sum(0), (a * a).prod(1)), (A,)),
}


def both(f, arrays):
    """(our vjp of a random cotangent, torch's, our jvp_fn, the primals): from vjp_by_transpose and
    torch.func.vjp."""
    primals = [tp.tensor(a) for a in arrays]
    out, vjp_fn = vjp_by_transpose(lambda *xs: f(tp, *xs), *primals)
    torch_out, torch_vjp = torch.func.vjp(lambda *xs: f(torch, *xs), *[torch.tensor(a) for a in arrays])
    leaves, spec = tree_flatten(out)
    us = [R.normal(size=tuple(leaf.shape)) for leaf in leaves]
    ours = vjp_fn(tree_unflatten([tp.tensor(a) for a in us], spec))
    torch_spec = torch_pytree.tree_flatten(torch_out)[1]
    theirs = torch_vjp(torch_pytree.tree_unflatten([torch.tensor(a) for a in us], torch_spec))
    return [g.data for g in ours], [g.numpy() for g in theirs]


def dot_product_gap(f, arrays):
    """|<u, J t> - <J^T u, t>| relative to its size, for random u and t: linearize's jvp_fn and its transpose."""
    primals = [tp.tensor(a) for a in arrays]
    out, jvp_fn = linearize(lambda *xs: f(tp, *xs), *primals)
    vjp_fn = linear_transpose(jvp_fn, *primals)
    ts = [tp.tensor(R.normal(size=a.shape)) for a in arrays]
    leaves, spec = tree_flatten(out)
    us = [tp.tensor(R.normal(size=tuple(leaf.shape))) for leaf in leaves]
    left = sum((u.data * jt.data).sum() for u, jt in zip(us, tree_flatten(jvp_fn(*ts))[0]))
    right = sum((g.data * t.data).sum() for g, t in zip(vjp_fn(tree_unflatten(us, spec)), ts))
    return abs(left - right) / max(abs(left), 1.0)


# %%
errors = {name: max(np.abs(a - b).max() for a, b in zip(*both(f, arrays)))
          for name, (f, arrays) in CHECKS.items()}
gaps = {name: dot_product_gap(f, arrays) for name, (f, arrays) in CHECKS.items()}
assert max(errors.values()) < 1e-12, errors
assert max(gaps.values()) < 1e-12, gaps
print(f"{len(errors)} functions: vjp_by_transpose vs torch.func.vjp {below(max(errors.values()), 1e-12)}")
print(f"<u, J t> = <J^T u, t> for each, {below(max(gaps.values()), 1e-12)} relative")
print("PyTorch check passed: linearize, then transpose, gives torch.func.vjp's vector-Jacobian products")

# %% [markdown]
# ## Recap
#
# - The jvp of $f$ at $x$ is linear in the tangent; `linearize` keeps it
#   as a function of the tangents alone, its constants the primal values
#   the jvp rules read.
# - Run on `LinearTracer`s, that function writes itself down as a
#   `LinearProgram` of linear primitives: multiply or divide by a
#   constant, negate, add, sum, broadcast, reshape, transpose, matmul by
#   a constant, where with a constant mask, indexing, scatter-add, cast.
#   Anything else raises.
# - Each primitive has a transpose rule, and `backward_pass` runs the
#   program backwards through them, once per line, adding cotangents
#   where a value fed two lines. The result is $J^\top u$, the vjp,
#   equal to `torch.func.vjp`'s, with no `backward` formula involved.
#
# ## Exercises
#
# **1. A transpose rule.** `np.cumsum` is linear, and the package has no
# primitive for it. Work out its transpose (what is the matrix of a
# cumulative sum?) as `cumsum_transpose(u)`, a NumPy function of a vector,
# and check it against `torch.func.vjp` of `torch.cumsum`.

# %% tags=["hide-cell"]
def cumsum_transpose(u):
    """cumsum is a lower-triangular matrix of ones; its transpose is upper-triangular: a cumsum from the end."""
    return np.cumsum(u[::-1])[::-1]


u7 = R.normal(size=7)
_, cumsum_vjp = torch.func.vjp(lambda a: torch.cumsum(a, 0), torch.tensor(R.normal(size=7)))
print("cumsum_transpose vs torch:", below(np.abs(cumsum_transpose(u7) - cumsum_vjp(torch.tensor(u7))[0].numpy()).max(),
                                          1e-12))

# %% [markdown]
# **2. Transposing twice.** The transpose rules are written with the same
# primitives, so `vjp_fn` can be traced and transposed again. Show that
# `linear_transpose(vjp_fn, u)` is `jvp_fn` again, against
# `torch.func.jvp`.

# %% tags=["hide-cell"]
twice = linear_transpose(vjp_fn, u)
(jt,) = twice(t)
_, torch_jt = torch.func.jvp(lambda a, b: a.sin() * b + a / b, (tx, ty), tuple(torch.tensor(a.data) for a in t))
print("the transpose of the transpose vs torch.func.jvp:", below(np.abs(jt.data - torch_jt.numpy()).max(), 1e-12))

# %% [markdown]
# **3. The Jacobian by rows.** Apply the tanh layer's transposed function
# to the unit cotangents $e_1, \dots, e_4$ to get the rows of its
# Jacobian with respect to $x$, and compare them with
# `torch.func.jacrev`.

# %% tags=["hide-cell"]
rows = np.stack([layer_vjp(tp.tensor(e))[2].data for e in np.eye(4)])
torch_rows = torch.func.jacrev(lambda a: torch.tanh(torch.tensor(W.data) @ a + torch.tensor(b.data)))(
    torch.tensor(v.data))
print("rows of the Jacobian vs torch.func.jacrev:", below(np.abs(rows - torch_rows.numpy()).max(), 1e-12))
