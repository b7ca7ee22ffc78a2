"""No hidden per-step work: what a rank does between two optimizer steps, counted in real runs (train/loop.py).

tests/countcalls/sitecustomize.py records every torch.distributed collective, every host read of a tensor by
scalelab's or Lightning's code (`item`, `tolist`, ...: a device sync on a GPU), scalelab's device sync, and the
loop's once-per-step `zero_grad`. Cut at the `zero_grad`s, segment k holds the loop's window after step k (when
step k is a sync point) and the forward/backward of step k+1. Each must be exactly:

* a normal step: DDP's gradient buckets, nothing else (no collective of the framework's, no sync, no read);
* a compute-only probe: no DDP all-reduce; the same buckets all-reduced alone, each pass after a barrier;
* at a sync point (after step 1, then every SYNC_EVERY steps for these 1 ms steps): one small all-reduce (the
  ranks' agreement on signals and the next sync point), one device sync and the host reads of the window (the
  losses, the agreement's numbers).

A framework collective, a `.item()` or a sync added to every step fails this test, whatever else it does.
An FSDP step (--strategy fsdp) likewise: its all-gathers and reduce-scatters, as timed by scalelab, and nothing else.
"""

import collections
import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT, SRC
from scalelab.train.loop import SYNC_EVERY, is_probe

pytestmark = pytest.mark.slow
STEPS, WARMUP = 40, 5
MLP = ["--model", "mlp", "--num_samples", "20000", "--max_steps", STEPS, "--warmup_steps", WARMUP, "--timeout", 60]
DDP, AGREE = ("collective", "all_reduce", "grad"), ("collective", "all_reduce", "control")
BARRIER, SYNC = ("collective", "barrier", "control"), ("sync", "comm.sync", "")


def counted_run(tmp_path, *args, workload=MLP) -> list:
    """train.py with the counting shim; [(rank, [segment Counter, ...])] for every rank."""
    count_dir = tmp_path / "counts"
    count_dir.mkdir()
    env = {**os.environ, "SCALELAB_COUNT_DIR": str(count_dir), "PYTHONPATH": str(ROOT / "tests" / "countcalls"),
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, str(SRC / "train.py"), *map(str, workload), *map(str, args), "--output_dir",
                           str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = []
    for path in count_dir.glob("*.json"):
        data = json.loads(path.read_text())
        segments = [collections.Counter()]
        for kind, name, numel in data["calls"]:
            if kind == "step":
                segments.append(collections.Counter())
            else:
                size = ("control" if numel < 1024 else "grad") if kind == "collective" else ""
                segments[-1][(kind, name, size)] += 1
        ranks.append((int(data["env_rank"]), segments))
    return sorted(ranks, key=lambda r: r[0])


def expected(k: int, world: int, buckets: int, probe_every: int, passes: int) -> collections.Counter:
    """Segment k (1 <= k < STEPS): the window after step k, then step k+1 (0-based index k)."""
    want = collections.Counter()
    if k % SYNC_EVERY == 1:  # the loop's sync point: read the window, agree on signals (not after the last step)
        want[SYNC] += 1
        want[("read", "tolist", "")] += 1  # the window's losses, one copy
        if world > 1:
            want[AGREE] += 1
            want[("read", "tolist", "")] += 1  # the agreement's numbers
    if world > 1 and is_probe(k, WARMUP, probe_every):
        want[BARRIER] += passes
        want[DDP] += passes * buckets  # the buckets alone, not DDP's
        want[SYNC] += 2 * passes
    elif is_probe(k, WARMUP, probe_every):  # one device: the probe drains the device as the all-reduce alone does
        want[SYNC] += 1
    elif world > 1:
        want[DDP] += buckets
    return want


@pytest.mark.parametrize("world, args, probe_every", [
    (2, [], 5),  # probes, --logger csv (the defaults)
    (2, ["--accumulate_grad_batches", "2"], 5),  # one all-reduce per optimizer step of two batches
    (2, ["--comm_probe_every", "0", "--logger", "none"], 0),
    (1, [], 5),
])
def test_a_step_does_ddps_all_reduce_and_nothing_else(tmp_path, world, args, probe_every):
    ranks = counted_run(tmp_path, "--devices", world, *args)
    assert [r for r, _ in ranks] == list(range(world))
    for rank, segments in ranks:
        assert len(segments) == STEPS + 1, (rank, len(segments))  # setup + one segment after each step
        buckets = segments[1][DDP] if world > 1 else 0
        assert world == 1 or buckets >= 1
        probes = [seg for k, seg in enumerate(segments[1:STEPS], 1) if world > 1 and is_probe(k, WARMUP, probe_every)]
        passes = probes[0][BARRIER] if probes else 0
        assert not probe_every or world == 1 or passes >= 1
        for k in range(1, STEPS):
            assert segments[k] == expected(k, world, buckets, probe_every, passes), (rank, k, dict(segments[k]))


GPT = ["--model", "gpt", "--preset", "tiny", "--max_steps", STEPS, "--warmup_steps", WARMUP, "--timeout", 60]
GATHER, SCATTER = ("collective", "all_gather_single", "grad"), ("collective", "reduce_scatter_single", "grad")


@pytest.mark.parametrize("world", [2, 1])
def test_an_fsdp_step_does_its_gathers_and_scatters_and_nothing_else(tmp_path, world):
    """The tiny GPT sharded: every step its 4 blocks gathered twice and the root once (9), its 5 units scattered,
    through scalelab's timed collectives; at one rank none (FSDP2 runs no collective over one rank); besides, at
    the loop's sync points (their cadence follows the step time: these steps are not the MLP's 1 ms), what DDP's
    have; no DDP all-reduce, no other collective, sync or read anywhere."""
    ranks = counted_run(tmp_path, "--devices", world, "--strategy", "fsdp", "--logger", "none", workload=GPT)
    assert [r for r, _ in ranks] == list(range(world))
    step = collections.Counter({GATHER: 9, SCATTER: 5} if world > 1 else {})
    sync_point = collections.Counter({SYNC: 1, ("read", "tolist", ""): 2 if world > 1 else 1,
                                      **({AGREE: 1} if world > 1 else {})})
    for rank, segments in ranks:
        assert len(segments) == STEPS + 1, (rank, len(segments))
        synced = 0
        for k in range(1, STEPS):
            with_sync = segments[k][SYNC] > 0
            synced += with_sync
            assert segments[k] == step + (sync_point if with_sync else collections.Counter()), (rank, k,
                                                                                               dict(segments[k]))
        assert synced >= 2, (rank, synced)  # the window was read and the ranks agreed, more than once
