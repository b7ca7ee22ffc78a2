"""The forecast as the report prints it: the track record on the runs made, and the scales not run (--forecast)."""

from __future__ import annotations

import itertools

import pandas as pd
from tabulate import tabulate

from scalelab.keys import CONFIGURATION, configuration
from scalelab.perfmodel import forecast as fc
from scalelab.perfmodel import noise
from scalelab.perfmodel.network import human_rate
from scalelab.report import plausible
from scalelab.report.cells import fmt_num, fmt_pct, narrow
from scalelab.report.explain import PER_CONFIGURATION, newest_benchmarks
from scalelab.report.frames import group_letters

MAX_TRACKED = 40  # configurations the track record predicts (each one recalibrates without it)


def completed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a forecast learns from and the track record judges: completed, timed, the same job as their
    group's baseline (a run that ran another step than its baseline, plausible.job_differences, would fit an
    exposure to that difference) and not starved (a rank that had a core under cpushare.QUIET of its ready time
    measured other work beside it, not scaling: contended()). DDP and FSDP alike: FSDP's all-gathers and
    reduce-scatters enter as the all-reduces they cost (perfmodel.sharding), and a strategy is its own group."""
    same = runs["job_differs"] == "" if "job_differs" in runs else True
    return runs[(runs["status"] == "completed") & runs["step_s"].notna() & same & ~contended(runs)]


def contended(runs: pd.DataFrame) -> pd.Series:
    """The completed runs the report flags for contention (the starved column): left out of every fit and score."""
    if "starved" not in runs:
        return pd.Series(False, index=runs.index)
    return (runs["status"] == "completed") & (runs["starved"].fillna("") != "")


def records(runs: pd.DataFrame) -> list:
    """The completed runs as plain records of the fields a calibration reads (perfmodel.forecast.FIELDS): built
    once, read many times (the track record recalibrates once per configuration)."""
    return list(completed(runs)[list(fc.FIELDS)].itertuples(index=False))


def bench_points(bench: pd.DataFrame) -> dict:
    """network key -> [Point]: the benchmark frame's rows (perfmodel.forecast.bench_points), of the newest
    PER_CONFIGURATION benchmarks of each configuration, as `recent` reads runs (a nightly folder holds years)."""
    return fc.bench_points(newest_benchmarks(bench).itertuples())


def recent(runs: pd.DataFrame) -> pd.DataFrame:
    """The completed runs a calibration reads: the newest PER_CONFIGURATION of each configuration."""
    return (completed(runs).sort_values("created")
            .groupby(CONFIGURATION, sort=False).tail(PER_CONFIGURATION))
SHARDED = {"fsdp": ", FSDP (sharded)"}  # how a forecast's heading names a strategy other than DDP
POINTS = {"fsdp": "collective(s)"}  # what a strategy's ring fit was fitted on, where not all-reduces
# What the forecast's one line adds: a lever setting each, and what it changes in the forecast's arithmetic.
WHAT_IFS = (("--comm_hook bf16", {"wire_ratio": 0.5}), ("--accumulate_grad_batches 4", {"accumulate": 4}))


def report_letters(runs: pd.DataFrame) -> dict:
    """The letters the printed report, its plots and files give the groups (frames.scaling_frame): of the completed
    runs in the folder's order, before `recent` puts them newest last."""
    return group_letters(runs[runs["status"] == "completed"]["group"])


def band_cell(band, pct=True) -> str:
    """'75 % (72–79)' or, for seconds, '259.5 (247.1–272.8)' ms."""
    if pct:
        return f"{band.mid * 100:.0f} % ({band.low * 100:.0f}–{band.high * 100:.0f})"
    return f"{fmt_num(band.mid * 1e3)} ({fmt_num(band.low * 1e3)}–{fmt_num(band.high * 1e3)})"


def record(runs: pd.DataFrame, bench: pd.DataFrame) -> pd.DataFrame:
    """The track record: every multi-device configuration (its newest run) predicted from all the other runs."""
    runs = recent(runs)
    recs, points = records(runs), bench_points(bench)
    calibrated = set(fc.calibrate_all(recs, points))
    newest = runs.groupby(CONFIGURATION, sort=False).tail(1)
    newest = newest[(newest["world_size"] > 1) & newest["group"].isin(calibrated)].tail(MAX_TRACKED)
    rows = fc.track_record(recs, points, only=set(newest["run_id"]) if not newest.empty else set())
    return pd.DataFrame(rows, columns=list(fc.TRACK_COLUMNS))


