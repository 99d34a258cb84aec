"""gradcheck and gradgradcheck (step 40): backward's Jacobian against a numerical one, element by element.

As PyTorch's `torch.autograd.gradcheck`: for each input that requires grad and each output,
the Jacobian J[i, j] = d output[j] / d input[i] is computed twice. Numerically, by central
differences (f(x + eps) - f(x - eps)) / 2 eps, one input element at a time; analytically, by
one backward pass per output element (autograd.grad with a one-hot gradient). They must
agree within |analytical - numerical| <= atol + rtol |numerical| for every element.

PyTorch's whole signature is accepted, and its checks run in its order: the Jacobians (backward's
computed twice, which must agree within nondet_tol), forward mode's (check_forward_ad), backward with
zero gradients for the outputs (which must give zeros of the inputs' dtypes and sizes), and backward
with no gradient at all for the outputs (check_undefined_grad). fast_mode compares random projections
v^T J u instead of whole Jacobians, as PyTorch's fast mode does. check_batched_grad (and
check_batched_forward_grad) run backward (forward mode) under vmap on a batch of random gradients (tangents) and
compare it with one pass per gradient (step 69).
"""
import warnings

import numpy as np

from tinypytorch.autograd import forward_ad
from tinypytorch.autograd.gradients import grad
from tinypytorch.core import Function, Variable, as_variable
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


def analytical_jacobian(fn, inputs, *, check_grad_dtypes=False):
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
                    if check_grad_dtypes and g.dtype != x.dtype:
                        raise GradcheckError("Gradient has dtype mismatch")
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
    return all(g is None or not get_array_module(g.data).any(g.data) for _, g in _zero_seeded(fn, inputs))


def _zero_seeded(fn, inputs):
    """(input, its gradient) for each input that requires grad, from one backward pass seeded with zeros."""
    wrt = [x for x in inputs if x.requires_grad]
    outputs = [y for y in _outputs(fn, inputs) if y.requires_grad]
    if not outputs:
        return []
    zeros = [get_array_module(y.data).zeros_like(y.data) for y in outputs]
    return list(zip(wrt, grad(outputs, wrt, grad_outputs=zeros, allow_unused=True)))


def check_multiplied_by_grad_output(fn, inputs, masked=None):
    """PyTorch's check of backward with zero gradients for the outputs: zeros back (close to zero if masked), of
    each input's dtype and size; else GradcheckError."""
    for x, g in _zero_seeded(fn, inputs):
        if g is None:
            continue
        xp = get_array_module(g.data)
        if not (xp.allclose(g.data, 0) if masked else not xp.any(g.data)):
            raise GradcheckError("backward not multiplied by grad_output")
        if g.dtype != x.dtype:
            raise GradcheckError("grad is incorrect type")
        if g.shape != x.shape:
            raise GradcheckError("grad is incorrect size")


class UndefinedGrad(Function):
    """The identity, whose backward sends no gradient (None) on: what the nodes behind it get with
    check_undefined_grad (PyTorch's UndefinedGrad)."""

    def forward(self, x):
        return x.copy()

    def backward(self, gy):
        return None


def check_undefined_gradients(fn, inputs):
    """PyTorch's check_undefined_grad: backward must cope with outputs that get no gradient at all (None, as when
    an output is not used), first all of them, then each one alone if there are several; and give None or zeros.

    The engine passes None on through a node none of whose outputs got a gradient, as PyTorch's does; a node with
    several outputs gets None for each output that got none, and its backward must treat it as zero.
    """
    wrt = [x for x in inputs if x.requires_grad]
    count = len([y for y in _outputs(fn, inputs) if y.requires_grad])
    # which outputs get no gradient: all, then (with several) each one alone
    cases = [set(range(count))] + ([{k} for k in range(count)] if count > 1 else [])
    for undefined in cases:
        outputs = [y for y in _outputs(fn, inputs) if y.requires_grad]
        outputs = [UndefinedGrad()(y) if k in undefined else y for k, y in enumerate(outputs)]
        zeros = [get_array_module(y.data).zeros_like(y.data) for y in outputs]
        try:
            grads = grad(outputs, wrt, grad_outputs=zeros, allow_unused=True)
        except RuntimeError as error:
            raise GradcheckError("Expected backward function to handle undefined output grads: an output that "
                                 "gets no gradient passes None to its node's backward, which must treat it as "
                                 f"zero ({type(error).__name__}: {error})") from error
        if any(g is not None and get_array_module(g.data).any(g.data) for g in grads):
            raise GradcheckError("Expected all input grads to be undefined or zero when all output grads are "
                                 "undefined or zero.")


