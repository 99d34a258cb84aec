"""gradcheck and gradgradcheck (step 40): backward's Jacobian against a numerical one, element by element.

As PyTorch's `torch.autograd.gradcheck`: for each input that requires grad and each output,
the Jacobian J[i, j] = d output[j] / d input[i] is computed twice. Numerically, by central
differences (f(x + eps) - f(x - eps)) / 2 eps, one input element at a time; analytically, by
one backward pass per output element (autograd.grad with a one-hot gradient). They must
agree within |analytical - numerical| <= atol + rtol |numerical| for every element.
"""
import warnings

import numpy as np

from tinypytorch.autograd import forward_ad
from tinypytorch.autograd.gradients import grad
from tinypytorch.core import Variable, as_variable
from tinypytorch.grad_mode import enable_grad
from tinypytorch.cuda import as_numpy, get_array_module


class GradcheckError(RuntimeError):
    """Raised by gradcheck when the Jacobians differ (PyTorch's torch.autograd.gradcheck.GradcheckError)."""


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _checked_inputs(inputs, op):
    inputs = _as_tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, Variable):
            raise TypeError(f"{op}: input {i} must be a Variable, got {type(x).__name__}")
    if not any(x.requires_grad for x in inputs):
        raise ValueError(f"{op} expects at least one input to require gradient, but none of them have "
                         "requires_grad=True.")
    for i, x in enumerate(inputs):
        if x.requires_grad and x.dtype != np.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point "
                          f"({x.dtype}). This check will likely fail if all the inputs are not of double "
                          "precision floating point.", UserWarning, stacklevel=3)
    return inputs


def _outputs(fn, inputs):
    return tuple(as_variable(y, "gradcheck") for y in _as_tuple(fn(*inputs)))


def numerical_jacobian(fn, inputs, eps):
    """{(i, j): the numerical Jacobian of output j with respect to input i}, shape (input size, output size)."""
    # fn runs in the caller's grad mode, as in PyTorch: a fn that registers a hook or calls
    # retain_grad on an intermediate needs it to require grad (the graphs are simply dropped)
    jacobians = {}
    sizes = [y.numel() for y in _outputs(fn, inputs)]
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            continue
        columns = [np.zeros((x.numel(), n)) for n in sizes]
        flat = x.data.reshape(-1)  # a view: perturbing it perturbs x (restored exactly after)
        for k in range(x.numel()):
            original = flat[k].item()
            flat[k] = original + eps
            plus = [as_numpy(y.data).reshape(-1).astype(np.float64) for y in _outputs(fn, inputs)]
            flat[k] = original - eps
            minus = [as_numpy(y.data).reshape(-1).astype(np.float64) for y in _outputs(fn, inputs)]
            flat[k] = original
            for j, (a, b) in enumerate(zip(plus, minus)):
                columns[j][k] = (a - b) / (2 * eps)
        for j, column in enumerate(columns):
            jacobians[(i, j)] = column
    return jacobians


def analytical_jacobian(fn, inputs):
    """{(i, j): the Jacobian from backward}: row k of output j's one-hot gradient, one pass per element."""
    wrt = [x for x in inputs if x.requires_grad]
    outputs = _outputs(fn, inputs)
    jacobians = {(i, j): np.zeros((x.numel(), y.numel())) for i, x in enumerate(inputs) if x.requires_grad
                 for j, y in enumerate(outputs)}
    for j, y in enumerate(outputs):
        if not y.requires_grad:  # the output does not depend on any input: its Jacobians are zero
            continue
        xp = get_array_module(y.data)
        for k in range(y.numel()):
            seed = xp.zeros(y.numel(), dtype=y.dtype)
            seed[k] = 1
            grads = grad(y, wrt, grad_outputs=seed.reshape(y.shape), retain_graph=True, allow_unused=True)
            for x, g in zip(wrt, grads):
                if g is not None:
                    jacobians[(_position(inputs, x), j)][:, k] = as_numpy(g.data).reshape(-1)
    return jacobians


def _position(inputs, x):
    """The index of x in inputs, by identity (`==` on Variables compares values, element-wise)."""
    return next(i for i, candidate in enumerate(inputs) if candidate is x)


def zero_gradient_gives_zero(fn, inputs):
    """Whether backward, given zero gradients for the outputs, returns zero gradients (PyTorch checks this too).

    A backward that forgets to multiply by its incoming gradient passes the Jacobian test when
    every output has one element (the one-hot seed is 1); a zero seed exposes it.
    """
    wrt = [x for x in inputs if x.requires_grad]
    outputs = [y for y in _outputs(fn, inputs) if y.requires_grad]
    if not outputs:
        return True
    zeros = [get_array_module(y.data).zeros_like(y.data) for y in outputs]
    grads = grad(outputs, wrt, grad_outputs=zeros, allow_unused=True)
    return all(g is None or not get_array_module(g.data).any(g.data) for g in grads)


