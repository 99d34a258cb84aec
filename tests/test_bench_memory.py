"""bench/bench_memory.py: what it counts is what the graphs hold, in both frameworks.

Small sizes only; nothing here looks at a timing. The benchmark itself runs with
`python bench/bench_memory.py` (or `--quick`).
"""
import functools
import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch.autograd.graph import SavedTensor
from tinypytorch.core import Function

pytestmark = [pytest.mark.torch]

_path = pathlib.Path(__file__).resolve().parent.parent / "bench" / "bench_memory.py"
_spec = importlib.util.spec_from_file_location("bench_memory", _path)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)

WIDTH, BATCH = 6, 4
DTYPES = [np.float32, np.float64]


def workload(depth, dtype, width=WIDTH, batch=BATCH):
    model = bench.build_mlp(depth, width, dtype)
    x, target = bench.batch_and_target(batch, width, dtype)
    return model, x, target


def saved_in_tinypytorch_graph(loss, existing):
    """Walk the graph behind `loss` by its edges: (bytes, count) of its SavedTensors, and the bytes of the
    distinct saved arrays that are not in `existing` (compared by identity). Written here, not taken from
    the benchmark or from tinypytorch.utils, so that a mistake in either shows."""
    total, count, new_arrays = 0, 0, {}
    todo, seen = [loss.creator], set()
    while todo:
        f = todo.pop()
        if not isinstance(f, Function) or id(f) in seen:
            continue
        seen.add(id(f))
        for s in f._saved:
            if isinstance(s, SavedTensor):
                total, count = total + s.nbytes(), count + 1
                data = s.data if s.variable is None else s.variable.data
                if not any(data is a for a in existing):
                    new_arrays[id(data)] = data.nbytes
        todo.extend(node for node, _ in f.edges)
    return total, count, sum(new_arrays.values())


def saved_in_torch_graph(loss):
    """(bytes, count) of the tensors in the `_saved_*` attributes of the nodes behind `loss`."""
    total, count = 0, 0
    todo, seen = [loss.grad_fn], set()
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        for name in dir(f):
            value = getattr(f, name) if name.startswith("_saved_") else None
            if isinstance(value, torch.Tensor):
                total, count = total + value.nelement() * value.element_size(), count + 1
        todo.extend(node for node, _ in f.next_functions)
    return total, count


# ----- what is saved ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_the_hook_counts_what_the_tinypytorch_graph_saves(depth, dtype):
    model, x, target = workload(depth, dtype)
    counted = bench.saved_tinypytorch(model, x, target)
    loss = bench.loss_tinypytorch(model, x, target)  # no hooks: the SavedTensors hold their arrays
    existing = [p.data for p in model.params()] + [x, target]
    assert saved_in_tinypytorch_graph(loss, existing) == (counted.bytes, counted.count, counted.activations)
    # the hidden tanh outputs and the network's output: depth arrays of batch x width
    assert counted.activations == depth * BATCH * WIDTH * np.dtype(dtype).itemsize
    assert all(p.grad is None for p in model.params())  # the counting pass leaves no gradients behind


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_the_hook_counts_what_the_torch_graph_saves(depth, dtype):
    model, x, target = workload(depth, dtype)
    twin = bench.torch_twin(model)
    counted = bench.saved_torch(twin, x, target)
    assert saved_in_torch_graph(bench.loss_torch(twin, x, target)) == (counted.bytes, counted.count)
    assert all(p.grad is None for p in twin.parameters())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 7])
def test_both_frameworks_save_the_same_bytes_and_tensors(depth, dtype):
    model, x, target = workload(depth, dtype)
    ours, theirs = bench.saved_tinypytorch(model, x, target), bench.saved_torch(bench.torch_twin(model), x, target)
    assert ours == theirs
    assert (ours.bytes, ours.count) == bench.expected_saved(depth, WIDTH, BATCH, np.dtype(dtype).itemsize)


def test_expected_saved_by_hand():
    # depth 1: the batch, the output, the target; depth 2 adds a tanh output (twice: tanh, next Linear) and W
    assert bench.expected_saved(1, 10, 3, 8) == (3 * 3 * 10 * 8, 3)
    assert bench.expected_saved(2, 10, 3, 4) == ((5 * 3 * 10 + 10 * 10) * 4, 6)


