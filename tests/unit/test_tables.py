"""The printed report's tables and captions, on constructed results: each cell and line as a user reads it."""

import pandas as pd

from helpers import _with_comm, make_result
from scalelab.report import explain, tables
from scalelab.report.frames import runs_frame, scaling_frame


def _pipe(text: str) -> list:
    """The cells of a tabulate "pipe" table: [header cells, row cells, ...] (the alignment line left out)."""
    lines = text.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def _scaling(found):
    runs = runs_frame(found)
    return runs, explain.annotate(scaling_frame(runs), explain.bench_frame([]))


def test_what_one_cpu_device_was():
    def caption(*threads):
        return tables.cpu_device_caption(pd.DataFrame({"threads": list(threads)}, dtype="float"))
    assert caption() == caption(float("nan")) == "CPU rehearsal (gloo)"
    assert caption(1, 1) == "CPU rehearsal (gloo): 1 device = 1 core"
    assert caption(2) == "CPU rehearsal (gloo): 1 device = 2 cores"


def test_runs_whose_cpu_devices_differ_in_size_are_two_groups_never_repeats_of_one():
    # the dry run: repeats that mixed 1-thread and 4-thread devices in one median, and a speedup between them
    one, four = make_result("one", 1, samples_per_s=100), make_result("four", 1, samples_per_s=300)
    one["launch"]["threads"], four["launch"]["threads"] = 1, 4
    runs, scaling = _scaling([one, four, make_result("two", 2, samples_per_s=190)])
    assert runs["group"].nunique() == 2 and len(scaling) == 3  # the 4-core device alone in its group
    assert sorted(scaling["runs"]) == [1, 1, 1]
    gpu = [make_result("g1", 1), make_result("g2", 2)]
    for r, threads in zip(gpu, (1, 8)):
        r["launch"].update(accelerator="gpu", threads=threads)
    assert runs_frame(gpu)["group"].nunique() == 1  # a GPU is the device: its rank's threads are no size of it


def test_the_group_title_names_workload_batch_precision_levers_and_hardware():
    runs = runs_frame([make_result("w", 2, accumulate_grad_batches=4, comm_hook="bf16")])
    first = runs.iloc[0]
    assert tables._group_title(first, "A", runs) == (
        "Group A: mlp (1K params) · batch 64/device (weak scaling: global batch grows) · precision 32 · accumulate 4 "
        "· comm hook bf16 · CPU rehearsal (gloo): 1 device = 1 core")
    strong = make_result("s", 4, scaling="strong", params=None)
    strong["workload"].update(global_batch=256, params=None)
    strong["launch"].update(accelerator="gpu", device_names=["NVIDIA H100 80GB HBM3"])
    runs = runs_frame([strong])
    assert tables._group_title(runs.iloc[0], "C", runs) == (
        "Group C: mlp (params unknown) · global batch 256 split over devices (strong scaling) · precision 32 · "
        "GPU: NVIDIA H100 80GB HBM3")


def test_processes_per_node_and_threads():
    runs = runs_frame([make_result("c", 2)])
    r = next(runs.itertuples())
    assert tables.devices_cell(r) == "2×1t"
    assert tables.devices_cell(r._replace(oversubscribed="2 ranks on 1 core")) == "2×1t!"
    assert tables.devices_cell(r._replace(accelerator="gpu", devices=4)) == "4"


def test_the_runs_table_lists_each_run_and_warns_about_shared_or_starved_cores():
    found = [make_result(f"r{i}", 1, samples_per_s=100 + i) for i in range(5)]
    found[4]["launch"]["oversubscribed"] = "2 ranks on 1 core"
    found[3]["timing"]["had_cpu"] = [0.5]
    found[0]["timing"]["step_s"] = {"median": 0.2912}  # seconds in the result, ms in the table
    for i, r in enumerate(found):
        r["created"] = f"2026-01-0{i + 1}"
    runs = runs_frame(found)
    lines = tables.runs_table(runs, "pipe", None)
    table = _pipe(lines[0])
    assert table[0] == ["run id", "world size", "nodes", "devices×threads", "1st step s", "train s", "step ms",
                        "epoch s", "samples/s", "train loss", "val acc"]
    assert table[1] == ["r0", "1", "1", "1×1t", "3.0", "10.00", "291.2", "1.00", "100", "0.500", "0.900"]
    assert lines[1:] == ["  ! r4: 2 ranks on 1 core; its speedup measures ranks sharing cores, not scaling",
                         "  ! r3: rank 0 had a core 50 % of the time it was ready to run: other work shared its "
                         "cores; its times are slower than this hardware's"]
    trimmed = tables.runs_table(runs, "pipe", 2)
    assert [row[0] for row in _pipe(trimmed[0])[1:]] == ["r3", "r4"]  # the newest two
    assert trimmed[-1] == "  ... 3 older run(s) not listed (all are in the scaling table; --all_runs lists them)"


