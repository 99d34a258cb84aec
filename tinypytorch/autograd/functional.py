"""Higher-level derivatives of whole functions, PyTorch's `torch.autograd.functional` (step 65).

    vjp(f, x, v)        (f(x), v^T J): one backward pass
    jvp(f, x, v)        (f(x), J v): the double-backward trick, two backward passes, as PyTorch's
    jacobian(f, x)      J, by rows (reverse mode, one backward pass per output element) or by columns
                        (strategy="forward-mode", one forward-mode pass per input element)
    hessian(f, x)       the Jacobian of the gradient of a scalar f; its outer Jacobian by rows or by columns
    vhp(f, x, v)        v^T H of a scalar f: the gradient, then one more backward pass through it
    hvp(f, x, v)        H v: the double-backward trick, without ever forming H

Inputs and v: a Variable or a tuple of Variables; f returns a Variable or a tuple of Variables. Anything
else (a list, a number) is refused with PyTorch's TypeError. The results nest as PyTorch's: a Variable for
one input and one output, tuples otherwise (forward mode's are lists where PyTorch's are). create_graph=True
keeps the results differentiable; strict=True raises PyTorch's RuntimeError where an output does not depend
on an input (else its block is zeros). `vectorize=True` is accepted and gives the same values by the same loop
(there is no vmap here); PyTorch asks for it with strategy="forward-mode".

`unit_like` and `stack_as` make the basis vectors and assemble what comes back: tinypytorch.func uses them too.
"""
from tinypytorch.autograd import forward_ad as fwAD
from tinypytorch.autograd.gradients import grad
from tinypytorch.core import Variable
from tinypytorch.cuda import get_array_module
from tinypytorch.factories import zeros_like
from tinypytorch.functions import Reshape, concatenate
from tinypytorch.grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def unit_like(x, k):  # step 65
    """The k-th unit tensor (row-major) of x's shape, dtype and device."""
    xp = get_array_module(x)
    e = xp.zeros(x.shape, dtype=x.data.dtype)
    e.reshape(-1)[k] = 1
    return Variable(e, requires_grad=False)


def stack_as(parts, shape):  # step 65
    """Variables of one size stacked, in order, into one of `shape`; differentiable, like each part."""
    return concatenate([p.reshape(1, -1) for p in parts]).reshape(shape)


def _as_tuple(values, arg_name, fn_name):
    """(whether `values` was a tuple, `values` as a tuple), after PyTorch's check that it holds only Variables."""
    is_tuple = isinstance(values, tuple)
    values = values if is_tuple else (values,)
    for i, value in enumerate(values):
        if not isinstance(value, Variable):
            where = f"value at index {i}" if is_tuple else f"given {arg_name}"
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors but the "
                            f"{where} has type {type(value)}.")
    return is_tuple, values


def _tuple_postprocess(result, to_unpack):
    """PyTorch's nesting: unwrap the tuples that _as_tuple made (to_unpack: was it a tuple, or (outputs', inputs'))."""
    outer, inner = to_unpack if isinstance(to_unpack, tuple) else (to_unpack, True)
    if not inner:
        result = tuple(row[0] for row in result)
    return result if outer else result[0]


def _grad_preprocess(inputs, create_graph, need_graph):
    """New Variables to differentiate with respect to: views that keep the caller's graph (create_graph), or leaves."""
    return tuple(Reshape(x.shape)(x) if create_graph and x.requires_grad else x.detach().requires_grad_(need_graph)
                 for x in inputs)


def _grad_postprocess(values, create_graph):
    """The results without their graphs, unless create_graph (nested tuples too)."""
    if isinstance(values[0], Variable):
        return values if create_graph else tuple(v.detach() for v in values)
    return tuple(_grad_postprocess(v, create_graph) for v in values)


def _finish(outputs, result, tuples, create_graph):
    """(outputs, result) as PyTorch hands them back: without their graphs unless create_graph, and tuples unwrapped
    where the caller gave no tuple (tuples: was the outputs', was the result's)."""
    return (_tuple_postprocess(_grad_postprocess(outputs, create_graph), tuples[0]),
            _tuple_postprocess(_grad_postprocess(result, create_graph), tuples[1]))


