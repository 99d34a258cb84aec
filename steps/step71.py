# %% [markdown]
# # Step 71: Jacobians in one batched pass
#
# [Step 65](step65.ipynb) built a Jacobian out of passes: one backward
# pass (a `vjp`) per output element gives it row by row, one forward-mode
# pass (a `jvp`) per input element column by column. The passes of such a
# loop differ only in the vector they start from, a unit vector $e_i$ of
# the identity matrix: the same function run on every row of a matrix.
# That is what `vmap` ([step 69](step69.ipynb)) batches. This step runs
# the one `vjp_fn` on the whole identity matrix at once, so the backward
# pass runs once with a batched cotangent; it reads the package's
# `jacrev` and `jacfwd`, which are exactly that, gets the Hessian as
# `jacfwd(jacrev(f))`, and ends with `linearize`, which runs the function
# once and replays its linear part for every tangent after. Every count
# on the page is measured, by counting calls, as step 65 counted passes.

# %%
import contextlib
import warnings

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import func
from tinypytorch.batched import innermost
from tinypytorch.utils.listing import show_code
from tinypytorch.utils.pictures import draw_dag

tp.set_default_dtype(tp.float64)  # float64, so the checks hold to 1e-12


# %% tags=["hide-input"]
# torch 2.13's own warnings, torch's affair and not the page's: its forward AD loads its rules with
# torch.jit.script, which warns that it is deprecated; its linearize warns about its own constant folding
warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
warnings.filterwarnings("ignore", "Attempted to insert a get_attr Node", UserWarning)


def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


class Count:
    """Calls of tanh's backward and jvp formulas, with the (physical) shape of the gradient or tangent each got,
    and how many times the function's Python body ran (`body` is counted by the functions themselves)."""

    def __init__(self):
        self.backward, self.jvp, self.body = [], [], 0

    def __str__(self):
        def passes(shapes):
            return f"{len(shapes)} (of {', '.join(sorted({str(s) for s in shapes}))})" if shapes else "0"
        return f"body runs: {self.body}, tanh backward: {passes(self.backward)}, tanh jvp: {passes(self.jvp)}"


count = Count()


@contextlib.contextmanager
def counting():
    """A fresh Count for the block: Tanh's backward and jvp wrapped, the shape of their first argument kept as
    the operation sees it (under vmap: the whole batch, innermost(...))."""
    global count
    count = Count()
    tanh = tp.functions.Tanh
    backward, jvp = tanh.backward, tanh.jvp

    def counted_backward(self, gy):
        count.backward.append(tuple(innermost(gy).shape))
        return backward(self, gy)

    def counted_jvp(self, t):
        count.jvp.append(tuple(np.shape(t)))
        return jvp(self, t)
    tanh.backward, tanh.jvp = counted_backward, counted_jvp
    try:
        yield count
    finally:
        tanh.backward, tanh.jvp = backward, jvp
        count = Count()  # runs of f after the block count nowhere that was printed


# %% [markdown]
# ## Six backward passes, or one
#
# The function: $f(x) = \tanh(Wx)$ from $\mathbb{R}^4$ to $\mathbb{R}^6$,
# so its Jacobian is $6\times 4$. `vjp` runs $f$ once and records its
# graph; `vjp_fn(u)` is then one backward pass from the cotangent $u$,
# and gives the row $u^\top J$. Step 65's loop calls it once per unit
# vector $e_i$; `vmap(vjp_fn)` calls it once, on the identity matrix,
# whose rows are the $e_i$.

# %%
rng = np.random.default_rng(71)
W = tp.tensor(rng.standard_normal((6, 4)))


def f(x):  # R^4 -> R^6
    count.body += 1
    return tp.tanh(tp.matmul(W, x))


x = tp.tensor(rng.standard_normal(4))
eye = tp.eye(6)
with counting() as recorded:
    y, vjp_fn = func.vjp(f, x)  # f run once, its graph recorded
with counting() as loop:
    J_loop = tp.stack([vjp_fn(eye[i])[0] for i in range(6)])  # step 65: one backward pass per row
with counting() as batched:
    (J,) = func.vmap(vjp_fn)(eye)  # every row in one backward pass
