"""Reference checks (`benchmark.py --reference` / `--write_reference`) on folders written by results.write."""

import json
import math
import re

import pandas as pd
import pytest
import yaml

from helpers import ROWS, _bench, make_result, run_script
from scalelab import results
from scalelab.entry import run_main
from scalelab.errors import UsageError
from scalelab.report import reference
from scalelab.report.cli import main

PERF = re.compile(r"^PERF (\S+)=(\S+)(?: (\S+))?$")


def folder(path, two=180.0, four=300.0, busbw_scale=1.0, with_four=True, with_base=True):
    """A sweep (1, 2, 4 devices; 4 on 2 nodes) and a 2-rank all-reduce benchmark, as real result files."""
    runs = [make_result("x2", 2, samples_per_s=two)]
    runs += [make_result("x1", 1, samples_per_s=100.0)] if with_base else []
    runs += [make_result("x4", 4, nodes=2, samples_per_s=four)] if with_four else []
    for r in runs:
        results.write(str(path), r)
    rows = [dict(r, busbw_GBps=r["busbw_GBps"] * busbw_scale) for r in ROWS]
    results.write(str(path), _bench(2, rows))
    return path


def report(capsys, *argv):
    """(exit code, stdout lines, stderr) of benchmark.py run in this process."""
    code = run_main("benchmark.py", main, [str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


@pytest.fixture
def good_ref(tmp_path, capsys):
    good = folder(tmp_path / "good")
    ref = tmp_path / "ref.yaml"
    code, out, _ = report(capsys, "--output_dir", good, "--write_reference", ref)
    assert code == 0 and out == [f"written: {ref} (4 check(s) of 6 value(s))"]
    return ref


def test_write_then_check_the_same_folder_passes(tmp_path, capsys, good_ref):
    assert not [p for p in good_ref.parent.iterdir() if p.name.startswith(".tmp-")]  # written atomically
    code, out, err = report(capsys, "--output_dir", tmp_path / "good", "--reference", good_ref)
    assert code == 0, out + [err]
    verdicts = [line for line in out if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 6 and all(v.startswith("PASS ") for v in verdicts)
    perf = {m.group(1): (float(m.group(2)), m.group(3)) for m in map(PERF.match, out) if m}
    assert perf == {"mlp-cpu-1x1.throughput_per_device": (100.0, "samples/s"),
                    "mlp-cpu-2x1.efficiency": (0.9, None), "mlp-cpu-2x1.throughput_per_device": (90.0, "samples/s"),
                    "mlp-cpu-4x2.efficiency": (0.75, None), "mlp-cpu-4x2.throughput_per_device": (75.0, "samples/s"),
                    "allreduce-cpu-2x1.busbw": (1.0, "GB/s")}
    assert out[-1] == "reference: 4 check(s) of 6 value(s): 6 passed, 0 failed"
    checks = yaml.safe_load(good_ref.read_text())["checks"]
    assert checks[1]["reference"]["efficiency"] == [0.9, -0.1, None, ""]  # ReFrame's tuple, unbounded above


def test_a_reference_file_with_the_old_names_still_checks_and_says_so_once(tmp_path, capsys, good_ref):
    """A nightly job's file written before schema 3 (devices = world size, nodes, the GPT as transformer): the same
    verdicts, and one warning line naming what it read as what."""
    text = good_ref.read_text()
    old = text.replace("  world_size:", "  devices:").replace("num_nodes:", "nodes:").replace(
        "baseline_world_size:", "baseline_devices:")
    assert "world_size:" not in old and "num_nodes" not in old and "  devices: 2" in old
    (tmp_path / "old.yaml").write_text(old)
    code, out, err = report(capsys, "--output_dir", tmp_path / "good", "--reference", tmp_path / "old.yaml")
    assert code == 0 and out[-1] == "reference: 4 check(s) of 6 value(s): 6 passed, 0 failed"
    assert err == (f"benchmark.py: warning: --reference {tmp_path / 'old.yaml'}: read `devices` as `world_size`, "
                   "`nodes` as `num_nodes`, `baseline_devices` as `baseline_world_size`, as scalelab now names them; "
                   "rename them in the file (--write_reference writes the new names)\n")
    checks = [{"name": "t", "workload": {"model": "transformer", "preset": "tiny"}, "devices": 2, "nodes": 1,
               "hardware": {"accelerator": "cpu"}, "reference": {"efficiency": [0.9, None, None, ""]}}]
    (tmp_path / "gpt.yaml").write_text(yaml.safe_dump({"checks": checks}))
    loaded = reference.load(str(tmp_path / "gpt.yaml"))
    assert loaded[0]["workload"] == {"model": "gpt", "preset": "tiny"}  # the model renamed, the other fields kept
    assert (loaded[0]["world_size"], loaded[0]["num_nodes"]) == (2, 1)
    assert "`model: transformer` as `model: gpt`" in capsys.readouterr().err


def test_efficiency_below_tolerance_fails_naming_the_check(tmp_path, capsys, good_ref):
    slow = folder(tmp_path / "slow", two=150.0, busbw_scale=0.5)  # efficiency 0.75 < 0.9 - 10 %; busbw halved
    code, out, _ = report(capsys, "--output_dir", slow, "--reference", good_ref)
    assert code == 1
    fails = [line for line in out if line.startswith("FAIL")]
    assert [f.split(":")[0] for f in fails] == ["FAIL mlp-cpu-2x1.efficiency", "FAIL mlp-cpu-2x1.throughput_per_device",
                                                "FAIL allreduce-cpu-2x1.busbw"]
    assert "0.75 below 0.81" in fails[0] and "PERF mlp-cpu-2x1.efficiency=0.75" in out
    assert out[-1] == "reference: 4 check(s) of 6 value(s): 3 passed, 3 failed"
    within = folder(tmp_path / "within", two=170.0)  # 0.944 of the reference: inside the -10 %
    assert report(capsys, "--output_dir", within, "--reference", good_ref)[0] == 0


def test_a_reference_entry_matching_no_run_fails(tmp_path, capsys, good_ref):
    part = folder(tmp_path / "part", with_four=False)
    code, out, _ = report(capsys, "--output_dir", part, "--reference", good_ref)
    assert code == 1
    missing = [line for line in out if line.startswith("FAIL")]
    assert len(missing) == 1 and missing[0].startswith("FAIL mlp-cpu-4x2: no training run on 4 device(s), 2 node(s)")
    assert out[-1] == "reference: 4 check(s) of 6 value(s): 4 passed, 2 failed"  # its efficiency and throughput
    (tmp_path / "empty").mkdir()
    code, out, _ = report(capsys, "--output_dir", tmp_path / "empty", "--reference", good_ref)
    assert code == 1 and out[-1] == "reference: 4 check(s) of 6 value(s): 0 passed, 6 failed"


def test_efficiency_against_another_baseline_fails(tmp_path, capsys, good_ref):
    no_base = folder(tmp_path / "nobase", with_base=False)  # efficiency now against 2 devices: not comparable
    code, out, _ = report(capsys, "--output_dir", no_base, "--reference", good_ref)
    assert code == 1
    assert any(line.startswith("FAIL mlp-cpu-4x2.efficiency: efficiency here is against 2 device(s)") for line in out)


def test_hand_written_subset_of_workload_fields_and_upper_bound(tmp_path, capsys):
    good = folder(tmp_path / "good")
    results.write(str(tmp_path / "good"), make_result("b2", 2, samples_per_s=150, batch_size=32))
    entry = {"name": "mlp2", "workload": {"model": "mlp", "batch_size": 64}, "hardware": {"accelerator": "cpu"},
             "world_size": 2, "num_nodes": 1, "reference": {"throughput_per_device": [80, None, 0.05, "samples/s"]}}
    ref = tmp_path / "hand.yaml"
    ref.write_text(yaml.safe_dump({"checks": [entry]}))
    code, out, _ = report(capsys, "--output_dir", good, "--reference", ref)
    assert code == 1 and out[0].startswith("FAIL mlp2.throughput_per_device: 90 samples/s above 84")
    entry["reference"]["throughput_per_device"][3] = "tokens/s"  # another quantity than the runs measured
    ref.write_text(yaml.safe_dump({"checks": [entry]}))
    code, out, _ = report(capsys, "--output_dir", good, "--reference", ref)
    assert code == 1 and "measured in samples/s, the reference is in tokens/s" in out[0]
    entry["workload"] = {"model": "mlp"}  # two batch sizes match: refused rather than one picked
    ref.write_text(yaml.safe_dump({"checks": [entry]}))
    code, out, _ = report(capsys, "--output_dir", good, "--reference", ref)
    assert code == 1 and out[0].startswith("FAIL mlp2: 2 workloads")


@pytest.mark.parametrize("text, words", [
    ("checks: [\n", "not valid YAML"),
    ("- 1\n", "non-empty `checks:` list"),
    ("checks: []\n", "non-empty `checks:` list"),
    ("checks:\n- {name: a b, workload: {}, hardware: {accelerator: cpu}, world_size: 1, num_nodes: 1}\n", "no spaces"),
    ("checks:\n- {name: a, workload: {}, hardware: {accelerator: cpu}, world_size: 0, num_nodes: 1,"
     " reference: {efficiency: [1, -0.1, null, '']}}\n", "`world_size` must be a positive integer"),
    ("checks:\n- {name: a, workload: {}, hardware: {accelerator: cpu}, world_size: 1, num_nodes: 1,"
     " reference: {efficiency: [0.9, -0.1, null]}}\n", "expected [value, lower, upper, unit]"),
    ("checks:\n- {name: a, workload: {}, hardware: {accelerator: cpu}, world_size: 1, num_nodes: 1,"
     " reference: {efficiency: [0.9, 0.1, null, '']}}\n", "lower threshold must be a fraction in [-1, 0]"),
    ("checks:\n- {name: a, workload: {}, hardware: {accelerator: cpu}, world_size: 1, num_nodes: 1,"
     " reference: {speed: [0.9, -0.1, null, '']}}\n", "unknown quantity 'speed'"),
])
def test_a_malformed_reference_file_is_one_line(tmp_path, capsys, text, words):
    (tmp_path / "out").mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code, out, err = report(capsys, "--output_dir", tmp_path / "out", "--reference", bad)
    assert code == 2 and out == [] and err.count("\n") == 1 and words in err, err
    assert err.startswith(f"benchmark.py: error: --reference {bad}")


def test_cli_end_to_end_one_line_errors_and_exit_codes(tmp_path, good_ref):
    """As a nightly job sees it: a real subprocess, a missing file is one line, a failing folder exits 1."""
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "good", "--reference", tmp_path / "nope.yaml")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unreadable" in proc.stderr
    assert "Traceback" not in proc.stderr
    slow = folder(tmp_path / "slow", two=100.0)
    proc = run_script("benchmark.py", "--output_dir", slow, "--reference", good_ref)
    assert proc.returncode == 1 and "FAIL mlp-cpu-2x1.efficiency" in proc.stdout, proc.stderr


def test_flags_that_do_not_go_together(tmp_path, capsys, good_ref):
    good = tmp_path / "good"
    assert report(capsys, "--output_dir", good, "--reference", good_ref, "--plot", tmp_path / "p")[0] == 2
    assert report(capsys, "--output_dir", good, "--reference", good_ref, "--reference_tolerance", "0.2")[0] == 2
    code, _, err = report(capsys, "--output_dir", good, "--write_reference", good_ref, "--reference_tolerance", "5")
    assert code == 2 and "expected a fraction in (0, 1]" in err
    assert report(capsys, "--output_dir", good, "--write_reference", good_ref, "--reference_tolerance", "0.2")[0] == 0
    assert yaml.safe_load(good_ref.read_text())["checks"][0]["reference"]["throughput_per_device"][1] == -0.2


def test_bounds_follow_reframe():
    assert reference.bounds(100, -0.1, None) == pytest.approx((90, math.inf))
    assert reference.bounds(40, None, 0.1) == pytest.approx((-math.inf, 44))
    assert reference.bounds(-10, -0.5, 0.5) == pytest.approx((-15, -5))  # |value|: negative references too


def test_writing_and_checking_a_folder_count_the_same_checks_and_values(tmp_path, capsys):
    """A folder whose 2-node configuration has a forecast_error (a quantity drafted only where the track record has
    one): both commands say how many checks (configurations) and values (quantities) the file holds."""
    from test_forecast import STEP1, bench, ring, run

    for r in [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), run("b", 2, 2, STEP1 + 1.3 * ring(2)),
              bench()]:
        results.write(str(tmp_path / "runs"), r)
    ref = tmp_path / "ref.yaml"
    code, written, _ = report(capsys, "--output_dir", tmp_path / "runs", "--write_reference", ref)
    assert code == 0
    checks = yaml.safe_load(ref.read_text())["checks"]
    values = [(c["name"], q) for c in checks for q in c["reference"]]
    assert any(q == "forecast_error" for _, q in values)
    code, out, _ = report(capsys, "--output_dir", tmp_path / "runs", "--reference", ref)
    verdicts = [line for line in out if line.startswith(("PASS", "FAIL"))]
    assert code == 0 and len(verdicts) == len(values)
    said = f"{len(checks)} check(s) of {len(values)} value(s)"
    assert written == [f"written: {ref} ({said})"]
    assert out[-1] == f"reference: {said}: {len(values)} passed, 0 failed"


def _entry(**changes):
    entry = {"name": "c1", "workload": {"model": "mlp"}, "world_size": 2, "num_nodes": 1,
             "hardware": {"accelerator": "cpu"},
             "reference": {"efficiency": [0.9, -0.1, None, ""]}}
    return {k: v for k, v in {**entry, **changes}.items() if v is not DROP}


DROP = object()
C1 = "check 1 (c1)"


@pytest.mark.parametrize("checks, message", [
    ([[1]], "check 1: expected a mapping, got list"),
    ([_entry(name="a b")], "check 1: `name` must be letters, digits and _.:+/- (no spaces), got 'a b'"),
    ([_entry(name=DROP)], "check 1: `name` must be letters, digits and _.:+/- (no spaces), got None"),
    ([_entry(kind="nccl")], f"{C1}: kind must be training or allreduce, got 'nccl'"),
    ([_entry(workload=DROP)], f"{C1}: a training check needs a `workload:` mapping (its fields select the runs)"),
    ([_entry(world_size=0)], f"{C1}: `world_size` must be a positive integer, got 0"),
    ([_entry(num_nodes=True)], f"{C1}: `num_nodes` must be a positive integer, got True"),
    ([_entry(baseline_world_size="1")], f"{C1}: `baseline_world_size` must be a positive integer, got '1'"),
    ([_entry(hardware={"device": "A100"})],
     f"{C1}: `hardware:` must be a mapping with `accelerator` (and `device` for a GPU)"),
    ([_entry(link=5)], f"{C1}: `link` must be text (\"\" for a real network), got 5"),
    ([_entry(reference={})], f"{C1}: `reference:` must map quantities (efficiency, throughput_per_device, "
                             "forecast_error) to [value, lower, upper, unit]"),
    ([_entry(reference={"busbw": [1, None, None, "GB/s"]})],
     f"{C1}: unknown quantity 'busbw' for a training check (known: efficiency, throughput_per_device, forecast_error)"),
    ([_entry(kind="allreduce", reference={"efficiency": [1, None, None, ""]})],
     f"{C1}: unknown quantity 'efficiency' for a allreduce check (known: busbw)"),
    ([_entry(reference={"efficiency": [0.9, -0.1, None]})],
     f"{C1}: efficiency: expected [value, lower, upper, unit] (e.g. [0.9, -0.1, null, '']), got [0.9, -0.1, None]"),
    ([_entry(reference={"efficiency": ["0.9", -0.1, None, ""]})],
     f"{C1}: efficiency: the reference value must be a number, got '0.9'"),
    ([_entry(reference={"efficiency": [True, -0.1, None, ""]})],
     f"{C1}: efficiency: the reference value must be a number, got True"),
    ([_entry(reference={"efficiency": [0.9, 0.1, None, ""]})],
     f"{C1}: efficiency: the lower threshold must be a fraction in [-1, 0] or null, got 0.1"),
    ([_entry(reference={"efficiency": [0.9, -1.5, None, ""]})],
     f"{C1}: efficiency: the lower threshold must be a fraction in [-1, 0] or null, got -1.5"),
    ([_entry(reference={"efficiency": [0.9, None, -0.1, ""]})],
     f"{C1}: efficiency: the upper threshold must be a fraction >= 0 or null, got -0.1"),
    ([_entry(reference={"efficiency": [0.9, None, None, 0]})],
     f"{C1}: efficiency: the unit must be text ('' for none), got 0"),
    ([_entry(), _entry()], "check 2: name 'c1' is used twice"),
    ([], "expected a mapping with a non-empty `checks:` list (write one with --write_reference)"),
])
def test_each_bad_reference_entry_is_named_with_what_is_wrong(tmp_path, checks, message):
    path = tmp_path / "ref.yaml"
    path.write_text(json.dumps({"checks": checks}))  # JSON is YAML
    with pytest.raises(UsageError) as err:
        reference.load(str(path))
    assert str(err.value) == f"--reference {path}: {message}"


def test_a_good_reference_entry_loads_with_its_edges(tmp_path):
    ok = [_entry(reference={"efficiency": [0.9, -1, 0, ""], "throughput_per_device": [5, 0, None, "samples/s"]},
                 baseline_world_size=1, link=""),
          _entry(name="bench.2x1:a/b+c-d", kind="allreduce", workload=DROP,
                 reference={"busbw": [1, None, 0.5, "GB/s"]})]
    path = tmp_path / "ref.yaml"
    path.write_text(json.dumps({"checks": ok}))
    assert reference.load(str(path)) == ok
    with pytest.raises(UsageError) as err:
        reference.load(str(tmp_path / "none.yaml"))
    assert str(err.value) == f"--reference {tmp_path / 'none.yaml'}: unreadable (No such file or directory)"
    path.write_text("checks:\n  - name: [\n")
    with pytest.raises(UsageError) as err:
        reference.load(str(path))
    # the third line: where the file ends inside the open bracket (the words are libyaml's)
    assert str(err.value) == f"--reference {path}: not valid YAML at line 3 (did not find expected node content)"


ROW = {"efficiency": 0.85, "unit": "samples/s", "baseline_world_size": 1, "throughput_per_device": 123.456789,
       "busbw_GBps": 2.5}


@pytest.mark.parametrize("quantity, tup, entry, row, verdict", [
    ("efficiency", [0.9, -0.1, None, ""], {}, {}, "PASS c.efficiency: 0.85 (reference 0.9, accepted 0.81..inf)"),
    ("efficiency", [0.95, -0.1, None, ""], {}, {},
     "FAIL c.efficiency: 0.85 below 0.855 (reference 0.95, accepted 0.855..inf)"),
    ("efficiency", [0.8, None, 0.05, ""], {}, {},
     "FAIL c.efficiency: 0.85 above 0.84 (reference 0.8, accepted -inf..0.84)"),
    ("efficiency", [0.85, 0, 0, ""], {}, {}, "PASS c.efficiency: 0.85 (reference 0.85, accepted 0.85..0.85)"),
    ("throughput_per_device", [120, -0.1, 0.1, "samples/s"], {}, {},
     "PASS c.throughput_per_device: 123.5 samples/s (reference 120, accepted 108..132)"),
    ("throughput_per_device", [120, -0.1, None, "tokens/s"], {}, {},
     "FAIL c.throughput_per_device: measured in samples/s, the reference is in tokens/s"),
    ("efficiency", [0.9, -0.1, None, "%"], {}, {}, "FAIL c.efficiency: measured in no unit, the reference is in %"),
    ("efficiency", [0.9, -0.1, None, ""], {"baseline_world_size": 2}, {},
     "FAIL c.efficiency: efficiency here is against 1 device(s), the reference's against 2: run the baseline too"),
    ("efficiency", [0.9, -0.1, None, ""], {"baseline_world_size": 1}, {},
     "PASS c.efficiency: 0.85 (reference 0.9, accepted 0.81..inf)"),
    ("efficiency", [0.9, -0.1, None, ""], {}, {"efficiency": float("nan")},
     "FAIL c.efficiency: not measured in the matching runs"),
    ("efficiency", [0.9, -0.1, None, ""], {}, {"efficiency": None},
     "FAIL c.efficiency: not measured in the matching runs"),
    ("busbw", [2, -0.2, None, "GB/s"], {"kind": "allreduce"}, {},
     "PASS c.busbw: 2.5 GB/s (reference 2, accepted 1.6..inf)"),
    ("busbw", [-2, -0.1, 0.1, "GB/s"], {"kind": "allreduce"}, {"busbw_GBps": -1.0},
     "FAIL c.busbw: -1 GB/s above -1.8 (reference -2, accepted -2.2..-1.8)"),  # |value|: below stays below
])
def test_each_verdict_line(quantity, tup, entry, row, verdict):
    line, perf = reference._verdict("c", quantity, tup, {**ROW, **row}, entry)
    assert line == verdict
    assert (perf is None) == line.endswith("not measured in the matching runs")


def test_the_perf_line_carries_the_measured_value_and_its_unit():
    assert reference._verdict("c", "throughput_per_device", [1, None, None, "samples/s"], ROW, {})[1] == (
        "PERF c.throughput_per_device=123.457 samples/s")
    assert reference._verdict("c", "efficiency", [1, None, None, ""], ROW, {})[1] == "PERF c.efficiency=0.85"
    assert reference._verdict("c", "busbw", [1, None, None, ""], ROW, {"kind": "allreduce"}) == (
        "FAIL c.busbw: measured in GB/s, the reference is in no unit", "PERF c.busbw=2.5 GB/s")


def test_a_check_that_matches_nothing_fails_with_what_it_looked_for():
    checks = [{"name": "t", "workload": {"model": "mlp"}, "world_size": 2, "num_nodes": 1,
               "hardware": {"accelerator": "cpu"},
               "reference": {"efficiency": [0.9, -0.1, None, ""], "throughput_per_device": [1, -0.1, None, ""]}},
              {"name": "b", "kind": "allreduce", "world_size": 8, "num_nodes": 2, "link": "emulated 1 Gbit/s",
               "hardware": {"accelerator": "gpu", "device": "A100"}, "reference": {"busbw": [1, -0.1, None, "GB/s"]}}]
    lines, failed = reference.check(checks, pd.DataFrame(), pd.DataFrame(), "DIR")
    assert lines == ["FAIL t: no training run on 2 device(s), 1 node(s), cpu in DIR (nothing was checked)",
                     "FAIL b: no all-reduce benchmark on 8 device(s), 2 node(s), A100, link emulated 1 Gbit/s in DIR "
                     "(nothing was checked)",
                     "reference: 2 check(s) of 3 value(s): 0 passed, 3 failed"]
    assert failed == 3


def test_a_drafted_reference_names_each_configuration_and_benchmark_with_todays_values():
    from scalelab.report import explain, frames

    def gpu(run_id, world, sps):
        r = make_result(run_id, world, samples_per_s=sps)
        r["launch"].update(accelerator="gpu", device_names=["A100"])
        return r
    unmeasured = make_result("n1", 1, samples_per_s=10, batch_size=16)
    unmeasured["timing"]["samples_per_s"] = None  # no throughput: nothing to reference, the others still are
    linked = make_result("c1", 2, samples_per_s=50)
    linked["launch"]["link"] = {"gbit": 1, "emulated": True}
    found = [gpu("g1", 1, 100), gpu("g2", 2, 180), linked, make_result("c2", 2, samples_per_s=60, batch_size=32),
             make_result("c3", 2, samples_per_s=70, batch_size=48), unmeasured]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))
    scaling = scaling.sort_values(["group", "world_size"]).reset_index(drop=True)  # batch 16, 32, 48, 64, then GPU
    scaling["forecast_error"] = [float("nan")] * 4 + [1.2, 3.2]  # the track record's error, in points
    slow = _bench(2, [dict(r, busbw_GBps=2 * r["busbw_GBps"]) for r in ROWS])
    untyped = [dict(b, config={}) for b in (_bench(2, ROWS), slow)]  # no dtype recorded: float32
    nothing = dict(_bench(1, ROWS), summary={"large_msg_busbw_GBps": None})
    a100 = _bench(2, ROWS)
    a100["launch"].update(accelerator="gpu", device_names=["A100"])
    checks = reference.draft(scaling, explain.bench_frame([*untyped, nothing, a100]))

    def training(name, batch, devices, reference_, hardware=None, link=""):
        return {"name": name, "kind": "training", "workload": {**UNSET, "model": "mlp", "batch_size": batch,
                                                               "scaling": "weak", "precision": "32"},
                "hardware": hardware or {"accelerator": "cpu"}, "world_size": devices, "num_nodes": 1, "link": link,
                "baseline_world_size": 1 if hardware else 2, "reference": reference_}
    a100_hw = {"accelerator": "gpu", "device": "A100"}
    assert checks == [
        training("mlp-cpu-2x1", 32, 2, {"throughput_per_device": [30.0, -0.1, None, "samples/s"]}),
        training("mlp-cpu-2x1-2", 48, 2, {"throughput_per_device": [35.0, -0.1, None, "samples/s"]}),
        training("mlp-cpu-2x1-emulated-1-Gbit/s", 64, 2, {"throughput_per_device": [25.0, -0.1, None, "samples/s"]},
                 link="emulated 1 Gbit/s"),
        training("mlp-A100-1x1", 64, 1, {"throughput_per_device": [100.0, -0.1, None, "samples/s"],
                                         "forecast_error": [5.0, None, 0, "points"]}, a100_hw),  # at least 5 points
        training("mlp-A100-2x1", 64, 2, {"efficiency": [0.9, -0.1, None, ""],
                                         "throughput_per_device": [90.0, -0.1, None, "samples/s"],
                                         "forecast_error": [6.0, None, 0, "points"]}, a100_hw),  # ceil(3.2) + 2
        {"name": "allreduce-cpu-2x1", "kind": "allreduce", "hardware": {"accelerator": "cpu"}, "world_size": 2,
         "num_nodes": 1, "link": "", "dtype": "float32", "reference": {"busbw": [1.5, -0.1, None, "GB/s"]}},  # median
        {"name": "allreduce-A100-2x1", "kind": "allreduce", "hardware": a100_hw, "world_size": 2, "num_nodes": 1,
         "link": "", "dtype": "float32", "reference": {"busbw": [1.0, -0.1, None, "GB/s"]}}]
    assert reference.draft(scaling.iloc[:0], explain.bench_frame([])) == []


