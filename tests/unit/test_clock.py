"""The step clock on a GPU, without one: CUDA events on a simulated GPU timeline, read after one sync per window.

The GPU runs behind the host: the host queues a step in 1 ms, the GPU takes 50 ms for it. A clock that read the
host clock without a sync would measure 1 ms steps; this one must measure 50 ms, while syncing only when the loop
reads a window (every SYNC_EVERY steps), and a failing run (no sync allowed: the device may be blocked) keeps the
finished steps only.
"""

from types import SimpleNamespace

import pytest
import torch

from scalelab import record
from scalelab.train import clock, comm, loop, probe
from scalelab.train import payload as record_module


class Gpu:
    """A GPU timeline and the host's clock: the host spends 1 ms on each thing it queues; the GPU starts queued
    work when it is free and the work has been queued; a sync makes the host wait until the GPU is done."""

    def __init__(self):
        self.queued_ms = 0.0  # when the work queued so far will have finished, on the GPU clock
        self.now_ms = 0.0  # how far the GPU has got
        self.host_ms = 0.0  # the host's clock (perf_counter), on the same time axis
        self.syncs = 0

    def queue(self, ms):
        self.host_ms += 1.0
        self.queued_ms = max(self.queued_ms, self.host_ms) + ms

    def perf_counter(self):
        return self.host_ms / 1e3

    def event_class(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.ms = None

            def record(self):
                gpu.queue(0.0)
                self.ms = gpu.queued_ms

            def query(self):
                return self.ms <= gpu.now_ms

            def elapsed_time(self, later):
                assert self.query() and later.query(), "read an event the GPU has not reached"
                return later.ms - self.ms

        return Event

    def sync(self, device):
        self.syncs += 1
        self.now_ms = self.queued_ms
        self.host_ms = max(self.host_ms, self.now_ms)


@pytest.fixture
def gpu(monkeypatch):
    gpu = Gpu()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(comm, "sync", gpu.sync)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)  # no CUDA here to ask
    monkeypatch.setattr(clock, "time", SimpleNamespace(perf_counter=gpu.perf_counter, time=lambda: 0.0))
    return gpu


def _steps(steps, gpu, n, step_ms=50.0, read_every=None):
    """n steps as the loop marks them; a window read every `read_every` steps, as the loop does."""
    for i in range(n):
        gpu.queue(step_ms * 0.8)  # forward and backward
        steps.grads_ready()
        gpu.queue(step_ms * 0.2)  # the optimizer
        steps.batch_end(torch.tensor(2.0 - i / 100), True, False)
        if read_every and (i + 1) % read_every == 0:
            steps.read()


def _record(steps):
    """The rank's record as train/payload.py assembles it from the host inventory and the clock's figures."""
    return {**record_module.inventory(steps.device), **steps.figures()}


def _clock():
    steps = clock.StepClock(torch.device("cuda", 0), process_start=0.0, comm_timer=comm.CommTimer())
    steps.start()
    return steps


def test_gpu_steps_are_timed_on_the_gpu_clock_with_one_sync_per_window(gpu):
    steps = _clock()
    before = gpu.syncs
    _steps(steps, gpu, 2 * loop.SYNC_EVERY, read_every=loop.SYNC_EVERY)
    assert gpu.syncs - before == 2  # one per window of SYNC_EVERY steps, not one (or three) per step
    # 50 ms of GPU work per step; the step after a sync also pays the few ms the host needs to queue work again
    assert steps.step_times == [pytest.approx(0.050, abs=0.004)] * (2 * loop.SYNC_EVERY), steps.step_times
    assert steps.ready_times == [pytest.approx(0.040, abs=0.004)] * (2 * loop.SYNC_EVERY)
    assert steps.losses[:2] == [2.0, 1.99] and not steps.pending and steps.steps == 2 * loop.SYNC_EVERY


def test_a_failing_run_keeps_the_steps_the_gpu_finished_and_never_waits(gpu, monkeypatch):
    steps = _clock()
    _steps(steps, gpu, 4)
    gpu.now_ms = steps.pending[1][0].ms  # the GPU finished two of the four queued steps, then blocked
    syncs = gpu.syncs
    monkeypatch.setattr(record_module.cluster, "device_name", lambda *a: "NVIDIA A100")  # no CUDA here to ask
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 0)  # likewise
    uuid = "GPU-3f1c2b7a-0000-4000-8000-0000000000aa"
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: SimpleNamespace(uuid=uuid))
    record = _record(steps)
    assert gpu.syncs == syncs  # no sync: it would never return
    assert record["gpu_uuid"] == uuid and record["loop_wall_s"] is None  # the loop never ended
    assert record["step_times_s"] == [pytest.approx(0.050, abs=0.004)] * 2
    assert record["losses"] == []  # a GPU loss is read by a copy queued behind the blocked work: not read
    assert len(steps.pending) == 2 and steps.steps == 4  # 4 ended on the host: "during step 5" if it fails now


