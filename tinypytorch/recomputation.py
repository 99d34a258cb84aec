"""Running a forward computation again for backward (steps 42-47): checkpointing and reversible blocks.

Checkpointing (steps 42-45) recomputes a segment it did not keep; a reversible block (steps
46-47) recomputes each block from the input it computed back. Both must draw the same random
numbers as the first run, without moving the streams outside, and both must tell layers
with running state that this run is a repeat: BatchNorm counts a batch once (step 45).
"""
import contextlib

from tinypytorch import random
from tinypytorch.grad_mode import is_recomputing, recomputing  # noqa: F401  (is_recomputing: asked here by layers)


@contextlib.contextmanager
def replaying(rng_states):
    """Run a recomputation: every generator where `rng_states` found it (None: as they are), the outer streams
    untouched afterwards (`random.get_all_states()` takes such a snapshot)."""
    with random.fork_rng(enabled=rng_states is not None):
        if rng_states is not None:
            random.set_all_states(rng_states)
        with recomputing():
            yield
