"""The forecast (perfmodel/calibrate.py, perfmodel/forecast.py) on a cluster whose figures are chosen by hand.

Between nodes an emulated 8 Gbit/s link with α = 20 µs per ring step and β = 1 GB/s; the workload's 1-device step is
100 ms and it all-reduces 16 MB in one bucket. Every expected number below is the ring formula worked by hand."""

import copy
import math
import re
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import make_result, run_script
from scalelab import perfmodel as pm
from scalelab import results
from scalelab.perfmodel import calibrate, forecast, noise, sharding
from scalelab.perfmodel.calibrate import Band, Point
from scalelab.report import explain, forecast_view, frames

ALPHA, BETA, S, STEP1 = 20e-6, 1.0, 16e6, 0.100
LINK = {"gbit": 8.0, "emulated": True, "latency_ms": None, "latency_requested_ms": None}


def ring(n, nbytes=S, calls=1):
    return calls * 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * nbytes / (BETA * 1e9)


def run(run_id, world, num_nodes, step_s, model="gpt", alone=None, grad=S):
    r = make_result(run_id, world, num_nodes, samples_per_s=64 * world / step_s, model=model)
    r["launch"]["link"] = LINK if num_nodes > 1 else None
    r["timing"]["step_s"] = {"median": step_s}
    r["timing"]["comm"] = {"compute_s": STEP1, "allreduce_s": 0.0, "waited_s": 0.0, "grad_bytes": grad,
                           "bucket_bytes": [grad], "buckets": 1, "allreduce_alone_s": alone,
                           "ddp_busbw_GBps": None}
    return r


def bench(num_nodes=2, world=2):
    data = results.envelope("allreduce", f"ar{world}x{num_nodes}")
    rows = [{"bytes": b, "time_s": ring(world, b), "single_op_s": ring(world, b),
             "busbw_GBps": pm.busbw_from_time(b, ring(world, b), world)} for b in (2e6, 4e6, 8e6, 32e6, 64e6)]
    data.update(status="completed", error=None, rows=rows, summary={"large_msg_busbw_GBps": rows[-1]["busbw_GBps"]},
                launch={"world_size": world, "num_nodes": num_nodes, "accelerator": "cpu", "backend": "gloo",
                        "device_names": ["cpu"], "link": LINK}, config={"dtype": "float32"})
    return data


def calibrated(found):
    runs, bench_rows = frames.runs_frame(found), explain.bench_frame(found, explain.COLLECTIVES)
    return forecast.calibrate_all(forecast_view.records(runs), forecast_view.bench_points(bench_rows)), runs, bench_rows


def test_the_ring_fit_recovers_alpha_and_beta():
    points = [Point(n, b, calls, ring(n, b, calls), "x") for n in (2, 4) for b in (1e6, 8e6, 64e6) for calls in (1, 3)]
    fit = calibrate.fit_ring(points)
    assert fit.alpha_s == pytest.approx(ALPHA, rel=1e-6) and fit.beta_GBps == pytest.approx(BETA, rel=1e-6)
    assert fit.residual == pytest.approx(0, abs=1e-9) and fit.points == 12
    assert fit.seconds(8, 16e6) == pytest.approx(14 * ALPHA + 1.75 * 16e6 / 1e9)


def test_a_latency_the_points_cannot_carry_is_zero_not_negative():
    # two sizes whose times would need a negative α (the small one relatively fast): β alone is fitted
    fit = calibrate.fit_ring([Point(2, 1e6, 1, 0.0009, "a"), Point(2, 8e6, 1, 0.008, "b")])
    assert fit.alpha_s == 0 and fit.beta_GBps > 0
    assert calibrate.fit_ring([Point(1, 1e6, 1, 0.1, "one rank")]) is None


def test_with_x_1_the_forecast_is_predicts_no_overlap_step_from_the_same_inputs():
    """One model, two ways in: calibrated from a folder, or typed into perfmodel (what src/predict.py does)."""
    found = [run("one", 1, 1, STEP1), run("two", 2, 2, STEP1 + ring(2), alone=ring(2)), bench()]
    cals, _, _ = calibrated(found)
    (cal,) = cals.values()
    key = ("inter", "emulated 8 Gbit/s")
    assert cal.fits[key].beta_GBps == pytest.approx(BETA, rel=1e-6)
    assert cal.exposures[key][0][0] == pytest.approx(1.0)  # the 2-node run paid exactly its all-reduce alone
    rows, _ = forecast.forecast(cal, ("intra", "cpu", "cpu"), key, 1, (2, 4, 8))
    typed = pm.predict(pm.ScalingInputs(devices=1, num_nodes=(2, 4, 8), grad_bytes=S, inter_GBps=BETA,
                                        inter_latency_s=ALPHA, compute_s=STEP1, bucket_bytes=S))
    for f, row in zip(rows, typed):
        assert (f.num_nodes, f.world_size) == (row.num_nodes, row.world_size)
        assert f.step.mid == pytest.approx(row.step_s_no_overlap, rel=1e-6)
    assert rows[-1].step.mid == pytest.approx(STEP1 + 14 * ALPHA + 1.75 * S / 1e9, rel=1e-6)  # 8 nodes, by hand
    assert rows[-1].efficiency.mid == pytest.approx(STEP1 / rows[-1].step.mid)


def test_the_exposed_factor_and_its_band_come_from_the_workloads_own_runs():
    """x = 1.2 and 1.4 on this link: at the runs' own all-reduce (2 nodes), the middle x = 1.3, give or take what
    moves it (perfmodel/noise.py): the new run's scatter, the baseline's median (b (1 − r), shared by the readings,
    r = 1 here), each reading's own step (s_i r, averaged over the 2), and the fit's error on x · t; an 80 % band
    at Student's t for 1 degree of freedom."""
    found = [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), run("b", 2, 2, STEP1 + 1.4 * ring(2)),
             bench()]
    cals, _, _ = calibrated(found)
    (cal,) = cals.values()
    rows, notes = forecast.forecast(cal, ("intra", "cpu", "cpu"), ("inter", "emulated 8 Gbit/s"), 1, (2,))
    _, _, exposure, where = notes[("inter", "emulated 8 Gbit/s")]
    assert (exposure.low, exposure.mid, exposure.high) == pytest.approx((1.2, 1.3, 1.4))
    assert where == "this workload on this link"
    # a and b are repeats of one configuration: log(step) scatters about their mean, 1 degree of freedom
    sigma = abs(math.log((STEP1 + 1.4 * ring(2)) / (STEP1 + 1.2 * ring(2)))) / math.sqrt(2)
    assert cal.scatter == noise.Scatter(pytest.approx(sigma), 1)
    t2, u = ring(2), max(forecast.COMM_UNCERTAINTY, cal.fits[("inter", "emulated 8 Gbit/s")].residual)
    shared = 0.0  # the baseline's median, shared by both readings: b (K − r) with r = 1 and K = 1
    own = sigma * math.hypot(*((STEP1 + x * t2) for x in (1.2, 1.4))) / 2
    mid = STEP1 + 1.3 * t2
    sd = math.sqrt((sigma * mid) ** 2 + shared ** 2 + own ** 2 + (u * 1.3 * t2) ** 2)
    reach = math.exp(3.078 * sd / mid)  # Student's t at 0.9 for 1 degree of freedom
    two = rows[-1]
    assert two.step.mid == pytest.approx(mid)
    assert two.step.low == pytest.approx(mid / reach) and two.step.high == pytest.approx(mid * reach)
    assert two.efficiency.low == pytest.approx(STEP1 / two.step.high)


def test_at_another_all_reduce_time_each_reading_is_read_as_x_and_as_a_fixed_cost():
    """The same two runs forecast at 4 nodes, where the all-reduce takes r = t4 / t2 times as long: what they paid
    beyond the 1-device step (0.2 t2 and 0.4 t2 more than their all-reduce) may grow with it (x = 1.2, 1.4) or stay
    (1 + U / t4: 1 + 0.2 / r, 1 + 0.4 / r); 2-node runs cannot tell which, so the band spans all four, the middle
    their median, and it is a range: the baseline's scatter and the new run's widen it, no reading's."""
    found = [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), run("b", 2, 2, STEP1 + 1.4 * ring(2)),
             bench()]
    cals, _, _ = calibrated(found)
    (cal,) = cals.values()
    key = ("inter", "emulated 8 Gbit/s")
    rows, notes = forecast.forecast(cal, ("intra", "cpu", "cpu"), key, 1, (4,))
    _, _, exposure, where = notes[key]
    t2, t4 = ring(2), ring(4)
    fixed = sorted(1 + extra * t2 / t4 for extra in (0.2, 0.4))
    readings = sorted([1.2, 1.4, *fixed])
    assert (exposure.low, exposure.mid, exposure.high) == pytest.approx(
        (readings[0], (readings[1] + readings[2]) / 2, readings[-1]))
    assert where == "this workload on this link (read as x and as a fixed cost per step)"
    u = max(forecast.COMM_UNCERTAINTY, cal.fits[key].residual)
    model = Band(STEP1 + readings[0] * t4 * (1 - u), STEP1 + exposure.mid * t4, STEP1 + 1.4 * t4 * (1 + u))
    sd = math.hypot(cal.scatter.sigma * STEP1, cal.scatter.sigma * model.mid)  # the baseline's median of 1 run
    reach = math.exp(3.078 * sd / model.mid)
    four = rows[-1]
    assert (four.step.low, four.step.mid, four.step.high) == pytest.approx(
        (model.low / reach, model.mid, model.high * reach))


