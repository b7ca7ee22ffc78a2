"""The figures of a demo-like ladder (2 devices on one node, over 2 Gbit/s and over 200 Mbit/s): every
configuration is a mark of its own, named in words; no mark, bar or printed value lies on another.

Read from the drawn Figure (positions after layout, in display pixels), not from pixels of a PNG."""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from helpers import ROWS, _bench, _bench_at, _emulated, _with_comm, make_result
from scalelab.keys import SCALE
from scalelab.report import bench_plot, explain, export, forecast_view, frames, lever_view, plots
from scalelab.report.plausible import LINK_MARGIN

HASHLIKE = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{6,}\b|pid\d")


def _ladder(**workload):
    """make demo's rungs for two workloads: the MLP on 1 and 2 devices, the tiny GPT also across 2 links."""
    gpt = {"model": "gpt", **workload}
    return [_with_comm(make_result("a1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
            _with_comm(make_result("a2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104),
            _with_comm(make_result("t1", 1, samples_per_s=40, **gpt), 0.2, 0.0, 0.0, 0.2),
            _with_comm(make_result("t2", 2, samples_per_s=75, **gpt), 0.2, 0.01, 0.005, 0.21),
            _emulated(_with_comm(make_result("tf", 2, 2, samples_per_s=60, **gpt), 0.2, 0.06, 0.05, 0.26), 2.0),
            _emulated(_with_comm(make_result("ts", 2, 2, samples_per_s=21, **gpt), 0.2, 0.55, 0.5, 0.75), 0.2)]


@pytest.fixture(scope="module")
def ladder():
    found = [*_ladder(), _bench(2, ROWS), _bench_at(2.0, 1), _bench_at(0.2, 10)]
    return explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found)), found


def _drawn(fig):
    fig.draw_without_rendering()  # runs the layout: positions are final
    return fig


def _markers(ax):
    """[(series label, display x, display y, half size px)] of every marker drawn."""
    out = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " ") or not len(line.get_xdata()):
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        half = line.get_markersize() * line.figure.dpi / 72 / 2
        out += [(line.get_label(), x, y, half) for x, y in line.get_transform().transform(xy[np.isfinite(xy).all(1)])]
    return out


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _assert_no_marker_on_another(ax):
    for (la, xa, ya, ha), (lb, xb, yb, hb) in itertools.combinations(_markers(ax), 2):
        assert abs(xa - xb) >= ha + hb or abs(ya - yb) >= ha + hb, f"{la!r} and {lb!r} lie on each other"


def _assert_texts_apart(ax, texts):
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts if t.get_text() and t.get_visible()]
    for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        assert not _overlap(a, b), f"{ta!r} is printed over {tb!r}"
    for text, box in boxes:
        for label, x, y, half in _markers(ax):
            assert not (box.x0 < x + half and x - half < box.x1 and box.y0 < y + half and y - half < box.y1), \
                f"{text!r} is printed over a marker of {label!r}"


def _assert_legend_clear(ax):
    """The legend covers no marker and no printed value."""
    box = (ax.get_legend() or ax.figure.legends[0]).get_window_extent()
    for label, x, y, half in _markers(ax):
        assert not (box.x0 < x + half and x - half < box.x1 and box.y0 < y + half and y - half < box.y1), label
    for text in ax.texts:
        assert not _overlap(box, text.get_window_extent()), text.get_text()


def _legend(ax):
    """The legend's entries: the axes' own, or the one the figure draws beside them."""
    legend = ax.get_legend() or ax.figure.legends[0]
    return [t.get_text() for t in legend.get_texts()]