# the common workload fields a drafted check names null where its runs left them unset (make_result sets none)
UNSET = dict.fromkeys(("learning_rate", "max_epochs", "max_steps", "warmup_steps", "comm_probe_every", "compile",
                       "num_samples"))


def test_a_drafted_check_matches_no_run_that_sets_a_field_its_runs_left_unset():
    """A result leaves a field not recorded out (record.plain), as the group key does: the drafted check says null
    for it, so a later run with --num_samples (another configuration) fails the check instead of passing it."""
    from scalelab.report import explain, frames

    def scaling(found):
        return explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))

    checks = reference.draft(scaling([make_result("a", 1), make_result("b", 2, samples_per_s=180)]),
                             explain.bench_frame([]))
    assert all(c["workload"]["num_samples"] is None for c in checks)
    same = reference.check(checks, scaling([make_result("c", 1), make_result("d", 2, samples_per_s=180)]),
                           explain.bench_frame([]), "DIR")
    assert same[1] == 0, same[0]
    other = scaling([make_result("e", 1, num_samples=1000), make_result("f", 2, samples_per_s=180, num_samples=1000)])
    lines, failed = reference.check(checks, other, explain.bench_frame([]), "DIR")
    assert failed and lines[0].startswith("FAIL mlp-cpu-1x1: no "), lines


