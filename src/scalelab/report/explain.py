"""Why not more: where each configuration's step went, what the network and the model predict.

Adds columns to the report's scaling frame (never changes a measured one; `mfu`, derived from a peak, is
recomputed where the user gives --peak_tflops): the busbw the all-reduce benchmark's single-op times give over
the run's real buckets, predicted communication and predicted efficiency
(perfmodel, fed with that busbw), cost and time-to-train; and writes one plain-words line per
configuration that names what limits scaling.
"""

import statistics
from typing import Optional

import pandas as pd

from scalelab import perfmodel
from scalelab.bench.collectives import COLLECTIVES as _KINDS
from scalelab.bench.collectives import collective_of
from scalelab.numeric import float_or_none
from scalelab.numeric import known as _ok
from scalelab.perfmodel import sharding
from scalelab.perfmodel.network import bandwidths, busbw_at
from scalelab.report import plausible
from scalelab.report.columns import link_label

COLLECTIVES = tuple(_KINDS)  # every collective the benchmark measures: bench_frame(found, COLLECTIVES)


def link_gbit(launch: dict):
    """The stated rate of an emulated link between nodes (Gbit/s), else None: a real network states none."""
    link = launch.get("link")
    return float_or_none(link.get("gbit")) if isinstance(link, dict) and launch.get("num_nodes", 1) > 1 and \
        link_label(link) else None


def bench_frame(found: list, collectives: tuple = ("all_reduce",)) -> pd.DataFrame:
    """Completed collective benchmark results, newest first. `log`: the file an nccl-tests log was read from
    (None for a result.json), with its `source` and `summary`, which the report prints it with.

    All-reduces by default: the benchmark's all-gather and reduce-scatter results share its kind, but their busbw
    is not DDP's all-reduce (a different bus factor and traffic); FSDP's step is priced with them (COLLECTIVES:
    what annotate and the forecast read, each row with its `collective`)."""
    rows = []
    for r in found:
        if r.get("kind") != "allreduce" or r.get("status") != "completed" or not r.get("rows"):
            continue
        if collective_of(r) not in collectives:
            continue
        launch, source = r["launch"], r.get("source") or {}
        rows.append({"run_id": r["run_id"], "world_size": launch["world_size"], "num_nodes": launch["num_nodes"],
                     "accelerator": launch.get("accelerator"), "backend": launch.get("backend"),
                     "device": (launch.get("device_names") or ["?"])[0], "created": r.get("created") or "",
                     "busbw_GBps": (r.get("summary") or {}).get("large_msg_busbw_GBps"),
                     "dtype": (r.get("config") or {}).get("dtype"), "rows": r["rows"],
                     "link": link_label(launch.get("link")),
                     "link_gbit": link_gbit(launch),
                     "log": r.get("_path") if source.get("format") == "nccl-tests" else None,
                     "source": source, "summary": r.get("summary") or {}, "collective": collective_of(r)})
    frame = pd.DataFrame(rows, columns=["run_id", "world_size", "num_nodes", "accelerator", "backend", "device",
                                        "created", "busbw_GBps", "dtype", "rows", "link", "link_gbit", "log", "source",
                                        "summary", "collective"])
    return frame.sort_values("created", ascending=False, kind="stable")  # equal dates: as found


PER_CONFIGURATION = 5  # repeats of one configuration read, the newest: of runs, of benchmarks (a site's nightly folder)
# what makes two collective benchmarks repeats of one another (bench_frame's columns)
BENCH_CONFIGURATION = ["collective", "world_size", "num_nodes", "accelerator", "backend", "device", "link", "dtype"]
SLOWED_SHARE = 0.05  # of the step: backward's slowdown beside the all-reduce said from here (or from 1 ms)


def newest_benchmarks(bench: pd.DataFrame) -> pd.DataFrame:
    """The newest PER_CONFIGURATION benchmarks of each configuration, newest first (bench: bench_frame's order, or
    rows of it): what a calibration, the busbw plot and report.md read (a site's nightly folder holds thousands of
    each; bench_for takes its newest PER_CONFIGURATION of those it combines)."""
    return bench.groupby(BENCH_CONFIGURATION, sort=False, dropna=False).head(PER_CONFIGURATION)


