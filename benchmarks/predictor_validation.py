"""How well the a-priori predictor (perfmodel.scaling.predict, what src/predict.py prints) brackets published
data-parallel scaling measured on real clusters, and which candidate terms earn their place in it.

benchmarks/data/published_scaling.json holds the measurements (each copied from the source its row names, with the
assumptions it took) and the hardware of each system (GPUs per node, the intra-node link per GPU, the inter-node
link per node, each figure with its source). For every point the script builds ScalingInputs from the row:
gradient bytes = parameters x bytes of the gradient dtype; the row's GPUs per node and nodes; the system's links;
compute = one batch on one GPU = per-GPU batch x items per sample / baseline throughput per GPU; accumulation K;
one DDP bucket where the row says so, else DDP's 25 MiB. predict() then gives the no-overlap and the full-overlap
efficiency: the band.

- Baseline '1 GPU': the band is the predictor's efficiency at the row's scale, as predict.py prints it.
- Baseline '1 node' (the source gives no 1-GPU figure): the band is the predictor's efficiency at N nodes divided
  by its efficiency at 1 node, each at the accumulation its run used, no overlap by no overlap and full by full.
  Compute then comes from the 1-node throughput per GPU, which already holds the 1-node all-reduce.

The set has two parts. The test part is every point of the publishers data['test_publishers'] names, chosen by a
rule fixed before any figure was learned (the data's 'about'); nothing is learned or chosen on it, and it is
scored once, apart. Everything else is learned on the training part and judged there held out by publisher: each
publisher's points priced by figures learned without them (a publisher's habits -- input pipeline, container,
what its "1 GPU" means -- are shared by all its systems, so holding out a system is not holding out a source).

Printed per point: the published efficiency, its 80 % band (training points: held out; test points: the adopted
figures), inside or not, and two signed errors in percentage points, published - predicted (negative: the
predictor was optimistic): to the band's nearest edge (0 inside) and to the model's middle (half the overlap: what
a forecaster who had to name one number would have missed by). Then coverage and median errors of each part, and
the terms table on the training part: each candidate term in-sample and held out. The band's width is calibrated:
beyond the model's range (no to full overlap) and a run's prior scatter, each end reaches exp(reach), the 80 %
split-conformal quantile of how far held-out points fell outside. Pure arithmetic, no torch: a few seconds.

    python benchmarks/predictor_validation.py
"""

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass

from tabulate import tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from scalelab.perfmodel import noise  # noqa: E402
from scalelab.perfmodel.network import DDP_BUCKET_BYTES, GRAD_DTYPE_BYTES, gbit_to_GBps  # noqa: E402
from scalelab.perfmodel.scaling import NODE_DOUBLING, NODE_OVERHEAD, ScalingInputs, predict  # noqa: E402

DATA = os.path.join(ROOT, "benchmarks", "data", "published_scaling.json")
BASELINES = ("1 GPU", "1 node")
# Backward's share of a batch's compute: 4N of the 6N FLOPs a token costs (perfmodel.flops), for the last bucket.
BACKWARD_SHARE = 2 / 3


@dataclass(frozen=True)
class Terms:
    """The terms a band is priced with beyond today's predictor (all off: today's).

    The one-node loss, `overhead_form`: '' (none), 'fixed' (a node running more than one GPU loses `overhead` of
    each step), 'per GPU' (`overhead` per GPU beyond the first) or 'host time' (such a node adds `overhead`
    seconds to every batch: a short step loses a larger share). by_doubling: each doubling of the node count costs
    `doubling` of a step more. scatter: the range widened into an 80 % band for one run against one baseline run
    (perfmodel.noise.one_run_band). by_precision: the one-node loss is `overhead` for fp32 steps and
    `overhead_mixed` for mixed-precision ones. calibrated: the band's low end moved down by exp(reach) and its
    high end up by exp(reach_up), the model's own error on each side, learned held out. nvlink_rate,
    network_rate: the share of each line rate an all-reduce reaches. nic_share: the network's bottleneck is one
    GPU's share of its node's NICs, not the node's NICs together. last_bucket: full overlap still waits for the
    last bucket's all-reduce, which starts when backward ends."""
    overhead_form: str = ""
    overhead: float = 0.0
    by_doubling: bool = False
    doubling: float = 0.0
    scatter: bool = False
    nvlink_rate: float = 1.0
    network_rate: float = 1.0
    nic_share: bool = False
    last_bucket: bool = False
    calibrated: bool = False
    reach: float = 0.0
    reach_up: float = 0.0
    by_precision: bool = False
    overhead_mixed: float = 0.0


