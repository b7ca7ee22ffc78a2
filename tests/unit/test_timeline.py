"""The step timeline: the marks of one step laid out as bars (measure/timeline.py), the wait the step table reads from
the same marks (timing.waited_after_backward), and the picture beside the table (report/step_plot.py)."""

import contextlib
import io

import pytest
import torch

from helpers import make_result
from scalelab import record, results
from scalelab.measure import timeline, timing
from scalelab.report import cli, explain, plots, step_plot, tables, trace
from scalelab.report.cli import build
from scalelab.train import comm
from scalelab.train.clock import StepClock

FWD, BWD, WAIT, OPT = 0.1, 0.2, 0.05, 0.01  # one uniform step's phases, seconds
HIDDEN = 0.03  # of the all-reduce, inside backward


def rank_record(rank, steps=12, probes=(6, 11), wait=WAIT, world=2, slow=0.0):
    """A rank's record of `steps` identical steps (compute `slow` longer on this rank), as the step clock keeps it."""
    fwd, bwd = FWD + slow, FWD + BWD + slow
    normal = world > 1
    ready = [bwd if (i in probes or not normal) else bwd + wait for i in range(steps)]
    spans = [[] if (i in probes or not normal) else [[bwd - HIDDEN, bwd + wait]] for i in range(steps)]
    return {"rank": rank, "host": "h", "device": "cpu", "forward_times_s": [fwd] * steps,
            "backward_times_s": [bwd] * steps, "grads_ready_times_s": ready,
            "step_times_s": [r + OPT for r in ready], "comm_spans_s": spans,
            "allreduce_times_s": [timeline.union_length(s) for s in spans], "buckets": [len(s) for s in spans],
            "probe_steps": list(probes), "epoch_times_s": [1.0], "losses": [1.0] * steps, "grad_bytes": 8_000_000,
            "first_step_end": None, "process_start": 0.0,
            "bucket_bytes": [8_000_000] if normal else [], "wire_bytes": []}


def totals(bars: list) -> dict:
    """Seconds per kind of bar (the collectives: the union of their spans, as the table's all-reduce ms)."""
    out = {kind: sum(b.end - b.start for b in bars if b.kind == kind) for kind in timeline.COMPUTE}
    out["collective"] = timeline.union_length((b.start, b.end) for b in bars if b.track == "comm")
    return out


def uniform_run(run_id, world, **kw):
    ranks = [rank_record(r, world=world, **kw) for r in range(world)]
    data = make_result(run_id, world=world, samples_per_s=64 * world / ranks[0]["step_times_s"][2])
    summary = timing.summarize(ranks, 2, 64 * world, 0)
    data["timing"].update(step_s=summary.step_s, comm=record.plain(summary.comm), warmup_steps=2)
    data["ranks"] = ranks
    return data


def test_a_step_is_forward_backward_the_wait_and_the_optimizer_with_its_collectives_beside():
    bars = timeline.step_bars(rank_record(0), 3)
    assert [(b.track, b.kind) for b in bars] == [("compute", "forward"), ("compute", "backward"),
                                                 ("compute", "waiting"), ("compute", "optimizer"),
                                                 ("comm", "collective")]
    assert [b.end for b in bars[:4]] == pytest.approx([FWD, FWD + BWD, FWD + BWD + WAIT, FWD + BWD + WAIT + OPT])
    assert all(a.end == b.start for a, b in zip(bars[:3], bars[1:4]))  # the compute lane has no gap
    assert (bars[4].start, bars[4].end) == pytest.approx((FWD + BWD - HIDDEN, FWD + BWD + WAIT))
    seconds = totals(bars)
    assert seconds["waiting"] == pytest.approx(WAIT) and seconds["collective"] == pytest.approx(WAIT + HIDDEN)
    # a step that waited for nothing draws no wait
    assert [b.kind for b in timeline.step_bars(rank_record(0, world=1), 3)] == ["forward", "backward", "optimizer"]