def _validate_v(v, other, is_other_tuple):
    """v: one Variable per entry of `other`, each of its shape, or PyTorch's error."""
    if len(other) != len(v):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
                           if is_other_tuple else "The given v should contain a single Tensor.")
    for i, (v_i, other_i) in enumerate(zip(v, other)):
        if v_i.shape != other_i.shape:
            raise RuntimeError(f"{f'Entry {i} in ' if is_other_tuple else ''}v has invalid size: should be "
                               f"{other_i.shape} but got {v_i.shape}.")


_INDEPENDENT = {
    "outputs": "Output {i} of the user-provided function does not require gradients. The outputs must be computed "
               "in a differentiable manner from the input when running in strict mode.",
    "grad_inputs": "The gradient with respect to input {i} is independent of the inputs of the user-provided "
                   "function. This is not allowed in strict mode.",
    "jacobian": "While computing the hessian, found that the jacobian of the user-provided function with respect to "
                "input {i} is independent of the input. This is not allowed in strict mode. You should ensure that "
                "your function is twice differentiable and that the jacobian depends on the inputs (this would be "
                "violated by a linear function for example).",
}


def _check_requires_grad(values, kind, strict):
    """strict: every value exists and requires grad, or PyTorch's error for this kind of value."""
    if not strict:
        return
    for i, value in enumerate(values):
        if value is None:
            raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode.")
        if not value.requires_grad:
            raise RuntimeError(_INDEPENDENT[kind].format(i=i))


