"""The step timer on a GPU, without one: CUDA events on a simulated GPU timeline, read after one sync per window.

The GPU runs behind the host: the host queues a step in 1 ms, the GPU takes 50 ms for it. A timer that read the
host clock without a sync would measure 1 ms steps; this one must measure 50 ms, while syncing only every
SYNC_EVERY steps, and a failing run (no sync allowed: the device may be blocked) keeps the finished steps only.
"""

from types import SimpleNamespace

import pytest
import torch

from scalelab.train import comm, timing


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


class Loss:
    is_cuda = True

    def __init__(self, value):
        self.value = value

    def detach(self):
        return self

    def __float__(self):
        return self.value


@pytest.fixture
def gpu(monkeypatch):
    gpu = Gpu()
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(comm, "sync", gpu.sync)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=gpu.perf_counter, time=lambda: 0.0))
    return gpu


def _steps(timer, trainer, gpu, n, step_ms=50.0):
    for i in range(n):
        timer.on_train_batch_start(trainer, None, None, i)
        gpu.queue(step_ms * 0.8)  # forward and backward
        timer.on_before_optimizer_step(trainer, None, SimpleNamespace(param_groups=[]))
        gpu.queue(step_ms * 0.2)  # the optimizer
        timer.on_train_batch_end(trainer, None, {"loss": Loss(2.0 - i / 100)}, None, i)


def _timer(trainer):
    timer = timing.StepTimer(warmup_steps=0, process_start=0.0)
    timer.on_train_start(trainer, SimpleNamespace(parameters=lambda: []))
    return timer


TRAINER = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0), model=object()),
                          global_rank=0, local_rank=0, node_rank=0)


def test_gpu_steps_are_timed_on_the_gpu_clock_with_one_sync_per_window(gpu):
    timer = _timer(TRAINER)
    before = gpu.syncs
    _steps(timer, TRAINER, gpu, 2 * timing.SYNC_EVERY)
    assert gpu.syncs - before == 2  # one per window of SYNC_EVERY steps, not one (or three) per step
    # 50 ms of GPU work per step; the step after a sync also pays the few ms the host needs to queue work again
    assert timer.step_times == [pytest.approx(0.050, abs=0.004)] * (2 * timing.SYNC_EVERY), timer.step_times
    assert timer.grads_ready == [pytest.approx(0.040, abs=0.004)] * (2 * timing.SYNC_EVERY)
    assert timer.losses[:2] == [2.0, 1.99] and not timer.pending


def test_a_failing_run_keeps_the_steps_the_gpu_finished_and_never_waits(gpu, monkeypatch):
    timer = _timer(TRAINER)
    _steps(timer, TRAINER, gpu, 4)
    gpu.now_ms = timer.pending[1][0].ms  # the GPU finished two of the four queued steps, then blocked
    syncs = gpu.syncs
    monkeypatch.setattr(timing.cluster, "device_name", lambda *a: "NVIDIA A100")  # no CUDA here to ask
    record = timer.rank_record(TRAINER)
    assert gpu.syncs == syncs  # no sync: it would never return
    assert record["step_times_s"] == [pytest.approx(0.050, abs=0.004)] * 2
    assert record["losses"] == []  # a GPU loss is read by a copy queued behind the blocked work: not read
    assert len(timer.pending) == 2


def test_epoch_end_reads_the_window_and_the_epoch_time_is_on_the_gpu_clock(gpu):
    timer = _timer(TRAINER)
    timer.on_train_epoch_start(TRAINER, None)
    _steps(timer, TRAINER, gpu, 3)
    timer.on_train_epoch_end(TRAINER, None)
    assert len(timer.step_times) == 3 and timer.epoch_times == [pytest.approx(0.150, abs=0.006)]