def bench_for(bench: pd.DataFrame, world_size: int, nodes: int, accelerator, device,
              link: str = "", collective: str = "all_reduce") -> Optional[pd.Series]:
    """The benchmark of `collective` at the same size, node count, hardware and link (frames.link_label: "" for a
    real network, else the emulated rate) as a training configuration.

    Repeated benchmarks are combined like repeated training runs: per message size, the median time
    (one run can land in a slow minute of a shared machine; the median of a few does not). Only runs of
    one dtype are combined: float32 where there is one, as DDP all-reduces float32 gradients even under
    bf16-mixed; else the newest run's dtype. Of those, the ones that timed single all-reduces where any did, and of
    those the newest PER_CONFIGURATION (bench: bench_frame's order; a site's nightly folder holds thousands, and a
    link mended last month must not be priced by years of the old one).
    """
    if bench.empty:
        return None
    match = bench[(bench["world_size"] == world_size) & (bench["num_nodes"] == nodes)
                  & (bench["accelerator"] == accelerator) & (bench["link"] == (link or ""))
                  & (bench["collective"] == collective)]
    if accelerator == "gpu":
        match = match[match["device"] == device]
    if match.empty:
        return None
    dtypes = match["dtype"].fillna("float32")
    match = match[dtypes == ("float32" if (dtypes == "float32").any() else dtypes.iloc[0])]
    single = match["rows"].map(timed_single)
    if single.any():  # as median_rows combines them: the count and labels are those of the runs it uses
        match = match[single]
    match = match.head(PER_CONFIGURATION)
    combined = match.iloc[0].copy()  # the newest run's labels; its rows replaced by the combined ones
    combined["rows"] = median_rows(list(match["rows"]), world_size)
    combined["runs"] = len(match)
    return combined


def timed_single(rows: list) -> bool:
    """Whether a benchmark's rows time single all-reduces (scalelab's `1 op`; all_reduce_perf logs do not)."""
    return bool(rows) and all(r.get("single_op_s") for r in rows)


def median_rows(runs: list, world_size: int) -> list:
    """Rows of several benchmark runs -> one row per message size: the median time over the runs that
    measured that size, and the bandwidths of that time (medians of times and of bandwidths disagree).

    Where some runs timed single all-reduces (`single_op_s`) and older ones did not, only the runs that did
    are used: mixing them would switch the prediction to back-to-back times for every size.
    """
    with_single = [rows for rows in runs if timed_single(rows)]
    by_size = {}
    for rows in with_single or runs:
        for r in rows:
            by_size.setdefault(r["bytes"], []).append(r)
    out = []
    for size, rs in sorted(by_size.items()):
        row = {"bytes": size, "time_s": statistics.median(r["time_s"] for r in rs)}
        row["algbw_GBps"], row["busbw_GBps"] = bandwidths(size, row["time_s"], world_size)
        if with_single:
            row["single_op_s"] = statistics.median(r["single_op_s"] for r in rs)
        out.append(row)
    return out


def bench_allreduce_time_s(rows: list, nbytes: float, n: int) -> float:
    """Time of one all-reduce of nbytes, from a benchmark's rows.

    Interpolated busbw inside the measured sizes; below the smallest size the smallest size's time
    (latency floor: a smaller message is not faster), above the largest the largest size's busbw.
    Where the benchmark timed single all-reduces (`single_op_s`: each started together on all ranks,
    as DDP issues its few buckets), those times are used rather than nccl-tests' back-to-back mean.
    """
    rows = sorted(rows, key=lambda r: r["bytes"])
    if rows and all(r.get("single_op_s") for r in rows):
        rows = [{"bytes": r["bytes"], "time_s": r["single_op_s"],
                 "busbw_GBps": perfmodel.busbw_from_time(r["bytes"], r["single_op_s"], n)}
                for r in rows]
    if nbytes <= rows[0]["bytes"]:
        return rows[0]["time_s"]
    return perfmodel.allreduce_time_from_busbw_s(nbytes, n, busbw_at(rows, nbytes))


