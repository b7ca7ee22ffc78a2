"""`benchmark.py --plot`: one step at each scale, rank by rank, on one time axis (step_timeline_<group>.png).

What the step table says in medians, drawn as the marks of one step (measure/timeline.py): forward, backward's
compute, the wait for the network, the optimizer, and under each rank its collectives from call to completion. On one
node DDP's all-reduce is short and mostly inside backward; over a slow link it runs on past backward's end and the
rank waits (red). Beside each configuration, the "Where the step goes" cells of its row (tables.story_cells): the
picture and the table say the same figures. The step drawn is the run's nearest its median step time.
"""

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scalelab.keys import SCALE
from scalelab.measure import timeline
from scalelab.report import labels
from scalelab.report.cells import fmt_num
from scalelab.report.tables import story_cells

COLORS = {"forward": "#4C72B0", "backward": "#55A868", "waiting": "#C44E52", "optimizer": "#8C8C8C",
          "collective": "#DD8452"}
MAX_RANKS = 4  # rows per configuration: the first two and the last two ranks of a larger one


def chosen_run(runs: pd.DataFrame, row) -> str | None:
    """The completed run of a configuration whose median step is the median of its repeats' (the first of two)."""
    mine = runs[(runs["status"] == "completed") & (runs["group"] == row["group"])]
    for key in SCALE:
        mine = mine[mine[key].astype(str) == str(row[key])]
    mine = mine.dropna(subset=["step_s"]).sort_values(["step_s", "run_id"])
    return None if mine.empty else mine.iloc[(len(mine) - 1) // 2]["run_id"]


def chosen_runs(runs: pd.DataFrame, scaling: pd.DataFrame) -> set:
    """The run ids the timelines may draw: each configuration's chosen run (the only results read whole)."""
    return {chosen_run(runs, row) for _, row in scaling.iterrows()} - {None}


def shown_ranks(ranks: list) -> list:
    """The ranks drawn: all up to MAX_RANKS, else the first two and the last two."""
    ranks = sorted(ranks)
    return ranks if len(ranks) <= MAX_RANKS else ranks[:2] + ranks[-2:]


def group_timelines(records: list, runs: pd.DataFrame, g: pd.DataFrame) -> list:
    """[(configuration's name, its scaling row, run id, its timeline)] of a group, in scale order; configurations
    whose run kept no timeline (an older scalelab's result) are left out."""
    g = g.sort_values(SCALE)
    by_id = {}
    for r in records:  # a run id two results share (frames.identity_notes): the first one's timeline
        by_id.setdefault(r["run_id"], r)
    out = []
    for name, (_, row) in zip(labels.names(g), g.iterrows()):
        run_id = chosen_run(runs, row)
        line = timeline.of_run(by_id[run_id]) if run_id in by_id else None
        if line:
            out.append((name, row, run_id, line))
    return out


def caption(row) -> str:
    """The step table's cells of a configuration; a run without probe steps (FSDP) has no wait split from its
    compute: how long its collectives were busy instead."""
    cells = story_cells(row)
    if cells["all-reduce ms"] == "—" and pd.notna(row.get("collectives_s")):
        return (f"step {cells['step ms']} ms · collectives busy {fmt_num(row['collectives_s'] * 1e3)} ms "
                "(no probe steps: no wait split from compute)")
    return (f"step {cells['step ms']} ms · all-reduce {cells['all-reduce ms']} ms · waited {cells['waited ms']} ms · "
            f"hidden {cells['hidden']}")


def figure(letter: str, describe: str, rows: list) -> Figure:  # long: the bars, their labels and the legend
    """The group's timelines stacked: a compute lane and a thinner collective lane under it per rank."""
    height = sum(len(shown_ranks(list(line["ranks"]))) for *_, line in rows)
    fig = Figure(figsize=(11, 1.2 + 0.55 * height + 0.5 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    y, ticks, names = 0.0, [], []
    for name, row, _, line in rows:
        ax.text(0, y - 0.55, f"{name}: {caption(row)} (medians; drawn: step {line['step']})", fontsize=8,
                va="bottom")
        for rank in shown_ranks(list(line["ranks"])):
            for bar in line["ranks"][rank]:
                lane, tall = (y, 0.5) if bar.track == "compute" else (y + 0.32, 0.18)
                ax.broken_barh([(bar.start * 1e3, (bar.end - bar.start) * 1e3)], (lane - tall / 2, tall),
                               facecolors=COLORS[bar.kind], edgecolor="white", linewidth=0.3)
            ticks.append(y)
            names.append(f"rank {rank}")
            y += 0.9
        y += 0.6
    ax.set_yticks(ticks, names, fontsize=8)
    ax.set_ylim(y - 0.6, -1.0)  # top down, with room for the first configuration's line
    ax.set_xlabel("ms from the step's start")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"One step at each scale — group {letter}: {describe}\n"
                 "top lane: forward, backward's compute, waiting for the network, optimizer; "
                 "thin lane: each collective from its call to its end", fontsize=9)
    fig.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()], loc="outside lower center", fontsize=8,
               ncols=len(COLORS))
    return fig


def figures(records: list, runs: pd.DataFrame, scaling: pd.DataFrame) -> list:
    """[(file name, Figure)] per group that ran on more than one device and kept its steps' marks."""
    out = []
    for _, g in scaling.sort_values("letter").groupby("group", sort=False):
        if g["world_size"].max() < 2:
            continue
        rows = group_timelines(records, runs, g)
        if any(row["world_size"] > 1 for _, row, *_ in rows):
            letter = g["letter"].iloc[0]
            out.append((f"step_timeline_{letter}.png", figure(letter, g["describe"].iloc[0], rows)))
    return out
