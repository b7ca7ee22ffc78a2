"""slurm_jobs/sweep.sh as a user runs it on a login node, without a cluster: its bad input, and what it hands a
stand-in sbatch on PATH that records its calls (tests/scenarios/test_slurm_sweep.py submits the real thing)."""

import re
import subprocess

from helpers import ROOT

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



def test_a_percent_in_the_output_folder_reaches_sbatch_as_a_literal_percent(tmp_path):
    """sbatch reads %j, %u, %x ... in --output as placeholders: a folder named `run%u` would put the logs under
    the user's name (issue 37). sweep.sh doubles it, as sbatch's own escape (`%%`) wants."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "sbatch").write_text('#!/bin/bash\necho "$*" >> "$CALLS"\necho "$(( RANDOM + 100 ))"\n')
    (bin_dir / "sbatch").chmod(0o755)
    out = tmp_path / "run%u 100%"
    proc = subprocess.run([*SWEEP, "--output_dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "CALLS": str(calls)})
    assert proc.returncode == 0, proc.stderr
    escaped = str(out).replace("%", "%%")
    assert all(f"--output={escaped}/slurm-%j.out " in line for line in calls.read_text().splitlines())
    assert out.is_dir()  # the folder itself is made as named