def test_the_scaling_table_row_by_row():
    found = [make_result("a", 2, samples_per_s=100), make_result("b", 2, samples_per_s=200),
             make_result("c", 2, samples_per_s=110), make_result("d", 4, nodes=2, samples_per_s=198)]
    found[3]["launch"]["link"] = {"gbit": 1, "emulated": True}
    _, scaling = _scaling(found)
    lines = tables.scaling_table(scaling, "pipe")
    assert lines[:3] == ["", "Scaling (baseline: 2 devices; speedup = samples/s ÷ baseline samples/s)",
                         "  no 1-device run of this group completed: each speedup is against 2 devices, not one"]
    table = _pipe(lines[3])
    assert table[0] == ["world size", "nodes", "runs", "samples/s median [min–max]", "speedup", "efficiency",
                        "predicted eff.", "per device"]
    assert table[1] == ["2", "1", "3", "110 [100–200]", "1.00×", "100 %", "—", "55"]
    assert table[2] == ["4", "2 (emulated 1 Gbit/s)", "1", "198", "1.80×", "90 %", "—", "50"]
    assert lines[4:] == ["  2 nodes joined by an emulated 1 Gbit/s link: network namespaces on this machine, shaped "
                         "with tc (src/emulate.py), not a real network"]
    _, alone = _scaling([make_result("x", 1)])
    lines = tables.scaling_table(alone, "pipe")
    assert lines[1] == "Scaling (baseline: 1 device; speedup = samples/s ÷ baseline samples/s)"
    assert lines[2] == "  only one configuration (1 device(s)) in this group: nothing to compare against yet"
    assert _pipe(lines[3])[1] == ["1", "1", "1", "100", "1.00×", "100 %", "100 %", "100"]


def test_runs_that_did_not_complete_are_listed_with_the_start_of_their_error():
    failed = make_result("f", 2, status="failed")
    failed["error"] = "x" * 150
    runs = runs_frame([make_result("ok", 1), failed, dict(make_result("t", 4, status="timeout"), error="stopped")])
    lines = tables.failed_table(runs, "pipe")
    assert lines[0] == "Runs that did not complete (left out of every speedup):" and lines[-1] == ""
    assert _pipe(lines[1]) == [["run id", "status", "world size", "nodes", "error"], ["f", "failed", "2", "1",
                                                                                      "x" * 100],
                               ["t", "timeout", "4", "1", "stopped"]]
    assert tables.failed_table(runs_frame([make_result("ok", 1)]), "pipe") == []


def test_a_failed_run_without_an_error_field_is_listed_as_such():
    """A record whose `error` is absent, null or blank (beside one that has text: the column then holds NaN)."""
    bare, null, blank = (make_result(name, 2, status="failed") for name in ("bare", "null", "blank"))
    del bare["error"]
    null["error"], blank["error"] = None, "  "
    none = "no error recorded"
    for found, errors in [([bare], [none]), ([bare, make_result("said", 1, status="failed")], [none, "boom"]),
                          ([null, blank], [none, none])]:
        rows = _pipe(tables.failed_table(runs_frame(found), "pipe")[1])[1:]
        assert [row[4] for row in rows] == errors


def _hint(devices, nodes, accelerator="cpu", link="", gbit=None):
    return tables._bench_hint(pd.DataFrame({"world_size": [1, devices], "num_nodes": [1, nodes], "link": ["", link],
                                            "link_gbit": [None, gbit], "accelerator": [accelerator] * 2}))


