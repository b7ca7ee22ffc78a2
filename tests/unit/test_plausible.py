"""Numbers that cannot be scaling, and runs that are not the same job (report/plausible.py), on constructed results
and on a pair a real 1-device fp32 / 2-device bf16 run left (tests/data/fp32-baseline-bf16-pair)."""

import json
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT, ROWS, _bench, _emulated, _with_comm, make_result
from scalelab import results
from scalelab.report import explain, plausible, tables
from scalelab.report.frames import runs_frame, scaling_frame

BF16 = {"step": 4, "matmul_dtypes": ["bfloat16"], "attention": [], "param_dtypes": ["float32"],
        "grad_dtypes": ["float32"], "optimizer": "for-loop", "compiled_graphs": 0, "wire": {}}
FP32 = {**BF16, "matmul_dtypes": ["float32"]}


def run(run_id, world, sps, fp=BF16, **kw):
    r = make_result(run_id, world, samples_per_s=sps, **kw)
    if fp is not None:
        r["fingerprint"] = fp
    return r


def report(found):
    runs = runs_frame(found)
    scaling = explain.annotate(scaling_frame(runs), explain.bench_frame(found))
    return runs, scaling, tables.render(runs, scaling)


def row(scaling, world, nodes=1):
    return scaling[(scaling["world_size"] == world) & (scaling["num_nodes"] == nodes)].iloc[0]


def test_a_compiled_group_whose_run_ran_eager_gets_no_speedup_against_it():
    """--compile asked, its steps after warm-up ran eager (Dynamo fell back): another job than the group names,
    though its fingerprint matches an equally eager baseline's."""
    ran = {**BF16, "compiled_graphs": 2, "compiled_steps": 10, "steps_after_warmup": 10}
    found = [run("c1", 1, 100, fp=ran, compile=True), run("c2", 2, 190, fp={**ran, "compiled_steps": 0}, compile=True)]
    runs, scaling, text = report(found)
    assert list(runs.set_index("run_id")["job_differs"]) == [
        "", "torch.compile off, baseline on; torch.compile asked, 10 of 10 steps after warm-up ran eager"]
    assert pd.isna(row(scaling, 2)["efficiency"]) and "not the same job" in text
    found = [run("c1", 1, 100, fp={**ran, "compiled_steps": 0}, compile=True),
             run("c2", 2, 190, fp={**ran, "compiled_steps": 0}, compile=True)]
    runs, scaling, _ = report(found)  # both ran eager alike: each named, neither a compiled figure
    assert all(t == "torch.compile asked, 10 of 10 steps after warm-up ran eager" for t in runs["job_differs"])
    assert pd.isna(row(scaling, 2)["efficiency"])


def test_the_pair_left_by_a_1_device_step_without_autocast_is_named_impossible():
    found, skipped = results.scan(str(ROOT / "tests" / "data" / "fp32-baseline-bf16-pair"))
    assert not skipped and len(found) == 2
    _, scaling, text = report(found)
    assert "203 % !" in text
    line = next(t for t in text.splitlines() if t.startswith("  ! "))
    assert line.startswith("  ! 2 devices on 1 node: efficiency 203 % cannot be weak scaling")
    assert "at most 2× its throughput (100 % + 5 % noise)" in line
    assert "not recorded by these runs" in line and "pytorch-lightning#16857" in line
    assert "computed a step in 104.6 ms here, 236.2 ms at the baseline" in line
    assert "the baseline had its core 100 % of the time" in line


def test_a_run_that_ran_another_job_than_its_baseline_gets_no_speedup():
    found = [run("b1", 1, 100, fp=FP32), run("b2", 2, 400)]  # bf16 matmuls at 2 devices, fp32 at the baseline
    runs, scaling, text = report(found)
    assert list(runs.set_index("run_id")["job_differs"]) == ["", "matmuls bfloat16, baseline float32"]
    two = row(scaling, 2)
    assert pd.isna(two["speedup"]) and pd.isna(two["efficiency"]) and two["throughput"] == 400
    assert "≠ job" in text and "200 %" not in text
    assert ("  ! 2 devices on 1 node: not the same job as the baseline (matmuls bfloat16, baseline float32): no "
            "speedup or efficiency against it") in text
    assert "cannot be weak scaling" not in text  # named as another job, not as impossible scaling


