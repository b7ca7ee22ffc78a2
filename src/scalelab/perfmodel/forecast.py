"""The scales not run: a forecast calibrated on a folder's own measurements, and its track record on the runs made.

Pandas-free arithmetic, as the rest of perfmodel: report/forecast_view.py feeds it the report's run records and
benchmark rows and formats what it returns. From those, per link a ring fit (perfmodel.calibrate: the benchmark's
rows and the runs' buckets all-reduced alone), per workload its 1-device step and its exposed factor x at each
link level; then step, throughput and efficiency at node counts not run, each with a band. The track record
predicts every multi-device run from the others (leave one out) and puts the prediction beside what was measured.

Where a workload has no multi-device run at a level, x is borrowed from its own runs at the other level, else from
the other workloads there (their per-step costs are not its own), and since a per-step cost of running on several
devices may grow with the all-reduce (x · t) or not (DDP's bookkeeping, cores shared with other ranks: a fixed
U = step_N − step_1 − t), the band spans what both readings give.

Each band is an 80 % band for one new run (perfmodel.noise): the model's ranges (x's readings, the fit's error)
widened by the run-to-run scatter of the folder's repeats, carried by the new run itself, the baseline's median and
the runs x was read from. Physics bounds what a fit may say: β no faster than a link's stated rate, x no less than 0.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from scalelab.keys import configuration
from scalelab.numeric import float_or_none
from scalelab.perfmodel import calibrate, noise, sharding
from scalelab.perfmodel.calibrate import Band, Point, RingFit
from scalelab.perfmodel.network import gbit_to_GBps, human_rate

SIZE_WINDOW = 8  # a ring fit uses the all-reduces within this factor of the workload's bucket size (at least 3)
COMM_UNCERTAINTY = 0.05  # the ring fit's relative error, at least (repeats of one all-reduce scatter this much)
UNMEASURED_X = 2.0  # the top of x's band where no run measured it (exposure_for)
# x read on one other link of the level, as a share of itself: how far it may differ on this one (the demo's GPT paid
# medians of 1.21 and 1.05 times its all-reduce over its 2 Gbit/s and 200 Mbit/s links: sd 0.11 on 1.13)
X_ACROSS_LINKS = 0.10
# Readings taken within this share of an all-reduce time are read at it (a leave-one-out refit moves t a little)
SAME_ALLREDUCE = 0.05
DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64)
GOOD_EFFICIENCY = 0.8  # the one-line answer: up to how many nodes efficiency stays above this


def network(num_nodes: int, link: str, accelerator, device) -> tuple:
    """Which link an all-reduce at this shape runs on: one node's own (per hardware), or the network between
    nodes (per link: an emulated rate, "" for a real network)."""
    return ("intra", accelerator, device if accelerator == "gpu" else "cpu") if num_nodes == 1 else ("inter",
                                                                                                     link or "")


def level_name(key: tuple) -> str:
    return "within a node" if key[0] == "intra" else f"between nodes{f' ({key[1]})' if key[1] else ''}"


class Reading(NamedTuple):
    """One multi-device run's exposed factor, read two ways: x (per second of its all-reduce alone) and U (a fixed
    cost per step, seconds), with the step and the all-reduce alone (seconds) it was read from."""
    x: Optional[float]
    fixed_s: float
    step_s: float
    allreduce_s: float


@dataclass
class Calibration:
    """What a folder says about one workload (a report group, the key calibrate_all files it under): enough to
    forecast any scale of it."""
    describe: str
    unit: str
    per_device_units: float  # samples (tokens for a GPT) one device processes per step
    baseline: Band  # the 1-device step, seconds: median [min, max] over repeats
    baseline_runs: list
    compute_s: Optional[float]  # compute alone (the probe steps) of the 1-device runs, median: shown, not modelled
    nbytes: float  # what one step all-reduces (the bytes a --comm_hook sends)
    calls: int  # DDP's buckets: one all-reduce each
    fits: dict  # network key -> RingFit
    exposures: dict = field(default_factory=dict)  # network key -> [Reading] of this workload's runs
    borrowed: dict = field(default_factory=dict)  # level -> [Reading] of the other workloads' runs
    rates: dict = field(default_factory=dict)  # network key -> its stated rate in Gbit/s (emulated links)
    strategy: str = "ddp"  # fsdp: nbytes and calls are its all-gathers' and reduce-scatters' all-reduce terms
    scatter: noise.Scatter = noise.Scatter(noise.PRIOR_SCATTER, 0)  # run-to-run, pooled over this workload's repeats


FIELDS = ("run_id", "group", "describe", "unit", "world_size", "num_nodes", "devices", "link", "link_gbit",
          "accelerator", "device", "step_s", "allreduce_alone_s", "bucket_bytes", "wire_bytes", "grad_bytes",
          "samples_per_batch", "accumulate_grad_batches", "tokens_per_s", "samples_per_s", "scaling", "compute_s",
          "strategy", "wire")
# What a calibration reads of a run: the report's records (report/forecast_view.records) carry these fields.
TRACK_COLUMNS = ("group", "run_id", "world_size", "num_nodes", "link", "predicted_step_s", "measured_step_s",
                 "predicted_eff", "eff_low", "eff_high", "measured_eff", "inside", "exposure_from", "scatter",
                 "scatter_dof")


def bench_points(bench) -> dict:
    """network key -> [Point]: the collective benchmarks' rows, one call per message size (bench: records with
    num_nodes, link, accelerator, device, world_size, run_id, rows and collective); an all-gather's or a
    reduce-scatter's as the all-reduce it would be (Point: twice its time)."""
    out = {}
    for b in bench:
        key = network(b.num_nodes, b.link, b.accelerator, b.device)
        times = 1 if b.collective == "all_reduce" else 1 / sharding.HALF
        for row in b.rows:
            out.setdefault(key, []).append(Point(int(b.world_size), row["bytes"], 1,
                                                 times * (row.get("single_op_s") or row["time_s"]), b.run_id,
                                                 b.collective, float_or_none(b.link_gbit)))
    return out


