"""bench/bench_memory.py: what it counts is what the graphs hold, in both frameworks.

Small sizes only; nothing here looks at a timing. The benchmark itself runs with
`python bench/bench_memory.py` (or `--quick`).
"""
import functools
import gc
import importlib.util
import pathlib
import sys
import weakref

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch.autograd.graph import SavedTensor
from tinypytorch.core import Function
from tinypytorch.utils.checkpoint import _Frame

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


# ----- checkpointing ------------------------------------------------------------------------------
# (depth, segments): checkpoint_sequential's segments, among them uneven splits (the last segment takes
# the remainder), one layer per segment, and one segment (no checkpoint at all)
CHECKPOINTED = [(2, 2), (3, 2), (5, 2), (7, 3), (8, 3), (10, 3), (4, 4), (6, 6), (4, 1)]


def held_by_tinypytorch_graph(loss):
    """(bytes, count) of the tensors the graph behind `loss` keeps for backward, walked by its edges: each
    SavedTensor that holds an array, and the inputs kept by each checkpoint whose placeholders a SavedTensor
    of the graph holds (found through its unpack hook, the checkpoint's own). Written here, not taken from
    the benchmark, so that a mistake in either shows."""
    total, count, frames = 0, 0, {}
    todo, seen = [loss.creator], set()
    while todo:
        f = todo.pop()
        if not isinstance(f, Function) or id(f) in seen:
            continue
        seen.add(id(f))
        for s in f._saved:
            if not isinstance(s, SavedTensor):
                continue
            frame = getattr(s.unpack_hook, "__self__", None)
            if isinstance(frame, _Frame):
                assert s.nbytes() == 0  # a placeholder: no array
                frames[id(frame)] = frame
            else:
                total, count = total + s.nbytes(), count + 1
        todo.extend(node for node, _ in f.edges)
    for frame in frames.values():
        total += sum(s.nbytes() for s in frame.inputs)
        count += len(frame.inputs)
    return total, count, list(frames.values())


def test_layer_functions_are_the_networks_layers():
    model, x, _ = workload(3, np.float64)
    twin = bench.torch_twin(model)
    functions, modules = bench.layer_functions(model), bench.torch_layer_functions(twin)
    assert len(functions) == len(modules) == 3
    assert [type(m).__name__ for m in modules] == ["Sequential", "Sequential", "Linear"]
    y, y_t = tinypytorch.Variable(x), torch.from_numpy(x)
    for f, m in zip(functions, modules, strict=True):
        y, y_t = f(y), m(y_t)
    np.testing.assert_array_equal(y.data, model(tinypytorch.Variable(x)).data)
    np.testing.assert_array_equal(y_t.detach().numpy(), twin(torch.from_numpy(x)).detach().numpy())
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)