def test_the_same_job_at_two_scales_is_compared_and_within_the_noise_passes_quietly():
    found = [run("s1", 1, 100), run("s2", 2, 208, fp={**BF16, "wire": {"allreduce_": {"bytes": 8}}, "step": 9})]
    _, scaling, text = report(found)
    assert row(scaling, 2)["job_differs"] == "" and row(scaling, 2)["efficiency"] == pytest.approx(1.04)
    assert "104 %" in text and "!" not in text  # 4 points above 100 %: inside the 5 % floor
    found[1] = run("s2", 2, 212)
    _, scaling, text = report(found)
    assert "106 % !" in text and "Checked: fingerprints: the same job as the baseline" in text


def test_the_noise_band_grows_with_the_repeats_spread_of_both_sides():
    found = [run("n1", 1, 90), run("n1b", 1, 110), run("n1c", 1, 100), run("n2", 2, 224)]  # baseline 100 ± 10 %
    _, scaling, text = report(found)
    two = row(scaling, 2)
    assert plausible.noise(two) == pytest.approx(0.10) and two["efficiency"] == pytest.approx(1.12)
    assert "112 % !" in text and "(100 % + 10 % noise)" in text
    found += [run("n2b", 2, 180), run("n2c", 2, 260)]  # now the 2-device repeats spread too: 224 ± 18 %
    _, scaling, text = report(found)
    assert plausible.noise(row(scaling, 2)) == pytest.approx(0.10 + 80 / 2 / 224) and "!" not in text


def test_the_baseline_is_the_fingerprint_most_of_its_runs_recorded_and_unrecorded_runs_are_not_judged():
    found = [run("m1", 1, 100, fp=FP32), run("m1b", 1, 100), run("m1c", 1, 100), run("m2", 2, 180),
             run("m2b", 2, 180, fp=None)]
    runs = runs_frame(found).set_index("run_id")
    assert runs.loc["m1", "job_differs"] == "matmuls float32, baseline bfloat16"
    assert runs.loc[["m1b", "m1c", "m2", "m2b"], "job_differs"].tolist() == [""] * 4
    # two fingerprints, one run each: the newest is the reference
    found = [run("t1", 1, 100, fp=FP32), run("t1b", 1, 100), run("t2", 2, 180)]
    found[0]["created"], found[1]["created"] = "2026-01-02T00:00:00", "2026-01-01T00:00:00"
    runs = runs_frame(found).set_index("run_id")
    assert runs.loc["t2", "job_differs"] == "matmuls bfloat16, baseline float32"
    assert runs.loc["t1b", "job_differs"] != "" and runs.loc["t1", "job_differs"] == ""


def test_the_baseline_of_a_group_is_its_fewest_devices_then_fewest_nodes():
    found = [run("x2n2", 2, 150, fp=FP32, nodes=2), run("x2", 2, 200), run("x4", 4, 380)]
    runs = runs_frame(found).set_index("run_id")
    assert runs.loc["x2n2", "job_differs"] == "matmuls float32, baseline bfloat16"
    assert runs.loc["x4", "job_differs"] == ""


def test_strong_scaling_above_100_percent_is_called_superlinear_with_the_share_per_device():
    found = [run("g1", 1, 100, scaling="strong", batch_per_device=64), run("g2", 2, 230, scaling="strong",
                                                                          batch_per_device=32)]
    _, _, text = report(found)
    assert "115 % !" in text
    assert "superlinear, which strong scaling allows only where each device's smaller share" in text
    assert "32 sample(s) per device here, 64 at the baseline" in text


def test_an_mfu_above_100_percent_is_named():
    found = [run("u1", 1, 100), run("u2", 2, 180)]
    found[1]["timing"].update(tflops_per_device=330.0, peak_tflops=312.0, mfu=330 / 312)
    _, _, text = report(found)
    assert "! 2 devices on 1 node: MFU 106 % cannot be: no device runs above its peak (312 TFLOP/s)" in text
    found[1]["timing"].update(mfu=0.99)
    assert "MFU" not in "".join(t for t in report(found)[2].splitlines() if t.startswith("  !"))


