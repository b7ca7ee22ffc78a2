"""src/submit.py --cluster local: submitit's LocalExecutor runs the real jobs one after another, then the report."""

import re

import pytest

from helpers import FAKE_SECRETS, load_results, run_script

pytestmark = pytest.mark.slow
MLP = ["--model", "mlp", "--num_samples", "2048", "--max_epochs", "1", "--warmup_steps", "2"]


def test_repeats_of_a_shape_are_repeats_in_the_report_and_keep_no_secret(tmp_path):
    proc = run_script("submit.py", "--cluster", "local", "--shapes", "1x1", "--repeats", "2",
                      "--output_dir", tmp_path, "--", *MLP, env=FAKE_SECRETS, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.startswith("running 2 job(s) one after another on this machine")
    runs = load_results(tmp_path)
    assert len(runs) == 2 and {r["launch"]["launcher"] for r in runs} == {"submitit-local"}
    scaling = proc.stdout.split("Scaling (baseline")[1].splitlines()
    row = next(line.split() for line in scaling if line.startswith("1 "))
    assert row[:3] == ["1", "1", "2"]  # devices, nodes, runs: the two repeats combined, not two configurations
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):  # results and submitit's logs and pickles
        data = path.read_bytes()
        assert not [n for n, v in FAKE_SECRETS.items() if v.encode() in data], f"a secret leaked into {path}"


def test_a_job_that_fails_is_named_and_the_sweep_exits_1(tmp_path):
    proc = run_script("submit.py", "--cluster", "local", "--shapes", "1x1", "--output_dir", tmp_path, "--", *MLP,
                      env={"SCALELAB_FAULT": "raise@step=3,rank=0"}, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("submit.py: job failed: 1x1 job ")]
    assert len(failed) == 1, proc.stderr[-2000:]
    assert re.search(r"job \d+: run ended with status failed: RuntimeError: injected fault .*\(log: \S+_log\.err\)$",
                     failed[0]), failed[0]  # train.py's own line, and where the full log is
    (r,) = load_results(tmp_path)
    assert r["status"] == "failed" and "Runs that did not complete" in proc.stdout


def test_without_workload_flags_the_sweep_runs_what_the_jobs_run():
    from scalelab.launch.sweep import default_workload

    assert default_workload([], "cpu") == ["--config", "mlp"]
    assert default_workload(["--max_steps", "9"], "auto") == ["--config", "gpt-small", "--max_steps", "9"]
    assert default_workload(["--model", "mlp"], "auto") == ["--model", "mlp"]
    assert default_workload(["--config=gpt-xl"], "gpu") == ["--config=gpt-xl"]


def test_the_site_file_is_found_where_the_user_stands(tmp_path, monkeypatch):
    from scalelab.errors import UsageError
    from scalelab.launch.sweep import find_site

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"no slurm_jobs/site.sh here .*give --site FILE"):
        find_site(None)
    (tmp_path / "slurm_jobs").mkdir()
    (tmp_path / "slurm_jobs" / "site.sh").write_text("export SBATCH_PARTITION=gpu\n")
    assert find_site(None) == str(tmp_path / "slurm_jobs" / "site.sh")
    (tmp_path / "mine.sh").write_text("")
    assert find_site("mine.sh") == str(tmp_path / "mine.sh")


def _sbatch_header(tmp_path, site, nodes, gpus, *argv):
    """The #SBATCH lines submitit would submit for one shape, with the site file's settings `site`."""
    from scalelab.launch.sweep import Submitter, build_parser

    args = build_parser().parse_args(["--output_dir", str(tmp_path), *argv])
    executor = Submitter(args, site, str(tmp_path / "sub"), "gpu", [], "site.sh").executor(nodes, gpus)
    text = executor._make_submission_file_text("python -c pass", "%j")
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def test_the_sweep_asks_for_gpus_of_any_type_unless_the_profile_names_one(tmp_path):
    assert "#SBATCH --gres=gpu:4" in _sbatch_header(tmp_path, {}, 2, 4)
    typed = _sbatch_header(tmp_path, {"SCALELAB_GPU_TYPE": "h100"}, 1, 1)
    assert "#SBATCH --gres=gpu:h100:1" in typed
    untyped = _sbatch_header(tmp_path, {"SCALELAB_GPU_TYPE": "h100"}, 1, 4, "--gres_type", "")
    assert "#SBATCH --gres=gpu:4" in untyped
    assert not [line for line in untyped if "gpus-per-node" in line]


def test_multi_gpu_shapes_ask_for_whole_nodes_unless_the_profile_shares_them(tmp_path):
    assert "#SBATCH --exclusive" in _sbatch_header(tmp_path, {}, 1, 4)
    assert not [line for line in _sbatch_header(tmp_path, {}, 1, 1) if "exclusive" in line]  # the 1-GPU baseline
    assert "#SBATCH --exclusive=user" in _sbatch_header(tmp_path, {"SBATCH_EXCLUSIVE": "user"}, 2, 4)