print("vjp:       ", recorded)
print("the loop:  ", loop)
print("vmap:      ", batched)
J_hand = (1 - np.tanh(W.data @ x.data) ** 2)[:, None] * W.data  # diag(1 - tanh²) W, the chain rule
print(tuple(J.shape), "| vmap vs the loop:", below(np.abs(J.data - J_loop.data).max(), 1e-15),
      "| vs the chain rule by hand:", below(np.abs(J.data - J_hand).max(), 1e-15))

# %% [markdown]
# Inside `vmap`, the cotangent that reaches tanh's backward formula is
# one sample of shape (6,) to the formula's code, and the whole identity
# matrix, (6, 6), to the arrays underneath: the formula
# $g\,(1-y^2)$ multiplies all six rows by the saved $1-y^2$ in one
# operation, and the matmul's backward formula, batched by its rule
# (step 69), gives all six rows of $J$. Only the cotangent is batched:
# the recorded graph and its saved values are the ones `vjp` made, used
# once. The loop's six passes ran the same formulas on one row each.

# %% tags=["hide-input"]
def draw_passes(m, n, loop, batched):
    """m separate backward passes (one unit cotangent each, one row each) against one pass on the identity."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    cell, grid = 0.32, dict(edgecolor="white", linewidth=1.5)

    def strip(ax, x0, top, count, lit=None, height=0.7):
        for k in range(count):
            colour = "tab:blue" if lit is None else ("tab:red" if k == lit else "0.9")
            ax.add_patch(plt.Rectangle((x0 + k * cell, top), cell, height, facecolor=colour, **grid))

    def backward_box(ax, middle, height, text):
        ax.annotate("", (3.35, middle), (m * cell + 0.15, middle), arrowprops=dict(arrowstyle="->"))
        ax.add_patch(plt.Rectangle((3.4, middle - height / 2), 1.5, height, facecolor="white", edgecolor="0.4"))
        ax.text(4.15, middle, text, ha="center", va="center", fontsize=8)
        ax.annotate("", (5.5, middle), (5.0, middle), arrowprops=dict(arrowstyle="->"))
    for i in range(m):  # left: one strip per pass
        top = m - 1 - i
        strip(left, 0, top, m, lit=i)
        backward_box(left, top + 0.35, 0.6, "backward")
        strip(left, 5.6, top, n)
    left.set_title(f"the loop: {len(loop.backward)} backward passes, a {loop.backward[0]} cotangent each",
                   fontsize=10)
    for i in range(m):  # right: the identity and the Jacobian as blocks
        strip(right, 0, m - 1 - i, m, lit=i, height=1)
        strip(right, 5.6, m - 1 - i, n, height=1)
    backward_box(right, m / 2, 3.0, "one\nbackward\npass")
    right.set_title(f"vmap(vjp_fn)(eye): {len(batched.backward)} backward pass, a {batched.backward[0]} cotangent",
                    fontsize=10)
    for ax in (left, right):
        ax.text(m * cell / 2, -0.3, "cotangents $e_i$", ha="center", va="top", fontsize=9)
        ax.text(5.6 + n * cell / 2, -0.3, "rows of $J$", ha="center", va="top", fontsize=9)
        ax.set_xlim(-0.1, 5.8 + n * cell), ax.set_ylim(-1.0, m), ax.axis("off")
    plt.tight_layout()
    plt.show()


draw_passes(6, 4, loop, batched)

# %% [markdown]
# ## The package's jacrev and jacfwd
#
# `func.jacrev` is that cell in general form: `call.record()` runs $f$
# once with its graph recorded; then, for each output, `vmap` runs one
# backward pass (`call.pull`) on that output's basis, `_basis(y)`: the
# identity matrix of `y.numel()` rows, each row shaped as `y`. The rows
# come back stacked in front and are reshaped to the output's shape
# followed by the input's, as PyTorch's `jacrev` shapes a Jacobian.
# `func.jacfwd` is the same by columns: `vmap` over the input's basis
# of one forward-mode pass (`call.push`), so $f$ runs once for each
# input it differentiates, on a batch of that input's tangents
# (`torch.func.jacfwd` batches the tangents of all the inputs into one
# run); `_side_by_side` moves the batch dim to the back, where the
# input's dims go.

# %%
show_code(func.jacrev, func.jacfwd, func._basis, step=71)

# %%
with counting() as rows:
    J_rev = func.jacrev(f)(x)
with counting() as columns_loop:  # step 65's other loop: one jvp, so one run of f, per column
    J_cols = tp.stack([func.jvp(f, (x,), (tp.eye(4)[k],))[1] for k in range(4)], dim=1)
with counting() as columns:
    J_fwd = func.jacfwd(f)(x)
print("jacrev:           ", rows)
print("the columns loop: ", columns_loop)
print("jacfwd:           ", columns)
print("jacrev, jacfwd, the columns loop vs vmap(vjp_fn):",
      below(max(np.abs(M.data - J.data).max() for M in (J_rev, J_fwd, J_cols)), 1e-15))

# %% [markdown]
# Step 65 found that the loops cross over: with fewer inputs than outputs
# columns take fewer passes, with fewer outputs rows. Batched, either way
# is one pass (jacrev's backward after its forward), carrying a batch of
# $m$ cotangents or $n$ tangents: the number of passes no longer
# depends on the shape, only the size of what one pass carries does.
# The figure counts again, on maps $\tanh(Wx)$ with $nm = 512$ as in
# step 65: calls of tanh's backward and jvp formulas while each way builds
# the whole Jacobian. `bench/results/jacobians.md` times the same four
# ways and `torch.func`'s on such maps.

# %% tags=["hide-input"]
def by_rows(fn):  # step 65's loops
    def jacobian(a):
        y, pull = func.vjp(fn, a)
        return tp.stack([pull(tp.eye(y.numel())[i])[0] for i in range(y.numel())])
    return jacobian


def by_columns(fn):
    def jacobian(a):
        return tp.stack([func.jvp(fn, (a,), (tp.eye(a.numel())[k],))[1] for k in range(a.numel())], dim=1)
    return jacobian


def passes_of(jacobian_of, n, m):
    """Calls of tanh's backward and jvp while jacobian_of builds the Jacobian of tanh(W x), W of m x n."""
    W_mn = tp.tensor(np.random.default_rng(0).standard_normal((m, n)))
    with counting() as seen:
        jacobian_of(lambda a: tp.tanh(tp.matmul(W_mn, a)))(tp.ones(n))
    return len(seen.backward) + len(seen.jvp)


