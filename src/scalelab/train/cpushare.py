"""Did this rank get a core whenever it wanted one? The kernel's per-thread scheduler figures say.

Linux keeps, for every thread, the time it ran on a core and the time it was ready to run but waited for one
(/proc/self/task/*/schedstat, nanoseconds). A rank waiting for the network sleeps and counts in neither, so
on-core / (on-core + waiting) measures contention, not communication: other work on the rank's cores (another
job, a login node's users, a compile, ranks that share cores) lowers it; a rank blocked in an all-reduce does not.
CPU time against wall time could not tell those apart. Read where the kernel exposes it, else None.
"""

from __future__ import annotations

import os
from typing import Optional

TASKS = "/proc/self/task"
QUIET = 0.9  # below this share, the report names contention before any other cause of slower compute


def sample() -> Optional[tuple[float, float]]:
    """(seconds on a core, seconds ready but waiting), summed over this process's threads; None if unreadable."""
    try:
        tids = os.listdir(TASKS)
    except OSError:
        return None
    on = waiting = 0
    for tid in tids:
        try:
            with open(f"{TASKS}/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            on, waiting = on + int(fields[0]), waiting + int(fields[1])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return (on / 1e9, waiting / 1e9) if on else None


def had_cpu(first, last) -> Optional[float]:
    """The share of the time between two samples that the threads were ready to run and did run (0-1)."""
    if not first or not last:
        return None
    on, waiting = last[0] - first[0], last[1] - first[1]
    return on / (on + waiting) if on > 0 and waiting >= 0 else None


def contended(shares) -> Optional[str]:
    """The words for the most starved rank, when one had its cores less than QUIET of its ready time:
    "rank 1 had a core 48 % of the time it was ready to run: other work shared its cores"; else None."""
    known = [(s, rank) for rank, s in enumerate(shares or []) if isinstance(s, (int, float))]
    if not known or min(known)[0] >= QUIET:
        return None
    share, rank = min(known)
    return f"rank {rank} had a core {share * 100:.0f} % of the time it was ready to run: other work shared its cores"
