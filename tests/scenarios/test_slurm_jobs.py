"""Against a real SLURM: real sbatch, real srun tasks on node1 and node2, one gloo process group across them.

The cluster is the project's own (tests/slurm_cluster/start.sh: slurmctld, slurmdbd, two slurmd on this host).
Where it cannot run (not root, no apt) these tests skip with the reason; under CI (CI=true) they must run.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from helpers import ROOT, _wait_for, load_results, run_script, sacct_state, sbatch_wait
from scalelab.report import frames

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def sbatch_outputs(slurm_env, tmp_path_factory):
    """The three workshop scripts, as users submit them, with identical workload arguments."""
    out = tmp_path_factory.mktemp("slurm-outputs")
    env = {**slurm_env, "OUTPUT_DIR": str(out), "SCALELAB_TEST_LOGS": str(out)}
    started, jobs = time.time(), {}
    for script in ("single_gpu.sh", "single_node_multi_gpu.sh", "multi_node_multi_gpu.sh"):
        rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / script, "--threads", "1")
        assert rc == 0, f"{script} failed (job {job_id}):\n{log[-4000:]}"
        jobs[script] = (job_id, log)
    print(f"\nthree sbatch scripts ran in {time.time() - started:.1f} s")
    return out, env, jobs


def test_sbatch_scripts_form_one_scaling_group(sbatch_outputs):
    out, env, jobs = sbatch_outputs
    found = {r["launch"]["world_size"]: r for r in load_results(out)}
    assert sorted(found) == [1, 4, 8]
    eight = found[8]
    assert eight["launch"]["launcher"] == "slurm" and eight["launch"]["num_nodes"] == 2
    assert eight["launch"]["hostnames"] == ["node1", "node2"]  # real srun tasks on both nodes, one process group
    assert sorted({r["host"] for r in eight["ranks"]}) == ["node1", "node2"] and len(eight["ranks"]) == 8
    assert eight["slurm"]["job_id"] == jobs["multi_node_multi_gpu.sh"][0]
    assert [found[n]["slurm"]["cluster"] for n in (1, 4, 8)] == ["scalelab"] * 3  # a job id is one cluster's
    assert eight["environment"]["SLURM_NNODES"] == "2"
    # every script asks --exclusive, the 1-GPU baseline's too: each result says its nodes were its alone
    assert [found[n]["slurm"]["exclusive"] for n in (1, 4, 8)] == [True, True, True]
    assert eight["environment"]["SCALELAB_JOB_OVERSUBSCRIBE"] == "NO"
    # srun gets the header's --cpus-per-task (Slurm >= 22.05 does not pass it on by itself)
    assert eight["environment"]["SRUN_CPUS_PER_TASK"] == eight["environment"]["SLURM_CPUS_PER_TASK"] == "4"
    # 8 ranks on this machine's cores: recorded and flagged, never shown as plain scaling
    if len(os.sched_getaffinity(0)) < 8:
        assert eight["launch"]["oversubscribed"].startswith("oversubscribed: ranks ")
    for job_id, log in jobs.values():
        assert f"scalelab job {job_id}" in log  # the banner, with what the site profile set
        assert "profile cpu (set: SCALELAB_ACCELERATOR)" in log
        assert sacct_state(env, job_id) == "COMPLETED"
    runs = frames.runs_frame(load_results(out))
    assert runs["group"].nunique() == 1
    proc = run_script("benchmark.py", "--output_dir", out)
    assert proc.returncode == 0
    assert len(os.sched_getaffinity(0)) >= 8 or f"! {eight['run_id']}: oversubscribed: ranks " in proc.stdout
    print(proc.stdout)
    scaling = frames.scaling_frame(runs).set_index("world_size")
    assert list(scaling.index) == [1, 4, 8] and scaling.loc[8, "num_nodes"] == 2


def _held(env, *sbatch):
    """Submit held (it never runs), return what `scontrol show job` says of it as {field: value}, then cancel it."""
    submit = 'source slurm_jobs/site.sh >/dev/null && sbatch --hold --parsable "$@"'
    proc = subprocess.run(["bash", "-c", submit, "sbatch", *sbatch], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    subprocess.run(["scancel", job], env=env, capture_output=True)
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def test_what_the_job_scripts_ask_slurm_for(slurm_env, tmp_path):
    """The headers as SLURM reads them (held jobs): GPUs of any type (this cluster's are typed a100, as AutoDetect
    or a site's gres.conf types them), whole nodes for the multi-GPU scripts, and the profile's host memory per GPU
    and node sharing, which sbatch reads from the variables site.sh exports (they win over the headers)."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    out = f"--output={tmp_path}/slurm-%j.out"
    gpus = {script: _held(env, out, f"slurm_jobs/{script}") for script in
            ("single_gpu.sh", "single_node_multi_gpu.sh", "multi_node_multi_gpu.sh", "allreduce_bench.sh",
             "gpu_selfcheck.sh")}
    assert {s: (j["TresPerNode"], j["OverSubscribe"]) for s, j in gpus.items()} == {
        "single_gpu.sh": ("gres:gpu:1", "NO"), "single_node_multi_gpu.sh": ("gres:gpu:4", "NO"),
        "multi_node_multi_gpu.sh": ("gres:gpu:4", "NO"), "allreduce_bench.sh": ("gres:gpu:4", "NO"),
        "gpu_selfcheck.sh": ("gres:gpu:4", "NO")}
    assert "MemPerTres" not in gpus["single_gpu.sh"]  # the cpu profile asks no memory: the partition's default
    # the auto profile's floor, made smaller than this cluster's 16000M nodes; a profile that shares whole nodes
    shared = _held({**env, "SCALELAB_PROFILE": "auto", "SCALELAB_MEM_PER_GPU": "2G", "SBATCH_EXCLUSIVE": "user"}, out,
                   "slurm_jobs/single_node_multi_gpu.sh")
    assert (shared["MemPerTres"], shared["TRES"].split(",")[1], shared["OverSubscribe"]) == (
        "gres:gpu:2048", "mem=8G", "USER")  # 4 GPUs x 2G
    typed = _held(env, out, "--gres=gpu:a100:4", "slurm_jobs/single_node_multi_gpu.sh")  # what SCALELAB_GPU_TYPE adds
    assert typed["TresPerNode"] == "gres:gpu:a100:4"


def test_gpu_selfcheck_script_runs_its_checks_on_the_cpu_profile(slurm_env, tmp_path):
    """The GPU self-check job, shrunk to 2 nodes x 1 task and the MLP: its runs, then a verdict per claim. This
    cluster's two nodes are one machine: each node's rank 0 pins itself to core 0, and the check says so (FAIL,
    exit 1), as it would for a site whose binding gave two ranks one core."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path), "GPUS_PER_NODE": "1",
           "MODEL": "mlp"}
    rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / "gpu_selfcheck.sh", "--threads", "1",
                                  sbatch_args=("--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"))
    assert rc != 0 and sacct_state(env, job_id) == "FAILED", log[-4000:]
    assert re.search(r"FAIL  cores per rank .*\(oversubscribed: ranks 0 and 1 shared core \d+\)", log), log[-3000:]
    assert "PASS  process group backend" in log and "PASS  all-reduce time within its step" in log
    assert re.search(r"SKIP  NCCL transport between nodes +CPU run", log)
    # the 1-device baseline ran as one task on one node of the allocation, the same job as the 2-node run
    assert re.search(r"PASS  same job at 1 and N devices +1 and 2 devices: float32 matmuls", log), log[-3000:]
    assert re.search(r"PASS  precision as asked +1 device: float32 matmuls \(32\); 2 devices: float32", log)
    assert f"self-check: 1 FAIL, 6 PASS ({tmp_path}/selfcheck-{job_id})" in log
    kinds = sorted((r["kind"], r["launch"]["world_size"]) for r in load_results(tmp_path / f"selfcheck-{job_id}"))
    assert kinds == [("allreduce", 2), ("training", 1), ("training", 2)]


def test_size_mismatch_fails_fast_with_the_fix(slurm_env, tmp_path):
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path)}
    started = time.time()
    rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / "single_node_multi_gpu.sh", "--threads", "1",
                                  sbatch_args=["--ntasks-per-node=2"], timeout=120)
    took = time.time() - started
    assert rc != 0 and took < 60, f"took {took:.0f} s, rc {rc}"
    assert "train.py: error: --devices 4 does not match SLURM --ntasks-per-node=2" in log
    assert "--ntasks-per-node=4" in log  # the fix
    assert sacct_state(env, job_id) == "FAILED"
    assert load_results(tmp_path) == []


def test_submitit_sweep_on_slurm_runs_a_users_own_model(slurm_env, tmp_path):
    """submit.py's three jobs (1x1, 1x4, 2x4) of the example model outside the package (`--model tiny_cnn:SPEC`, the
    module on PYTHONPATH only): every rank on both nodes declares it, and the report counts its FLOPs."""
    env = {**slurm_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "examples" / "tiny_cnn"),
                                                                   slurm_env.get("PYTHONPATH")]))}
    started = time.time()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "src" / "submit.py"), "--cluster", "slurm", "--output_dir", str(tmp_path),
         "--poll_s", "1", "--", "--model", "tiny_cnn:SPEC", "--max_steps", "20", "--warmup_steps", "5",
         "--threads", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"\nsubmitit sweep (1x1, 1x4, 2x4) took {time.time() - started:.1f} s")
    found = {r["launch"]["world_size"]: r for r in load_results(tmp_path)}
    assert sorted(found) == [1, 4, 8]
    assert found[8]["launch"]["hostnames"] == ["node1", "node2"]
    assert {(r["status"], r["workload"]["model"], r["timing"]["flops_from"].split()[0]) for r in found.values()} == {
        ("completed", "tiny-cnn", "counted")}
    assert "Scaling (baseline: 1 device" in proc.stdout and "submitted 3 job(s) to slurm" in proc.stdout
    assert "1 scaling group(s)" in proc.stdout
    assert "TFLOP/s and MFU of tiny-cnn: FLOPs per sample counted" in proc.stdout
    # srun is told the cores per task (Slurm >= 22.05 no longer passes the allocation's on)
    scripts = list(tmp_path.glob("submitit/*/*_submission.sh"))
    assert len(scripts) == 3 and all(re.search(r"^srun .*--cpus-per-task=\d+", p.read_text(), re.M) for p in scripts)


def test_allreduce_bench_across_two_nodes(slurm_env, tmp_path):
    """slurm_jobs/allreduce_bench.sh as submitted (2 nodes x 4 tasks): one gloo group over node1 and node2."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path)}
    started = time.time()
    rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / "allreduce_bench.sh", "--max_bytes", "256K",
                                  "--iters", "2", "--warmup_iters", "1", timeout=300)
    print(f"\nallreduce_bench.sh (2 nodes x 4 tasks) took {time.time() - started:.1f} s")
    assert rc == 0, f"job {job_id} failed:\n{log[-4000:]}"
    assert f"scalelab all-reduce job {job_id}" in log and "Avg bus bandwidth:" in log
    (r,) = load_results(tmp_path)
    launch = r["launch"]
    assert r["kind"] == "allreduce" and r["status"] == "completed" and r["error"] is None
    shape = (launch["launcher"], launch["world_size"], launch["num_nodes"], launch["devices"])
    assert shape == ("slurm", 8, 2, 4)
    assert launch["hostnames"] == ["node1", "node2"] and launch["backend"] == "gloo"
    assert [row["bytes"] for row in r["rows"]] == [32768, 65536, 131072, 262144]
    assert all(row["wrong"] == 0 and row["busbw_GBps"] > 0 for row in r["rows"])
    assert r["summary"]["large_msg_busbw_GBps"] == sorted(row["busbw_GBps"] for row in r["rows"][-3:])[1]  # plateau
    assert r["slurm"]["job_id"] == job_id and sacct_state(env, job_id) == "COMPLETED"


