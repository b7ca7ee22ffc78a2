"""`benchmark.py --history`: each configuration's runs over time, the latest against its own scatter, its changes.

A site that runs scalelab nightly (chapter 14) keeps every result; this view follows one configuration through
them: throughput, efficiency (against the baseline run nearest in time: the same night's), DDP's busbw and the step
split (compute, waited) by date. The latest run is judged against an 80 % band for one run made from the series'
own run-to-run scatter since its last change (perfmodel/noise.py's Scatter, as the report's other bands); a
change is a lasting step in a series' level, found by measure/changes.py (its rule and its false-alarm rate there),
named with its date (the first run after it) and its size.
"""

import math

import numpy as np
import pandas as pd

from scalelab.keys import CONFIGURATION, SCALE
from scalelab.measure import changes, outliers
from scalelab.perfmodel.noise import COVERAGE, Scatter
from scalelab.report import plausible
from scalelab.report.cells import fmt_num, narrow, three_digits
from scalelab.report.forecast_view import report_letters
from scalelab.report.frames import THROUGHPUT_COLUMN

# what a series follows: (column, its name in a line, its unit in a line); throughput's unit is the run's own
METRICS = (("throughput", "throughput", None), ("efficiency", "efficiency", "%"), ("ddp_busbw_GBps", "busbw", "GB/s"),
           ("compute_s", "compute", "ms"), ("waited_s", "waited", "ms"))
MIN_BAND_RUNS = 3  # runs since the last change a band for the latest needs (2 degrees of freedom)
# what a configuration's row keeps of its throughput's judge (the latest judged is its throughput's)
JUDGED_KEPT = ("latest", "band", "not_above_0", "far", "left_out", "left_out_of_band", "streak", "streak_from", "level",
               "before")


def series(runs: pd.DataFrame) -> pd.DataFrame:
    """The completed runs with a date, in time order: `when` (UTC), `throughput` in the run's unit and
    `efficiency` against the group's baseline configuration's run nearest in time."""
    ok = runs[(runs["status"] == "completed")].copy()
    ok["when"] = pd.to_datetime(ok["created"], utc=True, errors="coerce", format="ISO8601")
    ok = ok[ok["when"].notna()].sort_values("when", kind="stable")
    ok["throughput"] = float("nan")
    for unit, column in THROUGHPUT_COLUMN.items():
        ok.loc[ok["unit"] == unit, "throughput"] = ok[column]
    ok["efficiency"] = float("nan")
    for _, g in ok.groupby("group", sort=False):
        base_key = g.sort_values(SCALE).iloc[0][SCALE].tolist()
        base = g[(g[SCALE] == base_key).all(axis=1)]
        nearest = nearest_in_time(base["when"].to_numpy("datetime64[ns]"), g["when"].to_numpy("datetime64[ns]"))
        scale = g["world_size"] / base_key[0]
        ok.loc[g.index, "efficiency"] = g["throughput"].to_numpy() / (
            base["throughput"].to_numpy()[nearest] * scale.to_numpy())
    return ok


def nearest_in_time(times: np.ndarray, when: np.ndarray) -> np.ndarray:
    """For each of `when`, the index of the nearest of `times` (in time order), the earliest of equals: what
    argmin of the |difference| matrix gives, in n log m (a site's 30,000 runs against their 8,000 baselines: a
    matrix of 2 GB, and the report killed for its memory)."""
    right = np.searchsorted(times, when, side="left")  # the first at or after each
    left = np.maximum(right - 1, 0)  # the last before it; its value's first index below
    first_left = np.searchsorted(times, times[left], side="left")
    after = np.minimum(right, len(times) - 1)
    closer_before = (right > 0) & ((right == len(times)) | (when - times[left] <= times[after] - when))
    return np.where(closer_before, first_left, after)


