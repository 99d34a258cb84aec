"""Function transforms, PyTorch's `torch.func`, for functions of Variables (step 65).

    jvp(f, primals, tangents)   (f(*primals), J tangents): one forward-mode pass (forward_ad, step 64)
    vjp(f, *primals)            (f(*primals), vjp_fn) with vjp_fn(u) = u^T J: one backward pass per call
    jacfwd(f)(*args)            J by columns: vmap of jvp over the n basis tangents (one batched forward pass)
    jacrev(f)(*args)            J by rows: vmap of vjp_fn over the m basis cotangents (one batched backward pass)
    hessian(f)(*args)           jacfwd(jacrev(f)): forward over reverse, as PyTorch's
    linearize(f, *primals)      (f(*primals), jvp_fn): f run once, each operation's jvp kept; jvp_fn(t) replays them
    grad(f)(*args)              the gradient of a scalar f; grad_and_value(f)(*args) gives f's value too
    functional_call(module, params, args)   module called with other tensors in its parameters' and buffers'
                                places, for that call only: a model as a function of its parameters, for the above
    stack_module_state(models)  (params, buffers): the models' tensors stacked by name, for vmap over the models
    vmap(f, in_dims, out_dims)  f run once on a batch (tinypytorch.batching, step 69); grad, vjp and jvp inside it
                                differentiate a per-sample copy of each shared argument (per-sample gradients, step 70)

PyTorch's signatures and structures: argnums (an int or a tuple of ints) picks the arguments to differentiate;
with has_aux=True f returns (output, aux), and aux comes back beside the result, not differentiated. Arguments
and outputs are pytrees of Variables (tuples, lists, dicts, namedtuples: tinypytorch.utils.pytree). A Jacobian
nests as PyTorch's: the output's structure, each of its leaves holding the differentiated argument's structure
(a tuple of those for a tuple argnums). As PyTorch's, jacfwd and jacrev batch their passes with vmap (step 65's
page writes them as loops first); chunk_size is checked, and the whole basis runs as one batch.

Transforms compose through the graph. A reverse transform whose output depends on Variables that require
grad outside it (an enclosing transform's, or the caller's parameters) records its backward passes
(create_graph), so jacrev(jacrev(f)) works; forward mode pushes tangents through the backward formulas, so
jacfwd(jacrev(f)) and a jvp of a grad work. Refused with a clear error: forward mode inside forward
mode (forward_ad has one dual level); reverse mode over forward mode (a tangent is an array that no graph
records, so it cannot be differentiated).
"""
import collections.abc
import contextlib
import itertools
import threading

from tinypytorch import batching_state, cuda, forward_ad_state, layers
from tinypytorch.autograd import forward_ad as fwAD
from tinypytorch.autograd import gradients
from tinypytorch.batched import innermost, is_batched, materialized, rebatched
from tinypytorch.batching import vmap
from tinypytorch.core import Variable
from tinypytorch.cuda import get_array_module
from tinypytorch.factories import zeros_like
from tinypytorch.functions import Reshape, movedim, reshape
from tinypytorch.grad_mode import enable_grad, is_grad_enabled
from tinypytorch.structure import stack
from tinypytorch.utils.pytree import tree_flatten, tree_map, tree_unflatten, treespec_pprint

JVP, VJP, GRAD = "jvp(f, primals, tangents)", "vjp(f, *primals)", "grad_and_value(f)(*args)"  # PyTorch's names