def test_requeued_job_resumes_from_its_checkpoint_and_counts_once(slurm_env, tmp_path):
    """SLURM's warning signal (USR1, what `#SBATCH --signal=SIGUSR1@90` sends before the time limit): at the next
    agreed step the run saves a checkpoint and requeues the job; the attempt ends "preempted"; the job comes back
    (restart 1), resumes from the checkpoint at the saved step, completes, and the report counts the job once, at its
    newest attempt."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    log = tmp_path / "slurm-%j.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", str(ROOT / "slurm_jobs" / "single_gpu.sh"),
                          "--threads", "1", "--max_epochs", "30"], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    _wait_for("the first attempt training", lambda: job_log.exists() and "scalelab: mlp" in job_log.read_text(), 120)
    time.sleep(4)  # some steps
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)

    def requeued():
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], env=env, capture_output=True, text=True)
        return "PENDING" in out.stdout
    _wait_for("the job back in the queue", requeued, 60)
    # a requeued job waits for a begin time; start it now rather than minutes later
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, capture_output=True)

    def finished():
        state = sacct_state(env, job, timeout=2)
        return state if state and state not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED") else None
    state = _wait_for("the second attempt to finish", finished, 240)
    assert state == "COMPLETED", f"job {job} ended {state}:\n{job_log.read_text()[-3000:]}"

    attempts = sorted(load_results(tmp_path), key=lambda r: r["slurm"]["restart_count"])
    assert [(r["status"], r["slurm"]["restart_count"]) for r in attempts] == [("preempted", 0), ("completed", 1)]
    assert "requeue" in attempts[0]["error"] and attempts[1]["error"] is None
    saved = attempts[0]["timing"]["steps"]
    assert not (tmp_path / "checkpoints" / job / "requeue.ckpt").exists()  # resumed from, then removed
    # --open-mode=append: the requeue adds the second attempt to the log instead of truncating the first away
    assert "restart 0" in job_log.read_text() and "restart 1" in job_log.read_text()
    assert f"checkpoints/{job}/requeue.ckpt at step {saved} (a requeued job)" in job_log.read_text()
    c = attempts[1]["config"]  # one rank: num_samples // batch steps an epoch
    assert attempts[1]["timing"]["steps"] == c["max_epochs"] * (c["num_samples"] // c["batch_size"]) - saved
    proc = run_script("benchmark.py", "--output_dir", tmp_path)
    assert proc.returncode == 0 and f"scalelab report: 1 run(s) in {tmp_path}/" in proc.stdout, proc.stdout
    assert "did not complete" not in proc.stdout  # the preempted attempt is superseded, not a failed run


def test_requeue_with_two_ranks_checkpoints_and_ends_at_one_step(slurm_env, tmp_path):
    """USR1 reaches both ranks (node1, node2) mid-run: they agree at the same step, save the checkpoint together
    (its barrier meets a barrier, never a gradient all-reduce) and the attempt ends "preempted" with both ranks'
    figures, before the requeue's SIGTERM can split the ranks."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    log = tmp_path / "slurm-%j.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", "--ntasks-per-node=1", "--cpus-per-task=1",
                          str(ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh"), "--devices", "1", "--threads", "1",
                          "--max_epochs", "40"], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    try:
        _wait_for("training", lambda: job_log.exists() and "scalelab: mlp" in job_log.read_text(), 120)
        time.sleep(4)
        subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)
        _wait_for("the preempted record", lambda: load_results(tmp_path), 60)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
    (first,) = load_results(tmp_path)
    assert first["status"] == "preempted" and "requeue" in first["error"], job_log.read_text()[-3000:]
    assert first["launch"]["world_size"] == 2 and first["timing"]["steps"] >= 1 and len(first["ranks"]) == 2
    assert (tmp_path / "checkpoints" / job / "requeue.ckpt").exists()


