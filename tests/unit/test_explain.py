"""Compute vs communication, predicted efficiency, cost: the arithmetic, on constructed results."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from helpers import ROWS, _bench, _with_comm, make_result, run_script
from scalelab import record, results
from scalelab.measure import timeline, timing
from scalelab.perfmodel.network import busbw_at
from scalelab.report import explain, frames, tables
from scalelab.train import comm, loop


def test_union_of_bucket_intervals():
    assert timeline.union_length([]) == 0
    assert timeline.union_length([(0, 1), (2, 3)]) == 2
    assert timeline.union_length([(0, 2), (1, 3), (5, 6)]) == 4  # overlapping buckets count once
    assert timeline.union_length([(1, 4), (2, 3)]) == 3


class GpuEvent:
    """A CUDA event as CommTimer reads one: elapsed_time(later) in ms, on the GPU's own clock."""

    def __init__(self, ms):
        self.ms = ms

    def elapsed_time(self, later):
        return later.ms - self.ms


def test_gpu_bucket_intervals_are_read_on_the_gpus_clock():
    """Two buckets whose kernels ran 110-150 ms and 140-170 ms on the GPU (the CPU had queued them long before,
    at moments that say nothing about when they ran): busy 60 ms, counted once where they overlap."""
    clock = comm.CommTimer()
    clock.cuda_events = [(GpuEvent(110), GpuEvent(150)), (GpuEvent(140), GpuEvent(170))]
    busy, n = comm.CommTimer.resolve(clock.cut())
    assert n == 2 and busy == pytest.approx(0.060)
    assert clock.cuda_events == []  # the next batch's buckets start a list of their own
    clock.cuda_events = [(GpuEvent(10), GpuEvent(30)), (GpuEvent(50), GpuEvent(60))]
    assert comm.CommTimer.resolve(clock.cut()) == (pytest.approx(0.030), 2)


def test_probe_steps_come_after_warmup_every_nth():
    probes = [i for i in range(20) if loop.is_probe(i, 5, 5)]
    assert probes == [9, 14, 19]
    assert not any(loop.is_probe(i, 5, 0) for i in range(20))


def _rank(rank, steps, ready, busy, probes):
    return {"rank": rank, "step_times_s": steps, "grads_ready_times_s": ready, "allreduce_times_s": busy,
            "buckets": [2] * len(steps),
            "probe_steps": probes, "grad_bytes": 8_000_000, "losses": [1.0] * len(steps), "epoch_times_s": [1.0],
            "first_step_end": None, "process_start": 0.0}


def test_comm_summary_splits_exposed_and_hidden():
    # steps 0-1 warm-up; step 3 is a probe (no sync): gradients ready after 0.30 s instead of 0.34 s.
    r0 = _rank(0, [1, 1, .40, .35, .40, .40], [.9, .9, .34, .30, .34, .34], [.1, .1, .05, 0, .05, .05], [3])
    r1 = _rank(1, [1, 1, .41, .36, .41, .41], [.9, .9, .33, .29, .33, .33], [.1, .1, .06, 0, .06, .06], [3])
    s = record.plain(timing.summarize([r0, r1], warmup_steps=2, samples_per_step=16, tokens_per_sample=0))
    assert s["timed_steps"] == 3  # the probe never enters a throughput figure
    assert s["samples_per_s"] == pytest.approx(16 * 3 / (3 * 0.405))  # a step: the ranks' mean
    c = s["comm"]
    assert c["compute_s"] == pytest.approx(0.30)  # slowest rank's probe
    assert c["waited_s"] == pytest.approx(0.04)
    assert c["allreduce_s"] == pytest.approx(0.05)  # the rank that waited least: skew is not transfer
    assert c["hidden_s"] == pytest.approx(0.01) and c["hidden_fraction"] == pytest.approx(0.2)
    assert c["comm_share"] == pytest.approx(0.04 / 0.405)
    assert c["ddp_busbw_GBps"] == pytest.approx(2 * 1 / 2 * 8e6 / 0.05 / 1e9)


def test_train_time_is_the_ranks_own_time_not_the_sum_of_each_steps_slowest_cut():
    """Two ranks in step (each waits for the other at the all-reduce), their clocks cutting the steps at different
    points: rank 0's steps 0.3, 0.5, 0.4 s, rank 1's 0.5, 0.3, 0.4 s. Each spent 1.2 s; the max per step would
    add up to 1.4 s and report 14 % less throughput than the ranks delivered."""
    r0 = _rank(0, [1, .3, .5, .4], [.2] * 4, [0] * 4, [])
    r1 = _rank(1, [1, .5, .3, .4], [.2] * 4, [0] * 4, [])
    s = record.plain(timing.summarize([r0, r1], warmup_steps=1, samples_per_step=10, tokens_per_sample=0))
    assert s["train_time_s"] == pytest.approx(1.2) and s["samples_per_s"] == pytest.approx(30 / 1.2)
    assert s["step_s"]["median"] == pytest.approx(0.4) and s["step_s"]["max"] == pytest.approx(0.4)


def annotated(found):
    """(runs, annotated scaling frame) of constructed results, as the report builds them from a folder."""
    runs = frames.runs_frame(found)
    return runs, explain.annotate(frames.scaling_frame(runs), explain.bench_frame(found))


def test_prediction_uses_the_benchmark_busbw_at_the_bucket_size():
    # 8 MB in 2 buckets of 4 MB; busbw at 4 MB, log-log between (1 MB, 0.5) and (10 MB, 1.0).
    busbw_4mb = 0.5 * 2 ** (0.6020599913279624)
    assert explain.predicted_allreduce_s(ROWS, 8e6, 2, 2) == pytest.approx(2 * (2 * 1 / 2) * 4e6 / (busbw_4mb * 1e9))
    assert explain.bench_allreduce_time_s(ROWS, 1000, 2) == 0.002  # below the smallest size: its latency floor
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104),
             _bench(2, ROWS)]
    runs, scaling = annotated(found)
    two = scaling.set_index("world_size").loc[2]
    assert two.predicted_allreduce_s == pytest.approx(explain.predicted_allreduce_s(ROWS, 8e6, 1, 2))
    step1 = 0.1
    assert two.predicted_efficiency_no_overlap == pytest.approx(step1 / (step1 + two.predicted_allreduce_s))
    assert two.predicted_efficiency_overlap == pytest.approx(1.0)  # comm < compute: fully hidden at best
    assert two.bench_busbw_GBps == pytest.approx(busbw_at(ROWS, 8e6))


def test_repeated_benchmarks_are_combined_per_size_by_median():
    # Three benchmark runs of the same hardware: the newest one is slow (a busy minute on a shared machine).
    # The prediction takes, per message size, the median over the runs, not the newest run alone.
    slow = [{"bytes": 1_000_000, "time_s": 0.02, "busbw_GBps": 0.05, "single_op_s": 0.03},
            {"bytes": 10_000_000, "time_s": 0.1, "busbw_GBps": 0.1, "single_op_s": 0.2}]
    fast = [dict(r, single_op_s=r["time_s"]) for r in ROWS]
    mid = [dict(r, time_s=r["time_s"] * 1.5, busbw_GBps=r["busbw_GBps"] / 1.5, single_op_s=r["time_s"] * 1.5)
           for r in ROWS] + [{"bytes": 100_000_000, "time_s": 0.2, "busbw_GBps": 0.5, "single_op_s": 0.2}]
    benches = [_bench(2, fast), _bench(2, mid), _bench(2, slow)]
    for k, b in enumerate(benches):
        b["created"] = f"2026-11-23T10:0{k}:00"
    combined = explain.bench_for(explain.bench_frame(benches), 2, 1, "cpu", "cpu")
    assert combined["runs"] == 3
    assert [r["bytes"] for r in combined["rows"]] == [1_000_000, 10_000_000, 100_000_000]
    assert combined["rows"][0]["single_op_s"] == pytest.approx(0.003)  # median of 0.002, 0.003, 0.03
    assert combined["rows"][1]["time_s"] == pytest.approx(0.015)
    assert combined["rows"][1]["busbw_GBps"] == pytest.approx(10e6 / 0.015 / 1e9)  # the bandwidth of that time
    assert combined["rows"][2]["time_s"] == 0.2  # measured by one run only: its own figure
    assert explain.bench_for(explain.bench_frame(benches), 4, 1, "cpu", "cpu") is None
    # Two runs: the median time is their mean, and busbw is that time's, not the mean of the two busbw.
    two = explain.median_rows([fast, slow], 2)
    assert two[0]["time_s"] == pytest.approx(0.011) and two[0]["busbw_GBps"] == pytest.approx(1e6 / 0.011 / 1e9)


