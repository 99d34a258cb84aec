"""Step 01's lesson: the exercises' solutions (describe, the array kept, not copied) against PyTorch."""
import numpy as np
import pytest
import torch

from steploader import load_step

pytestmark = [pytest.mark.step01, pytest.mark.torch]
step = load_step(1)


@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 2), (2, 3, 4), (0, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_describe_agrees_with_torch_tensor(shape, dtype):
    array = np.zeros(shape, dtype=dtype)
    t = torch.tensor(array)
    ndim, shape_seen, dtype_name = step.describe(step.Variable(array))
    assert (ndim, shape_seen) == (t.dim(), tuple(t.shape))
    assert getattr(torch, dtype_name) == t.dtype


def test_a_variable_sees_writes_to_its_array_as_torch_from_numpy_does():
    array = np.array([1.0, 2.0, 3.0])
    v, shared, copied = step.Variable(array), torch.from_numpy(array), torch.tensor(array)
    array[1] = -4.0
    assert v.data[1] == shared[1].item() == -4.0 and copied[1].item() == 2.0
    assert step.after_writing_in_place() == (9.0, 1.0, 9.0)
