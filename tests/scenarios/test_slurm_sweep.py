"""slurm_jobs/sweep.sh and salloc + srun, against the real local SLURM cluster (tests/slurm_cluster/, conftest's
`slurm_env`): the sweep's three jobs and the report job that SLURM holds until they have ended (afterany), a
failed and a cancelled job named by the report, and the salloc job name Lightning ignores, refused in one line."""

import re
import select
import subprocess
import sys
import time

import pytest

from helpers import ROOT, drained, load_results

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
WORKLOAD = ("--threads", "1", "--num_samples", "4096", "--max_epochs", "1")  # the MLP, a few steps
RUNNING = ("", "PENDING", "RUNNING", "COMPLETING", "REQUEUED")


def sweep(env, out, *train_args):
    proc = subprocess.run(["bash", str(ROOT / "slurm_jobs" / "sweep.sh"), "--output_dir", str(out), "--", *WORKLOAD,
                           *train_args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr
    ids = re.findall(r"^  (\d+) +slurm_jobs/", proc.stdout, re.M)
    assert len(ids) == 4, proc.stdout
    return proc.stdout, ids


def sacct(env, ids, fields="JobID,JobName,State,Start,End"):
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(ids), f"--format={fields}"], env=env,
                         capture_output=True, text=True).stdout
    return {row.split("|")[0]: row.split("|")[1:] for row in out.splitlines() if row}


def wait_ended(env, ids, timeout=420):
    """{job id: [name, state, start, end]} once every job has ended (a pending job here waits for the cores of
    another run sharing the cluster)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        rows = sacct(env, ids)
        if len(rows) == len(ids) and all(row[1].split()[0] not in RUNNING for row in rows.values()):
            return rows
        time.sleep(2)
    raise AssertionError(f"jobs {ids} not ended within {timeout} s: {sacct(env, ids)}")


def test_sweep_runs_the_report_after_the_three_jobs(slurm_env, tmp_path):
    started = time.time()
    printed, ids = sweep(slurm_env, tmp_path)
    *training, report = ids
    assert f"sacct -j {','.join(ids)}" in printed and "squeue --me" in printed
    assert f"report: {tmp_path}/slurm-{report}.out" in printed
    rows = wait_ended(slurm_env, ids)
    print(f"\nsweep.sh: 3 jobs and the report in {time.time() - started:.1f} s")
    assert [rows[i][:2] for i in ids] == [["sl-1gpu", "COMPLETED"], ["sl-1x4gpu", "COMPLETED"],
                                          ["sl-2x4gpu", "COMPLETED"], ["sl-report", "COMPLETED"]]
    assert rows[report][2] >= max(rows[i][3] for i in training)  # started once the last of them had ended
    log = (tmp_path / f"slurm-{report}.out").read_text()
    assert f"scalelab report job {report}: jobs {' '.join(training)}" in log
    assert len(re.findall(r"^\d+ +sl-\w+ +COMPLETED +0:0", log, re.M)) == 3, log
    assert "Scaling (baseline: 1 device" in log and "report.sh:" not in log
    assert sorted(r["launch"]["world_size"] for r in load_results(tmp_path)) == [1, 4, 8]
    assert {p.name for p in (tmp_path / "report").iterdir()} >= {"scaling.csv", "report.md", "summary.json"}


def test_report_still_runs_and_names_the_failed_and_the_cancelled_job(slurm_env, tmp_path):
    """`-- --devices 4` reaches every job: the 1-GPU job's one task fails at once (size mismatch); the 2-node job
    is cancelled before it starts. afterany: the report runs all the same, and its job ends FAILED, which
    `sweep.sh --wait` hands on as its own exit status after printing the report's log."""
    proc = subprocess.Popen(["bash", str(ROOT / "slurm_jobs" / "sweep.sh"), "--wait", "--output_dir", str(tmp_path),
                             "--", *WORKLOAD, "--devices", "4"], cwd=ROOT, env=slurm_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    head = []
    while not head or not head[-1].startswith("report: "):
        head.append(proc.stdout.readline())
        assert head[-1], f"sweep.sh ended early: {''.join(head)}{proc.stderr.read()}"
    one_gpu, four, two_nodes, report = ids = re.findall(r"^  (\d+) +slurm_jobs/", "".join(head), re.M)
    subprocess.run(["scancel", two_nodes], env=slurm_env, check=True)
    rest, err = proc.stdout.read(), proc.stderr.read()  # not communicate(): it would skip what readline buffered
    err = "".join(line for line in err.splitlines(True) if " is waiting in the queue: " not in line)  # cores
    assert proc.wait(timeout=60) == 1 and err == "", rest + err
    rows = wait_ended(slurm_env, ids)
    states = [rows[i][1].split()[0] for i in ids]
    assert states == ["FAILED", "COMPLETED", "CANCELLED", "FAILED"], rows
    log = (tmp_path / f"slurm-{report}.out").read_text()
    assert rest.startswith(f"waiting for the report job {report} ") and rest.endswith(log)  # the log, printed
    assert "report.sh: 2 of 3 job(s) did not complete; the tables hold the ones that did:" in log
    assert (f"report.sh: job {one_gpu} (sl-1gpu) FAILED: train.py: error: --devices 4 does not match SLURM "
            "--ntasks-per-node=1") in log
    assert f"report.sh: job {two_nodes} (sl-2x4gpu) CANCELLED: " in log
    assert "Scaling (baseline: 4 devices" in log  # the job that completed, in the tables
    assert "no 1-device run of this group completed: each speedup is against 4 devices, not one" in log
    assert [r["launch"]["world_size"] for r in load_results(tmp_path)] == [4]


def test_a_job_that_waits_for_a_drained_node_is_said_why(slurm_env, tmp_path):
    """The dry run: node2 drained, `sweep.sh --wait` waited silently for good (only squeue showed why). The job
    that waits is named with SLURM's reason; once the node is back the sweep ends as usual."""
    # a job of the test before, still ending on node2, would make it `drng` (draining), not `drain`
    left = drained(slurm_env)
    assert not left, f"jobs still queued from the tests before: {left}"
    subprocess.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=workshop dry run"],
                   env=slurm_env, check=True)
    try:
        proc = subprocess.Popen(["bash", str(ROOT / "slurm_jobs" / "sweep.sh"), "--wait", "--output_dir",
                                 str(tmp_path), "--", *WORKLOAD], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**slurm_env, "SCALELAB_PENDING_AFTER_S": "2"})
        said, deadline = [""], time.time() + 120
        while "(sl-2x4gpu)" not in said[-1]:  # the 1-node jobs may wait for a core first
            assert select.select([proc.stderr], [], [], max(0.0, deadline - time.time()))[0], f"not said: {said}"
            said.append(proc.stderr.readline())
            assert said[-1], f"sweep.sh ended without saying why: {said}"
    finally:
        subprocess.run(["scontrol", "update", "NodeName=node2", "State=RESUME"], env=slurm_env, check=True)
    rest, err = proc.communicate(timeout=420)
    assert re.fullmatch(r"sweep\.sh: job \d+ \(sl-2x4gpu\) is waiting in the queue: \w+.*; taking no job in "
                        r"partition debug: node2 drain \(workshop dry run\) \(squeue --me\)\n", said[-1]), said
    assert proc.returncode == 0, rest + err
    assert sorted(r["launch"]["world_size"] for r in load_results(tmp_path)) == [1, 4, 8]


