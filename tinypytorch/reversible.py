"""Reversible networks (steps 46-47): backward computes each block's input back from its output.

    block = AdditiveCoupling(f, g)            # RevNet: y1 = x1 + f(x2), y2 = x2 + g(y1)
    net = ReversibleSequential(block1, block2, ...)
    c = RevColumn(levels, alphas)(x, *c_old)  # RevCol: c_i' = l_i(c_{i-1}', c_{i+1}) + alpha_i c_i

Checkpointing (steps 41-45) keeps each segment's input. A reversible block needs not even
that: its input follows from its output, so a whole stack keeps only its final output,
and memory for activations stays the same however deep the stack. Backward walks the
blocks in reverse: compute the block's input from its output, run the block again with
the graph recorded, backpropagate through it (`autograd.grad`, a pass inside the running
one), drop it. Random numbers are replayed as in checkpointing (`tinypytorch.recomputation`),
and the parameters' gradients are returned through the graph, so `autograd.grad` with respect
to them works.
"""
from tinypytorch import autograd, random
from tinypytorch.autograd.gradients import current_pass
from tinypytorch.core import Function, Variable, as_variable, gradient_edge, increment_version
from tinypytorch.grad_mode import enable_grad, is_grad_enabled, no_grad
from tinypytorch.cuda import get_array_module
from tinypytorch.functions import concatenate, sum_to
from tinypytorch.layers import Layer, Parameter
from tinypytorch.recomputation import draw_as, replaying, rng_state


class _Gradients:
    """The parameters' gradients a reversible Function's backward builds up, block by block (or column by column).

    A parameter's gradient is complete after the last block that uses it (the first, in forward order):
    then it is sent on to the running pass at once (`current_pass().send`), as PyTorch's reversible
    libraries write each block's `.grad`, so that the stack never holds every block's gradients.
    What could not be sent is returned by backward, as `returned`.
    """

    def __init__(self, function, groups):
        self.function, self.sums, self.returned = function, {}, {}
        self.running = current_pass()  # None when backward is called by hand: then everything is returned
        self.input_index = {id(p): i for i, p in enumerate(function.params, start=function.first_param_input)}
        self.complete_after = {}  # id(p) -> index of the group after which p's gradient is whole
        for k, group in enumerate(groups):
            for p in group:
                self.complete_after.setdefault(id(p), k)

    def add(self, k, params, grads):
        """Group k's gradients (None: none), in backward order; send those now complete."""
        for p, g in zip(params, grads):
            if g is not None:
                self.sums[id(p)] = g if id(p) not in self.sums else self.sums[id(p)] + g
        for p in params:
            if self.complete_after[id(p)] == k and id(p) in self.sums:
                g = self.sums.pop(id(p))
                if self.running is None:
                    self.returned[id(p)] = g
                else:
                    self.running.send(self.function, self.input_index[id(p)], g)

    def result(self):
        return [self.returned.get(id(p)) for p in self.function.params]


def _inner_grad(output, wrt, gy):
    """The gradients of `output` (weighted by gy) with respect to `wrt` (None where none), by `autograd.grad`:
    a backward pass inside the running one.

    The running pass gathers: the leaves' hooks do not run in the inner pass, since its gradients
    go on to the running pass through the Function's edges, and the parameters' hooks run there, once.
    """
    wanted = [x for x in wrt if x.requires_grad]  # a frozen parameter gets no gradient
    if not output.requires_grad or not wanted:
        return [None] * len(wrt)
    running = current_pass()
    if running is None:  # backward called by hand: no pass to gather into
        found = autograd.grad(output, wanted, gy, allow_unused=True)
    else:
        with running.gathering():
            found = autograd.grad(output, wanted, gy, allow_unused=True)
    if len(wanted) == len(wrt):
        return list(found)
    found = dict(zip(map(id, wanted), found))
    return [found.get(id(x)) for x in wrt]


def _refuse_unknown_inputs(output, known, since, what, remedy):
    """Raise unless the graph recorded behind `output` reads, of what requires grad, only the Variables in `known`.

    A block run again in backward gets the gradients of its input leaf and its parameters
    (`known`) and nothing else. A plain function that closes over a layer hides that layer's
    weights from `params()`: the gradient meant for them would be lost without a word. So the
    recomputed graph is walked (its functions were recorded after the reversible Function,
    `since`, its sequence number): a leaf not in `known`, or a function recorded before it (a
    Variable computed outside the block), is refused.
    """
    known = {id(gradient_edge(v)[0]) for v in known}
    seen, todo = set(), [gradient_edge(output)[0]]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Variable) and id(node) in known:
            continue
        if isinstance(node, Variable) or node.sequence_nr <= since:
            raise RuntimeError(f"{what} uses a Variable that requires grad but is not among its parameters, so "
                               f"backward could not give it a gradient; {remedy}")
        todo.extend(n for n, _ in node.edges)


