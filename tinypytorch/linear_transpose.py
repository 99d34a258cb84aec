"""Reverse mode from forward mode: linearize, then transpose (step 72).

`tinypytorch.func.linearize(f, *primals)` keeps, for each operation f ran, its jvp rule with the primal values it
read: its jvp_fn, t -> J t, is a linear function of the tangents. Run on a `LinearTracer` in place of each
tangent array, those rules write that function down as a `LinearProgram`: a list of equations, each one *linear
primitive* applied to earlier results and to constant arrays (the primal values the rule read). The primitives:

    mul(t, c)  t * c         div(t, c)  t / c        neg(t)  -t             add(t, s)  t + s
    sum(t, axes, keepdims)   broadcast(t, shape)     reshape(t, shape)      transpose(t, perm)
    matmul(t, c)  t @ c, or c @ t                    select(mask, t)  where(mask, t, 0)
    getitem(t, key)  t[key]  scatter_add(t, key, shape)  zeros(shape) with t added at key    cast(t, dtype)

Every primitive has a transpose rule (TRANSPOSE): multiply by the same constant; add fans the cotangent out to
both operands; sum and broadcast undo each other, as getitem and scatter_add do; reshape, transpose and cast go
back; matmul by c is matmul by c's transpose on the other side. `backward_pass` runs a program backwards from
the outputs' cotangents, each equation's rule once, and sums the cotangents that meet at a value: u -> J^T u,
the vjp, with no backward formula. The rules are written with the same primitives, so the transposed function
can be traced and transposed again, which gives jvp_fn back.

    linear_transpose(linear_fn, *primals)   linear_fn's transpose: jvp_fn of linearize (or a function this
                                            returned), traced once on tracers shaped as the primals
    vjp_by_transpose(func, *primals)        (func(*primals), vjp_fn): linearize, then linear_transpose; the
                                            pair torch.func.vjp returns

PyTorch has no public transpose of a linear function (JAX's `jax.linear_transpose` is the model). A tracer
refuses what is not linear in it (a tangent times a tangent, exp of a tangent, a non-zero constant added, a
constant divided by a tangent, a comparison, bool) with a RuntimeError, and a NumPy function that has no
primitive here with a NotImplementedError; neither ever gives a silent result. NumPy arrays only: a tensor
on the GPU is refused (CuPy's functions would not hand a tracer to its hooks).
"""
import numbers

import numpy as np

from tinypytorch.core import Variable
from tinypytorch.utils.pytree import tree_flatten, tree_unflatten

WHO = "linear_transpose"