def jvp(func, primals, tangents, *, strict=False, has_aux=False):  # step 65
    """(func(*primals), J tangents): one pass of forward mode, every primal with its tangent (the same pytree).
    With has_aux: (output, tangent, aux)."""
    if not isinstance(primals, tuple):
        raise RuntimeError(f"{JVP}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    call = _Call(func, primals, None, has_aux)
    flat_tangents, spec = tree_flatten(tangents)
    if spec != call.spec:
        raise RuntimeError(f"{JVP}: Expected primals and tangents to have the same python structure. For example, "
                           "if primals is a tuple of 3 tensors, tangents also must be. Got primals with structure "
                           f"{call.spec} and tangents with structure {spec}")
    for name, values in (("primals", call.inputs), ("tangents", flat_tangents)):
        if not values:
            raise RuntimeError(f"{JVP}: Expected {name} to contain at least one Tensor.")
        for value in values:
            if not isinstance(value, Variable):
                raise RuntimeError(f"{JVP}: Expected {name} to only contain Tensors, got {type(value)}")
    output_tangents = call.push(dict(enumerate(flat_tangents)), strict)
    result = tree_unflatten(call.outputs, call.out_spec), tree_unflatten(output_tangents, call.out_spec)
    return (*result, call.aux) if has_aux else result


def vjp(func, *primals, has_aux=False):  # step 65
    """(func(*primals), vjp_fn): vjp_fn(u) = u^T J, u shaped as the output, the result as the primals (a tuple).
    With has_aux: (output, vjp_fn, aux)."""
    call = _Call(func, primals, None, has_aux)
    outputs = call.record()

    def vjp_fn(cotangents, retain_graph=True, create_graph=None):
        flat, spec = tree_flatten(cotangents)
        if spec != call.out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as pytree structure of outputs "
                               f"to the function. cotangents: {treespec_pprint(spec)}, primal output: "
                               f"{treespec_pprint(call.out_spec)}")
        _check_cotangents(flat, outputs)
        return tree_unflatten(call.pull(outputs, flat, retain_graph, create_graph), call.spec)
    result = tree_unflatten([call.unwrap(y) for y in outputs], call.out_spec), vjp_fn
    return (*result, call.aux) if has_aux else result


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):  # step 65
    """func's Jacobian by rows: one backward pass per output element. Shape: output's + input's."""
    _check_chunk_size(chunk_size)

    def jacobian(*args):
        call = _Call(func, args, argnums, has_aux)  # the Variables to differentiate, flattened: call.inputs
        outputs = call.record()  # func run once, its graph recorded; its outputs, flattened
        blocks = []  # blocks[i][j]: output i's Jacobian with respect to input j
        for y in outputs:  # one backward pass for all the rows of y's block: vmap over the unit cotangents
            rows = vmap(lambda u: tuple(call.pull([y], [u])))(_basis(y))  # (y.numel(),) + x.shape for each x
            blocks.append([reshape(r, y.shape + x.shape) for r, x in zip(rows, call.inputs)])
        return call.nest(blocks)  # in PyTorch's structure (with aux, if has_aux)
    return jacobian


def jacfwd(func, argnums=0, *, has_aux=False, randomness="error"):  # step 65
    """func's Jacobian by columns: one forward-mode pass per input element. Shape: output's + input's."""

    def jacobian(*args):
        _check_randomness(randomness)
        call = _Call(func, args, argnums, has_aux)  # the Variables to differentiate, flattened: call.inputs
        by_input = []  # by_input[j][i]: output i's Jacobian with respect to input j
        for j, x in enumerate(call.inputs):  # one forward pass for all of x's columns: vmap over unit tangents
            def columns_of(t, j=j):
                tangents = call.push({j: t})
                return (tangents, call.outputs) + ((call.aux,) if has_aux else ())
            columns, outputs, *aux = vmap(columns_of, randomness=randomness)(_basis(x))
            call.outputs = [y[0] for y in outputs]  # the values, the same for every column
            call.aux = _first(aux[0]) if has_aux else None
            by_input.append([_side_by_side(c, x.shape) for c in columns])
        return call.nest(list(zip(*by_input)))  # output by input, in PyTorch's structure (with aux, if has_aux)
    return jacobian


def hessian(func, argnums=0):  # step 65
    """The matrix of second derivatives of a scalar func: jacfwd(jacrev(func)), forward over reverse, as PyTorch's."""
    return jacfwd(jacrev(func, argnums), argnums)


