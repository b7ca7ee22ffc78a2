"""One object keeps a run alive and recorded; train/run.py opens it around everything that can fail.

    with RunGuard(ctx, slurm=...) as guard:      # signals acted on from here on
        guard.arm(metrics)                       # the stall deadline, before the ranks first meet
        guard.launch(ranks); fabric.launch()     # the ranks rank 0 started go on, watched; the group forms
        guard.joined(fabric)                     # ... rank 1 learns where rank 0 records
        guard.resume(...) / guard.save(...)      # SLURM's requeue: the checkpoint
        guard.before_record(stop)                # ask SLURM for the requeue; why SLURM ended the job
        ... result.json ...
        guard.recorded(stop)
    guard.teardown()

An exception that leaves the block is recorded (failure.py: which rank failed first and how, a partial result)
and raised again as one line (RunFailed); a UsageError passes unchanged. The test faults of scalelab/testing/faults.py
are read here (a `sleep` fault waits as the block opens), ride on `loader`, act at `teardown`, and arm the stall
deadline as under NCCL (`arm`); without SCALELAB_FAULT they do nothing.
"""

from __future__ import annotations

from scalelab.errors import RunFailed, UsageError, error_line
from scalelab.testing import faults
from scalelab.train.guard import failure, peers, requeue
from scalelab.train.guard.deadline import StallDeadline, first_batch_seconds, sigterm_grace, stall_seconds
from scalelab.train.guard.peers import describe_dead
from scalelab.train.guard.watch import RankWatch