def test_a_busbw_above_the_emulated_links_rate_is_named_and_one_within_its_margin_is_not():
    base = run("l1", 1, 100)
    fast = _emulated(_with_comm(run("l2", 2, 160, nodes=2), 0.008, 0.2, 0.01, 0.02, grad_bytes=8_000_000), 0.2)
    # 8 MB in 0.2 s over 2 ranks: busbw 0.04 GB/s, above 0.2 Gbit/s = 0.025 GB/s
    _, _, text = report([base, fast])
    assert "! 2 devices on 2 nodes (emulated 200 Mbit/s): DDP busbw 0.04 GB/s is above the link's 0.025 GB/s" in text
    ok = _emulated(_with_comm(run("l2", 2, 160, nodes=2), 0.008, 0.33, 0.01, 0.35, grad_bytes=8_000_000), 0.2)
    assert "above the link" not in report([base, ok])[2]  # 0.0242 GB/s: under the rate
    near = _emulated(_with_comm(run("l2", 2, 160, nodes=2), 0.008, 0.31, 0.01, 0.35, grad_bytes=8_000_000), 0.2)
    assert "above the link" not in report([base, near])[2]  # 0.0258 GB/s: within the 5 % margin


def test_what_was_checked_names_a_baseline_short_of_cores_or_sharing_its_node():
    base, two = run("c1", 1, 100), run("c2", 2, 240)
    base["timing"]["had_cpu"] = [0.7]
    base["slurm"], two["slurm"] = {"job_id": "1", "exclusive": False}, {"job_id": "2", "exclusive": True}
    _, scaling, text = report([base, two])
    assert "the baseline had its core 70 % of the time it was ready to run (short of them" in text
    assert "the baseline shared its node (not --exclusive)" in text
    base["slurm"]["exclusive"] = True
    base["timing"]["had_cpu"] = [0.95]
    text = report([base, two])[2]
    assert "the baseline had its node alone (--exclusive)" in text and "short of them" not in text


def test_fingerprints_in_the_runs_frame_are_json_text_and_empty_where_not_recorded():
    runs = runs_frame([run("f1", 1, 100), run("f2", 2, 100, fp=None)]).set_index("run_id")
    assert json.loads(runs.loc["f1", "fingerprint"]) == BF16 and runs.loc["f2", "fingerprint"] == ""


def test_a_nightly_reference_check_fails_an_efficiency_that_is_another_job_or_beyond_scaling():
    from scalelab.report import reference

    entry = {"kind": "training", "reference": {"efficiency": [0.9, -0.1, None, ""]}}
    _, scaling, _ = report([run("r1", 1, 100, fp=FP32), run("r2", 2, 400)])
    verdict, perf = reference._verdict("c", "efficiency", [0.9, -0.1, None, ""], row(scaling, 2), entry)
    assert verdict == ("FAIL c.efficiency: not the same job as its baseline (matmuls bfloat16, baseline float32): no "
                       "efficiency against it") and perf is None
    _, scaling, _ = report([run("r1", 1, 100), run("r2", 2, 400)])
    verdict, perf = reference._verdict("c", "efficiency", [0.9, -0.1, None, ""], row(scaling, 2), entry)
    assert verdict == ("FAIL c.efficiency: 2 is beyond what scaling gives (1 + 0.05 noise): the report says what was "
                       "checked") and perf == "PERF c.efficiency=2"
    _, scaling, _ = report([run("r1", 1, 100), run("r2", 2, 190)])
    assert reference._verdict("c", "efficiency", [0.9, -0.1, None, ""], row(scaling, 2), entry)[0].startswith("PASS")


def test_the_forecast_learns_nothing_from_a_run_that_ran_another_job():
    from scalelab.report import forecast_view

    runs = runs_frame([run("k1", 1, 100, fp=FP32), run("k2", 2, 400), run("k2b", 2, 190, fp=FP32)])
    assert sorted(forecast_view.completed(runs)["run_id"]) == ["k1", "k2b"]


def test_the_exported_summary_carries_each_finding_and_the_job_difference():
    from scalelab.report import export

    found, _ = results.scan(str(ROOT / "tests" / "data" / "fp32-baseline-bf16-pair"))
    _, scaling, text = report(found)
    configs = export.summary(scaling, explain.bench_frame(found), 2, "x")["configurations"]
    assert configs[0]["findings"] == [] and configs[1]["job_differs"] == ""
    assert [f"  ! {f}" for f in configs[1]["findings"]] == [t for t in text.splitlines() if t.startswith("  ! ")]
    _, scaling, _ = report([run("e1", 1, 100, fp=FP32), run("e2", 2, 400)])
    configs = export.summary(scaling, explain.bench_frame([]), 2, "x")["configurations"]
    assert configs[1]["job_differs"] == "matmuls bfloat16, baseline float32" and configs[1]["efficiency"] is None