sizes = [2 ** k for k in range(1, 9)]
ways = {"loop by columns": by_columns, "loop by rows": by_rows, "jacfwd": func.jacfwd, "jacrev": func.jacrev}
passes = {name: [passes_of(way, n, 512 // n) for n in sizes] for name, way in ways.items()}
fig, ax = plt.subplots(figsize=(7, 3.6))
for name, colour, marker in (("loop by columns", "tab:blue", "o"), ("loop by rows", "tab:red", "o"),
                             ("jacfwd", "tab:green", "s"), ("jacrev", "tab:purple", "x")):
    ax.plot(sizes, passes[name], marker=marker, color=colour, ms=5)
ax.set_xscale("log", base=2), ax.set_yscale("log", base=2)
ax.set_ylim(0.5, 1024)
ax.text(2.2, 600, "loop by rows: m", color="tab:red", fontsize=9)
ax.text(256, 600, "loop by columns: n", color="tab:blue", fontsize=9, ha="right")
ax.text(16, 1.6, "jacfwd and jacrev (batched): 1", color="0.2", fontsize=9, ha="center")
ax.set_xlabel("n inputs (m = 512 / n outputs)"), ax.set_ylabel("calls of tanh's backward and jvp")
ax.set_title("Batched, the crossover of step 65 is gone", fontsize=10)
plt.tight_layout()
plt.show()
print("tanh(W x), W of m x n, n m = 512: calls of tanh's backward and jvp")
print("  n    m  loop by columns  loop by rows  jacfwd  jacrev")
for k, n in enumerate(sizes):
    print(f"{n:3d}  {512 // n:3d}  {passes['loop by columns'][k]:15d}  {passes['loop by rows'][k]:12d}"
          f"  {passes['jacfwd'][k]:6d}  {passes['jacrev'][k]:6d}")

# %% [markdown]
# ## Hessians: forward over reverse, one pass each
#
# The Hessian of a scalar $g$ is the Jacobian of its gradient, and
# `func.hessian(g)` is `jacfwd(jacrev(g))`, as PyTorch's. Counting runs
# shows what the nesting does: `jacfwd` runs its function, `jacrev(g)`,
# once, on a batch of $n$ tangents, and `jacrev` runs $g$ once and its
# backward pass once. The tangents go through the backward formulas
# (step 65), so that one backward pass carries all $n$ of them: the whole
# Hessian from one forward pass and one backward pass, each batched.
# For $g(x) = \sum_i \tanh(Wx)_i$, by hand,
# $\nabla^2 g = W^\top \operatorname{diag}\!\left(-2t(1-t^2)\right) W$
# with $t=\tanh(Wx)$.

# %%
show_code(func.hessian, step=71)


# %%
def g(x):  # R^4 -> R
    return f(x).sum()


with counting() as second:
    H = func.hessian(g)(x)
print("hessian:", second)
t = np.tanh(W.data @ x.data)
H_hand = W.data.T @ np.diag(-2 * t * (1 - t ** 2)) @ W.data
print(tuple(H.shape), "| vs the formula:", below(np.abs(H.data - H_hand).max(), 1e-14),
      "| symmetric:", below(np.abs(H.data - H.data.T).max(), 1e-15))

# %% [markdown]
# Tanh's backward formula ran once, on a gradient of shape (1, 4, 6):
# the inner `jacrev`'s one cotangent ($g$ is a scalar), for each of
# `jacfwd`'s 4 tangents, over tanh's 6 outputs.
#
# ## linearize: run the function once, replay its linear part
#
# `jvp(f, (x,), (v,))` runs the whole of $f$, value and tangent, for
# every $v$. When the tangents come one at a time (an iterative solver
# asks for $Jv_1$, then $Jv_2$ from the answer), the values are computed
# again each time. `func.linearize(f, x)`, PyTorch's
# `torch.func.linearize`, runs $f$ once, under forward mode with zero
# tangents; while it runs, every operation's `jvp` formula is kept with
# the primal values it reads (`Function.replay_jvp`). `jvp_fn(v)` then
# runs the kept formulas that the output's tangent needs, in order, on
# $v$ (`_run_linear_program`): $f$'s Python code does not run again.
# `torch.func.linearize` evaluates its function twice, as its
# documentation says (once for the output, once to trace the graph of
# its jvp); the cell counts both runs with the same kind of counter.

# %% tags=["hide-input"]
fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 3.6))
draw_dag({"x": ("leaf", "x"), "mm": ("function", "matmul"), "h": ("variable", "W x"),
          "tanh": ("function", "tanh"), "y": ("output", "y")},
         [("x", "mm"), ("mm", "h"), ("h", "tanh"), ("tanh", "y")], ax=top,
         positions={"x": (0, 0), "mm": (1.3, 0), "h": (2.6, 0), "tanh": (3.9, 0), "y": (5.2, 0)},
         notes={"mm": "its jvp kept, with W", "tanh": "its jvp kept, with y"},
         title="linearize(f, x): f's Python runs once, under forward mode")
draw_dag({"v": ("leaf", "v"), "mm": ("function", "W v"), "h": ("variable", "tangent of W x"),
          "tanh": ("function", "(1 - y²) · t"), "y": ("output", "J v")},
         [("v", "mm"), ("mm", "h"), ("h", "tanh"), ("tanh", "y")], ax=bottom,
         positions={"v": (0, 0), "mm": (1.3, 0), "h": (2.6, 0), "tanh": (3.9, 0), "y": (5.2, 0)},
         title="jvp_fn(v): only the kept jvps, in order, on arrays (no Python of f)")
plt.tight_layout()
plt.show()

# %%
show_code(func._run_linear_program, step=71)

# %%
import torch  # noqa: E402
import torch.func as tfunc  # noqa: E402

torch_runs = 0


def t_f(a):
    global torch_runs
    torch_runs += 1
    return torch.tanh(torch.tensor(W.data) @ a)


with counting() as made:
    y_lin, jvp_fn = func.linearize(f, x)
    t_y, t_jvp_fn = tfunc.linearize(t_f, torch.tensor(x.data))
print(f"linearize: the package's f ran {made.body} time(s), torch's t_f {torch_runs}")
vs = rng.standard_normal((3, 4))
with counting() as replays:
    answers = [jvp_fn(tp.tensor(v)) for v in vs]
print("3 calls of jvp_fn:", replays)
print("vs J v:", below(max(np.abs(a.data - J.data @ v).max() for a, v in zip(answers, vs)), 1e-15))

# %% [markdown]
# Three calls, three runs of tanh's jvp formula and none of $f$. The
# columns of $J$ are `jvp_fn` of the unit vectors, so `vmap(jvp_fn)`
# over the identity gives $J$ too (the columns stacked in front: $J^\top$).
# Under `vmap` the package replays the kept formulas once per sample,
# since they work on plain arrays, which `vmap`'s rules do not batch:
# here it costs four replays where `jacfwd` made one batched pass.
# Linearize pays off for tangents that come one at a time, `jacfwd` for
# a whole basis known in advance.

# %%
with counting() as by_vmap:
    J_lin = func.vmap(jvp_fn)(tp.eye(4))
print("vmap(jvp_fn)(eye):", by_vmap)
print(tuple(J_lin.shape), "| J_lin.T vs J:", below(np.abs(J_lin.data.T - J.data).max(), 1e-15))

# %% [markdown]
# ## Check against PyTorch
#
# `jacrev`, `jacfwd`, `hessian` and `linearize` (its `jvp_fn` under
# `vmap`) against `torch.func`'s, float64, `rtol=1e-10`, values, shapes
# and dtypes: on the page's map, on a function of two inputs with four
# `argnums`, and on a small network as a function of its parameters
# (`functional_call`: a dict in, a dict of blocks out), its loss's
# Hessian included.

# %% tags=["hide-input"]
from tinypytorch.utils.pytree import tree_flatten  # noqa: E402


def close(ours, theirs):
    """Every leaf of two results of the same structure: shape, dtype and values (float64, rtol 1e-10); 1."""
    ours, theirs = tree_flatten(ours)[0], torch.utils._pytree.tree_flatten(theirs)[0]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape) and str(a.dtype) == str(b.dtype), (a.shape, b.shape)
        np.testing.assert_allclose(np.asarray(a.data), b.detach().numpy(), rtol=1e-10, atol=1e-14)
    return 1


