"""An index of a folder's results: each file parsed once, then only new or changed ones; the JSON stays the truth.

`<output_dir>/.scalelab-index.sqlite` holds, per result.json, what the report reads of it: a training result's
runs-frame row (report/columns.py, computed from the whole file; its loss curve as packed doubles beside) and the
few fields that tell a requeued job's attempts apart; a benchmark's result as the report reads it (its rows, not
its environment); a file that was skipped, with its one line. A file is read again when its size, mtime, ctime or
inode changed (its content's hash is kept beside, for what was read); one changed within a coarse filesystem's tick
of the report is not indexed yet (files.racy); a file gone is dropped. The per-step lists and rank records stay in the
JSON, read only by what draws them (--plot's step timelines, --trace: `full`).

SQLite (the standard library's): a file updated in place, a row per result, one transaction per report; a second
report at once waits for the first's transaction (busy timeout) and never sees half of one; a full disk or a
read-only folder rolls the update back and the report goes on from what it read. An index that is missing, not a
database, or from another scalelab (the digest of its code: any change to what a row is computed from) is rebuilt
from the files. Parquet was the other candidate: it rewrites a whole file to add one row.

A row is stored as the report shows it (as_read: secrets redacted, control characters escaped) and sealed with a
key of the user's own (report/sealing.py), over this scalelab's version, the row's path, its file's identity and
digest, what it says (report/stored.py) and its loss curve's digest: a row this scalelab sealed for this user is
shown as stored. Any other (a hand edit, a row moved, no key to be had, another user's row in a shared folder) is
read from its file again, checked as a file is: a row holds no check of its own, and one with a text where a number
belongs ended the report in a traceback. Seals are kept per user (`seals`), each over its whole row: a row the
file gives again as it is stored gets this user's seal beside the others', so users who report on one folder in turn
(a site's nightly job and its staff) each read the files once, not each time after the other; a row that changed
leaves the others' seals holding for nothing (their next report reads that file).

Reading 100,000 rows one by one (fetch, seal, decode) takes about 5 s; so each report also keeps what it read,
whole, for this user's next (report/kept.py: read), which then looks up only the files that are new or changed
since, and the index row by row only where it has nothing kept (or more than kept.DELTA_MIN changed).
"""

import contextlib
import errno
import functools
import hashlib
import os
import pathlib
import sqlite3
import stat
import sys
import time

from scalelab import __version__, files, results
from scalelab.errors import ResultError
from scalelab.report import kept, progress, sealing, stored
from scalelab.report.columns import NAMES, Curve, loss_curve
from scalelab.report.frames import run_row

FILE_NAME = ".scalelab-index.sqlite"
_CURVE = NAMES.index("loss_curve")  # a row's loss curve: apart in the index and in what is kept
FORMAT = 5  # the layout of the tables below
BUSY_TIMEOUT_S = 30  # another report's update, waited for
ENVELOPE = ("schema", "schema_version", "kind", "run_id", "created", "status", "error", "slurm")
# what the report reads of a collective benchmark besides its envelope (report/explain.bench_frame), and of its
# config: its environment and versions are left in the file (a third of what 20,000 benchmarks' bodies held)
BENCH, BENCH_CONFIG = ("launch", "config", "rows", "summary", "source"), ("dtype", "collective")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS results (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ctime_ns INTEGER,
                                    ino TEXT, digest TEXT, skipped TEXT, body TEXT, curve BLOB, curve_digest TEXT);