def test_scancel_of_a_two_node_job_ends_both_ranks_within_seconds_with_a_record(slurm_env, tmp_path):
    """`scancel JOB` mid-run (SIGTERM to both tasks, node1 and node2): the ranks agree at the next sync point, stop
    after the same step and rank 0 records both ranks' steps (status timeout), seconds after the scancel: no
    collective inside a signal handler, nothing left for SLURM's SIGKILL."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    log = tmp_path / "slurm-%j.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", "--ntasks-per-node=1", "--cpus-per-task=1",
                          str(ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh"), "--devices", "1", "--threads", "1",
                          "--max_epochs", "200"], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    try:
        _wait_for("training", lambda: job_log.exists() and "scalelab: mlp" in job_log.read_text(), 120)
        time.sleep(4)
        cancelled = time.time()
        subprocess.run(["scancel", job], env=env, check=True)
        _wait_for("the record", lambda: load_results(tmp_path), 30)
        took = time.time() - cancelled
    finally:
        subprocess.run(["scancel", "--signal=KILL", job], env=env, capture_output=True)
    (r,) = load_results(tmp_path)
    assert r["status"] == "timeout" and r["error"].startswith("received SIGTERM"), job_log.read_text()[-3000:]
    assert "the job was cancelled (scancel)" in r["error"]  # SLURM's word for it, not three guesses
    assert [k["rank"] for k in r["ranks"]] == [0, 1] and r["timing"]["steps"] >= 1
    assert took < 10, took
    print(f"\nscancel of a 2-node job: record written {took:.1f} s after it; {r['error']}")


def test_a_rank_that_dies_mid_run_ends_the_job_within_seconds(slurm_env, tmp_path):
    """Rank 1 (node2) crashes in step 5 while rank 0 blocks in the same step for good, as a survivor of a dead NCCL
    peer does (no error ever reaches it). The job scripts' `srun --kill-on-bad-exit=1` ends the step when task 1
    exits non-zero: the job is over seconds later, FAILED, its log naming the task and its exit code. Without the
    flag rank 0 would hold both nodes until its stall deadline (0.9 x --timeout = 108 s here)."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_FAULT": "exit@step=5,rank=1;wedge@step=5,rank=0"}
    log = tmp_path / "slurm-%j.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", "--ntasks-per-node=1", "--cpus-per-task=1",
                          str(ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh"), "--devices", "1", "--threads", "1",
                          "--max_epochs", "200", "--timeout", "120"], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    try:
        _wait_for("training", lambda: job_log.exists() and "scalelab: mlp" in job_log.read_text(), 120)
        started = time.time()

        def ended():
            state = sacct_state(env, job, timeout=2)
            return state if state not in ("", "PENDING", "RUNNING", "COMPLETING") else None
        state = _wait_for("the job's end", ended, 150)
        took = time.time() - started
    finally:
        subprocess.run(["scancel", "--signal=KILL", job], env=env, capture_output=True)
    text = job_log.read_text()
    assert state == "FAILED", f"job {job} ended {state}:\n{text[-3000:]}"
    assert re.search(r"task 1: Exited with exit code 3", text), text[-3000:]
    assert took < 30, f"the job ended {took:.0f} s after training started:\n{text[-3000:]}"
    # srun's SIGTERM reached rank 0 blocked in step 5: its SIGTERM watch wrote the record before the SIGKILL
    # (KillWait = 5 s here), naming rank 1: the one rank that never posted how far it got
    (r,) = load_results(tmp_path)
    assert r["status"] == "failed" and r["error"].startswith("rank 1 never reported while the others waited after "
                                                             "step 4"), r["error"]
    assert "received SIGTERM while blocked during step 5" in r["error"] and r["timing"]["steps"] == 4
    print(f"\nrank 1 died in step 5: job {job} FAILED {took:.1f} s after training started; {r['error']}")


