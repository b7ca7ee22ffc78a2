"""The report as pictures (`benchmark.py --plot DIR`): PNGs to look at and paste into slides.

One figure per question, drawn from the same annotated scaling frame the tables print:
how much faster (speedup, with the ideal and the predicted line), how efficient (per
configuration), how busy each device stays (throughput per device), and what the network
delivers (all-reduce busbw vs message size). Every builder returns a Figure, so tests can
read the plotted data back; `write_all` saves them. Figures are made without pyplot: files only, no display
(a login node, CI) and no global backend to switch; savefig renders PNGs with Agg.
"""

import io
import os

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from scalelab import perfmodel, results
from scalelab.errors import UsageError
from scalelab.perfmodel.network import human_bytes, human_rate
from scalelab.report import levers

DPI = 120


def _letters(scaling: pd.DataFrame) -> dict:
    """Group key -> the letter the printed report uses."""
    return dict(zip(scaling["group"], scaling["letter"]))


def _label(g: pd.DataFrame, letter: str) -> str:
    r = g.iloc[0]
    return f"{letter}: {r['describe']}, {r['scaling']} scaling"


def _title(what: str, scaling: pd.DataFrame) -> str:
    """"What — on which hardware", the workload too when there is only one."""
    hw = sorted(set(scaling["hardware"]))
    describes = sorted(set(scaling["describe"]))
    workload = f"{describes[0]}, " if len(describes) == 1 else ""
    return f"{what}\n{workload}{' / '.join(hw)}"


def _config(devices, nodes) -> str:
    return f"{int(devices)}×" + (f" ({int(nodes)} nodes)" if nodes > 1 else "")


def speedup_figure(scaling: pd.DataFrame):
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    letters = _letters(scaling)
    top = 1
    bases = set(scaling["baseline_devices"])
    for group, g in scaling.groupby("group", sort=False):
        g = g[np.isfinite(g["speedup"])].sort_values(["devices", "nodes"])  # no throughput: nothing to draw
        if g.empty:
            continue
        letter = letters[group]
        line, = ax.plot(g["devices"], g["speedup"], "o-", lw=2, label=f"{_label(g, letter)}: measured")
        base = g["baseline_devices"].iloc[0]
        ideal = g["devices"] / base
        if len(bases) > 1:  # groups start at different device counts: each its own ideal line
            ax.plot(g["devices"], ideal, ":", color=line.get_color(), lw=1.5, label=f"{letter}: ideal")
        top = max(top, ideal.max(), g["speedup"].max())
        for x, y in zip(g["devices"], g["speedup"]):
            ax.annotate(f"{y:.2f}×", (x, y), textcoords="offset points", xytext=(6, -12), fontsize=8,
                        color=line.get_color())
        lo = g["predicted_efficiency_no_overlap"] * ideal
        hi = g["predicted_efficiency_overlap"] * ideal
        if hi.notna().sum() >= 2:
            ax.plot(g["devices"], lo, "--", color=line.get_color(), alpha=0.9,
                    label=f"{letter}: predicted, no overlap (shaded: up to full overlap)")
            ax.fill_between(g["devices"], lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    xs = sorted(set(scaling["devices"]) | {1})
    if len(bases) == 1:
        base = bases.pop()
        ax.plot(xs, [x / base for x in xs], ":", color="black", lw=1.5, label="ideal (linear)")
    ax.set_xlabel("devices (GPUs, or CPU processes)")
    ax.set_ylabel("speedup over the group's baseline (×)")
    ax.set_title(_title("Speedup vs devices", scaling))
    ax.set_xticks(xs)
    ax.margins(x=0.1)
    ax.set_ylim(0, top * 1.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    _finish(fig, scaling)
    return fig


def _finish(fig, scaling):
    """Lay out; on CPU, a caption saying why the curve is flat (it is not the network)."""
    if (scaling["accelerator"] == "cpu").any():
        fig.text(0.01, 0.01, f"CPU rehearsal: {cpu_device(scaling)}; an emulated link is network namespaces and tc "
                 "on one machine, not a real network.", fontsize=7, color="dimgray")
        fig.tight_layout(rect=(0, 0.035, 1, 1))
    else:
        fig.tight_layout()


def cpu_device(scaling: pd.DataFrame) -> str:
    threads = sorted({int(t) for t in scaling.get("threads", pd.Series(dtype=float)).dropna()})
    return f"1 device = {threads[0]} core(s)" if len(threads) == 1 else "a device is a share of the cores"


def efficiency_figure(scaling: pd.DataFrame):
    fig = Figure(figsize=(7, 5.4))
    ax = fig.subplots()
    letters = _letters(scaling)
    configs = sorted({(int(d), int(n)) for d, n in zip(scaling["devices"], scaling["nodes"])})
    slot = {c: i for i, c in enumerate(configs)}
    groups = list(scaling.groupby("group", sort=False))
    width = 0.8 / len(groups)
    for k, (group, g) in enumerate(groups):
        g = g.sort_values(["devices", "nodes"])
        pos = [slot[(int(d), int(n))] + (k - (len(groups) - 1) / 2) * width for d, n in zip(g["devices"], g["nodes"])]
        bars = ax.bar(pos, g["efficiency"] * 100, width, label=f"{_label(g, letters[group])}: measured")
        ax.bar_label(bars, fmt="%.0f %%", fontsize=8)
        lo, hi = g["predicted_efficiency_no_overlap"] * 100, g["predicted_efficiency_overlap"] * 100
        if hi.notna().any():
            ax.errorbar(pos, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="_", color="black", ms=14, capsize=3,
                        label="predicted (no overlap … full overlap)" if k == 0 else None)
    ax.axhline(100, ls=":", color="black", lw=1)
    ax.set_xticks(range(len(configs)), [_config(d, n) for d, n in configs])
    ax.set_xlabel("configuration (devices, nodes)")
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, 120)
    ax.set_title(_title("Parallel efficiency per configuration", scaling))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    _finish(fig, scaling)
    return fig


def throughput_figure(scaling: pd.DataFrame):
    """One panel per group: samples/s and tokens/s do not share an axis."""
    letters = _letters(scaling)
    groups = list(scaling.groupby("group", sort=False))
    fig = Figure(figsize=(4.2 * len(groups) + 1, 4.4))
    axes = fig.subplots(1, len(groups), squeeze=False)
    for ax, (group, g) in zip(axes[0], groups):
        g = g.sort_values(["devices", "nodes"])
        unit = g["unit"].iloc[0]
        bars = ax.bar([_config(d, n) for d, n in zip(g["devices"], g["nodes"])], g["throughput_per_device"],
                      color="tab:green")
        ax.bar_label(bars, fmt="{:,.0f}", fontsize=8)
        base = g["throughput_per_device"].iloc[0]
        if np.isfinite(base):
            ax.axhline(base, ls=":", color="black", lw=1)
            ax.annotate("baseline: perfect scaling stays here", xy=(1, base), xycoords=("axes fraction", "data"),
                        xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom", fontsize=7)
        ax.set_title(_label(g, letters[group]), fontsize=9)
        ax.set_xlabel("configuration")
        ax.set_ylabel(f"{unit} per device")
        finite = g["throughput_per_device"][np.isfinite(g["throughput_per_device"])]
        ax.set_ylim(0, max([1.0, *finite]) * 1.2)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(_title("Throughput per device", scaling).replace("\n", " — "), fontsize=11)
    _finish(fig, scaling)
    return fig


def link_rows(scaling: pd.DataFrame) -> pd.DataFrame:
    """Configurations whose nodes were joined by an emulated link of a known rate."""
    if "link_gbit" not in scaling:
        return scaling.iloc[0:0]
    return scaling[(scaling["nodes"] > 1) & scaling["link_gbit"].notna()]


def link_rate_figure(scaling: pd.DataFrame):
    """Efficiency against the link's rate: measured points, the model's band (no overlap … full overlap) for a
    link that delivers its configured rate, and the same devices on one node (no link) as the ceiling."""
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    letters = _letters(scaling)
    linked = link_rows(scaling)
    for group, g in linked.groupby("group", sort=False):
        g = g.sort_values("link_gbit")
        row = g.iloc[0]
        color = ax.plot(g["link_gbit"], g["efficiency"] * 100, "o", ms=7,
                        label=f"{_label(g, letters[group])}: measured")[0].get_color()
        base_step = row["baseline_step_ms"] / 1e3
        if row["baseline_devices"] == 1 and np.isfinite(base_step) and np.isfinite(row["grad_bytes"]):
            rates = np.geomspace(g["link_gbit"].min() / 4, g["link_gbit"].max() * 4, 60)
            band = [perfmodel.predict_from_busbw(base_step, row["grad_bytes"], int(row["devices"]), int(row["nodes"]),
                                                 perfmodel.gbit_to_GBps(x), row["scaling"] or "weak") for x in rates]
            ax.fill_between(rates, [p.efficiency_no_overlap * 100 for p in band],
                            [p.efficiency_overlap * 100 for p in band], color=color, alpha=0.2,
                            label="predicted at the configured rate (no overlap … full overlap)")
        lo, hi = g["predicted_efficiency_no_overlap"] * 100, g["predicted_efficiency_overlap"] * 100
        if hi.notna().any():
            ax.errorbar(g["link_gbit"], (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", color="black", capsize=4,
                        label="predicted from the all-reduce benchmark over that link")
        one = scaling[(scaling["group"] == group) & (scaling["nodes"] == 1) & (scaling["devices"] == row["devices"])]
        if not one.empty:
            ax.axhline(one["efficiency"].iloc[0] * 100, ls="--", color=color, lw=1,
                       label=f"{int(row['devices'])} devices on one node (no link)")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_rate(x)))
    ax.set_xlabel("rate of the emulated link between the nodes (log scale)")
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, 110)
    ax.set_title(_title("Efficiency against link rate (2 nodes)", scaling))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    _finish(fig, scaling)
    return fig


