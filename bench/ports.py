"""PyTorch ports of the networks in networks.py and of tinypytorch's reversible Functions, with the same weights.

The memory benchmarks (bench_memory.py, bench_gpu.py) run each measurement in both frameworks on
these twins; tests/test_bench_memory.py checks that each gives tinypytorch's loss and gradients.
The reversible Functions are ports of the algorithms, written as torch.autograd.Functions:
TorchReversibleSequentialFunction (ReversibleSequential's), TorchReverseFunction (RevCol's ReverseFunction,
for L levels) and TorchReversibleColumnsFunction (ReversibleColumns': every column as one Function).
"""
import torch
import torch.utils.checkpoint

from from_tests import torch_linear, torch_twin
from networks import segments_for


def torch_mlp_twin(model):
    """networks.build_mlp's MLP in PyTorch: its Linear layers with tanh between them, the same weights and dtype."""
    return torch_twin(model, torch.nn.Tanh)


def torch_layer_functions(twin):
    """The twin as `depth` modules, one per Linear layer: Sequential(Linear, Tanh), the last Linear alone."""
    modules = list(twin)
    return [torch.nn.Sequential(*modules[i:i + 2]) for i in range(0, len(modules) - 1, 2)] + [modules[-1]]


def loss_torch(twin, x, target, segments=None):
    x = torch.from_numpy(x)
    if segments is None:
        y = twin(x)
    else:
        y = torch.utils.checkpoint.checkpoint_sequential(torch_layer_functions(twin), segments, x, use_reentrant=False)
    return torch.nn.functional.mse_loss(y, torch.from_numpy(target))


class TorchCoupling(torch.nn.Module):
    """AdditiveCoupling in PyTorch: y1 = x1 + f(x2), y2 = x2 + g(y1); and its inverse."""

    def __init__(self, f, g):
        super().__init__()
        self.f, self.g = f, g

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=-1)
        y1 = x1 + self.f(x2)
        return torch.cat([y1, x2 + self.g(y1)], dim=-1)

    def inverse(self, y):
        y1, y2 = y.chunk(2, dim=-1)
        x2 = y2 - self.g(y1)
        return torch.cat([y1 - self.f(x2), x2], dim=-1)


class TorchReversibleSequentialFunction(torch.autograd.Function):
    """tinypytorch's ReversibleSequentialFunction in PyTorch: the blocks run under no_grad, only the output is saved;
    backward walks the blocks in reverse, computing each block's input from its output, running the block
    again with the graph recorded and backpropagating through it.

    One difference, PyTorch's reversible libraries' way (RevCol's ReverseFunction, MemCNN): each block's
    parameters get their gradients into .grad as that block's backward ends (torch.autograd.backward),
    where tinypytorch's sends them on to the running pass through the graph as that block is done
    (current_pass().send). Either way a hook lets each block's gradients go when they are complete. The blocks
    draw no random numbers: no RNG state is kept.
    """

    @staticmethod
    def forward(ctx, x, blocks, *params):
        ctx.blocks = blocks
        with torch.no_grad():
            for block in blocks:
                x = block(x)
        ctx.save_for_backward(x)  # the output, and nothing else
        return x

    @staticmethod
    def backward(ctx, gy):
        (y,) = ctx.saved_tensors
        for block in reversed(ctx.blocks):
            with torch.no_grad():
                x = block.inverse(y)
            leaf = x.detach().requires_grad_()
            with torch.enable_grad():
                output = block(leaf)
            torch.autograd.backward(output, gy)  # the block's parameters' gradients go into .grad now
            gy, y = leaf.grad, x
            del output, leaf
        return (gy if ctx.needs_input_grad[0] else None, None, *[None] * (len(ctx.needs_input_grad) - 2))


def torch_coupling_twin(net):
    """A ModuleList of TorchCoupling blocks with the weights of `net`'s blocks (f, g: Sequential(Linear, Tanh))."""
    return torch.nn.ModuleList(
        TorchCoupling(*(torch.nn.Sequential(torch_linear(half.linear), torch.nn.Tanh()) for half in (block.f, block.g)))
        for block in net.blocks)