def follow(runs: pd.DataFrame) -> list:
    """One dict per configuration: its throughput by date, the latest run against its band, its changes per
    metric (what render prints and figures draws: the changes found once)."""
    rows, letters = [], report_letters(runs)
    for key, g in series(runs).groupby(CONFIGURATION, sort=False):
        out = dict(zip(CONFIGURATION, key), letter=letters.get(key[0], "?"), unit=g["unit"].iloc[-1],
                   runs=len(g), first=g["when"].iloc[0], last=g["when"].iloc[-1], changes={},
                   dates=g["when"], throughput=g["throughput"], scaling=g["scaling"].iloc[-1])
        for column, _, _ in METRICS:
            judged = judge(g[column].to_numpy(dtype=float), g["when"])
            out["changes"][column] = judged["changes"]
            if column == "throughput":  # the newest run that measured one is the latest judged (0 too)
                out.update((k, judged[k]) for k in JUDGED_KEPT)
        efficiency = g["efficiency"][g["efficiency"].notna()]  # its level where it names no change (impossible)
        out["efficiency_now"] = float(efficiency.median()) if len(efficiency) else None
        rows.append(out)
    return sorted(rows, key=lambda r: (r["letter"], r["world_size"], r["num_nodes"], r["link"]))


def judge(values, dates: pd.Series) -> dict:
    """A series in time order (values, their dates): its changes [(date of the first value after, Change)] among
    its values above 0, its latest finite value (0 or below: a run that measured nothing, never inside a band) and
    the 80 % band for it from the values since the last change before it (None: too few); `not_above_0`: how many
    finite values were 0 or below, left out of the changes and the band; `far`: [(date, value)] of those far from
    the values around them, taken at their neighbours' median in the search for changes (outliers.tamed);
    `left_out_of_band`: how many since the last change the band left out as unusual. The one rule for the report's
    series and a perflog's (perflog.py)."""
    values = np.asarray(values, dtype=float)
    finite = np.isfinite(values)
    keep = finite & (values > 0)
    kept, at = values[keep], np.flatnonzero(keep)  # dates read only where a change is (not 100,000 objects each)
    judged, raw = len(kept) >= changes.SHORTEST, np.log(kept)
    logs = outliers.tamed(raw) if judged else raw  # as the search takes them: once, for it and for `far`
    found = changes.found_in(raw, logs) if judged else []
    latest = values[finite][-1] if finite.any() else float("nan")
    start, noise = found[-1].index if found else 0, outliers.noise(raw)  # the level since the last change
    banded = raw[start:-1] if latest > 0 else raw[start:]  # the latest judged, never its own band
    usual = outliers.usual_mask(banded, noise)
    band = _band(banded[usual])
    left = start + np.flatnonzero(~usual) if len(banded) >= MIN_BAND_RUNS else []
    return {"changes": [(pd.Timestamp(dates.iloc[at[c.index]]), c) for c in found], "latest": latest,
            "band": band, "not_above_0": int((finite & ~keep).sum()),
            "far": [(pd.Timestamp(dates.iloc[at[i]]), float(kept[i])) for i in np.flatnonzero(logs != raw)],
            "left_out": [(pd.Timestamp(dates.iloc[at[i]]), float(kept[i])) for i in left],
            "left_out_of_band": len(left), **_streak(values, np.flatnonzero(finite), dates, band)}


def _streak(values: np.ndarray, finite: np.ndarray, dates: pd.Series, band) -> dict:
    """`streak`: how many of the newest finite values (at `finite`) lie outside the band on the latest's side, one
    after the other (0: the latest inside, or no band); `streak_from`: the date of the first; `level`: the band's
    middle; `before`: where the run before them lies (inside, below, above; None: none)."""
    if band is None or not len(finite):
        return {"streak": 0, "streak_from": None, "level": None, "before": None}
    low, high = band
    values = values[finite]
    below, above = values < low * (1 - ROUNDING), values > high * (1 + ROUNDING)
    inside = np.flatnonzero(~(below if below[-1] else above))
    first = inside[-1] + 1 if len(inside) else 0
    before = None if first == 0 else "below" if below[first - 1] else "above" if above[first - 1] else "inside"
    return {"streak": len(values) - first, "level": math.sqrt(low * high), "before": before,
            "streak_from": pd.Timestamp(dates.iloc[finite[first]]) if first < len(values) else None}