def test_a_workload_never_run_on_several_devices_borrows_both_readings():
    """Workload B ran on 1 device only. A's 2-node run paid 2.0 x its all-reduce; read as a fixed cost per step
    instead, that is U = step - step_1 - t. B's band spans x = 2 and 1 + U / t_B (and the median lies between)."""
    t2 = ring(2)
    found = [run("a1", 1, 1, STEP1), run("a2", 2, 2, STEP1 + 2.0 * t2), bench(),
             run("b1", 1, 1, 0.050, model="other", grad=S / 4)]
    cals, _, _ = calibrated(found)
    b = next(c for c in cals.values() if c.describe == "other")
    key = ("inter", "emulated 8 Gbit/s")
    tb = b.fits[key].seconds(2, S / 4)
    exposure, where, _ = forecast.exposure_for(b, key, tb)
    fixed = 1 + (2.0 * t2 - t2) / tb  # A's U = t2, as a fixed cost on B's smaller all-reduce
    assert (exposure.low, exposure.high) == pytest.approx(sorted((2.0, fixed)))
    assert where == "borrowed from the other workloads' runs at this level"


def test_each_forecast_band_by_hand_from_the_baseline_alone():
    """No multi-device run: one baseline run (scatter: the 2.6 % prior, its 80 % quantile q) and the benchmark. A
    step's band is the model widened by q x (the prediction's sd and the new run's own, in quadrature) / middle; the
    expected band by the prediction's sd alone; throughput is the units over each end; 1 device is 1 by definition."""
    cals, _, _ = calibrated([run("one", 1, 1, STEP1), bench()])
    (cal,) = cals.values()
    one, two = forecast.forecast(cal, ("intra", "cpu", "cpu"), ("inter", "emulated 8 Gbit/s"), 1, (2,))[0]
    q, sigma = 1.2815515655446008, 0.026
    assert (cal.scatter.quantile, cal.scatter.sigma) == (pytest.approx(q), sigma)
    # 1 device: the baseline's sd (sigma x the step over one run) and the run's own: sqrt(2) sigma
    assert one.step == pytest.approx(Band(STEP1 / math.exp(q * math.sqrt(2) * sigma), STEP1,
                                          STEP1 * math.exp(q * math.sqrt(2) * sigma)))
    assert one.efficiency == one.expected == Band(1.0, 1.0, 1.0)
    assert one.throughput == pytest.approx(Band(64 / one.step.high, 64 / STEP1, 64 / one.step.low))
    # 2 nodes: the middle is x = 1 of the ring; the expected step's top lies below the step's by the run's own sd
    mid = STEP1 + ring(2)
    assert two.step.mid == pytest.approx(mid)
    expected_top = STEP1 / two.expected.low
    assert two.step.high / expected_top == pytest.approx(
        math.exp(q * sigma * (math.hypot(STEP1, mid) - STEP1) / mid))
    assert two.throughput == pytest.approx(Band(128 / two.step.high, 128 / mid, 128 / two.step.low))
    assert two.efficiency == pytest.approx(Band(STEP1 / two.step.high, STEP1 / mid, STEP1 / two.step.low))


def test_which_link_a_key_names_and_which_points_each_link_gets():
    """One node's link is per hardware (a GPU's by its device; every CPU's local transport alike), the network's per
    link; a run adds its buckets all-reduced alone (of 2 devices and more, a time measured) to its link's points, a
    benchmark its rows (single_op_s where it has one), and only links between nodes state a rate."""
    assert forecast.network(1, "x", "cpu", "AMD EPYC") == forecast.network(1, "", "cpu", "Intel Xeon") == (
        "intra", "cpu", "cpu")
    assert forecast.network(1, "", "gpu", "NVIDIA H100") == ("intra", "gpu", "NVIDIA H100")
    assert forecast.network(2, "emulated 8 Gbit/s", "gpu", "NVIDIA H100") == ("inter", "emulated 8 Gbit/s")
    assert forecast.network(4, None, "cpu", "cpu") == ("inter", "")
    alone = {"one": (1, 1), "two": (2, 2), "gpus": (2, 1), "slow": (2, 2), "none": (2, 2)}
    found = []
    for run_id, (world, nodes) in alone.items():
        r = run(run_id, world, nodes, STEP1, alone=0.0 if run_id == "none" else 0.5)
        r["timing"]["comm"]["bucket_bytes"] = [S / 2, S / 2]
        found.append(r)
    found[2]["launch"].update(accelerator="gpu", device_names=["NVIDIA H100"])
    found[3]["launch"]["link"] = None  # a real network: no name, no rate
    b = bench()
    b["rows"][0]["single_op_s"] = 0.25  # a timed single call, preferred to the loop's average
    del b["rows"][1]["single_op_s"]
    _, runs, bench_rows = calibrated([*found, b])
    recs, from_bench = forecast_view.records(runs), forecast_view.bench_points(bench_rows)
    inter = ("inter", "emulated 8 Gbit/s")
    assert [(p.nbytes, p.seconds, p.gbit) for p in from_bench[inter][:2]] == [(2e6, 0.25, 8.0),
                                                                              (4e6, ring(2, 4e6), 8.0)]
    points = forecast.ring_points(recs, from_bench)
    assert sorted(points) == [("inter", ""), inter, ("intra", "gpu", "NVIDIA H100")]
    assert points[inter][-1] == Point(2, S, 2, 0.5, "two") and len(points[inter]) == 6
    assert points[("inter", "")] == [Point(2, S, 2, 0.5, "slow")]
    assert points[("intra", "gpu", "NVIDIA H100")] == [Point(2, S, 2, 0.5, "gpus")]
    assert forecast.link_rates(recs) == {inter: 8.0}  # the one-node run's launch names no link


def test_a_calibration_sends_the_multi_device_runs_buckets_and_fits_the_benchmark_near_one_bucket():
    """The 1-device run lists one bucket of S, the 2-node run DDP's two of S/2 that went on the wire: a step
    all-reduces S in 2 calls, and the fit reads the benchmark's sizes within 8 x of S/2 (1, 2 and 8 MB at 1 GB/s),
    not the large ones (128 and 256 MB, at 2 GB/s); the link's stated 32 Gbit/s caps neither."""
    fast = {**LINK, "gbit": 32.0}
    one, two = run("one", 1, 1, STEP1), run("two", 2, 2, STEP1 + ring(2))
    one["timing"]["comm"]["bucket_bytes"] = [S]
    two["timing"]["comm"]["bucket_bytes"] = [S / 2, S / 2]
    two["launch"]["link"] = fast
    b = bench()
    b["launch"]["link"] = fast
    b["rows"] = [{"bytes": n, "time_s": 2 * ALPHA + n / (beta * 1e9), "single_op_s": 2 * ALPHA + n / (beta * 1e9),
                  "busbw_GBps": beta} for n, beta in ((1e6, 1), (2e6, 1), (8e6, 1), (128e6, 2), (256e6, 2))]
    cals, _, _ = calibrated([one, two, b])
    (cal,) = cals.values()
    assert (cal.nbytes, cal.calls) == (S, 2)
    assert cal.fits[("inter", "emulated 32 Gbit/s")].beta_GBps == pytest.approx(1.0, rel=1e-6)
    for r in (one, two):  # an older result without its buckets: the gradient, in one call
        r["timing"]["comm"]["bucket_bytes"] = None
    (cal,) = calibrated([one, two, b])[0].values()
    assert (cal.nbytes, cal.calls) == (S, 1)


def test_the_one_line_answer_reads_the_whole_band():
    def f(num_nodes, world_size, low):
        return forecast.Forecast(num_nodes, world_size, 0.0, Band(1, 1, 1), Band(low, low, low), Band(1, 1, 1))

    assert forecast.answer([f(1, 1, 1.0), f(2, 2, 0.9), f(4, 4, 0.81), f(8, 8, 0.79), f(16, 16, 0.9)]) == 4
    assert forecast.answer([f(1, 1, 1.0), f(2, 2, 0.7)]) == 1  # one GPU per node: one node is all that holds
    assert forecast.answer([f(1, 1, 1.0), f(1, 4, 0.5), f(2, 8, 0.9)]) is None  # not even one full node


