"""The folder's index (report/index.py): the report reads the same through it as from the files, re-reads what
changed, rebuilds what is not its own, survives two reports at once and a full disk, and never hides a result."""

import contextlib
import io
import json
import os
import pathlib
import shutil
import sqlite3
import time

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import ROOT, SRC, two_reports_at_once
from scalelab import redaction, results
from scalelab.report import cli, explain, index, kept, progress, sealing, stored
from scalelab.report.columns import JSON_TEXTS, NAMES

FOLDERS = [ROOT / "tests" / "data" / "demo-results", ROOT / "tests" / "data" / "fp32-baseline-bf16-pair",
           ROOT / "docs" / "results" / "cpu-rehearsal"]


@pytest.fixture(autouse=True)
def _nothing_kept(monkeypatch):
    """These are the index's own tests: each scan reads through it, nothing kept between (test_kept.py's layer)."""
    monkeypatch.setattr(kept, "load", lambda root, version: kept.Kept())
    monkeypatch.setattr(kept, "save", lambda *a, **k: None)


def _report(folder, *args) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["--output_dir", str(folder), *map(str, args)])
    return code, out.getvalue(), err.getvalue()


def _copy(folder, tmp_path):
    shutil.copytree(folder, tmp_path / "out", ignore=shutil.ignore_patterns(index.FILE_NAME + "*"))
    return tmp_path / "out"


def _exports(folder) -> dict:
    """The export files, summary.json's creation time aside."""
    out = {}
    for name in sorted(os.listdir(folder)):
        text = (folder / name).read_text()
        if name == "summary.json":
            data = json.loads(text)
            data.pop("created", None)
            text = json.dumps(data, sort_keys=True)
        out[name] = text
    return out


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_report_reads_the_same_through_the_index_as_from_the_files(folder, tmp_path):
    """Tables, track record, forecast, history, exports and traces: from the files, then through a new index, then
    through the index as the first report left it. (These folders' runs predate the marks a trace draws;
    test_timeline.py draws a run's marks read back whole through the index.)"""
    out = _copy(folder, tmp_path)
    said = []
    for i, args in enumerate((["--no_index"], [], [])):
        code, printed, err = _report(out, "--details", "--forecast", "--history", "--export", tmp_path / f"e{i}",
                                     "--trace", tmp_path / f"t{i}", *args)
        printed = printed.replace(str(tmp_path / f"e{i}"), "EXPORT").replace(str(tmp_path / f"t{i}"), "TRACE")
        said.append((code, printed, err, _exports(tmp_path / f"e{i}"), _exports(tmp_path / f"t{i}")))
    assert said[0][0] == 0 and said[0] == said[1] == said[2]
    assert (out / index.FILE_NAME).is_file()


@pytest.mark.parametrize("name", ["plain", "with space ?#%", os.fsdecode(b"not-utf8-\xff")])
def test_an_index_in_a_folder_of_any_name_is_read_again_and_its_curves_from_it(tmp_path, monkeypatch, name):
    """A folder's name is any bytes: the index there is used (nothing parsed twice), its curves read from it."""
    out = _copy(FOLDERS[0], tmp_path / name)
    index.scan(str(out))
    monkeypatch.setattr(index, "_parse", lambda path, root: pytest.fail(f"{path} parsed again"))
    real = index.files.read_bytes  # the mount table is read (files.folder_times_hold), no file of the folder's
    monkeypatch.setattr(index.files, "read_bytes", lambda path, *a, **k: pytest.fail(f"{path} read from its file")
                        if str(path).startswith(str(out)) else real(path, *a, **k))
    assert all(len(r["_row"][NAMES.index("loss_curve")]) for r in index.scan(str(out))[0] if "_row" in r)


def test_a_name_or_a_line_that_is_not_utf8_is_read_from_its_file_and_the_rest_through_the_index(tmp_path):
    """A subfolder named with bytes that are not UTF-8, and a file whose skip line holds a lone surrogate (a key
    "\\udcff" its JSON escapes): SQLite holds no such text, so those two are read from their files each report, the
    rest through the index; the report is the files' (it raised UnicodeEncodeError at every report)."""
    out = _copy(FOLDERS[0], tmp_path)
    one, other = sorted(p.parent for p in out.rglob("result.json") if "gpt" in str(p))
    os.rename(one, os.fsdecode(os.fsencode(one) + b"-\xff"))
    data = json.loads((other / "result.json").read_text())
    data["workload"]["\udcff"] = {"a": 1}  # a field whose value is not a workload's: skipped, the key named
    (other / "result.json").write_text(json.dumps(data))
    said = [_report(out, *args) for args in (["--no_index"], [], [])]
    assert said[0][0] == 0 and "skipped" in said[0][2] and said[0] == said[1] == said[2]
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM results").fetchone() == (len(list(out.rglob("result.json"))) - 2,)


