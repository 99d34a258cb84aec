"""The peak memory of a piece of work, measured rather than argued (step 66).

`peak_memory(work)` runs `work()` under `tracemalloc` with the garbage collector off, so that what
the work frees it frees by reference counting alone, as a training step does, and returns the most
bytes held at any moment above what was held before. NumPy reports every array's data to tracemalloc,
so the count covers the arrays and the Python objects (the graph's nodes) alike; it is deterministic.
"""
import gc
import tracemalloc


def peak_memory(work):  # step 66
    """(peak bytes above the start, work()'s result): the most memory held at once while work() ran."""
    collecting, tracing = gc.isenabled(), tracemalloc.is_tracing()
    gc.collect()
    gc.disable()
    if not tracing:
        tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = work()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        if not tracing:
            tracemalloc.stop()
        if collecting:
            gc.enable()
    return peak, result


__all__ = ["peak_memory"]