def test_the_track_record_predicts_each_configuration_from_the_others_never_from_its_repeats(tmp_path):
    """Two repeats of the 2-node configuration at 8 Gbit/s (1.2 and 1.4 x the all-reduce) and one at 4 Gbit/s
    (1.0 x). Each is predicted from the other configuration's run alone, however far its own repeat lies: a
    forecast of a scale not run has no repeat of it to read."""
    slow = {**LINK, "gbit": 4.0}

    def at4(run_id, x):
        r = run(run_id, 2, 2, STEP1 + x * ring_at(2, 0.5))
        r["launch"]["link"] = slow
        return r

    def ring_at(n, beta):
        return 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * S / (beta * 1e9)

    found = [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), run("b", 2, 2, STEP1 + 1.4 * ring(2)),
             at4("c", 1.0), bench()]
    _, runs, bench_rows = calibrated(found)
    rows = forecast.track_record(forecast_view.records(runs), forecast_view.bench_points(bench_rows))
    record = pd.DataFrame(rows).set_index("run_id")
    # a and b: x = 1.0 of c (and U = 0: both readings 1), on the 8 Gbit/s fit; c: a's and b's x = 1.2, 1.4 and,
    # read as fixed costs of 0.2 and 0.4 t2, 1 + 0.2 t2 / tc and 1 + 0.4 t2 / tc; the middle is their median, on
    # the 8 Gbit/s fit scaled to 4
    t2, tc = ring(2), ring_at(2, 0.5)
    readings = sorted([1.2, 1.4, 1 + 0.2 * t2 / tc, 1 + 0.4 * t2 / tc])
    assert record.loc["a", "predicted_step_s"] == pytest.approx(STEP1 + ring(2))
    assert record.loc["b", "predicted_step_s"] == pytest.approx(STEP1 + ring(2))
    assert record.loc["c", "predicted_step_s"] == pytest.approx(STEP1 + (readings[1] + readings[2]) / 2 * tc,
                                                                rel=1e-6)
    assert list(record["exposure_from"]) == ["this workload on another link (read as x and as a fixed cost per "
                                             "step)"] * 3
    assert record.loc["b", "measured_eff"] == pytest.approx(STEP1 / (STEP1 + 1.4 * ring(2)))
    assert [list(row) for row in rows] == [list(forecast.TRACK_COLUMNS)] * 3  # what the report's frame reads
    a = record.loc["a"]
    assert (a["group"], a["world_size"], a["num_nodes"], a["link"]) == (runs["group"][0], 2, 2, "emulated 8 Gbit/s")
    assert a["measured_step_s"] == pytest.approx(STEP1 + 1.2 * ring(2))
    assert a["predicted_eff"] == pytest.approx(STEP1 / (STEP1 + ring(2)))
    # a range (read on another link): x 1 ± the fit's 5 %, then the 2.6 % prior scatter of the new run and of the
    # baseline's one run, in quadrature, at the normal 80 % quantile
    mid = STEP1 + t2
    reach = math.exp(noise.Scatter(0.026, 0).quantile * 0.026 * math.hypot(STEP1, mid) / mid)  # 1.2816
    assert (a["eff_low"], a["eff_high"]) == pytest.approx(
        (STEP1 / ((STEP1 + 1.05 * t2) * reach), STEP1 * reach / (STEP1 + 0.95 * t2)))
    # b's 1.4 x lies below the band a and b share (b: 0.817, its bottom 0.819); a's 1.2 x inside
    assert list(record["inside"]) == [True, False, True] and record.loc["b", "eff_low"] == a["eff_low"]
    # a and b are each predicted from c alone (one run: the 2.6 % prior, no degree of freedom); c from a and b:
    # the sample standard deviation of their two log steps, one degree of freedom
    spread = abs(math.log((STEP1 + 1.4 * ring(2)) / (STEP1 + 1.2 * ring(2)))) / math.sqrt(2)
    assert list(record["scatter"]) == pytest.approx([0.026, 0.026, spread])
    assert list(record["scatter_dof"]) == [0, 0, 1]
    only_b = forecast.track_record(forecast_view.records(runs), forecast_view.bench_points(bench_rows), only={"b"})
    assert [row["run_id"] for row in only_b] == ["b"]  # the report's newest run of each configuration alone


def test_the_report_counts_the_track_record_of_the_newest_runs(tmp_path):
    """b (the newest of a and b) paid 1.4 x where c paid 1.0 x: out of a band 2.6 % of scatter wide; c inside."""
    found = [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), run("b", 2, 2, STEP1 + 1.4 * ring(2)),
             bench()]
    c = run("c", 2, 2, STEP1 + 1.0 * (2 * ALPHA + S / 0.5e9))
    c["launch"]["link"] = {**LINK, "gbit": 4.0}
    for r in [*found, c]:
        results.write(str(tmp_path), r)
    proc = run_script("benchmark.py", "--output_dir", tmp_path)
    assert proc.returncode == 0 and "1 of 2 inside the 80 % band (50 %); median error" in proc.stdout, \
        proc.stdout[-2000:]


def test_the_track_record_prices_one_nodes_runs_on_its_own_link_and_skips_what_it_cannot_calibrate():
    """A 2-device run on one node is predicted on the one-node fit (bench at 1 node: the same α and β) with the x
    of the 2-node runs (1.2 and 1.4: median 1.3), never from its own; the 1-device run is no row, and a workload
    without a 1-device run (calibrates nothing) is passed over, not the end of the record."""
    strong = [run("s1", 1, 1, STEP1), run("s2", 2, 2, STEP1 / 2 + ring(2))]  # strong scaling: no weak efficiency
    for r in strong:
        r["workload"]["scaling"] = "strong"
    unfit = run("real", 2, 2, STEP1 + ring(2))  # a real network no benchmark measured: no fit, no prediction
    unfit["launch"]["link"] = None
    found = [run("lone", 2, 2, STEP1, model="mlp"), run("one", 1, 1, STEP1), *strong, unfit,
             run("n1", 2, 1, STEP1 + 1.1 * ring(2)), run("a", 2, 2, STEP1 + 1.2 * ring(2)),
             run("b", 2, 2, STEP1 + 1.4 * ring(2)), bench(), bench(num_nodes=1)]
    found[-3]["launch"]["devices"] = None  # an older result: GPUs per node from the world size and the nodes
    _, runs, bench_rows = calibrated(found)
    recs = forecast_view.records(runs)
    assert [r.run_id for r in recs].index("real") < [r.run_id for r in recs].index("a")  # passed over first
    record = pd.DataFrame(forecast.track_record(recs, forecast_view.bench_points(bench_rows))).set_index("run_id")
    assert sorted(record.index) == ["a", "b", "n1"]
    runs.loc[runs["num_nodes"] > 1, "devices"] = None  # the shape the report forecasts, launch.devices or not
    assert forecast_view.devices_per_node(runs, runs.loc[runs["run_id"] == "a", "group"].iloc[0]) == 1
    assert record.loc["n1", "predicted_step_s"] == pytest.approx(STEP1 + 1.3 * ring(2), rel=1e-6)
    assert record.loc["n1", "measured_eff"] == pytest.approx(STEP1 / (STEP1 + 1.1 * ring(2)))


def test_the_track_record_reads_a_gpu_nodes_own_link_by_its_device_and_any_node_count():
    """On GPUs one node's link is the device's (an H100's NVLink is not an A100's): the one-node run n1 is priced on
    the H100 one-node benchmark with the 2-node runs' x (1.2, 1.4: 1.3). A 3-node run (no default node count) is
    priced at 3 nodes, with an x between its peers'."""
    def gpu(r):
        r["launch"].update(accelerator="gpu", device_names=["NVIDIA H100 80GB HBM3"], backend="nccl")
        return r

    def record(found):
        _, runs, bench_rows = calibrated([gpu(r) for r in found])
        return pd.DataFrame(forecast.track_record(forecast_view.records(runs),
                                                  forecast_view.bench_points(bench_rows))).set_index("run_id")

    found = [run("one", 1, 1, STEP1), run("n1", 2, 1, STEP1 + 1.1 * ring(2)), run("a", 2, 2, STEP1 + 1.2 * ring(2)),
             run("b", 2, 2, STEP1 + 1.4 * ring(2)), bench(), bench(num_nodes=1)]
    one_node = record(found)
    assert sorted(one_node.index) == ["a", "b", "n1"]
    assert one_node.loc["n1", "predicted_step_s"] == pytest.approx(STEP1 + 1.3 * ring(2), rel=1e-6)
    assert one_node.loc["n1", "exposure_from"] == "borrowed from this workload's at the other level"
    # and the 2-node runs, whose own configuration is left out, with n1's x read on the H100's own fit: 1.1
    assert one_node.loc["a", "predicted_step_s"] == pytest.approx(STEP1 + 1.1 * ring(2), rel=1e-6)
    three = record([*found[:1], *found[2:4], run("t", 3, 3, STEP1 + 1.3 * ring(3)), bench()]).loc["t"]
    assert (three["world_size"], three["num_nodes"]) == (3, 3)
    assert STEP1 + 1.2 * ring(3) < three["predicted_step_s"] < STEP1 + 1.4 * ring(3)


def test_forecast_from_the_command_line(tmp_path):
    for r in [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), bench()]:
        results.write(str(tmp_path), r)
    report = run_script("benchmark.py", "--output_dir", tmp_path, "--forecast", "--forecast_nodes", 2, 4)
    predicted = run_script("predict.py", "--from", tmp_path, "--num_nodes", 2, 4)
    assert report.returncode == 0 and predicted.returncode == 0, report.stderr + predicted.stderr
    table = forecast_view.render(frames.runs_frame(results.scan(str(tmp_path))[0]),
                                 explain.bench_frame(results.scan(str(tmp_path))[0]), (2, 4))
    assert "\n".join(table) in report.stdout and predicted.stdout.strip() == "\n".join(table).strip()
    # the 4-node step, by hand: 100 + x (6 α + 1.5 S / β), x between 1.2 (all a paid beyond its all-reduce grows
    # with it) and 1 + 0.2 t2 / t4 (it stays): their mean, the median of two
    four = STEP1 + (1.2 + 1 + 0.2 * ring(2) / ring(4)) / 2 * ring(4)
    assert f"{four * 1e3:,.1f} (" in report.stdout
    assert "between nodes (emulated 8 Gbit/s): ring fit α = 20.0 µs, β = 1 GB/s (100 % of the rate)" in report.stdout