TODAY = Terms()


def load(path=DATA) -> dict:
    with open(path) as f:
        return json.load(f)


def devices_per_node(point) -> int:
    return point["gpus"] // point["nodes"]


def baseline_gpus(point) -> int:
    """GPUs of the baseline run: 1, or one node of the row's GPUs per node."""
    if point["baseline"] not in BASELINES:
        raise ValueError(f"{point['id']}: baseline must be one of {BASELINES}, got {point['baseline']!r}")
    return 1 if point["baseline"] == "1 GPU" else devices_per_node(point)


def published_efficiency(point) -> float:
    """Speedup / GPUs against the baseline, from the two throughputs."""
    return point["throughput"] / (point["baseline_throughput"] * point["gpus"] / baseline_gpus(point))


def compute_s(point) -> float:
    """One batch (not one optimizer step) on one GPU, at the baseline's throughput per GPU."""
    per_gpu = point["baseline_throughput"] / baseline_gpus(point)
    return point["per_gpu_batch"] * point["items_per_sample"] / per_gpu


def node_overhead(point, terms: Terms) -> float:
    """The share of a step the row's node loses under these terms (fixed, per GPU beyond the first, or a host
    time added to each batch of compute_s)."""
    if terms.overhead_form == "per GPU":
        return terms.overhead * (devices_per_node(point) - 1)
    if terms.overhead_form == "host time":
        return terms.overhead / (compute_s(point) + terms.overhead)
    if terms.by_precision and point["precision"] == "mixed":
        return terms.overhead_mixed
    return terms.overhead if terms.overhead_form else 0.0


def inputs(point, system, nodes, accumulate, terms: Terms = TODAY) -> ScalingInputs:
    """The predictor's inputs for the row at `nodes` nodes; a link the data leaves unknown (null) is refused where
    the ring would run over it, and stands in for the other where it never would."""
    intra, inter = system["intra_GBps"], None
    if system["nics_per_node"] is not None and system["nic_gbit"] is not None:
        gbit = system["nics_per_node"] * system["nic_gbit"] / (system["gpus_per_node"] if terms.nic_share else 1)
        inter = gbit_to_GBps(gbit) * terms.network_rate
    if inter is None:
        if nodes > 1:
            raise ValueError(f"{point['id']}: the predictor needs the inter-node link of {point['system']}, "
                             "which the data leaves unknown")
        inter = intra  # never read: one node's ring runs on its own link
    if intra is None:
        if nodes == 1 or point["baseline"] == "1 node":
            raise ValueError(f"{point['id']}: the predictor needs the intra-node link of {point['system']}, "
                             "which the data leaves unknown")
        intra = inter  # never read: a ring over several nodes is priced at the inter-node link (ring_for)
    return ScalingInputs(devices=devices_per_node(point), num_nodes=(nodes,), n_params=point["params"],
                         grad_dtype_bytes=GRAD_DTYPE_BYTES[point["grad_dtype"]],
                         intra_GBps=intra * terms.nvlink_rate, inter_GBps=inter, compute_s=compute_s(point),
                         accumulate=accumulate, node_overhead=node_overhead(point, terms),
                         node_doubling=terms.doubling if terms.by_doubling else 0.0,
                         bucket_bytes=None if point.get("one_bucket") else DDP_BUCKET_BYTES)


def last_bucket_step(row, accumulate: int, buckets: int, backward: float = BACKWARD_SHARE) -> float:
    """Full overlap's step when the buckets' all-reduces run one after another as backward hands them over (equal
    buckets, evenly through backward): none starts before backward does and the last starts when it ends, so a
    step is (K-1) batches + max(batch + comm/B, batch - backward (1 - 1/B) + comm)."""
    batch, comm = row.compute_s / accumulate, row.comm_s
    back = backward * batch
    return (accumulate - 1) * batch + max(batch + comm / buckets, batch - back * (1 - 1 / buckets) + comm)


