"""The two ways scalelab stops on purpose (and the one a file it reads is skipped); every layer raises them, the
entry points print them in one line.

And how any other exception becomes that one line (error_line), for a run's record and its last stderr line.
"""

import re


class UsageError(Exception):
    """Bad input the user can fix: printed as one line, exit code 2."""


class RunFailed(Exception):
    """A run that started and did not complete (its partial result is on disk): one line, exit code 1."""


class ResultError(Exception):
    """A file that is not a usable scalelab result; the message says why, in one line (the file is skipped)."""


def error_line(exc: BaseException) -> str:
    """An exception as one line, as a person would read it: its type and its innermost message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    name, text = type(exc).__name__, lines[0] if lines else ""
    # torch wraps an error in a gradient hook as "Got the following error when running the callback: X: ..."
    # (twice), and gloo starts with its source position: keep the innermost error, as a person would read it.
    while True:
        inner = re.match(r"Got the following error when running the callback: (?:(\w+): )?(.*)", text)
        if not inner:
            break
        name, text = inner.group(1) or name, inner.group(2)
    text = re.sub(r"^\[[^\]]*:\d+\]\s*", "", text)
    return f"{name}: {text}"[:300]
