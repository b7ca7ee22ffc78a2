"""Rank liveness across hosts (train/guard/peers.py, watch.py): a pid means something only on the host that posted it.

Every rank posts (host, pid) at start-up; rank 0 finds a rank gone by its pid, and rank 1 finds rank 0 gone the same
way, but only where the post names this host: on another node the same number is another process, or none. Here
the posts go to a real key-value store (the kind the process group serves) naming another host, with a pid that
is free on this one: a live rank on another node must never be taken for a dead one.
"""

import os
import socket
import time

import pytest
import torch.distributed as dist

from scalelab.train.guard import peers
from scalelab.train.guard.watch import RankWatch

OTHER_HOST = socket.gethostname() + "-node2"


def free_pid() -> int:
    """A pid no process of this host has now."""
    top = int(open("/proc/sys/kernel/pid_max").read()) if os.path.exists("/proc/sys/kernel/pid_max") else 32768
    return next(pid for pid in range(top - 1, 1, -1) if not os.path.exists(f"/proc/{pid}"))


@pytest.fixture
def store(monkeypatch):
    store = dist.HashStore()
    monkeypatch.setattr(peers, "_store", lambda: store)
    return store


def post(store, rank, host, pid):
    store.set(f"{peers.WHERE_PREFIX}{rank}", f"{host} {pid}")


def test_a_rank_on_another_host_is_not_gone_because_its_pid_is_free_here(store):
    gone_here, dead = free_pid(), free_pid()
    post(store, 1, OTHER_HOST, gone_here)  # alive on node 2: its pid means nothing here
    post(store, 2, socket.gethostname(), dead)  # on this host, and its process is gone
    post(store, 3, socket.gethostname(), os.getpid())  # on this host, alive
    assert peers.gone_on_this_host(4) == [(2, None)]


def _rank1(rank0_where):
    """Rank 1's watch as `joined` leaves it, without the signal handlers and launcher marks of a real start-up."""
    watch = RankWatch.__new__(RankWatch)
    watch.rank, watch.world_size, watch.rank0_where = 1, 2, rank0_where
    watch.run_folder, watch.records_for_rank0 = None, False
    return watch


def test_rank_1_on_another_host_asks_the_store_not_a_pid_whether_rank_0_is_alive(store):
    post(store, 0, OTHER_HOST, free_pid())
    watch = _rank1(peers.where(0, wait_s=1))
    assert watch.rank0_lost() is None and not watch.records_for_rank0  # the store answers: rank 0 records its run
    # on this host the pid is read: a free pid is a rank 0 gone, and rank 1 records the run for it
    here = _rank1((socket.gethostname(), free_pid()))
    assert here.rank0_lost().startswith("rank 0 died without a word") and here.records_for_rank0


def test_a_rank_behind_a_cut_link_is_silent_though_it_posted_progress_before_the_wait(store, monkeypatch):
    """A fresh-clone make test beside a busy neighbour: rank 1 (node 2) paused and resumed, posting its progress
    both times, then the link was cut; rank 0's record said only gloo's "Timed out waiting 15000ms for recv"."""
    monkeypatch.setattr(peers, "node_rank", lambda: 0)
    store.set(f"{peers.NODE_PREFIX}1", "1")
    store.set(f"{peers.NODE_PREFIX}2", "1")
    monkeypatch.setattr(peers.time, "time", lambda: 1000.0)
    peers.post_progress(1, (7, 7, 21))  # before the collective that timed out began
    monkeypatch.setattr(peers.time, "time", lambda: 1030.0)
    peers.post_progress(2, (7, 7, 21))  # during it: rank 2 answers, its node and link are up
    assert peers.progress_posts(3) == {1: (7, 7, 21), 2: (7, 7, 21)}  # what hung_line reads: no time in it
    assert peers.silent_elsewhere(3, spoke_since=1030.0 - 20) == [(1, 1)]
    assert peers.silent_elsewhere(3, spoke_since=1000.0) == []  # a post at the wait's start is a word
    assert peers.silent_elsewhere(3) == [(1, 1), (2, 1)]  # a closed connection: only an error is a word
    peers.post_error(1, "RuntimeError: boom")
    assert peers.silent_elsewhere(3, spoke_since=1010.0) == [] and peers.silent_elsewhere(3) == [(2, 1)]


def _rank0(world_size):
    """Rank 0's watch on a node that launched no rank (the others are srun's, on other nodes)."""
    watch = RankWatch.__new__(RankWatch)
    watch.rank, watch.world_size, watch.children, watch._killed_by_us = 0, world_size, [], set()
    return watch


def test_a_pause_posted_before_rank_0_last_moved_is_not_read_as_where_a_rank_hung(store, monkeypatch):
    """CI, stop 69: rank 1 (node 2) waited on a slow rank 0 in step 4 long enough to post a pause (3 steps), went on
    (so rank 0 could finish step 4) and died in step 5 before its next poll; rank 0, blocked in step 5, read the
    pause as where rank 1 was and named it hung in step 4. A pause counts only where posted after rank 0 last
    moved; a stop (post_stall) always."""
    monkeypatch.setattr(peers.time, "time", lambda: 1000.0)
    peers.post_progress(1, (3, 4, 9))
    assert _rank0(2).hung_rank((4, 5, 12), wait_s=0.2, moved_at=1000.5).startswith(
        "rank 1 never reported while the others waited after step 4")
    # rank 0 wedged at 999.5 and rank 1 paused behind it (test_faults: rank 0 blocked for good): rank 0 is named
    assert _rank0(2).hung_rank((3, 4, 8), wait_s=0.2, moved_at=999.5).startswith("rank 0 hung during step 4")
    peers.post_stall(1, (3, 4, 9), "no progress for 18 s during step 4")  # a stop: rank 1 is blocked there now
    assert _rank0(2).hung_rank((4, 5, 12), wait_s=0.2, moved_at=1000.5).startswith(
        "rank 1 hung during step 4: furthest behind")


def test_rank_0_waits_for_a_word_newer_than_its_own_last_move(store, monkeypatch):
    """Rank 2's pause is older than rank 0's last move and rank 1 stopped: rank 0 waits its whole wait for rank 2,
    then names it silent."""
    monkeypatch.setattr(peers.time, "time", lambda: 1000.0)
    peers.post_progress(2, (4, 5, 12))
    peers.post_stall(1, (4, 5, 12), "no progress")
    started = time.monotonic()
    line = _rank0(3).hung_rank((4, 5, 12), wait_s=0.5, moved_at=1001.0)
    assert time.monotonic() - started >= 0.5 and line.startswith("rank 2 never reported"), line
