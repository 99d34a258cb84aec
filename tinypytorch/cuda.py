"""Devices and array backends: NumPy on the CPU always, CuPy on a GPU when one is usable (steps 23 and 48).

Package code never calls `numpy` directly on data that may live on the GPU; it asks
`get_array_module` for the module that owns the data (`xp`) and calls `xp.exp`,
`xp.ones_like`, ... CuPy mirrors NumPy's API, so one line of code serves both.

Devices have PyTorch's names (step 48): `device("cpu")`, `device("cuda")`, `device("cuda:0")`;
`to_device` moves an array; `memory_allocated` and `max_memory_allocated` read CuPy's
memory pool, the instrument that measures device memory.

PyTorch's other everyday `torch.cuda` names (no step): `device_count`, `synchronize`,
`empty_cache`, `reset_peak_memory_stats`; `tinypytorch.cuda.amp` is PyTorch's deprecated
`torch.cuda.amp` (tinypytorch/amp/deprecated.py).
"""
import contextlib
import numbers
import threading
import warnings
import weakref

import numpy as np

from tinypytorch import random

try:
    import cupy
    import cupyx  # CuPy's extras: page-locked host arrays

    GPU = bool(cupy.is_available())  # installed is not enough: a driver and a device are needed
except Exception:  # not installed, or a CUDA library that fails to load: both mean "no GPU"
    cupy = cupyx = None
    GPU = False

# the array types a Variable may hold
array_types = (np.ndarray,) if cupy is None else (np.ndarray, cupy.ndarray)


def use_backend(module, extras=None, available=True):
    """Make `module` the device's array module (and `extras` its cupyx); returns what was there, to put back.

    CuPy is the one a GPU uses. The tests put a strict stand-in with CuPy's API here
    (tests/strict_cupy.py), so that every device code path runs on a machine without a GPU.
    """
    global cupy, cupyx, GPU, array_types
    previous = (cupy, cupyx, GPU)
    cupy, cupyx, GPU = module, extras, bool(available and module is not None)
    array_types = (np.ndarray,) if module is None else (np.ndarray, module.ndarray)
    return previous


def is_available():
    """Whether a CUDA device is usable (PyTorch's `torch.cuda.is_available`)."""
    return GPU


def get_array_module(*xs):
    """Return `cupy` if any of `xs` (arrays or Variables) holds a CuPy array, else `numpy`."""
    if cupy is None:
        return np
    return cupy.get_array_module(*(_array_of(x) for x in xs))


def as_numpy(x):
    """`x` (an array, a Variable or a number) as a NumPy array, copied from the GPU if needed."""
    x = _array_of(x)
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x)
    return np.asarray(x)


def as_cupy(x):
    """`x` (an array, a Variable or a number) as a CuPy array on the current GPU."""
    if not GPU:
        raise RuntimeError(f"as_cupy: CuPy with a usable GPU is required ({why_unavailable()})")
    return cupy.asarray(_array_of(x))