def test_a_benchmark_check_reads_the_median_of_the_runs_of_its_size_hardware_link_and_dtype():
    from scalelab.report import explain

    def run(busbw, accelerator="cpu", device="cpu", dtype=None, link=None):
        b = _bench(2, [dict(r, busbw_GBps=busbw) for r in ROWS])
        b["launch"].update(accelerator=accelerator, device_names=[device], link=link)
        b["config"] = {"dtype": dtype} if dtype else {}
        return b
    bench = explain.bench_frame([run(1.0), run(2.0), run(1.0, "gpu", "A100", "float32"), run(3.0, "gpu", "H100"),
                                 run(0.5, link={"gbit": 1, "emulated": True}), run(9.0, dtype="bfloat16")])

    def entry(name, value, **kw):
        hw = {"accelerator": kw.pop("accelerator", "cpu"), **({"device": kw.pop("device")} if "device" in kw else {})}
        return {"name": name, "kind": "allreduce", "world_size": 2, "num_nodes": 1, "hardware": hw,
                "reference": {"busbw": [value, 0, 0, "GB/s"]}, **kw}
    checks = [entry("cpu", 1.5), entry("a100", 1.0, accelerator="gpu", device="A100"),
              entry("linked", 0.5, link="emulated 1 Gbit/s"), entry("bf16", 9.0, dtype="bfloat16"),
              entry("any-gpu", 2.0, accelerator="gpu"), entry("none", 1.0, world_size=4)]
    lines, failed = reference.check(checks, pd.DataFrame(), bench, "DIR")
    verdicts = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert verdicts == ["PASS cpu.busbw: 1.5 GB/s (reference 1.5, accepted 1.5..1.5)",  # median of 1 and 2
                        "PASS a100.busbw: 1 GB/s (reference 1, accepted 1..1)",
                        "PASS linked.busbw: 0.5 GB/s (reference 0.5, accepted 0.5..0.5)",
                        "PASS bf16.busbw: 9 GB/s (reference 9, accepted 9..9)",
                        "PASS any-gpu.busbw: 2 GB/s (reference 2, accepted 2..2)",  # no device named: both GPUs
                        "FAIL none: no all-reduce benchmark on 4 device(s), 1 node(s), cpu in DIR (nothing was "
                        "checked)"]
    assert failed == 1 and lines[-1] == "reference: 6 check(s) of 6 value(s): 5 passed, 1 failed"