def test_combined_benchmark_keeps_single_op_times_and_one_dtype():
    fast = [dict(r, single_op_s=r["time_s"] / 3) for r in ROWS]  # single all-reduces 3x faster than back to back
    older = [dict(r) for r in ROWS]  # an older scalelab: no single_op_s
    bf16 = [dict(r, time_s=r["time_s"] * 10, single_op_s=r["time_s"] * 10) for r in ROWS]
    benches = [_bench(2, older), _bench(2, fast), _bench(2, bf16)]
    benches[2]["config"]["dtype"] = "bfloat16"
    for k, b in enumerate(benches):
        b["created"] = f"2026-11-23T10:0{k}:00"  # bf16 newest, older run oldest
    combined = explain.bench_for(explain.bench_frame(benches), 2, 1, "cpu", "cpu")
    assert combined["dtype"] == "float32"  # the bf16 run is not blended in
    # The run without single-op times is left out (and not counted): the prediction still adds single all-reduces.
    assert combined["runs"] == 1
    alone = explain.predicted_allreduce_s(fast, 8e6, 2, 2)
    assert explain.predicted_allreduce_s(combined["rows"], 8e6, 2, 2) == pytest.approx(alone)
    assert alone == pytest.approx(explain.predicted_allreduce_s(ROWS, 8e6, 2, 2) / 3)
    # Only runs without single-op times: their back-to-back times.
    assert explain.median_rows([older, older], 2)[0] == {"bytes": 1_000_000, "time_s": 0.002,
                                                        "algbw_GBps": pytest.approx(0.5),
                                                        "busbw_GBps": pytest.approx(0.5)}
    # Only bf16 runs: those are what there is.
    assert explain.bench_for(explain.bench_frame([benches[2]]), 2, 1, "cpu", "cpu")["dtype"] == "bfloat16"


def test_report_says_how_many_benchmark_runs_the_prediction_combines():
    found = [_with_comm(make_result("m1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("m2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)]
    one = found + [_bench(2, ROWS)]
    two = one + [_bench(2, [dict(r, time_s=r["time_s"] * 2) for r in ROWS])]
    texts = []
    for folder in (one, two):
        runs = frames.runs_frame(folder)
        texts.append(tables.render(runs, explain.annotate(frames.scaling_frame(runs), explain.bench_frame(folder)),
                                   "plain", None))
    assert "benchmark runs in this folder" not in texts[0]
    assert "the median of the newest 2 all-reduce benchmark runs in this folder" in texts[1]


def test_the_prediction_reads_the_newest_benchmarks_of_those_it_combines():
    """A site's nightly folder: 6 old benchmarks of a slow link, then 5 of a faster one (the fabric mended). The
    prediction, its busbw and its "median of N runs" are those of the newest PER_CONFIGURATION (5) of the ones it
    combines; the median of all 11 would price the old link."""
    found = [_with_comm(make_result("n1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("n2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)]
    slow = [dict(r, time_s=r["time_s"] * 10, busbw_GBps=r["busbw_GBps"] / 10) for r in ROWS]
    for night in range(11):
        b = _bench(2, slow if night < 6 else ROWS)
        b["run_id"], b["created"] = f"night{night:02d}", f"2026-01-{night + 1:02d}T00:00:00"
        found.append(b)
    found.append(_bench(2, slow))  # another dtype's benchmark, newer still: not this configuration's
    found[-1]["run_id"], found[-1]["created"], found[-1]["config"]["dtype"] = "bf16", "2026-02-01T00:00:00", "bfloat16"
    two = annotated(found)[1].set_index("world_size").loc[2]
    assert explain.PER_CONFIGURATION == 5 and two.bench_runs == 5
    assert two.predicted_allreduce_s == pytest.approx(COMM_8MB)
    assert two.bench_busbw_GBps == pytest.approx(busbw_at(ROWS, 8e6))
    # Of those it combines: two older benchmarks timed single all-reduces, the 11 nightly ones (an imported log's
    # kind) did not: the two are used, not crowded out by the newest five
    single = [dict(r, time_s=r["time_s"] * 2, single_op_s=r["time_s"] * 2) for r in ROWS]
    for k in range(2):
        found.append(_bench(2, single))
        found[-1]["run_id"], found[-1]["created"] = f"single{k}", f"2025-06-0{k + 1}T00:00:00"
    two = annotated(found)[1].set_index("world_size").loc[2]
    assert two.bench_runs == 2 and two.predicted_allreduce_s == pytest.approx(2 * COMM_8MB)


def test_probes_slower_than_normal_steps_are_called_noise_not_full_overlap():
    # Gradients ready after 0.30 s in normal steps but 0.40 s in the probe (no sync): communication cannot
    # make a step faster, so the split is noise. The report must not print "0 ms waited; 100 % hidden".
    r0 = _rank(0, [1, 1, .40, .45, .40, .40], [.9, .9, .30, .40, .30, .30], [.1, .1, .05, 0, .05, .05], [3])
    r1 = _rank(1, [1, 1, .41, .46, .41, .41], [.9, .9, .30, .39, .30, .30], [.1, .1, .06, 0, .06, .06], [3])
    c = record.plain(timing.summarize([r0, r1], warmup_steps=2, samples_per_step=16, tokens_per_sample=0).comm)
    assert c["synced_s"] == pytest.approx(0.30) and c["compute_s"] == pytest.approx(0.40)
    assert c["hidden_fraction"] == 1.0  # the clamped figure the line must not present as measured
    base = make_result("n1", 1, samples_per_s=100)
    base["timing"]["comm"] = dict(c, compute_s=0.30, synced_s=0.30, waited_s=0.0, allreduce_s=0.0)
    two = make_result("n2", 2, samples_per_s=150)
    two["timing"]["step_s"] = {"median": 0.41}
    two["timing"]["comm"] = c
    runs = frames.runs_frame([base, two])
    scaling = explain.annotate(frames.scaling_frame(runs), explain.bench_frame([]))
    line = explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 2))
    assert "not separable from compute in these runs (the no-sync probe steps were 33 % slower" in line, line
    assert "hidden" not in line and "nothing large" not in line
    text = tables.render(runs, scaling, "plain", None)
    row = next(ln for ln in text.splitlines() if ln.split()[:2] == ["2", "1"] and "?" in ln)
    assert row.split().count("?") == 3 and "100 %" not in row
    # Results written before synced_s existed keep the old wording.
    c_old = {k: v for k, v in c.items() if k != "synced_s"}
    two["timing"]["comm"] = c_old
    runs = frames.runs_frame([base, two])
    scaling = explain.annotate(frames.scaling_frame(runs), explain.bench_frame([]))
    assert "hidden behind backward" in explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 2))


def test_limiting_line_names_the_larger_cause():
    comm_bound = [_with_comm(make_result("c1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
                  _with_comm(make_result("c2", 2, samples_per_s=110), 0.1, 0.09, 0.08, 0.18)]
    compute_bound = [_with_comm(make_result("k1", 1, samples_per_s=100, batch_size=32), 0.1, 0.0, 0.0, 0.1),
                     _with_comm(make_result("k2", 2, samples_per_s=110, batch_size=32), 0.17, 0.01, 0.005, 0.18)]
    for found, expected, other in ((comm_bound, "Limited by communication: 44 % of the step", "slower compute"),
                                   (compute_bound, "Limited by slower compute per device: 70 ms more", None)):
        runs = frames.runs_frame(found)
        scaling = explain.annotate(frames.scaling_frame(runs), explain.bench_frame(found))
        line = explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 2))
        assert expected in line, line
        assert other is None or other not in line
        assert explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 1)) is None