def forward_jacobian(fn, inputs):  # step 63
    """{(i, j): the Jacobian from forward mode}: row k from one forward pass with the one-hot tangent e_k."""
    jacobians = {}
    for i, x in enumerate(inputs):
        if not x.requires_grad:
            continue
        xp = get_array_module(x.data)
        for k in range(x.numel()):
            tangent = xp.zeros(x.numel(), dtype=x.data.dtype)
            tangent[k] = 1
            with forward_ad.dual_level():
                duals = [forward_ad.make_dual(a, tangent.reshape(a.shape)) if a is x else a for a in inputs]
                for j, y in enumerate(_outputs(fn, duals)):
                    t = forward_ad.unpack_dual(y).tangent
                    row = jacobians.setdefault((i, j), np.zeros((x.numel(), y.numel())))[k]
                    row[:] = 0 if t is None else as_numpy(t.data).reshape(-1)
    return jacobians


def jacobians_agree(numerical, analytical, atol, rtol, raise_exception, mode=""):
    """True when the Jacobians agree; else GradcheckError showing both (or False)."""
    for (i, j), expected in numerical.items():
        got = analytical[(i, j)]
        if not np.allclose(got, expected, rtol=rtol, atol=atol):
            if not raise_exception:
                return False
            with np.printoptions(precision=4, suppress=True):
                raise GradcheckError(f"Jacobian {mode}mismatch for output {j} with respect to input {i},\n"
                                     f"numerical:\n{expected}\nanalytical:\n{got}\n")
    return True


def gradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, check_forward_ad=False,
              check_backward_ad=True):
    """True when backward's Jacobians of `fn(*inputs)` equal the numerical ones within atol + rtol |numerical|.

    fn: takes the inputs (Variables) and returns a Variable or a tuple of Variables.
    inputs: a Variable or a tuple of them; those that require grad are checked (float64
        expected: with float32 the rounding of the central difference exceeds the tolerance).
    raise_exception: on a mismatch raise GradcheckError showing both Jacobians (else return False).
    check_forward_ad: also forward mode's Jacobians (step 63), one forward pass per input element;
        check_backward_ad=False leaves backward's out, as in PyTorch.
    """
    inputs = _checked_inputs(inputs, "gradcheck")
    numerical = numerical_jacobian(fn, inputs, eps)
    if check_forward_ad:  # step 63
        forward = forward_jacobian(fn, inputs)
        if not jacobians_agree(numerical, forward, atol, rtol, raise_exception, "computed with forward mode "):
            return False
    if not check_backward_ad:  # step 63
        return True
    if not jacobians_agree(numerical, analytical_jacobian(fn, inputs), atol, rtol, raise_exception):
        return False
    if not zero_gradient_gives_zero(fn, inputs):
        if not raise_exception:
            return False
        raise GradcheckError("backward not multiplied by grad_output: a zero gradient for the outputs gave "
                             "nonzero gradients for the inputs")
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
                  seed=0):
    """gradcheck of the gradients: second derivatives from backward of backward against numerical ones.

    The function checked maps (inputs, grad_outputs) to the gradients of fn's outputs, seeded
    with grad_outputs, with respect to the inputs that require grad: its Jacobian holds every
    second derivative. grad_outputs default to random values, as in PyTorch, but drawn from a generator
    seeded with `seed`, so that every call checks the same ones (PyTorch draws from its global generator).
    """
    inputs = _checked_inputs(inputs, "gradgradcheck")
    outputs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Variable(get_array_module(y.data).asarray(rng.standard_normal(y.shape)).astype(y.dtype))
                             for y in outputs)
    grad_outputs = _as_tuple(grad_outputs)
    count = len(inputs)

    def first_derivatives(*values):
        xs, gs = values[:count], values[count:]
        wrt = [x for x in xs if x.requires_grad]
        with enable_grad():  # the gradients need fn's graph, even when the caller is in no_grad
            ys = _outputs(fn, xs)
            grads = grad(ys, wrt, grad_outputs=list(gs), create_graph=True, allow_unused=True)
        return tuple(g if g is not None else Variable(get_array_module(x.data).zeros_like(x.data),
                                                      requires_grad=False) for x, g in zip(wrt, grads))

    return gradcheck(first_derivatives, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
