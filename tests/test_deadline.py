"""The stall deadline (train/deadline.py): when it is armed, when it fires, and that progress and disarm hold it."""

import time

import pytest

from scalelab.testing.faults import Fault, blocks_like_nccl, from_env
from scalelab.train.deadline import StallDeadline, stall_seconds


def test_armed_only_where_errors_never_reach_python():
    assert stall_seconds(180, "nccl") == pytest.approx(162)
    assert stall_seconds(180, "gloo") is None and stall_seconds(180, None) is None  # gloo raises in Python
    assert stall_seconds(10, "gloo", blocks_like_nccl=True) == pytest.approx(9)


def test_a_wedge_fault_blocks_like_nccl_and_several_faults_parse():
    env = {"SCALELAB_FAULT": "exit@step=3,rank=1;wedge@step=3,rank=0", "RANK": "0"}
    (fault,) = from_env(env)  # rank 0's share of the two faults
    assert isinstance(fault, Fault) and fault.kind == "wedge" and fault.step == 3
    assert blocks_like_nccl([fault]) and not blocks_like_nccl([Fault("exit", 3)])
    (teardown,) = from_env({"SCALELAB_FAULT": "exit@teardown,rank=0"})
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


def test_compile_gives_the_first_batch_ten_more_minutes():
    """--compile's first batch compiles the model (minutes for xl): 0.9 x 180 = 162 s, plus 600 s, for that batch
    only; without --compile, or where no deadline is armed, nothing changes."""
    from scalelab.train.deadline import first_batch_seconds

    assert first_batch_seconds(stall_seconds(180, "nccl"), compile=True) == pytest.approx(762)
    assert first_batch_seconds(162.0, compile=False) == 162.0
    assert first_batch_seconds(None, compile=True) is None  # gloo: no deadline to extend


def test_the_run_arms_the_first_batch_allowance_with_compile_only():
    from types import SimpleNamespace

    from scalelab.train.run import stall_deadline

    def armed(compile, backend="nccl", world_size=2):
        ctx = SimpleNamespace(cfg=SimpleNamespace(timeout=100.0, compile=compile),
                              launch=SimpleNamespace(backend=backend, world_size=world_size),
                              clock=SimpleNamespace(batches=0, steps=0))
        d = stall_deadline(ctx, watch=None, injected=[])
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