def test_speedup_draws_every_rung_apart_and_names_its_link(ladder):
    scaling, _ = ladder
    ax = _drawn(plots.speedup_figure(scaling)).axes[0]
    legend = " | ".join(_legend(ax))
    assert "2 dev, 2 nodes, emulated 2 Gbit/s" in legend and "2 dev, 2 nodes, emulated 200 Mbit/s" in legend
    assert "B: gpt, weak scaling, 1 node: measured" in legend and not HASHLIKE.search(legend)
    assert len(_markers(ax)) == 6  # 2 MLP configurations, 4 GPT ones: each its own mark
    _assert_no_marker_on_another(ax)
    values = [t for t in ax.texts if t.get_text().endswith("×")]
    assert sorted(t.get_text() for t in values) == ["0.53×", "1.50×", "1.50×", "1.88×"]  # baselines not printed
    _assert_texts_apart(ax, values)
    _assert_legend_clear(ax)


def test_efficiency_gives_each_configuration_its_own_bars_and_tick(ladder):
    scaling, _ = ladder
    ax = _drawn(plots.efficiency_figure(scaling)).axes[0]
    bars = [b for c in ax.containers if isinstance(c, BarContainer) for b in c]
    assert len(bars) == 6
    for a, b in itertools.combinations(bars, 2):
        assert min(a.get_x() + a.get_width() - b.get_x(), b.get_x() + b.get_width() - a.get_x()) < 1e-9, \
            "a bar hides another"
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["1 dev", "2 dev\n1 node", "2 dev\n2 nodes\nemulated 2 Gbit/s",
                     "2 dev\n2 nodes\nemulated 200 Mbit/s"]
    _assert_texts_apart(ax, [*ax.texts, *ax.get_xticklabels()])
    ranges = [seg for c in ax.containers if isinstance(c, ErrorbarContainer) for seg in c.lines[2][0].get_segments()]
    for text in ax.texts:  # the predicted range stands beside the printed value, not through it
        box = text.get_window_extent()
        for seg in ranges:
            (x, y0), (_, y1) = ax.transData.transform(seg)
            assert not (box.x0 < x < box.x1 and min(y0, y1) < box.y1 and box.y0 < max(y0, y1)), text.get_text()
    assert not HASHLIKE.search(" ".join(_legend(ax)))


def test_each_predicted_range_stands_by_its_own_groups_bar_in_its_colour(ladder):
    """make demo's picture: the MLP's range at 2 dev, 1 node stood as near the GPT's bar as its own, in black."""
    scaling, _ = ladder
    ax = _drawn(plots.efficiency_figure(scaling)).axes[0]
    bars = [(b.get_x(), b.get_x() + b.get_width(), b.get_facecolor()) for c in ax.containers
            if isinstance(c, BarContainer) for b in c]
    ranges = [(seg[0][0], c.lines[2][0].get_color()) for c in ax.containers if isinstance(c, ErrorbarContainer)
              for seg in c.lines[2][0].get_segments()]
    assert len({colour for *_, colour in bars}) == 2 and len(ranges) == 4
    for x, colour in ranges:
        gaps = sorted((max(x0 - x, x - x1), own) for x0, x1, own in bars)
        assert gaps[0][0] > 0 and np.allclose(gaps[0][1], colour), "a range by another group's bar, or on its own"
        assert gaps[1][0] > 2 * gaps[0][0], "a range as near another bar as its own"


def test_throughput_panels_give_each_configuration_a_bar(ladder):
    scaling, _ = ladder
    fig = _drawn(plots.throughput_figure(scaling))
    gpt = next(ax for ax in fig.axes if "gpt" in ax.get_title())
    assert [t.get_text().replace("\n", ", ") for t in gpt.get_xticklabels()] == [
        "1 dev", "2 dev, 1 node", "2 dev, 2 nodes, emulated 2 Gbit/s", "2 dev, 2 nodes, emulated 200 Mbit/s"]
    assert [round(b.get_height()) for b in gpt.patches] == [40, 38, 30, 10]
    for ax in fig.axes:
        _assert_texts_apart(ax, [*ax.texts, *ax.get_xticklabels()])


