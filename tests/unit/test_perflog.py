"""`benchmark.py --history --perflog`: ReFrame's perflogs followed beside the report's series, by the same rule (a
planted step named with its date and size, none where there is none), and any line that is no value counted, never
an error."""

import contextlib
import datetime
import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalelab.errors import UsageError
from scalelab.report import cli, perflog
from scalelab.report.perflog import cell

HEADER = "job_completion_time|result|display_name|jobid|perf_var|perf_value|perf_unit|perf_ref|perf_lower_thres|" \
         "perf_upper_thres"  # chapter 14's handlers_perflog format, as ReFrame writes its first line
START = datetime.datetime(2026, 3, 1, 2, 30)


def _lines(values, var="allreduce-cpu-4x2.busbw", unit="GB/s", test="ScalelabReport") -> list:
    return [f"{(START + datetime.timedelta(days=n)).isoformat()}|pass|{test}|{n}|{var}|{v:.6g}|{unit}|0.3|-0.95|null"
            for n, v in enumerate(values)]


def _night(n: int) -> str:
    return (START + datetime.timedelta(days=n)).strftime("%Y-%m-%d")


def _follow(tmp_path, *bodies) -> tuple:
    paths = []
    for i, body in enumerate(bodies):
        path = tmp_path / f"Test{i}.log"
        path.write_text("\n".join(body) + "\n")
        paths.append(str(path))
    skipped = []
    return perflog.follow(perflog.read(paths, skipped)), skipped


def test_a_planted_step_is_named_with_its_night_and_size(tmp_path):
    """40 perflogs, each a busbw that moved by 15-35 % (3 % scatter) on some night k of 30-120, beside a variable
    that did not move: at least 38 name exactly one change, on night k (or one beside it, where a night's scatter
    reads as part of the step) and within 5 points of its size (the rule's false alarms and misplaced nights: about
    1 % each, measure/changes.py); the steady variable names nothing in at least 38."""
    rng, right, steady_right = np.random.default_rng(20261202), 0, 0
    for i in range(40):
        nights = int(rng.integers(30, 121))
        k, step = int(nights * rng.uniform(0.25, 0.75)), rng.uniform(0.15, 0.35) * rng.choice([-1, 1])
        busbw = 0.29 * np.exp(rng.normal(0, 0.03, nights)) * np.where(np.arange(nights) >= k, 1 + step, 1)
        steady = 0.39 * np.exp(rng.normal(0, 0.03, nights))
        folder = tmp_path / str(i)
        folder.mkdir()
        lines = _lines(busbw) + _lines(steady, "mlp-cpu-2x1.efficiency", "")
        rng.shuffle(lines)  # files merged, rotated or appended out of order: the dates order a series, not the lines
        rows, skipped = _follow(folder, [HEADER, *lines])
        by_var = {r["var"]: r for r in rows}
        assert not skipped and {r["runs"] for r in rows} == {nights}
        found = by_var["allreduce-cpu-4x2.busbw"]["changes"]
        right += len(found) == 1 and found[0][0].strftime("%Y-%m-%d") in {_night(k + d) for d in (-1, 0, 1)} \
            and abs(found[0][1].size - step) < 0.05
        steady_right += by_var["mlp-cpu-2x1.efficiency"]["changes"] == []
    assert right >= 38 and steady_right >= 38, (right, steady_right)


def test_a_steady_perflog_names_no_change_and_judges_its_latest(tmp_path):
    rng = np.random.default_rng(3)
    values = 41_900 * np.exp(rng.normal(0, 0.03, 90))
    (row,), _ = _follow(tmp_path, [HEADER, *_lines(values, "mlp-cpu-1x1.throughput_per_device", "samples/s")])
    low, high = row["band"]
    assert row["changes"] == [] and row["latest"] == pytest.approx(values[-1], rel=1e-5) and low < 41_900 < high


def test_a_wild_night_and_a_night_left_out_of_the_band_are_each_said_with_what_they_measured(tmp_path):
    """A perflog's series judged as the history's: one night at a third of the speed is named (its date and value)
    as taken at its neighbours' median, and counted in perflog.csv's row; it and a night 4 scatters off (past
    OUTLIER, short of WILD) are counted as left out of the band. Before, neither was said anywhere."""
    values = 41_900 * np.exp(np.resize([0.01, -0.01, 0.02, -0.02, 0.0], 60))
    values[20] /= 3
    values[50] *= np.exp(4 * 0.02)
    (row,), _ = _follow(tmp_path, [HEADER, *_lines(values, "mlp-cpu-1x1.throughput_per_device", "samples/s")])
    assert [(when.strftime("%Y-%m-%d"), round(v)) for when, v in row["far"]] == [(_night(20), round(values[20]))]
    assert row["left_out_of_band"] == 2 and row["changes"] == [], row
    said = perflog.render([row], [])
    assert f"  ScalelabReport mlp-cpu-1x1.throughput_per_device: 1 run(s) over 5 scatters from the runs around " \
           f"them, taken at their neighbours' median in the search for changes: {_night(20)} " \
           f"({cell(values[20], 'samples/s')})" in said, said
    assert "  ScalelabReport mlp-cpu-1x1.throughput_per_device: 2 run(s) since the last change left out of the " \
           f"band: over 3.5 scatters from their median: {_night(20)} ({cell(values[20], 'samples/s')}), " \
           f"{_night(50)} ({cell(values[50], 'samples/s')})" in said, said
    variables, _ = perflog.exported([row])
    assert variables[["far_from_neighbours", "left_out_of_band"]].values.tolist() == [[1, 2]]


