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
        "power integral")


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