def test_accumulated_batches_are_drawn_one_after_another_with_one_wait_and_one_update():
    record = rank_record(0, steps=4, probes=())
    record["step_ends"] = [1, 3]  # two batches per optimizer step
    for first in (0, 2):  # each step's first batch: no sync, no update
        record["grads_ready_times_s"][first] = record["step_times_s"][first] = FWD + BWD
        record["comm_spans_s"][first] = []
    bars = timeline.step_bars(record, 1)  # batches 2 and 3
    assert [b.kind for b in bars] == ["forward", "backward", "forward", "backward", "waiting", "optimizer",
                                      "collective"]
    assert bars[1] == timeline.Bar("compute", "backward", FWD, FWD + BWD)  # the first batch: to its end
    first = record["step_times_s"][2]
    assert bars[2].start == pytest.approx(first) and bars[-1].start == pytest.approx(first + FWD + BWD - HIDDEN)


def test_the_step_drawn_is_a_timed_one_nearest_the_median_never_warm_up_or_a_probe():
    run = uniform_run("r2", 2)
    for r in run["ranks"]:
        r["step_times_s"][0] = 9.0  # warm-up: slow, and never drawn
        r["step_times_s"][4] += 0.2  # timed, the slowest
        r["step_times_s"][7] += 0.001  # the nearest the median: the others tie at it, the earliest wins
    steps = timeline.timed_steps(run)
    assert steps == [2, 3, 4, 5, 7, 8, 9, 10] and timeline.representative(run) == 2
    for r in run["ranks"]:
        r["step_times_s"][2] += 0.1  # the first timed step is slow now, step 5 the fastest: neither is the median
        r["step_times_s"][5] -= 0.1
    assert timeline.representative(run) == 3
    for r in run["ranks"]:
        r["comm_spans_s"] = r["comm_spans_s"][:5]  # spans kept for the first 5 batches only
    assert timeline.timed_steps(run) == [2, 3, 4]
    for r in run["ranks"]:
        del r["backward_times_s"]  # an older result: no timeline at all
    assert timeline.representative(run) is None and timeline.of_run(run) is None


def test_the_wait_is_read_in_the_step_itself_from_the_last_rank_to_end_backward():
    """waited_s: gradients-ready minus the end of backward, the last rank's each, in the same step. The probes'
    compute from other steps scatters as much as a small wait: a probe 12 ms slower than the normal steps read a
    10 ms exposed all-reduce as 0 ms waited and 100 % hidden."""
    ranks = [rank_record(0), rank_record(1, slow=0.02)]  # rank 1 ends backward 20 ms later: the others wait for it
    assert timing.waited_after_backward(ranks, [2, 3]) == pytest.approx(WAIT)
    for r in ranks:
        for i in (6, 11):
            r["grads_ready_times_s"][i] += 0.06  # the probes ran slow by chance
    comm_record = timing.comm_summary(ranks, [2, 3, 4], [6, 11])
    assert comm_record.waited_s == pytest.approx(WAIT)
    assert comm_record.hidden_s == pytest.approx(HIDDEN, abs=1e-9)
    for r in ranks:
        del r["backward_times_s"]  # an older result: the probes stand in (and read no wait here)
    assert timing.comm_summary(ranks, [2, 3, 4], [6, 11]).waited_s == 0.0


def test_plot_reads_whole_only_the_runs_its_timelines_draw(tmp_path, monkeypatch):
    """--plot on a folder of many repeats (a site's nights) reads whole only the run each configuration's timeline
    draws (before: every training result, 6,668 of 10,000 replicated make demo results); the figure is the one
    drawn from every result read whole."""
    for i in range(9):
        results.write(str(tmp_path), uniform_run(f"one{i}", 1, slow=0.001 * i))
        results.write(str(tmp_path), uniform_run(f"two{i}", 2, slow=0.001 * i))
    report = build(str(tmp_path))
    every = step_plot.figures(report.full_records(), report.runs, report.scaling)
    chosen = step_plot.chosen_runs(report.runs, report.scaling)
    read, load = [], results.load
    monkeypatch.setattr(results, "load", lambda path, *a, **k: read.append(path) or load(path, *a, **k))
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["--output_dir", str(tmp_path), "--plot", str(tmp_path / "plots")]) == 0
    assert len(read) == len(chosen) == 2 and {p.split("/")[-2] for p in read} == chosen
    drawn = step_plot.figures(report.full_records(chosen), report.runs, report.scaling)
    assert [(name, plots.figure_text(fig)) for name, fig in drawn] == [
        (name, plots.figure_text(fig)) for name, fig in every]


