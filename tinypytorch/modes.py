"""The mode stack (step 68): every mode an operation consults, asked once, at the operation's door.

`Function.__call__` reads one number, `open_modes`. While it is 0 the operation goes straight through the plain
door (`Function.run_plain`: DeZero's door, with views and PyTorch's dtypes). While some mode is open the operation
goes down this stack first: each open mode, from the top, either runs the operation itself or hands it on, its
inputs changed or not, to the next one; below the last waits the plain door.

    vmap                    an operation with a batched input runs by its batching rule (step 69)
    autocast                the operations autocast lists get their inputs cast (step 61)
    inference               nothing is recorded, even under enable_grad, and no tangent is pushed (step 58)
    forward AD              each operation's jvp pushes the tangents forward with the values (step 64)
    selective checkpoint    the open region runs every operation, to keep its result or replay it (step 63)

The order is that of PyTorch's dispatch keys, highest first: functorch's batching (FuncTorchBatched), autocast
(AutocastCPU), autograd (AutogradCPU: inference mode switches it off, forward AD computes in it), then Python
dispatch modes (Python: selective checkpointing's, below autograd), then the kernel (CPU); the plain door is both
autograd's recording and the kernel. A mode that runs the operation by other operations (a batching rule, autocast's
casts) calls them from the top again, so they meet the modes below it: PyTorch's redispatch. Modes are counted
process-wide, as the states below count their open blocks; whose thread a mode belongs to, the mode itself asks
when it sees an operation.

The modes' states stay with their owners (grad_mode, autocast_state, batching_state, forward_ad_state and
utils.selective_checkpoint); each owner registers what its mode does to an operation, and opens and closes its
entry. Like those states, this module imports nothing of the package: the ground floor.
"""
import threading

ORDER = ("vmap", "autocast", "inference", "forward AD", "selective checkpoint")  # the top of the stack first

open_modes = 0  # how many entries are open: while 0, Function.__call__ reads only this
stack = ()  # the handlers of the open modes, in ORDER: what `dispatch` walks down
_handlers = {}  # mode -> handler(function, inputs, below): registered by the mode's owner
_depth = dict.fromkeys(ORDER, 0)  # mode -> how many of its blocks are open (nested autocast blocks, vmap levels)
_lock = threading.Lock()


def register(mode, handler):
    """Say what `mode` does to an operation: `handler(function, inputs, below)` returns the operation's outputs,
    either computing them itself or by `below(inputs)`, the rest of the stack."""
    if mode not in ORDER:
        raise ValueError(f"unknown mode {mode!r}; the stack holds {', '.join(ORDER)}")
    _handlers[mode] = handler


def opened(mode):
    """One more block of `mode` is open (the first puts the mode on the stack)."""
    _change(mode, +1)


def closed(mode):
    """One block of `mode` has closed (the last takes the mode off the stack)."""
    _change(mode, -1)


def _change(mode, step):
    global open_modes, stack
    with _lock:
        _depth[mode] += step
        stack = tuple([_handlers[m] for m in ORDER if _depth[m] > 0])
        open_modes = len(stack)


def open_now():
    """The modes on the stack now, from the top: what a drawing or a test shows."""
    return [m for m in ORDER if _depth[m] > 0]


def dispatch(function, inputs, run_plain):
    """Run `function` on `inputs` down the stack as it is now; `run_plain(inputs)` is the door below the last."""
    return _below(stack, 0, function, run_plain)(inputs)


def _below(entries, level, function, run_plain):
    """The rest of the stack from `level` on, as one callable of the inputs."""
    if level == len(entries):
        return run_plain
    return lambda inputs: entries[level](function, inputs, _below(entries, level + 1, function, run_plain))
