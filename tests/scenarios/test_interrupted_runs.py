"""A run that does not complete still leaves a record (status, one-line error, timings so far), never half a file."""

import os
import re
import signal
import time

import pytest

from helpers import load_results, start, wait_for_banner

pytestmark = pytest.mark.slow


def _sigterm_after(tmp_path, seconds, *args):
    """Start train.py, SIGTERM it `seconds` after its banner: it must end as a timeout, in one line."""
    proc = start(tmp_path, *args)
    wait_for_banner(proc)
    time.sleep(seconds)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1].startswith("train.py: error: run ended with status timeout: received SIGTERM")
    (r,) = load_results(tmp_path)
    assert r["status"] == "timeout" and "SIGTERM" in r["error"]
    return r, err


def test_sigterm_mid_run_writes_a_timeout_record(tmp_path):
    """The loop stops at its next sync point (not inside the handler): a clean end, every step so far recorded."""
    r, err = _sigterm_after(tmp_path, 4, "--model", "gpt", "--max_steps", "100000", "--warmup_steps", "2")
    assert r["timing"]["steps"] >= 1 and len(r["ranks"]) == 1 and len(err.strip().splitlines()) == 1
    assert r["error"] == ("received SIGTERM (job time limit, preemption or scancel) and stopped after step "
                          f"{r['timing']['steps']}")
    folder = os.path.dirname(next(tmp_path.rglob("result.json")))
    assert not [f for d in (folder, tmp_path) for f in os.listdir(d) if f.startswith(".tmp-")]  # nor the claim's


def test_sigterm_to_a_two_process_run_is_a_timeout_not_a_failed_rank(tmp_path):
    """SIGTERM to rank 0 only (scancel signals every task; here rank 1 gets nothing): at the next sync point the
    ranks agree, both stop after the same step, nobody is blamed and both ranks are in the record."""
    # 8 s: start-up of rank 1 and some steps (a SIGTERM before the first step is recorded too)
    r, err = _sigterm_after(tmp_path, 8, "--model", "mlp", "--max_epochs", "1000", "--devices", "2", "--timeout", "10")
    assert r["launch"]["world_size"] == 2 and r["status"] == "timeout" and len(r["ranks"]) == 2
    assert not re.search(r"rank \d+ (failed|stopped responding)", err.strip().splitlines()[-1])  # no rank blamed
    assert not _ranks_left(tmp_path), "a rank outlived the run"


def _ranks_left(output_dir, wait_s=10.0) -> list:
    """Pids of processes still running with this output folder on their command line (after up to wait_s)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read().decode(errors="replace")
            except OSError:
                continue
            if str(output_dir) in cmdline and int(pid) != os.getpid():
                left.append(int(pid))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_sigterm_while_the_ranks_never_meet_is_recorded_at_once(tmp_path):
    """Rank 1 never arrives (it sleeps before it joins; under NCCL: a bootstrap on the wrong interface): rank 0
    waits in the rendezvous, in C, where its Python handler never runs. The stall deadline, armed before the ranks
    meet, records the SIGTERM within its grace, well inside SLURM's 30 s before SIGKILL (it took ~50 s, after the
    rendezvous gave up, when the deadline was armed only at the first step)."""
    proc = start(tmp_path, "--model", "mlp", "--devices", 2, env={"SCALELAB_FAULT": "sleep@start=90,rank=1"})
    wait_for_banner(proc)
    time.sleep(5)  # rank 0 is in the rendezvous, waiting for rank 1
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    took = time.time() - sent
    assert proc.returncode == 1 and took < 15, (took, err)
    assert err.strip().splitlines()[-1].startswith(
        "train.py: error: run ended with status timeout: rank 0: received SIGTERM while blocked before the first step")
    (r,) = load_results(tmp_path)
    assert r["status"] == "timeout" and "received SIGTERM while blocked" in r["error"]