def test_the_timeline_and_the_step_table_say_the_same_figures(tmp_path):
    for data in (uniform_run("one", 1), uniform_run("two", 2)):
        results.write(str(tmp_path), data)
    report = build(str(tmp_path))
    g = report.scaling
    rows = step_plot.group_timelines(report.full_records(), report.runs, g)
    assert [name for name, *_ in rows] == ["1 dev", "2 dev"]
    _, row, _, line = rows[1]
    cells = tables.story_cells(row)
    for bars in line["ranks"].values():
        seconds = totals(bars)
        assert f"{seconds['waiting'] * 1e3:,.1f}" == cells["waited ms"] == "50.0"
        assert f"{seconds['collective'] * 1e3:,.1f}" == cells["all-reduce ms"]
        assert f"{bars[-2].end * 1e3:,.1f}" == cells["step ms"]  # the optimizer ends the step
    assert cells["hidden"] == f"{HIDDEN / (WAIT + HIDDEN) * 100:.0f} %"
    [(name, fig)] = step_plot.figures(report.full_records(), report.runs, g)
    text = plots.figure_text(fig)
    assert name == "step_timeline_A.png"
    assert (f"2 dev: step {cells['step ms']} ms · all-reduce {cells['all-reduce ms']} ms · waited 50.0 ms · "
            f"hidden {cells['hidden']}") in text
    assert "rank 0" in text and "rank 1" in text


def test_a_large_world_draws_its_first_two_and_last_two_ranks():
    assert step_plot.shown_ranks([3, 0, 1, 2]) == [0, 1, 2, 3]
    assert step_plot.shown_ranks(list(range(8))) == [0, 1, 6, 7]


def test_the_clock_marks_backwards_end_before_ddp_waits_for_its_last_bucket():
    """The backward mark is a callback queued as backward starts: it runs when the graph is done and before the
    callback DDP (or FSDP) queues, from a gradient hook, to wait for its collectives."""
    timer = comm.CommTimer()
    clock = StepClock(torch.device("cpu"), 0.0, timer)
    order = []
    clock.marks.mark = lambda: order.append("mark") or float(len(order))  # each mark: its place in the order
    weight = torch.nn.Parameter(torch.ones(3))
    engine = torch.autograd.Variable._execution_engine
    weight.register_post_accumulate_grad_hook(lambda p: engine.queue_callback(lambda: order.append("ddp waits")))
    clock.start()
    loss = (weight * 2).sum()
    clock.forward_end(loss)
    loss.backward()
    clock.grads_ready()
    clock.batch_end(loss, True, False)
    assert order == ["mark", "mark", "ddp waits", "mark", "mark"]  # forward, backward, DDP's wait, ready, end
    end, ready, (forward, backward), *_ = clock.pending[0]
    assert (forward, backward, ready, end) == (1.0, 2.0, 4.0, 5.0)


def check_trace_event_format(trace: dict) -> None:
    """The Trace Event Format's rules a viewer relies on (its JSON Object Format): a traceEvents list; metadata events
    ("M") name a process or a thread; complete events ("X") carry name, category, pid, tid, ts and dur in
    microseconds, never negative."""
    assert set(trace) >= {"traceEvents"} and trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    for e in trace["traceEvents"]:
        assert e["ph"] in ("M", "X") and isinstance(e["name"], str) and isinstance(e["pid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name") and isinstance(e["args"]["name"], str), e
            assert e["name"] == "process_name" or isinstance(e["tid"], int), e
        else:
            assert isinstance(e["tid"], int) and isinstance(e["cat"], str), e
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float) and e["ts"] >= 0 and e["dur"] >= 0, e