# ----- step 46: RevNet's additive coupling --------------------------------------------------------

class AdditiveCoupling(Layer):
    """y1 = x1 + f(x2), y2 = x2 + g(y1), on the two halves of the features (the last axis).

    `inverse` gives x2 = y2 - g(y1), x1 = y1 - f(x2). f and g may be any layers that keep the
    shape of a half; they need not be invertible themselves.
    """

    def __init__(self, f, g):
        super().__init__()
        for name, function in (("f", f), ("g", g)):
            if not callable(function):
                raise TypeError(f"AdditiveCoupling: {name} must be callable, got {type(function).__name__}")
        self.f, self.g = f, g

    def halves(self, x):
        n = x.shape[-1]
        if n % 2:
            raise ValueError(f"AdditiveCoupling: {n} features cannot be split into two halves of equal size")
        return x[..., : n // 2], x[..., n // 2:]

    def apply(self, function, name, x, states=None, replay=None):
        """function(x), checked to keep x's shape; its RNG state recorded (forward) or restored (backward)."""
        if states is not None:
            states.append(rng_state())
        if replay is not None:
            draw_as(replay)
        y = function(x)
        if y.shape != x.shape:
            raise ValueError(f"AdditiveCoupling: {name} changed the shape of its input from {tuple(x.shape)} to {tuple(y.shape)}; "
                             "a coupling needs both halves to keep their shape")
        return y

    def forward(self, x, states=None, replay=None):
        """The block; `states` (a list) records the RNG state before f and g, `replay` restores them."""
        x1, x2 = self.halves(as_variable(x, "AdditiveCoupling"))
        y1 = x1 + self.apply(self.f, "f", x2, states, replay and replay[0])
        y2 = x2 + self.apply(self.g, "g", y1, states, replay and replay[1])
        return concatenate([y1, y2], axis=-1)

    def inverse(self, y, replay=None):
        """The input that gives output y; with `replay`, g and f draw as they did in forward."""
        y1, y2 = self.halves(as_variable(y, "AdditiveCoupling.inverse"))
        x2 = y2 - self.apply(self.g, "g", y1, replay=replay and replay[1])
        x1 = y1 - self.apply(self.f, "f", x2, replay=replay and replay[0])
        return concatenate([x1, x2], axis=-1)


class ReversibleSequentialFunction(Function):  # step 46
    """A stack of invertible blocks as one node: its inputs are x and every parameter of the blocks."""

    first_param_input = 1  # inputs: x, then the parameters

    def __init__(self, blocks, params):
        self.blocks, self.params = blocks, params

    def forward(self, x, *param_arrays):
        self.states = []
        y = Variable(x, requires_grad=False)
        with no_grad():  # nothing inside is recorded or saved
            for block in self.blocks:
                self.states.append([])
                y = block.forward(y, self.states[-1])
        self.save_for_backward(y.data)  # the output, and nothing else (step 35: kept as an array)
        return y.data

    def backward(self, gy):
        (y,) = self.saved_tensors
        y = y.data
        grads = _Gradients(self, [list(block.params()) for block in self.blocks])
        with random.fork_rng():  # the outer random stream continues as if backward drew nothing
            for k in reversed(range(len(self.blocks))):
                y, gy, param_grads = self.block_backward(k, y, gy)
                grads.add(k, list(self.blocks[k].params()), param_grads)  # each block's complete gradients go on now
        return (gy, *grads.result())

    def block_backward(self, k, y, gy):
        """Block k, given its output y and y's gradient gy: its input x computed back, the block run again from
        x with the graph recorded, and backpropagated. Returns x, x's gradient and the parameters' gradients."""
        block, states = self.blocks[k], self.states[k]
        with replaying(None), no_grad():
            x = block.inverse(Variable(y, requires_grad=False), replay=states).data
        leaf = Variable(x, requires_grad=True)
        params = list(block.params())
        with replaying(None), enable_grad():
            output = block.forward(leaf, replay=states)
        _refuse_unknown_inputs(output, [leaf, *params], self.sequence_nr,
                              f"ReversibleSequential: block {k} ({type(block).__name__})",
                              "make f and g Layers, whose parameters are registered, not plain functions that "
                              "close over layers")
        results = _inner_grad(output, [leaf, *params], gy)
        return x, results[0], results[1:]


class ReversibleSequential(Layer):
    """Invertible blocks one after another, run as one Function that keeps only the final output (step 46)."""

    def __init__(self, *blocks):
        super().__init__()
        if not blocks:
            raise ValueError("ReversibleSequential: needs at least one block")
        for i, block in enumerate(blocks):
            if not callable(getattr(block, "inverse", None)) or not callable(getattr(block, "forward", None)):
                raise TypeError(f"ReversibleSequential: block {i} ({type(block).__name__}) is not invertible: "
                                "it needs forward and inverse methods")
            setattr(self, f"block{i}", block)
        self.blocks = list(blocks)

    def forward(self, x):
        x = as_variable(x, "ReversibleSequential")
        params = list(self.params())
        if not is_grad_enabled() or not (x.requires_grad or any(p.requires_grad for p in params)):
            for block in self.blocks:  # no graph wanted: just the blocks
                x = block(x)
            return x
        return ReversibleSequentialFunction(self.blocks, params)(x, *params)


# ----- step 47: RevCol's reversible columns --------------------------------------------------------

ALPHA_MIN = 1e-3  # RevCol keeps |alpha| at least this far from 0, its sign kept


def clamp_alpha(alpha):
    """RevCol's `_clamp_abs`: |alpha| >= 1e-3 with the sign kept, in place; an alpha of exactly 0 is refused."""
    xp = get_array_module(alpha.data)
    if xp.any(alpha.data == 0):
        raise ValueError("RevColumn: an alpha is 0; the column could not be inverted (c = (c' - l(.)) / alpha); "
                         "start alpha away from 0")
    if xp.any(xp.abs(alpha.data) < ALPHA_MIN):  # changed in place only when needed, as an in-place op (step 36)
        with no_grad():
            alpha.data[...] = xp.sign(alpha.data) * xp.maximum(xp.abs(alpha.data), ALPHA_MIN)
        increment_version(alpha)  # a change in place, as an optimizer step's


class RevColumn(Layer):
    """One reversible column of RevCol: L levels, c_i' = l_i(c_{i-1}', c_{i+1}) + alpha_i c_i.

    `levels[i]` is a callable of two Variables (the new lower level, or x for level 0; the old
    upper level, or None for the top) returning a Variable shaped like c_i; `alphas[i]` is a
    Parameter broadcast over c_i. Calling the column with x and the old c's returns the new c's,
    keeping for backward only x and the new c's (`reversible=True`), or everything, computed
    plainly (`reversible=False`, RevCol's `_forward_nonreverse`), for reference.
    """

    def __init__(self, levels, alphas, reversible=True):
        super().__init__()
        if len(levels) != len(alphas) or not levels:
            raise ValueError(f"RevColumn: {len(levels)} levels and {len(alphas)} alphas; one alpha per level")
        for i, (level, alpha) in enumerate(zip(levels, alphas)):
            if not callable(level):
                raise TypeError(f"RevColumn: level {i} must be callable, got {type(level).__name__}")
            if not isinstance(alpha, Parameter):
                raise TypeError(f"RevColumn: alpha {i} must be a Parameter, got {type(alpha).__name__}")
            setattr(self, f"level{i}", level)
            setattr(self, f"alpha{i}", alpha)
        self.levels, self.alphas, self.reversible = list(levels), list(alphas), reversible

    def level_params(self, i):
        level = self.levels[i]
        return list(level.params()) if isinstance(level, Layer) else []

    def forward(self, x, *cs):
        if len(cs) != len(self.levels):
            raise ValueError(f"RevColumn: {len(self.levels)} levels need {len(self.levels)} states c, got {len(cs)}")
        for alpha in self.alphas:
            clamp_alpha(alpha)
        x = as_variable(x, "RevColumn")
        cs = [as_variable(c, "RevColumn") for c in cs]
        params = [p for i in range(len(self.levels)) for p in self.level_params(i)]
        if not self.reversible or not is_grad_enabled():
            return tuple(self.plain(x, cs))
        function = RevColumnFunction(self)
        outputs = function(x, *cs, *self.alphas, *params)
        return tuple(outputs) if isinstance(outputs, list) else (outputs,)

    def plain(self, x, cs):
        """The column computed plainly, everything recorded: the reference the reversible run must equal."""
        new = []
        for i, (level, alpha) in enumerate(zip(self.levels, self.alphas)):
            below = x if i == 0 else new[-1]
            above = cs[i + 1] if i + 1 < len(cs) else None
            new.append(level(below, above) + alpha * cs[i])
        return new


def _column_forward(column, x, cs, alphas, states):
    """One column on arrays, under no_grad, bottom-up: its new c's; each level's RNG state appended to `states`."""
    n, new = len(column.levels), []
    with no_grad():
        for i, level in enumerate(column.levels):
            states.append(rng_state())
            below = Variable(x if i == 0 else new[-1], requires_grad=False)
            above = Variable(cs[i + 1], requires_grad=False) if i + 1 < n else None
            out = level(below, above).data
            if out.shape != cs[i].shape:
                raise ValueError(f"RevColumn: level {i} returned shape {out.shape} for a state of shape {cs[i].shape}")
            new.append(out + alphas[i] * cs[i])
    return new


_LEVEL_REMEDY = "make each level a Layer, whose parameters are registered, not a plain function that closes over layers"


def _level_backward(column, i, below, above, total, state, since, where):
    """Level i run again from fresh leaves `below` and `above` (arrays; above None for the top level), drawing
    as from `state`, with the graph recorded, and backpropagated from `total`, the whole gradient of c_i'.

    Returns the level's output (an array) and the gradients of below, of above (None for the top level)
    and of the level's parameters, as (parameter, gradient) pairs.
    """
    below = Variable(below, requires_grad=True)
    above = None if above is None else Variable(above, requires_grad=True)
    params = column.level_params(i)
    with replaying(state), enable_grad():
        out = column.levels[i](below, above)
    wrt = [below] + ([above] if above is not None else []) + params
    _refuse_unknown_inputs(out, wrt, since, f"{where}: level {i} ({type(column.levels[i]).__name__})", _LEVEL_REMEDY)
    results = _inner_grad(out, wrt, total)
    g_above = results[1] if above is not None else None
    return out.data, results[0], g_above, list(zip(params, results[len(wrt) - len(params):]))


def _accumulate(grads, p, g):
    """grads[id(p)] += g (g None: nothing)."""
    if g is not None:
        grads[id(p)] = g if id(p) not in grads else grads[id(p)] + g


def _column_backward(column, x, new, states, gys, since, where="RevColumn"):
    """One column's backward, top level down (RevCol's ReverseFunction.backward).

    x, new: arrays (the column's input and its new c's); gys: the gradients of the new c's (arrays or
    None); since: the sequence number of the Function running it. Returns the gradient of x (a Variable
    or None), of each old c (arrays), a dict id(parameter) -> gradient for the alphas and the levels'
    parameters, and the old c's computed back.
    """
    n = len(column.levels)
    alphas = [a.data for a in column.alphas]
    xp = get_array_module(x)
    total = [xp.zeros_like(c) if g is None else g for c, g in zip(new, gys)]  # T_i: all of c_i''s gradient
    old = [None] * n  # the old c's, computed back
    g_old_from_below = [xp.zeros_like(c) for c in new]  # gradient of old c_i through level i - 1
    grads, g_x = {}, None
    with random.fork_rng():
        for i in reversed(range(n)):
            above = old[i + 1] if i + 1 < n else None
            out, g_below, g_above, param_grads = _level_backward(column, i, x if i == 0 else new[i - 1], above,
                                                                 total[i], states[i], since, where)
            old[i] = (new[i] - out) / alphas[i]  # c_i = (c_i' - l_i(.)) / alpha_i
            if g_above is not None:
                g_old_from_below[i + 1] = g_old_from_below[i + 1] + g_above.data
            for p, g in param_grads:
                _accumulate(grads, p, g)
            g_alpha = sum_to(Variable(total[i] * old[i]), alphas[i].shape)  # d c_i'/d alpha_i = c_i
            _accumulate(grads, column.alphas[i], g_alpha)
            if i > 0:
                total[i - 1] = total[i - 1] + (0 if g_below is None else g_below.data)
            else:
                g_x = g_below
    g_old = [alphas[i] * total[i] + g_old_from_below[i] for i in range(n)]
    return g_x, g_old, grads, old


class RevColumnFunction(Function):  # step 47
    """One RevColumn as one node (RevCol's ReverseFunction): levels bottom-up in forward, top-down in backward."""

    def __init__(self, column):
        self.column = column

    def forward(self, x, *rest):
        n = len(self.column.levels)
        self.states = []
        new = _column_forward(self.column, x, rest[:n], rest[n:2 * n], self.states)
        self.save_for_backward(x, *new)  # x and the new c's: all a column keeps (RevCol's ctx.save_for_backward)
        return tuple(new)

    def backward(self, *gys):
        x, *new = [s.data for s in self.saved_tensors]
        gys = [None if g is None else g.data for g in gys]
        g_x, g_old, grads, old = _column_backward(self.column, x, new, self.states, gys, self.sequence_nr)
        self.reconstructed = old  # what the column computed back: c of the column before (a step prints it)
        column, n = self.column, len(self.column.levels)
        params = [*column.alphas, *[p for i in range(n) for p in column.level_params(i)]]
        return (g_x, *map(Variable, g_old), *[grads.get(id(p)) for p in params])


class ReversibleColumns(Layer):
    """RevColumns one after another as one Function that keeps x and the last column's c's only.

    Each RevColumn on its own keeps x and its new c's, and the next column's backward computes
    those very c's back: so a chain of columns keeps N L states where one column's would do. Run
    as one Function, backward hands each column's computed-back old c's to the column before
    as its new c's, and memory no longer grows with the number of columns.
    """

    def __init__(self, *columns):
        super().__init__()
        if not columns:
            raise ValueError("ReversibleColumns: needs at least one column")
        for k, column in enumerate(columns):
            if not isinstance(column, RevColumn):
                raise TypeError(f"ReversibleColumns: column {k} must be a RevColumn, got {type(column).__name__}")
            setattr(self, f"column{k}", column)
        self.columns = list(columns)

    def forward(self, x, *cs):
        x = as_variable(x, "ReversibleColumns")
        cs = [as_variable(c, "ReversibleColumns") for c in cs]
        if not all(column.reversible for column in self.columns) or not is_grad_enabled():
            for column in self.columns:
                cs = column(x, *cs)
            return tuple(cs)
        for column in self.columns:
            if len(cs) != len(column.levels):
                raise ValueError(f"RevColumn: {len(column.levels)} levels need {len(column.levels)} states c, "
                                 f"got {len(cs)}")
            for alpha in column.alphas:
                clamp_alpha(alpha)
        outputs = ReversibleColumnsFunction(self)(x, *cs, *self.params())
        return tuple(outputs) if isinstance(outputs, list) else (outputs,)


class ReversibleColumnsFunction(Function):
    """Every column of a ReversibleColumns: forward column after column, backward from the last to the first."""

    def __init__(self, stack):
        self.stack = stack
        self.params = list(stack.params())
        self.first_param_input = 1 + len(stack.columns[0].levels)  # inputs: x, the first column's c's, parameters

    def forward(self, x, *rest):
        cs = rest[:len(self.stack.columns[0].levels)]
        self.states = []
        for column in self.stack.columns:
            self.states.append([])
            cs = _column_forward(column, x, cs, [a.data for a in column.alphas], self.states[-1])
        self.save_for_backward(x, *cs)  # x and the last column's c's, however many columns
        return tuple(cs)

    def backward(self, *gys):
        x, *new = [s.data for s in self.saved_tensors]
        gys = [None if g is None else g.data for g in gys]
        columns = [list(column.params()) for column in self.stack.columns]
        grads, g_x = _Gradients(self, columns), None
        for k in reversed(range(len(columns))):
            column = self.stack.columns[k]
            g, gys, column_grads, new = _column_backward(column, x, new, self.states[k], gys, self.sequence_nr,
                                                        f"ReversibleColumns: column {k}")
            g_x = g if g_x is None else (g_x if g is None else g_x + g)
            grads.add(k, columns[k], [column_grads.get(id(p)) for p in columns[k]])  # this column's go on now
        self.reconstructed = new  # the first column's old c's, computed back (they were zeros in RevCol)
        return (g_x, *map(Variable, gys), *grads.result())


__all__ = ["AdditiveCoupling", "ReversibleSequential", "ReversibleSequentialFunction", "RevColumn", "RevColumnFunction",
           "ReversibleColumns", "ReversibleColumnsFunction", "clamp_alpha", "ALPHA_MIN"]
