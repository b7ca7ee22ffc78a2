"""The step clock on a GPU, without one: CUDA events on a simulated GPU timeline, read after one sync per window.

The GPU runs behind the host: the host queues a step in 1 ms, the GPU takes 50 ms for it. A clock that read the
host clock without a sync would measure 1 ms steps; this one must measure 50 ms, while syncing only when the loop
reads a window (every SYNC_EVERY steps), and a failing run (no sync allowed: the device may be blocked) keeps the
finished steps only.
"""

from types import SimpleNamespace

import pytest
import torch

from scalelab.train import clock, comm, loop


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


def _clock():
    steps = clock.StepClock(torch.device("cuda", 0), world_size=1, process_start=0.0)
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
    monkeypatch.setattr(clock.cluster, "device_name", lambda *a: "NVIDIA A100")  # no CUDA here to ask
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 0)  # likewise
    record = steps.rank_record(0, 0, 0)
    assert gpu.syncs == syncs  # no sync: it would never return
    assert record["step_times_s"] == [pytest.approx(0.050, abs=0.004)] * 2
    assert record["losses"] == []  # a GPU loss is read by a copy queued behind the blocked work: not read
    assert len(steps.pending) == 2 and steps.steps == 4  # 4 ended on the host: "during step 5" if it fails now


def test_epoch_end_reads_the_window_and_the_epoch_time_is_on_the_gpu_clock(gpu):
    steps = _clock()
    steps.epoch_start()
    _steps(steps, gpu, 3)
    steps.epoch_end()
    assert len(steps.step_times) == 3 and steps.epoch_times == [pytest.approx(0.150, abs=0.006)]
