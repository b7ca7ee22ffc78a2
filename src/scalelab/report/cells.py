"""Table cells: one way to print a number, a percentage or a missing value, for every table of the report."""

import math

import pandas as pd
import tabulate as tabulate_module
from tabulate import tabulate


def fmt_num(x, spec=",.1f", missing="—"):
    """A number for a table cell; "—" where it is missing (None or NaN)."""
    return missing if x is None or pd.isna(x) else format(x, spec)


def three_digits(x) -> str:
    """A measured value to 3 significant digits, a trailing 0 too (1.20 beside 0.939, not 1.2), whole from 100 on (not
    "100." of a 99.96, nor "-200."), 0 as 0, e-notation from 1e12; — where missing or not finite."""
    if x is None or pd.isna(x) or not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    return format(x, ",.0f") if 99.95 <= abs(x) < 1e12 else format(x, "#,.3g")


def fmt_pct(x, spec=".0f") -> str:
    """A fraction as a percentage cell (0.25 -> "25 %"); "—" where it is missing."""
    return "—" if x is None or pd.isna(x) else f"{x * 100:{spec}} %"


def predicted_range(r) -> str:
    """Predicted efficiency from no overlap to full overlap ("93–100 %"), one figure where both round alike."""
    lo, hi = r.predicted_efficiency_no_overlap, r.predicted_efficiency_overlap
    if pd.isna(lo) or pd.isna(hi):
        return "—"
    if round(lo * 100) == round(hi * 100):
        return f"{hi * 100:.0f} %"
    return f"{lo * 100:.0f}–{hi * 100:.0f} %"


def money_headers(g: pd.DataFrame) -> list:
    """Headers of the cost and token-budget columns a group has figures for (none without --gpu_hour_price)."""
    heads = []
    if g["cost_per_1k_samples"].notna().any():
        heads.append("cost / 1K samples")
    if g["hours_for_token_budget"].notna().any():
        heads.append("hours for token budget")
        if g["cost_for_token_budget"].notna().any():
            heads.append("cost for token budget")
    return heads


def money_cells(r) -> list:
    """The cells under money_headers, for one configuration."""
    cells = []
    if pd.notna(r.cost_per_1k_samples):
        cells.append(f"{r.cost_per_1k_samples:.4g}")
    if pd.notna(r.hours_for_token_budget):
        cells.append(f"{r.hours_for_token_budget:,.1f}")
        if pd.notna(r.cost_for_token_budget):
            cells.append(f"{r.cost_for_token_budget:,.0f}")
    return cells


def device_cells(r) -> list:
    """The range over ranks: "93–98 %" of a GPU's time busy, "0.97–1.00" cores on a CPU ("—": not sampled)."""
    lo, hi = (r.cores_busy_min, r.cores_busy_max) if r.accelerator == "cpu" else (r.util_min, r.util_max)
    if pd.isna(lo) or pd.isna(hi):
        return ["—"]
    if r.accelerator == "cpu":
        return [f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"]
    return [f"{hi * 100:.0f} %" if round(lo * 100) == round(hi * 100) else f"{lo * 100:.0f}–{hi * 100:.0f} %"]


def device_lines(g: pd.DataFrame) -> list:
    """Under a group's scaling table: each configuration's utilization range over its ranks (a line, not a column:
    the table's columns stay what every chapter shows), then its energy (every rank's over the timed window, probe
    steps included) per step and per 1K samples ("—" where not measured); where any is not measured, why, once."""
    if g["util_max"].isna().all() and g["cores_busy_max"].isna().all():
        return []
    cpu = (g["accelerator"] == "cpu").all()
    what = "cores busy (CPU seconds ÷ wall seconds" if cpu else "busy (the share of time a kernel ran"
    out = [f"  {what}, range over ranks, sampled beside the timed steps): " + "; ".join(
        f"{device_cells(r)[0]} at {config_words(r)}" for r in g.itertuples())]
    if g["energy_per_1k_samples_J"].notna().any():
        out.append("  energy per step, per 1K samples (every rank, the timed window): " + "; ".join(
            f"{r.world_size:.0f} dev {fmt_num(r.energy_per_step_J, ',.4g')} J, "
            f"{fmt_num(r.energy_per_1k_samples_J, ',.4g')} J" for r in g.itertuples()))
    if g["energy_per_1k_samples_J"].isna().any():
        notes = [n for n in g.loc[g["energy_per_1k_samples_J"].isna(), "energy_note"] if isinstance(n, str) and n]
        out.append(f"  energy: — ({notes[0] if notes else 'not measured'})")
    return out


def config_words(r) -> str:
    """"2 dev", "2 dev, 2 nodes, emulated 2 Gbit/s": one configuration of a group, in words."""
    link = getattr(r, "link", "")
    return (f"{r.world_size:.0f} dev" + (f", {r.num_nodes:.0f} nodes" if r.num_nodes > 1 else "")
            + (f", {link}" if isinstance(link, str) and link else ""))


def nodes_cell(r) -> str:
    """The nodes column: the count, and the link where it was emulated ("2 (emulated 1 Gbit/s)")."""
    link = getattr(r, "link", "")
    return f"{r.num_nodes} ({link})" if isinstance(link, str) and link else str(r.num_nodes)


def narrow(rows, headers, fmt: str) -> str:
    """tabulate without its 2 characters of padding beyond the widest cell: the tables a terminal shows stay narrow."""
    padding, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0
    try:
        return tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
    finally:
        tabulate_module.MIN_PADDING = padding


def blocks(text: str) -> str:
    """Markdown (GitHub's) with a blank line after each table: a line right under a table's last row is read as one
    more row of it, and a report's notes under its tables rendered as rows."""
    lines, out = text.split("\n"), []
    for line, after in zip(lines, [*lines[1:], ""]):
        out.append(line)
        if line.startswith("|") and after.strip() and not after.startswith("|"):
            out.append("")
    return "\n".join(out)