class LinearTracer:  # step 72
    """Stands in for a tangent array while a linear function runs: every operation on it records one linear
    primitive on its program and returns a new tracer (its shape and dtype, no values)."""

    def __init__(self, program, shape, dtype):
        self.program, self.shape, self.dtype = program, tuple(shape), np.dtype(dtype)
        self.n = len(program.variables)  # its number in the program: printed as t0, t1, ...
        program.variables.append(self)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape)))
    T = property(lambda self: self.transpose())

    def __repr__(self):
        return f"t{self.n}"

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):  # NumPy's ufuncs and operators on arrays
        if method != "__call__" or kwargs:
            raise NotImplementedError(f"{WHO}: numpy.{ufunc.__name__}.{method} on a tangent has no transpose rule")
        if ufunc in UFUNCS:
            return UFUNCS[ufunc](*inputs)
        raise not_linear(f"numpy.{ufunc.__name__} of a tangent")

    def __array_function__(self, function, types, args, kwargs):  # np.where, np.sum, np.broadcast_to, ...
        if function in FUNCTIONS:
            return FUNCTIONS[function](*args, **kwargs)
        raise NotImplementedError(f"{WHO}: numpy.{function.__name__} on a tangent has no transpose rule here")

    def __array__(self, *args, **kwargs):
        raise not_linear("reading a tangent's values (np.asarray)")

    def __bool__(self):
        raise not_linear("bool() of a tangent (an if on its values)")

    # the operators, as NumPy's ufuncs
    __mul__ = lambda self, other: _mul_either(self, other)
    __rmul__ = lambda self, other: _mul_either(other, self)
    __truediv__ = lambda self, other: _divide(self, other)
    __rtruediv__ = lambda self, other: _divide(other, self)
    __add__ = lambda self, other: _add_either(self, other)
    __radd__ = lambda self, other: _add_either(other, self)
    __sub__ = lambda self, other: _subtract(self, other)
    __rsub__ = lambda self, other: _subtract(other, self)
    __matmul__ = lambda self, other: matmul(self, other)
    __rmatmul__ = lambda self, other: matmul(other, self)
    __neg__ = lambda self: neg(self)
    __pos__ = lambda self: self

    def __pow__(self, other):
        raise not_linear("a tangent to a power")

    def _compare(self, other):
        raise not_linear("a comparison of a tangent")
    __lt__ = __le__ = __gt__ = __ge__ = _compare

    def __getitem__(self, key):
        return getitem(self, key)

    def sum(self, axis=None, keepdims=False, dtype=None):
        t = self if dtype is None else cast(self, dtype)
        return reduce_sum(t, _axes(axis, self.ndim), keepdims)

    def mean(self, axis=None, keepdims=False):
        axes = _axes(axis, self.ndim)
        return div(reduce_sum(self, axes, keepdims), float(np.prod([self.shape[a] for a in axes])))

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
        return reshape(self, _zeros(self.shape, self.dtype).reshape(shape).shape)  # -1 worked out by NumPy

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], numbers.Integral) else axes
        axes = tuple(range(self.ndim))[::-1] if axes is None or len(axes) == 0 else axes
        return transpose(self, tuple(int(a) % self.ndim for a in axes))

    def astype(self, dtype, copy=True):
        return cast(self, dtype)

    def copy(self):
        return self  # a tracer is never written to: a copy is the same value


class LinearProgram:  # step 72
    """A linear function written down: its input tracers, its equations (primitive, arguments, parameters,
    output tracer), its outputs (tracers; None where an output does not depend on the inputs) and their (shape,
    dtype)."""

    def __init__(self):
        self.variables, self.equations, self.inputs, self.outputs, self.output_types = [], [], [], [], []

    def record(self, primitive, args, params):
        """One equation; its output is a new tracer, shaped as the primitive's result on zeros."""
        for a in args:
            if isinstance(a, LinearTracer) and a.program is not self:
                raise RuntimeError(f"{WHO}: a tracer of another linear program met this one's")
        result = np.asarray(IMPLS[primitive](*[_zeros(a.shape, a.dtype) if isinstance(a, LinearTracer) else a
                                               for a in args], **params))
        out = LinearTracer(self, result.shape, result.dtype)
        self.equations.append((primitive, args, params, out))
        return out

    def __call__(self, *arrays):
        """The outputs for the inputs `arrays`: the equations run in order (on arrays, or recorded again)."""
        values = {v.n: a for v, a in zip(self.inputs, arrays)}
        for primitive, args, params, out in self.equations:
            values[out.n] = bind(primitive, *[values[a.n] if isinstance(a, LinearTracer) else a for a in args],
                                 **params)
        return [None if y is None else values[y.n] for y in self.outputs]

    def __str__(self):
        names = {}  # id of a constant array -> c0, c1, ...

        def name(a):
            if isinstance(a, LinearTracer):
                return f"t{a.n}"
            if np.ndim(a) == 0:
                return repr(a.item() if isinstance(a, np.generic | np.ndarray) else a)
            return names.setdefault(id(a), f"c{len(names)}")

        inputs = ", ".join(f"t{v.n}: {_type(v)}" for v in self.inputs)
        lines = [f"in  {inputs}"]
        for primitive, args, params, out in self.equations:
            lines.append(f"{f't{out.n} = ' + SHOW[primitive](*map(name, args), **params):<34} # {_type(out)}")
        constants = {}
        for _, args, _, _ in self.equations:
            constants.update({names[id(a)]: a for a in args if id(a) in names})
        lines.append("out " + ", ".join("0" if y is None else f"t{y.n}" for y in self.outputs))
        if constants:
            lines.append("constants: " + ", ".join(f"{k}: {_type(c)}" for k, c in constants.items()))
        return "\n".join(lines)