def scale_edges(point, system, nodes, accumulate, terms: Terms = TODAY) -> tuple:
    """(no overlap, full overlap) efficiency at `nodes` nodes of the row's GPUs per node (1 node: the whole node),
    and the predictor's row there."""
    given = inputs(point, system, nodes, accumulate, terms)
    (row,) = [r for r in predict(given) if r.num_nodes == nodes and r.world_size == nodes * devices_per_node(point)]
    full = row.efficiency_overlap
    if terms.last_bucket:
        full = row.efficiency_no_overlap * row.step_s_no_overlap / last_bucket_step(row, accumulate, given.buckets)
    return row.efficiency_no_overlap, full, row


def model_range(point, system, terms: Terms = TODAY) -> tuple:
    """(no overlap, full overlap) efficiency against the row's baseline, and the row at its scale."""
    lo, hi, row = scale_edges(point, system, point["nodes"], point["accumulation"], terms)
    if point["baseline"] == "1 node":
        base_lo, base_hi, _ = scale_edges(point, system, 1, point["baseline_accumulation"], terms)
        lo, hi = lo / base_lo, hi / base_hi
    return lo, hi, row


def widened(point, lo: float, hi: float, row, terms: Terms = TODAY) -> tuple:
    """A range made the band these terms print: with `scatter`, its 80 % band for one run against one baseline
    run, the run's step and its baseline's each their own scatter (perfmodel.noise.one_run_band); then the low
    end moved down by exp(reach), the high end up by exp(reach_up)."""
    if terms.scatter:
        wide = noise.one_run_band(lo, hi, row.step_s_no_overlap, compute_s(point) * point["baseline_accumulation"])
        lo, hi = wide.low, wide.high
    return lo / math.exp(terms.reach), hi * math.exp(terms.reach_up)


def band(point, system, terms: Terms = TODAY) -> tuple:
    """(low, high) efficiency against the row's baseline, and the row at its scale: no overlap to full overlap,
    widened as the terms say (`widened`)."""
    lo, hi, row = model_range(point, system, terms)
    return (*widened(point, lo, hi, row, terms), row)


def inside(published, lo, hi, mid=None) -> bool:
    return lo <= published <= hi


def edge_error(published, lo, hi, mid=None) -> float:
    """published - the nearest edge of [lo, hi]; 0 inside. Negative: the predictor was optimistic."""
    if published < lo:
        return published - lo
    if published > hi:
        return published - hi
    return 0.0


def mid_error(published, lo, hi, mid=None) -> float:
    """published - the model's middle: `mid` where given (the range's, before a scatter widened it: widening is
    multiplicative, it would move the arithmetic middle up), else the band's."""
    return published - ((lo + hi) / 2 if mid is None else mid)


@dataclass(frozen=True)
class Summary:
    points: int
    inside: int
    coverage: float
    median_abs_edge_error: float
    median_abs_mid_error: float
    optimistic: int  # published below the band
    pessimistic: int  # published above the band


def score(triples) -> Summary:
    """Coverage and errors over (published, lo, hi[, the model's middle]) tuples."""
    triples = list(triples)
    if not triples:
        raise ValueError("no points to score")
    n_in = sum(inside(*t) for t in triples)
    return Summary(points=len(triples), inside=n_in, coverage=n_in / len(triples),
                   median_abs_edge_error=statistics.median(abs(edge_error(*t)) for t in triples),
                   median_abs_mid_error=statistics.median(abs(mid_error(*t)) for t in triples),
                   optimistic=sum(t[0] < t[1] for t in triples), pessimistic=sum(t[0] > t[2] for t in triples))


# --- the parts of the set, and who published each point ---------------------------------------------------------


def publisher(point) -> str:
    """Who measured the point: the unit held out together (one publisher's habits are shared by all its rows)."""
    return point["publisher"]


def parts(data) -> tuple:
    """(training part, test part): the test part is every point of data['test_publishers'], chosen before any
    figure was learned (the data's 'about' says how); nothing is tuned on it."""
    test = set(data["test_publishers"])
    return ([p for p in data["points"] if publisher(p) not in test],
            [p for p in data["points"] if publisher(p) in test])