def address(a):
    """The address of array a's first element (NumPy's `ctypes.data`, CuPy's `data.ptr`)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def _array_of(x):
    """The array of a Variable (its .data); arrays and numbers as they are (their .data is a buffer)."""
    if isinstance(x, (*array_types, np.generic, numbers.Number)):
        return x
    return getattr(x, "data", x)


def why_unavailable():
    if cupy is None:
        return "CuPy is not installed: pip install -e .[gpu] (README: which CuPy for which driver)"
    return "CuPy is installed but finds no usable CUDA device"


# ----- devices (step 48) -----------------------------------------------------------------------------

class device:  # noqa: N801 (PyTorch's name: torch.device)
    """Where an array lives: `device("cpu")`, `device("cuda")` (the current GPU) or `device("cuda:1")`."""

    __slots__ = ("type", "index")

    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index if index is None else index
        if not isinstance(spec, str):
            raise TypeError(f"device: expected a string such as 'cpu' or 'cuda:0', got {type(spec).__name__}")
        kind, _, number = spec.partition(":")
        if kind not in ("cpu", "cuda") or (number and not number.isdigit()):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {spec}")
        if number:
            index = int(number)
        if kind == "cpu" and index not in (None, 0):
            raise RuntimeError(f"device: the CPU has no index {index}")
        self.type, self.index = kind, (None if kind == "cpu" else index)

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"


CPU = device("cpu")


def device_of(array):
    """The device an array lives on: cpu for NumPy, cuda:<id> for CuPy."""
    if isinstance(array, np.ndarray):
        return CPU
    return device("cuda", array.device.id)


def is_on(array, where):
    """Whether `array` lives on device `where`; "cuda" without an index means any GPU."""
    where, here = device(where), device_of(array)
    return here == where or (where.index is None and here.type == where.type)


def to_device(array, where, op="to"):
    """`array` on device `where` (a device or a string): itself if it is there already, else a copy."""
    where = device(where)
    if is_on(array, where):
        return array
    if where.type == "cpu":
        return cupy.asnumpy(array)
    if not GPU:
        raise RuntimeError(f"{op}: cannot move to {where}: {why_unavailable()}")
    with cupy.cuda.Device(where.index or 0):
        return cupy.asarray(array)


def check_same_device(op, arrays):
    """Refuse arrays of two devices in one operation, with PyTorch's message; `op` names the operation."""
    first = type(arrays[0])
    for a in arrays[1:]:
        if type(a) is not first or (first is not np.ndarray and a.device != arrays[0].device):
            found = sorted({str(device_of(x)) for x in arrays}, reverse=True)
            raise RuntimeError(f"{op}: Expected all tensors to be on the same device, but found at least two "
                               f"devices, {found[0]} and {found[1]}!")


# ----- the factories' default device (PyTorch's torch.set_default_device) ------------------------------

class _DefaultDevice(threading.local):
    """Where factories make tensors when no `device=` is given, per thread as in PyTorch: None stands for the CPU,
    so that the factories' usual case reads one attribute and finds nothing to do."""

    device = None


DEFAULT = _DefaultDevice()


def set_default_device(where):
    """Factories (tensor, zeros, ones, full, eye, arange, linspace, rand, randn, randint, empty) called without
    `device=` make tensors on `where` from now on, in this thread (PyTorch's `torch.set_default_device`); None or
    "cpu" goes back to the CPU. *_like and new_* keep their source's device, and from_numpy shares host memory,
    as in PyTorch. Asking for "cuda" without a usable GPU is accepted here, as PyTorch accepts it: the factories
    raise the clear error when they are asked to make a tensor there."""
    where = None if where is None else device(where)
    DEFAULT.device = None if where is None or where.type == "cpu" else where


def get_default_device():
    """The device factories make tensors on when no `device=` is given (PyTorch's `torch.get_default_device`):
    device(type='cpu') unless set_default_device said otherwise; a GPU with its index (the current one's if the
    device was named without one), which needs a usable GPU."""
    where = DEFAULT.device
    if where is None:
        return CPU
    if where.index is not None:
        return where
    if not GPU:
        raise RuntimeError(f"get_default_device: the default device is {where}: {why_unavailable()}")
    return device("cuda", cupy.cuda.Device().id)


# ----- device memory: CuPy's memory pool is the instrument (step 48) ----------------------------------

def memory_allocated(device=None):
    """Bytes of device memory held by arrays now (CuPy's pool; PyTorch's `torch.cuda.memory_allocated`).

    `device`: which GPU (an index, "cuda:1" or a device); the current one by default."""
    if cupy is None:
        return 0
    if device is None:
        return cupy.get_default_memory_pool().used_bytes()
    with cupy.cuda.Device(_index("memory_allocated", device)):  # CuPy's pool answers for the current device
        return cupy.get_default_memory_pool().used_bytes()


@contextlib.contextmanager
def max_memory_allocated():
    """`with max_memory_allocated() as peak:` ... then `peak.bytes` is the most the pool held inside the block.

    CuPy's pool has no high-water mark of its own; a memory hook reads the pool's held bytes
    after every allocation, which is where a peak can only be.
    """
    peak = _Peak(memory_allocated())
    if cupy is None:
        yield peak
        return

    class Hook(cupy.cuda.MemoryHook):
        def __init__(self):
            self.name = f"tinypytorch.max_memory_allocated.{id(peak)}"  # CuPy refuses two hooks of one name

        def malloc_postprocess(self, **kwargs):
            peak.bytes = max(peak.bytes, memory_allocated())

    with Hook():
        yield peak