# ----- the twin -----------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 4])
def test_torch_twin_has_the_weights_and_gives_the_loss_and_gradients(depth):
    model, x, target = workload(depth, np.float64, width=7, batch=5)
    twin = bench.torch_twin(model)
    params = list(model.params())
    assert len(params) == len(list(twin.parameters())) == 2 * depth
    for p, pt in zip(params, twin.parameters(), strict=True):
        assert pt.dtype == torch.float64 and pt.shape == p.data.shape
        np.testing.assert_array_equal(pt.detach().numpy(), p.data)
    assert [type(m).__name__ for m in twin][:2] == (["Linear", "Tanh"] if depth > 1 else ["Linear"])
    loss, loss_t = bench.loss_tinypytorch(model, x, target), bench.loss_torch(twin, x, target)
    loss.backward()
    loss_t.backward()
    assert loss.data.dtype == np.float64 and loss_t.dtype == torch.float64
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-10)
    for p, pt in zip(params, twin.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.data, pt.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_float32_workload_is_float32_throughout():
    model, x, target = workload(2, np.float32)
    twin = bench.torch_twin(model)
    assert {p.data.dtype for p in model.params()} == {np.dtype(np.float32)} and x.dtype == target.dtype == np.float32
    assert {p.dtype for p in twin.parameters()} == {torch.float32}
    loss, loss_t = bench.loss_tinypytorch(model, x, target), bench.loss_torch(twin, x, target)
    assert loss.data.dtype == np.float32 and loss_t.dtype == torch.float32
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-5)


# ----- memory held --------------------------------------------------------------------------------

def check_memory(memory, saved, params_bytes, itemsize):
    assert memory.after_forward - memory.output == saved.activations > 0
    assert memory.gradients == params_bytes
    assert memory.after_backward == memory.gradients + memory.output  # the saved tensors are gone
    assert memory.after_drop == memory.gradients
    assert memory.peak >= max(memory.after_forward, memory.after_backward)
    assert memory.output >= itemsize


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 3])
def test_tinypytorch_frees_the_saved_tensors_in_backward(depth, dtype):
    model, x, target = workload(depth, dtype, width=32, batch=16)
    saved = bench.saved_tinypytorch(model, x, target)
    memory = bench.memory_tinypytorch(model, x, target)
    itemsize = np.dtype(dtype).itemsize
    check_memory(memory, saved, sum(p.data.nbytes for p in model.params()), itemsize)
    assert memory.output == itemsize  # the loss: one number
    assert memory.overhead > 0  # the graph's Python objects
    assert all(p.grad is None for p in model.params())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 3])
def test_torch_frees_the_saved_tensors_in_backward(depth, dtype):
    model, x, target = workload(depth, dtype, width=32, batch=16)
    twin = bench.torch_twin(model)
    saved = bench.saved_torch(twin, x, target)
    memory = bench.memory_torch(twin, x, target)
    check_memory(memory, saved, sum(p.data.nbytes for p in model.params()), np.dtype(dtype).itemsize)
    assert all(p.grad is None for p in twin.parameters())


def test_tinypytorch_measure_sees_what_retain_graph_keeps(monkeypatch):
    """The same measure, with backward(retain_graph=True): the activations stay until the loss is dropped."""
    model, x, target = workload(3, np.float64, width=32, batch=16)
    saved = bench.saved_tinypytorch(model, x, target)
    monkeypatch.setattr(tinypytorch.Variable, "backward",
                        functools.partialmethod(tinypytorch.Variable.backward, retain_graph=True))
    memory = bench.memory_tinypytorch(model, x, target)
    assert memory.after_backward == memory.gradients + memory.output + saved.activations
    assert memory.after_drop == memory.gradients


def test_torch_measure_sees_what_retain_graph_keeps(monkeypatch):
    model, x, target = workload(3, np.float64, width=32, batch=16)
    twin = bench.torch_twin(model)
    saved = bench.saved_torch(twin, x, target)
    monkeypatch.setattr(torch.Tensor, "backward", functools.partialmethod(torch.Tensor.backward, retain_graph=True))
    memory = bench.memory_torch(twin, x, target)
    assert memory.after_backward == memory.gradients + memory.output + saved.activations
    assert memory.after_drop == memory.gradients


