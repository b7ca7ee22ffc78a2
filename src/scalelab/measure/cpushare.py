"""Did this rank get a core whenever it wanted one? The kernel's per-thread scheduler figures say.

Linux keeps, for every thread, the time it ran on a core and the time it was ready to run but waited for one
(/proc/self/task/*/schedstat, nanoseconds). The step clock reads them around the compute of each no-sync probe
step (train/clock.py), where the rank computes alone: no all-reduce runs beside backward, so its own
communication threads compete for nothing, and a rank waiting for a peer sleeps (counted in neither figure).
There, on-core / (on-core + waiting) below 1 means other work on the rank's cores: another job, a login node's
users, a compile, ranks that share cores. CPU time against wall time could not tell that from waiting for the
network, and a whole step's figures would count the rank's own gloo threads running beside backward. Only the
threads that computed in the window count (computing()): a helper that woke for microseconds waited for the core
the compute thread held, which is the rank's own business.
"""

from __future__ import annotations

import os
from typing import Optional

TASKS = "/proc/self/task"
QUIET = 0.9  # below this share, the report names contention before any other cause of slower compute


class Threads:
    """This process's threads' scheduler files, opened once and read with pread (0.5 us a thread, cheap enough
    inside a step); a thread that ended reads None, and read() is empty where the kernel does not expose them."""

    def __init__(self):
        self.fds = None

    def read(self) -> list:
        """Each open thread's (seconds on a core, seconds ready but waiting), None for one that ended."""
        if self.fds is None:
            self.fds = self._open()
        out = []
        for fd in self.fds:
            try:
                fields = os.pread(fd, 128, 0).split()
                out.append((int(fields[0]) / 1e9, int(fields[1]) / 1e9))
            except (OSError, ValueError, IndexError):
                out.append(None)
        return out

    @staticmethod
    def _open() -> list:
        try:
            tids = os.listdir(TASKS)
        except OSError:
            return []
        fds = []
        for tid in tids:
            try:
                fds.append(os.open(f"{TASKS}/{tid}/schedstat", os.O_RDONLY))
            except OSError:
                continue
        return fds

    def close(self) -> None:
        for fd in self.fds or []:
            os.close(fd)
        self.fds = []


COMPUTING = 0.1  # a thread computed in a window when it ran at least this share of the busiest thread's time


def computing(before: list, after: list) -> Optional[list]:
    """[on-core s, waiting s] over a window (two Threads.read()s), summed over the threads that computed in it:
    those that ran at least COMPUTING of the busiest one's time (the compute thread and its intra-op pool). A helper
    that woke for microseconds (the device sampler, the rank watch) waits for the core the compute thread holds:
    its waiting is the rank's own, not other work's, and would flag a quiet rank whose steps last a millisecond."""
    spans = [(b2[0] - b1[0], b2[1] - b1[1]) for b1, b2 in zip(before, after) if b1 and b2]
    busiest = max((on for on, _ in spans), default=0.0)
    if busiest <= 0:
        return None
    kept = [(on, waiting) for on, waiting in spans if on >= COMPUTING * busiest]
    return [round(sum(on for on, _ in kept), 6), round(sum(waiting for _, waiting in kept), 6)]


def had_cpu(spans) -> Optional[float]:
    """The share of the ready-to-run time the threads ran, over [on-core s, waiting s] spans (0-1)."""
    on = sum(s[0] for s in spans or [])
    waiting = sum(s[1] for s in spans or [])
    return on / (on + waiting) if on > 0 and waiting >= 0 else None


def contended(shares) -> Optional[str]:
    """The words for the most starved rank, when one had its cores less than QUIET of its ready time:
    "rank 1 had a core 48 % of the time it was ready to run: other work shared its cores"; else None."""
    known = [(s, rank) for rank, s in enumerate(shares or []) if isinstance(s, (int, float))]
    if not known or min(known)[0] >= QUIET:
        return None
    share, rank = min(known)
    return f"rank {rank} had a core {share * 100:.0f} % of the time it was ready to run: other work shared its cores"


def span(cores: list) -> str:
    """A rank's cores in words, as taskset and SLURM write them: [0, 1, 2, 5] -> "0-2,5"."""
    out, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)
