"""scalelab's ReFrame checks (reframe/scalelab_checks.py), run by ReFrame itself (`reframe -C ... -c ... -r`) against
the local 2-node SLURM cluster with its site configuration (reframe/local_cluster.py, the CPU profile): the ladder,
the report over it, the all-reduce benchmark and the self-check pass; the perflog carries, for each figure, the
number the report prints for the same results and the reference scalelab's reference file gives it; and an
impossible reference fails in ReFrame as it fails `benchmark.py --reference`.

The runs are chapter 14's (docs/14-a-nightly-reframe-run.md: the nightly run and the impossible reference), run
once in a participant's checkout for test_docs.py and for these (conftest's `chapter_run`): about a minute of jobs.
"""

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import DOCS, ROOT, SLURM_MARK, run_script
from scalelab.report import perflog as perflog_view
from scalelab.report import reference

LOCAL = ROOT / "reframe" / "local_cluster.py"
CHECKS = ROOT / "reframe" / "scalelab_checks.py"
REFERENCES = ROOT / "reframe" / "references" / "local-cluster.yaml"
PART = Path("scalelab-local") / "debug"  # the system and partition of reframe/local_cluster.py
CHAPTER = DOCS / "14-a-nightly-reframe-run.md"
COLUMNS = ["time", "result", "test", "jobid", "var", "value", "unit", "ref", "lower", "upper"]  # its perflog format


def reframe(env, prefix, *args, config=LOCAL, timeout=420):
    """`reframe -C CONFIG -c reframe/scalelab_checks.py ARGS`, everything it writes under prefix."""
    exe = Path(sys.executable).with_name("reframe")
    if not exe.exists():
        pytest.skip("reframe-hpc is not installed: pip install -e '.[reframe]' (make test installs it)")
    prefix.mkdir(parents=True, exist_ok=True)
    cmd = [str(exe), "-C", str(config), "-c", str(CHECKS), "--prefix", str(prefix),
           "--report-file", str(prefix / "report.json"), *args]
    env = {**env, "TMPDIR": str(prefix)}  # ReFrame's start-up log (rfm-*.log) with the rest, not in /tmp
    return subprocess.run(cmd, cwd=prefix, env=env, capture_output=True, text=True, timeout=timeout)


def perflog(prefix, test) -> list:
    """The perflog of one test as rows {column: text}, the header line left out."""
    lines = (prefix / "perflogs" / PART / f"{test}.log").read_text().splitlines()
    assert lines[0] == "job_completion_time|result|display_name|jobid|perf_var|perf_value|perf_unit|perf_ref|" \
                       "perf_lower_thres|perf_upper_thres"
    return [dict(zip(COLUMNS, line.split("|"))) for line in lines[1:]]


def chapter_block(ran, command):
    """The CompletedProcess of chapter 14's block that runs `command` (its lines joined, spacing collapsed)."""
    found = [proc for _, _, text, proc in ran if command in " ".join(text.replace("\\\n", " ").split())]
    assert found, (f"no block of {CHAPTER.name} ran `{command}`: the chapter dropped it (this file reads what its run "
                   "left), or an earlier block failed (test_docs.py says which)")
    return found[0]


@pytest.fixture(scope="module")
def nightly(slurm_env, chapter_run):
    """One nightly run of every check, as a site runs it: chapter 14's first block."""
    folder, ran, _ = chapter_run(CHAPTER, SLURM_MARK, SLURM_CONF=slurm_env["SLURM_CONF"])
    proc = chapter_block(ran, f"reframe -C {LOCAL.relative_to(ROOT)} -c {CHECKS.relative_to(ROOT)} --prefix "
                              "outputs/reframe --report-file outputs/reframe/report.json --nocolor -r")
    print(proc.stdout[-3000:])
    return folder, ran, proc


@pytest.mark.slurm
@pytest.mark.slow
def test_every_check_passes_on_the_local_cluster(nightly):
    folder, _, proc = nightly
    prefix = folder / "outputs" / "reframe"
    assert proc.returncode == 0, proc.stdout[-9000:]  # the chapter's block: stderr is in stdout
    assert "[  PASSED  ] Ran 6/6 test case(s) from 6 check(s) (0 failure(s)" in re.sub(r"\x1b\[\d*m", "", proc.stdout)
    out = prefix / "output" / PART / "scalelab-cpu"
    selfcheck = (out / "ScalelabSelfcheck" / "rfm_job.out").read_text()
    assert re.search(r"^self-check: 0 FAIL, \d+ PASS", selfcheck, re.M), selfcheck[-3000:]
    assert "PASS  same job at 1 and N devices" in selfcheck and "PASS  process group backend" in selfcheck
    # each test's results are kept beside its log: the report reads them again the next morning
    assert len(list((out / "ScalelabReport" / "results").rglob("result.json"))) == 4  # 3 rungs and the benchmark


