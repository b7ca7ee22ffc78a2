"""measure/devices.py at its edges: exact figures (their rounding, units and keys), the window's edges, the None
paths, the record a Sampler writes from given samples, NVML found by the right name and handle, the sampler thread
when its source fails or hangs, and RAPL's note. The ordinary cases are in test_devices.py."""

import os
import sys
import time
import types

from scalelab.measure import devices


def cpu_stream():
    """A process's CPU seconds every 0.5 s on 3 cores: 0.2, 0.3, 0.4, 0.1, 0.25 CPU s in the five intervals."""
    out, used = [(0.0, {"cpu_s": 0.0})], 0.0
    for k, more in enumerate([0.2, 0.3, 0.4, 0.1, 0.25]):
        used += more
        out.append((0.5 * (k + 1), {"cpu_s": used}))
    return out


def gpu_stream():
    """A GPU every 0.5 s from 10.0, in NVML's units (percent, bytes, mW, mJ), with figures that round."""
    rows = zip([10, 90, 95, 96, 99], [1e9, 3e9, 2e9, 2e9, 5e9], [300_007, 310_003, 301_011, 305_002, 299_999],
               [0, 150_123, 305_377, 455_801, 606_013])
    return [(10.0 + 0.5 * k, {"util": u, "memory_used": m, "power_mW": p, "energy_mJ": e})
            for k, (u, m, p, e) in enumerate(rows)]


# The window 10.2 .. 11.7000004: three samples inside (10.5, 11.0, 11.5); its length rounds to 1.5 s at 6 digits.
GPU_FIGURES = {"window_s": 1.5, "samples": 3, "util_mean": 0.9367, "util_min": 0.9, "util_max": 0.96,
               "memory_used_max_bytes": 3e9, "power_mean_W": 304.772, "energy_J": 455.837, "energy_method": "counter",
               "energy_counter_J": 455.837, "energy_power_J": 457.158, "note": ""}


def test_gpu_figures_are_exact_in_watts_joules_and_fractions_rounded_as_recorded():
    # power_mean_W 304.7722 W and the counter's 455.8367 J round to 3 digits, util_mean 0.93667 to 4, window_s to 6
    assert devices.gpu_summary(gpu_stream(), 10.2, 11.7000004) == GPU_FIGURES


def test_no_energy_has_no_method_and_says_why():
    got = devices.gpu_summary(gpu_stream(), 10.2, 13.0)  # the samples end at 12.0
    assert (got["energy_J"], got["energy_method"], got["power_mean_W"]) == (None, None, None)
    assert got["note"] == "no energy: the power samples do not span the timed window"


def test_cpu_figures_are_exact_per_core_and_over_each_interval():
    # 0.98 CPU s in 1.9 s on 3 cores: 0.51579 cores busy; the intervals inside: 0.3, 0.4, 0.1 CPU s per 0.5 s
    got = devices.cpu_summary(cpu_stream(), 0.3, 2.2000004, cores=3)
    assert got == {"window_s": 1.9, "samples": 4, "cpu_cores": 3, "energy_J": None, "cpu_cores_busy": 0.5158,
                   "util_mean": 0.1719, "util_min": 0.0667, "util_max": 0.2667}


def test_cpu_samples_that_do_not_span_the_window_say_so():
    got = devices.cpu_summary(cpu_stream(), 0.3, 9.0, cores=3)
    assert got == {"window_s": 8.7, "samples": 5, "cpu_cores": 3, "energy_J": None,
                   "note": "the samples do not span the timed window"}


def test_two_samples_at_one_instant_do_not_divide_by_zero():
    twice = [(0.0, {"cpu_s": 0.0}), (1.0, {"cpu_s": 0.5}), (1.0, {"cpu_s": 0.5}), (2.0, {"cpu_s": 1.0})]
    got = devices.cpu_summary(twice, 0.0, 2.0, cores=1)
    assert (got["cpu_cores_busy"], got["util_min"], got["util_max"]) == (0.5, 0.5, 0.5)
    assert devices.value_at([(1.0, 5.0), (1.0, 5.0)], 1.0) == 5.0


