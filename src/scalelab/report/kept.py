"""What one report read of a folder, kept whole for the next: this user's own copy, good file by file.

The index (report/index.py) is read row by row: 100,000 rows take about 5 s to fetch, check each seal and decode,
and the folder's 100,000 folders a second more to list. So each report also keeps what it read of each file (the
light body index.scan gave, its loss curve left in the index) and each folder's listing, in this user's private
cache folder (where sealing keeps the key: `kept/<digest of the folder's real path>`), sealed with the key over the
whole. The next report takes a file's reading from it where the file's identity is what it was read at, a folder's
listing where the folder's is (files.walk), and reads the rest through the index as before; none is taken from a
copy that another scalelab wrote (its code's digest) or that the key does not seal. A report that read something
new writes only what changed, beside the whole (`.delta`), until that is DELTA_SHARE of it: then the whole again.
"""

import contextlib
import hashlib
import hmac
import os
import pickle
import secrets
import time
from dataclasses import dataclass, field

from scalelab import files
from scalelab.errors import ResultError
from scalelab.report import sealing

DELTA_SHARE = 0.05  # of the whole's entries: a delta past it (or past DELTA_MIN) writes the whole again
DELTA_MIN = 1000
# the results folders kept for, the least recently reported on dropped past either: a reading is some 1 KB a result
# (100 MB for a site's 100,000), so a count alone dropped a site's folder after 8 small ones (a workshop's, a test's)
# and its next report read 100,000 rows again (20 s, 1.2 GB, where 6 s and 0.9 GB)
KEEP_FOLDERS, KEEP_BYTES = 64, 2**30
TMP_AGE_S = 3600  # a temporary file this old is no report's that is still writing
_WHAT = b"scalelab kept reading"
_SEAL_SIZE = 32  # bytes of the seal that begins a kept file


@dataclass
class Kept:
    """Each file's reading (key below root -> (identity, content digest, what index.scan gave: a skip line, or a
    body whose row holds its curve's digest)) and each folder's listing (files.walk's `keep`); `base`: the whole's
    token (a delta names it), `delta`: the keys and folders the delta holds."""
    entries: dict = field(default_factory=dict)
    folders: dict = field(default_factory=dict)
    base: str = ""
    delta: tuple = ((), ())