def coupling_output_torch(twin, x, configuration):
    """The coupling stack's twin on tensor x: its blocks plainly, in √N checkpointed segments, or reversibly."""
    if configuration == "reversible":
        return TorchReversibleSequentialFunction.apply(x, tuple(twin), *twin.parameters())
    if configuration == "sqrt":
        return torch.utils.checkpoint.checkpoint_sequential(list(twin), segments_for("sqrt", len(twin)), x,
                                                            use_reentrant=False)
    for block in twin:
        x = block(x)
    return x


def loss_coupling_torch(twin, x, target, configuration):
    """loss_coupling_tinypytorch's twin: x and target NumPy arrays."""
    return torch.nn.functional.mse_loss(coupling_output_torch(twin, torch.from_numpy(x), configuration),
                                        torch.from_numpy(target))


class TorchLevel(torch.nn.Module):
    def __init__(self, below, above):
        super().__init__()
        self.below, self.above = below, above

    def forward(self, below, above):
        h = self.below(below)
        if self.above is not None:
            h = h + self.above(above)
        return torch.tanh(h)


class TorchColumn(torch.nn.Module):
    def __init__(self, levels, alphas):
        super().__init__()
        self.levels, self.alphas = torch.nn.ModuleList(levels), torch.nn.ParameterList(alphas)

    def forward(self, x, cs, reversible):
        if reversible:
            return TorchReverseFunction.apply(self, x, *cs, *self.parameters())
        new = []  # RevCol's _forward_nonreverse, in tinypytorch's order of operations
        for i, (level, alpha) in enumerate(zip(self.levels, self.alphas)):
            new.append(level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < len(cs) else None) + alpha * cs[i])
        return tuple(new)


def torch_column_forward(column, x, cs):
    """One column under no_grad, levels bottom-up: its new c's (RevCol's ReverseFunction.forward)."""
    n, new = len(column.levels), []
    with torch.no_grad():
        for i, (level, alpha) in enumerate(zip(column.levels, column.alphas)):
            new.append(level(x if i == 0 else new[-1], cs[i + 1] if i + 1 < n else None) + alpha * cs[i])
    return new


def torch_column_backward(column, x, new, gys):
    """One column's backward, levels top-down (RevCol's ReverseFunction.backward): the gradient of x, of each old
    c (the levels' parameters' and the alphas' into .grad), and the old c's computed back."""
    n = len(new)
    total = [torch.zeros_like(c) if g is None else g for g, c in zip(gys, new)]  # whole gradient of c_i'
    old = [None] * n
    g_from_below = [0] * n  # gradient of the old c_i through level i - 1 of this column
    g_x = None
    for i in reversed(range(n)):
        below = (x if i == 0 else new[i - 1]).detach().requires_grad_()
        above = old[i + 1].detach().requires_grad_() if i + 1 < n else None
        alpha = column.alphas[i]
        with torch.enable_grad():
            out = column.levels[i](below, above)
        torch.autograd.backward(out, total[i])
        with torch.no_grad():
            old[i] = (new[i] - out) / alpha  # c_i = (c_i' - l_i(.)) / alpha_i
        with torch.enable_grad():
            torch.autograd.backward(old[i] * alpha, total[i])  # alpha_i's gradient: sum of g c_i
        if above is not None:
            g_from_below[i + 1] = g_from_below[i + 1] + above.grad
        if i > 0:
            total[i - 1] = total[i - 1] + below.grad
        else:
            g_x = below.grad
        del out, below, above
    with torch.no_grad():
        g_old = [alpha * total[i] + g_from_below[i] for i, alpha in enumerate(column.alphas)]
    return g_x, g_old, old


