"""`make demo` (scalelab.demo) as a participant runs it: the real sweep, its report, its plots and exports."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT, SRC

pytestmark = pytest.mark.slow


def test_demo_runs_the_sweep_and_writes_report_plots_and_exports(tmp_path):
    out = tmp_path / "demo"
    # the MLP alone keeps this to about half a minute; the transformer's path is the same code
    proc = subprocess.run([sys.executable, "-m", "scalelab.demo", "--output_dir", str(out), "--models", "mlp"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    stdout = proc.stdout
    assert stdout.startswith("CPU rehearsal of the scaling sweep: 3 runs (mlp at 1 and 2 processes, gloo)")
    assert "scalelab report: 2 run(s)" in stdout and "Group A: mlp 64-32-16" in stdout
    assert "2 devices on 1 node: efficiency" in stdout  # the limiting line
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "allreduce_busbw.png", "efficiency.png", "speedup.png", "throughput_per_device.png"]
    assert sorted(p.name for p in (out / "export").iterdir()) == [
        "allreduce.csv", "report.md", "runs.csv", "scaling.csv", "step_breakdown.csv", "summary.json"]
    summary = json.loads((out / "export" / "summary.json").read_text())
    assert [(c["devices"], c["unit"]) for c in summary["configurations"]] == [(1, "samples/s"), (2, "samples/s")]
    assert summary["configurations"][1]["predicted_efficiency_overlap"] is not None  # the benchmark fed it
    for name in ("speedup.png", "efficiency.png"):
        assert f"written: {out / 'plots' / name}" in stdout
    assert len(list(out.rglob("result.json"))) == 3 and len(list((out / "logs").iterdir())) == 3
