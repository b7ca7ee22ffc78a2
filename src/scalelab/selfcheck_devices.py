"""The self-check's "device sampler" claim (selfcheck.py shows it): on a GPU run, every rank sampled its own GPU
through NVML, often enough, in the right units. Each statement is one a wrong setup fails:

- no NVML samples: pynvml missing or NVML failed (the rank's note says which);
- samples covering under 80 % of the timed window at the interval (less one: a short window may fall between two
  samples): the thread starved or stopped;
- the NVML GPU's UUID is not the rank's (torch's): the wrong GPU sampled;
- the most memory NVML saw used is below what the rank's allocator held at its peak: the wrong GPU sampled;
- the driver's energy counter and the integral of power more than 15 % apart: a units slip (mW, mJ) or the
  wrong GPU. Where the power read was NVML's 1-second average (no instantaneous field: `power_reading`), its
  integral lags the counter by up to a second's worth of any change, so over a window shorter than
  AVERAGED_POWER_WINDOW_S the two are held within a factor of 2 only (a units slip is a factor of 1000): a
  correct run on such a GPU must not fail for the lag (a 1-s average over a 0.8 s window: 24 % apart).

Returns (claim, status, figure, note), which selfcheck.py makes its Verdict.
"""

CLAIM = "device sampler"
COVERAGE = 0.8  # samples in the window, of window ÷ interval
ENERGY_TOLERANCE = 0.15  # the energy counter against the integral of power
AVERAGED_POWER_WINDOW_S = 5.0  # a 1-s-averaged power's integral: ~3 % off the counter at 5 s, 8 % at 2 s, 24 % at 0.8
LAG_TOLERANCE = 1.0  # shorter windows of averaged power: within a factor of 2 (a units slip is 1000)


def energy_tolerance(d: dict) -> tuple:
    """(tolerance, why it is loose or "") for a rank's energy counter against its power integral."""
    window = d.get("window_s") or 0.0
    if d.get("power_reading") == "instant" or window >= AVERAGED_POWER_WINDOW_S:
        return ENERGY_TOLERANCE, ""
    return LAG_TOLERANCE, (f"power was NVML's 1-s average and the window {window:.1f} s, under "
                           f"{AVERAGED_POWER_WINDOW_S:g} s: held within a factor of 2 only")


def _uuid(text) -> str:
    """A GPU's UUID as both sides can compare it: torch's has no prefix, NVML's has "GPU-" (a MIG slice's "MIG-")."""
    text = str(text or "").lower()
    return text[4:] if text.startswith(("gpu-", "mig-")) else text


def _problem(r: dict):
    """What is wrong with one rank's record, or None."""
    d, who = r["devices"], f"rank {r.get('rank')}"
    if d.get("source") != "nvml":
        return f"{who}: no NVML samples", d.get("note") or "nothing recorded"
    window, interval, n = d.get("window_s"), d.get("interval_s"), d.get("samples") or 0
    if window and interval and n < COVERAGE * window / interval - 1:  # a sample's slack: a window of one interval
        return (f"{who}: {n} samples in {window:.1f} s at {interval:g} s",
                f"under {COVERAGE:.0%} of the window covered: the sampler thread was starved or stopped")
    if r.get("gpu_uuid") and d.get("nvml_uuid") and _uuid(r["gpu_uuid"]) != _uuid(d["nvml_uuid"]):
        return f"{who}: sampled {d['nvml_uuid']}, ran on {r['gpu_uuid']}", "the wrong GPU sampled"
    used, peak = d.get("memory_used_max_bytes"), r.get("peak_memory_bytes")
    if used is not None and peak and used < peak:
        return (f"{who}: {used / 1e9:.2f} GB used on the sampled GPU, {peak / 1e9:.2f} GB allocated at the peak",
                "less memory used than the rank held: the wrong GPU sampled")
    counter, power = d.get("energy_counter_J"), d.get("energy_power_J")
    tolerance, loose = energy_tolerance(d)
    if counter and power and (counter / power > 1 + tolerance or power / counter > 1 + tolerance):
        return (f"{who}: energy counter {counter:.4g} J, power integral {power:.4g} J",
                f"more than {tolerance:.0%} apart: a units slip or the wrong GPU" + (f" ({loose})" if loose else ""))
    return None


def device_sampler(run: dict) -> tuple:
    """The claim's verdict on the newest run (SKIP on CPU and on results without a sampler)."""
    ranks = run.get("ranks") or []
    if run["launch"].get("accelerator") != "gpu":
        return (CLAIM, "SKIP", "CPU run", "NVML samples GPUs; a CPU rank records its cores busy, and no energy "
                "without a RAPL counter of its own")
    if not ranks or any("devices" not in r for r in ranks):
        return CLAIM, "SKIP", "not recorded", "a result from an older scalelab"
    if any(r["devices"] is None for r in ranks):
        return CLAIM, "FAIL", "no sampler started", "the run failed before its loop"
    for r in ranks:
        problem = _problem(r)
        if problem:
            return (CLAIM, "FAIL", *problem)
    util = [r["devices"]["util_mean"] for r in ranks if r["devices"].get("util_mean") is not None]
    apart = [abs(d["energy_counter_J"] / d["energy_power_J"] - 1) for d in (r["devices"] for r in ranks)
             if d.get("energy_counter_J") and d.get("energy_power_J")]
    busy = f"busy {min(util) * 100:.0f}–{max(util) * 100:.0f} %" if util else "no utilization (not supported)"
    energy = (f"energy counter within {max(apart) * 100:.1f} % of the power integral" if apart else
              "no energy counter: energy from the power integral")
    loose = next((why for _, why in map(energy_tolerance, (r["devices"] for r in ranks)) if why), "")
    return CLAIM, "PASS", f"{len(ranks)} GPU(s) sampled by UUID: {busy}; {energy}", loose
