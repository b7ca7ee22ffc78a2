"""The all-reduce benchmarks' figure: busbw against message size per configuration, as nccl-tests draws it."""

import os

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from scalelab.keys import SCALE
from scalelab.perfmodel.network import human_bytes
from scalelab.report import explain, labels, marks, plausible


def bench_names(bench: pd.DataFrame) -> list:
    """Each all-reduce benchmark by what sets it apart ("2 dev, 2 nodes, emulated 200 Mbit/s"; the backend,
    hardware or dtype where those differ); repeats of one configuration by the time they ran (and the date, where
    they ran on several days), never a run id."""
    frame = bench.assign(hardware=[d if a == "gpu" else "CPU" for a, d in zip(bench["accelerator"], bench["device"])])
    names = labels.names(frame)
    for field in ("backend", "hardware", "dtype"):
        if frame[field].astype(str).nunique() > 1:
            names = [f"{n}, {v}" for n, v in zip(names, frame[field])]
    repeated = pd.Series(names).duplicated(keep=False)
    created = [str(c or "") for c in frame["created"]]
    days = {}  # a name's repeats on several days (a site's nights, all at 04:00) by date and time
    for n, c in zip(names, created):
        days.setdefault(n, set()).update([c[:10]] if c else [])
    return [f"{n}, run at {c[:10] + ' ' if len(days[n]) > 1 else ''}{c[11:19]}" if again and c else n
            for n, again, c in zip(names, repeated, created)]


def busbw_figure(bench: pd.DataFrame):
    """nccl-tests' picture: busbw climbs with message size until the link is full. Of a configuration benchmarked
    more often (a site's nightly folder: thousands), the newest PER_CONFIGURATION runs, and the legend says so. A
    point above its emulated link's rate carries the report's "!", and the caption says why it can be."""
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    newest = explain.newest_benchmarks(bench)
    left = len(bench) - len(newest)
    bench = newest.sort_values([*SCALE, "created"])
    above = {}  # link label: its rate in GB/s, where a point is above it
    for (_, b), name in zip(bench.iterrows(), bench_names(bench)):
        rows = sorted(b["rows"], key=lambda r: r["bytes"])
        log = f", {_which(b)}" if isinstance(b.get("log"), str) else ""  # an imported log: its file and column
        line, = ax.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], "o-", ms=4, label=name + log)
        for r in rows:
            if plausible.above_link(r["busbw_GBps"], b["link_gbit"]):
                above[b["link"]] = b["link_gbit"] / 8
                ax.annotate("!", (r["bytes"], r["busbw_GBps"]), xytext=(0, 5), textcoords="offset points",
                            ha="center", fontsize=9, fontweight="bold", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: human_bytes(int(x))))
    ax.set_xlabel("message size (bytes per rank, log scale)")
    ax.set_ylabel("bus bandwidth busbw (GB/s = 1e9 B/s)")
    hws = sorted({f"{b['backend']} on {b['device'] if b['accelerator'] == 'gpu' else 'CPU'}"
                  for _, b in bench.iterrows()})
    ax.set_title(f"All-reduce bus bandwidth vs message size\n{' / '.join(hws)}")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    title = f"the newest {explain.PER_CONFIGURATION} runs of each; {left:,} older not drawn" if left else None
    if len(bench) > BESIDE_AFTER:  # a legend that long covers the lines: beside the axes, the figure wider
        fig.set_size_inches(11, 4.8)
        fig.legend(loc="outside right upper", fontsize=8, title=title, title_fontsize=8)
    else:
        ax.legend(fontsize=8, loc="upper left", title=title, title_fontsize=8)
    fig.set_layout_engine("constrained")
    if above:
        rates = ", ".join(f"{link}: {rate:.3g} GB/s" for link, rate in sorted(above.items()))
        marks.caption(fig, [f"!: busbw above its emulated link's rate ({rates}). A message within the shaper's "
                            "burst (tc tbf's bucket) can pass faster than the rate; a large one cannot: there, the "
                            "shaping or the bytes counted are wrong."])
    return fig


BESIDE_AFTER = 8  # lines a busbw legend holds inside the axes


def _which(b: pd.Series) -> str:
    """An imported nccl-tests log by its file name and the column drawn."""
    return f"{os.path.basename(b['log'])}, {b['source'].get('column', 'in-place')}"
