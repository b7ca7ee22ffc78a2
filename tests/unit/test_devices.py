"""measure/devices.py: the sampler's arithmetic on recorded sample streams (hand-written, in NVML's units: mW, mJ,
percent, bytes), the CPU source for real, the NVML source against a stand-in pynvml module (no GPU here), and the
sampler thread's start and stop."""

import time
import types

import pytest

from scalelab.measure import devices


def gpu_stream(watts=300.0, seconds=2.0, every=0.1, start=10.0, energy=True, util=95, used=20e9):
    """Samples a GPU at constant power would give: power in mW, the energy counter in mJ since some origin."""
    n = round(seconds / every)
    out = []
    for k in range(n + 1):
        t = start + k * every
        s = {"util": util, "memory_used": used, "power_mW": watts * 1e3}
        if energy:
            s["energy_mJ"] = 5e9 + watts * (t - start) * 1e3
        out.append((t, s))
    return out


def test_constant_300_W_for_2_s_is_600_J_by_the_counter_and_by_the_power_integral():
    got = devices.gpu_summary(gpu_stream(), 10.0, 12.0)
    assert got["energy_J"] == pytest.approx(600.0) and got["energy_method"] == "counter"
    assert got["energy_counter_J"] == pytest.approx(600.0) and got["energy_power_J"] == pytest.approx(600.0)
    assert got["power_mean_W"] == pytest.approx(300.0)
    assert got["util_mean"] == pytest.approx(0.95) and got["memory_used_max_bytes"] == 20e9
    assert got["samples"] == 21 and got["window_s"] == pytest.approx(2.0)


def test_without_an_energy_counter_the_power_integral_gives_the_same_600_J():
    got = devices.gpu_summary(gpu_stream(energy=False), 10.0, 12.0)
    assert got["energy_J"] == pytest.approx(600.0) and got["energy_method"] == "power integral"
    assert got["energy_counter_J"] is None


def test_a_window_narrower_than_the_samples_is_interpolated_at_both_edges():
    # samples every 1 s; the window is 10.25 .. 11.5 (1.25 s): 375 J at 300 W, whatever the grid
    got = devices.gpu_summary(gpu_stream(every=1.0), 10.25, 11.5)
    assert got["energy_counter_J"] == pytest.approx(375.0) and got["energy_power_J"] == pytest.approx(375.0)
    assert got["samples"] == 1  # only the sample at 11.0 is inside


def test_a_power_ramp_integrates_as_trapezoids():
    ramp = [(0.0, {"power_mW": 100e3}), (1.0, {"power_mW": 300e3}), (2.0, {"power_mW": 300e3})]
    assert devices.gpu_summary(ramp, 0.0, 2.0)["energy_power_J"] == pytest.approx(200.0 + 300.0)
    assert devices.gpu_summary(ramp, 0.5, 1.0)["energy_power_J"] == pytest.approx(0.5 * (200 + 300) / 2)


def test_no_samples_give_no_figures_and_say_why():
    got = devices.gpu_summary([], 0.0, 1.0)
    assert got["energy_J"] is None and got["util_mean"] is None and got["samples"] == 0
    assert "do not span" in got["note"]


def test_samples_that_stop_before_the_window_ends_give_no_energy():
    got = devices.gpu_summary(gpu_stream(seconds=1.0), 10.0, 12.0)
    assert got["energy_J"] is None and got["energy_counter_J"] is None


def test_a_counter_that_went_backwards_falls_back_to_the_power_integral():
    stream = gpu_stream()
    stream[5][1]["energy_mJ"] = 0  # a driver reload resets it
    got = devices.gpu_summary(stream, 10.0, 12.0)
    assert got["energy_method"] == "power integral" and got["energy_J"] == pytest.approx(600.0)


def test_utilization_range_is_over_the_samples_in_the_window_as_fractions():
    stream = gpu_stream(every=0.5)
    for (_, s), u in zip(stream, [0, 90, 96, 98, 93]):
        s["util"] = u
    got = devices.gpu_summary(stream, 10.4, 12.0)  # the 0 % sample at 10.0 is warm-up
    assert (got["util_min"], got["util_max"]) == (0.9, 0.98)
    assert got["util_mean"] == pytest.approx((0.9 + 0.96 + 0.98 + 0.93) / 4)