@pytest.mark.parametrize("script, args, message", [
    ("benchmark.py", ["--forecast_nodes", "4"], "--forecast_nodes goes with --forecast"),
    ("benchmark.py", ["--link_gbit", "1"], "--link_gbit goes with --forecast"),
    ("predict.py", ["--from", "nowhere"], "nowhere is not a folder"),
])
def test_forecast_flags_refused_in_one_line(script, args, message, tmp_path):
    proc = run_script(script, *args, "--output_dir", tmp_path) if script == "benchmark.py" else \
        run_script(script, *args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, \
        proc.stderr


def test_several_nodes_are_never_forecast_faster_than_one_full_node():
    """One node's own link slow (β = 0.1 GB/s), the network between nodes fast (1 GB/s): the ring formula alone
    would make 2 nodes of 2 GPUs beat one node of 2; a step there is at least the one-node step (the ceiling)."""
    slow = 0.1

    def intra(n, b):
        return 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * b / (slow * 1e9)

    one_node = bench(num_nodes=1)
    one_node["launch"]["link"] = None
    for row in one_node["rows"]:
        row["time_s"] = row["single_op_s"] = intra(2, row["bytes"])
    found = [run("one", 1, 1, STEP1), run("node", 2, 1, STEP1 + 3 * intra(2, S)), one_node, bench(num_nodes=2, world=4)]
    cals, _, _ = calibrated(found)
    (cal,) = cals.values()
    rows, _ = forecast.forecast(cal, ("intra", "cpu", "cpu"), ("inter", "emulated 8 Gbit/s"), 2, (1, 2))
    node, two = [f for f in rows if f.world_size == 2][0], [f for f in rows if f.num_nodes == 2][0]
    assert node.step.mid == pytest.approx(STEP1 + 3 * intra(2, S))
    assert STEP1 + 3 * ring(4) < node.step.mid  # what the formula alone would give
    assert (two.step.low, two.step.mid, two.step.high) == pytest.approx((node.step.low, node.step.mid, node.step.high))


def test_each_band_reaching_past_100_percent_is_named_with_its_top_one_at_100_is_not():
    from scalelab.report import plausible

    row = dict(group="g", world_size=2, num_nodes=1, link="", eff_low=0.7, predicted_eff=0.9)
    track = pd.DataFrame([dict(row, eff_high=1.28), dict(row, eff_high=1.0),
                          dict(row, num_nodes=2, link="emulated 8 Gbit/s", eff_high=1.05)])
    assert plausible.band_past_linear(track, {"g": "B"}) == [
        "  2 band(s) reach past 100 % (B 2 devices on 1 node: 128 %; B 2 devices on 2 nodes (emulated 8 Gbit/s): "
        "105 %): noise, not scaling past linear. The model's step (a band's middle) is never shorter than the "
        "1-device runs' median step, so its efficiency is at most 100 %; a band's ends add the scatter of the "
        "1-device runs, of the runs it was read from and of one new run, and that reaches past it."]
    assert plausible.band_past_linear(track.iloc[1:2], {"g": "B"}) == []  # a top of 100 % exactly: not past it
    assert plausible.band_past_linear(pd.DataFrame([dict(row, eff_high=1.004)]), {"g": "B"}) == []  # printed 100 %
    assert "(B 2 devices on 1 node: 101 %)" in plausible.band_past_linear(pd.DataFrame([dict(row, eff_high=1.01)]),
                                                                        {"g": "B"})[0]


@pytest.mark.parametrize("efficiency, scaling, past", [(1.05, "weak", False), (1.0501, "weak", True),
                                                       (0.99, "weak", False), (1.5, "strong", False),
                                                       (float("nan"), "weak", False), (1.2, None, True)])
def test_a_level_is_past_linear_beyond_100_percent_and_its_noise_floor_in_weak_scaling_only(efficiency, scaling,
                                                                                             past):
    from scalelab.report import plausible

    assert plausible.past_linear(efficiency, scaling) is past


@settings(max_examples=40, deadline=None)
@given(base=st.lists(st.floats(0.8, 1.25), min_size=1, max_size=3),
       xs=st.lists(st.tuples(st.sampled_from([(2, 1), (2, 2), (4, 2)]), st.floats(-0.5, 4.0)), min_size=1, max_size=4))
def test_a_predicted_efficiency_is_never_past_100_percent_only_its_band_is(base, xs):
    """What the track record's line on a band past 100 % says (plausible.band_past_linear): the model's step, a
    band's middle, is never shorter than the 1-device runs' median step, whatever the runs it was read from measured
    (one faster at 2 devices than at 1 among them: a negative exposure, credited as none)."""
    found = [run(f"one{i}", 1, 1, STEP1 * f) for i, f in enumerate(base)]
    found += [run(f"r{i}", world, nodes, STEP1 + x * ring(world)) for i, ((world, nodes), x) in enumerate(xs)]
    found += [bench(num_nodes=1), bench(num_nodes=2), bench(num_nodes=2, world=4)]
    found[-3]["launch"]["link"] = None
    _, runs, bench_rows = calibrated(found)
    rows = forecast.track_record(forecast_view.records(runs), forecast_view.bench_points(bench_rows))
    assert all(r["predicted_eff"] <= 1 + 1e-12 for r in rows), rows
    for cal in forecast.calibrate_all(forecast_view.records(runs), forecast_view.bench_points(bench_rows)).values():
        predicted, _ = forecast.forecast(cal, ("intra", "cpu", "cpu"), ("inter", "emulated 8 Gbit/s"), 2, (1, 2, 4))
        assert all(f.efficiency.mid <= 1 + 1e-12 for f in predicted)


def test_the_forecast_names_each_level_by_where_its_link_is():
    """Each fitted figure is printed under the level it was fitted at: one node's own link (β = 0.1 GB/s here) as
    "within a node", the network as "between nodes" and its link if emulated (β = 1 GB/s, the benchmark's stated
    rate); the header, too."""
    one_node = bench(num_nodes=1)
    one_node["launch"]["link"] = None
    for row in one_node["rows"]:
        row["time_s"] = row["single_op_s"] = 2 * ALPHA + row["bytes"] / (0.1 * 1e9)  # a ring of 2, β = 0.1 GB/s
    found = [run("one", 1, 1, STEP1), run("node", 2, 1, STEP1 + 0.2), one_node, bench(num_nodes=2, world=4)]
    lines = forecast_view.render(frames.runs_frame(found), explain.bench_frame(found, explain.COLLECTIVES), (1, 2))
    assert lines[0].endswith(", 2 device(s) per node, between nodes (emulated 8 Gbit/s) (weak scaling)"), lines[0]
    fits = [line.split(", error")[0] for line in lines if "ring fit" in line]
    assert fits == ["  within a node: ring fit α = 20.0 µs, β = 0.1 GB/s",
                    "  between nodes (emulated 8 Gbit/s): ring fit α = 20.0 µs, β = 1 GB/s (100 % of the rate)"]
    found[-1]["launch"]["link"] = None  # a real network: nothing to name after "between nodes"
    lines = forecast_view.render(frames.runs_frame(found), explain.bench_frame(found, explain.COLLECTIVES), (1, 2))
    assert lines[0].endswith(", 2 device(s) per node, between nodes (weak scaling)"), lines[0]
    assert [line for line in lines if line.startswith("  between nodes")][0].startswith("  between nodes: ring fit")


def test_a_nightly_reference_fails_when_the_forecast_error_grows(tmp_path):
    """The newest 2-node run paid 3 x its all-reduce: predicted without its configuration's runs (none other
    between nodes: x = 1, no overlap), its efficiency is off by far more than 5 points, and
    `forecast_error: [5, null, 0, points]` fails."""
    slow = run("b", 2, 2, STEP1 + 3.0 * ring(2))
    slow["created"] = "2099-01-01T00:00:00"  # the newest of the configuration
    for r in [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), slow, bench()]:
        results.write(str(tmp_path / "runs"), r)
    ref = tmp_path / "ref.yaml"
    ref.write_text("checks:\n- name: gpt-2x2\n  workload: {model: gpt}\n  hardware: {accelerator: cpu}\n"
                   "  devices: 2\n  nodes: 2\n  link: emulated 8 Gbit/s\n"
                   "  reference:\n    forecast_error: [5, null, 0, points]\n")
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "runs", "--reference", ref)
    error = abs(STEP1 / (STEP1 + 1.0 * ring(2)) - STEP1 / (STEP1 + 3.0 * ring(2))) * 100  # by hand
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAIL gpt-2x2.forecast_error: {error:.4g} points above 5" in proc.stdout, proc.stdout


def test_a_reading_from_the_other_level_is_read_both_ways_too():
    """Only a one-node run (x = 2 there); between nodes the band spans x = 2 and its fixed-cost reading."""
    def intra(n, b):
        return 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * b / (10 * 1e9)

    one_node = bench(num_nodes=1)
    one_node["launch"]["link"] = None
    for row in one_node["rows"]:
        row["time_s"] = row["single_op_s"] = intra(2, row["bytes"])
    found = [run("one", 1, 1, STEP1), run("node", 2, 1, STEP1 + 2.0 * intra(2, S)), one_node, bench()]
    cals, _, _ = calibrated(found)
    (cal,) = cals.values()
    key = ("inter", "emulated 8 Gbit/s")
    t = cal.fits[key].seconds(2, S)
    exposure, where, _ = forecast.exposure_for(cal, key, t)
    u = 2.0 * intra(2, S) - cal.fits[("intra", "cpu", "cpu")].seconds(2, S)  # U of the one-node run
    assert (exposure.low, exposure.high) == pytest.approx(sorted((2.0, 1 + u / t)), rel=1e-4)
    assert where == "borrowed from this workload's at the other level"


def test_an_exposure_nobody_measured_is_a_wide_band_not_a_point():
    """One workload, one node, no other runs: x is unknown. The band spans all hidden (x = 0) to twice the
    all-reduce (x = 2), so a 2-device step of 100 ms compute and a 10 ms all-reduce is forecast at 100-120 ms."""
    cal = SimpleNamespace(exposures={}, borrowed={})
    band, where, _ = forecast.exposure_for(cal, ("intra", None), 0.010)
    assert (band.low, band.mid, band.high) == (0.0, 1.0, 2.0) and where.startswith("none measured: x from 0 to 2")
    steps = [0.100 + x * 0.010 for x in (band.low, band.mid, band.high)]
    assert steps == pytest.approx([0.100, 0.110, 0.120])


# --- the calibrated model's own rules (perfmodel/calibrate.py), worked by hand ------------------------------------