def test_a_trace_has_a_process_per_rank_a_compute_and_a_communication_track_and_names_each_step(tmp_path):
    import json

    run = uniform_run("two", 2)
    run["ranks"][1]["host"] = "node2"
    trace_events = trace.events(run)
    check_trace_event_format({"traceEvents": trace_events})
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace_events if e["ph"] == "M"}
    assert names == {(0, None): "rank 0 (h, cpu)", (0, 0): "compute", (0, 1): "communication",
                     (1, None): "rank 1 (node2, cpu)", (1, 0): "compute", (1, 1): "communication"}
    bars = [e for e in trace_events if e["ph"] == "X" and e["pid"] == 1]
    compute = [e for e in bars if e["tid"] == 0]
    assert all(a["ts"] + a["dur"] == pytest.approx(b["ts"]) for a, b in zip(compute, compute[1:]))  # end to end
    assert compute[-1]["ts"] + compute[-1]["dur"] == pytest.approx(sum(run["ranks"][1]["step_times_s"]) * 1e6)
    phases = {e["args"]["step"]: e["args"]["phase"] for e in bars}
    assert [phases[i] for i in range(12)] == ["warm-up"] * 2 + ["timed"] * 4 + ["probe"] + ["timed"] * 4 + ["probe"]
    comm_bars = [e for e in bars if e["tid"] == 1]
    assert len(comm_bars) == 10 and {e["name"] for e in comm_bars} == {"collective"}  # none in the 2 probes
    assert comm_bars[2]["ts"] == pytest.approx((2 * (FWD + BWD + WAIT + OPT) + FWD + BWD - HIDDEN) * 1e6)
    # the steps whose spans were not kept end the trace
    for r in run["ranks"]:
        r["comm_spans_s"] = r["comm_spans_s"][:5]
    assert max(e["args"]["step"] for e in trace.events(run) if e["ph"] == "X") == 4
    [path] = trace.write_all(str(tmp_path / "traces"), [uniform_run("two", 2),
                                                        {**uniform_run("failed", 2), "status": "failed"}])
    assert path.endswith("two.trace.json")
    check_trace_event_format(json.loads(open(path).read()))


def test_benchmark_py_trace_writes_one_file_per_run_and_refuses_a_file_for_a_folder(tmp_path):
    from helpers import run_script

    for data in (uniform_run("one", 1), uniform_run("two", 2)):
        results.write(str(tmp_path / "out"), data)
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--trace", tmp_path / "traces")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["one.trace.json", "two.trace.json"]
    assert f"written: {tmp_path / 'traces' / 'two.trace.json'}" in proc.stdout
    (tmp_path / "afile").write_text("")
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--trace", tmp_path / "afile")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--trace" in proc.stderr
    assert "Scaling" not in proc.stdout  # refused before anything is printed
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--ranks", "--trace", tmp_path / "t2")
    assert proc.returncode == 2 and "--trace" in proc.stderr and not (tmp_path / "t2").exists()


def test_a_wait_read_in_the_step_is_never_blanked_for_slow_probes():
    """The `?` cells guard a wait read against the probes (older results); one read in the step stands."""
    from types import SimpleNamespace

    row = SimpleNamespace(world_size=2, synced_s=0.09, compute_s=0.1, waited_in_step=0)
    assert explain.split_within_noise(row)
    assert not explain.split_within_noise(SimpleNamespace(**{**vars(row), "waited_in_step": 1}))
    assert uniform_run("two", 2)["timing"]["comm"]["waited_in_step"] == 1
    ranks = [rank_record(0), rank_record(1)]
    for r in ranks:
        del r["backward_times_s"]
    assert timing.comm_summary(ranks, [2, 3], [6, 11]).waited_in_step == 0