def test_after_a_sticky_cuda_error_the_record_keeps_the_read_steps_and_never_raises(gpu, monkeypatch, tmp_path):
    from scalelab import config
    from scalelab.launch.cluster import Launch
    from scalelab.train.guard import failure
    from scalelab.train.payload import RunContext

    """An illegal address, an ECC or Xid error: from then on every CUDA call raises, event.query() too. The failing
    run's record must still be written, with the steps read before it (a raise there left no record at all)."""
    steps = _clock()
    _steps(steps, gpu, 3, read_every=3)  # three steps read
    _steps(steps, gpu, 2)  # two queued when the error came

    def sticky(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    for event, _, _, (_, cuda_events), _, _ in steps.pending:
        event.query = sticky
        for _start, end in cuda_events:
            end.query = sticky
    monkeypatch.setattr(record_module.cluster, "device_name", lambda *a: "NVIDIA A100")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", sticky)
    monkeypatch.setattr(torch.cuda, "get_device_properties", sticky)
    record = _record(steps)
    assert len(record["step_times_s"]) == 3 and len(steps.pending) == 2
    assert record["peak_memory_bytes"] is None and record["gpu_uuid"] is None
    assert comm.CommTimer.done(([], [(None, SimpleNamespace(query=sticky))])) is False
    # the failure path end to end: rank 0's partial result and its error log are on disk
    cfg = config.for_accelerator(config.parse_config(["--model", "mlp", "--output_dir", str(tmp_path)]), "gpu")
    ctx = RunContext(cfg, Launch("local", 1, 1, "gpu"), 64, 0.0, steps, probe.AloneProbe(steps.device, 1, steps.comm))
    note = failure.record_failure(ctx, "failed", "CUDA error: an illegal memory access", RuntimeError("sticky"))
    (path,) = tmp_path.rglob("result.json")
    assert note == f" (partial result: {path})" and (path.parent / "error.log").exists()


def test_epoch_end_reads_the_window_and_the_epoch_time_is_on_the_gpu_clock(gpu):
    steps = _clock()
    steps.epoch_start()
    _steps(steps, gpu, 3)
    steps.epoch_end()
    assert len(steps.step_times) == 3 and steps.epoch_times == [pytest.approx(0.150, abs=0.006)]


def test_batches_become_optimizer_steps_of_k_batches_each():
    from scalelab.measure.steps import optimizer_view

    record = {"rank": 1, "step_ends": [1, 3, 4],  # batches 0-1, 2-3, then 4 alone (the run ended); 5 never ended
              "step_times_s": [1, 2, 3, 4, 5, 6], "grads_ready_times_s": [0.5, 1.5, 2.5, 3.5, 4.5, 5.5],
              "allreduce_times_s": [0, 0.1, 0, 0.2, 0.3, 9], "buckets": [0, 2, 0, 2, 1, 9]}
    assert optimizer_view(record) == {
        **record, "short_steps": [2], "step_times_s": [3, 7, 5],
        "grads_ready_times_s": [1 + 1.5, 3 + 3.5, 4.5],  # the first K-1 batches whole, then the last one's ready time
        "allreduce_times_s": [0.1, 0.2, 0.3], "buckets": [2, 2, 1],
        "forward_times_s": None, "backward_times_s": None}  # no marks in the record: none made up
    assert optimizer_view({"step_times_s": [1]}) == {"step_times_s": [1]}  # every batch a step: as it is
    empty = {"step_ends": [], "step_times_s": [], "grads_ready_times_s": [], "allreduce_times_s": [], "buckets": []}
    assert optimizer_view(empty) == {**empty, "short_steps": [], "forward_times_s": None, "backward_times_s": None}


def test_run_figures_from_two_ranks_clocks_by_hand():
    from scalelab.measure import timing

    ranks = [{"step_times_s": [1.0, 0.2, 0.3, 0.25, 0.4, 0.2], "grads_ready_times_s": [0.5, 0.15, 0.2, 0.2, 0.3, 0.15],
              "allreduce_times_s": [0, 0.05, 0, 0.06, 0.07, 0.08], "allreduce_alone_times_s": [0.03, 0.05],
              "buckets": [0, 2, 0, 2, 3, 2], "losses": [3.0, 2.0, 1.5], "probe_steps": [2], "grad_bytes": 1e6,
              "bucket_bytes": [5e5, 5e5], "epoch_times_s": [2.5], "first_step_end": 15.0, "process_start": 10.0,
              "probe_cpu_s": [[1.0, 0.1]]},
             {"step_times_s": [1.2, 0.2, 0.1, 0.35, 0.2, 0.4], "grads_ready_times_s": [0.6, 0.12, 0.25, 0.28, 0.2, 0.3],
              "allreduce_times_s": [0, 0.04, 0, 0.09, 0.05, 0.1], "allreduce_alone_times_s": [0.04],
              "buckets": [0, 2, 0, 2, 2, 2], "losses": [3.0, 2.0, 0.5]}]
    got = record.plain(timing.summarize(ranks, warmup_steps=1, samples_per_step=10, tokens_per_sample=5))
    assert timing.final_loss(ranks, got["steps"]) == 1.0  # the ranks' last losses: 1.5 and 0.5
    # step 0 warm-up, step 2 a probe: steps 1, 3, 4, 5 timed, each the mean over the ranks: 0.2, 0.3, 0.3, 0.3
    assert got == {
        "warmup_steps": 1, "steps": 6, "timed_steps": 4, "train_time_s": pytest.approx(1.1),
        "step_s": {"median": pytest.approx(0.3), "mean": pytest.approx(0.275), "min": pytest.approx(0.2),
                        "max": pytest.approx(0.3), "p90": pytest.approx(0.3)},  # 0.9 x 3 = 2.7 places up: 0.3
        "samples_per_step": 10, "samples_per_s": pytest.approx(40 / 1.1), "tokens_per_s": pytest.approx(200 / 1.1),
        "epoch_times_s": [2.5], "first_step_s": 5.0,
        "comm": {"probe_steps": 1,
                 "compute_s": 0.25,  # the probe's gradients-ready, slowest rank
                 "synced_s": pytest.approx(0.29),  # median of the slowest rank's 0.15, 0.28, 0.3, 0.3
                 "waited_s": pytest.approx(0.04),  # no backward marks (an older result): against the probe
                 "waited_in_step": 0,
                 "allreduce_s": pytest.approx(0.055),  # median of the least rank's 0.04, 0.06, 0.05, 0.08
                 "allreduce_alone_s": 0.03,  # only as many alone runs as every rank has: min(0.03, 0.04)
                 "hidden_s": pytest.approx(0.015), "hidden_fraction": pytest.approx(0.015 / 0.055),
                 "comm_share": pytest.approx(0.04 / 0.3), "grad_bytes": 1e6,
                 "bucket_bytes": [5e5, 5e5], "buckets": 2,  # wire_bytes: none sent apart (no --comm_hook)
                 "ddp_busbw_GBps": pytest.approx(1e6 / 0.055 / 1e9)},  # n = 2: busbw = algbw
        "had_cpu": [0.909, None]}  # rank 0's probe: 1 s on a core, 0.1 s waiting for one; rank 1 has no figures


def test_one_rank_waits_for_nobody_and_a_short_run_keeps_its_last_step():
    from scalelab.measure import timing

    one = [{"step_times_s": [0.5, 0.1, 0.3], "grads_ready_times_s": [0.2, 0.09, 0.05], "allreduce_times_s": [0, 0, 0],
            "buckets": [1, 1, 1], "losses": [], "probe_steps": [2], "grad_bytes": 1000, "wire_bytes": [400],
            "epoch_times_s": [], "first_step_end": None, "process_start": 1.0}]
    got = timing.summarize(one, warmup_steps=9, samples_per_step=4, tokens_per_sample=None)
    assert (got.warmup_steps, got.timed_steps, got.train_time_s) == (2, 0, 0)  # step 2 is the probe
    assert got.samples_per_s is None and got.tokens_per_s is None and got.step_s is None
    assert got.first_step_s is None and timing.final_loss(one, got.steps) is None and got.had_cpu is None
    assert got.comm is None  # no normal step to compare the probe with
    comm = timing.comm_summary(one, [1], [2])
    assert comm.waited_s == 0.0 and comm.ddp_busbw_GBps is None and comm.hidden_fraction is None
    assert comm.comm_share == 0.0 and comm.wire_bytes == [400] and comm.allreduce_alone_s is None
    assert timing.comm_summary(one, [1], []) is None and timing.comm_summary(one, [], [2]) is None


def _rank(times, ready=None, **kw):
    n = len(times)
    return {"step_times_s": times, "grads_ready_times_s": ready or [t / 2 for t in times],
            "allreduce_times_s": [0.01] * n,
            "buckets": [1] * n, "losses": [], "epoch_times_s": [], "first_step_end": None, "process_start": 0.0, **kw}


def test_statistics_of_the_timed_steps():
    import numpy as np

    from scalelab.measure import timing

    assert timing._stats([0.5]) == {"median": 0.5, "mean": 0.5, "min": 0.5, "max": 0.5, "p90": 0.5}
    # p90 interpolates between the sorted steps (numpy's default "linear", Python's "inclusive"): position
    # 0.9 x (n - 1) from the fastest. Ten steps 1..10: 0.9 x 9 = 8.1 past the first, 9 + 0.1 x (10 - 9) = 9.1
    ten = [float(x) for x in range(1, 11)]
    assert timing._stats(ten)["p90"] == pytest.approx(9.1)
    assert timing._stats(ten)["p90"] == pytest.approx(np.percentile(ten, 90))
    # two steps: 0.9 of the way from 1 to 2 is 1.9; never above the slowest step (the "exclusive" method
    # extrapolated to 2.7 here, a p90 no step took)
    assert timing._stats([1.0, 2.0])["p90"] == pytest.approx(1.9)
    for steps in ([1.0, 2.0], [0.3, 0.1, 0.2], [5.0, 5.0], [0.2, 0.3, 0.3, 0.3]):
        assert min(steps) <= timing._stats(steps)["p90"] <= max(steps)
    assert timing._stats([]) is None


def test_warm_up_short_steps_and_unfinished_probes_stay_out_of_the_figures():
    from scalelab.measure import timing

    # no warm-up: step 0 is timed; 20 steps: the final loss is the mean of each rank's last 2
    ran = [_rank([0.1] * 20, losses=[9.0] * 17 + [5.0, 1.0, 3.0])]
    got = timing.summarize(ran, 0, 4, None)
    assert (got.warmup_steps, got.timed_steps) == (0, 20) and timing.final_loss(ran, got.steps) == 2.0
    assert got.samples_per_s == pytest.approx(80 / 2.0) and got.tokens_per_s is None
    quick = timing.summarize([_rank([0.1, 0.2, 0.2])], 1, 4, 10)  # under a second in all
    assert quick.samples_per_s == pytest.approx(8 / 0.4) and quick.tokens_per_s == pytest.approx(80 / 0.4)
    none = timing.summarize([_rank([0.1, 0.2], probe_steps=[1])], 1, 4, 10)
    assert none.samples_per_s is None and none.tokens_per_s is None  # the only step after warm-up: a probe
    # K = 2: batches 0-1, 2-3, 4-5, 6 (short); the short step is neither timed nor a probe
    acc = _rank([0.1] * 7, step_ends=[1, 3, 5, 6], probe_steps=[3], ready=[0.05] * 7)
    acc_two = dict(acc, rank=1)
    got = timing.summarize([acc, acc_two], 1, 8, None)
    assert (got.steps, got.timed_steps) == (4, 2) and got.train_time_s == pytest.approx(0.4)
    assert got.comm is None  # probe 3 is the short step: no probe left to compare with
    probes = _rank([0.3, 0.2, 0.2, 0.2], ready=[0.1, 0.1, 0.15, 0.1], probe_steps=[1, 4])  # 4: never ended
    got = timing.summarize([probes, dict(probes, rank=1)], 1, 8, None)
    assert got.comm.probe_steps == 1 and got.comm.compute_s == 0.1  # step 1, at the warm-up's end


def test_busbw_comes_from_the_bytes_on_the_wire_and_needs_two_ranks_and_a_measured_all_reduce():
    from scalelab.measure import timing

    hooked = _rank([0.2, 0.2, 0.2], ready=[0.1, 0.1, 0.12], grad_bytes=4e6, wire_bytes=[1e6, 1e6])
    two = [hooked, dict(hooked, rank=1)]
    comm = timing.comm_summary(two, [2], [1])
    assert comm.ddp_busbw_GBps == pytest.approx(2e6 / 0.01 / 1e9) and comm.wire_bytes == [1e6, 1e6]
    assert comm.hidden_fraction == pytest.approx(0.0) and comm.hidden_s == 0.0  # waited 20 ms > 10 ms busy
    alone = timing.comm_summary([hooked], [2], [1])  # one rank: nothing crossed a link
    assert alone.ddp_busbw_GBps is None and alone.waited_s == 0.0
    idle = [dict(r, allreduce_times_s=[0.0] * 3) for r in two]
    assert timing.comm_summary(idle, [2], [1]).ddp_busbw_GBps is None
    zero = [dict(r, step_times_s=[0.0] * 3) for r in two]
    assert timing.comm_summary(zero, [2], [1]).comm_share is None
    # the waits' median past the steps' (other steps, a loaded machine): a share of a step is at most all of it
    skewed = [dict(r, step_times_s=[0.1] * 3, grads_ready_times_s=[0.1, 0.05, 0.3]) for r in two]
    assert timing.comm_summary(skewed, [2], [1]).waited_s == pytest.approx(0.25)
    assert timing.comm_summary(skewed, [2], [1]).comm_share == 1.0


def test_the_share_of_a_core_is_read_around_each_probes_compute():
    """The clock reads the scheduler's figures at probe_start and again before the probe's all-reduce alone:
    one [on-core, waiting] span per probe step, and none for a step that was not a probe."""
    readings = iter([[(1.0, 0.5)], [(1.75, 0.75)], [(9.0, 9.0)]])  # one thread's figures (Threads.read)
    c = SimpleNamespace(threads=SimpleNamespace(read=lambda: next(readings)), cpu=[], _cpu_start=None,
                        world_size=1, comm=SimpleNamespace(bucket_bytes=[]), device=torch.device("cpu"))
    probe.AloneProbe.start(c)
    probe.AloneProbe.allreduce_alone(c)
    assert c.cpu == [[0.75, 0.25]] and c._cpu_start is None  # 75 % of its ready time on a core
    probe.AloneProbe.allreduce_alone(c)  # no start: no span (the reading is not taken as one)
    assert c.cpu == [[0.75, 0.25]]


# --- the reads that are not the window's: the loop's host interval, the first step's wall time, the alone figure


def test_the_loops_host_interval_waits_for_the_gpu_before_it_is_read(gpu):
    """loop_end reads the host clock around the loop: after a device sync, or it ends when the host has queued the
    last steps, not when the GPU has run them (the self-check holds one against the other: a gap it would flag)."""
    steps = _clock()
    _steps(steps, gpu, loop.SYNC_EVERY, read_every=loop.SYNC_EVERY)
    _steps(steps, gpu, 3)  # the last steps, queued, not read: the loop has ended
    steps.loop_end()
    steps.read()
    assert len(steps.step_times) == loop.SYNC_EVERY + 3
    assert steps.loop_wall_s == pytest.approx(sum(steps.step_times), abs=0.003), (steps.loop_wall_s, steps.step_times)


def test_the_first_steps_wall_clock_end_is_when_the_gpu_ran_it_not_when_it_was_read(gpu, monkeypatch):
    """first_step_end is wall-clock time (the report's time to first step): the first step's GPU end, placed on the
    wall clock, even though it is read a window of steps later."""
    wall = 1_000_000.0  # the wall clock's reading when perf_counter reads 0
    monkeypatch.setattr(clock, "time", SimpleNamespace(perf_counter=gpu.perf_counter,
                                                       time=lambda: wall + gpu.perf_counter()))
    steps = _clock()
    _steps(steps, gpu, loop.SYNC_EVERY, read_every=loop.SYNC_EVERY)  # read after 10 steps of 50 ms
    assert steps.first_step_end - wall == pytest.approx(steps.step_times[0], abs=0.003)
    assert steps.first_step_end - wall == pytest.approx(0.051, abs=0.003)


def test_the_all_reduce_alone_is_timed_on_the_gpus_work_not_its_launch(gpu, monkeypatch):
    """The probe's all-reduce alone (comm.median_allreduce_s): a host clock around queued all-reduces, so a device
    sync before and after each pass; 2 buffers of 20 ms of GPU work each are 40 ms, not the host's 2 ms."""
    monkeypatch.setattr(comm, "time", SimpleNamespace(perf_counter=gpu.perf_counter))
    monkeypatch.setattr(comm, "barrier", lambda device: None)
    monkeypatch.setattr(comm, "dist", SimpleNamespace(all_reduce=lambda buf, op: gpu.queue(20.0)))
    gpu.queue(500.0)  # work queued before the probe (the step's own): not the all-reduce's
    once = comm.median_allreduce_s([object(), object()], torch.device("cuda", 0), passes=1)
    assert once == pytest.approx(0.040, abs=0.003)  # one pass: the work queued before it is waited out first
    gpu.queue(500.0)
    assert comm.median_allreduce_s([object(), object()], torch.device("cuda", 0), passes=3) == pytest.approx(0.040,
                                                                                                              abs=0.003)


@pytest.mark.parametrize("world", [1, 2])
def test_a_probe_step_ends_with_the_device_drained_at_every_world_size(gpu, monkeypatch, world):
    """At N devices the probe's all-reduce alone syncs the device; at 1 there is none, and the step after a probe
    must still start on an idle device, or the 1-device baseline's next step starts with the probe's compute queued
    where the N-device one's does not."""
    monkeypatch.setattr(comm, "barrier", lambda device: None)
    monkeypatch.setattr(comm, "dist", SimpleNamespace(all_reduce=lambda buf, op: gpu.queue(1.0)))
    monkeypatch.setattr(comm, "Scratch", lambda: SimpleNamespace(views=lambda sizes, device, dtype: [object()]))
    timer = comm.CommTimer()
    timer.bucket_bytes = [4096] if world > 1 else []
    alone = probe.AloneProbe(torch.device("cuda", 0), world, timer)
    alone.scratch = comm.Scratch()
    gpu.queue(500.0)  # the probe's forward and backward, queued
    alone.allreduce_alone()
    assert gpu.now_ms == gpu.queued_ms  # nothing of the probe left for the next step to wait behind


def test_a_run_without_probe_steps_records_how_long_its_collectives_were_busy():
    """FSDP takes no probe step: what its timed all-gathers and reduce-scatters say alone, per step the rank that
    waited least (the others' extra wait is skew), and how many a step issued; nothing for one rank."""
    from scalelab.measure import timing

    def fsdp(rank, busy):
        return dict(_rank([0.3, 0.3, 0.3, 0.3], ready=[0.2] * 4, probe_steps=[]), rank=rank, grad_bytes=8e6,
                    allreduce_times_s=busy, buckets=[14] * 4)

    got = timing.summarize([fsdp(0, [0.5, 0.1, 0.12, 0.2]), fsdp(1, [0.5, 0.11, 0.2, 0.15])], 1, 8, None)
    assert record.plain(got.comm) == {"collectives_s": pytest.approx(0.12), "grad_bytes": 8e6, "collective_calls": 14}
    assert timing.summarize([fsdp(0, [0.5, 0.1, 0.12, 0.2])], 1, 8, None).comm is None  # one rank
    untimed = [fsdp(k, [0.0] * 4) for k in (0, 1)]  # SCALELAB_NO_COMM_TIMING: nothing was timed, not 0 s of it
    assert timing.summarize(untimed, 1, 8, None).comm is None
    ranks = [fsdp(0, [0.1] * 4), dict(fsdp(1, [0.1] * 4), grad_bytes=None)]  # rank 0's record is the run's
    assert timing.summarize(ranks, 1, 8, None).comm.grad_bytes == 8e6


def test_a_ddp_run_without_probe_steps_keeps_its_buckets_for_the_report():
    """--comm_probe_every 0 under DDP: beside the busy time, rank 0's buckets as DDP filled them and as the hook
    sent them, and how many a step issued: the report prices those buckets, the forecast calibrates on them."""
    from scalelab.measure import timing

    ranks = [_rank([0.3] * 4, probe_steps=[], rank=k, grad_bytes=8e6, bucket_bytes=[6e6, 2e6],
                   wire_bytes=[3e6, 1e6], buckets=[2] * 4, allreduce_times_s=[0.05] * 4) for k in (0, 1)]
    expected = {"collectives_s": 0.05, "grad_bytes": 8e6, "collective_calls": 2, "bucket_bytes": [6e6, 2e6],
                "wire_bytes": [3e6, 1e6], "buckets": 2}
    assert record.plain(timing.summarize(ranks, 1, 8, None).comm) == expected
    ranks[1].update(bucket_bytes=[], wire_bytes=[9e6])  # rank 0's buckets are the run's, whatever another rank says
    assert record.plain(timing.summarize(ranks, 1, 8, None).comm) == expected
