"""What a report shows while a long phase of it runs: a note of how many files it reads anew, and tqdm's bars.

A site's first report over 100,000 results lists and reads them for a minute or two (and lists them for as long
again where the filesystem's cache is cold): before these, it printed nothing until its tables.
"""

import sys

from tqdm import tqdm

PROGRESS_MIN = 2000  # files read anew past which a report says so, in a log too
BAR_DELAY_S = 2  # a phase shorter than this shows no bar


def reading(count: int):
    """What a report shows while it reads `count` files anew: where that is many (PROGRESS_MIN), a note of how many,
    and a bar on a terminal; else nothing. Its update() counts a file, close() clears the bar."""
    if count < PROGRESS_MIN:
        return _Quiet()
    print(f"benchmark.py: note: reading {count:,} result files whole: neither the folder's index nor your last "
          "report holds a reading of them this report can use", file=sys.stderr)
    return bar("reading", " files", count)


def bar(what: str, unit: str, total=None, shown: bool = True):
    """tqdm's bar on a terminal's stderr where shown, drawn once its phase has taken BAR_DELAY_S (a small folder's
    report draws none), cleared when done (a `with` block: on an interrupt too); else one that shows nothing (a log:
    no bar; tqdm's, even disabled, starts a thread of its own)."""
    return _tqdm(total=total, desc=what, unit=unit) if shown and sys.stderr.isatty() else _Quiet()


def counted(rows, what: str, unit: str):
    """rows, counted by a bar as they are taken where stderr is a terminal (as `bar` draws it; cleared at their end)."""
    return _tqdm(rows, desc=what, unit=unit) if sys.stderr.isatty() else rows


def _tqdm(*args, **kwargs):
    return tqdm(*args, **kwargs, leave=False, file=sys.stderr, mininterval=0.5, delay=BAR_DELAY_S)


class _Quiet:
    """No bar."""

    def update(self):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass
