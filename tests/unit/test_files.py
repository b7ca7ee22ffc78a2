"""The one reader and the one writer (scalelab/files.py), on real files of every kind a folder can hold: each is read
or refused in one line, never waited on, never read without end, never written through."""

import contextlib
import itertools
import os
import stat
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import make_result
from scalelab import files, results
from scalelab.errors import ResultError


def write_result(folder, run_id="r1"):
    folder.mkdir(parents=True, exist_ok=True)
    results.atomic_write_json(str(folder / "result.json"), make_result(run_id, 1))
    return folder / "result.json"


def scan_within(root, seconds=20):
    """results.scan on another thread, waited for at most `seconds`: a reader that blocks fails here, not hangs."""
    got = []
    worker = threading.Thread(target=lambda: got.append(results.scan(str(root))), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "the scan blocked"
    return got[0]


def test_a_fifo_named_result_json_is_named_and_never_opened(tmp_path):
    """Opening a FIFO for reading waits for a writer: the report hung for good, with no output."""
    write_result(tmp_path / "good")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "result.json")
    found, skipped = scan_within(tmp_path)
    assert [r["run_id"] for r in found] == ["r1"]
    assert skipped == [(str(tmp_path / "fifo" / "result.json"), "a FIFO, not a file")]


def test_a_result_linked_to_a_device_or_out_of_the_folder_is_refused(tmp_path):
    """/dev/zero never ends (read until memory ran out, then a MemoryError traceback); a link out of the folder
    reads what the folder's owner did not put there."""
    outside = write_result(tmp_path / "elsewhere")
    root = tmp_path / "outputs"
    write_result(root / "good")
    for name, target in (("zero", "/dev/zero"), ("out", str(outside))):
        (root / name).mkdir()
        os.symlink(target, root / name / "result.json")
    (root / "in").mkdir()
    os.symlink(root / "good" / "result.json", root / "in" / "result.json")  # inside the folder: read
    found, skipped = scan_within(root)
    assert sorted(r["_path"] for r in found) == [str(root / "good" / "result.json"), str(root / "in" / "result.json")]
    assert dict(skipped) == {str(root / "out" / "result.json"): f"a symlink out of the folder (to {outside})",
                             str(root / "zero" / "result.json"): "a symlink out of the folder (to /dev/zero)"}
    with pytest.raises(files.Refused, match="^a character device, not a file$"):
        files.read_bytes("/dev/zero", "result")  # named directly: still no device


def test_a_folder_named_result_json_and_a_broken_link_are_named(tmp_path):
    (tmp_path / "a" / "result.json").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    os.symlink(tmp_path / "gone", tmp_path / "b" / "result.json")
    _, skipped = scan_within(tmp_path)
    assert dict(skipped)[str(tmp_path / "b" / "result.json")].startswith("a broken symlink")
    with pytest.raises(files.Refused, match="^a folder, not a file$"):
        files.read_bytes(str(tmp_path / "a" / "result.json"), "result")


def test_a_file_larger_than_its_kind_holds_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = write_result(tmp_path / "big")
    monkeypatch.setitem(files.LIMITS, "result", os.path.getsize(path) - 1)
    _, skipped = scan_within(tmp_path)
    assert len(skipped) == 1 and "more than a result file holds" in skipped[0][1]
    monkeypatch.setitem(files.LIMITS, "result", os.path.getsize(path))  # exactly the limit: read
    assert len(scan_within(tmp_path)[0]) == 1
    assert files.read_bytes(str(path), "result", head=10) == path.read_bytes()[:10]  # a sniff reads its head only


def test_a_folder_that_cannot_be_listed_is_named_not_passed_by(tmp_path, monkeypatch):
    """As root every folder reads; a listing error (permissions on a shared filesystem, a vanished mount) is made
    here the way os.walk meets it."""
    write_result(tmp_path / "good")
    (tmp_path / "locked").mkdir()
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found, skipped = scan_within(tmp_path)
    assert len(found) == 1 and skipped == [(str(tmp_path / "locked"), "cannot be listed (Permission denied)")]


def test_a_read_that_does_not_return_is_given_up_after_the_deadline(tmp_path, monkeypatch):
    """A hung network filesystem: the read never returns; the reader gives up in one line and the next file reads."""
    path = write_result(tmp_path / "a")
    release = threading.Event()
    real = files._read_fd

    def hung(fd, limit):
        release.wait(30)
        return real(fd, limit)

    monkeypatch.setattr(files, "_read_fd", hung)
    monkeypatch.setattr(files, "READ_DEADLINE_S", 0.3)
    with pytest.raises(files.Refused, match=r"^not read within 0.3 s \(a hung filesystem\?\)$"):
        files.read_bytes(str(path), "result")
    monkeypatch.setattr(files, "_read_fd", real)
    assert files.read_bytes(str(path), "result") == path.read_bytes()  # a fresh reader thread
    release.set()