def test_the_benchmark_hint_is_the_command_for_the_largest_configuration():
    assert _hint(2, 1) == "`python src/allreduce_bench.py --devices 2`"
    assert _hint(4, 2, link="emulated 0.2 Gbit/s", gbit=0.2) == (
        "`python src/emulate.py --devices 2 --link_gbit 0.2 -- src/allreduce_bench.py`")
    assert _hint(4, 2) == ("`sbatch --nodes=2 slurm_jobs/allreduce_bench.sh` (its header must say 2 tasks per node, "
                           "as the training runs had)")
    assert _hint(8, 1, "gpu") == ("`sbatch --nodes=1 slurm_jobs/allreduce_bench.sh` (its header must say 8 tasks per "
                                  "node, as the training runs had) or an all_reduce_perf log of 8 ranks on 1 node(s) "
                                  "(--nccl_tests LOG)")


def test_the_report_prints_each_group_then_the_runs_that_failed():
    found = [make_result("a1", 1), make_result("a2", 2, samples_per_s=180), make_result("b1", 1, batch_size=32),
             dict(make_result("bad", 2, status="failed"))]
    runs = runs_frame(found)
    text = tables.render(runs, scaling_frame(runs), fmt="pipe", max_runs=None)
    titles = [line for line in text.splitlines() if line.startswith("Group ")]
    assert [t[:9] for t in titles] == ["Group A: ", "Group B: "]
    assert text.index("| a2 ") < text.index("Group B: ") < text.index("| b1 ") < text.index(
        "Runs that did not complete") < text.index("| bad ")
    assert "Where the step goes" not in text  # no run measured its communication
    assert tables.render(runs_frame([]), scaling_frame(runs_frame([]))) == ""


def _created_in_order(found):
    for i, r in enumerate(found):
        r["created"] = f"2026-01-01T00:{i:02d}"
    return found


def _listed(counts, max_runs):
    """Runs `counts` [(devices, n)], oldest first: the run ids the runs table lists and the lines below it."""
    found = _created_in_order([make_result(f"d{devices}-{i}", devices) for devices, n in counts for i in range(n)])
    lines = tables.runs_table(runs_frame(found), "pipe", max_runs)
    return [row[0] for row in _pipe(lines[0])[1:]], lines[1:]


def test_beyond_max_runs_each_configuration_keeps_its_newest_whole_share():
    """The limit is split evenly over configurations, in whole runs, at least one each; at the limit, all show."""
    assert _listed([(1, 3), (2, 1)], 4) == (["d1-0", "d1-1", "d1-2", "d2-0"], [])  # 4 runs, limit 4
    older = "  ... {} older run(s) not listed (all are in the scaling table; --all_runs lists them)"
    newest = ["d1-1", "d2-1", "d4-1"]
    assert _listed([(1, 2), (2, 2), (4, 2)], 3) == (newest, [older.format(3)])  # 3 // 3 configurations = 1 each
    assert _listed([(1, 2), (2, 2), (4, 2)], 4) == (newest, [older.format(3)])  # 4 // 3 = 1, not 1.33
    assert _listed([(1, 3), (2, 3)], 2) == (["d1-2", "d2-2"], [older.format(4)])  # 2 // 2 = 1
    assert _listed([(1, 3), (2, 3)], 1) == (["d1-2", "d2-2"], [older.format(4)])  # 1 // 2 = 0: still one each


def test_gpu_runs_list_processes_per_node():
    gpu = make_result("g", 8, nodes=2)
    gpu["launch"].update(accelerator="gpu", device_names=["NVIDIA H100"])
    header, row = _pipe(tables.runs_table(runs_frame([gpu]), "pipe", None)[0])
    assert (header[3], row[3]) == ("devices", "4")


def _left_aligned(table: str) -> bool:
    """Every column of a pipe table aligned left (":---"), as text: tabulate read no cell as a number."""
    return all(c.startswith(":") and not c.endswith(":") for c in table.splitlines()[1].strip("|").split("|"))


