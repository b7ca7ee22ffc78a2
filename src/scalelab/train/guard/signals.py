"""Signals that would end a run without a record, turned into an end every rank agrees on.

A handler never does more than note the signal: a collective or a checkpoint started inside a handler runs between
any two bytecodes of whatever the rank was doing (mid optimizer update, between two gradient buckets), at a
different point on each rank. So:

* SIGTERM (job time limit, scancel) and SIGUSR1 during training set a flag. At its sync points (every SYNC_EVERY
  steps, or every few seconds when steps are long: loop.py) the loop calls `agree`: one all-reduce of the flags
  (the same step on every rank, as they run the same steps), and if any rank got one, all of them stop after that
  step and the run records why (status "timeout"). The same all-reduce settles when the next sync point is.
* SIGUSR1 in a SLURM batch job is SLURM's warning before the time limit (`#SBATCH --signal=SIGUSR1@90`): at the
  agreed step every rank saves the checkpoint, rank 0 asks SLURM to requeue the job (run.py), the attempt ends
  "preempted", and the requeued job resumes from the checkpoint. Anywhere else SIGUSR1 would kill the process
  silently (its default action), so it stops the run like SIGTERM.
* Before the loop (start-up) a SIGTERM ends the process at once, with a record (`Terminated`); a SIGUSR1 is noted
  and acted on at the loop's first sync point (SLURM sends it 90 s ahead). After the loop (the final gather and
  the record) a signal is noted and the run finishes what it was writing.
* A rank that rank 0 started dies with rank 0 (launch/local.py: PR_SET_PDEATHSIG): no orphans.

Handlers are installed only where nobody else handles the signal: submitit, for one, handles its own.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from typing import Optional

from scalelab.perfmodel.network import human_bytes

SIGNALS = ("SIGTERM", "SIGUSR1")


class Terminated(BaseException):
    """SIGTERM before the training loop started: the run ends at once (status "timeout"). A BaseException, as
    KeyboardInterrupt: no `except Exception` on the way (a rendezvous retry, a best-effort post) swallows it."""

    def __init__(self, name: str):
        super().__init__(f"received {name} before the first step")
        self.name = name


class Stop:
    """Why every rank agreed to end the loop early: what to record, and whether the job is to be requeued."""

    def __init__(self, reason: str, steps: int, refused: Optional[str] = None):
        self.reason, self.steps = reason, steps  # reason: "requeue", "time limit", "SIGUSR1" or "SIGTERM"
        self.refused = refused  # why the job was not requeued (requeue.refusal, requeue.ask_slurm), if it was not
        self.saved = None  # (bytes, seconds) of the requeue checkpoint (requeue.save)
        self.cause = None  # why SLURM sent SIGTERM, where it says (requeue.end_cause)

    @property
    def requeue(self) -> bool:
        return self.reason == "requeue"

    def status(self) -> str:
        return "preempted" if self.requeue and not self.refused else "timeout"

    def line(self) -> str:
        after = f"after step {self.steps}"
        size, took = self.saved or (None, None)
        saved = "saved a checkpoint" + (f" ({human_bytes(size)} in {took:.1f} s)" if size is not None else "")
        if self.requeue and self.refused:
            return f"received SLURM's requeue signal and {saved} {after}, but {self.refused}"
        if self.requeue:
            return (f"received SLURM's requeue signal (time limit near): {saved} {after} and asked SLURM to "
                    "requeue the job, which stopped this attempt")
        if self.reason == "time limit":
            return (f"received SLURM's warning that the job's time limit is near (SIGUSR1) and stopped {after}; not "
                    f"requeued: {self.refused}")
        if self.reason == "SIGUSR1":
            return f"received SIGUSR1 (no SLURM requeue here: handled like SIGTERM) and stopped {after}"
        if self.cause:
            return f"received SIGTERM: {self.cause}; stopped {after}"
        return f"received SIGTERM (job time limit, preemption or scancel) and stopped {after}"


class RunSignals:
    """What this rank was sent, and what a signal means at this point of the run."""

    def __init__(self, requeue_on_sigusr1: bool = False, no_requeue: Optional[str] = None):
        self.requeue_on_sigusr1 = requeue_on_sigusr1  # a SLURM batch job: SIGUSR1 is the time limit's warning
        self.no_requeue = no_requeue  # why that warning ends the run at the limit instead (requeue.refusal)
        self.received = dict.fromkeys(SIGNALS, False)
        self.loop_started = False  # before it, SIGTERM ends the run at once (there is no step to end after)
        self.ending = False  # the run is recording its end: signals are noted, nothing more
        self.every = 1  # steps to the next sync point, as the ranks last agreed
        self._wakeup = None  # read end of the pipe CPython's C-level handler writes each signal's number to

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for name in SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None and signal.getsignal(signum) in (signal.SIG_DFL, None, _note_early):
                signal.signal(signum, self._handler)
        for name in _EARLY:
            self.received[name] = True
        self._watch_off_the_main_thread()

    def _watch_off_the_main_thread(self) -> None:
        """A Python handler runs on the main thread between two bytecodes: a main thread blocked in a C call (an
        NCCL survivor's device sync) never runs it. CPython's C-level handler, though, runs at once in whatever
        thread the kernel picked and writes the signal's number to the wakeup fd: the stall deadline's thread
        (deadline.py) reads it from there. Left alone if something else owns the wakeup fd already."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            old = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            old = None
        if old is None or old != -1:
            if old is not None:
                signal.set_wakeup_fd(old)
            os.close(read)
            os.close(write)
            return
        self._wakeup = read

    def wait(self, timeout: float) -> list:
        """Names of the signals that arrived (any thread's view), waiting up to `timeout` for one. Without a
        wakeup fd: what the main thread's handler noted, after the wait."""
        if self._wakeup is None:
            threading.Event().wait(timeout)
            return [name for name, got in self.received.items() if got]
        ready, _, _ = select.select([self._wakeup], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self._wakeup, 64)
        except BlockingIOError:
            return []
        names = []
        for signum in data:
            try:
                names.append(signal.Signals(signum).name)
            except ValueError:
                pass
        return names

    def _handler(self, signum, frame):
        name = signal.Signals(signum).name
        self.received[name] = True
        if name == "SIGTERM" and not self.loop_started and not self.ending:
            raise Terminated(name)

    def agree(self, device, world_size: int, steps: int, every: int) -> Optional[Stop]:
        """At a step every rank reaches: stop if any rank got a signal. One all-reduce (MAX) of three numbers: the
        two flags, and minus the steps this rank proposes to the next sync point (so the fewest wins)."""
        flags = [float(self.received["SIGTERM"]), float(self.received["SIGUSR1"]), -float(every)]
        if world_size > 1:
            import torch
            import torch.distributed as dist

            agreed = torch.tensor(flags, device=device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            flags = agreed.tolist()
        self.every = max(1, int(-flags[2]))
        if not any(flags[:2]):
            return None
        self.ending = True
        if flags[1] and self.requeue_on_sigusr1:
            return Stop("time limit", steps, self.no_requeue) if self.no_requeue else Stop("requeue", steps)
        if flags[1]:
            return Stop("SIGUSR1", steps)
        return Stop("SIGTERM", steps)


_EARLY = []  # signals noted before RunSignals.install


def note_early() -> None:
    """The first thing train.py does: from here SIGUSR1 is noted, not fatal. SLURM sends it to every task of the
    step when the time limit is closer than the job's --signal lead, which can be before torch is imported (a
    dry run's --time=1: the task died "User defined signal 1", FAILED 10:0, no record). RunSignals.install takes
    over and acts on it at the loop's first sync point."""
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGUSR1, _note_early)


def _note_early(signum, frame):
    _EARLY.append(signal.Signals(signum).name)
