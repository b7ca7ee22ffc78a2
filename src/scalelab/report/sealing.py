"""A seal on what this user's reports wrote into a folder others may write too: a key of their own, and a MAC."""

import contextlib
import functools
import hashlib
import hmac
import os
import stat
import tempfile
from typing import Optional

KEY_BYTES = 32
_WHAT = "scalelab index row"  # what a seal is for: no other use of the key gives the same MAC


def seal(key: Optional[bytes], *fields) -> Optional[str]:
    """The seal of these fields under key (None without a key, or without a text last). A NUL joins them: no field
    but the last (a stored text) can hold one (a version and a digest are hex, a path has none, numbers)."""
    if key is None or not isinstance(fields[-1], str):
        return None
    said = "\0".join(map(str, (_WHAT, *fields)))
    return hashlib.blake2b(said.encode("utf-8", "surrogatepass"), key=key, digest_size=16).hexdigest()


def signer(key: Optional[bytes]) -> Optional[str]:
    """Whose seals these are, as the index files them (a digest of the key, which says nothing of it); None without
    a key."""
    return None if key is None else hashlib.blake2b(key, person=b"scalelab signer", digest_size=16).hexdigest()


def holds(said, key: Optional[bytes], *fields) -> bool:
    """Whether `said` (a stored seal, or anything a hand put there) is the seal of these fields under key."""
    ours = seal(key, *fields)
    return ours is not None and isinstance(said, str) and hmac.compare_digest(said, ours)


def private_folder() -> Optional[str]:
    """The folder this user's key is kept in, where row_key found or made one (no one else may write it), else
    None: what a report keeps for the next (report/kept.py) goes there."""
    return _cache_folder() if row_key() is not None else None


def _cache_folder() -> str:
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # the XDG rule: a relative path is ignored
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "scalelab")


def row_key() -> Optional[bytes]:
    """This user's key for the rows its reports seal, made on first use ($XDG_CACHE_HOME where it is an absolute
    path, else ~/.cache; then scalelab/index.key: 0600, in a folder of this user's that no one else may write);
    None where none can be kept private (no home or a read-only one, another owner's file or folder, a key others
    may read, a link): no row is then taken as shown."""
    return _key_at(os.path.join(_cache_folder(), "index.key"))


@functools.lru_cache(maxsize=4)
def _key_at(path: str) -> Optional[bytes]:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None  # a link, or a folder another may write: the key in it could be swapped
        return _own_key(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:  # written whole, then linked in: two first reports at once read one key, never a half-written one
        fd, tmp = tempfile.mkstemp(dir=folder)  # 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(os.urandom(KEY_BYTES))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
        return _own_key(path)
    except OSError:
        return None


def _own_key(path: str) -> Optional[bytes]:
    """The key at path if it is a regular file of this user's, of one name, that no one else may read, else None."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO there: no wait
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 or st.st_nlink != 1:
            return None
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None