def check_undefined_tangents(fn, inputs):  # step 64
    """check_undefined_grad in forward mode: for each input, a zero tangent and no tangent must give the same
    tangents of the outputs (where both have one), the other inputs carrying the same random ones."""
    rng = np.random.default_rng(0)
    tangents = {i: get_array_module(x.data).asarray(rng.random(x.shape), dtype=x.dtype)
                for i, x in enumerate(inputs) if x.requires_grad}
    for i in tangents:
        results = []
        for given in (get_array_module(inputs[i].data).zeros_like(inputs[i].data), None):
            with forward_ad.dual_level():
                duals = [forward_ad.make_dual(x, given if k == i else tangents[k])
                         if k in tangents and (k != i or given is not None) else x for k, x in enumerate(inputs)]
                results.append([forward_ad.unpack_dual(y).tangent for y in _outputs(fn, duals)])
        for k, (t1, t2) in enumerate(zip(*results)):
            if t1 is not None and t2 is not None and not np.allclose(as_numpy(t1.data), as_numpy(t2.data)):
                raise GradcheckError(f"Mismatch in tangent values for output with index: {k} when input {i} has "
                                     "an undefined tangent value.")


def forward_jacobian(fn, inputs):  # step 64
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


def reentrant_jacobian(fn, inputs, nondet_tol, check_grad_dtypes):
    """analytical_jacobian, computed twice: the two must agree within nondet_tol (PyTorch's reentrancy check)."""
    first = analytical_jacobian(fn, inputs, check_grad_dtypes=check_grad_dtypes)
    second = analytical_jacobian(fn, inputs)
    if any(np.abs(first[key] - second[key]).max(initial=0) > nondet_tol for key in first):
        raise GradcheckError(_not_reentrant(nondet_tol))
    return first


def _not_reentrant(nondet_tol):
    return ("Backward is not reentrant, i.e., running backward with same input and grad_output multiple times "
            f"gives different values, although analytical gradient matches numerical gradient. The tolerance for "
            f"nondeterminism was {nondet_tol}.")


# ----- fast_mode: v^T J u for random unit vectors u (one per input) and v (one per output) ------------------------

def _unit_vectors(like, rng):
    """A random vector of non-negative numbers and norm 1 for each of `like` (Variables), as PyTorch's fast mode."""
    vectors = []
    for a in like:
        v = rng.random(a.numel())
        vectors.append(v / np.linalg.norm(v) if v.size else v)
    return vectors


def _directional_derivatives(fn, inputs, i, u, eps):
    """J u for input i, by a central difference along u: (f(x + eps u) - f(x - eps u)) / 2 eps, per output."""
    x = inputs[i]
    flat = x.data.reshape(-1)  # a view: perturbing it perturbs x
    original = flat.copy()
    step = get_array_module(x.data).asarray(eps * u, dtype=x.dtype)
    flat[...] = original + step
    plus = [as_numpy(y.data).reshape(-1).astype(np.float64) for y in _outputs(fn, inputs)]
    flat[...] = original - step
    minus = [as_numpy(y.data).reshape(-1).astype(np.float64) for y in _outputs(fn, inputs)]
    flat[...] = original
    return [(a - b) / (2 * eps) for a, b in zip(plus, minus)]