def ring_points(recs: list, from_bench: dict) -> dict:
    """network key -> [Point]: the benchmark's and each run's buckets all-reduced alone (one call per bucket)."""
    out = {k: list(v) for k, v in from_bench.items()}
    for r in recs:
        if r.world_size > 1 and r.bucket_bytes and (float_or_none(r.allreduce_alone_s) or 0) > 0:
            out.setdefault(network(r.num_nodes, r.link, r.accelerator, r.device), []).append(
                Point(int(r.world_size), sum(r.wire_bytes or r.bucket_bytes), len(r.bucket_bytes), r.allreduce_alone_s,
                      r.run_id))
    return out


def fit_for_wire(points: list, per_call_bytes: float, wire: Optional[tuple] = None,
                 max_beta_GBps: Optional[float] = None) -> Optional[RingFit]:
    """The ring fit of a step's communication on one link. DDP's (no wire): its all-reduces' points near its
    bucket size. An FSDP step's (its fingerprint's wire): blended from a fit per collective it ran
    (calibrate.blend), each on that collective's points where a benchmark measured it (gloo's reduce-scatter costs
    a whole all-reduce), else on the all-reduces' (NCCL's ring: half an all-reduce each); None where a part has
    no points. max_beta_GBps: the link's stated rate, which no fit's β may exceed (calibrate.fit_ring)."""
    reduces = [p for p in points if p.collective == "all_reduce"]
    if wire is None:
        return fit_at(reduces, per_call_bytes, max_beta_GBps)
    parts = []
    for collective, nbytes, calls, weight in sharding.cost_terms(sharding.Wire(*wire)):
        fit = fit_at([p for p in points if p.collective == collective] or reduces, nbytes / calls, max_beta_GBps)
        if fit is None:
            return None
        parts.append((weight * nbytes, weight * calls, fit))
    return calibrate.blend(parts)