def trace(fn, shapes_and_dtypes):  # step 72
    """The LinearProgram of fn (a function of a list of arrays, returning a list): fn run once on tracers."""
    program = LinearProgram()
    program.inputs = [LinearTracer(program, shape, dtype) for shape, dtype in shapes_and_dtypes]
    try:
        outputs = fn(program.inputs)
    except TypeError as error:  # a tracer where only an array will do: a Variable made of it, in a custom jvp
        if "got LinearTracer" not in str(error):
            raise
        raise NotImplementedError(f"{WHO}: a jvp rule made a tensor of a tangent (a custom autograd.Function's "
                                  "jvp works on tensors): only rules on arrays can be traced") from error
    program.outputs = [y if isinstance(y, LinearTracer) else _constant_output(y) for y in outputs]
    program.output_types = [(y.shape, y.dtype) if isinstance(y, LinearTracer | np.ndarray) else None
                            for y in outputs]
    return program


def backward_pass(program, cotangents, visited=None):  # step 72
    """J^T u: the inputs' cotangents (arrays, or tracers) from the outputs' `cotangents`. The equations run
    backwards, each through its transpose rule once; cotangents that reach one value are added. `visited`, a
    list if given, collects the equations in the order their rules ran."""
    ct = {}

    def send(v, g):  # g, cast to v's dtype, added to v's cotangent
        if tuple(g.shape) != v.shape:
            raise RuntimeError(f"{WHO}: a cotangent of shape {tuple(g.shape)} for t{v.n} of shape {v.shape}")
        g = g if g.dtype == v.dtype else cast(g, v.dtype)
        ct[v.n] = g if v.n not in ct else add(ct[v.n], g)
    for y, u in zip(program.outputs, cotangents):
        if y is not None and u is not None:
            send(y, u)
    for equation in reversed(program.equations):
        primitive, args, params, out = equation
        if out.n not in ct:
            continue  # no output's cotangent reaches it
        if visited is not None:
            visited.append(equation)
        for a, g in zip(args, TRANSPOSE[primitive](ct.pop(out.n), *args, **params)):
            if g is not None:
                send(a, g)
    return [ct.get(v.n, _zeros(v.shape, v.dtype)) for v in program.inputs]


