"""What the ReFrame checks read of scalelab (report/reframe_refs.py), on constructed result folders: the figures of a
test's folder as the report computes them, their references from a reference file, the sanity problems, and the
report's PERF lines as performance variables. ReFrame itself runs them in chapter 14's blocks (make test runs them;
tests/scenarios/test_reframe.py reads what they left)."""

import json

import pytest

from helpers import ROWS, _bench, make_result
from scalelab import results
from scalelab.report import reference, reframe_refs

CPU = {"accelerator": "cpu"}


def entry(name, world, nodes, kind="training", **ref):
    e = {"name": name, "kind": kind, "hardware": CPU, "world_size": world, "num_nodes": nodes, "reference": ref}
    return {**e, "workload": {"model": "mlp"}} if kind == "training" else e


def write(folder, *found):
    for r in found:
        results.write(str(folder), r)
    return folder


def test_a_rungs_figure_is_the_reports_and_its_reference_the_entry_naming_its_configuration(tmp_path):
    rung = write(tmp_path, make_result("x4", 4, nodes=2, samples_per_s=300.0))
    checks = [entry("mlp-cpu-4x2", 4, 2, throughput_per_device=[70, -0.1, None, "samples/s"],
                    efficiency=[0.9, -0.1, None, ""]),
              entry("mlp-cpu-2x1", 2, 1, throughput_per_device=[90, -0.1, None, "samples/s"]),
              entry("ar", 4, 2, kind="allreduce", busbw=[1.0, -0.1, None, "GB/s"])]
    found, refs = reframe_refs.figures(rung, checks)
    scaling, _ = reframe_refs.frames_of(rung)
    assert found == {"throughput_per_device": (scaling["throughput_per_device"].iloc[0], "samples/s")}
    assert found["throughput_per_device"][0] == 75.0
    # its own entry's throughput; not its efficiency (one rung alone has no baseline), nor another rung's, nor busbw
    assert refs == {"throughput_per_device": (70, -0.1, None, "samples/s")}


def test_a_self_checks_folder_gives_the_largest_runs_figures_its_efficiency_and_the_benchmarks_busbw(tmp_path):
    folder = write(tmp_path, make_result("one", 1, samples_per_s=100.0), make_result("two", 2, samples_per_s=180.0),
                   _bench(2, ROWS))
    checks = [entry("two", 2, 1, efficiency=[0.95, -0.1, None, ""]),
              entry("ar", 2, 1, kind="allreduce", busbw=[2.0, -0.1, None, "GB/s"])]
    found, refs = reframe_refs.figures(folder, checks)
    assert found == {"throughput_per_device": (90.0, "samples/s"), "efficiency": (0.9, ""), "busbw": (1.0, "GB/s")}
    assert refs == {"efficiency": (0.95, -0.1, None, ""), "busbw": (2.0, -0.1, None, "GB/s")}
    assert reframe_refs.figures(folder)[1] == {}  # no reference file: figures logged, not judged


def test_mfu_in_percent_where_the_peak_is_known(tmp_path):
    run = make_result("g", 1)
    run["timing"].update(mfu=0.42, peak_tflops=312.0, tflops_per_device=131.0)
    found, _ = reframe_refs.figures(write(tmp_path, run))
    assert found["mfu"] == pytest.approx((42.0, "%"))


def test_a_reference_in_another_unit_is_a_problem_as_in_the_report():
    found = {"throughput_per_device": (90.0, "samples/s")}
    assert reframe_refs.unit_problems(found, {"throughput_per_device": (80, -0.1, None, "samples/s")}) == []
    assert reframe_refs.unit_problems(found, {"throughput_per_device": (80, -0.1, None, "tokens/s")}) == [
        "throughput_per_device: measured in samples/s, the reference is in tokens/s"]


def test_result_problems_name_an_invalid_file_a_missing_run_a_failed_one_and_another_size(tmp_path):
    assert reframe_refs.result_problems(tmp_path, "training") == [f"0 training result(s) in {tmp_path}, expected 1"]
    assert reframe_refs.result_problems(tmp_path) == [f"no result.json in {tmp_path}"]
    write(tmp_path, make_result("x2", 2))
    assert reframe_refs.result_problems(tmp_path, "training", 2, 1) == []
    assert reframe_refs.result_problems(tmp_path, "training", 4, 2) == [
        "x2: ran on 2 device(s) on 1 node(s), the test asked 4 on 2"]
    bad = tmp_path / "broken" / "result.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"schema": "scalelab.result", "schema_version": 999}))
    problems = reframe_refs.result_problems(tmp_path, "training", 2, 1)
    assert len(problems) == 1 and problems[0].startswith(f"{bad}: schema_version 999 is newer")
    failed = tmp_path.parent / "failed"
    write(failed, make_result("f", 1, status="failed"))
    assert reframe_refs.result_problems(failed, "training", 1, 1) == ["f: failed: boom"]