def _vector_jacobian_products(fn, inputs, vs, check_grad_dtypes):
    """{(i, j): v_j^T J_ij}, one backward pass per output seeded with v_j."""
    wrt = [x for x in inputs if x.requires_grad]
    outputs = _outputs(fn, inputs)
    products = {(i, j): np.zeros(x.numel()) for i, x in enumerate(inputs) if x.requires_grad
                for j in range(len(outputs))}
    for j, (y, v) in enumerate(zip(outputs, vs)):
        if not y.requires_grad:
            continue
        seed = get_array_module(y.data).asarray(v.reshape(y.shape), dtype=y.dtype)
        for x, g in zip(wrt, grad(y, wrt, grad_outputs=seed, retain_graph=True, allow_unused=True)):
            if g is not None:
                if check_grad_dtypes and g.dtype != x.dtype:
                    raise GradcheckError("Gradient has dtype mismatch")
                products[(_position(inputs, x), j)] = as_numpy(g.data).reshape(-1).astype(np.float64)
    return products


def _jacobian_vector_products(fn, inputs, i, u):
    """J u for input i, by one forward pass with the tangent u (forward mode), per output."""
    x = inputs[i]
    tangent = get_array_module(x.data).asarray(u.reshape(x.shape), dtype=x.dtype)
    products = []
    with forward_ad.dual_level():
        for y in _outputs(fn, [forward_ad.make_dual(a, tangent) if a is x else a for a in inputs]):
            t = forward_ad.unpack_dual(y).tangent
            products.append(np.zeros(y.numel()) if t is None else as_numpy(t.data).reshape(-1).astype(np.float64))
    return products


def check_projections(fn, inputs, eps, atol, rtol, nondet_tol, check_grad_dtypes, forward=False):
    """fast_mode: v_j^T J_ij u_i, numerically (a central difference along u_i) and by backward (v_j^T J_ij, from one
    pass seeded with v_j, dotted with u_i); with forward, J_ij u_i by forward mode against the numerical one. The
    tolerance atol is scaled by sum(u_i) sum(v_j), as PyTorch's. The vectors come from a generator of their own,
    seeded, so that every call checks the same ones."""
    rng = np.random.default_rng(0)
    checked = [i for i, x in enumerate(inputs) if x.requires_grad]
    us = dict(zip(checked, _unit_vectors([inputs[i] for i in checked], rng)))
    vs = _unit_vectors(_outputs(fn, inputs), rng)
    if not forward:
        products = _vector_jacobian_products(fn, inputs, vs, check_grad_dtypes)
        again = _vector_jacobian_products(fn, inputs, vs, False)
        if any(np.abs(products[key] - again[key]).max(initial=0) > nondet_tol for key in products):
            raise GradcheckError(_not_reentrant(nondet_tol))
    for i in checked:
        numerical = _directional_derivatives(fn, inputs, i, us[i], eps)
        analytical = _jacobian_vector_products(fn, inputs, i, us[i]) if forward else None
        for j, Ju in enumerate(numerical):
            if forward:
                expected, got, scaled_atol = Ju, analytical[j], atol * us[i].sum()
            else:
                expected, got = vs[j] @ Ju, products[(i, j)] @ us[i]
                scaled_atol = atol * us[i].sum() * vs[j].sum()
            if not np.allclose(got, expected, rtol=rtol, atol=scaled_atol):
                raise GradcheckError(_fast_mismatch(fn, inputs, i, j, expected, got, eps, atol, rtol, forward))


