"""The stall deadline (train/guard/deadline.py): when it is armed, when it fires, that progress and disarm hold
it."""

import ctypes
import os
import signal
import threading
import time

import pytest

from scalelab.testing.faults import Fault, Faults, from_env, wedge_anywhere
from scalelab.train.guard.deadline import StallDeadline, sigterm_grace, stall_seconds
from scalelab.train.guard.signals import RunSignals
from scalelab.train.guard.watch import hung_line


def test_armed_only_where_errors_never_reach_python():
    assert stall_seconds(180, "nccl") == pytest.approx(162)
    assert stall_seconds(180, "gloo") is None and stall_seconds(180, None) is None  # gloo raises in Python
    assert stall_seconds(10, "gloo", blocks_like_nccl=True) == pytest.approx(9)


def test_a_wedge_fault_blocks_like_nccl_and_several_faults_parse():
    env = {"SCALELAB_FAULT": "exit@step=3,rank=1;wedge@step=3,rank=0", "RANK": "0"}
    (fault,) = from_env(env).faults  # rank 0's share of the two faults
    assert isinstance(fault, Fault) and fault.kind == "wedge" and fault.step == 3
    assert Faults([fault]).blocks_like_nccl and not Faults([Fault("exit", 3)]).blocks_like_nccl
    assert wedge_anywhere({"SCALELAB_FAULT": "wedge@step=3,rank=2"})  # rank 0 arms too, as under NCCL
    assert not wedge_anywhere({"SCALELAB_FAULT": "exit@step=3,rank=1"}) and not wedge_anywhere({})
    (teardown,) = from_env({"SCALELAB_FAULT": "exit@teardown,rank=0"}).faults
    assert teardown.kind == "exit" and teardown.step is None


def _wait(pred, limit=3.0):
    end = time.monotonic() + limit
    while not pred() and time.monotonic() < end:
        time.sleep(0.01)
    return pred()


def test_fires_once_after_the_deadline_without_progress():
    lines = []
    d = StallDeadline(0.3, lines.append, lambda: (2, 2), poll_s=0.02)  # 2 batches, 2 steps ended
    d.arm()
    assert _wait(lambda: lines)
    time.sleep(0.2)
    assert lines == ["no progress for 0.3 s during step 3: blocked in a collective or device sync "
                     "(stall deadline = 0.9 x --timeout)"]


def test_progress_postpones_and_disarm_stops_it():
    lines, batches = [], [0]
    d = StallDeadline(0.4, lines.append, lambda: (batches[0], batches[0]), poll_s=0.02)
    d.arm()
    for _ in range(8):  # 0.8 s of steps of 0.1 s: twice the deadline in all, never idle for it
        time.sleep(0.1)
        batches[0] += 1
    assert not lines
    d.disarm()
    time.sleep(0.6)
    assert not lines and not d.fired


def test_never_armed_without_a_deadline():
    d = StallDeadline(None, lambda line: None, lambda: (0, 0))
    d.arm()
    assert d._thread is None


# --- a checkpoint being saved is no stall -----------------------------------------------------------------------


def test_a_held_deadline_never_fires_and_after_the_hold_the_wait_starts_afresh():
    """held(): a save (or a load) longer than the deadline, with no step ending, is no stall; once it is over the
    deadline counts again, from the hold's end, not from the last step before it."""
    lines = []
    d = StallDeadline(0.3, lines.append, lambda: (4, 4), poll_s=0.02)
    d.arm()
    with d.held():
        time.sleep(0.8)  # more than twice the deadline
    released = time.monotonic()
    assert not lines and not d.fired
    assert _wait(lambda: lines, limit=3.0), "the deadline never fired again after the hold"
    took = time.monotonic() - released
    assert 0.25 <= took <= 2.0, took  # a fresh 0.3 s, not at once (nor never)
    assert lines == ["no progress for 0.3 s during step 5: blocked in a collective or device sync "
                     "(stall deadline = 0.9 x --timeout)"]


