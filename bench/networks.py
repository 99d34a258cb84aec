"""The networks the memory benchmarks run in tinypytorch, and how checkpoint_sequential splits them.

- an MLP of `depth` Linear layers width -> width, tanh between them (memory.md, checkpoint.md);
- a RevNet stack: N AdditiveCoupling blocks on features of `width` split into two halves, f and g
  each a Linear(half, half) with tanh after it, run plainly, in round(√N) checkpointed segments or
  reversibly (ReversibleSequential: one Function that keeps only the output) (reversible.md, gpu.md);
- RevCol: N columns (RevColumn) of L levels, level i: c_i' = tanh(Linear(below) + Linear(above)) +
  alpha_i c_i (below: c_{i-1}' of this column, x for level 0; above: c_{i+1} of the column before,
  none for the top level), the first column's states zero; the loss on the last column's top level;
  non-reversible, reversible per column (RevCol's ReverseFunction) or as one Function
  (ReversibleColumns) (reversible.md).

Each loss is a mean squared error against a fixed target. ports.py holds their PyTorch twins.
"""
import math

import numpy as np

import tinypytorch
from tinypytorch import Variable
from tinypytorch.layers import MLP, Layer, Linear, Parameter
from tinypytorch.reversible import AdditiveCoupling, ReversibleColumns, ReversibleSequential, RevColumn
from tinypytorch.utils.checkpoint import checkpoint_sequential

DTYPES = {"float32": np.float32, "float64": np.float64}


def _cast(layer, dtype):
    for p in layer.params():
        p.data = p.data.astype(dtype)  # Linear draws float64 weights; float32 gets them rounded
    return layer


def build_mlp(depth, width, dtype, seed=0):
    """tinypytorch's MLP of `depth` Linear layers of `width` -> `width`, tanh between them."""
    return _cast(MLP((width,) * (depth + 1), activation=tinypytorch.tanh, rng=np.random.default_rng(seed)), dtype)


def batch_and_target(batch, width, dtype, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, width)).astype(dtype), rng.standard_normal((batch, width)).astype(dtype)


def layer_functions(model):
    """tinypytorch's MLP as `depth` functions, one per Linear layer: x -> tanh(Linear(x)), the last Linear alone."""
    def with_tanh(layer):
        return lambda x: model.activation(layer(x))

    return [with_tanh(layer) for layer in model.layers[:-1]] + [model.layers[-1]]


def loss_tinypytorch(model, x, target, segments=None):
    """The loss of `model` on `x`: plainly, or (segments given) through checkpoint_sequential of its layers."""
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    if segments is None:
        y = model(x)
    else:
        y = checkpoint_sequential(layer_functions(model), segments, x, use_reentrant=False)
    return tinypytorch.mean_squared_error(y, target)


def segments_for(configuration, depth):
    """checkpoint_sequential's `segments` for a configuration; None: no checkpointing at all."""
    return {"plain": None, "sqrt": round(math.sqrt(depth)), "every": depth}[configuration]


def segment_layout(depth, segments):
    """(k, s, m): k segments, the first k - 1 of s layers checkpointed, the last of m layers run plainly.

    PyTorch's rule, which both frameworks follow: k segments of depth // k layers, the last one taking the
    remainder and running plainly (backward needs its activations at once).
    """
    if segments is None:
        return 1, depth, depth
    size = depth // segments
    return segments, size, depth - (segments - 1) * size


class LinearTanh(Layer):
    """f or g of a coupling block: tanh(Linear(size, size))."""

    def __init__(self, size, rng):
        super().__init__()
        self.linear = Linear(size, size, rng=rng)

    def forward(self, x):
        return tinypytorch.tanh(self.linear(x))


def build_coupling_stack(depth, width, dtype, seed=0):
    """ReversibleSequential of `depth` AdditiveCoupling blocks on `width` features; its .blocks run plainly too."""
    rng = np.random.default_rng(seed)
    blocks = [AdditiveCoupling(LinearTanh(width // 2, rng), LinearTanh(width // 2, rng)) for _ in range(depth)]
    return _cast(ReversibleSequential(*blocks), dtype)


COUPLING_CONFIGURATIONS = {"plain": "plain", "sqrt": "√N segments", "reversible": "reversible"}


def loss_coupling_tinypytorch(net, x, target, configuration):
    """The loss of the coupling stack `net` on x: its blocks plainly, in √N checkpointed segments, or reversibly."""
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    if configuration == "reversible":
        y = net(x)
    elif configuration == "sqrt":
        y = checkpoint_sequential(net.blocks, segments_for("sqrt", len(net.blocks)), x, use_reentrant=False)
    else:
        y = x
        for block in net.blocks:
            y = block(y)
    return tinypytorch.mean_squared_error(y, target)


class Level(Layer):
    """A RevCol level: tanh(Linear(below) + Linear(above)); the top level has no level above."""

    def __init__(self, width, top, rng):
        super().__init__()
        self.below = Linear(width, width, rng=rng)
        self.above = None if top else Linear(width, width, rng=rng)

    def forward(self, below, above):
        h = self.below(below)
        if self.above is not None:
            h = h + self.above(above)
        return tinypytorch.tanh(h)


class RevColNet(Layer):
    """`columns` RevColumns of `levels` levels on `width` features; alpha starts at 0.5, as in RevCol."""

    def __init__(self, columns, levels, width, dtype, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.columns = []
        for j in range(columns):
            column = RevColumn([Level(width, i == levels - 1, rng) for i in range(levels)],
                               [Parameter(np.full(width, 0.5)) for _ in range(levels)])
            setattr(self, f"column{j}", column)
            self.columns.append(column)
        self.joined = ReversibleColumns(*self.columns)  # the same columns as one Function (params() counts each once)
        _cast(self, dtype)

    def forward(self, x, states, configuration):
        """The last column's top level; `states`: the first column's c's; configuration: a REVCOL_CONFIGURATIONS key."""
        for column in self.columns:
            column.reversible = configuration != "plain"
        if configuration == "one":
            return self.joined(x, *states)[-1]
        cs = states
        for column in self.columns:
            cs = column(x, *cs)
        return cs[-1]


REVCOL_CONFIGURATIONS = {"plain": "non-reversible", "reversible": "reversible, per column",
                         "one": "reversible, one Function"}


def revcol_states(levels, batch, width, dtype):
    """The first column's states: zeros (RevCol's int 0), made once, as the batch: no new memory."""
    return [np.zeros((batch, width), dtype=dtype) for _ in range(levels)]


def loss_revcol_tinypytorch(net, x, states, target, configuration):
    x, target = Variable(x, requires_grad=False), Variable(target, requires_grad=False)
    states = [Variable(c, requires_grad=False) for c in states]
    return tinypytorch.mean_squared_error(net(x, states, configuration), target)
