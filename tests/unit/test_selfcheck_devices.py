"""The self-check's "device sampler" claim on constructed results: each wrong setup it names fails it."""

from helpers import make_result
from scalelab.selfcheck_devices import device_sampler


def gpu_run(**devices):
    """A 2-GPU result whose ranks sampled their own GPUs (torch's UUID has no "GPU-" prefix; NVML's has)."""
    r = make_result("g", 2)
    r["launch"].update(accelerator="gpu", device_names=["NVIDIA H100 80GB HBM3"])
    r["ranks"] = [{"rank": k, "gpu_uuid": f"{k}a2f0c1e-0000", "peak_memory_bytes": 30e9, "devices": {
        "source": "nvml", "interval_s": 0.1, "window_s": 10.0, "samples": 100, "nvml_uuid": f"GPU-{k}a2f0c1e-0000",
        "util_mean": 0.9 + k / 20, "memory_used_max_bytes": 32e9, "energy_counter_J": 6000.0,
        "energy_power_J": 5900.0, **devices}} for k in range(2)]
    return r


def test_a_gpu_run_that_sampled_its_own_gpus_in_the_right_units_passes():
    assert device_sampler(gpu_run()) == (
        "device sampler", "PASS", "2 GPU(s) sampled by UUID: busy 90–95 %; energy counter within 1.7 % of the "
        "power integral", "")


def test_no_nvml_samples_fail_and_say_why():
    r = gpu_run(source=None, note="not measured: pynvml (the nvidia-ml-py package) is not installed")
    claim, status, figure, note = device_sampler(r)
    assert (status, figure) == ("FAIL", "rank 0: no NVML samples") and "nvidia-ml-py" in note
    r = gpu_run(source=None, note="not measured: NVML failed (NVMLError_DriverNotLoaded: Driver Not Loaded)")
    assert "Driver Not Loaded" in device_sampler(r)[3]


def test_samples_covering_under_80_percent_of_the_window_fail():
    """80 % of window ÷ interval, less one sample: 10 s at 0.1 s needs 79; a window shorter than an interval may
    hold none (a short run's timed steps can fall between two samples)."""
    status, figure = device_sampler(gpu_run(samples=78))[1:3]
    assert status == "FAIL" and figure == "rank 0: 78 samples in 10.0 s at 0.1 s"
    assert device_sampler(gpu_run(samples=79))[1] == "PASS"
    short = gpu_run(samples=0)
    for r in short["ranks"]:
        r["devices"]["window_s"] = 0.05
    assert device_sampler(short)[1] == "PASS"


def test_another_gpu_s_uuid_fails():
    r = gpu_run()
    r["ranks"][1]["devices"]["nvml_uuid"] = "GPU-0a2f0c1e-0000"
    assert device_sampler(r)[1:] == ("FAIL", "rank 1: sampled GPU-0a2f0c1e-0000, ran on 1a2f0c1e-0000",
                                     "the wrong GPU sampled")


def test_less_memory_used_than_the_rank_allocated_fails():
    status, figure, note = device_sampler(gpu_run(memory_used_max_bytes=2e9))[1:]
    assert status == "FAIL" and "2.00 GB used" in figure and "wrong GPU" in note


def test_an_energy_counter_and_a_power_integral_apart_by_more_than_15_percent_fail():
    status, figure, note = device_sampler(gpu_run(energy_counter_J=6.0))[1:]  # a mJ read as J
    assert status == "FAIL" and figure == "rank 0: energy counter 6 J, power integral 5900 J" and "units" in note
    one = gpu_run(energy_counter_J=None)  # a GPU without the counter: the power integral alone
    assert device_sampler(one)[1:3] == ("PASS", "2 GPU(s) sampled by UUID: busy 90–95 %; no energy counter: energy "
                                                "from the power integral")


def test_cpu_runs_and_older_results_skip_and_a_run_that_never_sampled_fails():
    cpu = make_result("c", 2)
    assert device_sampler(cpu)[1:3] == ("SKIP", "CPU run")
    old = gpu_run()
    for r in old["ranks"]:
        del r["devices"]
    assert device_sampler(old)[1:] == ("SKIP", "not recorded", "a result from an older scalelab")
    never = gpu_run()
    never["ranks"][0]["devices"] = None
    assert device_sampler(never)[1] == "FAIL"


def nvml_window(window_s: float, averaged: bool, start_s: float = 3.0) -> dict:
    """A rank's devices record from gpu_summary over a run whose power steps from 100 W (idle, before the loop) to
    600 W as the timed window starts at `start_s`: the energy counter is the exact integral; the power samples
    (every 0.1 s) NVML's 1-second trailing average where `averaged` (Ampere and newer's nvmlDeviceGetPowerUsage),
    else the instantaneous reading."""
    from scalelab.measure import devices

    def watts(t):
        return 600.0 if t >= start_s else 100.0

    def energy_J(t):
        return 100.0 * min(t, start_s) + 600.0 * max(0.0, t - start_s)

    def reading(t):
        return (energy_J(t) - energy_J(t - 1.0)) / 1.0 if averaged else watts(t)

    samples = [(t / 10, {"power_mW": reading(t / 10) * 1e3, "energy_mJ": energy_J(t / 10) * 1e3, "util": 99,
                         "memory_used": 40e9}) for t in range(10, int((start_s + window_s) * 10) + 6)]
    got = devices.gpu_summary(samples, start_s, start_s + window_s)
    return {**got, "power_reading": "average" if averaged else "instant", "interval_s": 0.1}


def test_a_one_second_averaged_power_over_a_one_second_window_does_not_fail_a_correct_run():
    """NVML's power reading is a 1-s average on Hopper: over the self-check's ~1 s window its integral trails the
    energy counter by far more than 15 % on a correct GPU. The claim holds the two within a factor of 2 there (a
    units slip, 1000x, still fails) and says why; an instantaneous reading, or a long window, gets 15 %."""
    short = nvml_window(1.0, averaged=True)
    apart = short["energy_counter_J"] / short["energy_power_J"] - 1
    assert apart > 0.15  # what the old claim failed: a correct run
    status, figure, note = device_sampler(gpu_run(**short))[1:]
    assert status == "PASS" and "NVML's 1-s average and the window 1.0 s" in note, (figure, note)
    slipped = gpu_run(**{**short, "energy_counter_J": short["energy_counter_J"] / 1000})  # mJ read as J
    assert device_sampler(slipped)[1] == "FAIL"
    assert device_sampler(gpu_run(**{**short, "power_reading": "instant"}))[1] == "FAIL"  # no lag to excuse
    instant = nvml_window(1.0, averaged=False)
    assert abs(instant["energy_counter_J"] / instant["energy_power_J"] - 1) < 0.02
    assert device_sampler(gpu_run(**instant))[1:] == ("PASS", device_sampler(gpu_run(**instant))[2], "")
    long = nvml_window(8.0, averaged=True)
    assert device_sampler(gpu_run(**long))[1:] == ("PASS", device_sampler(gpu_run(**long))[2], "")
    wrong = gpu_run(**{**long, "energy_power_J": long["energy_power_J"] * 1.3})  # another GPU's power, say
    assert device_sampler(wrong)[1] == "FAIL"


def test_a_mig_slices_uuid_matches_nvmls_mig_name():
    r = gpu_run()
    for k, rank in enumerate(r["ranks"]):
        rank["devices"]["nvml_uuid"] = f"MIG-{k}a2f0c1e-0000"
    assert device_sampler(r)[1] == "PASS"