def lever_figure(lever: str, rows: pd.DataFrame, scaling: pd.DataFrame):
    """Efficiency against one lever's settings (report/levers.py's family): measured points and the predicted
    range, one series per configuration (devices, nodes, link)."""
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    values = list(dict.fromkeys(rows[lever]))
    for (devices, nodes, link), g in rows.groupby(["devices", "nodes", "link"], sort=False):
        x = [values.index(v) for v in g[lever]]
        where = f"{_config(devices, nodes)}" + (f", {link}" if link else "")
        color = ax.plot(x, g["efficiency"] * 100, "o-", ms=7, label=f"{where}: measured")[0].get_color()
        lo, hi = g["predicted_efficiency_no_overlap"] * 100, g["predicted_efficiency_overlap"] * 100
        if hi.notna().any():
            ax.errorbar(x, (lo + hi) / 2, yerr=(hi - lo) / 2, fmt="none", color=color, capsize=5, alpha=0.6,
                        label=f"{where}: predicted (no overlap … full overlap)")
    ax.set_xticks(range(len(values)), [f"{v:g}" if isinstance(v, float) else str(v) for v in values])
    ax.set_xlabel(lever)
    ax.set_ylabel("parallel efficiency (%)")
    ax.set_ylim(0, 110)
    ax.set_title(_title(f"Efficiency against {lever}", scaling))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    _finish(fig, scaling)
    return fig


def busbw_figure(bench: pd.DataFrame):
    """nccl-tests' picture: busbw climbs with message size until the link is full."""
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    for _, b in bench.iterrows():
        rows = sorted(b["rows"], key=lambda r: r["bytes"])
        hw = b["device"] if b["accelerator"] == "gpu" else "CPU"
        ax.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], "o-", ms=4,
                label=f"{b['world_size']} ranks on {b['nodes']} node{'s' if b['nodes'] > 1 else ''}, "
                      f"{b['backend']}, {hw} ({_which(b)})")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_bytes(int(x))))
    ax.set_xlabel("message size (bytes per rank, log scale)")
    ax.set_ylabel("bus bandwidth busbw (GB/s = 1e9 B/s)")
    hws = sorted({f"{b['backend']} on {b['device'] if b['accelerator'] == 'gpu' else 'CPU'}"
                  for _, b in bench.iterrows()})
    ax.set_title(f"All-reduce bus bandwidth vs message size\n{' / '.join(hws)}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def _which(b: pd.Series) -> str:
    """A log by its file name and the column drawn; a scalelab benchmark by its run id's hash."""
    if isinstance(b.get("log"), str):
        return f"{os.path.basename(b['log'])}, {b['source'].get('column', 'in-place')}"
    return b["run_id"][-8:]


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
                    for lever, rows in levers.families(scaling)]
    if not bench.empty:
        figures.append(("allreduce_busbw.png", busbw_figure(bench)))
    return save(folder, figures)


def save(folder: str, figures: list) -> list:
    """[(file name, Figure)] as PNGs in folder, each written atomically; the paths written."""
    paths = []
    for name, fig in figures:
        path = os.path.join(folder, name)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=DPI)
        try:
            paths.append(results.atomic_write_bytes(path, png.getvalue()))  # a reader never sees half a PNG
        except OSError as exc:
            raise UsageError(f"--plot: cannot write {path} ({exc.strerror})") from None
    return paths