def linear_transpose(linear_fn, *primals):  # step 72
    """The transpose of linear_fn, whose inputs are shaped as `primals`: a function of cotangents shaped as
    linear_fn's output (one pytree) that returns a tuple shaped as `primals`. linear_fn is the jvp_fn of
    `tinypytorch.func.linearize` or a function this returned: one that carries `on_arrays` (itself, on a list of
    arrays), `in_spec` and `out_spec` (the pytree structures of its inputs and output) and `in_types` (the shape
    and dtype of each input)."""
    if not hasattr(linear_fn, "on_arrays"):
        raise TypeError(f"{WHO}: expected the jvp_fn of tinypytorch.func.linearize (or a function linear_transpose "
                        f"returned), got {linear_fn!r}")
    flat, spec = tree_flatten(primals)
    for p in flat:  # the tracer answers NumPy's hooks; CuPy's functions do not hand a foreign object over
        if not isinstance(p, Variable):
            raise TypeError(f"{WHO}: expected the primals to be tensors, got {type(p).__name__}")
        if not isinstance(p.data, np.ndarray):
            raise NotImplementedError(f"{WHO}: tensors on the CPU only, got one on {p.device}")
    types = [(tuple(p.shape), p.data.dtype) for p in flat]
    if spec != linear_fn.in_spec or types != [(tuple(s), np.dtype(d)) for s, d in linear_fn.in_types]:
        raise RuntimeError(f"{WHO}: the primals ({spec}: {types}) are not shaped as linear_fn's inputs "
                           f"({linear_fn.in_spec}: {linear_fn.in_types})")
    program = trace(linear_fn.on_arrays, types)

    def transposed(cotangents):
        flat_u, u_spec = tree_flatten(cotangents)
        if u_spec != linear_fn.out_spec:
            raise RuntimeError(f"{WHO}: expected cotangents of the structure of the output, {linear_fn.out_spec}, "
                               f"got {u_spec}")
        for y, u in zip(program.outputs, flat_u):
            if y is not None and tuple(u.shape) != y.shape:
                raise RuntimeError(f"{WHO}: a cotangent of shape {tuple(u.shape)} for an output of shape {y.shape}")
        arrays = backward_pass(program, [u.data if isinstance(u, Variable) else None for u in flat_u])
        return tree_unflatten([Variable(np.array(a), requires_grad=False) for a in arrays], spec)
    transposed.program = program
    # so that it can be transposed again: itself on arrays, its inputs (the output's cotangents) and output
    transposed.on_arrays = lambda arrays: backward_pass(program, arrays)
    n = len(program.outputs)  # it is called with one argument, shaped as linear_fn's output
    transposed.in_spec, transposed.out_spec = tree_flatten((tree_unflatten([0] * n, linear_fn.out_spec),))[1], spec
    transposed.in_types = program.output_types
    return transposed


def vjp_by_transpose(func, *primals):  # step 72
    """(func(*primals), vjp_fn) as torch.func.vjp gives them, vjp_fn(u) = J^T u: func linearized (forward mode,
    its jvp rules kept), then the linear function transposed; no backward formula runs."""
    from tinypytorch.func import linearize  # (func imports the package's transforms; this module stays below)
    output, jvp_fn = linearize(func, *primals)
    return output, linear_transpose(jvp_fn, *primals)


# ----- the primitives: each records an equation when a tracer is among its arguments, and computes otherwise ----

def bind(primitive, *args, **params):
    if any(isinstance(a, LinearTracer) for a in args):
        return next(a for a in args if isinstance(a, LinearTracer)).program.record(primitive, args, params)
    return IMPLS[primitive](*args, **params)


def mul(t, c):
    return bind("mul", _broadcast_against(t, c), c)


def div(t, c):
    return bind("div", _broadcast_against(t, c), c)


def neg(t):
    return bind("neg", t)


def add(t, s):
    return bind("add", _broadcast_against(t, s), _broadcast_against(s, t))


def reduce_sum(t, axes, keepdims):
    return bind("sum", t, axes=tuple(axes), keepdims=keepdims) if axes else t


def broadcast(t, shape):
    return t if tuple(t.shape) == tuple(shape) else bind("broadcast", t, shape=tuple(shape))


def reshape(t, shape):
    return t if tuple(t.shape) == tuple(shape) else bind("reshape", t, shape=tuple(shape))


def transpose(t, perm):
    return t if tuple(perm) == tuple(range(len(perm))) else bind("transpose", t, perm=tuple(perm))


def select(mask, t):
    return bind("select", mask, _broadcast_against(t, mask))


def getitem(t, key):
    return bind("getitem", t, key=key)


def scatter_add(t, key, shape):
    return bind("scatter_add", t, key=key, shape=tuple(shape))