def linearize(func, *primals):  # step 71
    """(func(*primals), jvp_fn), where jvp_fn(*tangents) = J tangents (the tangents shaped as the primals, the
    result as the output): PyTorch's `torch.func.linearize`. func runs once, here, under a dual level; while it
    runs, each operation's jvp is kept with the primal inputs and outputs it read (`Function.replay_jvp`): its
    linearization at the primals. jvp_fn replays only those kept jvps, on the new tangents' arrays, in the order
    they ran: func's Python code does not run again (only the jvp rules do). Under vmap, jvp_fn replays them
    once per sample. As in PyTorch, the kept values cost memory: with every tangent known in advance, a vmap of
    jvp does the same work without them. As jvp's tangents, jvp_fn's result is recorded in no graph:
    a reverse transform or forward mode over jvp_fn, and linearize inside vmap, inside forward mode or inside a
    reverse transform, are refused."""
    if forward_ad_state.open_dual_levels:
        raise NotImplementedError("tinypytorch.func.linearize: inside forward mode it would need a second dual "
                                  "level, which forward_ad does not have")
    if batching_state.levels:
        raise NotImplementedError("tinypytorch.func.linearize: not offered inside vmap (the kept jvps would be the "
                                  "batched operations'); call linearize outside and vmap jvp_fn instead")
    if _reversing.depth:
        raise NotImplementedError("tinypytorch.func.linearize: not offered inside a reverse transform: jvp_fn's "
                                  "result is recorded in no graph, so it could not be differentiated")
    flat_primals, spec = tree_flatten(primals)
    for p in flat_primals:
        if not isinstance(p, Variable):  # (PyTorch's error: it makes its tracing tangents with new_empty)
            raise AttributeError(f"'{type(p).__name__}' object has no attribute 'new_empty'")  # noqa: TRY004
    seeds = [get_array_module(p.data).zeros(p.shape, dtype=p.data.dtype) for p in flat_primals]
    tape = forward_ad_state.tape = []
    try:
        with fwAD.dual_level():
            duals = [fwAD.make_dual(p, seed) for p, seed in zip(flat_primals, seeds)]
            leaves, out_spec = tree_flatten(func(*tree_unflatten(duals, spec)))
            out_tangents = [forward_ad_state.tangent_of(y) if isinstance(y, Variable) else None for y in leaves]
            leaves = [fwAD.unpack_dual(y).primal if isinstance(y, Variable) else y for y in leaves]
    finally:
        forward_ad_state.tape = None
    program, out_slots = _linear_program(seeds, tape, out_tangents)
    del tape, seeds, out_tangents  # only the program's kept jvps and their primal values stay
    shapes = [p.shape for p in flat_primals]
    dtypes = [p.dtype for p in flat_primals]
    devices = [p.device for p in flat_primals]
    outputs = [(y.shape, y.data.dtype, get_array_module(y.data)) if isinstance(y, Variable) else None
               for y in leaves]

    def replayed(arrays):
        """The outputs' tangents (arrays, or the non-tensor leaves as they are) for the inputs' tangent arrays."""
        values = _run_linear_program(program, arrays)
        result = []
        for y, out, slot in zip(leaves, outputs, out_slots):
            if out is None:
                result.append(y)
                continue
            value = None if slot is None else values[slot]
            shape, dtype, xp = out
            result.append(xp.zeros(shape, dtype=dtype) if value is None else value)  # independent: a zero tangent
        return result

    def jvp_fn(*tangents):
        flat, tangent_spec = tree_flatten(tangents)
        if tangent_spec != spec:
            raise RuntimeError(f"Expected the tangents {tangent_spec} to have the same argspec as the primals {spec}")
        for idx, t in enumerate(flat):
            for what, mine, theirs in (("shape", t.shape, shapes[idx]), ("device", t.device, devices[idx]),
                                       ("dtype", t.dtype, dtypes[idx])):
                if mine != theirs:
                    raise RuntimeError(f"tangent:{idx} with {what} {mine} in flattened pytree doesn't match the "
                                       f"{what} {theirs} of the corresponding primal.")
        if _reversing.depth:
            raise NotImplementedError("tinypytorch.func.linearize: reverse mode over jvp_fn is not offered: a "
                                      "tangent is an array that no graph records, so it cannot be differentiated")
        if forward_ad_state.open_dual_levels:
            raise NotImplementedError("tinypytorch.func.linearize: forward mode over jvp_fn is not offered: it "
                                      "replays on arrays, which carry no tangents")
        numbers = _open_levels()
        if not numbers:
            return tree_unflatten([Variable(r, requires_grad=False) if k is not None else r for r, k in
                                   zip(replayed([t.data for t in flat]), outputs)], out_spec)
        # inside vmap: the tangents' physical arrays, every open level's batch dim in front; one replay per sample
        arrays = [innermost(materialized(t, numbers)).data for t in flat]
        batch = arrays[0].shape[:len(numbers)]
        samples = [replayed([a[index] for a in arrays]) for index in _indices(batch)]
        result = []
        for k, (y, out) in enumerate(zip(leaves, outputs)):
            if out is None:
                result.append(y)
                continue
            stacked = out[2].stack([sample[k] for sample in samples]).reshape(batch + tuple(out[0]))
            result.append(rebatched(Variable(stacked, requires_grad=False), numbers))
        return tree_unflatten(result, out_spec)
    # step 72: what linear_transpose traces (the replay on arrays) and the shapes of its inputs and output
    jvp_fn.on_arrays, jvp_fn.in_spec, jvp_fn.out_spec = replayed, spec, out_spec
    jvp_fn.in_types = [(tuple(p.shape), p.data.dtype) for p in flat_primals]
    return tree_unflatten(leaves, out_spec), jvp_fn