def test_a_zero_baseline_throughput_gives_an_infinite_speedup_printed_as_inf():
    """Throughput 0 at 1 device: every speedup is x / 0. Two repeats show their range; an Infinity in a result file
    (json reads it as inf) prints as inf too, lowercase like every other cell."""
    found = [make_result("z1", 1), make_result("z1b", 1), make_result("t2", 2, samples_per_s=150),
             make_result("t4", 4)]
    for r, sps in zip(found, (0.0, 0.0, 150.0, float("inf"))):
        r["timing"]["samples_per_s"] = sps
    _, scaling = _scaling(found)
    lines = tables.scaling_table(scaling, "pipe")
    assert _left_aligned(lines[2])
    assert _pipe(lines[2])[1:] == [["1", "1", "2", "0 [0–0]", "—×", "— %", "100 %", "0"],  # 0 / 0: no speedup
                                   ["2", "1", "1", "150", "inf×", "inf % !", "—", "75"],
                                   ["4", "1", "1", "inf", "inf×", "inf % !", "—", "inf"]]


def test_a_scaling_frame_without_a_link_column_has_no_link_note():
    found = [make_result("a", 2), make_result("b", 4, nodes=2)]
    _, scaling = _scaling(found)
    lines = tables.scaling_table(scaling.drop(columns="link"), "pipe")
    assert [row[1] for row in _pipe(lines[3])[1:]] == ["1", "2"] and len(lines) == 4


def test_the_failed_runs_table_prints_every_cell_as_text():
    lines = tables.failed_table(runs_frame([make_result("f", 2, status="failed")]), "pipe")
    assert _left_aligned(lines[1]) and _pipe(lines[1])[1] == ["f", "failed", "2", "1", "boom"]


def _two_groups():
    """Group A: 12 runs at 1 device and one at 2; group B the same workload with comm hook bf16 (a lever family)."""
    found = [make_result(f"a{i:02d}", 1) for i in range(12)] + [make_result("a2", 2, samples_per_s=150)]
    found += [make_result("h1", 1, comm_hook="bf16"), make_result("h2", 2, samples_per_s=160, comm_hook="bf16")]
    for r in _created_in_order(found):
        r["timing"]["comm"] = {"compute_s": 0.008}
    runs = runs_frame(found)
    return runs, scaling_frame(runs)


def test_the_report_lists_the_newest_twelve_runs_per_group_by_default():
    """13 runs of group A over 2 configurations: 12 // 2 = 6 of the 1-device runs shown, 6 left out."""
    lines = tables.render(*_two_groups()).splitlines()
    assert "  ... 6 older run(s) not listed (all are in the scaling table; --all_runs lists them)" in lines
    assert lines[3].startswith("a06 ")  # the oldest listed: a00..a05 left out


def test_every_table_of_the_report_is_in_the_format_asked_for_and_a_blank_line_ends_each_group():
    lines = tables.render(*_two_groups(), fmt="pipe").splitlines()
    heads = [line.split("|")[1].strip() for line in lines if line.startswith("|") and "world size" in line]
    # per group: runs, scaling, step table; then the comm_hook family's table
    assert heads == ["run id", "world size", "world size", "run id", "world size", "world size", "comm_hook"]
    assert not [line for line in lines if line.startswith("--")]  # no "simple" table among them
    for title in ("Group B: ", "What comm_hook bought"):
        assert lines[next(i for i, line in enumerate(lines) if line.startswith(title)) - 1] == ""


INF = float("inf")


def test_an_infinite_figure_in_a_result_prints_as_inf_in_every_column_of_the_runs_table():
    """json reads a result file's Infinity (a diverged loss, a division by a zero time) as inf: each cell says
    "inf", as Python writes it, whatever the column's format."""
    r = make_result("inf", 1)
    r["launch"]["threads"] = INF
    r["timing"].update(samples_per_s=INF, train_time_s=INF, step_s={"median": INF}, epoch_times_s=[INF],
                       first_step_s=INF)
    r["metrics"].update(train_loss=INF, val_acc=INF)
    row = _pipe(tables.runs_table(runs_frame([r]), "pipe", None)[0])[1]
    assert row == ["inf", "1", "1", "1×inft", "inf", "inf", "inf", "inf", "inf", "inf", "inf"]


