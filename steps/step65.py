# %% [markdown]
# # Step 65: Jacobians and Hessians, both ways
#
# [Step 64](step64.ipynb) gave forward mode: one pass pushes a tangent $v$
# and returns $J\,v$, a **column** of the Jacobian. Reverse mode pulls a
# cotangent $u$ (a vector shaped like the output, the gradient a backward
# pass starts from) and returns $u^\top J$, a **row**. This step builds
# whole Jacobians and Hessians out of those two products, as PyTorch's
# `torch.func` (`jvp`, `vjp`, `jacfwd`, `jacrev`, `hessian`) and
# `torch.autograd.functional` (`jacobian`, `hvp`, `vhp`) do, asks when
# columns are cheaper than rows, and takes a Hessian–vector product without
# ever forming the Hessian.

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import tinypytorch as tp
from tinypytorch import Variable, func
from tinypytorch.autograd import functional
from tinypytorch.utils.listing import show_code


# %% tags=["hide-input"]
def below(error, bound):
    """'< 1e-12', after checking it: rounding differs between CPUs, a bound does not."""
    assert error < bound, f"{error:.3g} is not below {bound:.0e}"
    return f"< {bound:.0e}"


def const(array):
    return Variable(np.asarray(array, dtype=float), requires_grad=False)


# %% [markdown]
# ## A column per forward pass, a row per backward pass
#
# For $f:\mathbb{R}^n\to\mathbb{R}^m$ the Jacobian $J$ is $m\times n$.
# Feeding the unit tangent $e_k$ forward gives column $k$; feeding the unit
# cotangent $e_i$ backward gives row $i$. So a Jacobian by columns needs $n$
# forward-mode passes, and one by rows $m$ backward passes (after one
# forward pass that records the graph).

# %% tags=["hide-input"]
def draw_columns_and_rows(m=4, n=6):
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    for ax, title, colour, forward in ((axes[0], "by columns: J e_k (n passes)", "tab:blue", True),
                                       (axes[1], "by rows: e_iᵀ J (m passes)", "tab:red", False)):
        for i in range(m):
            for k in range(n):
                lit = (k == 2) if forward else (i == 1)
                ax.add_patch(plt.Rectangle((k, m - 1 - i), 0.9, 0.9, color=colour if lit else "0.9"))
        ax.set_xlim(-0.2, n), ax.set_ylim(-0.2, m), ax.set_aspect("equal"), ax.axis("off")
        ax.set_title(title, fontsize=10)
        ax.text(n / 2, -0.15, f"n = {n} inputs", ha="center", va="top", fontsize=9)
        ax.text(-0.3, m / 2, f"m = {m} outputs", ha="right", va="center", rotation=90, fontsize=9)
    plt.tight_layout()
    plt.show()


draw_columns_and_rows()

# %% [markdown]
# The package has PyTorch's two products in `tinypytorch.func`.
# `jvp(f, (x,), (v,))` runs one forward-mode pass under a `dual_level`
# and returns $(f(x), Jv)$. `vjp(f, x)` records one forward pass and
# returns $f(x)$ and a function that runs one backward pass per
# cotangent $u$ and returns $(u^\top J,)$. A Jacobian is then a loop
# over basis vectors, of one product or the other: the step's two
# functions, for one input Variable and one output Variable of any shape.

# %%
def unit(shape, k):
    """The k-th unit vector e_k, shaped as `shape` (a 1 at flat position k)."""
    e = np.zeros(int(np.prod(shape)))
    e[k] = 1.0
    return const(e.reshape(shape))


def jacfwd_by_columns(f):
    """f's Jacobian by columns: one forward-mode pass (jvp) per element of the input."""
    def jacobian(x):
        columns = []
        for k in range(x.numel()):
            y, column = func.jvp(f, (x,), (unit(x.shape, k),))  # f(x) and J e_k, in one pass
            columns.append(column.reshape(-1))
        return tp.stack(columns, dim=1).reshape(y.shape + x.shape)  # shape: output's + input's
    return jacobian


def jacrev_by_rows(f):
    """f's Jacobian by rows: one recorded forward pass, then one backward pass (vjp) per output element."""
    def jacobian(x):
        y, pull = func.vjp(f, x)  # f run once, its graph recorded
        rows = [pull(unit(y.shape, i))[0] for i in range(y.numel())]  # e_iᵀ J, one backward pass each
        return tp.stack(rows).reshape(y.shape + x.shape)
    return jacobian