def _linear_program(seeds, tape, out_tangents):  # step 71
    """linearize's recording as a program on numbered slots: the inputs' tangents are slots 0..n-1; each kept jvp
    (replay, input slots, (slot, shape, dtype) of each output tangent) reads and writes slots, found by the
    identity of the tangent arrays of the recording (every array the tape names is alive, so ids are unique).
    Only the jvps that an output's tangent depends on are kept. Returns (program, the outputs' slots)."""
    slots = {id(seed): k for k, seed in enumerate(seeds)}
    program = []
    for replay, ins, outs in tape:
        in_slots = []
        for a in ins:
            if a is not None and id(a) not in slots:
                raise RuntimeError("tinypytorch.func.linearize: an operation read a tangent that no recorded "
                                   "operation made (a dual made inside func?)")
            in_slots.append(None if a is None else slots[id(a)])
        metas = []
        for a in outs:
            if a is None:
                metas.append(None)
            else:
                slots[id(a)] = len(slots)
                metas.append((slots[id(a)], a.shape, a.dtype))
        program.append((replay, in_slots, metas))
    out_slots = [None if a is None else slots[id(a)] for a in out_tangents]
    needed, kept = {s for s in out_slots if s is not None}, []
    for replay, in_slots, metas in reversed(program):  # dead code removed, from the outputs back
        if any(m is not None and m[0] in needed for m in metas):
            needed.update(s for s in in_slots if s is not None)
            kept.append((replay, in_slots, metas))
    return kept[::-1], out_slots


def _run_linear_program(program, arrays):  # step 71
    """The slots' values (a dict) after the kept jvps ran on the inputs' tangent arrays; None: a zero tangent."""
    values = dict(enumerate(arrays))
    for replay, in_slots, metas in program:
        tangents = [None if s is None else values.get(s) for s in in_slots]
        if all(t is None for t in tangents):
            continue  # every input's tangent is zero: so are the outputs'
        for t, meta in zip(replay(tangents), metas):
            if meta is not None and t is not None:
                slot, shape, dtype = meta
                values[slot] = get_array_module(t).broadcast_to(t, shape).astype(dtype)
    return values


def _indices(shape):
    """Every index of an array of `shape`, in C order."""
    return list(itertools.product(*[range(n) for n in shape]))