def test_an_fsdp_configuration_is_captioned_with_its_busy_collectives_not_an_empty_wait():
    import pandas as pd

    row = pd.Series({"world_size": 2, "step_s": 0.5669, "allreduce_s": float("nan"), "compute_s": float("nan"),
                     "waited_s": float("nan"), "comm_share": float("nan"), "hidden_fraction": float("nan"),
                     "synced_s": float("nan"), "collectives_s": 0.069})
    assert step_plot.caption(row) == ("step 566.9 ms · collectives busy 69.0 ms (no probe steps: no wait split "
                                      "from compute)")
    ddp = row.copy()
    ddp[["allreduce_s", "waited_s", "comm_share", "hidden_fraction"]] = [0.0116, 0.0121, 0.04, 0.0]
    assert step_plot.caption(ddp) == "step 566.9 ms · all-reduce 11.6 ms · waited 12.1 ms · hidden 0 %"


def test_an_accumulated_steps_marks_are_read_from_the_steps_start_for_its_wait():
    """optimizer_view: with K batches a step, the last batch's forward and backward marks are placed after the
    batches before it, as its gradients-ready is; the wait in the step is then its ready less its backward end."""
    from scalelab.measure.steps import optimizer_view

    record = rank_record(0, steps=4, probes=())
    record["step_ends"] = [1, 3]
    view = optimizer_view(record)
    one = FWD + BWD + WAIT + OPT  # each batch's time in this record
    assert view["forward_times_s"] == pytest.approx([one + FWD] * 2)
    assert view["backward_times_s"] == pytest.approx([one + FWD + BWD] * 2)
    assert timing.waited_after_backward([view], [0, 1]) == pytest.approx(WAIT)
    del record["forward_times_s"]  # an older result: no marks, none made up
    assert optimizer_view(record)["forward_times_s"] is None and optimizer_view(record)["backward_times_s"]
    record["backward_times_s"].pop()  # one short of the batches (not this program's): none, never an IndexError
    assert optimizer_view(record)["backward_times_s"] is None
    assert timing.waited_after_backward([optimizer_view(record)], [0, 1]) is None


@pytest.mark.parametrize("spoil", [
    lambda r: r.update(forward_times_s=r["forward_times_s"][:-1]),  # a list shorter than the steps
    lambda r: r.update(backward_times_s=[]),
    lambda r: r.update(grads_ready_times_s=r["grads_ready_times_s"][:3]),
    lambda r: r.update(comm_spans_s=r["comm_spans_s"] + [[]] * 5),  # more batches of spans than steps
    lambda r: r.update(step_ends=[1, 1, 3]),  # not in order
    lambda r: r.update(step_ends=[1, 3, 99]),  # past the batches
    lambda r: r.update(step_ends=[1, 12]),  # one past the last batch
    lambda r: r.update(step_ends=[-1, 1]),
    lambda r: r.update(step_ends=[1.0, 3.0]),
    lambda r: r.pop("rank"),
    lambda r: r.update(rank=None),
])
def test_a_result_whose_marks_do_not_fit_its_steps_has_no_timeline_and_no_trace_never_a_traceback(spoil, tmp_path):
    run = uniform_run("two", 2)
    spoil(run["ranks"][1])
    assert timeline.timed_steps(run) == [] and timeline.of_run(run) is None
    assert trace.write_all(str(tmp_path), [run]) == []


def test_two_ranks_of_one_number_have_no_timeline():
    run = uniform_run("two", 2)
    run["ranks"][1]["rank"] = 0
    assert timeline.timed_steps(run) == []


def test_the_step_drawn_never_paid_a_read_of_the_clock():
    run = uniform_run("two", 2)
    steps = timeline.timed_steps(run)
    run["ranks"][0]["after_read_steps"] = [1, steps[0]]  # the sync point's read is billed to the step after it
    assert timeline.timed_steps(run) == steps[1:]


