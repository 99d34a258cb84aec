"""Step 68's lesson: the exercises' solutions (an operation's path under inference mode and a dual level, a mode of
one's own counting operations, nested blocks keeping one entry), checked against torch."""
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as torch_fwAD

import tinypytorch as tp
from tinypytorch import modes
from steploader import load_step

pytestmark = [pytest.mark.step68, pytest.mark.torch]
step = load_step(68)


def test_exercise_1_inference_hands_mul_on_and_no_tangent_is_pushed_as_in_torch():
    assert step.noted == [("inference", "Mul", "sees"), ("inference", "Mul", "hands on"),
                          ("forward AD", "Mul", "sees"), ("forward AD", "Mul", "hands on")]
    with torch_fwAD.dual_level():
        a = torch_fwAD.make_dual(torch.ones(2), torch.ones(2))
        with torch.inference_mode(), torch.enable_grad():
            theirs = torch_fwAD.unpack_dual(a * 2).tangent
    assert step.tangent is None and theirs is None


def test_exercise_2_the_counting_mode_sees_the_operations_torchs_dispatch_mode_sees():
    names = {"MatMul": "mm", "Tanh": "tanh", "Pow": "pow", "Sum": "sum"}
    assert {names[op]: n for op, n in step.counts.items()} == step.counter.counts
    x = tp.tensor(np.ones((2, 3)), requires_grad=True)
    counts = {}
    with step.counting_mode(counts):
        y = (x * 3).exp().sum()
    y.backward()  # the backward pass ran after the block: its formulas are not counted
    assert counts == {"Mul": 1, "Exp": 1, "Sum": 1} and modes.open_now() == []
    np.testing.assert_allclose(x.grad.data, 3 * np.exp(3 * np.ones((2, 3))), rtol=1e-12)


def test_exercise_3_nested_autocast_blocks_keep_one_entry():
    with tp.autocast("cpu", dtype=tp.float16):
        with tp.autocast("cpu", dtype=tp.float16):
            assert modes.open_now() == ["autocast"] and len(modes.stack) == 1
        assert len(modes.stack) == 1
    assert modes.stack == ()
