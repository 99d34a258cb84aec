"""The core of tinypytorch: configuration, `Variable`, `Function` and the arithmetic operators.

This is the framework of steps 01-22 gathered in one module. Each piece names
the step that introduced it, so a reader can go back to where it is explained.
"""
import contextlib
import heapq
import itertools
import numbers
import weakref

import numpy as np

from tinypytorch import cuda


# step 18: one switch decides whether operations record the graph
class Config:
    enable_backprop = True


@contextlib.contextmanager
def using_config(name, value):
    """Set `Config.<name>` to `value` inside a `with` block; the old value returns even on error."""
    # step 18: with a misspelt name, setattr would silently create a new option
    known = [option for option in vars(Config) if not option.startswith("_")]
    if name not in known:
        raise ValueError(f"using_config: unknown option {name!r}; known options: {', '.join(known)}")
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:
        setattr(Config, name, old_value)


def no_grad():
    """Context manager: operations inside it record no graph (step 18)."""
    return using_config("enable_backprop", False)


class Variable:
    """A box around an array that remembers the function that created it."""

    # step 21: ndarray <op> Variable must call our reflected operator, not ndarray's
    __array_priority__ = 200

    def __init__(self, data, name=None):
        # step 09: refuse anything that is not an array, early and by name
        if data is not None and not isinstance(data, cuda.array_types):
            raise TypeError(f"Variable data must be an ndarray (numpy or cupy) or None, got {type(data).__name__}")
        self.data = data
        self.name = name  # step 19
        self.grad = None  # step 06: an array once backward has reached this variable
        self.creator = None  # step 07: the Function that produced this variable
        self.generation = 0  # step 16: 1 + the creator's generation

    # step 19: a Variable answers the questions one asks of an array
    @property
    def shape(self):
        return self.data.shape

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def dtype(self):
        return self.data.dtype

    def __len__(self):
        if self.data.ndim == 0:
            raise TypeError("len() of a 0-d Variable")
        return len(self.data)

    def __repr__(self):
        # step 19: fixed precision and no address, so printed output is the same on every run
        if self.data is None:
            return "variable(None)"
        text = np.array2string(cuda.as_numpy(self.data), precision=4, floatmode="fixed", separator=", ",
                               prefix="variable(")
        name = "" if self.name is None else f", name={self.name!r}"
        return f"variable({text}{name})"

    # steps 20-22: operators. A reflected method (`2 + x` arrives as x.__radd__(2)) passes
    # the operands on in their written order, so the graph records 2 + x as Add(2, x).
    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):
        return add(other, self)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(other, self)

    def __neg__(self):
        return neg(self)

    def __sub__(self, other):
        return sub(self, other)

    def __rsub__(self, other):
        return rsub(self, other)

    def __truediv__(self, other):
        return div(self, other)

    def __rtruediv__(self, other):
        return rdiv(self, other)

    def __pow__(self, c):
        return pow(self, c)

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1  # step 16

    def cleargrad(self):
        self.grad = None  # step 13: start a new computation from zero

    def backward(self, retain_grad=False):
        """Fill `.grad` of every variable this one depends on, by the chain rule in reverse."""
        if self.grad is None:
            # step 09: dy/dy = 1, shaped like y and on y's device
            self.grad = cuda.get_array_module(self.data).ones_like(self.data)

        # step 08: a loop over pending functions, not recursion, so graph depth is unlimited.
        # step 16: the pending function of highest generation runs first, so a variable has
        # every contribution to its grad before its own creator passes it on. Step 16 kept
        # a list and re-sorted it after each addition; a heap gives the same order at
        # O(log n) per push and pop. Ties go to the function added last, as list.pop()
        # after a stable sort did; the counter also keeps heapq from comparing Functions.
        pending, seen, order = [], set(), itertools.count()

        def add_func(f):
            if f not in seen:  # step 16: each function runs once, however many outputs it feeds
                seen.add(f)
                heapq.heappush(pending, (-f.generation, -next(order), f))

        if self.creator is not None:
            add_func(self.creator)
        while pending:
            f = heapq.heappop(pending)[-1]
            gys = [output().grad for output in f.outputs]  # step 17: outputs are weak references
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs, strict=True):  # step 12: one gradient per input
                # step 14: a variable used twice sums its gradients. A new array, never `+=`:
                # Add.backward hands the same array to both inputs, and `+=` would change both.
                # as_array: arithmetic on 0-d arrays returns NumPy scalars; grads stay arrays.
                x.grad = as_array(gx if x.grad is None else x.grad + gx)
                if x.creator is not None:
                    add_func(x.creator)
            if not retain_grad:
                for y in f.outputs:
                    y().grad = None  # step 18: only the leaves keep their gradients


# step 21: the numbers an operation accepts as operands (bool is an int)
scalar_types = (int, float, complex, np.number)


def as_array(x, xp=np):
    """A Python or NumPy number becomes a 0-d array of module `xp`; anything else is returned as is (step 09)."""
    if isinstance(x, scalar_types):
        return xp.array(x)
    return x


