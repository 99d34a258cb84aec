"""The clocks every benchmark here reads: seconds per call, contenders taking turns, on the CPU or a GPU.

Each time is taken with the garbage collector off, as in `timeit`: a collection that happens to
fall inside one repeat would be charged to whichever contender was running. Contenders take
turns, one repeat each, so that a change in the machine's load during a run (other programs, the
CPU's frequency) falls on all of them alike. Nothing here runs by itself: the measurement modules
(speed_*.py, memory_*.py) call it.
"""
import contextlib
import gc
import statistics
import time


@contextlib.contextmanager
def collector_off():
    """The garbage collector off (after one collection), as `timeit` runs: what a graph frees, it frees by
    reference counting alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def time_once(prepare, number=1):
    """Seconds per call of the function that prepare() returns, called `number` times in a row.

    prepare() is not timed (it may build a graph).
    """
    run = prepare()
    with collector_off():
        start = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - start) / number


def in_turns(prepares, number=1, repeats=5):
    """{name: (median, best) seconds per call} for each of `prepares` ({name: prepare}), taking turns."""
    times = {name: [] for name in prepares}
    for _ in range(repeats):
        for name, prepare in prepares.items():
            times[name].append(time_once(prepare, number))
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def time_passes(passes, clear, repeats):
    """{name: [seconds of each repeat]} of forward + backward for each of `passes` ({name: () -> loss}).

    The passes take turns, one repeat each; `clear()` runs untimed after each.
    """
    times = {name: [] for name in passes}
    for _ in range(repeats):
        for name, forward in passes.items():
            with collector_off():
                start = time.perf_counter()
                forward().backward()
                times[name].append(time.perf_counter() - start)
            clear()
    return times


TARGET_SECONDS = 0.02  # how long a timed repeat of time_call lasts, about


def time_call(fn, sync, repeats, warmup=2, number=None):
    """[seconds per call of fn()] for each of `repeats` repeats, after `warmup` calls.

    sync() runs before the clock stops, so that on a GPU the time is the device's work and not
    only the launch of its kernels. A repeat makes `number` calls, by default enough to last about
    TARGET_SECONDS (timed from one call), so that neither the clock's resolution nor the launch of
    one call decides.
    """
    for _ in range(warmup):
        fn()
    sync()
    if number is None:
        start = time.perf_counter()
        fn()
        sync()
        once = time.perf_counter() - start
        number = max(1, min(10_000, int(TARGET_SECONDS / max(once, 1e-7))))
    seconds = []
    for _ in range(repeats):
        with collector_off():
            start = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            seconds.append((time.perf_counter() - start) / number)
    return seconds


def minor_page_faults():
    """The process's minor page faults so far (None off Unix): each is a fresh, zeroed 4 KiB page from the OS."""
    try:
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def page_faults_per_call(run, calls=10, warm=True):
    """Minor page faults per call of run() (None off Unix), after one call to warm up unless `warm` is False.

    Large NumPy arrays are allocated with mmap and returned to the OS when freed, so a program
    that frees and reallocates them pays for zeroed pages on every call.
    """
    if minor_page_faults() is None:
        return None
    if warm:
        run()
    before = minor_page_faults()
    for _ in range(calls):
        run()
    return (minor_page_faults() - before) / calls
