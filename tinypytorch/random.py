"""The framework's own random numbers (step 41), as PyTorch's `torch.manual_seed` and `torch.random`.

    tinypytorch.manual_seed(0)          # the default generator starts again from seed 0
    state = tinypytorch.get_rng_state() # a snapshot of where the stream is
    tinypytorch.set_rng_state(state)    # ... and back to it
    with tinypytorch.random.fork_rng(): # draws inside do not move the stream outside
        ...

Everything random in the package (dropout's masks) on the CPU draws from
`default_generator()`, a NumPy `Generator` (PCG64); on a GPU from `device_generator()`
(step 48), which draws on the device itself, as PyTorch keeps one generator for the CPU
and one per GPU. Recomputing a forward pass (checkpointing, steps 42-45) is
only correct if it draws the same numbers as the first time, so the state can be
captured and restored. It starts from a fixed seed (67280421310721, `default_rng_seed_val`
in PyTorch's C++ source), so a program that never seeds draws the same numbers on every run.
"""
import contextlib
import numbers

import numpy as np

from tinypytorch import batching_state

INITIAL_SEED = 67280421310721  # PyTorch's default_rng_seed_val: reproducible without a seed

_generator = np.random.Generator(np.random.PCG64(INITIAL_SEED))
_seed = INITIAL_SEED


def default_generator():
    """The generator every random operation of the package draws from."""
    if batching_state.open_vmap_levels:  # step 69: inside vmap, randomness decides whether a draw may happen
        batching_state.check_random()
    return _generator


def manual_seed(seed):
    """Start the default generator (and the device's) again from `seed` (an int >= 0); returns the generator."""
    global _seed
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"manual_seed: the seed must be an int >= 0, got {seed!r}")
    _seed = int(seed)
    _generator.bit_generator.state = np.random.PCG64(_seed).state
    _device_generator.manual_seed(_seed)  # step 48: every generator, as torch.manual_seed seeds every GPU's
    return _generator


def initial_seed():
    """The seed the default generator last started from."""
    return _seed


def get_rng_state():
    """A snapshot of the default generator's state (a dict, as NumPy gives it: copy it freely)."""
    return _generator.bit_generator.state


def set_rng_state(new_state):
    """Put the default generator back where a `get_rng_state()` snapshot found it."""
    if not isinstance(new_state, dict) or new_state.get("bit_generator") != "PCG64":
        raise TypeError("set_rng_state: expected a state from tinypytorch.get_rng_state()")
    _generator.bit_generator.state = new_state


# ----- the device's generator (step 48) -------------------------------------------------------------

class CounterGenerator:
    """Random numbers computed from (seed, position), drawn with any array module: PyTorch's GPU generator's idea.

    PyTorch's CUDA generator is Philox, a counter-based generator: the n-th number is a
    function of the seed and n alone, so every GPU thread computes its own number without
    waiting for the others, and the whole state is two integers, (seed, offset), cheap to
    save for checkpointing. Here the function is SplitMix64's mixer, applied to the
    position of each number: a few integer operations, element-wise, on the device.
    """

    GOLDEN = np.uint64(0x9E3779B97F4A7C15)
    M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)

    def __init__(self, seed=INITIAL_SEED):
        self.manual_seed(seed)

    def manual_seed(self, seed):
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"manual_seed: the seed must be an int >= 0, got {seed!r}")
        self.seed, self.offset = int(seed) % 2**64, 0

    def get_state(self):
        return self.seed, self.offset

    def set_state(self, state):
        if not (isinstance(state, tuple) and len(state) == 2 and all(isinstance(v, int) for v in state)):
            raise TypeError("set_rng_state: expected a state from tinypytorch.cuda.get_rng_state()")
        self.seed, self.offset = state

    def random(self, shape, xp):
        """Uniform float64 numbers in [0, 1) of `shape`, as an array of module `xp`; the offset moves past them."""
        n = int(np.prod(shape, dtype=np.int64))
        position = xp.arange(self.offset + 1, self.offset + 1 + n, dtype=np.uint64)
        self.offset += n
        z = position * self.GOLDEN + np.uint64(self.seed)  # uint64 arithmetic wraps around, as the mixer wants
        z = (z ^ (z >> np.uint64(30))) * self.M1
        z = (z ^ (z >> np.uint64(27))) * self.M2
        z = z ^ (z >> np.uint64(31))
        return ((z >> np.uint64(11)).astype(np.float64) * 2.0**-53).reshape(shape)  # the top 53 bits


_device_generator = CounterGenerator()


def device_generator():
    """The generator every random operation on a GPU draws from (one for all devices here)."""
    return _device_generator


def uniform(shape, xp):
    """Uniform numbers in [0, 1) where module `xp` computes: the CPU's generator for NumPy, the device's otherwise."""
    if batching_state.open_vmap_levels:  # step 69: inside vmap, randomness decides whether a draw may happen
        batching_state.check_random()
    if xp is np:
        return _generator.random(shape)
    return _device_generator.random(shape, xp)


def get_all_states():
    """Where every generator is, the CPU's and the device's: what checkpointing saves (PyTorch saves both too)."""
    return get_rng_state(), _device_generator.get_state()


def set_all_states(states):
    cpu, device = states
    set_rng_state(cpu)
    _device_generator.set_state(device)


@contextlib.contextmanager
def fork_rng(enabled=True):
    """Whatever is drawn inside, the streams outside (the CPU's and the device's) continue as if
    nothing had been drawn."""
    if not enabled:
        yield
        return
    states = get_all_states()
    try:
        yield
    finally:
        set_all_states(states)
