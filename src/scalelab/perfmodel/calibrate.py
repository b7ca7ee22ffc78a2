"""The scaling model calibrated on a cluster's own measurements: a ring fit per link, an exposure per workload.

Torch- and pandas-free arithmetic; perfmodel/forecast.py builds the forecast on it, from the records
report/forecast_view.py reads in a results folder.

* The all-reduce alone, per link (one node's own link, or the network between nodes at a given rate), is the ring
  model t = calls · 2(n−1) · α + 2(n−1)/n · S / β (perfmodel.network), with α and β fitted by least squares on
  relative error to what was measured there: the all-reduce benchmark's rows (one call each) and the training runs'
  own buckets all-reduced alone in their probe steps (one call per bucket).
* A step at N devices is the 1-device step plus x times that all-reduce at N: x = (step_N − step_1) / t_N, the
  exposed factor, measured on the workload's own runs. x < 1: part of the all-reduce hid behind backward; x > 1:
  the all-reduce cost more than itself (cores or memory bandwidth shared with compute, ranks waiting for each
  other). With x = 1 this is `perfmodel.predict`'s no-overlap step, from the same inputs (`inputs_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from scalelab.perfmodel.network import GB, allreduce_time_s
from scalelab.perfmodel.scaling import ScalingInputs, predict


@dataclass(frozen=True)
class Point:
    """One measured all-reduce: n ranks, S bytes in `calls` all-reduces, `seconds` in all. An all-gather or a
    reduce-scatter enters as the all-reduce it would be: S its size, `seconds` twice what it took (perfmodel.sharding:
    half an all-reduce each), `collective` saying which it was."""
    n: int
    nbytes: float
    calls: int
    seconds: float
    source: str  # a run id
    collective: str = "all_reduce"
    gbit: Optional[float] = None  # the link's stated rate, where an emulated one said it


@dataclass(frozen=True)
class RingFit:
    """α (per ring step) and β (bottleneck GB/s, unidirectional) of one link, and how well they fit."""
    alpha_s: float
    beta_GBps: float
    residual: float  # root mean square of the points' relative errors (0 for one point: unknown, not exact)
    points: int
    sources: tuple
    capped_from: Optional[float] = None  # the β the points alone gave, where it broke the link's stated rate

    def seconds(self, n: int, nbytes: float, calls: int = 1) -> float:
        """The all-reduce alone of nbytes in `calls` calls over n ranks on this link."""
        return allreduce_time_s(nbytes, n, self.beta_GBps, self.alpha_s, max(1, calls)) if n > 1 else 0.0

    def at_rate(self, ratio: float) -> RingFit:
        """The same link run at `ratio` times its rate: β scales, α (per step) stays."""
        return RingFit(self.alpha_s, self.beta_GBps * ratio, self.residual, self.points, self.sources,
                       self.capped_from and self.capped_from * ratio)


def fit_ring(points: Sequence[Point], max_beta_GBps: Optional[float] = None) -> Optional[RingFit]:
    """α ≥ 0 and β > 0 minimising the relative error of t = calls·2(n−1)·α + 2(n−1)/n·S/β over the points.

    Linear in (α, 1/β): each point divided by its own t, so a 4 KB all-reduce weighs as much as a 64 MB one. Where
    the points cannot separate the two (one size), or the best α would be negative, α = 0 and β alone is fitted;
    where the best β would be negative (small messages, whose time does not grow with size), β is the fastest bus
    bandwidth a point reached and α is fitted alone.
    A β above max_beta_GBps (the link's stated rate: small messages ride a shaper's burst, a large one cannot) is
    held at it and α refitted alone; the fit keeps the β it gave in capped_from. None without a point of n > 1."""
    pts = [p for p in points if p.n > 1 and p.seconds > 0 and p.nbytes > 0]
    if not pts:
        return None
    rows = [(p.calls * 2 * (p.n - 1) / p.seconds, 2 * (p.n - 1) / p.n * p.nbytes / GB / p.seconds) for p in pts]
    a11 = sum(u * u for u, _ in rows)
    a12 = sum(u * v for u, v in rows)
    a22 = sum(v * v for _, v in rows)
    b1, b2 = sum(u for u, _ in rows), sum(v for _, v in rows)
    det = a11 * a22 - a12 * a12
    alpha, inv_beta = 0.0, b2 / a22
    if det > 1e-12 * a11 * a22:
        a, ib = (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
        if a >= 0 and ib > 0:
            alpha, inv_beta = a, ib
        elif ib <= 0:  # no time grows with size (latency alone): β the fastest busbw seen, a bound it cannot beat
            alpha, inv_beta = None, 1 / max(v for _, v in rows)
    capped_from = None
    if max_beta_GBps and 1 / inv_beta > max_beta_GBps:  # α alone on what the rate leaves of each point's time
        capped_from, inv_beta, alpha = 1 / inv_beta, 1 / max_beta_GBps, None
    if alpha is None:
        alpha = max(0.0, sum(u * (1 - v * inv_beta) for u, v in rows) / a11)
    fit = RingFit(alpha, 1 / inv_beta, 0.0, len(pts), tuple(dict.fromkeys(p.source for p in pts)))
    errs = [fit.seconds(p.n, p.nbytes, p.calls) / p.seconds - 1 for p in pts]
    return RingFit(alpha, 1 / inv_beta, math.sqrt(sum(e * e for e in errs) / len(errs)), len(pts), fit.sources,
                   capped_from)


def blend(parts: Sequence[tuple]) -> Optional[RingFit]:
    """One RingFit for a step of several collectives, each on its own fit: parts are (bytes, calls, RingFit) with
    the step's cost Σ fit.seconds(n, bytes, calls), each with bytes and calls (sharding.cost_terms keeps only
    those). Exact at every n: α is the calls-weighted α, 1/β the bytes-weighted 1/β; the residual the worst
    part's. None without a part."""
    if not parts:
        return None
    nbytes, calls = sum(b for b, _, _ in parts), sum(c for _, c, _ in parts)
    alpha = sum(c * f.alpha_s for _, c, f in parts) / calls
    beta = nbytes / sum(b / f.beta_GBps for b, _, f in parts)
    fits = list({id(f): f for _, _, f in parts}.values())  # two parts on one fit (the all-reduces'): its points once
    capped = [f.capped_from for f in fits if f.capped_from]
    return RingFit(alpha, beta, max(f.residual for f in fits), sum(f.points for f in fits),
                   tuple(dict.fromkeys(s for f in fits for s in f.sources)), max(capped) if capped else None)


