"""What the devices did during the timed steps: a sampler thread beside the loop, and the arithmetic over its samples.

The sampler is not in the loop: a daemon thread, beside the steps, reads a source every `interval_s` into a list
of (perf_counter time, {counter: value}); the loop is not changed (its cost: benchmarks/sampler_overhead.py). The
run hands the timed window (the end of warm-up to the loop's end, on the same perf_counter clock) to `figures`, which
reduces the samples to the rank's record.

Sources, one per rank:
- `NvmlSource`: the rank's GPU through NVML (pynvml, from nvidia-ml-py), found by its UUID (NVML numbers GPUs in
  PCI order and ignores CUDA_VISIBLE_DEVICES, so an index is the wrong GPU under binding; a MIG slice's UUID is
  NVML's "MIG-..." where a whole GPU's is "GPU-..."): utilization (% of the driver's last period with a kernel
  running), memory used (bytes, every process on the GPU), power (mW) and the driver's energy counter (mJ since the
  driver loaded; Volta and newer). Power is the instantaneous reading where NVML has one
  (NVML_FI_DEV_POWER_INSTANT, field 186), else nvmlDeviceGetPowerUsage, which on Ampere (but GA100) and newer is a
  1-second average: its integral over a window of a few seconds lags the energy counter (`power_reading` says
  which was read). Every 0.1 s: utilization is a sampled percentage, not a counter, so its range needs many
  samples.
- `CpuSource`: the process's CPU seconds (all its threads; the kernel's accounting through CLOCK_PROCESS_CPUTIME_ID,
  ns resolution). Every 0.5 s: a cumulative counter loses nothing between samples, the window's edges are
  interpolated, and each wake-up takes a core from the rank's compute. No energy: a RAPL counter, where one is
  readable, counts a whole socket shared by every rank on it, and is not split here.

Torch-free: measure/ is read by the run and the report alike.
"""

import glob
import importlib
import os
import statistics
import threading
import time

from scalelab import record

GPU_INTERVAL_S = 0.1
CPU_INTERVAL_S = 0.5
STOP_WAIT_S = 5.0  # how long stop() waits for a sampler thread stuck in a read (a hung driver) before going on
ENV_OFF = "SCALELAB_NO_SAMPLER"  # =1: no sampler thread (benchmarks/sampler_overhead.py's "off")
NO_RAPL = "no energy counter (RAPL) readable on this host"
RAPL_SHARED = ("a RAPL counter is readable, but it counts a whole socket shared by every rank and process on it: "
               "not split per rank")