_MEMO: dict = {}


def _priced(point, system, terms: Terms) -> tuple:
    """(low, high, the range's middle, row) of a point under terms without reach, computed once (learning tries
    every figure on every point many times over)."""
    key = (id(point), id(system), terms)
    if key not in _MEMO:
        lo, hi, row = model_range(point, system, terms)
        _MEMO[key] = (point, system, *widened(point, lo, hi, row, terms), (lo + hi) / 2, row)
    return _MEMO[key][2:]


def evaluate(data, terms: Terms = TODAY, points=None) -> list:
    """One dict per point (of `points`, default all): the published efficiency, the band, the model's middle (of
    the range before any widening) and the row it came from."""
    out, down, up = [], math.exp(terms.reach), math.exp(terms.reach_up)
    plain = dataclasses.replace(terms, reach=0.0, reach_up=0.0, calibrated=False)
    for point in data["points"] if points is None else points:
        lo, hi, mid, row = _priced(point, data["systems"][point["system"]], plain)
        out.append(dict(point=point, published=published_efficiency(point), lo=lo / down, hi=hi * up, mid=mid,
                        row=row))
    return out


def triples(results) -> list:
    return [(r["published"], r["lo"], r["hi"], r["mid"]) for r in results]


def residuals(result) -> tuple:
    """How far (log) a published point lies below its band and above it (0 on a side it is not beyond): the
    widening of each end that would have held it."""
    y = result["published"]
    return max(0.0, math.log(result["lo"] / y)), max(0.0, math.log(y / result["hi"]))


def conformal_reach(residuals, coverage: float) -> float:
    """The widening that holds `coverage` of new points exchangeable with these: the ceil((n + 1) x coverage)-th
    smallest residual (split conformal prediction); the largest where n is too small to promise that."""
    ordered = sorted(residuals)
    if not ordered:
        raise ValueError("no residuals to calibrate a band on")
    return ordered[min(math.ceil((len(ordered) + 1) * coverage), len(ordered)) - 1]


# --- the candidate terms, learned and held out -----------------------------------------------------------------

# The learned terms' candidates: the one-node loss, 0 to 30 % of a step fixed (to the nearest 5 %), 0 to 3 % per
# GPU beyond the first (to the nearest 0.5 %), or 0 to 100 ms of host time a batch; each doubling of the node count,
# 0 to 5 % (to the nearest 0.5 %).
GRIDS = {"fixed": tuple(i / 20 for i in range(7)), "per GPU": tuple(i / 200 for i in range(7)),
         "host time": (0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1),
         "doubling": tuple(i / 200 for i in range(11))}
# The share of a line rate NCCL's all-reduce reaches, as NCCL's maintainers quote it (the set's sources give no
# nccl-tests log): NVLink 370 of H100's 450 GB/s, "protocol overhead (~20%)" (github.com/NVIDIA/nccl-tests/issues/
# 212); InfiniBand 192 GB/s busbw on a DGX A100's 8 x 200 Gbit/s (github.com/NVIDIA/nccl/issues/812), 48 GB/s on a
# DGX-1's 4 x 100 Gbit/s and 12.2 GB/s on one 100 Gbit/s card (github.com/NVIDIA/nccl-tests/issues/29).
NVLINK_RATE, NETWORK_RATE = 0.82, 0.96
BAND = Terms("fixed", scatter=True, calibrated=True)  # what src/predict.py prints
CANDIDATES = (  # (the term, its Terms, its role): the steps to the adopted band, then each term it was tried with
    ("the network alone", TODAY, "step"),
    ("+ one-node loss, a fixed share of a step", Terms("fixed"), "step"),
    (f"+ run-to-run scatter ({noise.PRIOR_SCATTER:.1%} a run)", Terms("fixed", scatter=True), "step"),
    ("+ the model's own error, calibrated held out", BAND, "adopted"),
    ("one-node loss by precision (fp32, mixed)", dataclasses.replace(BAND, by_precision=True), "tried"),
    ("+ each doubling of the node count, a share of a step", dataclasses.replace(BAND, by_doubling=True), "tried"),
    ("one-node loss per GPU beyond the first", dataclasses.replace(BAND, overhead_form="per GPU"), "tried"),
    ("one-node loss as host time per batch", dataclasses.replace(BAND, overhead_form="host time"), "tried"),
    (f"+ achievable line rate (NVLink {NVLINK_RATE:g}, network {NETWORK_RATE:g})",
     dataclasses.replace(BAND, nvlink_rate=NVLINK_RATE, network_rate=NETWORK_RATE), "tried"),
    ("+ slowest hop: one GPU's share of its node's NICs", dataclasses.replace(BAND, nic_share=True), "tried"),
    ("+ full overlap waits for the last bucket", dataclasses.replace(BAND, last_bucket=True), "tried"),
)
ADOPTED = 3