def test_a_skip_line_is_kept_only_under_its_seal_and_never_hides_a_result(tmp_path, monkeypatch):
    """A file that does not read is kept as its skip line (not parsed again) under the seal its report wrote; a
    skip line put on a result's row by hand, or a row's body sealed as a skip line, reads that file again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = _copy(FOLDERS[0], tmp_path)
    (out / "bad").mkdir()
    (out / "bad" / "result.json").write_text("not json")
    first = index.scan(str(out))
    parsed, real = [], index._parse
    monkeypatch.setattr(index, "_parse", lambda path, root: parsed.append(path) or real(path, root))
    assert index.scan(str(out)) == first and parsed == []
    path = next(p for p in out.rglob("result.json") if "gpt-2x" in str(p))
    key = os.path.relpath(path, out)
    with sqlite3.connect(out / index.FILE_NAME) as db:
        db.execute("UPDATE results SET skipped = 'not a result', body = NULL, curve = NULL WHERE path = ?", (key,))
    assert index.scan(str(out)) == first and parsed == [str(path)]
    with sqlite3.connect(out / index.FILE_NAME) as db:  # its own seal, on a skip line: another thing it seals
        db.execute("UPDATE results SET skipped = body, body = NULL, curve = NULL WHERE path = ?", (key,))
    assert index.scan(str(out)) == first and parsed == [str(path)] * 2


def test_only_new_or_changed_files_are_read_again(tmp_path, monkeypatch):
    out = _copy(FOLDERS[0], tmp_path)
    first, _ = index.scan(str(out))
    parsed = []
    real = index._parse
    monkeypatch.setattr(index, "_parse", lambda path, root: parsed.append(path) or real(path, root))
    again, _ = index.scan(str(out))
    assert parsed == [] and [r["run_id"] for r in again] == [r["run_id"] for r in first]
    path = next(p for p in out.rglob("result.json") if "gpt-2x" in str(p))
    data = json.loads(path.read_text())
    data["timing"]["tokens_per_s"] *= 2  # rewritten in place: a new mtime, and here a new size too
    path.write_text(json.dumps(data, indent=2))
    changed, _ = index.scan(str(out))
    assert parsed == [str(path)]
    row = next(r for r in changed if r["_path"] == str(path))["_row"]
    assert row[NAMES.index("tokens_per_s")] == data["timing"]["tokens_per_s"]


def test_a_file_rewritten_within_its_filesystem_s_tick_is_read_again(tmp_path, monkeypatch):
    """On a filesystem whose stamps are whole seconds (NFSv3, ext3, a Lustre), a file rewritten in place at its size
    within the second it was indexed keeps its identity: a file that changed within RACY_NS of a report is not
    indexed yet (read again next time), and one whose stamps are older is (never parsed again)."""
    out = _copy(FOLDERS[0], tmp_path)
    path = next(p for p in out.rglob("result.json") if "gpt-2x" in str(p))
    second = time.time_ns() // 10**9 * 10**9
    stamp = {"now": second}
    monkeypatch.setattr(index.files, "identity", lambda st: (st.st_size, stamp["now"], stamp["now"], str(st.st_ino)))
    index.scan(str(out))
    text = path.read_text()
    tokens = json.loads(text)["timing"]["tokens_per_s"]
    was = json.dumps(tokens)
    path.write_text(text.replace(f'"tokens_per_s": {was}', f'"tokens_per_s": {(int(was[0]) + 1) % 9 + 1}{was[1:]}'))
    assert path.stat().st_size == len(text.encode())  # the same size, the same (whole-second) stamps
    row = next(r for r in index.scan(str(out))[0] if r["_path"] == str(path))["_row"]
    assert row[NAMES.index("tokens_per_s")] != tokens
    stamp["now"] = second - index.files.RACY_NS - 10**9  # older than a report's tick: indexed, never parsed again
    index.scan(str(out))
    monkeypatch.setattr(index, "_parse", lambda path, root: pytest.fail(f"{path} parsed again"))
    index.scan(str(out))


@pytest.mark.parametrize("damage", ["truncated", "a folder", "removed", "not json"])
def test_a_file_that_changes_under_the_index_is_read_again_or_skipped_in_one_line(tmp_path, damage):
    out = _copy(FOLDERS[0], tmp_path)
    index.scan(str(out))
    path = next(p for p in out.rglob("result.json") if "gpt-1x" in str(p))
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "a folder":
        path.unlink()
        path.mkdir()
    elif damage == "removed":
        path.unlink()
    else:
        path.write_text("{ no")
    found, skipped = index.scan(str(out))
    full, full_skipped = results.scan(str(out))
    assert sorted(r["run_id"] for r in found) == sorted(r["run_id"] for r in full)
    assert skipped == full_skipped  # the same one line a full read says, never a stale row
    assert all("gpt-1x" not in r["run_id"] for r in found)
    assert [p for p, _ in skipped] == ([] if damage == "removed" else [str(path)])  # a folder too: never silence


@pytest.mark.parametrize("bad", [b"not a database at all", b"", "another scalelab"])
def test_an_index_that_is_not_ours_is_rebuilt_from_the_files(tmp_path, bad):
    out = _copy(FOLDERS[0], tmp_path)
    if bad == "another scalelab":
        index.scan(str(out))
        with sqlite3.connect(out / index.FILE_NAME) as db:
            db.execute("UPDATE meta SET value = 'old' WHERE key = 'version'")
            db.execute("UPDATE results SET body = '{\"kind\": \"training\", \"_row\": {}}' WHERE skipped IS NULL")
    else:
        (out / index.FILE_NAME).write_bytes(bad)
    found, skipped = index.scan(str(out))
    assert sorted(r["run_id"] for r in found) == sorted(r["run_id"] for r in results.scan(str(out))[0])
    assert all(r["_row"] for r in found if r["kind"] == "training") and not skipped


def test_rows_of_another_scalelab_never_reach_an_index_it_did_not_build(tmp_path, monkeypatch):
    """Two scalelab versions at once on one folder (an old one's nightly job, a new one's report): rows each computes
    are written and read only while the index is its own (asked inside the transaction), never mixed in."""
    out = _copy(FOLDERS[0], tmp_path)
    path, files = str(out / index.FILE_NAME), _report(out, "--no_index")
    listed = [(str(p), os.path.relpath(p, out), os.stat(p)) for p in sorted(out.rglob("result.json"))]

    def as_old(version="an older scalelab"):  # rows that scalelab computes otherwise: its throughput
        monkeypatch.setattr(index, "code_version", lambda: version)
        rows = []
        for p, key, stat in listed:
            body, reason, digest, _ = index._parse(p, str(out))
            if body and "_row" in body:
                body["_row"] = tuple(1.0 if n == "tokens_per_s" else v for n, v in zip(NAMES, body["_row"]))
            rows.append((key, stat, digest, reason, body))
        return rows

    real = index.code_version
    old = index._open(path)  # the old one opens its index (it rebuilds it: another version's) ...
    rows = as_old()
    monkeypatch.setattr(index, "code_version", real)
    assert _report(out) == files  # ... the new one rebuilds it (its own report) ...
    monkeypatch.setattr(index, "code_version", lambda: "an older scalelab")
    index._update(old, rows, set())  # ... then the old one writes the rows it read: not into the new one's index
    old.close()
    monkeypatch.setattr(index, "code_version", real)
    assert _report(out) == files
    new = index._open(path)  # the new one opens its index; the old one rebuilds it and writes its rows; ...
    rows = as_old()
    old = index._open(path)
    index._update(old, rows, set())
    old.close()
    monkeypatch.setattr(index, "code_version", real)
    kept, _ = index._kept(new, {key: st for _, key, st in listed}, str(out))  # ... the new one reads none of them
    new.close()
    assert kept == {}


def test_a_full_disk_leaves_the_old_index_and_the_report_right(tmp_path, monkeypatch):
    """The update fails as SQLite fails on a full disk (SQLITE_FULL, forced with max_page_count): the index keeps
    what it held, the report what it read."""
    out = _copy(FOLDERS[0], tmp_path)
    index.scan(str(out))
    new = out / "new-run"
    shutil.copytree(next(p for p in out.iterdir() if "gpt-2x" in p.name), new)
    data = json.loads((new / "result.json").read_text())
    data["run_id"] = "new-run"
    (new / "result.json").write_text(json.dumps(data))
    real = index._open

    def full_disk(path):
        db = real(path)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")
        return db
    monkeypatch.setattr(index, "_open", full_disk)
    found, _ = index.scan(str(out))
    assert "new-run" in {r["run_id"] for r in found}
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert not db.execute("SELECT 1 FROM results WHERE path LIKE 'new-run%'").fetchall()
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_two_reports_at_once_leave_one_sound_index(tmp_path):
    """Two report processes over one folder at the same moment, twice: both print the same, the index stays whole."""
    out = _copy(FOLDERS[2], tmp_path)
    for _ in range(2):
        two_reports_at_once(out, {"PYTHONPATH": str(SRC)})
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM results").fetchone()[0] == len(list(out.rglob("result.json")))


@pytest.mark.parametrize("there", ["a folder", "a link"])
def test_a_folder_the_report_cannot_write_is_read_whole_and_says_why_in_one_line(tmp_path, capsys, there):
    out = _copy(FOLDERS[0], tmp_path)
    if there == "a folder":
        (out / index.FILE_NAME).mkdir()  # not a file the index may replace
    else:
        (out / index.FILE_NAME).symlink_to(tmp_path / "elsewhere.sqlite")
    found, skipped = index.scan(str(out))
    assert len(found) == len(results.scan(str(out))[0]) and not skipped and os.path.lexists(out / index.FILE_NAME)
    assert not (tmp_path / "elsewhere.sqlite").exists()
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and index.FILE_NAME in said[0] and "read without it" in said[0], said


def test_a_folder_without_a_result_is_left_as_it_was_found(tmp_path):
    """A report over an empty folder (or one whose runs have not written yet) makes no index there; one whose last
    result went keeps its index, emptied."""
    assert index.scan(str(tmp_path)) == ([], []) and os.listdir(tmp_path) == []
    out = _copy(FOLDERS[0], tmp_path)
    index.scan(str(out))
    for path in out.rglob("result.json"):
        path.unlink()
    assert index.scan(str(out)) == ([], [])
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM results").fetchone() == (0,)


def test_a_stored_row_not_as_the_index_writes_it_is_read_again_from_its_file(tmp_path):
    """A hand edit, a torn write or another tool's row: the file says again, never a traceback or a wrong row."""
    out = _copy(FOLDERS[0], tmp_path)
    first, _ = index.scan(str(out))
    for body in ("{", None, "[]", '{"kind": "training", "run_id": "x"}', '{"kind": "training", "_row": 5}'):
        with sqlite3.connect(out / index.FILE_NAME) as db:
            db.execute("UPDATE results SET body = ? WHERE skipped IS NULL", (body,))
        found, skipped = index.scan(str(out))
        assert not skipped and sorted(r["run_id"] for r in found) == sorted(r["run_id"] for r in first), body