class RunGuard:
    def __init__(self, ctx, *, slurm: bool):
        self.ctx = ctx
        # signals: acted on from here on (SIGUSR1, SLURM's time-limit warning, noted since train.py began)
        self.watch = RankWatch(ctx.cfg.timeout, requeue_on_sigusr1=slurm, no_requeue=requeue.refusal())
        self.signals = self.watch.signals  # what the loop asks at each sync point
        self.metrics = self.stall = None
        self.faults = faults.Faults([])
        self.checkpoint = requeue.checkpoint_path(ctx.cfg.output_dir)

    def __enter__(self) -> RunGuard:
        try:
            self.faults = faults.from_env()  # none in a real run (a test's `sleep` fault waits here)
        except BaseException as exc:  # a SIGTERM during that wait is recorded as any other end
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            return False
        if self.stall:
            self.stall.disarm()  # the main thread records it: the deadline's thread must not write a second record
        if isinstance(exc, UsageError):
            return False
        raise self.failed(exc) from None  # every other way a run can end: recorded, then one line

    def arm(self, metrics) -> None:
        """The stall deadline, armed before the ranks meet: a bootstrap that hangs in C (NCCL with a wrong
        NCCL_SOCKET_IFNAME, a peer that never joins) runs no Python handler, and SLURM's SIGKILL would follow its
        SIGTERM with no record. `metrics`: the --logger rows, told how the run ended."""
        self.metrics = metrics
        self.stall = stall_deadline(self.ctx, self.watch, self.faults.blocks_like_nccl or faults.wedge_anywhere())
        self.stall.arm()

    def launch(self, ranks) -> None:
        """Rank 0 built all it builds before the ranks meet: the local ranks it started (launch/local.py's
        LocalRanks, early or just now; None where a launcher started them) go on from their start, and the watch
        follows them. One that ended before the go is said now, not after --timeout at the rendezvous."""
        if ranks is None:
            return
        dead = ranks.go()
        self.watch.follow(ranks.procs)
        if dead:
            raise RunFailed(f"{describe_dead(dead)} before the ranks met")

    def joined(self, fabric) -> None:
        """The process group formed: the watch knows the world; rank 1 knows rank 0's run folder, where it records
        should rank 0 be lost (failure.py)."""
        ctx = self.ctx
        ctx.rank, ctx.local_rank, ctx.node_rank = fabric.global_rank, fabric.local_rank, fabric.node_rank
        self.watch.joined(fabric.world_size, fabric.global_rank)
        if fabric.world_size > 1:
            ctx.run_id, ctx.folder = peers.share_run(ctx.rank, ctx.run_id, ctx.folder)
            self.watch.run_folder = ctx.folder

    def loader(self, loader, accumulate: int):
        """The loader the loop iterates (a test's fault may ride on it)."""
        return self.faults.loader(loader, accumulate)

    def resume(self, fabric, model, optimizer, plan) -> None:
        """A requeued attempt of a SLURM job starts where its checkpoint left off (loading 20 GB is no stall)."""
        with self.stall.held():
            resumed = requeue.resume(fabric, model, optimizer, plan, self.checkpoint)
        if resumed:
            self.ctx.resumed_from = self.checkpoint
            if self.ctx.rank == 0:
                print(f"scalelab: resumed from {self.checkpoint} at step {plan.step} (a requeued job)", flush=True)

    def save(self, stop, fabric, model, optimizer, plan) -> None:
        """The ranks agreed to stop for a requeue: every rank saves at that step (16 GB and more for xl: no stall)."""
        if stop and stop.requeue:
            with self.stall.held():
                stop.saved = requeue.save(fabric, model, optimizer, plan, self.checkpoint)

    def before_record(self, stop) -> None:
        """Rank 0, before it writes the result: the requeue asked of SLURM (the record says whether it took it), why
        SLURM sent its SIGTERM, and a time limit's checkpoint removed (no attempt will resume from it)."""
        if not stop:
            return
        if stop.requeue:
            stop.refused = requeue.ask_slurm()
        if stop.reason == "SIGTERM" and self.ctx.launch.launcher == "slurm":
            stop.cause = requeue.end_cause()
        if stop.reason == "time limit":
            requeue.done_with(self.ctx.resumed_from)

    def recorded(self, stop) -> None:
        """Rank 0, the result on disk: a resumed job that completed has no more use for its checkpoint."""
        if not stop:
            requeue.done_with(self.ctx.resumed_from)

    def disarm(self) -> None:
        """Every rank's figures are gathered: rank 0 writes the record (a slow disk, scontrol) while the others wait
        at the last barrier, which no stall deadline must cut short."""
        if self.stall:
            self.stall.disarm()

    def teardown(self) -> None:
        """The launched ranks end (nothing is copied off the device)."""
        self.faults.at_teardown()  # a test's fault here finds the record already on disk
        self.watch.wait_children()

    def failed(self, exc: BaseException) -> RunFailed:
        """The one-line error of a run that raised (or whose peer did): name the cause, leave a partial record."""
        ctx, watch = self.ctx, self.watch
        # failure.py: which rank failed first and how (rank 0 asks its launched children and the other ranks)
        status, line = failure.classify(exc, watch, ctx.rank, ctx.clock.steps, error_line(exc))
        watch.stop_children()  # ranks launched from here cannot finish without this one
        note = failure.record_failure(ctx, status, line, exc, for_rank0=watch.records_for_rank0)
        if self.metrics:
            try:
                self.metrics.finish({}, "failed")
            except Exception:  # noqa: BLE001 - the logger may be what failed: the run's own line says more
                pass
        if ctx.rank != 0:
            return RunFailed(f"rank {ctx.rank} stopped: {line}{note}")
        return RunFailed(f"run ended with status {status}: {line}{note}")


def stall_deadline(ctx, watch, blocks_like_nccl: bool = False) -> StallDeadline:
    """deadline.py: under NCCL a dead peer blocks the survivors without an error; record before the watchdog."""
    several = ctx.launch.world_size > 1
    backend = ctx.launch.backend if several else None
    seconds = stall_seconds(ctx.cfg.timeout, backend, blocks_like_nccl)
    clock = ctx.clock

    def step_s():
        recent = sorted(clock.step_times[-20:])
        return recent[len(recent) // 2] if recent else 0.0

    # progress: batches and steps ended, gradient all-reduces issued (finer than a step: failure.hung_line), and
    # whether the ranks agreed to stop (a rank acting on SIGTERM is not blocked)
    # (rank 0 blocked weighs the others' pauses against when it last moved itself: deadline.moved_at)
    deadline = StallDeadline(
        seconds, lambda line, signal=None: failure.record_stall(ctx, watch, line, signal=signal,
                                                                moved_at=deadline.moved_at),
        lambda: (clock.batches, clock.steps, clock.comm.issued, watch.signals.ending),
        signals=watch.signals if several else None, grace=lambda: sigterm_grace(step_s()),
        on_idle=(lambda: ctx.rank and peers.post_progress(
            ctx.rank, (clock.steps, clock.batches, clock.comm.issued))) if several else None,
        first_seconds=first_batch_seconds(seconds, ctx.cfg.compile))
    return deadline