def test_an_efficiency_exactly_at_the_noise_band_is_not_flagged_and_just_above_it_is():
    _, scaling, _ = report([run("b1", 1, 100), run("b2", 2, 210)])
    assert row(scaling, 2)["efficiency"] == 1 + plausible.NOISE_FLOOR and not plausible.flagged(row(scaling, 2))
    _, scaling, _ = report([run("b1", 1, 100), run("b2", 2, 210.001)])
    assert plausible.flagged(row(scaling, 2))
    # a row without its sizes (a reference check's own) is never judged
    for sizes in ({}, {"world_size": 2}, {"baseline_world_size": 1}):
        assert not plausible.flagged(SimpleNamespace(efficiency=3.0, **sizes))
    assert plausible.flagged(SimpleNamespace(efficiency=3.0, world_size=2, baseline_world_size=1))


def test_an_mfu_of_exactly_100_percent_is_not_named():
    found = [run("u1", 1, 100), run("u2", 2, 180)]
    found[1]["timing"].update(tflops_per_device=312.0, peak_tflops=312.0, mfu=1.0)
    assert "MFU" not in "".join(t for t in report(found)[2].splitlines() if t.startswith("  !"))


def test_a_benchmark_busbw_above_the_link_is_named_and_one_at_its_margin_is_not():
    base = run("l1", 1, 100)
    two = _emulated(run("l2", 2, 160, nodes=2), 0.2)
    two["timing"]["comm"] = {"compute_s": 0.01, "ddp_busbw_GBps": 0.2 / 8 * (1 + plausible.LINK_MARGIN)}
    assert "above the link" not in report([base, two])[2]  # exactly the margin: not above it
    rows = explain.annotate(scaling_frame(runs_frame([base, two])), explain.bench_frame([]))
    r = SimpleNamespace(**{**row(rows, 2, 2).to_dict(), "bench_busbw_GBps": 0.03})
    assert plausible.findings(r) == ["2 devices on 2 nodes (emulated 200 Mbit/s): all-reduce benchmark busbw 0.03 "
                                     "GB/s is above the link's 0.025 GB/s (emulated 200 Mbit/s): no all-reduce moves "
                                     "bytes faster than the slowest link it crosses; check the link's shaping and the "
                                     "bytes counted"]
    one_node = SimpleNamespace(**{**r.__dict__, "num_nodes": 1, "ddp_busbw_GBps": 9.0, "bench_busbw_GBps": 9.0})
    assert plausible.findings(one_node) == []  # one node: no link rate to hold it against


def test_what_was_checked_for_old_fp32_runs_compute_like_the_baselines_and_cores_at_the_threshold():
    base, two = run("o1", 1, 100, fp=None), run("o2", 2, 240, fp=None)
    base = _with_comm(base, 0.2, 0.0, 0.0, 0.21)
    two = _with_comm(two, 0.2, 0.01, 0.01, 0.21)  # the same compute per device: no line about it
    base["timing"]["had_cpu"] = [0.9]
    base["launch"]["threads"] = two["launch"]["threads"] = 2
    text = report([base, two])[2]
    assert ("Checked: fingerprints: not recorded by these runs (an older scalelab: run the group again); the "
            "baseline had its cores 90 % of the time it was ready to run.") in text
    base["slurm"], two["slurm"] = {"exclusive": False}, {"exclusive": False}  # both shared: nothing against it
    assert "shared its node" not in report([base, two])[2]
    one = run("n1", 1, 100, fp=None)
    assert report([one, run("n2", 2, 240)])[1]["fingerprinted"].tolist() == [False, False]  # the baseline's counts


def test_a_configurations_repeats_each_judged_and_every_difference_named():
    other = {**BF16, "matmul_dtypes": ["float32"], "optimizer": "fused"}
    runs, scaling, text = report([run("r1", 1, 100), run("r2", 2, 190), run("r2b", 2, 190, fp=other)])
    assert list(runs.set_index("run_id")["job_differs"]) == ["", "", "matmuls float32, baseline bfloat16; optimizer "
                                                                     "fused, baseline for-loop"]
    assert row(scaling, 2)["job_differs"] == "matmuls float32, baseline bfloat16; optimizer fused, baseline for-loop"
    assert "2 devices on 1 node: no efficiency (not the baseline's job)." in explain.limiting_line(
        _with_comm_row(scaling))


