"""Running a forward computation again for backward (steps 42-47): checkpointing and reversible blocks.

Checkpointing (steps 42-45) recomputes a segment it did not keep; a reversible block (steps
46-47) recomputes each block from the input it computed back. Both must draw the same random
numbers as the first run, without moving the streams outside, and both must tell layers
with running state that this run is a repeat: BatchNorm counts a batch once (step 45).

This module is where that is done; the others ask it:

    rng_state           the first run records where the generators are: `utils.checkpoint`
                        (CheckpointFunction, the non-reentrant frame), `reversible` (each
                        block's f and g, each level of a column)
    replaying           the repeat runs inside it: checkpoint's recomputations, a reversible
                        block's inverse and forward again, a column's level again
    draw_as             inside a repeat, draw from here on as from a recorded state:
                        `reversible.AdditiveCoupling`, whose f and g each have their own
    is_recomputing      asked by `layers.BatchNorm1d` (and by steps 43-45 to show what runs again)

The flag itself belongs to `grad_mode`, with the other thread-local modes.
"""
import contextlib

from tinypytorch import random
from tinypytorch.grad_mode import is_recomputing, recomputing  # noqa: F401  (is_recomputing: asked here by layers)


def rng_state(preserve=True):
    """Where every generator is now, for a repeat to start from (None when not `preserve`: a repeat then
    draws on from wherever the generators are by then, as PyTorch's `preserve_rng_state=False`)."""
    return random.get_all_states() if preserve else None


@contextlib.contextmanager
def replaying(rng_states):
    """Run a recomputation: every generator where `rng_states` found it (None: as they are), the outer streams
    untouched afterwards (`rng_state()` takes such a snapshot)."""
    with random.fork_rng(enabled=rng_states is not None):
        if rng_states is not None:
            random.set_all_states(rng_states)
        with recomputing():
            yield


def draw_as(rng_states):
    """From here on, draw as the first run drew from `rng_states` (a snapshot from `rng_state()`).

    Inside a repeat whose caller keeps the outer streams (`random.fork_rng`), for a repeat made of
    parts that each drew from a state of their own (a coupling's f and g, step 46).
    """
    random.set_all_states(rng_states)
