"""A seal on what this user's reports wrote into a folder others may write too: a key of their own, and a MAC."""

import contextlib
import functools
import hashlib
import hmac
import os
import stat
import tempfile
from typing import Optional


def seal(key: Optional[bytes], path: str, identity: tuple, digest, text) -> Optional[str]:
    """A row's seal: its path, file identity, digest and text under this user's key (None without a key)."""
    if key is None or not isinstance(text, str):
        return None
    said = "\0".join(map(str, (path, *identity, digest, text)))  # no path, number or hex digest holds a NUL
    return hashlib.blake2b(said.encode("utf-8", "surrogatepass"), key=key, digest_size=16).hexdigest()


def holds(said, key: Optional[bytes], path: str, identity, digest, text) -> bool:
    """Whether `said` (a stored seal, or anything a hand put there) is this row's seal under key."""
    ours = seal(key, path, tuple(identity), digest, text)
    return ours is not None and isinstance(said, str) and hmac.compare_digest(said, ours)


KEY_BYTES = 32


def row_key() -> Optional[bytes]:
    """This user's key for the rows its reports seal, made on first use ($XDG_CACHE_HOME or ~/.cache, then
    scalelab/index.key: 0600, in a 0700 folder); None where none can be kept private (no home or a read-only one,
    another owner's file, one others may read): no row is then taken as shown."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return _key_at(os.path.join(cache, "scalelab", "index.key"))


@functools.lru_cache(maxsize=4)
def _key_at(path: str) -> Optional[bytes]:
    try:
        return _own_key(path)
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:  # written whole, then linked in: two first reports at once read one key, never a half-written one
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))  # 0600
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
    """The key at path if it is a regular file of this user's that no one else may read, else None."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO there: no wait
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None