def _with_comm_row(scaling):
    r = row(scaling, 2).to_dict()
    r.update(compute_s=0.01, synced_s=0.01, waited_s=0.0, allreduce_s=0.001, comm_share=0.0, hidden_fraction=1.0)
    return SimpleNamespace(**r)


def test_the_reference_fingerprint_is_the_most_common_even_where_another_is_newest():
    found = [run("c1", 1, 100), run("c1b", 1, 100), run("c1c", 1, 100, fp=FP32), run("c2", 2, 180)]
    for r, t in zip(found, ("2026-01-01T00:00:01", "2026-01-01T00:00:02", "2026-01-01T00:00:03",
                            "2026-01-01T00:00:04")):
        r["created"] = t
    runs = runs_frame(found).set_index("run_id")
    assert runs.loc["c2", "job_differs"] == "" and runs.loc["c1c", "job_differs"] == (
        "matmuls float32, baseline bfloat16")


def test_the_noise_of_tiny_throughputs_and_a_band_printed_to_the_point():
    # a few samples a second (a huge model on slow devices): the spread is as relative as anywhere
    slow = [run("s1", 1, 0.5), run("s1b", 1, 0.4), run("s1c", 1, 0.6), run("s2", 2, 1.3)]
    assert plausible.noise(row(report(slow)[1], 2)) == pytest.approx(0.2)
    # the baseline 100 ± 12.45 %: printed as 12 % (not rounded up from a slightly larger figure)
    found = [run("h1", 1, 87.55), run("h1b", 1, 100), run("h1c", 1, 112.45), run("h2", 2, 230)]
    assert "efficiency 115 % cannot be weak scaling" in report(found)[2] and "(100 % + 12 % noise)" in report(found)[2]
    assert not plausible.flagged(SimpleNamespace(world_size=2, baseline_world_size=1))  # no efficiency: no verdict


def test_each_finding_in_full():
    found, _ = results.scan(str(ROOT / "tests" / "data" / "fp32-baseline-bf16-pair"))
    (line,) = [t for t in report(found)[2].splitlines() if t.startswith("  ! ")]
    assert line == (
        "  ! 2 devices on 1 node: efficiency 203 % cannot be weak scaling: each device does what one baseline device "
        "did, so 2 of them give at most 2× its throughput (100 % + 5 % noise). Checked: fingerprints: not recorded "
        "by these runs (written before scalelab observed its steps: a 1-device step then ran without the precision's "
        "autocast, Lightning-AI/pytorch-lightning#16857; run the group again); each device computed a step in 104.6 "
        "ms here, 236.2 ms at the baseline: faster compute per device, which more devices cannot give; the baseline "
        "had its core 100 % of the time it was ready to run.")
    one = [run("u1", 1, 100), run("u2", 2, 180)]
    one[0]["timing"].update(tflops_per_device=330.0, peak_tflops=312.0, mfu=330 / 312)
    assert [t for t in report(one)[2].splitlines() if t.startswith("  ! ")] == [
        "  ! 1 device on 1 node: MFU 106 % cannot be: no device runs above its peak (312 TFLOP/s); check the peak "
        "(--peak_tflops, or the datasheet's for this precision) and the FLOPs counted per sample"]
    base, two = run("x1", 1, 100), run("x2", 2, 240)
    base["slurm"], two["slurm"] = {"exclusive": False}, {"exclusive": True}
    assert ("Checked: fingerprints: the same job as the baseline; the baseline shared its node (not --exclusive): a "
            "neighbour's job may have slowed it.") in report([base, two])[2]
    base["slurm"]["exclusive"] = True
    assert ("Checked: fingerprints: the same job as the baseline; the baseline had its node alone (--exclusive).") in \
        report([base, two])[2]


def test_the_ceiling_is_the_baselines_device_count_times_the_ratio():
    found = [run("d2", 2, 200), run("d4", 4, 430)]  # a group whose fewest devices are 2
    assert ("4 devices on 1 node: efficiency 108 % cannot be weak scaling: each device does what one baseline "
            "device did, so 4 of them give at most 2× its throughput") in report(found)[2]


