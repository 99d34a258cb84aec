"""Linear algebra beyond the matrix product: `cross`, `einsum`, `svd`, as PyTorch's (and `linalg.cross`).

    c = tinypytorch.cross(a, b, dim=1)                  # cross products of 3-vectors along dim 1
    d = tinypytorch.einsum("Naf,Mbf->NMab", x, y)       # any product-and-sum written with subscripts
    U, S, V = tinypytorch.svd(A)                        # A = U diag(S) V^T (V, not V^T, as torch.svd gives)

All three are differentiable. cross's gradient is a cross product again. einsum is computed as PyTorch
computes it, from operations the package has: each operand's diagonals taken and its dimensions aligned, then
the operands multiplied left to right, a pair whose shared dimensions are summed becoming one batched matrix
product, so its gradient is theirs (and, under autocast, that product runs in the lower dtype, as PyTorch's).
svd's gradient is PyTorch's formula, defined where the singular values are distinct (and, for U and V, nonzero).
"""
import builtins
import collections
import numbers
import warnings

import numpy as np

from tinypytorch import autocast_state, cuda, dtypes
from tinypytorch.core import Function, Variable, as_variable, formulas_on_arrays, sum_tangents, sum_to
from tinypytorch import functions as F
from tinypytorch.factories import check_out, write_out
from tinypytorch.structure import wrap_dim


# ----- cross products --------------------------------------------------------------------------------------

def _component(a, i, dim):
    return a[(slice(None),) * dim + (i,)]


def _cross(a, b, dim):
    """The cross product of arrays a and b (broadcast) along dim, element by element as PyTorch's kernel does."""
    xp = cuda.get_array_module(a, b)
    a0, a1, a2 = (_component(a, i, dim) for i in range(3))
    b0, b1, b2 = (_component(b, i, dim) for i in range(3))
    return xp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=dim)


class Cross(Function):
    """a x b along `dim` (PyTorch's linalg_cross): bilinear, so d(a x b) = da x b + a x db, and the gradients are
    cross products again: b x gy for a, gy x a for b (summed back where a or b was broadcast)."""

    torch_name = "LinalgCrossBackward0"

    def __init__(self, dim):
        self.dim = dim

    def forward(self, a, b):
        if a.dtype != b.dtype:  # (here, after autocast: on a GPU, autocast promotes cross's inputs)
            raise RuntimeError(f"expected scalar type {dtypes.torch_name(a.dtype)} but found "
                               f"{dtypes.torch_name(b.dtype)}")
        if a.dtype.kind == "b":
            raise NotImplementedError("\"cross\" not implemented for 'Bool'")
        self.shapes = (a.shape, b.shape)
        # a's gradient needs b, b's needs a: each kept only where the other needs a gradient, as PyTorch's
        self.save_for_backward(b if self.needs_input_grad[0] else None, a if self.needs_input_grad[1] else None)
        return _cross(a, b, self.dim)

    def backward(self, gy):
        b, a = self.saved_tensors
        ga = sum_to(Cross(self.dim)(b, gy), self.shapes[0]) if self.needs_input_grad[0] else None
        gb = sum_to(Cross(self.dim)(gy, a), self.shapes[1]) if self.needs_input_grad[1] else None
        return ga, gb

    def jvp(self, ta, tb):
        a, b = self.primals
        return sum_tangents(None if ta is None else _cross(ta, b, self.dim),
                            None if tb is None else _cross(a, tb, self.dim))


_warned_default_dim = [False]  # PyTorch warns once a process (TORCH_WARN_ONCE)


def _cross_call(op, input, other, dim, given_dim, out):  # noqa: A002
    for position, (name, x) in enumerate((("input", input), ("other", other)), 1):
        if not isinstance(x, (Variable, *cuda.array_types)):
            raise TypeError(f"{op}(): argument '{name}' (position {position}) must be Tensor, not {type(x).__name__}")
    a, b = as_variable(input, op), as_variable(other, op)
    if a.ndim != b.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    wrapped = wrap_dim(op, dim, a.ndim)
    if a.ndim == 0 or a.shape[wrapped] != 3 or b.shape[wrapped] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {given_dim} must have length 3. Got "
                           f"{a.shape[wrapped] if a.ndim else 0} and {b.shape[wrapped] if b.ndim else 0}")
    for d, (n, m) in enumerate(zip(a.shape, b.shape)):
        if n != m and 1 not in (n, m):
            raise RuntimeError(f"The size of tensor a ({n}) must match the size of tensor b ({m}) at non-singleton "
                               f"dimension {d}")
    if out is not None:
        check_out(op, out, (a, b))
    y = Cross(wrapped)(a, b)
    return y if out is None else write_out(op, y.data, out, exact_dtype=True)