def both(fn):
    """fn written for either framework (its first argument), as a function of ours and as one of torch's."""
    return (lambda *a: fn(tp, *a)), (lambda *a: fn(torch, *a))


def tensors(*arrays):
    return [tp.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


t_x = torch.tensor(x.data)
t_map = lambda a: torch.tanh(torch.tensor(W.data) @ a)  # noqa: E731  (t_f without its counter)
two_inputs = both(lambda fw, a, b: fw.sin(a) @ b * b.sum())  # a: (3, 4), b: (4,)
scalar = both(lambda fw, a, b: (fw.tanh(a) @ b).sum() * b.cos().sum())
ab, t_ab = tensors(rng.standard_normal((3, 4)), rng.standard_normal(4))

tp.manual_seed(0)
net = tp.nn.Sequential(tp.nn.Linear(3, 5), tp.nn.Tanh(), tp.nn.Linear(5, 2))
t_net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
t_net.load_state_dict({k: torch.tensor(v.data) for k, v in net.state_dict().items()})
params = {k: p.detach() for k, p in net.named_parameters()}
t_params = {k: p.detach() for k, p in t_net.named_parameters()}
data = rng.standard_normal((4, 3))
network = (lambda p: func.functional_call(net, p, (tp.tensor(data),)),  # a dict of parameters in, (4, 2) out
           lambda p: tfunc.functional_call(t_net, p, (torch.tensor(data),)))
loss = (lambda p: (network[0](p) ** 2).mean(), lambda p: (network[1](p) ** 2).mean())

# linearize: (the function's pair, primals, torch's primals, a batch of tangents, torch's), the tangents vmapped
ab_tangents, t_ab_tangents = tensors(rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4)))
p_tangents, t_p_tangents = tensors(*[rng.standard_normal((2,) + tuple(p.shape)) for p in params.values()])
linearize_cases = [((f, t_map), (x,), (t_x,), (tp.eye(4),), (torch.eye(4, dtype=torch.float64),)),
                   (two_inputs, ab, t_ab, ab_tangents, t_ab_tangents),
                   (network, (params,), (t_params,), (dict(zip(params, p_tangents)),),
                    (dict(zip(t_params, t_p_tangents)),))]