def predicted_allreduce_s(rows: list, grad_bytes: float, buckets: float, n: int, bucket_bytes=None) -> float:
    """DDP all-reduces the gradient in buckets, one after another: their predicted times added.

    With the run's real bucket sizes when it recorded them (DDP's first bucket is small, 1 MB, and a
    small message gets a lower busbw); else `buckets` equal parts of the gradient.
    """
    if bucket_bytes:
        return sum(bench_allreduce_time_s(rows, b, n) for b in bucket_bytes)
    buckets = _bucket_count(buckets)
    return buckets * bench_allreduce_time_s(rows, grad_bytes / buckets, n)


def _bucket_count(buckets) -> int:
    """A run's median bucket count as a whole number of messages (at least one; unknown = one)."""
    return max(1, int(round(buckets))) if _ok(buckets) else 1


def as_allreduce(rows: list, collective: str, n: int) -> list:
    """A benchmark's rows as the all-reduce rows they would be (perfmodel.sharding: an all-gather or a reduce-scatter
    of S is half an all-reduce of S): times doubled, and the bandwidths of those times as an all-reduce's."""
    if collective == "all_reduce":
        return rows
    out = []
    for row in rows:
        doubled = {"bytes": row["bytes"], "time_s": row["time_s"] / sharding.HALF}
        doubled["algbw_GBps"], doubled["busbw_GBps"] = bandwidths(row["bytes"], doubled["time_s"], n)
        if row.get("single_op_s"):
            doubled["single_op_s"] = row["single_op_s"] / sharding.HALF
        out.append(doubled)
    return out


def predicted_comm(bench: pd.DataFrame, r) -> tuple:
    """(benchmark row, predicted seconds, bytes as all-reduced) of one configuration's communication per step, from
    the benchmarks at its shape; (None, None, None) where none ran (or one device).

    DDP: its buckets as --comm_hook sent them (fp16/bf16 halve them, PowerSGD sends low-rank factors), else as DDP
    filled them, else the whole gradient. FSDP: what its fingerprint saw it gather and scatter, each collective
    priced by its own benchmark where one ran (gloo's reduce-scatter costs a whole all-reduce), else as half an
    all-reduce (perfmodel.sharding: NCCL's ring)."""
    if r.world_size < 2:
        return None, None, None
    shape = (r.world_size, r.num_nodes, r.accelerator, r.device, r.link)
    if r.strategy == "fsdp":
        wire = sharding.Wire(*r.wire) if isinstance(r.wire, tuple) else None
        total, first = 0.0, None
        for collective, nbytes, calls, weight in sharding.cost_terms(wire) if wire else ():
            row = bench_for(bench, *shape, collective=collective)
            row = bench_for(bench, *shape) if row is None else row
            if row is None:
                return None, None, None
            rows = as_allreduce(row["rows"], row["collective"], r.world_size)
            total += weight * calls * bench_allreduce_time_s(rows, nbytes / calls, r.world_size)
            first = row if first is None else first
        return (first, total, wire.allreduce_terms()[0]) if first is not None else (None, None, None)
    bench_row = bench_for(bench, *shape)
    sizes = next((b for b in (r.wire_bytes, r.bucket_bytes) if isinstance(b, tuple)), None)
    moved = sum(sizes) if sizes else r.grad_bytes
    if bench_row is None or not _ok(moved) or moved <= 0:
        return bench_row, None, None
    return bench_row, predicted_allreduce_s(bench_row["rows"], moved, r.buckets, r.world_size, sizes), moved


