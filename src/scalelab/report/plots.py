"""The report as pictures (`benchmark.py --plot DIR`): PNGs to look at and paste into slides.

One figure per question, drawn from the annotated scaling frame the tables print: how much faster (speedup, with the
ideal and the predicted line), how efficient, how busy each device stays (throughput per device), and what the network
delivers (busbw vs message size). Builders return Figures (tests read the data back); `write_all` saves them. No
pyplot: files only, no display nor global backend (a login node, CI); savefig renders with Agg. Configurations that
share a device count are named in words (report/labels.py) and drawn side by side (report/marks.py).
"""

import io
import os

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter

from scalelab import perfmodel, results
from scalelab.errors import UsageError
from scalelab.keys import SCALE
from scalelab.perfmodel.network import human_rate
from scalelab.report import bench_plot, labels, lever_view, marks, plausible

DPI, MAX_WARNINGS = 120, 4  # MAX_WARNINGS: the report's warnings under a figure; the report has every one
MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # one per series of a group, so a single point is told apart too
VALUE_PT = (7, 34, 11)  # a printed speedup: its offset right of the marks, its column's width, its line's height


def _letters(scaling: pd.DataFrame) -> dict:
    """Group key -> the letter the printed report uses."""
    return dict(zip(scaling["group"], scaling["letter"]))


def _label(g: pd.DataFrame, letter: str) -> str:
    """"A: mlp, weak scaling", and the levers set away from their defaults (" · comm hook bf16")."""
    r = g.iloc[0]
    return f"{letter}: {r['describe']}, {r['scaling']} scaling{lever_view.caption(r)}"


def _title(what: str, scaling: pd.DataFrame) -> str:
    """"What — on which hardware", the workload too when there is only one."""
    hw = sorted(set(scaling["hardware"]))
    describes = sorted(set(scaling["describe"]))
    workload = f"{describes[0]}, " if len(describes) == 1 else ""
    return f"{what}\n{workload}{' / '.join(hw)}"


def _series(scaling: pd.DataFrame) -> list:
    """[(group, its drawable rows, one series' index)]: per group one line per link ("" = one node or a real
    network); a device count that still ran several ways (more nodes, same link) gives its others own series."""
    out = []
    for group, g in scaling.sort_values("letter").groupby("group", sort=False):
        g = g[np.isfinite(g["speedup"])].sort_values(SCALE)  # no throughput: nothing to draw
        rank = g.groupby(["world_size", "link"]).cumcount()
        out += [(group, g, rows.index) for _, rows in g.groupby([g["link"], rank], sort=False)]
    return out


def _series_label(first: bool, g: pd.DataFrame, letter: str, what: str) -> str:
    """The group's whole name on its first series; "B, 2 dev, 2 nodes, emulated 2 Gbit/s" on the others."""
    name = _label(g, letter) if first else letter
    return f"{name}{', ' + what if what else ''}: measured"


def speedup_figure(scaling: pd.DataFrame):
    fig = Figure(figsize=(10, 5.2))
    ax = fig.subplots()
    letters, series = _letters(scaling), _series(scaling)
    slots = marks.slots(len(series))
    right = {}  # device count -> the rightmost slot drawn there: the values are printed right of it
    for slot, (_, g, rows) in zip(slots, series):
        right.update({x: max(slot, right.get(x, slot)) for x in g.loc[rows, "world_size"]})
    top, bases, colors, count, values = 1, set(scaling["baseline_world_size"]), {}, {}, []
    for slot, (group, g, rows) in zip(slots, series):
        s = g.loc[rows]
        k = count[group] = count.get(group, -1) + 1
        line, = marks.plot_dodged(ax, slot, s["world_size"], s["speedup"], "-" if len(s) > 1 else "none", lw=2,
                                  marker=MARKERS[k % len(MARKERS)], color=colors.get(group),
                                  label=_series_label(k == 0, g, letters[group], labels.shared(g, rows)))
        color = colors.setdefault(group, line.get_color())
        shown = s[s.index != g.index[0]]  # not the baseline: 1.00× by definition
        values += [(x, y, color) for x, y in zip(shown["world_size"], shown["speedup"])]
        top = max(top, s["speedup"].max())
        if len(s) > 1:
            top = max(top, _expected(ax, s, color, letters[group], own_ideal=len(bases) > 1))
    xs = sorted(set(scaling["world_size"]) | {1})
    if len(bases) == 1:
        base = bases.pop()
        ax.plot(xs, [x / base for x in xs], ":", color="black", lw=1.5, label="ideal (linear)")
    ax.set_xlabel("world size (GPUs, or CPU processes)")
    ax.set_ylabel("speedup over the group's baseline (×)")
    ax.set_title(_title("Speedup vs world size", scaling))
    ax.set_xticks(xs)
    ax.margins(x=0.15)  # room right of the last device count for the dodged marks and their values
    ax.set_ylim(0, top * 1.1)
    _values(ax, values, right)
    ax.grid(alpha=0.3)
    _legend_beside(fig)
    _finish(fig, scaling)
    return fig