def test_segments_and_counts_by_hand():
    assert bench.segments_for("plain", 128) is None
    assert [bench.segments_for("sqrt", n) for n in (8, 16, 32, 64, 128)] == [3, 4, 6, 8, 11]
    assert bench.segments_for("every", 32) == 32
    assert bench.segment_layout(128, 11) == (11, 11, 18)  # PyTorch's rule: the last segment takes the remainder
    assert bench.segment_layout(8, 3) == (3, 2, 4) and bench.segment_layout(8, 8) == (8, 1, 1)
    assert bench.segment_layout(8, None) == (1, 8, 8)
    # depth 8 in 3 segments: 2 checkpoint inputs; the last 4 layers save 4 inputs, 4 weights, 3 tanh outputs;
    # the loss 2 operands
    assert bench.expected_saved_checkpointed(8, 3, 10, 3, 4) == (((2 + 4 + 3 + 2) * 3 * 10 + 4 * 10 * 10) * 4, 15)
    # every layer: 7 inputs; the last Linear its input and weight; the loss 2
    assert bench.expected_saved_checkpointed(8, 8, 10, 3, 8) == (((7 + 1 + 2) * 3 * 10 + 10 * 10) * 8, 11)
    for depth in (1, 2, 5):  # no checkpoint, or one segment (run plainly): as without checkpointing
        assert bench.expected_saved_checkpointed(depth, None, 10, 3, 8) == bench.expected_saved(depth, 10, 3, 8)
        assert bench.expected_saved_checkpointed(depth, 1, 10, 3, 8) == bench.expected_saved(depth, 10, 3, 8)
    assert [bench.held_activations(128, s) for s in (None, 11, 128)] == [128, 28, 128]
    assert bench.held_activations(16, 4) == 7  # inputs of segments 2 and 3, the last segment's input, 3 tanh, output
    assert bench.predicted_activations(16, 4) == 8 and bench.predicted_activations(16, None) == 17
    assert bench.recomputed_layers(128, 11) == 110 and bench.recomputed_layers(8, 8) == 7
    assert bench.recomputed_layers(8, None) == 0
    assert bench.working_memory(1024, 256) == 1024 * 1024 + 2 * 256 * 1024


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_checkpointed_saved_bytes_are_the_count_by_hand_in_both_frameworks(depth, segments, dtype):
    model, x, target = workload(depth, dtype)
    ours = bench.saved_tinypytorch(model, x, target, segments)
    theirs = bench.saved_torch(bench.torch_twin(model), x, target, segments)
    itemsize = np.dtype(dtype).itemsize
    assert (ours.bytes, ours.count) == bench.expected_saved_checkpointed(depth, segments, WIDTH, BATCH, itemsize)
    assert ours == theirs
    # new memory among what the hook saw: the checkpoint inputs but the batch, the last segment's activations
    assert ours.activations == bench.held_activations(depth, segments) * BATCH * WIDTH * itemsize
    plain = bench.saved_tinypytorch(model, x, target)
    assert ours.bytes < plain.bytes if segments > 1 else ours == plain


@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_the_hook_counts_what_the_checkpointed_tinypytorch_graph_keeps(depth, segments):
    model, x, target = workload(depth, np.float64)
    counted = bench.saved_tinypytorch(model, x, target, segments)
    loss = bench.loss_tinypytorch(model, x, target, segments)  # no outer hooks: kept tensors hold their arrays
    total, count, frames = held_by_tinypytorch_graph(loss)
    assert (total, count) == (counted.bytes, counted.count)
    assert len(frames) == segments - 1  # every segment but the last is checkpointed
    frames = [weakref.ref(frame) for frame in frames]
    gc.disable()  # what backward frees, it frees by reference counting
    try:
        loss.backward()
        assert held_by_tinypytorch_graph(loss)[0] == 0  # the loss is still referenced, its saved tensors are gone
        assert all(frame() is None for frame in frames)  # and so are the checkpoints, with the inputs they kept
    finally:
        gc.enable()


def gradients_tinypytorch(model, x, target, segments):
    loss = bench.loss_tinypytorch(model, x, target, segments)
    loss.backward()
    grads = [p.grad.data.copy() for p in model.params()]
    model.cleargrads()
    return loss.data.item(), grads


def gradients_torch(twin, x, target, segments):
    loss = bench.loss_torch(twin, x, target, segments)
    loss.backward()
    grads = [p.grad.numpy().copy() for p in twin.parameters()]
    twin.zero_grad(set_to_none=True)
    return loss.item(), grads


@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_checkpointed_gradients_equal_the_plain_runs_and_the_torch_twins(depth, segments):
    model, x, target = workload(depth, np.float64, width=7, batch=5)
    twin = bench.torch_twin(model)
    loss, plain = gradients_tinypytorch(model, x, target, None)
    loss_c, checkpointed = gradients_tinypytorch(model, x, target, segments)
    loss_t, plain_t = gradients_torch(twin, x, target, None)
    loss_tc, checkpointed_t = gradients_torch(twin, x, target, segments)
    assert len(plain) == len(plain_t) == 2 * depth and all(np.any(g != 0) for g in plain)
    assert loss_c == loss and loss_tc == loss_t
    np.testing.assert_allclose(loss_tc, loss, rtol=1e-10)
    for g, g_c, g_t, g_tc in zip(plain, checkpointed, plain_t, checkpointed_t, strict=True):
        np.testing.assert_allclose(g_c, g, rtol=1e-12, atol=0)  # recomputation repeats the same arithmetic
        np.testing.assert_allclose(g_tc, g_t, rtol=1e-12, atol=0)
        np.testing.assert_allclose(g_c, g_tc, rtol=1e-10, atol=1e-13)  # the twin, as the plain runs above


