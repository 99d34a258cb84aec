"""Measuring memory in the tests of stage 4: what a forward pass saves, and the bytes NumPy holds.

The benchmarks measure with counting_saved and numpy_bytes too (bench/memory_measures.py, through
bench/from_tests.py): one definition of each, for both."""
import contextlib
import gc
import tracemalloc
import weakref

import numpy as np

import tinypytorch
from tinypytorch import Variable
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


def assert_graph_freed_by_reference_counting(run):
    """a = exp(x), y = sum(square(a) + a) from x = [1, 2]; run(y, x) (a backward pass); then x, a and y let go with the
    collector off: a and its creator must be gone, no reference cycle keeping the graph alive."""
    gc.collect()
    gc.disable()  # only reference counting may free the graph
    try:
        x = Variable(np.array([1.0, 2.0]))
        a = tinypytorch.exp(x)
        y = (tinypytorch.square(a) + a).sum()
        run(y, x)
        dead_variable, dead_function = weakref.ref(a), weakref.ref(a.creator)
        del a, y, x
        assert dead_variable() is None and dead_function() is None
    finally:
        gc.enable()