def test_cost_and_token_budget_columns(tmp_path):
    for r in (make_result("t1", 1, samples_per_s=100, model="gpt", tokens_per_sample=128),
              make_result("t2", 2, samples_per_s=180, model="gpt", tokens_per_sample=128)):
        r["timing"]["tokens_per_s"] = r["timing"]["samples_per_s"] * 128
        r["timing"]["tflops_per_device"] = 50.0
        _with_comm(r, 0.1, 0.0, 0.0, 0.1)
        results.write(str(tmp_path), r)
    proc = run_script("benchmark.py", "--output_dir", tmp_path, "--gpu_hour_price", "2.5", "--token_budget", "1e9")
    assert proc.returncode == 0, proc.stderr
    line2 = next(line for line in proc.stdout.splitlines() if line.startswith("2 ") and "×" in line)
    # 2 devices at 180 samples/s: 2.5 $/h * 2 / 3600 s / 180 * 1000 = 0.007716; 1e9 / (180*128) / 3600 = 12.06 h
    assert "0.007716" in line2 and "12.1" in line2 and f"{12.056 * 2 * 2.5:,.0f}" in line2
    assert "MFU: — (no peak known" in proc.stdout
    with_peak = run_script("benchmark.py", "--output_dir", tmp_path, "--peak_tflops", "200")
    assert "25.0 %" in with_peak.stdout and "MFU: —" not in with_peak.stdout
    bad = run_script("benchmark.py", "--output_dir", tmp_path, "--peak_tflops", "0")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    # a peak below what a device did: the finding names the peak the MFU was computed against (it said nan)
    low = run_script("benchmark.py", "--output_dir", tmp_path, "--peak_tflops", "40")
    assert "MFU 125 % cannot be: no device runs above its peak (40 TFLOP/s)" in low.stdout, low.stdout


def test_prediction_uses_the_real_bucket_sizes_when_recorded():
    # DDP's small first bucket gets the low busbw of a small message: not the same as two equal halves
    real = explain.predicted_allreduce_s(ROWS, 11e6, 2, 2, bucket_bytes=(10_000_000, 1_000_000))
    assert real == pytest.approx(0.01 + 0.002)
    assert real != pytest.approx(explain.predicted_allreduce_s(ROWS, 11e6, 2, 2))


def test_limiting_line_names_the_cost_of_sharing_with_backward():
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.03, 0.004, 0.104)]
    found[1]["timing"]["comm"]["allreduce_alone_s"] = 0.02
    runs, scaling = annotated(found)
    line = explain.limiting_line(next(scaling[scaling["world_size"] == 2].itertuples()))
    assert "Alone, the same all-reduce takes 20 ms: running beside backward cost it 10 ms" in line
    assert "share the node's cores" in line


def test_a_sub_millisecond_step_s_figures_keep_two_digits_and_add_up():
    """A CPU rehearsal's small MLP (the demo's group A): 0.44 ms all-reduce, 0.36 ms alone. At one decimal the
    sentence read "0.4 ms all-reduce ... takes 0.4 ms alone: cost it 0.1 ms"; each figure two digits, the cost is
    the difference of the two it names."""
    r = _row(world_size=2, efficiency=0.39, accelerator="cpu", comm_share=0.22, waited_s=0.000412,
             allreduce_s=0.0004395, hidden_fraction=0.0, allreduce_alone_s=0.00036125)
    line = explain.limiting_line(r)
    assert "(0.41 ms waited; 0 % of the 0.44 ms all-reduce hidden behind backward)" in line, line
    assert "Alone, the same all-reduce takes 0.36 ms: running beside backward cost it 0.08 ms" in line, line
    assert [explain._ms(s) for s in (0.00999, 0.00994, 0.000999, 0.0009949, 0.0000049)] == [
        "10", "9.9", "1.0", "0.99", "0.00"]  # each as it rounds: never "10.0" beside a "10", nor "1.00"


def test_limiting_line_when_the_step_lost_more_than_the_allreduce_took():
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.02, 0.045, 0.145)]
    runs, scaling = annotated(found)
    line = explain.limiting_line(next(scaling[scaling["world_size"] == 2].itertuples()))
    assert "45 ms lost, more than the 20 ms the all-reduce itself took" in line and "hidden" not in line


def _partial_comm_line(keep, compute_s=0.1):
    """The 2-device line when its comm record holds only the `keep` fields (a record another tool wrote, or
    trimmed by hand): 1 device at 100 samples/s, 2 at 150, so 150 / (2 x 100) = 75 % efficiency."""
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("a2", 2, samples_per_s=150), compute_s, 0.03, 0.004, 0.104)]
    comm = found[1]["timing"]["comm"]
    found[1]["timing"]["comm"] = {k: comm[k] for k in ("compute_s", *keep)}
    runs, scaling = annotated(found)
    return explain.limiting_line(next(scaling[scaling["world_size"] == 2].itertuples()))


def test_limiting_line_says_what_a_partial_comm_record_holds_and_not_nan():
    """compute_s without waited_s / allreduce_s: no "nan ms", no share or "limited by" that was not measured."""
    head = "2 devices on 1 node: efficiency 75 %."
    unknown = "Communication: not recorded in these runs (the result's comm record has no waited or all-reduce time)."
    assert _partial_comm_line(()) == f"{head} {unknown}"
    # 4 ms waited of a 104 ms step: 3.8 %, known, so "nothing large" holds; the all-reduce's time is not known
    assert _partial_comm_line(("waited_s", "comm_share")) == (
        f"{head} Limited by nothing large: communication: 4 % of the step (4.0 ms waited; the all-reduce's own "
        "time was not recorded).")
    assert _partial_comm_line(("waited_s",)) == (  # no share: no percent, and no "nothing large" either
        f"{head} Limited by communication: 4.0 ms waited; the all-reduce's own time was not recorded.")
    assert _partial_comm_line(("allreduce_s",)) == (
        f"{head} Communication: the all-reduce took 30 ms; the time the step waited for it was not recorded.")
    # 150 ms compute against the baseline's 100 ms: the known cause leads, the unknown one follows
    assert _partial_comm_line((), compute_s=0.15) == (
        f"{head} Limited by slower compute per device: 50 ms more per step than at 1 device (CPU rehearsal: the "
        f"ranks still share this machine's memory bandwidth and caches). {unknown}")


def test_short_steps_keep_a_decimal_so_lost_is_visibly_more_than_the_all_reduce():
    # 1.4 ms lost beside a 1.2 ms all-reduce: whole milliseconds would print "1 ms lost, more than the 1 ms"
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.001, 0.0, 0.0, 0.001),
             _with_comm(make_result("a2", 2, samples_per_s=150), 0.001, 0.0012, 0.0014, 0.0024)]
    runs, scaling = annotated(found)
    line = explain.limiting_line(next(scaling[scaling["world_size"] == 2].itertuples()))
    assert "1.4 ms lost, more than the 1.2 ms the all-reduce itself took" in line, line


def test_prediction_prefers_single_all_reduces_to_the_back_to_back_mean():
    rows = [dict(r, single_op_s=r["time_s"] / 2) for r in ROWS]  # each op alone: twice as fast
    assert explain.bench_allreduce_time_s(rows, 1000, 2) == 0.001
    assert explain.predicted_allreduce_s(rows, 11e6, 2, 2, bucket_bytes=(10_000_000, 1_000_000)) == pytest.approx(0.006)


def test_predicted_columns_when_communication_exceeds_compute():
    # baseline step 4 ms; the 8 MB gradient (one bucket) takes longer than that over the benchmark's busbw,
    # so even full overlap cannot hide it: efficiency compute / comm at best, compute / (compute + comm) at worst
    found = [_with_comm(make_result("c1", 1, samples_per_s=100), 0.004, 0.0, 0.0, 0.004),
             _with_comm(make_result("c2", 2, samples_per_s=60), 0.004, 0.009, 0.008, 0.012),
             _bench(2, ROWS)]
    runs, scaling = annotated(found)
    two = scaling.set_index("world_size").loc[2]
    comm = explain.predicted_allreduce_s(ROWS, 8e6, 1, 2)
    assert comm > 0.004
    assert two.predicted_efficiency_overlap == pytest.approx(0.004 / comm)
    assert two.predicted_efficiency_no_overlap == pytest.approx(0.004 / (0.004 + comm))
    cell = f"{0.004 / (0.004 + comm) * 100:.0f}–{0.004 / comm * 100:.0f} %"
    assert cell == "32–47 %"  # by hand: busbw at 8 MB = 0.5·8^log10(2) = 0.937 GB/s, comm = 8.5 ms
    assert cell in tables.render(runs, scaling)