def fit_at(points: list, per_call_bytes: float, max_beta_GBps: Optional[float] = None) -> Optional[RingFit]:
    """The ring fit of the points near a message size: an all-reduce of 4 KB and one of 64 MB meet different
    limits (latency, a switch's or a token bucket's burst, the link's rate), and a workload sends its buckets."""
    near = [p for p in points if per_call_bytes / SIZE_WINDOW <= p.nbytes / p.calls <= per_call_bytes * SIZE_WINDOW]
    if len({p.nbytes / p.calls for p in near}) < 3:
        near = sorted(points, key=lambda p: abs(math.log(p.nbytes / p.calls / max(per_call_bytes, 1))))[:3]
    return calibrate.fit_ring(near, max_beta_GBps)


def link_rates(recs: list) -> dict:
    """network key -> stated Gbit/s, where an emulated link said it."""
    return {network(r.num_nodes, r.link, r.accelerator, r.device): float(r.link_gbit) for r in recs
            if r.num_nodes > 1 and float_or_none(r.link_gbit)}


def calibrate_all(recs: list, from_bench: dict, exclude=()) -> dict:
    """group -> Calibration, from every run record (FIELDS) and benchmark point (bench_points()) but the runs
    in `exclude` (run ids). A link's stated rate is read from every record, excluded or not: it is the link's, not
    a measurement (a forecast of a new rate is told the rate)."""
    rates = {**{k: p.gbit for k, ps in from_bench.items() for p in ps if p.gbit}, **link_rates(recs)}
    recs = [r for r in recs if r.run_id not in exclude]
    points = ring_points(recs, from_bench)
    by_group, repeats = {}, {}
    for r in recs:
        by_group.setdefault(r.group, []).append(r)
        repeats.setdefault(configuration(r), []).append(r.step_s)
    cals = {}
    for group, rows in by_group.items():
        base = [r for r in rows if r.world_size == 1]
        wire = next((r.wire for r in rows if r.strategy == "fsdp" and isinstance(r.wire, tuple)), None)
        nbytes, calls = _bytes([r for r in rows if r.world_size > 1] + rows, wire)
        steps = sorted(r.step_s for r in base)
        mid = statistics.median(steps) if steps else 0.0
        if not nbytes > 0 or not mid > 0:
            continue  # no gradient size recorded (an older or foreign result), or no time a step took: nothing to use
        first = base[0]
        # its own repeats' scatter, else one assumed for its step's length (short steps scatter more)
        scatter = noise.pooled((v for k, v in repeats.items() if k[0] == group), noise.prior(mid))
        fits = ((k, fit_for_wire(p, nbytes / calls, wire, rates.get(k) and gbit_to_GBps(rates[k])))
                for k, p in points.items())
        cals[group] = Calibration(
            first.describe, first.unit,
            per_device_units=first.samples_per_batch * first.accumulate_grad_batches * (
                (first.tokens_per_s / first.samples_per_s) if first.unit == "tokens/s" else 1),
            baseline=Band(steps[0], mid, steps[-1]), baseline_runs=[r.run_id for r in base],
            compute_s=statistics.median(c) if (c := [r.compute_s for r in base if float_or_none(r.compute_s)])
            else None,
            nbytes=nbytes, calls=calls, rates=rates, strategy=first.strategy or "ddp", scatter=scatter,
            fits={k: f for k, f in fits if f})
    for r in recs:  # each multi-device run's exposed factor, against its own workload's baseline and fit
        own = cals.get(r.group)
        key = network(r.num_nodes, r.link, r.accelerator, r.device)
        fit = fit_for(own, key)[0] if own and r.world_size > 1 else None
        if fit is None:
            continue
        t = fit.seconds(int(r.world_size), own.nbytes, own.calls)
        step = r.step_s  # an optimizer step, as the baseline's (the lever is part of the group)
        entry = Reading(calibrate.exposed_factor(step, own.baseline.mid, t), step - own.baseline.mid - t, step, t)
        own.exposures.setdefault(key, []).append(entry)
        for cal in cals.values():  # a strategy's x says nothing of another's (gloo blocks FSDP's collectives)
            if cal is not own and cal.strategy == own.strategy:
                cal.borrowed.setdefault(key[0], []).append(entry)
    return cals