def test_compute_per_device_is_held_against_the_baselines_only_under_weak_scaling_and_beyond_the_noise():
    def said(compute_1, compute_2, scaling="weak", batch=(64, 64), base_runs=(100,)):
        found = [_with_comm(run(f"p1{i}", 1, sps, scaling=scaling, batch_per_device=batch[0]), compute_1, 0.0, 0.0,
                            compute_1) for i, sps in enumerate(base_runs)]
        found.append(_with_comm(run("p2", 2, 240, scaling=scaling, batch_per_device=batch[1]), compute_2, 0.001,
                                0.001, compute_2))
        return "faster compute per device" in report(found)[2]

    assert said(0.2, 0.1) and not said(0.2, 0.2)
    assert not said(0.2, 0.2 * (1 - plausible.NOISE_FLOOR))  # exactly at the band: not beyond it
    assert said(0.2, 0.2 * (1 - plausible.NOISE_FLOOR) - 1e-9)
    # a baseline whose repeats spread ±10 %: 8 % less compute is inside its noise
    assert not said(0.2, 0.184, base_runs=(90, 100, 110)) and said(0.2, 0.17, base_runs=(90, 100, 110))
    # strong scaling halves each device's share: half the compute is what it should be, not a finding
    assert not said(0.2, 0.1, scaling="strong", batch=(64, 32))


def test_a_frame_without_a_link_column_still_names_its_configurations():
    _, scaling, _ = report([run("w1", 1, 100), run("w2", 2, 240)])
    assert tables.scaling_table(scaling.drop(columns="link"), "simple")[-1].startswith(
        "  ! 2 devices on 1 node: efficiency 120 % cannot be weak scaling")


def test_a_configuration_of_another_job_prints_no_speedup_cells():
    _, scaling, _ = report([run("j1", 1, 100, fp=FP32), run("j2", 2, 400)])
    cells = tables.scaling_table(scaling, "tsv")[2].splitlines()[2].split("\t")
    assert [c.strip() for c in cells[4:6]] == ["≠ job", "—"]


def test_a_reference_check_states_the_band_it_held_the_efficiency_against():
    from scalelab.report import reference

    _, scaling, _ = report([run("q1", 1, 90), run("q1b", 1, 100), run("q1c", 1, 110), run("q2", 2, 240)])
    verdict, _ = reference._verdict("c", "efficiency", [0.9, -0.1, None, ""], row(scaling, 2),
                                    {"kind": "training", "reference": {}})
    assert verdict == "FAIL c.efficiency: 1.2 is beyond what scaling gives (1 + 0.1 noise): the report says what was " \
                      "checked"


def test_a_baseline_whose_node_sharing_is_unknown_is_said_nothing_of():
    base, two = run("k1", 1, 100), run("k2", 2, 240)  # the baseline outside SLURM: whether it shared is unknown
    two["slurm"] = {"exclusive": True}
    _, scaling, text = report([base, two])
    assert "Checked: fingerprints: the same job as the baseline." in text  # nothing said of a node
    for unknown in (None, float("nan")):
        r = SimpleNamespace(**{**row(scaling, 2).to_dict(), "baseline_exclusive": unknown, "exclusive": unknown})
        assert plausible.checks(r) == "fingerprints: the same job as the baseline"


def test_a_baseline_that_recorded_no_fingerprint_is_held_against_nothing():
    """The 1-device run from before scalelab observed its steps, the 2- and 4-device ones after: the report's
    baseline is the 1-device run, and it says nothing of what ran, so no run is named another job (not even the
    4-device one that differs from the 2-device one: neither is the baseline)."""
    found = [run("v1", 1, 100, fp=None), run("v2", 2, 190), run("v4", 4, 370, fp=FP32)]
    runs = runs_frame(found)
    assert list(runs["job_differs"]) == ["", "", ""]
    # a group whose baseline recorded none leaves the next group's judged as ever (groups come in key order: gpt first)
    found = [run("g1", 1, 100, fp=None, model="gpt"), run("g2", 2, 190, model="gpt"), run("m1", 1, 100, fp=FP32),
             run("m2", 2, 190)]
    assert runs_frame(found).set_index("run_id")["job_differs"].to_dict() == {
        "g1": "", "g2": "", "m1": "", "m2": "matmuls bfloat16, baseline float32"}


