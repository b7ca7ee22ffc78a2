"""Is this value a number? The tests the package makes of a value read from a file, a frame cell or a log, in one
place, each named by what it lets through: Python counts a bool as an int, NaN is a float, and a string may spell
a number. Torch-free and import-free, so every stage reads it (results.py, the report, the benchmark's log reader).
"""

import math


def finite_real(x) -> bool:
    """A finite int or float, never a bool (True is an int to Python): a value a person wrote, such as a
    reference file's threshold, where `true` is a mistake, not a 1."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def finite(x) -> bool:
    """A finite int or float, a bool included (it is an int): a frame's cell, whose NaN or inf means not
    measured. None, a string, NaN and inf are not."""
    return isinstance(x, (int, float)) and math.isfinite(x)


def known(x) -> bool:
    """Anything but None or a float NaN (pandas' two ways to say "not measured"); inf and strings pass."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def float_or_none(value):
    """value as a float (a number, a numeric string, a bool), else None: also for NaN; inf stays inf."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def spells_float(text: str) -> bool:
    """Whether float() reads this text ("1.5", "1e3", " 2 ", "nan", "inf" do; "N/A" does not)."""
    try:
        float(text)
        return True
    except ValueError:
        return False
