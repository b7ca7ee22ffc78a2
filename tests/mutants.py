"""Plant known bugs one at a time and show that the test suite catches each: `python tests/mutants.py`.

Each mutant is a small edit that once survived the suite (a reworded error, a weaker rule, a wrong number).
The script extracts the committed tree (HEAD) into a temporary folder, checks that the guarding tests pass
there, then applies one mutant at a time, runs the tests that guard it, and reports "caught" (they failed) or
"SURVIVED". The checkout itself is never touched.
Exit code 1 when any mutant survives. About two minutes on 2 cores.
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, file, text to find, replacement, tests that must fail)
MUTANTS = [
    ("site.sh accepts an unknown profile", "slurm_jobs/site.sh",
     "    echo \"site.sh: unknown SCALELAB_PROFILE='${SCALELAB_PROFILE}' (use auto, a100 or cpu)\" >&2\n"
     "    return 2 2>/dev/null || exit 2\n",
     "    site_export SBATCH_PARTITION gpu\n",
     ["tests/test_docs.py::test_run_blocks_run[09-adapting-site-sh]"]),
    ("size-mismatch message reworded", "src/scalelab/launch/cluster.py",
     "does not match {source}={actual}", "sizes differ ({source}={actual})",
     ["tests/test_docs.py::test_run_blocks_run[05-multi-node]"]),
    ("outside-srun message reworded", "src/scalelab/launch/cluster.py",
     "but train.py runs outside srun", "oops",
     ["tests/test_docs.py::test_run_blocks_run[05-multi-node]"]),
    ("requeue: last result seen wins", "src/scalelab/results.py",
     "if key not in best or rank > best[key][0]:", "if True:",
     ["tests/test_results.py"]),
    ("requeue: array task left out of the key", "src/scalelab/results.py",
     'slurm.get("array_task_id"), slurm.get("step_id"))', 'slurm.get("step_id"))',
     ["tests/test_results.py"]),
    ("--compare: another message for a missing side", "src/scalelab/report/compare.py",
     "no such folder or summary.json", "cannot read it",
     ["tests/test_report_files.py"]),
    ("predict: cost counts one GPU per node", "src/scalelab/perfmodel/scaling.py",
     'row["train_h_no_overlap"] * gpus * inputs.gpu_hour_price',
     'row["train_h_no_overlap"] * nodes * inputs.gpu_hour_price',
     ["tests/test_predict_cli.py"]),
    ("report: efficiency ignores the baseline's devices", "src/scalelab/report/frames.py",
     'agg["speedup"] / (agg["devices"] / agg["baseline_devices"])', 'agg["speedup"] / agg["devices"]',
     ["tests/test_report.py"]),
    ("demo stops drawing plots", "src/scalelab/demo.py",
     '"--plot", os.path.join(args.output_dir, "plots"),', '',
     ["tests/test_demo.py"]),
    ("ring all-reduce volume without the (n-1)/n factor (chapter 7's figures)", "src/scalelab/perfmodel/network.py",
     "return 2 * (n - 1) / n * grad_bytes", "return 2 * grad_bytes",
     ["tests/test_docs.py::test_run_blocks_run[07-network-arithmetic]"]),
    ("a report column renamed (the chapters' tables)", "src/scalelab/report/tables.py",
     '"waited ms"', '"exposed ms"',
     ["tests/test_docs.py::test_run_blocks_run[04-multi-gpu-one-node]"]),
    ("another workload's flag silently ignored", "src/scalelab/config.py",
     'raise UsageError(f"--{option.name} applies to --model {owner} only")', "pass",
     ["tests/test_config.py"]),
]


def copy_repository(dest: Path):
    """The committed tree (HEAD), so what is checked is what would land."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def pytest(repo: Path, tests) -> int:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                          cwd=repo, capture_output=True, text=True, timeout=600).returncode


def run_mutant(repo: Path, name, file, find, replace, tests) -> str:
    path = repo / file
    original = path.read_text()
    if original.count(find) != 1:
        return f"BROKEN (the text to mutate is not in {file} exactly once: update this script)"
    path.write_text(original.replace(find, replace))
    try:
        code = pytest(repo, tests)
    finally:
        path.write_text(original)
    return "caught" if code == 1 else f"SURVIVED (pytest exit {code})"


def main() -> int:
    survived = 0
    with tempfile.TemporaryDirectory(prefix="scalelab-mutants-") as tmp:
        repo = Path(tmp)
        copy_repository(repo)
        guards = sorted({test for *_, tests in MUTANTS for test in tests})
        if pytest(repo, guards) != 0:  # a guard that fails anyway would make every mutant look caught
            print(f"the guarding tests fail without any mutant: {' '.join(guards)}")
            return 2
        for name, file, find, replace, tests in MUTANTS:
            start = time.monotonic()
            verdict = run_mutant(repo, name, file, find, replace, tests)
            survived += not verdict.startswith("caught")
            print(f"{verdict:<10} {name}  ({', '.join(tests)}; {time.monotonic() - start:.0f} s)", flush=True)
    print(f"{len(MUTANTS) - survived} of {len(MUTANTS)} planted bugs caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
