"""benchmark.py --plot / --export / --compare: the files a workshop pastes into slides, read back."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from matplotlib.container import BarContainer

from helpers import ROWS, _bench, _with_comm, make_result, run_script
from scalelab import results
from scalelab.report import bench_plot, explain, export, forecast_view, frames, plots, tables


def _folder(path, two_device_rate=150.0, with_bench=True, extra=()):
    found = [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("a2", 2, samples_per_s=two_device_rate), 0.1, 0.008, 0.004, 0.104),
             _with_comm(make_result("t1", 1, samples_per_s=40, model="gpt"), 0.2, 0.0, 0.0, 0.2),
             _with_comm(make_result("t2", 2, samples_per_s=70, model="gpt"), 0.2, 0.01, 0.005, 0.21),
             *extra]
    if with_bench:
        found.append(_bench(2, ROWS))
    for r in found:
        results.write(str(path), r)
    return path


def test_plots_are_real_pictures_of_the_report(tmp_path):
    out = _folder(tmp_path / "out")
    proc = run_script("benchmark.py", "--output_dir", out, "--plot", tmp_path / "plots")
    assert proc.returncode == 0, proc.stderr
    names = ["speedup.png", "efficiency.png", "throughput_per_device.png", "allreduce_busbw.png"]
    for name in names:
        path = tmp_path / "plots" / name
        assert f"written: {path}" in proc.stdout
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = image.imread(path)[..., :3]
        colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
        assert pixels.shape[0] > 400 and pixels.shape[1] > 600, name
        assert len(colours) > 100 and pixels.std() > 0.05, f"{name} looks blank"


def test_speedup_figure_draws_measured_ideal_and_predicted(tmp_path):
    found, _ = results.scan(str(_folder(tmp_path / "out")))
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found))
    fig = plots.speedup_figure(scaling)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    measured = next(v for k, v in lines.items() if k.startswith("A:") and k.endswith("measured"))
    assert list(measured.get_ydata()) == pytest.approx([1.0, 1.5])
    assert list(lines["ideal (linear)"].get_ydata()) == [1.0, 2.0]
    predicted = next(v for k, v in lines.items() if k.startswith("A: predicted"))
    a2 = scaling[(scaling["model"] == "mlp") & (scaling["world_size"] == 2)].iloc[0]
    assert predicted.get_ydata()[-1] == pytest.approx(2 * a2.predicted_efficiency_no_overlap)
    assert "Speedup" in ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    busbw = bench_plot.busbw_figure(explain.bench_frame(found)).axes[0]
    assert busbw.get_xscale() == "log"
    assert list(busbw.get_lines()[0].get_xdata()) == [r["bytes"] for r in ROWS]


def test_no_benchmark_means_no_busbw_plot(tmp_path):
    out = _folder(tmp_path / "out", with_bench=False)
    proc = run_script("benchmark.py", "--output_dir", out, "--plot", tmp_path / "plots")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "efficiency.png", "speedup.png", "throughput_per_device.png"]


def test_export_writes_every_table_and_a_strict_json_summary(tmp_path):
    out = _folder(tmp_path / "out")
    proc = run_script("benchmark.py", "--output_dir", out, "--export", tmp_path / "ex")
    assert proc.returncode == 0, proc.stderr
    ex = tmp_path / "ex"
    assert {p.name for p in ex.iterdir()} == {"runs.csv", "scaling.csv", "step_breakdown.csv", "allreduce.csv",
                                              "report.md", "summary.json"}
    scaling = pd.read_csv(ex / "scaling.csv")
    row = scaling[(scaling["describe"] == "mlp") & (scaling["world_size"] == 2)].iloc[0]
    assert row["speedup"] == pytest.approx(1.5) and row["efficiency"] == pytest.approx(0.75)
    assert row["unit"] == "samples/s" and row["letter"] in ("A", "B")
    step = pd.read_csv(ex / "step_breakdown.csv")
    assert sorted(step.loc[step["world_size"] == 2, "waited_s"]) == pytest.approx([0.004, 0.005])
    assert len(pd.read_csv(ex / "runs.csv")) == 4
    assert pd.read_csv(ex / "allreduce.csv")["bytes"].tolist() == [r["bytes"] for r in ROWS]
    md = (ex / "report.md").read_text()
    assert "| 2 " in md and "Where the step goes" in md and "All-reduce benchmark" in md

    def no_nan(text):
        raise AssertionError(f"{text} in summary.json: not JSON")

    summary = json.loads((ex / "summary.json").read_text(), parse_constant=no_nan)
    assert summary == results.load_summary(str(ex / "summary.json"))
    assert summary["schema"] == results.SUMMARY_SCHEMA and len(summary["configurations"]) == 4
    two = next(c for c in summary["configurations"] if c["workload"]["model"] == "mlp" and c["world_size"] == 2)
    assert two["efficiency"] == pytest.approx(0.75) and two["limiting"].startswith("2 devices on 1 node")


def test_compare_puts_two_folders_side_by_side(tmp_path):
    a = _folder(tmp_path / "a", two_device_rate=150)
    b = _folder(tmp_path / "b", two_device_rate=180, extra=[make_result("a4", 4, samples_per_s=300)])
    proc = run_script("benchmark.py", "--compare", a, b, "--export", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stderr
    mlp = proc.stdout.split("mlp · weak scaling")[1].split("\n\n")[0]
    two = next(line for line in mlp.splitlines() if line.startswith("2 "))
    assert "150" in two and "180" in two and "1.20×" in two
    four = next(line for line in mlp.splitlines() if line.startswith("4 "))
    assert "—" in four and "one side only" in mlp  # only B ran 4 devices: shown, no ratio
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")  # sorted by workload: gpt before mlp
    assert table.loc[table["world_size"] == 2, "ratio"].tolist() == pytest.approx([70 / 70, 1.2])

    # a summary.json travels between sites and stands in for its folder
    run_script("benchmark.py", "--output_dir", b, "--export", tmp_path / "bex")
    again = run_script("benchmark.py", "--compare", a, tmp_path / "bex" / "summary.json")
    assert again.returncode == 0 and "1.20×" in again.stdout
    # one from an older scalelab, which wrote a workload field not recorded as null: the same configurations
    old = json.loads((tmp_path / "bex" / "summary.json").read_text())
    for c in old["configurations"]:
        c["workload"].update(num_samples=None, max_epochs=None)
    (tmp_path / "old.json").write_text(json.dumps(old))
    older = run_script("benchmark.py", "--compare", a, tmp_path / "old.json")
    assert older.returncode == 0 and "1.20×" in older.stdout, older.stdout


@pytest.mark.parametrize("case", ["missing", "foreign", "disjoint"])
def test_compare_errors_are_one_line(tmp_path, case):
    a = _folder(tmp_path / "a")
    other = {"missing": tmp_path / "nope",
             "foreign": tmp_path / "x.json",
             "disjoint": _folder(tmp_path / "d", extra=(), with_bench=False)}[case]
    (tmp_path / "x.json").write_text('{"schema": "something.else"}')
    if case == "disjoint":  # same models, another batch size: not the same workload anywhere
        for p in other.rglob("result.json"):
            data = json.loads(p.read_text())
            data["workload"]["batch_size"] = 7
            p.write_text(json.dumps(data))
    proc = run_script("benchmark.py", "--compare", a, other)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("benchmark.py: error: --compare") and "Traceback" not in proc.stderr
    says = {"missing": f"--compare {other}: no such folder or summary.json",
            "foreign": f'--compare {other}: not a scalelab report summary (no "schema": "scalelab.report_summary")',
            "disjoint": "--compare: no configuration ran the same workload at the same devices × nodes in"}[case]
    assert says in proc.stderr, proc.stderr


def test_plot_into_an_unwritable_place_fails_before_any_work(tmp_path):
    out = _folder(tmp_path / "out")
    (tmp_path / "file").write_text("x")
    proc = run_script("benchmark.py", "--output_dir", out, "--plot", tmp_path / "file")
    expected = f"benchmark.py: error: --plot {tmp_path / 'file'} is a file, not a folder"
    assert proc.returncode == 2 and proc.stderr.strip() == expected
    assert proc.stdout == ""


def test_letters_agree_between_report_plots_and_files(tmp_path):
    # the GPT runs first in scan order, so it is group A in the printed report: everywhere else too
    found = [make_result("b1", 1, samples_per_s=40, model="gpt"),
             make_result("b2", 2, samples_per_s=70, model="gpt"),
             make_result("z1", 1, samples_per_s=100), make_result("z2", 2, samples_per_s=150)]
    for r in found:
        results.write(str(tmp_path / "out"), r)
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--export", tmp_path / "ex")
    assert proc.returncode == 0, proc.stderr
    printed = {line.split(":")[0][-1]: line.split(": ")[1].split(" ")[0] for line in proc.stdout.splitlines()
               if line.startswith("Group ")}
    exported = dict(pd.read_csv(tmp_path / "ex" / "scaling.csv")[["letter", "describe"]].drop_duplicates().values)
    assert printed == exported
    found, _ = results.scan(str(tmp_path / "out"))
    scaling = frames.scaling_frame(frames.runs_frame(found))
    legend = [t.get_text() for t in plots.speedup_figure(explain.annotate(scaling, explain.bench_frame([])))
              .legends[0].get_texts()]
    assert all(f"{letter}: {workload}," in " ".join(legend) for letter, workload in printed.items())


def _scanned_first_created_last(folder):
    """A folder whose MLP group is scanned first (the printed report's A), though its runs are the newer ones (a folder
    copied together, a clock set back), its name sorts after the GPT's, and a failed GPT run is scanned before it:
    (runs frame, bench frame, scaling frame)."""
    failed = make_result("f1", 2, samples_per_s=70, model="gpt", status="failed")
    mlp = [_with_comm(make_result("z1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
           _with_comm(make_result("z2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)]
    gpt = [_with_comm(make_result("b1", 1, samples_per_s=40, model="gpt"), 0.2, 0.0, 0.0, 0.2),
           _with_comm(make_result("b2", 2, samples_per_s=70, model="gpt"), 0.2, 0.01, 0.005, 0.21)]
    for sub, day, rs in (("a", "03", [failed]), ("b", "02", mlp), ("c", "01", gpt)):
        for r in rs:
            r["created"] = f"2024-01-{day}T00:00:00+00:00"
            results.write(str(folder / sub), r)
    found, _ = results.scan(str(folder))
    assert [r["run_id"] for r in found] == ["f1", "z1", "z2", "b1", "b2"]
    runs, bench = frames.runs_frame(found), explain.bench_frame(found)
    return runs, bench, explain.annotate(frames.scaling_frame(runs), bench)


def _forecast_letters(runs, bench):
    """{letter: workload} as the printed forecast names the groups, and as its figures do."""
    printed = dict(re.findall(r"^Forecast, group (\w): (\w+),", "\n".join(forecast_view.render(runs, bench)),
                              flags=re.M))
    pictured = {name[len("forecast_"):-len(".png")]: fig.axes[0].get_title().split(": ")[1].split(",")[0]
                for name, fig in forecast_view.figures(runs, bench)}
    return printed, pictured


def test_a_group_has_one_letter_in_the_report_its_plots_and_its_files_whatever_the_runs_dates(tmp_path):
    """The printed report's letters are the speedup plot's legend and scaling.csv's; the forecast's table and its
    figures agree with each other."""
    runs, bench, scaling = _scanned_first_created_last(tmp_path / "out")
    printed = dict(re.findall(r"^Group (\w): (\w+) ", tables.render(runs, scaling), flags=re.M))
    assert printed == {"A": "mlp", "B": "gpt"}
    legend = " ".join(t.get_text() for t in plots.speedup_figure(scaling).legends[0].get_texts())
    assert all(f"{letter}: {workload}," in legend for letter, workload in printed.items()), legend
    export.write_all(str(tmp_path / "ex"), runs, scaling, bench, "", str(tmp_path / "out"))
    exported = dict(pd.read_csv(tmp_path / "ex" / "scaling.csv")[["letter", "describe"]].drop_duplicates().values)
    assert exported == printed
    forecast, pictured = _forecast_letters(runs, bench)
    assert forecast == pictured and set(forecast.values()) == {"gpt", "mlp"}, (forecast, pictured)


def test_the_forecast_names_a_group_as_the_report_does_whatever_the_runs_dates(tmp_path):
    runs, bench, scaling = _scanned_first_created_last(tmp_path / "out")
    printed = dict(re.findall(r"^Group (\w): (\w+) ", tables.render(runs, scaling), flags=re.M))
    forecast, pictured = _forecast_letters(runs, bench)
    assert forecast == pictured == printed, (forecast, printed)


def test_ideal_line_per_group_when_baselines_differ(tmp_path):
    found = [make_result("a2", 2, samples_per_s=100), make_result("a4", 4, samples_per_s=200),  # perfect from 2
             make_result("t1", 1, samples_per_s=40, model="gpt"),
             make_result("t2", 2, samples_per_s=80, model="gpt")]
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame([]))
    lines = {line.get_label(): line for line in plots.speedup_figure(scaling).axes[0].get_lines()}
    mlp = next(v for k, v in lines.items() if k.endswith(": ideal") and "mlp" not in k and
               list(v.get_xdata()) == [2, 4])
    assert list(mlp.get_ydata()) == [1.0, 2.0]  # 2 -> 4 devices: ideal 2×, and the measured 2× sits on it
    assert "ideal (linear)" not in lines


def test_no_throughput_and_zero_baselines_give_files_not_tracebacks(tmp_path):
    found = [make_result("z1", 1), make_result("z2", 2, samples_per_s=10.0),
             make_result("n1", 1, batch_size=8), make_result("n2", 2, batch_size=8)]
    found[0]["timing"]["samples_per_s"] = 0.0  # a zero baseline: infinite speedup
    for r in found[2:]:  # --comm_probe_every 1: every step a probe, no throughput at all
        r["timing"]["samples_per_s"] = None
    for r in found:
        results.write(str(tmp_path / "out"), r)
    proc = run_script("benchmark.py", "--output_dir", tmp_path / "out", "--plot", tmp_path / "pl",
                      "--export", tmp_path / "ex")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    json.loads((tmp_path / "ex" / "summary.json").read_text(),
               parse_constant=lambda c: pytest.fail(f"{c} in summary.json"))
    assert (tmp_path / "pl" / "speedup.png").stat().st_size > 10_000


@pytest.mark.parametrize("case", ["bad-configuration", "version-0", "compare-with-plot", "mixed-hardware",
                                  "export-onto-a-folder"])
def test_more_bad_input_is_one_line(tmp_path, case):
    a = _folder(tmp_path / "a")
    args = ["--compare", a, tmp_path / "s.json"]
    summary = {"schema": results.SUMMARY_SCHEMA, "schema_version": 1, "configurations": [{"foo": 1}]}
    if case == "version-0":
        summary = {**summary, "schema_version": 0, "configurations": []}
    if case == "compare-with-plot":
        args = ["--compare", a, a, "--plot", tmp_path / "pl"]
    if case == "mixed-hardware":
        gpu = make_result("g1", 1, samples_per_s=500)
        gpu["launch"].update(accelerator="gpu", device_names=["NVIDIA H100"])
        results.write(str(a), gpu)
        args = ["--compare", a, a]
    if case == "export-onto-a-folder":
        (tmp_path / "ex" / "summary.json").mkdir(parents=True)
        args = ["--output_dir", a, "--export", tmp_path / "ex"]
    (tmp_path / "s.json").write_text(json.dumps(summary))
    proc = run_script("benchmark.py", *args)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("benchmark.py: error: ")
    says = {"bad-configuration": f"--compare {tmp_path / 's.json'}: summary configuration 0 lacks workload",
            "version-0": "summary schema_version 0 is not one this scalelab reads (2)",
            "compare-with-plot": "--compare A B does not take --plot (its files: --export DIR)",
            "mixed-hardware": "the same workload ran on several kinds of hardware there (cpu cpu, gpu NVIDIA H100)",
            "export-onto-a-folder": f"--export: cannot write {tmp_path / 'ex' / 'summary.json'}"}[case]
    assert says in proc.stderr, proc.stderr
    assert not (tmp_path / "pl").exists()


def test_efficiency_and_throughput_figures_draw_the_reports_numbers(tmp_path):
    found, _ = results.scan(str(_folder(tmp_path / "out")))
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found))
    ax = plots.efficiency_figure(scaling).axes[0]
    bars = [[bar.get_height() for bar in c] for c in ax.containers if isinstance(c, BarContainer)]
    assert bars == [pytest.approx([100, 75]), pytest.approx([100, 87.5])]  # mlp 150/100/2, gpt 70/40/2
    per_device = [[bar.get_height() for c in a.containers for bar in c] for a in plots.throughput_figure(scaling).axes]
    assert per_device == [pytest.approx([100, 75]), pytest.approx([40, 35])]
