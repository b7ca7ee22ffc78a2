"""`make demo` (scalelab.demo) as a participant runs it: the real sweep, its report, its plots and exports."""

import json
import subprocess
import sys

import pytest
from PIL import Image

from helpers import ROOT, SRC

pytestmark = pytest.mark.slow


def test_demo_runs_the_sweep_and_writes_report_plots_and_exports(tmp_path):
    out = tmp_path / "demo"
    # the MLP alone keeps this to about half a minute; the GPT's path is the same code
    proc = subprocess.run([sys.executable, "-m", "scalelab.demo", "--output_dir", str(out), "--models", "mlp"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    stdout = proc.stdout
    assert stdout.startswith("CPU rehearsal of the scaling ladder: 5 runs: 4 training (mlp at 1 and 2 devices on one "
                             "node; each twice: the run-to-run scatter) and 1 of the all-reduce benchmark; 1 device = "
                             "1 core, gloo; results in ")
    assert "scalelab report: 4 run(s)" in stdout and "Group A: mlp 64-32-16" in stdout
    assert "2 devices on 1 node: efficiency" in stdout  # the limiting line
    # the forecast's track record: the 2-device configuration predicted without its runs, from the 1-device runs'
    # scatter (the repeats: 1 degree of freedom)
    assert "Track record (each multi-device configuration predicted from the other configurations' runs; 80 % band" \
        in stdout
    assert ("  The bands' run-to-run scatter (each band's without its own configuration's runs: not the Scaling "
            "table's): A ") in stdout and "(repeats, 1 degree(s) of freedom)" in stdout
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "allreduce_busbw.png", "efficiency.png", "loss_vs_wall_time_A.png", "speedup.png", "step_timeline_A.png",
        "throughput_per_device.png"]
    assert sorted(p.name for p in (out / "export").iterdir()) == [
        "allreduce.csv", "report.md", "runs.csv", "scaling.csv", "step_breakdown.csv", "summary.json"]
    # one step of each rung, drawn from the marks a real run took: each rank's lane is its whole step, without a gap,
    # its collectives inside it, the table's cells above it
    from scalelab.measure import timeline
    from scalelab.report import step_plot, tables
    from scalelab.report.cli import build

    report = build(str(out))
    rows = step_plot.group_timelines(report.full_records(), report.runs, report.scaling)
    assert [name for name, *_ in rows] == ["1 dev", "2 dev"]
    for _, row, _, line in rows:
        for bars in line["ranks"].values():
            lane = [b for b in bars if b.track == "compute"]
            assert lane[0].start == 0 and all(a.end == pytest.approx(b.start) for a, b in zip(lane, lane[1:]))
            assert all(0 <= b.start <= b.end <= lane[-1].end + 1e-6 for b in bars)
            assert [b.kind for b in lane][:2] == ["forward", "backward"] and lane[-1].kind == "optimizer"
            assert any(b.track == "comm" for b in bars) == (row["world_size"] > 1)
    description = Image.open(out / "plots" / "step_timeline_A.png").info["Description"]
    cells = tables.story_cells(rows[1][1])
    assert f"2 dev: step {cells['step ms']} ms · all-reduce {cells['all-reduce ms']} ms" in description
    whole = next(r for r in report.full_records() if r["run_id"] == rows[1][2])
    assert timeline.representative(whole) == rows[1][3]["step"]
    summary = json.loads((out / "export" / "summary.json").read_text())
    assert [(c["world_size"], c["unit"]) for c in summary["configurations"]] == [(1, "samples/s"), (2, "samples/s")]
    assert summary["configurations"][1]["predicted_efficiency_overlap"] is not None  # the benchmark fed it
    for name in ("speedup.png", "efficiency.png"):
        assert f"written: {out / 'plots' / name}" in stdout
    assert len(list(out.rglob("result.json"))) == 5 and len(list((out / "logs").iterdir())) == 5
    # the demo's own logs (the all-reduce benchmark's table among them) are not nccl-tests logs to warn about
    assert "warning" not in proc.stderr, proc.stderr[-2000:]


def test_the_ladder_climbs_from_one_device_to_two_nodes_over_each_link():
    """The rungs and the commands a user would type for them (the link rungs run src/emulate.py)."""
    from scalelab import demo

    rungs = demo.ladder(["mlp", "gpt"], [2.0, 0.2], links_ok=True)
    assert [r.name for r in rungs] == [
        "mlp at 1 device(s)", "mlp at 2 device(s)", "gpt at 1 device(s)", "gpt at 2 device(s)",
        "allreduce at 2 device(s)", "gpt at 2 nodes over 2 Gbit/s", "gpt at 2 nodes over 200 Mbit/s",
        "allreduce at 2 nodes over 2 Gbit/s", "allreduce at 2 nodes over 200 Mbit/s"]
    emulated = rungs[6].command("out")
    assert emulated[1:7] == ["-m", "scalelab.launch.emulate", "--link_gbit", "0.2", "--devices", "1"]
    assert emulated[7:10] == ["--", "-m", "scalelab.train"] and emulated[-2:] == ["--output_dir", "out"]
    assert "--max_bytes" in rungs[8].command("out") and rungs[8].command("out")[-6:-2] == ["--iters", "5",
                                                                                           "--warmup_iters", "1"]
    assert rungs[1].command("out")[-2:] == ["--devices", "2"]
    # where namespaces cannot be made, only the one-node rungs run
    assert [r.link_gbit for r in demo.ladder(["gpt"], [2.0], links_ok=False)] == [None, None, None]
    # repeats: the training rungs again, a pass after the first (the benchmark once)
    twice = demo.ladder(["mlp", "gpt"], [2.0, 0.2], links_ok=True, repeats=2)
    assert twice[:9] == rungs and twice[9:] == [r for r in rungs if r.model != "allreduce"]
    assert demo.repeated(1) == "" and demo.repeated(3) == "; each 3 times: the run-to-run scatter"


def test_a_lever_sweep_runs_the_gpt_per_setting_at_one_device_and_over_each_link():
    from scalelab import demo

    lever = demo.parse_lever("accumulate_grad_batches=1,4")
    rungs = demo.lever_rungs(lever, [0.2])
    assert [r.name for r in rungs] == [
        "gpt at 1 device(s) with accumulate_grad_batches 1",
        "gpt at 2 nodes over 200 Mbit/s with accumulate_grad_batches 1",
        "gpt at 1 device(s) with accumulate_grad_batches 4",
        "gpt at 2 nodes over 200 Mbit/s with accumulate_grad_batches 4",
        "allreduce at 2 nodes over 200 Mbit/s"]
    cmd = rungs[3].command("out")
    assert cmd[1:3] == ["-m", "scalelab.launch.emulate"] and cmd[cmd.index("--link_gbit") + 1] == "0.2"
    assert cmd[-4:] == ["--accumulate_grad_batches", "4", "--output_dir", "out"]
    # sweeping FSDP also benchmarks what its step runs over each link: the report prices the step with them
    sharded = demo.lever_rungs(demo.parse_lever("strategy=ddp,fsdp"), [0.2])
    assert [r.name for r in sharded if r.model == "allreduce"] == [
        "allreduce at 2 nodes over 200 Mbit/s", "all_gather at 2 nodes over 200 Mbit/s",
        "reduce_scatter at 2 nodes over 200 Mbit/s"]
    cmd = sharded[-1].command("out")
    assert cmd[cmd.index("--collective") + 1] == "reduce_scatter" and "scalelab.bench" in cmd


def test_the_gpu_precision_rehearsal_runs_the_gpt_in_bf16_at_every_rung_and_the_mlp_as_a_gpu_would(tmp_path):
    """`--precision bf16-mixed`: the GPT's rungs (one node and the links) in a GPU's default, the MLP in fp32 as on a
    GPU; the default keeps every rung fp32, the same figures on any CPU."""
    from scalelab import demo

    rungs = demo.ladder(["mlp", "gpt"], [0.2], links_ok=True, precision="bf16-mixed")
    asked = {r.name: r.command("out")[r.command("out").index("--precision") + 1] for r in rungs
             if "--precision" in r.command("out")}
    assert asked == {"gpt at 1 device(s)": "bf16-mixed", "gpt at 2 device(s)": "bf16-mixed",
                     "gpt at 2 nodes over 200 Mbit/s": "bf16-mixed"}
    assert not any("--precision" in r.command("out") for r in demo.ladder(["mlp", "gpt"], [0.2], links_ok=True))
    lever = demo.lever_rungs(demo.parse_lever("comm_hook=none,bf16"), [0.2], "bf16-mixed")
    assert all(r.command("out")[r.command("out").index("--precision") + 1] == "bf16-mixed" for r in lever
               if r.model == "gpt")
    amx = tmp_path / "cpuinfo"
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile\n")
    assert demo.native_bf16(str(amx))
    amx.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n")
    assert not demo.native_bf16(str(amx)) and not demo.native_bf16(str(tmp_path / "none"))


@pytest.mark.parametrize("text, says", [
    ("comm_hook=none,int8", "expected none, fp16, bf16 or powersgd"),
    ("learning_rate=1,2", "expected NAME=V1,V2,... with NAME one of strategy, accumulate_grad_batches, comm_hook"),
    ("accumulate_grad_batches=", "expected NAME=V1,V2"),
])
def test_a_bad_lever_is_one_line(text, says):
    proc = subprocess.run([sys.executable, "-m", "scalelab.demo", "--lever", text], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr
