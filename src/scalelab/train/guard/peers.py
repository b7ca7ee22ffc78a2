"""What the ranks tell each other through the process group's key-value store, so rank 0 can name a failed peer.

Gloo's "Connection closed by peer [127.0.0.1]:port" names the port of a gloo pair, not a rank. The store is
served by a thread of rank 0's process, so rank 0 can read it also while it is blocked in a collective:

* A rank that fails with an exception (any launcher: torchrun, srun, several nodes) posts its one-line error
  before it exits; rank 0 reads it when its own collective breaks. A rank that stopped for a signal, or only
  saw a broken collective, posts a marker instead (MARK_SIGNAL, MARK_PEER): it is a victim, not the cause.
* Every rank posts where it runs (host and pid) at start-up, so rank 0 finds ranks that torchrun or srun
  started on its own host gone by their pid.

Everything here is best effort and never blocks for long: the store may be gone with rank 0.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import threading
import time
from datetime import timedelta

import torch.distributed as dist

RUN_KEY = "scalelab/run"  # rank 0's run id and folder, so a survivor can record the run into it
STORE_PREFIX = "scalelab/error/"
WHERE_PREFIX = "scalelab/where/"
NODE_PREFIX = "scalelab/node/"  # the node (0, 1, ...) a rank runs on: a silent rank on another node is behind a link
PROGRESS_PREFIX = "scalelab/progress/"
MARK_SIGNAL, MARK_PEER = "~stopped by a signal", "~saw another rank fail"  # posted by ranks that are not the cause
MARK_STALLED = "~stalled: "  # a rank blocked, and its line: which rank caused it is decided by progress


def post_where(rank: int) -> None:
    """This rank's host and pid, so rank 0 can tell a vanished peer on its own host."""
    store = _store()
    if store is not None:
        try:
            store.set(f"{WHERE_PREFIX}{rank}", f"{socket.gethostname()} {os.getpid()}")
            store.set(f"{NODE_PREFIX}{rank}", str(node_rank()))
        except Exception:  # noqa: BLE001 - best effort: only sharpens a message
            pass


def node_rank() -> int:
    """This process's node as its launcher numbers them (torchrun: GROUP_RANK; Lightning and srun: NODE_RANK or
    SLURM_NODEID)."""
    for name in ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def silent_elsewhere(world_size: int, spoke_since: float | None = None) -> list[tuple[int, int]]:
    """[(rank, node)] of ranks on another node than this one that posted no error, nor (with `spoke_since`, a
    time.time()) progress at or after `spoke_since`: where a collective timed out, what stands between them and
    us is their node or the link. A post from before the collective began is no word from behind a link cut since
    (a rank that paused on a busy machine posts when it stops and when it resumes). Each post carries its rank's
    time.time(): the nodes' clocks are taken to agree within about a second (NTP; emulated nodes share one).
    Without `spoke_since`, no error posted is enough (a connection they closed without a word, mid-run)."""
    store, here, out = _store(), node_rank(), []
    if store is None:
        return out
    said = set(posts(world_size))
    if spoke_since is not None:
        said |= {rank for rank, (*_, at) in _progress_fields(world_size).items() if at >= spoke_since}
    for rank in range(1, world_size):
        try:
            node = int(store.get(f"{NODE_PREFIX}{rank}").decode()) if store.check([f"{NODE_PREFIX}{rank}"]) else here
        except Exception:  # noqa: BLE001 - store unusable: nothing more to say
            return out
        if node != here and rank not in said:
            out.append((rank, node))
    return out


def where(rank: int, wait_s: float = 60.0) -> tuple[str, int] | None:
    """(host, pid) that `rank` posted at start-up, waiting for the post; None when it cannot be read."""
    store = _store()
    try:
        store.wait([f"{WHERE_PREFIX}{rank}"], timedelta(seconds=wait_s))
        return _read_where(store, rank)
    except Exception:  # noqa: BLE001 - no store, or it broke: only a survivor's record is lost
        return None


def share_run(rank: int, run_id: str | None, folder: str | None) -> tuple[str | None, str | None]:
    """Rank 0's (run id, run folder) on every rank: should rank 0 die or stop, rank 1 records the run into the
    folder rank 0 claimed, where rank 0 (if it resumes) finds it (failure.record_failure)."""
    store = _store()
    try:
        if rank == 0:
            store.set(RUN_KEY, json.dumps([run_id, folder]))
            return run_id, folder
        store.wait([RUN_KEY], timedelta(seconds=60))
        return tuple(json.loads(store.get(RUN_KEY).decode()))
    except Exception:  # noqa: BLE001 - best effort, as every post here
        return run_id, folder


def store_answers(timeout_s: float = 5.0) -> bool:
    """Whether the group's store answers within timeout_s. Rank 0's process serves it (a local launch, srun):
    no answer means rank 0 is gone, stopped or behind a cut link. Asked from a daemon thread: a store client
    waiting on a peer that never answers does not honour its own timeout, and would hold this rank for good."""
    store, answered = _store(), []

    def ask():
        try:
            store.check([f"{WHERE_PREFIX}0"])
            answered.append(True)
        except Exception:  # noqa: BLE001 - closed or refused: no answer
            pass

    if store is None:
        return False
    asking = threading.Thread(target=ask, name="scalelab-store-probe", daemon=True)
    asking.start()
    asking.join(timeout_s)
    if not answered:  # the probe may hold the client for good: every later post would wait behind it
        _UNREACHABLE.set()
    return bool(answered)