def with_forecast_error(scaling: pd.DataFrame, track: pd.DataFrame) -> pd.DataFrame:
    """The scaling frame plus `forecast_error`: |predicted − measured| efficiency of the configuration's newest run,
    in points, from the track record (a nightly --reference check can bound it)."""
    if scaling.empty:
        return scaling
    err = {configuration(r): abs(r.predicted_eff - r.measured_eff) * 100 for r in track.itertuples()}
    return scaling.assign(forecast_error=[err.get(configuration(r)) for r in scaling.itertuples()])


WIDE_BAND = 0.5  # a band wider than half the efficiency scale holds almost any measurement: it informs nothing
X_NAMED = "its exposed factor x (the step's growth ÷ its all-reduce time)"  # forecast.py's x, named where met


def wide_why(exposure_from: str) -> str:
    """Why a band came out too wide, and what narrows it, by where its exposed factor x came from (X_NAMED)."""
    if "other workloads'" in exposure_from:  # forecast.exposure_for's words
        return (f"{X_NAMED} borrowed from other workloads' runs, whose per-step costs are not this one's (its own "
                "runs at another scale or link, repeated, would give it its own)")
    if exposure_from.startswith("none measured"):
        return (f"no multi-device run to read {X_NAMED} from, so x spans 0 to {fc.UNMEASURED_X:g} (a run of it at "
                "another scale or link, repeated, measures it)")
    if "fixed cost" in exposure_from or "other level" in exposure_from:  # read at another all-reduce time
        return (f"{X_NAMED} read from its runs at another all-reduce time, as a share of the all-reduce and as a "
                "fixed cost per step, which those runs cannot tell apart (runs of it at two all-reduce times would)")
    return ("too few or too noisy runs to fit the model from; more repeats of each configuration narrow them "
            "(the demo's --repeats 3)")


def track_record(runs: pd.DataFrame, track: pd.DataFrame, fmt: str = "simple", details: bool = True) -> list:
    """The track record as the report prints it: the model's record on this cluster, per workload (details: with
    where each prediction's exposure came from, a long column)."""
    if track.empty:  # nothing judged: say so where the runs that would have been were left out
        said = left_out(runs)
        return ["Track record: nothing judged", *said, ""] if said else []
    letters = report_letters(runs)
    wide = (track["eff_high"] - track["eff_low"]) > WIDE_BAND
    rows = [[letters.get(r.group, "?"), r.world_size, _nodes(r), band_cell(fc.Band(r.eff_low, r.predicted_eff,
                                                                                 r.eff_high)),
             fmt_pct(r.measured_eff), ("too wide" if r.inside else "NO, too wide") if too_wide else "yes" if r.inside
             else "NO",
             f"{r.predicted_step_s * 1e3:,.1f}", f"{r.measured_step_s * 1e3:,.1f}", r.exposure_from.split(" (")[0]]
            [:None if details else -1] for r, too_wide in zip(track.itertuples(), wide)]
    inside, counted = int(track.loc[~wide, "inside"].sum()), int((~wide).sum())
    judged = track[~wide]  # the error, as the share inside, of the bands counted: a too-wide band's middle says nothing
    err = (judged["predicted_eff"] - judged["measured_eff"]).abs().median() * 100
    promise = f"{noise.COVERAGE * 100:.0f} %"
    notes = [f"{inside / counted * 100:.0f} %"] if counted else []
    if wide.any():  # "8 % (8–128)" is inside whatever was measured: counting it would say nothing
        why = track.loc[wide, "exposure_from"].map(wide_why).value_counts(sort=False)
        notes.append("; ".join(f"{n} band(s) wider than {WIDE_BAND * 100:.0f} points not counted: {reason}"
                               for reason, n in why.items()))
        missed = track[wide & ~track["inside"].astype(bool)]  # a miss of even a wide band is news
        if len(missed):
            above = int((missed["measured_eff"] > missed["eff_high"]).sum())
            notes.append(f"{len(missed)} of them missed even so ({above} above it, {len(missed) - above} below)")
    said = f"  {inside} of {counted} inside the {promise} band" + (f" ({'; '.join(notes)})" if notes else "")
    return ["Track record (each multi-device configuration predicted from the other configurations' runs; "
            f"{promise} band: where four in five new runs should land; efficiency = 1-device step ÷ step)",
            narrow(rows, ["group", "world size", "nodes", "predicted eff. (band)", "measured", "inside",
                          "predicted step ms", "measured ms", "exposure from"][:None if details else -1], fmt),
            f"{said}; " + (f"median error {err:.1f} points" if counted else "no error to state") +
            ". `--forecast` forecasts the scales not run.",
            *left_out(runs), *plausible.band_past_linear(track, letters),
            "  The bands' run-to-run scatter (each band's without its own configuration's runs: not the Scaling "
            "table's): " + "; ".join(
                f"{letters.get(g, '?')} {scatter_words(t)}" for g, t in track.groupby("group", sort=False)),
            "  Here `measured` is each configuration's newest run (the 1-device runs' median step ÷ its median step), "
            "`predicted` is read from the other configurations' runs only. The Scaling table's `efficiency` is from "
            "throughput instead (each run's samples over its timed steps' total, where slow steps weigh; the median "
            "run), and its `predicted eff.` runs from the 1-device step plus the all-reduce benchmark's price at the "
            "configuration's bucket sizes (no overlap) to the 1-device step alone (full overlap): what the network "
            "alone allows.", ""]