def _autograd_grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """autograd.grad that skips the outputs that do not require grad and answers None for unused inputs."""
    grad_outputs = (None,) * len(outputs) if grad_outputs is None else grad_outputs
    pairs = [(y, g) for y, g in zip(outputs, grad_outputs) if y is not None and y.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return grad([y for y, _ in pairs], inputs, [g for _, g in pairs], retain_graph=retain_graph,
                create_graph=create_graph, allow_unused=True)


_ZEROS_REFUSED = {
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in strict "
            "mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs when using "
                  "the double backward trick to compute forward mode gradients. This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This is not allowed in "
                   "strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the grad_jacobian. "
                         "This is not allowed in strict mode as it prevents from using the double backward trick to "
                         "replace forward mode AD.",
}


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    """Zeros shaped like refs[i] where grads[i] is None, or PyTorch's error in strict mode for this stage."""
    result = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(_ZEROS_REFUSED[stage].format(i=i))
            g = zeros_like(ref)
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(f"The {what} of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode when create_graph=True.")
        result.append(g)
    return tuple(result)


def _function_of(func, inputs, fn_name, strict):
    """func(*inputs) as (was it a tuple, a tuple of Variables), PyTorch's checks made."""
    is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", fn_name)
    _check_requires_grad(outputs, "outputs", strict)
    return is_outputs_tuple, outputs


def _vector(v, refs, is_refs_tuple, fn_name, create_graph, none_message):
    """v as a tuple checked against refs (one Variable of each one's shape), or None where PyTorch allows it."""
    if v is None:
        if len(refs) != 1 or refs[0].numel() != 1:
            raise RuntimeError(none_message)
        return None
    v = _grad_preprocess(_as_tuple(v, "v", fn_name)[1], create_graph, need_graph=False)
    _validate_v(v, refs, is_refs_tuple)
    return v


def vjp(func, inputs, v=None, create_graph=False, strict=False):  # step 65
    """(func(inputs), v^T J): one backward pass from the outputs seeded with v."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _grad_preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _function_of(func, inputs, "vjp", strict)
        v = _vector(v, outputs, is_outputs_tuple, "vjp", create_graph, "The vector v can only be None if the "
                    "user-provided function returns a single Tensor with a single element.")
    with set_grad_enabled(create_graph or is_grad_enabled()):
        result = _fill_in_zeros(_autograd_grad(outputs, inputs, v, create_graph), inputs, strict, create_graph, "back")
    return _finish(outputs, result, (is_outputs_tuple, is_inputs_tuple), create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):  # step 65
    """(func(inputs), J v) by the double-backward trick: u^T J is linear in u, so its gradient with respect to u,
    seeded with v, is J v (PyTorch's way, two backward passes)."""
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _grad_preprocess(inputs, create_graph, need_graph=True)
        v = _vector(v, inputs, is_inputs_tuple, "jvp", create_graph, "The vector v can only be None if the input to "
                    "the user-provided function is a single Tensor with a single element.")
        is_outputs_tuple, outputs = _function_of(func, inputs, "jvp", strict)
        u = tuple(zeros_like(y, requires_grad=True) for y in outputs)  # we differentiate with respect to u
        grad_inputs = _autograd_grad(outputs, inputs, u, create_graph=True)  # u^T J, a graph in u
        _check_requires_grad(grad_inputs, "grad_inputs", strict)
    with set_grad_enabled(create_graph or is_grad_enabled()):
        result = _fill_in_zeros(_autograd_grad(grad_inputs, u, v, create_graph), outputs, strict, create_graph,
                                "back_trick")
    return _finish(outputs, result, (is_outputs_tuple, is_outputs_tuple), create_graph)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):  # step 65
    """The Jacobian of func at inputs: for output i and input j, a Variable of shape output_i + input_j."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                             'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                             'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError('torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-'
                                      'mode"` are not supported together (yet). Please either set `create_graph=False` '
                                      'or `strategy="reverse-mode"`.')
        return _jacobian_by_columns(func, inputs, strict, vectorize)
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _grad_preprocess(inputs, create_graph, need_graph=True)
        is_outputs_tuple, outputs = _function_of(func, inputs, "jacobian", strict)
        if vectorize and strict:
            raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                               "supported together. Please either set `strict=False` or `vectorize=False`.")
        blocks = tuple(_rows(i, y, inputs, create_graph, strict) for i, y in enumerate(outputs))
    return _tuple_postprocess(_grad_postprocess(blocks, create_graph), (is_outputs_tuple, is_inputs_tuple))


def _rows(i, y, inputs, create_graph, strict):
    """Output i's Jacobian with respect to every input: one backward pass per element of y."""
    rows = [[] for _ in inputs]
    for k in range(y.numel()):
        for j, (g, x) in enumerate(zip(_autograd_grad((y,), inputs, (unit_like(y, k),), create_graph, True), inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(f"Output {i} of the user-provided function is independent of input {j}. This "
                                       "is not allowed in strict mode.")
                g = zeros_like(x)
            elif strict and create_graph and not g.requires_grad:  # (PyTorch's message names the output's index)
                raise RuntimeError(f"The jacobian of the user-provided function is independent of input {i}. This is "
                                   "not allowed in strict mode when create_graph=True.")
            rows[j].append(g)
    return tuple(stack_as(r, y.shape + x.shape) for r, x in zip(rows, inputs))


def _jacobian_by_columns(func, inputs, strict, vectorize):
    """strategy="forward-mode": one forward-mode pass per input element, PyTorch's checks and messages first."""
    if strict:
        raise RuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not '
                           'supported together (yet). Please either set `strict=False` or '
                           '`strategy="reverse-mode"`.')
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    if not vectorize:  # PyTorch's words (and its missing space): it builds this on vmap
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse Hessian is"
                                  "only implemented for `vectorize=True`.")
    inputs = tuple(x.detach() for x in inputs)
    by_input = []  # by_input[j][i]: output i's Jacobian with respect to input j
    for j, x in enumerate(inputs):
        columns = [_tangents(func, inputs, j, unit_like(x, k)) for k in range(x.numel())]
        is_outputs_tuple, outputs = columns[0][0], columns[0][1]
        xp = get_array_module(x)
        by_input.append([Variable(xp.stack([c[2][i] for c in columns], -1).reshape(y.shape + x.shape),
                                  requires_grad=False) for i, y in enumerate(outputs)])
    by_output = [[by_input[j][i] for j in range(len(inputs))] for i in range(len(by_input[0]))]
    return _tuple_postprocess(by_output, (is_outputs_tuple, is_inputs_tuple))  # lists, as PyTorch's


def _tangents(func, inputs, j, tangent):
    """One forward-mode pass, input j's tangent given: (was the output a tuple, outputs, their tangents' arrays)."""
    with fwAD.dual_level():
        duals = tuple(fwAD.make_dual(x, tangent) if jj == j else x for jj, x in enumerate(inputs))
        # PyTorch's check here names no function: "given to None"
        is_outputs_tuple, outputs = _as_tuple(func(*duals), "outputs", None)
        pairs = [fwAD.unpack_dual(y) for y in outputs]
    return is_outputs_tuple, outputs, [zeros_like(p).data if t is None else t.data for p, t in pairs]


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,  # step 65
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar func: the Jacobian (rows or columns) of its gradient, which keeps a graph."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def scalar_function(*xs):
        output = func(*xs)
        is_tuple, outputs = _as_tuple(output, "outputs of the user-provided function", "hessian")
        _check_requires_grad(outputs, "outputs", strict)
        _check_single_element(is_tuple, outputs, "hessian")
        return output.reshape(())

    def gradient(*xs):
        if outer_jacobian_strategy == "forward-mode":  # a view of each dual input keeps its tangent
            xs = tuple(x.requires_grad_(True) for x in xs)
        g = jacobian(scalar_function, xs, create_graph=True)
        _check_requires_grad(g if isinstance(g, tuple) else (g,), "jacobian", strict)
        return g

    result = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                      strategy=outer_jacobian_strategy)
    return _tuple_postprocess(result, (is_inputs_tuple, is_inputs_tuple))


