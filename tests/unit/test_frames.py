"""The report's arithmetic and grouping, on constructed results (real runs are in tests/scenarios/test_ddp_cpu.py)."""

import csv as csv_module
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from helpers import SRC, make_result, run_script
from scalelab import results
from scalelab.report import tables
from scalelab.report.columns import link_label
from scalelab.report.frames import identity_notes, runs_frame, scaling_frame


def frames(found):
    runs = runs_frame(found)
    return runs, scaling_frame(runs)


def test_speedup_efficiency_and_repeats():
    found = [make_result("a1", 1, samples_per_s=100), make_result("a1b", 1, samples_per_s=150),
             make_result("a1c", 1, samples_per_s=110),  # three repeats at 1 device: median 110 (mean 120)
             make_result("a4", 4, samples_per_s=330), make_result("a8", 8, nodes=2, samples_per_s=528)]
    _, scaling = frames(found)
    rows = {r.world_size: r for r in scaling.itertuples()}
    assert rows[1].runs == 3 and rows[1].throughput == 110
    assert (rows[1].throughput_min, rows[1].throughput_max) == (100, 150)
    assert rows[4].speedup == pytest.approx(3.0) and rows[4].efficiency == pytest.approx(0.75)
    assert rows[8].speedup == pytest.approx(4.8) and rows[8].efficiency == pytest.approx(0.6)
    assert rows[8].throughput_per_device == pytest.approx(66)


def test_repeats_are_combined_by_their_median_in_every_figure_the_tables_show():
    """Three repeats, each figure skewed by one slow or fast run: the median (the middle run), never the mean."""
    found = []
    for i, (sps, step, waited, tflops) in enumerate([(100, 0.010, 0.002, 1.0), (110, 0.030, 0.004, 2.0),
                                                    (200, 0.011, 0.010, 9.0)]):
        r = make_result(f"rep{i}", 2, samples_per_s=sps)
        r["timing"].update(step_s={"median": step}, tflops_per_device=tflops, peak_tflops=10.0,
                           mfu=tflops / 10.0, comm={"waited_s": waited, "compute_s": 0.008})
        found.append(r)
    runs, scaling = frames(found)
    (row,) = scaling.itertuples()
    assert row.runs == 3 and row.throughput == 110 and row.samples_per_s == 110  # mean 136.7
    assert row.step_s == pytest.approx(0.011)  # mean 17
    assert row.train_time_s == pytest.approx(1000 / 110)  # make_result: 1000 samples
    assert row.waited_s == pytest.approx(0.004) and row.tflops_per_device == 2.0 and row.mfu == pytest.approx(0.2)
    assert "110 [100–200]" in tables.render(runs, scaling)


def test_groups_split_by_workload_and_baseline_is_smallest():
    found = [make_result("m2", 2, samples_per_s=200), make_result("m4", 4, samples_per_s=300),
             make_result("b1", 1, samples_per_s=50, batch_size=32)]
    _, scaling = frames(found)
    assert scaling["group"].nunique() == 2
    g = scaling[scaling["world_size"] != 1]
    assert list(g["baseline_world_size"]) == [2, 2]
    assert g.set_index("world_size").loc[4, "efficiency"] == pytest.approx(300 / 200 / 2)


def test_failed_runs_never_enter_a_speedup():
    found = [make_result("ok1", 1, samples_per_s=100), make_result("bad2", 2, samples_per_s=1e9, status="failed")]
    runs, scaling = frames(found)
    assert list(scaling["world_size"]) == [1]
    text = tables.render(runs, scaling)
    assert "did not complete" in text and "bad2" in text


def test_benchmark_cli_prints_tables_and_csv(tmp_path):
    for r in (make_result("x1", 1, samples_per_s=100), make_result("x2", 2, samples_per_s=180)):
        results.write(str(tmp_path / "out"), r)
    (tmp_path / "out" / "junk").mkdir()
    (tmp_path / "out" / "junk" / "result.json").write_text("{trunc")
    csv = tmp_path / "scaling.csv"
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--save_csv", csv, "--markdown")
    assert proc.returncode == 0, proc.stderr
    assert "| 2 " in proc.stdout and "1.80×" in proc.stdout and "90 %" in proc.stdout
    assert proc.stderr.count("warning: skipped") == 1 and "not valid JSON" in proc.stderr
    table = {int(row["world_size"]): row for row in csv_module.DictReader(csv.open())}
    assert float(table[2]["speedup"]) == pytest.approx(1.8) and float(table[2]["efficiency"]) == pytest.approx(0.9)
    assert float(table[1]["speedup"]) == 1.0 and float(table[2]["throughput"]) == 180


def test_benchmark_cli_errors_are_one_line(tmp_path):
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "missing")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is not a folder" in proc.stderr
    proc = run_script("benchmark.py", "--output_dir", tmp_path)
    assert proc.returncode == 1 and "No training results" in proc.stdout


@pytest.mark.parametrize("view", [[], ["--ranks"], ["--forecast"]])
def test_a_folder_that_is_not_one_is_named_for_what_it_is_by_every_view(tmp_path, view):
    """A new user gave README.md and was told to run make demo first; --ranks had its own check, unchanged."""
    from scalelab.errors import UsageError
    from scalelab.report import cli

    (tmp_path / "README.md").write_text("# not results\n")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "nowhere", tmp_path / "broken")
    for name, said in (("README.md", "is a file, not a folder: give the folder the result.json files are in"),
                       ("fifo", "is a device, a FIFO or a socket, not a folder: give the folder"),
                       ("broken", "is a symlink to nothing, not a folder: give the folder"),
                       ("missing", "is not a folder (run `make demo` or `python src/train.py` first)")):
        with pytest.raises(UsageError) as err:
            cli.main(["--output_dir", str(tmp_path / name), *view])
        assert str(err.value).startswith(f"--output_dir {tmp_path / name} {said}"), err.value


def test_requeued_job_supersedes_its_first_attempt():
    first = make_result("try0", 4, samples_per_s=50, status="timeout")
    second = make_result("try1", 4, samples_per_s=300)
    other_step = make_result("step1", 4, samples_per_s=310)
    for r, restarts, step in ((first, 0, "0"), (second, 1, "0"), (other_step, 0, "1")):
        r["slurm"] = {"job_id": "77", "array_job_id": None, "array_task_id": None, "step_id": step,
                      "restart_count": restarts}
    runs, _ = frames([first, second, other_step, make_result("base", 1, samples_per_s=100)])
    assert sorted(runs["run_id"]) == ["base", "step1", "try1"]  # the requeued step counts once, at its newest


def test_the_report_counts_a_repeated_job_ids_runs_and_names_each_superseded_attempt(tmp_path):
    # the dry run: 38 result files, "32 run(s)", a whole 8-device row gone without a word
    def job(run_id, world, job_id, restarts, created, status="completed"):
        r = make_result(run_id, world, samples_per_s=100 * world, status=status)
        r["created"] = created
        r["slurm"] = {"cluster": "scalelab", "job_id": job_id, "step_id": "0", "restart_count": restarts}
        return r
    for r in (job("old8", 8, "12", 0, "2026-11-20T10:00:00+00:00"),
              job("new1", 1, "12", 0, "2026-11-26T10:00:00+00:00"),
              job("cut4", 4, "13", 0, "2026-11-26T10:05:00+00:00", "timeout"),
              job("again4", 4, "13", 1, "2026-11-26T10:09:00+00:00")):
        results.write(str(tmp_path), r)
    proc = run_script("benchmark.py", "--output_dir", tmp_path, "--details")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.split("\n\n", 1)[0].splitlines()  # one line each in a pipe (a terminal folds them)
    assert head[0].startswith("scalelab report: 3 run(s) in ")
    assert head[1] == ("note: 1 result(s) superseded by a later attempt of the same SLURM job (one row each): job 13 "
                       "on cluster scalelab attempt 0 (cut4) by attempt 1 (again4)")
    assert head[2].startswith("note: job 12 on cluster scalelab stands for 2 different runs here") \
        and head[2].endswith("each is kept: old8, new1")
    assert re.search(r"^old8 +8 ", proc.stdout, re.M)  # its row is in the runs table