def left_out(runs: pd.DataFrame, of: str = "every fit and of this score") -> list:
    """The one line that says which runs no fit or score read because other work shared their cores, or none."""
    flagged = runs[contended(runs)]
    return [] if flagged.empty else [plausible.left_out(flagged, report_letters(runs), of)]


def scatter_words(rows: pd.DataFrame) -> str:
    """'2.4 % (repeats, 4 degree(s) of freedom)' or '2.7 % (assumed: no repeats to measure it)': the scatter a group's
    bands were built from; a range where its predictions differ (each leaves its configuration's repeats out)."""
    low, high = rows["scatter"].min() * 100, rows["scatter"].max() * 100
    said = f"{low:.1f} %" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f} %"
    dof = rows["scatter_dof"].astype(int)
    if dof.min() == dof.max():
        return said + (f" (repeats, {dof.max()} degree(s) of freedom)" if dof.max() else
                       " (assumed: no repeats to measure it)")
    return said + (f" ({dof.min()}–{dof.max()} degree(s) of freedom{', 0: assumed' if not dof.min() else ''}: each "
                   "prediction leaves its configuration's repeats out)")


def _nodes(r) -> str:
    return f"{r.num_nodes} ({r.link})" if r.link and r.num_nodes > 1 else str(r.num_nodes)


