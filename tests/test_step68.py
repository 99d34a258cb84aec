"""Step 68: one door for every mode. The mode stack's order against PyTorch's dispatch keys, its bookkeeping (each
mode once, nested blocks counted, nothing left open, another thread's mode not applied here), the path of an
operation, the order's effect on a tangent's dtype, and modes combined against PyTorch."""
import threading

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as torch_fwAD

import tinypytorch as tp
import tinypytorch.autograd.forward_ad as fwAD
from tinypytorch import modes
from tinypytorch.func import vmap
from steploader import load_step

pytestmark = [pytest.mark.step68, pytest.mark.torch]
step = load_step(68)

# the package's mode -> PyTorch's dispatch key for it (the plain door computes: the CPU kernel)
KEYS = {"vmap": "FuncTorchBatched", "autocast": "AutocastCPU", "inference": "AutogradCPU",
        "forward AD": "AutogradCPU", "selective checkpoint": "Python"}


def test_the_order_is_pytorchs_dispatch_key_order():
    everything = str(torch._C._dispatch_keyset_full()).removeprefix("DispatchKeySet(").removesuffix(")").split(", ")
    priority = [everything.index(KEYS[m]) for m in modes.ORDER]  # PyTorch lists its keys lowest priority first
    assert priority == sorted(priority, reverse=True)
    assert everything.index("CPU") < min(priority)  # the kernel below every mode


def test_with_no_mode_open_the_stack_is_empty_and_an_operation_records_as_before():
    assert modes.open_now() == [] and modes.open_modes == 0 and modes.stack == ()
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [2.0, 4.0])


def test_nested_blocks_keep_one_entry_until_the_last_closes():
    with tp.autocast("cpu", dtype=tp.float16):
        with tp.autocast("cpu", dtype=tp.float16), fwAD.dual_level():
            assert modes.open_now() == ["autocast", "forward AD"] and len(modes.stack) == 2
        assert modes.open_now() == ["autocast"]
    assert modes.open_now() == []


def test_an_error_inside_a_block_leaves_no_mode_open():
    with pytest.raises(RuntimeError), tp.autocast("cpu", dtype=tp.float16), fwAD.dual_level():
        raise RuntimeError("inside")
    with pytest.raises(ValueError), tp.inference_mode():
        vmap(lambda r: r.sum())(tp.ones(3, 2))
        raise ValueError("inside")
    assert modes.open_now() == []


def test_a_mode_open_in_another_thread_does_not_apply_here():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with tp.inference_mode(), tp.enable_grad():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    try:
        assert "inference" in modes.open_now()  # counted process-wide, applied per thread
        x = tp.tensor([3.0], requires_grad=True)
        y = x * 2
        assert y.requires_grad and y.creator is not None and not y.is_inference()
    finally:
        leave.set()
        thread.join()


def test_the_traced_path_of_matmul_under_autocast_and_forward_ad():
    assert step.path[0] == ("autocast", "MatMul", "sees")
    casts = [entry for entry in step.path if entry[1] == "Cast"]
    assert casts.count(("forward AD", "Cast", "sees")) == 2  # the casts went down from the top again
    assert step.path.index(("autocast", "MatMul", "hands on")) > max(step.path.index(c) for c in casts)
    assert step.path[-2:] == [("forward AD", "MatMul", "sees"), ("forward AD", "MatMul", "hands on")]


@pytest.mark.parametrize("dtype", ["float16"])
def test_forward_ad_above_autocast_would_give_another_tangent_dtype_than_torch(dtype):
    x = tp.tensor(np.ones((2, 3), dtype=np.float32))
    W = tp.tensor(np.full((3, 2), 0.5, dtype=np.float32))

    def run():
        with tp.autocast("cpu", dtype=getattr(tp, dtype)), fwAD.dual_level():
            y = fwAD.make_dual(x, tp.ones_like(x)) @ W
            return str(y.dtype), str(fwAD.unpack_dual(y).tangent.dtype)

    ours = modes.ORDER
    try:
        modes.ORDER = ("vmap", "forward AD", "autocast", "inference", "selective checkpoint")
        swapped = run()
    finally:
        modes.ORDER = ours
    with torch.autocast("cpu", dtype=getattr(torch, dtype)), torch_fwAD.dual_level():
        xt = torch.ones(2, 3)
        yt = torch_fwAD.make_dual(xt, torch.ones_like(xt)) @ torch.full((3, 2), 0.5)
        theirs = str(yt.dtype), str(torch_fwAD.unpack_dual(yt).tangent.dtype)
    assert run() == theirs == ("torch.float16", "torch.float16")
    assert swapped == ("torch.float16", "torch.float32")


def test_every_scenario_of_the_pages_check_equals_torch():
    assert all(step.check().values())


def test_inference_mode_inside_vmap_under_autocast_records_nothing_as_torch():
    rows = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    W = np.random.default_rng(2).normal(size=(3, 2)).astype(np.float32)
    Wv = tp.tensor(W, requires_grad=True)
    Wt = torch.tensor(W, requires_grad=True)
    with tp.autocast("cpu", dtype=tp.float16), tp.inference_mode(), tp.enable_grad():
        ours = vmap(lambda r: r @ Wv)(tp.tensor(rows))
    with torch.autocast("cpu", dtype=torch.float16), torch.inference_mode(), torch.enable_grad():
        theirs = torch.func.vmap(lambda r: r @ Wt)(torch.tensor(rows))
    assert (ours.requires_grad, str(ours.dtype)) == (theirs.requires_grad, str(theirs.dtype))
    np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=2e-3)
