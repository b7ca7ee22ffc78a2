"""cluster.py's checks of an srun step, from the variables SLURM sets (measured on the local cluster, docs/05):
salloc names its job `interactive`, which Lightning does not treat as SLURM, so `srun -n 2 python src/train.py`
there would give two unrelated 1-rank runs; `srun -n N` without --ntasks-per-node Lightning refuses with a
traceback. Both are one line here, with the srun line that works."""

import os
import re
import subprocess

import pytest

from helpers import ROOT, run_script
from scalelab.launch import cluster

# what `salloc -N2` then `srun -n 2 ...` gives each task (printed by the tasks on the local cluster)
SALLOC_SRUN = {"SLURM_JOB_NAME": "interactive", "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_PROCID": "0",
               "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "16"}


def test_srun_tasks_in_a_salloc_allocation_are_refused_with_the_name_to_use():
    line = cluster.slurm_step_problem(SALLOC_SRUN)
    assert line.startswith("srun started 2 tasks in a job named 'interactive'")
    assert "each task would train alone as a 1-rank run" in line
    assert "`srun --job-name=scalelab --ntasks-per-node=1 python src/train.py ...`" in line
    assert "\n" not in line


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_both_names_lightning_ignores(name):
    env = {**SALLOC_SRUN, "SLURM_JOB_NAME": name, "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4"}
    line = cluster.slurm_step_problem(env, script="src/allreduce_bench.py")
    assert f"job named '{name}'" in line and "--ntasks-per-node=4 python src/allreduce_bench.py" in line


@pytest.mark.parametrize("env", [
    {},  # no SLURM at all
    {**SALLOC_SRUN, "SLURM_NTASKS": "1"},  # `srun -n 1` in the allocation: one rank, nothing to join
    {k: v for k, v in SALLOC_SRUN.items() if k not in ("SLURM_STEP_ID", "SLURM_PROCID")},  # the salloc shell
    # the batch script of `sbatch --job-name=bash` (SLURM_PROCID=0 there, but no step): the outside-srun check's case
    {**SALLOC_SRUN, "SLURM_JOB_NAME": "bash", "SLURM_NTASKS_PER_NODE": "1", "SLURM_STEP_ID": None},
    {**SALLOC_SRUN, "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS_PER_NODE": "1"},  # named: SLURM as usual
    {**SALLOC_SRUN, "SLURM_NTASKS": "two"},
], ids=["no-slurm", "one-task", "salloc-shell", "batch-script", "named-job", "garbage"])
def test_what_is_not_refused(env):
    assert cluster.slurm_step_problem({k: v for k, v in env.items() if v is not None}) is None


def test_a_two_task_job_script_that_runs_train_py_outside_srun_is_refused_with_the_srun_line(monkeypatch):
    """The batch script of `sbatch -N2 --ntasks-per-node=1` running `python src/train.py` itself (no srun: no step):
    one process would wait for a second rank that never starts."""
    for name in [k for k in os.environ if k.startswith(("SLURM_", "TORCHELASTIC_"))] + ["WORLD_SIZE", "RANK"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in {"SLURM_JOB_ID": "16", "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS": "2", "SLURM_NNODES": "2",
                        "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(cluster.UsageError) as err:
        cluster.detect(accelerator="cpu")
    assert str(err.value) == ("this SLURM job has 2 tasks but train.py runs outside srun; start it as "
                              "`srun python src/train.py ...`")


def test_ntasks_without_tasks_per_node_is_one_line_with_the_per_node_count():
    env = {**SALLOC_SRUN, "SLURM_JOB_NAME": "scalelab", "SLURM_NTASKS": "8"}
    line = cluster.slurm_step_problem(env)
    assert line == ("srun started 8 tasks with -n/--ntasks, which Lightning refuses: give the tasks per node "
                    "instead, `srun --ntasks-per-node=4 python src/train.py ...`")


def test_train_py_says_it_in_one_line_and_exit_code_2(tmp_path):
    proc = run_script("train.py", "--model", "mlp", "--output_dir", tmp_path, env=SALLOC_SRUN, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("train.py: error: srun started 2 tasks in a job named 'interactive'")
    assert not list(tmp_path.rglob("result.json"))


# --- slurm_jobs/sweep.sh's bad input, without a cluster (tests/test_slurm_sweep.py submits the real thing) ---
SWEEP = ["/bin/bash", "slurm_jobs/sweep.sh"]


def test_sweep_refuses_an_unknown_argument_in_one_line():
    proc = subprocess.run([*SWEEP, "--max_steps", "5"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("sweep.sh: unknown argument '--max_steps' (options: --output_dir DIR, --wait; arguments "
                           "for src/train.py go after --)\n")


def test_sweep_without_sbatch_says_where_to_run_it(tmp_path):
    # a login node without SLURM's commands: an empty PATH (sweep.sh needs nothing but bash before sbatch)
    proc = subprocess.run(SWEEP, cwd=ROOT, env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("sweep.sh: sbatch not found: run this on a SLURM login node")


def test_sweep_submits_three_jobs_then_the_report_after_them(tmp_path):
    """With a stand-in sbatch that records what it is given: the job scripts with the arguments after `--`, logs
    beside the results, the site profile's settings, and the report held by afterany on the three job ids."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "sbatch").write_text('#!/bin/bash\nn=$(( $(cat "$CALLS" 2>/dev/null | wc -l) + 101 ))\n'
                                    'echo "mem=${SBATCH_MEM_PER_GPU:-} config=${CONFIG:-} $*" >> "$CALLS"\n'
                                    'echo "$n;cluster"\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls), "SCALELAB_PROFILE": "a100", "CONFIG": "gpt-tiny"}
    out = tmp_path / "out"
    proc = subprocess.run([*SWEEP, "--output_dir", str(out), "--", "--max_steps", "5"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    logs = f"--parsable --output={out}/slurm-%j.out"
    assert calls.read_text().splitlines() == [
        f"mem=64G config=gpt-tiny {logs} slurm_jobs/single_gpu.sh --max_steps 5",
        f"mem=64G config=gpt-tiny {logs} slurm_jobs/single_node_multi_gpu.sh --max_steps 5",
        f"mem=64G config=gpt-tiny {logs} slurm_jobs/multi_node_multi_gpu.sh --max_steps 5",
        f"mem= config=gpt-tiny {logs} --dependency=afterany:101:102:103 slurm_jobs/report.sh 101 102 103"]
    assert "  104      slurm_jobs/report.sh (starts after 101, 102, 103 have ended: afterany)" in proc.stdout
    assert "watch:  squeue --me        or  sacct -j 101,102,103,104" in proc.stdout


def test_sweep_puts_the_profiles_gpu_type_into_each_jobs_gres(tmp_path):
    """The scripts ask gpu:N, any type; SCALELAB_GPU_TYPE makes it gpu:TYPE:N on sbatch's command line, which wins
    over the header, with each script's own count (an SBATCH_GRES would give all three jobs one count)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$*" >> "$CALLS"\necho "$(( RANDOM + 100 ))"\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls), "SCALELAB_GPU_TYPE": "h100",
           "OUTPUT_DIR": str(tmp_path / "out")}
    proc = subprocess.run(SWEEP, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    asked = [re.findall(r"--gres=\S+", line) for line in calls.read_text().splitlines()]
    assert asked == [["--gres=gpu:h100:1"], ["--gres=gpu:h100:4"], ["--gres=gpu:h100:4"], []]  # the report: none


def test_sweep_wait_holds_until_the_report_job_ends_then_prints_its_log_and_status(tmp_path):
    """--wait: the report goes to `sbatch --wait`, which prints the id when queued and exits with the job's status
    once it has ended (here a stand-in whose report job 'fails' with 1, after writing its log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(
        '#!/bin/bash\n[[ $* != *report.sh* ]] && { echo "$(( RANDOM + 100 ))"; exit 0; }\n'
        '[[ $* == *--wait* ]] || { echo "report.sh submitted without --wait" >&2; exit 9; }\n'
        'echo 4242; sleep 1; printf "scalelab report job 4242\\nreport.sh: 1 of 3 job(s) did not complete\\n" '
        '> "$OUTPUT_DIR/slurm-4242.out"; exit 1\n')
    (bin_dir / "sbatch").chmod(0o755)
    proc = subprocess.run([*SWEEP, "--wait"], cwd=ROOT, env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                          "OUTPUT_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-4:] == [f"report: {tmp_path}/slurm-4242.out",
                          "waiting for the report job 4242 (Ctrl-C stops the waiting, not the jobs)",
                          "scalelab report job 4242", "report.sh: 1 of 3 job(s) did not complete"]


def test_sweep_stops_at_a_refused_submission_and_says_what_went_out(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text('#!/bin/bash\n[[ $* == *multi_node* ]] && { echo "sbatch: error: Batch job '
                                    'submission failed: Requested node configuration is not available" >&2; exit 1; }'
                                    '\necho "7$RANDOM"\n')
    (bin_dir / "sbatch").chmod(0o755)
    proc = subprocess.run(SWEEP, cwd=ROOT, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "OUTPUT_DIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout == ""
    first, second = proc.stderr.splitlines()
    assert first.startswith("sweep.sh: sbatch ") and first.endswith("Requested node configuration is not available")
    assert "slurm_jobs/multi_node_multi_gpu.sh" in first
    assert re.fullmatch(r"sweep.sh: already submitted: 7\d* 7\d* \(scancel 7\d* 7\d* to withdraw them\)", second)


@pytest.mark.slow
def test_a_local_run_where_srun_exists_prints_no_lightning_hint(tmp_path):
    """On a login node (or a laptop with slurm-wlm) `srun` is on PATH: Lightning's detection would warn on every local
    run that srun "is available but not used"; the mistake it means is refused by the checks above, in one line."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    proc = run_script("train.py", "--model", "mlp", "--max_steps", "8", "--output_dir", tmp_path / "out",
                      env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
