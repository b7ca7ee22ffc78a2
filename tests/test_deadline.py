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