def cross(input, other, dim=None, *, out=None):  # noqa: A002 (PyTorch's names)
    """The cross product of 3-vectors along `dim` of `input` and `other` (PyTorch's `torch.cross`), which broadcast
    in their other dimensions. Without `dim`, PyTorch's deprecated default: the first dimension of `input` of size
    3, with its warning (once); `linalg.cross`'s default is the last dimension instead."""
    if dim is None:
        shape = getattr(input, "shape", ())
        if not _warned_default_dim[0]:
            _warned_default_dim[0] = True
            warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                          "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                          "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = next((d for d, n in enumerate(shape) if n == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    elif not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"cross(): argument 'dim' must be int, not {type(dim).__name__}")
    return _cross_call("cross", input, other, int(dim), dim, out)


def linalg_cross(input, other, *, dim=-1, out=None):  # noqa: A002
    """The cross product of 3-vectors along `dim` (the last by default) of `input` and `other`, which broadcast in
    their other dimensions (PyTorch's `torch.linalg.cross`)."""
    if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
        raise TypeError(f"linalg_cross(): argument 'dim' must be int, not {type(dim).__name__}")
    return _cross_call("linalg_cross", input, other, int(dim), dim, out)


# ----- einsum ----------------------------------------------------------------------------------------------

_ELLIPSIS = "..."


def _label(n):
    """torch.einsum's sublist format: 0-25 are A-Z, 26-51 a-z, Ellipsis is '...'."""
    if n is Ellipsis:
        return _ELLIPSIS
    if not isinstance(n, numbers.Integral) or not 0 <= n < 52:
        raise ValueError("einsum(): subscript in subscript list is not within the valid range [0, 52)")
    return chr(ord("A") + n) if n < 26 else chr(ord("a") + n - 26)


def _sublists(args):
    """(equation, operands) from the sublist format einsum(op0, [0, 1], op1, [1, 2], [0, 2])."""
    equation = ",".join("".join(_label(s) for s in sub) for sub in args[1::2])
    if len(args) % 2 == 1:
        return equation + "->" + "".join(_label(s) for s in args[-1]), args[:-1:2]
    return equation, args[::2]


def _parse(equation, operands):
    """Each operand's labels (ELLIPSIS as "..."), checked in PyTorch's words; and the output's (None: implicit)."""
    arrow = equation.find("->")
    lhs = equation if arrow < 0 else equation[:arrow]
    labels, current, seen_ellipsis, i = [[] for _ in operands], 0, False, 0
    while i < len(lhs):
        c = lhs[i]
        if c == " ":
            pass
        elif c == ".":
            if seen_ellipsis:
                raise RuntimeError(f"einsum(): found '.' for operand {current} for which an ellipsis was already found")
            if lhs[i:i + 3] != _ELLIPSIS:
                raise RuntimeError(f"einsum(): found '.' for operand {current} that is not part of any ellipsis")
            labels[current].append(_ELLIPSIS)
            seen_ellipsis, i = True, i + 2
        elif c == ",":
            current += 1
            if current >= len(operands):
                raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
            seen_ellipsis = False
        elif c.isascii() and c.isalpha():
            labels[current].append(c)
        else:
            raise RuntimeError(f"einsum(): invalid subscript given at index {i} in the equation string, subscripts "
                               "must be in [a-zA-Z]")
        i += 1
    if current != len(operands) - 1:
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    return labels, (None if arrow < 0 else equation[arrow + 2:]), len(lhs) + 2


def einsum(*args):
    """PyTorch's `torch.einsum(equation, *operands)`: sums of products written with subscripts, differentiable.

        einsum("ij,jk->ik", a, b)            # a @ b
        einsum("ii", a)                      # the trace; "ii->i" the diagonal
        einsum("bij,bjk->bik", x, y)         # batched products; "...ij,...jk->...ik" with broadcast batch dims
        einsum("Naf,Mbf->NMab", x, y)        # as PyTorch's tutorials write it
        einsum("ij,jk->ik", [a, b])          # the operands as one list
        einsum(a, [0, 1], b, [1, 2], [0, 2]) # the sublist format

    Without "->", the output is the ellipsis' dimensions, then the labels seen once in alphabetical order
    (uppercase first). Computed as PyTorch computes it, left to right (PyTorch without opt_einsum): diagonals
    for repeated labels, dimensions of size 1 broadcast, labels used by one operand only summed at once, and each
    pair with labels to sum multiplied as a batched matrix product, which requires one dtype (a pair without
    such labels multiplies element-wise, which promotes). The gradient is that of those operations.
    """
    if len(args) < 2:
        raise ValueError("einsum(): must specify the equation string and at least one operand, or at least one "
                         "operand and its subscripts list")
    if isinstance(args[0], (Variable, *cuda.array_types)):
        equation, operands = _sublists(args)
    else:
        equation, operands = args[0], args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        return einsum(equation, *operands[0])
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): argument 'equation' must be str, not {type(equation).__name__}")
    for i, x in enumerate(operands):
        if not isinstance(x, (Variable, *cuda.array_types)):
            raise TypeError(f"expected Tensor as element {i} in argument 1, but got {type(x).__name__}")
    return _einsum(equation, [as_variable(x, "einsum") for x in operands])