def learn(data, terms: Terms, points=None) -> Terms:
    """The terms with their learned figures (overhead, doubling) set to the pair on their grids whose bands'
    middles miss `points` (default all) by the least (median |error to the middle|; ties: the smaller mean, then
    the smaller figures). The middle, not the coverage: a band's width is the scatter's and the calibration's, and
    a fit that chased coverage would widen the range instead of placing it."""
    points = data["points"] if points is None else points
    if not points:
        raise ValueError("no points to learn from")
    overheads = GRIDS[terms.overhead_form] if terms.overhead_form else (0.0,)
    mixed = GRIDS[terms.overhead_form] if terms.by_precision else (0.0,)
    doublings = GRIDS["doubling"] if terms.by_doubling else (0.0,)

    def rank(candidate):  # the model's own middle (triples carry it): widening places nothing
        misses = [abs(mid_error(*t)) for t in triples(evaluate(data, candidate, points))]
        return (statistics.median(misses), statistics.fmean(misses), candidate.overhead, candidate.overhead_mixed,
                candidate.doubling)

    return min((dataclasses.replace(terms, overhead=o, overhead_mixed=m, doubling=d)
                for o in overheads for m in mixed for d in doublings), key=rank)


def fit(data, terms: Terms, points=None, key=publisher) -> Terms:
    """The terms learned from `points`: their figures (`learn`) and, where calibrated, each end's reach, from the
    points' held-out residuals (each group of `key` priced by figures learned without it): the 20 % a band may
    miss is split between its ends as the held-out misses fell (`split_misses`), and each end reaches the split
    conformal quantile of its side's residuals for its share. A model that errs one way (the published runs lose
    what it does not know of) widens that way only."""
    points = data["points"] if points is None else points
    learned = learn(data, terms, points)
    if terms.calibrated:
        inner, _ = held_out(data, dataclasses.replace(terms, calibrated=False), points, key)
        below, above = zip(*(residuals(r) for r in inner))
        low_share = split_misses(below, above)
        miss = 1 - noise.COVERAGE
        learned = dataclasses.replace(learned, reach=conformal_reach(below, 1 - miss * low_share),
                                      reach_up=conformal_reach(above, 1 - miss * (1 - low_share)))
    return learned


def split_misses(below, above) -> float:
    """The share of the band's 20 % of misses its low end may leave: the share of the held-out misses that fell
    below (half where none missed). A model whose misses all fall one way widens only that way."""
    n_below, n_above = sum(r > 0 for r in below), sum(r > 0 for r in above)
    return 0.5 if n_below + n_above == 0 else n_below / (n_below + n_above)


def held_out(data, terms: Terms, points=None, key=publisher) -> tuple:
    """Leave one group out (by `key`, the publisher unless told): each group's points banded by the terms fitted
    without them (a calibrated band's reach too). Returns (results, {group: its fitted terms})."""
    points = data["points"] if points is None else points
    results, fitted_by = [], {}
    for group in dict.fromkeys(key(p) for p in points):
        rest = [p for p in points if key(p) != group]
        if not rest:
            raise ValueError(f"only {group!r} in the set: nothing to learn from with it held out")
        fitted_by[group] = fit(data, terms, rest, key)
        results += evaluate(data, fitted_by[group], [p for p in points if key(p) == group])
    return results, fitted_by