# %%
rng = np.random.default_rng(62)
W = rng.standard_normal((3, 2))


def layer(x):  # x -> tanh(W x): R^2 -> R^3
    return tp.tanh(tp.matmul(x.reshape(1, -1), const(W.T))).reshape(-1)


x = const([0.5, -1.0])
J_fwd, J_rev = jacfwd_by_columns(layer)(x), jacrev_by_rows(layer)(x)
J_hand = (1 - np.tanh(W @ x.data) ** 2)[:, None] * W  # diag(1 - tanh²) W, by the chain rule
print(np.round(J_fwd.data, 6))
print("by columns vs by rows:", below(np.abs(J_fwd.data - J_rev.data).max(), 1e-15),
      "| vs the chain rule by hand:", below(np.abs(J_fwd.data - J_hand).max(), 1e-15))
print("vs the package's func.jacfwd:", below(np.abs(J_fwd.data - func.jacfwd(layer)(x).data).max(), 1e-15),
      "| func.jacrev:", below(np.abs(J_rev.data - func.jacrev(layer)(x).data).max(), 1e-15))

# %% [markdown]
# The package's `func.jacfwd` and `func.jacrev`, as PyTorch's, build
# the same matrices without the loop: `vmap` (step 69) runs the $n$
# forward-mode passes, or the $m$ backward passes, as one pass on a batch
# of basis vectors; [step 71](step71.ipynb) counts those passes and
# reads the two transforms. They also take PyTorch's arguments: `argnums` picks
# the arguments to differentiate, and arguments and outputs may be tuples
# or dicts of Variables (a model's parameters).
#
# ## When columns are cheaper than rows
#
# Count passes for $x\mapsto\tanh(Wx)$ with $W$ of size $m\times n$:
# `jacfwd_by_columns` makes $n$ forward-mode passes, `jacrev_by_rows` one
# recorded forward pass and $m$ backward passes. The figure counts them by
# counting the calls of `Tanh.forward` and `Tanh.backward`: every pass runs
# one of them once, whatever its direction.

# %% tags=["hide-input"]
def count_passes(jacobian_of, n, m):
    """Build the Jacobian of an m x n map with jacobian_of (a transform) and count its passes, by tanh's calls."""
    W_nm = np.random.default_rng(0).standard_normal((m, n))
    calls = {"forward": 0, "backward": 0}
    tanh_forward, tanh_backward = tp.functions.Tanh.forward, tp.functions.Tanh.backward

    def counted_forward(self, *a):
        calls["forward"] += 1
        return tanh_forward(self, *a)

    def counted_backward(self, *a):
        calls["backward"] += 1
        return tanh_backward(self, *a)
    tp.functions.Tanh.forward, tp.functions.Tanh.backward = counted_forward, counted_backward
    try:
        jacobian_of(lambda a: tp.tanh(tp.matmul(a.reshape(1, -1), const(W_nm.T))).reshape(-1))(const(np.ones(n)))
    finally:
        tp.functions.Tanh.forward, tp.functions.Tanh.backward = tanh_forward, tanh_backward
    return calls["forward"] + calls["backward"]


