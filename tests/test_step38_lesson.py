"""Step 38's lesson: the timeline it draws, and the exercises' solutions (disk-backed hooks, int8 compression,
bytes saved per dtype), against PyTorch and maths worked out here."""
import contextlib
import gc
import os

import numpy as np
import pytest
import torch
from hypothesis import given

import tinypytorch
from reference import float_arrays
from steploader import load_step
from tinypytorch import Variable
from tinypytorch import functions as F
from tinypytorch.autograd.graph import current_hooks, saved_tensors_hooks
from tinypytorch.layers import MLP

pytestmark = [pytest.mark.step38, pytest.mark.torch]
step = load_step(38)

TORCH_HOOKS = torch.autograd.graph.saved_tensors_hooks


def torch_mlp_gradients(hooks=None, sizes=(3, 4, 4, 1), seed=0, batch=None):
    """The gradients of the step's float64 MLP's summed squared output, computed by PyTorch under `hooks`."""
    model = MLP(sizes, activation=F.tanh, rng=np.random.default_rng(seed))
    x = torch.from_numpy(step.batch if batch is None else batch)
    params = []
    with contextlib.nullcontext() if hooks is None else TORCH_HOOKS(*hooks):
        for k, layer in enumerate(model.layers):
            w = torch.tensor(layer.weight.data, requires_grad=True)
            b = torch.tensor(layer.bias.data, requires_grad=True)
            params += [w, b]
            x = x @ w.T + b
            if k < len(model.layers) - 1:
                x = torch.tanh(x)
        loss = (x**2).sum()
    loss.backward()
    return [p.grad.numpy() for p in params]


# ----- the timeline: what the ticket hooks saw -----------------------------------------------------------------

def test_the_ticket_events_drawn_are_torchs():
    seen = []
    kept = {}

    def pack(t):
        kept[len(kept)] = t.detach()
        seen.append(("pack", len(kept) - 1))
        return len(kept) - 1

    def unpack(ticket):
        seen.append(("unpack", ticket))
        return kept[ticket]

    x = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    with TORCH_HOOKS(pack, unpack):
        y = torch.exp(x * x).sum()
    y.backward()
    assert step.events == seen
    # the tickets the picture says each function saved: Mul both operands (x), Exp its output
    np.testing.assert_array_equal(step.storage[0], [0.5, 1.0])
    np.testing.assert_array_equal(step.storage[1], [0.5, 1.0])
    np.testing.assert_allclose(step.storage[2], np.exp([0.25, 1.0]), rtol=1e-15)


# ----- exercise 1: hooks that keep saved tensors on disk and clean up ------------------------------------------

def test_save_on_disk_gives_the_plain_runs_and_torchs_gradients_and_leaves_no_file(tmp_path):
    during = []
    grads = step.mlp_gradients(step.save_on_disk(tmp_path), on_forward=lambda: during.append(len(os.listdir(tmp_path))))
    # one file per packed tensor: the second and third Linear save their input and weight, the first only its
    # input (no gradient flows to the batch, so its weight is not needed), each tanh its output, the square y
    assert during == [2 * 2 + 1 + 2 + 1]
    assert os.listdir(tmp_path) == []  # all deleted after backward
    for g, h, t in zip(grads, step.mlp_gradients(), torch_mlp_gradients(), strict=True):
        np.testing.assert_array_equal(g, h)  # the same arithmetic on the same values, read back from disk
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-15)


def test_save_on_disk_counts_one_file_per_pack_as_torch_packs(tmp_path):
    packs = []
    torch_mlp_gradients((lambda t: packs.append(t) or t, lambda t: t))
    during = []
    step.mlp_gradients(step.save_on_disk(tmp_path), on_forward=lambda: during.append(len(os.listdir(tmp_path))))
    assert during == [len(packs)]


def test_save_on_disk_files_survive_a_retained_pass_and_go_after_the_last(tmp_path):
    x = Variable(np.array([0.5, -1.0, 2.0]))
    with step.save_on_disk(tmp_path):
        y = tinypytorch.exp(x * x).sum()
    assert len(os.listdir(tmp_path)) == 3
    y.backward(retain_graph=True)
    assert len(os.listdir(tmp_path)) == 3  # the files are read again by the next pass
    y.backward()
    assert os.listdir(tmp_path) == []
    np.testing.assert_allclose(x.grad.data, 2 * 2 * x.data * np.exp(x.data**2), rtol=1e-14)


