"""Step 61's lesson: the exercises' solutions (dtypes through a network under autocast, a float32 island inside
an autocast block), checked against torch doing the same and against the maths."""
import math

import numpy as np
import pytest
import torch

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step61, pytest.mark.torch]
step = load_step(61)


def test_the_networks_dtypes_are_torchs():
    ours = step.network_dtypes(tp, tp.float16)
    assert ours == step.network_dtypes(torch, torch.float16)
    assert ours == ["torch.float16", "torch.float16", "torch.float16", "torch.float32", "torch.float32"]


def test_the_float32_island_is_torchs_and_the_maths():
    h_dtype, island = step.float32_island(tp, tp.float16, tp.ones(2, 3), tp.ones(3, 4))
    t_dtype, t_island = step.float32_island(torch, torch.float16, torch.ones(2, 3), torch.ones(3, 4))
    assert str(h_dtype) == str(t_dtype) == "torch.float16"
    assert island.dtype == np.float32 and t_island.dtype == torch.float32
    # each row of h is (3, 3, 3, 3): logsumexp = 3 + log 4
    np.testing.assert_allclose(island.data, [3 + math.log(4)] * 2, rtol=1e-6)
    np.testing.assert_allclose(island.data, t_island.numpy(), rtol=1e-6)
