"""train/payload.py's sampler of a rank's device: started before the loop, read over the timed window the step
clock gives (the end of warm-up to the loop's end), off under SCALELAB_NO_SAMPLER=1."""

import time
from types import SimpleNamespace

import torch

from scalelab.measure import devices
from scalelab.train.payload import device_figures, sample_devices


def test_a_cpu_rank_samples_its_process_and_reads_the_window_after_warm_up(monkeypatch):
    monkeypatch.delenv(devices.ENV_OFF, raising=False)
    sampler = sample_devices(torch.device("cpu"))
    start = time.perf_counter()
    time.sleep(0.2)
    clock = SimpleNamespace(loop_start=start, loop_wall_s=time.perf_counter() - start)
    got = device_figures(sampler, clock, {"step_times_s": [0.05, 0.05, 0.05, 0.05]}, warmup_steps=2)
    assert got["source"] == "cpu" and got["interval_s"] == devices.CPU_INTERVAL_S
    assert abs(got["window_s"] - (clock.loop_wall_s - 0.1)) < 1e-6  # two warm-up steps of 50 ms left out
    assert got["cpu_cores_busy"] < 0.5 and got["energy_J"] is None  # asleep, mostly; no RAPL counter of its own


def test_no_sampler_under_the_switch_and_none_before_the_loop(monkeypatch):
    monkeypatch.setenv(devices.ENV_OFF, "1")
    off = sample_devices(torch.device("cpu"))
    clock = SimpleNamespace(loop_start=0.0, loop_wall_s=1.0)
    got = device_figures(off, clock, {"step_times_s": [0.5, 0.5]}, warmup_steps=1)
    assert got["source"] is None and got["note"] == "not sampled (SCALELAB_NO_SAMPLER=1)"
    assert device_figures(None, clock, {"step_times_s": []}, 5) is None  # a run that failed before its loop
