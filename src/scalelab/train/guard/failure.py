"""When a run fails: say which rank failed and how, in one line, and leave a record (never hang doing it).

`classify` turns the exception that ended this rank into (status, one-line error):

* "failed": a rank raised or died. Rank 0 names the rank that failed first when a collective broke (the
  RankWatch of watch.py knows); another rank posts its own error for rank 0 (peers.py) unless it only saw a
  broken collective itself: then it is a victim, not the cause.
* "timeout": SIGTERM (job time limit, scancel) before the first step, or Ctrl+C. (A signal during training ends
  the loop at a step every rank agrees on, without an exception: signals.Stop, recorded by run.py.)

`record_failure` then writes rank 0's partial result and the traceback (error.log). `record_stall` does the
same from the stall deadline's thread (deadline.py) when the main thread is blocked for good (NCCL).
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import traceback
from typing import TYPE_CHECKING

from scalelab import record, redaction, results
from scalelab.entry import fast_exit
from scalelab.errors import error_line
from scalelab.train.guard import peers
from scalelab.train.guard.peers import is_peer_failure
from scalelab.train.guard.signals import Terminated
from scalelab.train.guard.watch import PEER_WAIT_S, recorded
from scalelab.train.payload import RunContext, build_payload, run_summary

SIGTERM_PEER_WAIT_S = 1.0  # after a SIGTERM, how long rank 0 waits for the others' progress (KillWait is >= 5 s)

if TYPE_CHECKING:
    from scalelab.train.guard.watch import RankWatch


def classify(exc: BaseException, watch: RankWatch, global_rank: int, steps_done: int,
             own_line: str) -> tuple[str, str]:
    """(status, one-line error) of a run that ended with `exc` on this rank."""
    received = watch.signals.received["SIGTERM"] or watch.signals.received["SIGUSR1"]
    by_signal = isinstance(exc, (Terminated, KeyboardInterrupt))
    watch.begin_failure()
    lost = watch.rank0_lost() if global_rank == 1 else None
    if lost:  # nobody else will record the run: rank 1 does, naming what happened to rank 0 (watch.records_for_rank0)
        where = f"during step {steps_done + 1}" if steps_done else "before the first step"
        return "failed", f"{lost}; rank 1 recorded the run {where} ({own_line.split('. ')[0]})"
    if watch.rank != 0 and (by_signal or received):
        peers.post_error(watch.rank, peers.MARK_SIGNAL)
    if by_signal:
        if watch.rank == 0 and watch.world_size > 1 and isinstance(exc, Terminated):
            # torchrun (and srun) send SIGTERM to every rank once one failed: then that rank is the story
            peer = watch.culprit(None, steps_done, wait_s=0)
            if peer:
                return "failed", peer
        if isinstance(exc, Terminated):
            return "timeout", f"received {exc.name} (job time limit, preemption or scancel) before the first step"
        return "timeout", "interrupted (Ctrl+C)"
    if global_rank != 0:
        if not received:  # else it posted MARK_SIGNAL above
            peers.post_error(watch.rank, peers.MARK_PEER if is_peer_failure(exc) else own_line)
        return "failed", own_line
    joined = _rendezvous_timeout(exc)
    if joined is not None:
        return "failed", watch.not_joined(*joined)
    peer = watch.culprit(exc, steps_done, silent=False)
    if peer:
        return "failed", peer
    if received:
        # a signal reached some ranks and not others (or came while a peer was already blocked): the ranks never
        # met at the step where they would have agreed to stop, and a collective timed out (--timeout)
        return "timeout", ("received a signal (job time limit, preemption or scancel), then the ranks did not stop "
                           f"together: {watch.culprit(exc, steps_done, wait_s=0) or own_line}")
    return "failed", watch.culprit(exc, steps_done, wait_s=0) or own_line


def record_failure(ctx: RunContext, status: str, line: str, exc: BaseException | None,
                   trace: str | None = None, for_rank0: bool = False) -> str:
    """Rank 0 writes what it has (its own timings: the other ranks may be gone) plus the traceback (or `trace`);
    rank 1 does, `for_rank0`, when rank 0 is lost (watch.rank0_lost), into the folder rank 0 claimed. Whichever of
    them finds the other's record there keeps it: a rank 0 that comes back (SIGCONT after SIGSTOP) did not see what
    happened, and a rank 1 that finds rank 0 gone after rank 0 recorded its own failure has nothing to add.

    Only local, collective-free work here: a peer may be dead, and a collective would wait for it.
    Returns the note for the one-line message: " (partial result: PATH)", or why no record could be written.
    """
    if ctx.rank != 0 and not for_rank0:
        return ""
    if ctx.written:  # this rank's own record, written before the failure: it stands, and says what ran
        return f" (after its result was written: {ctx.written})"
    kept = os.path.join(ctx.folder, "result.json") if ctx.folder else None
    if kept and recorded(kept):  # the other side recorded it first: its record stands
        return f" (rank {1 if ctx.rank == 0 else 0} recorded the run: {kept})"
    try:
        own = [ctx.rank_record()]
        summary = run_summary(ctx, own) if own[0]["step_times_s"] else record.Timing(steps=0)
        payload = build_payload(ctx, own, summary, {})
        payload.update(status=status, error=line)
        try:
            path = results.write(ctx.cfg.output_dir, payload, folder=ctx.folder)
        except OSError:  # a full disk: the provisional record's room, and its claim ("without a word") untrue now
            if not (kept and os.path.exists(kept)):
                raise
            os.unlink(kept)
            path = results.write(ctx.cfg.output_dir, payload, folder=ctx.folder)
    except Exception as err:  # noqa: BLE001 - a second failure must not hide the first behind a traceback
        return f" (and no result could be written: {error_line(err)})"
    try:
        results.atomic_write_text(os.path.join(os.path.dirname(path), "error.log"), redaction.redact(trace or "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))))
    except OSError as err:  # the record stands; the traceback beside it could not be written
        return f" (partial result: {path}; its error.log could not be written: {error_line(err)})"
    return f" (partial result: {path})"


def record_stall(ctx: RunContext, watch: RankWatch, line: str, prog: str = "train.py", signal: str | None = None,
                 moved_at: float = math.inf):
    """The end of a run whose main thread is blocked for good (deadline.py calls this from its thread): no
    progress for the stall deadline, or (signal="SIGTERM") none after a SIGTERM, whose Python handler a blocked
    main thread never runs.

    Every rank says its line; another rank first posts how far it got (peers.post_stall) for rank 0. Rank 0 names
    the rank that failed first when it can (a posted error, a launched rank that died, else the rank furthest
    behind: watch.hung_line), writes its partial result with the main thread's stack as error.log (where it was
    blocked), stops the ranks it launched, and exits: a blocked thread cannot be woken, and NCCL's watchdog (or
    SLURM's SIGKILL, KillWait after the SIGTERM) would otherwise end the process with nothing written.
    """
    watch.begin_failure()
    rank = ctx.rank
    clock = ctx.clock
    progress = (clock.steps, clock.batches, clock.comm.issued) if clock else (0, 0, 0)
    # blocked, rank 1 trusts only what it sees of rank 0 on its own host: every rank's deadline fires together, and
    # a store that answers late then is no evidence (the exception path, above, asks it)
    lost = watch.rank0_lost(ask_store=False) if rank == 1 else None
    if rank != 0 and not lost:
        peers.post_stall(rank, progress, line)
        print(f"{prog}: error: rank {rank} stopped: {line}", file=sys.stderr, flush=True)
        fast_exit(1)
    if lost:  # rank 0 is gone or stopped: nobody else will record the run
        line = f"{lost}; rank 1 recorded the run ({line})"
        note = record_failure(ctx, "failed", line, None, trace=f"{line}\n\n{_main_stack() or ''}", for_rank0=True)
        print(f"{prog}: error: rank 1 stopped: {line}{note}", file=sys.stderr, flush=True)
        fast_exit(1)
    # a posted error or a dead rank first; else, once the others have posted (after SIGTERM, SIGKILL follows:
    # wait less), the rank furthest behind
    peer = watch.culprit(None, progress[0], wait_s=0, stalled=False)
    if not peer:
        hung = watch.hung_rank(progress, SIGTERM_PEER_WAIT_S if signal else PEER_WAIT_S, moved_at=moved_at)
        peer = watch.culprit(None, progress[0], wait_s=0, stalled=False) or hung
    line = f"{peer} (rank 0: {line})" if peer else f"rank 0: {line}"
    trace = _main_stack()
    status = "timeout" if signal and not peer else "failed"
    note = record_failure(ctx, status, line, None, trace=f"{line}\n\n{trace or ''}")
    watch.stop_children()
    print(f"{prog}: error: run ended with status {status}: {line}{note}", file=sys.stderr, flush=True)
    fast_exit(1)


def _main_stack() -> str | None:
    """Where the main thread is blocked, for error.log."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return "main thread, blocked:\n" + "".join(traceback.format_stack(frame)) if frame else None


def _rendezvous_timeout(exc: BaseException) -> tuple[int, int] | None:
    """(arrived, expected) when the process group never formed: torch's "1/2 clients joined"."""
    match = re.search(r"(\d+)/(\d+) clients joined", str(exc))
    return (int(match.group(1)), int(match.group(2))) if match else None