def devices_per_node(runs: pd.DataFrame, group: str) -> int:
    """The shape to forecast: the group's multi-node runs' processes per node, else its largest one-node run."""
    ok = completed(runs[runs["group"] == group])
    multi = ok[ok["num_nodes"] > 1]
    if not multi.empty:  # from the sizes, not launch.devices: a result may leave that null (schema-valid)
        return int((multi["world_size"] // multi["num_nodes"]).max())
    return int(ok["world_size"].max())


def links_to_forecast(runs: pd.DataFrame, cal: fc.Calibration, group: str, link_gbit=None) -> list:
    """The networks between nodes to forecast over: each this workload ran across, else each one measured (the
    benchmark); with --link_gbit, that rate (scaled from a measured emulated rate)."""
    first = completed(runs[runs["group"] == group]).iloc[0]
    keys = [k for k in cal.fits if k[0] == "inter"]
    own = {fc.network(r.num_nodes, r.link, r.accelerator, r.device) for r in completed(runs).itertuples()
           if r.group == group and r.num_nodes > 1}
    keys = [k for k in keys if k in own] or keys
    if link_gbit:
        label = f"emulated {human_rate(link_gbit)}" if any(cal.rates.get(k) for k in keys) else ""
        key = ("inter", label)
        cal.rates.setdefault(key, link_gbit)
        keys = [key]
    return [(fc.network(1, "", first["accelerator"], first["device"]), k) for k in keys] or [
        (fc.network(1, "", first["accelerator"], first["device"]), None)]


def render(runs: pd.DataFrame, bench: pd.DataFrame, num_nodes=fc.DEFAULT_NODES, fmt: str = "simple", token_budget=None,
           gpu_hour_price=None, link_gbit=None) -> list:
    """Per workload and per network between nodes: the forecast table, its one-line answer, the levers, and every
    fitted figure with its source runs."""
    out, everything = [], runs
    letters = report_letters(runs)
    runs = recent(runs)
    cals = fc.calibrate_all(records(runs), bench_points(bench))
    for group, cal in cals.items():
        gpn = devices_per_node(runs, group)
        steps = {}  # network key -> its forecast rows: no faster link may forecast a slower step (inverted)
        for intra_key, inter_key in links_to_forecast(runs, cal, group, link_gbit):
            rows, notes = fc.forecast(cal, intra_key, inter_key, gpn, num_nodes)
            steps[inter_key] = rows
            where = fc.level_name(inter_key) if inter_key else "one node (no measurement between nodes)"
            out.append(f"Forecast, group {letters.get(group, '?')}: {cal.describe}{SHARDED.get(cal.strategy, '')}, "
                       f"{gpn} device(s) per node, {where} (weak scaling)")
            out.append(tabulate([_row(f, cal, token_budget, gpu_hour_price) for f in rows],
                                headers=_headers(cal, token_budget, gpu_hour_price), tablefmt=fmt,
                                disable_numparse=True))
            out.append("  " + one_line(cal, intra_key, inter_key, gpn, num_nodes, rows))
            out += ["  " + line for line in sources(cal, notes)]
            out.append("")
        for line in inverted(cal, steps):
            out += [f"  ! group {letters.get(group, '?')}: {line}", ""]
    if out:
        out += left_out(everything, "every forecast's fit")
        out.append("  The ring model is what NCCL does on one ring per node; its tree and NVLS algorithms, and nodes "
                   "with several network cards (one ring each), can beat it beyond one node: the forecast assumes the "
                   "measured rate per node, whatever the algorithm.")
    return out


def inverted(cal: fc.Calibration, steps: dict) -> list:
    """A line per pair of links, alike but for their rate, whose forecasts cannot both be right (the faster's step
    longer).

    steps: network key -> forecast rows. Links are compared only where their stated rates differ and nothing else
    in their names does (an added latency may make a faster link slower). The line says which part inverted: the
    all-reduce (the links' ring fits disagree) or only what the step pays for it (the exposed factors x read for
    each link), and what would tell them apart."""
    rated = sorted((cal.rates[k], k) for k in steps if k is not None and cal.rates.get(k))
    out = []
    for (slow_rate, slow), (fast_rate, fast) in itertools.combinations(rated, 2):
        if fast_rate <= slow_rate or _but_rate(fast, fast_rate) != _but_rate(slow, slow_rate):
            continue
        by_scale = {(f.num_nodes, f.world_size): f for f in steps[slow]}
        worse = [(f, by_scale[key]) for f in steps[fast] if f.num_nodes > 1
                 and (key := (f.num_nodes, f.world_size)) in by_scale and f.step.mid > by_scale[key].step.mid]
        if not worse:
            continue
        f, g = worse[-1]  # the largest scale where it happens: where the gap is widest
        head = (f"the forecast {fc.level_name(fast)} is slower than {fc.level_name(slow)} at "
                f"{', '.join(str(a.num_nodes) for a, _ in worse)} nodes ({f.num_nodes}: {f.step.mid * 1e3:,.1f} "
                f"against {g.step.mid * 1e3:,.1f} ms a step), which no faster link gives")
        if f.allreduce_s > g.allreduce_s:
            fits = ", ".join(f"{_error(cal.fits.get(k))} at {human_rate(rate)}"
                             for k, rate in ((fast, fast_rate), (slow, slow_rate)))
            out.append(f"{head}: the two links' ring fits disagree (their errors: {fits}) at this workload's "
                       f"{cal.nbytes / cal.calls / 1e6:.3g} MB per call; trust neither beyond the measured scales "
                       "(more repeats of each link's benchmark at that size would tell them apart)")
        else:
            out.append(f"{head}: its all-reduce is the shorter ({f.allreduce_s * 1e3:,.1f} against "
                       f"{g.allreduce_s * 1e3:,.1f} ms), but the exposed factors x read for each link disagree; "
                       "trust neither beyond the measured scales (runs of this workload on each link would tell "
                       "them apart)")
    return out


def _but_rate(key, rate) -> str:
    """A link's name without its rate ("emulated  +5 ms"): two links alike but for their rate have the same."""
    return key[1].replace(human_rate(rate), "", 1)


def _error(fit) -> str:
    """A ring fit's error in words: a fit of one point has none to state."""
    return "unknown" if fit is None or fit.points < 2 else f"{fit.residual * 100:.0f} %"


def _headers(cal, token_budget, price) -> list:
    unit = cal.unit
    comm = "all-reduce ms" if cal.strategy != "fsdp" else "gathers+scatters ms"
    h = ["nodes", "world size", comm, "step ms (band)", f"{unit} (band)", "efficiency (band)"]
    if token_budget:
        h.append("time to train h")
    if token_budget and price:
        h.append("cost")
    return h


def _row(f, cal, token_budget, price) -> list:
    row = [f.num_nodes, f.world_size, fmt_num(f.allreduce_s * 1e3), band_cell(f.step, pct=False),
           f"{f.throughput.mid:,.0f} ({f.throughput.low:,.0f}–{f.throughput.high:,.0f})", band_cell(f.efficiency)]
    if token_budget:
        hours = token_budget / f.throughput.mid / 3600
        row.append(f"{hours:,.1f}")
        if price:
            row.append(f"{hours * f.world_size * price:,.0f}")
    return row


def one_line(cal, intra_key, inter_key, gpn, num_nodes, rows) -> str:
    """'DDP above 80 % efficiency (the whole band): up to 8 nodes; with --comm_hook bf16 up to 32; ...'. FSDP's
    line has no what-ifs: --comm_hook is DDP's, and an accumulated FSDP step still all-gathers every batch."""
    def reach(rs):
        n = fc.answer(rs)
        return "not even on one node" if n is None else "on one node only" if n == 1 else f"up to {n} nodes"

    alts = [f"; with {flag} {reach(fc.forecast(cal, intra_key, inter_key, gpn, num_nodes, **kw)[0])}" for flag,
            kw in WHAT_IFS if cal.strategy != "fsdp"]
    return (f"{cal.strategy.upper()} above {fc.GOOD_EFFICIENCY * 100:.0f} % efficiency (the whole band): "
            f"{reach(rows)}{''.join(alts)} (of {', '.join(map(str, num_nodes))} nodes).")


def sources(cal: fc.Calibration, notes: dict) -> list:
    """Every fitted figure and the runs it came from."""
    lines = [f"1-device step {cal.baseline.mid * 1e3:,.1f} ms [{cal.baseline.low * 1e3:,.1f}–"
             f"{cal.baseline.high * 1e3:,.1f}] ({len(cal.baseline_runs)} run(s): {', '.join(cal.baseline_runs[:3])}"
             f"{' …' if len(cal.baseline_runs) > 3 else ''})" + (
                 f", of which compute alone (probe steps) {cal.compute_s * 1e3:,.1f} ms" if cal.compute_s else "")
             + (f"; all-reduced per step: {cal.nbytes / 1e6:.3g} MB in {cal.calls} bucket(s)" if cal.strategy != "fsdp"
                else f"; all-gathered and reduce-scattered per step: as much as all-reduces of {cal.nbytes / 1e6:.3g} "
                     f"MB in {cal.calls} call(s) cost (perfmodel.sharding)")]
    lines.append(f"{noise.COVERAGE * 100:.0f} % bands for one run, from the {cal.scatter.describe()}")
    for key, (fit, how, exposure, where) in notes.items():
        if fit is None:
            continue
        rate = cal.rates.get(key)
        of_rate = f" ({fit.beta_GBps * 8 / rate * 100:.0f} % of the rate)" if rate else ""
        if fit.capped_from and rate:  # a blend's parts: each held, the blend below the rate
            of_rate = (f" ({fit.beta_GBps * 8 / rate * 100:.0f} % of the rate; the points alone gave "
                       f"{fit.capped_from:.4g} GB/s, {fit.capped_from * 8 / rate * 100:.0f} % of it: more than a "
                       "gradient can sustain (small messages ride a shaper's burst), held at the rate, α refitted)")
        points = POINTS.get(cal.strategy, "all-reduce(s)")
        lines.append(f"{fc.level_name(key)}: ring fit α = {fit.alpha_s * 1e6:.1f} µs, β = {fit.beta_GBps:.4g} GB/s"
                     f"{of_rate}, error {fit.residual * 100:.0f} % ({how}: {fit.points} {points} of "
                     f"{', '.join(fit.sources[:3])}{' …' if len(fit.sources) > 3 else ''}); exposed factor x = "
                     f"{exposure.mid:.2f} [{exposure.low:.2f}–{exposure.high:.2f}] ({where})")
    return lines


def figures(runs: pd.DataFrame, bench: pd.DataFrame, num_nodes=fc.DEFAULT_NODES) -> list:
    """[(file name, Figure)]: per workload, efficiency against node count: the forecast band and its middle for each
    network between nodes, the configurations measured on it, and one full node as the ceiling."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullFormatter

    from scalelab.report import marks  # matplotlib: a report that draws nothing never imports it

    letters = report_letters(runs)
    runs = recent(runs)
    recs, out = records(runs), []
    for group, cal in fc.calibrate_all(recs, bench_points(bench)).items():
        gpn = devices_per_node(runs, group)
        fig = Figure(figsize=(7, 4.8))
        ax = fig.subplots()
        ceiling = None
        networks, steps = links_to_forecast(runs, cal, group), {}
        for slot, (intra_key, inter_key) in zip(marks.slots(len(networks)), networks):
            rows = steps[inter_key] = [f for f in fc.forecast(cal, intra_key, inter_key, gpn,
                                                              num_nodes)[0] if f.world_size == f.num_nodes * gpn]
            xs = [f.num_nodes for f in rows]
            name = inter_key[1] if inter_key and inter_key[1] else "between nodes"
            line = ax.plot(xs, [f.efficiency.mid * 100 for f in rows], "-", label=f"forecast, {name}")[0]
            ax.fill_between(xs, [f.efficiency.low * 100 for f in rows], [f.efficiency.high * 100 for f in rows],
                            color=line.get_color(), alpha=0.2)
            measured = [r for r in recs if r.group == group and r.world_size == r.num_nodes * gpn and r.num_nodes > 1
                        and fc.network(r.num_nodes, r.link, r.accelerator, r.device) == inter_key]
            if measured:  # dodged: two links measured at one node count never hide each other
                marks.plot_dodged(ax, slot, [r.num_nodes for r in measured],
                                  [cal.baseline.mid / r.step_s * 100 for r in measured], "o",
                                  color=line.get_color(), ms=7, label=f"measured, {name}")
            ceiling = next((f for f in rows if f.num_nodes == 1 and f.world_size > 1), ceiling)
        one_node = [r for r in recs if r.group == group and r.num_nodes == 1 and r.world_size == gpn > 1]
        if one_node:
            ax.plot([1] * len(one_node), [cal.baseline.mid / r.step_s * 100 for r in one_node], "o",
                    color="black", ms=7, label=f"measured, one node of {gpn} devices")
        if ceiling:
            ax.axhline(ceiling.efficiency.mid * 100, ls="--", color="grey", lw=1, label="one full node: the ceiling")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(list(num_nodes)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticklabels([str(n) for n in num_nodes])
        ax.set_xlabel(f"nodes ({gpn} device{'s' if gpn > 1 else ''} each)")
        ax.set_ylabel("parallel efficiency (%), weak scaling")
        ax.set_ylim(0, 110)
        ax.set_title(f"Forecast {letters.get(group, '?')}: {cal.describe}, calibrated on this folder's runs")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="upper right")
        fig.set_layout_engine("constrained")
        marks.caption(fig, ["! " + line for line in inverted(cal, steps)])  # the report's "!" line, on the slide
        out.append((f"forecast_{letters.get(group, '?')}.png", fig))
    return out
