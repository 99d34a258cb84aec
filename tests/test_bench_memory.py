"""bench/bench_memory.py's parts (memory_saved, memory_checkpoint, memory_reversible): what they count is what
the graphs hold, in both frameworks.

Small sizes only; nothing here looks at a timing. The benchmark itself runs with
`python bench/bench_memory.py` (or `--quick`).
"""
import functools
import gc
import weakref

import numpy as np
import pytest
import torch

import tinypytorch
from tinypytorch.autograd.graph import SavedTensor
from tinypytorch.core import Function
from tinypytorch.utils.checkpoint import _Frame

# bench/'s modules, by name: tests/conftest.py puts bench/ on the path
import memory_checkpoint as checkpointing
import memory_measures as measures
import memory_reversible as reversible
import memory_reversible_report as reversible_report
import memory_saved
import networks
import ports
import timing

pytestmark = [pytest.mark.torch]

WIDTH, BATCH = 6, 4
DTYPES = [np.float32, np.float64]


def workload(depth, dtype, width=WIDTH, batch=BATCH):
    model = networks.build_mlp(depth, width, dtype)
    x, target = networks.batch_and_target(batch, width, dtype)
    return model, x, target


def walk_tinypytorch_graph(loss):
    """Every Function behind `loss`, once, found by its edges (written here, not taken from tinypytorch.utils)."""
    todo, seen = [loss.creator], {}
    while todo:
        f = todo.pop()
        if isinstance(f, Function) and id(f) not in seen:
            seen[id(f)] = f
            todo.extend(node for node, _ in f.edges)
    return list(seen.values())


def walk_torch_graph(loss):
    """Every node behind `loss`, once, found by next_functions."""
    todo, seen = [loss.grad_fn], []
    while todo:
        f = todo.pop()
        if f is not None and f not in seen:
            seen.append(f)
            todo.extend(node for node, _ in f.next_functions)
    return seen


def saved_in_tinypytorch_graph(loss, existing):
    """Walk the graph behind `loss` by its edges: (bytes, count) of its SavedTensors, and the bytes of the
    distinct saved arrays that are not in `existing` (compared by identity). Written here, not taken from
    the benchmark or from tinypytorch.utils, so that a mistake in either shows."""
    total, count, new_arrays = 0, 0, {}
    for f in walk_tinypytorch_graph(loss):
        for s in f.saved:
            if isinstance(s, SavedTensor):
                total, count = total + s.nbytes(), count + 1
                data = s.data if s.variable is None else s.variable.data
                if not any(data is a for a in existing):
                    new_arrays[id(data)] = data.nbytes
    return total, count, sum(new_arrays.values())


def saved_in_torch_graph(loss):
    """(bytes, count) of the tensors in the `_saved_*` attributes of the nodes behind `loss`."""
    total, count = 0, 0
    for f in walk_torch_graph(loss):
        for name in dir(f):
            value = getattr(f, name) if name.startswith("_saved_") else None
            if isinstance(value, torch.Tensor):
                total, count = total + value.nelement() * value.element_size(), count + 1
    return total, count


# ----- what is saved ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3, 5])
def test_the_hook_counts_what_the_tinypytorch_graph_saves(depth, dtype):
    model, x, target = workload(depth, dtype)
    counted = memory_saved.saved_tinypytorch(model, x, target)
    loss = networks.loss_tinypytorch(model, x, target)  # no hooks: the SavedTensors hold their arrays
    existing = [p.data for p in model.params()] + [x, target]
    assert saved_in_tinypytorch_graph(loss, existing) == (counted.bytes, counted.count, counted.activations)
    # the hidden tanh outputs and the network's output: depth arrays of batch x width
    assert counted.activations == depth * BATCH * WIDTH * np.dtype(dtype).itemsize
    assert all(p.grad is None for p in model.params())  # the counting pass leaves no gradients behind


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 4])
def test_the_hook_counts_what_the_torch_graph_saves(depth, dtype):
    model, x, target = workload(depth, dtype)
    twin = ports.torch_mlp_twin(model)
    counted = memory_saved.saved_torch(twin, x, target)
    assert saved_in_torch_graph(ports.loss_torch(twin, x, target)) == (counted.bytes, counted.count)
    assert all(p.grad is None for p in twin.parameters())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 7])
def test_both_frameworks_save_the_same_bytes_and_tensors(depth, dtype):
    model, x, target = workload(depth, dtype)
    ours = memory_saved.saved_tinypytorch(model, x, target)
    theirs = memory_saved.saved_torch(ports.torch_mlp_twin(model), x, target)
    assert ours == theirs
    assert (ours.bytes, ours.count) == memory_saved.expected_saved(depth, WIDTH, BATCH, np.dtype(dtype).itemsize)


def test_expected_saved_by_hand():
    # depth 1: the batch, the output, the target; depth 2 adds a tanh output (twice: tanh, next Linear) and W
    assert memory_saved.expected_saved(1, 10, 3, 8) == (3 * 3 * 10 * 8, 3)
    assert memory_saved.expected_saved(2, 10, 3, 4) == ((5 * 3 * 10 + 10 * 10) * 4, 6)


# ----- the twin -----------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [1, 2, 4])
def test_torch_mlp_twin_has_the_weights_and_gives_the_loss_and_gradients(depth):
    model, x, target = workload(depth, np.float64, width=7, batch=5)
    twin = ports.torch_mlp_twin(model)
    params = list(model.params())
    assert len(params) == len(list(twin.parameters())) == 2 * depth
    for p, pt in zip(params, twin.parameters(), strict=True):
        assert pt.dtype == torch.float64 and pt.shape == p.data.shape
        np.testing.assert_array_equal(pt.detach().numpy(), p.data)
    assert [type(m).__name__ for m in twin][:2] == (["Linear", "Tanh"] if depth > 1 else ["Linear"])
    loss, loss_t = networks.loss_tinypytorch(model, x, target), ports.loss_torch(twin, x, target)
    loss.backward()
    loss_t.backward()
    assert loss.data.dtype == np.float64 and loss_t.dtype == torch.float64
    np.testing.assert_allclose(loss.data, loss_t.item(), rtol=1e-10)
    for p, pt in zip(params, twin.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.data, pt.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_float32_workload_is_float32_throughout():
    model, x, target = workload(2, np.float32)
    twin = ports.torch_mlp_twin(model)
    assert {p.data.dtype for p in model.params()} == {np.dtype(np.float32)} and x.dtype == target.dtype == np.float32
    assert {p.dtype for p in twin.parameters()} == {torch.float32}
    loss, loss_t = networks.loss_tinypytorch(model, x, target), ports.loss_torch(twin, x, target)
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
    saved = memory_saved.saved_tinypytorch(model, x, target)
    memory = memory_saved.memory_tinypytorch(model, x, target)
    itemsize = np.dtype(dtype).itemsize
    check_memory(memory, saved, sum(p.data.nbytes for p in model.params()), itemsize)
    assert memory.output == itemsize  # the loss: one number
    assert memory.overhead > 0  # the graph's Python objects
    assert all(p.grad is None for p in model.params())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 3])
def test_torch_frees_the_saved_tensors_in_backward(depth, dtype):
    model, x, target = workload(depth, dtype, width=32, batch=16)
    twin = ports.torch_mlp_twin(model)
    saved = memory_saved.saved_torch(twin, x, target)
    memory = memory_saved.memory_torch(twin, x, target)
    check_memory(memory, saved, sum(p.data.nbytes for p in model.params()), np.dtype(dtype).itemsize)
    assert all(p.grad is None for p in twin.parameters())