def test_had_cpu_is_the_share_of_ready_time_on_a_core_over_the_probe_steps():
    """Per probe step [on-core s, waiting s]: the share is the sums' ratio, not the mean of each step's."""
    rec = _rank(0, [.1] * 8, [.05] * 8, [0] * 8, [])
    rec["probe_cpu_s"] = [[0.3, 0.1], [0.1, 0.3]]  # 75 % and 25 %: 0.4 of 0.8 s ready, not their mean by chance
    rec1 = dict(rec, probe_cpu_s=[[0.9, 0.1]])
    assert timing.had_cpu([rec, rec1]) == [0.5, 0.9]
    rec["probe_cpu_s"] = [[0.3, 0.1], [0.3, 0.3]]
    assert timing.had_cpu([rec]) == [0.6]  # 0.6 / 1.0; the mean of 75 % and 50 % would be 62.5 %
    assert timing.had_cpu([dict(rec, probe_cpu_s=[])]) is None  # no probe step (--comm_probe_every 0)
    assert timing.had_cpu([{k: v for k, v in rec.items() if k != "probe_cpu_s"}]) is None  # older results


def _shared(share, had_cpu_1=None):
    """A 1-device baseline and a 2-device run whose compute per device is 70 ms slower, with rank 1's share."""
    base = _with_comm(make_result("s1", 1, samples_per_s=100, batch_size=32), 0.1, 0.0, 0.0, 0.1)
    two = _with_comm(make_result("s2", 2, samples_per_s=110, batch_size=32), 0.17, 0.01, 0.005, 0.18)
    two["timing"]["had_cpu"] = [had_cpu_1 or 0.99, share]
    _, scaling = annotated([base, two])
    return base, two, scaling


def test_slower_compute_names_contention_when_measured_before_memory_bandwidth():
    base, two, scaling = _shared(0.48)
    line = explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 2))
    assert ("slower compute per device: 70 ms more per step than at 1 device (rank 1 had a core 48 % of the "
            "time it was ready to run: other work shared its cores)") in line, line
    assert "memory bandwidth" not in line
    text = tables.render(frames.runs_frame([base, two]), scaling, "plain", None)
    assert ("! s2: rank 1 had a core 48 % of the time it was ready to run: other work shared its cores; its times "
            "are slower than this hardware's") in text
    _, _, quiet = _shared(0.96)  # no contention measured: then what the ranks still share, with the figure
    line = explain.limiting_line(next(r for r in quiet.itertuples() if r.world_size == 2))
    assert ("(CPU rehearsal: each rank had its core 96 % of the time it was ready to run; the ranks still share "
            "this machine's memory bandwidth and caches)") in line, line


def test_strong_scaling_compares_compute_with_the_baselines_share_and_says_so():
    """Strong scaling: 2 devices each compute half the batch, so 0.17 s is 120 ms more than 0.1 s × 1/2."""
    base = _with_comm(make_result("g1", 1, samples_per_s=100, batch_size=32), 0.1, 0.0, 0.0, 0.1)
    two = _with_comm(make_result("g2", 2, samples_per_s=110, batch_size=32), 0.17, 0.01, 0.005, 0.18)
    for r in (base, two):
        r["workload"]["scaling"] = "strong"
    _, scaling = annotated([base, two])
    line = explain.limiting_line(next(r for r in scaling.itertuples() if r.world_size == 2))
    assert ("slower compute per device: 120 ms more per step than the compute at 1 device × 1/2 (strong scaling: "
            "each device has 1/2 of the batch)") in line, line


def _step_rows(found, fmt="pipe"):
    """The step table of the first group: {devices: [cells]}, and its lines below the table."""
    _, scaling = annotated(found)
    g = scaling[scaling["group"] == scaling["group"].iloc[0]].sort_values(["world_size", "num_nodes"])
    lines = tables.step_table(g, fmt)
    table = lines[2].splitlines()
    assert [c.strip() for c in table[0].strip("|").split("|")] == tables.STEP_HEADERS
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    return {int(c[0]): c[1:] for c in cells}, lines[3:]


def test_the_step_table_prints_each_figure_in_its_unit():
    two = _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)
    two["timing"]["comm"]["allreduce_alone_s"] = 0.0065
    two["timing"].update(tflops_per_device=1.2345, peak_tflops=27.0, mfu=0.0456)
    rows, below = _step_rows([_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1), two,
                              _bench(2, ROWS)])
    # step 104 ms, compute 100, all-reduce 8 (alone 6.5), predicted: 8 MB at the benchmark's busbw there,
    # 0.5 x 8^log10(2) = 0.935 GB/s -> 8.6 ms; waited 4 ms = 4 % of the step, half the all-reduce hidden;
    # 8 MB of gradients, DDP's busbw 8 MB / 8 ms = 1 GB/s; 1.23 TFLOP/s, MFU 4.6 %
    assert rows[2] == ["1", "104.0", "100.0", "8.0", "6.5", "8.6", "4.0", "4 %", "50 %", "8", "1", "0.935", "1.23",
                       "4.6 %"]
    assert not [line for line in below if "MFU" in line or "No all-reduce benchmark" in line]  # an MLP, a peak
    _, below = _step_rows([dict(two, workload={**two["workload"], "model": "gpt"})])
    assert below[-1] == ("  MFU counts attention's full T x T scores (the causal half is not discounted), as nanoGPT "
                         "and PaLM count it: compare it with figures that do the same")


def test_the_step_table_says_which_parts_are_missing():
    one = _with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1)
    two = _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)
    two["timing"]["comm"]["synced_s"] = 0.09  # gradients ready sooner than without sync: the split is noise
    rows, below = _step_rows([one, two])
    assert rows[2][5:9] == ["—", "?", "?", "?"]  # no benchmark: no prediction; waited, share, hidden unknown
    assert rows[2][11:] == ["—", "—", "—"]
    assert "  (No all-reduce benchmark in this folder at these sizes: `python src/allreduce_bench.py --devices 2` " \
           "adds the predicted columns.)" in below
    assert below[-1] == "  MFU: — (no FLOPs per sample)"  # no peak would help: give none
    for r in (one, two):
        r["timing"]["tflops_per_device"] = 1e-4
    _, below = _step_rows([one, two])
    assert below[-1] == "  MFU: — (no peak known for this hardware; give --peak_tflops to compute it)"
    for r in (one, two):  # a GPU the peak table does not know: the run recorded why
        r["timing"]["peak_note"] = "NVIDIA A10G is not in scalelab's datasheet table"
    _, below = _step_rows([one, two])
    assert below[-1] == "  MFU: — (NVIDIA A10G is not in scalelab's datasheet table; give --peak_tflops to compute it)"
    _, alone = _step_rows([one])  # one device: nothing to all-reduce, nothing to benchmark
    assert not [line for line in alone if "No all-reduce benchmark" in line]


NAN = float("nan")


def _row(**given):
    """One configuration of the annotated frame, as limiting_line reads it."""
    base = dict(world_size=2, baseline_world_size=1, num_nodes=1, efficiency=0.9, compute_s=0.1, baseline_compute_s=0.1,
                scaling="weak", comm_share=0.1, synced_s=None, waited_s=0.01, allreduce_s=0.02, hidden_fraction=0.5,
                link="", accelerator="gpu", ddp_busbw_GBps=NAN, bench_busbw_GBps=NAN, allreduce_alone_s=NAN,
                oversubscribed="", starved="", had_cpu=NAN, strategy="ddp")
    return SimpleNamespace(**{**base, **given})


def test_the_limiting_line_of_a_communication_bound_multi_node_run():
    r = _row(world_size=8, num_nodes=2, efficiency=0.604, compute_s=0.105, comm_share=0.3, waited_s=0.045,
             allreduce_s=0.06,
             hidden_fraction=0.25, ddp_busbw_GBps=12.3456, bench_busbw_GBps=20.0, allreduce_alone_s=0.04)
    assert explain.limiting_line(r) == (
        "8 devices on 2 nodes: efficiency 60 %. Limited by communication: 30 % of the step (45 ms waited; 25 % of "
        "the 60 ms all-reduce hidden behind backward); the inter-node link delivered 12.3 GB/s busbw to DDP "
        "(all-reduce benchmark: 20 GB/s at these bucket sizes). Alone, the same all-reduce takes 40 ms: running "
        "beside backward cost it 20 ms, because compute and communication share the GPU's SMs and memory "
        "bandwidth.")  # compute 5 % above the baseline's: under the 10 % that counts as slower