@pytest.mark.slurm
@pytest.mark.slow
def test_the_perflog_carries_the_reports_figures_and_the_reference_files_bounds(nightly):
    folder, _, proc = nightly
    prefix = folder / "outputs" / "reframe"
    assert proc.returncode == 0, proc.stdout[-6000:]
    report = (prefix / "output" / PART / "scalelab-cpu" / "ScalelabReport" / "rfm_job.out").read_text().splitlines()
    printed = reference.perf_values(report)
    tuples = {f"{c['name']}.{q}": t for c in reference.load(str(REFERENCES)) for q, t in c["reference"].items()}
    assert sorted(printed) == sorted(tuples) and "reference: 4 check(s) of 6 value(s): 6 passed, 0 failed" in report
    logged = {row["var"]: row for row in perflog(prefix, "ScalelabReport")}
    assert sorted(logged) == sorted(printed)
    for label, (value, unit) in printed.items():  # the report's PERF line, the perflog's line: one figure, one bound
        row = logged[label]
        assert (float(row["value"]), row["unit"], row["result"]) == (value, unit, "pass"), row
        assert [float(row["ref"]), float(row["lower"])] == tuples[label][:2] and row["upper"] == "null"
    # each rung logs its own figure (the report's code on its own folder): the report's to its 6 digits
    rungs = {row["test"]: row for row in perflog(prefix, "ScalelabRung")}
    assert sorted(rungs) == [f"ScalelabRung %shape={s}" for s in ("n_nodes", "one_device", "one_node")]
    for shape, name in (("one_device", "mlp-cpu-1x1"), ("one_node", "mlp-cpu-2x1"), ("n_nodes", "mlp-cpu-4x2")):
        row = rungs[f"ScalelabRung %shape={shape}"]
        assert f"{float(row['value']):.6g}" == f"{printed[f'{name}.throughput_per_device'][0]:.6g}", row
        assert float(row["ref"]) == tuples[f"{name}.throughput_per_device"][0]
    (bench,) = perflog(prefix, "ScalelabAllreduce")
    assert f"{float(bench['value']):.6g}" == f"{printed['allreduce-cpu-4x2.busbw'][0]:.6g}" and bench["unit"] == "GB/s"
    # and the scaling table printed above the verdicts shows the same per-device figures
    table = next(line for line in report if re.match(r"^4 +2 +1 ", line))
    assert f"{round(printed['mlp-cpu-4x2.throughput_per_device'][0]):,}" in table
    # the history reads the perflogs beside the results (--perflogdir): every variable, its one night the latest
    results_dir = prefix / "output" / PART / "scalelab-cpu" / "ScalelabReport" / "results"
    history = subprocess.run([sys.executable, str(ROOT / "src" / "benchmark.py"), "--output_dir", str(results_dir),
                              "--history", "--perflog", str(prefix / "perflogs")], capture_output=True, text=True,
                             timeout=120)
    assert history.returncode == 0 and "skipped" not in history.stdout, history.stdout[-3000:] + history.stderr
    beside = history.stdout.split("ReFrame perflog", 1)[1].splitlines()
    for label, (value, unit) in printed.items():
        row = next((line for line in beside if re.match(rf"^ScalelabReport +{re.escape(label)} ", line)), None)
        assert row is not None and " 1 " in row and "too few runs" in row, (label, history.stdout[-3000:])
        assert f" {perflog_view.cell(value, unit)} " in row, (row, value, unit)


@pytest.mark.slurm
@pytest.mark.slow
def test_an_impossible_reference_fails_in_reframe_and_in_the_report(nightly):
    """1000 GB/s of all-reduce busbw between two CPU 'nodes' of one machine (chapter 14's outputs/impossible.yaml):
    ReFrame fails the benchmark's test at its performance stage, and `benchmark.py --reference` fails the same figure
    against the same bound."""
    folder, ran, _ = nightly
    impossible = folder / "outputs" / "impossible.yaml"
    (check,) = yaml.safe_load(impossible.read_text())["checks"]
    assert check["kind"] == "allreduce" and check["reference"]["busbw"] == [1000, -0.1, None, "GB/s"], check
    # the name and the shape are those of the benchmark's check in the reference file the nightly run reads
    assert any(c["name"] == check["name"] and c["world_size"] == check["world_size"] for c in reference.load(
        str(REFERENCES)) if c["kind"] == "allreduce"), check
    proc = chapter_block(ran, "--prefix outputs/reframe-impossible")
    out = re.sub(r"\x1b\[\d*m", "", proc.stdout)
    assert re.search(r"^reframe: exit code [1-9]", out, re.M), out[-4000:]
    assert "Ran 1/1 test case(s) from 1 check(s) (1 failure(s)" in out and "Failing phase: performance" in out
    failed = re.search(r"busbw=(\S+) GB/s, expected 1000 \(l=900\.0, u=inf\)", out)
    assert failed, out[-4000:]
    prefix = folder / "outputs" / "reframe-impossible"
    (row,) = perflog(prefix, "ScalelabAllreduce")
    assert (row["result"], row["ref"], row["lower"]) == ("fail", "1000", "-0.1")
    results = prefix / "stage" / PART / "scalelab-cpu" / "ScalelabAllreduce" / "results"  # a failed test's stays
    verdict = run_script("benchmark.py", "--output_dir", results, "--reference", impossible)
    assert verdict.returncode == 1, verdict.stdout + verdict.stderr
    figure = f"{float(failed.group(1)):.4g}"
    assert f"FAIL allreduce-cpu-4x2.busbw: {figure} GB/s below 900 (reference 1000, accepted 900..inf)" in \
        verdict.stdout, verdict.stdout


