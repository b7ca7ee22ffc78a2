"""submit.py says why a job waits in the queue (launch/sweep.py: waiting), from SLURM's own clients."""

import pytest

from scalelab.errors import UsageError
from scalelab.launch import sweep


def _tool(folder, name, text):
    tool = folder / name
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + text + "\nEOF\n")
    tool.chmod(0o755)


def test_a_job_waiting_for_a_drained_node_is_named_with_the_node(tmp_path, monkeypatch):
    # what the local cluster's squeue and sinfo print with node2 drained (SLURM's reason: just "Resources")
    _tool(tmp_path, "squeue", "16|Resources|debug\n17|Dependency|debug\n18|None|debug")
    _tool(tmp_path, "sinfo", "node1|idle|none\nnode2|drain|workshop dry run\nnode2|drain|workshop dry run")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # theirs first; cat from the system
    assert sweep.waiting(["16", "17", "18"]) == {
        "16": "Resources; taking no job in partition debug: node2 drain (workshop dry run)"}
    _tool(tmp_path, "sinfo", "node1|mix|none\nnode2|idle~|none")  # a powered-down node powers up: it takes jobs
    assert sweep.waiting(["16"]) == {"16": "Resources"}


def test_without_slurms_clients_nothing_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sweep.waiting(["16"]) == {}


@pytest.mark.parametrize("raw, seconds", [(None, 20.0), ("2", 2.0), ("0", 0.0), ("x", None), ("nan", None),
                                          ("-1", None)])
def test_the_wait_before_saying_why_is_seconds(monkeypatch, raw, seconds):
    if raw is not None:
        monkeypatch.setenv("SCALELAB_PENDING_AFTER_S", raw)
    else:
        monkeypatch.delenv("SCALELAB_PENDING_AFTER_S", raising=False)
    if seconds is None:
        with pytest.raises(UsageError, match="SCALELAB_PENDING_AFTER_S="):
            sweep.pending_after_s()
    else:
        assert sweep.pending_after_s() == seconds
