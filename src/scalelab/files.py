"""The one way scalelab reads a file a user or a run left behind, and the one way it writes one.

Reading (`read_bytes`, `read_text`, `walk`): a regular file only (a FIFO would block forever, a device such as
/dev/zero never ends, a socket or a folder is no file); a symlink only where it stays inside the folder being read
(`root`); opened without blocking and checked again once open (the name may have changed in between); at most
LIMITS[kind] bytes (a file above it is refused, not read until memory runs out); within READ_DEADLINE_S (a hung
network filesystem). What is refused raises Refused, one line naming why; `walk` names every folder it cannot list
instead of passing it by.

Writing (`atomic_write_bytes`, `atomic_write_text`, `atomic_write_json`): into a temporary file beside the target,
flushed to disk, then renamed over it, so no reader ever sees half a file; never over something that is not a
regular file (a FIFO, a device, a symlink, a folder: NotAFile, an OSError); a failure (a full disk) names the file
in one line. Torch-free: every reader and writer of the package imports it.
"""

import concurrent.futures
import contextlib
import errno
import gc
import json
import math
import os
import re
import secrets
import stat
import threading
import time
from typing import Optional

from scalelab.errors import ResultError

MiB = 2**20
# The most a file of each kind may hold (bytes). A result: make demo's GPT at 2 ranks is about 110 KB; 8 ranks of a
# 100,000-step run about 60 MB. A log: a week of NCCL_DEBUG=INFO. A run's metrics.csv: a row per step. What a
# report keeps for the next (report/kept.py): 100,000 results' is about 100 MB.
LIMITS = {"result": 128 * MiB, "summary": 16 * MiB, "log": 256 * MiB, "metrics": 64 * MiB, "reference": 4 * MiB,
          "config": 4 * MiB, "kept reading": 4096 * MiB, "mount table": 16 * MiB}
READ_DEADLINE_S = 30.0  # one file's read, start to end


class Refused(ResultError):
    """A file scalelab will not read: its kind, its size, where it leads; the message says which."""