def _values(ax, values: list, right: dict):
    """Each point's speedup in its series' colour, right of every mark dodged at its device count. Values at one
    device count closer than a line of text (on the axes at their shortest) go in columns side by side."""
    gap = ax.get_ylim()[1] * VALUE_PT[2] / 72 / (ax.figure.get_figheight() / 2)
    columns = {}  # device count -> per column, the lowest value printed in it so far
    for x, y, color in sorted(values, key=lambda v: -v[1]):
        low = columns.setdefault(x, [])
        c = next((i for i, seen in enumerate(low) if seen - y >= gap), len(low))
        low[c:c + 1] = [y]
        ax.annotate(f"{y:.2f}×", (x, y), xycoords=marks.dodge(ax, right[x]),
                    xytext=(VALUE_PT[0] + c * VALUE_PT[1], 0), textcoords="offset points", va="center", fontsize=8,
                    color=color)


def _expected(ax, s: pd.DataFrame, color, letter: str, own_ideal: bool) -> float:
    """A series' ideal line (when groups start at different device counts) and predicted band; the ideal's top."""
    ideal = s["world_size"] / s["baseline_world_size"].iloc[0]
    if own_ideal:
        ax.plot(s["world_size"], ideal, ":", color=color, lw=1.5, label=f"{letter}: ideal")
    lo = s["predicted_efficiency_no_overlap"] * ideal
    hi = s["predicted_efficiency_overlap"] * ideal
    if hi.notna().sum() >= 2:
        ax.plot(s["world_size"], lo, "--", color=color, alpha=0.9,
                label=f"{letter}: predicted, no overlap (shaded: up to full overlap)")
        ax.fill_between(s["world_size"], lo, hi, color=color, alpha=0.15, lw=0)
    return ideal.max()


def _legend_beside(fig):
    """The legend right of the axes, outside them: it covers no mark, and the layout makes room for it and for
    anything printed past the axes' edge."""
    fig.legend(loc="outside right upper", fontsize=8)


def _finish(fig, scaling):
    """Lay out (constrained: room for outside legends, multi-line ticks); under the axes the report's warnings (a
    slide shows them too) and, on CPU, why the curve is flat (it is not the network)."""
    fig.set_layout_engine("constrained")
    lines = warned = plausible.figure_warnings(scaling, MAX_WARNINGS)
    if (scaling["accelerator"] == "cpu").any():
        lines = warned + [f"CPU rehearsal: {cpu_device(scaling)}; an emulated link is network namespaces and tc "
                          "on one machine, not a real network."]
    marks.caption(fig, lines, bool(warned), width=150)


def cpu_device(scaling: pd.DataFrame) -> str:
    threads = sorted({int(t) for t in scaling.get("threads", pd.Series(dtype=float)).dropna()})
    return f"1 device = {threads[0]} core(s)" if len(threads) == 1 else "a device is a share of the cores"


def _configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """The distinct configurations (devices, nodes, link) of a frame, fewest devices first, one row each."""
    return frame[SCALE].drop_duplicates().sort_values(SCALE).reset_index(drop=True)


