"""A run on a disk that fills: whatever the space left, the run's record is true about what was written. Never
"done" followed by a failure, never a record saying completed beside a logger's file it could not write, never a
line blaming a rank that does not exist. A small tmpfs (root mounts it, as the SLURM tests need root too) holds the
output folder, filled to leave each amount of space the run's files straddle (its metrics.csv, then its result.json
of about 9 KB: tmpfs counts 4 KiB pages)."""

import json
import subprocess

import pytest

from helpers import run_script

pytestmark = pytest.mark.slow
SIZE_K = 64


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_K}k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {proc.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("free_k", [8, 16, 20])
def test_a_full_disk_leaves_a_true_record_or_none_and_one_line(small_disk, free_k):
    (small_disk / "fill").write_bytes(b"\0" * ((SIZE_K - free_k) * 1024))
    out = small_disk / "out"
    proc = run_script("train.py", "--model", "mlp", "--max_steps", "30", "--output_dir", out, timeout=120)
    records = list(out.glob("*/result.json"))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("train.py: error:")]
    assert "Traceback" not in proc.stderr and "rank 1" not in proc.stderr, proc.stderr
    if proc.returncode == 0:
        (path,) = records
        assert json.loads(path.read_text())["status"] == "completed" and errors == []
        assert (path.parent / "metrics.csv").stat().st_size > 0  # completed beside the files it names
    else:
        assert "scalelab: done" not in proc.stdout and len(errors) == 1, (proc.stdout, proc.stderr)
        assert "No space left on device" in errors[0]
        for path in records:  # a record that got written says the run failed, and why
            record = json.loads(path.read_text())
            assert record["status"] == "failed" and "No space left on device" in record["error"]