def check_checkpointed_memory(memory, depth, segments, activation, extra):
    """What the schedule holds: (k + m - 1) activations after forward (plus `extra`), nothing of it after backward."""
    assert memory.after_forward - memory.output == bench.held_activations(depth, segments) * activation + extra
    assert memory.after_backward == memory.gradients + memory.output
    assert memory.after_drop == memory.gradients
    assert memory.peak > memory.after_forward


@pytest.mark.parametrize(("depth", "segments"), [(3, 2), (8, 3), (5, 5)])
def test_tinypytorch_checkpointed_memory_follows_the_schedule(depth, segments):
    model, x, target = workload(depth, np.float64, width=32, batch=16)
    params_bytes = sum(p.data.nbytes for p in model.params())
    bench.saved_tinypytorch(model, x, target, segments)  # the warm-up the benchmark does too
    kept = bench.memory_tinypytorch(model, x, target, segments)
    dropped = bench.memory_tinypytorch(model, x, target, segments, drop_gradients=True)
    activation = 16 * 32 * 8
    check_checkpointed_memory(kept, depth, segments, activation, 0)
    check_checkpointed_memory(dropped, depth, segments, activation, 0)
    assert kept.gradients == params_bytes and dropped.gradients == 0 and dropped.after_backward == dropped.output
    assert dropped.peak < kept.peak
    plain = bench.memory_tinypytorch(model, x, target)
    assert plain.after_forward - plain.output == depth * activation  # every layer's output
    assert all(p.grad is None and not p._hooks for p in model.params())  # no gradient, no hook left behind
    assert gradients_tinypytorch(model, x, target, segments)[1][0].any()  # and the next backward gives gradients


@pytest.mark.parametrize(("depth", "segments"), [(3, 2), (8, 3), (5, 5)])
def test_torch_checkpointed_memory_follows_the_schedule(depth, segments):
    model, x, target = workload(depth, np.float64, width=32, batch=16)
    params_bytes = sum(p.data.nbytes for p in model.params())
    twin = bench.torch_twin(model)
    bench.saved_torch(twin, x, target, segments)
    kept = bench.memory_torch(twin, x, target, segments)
    dropped = bench.memory_torch(twin, x, target, segments, drop_gradients=True)
    rng_states = (segments - 1) * torch.get_rng_state().nbytes  # each checkpoint keeps the generator's state
    check_checkpointed_memory(kept, depth, segments, 16 * 32 * 8, rng_states)
    check_checkpointed_memory(dropped, depth, segments, 16 * 32 * 8, rng_states)
    assert kept.gradients == params_bytes and dropped.gradients == 0 and dropped.after_backward == dropped.output
    assert dropped.peak < kept.peak
    assert all(p.grad is None for p in twin.parameters())
    assert gradients_torch(twin, x, target, segments)[1][0].any()  # the hooks are gone: gradients are kept again


def test_time_passes_takes_turns_and_clears_after_each():
    calls = []

    class Loss:
        def __init__(self, name):
            self.name = name

        def backward(self):
            calls.append(("backward", self.name))

    passes = {name: (lambda name=name: calls.append(("forward", name)) or Loss(name)) for name in ("a", "b")}
    times = bench.time_passes(passes, lambda: calls.append(("clear",)), repeats=3)
    assert calls == [("forward", "a"), ("backward", "a"), ("clear",), ("forward", "b"), ("backward", "b"),
                     ("clear",)] * 3
    assert {name: len(t) for name, t in times.items()} == {"a": 3, "b": 3}