def _einsum(equation, operands):
    labels, rhs, rhs_start = _parse(equation, operands)
    # how many dimensions the ellipses cover, and how often each label appears
    count, ellipsis_ndim = {}, 0
    for i, (x, ls) in enumerate(zip(operands, labels)):
        named = len(ls) - (_ELLIPSIS in ls)
        if _ELLIPSIS in ls:
            ellipsis_ndim = builtins.max(ellipsis_ndim, x.ndim - named)
            if named > x.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) is more than the "
                                   f"number of dimensions ({x.ndim}) for operand {i}")
        elif named != x.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({named}) does not match the "
                               f"number of dimensions ({x.ndim}) for operand {i} and no ellipsis was given")
        for label in ls:
            if label != _ELLIPSIS:
                count[label] = count.get(label, 0) + 1
    # the aligned layout: the output's dimensions first, then those to sum; `position` maps each label to its place
    position, ellipsis_at = {}, 0
    if rhs is None:  # implicit output: the ellipsis, then the labels seen once, alphabetically (A-Z before a-z)
        at, ellipsis_in_output = ellipsis_ndim, True
        for label in sorted(count):
            if count[label] == 1:
                position[label], at = at, at + 1
    else:
        at, ellipsis_in_output, i = 0, False, 0
        while i < len(rhs):
            c = rhs[i]
            if c == ".":
                if ellipsis_in_output:
                    raise RuntimeError("einsum(): found '.' for output but an ellipsis (...) was already found")
                if rhs[i:i + 3] != _ELLIPSIS:
                    raise RuntimeError("einsum(): found '.' for output that is not part of any ellipsis (...)")
                ellipsis_at, at, ellipsis_in_output, i = at, at + ellipsis_ndim, True, i + 2
            elif c != " ":
                if not (c.isascii() and c.isalpha()):
                    raise RuntimeError(f"einsum(): invalid subscript given at index {rhs_start + i} in the equation "
                                       "string, subscripts must be in [a-zA-Z]")
                if c in position or c not in count:
                    raise RuntimeError(f"einsum(): output subscript {c}" + (" appears more than once in the output"
                                       if c in position else " does not appear in the equation for any input operand"))
                position[c], at = at, at + 1
            i += 1
    out_ndim = at
    if not ellipsis_in_output:
        ellipsis_at, at = at, at + ellipsis_ndim
    for label in sorted(count):
        if label not in position:
            position[label], at = at, at + 1
    ndim = at
    # each operand: sizes checked, diagonals taken, missing dimensions added (size 1), then permuted into place
    size, ellipsis_sizes, counts, aligned = {}, [1] * ellipsis_ndim, [0] * ndim, []
    for i, (x, ls) in enumerate(zip(operands, labels)):
        permutation, d = [-1] * ndim, 0
        for label in ls:
            if label == _ELLIPSIS:
                covered = operands[i].ndim - (len(ls) - 1)
                for j in range(ellipsis_ndim - covered, ellipsis_ndim):
                    n = x.shape[d]
                    if n != 1:
                        if ellipsis_sizes[j] not in (1, n):
                            raise RuntimeError(f"einsum(): dimension {d} covered by ellipsis in operand {i}has size "
                                               f"{n} which does not broadcast with previously seen ellipsis with size "
                                               f"{ellipsis_sizes[j]} for the respective dimension")
                        ellipsis_sizes[j] = n
                        counts[ellipsis_at + j] += 1
                    permutation[ellipsis_at + j], d = d, d + 1
            elif permutation[position[label]] == -1:
                n = x.shape[d]
                if n != 1:
                    if size.get(label, 1) not in (1, n):
                        raise RuntimeError(f"einsum(): subscript {label} has size {n} for operand {i} which does not "
                                           f"broadcast with previously seen size {size[label]}")
                    size[label] = n
                    counts[position[label]] += 1
                permutation[position[label]], d = d, d + 1
            else:  # a repeated label: its diagonal, in the first one's place
                first = permutation[position[label]]
                if x.shape[d] != x.shape[first]:
                    raise RuntimeError(f"einsum(): subscript {label} is repeated for operand {i} but the sizes don't "
                                       f"match, {x.shape[d]} != {x.shape[first]}")
                x = _diagonal(x, first, d)
        for j, p in enumerate(permutation):
            if p == -1:
                x = F.unsqueeze(x, d)
                permutation[j], d = d, d + 1
        aligned.append(F.permute(x, permutation))
    # contract, left to right
    while len(aligned) > 1:
        a, b = aligned.pop(0), aligned.pop(0)
        summed, a_only, b_only = [], [], []
        for d in range(out_ndim, ndim):
            if a.shape[d] != 1 and b.shape[d] != 1:
                counts[d] -= 1
                if counts[d] == 1:
                    summed.append(d)
                    counts[d] = 0
            elif counts[d] == 1:
                if a.shape[d] != 1:
                    a_only.append(d)
                    counts[d] = 0
                elif b.shape[d] != 1:
                    b_only.append(d)
                    counts[d] = 0
        if a_only:
            a = F.sum(a, dim=tuple(a_only), keepdim=True)
        if b_only:
            b = F.sum(b, dim=tuple(b_only), keepdim=True)
        aligned.insert(0, _sum_product(a, b, summed))
    result = aligned[0]
    if ndim > out_ndim:  # the summed dimensions: of size 1 now if there were pairs, else summed here
        if len(operands) > 1:
            return F.reshape(result, result.shape[:out_ndim])
        return F.sum(result, dim=tuple(range(out_ndim, ndim)))
    return result


