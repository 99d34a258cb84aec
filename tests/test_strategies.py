"""The tests' own rules for drawing inputs: every float strategy goes through reference.floats, which draws no
subnormals unless a test asks for them, and the default hypothesis profile draws the same examples everywhere; and
for comparing: assert_close_to_torch holds infinities and NaN to their places."""
import pathlib
import re

import numpy as np
import pytest
from hypothesis import given, settings

from reference import assert_close_to_torch, floats

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


@pytest.mark.parametrize("actual, expected", [
    ([2.0, np.inf], [1.0, np.inf]), ([np.inf], [-np.inf]), ([np.inf, 1.0], [1.0, np.inf]), ([5.0], [np.inf]),
    ([np.nan, 1.0], [1.0, np.nan]), ([1.0, 5.0], [1.0, np.nan]), ([np.inf], [np.nan]),
], ids=["finite off beside an inf", "inf's sign", "inf's place", "finite for inf", "NaN's place", "finite for NaN",
        "inf for NaN"])
def test_assert_close_to_torch_fails_where_infinities_or_nan_differ(actual, expected):
    """An infinity in the expected values must not make the tolerance infinite."""
    with pytest.raises(AssertionError):
        assert_close_to_torch(np.array(actual), np.array(expected))


def test_assert_close_to_torch_passes_the_same_infinities_and_nan():
    assert_close_to_torch(np.array([np.inf, -np.inf, np.nan, 1.0 + 1e-13]), np.array([np.inf, -np.inf, np.nan, 1.0]))