# %%
checks = 0
for name in ("jacrev", "jacfwd"):
    ours_t, theirs_t = getattr(func, name), getattr(tfunc, name)
    checks += close(ours_t(f)(x), theirs_t(t_map)(t_x))  # the page's map
    for argnums in (0, 1, (0, 1), (1, 0)):  # a function of two inputs
        checks += close(ours_t(two_inputs[0], argnums)(*ab), theirs_t(two_inputs[1], argnums)(*t_ab))
    checks += close(ours_t(network[0])(params), theirs_t(network[1])(t_params))  # a network's parameters
for argnums in (0, 1, (0, 1)):
    checks += close(func.hessian(scalar[0], argnums)(*ab), tfunc.hessian(scalar[1], argnums)(*t_ab))
checks += close(func.hessian(g)(x), tfunc.hessian(lambda a: t_map(a).sum())(t_x))
checks += close(func.hessian(loss[0])(params), tfunc.hessian(loss[1])(t_params))
for pair, primals, t_primals, tangents, t_tangents in linearize_cases:
    (out, jf), (t_out, t_jf) = func.linearize(pair[0], *primals), tfunc.linearize(pair[1], *t_primals)
    checks += close(out, t_out) + close(func.vmap(jf)(*tangents), tfunc.vmap(t_jf)(*t_tangents))
