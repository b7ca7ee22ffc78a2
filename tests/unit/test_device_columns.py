"""What the devices did, from a result to the report: the record's fields pass the schema, the frames carry the
utilization range and the energy, the scaling table prints under it the range and a group's energy (or why there is
none) once, within a terminal's width."""

import pytest

from helpers import _with_comm, make_result
from scalelab import record, results
from scalelab.errors import ResultError
from scalelab.measure import devices
from scalelab.report import explain, tables
from scalelab.report.frames import runs_frame, scaling_frame


def sampled(r, util=(0.93, 0.98), energy_J=600.0, source="nvml", note=""):
    """A result as a run with a sampler records it: each rank's `devices`, the run's `timing.devices`."""
    world = r["launch"]["world_size"]
    ranks = [{"rank": k, "step_times_s": [0.1] * 10, "devices": {
        "source": source, "interval_s": 0.1, "samples": 80, "window_s": 8.0, "util_mean": util[k % len(util)],
        "util_min": 0.5, "util_max": 1.0, "energy_J": energy_J, "note": note,
        **({"cpu_cores_busy": util[k % len(util)], "cpu_cores": 1} if source == "cpu" else
           {"energy_method": "counter", "nvml_uuid": f"GPU-{k}"})}} for k in range(world)]
    r["ranks"] = ranks
    r["timing"]["devices"] = record.plain(devices.of_run(ranks, window_steps=5,
                                                         samples_per_step=r["workload"]["global_batch"]))
    if source == "nvml":
        r["launch"].update(accelerator="gpu", device_names=["NVIDIA H100 80GB HBM3"])
    return _with_comm(r, 0.01, 0.004, 0.004, 0.014)


def render(found, **kw):
    runs = runs_frame(found)
    return tables.render(runs, explain.annotate(scaling_frame(runs), explain.bench_frame([])), **kw)


def test_the_sampled_figures_pass_the_result_schema_and_a_wrong_one_fails_naming_its_field():
    r = sampled(make_result("g2", 2))
    results.validate(r)
    r["ranks"][1]["devices"]["energy_J"] = "600 J"
    with pytest.raises(ResultError, match=r"ranks\[1\].devices.energy_J"):
        results.validate(r)


def test_a_gpu_group_shows_its_utilization_range_and_energy_per_step_and_per_1k_samples():
    found = [sampled(make_result("g1", 1), util=(0.97,), energy_J=300.0), sampled(make_result("g2", 2))]
    scaling = scaling_frame(runs_frame(found)).set_index("world_size")
    assert (scaling.loc[2, "util_min"], scaling.loc[2, "util_max"]) == (0.93, 0.98)
    assert scaling.loc[2, "energy_per_step_J"] == pytest.approx(1200 / 5)  # both ranks' energy over 5 steps
    assert scaling.loc[2, "energy_per_1k_samples_J"] == pytest.approx(1200 / 5 / 128 * 1000)
    text = render(found, details=False, width=120)
    assert max(map(len, text.splitlines())) <= 120, text
    header = next(line for line in text.splitlines() if line.startswith("world"))
    assert header.split()[-2:] == ["per", "device"]  # a line under the table, not a column: every chapter's columns
    assert ("  busy (the share of time a kernel ran, range over ranks, sampled beside the timed steps): 97 % at 1 dev; "
            "93–98 % at 2 dev") in render(found, details=False, width=0)  # unfolded
    assert "  energy per step, per 1K samples (every rank, the timed window): 1 dev 60 J, 937.5 J; 2 dev 240 J, " \
           "1,875 J" in text
    assert "energy: —" not in text


def test_a_cpu_group_shows_cores_busy_and_says_once_why_there_is_no_energy():
    found = [sampled(make_result(f"c{w}", w), util=(0.96, 1.0), energy_J=None, source="cpu", note=devices.NO_RAPL)
             for w in (1, 2)]
    text = render(found, details=False, width=0)
    assert ("  cores busy (CPU seconds ÷ wall seconds, range over ranks, sampled beside the timed steps): 0.96 at 1 "
            "dev; 0.96–1.00 at 2 dev") in text
    assert text.count("energy: — (no energy counter (RAPL) readable on this host)") == 1
    assert "energy per step" not in text


def test_a_configuration_over_nodes_is_named_by_its_nodes_and_link():
    from types import SimpleNamespace

    from scalelab.report import cells

    r = SimpleNamespace(world_size=2.0, num_nodes=2.0, link="emulated 2 Gbit/s")
    assert cells.config_words(r) == "2 dev, 2 nodes, emulated 2 Gbit/s"
    assert cells.config_words(SimpleNamespace(world_size=4.0, num_nodes=1.0, link="")) == "4 dev"
    assert cells.config_words(SimpleNamespace(world_size=4.0, num_nodes=1.0)) == "4 dev"  # a row with no link field


def test_a_cpu_reads_its_cores_busy_a_gpu_its_utilization_and_half_a_range_is_not_sampled():
    from types import SimpleNamespace

    from scalelab.report import cells

    nan = float("nan")

    def row(accelerator, cores=(nan, nan), util=(nan, nan)):
        return SimpleNamespace(accelerator=accelerator, cores_busy_min=cores[0], cores_busy_max=cores[1],
                               util_min=util[0], util_max=util[1])

    assert cells.device_cells(row("cpu", cores=(0.97, 1.0), util=(0.5, 0.6))) == ["0.97–1.00"]
    assert cells.device_cells(row("gpu", cores=(0.97, 1.0), util=(0.93, 0.98))) == ["93–98 %"]
    assert cells.device_cells(row("cpu", cores=(nan, 1.0))) == ["—"]  # one end not sampled: no range
    assert cells.device_cells(row("gpu", util=(0.93, nan))) == ["—"]


def test_results_from_before_the_sampler_show_no_device_column():
    found = [_with_comm(make_result(f"o{w}", w), 0.01, 0.004, 0.004, 0.014) for w in (1, 2)]
    text = render(found, details=False)
    assert "busy" not in text and "energy" not in text


def test_energy_in_four_significant_digits_and_the_first_reason_a_configuration_gave_for_none():
    big = [sampled(make_result(f"b{w}", w), energy_J=2e6) for w in (1, 2)]
    text = render(big, details=False, width=0)
    assert "1 dev 4e+05 J, 6.25e+06 J; 2 dev 8e+05 J, 6.25e+06 J" in text  # 2 MJ a rank over 5 steps of 64, 128
    none = [sampled(make_result(f"n{w}", w), energy_J=None, source="cpu", note=note)
            for w, note in ((1, ""), (2, "first reason"), (4, "second reason"))]
    assert "  energy: — (first reason)" in render(none, details=False, width=0).splitlines()
    quiet = [sampled(make_result(f"q{w}", w), energy_J=None, source="cpu") for w in (1, 2)]
    assert "  energy: — (not measured)" in render(quiet, details=False, width=0).splitlines()