def test_one_size_cannot_tell_latency_from_bandwidth_so_beta_is_fitted_alone():
    """16 MB over 2 ranks in 10 ms and in 20 ms: busbw v = 1.6 and 0.8 GB/s, and with α = 0 the relative errors are
    v / β − 1, least squares at 1/β = Σv / Σv² = 2.4 / 3.2: β = 4/3 GB/s. Predicted 12 ms: errors +0.2 and −0.4, whose
    root mean square is √0.1."""
    fit = calibrate.fit_ring([Point(2, 16e6, 1, 0.010, "a"), Point(2, 16e6, 1, 0.020, "b")])
    assert fit.alpha_s == 0 and fit.beta_GBps == pytest.approx(4 / 3)
    assert fit.residual == pytest.approx(0.1 ** 0.5) and fit.points == 2 and fit.sources == ("a", "b")


def test_times_that_do_not_grow_with_size_hold_beta_at_the_fastest_busbw_seen_not_an_infinite_bandwidth():
    """1 MB and 2 MB over 2 ranks, both in 1 ms: α = 0.5 ms and 1/β = 0 fit exactly, but β must be finite. The
    fastest bus bandwidth a point reached, 2 GB/s, is a rate the link delivered: β holds there and α alone is fitted
    on what it leaves, 1 − 0.5 and 1 − 1 of each point: α · 2 / 1 ms = (0.5 + 0) / 2, α = 0.125 ms; predicted
    0.75 and 1.25 ms, errors −0.25 and +0.25."""
    fit = calibrate.fit_ring([Point(2, 1e6, 1, 0.001, "a"), Point(2, 2e6, 1, 0.001, "b")])
    assert fit.alpha_s == pytest.approx(1.25e-4) and fit.beta_GBps == pytest.approx(2.0)
    assert fit.residual == pytest.approx(0.25) and fit.capped_from is None


def test_a_point_without_a_call_count_carries_no_latency():
    """calls = 0: the α column is all zero, nothing to separate; β alone, 1 GB in 0.5 s over 2 ranks = 2 GB/s."""
    fit = calibrate.fit_ring([Point(2, 1e9, 0, 0.5, "a")])
    assert (fit.alpha_s, fit.beta_GBps, fit.residual) == (0, pytest.approx(2.0), pytest.approx(0, abs=1e-12))


def test_points_without_a_time_or_bytes_are_left_out_one_byte_is_kept():
    points = [Point(2, 1e6, 1, ring(2, 1e6), "a"), Point(2, 8e6, 1, ring(2, 8e6), "b"),
              Point(2, 4e6, 1, 0.0, "no time"), Point(2, 0, 1, 0.001, "no bytes"), Point(2, 1, 1, ring(2, 1), "1 B")]
    fit = calibrate.fit_ring(points)
    assert fit.points == 3 and fit.sources == ("a", "b", "1 B")
    assert fit.alpha_s == pytest.approx(ALPHA, rel=1e-6) and fit.beta_GBps == pytest.approx(BETA, rel=1e-6)


def test_a_slow_link_separates_latency_from_bandwidth_as_a_fast_one_does():
    """An emulated 10 Mbit/s link (β = 1.25e-3 GB/s) with 1 ms a step: 1 MB and 2 MB over 2 ranks take 2 ms + 0.8 s
    and 2 ms + 1.6 s. Whether two sizes can be told apart is a matter of the angle between the α and β columns,
    not of their units: α and β are recovered here too."""
    fit = calibrate.fit_ring([Point(2, 1e6, 1, 0.002 + 0.8, "a"), Point(2, 2e6, 1, 0.002 + 1.6, "b")])
    assert fit.alpha_s == pytest.approx(1e-3, rel=1e-6) and fit.beta_GBps == pytest.approx(1.25e-3, rel=1e-6)


def test_a_fit_scaled_to_another_rate_keeps_its_latency():
    fit = calibrate.RingFit(2e-5, 1.0, 0.05, 7, ("a", "b"))
    assert fit.at_rate(2.5) == calibrate.RingFit(2e-5, 2.5, 0.05, 7, ("a", "b"))


def test_below_two_ranks_there_is_no_ring_and_the_link_is_not_read():
    """One rank (or none) all-reduces nothing: 0 s, even on a fit scaled to a rate of 0, which two ranks refuse."""
    stopped = calibrate.RingFit(2e-5, 1.0, 0.0, 1, ("a",)).at_rate(0.0)
    assert stopped.seconds(1, S) == 0.0 and stopped.seconds(0, S) == 0.0
    with pytest.raises(ValueError, match="^bandwidth_GBps must be a positive number, got 0.0$"):
        stopped.seconds(2, S)


def test_the_exposed_factor_is_what_a_step_paid_per_second_of_all_reduce():
    assert calibrate.exposed_factor(0.130, 0.100, 0.020) == pytest.approx(1.5)
    assert calibrate.exposed_factor(0.130, 0.100, 0.0) is None  # no all-reduce to compare with
    assert calibrate.exposed_factor(0.130, 0.100, -0.01) is None


def test_a_band_holds_its_ends_and_a_step_band_never_credits_a_negative_exposure():
    band = Band(1.0, 2.0, 3.0)
    assert band.contains(1.0) and band.contains(3.0) and not band.contains(0.99) and not band.contains(3.01)
    # step = 1 s + x · 0.1 s, t ± 10 %: x in [0.5, 0.8, 1.5] -> 1 + 0.5·0.09, 1 + 0.08, 1 + 1.5·0.11
    step = calibrate.step_band(Band(1.0, 1.0, 1.0), 0.1, Band(0.5, 0.8, 1.5), 0.1)
    assert (step.low, step.mid, step.high) == pytest.approx((1.045, 1.08, 1.165))
    # x in [-0.2, 0.3, 0.6]: the low end adds nothing (no all-reduce saves time), the high end 0.6·0.11
    step = calibrate.step_band(Band(1.0, 1.0, 1.0), 0.1, Band(-0.2, 0.3, 0.6), 0.1)
    assert (step.low, step.mid, step.high) == pytest.approx((1.0, 1.03, 1.066))


def test_the_model_rows_are_those_of_the_links_there_is_a_fit_for():
    """2 GPUs a node, 16 MB in 4 calls, 100 ms a step on one device. One node's link: α = 10 µs, β = 2 GB/s, so
    one node's all-reduce is 4 · 2 · 10 µs + 16 MB / 2 GB/s = 0.08 ms + 8 ms."""
    intra = calibrate.RingFit(1e-5, 2.0, 0.0, 2, ("a",))
    inter = calibrate.RingFit(2e-5, 1.0, 0.0, 2, ("b",))
    rows = calibrate.model_rows(0.1, 16e6, 4, 2, (2, 4), intra, None)
    assert [(r.num_nodes, r.world_size) for r in rows] == [(1, 1), (1, 2)]
    node = rows[1]
    assert node.latency_term_s == pytest.approx(8e-5) and node.comm_s == pytest.approx(8e-5 + 8e-3)
    assert node.step_s_no_overlap == pytest.approx(0.1 + 8e-5 + 8e-3)
    assert [(r.num_nodes, r.world_size) for r in calibrate.model_rows(0.1, 16e6, 4, 2, (2, 4), None, inter)] == [
        (1, 1), (2, 4), (4, 8)]


def test_a_workloads_calls_are_its_buckets_however_the_bytes_divide():
    """1 GB in 29 calls: 29 latency bills (29 · 2 · 10 µs over 2 ranks), not 30 because 1e9 / 29 rounds down."""
    intra = calibrate.RingFit(1e-5, 2.0, 0.0, 2, ("a",))
    assert calibrate.inputs_for(0.1, 1e9, 29, 2, (1,), intra, None).buckets == 29
    node = calibrate.model_rows(0.1, 1e9, 29, 2, (1,), intra, None)[-1]
    assert node.latency_term_s == pytest.approx(29 * 2 * 1e-5)


def test_a_band_too_wide_to_inform_is_said_so_and_not_counted_inside():
    """The dry run: "8 % (8–128)" counted among "6 of 6 inside", a band that holds any measurement at all."""
    import pandas as pd

    runs = frames.runs_frame([make_result("one", 1), make_result("two", 2)])
    row = dict(group=runs["group"].iloc[0], world_size=2, num_nodes=1, link="", predicted_step_s=0.02,
               measured_step_s=0.021, exposure_from="the benchmark (x)", scatter=0.025, scatter_dof=3)
    track = pd.DataFrame([dict(row, eff_low=0.08, predicted_eff=0.08, eff_high=1.28, measured_eff=0.5, inside=True),
                          dict(row, eff_low=0.7, predicted_eff=0.8, eff_high=0.9, measured_eff=0.85, inside=True),
                          dict(row, eff_low=0.7, predicted_eff=0.8, eff_high=0.9, measured_eff=0.5, inside=False)])
    lines = forecast_view.track_record(runs, track, "simple")
    table = lines[1].splitlines()
    assert [re.search(r"%\s+(too wide|yes|NO)\s", line).group(1) for line in table[2:]] == ["too wide", "yes", "NO"]
    assert lines[2].startswith("  1 of 2 inside the 80 % band (50 %; 1 band(s) wider than 50 points not counted: "
                               "too few or too noisy runs to fit the model from; more repeats of each configuration "
                               "narrow them (the demo's --repeats 3)); median error 17.5 points. ")  # of 5, 30
    assert forecast_view.track_record(runs, track.iloc[1:], "simple")[2].startswith(
        "  1 of 2 inside the 80 % band (50 %); median error 17.5 points. ")
    alone = forecast_view.track_record(runs, track.iloc[:1], "simple")[2]  # nothing counted: no share, no error
    assert alone.startswith("  0 of 0 inside the 80 % band (1 band(s) wider than 50 points") and \
        alone.endswith("narrow them (the demo's --repeats 3)); no error to state. `--forecast` forecasts the scales "
                       "not run."), alone
    assert lines[3].startswith("  1 band(s) reach past 100 % (A 2 devices on 1 node: 128 %): noise, not scaling past "
                               "linear. The model's step (a band's middle) is never shorter than")
    assert not [line for line in forecast_view.track_record(runs, track.iloc[1:], "simple") if "past 100" in line]
    assert lines[4] == ("  The bands' run-to-run scatter (each band's without its own configuration's runs: not the "
                        "Scaling table's): A 2.5 % (repeats, 3 degree(s) of freedom)")
    assert lines[5].startswith("  Here `measured` is each configuration's newest run (the 1-device runs' median "
                               "step ÷ its median step), `predicted` is read from the other configurations' runs "
                               "only. The Scaling table's `efficiency` is from throughput instead")
    missed = dict(row, eff_low=0.03, predicted_eff=0.1, eff_high=0.56, measured_eff=0.6, inside=False)
    lines = forecast_view.track_record(runs, pd.concat([track, pd.DataFrame([missed])], ignore_index=True), "simple")
    assert [re.search(r"%\s+(too wide|yes|NO, too wide|NO)\s", line).group(1) for line in
            lines[1].splitlines()[2:]] == ["too wide", "yes", "NO", "NO, too wide"]  # a wide band's miss is shown
    assert lines[2].startswith("  1 of 2 inside the 80 % band (50 %; 2 band(s) wider than 50 points not counted: "
                               "too few or too noisy runs to fit the model from; more repeats of each configuration "
                               "narrow them (the demo's --repeats 3); 1 of them missed even so (1 above it, 0 "
                               "below)); median error 17.5 points. ")