def test_the_limiting_line_puts_the_larger_cause_first_and_scales_strong_scaling_compute():
    r = _row(efficiency=0.45, compute_s=0.08, scaling="strong", accelerator="cpu", had_cpu=0.93, waited_s=0.0088,
             allreduce_s=0.0075, allreduce_alone_s=0.007)  # expected compute 100 ms x 1/2; alone: lost < 15 %
    assert explain.limiting_line(r) == (
        "2 devices on 1 node: efficiency 45 %. Limited by slower compute per device: 30 ms more per step than the "
        "compute at 1 device × 1/2 (strong scaling: each device has 1/2 of the batch) (CPU rehearsal: each rank had "
        "its core 93 % of the time it was ready to run; the ranks still share this machine's memory bandwidth and "
        "caches). Communication: 10 % of the step (8.8 ms lost, more than the 7.5 ms the all-reduce itself took: "
        "compute also ran slower while it was in flight).")


def test_the_limiting_line_says_nothing_large_and_names_an_emulated_link():
    """The link in the line's head: two rungs over two links were two lines both "2 devices on 2 nodes"."""
    r = _row(num_nodes=2, link="emulated 1 Gbit/s", efficiency=0.97, comm_share=0.02, waited_s=0.002, allreduce_s=0.01,
             hidden_fraction=0.8, ddp_busbw_GBps=0.5, accelerator="cpu")
    assert explain.limiting_line(r) == (
        "2 devices on 2 nodes (emulated 1 Gbit/s): efficiency 97 %. Limited by nothing large: communication: 2 % of "
        "the step (2.0 ms waited; 80 % of the 10 ms all-reduce hidden behind backward); the emulated 1 Gbit/s "
        "inter-node link delivered 0.5 GB/s busbw to DDP.")
    cpu = _row(comm_share=0.2, ddp_busbw_GBps=1.0, accelerator="cpu", waited_s=0.02, allreduce_s=0.02,
               hidden_fraction=NAN)
    assert explain.limiting_line(cpu).endswith("(20 ms waited; 0 % of the 20 ms all-reduce hidden behind backward); "
                                               "the local gloo transport delivered 1 GB/s busbw to DDP.")


def test_the_limiting_line_of_noise_of_the_baseline_and_of_old_results():
    noisy = _row(efficiency=0.95, synced_s=0.09, comm_share=0.01, waited_s=0.001, ddp_busbw_GBps=30.0)
    assert explain.limiting_line(noisy) == (
        "2 devices on 1 node: efficiency 95 %. Limited by communication: not separable from compute in these runs "
        "(the no-sync probe steps were 11 % slower than the normal steps, which is noise; more --max_steps gives "
        "more probe steps); NVLink/PCIe within the node delivered 30 GB/s busbw to DDP.")
    assert explain.limiting_line(_row(world_size=1)) is None
    assert explain.limiting_line(_row(world_size=4, num_nodes=2, efficiency=0.5, compute_s=NAN)) == (
        "4 devices on 2 nodes: efficiency 50 %. No communication measurement in these runs (--comm_probe_every 0, "
        "or an older scalelab).")
    weak = explain.limiting_line(_row(world_size=4, baseline_world_size=2, compute_s=0.2, waited_s=0.001,
                                      comm_share=0.01))
    assert " 100 ms more per step than at 2 devices. " in weak  # a GPU: no CPU words after it


def test_why_compute_was_slower_most_certain_cause_first():
    assert explain.slower_why(_row(oversubscribed="4 ranks on 2 cores", starved="x")) == (
        " (ranks shared cores: oversubscribed)")
    assert explain.slower_why(_row(starved="rank 1 had a core 50 % of the time")) == (
        " (rank 1 had a core 50 % of the time)")
    assert explain.slower_why(_row(accelerator="gpu", had_cpu=0.5)) == ""
    assert explain.slower_why(_row(accelerator="cpu")) == (
        " (CPU rehearsal: the ranks still share this machine's memory bandwidth and caches)")


def test_the_split_is_noise_only_where_synced_steps_were_clearly_faster():
    assert explain.split_within_noise(_row(synced_s=0.0949))
    assert not explain.split_within_noise(_row(synced_s=0.095))  # 5 % faster: within what probes scatter
    assert not explain.split_within_noise(_row(world_size=1, synced_s=0.05))  # one device: no communication
    assert not explain.split_within_noise(_row(synced_s=NAN)) and not explain.split_within_noise(_row())
    assert not explain.split_within_noise(_row(synced_s=0.05, compute_s=None))


def _ar(run_id, world=2, nodes=1, created="2026-01-01T00:00:00", dtype="float32", rows=ROWS, **launch):
    data = _bench(world, [dict(r) for r in rows or ROWS], nodes)
    data.update(run_id=run_id, created=created, config={"dtype": dtype}, rows=[dict(r) for r in rows])
    data["launch"].update(launch)
    return data


def test_the_benchmark_frame_keeps_completed_benchmarks_with_rows_newest_first():
    log = _ar("log", created="2026-01-03", accelerator="gpu", backend="nccl", device_names=["NVIDIA A100"],
              link={"gbit": 1, "emulated": True})
    log.update(source={"format": "nccl-tests"}, _path="/logs/a.log")
    failed = dict(_ar("failed"), status="failed")
    found = [_ar("old", created="2026-01-01"), log, failed, _ar("empty", rows=[]), make_result("training")]
    frame = explain.bench_frame(found)
    assert list(frame["run_id"]) == ["log", "old"]
    newest = frame.iloc[0]
    assert (newest.world_size, newest.num_nodes, newest.accelerator, newest.backend, newest.device) == (
        2, 1, "gpu", "nccl", "NVIDIA A100")
    assert [newest[k] for k in ("busbw_GBps", "dtype", "link", "log")] == [1.0, "float32", "emulated 1 Gbit/s",
                                                                         "/logs/a.log"]
    assert pd.isna(frame.iloc[1]["log"]) and frame.iloc[1]["link"] == "" and frame.iloc[1]["device"] == "cpu"
    assert explain.bench_frame([]).empty


def test_the_benchmark_for_a_configuration_matches_size_nodes_hardware_and_link_and_combines_repeats():
    slow = [dict(r, time_s=r["time_s"] * 3) for r in ROWS]
    mid = [dict(r, time_s=r["time_s"] * 2) for r in ROWS]
    found = [_ar("a", created="1", rows=ROWS), _ar("b", created="3", rows=slow), _ar("c", created="2", rows=mid),
             _ar("four", world=4, nodes=2), _ar("linked", link={"gbit": 2, "emulated": True}),
             _ar("half", created="9", dtype="bfloat16", rows=slow)]
    bench = explain.bench_frame(found)
    got = explain.bench_for(bench, 2, 1, "cpu", "cpu")
    assert got["run_id"] == "b" and got["runs"] == 3  # float32 only; the newest's labels, the median's rows
    assert [r["time_s"] for r in got["rows"]] == pytest.approx([0.004, 0.02])  # median of x1, x2, x3
    assert got["rows"][0]["busbw_GBps"] == pytest.approx(1e6 / 0.004 / 1e9 * 2 * (2 - 1) / 2)
    assert explain.bench_for(bench, 4, 2, "cpu", "cpu")["run_id"] == "four"
    assert explain.bench_for(bench, 2, 1, "cpu", "cpu", "emulated 2 Gbit/s")["run_id"] == "linked"
    assert explain.bench_for(bench, 2, 2, "cpu", "cpu") is None and explain.bench_for(bench, 8, 1, "cpu", "x") is None
    assert explain.bench_for(bench, 2, 1, "gpu", "cpu") is None
    only_half = explain.bench_frame([_ar("h1", created="1", dtype="bfloat16"), _ar("h2", created="2", dtype="float16")])
    assert explain.bench_for(only_half, 2, 1, "cpu", "cpu")["dtype"] == "float16"  # the newest run's dtype
    gpus = explain.bench_frame([_ar("a100", accelerator="gpu", device_names=["A100"]),
                                _ar("h100", created="2", accelerator="gpu", device_names=["H100"])])
    assert explain.bench_for(gpus, 2, 1, "gpu", "A100")["run_id"] == "a100"  # on GPUs the model must match too
    assert explain.bench_for(explain.bench_frame([]), 2, 1, "cpu", "cpu") is None