CREATE TABLE IF NOT EXISTS seals (signer TEXT, path TEXT, seal TEXT, PRIMARY KEY (signer, path)) WITHOUT ROWID;
"""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The index's format and a digest of scalelab's own source: another scalelab's index is rebuilt, never read."""
    digest = hashlib.blake2b(f"{FORMAT} {__version__}".encode(), digest_size=16)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, names in os.walk(package):
        dirs.sort()
        for name in sorted(n for n in names if n.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as fh:
                digest.update(name.encode() + fh.read())
    return digest.hexdigest()


def light(result: dict) -> dict:
    """What the report keeps of a result: a training run's envelope, its row and its job's identity; a collective
    benchmark's envelope and what the report reads of it (BENCH)."""
    if result.get("kind") != "training":
        body = {k: result[k] for k in (*ENVELOPE, *BENCH) if k in result}
        if isinstance(body.get("config"), dict):
            body["config"] = {k: body["config"][k] for k in BENCH_CONFIG if k in body["config"]}
        return body
    return {**{k: result[k] for k in ENVELOPE if k in result}, "launch": {"world_size": result["launch"]["world_size"]},
            "_row": run_row(result), "_group_key": results.group_key(result)}


def scan(root: str) -> tuple:
    """(results, skipped) as results.scan gives them, training results `light`, read through the index: each file
    parsed only if it is new or changed since the last report. Any trouble with the index reads the files."""
    return read(root)[:2]


def read(root: str) -> tuple:
    """scan's (results, skipped) and root's walk (files.listing, for the report's other readers), each file's reading
    and each folder's listing taken from what the last report kept (report/kept.py) where it still holds, the rest
    through the index; then kept for the next. A result in a folder that holds a link is read from its file each
    time: where a link leads may change while what it leads to stays as it was (moved out of the folder, say)."""
    version, folders, started = code_version(), {}, time.time_ns()
    before = kept.load(root, version)
    if not os.path.lexists(os.path.join(root, FILE_NAME)):
        before.entries = {}  # the index is gone: it is built again from the files, not left empty behind this
    known = before.folders if files.folder_times_hold(root) else None
    with progress.bar("listing", " folders", shown=not known) as counted:  # each folder listed (a cold walk: slow)
        listing = files.listing(root, known, folders, counted)
    skipped = []
    listed, entries, missed = _listed(root, listing, folders, before, skipped)
    gone = before.entries.keys() - entries.keys() - missed.keys()
    where, beside = os.path.join(root, FILE_NAME), _Beside(root)
    whole = not before.entries or len(missed) > kept.DELTA_MIN  # the index read row by row, else a few files read
    try:  # a folder without a result (empty, or not yet run into) is left as it was found
        db = _open(where) if missed or (whole or gone) and os.path.lexists(where) else None
    except files.NotAFile as exc:  # a folder or a link there: each report reads without an index, and says so
        print(f"benchmark.py: note: {exc.filename}: {exc.strerror}; read without it", file=sys.stderr)
        db = None
    except (sqlite3.Error, OSError):
        db = None
    reused, seen = set(entries), {}
    from_index, indexed = _kept(db, {k: st for k, st in missed.items() if st is not None}, root, beside, seen) \
        if db is not None and whole else ({}, gone)
    found, fresh = [], []
    with progress.reading(len(listed) - len(reused) - len(from_index)) as reading:
        for path, key, st in listed:
            if key in reused:
                body, reason = _as_kept(entries[key], path, key, beside)
            elif key in from_index:
                body, reason, digest, curve_digest = from_index.pop(key)  # decoded for this report alone: marked below
                entries[key] = files.identity(st), digest, reason if body is None else _to_keep(body, seen,
                                                                                                 curve_digest)
            else:
                body, reason, digest, lasting = _parse(path, root)
                reading.update()
                if lasting and not files.racy(st, started) and missed[key] is not None:  # a read that failed by
                    fresh.append((key, st, digest, reason, body))  # chance (a deadline, an I/O error): tried again
                    entries[key] = files.identity(st), digest, reason if body is None else _to_keep(body, seen)
                body = body and dict(body)  # the row stored stays without the report's mark
            if reason is not None:
                skipped.append((path, reason))
            else:
                body["_path"] = path
                found.append(body)
    if db is not None:
        _update(db, fresh, indexed - {key for _, key, _ in listed})
        db.close()
    kept.save(root, version, before, entries, folders, reused)
    return found, skipped, listing


def _listed(root: str, listing: list, folders: dict, before, skipped: list) -> tuple:
    """([(path, key below root, stat)] of root's result.json files, {key: kept reading} of those whose identity is
    what it was read at, {key: stat, or None where its folder holds a link: read from its file, never kept} of the
    rest); a file that cannot be stat-ed goes to skipped, in a read's words."""
    listed, entries, missed, inside = [], {}, {}, os.path.join(root, "")
    for path in results.paths(root, skipped, listing):
        try:  # its path below root (os.path.relpath's, 5 times as fast: os.walk's paths start with root)
            key = path[len(inside):] if path.startswith(inside) else os.path.relpath(path, root)
            st = os.stat(path)
        except OSError as exc:
            skipped.append((path, _unreadable(path, root, exc)))
            continue
        listed.append((path, key, st))
        was = before.entries.get(key)
        if path[len(root):-len(results.IN_FOLDER)] not in folders:  # its folder (below root, as files.walk keys
            missed[key] = None  # it) holds a link: walk keeps no listing of it
        elif was is not None and was[0] == files.identity(st):
            entries[key] = was
        else:
            missed[key] = st
    return listed, entries, missed


def _unreadable(path: str, root: str, exc: OSError) -> str:
    """Why a file listed cannot be read, in the words a read of it gives (results.scan's: "a broken symlink")."""
    try:
        files.check_regular(path, root)
    except ResultError as refused:
        return str(refused)
    return f"cannot be read ({exc.strerror})"  # there again since


def _to_keep(body: dict, seen: dict, curve_digest=False) -> dict:
    """A light body as kept for the next report (kept.py): a row's loss curve as its digest (the curve stays in the
    index, read when used; curve_digest: the digest where the index gave it, else the curve's own), each text one
    object across the bodies kept (seen: 100,000 group keys are 60 MB; one the index gave is decoded into it)."""
    row, fresh = body.get("_row"), curve_digest is False
    if row is not None:
        curve = row[_CURVE]
        if fresh:
            curve_digest = None if curve is None else _digest(curve.packed)
        body = {**body, "_row": (*row[:_CURVE], curve_digest, *row[_CURVE + 1:])}
    return _once(body, seen) if fresh else body if row is not None else dict(body)  # never the body marked below


def _once(value, seen: dict):
    """value with each text in it (and each mapping's keys) one object: the one seen first."""
    kind = type(value)
    if kind is str:
        return seen.setdefault(value, value)
    if kind is dict:
        return {seen.setdefault(k, k) if type(k) is str else k: _once(v, seen) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(_once(v, seen) for v in value)
    return value


def _as_kept(entry: tuple, path: str, key: str, beside) -> tuple:
    """(body, None) or (None, skip line): a kept reading as this report shows it, its curve read when used."""
    _, digest, what = entry
    if isinstance(what, str):
        return None, what
    body = dict(what)
    row = what.get("_row")
    if row is not None:
        curve = row[_CURVE]
        body["_row"] = (*row[:_CURVE], None if curve is None else Curve(
            load=functools.partial(beside.read, key, digest, curve)), *row[_CURVE + 1:])
    return body, None


def _kept(db: sqlite3.Connection, stats: dict, root: str, beside=None, seen=None) -> tuple:
    """({path: (body, None, digest, curve digest) or (None, its skip line, digest, None)} the index keeps for
    files of these identities, every path it holds): a file that changed, is new, or whose row is not as this
    module writes it is not kept (the file says again). Rows are decoded as they are read: 100,000 rows' texts
    are never held at once; their loss curves are read when one is used (beside: a _Beside of root's)."""
    rows, indexed, mine, seen = {}, set(), sealing.row_key(), {} if seen is None else seen
    try:
        beside = beside or _Beside(root)
        db.execute("BEGIN")  # the version and the rows of one state of the index: another scalelab may rebuild it
        if not _ours(db):
            db.execute("ROLLBACK")
            return {}, set()
        for key, *identity, skipped, text, digest, kind, size, curve_digest, said in progress.counted(db.execute(
                "SELECT r.path, size, mtime_ns, ctime_ns, ino, skipped, body, digest, typeof(curve), length(curve), "
                "curve_digest, seal FROM results r LEFT JOIN seals s ON s.signer = ? AND s.path = r.path",
                (sealing.signer(mine),)), "index", " rows"):  # 100,000: 10 s
            indexed.add(key)
            st = stats.get(key)
            if st is None or tuple(identity) != files.identity(st):
                continue
            if not sealing.holds(said, mine, *_sealed(key, identity, digest, skipped, text, curve_digest)):
                continue  # not sealed by this user: nothing says what it holds is a file's row or skip line (read it)
            if skipped is not None:
                rows[key] = None, skipped, digest, None
                continue
            if kind not in ("null", "blob") or size is not None and (size <= 0 or size % 8):
                continue  # not a curve this module wrote: the file is read again (and its row written anew)
            if (size is None) != (curve_digest is None):
                continue
            curve = None if size is None else Curve(load=functools.partial(beside.read, key, digest, curve_digest))
            try:
                rows[key] = stored.decode(text, curve, seen), None, digest, curve_digest
            except ValueError:
                pass
        db.execute("COMMIT")
    except sqlite3.Error:
        if db.in_transaction:
            db.execute("ROLLBACK")
        return {}, set()
    return rows, indexed


def _ours(db: sqlite3.Connection) -> bool:
    """Whether the index is this scalelab's (asked inside the transaction that reads or writes its rows)."""
    return db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (code_version(),)


class _Beside:
    """The loss curves beside one report's rows, left in the index until the first is used, then read at once (one
    query; 100,000 curves are 160 MB, held only by a report that draws or exports them). A curve whose row changed
    since (another report's update, another scalelab's index) or is gone is read from its file, if that is still
    what this report read (its digest); else the run shows no curve (empty), never another content's."""

    def __init__(self, root: str):  # the index's name as given: SQLite's own (PRAGMA) may not be UTF-8
        self.path, self.root, self.curves = os.path.join(root, FILE_NAME), root, None

    def read(self, key: str, digest: str, curve_digest: str) -> bytes:
        if self.curves is None:
            self.curves = {}
            try:  # read-only: an index removed since is not made again here
                uri = pathlib.Path(os.path.abspath(self.path)).as_uri() + "?mode=ro"
                with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as db:
                    if _ours(db):
                        self.curves = {k: (d, c) for k, d, c in db.execute(
                            "SELECT path, digest, curve FROM results WHERE curve IS NOT NULL")}
            except sqlite3.Error:
                pass
        was, curve = self.curves.pop(key, (None, None))
        if was == digest and type(curve) is bytes and curve and not len(curve) % 8 and _digest(curve) == curve_digest:
            return curve  # the bytes the row's seal is over
        try:
            raw = files.read_bytes(os.path.join(self.root, key), "result", self.root)
            if _digest(raw) != digest:
                return b""  # changed since this report read it
            found = loss_curve(results.parse(raw).get("ranks") or [])
        except ResultError:
            return b""  # gone since this report read it
        return b"" if found is None else found.packed


def _parse(path: str, root: str) -> tuple:
    """(light body, None, digest, True) of a file that reads; (None, its one line, None, whether what it says
    lasts) of one that does not: its content does (kept in the index until the file changes), a refusal to read
    it may not (tried again)."""
    try:
        raw = files.read_bytes(path, "result", root)
    except ResultError as exc:
        return None, str(exc), None, False
    try:
        data = results.parse(raw)
    except ResultError as exc:
        return None, str(exc), None, True
    return light(data), None, _digest(raw), True


def _digest(raw: bytes) -> str:
    """A file's content as the index keeps it (what a row was read from; a lazy curve reads only that content)."""
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _open(path: str, again: bool = True) -> sqlite3.Connection:
    """The index, or a new one where it is missing, not a database, or another scalelab's; sqlite3.Error where it
    cannot be used now (locked past the timeout, a filesystem without its locks): the report reads the files."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise files.NotAFile(errno.EEXIST, "a folder or a link, not an index scalelab replaces", path)
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.executescript(_SCHEMA)
        if not _ours(db):
            db.execute("BEGIN IMMEDIATE")
            for table in ("results", "seals"):  # their layout too may be another's
                db.execute(f"DROP TABLE IF EXISTS {table}")
            for create in _SCHEMA.split(";")[1:3]:
                db.execute(create)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?)", (code_version(),))
            db.execute("COMMIT")
        return db
    except sqlite3.OperationalError:
        db.close()
        raise  # busy, read-only, no locks: nothing wrong with the file itself, never removed
    except sqlite3.DatabaseError:
        db.close()
        if not again:
            raise
        os.remove(path)  # not a database (a torn copy, a hand edit): the files rebuild it, once
        return _open(path, again=False)


def _update(db: sqlite3.Connection, fresh: list, gone: set) -> None:
    """The new and changed files' rows in, the vanished files' out: all or nothing (a full disk, a read-only folder,
    another report's lock held past the timeout: the old index stays as it was). This user's seal goes beside the
    others': a row stored again as it was keeps theirs valid, and a seal over what a row said before holds for no
    other content (each is over the whole row), so none is dropped but a vanished file's."""
    mine, rows = sealing.row_key(), []
    for key, st, digest, reason, body in fresh:
        try:
            text, curve = (None, None) if body is None else stored.encode(stored.shown(body))
            key.encode(), reason is None or reason.encode()  # text is ASCII (json.dumps)
        except (ValueError, RecursionError):  # nested past what as_read walks; a name or a line that is not UTF-8
            continue  # (a lone surrogate: SQLite holds no such text): read from its file each time
        identity, curve_digest = files.identity(st), None if curve is None else _digest(curve)
        rows.append(((key, *identity, digest, reason, text, curve, curve_digest),
                     sealing.seal(mine, *_sealed(key, identity, digest, reason, text, curve_digest))))
    signer = sealing.signer(mine)
    try:
        db.execute("BEGIN IMMEDIATE")
        if not _ours(db):  # rebuilt by another scalelab since this report opened it: its rows are not this one's
            db.execute("ROLLBACK")
            return
        db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [r for r, _ in rows])
        db.executemany("INSERT OR REPLACE INTO seals VALUES (?, ?, ?)",
                       [(signer, row[0], seal) for row, seal in rows if seal is not None])
        db.executemany("DELETE FROM results WHERE path = ?", [(key,) for key in gone])
        if gone:  # one pass (seals are filed by signer): every user's seals of a vanished file's row
            db.execute("DELETE FROM seals WHERE path NOT IN (SELECT path FROM results)")
        db.execute("COMMIT")
    except (sqlite3.Error, OverflowError, ValueError):
        if db.in_transaction:
            db.execute("ROLLBACK")


def _sealed(key: str, identity, digest, reason, text, curve_digest) -> tuple:
    """What a row's seal is over: this scalelab, the row's path, its file's identity and digest, what it says of that
    file (a skip line, or the body: never one taken for the other) and its loss curve's digest (the curve is read
    when used: _Beside checks its bytes against it)."""
    return (code_version(), key, *identity, digest, curve_digest,
            *(("body", text) if reason is None else ("skipped", reason)))


def full(records: list) -> list:
    """The whole results of these (light) training records, from their files: what the step timelines and --trace
    draw; a file that no longer reads is left out."""
    out = []
    for r in records:
        try:
            out.append(r if "_row" not in r else {**results.load(r["_path"]), "_path": r["_path"]})
        except ResultError:
            continue
    return out
