"""Function transforms, PyTorch's `torch.func`, for functions of Variables (step 63).

    jvp(f, (x,), (v,))      (f(x), J v): one forward-mode pass (forward_ad, step 62)
    vjp(f, x)               (f(x), u -> u^T J): one forward pass recorded, one backward pass per call
    jacfwd(f)(x)            J column by column: one jvp per input element (n passes)
    jacrev(f)(x)            J row by row: one vjp per output element (m passes)
    hessian(f)(x)           jacrev(jacrev(f)): reverse over reverse, through create_graph

PyTorch builds these on vmap and on nested transform levels; here they are loops over basis vectors,
with the same values. Only argnums=0 (an int) is taken; has_aux, chunk_size and vmap raise.
`hessian` is PyTorch's fallback jacrev(jacrev(f)), not its default jacfwd(jacrev(f)): a tangent here
is a plain array, and forward mode has one level, so a forward pass over a reverse pass is not offered.
"""
import numpy as np

from tinypytorch import functions as F
from tinypytorch.autograd import forward_ad as fwAD
from tinypytorch.autograd.gradients import grad
from tinypytorch.core import Variable
from tinypytorch.grad_mode import enable_grad


def _tree(values):
    """How torch's pytree prints a flat tuple (or a single leaf), for jvp's message."""
    if not isinstance(values, tuple):
        return "*"
    return "TreeSpec(tuple, None, [" + ",\n  ".join("*" for _ in values) + "])"


def _check_jvp_args(primals, tangents):
    """PyTorch's checks of jvp's arguments, with its messages."""
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple. "
                           "E.g. it should be valid to call f(*primals).")
    if not isinstance(tangents, tuple) or len(tangents) != len(primals):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have the same python "
                           "structure. For example, if primals is a tuple of 3 tensors, tangents also must be. "
                           f"Got primals with structure {_tree(primals)} and tangents with structure "
                           f"{_tree(tangents)}")
    for name, values in (("primals", primals), ("tangents", tangents)):
        for value in values:
            if not isinstance(value, Variable):
                raise RuntimeError(f"jvp(f, primals, tangents): Expected {name} to only contain Tensors, "
                                   f"got {type(value)}")


def jvp(func, primals, tangents, *, strict=False, has_aux=False):  # step 63
    """(func(*primals), J tangents): one pass of forward mode, every primal with its tangent."""
    if has_aux:
        raise NotImplementedError("tinypytorch.func.jvp: has_aux is not supported")
    _check_jvp_args(primals, tangents)
    with fwAD.dual_level():
        output = func(*[fwAD.make_dual(p, t) for p, t in zip(primals, tangents)])
        pairs = [fwAD.unpack_dual(y) for y in (output if isinstance(output, tuple) else (output,))]
    values = tuple(value for value, _ in pairs)
    # an output that does not depend on the primals has a zero tangent, as in PyTorch
    tangents = tuple(Variable(np.zeros_like(v.data), requires_grad=False) if t is None else t for v, t in pairs)
    return (values, tangents) if isinstance(output, tuple) else (values[0], tangents[0])


def vjp(func, *primals, has_aux=False):  # step 63
    """(func(*primals), vjp_fn) with vjp_fn(u) = u^T J, a tuple with one entry per primal.

    A primal that requires grad (the caller's, or an enclosing jacrev's) is used as it is and the
    backward passes record their work (create_graph), so that the result can be differentiated again.
    """
    if has_aux:
        raise NotImplementedError("tinypytorch.func.vjp: has_aux is not supported")
    nested = any(p.requires_grad for p in primals)
    inputs = tuple(p if p.requires_grad else _leaf(p) for p in primals)
    with enable_grad():
        output = func(*inputs)

    def vjp_fn(cotangent):
        if tuple(cotangent.shape) != output.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {list(cotangent.shape)} and "
                               f"output[0] has a shape of {list(output.shape)}.")
        if not output.requires_grad:  # independent of the primals
            return tuple(Variable(np.zeros_like(p.data), requires_grad=False) for p in primals)
        with enable_grad():
            grads = grad(output, inputs, cotangent, retain_graph=True, create_graph=nested, allow_unused=True)
        return tuple(Variable(np.zeros_like(p.data), requires_grad=False) if g is None else g
                     for p, g in zip(primals, grads))
    return (output if nested else output.detach()), vjp_fn


def _leaf(p):
    """A leaf that requires grad, on p's data; with p's tangent, if an enclosing jvp gave it one (forward over
    reverse: jacfwd(jacrev(f)), a jvp of a gradient)."""
    leaf = p.detach().requires_grad_()
    fwAD.keep_tangent(p, leaf)
    return leaf


def _check_argnums(argnums, chunk_size=None, has_aux=False):
    if argnums != 0 or chunk_size is not None or has_aux:
        raise NotImplementedError("tinypytorch.func: only argnums=0, chunk_size=None and has_aux=False are supported")


def _basis(shape, k):
    """The k-th unit tensor of `shape` (row-major), as an array."""
    e = np.zeros(int(np.prod(shape)))
    e[k] = 1.0
    return e.reshape(shape)


def _stack(parts, shape):
    """Variables of one shape stacked along a new first axis and reshaped to `shape`; differentiable."""
    return F.concatenate([F.reshape(p, (1, -1)) for p in parts]).reshape(shape)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):  # step 63
    """func's Jacobian by rows: one backward pass per output element. Shape: output's + input's."""
    _check_argnums(argnums, chunk_size, has_aux)

    def jacobian(x, *rest):
        output, vjp_fn = vjp(lambda a: func(a, *rest), x)
        rows = [vjp_fn(Variable(_basis(output.shape, i), requires_grad=False))[0] for i in range(output.numel())]
        return _stack(rows, output.shape + x.shape)
    return jacobian


def jacfwd(func, argnums=0, *, has_aux=False, randomness="error"):  # step 63
    """func's Jacobian by columns: one forward-mode pass per input element. Shape: output's + input's."""
    _check_argnums(argnums, None, has_aux)

    def jacobian(x, *rest):
        columns = [jvp(lambda a: func(a, *rest), (x,), (Variable(_basis(x.shape, k), requires_grad=False),))[1]
                   for k in range(x.numel())]
        out_shape = columns[0].shape
        stacked = np.stack([c.data for c in columns], axis=-1)  # a tangent is an array: no graph to keep
        return Variable(stacked.reshape(out_shape + x.shape), requires_grad=False)
    return jacobian


def hessian(func, argnums=0):  # step 63
    """The matrix of second derivatives of a scalar func: jacfwd(jacrev(func)), forward over reverse, as PyTorch's."""
    _check_argnums(argnums)
    return jacfwd(jacrev(func))
