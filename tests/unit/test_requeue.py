"""A signal is acted on at a step every rank agrees on, never inside the signal handler (train/guard/signals.py)."""

import ast
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from helpers import SRC, two_gloo_ranks
from scalelab.launch import slurm_env
from scalelab.train.guard import requeue
from scalelab.train.guard.signals import RunSignals, Terminated
from scalelab.train.loop import SYNC_EVERY


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
    from scalelab.train.guard.signals import Stop

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


# scontrol show job as the ranks get SIGTERM, on the local cluster (tests/slurm_cluster): --time=1, then scancel
AT_TIME_LIMIT = "JobId=2 JobName=x\n   JobState=COMPLETING Reason=TimeLimit Dependency=(null)\n   Requeue=1 Restarts=0"
AT_SCANCEL = "JobId=3 JobName=x\n   JobState=COMPLETING Reason=None Dependency=(null)\n   Requeue=1 Restarts=0"


@pytest.mark.parametrize("text, cause", [
    (AT_TIME_LIMIT, "SLURM ended the job at its time limit"),
    (AT_SCANCEL, "the job was cancelled (scancel)"),
    ("JobState=CANCELLED Reason=None", "the job was cancelled (scancel)"),  # read once the cancel is through
    ("JobState=TIMEOUT Reason=None", "SLURM ended the job at its time limit"),
    ("JobState=PREEMPTED Reason=None", "SLURM preempted the job"),
    ("JobState=COMPLETING Reason=Preempted", "SLURM preempted the job"),
    ("JobState=NODE_FAIL Reason=None", "SLURM ended the job: one of its nodes failed"),
    ("JobState=COMPLETING Reason=NodeDown", "SLURM ended the job: one of its nodes failed"),
    ("JobState=RUNNING Reason=None", None),  # a SIGTERM SLURM did not send (kill from a shell): no guess
    ("", None),
])
def test_the_cause_of_a_sigterm_is_read_from_slurm(text, cause):
    assert slurm_env.end_cause(text) == cause


@pytest.mark.parametrize("limit, seconds", [("00:01:00", 60), ("00:30:00", 1800), ("1-02:03:04", 93784),
                                            ("5:00", 300), ("UNLIMITED", None), ("", None), ("x-01:00:00", None),
                                            ("1:02:03:04", None), ("Partition_Limit", None)])
def test_the_time_limit_as_scontrol_prints_it(limit, seconds):
    assert slurm_env.time_limit_s({"SCALELAB_JOB_TIME_LIMIT": limit}) == seconds


@pytest.mark.parametrize("limit, restarts, refused", [
    ("00:01:00", "0", "its time limit (60 s) leaves an attempt less than 90 s before SLURM's warning"),
    ("00:02:59", "0", "its time limit (179 s)"),
    ("00:03:00", "0", None),
    ("00:30:00", "2", None),
    ("00:30:00", "3", "SLURM requeued the job 3 times already (at most 3)"),
    ("UNLIMITED", "0", None),
])
def test_a_requeue_needs_an_attempt_that_can_train_and_is_bounded(limit, restarts, refused):
    why = requeue.refusal({"SCALELAB_JOB_TIME_LIMIT": limit, "SLURM_RESTART_COUNT": restarts})
    assert (why is None) == (refused is None) and (refused is None or why.startswith(refused))


def test_slurms_warning_in_a_job_not_worth_requeueing_ends_it_as_a_time_limit():
    sig = RunSignals(requeue_on_sigusr1=True, no_requeue="why not")
    sig.loop_started, sig.received["SIGUSR1"] = True, True
    stop = sig.agree(torch.device("cpu"), 1, 7, every=1)
    assert (stop.reason, stop.requeue, stop.status()) == ("time limit", False, "timeout")
    assert stop.line() == ("received SLURM's warning that the job's time limit is near (SIGUSR1) and stopped after "
                           "step 7; not requeued: why not")
    sig = RunSignals(requeue_on_sigusr1=True)  # without a refusal it is a requeue, as before
    sig.received["SIGUSR1"] = True
    assert sig.agree(torch.device("cpu"), 1, 7, every=1).reason == "requeue"
    term = RunSignals(requeue_on_sigusr1=True, no_requeue="why not")
    term.received["SIGTERM"] = True
    stop = term.agree(torch.device("cpu"), 1, 9, every=1)
    stop.cause = "SLURM ended the job at its time limit"
    assert stop.line() == "received SIGTERM: SLURM ended the job at its time limit; stopped after step 9"


EARLY = """
import os, signal
from scalelab.train.guard.signals import RunSignals, note_early
if os.environ.get("NOTE") == "1":
    note_early()
os.kill(os.getpid(), signal.SIGUSR1)  # before the run's handlers exist, as SLURM's warning can come
sig = RunSignals(requeue_on_sigusr1=True)
sig.install()
print(sig.received["SIGUSR1"], signal.getsignal(signal.SIGUSR1) == sig._handler)
"""


def test_slurms_warning_before_the_handlers_exist_is_noted_and_acted_on_not_fatal(tmp_path):
    # a dry run's --time=1: SIGUSR1 came while torch was importing; the task died "User defined signal 1"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    early = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True, env={**env, "NOTE": "1"})
    assert early.returncode == 0 and early.stdout.split() == ["True", "True"], early.stderr
    unguarded = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True, env=env)
    assert unguarded.returncode == -signal.SIGUSR1  # what note_early prevents


def test_the_entry_scripts_note_the_warning_before_anything_else():
    for path in (SRC / "train.py", SRC / "scalelab" / "train" / "__main__.py"):
        body = ast.parse(path.read_text()).body
        body = body[1:] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        assert [ast.unparse(node) for node in body[:2]] == ["from scalelab.train.guard.signals import note_early",
                                                             "note_early()"], path


def test_the_cause_reads_scontrols_fields_whatever_else_the_job_says():
    text = "JobId=9 Comment=key=value JobState=COMPLETING Reason=TimeLimit WorkDir=/a=b"  # '=' inside a value
    assert slurm_env.end_cause(text) == "SLURM ended the job at its time limit"
    # Reason is free text where the job has a description (scontrol writes its spaces as '_'): the first '=' ends
    # the key, so a description holding '=' is still read as Reason
    assert slurm_env.end_cause("JobState=COMPLETING Reason=Preempted_by_QOS=high") == "SLURM preempted the job"
    for reason in ("NodeFail", "NodeNotResponding"):
        assert slurm_env.end_cause(f"JobState=COMPLETING Reason={reason}") == ("SLURM ended the job: one of its "
                                                                              "nodes failed")
    assert slurm_env.time_limit_s({}) is None  # outside a job site.sh never ran