def _check_single_element(is_tuple, outputs, fn_name):
    if is_tuple or not isinstance(outputs[0], Variable):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {fn_name} should contain a single element")


def _gradient_with_graph(func, inputs, v, create_graph, strict, fn_name):
    """vhp's and hvp's first half, after PyTorch's checks: (inputs, v, outputs, the gradient as a graph, (were the
    outputs a tuple, were the inputs))."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
    inputs = _grad_preprocess(inputs, create_graph, need_graph=True)
    v = _vector(v, inputs, is_inputs_tuple, fn_name, create_graph, "The vector v can only be None if the input to "
                "the user-provided function is a single Tensor with a single element.")
    is_outputs_tuple, outputs = _function_of(func, inputs, fn_name, strict)
    _check_single_element(is_outputs_tuple, outputs, fn_name)
    gradient = _autograd_grad(outputs, inputs, create_graph=True)
    _check_requires_grad(gradient, "jacobian", strict)
    return inputs, v, outputs, gradient, (is_outputs_tuple, is_inputs_tuple)


def vhp(func, inputs, v=None, create_graph=False, strict=False):  # step 65
    """(func(inputs), v^T H): the gradient with a graph, then one backward pass through it seeded with v."""
    with enable_grad():
        inputs, v, outputs, gradient, tuples = _gradient_with_graph(func, inputs, v, create_graph, strict, "vhp")
    with set_grad_enabled(create_graph or is_grad_enabled()):
        result = _fill_in_zeros(_autograd_grad(gradient, inputs, v, create_graph), inputs, strict, create_graph,
                                "double_back")
    return _finish(outputs, result, tuples, create_graph)


def hvp(func, inputs, v=None, create_graph=False, strict=False):  # step 65
    """(func(inputs), H v) without H: the double-backward trick.

    u^T H is a backward pass through the gradient seeded with u; it is linear in u, so one more
    backward pass, from u^T H back to u seeded with v, gives d(u^T H v)/du = H v.
    """
    with enable_grad():
        inputs, v, outputs, gradient, tuples = _gradient_with_graph(func, inputs, v, create_graph, strict, "hvp")
        u = tuple(zeros_like(x, requires_grad=True) for x in inputs)  # we differentiate with respect to u
        double_back = _autograd_grad(gradient, inputs, u, create_graph=True)  # u^T H, a graph in u
    with set_grad_enabled(create_graph or is_grad_enabled()):
        result = _fill_in_zeros(_autograd_grad(double_back, u, v, create_graph), inputs, strict, create_graph,
                                "double_back_trick")  # H v, zeros where it does not reach (or strict's error)
    return _finish(outputs, result, tuples, create_graph)
