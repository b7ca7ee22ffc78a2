"""Bad input, clear answer: every entry script refuses bad values with exit code 2 and one stderr line, no traceback.

A few representative cases per script (each case is a real interpreter start: imports cost ~0.2 s for argparse
errors, ~5 s for errors found after torch and Lightning load). train.py must refuse before any process group
starts: within seconds, no banner (printed just before training), no result folder.
"""

import os
import tempfile
import time

import pytest

from helpers import SRC, run_script


def unwritable_dir():
    """A folder that exists but in which nothing can be created, even by root: sysfs refuses mkdir although
    os.access(W_OK) says yes to root (and chmod stops no root)."""
    for path in ("/sys/kernel", "/proc/1"):
        if os.path.isdir(path):
            try:
                os.rmdir(tempfile.mkdtemp(dir=path))
            except OSError:
                return path
    return None


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a_file").write_text("not a folder\n")
    (tmp_path / "unknown.yaml").write_text("batch_size: 8\nbogus_key: 3\n")
    (tmp_path / "zero.yaml").write_text("batch_size: 0\n")
    return tmp_path


# (script, args, fragment of the one error line); {tmp} is the test's folder.
CASES = [
    ("train.py", ["--batch_size", "0"], "argument --batch_size: expected an integer from 1 to 1,048,576"),
    ("train.py", ["--num_samples", "-5"], "argument --num_samples: expected an integer from 1 to"),
    ("train.py", ["--model", "vit"], "argument --model: invalid choice: 'vit'"),
    ("train.py", ["--model", "gpt", "--preset", "huge"], "argument --preset: invalid choice: 'huge'"),
    ("train.py", ["--warmup_steps", "10", "--max_steps", "5"], "--warmup_steps 10 leaves no timed step"),
    ("train.py", ["--scaling", "strong", "--batch_size", "3", "--devices", "2"],
     "--scaling strong splits the global --batch_size 3 over 2 processes, which does not divide"),
    ("train.py", ["--config", "{tmp}/missing.yaml"], "missing.yaml: no such file"),
    ("train.py", ["--config", "{tmp}/unknown.yaml"], "unknown key 'bogus_key'"),
    ("train.py", ["--config", "{tmp}/zero.yaml"], "batch_size: expected an integer from 1 to 1,048,576 (samples in"),
    ("train.py", ["--output_dir", "{tmp}/a_file"], "a_file is a file, not a folder"),
    ("train.py", ["--output_dir", "{tmp}/a_file/sub"], "cannot be created (Not a directory)"),
    ("train.py", ["--output_dir", "{unwritable}"], "is not writable"),
    ("benchmark.py", ["--output_dir", "{tmp}/missing"], "is not a folder"),
    ("benchmark.py", ["--output_dir", "{tmp}/a_file"],
     "a_file is a file, not a folder: give the folder the result.json files are in"),
    ("benchmark.py", ["--bogus"], "unrecognized arguments: --bogus"),
    # the CPU rehearsal's ranks against the host's memory (xl: 2 x 150 GB, more than a CI machine has)
    ("train.py", ["--config", "gpt-xl", "--devices", "2", "--oversubscribe"], "2 rank(s) on this node need 2 x "),
    ("train.py", ["--devcies", "2"], "unrecognized arguments: --devcies 2 (did you mean --devices?)"),
    # refused by rank 0 after it started rank 1 (launch/local.py), which must end without saying it a second time
    ("train.py", ["--devices", "2", "--precision", "16-mixed"], "--precision 16-mixed needs a GPU (float16 autocast)"),
    ("benchmark.py", ["--output-dir", "x"], "unrecognized arguments: --output-dir x (did you mean --output_dir?)"),
    ("submit.py", ["--cluster", "local", "--shapes", "1x0"], "--shapes: '1x0' is not NODESxGPUS_PER_NODE"),
    ("submit.py", ["--cluster", "local", "--shapes", "2x1"], "--cluster local runs on this machine only"),
    ("submit.py", ["--cluster", "local", "--", "--batch_size", "0"], "--batch_size: expected an integer from 1"),
    ("submit.py", ["--cluster", "local", "--output_dir", "{tmp}/a_file"], "a_file is a file, not a folder"),
    ("submit.py", ["--cluster", "slurm", "--output_dir", "{tmp}/run%u"], "sbatch reads % in a log path as a"),
    ("predict.py", ["--params", "-2B", "--compute_s", "1"], "argument --params: expected a count"),
    ("predict.py", ["--preset", "huge", "--compute_s", "1"], "argument --preset: invalid choice: 'huge'"),
    ("predict.py", ["--params", "2B"], "missing compute inputs"),
    ("predict.py", ["--params", "2B", "--compute_s", "1", "--num_nodes", "0"], "argument --num_nodes: expected a"),
    ("allreduce_bench.py", ["--iters", "0"], "--iters: expected an integer from 1 to 1,000,000 (all-"),
    ("allreduce_bench.py", ["--min_bytes", "-5"], "argument --min_bytes: expected a size in bytes"),
    ("allreduce_bench.py", ["--min_bytes", "1M", "--max_bytes", "1K"], "is larger than --max_bytes"),
    ("allreduce_bench.py", ["--output_dir", "{tmp}/a_file"], "a_file is a file, not a folder"),
]


@pytest.mark.parametrize("script, args, says", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_bad_input_gets_one_line_and_exit_2(files, script, args, says):
    if not (SRC / script).exists():
        pytest.skip(f"src/{script} is not there (yet)")
    unwritable = unwritable_dir()
    if any("{unwritable}" in a for a in args) and unwritable is None:
        pytest.skip("no folder here refuses mkdir to this user")
    args = [a.format(tmp=files, unwritable=unwritable) for a in args]
    out = files / "fresh_outputs"
    if script == "train.py" and "--output_dir" not in args:
        args += ["--output_dir", str(out)]
    t0 = time.time()
    proc = run_script(script, *args, timeout=60)
    took = time.time() - t0
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith(f"{script}: error: ") and says in lines[0], lines[0]
    if script == "train.py":  # refused before any process group: fast, nothing started, nothing written
        assert took < 10, f"took {took:.1f} s"
        assert "scalelab:" not in proc.stdout and not out.exists()


@pytest.mark.parametrize("argv, bound", [
    (["emulate.py", "--master_port", "99999", "--", "true"], "from 1,024 to 65,535"),
    (["emulate.py", "--num_nodes", "1000", "--", "true"], "from 1 to 16"),
    (["allreduce_bench.py", "--max_bytes", "1T"], "at most 64G"),
    (["allreduce_bench.py", "--iters", "10000000"], "to 1,000,000"),
    (["predict.py", "--model", "gpt", "--num_nodes", "1" + "0" * 400], "to 1,000,000"),
    (["benchmark.py", "--forecast_nodes", "1" + "0" * 400], "to 1,000,000"),
])
def test_every_entry_point_bounds_what_would_harm_the_machine(run, argv, bound):
    proc = run(*argv)
    assert proc.returncode == 2 and bound in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
