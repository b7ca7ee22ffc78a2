"""The local launcher (launch/local.py) stops the other ranks soon after any one of them fails."""

import time

import pytest

from scalelab.errors import RunFailed
from scalelab.launch.local import spawn_local

RANK_SCRIPT = """
import os, sys, time
rank = int(os.environ["RANK"])
if rank == int(os.environ["FAILING_RANK"]):
    sys.exit(3)
time.sleep(60)
"""


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_failed_rank_stops_the_others_within_the_grace_period(tmp_path, monkeypatch, failing):
    (tmp_path / "fake_rank.py").write_text(RANK_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAILING_RANK", str(failing))
    start = time.monotonic()
    with pytest.raises(RunFailed) as err:
        spawn_local("fake_rank", [], 3, grace_s=1.0)
    # a rank behind a running lower rank must be seen too: not the 60 s the others sleep
    assert time.monotonic() - start < 20
    assert str(err.value) == f"rank {failing} of 3 exited with code 3; stopped the other ranks"
