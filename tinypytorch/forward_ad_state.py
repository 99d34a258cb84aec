"""Forward-mode AD's state (step 64), on the ground floor beside grad_mode and autocast_state.

Whether a dual level is open, and the tangent of each Variable made under it. PyTorch keeps one level, for the
whole process; so does this module. While the level is open, forward AD is an entry of the mode stack
(tinypytorch.modes; core registers what it does to an operation). The tangents live here, not on the Variables:
keyed by the Variable's id with a weak reference that proves the id still names it, and dropped all at once when
the level closes. Imports nothing of the package but the ground floor's mode stack.
"""
import contextlib
import weakref

from tinypytorch import modes

open_dual_levels = 0  # step 64: 1 while the one dual level is open; speed: all the common path reads
tape = None  # no step: while linearize records (tinypytorch.func), a list of (replay, input tangents, output tangents)
_tangents = {}  # id(variable) -> [weak reference to it, its tangent array, its version then, the tangent's Variable]


def enter_dual_level():
    """Open the dual level; a second one is refused, as in PyTorch. Returns the level's number, 0."""
    global open_dual_levels
    if open_dual_levels:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    open_dual_levels = 1
    modes.opened("forward AD")
    return 0


def exit_dual_level():
    """Close the level: every tangent made under it is gone (unpack_dual then finds None)."""
    global open_dual_levels
    if open_dual_levels:
        modes.closed("forward AD")
    open_dual_levels = 0
    _tangents.clear()


def tangent_of(variable):
    """The tangent array of `variable` at the open level, or None (none, or no level open).

    A variable changed in place since its tangent was set would give a stale tangent: in-place operations
    have no tangent rules yet, so that is refused rather than silently wrong.
    """
    entry = _tangents.get(id(variable))
    if entry is None or entry[0]() is not variable:
        return None
    if entry[2] != _version(variable):
        raise NotImplementedError("Trying to use forward AD with an in-place operation (a tensor with a tangent "
                                  "was changed in place) that does not support it because it has not been "
                                  "implemented yet.")
    return entry[1]


def _version(variable):
    counter = variable.version_counter  # None for an inference tensor (step 58)
    return None if counter is None else counter.value


def set_tangent(variable, tangent, as_variable=None):
    """Give `variable` the tangent array `tangent` (None removes it) at the open level; `as_variable`, the Variable
    that holds it, if the user gave one (make_dual), so that unpack_dual hands back that very Variable."""
    if tangent is None:
        _tangents.pop(id(variable), None)
    else:
        key = id(variable)
        # when the variable dies its tangent goes with it, rather than at the level's end
        _tangents[key] = [weakref.ref(variable, lambda ref: _forget(key, ref)), tangent, _version(variable),
                          as_variable]


def tangent_variable(variable, make):
    """The Variable that holds `variable`'s tangent, made once by `make(array)` and kept: unpacking the same dual
    twice gives the same tangent, as in PyTorch. None if it has no tangent."""
    tangent = tangent_of(variable)
    if tangent is None:
        return None
    entry = _tangents[id(variable)]
    if entry[3] is None:
        entry[3] = make(tangent)
    return entry[3]


def _forget(key, ref):
    entry = _tangents.get(key)
    if entry is not None and entry[0] is ref:
        del _tangents[key]


@contextlib.contextmanager
def paused():
    """No tangents computed within (a custom Function's own forward: its jvp gives the outputs' tangents)."""
    global open_dual_levels
    was, open_dual_levels = open_dual_levels, 0
    if was:
        modes.closed("forward AD")
    try:
        yield
    finally:
        open_dual_levels = was
        if was:
            modes.opened("forward AD")
