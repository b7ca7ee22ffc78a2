"""What a report keeps for the next (report/kept.py): the next reads what the files say whatever changed between,
takes nothing it did not seal, and writes only what changed."""

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import ROOT, two_reports_at_once
from scalelab import files, results
from scalelab.report import index, kept, progress

SOURCE = ROOT / "tests" / "data" / "demo-results"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test its own cache; a folder changed just now kept as any other (its stamps here are the kernel's
    nanoseconds: test_a_folder_changed_lately_is_listed_again is the rule for the clocks that tick)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "RACY_NS", 0)


def _copy(tmp_path, name="out"):
    shutil.copytree(SOURCE, tmp_path / name, ignore=shutil.ignore_patterns(index.FILE_NAME + "*"))
    return tmp_path / name


def _truth(out) -> tuple:
    """What a read of every file gives, as index.scan gives it (training results light)."""
    found, skipped = results.scan(str(out))
    return [{**index.light(r), "_path": r["_path"]} for r in found], sorted(skipped)


def _through_kept(out) -> tuple:
    found, skipped, _ = index.read(str(out))
    return found, sorted(skipped)


def _parses(monkeypatch) -> list:
    parsed, real = [], index._parse
    monkeypatch.setattr(index, "_parse", lambda path, root: parsed.append(path) or real(path, root))
    return parsed


def _results(out) -> list:
    return sorted(p for p in out.rglob("result.json") if p.is_file() and not p.is_symlink())


def _change(out, how: str, pick: int, step: int) -> None:
    """One thing a folder of results meets between two reports."""
    paths = _results(out)
    path = paths[pick % len(paths)] if paths else None
    if how == "add" or path is None:
        (out / f"new-{step}").mkdir()
        shutil.copy(_results(SOURCE)[pick % len(_results(SOURCE))], out / f"new-{step}" / "result.json")
    elif how == "add into a folder read before":  # its folder's listing changes, not its parent's
        (path.parent / f"again-{step}").mkdir()
        shutil.copy(path, path.parent / f"again-{step}" / "result.json")
    elif how == "rewrite":  # same size, new content: a digit of its run id
        text = path.read_text()
        at = text.find('"run_id": "') + 11 if '"run_id": "' in text else 0
        path.write_text(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1:])
    elif how == "delete":
        path.unlink()
    elif how == "corrupt":
        path.write_text("{not json")
    elif how == "a folder where it was":
        path.unlink()
        path.mkdir()
    elif how == "a link to another":  # inside the folder: read as the file it leads to
        (out / f"link-{step}").mkdir()
        os.symlink(paths[(pick + 1) % len(paths)], out / f"link-{step}" / "result.json")
    elif how == "rename its folder":  # the file keeps its identity under another name
        path.parent.rename(path.parent.with_name(path.parent.name + f"-moved{step}"))
    elif how == "another file beside":
        (path.parent / "notes.txt").write_text("not a result")
    elif how == "the index removed":
        (out / index.FILE_NAME).unlink(missing_ok=True)


CHANGES = ["add", "add into a folder read before", "rewrite", "delete", "corrupt", "a folder where it was",
           "a link to another", "rename its folder", "another file beside", "the index removed"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 50)), min_size=1, max_size=4))
def test_each_report_reads_what_the_files_say_whatever_changed_since_the_last(tmp_path_factory, steps):
    """Any sequence of changes between reports: each reads what a read of every file gives; a report after no
    change parses none but the results reached through a link."""
    tmp = tmp_path_factory.mktemp("kept")
    out = _copy(tmp)
    os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")
    assert _through_kept(out) == _truth(out)
    for step, (how, pick) in enumerate(steps):
        _change(out, how, pick, step)
        assert _through_kept(out) == _truth(out), (how, step)
    with pytest.MonkeyPatch.context() as mp:
        parsed = _parses(mp)
        assert _through_kept(out) == _truth(out) and all(os.path.islink(p) for p in parsed)  # a link's: each time