def _bytes(rows: list, wire: Optional[tuple]) -> tuple:
    """(bytes one step all-reduces, calls): an FSDP step's all-gathers and reduce-scatters (its wire, as a run's
    fingerprint saw it) as the all-reduces they cost (perfmodel.sharding; calls rounded up: at most half an
    all-reduce's latency more), else the first recorded buckets (what a --comm_hook sent), else the gradient in one
    call."""
    if wire is not None:
        nbytes, calls = sharding.Wire(*wire).allreduce_terms()
        return float(nbytes), math.ceil(calls)
    if any(r.strategy == "fsdp" for r in rows):  # no run saw its wire (an older result): its gradient is not it
        return 0.0, 1
    for r in rows:
        buckets = r.wire_bytes or r.bucket_bytes
        if buckets:
            return float(sum(buckets)), len(r.bucket_bytes or buckets)
    return float(next((float_or_none(r.grad_bytes) for r in rows if float_or_none(r.grad_bytes)), 0.0)), 1


def fit_for(cal: Calibration, key: tuple) -> tuple:
    """(RingFit, how it was found) for a network key: its own fit, else another link of that level scaled by the
    links' stated rates (emulated links), else none."""
    if key in cal.fits:
        return cal.fits[key], "fitted"
    rate = cal.rates.get(key)
    rated = [k for k in cal.fits if k[0] == key[0] and cal.rates.get(k)]
    if rate and rated:  # the nearest measured rate: the least extrapolated
        other = min(rated, key=lambda k: abs(math.log(cal.rates[k] / rate)))
        how = f"the {human_rate(cal.rates[other])} fit scaled by rate"
        return cal.fits[other].at_rate(rate / cal.rates[other]), how
    return None, "no measurement on this link"


def exposure_for(cal: Calibration, key: tuple, allreduce_s: float) -> tuple:
    """(Band of x for this workload at this link and all-reduce time, where it came from, the readings the middle's
    sd is read from): its own runs on this link, else its runs on another link of that level; else its own runs at
    the other level; else the other workloads' runs at that level. x is never below 0: an
    all-reduce cannot make a step shorter (a run faster than the 1-device step is noise, which the band's scatter
    carries).

    A reading taken at another all-reduce time than this one (another link's rate, another node count) is read
    two ways: as x (all that a step pays beyond the 1-device step grows with the all-reduce) and as a fixed cost
    per step U, 1 + U / t (only the all-reduce grows: compute slowed by ranks sharing a machine, DDP's bookkeeping
    stay). Runs at one all-reduce time cannot tell the two apart, so the band spans both readings and is a range
    (no readings returned: not a measurement of this point); at this all-reduce time the two agree."""
    same_level = [e for k, es in cal.exposures.items() if k[0] == key[0] for e in es]
    own = [e for e in cal.exposures.get(key) or same_level if e.x is not None]
    if own:
        where = "this workload on this link" if cal.exposures.get(key) else "this workload on another link"
        if allreduce_s <= 0 or all(math.isclose(e.allreduce_s, allreduce_s, rel_tol=SAME_ALLREDUCE) for e in own):
            xs = [max(0.0, e.x) for e in own]
            return Band(min(xs), statistics.median(xs), max(xs)), where, own
        both = [max(0.0, v) for e in own for v in (e.x, 1 + e.fixed_s / allreduce_s)]
        return (Band(min(both), statistics.median(both), max(both)),
                f"{where} (read as x and as a fixed cost per step)", [])
    mine = [e for es in cal.exposures.values() for e in es if e.x is not None]  # the other level's
    # its own per-step costs before another workload's: a 1 ms step does not pay what a 0.3 s step pays besides
    # its all-reduce (the demo's MLP, predicted from the GPT's fixed 7 ms: 13 % (1-75 %), measured 44 %)
    others = [] if mine else cal.borrowed.get(key[0]) or []
    if (not others and not mine) or allreduce_s <= 0:
        # nothing to read x from: a band as wide as x is found, from all hidden to twice the all-reduce alone
        # (compute slowed beside it: 1.0-1.4 measured on one CPU node here), not a width of zero
        return Band(0.0, 1.0, UNMEASURED_X), f"none measured: x from 0 to {UNMEASURED_X:g} (1: no overlap)", []
    readings = [max(0.0, v) for e in others + mine for v in ((e.x,) if e.x is not None else ()) + (
        1 + e.fixed_s / allreduce_s,)]
    where = "this workload's at the other level" if mine else "the other workloads' runs at this level"
    return Band(min(readings), statistics.median(readings), max(readings)), f"borrowed from {where}", []