def as_variable(obj, op="as_variable", xp=np):
    """Return `obj` as a Variable; `op` names the operation in the error message (step 21)."""
    if isinstance(obj, Variable):
        return obj
    if isinstance(obj, scalar_types):
        return Variable(as_array(obj, xp))
    if isinstance(obj, cuda.array_types):
        return Variable(obj)
    raise TypeError(f"{op}: unsupported operand type {type(obj).__name__}")


class Function:
    """Base class of every operation: subclasses define `forward` and `backward` on arrays."""

    def __call__(self, *inputs):
        op = type(self).__name__.lower()
        # step 21: numbers and arrays are welcome; step 23: a number goes to the device
        # (numpy or cupy) of the other inputs, since cupy will not mix with numpy arrays
        xp = cuda.get_array_module(*inputs)
        inputs = tuple(as_variable(x, op, xp) for x in inputs)
        xs = [x.data for x in inputs]
        ys = self.forward(*xs)  # step 11: any number of inputs and outputs
        if not isinstance(ys, tuple):
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]  # step 09: a 0-d result may come back a scalar
        if Config.enable_backprop:  # step 18: record the graph only when it will be used
            self.generation = max(x.generation for x in inputs)  # step 16
            for output in outputs:
                output.set_creator(self)  # step 07
            self.inputs = inputs
            self.outputs = [weakref.ref(output) for output in outputs]  # step 17: no reference cycle
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def backward(self, *gys):
        raise NotImplementedError(f"{type(self).__name__}.backward is not implemented")


# ----- arithmetic (steps 11-22) -------------------------------------------------------
# Until broadcasting arrives in stage 3, a binary operation takes two arrays of one shape,
# or a 0-d array with an array of any shape (every element meets the same number).

def _check_shapes(op, x0, x1):
    # step 22: fail here, naming the operation, rather than deep inside NumPy
    if x0.shape != x1.shape and x0.ndim and x1.ndim:
        raise ValueError(f"{op}: shapes {x0.shape} and {x1.shape} do not match (broadcasting comes in stage 3)")


def sum_to(gx, shape):
    """Sum the gradient gx down to `shape` (step 22; stage 3 generalises it to every broadcast).

    Until then only one case arises: a 0-d input used by every element of an array. Its
    gradient is the sum of the element-wise gradients and keeps the input's shape ().
    """
    if gx.shape == shape:
        return gx
    return as_array(gx.sum())  # NumPy's sum returns a scalar, not a 0-d array


class Add(Function):  # step 11
    def forward(self, x0, x1):
        _check_shapes("add", x0, x1)
        return x0 + x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return sum_to(gy, x0.shape), sum_to(gy, x1.shape)  # step 12: dy/dx0 = dy/dx1 = 1


class Mul(Function):  # step 20
    def forward(self, x0, x1):
        _check_shapes("mul", x0, x1)
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return sum_to(gy * x1.data, x0.shape), sum_to(gy * x0.data, x1.shape)


class Neg(Function):  # step 22
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


class Sub(Function):  # step 22
    def forward(self, x0, x1):
        _check_shapes("sub", x0, x1)
        return x0 - x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return sum_to(gy, x0.shape), sum_to(-gy, x1.shape)


class Div(Function):  # step 22
    def forward(self, x0, x1):
        _check_shapes("div", x0, x1)
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = gy / x1.data
        gx1 = -gy * x0.data / x1.data ** 2  # d(x0/x1)/dx1 = -x0 / x1^2
        return sum_to(gx0, x0.shape), sum_to(gx1, x1.shape)


class Pow(Function):  # step 22
    """x ** c for a constant number c (an exponent that is a Variable needs log, not here yet)."""

    def __init__(self, c):
        if not isinstance(c, numbers.Real):
            raise TypeError(f"pow: the exponent must be a constant number, got {type(c).__name__}")
        self.c = c

    def forward(self, x):
        return x ** self.c

    def backward(self, gy):
        x, c = self.inputs[0].data, self.c
        if c == 0:  # x**0 is constant; the formula would give 0 * 0**-1 = nan at x = 0
            return cuda.get_array_module(gy).zeros_like(gy)
        return c * x ** (c - 1) * gy


def add(x0, x1):
    return Add()(x0, x1)


def mul(x0, x1):
    return Mul()(x0, x1)


def neg(x):
    return Neg()(x)


def sub(x0, x1):
    return Sub()(x0, x1)


def rsub(x0, x1):
    return Sub()(x1, x0)  # step 22: `2 - x` arrives as rsub(x, 2); swap back to 2 - x


def div(x0, x1):
    return Div()(x0, x1)


def rdiv(x0, x1):
    return Div()(x1, x0)  # step 22: `2 / x` arrives as rdiv(x, 2); swap back to 2 / x


def pow(x, c):  # noqa: A001 (the name PyTorch and DeZero use)
    return Pow(c)(x)
