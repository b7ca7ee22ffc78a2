"""A signal is acted on at a step every rank agrees on, never inside the signal handler (train/signals.py)."""

import os
import signal
from types import SimpleNamespace

import pytest
import torch

from helpers import two_gloo_ranks
from scalelab.train import requeue
from scalelab.train.loop import SYNC_EVERY
from scalelab.train.signals import RunSignals, Terminated


def _rank(rank: int, out):
    sig = RunSignals(requeue_on_sigusr1=True)
    sig.loop_started = True
    stop, next_sync, meetings = None, 1, []
    for step in range(1, 4 * SYNC_EVERY):
        if rank == 1 and step == 3:
            sig.received["SIGUSR1"] = True  # what the handler notes: only on rank 1, mid-run
        if step == next_sync:  # the loop's sync point
            # each rank proposes its own interval (rank 1 has longer steps): the fewer steps win
            stop = sig.agree(torch.device("cpu"), 2, step, every=SYNC_EVERY if rank == 0 else 4)
            meetings.append(step)
            if stop:
                break
            next_sync = step + sig.every
    out.put((rank, meetings, stop.reason, stop.steps, stop.status(), sig.ending))


def test_ranks_stop_at_the_same_step_when_one_of_them_got_the_signal():
    got = sorted(two_gloo_ranks(_rank, timeout=120))
    # rank 0 never got the signal, yet both stop at the first sync point after it arrived, both to requeue; they
    # met after step 1 and then every 4 steps, the shorter of the two intervals proposed
    assert got == [(r, [1, 5], "requeue", 5, "preempted", True) for r in (0, 1)]


def test_the_handler_only_notes_a_signal_once_the_loop_runs_and_raises_before():
    sig = RunSignals()
    sig.install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)  # start-up: SLURM's 90 s warning waits for the first sync point
        with pytest.raises(Terminated, match="received SIGTERM before the first step"):
            os.kill(os.getpid(), signal.SIGTERM)  # start-up: nothing to stop after, the run ends now
        sig.loop_started = True
        sig.received["SIGTERM"] = False
        os.kill(os.getpid(), signal.SIGTERM)  # training: noted, acted on at the next agreement
        assert sig.received == {"SIGTERM": True, "SIGUSR1": True} and not sig.ending
        sig.received["SIGTERM"] = False
        stop = sig.agree(torch.device("cpu"), 1, 7, every=3)
        assert stop.reason == "SIGUSR1" and stop.status() == "timeout" and sig.ending  # no SLURM: a stop
        assert stop.line() == "received SIGUSR1 (no SLURM requeue here: handled like SIGTERM) and stopped after step 7"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_no_signal_no_stop_and_a_handler_someone_else_set_is_left_alone():
    sig = RunSignals()
    assert sig.agree(torch.device("cpu"), 1, 10, every=6) is None and sig.every == 6

    def theirs(signum, frame):  # submitit's, say: it checkpoints and requeues its own way
        pass

    signal.signal(signal.SIGUSR1, theirs)
    try:
        RunSignals().install()
        assert signal.getsignal(signal.SIGUSR1) is theirs and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_refused_requeue_is_a_timeout_that_says_why():
    from scalelab.train.signals import Stop

    stop = Stop("requeue", 20)
    assert stop.status() == "preempted"
    stop.refused = "scontrol requeue 7 failed: Requested operation is presently disabled"
    assert stop.status() == "timeout" and stop.line() == (
        "received SLURM's requeue signal and saved a checkpoint after step 20, but scontrol requeue 7 failed: "
        "Requested operation is presently disabled")
    stop.saved, stop.refused = (15_790_000_000, 41.26), None  # what the save took, against SIGUSR1's lead
    assert stop.line() == ("received SLURM's requeue signal (time limit near): saved a checkpoint (14.71 GiB in "
                           "41.3 s) after step 20 and asked SLURM to requeue the job, which stopped this attempt")


def test_only_a_requeued_attempt_of_this_job_resumes(tmp_path):
    env = {"SLURM_JOB_ID": "42"}
    path = requeue.checkpoint_path(str(tmp_path), env)
    assert path == str(tmp_path / "checkpoints" / "42" / "requeue.ckpt")
    assert requeue.checkpoint_path(str(tmp_path), {}) is None  # outside SLURM: nothing to resume
    os.makedirs(os.path.dirname(path))
    open(path, "w").close()
    # a first attempt never loads (job ids restart when a cluster is wiped): returns before touching fabric
    assert requeue.resume(None, None, None, None, path, {**env, "SLURM_RESTART_COUNT": "0"}) is False
    # a requeued attempt loads only what rank 0 found (every rank takes rank 0's branch)
    rank0 = SimpleNamespace(global_rank=0, broadcast=lambda obj, src: obj)
    assert requeue.resume(rank0, None, None, None, str(tmp_path / "none.ckpt"), {**env, "SLURM_RESTART_COUNT": "1"}) \
        is False
    told_no = SimpleNamespace(global_rank=1, broadcast=lambda obj, src: False)  # rank 0 saw no file, this rank does
    assert requeue.resume(told_no, None, None, None, path, {**env, "SLURM_RESTART_COUNT": "1"}) is False
    requeue.done_with(path)
    assert not os.path.exists(path)
