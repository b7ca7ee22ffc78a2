"""A Python-side deadline for backends whose errors never reach Python: leave a record before the watchdog.

Under gloo a dead or silent peer makes the collective raise in Python after `--timeout`, and the run records
the failure (failure.py). Under NCCL it does not: collectives are queued on the GPU, and the survivors of a dead
peer block in the next device sync (`.item()`, `torch.cuda.synchronize`) until NCCL's watchdog thread, `--timeout`
after the collective was queued, aborts the process (SIGABRT): no partial result, no one-line error.

`StallDeadline` is a thread that watches for progress (the step clock's count of ended batches: the loop does
nothing extra for it). When none came for `seconds` (0.9 x --timeout: every collective of the stalled step was
queued after the last progress, so this fires before the watchdog does), it calls the run's `on_stall` with one
line. That works while the main thread
is blocked, because torch releases the GIL in every sync and collective. What is and is not guaranteed is
written up in docs/08.

The same thread watches for SIGTERM (srun --kill-on-bad-exit sends it to the survivors when a rank fails, then
SIGKILL after SLURM's KillWait; scancel and the time limit likewise). The main thread's handler notes it and the
loop stops at the next step the ranks agree on (signals.py), but a main thread blocked in a device sync runs no
handler: if no progress follows the signal for `sigterm_grace` seconds, the thread records the run itself
(`on_stall(line, "SIGTERM")`), well inside KillWait. Armed for every run of several ranks, on any backend.

With --compile the first batch of a process also compiles the model (the forward graph, then the backward one
at its first call): minutes for the xl GPT, more than the stall deadline's 162 s (NCCL_FRACTION of the default
--timeout, 180 s). That batch gets
COMPILE_ALLOWANCE_S on top. The rank is compiling, in no collective, for nearly all of it; the price is that a
peer that dies during that first batch is recorded up to COMPILE_ALLOWANCE_S later, or, if the watchdog's
--timeout runs out first, not recorded at all (raise --timeout with --compile, docs/08).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

NCCL_FRACTION = 0.9  # of --timeout: the deadline fires this long after the last progress, before the watchdog
SIGTERM_GRACE_S = (1.0, 10.0)  # after SIGTERM, no progress for 3 median steps, within these bounds: blocked
COMPILE_ALLOWANCE_S = 600.0  # more for the first batch under --compile: torch.compile's first compile of xl


def stall_seconds(timeout_s: float, backend: str | None, blocks_like_nccl: bool = False) -> float | None:
    """The deadline for this run, or None where errors reach Python (gloo, one process) and failure.py records
    them. `blocks_like_nccl`: a test fault that blocks the main thread the way a dead NCCL peer does."""
    if backend == "nccl" or blocks_like_nccl:
        return NCCL_FRACTION * timeout_s
    return None


def sigterm_grace(step_s: float) -> float:
    """Seconds without progress after a SIGTERM that mean the main thread is blocked: 3 of its steps (a healthy
    rank ends one or more steps before the next sync point), within SIGTERM_GRACE_S (SLURM's KillWait is 30 s by
    default: the record must be on disk before the SIGKILL)."""
    low, high = SIGTERM_GRACE_S
    return min(high, max(low, 3 * step_s))


def first_batch_seconds(seconds: float | None, compile: bool) -> float | None:
    """The deadline before this process's first batch has ended: `seconds`, plus COMPILE_ALLOWANCE_S with
    --compile (that batch compiles the model)."""
    if seconds is None or not compile:
        return seconds
    return seconds + COMPILE_ALLOWANCE_S


class StallDeadline:
    """Calls `on_stall(line)` once, from its own thread, when `progress()` did not change for `seconds`, or
    `on_stall(line, "SIGTERM")` when it did not change for `grace()` seconds after a SIGTERM (with `signals`).

    `progress()` gives (batches ended, optimizer steps ended, ...): any change is progress; the line names the step.

    Armed before the ranks first meet (the process group's rendezvous, NCCL's bootstrap, DDP's first broadcast)
    until the record is on disk and the ranks have met a last time: the parts where a peer can block this rank.
    Before the first batch the deadline is `first_seconds`. `held()` suspends it around long work that is no step
    (a checkpoint saved or loaded)."""

    def __init__(self, seconds: float | None, on_stall: Callable[..., None], progress: Callable[[], tuple],
                 poll_s: float = 0.2, signals=None, grace: Callable[[], float] = lambda: SIGTERM_GRACE_S[0],
                 on_idle: Callable[[], None] | None = None, first_seconds: float | None = None):
        self.seconds, self.on_stall, self.progress, self.poll_s = seconds, on_stall, progress, poll_s
        # on_idle: called once when progress has stopped for grace() seconds, and once more when it resumes (the
        # rank posts how far it got: rank 0, blocked, names the rank furthest behind; failure.record_stall)
        self.on_idle = on_idle
        self.signals, self.grace = signals, grace  # signals: a RunSignals (its wait() sees SIGTERM off the main thread)
        self.first_seconds = first_seconds or seconds  # until the first batch has ended (first_batch_seconds)
        self.fired = False
        self.moved_at = time.time()  # when this rank last made progress, as the ranks' posts date theirs (peers)
        self._held = False
        self._stop = threading.Event()
        self._thread = None

    def arm(self):
        if (self.seconds is None and self.signals is None) or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="scalelab-stall-deadline", daemon=True)
        self._thread.start()

    def disarm(self):
        """The run ended (or is recording its failure on the main thread): nothing left to watch."""
        self._stop.set()

    @contextlib.contextmanager
    def held(self):
        """No stall while the block runs; the wait starts afresh after it."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

    def _wait(self) -> bool:
        """One poll: True when a SIGTERM arrived during it."""
        if self.signals is None:
            self._stop.wait(self.poll_s)
            return False
        return "SIGTERM" in self.signals.wait(self.poll_s)

    def _watch(self):
        seen, last, term_at, idle = self.progress(), time.monotonic(), None, False
        while not self._stop.is_set():
            got_term = self._wait()
            if self._stop.is_set():
                return
            now, count = time.monotonic(), self.progress()
            if got_term and term_at is None:
                term_at = now
            if self.on_idle and (count != seen) == idle and (idle or now - last >= self.grace()):
                idle = not idle  # stopped for grace(), or moving again after that: say where it is now
                self.on_idle()
            if count != seen or self._held:
                if count != seen:
                    self.moved_at = time.time()
                seen, last = count, now
                continue
            if term_at is not None and now - max(last, term_at) >= self.grace():
                self.fired = True
                where = f"during step {count[1] + 1}" if count[1] else "before the first step ended"
                self.on_stall(f"received SIGTERM while blocked {where}: no progress for {now - term_at:.1f} s after "
                              "it (srun --kill-on-bad-exit after a rank failed, scancel or the time limit)", "SIGTERM")
                return
            first = count[0] == 0 and self.first_seconds != self.seconds
            limit = self.first_seconds if first else self.seconds
            if limit is not None and now - last >= limit:
                self.fired = True
                where = f"during step {count[1] + 1}" if count[1] else "before the first step ended"
                allowance = f" + {self.first_seconds - self.seconds:g} s for --compile's first batch" if first else ""
                self.on_stall(f"no progress for {limit:g} s {where}: blocked in a collective or device "
                              f"sync (stall deadline = {NCCL_FRACTION:g} x --timeout{allowance})")
                return
