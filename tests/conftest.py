import os

import matplotlib
import numpy as np
import pytest
from hypothesis import settings

# Step scripts that plot must not open windows. Not MPLBACKEND: the environment
# would reach the notebook kernels that nbval starts, and they must plot inline.
matplotlib.use("Agg")

# deadline=None: the first call of a case may import torch or warm caches.
settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module of a test that runs on both backends: NumPy, and CuPy where a GPU is usable."""
    if request.param == "numpy":
        return np
    from tinypytorch import cuda

    if not cuda.GPU:
        pytest.skip("CuPy with a usable GPU is not available")
    import cupy

    return cupy