def test_a_single_sample_is_its_value_at_its_own_time_only():
    assert devices.value_at([(2.0, 7.0)], 2.0) == 7.0
    assert devices.value_at([(2.0, 7.0)], 3.0) is None and devices.value_at([(2.0, 7.0)], 7.0) is None
    assert devices.value_at([(2.0, 7.0), (4.0, 9.0)], 5.0) is None  # past the last sample


def test_a_flat_counter_counts_and_one_that_went_back_once_does_not():
    assert devices.delta([(0.0, 5.0), (1.0, 5.0), (2.0, 7.0)], 0.0, 2.0) == 2.0  # an idle GPU's energy: flat
    assert devices.delta([(0.0, 100.0), (1.0, 0.0), (2.0, 100.0)], 0.0, 2.0) is None  # reset in between


def test_no_timed_window_without_a_loop_start_or_without_steps():
    assert devices.timed_window(100.0, 5.0, [], 2) == (None, None)
    assert devices.timed_window(None, 5.0, [1.0, 0.5], 0) == (None, None)


def ranks(*energies, note="GPU GPU-0 found by UUID"):
    return [{"devices": {"source": "nvml", "util_mean": 0.9, "energy_J": e, "note": note}} for e in energies]


def test_a_run_s_energy_over_one_step_and_over_none():
    one = devices.of_run(ranks(600.0, 600.0004), window_steps=1, samples_per_step=64)
    assert (one.window_steps, one.energy_J, one.energy_per_step_J) == (1, 1200.0, 1200.0)
    assert one.note == ""  # every rank has its energy: their notes are not why there is none
    none = devices.of_run(ranks(600.0, 600.0), window_steps=0, samples_per_step=64)
    assert (none.energy_J, none.energy_per_step_J, none.energy_per_1k_samples_J) == (1200.0, None, None)


def test_a_rank_without_energy_gives_the_run_its_reason():
    got = devices.of_run(ranks(600.0) + ranks(None, note="no energy: the power samples do not span the timed "
                                                          "window"), 10, 8)
    assert got.energy_J is None and got.note == "no energy: the power samples do not span the timed window"


class Source:
    """A source the Sampler reads from, without a thread: its name, interval and note as the real ones have them."""

    def __init__(self, name="cpu", note="no energy counter (RAPL) readable on this host"):
        self.name, self.note, self.interval_s, self.cores, self.uuid = name, note, 0.5, 3, "GPU-abc"
        self.power_reading = "instant"


def sampler(samples, source, error=None):
    s = devices.Sampler(source)
    s.samples, s.error, s.busy_s = samples, error, 0.01234567
    return s


def test_a_cpu_rank_s_record_from_its_samples():
    got = sampler(cpu_stream(), Source()).figures(0.3, 2.2000004)
    assert got == {"source": "cpu", "interval_s": 0.5, "sampler_cpu_s": 0.012346, "window_s": 1.9, "samples": 4,
                   "cpu_cores": 3, "energy_J": None, "cpu_cores_busy": 0.5158, "util_mean": 0.1719,
                   "util_min": 0.0667, "util_max": 0.2667, "note": "no energy counter (RAPL) readable on this host"}


def test_a_gpu_rank_s_record_names_its_gpu_and_joins_its_notes():
    got = sampler(gpu_stream(), Source("nvml", "GPU GPU-abc found by UUID")).figures(10.2, 11.7000004)
    assert got == {"source": "nvml", "interval_s": 0.5, "sampler_cpu_s": 0.012346, "nvml_uuid": "GPU-abc",
                   "power_reading": "instant", **GPU_FIGURES, "note": "GPU GPU-abc found by UUID"}
    lost = sampler(gpu_stream()[:3], Source("nvml", "GPU GPU-abc found by UUID"), error="NVMLError: GPU is lost")
    assert lost.figures(10.2, 11.7)["note"] == ("GPU GPU-abc found by UUID; no energy: the power samples do not "
                                                "span the timed window; sampling stopped: NVMLError: GPU is lost")
    assert lost.figures(10.2, None)["note"] == ("GPU GPU-abc found by UUID; the loop did not end: to the last sample; "
                                                "sampling stopped: NVMLError: GPU is lost")