def post_error(rank: int, line: str) -> None:
    """A non-zero rank leaves its one-line error for rank 0 (best effort, never blocks for long): its own
    exception, or a marker (MARK_SIGNAL, MARK_PEER) that says it is not the cause."""
    store = _store()
    if store is not None:
        try:
            store.set(f"{STORE_PREFIX}{rank}", line[:300])
        except Exception:  # noqa: BLE001 - rank 0 may be gone already; its own error says enough
            pass


def post_progress(rank: int, progress: tuple) -> None:
    """How far this rank got (steps, batches, all-reduces issued): posted when it stops making progress (and when
    it resumes), so a blocked rank 0 can tell the rank that hung from the ranks waiting for it (watch.hung_line).
    One store write per pause, none while steps flow."""
    store = _store()
    if store is not None:
        try:
            store.set(f"{PROGRESS_PREFIX}{rank}", " ".join([*(str(int(n)) for n in progress), f"{time.time():.3f}"]))
        except Exception:  # noqa: BLE001 - best effort, as post_error
            pass


def post_stall(rank: int, progress: tuple, line: str) -> None:
    """A rank that found itself blocked (deadline.py): its progress, and its line, marked as not an error."""
    post_progress(rank, progress)
    post_error(rank, MARK_STALLED + line)


def progress_posts(world_size: int, since: float = -math.inf) -> dict[int, tuple]:
    """{rank: (steps, batches, all-reduces issued)} of the ranks that posted theirs; with `since` (time.time()), of
    those that posted a stop (post_stall) or a pause at or after it."""
    # the stops first: a rank posts its progress before its stop (post_stall), so a stop read is never newer
    stopped = set() if since == -math.inf else {
        rank for rank, text in posts(world_size).items() if text.startswith(MARK_STALLED)}
    fields = _progress_fields(world_size)
    return {rank: tuple(int(n) for n in f[:-1]) for rank, f in fields.items() if rank in stopped or f[-1] >= since}


def _progress_fields(world_size: int) -> dict[int, tuple]:
    """{rank: (steps, batches, all-reduces issued, time.time() of the post)} as posted."""
    store = _store()
    out = {}
    if store is None:
        return out
    for rank in range(1, world_size):
        key = f"{PROGRESS_PREFIX}{rank}"
        try:
            if store.check([key]):
                out[rank] = tuple(float(n) for n in store.get(key).decode().split())
        except Exception:  # noqa: BLE001 - store unusable or a garbled post: what we have
            return out
    return out


def posts(world_size: int) -> dict[int, str]:
    """{rank: what it posted}: errors and markers."""
    store = _store()
    if store is None:
        return {}
    out = {}
    for rank in range(1, world_size):
        key = f"{STORE_PREFIX}{rank}"
        try:
            if store.check([key]):
                out[rank] = store.get(key).decode(errors="replace")
        except Exception:  # noqa: BLE001 - store unusable: fall back to what else we know
            return out
    return out


def posted_errors(world_size: int) -> list[tuple[int, str]]:
    """[(rank, error line)] of ranks that failed with their own exception, lowest rank first."""
    return [(rank, text) for rank, text in sorted(posts(world_size).items()) if not text.startswith("~")]


def gone_on_this_host(world_size: int) -> list[tuple[int, None]]:
    """[(rank, None)] of ranks on this host whose process is gone without saying why (started by torchrun or
    srun, not by us)."""
    store, here, gone = _store(), socket.gethostname(), []
    if store is None:
        return gone
    posted = posts(world_size)
    for rank in range(1, world_size):
        if rank in posted:
            continue
        try:
            if not store.check([f"{WHERE_PREFIX}{rank}"]):
                continue
            host, pid = _read_where(store, rank)
        except Exception:  # noqa: BLE001
            return gone
        if host == here and not _alive(pid):
            gone.append((rank, None))
    return gone


def describe_dead(dead: list[tuple[int, int | None]]) -> str:
    """'rank 1 stopped responding (killed by SIGKILL)' for each (rank, returncode; None: process gone)."""
    parts = []
    for rank, code in dead:
        if code is None:
            how = "its process is gone"
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        parts.append(f"rank {rank} stopped responding ({how})")
    return "; ".join(parts) if parts else "a rank stopped responding"


def is_peer_failure(exc: BaseException) -> bool:
    """A collective or rendezvous broke: the cause may be another rank."""
    dist_error = getattr(dist, "DistError", None)  # torch 2.1+
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("gloo", "Gloo", "Connection closed", "Connection reset", "Broken pipe",
                                      "NCCL", "timed out", "Timed out", "timeout", "ProcessGroup"))


_UNREACHABLE = threading.Event()  # the store did not answer (store_answers): no post waits on it after that


def _store():
    """The default process group's store, or None (no process group, the private API moved, or it stopped
    answering)."""
    if _UNREACHABLE.is_set():
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - private API: without it we still name dead launched children
        pass
    return None


def _read_where(store, rank: int) -> tuple[str, int]:
    """(host, pid) as post_where wrote them."""
    host, pid = store.get(f"{WHERE_PREFIX}{rank}").decode().rsplit(" ", 1)
    return host, int(pid)


def state_code(pid: int) -> str | None:
    """The one-letter state of a process of this host (R, S, T, Z, ...), None when it is gone (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    code = state_code(pid)
    if code is not None:
        return code not in ("Z", "X")  # a zombie has ended
    try:  # gone, or no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
