"""A Python-side deadline for backends whose errors never reach Python: leave a record before the watchdog.

Under gloo a dead or silent peer makes the collective raise in Python after `--timeout`, and the run records
the failure (failure.py). Under NCCL it does not: collectives are queued on the GPU, and the survivors of a dead
peer block in the next device sync (`.item()`, `torch.cuda.synchronize`) until NCCL's watchdog thread, `--timeout`
after the collective was queued, aborts the process (SIGABRT): no partial result, no one-line error.

`StallDeadline` is a thread that watches for progress (a training or validation step ended). When none came for
`seconds` (0.9 x --timeout: every collective of the stalled step was queued after the last progress, so this
fires before the watchdog does), it calls the run's `on_stall` with one line. That works while the main thread
is blocked, because torch releases the GIL in every sync and collective. What is and is not guaranteed is
written up in docs/08.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import lightning.pytorch as pl

NCCL_FRACTION = 0.9  # of --timeout: the deadline fires this long after the last progress, before the watchdog


def stall_seconds(timeout_s: float, backend: str | None, blocks_like_nccl: bool = False) -> float | None:
    """The deadline for this run, or None where errors reach Python (gloo, one process) and failure.py records
    them. `blocks_like_nccl`: a test fault that blocks the main thread the way a dead NCCL peer does."""
    if backend == "nccl" or blocks_like_nccl:
        return NCCL_FRACTION * timeout_s
    return None


class StallDeadline(pl.Callback):
    """Calls `on_stall(line)` once, from its own thread, when no step ended for `seconds`."""

    def __init__(self, seconds: float | None, on_stall: Callable[[str], None], poll_s: float = 0.2):
        self.seconds, self.on_stall, self.poll_s = seconds, on_stall, poll_s
        self.last = None  # time.monotonic() of the last progress; None: not armed
        self.steps = 0
        self.fired = False
        self._stop = threading.Event()
        self._thread = None

    def arm(self):
        if self.seconds is None or self._thread is not None:
            return
        self.last = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="scalelab-stall-deadline", daemon=True)
        self._thread.start()

    def progress(self):
        self.last = time.monotonic()

    def disarm(self):
        """The run ended (or is recording its failure on the main thread): nothing left to watch."""
        self._stop.set()

    def _watch(self):
        while not self._stop.wait(self.poll_s):
            idle = time.monotonic() - self.last
            if idle >= self.seconds:
                self.fired = True
                where = f"during step {self.steps + 1}" if self.steps else "before the first step ended"
                self.on_stall(f"no progress for {self.seconds:g} s {where}: blocked in a collective or device "
                              f"sync (stall deadline = {NCCL_FRACTION:g} x --timeout)")
                return

    # --- Lightning hooks: armed for training and validation, the parts with collectives --------------------
    def on_train_start(self, trainer, pl_module):
        self.arm()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps += 1
        self.progress()

    def on_validation_start(self, trainer, pl_module):
        self.progress()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.progress()

    def on_train_end(self, trainer, pl_module):
        self.progress()  # the gather of every rank's timings comes next (StepTimer.on_train_end): still watched

    def on_exception(self, trainer, pl_module, exception):
        self.disarm()  # the main thread is awake and records the failure itself
