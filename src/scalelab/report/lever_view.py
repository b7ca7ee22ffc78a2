"""What each lever bought: configurations that differ in one lever only, side by side.

A lever (train.py's --strategy, --accumulate_grad_batches, --comm_hook, --bucket_cap_mb, --static_graph) is part of the
workload, so each setting is its own scaling group with its own 1-device baseline. Groups whose workloads are
equal but for one lever form a family; for each multi-device configuration of the family this shows the
efficiency measured next to the predicted range, the all-reduce per optimizer step measured and predicted, the
bytes on the wire, and the training loss reached at an equal number of samples: a lever that trains faster
but learns less per sample (a larger global batch, a compressed gradient) must show it here.
"""

from __future__ import annotations

import json
import statistics

import pandas as pd
from tabulate import tabulate

from scalelab.config import LEVER_DEFAULTS, LEVERS
from scalelab.perfmodel import sharding
from scalelab.report.cells import fmt_num, fmt_pct, nodes_cell, predicted_range


def _without(group: str, lever: str) -> str:
    """The group's key without `lever` (and, for the strategy, without the probe cadence: FSDP takes no probe step,
    config._check_strategy, so a DDP group and its FSDP twin differ in both)."""
    key = json.loads(group)
    drop = {lever, "comm_probe_every"} if lever == "strategy" else {lever}
    key["workload"] = {k: v for k, v in key["workload"].items() if k not in drop}
    return json.dumps(key, sort_keys=True)


def families(scaling: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """[(lever, rows)]: multi-device rows of groups equal but for `lever`, which takes two or more values."""
    if scaling.empty or not set(LEVERS) <= set(scaling.columns):
        return []
    out = []
    for lever in LEVERS:
        rest = scaling["group"].map(lambda g, lever=lever: _without(g, lever))
        for _, rows in scaling.groupby(rest, sort=False):
            if rows[lever].astype(str).nunique() > 1:
                multi = rows[rows["world_size"] > rows["baseline_world_size"]]
                if not multi.empty:  # the default setting first, then the others in order
                    order = multi.assign(_set=multi[lever] != LEVER_DEFAULTS[lever])
                    out.append((lever, order.sort_values(["link", "world_size", "_set", lever]).drop(columns="_set")))
    return out


def loss_at(curve, samples_per_batch: float, samples: float):
    """The training loss after `samples` samples: the mean of the last tenth of the batches up to there."""
    if not curve or not samples_per_batch:
        return None
    curve = tuple(curve)  # a columns.Curve is not indexed
    n = min(len(curve), int(samples // samples_per_batch))
    if n < 1:
        return None
    return statistics.fmean(curve[max(0, n - max(1, n // 10)):n])


def equal_samples(rows: pd.DataFrame) -> float:
    """The samples every configuration of a family trained on (the fewest among them)."""
    return min((len(c) * s for c, s in zip(rows["loss_curve"], rows["samples_per_batch"]) if c and s),
               default=0)


def setting(lever: str, value) -> str:
    """One lever's setting in words, as titles and plot labels name it ("accumulate 4", "comm hook bf16")."""
    if lever == "static_graph":
        return "static graph" if value else "no static graph"
    if lever == "strategy":
        return {"ddp": "DDP (replicated)", "fsdp": "FSDP (sharded)"}.get(value, str(value))
    words = {"accumulate_grad_batches": "accumulate {}", "comm_hook": "comm hook {}", "bucket_cap_mb": "buckets {} MB"}
    return words[lever].format(_show(value))


def caption(first) -> str:
    """The group title's note of the levers set away from their defaults (" · accumulate 4 · comm hook bf16")."""
    return "".join(f" · {setting(k, first.get(k))}" for k, default in LEVER_DEFAULTS.items()
                   if k in first and pd.notna(first.get(k)) and first.get(k) != default)


def _show(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


HEADERS = ["world size", "nodes", "step ms", "all-reduce ms", "predicted ms", "MB on the wire", "efficiency",
           "predicted eff."]


def memory_cell(r) -> str:
    """'31.20 (33.00)': one rank's measured tensor peak in GB, the estimate beside it; '— (0.13)' where not measured."""
    return f"{fmt_num(r.peak_memory_bytes / 1e9, ',.2f')} ({fmt_num(r.memory_estimate_bytes / 1e9, ',.2f')})"


def render(scaling: pd.DataFrame, fmt: str) -> list[str]:
    """One table per family: the lever's settings side by side at each multi-device configuration."""
    out = []
    for lever, rows in families(scaling):
        samples = equal_samples(rows)
        out.append(f"What {lever} bought (each setting is its own group, with its own 1-device baseline; "
                   "all-reduce per optimizer step, measured and predicted; loss: the training loss after "
                   f"{samples:,.0f} samples, the fewest any of them trained on)")
        body = []
        # a probe step skips its update: runs of another probe cadence (FSDP takes none) learned from fewer steps
        cadences = {json.loads(g)["workload"].get("comm_probe_every") for g in rows["group"]}
        for r in rows.itertuples():
            ddp = r.strategy != "fsdp"  # FSDP: its gathers' and scatters' busy time and wire stand for the all-reduce's
            # what the fingerprint saw: FSDP's gathers and scatters as the all-reduce bytes they cost
            seen = sharding.Wire(*r.wire).allreduce_terms()[0] if isinstance(r.wire, tuple) else None
            wire = (sum(r.wire_bytes) if isinstance(r.wire_bytes, tuple) else seen or r.grad_bytes) if ddp else seen
            body.append([_show(getattr(r, lever)), r.world_size, nodes_cell(r), fmt_num(r.step_s * 1e3, ",.1f"),
                         fmt_num((r.allreduce_s if ddp and pd.notna(r.allreduce_s) else r.collectives_s) * 1e3,
                                 ",.1f"),
                         fmt_num(r.predicted_allreduce_s * 1e3, ",.1f"), fmt_num(wire / 1e6 if wire else None, ",.2f"),
                         fmt_pct(r.efficiency), predicted_range(r),
                         fmt_num(loss_at(r.loss_curve, r.samples_per_batch, samples), ".3f")
                         if len(cadences) == 1 else "—", *([memory_cell(r)] if lever == "strategy" else [])])
        memory = ["GB/rank (est.)"] if lever == "strategy" else []  # what sharding saves
        out.append(tabulate(body, headers=[lever, *HEADERS, "loss", *memory], tablefmt=fmt, disable_numparse=True))
        if (rows["strategy"] == "fsdp").any():
            out.append("  FSDP: its all-gathers and reduce-scatters in the all-reduce's place: busy as they ran, "
                       "predicted from the benchmarks of each, and on the wire as the all-reduce bytes they cost (half "
                       "their sizes: perfmodel.sharding)")
        if memory:
            out.append("  GB/rank: the most one rank's tensors held in training (a GPU's allocator; not measured on a "
                       "CPU), and perfmodel.memory's estimate for this strategy and world size")
        if len(cadences) > 1:
            out.append("  loss: — (the runs took probe steps at different cadences, and a probe step skips its "
                       "update: not the same training)")
        out.append("")
    return out
