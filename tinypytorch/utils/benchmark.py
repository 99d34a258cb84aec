"""Timing statements, PyTorch's `torch.utils.benchmark` (no step): `Timer` and the `Measurement` it returns.

    t = Timer(stmt="f(x)", setup="x = torch.ones(100)", globals={"f": f}, label="f", description="n=100")
    m = t.timeit(100)               # one run of `stmt` 100 times: m.mean, m.median, m.times, print(m)
    m = t.blocked_autorange()       # blocks of runs until min_run_time seconds have passed
    m = t.adaptive_autorange()      # ... until the spread of the blocks is small

Built on the standard library's `timeit.Timer`, as PyTorch's is: the clock is
`timeit.default_timer`, read after waiting for the GPU (`tinypytorch.cuda.synchronize`) when
there is one, since GPU work is queued and a clock read without waiting times the queueing.
The statement sees the package as `torch` (PyTorch's Timer puts `torch` in its globals), so a
ported statement runs unchanged. `num_threads` is recorded with the measurement and printed, as
PyTorch's; it does not size anything here: the package has no thread pool of its own, and
NumPy's BLAS uses the threads it was started with.
"""
import dataclasses
import textwrap
import timeit as _timeit

import numpy as np

from tinypytorch import cuda

__all__ = ["Timer", "Measurement", "TaskSpec", "timer", "select_unit"]

_IQR_WARN_THRESHOLD, _IQR_GROSS_WARN_THRESHOLD = 0.1, 0.25  # PyTorch's: when a measurement warns of noise


