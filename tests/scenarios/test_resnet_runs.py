"""ResNet-50 at 1 and 2 CPU devices through train.py and the report: the model the published tables use, its
wire bytes its parameters' gradients, its FLOPs counted (tiny images: the network is the same at any size)."""

import pytest

from helpers import load_results, run_script

PARAMS = 25_557_032  # torchvision's ResNet-50 (tests/unit/test_resnet.py)

pytestmark = pytest.mark.slow
RUN = ["--model", "resnet50", "--image_size", "32", "--batch_size", "4", "--max_steps", "6", "--warmup_steps", "2",
       "--comm_probe_every", "2"]


def test_resnet50_runs_at_1_and_2_devices_and_the_report_scales_it(tmp_path):
    for n in (1, 2):
        proc = run_script("train.py", *RUN, "--devices", n, "--output_dir", tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    by_world = {r["launch"]["world_size"]: r for r in load_results(tmp_path)}
    assert sorted(by_world) == [1, 2]
    for r in by_world.values():
        assert r["status"] == "completed" and r["workload"]["params"] == PARAMS
        assert r["timing"]["flops_from"].startswith("counted") and r["timing"]["flops_per_sample"] > 0
    assert sum(by_world[2]["timing"]["comm"]["wire_bytes"]) == 4 * PARAMS  # every gradient, fp32, once a step
    report = run_script("benchmark.py", "--output_dir", tmp_path, "--details")
    assert report.returncode == 0, report.stderr
    assert "Group A: resnet50 32px (25.6M params)" in report.stdout and "1 scaling group(s)" in report.stdout
    assert "TFLOP/s and MFU of resnet50: FLOPs per sample counted" in report.stdout
