"""bench/bench_gpu.py (speed_gpu, gpu_crossover, memory_gpu): its workloads compute what they should, on the strict
stand-in for CuPy.

CI has no GPU: every measuring function takes the array module and PyTorch's device, so here
they run on tests/strict_cupy.py (installed as the device backend) and PyTorch on the CPU, at
tiny sizes. Nothing here looks at a timing. The benchmark itself runs with
`python bench/bench_gpu.py` (`make bench-gpu`) on a machine with an NVIDIA GPU.
"""
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import strict_cupy
from tinypytorch import Variable, cuda

# bench/'s modules, by name: tests/conftest.py puts bench/ on the path
import bench_gpu
import gpu_crossover
import memory_gpu
import networks
import ports
import speed_gpu
import timing

pytestmark = [pytest.mark.torch, pytest.mark.step48]

ROOT = pathlib.Path(__file__).resolve().parent.parent
_path = ROOT / "bench" / "bench_gpu.py"


@pytest.fixture
def cp(monkeypatch):
    """The strict stand-in as the device backend, with what CuPy has and the benchmark uses besides the package:
    a device to synchronise (nothing to wait for) and cupy.random.random (NumPy's numbers, copied to the device)."""
    rng = np.random.default_rng(0)
    with strict_cupy.installed() as module:
        monkeypatch.setattr(strict_cupy.Device, "synchronize", lambda self: None, raising=False)
        random = types.SimpleNamespace(
            random=lambda size, dtype=np.float64: module.asarray(rng.random(size, dtype=dtype)))
        monkeypatch.setattr(module, "random", random, raising=False)
        yield module


def host(a):
    """A NumPy copy of a device array, a NumPy array or a tensor."""
    return a.detach().numpy() if isinstance(a, torch.Tensor) else cuda.as_numpy(a)


# ----- elementwise ----------------------------------------------------------------------------------

