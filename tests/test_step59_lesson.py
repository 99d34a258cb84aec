"""Step 59's lesson: the page's tables against torch (its NumPy column is NumPy's own arithmetic), the bytes of the
picture, and the exercises' solutions (the rule by hand, three ways to write a half, in place when it fits)."""
import itertools

import numpy as np
import pytest
import torch

import tinypytorch as tp
from steploader import load_step

pytestmark = [pytest.mark.step59, pytest.mark.torch]
step = load_step(59)


def torch_of(value):
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


def test_the_ranks_table_gives_torchs_dtypes_in_the_package_column():
    for name, (a, b) in step.cases.items():
        assert str(step.ours(a, b).dtype) == str((torch_of(a) * torch_of(b)).dtype), name
    differ = [name for name, (a, b) in step.cases.items() if (a * b).dtype != step.ours(a, b).dtype]
    assert len(differ) == 4  # the page's four rows where NumPy and PyTorch part


def test_the_promote_types_table_is_torchs():
    for a, b in step.pairs:
        assert str(tp.promote_types(a, b)) == str(torch.promote_types(getattr(torch, a), getattr(torch, b)))


def test_the_pictures_bytes_are_float32_under_torchs_rule_and_float64_under_numpys():
    assert step.sizes == {"PyTorch's rule": 256 * 512 * 4, "NumPy's rule": 256 * 512 * 8}
    h = torch.nn.Linear(512, 512)(torch.ones(256, 512))
    assert (h * torch.tensor(0.5, dtype=torch.float64)).element_size() * h.numel() == step.sizes["PyTorch's rule"]


def test_exercise_1_the_rule_by_hand_is_torch_result_type():
    kinds = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]
    numbers = {"b": True, "u": 2, "i": 2, "f": 2.5}
    for a, b in itertools.product(itertools.product(kinds, ["dim", "zero"]),
                                  itertools.product(kinds, ["dim", "zero", "number"])):
        operands = [torch.ones((2,) if r == "dim" else (), dtype=getattr(torch, d)) if r != "number"
                    else numbers[np.dtype(d).kind] for d, r in (a, b)]
        assert str(step.by_hand(a, b)) == str(torch.result_type(*operands)), (a, b)


def test_exercise_2_every_half_leaves_float32_as_in_torch():
    for s in (0.5, np.float64(0.5), torch.tensor(0.5, dtype=torch.float64)):
        assert (torch.ones(4) * s).dtype == torch.float32
    assert all((step.h * s).dtype == tp.float32 for s in step.scales.values())


@pytest.mark.parametrize("x_dtype", ["int64", "float16", "float32"])
@pytest.mark.parametrize("y", [2, 0.5, "0-d float64"])
def test_exercise_3_add_or_new_gives_torchs_dtypes_and_works_in_place_when_it_fits(x_dtype, y):
    ours_y = tp.tensor(0.25, dtype=tp.float64) if y == "0-d float64" else y
    theirs_y = torch.tensor(0.25, dtype=torch.float64) if y == "0-d float64" else y
    x = tp.ones(3, dtype=getattr(tp, x_dtype))
    result = step.add_or_new(x, ours_y)
    expected = torch.ones(3, dtype=getattr(torch, x_dtype)) + theirs_y
    if torch.can_cast(expected.dtype, getattr(torch, x_dtype)):
        assert result is x and x.dtype is getattr(tp, x_dtype)  # in place: the same tensor, its own dtype
        expected = torch.ones(3, dtype=getattr(torch, x_dtype)).add_(theirs_y)
    assert str(result.dtype) == str(expected.dtype)
    np.testing.assert_allclose(result.data, expected.numpy())