def _diagonal(x, first, second):
    """x's diagonal over dims `first` and `second`, in dim `first`'s place (PyTorch's
    x.diagonal(0, first, second).movedim(-1, first)): the two dims moved last, indexed together, moved back."""
    rest = [d for d in range(x.ndim) if d not in (first, second)]
    moved = F.permute(x, rest + [first, second])
    at = cuda.get_array_module(x.data).arange(x.shape[first])
    diagonal = moved[(Ellipsis, at, at)]
    order = list(range(diagonal.ndim - 1))
    order.insert(first, diagonal.ndim - 1)
    return F.permute(diagonal, order)


def _sum_product(left, right, summed):
    """PyTorch's sumproduct_pair: left * right (aligned, broadcasting) summed over dims `summed`, kept as size 1.
    Without dims to sum, an element-wise product; else one batched matrix product of the two reshaped."""
    if not summed:
        return left * right
    lro, lo, ro, lro_size, lo_size, ro_size, sum_size = [], [], [], 1, 1, 1, 1
    for d in range(left.ndim):
        sl, sr = left.shape[d] != 1, right.shape[d] != 1
        if d in summed:
            if sl and sr:
                sum_size *= left.shape[d]
            elif sl:
                left = F.sum(left, dim=d, keepdim=True)
            elif sr:
                right = F.sum(right, dim=d, keepdim=True)
        elif sl and sr:
            lro.append(d)
            lro_size *= left.shape[d]
        elif sl:
            lo.append(d)
            lo_size *= left.shape[d]
        else:
            ro.append(d)
            ro_size *= right.shape[d]
    out_size = [left.shape[d] for d in lro + lo] + [1] * len(summed) + [right.shape[d] for d in ro]
    order = lro + lo + summed + ro
    out_permutation = [order.index(d) for d in range(len(order))]
    left = F.reshape(F.permute(left, order), (lro_size, lo_size, sum_size))
    right = F.reshape(F.permute(right, lro + summed + ro + lo), (lro_size, sum_size, ro_size))
    if left.dtype != right.dtype and not autocast_state.open_autocast_blocks:  # (autocast may make them one)
        raise RuntimeError(f"expected scalar type {dtypes.torch_name(left.data.dtype)} but found "
                           f"{dtypes.torch_name(right.data.dtype)}")
    product = F._named(F.MatMul(), "BmmBackward0")(left, right)  # PyTorch's bmm; MatMul's autocast row casts it
    return F.permute(F.reshape(product, out_size), out_permutation)