def test_a_check_whose_workload_fields_match_two_groups_fails_and_the_next_check_still_runs(tmp_path):
    from scalelab.report import explain, frames

    found = [make_result("a", 2), make_result("b", 2, batch_size=32)]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))
    vague = {"name": "vague", "workload": {"model": "mlp"}, "world_size": 2, "num_nodes": 1,
             "hardware": {"accelerator": "cpu"},
             "reference": {"efficiency": [1, None, None, ""], "throughput_per_device": [50, None, None, "samples/s"]}}
    exact = dict(vague, name="exact", workload={"model": "mlp", "batch_size": 32},
                 reference={"throughput_per_device": [50, -0.1, None, "samples/s"]})
    lines, failed = reference.check([vague, exact], scaling, explain.bench_frame([]), "DIR")
    assert lines[0] == "FAIL vague: 2 workloads in DIR match its workload fields: add fields to tell them apart"
    assert lines[1] == "PASS exact.throughput_per_device: 50 samples/s (reference 50, accepted 45..inf)"
    assert failed == 2 and lines[-1] == "reference: 2 check(s) of 3 value(s): 1 passed, 2 failed"


def test_names_are_made_unique_and_safe_and_the_file_is_written_as_it_reads(tmp_path):
    names = set()
    assert [reference._unique("a", names) for _ in range(3)] == ["a", "a-2", "a-3"] and names == {"a", "a-2", "a-3"}
    assert reference._slug("-XGB model (tiny)-") == "XGB-model-tiny"
    check = {"name": "c", "kind": "allreduce", "hardware": {"accelerator": "cpu"}, "world_size": 2, "num_nodes": 1,
             "link": "", "dtype": "float32", "workload": {f"field_{i}": "value" for i in range(6)},
             "reference": {"busbw": [1.5, -0.1, None, "GB/s"]}}
    path = tmp_path / "ref.yaml"
    assert reference.write(str(path), [check]) == str(path)
    assert path.read_text() == reference.HEADER + (
        "checks:\n- name: c\n  kind: allreduce\n  hardware: {accelerator: cpu}\n  world_size: 2\n  num_nodes: 1\n"
        "  link: ''\n"
        "  dtype: float32\n  workload: {field_0: value, field_1: value, field_2: value, field_3: value, "
        "field_4: value, field_5: value}\n  reference:\n    busbw: [1.5, -0.1, null, GB/s]\n")  # one line to 120
    with pytest.raises(UsageError) as err:
        reference.write(str(path), [])
    assert str(err.value) == ("--write_reference: no completed training run or all-reduce benchmark in the folder: "
                              "nothing to reference")