def test_tinypytorch_measure_sees_what_retain_graph_keeps(monkeypatch):
    """The same measure, with backward(retain_graph=True): the activations stay until the loss is dropped."""
    model, x, target = workload(3, np.float64, width=32, batch=16)
    saved = memory_saved.saved_tinypytorch(model, x, target)
    monkeypatch.setattr(tinypytorch.Variable, "backward",
                        functools.partialmethod(tinypytorch.Variable.backward, retain_graph=True))
    memory = memory_saved.memory_tinypytorch(model, x, target)
    assert memory.after_backward == memory.gradients + memory.output + saved.activations
    assert memory.after_drop == memory.gradients


def test_torch_measure_sees_what_retain_graph_keeps(monkeypatch):
    model, x, target = workload(3, np.float64, width=32, batch=16)
    twin = ports.torch_mlp_twin(model)
    saved = memory_saved.saved_torch(twin, x, target)
    monkeypatch.setattr(torch.Tensor, "backward", functools.partialmethod(torch.Tensor.backward, retain_graph=True))
    memory = memory_saved.memory_torch(twin, x, target)
    assert memory.after_backward == memory.gradients + memory.output + saved.activations
    assert memory.after_drop == memory.gradients


def test_tinypytorch_peak_counts_a_temporary_array(monkeypatch):
    model, x, target = workload(1, np.float64, width=32, batch=16)
    plain = memory_saved.memory_tinypytorch(model, x, target)
    big = 10 * 2**20
    original = networks.loss_tinypytorch

    def with_temporary(*args):
        np.ones(big, dtype=np.uint8)  # allocated and freed during the forward pass
        return original(*args)

    monkeypatch.setattr(memory_saved, "loss_tinypytorch", with_temporary)
    measured = memory_saved.memory_tinypytorch(model, x, target)
    assert measured.peak >= big > plain.peak
    assert measured.after_forward == plain.after_forward


# ----- the report ---------------------------------------------------------------------------------

def fake_results(saved_torch_bytes=300):
    results = {}
    for dtype, size in [("float32", 1), ("float64", 2)]:
        for depth in (1, 2):
            saved = measures.Saved(100 * depth * size, 3 * depth, 40 * size)
            memory = measures.Memory(peak=1000 * size, after_forward=40 * size + 8, output=8,
                                     after_backward=500 * size + 8, gradients=500 * size, after_drop=500 * size,
                                     overhead=2048)
            memory_t = measures.Memory(peak=500 * size, after_forward=40 * size + 64, output=64,
                                       after_backward=500 * size + 64, gradients=500 * size, after_drop=500 * size)
            saved_t = measures.Saved(saved_torch_bytes * depth * size if saved_torch_bytes else saved.bytes, 3 * depth,
                                     40 * size)
            results[depth, dtype] = {"tinypytorch": (saved, memory), "torch": (saved_t, memory_t)}
    return results


def test_report_puts_ratios_side_by_side_and_the_plot_is_written(tmp_path):
    settings = {"depths": [1, 2], "width": 10, "batch": 3}
    text, equal = memory_saved.report(fake_results(saved_torch_bytes=None), settings, "quick")
    assert equal and "ratio of exactly 1.00: met" in text and "profiler figures pass the same checks" in text
    assert "= activations saved: tinypytorch yes, PyTorch yes;" in text
    assert text.count("| 1.00 | 3 | 3 |") == 2 and "| 2.00 |" in text  # saved ratio 1, peak ratio 1000 / 500
    for section in ("## tinypytorch", "## PyTorch"):
        rows = [row.split(" | ") for row in text.split(section)[1].split("\n\n")[2].splitlines()[2:]]
        assert len(rows) == 4 and all(row[6] == row[9] == "0" for row in rows)  # the differences that should be 0
        assert section == "## PyTorch" or all(row[11] == "2.0 |" for row in rows)  # graph objects: 2 KiB
    assert "CPU: " in text and f"NumPy: {np.__version__}" in text and "PyTorch: " in text
    text, equal = memory_saved.report(fake_results(saved_torch_bytes=300), settings, "quick")
    assert not equal and "NOT met" in text and "| 0.33 |" in text
    results = fake_results()
    results[1, "float32"]["tinypytorch"][1].after_forward += 8  # one stray array of 8 bytes shows
    text = memory_saved.report(results, settings, "quick")[0]
    assert "| 1 | float32 | 0.00 | 0.00 | 8 B | 0.00 | +8 B | 0.00 | 0.00 | 0 | 0.00 | 2.0 |" in text
    assert "= activations saved: tinypytorch NO, PyTorch yes;" in text
    assert "= gradients: tinypytorch yes, PyTorch yes" in text
    results[2, "float64"]["torch"][1].after_drop += 64
    text = memory_saved.report(results, settings, "quick")[0]
    assert "= gradients: tinypytorch yes, PyTorch NO" in text and "figures fail a check" in text
    memory_saved.plot(results, tmp_path / "memory.png")
    assert (tmp_path / "memory.png").read_bytes().startswith(b"\x89PNG")


def test_full_settings_are_the_issues_sizes():
    assert memory_saved.SETTINGS["full"] == {"depths": [4, 8, 16, 32], "width": 1024, "batch": 256}
    assert set(networks.DTYPES) == {"float32", "float64"}


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
    for f in walk_tinypytorch_graph(loss):
        for s in f.saved:
            if not isinstance(s, SavedTensor):
                continue
            frame = getattr(s.unpack_hook, "__self__", None)
            if isinstance(frame, _Frame):
                assert s.nbytes() == 0  # a placeholder: no array
                frames[id(frame)] = frame
            else:
                total, count = total + s.nbytes(), count + 1
    for frame in frames.values():
        total += sum(s.nbytes() for s in frame.inputs)
        count += len(frame.inputs)
    return total, count, list(frames.values())


def test_layer_functions_are_the_networks_layers():
    model, x, _ = workload(3, np.float64)
    twin = ports.torch_mlp_twin(model)
    functions, modules = networks.layer_functions(model), ports.torch_layer_functions(twin)
    assert len(functions) == len(modules) == 3
    assert [type(m).__name__ for m in modules] == ["Sequential", "Sequential", "Linear"]
    y, y_t = tinypytorch.Variable(x), torch.from_numpy(x)
    for f, m in zip(functions, modules, strict=True):
        y, y_t = f(y), m(y_t)
    np.testing.assert_array_equal(y.data, model(tinypytorch.Variable(x)).data)
    np.testing.assert_array_equal(y_t.detach().numpy(), twin(torch.from_numpy(x)).detach().numpy())
    np.testing.assert_allclose(y.data, y_t.detach().numpy(), rtol=1e-12)