def test_a_loss_curve_comes_back_from_the_index_bit_for_bit_and_a_torn_one_is_read_again(tmp_path):
    """The curve is stored apart, as packed doubles: NaN (a rank's loss not finite) and the last digit come back as
    the file gives them; a curve of the wrong length or kind, or beside a row that still holds one, is no row
    of the index's (the file is read again)."""
    out = _copy(FOLDERS[0], tmp_path)
    path = next(p for p in sorted(out.rglob("result.json")) if json.loads(p.read_text())["kind"] == "training")
    data = json.loads(path.read_text())
    for i, rank in enumerate(data["ranks"]):
        rank["losses"] = [None, -0.0, 0.1 + 0.2, 12.345678901234567 / (i + 1)] + rank["losses"][4:]
    path.write_text(json.dumps(data))

    key = str(path.relative_to(out))

    def curves():
        found = {r["_path"]: r["_row"][NAMES.index("loss_curve")] for r in index.scan(str(out))[0] if "_row" in r}
        return {p: repr(c) for p, c in found.items()}

    first = curves()
    assert first[str(path)].startswith("(nan, 0.0, 0.30000000000000004, 12.345678901234567, ") and len(first) > 1
    assert curves() == first  # read through the index
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM results WHERE curve IS NOT NULL").fetchone()[0] == len(first)
    row = [[1.0] if name == "loss_curve" else None for name in NAMES]  # a curve in its row, not beside it
    held = json.dumps({"kind": "training", "run_id": "x", "_row": row})
    with sqlite3.connect(out / index.FILE_NAME) as db:
        stored = json.loads(db.execute("SELECT body FROM results WHERE path = ?", (key,)).fetchone()[0])
    stored["_row"][NAMES.index("loss_curve")] = 1  # beside it, says a 1: not the true this module writes
    for curve, body in ((b"\0" * 7, None), ("text", None), ("8 chars!", None), (None, None), (b"", None),
                        (b"\0" * 8, held), (None, held), (b"\0" * 8, json.dumps(stored))):
        with sqlite3.connect(out / index.FILE_NAME) as db:
            db.execute("UPDATE results SET curve = ? WHERE path = ?", (curve, key))
            if body:
                db.execute("UPDATE results SET body = ? WHERE path = ?", (body, key))
        assert curves() == first, curve
        with sqlite3.connect(out / index.FILE_NAME) as db:  # the torn row written anew from its file
            assert db.execute("SELECT typeof(curve), length(curve) % 8 FROM results WHERE path = ?",
                              (key,)).fetchone() == ("blob", 0), curve