def exposed_factor(step_s: float, baseline_step_s: float, allreduce_s: float) -> Optional[float]:
    """x = (step_N − step_1) / all-reduce alone at N: what a step paid per second of all-reduce."""
    return (step_s - baseline_step_s) / allreduce_s if allreduce_s > 0 else None


def inputs_for(baseline_step_s: float, nbytes: float, calls: int, devices: int, num_nodes: Sequence[int],
               intra: Optional[RingFit], inter: Optional[RingFit]) -> ScalingInputs:
    """perfmodel.predict's inputs for these calibrated figures: one model, whether its inputs are typed in
    (src/predict.py) or measured (a results folder)."""
    def beta(fit):
        return fit.beta_GBps if fit else 1e9  # no fit at that level: it is not asked for

    return ScalingInputs(devices=devices, num_nodes=tuple(num_nodes), grad_bytes=nbytes,
                         intra_GBps=beta(intra), inter_GBps=beta(inter),
                         intra_latency_s=intra.alpha_s if intra else 0.0,
                         inter_latency_s=inter.alpha_s if inter else 0.0,
                         compute_s=baseline_step_s,
                         # the next float up: `calls` buckets of it hold all nbytes, so ScalingInputs counts `calls`
                         # all-reduces, not one more where nbytes / calls rounds down (1e9 / 29)
                         bucket_bytes=math.nextafter(nbytes / max(1, calls), math.inf))


@dataclass(frozen=True)
class Band:
    low: float
    mid: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def step_band(baseline: Band, allreduce_s: float, exposure: Band, comm_uncertainty: float) -> Band:
    """step = step_1 + x · t: lowest with the lowest of each, highest with the highest (t ± its uncertainty)."""
    return Band(baseline.low + max(0.0, exposure.low) * allreduce_s * max(0.0, 1 - comm_uncertainty),
                baseline.mid + exposure.mid * allreduce_s,
                baseline.high + max(0.0, exposure.high) * allreduce_s * (1 + comm_uncertainty))


def model_rows(baseline_step_s: float, nbytes: float, calls: int, devices: int, num_nodes: Sequence[int],
               intra: Optional[RingFit], inter: Optional[RingFit]) -> list:
    """perfmodel.predict's rows (1 GPU, 1 node, each node count) for the links there is a fit for."""
    rows = predict(inputs_for(baseline_step_s, nbytes, calls, devices, num_nodes, intra, inter))
    return [r for r in rows if not ((r.num_nodes == 1 and r.world_size > 1 and intra is None)
                                    or (r.num_nodes > 1 and inter is None))]