def test_repeated_rows_with_and_without_single_op_times():
    single = [dict(r, single_op_s=r["time_s"] * 4) for r in ROWS]
    rows = explain.median_rows([ROWS, single, [dict(r, single_op_s=r["time_s"] * 2) for r in ROWS]], 4)
    # only the runs that timed single all-reduces: medians of (x1, x1) times and of (x4, x2) single ops
    assert [(r["bytes"], r["time_s"], r["single_op_s"]) for r in rows] == [
        (1_000_000, 0.002, pytest.approx(0.006)), (10_000_000, 0.01, pytest.approx(0.03))]
    assert rows[0]["algbw_GBps"] == pytest.approx(0.5) and rows[0]["busbw_GBps"] == pytest.approx(0.5 * 2 * 3 / 4)
    plain = explain.median_rows([ROWS, [{"bytes": 100, "time_s": 1e-5}]], 2)
    assert [r["bytes"] for r in plain] == [100, 1_000_000, 10_000_000] and "single_op_s" not in plain[0]
    assert explain.timed_single(single) and not explain.timed_single(ROWS) and not explain.timed_single([])


def test_cost_hours_and_mfu_columns_from_the_prices_given():
    found = [make_result("g1", 1, samples_per_s=100), make_result("g4", 4, samples_per_s=360)]
    for r in found:
        r["timing"].update(tokens_per_s=r["timing"]["samples_per_s"] * 1000, tflops_per_device=50.0, mfu=0.1)
    runs = frames.runs_frame(found)
    out = explain.annotate(frames.scaling_frame(runs), explain.bench_frame([]), peak_tflops=200.0,
                           gpu_hour_price=2.0, token_budget=3.6e9).set_index("world_size")
    # 4 devices at $2 an hour: $8/h for 360 samples/s = 1,296,000 samples/h -> $0.00617 per 1,000 samples
    assert out.loc[4, "cost_per_1k_samples"] == pytest.approx(8 / 1296)
    assert out.loc[4, "hours_for_token_budget"] == pytest.approx(3.6e9 / 360_000 / 3600)  # 2.78 h
    assert out.loc[4, "cost_for_token_budget"] == pytest.approx(3.6e9 / 360_000 / 3600 * 8)
    assert out.loc[1, "cost_for_token_budget"] == pytest.approx(10 * 2.0)  # 10 h on one device
    assert list(out["mfu"]) == [0.25, 0.25]  # 50 of the 200 given, not the recorded 0.1
    assert out.loc[1, "predicted_efficiency_overlap"] == 1.0 and pd.isna(out.loc[4, "predicted_allreduce_s"])
    bare = explain.annotate(frames.scaling_frame(runs), explain.bench_frame([]))
    assert list(bare["mfu"]) == [0.1, 0.1] and bare["cost_per_1k_samples"].isna().all()
    assert bare["hours_for_token_budget"].isna().all() and bare["cost_for_token_budget"].isna().all()


def test_the_predicted_all_reduce_of_a_runs_own_buckets():
    # single-op times are used where every row has one: 2 ms at 1 MB, 10 ms at 10 MB (busbw 0.5 and 1.0 GB/s at n 2)
    single = [dict(r, time_s=r["time_s"] / 2, single_op_s=r["time_s"]) for r in ROWS]
    assert explain.bench_allreduce_time_s(single, 1_000_000, 2) == pytest.approx(0.002)
    assert explain.bench_allreduce_time_s(single, 100, 2) == pytest.approx(0.002)  # below: the latency floor
    assert explain.bench_allreduce_time_s(ROWS, 20_000_000, 2) == pytest.approx(0.02)  # above: the largest's busbw
    # the real buckets one by one (1 MB at its own 0.5 GB/s, 10 MB at 1 GB/s), else equal parts of the gradient
    assert explain.predicted_allreduce_s(ROWS, 11e6, 2, 2, bucket_bytes=(1e6, 10e6)) == pytest.approx(0.002 + 0.01)
    assert explain.predicted_allreduce_s(ROWS, 20e6, 2.4, 2) == pytest.approx(2 * 0.01)  # 2 buckets of 10 MB
    assert explain.predicted_allreduce_s(ROWS, 20e6, float("nan"), 2) == pytest.approx(0.02)  # unknown: one
    assert [explain._bucket_count(b) for b in (0.2, 2.6, None, float("nan"))] == [1, 3, 1, 1]


def test_the_predicted_efficiency_needs_a_one_device_baseline_and_reads_the_wire_bytes():
    one = _with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1)
    two = _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104, grad_bytes=20_000_000)
    two["timing"]["comm"].update(bucket_bytes=[10_000_000, 10_000_000], wire_bytes=[1_000_000, 1_000_000])
    _, scaling = annotated([one, two, _bench(2, ROWS)])
    row = scaling.set_index("world_size").loc[2]
    # bf16-compressed buckets: two 1 MB messages at 0.5 GB/s, 2 ms each
    assert row.predicted_allreduce_s == pytest.approx(0.004)
    assert row.bench_busbw_GBps == pytest.approx(2e6 / 0.004 / 1e9)
    assert row.predicted_efficiency_no_overlap == pytest.approx(0.1 / 0.104) and row.bench_runs == 1
    _, no_base = annotated([two, _with_comm(make_result("a4", 4, samples_per_s=250), 0.1, 0.01, 0.005, 0.105),
                            _bench(4, ROWS)])
    four = no_base.set_index("world_size").loc[4]  # baseline 2 devices: no 1-device step to predict from
    assert pd.notna(four.predicted_allreduce_s) and pd.isna(four.predicted_efficiency_no_overlap)
    assert pd.isna(no_base.set_index("world_size").loc[2].predicted_efficiency_overlap)  # the baseline, not 1 device


def test_the_benchmark_frame_fills_what_a_result_does_not_say():
    """No device name: "?"; no creation time: "", so the undated run sorts oldest, never as the newest whose labels
    a combined benchmark carries; a result.json's own path is not an nccl-tests log to print."""
    undated = _ar("undated", created=None)
    del undated["launch"]["device_names"]
    dated = _ar("dated", created="2026-01-01T00:00:00")
    dated["_path"] = "/runs/dated/result.json"  # as results.scan records where it read a result
    frame = explain.bench_frame([undated, dated])
    assert list(frame["run_id"]) == ["dated", "undated"]
    assert list(frame["created"]) == ["2026-01-01T00:00:00", ""] and list(frame["device"]) == ["cpu", "?"]
    assert frame["log"].isna().all()
    assert explain.bench_for(frame, 2, 1, "cpu", "cpu")["run_id"] == "dated"


def test_the_benchmark_of_a_cpu_run_matches_any_device_name_of_a_gpu_run_only_its_model():
    """A CPU's name is the processor's (`x86_64`) and no part of its hardware; on GPUs the model must match, even
    where a newer benchmark of another model sits beside it."""
    cpu = explain.bench_frame([_ar("x86", device_names=["x86_64"])])
    assert explain.bench_for(cpu, 2, 1, "cpu", "cpu")["run_id"] == "x86"
    gpus = explain.bench_frame([_ar("a100", created="2026-01-01", accelerator="gpu", device_names=["A100"]),
                                _ar("h100", created="2026-01-02", accelerator="gpu", device_names=["H100"])])
    a100 = explain.bench_for(gpus, 2, 1, "gpu", "A100")
    assert (a100["run_id"], a100["runs"]) == ("a100", 1)
    assert explain.bench_for(gpus, 2, 1, "gpu", "V100") is None


