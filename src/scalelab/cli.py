"""What every entry script shares: one-line errors and a clean exit code.

Users at a workshop must see `train.py: error: <what and how to fix>` and exit 2,
never a usage dump or a traceback wall.
"""

import argparse
import logging
import os
import sys

from scalelab.errors import RunFailed, UsageError


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line instead of the usage block."""

    def error(self, message):
        raise UsageError(message)


def run_main(prog: str, main, argv=None) -> int:
    """Run an entry point; turn UsageError into one stderr line and exit code 2."""
    try:
        return main(argv) or 0
    except UsageError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "invalid input"
        print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
        return 2
    except RunFailed as exc:  # one line here; the traceback is in the run's error.log
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return 130


def human_count(n) -> str:
    """3323392 -> '3.32M': parameter counts a person can read."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(int(n))


def fast_exit(code: int):
    """Exit without Python's module teardown (~1 s with torch and Lightning loaded).

    Only after everything that matters is on disk: result files are fsynced before this, and here the
    standard streams and logging are flushed. Keeps a run's recorded whole-run time honest against the
    wall time a user measures from outside.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# argparse value types: they raise ArgumentTypeError so the message names the flag.
def number_type(convert, ok, expected: str):
    """An argparse `type=` that converts with `convert` and accepts values where `ok(value)` holds."""

    def parse(text):
        try:
            value = convert(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_finite = float("inf").__gt__
positive_int = number_type(int, lambda v: v > 0, "a positive integer")
nonneg_int = number_type(int, lambda v: v >= 0, "an integer >= 0")
positive_float = number_type(float, lambda v: 0 < v and _finite(v), "a positive number")
nonneg_float = number_type(float, lambda v: 0 <= v and _finite(v), "a number >= 0")
unit_fraction = number_type(float, lambda v: 0 <= v < 1, "a number in [0, 1)")  # a probability such as dropout