def test_segments_and_counts_by_hand():
    assert networks.segments_for("plain", 128) is None
    assert [networks.segments_for("sqrt", n) for n in (8, 16, 32, 64, 128)] == [3, 4, 6, 8, 11]
    assert networks.segments_for("every", 32) == 32
    assert networks.segment_layout(128, 11) == (11, 11, 18)  # PyTorch's rule: the last segment takes the remainder
    assert networks.segment_layout(8, 3) == (3, 2, 4) and networks.segment_layout(8, 8) == (8, 1, 1)
    assert networks.segment_layout(8, None) == (1, 8, 8)
    # depth 8 in 3 segments: 2 checkpoint inputs; the last 4 layers save 4 inputs, 4 weights, 3 tanh outputs;
    # the loss 2 operands
    assert checkpointing.expected_saved_checkpointed(8, 3, 10, 3, 4) == (
        ((2 + 4 + 3 + 2) * 3 * 10 + 4 * 10 * 10) * 4, 15)
    # every layer: 7 inputs; the last Linear its input and weight; the loss 2
    assert checkpointing.expected_saved_checkpointed(8, 8, 10, 3, 8) == (((7 + 1 + 2) * 3 * 10 + 10 * 10) * 8, 11)
    for depth in (1, 2, 5):  # no checkpoint, or one segment (run plainly): as without checkpointing
        plain = memory_saved.expected_saved(depth, 10, 3, 8)
        assert checkpointing.expected_saved_checkpointed(depth, None, 10, 3, 8) == plain
        assert checkpointing.expected_saved_checkpointed(depth, 1, 10, 3, 8) == plain
    assert [checkpointing.held_activations(128, s) for s in (None, 11, 128)] == [128, 28, 128]
    # inputs of segments 2 and 3, the last segment's input, 3 tanh, output
    assert checkpointing.held_activations(16, 4) == 7
    assert checkpointing.predicted_activations(16, 4) == 8 and checkpointing.predicted_activations(16, None) == 17
    assert checkpointing.recomputed_layers(128, 11) == 110 and checkpointing.recomputed_layers(8, 8) == 7
    assert checkpointing.recomputed_layers(8, None) == 0
    assert checkpointing.working_memory(1024, 256) == 1024 * 1024 + 2 * 256 * 1024


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_checkpointed_saved_bytes_are_the_count_by_hand_in_both_frameworks(depth, segments, dtype):
    model, x, target = workload(depth, dtype)
    ours = memory_saved.saved_tinypytorch(model, x, target, segments)
    theirs = memory_saved.saved_torch(ports.torch_mlp_twin(model), x, target, segments)
    itemsize = np.dtype(dtype).itemsize
    expected = checkpointing.expected_saved_checkpointed(depth, segments, WIDTH, BATCH, itemsize)
    assert (ours.bytes, ours.count) == expected
    assert ours == theirs
    # new memory among what the hook saw: the checkpoint inputs but the batch, the last segment's activations
    assert ours.activations == checkpointing.held_activations(depth, segments) * BATCH * WIDTH * itemsize
    plain = memory_saved.saved_tinypytorch(model, x, target)
    assert ours.bytes < plain.bytes if segments > 1 else ours == plain


@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_the_hook_counts_what_the_checkpointed_tinypytorch_graph_keeps(depth, segments):
    model, x, target = workload(depth, np.float64)
    counted = memory_saved.saved_tinypytorch(model, x, target, segments)
    loss = networks.loss_tinypytorch(model, x, target, segments)  # no outer hooks: kept tensors hold their arrays
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
    loss = networks.loss_tinypytorch(model, x, target, segments)
    loss.backward()
    grads = [p.grad.data.copy() for p in model.params()]
    model.cleargrads()
    return loss.data.item(), grads


def gradients_torch(twin, x, target, segments):
    loss = ports.loss_torch(twin, x, target, segments)
    loss.backward()
    grads = [p.grad.numpy().copy() for p in twin.parameters()]
    twin.zero_grad(set_to_none=True)
    return loss.item(), grads


@pytest.mark.parametrize(("depth", "segments"), CHECKPOINTED)
def test_checkpointed_gradients_equal_the_plain_runs_and_the_torch_twins(depth, segments):
    model, x, target = workload(depth, np.float64, width=7, batch=5)
    twin = ports.torch_mlp_twin(model)
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
    assert memory.after_forward - memory.output == checkpointing.held_activations(depth, segments) * activation + extra
    assert memory.after_backward == memory.gradients + memory.output
    assert memory.after_drop == memory.gradients
    assert memory.peak > memory.after_forward


@pytest.mark.parametrize(("depth", "segments"), [(3, 2), (8, 3), (5, 5)])
def test_tinypytorch_checkpointed_memory_follows_the_schedule(depth, segments):
    model, x, target = workload(depth, np.float64, width=32, batch=16)
    params_bytes = sum(p.data.nbytes for p in model.params())
    memory_saved.saved_tinypytorch(model, x, target, segments)  # the warm-up the benchmark does too
    kept = memory_saved.memory_tinypytorch(model, x, target, segments)
    dropped = memory_saved.memory_tinypytorch(model, x, target, segments, drop_gradients=True)
    activation = 16 * 32 * 8
    check_checkpointed_memory(kept, depth, segments, activation, 0)
    check_checkpointed_memory(dropped, depth, segments, activation, 0)
    assert kept.gradients == params_bytes and dropped.gradients == 0 and dropped.after_backward == dropped.output
    assert dropped.peak < kept.peak
    plain = memory_saved.memory_tinypytorch(model, x, target)
    assert plain.after_forward - plain.output == depth * activation  # every layer's output
    assert all(p.grad is None for p in model.params())  # no gradient left behind
    # and no hook: the next backward gives every gradient, as a model of the same weights that never had a hook
    loss, grads = gradients_tinypytorch(model, x, target, segments)
    loss_fresh, grads_fresh = gradients_tinypytorch(workload(depth, np.float64, width=32, batch=16)[0], x, target,
                                                    segments)
    assert loss == loss_fresh and grads[0].any()
    for g, g_fresh in zip(grads, grads_fresh, strict=True):
        np.testing.assert_array_equal(g, g_fresh)


@pytest.mark.parametrize(("depth", "segments"), [(3, 2), (8, 3), (5, 5)])
def test_torch_checkpointed_memory_follows_the_schedule(depth, segments):
    model, x, target = workload(depth, np.float64, width=32, batch=16)
    params_bytes = sum(p.data.nbytes for p in model.params())
    twin = ports.torch_mlp_twin(model)
    memory_saved.saved_torch(twin, x, target, segments)
    kept = memory_saved.memory_torch(twin, x, target, segments)
    dropped = memory_saved.memory_torch(twin, x, target, segments, drop_gradients=True)
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
    times = timing.time_passes(passes, lambda: calls.append(("clear",)), repeats=3)
    assert calls == [("forward", "a"), ("backward", "a"), ("clear",), ("forward", "b"), ("backward", "b"),
                     ("clear",)] * 3
    assert {name: len(t) for name, t in times.items()} == {"a": 3, "b": 3}


def fake_checkpoint_results(s, saved_extra=0, peak_scale=1.0, slow=1.0):
    """Results shaped like run_checkpoint's, consistent with the schedule: the report's checks must say yes."""
    itemsize = 4
    a = s["batch"] * s["width"] * itemsize
    c = checkpointing.working_memory(s["width"], s["batch"]) * itemsize
    rng_bytes = torch.get_rng_state().nbytes
    results = {}
    for depth in s["depths"]:
        for conf in checkpointing.CONFIGURATIONS:
            segments = networks.segments_for(conf, depth)
            k = networks.segment_layout(depth, segments)[0]
            row = {}
            for framework in ("tinypytorch", "torch"):
                n, count = checkpointing.expected_saved_checkpointed(depth, segments, s["width"], s["batch"], itemsize)
                n += saved_extra if framework == "tinypytorch" else 0
                held = (checkpointing.held_activations(depth, segments) * a
                        + (k - 1) * rng_bytes * (framework == "torch"))
                gradients = depth * (s["width"] ** 2 + s["width"]) * itemsize
                scale = peak_scale if conf == "sqrt" and framework == "tinypytorch" else 1.0
                dropped = measures.Memory(peak=int((held + c) * scale), after_forward=held + 4, output=4,
                                          after_backward=4, gradients=0, after_drop=0)
                kept = measures.Memory(peak=gradients + 2 * a, after_forward=held + 4, output=4,
                                       after_backward=gradients + 4, gradients=gradients, after_drop=gradients)
                seconds = [1.0, 1.1, 0.9] if conf == "plain" else [1.3 * (slow if framework == "torch" else 1)] * 3
                row[framework] = checkpointing.Checkpointed(measures.Saved(n, count, held), kept, dropped, seconds)
            results[depth, conf] = row
    return results