def test_a_figure_carries_at_most_limit_warnings_and_counts_the_rest():
    """Two warnings under a limit of 2 are both printed with no "0 more" line; under a limit of 1 the first is
    printed and the line after it says how many the report holds besides (1, not the limit or the total)."""
    found = [make_result("p1", 1, samples_per_s=100), make_result("p2", 2, samples_per_s=190),
             make_result("p4", 4, samples_per_s=380)]
    for r in found[1:]:
        r["launch"]["oversubscribed"] = "oversubscribed: ranks 0 and 1 shared core 0"
    _, scaling, _ = report(found)
    both = [f"! A, {n} devices on 1 node: oversubscribed: ranks 0 and 1 shared core 0; not this hardware's scaling"
            for n in (2, 4)]
    assert plausible.figure_warnings(scaling, 2) == both
    assert plausible.figure_warnings(scaling, 1) == [both[0], "! ... 1 more in the report"]


def _job_differences_by_definition(runs: pd.DataFrame) -> pd.Series:
    """job_differences as first written (a count per baseline run, a cell set per run): what the linear one gives."""
    from scalelab import fingerprint
    from scalelab.keys import SCALE

    out = pd.Series("", index=runs.index)
    for _, members in runs[runs["status"] == "completed"].groupby("group"):
        config = members.sort_values(SCALE).iloc[0]
        base = members[(members["world_size"] == config["world_size"]) & (members["num_nodes"] == config["num_nodes"])
                       & (members["link"] == config["link"]) & (members["fingerprint"] != "")].sort_values("created")
        if base.empty:
            continue
        prints = [json.loads(text) for text in base["fingerprint"]]
        keys = [json.dumps(fingerprint.comparable(p)) for p in prints]
        reference = prints[max(range(len(keys)), key=lambda i: (keys.count(keys[i]), i))]
        for index, text in members["fingerprint"].items():
            if text:
                out[index] = "; ".join(fingerprint.differences(reference, json.loads(text)))
    for index, text in runs.loc[runs["status"] == "completed", "fingerprint"].items():
        asked = (fingerprint.asked_differences(json.loads(text), bool(runs.at[index, "compile"] == True))  # noqa: E712
                 if text else [])
        out[index] = "; ".join(filter(None, [out[index], *asked]))
    return out


_PRINTS = [None, BF16, FP32, {**BF16, "optimizer": "fused"},
           {**BF16, "compiled_graphs": 2, "compiled_steps": 3, "steps_after_warmup": 10}]


@settings(max_examples=100, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from(range(5)),
                               st.integers(0, 9), st.booleans(), st.booleans(), st.booleans()), max_size=9))
def test_job_differences_is_its_definition_on_any_folder(runs):
    """Groups of generated runs (devices, nodes, a fingerprint of five or none, dates that tie, failed runs,
    --compile asked, two workloads): the linear job_differences gives the definition's strings, in its order."""
    found = []
    for i, (world, nodes, fp, day, failed, compiled, other) in enumerate(runs):
        r = run(f"r{i}", world, 100.0 * world, fp=_PRINTS[fp], compile=compiled, **({"width": 64} if other else {}))
        r["launch"]["num_nodes"] = min(nodes, world)
        r["created"] = f"2026-01-0{day}T00:00:00" if day else r["created"]
        if failed:
            r["status"] = "failed"
        found.append(r)
    frame = runs_frame(found)
    assert plausible.job_differences(frame).tolist() == _job_differences_by_definition(frame).tolist()
    assert plausible.job_differences(frame).dtype == _job_differences_by_definition(frame).dtype
    # by position, not label: the frame shuffled and cut; and a status column whose missing value is NA, not NaN
    shuffled = frame.sample(frac=1, random_state=len(frame)).iloc[1:]
    assert plausible.job_differences(shuffled).tolist() == _job_differences_by_definition(shuffled).tolist()
    na = frame.astype({"status": pd.StringDtype("python", na_value=pd.NA)})
    na.loc[na["status"] != "completed", "status"] = pd.NA
    assert plausible.job_differences(na).tolist() == _job_differences_by_definition(na).tolist()


def _slow_bench_pair(sps):
    """A 1-device run and a 2-device one whose all-reduce took 1 ms, beside a benchmark that prices its 8 MB at
    86 ms (between its 1 and 10 MB rows): the network allows 12 % at most."""
    base = _with_comm(run("b1", 1, 100), 0.01, 0.0, 0.0, 0.01)
    two = _with_comm(run("b2", 2, sps), 0.01, 0.001, 0.0005, 0.0105)
    slow = [dict(r, time_s=r["time_s"] * 10, busbw_GBps=r["busbw_GBps"] / 10) for r in ROWS]
    return [base, two, _bench(2, slow)]