class NotAFile(OSError):
    """A path scalelab will not write over (a FIFO, a device, a symlink, a folder): an OSError naming the path, as
    a full disk is, so every writer's caller says it in one line."""


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str, root=None) -> os.stat_result:
    """The file's own stat where `path` is a regular file (or a symlink to one inside `root`), else Refused."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Refused(f"unreadable ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if root is not None and os.path.commonpath([target, os.path.realpath(root)]) != os.path.realpath(root):
            raise Refused(f"a symlink out of the folder (to {target})")
        try:
            st = os.stat(path)
        except OSError as exc:
            raise Refused(f"a broken symlink ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{_kind_of(st.st_mode)}, not a file")
    return st


def read_bytes(path: str, kind: str, root=None, head=None) -> bytes:
    """The whole of a regular file of `kind` (LIMITS), or Refused saying why not (see the module's docstring);
    head: only its first `head` bytes (a sniff of what it is), whatever its size."""
    limit = LIMITS[kind]
    st = check_regular(path, root)
    if st.st_size > limit and head is None:
        raise Refused(f"{st.st_size / MiB:.1f} MiB, more than a {kind} file holds ({limit / MiB:.0f} MiB)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Refused(f"unreadable ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the check and the open
            raise Refused("not a regular file once opened")
        if head is not None:
            return _read_within(fd, head, READ_DEADLINE_S, exact=False)
        return _read_within(fd, limit, READ_DEADLINE_S)
    finally:
        os.close(fd)


def _read_within(fd: int, limit: int, seconds: float, exact: bool = True) -> bytes:
    """Up to limit + 1 bytes of fd (exact: more than `limit` is Refused; else the first `limit`), read by the reader
    thread, waited for at most `seconds`. A read that does not return (a hung network filesystem) is left to its
    thread, and the next file gets a thread of its own."""
    global _reader
    with _reader_lock:
        if _reader is None:
            _reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="scalelab-read")
        pending = _reader.submit(_read_fd, fd, limit)
    try:
        data = pending.result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        with _reader_lock:
            _reader.shutdown(wait=False)
            _reader = None
        raise Refused(f"not read within {seconds:g} s (a hung filesystem?)") from None
    except OSError as exc:
        raise Refused(f"unreadable ({exc.strerror})") from None
    if len(data) > limit:
        if not exact:
            return data[:limit]
        raise Refused(f"grew past what a file of its kind holds ({limit / MiB:.0f} MiB) while it was read")
    return data


def _read_fd(fd: int, limit: int) -> bytes:
    """Up to limit + 1 bytes of fd: a file that stays the size it was, in one buffer of its size (at least 64 KiB: a
    /proc table says 0) and never joined (a kept reading of 100 MB held once, not twice); then the read that finds
    its end, and 8 MiB reads where it grew."""
    chunks, left, size = [], limit + 1, max(os.fstat(fd).st_size + 1, 64 * 1024)
    while left > 0:
        chunk = os.read(fd, min(left, size if not chunks else 8 * MiB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


_reader, _reader_lock = None, threading.Lock()


def read_text(path: str, kind: str, root=None, head=None) -> str:
    """read_bytes as text: UTF-8, a byte that is not UTF-8 shown as U+FFFD (a log's stray bytes stay readable)."""
    return read_bytes(path, kind, root, head).decode("utf-8", "replace")


def walk(root: str, unlisted: list, listing: Optional[list] = None, known: Optional[dict] = None,
         keep: Optional[dict] = None):
    """os.walk(root) in sorted order, never into a symlinked folder; each folder it cannot list is appended to
    `unlisted` as (path, why), never passed by in silence. listing: root's walk as `listing` kept it, replayed.
    The folders yielded are to read, not to prune: the walk goes into those it listed. known: folders as an earlier
    walk kept them (keep's), each listed again only where its identity changed; keep: each folder's listing and
    identity put there (below root: "" is root) where it holds no link (None for its identity where it changed
    within RACY_NS: listed again next time)."""
    if listing is not None:
        for folder, names, why in listing:
            if names is None:
                unlisted.append((folder, why))
            else:
                yield folder, [], list(names)  # each reader its own list, as a walk of its own gives
        return

    stack, started = [root], time.time_ns()  # os.walk's order (a folder, then each of its folders' trees, by name),
    while stack:  # without its lstat of every folder (its entry says whether it is a symlink): 100,000 folders in
        folder = stack.pop()  # 1.2 s, not 1.5 s; 0.4 s where an earlier walk's listings hold (known)
        st, below = None, folder[len(root):]
        if keep is not None:  # its identity before its names: a folder changed in between is listed again next time
            try:
                st = os.stat(folder)
            except OSError as exc:
                unlisted.append((exc.filename or folder, f"cannot be listed ({exc.strerror})"))
                continue
            was = known.get(below) if known else None
            if was is not None and was[0] == identity(st):
                keep[below] = was
                yield folder, list(was[1]), list(was[2])
                if was[3]:  # one join a folder with folders in it, not one a name (100,000 names: 0.2 s)
                    inside = os.path.join(folder, "")
                    stack += [inside + name for name in reversed(was[3])]
                continue
        try:
            dirs, names, into, plain = _list(folder)
        except OSError as exc:
            unlisted.append((exc.filename or folder, f"cannot be listed ({exc.strerror})"))
            continue
        if st is not None and plain:  # a link's target may change, its folder not: no listing kept of a folder
            # with a link. One changed lately may change again within its clock's tick, its stamps as they were
            # (nanosecond digits advance a tick of 1-10 ms on kernels before 6.13; a new result's folder caught
            # between mkdir and rename would hide the result for good): kept under no identity, listed again
            lately = changed_lately(st.st_mtime_ns, st.st_ctime_ns, started)
            keep[below] = None if lately else identity(st), tuple(dirs), tuple(names), tuple(into)
        yield folder, dirs, names
        if into:
            inside = os.path.join(folder, "")
            stack += [inside + name for name in reversed(into)]


# Filesystems whose folder's times change whenever a name in it is added, removed or renamed (POSIX's rule): the
# kernel's own, NFS, and a cluster's parallel ones. A listing kept from an earlier walk is trusted only on these; on
# any other (a FUSE mount of an object store, whose folder times may be the mount's) every folder is listed again.
FOLDER_TIMES_HOLD = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "overlay", "nfs",
                               "nfs4", "lustre", "gpfs", "beegfs", "ceph"})
