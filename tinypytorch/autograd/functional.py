"""Higher-level derivatives of whole functions, PyTorch's `torch.autograd.functional` (step 63).

    jacobian(f, x)      J, by rows (reverse mode, one backward pass per output element) or by columns
                        (strategy="forward-mode", one forward-mode pass per input element)
    vhp(f, x, v)        v^T H of a scalar f: the gradient, then one more backward pass through it
    hvp(f, x, v)        H v: the double-backward trick, without ever forming H

Inputs: a Variable or a tuple of Variables; the results follow PyTorch's nesting (a Variable for a
single input and output, tuples otherwise). `vectorize=True` is accepted and gives the same values by
the same loop (there is no vmap here).
"""
import numpy as np

from tinypytorch.autograd.gradients import grad
from tinypytorch.core import Variable
from tinypytorch.grad_mode import enable_grad


def _as_tuple(values):
    return (True, tuple(values)) if isinstance(values, tuple) else (False, (values,))


def _untuple(values, was_tuple):
    return values if was_tuple else values[0]


def _prepare(inputs, create_graph):
    """Fresh leaves to differentiate with respect to (or views, to keep the caller's graph for create_graph)."""
    return tuple(x.reshape(x.shape) if create_graph and x.requires_grad else x.detach().requires_grad_() for x in inputs)


def _grads(outputs, inputs, grad_outputs, create_graph):
    """autograd.grad that answers None for what the outputs do not depend on (PyTorch's _autograd_grad)."""
    pairs = [(y, g) for y, g in zip(outputs, grad_outputs) if y is not None and y.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return grad([y for y, _ in pairs], inputs, [g for _, g in pairs], retain_graph=True,
                create_graph=create_graph, allow_unused=True)


def _check_outputs(outputs, strict):
    for i, y in enumerate(outputs):
        if strict and not y.requires_grad:
            raise RuntimeError(f"Output {i} of the user-provided function does not require gradients. The outputs "
                               "must be computed in a differentiable manner from the input when running in strict "
                               "mode.")


def _zeros(x):
    return Variable(np.zeros_like(x.data), requires_grad=False)


def _finish(value, create_graph):
    return value if create_graph else value.detach()


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):  # step 63
    """The Jacobian of func at inputs: for output i and input j, an array of shape output_i + input_j."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                             'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                             'Otherwise, prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        return _jacobian_forward(func, inputs, create_graph, strict, vectorize)
    if vectorize and strict:
        raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                           "supported together. Please either set `strict=False` or `vectorize=False`.")
    with enable_grad():
        inputs_tuple, inputs = _as_tuple(inputs)
        inputs = _prepare(inputs, create_graph)
        outputs_tuple, outputs = _as_tuple(func(*inputs))
        _check_outputs(outputs, strict)
        blocks = tuple(_jacobian_rows(i, y, inputs, create_graph, strict) for i, y in enumerate(outputs))
    blocks = tuple(tuple(_finish(b, create_graph) for b in row) for row in blocks)
    if not outputs_tuple:
        return _untuple(blocks[0], inputs_tuple)
    return tuple(_untuple(row, inputs_tuple) for row in blocks)


def _jacobian_rows(i, y, inputs, create_graph, strict):
    """Output i's Jacobian with respect to every input: one backward pass per element of y."""
    from tinypytorch.func import _basis, _stack  # func imports autograd: import it when first used
    rows = [[] for _ in inputs]
    for k in range(y.numel()):
        seed = Variable(_basis(y.shape, k), requires_grad=False)
        for j, (g, x) in enumerate(zip(_grads((y,), inputs, (seed,), create_graph), inputs)):
            if g is None:
                if strict:
                    raise RuntimeError(f"Output {i} of the user-provided function is independent of input {j}. "
                                       "This is not allowed in strict mode.")
                g = _zeros(x)
            elif strict and create_graph and not g.requires_grad:
                raise RuntimeError(f"The jacobian of the user-provided function is independent of input {i}. "
                                   "This is not allowed in strict mode when create_graph=True.")
            rows[j].append(g)
    return tuple(_stack(r, y.shape + x.shape) for r, x in zip(rows, inputs))