def test_elementwise_gradient_by_hand_equals_tinypytorchs_and_torchs(cp):
    x = speed_gpu.elementwise_input(1000)
    y, gx = speed_gpu.elementwise_tinypytorch(cp.asarray(x))
    y_hand, gx_hand = speed_gpu.elementwise_by_hand(cp.asarray(x), cp)
    y_torch, gx_torch = speed_gpu.elementwise_torch(torch.from_numpy(x))
    assert isinstance(gx, cp.ndarray) and isinstance(gx_hand, cp.ndarray)  # computed on the device
    assert gx.dtype == gx_hand.dtype == np.float32
    x64 = x.astype(np.float64)
    exact = (1 + x64) * np.exp(x64) + 2 * x64  # the derivative, in float64
    for g in (gx, gx_hand, gx_torch):
        np.testing.assert_allclose(host(g), exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(host(gx), host(gx_hand), rtol=1e-6, atol=1e-6)  # float32, summed in other orders
    for v in (y, y_hand, y_torch):
        np.testing.assert_allclose(float(host(v)), np.sum(np.exp(x64) * x64 + x64**2), rtol=1e-5)


# ----- dropout -----------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.5, 0.2])
def test_every_dropout_keeps_about_the_expected_fraction_and_scales_what_it_keeps(cp, p):
    n = 2**14
    x = speed_gpu.elementwise_input(n) + np.float32(2)  # no zero among them: a zero in y is a dropped element
    gy = np.random.default_rng(3).uniform(1, 2, n).astype(np.float32)
    runs = {"tinypytorch": speed_gpu.dropout_tinypytorch(cp.asarray(x), cp.asarray(gy), p),
            "by hand": speed_gpu.dropout_by_hand(cp.asarray(x), cp.asarray(gy), p, cp),
            "torch": speed_gpu.dropout_torch(torch.from_numpy(x), torch.from_numpy(gy), p)}
    scale = np.float32(1 / (1 - p))
    for name, (y, gx) in runs.items():
        y, gx = host(y), host(gx)
        kept = y != 0
        # kept ~ Binomial(n, 1 - p): within 5 standard deviations
        assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n), name
        np.testing.assert_allclose(y[kept], x[kept] * scale, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(gx[kept], gy[kept] * scale, rtol=1e-6, err_msg=name)
        assert not gx[~kept].any(), name  # the gradient flows through the kept elements only
        assert y.dtype == gx.dtype == np.float32, name


def test_tinypytorchs_dropout_draws_its_mask_on_the_device(cp):
    x = cp.asarray(speed_gpu.elementwise_input(64))
    y, gx = speed_gpu.dropout_tinypytorch(x, cp.ones_like(x), 0.5)
    assert isinstance(y, cp.ndarray) and isinstance(gx, cp.ndarray)


# ----- the MLP training step -----------------------------------------------------------------------

def test_mlp_step_on_the_device_follows_pytorchs_step_by_step(cp):
    width, batch = 16, 8
    step, model = speed_gpu.mlp_tinypytorch(cp, width, batch)
    assert all(isinstance(p.data, cp.ndarray) and p.data.dtype == np.float32 for p in model.params())
    assert len(model.layers) == speed_gpu.MLP_LAYERS
    step_t, net = speed_gpu.mlp_torch("cpu", model, width, batch)
    for _ in range(3):  # three Adam steps: the losses agree, so the updates did too
        loss, loss_t = step(), step_t()
        assert isinstance(loss.data, cp.ndarray)
        np.testing.assert_allclose(float(host(loss.data)), loss_t.item(), rtol=1e-5)
    for p, pt in zip(model.params(), net.parameters(), strict=True):
        np.testing.assert_allclose(host(p.data), host(pt), rtol=1e-4, atol=1e-6)


# ----- the crossover ------------------------------------------------------------------------------------

def test_every_crossover_runner_computes_exp_and_the_same_gradient(cp):
    runners = gpu_crossover.crossover_runners(cp, "cpu")
    assert set(runners) == {"NumPy", "tinypytorch, CPU", "tinypytorch, GPU", "CuPy by hand", "PyTorch, CPU",
                            "PyTorch, CUDA"}
    assert {name for name, r in runners.items() if r.gpu} == {"tinypytorch, GPU", "CuPy by hand", "PyTorch, CUDA"}
    x = speed_gpu.elementwise_input(256)
    reference = speed_gpu.elementwise_by_hand(x, np)[1]
    for name, r in runners.items():
        a = r.to_input(x)
        e = r.op(a)
        # (a Variable's array; CuPy's arrays have a .data of their own, a memory pointer)
        np.testing.assert_allclose(host(e.data if isinstance(e, Variable) else e), np.exp(x),
                                   rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(host(r.graph(a)[1]), reference, rtol=1e-6, atol=1e-6, err_msg=name)
        r.sync()
    assert isinstance(runners["tinypytorch, GPU"].graph(runners["tinypytorch, GPU"].to_input(x))[1], cp.ndarray)


def test_overtakes_is_the_size_from_which_the_fast_one_stays_faster():
    sizes = [1, 2, 4, 8, 16]
    slow = dict(zip(sizes, [1, 2, 4, 8, 16]))
    assert gpu_crossover.overtakes(sizes, slow, dict(zip(sizes, [3, 3, 5, 5, 6]))) == 8
    assert gpu_crossover.overtakes(sizes, slow, dict(zip(sizes, [0.5, 3, 5, 5, 6]))) == 8  # a win below, lost again
    assert gpu_crossover.overtakes(sizes, slow, dict(zip(sizes, [0.5] * 5))) == 1
    assert gpu_crossover.overtakes(sizes, slow, dict(zip(sizes, [0.5, 1, 2, 4, 20]))) is None


def test_time_call_synchronises_before_the_clock_stops():
    calls = []
    seconds = timing.time_call(lambda: calls.append("call"), lambda: calls.append("sync"), repeats=3, warmup=1,
                               number=2)
    assert len(seconds) == 3 and all(s >= 0 for s in seconds)
    assert calls == ["call", "sync"] + ["call", "call", "sync"] * 3


# ----- peak device memory ----------------------------------------------------------------------------

def peaks(cp, depths, configuration, width=64, batch=16):
    result = {}
    for depth in depths:
        net, x, target = memory_gpu.coupling_workload(depth, width, batch)
        net.to("cuda")
        result[depth] = memory_gpu.peak_tinypytorch(net, cp.asarray(x), cp.asarray(target), configuration, cp)
        assert all(p.grad is None for p in net.params())
    return result


def test_reversible_peak_through_the_pool_stays_flat_while_plain_grows(cp):
    activation = 16 * 64 * 4  # batch x width x float32
    depths = (8, 16, 32)
    reversible, plain, sqrt = (peaks(cp, depths, c) for c in ("reversible", "plain", "sqrt"))
    assert max(reversible.values()) <= 1.1 * min(reversible.values())
    assert plain[32] >= 3 * plain[8]  # plain keeps 2.5 activations a block
    assert plain[32] - plain[8] >= 24 * 2.5 * activation
    assert reversible[32] < sqrt[32] < plain[32]


def test_peak_counts_what_the_graph_holds(cp):
    """The plain stack holds 2.5 activations a block when its forward ends: the pool's peak grows by that per block."""
    activation = 16 * 64 * 4
    plain = peaks(cp, (4, 8), "plain")
    growth = (plain[8] - plain[4]) / 4 / activation
    assert 2.5 <= growth < 2.5 + 0.05


@pytest.mark.parametrize("configuration", list(networks.COUPLING_CONFIGURATIONS))
def test_pytorchs_loss_on_the_device_is_tinypytorchs(cp, configuration):
    net, x, target = memory_gpu.coupling_workload(4, 16, 8)
    twin = ports.torch_coupling_twin(net)
    expected = memory_gpu.loss_coupling_torch(twin, torch.from_numpy(x), torch.from_numpy(target), configuration)
    net.to("cuda")
    loss = networks.loss_coupling_tinypytorch(net, cp.asarray(x), cp.asarray(target), configuration)
    assert isinstance(loss.data, cp.ndarray)
    np.testing.assert_allclose(float(host(loss.data)), expected.item(), rtol=1e-5)


# ----- the whole run, the report and the plot -----------------------------------------------------------

TINY = {"mlp": [(8, 4), (1024, 2)], "elementwise": 2**6, "dropout": 2**6, "crossover": [2**4, 2**6, 2**8],
        "repeats": 1, "memory": {"depths": [2, 4], "width": 16, "batch": 4}}


def test_the_run_reports_every_table_and_target_and_plots(cp, monkeypatch, tmp_path):
    monkeypatch.setattr(timing, "TARGET_SECONDS", 0.0)  # one call a repeat: nothing here is timed for its figure

    def peak_torch_on_the_cpu(twin, x, target, configuration, device):
        """PyTorch's pass as peak_torch runs it; its CUDA allocator's statistics are not here: a stand-in figure."""
        assert device == "cpu" and x.device.type == "cpu" and next(twin.parameters()).device.type == "cpu"
        memory_gpu.loss_coupling_torch(twin, x, target, configuration).backward()
        twin.zero_grad(set_to_none=True)
        return 1000

    monkeypatch.setattr(memory_gpu, "peak_torch", peak_torch_on_the_cpu)
    results = bench_gpu.run(TINY, cp, "cpu")
    about = {"GPU": "the strict stand-in", "CuPy": "none"}
    text, targets, crossings = bench_gpu.report(results, TINY, "full", about)
    assert set(targets) == {"mlp", "elementwise", "dropout", "reversible flat", "reversible vs PyTorch"}
    for title in ("## 1. MLP training step", "## 2. Elementwise", "## 3. Dropout", "## 4. The crossover",
                  "## 5. Peak device memory", "## Targets"):
        assert title in text
    assert "- GPU: the strict stand-in" in text and "Written by `python bench/bench_gpu.py`" in text
    assert text.count("Target: ") == 5
    assert "| 1,024 | 2 |" in text and "| 2^8 |" in text and "| 4 | reversible |" in text
    assert set(crossings) == {"exp", "graph"}
    bench_gpu.plot(results, TINY, crossings, tmp_path / "gpu.png")
    assert (tmp_path / "gpu.png").read_bytes().startswith(b"\x89PNG")


def test_report_says_met_and_not_met():
    s = {**TINY, "crossover": [16, 64], "memory": {"depths": [8, 128], "width": 16, "batch": 4}}

    def results(ratio, growth):
        crossover = {}
        for name, gpu in [("NumPy", 0), ("tinypytorch, CPU", 0), ("tinypytorch, GPU", 1), ("CuPy by hand", 1),
                          ("PyTorch, CPU", 0), ("PyTorch, CUDA", 1)]:
            for what in ("exp", "graph"):
                crossover[name, what, 16] = 1e-5 if gpu else 1e-6
                crossover[name, what, 64] = 1e-5 if gpu else 1e-4
        memory = {(d, c): {"tinypytorch": 100.0 * (growth if d == 128 else 1), "torch": 100.0}
                  for d in (8, 128) for c in networks.COUPLING_CONFIGURATIONS}
        return {"mlp": {(256, 64): {"tinypytorch": [3.0], "torch": [1.0]},
                        (1024, 256): {"tinypytorch": [ratio], "torch": [1.0]}},
                "elementwise": {"tinypytorch": [ratio], "by hand": [1.0], "torch": [1.0]},
                "dropout": {"tinypytorch": [ratio], "by hand": [1.0], "torch": [1.0]},
                "crossover": crossover, "memory": memory}

    text, targets, crossings = bench_gpu.report(results(1.1, 1.05), s, "full", {})
    assert all(targets.values())  # the width of 256 at 3x is no part of the target
    assert "Target: at most 1.2× PyTorch CUDA at width ≥ 1,024: met." in text
    assert crossings["exp"]["tinypytorch on the GPU against NumPy"] == 64
    assert "tinypytorch on the GPU against NumPy, 2^6 = 64" in text
    text, targets, _ = bench_gpu.report(results(1.3, 1.25), s, "full", {})
    assert not any(targets.values())
    assert "NOT met (missed at width 1,024 (1.30))" in text
    assert "at most 1.1× the peak at N = 8, tinypytorch: NOT met (1.250;" in text


# ----- without a GPU ---------------------------------------------------------------------------------------

@pytest.mark.skipif(cuda.GPU, reason="a GPU is here: the script would measure")
def test_without_a_gpu_the_script_exits_0_and_leaves_the_results_alone():
    results = ROOT / "bench" / "results"
    before = {name: (results / name).read_bytes() if (results / name).exists() else None
              for name in ("gpu.md", "gpu.png")}
    done = subprocess.run([sys.executable, str(_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "no GPU available" in done.stdout and "make bench-gpu" in done.stdout
    after = {name: (results / name).read_bytes() if (results / name).exists() else None for name in before}
    assert after == before


def test_the_results_file_is_a_gpu_run_or_says_it_awaits_one():
    text = (ROOT / "bench" / "results" / "gpu.md").read_text()
    if "Written by `python bench/bench_gpu.py`" in text:
        assert "- GPU: " in text and "- CuPy: " in text and "- PyTorch: " in text
    else:
        assert "awaits a GPU run" in text and "make bench-gpu" in text and "pip install -e .[gpu]" in text
        assert "|" not in text and "µs" not in text  # no table, no figure: nothing was measured