def test_the_requeue_save_holds_the_stall_deadline(tmp_path, monkeypatch):
    """RunGuard.save: every rank saves at the agreed step (16 GB and more for xl) while the deadline is armed; the
    save is held, so a slow one is never recorded as a stall (its record would be a failure, not a preemption)."""
    from types import SimpleNamespace

    from scalelab.train.guard import requeue
    from scalelab.train.guard.run_guard import RunGuard
    from scalelab.train.guard.signals import Stop

    lines = []
    guard = RunGuard.__new__(RunGuard)  # its deadline and checkpoint, without a run's start-up
    guard.stall = StallDeadline(0.3, lines.append, lambda: (4, 4), poll_s=0.02)
    guard.checkpoint = str(tmp_path / "requeue.ckpt")

    saves = []

    def slow_save(fabric, model, optimizer, plan, path):
        saves.append(path)
        time.sleep(0.8)
        return 1000, 0.8

    monkeypatch.setattr(requeue, "save", slow_save)
    guard.stall.arm()
    stop = Stop("requeue", 4)
    guard.save(stop, SimpleNamespace(), None, None, None)
    guard.save(Stop("SIGTERM", 4), SimpleNamespace(), None, None, None)  # not a requeue: nothing saved, at once
    guard.stall.disarm()
    assert not lines and stop.saved == (1000, 0.8) and saves == [guard.checkpoint]


# --- which rank hung: each rank's progress when it stopped (steps, batches, gradient all-reduces issued) ----------

def test_the_rank_furthest_behind_is_named_not_the_lowest_numbered():
    """Under NCCL the ranks waiting for a hung rank run ahead to their next device sync (steps queue on the GPU):
    rank 2 stopped after step 4, ranks 0, 1 and 3 after step 10. Every rank's deadline fires; rank 2 is named."""
    progress = {0: (10, 10, 30), 1: (10, 10, 30), 2: (4, 4, 12), 3: (10, 10, 30)}
    assert hung_line(progress, 4) == ("rank 2 hung during step 5: furthest behind (last completed step by rank: "
                                      "0: 10, 1: 10, 2: 4, 3: 10)")


def test_under_gloo_the_all_reduces_issued_break_the_tie():
    """Under gloo the waiting ranks block inside the hung rank's step 5, having issued its 3 gradient
    all-reduces (15 in all); the hung rank blocked before its forward: 12."""
    progress = {0: (4, 4, 15), 1: (4, 4, 12), 2: (4, 4, 15)}
    assert hung_line(progress, 3) == ("rank 1 hung during step 5: furthest behind (last completed step by rank: "
                                      "0: 4, 1: 4, 2: 4; 12 gradient all-reduces issued, the others up to 15)")


def test_a_rank_that_never_reported_is_named_only_when_the_others_are_level():
    assert hung_line({0: (4, 4, 15), 2: (4, 4, 15)}, 3).startswith("rank 1 never reported while the others waited "
                                                                   "after step 4")
    assert hung_line({0: (4, 4, 15), 1: (4, 4, 15)}, 2) is None  # nothing sets a rank apart
    assert hung_line({0: (4, 4, 15), 1: (3, 3, 12)}, 3).startswith("rank 1 hung during step 4")  # behind beats silent


# --- SIGTERM while the main thread is blocked in C (an NCCL survivor's device sync) ---------------------------

def _mutex():
    """A glibc mutex, locked: a second lock() blocks the calling thread in C without ever returning to Python
    (pthread_mutex_lock is never interrupted by a signal), as cudaStreamSynchronize does."""
    libc = ctypes.CDLL(None, use_errno=True)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    return libc, mutex


def test_sigterm_reaches_the_deadline_thread_while_the_main_thread_is_blocked_in_c():
    sigs = RunSignals()
    old = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGUSR1)}  # install() sets both
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    owner = signal.set_wakeup_fd(-1)  # a test runner may own the wakeup fd (install() would leave it alone)
    calls = []
    libc, mutex = _mutex()
    try:
        sigs.install()  # the Python handler, and the wakeup fd the deadline's thread reads
        sigs.loop_started = True  # in training: the handler only notes the signal
        assert sigs._wakeup is not None

        def on_stall(line, kind=None):
            calls.append((line, kind, sigs.received["SIGTERM"]))  # has the main thread's handler run yet?
            libc.pthread_mutex_unlock(mutex)  # let the main thread go again

        d = StallDeadline(None, on_stall, lambda: (2, 2, 6, False), poll_s=0.02, signals=sigs, grace=lambda: 0.3)
        d.arm()
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        threading.Timer(10, libc.pthread_mutex_unlock, (mutex,)).start()  # never blocked for good, whatever happens
        libc.pthread_mutex_lock(mutex)  # the main thread blocks here, in C, until on_stall unlocks it
    finally:
        signal.set_wakeup_fd(owner)
        for signum, handler in old.items():  # a handler left behind would take a later test's signal
            signal.signal(signum, handler)
    assert len(calls) == 1, calls
    line, kind, handler_ran = calls[0]
    assert kind == "SIGTERM" and not handler_ran  # the record came from the thread, the main thread's handler never ran
    assert line.startswith("received SIGTERM while blocked during step 3: no progress for ")