MOUNT_TABLE = "/proc/self/mountinfo"


def folder_times_hold(path: str) -> bool:
    """Whether every filesystem under path is one of FOLDER_TIMES_HOLD (mount_types of the mount table for its real
    path); False where the table cannot be read (not Linux) or names none."""
    try:  # its paths as os.fsdecode gives them, as realpath's are (a name not in UTF-8 matches its own)
        table = os.fsdecode(read_bytes(MOUNT_TABLE, "mount table"))
    except Refused:
        return False
    kinds = mount_types(table, os.path.realpath(path))
    return bool(kinds) and kinds <= FOLDER_TIMES_HOLD


def mount_types(table: str, path: str) -> set:
    """The filesystem types a walk of `path` (absolute, real) may meet, from a mountinfo table: each mount at the
    deepest mount point above it (one mounted over another: both, in whichever order the table lists them) and each
    mount below it."""
    above, below, depth = {}, set(), -1
    for line in table.split("\n"):  # the kernel escapes only space, tab, newline and backslash: a name may hold \f
        mount, sep, after = line.partition(" - ")
        fields = mount.split(" ")
        if not sep or len(fields) < 5 or not after:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040: a space
        kind = after.split(" ")[0]
        if path == point or path.startswith(point.rstrip("/") + "/"):
            above.setdefault(point, set()).add(kind)
            depth = max(depth, len(point))
        elif point.startswith(path.rstrip("/") + "/"):
            below.add(kind)
    return below.union(*(kinds for point, kinds in above.items() if len(point) == depth))


def _list(folder: str) -> tuple:
    """(its folders, its other names, the folders to walk into: not symlinks; whether none is a link or unknown),
    each sorted: one scandir, its entries' types as the folder gives them (no stat each)."""
    dirs, names, into, plain = [], [], [], True
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:  # os.walk's rule: not a folder to it
                is_dir, plain = False, False
            try:
                linked = entry.is_symlink()
            except OSError:  # os.walk's islink: False where it cannot tell
                linked, plain = False, False
            plain = plain and not linked
            if not is_dir:
                names.append(entry.name)
            else:
                dirs.append(entry.name)
                if not linked:
                    into.append(entry.name)  # sorted as folder/name is
    return sorted(dirs), sorted(names), sorted(into), plain