@pytest.mark.parametrize("since", ["rows rewritten", "index removed", "files changed too", "untouched"])
def test_a_curve_is_read_when_used_and_from_its_file_where_its_row_changed_since(tmp_path, monkeypatch, since):
    """The curves stay in the index until one is used, then come from it; one whose row another report rewrote
    since (another digest), or whose index is gone, is its file's while that is what the report read, and none
    (empty) once the file changed too: never another content's."""
    out = _copy(FOLDERS[0], tmp_path)
    truth = {r["_path"]: repr(r["_row"][NAMES.index("loss_curve")]) for r in index.scan(str(out))[0] if "_row" in r}
    found = [r for r in index.scan(str(out))[0] if "_row" in r]  # read through the index, no curve used yet
    if since == "untouched":  # from the index alone: a file read now fails the test
        monkeypatch.setattr(index.files, "read_bytes", lambda *a, **k: pytest.fail("a curve read from its file"))
    elif since == "index removed":
        (out / index.FILE_NAME).unlink()
    else:
        with sqlite3.connect(out / index.FILE_NAME) as db:
            db.execute("UPDATE results SET curve = ?, digest = 'another' WHERE curve IS NOT NULL", (b"\0" * 8,))
    if since == "files changed too":
        for r in found:
            with open(r["_path"], "a") as fh:
                fh.write("\n")
        truth = dict.fromkeys(truth, "()")
    assert {r["_path"]: repr(r["_row"][NAMES.index("loss_curve")]) for r in found} == truth
    assert not (out / index.FILE_NAME).exists() if since == "index removed" else True


def test_a_journal_the_index_cannot_make_leaves_the_report_reading_the_files(tmp_path):
    out = _copy(FOLDERS[0], tmp_path)
    (out / (index.FILE_NAME + "-journal")).mkdir()  # SQLite cannot write its journal: every update fails
    for _ in range(2):
        found, skipped = index.scan(str(out))
        assert len(found) == len(results.scan(str(out))[0]) and not skipped


def test_a_read_that_failed_by_chance_is_tried_again(tmp_path, monkeypatch):
    """A deadline or an I/O error is not the file's content: the next report reads it (a bad content is kept)."""
    out = _copy(FOLDERS[0], tmp_path)
    real = index.files.read_bytes
    monkeypatch.setattr(index.files, "read_bytes", lambda *a, **k: (_ for _ in ()).throw(
        index.files.Refused("unreadable (Input/output error)")))
    found, skipped = index.scan(str(out))
    assert not found and len(skipped) == 3
    monkeypatch.setattr(index.files, "read_bytes", real)
    found, skipped = index.scan(str(out))
    assert len(found) == 3 and not skipped


def test_an_inode_past_int64_is_kept(tmp_path):
    """overlayfs (xino) numbers inodes past SQLite's int64: the row is kept, not an OverflowError."""
    from types import SimpleNamespace

    db = index._open(str(tmp_path / index.FILE_NAME))
    st = SimpleNamespace(st_size=1, st_mtime_ns=2, st_ctime_ns=3, st_ino=2**64 + 5)
    index._update(db, [("a/result.json", st, "d", "bad", None)], set())
    kept = index._kept(db, {"a/result.json": st}, str(tmp_path))
    assert kept == ({"a/result.json": (None, "bad", "d", None)}, {"a/result.json"})