def test_no_sigterm_no_progress_no_deadline_means_no_record_and_pauses_are_posted_once():
    """Several ranks on gloo: no stall deadline, only the SIGTERM watch. A pause of grace() posts the rank's
    progress once (rank 0 reads it if it blocks), and progress resuming posts it once more; nothing fires."""
    posted, steps = [], [0]
    d = StallDeadline(None, lambda *a: posted.append(("fired", a)), lambda: (steps[0], steps[0]), poll_s=0.02,
                      signals=RunSignals(), grace=lambda: 0.2, on_idle=lambda: posted.append(steps[0]))
    d.arm()
    time.sleep(0.5)  # idle: posted once
    steps[0] = 1
    time.sleep(0.1)  # moving again: posted once more
    d.disarm()
    assert posted == [0, 1]


def test_the_wait_after_sigterm_follows_the_step_time_within_bounds():
    assert sigterm_grace(0.0) == 1.0 and sigterm_grace(0.5) == 1.5 and sigterm_grace(60.0) == 10.0


def test_nccl_errors_reach_python_unless_the_user_chose_otherwise():
    """2 = CleanUpOnly (ProcessGroupNCCL.hpp): abort the communicators and raise, never kill the process as torch's
    default 3 (SkipCleanUp) and 1 (TearDown) do; a value the user set stays."""
    from scalelab.train.prepare import nccl_errors_reach_python

    env = {}
    nccl_errors_reach_python(env)
    assert env == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    env = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    nccl_errors_reach_python(env)
    assert env == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_compile_gives_the_first_batch_ten_more_minutes():
    """--compile's first batch compiles the model (minutes for xl): 0.9 x 180 = 162 s, plus 600 s, for that batch
    only; without --compile, or where no deadline is armed, nothing changes."""
    from scalelab.train.guard.deadline import first_batch_seconds

    assert first_batch_seconds(stall_seconds(180, "nccl"), compile=True) == pytest.approx(762)
    assert first_batch_seconds(162.0, compile=False) == 162.0
    assert first_batch_seconds(None, compile=True) is None  # gloo: no deadline to extend


def test_the_run_arms_the_first_batch_allowance_with_compile_only():
    from types import SimpleNamespace

    from scalelab.train.guard.run_guard import stall_deadline

    def armed(compile, backend="nccl", world_size=2):
        ctx = SimpleNamespace(cfg=SimpleNamespace(timeout=100.0, compile=compile),
                              launch=SimpleNamespace(backend=backend, world_size=world_size),
                              clock=SimpleNamespace(batches=0, steps=0))
        d = stall_deadline(ctx, watch=SimpleNamespace(signals=None), blocks_like_nccl=False)
        return d.seconds, d.first_seconds

    assert armed(True) == (pytest.approx(90), pytest.approx(690))
    assert armed(False) == (pytest.approx(90), pytest.approx(90))
    assert armed(True, backend="gloo") == (None, None)


def test_the_first_batch_waits_for_its_allowance_then_the_usual_deadline_applies():
    lines = []
    d = StallDeadline(0.2, lines.append, lambda: (0, 0), poll_s=0.02, first_seconds=0.6)  # nothing ended yet
    d.arm()
    time.sleep(0.4)
    assert not lines  # past 0.2 s: the first batch is still compiling
    assert _wait(lambda: lines)
    assert lines == ["no progress for 0.6 s before the first step ended: blocked in a collective or device sync "
                     "(stall deadline = 0.9 x --timeout + 0.4 s for --compile's first batch)"]
    later = []
    d = StallDeadline(0.2, later.append, lambda: (1, 1), poll_s=0.02, first_seconds=0.6)  # one batch ended
    d.arm()
    assert _wait(lambda: later)
    assert later == ["no progress for 0.2 s during step 2: blocked in a collective or device sync "
                     "(stall deadline = 0.9 x --timeout)"]