sizes = [2 ** k for k in range(1, 9)]
loops = {"by columns": jacfwd_by_columns, "by rows": jacrev_by_rows}
passes = {(name, n): count_passes(loops[name], n, 512 // n) for name in loops for n in sizes}
fig, ax = plt.subplots(figsize=(6, 3.4))
for name, colour in (("by columns", "tab:blue"), ("by rows", "tab:red")):
    ax.plot(sizes, [passes[name, n] for n in sizes], "o-", color=colour, label=name)
ax.set_xscale("log", base=2), ax.set_yscale("log", base=2)
ax.set_xlabel("n inputs (m = 512 / n outputs)"), ax.set_ylabel("passes through tanh")
ax.set_title("Same Jacobian, n m = 512: columns win while n < m")
ax.legend()
plt.tight_layout()
plt.show()
print("  n   m  by columns  by rows")
for n in sizes:
    print(f"{n:3d} {512 // n:3d} {passes['by columns', n]:10d} {passes['by rows', n]:8d}")
batched = {name: count_passes(getattr(func, name), 4, 128) for name in ("jacfwd", "jacrev")}
print(f"the package's func.jacfwd and func.jacrev at n = 4, m = 128: {batched['jacfwd']} and "
      f"{batched['jacrev']} calls of tanh (batched passes)")

# %% [markdown]
# The lines cross at $n = m$ (about 23, as $nm = 512$): with fewer inputs
# than outputs, build columns; with fewer outputs, rows. A loss has $m = 1$:
# one backward pass gives its whole gradient, which is why training uses
# reverse mode. A pass does not cost the same in both modes (a tangent pass
# computes values and tangents, a backward pass only gradients but after a
# recorded forward), so measured times shift the crossover. Batching moves
# it too: the package's `func.jacfwd` calls tanh once and `func.jacrev`
# twice, one batched pass each, at every size. `bench/speed_jacobians.py`
# times the loops, the package's batched transforms and `torch.func`'s.
#
# ## Hessians: forward over reverse
#
# The Hessian of a scalar $f$ is the Jacobian of its gradient.
# `jacfwd_by_columns(jacrev_by_rows(f))` takes it forward over reverse:
# each column is one forward-mode pass pushed through the whole of
# `jacrev_by_rows`, its backward passes included. Saved tensors keep their
# tangents and the backward formulas run on Variables while a dual level
# is open, so the input's tangent reaches the gradient.
# `jacrev_by_rows(jacrev_by_rows(f))` gives the same matrix by rows: the
# inner `vjp` records its backward passes (`create_graph=True`) when its
# input requires grad, as the outer `vjp`'s does. PyTorch's `hessian` is
# forward over reverse, `jacfwd(jacrev(f))`, and so is the package's
# `func.hessian`. PyTorch's docs example,
# $\nabla^2 \sum\sin x = \operatorname{diag}(-\sin x)$:

# %%
x = const([0.3, 1.1, -0.7, 2.0])


def sum_sin(a):
    return tp.sin(a).sum()


H = jacfwd_by_columns(jacrev_by_rows(sum_sin))(x)
print(np.round(H.data, 6) + 0.0)
print("against diag(-sin x):", below(np.abs(H.data - np.diag(-np.sin(x.data))).max(), 1e-15))
H_rows = jacrev_by_rows(jacrev_by_rows(sum_sin))(x)
print("reverse over reverse:", below(np.abs(H_rows.data - H.data).max(), 1e-15),
      "| func.hessian:", below(np.abs(func.hessian(sum_sin)(x).data - H.data).max(), 1e-15))

# %% [markdown]
# The same for a small network's loss, as a function of its first layer's
# weights (2 × 3, flattened: a 6 × 6 Hessian), by the package's
# `func.hessian`. Its off-diagonal entries couple weights of both hidden
# units, which meet in the output and the loss.

# %%
data, target = rng.standard_normal((5, 3)), rng.standard_normal((5, 1))
W2 = rng.standard_normal((1, 2))


def mlp_loss(w1):  # 3 -> 2 (tanh) -> 1, mean squared error, w1 flattened
    hidden = tp.tanh(tp.matmul(const(data), w1.reshape(2, 3).T))
    return ((tp.matmul(hidden, const(W2.T)) - const(target)) ** 2).mean()


w1 = const(rng.standard_normal(6))
H_mlp = func.hessian(mlp_loss)(w1)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(4.2, 3.4))
image = ax.imshow(H_mlp.data, cmap="RdBu", vmin=-np.abs(H_mlp.data).max(), vmax=np.abs(H_mlp.data).max())
ax.set_xticks(range(6), [f"w{i}{j}" for i in range(2) for j in range(3)])
ax.set_yticks(range(6), [f"w{i}{j}" for i in range(2) for j in range(3)])
ax.set_title("Hessian of the MLP loss in W1")
fig.colorbar(image)
plt.tight_layout()
plt.show()
print("symmetric:", below(np.abs(H_mlp.data - H_mlp.data.T).max(), 1e-14))

# %% [markdown]
# ## Hessian–vector products without the Hessian
#
# Newton-type methods and curvature probes need $H v$, not $H$. `vhp`
# takes the gradient with a graph, then one backward pass through it seeded
# with $v$: $v^\top H$. `hvp` wants $H v$, and PyTorch gets it by the
# *double-backward trick*: $u^\top H$ is linear in a dummy $u$, so one more
# backward pass, from $u^\top H$ back to $u$ seeded with $v$, gives
# $\partial (u^\top H v)/\partial u = Hv$. Both store vectors of $n$
# numbers, never the $n\times n$ matrix.

# %%
show_code(functional.hvp)

# %%
x = const([0.5, -1.0, 2.0])
ones = const(np.ones(3))
print("hvp((x**3).sum(), x, ones) =", functional.hvp(lambda a: (a ** 3).sum(), x, ones)[1].data,
      " 6x =", 6 * x.data)
v = const([1.0, 2.0, -1.0])
product = functional.vhp(lambda a: (tp.sin(a) * a[0:1]).sum(), x, v)[1]
print("vhp, f = sum(sin x) x0:", np.round(product.data, 6))

# %% tags=["hide-input"]
ns = [10, 100, 1_000, 10_000, 100_000]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.loglog(ns, [8 * n * n for n in ns], "o-", color="tab:red", label="Hessian, n × n float64")
ax.loglog(ns, [8 * n for n in ns], "o-", color="tab:blue", label="hvp's result (and each vector it keeps)")
ax.axhline(2 ** 30, color="grey", ls=":"), ax.text(1e5, 2 ** 29, "1 GiB", color="grey", ha="right", va="top")
ax.set_xlabel("n parameters"), ax.set_ylabel("bytes")
ax.set_title("The Hessian grows as n², a product with it as n")
ax.set_ylim(top=1e13), ax.legend(loc="upper left", fontsize=9)  # above 1 GiB: "best" put it on the lower line
plt.tight_layout()
plt.show()
print("n = 100,000: the Hessian takes", 8 * 100_000 ** 2 // 2 ** 30, "GiB; H v takes", 8 * 100_000 // 1024, "KiB")

# %% [markdown]
# `jacobian(f, x)` of `torch.autograd.functional` builds rows by default
# and columns with `strategy="forward-mode"` (PyTorch asks for
# `vectorize=True` there, since it uses vmap; the package accepts it and
# loops). An output that does not depend on the input gives zeros, or
# PyTorch's error with `strict=True`:

# %%
print(functional.jacobian(lambda a: const(np.ones(2)), x).data)
try:
    functional.jacobian(lambda a: const(np.ones(2)), x, strict=True)
except RuntimeError as error:
    print(textwrap.fill(f"RuntimeError: {error}", 100))

# %% [markdown]
# ## Check against PyTorch
#
# The step's `jacfwd_by_columns` and `jacrev_by_rows`, and the package's
# `jvp`, `vjp`, `jacfwd`, `jacrev` and `hessian`, against `torch.func`;
# `jacobian` (both strategies), `hvp` and `vhp` against
# `torch.autograd.functional`; float64, `rtol=1e-10`.

# %% tags=["hide-input"]
import warnings  # noqa: E402

import torch  # noqa: E402
import torch.autograd.functional as TF  # noqa: E402
import torch.func as tfunc  # noqa: E402

with warnings.catch_warnings():  # torch 2.13's forward AD loads its rules with torch.jit.script, which warns
    warnings.simplefilter("ignore", DeprecationWarning)  # that it is deprecated: torch's affair, not the page's
    torch.func.jvp(torch.sin, (torch.zeros(1),), (torch.ones(1),))  # (loaded once, here)


def t_layer(a):
    return torch.tanh(torch.tensor(W) @ a)


def t_mlp_loss(w):
    hidden = torch.tanh(torch.tensor(data) @ w.reshape(2, 3).T)
    return ((hidden @ torch.tensor(W2.T) - torch.tensor(target)) ** 2).mean()


def scalar(a):
    return (tp.sin(a) * a[0:1]).sum()


def t_scalar(a):
    return (a.sin() * a[0:1]).sum()


def close(ours, theirs):
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-14)


# %%
x2, v2, u3 = const([0.5, -1.0]), const([0.3, 0.7]), const([1.0, -2.0, 0.5])
tx2, tv2, tu3 = (torch.tensor(a.data) for a in (x2, v2, u3))
close(func.jvp(layer, (x2,), (v2,))[1], tfunc.jvp(t_layer, (tx2,), (tv2,))[1])
close(func.vjp(layer, x2)[1](u3)[0], tfunc.vjp(t_layer, tx2)[1](tu3)[0])
for name, loop in (("jacfwd", jacfwd_by_columns), ("jacrev", jacrev_by_rows)):
    close(loop(layer)(x2), getattr(tfunc, name)(t_layer)(tx2))
    close(getattr(func, name)(layer)(x2), getattr(tfunc, name)(t_layer)(tx2))
close(jacfwd_by_columns(jacrev_by_rows(mlp_loss))(w1), tfunc.hessian(t_mlp_loss)(torch.tensor(w1.data)))
close(func.hessian(mlp_loss)(w1), tfunc.hessian(t_mlp_loss)(torch.tensor(w1.data)))
print("torch.func: the loops by columns and by rows; jvp, vjp, jacfwd, jacrev, hessian equal")
tx, tv = torch.tensor(x.data), torch.tensor(v.data)
close(functional.jacobian(layer, x2), TF.jacobian(t_layer, tx2))
close(functional.jacobian(layer, x2, strategy="forward-mode", vectorize=True), TF.jacobian(t_layer, tx2))
close(functional.hvp(scalar, x, v)[1], TF.hvp(t_scalar, tx, tv)[1])
close(functional.vhp(scalar, x, v)[1], TF.vhp(t_scalar, tx, tv)[1])
print("torch.autograd.functional: jacobian (both strategies), hvp, vhp equal")
print("PyTorch check passed: the step's loops, func's five transforms, functional's jacobian, hvp, vhp")

# %% [markdown]
# ## Recap
#
# - One forward-mode pass gives a column $Jv$, one backward pass a row
#   $u^\top J$: `jvp` and `vjp`. A Jacobian is $n$ columns or $m$ rows;
#   few inputs favour columns, few outputs rows.
# - A Hessian is forward over reverse (`jacfwd(jacrev(f))`, PyTorch's
#   `hessian`); reverse over reverse gives the same through `create_graph`.
# - The package's `func.jacfwd`, `func.jacrev` and `func.hessian` run
#   the passes as one batched pass (`vmap`, step 69) and take PyTorch's
#   `argnums` and `has_aux`, and tuples, lists and dicts of Variables.
# - `vhp` and `hvp` give $v^\top H$ and $Hv$ in $O(n)$ memory, by double
#   backward; the Hessian itself needs $n^2$.
# - `autograd.functional.jacobian(f, x, strategy=...)`, `strict=True`
#   raises where an output ignores the input, else zeros.
#
# ## Exercises
#
# **1. A Jacobian with more outputs than inputs.** For
# $f(t) = (\cos t, \sin t, t^2)$ at $t = 0.4$ (one input, three outputs),
# get the Jacobian with `jacfwd_by_columns` and `jacrev_by_rows`. Which
# made fewer passes?

# %% tags=["hide-cell"]
def curve(t):
    return tp.concatenate([tp.cos(t), tp.sin(t), t * t])


t0 = const([0.4])
J_curve_fwd, J_curve_rev = jacfwd_by_columns(curve)(t0), jacrev_by_rows(curve)(t0)
print(np.round(J_curve_fwd.data.ravel(), 6), np.round(J_curve_rev.data.ravel(), 6))
print("by columns: 1 forward-mode pass (one input);",
      "by rows: 1 forward and 3 backward passes (three outputs)")

# %% [markdown]
# **2. A Newton step with hvp.** For $f(x) = \sum x^4/4 - x$ the Newton
# step solves $H d = -\nabla f$. With $H$ diagonal here, compute
# $H\mathbf{1}$ by `hvp` and take one step from $x = 2$.

# %% tags=["hide-cell"]
def quartic(a):
    return (a ** 4 / 4 - a).sum()


xq = const([2.0, 2.0])
gradient = xq.data ** 3 - 1
diagonal = functional.hvp(quartic, xq, const(np.ones(2)))[1].data  # H 1 = diag(3x²) since H is diagonal
print("Newton step from 2:", np.round(xq.data - gradient / diagonal, 6), "(exact: 2 - 7/12)")

# %% [markdown]
# **3. hvp equals the Hessian times v.** For the MLP loss above, check
# `hvp(mlp_loss, w1, v)` against `hessian(mlp_loss)(w1) @ v`.

# %% tags=["hide-cell"]
v6 = const(np.linspace(-1, 1, 6))
product = functional.hvp(mlp_loss, w1, v6)[1].data
print("hvp vs H v:", below(np.abs(product - H_mlp.data @ v6.data).max(), 1e-14))
