"""A result file is data: whatever a folder holds, the report shows the good runs and skips the others in one line,
never raises, never obeys what a file says (issue 37's causes 5, 6 and 7).

The fuzz takes real results (tests/data/demo-results: `make demo`'s GPT at 1 and 2 devices and an all-reduce run)
and puts an arbitrary JSON value at an arbitrary place in one of them, then runs the whole report on the folder:
the tables, --forecast, --ranks, --export and --reference.
"""

import contextlib
import copy
import io
import json
import os
import shutil

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalelab import record, results
from scalelab.record.publish import _struct_in
from scalelab.report import cli

DEMO = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "demo-results")
REAL = {name: json.load(open(os.path.join(DEMO, name, "result.json"))) for name in sorted(os.listdir(DEMO))
        if os.path.isfile(os.path.join(DEMO, name, "result.json"))}  # not the index a report there leaves


def _paths(obj, path=()):
    """Every place in a result a value can go: each key and list item (the first two of a list), nested."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:2]):
            yield path + (i,)
            yield from _paths(v, path + (i,))


def _declared(data):
    """Every field result.json declares for this kind (scalelab/record), where it can go in this result: the
    fields the demo never writes too (a link, a SLURM job, a peak note); a list of blocks by its first item."""
    for path, _ in record.leaves(data["kind"]):
        place = tuple(int(k) if k == "0" else k for k in path.replace("[]", ".0").split("."))
        where = data
        for key in place[:-1]:  # a list of blocks must be there; a block may be absent (_put makes it)
            where = where[key] if isinstance(key, int) and isinstance(where, list) and where else (
                where.get(key) if isinstance(where, dict) else None) or {}
        if not isinstance(place[-2] if len(place) > 1 else None, int) or where:
            yield place


PLACES = sorted({(name, p) for name, data in REAL.items() for p in (*_paths(data), *_declared(data))
                 if p[0] not in ("environment", "versions")}, key=str)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats(allow_nan=False,
                                                                                           allow_infinity=False)
    | st.text(max_size=12), lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.text(max_size=8), children, max_size=3), max_leaves=8)


def _report(folder, *args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--output_dir", str(folder), *map(str, args)])
    return code, out.getvalue(), err.getvalue()


def _folder(root, changed: dict):
    shutil.rmtree(root, ignore_errors=True)
    for name, data in REAL.items():
        os.makedirs(os.path.join(root, name))
        text = changed[name] if name in changed else json.dumps(data)
        with open(os.path.join(root, name, "result.json"), "w") as fh:
            fh.write(text)
    return root


def _put(data, path, value):
    """A copy of the result with the value at path (a block the path needs and the result lacks, made)."""
    data = copy.deepcopy(data)
    where = data
    for key in path[:-1]:
        if isinstance(where, dict) and not isinstance(where.get(key), (dict, list)):
            where[key] = {}
        where = where[key]
    where[path[-1]] = value
    return data


# 80 examples in make test (three reports each, --forecast and --export in one: 31 s alone, the longest unit test;
# four reports each took 43 s and held make test-quick over its 3 minutes); SCALELAB_FUZZ_EXAMPLES=400 by hand
@settings(max_examples=int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.sampled_from(PLACES), value=json_values)
def test_any_value_anywhere_in_a_result_is_a_report_row_or_a_one_line_skip(tmp_path, place, value):
    name, path = place
    folder = _folder(str(tmp_path / "out"), {name: json.dumps(_put(REAL[name], path, value))})
    for args in (["--details"], ["--forecast", "--export", tmp_path / "export"], ["--ranks"]):  # the default view
        # too, and the second report's views on readings taken back from the index (curves from it)
        code, out, err = _report(folder, *args)
        assert code == 0, (args, err)
        skips = [line for line in err.splitlines() if "skipped" in line]
        assert len(skips) <= 1 and all(name in line and "[...]" not in line for line in skips), err
        if not skips and "--details" in args:  # every training run is a row (the two GPT runs: two run-table rows)
            assert out.count("gpt") >= 2
    for root, _, files in os.walk(tmp_path):  # nothing written outside the folders the report was given
        assert root.startswith((str(tmp_path / "out"), str(tmp_path / "export"))) or not files


def _scalar_may_be_null(info) -> bool:
    """A declared field that holds no block (as record.leaves walks them) and may be null (a value not recorded)."""
    ins = msgspec.inspect
    return (isinstance(info, ins.UnionType) and any(isinstance(t, ins.NoneType) for t in info.types)
            and _struct_in(info)[0] is None)


def _nulled_and_dropped(data, fields) -> tuple:
    """(the result with each field null, the result without them), where their block is there."""
    null, gone = copy.deepcopy(data), copy.deepcopy(data)
    for path in fields:
        *parents, last = path.split(".")
        for target, drop in ((null, False), (gone, True)):
            for key in parents:
                target = target.get(key) if isinstance(target, dict) else None
            if isinstance(target, dict) and drop:
                target.pop(last, None)
            elif isinstance(target, dict):
                target[last] = None
    return null, gone


def _nullable(data) -> list:
    return [path for path, info in record.leaves(data["kind"]) if "[]" not in path and _scalar_may_be_null(info)
            and path.split(".")[0] not in ("environment", "versions", "config")]


def test_a_null_reads_as_a_field_left_out(tmp_path):
    """Writers leave a value not recorded out (record.plain); older files and other tools write it null: the report
    reads the two alike, for every scalar field the declaration lets be null, one at a time (the runs frame every
    view reads), and all at once (every view's text). Before: a null workload.strategy reached the
    forecast as NaN (a float) and took the report down with a traceback."""
    import pandas as pd

    from scalelab.report import frames

    def framed(one, others):  # the runs frame: what every column reads of a result (the scaling frame is of it)
        return frames.runs_frame([results.parse(json.dumps(one).encode()), *others])

    for kind in record.KINDS:  # one result of each kind (the GPT at 2 devices has every field the one at 1 has)
        name = max((n for n, r in REAL.items() if r["kind"] == kind), key=lambda n: len(json.dumps(REAL[n])))
        others = [results.parse(json.dumps(r).encode()) for n, r in REAL.items() if n != name]
        for path in _nullable(REAL[name]):
            null, gone = _nulled_and_dropped(REAL[name], [path])
            pd.testing.assert_frame_equal(framed(null, others), framed(gone, others), obj=f"{name}: {path} null")
    everything = {name: _nulled_and_dropped(data, _nullable(data)) for name, data in REAL.items()}
    folder = str(tmp_path / "out")
    for args in (["--details"], ["--forecast"], ["--ranks"]):
        got = _report(_folder(folder, {n: json.dumps(v[0]) for n, v in everything.items()}), *args)
        assert got[0] == 0 and "skipped" not in got[2], (args, got[2])
        assert got == _report(_folder(folder, {n: json.dumps(v[1]) for n, v in everything.items()}), *args), args


def test_the_fuzz_reaches_every_field_result_json_declares():
    """The places above are the declaration's fields, not only those a demo run happened to write."""
    for kind in record.KINDS:
        reached = {".".join(map(str, p)).replace(".0.", "[].").replace(".0", "[]") for n, p in PLACES
                   if REAL[n]["kind"] == kind}
        missed = [path for path, _ in record.leaves(kind) if path not in reached
                  and path.split(".")[0] not in ("environment", "versions")]
        assert not missed, (kind, missed)


def test_a_wrongly_typed_field_skips_its_file_naming_the_field_and_reports_the_rest(tmp_path):
    """Before: a number where a string belongs took the whole report down with a traceback."""
    gpt1 = next(n for n in REAL if "gpt-1x" in n)
    bad = {gpt1: json.dumps(_put(_put(REAL[gpt1], ("launch", "device_names"), 7), ("timing", "step_s"), "slow"))}
    code, out, err = _report(_folder(str(tmp_path / "out"), bad), "--details")
    assert code == 0 and "gpt-2x" in out and gpt1 not in out
    assert err.strip() == (f"benchmark.py: warning: skipped {tmp_path}/out/{gpt1}/result.json: field "
                           "launch.device_names: expected a list, got 7")


def test_a_benchmark_row_timed_at_zero_seconds_skips_its_file(tmp_path):
    """Before: an all-reduce row of 0 s (no clock reads 0 for a collective) passed the schema, and the report ended
    in a ZeroDivisionError dividing its bytes by its time."""
    bench = next(n for n in REAL if REAL[n]["kind"] == "allreduce")
    for field in ("time_s", "single_op_s"):
        raw = copy.deepcopy(REAL[bench])
        raw["rows"][1][field] = 0.0
        code, out, err = _report(_folder(str(tmp_path / field), {bench: json.dumps(raw)}), "--forecast")
        assert code == 0 and "gpt" in out, err
        nullable = " or null" if field == "single_op_s" else ""  # a run may not have timed single calls
        assert err.strip() == (f"benchmark.py: warning: skipped {tmp_path}/{field}/{bench}/result.json: field "
                               f"rows[1].{field}: expected a number above 0, at most 1e+30{nullable}, got 0.0")


@pytest.mark.parametrize("text, reason", [
    ('"samples_per_s": NaN', "not strict JSON: NaN is not a number"),
    ('"samples_per_s": Infinity', "not strict JSON: Infinity is not a number"),
    ('"samples_per_s": 1e400', "not strict JSON: 1e400 is beyond a float's range"),
    ('"samples_per_s": 123456789012345678901234e400',  # a long one: its first 20 characters
     "not strict JSON: 12345678901234567890 is beyond a float's range"),
])
def test_a_non_finite_number_skips_its_file(tmp_path, text, reason):
    """Before: NaN and Infinity timings validated and the report printed `inf %`."""
    gpt2 = next(n for n in REAL if "gpt-2x" in n)
    raw = json.dumps(REAL[gpt2]).replace(f'"samples_per_s": {REAL[gpt2]["timing"]["samples_per_s"]!r}', text)
    assert text in raw
    code, out, err = _report(_folder(str(tmp_path / "out"), {gpt2: raw}))
    assert code == 0 and reason in err and "inf" not in out.replace("info", "")


def test_an_infinite_throughput_fails_the_nightly_reference_check(tmp_path):
    """Before: an Infinity throughput PASSED `--reference` with exit 0."""
    folder = _folder(str(tmp_path / "out"), {})
    assert _report(folder, "--write_reference", tmp_path / "ref.yaml")[0] == 0
    assert _report(folder, "--reference", tmp_path / "ref.yaml")[0] == 0
    gpt2 = next(n for n in REAL if "gpt-2x" in n)
    raw = json.dumps(REAL[gpt2]).replace(f'"samples_per_s": {REAL[gpt2]["timing"]["samples_per_s"]!r}',
                                         '"samples_per_s": Infinity')
    code, out, _ = _report(_folder(str(tmp_path / "out"), {gpt2: raw}), "--reference", tmp_path / "ref.yaml")
    assert code == 1 and "FAIL" in out


def test_a_world_size_of_ten_to_the_400_skips_its_file(tmp_path):
    gpt2 = next(n for n in REAL if "gpt-2x" in n)
    raw = json.dumps(REAL[gpt2]).replace('"world_size": 2', '"world_size": 1' + "0" * 400, 1)
    for args in ([], ["--forecast"], ["--export", tmp_path / "e"], ["--ranks"]):
        code, _, err = _report(_folder(str(tmp_path / "out"), {gpt2: raw}), *args)
        assert code == 0 and "field launch.world_size: expected an integer from 1 to 1e+06" in err


def test_scalelab_writes_strict_json_a_diverged_loss_is_null(tmp_path):
    data = copy.deepcopy(REAL[next(n for n in REAL if "gpt-1x" in n)])
    data["metrics"]["train_loss"] = float("nan")
    data["timing"]["mfu"] = float("inf")
    data["ranks"][0]["losses"][3] = float("nan")  # a batch's loss diverged: its place is kept, as null
    data["timing"]["had_cpu"] = [None]  # a share not measured (a real 2-rank run wrote this, and was refused)
    path = results.write(str(tmp_path), data)
    text = open(path).read()
    assert "NaN" not in text and "Infinity" not in text
    loaded = results.load(path)
    assert loaded["metrics"]["train_loss"] is None and loaded["timing"]["mfu"] is None
    assert loaded["ranks"][0]["losses"][3] is None and len(loaded["ranks"][0]["losses"]) == len(data["ranks"][0][
        "losses"])
    code, out, err = _report(tmp_path)
    assert code == 0 and "skipped" not in err, err


def test_what_a_file_says_is_shown_never_obeyed_and_never_a_formula(tmp_path):
    """Before: an escape sequence in a run name reached the terminal raw (it can retitle or clear the screen), and a
    `=HYPERLINK(...)` field was exported into CSV as a live formula."""
    gpt1 = next(n for n in REAL if "gpt-1x" in n)
    data = _put(REAL[gpt1], ("workload", "describe"), "=HYPERLINK(\"http://x\",\"ok\")")
    data = _put(data, ("run_id", ), "\x1b]0;owned\x07\x1b[2Jrun")
    folder = _folder(str(tmp_path / "out"), {gpt1: json.dumps(data)})
    code, out, err = _report(folder, "--export", tmp_path / "export", "--details")
    assert code == 0 and "\x1b" not in out + err and "\\x1b]0;owned\\x07" in out
    for name in os.listdir(tmp_path / "export"):
        if name.endswith(".csv"):
            text = (tmp_path / "export" / name).read_text()
            assert ",=HYPERLINK" not in text and "\n=HYPERLINK" not in text, name
    assert "'=HYPERLINK" in (tmp_path / "export" / "runs.csv").read_text()
    code, out, err = _report(folder, "--ranks")
    assert code == 0 and "\x1b" not in out + err


def test_a_file_name_with_an_escape_sequence_is_shown_escaped(tmp_path):
    folder = tmp_path / "out" / "\x1b[2Jrun"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text("{")
    code, _, err = _report(tmp_path / "out")
    assert "\x1b" not in err and "\\x1b[2Jrun" in err


def _two_ranks(**timing_comm):
    r = copy.deepcopy(REAL[next(n for n in REAL if "gpt-2x" in n)])
    r["timing"]["comm"].update(timing_comm)
    return r


@pytest.mark.parametrize("change, said", [
    (lambda r: r["launch"].update(world_size=5, num_nodes=5),
     "ranks: 2 rank record(s) for a completed run of world size 5"),
    (lambda r: r["launch"].update(devices=3), "launch: 2 node(s) x 3 device(s) is not its world size 2"),
    (lambda r: r["ranks"].append(copy.deepcopy(r["ranks"][0])), "ranks: 3 rank record(s) for a completed run"),
    (lambda r: r["ranks"][1].update(rank=0), "ranks: rank numbers [0] are not ranks of a world of 2"),
    (lambda r: r["ranks"][1].update(rank=7), "ranks: rank numbers [0, 7] are not ranks of a world of 2"),
    (lambda r: r["ranks"][0]["step_times_s"].pop(), "ranks[0]: per-batch lists of different lengths"),
    (lambda r: r["timing"]["comm"].update(waited_s=-0.491), "field timing.comm.waited_s: expected a number from 0"),
    (lambda r: r["timing"]["comm"].update(comm_share=3.0),
     "field timing.comm.comm_share: expected a number from 0 to 1"),
    (lambda r: r["timing"].update(had_cpu=[1.4]), "field timing.had_cpu[0]: expected a number from 0 to 1"),
    (lambda r: r["ranks"][0].update(comm_spans_s=[[]] * 1001), "field ranks[0].comm_spans_s: expected a list"),
    (lambda r: r["ranks"][0].update(probe_steps=[0] * (10**6 + 1)), "field ranks[0].probe_steps: expected a list"),
])
def test_a_record_whose_fields_disagree_is_skipped_in_one_line_naming_how(tmp_path, change, said):
    """Each field alone fine, the file impossible: a 5-device row at 34 % from 2 ranks' records, "waited ms -491.0",
    "152 % of the step" without a mark, 10^6 rank records listed for minutes. The whole record is checked."""
    data = _two_ranks()
    change(data)
    folder = _folder(str(tmp_path / "out"), {})
    name = next(n for n in REAL if "gpt-2x" in n)
    with open(os.path.join(folder, name, "result.json"), "w") as fh:
        json.dump(data, fh)
    found, skipped = results.scan(folder)
    assert len(found) == len(REAL) - 1 and len(skipped) == 1 and said in skipped[0][1], skipped
    code, out, err = _report(folder, "--details")
    assert code == 0 and "-491" not in out and "152 %" not in out


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 6), kept=st.integers(0, 8), completed=st.booleans())
def test_any_world_holds_as_many_rank_records_as_ranks_and_no_more(world, kept, completed):
    """The rule, not the cases: a completed run has one record per rank, a failed one at most that many."""
    r = copy.deepcopy(REAL[next(n for n in REAL if "gpt-2x" in n)])
    r["launch"].update(world_size=world, devices=world, num_nodes=1)
    r["status"] = "completed" if completed else "failed"
    r["ranks"] = [dict(copy.deepcopy(r["ranks"][0]), rank=k) for k in range(kept)]
    ok = kept == world if completed else kept <= world
    try:
        results.validate(r)
        assert ok
    except results.ResultError as exc:
        assert not ok and "rank record(s)" in str(exc)


