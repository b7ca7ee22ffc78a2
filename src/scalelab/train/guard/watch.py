"""Rank 0's view of the other ranks: which one failed first and how, and no rank left running.

`RankWatch` exists in every rank before the ranks meet (run.main creates it before Fabric launches and hands it to
failure.classify). It answers rank 0's question "why did my collective fail?" from what rank 0 can *know*
(gloo's "Connection closed by peer [127.0.0.1]:port" names a gloo pair's port, not a rank):

* Ranks started from this process (`python src/train.py --devices N`, launch/local.py): rank 0 is their parent
  and holds their `Popen` objects, so it knows which child ended, with which exit code or signal. It lets rank 0
  record the failure first (Lightning's own child observer, when Lightning launched the ranks, SIGKILLed rank 0
  within 5 s of a child's death: exit -9, no record, nothing on stderr) and kills everything itself only if rank 0
  has not ended `--timeout` + 30 s after a death (counted from rank 0's go: its start-up is not held against it).
* Other ranks, under any launcher: what they posted in the process group's store, and ranks gone from this
  host (peers.py).
* A collective that timed out (`--timeout`) names the launched ranks that are alive but silent, with their
  process state (stopped, running, waiting on I/O).
* A rendezvous that timed out (torch's "1/2 clients joined") says how many ranks arrived of how many.

Signals (signals.py) are set up here too, because the watch is what exists in every rank from then on.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from scalelab import files
from scalelab.errors import ResultError
from scalelab.train.guard import peers
from scalelab.train.guard.peers import describe_dead, is_peer_failure
from scalelab.train.guard.signals import RunSignals

PEER_WAIT_S = 3.0  # how long rank 0 waits for a failed peer to be seen dead (or to post its error)
LAST_RESORT_GRACE_S = 30.0


class RankWatch:
    def __init__(self, timeout_s: float, requeue_on_sigusr1: bool = False, no_requeue: str | None = None):
        self.timeout_s = timeout_s
        # (global rank, Popen) started from this process (launch/local.py), from rank 0's go: local ranks 1..N-1
        self.children: list[tuple[int, subprocess.Popen]] = []
        self.world_size = 1
        self.rank = 0
        self.signals = RunSignals(requeue_on_sigusr1, no_requeue)
        self._killed_by_us: set[int] = set()
        self.rank0_where: tuple[str, int] | None = None  # rank 1: where rank 0 runs (host, pid), to tell it lost
        self.records_for_rank0 = False  # rank 1, once rank 0 was found lost: it writes the run's record
        self.run_folder: str | None = None  # rank 0's run folder (peers.share_run): where its record lands
        self.signals.install()

    # --- launched children --------------------------------------------------------------------------
    def follow(self, procs) -> None:
        """The ranks started from this process have gone on (rank 0's go): watch them from now on. A rank that
        died before the go is not counted against rank 0's start-up, however long that took."""
        self.children = [(k + 1, proc) for k, proc in enumerate(procs)]
        threading.Thread(target=self._poll, name="scalelab-rank-watch", daemon=True).start()

    def _poll(self):
        first_death = None
        while True:
            time.sleep(0.25)
            codes = [proc.poll() for _, proc in self.children]
            if all(code == 0 for code in codes):
                return
            if first_death is None and any(code not in (None, 0) for code in codes):
                first_death = time.monotonic()
            if (first_death is not None and not self.signals.ending
                    and time.monotonic() - first_death > self.timeout_s + LAST_RESORT_GRACE_S):
                dead = self.dead_children()
                print(f"scalelab: {describe_dead(dead)}; rank 0 did not end within --timeout + "
                      f"{LAST_RESORT_GRACE_S:.0f} s: stopping all ranks", file=sys.stderr, flush=True)
                self.stop_children()
                os.kill(os.getpid(), signal.SIGKILL)
                return

    def dead_children(self) -> list[tuple[int, int]]:
        """[(rank, returncode)] of launched ranks that ended badly (not counting the ones we stopped, nor the
        ones that said why they stopped: a signal, or a peer's failure)."""
        posted = peers.posts(self.world_size)
        return [(rank, proc.poll()) for rank, proc in self.children
                if proc.poll() not in (None, 0) and rank not in self._killed_by_us and rank not in posted]

    def stop_children(self):
        """SIGKILL every launched rank still running (rank 0 is ending; they cannot finish without it)."""
        for rank, proc in self.children:
            if proc.poll() is None:
                self._killed_by_us.add(rank)
                proc.kill()
        for _, proc in self.children:
            try:
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - a zombie we cannot reap is not worth a second error
                pass

    def wait_children(self, limit_s: float = 10.0):
        """Rank 0 at the end of a run: the ranks it launched end on their own once the last collective is done."""
        for _, proc in self.children:
            try:
                proc.wait(timeout=limit_s)
            except Exception:  # noqa: BLE001 - a rank that will not end dies with rank 0 (PR_SET_PDEATHSIG)
                pass

    def joined(self, world_size: int, rank: int):
        """The process group exists: this rank's place in it, and (several ranks) where it runs, for rank 0."""
        self.world_size, self.rank = world_size, rank
        if world_size > 1:
            peers.post_where(rank)
            if rank == 1:
                self.rank0_where = peers.where(0)

    def rank0_lost(self, ask_store: bool = True) -> str | None:
        """Rank 1, once its own collective broke or a signal came: how rank 0 was lost (gone, stopped, not answering),
        or None while rank 0 answers (it records the run itself). Rank 1 then records the run for it."""
        if self.rank != 1 or self.world_size < 2:
            return None
        if self.rank0_where and self.rank0_where[0] == socket.gethostname():
            code = peers.state_code(self.rank0_where[1])
            if code in (None, "Z", "X"):
                lost = "rank 0 died without a word (SIGKILL, the OOM killer or a crash inside C)"
            elif code in ("T", "t"):
                lost = f"rank 0 is {_STATES[code]}: the other ranks cannot go on without it"
            elif not ask_store or peers.store_answers():
                return None  # alive and answering: it says what happened itself
            else:  # emulated nodes share a host: a cut link leaves rank 0 running and unreachable
                lost = "rank 0 runs but does not answer: the link between its node and this one is down"
        elif ask_store and not peers.store_answers():
            lost = "rank 0 does not answer (its process or its node is gone, or it is stopped)"
        else:
            return None
        # Looked at after rank 0 was found gone: a rank 0 that recorded its own failure (or the others' hang) and
        # ended is gone too, and its record, on disk before it exited, stands
        if self.run_folder and recorded(os.path.join(self.run_folder, "result.json")):
            return None
        self.records_for_rank0 = True
        return lost

    # --- when the run fails -----------------------------------------------------------------------------
    def begin_failure(self):
        self.signals.ending = True

    def culprit(self, exc: BaseException | None, steps_done: int, wait_s: float = PEER_WAIT_S,
                silent: bool = True, stalled: bool = True) -> str | None:
        """One line naming the rank that failed first, or None when this rank's own error is the cause.

        A closed connection means a peer is dying: wait up to `wait_s` to see its exit (or its posted error).
        A timed-out collective means a peer is alive but silent: name launched ranks that are still running.
        exc=None: only what is known already (a posted error, a rank gone without saying why).
        silent=False: leave out the alive-but-silent ranks (they may be stuck because of this rank).
        stalled=True: else a rank whose stall deadline fired (peers.post_stall), the furthest behind of them: this
        rank's collective broke because it left. (Blocked itself, rank 0 weighs its own progress: hung_rank.)
        """
        if exc is not None and not is_peer_failure(exc):
            return None
        where = f" during step {steps_done + 1}" if steps_done else " before the first step"
        timed_out = exc is not None and any(word in str(exc).lower() for word in ("timed out", "timeout"))
        deadline = time.monotonic() + (0 if timed_out else wait_s)
        while True:
            posted = peers.posted_errors(self.world_size)
            if posted:
                rank, line = posted[0]
                return f"rank {rank} failed{where}: {line}"
            dead = self.dead_children() or peers.gone_on_this_host(self.world_size)
            if dead:
                # A rank posts before it exits, but the store serves the post asynchronously: look once more.
                # A launched rank whose pid was already gone may not have been reaped yet: by now its exit code
                # (killed by SIGKILL, exited with 3) says more than "its process is gone".
                time.sleep(0.3)
                posts = peers.posts(self.world_size)
                dead = [(rank, code) for rank, code in self.dead_children() or dead if rank not in posts]
                if dead and not peers.posted_errors(self.world_size):
                    return f"{describe_dead(dead)}{where}"
                continue
            hung = stalled and _furthest_behind_stalled(self.world_size)
            if hung:
                return hung
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        silent = silent and [(rank, _state(proc.pid)) for rank, proc in self.children if proc.poll() is None]
        silent = silent and [(rank, state) for rank, state in silent if state != "state Z"]  # Z: just ended
        if timed_out and silent:
            return "; ".join(f"rank {rank} did not answer within {self.timeout_s:g} s (--timeout){where}; its "
                             f"process is alive ({state})" for rank, state in silent)
        # silent during the wait that timed out: a progress post from before it is no word from behind the link
        remote = timed_out and peers.silent_elsewhere(self.world_size, spoke_since=time.time() - self.timeout_s)
        if remote:  # a cut link, a node gone or stopped: they could not even post (the store is on this side)
            who = ", ".join(f"rank {rank} (node {node + 1})" for rank, node in remote)
            return (f"no word from {who} within {self.timeout_s:g} s (--timeout){where}: that node, or the link to "
                    "it, is down or stopped")
        closed = exc is not None and not timed_out and peers.silent_elsewhere(self.world_size)
        if closed:  # a node lost mid-run: its ranks went without a word (gloo says "Connection reset by peer")
            who = ", ".join(f"rank {rank} (node {node + 1})" for rank, node in closed)
            return (f"lost {who}{where}: its connection closed and it posted no error within {wait_s:g} s, so that "
                    "node, its processes or the link to it are gone (scontrol show node / sacct name the node)")
        return None

    def hung_rank(self, own: tuple, wait_s: float = PEER_WAIT_S, moved_at: float = math.inf) -> str | None:
        """Rank 0, blocked: the line naming the rank that hung, from the progress the others posted and its own.
        Waits up to `wait_s` for the ranks that have not posted yet (each posts when it pauses, and when its own
        deadline fires: the one that hung first, the ones waiting for it later), unless they are known dead.

        A stop (peers.post_stall) always counts; a pause only where it was posted after rank 0 last moved
        (`moved_at`, time.time()): a rank that paused while rank 0 was slow, went on (so rank 0 could) and died
        before its next post left a pause behind, which named it hung a step before its end."""
        deadline = time.monotonic() + wait_s
        while True:
            progress = peers.progress_posts(self.world_size, since=moved_at)
            gone = {rank for rank, _ in self.dead_children() + peers.gone_on_this_host(self.world_size)}
            if len(set(progress) | gone) >= self.world_size - 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        return hung_line({0: tuple(own), **progress}, self.world_size)

    def not_joined(self, arrived: int, expected: int) -> str:
        """The one line of a rendezvous that timed out: who arrived, who died, who never joined."""
        line = (f"rank(s) did not join within {self.timeout_s:g} s (--timeout): waited for {expected} processes, "
                f"{arrived} arrived")
        dead = self.dead_children()
        late = [rank for rank, proc in self.children if proc.poll() is None]
        if dead:
            line += f"; {describe_dead(dead)} before joining"
        if late:
            line += f"; rank {', '.join(map(str, late))} started but never joined"
        return line


def _furthest_behind_stalled(world_size: int) -> str | None:
    """'rank 2 stopped: <its stall line>' for the stalled rank furthest behind (then the lowest), if any stalled."""
    lines = {rank: text[len(peers.MARK_STALLED):] for rank, text in peers.posts(world_size).items()
             if text.startswith(peers.MARK_STALLED)}
    if not lines:
        return None
    progress = peers.progress_posts(world_size)
    rank = min(lines, key=lambda r: (progress.get(r, (float("inf"),)), r))
    return f"rank {rank} stopped: {lines[rank]}"


def hung_line(progress: dict[int, tuple], world_size: int) -> str | None:
    """The rank(s) that hung, from {rank: (steps, batches, all-reduces issued)} as each rank's deadline found it.

    Every rank blocks at once when one hangs, and each one's deadline fires: the rank that hung is the one
    furthest behind, not the lowest-numbered. Under NCCL the others ran ahead to their next device sync (steps
    queue on the GPU without waiting for the collective); under gloo they block inside the hung rank's step,
    having issued its gradient all-reduces, which the hung rank has not: the third number tells them apart.
    Ranks that posted nothing (a process stopped, a node gone) are named when the others are level. None when
    nothing sets a rank apart."""
    if not progress:
        return None
    low, high = min(progress.values()), max(progress.values())
    steps = ", ".join(f"{rank}: {p[0]}" for rank, p in sorted(progress.items()))
    if low < high:
        behind = [rank for rank, p in sorted(progress.items()) if p == low]
        who = f"rank {behind[0]}" if len(behind) == 1 else f"ranks {', '.join(map(str, behind))}"
        level = low[0] == high[0]
        return (f"{who} hung during step {low[0] + 1}: furthest behind (last completed step by rank: {steps}"
                + (f"; {low[2]} gradient all-reduces issued, the others up to {high[2]})" if level else ")"))
    silent = [rank for rank in range(world_size) if rank not in progress]
    if silent:
        who = f"rank {silent[0]}" if len(silent) == 1 else f"ranks {', '.join(map(str, silent))}"
        return (f"{who} never reported while the others waited after step {low[0]} (its process stopped, hung "
                "without a thread running, or on a node that is gone)")
    return None


_STATES = {"R": "running", "S": "sleeping", "D": "waiting on I/O", "T": "stopped, e.g. by SIGSTOP",
           "t": "stopped by a debugger"}


def _state(pid: int) -> str:
    code = peers.state_code(pid)
    return "state unknown" if code is None else _STATES.get(code, f"state {code}")


def recorded(path: str) -> bool:
    """Whether a run's folder holds how it ended: a result.json that is not rank 0's provisional one (written as it
    claimed the folder, payload.provisional_payload)."""
    try:
        data = json.loads(files.read_bytes(path, "result"))
    except (ResultError, ValueError):  # none there, or none a reader takes: nothing recorded
        return False
    return isinstance(data, dict) and data.get("provisional") is not True
