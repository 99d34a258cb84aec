"""fully_shard composed with checkpoint (tinypytorch.utils.checkpoint): a checkpointed module runs its forward again in
backward, and must find its whole parameters there. On two processes, residual layers each fully_shard-ed and
checkpointed three ways (the parent checkpoints the fully_shard-ed layer, non-reentrant and reentrant; the layer
checkpoints its own body inside its forward) train as torch's fully_shard with torch.utils.checkpoint on a twin model,
and as one process on the whole batch; between steps every slot holds its shard again and no whole parameter is left
gathered, and after forward the checkpointed layers hold none.
"""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
from torch.distributed.fsdp import fully_shard as torch_fully_shard  # noqa: E402
from torch.utils.checkpoint import checkpoint as torch_checkpoint  # noqa: E402

from tinypytorch.distributed.fsdp import ShardedParameter, fully_shard  # noqa: E402
from tinypytorch.utils.checkpoint import checkpoint  # noqa: E402

WIDTH, DEPTH, STEPS = 5, 3, 3  # 5 rows: 3 + 2 on two ranks, so the shards are padded for the collectives
X = np.random.default_rng(0).standard_normal((8, 4))
Y = np.random.default_rng(1).standard_normal((8, 2))
WAYS = ("outside", "outside, reentrant", "inside")


def residual_class(fw):
    class Residual(fw.nn.Module):
        def __init__(self, inside):
            super().__init__()
            self.body = fw.nn.Sequential(fw.nn.Linear(WIDTH, WIDTH, dtype=fw.float64), fw.nn.Tanh())
            self.inside = inside

        def forward(self, x):
            if self.inside:  # the layer checkpoints its own body: the recomputation reads the layer's slots
                return x + (checkpoint if fw is tp else torch_checkpoint)(self.body, x, use_reentrant=False)
            return x + self.body(x)
    return Residual


def net_class(fw):
    class Net(fw.nn.Sequential):
        """Linear(4, 5), tanh, DEPTH residual layers, Linear(5, 2); with `way` "outside..." the residual layers are
        checkpointed here, by their parent."""
        way = "inside"

        def forward(self, x):
            for layer in self:
                if self.way.startswith("outside") and type(layer).__name__.endswith("Residual"):  # FSDPResidual too
                    run = checkpoint if fw is tp else torch_checkpoint
                    x = run(layer, x, use_reentrant=self.way.endswith("reentrant"))
                else:
                    x = layer(x)
            return x
    return Net


def net(fw, way):
    """The same weights in both frameworks."""
    tp.manual_seed(0)
    residual = residual_class(fw)
    linears = [tp.nn.Linear(i, o, dtype=tp.float64) for i, o in [(4, WIDTH)] + [(WIDTH, WIDTH)] * DEPTH + [(WIDTH, 2)]]
    model = net_class(fw)(fw.nn.Linear(4, WIDTH, dtype=fw.float64), fw.nn.Tanh(),
                          *(residual(way == "inside") for _ in range(DEPTH)), fw.nn.Linear(WIDTH, 2, dtype=fw.float64))
    model.way = way
    ours = [layer for layer in model.modules() if isinstance(layer, fw.nn.Linear)]
    for layer, drawn in zip(ours, linears, strict=True):
        for name in ("weight", "bias"):
            value = getattr(drawn, name).data.copy()
            if fw is tp:
                getattr(layer, name).data = value
            else:
                with torch.no_grad():
                    getattr(layer, name).copy_(torch.from_numpy(value))
    return model


def train(rank, world, way, fw, shard):
    model = net(fw, way)
    if shard:
        for layer in model:
            if type(layer).__name__.endswith("Residual"):
                (fully_shard if fw is tp else torch_fully_shard)(layer)
        (fully_shard if fw is tp else torch_fully_shard)(model)
    opt = fw.optim.Adam(model.parameters(), lr=0.05)
    rows = slice(rank * len(X) // world, (rank + 1) * len(X) // world)
    slots, left_gathered, after_forward = [], [], []
    for _ in range(STEPS):
        y = model(fw.tensor(X[rows]))
        if shard and fw is tp:  # the residual layers (not the root) hold no whole parameter until backward
            after_forward.append(sum(p.unsharded.data.size for layer in model[2:-1]
                                     for p in layer._fsdp_state.params))
        ((y - fw.tensor(Y[rows])) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        if shard and fw is tp:
            slots.append(all(isinstance(p, ShardedParameter) for p in model.parameters()))
            left_gathered.append(sum(p.unsharded.data.size for layer in model.modules() if hasattr(layer, "_fsdp_state")
                                     for p in layer._fsdp_state.params))
    if not shard:
        return [p.detach().numpy().copy() for p in model.parameters()]
    whole = [(p.full_tensor() if fw is tp else p.full_tensor().detach()).numpy().copy() for p in model.parameters()]
    return whole, slots, left_gathered, after_forward


def both(rank, way):
    return train(rank, 2, way, tp, True), train(rank, 2, way, torch, True)


@pytest.mark.parametrize("way", WAYS)
def test_fully_shard_with_checkpoint_trains_as_torchs_and_as_one_process(way):
    alone = train(0, 1, way, tp, False)
    alone_torch = train(0, 1, way, torch, False)
    for a, b in zip(alone, alone_torch, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    first = [p.data.copy() for p in net(tp, way).parameters()]
    for (ours, slots, left, after_forward), (theirs, *_) in dist.spawn(both, 2, args=(way,), timeout=60):
        for a, b, c, start in zip(ours, theirs, alone, first, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-12)
            assert not np.allclose(a, start)  # training moved every parameter
        assert slots == [True] * STEPS  # the shards are back in the slots after each step
        assert left == [0] * STEPS      # and no whole parameter stays gathered
        assert after_forward == [0] * STEPS