class _Peak:
    __slots__ = ("start", "bytes", "__weakref__")

    def __init__(self, start):
        self.start = self.bytes = start
        _peaks[f"tinypytorch.max_memory_allocated.{id(self)}"] = self  # the name its block's hook takes


_peaks = weakref.WeakValueDictionary()  # hook name -> the peak of a max_memory_allocated() block


# ----- PyTorch's everyday torch.cuda names (no step) ------------------------------------------------
# Without a GPU each does what PyTorch's CPU build does: device_count is 0, empty_cache has nothing to free,
# synchronize and the resets raise the error types PyTorch's CPU build raises.

def device_count():
    """How many GPUs CuPy sees (PyTorch's `torch.cuda.device_count`); 0 without a usable one."""
    return int(cupy.cuda.runtime.getDeviceCount()) if GPU else 0


def _index(op, where):
    """The GPU index `where` names (None: the current GPU; an int; "cuda:1" or a device), as torch reads it."""
    if where is None:
        return cupy.cuda.get_device_id()
    if isinstance(where, numbers.Integral) and not isinstance(where, bool):
        return int(where)
    where = device(where)
    if where.type != "cuda":
        raise ValueError(f"{op}: Expected a cuda device, but got: {where}")  # PyTorch's words
    return cupy.cuda.get_device_id() if where.index is None else where.index


def synchronize(device=None):
    """Wait until the work queued on the GPU has finished (PyTorch's `torch.cuda.synchronize`).

    CuPy, as PyTorch, queues kernels and returns at once: a clock read without this measures
    the queueing, not the work. Without a GPU it raises AssertionError, as PyTorch's CPU build does."""
    if not GPU:
        raise AssertionError(f"synchronize: no CUDA device: {why_unavailable()}")
    cupy.cuda.Device(_index("synchronize", device)).synchronize()


def empty_cache():
    """Hand the blocks CuPy's memory pool keeps for reuse back to the GPU (PyTorch's `torch.cuda.empty_cache`).

    The bytes held by live arrays (`memory_allocated`) do not change; what the pool holds beyond them
    (`cupy.get_default_memory_pool().total_bytes()`) does. Without a GPU there is nothing to free."""
    if GPU:
        cupy.get_default_memory_pool().free_all_blocks()


def reset_peak_memory_stats(device=None):
    """Start the peak of every open `max_memory_allocated()` block again from the bytes held now.

    PyTorch's `torch.cuda.reset_peak_memory_stats` starts its one peak again, so that
    `max_memory_allocated()` afterwards is the peak since the reset. The package keeps peaks only
    inside `with max_memory_allocated() as peak:` blocks (CuPy's pool keeps none), so those are what
    a reset starts again (`peak.start` stays the block's start); outside every block there is no
    peak to reset. Without a GPU it raises AttributeError, as PyTorch's CPU build does."""
    if not GPU:
        raise AttributeError(f"reset_peak_memory_stats: no CUDA device: {why_unavailable()}")
    _index("reset_peak_memory_stats", device)  # checked: a GPU
    now = memory_allocated()
    for name in list(cupy.cuda.memory_hook.get_memory_hooks()):  # this thread's open hooks, by name
        peak = _peaks.get(name)
        if peak is not None:
            peak.bytes = now


def reset_max_memory_allocated(device=None):
    """PyTorch's deprecated name of `reset_peak_memory_stats`, with its FutureWarning."""
    warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, which "
                  "resets /all/ peak memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


# ----- the device's random generator (step 48) ------------------------------------------------------

def manual_seed(seed):
    """Seed the device's generator (PyTorch's `torch.cuda.manual_seed`)."""
    random.device_generator().manual_seed(seed)


def get_rng_state():
    """The device generator's state: (seed, offset), as PyTorch's Philox generator keeps it."""
    return random.device_generator().get_state()


def set_rng_state(state):
    random.device_generator().set_state(state)