# ----- singular value decomposition ------------------------------------------------------------------------

class LinAlgError(RuntimeError):
    """PyTorch's torch.linalg.LinAlgError: a decomposition that cannot be computed (a RuntimeError, as PyTorch's)."""


class Svd(Function):
    """A = U diag(S) Vh for a matrix or a stack of them (PyTorch's linalg_svd): three outputs, U, S and Vh.

    Backward is PyTorch's svd_backward, written in the package's operations so that it can be differentiated
    again. It divides by s_j^2 - s_i^2, and by s_i where U or V has more columns to explain than A has rank:
    repeated singular values give infinities or NaN in U's and V's gradients, as they do in PyTorch's (S's
    gradient alone, U diag(gS) Vh, is defined everywhere). With full matrices, only the first k = min(m, n)
    columns of U and rows of Vh carry gradient, as in PyTorch (the others are not unique).
    """

    torch_name = "LinalgSvdBackward0"

    def __init__(self, full_matrices):
        self.full_matrices = full_matrices

    def forward(self, a):
        xp = cuda.get_array_module(a)
        m, n = a.shape[-2:]
        if a.size == 0:  # LAPACK has nothing to do: U and Vh are identities' columns, no singular values
            k = builtins.min(m, n)
            u_cols, vh_rows = (m, n) if self.full_matrices else (k, k)
            U = xp.zeros(a.shape[:-2] + (m, u_cols), a.dtype) + xp.eye(m, u_cols, dtype=a.dtype)
            Vh = xp.zeros(a.shape[:-2] + (vh_rows, n), a.dtype) + xp.eye(vh_rows, n, dtype=a.dtype)
            U, S, Vh = U, xp.zeros(a.shape[:-2] + (k,), a.dtype), Vh
        else:
            U, S, Vh = xp.linalg.svd(a, full_matrices=self.full_matrices)
        self.save_for_backward(U, S, Vh)  # PyTorch's saves its three outputs
        return U, S, Vh

    def backward(self, gU, gS, gVh):
        U, S, Vh = self.saved_tensors
        k = S.shape[-1]
        if self.full_matrices:  # PyTorch's: the first k columns of U and rows of Vh only
            U, Vh = U[..., :k], Vh[..., :k, :]
            gU = None if gU is None else gU[..., :k]
            gVh = None if gVh is None else gVh[..., :k, :]
        return _svd_backward(gU, gS, gVh, U, S, Vh)


