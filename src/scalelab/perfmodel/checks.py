"""Argument checks shared by the model's functions: a bad input is a ValueError that names it."""

import math
import numbers


def positive(**values):
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0 < v < math.inf):
            raise ValueError(f"{name} must be a positive number, got {v!r}")


def nonneg(**values):
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0 <= v < math.inf):
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