def test_a_run_whose_table_has_no_wait_draws_none():
    """FSDP (no probe steps): the table splits no wait from compute, and the picture neither."""
    run = uniform_run("two", 2)
    run["timing"]["comm"] = {"collectives_s": 0.08}
    for bars in timeline.of_run(run)["ranks"].values():
        assert [b.kind for b in bars if b.track == "compute"] == ["forward", "backward", "optimizer"]
        assert bars[1].end == pytest.approx(FWD + BWD + WAIT)  # backward runs to gradients-ready
    one = uniform_run("one", 1)
    assert [b.kind for b in timeline.of_run(one)["ranks"][0]] == ["forward", "backward", "optimizer"]


def test_a_trace_file_is_named_from_its_run_id_inside_the_folder_whatever_the_id(tmp_path):
    taken = set()
    assert trace.file_name("../../etc/x", taken) == "_.._etc_x.trace.json"
    assert trace.file_name("/tmp/y", taken) == "_tmp_y.trace.json"
    assert trace.file_name("..", taken) == "run.trace.json"
    assert trace.file_name("/tmp/y", taken) == "_tmp_y-2.trace.json"  # two results of one id: two files
    runs = [uniform_run("same", 2), uniform_run("same", 2)]
    runs[0]["run_id"] = runs[1]["run_id"] = "../escape"
    paths = trace.write_all(str(tmp_path / "t"), runs)
    assert sorted(p.rsplit("/", 1)[1] for p in paths) == ["_escape-2.trace.json", "_escape.trace.json"]
    assert all(p.startswith(str(tmp_path / "t") + "/") for p in paths)


def test_what_hiding_the_all_reduce_cost_backward_is_measured_and_said():
    """slowed_s: backward's end in normal steps against probe steps (nothing beside it); the limiting line says it
    where it matters, since waited_s, read after backward's end, leaves it out."""
    ranks = [rank_record(0), rank_record(1)]
    for r in ranks:
        for i in range(12):
            if i not in (6, 11):
                r["backward_times_s"][i] += 0.02  # beside the all-reduce backward ends 20 ms later
                r["grads_ready_times_s"][i] += 0.02
                r["step_times_s"][i] += 0.02
    comm_record = timing.comm_summary(ranks, [2, 3, 4], [6, 11])
    assert comm_record.slowed_s == pytest.approx(0.02) and comm_record.waited_s == pytest.approx(WAIT)
    assert timing.backward_slowed(ranks, [2, 3], []) is None  # no probe: nothing to hold it against
    from types import SimpleNamespace

    row = SimpleNamespace(allreduce_s=0.08, waited_s=0.05, hidden_fraction=0.375, slowed_s=0.02, accelerator="cpu")
    assert explain._comm_detail(row) == (
        "50 ms waited; 38 % of the 80 ms all-reduce hidden behind backward, though backward itself ended 20 ms later "
        "than with nothing beside it, sharing the node's cores")
    small = SimpleNamespace(**{**vars(row), "slowed_s": 0.007, "accelerator": "gpu"})  # under a tenth of 80 ms
    assert explain._comm_detail(small).endswith("hidden behind backward")
    edge = SimpleNamespace(**{**vars(row), "allreduce_s": 0.005, "waited_s": 0.004, "slowed_s": 1e-3})  # 1 ms: said
    assert explain._comm_detail(edge).endswith("ended 1.0 ms later than with nothing beside it, sharing the node's "
                                               "cores")
    gpu = SimpleNamespace(**{**vars(row), "accelerator": "gpu"})
    assert explain._comm_detail(gpu).endswith("sharing the GPU's SMs and memory bandwidth")
    # a step of a few ms (the demo's MLP: 3.3 ms, 0.6 ms all-reduce): a twentieth of the step is said, less is not
    tiny = SimpleNamespace(**{**vars(row), "allreduce_s": 0.0006, "waited_s": 0.0007, "step_s": 0.0033,
                              "waited_in_step": 1})
    for slowed, said in ((0.00036, True), (0.00017, True), (0.00016, False)):
        line = explain._comm_detail(SimpleNamespace(**{**vars(tiny), "slowed_s": slowed}))
        assert ("backward itself ended" in line) is said, (slowed, line)
    assert "ended 0.36 ms later" in explain._comm_detail(SimpleNamespace(**{**vars(tiny), "slowed_s": 0.00036}))
    long = SimpleNamespace(**{**vars(row), "step_s": 2.0, "slowed_s": 0.0099})  # a 2 s step: from 1 ms, as before
    for step in (0.0, float("nan"), None):  # no step to take a share of: from 1 ms
        assert "backward itself" not in explain._comm_detail(SimpleNamespace(**{**vars(tiny), "step_s": step,
                                                                                 "slowed_s": 0.00036}))
    assert "ended 9.9 ms later" in explain._comm_detail(long)