def test_a_rank_that_hangs_is_named_by_its_progress(slurm_env, tmp_path):
    """Rank 1 (node2) blocks for good in step 5 with its process alive; every rank arms the stall deadline, as
    under NCCL. Rank 0 blocks in step 5's all-reduce; each rank's deadline fires (0.9 x --timeout = 18 s); the
    record names rank 1, the one furthest behind (the lowest-numbered rank that stopped would be rank 0 or 1 by
    chance of timing, not by evidence)."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path),
           "SCALELAB_FAULT": "wedge@step=5,rank=1"}
    rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh", "--devices", "1",
                                  "--threads", "1", "--max_epochs", "200", "--timeout", "20",
                                  sbatch_args=("--ntasks-per-node=1", "--cpus-per-task=1"), timeout=300)
    assert rc != 0 and sacct_state(env, job_id) == "FAILED", log[-3000:]
    (r,) = load_results(tmp_path)
    assert r["status"] == "failed" and r["timing"]["steps"] == 4, r["error"]
    assert r["error"].startswith("rank 1 "), r["error"]
    print(f"\nrank 1 hung in step 5: job {job_id}: {r['error']}")


def test_a_one_minute_job_ends_as_a_time_limit_with_a_record_and_is_not_requeued(slurm_env, tmp_path):
    """`sbatch --time=1 slurm_jobs/single_gpu.sh`: the job scripts' --signal=SIGUSR1@90 comes at once (the lead is
    longer than the limit), maybe before torch is imported. The dry run: the task died "User defined signal 1",
    FAILED 10:0, no record; or the job requeued itself every ~2.5 min until cancelled. Now the warning is noted
    from train.py's first line, the run stops at its next sync point and records a time limit, and a one-minute
    job is not requeued (each attempt would end the same way)."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path)}
    rc, job_id, log = sbatch_wait(env, ROOT / "slurm_jobs" / "single_gpu.sh", "--threads", "1", "--max_steps",
                                  "1000000", sbatch_args=["--time=1"], timeout=240)
    (r,) = load_results(tmp_path)
    assert r["status"] == "timeout", log[-3000:]
    assert r["error"].startswith("received SLURM's warning that the job's time limit is near (SIGUSR1)"), r["error"]
    assert "not requeued: its time limit (60 s)" in r["error"] and r["slurm"]["restart_count"] == 0
    assert "User defined signal" not in log and "REQUEUE" not in subprocess.run(
        ["sacct", "-j", job_id, "-n", "-P", "--format=State", "--duplicates"], env=env, capture_output=True,
        text=True).stdout
    print(f"\n--time=1: {r['error']}")