UNIX = "job_completion_time_unix|display_name|perf_var|perf_value|perf_unit"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.lists(st.text(alphabet=st.sampled_from("|0123456789.-:+Tabcinfnul e\t"), max_size=80), max_size=12),
       unix=st.booleans())
def test_any_line_that_is_no_value_is_counted_never_an_error(tmp_path, junk, unix):
    """Between 12 good lines, any text, under either header (ISO dates or Unix times): a line is a value of a
    variable or it is counted in one skipped line for its file; nothing raises, and the good lines are all read."""
    good = [f"{1.77e9 + 86400 * n}|T|v|0.29|GB/s" for n in range(12)] if unix else _lines(0.29 * np.ones(12))
    body = [UNIX if unix else HEADER] + [line for pair in zip(good, junk + [""] * len(good)) for line in pair]
    rows, skipped = _follow(tmp_path, body)
    read = sum(r["runs"] for r in rows)
    assert read >= 12 and len(skipped) <= 1
    left_out = int(skipped[0][1].split(" line(s)")[0]) if skipped else 0
    assert read + left_out == 12 + sum(bool(j.strip()) for j in junk)


def test_what_a_line_names_is_shown_inert_and_redacted(tmp_path):
    """A perflog is a file others write: a test's name that would clear the terminal, or a unit that holds a token,
    is shown as any file's text is."""
    body = [HEADER, *_lines([1.0, 1.1], var="busbw token=abc1", unit="\x1b[2J", test="Scalelab\x1b]0;owned\x07")]
    (row,), _ = _follow(tmp_path, body)
    assert row["test"] == "Scalelab\\x1b]0;owned\\x07" and row["unit"] == "\\x1b[2J"
    assert row["var"] == "busbw token=<redacted>"


def test_a_file_that_is_no_perflog_is_one_skipped_line(tmp_path):
    rows, skipped = _follow(tmp_path, ["time,var,value", "1,a,2"], [HEADER, *_lines([1.0] * 3)])
    assert [r["runs"] for r in rows] == [3]
    assert len(skipped) == 1 and skipped[0][0].endswith("Test0.log") and "not a ReFrame perflog" in skipped[0][1]


def test_unix_times_and_a_name_column_are_read_too(tmp_path):
    header = "job_completion_time_unix|name|perf_var|perf_value|perf_unit"
    start = START.replace(tzinfo=datetime.timezone.utc).timestamp()
    body = [header] + [f"{start + 86400 * n}|ScalelabRung %shape=n_nodes|throughput|{7000 + n}|samples/s"
                       for n in range(4)]
    (row,), skipped = _follow(tmp_path, body)
    assert not skipped and row["test"] == "ScalelabRung %shape=n_nodes" and row["var"] == "throughput"
    assert row["first"].strftime("%Y-%m-%d") == _night(0) and row["latest"] == 7003 and row["band"] is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seconds=st.floats(0, 9.2e9), ms=st.lists(st.floats(1e12, 9.2e12), max_size=5),
       other=st.lists(st.sampled_from(["-5", "nan", "x", "1e30", "2.6e11"]), max_size=3))
def test_a_time_in_milliseconds_is_said_as_such_never_read_as_a_date(tmp_path, seconds, ms, other):
    """Any job_completion_time_unix in milliseconds (a site's own format) of 2001-2262 is no date in seconds: it
    is left out, counted and named as milliseconds where that is all that is wrong with it; one that is no date
    either way (2.6e11: past 9999 in seconds, 1978 in milliseconds), or lacks a value, a variable or a column too, is
    counted, not named so."""
    body = [UNIX, f"{seconds!r}|T|v|0.29|GB/s", *(f"{m!r}|T|v|0.29|GB/s" for m in ms),
            *(f"{o}|T|v|0.29|GB/s" for o in other), "1.7e12|T|v|nan|GB/s", "1.7e12|T||0.29|GB/s", "1.7e12|T|v"]
    other += ["a value", "a variable", "a column"]  # a line in ms that lacks another thing is not one in ms only
    rows, skipped = _follow(tmp_path, body)
    assert [r["runs"] for r in rows] == [1]
    assert [why for _, why in skipped] == [f"{len(ms) + len(other)} line(s) with no date, variable or finite value, "
                                           "left out" + (f" ({len(ms)} of them dated in milliseconds since 1970, not "
                                                         "ReFrame's seconds)" if ms else "")]