def cast(t, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc":
        raise not_linear(f"a cast of a tangent to {dtype}")
    return t if t.dtype == dtype else bind("cast", t, dtype=dtype)


def matmul(a, b):
    """a @ b, one of them a constant. A vector is made a matrix first (a row on the left, a column on the
    right) and the tangent broadcast over the batch dims, so that the primitive's transpose is a plain product."""
    if isinstance(a, LinearTracer) and isinstance(b, LinearTracer):
        raise not_linear("a tangent @ a tangent")
    if not isinstance(a, LinearTracer) and not isinstance(b, LinearTracer):
        return a @ b
    a, b = (x if isinstance(x, LinearTracer) else np.asarray(x) for x in (a, b))
    shape = np.matmul(_zeros(np.shape(a), _dtype(a)), _zeros(np.shape(b), _dtype(b))).shape
    a2 = reshape(a, (1, *a.shape)) if a.ndim == 1 else a
    b2 = reshape(b, (*b.shape, 1)) if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2, b2 = (broadcast(x, batch + x.shape[-2:]) if isinstance(x, LinearTracer) else x for x in (a2, b2))
    return reshape(bind("matmul", a2, b2), shape)


IMPLS = {  # the primitives on arrays
    "mul": lambda t, c: t * c,
    "div": lambda t, c: t / c,
    "neg": lambda t: -t,
    "add": lambda t, s: t + s,
    "sum": lambda t, axes, keepdims: t.sum(axis=axes, keepdims=keepdims),
    "broadcast": lambda t, shape: np.broadcast_to(t, shape),
    "reshape": lambda t, shape: t.reshape(shape),
    "transpose": lambda t, perm: t.transpose(perm),
    "matmul": lambda a, b: a @ b,
    "select": lambda mask, t: np.where(mask, t, 0).astype(t.dtype),
    "getitem": lambda t, key: t[key],
    "scatter_add": lambda t, key, shape: _scatter_add(t, key, shape),
    "cast": lambda t, dtype: t.astype(dtype),
}

SHOW = {  # each equation's right-hand side, as a line of NumPy
    "mul": lambda t, c: f"{t} * {c}",
    "div": lambda t, c: f"{t} / {c}",
    "neg": lambda t: f"-{t}",
    "add": lambda t, s: f"{t} + {s}",
    "sum": lambda t, axes, keepdims: f"{t}.sum({axes}{', keepdims' if keepdims else ''})",
    "broadcast": lambda t, shape: f"broadcast({t}, {shape})",
    "reshape": lambda t, shape: f"{t}.reshape({shape})",
    "transpose": lambda t, perm: f"{t}.transpose({perm})",
    "matmul": lambda a, b: f"{a} @ {b}",
    "select": lambda mask, t: f"where({mask}, {t}, 0)",
    "getitem": lambda t, key: f"{t}[{_key_text(key)}]",
    "scatter_add": lambda t, key, shape: f"scatter_add({t}, [{_key_text(key)}], {shape})",
    "cast": lambda t, dtype: f"{t}.astype({dtype})",
}


# ----- the transpose rules: (cotangent of the output, the equation's arguments) -> each argument's cotangent ----

def transpose_mul(ct, t, c):  # t * c: u * c, the same constant
    return [mul(ct, c), None]


def transpose_div(ct, t, c):
    return [div(ct, c), None]


def transpose_neg(ct, t):
    return [neg(ct)]


def transpose_add(ct, t, s):  # fan-out: both operands get the whole cotangent
    return [ct, ct]


def transpose_sum(ct, t, axes, keepdims):  # sum -> broadcast back over the summed axes
    kept = tuple(1 if i in axes else n for i, n in enumerate(t.shape))
    return [broadcast(reshape(ct, kept), t.shape)]


def transpose_broadcast(ct, t, shape):  # broadcast -> sum over the axes it made or stretched
    lead = len(shape) - t.ndim
    stretched = tuple(lead + i for i, n in enumerate(t.shape) if n == 1 and shape[lead + i] != 1)
    return [reshape(reduce_sum(ct, tuple(range(lead)) + stretched, True), t.shape)]


def transpose_reshape(ct, t, shape):
    return [reshape(ct, t.shape)]


def transpose_transpose(ct, t, perm):
    return [transpose(ct, tuple(np.argsort(perm)))]


def transpose_matmul(ct, a, b):  # t @ c: u @ c^T;  c @ t: c^T @ u
    if isinstance(a, LinearTracer):
        return [matmul(ct, np.swapaxes(b, -1, -2)), None]
    return [None, matmul(np.swapaxes(a, -1, -2), ct)]


def transpose_select(ct, mask, t):
    return [None, select(mask, ct)]


def transpose_getitem(ct, t, key):  # t[key] -> zeros shaped as t, the cotangent added at key
    return [scatter_add(ct, key, t.shape)]


def transpose_scatter_add(ct, t, key, shape):
    return [getitem(ct, key)]


def transpose_cast(ct, t, dtype):
    return [cast(ct, t.dtype)]


TRANSPOSE = {"mul": transpose_mul, "div": transpose_div, "neg": transpose_neg, "add": transpose_add,
             "sum": transpose_sum, "broadcast": transpose_broadcast, "reshape": transpose_reshape,
             "transpose": transpose_transpose, "matmul": transpose_matmul, "select": transpose_select,
             "getitem": transpose_getitem, "scatter_add": transpose_scatter_add, "cast": transpose_cast}


# ----- what NumPy's operators and functions do to a tracer ----------------------------------------------------

def not_linear(what):
    return RuntimeError(f"{WHO}: {what} is not linear in the tangent, so it has no transpose (a jvp rule must "
                        "be linear in its tangents)")


def _mul_either(a, b):
    if isinstance(a, LinearTracer) and isinstance(b, LinearTracer):
        raise not_linear("a tangent times a tangent")
    return mul(a, b) if isinstance(a, LinearTracer) else mul(b, a)


def _divide(a, b):
    if isinstance(b, LinearTracer):
        raise not_linear("a division by a tangent")
    return div(a, b)


def _add_either(a, b):
    if isinstance(a, LinearTracer) and isinstance(b, LinearTracer):
        return add(a, b)
    t, c = (a, b) if isinstance(a, LinearTracer) else (b, a)
    if np.any(c != 0):
        raise not_linear("a tangent plus a non-zero constant (affine)")
    shape, dtype = np.broadcast_shapes(t.shape, np.shape(c)), np.result_type(_zeros((), t.dtype), c)
    return cast(broadcast(t, shape), dtype)  # a zero constant adds nothing: its shape and dtype only


def _subtract(a, b):
    return _add_either(a, neg(b) if isinstance(b, LinearTracer) else -np.asarray(b))


def _where(condition, x, y):
    if isinstance(condition, LinearTracer):
        raise not_linear("a tangent as where's condition")
    parts = []
    for mask, branch in ((condition, x), (np.logical_not(condition), y)):
        if isinstance(branch, LinearTracer):
            parts.append(select(mask, branch))
        elif np.any(branch != 0):
            raise not_linear("where with a non-zero constant branch (affine)")
    if len(parts) == 1:  # the shape and dtype of where's result
        other = y if isinstance(x, LinearTracer) else x
        shape = np.broadcast_shapes(np.shape(condition), parts[0].shape, np.shape(other))
        return cast(broadcast(parts[0], shape), np.result_type(_zeros((), parts[0].dtype), other))
    return add(*parts)


def _concatenate(arrays, axis=0, **kwargs):
    """np.concatenate of tangents (and zero constants): each tangent placed in the result by scatter_add."""
    pieces = list(arrays)
    result = np.concatenate([_zeros(a.shape, _dtype(a)) for a in pieces], axis)
    axis, start, total = axis % result.ndim, 0, None
    for a in pieces:
        n = a.shape[axis]
        if isinstance(a, LinearTracer):
            placed = scatter_add(a, (slice(None),) * axis + (slice(start, start + n),), result.shape)
            total = placed if total is None else add(total, placed)
        elif np.any(a != 0):
            raise not_linear("a tangent joined with a non-zero constant (affine)")
        start += n
    return cast(total, result.dtype)


def _stack(arrays, axis=0, **kwargs):
    pieces = list(arrays)
    axis = axis % (len(pieces[0].shape) + 1)
    return _concatenate([_np_expand_dims(a, axis) if isinstance(a, LinearTracer) else np.expand_dims(a, axis)
                         for a in pieces], axis)


def _np_sum(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    return a.sum(axis=axis, keepdims=keepdims, dtype=dtype)


def _np_reshape(a, shape=None, order="C", **kwargs):
    return a.reshape(shape if shape is not None else kwargs["newshape"])


def _np_transpose(a, axes=None):
    return a.transpose() if axes is None else a.transpose(axes)


def _np_swapaxes(a, axis1, axis2):
    perm = list(range(a.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return a.transpose(perm)


def _np_moveaxis(a, source, destination):
    source = [int(s) % a.ndim for s in np.atleast_1d(source)]
    destination = [int(d) % a.ndim for d in np.atleast_1d(destination)]
    order = [n for n in range(a.ndim) if n not in source]  # as NumPy's moveaxis
    for d, s in sorted(zip(destination, source)):
        order.insert(d, s)
    return a.transpose(order)


def _np_expand_dims(a, axis):
    return reshape(a, np.expand_dims(_zeros(a.shape, a.dtype), axis).shape)


def _np_squeeze(a, axis=None):
    return reshape(a, np.squeeze(_zeros(a.shape, a.dtype), axis).shape)


UFUNCS = {np.multiply: _mul_either, np.divide: _divide, np.add: _add_either, np.subtract: _subtract,
          np.negative: lambda t: neg(t), np.positive: lambda t: t, np.matmul: matmul}

FUNCTIONS = {np.where: _where, np.sum: _np_sum, np.broadcast_to: lambda a, shape, subok=False: broadcast(a, shape),
             np.reshape: _np_reshape, np.transpose: _np_transpose, np.swapaxes: _np_swapaxes,
             np.moveaxis: _np_moveaxis, np.expand_dims: _np_expand_dims, np.squeeze: _np_squeeze,
             np.matmul: matmul, np.negative: lambda t: neg(t), np.multiply: _mul_either,
             np.zeros_like: lambda a, dtype=None, **kwargs: np.zeros(a.shape, dtype or a.dtype),
             np.ascontiguousarray: lambda a, dtype=None: a if dtype is None else cast(a, dtype),
             np.copy: lambda a, **kwargs: a, np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim,
             np.concatenate: _concatenate, np.stack: _stack}


def _zeros(shape, dtype):
    """Zeros of a shape and dtype that hold one element: for working out a result's shape and dtype."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _dtype(a):
    return a.dtype if isinstance(a, LinearTracer | np.ndarray | np.generic) else np.asarray(a).dtype


def _type(a):
    return f"{_dtype(a)}[{', '.join(map(str, np.shape(a) if not isinstance(a, LinearTracer) else a.shape))}]"


def _axes(axis, ndim):
    axes = range(ndim) if axis is None else (axis,) if isinstance(axis, numbers.Integral) else axis
    return tuple(sorted(int(a) % ndim if ndim else int(a) for a in axes))


def _broadcast_against(t, other):
    """t (a tracer) broadcast to the shape t and other broadcast to, so that an element-wise primitive's tracer
    has its output's shape; a constant as it is."""
    if not isinstance(t, LinearTracer):
        return t
    return broadcast(t, np.broadcast_shapes(t.shape, np.shape(other)))


def _scatter_add(t, key, shape):
    z = np.zeros(shape, dtype=t.dtype)
    np.add.at(z, key, t)
    return z


def _constant_output(y):
    """An output of the traced function that is not a tracer: a zero (it does not depend on the inputs)."""
    if isinstance(y, np.ndarray) and np.any(y != 0):
        raise not_linear("an output that is a non-zero constant (affine)")
    return None


def _key_text(key):
    def one(k):
        if isinstance(k, slice):
            return ":".join("" if v is None else str(v) for v in (k.start, k.stop, k.step)).rstrip(":") or ":"
        if isinstance(k, np.ndarray):
            return f"array{list(k.shape)}"
        return "..." if k is Ellipsis else "None" if k is None else str(k)
    return ", ".join(map(one, key if isinstance(key, tuple) else (key,)))