def test_busbw_names_each_benchmark_by_its_link_not_its_run_id(ladder):
    _, found = ladder
    again = _bench_at(0.2, 10)
    first = found[-1]["created"]
    again["run_id"], again["created"] = "ar-0.2-again", first[:10] + "T12:40:00+00:00"  # the same day
    ax = bench_plot.busbw_figure(explain.bench_frame([*found, again])).axes[0]
    legend = _legend(ax)
    slow = "2 dev, 2 nodes, emulated 200 Mbit/s, run at "
    assert sorted(legend) == sorted(["2 dev, 1 node", "2 dev, 2 nodes, emulated 2 Gbit/s",
                                     slow + first[11:19], slow + "12:40:00"])  # repeats: when
    assert not HASHLIKE.search(" ".join(legend))
    again["created"] = "2026-11-25T04:00:00+00:00"  # another day (a site's nights, each at 04:00): its date too
    legend = _legend(bench_plot.busbw_figure(explain.bench_frame([*found, again])).axes[0])
    assert sorted(t for t in legend if t.startswith(slow)) == sorted(
        [f"{slow}{first[:10]} {first[11:19]}", slow + "2026-11-25 04:00:00"])


def test_a_busbw_above_its_link_carries_the_mark_and_the_caption_says_why():
    """A make demo on another machine: the 200 Mbit/s benchmark's 64 KiB point read above the link, drawn quietly.
    Each point above its emulated link's rate (by more than plausible.LINK_MARGIN) carries "!"; no other does."""
    rate = 0.2 / 8
    slow = _bench_at(0.2, 1)
    slow["rows"] = [{"bytes": b, "time_s": 1.0, "busbw_GBps": v} for b, v in
                    ((32768, 0.5 * rate), (65536, 1.2 * rate), (1 << 20, rate * (1 + 0.9 * LINK_MARGIN)))]
    slow["rows"].append({"bytes": 1 << 21, "time_s": 1.0, "busbw_GBps": float("nan")})  # not measured: no mark
    local = _bench(2, [{"bytes": 65536, "time_s": 1.0, "busbw_GBps": 50 * rate}])  # no link: no rate to pass
    fig = _drawn(bench_plot.busbw_figure(explain.bench_frame([slow, local])))
    ax = fig.axes[0]
    marks = [t for t in ax.texts if t.get_text() == "!"]
    assert [t.xy for t in marks] == [(65536, 1.2 * rate)]
    line = next(x for x in ax.get_lines() if "200 Mbit/s" in x.get_label())
    assert marks[0].get_color() == line.get_color()
    assert "above its emulated link's rate (emulated 200 Mbit/s: 0.025 GB/s)" in " ".join(fig.get_supxlabel().split())
    assert fig.bbox.x0 <= fig._supxlabel.get_window_extent().x0 < fig._supxlabel.get_window_extent().x1 <= fig.bbox.x1
    _assert_texts_apart(ax, ax.texts)
    fig = bench_plot.busbw_figure(explain.bench_frame([_bench(2, ROWS), local]))
    assert not any(t.get_text() == "!" for t in fig.axes[0].texts) and fig.get_supxlabel() == ""