def timer():
    """The clock: seconds, read once the GPU's queued work has finished (PyTorch's `benchmark.timer`)."""
    if cuda.is_available():
        cuda.synchronize()
    return _timeit.default_timer()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What was timed: the statement, its set-up and the labels a Measurement prints (PyTorch's TaskSpec)."""
    stmt: str
    setup: str
    global_setup: str = ""
    label: str = None
    sub_label: str = None
    description: str = None
    env: str = None
    num_threads: int = 1

    @property
    def title(self):
        """The label (or a one-line statement), with the sub-label after a colon."""
        sub = f": {self.sub_label}" if self.sub_label else ""
        if self.label is not None:
            return self.label + sub
        if "\n" not in self.stmt:
            return self.stmt + sub
        return f"stmt:{f' ({self.sub_label})' if self.sub_label else ''}\n{textwrap.indent(self.stmt, '  ')}"

    def setup_str(self):
        if self.setup in ("pass", ""):
            return ""
        return f"setup:\n{textwrap.indent(self.setup, '  ')}" if "\n" in self.setup else f"setup: {self.setup}"

    def summarize(self):
        sections = [self.title, self.description or "", self.setup_str()]
        return "\n".join(f"{s}\n" if "\n" in s else s for s in sections if s)


@dataclasses.dataclass(repr=False)
class Measurement:
    """Seconds per run of a statement: `raw_times[i]` is the time of one block of `number_per_run` runs.

    `times` are per run; `mean`, `median` and `iqr` are over them (quantiles interpolated linearly,
    as PyTorch's). Printing gives PyTorch's summary: title, median, IQR, how many measurements."""
    number_per_run: int
    raw_times: list
    task_spec: TaskSpec
    metadata: dict = None

    def __getattr__(self, name):  # the task's fields (stmt, label, num_threads, ...), as PyTorch's Measurement
        if name in {f.name for f in dataclasses.fields(TaskSpec)}:
            return getattr(self.task_spec, name)
        raise AttributeError(f"'Measurement' object has no attribute '{name}'")

    @property
    def times(self):
        return [t / self.number_per_run for t in self.raw_times]

    def _quantile(self, q):
        return float(np.quantile(np.asarray(self.times, dtype=np.float64), q))

    @property
    def median(self):
        return self._quantile(0.5)

    @property
    def mean(self):
        return float(np.mean(np.asarray(self.times, dtype=np.float64)))

    @property
    def iqr(self):
        return self._quantile(0.75) - self._quantile(0.25)

    @property
    def title(self):
        return self.task_spec.title

    def meets_confidence(self, threshold=_IQR_WARN_THRESHOLD):
        """Whether the interquartile range is below `threshold` times the median."""
        return self.iqr / self.median < threshold

    @property
    def _warnings(self):
        for threshold, why in ((_IQR_GROSS_WARN_THRESHOLD, "This suggests significant environmental influence."),
                               (_IQR_WARN_THRESHOLD, "This could indicate system fluctuation.")):
            if not self.meets_confidence(threshold):
                return [f"  WARNING: Interquartile range is {self.iqr / self.median * 100:.1f}% of the median "
                        f"measurement.\n           {why}"]
        return []

    @property
    def has_warnings(self):
        return bool(self._warnings)

    def __repr__(self):
        n, threads = len(self.times), self.task_spec.num_threads
        unit, scale = select_unit(self.median)
        lines = [object.__repr__(self), self.task_spec.summarize(),
                 f"  {'Median: ' if n > 1 else ''}{self.median / scale:.2f} {unit}"]
        if n >= 4:
            lines.append(f"  IQR:    {self.iqr / scale:.2f} {unit} ({self._quantile(0.25) / scale:.2f} to "
                         f"{self._quantile(0.75) / scale:.2f})")
        lines.append(f"  {n} measurement{'s' if n > 1 else ''}, {self.number_per_run} runs "
                     f"{'per measurement,' if n > 1 else ','} {threads} thread{'s' if threads > 1 else ''}")
        return "\n".join(lines + self._warnings)


def select_unit(t):
    """(unit, seconds per unit) that print `t` seconds as a number of order 1 to 1000."""
    unit = {-3: "ns", -2: "us", -1: "ms"}.get(int(np.log10(t) // 3), "s")
    return unit, {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}[unit]


class Timer:
    """Time `stmt` (a string of Python), after running `setup` once, with `globals` as its names.

    PyTorch's `torch.utils.benchmark.Timer(stmt, setup, global_setup, timer, globals, label,
    sub_label, description, env, num_threads, language)`; Python statements only (PyTorch also
    compiles C++ ones). `num_threads` is recorded, not applied (module docstring)."""

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timer, globals=None, label=None,
                 sub_label=None, description=None, env=None, num_threads=1, language="python"):
        if not isinstance(stmt, str):
            raise ValueError("Currently only a `str` stmt is supported.")  # PyTorch's words, here and below
        if language in ("cpp", "c++") or getattr(language, "name", None) == "CPP":
            raise NotImplementedError("Timer: C++ statements need PyTorch's C++ toolchain; tinypytorch times Python")
        if language not in ("py", "python") and getattr(language, "name", None) != "PYTHON":
            raise ValueError(f"Invalid language `{language}`.")
        if global_setup:
            raise ValueError(f"global_setup is C++ only, got `{global_setup}`. Most likely this code can simply be "
                             "moved to `setup`.")
        if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
            raise ValueError(f"Timer: num_threads must be a positive int, got {num_threads!r}")
        import tinypytorch

        names = dict(globals or {})
        names.setdefault("torch", tinypytorch)  # the name ported statements use
        stmt, setup = (self._tidy(code) for code in (stmt, setup))
        self._timer = _timeit.Timer(stmt=stmt, setup=setup, timer=timer, globals=names)
        self._task_spec = TaskSpec(stmt, setup, global_setup, label, sub_label, description, env, num_threads)

    @staticmethod
    def _tidy(code):
        code = textwrap.dedent(code)
        return (code[1:] if code.startswith("\n") else code).rstrip()

    def _timeit(self, number):
        return max(self._timer.timeit(number), 1e-9)  # never 0: a Measurement divides by it

    def timeit(self, number=1000000):
        """One block of `number` runs, after a warm-up of number // 100 runs (at least 2), as `timeit.Timer.timeit`."""
        self._timeit(max(int(number // 100), 2))
        return Measurement(number, [self._timeit(number)], self._task_spec)

    def repeat(self, repeat=-1, number=-1):
        raise NotImplementedError("See `Timer.blocked_autorange.`")  # PyTorch's Timer has none either

    def autorange(self, callback=None):
        raise NotImplementedError("See `Timer.blocked_autorange.`")

    def _block_size(self, min_run_time):
        """Runs per block: grown tenfold until the clock's own cost is under 1e-4 of a block (PyTorch's rule)."""
        overhead = float(np.median([self._timeit(0) for _ in range(5)]))
        number = 1
        while True:
            taken = self._timeit(number)
            if (overhead / taken <= 1e-4 and taken >= min_run_time / 1000) or taken > min_run_time \
                    or number * 10 > 2147483647:
                return number
            number *= 10

    def _blocks(self, number, min_run_time, max_run_time=None, callback=None, stop=lambda times: True):
        times, total = [], 0.0
        while total < min_run_time or not stop(times):
            spent = self._timeit(number)
            times.append(spent)
            total += spent
            if callback:
                callback(number, spent)
            if max_run_time and total > max_run_time:
                break
        return times

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        """Blocks of runs until `min_run_time` seconds have passed; each block's time is one measurement."""
        number = self._block_size(min_run_time)
        return Measurement(number, self._blocks(number, min_run_time, callback=callback), self._task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        """Blocks of runs until, after at least 4 of them and `min_run_time` seconds, the interquartile range is
        below `threshold` times the median, or `max_run_time` seconds have passed."""
        number = self._block_size(0.05)

        def stop(times):
            return len(times) > 3 and Measurement(number, times, self._task_spec).meets_confidence(threshold)

        times = self._blocks(number, min_run_time, max_run_time, callback, stop)
        return Measurement(number, times, self._task_spec)