def test_cpu_cores_busy_is_cpu_seconds_over_wall_seconds():
    # 1.5 cores busy for the first 2 s, then 0.5: the window 1..3 has 1.5 + 0.5 = 2 CPU seconds in 2 s
    stream = [(float(t), {"cpu_s": 1.5 * min(t, 2) + 0.5 * max(0, t - 2)}) for t in range(5)]
    got = devices.cpu_summary(stream, 1.0, 3.0, cores=2)
    assert got["cpu_cores_busy"] == pytest.approx(1.0) and got["util_mean"] == pytest.approx(0.5)
    assert (got["util_min"], got["util_max"]) == (0.25, 0.75) and got["energy_J"] is None


def test_the_timed_window_starts_after_warm_up_and_ends_with_the_loop():
    assert devices.timed_window(100.0, 5.0, [1.0, 0.5, 0.5, 0.5], 2) == (101.5, 105.0)
    assert devices.timed_window(100.0, 5.0, [1.0], 5) == (100.0, 105.0)  # shorter than warm-up: keeps its step
    assert devices.timed_window(100.0, None, [1.0, 0.5], 1) == (101.0, None)  # a loop that did not end
    assert devices.timed_window(None, None, [], 5) == (None, None)


def test_the_run_adds_energy_over_ranks_per_step_and_per_1k_samples():
    ranks = [{"devices": {"source": "nvml", "util_mean": u, "energy_J": 600.0}} for u in (0.93, 0.98)]
    got = devices.of_run(ranks, window_steps=100, samples_per_step=64)
    assert (got.util_min, got.util_max) == (0.93, 0.98)
    assert got.energy_per_step_J == pytest.approx(12.0)  # 1200 J over 100 steps
    assert got.energy_per_1k_samples_J == pytest.approx(12.0 / 64 * 1000)


def test_a_run_without_energy_says_why_once():
    ranks = [{"devices": {"source": "cpu", "util_mean": 0.99, "cpu_cores_busy": 0.99, "energy_J": None,
                          "note": devices.NO_RAPL}}] * 2 + [{"devices": None}]
    got = devices.of_run(ranks, 10, 8)
    assert got.energy_per_1k_samples_J is None and got.note == devices.NO_RAPL
    assert (got.cores_busy_min, got.cores_busy_max) == (0.99, 0.99) and got.source == "cpu"


def test_the_cpu_source_reads_this_process_cpu_seconds():
    src = devices.CpuSource()
    a = src.read()["cpu_s"]
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert src.read()["cpu_s"] - a >= 0.05 and src.cores >= 1 and "RAPL" in src.note


def fake_pynvml(energy=True, uuid="GPU-1234"):
    """A stand-in for pynvml with its names and units (see pynvml.py): percent, bytes, mW, mJ."""
    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        def __str__(self):
            return "Not Supported"

    calls = []

    def energy_read(h):
        if not energy:
            raise NVMLError_NotSupported()
        return 7_000_000

    return types.SimpleNamespace(
        NVMLError=NVMLError, calls=calls, nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda u: calls.append(("uuid", u)) or "h",
        nvmlDeviceGetHandleByIndex=lambda i: calls.append(("index", i)) or "h",
        nvmlDeviceGetUUID=lambda h: uuid,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80e9, free=60e9, used=20e9),
        nvmlDeviceGetPowerUsage=lambda h: 312_500, nvmlDeviceGetTotalEnergyConsumption=energy_read)


def test_the_nvml_source_finds_the_gpu_by_torch_s_uuid_and_reads_nvml_units():
    nvml = fake_pynvml()
    src = devices.NvmlSource(0, "1234", nvml)  # torch's UUID has no "GPU-" prefix; NVML's does
    assert ("uuid", "GPU-1234") in nvml.calls and src.uuid == "GPU-1234" and "by UUID" in src.note
    assert src.read() == {"util": 97, "memory_used": 20e9, "power_mW": 312_500, "energy_mJ": 7_000_000}
    src.close()
    assert nvml.calls[-1] == "shutdown"