def test_a_benchmark_that_recorded_no_dtype_counts_as_float32():
    """Results written before the dtype was recorded were float32 runs: combined with a float32 run (median of
    2 ms and 4 ms at 1 MB is 3 ms), and used alone where they are all there is."""
    old = _ar("old", created="2026-01-02", dtype=None)
    new = _ar("new", created="2026-01-01", rows=[dict(r, time_s=r["time_s"] * 2) for r in ROWS])
    both = explain.bench_for(explain.bench_frame([old, new]), 2, 1, "cpu", "cpu")
    assert both["runs"] == 2 and both["rows"][0]["time_s"] == pytest.approx(0.003)
    alone = explain.bench_for(explain.bench_frame([old]), 2, 1, "cpu", "cpu")
    assert alone["runs"] == 1 and alone["rows"][0]["time_s"] == 0.002


def test_at_the_smallest_measured_size_the_time_is_the_measured_one():
    """Not one recomputed from a bandwidth printed to 4 digits (1 MB / 0.3333 GB/s would be 3.0003 ms)."""
    rows = [{"bytes": 1_000_000, "time_s": 0.003, "busbw_GBps": 0.3333},
            {"bytes": 10_000_000, "time_s": 0.01, "busbw_GBps": 1.0}]
    assert explain.bench_allreduce_time_s(rows, 1_000_000, 2) == 0.003


def _pair(**comm):
    """A 1-device baseline (step 100 ms) and a 2-device run (step 104 ms) of 8 MB gradients in one bucket."""
    return [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
            _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104, **comm)]


# ROWS' busbw at 8 MB, log-log between (1 MB, 0.5 GB/s) and (10 MB, 1 GB/s): 0.5 * 2^log10(8) = 0.935 GB/s;
# the 8 MB gradient over 2 ranks, 2(n-1)/n = 1: 8e6 / 0.935e9 = 8.55 ms
COMM_8MB = 8e6 / (0.5 * 2 ** math.log10(8) * 1e9)


def test_the_predicted_efficiency_of_strong_scaling_and_of_results_without_a_scaling_field():
    """Strong scaling: each of 2 devices computes half the 100 ms step, 50 ms, then waits for the all-reduce:
    50 / (50 + 8.55) = 85 %. Results that do not say (written before the field) are weak scaling: 100 / 108.55."""
    strong = _pair()
    for r in strong:
        r["workload"]["scaling"] = "strong"
    two = annotated(strong + [_bench(2, ROWS)])[1].set_index("world_size").loc[2]
    assert two.predicted_efficiency_no_overlap == pytest.approx(0.05 / (0.05 + COMM_8MB))
    assert round(two.predicted_efficiency_no_overlap * 100) == 85
    assert two.predicted_efficiency_overlap == pytest.approx(1.0)  # 8.55 ms hides behind 50 ms of compute
    unsaid = _pair()
    for r in unsaid:
        del r["workload"]["scaling"]
    two = annotated(unsaid + [_bench(2, ROWS)])[1].set_index("world_size").loc[2]
    assert two.predicted_efficiency_no_overlap == pytest.approx(0.1 / (0.1 + COMM_8MB))


def test_a_one_device_run_is_not_predicted_from_a_one_rank_benchmark():
    """One device all-reduces nothing: efficiency 1 by definition, whatever a 1-rank benchmark measured."""
    _, scaling = annotated(_pair() + [_bench(1, ROWS), _bench(2, ROWS)])
    one, two = (scaling.set_index("world_size").loc[n] for n in (1, 2))
    assert pd.isna(one.bench_runs) and pd.isna(one.predicted_allreduce_s) and pd.isna(one.bench_busbw_GBps)
    assert one.predicted_efficiency_no_overlap == 1.0 and one.predicted_efficiency_overlap == 1.0
    assert two.bench_runs == 1 and two.predicted_allreduce_s == pytest.approx(COMM_8MB)


def test_a_one_byte_gradient_pays_the_latency_floor_and_no_gradient_is_not_predicted():
    """1 B is below the benchmark's smallest size: its 2 ms, busbw 1 B / 2 ms = 5e-7 GB/s, efficiency 100 / 102;
    0 B: nothing goes over the wire, nothing to predict."""
    two = annotated(_pair(grad_bytes=1) + [_bench(2, ROWS)])[1].set_index("world_size").loc[2]
    assert two.predicted_allreduce_s == 0.002 and two.bench_busbw_GBps == pytest.approx(5e-7)
    assert two.predicted_efficiency_no_overlap == pytest.approx(0.1 / 0.102)
    none = annotated(_pair(grad_bytes=0) + [_bench(2, ROWS)])[1].set_index("world_size").loc[2]
    assert pd.isna(none.predicted_allreduce_s) and pd.isna(none.bench_busbw_GBps)
    assert pd.isna(none.predicted_efficiency_no_overlap) and none.bench_runs == 1


def test_a_price_without_a_token_budget_and_a_budget_without_a_price():
    """$2 an hour, 4 devices at 360 samples/s: $8 / 1,296,000 samples = $0.00617 per 1,000; no budget: no hours,
    no cost for it. A budget of 3.6e9 tokens at 360,000 tokens/s: 2.78 h; no price: no cost."""
    found = [make_result("g1", 1, samples_per_s=100), make_result("g4", 4, samples_per_s=360)]
    for r in found:
        r["timing"]["tokens_per_s"] = r["timing"]["samples_per_s"] * 1000
    scaling = frames.scaling_frame(frames.runs_frame(found))
    priced = explain.annotate(scaling, explain.bench_frame([]), gpu_hour_price=2.0).set_index("world_size")
    assert priced.loc[4, "cost_per_1k_samples"] == pytest.approx(8 / 1296)
    assert priced["hours_for_token_budget"].isna().all() and priced["cost_for_token_budget"].isna().all()
    budget = explain.annotate(scaling, explain.bench_frame([]), token_budget=3.6e9).set_index("world_size")
    assert budget.loc[4, "hours_for_token_budget"] == pytest.approx(3.6e9 / 360_000 / 3600)
    assert budget["cost_for_token_budget"].isna().all() and budget["cost_per_1k_samples"].isna().all()


def test_annotate_keeps_each_figure_on_its_own_row_whatever_the_frames_order():
    """A frame in another order (or a part of one) keeps its index: the 2-device prediction stays on that row."""
    backwards = frames.scaling_frame(frames.runs_frame(_pair())).iloc[::-1]
    out = explain.annotate(backwards, explain.bench_frame([_bench(2, ROWS)])).set_index("world_size")
    assert out.loc[2, "predicted_allreduce_s"] == pytest.approx(COMM_8MB) and out.loc[2, "bench_runs"] == 1
    assert pd.isna(out.loc[1, "predicted_allreduce_s"]) and out.loc[1, "predicted_efficiency_overlap"] == 1.0
    assert out.loc[2, "predicted_efficiency_no_overlap"] == pytest.approx(0.1 / (0.1 + COMM_8MB))


COMM_10 = "communication: 10 % of the step (10 ms waited; 50 % of the 20 ms all-reduce hidden behind backward)"


def test_the_limiting_line_at_each_threshold_it_draws():
    """Compute 10 % above the baseline's is not yet slower; waited 1.1 x the all-reduce is not yet "lost, more than";
    running beside backward costing 15 % of the all-reduce alone is not yet named; a 5 % share is not "nothing
    large". Each figure is exact in binary floating point, so the line shows the rule, not a rounding."""
    head = "2 devices on 1 node: efficiency 90 %. Limited by "
    assert explain.limiting_line(_row(compute_s=11.0, baseline_compute_s=10.0)) == f"{head}{COMM_10}."
    assert explain.limiting_line(_row(comm_share=0.5, waited_s=0.55, allreduce_s=0.5, hidden_fraction=0.0)) == (
        f"{head}communication: 50 % of the step (550 ms waited; 0 % of the 500 ms all-reduce hidden behind "
        "backward).")
    assert explain.limiting_line(_row(allreduce_s=0.115, allreduce_alone_s=0.1)) == (
        f"{head}communication: 10 % of the step (10 ms waited; 50 % of the 115 ms all-reduce hidden behind "
        "backward).")  # lost 15 ms of the 100 ms alone: exactly 15 %
    assert explain.limiting_line(_row(comm_share=0.05)) == (
        f"{head}communication: 5 % of the step (10 ms waited; 50 % of the 20 ms all-reduce hidden behind backward).")
    assert explain.limiting_line(_row(allreduce_alone_s=0.0)) == f"{head}{COMM_10}."  # no time alone: no comparison