def test_a_window_that_is_empty_or_backwards_is_no_timed_window():
    s = sampler(cpu_stream(), Source())
    for t0, t1 in ((2.0, 2.0), (2.0, 1.0), (None, 2.0)):
        assert s.figures(t0, t1)["note"] == "no timed window (the loop did not run past its warm-up)"


def test_a_sampler_that_is_off_rounds_its_cost_and_has_no_note_unless_given_one():
    s = devices.Sampler()
    s.busy_s = 0.12345678
    assert s.figures(0.0, 1.0) == {"source": None, "interval_s": None, "sampler_cpu_s": 0.123457, "note": ""}


class Spinning:
    """A source whose every read takes `spin_s` of CPU; it fails from read number `fail_at` on, or blocks
    `block_s` in read number `block_at`."""

    name, interval_s, note = "cpu", 0.005, ""

    def __init__(self, spin_s=0.0, fail_at=0, block_at=0, block_s=0.0):
        self.spin_s, self.fail_at, self.block_at, self.block_s, self.reads, self.closed = (
            spin_s, fail_at, block_at, block_s, 0, False)

    def read(self):
        self.reads += 1
        if self.reads == self.block_at:
            time.sleep(self.block_s)
        if self.fail_at and self.reads >= self.fail_at:
            raise RuntimeError("GPU is lost")
        end = time.thread_time() + self.spin_s
        while time.thread_time() < end:
            pass
        return {"cpu_s": time.process_time()}

    def close(self):
        self.closed = True


def until(done, limit_s=10.0):
    """Wait until done() (a loaded machine may run the sampler thread late), at most limit_s."""
    end = time.perf_counter() + limit_s
    while not done() and time.perf_counter() < end:
        time.sleep(0.005)


def test_the_sampler_thread_is_a_named_daemon_and_counts_its_own_cpu_time():
    s = devices.Sampler(Spinning(spin_s=0.003)).start()
    thread = s._thread
    until(lambda: len(s.samples) >= 6)
    s.stop()
    assert thread.name == "scalelab-sampler" and thread.daemon  # a daemon: a run that fails before stop() exits
    in_thread = len(s.samples) - 2  # the first and the last sample are taken by start() and stop()
    assert in_thread >= 3 and s.busy_s >= 0.003 * in_thread and s.source.closed


def test_a_source_that_fails_stops_the_sampling_and_the_record_says_why():
    s = devices.Sampler(Spinning(fail_at=3)).start()
    until(lambda: s.error is not None)
    time.sleep(0.05)  # ten intervals: a thread that went on would read again
    s.stop()
    assert s.source.reads == 3 and len(s.samples) == 2  # not read again once lost, not even by stop()
    assert s.error == "RuntimeError: GPU is lost"
    first = devices.Sampler(Spinning(fail_at=1)).start()
    assert first._thread is None and first.error == "RuntimeError: GPU is lost"  # no thread to read it again
    first.stop()
    assert first.source.reads == 1


def test_stop_does_not_wait_for_ever_on_a_read_that_hangs(monkeypatch):
    monkeypatch.setattr(devices, "STOP_WAIT_S", 0.05)
    s = devices.Sampler(Spinning(block_at=2, block_s=1.0)).start()
    until(lambda: s.source.reads == 2)  # the thread is in its read
    begun = time.perf_counter()
    s.stop()
    assert time.perf_counter() - begun < 0.8