def test_a_reference_file_reads_without_libyaml(tmp_path, monkeypatch):
    """PyYAML built without libyaml has no CSafeLoader: its pure-Python SafeLoader reads the file alike."""
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    path = tmp_path / "ref.yaml"
    path.write_text(json.dumps({"checks": [_entry()]}))
    assert reference.load(str(path)) == [_entry()]


def test_a_utf8_reference_file_reads_under_an_ascii_locale(tmp_path):
    """The file travels: written on a UTF-8 desktop (a comment with an em dash, a workload field with "é"), it
    reads the same on a node whose locale is C (ASCII), where open() would decode with ASCII by default."""
    import locale

    entry = _entry(workload={"model": "mlp", "note": "caf\u00e9"})
    path = tmp_path / "ref.yaml"
    path.write_bytes(("# after maintenance \u2014 the same sweep\n" + json.dumps({"checks": [entry]},
                                                                               ensure_ascii=False)).encode("utf-8"))
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        assert reference.load(str(path)) == [entry]
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


def test_a_reference_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path):
    """A file saved in Latin-1 (é is the byte 0xe9): no line number to give, the decoder's words instead."""
    path = tmp_path / "ref.yaml"
    path.write_bytes("checks:\n- name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(UsageError) as err:
        reference.load(str(path))
    assert str(err.value) == (f"--reference {path}: not valid YAML ('utf-8' codec can't decode byte 0xe9 in position "
                              "19: invalid continuation byte)")


def test_failed_values_add_up_over_checks_that_match_nothing_and_checks_that_match_too_much():
    """A check matching no run (2 values) and one whose workload fields match 2 groups (1 value): 3 failed."""
    from scalelab.report import explain, frames

    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame([make_result("a", 2),
                                                                       make_result("b", 2, batch_size=32)])),
                               explain.bench_frame([]))
    missing = {"name": "missing", "workload": {"model": "mlp"}, "world_size": 8, "num_nodes": 1,
               "hardware": {"accelerator": "cpu"},
               "reference": {"efficiency": [1, None, None, ""], "throughput_per_device": [1, None, None, "samples/s"]}}
    vague = dict(missing, name="vague", world_size=2, reference={"efficiency": [1, None, None, ""]})
    lines, failed = reference.check([missing, vague], scaling, explain.bench_frame([]), "DIR")
    assert lines == ["FAIL missing: no training run on 8 device(s), 1 node(s), cpu in DIR (nothing was checked)",
                     "FAIL vague: 2 workloads in DIR match its workload fields: add fields to tell them apart",
                     "reference: 2 check(s) of 3 value(s): 0 passed, 3 failed"]
    assert failed == 3