def test_the_limiting_line_in_seconds_long_steps():
    """Figures of a second and more keep their scale and thousands separator: 600 ms waited of a 1,500 ms all-reduce
    that takes 1,200.0 ms alone, so running beside backward cost it 300.0 ms (more than 15 %)."""
    r = _row(world_size=4, efficiency=0.5, accelerator="cpu", comm_share=0.3, waited_s=0.6, allreduce_s=1.5,
             hidden_fraction=0.6, allreduce_alone_s=1.2)
    assert explain.limiting_line(r) == (
        "4 devices on 1 node: efficiency 50 %. Limited by communication: 30 % of the step (600 ms waited; 60 % of "
        "the 1,500 ms all-reduce hidden behind backward). Alone, the same all-reduce takes 1,200 ms: running "
        "beside backward cost it 300 ms, because compute and communication share the node's cores.")


def test_the_limiting_line_orders_two_causes_by_the_time_each_cost():
    """50 ms waited outweighs compute 20 ms slower: communication first. Where the split is noise (probes 20 %
    slower, no waited time known), communication has no measured cost and the slower compute comes first."""
    r = _row(compute_s=0.12, comm_share=0.3, waited_s=0.05, allreduce_s=0.1)
    assert explain.limiting_line(r) == (
        "2 devices on 1 node: efficiency 90 %. Limited by communication: 30 % of the step (50 ms waited; 50 % of the "
        "100 ms all-reduce hidden behind backward). Slower compute per device: 20 ms more per step than at 1 device.")
    noisy = _row(compute_s=0.12, synced_s=0.1, waited_s=NAN)
    assert explain.limiting_line(noisy) == (
        "2 devices on 1 node: efficiency 90 %. Limited by slower compute per device: 20 ms more per step than at "
        "1 device. Communication: not separable from compute in these runs (the no-sync probe steps were 20 % "
        "slower than the normal steps, which is noise; more --max_steps gives more probe steps).")


def test_the_limiting_line_of_strong_scaling_against_a_two_device_baseline_and_of_an_unknown_share():
    """Strong scaling from 2 to 4 devices: each computes 2/4 of the batch, 100 ms x 2/4 = 50 ms expected, 80 ms
    measured: 30 ms more. No comm share recorded: no percent printed, and nothing called large or small."""
    r = _row(world_size=4, baseline_world_size=2, scaling="strong", compute_s=0.08)
    assert explain.limiting_line(r) == (
        "4 devices on 1 node: efficiency 90 %. Limited by slower compute per device: 30 ms more per step than the "
        f"compute at 2 devices × 2/4 (strong scaling: each device has 2/4 of the batch). {COMM_10[0].upper()}"
        f"{COMM_10[1:]}.")
    assert explain.limiting_line(_row(comm_share=NAN)) == (
        "2 devices on 1 node: efficiency 90 %. Limited by communication: 10 ms waited; 50 % of the 20 ms all-reduce "
        "hidden behind backward.")


def test_a_benchmark_time_that_is_not_positive_gives_no_busbw():
    """A broken benchmark file (-2 ms at 1 MB) predicts its -2 ms for a 1 MB gradient, but no bandwidth is made of
    it and no efficiency: "—" in the table, not a negative GB/s."""
    broken = [dict(ROWS[0], time_s=-0.002, busbw_GBps=-0.5), ROWS[1]]
    two = annotated(_pair(grad_bytes=1_000_000) + [_bench(2, broken)])[1].set_index("world_size").loc[2]
    assert two.predicted_allreduce_s == -0.002
    assert pd.isna(two.bench_busbw_GBps) and pd.isna(two.predicted_efficiency_no_overlap)


def test_an_fsdp_row_says_what_its_collectives_took_and_that_its_compute_is_not_isolated():
    """FSDP takes no probe step: no DDP split; what its timed collectives were busy, what the benchmarks price
    them at, how much the step grew over 1 device, each said where known, and what is not measured."""
    fsdp = dict(strategy="fsdp", compute_s=NAN, waited_s=NAN, allreduce_s=NAN, step_s=0.5, baseline_step_s=0.3)
    line = explain.limiting_line(_row(**fsdp, collectives_s=0.12, predicted_allreduce_s=0.08))
    assert line == ("2 devices on 1 node: efficiency 90 %. FSDP: its all-gathers and reduce-scatters were busy 120 ms "
                    "of the 500 ms step, as they ran beside compute; the benchmarks price them at 80 ms alone; the "
                    f"step is 200 ms longer than at 1 device. {explain.FSDP_UNSPLIT}")
    big = explain.limiting_line(_row(**{**fsdp, "step_s": 50.0, "baseline_step_s": 20.0}, collectives_s=12.0,
                                     predicted_allreduce_s=9.0))  # seconds to ms: x 1000, not x 1001
    assert "busy 12,000 ms of the 50,000 ms step" in big and "at 9,000 ms alone" in big and "30,000 ms longer" in big
    half = explain.limiting_line(_row(**{**fsdp, "step_s": NAN}, collectives_s=0.12, predicted_allreduce_s=NAN))
    assert "busy" not in half  # a busy time is said against its step, not against a missing one
    bare = explain.limiting_line(_row(**{**fsdp, "step_s": NAN}, collectives_s=NAN, predicted_allreduce_s=NAN))
    assert bare == f"2 devices on 1 node: efficiency 90 %. {explain.FSDP_UNSPLIT}" and "all-reduce" not in bare
    assert "No communication measurement" in explain.limiting_line(_row(compute_s=NAN))  # DDP's line unchanged


def test_a_collectives_rows_read_as_an_all_reduces_double_their_time_with_the_bandwidths_of_that_time():
    """An all-gather benchmark without single-op times: each row as the all-reduce it would be, its time doubled and
    busbw recomputed for that time, so the price of a size between two rows is twice the all-gather's too."""
    rows = [{"bytes": 1_000_000, "time_s": 0.002, "busbw_GBps": 0.25}, {"bytes": 10_000_000, "time_s": 0.01,
                                                                       "busbw_GBps": 0.5}]
    doubled = explain.as_allreduce(rows, "all_gather", 2)
    assert [r["time_s"] for r in doubled] == [0.004, 0.02] and explain.as_allreduce(rows, "all_reduce", 2) is rows
    assert [r["busbw_GBps"] for r in doubled] == pytest.approx([0.25, 0.5])  # n = 2: busbw = algbw = S / 2t
    # every field a benchmark row carries, as the all-reduce's: at n = 4 busbw = algbw x 1.5; the time one op took
    # alone doubled too where the row has it, and no such field invented where it has not
    (timed,) = explain.as_allreduce([{"bytes": 1_000_000, "time_s": 0.002, "single_op_s": 0.0015}], "all_gather", 4)
    assert timed == pytest.approx({"bytes": 1_000_000, "time_s": 0.004, "algbw_GBps": 0.25, "busbw_GBps": 0.375,
                                   "single_op_s": 0.003})
    assert "single_op_s" not in explain.as_allreduce(rows, "reduce_scatter", 4)[0]
    between = explain.bench_allreduce_time_s(doubled, 4_000_000, 2)
    assert between == pytest.approx(2 * explain.bench_allreduce_time_s(
        [{**r, "busbw_GBps": r["busbw_GBps"] * 2} for r in rows], 4_000_000, 2))


def test_a_link_states_its_rate_only_between_nodes():
    """A stated link is one between nodes: a one-node run's (or an older result without num_nodes) states none, as
    does a launch without a link or with one of no rate."""
    link = {"gbit": 8.0, "emulated": True, "latency_ms": None}
    assert explain.link_gbit({"num_nodes": 2, "link": link}) == 8.0
    assert explain.link_gbit({"num_nodes": 2, "link": {**link, "emulated": False}}) == 8.0  # a stated real rate
    assert explain.link_gbit({"num_nodes": 1, "link": link}) is None
    assert explain.link_gbit({"link": link}) is None
    assert explain.link_gbit({"num_nodes": 2, "link": None}) is None
    assert explain.link_gbit({"num_nodes": 2, "link": {"gbit": None}}) is None