def fake_pynvml(uuid="GPU-1234", unsupported=()):
    """pynvml with its names and units; a getter handed anything but the handle NVML gave raises as NVML does."""
    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        def __str__(self):
            return "Not Supported"

    handle, calls = object(), []

    def on(name, value):
        def get(h):
            if h is not handle:
                raise NVMLError("Invalid Argument")
            if name in unsupported:
                raise NVMLError_NotSupported()
            return value
        return get

    return types.SimpleNamespace(
        NVMLError=NVMLError, calls=calls, nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda u: calls.append(("uuid", u)) or handle,
        nvmlDeviceGetHandleByIndex=lambda i: calls.append(("index", i)) or handle,
        nvmlDeviceGetUUID=on("uuid", uuid),
        nvmlDeviceGetUtilizationRates=on("util", types.SimpleNamespace(gpu=97, memory=40)),
        nvmlDeviceGetMemoryInfo=on("memory", types.SimpleNamespace(total=80e9, free=60e9, used=20e9)),
        nvmlDeviceGetPowerUsage=on("power", 312_500), nvmlDeviceGetTotalEnergyConsumption=on("energy", 7_000_000))


def test_nvml_names_that_have_their_prefix_are_kept_as_they_are():
    for name in ("GPU-1234", "MIG-5678"):
        nvml = fake_pynvml(uuid=name)
        src = devices.NvmlSource(0, name, nvml)
        assert nvml.calls[1] == ("uuid", name) and src.note == f"GPU {name} found by UUID"
        assert src.read() == {"util": 97, "memory_used": 20e9, "power_mW": 312_500, "energy_mJ": 7_000_000}


def test_every_counter_nvml_does_not_support_is_named_in_the_note():
    src = devices.NvmlSource(2, None, fake_pynvml(unsupported=("util", "energy")))
    assert src.read() == {"memory_used": 20e9, "power_mW": 312_500}
    assert src.note == ("GPU GPU-1234 found by index 2 (no UUID known); not read: util: Not Supported, "
                        "energy_mJ: Not Supported")


def test_the_default_gpu_is_index_0_and_pynvml_is_the_module_imported(monkeypatch):
    nvml = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    src = devices.NvmlSource()
    assert nvml.calls[:2] == ["init", ("index", 0)] and src.uuid == "GPU-1234"
    src, why = devices.open_source("cuda")
    assert why == "" and nvml.calls[-1] == ("index", 0) and src.nvml is nvml
    assert devices.open_source("cuda", 3)[1] == "" and nvml.calls[-1] == ("index", 3)
    assert devices.open_source("cuda", 3, "77")[1] == "" and nvml.calls[-1] == ("uuid", "GPU-77")


def test_open_source_says_when_pynvml_is_not_installed_and_a_cpu_needs_no_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert devices.open_source("cuda") == (None, "not measured: pynvml (the nvidia-ml-py package) is not installed")
    src, why = devices.open_source("cpu")
    assert why == "" and src.name == "cpu"


def test_a_cpu_source_counts_the_cores_the_rank_may_run_on(monkeypatch):
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 2, 5})
    assert devices.CpuSource().cores == 3 and devices.CpuSource(cores=8).cores == 8


def test_rapl_is_noted_shared_where_a_counter_is_readable_and_absent_where_none_is(monkeypatch):
    pattern = "/sys/class/powercap/intel-rapl:*/energy_uj"
    found = {pattern: ["/sys/class/powercap/intel-rapl:0/energy_uj", "/sys/class/powercap/intel-rapl:1/energy_uj"]}
    readable = set()
    monkeypatch.setattr(devices.glob, "glob", lambda p: found.get(p, []))
    monkeypatch.setattr(devices.os, "access", lambda path, mode: mode == os.R_OK and path in readable)
    assert devices.rapl_note() == devices.NO_RAPL  # there, but root's alone (the default since 2020)
    readable.add("/sys/class/powercap/intel-rapl:1/energy_uj")
    assert devices.rapl_note() == devices.RAPL_SHARED
    found.clear()
    assert devices.rapl_note() == devices.NO_RAPL