@pytest.mark.parametrize("folder", [FOLDERS[0], FOLDERS[2]], ids=lambda f: f.name)  # the two with benchmarks
def test_a_benchmark_kept_light_gives_the_report_what_its_whole_file_gives(folder):
    """The index keeps of a collective benchmark what explain.bench_frame, its one reader, reads (index.BENCH): its
    frame from the light bodies is the frame from the whole files (bench_frame reading another field fails here,
    not as an empty cell)."""
    whole = results.scan(str(folder))[0]
    bench = [r for r in whole if r["kind"] == "allreduce"]
    bench[0]["config"]["collective"] = "all_gather"  # FSDP's step is priced with these (explain.COLLECTIVES)
    bench[-1]["source"] = {"format": "nccl-tests", "file": "x.log"}  # an imported log's: the report says it
    light = [{**index.light(r), "_path": r["_path"]} for r in whole]
    assert all(len(json.dumps(b)) < len(json.dumps(r)) for b, r in zip(light, whole) if r["kind"] == "allreduce")
    pd.testing.assert_frame_equal(*(explain.bench_frame(found, explain.COLLECTIVES) for found in (whole, light)))


def test_a_field_a_reader_marks_for_itself_is_never_taken_from_a_file(tmp_path):
    """A result.json holding "_row" or "_group_key" (the index's own marks) is read as its fields say."""
    out = _copy(FOLDERS[0], tmp_path)
    path = next(p for p in out.rglob("result.json") if "gpt-2x" in str(p))
    data = json.loads(path.read_text())
    data.update(_row="x", _group_key="forged", _path="/etc/passwd")
    path.write_text(json.dumps(data))
    for args in (["--no_index"], []):
        code, printed, err = _report(out, *args)
        assert code == 0 and "skipped" not in err and "/etc/passwd" not in printed, err
    assert all(r["_path"] != "/etc/passwd" for r in results.scan(str(out))[0])


_TEXT = st.text(st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    ["token=abc", "https://u:pw@host/x", "Bearer abc.def", "\x1b[2J", "ok\x9b31m", "--api-key k", "plain"])
_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT
_VALUE = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=3),
                      max_leaves=8)


@settings(max_examples=70, deadline=None)
@given(row=st.lists(_VALUE, min_size=len(NAMES), max_size=len(NAMES)), width=st.integers(0, len(NAMES) + 2))
def test_a_row_is_stored_as_as_read_shows_it_and_one_of_another_width_rereads_the_file(row, width):
    """A row is stored as as_read shows its values (its lists as tuples, as run_row makes them; its JSON texts as
    what they say, or not stored where they do not say it) and read back as stored; a row of another width than
    the runs frame's is no body of the index's (the file is read again), never columns shifted."""
    curve = NAMES.index("loss_curve")
    row = [False if i == curve else _as_json_text(v) if n in JSON_TEXTS else v for i, (n, v) in
           enumerate(zip(NAMES, row))]  # no curve beside it (encode)
    body = json.loads(json.dumps({"kind": "training", "run_id": "r", "_row": (row + row)[:width]}))
    if width != len(NAMES):
        with pytest.raises(ValueError):
            stored.decode(json.dumps(body), None, {})
        return
    if not all(_shows_as_it_says(row[NAMES.index(n)]) for n in JSON_TEXTS):
        with pytest.raises(ValueError):
            stored.shown(body)
        return
    shown = redaction.as_read(body)["_row"]
    shown[curve] = None
    for name in JSON_TEXTS:  # a JSON text is shown as what it says: as it was, never redacted as text
        shown[NAMES.index(name)] = row[NAMES.index(name)]
    back = stored.decode(stored.encode(stored.shown(body))[0], None, {})["_row"]
    assert back == tuple(tuple(v) if isinstance(v, list) else v for v in shown)


def _as_json_text(value):
    """A value where a row holds a JSON text (columns.JSON_TEXTS): as the column makes it, now and then not."""
    return value if isinstance(value, str) and len(value) % 3 == 0 else json.dumps(value, sort_keys=True)


def _shows_as_it_says(text) -> bool:
    """A row's JSON text as its column writes it from what as_read showed ("" for none): what the index keeps."""
    try:
        return text == "" or json.dumps(redaction.as_read(json.loads(text)), sort_keys=True) == text
    except (TypeError, ValueError):
        return False


def test_the_runs_frame_s_names_are_words_as_read_keeps():
    assert all(redaction.as_read({name: 1}) == {name: 1} for name in NAMES)


_ANY = st.recursive(st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.floats()
                    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner,
                                                                                         max_size=4), max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(value=_ANY)
def test_a_stored_text_reads_as_json_reads_it(value):
    """msgspec reads a stored body where it can, json where it cannot (NaN, a number past int64, a lone
    surrogate): the same value either way, its types included."""
    text = json.dumps(value, allow_nan=True)
    assert repr(stored.loads(text)) == repr(json.loads(text))


@settings(max_examples=70, deadline=None)
@given(row=st.lists(_VALUE, min_size=len(NAMES), max_size=len(NAMES)), extra=st.dictionaries(_TEXT, _VALUE,
                                                                                               max_size=3),
       run_id=_TEXT)
def test_a_body_stored_as_shown_reads_back_as_shown(row, extra, run_id):
    """A sealed row skips as_read because it was stored as as_read shows it (shown): on any values (secrets, control
    characters, lists in lists), a training row and a benchmark body read back as they were shown."""
    curve = NAMES.index("loss_curve")
    row = tuple(False if i == curve else _as_json_text(v) if n in JSON_TEXTS else v
                for i, (n, v) in enumerate(zip(NAMES, row)))
    for body in ({"kind": "training", "run_id": run_id, "_group_key": _as_json_text(extra), "_row": row},
                 {**extra, "kind": "allreduce", "run_id": run_id}):
        body = json.loads(json.dumps(body))
        try:
            shown = stored.shown(body)
        except ValueError:  # a JSON text not as its column writes it: never stored
            texts = [body.get("_group_key", "")] + [body["_row"][NAMES.index(n)] for n in JSON_TEXTS if "_row" in body]
            assert not all(map(_shows_as_it_says, texts))
            continue
        text, beside = stored.encode(shown)
        if "_row" in shown:
            shown["_row"] = tuple(None if i == curve else v for i, v in enumerate(shown["_row"]))
        assert beside is None and stored.decode(text, None, {}) == shown