def test_busbw_draws_the_newest_runs_of_a_configuration_benchmarked_nightly(ladder):
    """A site's folder holds a benchmark of each configuration per night: one line each made a legend of thousands
    (10,000 replicated make demo results: 3,333 lines, 26 s in the legend alone). The newest PER_CONFIGURATION of
    each are drawn, the legend says how many older ones were not; a folder of fewer repeats is drawn whole."""
    _, found = ladder
    nights = []
    for i in range(8):  # after the ladder's own 200 Mbit/s benchmark, each night's busbw its own
        night = _bench_at(0.2, 20 + i)
        night["run_id"], night["created"] = f"ar-0.2-night{i}", f"2099-01-{1 + i:02d}T12:40:00+00:00"
        nights.append(night)
    ax = bench_plot.busbw_figure(explain.bench_frame([*found, *nights])).axes[0]
    assert len(ax.get_lines()) == 2 + explain.PER_CONFIGURATION == 7
    slow = [line.get_ydata()[-1] for line in ax.get_lines() if "200 Mbit/s" in line.get_label()]
    assert sorted(slow) == sorted(ROWS[-1]["busbw_GBps"] / (20 + i) for i in range(3, 8))  # nights 3 to 7
    assert ax.get_legend().get_title().get_text() == "the newest 5 runs of each; 4 older not drawn"
    whole = bench_plot.busbw_figure(explain.bench_frame([*found, *nights[:3]])).axes[0]
    assert len(whole.get_lines()) == 2 + 1 + 3 and not whole.get_legend().get_title().get_text()


def test_a_long_busbw_legend_goes_beside_the_axes(ladder):
    """More than BESIDE_AFTER benchmark lines (nine links here, beside the ladder's three): the legend leaves the
    axes, whose lines it would cover, for the figure's right, and the figure widens; up to that, inside the axes."""
    _, found = ladder
    links = [_bench_at(gbit, 1 + gbit) for gbit in (0.5, 1, 4, 5, 8, 10, 25, 40, 100)]
    fig = bench_plot.busbw_figure(explain.bench_frame([*found, *links]))
    assert len(fig.axes[0].get_lines()) == 12 > bench_plot.BESIDE_AFTER
    assert fig.axes[0].get_legend() is None and len(fig.legends) == 1 and fig.get_figwidth() == 11
    assert len(fig.legends[0].get_texts()) == 12
    fig = bench_plot.busbw_figure(explain.bench_frame([*found, *links[:5]]))
    assert fig.axes[0].get_legend() is not None and not fig.legends and fig.get_figwidth() == 7


def test_report_md_lists_the_newest_benchmarks_and_allreduce_csv_every_one(ladder, tmp_path):
    """--export on a nightly folder: report.md's benchmark table holds the newest PER_CONFIGURATION runs of each
    configuration (10,000 replicated results: 43,000 rows, 6 of the export's 11 s in tabulate) and says where the
    others are; allreduce.csv keeps every run's rows. A folder of fewer repeats: the heading as it always was."""
    scaling, found = ladder
    nights = []
    for i in range(8):
        night = _bench_at(0.2, 20 + i)
        night["run_id"], night["created"] = f"ar-night{i}", f"2099-01-{1 + i:02d}T04:00:00+00:00"
        nights.append(night)
    runs = frames.runs_frame(found)
    for extra, older in ((nights, 4), (nights[:2], 0)):
        out = tmp_path / f"ex{older}"
        export.write_all(str(out), runs, scaling, explain.bench_frame([*found, *extra]), "", str(tmp_path))
        md = (out / "report.md").read_text()
        listed = sorted({line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ar")})
        every = sorted(set(pd.read_csv(out / "allreduce.csv")["run_id"]))
        assert every == sorted(["ar2", "ar-2.0", "ar-0.2", *(r["run_id"] for r in extra)])
        if older:
            assert listed == sorted(["ar2", "ar-2.0", *(f"ar-night{i}" for i in range(3, 8))])
            assert "; the newest 5 runs of each configuration, 4 older in allreduce.csv)" in md
        else:
            assert listed == every and "All-reduce benchmark (nccl-tests definitions: busbw = algbw·2(n−1)/n)\n" in md


def test_two_groups_at_one_link_rate_are_side_by_side():
    found = [*_ladder(), *(_ladder(comm_hook="bf16")[2:]), _bench(2, ROWS), _bench_at(2.0, 1), _bench_at(0.2, 10)]
    for r in found[6:10]:
        r["run_id"] += "-bf16"
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found))
    ax = _drawn(plots.speedup_figure(scaling)).axes[0]  # three groups; two print the same values at 2 devices
    _assert_no_marker_on_another(ax)
    _assert_texts_apart(ax, ax.texts)
    _assert_legend_clear(ax)
    assert [t for t in _legend(ax) if t[1] == ":" and t.endswith("measured")] == [
        "A: mlp, weak scaling: measured", "B: gpt, weak scaling, 1 node: measured",
        "C: gpt, weak scaling · comm hook bf16, 1 node: measured"]  # the lever names its group
    ax = _drawn(plots.link_rate_figure(scaling)).axes[0]
    assert any("comm hook bf16: measured" in t for t in _legend(ax))
    _assert_no_marker_on_another(ax)
    _assert_legend_clear(ax)
    (lever, rows), = lever_view.families(scaling)
    ax = _drawn(plots.lever_figure(lever, rows, scaling)).axes[0]
    assert [t for t in _legend(ax) if t.endswith("measured")] == [
        "2 dev, 1 node: measured", "2 dev, 2 nodes, emulated 2 Gbit/s: measured",
        "2 dev, 2 nodes, emulated 200 Mbit/s: measured"]
    _assert_no_marker_on_another(ax)
    _assert_legend_clear(ax)
    xs = [c.lines[2][0].get_transform().transform(seg)[0][0] for c in ax.containers
          if isinstance(c, ErrorbarContainer) for seg in c.lines[2][0].get_segments()]
    assert len(xs) == 6
    marks = [x for label, x, _, _ in _markers(ax) if not label.startswith("_")]  # points, not the ranges' caps
    assert min(abs(a - b) for a in xs for b in marks) > 3  # each predicted range beside its point, not under it