def inside(row: dict) -> str:
    """Whether a judged series' latest value is inside its band: yes, `NO, below` or `NO, above` (which side: a
    night faster than its band is no slowdown), or — (no band, or no latest)."""
    low_high = row["band"]
    if low_high is None or not math.isfinite(row["latest"]):
        return "—"
    low, high = low_high  # the ends are exp(log mean ± reach): a series of one value rounds to its band's edge
    if row["latest"] < low * (1 - ROUNDING):
        return "NO, below"  # 0 too: below any band
    return "NO, above" if row["latest"] > high * (1 + ROUNDING) else "yes"


ROUNDING = 1e-12  # what exp(log(v)) may miss v by (a few ulps), not a measured difference


def band(values: list, noise: float = 0.0):
    """(low, high) of an 80 % band for one new run from these runs' own scatter (geometric mean × e^(±t·sd·√(1 +
    1/n))), its usual runs' (outliers.usual: one contended night at half speed would widen it past a level's step;
    noise, the whole series' scatter, the least it takes for unusual), or None for fewer than MIN_BAND_RUNS."""
    return _band(outliers.usual(_logs(values), noise))


def _logs(values) -> list:
    """The log of each value above 0 (a band's runs)."""
    return [math.log(v) for v in values if v > 0]


def _band(logs):
    """band's (low, high) from the log values it keeps, or None for fewer than MIN_BAND_RUNS."""
    if len(logs) < MIN_BAND_RUNS:
        return None
    mean, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    reach = Scatter(sd, len(logs) - 1).quantile * sd * math.sqrt(1 + 1 / len(logs))
    return math.exp(mean - reach), math.exp(mean + reach)


def _cell(value: float, column: str, unit) -> str:
    if column == "efficiency":
        return f"{value * 100:.0f} %"
    if unit == "ms":
        return f"{fmt_num(value * 1e3)} ms"
    return f"{three_digits(value)} {unit}"


def change_lines(row: dict) -> list:
    """'2026-11-20: throughput −18 % (5,396 → 4,425 tokens/s), efficiency −17 points (94 % → 77 %), ...': one line
    per date; an efficiency in points (a percent of a percent reads as points), one past 100 % + noise marked !."""
    by_date = {}
    for column, name, unit in METRICS:
        for when, c in row["changes"][column]:
            before, after = (_cell(v, column, unit or row["unit"]) + (
                " !" if column == "efficiency" and plausible.past_linear(v, row["scaling"]) else "")
                for v in (c.before, c.after))
            size = f"{c.size * 100:+.0f} %" if column != "efficiency" else \
                f"{_points(c.after) - _points(c.before):+d} points"  # of the levels as printed beside it
            by_date.setdefault(when.strftime("%Y-%m-%d"), []).append(f"{name} {size} ({before} → {after})")
    return [f"{date}: {', '.join(said)}" for date, said in sorted(by_date.items())]


# A judged series (judge's, with its runs, dates and unit) and a change as --export's CSVs hold them: raw numbers,
# a change's size as a fraction, dates ISO 8601 (UTC); inside empty where there is no band, as the band's ends
JUDGED = ["runs", "first", "last", "unit", "latest", "band_low", "band_high", "inside", "not_above_0",
          "far_from_neighbours", "left_out_of_band"]
CHANGED = ["date", "size", "before", "after"]
# history.csv (a configuration's series) and history_changes.csv (a change a row, in the unit its CSV holds:
# efficiency as a fraction, compute and waited in seconds, as the runs' CSV holds them)
SERIES_COLUMNS = [*CONFIGURATION, "letter", *JUDGED]
CHANGE_COLUMNS = [*CONFIGURATION, "letter", "metric", *CHANGED, "unit"]
CSV_UNIT = {"%": "fraction", "ms": "s"}  # a metric's unit in a line (METRICS) -> the unit its CSV cell is in