def test_a_calibration_reads_the_newest_benchmarks_of_each_configuration_as_it_reads_runs():
    """A nightly folder holds years of benchmarks: 100,000 results fitted 820,000 points for each calibration (6 s
    of a report). Like runs (forecast_view.recent), the newest PER_CONFIGURATION of each configuration count; a
    configuration with fewer, or an nccl-tests log without a dtype, keeps all of its own."""
    found = []
    for day in range(7):
        b = bench()
        b["run_id"], b["created"] = f"night{day}", f"2026-01-0{day + 1}T00:00:00"
        found.append(b)
    other = bench(world=4)
    other["created"], other["config"] = "2020-01-01T00:00:00", {}
    found.append(other)
    points = forecast_view.bench_points(explain.bench_frame(found, explain.COLLECTIVES))
    used = {p.source for ps in points.values() for p in ps}
    assert used == {f"night{day}" for day in range(2, 7)} | {"ar4x2"}
    assert explain.PER_CONFIGURATION == 5 and sum(map(len, points.values())) == 6 * 5


def test_a_too_wide_band_is_said_with_its_own_cause_borrowed_or_noisy():
    """The demo's MLP band (1-75 %) came from the GPT's per-step cost borrowed (7 ms on a 1 ms step), not from noise:
    its line said "more repeats narrow them", which they would not. Each cause is counted and said apart."""
    import pandas as pd

    runs = frames.runs_frame([make_result("one", 1), make_result("two", 2)])
    row = dict(group=runs["group"].iloc[0], world_size=2, num_nodes=1, link="", predicted_step_s=0.02,
               measured_step_s=0.021, scatter=0.025, scatter_dof=3, eff_low=0.08, predicted_eff=0.3, eff_high=0.9,
               measured_eff=0.5, inside=True)
    ours = forecast.exposure_for(forecast.Calibration("d", "samples/s", 1.0, Band(0.1, 0.1, 0.1), ["b"], None,
                                                       1e6, 1, {}), ("intra", "cpu", "cpu"), 0.01)[1]
    borrowed = forecast.exposure_for(forecast.Calibration(
        "d", "samples/s", 1.0, Band(0.1, 0.1, 0.1), ["b"], None, 1e6, 1, {},
        borrowed={"intra": [forecast.Reading(1.2, 0.002, 0.112, 0.01)]}), ("intra", "cpu", "cpu"), 0.01)[1]
    other_level = forecast.exposure_for(forecast.Calibration(
        "d", "samples/s", 1.0, Band(0.1, 0.1, 0.1), ["b"], None, 1e6, 1, {},
        exposures={("inter", ""): [forecast.Reading(1.2, 0.002, 0.112, 0.01)]}), ("intra", "cpu", "cpu"), 0.01)[1]
    other_link = forecast.exposure_for(forecast.Calibration(
        "d", "samples/s", 1.0, Band(0.1, 0.1, 0.1), ["b"], None, 1e6, 1, {},
        exposures={("inter", "2"): [forecast.Reading(1.2, 0.002, 0.112, 0.01)]}), ("inter", "0.2"), 0.05)[1]
    track = pd.DataFrame([dict(row, exposure_from=borrowed), dict(row, exposure_from="this workload on this link"),
                          dict(row, exposure_from=ours), dict(row, exposure_from=borrowed),
                          dict(row, exposure_from=other_level), dict(row, exposure_from=other_link)])
    said = forecast_view.track_record(runs, track, "simple")[2]
    x = forecast_view.X_NAMED
    assert f"(2 band(s) wider than 50 points not counted: {x} borrowed from other workloads' runs" in said, said
    assert "; 1 band(s) wider than 50 points not counted: too few or too noisy runs" in said, said
    assert f"; 1 band(s) wider than 50 points not counted: no multi-device run to read {x} from, so x spans 0 to 2" \
        in said, said
    assert f"; 2 band(s) wider than 50 points not counted: {x} read from its runs at another all-reduce time" in said
    assert said.count("not counted") == 4 and "0 of 0 inside" in said


def test_runs_flagged_for_contention_are_left_out_of_the_fit_and_the_score_and_said_so():
    """c (4 Gbit/s) paid 3 x its all-reduce while a neighbour took half a core from rank 1: the report's starved
    column names it, no calibration reads it (x stays 1.2 from a), the track record does not judge it, and one
    line says so; without the flag it is fitted and scored like any run."""
    slow = {**LINK, "gbit": 4.0}
    c = run("c", 2, 2, STEP1 + 3.0 * (2 * ALPHA + S / 0.5e9))
    c["launch"]["link"] = slow
    found = [run("one", 1, 1, STEP1), run("a", 2, 2, STEP1 + 1.2 * ring(2)), c, bench()]
    quiet = forecast_view.record(frames.runs_frame(found), explain.bench_frame(found, explain.COLLECTIVES))
    assert sorted(quiet["run_id"]) == ["a", "c"]
    c["timing"]["had_cpu"] = [1.0, 0.5]
    runs = frames.runs_frame(found)
    assert runs.set_index("run_id").loc["c", "starved"].startswith("rank 1 had a core 50 %")
    assert list(forecast_view.contended(runs)) == [False, False, True]
    assert set(forecast_view.completed(runs)["run_id"]) == {"one", "a"}
    track = forecast_view.record(runs, explain.bench_frame(found, explain.COLLECTIVES))
    assert list(track["run_id"]) == ["a"]  # c not judged; a, with c left out of its fit, has no x to read
    assert track["exposure_from"].iloc[0].startswith("none measured")
    lines = forecast_view.track_record(runs, quiet, "simple")
    said = ("1 run(s) flagged for contention (A 2 devices on 2 nodes (emulated 4 Gbit/s); starved: rank 1 had a "
            "core 50 % of the time it was ready to run: other work shared its cores); rerun them on a quiet machine.")
    assert f"  Left out of every fit and of this score: {said}" in lines
    # the forecast too: the 4 Gbit/s link it ran across is not forecast, and one line says why
    forecast = forecast_view.render(runs, explain.bench_frame(found, explain.COLLECTIVES))
    assert f"  Left out of every forecast's fit: {said}" in forecast
    assert not any("Left out" in line for line in forecast_view.render(frames.runs_frame(
        [f for f in found if f is not c]), explain.bench_frame(found, explain.COLLECTIVES)))
    again = copy.deepcopy(c)  # a repeat of it, flagged too: one configuration, counted
    again["run_id"] = "c2"
    one_node = copy.deepcopy(again)  # and one on a node: two configurations, each named
    one_node.update(run_id="c3", launch={**again["launch"], "num_nodes": 1, "link": None})
    assert "(A 2 devices on 2 nodes (emulated 4 Gbit/s) ×2, A 2 devices on 1 node; starved:" in forecast_view.left_out(
        frames.runs_frame([*found, again, one_node]))[0]
    assert not any("Left out" in line for line in forecast_view.track_record(frames.runs_frame(
        [f for f in found if f is not c]), quiet, "simple"))
    # every run flagged: nothing judged, and the line still says why
    nothing = forecast_view.track_record(runs, track.iloc[:0], "simple")
    assert nothing[0] == "Track record: nothing judged", nothing
    assert nothing[1].startswith("  Left out of every fit")
    assert forecast_view.track_record(frames.runs_frame([f for f in found if f is not c]), track.iloc[:0]) == []


def test_a_link_rate_not_measured_is_forecast_from_the_nearest_measured_rate_above_or_below():
    """Two emulated rates measured: 2 Gbit/s reached its whole rate (β 0.25 GB/s), 8 Gbit/s half of it (0.5 GB/s). A
    rate between, below or above them scales the fit of the nearest (on a log scale) by the ratio of the rates: β
    follows the rate, α stays; so 1 and 3 Gbit/s come from the 2 Gbit/s fit, 16 from the 8."""
    from scalelab.perfmodel.network import human_rate

    def key(gbit):
        return ("inter", f"emulated {human_rate(gbit)}")

    fits = {key(2): calibrate.RingFit(ALPHA, 0.25, 0.0, 5, ("slow",)),
            key(8): calibrate.RingFit(ALPHA, 0.5, 0.0, 5, ("fast",))}
    cal = forecast.Calibration("gpt", "tokens/s", 64, Band(STEP1, STEP1, STEP1), ["one"], None, S, 1, fits,
                               rates={key(2): 2.0, key(8): 8.0, key(1): 1.0, key(3): 3.0, key(16): 16.0})
    for gbit, beta, source in ((1, 0.125, 2), (3, 0.375, 2), (16, 1.0, 8), (8, 0.5, None)):
        fit, how = forecast.fit_for(cal, key(gbit))
        assert (fit.beta_GBps, fit.alpha_s) == (pytest.approx(beta), ALPHA), gbit
        assert how == (f"the {human_rate(source)} fit scaled by rate" if source else "fitted"), gbit
        rows, _ = forecast.forecast(cal, ("intra", "cpu", "cpu"), key(gbit), 1, (2,))
        (two,) = [f for f in rows if f.num_nodes == 2]
        assert two.allreduce_s == pytest.approx(2 * ALPHA + S / (beta * 1e9)), gbit  # the ring at n = 2, by hand