def _jacobian_forward(func, inputs, create_graph, strict, vectorize):
    """strategy="forward-mode": one jvp per input element, PyTorch's checks and messages first."""
    from tinypytorch.func import _basis, jvp
    if create_graph:
        raise NotImplementedError('torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-'
                                  'mode"` are not supported together (yet). Please either set `create_graph=False` '
                                  'or `strategy="reverse-mode"`.')
    if strict:
        raise RuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are not '
                           'supported together (yet). Please either set `strict=False` or '
                           '`strategy="reverse-mode"`.')
    if not vectorize:  # PyTorch's words (and its missing space): it builds this on vmap
        raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse Hessian is"
                                  "only implemented for `vectorize=True`.")
    inputs_tuple, inputs = _as_tuple(inputs)
    inputs = tuple(x.detach() for x in inputs)
    blocks = []  # blocks[j][i]: output i with respect to input j
    for j, x in enumerate(inputs):
        columns = []
        for k in range(x.numel()):
            tangents = tuple(Variable(_basis(x.shape, k) if jj == j else np.zeros(xx.shape), requires_grad=False)
                             for jj, xx in enumerate(inputs))
            outputs_tuple, columns_k = _as_tuple(jvp(func, inputs, tangents)[1])
            columns.append(columns_k)
        blocks.append([Variable(np.stack([c[i].data for c in columns], -1).reshape(columns[0][i].shape + x.shape),
                                requires_grad=False) for i in range(len(columns[0]))])
    by_output = tuple(tuple(blocks[j][i] for j in range(len(inputs))) for i in range(len(blocks[0])))
    if not outputs_tuple:
        return _untuple(by_output[0], inputs_tuple)
    return tuple(_untuple(row, inputs_tuple) for row in by_output)


def _scalar_function_gradient(name, func, inputs, v, create_graph, strict):
    """Shared by vhp and hvp: (inputs, v, output, gradient with a graph), after PyTorch's checks."""
    inputs_tuple, inputs = _as_tuple(inputs)
    inputs = _prepare(inputs, create_graph)
    if v is not None:
        v = _as_tuple(v)[1]
        if len(v) != len(inputs):
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(inputs)} but got {len(v)}."
                               if inputs_tuple else "The given v should contain a single Tensor.")
        for j, (vj, x) in enumerate(zip(v, inputs)):
            if tuple(vj.shape) != x.shape:
                raise RuntimeError(f"{f'Entry {j} in ' if inputs_tuple else ''}v has invalid size: should be "
                                   f"{list(x.shape)} but got {list(vj.shape)}.")
    elif len(inputs) != 1 or inputs[0].numel() != 1:
        raise RuntimeError("The vector v can only be None if the input to the user-provided function is a single "
                           "Tensor with a single element.")
    outputs_tuple, outputs = _as_tuple(func(*inputs))
    _check_outputs(outputs, strict)
    if outputs_tuple or not isinstance(outputs[0], Variable):
        raise RuntimeError(f"The function given to {name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {name} should contain a single element")
    gradient = _grads(outputs, inputs, (None,), create_graph=True)
    for j, g in enumerate(gradient):
        if strict and (g is None or not g.requires_grad):
            raise RuntimeError(
                "While computing the hessian, found that the jacobian of the user-provided function with respect "
                f"to input {j} is independent of the input. This is not allowed in strict mode. You should ensure "
                "that your function is twice differentiable and that the jacobian depends on the inputs (this "
                "would be violated by a linear function for example).")
    v = tuple(Variable(np.ones(x.shape), requires_grad=False) for x in inputs) if v is None else v
    return inputs_tuple, inputs, v, outputs[0], gradient


def vhp(func, inputs, v=None, create_graph=False, strict=False):  # step 63
    """(func(inputs), v^T H): the gradient with a graph, then one backward pass through it seeded with v."""
    with enable_grad():
        inputs_tuple, inputs, v, output, gradient = _scalar_function_gradient("vhp", func, inputs, v,
                                                                              create_graph, strict)
        result = _grads(gradient, inputs, v, create_graph)
    result = tuple(_zeros(x) if r is None else _finish(r, create_graph) for r, x in zip(result, inputs))
    return _finish(output, create_graph), _untuple(result, inputs_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):  # step 63
    """(func(inputs), H v) without H: the double-backward trick.

    u^T H is a backward pass through the gradient seeded with u; it is linear in u, so one more
    backward pass, from u^T H back to u seeded with v, gives d(u^T H v)/du = H v.
    """
    with enable_grad():
        inputs_tuple, inputs, v, output, gradient = _scalar_function_gradient("hvp", func, inputs, v,
                                                                              create_graph, strict)
        u = tuple(Variable(np.zeros(x.shape)) for x in inputs)  # requires grad: we differentiate with respect to u
        double_back = _grads(gradient, inputs, u, create_graph=True)
        result = _grads(double_back, u, v, create_graph)
    for j, r in enumerate(result):
        if strict and r is None:
            raise RuntimeError(f"The hessian of the user-provided function is independent of entry {j} in the "
                               "grad_jacobian. This is not allowed in strict mode as it prevents from using the "
                               "double backward trick to replace forward mode AD.")
    result = tuple(_zeros(x) if r is None else _finish(r, create_graph) for r, x in zip(result, inputs))
    return _finish(output, create_graph), _untuple(result, inputs_tuple)