def _pts(x) -> str:
    return f"{x * 100:+.1f}"


def table(results) -> str:
    """One line per point."""
    body = []
    for r in results:
        p, row, t = r["point"], r["row"], (r["published"], r["lo"], r["hi"], r["mid"])
        body.append([p["id"], p["system"], f"{p['gpus']}/{p['nodes']}", p["baseline"], p["accumulation"],
                     f"{compute_s(p):.4g}", f"{row.comm_s:.3g}", f"{r['published']:.1%}",
                     f"{r['lo']:.1%}–{r['hi']:.1%}", "yes" if inside(*t) else "no", _pts(edge_error(*t)),
                     _pts(mid_error(*t))])
    headers = ["point", "system", "GPUs/\nnodes", "baseline", "K", "compute s\n(1 batch)", "all-reduce\ns",
               "published\nefficiency", "80 % band\n(held out)", "inside", "error to\nedge (pts)",
               "error to\nmiddle (pts)"]
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True, stralign="right")


def summary_lines(s: Summary, what: str = "published points") -> list:
    misses = s.points - s.inside
    return [f"coverage: {s.inside} of {s.points} {what} inside the predicted band ({s.coverage:.0%})",
            f"median |error| to the band's nearest edge: {s.median_abs_edge_error * 100:.1f} points; "
            f"to its middle: {s.median_abs_mid_error * 100:.1f} points",
            f"misses: {misses}, of which {s.optimistic} optimistic (published below the band) and "
            f"{s.pessimistic} pessimistic (above it)"]


def by_group(results, key=publisher) -> list:
    """One line per group (publisher unless told), in the data's order: its coverage and median errors."""
    lines = []
    for name in dict.fromkeys(key(r["point"]) for r in results):
        s = score(triples(r for r in results if key(r["point"]) == name))
        lines.append(f"  {name}: {s.inside} of {s.points} inside, median |error| to the middle "
                     f"{s.median_abs_mid_error * 100:.1f} points")
    return lines


def _cells(s: Summary) -> list:
    return [f"{s.inside}/{s.points} ({s.coverage:.0%})", f"{s.median_abs_edge_error * 100:.1f}",
            f"{s.median_abs_mid_error * 100:.1f}", f"{s.optimistic}/{s.pessimistic}"]


def figures(terms: Terms) -> str:
    """The learned figures of these terms, 'overhead / doubling / reach down, up' ('-' where a term is off; a loss
    by precision 'fp32, mixed')."""
    loss = f"{terms.overhead:g}" if terms.overhead_form else "-"
    if terms.by_precision:
        loss += f", {terms.overhead_mixed:g}"
    return " / ".join([loss, f"{terms.doubling:g}" if terms.by_doubling else "-",
                       f"{terms.reach:.3f}, {terms.reach_up:.3f}" if terms.calibrated else "-"])


def _spread(fitted_by) -> str:
    shown = sorted(set(figures(t) for t in fitted_by.values()))
    return shown[0] if len(shown) == 1 else f"{shown[0]} .. {shown[-1]} ({len(shown)} sets)"


RESOLUTION = 0.001  # a tenth of a point of efficiency, what the tables print: a smaller gain is no gain


def by_publisher_errors(results) -> dict:
    """{publisher: median |error to the middle|} of held-out results."""
    out = {}
    for r in results:
        out.setdefault(publisher(r["point"]), []).append(abs(mid_error(*triples([r])[0])))
    return {name: statistics.median(v) for name, v in out.items()}


def verdict(held, adopted_held) -> str:
    """A tried term earns its place when, held out, its middle misses by less (at least RESOLUTION less) for a
    majority of the training part's publishers than the adopted band's does, and its coverage is no further from
    the 80 % it promises.
    Per publisher, not pooled: a term that helps one publisher's many rows and hurts the others is not a property
    of clusters."""
    mine, theirs = by_publisher_errors(held), by_publisher_errors(adopted_held)
    better = sum(mine[name] <= theirs[name] - RESOLUTION for name in theirs)
    closer = abs(score(triples(held)).coverage - noise.COVERAGE) <= abs(
        score(triples(adopted_held)).coverage - noise.COVERAGE)
    earns = better > len(theirs) / 2 and closer
    return f"{'EARNS' if earns else 'rejected'} ({better} of {len(theirs)})"


