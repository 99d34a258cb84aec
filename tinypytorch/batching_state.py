"""vmap's state, on the ground floor beside grad_mode and forward_ad_state: the vmap levels open now.

While a level is open, vmap is an entry of the mode stack (tinypytorch.modes): an operation that meets a batched
Variable is handed to its batching rule (tinypytorch.batching_rules puts the dispatcher here as it is imported).
Random operations ask `check_random` first: vmap's randomness flag decides whether they may draw. Imports nothing of
the package but the ground floor's mode stack.
"""
import contextlib
import dataclasses

from tinypytorch import modes

open_vmap_levels = 0  # how many vmap calls are running their function now; all the common path reads
levels = []  # the open levels, innermost last


@dataclasses.dataclass
class Level:
    number: int  # 1 for the outermost vmap; a batched Variable records the number of the vmap that made it
    size: int  # the batch size of this vmap
    randomness: str  # "error", "different" or "same"


batched_type = None  # BatchedVariable (tinypytorch.batched), set as that module is imported
run_rule = None  # the batching rule dispatcher (tinypytorch.batching_rules), set as that module is imported
drawing_per_sample = False  # True while a batching rule draws one sample of randomness per batch element


attribute_operand_types = ()  # Functions that keep an operand as an attribute (where's condition), and
has_batched_attribute = None  # whether it is batched: both set by tinypytorch.batching_rules


def any_batched(function, inputs):
    """Whether some input of an operation (or an operand it keeps as an attribute) is a batched Variable."""
    for x in inputs:
        if isinstance(x, batched_type):
            return True
    return isinstance(function, attribute_operand_types) and has_batched_attribute(function)


def batching_mode(function, inputs, below):  # step 69: vmap's entry of the mode stack (step 68)
    """Inside vmap, an operation with a batched input runs by its batching rule; any other goes on below."""
    if any_batched(function, inputs):
        return run_rule(function, inputs)
    return below(inputs)


modes.register("vmap", batching_mode)


@contextlib.contextmanager
def vmap_level(size, randomness):
    """A new vmap level, open for the duration of the block; yields its number."""
    global open_vmap_levels
    level = Level(len(levels) + 1, size, randomness)
    levels.append(level)
    open_vmap_levels += 1
    modes.opened("vmap")
    try:
        yield level.number
    finally:
        levels.pop()
        open_vmap_levels -= 1
        modes.closed("vmap")


def size_of(number):
    """The batch size of open level `number`."""
    return levels[number - 1].size


RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the 'same' or "
                "'different' randomness flags on vmap or perform the randomness operation out of vmap")  # PyTorch's


def check_random():
    """Called by the random number generators before they draw: under vmap with randomness='error', PyTorch's
    error. With 'different', only a batching rule that draws per sample may draw (the factories, which would give
    every sample the same numbers, are refused); 'same' draws as outside vmap."""
    if not levels:
        return
    mode = levels[-1].randomness
    if mode == "error":
        raise RuntimeError(RANDOM_ERROR)  # (even where a rule would draw per sample)
    if mode == "different" and not drawing_per_sample:
        raise NotImplementedError("vmap(randomness='different'): this random operation draws the same numbers for "
                                  "every sample in tinypytorch (only dropout draws per sample); use "
                                  "randomness='same', or draw outside vmap and pass the numbers in")


@contextlib.contextmanager
def per_sample_draws():
    """The block in which a batching rule draws its batch's randomness, one sample per batch element."""
    global drawing_per_sample
    before, drawing_per_sample = drawing_per_sample, True
    try:
        yield
    finally:
        drawing_per_sample = before