def annotate(scaling: pd.DataFrame, bench: pd.DataFrame, peak_tflops: Optional[float] = None,
             gpu_hour_price: Optional[float] = None, token_budget: Optional[float] = None) -> pd.DataFrame:
    """The scaling frame plus the predicted and money columns; `mfu` recomputed where peak_tflops is given, and
    `peak_tflops` with it."""
    out = scaling.copy()
    new = {k: [] for k in ("bench_busbw_GBps", "bench_runs", "predicted_allreduce_s",
                           "predicted_efficiency_no_overlap", "predicted_efficiency_overlap", "mfu", "peak_tflops",
                           "cost_per_1k_samples", "hours_for_token_budget", "cost_for_token_budget")}
    for r in out.itertuples():
        bench_row, pred, moved = predicted_comm(bench, r)
        busbw = eff_lo = eff_hi = None
        if pred is not None:
            # the benchmark's busbw over this run's buckets: comparable with the busbw DDP got
            busbw = perfmodel.busbw_from_time(moved, pred, r.world_size) if pred > 0 else None
            if r.baseline_world_size == 1 and _ok(r.baseline_step_s) and pred > 0:
                # busbw moves those bytes in `pred` seconds: the model then reproduces pred; the baseline's
                # step is an optimizer step (K batches with --accumulate_grad_batches K): one all-reduce per K
                p = perfmodel.predict_from_busbw(r.baseline_step_s, moved, r.world_size, r.num_nodes,
                                                 busbw, r.scaling or "weak")
                eff_lo, eff_hi = p.efficiency_no_overlap, p.efficiency_overlap
        elif r.world_size == 1:
            eff_lo = eff_hi = 1.0  # the baseline itself: a group's fewest devices (frames.scaling_frame)
        new["bench_busbw_GBps"].append(busbw)
        new["bench_runs"].append(bench_row["runs"] if bench_row is not None else None)
        new["predicted_allreduce_s"].append(pred)
        new["predicted_efficiency_no_overlap"].append(eff_lo)
        new["predicted_efficiency_overlap"].append(eff_hi)
        mfu, peak = r.mfu, getattr(r, "peak_tflops", None)
        if peak_tflops and _ok(r.tflops_per_device):  # the peak the MFU is against goes with it (a finding names it)
            mfu, peak = perfmodel.mfu(r.tflops_per_device, peak_tflops), peak_tflops
        new["mfu"].append(mfu)
        new["peak_tflops"].append(peak)
        samples_per_s = r.samples_per_s if _ok(r.samples_per_s) else None
        new["cost_per_1k_samples"].append(gpu_hour_price * r.world_size / 3600 / samples_per_s * 1000
                                          if gpu_hour_price and samples_per_s else None)
        hours = token_budget / r.tokens_per_s / 3600 if token_budget and _ok(r.tokens_per_s) else None
        new["hours_for_token_budget"].append(hours)
        new["cost_for_token_budget"].append(hours * r.world_size * gpu_hour_price if hours and gpu_hour_price else None)
    for k, v in new.items():
        out[k] = pd.to_numeric(pd.Series(v, index=out.index, dtype="object"), errors="coerce")
    return out


FSDP_UNSPLIT = ("FSDP's compute alone is not isolated (a no-sync step still all-gathers, so no probe step runs "
                "without communication): how much of its collectives hid behind compute is not measured.")


def fsdp_line(r) -> str:
    """What an FSDP configuration's step is made of, as far as it is measured: its collectives' busy time as they
    ran (the timed all-gathers and reduce-scatters), their price alone from the benchmarks, the step's growth."""
    said = []
    if _ok(r.collectives_s) and _ok(r.step_s):
        said.append(f"its all-gathers and reduce-scatters were busy {r.collectives_s * 1e3:,.0f} ms of the "
                    f"{r.step_s * 1e3:,.0f} ms step, as they ran beside compute")
    if _ok(r.predicted_allreduce_s):
        said.append(f"the benchmarks price them at {r.predicted_allreduce_s * 1e3:,.0f} ms alone")
    if _ok(r.baseline_step_s) and _ok(r.step_s) and r.baseline_world_size == 1:
        said.append(f"the step is {(r.step_s - r.baseline_step_s) * 1e3:,.0f} ms longer than at 1 device")
    return ("FSDP: " + "; ".join(said) + ". " if said else "") + FSDP_UNSPLIT