def prediction_sd(cal: Calibration, readings: list, allreduce_s: float, accumulate: int, across_links: bool) -> float:
    """The sd (seconds) of the middle K·b + x·t, x the readings' median: each reading i predicts it as
    K·b + (s_i − b)·r (r = t / t_i), so the runs' scatter σ reaches it through the baseline's median (of k runs,
    shared by every reading: K − mean r of it) and each reading's own step (averaged over the m readings). Read on
    another link, x may differ from link to link by more than noise: by the spread of the links' medians where
    several were read, else by X_ACROSS_LINKS of x."""
    sigma, b, k = cal.scatter.sigma, cal.baseline.mid, len(cal.baseline_runs)
    ratios = [allreduce_s / e.allreduce_s for e in readings]
    m = len(readings)
    shared = sigma * b * (accumulate - statistics.fmean(ratios)) / math.sqrt(k)
    own = sigma * math.sqrt(sum((e.step_s * r) ** 2 for e, r in zip(readings, ratios))) / m
    x = statistics.median(max(0.0, e.x) for e in readings)
    links = {}
    for e in readings:
        links.setdefault(e.allreduce_s, []).append(max(0.0, e.x))  # a link's readings share its all-reduce time
    medians = [statistics.median(v) for v in links.values()]
    spread = 0.0 if not across_links else statistics.stdev(medians) if len(medians) > 1 else X_ACROSS_LINKS * x
    return math.sqrt(shared ** 2 + own ** 2 + (spread * allreduce_s) ** 2)


@dataclass
class Forecast:
    num_nodes: int
    world_size: int
    allreduce_s: float
    step: Band  # seconds, per optimizer step: 80 % of new runs
    efficiency: Band  # of one new run
    throughput: Band
    expected: Optional[Band] = None  # the efficiency's expected value: the band without one run's own scatter


def forecast(cal: Calibration, intra_key, inter_key, devices: int, num_nodes=DEFAULT_NODES, accumulate: int = 1,
             wire_ratio: float = 1.0) -> tuple:
    """([Forecast], notes): the workload at 1 GPU, one node and each node count, on these links. wire_ratio: the
    share of the bytes a compression hook puts on the wire (bf16: 0.5); accumulate: batches per all-reduce. A step
    on several nodes is never shorter than on one full node (its all-reduce spans more GPUs over a slower link):
    each bound of a multi-node band is at least the one-node step's. Each band: 80 % for one new run (noise)."""
    intra, intra_how = fit_for(cal, intra_key) if devices > 1 else (None, "")
    inter, inter_how = fit_for(cal, inter_key) if inter_key else (None, "")
    out, notes, one_node = [], {}, None
    base = accumulate * cal.baseline.mid
    k_base, base_sd = Band(base, base, base), cal.scatter.sigma * base / math.sqrt(len(cal.baseline_runs))
    for row in calibrate.model_rows(cal.baseline.mid, cal.nbytes * wire_ratio, cal.calls, devices, num_nodes,
                                    intra, inter):
        key = intra_key if row.num_nodes == 1 else inter_key
        fit = intra if row.num_nodes == 1 else inter
        exposure, where, readings = exposure_for(cal, key, row.comm_s) if row.world_size > 1 else (k_base, "", [])
        if row.world_size > 1:
            notes[key] = (fit, intra_how if row.num_nodes == 1 else inter_how, exposure, where)
        u = max(COMM_UNCERTAINTY, fit.residual) if fit else 0.0
        if readings:  # x measured: the middle, give or take what moves it (the runs' scatter, the fit's error)
            mid = base + exposure.mid * row.comm_s
            model = Band(mid, mid, mid)
            sd = math.hypot(prediction_sd(cal, readings, row.comm_s, accumulate, not cal.exposures.get(key)),
                            u * exposure.mid * row.comm_s)
        elif row.world_size > 1:  # a range of readings, each end moved by the baseline median's scatter
            model, sd = calibrate.step_band(k_base, row.comm_s, exposure, u), base_sd
        else:
            model, sd = k_base, base_sd
        own = cal.scatter.sigma * model.mid  # the new run's
        step = noise.widen(model, cal.scatter, math.hypot(sd, own) / model.mid)
        expected = noise.widen(model, cal.scatter, sd / model.mid)
        if row.num_nodes == 1:
            one_node = (step, expected)
        else:  # the one-node ceiling
            step, expected = (Band(max(band.low, ceiling.low), max(band.mid, ceiling.mid),
                                   max(band.high, ceiling.high)) for band, ceiling in zip((step, expected), one_node))
        units = cal.per_device_units * row.world_size * accumulate
        out.append(Forecast(row.num_nodes, row.world_size, row.comm_s, step, efficiency(base, step, row.world_size),
                            Band(units / step.high, units / step.mid, units / step.low),
                            efficiency(base, expected, row.world_size)))
    return out, notes


