"""scalelab/numeric.py: each test of a value, at the edges where they differ (bool, NaN, inf, strings, None)."""

import math

import numpy as np
import pytest

from scalelab import numeric

EDGES = [1, 2.5, -3, 0, True, False, math.nan, math.inf, -math.inf, None, "1.5", "x", np.float64(2.0), np.nan]


@pytest.mark.parametrize("x, expected", list(zip(EDGES, [True, True, True, True, False, False, False, False, False,
                                                         False, False, False, True, False])))
def test_finite_real_takes_finite_ints_and_floats_but_no_bool(x, expected):
    assert numeric.finite_real(x) is expected


@pytest.mark.parametrize("x, expected", list(zip(EDGES, [True, True, True, True, True, True, False, False, False,
                                                         False, False, False, True, False])))
def test_finite_takes_a_bool_as_the_int_it_is(x, expected):
    assert numeric.finite(x) is expected


@pytest.mark.parametrize("x, expected", list(zip(EDGES, [True, True, True, True, True, True, False, True, True,
                                                         False, True, True, True, False])))
def test_known_is_anything_but_none_or_nan(x, expected):
    assert numeric.known(x) is expected


@pytest.mark.parametrize("x, expected", [(1, 1.0), (2.5, 2.5), (True, 1.0), ("1.5", 1.5), (" 2 ", 2.0),
                                         (math.inf, math.inf), ("inf", math.inf), (math.nan, None), ("nan", None),
                                         (None, None), ("x", None), ([1], None), (np.float64(3.0), 3.0)])
def test_float_or_none(x, expected):
    got = numeric.float_or_none(x)
    assert got == expected and (got is None) == (expected is None)
    assert got is None or type(got) is float


@pytest.mark.parametrize("text, expected", [("1.5", True), ("1e3", True), (" 2 ", True), ("nan", True),
                                            ("inf", True), ("N/A", False), ("", False), ("1,5", False)])
def test_spells_float(text, expected):
    assert numeric.spells_float(text) is expected


def test_spells_float_refuses_a_non_string_as_float_does():
    with pytest.raises(TypeError):
        numeric.spells_float(None)
