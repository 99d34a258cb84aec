"""Measuring memory in the tests of stage 4: what a forward pass saves, and the bytes NumPy holds."""
import contextlib
import gc
import tracemalloc

import numpy as np

from tinypytorch.autograd.graph import saved_tensors_hooks
from tinypytorch.layers import Parameter


@contextlib.contextmanager
def counting_saved():
    """Inside, every tensor saved passes a pack hook; yields (packed, arrays): the bytes of each tensor as
    packed (a tensor saved twice counts twice), and the distinct arrays saved that are not parameters, by id.
    Clear `arrays` before backward, or the test itself keeps them alive."""
    packed, arrays = [], {}

    def pack(v):
        packed.append(v.data.nbytes)
        if not isinstance(v, Parameter):
            arrays[id(v.data)] = v.data
        return v.data

    with saved_tensors_hooks(pack, lambda data: data):
        yield packed, arrays


@contextlib.contextmanager
def tracing_numpy():
    """tracemalloc on, the garbage collector off (what is freed, reference counting frees) inside; yields a
    function giving the bytes of NumPy arrays held now beyond those held when the block began."""
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        base = numpy_bytes()
        yield lambda: numpy_bytes() - base
    finally:
        tracemalloc.stop()
        gc.enable()


def numpy_bytes():
    """Bytes of NumPy array data traced by tracemalloc and not yet freed (NumPy's own tracemalloc domain)."""
    return sum(t.size for t in tracemalloc.take_snapshot().traces if t.domain == np.lib.tracemalloc_domain)