def test_report_checkpoint_states_each_target_and_the_plot_is_written(tmp_path):
    s = {"depths": [8, 16], "width": 1024, "batch": 256, "dtype": "float32", "repeats": {8: 3, 16: 3}}
    text, targets = checkpointing.report_checkpoint(fake_checkpoint_results(s), s, "quick")
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
    checkpointing.plot_checkpoint(fake_checkpoint_results(s), s, tmp_path / "checkpoint.png")
    assert (tmp_path / "checkpoint.png").read_bytes().startswith(b"\x89PNG")

    text, targets = checkpointing.report_checkpoint(fake_checkpoint_results(s, saved_extra=4, peak_scale=1.3, slow=1.1),
                                                    s, "quick")
    assert targets == {"saved": False, "peak": {"tinypytorch": False, "torch": True},
                       "time": {"tinypytorch": True, "torch": False}}
    assert "in every configuration: NOT met" in text and "bytes and tensors: NO" in text
    assert "(k + N/k) a + c, tinypytorch: NOT met at N = 8, 16 (ratios 1.337, 1.207 at N = 8, 16)" in text
    assert "PyTorch: NOT met at N = 8, √N segments (1.430)" in text


def test_checkpoint_settings_are_the_issues_sizes():
    full = checkpointing.CHECKPOINT_SETTINGS["full"]
    assert {key: full[key] for key in ("depths", "width", "batch", "dtype")} == {
        "depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256, "dtype": "float32"}
    assert sorted(full["repeats"]) == full["depths"] and min(full["repeats"].values()) >= 3
    quick = checkpointing.CHECKPOINT_SETTINGS["quick"]
    assert sorted(quick["repeats"]) == quick["depths"]
    assert set(checkpointing.CONFIGURATIONS) == {"plain", "sqrt", "every"}


# ----- reversible networks: the coupling stack and RevCol -----------------------------------------------------

def coupling_workload(depth, dtype, width=WIDTH, batch=BATCH):
    net = networks.build_coupling_stack(depth, width, dtype)
    x, target = networks.batch_and_target(batch, width, dtype)
    return net, x, target


def revcol_workload(columns, levels, dtype, width=WIDTH, batch=BATCH):
    net = networks.RevColNet(columns, levels, width, dtype)
    x, target = networks.batch_and_target(batch, width, dtype)
    return net, x, networks.revcol_states(levels, batch, width, dtype), target


def largest_relative_difference(grads, reference, zeros_exact=True):
    """Per parameter, the largest difference over the largest |reference|. A parameter whose gradient is all zero
    (the first column's alphas and upper Linears' weights: its states are zeros) must get exactly zero; or, with
    zeros_exact=False, a difference measured against the largest |reference| of all the parameters (the one
    Function computes the first column's zero states back through every column after it: they come back as
    rounding leaves them, not as exact zeros)."""
    worst = 0.0
    largest = max(np.max(np.abs(r)) for r in reference)
    for g, r in zip(grads, reference, strict=True):
        assert g.shape == r.shape and g.dtype == r.dtype
        scale = np.max(np.abs(r))
        if scale:
            worst = max(worst, np.max(np.abs(g - r)) / scale)
        elif g.any() and zeros_exact:
            return np.inf
        else:
            worst = max(worst, np.max(np.abs(g)) / largest)
    return worst


def tinypytorch_run(net, loss_fn, params=None):
    loss = loss_fn()
    loss.backward()
    params = list(net.params()) if params is None else params
    assert all(p.grad is not None for p in params)
    grads = [p.grad.data.copy() for p in params]
    net.cleargrads()
    return loss.data.item(), grads


def torch_run(twin, loss_fn, params=None):
    loss = loss_fn()
    loss.backward()
    params = list(twin.parameters()) if params is None else params
    assert all(p.grad is not None for p in params)
    grads = [p.grad.numpy().copy() for p in params]
    twin.zero_grad(set_to_none=True)
    return loss.item(), grads


# The reversible runs compute each block's input back from its output: not the same arithmetic as the plain run,
# so not bitwise equal. In float64 at these depths the difference is a few units in the 16th digit (measured: at
# most 3e-15 relative to each parameter's largest gradient); 1e-12 leaves room and still catches any wrong term.
REVERSIBLE_RTOL = 1e-12


@pytest.mark.parametrize("depth", [1, 2, 5, 9])
def test_coupling_stack_gives_the_plain_runs_loss_and_gradients_in_both_frameworks(depth):
    net, x, target = coupling_workload(depth, np.float64, width=8, batch=5)
    twin = ports.torch_coupling_twin(net)
    assert len(list(net.params())) == len(list(twin.parameters())) == 4 * depth
    for p, pt in zip(net.params(), twin.parameters(), strict=True):
        assert pt.dtype == torch.float64
        np.testing.assert_array_equal(pt.detach().numpy(), p.data)
    ours = {c: tinypytorch_run(net, functools.partial(networks.loss_coupling_tinypytorch, net, x, target, c))
            for c in networks.COUPLING_CONFIGURATIONS}
    theirs = {c: torch_run(twin, functools.partial(ports.loss_coupling_torch, twin, x, target, c))
              for c in networks.COUPLING_CONFIGURATIONS}
    loss, plain = ours["plain"]
    assert all(np.any(g != 0) for g in plain)
    for c in networks.COUPLING_CONFIGURATIONS:
        # the forward pass is the same arithmetic in every configuration: the same loss, to the bit
        assert ours[c][0] == loss and theirs[c][0] == theirs["plain"][0]
        np.testing.assert_allclose(theirs[c][0], loss, rtol=1e-12)
        assert largest_relative_difference(ours[c][1], plain) <= (0 if c == "sqrt" else REVERSIBLE_RTOL)
        assert largest_relative_difference(theirs[c][1], theirs["plain"][1]) <= (0 if c == "sqrt" else REVERSIBLE_RTOL)
        assert largest_relative_difference(theirs[c][1], plain) <= 1e-12  # the twin, as the plain runs above


def test_coupling_comparison_sees_a_wrong_gradient(monkeypatch):
    """The comparison above fails when the reversible backward is off: a wrong inverse (g's term dropped)."""
    net, x, target = coupling_workload(3, np.float64, width=8, batch=5)
    _, plain = tinypytorch_run(net, functools.partial(networks.loss_coupling_tinypytorch, net, x, target, "plain"))
    block_type = type(net.blocks[0])
    original = block_type.inverse

    def off_by_a_little(self, y, replay=None):
        return original(self, y, replay) * (1 + 1e-9)

    monkeypatch.setattr(block_type, "inverse", off_by_a_little)
    _, wrong = tinypytorch_run(net, functools.partial(networks.loss_coupling_tinypytorch, net, x, target, "reversible"))
    assert largest_relative_difference(wrong, plain) > REVERSIBLE_RTOL


@pytest.mark.parametrize("levels", [2, 4])
@pytest.mark.parametrize("columns", [1, 2, 5])
def test_revcol_gives_the_non_reversible_runs_loss_and_gradients_in_both_frameworks(columns, levels):
    net, x, states, target = revcol_workload(columns, levels, np.float64, width=7, batch=5)
    twin = ports.torch_revcol_twin(net)
    pairs = ports.revcol_parameter_pairs(net, twin)
    assert len(pairs) == len(list(net.params())) == len(list(twin.parameters())) == columns * (5 * levels - 2)
    for p, pt in pairs:
        assert pt.dtype == torch.float64
        np.testing.assert_array_equal(pt.detach().numpy(), p.data)
    params, twin_params = [p for p, _ in pairs], [pt for _, pt in pairs]
    ours = {c: tinypytorch_run(net, functools.partial(networks.loss_revcol_tinypytorch, net, x, states, target, c),
                               params) for c in networks.REVCOL_CONFIGURATIONS}
    theirs = {c: torch_run(twin, functools.partial(ports.loss_revcol_torch, twin, x, states, target, c), twin_params)
              for c in networks.REVCOL_CONFIGURATIONS}
    loss, plain = ours["plain"]
    # every gradient is there; in the first column the alphas' and the upper Linears' weights' are zero (c = 0)
    first = 5 * levels - 2  # the parameters of a column
    assert all(np.any(g != 0) for g in plain[first:]) and sum(np.any(g != 0) for g in plain[:first]) > levels
    np.testing.assert_allclose(theirs["plain"][0], loss, rtol=1e-12)
    assert largest_relative_difference(theirs["plain"][1], plain) <= 1e-12
    for c in ("reversible", "one"):  # a RevColumn Function per column, and ReversibleColumns (one Function)
        assert ours[c][0] == loss and theirs[c][0] == theirs["plain"][0]  # the same forward arithmetic, to the bit
        exact = c == "reversible"  # per column, the first column's zero states come back exactly: c' - l(.) = 0
        assert largest_relative_difference(ours[c][1], plain, exact) <= REVERSIBLE_RTOL
        assert largest_relative_difference(theirs[c][1], plain, exact) <= REVERSIBLE_RTOL


def test_revcol_one_function_keeps_the_columns_and_their_order():
    """ReversibleColumns runs the RevColNet's own columns, in order, as one node; the port as one torch node."""
    net, x, states, target = revcol_workload(3, 2, np.float64)
    assert net.joined.columns == net.columns
    assert len(list(net.params())) == 3 * (5 * 2 - 2)  # the joined columns' parameters are not counted twice
    loss = networks.loss_revcol_tinypytorch(net, x, states, target, "one")
    functions = {type(f).__name__ for f in walk_tinypytorch_graph(loss)}
    assert "ReversibleColumnsFunction" in functions and "RevColumnFunction" not in functions
    twin = ports.torch_revcol_twin(net)
    loss = ports.loss_revcol_torch(twin, x, states, target, "one")
    names = {f.name() for f in walk_torch_graph(loss)}
    assert any("TorchReversibleColumnsFunction" in n for n in names)
    assert not any("TorchReverseFunction" in n for n in names)


@pytest.mark.parametrize("dtype", DTYPES)
def test_first_states_back_is_the_reconstruction_error(dtype):
    """The first column's states are zeros: one column gives them back from its own new c's exactly
    (c' - l(.) = alpha 0); through more columns they come back with rounding errors, which grow with the columns;
    and the check leaves no gradients behind."""
    back = {}
    for columns in (1, 2, 6):
        net, x, states, target = revcol_workload(columns, 4, dtype)
        back[columns] = reversible.first_states_back(net, x, states, target)
        assert all(p.grad is None for p in net.params())
    eps = np.finfo(dtype).eps
    assert back[1] == 0 and 0 < back[2] < back[6] < 1e4 * eps


def test_revcol_comparison_sees_a_wrong_handover_between_columns(monkeypatch):
    """The one-Function port hands each column's computed-back old c's to the column before: hand over the
    column's own new c's instead (what a port that forgot to compute them back would do) and the comparison
    fails; so does an old c off by a part in a billion."""
    net, x, states, target = revcol_workload(3, 4, np.float64, width=7, batch=5)
    twin = ports.torch_revcol_twin(net)
    pairs = ports.revcol_parameter_pairs(net, twin)
    plain_loss = functools.partial(networks.loss_revcol_tinypytorch, net, x, states, target, "plain")
    _, plain = tinypytorch_run(net, plain_loss, [p for p, _ in pairs])
    one = functools.partial(ports.loss_revcol_torch, twin, x, states, target, "one")
    _, right = torch_run(twin, one, [pt for _, pt in pairs])
    assert largest_relative_difference(right, plain, zeros_exact=False) <= REVERSIBLE_RTOL
    original = ports.torch_column_backward
    for wrong_old in (lambda new, old: new, lambda new, old: [c * (1 + 1e-9) for c in old]):
        def handed_over(column, x_, new, gys, wrong_old=wrong_old):
            g_x, g_old, old = original(column, x_, new, gys)
            return g_x, g_old, wrong_old(new, old)

        monkeypatch.setattr(ports, "torch_column_backward", handed_over)
        _, wrong = torch_run(twin, one, [pt for _, pt in pairs])
        assert largest_relative_difference(wrong, plain, zeros_exact=False) > REVERSIBLE_RTOL


def test_revcol_comparison_sees_a_wrong_alpha_gradient(monkeypatch):
    """The torch port's alpha gradient is checked: halve it and the comparison fails."""
    net, x, states, target = revcol_workload(3, 4, np.float64, width=7, batch=5)
    twin = ports.torch_revcol_twin(net)
    pairs = ports.revcol_parameter_pairs(net, twin)
    plain_loss = functools.partial(networks.loss_revcol_tinypytorch, net, x, states, target, "plain")
    _, plain = tinypytorch_run(net, plain_loss, [p for p, _ in pairs])
    original = torch.autograd.backward

    def halved(tensors, grad_tensors=None, *args, **kwargs):
        if tensors.grad_fn.name() == "MulBackward0":  # old c_i * alpha_i: alpha_i's gradient
            grad_tensors = grad_tensors / 2
        return original(tensors, grad_tensors, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "backward", halved)
    _, wrong = torch_run(twin, functools.partial(ports.loss_revcol_torch, twin, x, states, target, "reversible"),
                         [pt for _, pt in pairs])
    assert largest_relative_difference(wrong, plain) > 0.1


def test_relative_error_is_per_parameter():
    reference = [np.array([1.0, -2.0]), np.array([100.0])]
    assert reversible.relative_error(reference, reference) == 0
    assert reversible.relative_error([np.array([1.0, -2.2]), np.array([100.0])], reference) == pytest.approx(0.1)
    assert reversible.relative_error([np.array([1.0, -2.0]), np.array([101.0])], reference) == pytest.approx(0.01)


# ----- reversible networks: what is saved, by hand ----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 2, 3, 5, 8])
def test_coupling_saved_bytes_are_the_count_by_hand_in_both_frameworks(depth, dtype):
    net, x, target = coupling_workload(depth, dtype)
    twin = ports.torch_coupling_twin(net)
    itemsize = np.dtype(dtype).itemsize
    activation = BATCH * WIDTH * itemsize
    for c in networks.COUPLING_CONFIGURATIONS:
        ours = measures.count_saved_tinypytorch(
            functools.partial(networks.loss_coupling_tinypytorch, net, x, target, c), net, [x, target])
        theirs = measures.count_saved_torch(functools.partial(ports.loss_coupling_torch, twin, x, target, c), twin,
                                         [x, target])
        assert ours == theirs
        assert (ours.bytes, ours.count) == reversible.expected_saved_coupling(depth, c, WIDTH, BATCH, itemsize)
        assert ours.activations == reversible.held_coupling(depth, c) * activation
        if c == "reversible":  # the stack's output, and the loss's two operands (the output again, the target)
            assert (ours.bytes, ours.count, ours.activations) == (3 * activation, 3, activation)
        else:  # per block: x2, y1 and two tanh outputs (halves), two weights (f's not where x2 is the batch's)
            k, _, m = networks.segment_layout(depth, networks.segments_for(c, depth))
            weights = (2 * m - (k == 1)) * (WIDTH // 2) ** 2 * itemsize
            assert ours.bytes == (k - 1) * activation + 2 * m * activation + weights + 2 * activation
    assert all(p.grad is None for p in net.params()) and all(p.grad is None for p in twin.parameters())


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_the_hook_counts_what_the_reversible_tinypytorch_graph_saves(depth):
    """The counting hook against a walk of the graph's SavedTensors (bytes and tensors; the walk tells arrays
    apart by identity, so it cannot see that the coupling's x2 is a view of a block's input: activations are
    checked against the count by hand above)."""
    net, x, target = coupling_workload(depth, np.float64)
    existing = [p.data for p in net.params()] + [x, target]
    for c in ("plain", "reversible"):
        loss_fn = functools.partial(networks.loss_coupling_tinypytorch, net, x, target, c)
        counted = measures.count_saved_tinypytorch(loss_fn, net, [x, target])
        walked = saved_in_tinypytorch_graph(loss_fn(), existing)
        assert walked[:2] == (counted.bytes, counted.count)
        if c == "reversible":  # one array: the output, no view
            assert walked[2] == counted.activations == x.nbytes
    net, x, states, target = revcol_workload(depth, 3, np.float64)
    existing = [p.data for p in net.params()] + [x, target, *states]
    for c in networks.REVCOL_CONFIGURATIONS:
        loss_fn = functools.partial(networks.loss_revcol_tinypytorch, net, x, states, target, c)
        counted = measures.count_saved_tinypytorch(loss_fn, net, [x, target, *states])
        assert saved_in_tinypytorch_graph(loss_fn(), existing) == (counted.bytes, counted.count, counted.activations)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("levels", [2, 4])
@pytest.mark.parametrize("columns", [1, 2, 3])
def test_revcol_saved_bytes_are_the_count_by_hand_in_both_frameworks(columns, levels, dtype):
    itemsize = np.dtype(dtype).itemsize
    activation = BATCH * WIDTH * itemsize
    counted = {}
    for n in (columns, columns + 1):
        net, x, states, target = revcol_workload(n, levels, dtype)
        twin = ports.torch_revcol_twin(net)
        for c in networks.REVCOL_CONFIGURATIONS:
            ours = measures.count_saved_tinypytorch(
                functools.partial(networks.loss_revcol_tinypytorch, net, x, states, target, c), net,
                [x, target, *states])
            theirs = measures.count_saved_torch(
                functools.partial(ports.loss_revcol_torch, twin, x, states, target, c), twin, [x, target, *states])
            assert ours == theirs
            assert (ours.bytes, ours.count) == reversible.expected_saved_revcol(n, levels, c, WIDTH, BATCH, itemsize)
            assert ours.activations == reversible.held_revcol(n, levels, c) * activation
            counted[n, c] = ours
    # one Function over the columns: x and the last column's L c's, and the loss's operands, at any number
    assert counted[columns + 1, "one"] == counted[columns, "one"]
    assert (counted[columns, "one"].bytes, counted[columns, "one"].count) == ((levels + 3) * activation, levels + 3)
    assert counted[columns, "one"].activations == levels * activation  # x is the batch; the top c saved twice
    # a reversible column saves x and its L new c's; one more column, L + 1 more arrays, L of them new memory
    more, fewer = counted[columns + 1, "reversible"], counted[columns, "reversible"]
    assert (more.bytes - fewer.bytes, more.count - fewer.count) == ((levels + 1) * activation, levels + 1)
    assert more.activations - fewer.activations == levels * activation
    assert fewer.bytes == (columns * (levels + 1) + 2) * activation  # and the loss's two operands
    plain_more, plain_fewer = counted[columns + 1, "plain"], counted[columns, "plain"]
    assert plain_more.activations - plain_fewer.activations == 2 * levels * activation  # c's and tanh outputs


def test_counts_by_hand():
    # one block, plain: x2, f's tanh, y1, g's tanh (4 halves = 2 activations), g's weight; the loss 2 operands
    assert reversible.expected_saved_coupling(1, "plain", 10, 3, 8) == ((2 + 2) * 3 * 10 * 8 + 5 * 5 * 8, 7)
    assert reversible.expected_saved_coupling(128, "reversible", 10, 3, 4) == (3 * 3 * 10 * 4, 3)
    # 8 blocks in 3 segments (2, 2, 4): 2 checkpoint inputs, 4 blocks of 6 tensors, the loss's 2
    assert reversible.expected_saved_coupling(8, "sqrt", 10, 3, 4) == ((2 + 8 + 2) * 3 * 10 * 4 + 8 * 25 * 4, 28)
    assert [reversible.held_coupling(8, c) for c in networks.COUPLING_CONFIGURATIONS] == [20, 2 + 10, 1]
    # one column of 2 levels: level 0 x, zeros, tanh, c (4); top: c0', W, tanh, c (3 arrays and a weight)
    assert reversible.expected_saved_revcol(1, 2, "plain", 10, 3, 8) == ((7 + 2) * 3 * 10 * 8 + 100 * 8, 10)
    # a second column: level 0 adds the upper weight and alpha; the top its alpha
    assert reversible.expected_saved_revcol(2, 2, "plain", 10, 3, 8) == (
        (7 + 7 + 2) * 3 * 10 * 8 + (1 + 2) * 100 * 8 + 2 * 10 * 8, 10 + 11)
    assert reversible.expected_saved_revcol(16, 4, "reversible", 10, 3, 8) == ((16 * 5 + 2) * 3 * 10 * 8, 16 * 5 + 2)
    assert reversible.held_revcol(16, 4, "reversible") == 64 and reversible.held_revcol(16, 4, "plain") == 128
    # one Function over 16 columns of 4 levels: x and 4 c's, the loss's 2 operands; held, the 4 c's
    assert reversible.expected_saved_revcol(16, 4, "one", 10, 3, 8) == ((1 + 4 + 2) * 3 * 10 * 8, 7)
    assert reversible.expected_saved_revcol(2, 4, "one", 10, 3, 8) == reversible.expected_saved_revcol(
        16, 4, "one", 10, 3, 8)
    assert reversible.held_revcol(16, 4, "one") == reversible.held_revcol(1, 4, "one") == 4
    assert reversible.CONCATENATE_BOUNDS == 3 * np.dtype(np.intp).itemsize
    assert reversible.held_coupling_extra(8, "plain", "tinypytorch") == 8 * reversible.CONCATENATE_BOUNDS
    assert reversible.held_coupling_extra(8, "sqrt", "torch") == 2 * torch.get_rng_state().nbytes
    assert reversible.held_coupling_extra(8, "reversible", "tinypytorch") == reversible.held_coupling_extra(
        8, "reversible", "torch") == 0


# ----- reversible networks: memory held ---------------------------------------------------------------------

def check_reversible_memory(memory, activations, activation, extra=0, graph=0):
    """extra: bytes held after forward beyond the activations; graph: those of them that the graph's nodes hold
    until the loss is dropped (tinypytorch's concatenate nodes' split points)."""
    assert memory.after_forward - memory.output == activations * activation + extra
    assert memory.after_backward == memory.gradients + memory.output + graph  # what was kept for backward is gone
    assert memory.after_drop == memory.gradients
    assert memory.peak > memory.after_forward


def in_framework(framework, net, kind):
    """(the network, its loss, the memory measure) in `framework`: tinypytorch's `net` (kind: coupling or revcol)
    or its PyTorch twin."""
    if framework == "tinypytorch":
        return net, getattr(networks, f"loss_{kind}_tinypytorch"), measures.measure_tinypytorch
    return getattr(ports, f"torch_{kind}_twin")(net), getattr(ports, f"loss_{kind}_torch"), measures.measure_torch


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_coupling_stack_holds_the_same_after_forward_at_every_depth(framework):
    """Reversible: only the output, whatever the depth, to the byte; plain and checkpointed: the count by hand."""
    activation = 16 * 32 * 8
    held, peaks = {}, {}
    for depth in (1, 2, 5, 9):
        net, x, target = coupling_workload(depth, np.float64, width=32, batch=16)
        params_bytes = sum(p.data.nbytes for p in net.params())
        net, loss, measure = in_framework(framework, net, "coupling")
        for c in networks.COUPLING_CONFIGURATIONS:
            forward = functools.partial(loss, net, x, target, c)
            forward().backward()  # a warm-up, as the benchmark's counting pass
            net.zero_grad()
            kept, dropped = measure(forward, net), measure(forward, net, drop_gradients=True)
            extra = reversible.held_coupling_extra(depth, c, framework)
            graph = extra if framework == "tinypytorch" else 0
            check_reversible_memory(kept, reversible.held_coupling(depth, c), activation, extra, graph)
            check_reversible_memory(dropped, reversible.held_coupling(depth, c), activation, extra, graph)
            assert kept.gradients == params_bytes and dropped.gradients == 0
            held[depth, c], peaks[depth, c] = kept.after_forward, dropped.peak
        assert all(p.grad is None for p in net.parameters())
    assert len({held[d, "reversible"] for d in (1, 2, 5, 9)}) == 1  # flat in depth, to the byte
    assert held[9, "plain"] > held[9, "sqrt"] > held[9, "reversible"]
    assert peaks[9, "reversible"] < peaks[9, "plain"]


def reconstructed_after_backward(columns, levels, configuration, framework):
    """Activations tinypytorch's reversible Functions hold after backward while the loss is referenced, by hand:
    the old c's each computed back (`reconstructed`, kept for a step to print): L per RevColumn Function, L for
    ReversibleColumnsFunction (the first column's). PyTorch's ports keep nothing."""
    if framework == "torch" or configuration == "plain":
        return 0
    return levels * (columns if configuration == "reversible" else 1)


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_revcol_holds_x_and_the_new_cs_of_every_column_after_forward(framework):
    """Per column: x and its L new c's, growing with the columns; one Function: the last column's c's, flat."""
    activation = 16 * 32 * 8
    held = {}
    for columns in (1, 2, 4):
        net, x, states, target = revcol_workload(columns, 4, np.float64, width=32, batch=16)
        params_bytes = sum(p.data.nbytes for p in net.params())
        net, loss, measure = in_framework(framework, net, "revcol")
        for c in networks.REVCOL_CONFIGURATIONS:
            forward = functools.partial(loss, net, x, states, target, c)
            forward().backward()
            net.zero_grad()
            kept, dropped = measure(forward, net), measure(forward, net, drop_gradients=True)
            graph = reconstructed_after_backward(columns, 4, c, framework) * activation
            check_reversible_memory(kept, reversible.held_revcol(columns, 4, c), activation, graph=graph)
            check_reversible_memory(dropped, reversible.held_revcol(columns, 4, c), activation, graph=graph)
            assert kept.gradients == params_bytes and dropped.gradients == 0
            held[columns, c] = kept.after_forward - kept.output
    # a reversible column holds its 4 new c's; a non-reversible one its tanh outputs too; one Function, 4 c's
    assert held[4, "reversible"] - held[2, "reversible"] == 2 * 4 * activation
    assert held[4, "plain"] - held[2, "plain"] == 2 * 8 * activation
    assert held[1, "one"] == held[2, "one"] == held[4, "one"] == held[1, "reversible"] == 4 * activation


@pytest.mark.parametrize("framework", ["tinypytorch", "torch"])
def test_revcol_one_function_peak_does_not_grow_with_the_columns(framework):
    """The activations of forward + backward, one Function: one column's backward at any number of columns.

    PyTorch (each level's gradients into .grad, let go there by the hook): the peak with the gradients let go is
    the same from 3 columns on (with fewer, the last column's unused outputs get zero gradients that a middle
    column's do not), to the byte. tinypytorch returns every parameter's gradient through the graph when the
    whole backward ends, its parameters' hooks held back until then: its peak with the gradients let go grows by
    at most the added columns' gradients, and with the gradients kept, the peak less the gradients stays within
    one activation (a = 128 KiB here; what grows is Python objects, the levels' random-generator states). A
    Function per column adds its L = 4 c's a column to the peak."""
    batch, width, levels = 128, 128, 4
    activation = batch * width * 8
    column_gradients = ((2 * levels - 1) * (width * width + width) + levels * width) * 8  # 7 Linears, 4 alphas
    dropped, kept = {}, {}
    for columns in (3, 6):
        net, x, states, target = revcol_workload(columns, levels, np.float64, width=width, batch=batch)
        assert sum(p.data.nbytes for p in net.params()) == columns * column_gradients
        net, loss, measure = in_framework(framework, net, "revcol")
        for c in ("reversible", "one"):
            forward = functools.partial(loss, net, x, states, target, c)
            forward().backward()
            net.zero_grad()
            dropped[columns, c] = measure(forward, net, drop_gradients=True).peak
            memory = measure(forward, net)
            kept[columns, c] = memory.peak - memory.gradients
    assert abs(kept[6, "one"] - kept[3, "one"]) < activation
    if framework == "torch":
        assert dropped[6, "one"] == dropped[3, "one"]
    else:
        assert dropped[6, "one"] - dropped[3, "one"] < 3 * column_gradients + activation
    assert dropped[6, "reversible"] - dropped[3, "reversible"] >= 3 * (levels - 1) * activation


def test_measure_gives_the_gradients_it_clears():
    net, x, target = coupling_workload(2, np.float64)
    forward = functools.partial(networks.loss_coupling_tinypytorch, net, x, target, "plain")
    collected = []
    measures.measure_tinypytorch(forward, net, gradients_out=collected)
    assert len(collected) == 8 and all(p.grad is None for p in net.params())
    _, grads = tinypytorch_run(net, forward)
    for g, h in zip(collected, grads, strict=True):
        np.testing.assert_array_equal(g, h)
    twin = ports.torch_coupling_twin(net)
    collected_t = []
    measures.measure_torch(functools.partial(ports.loss_coupling_torch, twin, x, target, "plain"), twin,
                           gradients_out=collected_t)
    assert len(collected_t) == 8 and all(p.grad is None for p in twin.parameters())
    assert reversible.relative_error(collected_t, collected) < 1e-12


# ----- reversible networks: the report ----------------------------------------------------------------------

def fake_reversible_results(s, growth=1.0, slow=1.0):
    """Results shaped like run_reversible's and consistent with the counts by hand: the checks must say yes.
    growth: how much the reversible peaks grow from the first size to the last; slow: the reversible time ratio."""
    itemsize = 4
    results = {"coupling": {}, "revcol": {}}
    rng_bytes = torch.get_rng_state().nbytes
    for part, sizes, names in [("coupling", s["coupling"]["depths"], networks.COUPLING_CONFIGURATIONS),
                               ("revcol", s["revcol"]["columns"], networks.REVCOL_CONFIGURATIONS)]:
        p = s[part]
        a = p["batch"] * p["width"] * itemsize
        for i, n in enumerate(sizes):
            for conf in names:
                row = {}
                for framework in ("tinypytorch", "torch"):
                    if part == "coupling":
                        nbytes, count = reversible.expected_saved_coupling(n, conf, p["width"], p["batch"], itemsize)
                        held = (reversible.held_coupling(n, conf) * a
                                + reversible.held_coupling_extra(n, conf, framework))
                    else:
                        nbytes, count = reversible.expected_saved_revcol(n, p["levels"], conf, p["width"], p["batch"],
                                                                         itemsize)
                        held = reversible.held_revcol(n, p["levels"], conf) * a
                    held = int(held)
                    flat = conf == "reversible" if part == "coupling" else conf == "one"  # meant to be flat
                    scale = 1 + (growth - 1) * i / (len(sizes) - 1) if flat else 1
                    peak = int(10 * a * scale) if flat else held + 4 * a
                    gradients = 1000 * n
                    dropped = measures.Memory(peak=peak, after_forward=held + 4, output=4, after_backward=4,
                                              gradients=0, after_drop=0)
                    kept = measures.Memory(peak=peak + gradients, after_forward=held + 4, output=4,
                                           after_backward=gradients + 4, gradients=gradients, after_drop=gradients)
                    seconds = [1.0, 1.1, 0.9] if conf == "plain" else [1.6 * (slow if framework == "torch" else 1)] * 3
                    row[framework] = reversible.Measured(measures.Saved(nbytes, count, held), kept, dropped, seconds,
                                                         0.0 if conf == "plain" else 2e-7)
                    if (part, conf, framework) == ("revcol", "one", "tinypytorch"):
                        row[framework].states_back = 1e-6 * n
                results[part][n, conf] = row
    assert rng_bytes > 0
    return results


def test_report_reversible_states_each_target_and_the_plot_is_written(tmp_path):
    s = reversible.REVERSIBLE_SETTINGS["quick"]
    text, targets = reversible_report.report_reversible(fake_reversible_results(s), s, "quick")
    met = {"tinypytorch": {"peak": True, "time": True}, "torch": {"peak": True, "time": True}}
    assert targets == {"coupling": met, "revcol": met}
    assert text.count("| yes |") == 3 * 3 + 2 * 3 and "| NO |" not in text  # every saved row as counted
    assert "tinypytorch holds the count by hand plus 24 B per block in the plain and checkpointed runs, in every " \
           "row: yes" in text
    assert "PyTorch the count by hand plus 5,056 B per checkpoint: yes" in text
    assert "flat within 1.1× from N = 2 to 8, tinypytorch: met (max / min 1.000;" in text
    assert "flat within 1.1× in the number of columns, one Function, tinypytorch: met (max / min 1.000;" in text
    assert "reversible at most 2× the plain run, PyTorch: met at every depth (ratios 1.60 to 1.60)" in text
    assert "| 8 | 2 | reversible | 1.600 | 1.60 | 1.78 |" in text  # medians 1.6 and 1.0, fastest 1.6 and 0.9
    assert "use_reentrant=False" in text and "float32" in text and "CPU: " in text
    reversible_report.plot_reversible(fake_reversible_results(s), s, tmp_path / "reversible.png")
    assert (tmp_path / "reversible.png").read_bytes().startswith(b"\x89PNG")

    text, targets = reversible_report.report_reversible(fake_reversible_results(s, growth=1.2, slow=1.3), s, "quick")
    missed = {"tinypytorch": {"peak": False, "time": True}, "torch": {"peak": False, "time": False}}
    assert targets == {"coupling": missed, "revcol": missed}
    assert "from N = 2 to 8, tinypytorch: NOT met (max / min 1.200; N = 8 / N = 2: 1.200;" in text
    assert "the plain run, PyTorch: NOT met at N = 2 (2.08), N = 4 (2.08), N = 8 (2.08)" in text
    assert "flat within 1.1× in the number of columns, one Function, PyTorch: NOT met (max / min 1.200; " \
           "4 columns / 2: 1.200;" in text
    assert "the non-reversible run, PyTorch: NOT met at 2 columns, reversible, per column (2.08); 4 columns, " \
           "reversible, per column (2.08); 2 columns, reversible, one Function (2.08); 4 columns, reversible, " \
           "one Function (2.08)" in text
    assert "the largest relative difference from the non-reversible run's (the table's last columns) at 2, 4 " \
           "columns: tinypytorch 2.0e-07, 2.0e-07; PyTorch 2.0e-07, 2.0e-07; a Function per column, at most 2.0e-07 " \
           "in tinypytorch, 2.0e-07 in PyTorch. The first column's states" in text
    assert "max |c| = 2.0e-06, 4.0e-06." in text and "It stays below 1e-2 at every number of columns here." in text
    results = fake_reversible_results(s)
    results["revcol"][4, "one"]["torch"].error = 0.5  # the one Function's gradients gone wrong at 4 columns
    text = reversible_report.report_reversible(results, s, "quick")[0]
    assert "PyTorch 2.0e-07, 5.0e-01;" in text
    assert "Where it passes 1e-2 (4 columns here), the first columns' gradients are no longer the network's" in text
    assert "usable in float32 up to 2 columns here." in text
    results = fake_reversible_results(s)
    results["revcol"][2, "reversible"]["tinypytorch"].dropped.after_forward += 8  # one stray array shows
    text = reversible_report.report_reversible(results, s, "quick")[0]
    assert "tinypytorch holds the count by hand in every row: NO; PyTorch: yes" in text


def test_reversible_settings_are_the_issues_sizes():
    full = reversible.REVERSIBLE_SETTINGS["full"]
    assert full["dtype"] == "float32"
    coupling, revcol = full["coupling"], full["revcol"]
    assert {key: coupling[key] for key in ("depths", "width", "batch")} == {
        "depths": [8, 16, 32, 64, 128], "width": 1024, "batch": 256}
    assert revcol["columns"] == [2, 4, 8, 16] and revcol["levels"] == 4 and revcol["batch"] == 256
    assert revcol["width"] in (256, 512)
    for part, sizes in [(coupling, coupling["depths"]), (revcol, revcol["columns"])]:
        assert sorted(part["repeats"]) == sizes and min(part["repeats"].values()) >= 3
    quick = reversible.REVERSIBLE_SETTINGS["quick"]
    assert sorted(quick["coupling"]["repeats"]) == quick["coupling"]["depths"]
    assert sorted(quick["revcol"]["repeats"]) == quick["revcol"]["columns"]
    assert set(networks.COUPLING_CONFIGURATIONS) == {"plain", "sqrt", "reversible"}
    assert set(networks.REVCOL_CONFIGURATIONS) == {"plain", "reversible", "one"}


# ----- the optimizer inside backward (step 53) -----------------------------------------------------

@pytest.mark.step53
def test_optimizer_in_backward_counts_the_parameters_or_the_largest_and_the_report_says_so(tmp_path):
    import memory_optimizer_in_backward as in_backward

    s = {"depths": [2], "width": WIDTH, "batch": BATCH, "lr": 0.1}
    results = in_backward.run(s)
    row = results[2]
    total, largest = 2 * (WIDTH * WIDTH + WIDTH) * 4, WIDTH * WIDTH * 4  # float32 by hand
    for framework in ("tinypytorch", "torch"):
        assert max(row[framework, "usual"][0]) == total and row[framework, "usual"][0][-1] == 0
        assert max(row[framework, "in backward"][0]) == largest
    assert row["params"] == total and row["agree"]
    text, ok = in_backward.report(results, s)
    assert ok and "| 2 |" in text and "NO" not in text
    in_backward.plot(results, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0