def rapl_note() -> str:
    """Why a CPU rank records no energy."""
    readable = [p for p in glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj") if os.access(p, os.R_OK)]
    return RAPL_SHARED if readable else NO_RAPL


class CpuSource:
    """The rank process's CPU seconds, every thread of it (DataLoader workers are processes of their own: not here)."""

    name, interval_s = "cpu", CPU_INTERVAL_S

    def __init__(self, cores: int = 0):
        self.cores = cores or len(os.sched_getaffinity(0))  # the cores this rank may run on (pinned before the loop)
        self.note = rapl_note()

    @staticmethod
    def read() -> dict:
        return {"cpu_s": time.process_time()}

    def close(self) -> None:
        pass


class NvmlSource:
    """One GPU through NVML; the counters it does not support (a MIG slice's utilization, an older GPU's energy
    counter: NVMLError_NotSupported) are left out of every sample, and `note` says which."""

    name, interval_s = "nvml", GPU_INTERVAL_S

    def __init__(self, index: int = 0, uuid=None, nvml=None):
        self.nvml = nvml or importlib.import_module("pynvml")
        self.nvml.nvmlInit()
        if uuid:
            self.handle, self.found = self._by_uuid(uuid), "by UUID"
        else:
            self.handle, self.found = self.nvml.nvmlDeviceGetHandleByIndex(index), f"by index {index} (no UUID known)"
        self.uuid = self.nvml.nvmlDeviceGetUUID(self.handle)
        n = self.nvml
        self.power_reading = "instant" if self._readable(self._instant_power) else "average"
        counters = {"util": lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu,  # percent
                    "memory_used": lambda h: n.nvmlDeviceGetMemoryInfo(h).used,  # bytes
                    "power_mW": self._instant_power if self.power_reading == "instant"  # milliwatts
                    else n.nvmlDeviceGetPowerUsage,
                    "energy_mJ": n.nvmlDeviceGetTotalEnergyConsumption}  # millijoules since the driver loaded
        self.counters, missing = {}, []
        for name, read in counters.items():
            try:
                read(self.handle)
                self.counters[name] = read
            except n.NVMLError as exc:
                missing.append(f"{name}: {exc}")
        self.note = f"GPU {self.uuid} found {self.found}" + (f"; not read: {', '.join(missing)}" if missing else "")

    def _by_uuid(self, uuid: str):
        """NVML's handle of the GPU torch names by `uuid`. torch writes it without NVML's prefix, which is "GPU-" for
        a whole GPU and "MIG-" for a MIG slice: a bare UUID is tried as each."""
        if uuid.startswith(("GPU-", "MIG-")):
            return self.nvml.nvmlDeviceGetHandleByUUID(uuid)
        try:
            return self.nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except self.nvml.NVMLError:
            return self.nvml.nvmlDeviceGetHandleByUUID(f"MIG-{uuid}")

    def _instant_power(self, handle) -> int:
        """Milliwatts now (NVML_FI_DEV_POWER_INSTANT), not the driver's 1-second average."""
        (field,) = self.nvml.nvmlDeviceGetFieldValues(handle, [self.nvml.NVML_FI_DEV_POWER_INSTANT])
        if field.nvmlReturn != 0:  # NVML_SUCCESS: a field the GPU or driver does not have reports why per field
            raise self.nvml.NVMLError(field.nvmlReturn)
        return int(field.value.uiVal)

    def _readable(self, read) -> bool:
        try:
            read(self.handle)
            return True
        except (self.nvml.NVMLError, AttributeError):  # no such field here, or an nvidia-ml-py without it
            return False

    def read(self) -> dict:
        return {name: read(self.handle) for name, read in self.counters.items()}

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the samples are taken; a failed shutdown changes none of them
            pass


def open_source(kind: str, index: int = 0, uuid=None, nvml=None):
    """(a source, "") for a "cpu", "cuda" or "rocm" device, or (None, why it is not measured)."""
    if kind == "cpu":
        return CpuSource(), ""
    if kind == "rocm":
        return None, "not measured: ROCm GPUs are not sampled (amdsmi is not read by scalelab)"
    try:
        return NvmlSource(index, uuid, nvml), ""
    except ImportError:
        return None, "not measured: pynvml (the nvidia-ml-py package) is not installed"
    except Exception as exc:  # noqa: BLE001 - NVMLError and its subclasses: no driver, no such GPU, no permission
        return None, f"not measured: NVML failed ({type(exc).__name__}: {exc})"


class Sampler:
    """A daemon thread that reads `source` every `interval_s`; one sample when it starts and one when it stops, so
    the samples bracket the loop. `busy_s`: the thread's own CPU seconds (what sampling cost the rank)."""

    def __init__(self, source=None, note: str = "", interval_s: float = 0.0):
        self.source, self.note = source, note
        self.interval_s = interval_s or getattr(source, "interval_s", 0.0)
        self.samples, self.error, self.busy_s = [], None, 0.0
        self._stop, self._thread = threading.Event(), None

    def start(self) -> "Sampler":
        if self.source is not None and self._take():
            self._thread = threading.Thread(target=self._run, name="scalelab-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self._take():
            pass
        self.busy_s = time.thread_time()  # this thread's CPU seconds: its clock starts at 0 with the thread

    def _take(self) -> bool:
        try:
            t = time.perf_counter()
            self.samples.append((t, self.source.read()))
            return True
        except Exception as exc:  # noqa: BLE001 - a lost GPU or driver: sampling stops, the run goes on
            self.error = f"{type(exc).__name__}: {exc}"
            return False

    def stop(self) -> None:
        """The last sample, after the loop; the thread ends (idempotent: a failing run's record calls it again)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=STOP_WAIT_S)
        self._thread = None
        if self.error is None:
            self._take()
        self.source.close()

    def figures(self, t0, t1) -> dict:
        """This rank's record of the window [t0, t1] (perf_counter seconds; None: not known)."""
        head = {"source": self.source.name if self.source else None, "interval_s": self.interval_s or None,
                "sampler_cpu_s": round(self.busy_s, 6)}
        if self.source is None:
            return {**head, "note": self.note}
        ended = "" if t1 is not None or not self.samples else "the loop did not end: to the last sample"
        t1 = self.samples[-1][0] if t1 is None and self.samples else t1  # a failing run: what was sampled
        if t0 is None or t1 is None or t1 <= t0:
            return {**head, "note": "no timed window (the loop did not run past its warm-up)"}
        summary = (cpu_summary(self.samples, t0, t1, self.source.cores) if self.source.name == "cpu"
                   else gpu_summary(self.samples, t0, t1))
        notes = [n for n in (self.source.note, summary.pop("note", ""), ended,
                             f"sampling stopped: {self.error}" if self.error else "") if n]
        nvml = ({"nvml_uuid": self.source.uuid, "power_reading": self.source.power_reading}
                if self.source.name == "nvml" else {})
        return {**head, **nvml, **summary, "note": "; ".join(notes)}


def timed_window(loop_start, loop_wall_s, step_times: list, warmup_steps: int) -> tuple:
    """(t0, t1) on perf_counter: the loop's start plus its warm-up steps (as timing.summarize counts them: a run
    shorter than its warm-up keeps its last step) to the loop's end. Where the loop did not end (a failing run)
    t1 is None. The steps chain end to end within an epoch; a gap between epochs during warm-up (the loader's
    restart) is not in them, so t0 may fall that much early."""
    if loop_start is None or not step_times:
        return None, None
    warm = max(0, min(warmup_steps, len(step_times) - 1))
    t1 = loop_start + loop_wall_s if loop_wall_s else None
    return loop_start + sum(step_times[:warm]), t1


def series(samples: list, name: str) -> list:
    """[(t, value)] of one counter, where the sample has it."""
    return [(t, s[name]) for t, s in samples if s.get(name) is not None]


def value_at(points: list, t: float):
    """A counter at time t, linear between the samples around it; None outside them."""
    for (ta, a), (tb, b) in zip(points, points[1:]):
        if ta <= t <= tb:
            return a if tb == ta else a + (b - a) * (t - ta) / (tb - ta)
    return points[0][1] if len(points) == 1 and points[0][0] == t else None


def integral(points: list, t0: float, t1: float):
    """The integral over [t0, t1] of a quantity linear between samples (trapezoids); None where the samples do not
    span the window."""
    if not points or points[0][0] > t0 or points[-1][0] < t1:
        return None
    inside = [(t, v) for t, v in points if t0 < t < t1]
    knots = [(t0, value_at(points, t0)), *inside, (t1, value_at(points, t1))]
    return sum((tb - ta) * (a + b) / 2 for (ta, a), (tb, b) in zip(knots, knots[1:]))


def delta(points: list, t0: float, t1: float):
    """A cumulative counter's growth over [t0, t1], interpolated at both ends; None where the samples do not span
    the window or the counter went backwards (a driver reload resets it)."""
    if any(b < a for (_, a), (_, b) in zip(points, points[1:])):
        return None
    a, b = value_at(points, t0), value_at(points, t1)
    return None if a is None or b is None else b - a


def in_window(samples: list, t0: float, t1: float) -> list:
    return [(t, s) for t, s in samples if t0 <= t <= t1]


def cpu_summary(samples: list, t0: float, t1: float, cores: int) -> dict:
    """Cores busy = CPU seconds over wall seconds in the window (util: of the rank's cores); the range over the
    sampling intervals inside it."""
    cpu = series(samples, "cpu_s")
    used = delta(cpu, t0, t1)
    out = {"window_s": round(t1 - t0, 6), "samples": len(in_window(samples, t0, t1)), "cpu_cores": cores,
           "energy_J": None}  # the source's note says why
    if used is None:
        return {**out, "note": "the samples do not span the timed window"}
    busy = used / (t1 - t0)
    inside = [(t, v) for t, v in cpu if t0 <= t <= t1]
    rates = [(b - a) / (tb - ta) / cores for (ta, a), (tb, b) in zip(inside, inside[1:]) if tb > ta]
    return {**out, "cpu_cores_busy": round(busy, 4), "util_mean": round(busy / cores, 4),
            "util_min": round(min(rates), 4) if rates else None, "util_max": round(max(rates), 4) if rates else None}


def gpu_summary(samples: list, t0: float, t1: float) -> dict:
    """Utilization (fractions) over the samples in the window, the most memory used, the mean power and the energy:
    the driver's counter's growth where it has one, else the integral of power (energy_method says which; both
    are kept, the self-check holds one against the other)."""
    inside = [s for _, s in in_window(samples, t0, t1)]
    util = [s["util"] / 100 for s in inside if s.get("util") is not None]
    memory = [s["memory_used"] for s in inside if s.get("memory_used") is not None]
    power_J = integral([(t, mw / 1e3) for t, mw in series(samples, "power_mW")], t0, t1)
    counter = delta(series(samples, "energy_mJ"), t0, t1)
    counter_J = None if counter is None else counter / 1e3
    energy, method = (counter_J, "counter") if counter_J is not None else (power_J, "power integral")
    note = "" if energy is not None else "no energy: the power samples do not span the timed window"
    return {"window_s": round(t1 - t0, 6), "samples": len(inside),
            "util_mean": round(statistics.fmean(util), 4) if util else None,
            "util_min": min(util) if util else None, "util_max": max(util) if util else None,
            "memory_used_max_bytes": max(memory) if memory else None,
            "power_mean_W": round(power_J / (t1 - t0), 3) if power_J is not None else None,
            "energy_J": _round(energy), "energy_method": method if energy is not None else None,
            "energy_counter_J": _round(counter_J), "energy_power_J": _round(power_J), "note": note}


def _round(x):
    return None if x is None else round(x, 3)


def of_run(per_rank: list, window_steps: int, samples_per_step: int) -> record.Devices:
    """The run's figures: the range of its ranks' mean utilization (or cores busy), and the energy of all ranks over
    the window per step and per 1K samples. The window's steps count the compute-only probe steps: they ran and
    processed their samples too (the loop's every step after warm-up)."""
    rec = [r.get("devices") or {} for r in per_rank]
    util = [d["util_mean"] for d in rec if d.get("util_mean") is not None]
    busy = [d["cpu_cores_busy"] for d in rec if d.get("cpu_cores_busy") is not None]
    energy = [d.get("energy_J") for d in rec]
    total = sum(energy) if energy and None not in energy else None
    per_step = total / window_steps if total is not None and window_steps > 0 else None
    notes = sorted({d["note"] for d in rec if d.get("note") and d.get("energy_J") is None})
    return record.Devices(source=next((d["source"] for d in rec if d.get("source")), None),
                          util_min=min(util) if util else None, util_max=max(util) if util else None,
                          cores_busy_min=min(busy) if busy else None, cores_busy_max=max(busy) if busy else None,
                          window_steps=window_steps, energy_J=_round(total), energy_per_step_J=_round(per_step),
                          energy_per_1k_samples_J=_round(per_step / samples_per_step * 1000)
                          if per_step is not None and samples_per_step else None,
                          note=notes[0] if notes else "")
