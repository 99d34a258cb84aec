"""Array backends: NumPy always, CuPy when it is installed and a GPU is usable (step 23).

Package code never calls `numpy` directly on data that may live on the GPU; it asks
`get_array_module` for the module that owns the data (`xp`) and calls `xp.exp`,
`xp.ones_like`, ... CuPy mirrors NumPy's API, so one line of code serves both.
"""
import numpy as np

try:
    import cupy

    GPU = bool(cupy.is_available())  # installed is not enough: a driver and a device are needed
except Exception:  # not installed, or a CUDA library that fails to load: both mean "no GPU"
    cupy = None
    GPU = False

# the array types a Variable may hold
array_types = (np.ndarray,) if cupy is None else (np.ndarray, cupy.ndarray)


def get_array_module(*xs):
    """Return `cupy` if any of `xs` (arrays or Variables) holds a CuPy array, else `numpy`."""
    if cupy is None:
        return np
    from tinypytorch.core import Variable  # imported here: core imports this module

    return cupy.get_array_module(*(x.data if isinstance(x, Variable) else x for x in xs))


def as_numpy(x):
    """`x` (an array, a Variable or a number) as a NumPy array, copied from the GPU if needed."""
    from tinypytorch.core import Variable

    if isinstance(x, Variable):
        x = x.data
    if cupy is not None and isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x)
    return np.asarray(x)


def as_cupy(x):
    """`x` (an array, a Variable or a number) as a CuPy array on the current GPU."""
    if not GPU:
        raise RuntimeError("as_cupy: CuPy with a usable GPU is required (pip install cupy-cuda12x)")
    from tinypytorch.core import Variable

    if isinstance(x, Variable):
        x = x.data
    return cupy.asarray(x)
