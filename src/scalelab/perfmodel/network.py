"""Collective arithmetic, nccl-tests definitions: bytes, busbw, ring all-reduce time, and the benchmark's rows.

Torch-free: the all-reduce benchmark computes its rows with it, the report reads them back with it, and the
analytic model predicts with it, so all three agree on one definition. algbw = S / t, busbw = algbw · 2(n−1)/n,
1 GB = 1e9 B; every bandwidth is unidirectional.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Optional

from scalelab.perfmodel.checks import nonneg as _nonneg
from scalelab.perfmodel.checks import positive as _positive

GB = 1e9  # nccl-tests and link datasheets use decimal gigabytes
DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP bucket_cap_mb=25: one all-reduce (one latency bill) per bucket
GRAD_DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
LARGE_MSG_BYTES = 2**20  # the "avg" line's figure uses sizes from 1 MiB up
PLATEAU_SIZES = 3  # an nccl-tests log's quoted busbw: the median of its 3 largest sizes' busbw (plateau_busbw)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# Communication


def gbit_to_GBps(gbit_per_s: float) -> float:
    """Link speeds are sold in Gbit/s, collectives measured in GB/s: 200 Gbit/s = 25 GB/s."""
    return gbit_per_s / 8


def GBps_to_gbit(GBps: float) -> float:
    """25 GB/s = 200 Gbit/s."""
    return GBps * 8


# nccl-tests' bus factor numerators (doc/PERFORMANCE.md): busbw = algbw · k(n−1)/n. An all-reduce moves each byte
# twice (reduce-scatter, then all-gather); an all-gather or a reduce-scatter of S bytes (the gathered output, the
# scattered input) moves (n−1)/n of S through each rank's link once.
BUS_FACTORS = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}


def bus_factor(n: int, collective: str = "all_reduce") -> float:
    """busbw / algbw for a collective over n ranks: 2(n−1)/n for all-reduce, (n−1)/n for all-gather and
    reduce-scatter (0 at n = 1: nothing crosses a bus)."""
    _positive(n=n)
    return BUS_FACTORS[collective] * (n - 1) / n


def busbw_from_algbw(algbw: float, n: int, collective: str = "all_reduce") -> float:
    """nccl-tests bus bandwidth: algbw · bus_factor (all-reduce: 2(n−1)/n), comparable to one link's
    unidirectional speed."""
    return algbw * bus_factor(n, collective)


def busbw_from_time(nbytes: float, seconds: float, n: int, collective: str = "all_reduce") -> float:
    """busbw of a collective of nbytes (nccl-tests' size) that took `seconds` (algbw = bytes / time, 1 GB = 1e9 B)."""
    return busbw_from_algbw(nbytes / seconds / GB, n, collective)


def algbw_from_busbw(busbw: float, n: int) -> float:
    """Inverse of busbw_from_algbw (n = 1 has no bus traffic: returns inf)."""
    _positive(n=n)
    return math.inf if n == 1 else busbw * n / (2 * (n - 1))


def allreduce_bytes_per_rank(grad_bytes: float, n: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of S bytes: 2(n−1)/n · S."""
    _nonneg(grad_bytes=grad_bytes)
    _positive(n=n)
    return 2 * (n - 1) / n * grad_bytes


def allreduce_time_s(grad_bytes: float, n: int, bandwidth_GBps: float, latency_s: float = 0.0,
                     buckets: int = 1) -> float:
    """Ring all-reduce time: buckets · 2(n−1)·α + 2(n−1)/n · S / β.

    β is the unidirectional bandwidth of the ring's slowest hop in GB/s (see ring_for); α the per-step
    latency, paid 2(n−1) times per all-reduce and once more per DDP bucket (each bucket is its own call).
    """
    _positive(n=n, bandwidth_GBps=bandwidth_GBps, buckets=buckets)
    _nonneg(latency_s=latency_s)
    if n == 1:
        return 0.0
    return buckets * 2 * (n - 1) * latency_s + allreduce_bytes_per_rank(grad_bytes, n) / (bandwidth_GBps * GB)


def allreduce_time_from_busbw_s(grad_bytes: float, n: int, busbw_GBps: float) -> float:
    """All-reduce time from a measured busbw: t = S · 2(n−1)/n / busbw.

    algbw = S / t and busbw = algbw · 2(n−1)/n, so a measured busbw replaces β in the ring model directly
    (latency already inside the measurement, if it was taken at a comparable message size).
    """
    _positive(n=n, busbw_GBps=busbw_GBps)
    return allreduce_bytes_per_rank(grad_bytes, n) / (busbw_GBps * GB)


@dataclass(frozen=True)
class Ring:
    """The ring one DDP all-reduce runs on: n ranks, bottleneck bandwidth β, per-step latency α."""
    n: int
    bandwidth_GBps: Optional[float]  # None for a single GPU (no ring)
    latency_s: float
    link: str  # "none", "intra" or "inter"


def ring_for(num_nodes: int, devices: int, intra_GBps: float, inter_GBps: float,
             intra_latency_s: float = 0.0, inter_latency_s: float = 0.0) -> Ring:
    """Which link bounds the ring at this scale.

    One node: the ring runs over the node's GPUs on the intra-node link (β = per-GPU unidirectional
    NVLink/PCIe bandwidth, n = GPUs per node). Several nodes: one ring over all n = num_nodes · devices
    GPUs whose slowest hop crosses nodes, so the node's inter-node bandwidth sets β (unidirectional, per
    node: with several NICs give their sum, NCCL runs one ring per NIC). The inter-node latency is charged
    for every step, which overstates latency a little for the intra-node hops.
    """
    _positive(num_nodes=num_nodes, devices=devices)
    n = num_nodes * devices
    if n == 1:
        return Ring(1, None, 0.0, "none")
    if num_nodes == 1:
        return Ring(n, intra_GBps, intra_latency_s, "intra")
    return Ring(n, inter_GBps, inter_latency_s, "inter")


# --- message sizes ----------------------------------------------------------------------------------------


def parse_size(text) -> int:
    """'32K' -> 32768, '64M', '4G', '4GiB', '4gb', '1000' (bytes). 1K = 1024, as nccl-tests' -b/-e."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(I?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"not a size: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def human_bytes(n: int) -> str:
    """32768 -> '32 KiB', 1536 -> '1.5 KiB', 100 -> '100 B'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


def human_rate(gbit: float) -> str:
    """A link rate in Gbit/s -> '200 Mbit/s', '2 Gbit/s' (how emulated links are named everywhere)."""
    return f"{gbit * 1000:g} Mbit/s" if gbit < 1 else f"{gbit:g} Gbit/s"


def message_sizes(min_bytes: int, max_bytes: int, factor: int, itemsize: int) -> list:
    """(bytes, count) per message: min_bytes * factor^k up to max_bytes; at least one element each.

    Sizes that round to the same element count are measured once; bytes are what actually moves.
    """
    out, size = [], min_bytes
    while size <= max_bytes:
        count = max(1, size // itemsize)
        if not out or out[-1][1] != count:
            out.append((count * itemsize, count))
        size *= factor
    return out


# --- a benchmark's rows ------------------------------------------------------------------------------------


def bandwidths(nbytes: int, time_s: float, world_size: int, collective: str = "all_reduce") -> tuple:
    """(algbw, busbw) in GB/s. For n = 1 the bus factor is 0, so busbw is 0, as nccl-tests reports:
    one rank moves nothing over any bus, and algbw then only measures a local no-op."""
    return nbytes / time_s / GB, busbw_from_time(nbytes, time_s, world_size, collective)


def bench_summary(rows: list) -> dict:
    """avg over sizes >= 1 MiB (all sizes when none is that large), peak, and the large-message busbw.

    large_msg_busbw_GBps is the plateau (plateau_busbw), for scalelab's own sweeps and for nccl-tests logs
    alike: the figure the report reads, keyed by (world_size, num_nodes, accelerator, backend).
    """
    if not rows:
        return {"avg_busbw_GBps": None, "peak_busbw_GBps": None, "large_msg_busbw_GBps": None}
    large = [r["busbw_GBps"] for r in rows if r["bytes"] >= LARGE_MSG_BYTES]
    over = large or [r["busbw_GBps"] for r in rows]
    return {"avg_busbw_GBps": sum(over) / len(over), "peak_busbw_GBps": max(r["busbw_GBps"] for r in rows),
            "large_msg_busbw_GBps": plateau_busbw(rows)}


def plateau_busbw(rows: list) -> Optional[float]:
    """The busbw a sweep levels off at: the median over its PLATEAU_SIZES largest sizes (all, when fewer).

    Why: an all_reduce_perf sweep runs to GiB sizes and busbw climbs until the last few, so a median over
    every size from 1 MiB quotes the climb, not the link. The largest sizes are where the link is full; their
    median, not their maximum, so that one lucky or slow size does not set the figure.
    """
    top = sorted((r for r in rows if r.get("busbw_GBps") is not None), key=lambda r: r["bytes"])[-PLATEAU_SIZES:]
    return statistics.median(r["busbw_GBps"] for r in top) if top else None


def busbw_at(rows, nbytes: float) -> float:
    """busbw (GB/s) a message of nbytes would see, from a result's rows: linear in log(bytes)-log(busbw)
    between the neighbouring measured sizes, clamped to the smallest/largest size outside the range.

    Bandwidth curves are straight-ish on log-log axes (latency-bound, then saturating), which is why
    nccl-tests sweeps sizes by a factor. Where a neighbour's busbw is 0 (n = 1) the log is undefined:
    then busbw is interpolated linearly against log(bytes).
    """
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    points = sorted((r["bytes"], r["busbw_GBps"]) for r in rows if r.get("busbw_GBps") is not None)
    if not points:
        raise ValueError("no rows with a busbw to interpolate")
    if nbytes <= points[0][0]:
        return points[0][1]
    if nbytes >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= nbytes <= x1:
            if x1 == x0:
                return y1
            w = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
            if y0 > 0 and y1 > 0:
                return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
            return y0 + w * (y1 - y0)
    # only a size that is not a number (NaN: every comparison false) finds no pair around it
    raise ValueError(f"no measured sizes around {nbytes} bytes: a size that is not a number")
