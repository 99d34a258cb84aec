"""What the benchmarks share with the tests, each helper kept in one place, tests/: the bytes of NumPy arrays
held and the counting pack hook (tests/memory.py), the PyTorch twin of an MLP and of a Linear (tests/twins.py).

The benchmarks run as scripts (`python bench/x.py`), which put bench/ on the path, not tests/; this is the one
place that adds tests/, at the end, so that bench/'s own modules come first.
"""
import pathlib
import sys

TESTS = str(pathlib.Path(__file__).resolve().parent.parent / "tests")
if TESTS not in sys.path:
    sys.path.append(TESTS)

from memory import counting_saved, numpy_bytes  # noqa: E402 (tests/ on the path first)
from twins import torch_linear, torch_twin  # noqa: E402

__all__ = ["counting_saved", "numpy_bytes", "torch_linear", "torch_twin"]