def test_drafted_checks_name_cpu_hardware_cpu_sort_benchmarks_and_name_their_link():
    """A CPU's device name is the processor's (`x86_64`): the names say `cpu`. Benchmark checks come in the order
    of their configuration (2 ranks on a real network, then on an emulated link, then 4 ranks on 2 nodes), not
    in the order they were run (newest first)."""
    from scalelab.report import explain, frames

    found = [make_result("t1", 1, samples_per_s=100), make_result("t2", 2, samples_per_s=180)]
    for r in found:
        r["launch"]["device_names"] = ["x86_64"]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))
    benches = [_bench(4, ROWS, nodes=2), _bench(2, ROWS), _bench(2, ROWS)]
    benches[1]["launch"]["link"] = {"gbit": 1, "emulated": True}
    for b, created in zip(benches, ("2026-01-03", "2026-01-02", "2026-01-01")):
        b.update(created=created)
        b["launch"]["device_names"] = ["x86_64"]
    checks = reference.draft(scaling, explain.bench_frame(benches))
    workload = {**UNSET, "model": "mlp", "batch_size": 64, "scaling": "weak", "precision": "32"}
    training = {"kind": "training", "workload": workload, "hardware": {"accelerator": "cpu"}, "num_nodes": 1,
                "link": "",
                "baseline_world_size": 1}
    busbw = {"busbw": [1.0, -0.1, None, "GB/s"]}  # ROWS' largest size: 1 GB/s
    bench = {"kind": "allreduce", "hardware": {"accelerator": "cpu"}, "dtype": "float32", "reference": busbw}
    assert checks == [
        {"name": "mlp-cpu-1x1", **training, "world_size": 1,
         "reference": {"throughput_per_device": [100.0, -0.1, None, "samples/s"]}},
        {"name": "mlp-cpu-2x1", **training, "world_size": 2,
         "reference": {"efficiency": [0.9, -0.1, None, ""], "throughput_per_device": [90.0, -0.1, None, "samples/s"]}},
        {"name": "allreduce-cpu-2x1", **bench, "world_size": 2, "num_nodes": 1, "link": ""},
        {"name": "allreduce-cpu-2x1-emulated-1-Gbit/s", **bench, "world_size": 2, "num_nodes": 1,
         "link": "emulated 1 Gbit/s"},
        {"name": "allreduce-cpu-4x2", **bench, "world_size": 4, "num_nodes": 2, "link": ""}]