@pytest.mark.parametrize("script, args", [("benchmark.py", ["--output_dir", "{out}"]),
                                          ("predict.py", ["--params", "1B", "--compute_s", "0.1"])])
def test_a_reader_that_leaves_early_ends_the_report_quietly(tmp_path, script, args):
    """`benchmark.py ... | head -8`: the pipe is closed before the report is written (the worst case of head)."""
    for r in (make_result("x1", 1, samples_per_s=100), make_result("x2", 2, samples_per_s=180)):
        results.write(str(tmp_path / "out"), r)
    cmd = [sys.executable, str(SRC / script), *(a.format(out=tmp_path / "out") for a in args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ,
                            "PYTHONUNBUFFERED": "1"})
    proc.stdout.close()  # the reader is gone: every write of the report meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""  # as `yes | head` under pipefail: cut, not failed, no trace
    piped = subprocess.run(["bash", "-c", " ".join(map(str, cmd)) + " | head -3"], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 3 and piped.stderr == ""


def _everything():
    """One 2-node GPT result with every field the runs frame reads set to a value of its own."""
    r = make_result("full", 4, nodes=2, samples_per_s=80.0, model="gpt", tokens_per_sample=128,
                    accumulate_grad_batches=4, comm_hook="bf16", bucket_cap_mb=50.0, static_graph=True)
    r["workload"].update(describe="gpt tiny", params=3_300_000, global_batch=256, precision="bf16-mixed",
                         compile=True)
    r["launch"].update(launcher="slurm", devices=2, accelerator="gpu", device_names=["NVIDIA H100", "x"],
                       backend="nccl", threads=8, oversubscribed="4 ranks on 2 cores",
                       link={"gbit": 0.2, "emulated": True, "latency_ms": 5})
    r["timing"].update(tokens_per_s=10240.0, train_time_s=12.5, step_s={"median": 0.0421}, had_cpu=[0.97, 0.5],
                       epoch_times_s=[3.0, 1.0, 2.0, 9.0], first_step_s=4.5, whole_run_s=20.25,
                       tflops_per_device=11.5, peak_tflops=989.0, mfu=0.0116, flops_from="counted (x)",
                       comm={"compute_s": 0.03, "synced_s": 0.031, "allreduce_s": 0.012, "allreduce_alone_s": 0.01,
                             "waited_s": 0.008, "comm_share": 0.19, "hidden_fraction": 0.33, "grad_bytes": 13_200_000,
                             "buckets": 2, "collectives_s": 0.011, "ddp_busbw_GBps": 1.1, "waited_in_step": 1,
                             "slowed_s": 0.004,
                             "bucket_bytes": [6_600_000, 6_600_000],
                             "wire_bytes": [3_300_000, 3_300_000]})
    r["metrics"] = {"train_loss": 2.25, "val_loss": 2.5, "val_acc": 0.4}
    r["timing"]["devices"] = {"source": "nvml", "util_min": 0.93, "util_max": 0.98, "energy_per_step_J": 240.0,
                              "energy_per_1k_samples_J": 937.5, "note": "", "cores_busy_min": 0.5,
                              "cores_busy_max": 1.0}
    r["slurm"] = {"job_id": "77", "restart_count": 1, "exclusive": True}
    r["memory"] = {"estimate_bytes": 2.5e9, "peak_allocated_bytes": 2.25e9}
    r["ranks"] = [{"losses": [4.0, 3.0]}, {"losses": [2.0, 1.0, 9.0]}, "not a rank"]
    r["fingerprint"] = {"optimizer": "fused", "matmul_dtypes": ["bfloat16"],  # the text's keys come sorted
                        "wire": {"allreduce_": {"bytes": 6_600_000, "calls": 2}}}
    return r


def test_the_runs_frame_carries_every_field_of_a_result_under_its_own_name():
    (row,) = runs_frame([_everything()]).to_dict("records")
    assert {k: row[k] for k in row if k not in ("group", "created")} == {
        "run_id": "full", "model": "gpt", "describe": "gpt tiny", "compile": True, "params": 3_300_000,
        "scaling": "weak",
        "batch_per_device": 64, "global_batch": 256, "precision": "bf16-mixed", "world_size": 4, "num_nodes": 2,
        "devices": 2, "launcher": "slurm", "accelerator": "gpu", "device": "NVIDIA H100", "backend": "nccl",
        "link": "emulated 200 Mbit/s +5 ms", "link_gbit": 0.2, "threads": 8, "oversubscribed": "4 ranks on 2 cores",
        "had_cpu": 0.5,
        "starved": "rank 1 had a core 50 % of the time it was ready to run: other work shared its cores",
        "status": "completed", "error": None, "train_time_s": 12.5, "step_s": 0.0421, "epoch_s": 2.5,
        "unit": "tokens/s", "samples_per_s": 80.0, "tokens_per_s": 10240.0, "first_step_s": 4.5, "whole_run_s": 20.25,
        "train_loss": 2.25, "val_loss": 2.5, "val_acc": 0.4, "job_id": "77", "restart_count": 1,
        "compute_s": 0.03, "synced_s": 0.031, "allreduce_s": 0.012, "allreduce_alone_s": 0.01, "waited_s": 0.008,
        "slowed_s": 0.004, "comm_share": 0.19, "hidden_fraction": 0.33, "grad_bytes": 13_200_000, "buckets": 2,
        "collectives_s": 0.011,
        "bucket_bytes": (6_600_000, 6_600_000), "ddp_busbw_GBps": 1.1, "waited_in_step": 1, "tflops_per_device": 11.5,
        "peak_tflops": 989.0, "mfu": 0.0116, "peak_note": None, "flops_from": "counted (x)",
        "peak_memory_bytes": 2.25e9,
        "memory_estimate_bytes": 2.5e9, "accumulate_grad_batches": 4, "comm_hook": "bf16",
        "bucket_cap_mb": 50.0, "static_graph": True, "strategy": "ddp", "wire_bytes": (3_300_000, 3_300_000),
        "samples_per_batch": 256,
        "util_min": 0.93, "util_max": 0.98, "cores_busy_min": 0.5, "cores_busy_max": 1.0, "energy_per_step_J": 240.0,
        "energy_per_1k_samples_J": 937.5, "energy_note": "",
        "loss_curve": (3.0, 2.0),  # the ranks' losses averaged per batch, as long as the shortest rank's
        "exclusive": True, "wire": (0, 0, 0, 0, 6_600_000, 2), "job_differs": "",  # sharding.Wire's fields
        "fingerprint": '{"matmul_dtypes": ["bfloat16"], "optimizer": "fused", '
                       '"wire": {"allreduce_": {"bytes": 6600000, "calls": 2}}}'}
    assert row["step_s"] == pytest.approx(0.0421)


def test_a_result_without_the_optional_fields_reads_as_missing_and_the_levers_as_their_defaults():
    r = make_result("bare", 1)
    for key in ("step_s", "epoch_times_s"):
        del r["timing"][key]
    del r["metrics"]
    (row,) = runs_frame([r]).to_dict("records")
    assert pd.isna(row["epoch_s"]) and pd.isna(row["had_cpu"]) and row["starved"] == "" and row["link"] == ""
    assert row["oversubscribed"] == "" and row["restart_count"] == 0 and row["job_id"] is None
    assert pd.isna(row["step_s"]) and pd.isna(row["train_loss"]) and row["loss_curve"] is None
    assert row["bucket_bytes"] is None and row["wire_bytes"] is None and row["device"] == "cpu"
    assert (row["accumulate_grad_batches"], row["comm_hook"], row["bucket_cap_mb"], row["static_graph"]) == (
        1, "none", 25.0, False)
    assert link_label({"gbit": 2, "emulated": False}) == "2 Gbit/s" and link_label({"gbit": "x"}) == ""
    assert link_label(None) == "" and link_label({"gbit": 1.5, "latency_ms": "5"}) == "1.5 Gbit/s"


def test_a_result_without_a_label_device_name_or_batch_and_with_text_for_a_number():
    """describe falls back to the model's name, the device to "?", the samples per batch to 0 (unknown: no loss
    is read off the curve for it); a number written as text (an older or hand-edited result) reads as missing."""
    r = make_result("bare", 2, params="3.3M")
    del r["workload"]["describe"], r["workload"]["batch_per_device"], r["launch"]["device_names"]
    r["timing"]["train_time_s"] = "12 s"
    (row,) = runs_frame([r]).to_dict("records")
    assert (row["describe"], row["device"], row["samples_per_batch"]) == ("mlp", "?", 0)
    assert pd.isna(row["params"]) and pd.isna(row["train_time_s"])


def test_the_scaling_frame_is_sorted_by_configuration_and_carries_the_repeats_epoch_batch_and_backend():
    """Rows in configuration order whatever order the results were found in (scaling.csv keeps it)."""
    found = [make_result("f4", 4), make_result("f1", 1), make_result("f1b", 1), make_result("f1c", 1),
             make_result("f2", 2)]
    for r, epochs in zip(found, ([4.0], [1.0, 3.0], [2.0, 2.5, 9.0], [5.0], [1.5])):
        r["timing"]["epoch_times_s"] = epochs
        r["launch"]["backend"] = "gloo"
    _, scaling = frames(found)
    assert list(scaling["world_size"]) == [1, 2, 4] and list(scaling["global_batch"]) == [64, 128, 256]
    # each run's median epoch (2, 2.5, 5 at 1 device), then the median of those
    assert list(scaling["epoch_s"]) == [2.5, 1.5, 4.0] and list(scaling["backend"]) == ["gloo"] * 3


def test_the_baseline_is_the_fewest_devices_on_a_real_network_and_repeats_keep_the_worst_flags():
    real = [make_result("r2", 2, nodes=2, samples_per_s=200), make_result("r2b", 2, nodes=2, samples_per_s=220)]
    real[0]["launch"].update(oversubscribed="2 ranks on 1 core", threads=2)
    real[0]["timing"]["had_cpu"] = [0.5, 0.95]
    real[1]["timing"].update(had_cpu=[0.8], step_s={"median": 0.02})
    real[1]["timing"]["comm"] = {"compute_s": 0.015}
    real[0]["timing"]["comm"] = {"compute_s": 0.017}
    emulated = make_result("e2", 2, nodes=2, samples_per_s=100)
    emulated["launch"]["link"] = {"gbit": 1, "emulated": True}
    four = make_result("f4", 4, nodes=2, samples_per_s=300)
    for r in (real[1], emulated, four):
        r["launch"]["threads"] = 2  # one device size throughout: another is another group (results.group_key)
    gpu = make_result("g1", 1)
    gpu["launch"].update(accelerator="gpu", device_names=["NVIDIA H100"])
    _, scaling = frames([*real, emulated, four, gpu])
    cpu = scaling[scaling["accelerator"] == "cpu"].set_index("link")
    assert list(cpu["baseline_world_size"]) == [2, 2, 2] and cpu.loc["emulated 1 Gbit/s", "speedup"] == 100 / 210
    two = scaling[(scaling["world_size"] == 2) & (scaling["link"] == "")].iloc[0]
    assert (two.runs, two.throughput, two.oversubscribed, two.had_cpu, two.threads) == (
        2, 210, "2 ranks on 1 core", 0.5, 2)  # any run's warning, the least share of a core
    assert two.starved == ("rank 0 had a core 50 % of the time it was ready to run: other work shared its cores")
    assert (two.baseline_step_s, two.baseline_compute_s) == (pytest.approx(0.015), pytest.approx(0.016))  # medians
    assert list(scaling.sort_values("world_size")["hardware"]) == ["NVIDIA H100", "CPU (gloo)", "CPU (gloo)",
                                                                 "CPU (gloo)"]
    assert frames_letters(28)[26:] == ["27", "28"]  # after Z: numbers


def test_repeats_keep_the_words_of_the_most_starved_run_not_the_largest_string():
    """Three repeats: rank 1 at 60 %, rank 10 at 5 %, rank 2 at 70 % of its ready time on a core. As text
    "rank 2 ..." sorts last; the worst is the 5 % one, and that run's words are what the row says."""
    found = [make_result(f"s{i}", 12) for i in range(4)]
    for r, shares in zip(found, ([1.0, 0.6], [1.0] * 10 + [0.05, 1.0], [1.0, 1.0, 0.7], [0.95])):
        r["timing"]["had_cpu"] = shares
    _, scaling = frames(found)
    (row,) = scaling.itertuples()
    assert row.had_cpu == 0.05
    assert row.starved == "rank 10 had a core 5 % of the time it was ready to run: other work shared its cores"
    _, quiet = frames(found[3:])  # one repeat, no rank below 90 %: no words
    assert quiet.iloc[0]["starved"] == ""
    unmeasured = make_result("u", 12)  # no had_cpu (an older scalelab): beside a starved repeat, and alone
    _, scaling = frames([unmeasured, found[1]])
    assert scaling.iloc[0]["starved"] == row.starved
    _, alone = frames([unmeasured])
    assert alone.iloc[0]["starved"] == "" and pd.isna(alone.iloc[0]["had_cpu"])


def frames_letters(n):
    from scalelab.report.frames import group_letters

    letters = group_letters([f"g{i}" for i in range(n)] + ["g0"])
    return [letters[f"g{i}"] for i in range(n)]


def test_repeats_had_their_nodes_alone_only_where_each_did():
    from scalelab.report.columns import all_or_none

    assert all_or_none(pd.Series([True, True])) is True
    assert all_or_none(pd.Series([True, False, None])) is False  # one shared: the configuration did not
    assert all_or_none(pd.Series([True, None])) is None and all_or_none(pd.Series([None, None])) is None
    assert all_or_none(pd.Series([], dtype=object)) is None


def test_the_identity_notes_name_each_superseded_attempt_and_each_repeated_id():
    def job(run_id, job_id, restarts, created, status="completed", cluster="alps", task=None, kind="training"):
        r = make_result(run_id, 2, status=status)
        r.update(created=created, kind=kind)
        r["slurm"] = {"cluster": cluster, "job_id": job_id, "array_job_id": "40" if task else None,
                      "array_task_id": task, "step_id": "0", "restart_count": restarts}
        return r
    cut, again = job("cut", "7", 0, "2026-01-01T10", "preempted"), job("again", "7", 2, "2026-01-01T11")
    one, two = job("one", "9", 0, "2026-01-02T10", task="3"), job("two", "9", 0, "2026-01-01T09", task="3")
    plain = job("plain", "5", 0, "2026-01-01T08", cluster=None)
    kept, superseded = results.latest_attempts([cut, again, one, two, plain])
    assert identity_notes(kept, superseded) == [
        "1 result(s) superseded by a later attempt of the same SLURM job (one row each): job 7 on cluster alps "
        "attempt 0 (cut) by attempt 2 (again)",
        "job 40_3 on cluster alps stands for 2 different runs here (the id repeated: a controller restarted without "
        "its state, or folders of two clusters merged); each is kept: two, one"]  # in the order they ran
    bench = job("bench", "7", 0, "2026-01-01T09", "preempted", kind="allreduce")
    assert identity_notes([plain], [(bench, cut)]) == []  # a benchmark's attempts: no run row to name
    assert identity_notes([plain, job("p2", "5", 0, "2026-01-01T09", cluster=None)], [])[0].startswith(
        "job 5 stands for 2 different runs here")  # no cluster recorded (an older scalelab): none named
    # two superseded attempts, each named; two benchmarks of one job id are no repeated run; an undated result of
    # a repeated id ran first (written before dates were recorded)
    cut2, again2 = job("cut2", "8", 0, "2026-01-01T10", "preempted"), job("again2", "8", 1, "2026-01-01T12")
    assert identity_notes([again, again2], [(cut, again), (cut2, again2)]) == [
        "2 result(s) superseded by a later attempt of the same SLURM job (one row each): job 7 on cluster alps "
        "attempt 0 (cut) by attempt 2 (again); job 8 on cluster alps attempt 0 (cut2) by attempt 1 (again2)"]
    benches = [job(f"b{i}", "6", 0, f"2026-01-01T0{i}", kind="allreduce") for i in (1, 2)]
    assert identity_notes(benches, []) == []
    undated = job("undated", "5", 0, None, cluster=None)
    assert identity_notes([plain, undated], [])[0].endswith("each is kept: undated, plain")
