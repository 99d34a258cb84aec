"""The tests' own rules for drawing inputs: every float strategy goes through reference.floats, which draws no
subnormals unless a test asks for them, and the default hypothesis profile draws the same examples everywhere."""
import pathlib
import re

import numpy as np
from hypothesis import given, settings

from reference import floats

TESTS = pathlib.Path(__file__).resolve().parent


def test_no_test_draws_floats_but_through_reference_floats():
    bare = [f"{path.name}:{number}" for path in sorted(TESTS.glob("*.py")) if path.name != "reference.py"
            for number, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"\bst\.floats\(|strategies\.floats\(|from_dtype\(", line)]
    assert bare == []


@given(floats(-1.0, 1.0))
def test_floats_draws_zero_or_normal_numbers_only(value):
    assert value == 0 or abs(value) >= np.finfo(np.float64).smallest_normal


def test_a_test_that_asks_for_subnormals_gets_them_sometimes():
    drawn = []

    @given(floats(-1e-310, 1e-310, allow_subnormal=True))
    def draw(value):
        drawn.append(value)

    draw()
    assert any(0 < abs(v) < np.finfo(np.float64).smallest_normal for v in drawn)


def test_the_default_profile_is_derandomized_and_the_fuzz_profile_is_not():
    assert settings.get_profile("default").derandomize and not settings.get_profile("fuzz").derandomize