def report(data, train) -> tuple:
    """(lines, {term: verdict}): the terms table on the training part, each band in-sample and held out by
    publisher, each tried term's verdict against the adopted band (`verdict`)."""
    held = {what: held_out(data, terms, train) for what, terms, _ in CANDIDATES}  # each once, the adopted's too
    body, verdicts, adopted_held = [], {}, held[CANDIDATES[ADOPTED][0]][0]
    for what, terms, role in CANDIDATES:
        mine = fit(data, terms, train)
        out, fitted_by = held[what]
        verdicts[what] = verdict(out, adopted_held) if role == "tried" else role
        body.append([what, verdicts[what], figures(mine), *_cells(score(triples(evaluate(data, mine, train)))),
                     _spread(fitted_by), *_cells(score(triples(out)))])
    headers = ["term", "verdict\n(publishers\nbetter)", "learned:\nloss /\ndoubling /\nreach", "inside",
               "median |err|\nedge (pts)", "median |err|\nmiddle (pts)", "misses\nbelow/above",
               "held out:\nlearned", "held out:\ninside", "held out:\nedge (pts)", "held out:\nmiddle (pts)",
               "held out:\nbelow/above"]
    return [tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True,
                     colalign=("left",) + ("right",) * (len(headers) - 1)),
            f"the training part only ({len(train)} points). Steps: each adds its term to the one above; tried: each "
            "in the adopted band, in place of its fixed one-node loss or on top of it (+), and it earns its place "
            "only if, held out, its middle misses by at least 0.1 point less for a majority of the publishers and "
            "its coverage is no further from 80 %. In-sample: the figures learned from the whole training part; "
            "held out: each publisher's points priced with figures (and a calibrated band's reach) learned without "
            "that publisher.",
            "learned: the one-node loss (a fixed share 0 to 0.3 of a step, to 0.05; per GPU 0 to 0.03, to 0.005; "
            "host time 0 to 0.1 s a batch) and the share per doubling of the nodes (0 to 0.05, to 0.005) whose "
            "bands' middles miss by the least (median), ties to the smaller mean; the scatter is not learned (the "
            f"prior a workload without repeats gets: {noise.PRIOR_SCATTER:.1%} a run for steps of "
            f"{noise.SHORT_STEP_S * 1000:g} ms and more); the reach (log) of each end is the split conformal "
            "quantile of how far held-out points fell beyond it, the 20 % of misses split as they fell."], verdicts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DATA, help="the measurements and hardware (default: %(default)s)")
    args = parser.parse_args(argv)
    data = load(args.data)
    train, test = parts(data)
    adopted = fit(data, BAND, train)
    trained, _ = held_out(data, BAND, train)
    tested = evaluate(data, adopted, test)
    print(table(trained + tested))
    print()
    print(f"adopted (learned from the {len(train)} points of the training part): a node of several GPUs loses "
          f"{adopted.overhead:g} of each step (src/predict.py's --node_overhead default {NODE_OVERHEAD:g}; no share "
          f"per doubling of the nodes: --node_doubling {NODE_DOUBLING:g}), the range widened by each run's scatter "
          f"and by exp({adopted.reach:.3f}) down and exp({adopted.reach_up:.3f}) up (perfmodel.noise.MODEL_REACH "
          f"{noise.MODEL_REACH[0]:.3f}, {noise.MODEL_REACH[1]:.3f}) into an 80 % band")
    print()
    print(f"training part, held out by publisher ({len(train)} points; each publisher banded by figures learned "
          "without it):")
    print("\n".join(summary_lines(score(triples(trained)))))
    print("\n".join(by_group(trained)))
    print()
    print(f"test part ({len(test)} points of {', '.join(data['test_publishers'])}; {data['test_note']}), banded by "
          "the adopted figures:")
    print("\n".join(summary_lines(score(triples(tested)))))
    print("\n".join(by_group(tested)))
    print("error = published - predicted, in percentage points; negative: the cluster did worse than predicted.")
    print()
    print("\n".join(report(data, train)[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