def _step_frame(**figures):
    """Configurations of the annotated frame as step_table reads them: 2 devices, the group's baseline."""
    base = dict(world_size=2, num_nodes=1, link="", baseline_world_size=2, model="gpt", bench_runs=3,
                step_s=0.25, compute_s=0.2, allreduce_s=0.1, allreduce_alone_s=0.08, predicted_allreduce_s=0.09,
                waited_s=0.07, comm_share=0.2, hidden_fraction=0.3, grad_bytes=999_500_000, ddp_busbw_GBps=1.25e-5,
                bench_busbw_GBps=1234.5, tflops_per_device=5e-5, mfu=0.0123)
    return pd.DataFrame([{**base, **figures}])


def test_the_step_table_row_in_milliseconds_megabytes_and_three_significant_digits():
    """Seconds print as ms (0.1 s -> 100.0), bytes as decimal MB (999.5 MB -> 1e+03 at 3 digits); very small and
    large rates in exponent form, lowercase."""
    lines = tables.step_table(_step_frame(), "pipe")
    assert lines[:2] == ["", "Where the step goes (medians; compute from no-sync probe steps; all-reduce from DDP's "
                             "timed hook, during backward and alone; predicted from the all-reduce benchmark's busbw)"]
    assert _pipe(lines[2]) == [tables.STEP_HEADERS, ["2", "1", "250.0", "200.0", "100.0", "80.0", "90.0", "70.0",
                                                     "20 %", "30 %", "1e+03", "1.25e-05", "1.23e+03", "5e-05",
                                                     "1.2 %"]]
    assert lines[3:] == ["  (predicted ms and bench busbw: the median of the newest 3 all-reduce benchmark runs in "
                         "this folder, per message size)",
                         "  MFU counts attention's full T x T scores (the causal half is not discounted), as nanoGPT "
                         "and PaLM count it: compare it with figures that do the same"]


def test_the_mfu_note_is_the_workloads_own_declaration_and_none_for_one_it_does_not_know(monkeypatch):
    """The note beside MFU is what the group's workload declares (WorkloadSpec.flops_note), once; a workload that
    declares none, or one this scalelab does not know (a result from another model), gets none."""
    import dataclasses

    from scalelab import workloads

    assert tables.step_table(_step_frame(model="mlp"), "pipe")[-1].startswith("  (predicted ms")
    assert tables.step_table(_step_frame(model="someone-elses"), "pipe")[-1].startswith("  (predicted ms")
    monkeypatch.setitem(workloads.REGISTRY, "mlp", dataclasses.replace(workloads.get("mlp"), flops_note="6 N D"))
    assert tables.step_table(pd.concat([_step_frame(model="mlp")] * 2), "pipe")[-1] == "  6 N D"


def test_without_an_mfu_the_step_table_says_why_even_for_a_frame_without_a_peak_note_column():
    """A group frame built without peak_note (no run recorded one) still ends on MFU's one-line reason."""
    lines = tables.step_table(_step_frame(mfu=float("nan")), "pipe")
    assert lines[-1] == "  MFU: — (no peak known for this hardware; give --peak_tflops to compute it)"
    noted = tables.step_table(_step_frame(mfu=float("nan"), peak_note="X is not in the table"), "pipe")
    assert noted[-1] == "  MFU: — (X is not in the table; give --peak_tflops to compute it)"


def test_how_each_workloads_flops_were_obtained_is_said_as_its_runs_recorded_it():
    """A workload without an analytic figure counts its FLOPs (train/flopcount.py): the report says so beside
    TFLOP/s and MFU, from the result (the report may not know the workload); without FLOPs, MFU's line says that
    and not "give --peak_tflops", which could not help."""
    counted = "counted (torch.utils.flop_counter, one step on a meta copy)"
    frame = pd.concat([_step_frame(model="cnn", flops_from=counted), _step_frame(model="cnn", flops_from=counted),
                       _step_frame(model="gpt", flops_from="analytic")])
    assert tables.step_table(frame, "pipe")[-2:] == [
        "  MFU counts attention's full T x T scores (the causal half is not discounted), as nanoGPT and PaLM count "
        "it: compare it with figures that do the same", f"  TFLOP/s and MFU of cnn: FLOPs per sample {counted}"]
    no_peak = tables.step_table(_step_frame(model="cnn", flops_from=counted, mfu=float("nan")), "pipe")
    assert no_peak[-2:] == ["  MFU: — (no peak known for this hardware; give --peak_tflops to compute it)",
                            f"  TFLOP/s and MFU of cnn: FLOPs per sample {counted}"]
    failed = "not counted (a meta step failed: RuntimeError)"
    none = tables.step_table(_step_frame(model="cnn", flops_from=failed, tflops_per_device=float("nan"),
                                         mfu=float("nan")), "pipe")
    assert none[-1] == f"  MFU: — (no FLOPs per sample: {failed})"
    old = tables.step_table(_step_frame(tflops_per_device=float("nan"), mfu=float("nan")), "pipe")
    assert old[-1] == "  MFU: — (no FLOPs per sample)"  # a result from before flops_from