def _svd_backward(gU, gS, gVh, U, S, Vh):
    """PyTorch's svd_backward for real matrices (Variables, so differentiable again)."""
    m, n = U.shape[-2], Vh.shape[-1]
    if gU is None and gVh is None:
        if gS is None:
            return None
        return U @ (gS[..., :, None] * Vh) if m >= n else (U * gS[..., None, :]) @ Vh
    xp = cuda.get_array_module(S.data)
    eye = Variable(xp.eye(S.shape[-1], dtype=S.data.dtype), requires_grad=False)
    S2 = S * S
    E = F.where(eye.data.astype(bool), 1.0, S2[..., None, :] - S2[..., :, None])  # s_j^2 - s_i^2 off the diagonal

    def skew(A):
        return A - F.transpose(A, -2, -1)

    if gU is not None and gVh is not None:
        UhgU, VhgV = skew(F.transpose(U, -2, -1) @ gU), skew(Vh @ F.transpose(gVh, -2, -1))
        gA = (UhgU * S[..., None, :] + S[..., :, None] * VhgV) / E
    elif gU is not None:
        gA = skew(F.transpose(U, -2, -1) @ gU) * (S[..., None, :] / E)
    else:
        gA = S[..., :, None] * (skew(Vh @ F.transpose(gVh, -2, -1)) / E)
    if gS is not None:
        gA = gA + gS[..., :, None] * eye  # diag(gS)
    if m > n and gU is not None:  # U's columns do not span A's column space alone: (I - U U^T) gU S^-1 Vh
        gA = U @ gA
        gUSinv = gU / S[..., None, :]
        gA = gA + gUSinv - U @ (F.transpose(U, -2, -1) @ gUSinv)
        return gA @ Vh
    if m < n and gVh is not None:  # likewise for V: U S^-1 gVh (I - V Vh)
        gA = gA @ Vh
        SinvgVh = gVh / S[..., :, None]
        gA = gA + SinvgVh - (SinvgVh @ F.transpose(Vh, -2, -1)) @ Vh
        return U @ gA
    return U @ (gA @ Vh) if m >= n else (U @ gA) @ Vh


class return_types:  # noqa: N801 (PyTorch's name: torch.return_types.svd)
    svd = collections.namedtuple("svd", ["U", "S", "V"])


def svd(input, some=True, compute_uv=True, *, out=None):  # noqa: A002 (PyTorch's names)
    """The singular value decomposition A = U diag(S) V^T of a matrix or a stack of them (PyTorch's `torch.svd`):
    a named tuple (U, S, V) with V itself, not V^T (torch.linalg.svd's Vh). some=True: the reduced one, U (m, k) and
    V (n, k), k = min(m, n); some=False: U (m, m) and V (n, n). compute_uv=False: U and V are zeros of (m, m) and
    (n, n), as PyTorch's, and S is still differentiable. The signs of the singular vectors are LAPACK's (NumPy's
    or CuPy's), which may differ from PyTorch's: U diag(S) V^T and products such as U U^T are the same."""
    x = input
    if not isinstance(x, (Variable, *cuda.array_types)):
        raise TypeError(f"svd(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")
    x = as_variable(x, "svd")
    if x.ndim < 2:
        raise RuntimeError(f"linalg.svd: input should have at least 2 dimensions, but has {x.ndim} dimensions instead")
    kind = x.data.dtype.kind
    if kind not in "fc":
        raise RuntimeError(f"linalg.svd: Expected a floating point or complex tensor as input. Got "
                           f"{dtypes.torch_name(x.data.dtype)}")
    if x.data.dtype == np.float16:
        raise NotImplementedError("\"linalg_svd_cpu\" not implemented for 'Half'")
    if x.data.size and not bool(cuda.get_array_module(x.data).isfinite(x.data).all()):
        raise LinAlgError("linalg.svd: The algorithm failed to converge because the input matrix contained "
                          "non-finite values.")
    if out is not None:
        if not (isinstance(out, (tuple, list)) and len(out) == 3):
            raise TypeError("svd(): argument 'out' must be tuple of Tensors (U, S, V)")
        for o in out:
            check_out("svd", o, (x,))
    U, S, Vh = Svd(not some and compute_uv)(x)
    V = F.transpose(Vh, -2, -1)
    if not compute_uv:
        xp = cuda.get_array_module(x.data)
        m, n = x.shape[-2:]
        U = Variable(xp.zeros(x.shape[:-2] + (m, m), x.data.dtype), requires_grad=False)
        V = Variable(xp.zeros(x.shape[:-2] + (n, n), x.data.dtype), requires_grad=False)
    if out is None:
        return return_types.svd(U, S, V)
    return return_types.svd(*(write_out("svd", y.data, o, exact_dtype=True) for y, o in zip((U, S, V), out)))


formulas_on_arrays(Cross)  # speed: its backward runs on arrays too (grad_mode.BackwardMode); Svd's needs Variables