def _script(folder, *args) -> tuple[int, str, str]:
    """benchmark.py as its script runs it (entry.run_piped: a UsageError is one line and exit 2)."""
    from scalelab.entry import run_piped

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_piped("benchmark.py", cli.main, ["--output_dir", str(folder), *map(str, args)])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A reference file and a summary.json the report writes from the demo's results: the shapes to break."""
    root = tmp_path_factory.mktemp("made")
    folder = _folder(str(root / "out"), {})
    assert _report(folder, "--write_reference", root / "ref.yaml")[0] == 0
    assert _report(folder, "--export", root / "export")[0] == 0
    import yaml

    return folder, yaml.safe_load((root / "ref.yaml").read_text()), json.loads(
        (root / "export" / "summary.json").read_text())


@settings(max_examples=int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data(), value=json_values)
def test_any_value_anywhere_in_a_reference_file_is_checked_or_one_line(tmp_path, made, data, value):
    """--reference files are data too (a site's, edited by hand): an unexpected type anywhere ended in a traceback."""
    import yaml

    folder, ref, _ = made
    place = data.draw(st.sampled_from(list(_paths(ref)) or [("checks",)]))
    path = tmp_path / f"ref-{abs(hash((place, repr(value))))}.yaml"
    path.write_text(yaml.safe_dump(_put(ref, place, value)))
    code, out, err = _script(folder, "--reference", path)
    assert code in (0, 1, 2) and "Traceback" not in err, (place, value, err)
    assert code != 2 or (len(err.strip().splitlines()) == 1 and err.startswith("benchmark.py: error:")), err


@settings(max_examples=int(os.environ.get("SCALELAB_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data(), value=json_values)
def test_any_value_anywhere_in_a_compared_summary_is_a_table_or_one_line(tmp_path, made, data, value):
    """--compare reads summaries other sites mail: an unexpected type anywhere ended in a traceback."""
    folder, _, summary = made
    place = data.draw(st.sampled_from(list(_paths(summary))))
    path = tmp_path / f"s-{abs(hash((place, repr(value))))}.json"
    path.write_text(json.dumps(_put(summary, place, value)))
    code, out, err = _script(folder, "--compare", folder, path)
    assert code in (0, 2) and "Traceback" not in err, (place, value, err)
    assert code == 0 or (len(err.strip().splitlines()) == 1 and err.startswith("benchmark.py: error:")), err
