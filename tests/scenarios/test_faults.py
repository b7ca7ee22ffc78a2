"""Nothing lost, nothing leaked, nothing hangs: real processes, real faults (CPU DDP with gloo).

Each test starts `src/train.py` as a user would and breaks it: a rank killed with SIGKILL, a rank that raises or
crashes mid-step (SCALELAB_FAULT, the hidden test hook of scalelab/testing/faults.py), a rank that joins too late,
SIGUSR1 with and without SLURM's auto-requeue, two runs writing into one folder at once. Each checks what the user
sees (exit code, the last stderr line), what is recorded (status, error), how long failing took, and that no
process is left behind.
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import FAKE_SECRETS, ROOT, SRC, load_results, run_script, start, wait_for_banner
from scalelab.train.loop import SYNC_EVERY

pytestmark = pytest.mark.slow
TIMEOUT = 20  # --timeout: seconds a rank waits for the others
MARGIN = 10  # what failing may take beyond it (teardown, writing the record, a loaded machine)
MLP_FOREVER = ["--model", "mlp", "--num_samples", "4096", "--max_epochs", "1000", "--warmup_steps", "2"]


def _stat(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])  # state, parent pid


def alive(pid) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def launched_rank(parent_pid, local_rank=1, limit=60) -> int:
    """The pid of the rank that rank 0 (`parent_pid`) started (its environment has LOCAL_RANK=<local_rank>)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                if _stat(name)[1] != parent_pid:
                    continue
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if f"LOCAL_RANK={local_rank}".encode() in fh.read().split(b"\0"):
                        return int(name)
            except (OSError, IndexError, ValueError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no rank with LOCAL_RANK={local_rank} under pid {parent_pid}")


def wait_until_joined(pid, limit=90):
    """The process group has formed once the rank holds sockets to its peers (store + gloo pairs)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if sum(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in fds) >= 2:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("rank 1 never joined the process group")


def finish(proc, limit):
    t0 = time.time()
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"train.py still running {limit} s later: {err[-2000:]}") from None
    return err, time.time() - t0


def signal_rank_1_mid_training(out, signum, env=None):
    """A 2-process run with --timeout TIMEOUT; once training is under way rank 1 gets `signum`.
    Returns (rank 0's process, rank 1's pid, rank 0's stderr, seconds from the signal to rank 0's end)."""
    proc = start(out, *MLP_FOREVER, "--devices", 2, "--timeout", TIMEOUT, env=env)
    wait_for_banner(proc)
    rank1 = launched_rank(proc.pid)
    wait_until_joined(rank1)
    time.sleep(3)  # training under way
    os.kill(rank1, signum)
    err, took = finish(proc, TIMEOUT + MARGIN)
    return proc, rank1, err, took


def the_record(out):
    (r,) = load_results(out)
    folder = os.path.dirname(next(out.rglob("result.json")))
    return r, folder


def assert_no_secret_in_any_file(out):
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "error.log" for p in files)
    for path in files:
        text = path.read_text(errors="replace")
        for name, value in FAKE_SECRETS.items():
            assert value not in text and name not in text, f"{name} leaked into {path}"


def test_rank_killed_with_sigkill_is_named_and_recorded(tmp_path):
    """kill -9 of rank 1 mid-training: rank 0 sees gloo's "Connection closed by peer", knows from the child it
    launched that rank 1 died of SIGKILL, writes a failed record and exits 1 (Lightning alone: exit -9, nothing)."""
    proc, _, err, took = signal_rank_1_mid_training(tmp_path, signal.SIGKILL, env=FAKE_SECRETS)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and took < TIMEOUT + MARGIN, err[-2000:]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert re.match(r"train\.py: error: run ended with status failed: rank 1 stopped responding \(killed by SIGKILL\) "
                    r"(during step \d+|before the first step) \(partial result: .*result\.json\)$", lines[0]), lines[0]
    r, folder = the_record(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("rank 1 stopped responding (killed by SIGKILL)")
    assert len(r["ranks"]) == 1 and r["ranks"][0]["rank"] == 0  # rank 0's own timings, the others are gone
    assert re.search(r"Connection (closed|reset) by peer", open(os.path.join(folder, "error.log")).read())
    assert not [f for d in (folder, tmp_path) for f in os.listdir(d) if f.startswith(".tmp-")]  # nor the claim's
    assert_no_secret_in_any_file(tmp_path)  # the fault path's files too: partial result.json and error.log
    print(f"\nkill -9 rank 1: failed {took:.1f} s after the kill; {lines[0]}")


def test_rank_alive_but_stuck_ends_within_the_timeout_named_and_recorded(tmp_path):
    """kill -STOP of rank 1 (a hung device, a debugger): rank 0's collective times out after --timeout; the line
    names rank 1 as alive but stopped, a failed record is written, and the stopped rank does not outlive the run."""
    proc, rank1, err, took = signal_rank_1_mid_training(tmp_path, signal.SIGSTOP)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and TIMEOUT - 1 < took < TIMEOUT + MARGIN, err[-2000:]
    assert re.match(rf"train\.py: error: run ended with status failed: rank 1 did not answer within {TIMEOUT} s "
                    r"\(--timeout\) (during step \d+|before the first step); its process is alive \(stopped, e\.g\. "
                    r"by SIGSTOP\) \(partial result: .*result\.json\)$", lines[-1]), lines[-1]
    r, _ = the_record(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("rank 1 did not answer within")
    deadline = time.time() + 10
    while alive(rank1) and time.time() < deadline:
        time.sleep(0.2)
    assert not alive(rank1), "the stopped rank outlived the run"


def test_rank_0_killed_is_recorded_by_rank_1_which_then_ends(tmp_path):
    """kill -9 of rank 0 (issue 37: no result.json, no error record, the run vanished from the report): the rank it
    launched gets SIGTERM at once (PR_SET_PDEATHSIG), finds rank 0 gone, records the run into rank 0's folder, and
    ends instead of lingering until its own timeout."""
    proc = start(tmp_path, *MLP_FOREVER, "--devices", 2, "--timeout", TIMEOUT)
    wait_for_banner(proc)
    rank1 = launched_rank(proc.pid)
    wait_until_joined(rank1)
    time.sleep(3)  # training under way
    proc.kill()
    t0 = time.time()
    finish(proc, 10)  # its pipes close only when rank 1, which shares them, is gone too
    deadline = t0 + 10
    while alive(rank1) and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(rank1), "rank 1 outlived the rank 0 that launched it"
    r, folder = the_record(tmp_path)
    assert r["status"] == "failed" and re.match(r"rank 0 died without a word \(SIGKILL, .*\); rank 1 recorded the run "
                                                r"(during step \d+|before the first step)", r["error"]), r["error"]
    assert [k["rank"] for k in r["ranks"]] == [1] and os.path.exists(os.path.join(folder, "error.log"))
    assert os.path.exists(os.path.join(folder, "metrics.csv"))  # rank 0's folder: its curve and the record together


def test_rank_0_stopped_is_recorded_by_rank_1_and_kept_when_rank_0_resumes(tmp_path):
    """kill -STOP of rank 0: rank 1's collective times out after --timeout; rank 0 does not answer, so rank 1
    records the run at once (before: nothing until rank 0 resumed, and then a record blaming "a remote worker
    crashing"). Resumed, rank 0 keeps rank 1's record and ends too."""
    proc = start(tmp_path, *MLP_FOREVER, "--devices", 2, "--timeout", TIMEOUT)
    wait_for_banner(proc)
    rank1 = launched_rank(proc.pid)
    wait_until_joined(rank1)
    time.sleep(3)
    os.kill(proc.pid, signal.SIGSTOP)
    t0 = time.time()
    while alive(rank1) and time.time() < t0 + TIMEOUT + MARGIN:
        time.sleep(0.2)
    took = time.time() - t0
    assert not alive(rank1) and took < TIMEOUT + MARGIN, "rank 1 did not end while rank 0 was stopped"
    r, _ = the_record(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("rank 0 is stopped, e.g. by SIGSTOP"), r["error"]
    os.kill(proc.pid, signal.SIGCONT)
    err, _ = finish(proc, TIMEOUT + MARGIN)
    assert proc.returncode == 1 and "(rank 1 recorded the run: " in err, err[-2000:]
    r, _ = the_record(tmp_path)  # one record, still rank 1's
    assert r["error"].startswith("rank 0 is stopped") and [k["rank"] for k in r["ranks"]] == [1]
    print(f"\nkill -STOP rank 0: rank 1 recorded it {took:.1f} s later; {r['error'][:120]}")


@pytest.mark.parametrize("fault, says", [
    ("raise@step=3,rank=1",
     "rank 1 failed during step 3: RuntimeError: injected fault (SCALELAB_FAULT, rank 1, step 3)"),
    ("exit@step=3,rank=1", "rank 1 stopped responding (exited with code 3) during step 3"),
])
def test_rank_that_fails_mid_step_is_named(tmp_path, fault, says):
    """A rank that raises posts its one-line error for rank 0 (the process group's store) before it exits;
    a rank that crashes (os._exit) is named by its exit code."""
    t0 = time.time()
    proc = run_script("train.py", *MLP_FOREVER, "--devices", 2, "--timeout", TIMEOUT, "--output_dir", tmp_path,
                      env={"SCALELAB_FAULT": fault, **FAKE_SECRETS}, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith(f"train.py: error: run ended with status failed: {says} (partial result: "), lines
    r, folder = the_record(tmp_path)
    assert r["status"] == "failed" and r["error"] == says
    assert r["timing"]["steps"] == 2  # rank 0 finished steps 1 and 2, then waited for rank 1 in step 3
    assert "SCALELAB_FAULT" not in r["environment"]  # the test hook is never part of a result
    assert_no_secret_in_any_file(tmp_path)
    print(f"\n{fault}: run took {time.time() - t0:.1f} s in all; {lines[-1]}")


def test_dead_peer_under_nccl_leaves_a_record_before_the_watchdog(tmp_path):
    """NCCL's way to fail, on CPU: rank 1 crashes in step 3 and rank 0 blocks in step 3 for good, with no error
    (a survivor's device sync). The stall deadline (0.9 x --timeout after the last step) names rank 1, writes
    rank 0's partial record with the blocked main thread's stack, and ends every rank: no hang, one line."""
    t0 = time.time()
    proc = run_script("train.py", *MLP_FOREVER, "--devices", 2, "--timeout", TIMEOUT, "--output_dir", tmp_path,
                      env={"SCALELAB_FAULT": "exit@step=3,rank=1;wedge@step=3,rank=0"}, timeout=120)
    took, lines = time.time() - t0, proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert re.match(r"train\.py: error: run ended with status failed: rank 1 stopped responding \(exited with code 3\) "
                    r"during step 3 \(rank 0: no progress for 18 s during step 3: blocked in a collective or device "
                    r"sync \(stall deadline = 0\.9 x --timeout\)\) \(partial result: .*result\.json\)$",
                    lines[-1]), lines[-1]
    r, folder = the_record(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("rank 1 stopped responding (exited with code 3)")
    assert r["timing"]["steps"] == 2 and r["ranks"][0]["rank"] == 0
    log = open(os.path.join(folder, "error.log")).read()
    assert "main thread, blocked:" in log and "faults.py" in log  # where rank 0 was blocked
    assert took < 0.9 * TIMEOUT + 45, took  # start-up, 2 steps, the deadline, the record: never the watchdog's wait


def test_rank_blocked_alone_ends_at_the_stall_deadline(tmp_path):
    """One process that blocks for good under an NCCL-like backend: its own deadline records it and exits."""
    proc = run_script("train.py", "--model", "mlp", "--max_steps", "50", "--warmup_steps", "2", "--timeout", 6,
                      "--output_dir", tmp_path, env={"SCALELAB_FAULT": "wedge@step=4,rank=0"}, timeout=90)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("train.py: error: run ended with status failed: rank 0: no progress for 5.4 s during "
                               "step 4: blocked"), lines[0]
    r, _ = the_record(tmp_path)
    assert r["status"] == "failed" and r["timing"]["steps"] == 3


def test_rank_that_crashes_under_torchrun_is_named(tmp_path):
    """torchrun starts the ranks (rank 0 is not their parent) and SIGTERMs the others once one dies: rank 0 still
    names the rank (its pid, posted at start-up, is gone from this host) and records "failed", not "timeout"."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun not installed")
    cmd = [torchrun, "--nproc_per_node", "2", "--master_port", "29537", str(SRC / "train.py"), *MLP_FOREVER,
           "--timeout", str(TIMEOUT), "--output_dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SCALELAB_FAULT": "exit@step=3,rank=1"})
    ours = [line for line in proc.stderr.splitlines() if line.startswith("train.py: error:")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stderr[-3000:]
    assert ours[0].startswith("train.py: error: run ended with status failed: rank 1 stopped responding "
                              "(its process is gone) during step 3"), ours
    r, _ = the_record(tmp_path)
    assert r["status"] == "failed" and r["launch"]["launcher"] == "torchrun"


def test_rank_that_never_joins_fails_within_the_timeout(tmp_path):
    """Rank 1 sleeps past --timeout before it joins: rank 0's rendezvous wait is governed by --timeout, it records
    a failed run without timings, says what is missing, and stops the sleeping rank (no orphan)."""
    timeout = 10
    proc = start(tmp_path, *MLP_FOREVER, "--devices", 2, "--timeout", timeout,
                 env={"SCALELAB_FAULT": "sleep@start=120,rank=1"})
    wait_for_banner(proc)
    t0 = time.time()
    rank1 = launched_rank(proc.pid)
    err, _ = finish(proc, timeout + MARGIN + 10)
    took = time.time() - t0
    assert proc.returncode == 1 and took < timeout + MARGIN, (took, err[-2000:])
    (line,) = err.strip().splitlines()
    assert line.startswith("train.py: error: run ended with status failed: rank(s) did not join within 10 s "
                           "(--timeout): waited for 2 processes, 1 arrived; rank 1 started but never joined"), line
    r, _ = the_record(tmp_path)
    assert r["status"] == "failed" and "did not join" in r["error"] and r["timing"]["steps"] == 0
    time.sleep(0.5)
    assert not alive(rank1), "the late rank was left running"
    print(f"\nlate joiner: failed {took:.1f} s after the banner; {line}")


def test_sigusr1_outside_slurm_stops_with_a_record(tmp_path):
    """SIGUSR1's default action kills a process without a word; outside SLURM's requeue it stops the run like
    SIGTERM: at the next step the ranks agree on, status timeout, every step done so far in the record."""
    proc = start(tmp_path, *MLP_FOREVER)
    wait_for_banner(proc)
    time.sleep(2)
    proc.send_signal(signal.SIGUSR1)
    err, took = finish(proc, 30)
    (line,) = err.strip().splitlines()
    match = re.match(r"train\.py: error: run ended with status timeout: received SIGUSR1 \(no SLURM requeue here: "
                     r"handled like SIGTERM\) and stopped after step (\d+) \(partial result: .*result\.json\)$", line)
    assert proc.returncode == 1 and match, line
    r, _ = the_record(tmp_path)
    assert r["status"] == "timeout" and "SIGUSR1" in r["error"] and r["timing"]["steps"] == int(match.group(1))
    assert int(match.group(1)) % SYNC_EVERY == 1  # stopped where the ranks agree, not inside the handler
    print(f"\nSIGUSR1 outside SLURM: stopped {took:.1f} s after the signal; {line}")


def test_sigterm_to_one_of_two_ranks_stops_both_at_one_step_with_every_rank_recorded(tmp_path):
    """scancel sends SIGTERM to every task; here only rank 1 gets it: the ranks still agree at the next sync point,
    both stop after the same step, and (every rank still alive) the record holds both ranks' figures."""
    proc, _, err, took = signal_rank_1_mid_training(tmp_path, signal.SIGTERM)
    (line,) = err.strip().splitlines()
    assert proc.returncode == 1 and re.match(r"train\.py: error: run ended with status timeout: received SIGTERM "
                                             r"\(job time limit, preemption or scancel\) and stopped after step \d+ ",
                                             line), line
    assert took < 10, took  # within seconds, not at --timeout
    r, _ = the_record(tmp_path)
    assert r["status"] == "timeout" and [k["rank"] for k in r["ranks"]] == [0, 1]
    assert len(r["ranks"][0]["step_times_s"]) == len(r["ranks"][1]["step_times_s"]) == r["timing"]["steps"]


def _fake_slurm(tmp_path, restart=0):
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "scontrol").chmod(0o755)
    return log, {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_TASKS_PER_NODE": "1",
                 "SLURM_JOB_NAME": "scalelab-fault-test", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                 "SLURM_NODEID": "0", "SLURM_RESTART_COUNT": str(restart), "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_slurm_requeue_signal_saves_requeues_and_the_next_attempt_resumes(tmp_path):
    """Under SLURM (faked: its environment and an `scontrol` that logs) SIGUSR1 is the time limit's warning: at the
    next agreed step the run saves a checkpoint, runs `scontrol requeue JOB` and ends "preempted"; the requeued
    attempt (SLURM_RESTART_COUNT=1) resumes at the saved step and runs only what is left."""
    log, slurm = _fake_slurm(tmp_path)
    out = tmp_path / "out"
    args = ["--model", "mlp", "--num_samples", "4096", "--max_epochs", "200", "--warmup_steps", "2"]
    proc = start(out, *args, env=slurm)
    wait_for_banner(proc)
    time.sleep(2)
    proc.send_signal(signal.SIGUSR1)
    err, took = finish(proc, 30)
    line = err.strip().splitlines()[-1]
    assert proc.returncode == 1 and re.match(r"train.py: error: run ended with status preempted: received SLURM's "
                                             r"requeue signal \(time limit near\): saved a checkpoint "
                                             r"\(\d+(\.\d+)? KiB in \d+\.\d s\) after step ", line), err[-2000:]
    assert log.read_text().split() == ["requeue", "4242"]
    (first,) = load_results(out)
    assert first["status"] == "preempted" and first["slurm"]["job_id"] == "4242"
    saved = first["timing"]["steps"]
    assert (out / "checkpoints" / "4242" / "requeue.ckpt").exists() and saved % SYNC_EVERY == 1

    _, again = _fake_slurm(tmp_path, restart=1)
    proc = run_script("train.py", *args, "--output_dir", out, env=again, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"scalelab: resumed from {out}/checkpoints/4242/requeue.ckpt at step {saved} (a requeued job)" in proc.stdout
    second = next(r for r in load_results(out) if r["status"] == "completed")
    assert not (out / "checkpoints" / "4242" / "requeue.ckpt").exists()  # served its purpose: removed
    assert second["timing"]["steps"] == 200 * 4096 // 64 - saved  # the rest of the 200 epochs, not all again
    print(f"\nSIGUSR1 under SLURM: preempted {took:.1f} s after the signal at step {saved}; resumed and completed")


def _refusing_slurm(tmp_path, out):
    """The faked job of _fake_slurm, with an `scontrol` that refuses `requeue` (a partition that disallows it, an
    admin's hold) and answers `show job` as at the time limit; each call logged with the result files on disk."""
    log, env = _fake_slurm(tmp_path)
    (tmp_path / "bin" / "scontrol").write_text(
        "#!/bin/sh\n"
        # the records that say how the run ended (the provisional one, written at the start, says it did not)
        f'echo "$1 $2 records=$(find {out} -name result.json -exec grep -L \'"provisional": true\' {{}} + '
        f'2>/dev/null | wc -l)" >> {log}\n'
        'if [ "$1" = requeue ]; then\n'
        '  echo "scontrol: error: Requested operation is presently disabled" >&2; exit 1\n'
        'fi\n'
        'echo "JobId=4242 JobName=x JobState=COMPLETING Reason=TimeLimit"\n')
    return log, {**env, "SCALELAB_JOB_TIME_LIMIT": "00:30:00"}


@pytest.mark.parametrize("signum, call, status, says", [
    (signal.SIGUSR1, "requeue 4242", "timeout", "received SLURM's requeue signal and saved a checkpoint ({size} in "
     "{took} s) after step {step}, but scontrol requeue 4242 failed: scontrol: error: Requested operation is "
     "presently disabled"),
    (signal.SIGTERM, "show job", "timeout", "received SIGTERM: SLURM ended the job at its time limit; stopped after "
     "step {step}"),
])
def test_the_scheduler_is_asked_before_the_record_is_written_and_the_record_says_what_it_answered(
        tmp_path, signum, call, status, says):
    """At the end of a SLURM run rank 0 asks SLURM first (`scontrol requeue`, or `scontrol show job` for why it
    sent SIGTERM), then writes result.json with the answer: a refused requeue is a timeout that says why (SLURM
    will not run the job again), never "preempted"; a SIGTERM at the time limit says so."""
    out = tmp_path / "out"
    log, slurm = _refusing_slurm(tmp_path, out)
    proc = start(out, *MLP_FOREVER, env=slurm)
    wait_for_banner(proc)
    time.sleep(0.5)
    proc.send_signal(signum)
    err, _ = finish(proc, 30)
    assert log.read_text().splitlines() == [f"{call} records=0"], err[-2000:]  # asked once, before the record
    (r,) = load_results(out)
    step = r["timing"]["steps"]
    match = re.search(r"\((\S+ KiB) in (\d+\.\d) s\)", r["error"] or "")
    size, took = match.groups() if match else ("?", "?")
    assert (r["status"], r["error"]) == (status, says.format(step=step, size=size, took=took)), err[-2000:]
    assert err.strip().splitlines()[-1].startswith(f"train.py: error: run ended with status {status}: {r['error']}")
    saved = (out / "checkpoints" / "4242" / "requeue.ckpt").exists()
    assert saved == (signum == signal.SIGUSR1)  # kept: the job may be requeued by hand and resume from it


def test_two_runs_into_one_folder_at_once(tmp_path):
    """Same --output_dir, same --run_name, at the same time: two results, two run ids, both in the report."""
    args = ["--model", "mlp", "--num_samples", "2048", "--max_epochs", "1", "--warmup_steps", "2", "--run_name", "same"]
    procs = [start(tmp_path, *args) for _ in range(2)]
    for proc in procs:
        err, _ = finish(proc, 120)
        assert proc.returncode == 0, err[-2000:]
    found = load_results(tmp_path)
    assert len(found) == 2 and len({r["run_id"] for r in found}) == 2
    assert all(r["status"] == "completed" and r["run_name"] == "same" for r in found)
    report = run_script("benchmark.py", "--output_dir", tmp_path, "--all_runs")
    assert report.returncode == 0, report.stderr
    assert all(r["run_id"] in report.stdout for r in found) and "2 run(s)" in report.stdout


def test_rank_0_blocked_for_good_still_records_the_run_on_sigterm(tmp_path):
    """srun --kill-on-bad-exit, scancel and the time limit send SIGTERM, then SIGKILL KillWait later (5 s on the
    local cluster, 30 s by default). Rank 0 blocked in step 3 (a wedge: the main thread never gets back to a
    step) with --timeout 120, so no stall deadline comes in time: the SIGTERM watch writes the record within
    seconds, and names rank 0 itself as the one behind (rank 1 issued step 3's gradient all-reduce, then waited)."""
    proc = start(tmp_path, *MLP_FOREVER, "--devices", 2, "--timeout", 120,
                 env={"SCALELAB_FAULT": "wedge@step=3,rank=0", "SCALELAB_FAULT_WEDGED": str(tmp_path / "wedged")})
    try:
        wait_for_banner(proc)
        deadline = time.time() + 120
        while not (tmp_path / "wedged").exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # rank 1 reaches step 3's all-reduce and waits there; both ranks are idle
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.time() - sent
    finally:
        proc.kill()
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 1 and took < 5, (took, err[-3000:])
    assert re.match(r"train\.py: error: run ended with status failed: rank 0 hung during step 3: furthest behind "
                    r"\(last completed step by rank: 0: 2, 1: 2; \d+ gradient all-reduces issued, the others up to "
                    r"\d+\) \(rank 0: received SIGTERM while blocked during step 3: no progress for [\d.]+ s after it",
                    last), last
    r, folder = the_record(tmp_path)
    assert r["status"] == "failed" and r["timing"]["steps"] == 2
    assert "main thread, blocked:" in open(os.path.join(folder, "error.log")).read()


def test_the_benchmarks_launcher_killed_leaves_no_rank_and_a_record(tmp_path):
    """kill -9 of allreduce_bench.py's launcher (issue 37: its ranks ran on for ~90 s): each rank gets SIGTERM
    (PR_SET_PDEATHSIG, launch/local.py), rank 0 records the sizes measured so far (status timeout), and both end."""
    proc = subprocess.Popen([sys.executable, str(SRC / "allreduce_bench.py"), "--devices", "2", "--min_bytes", "1M",
                             "--max_bytes", "64M", "--iters", "200", "--output_dir", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout.readline().startswith("scalelab all-reduce")
    ranks = [launched_rank(proc.pid, r) for r in (0, 1)]
    time.sleep(3)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.time() + 15
    while any(map(alive, ranks)) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(alive, ranks)), "a rank outlived its launcher"
    (r,) = load_results(tmp_path)
    assert r["kind"] == "allreduce" and r["status"] == "timeout" and r["error"].startswith("received SIGTERM")


@pytest.mark.parametrize("delay_s", [0.8, 1.6, 2.4, 3.2, 4.5, 6.0])
def test_rank_0_killed_at_any_moment_leaves_a_record_or_nothing(tmp_path, delay_s):
    """kill -9 of rank 0 at moments spread from start-up to the final write, not only the named ones (its run folder
    just made, the ranks not yet met: an empty folder was left, no record, no word from rank 1). Each leaves its
    folder with a record that reads (the provisional one of a rank 0 killed before anyone could record, or rank 1's,
    or the result) or no folder at all; and rank 1 never outlives it."""
    proc = start(tmp_path, "--model", "mlp", "--num_samples", "8192", "--max_steps", "300", "--warmup_steps", "2",
                 "--devices", 2, "--timeout", TIMEOUT)
    time.sleep(delay_s)
    proc.kill()
    finish(proc, 2 * TIMEOUT)  # its pipes close only when rank 1, which shares them, is gone too
    for folder in [p for p in tmp_path.iterdir() if p.is_dir()]:
        assert (folder / "result.json").exists(), f"killed at {delay_s} s: {folder.name} holds {os.listdir(folder)}"
        (record,) = load_results(folder, provisional=True)
        assert record["status"] in ("failed", "completed"), record["status"]
        assert record["status"] == "completed" or "rank 0" in record["error"], record["error"]
