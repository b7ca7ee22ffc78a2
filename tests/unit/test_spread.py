"""Noise you can see (report/spread.py): the repeats' scatter under a scaling table, and two configurations whose
efficiencies lie within it of each other marked, worked by hand."""

import math

import pytest

from helpers import make_result
from scalelab.report import frames, spread, tables


def _run(run_id, world, step_s, nodes=1):
    r = make_result(run_id, world, nodes, samples_per_s=64 * world / step_s)
    r["timing"]["step_s"] = {"median": step_s}
    return r


def _report(found):
    runs = frames.runs_frame(found)
    return runs, frames.scaling_frame(runs)


def test_without_repeats_nothing_is_said():
    runs, scaling = _report([_run("a", 1, 0.10), _run("b", 2, 0.11)])
    assert spread.lines(runs, scaling) == [] and spread.scatter(runs).dof == 0


def test_the_scatter_of_repeats_and_two_efficiencies_it_can_move_are_said():
    """1 device: 0.100 and 0.104 s; 2 devices: 0.102 and 0.10608 s (σ = |ln(1.04)| / √2 on each, pooled over 2
    degrees of freedom: Student's t 1.886). The medians' efficiencies, 100 % and 98 %, lie within
    1.886 · σ · √(1/2 + 1/2); a third configuration at 0.2 s is far outside it."""
    found = [_run("a1", 1, 0.100), _run("a2", 1, 0.104), _run("b1", 2, 0.102), _run("b2", 2, 0.10608),
             _run("c1", 4, 0.200)]
    runs, scaling = _report(found)
    sigma = math.log(1.04) / math.sqrt(2)
    assert spread.scatter(runs).sigma == pytest.approx(sigma) and spread.scatter(runs).dof == 2
    lines = spread.lines(runs, scaling.sort_values(["world_size", "num_nodes"]))
    factor = math.exp(1.886 * sigma)
    assert lines[0] == (f"  run-to-run: the step scatters {sigma * 100:.1f} % between repeats (2 degree(s) of freedom):"
                        f" 80 % of one configuration's runs lie within a factor of {factor:.3f} of its typical step, "
                        "either way")
    reach = (math.exp(1.886 * sigma * math.sqrt(1 / 2 + 1 / 2)) - 1) * 100
    assert lines[1:] == [f"  within noise: 1 dev (100 %) and 2 dev (98 %) differ by less than their repeats' scatter "
                         f"can move them (±{reach:.1f} %)"]
    assert lines[1] in tables.render(runs, scaling).splitlines()  # under the group's scaling table


def test_two_efficiencies_just_beyond_the_scatter_are_not_marked():
    found = [_run("a1", 1, 0.100), _run("a2", 1, 0.101), _run("b1", 2, 0.110), _run("b2", 2, 0.111)]
    runs, scaling = _report(found)
    assert len(spread.lines(runs, scaling)) == 1  # the scatter, no pair


def test_the_track_records_scatter_line_names_the_range_its_predictions_used():
    import pandas as pd

    from scalelab.report import forecast_view

    rows = pd.DataFrame({"scatter": [0.026, 0.02, 0.021], "scatter_dof": [0, 3, 4]})
    assert forecast_view.scatter_words(rows) == ("2.0–2.6 % (0–4 degree(s) of freedom, 0: assumed: each prediction "
                                                 "leaves its configuration's repeats out)")
    assert forecast_view.scatter_words(rows.iloc[1:]) == ("2.0–2.1 % (3–4 degree(s) of freedom: each prediction "
                                                          "leaves its configuration's repeats out)")
    assert forecast_view.scatter_words(rows.iloc[:1]) == "2.6 % (assumed: no repeats to measure it)"


def test_the_scatter_pools_each_configurations_repeats_and_a_pair_is_judged_by_both_run_counts():
    """Repeats of 2, 3 and 2 runs (4 degrees of freedom, Student's t 1.533); a failed run's step is no repeat. 2 and
    4 devices (83 % and 80 %: neither is the baseline) lie within 1.533 · σ · √(1/3 + 1/2); 1 and 2 devices do not."""
    steps = {1: (0.100, 0.116), 2: (0.120, 0.130, 0.140), 4: (0.125, 0.145)}
    found = [_run(f"r{world}-{i}", world, s) for world, repeats in steps.items() for i, s in enumerate(repeats)]
    failed = _run("failed", 2, 0.5)
    failed["status"] = "failed"
    runs, scaling = _report([*found, failed])
    squares = sum((math.log(s) - sum(map(math.log, r)) / len(r)) ** 2 for r in steps.values() for s in r)
    sigma = math.sqrt(squares / 4)
    assert (spread.scatter(runs).sigma, spread.scatter(runs).dof) == (pytest.approx(sigma), 4)
    g = scaling.sort_values(["world_size", "num_nodes"])
    assert list(g["efficiency"]) == pytest.approx([1.0, 0.8262108, 0.8], rel=1e-6)
    reach = 1.533 * sigma * math.sqrt(1 / 3 + 1 / 2)
    assert math.log(0.8262108 / 0.8) < reach < math.log(1 / 0.8262108)
    assert spread.lines(runs, g) == [
        f"  run-to-run: the step scatters {sigma * 100:.1f} % between repeats (4 degree(s) of freedom): 80 % of one "
        f"configuration's runs lie within a factor of {math.exp(1.533 * sigma):.3f} of its typical step, either way",
        f"  within noise: 2 dev (83 %) and 4 dev (80 %) differ by less than their repeats' scatter can move them "
        f"(±{(math.exp(reach) - 1) * 100:.1f} %)"]
    assert f"{sigma * 100:.1f}" == "9.2" and f"{(math.exp(reach) - 1) * 100:.1f}" == "13.8"  # what the lines print


def test_a_configuration_without_throughput_is_compared_with_nothing_and_its_neighbours_with_each_other():
    """2 devices recorded 0 samples/s (efficiency 0: no ratio to take); 1 and 4 devices are then neighbours."""
    found = [_run("a1", 1, 0.100), _run("a2", 1, 0.116), _run("b1", 2, 0.120), _run("b2", 2, 0.130),
             _run("c1", 4, 0.104), _run("c2", 4, 0.114)]
    for r in found[2:4]:
        r["timing"]["samples_per_s"] = 0.0
    runs, scaling = _report(found)
    lines = spread.lines(runs, scaling.sort_values(["world_size", "num_nodes"]))
    assert len(lines) == 2 and lines[1].startswith("  within noise: 1 dev (100 %) and 4 dev (99 %) differ")