def _bar_positions(scaling: pd.DataFrame):
    """(rows by group letter with `pos`: each bar's x, the bar width, the configurations): one slot per
    configuration, its groups' bars side by side, centred on it."""
    configs = _configurations(scaling)
    slot = {tuple(c): i for i, c in enumerate(configs.itertuples(index=False))}
    rows = scaling.sort_values("letter")
    k, n = rows.groupby(SCALE).cumcount(), rows.groupby(SCALE)["group"].transform("size")
    width = 0.8 / n.max()
    pos = [slot[tuple(c)] + (ki - (ni - 1) / 2) * width for c, ki, ni in zip(rows[SCALE].itertuples(index=False), k, n)]
    return rows.assign(pos=pos), width, configs


def efficiency_figure(scaling: pd.DataFrame):
    """Grouped bars, one slot per configuration, each group's predicted range right beside its bar, in its colour.

    The range stands nearer its own bar than the next group's, and clear of the value printed on top of the bar. A
    value beyond what scaling gives carries the report's "!" (plausible.py), and the axis reaches it: a slide never
    shows it clipped or quietly."""
    rows, width, configs = _bar_positions(scaling)
    most = rows.groupby(SCALE)["group"].size().max()
    fig = Figure(figsize=(max(7.0, 0.65 * most * len(configs) + 4.5), 5.2))  # a share stays wider than a value
    ax = fig.subplots()
    letters = _letters(scaling)
    for group, g in rows.groupby("group", sort=False):
        bars = ax.bar(g["pos"] - 0.15 * width, g["efficiency"] * 100, 0.6 * width,
                      label=f"{_label(g, letters[group])}: measured")
        ax.bar_label(bars, labels=[f"{r.efficiency * 100:.0f} %" + (" !" if plausible.flagged(r) else "")
                                   if pd.notna(r.efficiency) else "" for r in g.itertuples()], fontsize=8)
        multi = g[g["world_size"] > g["baseline_world_size"]]  # the baseline is 100 % by definition
        lo, hi = multi["predicted_efficiency_no_overlap"] * 100, multi["predicted_efficiency_overlap"] * 100
        if hi.notna().any():
            ax.errorbar(multi["pos"] + 0.25 * width, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", capsize=3,
                        color=bars.patches[0].get_facecolor(), label=f"{letters[group]}: predicted (no overlap … "
                                                                     "full overlap)")
    ax.axhline(100, ls=":", color="black", lw=1)
    if any(plausible.flagged(r) for r in rows.itertuples()):  # the legend says what the mark means
        ax.plot([], [], " ", label="!: beyond what scaling gives (the report says why)")
    ax.set_xticks(range(len(configs)), labels.names(configs, sep="\n"), fontsize=8)
    ax.set_xlabel("configuration")
    ax.set_ylabel("parallel efficiency (%)")
    top = rows["efficiency"].replace([np.inf, -np.inf], np.nan).max() * 100  # an infinite one (a zero baseline) aside
    ax.set_ylim(0, max(120, 1.1 * top) if pd.notna(top) else 120)
    ax.set_title(_title("Parallel efficiency per configuration", scaling))
    ax.grid(axis="y", alpha=0.3)
    _legend_beside(fig)
    _finish(fig, scaling)
    return fig


def throughput_figure(scaling: pd.DataFrame):
    """One panel per group (samples/s and tokens/s do not share an axis), one bar per configuration."""
    letters = _letters(scaling)
    groups = [(group, g.sort_values(SCALE)) for group, g in scaling.sort_values("letter").groupby("group", sort=False)]
    sizes = [len(g) for _, g in groups]
    fig = Figure(figsize=(max(7.0, 1.3 * sum(sizes) + 1.4 * len(groups)), 4.8))  # its title's width at least
    axes = fig.subplots(1, len(groups), squeeze=False, width_ratios=sizes)
    for ax, (group, g) in zip(axes[0], groups):
        bars = ax.bar(range(len(g)), g["throughput_per_device"], color="tab:green")
        ax.set_xticks(range(len(g)), labels.names(g, sep="\n"), fontsize=8)
        ax.bar_label(bars, fmt="{:,.0f}", fontsize=8)
        base = g["throughput_per_device"].iloc[0]
        if np.isfinite(base):
            ax.axhline(base, ls=":", color="black", lw=1)
        ax.set_title(_label(g, letters[group]), fontsize=9)
        ax.set_xlabel("configuration")
        ax.set_ylabel(f"{g['unit'].iloc[0]} per device")
        finite = g["throughput_per_device"][np.isfinite(g["throughput_per_device"])]
        ax.set_ylim(0, max([1.0, *finite]) * 1.2)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(_title("Throughput per device", scaling).replace("\n", " — ")
                 + "\ndotted line: the baseline's throughput per device, where perfect scaling stays", fontsize=11)
    _finish(fig, scaling)
    return fig