def _sealed_scan(out, monkeypatch, cache) -> list:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return sorted(r["run_id"] for r in index.scan(str(out))[0])


def test_a_row_is_taken_as_shown_only_under_the_key_that_sealed_it(tmp_path, monkeypatch):
    """A row whose text holds a raw escape sequence and a seal of key A (a hand edit by A): under A it is taken as
    stored; under B (another user's report in a shared folder) not at all: its file is read again; under A neither
    where that text and seal moved to another row, carry another scalelab version's seal, or were edited after
    sealing. And the rows A sealed are read without as_read."""
    out = _copy(FOLDERS[0], tmp_path)
    names = _sealed_scan(out, monkeypatch, tmp_path / "a")
    key_a = sealing.row_key()
    assert key_a is not None and (tmp_path / "a" / "scalelab" / "index.key").stat().st_mode & 0o777 == 0o600
    walked = []
    monkeypatch.setattr(stored, "as_read", lambda obj: walked.append(obj) or redaction.as_read(obj))
    assert _sealed_scan(out, monkeypatch, tmp_path / "a") == names and not walked  # all sealed: none walked again
    with sqlite3.connect(out / index.FILE_NAME) as db:
        (path, *identity, digest, curve_digest, text), (other, *_) = db.execute(
            "SELECT path, size, mtime_ns, ctime_ns, ino, digest, curve_digest, body FROM results "
            "WHERE body LIKE '%\"training\"%'").fetchall()[:2]
        body = json.loads(text)
        body["run_id"] = "evil\x1b[2J"
        forged = json.dumps(body)

        def sealed(version=None, where=path):
            version = version or index.code_version()
            db.execute("UPDATE results SET body = ? WHERE path = ?", (forged, where))
            db.execute("INSERT OR REPLACE INTO seals VALUES (?, ?, ?)", (sealing.signer(key_a), where, sealing.seal(
                key_a, version, path, *identity, digest, curve_digest, "body", forged)))
        sealed()
    assert "evil\x1b[2J" in _sealed_scan(out, monkeypatch, tmp_path / "a")  # A's own seal: as A stored it
    assert _sealed_scan(out, monkeypatch, tmp_path / "b") == names  # B's key: the files say (B's rows now)
    with sqlite3.connect(out / index.FILE_NAME) as db:
        sealed()
        sealed(where=other)  # P's text and seal on Q's row too: Q's file says
    shown = _sealed_scan(out, monkeypatch, tmp_path / "a")
    assert shown.count("evil\x1b[2J") == 1 and len(set(shown) - set(names)) == 1
    for forge in (lambda: sealed(version="another scalelab's"),
                  lambda: sealed() or db.execute("UPDATE results SET body = replace(body, 'evil', 'evil2') "
                                                 "WHERE path = ?", (path,))):  # edited after A sealed it
        with sqlite3.connect(out / index.FILE_NAME) as db:
            forge()
        assert _sealed_scan(out, monkeypatch, tmp_path / "a") == names


@pytest.mark.parametrize("how", ["others may read it", "its group may read it", "a symlink", "a hard link", "a folder",
                                 "a FIFO", "short", "long", "in a folder others may write", "in a linked folder",
                                 "no cache folder"])