def _where(root: str):
    """(whole's path, delta's path, the key sealing them) for this folder, or None where this user has no private
    cache folder (sealing.row_key: then nothing is kept)."""
    key, folder = sealing.row_key(), sealing.private_folder()
    if key is None or folder is None:
        return None
    name = hashlib.blake2b(os.path.realpath(root).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    path = os.path.join(folder, "kept", name)
    return path, path + ".delta", key


def load(root: str, version: str) -> Kept:
    """What the last report of root kept (its whole and its delta), or an empty Kept where there is none this user's
    key seals for this scalelab (version) and this folder."""
    where = _where(root)
    whole = _read(where[0], where[2], version, root) if where else None
    if whole is None:
        return Kept()
    with contextlib.suppress(OSError):  # reported on now: the last to be dropped (_prune)
        os.utime(where[0])
    kept = Kept(whole["entries"], whole["folders"], whole["token"])
    delta = _read(where[1], where[2], version, root)
    if delta is not None and delta["token"] == kept.base:
        for table, changed in ((kept.entries, delta["entries"]), (kept.folders, delta["folders"])):
            for key, value in changed.items():
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
        kept.delta = tuple(delta["entries"]), tuple(delta["folders"])
    return kept


def _read(path: str, key: bytes, version: str, root: str):
    """The sealed pickle at path if the key seals it and it is this scalelab's, for this folder; else None."""
    try:
        raw = files.read_bytes(path, "kept reading")
    except ResultError:
        return None
    seal, body = raw[:_SEAL_SIZE], memoryview(raw)[_SEAL_SIZE:]  # the body not copied (100 MB at 100,000 results)
    if not hmac.compare_digest(seal, _seal(key, body)):
        return None  # torn, another key's, or not ours at all: never unpickled
    try:
        data = pickle.loads(body)
    except Exception:  # noqa: BLE001 - sealed by this key, so ours, but from a Python that pickles otherwise
        return None
    if not isinstance(data, dict) or data.get("version") != version or data.get("root") != os.path.realpath(root):
        return None
    return data


def _seal(key: bytes, body: bytes) -> bytes:
    sealed = _sealer(key)
    sealed.update(body)
    return sealed.digest()


def _sealer(key: bytes):
    return hashlib.blake2b(key=key, digest_size=_SEAL_SIZE, person=_WHAT[:16])


def save(root: str, version: str, before: Kept, entries: dict, folders: dict, reused: set) -> None:
    """Keep this report's reading for the next: where little changed since `before` (reused: the keys taken from
    it as they were), a delta beside its whole; else the whole. A folder that cannot be written keeps what it had."""
    where = _where(root)
    if where is None:
        return
    changed = {k: v for k, v in entries.items() if k not in reused}
    changed.update((k, None) for k in before.entries.keys() - entries.keys())
    moved = {k: v for k, v in folders.items() if before.folders.get(k) is not v}
    moved.update((k, None) for k in before.folders.keys() - folders.keys())
    if before.base and not changed and not moved:
        return
    delta_entries = {k: entries.get(k) for k in (*before.delta[0], *changed)}
    delta_folders = {k: folders.get(k) for k in (*before.delta[1], *moved)}
    small = len(delta_entries) + len(delta_folders) <= max(DELTA_MIN, DELTA_SHARE * (len(entries) + len(folders)))
    with contextlib.suppress(OSError, pickle.PicklingError, RecursionError, ValueError):
        os.makedirs(os.path.dirname(where[0]), mode=0o700, exist_ok=True)
        if before.base and small:
            _write(where[1], where[2], dict(version=version, root=os.path.realpath(root), token=before.base,
                                            entries=delta_entries, folders=delta_folders))
            return
        _write(where[0], where[2], dict(version=version, root=os.path.realpath(root), token=secrets.token_hex(16),
                                        entries=entries, folders=folders))
        files.unlink_quietly(where[1])  # named for the whole before: a reader at once ignores it either way
        _prune(os.path.dirname(where[0]))


def _write(path: str, key: bytes, data: dict) -> None:
    """data pickled into path as it is sealed (_read's layout: the seal, then the pickle), the pickle never held
    whole (100 MB at 100,000 results: a report's peak memory)."""
    def write(fh):
        fh.write(bytes(_SEAL_SIZE))  # the seal's place, filled once the pickle that follows is written
        sealed = _sealer(key)
        pickle.Pickler(_Sealed(fh, sealed), protocol=pickle.HIGHEST_PROTOCOL).dump(data)
        fh.seek(0)
        fh.write(sealed.digest())
    files.atomic_write_bytes(path, write)


class _Sealed:
    """A file that seals what is written to it on the way (pickle.Pickler's file: it calls write, frame by frame)."""

    def __init__(self, fh, sealed):
        self.fh, self.sealed = fh, sealed

    def write(self, data) -> int:
        self.sealed.update(data)
        return self.fh.write(data)


def _prune(folder: str) -> None:
    """The results folders reported on most recently kept, up to KEEP_FOLDERS of them and KEEP_BYTES in all (the
    newest always), the rest's readings removed; a delta whose whole is gone, and a temporary file a report that
    stopped half-way left (an hour old), too."""
    with contextlib.suppress(OSError):
        names = set(next(iter(files.listing(folder)))[1] or [])
        stats = {n: os.stat(os.path.join(folder, n)) for n in names if "." not in n}
        left, size = set(), 0
        for name in sorted(stats, key=lambda n: stats[n].st_mtime_ns, reverse=True)[:KEEP_FOLDERS]:
            size += stats[name].st_size
            if left and size > KEEP_BYTES:
                break
            left.add(name)
        for name in names - left:
            path = os.path.join(folder, name)
            if "." not in name or name.endswith(".delta") and name[:-6] not in left or name.startswith(".tmp-") \
                    and time.time() - os.stat(path).st_mtime > TMP_AGE_S:
                files.unlink_quietly(path)