@pytest.mark.parametrize("kind", ["fifo", "symlink", "folder"])
def test_a_write_never_goes_through_what_is_not_a_regular_file(tmp_path, kind):
    """The rename would replace a symlink (or the write go where it points), a FIFO would be replaced under its
    reader: refused, and what was there stays."""
    target, elsewhere = tmp_path / "result.json", tmp_path / "elsewhere.txt"
    elsewhere.write_text("keep")
    {"fifo": lambda: os.mkfifo(target), "symlink": lambda: os.symlink(elsewhere, target),
     "folder": lambda: target.mkdir()}[kind]()
    before = os.lstat(target).st_mode
    with pytest.raises(files.NotAFile, match=r"not written: (a FIFO|a symlink|a folder) is there") as err:
        files.atomic_write_text(str(target), "{}")
    assert err.value.filename == str(target) and isinstance(err.value, OSError)  # said as a full disk is
    assert os.lstat(target).st_mode == before and elsewhere.read_text() == "keep"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_write_replaces_a_regular_file_whole_and_a_read_refusal_is_a_result_error(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("old")
    files.atomic_write_text(str(path), "new")
    assert path.read_text() == "new" and stat.S_ISREG(os.lstat(path).st_mode)
    assert issubclass(files.Refused, ResultError)  # every reader already says a ResultError in one line


def _unlistable(locked: set):
    """os.scandir, refusing the folders in `locked` as a folder without read permission does (root reads all)."""
    real = os.scandir

    def scandir(path="."):
        if str(path) in locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    return scandir


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.lists(st.tuples(st.lists(st.sampled_from("abc"), min_size=1, max_size=3),
                               st.sampled_from(["result.json", "x.log", "y.txt"]), st.booleans()), max_size=8))
def test_a_kept_listing_replays_the_walk_it_kept(tmp_path_factory, monkeypatch, tree):
    """One walk a report (files.listing): replayed, each reader meets the folders, their files and the folders
    that could not be listed in the walk's own order, as a walk of its own would."""
    root = tmp_path_factory.mktemp("tree")
    locked = set()
    for parts, name, unlisted in tree:
        folder = root.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
        if unlisted:
            locked.add(str(folder))

    def seen(listing):
        events = []
        for folder, _, names in files.walk(str(root), events, listing):
            events.append((folder, names))
        return events

    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", _unlistable(locked))
        assert seen(files.listing(str(root))) == seen(None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.lists(st.tuples(st.lists(st.sampled_from("abc"), min_size=1, max_size=3),
                               st.sampled_from(["result.json", "x.log"]),
                               st.sampled_from(["file", "unlisted", "link to root", "link to a", "dangling"])),
                     max_size=8))
def test_the_walk_is_os_walk_sorted_never_into_a_linked_folder(tmp_path_factory, monkeypatch, tree):
    """files.walk lists a folder with one scandir and no lstat of each folder in it: on trees with folders it
    cannot list, symlinks to folders (a loop to the root among them), to files and to nothing, it yields what
    os.walk yields, dirs and files sorted, its unlisted folders where os.walk meets them."""
    root = tmp_path_factory.mktemp("tree")
    locked = set()
    for parts, name, kind in tree:
        folder = root.joinpath(*parts)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
        link = folder / "lnk"  # no folder is named so: a link never stands where a folder is made
        if kind.startswith(("link", "dangling")) and not os.path.lexists(link):
            os.symlink({"link to root": root, "link to a": root / "a"}.get(kind, root / "nowhere"), link)
        if kind == "unlisted":
            locked.add(str(folder))

    def walked(walk):
        events = []
        for folder, dirs, names in itertools.islice(walk(events), 200):  # a walk into the loop ends, and fails
            events.append((folder, list(dirs), names))
        return events

    def reference(unlisted):
        for folder, dirs, names in os.walk(str(root), onerror=lambda exc: unlisted.append(
                (exc.filename, f"cannot be listed ({exc.strerror})"))):
            dirs.sort()
            yield folder, dirs, sorted(names)

    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", _unlistable(locked))
        assert walked(lambda events: files.walk(str(root), events)) == walked(reference)


def test_a_reports_results_are_set_aside_and_the_collector_left_as_it_was_found_even_after_an_error():
    """gc_set_aside: paused while the results are read, running once they are set aside; at exit, error or not,
    nothing frozen (garbage from before, set aside with them, is collected after) and the collector as it was."""
    import gc
    import weakref

    class Cycle:
        pass

    was = gc.isenabled()
    try:
        for enabled, error, host in itertools.product((True, False), (None, "reading", "after"), (False, True)):
            (gc.enable if enabled else gc.disable)()
            if host:  # a process that froze its own objects before: they stay frozen
                gc.freeze()
            before = Cycle()
            before.me, gone = before, weakref.ref(before)
            del before  # garbage only the collector frees
            with contextlib.suppress(ResultError), files.gc_set_aside() as set_aside:
                assert not gc.isenabled()
                if error == "reading":
                    raise ResultError("a folder that failed to read")
                set_aside()
                assert gc.get_freeze_count() > 0 and gc.isenabled() is enabled
                if error == "after":
                    raise ResultError("a frame that failed")
            assert (gc.get_freeze_count() > 0) is host and gc.isenabled() is enabled, (enabled, error, host)
            gc.unfreeze()
            gc.collect()
            assert gone() is None
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