def fsdp_run(run_id, world, num_nodes, step_s, gathered=2 * S, scattered=S, gathers=9, scatters=5):
    """An FSDP run: no DDP buckets, its step's all-gathers (gathered output) and reduce-scatters (scattered output:
    one rank's part) as its fingerprint saw them."""
    r = run(run_id, world, num_nodes, step_s)
    r["workload"]["strategy"] = "fsdp"
    r["timing"]["comm"].update(bucket_bytes=None, allreduce_alone_s=None)
    r["fingerprint"] = {"wire": {} if world == 1 else {
        "_allgather_base_": {"dtype": "float32", "bytes": gathered, "calls": gathers},
        "_reduce_scatter_base_": {"dtype": "float32", "bytes": scattered / world, "calls": scatters}}}
    return r


def test_the_forecast_learns_from_fsdp_runs_as_their_own_group_in_all_reduce_terms():
    """FSDP's 2 gathers of S and 1 scatter of S cost what all-reduces of 1.5 S in 7 calls cost: its x is read
    against that, apart from DDP's group, and its forecast line names it."""
    t_fsdp = ring(2, 1.5 * S, 7)
    found = [run("d1", 1, 1, STEP1), run("d2", 2, 2, STEP1 + ring(2), alone=ring(2)), bench(),
             fsdp_run("f1", 1, 1, STEP1 * 1.1), fsdp_run("f2", 2, 2, STEP1 * 1.1 + 1.3 * t_fsdp)]
    runs_seen = frames.runs_frame(found)
    assert set(forecast_view.completed(runs_seen)["run_id"]) == {"d1", "d2", "f1", "f2"}
    cals, runs, bench_rows = calibrated(found)
    ddp, fsdp = sorted(cals.values(), key=lambda c: c.strategy)
    assert (ddp.strategy, ddp.nbytes, ddp.calls) == ("ddp", S, 1)
    assert (fsdp.strategy, fsdp.nbytes, fsdp.calls) == ("fsdp", pytest.approx(1.5 * S), 7)
    assert fsdp.baseline.mid == pytest.approx(STEP1 * 1.1)  # its own 1-device run, not DDP's
    key = ("inter", "emulated 8 Gbit/s")
    assert [e[0] for e in fsdp.exposures[key]] == [pytest.approx(1.3)]
    rows, _ = forecast.forecast(fsdp, ("intra", "cpu", "cpu"), key, 1, (2, 4))
    assert rows[-1].allreduce_s == pytest.approx(ring(4, 1.5 * S, 7))
    t4 = ring(4, 1.5 * S, 7)  # x 1.3 at 2 nodes, read at 4 both as x and as a fixed 0.3 t_fsdp: their mean
    assert rows[-1].step.mid == pytest.approx(STEP1 * 1.1 + (1.3 + 1 + 0.3 * t_fsdp / t4) / 2 * t4)
    lines = forecast_view.render(runs, bench_rows, (1, 2, 4))
    heads = [line for line in lines if line.startswith("Forecast, group")]
    assert len(heads) == 2 and sum("FSDP (sharded)" in h for h in heads) == 1
    answers = [line.strip() for line in lines if "efficiency (the whole band)" in line]
    assert sorted(a.split(" ")[0] for a in answers) == ["DDP", "FSDP"]
    assert "--comm_hook" not in next(a for a in answers if a.startswith("FSDP"))  # DDP's lever, not FSDP's
    assert "--comm_hook bf16" in next(a for a in answers if a.startswith("DDP"))


def test_the_track_record_covers_fsdp_runs_leaving_each_configuration_out():
    """fa over 8 Gbit/s paid 1.2 x its gathers and scatters, fb over 4 Gbit/s (the 8 Gbit/s fit at half β) 1.4 x:
    each is predicted from the other's run, read as x and as a fixed cost (the middle: their mean)."""
    t_fsdp, t_slow = ring(2, 1.5 * S, 7), 7 * 2 * ALPHA + 1.5 * S / 0.5e9
    slow = fsdp_run("fb", 2, 2, STEP1 + 1.4 * t_slow)
    slow["launch"]["link"] = {**LINK, "gbit": 4.0}
    found = [bench(), fsdp_run("f1", 1, 1, STEP1), fsdp_run("fa", 2, 2, STEP1 + 1.2 * t_fsdp), slow]
    _, runs, bench_rows = calibrated(found)
    record = pd.DataFrame(forecast.track_record(forecast_view.records(runs),
                                                forecast_view.bench_points(bench_rows))).set_index("run_id")
    assert record.loc["fa", "predicted_step_s"] == pytest.approx(
        STEP1 + (1.4 + 1 + 0.4 * t_slow / t_fsdp) / 2 * t_fsdp, rel=1e-6)
    assert record.loc["fb", "predicted_step_s"] == pytest.approx(
        STEP1 + (1.2 + 1 + 0.2 * t_fsdp / t_slow) / 2 * t_slow, rel=1e-6)


def test_with_x_1_an_fsdp_forecast_is_what_the_model_predicts_for_its_units():
    """One model, two ways in, for FSDP too: what a folder's FSDP runs moved (their fingerprints) and what
    perfmodel.sharding expects the units to move give the same no-overlap step."""
    blocks, root = [3_000_000] * 4, 1_000_000  # parameters: 4 blocks and the root's own
    wire = sharding.expected(unit_params=blocks, root_params=root, param_bytes=4)
    assert (wire.gather_calls, wire.scatter_calls) == (9, 5)
    found = [bench(), fsdp_run("f1", 1, 1, STEP1),
             fsdp_run("f2", 2, 2, STEP1 + ring(2, *wire.allreduce_terms()), gathered=wire.gather_bytes,
                      scattered=wire.scatter_bytes, gathers=wire.gather_calls, scatters=wire.scatter_calls)]
    (cal,), _, _ = (lambda c: (list(c[0].values()), c[1], c[2]))(calibrated(found))
    rows, _ = forecast.forecast(cal, ("intra", "cpu", "cpu"), ("inter", "emulated 8 Gbit/s"), 1, (2, 4, 8))
    nbytes, calls = wire.allreduce_terms()
    typed = pm.predict(pm.ScalingInputs(devices=1, num_nodes=(2, 4, 8), grad_bytes=nbytes, inter_GBps=BETA,
                                        inter_latency_s=ALPHA, compute_s=STEP1,
                                        bucket_bytes=math.nextafter(nbytes / calls, math.inf)))
    for f, row in zip(rows, typed):
        assert f.step.mid == pytest.approx(row.step_s_no_overlap, rel=1e-6)
    assert (nbytes, calls) == (pytest.approx((2 * 12e6 + 1e6) * 4 / 2 + 13e6 * 4 / 2), 7)  # by hand
    assert rows[-1].step.mid == pytest.approx(STEP1 + 7 * 14 * ALPHA + 1.75 * nbytes / 1e9, rel=1e-6)




def test_the_report_prices_each_fsdp_collective_by_its_own_benchmark_else_as_half_an_all_reduce():
    """annotate: an FSDP step's 9 gathers of 2 S and 5 scatters of S; with the all-reduce benchmark alone, each is
    half an all-reduce of its size; where a reduce-scatter benchmark ran (gloo's: as slow as an all-reduce), the
    scatters are priced by it. DDP's gradient: S in one bucket, by the all-reduce benchmark."""
    found = [bench(), run("d1", 1, 1, STEP1), run("d2", 2, 2, STEP1 + ring(2)), fsdp_run("f1", 1, 1, STEP1),
             fsdp_run("f2", 2, 2, STEP1 + ring(2, 1.5 * S, 7))]
    rows = found[0]["rows"]

    def predicted(found):
        scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)),
                                   explain.bench_frame(found, explain.COLLECTIVES))
        return scaling[scaling["world_size"] == 2].set_index("strategy")["predicted_allreduce_s"]

    def t(rows, nbytes):
        return explain.bench_allreduce_time_s(rows, nbytes, 2)

    half = predicted(found)
    assert half["fsdp"] == pytest.approx(0.5 * 9 * t(rows, 2 * S / 9) + 0.5 * 5 * t(rows, S / 5))
    assert half["ddp"] == pytest.approx(t(rows, S))
    own = predicted(found + [scatter_as_slow_as_all_reduce()])
    assert own["fsdp"] == pytest.approx(0.5 * 9 * t(rows, 2 * S / 9) + 5 * t(rows, S / 5))  # a whole all-reduce
    assert own["fsdp"] > half["fsdp"] and own["ddp"] == half["ddp"]  # DDP's all-reduce is not the scatter's
    # the row a configuration names is its first collective's (the gathers, priced by the all-reduce benchmark,
    # here run twice: 2 runs, not the reduce-scatter's 1); its busbw moves the bytes as all-reduced, 1.5 S
    twice = {**bench(), "run_id": "ar-again"}
    more = found + [twice, scatter_as_slow_as_all_reduce()]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(more)),
                               explain.bench_frame(more, explain.COLLECTIVES))
    fsdp = scaling[(scaling["world_size"] == 2) & (scaling["strategy"] == "fsdp")].iloc[0]
    assert fsdp["bench_runs"] == 2
    assert fsdp["bench_busbw_GBps"] == pytest.approx(pm.busbw_from_time(1.5 * S, fsdp["predicted_allreduce_s"], 2))