def _fast_mismatch(fn, inputs, i, j, expected, got, eps, atol, rtol, forward):
    """PyTorch's message for a fast-mode mismatch: the projections, then the whole Jacobians of that pair."""
    numerical = numerical_jacobian(fn, inputs, eps)[(i, j)]
    analytical = (forward_jacobian(fn, inputs) if forward else analytical_jacobian(fn, inputs))[(i, j)]
    mode = "computed with forward mode " if forward else ""
    with np.printoptions(precision=4, suppress=True):
        message = (f"Jacobian {mode}mismatch for output {j} with respect to input {i},\nnumerical:{expected}\n"
                   f"analytical:{got}\n\nThe above quantities relating the numerical and analytical jacobians are "
                   "computed in fast mode. Below, we recompute numerical and analytical jacobians in slow mode:\n\n"
                   f"Numerical:\n{numerical}\nAnalytical:\n{analytical}\n\nThe max per-element difference (slow "
                   f"mode) is: {np.abs(numerical - analytical).max(initial=0)}.\n")
    if np.allclose(analytical, numerical, rtol=rtol, atol=atol):
        message += ("Fast gradcheck failed but element-wise differences are small. This means that the test might've "
                    "passed in slow_mode! Call gradcheck with fast_mode=False.")
    return message


# ----- check_batched_grad, check_batched_forward_grad: a pass under vmap against one pass per vector (step 69) ------

FAILED_BATCHED_GRAD_MSG = """
gradcheck or gradgradcheck failed while testing batched gradient computation.
To compute batched gradients (e.g. jacobians, hessians: tinypytorch.func.jacrev), the backward computation runs
under vmap, on a batch of output gradients at once. The most common failure is a vmap-incompatible operation in a
backward formula: one that leaves the package for raw arrays (.data, .numpy(), .item()), branches on a value, or
writes a batched gradient into an unbatched tensor in place. Write the backward with out-of-place operations of the
package, or call gradcheck/gradgradcheck with `check_batched_grad=False`.
""".strip()

FAILED_BATCHED_GRAD_MSG_FWD_AD = """
gradcheck failed while testing batched gradient computation with forward-mode AD.
To compute batched forward gradients (e.g. tinypytorch.func.jacfwd), forward mode runs under vmap, on a batch of
tangents at once; the most common failure is a vmap-incompatible operation in a jvp formula (see check_batched_grad).
Call gradcheck with `check_batched_forward_grad=False` to leave this check out.
""".strip()


def _failed_batched_grad_test_msg(output_idx, input_idx, result, expected, is_forward_ad=False):
    """PyTorch's message for batched gradients that differ from the unbatched ones."""
    return (f"For output {output_idx} and input {input_idx}:\n\n"
            f"{FAILED_BATCHED_GRAD_MSG_FWD_AD if is_forward_ad else FAILED_BATCHED_GRAD_MSG}\n\n"
            f"Got:\n{result}\n\nExpected:\n{expected}")


def _random_like(rng, y, count=2):
    """`count` standard normal Variables shaped like y, in its dtype and on its device, stacked (count first)."""
    xp = get_array_module(y.data)
    return Variable(xp.asarray(rng.standard_normal((count,) + tuple(y.shape))).astype(y.dtype), requires_grad=False)


def _vmapped(single, vectors, message, option):
    """vmap(single)(vectors). What the function does wrong inside vmap (a RuntimeError, as in PyTorch) is raised
    as GradcheckError with `message`. An operation that vmap has no batching rule for is the package's limit, not
    the function's fault (PyTorch's vmap would loop over the batch): a NotImplementedError that names `option`."""
    from tinypytorch.batching import vmap  # (here: vmap's rules import the operations, which import this floor)
    try:
        return vmap(single)(vectors)
    except NotImplementedError as error:  # (a RuntimeError too: caught first)
        raise NotImplementedError(f"gradcheck: {option}=True runs the function's gradients under vmap, which "
                                  f"cannot run them here ({error}); PyTorch's vmap would loop over the batch. "
                                  f"Leave {option} False for this function.") from error
    except RuntimeError as error:
        raise GradcheckError(f"While computing batched gradients, got: {error}\n\n{message}") from error


def _compare_batched(results, expected, output_of, input_of, is_forward_ad=False):
    """Each batched result against the unbatched ones stacked, with torch.allclose's default tolerances."""
    for k, (result, single) in enumerate(zip(results, expected)):
        want = np.stack([as_numpy(g.data) for g in single])
        got = as_numpy(result.data)
        if got.shape != want.shape or not np.allclose(got, want):
            raise GradcheckError(_failed_batched_grad_test_msg(output_of(k), input_of(k), got, want, is_forward_ad))