def _report(*args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(list(map(str, args))) == 0
    return out.getvalue()


def test_the_report_prints_the_perflog_beside_the_history_and_says_what_it_left_out(tmp_path):
    """A folder of perflogs (ReFrame's --perflogdir: <system>/<partition>/<test>.log) beside an empty results folder:
    the table, the change's line and one line for the file it could not read."""
    logs = tmp_path / "perflogs" / "cluster" / "gpu"
    logs.mkdir(parents=True)
    busbw = 0.29 * np.exp(np.random.default_rng(1).normal(0, 0.02, 40)) * np.where(np.arange(40) >= 25, 0.8, 1)
    (logs / "ScalelabReport.log").write_text("\n".join([HEADER, *_lines(busbw)]) + "\n")
    (logs / "notes.log").write_text("nothing here\n")
    (logs / "ignored.txt").write_text("not a log\n")
    results = tmp_path / "results"
    results.mkdir()
    from scalelab.testing import nightly
    nightly.site(results, 12)
    out = _report("--output_dir", results, "--history", "--perflog", tmp_path / "perflogs", "--export",
                  tmp_path / "export")
    table = out.split("ReFrame perflog", 1)[1].split("\nwritten: ")[0]
    assert "ScalelabReport" in table and " 40 " in table and f"{_night(25)}: -20 %" in table.replace("−", "-"), out
    assert "skipped" in table and "notes.log: not a ReFrame perflog" in table and "ignored.txt" not in table
    # --export: the same table and lines in report.md, the variable and its change in the CSVs
    assert "notes.log: not a ReFrame perflog" in (tmp_path / "export" / "report.md").read_text()
    (row,), (change,) = (pd.read_csv(tmp_path / "export" / name).to_dict("records")
                         for name in ("perflog.csv", "perflog_changes.csv"))
    assert row["runs"] == 40 and row["first"].startswith(_night(0)), row
    assert row["inside"] in ("yes", "NO, below", "NO, above"), row
    assert f"{cell(row['latest'], 'GB/s')} " in table and f"{cell(row['band_low'], '')}–" in table, (row, table)
    assert change["date"].startswith(_night(25)) and f"{change['size'] * 100:+.0f} %" in table.replace("−", "-")
    assert change["unit"] == "GB/s" and change["before"] > change["after"] > 0, change


@pytest.mark.parametrize("args, said", [
    (["--perflog", "."], "--perflog goes with --history"),
    (["--history", "--perflog", "/no/such/perflog"], "--perflog /no/such/perflog: no such file or folder"),
])
def test_a_wrong_perflog_flag_is_one_line(tmp_path, args, said):
    with pytest.raises(UsageError, match=f"^{said}$"):
        cli.main(["--output_dir", str(tmp_path), *args])


def test_a_perflog_folder_without_a_log_is_one_line_not_silence(tmp_path):
    (tmp_path / "perflogs").mkdir()
    (tmp_path / "perflogs" / "notes.txt").write_text("no perflog here\n")
    with pytest.raises(UsageError, match=r"^--perflog \S+perflogs: no \*\.log in this folder"):
        cli.main(["--output_dir", str(tmp_path), "--history", "--perflog", str(tmp_path / "perflogs")])


def test_two_systems_perflogs_are_two_series_and_a_file_named_twice_counts_once(tmp_path):
    """ReFrame writes perflogs/<system>/<partition>/<test>.log, its lines naming no system: two systems' tests of one
    name were merged into one series (a band across both, a step between them hidden), and a file named twice
    counted each night twice."""
    rng = np.random.default_rng(4)
    for system, level in (("sysA", 0.29), ("sysB", 0.9)):
        (tmp_path / system / "gpu").mkdir(parents=True)
        values = level * np.exp(rng.normal(0, 0.03, 40)) * np.where(np.arange(40) >= 25, 0.8, 1)
        (tmp_path / system / "gpu" / "ScalelabReport.log").write_text("\n".join([HEADER, *_lines(values)]) + "\n")
    paths = perflog.paths_of([str(tmp_path), str(tmp_path / "sysA" / "gpu" / "ScalelabReport.log")])
    rows = perflog.follow(perflog.read(paths, []))
    assert [(r["test"], r["runs"]) for r in rows] == [("sysA/gpu: ScalelabReport", 40),
                                                     ("sysB/gpu: ScalelabReport", 40)]
    assert all([c.index for _, c in r["changes"]] == [25] for r in rows), rows


def test_a_perflog_an_editor_saved_with_a_bom_is_read(tmp_path):
    path = tmp_path / "Test.log"
    path.write_text("\ufeff" + "\n".join([HEADER, *_lines([0.29] * 12)]) + "\n", encoding="utf-8")
    skipped = []
    assert [r["runs"] for r in perflog.follow(perflog.read([str(path)], skipped))] == [12] and not skipped


@pytest.mark.parametrize("value, shown", [(1e308, "1.00e+308"), (123456.0, "123,456"), (0.2345, "0.234"),
                                          (0.5, "0.500")])
def test_a_value_is_shown_in_a_cell_of_a_few_digits(value, shown):
    assert perflog.cell(value, "") == shown