def test_forecast_names_each_network_and_draws_two_measured_at_one_node_count_apart():
    found = [*_ladder(), _bench(2, ROWS), _bench_at(2.0, 1), _bench_at(0.2, 10)]
    found[5]["timing"]["step_s"]["median"] = found[4]["timing"]["step_s"]["median"]  # equal efficiency
    figures = dict(forecast_view.figures(frames.runs_frame(found), explain.bench_frame(found)))
    ax = _drawn(figures["forecast_B.png"]).axes[0]
    legend = _legend(ax)
    assert {"measured, emulated 2 Gbit/s", "measured, emulated 200 Mbit/s"} <= set(legend)
    assert not HASHLIKE.search(" ".join(legend))
    measured = [m for m in _markers(ax) if m[0].startswith("measured")]
    assert len(measured) == 2 and measured[0][2] == pytest.approx(measured[1][2])  # the same height …
    _assert_no_marker_on_another(ax)  # … side by side


def test_an_efficiency_beyond_scaling_is_marked_and_not_clipped():
    """The kept pair (a 1-device step that ran without autocast): 203 %, printed with the report's "!", on an axis
    that reaches it; a configuration that ran another job has no bar value at all."""
    from helpers import ROOT
    from scalelab import results

    found, _ = results.scan(str(ROOT / "tests" / "data" / "fp32-baseline-bf16-pair"))
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found))
    ax = _drawn(plots.efficiency_figure(scaling)).axes[0]
    assert [t.get_text() for t in ax.texts] == ["100 %", "203 % !"] and ax.get_ylim()[1] > 220
    assert "!: beyond what scaling gives (the report says why)" in _legend(ax)
    other = [_with_comm(make_result("o1", 1, samples_per_s=100), 0.1, 0.0, 0.0, 0.1),
             _with_comm(make_result("o2", 2, samples_per_s=150), 0.1, 0.008, 0.004, 0.104)]
    other[0]["fingerprint"] = {"matmul_dtypes": ["float32"]}
    other[1]["fingerprint"] = {"matmul_dtypes": ["bfloat16"]}
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(other)), explain.bench_frame(other))
    ax = _drawn(plots.efficiency_figure(scaling)).axes[0]
    assert [t.get_text() for t in ax.texts] == ["100 %", ""] and ax.get_ylim()[1] == 120
    assert not any(t.startswith("!") for t in _legend(ax))