def test_an_infinite_figure_prints_as_inf_in_every_column_of_the_step_table():
    figures = ("step_s", "compute_s", "allreduce_s", "allreduce_alone_s", "predicted_allreduce_s", "waited_s",
               "comm_share", "hidden_fraction", "grad_bytes", "ddp_busbw_GBps", "bench_busbw_GBps",
               "tflops_per_device", "mfu")
    row = _pipe(tables.step_table(_step_frame(**dict.fromkeys(figures, INF)), "pipe")[2])[1]
    assert row == ["2", "1", *["inf"] * 6, "inf %", "inf %", *["inf"] * 4, "inf %"]


def test_groups_whose_captions_read_alike_are_told_apart_by_what_differs():
    # the dry run: two groups captioned alike (a chapter's --max_steps 200 beside the sweep's 50)
    long = [make_result("l1", 1), make_result("l2", 2)]
    short = [make_result("s1", 1), make_result("s2", 2)]
    for r in long:
        r["workload"]["max_steps"] = 200
    runs, scaling = _scaling(long + short)
    titles = [line for line in tables.render(runs, scaling).splitlines() if line.startswith("Group ")]
    assert len(titles) == 2 and titles[0].endswith(" · max_steps 200") and titles[1].endswith(" · max_steps none")
    assert titles[0].split(" · max_steps")[0][9:] == titles[1].split(" · max_steps")[0][9:]  # alike but for it
    single = [line for line in tables.render(*_scaling(short)).splitlines() if line.startswith("Group ")]
    assert "max_steps" not in single[0]  # one group: nothing to tell apart


def test_cpu_groups_that_differ_only_in_the_cpu_model_are_told_apart_by_it():
    """A CPU group's caption names its cores, not the CPU: rehearsals on two machines read alike, and only the
    hardware in the group key (the device's model name) tells the two groups' titles apart."""
    epyc, xeon = [make_result("e1", 1), make_result("e2", 2)], [make_result("x1", 1), make_result("x2", 2)]
    for found, cpu in ((epyc, "AMD EPYC 7742 64-Core Processor"), (xeon, "Intel(R) Xeon(R) Gold 6248 CPU")):
        for r in found:
            r["launch"]["device_names"] = [cpu]
    titles = [line for line in tables.render(*_scaling(epyc + xeon)).splitlines() if line.startswith("Group ")]
    assert len(titles) == 2
    assert titles[0].endswith(": 1 device = 1 core · device AMD EPYC 7742 64-Core Processor"), titles[0]
    assert titles[1].endswith(": 1 device = 1 core · device Intel(R) Xeon(R) Gold 6248 CPU"), titles[1]


def test_the_default_report_fits_a_terminal_and_keeps_every_warning():
    """The dry run: after an hour the report was 173 lines up to 707 characters wide. By default a group is its
    scaling table and what limits it (folded at the terminal's width); --details adds the wide per-run and step
    tables."""
    found = [make_result("a1", 1), make_result("a2", 2, samples_per_s=150), make_result("e2", 2, nodes=2)]
    found[1]["launch"]["oversubscribed"] = "oversubscribed: ranks 0 and 1 shared core 0"
    found[2]["launch"]["link"] = {"gbit": 0.2, "emulated": True}
    for r in found:
        _with_comm(r, 0.01, 0.004, 0.004, 0.014)
    runs, scaling = _scaling(found)
    short = tables.render(runs, scaling, details=False, width=120)
    assert max(map(len, short.splitlines())) <= 120, short
    assert "run id" not in short and "Where the step goes" not in short  # --details' tables
    assert "  ! a2: oversubscribed: ranks 0 and 1 shared core 0; its speedup measures ranks sharing cores, not " \
           "scaling" in short  # the warning stays, whatever the table it came with
    assert "Limited by" in short  # what limits each configuration stays
    full = tables.render(runs, scaling)
    assert "run id" in full and "Where the step goes" in full and max(map(len, full.splitlines())) > 120
    assert tables.render(runs, scaling, details=False) == tables.render(runs, scaling, details=False, width=0)
    assert max(map(len, tables.render(runs, scaling, details=False).splitlines())) > 120  # a pipe: whole lines
    assert tables.wrap("  " + "word " * 40, 50).splitlines()[1].startswith("    word")  # under the first word