def judged_cells(row: dict) -> list:
    """A judged series' JUDGED cells."""
    low, high = row["band"] or (None, None)
    said = inside(row)
    return [row["runs"], row["first"].isoformat(), row["last"].isoformat(), row["unit"], row["latest"], low, high,
            None if said == "—" else said, row["not_above_0"], len(row["far"]), row["left_out_of_band"]]


def left_out_lines(row: dict, shown) -> list:
    """What a judged series (judge's) took otherwise than as measured, a line each: its runs far from the runs
    around them (each date and value, `shown` in its unit) and those its band left out."""
    lines = []
    if row["far"]:
        lines.append(f"{len(row['far'])} run(s) over {outliers.WILD:g} scatters from the runs around them, taken at "
                     f"their neighbours' median in the search for changes: {_dated(row['far'], shown)}")
    if row["left_out_of_band"]:
        lines.append(f"{row['left_out_of_band']} run(s) since the last change left out of the band: over "
                     f"{outliers.OUTLIER:g} scatters from their median: {_dated(row['left_out'], shown)}")
    return lines


def _dated(runs: list, shown) -> str:
    """'2026-09-26 (5,071 tokens/s), …': the first FAR_NAMED of [(date, value)], the rest counted."""
    named = ", ".join(f"{when.strftime('%Y-%m-%d')} ({shown(value)})" for when, value in runs[:FAR_NAMED])
    return named + (f" and {len(runs) - FAR_NAMED} more" if len(runs) > FAR_NAMED else "")


def latest_lines(row: dict, shown) -> list:
    """Where a judged series' latest lies outside its band: how far from its level, and how many runs in a row
    (their first date): one night off, or a level too young to be named a change yet; none where it is inside."""
    said = inside(row)
    if not said.startswith("NO") or row.get("level") is None or not row["latest"] > 0:
        return []  # (a latest of 0: a run that measured nothing, said in a line of its own)
    side, k = said[4:], row["streak"]
    line = (f"the latest {abs(row['latest'] / row['level'] - 1) * 100:.0f} % {side} its level ({shown(row['level'])}, "
            f"its band's middle)")
    if k < 2 and row["far"] and row["far"][-1][0] == row["streak_from"]:  # far from its neighbours too
        return [line + "; one run so far, far from the runs around it: a night off (a node shared, a link lost?) "
                       "until more runs hold it; a new level is named a change once it has held "
                       f"{changes.MIN_SEGMENT} runs"]
    if k < 2:  # as often as not an ordinary night: an 80 % band leaves one in five outside
        return [line + f"; the run before it {'inside' if row['before'] == 'inside' else row['before'] + ' it'}: one "
                       f"run in {1 / (1 - COVERAGE):.0f} lies outside an {COVERAGE * 100:.0f} % band by chance"]
    line += f"; {k} runs in a row {side} the band, since {row['streak_from'].strftime('%Y-%m-%d')}"
    return [line + (f": a new level is named a change once it has held {changes.MIN_SEGMENT} runs"
                    if k < changes.MIN_SEGMENT else "")]


FAR_NAMED = 5  # the far runs a line names by date; the rest counted


def change_cells(when, change) -> list:
    """A change's CHANGED cells."""
    return [when.isoformat(), change.size, change.before, change.after]


def exported(rows: list) -> tuple:
    """(series, changes): follow's rows as the frames --export writes (SERIES_COLUMNS, CHANGE_COLUMNS)."""
    series_rows, change_rows = [], []
    for r in rows:
        where = [*(r[k] for k in CONFIGURATION), r["letter"]]
        series_rows.append([*where, *judged_cells(r)])
        change_rows += [[*where, name, *change_cells(when, c), CSV_UNIT.get(unit, unit) or r["unit"]]
                        for column, name, unit in METRICS for when, c in r["changes"][column]]
    return pd.DataFrame(series_rows, columns=SERIES_COLUMNS), pd.DataFrame(change_rows, columns=CHANGE_COLUMNS)