def test_a_figure_carries_the_reports_warnings_under_its_axes():
    """The dry run: the PNGs showed a clean line where the report warned of contention; a slide must not."""
    found = [make_result("p1", 1, samples_per_s=100), make_result("p2", 2, samples_per_s=120)]
    found[1]["launch"]["oversubscribed"] = "oversubscribed: ranks 0 and 1 shared core 0"
    runs = frames.runs_frame(found)
    scaling = explain.annotate(frames.scaling_frame(runs), explain.bench_frame([]))
    for fig in (plots.speedup_figure(scaling), plots.efficiency_figure(scaling), plots.throughput_figure(scaling)):
        text = " ".join(plots.figure_text(fig).split())  # wrapped to the figure's width
        assert "! A, 2 devices on 1 node: oversubscribed: ranks 0 and 1 shared core 0; not this hardware's" in text
    clean = explain.annotate(frames.scaling_frame(frames.runs_frame(found[:1] + [make_result("p3", 2)])),
                             explain.bench_frame([]))
    assert "! " not in plots.figure_text(plots.speedup_figure(clean))


def test_each_figure_keeps_its_warnings_inside_it_and_a_groups_loss_figure_only_its_own():
    """A 7-inch figure (the loss curves) cut its caption at the right edge ("…shared its cores; not thi"), wrapped for
    a 10-inch one; and group A's loss figure listed group B's warnings."""
    from scalelab.report import curves

    found = _ladder()
    found[3]["launch"]["oversubscribed"] = ("oversubscribed: ranks 0 and 1 shared core 0 of this machine, each "
                                            "had it about half of the time it was ready to run")
    scaling = explain.annotate(frames.scaling_frame(frames.runs_frame(found)), explain.bench_frame(found))
    loss = pd.DataFrame({"elapsed_s": [0.0, 1.0, 2.0], "train_loss": [2.0, 1.5, 1.2]})
    by_letter = {letter: g for letter, g in scaling.groupby("letter")}
    figures = {"loss " + letter: curves.loss_figure(letter, [("1 device", loss)], g) for letter, g in by_letter.items()}
    figures.update(speedup=plots.speedup_figure(scaling), efficiency=plots.efficiency_figure(scaling),
                   throughput=plots.throughput_figure(scaling))
    for name, fig in figures.items():
        box = _drawn(fig)._supxlabel.get_window_extent()
        assert fig.bbox.x0 <= box.x0 < box.x1 <= fig.bbox.x1, name
    gpt = scaling.loc[scaling["describe"].str.contains("gpt"), "letter"].iloc[0]  # the group of the shared core
    said = sorted(name for name, fig in figures.items() if "shared core 0" in plots.figure_text(fig))
    assert said == sorted(["loss " + gpt, "speedup", "efficiency", "throughput"])


def test_every_title_lies_within_its_figure_however_few_configurations_it_draws(ladder):
    """A figure is as wide as what it draws: one group of two configurations (a site's nightly 1 and 2 devices) made
    the throughput figure 4 inches wide, and its two-line title lost both ends. Each group alone, its first two
    configurations alone, and all of them: every title (the figure's and each panel's) inside the figure."""
    scaling, _ = ladder
    frames_drawn = [scaling]
    for _, g in scaling.groupby("group"):
        frames_drawn += [g, g.sort_values(SCALE).head(2)]
    for frame in frames_drawn:
        for make in (plots.speedup_figure, plots.efficiency_figure, plots.throughput_figure):
            fig = _drawn(make(frame))
            titles = [t for t in (fig._suptitle, *(ax.title for ax in fig.axes)) if t is not None and t.get_text()]
            for title in titles:
                box = title.get_window_extent()
                assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (make.__name__, len(frame), title.get_text())