def test_a_repeated_job_id_never_writes_into_another_jobs_log(slurm_env, tmp_path):
    """Job ids repeat (a controller restarted without its state, another cluster's jobs in the folder): with
    --open-mode=append a new job N wrote on the end of the old job N's slurm-N.out. Its first attempt moves the
    other job's log aside."""
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path)}
    shared = tmp_path / "slurm-12.out"
    shared.write_text("scalelab job 12 'sl-1gpu' ... the old job's log\n")
    rc, job_id, _ = sbatch_wait(env, ROOT / "slurm_jobs" / "single_node_multi_gpu.sh", "--threads", "1",
                                sbatch_args=[f"--output={shared}", "--ntasks-per-node=2"], timeout=120)
    log = shared.read_text()
    assert rc != 0 and "does not match SLURM --ntasks-per-node=2" in log  # this job's own log, as it ran
    assert "the old job's log" not in log and f"held another job {job_id}'s log (the job id repeated)" in log
    (aside,) = tmp_path.glob("slurm-12.before-*.out")
    assert aside.read_text() == "scalelab job 12 'sl-1gpu' ... the old job's log\n"


def test_a_report_right_after_sbatch_names_the_jobs_that_have_not_written(slurm_env, tmp_path):
    # the dry run: "run `make demo` or src/train.py first", to a class whose jobs were still pending
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path / "results")}
    job = subprocess.run(["sbatch", "--parsable", "--hold", f"--output={tmp_path}/slurm-%j.out",
                          str(ROOT / "slurm_jobs" / "single_gpu.sh")], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.strip().split(";")[0]
    try:
        proc = run_script("benchmark.py", "--output_dir", tmp_path, env=env)
        missing = run_script("benchmark.py", "--output_dir", tmp_path / "results", env=env)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
    said = re.compile(rf"your SLURM job\(s\) (\d+ \(sl-[\w-]+, \w+\), )*{job} \(sl-1gpu, pending\)(, \d+ \(sl-[\w-]+, "
                      r"\w+\))* have not written theirs: run this again when they end")  # another test's may end
    assert proc.returncode == 1 and said.search(proc.stdout), proc.stdout + proc.stderr
    assert missing.returncode == 2 and said.search(missing.stderr) and "make demo" not in missing.stderr


def test_report_sh_says_so_when_none_of_its_jobs_completed(slurm_env, tmp_path):
    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path), "SCALELAB_TEST_LOGS": str(tmp_path)}
    rc, job_id, _ = sbatch_wait(env, ROOT / "slurm_jobs" / "single_node_multi_gpu.sh", "--threads", "1",
                                sbatch_args=["--ntasks-per-node=2"], timeout=120)
    proc = subprocess.run(["bash", str(ROOT / "slurm_jobs" / "report.sh"), job_id], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "report.sh: none of the 1 job(s) completed; why each did not:" in proc.stderr
    assert "the tables hold the ones that did" not in proc.stderr  # the dry run: said so with no table at all
    assert f"report.sh: job {job_id} (sl-1x4gpu) FAILED: train.py: error: --devices 4 does not match" in proc.stderr


def test_start_sh_on_a_partly_up_cluster_starts_only_what_died_and_keeps_the_queue(slurm_env):
    """The dry run: with one slurmd killed ("a dead node"), re-running the idempotent start.sh restarted the whole
    cluster and wiped every queued job, the accounting history and the job ids (which then repeated)."""
    from helpers import SLURM_STATE_DIR

    held = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"], env=slurm_env,
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        pid = int(open(os.path.join(SLURM_STATE_DIR, "slurmd-node2.pid")).read())
        os.kill(pid, 9)
        _wait_for("slurmd node2 gone", lambda: not os.path.exists(f"/proc/{pid}") or
                  open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z"), 10)
        proc = subprocess.run(["bash", str(ROOT / "tests" / "slurm_cluster" / "start.sh"), SLURM_STATE_DIR],
                              env=slurm_env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert (f"cluster in {SLURM_STATE_DIR} is only partly up: starting what died (slurmd-node2), keeping its "
                "queue and accounting") in proc.stderr
        queued = subprocess.run(["squeue", "-h", "-j", held, "-o", "%T %r"], env=slurm_env, capture_output=True,
                                text=True).stdout.split()
        assert queued == ["PENDING", "JobHeldUser"]
        after = subprocess.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true"],
                               env=slurm_env, capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["scancel", after], env=slurm_env)
        assert int(after) > int(held)  # the ids go on: a job id is still one job's
    finally:
        subprocess.run(["scancel", held], env=slurm_env)


def test_a_node_lost_mid_run_is_named_as_a_lost_node_and_start_sh_brings_it_back(slurm_env, tmp_path):
    """Every process of node2 (its slurmd, the job step, rank 1) killed at once, as a node that loses power: rank 0
    printed gloo's raw "Read error ...: Connection reset by peer ... GLHF!"; now it names the lost rank and node,
    once, and records the run; start.sh then restarts node2's slurmd (only that)."""
    from helpers import SLURM_STATE_DIR

    env = {**slurm_env, "OUTPUT_DIR": str(tmp_path)}
    job = subprocess.run(["sbatch", "--parsable", f"--output={tmp_path}/slurm-%j.out", "--ntasks-per-node=1",
                          "--cpus-per-task=1", str(ROOT / "slurm_jobs" / "multi_node_multi_gpu.sh"), "--devices", "1",
                          "--threads", "1", "--max_epochs", "200"], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    job_log = tmp_path / f"slurm-{job}.out"
    try:
        _wait_for("training", lambda: job_log.exists() and "scalelab: mlp" in job_log.read_text(), 120)
        time.sleep(3)
        node2 = open(os.path.join(SLURM_STATE_DIR, "slurmd-node2.mntns")).read().strip()
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _mount_ns(p) == node2]
        for pid in pids:
            os.kill(pid, 9)
        (r,) = _wait_for("the record", lambda: load_results(tmp_path), 60)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
        repaired = subprocess.run(["bash", str(ROOT / "tests" / "slurm_cluster" / "start.sh"), SLURM_STATE_DIR],
                                  env=slurm_env, capture_output=True, text=True, timeout=120)
    assert r["status"] == "failed" and r["error"].startswith("lost rank 1 (node 2) during step "), r["error"]
    said = [line for line in job_log.read_text().splitlines()  # SLURM's own lines apart (srun's, the scancel's)
            if "error" in line and not line.startswith(("srun", "slurmstepd"))]
    assert len(said) == 1 and "lost rank 1 (node 2)" in said[0] and "GLHF" not in job_log.read_text(), said
    assert repaired.returncode == 0 and "starting what died (slurmd-node2)" in repaired.stderr, repaired.stderr
    _wait_for("the job gone from node2", lambda: not subprocess.run(["squeue", "-h", "-j", job], env=slurm_env,
                                                                     capture_output=True, text=True).stdout, 60)


def _mount_ns(pid: str):
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def test_one_sweep_folder_holds_ddp_and_fsdp_side_by_side(slurm_env, tmp_path):
    """submit.py passes --strategy through to train.py: FSDP across the two real nodes (srun's ranks, Fabric's
    ModelParallelStrategy), then DDP into the same folder; the report puts the two strategies side by side."""
    gpt = ["--model", "gpt", "--preset", "tiny", "--max_steps", "8", "--warmup_steps", "2", "--threads", "1"]
    for strategy in ("fsdp", "ddp"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "src" / "submit.py"), "--cluster", "slurm", "--shapes", "1x1", "2x1",
             "--output_dir", str(tmp_path), "--poll_s", "1", "--", *gpt, "--strategy", strategy],
            cwd=ROOT, env=slurm_env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = {(r["workload"]["strategy"], r["launch"]["world_size"]): r for r in load_results(tmp_path)}
    assert sorted(found) == [("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2)]
    sharded = found["fsdp", 2]
    assert sharded["launch"]["hostnames"] == ["node1", "node2"] and sharded["status"] == "completed"
    assert set(sharded["fingerprint"]["wire"]) == {"_allgather_base_", "_reduce_scatter_base_"}
    side = proc.stdout.split("What strategy bought", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[:3] for line in side.splitlines() if line.startswith(("ddp", "fsdp"))] == [
        ["ddp", "2", "2"], ["fsdp", "2", "2"]], side