def limiting_line(r) -> Optional[str]:
    """One row of the annotated frame -> what limits its scaling, in plain words (None for the baseline)."""
    if r.world_size == r.baseline_world_size:
        return None
    where = plausible.where(r)  # the link too: two rungs over two links are two lines, not one name twice
    head = (f"{where}: efficiency {r.efficiency * 100:.0f} %." if _ok(r.efficiency) else
            f"{where}: no efficiency (not the baseline's job).")
    if r.strategy == "fsdp":
        return f"{head} {fsdp_line(r)}"
    if not _ok(r.compute_s):
        return head + " No communication measurement in these runs (--comm_probe_every 0, or an older scalelab)."
    causes = []
    expected = (r.baseline_compute_s if r.scaling != "strong" else
                r.baseline_compute_s * r.baseline_world_size / r.world_size)
    slower = r.compute_s - expected
    if _ok(expected) and slower > 0.1 * expected:
        why = slower_why(r)
        base = f"{r.baseline_world_size} device{'s' if r.baseline_world_size > 1 else ''}"
        base = f"at {base}" if r.scaling != "strong" else (  # each device computes its share of the same batch
            f"the compute at {base} × {r.baseline_world_size}/{r.world_size} (strong scaling: each device has "
            f"{r.baseline_world_size}/{r.world_size} of the batch)")
        causes.append((slower, f"slower compute per device: {_ms(slower)} ms more per step than {base}{why}"))
    noisy = split_within_noise(r)
    if noisy:
        comm = (f"communication: not separable from compute in these runs (the no-sync probe steps were "
                f"{(r.compute_s / r.synced_s - 1) * 100:.0f} % slower than the normal steps, which is noise; more "
                "--max_steps gives more probe steps)")
    elif not _ok(r.waited_s) and not _ok(r.allreduce_s):  # a comm record with compute_s alone: say so, not "nan"
        comm = "communication: not recorded in these runs (the result's comm record has no waited or all-reduce time)"
    else:
        detail = _comm_detail(r)
        comm = (f"communication: {r.comm_share * 100:.0f} % of the step ({detail})" if _ok(r.comm_share)
                else f"communication: {detail}")  # no share recorded: none printed, not a 0 %
    inter = f"the {r.link} inter-node link" if r.link else "the inter-node link"
    link = inter if r.num_nodes > 1 else ("NVLink/PCIe within the node" if r.accelerator == "gpu"
                                                       else "the local gloo transport")
    if _ok(r.ddp_busbw_GBps):
        comm += f"; {link} delivered {_gbps(r.ddp_busbw_GBps)} busbw to DDP"
        if _ok(r.bench_busbw_GBps):
            comm += f" (all-reduce benchmark: {_gbps(r.bench_busbw_GBps)} at these bucket sizes)"
    if _ok(r.allreduce_alone_s) and r.allreduce_alone_s > 0:
        lost = r.allreduce_s - r.allreduce_alone_s
        if lost > 0.15 * r.allreduce_alone_s:
            shared = "the node's cores" if r.accelerator == "cpu" else "the GPU's SMs and memory bandwidth"
            comm += (f". Alone, the same all-reduce takes {_ms(r.allreduce_alone_s)} ms: running beside "
                     f"backward cost it {_ms(lost)} ms, because compute and communication share {shared}")
    causes.append((r.waited_s if _ok(r.waited_s) else 0.0, comm))
    causes.sort(key=lambda c: -c[0])
    texts = [text for _, text in causes]
    if not _ok(r.waited_s) and len(causes) == 1:  # no wait measured: nothing says communication limits it
        return f"{head} {comm[0].upper()}{comm[1:]}."
    if _ok(r.comm_share) and r.comm_share < 0.05 and len(causes) == 1 and not noisy:
        texts[0] = "nothing large: " + texts[0]
    return f"{head} Limited by {texts[0]}." + "".join(f" {t[0].upper()}{t[1:]}." for t in texts[1:])