def test_the_report_folds_at_the_terminals_width_at_most_120_and_never_in_a_pipe(monkeypatch):
    """A terminal of 80 columns folds at 80, a wide one at 120; a pipe (a job's log, grep) keeps lines whole; a
    terminal whose size cannot be read folds at 120."""
    import io
    import os
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setenv("COLUMNS", "80")
    assert tables.terminal_width() == 0
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert tables.terminal_width() == 80
    monkeypatch.setenv("COLUMNS", "200")
    assert tables.terminal_width() == 120

    def unreadable(fd=None):
        raise OSError("not a terminal")

    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(os, "get_terminal_size", unreadable)
    assert tables.terminal_width() == 120


def test_groups_print_in_the_order_their_runs_came_each_alike_pair_told_apart_and_fsdp_in_words():
    """An FSDP group first (its caption like no other), then two MLP groups alike but for two settings: every
    group where its first run stands, the alike ones each with both settings; the FSDP group, without a probe
    step, says what limits each configuration in words (details or not)."""
    f1, f2 = make_result("f1", 1, model="gpt"), make_result("f2", 2, samples_per_s=180, model="gpt")
    for r in (f1, f2):
        r["workload"]["strategy"] = "fsdp"
    alike = [make_result("a1", 1), make_result("a2", 2)]
    for r in alike:
        r["workload"].update(max_steps=200, seq_len=64)
    runs, scaling = _scaling([f1, f2, make_result("m1", 1), make_result("m2", 2, samples_per_s=150), *alike])
    assert list(runs["group"].drop_duplicates()) != sorted(runs["group"].unique())  # not the keys' own order
    for details in (True, False):
        lines = tables.render(runs, scaling, details=details).splitlines()
        titles = [line for line in lines if line.startswith("Group ")]
        assert [t.split(" · ")[0] for t in titles] == ["Group A: gpt (1K params)", "Group B: mlp (1K params)",
                                                       "Group C: mlp (1K params)"]
        assert "max_steps" not in titles[0]
        assert titles[1].endswith(" · max_steps none, seq_len none") and titles[2].endswith(
            " · max_steps 200, seq_len 64")
        words = [line for line in lines if line.startswith("  2 devices on 1 node")]
        assert len(words) == 1 and "FSDP's compute alone is not isolated" in words[0]


def test_a_plain_line_folds_at_words_never_inside_one_and_a_line_that_fits_stays_as_it_is():
    assert tables.wrap("a  b  ", 6) == "a  b  "  # exactly the width, a table row's padding kept
    assert tables.wrap("  aaaa bbbb-cccc dd", 12) == "  aaaa\n    bbbb-cccc\n    dd"  # under its first word, +2
    assert tables.wrap("x /scratch/a/very/long/path", 10) == "x\n  /scratch/a/very/long/path"  # a path whole
    assert tables.wrap("x " * 40, 0) == "x " * 40 and tables.wrap("a\nb c d", 3) == "a\nb c d"


def test_the_scaling_table_has_an_mfu_column_where_a_configuration_has_one():
    runs, scaling = _scaling([make_result("m1", 1), make_result("m2", 2, samples_per_s=150)])
    table = _pipe(tables.scaling_table(scaling.assign(mfu=[0.1234, float("nan")]), "pipe")[2])
    assert table[0][-1] == "MFU" and [row[-1] for row in table[1:]] == ["12.3 %", "—"]
    assert "MFU" not in _pipe(tables.scaling_table(scaling.assign(mfu=float("nan")), "pipe")[2])[0]
    assert _pipe(tables.scaling_table(scaling.assign(mfu=float("inf")), "pipe")[2])[1][-1] == "inf %"  # as numbers