def link_rows(scaling: pd.DataFrame) -> pd.DataFrame:
    """Configurations whose nodes were joined by an emulated link of a known rate."""
    if "link_gbit" not in scaling:
        return scaling.iloc[0:0]
    return scaling[(scaling["num_nodes"] > 1) & scaling["link_gbit"].notna()]


def link_rate_figure(scaling: pd.DataFrame):
    """Efficiency against the link's rate: measured points, the model's band (no overlap … full overlap) for a
    link that delivers its configured rate, and the same devices on one node (no link) as the ceiling. One
    series per group and shape (devices, nodes), dodged: two at one rate never hide each other."""
    fig = Figure(figsize=(10, 4.8))
    ax = fig.subplots()
    letters = _letters(scaling)
    series = list(link_rows(scaling).sort_values("letter").groupby(["group", "world_size", "num_nodes"], sort=False))
    shapes = {key[1:] for key, _ in series}
    slots = marks.slots(2 * len(series))  # each series' points, and beside them its benchmark's prediction
    for k, ((group, devices, nodes), g) in enumerate(series):
        shape = f", {int(devices)} dev, {labels.words('num_nodes', nodes)}" if len(shapes) > 1 else ""
        names = (_label(g, letters[group]) + shape, "" if len(series) == 1 else f"{letters[group]}{shape}: ")
        _link_series(ax, slots[2 * k:2 * k + 2], g.sort_values("link_gbit"), scaling, names, first=k == 0)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_rate(x)))
    ax.set_xlabel("rate of the emulated link between the nodes (log scale)")
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, 110)
    nodes = sorted({int(key[2]) for key, _ in series})
    ax.set_title(_title(f"Efficiency against link rate ({' / '.join(map(str, nodes))} nodes)", scaling))
    ax.grid(alpha=0.3, which="both")
    _legend_beside(fig)
    _finish(fig, scaling)
    return fig


def _link_series(ax, slots, g: pd.DataFrame, scaling: pd.DataFrame, names: tuple, first: bool):
    """One series of link_rate_figure: points, band, its benchmark's prediction (beside the points) and one-node
    ceiling. names: the series' whole name, the short prefix of the rest ("" where it is the only series)."""
    row, (name, short) = g.iloc[0], names
    color = marks.plot_dodged(ax, slots[0], g["link_gbit"], g["efficiency"] * 100, "o", ms=7,
                              label=f"{name}: measured")[0].get_color()
    base_step = row["baseline_step_s"]
    if row["baseline_world_size"] == 1 and np.isfinite(base_step) and np.isfinite(row["grad_bytes"]):
        rates = np.geomspace(g["link_gbit"].min() / 4, g["link_gbit"].max() * 4, 60)
        band = [perfmodel.predict_from_busbw(base_step, row["grad_bytes"], int(row["world_size"]),
                                             int(row["num_nodes"]),
                                             perfmodel.gbit_to_GBps(x), row["scaling"] or "weak") for x in rates]
        ax.fill_between(rates, [p.efficiency_no_overlap * 100 for p in band],
                        [p.efficiency_overlap * 100 for p in band], color=color, alpha=0.2,
                        label=f"{short}predicted at the configured rate (no overlap … full overlap)")
    lo, hi = g["predicted_efficiency_no_overlap"] * 100, g["predicted_efficiency_overlap"] * 100
    if hi.notna().any():
        marks.range_dodged(ax, slots[1], g["link_gbit"], lo, hi, color="black",
                           label="predicted from the all-reduce benchmark over that link" if first else None)
    one = scaling[(scaling["group"] == row["group"]) & (scaling["num_nodes"] == 1)
                  & (scaling["world_size"] == row["world_size"])]
    if not one.empty:
        ax.axhline(one["efficiency"].iloc[0] * 100, ls="--", color=color, lw=1,
                   label=f"{short}{int(row['world_size'])} devices on one node (no link)")