def fake_checkpoint_results(s, saved_extra=0, peak_scale=1.0, slow=1.0):
    """Results shaped like run_checkpoint's, consistent with the schedule: the report's checks must say yes."""
    itemsize = 4
    a = s["batch"] * s["width"] * itemsize
    c = bench.working_memory(s["width"], s["batch"]) * itemsize
    rng_bytes = torch.get_rng_state().nbytes
    results = {}
    for depth in s["depths"]:
        for conf in bench.CONFIGURATIONS:
            segments = bench.segments_for(conf, depth)
            k = bench.segment_layout(depth, segments)[0]
            row = {}
            for framework in ("tinypytorch", "torch"):
                n, count = bench.expected_saved_checkpointed(depth, segments, s["width"], s["batch"], itemsize)
                n += saved_extra if framework == "tinypytorch" else 0
                held = bench.held_activations(depth, segments) * a + (k - 1) * rng_bytes * (framework == "torch")
                gradients = depth * (s["width"] ** 2 + s["width"]) * itemsize
                scale = peak_scale if conf == "sqrt" and framework == "tinypytorch" else 1.0
                dropped = bench.Memory(peak=int((held + c) * scale), after_forward=held + 4, output=4,
                                       after_backward=4, gradients=0, after_drop=0)
                kept = bench.Memory(peak=gradients + 2 * a, after_forward=held + 4, output=4,
                                    after_backward=gradients + 4, gradients=gradients, after_drop=gradients)
                seconds = [1.0, 1.1, 0.9] if conf == "plain" else [1.3 * (slow if framework == "torch" else 1)] * 3
                row[framework] = bench.Checkpointed(bench.Saved(n, count, held), kept, dropped, seconds)
            results[depth, conf] = row
    return results


def test_report_checkpoint_states_each_target_and_the_plot_is_written(tmp_path):
    s = {"depths": [8, 16], "width": 1024, "batch": 256, "dtype": "float32", "repeats": {8: 3, 16: 3}}
    text, targets = bench.report_checkpoint(fake_checkpoint_results(s), s, "quick")
    assert targets == {"saved": True, "peak": {"tinypytorch": True, "torch": True},
                       "time": {"tinypytorch": True, "torch": True}}
    assert "saves no more than PyTorch in every configuration: met" in text
    assert "Both equal the count by hand, bytes and tensors: yes" in text
    assert "(k + N/k) a + c, tinypytorch: met at every depth" in text
    assert "tinypytorch holds (k + m − 1) a after forward in every row: yes" in text
    assert "PyTorch holds (k + m − 1) a + (k − 1) × 5,056 B: yes" in text
    assert "at most 1.35× the plain run, PyTorch: met in every checkpointed row" in text
    assert "| 8 | 3 | √N segments | 4 | 1.300 | 1.30 | 1.44 |" in text  # medians 1.3 and 1.0, fastest 1.3 and 0.9
    assert "use_reentrant=False" in text and "float32" in text
    bench.plot_checkpoint(fake_checkpoint_results(s), s, tmp_path / "checkpoint.png")
    assert (tmp_path / "checkpoint.png").read_bytes().startswith(b"\x89PNG")

    text, targets = bench.report_checkpoint(fake_checkpoint_results(s, saved_extra=4, peak_scale=1.3, slow=1.1),
                                            s, "quick")
    assert targets == {"saved": False, "peak": {"tinypytorch": False, "torch": True},
                       "time": {"tinypytorch": True, "torch": False}}
    assert "in every configuration: NOT met" in text and "bytes and tensors: NO" in text
    assert "(k + N/k) a + c, tinypytorch: NOT met at N = 8, 16 (ratios 1.337, 1.207 at N = 8, 16)" in text
    assert "PyTorch: NOT met at N = 8, √N segments (1.430)" in text


def test_checkpoint_settings_are_the_issues_sizes():
    full = bench.CHECKPOINT_SETTINGS["full"]
    assert {key: full[key] for key in ("depths", "width", "batch", "dtype")} == {
        "depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256, "dtype": "float32"}
    assert sorted(full["repeats"]) == full["depths"] and min(full["repeats"].values()) >= 3
    quick = bench.CHECKPOINT_SETTINGS["quick"]
    assert sorted(quick["repeats"]) == quick["depths"]
    assert set(bench.CONFIGURATIONS) == {"plain", "sqrt", "every"}
