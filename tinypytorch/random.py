"""The framework's own random numbers (step 39), as PyTorch's `torch.manual_seed` and `torch.random`.

    tinypytorch.manual_seed(0)          # the default generator starts again from seed 0
    state = tinypytorch.get_rng_state() # a snapshot of where the stream is
    tinypytorch.set_rng_state(state)    # ... and back to it
    with tinypytorch.random.fork_rng(): # draws inside do not move the stream outside
        ...

Everything random in the package (dropout's masks) draws from `default_generator()`, a
NumPy `Generator` (PCG64). Recomputing a forward pass (checkpointing, steps 39-41) is
only correct if it draws the same numbers as the first time, so the state can be
captured and restored. It starts from a fixed seed (67280421310721, `default_rng_seed_val`
in PyTorch's C++ source), so a program that never seeds draws the same numbers on every run.
"""
import contextlib
import numbers

import numpy as np

INITIAL_SEED = 67280421310721  # PyTorch's default_rng_seed_val: reproducible without a seed

_generator = np.random.Generator(np.random.PCG64(INITIAL_SEED))
_seed = INITIAL_SEED


def default_generator():
    """The generator every random operation of the package draws from."""
    return _generator


def manual_seed(seed):
    """Start the default generator again from `seed` (an int >= 0); returns the generator."""
    global _seed
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"manual_seed: the seed must be an int >= 0, got {seed!r}")
    _seed = int(seed)
    _generator.bit_generator.state = np.random.PCG64(_seed).state
    return _generator


def initial_seed():
    """The seed the default generator last started from."""
    return _seed


def get_rng_state():
    """A snapshot of the default generator's state (a dict, as NumPy gives it: copy it freely)."""
    return _generator.bit_generator.state


def set_rng_state(state):
    """Put the default generator back where a `get_rng_state()` snapshot found it."""
    if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
        raise TypeError("set_rng_state: expected a state from tinypytorch.get_rng_state()")
    _generator.bit_generator.state = state


@contextlib.contextmanager
def fork_rng(enabled=True):
    """Whatever is drawn inside, the stream outside continues as if nothing had been drawn."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
