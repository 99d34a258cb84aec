import os
import pathlib
import sys

import matplotlib
import numpy as np
import pytest
from hypothesis import Phase, settings

import workbook_grading

# `make grade STEP=NN` (tools/workbook.py): the package is the learner's workbook's, found before anything
# imports it
GRADING = workbook_grading.from_environment()
if GRADING is not None:
    workbook_grading.install(*GRADING)


def pytest_configure(config):
    if GRADING is not None and os.environ.get("TINYPYTORCH_GRADE_FIRST_FAILURE"):
        config.pluginmanager.register(workbook_grading.FirstFailureOnly(), "workbook-first-failure")

# Step scripts that plot must not open windows. Not MPLBACKEND: the environment
# would reach the notebook kernels that nbval starts, and they must plot inline.
matplotlib.use("Agg")

# The benchmarks' tests import bench/'s modules by name, as `python bench/...` sees them (bench/ is a folder of
# scripts, not a package): this is the one place that puts bench/ on the path, after tests/.
BENCH = str(pathlib.Path(__file__).resolve().parent.parent / "bench")
if BENCH not in sys.path:
    sys.path.append(BENCH)

# Hypothesis draws the same examples on every machine and every run ("default"), so that `make test` passes or
# fails for a learner exactly as it does in CI. `make fuzz` ("fuzz") draws new examples each run, five times as
# many, for whoever wants to look for the next failing input; it keeps what fails in .hypothesis/ and replays it.
# deadline=None: the first call of a case may import torch or warm caches.
settings.register_profile("default", deadline=None, max_examples=60, derandomize=True)
settings.register_profile("fuzz", deadline=None, max_examples=300, derandomize=False)
# the default's budget with new examples each run: a check that `make test` passes whatever hypothesis draws
settings.register_profile("random", deadline=None, max_examples=60, derandomize=False)
# Grading a learner's workbook (tools/workbook.py): "grade" draws the default's examples but reports the first
# failing one as drawn, without the shrinking that takes a minute on code full of stubs; "quick" also draws only
# a few, for tests/test_workbook.py, which grades every step twice.
settings.register_profile("grade", deadline=None, max_examples=60, derandomize=True,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate), report_multiple_bugs=False)
settings.register_profile("quick", settings.get_profile("grade"), max_examples=5)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _default_dtype_float32():
    """Every test starts with PyTorch's default dtype, float32, and leaves it so: a step loaded inside a test
    (steps 52-56 call `set_default_dtype(float64)` at their top) must not change it for the tests after."""
    import tinypytorch

    tinypytorch.set_default_dtype(np.float32)
    yield
    tinypytorch.set_default_dtype(np.float32)


@pytest.fixture
def float64_default():
    """The default dtype float64 for one test, as the pages of steps 52-56 set it (`set_default_dtype(float64)`),
    so that their tests build the page's float64 models."""
    import tinypytorch

    tinypytorch.set_default_dtype(np.float64)
    yield


@pytest.fixture(params=["numpy", "strict", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    """The array module of a test that runs on every backend.

    numpy: the CPU. strict: tests/strict_cupy.py installed as the device backend, a stand-in
    that behaves as CuPy does where NumPy is lenient, so every GPU code path runs on a machine
    without a GPU (CI). cupy: a real GPU, where CuPy finds one.
    """
    if request.param == "numpy":
        yield np
    elif request.param == "strict":
        import strict_cupy

        with strict_cupy.installed() as module:
            yield module
    else:
        from tinypytorch import cuda

        if not cuda.GPU:
            pytest.skip("CuPy with a usable GPU is not available")
        import cupy

        yield cupy


@pytest.fixture
def no_collector():
    """Switch the cycle collector off, so that only reference counting can free objects (steps 17 on)."""
    import gc
    gc.collect()
    gc.disable()
    yield
    gc.enable()
    gc.collect()