def check_batched_gradients(fn, inputs, seed=0):  # step 69
    """PyTorch's _test_batched_grad, for each output that requires grad: the vector-Jacobian products of a batch of
    two random output gradients, computed by one backward pass under vmap, must equal one backward pass per
    gradient (np.allclose). A backward that fails under vmap raises GradcheckError naming what failed. The gradients
    come from a generator seeded with `seed`, so that every call checks the same ones (PyTorch draws from its global
    generator)."""
    rng = np.random.default_rng(seed)
    wrt = [x for x in inputs if x.requires_grad]
    for j, y in enumerate(y for y in _outputs(fn, inputs) if y.requires_grad):
        def vjp(v, y=y):  # one backward pass: v^T J for every input that requires grad (zeros where none reaches)
            grads = grad(y, wrt, grad_outputs=v, retain_graph=True, allow_unused=True)
            return tuple(g if g is not None else Variable(get_array_module(x.data).zeros(x.shape, dtype=x.dtype),
                                                          requires_grad=False) for g, x in zip(grads, wrt))
        vs = _random_like(rng, y)
        expected = list(zip(*[vjp(v) for v in vs]))  # expected[k]: input k's gradient for each v
        results = _vmapped(vjp, vs, FAILED_BATCHED_GRAD_MSG, "check_batched_grad")
        _compare_batched(results, expected, lambda k, j=j: j, lambda k: _position(inputs, wrt[k]))


def check_batched_tangents(fn, inputs, seed=0):  # step 69
    """PyTorch's _test_batched_grad_forward_ad, for each input that requires grad: the Jacobian-vector products of a
    batch of two random tangents, computed by one forward-mode pass under vmap (tinypytorch.func.jvp), must equal
    one forward-mode pass per tangent (np.allclose); the other inputs are detached. Seeded as
    check_batched_gradients."""
    from tinypytorch import func  # (here, as vmap: func imports the operations)
    rng = np.random.default_rng(seed)
    for i, x in enumerate(inputs):
        if not (x.requires_grad and np.issubdtype(x.dtype, np.floating)):
            continue
        others = [a.detach() for a in inputs]

        def jvp(t, i=i, others=others):  # one forward-mode pass: J t for every output (zeros where none reaches)
            def of_input_i(a):
                return _outputs(fn, others[:i] + [a] + others[i + 1:])
            return tuple(func.jvp(of_input_i, (x.detach(),), (t,))[1])
        ts = _random_like(rng, x)
        expected = list(zip(*[jvp(t) for t in ts]))  # expected[k]: output k's tangent for each t
        results = _vmapped(jvp, ts, FAILED_BATCHED_GRAD_MSG_FWD_AD, "check_batched_forward_grad")
        _compare_batched(results, expected, lambda k: k, lambda k, i=i: i, is_forward_ad=True)


def _check_options(check_forward_ad, check_backward_ad, check_batched_grad, check_batched_forward_grad):
    """PyTorch's refusals of contradictory options."""
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires check_forward_ad to be True")


def gradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """True when backward's Jacobians of `fn(*inputs)` equal the numerical ones within atol + rtol |numerical|.

    fn: takes the inputs (Variables) and returns a Variable or a tuple of Variables.
    inputs: a Variable or a tuple of them; those that require grad are checked (float64
        expected: with float32 the rounding of the central difference exceeds the tolerance).
    raise_exception: on a mismatch raise GradcheckError showing both Jacobians (else return False).
    nondet_tol: how far two backward passes on the same input and gradient may differ.
    check_undefined_grad: backward must cope with outputs that get no gradient (check_undefined_gradients).
    check_grad_dtypes: each gradient must have its input's dtype.
    check_forward_ad: also forward mode's Jacobians (step 64), one forward pass per input element;
        check_backward_ad=False leaves backward's out, as in PyTorch.
    fast_mode: compare v^T J u for random unit vectors u, v, not whole Jacobians (check_projections).
    masked: PyTorch's option for sparse tensors, which the package has none of: True only accepts gradients
        close to zero, not exactly zero, from zero gradients of the outputs.
    check_batched_grad: backward run under vmap (step 69) on a batch of random output gradients must equal one
        backward pass per gradient (check_batched_gradients); check_batched_forward_grad: forward mode's likewise.
        An operation vmap has no batching rule for (a custom Function in forward mode): NotImplementedError.
    """
    _check_options(check_forward_ad, check_backward_ad, check_batched_grad, check_batched_forward_grad)
    inputs = _checked_inputs(inputs, "gradcheck")
    try:
        numerical = None if fast_mode else numerical_jacobian(fn, inputs, eps)
        if check_backward_ad and fast_mode:
            check_projections(fn, inputs, eps, atol, rtol, nondet_tol, check_grad_dtypes)
        elif check_backward_ad:
            analytical = reentrant_jacobian(fn, inputs, nondet_tol, check_grad_dtypes)
            jacobians_agree(numerical, analytical, atol, rtol, True)
        if check_forward_ad and fast_mode:  # step 64
            check_projections(fn, inputs, eps, atol, rtol, nondet_tol, check_grad_dtypes, forward=True)
        elif check_forward_ad:
            jacobians_agree(numerical, forward_jacobian(fn, inputs), atol, rtol, True, "computed with forward mode ")
        if check_forward_ad and check_undefined_grad:  # step 64
            check_undefined_tangents(fn, inputs)
        if check_batched_forward_grad:  # step 69: forward mode under vmap, against one pass per tangent
            check_batched_tangents(fn, inputs)
        if check_backward_ad:
            if check_batched_grad:  # step 69: backward under vmap, against one pass per output gradient
                check_batched_gradients(fn, inputs)
            check_multiplied_by_grad_output(fn, inputs, masked)
            if check_undefined_grad:
                check_undefined_gradients(fn, inputs)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0, check_undefined_grad=True,
                  check_grad_dtypes=False, check_batched_grad=False, check_fwd_over_rev=False,
                  check_rev_over_rev=True, fast_mode=False, masked=False, seed=0):
    """gradcheck of the gradients: second derivatives from backward of backward against numerical ones.

    The function checked maps (inputs, grad_outputs) to the gradients of fn's outputs, seeded
    with grad_outputs, with respect to the inputs that require grad: its Jacobian holds every
    second derivative. grad_outputs default to random values, as in PyTorch, but drawn from a generator
    seeded with `seed`, so that every call checks the same ones (PyTorch draws from its global generator).
    check_rev_over_rev checks them with backward (gradcheck's check_backward_ad), check_fwd_over_rev with
    forward mode over backward (step 65); the other options are gradcheck's.
    """
    if not (check_fwd_over_rev or check_rev_over_rev):  # PyTorch's refusals
        raise AssertionError("Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_undefined_grad=True requires check_rev_over_rev to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_batched_grad=True requires check_rev_over_rev to be True")
    inputs = _checked_inputs(inputs, "gradgradcheck")
    outputs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Variable(_grad_output(rng, y, gen_non_contig_grad_outputs)) for y in outputs)
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
                     raise_exception=raise_exception, nondet_tol=nondet_tol, check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
                     check_forward_ad=check_fwd_over_rev, check_backward_ad=check_rev_over_rev, fast_mode=fast_mode,
                     masked=masked)


def _grad_output(rng, y, non_contiguous):
    """A standard normal array shaped like y, in its dtype and on its device; with non_contiguous, a strided view
    (every other element of an array twice as long), as PyTorch's gen_non_contig_grad_outputs makes them."""
    xp = get_array_module(y.data)
    values = xp.asarray(rng.standard_normal(y.shape)).astype(y.dtype)
    if not non_contiguous or y.ndim == 0:
        return values
    doubled = xp.repeat(values, 2, axis=-1)
    return doubled[..., ::2]