def test_save_on_disk_files_go_when_the_graph_is_thrown_away_unused(tmp_path):
    x = Variable(np.array([0.5, -1.0, 2.0]))
    with step.save_on_disk(tmp_path):
        y = tinypytorch.sin(x * x).sum()
    assert len(os.listdir(tmp_path)) == 3
    del y
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_save_on_disk_unpacks_the_values_that_were_saved(tmp_path):
    x = Variable(np.array([[0.5, -1.0], [2.0, 0.25]]))
    unpacked = []
    with saved_tensors_hooks(lambda v: step.OnDisk(v.data, tmp_path),
                             lambda handle: unpacked.append(np.load(handle.path)) or unpacked[-1]):
        y = tinypytorch.tanh(x).sum()
    y.backward()
    np.testing.assert_array_equal(unpacked, [np.tanh(x.data)])  # tanh saves its output, bit for bit
    assert current_hooks() is None


# ----- exercise 2: int8 compression with a bound ----------------------------------------------------------------

@given(float_arrays(-1e3, 1e3, min_dims=0, max_dims=2, max_side=5))
def test_int8_round_trip_is_within_half_a_step(a):
    q, scale, dtype = step.quantize(a)
    assert q.dtype == np.int8 and q.nbytes == a.size and dtype == a.dtype
    back = step.dequantize((q, scale, dtype))
    assert back.dtype == a.dtype and back.shape == a.shape
    bound = np.abs(a).max() / 127 / 2 if a.size else 0.0
    assert np.all(np.abs(back - a) <= bound * (1 + 1e-12) + 1e-300)


def test_int8_keeps_an_all_zero_array_and_the_extremes_exactly():
    np.testing.assert_array_equal(step.dequantize(step.quantize(np.zeros(3))), np.zeros(3))
    q, scale, _ = step.quantize(np.array([-2.54, 0.0, 2.54]))
    np.testing.assert_array_equal(q, [-127, 0, 127])
    np.testing.assert_allclose(scale, 0.02, rtol=1e-15)


def test_int8_gradients_equal_torchs_with_the_same_quantization():
    def pack(t):
        scale = float(t.detach().abs().max()) / 127 or 1.0
        return torch.round(t.detach() / scale).to(torch.int8), scale, t.dtype

    def unpack(packed):
        q, scale, dtype = packed
        return (q.to(dtype) * scale).to(dtype)

    ours = step.mlp_gradients(step.save_in_int8())
    theirs = torch_mlp_gradients((pack, unpack))
    for g, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-13)


def test_the_printed_int8_figures():
    assert len(step.worst) == 8 and 0.5 < max(step.worst) <= 1 + 1e-12  # at most half a step, as printed
    exact = step.mlp_gradients()
    errors = [np.linalg.norm(g - h) / np.linalg.norm(h) for g, h in zip(step.mlp_gradients(step.save_in_int8()), exact)]
    np.testing.assert_allclose(step.int8_errors, errors, rtol=1e-12)
    # int8 keeps about 8 bits: errors around 2^-8 = 3.9e-3, far above float16's 2^-11 and far below 1
    assert all(1e-5 < e < 3e-2 for e in errors), errors


# ----- exercise 3: bytes kept per dtype ---------------------------------------------------------------------------

def test_count_saved_bytes_for_the_steps_two_networks():
    # float32 network, batch 16, hidden 32: two tanh outputs (16 x 32) and the output (16 x 1), once each
    # float64 network, batch 5, hidden 4: two tanh outputs (5 x 4) and the output (5 x 1)
    assert step.saved_bytes == {"torch.float32": 4 * (2 * 16 * 32 + 16), "torch.float64": 8 * (2 * 5 * 4 + 5)}


@pytest.mark.parametrize("seed", [0, 1])
def test_count_saved_bytes_equals_a_torch_counting_hook(seed):
    rng = np.random.default_rng(seed)
    a64, a32 = rng.standard_normal((3, 4)), rng.standard_normal((2, 5)).astype(np.float32)

    def run(m, make):
        x64, x32 = make(a64), make(a32)
        h = m.tanh(x64 * x64)
        (m.exp(h) * h).sum()
        (m.sin(x32) * 3.0).sum()

    with step.count_saved_bytes() as ours:
        run(tinypytorch, lambda a: Variable(a))
    theirs, seen = {}, {}

    def pack(t):
        if not t.is_leaf and t.data_ptr() not in seen:
            seen[t.data_ptr()] = t
            name = str(t.dtype)
            theirs[name] = theirs.get(name, 0) + t.nelement() * t.element_size()
        return t

    with TORCH_HOOKS(pack, lambda t: t):
        run(torch, lambda a: torch.tensor(a, requires_grad=True))
    # by hand: x64 * x64 saves the leaf x64 (left out); tanh saves h, exp saves e = exp(h), e * h saves both:
    # two arrays of 3 x 4 float64. sin saves its leaf input only, and `* 3.0` keeps a number: no float32 array
    assert ours == theirs == {"torch.float64": 2 * 3 * 4 * 8}
    assert current_hooks() is None