def scatter_as_slow_as_all_reduce(num_nodes=2):
    """A reduce-scatter benchmark whose every size took what the all-reduce took (gloo's, on this CPU)."""
    slow = bench(num_nodes)
    slow["run_id"] = f"rs{num_nodes}"
    slow["config"]["collective"] = "reduce_scatter"
    slow["rows"] = [{**row, "busbw_GBps": row["busbw_GBps"] / 2} for row in slow["rows"]]
    return slow


def test_an_fsdp_forecast_fits_each_collective_on_its_own_benchmark_and_blends_them():
    """The forecast's link for an FSDP step: the gathers on the all-reduce's fit (half an all-reduce each: no
    all-gather benchmark), the scatters on the reduce-scatter benchmark's (a whole all-reduce each, as measured):
    one blended fit that gives their sum at every world size."""
    found = [bench(), scatter_as_slow_as_all_reduce(), fsdp_run("f1", 1, 1, STEP1),
             fsdp_run("f2", 2, 2, STEP1 + 0.5 * ring(2, 2 * S, 9) + ring(2, S, 5))]
    (cal,) = calibrated(found)[0].values()
    fit = cal.fits[("inter", "emulated 8 Gbit/s")]
    for n in (2, 4, 16):
        assert fit.seconds(n, cal.nbytes, cal.calls) == pytest.approx(0.5 * ring(n, 2 * S, 9) + ring(n, S, 5))
    assert set(fit.sources) == {"ar2x2", "rs2"}
    assert cal.exposures[("inter", "emulated 8 Gbit/s")][0][0] == pytest.approx(1.0)  # it paid exactly that


def test_a_strategy_borrows_no_exposure_from_the_other_and_needs_its_own_wire():
    """A DDP workload never run on several devices borrows x from other DDP workloads only, never from FSDP's (on
    a CPU gloo blocks FSDP's collectives: its x is not DDP's); an FSDP group whose runs never recorded their wire
    (an older result) is not calibrated on its gradient, which is not what it moves."""
    found = [bench(), fsdp_run("f1", 1, 1, STEP1), fsdp_run("f2", 2, 2, STEP1 + 3.0 * ring(2, 1.5 * S, 7)),
             run("d1", 1, 1, STEP1)]
    cals, _, _ = calibrated(found)
    ddp = next(c for c in cals.values() if c.strategy == "ddp")
    assert ddp.borrowed == {} and next(c for c in cals.values() if c.strategy == "fsdp").exposures
    blind = [bench(), fsdp_run("g1", 1, 1, STEP1), fsdp_run("g2", 2, 2, STEP1 + ring(2))]
    for r in blind:
        r.pop("fingerprint", None)
    assert calibrated(blind)[0] == {}


def test_a_blend_of_two_parts_on_one_fit_counts_its_points_once():
    fit = calibrate.fit_ring([Point(2, b, 1, ring(2, b), "x") for b in (1e6, 8e6, 64e6)])
    blended = calibrate.blend([(1e6, 2, fit), (3e6, 1, fit)])
    assert blended.points == 3 and blended.sources == ("x",)
    assert blended.seconds(4, 4e6, 3) == pytest.approx(fit.seconds(4, 1e6, 2) + fit.seconds(4, 3e6, 1))


def test_the_one_line_answer_reads_multi_device_scales_only_and_the_threshold_as_reached():
    """A 1-device row's wide band (its repeats scattered) says nothing of scaling; 2 devices on one node below the
    threshold is 'not even one full node'; efficiency exactly at the threshold holds."""
    def f(num_nodes, world_size, low):
        return forecast.Forecast(num_nodes, world_size, 0.0, Band(1, 1, 1), Band(low, low, low), Band(1, 1, 1))

    assert forecast.answer([f(1, 1, 0.5), f(1, 2, 0.9), f(2, 4, 0.85)]) == 2
    assert forecast.answer([f(1, 1, 1.0), f(1, 2, 0.5), f(2, 4, 0.9)]) is None
    assert forecast.answer([f(1, 1, 1.0), f(1, 2, forecast.GOOD_EFFICIENCY), f(2, 4, 0.9)]) == 2


def test_an_fsdp_forecast_fits_the_gathers_on_the_all_gather_benchmark_where_one_ran():
    """The all-gather benchmark (as slow as the all-reduce here) prices the gathers: the blended fit gives 9 whole
    all-reduce times of their size, not half, and names that benchmark among its sources."""
    gather = scatter_as_slow_as_all_reduce()
    gather["run_id"], gather["config"]["collective"] = "ag2", "all_gather"
    found = [bench(), gather, fsdp_run("f1", 1, 1, STEP1), fsdp_run("f2", 2, 2, STEP1 + ring(2, 2 * S, 9))]
    (cal,) = calibrated(found)[0].values()
    fit = cal.fits[("inter", "emulated 8 Gbit/s")]
    assert fit.seconds(2, cal.nbytes, cal.calls) == pytest.approx(ring(2, 2 * S, 9) + 0.5 * ring(2, S, 5))
    assert "ag2" in fit.sources


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-4, 10.0), st.floats(1e-4, 10.0), st.booleans()), min_size=1, max_size=7),
       st.floats(0.01, 400.0), st.floats(1.01, 100.0), st.booleans(), st.sampled_from(["", " +5 ms"]))
def test_a_faster_link_forecast_slower_is_said_whatever_the_steps(mids, slow_gbit, faster, fast_first, latency):
    """make demo's MLP: 2 Gbit/s forecast 6.9 ms a step at 64 nodes, 200 Mbit/s 3.9 ms, printed quietly. A line
    names every node count where the faster link's step is the longer (and none where it is not), the widest
    case's figures, and which part inverted: the all-reduce (the fits, each error with its link) or only what the
    step pays for it (x). One-node rows (no link crossed), links without a stated rate, at one rate, or alike
    but for more than their rate (an added latency) are never compared."""
    from scalelab.perfmodel.network import human_rate

    fast_gbit = slow_gbit * faster
    slow, fast = ("inter", f"emulated {human_rate(slow_gbit)}"), ("inter", f"emulated {human_rate(fast_gbit)}{latency}")
    same, local = ("inter", f"emulated {human_rate(fast_gbit)} "), ("inter", "")
    cal = SimpleNamespace(rates={slow: slow_gbit, fast: fast_gbit, same: fast_gbit}, nbytes=2e6, calls=2,
                          fits={slow: calibrate.RingFit(1e-5, 1.0, 0.5, 3, ("a",)),
                                fast: calibrate.RingFit(1e-5, 1.0, 0.25, 1, ("b",))})
    nodes = [1, 2, 4, 8, 16, 32, 64]

    def rows(column):  # the all-reduce: the longer over the faster link where the draw says so
        return [forecast.Forecast(n, 2 * n, 1e-3 * (1 + (column and longer)), Band(m[column], m[column], m[column]),
                                  Band(1, 1, 1), Band(1, 1, 1)) for n, (*m, longer) in zip(nodes, mids)]

    steps = {fast: rows(1), slow: rows(0), local: rows(1), same: rows(1)} if fast_first else {
        slow: rows(0), fast: rows(1)}
    worse = [(n, s, f, longer) for n, (s, f, longer) in zip(nodes, mids) if n > 1 and f > s]
    said = forecast_view.inverted(cal, steps)
    assert len(said) == bool(worse and not latency)
    if said:
        n, s, f, longer = worse[-1]
        assert said[0].startswith(f"the forecast between nodes ({fast[1]}) is slower than between nodes ({slow[1]}) "
                                  f"at {', '.join(str(w[0]) for w in worse)} nodes ({n}: {f * 1e3:,.1f} against "
                                  f"{s * 1e3:,.1f} ms a step), which no faster link gives: ")
        assert ((f"the two links' ring fits disagree (their errors: unknown at {human_rate(fast_gbit)}, 50 % at "
                 f"{human_rate(slow_gbit)}) at this workload's 1 MB per call") in said[0]) == longer
        assert ("its all-reduce is the shorter (1.0 against 1.0 ms), but the exposed factors x read for each link "
                "disagree" in said[0]) != longer


def test_the_rehearsals_mlp_forecast_says_its_links_disagree_in_the_report_and_on_the_slide():
    """docs/results/cpu-rehearsal (measured, committed): the MLP's 11 KB buckets, latency-bound, fitted apart per
    link, forecast 2 Gbit/s slower than 200 Mbit/s from 4 nodes on. The report and forecast_A.png both say so."""
    from helpers import ROOT

    found, _ = results.scan(str(ROOT / "docs" / "results" / "cpu-rehearsal"))
    runs, bench = frames.runs_frame(found), explain.bench_frame(found, explain.COLLECTIVES)
    said = [line for line in forecast_view.render(runs, bench) if line.startswith("  !")]
    assert len(said) == 1 and said[0].startswith("  ! group A: the forecast between nodes (emulated 2 Gbit/s) is "
                                                 "slower than between nodes (emulated 200 Mbit/s) at ")
    slides = dict(forecast_view.figures(runs, bench))
    assert " ".join(slides["forecast_A.png"].get_supxlabel().split()) == "! " + said[0][len("  ! group A: "):]
    slide = slides["forecast_A.png"]
    slide.draw_without_rendering()
    assert slide._supxlabel.get_window_extent().x1 <= slide.bbox.x1  # the caption within the slide
    assert slides["forecast_B.png"].get_supxlabel() == ""
