"""tinypytorch on CuPy against PyTorch CUDA and hand-written CuPy: sections 1 to 3 of bench/results/gpu.md.

    python bench/bench_gpu.py            # on a machine with an NVIDIA GPU (`make bench-gpu`)
    python bench/bench_gpu.py --quick    # a smoke test on a GPU, written to bench/_out/

- MLP training step: forward, backward and an Adam step of an MLP of three Linear layers
  width -> width (ReLU between them), float32; tinypytorch on CuPy against torch.nn.Linear layers
  with the same weights and torch.optim.Adam on CUDA. Target: at most 1.2x PyTorch CUDA at width >= 1024.
- elementwise: y = sum(exp(x) * x + x ** 2), forward and backward, against the same by hand in
  CuPy and against PyTorch CUDA. Target: at most 1.2x the hand-written CuPy.
- dropout, p = 0.5, forward and backward, against a hand-written CuPy dropout and PyTorch's.
  Target: at most 1.2x the hand-written one.

Every function takes the array module (`xp`) and PyTorch's device as parameters, so that
tests/test_bench_gpu.py runs them on a strict stand-in for CuPy (tests/strict_cupy.py) without a GPU.
"""
import math
import statistics

import numpy as np
import torch

import tinypytorch
from tinypytorch import Variable, cuda
from tinypytorch import functions as F
from tinypytorch.layers import MLP
from tinypytorch.optimizers import Adam

from timing import time_call
from writing import verdict


def _nothing():
    pass


def sync_xp(xp):
    """A function that returns when the device of module `xp` has finished its queued work (nothing on the CPU)."""
    return _nothing if xp is np else xp.cuda.Device().synchronize


def sync_torch(device):
    """The same for PyTorch's `device`."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else _nothing


def device_of_xp(xp):
    """tinypytorch's device for arrays of module `xp`."""
    return "cpu" if xp is np else "cuda"


def power_of_two(n):
    return f"2^{int(math.log2(n))}"


# ----- the MLP training step ------------------------------------------------------------------------

MLP_LAYERS = 3  # Linear layers, width -> width each, ReLU between them