def test_a_key_that_is_not_private_seals_nothing_and_the_report_stays_right(tmp_path, monkeypatch, how):
    """A key others may read (or not a plain file of 32 bytes, or none to be made) is no key: rows are stored
    unsealed and every one is shown again; the report reads the same."""
    cache = tmp_path / "cache"
    key = cache / "scalelab" / "index.key"
    key.parent.mkdir(parents=True)
    if how == "others may read it":
        key.write_bytes(os.urandom(sealing.KEY_BYTES))
        key.chmod(0o644)
    elif how == "a symlink":
        (tmp_path / "k").write_bytes(os.urandom(sealing.KEY_BYTES))
        (tmp_path / "k").chmod(0o600)
        key.symlink_to(tmp_path / "k")
    elif how == "a folder":
        key.mkdir()
    elif how == "a FIFO":  # opened to read, it would wait for a writer for good
        os.mkfifo(key, 0o600)
    elif how in ("short", "long"):
        key.write_bytes(os.urandom(sealing.KEY_BYTES + (1 if how == "long" else -31)))
        key.chmod(0o600)
    elif how == "its group may read it":
        key.write_bytes(os.urandom(sealing.KEY_BYTES))
        key.chmod(0o640)
    elif how == "a hard link":  # another name of it may sit where others read
        key.write_bytes(os.urandom(sealing.KEY_BYTES))
        key.chmod(0o600)
        os.link(key, tmp_path / "also")
    elif how == "in a folder others may write":
        key.write_bytes(os.urandom(sealing.KEY_BYTES))
        key.chmod(0o600)
        key.parent.chmod(0o777)
    elif how == "in a linked folder":
        key.write_bytes(os.urandom(sealing.KEY_BYTES))
        key.chmod(0o600)
        key.parent.rename(tmp_path / "elsewhere")
        key.parent.symlink_to(tmp_path / "elsewhere")
    else:
        shutil.rmtree(cache)
        cache.write_text("a file where the cache folder would be")
    out = _copy(FOLDERS[0], tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert sealing.row_key() is None
    found = index.scan(str(out))[0]
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("SELECT count(*) FROM seals").fetchone()[0] == 0
    assert sorted(r["run_id"] for r in found) == sorted(r["run_id"] for r in results.scan(str(out))[0])


def test_the_key_is_made_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = sealing.row_key()
    assert len(first) == sealing.KEY_BYTES and (tmp_path / "scalelab").stat().st_mode & 0o777 == 0o700
    sealing._key_at.cache_clear()
    assert sealing.row_key() == first and os.listdir(tmp_path / "scalelab") == ["index.key"]  # no temp file left
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # the same file, seen by another user
    assert sealing._own_key(str(tmp_path / "scalelab" / "index.key")) is None


def test_a_relative_cache_home_is_ignored_as_the_xdg_rule_says(tmp_path, monkeypatch):
    """XDG_CACHE_HOME=cache (relative: wherever the report runs, a results folder perhaps): ~/.cache instead."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert sealing.row_key() is not None and (tmp_path / "home" / ".cache" / "scalelab" / "index.key").is_file()
    assert not (tmp_path / "cache").exists()


def test_a_row_is_stored_as_it_is_shown_before_it_is_sealed(tmp_path, monkeypatch):
    """What a sealed row holds is what as_read shows (the seal skips as_read on the way out): a light body whose
    own or row's text holds an escape sequence comes back inert, under the key that sealed it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "result.json").write_text("{}")
    st = os.stat(tmp_path / "a" / "result.json")
    row = tuple("x\x1b[2J" if n == "describe" else "{}" if n in JSON_TEXTS else None for n in NAMES)
    db = index._open(str(tmp_path / index.FILE_NAME))
    index._update(db, [("a/result.json", st, "d", None, {"kind": "training", "run_id": "r\x1b", "_row": row})], set())
    (body, *_), = index._kept(db, {"a/result.json": st}, str(tmp_path))[0].values()
    assert db.execute("SELECT count(*) FROM seals").fetchone() == (1,)
    assert body["run_id"] == "r\\x1b" and body["_row"][NAMES.index("describe")] == "x\\x1b[2J"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_real_result_is_stored_as_it_is_kept(folder):
    """The chapters' results as index.light keeps them (tuples, curves, nested dicts, their group's JSON text):
    shown (as_read), each is what it was, so storing it as shown changes nothing of it."""
    for path in sorted(folder.rglob("result.json")):
        light = index.light(results.parse(path.read_bytes()))
        text, packed = stored.encode(light)
        beside = None if packed is None else object()  # the curve read when used: the same for both
        assert stored.decode(stored.encode(stored.shown(light))[0], beside, {}) == stored.decode(text, beside, {})


_NAME = st.sampled_from(["num_key_value_heads", "api_key", "token_budget", "passes", "session_len", "seq_len"]) | \
    st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True)


@settings(max_examples=20, deadline=None)
@given(name=_NAME, values=st.lists(_LEAF, min_size=2, max_size=2))
def test_a_workload_field_of_any_name_and_value_reads_the_same_through_the_index_as_from_its_file(name, values):
    """Two runs whose workloads differ in one field, of any name (one a secret's, num_key_value_heads) and value:
    the runs frame through the index (sealed, and unsealed: another user's) is the one from the files, its groups
    too; a row's JSON text (the group) is never redacted as text, which made two workloads one group."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", os.path.join(tmp, "cache"))
        out = _copy(FOLDERS[0], pathlib.Path(tmp))
        for path, value in zip(sorted(p for p in out.rglob("result.json") if "gpt" in str(p)), values):
            data = json.loads(path.read_text())
            data["workload"][name] = value
            path.write_text(json.dumps(data))

        def runs(**kw):
            frame = cli.build(str(out), **kw).runs.drop(columns=["loss_curve"])
            return frame.astype(str).to_dict("list")
        files = runs(use_index=False)
        assert runs() == files and runs() == files  # the first report reads the files, the second the rows
        mp.setattr(sealing, "row_key", lambda: None)
        assert runs() == files


@settings(max_examples=20, deadline=None)
@given(column=st.sampled_from(NAMES), value=_VALUE, resealed=st.booleans())
def test_a_row_edited_by_hand_or_by_another_user_is_read_from_its_file(column, value, resealed):
    """Any value in any column of a stored row (a text where a number belongs, a world size of 0, a list for a
    group), left with its old seal or sealed under another user's key: the report reads that file and is the
    files' (such rows ended reports in TypeError, IndexError, ZeroDivisionError: 21 of the columns)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", os.path.join(tmp, "cache"))
        out = _copy(FOLDERS[0], pathlib.Path(tmp))
        files = cli.build(str(out), use_index=False).runs.drop(columns=["loss_curve"]).astype(str).to_dict("list")
        cli.build(str(out))
        with contextlib.closing(sqlite3.connect(out / index.FILE_NAME)) as db, db:
            for key, *identity, digest, curve_digest, text in db.execute(
                    "SELECT path, size, mtime_ns, ctime_ns, ino, digest, curve_digest, body FROM results "
                    "WHERE body LIKE '%\"training\"%'").fetchall():
                body = json.loads(text)
                body["_row"][NAMES.index(column)] = value
                text = json.dumps(body)
                seal = sealing.seal(b"another user's key".ljust(32), index.code_version(), key, *identity, digest,
                                    curve_digest, "body", text) if resealed else None
                db.execute("UPDATE results SET body = ? WHERE path = ?", (text, key))
                db.execute("UPDATE seals SET seal = coalesce(?, seal) WHERE path = ?", (seal, key))  # in this one's
        assert cli.build(str(out)).runs.drop(columns=["loss_curve"]).astype(str).to_dict("list") == files