def test_a_report_after_no_change_reads_no_file_and_no_index_row(tmp_path, monkeypatch, capsys):
    out = _copy(tmp_path)
    monkeypatch.setattr(progress, "PROGRESS_MIN", 1)  # each file read anew counted aloud
    first = _through_kept(out)
    assert f"reading {len(list(out.rglob('result.json')))} result files whole" in capsys.readouterr().err
    parsed = _parses(monkeypatch)
    monkeypatch.setattr(index, "_kept", lambda *a, **k: pytest.fail("the index read row by row"))
    assert _through_kept(out) == first and parsed == []
    assert capsys.readouterr().err == ""  # none read anew: none counted


def _wholes(tmp_path) -> list:
    folder = tmp_path / "cache" / "scalelab" / "kept"
    return sorted(p for p in folder.iterdir() if "." not in p.name) if folder.is_dir() else []


@pytest.mark.parametrize("damage", ["a byte changed", "torn", "another key's", "another scalelab's",
                                    "another folder's"])
def test_a_kept_reading_not_sealed_for_this_scalelab_and_folder_is_never_used(tmp_path, monkeypatch, damage):
    """The report reads what the files say, and parses them again: nothing is taken from such a copy."""
    out, other = _copy(tmp_path), _copy(tmp_path, "other")
    _through_kept(out)
    _through_kept(other)
    whole = next(p for p in _wholes(tmp_path) if p.name == kept._where(str(out))[0].rsplit("/", 1)[1])
    raw = whole.read_bytes()
    if damage == "a byte changed":
        whole.write_bytes(raw[:-10] + bytes([raw[-10] ^ 1]) + raw[-9:])
    elif damage == "torn":
        whole.write_bytes(raw[: len(raw) // 2])
    elif damage == "another key's":
        (tmp_path / "cache" / "scalelab" / "index.key").write_bytes(os.urandom(32))
        kept.sealing._key_at.cache_clear()
    elif damage == "another scalelab's":
        monkeypatch.setattr(index, "code_version", lambda: "another")
    else:  # the other folder's reading, under this folder's name
        shutil.copy(kept._where(str(other))[0], whole)
    (out / "gone").mkdir()  # the index alone would not say so: a kept listing taken as it was would hide it
    shutil.copy(_results(out)[0], out / "gone" / "result.json")
    monkeypatch.setattr(index, "_kept", lambda *a, **k: ({}, set()))  # and none of it from the index: the files
    parsed = _parses(monkeypatch)
    assert _through_kept(out) == _truth(out)
    assert len(parsed) == len(_results(out))


def test_little_changed_writes_a_delta_and_much_the_whole_again(tmp_path, monkeypatch):
    out = _copy(tmp_path)
    monkeypatch.setattr(kept, "DELTA_MIN", 4)  # a result added: its entry, its folder and the root
    monkeypatch.setattr(kept, "DELTA_SHARE", 0)
    _through_kept(out)
    whole, = _wholes(tmp_path)
    before = whole.read_bytes()
    _through_kept(out)  # the index written in the folder changed its listing: a delta of that
    delta = os.stat(f"{whole}.delta").st_mtime_ns
    _through_kept(out)
    assert os.stat(f"{whole}.delta").st_mtime_ns == delta  # nothing changed since: nothing written
    _change(out, "add", 0, 0)
    assert _through_kept(out) == _truth(out)
    assert whole.read_bytes() == before and os.path.exists(f"{whole}.delta")
    for step in (1, 2):
        _change(out, "add", step, step)
    assert _through_kept(out) == _truth(out)
    assert whole.read_bytes() != before and not os.path.exists(f"{whole}.delta")


def test_a_disk_that_fills_as_the_whole_is_written_leaves_the_one_before_as_it_was(tmp_path, monkeypatch):
    """The whole is pickled into its file as it is sealed (never held whole): a write that fails part-way (a full
    disk) leaves the whole before it, byte for byte, and no temporary file; the next report reads it."""
    out = _copy(tmp_path)
    _through_kept(out)
    whole, = _wholes(tmp_path)
    before, writes = whole.read_bytes(), []

    class Full:  # the seal's place written, the disk full as the pickle's first frame comes
        def __init__(self, fh, sealed):
            self.fh = fh

        def write(self, data):
            writes.append(self.fh.tell())
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(kept, "_Sealed", Full)
    monkeypatch.setattr(kept, "DELTA_MIN", 0)  # a result added: the whole written again, not a delta
    monkeypatch.setattr(kept, "DELTA_SHARE", 0)
    _change(out, "add", 0, 0)
    assert _through_kept(out) == _truth(out)  # the report goes on from what it read
    assert writes == [kept._SEAL_SIZE] and whole.read_bytes() == before
    assert not [p for p in whole.parent.iterdir() if p.name.startswith(".tmp-")]
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert kept.load(str(out), index.code_version()).entries  # still sealed: taken by the next report


def test_the_readings_of_the_folders_reported_on_last_are_kept_the_rest_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "KEEP_FOLDERS", 2)
    folders = [_copy(tmp_path, f"f{i}") for i in range(4)]
    for i, out in enumerate(folders):
        _through_kept(out)
        os.utime(kept._where(str(out))[0], ns=(i * 10**9, i * 10**9))  # in turn, a second apart
    assert [p.name for p in _wholes(tmp_path)] == sorted(kept._where(str(f))[0].rsplit("/", 1)[1]
                                                         for f in folders[2:])


def test_the_readings_kept_are_the_newest_that_fit_in_keep_bytes_and_the_newest_always(tmp_path, monkeypatch):
    """A budget in bytes, not a count alone: a site's 100 MB reading outlived 8 small folders' reports, then was
    dropped (its next report read 100,000 rows again: 20 s, not 6)."""
    folders = [_copy(tmp_path, f"f{i}") for i in range(4)]
    for i, out in enumerate(folders[:2]):
        _through_kept(out)
        os.utime(kept._where(str(out))[0], ns=(i * 10**9, i * 10**9))
    sizes = [os.path.getsize(kept._where(str(f))[0]) for f in folders[:2]]
    monkeypatch.setattr(kept, "KEEP_BYTES", sum(sizes) + sizes[0] // 2)  # two fit, a third does not
    for i, out in enumerate(folders[2:], start=2):
        _through_kept(out)
        os.utime(kept._where(str(out))[0], ns=(i * 10**9, i * 10**9))
    assert [p.name for p in _wholes(tmp_path)] == sorted(kept._where(str(f))[0].rsplit("/", 1)[1]
                                                         for f in folders[2:])
    monkeypatch.setattr(kept, "KEEP_BYTES", 1)  # none fits: the newest is kept all the same
    _change(folders[0], "add", 0, 0)
    _through_kept(folders[0])
    assert [p.name for p in _wholes(tmp_path)] == [kept._where(str(folders[0]))[0].rsplit("/", 1)[1]]


def test_nothing_is_kept_without_a_private_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(kept.sealing, "row_key", lambda: None)
    out = _copy(tmp_path)
    assert _through_kept(out) == _truth(out) and _wholes(tmp_path) == []


def test_a_folder_s_listing_is_kept_only_where_a_later_change_would_show_in_its_identity(tmp_path):
    """A folder holding a link is listed each time (its target may change, its folder not); the rest are kept,
    and a walk with them gives what a walk without them gives."""
    out = _copy(tmp_path)
    (out / "linked").mkdir()
    os.symlink(_results(out)[0], out / "linked" / "result.json")
    keep = {}
    walked = list(files.walk(str(out), [], keep=keep))
    assert "/linked" not in keep and "" in keep and len(keep) == len(walked) - 1
    again = {}
    assert list(files.walk(str(out), [], known=keep, keep=again)) == walked and again == keep
    (out / "linked" / "x").mkdir()
    assert list(files.walk(str(out), [], known=keep, keep={})) == list(files.walk(str(out), []))


def test_results_read_through_what_was_kept_give_the_same_report(tmp_path):
    """The report itself (tables, track record, warnings): from the files, then twice as kept, then one result
    added."""
    from test_index import _report

    out = _copy(tmp_path)
    said = [_report(out, *args) for args in (["--no_index"], [], [])]
    assert said[0][0] == 0 and said[0] == said[1] == said[2]
    _change(out, "add", 3, 0)
    assert _report(out) == _report(out, "--no_index")


def test_two_reports_at_once_leave_what_the_next_reads_sound(tmp_path):
    """Two reports at a time, twice, a result added between: each prints what the files say, and the next reads
    what a read of every file gives (a delta written against a whole another report replaced is never applied)."""
    out = _copy(tmp_path)
    for step in range(2):
        two_reports_at_once(out, {"XDG_CACHE_HOME": str(tmp_path / "cache")})
        _change(out, "add", step, step)
    assert _through_kept(out) == _truth(out)


def test_a_result_reached_through_a_link_is_read_each_time(tmp_path):
    """A link's target moved out of the folder and a link put where it was: the file's identity is the same, but
    a read of it now refuses it (a symlink out of the folder); so does the report (the reviewer's case)."""
    out = _copy(tmp_path)
    path = _results(out)[0]
    (out / "store").mkdir()
    path.rename(out / "store" / "r.json")
    os.symlink(out / "store" / "r.json", path)
    assert _through_kept(out) == _through_kept(out) == _truth(out)
    (out / "store").rename(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", out / "store")
    found, skipped = _through_kept(out)
    assert (found, skipped) == _truth(out) and "a symlink out of the folder" in skipped[0][1]


def test_a_folder_changed_lately_is_listed_again(tmp_path, monkeypatch):
    """A folder whose stamps did not move (a clock's tick of 1-10 ms: one result's mkdir and rename within it) is
    listed again while it changed within RACY_NS of the walk, and so its new result is read."""
    monkeypatch.setattr(files, "RACY_NS", 2 * 10**9)
    out = _copy(tmp_path)
    (out / "late").mkdir()
    monkeypatch.setattr(files, "identity", lambda st: (0, 0, 0, str(st.st_ino)))  # stamps as a tick leaves them
    assert _through_kept(out) == _truth(out)
    shutil.copy(_results(SOURCE)[0], out / "late" / "result.json")
    assert _through_kept(out) == _truth(out)


def test_a_delta_or_a_temporary_file_left_behind_is_removed_with_the_prune(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "KEEP_FOLDERS", 1)
    first, second = _copy(tmp_path, "first"), _copy(tmp_path, "second")
    _through_kept(first)
    folder = tmp_path / "cache" / "scalelab" / "kept"
    (folder / "0123.delta").write_bytes(b"its whole gone")
    (folder / ".tmp-old").write_bytes(b"a report stopped half-way")
    (folder / ".tmp-now").write_bytes(b"a report writing now")
    os.utime(folder / ".tmp-old", (0, 0))
    _through_kept(second)
    assert sorted(p.name for p in folder.iterdir()) == sorted([".tmp-now", kept._where(str(second))[0].rsplit(
        "/", 1)[1]])


@pytest.mark.parametrize("kind, trusted", [("ext4", True), ("fuse.s3fs", False), ("fuse.s3fs below", False),
                                           ("no table", False)])
def test_a_kept_listing_is_trusted_only_where_the_filesystem_moves_folder_times(tmp_path, monkeypatch, kind,
                                                                               trusted):
    """A FUSE mount of an object store may give every folder the mount's time: there (or where no mount table says)
    every folder is listed again, and a result added to a folder read before is read. Trusted (ext4, with the
    stamps frozen here as such a mount would leave them), the kept listing would hide it. A mount below the folder
    (a bucket mounted inside an ext4 folder of results) counts as one at it: the walk goes into it."""
    out = _copy(tmp_path)
    (out / "late").mkdir()
    table = tmp_path / "mountinfo"
    at = os.path.realpath(out / "late" if kind.endswith(" below") else out).replace(" ", "\\040")
    if kind != "no table":
        table.write_text(f"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                         f"99 27 0:50 / {at} rw,nosuid - {kind.split()[0]} bucket rw,user_id=0\n")
    monkeypatch.setattr(files, "MOUNT_TABLE", str(table))
    assert files.folder_times_hold(str(out / "late")) is trusted
    monkeypatch.setattr(files, "identity", lambda st: (0, 0, 0, "0"))
    assert _through_kept(out) == _truth(out)
    shutil.copy(_results(SOURCE)[0], out / "late" / "result.json")
    assert (_through_kept(out) == _truth(out)) is not trusted


def _as_the_kernel_writes(path: bytes) -> bytes:
    """A path as a mountinfo line holds it: space, tab, newline and backslash in octal, every other byte as it is."""
    return b"".join(b"\\%03o" % c if c in b" \t\n\\" else bytes([c]) for c in path)


_NAMES = (st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=12)
          | st.binary(min_size=1, max_size=12).map(os.fsdecode)).filter(lambda n: "/" not in n and "\0" not in n
                                                                          and n not in (".", ".."))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, kind=st.sampled_from(["fuse.s3fs", "xfs"]))
def test_any_folder_name_finds_its_own_mount(tmp_path, monkeypatch, name, kind):
    """Whatever a mount point's name holds (a form feed, U+2028, a byte not in UTF-8, a backslash), the folder
    below it meets that mount: the table's lines are split at newlines alone (splitlines cut at \\f and \\x85)
    and its paths decoded as the filesystem's names are (read as text, a byte not in UTF-8 matched nothing)."""
    point = os.fsencode(f"/scalelab-no-such-mount/{name}")
    table = tmp_path / "mountinfo"
    table.write_bytes(b"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                      b"99 27 0:50 / " + _as_the_kernel_writes(point) + b" rw - " + kind.encode() + b" dev rw\n")
    monkeypatch.setattr(files, "MOUNT_TABLE", str(table))
    below = os.fsdecode(point + b"/results")
    assert files.mount_types(os.fsdecode(table.read_bytes()), below) == {kind}
    assert files.folder_times_hold(below) is (kind == "xfs")


@pytest.mark.parametrize("path, kinds", [
    ("/data/runs/x", {"lustre"}),          # the deepest mount above it
    ("/data", {"lustre"}),                 # the mount point itself
    ("/database/x", {"ext4"}),             # /data is not above /database: whole names only
    ("/scratch/a b/c", {"fuse.s3fs"}),     # \040 in the table is a space
    ("/home/u", {"ext4", "nfs4"}),         # one mounted over another: either may be the one seen
    ("/srv/deep/er", {"xfs"}),             # deeper listed before shallower
    ("/srv", {"tmpfs", "xfs"}),            # and a mount below it, which the walk enters
    ("/", {"ext4", "xfs", "tmpfs", "lustre", "fuse.s3fs", "nfs4"}),
])
def test_a_walk_meets_the_mounts_at_its_folder_and_below_it(path, kinds):
    table = "\n".join([
        "40 27 0:40 / /srv/deep rw - xfs /dev/sdb rw",
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw",  # the root after its children, as a kernel may list it
        "41 27 0:41 / /srv rw - tmpfs tmpfs rw",
        "42 27 0:42 / /data rw shared:1 - lustre 10.0.0.1@o2ib:/fs rw",
        "43 27 0:43 / /scratch/a\\040b rw - fuse.s3fs s3fs rw",
        "45 44 0:45 / /home rw - nfs4 server:/home rw",
        "44 27 0:44 / /home rw - ext4 /dev/sdc rw",
        "a line without its separator",
    ])
    assert files.mount_types(table, path) == kinds