def render(rows: list, fmt: str = "simple") -> list:
    """The history table and each configuration's changes (follow's rows), as the report prints them."""
    if not rows:
        return ["History: no completed run with a date (`created`) to follow.", ""]
    table, said = [], [change_lines(r) for r in rows]
    for r, lines in zip(rows, said):
        low_high = r["band"]
        table.append([r["letter"], r["world_size"], _nodes(r), r["runs"], r["first"].strftime("%Y-%m-%d"),
                      r["last"].strftime("%Y-%m-%d"), _cell(r["latest"], "throughput", r["unit"]),
                      "too few runs" if low_high is None else
                      f"{fmt_num(low_high[0], ',.0f')}–{fmt_num(low_high[1], ',.0f')}", inside(r),
                      len(lines)])
    lines = ["History (each configuration's runs by date; the latest against an 80 % band for one run from the "
             "series' own scatter since its last change; a change: a lasting step in a series' level, named by "
             "the first run after it)",
             narrow(table, ["group", "world size", "nodes", "runs", "from", "to", "latest", "80 % band",
                            "inside", "changes"], fmt)]
    newest = max(r["last"] for r in rows)
    for r, dated in zip(rows, said):
        lines += _row_lines(r, dated, newest)
    if not any(said):
        lines.append("  " + no_change(rows))
    return [*lines, ""]


def _row_lines(r: dict, dated: list, newest) -> list:
    """The lines under the history table for one configuration: its changes (a level that cannot be weak scaling
    flagged), its runs that measured nothing, how far its latest lies outside its band, what its search and band
    took otherwise than measured, and whether it ran at all lately (newest: the folder's newest run's date)."""
    where, shown = f"{r['letter']} {r['world_size']} device(s), {_nodes(r)} node(s): ", \
        lambda v, unit=r["unit"]: _cell(v, "throughput", unit)
    lines = [f"  {where}{line}" for line in dated] + [f"  ! {where}{line}" for line in impossible(r)]
    if r["not_above_0"]:
        lines.append(f"  {where}{r['not_above_0']} completed run(s) with a throughput of 0 or below, left out of its "
                     "changes and band")
    lines += [f"  {where}throughput: {line}" for line in latest_lines(r, shown) + left_out_lines(r, shown)]
    days = r["dates"].dt.normalize().drop_duplicates()  # the days it ran (repeats, a job array: one day each)
    gap = days.diff().median() if len(days) > 1 else None
    if gap is not None and newest.normalize() - days.iloc[-1] > 2 * gap:  # stopped: its latest is not last night's
        lines.append(f"  {where}no run since {r['last'].strftime('%Y-%m-%d')}, where it ran every {gap.days} day(s) "
                     f"and the folder's newest run is of {newest.strftime('%Y-%m-%d')}: its latest is not the newest "
                     "night's")
    return lines


def impossible(row: dict) -> list:
    """A line for each efficiency level past what weak scaling allows (plausible.past_linear): either side of a
    change, or the series' own where it names none (efficiency_now)."""
    levels = [(level, f"{when_said} {when.strftime('%Y-%m-%d')}") for when, c in row["changes"]["efficiency"]
              for level, when_said in ((c.before, "before"), (c.after, "from"))]
    if not levels and row.get("efficiency_now") is not None:
        levels = [(row["efficiency_now"], f"over its {row['runs']} runs")]
    return [f"efficiency {level * 100:.0f} % {when} cannot be weak scaling: each device does what one baseline "
            f"device did, so none can pass 100 % (+ {plausible.NOISE_FLOOR * 100:.0f} % noise); check the runs' "
            "fingerprints and their baseline's (the Scaling table's checks)"
            for level, when in levels if plausible.past_linear(level, row["scaling"])]