def mlp_data(width, batch, seed=1):
    """The batch and the target, float32 NumPy arrays (batch x width)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, width)).astype(np.float32),
            rng.standard_normal((batch, width)).astype(np.float32))


def mlp_tinypytorch(xp, width, batch, seed=0):
    """(step, model): step() runs one training step of tinypytorch's MLP where `xp` computes; returns the loss."""
    model = MLP((width,) * (MLP_LAYERS + 1), activation=F.relu, rng=np.random.default_rng(seed))
    for p in model.params():
        p.data = p.data.astype(np.float32)  # Linear draws float64 weights
    model.to(device_of_xp(xp))
    x, target = (Variable(xp.asarray(a), requires_grad=False) for a in mlp_data(width, batch))
    optimizer = Adam(model.params(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        loss = tinypytorch.mean_squared_error(model(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return step, model


def mlp_torch(device, model, width, batch):
    """(step, net): the same step in PyTorch on `device`: torch.nn.Linear layers with `model`'s weights, its Adam."""
    modules = []
    for i, layer in enumerate(model.layers):
        linear = torch.nn.Linear(width, width)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(cuda.as_numpy(layer.weight.data)))
            linear.bias.copy_(torch.from_numpy(cuda.as_numpy(layer.bias.data)))
        modules += [linear] + ([torch.nn.ReLU()] if i < len(model.layers) - 1 else [])
    net = torch.nn.Sequential(*modules).to(device)
    x, target = (torch.from_numpy(a).to(device) for a in mlp_data(width, batch))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return step, net


# ----- elementwise: sum(exp(x) x + x^2) -------------------------------------------------------------


def elementwise_tinypytorch(x):
    """y = sum(exp(x) x + x^2) and dy/dx in tinypytorch, x an array of any module: (y, dy/dx) as arrays."""
    v = Variable(x)
    y = F.sum(F.exp(v) * v + v**2)
    y.backward()
    return y.data, v.grad.data


def elementwise_by_hand(x, xp):
    """The same written by hand in module `xp`: the forward keeps exp(x), the derivative (1 + x) exp(x) + 2x."""
    e = xp.exp(x)
    y = (e * x + x * x).sum()
    return y, (1 + x) * e + 2 * x


def elementwise_torch(x):
    """The same in PyTorch, x a tensor on any device: (y, dy/dx) as tensors."""
    x = x.detach().requires_grad_()
    y = (torch.exp(x) * x + x**2).sum()
    y.backward()
    return y, x.grad


def elementwise_input(n, seed=2):
    """n float32 numbers in [-1, 1): exp stays well inside float32's range."""
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)


# ----- dropout ---------------------------------------------------------------------------------------


def dropout_tinypytorch(x, gy, p):
    """tinypytorch's dropout forward, and backward from `gy`: (y, dL/dx) as arrays of x's module."""
    v = Variable(x)
    y = F.dropout(v, p)
    y.backward(Variable(gy, requires_grad=False))
    return y.data, v.grad.data


def dropout_by_hand(x, gy, p, xp):
    """Dropout written by hand in module `xp` (CuPy): a mask from xp.random, one multiply, the scale folded in."""
    mask = (xp.random.random(x.shape, dtype=x.dtype) >= p) * x.dtype.type(1 / (1 - p))  # kept for backward
    return x * mask, gy * mask


def dropout_torch(x, gy, p):
    """PyTorch's dropout forward and backward: (y, dL/dx) as tensors."""
    x = x.detach().requires_grad_()
    y = torch.nn.functional.dropout(x, p, training=True)
    y.backward(gy)
    return y, x.grad


DROPOUT_P = 0.5


def run_speed(s, xp, device):
    """{"mlp": {(width, batch): {framework: [seconds]}}, "elementwise": {...}, "dropout": {...}}."""
    results = {"mlp": {}}
    sync_gpu, sync_t = sync_xp(xp), sync_torch(device)
    for width, batch in s["mlp"]:
        step, model = mlp_tinypytorch(xp, width, batch)
        step_t, _ = mlp_torch(device, model, width, batch)
        results["mlp"][width, batch] = {"tinypytorch": time_call(step, sync_gpu, s["repeats"]),
                                        "torch": time_call(step_t, sync_t, s["repeats"])}
        del step, model, step_t
        print(f"MLP step {width}/{batch} done", flush=True)
    results["elementwise"] = _three_ways(s["elementwise"], xp, device, s["repeats"], lambda x, gy: (
        lambda: elementwise_tinypytorch(x), lambda: elementwise_by_hand(x, xp)),
        lambda xt, gyt: lambda: elementwise_torch(xt))
    results["dropout"] = _three_ways(s["dropout"], xp, device, s["repeats"], lambda x, gy: (
        lambda: dropout_tinypytorch(x, gy, DROPOUT_P), lambda: dropout_by_hand(x, gy, DROPOUT_P, xp)),
        lambda xt, gyt: lambda: dropout_torch(xt, gyt, DROPOUT_P))
    print("elementwise and dropout done", flush=True)
    return results


def _three_ways(n, xp, device, repeats, on_device, in_torch):
    """{"tinypytorch", "by hand", "torch": [seconds]} of one workload on n elements and a gradient of ones.

    on_device(x, gy) -> (tinypytorch's call, the one by hand), arrays of `xp`; in_torch(x, gy) -> PyTorch's.
    """
    host = elementwise_input(n)
    x, xt = xp.asarray(host), torch.from_numpy(host).to(device)
    gy, gyt = xp.ones_like(x), torch.ones_like(xt)
    (ours, by_hand), theirs = on_device(x, gy), in_torch(xt, gyt)
    sync_gpu = sync_xp(xp)
    return {"tinypytorch": time_call(ours, sync_gpu, repeats), "by hand": time_call(by_hand, sync_gpu, repeats),
            "torch": time_call(theirs, sync_torch(device), repeats)}


# ----- report: sections 1 to 3 -----------------------------------------------------------------------


def ms(seconds):
    return f"{statistics.median(seconds) * 1e3:.3f}"


def ratio(a, b):
    return statistics.median(a) / statistics.median(b)


def mlp_section(results, targets):
    """Section 1: the training step at each size, and its target (at width >= 1,024)."""
    lines = ["", "## 1. MLP training step", "",
             f"Forward, backward and an Adam step: {MLP_LAYERS} Linear layers width → width, ReLU between them, "
             "a mean-squared-error loss; PyTorch: torch.nn.Linear layers with the same weights and torch.optim.Adam.",
             "", "| width | batch | tinypytorch, ms | PyTorch CUDA, ms | tinypytorch / PyTorch |",
             "|---|---|---|---|---|"]
    missed = []
    for (width, batch), row in results["mlp"].items():
        r = ratio(row["tinypytorch"], row["torch"])
        lines.append(f"| {width:,} | {batch:,} | {ms(row['tinypytorch'])} | {ms(row['torch'])} | {r:.2f} |")
        if width >= 1024 and r > 1.2:
            missed.append(f"{width:,} ({r:.2f})")
    targets["mlp"] = not missed
    lines += ["", f"Target: at most 1.2× PyTorch CUDA at width ≥ 1,024: {verdict(not missed)}"
              + (f" (missed at width {', '.join(missed)})." if missed else ".")]
    return lines


def versus_by_hand_sections(results, s, targets):
    """Sections 2 and 3: elementwise and dropout against the hand-written CuPy and PyTorch, and their targets."""
    lines = []
    for key, title, what, floor in [
            ("elementwise", "2. Elementwise: sum(exp(x)·x + x²), forward and backward",
             f"On {power_of_two(s['elementwise'])} float32. By hand: the forward keeping exp(x), the derivative "
             "(1 + x)·exp(x) + 2x written out, no graph.", "hand-written CuPy"),
            ("dropout", f"3. Dropout, p = {DROPOUT_P}, forward and backward",
             f"On {power_of_two(s['dropout'])} float32, backward from a gradient of ones. By hand: a mask from "
             "`cupy.random.random` (float32), one multiply with the scale folded into the mask; tinypytorch draws its "
             "mask on the device from its counter-based generator (`tinypytorch.random.CounterGenerator`).",
             "hand-written CuPy")]:
        row = results[key]
        r_hand, r_torch = ratio(row["tinypytorch"], row["by hand"]), ratio(row["tinypytorch"], row["torch"])
        targets[key] = r_hand <= 1.2
        lines += ["", f"## {title}", "", what, "",
                  "| tinypytorch, ms | CuPy by hand, ms | PyTorch CUDA, ms | tinypytorch / by hand "
                  "| tinypytorch / PyTorch |", "|---|---|---|---|---|",
                  f"| {ms(row['tinypytorch'])} | {ms(row['by hand'])} | {ms(row['torch'])} | {r_hand:.2f} "
                  f"| {r_torch:.2f} |", "",
                  f"Target: at most 1.2× the {floor}: {verdict(targets[key])} ({r_hand:.2f})."]
    return lines
