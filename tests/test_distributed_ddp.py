"""tinypytorch.nn.parallel.DistributedDataParallel against torch's, on the same data in the same two processes, and
against one process training on the whole batch: parameters after N steps of SGD and Adam, gradient accumulation
under no_sync, find_unused_parameters, and PyTorch's error for an unused parameter without it.

One spawned run holds the checks of each test (spawning costs time); float64, so the three agree to rounding.
"""
import numpy as np
import pytest
import torch

import tinypytorch as tp

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

dist = pytest.importorskip("tinypytorch.distributed")
TIMEOUT = 30
BATCH, STEPS = 8, 3
X = np.random.default_rng(0).standard_normal((BATCH, 4))
Y = np.random.default_rng(1).standard_normal((BATCH, 2))


def package_model(seed):
    tp.manual_seed(seed)
    return tp.nn.Sequential(tp.nn.Linear(4, 5, dtype=tp.float64), tp.nn.Tanh(), tp.nn.Linear(5, 2, dtype=tp.float64))


def torch_twin(model):
    twin = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    with torch.no_grad():
        for p_t, p in zip(twin.parameters(), model.parameters(), strict=True):
            p_t.copy_(torch.from_numpy(p.data.copy()))
    return twin


OPTIMIZERS = {"sgd": (dict(lr=0.1, momentum=0.9), "SGD"), "adam": (dict(lr=0.05), "Adam")}


def train(model, optim_name, batches, fw):
    """STEPS optimizer steps; batches(step) -> [(x, y, scale)]: micro-batches accumulated before one step."""
    kwargs, cls = OPTIMIZERS[optim_name]
    opt = getattr(fw.optim, cls)(model.parameters(), **kwargs)
    for step in range(STEPS):
        micro = batches(step)
        for i, (x, y, scale) in enumerate(micro):
            sync = i == len(micro) - 1 or not hasattr(model, "no_sync")
            with (model.no_sync() if not sync else _nothing()):
                loss = ((model(fw.tensor(x)) - fw.tensor(y)) ** 2).mean() * scale
                loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().numpy().copy() for p in model.parameters()]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def ddp_runs(rank):
    """On each rank: ours and torch's DDP from rank-dependent initial weights (DDP broadcasts rank 0's), each rank on
    its half of the batch; plain and with two micro-batches per step under no_sync; tiny buckets (several per model)."""
    half = slice(rank * BATCH // 2, (rank + 1) * BATCH // 2)
    quarters = [slice(half.start, half.start + BATCH // 4), slice(half.start + BATCH // 4, half.stop)]
    results = {}
    for optim_name in OPTIMIZERS:
        for how, batches in (("whole half", lambda step: [(X[half], Y[half], 1.0)]),
                             ("no_sync", lambda step: [(X[q], Y[q], 0.5) for q in quarters])):
            model = package_model(seed=rank)
            twin = torch_twin(model)
            ours = tp.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100 / 2**20)  # ~100 bytes a bucket
            theirs = torch.nn.parallel.DistributedDataParallel(twin, bucket_cap_mb=100 / 2**20)
            results[optim_name, how] = (train(ours, optim_name, batches, tp), train(theirs, optim_name, batches, torch))
    results["buckets"] = [[tuple(p.shape) for p in b.params] for b in ours.reducer.buckets]
    return results


def test_ddp_equals_torch_ddp_and_one_process_on_the_whole_batch():
    per_rank = dist.spawn(ddp_runs, 2, timeout=TIMEOUT)
    # the buckets: parameters in reverse order, one closed as soon as it holds 100 bytes: float64 biases of 2 and 5
    # and a weight of 10 (16 + 80 + 40 bytes), then the weight of 20 alone
    assert per_rank[0]["buckets"] == [[(2,), (2, 5), (5,)], [(5, 4)]]
    for optim_name in OPTIMIZERS:
        alone = train(package_model(seed=0), optim_name, lambda step: [(X, Y, 1.0)], tp)
        alone_t = train(torch_twin(package_model(seed=0)), optim_name, lambda step: [(X, Y, 1.0)], torch)
        for rank, results in enumerate(per_rank):
            for how in ("whole half", "no_sync"):
                ours, theirs = results[optim_name, how]
                for a, b, c, d in zip(ours, theirs, alone, alone_t, strict=True):
                    where = f"rank {rank}, {optim_name}, {how}"
                    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f"{where}: ours vs torch's DDP")
                    np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-14, err_msg=f"{where}: vs one process")
                    np.testing.assert_allclose(c, d, rtol=1e-12, atol=1e-14, err_msg=f"{optim_name}: one process")
        assert not np.allclose(per_rank[0]["sgd", "whole half"][0][0], package_model(seed=0).parameters().__next__().data)


class Branches:
    """A model with a branch `b` that only rank 0 uses and a layer `c` that no rank uses."""

    def __init__(self, fw, seed):
        tp.manual_seed(seed)
        layers = [tp.nn.Linear(3, 2, dtype=tp.float64) for _ in range(3)]
        if fw is tp:
            self.module = _Three(tp.nn.Module, *layers)
        else:
            self.module = _Three(torch.nn.Module, *[torch_twin_linear(layer) for layer in layers])


def torch_twin_linear(layer):
    linear = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(layer.weight.data.copy()))
        linear.bias.copy_(torch.from_numpy(layer.bias.data.copy()))
    return linear


def _Three(base, a, b, c):
    class Three(base):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = a, b, c

        def forward(self, x, use_b):
            return self.a(x) + self.b(x) if use_b else self.a(x)

    return Three()


def unused_runs(rank):
    x = np.random.default_rng(rank).standard_normal((4, 3))
    results = {}
    for fw, ddp in ((tp, tp.nn.parallel.DistributedDataParallel), (torch, torch.nn.parallel.DistributedDataParallel)):
        model = ddp(Branches(fw, seed=0).module, find_unused_parameters=True)
        for _ in range(2):
            model(fw.tensor(x), use_b=rank == 0).sum().backward()
        results[fw.__name__, "grads"] = [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]
        strict = ddp(Branches(fw, seed=0).module)
        strict(fw.tensor(x), use_b=True).sum().backward()
        try:
            strict(fw.tensor(x), use_b=True)
            results[fw.__name__, "error"] = None
        except RuntimeError as error:
            results[fw.__name__, "error"] = str(error)
    return results


def test_find_unused_parameters_and_the_error_without_it_equal_torchs():
    for rank, results in enumerate(dist.spawn(unused_runs, 2, timeout=TIMEOUT)):
        ours, theirs = results["tinypytorch", "grads"], results["torch", "grads"]
        assert [g is None for g in ours] == [g is None for g in theirs] == [False] * 4 + [True] * 2  # c: no rank used it
        for g, g_t in zip(ours[:4], theirs[:4], strict=True):  # b's gradient: rank 0's / 2 on both ranks
            np.testing.assert_allclose(g, g_t, rtol=1e-12)
        first = "Expected to have finished reduction in the prior iteration before starting a new one."
        assert results["tinypytorch", "error"].startswith(first) and results["torch", "error"].startswith(first)
        indices = f"Parameter indices which did not receive grad for rank {rank}: 4 5"
        assert indices in results["tinypytorch", "error"] and indices in results["torch", "error"]


def test_device_ids_on_a_cpu_module_are_refused_as_torch():
    with pytest.raises(ValueError, match="device_ids and output_device arguments only work with"):
        tp.nn.parallel.DistributedDataParallel(tp.nn.Linear(2, 2), device_ids=[0])