def salloc(env, srun_args, out, nodes=2):
    """`salloc -N2 bash -c "srun ... python src/train.py ..."`: salloc names the job 'interactive'."""
    train = " ".join([sys.executable, "src/train.py", "--config", "mlp", *WORKLOAD, "--output_dir", str(out)])
    return subprocess.run(["salloc", f"-N{nodes}", "bash", "-c", f"srun {srun_args} {train}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_srun_in_a_salloc_allocation_is_refused_in_one_line_and_the_named_step_trains(slurm_env, tmp_path):
    # without the check: 2 unrelated 1-rank runs, `launcher: local`, one result.json per node (measured, docs/05)
    proc = salloc(slurm_env, "-n 2", tmp_path / "plain")
    errors = [line for line in proc.stderr.splitlines() if "error: srun started" in line]
    assert proc.returncode == 2 and len(errors) == 2, proc.stdout + proc.stderr  # one line from each task
    assert errors[0].startswith("train.py: error: srun started 2 tasks in a job named 'interactive' (salloc's "
                                "default), which Lightning does not treat as SLURM")
    assert "Traceback" not in proc.stderr and load_results(tmp_path / "plain") == []
    # the srun line the error names: one 2-rank run across node1 and node2
    proc = salloc(slurm_env, "--job-name=scalelab --ntasks-per-node=1", tmp_path / "named")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launcher: slurm" in proc.stdout
    (result,) = load_results(tmp_path / "named")
    assert result["launch"]["world_size"] == 2 and result["launch"]["hostnames"] == ["node1", "node2"]
