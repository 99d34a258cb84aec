"""What the tests of steps 36 (in-place operations) and 37 (through views) share: the step's scenario table run
in both frameworks, and random sequences of in-place operations checked against torch."""
import numpy as np
import torch
from hypothesis import strategies as st

from tinypytorch import Variable, cuda
from reference import floats

OPS = ["add_", "sub_", "mul_", "div_"]
OPERANDS = ["w", "number", "array"]  # what a random operation takes: another leaf, a float, a NumPy scalar


def ours_on(step, xp):
    """The step's `Ours`, with leaves on the xp fixture's backend (NumPy, the strict stand-in for CuPy, CuPy)."""
    class OnBackend(step.Ours):
        leaf = staticmethod(lambda values, requires_grad=True: Variable(xp.asarray(np.array(values)),
                                                                        requires_grad=requires_grad))
        grad = staticmethod(lambda t: cuda.as_numpy(t.grad.data))

    return OnBackend


def assert_scenario_as_in_torch(step, scenario, xp):
    """The scenario raises RuntimeError where torch raises, and otherwise gives torch's gradients."""
    ours, theirs = step.outcome(scenario, ours_on(step, xp)), step.outcome(scenario, step.Torch)
    assert isinstance(ours, RuntimeError) == isinstance(theirs, RuntimeError), (ours, theirs)
    if not isinstance(ours, RuntimeError):
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o, t, rtol=1e-14, atol=0)


def assert_table_has_cases_of_both_kinds(step):
    """At least three scenarios where torch raises and three where it does not."""
    kinds = [isinstance(step.outcome(s, step.Torch), RuntimeError) for s in step.SCENARIOS]
    assert 3 <= sum(kinds) <= len(kinds) - 3


leaf_values = st.lists(floats(0.5, 2.0), min_size=4, max_size=4)


def operand(name, w):
    return {"w": w, "number": 1.25, "array": np.float64(0.5)}[name]


def assert_in_place_sequence_as_in_torch(values, change):
    """b = 2a from a leaf a of `values`, change(b, w) in place (w another leaf), then (b * b).sum().backward(), in
    both frameworks: b, a.grad and w.grad (None where w was not used) equal torch's."""
    def run(leaf, as_numpy):
        a, w = leaf(values), leaf([1.5, 0.75, 1.25, 0.5])
        b = a * 2.0
        change(b, w)
        (b * b).sum().backward()
        return as_numpy(b), as_numpy(a.grad), as_numpy(w.grad) if w.grad is not None else None

    ours = run(lambda v: Variable(np.array(v)), lambda t: np.array(t.data))
    theirs = run(lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True), lambda t: t.detach().numpy())
    for o, t in zip(ours, theirs):
        assert (o is None) == (t is None)
        if o is not None:
            np.testing.assert_allclose(o, t, rtol=1e-12, atol=1e-12)