def test_power_is_the_instantaneous_field_where_nvml_has_it_else_the_average_said_so():
    """nvmlDeviceGetPowerUsage is a 1-s average on Ampere and newer: the instant field (186) where it reads."""
    nvml = fake_pynvml()
    field = types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=450_000))
    nvml.NVML_FI_DEV_POWER_INSTANT = 186
    nvml.nvmlDeviceGetFieldValues = lambda h, ids: [field] if ids == [186] else []
    src = devices.NvmlSource(0, "1234", nvml)
    assert src.power_reading == "instant" and src.read()["power_mW"] == 450_000
    field.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED, for this field alone
    nvml.NVMLError = type("NVMLError", (Exception,), {})
    src = devices.NvmlSource(0, "1234", nvml)
    assert src.power_reading == "average" and src.read()["power_mW"] == 312_500
    assert devices.NvmlSource(0, "1234", fake_pynvml()).power_reading == "average"  # an nvidia-ml-py without it


def test_a_bare_uuid_is_found_as_a_mig_slice_where_no_whole_gpu_has_it():
    nvml = fake_pynvml(uuid="MIG-5678")
    whole = nvml.nvmlDeviceGetHandleByUUID

    def by_uuid(u):
        if u.startswith("GPU-"):
            raise nvml.NVMLError("Not Found")
        return whole(u)

    nvml.nvmlDeviceGetHandleByUUID = by_uuid
    src = devices.NvmlSource(0, "5678", nvml)  # torch's name for the slice has no prefix
    assert ("uuid", "MIG-5678") in nvml.calls and src.uuid == "MIG-5678"


def test_an_energy_counter_the_gpu_does_not_support_is_left_out_and_said():
    nvml = fake_pynvml(energy=False)
    src = devices.NvmlSource(3, None, nvml)
    assert ("index", 3) in nvml.calls and "energy_mJ" not in src.read()
    assert "energy_mJ: Not Supported" in src.note and "no UUID known" in src.note


def test_a_source_that_cannot_start_says_why():
    class Failing:
        NVMLError = RuntimeError

        @staticmethod
        def nvmlInit():
            raise RuntimeError("NVML Shared Library Not Found")

    src, why = devices.open_source("cuda", 0, None, Failing)
    assert src is None and why == "not measured: NVML failed (RuntimeError: NVML Shared Library Not Found)"
    assert devices.open_source("rocm")[1].startswith("not measured: ROCm")


def test_the_sampler_brackets_what_it_samples_and_stops_once():
    s = devices.Sampler(devices.CpuSource(), interval_s=0.01).start()
    t0 = time.perf_counter()
    time.sleep(0.1)
    t1 = time.perf_counter()
    s.stop()
    s.stop()
    assert s.samples[0][0] < t0 and s.samples[-1][0] > t1 and len(s.samples) >= 5
    got = s.figures(t0, t1)
    assert got["source"] == "cpu" and got["cpu_cores_busy"] < 0.5 and got["samples"] >= 3  # asleep, mostly
    assert "RAPL" in got["note"] and got["sampler_cpu_s"] >= 0


def test_a_sampler_that_is_off_records_why():
    got = devices.Sampler(note="not sampled (SCALELAB_NO_SAMPLER=1)").start()
    got.stop()
    assert got.figures(0.0, 1.0) == {"source": None, "interval_s": None, "sampler_cpu_s": 0.0,
                                     "note": "not sampled (SCALELAB_NO_SAMPLER=1)"}


def test_a_failing_run_whose_loop_did_not_end_records_up_to_its_last_sample():
    s = devices.Sampler(devices.CpuSource(), interval_s=0.01).start()
    time.sleep(0.05)
    s.stop()
    got = s.figures(s.samples[0][0], None)
    assert got["window_s"] == pytest.approx(s.samples[-1][0] - s.samples[0][0], abs=1e-6)
    assert "did not end" in got["note"]
    assert s.figures(None, None)["note"].startswith("no timed window")