def test_an_efficiency_above_what_the_benchmark_says_the_network_allows_names_the_benchmark():
    """The `predicted eff.` column's top is the benchmark's all-reduce fully hidden: a run above it (beyond its noise)
    had a faster all-reduce than the benchmark measured, so the benchmark, not the scaling, is wrong (a make demo
    whose benchmark ran beside another job printed 37 % against 23–30 % in silence)."""
    _, scaling, text = report(_slow_bench_pair(180))
    top = row(scaling, 2).predicted_efficiency_overlap
    assert 0.1 < top < 0.12
    assert [t for t in text.splitlines() if t.startswith("  ! ")] == [
        f"  ! 2 devices on 1 node: efficiency 90 % is above what the network alone allows ({top * 100:.0f} %; "
        f"{top * 1.05 * 100:.0f} % with the runs' 5 % noise): the benchmarks priced this step's all-reduce at 85.6 ms, "
        "and the run's own took 1.0 ms. The benchmarks ran slower than the training's all-reduce did (its node or "
        "link busier while they ran, or another setup): its `predicted eff.` is no ceiling here; run the benchmarks "
        "again beside these runs"]


def test_an_efficiency_at_the_top_of_its_prediction_plus_noise_is_not_named_and_just_above_it_is():
    r = row(report(_slow_bench_pair(180))[1], 2)
    top = r.predicted_efficiency_overlap * (1 + plausible.noise(r))
    assert not plausible.above_prediction(SimpleNamespace(**{**r.to_dict(), "efficiency": top}))
    assert plausible.above_prediction(SimpleNamespace(**{**r.to_dict(), "efficiency": top * 1.001}))
    assert not plausible.above_prediction(SimpleNamespace(**{**r.to_dict(), "efficiency": top * 1.001,
                                                             "predicted_efficiency_overlap": 1.0}))  # flagged's rule
    assert not plausible.above_prediction(SimpleNamespace(**{**r.to_dict(), "efficiency": 2.0}))  # flagged already
    assert not plausible.above_prediction(SimpleNamespace(**{**r.to_dict(), "job_differs": "another job"}))


@pytest.mark.parametrize("strategy, priced, ran, said", [
    ("ddp", 0.0999, 0.1999, ": the benchmarks priced this step's all-reduce at 99.9 ms, and the run's own took "
                            "199.9 ms"),
    ("ddp", 0.0999, None, ": the benchmarks priced this step's all-reduce at 99.9 ms"),
    ("ddp", float("nan"), 0.1999, ""),
    ("fsdp", 0.0999, 0.2999, ": the benchmarks priced this step's all-gathers and reduce-scatters at 99.9 ms, and "
                             "the run's own took 299.9 ms"),
], ids=["both", "no_allreduce_timed", "nothing_priced", "fsdp"])
def test_the_line_above_a_prediction_gives_each_figure_it_has(strategy, priced, ran, said):
    """Each figure in its own unit and rounding, the limit as tested (70.49 % × 1.1249 = 79 %, not 70 + 12), none
    that is not known (a benchmark that priced nothing, a run that timed no all-reduce), and an FSDP step's own
    collectives (its all-reduce time is not its communication)."""
    r = SimpleNamespace(efficiency=0.95, predicted_efficiency_overlap=0.7049, world_size=2, baseline_world_size=1,
                        job_differs="", throughput=100.0, throughput_min=87.51, throughput_max=112.49,
                        predicted_allreduce_s=priced, strategy=strategy, allreduce_s=ran if strategy == "ddp" else 0.5,
                        collectives_s=ran if strategy == "fsdp" else 0.5)
    what = "all-gathers and reduce-scatters" if strategy == "fsdp" else "all-reduce"
    assert plausible.noise(r) == pytest.approx(0.1249)
    assert plausible._above_prediction(r) == (
        f"efficiency 95 % is above what the network alone allows (70 %; 79 % with the runs' 12 % noise){said}. The "
        f"benchmarks ran slower than the training's {what} did (its node or link busier while they ran, or another "
        "setup): its `predicted eff.` is no ceiling here; run the benchmarks again beside these runs")
