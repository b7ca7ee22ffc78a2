"""Signals that would end a run without a record, turned into an end that says why it stopped.

* SIGTERM during start-up (before Lightning installs its handler) would end the process at once, with nothing
  written: it raises Lightning's SIGTERMException instead, recorded as "timeout".
* SIGTERM during training: Lightning's handler stops after the current step; ours only notes that it arrived
  (Lightning's own flag is set only at its end), which tells failure.classify why the ranks fell out of step.
* SIGUSR1 under SLURM with Lightning's auto-requeue: Lightning's handler checkpoints and calls
  `scontrol requeue`. Run inside the signal handler it would save the model between any two bytecodes (in the
  middle of an optimizer update) and, with several ranks, enter the checkpoint's barrier at a different point on
  each rank. So the signal only marks it due; every REQUEUE_CHECK_EVERY batches the ranks agree (an all-reduce of
  the mark), all run Lightning's handler at that same batch boundary and end the attempt there (`requeue_if_due`),
  deaf to the SIGTERM the requeue brings. failure.classify makes the end "preempted". Anywhere else SIGUSR1
  would kill the process silently (its default action), so it is handled like SIGTERM.
* A rank that Lightning launched from rank 0 dies with rank 0 (PR_SET_PDEATHSIG): no orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

from lightning.pytorch.utilities.exceptions import SIGTERMException

PARENT_ENV = "_SCALELAB_LAUNCHER_PID"  # no SCALELAB_ prefix: results never record it
REQUEUE_CHECK_EVERY = 10  # batches between the ranks' agreement on a pending requeue (one tiny all-reduce)


class RunSignals:
    """What this rank was sent, and what a signal means at this point of the run."""

    def __init__(self):
        self.sigusr1: str | None = None  # "requeue" (SLURM auto-requeue fired) or "stop" (handled like SIGTERM)
        self.sigterm_seen = False  # SIGTERM arrived during training (Lightning's own flag is set only at its end)
        self.training = False  # Lightning's handlers have been installed (training started)
        self.ending = False  # the run is failing and rank 0 is recording it: the watch and SIGTERM stand back
        self.requeue = None  # Lightning's SLURM auto-requeue handler, when it is installed (run by requeue_if_due)
        self.requeue_due = False  # SIGUSR1 arrived: run it at the next agreed batch boundary

    def install_startup_handler(self) -> None:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
                signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, self._sigterm_at_startup)

    def _sigterm_at_startup(self, signum, frame):
        """Until Lightning installs its own SIGTERM handler (just before the first step), SIGTERM would end the
        process without a record (measured: exit -15 during a 2-process start-up, nothing written): raise
        Lightning's SIGTERMException instead, which the run records as status "timeout"."""
        if signal.getsignal(signal.SIGTERM) != self._sigterm_at_startup:
            return  # Lightning's handler is in charge (it calls this one too): it stops after the current step
        if self.ending:
            return  # the run is failing and being recorded (torchrun sends SIGTERM once a rank died): finish that
        if not self.training:
            raise SIGTERMException()
        # Training is over and Lightning has handed SIGTERM back: its default action, as before scalelab.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def wrap_lightning_handlers(self) -> None:
        """Lightning registers its signal handlers just before training starts; wrap them after it did."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGUSR1"):
            return
        lightning_sigterm = signal.getsignal(signal.SIGTERM)
        if callable(lightning_sigterm):
            def sigterm(signum, frame):
                self.sigterm_seen = True  # before Lightning's handler, whose broadcast may raise (see classify)
                lightning_sigterm(signum, frame)

            signal.signal(signal.SIGTERM, sigterm)
        current = signal.getsignal(signal.SIGUSR1)
        if _is_lightning_requeue(current):  # Lightning's SLURM auto-requeue handler: deferred to a batch boundary
            self.requeue = current

            def requeue(signum, frame):
                self.requeue_due = True

            signal.signal(signal.SIGUSR1, requeue)
        elif current in (signal.SIG_DFL, None):  # default action: die without a word; stop like SIGTERM
            def stop(signum, frame):
                self.sigusr1 = "stop"
                handler = signal.getsignal(signal.SIGTERM)
                if callable(handler):
                    handler(signum, frame)

            signal.signal(signal.SIGUSR1, stop)

    def requeue_if_due(self, batches: int, world_size: int, device) -> None:
        """At a batch boundary: if SIGUSR1 arrived on any rank, run Lightning's requeue handler and end this
        attempt (SIGTERMException). One rank: at the next boundary. Several: every REQUEUE_CHECK_EVERY batches
        all ranks all-reduce the mark (the same batch on every rank, as they run the same batches), so all of them
        checkpoint at the same point."""
        if self.requeue is None or (world_size == 1 and not self.requeue_due):
            return
        if world_size > 1:
            if batches % REQUEUE_CHECK_EVERY:
                return
            import torch
            import torch.distributed as dist

            flag = torch.tensor([float(self.requeue_due)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if not flag.item():
                return
        self.sigusr1, self.requeue_due = "requeue", False
        # `scontrol requeue` makes SLURM send SIGTERM at once; Lightning's SIGTERM handler broadcasts from inside
        # the signal, wherever each rank is (with 2 ranks that met a gradient all-reduce and the job hung until
        # SIGKILL, no record). So this attempt ignores that SIGTERM and ends here, at the same batch on every rank.
        self.ending = True
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._sigterm_at_startup)  # returns at once while `ending`
        self.requeue(signal.SIGUSR1, None)
        raise SIGTERMException()  # recorded "preempted" (failure.classify); the job resumes from the checkpoint

    def line(self) -> str:
        """The one-line error of a run that SIGUSR1 stopped."""
        if self.sigusr1 == "requeue":
            return ("received SLURM's requeue signal (time limit near): Lightning saved a checkpoint and asked SLURM "
                    "to requeue the job, which stopped this attempt")
        return "received SIGUSR1 (no SLURM auto-requeue here: handled like SIGTERM) and stopped after the current step"


def die_with_launcher() -> None:
    """A rank that Lightning launched from rank 0 dies with rank 0 (Linux: prctl PR_SET_PDEATHSIG = SIGKILL).

    However rank 0 ends (SIGKILL, the OOM killer, SIGTERM while it was still spawning this rank), no orphan is
    left holding a core, the terminal and the port until its own timeout. Rank 0 puts its pid in the environment
    only while Lightning spawns its ranks (set here, removed by forget_launcher), so the variable exists exactly
    in the ranks it launched: a rank that has it and whose parent is another pid is an orphan already.
    """
    if "LOCAL_RANK" not in os.environ:  # may become the launching rank 0
        os.environ[PARENT_ENV] = str(os.getpid())
        return
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is None or parent == str(os.getpid()):
        return
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if str(os.getppid()) != parent:  # rank 0 is gone already: nobody to train with
        print(f"scalelab: rank {os.environ['LOCAL_RANK']}: the rank 0 that launched it (pid {parent}) is gone; "
              "stopping", file=sys.stderr, flush=True)
        os._exit(1)


def forget_launcher() -> None:
    """Rank 0 has launched its ranks (or launches none): later child processes are not ranks."""
    os.environ.pop(PARENT_ENV, None)


def _is_lightning_requeue(handler) -> bool:
    """Lightning's SLURM auto-requeue handler (a _HandlersCompose holding _slurm_sigusr_handler_fn)."""
    return any(getattr(h, "__name__", "") == "_slurm_sigusr_handler_fn"
               for h in getattr(handler, "signal_handlers", None) or [])