SBATCH = ("--ntasks-per-node", "--cpus-per-task", "--gres", "--exclusive", "--nodes")


def headers(path) -> dict:
    """A script's #SBATCH requests for its allocation ({option: value}; a flag's value is "")."""
    found = re.findall(r"^#SBATCH (--[\w-]+)(?:=(\S+))?$", Path(path).read_text(), re.M)
    return {k: v for k, v in found if k in SBATCH}


def test_the_gpu_site_example_asks_what_the_job_scripts_ask(tmp_path):
    """reframe/gpu_site_example.py, dry-run (the job scripts written, none submitted; its module system made `nomod`
    for a machine without one): each check's allocation is what the sbatch script of its shape asks, on its
    partition and account, with the a100 profile; each runs scalelab's own program or job script."""
    config = tmp_path / "example.py"
    config.write_text(f"""import runpy
site_configuration = runpy.run_path({str(ROOT / "reframe" / "gpu_site_example.py")!r})["site_configuration"]
site_configuration["systems"][0]["modules_system"] = "nomod"
""")
    proc = reframe(dict(os.environ), tmp_path / "dry", "--system", "mycluster:gpu", "--dry-run", "-S",
                   "reference_file=reframe/references/local-cluster.yaml", config=config, timeout=120)
    assert proc.returncode == 0 and "Ran 6/6 test case(s)" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]
    cases = json.loads((tmp_path / "dry" / "report.json").read_text())["runs"][0]["testcases"]
    scripts = {case["display_name"]: Path(case["stagedir"]) / "rfm_job.sh" for case in cases}
    by_shape = {"ScalelabRung %shape=one_device": "single_gpu.sh", "ScalelabRung %shape=one_node":
                "single_node_multi_gpu.sh", "ScalelabRung %shape=n_nodes": "multi_node_multi_gpu.sh",
                "ScalelabAllreduce": "allreduce_bench.sh", "ScalelabSelfcheck": "gpu_selfcheck.sh"}
    assert sorted(scripts) == sorted([*by_shape, "ScalelabReport"])
    for test, job_script in by_shape.items():
        text = scripts[test].read_text()
        asked = headers(scripts[test])
        nodes = int(re.search(r"^#SBATCH --ntasks=(\d+)$", text, re.M).group(1)) // int(asked["--ntasks-per-node"])
        want = headers(ROOT / "slurm_jobs" / job_script)
        assert {**asked, "--nodes": str(nodes)} == want, (test, asked, want)
        assert "#SBATCH --partition=gpu\n#SBATCH --account=my_project\n" in text and "--mem-per-gpu=64G" in text
        assert "export SCALELAB_PROFILE=a100\n" in text and "source slurm_jobs/site.sh" in text
    train = scripts["ScalelabRung %shape=n_nodes"].read_text().splitlines()[-1]
    assert train.startswith('srun --cpus-per-task=4 --kill-on-bad-exit=1 $SCALELAB_SRUN_BIND "$SCALELAB_PYTHON" '
                            "src/train.py --config gpt-small --devices 4 --num_nodes 2 "), train
    # pip's torch brings its own CUDA and NCCL: no CUDA module loaded beside it
    assert not any("cuda" in m.lower() for env in runpy.run_path(str(ROOT / "reframe" / "gpu_site_example.py"))[
        "site_configuration"]["environments"] for m in env.get("modules", []))
    assert scripts["ScalelabSelfcheck"].read_text().endswith("\nbash slurm_jobs/gpu_selfcheck.sh\n")
    assert "export EXPECT_BUSBW=20\n" in scripts["ScalelabSelfcheck"].read_text()