def identity(st) -> tuple:
    """What says a file or folder changed: size, mtime, ctime and inode (as text: an overlay's inode passes SQLite's
    int64)."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, str(st.st_ino)


def racy(st, started: int) -> bool:
    """Whether a file or folder could change after `started` without its identity changing (git's "racily clean"):
    its stamps are whole milliseconds or coarser (NFSv3, ext3, a Lustre's seconds) and it changed within RACY_NS
    before (or after: another machine's clock). Such a one is not kept as read: read again next time."""
    _, mtime, ctime, _ = identity(st)
    return mtime % 10**6 == 0 and ctime % 10**6 == 0 and changed_lately(mtime, ctime, started)


def changed_lately(mtime: int, ctime: int, started: int) -> bool:
    """Whether stamps (ns) changed within RACY_NS before `started` (or after it: another machine's clock)."""
    return started - max(mtime, ctime) < RACY_NS


RACY_NS = 2 * 10**9  # a coarse stamp's tick (a second) and a margin: racy


@contextlib.contextmanager
def gc_set_aside():
    """One report's results kept apart from the cyclic garbage collector; yields `set_aside`, called once they are
    read. The collector is paused while the folder decodes (100,000 results: millions of objects and no cycle, each
    collection walked them all again); set_aside freezes what is live (gc.freeze), so the collections the report's
    frames make walk only their own objects (100,000 results: 9.5 s a report, 8.7 s so). At exit nothing stays
    frozen (garbage frozen with them is collected as any other), the collector as it was found. A process that
    froze objects of its own (a host such as ReFrame, a report inside a report) keeps them: nothing is frozen or
    thawed here."""
    was, ours = gc.isenabled(), gc.get_freeze_count() == 0
    gc.disable()

    def set_aside():
        if ours:
            gc.freeze()
        if was:
            gc.enable()

    try:
        yield set_aside
    finally:
        if ours:
            gc.unfreeze()
        if was:
            gc.enable()


def listing(root: str, known: Optional[dict] = None, keep: Optional[dict] = None, counted=None) -> list:
    """One walk of root, kept for each reader of one report (result.json files, nccl-tests logs: 100,000 folders
    walked once): (folder, its file names, None) in walk's order, and (folder, None, why) where it met one it
    could not list. known, keep: walk's (an earlier report's listings, this one's); counted: told each folder."""
    out, unlisted = [], []
    for folder, _, names in walk(root, unlisted, known=known, keep=keep):
        out += [(path, None, why) for path, why in unlisted]
        unlisted.clear()
        out.append((folder, names, None))
        if counted is not None:
            counted.update()
    return out + [(path, None, why) for path, why in unlisted]


# --- writing -----------------------------------------------------------------------------------------------------

def atomic_write_text(path: str, text: str) -> str:
    return atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str, data) -> str:
    """Write to a temporary file in the same folder, fsync, then rename over the target (a regular file or nothing:
    a FIFO, a device, a symlink or a folder there is NotAFile, and stays as it was). data: bytes, or a function
    that writes them into the open file (a large file, never held whole)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else _kind_of(st.st_mode)
        raise NotAFile(errno.EEXIST, f"not written: {what} is there, not a file scalelab replaces", path)
    tmp = synced_temp(folder, data, path)
    try:
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    return path


def synced_temp(folder: str, data, path: str) -> str:
    """data in a new hidden file in folder, on disk (fsync), for a rename to put in place: its path. An error names
    `path`, the file it was for (a full disk names the file it hit); nothing is left behind."""
    tmp = os.path.join(folder, f".tmp-{secrets.token_hex(8)}")
    try:
        # 0666 less the umask, like any file (mkstemp's 0600 would hide results from an instructor or a group)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:  # nothing made: a read-only or full disk, said of the file it was for
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            data(fh) if callable(data) else fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        unlink_quietly(tmp)
        if isinstance(exc, OSError) and exc.errno and exc.filename in (None, tmp):
            raise OSError(exc.errno, exc.strerror, path) from None
        raise
    return tmp


def unlink_quietly(path: str) -> None:
    """Remove a temporary file of our own if it is there; a failure to remove it (gone already, a read-only disk)
    is no error of its own: the caller raises what made it clean up, or has moved the file into place."""
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write_json(path: str, obj) -> str:
    """Strict JSON (RFC 8259), as any reader takes it: a non-finite number (a diverged loss, a zero-time rate) is
    written as null, "not measured", never as NaN or Infinity."""
    return atomic_write_bytes(path, json_bytes(obj))


def json_bytes(obj) -> bytes:
    """obj as atomic_write_json writes it: strict JSON, indented, one newline at the end."""
    return (json.dumps(nan_to_none(obj), indent=1, default=str, allow_nan=False) + "\n").encode()


def nan_to_none(obj):
    """obj with every NaN or infinite float, at any depth, as None (strict JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_none(v) for v in obj]
    return obj