def test_users_who_report_in_turn_each_read_the_files_once_and_a_changed_file_once_each(tmp_path, monkeypatch):
    """A site's nightly job and its staff, each with a key of their own, on one folder: the rows sealed by one
    were read again by the other, who sealed them anew for itself alone, so each report of each read every file
    (100,000 results: a minute each time). A row the files give again as stored gets the second seal beside the
    first; a file that changes is read again by each, once (the other's seal holds for what the row said)."""
    out = _copy(FOLDERS[0], tmp_path)
    parsed, real = [], index._parse
    monkeypatch.setattr(index, "_parse", lambda path, root: parsed.append(path) or real(path, root))

    def scan(user):
        parsed.clear()
        return _sealed_scan(out, monkeypatch, tmp_path / user), len(parsed)

    names, files = scan("nightly")
    assert files == len(list(out.rglob("result.json"))) > 2
    assert scan("staff") == (names, files)  # its first report: every file, as the row it stores is not its own
    assert scan("nightly") == scan("staff") == (names, 0)  # in turn: neither reads a file again
    with sqlite3.connect(out / index.FILE_NAME) as db:
        assert db.execute("SELECT count(DISTINCT signer), count(*) FROM seals").fetchone() == (2, 2 * files)
    path = next(p for p in out.rglob("result.json") if "gpt-2x" in str(p))
    path.write_text(path.read_text() + "\n")
    assert scan("staff") == scan("nightly") == (names, 1)
    assert scan("staff") == scan("nightly") == (names, 0)
    path.unlink()
    assert scan("staff")[1] == scan("nightly")[1] == 0
    with sqlite3.connect(out / index.FILE_NAME) as db:  # a vanished file's row and seals, all gone
        assert db.execute("SELECT count(*) FROM seals WHERE path = ?", (str(path.relative_to(out)),)).fetchone() == (0,)


def test_a_curve_edited_in_the_index_is_its_files_not_the_edit(tmp_path):
    """A loss curve's bytes changed beside its row (its length and the row's digest kept): the curve is under the
    row's seal (its digest), so the run's curve is read from its file, not shown as edited."""
    out = _copy(FOLDERS[0], tmp_path)

    def curves():
        found = [r for r in index.scan(str(out))[0] if "_row" in r]
        return {r["_path"]: repr(r["_row"][NAMES.index("loss_curve")]) for r in found}

    first = curves()
    with sqlite3.connect(out / index.FILE_NAME) as db:
        db.execute("UPDATE results SET curve = zeroblob(length(curve)) WHERE curve IS NOT NULL")
    assert curves() == first and "0.0, 0.0, 0.0" not in str(first)
    with sqlite3.connect(out / index.FILE_NAME) as db:  # the curve and its digest edited together: the seal says
        for key, curve in db.execute("SELECT path, curve FROM results WHERE curve IS NOT NULL").fetchall():
            forged = bytes(len(curve))
            db.execute("UPDATE results SET curve = ?, curve_digest = ? WHERE path = ?",
                       (forged, index._digest(forged), key))
    assert curves() == first


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("terminal", [False, True], ids=["a log", "a terminal"])
def test_a_report_that_reads_many_files_anew_says_how_many_once_and_draws_bars_on_a_terminal_only(
        tmp_path, monkeypatch, terminal):
    out = _copy(FOLDERS[0], tmp_path)
    many, walked = len(list(out.rglob("result.json"))), 1 + sum(p.is_dir() for p in out.rglob("*"))
    monkeypatch.setattr(progress, "PROGRESS_MIN", many)
    monkeypatch.setattr(progress, "BAR_DELAY_S", 0)  # each phase past it, however short
    said, counted = _Terminal() if terminal else io.StringIO(), {}

    class Counted(progress.tqdm):
        def close(self):
            counted[self.desc] = self.n  # what it counted, by update() or as an iterable's wrapper
            return super().close()

    monkeypatch.setattr("sys.stderr", said)
    monkeypatch.setattr(progress, "tqdm", Counted)
    index.scan(str(out))
    # each folder listed (nothing kept: index.read lists them all) and each file read, counted once; in a log no bar
    assert counted == ({"listing": walked, "index": 0, "reading": many} if terminal else {})  # the index new: empty
    note = (f"benchmark.py: note: reading {many:,} result files whole: neither the folder's index nor your last "
            "report holds a reading of them this report can use\n")
    text = said.getvalue()
    assert text.count(note) == 1 and (text == note if not terminal else
                                      "listing:" in text and f"reading:   0%|          | 0/{many} [" in text), text
    if terminal:  # the index read row by row (nothing kept between reports here), each row counted
        counted.clear()
        index.scan(str(out))
        assert counted == {"listing": walked, "index": many}
    monkeypatch.setattr(progress, "BAR_DELAY_S", 2)
    for again in ("unchanged", "one more past the bar"):
        monkeypatch.setattr(progress, "PROGRESS_MIN", 1 if again == "unchanged" else many + 1)
        said.seek(0), said.truncate()
        if again != "unchanged":
            (out / index.FILE_NAME).unlink()
        index.scan(str(out))
        assert said.getvalue() == "", again  # nothing read anew, or fewer than PROGRESS_MIN; no phase of 2 s