def lever_figure(lever: str, rows: pd.DataFrame, scaling: pd.DataFrame):
    """Efficiency against one lever's settings (report/lever_view.py's family): measured points and the predicted
    range, one series per configuration (devices, nodes, link), dodged so that no mark hides another."""
    fig = Figure(figsize=(10, 4.8))
    ax = fig.subplots()
    values = list(dict.fromkeys(rows[lever]))
    configs = _configurations(rows)
    names = dict(zip(configs[SCALE].itertuples(index=False), labels.names(configs)))
    slots = marks.slots(2 * len(configs))  # each configuration's points, and beside them its predicted range
    for k, (key, g) in enumerate(rows.groupby(SCALE, sort=False)):
        x = [values.index(v) for v in g[lever]]
        color = marks.plot_dodged(ax, slots[2 * k], x, g["efficiency"] * 100, "o-", ms=7,
                                  label=f"{names[key]}: measured")[0].get_color()
        lo, hi = g["predicted_efficiency_no_overlap"] * 100, g["predicted_efficiency_overlap"] * 100
        if hi.notna().any():
            marks.range_dodged(ax, slots[2 * k + 1], x, lo, hi, color=color, alpha=0.6,
                               label=f"{names[key]}: predicted (no overlap … full overlap)")
    ax.set_xticks(range(len(values)), [f"{v:g}" if isinstance(v, float) else str(v) for v in values])
    ax.set_xlim(-0.5, len(values) - 0.5)  # a category's width around each setting: room for the dodged marks
    ax.set_xlabel(lever)
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, 110)
    ax.set_title(_title(f"Efficiency against {lever}", scaling))
    ax.grid(alpha=0.3)
    _legend_beside(fig)
    _finish(fig, scaling)
    return fig


def write_all(folder: str, scaling: pd.DataFrame, bench: pd.DataFrame) -> list:
    """Save every figure there is data for; return the paths written."""
    os.makedirs(folder, exist_ok=True)
    figures = []
    if not scaling.empty:
        figures += [("speedup.png", speedup_figure(scaling)), ("efficiency.png", efficiency_figure(scaling)),
                    ("throughput_per_device.png", throughput_figure(scaling))]
        if not link_rows(scaling).empty:
            figures.append(("efficiency_vs_link_rate.png", link_rate_figure(scaling)))
        figures += [(f"efficiency_vs_{lever}.png", lever_figure(lever, rows, scaling))
                    for lever, rows in lever_view.families(scaling)]
    if not bench.empty:
        figures.append(("allreduce_busbw.png", bench_plot.busbw_figure(bench)))
    return save(folder, figures)


def figure_text(fig) -> str:
    """Every text the figure shows, one per line, in drawing order: the PNG's Description (docs/ checks captions)."""
    fig.draw_without_rendering()  # tick labels exist only once the figure is laid out
    texts = (t.get_text().strip() for t in fig.findobj(Text) if t.get_visible())
    return "\n".join(t for t in texts if t)


def save(folder: str, figures: list) -> list:
    """[(file name, Figure)] as PNGs in folder, each written atomically; the paths written."""
    paths = []
    for name, fig in figures:
        path = os.path.join(folder, name)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=DPI, metadata={"Description": figure_text(fig)})
        try:
            paths.append(results.atomic_write_bytes(path, png.getvalue()))  # a reader never sees half a PNG
        except OSError as exc:
            raise UsageError(f"--plot: cannot write {path} ({exc.strerror})") from None
    return paths