def _comm_detail(r) -> str:
    """What the step lost to its all-reduce, from what the comm record holds: the wait, the all-reduce's own time,
    how much of it backward hid."""
    if not _ok(r.allreduce_s):
        return f"{_ms(r.waited_s)} ms waited; the all-reduce's own time was not recorded"
    if not _ok(r.waited_s):
        return f"the all-reduce took {_ms(r.allreduce_s)} ms; the time the step waited for it was not recorded"
    if r.waited_s > 1.1 * r.allreduce_s and getattr(r, "waited_in_step", 0) != 1:
        # read against the probes (an older result), the step lost more than the all-reduce's own duration: compute
        # ran slower beside it (read in the step, the wait is after backward's end; its slowdown is slowed_s's)
        return (f"{_ms(r.waited_s)} ms lost, more than the {_ms(r.allreduce_s)} ms the "
                "all-reduce itself took: compute also ran slower while it was in flight")
    hidden = r.hidden_fraction if _ok(r.hidden_fraction) else 0
    return (f"{_ms(r.waited_s)} ms waited; {hidden * 100:.0f} % "
            f"of the {_ms(r.allreduce_s)} ms all-reduce hidden behind backward{_slowed(r)}")


def _slowed(r) -> str:
    """What hiding the all-reduce cost backward (timing.backward_slowed), where it is a tenth of the all-reduce and
    1 ms or SLOWED_SHARE of the step, whichever is less (the demo's 3.3 ms MLP step: from 0.17 ms)."""
    slowed, step = getattr(r, "slowed_s", None), getattr(r, "step_s", None)
    floor = min(1e-3, SLOWED_SHARE * step) if _ok(step) and step > 0 else 1e-3
    if not (_ok(slowed) and slowed >= max(floor, 0.1 * r.allreduce_s)):
        return ""
    shared = "the node's cores" if r.accelerator == "cpu" else "the GPU's SMs and memory bandwidth"
    return f", though backward itself ended {_ms(slowed)} ms later than with nothing beside it, sharing {shared}"


def slower_why(r) -> str:
    """Why compute per device ran slower, most certain first: ranks we put on shared cores, then other work on
    the cores (measured: the scheduler's wait, measure/cpushare.py), and only then, on CPU, what ranks on their own
    cores still share (memory bandwidth, caches), with the measured share that rules contention out."""
    if r.oversubscribed:
        return " (ranks shared cores: oversubscribed)"
    if r.starved:
        return f" ({r.starved})"
    if r.accelerator != "cpu":
        return ""
    measured = (f"each rank had its core {r.had_cpu * 100:.0f} % of the time it was ready to run; "
                if _ok(r.had_cpu) else "")
    return f" (CPU rehearsal: {measured}the ranks still share this machine's memory bandwidth and caches)"


def split_within_noise(r) -> bool:
    """True where waited_s was read against the probe steps (a result from before the step's backward mark) and
    normal steps reached gradients-ready clearly sooner than those no-sync probe steps.

    Communication cannot make a step faster: then the few probes were slow by chance, and waited/hidden
    (clamped at 0 / 100 %) would state a perfect overlap that was never measured. Read in the step itself, the wait
    is measured whatever the probes did.
    """
    synced = getattr(r, "synced_s", None)
    return (r.world_size > 1 and getattr(r, "waited_in_step", 0) != 1 and _ok(synced) and _ok(r.compute_s)
            and synced < 0.95 * r.compute_s)


def _ms(seconds: float) -> str:
    """Milliseconds to two digits below 10 ms: not "1 ms lost, more than the 1 ms" (1.4, 1.2), nor "0.4 ms, 0.4 ms
    alone: 0.1 ms lost" (0.44, 0.36)."""
    ms = seconds * 1e3
    return f"{ms:.2f}" if abs(ms) < 0.995 else f"{ms:.1f}" if abs(ms) < 9.95 else f"{ms:,.0f}"  # as they round


def _gbps(x: float) -> str:
    return f"{x:.3g} GB/s"
