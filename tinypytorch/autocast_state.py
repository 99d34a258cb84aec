"""autocast's state (step 61), on the ground floor beside grad_mode: what Function.__call__ asks of autocast.

Per thread, as PyTorch keeps it: for each device type whether autocast is on and its lower dtype, whether casts
of weights are cached, how many autocast blocks are open. Process-wide: how many blocks are open in all threads,
so that while none is an operation pays one global read, and the policy that casts an operation's inputs, which
tinypytorch.amp registers (the lists and the cache live there, above the operations they name). Like grad_mode,
this module imports nothing of the package.
"""
import threading

from tinypytorch import modes


class _Autocast(threading.local):  # step 61
    """The autocast state of this thread, as PyTorch keeps it: per device type ("cpu", "cuda") whether autocast
    is on and its lower dtype; whether casts of weights are cached; how many autocast blocks are open in it."""

    def __init__(self):
        self.enabled, self.dtype, self.cache_enabled, self.nesting = {}, {}, True, 0


Autocast = _Autocast()
# speed: how many autocast blocks are open now, in all threads; while none is, Function.__call__ reads only this
open_autocast_blocks = 0
_blocks_lock = threading.Lock()
_autocast_policy = None  # the function that casts an operation's inputs: tinypytorch.amp registers it


def register_autocast_policy(policy):
    """Name `policy(function, inputs) -> inputs` as the one that casts the inputs of operations under autocast."""
    global _autocast_policy
    _autocast_policy = policy


def autocast_inputs(function, inputs):
    """The inputs `function` runs on in this thread: cast by the autocast policy while a block is open."""
    return _autocast_policy(function, inputs)


def autocast_composite(name, *inputs):
    """The inputs of `name`, an operation the package builds from several (cross_entropy, mse_loss), cast as
    PyTorch casts it: as one operation, so that its parts run in the dtype it chose."""
    return _autocast_policy(name, inputs) if open_autocast_blocks else inputs


def enter_autocast(device_type, enabled, dtype, cache_enabled):
    """Switch autocast for `device_type` in this thread; returns the old state, for `exit_autocast`."""
    global open_autocast_blocks
    state = Autocast
    previous = (device_type, state.enabled.get(device_type, False), state.dtype.get(device_type), state.cache_enabled)
    # new dicts, never changed in place: what a caller was handed stays as it was
    state.enabled, state.dtype = {**state.enabled, device_type: enabled}, {**state.dtype, device_type: dtype}
    state.cache_enabled, state.nesting = cache_enabled, state.nesting + 1
    with _blocks_lock:
        open_autocast_blocks += 1
    modes.opened("autocast")
    return previous


def exit_autocast(previous):
    """Restore the state `enter_autocast` returned; True when the outermost autocast block of the thread closed."""
    global open_autocast_blocks
    state = Autocast
    device_type, enabled, dtype, state.cache_enabled = previous
    state.enabled, state.dtype = {**state.enabled, device_type: enabled}, {**state.dtype, device_type: dtype}
    state.nesting -= 1
    with _blocks_lock:
        open_autocast_blocks -= 1
    modes.closed("autocast")
    return state.nesting == 0