def grad_and_value(func, argnums=0, has_aux=False):  # step 65
    """A function that returns (the gradient of the scalar func with respect to the arguments argnums picks,
    func's value); with has_aux, (gradient, (value, aux))."""

    def wrapper(*args, **kwargs):
        call = _Call(func, args, argnums, has_aux, kwargs)
        output = call.run_recorded(GRAD)
        if not isinstance(output, Variable):
            raise RuntimeError(f"{GRAD}: Expected f(*args) to return a Tensor, got {type(output)}")
        if output.ndim != 0:
            raise RuntimeError(f"{GRAD}: Expected f(*args) to return a scalar Tensor, got tensor with {output.ndim} "
                               "dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
        gradient = tree_unflatten(call.pull([output], [None]), call.spec)
        return (gradient, (call.unwrap(output), call.aux)) if has_aux else (gradient, call.unwrap(output))
    return wrapper


def grad(func, argnums=0, has_aux=False):  # step 65
    """A function that returns the gradient of the scalar func (with has_aux: (gradient, aux)): the transform.
    `tinypytorch.autograd.grad(outputs, inputs)` differentiates outputs already computed."""
    transformed = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        gradient, value = transformed(*args, **kwargs)
        return (gradient, value[1]) if has_aux else gradient
    return wrapper


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """module(*args, **kwargs) with the tensors of `parameter_and_buffer_dicts` (a dict from dotted names, as
    named_parameters and named_buffers give them, or a list or tuple of such dicts with distinct keys) in the places
    of its parameters and buffers, for this call only: they are put back afterwards, even if the call raises. So
    `grad(lambda p: loss(functional_call(model, p, (x,))))(dict(model.named_parameters()))` differentiates with
    respect to the parameters without touching the model. `args` that is not a tuple is the one argument.

    tie_weights: a parameter or buffer reached under several names (tied weights) takes the given value under all
    of them (two different values for one of them raise). strict: the names must be exactly the module's. A buffer
    is an array in this package, so a buffer's tensor lends it its array (in-place updates, such as BatchNorm's
    running statistics, reach the tensor, as in torch); a gradient cannot reach a buffer, so a tensor that requires
    grad in a buffer's place is refused rather than given none."""
    if isinstance(parameter_and_buffer_dicts, dict):
        tensors = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, collections.abc.Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
        counts = collections.Counter(k for d in parameter_and_buffer_dicts for k in d)
        repeated = [key for key, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        tensors = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError("Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(parameter_and_buffer_dicts)}")
    if not isinstance(module, layers.Layer):
        raise TypeError(f"functional_call: expected a tinypytorch.nn.Module, got {type(module).__name__}")
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _reparametrized(module, tensors, tie_weights, strict):
        return module(*args, **({} if kwargs is None else kwargs))


def stack_module_state(models):  # step 70
    """(params, buffers) of M models of one class, each a dict from dotted names (as named_parameters and
    named_buffers give them) to the M tensors of that name stacked along a new first dim: PyTorch's
    `torch.func.stack_module_state`, so that `vmap(lambda p, b, x: functional_call(models[0], (p, b), (x,)),
    in_dims=(0, 0, None))` runs the M models at once (an ensemble). The stacked parameters are new leaves, detached
    from the models' (an optimizer can take them; the models' own parameters stay as they are); the names are the
    first model's. PyTorch's errors: no model, models in different train/eval modes, of different classes, of
    different shapes (stack's), a name that a later model lacks (a KeyError), a name that requires grad in some
    models and not in others."""
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(m.named_parameters()) for m in models]
    params = {name: _stacked_leaf([p[name] for p in all_params], name) for name in all_params[0]}
    all_buffers = [dict(m.named_buffers()) for m in models]  # arrays in this package: stacked as Variables
    buffers = {name: stack([Variable(b[name], requires_grad=False) for b in all_buffers])
               for name in all_buffers[0]}
    return params, buffers


def _stacked_leaf(tensors, name):
    """The tensors stacked along a new first dim; a new leaf that requires grad if they all do (none: a constant)."""
    requires = [t.requires_grad for t in tensors]
    if any(requires) and not all(requires):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    stacked = stack(tensors)
    return stacked.detach().requires_grad_() if all(requires) else stacked

def _named_tensors(module):
    """(dotted name, value) of every parameter, then every buffer, a shared one (tied weights) under each of its
    names: torch's named_parameters and named_buffers with remove_duplicate=False."""
    modules, todo = [], [("", module)]
    while todo:  # depth first, children in the order assigned, as named_modules
        prefix, m = todo.pop()
        modules.append((prefix, m))
        children = [(f"{prefix}{n}.", getattr(m, n)) for n in layers.registered_names(m)
                    if isinstance(getattr(m, n), layers.Layer)]
        todo.extend(reversed(children))
    params = [(p + n, getattr(m, n)) for p, m in modules for n in layers.registered_names(m)
              if isinstance(getattr(m, n), layers.Parameter)]
    return params + [(p + n, getattr(m, n)) for p, m in modules for n in layers.buffer_names(m)]


def _untied(module, tensors):
    """`tensors` with the given value of a tied parameter or buffer under all of its names (torch's rule)."""
    names_of = {}
    for name, value in _named_tensors(module):
        names_of.setdefault(id(value), set()).add(name)
    untied = dict(tensors)
    for names in names_of.values():
        given = names.intersection(tensors)
        if len(names) < 2 or not given:
            continue
        if len({id(tensors[n]) for n in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, which are tied. "
                             "Consider using tie_weights=False")
        untied.update(dict.fromkeys(names, tensors[next(iter(given))]))
    return untied


_MISSING = object()  # an attribute the module did not have, set for the call and deleted after


def _owner(module, name):
    """(the module that holds the dotted `name`, its last part)."""
    *path, attr = name.split(".")
    owner = module
    for part in path:
        if not hasattr(owner, part):
            raise AttributeError(f"{type(owner).__name__} has no attribute `{part}`")
        owner = getattr(owner, part)
        if not isinstance(owner, layers.Layer):
            raise TypeError(f"submodule `{part}`: {type(owner).__name__} is not a tinypytorch.nn.Module")
    return owner, attr


def _swap(module, name, value):
    """Put `value` in the place of `name`, bypassing the module's registration (a Parameter's slot takes any
    Variable, as torch's _parameters does during the call); returns what was there."""
    owner, attr = _owner(module, name)
    old = owner.__dict__.get(attr, _MISSING)
    if attr in layers.buffer_names(owner) and value is not _MISSING:
        if isinstance(value, Variable):
            if is_batched(value):  # (its .data is no array: the module would fail, and putting it back too)
                raise NotImplementedError(f"functional_call: buffer '{name}' is given a Variable batched by vmap; "
                                          "tinypytorch's buffers are arrays, which vmap does not batch (torch's "
                                          "would be): pass the buffers unbatched (in_dims None)")
            if value.requires_grad and is_grad_enabled():
                raise NotImplementedError(f"functional_call: buffer '{name}' is given a Variable that requires grad; "
                                          "tinypytorch's buffers are arrays, which no gradient reaches (torch's "
                                          "would get one): pass it detached, or make it a parameter")
            value = value.data
        elif not isinstance(value, cuda.array_types):
            raise TypeError(f"functional_call: buffer '{name}' must be a Variable or an array, got "
                            f"{type(value).__name__}")
    elif value is not _MISSING and value is not None and not isinstance(value, Variable):
        raise TypeError(f"functional_call: '{name}' must be a Variable, got {type(value).__name__}")
    if old is not _MISSING and old is not None and not isinstance(old, (Variable, *cuda.array_types)):
        raise TypeError(f"attribute `{attr}`: {type(old).__name__} is not a tensor")
    if value is _MISSING:
        owner.__dict__.pop(attr, None)
    else:
        object.__setattr__(owner, attr, value)
    return old


@contextlib.contextmanager
def _reparametrized(module, tensors, tie_weights, strict):
    untied = _untied(module, tensors) if tie_weights else tensors
    if strict:
        valid = {name for name, _ in _named_tensors(module)}
        errors = []
        if set(untied) - valid:
            errors.append(f"Unexpected key(s): {', '.join(map(repr, sorted(set(untied) - valid)))}.")
        if valid - set(untied):
            errors.append(f"Missing key(s): {', '.join(map(repr, sorted(valid - set(untied))))}.")
        if errors:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    originals = {}
    try:
        for name, value in untied.items():
            originals[name] = _swap(module, name, value)
        yield
    finally:  # put the module back as it was; what the call left in a place goes back to the caller's dict
        left = {name: _swap(module, name, old) for name, old in reversed(originals.items())}
        for name in tensors:
            value = left.get(name, _MISSING)
            given = tensors[name]
            if isinstance(value, cuda.array_types):  # a buffer: the given array or tensor's array, or a new one
                if value is not given and not (isinstance(given, Variable) and given.data is value):
                    tensors[name] = Variable(value, requires_grad=False)
            elif value is not _MISSING:
                tensors[name] = value


class _Reversing(threading.local):
    depth = 0  # how many reverse transforms are running their function now, in this thread


_reversing = _Reversing()


class _Call:
    """One call of a transformed function: its arguments, and the Variables to differentiate (`inputs`: the leaves
    of the arguments that argnums picks, flattened, with their structure `spec`); func run on other leaves in
    their places, forward (`push`) or recorded for backward passes (`record`, `pull`); the result nested."""

    def __init__(self, func, args, argnums, has_aux, kwargs=None):
        self.func, self.args, self.argnums, self.has_aux, self.kwargs = func, args, argnums, has_aux, kwargs or {}
        self.positions = range(len(args)) if argnums is None else _positions(argnums, len(args))
        picked = args if argnums is None else _pick(args, argnums, self.positions)
        self.inputs, self.spec = tree_flatten(picked)
        self.aux, self.nested = None, False

    def call(self, leaves, api):
        """func on the arguments with `leaves` in the inputs' places; its output, its aux kept aside (has_aux)."""
        picked = tree_unflatten(leaves, self.spec)
        args = list(self.args)
        for position, tree in zip(self.positions, (picked,) if isinstance(self.argnums, int) else picked):
            args[position] = tree
        output = self.func(*args, **self.kwargs)
        if self.has_aux:
            if not (isinstance(output, tuple) and len(output) == 2):
                raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True")
            output, self.aux = output
            for leaf in tree_flatten(self.aux)[0]:
                if not isinstance(leaf, Variable):
                    raise RuntimeError(f"Expected tensors, got unsupported type {type(leaf)}")
        return output

    def flat_outputs(self, output, api, floating=False):
        """The output's leaves, after PyTorch's checks that they are Variables (floating point, for reverse mode)."""
        leaves, self.out_spec = tree_flatten(output)
        if not leaves or (len(leaves) == 1 and leaves[0] is None):
            raise RuntimeError(f"{api}: Expected f to be a function that has non-empty output (got output = {leaves})")
        for y in leaves:
            if not isinstance(y, Variable):
                raise RuntimeError(f"{api}: expected f(*primals) to return only tensors, got unsupported type "
                                   f"{type(y)}")
            if floating and y.dtype.kind not in "fc":
                raise RuntimeError("vjp(f, ...): All outputs of f must be floating-point or complex Tensors, got "
                                   f"Tensor with dtype torch.{y.dtype.name}")
        return leaves

    def push(self, tangents, strict=False):
        """One forward-mode pass, input j made dual with tangents[j] (a dict): the outputs' tangents, flattened
        (their values in `outputs`)."""
        if forward_ad_state.open_dual_levels:
            raise NotImplementedError("tinypytorch.func: forward mode inside forward mode (jacfwd(jacfwd(f)), a jvp of "
                                      "a jvp) needs a second dual level, which forward_ad does not have (PyTorch "
                                      "nests levels); for second derivatives use jacfwd(jacrev(f)), as hessian does")
        if _reversing.depth:
            raise NotImplementedError("tinypytorch.func: reverse mode over forward mode (jacrev(jacfwd(f)), a grad of "
                                      "a jvp) is not offered: a tangent is an array that no graph records, so it "
                                      "cannot be differentiated; use forward over reverse, jacfwd(jacrev(f)), as "
                                      "hessian does")
        numbers = _open_levels()  # inside vmap: primals and tangents as batched as each other (_dual)
        with fwAD.dual_level():
            leaves = [_dual(x, tangents[j], numbers) if j in tangents else x for j, x in enumerate(self.inputs)]
            pairs = [_unpack(y, numbers) for y in self.flat_outputs(self.call(leaves, JVP), JVP)]
        if strict and any(tangent is None for _, tangent in pairs):
            raise RuntimeError("jvp(f, primals, tangents, strict=True): The output of f is independent of the "
                               "inputs. This is not allowed with strict=True.")
        self.outputs = [value for value, _ in pairs]
        # an output that does not depend on the inputs has a zero tangent, as in PyTorch
        return [_zeros(value, numbers) if tangent is None else tangent for value, tangent in pairs]

    def record(self):
        """func run once, its graph recorded (`run_recorded`): its outputs, flattened, after vjp's checks."""
        return self.flat_outputs(self.run_recorded(VJP), VJP, floating=True)

    def run_recorded(self, api):
        """func run once, its graph recorded, on new leaves in the inputs' places (on views of the inputs that
        require grad, so that the graph goes on to them); its output. The backward passes record their own
        graph (`nested`) when the output depends on a Variable that requires grad outside this call."""
        for x in self.inputs:
            if not isinstance(x, Variable):
                raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
        grad_enabled = is_grad_enabled()
        _reversing.depth += 1
        try:
            with enable_grad():
                self.levels = _open_levels()  # inside vmap: each input expanded to a leaf per sample (_physical_leaf)
                self.leaves = [_physical_leaf(x, self.levels) for x in self.inputs]
                output = self.call([rebatched(leaf, self.levels) for leaf in self.leaves], api)
        finally:
            _reversing.depth -= 1
        self.nested = grad_enabled and self._depends_on_outside(output)
        self.aux = tree_map(self.unwrap, self.aux)
        return output

    def _depends_on_outside(self, output):
        """Whether output depends on a Variable that requires grad, other than the leaves of `run_recorded`."""
        given = tree_flatten((self.args, self.kwargs))[0]
        if any(isinstance(v, Variable) and v.requires_grad for v in given):
            return True
        own = {id(leaf) for leaf in self.leaves}
        outputs = [innermost(y) for y in tree_flatten(output)[0]]  # (the graph is on the innermost Variables)
        todo, seen = [y for y in outputs if isinstance(y, Variable) and y.requires_grad], set()
        while todo:  # a walk of the graph (a function may use Variables it was not given)
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, Variable):
                if node.creator is None and id(node) not in own:
                    return True
                todo.append(node.creator)
            elif node is not None:
                todo.extend(next_node for next_node, _ in node.edges)
        return False

    def pull(self, outputs, cotangents, retain_graph=True, create_graph=None):
        """u^T J for each input: one backward pass from `outputs` seeded with `cotangents`; zeros where unused."""
        create_graph = self.nested and is_grad_enabled() if create_graph is None else create_graph
        pairs = [(y, u) for y, u in zip(outputs, cotangents) if y.requires_grad]
        grads = [None] * len(self.leaves)
        if pairs and self.leaves:
            # inside vmap: on the physical values, where the graph is (a cotangent batched at a level the graph
            # is not, as vmap of a vjp_fn gives it, stays batched: the backward formulas batch by their rules)
            pairs = [_physical_pair(y, u, self.levels) for y, u in pairs]
            with enable_grad():
                grads = gradients.grad([y for y, _ in pairs], self.leaves, [u for _, u in pairs],
                                       retain_graph=retain_graph, create_graph=create_graph, allow_unused=True)
        return [rebatched(zeros_like(x) if g is None else g, self.levels) for g, x in zip(grads, self.leaves)]

    def unwrap(self, value):
        """A Variable computed in `record`, as the caller gets it: detached unless nested (keeping its tangent, if
        an enclosing jvp gave it one)."""
        if self.nested or not isinstance(value, Variable):
            return value
        detached = value.detach()
        fwAD.keep_tangent(value, detached)
        return detached

    def nest(self, blocks):
        """blocks[i][j] (output leaf i by input leaf j) in PyTorch's structure: the output's, each leaf holding the
        inputs'; (jacobian, aux) with has_aux."""
        jacobian = tree_unflatten([tree_unflatten(row, self.spec) for row in blocks], self.out_spec)
        return (jacobian, self.aux) if self.has_aux else jacobian


def _open_levels():
    """The numbers of the vmap levels open now, outermost first ([] outside vmap)."""
    return [level.number for level in batching_state.levels]


def _physical_leaf(x, numbers):
    """What a reverse transform differentiates for input x: outside vmap, a new leaf on x (or a view, if x
    requires grad); inside vmap, the same made of x batched at every open level (`numbers`), on the physical
    value. A per-sample gradient is the gradient with respect to the sample's own copy of x: so an argument
    that every sample shares is expanded first, and backward gives each sample its gradient."""
    x = materialized(x, numbers)
    return Reshape(x.shape)(x) if x.requires_grad else _leaf(x)


def _physical_pair(y, u, numbers):
    """An output and its cotangent on the physical values of levels `numbers` (u None: ones, as grad seeds)."""
    y = materialized(y, numbers)
    if u is None and numbers:  # (a physical y of a scalar function has a value per sample)
        return y, Variable(get_array_module(y.data).ones(y.shape, dtype=y.data.dtype), requires_grad=False)
    return y, (u if u is None else materialized(u, numbers))


def _dual(x, tangent, numbers):
    """x made dual with `tangent` (forward mode); inside vmap on the physical values of every open level, where
    both have the same shape (a primal that every sample shares expanded), then batched again."""
    return rebatched(fwAD.make_dual(materialized(x, numbers), materialized(tangent, numbers)), numbers)


def _unpack(y, numbers):
    """(value, tangent) of output y (forward mode), batched again as y's physical value was (tangent None: zero)."""
    value, tangent = fwAD.unpack_dual(materialized(y, numbers))
    return rebatched(value, numbers), (tangent if tangent is None else rebatched(tangent, numbers))


def _zeros(x, numbers):
    """Zeros shaped as x (a physical leaf inside vmap: batched again)."""
    return rebatched(zeros_like(materialized(x, numbers)), numbers)


def _leaf(x):
    """A leaf that requires grad, on x's data; with x's tangent, if an enclosing jvp gave it one (forward over
    reverse: jacfwd(jacrev(f)), a jvp of a gradient)."""
    leaf = x.detach().requires_grad_()
    fwAD.keep_tangent(x, leaf)
    return leaf


def _positions(argnums, count):
    """The positions argnums picks among `count` arguments, checked as PyTorch checks them."""
    if not isinstance(argnums, (int, tuple)):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    positions = []
    for argnum in argnums if isinstance(argnums, tuple) else (argnums,):
        if not isinstance(argnum, int):
            raise RuntimeError(f"argnum must be int, got: {type(argnum)}")
        if not -count <= argnum < count:
            raise RuntimeError(f"Got argnum={argnum}, but only {count} positional inputs")
        positions.append(argnum % count)
    if isinstance(argnums, tuple) and not positions:
        raise RuntimeError("argnums must be non-empty")
    if len(set(positions)) != len(positions):
        raise RuntimeError(f"argnums elements must be unique, got {tuple(positions)}")
    return positions


def _pick(args, argnums, positions):
    """The arguments argnums picks: one argument for an int, a tuple of them for a tuple."""
    return args[positions[0]] if isinstance(argnums, int) else tuple(args[p] for p in positions)


def _check_cotangents(cotangents, outputs):
    """vjp_fn's cotangents: Variables (or None) shaped as the outputs they seed, or PyTorch's errors."""
    for u in cotangents:
        if u is not None and not isinstance(u, Variable):
            raise TypeError(f"gradients can be either Tensors or None, but got {type(u).__name__}")
    pairs = [(y, u) for y, u in zip(outputs, cotangents) if y.requires_grad]
    for i, (y, u) in enumerate(pairs):
        if u is not None and u.shape != y.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {u.shape} and output[{i}] "
                               f"has a shape of {y.shape}.")


def _check_chunk_size(chunk_size):
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")


def _check_randomness(randomness):
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got {randomness}")


def _basis(x):
    """The unit vectors of x's elements, each shaped as x: (x.numel(),) + x.shape, an identity matrix reshaped."""
    n = x.numel()
    xp = get_array_module(innermost(x).data)
    return Variable(xp.eye(n, dtype=innermost(x).data.dtype).reshape((n,) + tuple(x.shape)), requires_grad=False)


def _first(tree):
    """The first of the batch of each leaf of `tree` (a value that is the same for every sample)."""
    return tree_map(lambda leaf: leaf[0] if isinstance(leaf, Variable) else leaf, tree)


def _side_by_side(columns, input_shape):
    """One output's columns J e_k, for every element k of one input, stacked in front (vmap's batch dim): moved
    behind, then output's + input's shape."""
    moved = movedim(columns, 0, -1) if columns.ndim else columns
    return reshape(moved, tuple(columns.shape[1:]) + tuple(input_shape))