class TorchReverseFunction(torch.autograd.Function):
    """RevCol's ReverseFunction (models/revcol_function.py) for L levels, as tinypytorch's computes it.

    Forward: the levels bottom-up under no_grad; saved: x and the new c's. Backward, levels top-down:
    recompute level i from the saved c_{i-1}' and the reconstructed c_{i+1} (leaves), backpropagate the
    whole gradient of c_i' through it (parameters into .grad, as RevCol does), reconstruct
    c_i = (c_i' - l_i(.)) / alpha_i, and alpha_i's gradient from it. No RNG state: the levels draw nothing.
    """

    @staticmethod
    def forward(ctx, column, x, *rest):
        new = torch_column_forward(column, x, rest[:len(column.levels)])
        ctx.column = column
        ctx.save_for_backward(x, *new)  # x and the new c's: all a column keeps
        return tuple(new)

    @staticmethod
    def backward(ctx, *gys):
        x, *new = ctx.saved_tensors
        n, needs = len(new), ctx.needs_input_grad
        g_x, g_old, _ = torch_column_backward(ctx.column, x, new, gys)
        g_old = [g if needs[2 + i] else None for i, g in enumerate(g_old)]
        return (None, g_x if needs[1] else None, *g_old, *[None] * (len(needs) - 2 - n))


class TorchReversibleColumnsFunction(torch.autograd.Function):
    """tinypytorch's ReversibleColumnsFunction in PyTorch: every column as one Function.

    Forward: the columns one after another under no_grad; saved: x and the last column's c's only. Backward:
    from the last column to the first, each column's backward as TorchReverseFunction's, its computed-back
    old c's handed to the column before as that column's new c's (and the gradients of the old c's as the
    gradients of its new c's). The gradient of x is summed over the columns.
    """

    @staticmethod
    def forward(ctx, columns, x, *rest):
        cs = rest[:len(columns[0].levels)]
        for column in columns:
            cs = torch_column_forward(column, x, cs)
        ctx.columns = columns
        ctx.save_for_backward(x, *cs)  # x and the last column's c's, however many columns
        return tuple(cs)

    @staticmethod
    def backward(ctx, *gys):
        x, *new = ctx.saved_tensors
        n, needs = len(new), ctx.needs_input_grad
        g_x = None
        for column in reversed(ctx.columns):
            g, gys, new = torch_column_backward(column, x, new, gys)
            g_x = g if g_x is None else (g_x if g is None else g_x + g)
        del new  # the first column's old c's, computed back
        g_old = [g if needs[2 + i] else None for i, g in enumerate(gys)]
        return (None, g_x if needs[1] else None, *g_old, *[None] * (len(needs) - 2 - n))


def torch_revcol_twin(net):
    """The columns of `net` (a RevColNet) in PyTorch, the same weights and alphas."""
    def level(tiny):
        return TorchLevel(torch_linear(tiny.below), torch_linear(tiny.above))

    return torch.nn.ModuleList(
        TorchColumn([level(tiny) for tiny in column.levels],
                    [torch.nn.Parameter(torch.from_numpy(alpha.data.copy())) for alpha in column.alphas])
        for column in net.columns)


def revcol_parameter_pairs(net, twin):
    """[(tinypytorch Parameter, torch Parameter)] of a RevColNet and its twin, paired by place."""
    pairs = []
    for column, twin_column in zip(net.columns, twin, strict=True):
        for level, alpha, twin_level, twin_alpha in zip(column.levels, column.alphas, twin_column.levels,
                                                        twin_column.alphas, strict=True):
            for name in ("below", "above"):
                layer, twin_layer = getattr(level, name), getattr(twin_level, name)
                if layer is not None:
                    pairs += [(layer.weight, twin_layer.weight), (layer.bias, twin_layer.bias)]
            pairs.append((alpha, twin_alpha))
    return pairs


def loss_revcol_torch(twin, x, states, target, configuration):
    cs = tuple(map(torch.from_numpy, states))
    x = torch.from_numpy(x)
    if configuration == "one":
        cs = TorchReversibleColumnsFunction.apply(tuple(twin), x, *cs, *twin.parameters())
    else:
        for column in twin:
            cs = column(x, cs, configuration == "reversible")
    return torch.nn.functional.mse_loss(cs[-1], torch.from_numpy(target))
