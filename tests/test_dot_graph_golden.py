"""get_dot_graph's exact text for a few small graphs, kept byte for byte across refactors.

The golden files tests/golden/dot_graph_*.dot were written by running get_dot_graph as it stood
before it was split into small functions (the commit that added this test), not read against a
formula: the requirement they check is "the output is unchanged". The cases cover constants (a
Python number, and a leaf with requires_grad=False), a function with two outputs (one freed, or
one kept alive), a named and retained intermediate beside freed ones drawn from their creator's
record, add(x, x), a list of outputs, names that need escaping, `verbose`, and `show_saved`
before and after backward and with a saved-tensors hook. Step 25's Goldstein-Price golden file
(tests/test_step25.py) is the large case.
"""
import pathlib

import numpy as np
import pytest

import tinypytorch
from reference import TwoOutputs
from tinypytorch import Variable
from tinypytorch.utils import get_dot_graph

pytestmark = pytest.mark.step25
GOLDEN = pathlib.Path(__file__).parent / "golden"


def constants():
    """A Python number becomes a 0-d constant (labelled by its value); w is a named leaf without a gradient."""
    x = Variable(np.array([1.0, 2.0]), name="x")
    w = Variable(np.array(0.5, dtype=np.float64), name="w", requires_grad=False)
    y = 3 * x + w * x + Variable(np.array(7.0), requires_grad=False)
    y.name = "y"
    return y


def two_outputs():
    """Both outputs of TwoOutputs used, then one output of a second call freed and one kept."""
    x = Variable(np.array([1.0, -1.0, 0.5]), name="x")
    a, b = TwoOutputs()(x)
    c, _ = TwoOutputs()(a * b)  # the second output is freed at once: not drawn
    return c


def retained_and_named():
    """A named intermediate that retains its gradient, beside nameless ones that were freed, and add(x, x)."""
    x = Variable(np.array(2.0, dtype=np.float32), name="x")
    h = tinypytorch.exp(x + x)
    h.name = "h"
    h.retain_grad()
    y = tinypytorch.sin(h) * tinypytorch.cos(h * h)
    return y


HELD = []  # variables a case keeps alive beyond the call, as a user's own variable would be


def two_outputs_both_alive():
    """An output that still exists but is not drawn from is drawn anyway (its function's arrow to it)."""
    x = Variable(np.array([1.0, 2.0]), name="x")
    a, b = TwoOutputs()(x)
    b.name = "kept"
    HELD.append(b)
    return a


def names_to_escape():
    """A quote and a backslash in a name are escaped; a newline stays as it is (DOT allows it in a string)."""
    x = Variable(np.array(1.0), name='say "hi"')
    y = x * Variable(np.array(2.0), name="back\\slash", requires_grad=False)
    y.name = "two\nlines"
    return y


def saved_by_a_hook():
    """Tensors packed by a saved-tensors hook are drawn as such, not with their bytes."""
    x = Variable(np.array([1.0, 2.0]), name="x")
    with tinypytorch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        return tinypytorch.exp(x) * x


def several_outputs():
    """A list of outputs sharing one subgraph: both are drawn as outputs."""
    x = Variable(np.ones((2, 3)), name="x")
    s = tinypytorch.tanh(x)
    return [tinypytorch.sum(s * s), (s + 1).reshape(3, 2)]


def saved_after_backward():
    """The graph after a backward pass: its saved tensors are freed."""
    x = Variable(np.arange(4.0), name="x")
    y = (tinypytorch.exp(x) * x).sum()
    y.backward()
    return y


CASES = {
    "constants": (constants, {}),
    "constants_verbose": (constants, {"verbose": True}),
    "two_outputs": (two_outputs, {}),
    "two_outputs_verbose": (two_outputs, {"verbose": True}),
    "two_outputs_both_alive": (two_outputs_both_alive, {"verbose": True}),
    "names_to_escape": (names_to_escape, {"verbose": True}),
    "saved_by_a_hook": (saved_by_a_hook, {"show_saved": True}),
    "retained_and_named": (retained_and_named, {}),
    "retained_and_named_verbose_saved": (retained_and_named, {"verbose": True, "show_saved": True}),
    "several_outputs_saved": (several_outputs, {"show_saved": True}),
    "saved_after_backward": (saved_after_backward, {"show_saved": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dot_text_equals_the_golden_file(case):
    build, options = CASES[case]
    assert get_dot_graph(build(), **options) == (GOLDEN / f"dot_graph_{case}.dot").read_text()