def _points(fraction: float) -> int:
    """An efficiency as the whole percent _cell prints: a change in points is the difference of those."""
    return int(f"{fraction * 100:.0f}")


def no_change(rows: list) -> str:
    """What no change named means: every level held, or some series (or all) too short to show one; never that
    every level held where a judged series' latest is outside its band (a shorter one's said apart)."""
    need = changes.SHORTEST
    short = [r for r in rows if r["runs"] < need]
    if len(short) == len(rows):
        return (f"No change can be named yet: a series is judged from {need} runs on (a change: {changes.MIN_SEGMENT} "
                f"or more on each side); the longest here has {max(r['runs'] for r in rows)}.")
    off, off_short = (sum(inside(r).startswith("NO") for r in part) for part in ([r for r in rows if r["runs"] >= need],
                                                                               short))
    held = (f", but the latest is outside its band in {off} of them (the lines above say how far and since when)"
            if off else "")
    if short:
        return (f"No change in the {len(rows) - len(short)} series of {need} runs or more" +
                (held or ": each level held within its own scatter") + f"; {len(short)} shorter series not judged" +
                (f" (the latest of {off_short} outside its band)" if off_short else "") + ".")
    return "No change in any series" + (held + "." if off else ": every level held within its own scatter.")


def _nodes(r: dict) -> str:
    return f"{r['num_nodes']} ({r['link']})" if r["link"] and r["num_nodes"] > 1 else str(r["num_nodes"])


def figures(rows: list) -> list:
    """[(history_<letter>.png, Figure)]: each group's throughput per configuration by date (follow's rows),
    changes marked."""
    from matplotlib.figure import Figure

    out = []
    for letter in sorted({r["letter"] for r in rows}):
        fig = Figure(figsize=(9, 4.5))
        ax = fig.subplots()
        group = [r for r in rows if r["letter"] == letter]
        labels = 0  # each change's label a step below the last: two changes a week apart, or one night's in
        for k, r in enumerate(group):  # each configuration, printed over each other
            line, = ax.plot(r["dates"], r["throughput"], marker=".", linewidth=0.8,
                            label=f"{r['world_size']} device(s), {_nodes(r)} node(s)")
            color, measured = line.get_color(), np.isfinite(np.asarray(r["throughput"], dtype=float))
            if r["band"] is not None and measured.any():  # the latest judged against its band (the table's inside)
                ax.plot([r["dates"].iloc[np.flatnonzero(measured)[-1]]] * 2, r["band"], color=color, linewidth=4,
                        alpha=0.35, solid_capstyle="butt", label=None if any(
                            o["band"] is not None for o in group[:k]) else "80 % band for the latest")
            if r["far"]:  # taken at their neighbours' median in the search for changes
                ax.plot([w for w, _ in r["far"]], [v for _, v in r["far"]], "x", color=color, markersize=7,
                        label="far from its neighbours" if not any(o["far"] for o in group[:k]) else None)
            for when, c in r["changes"]["throughput"]:
                ax.axvline(when, color=color, linestyle="--", linewidth=0.8)
                ax.annotate(f"{c.size * 100:+.0f} %", (when, 0.97 - 0.07 * (labels % 3)),
                            xycoords=("data", "axes fraction"), color=color, fontsize=8, ha="left", va="top",
                            xytext=(3, 0), textcoords="offset points",
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
                labels += 1
        first, last = min(r["dates"].min() for r in group), max(r["dates"].max() for r in group)
        if first == last:  # one night: matplotlib's own limits for a single date span four years
            ax.set_xlim(first - pd.Timedelta(days=1), last + pd.Timedelta(days=1))
        ax.set_title(f"Group {letter}: throughput by date (dashed: a change in its level; bar: the latest's band)")
        ax.set_ylabel(group[0]["unit"])  # the group's own: an MLP's samples/s beside a GPT's tokens/s
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
        out.append((f"history_{letter}.png", fig))
    return out