print(f"{checks} results of jacrev, jacfwd, hessian and linearize equal torch.func's",
      "(values, shapes, dtypes)")
print("PyTorch check passed: Jacobians, Hessians and linearize equal torch.func's")

# %% [markdown]
# ## Recap
#
# - A Jacobian is a stack of `vjp`s of the unit cotangents (its rows) or
#   of `jvp`s of the unit tangents (its columns). `vmap` runs the one
#   `vjp_fn` on the identity matrix: a single backward pass, with the
#   cotangent batched, gives every row; the graph is recorded once.
# - `func.jacrev` and `func.jacfwd` are `vmap` over `_basis` of one
#   backward or one forward-mode pass: one pass however many rows or
#   columns, so the shape no longer picks the mode by the number of
#   passes.
# - `func.hessian(g)` is `jacfwd(jacrev(g))`: one forward pass of $g$ and
#   one backward pass that carries all $n$ tangents.
# - `func.linearize(f, x)` runs $f$ once and keeps its `jvp` formulas;
#   `jvp_fn(v)` replays only those, for tangents that arrive one at a
#   time. PyTorch's runs the function twice to build it.
#
# ## Exercises
#
# **1. A Jacobian with respect to two inputs, by hand.** For
# $h(a, b) = \sin(a)\,b$ (a matrix times a vector), `vjp_fn` returns a
# pair: the rows for $a$ and for $b$. Get both blocks of the Jacobian
# with one `vmap(vjp_fn)` and compare them with
# `jacrev(h, argnums=(0, 1))`.

# %% tags=["hide-cell"]
def h(a, b):
    return tp.matmul(tp.sin(a), b)


a0, b0 = tp.tensor(rng.standard_normal((3, 4))), tp.tensor(rng.standard_normal(4))
_, h_vjp = func.vjp(h, a0, b0)
blocks = func.vmap(h_vjp)(tp.eye(3))  # (rows for a: (3, 3, 4), rows for b: (3, 4))
expected = func.jacrev(h, argnums=(0, 1))(a0, b0)
print([tuple(block.shape) for block in blocks], "vs jacrev:",
      below(max(np.abs(mine.data - theirs.data).max() for mine, theirs in zip(blocks, expected)), 1e-15))

# %% [markdown]
# **2. jacfwd in one line.** Write the Jacobian of `f` by columns as
# `vmap` of a `jvp` over the unit tangents, and put the columns where
# they belong. How many times did tanh's jvp run?

# %% tags=["hide-cell"]
with counting() as mine:
    columns_first = func.vmap(lambda v: func.jvp(f, (x,), (v,))[1])(tp.eye(4))  # (4, 6): column k in row k
print(mine, "| its transpose vs jacfwd:", below(np.abs(columns_first.data.T - J_fwd.data).max(), 1e-15))

# %% [markdown]
# **3. Many Hessian–vector products at once.** $Hv$ is the `jvp` of the
# gradient in the direction $v$ (forward over reverse, without forming
# $H$). Take it for the rows of a (5, 4) matrix $V$ in one `vmap`, and
# compare with $V H$ from `hessian(g)`.

# %% tags=["hide-cell"]
V = tp.tensor(rng.standard_normal((5, 4)))
products = func.vmap(lambda v: func.jvp(func.grad(g), (x,), (v,))[1])(V)  # row k: H v_k (H is symmetric)
print(tuple(products.shape), "vs V H:", below(np.abs(products.data - V.data @ H.data).max(), 1e-14))