def test_a_written_reference_wraps_a_long_mapping_past_120_columns(tmp_path):
    """`  workload: {model: ` is 20 columns; a 100-character model name ends at 120 and its comma at 121: past
    the 120 columns, the next field starts a new line."""
    check = {"name": "c", "workload": {"model": "m" * 100, "batch_size": 64}}
    path = tmp_path / "ref.yaml"
    reference.write(str(path), [check])
    assert path.read_text() == reference.HEADER + (
        f"checks:\n- name: c\n  workload: {{model: {'m' * 100},\n    batch_size: 64}}\n")


def test_a_training_check_matches_its_link_as_well_as_its_size():
    """2 devices on 2 nodes ran twice: over the real network (60 samples/s a device) and over an emulated 1 Gbit/s
    link (30). A check names its configuration by size and link: each reads its own, and a link nobody ran at
    matches nothing (never the same size over another link)."""
    from scalelab.report import explain, frames

    emulated = make_result("e2", 2, 2, samples_per_s=60)
    emulated["launch"]["link"] = {"gbit": 1, "emulated": True}
    found = [make_result("one", 1, samples_per_s=50), make_result("r2", 2, 2, samples_per_s=120), emulated]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))

    def entry(name, link, per_device):
        return {"name": name, "kind": "training", "workload": {"model": "mlp"}, "hardware": {"accelerator": "cpu"},
                "world_size": 2, "num_nodes": 2, "link": link,
                "reference": {"throughput_per_device": [per_device, -0.1, 0.1, "samples/s"]}}

    checks = [entry("real", "", 60.0), entry("slow", "emulated 1 Gbit/s", 30.0),
              entry("unrun", "emulated 10 Gbit/s", 60.0)]
    lines, failed = reference.check(checks, scaling, explain.bench_frame([]), "DIR")
    verdicts = [line for line in lines if not line.startswith("PERF")]
    assert verdicts == [
        "PASS real.throughput_per_device: 60 samples/s (reference 60, accepted 54..66)",
        "PASS slow.throughput_per_device: 30 samples/s (reference 30, accepted 27..33)",
        "FAIL unrun: no training run on 2 device(s), 2 node(s), cpu, link emulated 10 Gbit/s in DIR (nothing was "
        "checked)",
        "reference: 3 check(s) of 3 value(s): 2 passed, 1 failed"], lines
    assert failed == 1