def test_tinypytorch_peak_counts_a_temporary_array(monkeypatch):
    model, x, target = workload(1, np.float64, width=32, batch=16)
    plain = bench.memory_tinypytorch(model, x, target)
    big = 10 * 2**20
    original = bench.loss_tinypytorch

    def with_temporary(*args):
        np.ones(big, dtype=np.uint8)  # allocated and freed during the forward pass
        return original(*args)

    monkeypatch.setattr(bench, "loss_tinypytorch", with_temporary)
    measured = bench.memory_tinypytorch(model, x, target)
    assert measured.peak >= big > plain.peak
    assert measured.after_forward == plain.after_forward


# ----- the report ---------------------------------------------------------------------------------

def fake_results(saved_torch_bytes=300):
    results = {}
    for dtype, size in [("float32", 1), ("float64", 2)]:
        for depth in (1, 2):
            saved = bench.Saved(100 * depth * size, 3 * depth, 40 * size)
            memory = bench.Memory(peak=1000 * size, after_forward=40 * size + 8, output=8,
                                  after_backward=500 * size + 8, gradients=500 * size, after_drop=500 * size,
                                  overhead=2048)
            memory_t = bench.Memory(peak=500 * size, after_forward=40 * size + 64, output=64,
                                    after_backward=500 * size + 64, gradients=500 * size, after_drop=500 * size)
            saved_t = bench.Saved(saved_torch_bytes * depth * size if saved_torch_bytes else saved.bytes, 3 * depth,
                                  40 * size)
            results[depth, dtype] = {"tinypytorch": (saved, memory), "torch": (saved_t, memory_t)}
    return results


def test_report_puts_ratios_side_by_side_and_the_plot_is_written(tmp_path):
    settings = {"depths": [1, 2], "width": 10, "batch": 3}
    text, equal = bench.report(fake_results(saved_torch_bytes=None), settings, "quick")
    assert equal and "ratio of exactly 1.00: met" in text and "profiler figures pass the same checks" in text
    assert "= activations saved: tinypytorch yes, PyTorch yes;" in text
    assert text.count("| 1.00 | 3 | 3 |") == 2 and "| 2.00 |" in text  # saved ratio 1, peak ratio 1000 / 500
    for section in ("## tinypytorch", "## PyTorch"):
        rows = [row.split(" | ") for row in text.split(section)[1].split("\n\n")[2].splitlines()[2:]]
        assert len(rows) == 4 and all(row[6] == row[9] == "0" for row in rows)  # the differences that should be 0
        assert section == "## PyTorch" or all(row[11] == "2.0 |" for row in rows)  # graph objects: 2 KiB
    assert "CPU: " in text and f"NumPy: {np.__version__}" in text and "PyTorch: " in text
    text, equal = bench.report(fake_results(saved_torch_bytes=300), settings, "quick")
    assert not equal and "NOT met" in text and "| 0.33 |" in text
    results = fake_results()
    results[1, "float32"]["tinypytorch"][1].after_forward += 8  # one stray array of 8 bytes shows
    text = bench.report(results, settings, "quick")[0]
    assert "| 1 | float32 | 0.00 | 0.00 | 8 B | 0.00 | +8 B | 0.00 | 0.00 | 0 | 0.00 | 2.0 |" in text
    assert "= activations saved: tinypytorch NO, PyTorch yes;" in text
    assert "= gradients: tinypytorch yes, PyTorch yes" in text
    results[2, "float64"]["torch"][1].after_drop += 64
    text = bench.report(results, settings, "quick")[0]
    assert "= gradients: tinypytorch yes, PyTorch NO" in text and "figures fail a check" in text
    bench.plot(results, tmp_path / "memory.png")
    assert (tmp_path / "memory.png").read_bytes().startswith(b"\x89PNG")


def test_full_settings_are_the_issues_sizes():
    assert bench.SETTINGS["full"] == {"depths": [4, 8, 16, 32], "width": 1024, "batch": 256}
    assert set(bench.DTYPES) == {"float32", "float64"}