def efficiency(base: float, step: Band, world_size: int) -> Band:
    """The 1-device step ÷ the step's band (1 at 1 device: the baseline by definition, whatever one run scatters)."""
    return Band(1.0, 1.0, 1.0) if world_size == 1 else Band(base / step.high, base / step.mid, base / step.low)


def answer(rows: list, threshold: float = GOOD_EFFICIENCY) -> Optional[int]:
    """The most nodes up to which the whole band of every multi-device scale's expected efficiency stays at or above
    the threshold (None: not even one full node): a claim about the scale, not about one run's luck."""
    best = 1
    for f in sorted((f for f in rows if f.world_size > 1), key=lambda f: (f.num_nodes, f.world_size)):
        if (f.expected or f.efficiency).low < threshold:
            return None if f.num_nodes == 1 else best
        best = f.num_nodes
    return best


def track_record(recs: list, from_bench: dict, only=None) -> list:
    """[{TRACK_COLUMNS}]: every multi-device run record (of `only`, run ids, where given) predicted from the other
    configurations' runs (leave its configuration out: its repeats would predict it, as a forecast of a scale not
    run cannot be): predicted efficiency band and step beside the measured ones (efficiency here = the 1-device step
    ÷ this step: per-device work is the same, weak scaling)."""
    rows = []
    for r in recs:
        if r.world_size < 2 or r.scaling != "weak" or (only is not None and r.run_id not in only):
            continue
        same = {o.run_id for o in recs if configuration(o) == configuration(r)}
        cal = calibrate_all(recs, from_bench, exclude=same).get(r.group)
        if cal is None:
            continue
        key = network(r.num_nodes, r.link, r.accelerator, r.device)  # on one node: the same key as intra_key
        intra_key = network(1, "", r.accelerator, r.device)
        gpn = int(r.world_size // r.num_nodes)  # not r.devices: a result may leave it null (schema-valid)
        predicted, notes = forecast(cal, intra_key, key if r.num_nodes > 1 else None, gpn, (int(r.num_nodes),))
        mine = [f for f in predicted if f.world_size == r.world_size]
        if not mine:
            continue
        f, measured_step = mine[0], r.step_s
        measured_eff = cal.baseline.mid / measured_step
        rows.append({"group": r.group, "run_id": r.run_id, "world_size": int(r.world_size),
                     "num_nodes": int(r.num_nodes),
                     "link": r.link, "predicted_step_s": f.step.mid, "measured_step_s": measured_step,
                     "predicted_eff": f.efficiency.mid, "eff_low": f.efficiency.low, "eff_high": f.efficiency.high,
                     "measured_eff": measured_eff, "inside": f.efficiency.contains(measured_eff),
                     "exposure_from": notes[key][3],
                     "scatter": cal.scatter.sigma, "scatter_dof": cal.scatter.dof})
    return rows