def test_a_wait_read_in_the_step_longer_than_the_all_reduce_is_not_blamed_on_slower_compute():
    """Read after backward's end, a wait beyond the all-reduce is DDP's finalize (the copy-out) and skew; compute's
    slowdown is slowed_s's. Read against the probes (older results), it was compute running slower beside it."""
    from types import SimpleNamespace

    row = SimpleNamespace(allreduce_s=0.0099, waited_s=0.011, hidden_fraction=0.0, waited_in_step=1)
    assert explain._comm_detail(row) == "11 ms waited; 0 % of the 9.9 ms all-reduce hidden behind backward"
    old = SimpleNamespace(**{**vars(row), "waited_in_step": 0})
    assert explain._comm_detail(old).startswith("11 ms lost, more than the 9.9 ms the all-reduce itself took")


def test_which_steps_a_timeline_may_draw_as_the_run_counts_them():
    """After warm-up (0 where the result names none; a run shorter than its warm-up keeps its last step), not a
    probe, not an epoch's short last step; a one-step run has one; an accumulated run is drawn."""
    run = uniform_run("two", 2)
    del run["timing"]["warmup_steps"]
    assert timeline.timed_steps(run)[0] == 0
    run["timing"]["warmup_steps"] = 20  # more than its 12 steps
    assert timeline.timed_steps(run) == [] and timeline.representative(run) is None  # its last (11) is a probe
    for r in run["ranks"]:
        r["probe_steps"] = [6]
    assert timeline.timed_steps(run) == [11]
    one = uniform_run("one", 1)
    for r in one["ranks"]:
        for name in ("forward_times_s", "backward_times_s", "grads_ready_times_s", "step_times_s", "comm_spans_s"):
            r[name] = r[name][:1]
    one["timing"]["warmup_steps"] = 0
    assert timeline.timed_steps(one) == [0]
    acc = uniform_run("acc", 2)
    for r in acc["ranks"]:
        r["step_ends"], r["probe_steps"] = [1, 3, 5, 7, 9, 10], []  # the last step one batch: short
    acc["timing"]["warmup_steps"] = 1
    assert timeline.timed_steps(acc) == [1, 2, 3, 4]


def test_an_optimizer_steps_batches():
    record = {"step_ends": [1, 3, 4]}
    assert [timeline.batches(record, s) for s in (0, 1, 2)] == [[0, 1], [2, 3], [4]]
    assert timeline.batches({}, 5) == [5]  # every batch a step


def test_one_rank_draws_no_wait_even_where_its_gradients_were_ready_after_backward():
    """One process has nothing to wait for: the table says 0, the picture draws its backward to gradients-ready."""
    one = uniform_run("one", 1)
    for i in range(12):
        one["ranks"][0]["grads_ready_times_s"][i] += 0.001  # the step's own finalize after backward's mark
    assert "waiting" not in [b.kind for b in timeline.of_run(one)["ranks"][0]]
    assert "slowed_s" not in one["timing"]["comm"]  # nor what communication cost backward


def test_union_of_spans_counts_each_instant_once():
    assert timeline.union_length([(1, 2), (3, 4), (5, 7)]) == 4  # three apart, none at 0
    assert timeline.union_length([(1, 2), (2, 3)]) == 2  # touching