def test_the_reports_perf_lines_become_variables_with_the_reference_of_the_check_they_name():
    checks = [entry("site:mlp-2x1", 2, 1, efficiency=[0.9, -0.1, None, ""],
                    throughput_per_device=[90, -0.1, None, "samples/s"])]
    lines = ["PASS site:mlp-2x1.efficiency: 0.9 (reference 0.9, accepted 0.81..inf)",
             "PERF site:mlp-2x1.efficiency=0.9", "PERF site:mlp-2x1.throughput_per_device=90.5 samples/s",
             "PERF other.busbw=1 GB/s", "reference: ..."]
    found, refs = reframe_refs.report_figures(lines, checks)
    assert found == {"site_mlp-2x1.efficiency": (0.9, ""), "site_mlp-2x1.throughput_per_device": (90.5, "samples/s"),
                     "other.busbw": (1.0, "GB/s")}  # ReFrame keeps what follows a name's last ':'
    assert refs == {"site_mlp-2x1.efficiency": (0.9, -0.1, None, ""),
                    "site_mlp-2x1.throughput_per_device": (90, -0.1, None, "samples/s")}


def test_perf_values_read_what_check_prints(tmp_path):
    folder = write(tmp_path, make_result("x1", 1, samples_per_s=100.0), make_result("x2", 2, samples_per_s=180.0))
    scaling, bench = reframe_refs.frames_of(folder)
    checks = [entry("two", 2, 1, efficiency=[0.9, -0.1, None, ""], throughput_per_device=[90, -0.1, None, "samples/s"])]
    lines, failed = reference.check(checks, scaling, bench, str(folder))
    assert failed == 0
    assert reference.perf_values(lines) == {"two.efficiency": (0.9, ""),
                                            "two.throughput_per_device": (90.0, "samples/s")}


@pytest.mark.parametrize("line, bounds", [
    ("FAIL a.busbw: 0.3292 GB/s below 900 (reference 1000, accepted 900..inf)", True),
    ("FAIL a.efficiency: 0.75 below 0.81 (reference 0.9, accepted 0.81..inf)", True),
    ("FAIL m.throughput_per_device: 90 samples/s above 84 (reference 80, accepted -inf..84)", True),
    ("FAIL m: no training run on 4 device(s), 2 node(s), cpu in out (nothing was checked)", False),
    ("FAIL m.throughput_per_device: measured in samples/s, the reference is in tokens/s", False),
    ("FAIL m.efficiency: 1.3 is beyond what scaling gives (1 + 0.1 noise): the report says what was checked", False),
])
def test_only_a_value_outside_its_bounds_is_left_to_reframe(line, bounds):
    problems = reframe_refs.report_problems([line, "reference: 1 check(s) of 1 value(s): 0 passed, 1 failed"])
    assert problems == ([] if bounds else [line])
    assert reframe_refs.report_problems([]) == ["no `reference:` line: benchmark.py --reference did not reach its "
                                                "verdicts"]


def test_matches_is_what_check_judges_a_check_on(tmp_path):
    folder = write(tmp_path, make_result("x2", 2), _bench(2, ROWS))
    scaling, bench = reframe_refs.frames_of(folder)
    assert reference.matches(entry("t", 2, 1), scaling, bench)
    assert not reference.matches(entry("t", 4, 1), scaling, bench)
    assert reference.matches(entry("a", 2, 1, kind="allreduce"), scaling, bench)
    assert not reference.matches(entry("a", 2, 2, kind="allreduce"), scaling, bench)


def test_a_check_that_names_no_kind_is_a_training_check(tmp_path):
    """A reference file may leave `kind:` out (the loader reads it as training): such a check finds its training
    run, as `check` judges it, and is not looked for among the benchmark runs (none here)."""
    folder = write(tmp_path, make_result("x2", 2))
    scaling, bench = reframe_refs.frames_of(folder)
    unnamed = {k: v for k, v in entry("t", 2, 1).items() if k != "kind"}
    assert reference.matches(unnamed, scaling, bench)
    assert not reference.matches({**unnamed, "world_size": 4}, scaling, bench)
